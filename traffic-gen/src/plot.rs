//! `--plot FILE.svg`: a run's pictures, drawn with the `plotters` crate's
//! SVG backend (no font library needed: the SVG names its font).
//!
//! * **Latency by percentile**, as HdrHistogram's plotter draws it: every
//!   distribution of the run on one chart, the percentile on a log scale of
//!   `1 / (1 - p)` (so 90%, 99%, 99.9% ... are evenly spaced and the tail is
//!   visible), latency in microseconds on a log scale.
//! * For each shaped egress queue, when the run sampled it: the backlog
//!   (packets) and SFB's marking probabilities (the largest bin's and the
//!   average) over capture time, one panel each.

use std::path::Path;

use anyhow::{Context, Result, anyhow};
use hdrhistogram::Histogram;
use plotters::prelude::*;
use serde::Serialize;

/// One sample of a shaped port's queue.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct QueueSample {
    /// Capture time, ns.
    pub t_ns: u64,
    /// Copies queued.
    pub backlog_packets: u64,
    /// Bytes queued.
    pub backlog_bytes: u64,
    /// SFB's largest bin marking probability (0..=1).
    pub maxprob: f64,
    /// SFB's average marking probability over the bins in use (0..=1).
    pub avgprob: f64,
}

/// The largest `1 / (1 - p)` drawn (99.9999%).
const X_MAX: f64 = 1e6;

/// `(x, latency us)` points of `h` for the percentile chart.
fn percentile_points(h: &Histogram<u64>) -> Vec<(f64, f64)> {
    let mut pts = Vec::new();
    for v in h.iter_quantiles(5) {
        let q = v.quantile_iterated_to();
        let x = if q >= 1.0 {
            X_MAX
        } else {
            (1.0 / (1.0 - q)).min(X_MAX)
        };
        let us = (v.value_iterated_to() as f64 / 1e3).max(1e-3);
        pts.push((x, us));
    }
    pts
}

/// The percentile a chart x stands for, as HdrHistogram's plotter labels it.
fn percentile_label(x: &f64) -> String {
    let p = 100.0 * (1.0 - 1.0 / x.max(1.0));
    if p < 99.0 {
        format!("{p:.0}%")
    } else {
        // As many decimals as the nines need.
        let decimals = (-(100.0 - p).log10()).round().max(0.0) as usize;
        format!("{p:.decimals$}%")
    }
}

const COLORS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

/// The legend of a chart's labelled series, top left.
fn draw_legend<'a, X, Y>(
    c: &mut ChartContext<'a, SVGBackend<'a>, Cartesian2d<X, Y>>,
) -> Result<(), DrawingAreaErrorKind<std::io::Error>>
where
    X: Ranged,
    Y: Ranged,
{
    c.configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
}

/// Draws `latencies` (name, histogram in ns) and `queues` (port name,
/// samples) into an SVG at `path`, titled `title`.
///
/// # Errors
/// The file cannot be written, or nothing to draw.
pub fn plot_svg(
    path: &Path,
    title: &str,
    latencies: &[(&str, &Histogram<u64>)],
    queues: &[(String, Vec<QueueSample>)],
) -> Result<()> {
    let lat: Vec<(&str, Vec<(f64, f64)>)> = latencies
        .iter()
        .filter(|(_, h)| !h.is_empty())
        .map(|(n, h)| (*n, percentile_points(h)))
        .collect();
    let queues: Vec<&(String, Vec<QueueSample>)> =
        queues.iter().filter(|(_, s)| s.len() > 1).collect();
    if lat.is_empty() && queues.is_empty() {
        return Err(anyhow!("--plot {}: nothing to draw", path.display()));
    }
    let panels = usize::from(!lat.is_empty()) + 2 * queues.len();
    let height = 420 * u32::try_from(panels).unwrap_or(1);
    let root = SVGBackend::new(path, (900, height)).into_drawing_area();
    let err = |e: &dyn std::fmt::Display| anyhow!("--plot {}: {e}", path.display());
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let areas = root.split_evenly((panels, 1));
    let mut area = areas.iter();
    if !lat.is_empty() {
        let a = area.next().context("a panel")?;
        let (lo, hi) = lat
            .iter()
            .flat_map(|(_, p)| p.iter().map(|&(_, y)| y))
            .fold((f64::MAX, 0f64), |(lo, hi), y| (lo.min(y), hi.max(y)));
        let (lo, hi) = (lo.max(1e-3) / 1.5, hi.max(lo * 2.0) * 1.5);
        let mut c = ChartBuilder::on(a)
            .caption(
                format!("{title}: latency by percentile"),
                ("sans-serif", 20),
            )
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d((1f64..X_MAX).log_scale(), (lo..hi).log_scale())
            .map_err(|e| err(&e))?;
        c.configure_mesh()
            .x_desc("percentile")
            .y_desc("latency (us)")
            .x_label_formatter(&percentile_label)
            .draw()
            .map_err(|e| err(&e))?;
        for (i, (name, pts)) in lat.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            c.draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))
                .map_err(|e| err(&e))?
                .label(*name)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        }
        draw_legend(&mut c).map_err(|e| err(&e))?;
    }
    for (name, samples) in queues {
        let t0 = samples.first().map_or(0, |s| s.t_ns);
        let secs = |s: &QueueSample| s.t_ns.saturating_sub(t0) as f64 / 1e9;
        let t_max = samples.iter().map(secs).fold(1e-3, f64::max);
        let b_max = samples
            .iter()
            .map(|s| s.backlog_packets as f64)
            .fold(1.0, f64::max);
        let a = area.next().context("a panel")?;
        let mut c = ChartBuilder::on(a)
            .caption(format!("{title}: {name} backlog"), ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(0f64..t_max, 0f64..b_max * 1.1)
            .map_err(|e| err(&e))?;
        c.configure_mesh()
            .x_desc("capture time (s)")
            .y_desc("queued (packets)")
            .draw()
            .map_err(|e| err(&e))?;
        c.draw_series(LineSeries::new(
            samples.iter().map(|s| (secs(s), s.backlog_packets as f64)),
            COLORS[0].stroke_width(2),
        ))
        .map_err(|e| err(&e))?;
        let a = area.next().context("a panel")?;
        let mut c = ChartBuilder::on(a)
            .caption(
                format!("{title}: {name} SFB marking probability"),
                ("sans-serif", 20),
            )
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(0f64..t_max, 0f64..1.05)
            .map_err(|e| err(&e))?;
        c.configure_mesh()
            .x_desc("capture time (s)")
            .y_desc("probability")
            .draw()
            .map_err(|e| err(&e))?;
        for (i, (label, f)) in [
            (
                "maxprob",
                (|s: &QueueSample| s.maxprob) as fn(&QueueSample) -> f64,
            ),
            ("avgprob", |s: &QueueSample| s.avgprob),
        ]
        .into_iter()
        .enumerate()
        {
            let color = COLORS[(i + 1) % COLORS.len()];
            c.draw_series(LineSeries::new(
                samples.iter().map(|s| (secs(s), f(s))),
                color.stroke_width(2),
            ))
            .map_err(|e| err(&e))?
            .label(label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        }
        draw_legend(&mut c).map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_labels_as_hdrhistogram_plots_them() {
        assert_eq!(percentile_label(&1.0), "0%");
        assert_eq!(percentile_label(&10.0), "90%");
        assert_eq!(percentile_label(&100.0), "99%");
        assert_eq!(percentile_label(&1000.0), "99.9%");
        assert_eq!(percentile_label(&1e6), "99.9999%");
    }

    #[test]
    fn draws_an_svg_with_every_series() {
        let mut h = Histogram::<u64>::new(3).unwrap();
        for v in 1..=10_000u64 {
            h.record(v * 1000).unwrap();
        }
        let samples: Vec<QueueSample> = (0..50)
            .map(|i| QueueSample {
                t_ns: i * 100_000_000,
                backlog_packets: i * 3,
                backlog_bytes: i * 3000,
                maxprob: i as f64 / 50.0,
                avgprob: i as f64 / 100.0,
            })
            .collect();
        let path = std::env::temp_dir().join(format!("bloomplane-plot-{}.svg", std::process::id()));
        plot_svg(
            &path,
            "test",
            &[("processing", &h), ("sojourn", &h)],
            &[("r-b".into(), samples)],
        )
        .unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        for s in [
            "<svg",
            "latency by percentile",
            "processing",
            "sojourn",
            "r-b backlog",
            "maxprob",
            "99.9%",
        ] {
            assert!(svg.contains(s), "{s} missing");
        }
        std::fs::remove_file(&path).unwrap();
        let e = plot_svg(&path, "x", &[], &[]).unwrap_err();
        assert!(format!("{e}").contains("nothing to draw"));
    }
}
