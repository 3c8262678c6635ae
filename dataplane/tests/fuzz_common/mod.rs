//! The bodies of the cargo-fuzz targets, in one place.
//!
//! Each target in `fuzz/fuzz_targets/` is one line,
//! `fuzz_target!(|data: &[u8]| fuzz_common::<target>::check(data))`, and
//! `tests/fuzz_props.rs` runs the same `check` functions on stable over the
//! public captures and proptest mutations of them. Both include this folder
//! with `#[path]`, so it uses only the dataplane's public API. A `check`
//! panics when an invariant breaks; any input is valid.
//!
//! | target      | input                                   | checks |
//! |-------------|-----------------------------------------|--------|
//! | `parse`     | one frame                               | [`parse::check`] |
//! | `capture`   | a capture file                          | [`capture::check`] |
//! | `config`    | a TOML config                           | [`config::check`] |
//! | `icarus`    | a control byte, then one frame          | [`icarus::check`] |
//! | `multicast` | a settings byte, then [framed](frames) frames | [`multicast::check`] |
//! | `chain`     | a settings byte, then [framed](frames) frames | [`chain::check`] |
//! | `digest`    | a form byte, then a query string or an IP datagram | [`digest::check`] |
//! | `peer`      | a settings byte, then [framed](frames) datagrams | [`peer::check`] |
//!
//! [`seeds`] builds each target's starting inputs from the public captures
//! and the example configs (`cargo run -p dataplane --example fuzz_seeds`).
#![allow(dead_code)]

pub mod capture;
pub mod chain;
pub mod config;
pub mod digest;
pub mod icarus;
pub mod multicast;
pub mod parse;
pub mod peer;
pub mod seeds;

use dataplane::clock::Timestamp;
use dataplane::wire::LinkType;

/// The most frames one multi-frame input is split into (the rest is
/// ignored), so one input costs a bounded time.
pub const MAX_FRAMES: usize = 512;

/// Bytes before each frame of a multi-frame input.
pub const FRAME_HEADER: usize = 3;

/// One frame of a multi-frame input.
#[derive(Debug, Clone, Copy)]
pub struct FrameIn<'a> {
    /// The ingress port (0..=3: the test chains have 3 ports, so 3 is a
    /// port the config does not know).
    pub ingress: u8,
    /// The link type the bytes start with.
    pub link: LinkType,
    /// How far the clock moves before this frame ([`step_ns`]).
    pub step: u8,
    /// The bytes.
    pub data: &'a [u8],
}

/// The link type of control bits `0..4`.
pub fn link_of(bits: u8) -> LinkType {
    match bits & 3 {
        1 => LinkType::RawIp,
        2 => LinkType::LinuxSll,
        _ => LinkType::Ethernet,
    }
}

/// The control bits of `link` (`None`: a link the targets do not feed).
pub fn link_bits(link: LinkType) -> Option<u8> {
    match link {
        LinkType::Ethernet => Some(0),
        LinkType::RawIp => Some(1),
        LinkType::LinuxSll => Some(2),
        LinkType::Unknown(_) => None,
    }
}

/// Nanoseconds the clock moves for time step `step` (0..16): none, then
/// powers of 4 from 4 us (step 1) to about 18 minutes (step 15), so one
/// input can cross heavy-flow epochs, shaper releases and membership
/// expiry (260 s).
pub fn step_ns(step: u8) -> u64 {
    match step & 15 {
        0 => 0,
        s => 1_000u64 << (2 * u32::from(s)),
    }
}

/// The smallest step that moves the clock by at least `ns` (15 at most).
pub fn step_for(ns: u64) -> u8 {
    (0..16).find(|&s| step_ns(s) >= ns).unwrap_or(15)
}

/// The control byte: ingress in bits 0-1, link in bits 2-3, step in 4-7.
pub fn ctrl(ingress: u8, link_bits: u8, step: u8) -> u8 {
    (ingress & 3) | ((link_bits & 3) << 2) | ((step & 15) << 4)
}

/// Splits a multi-frame input (after its settings byte) into frames: each
/// is `[ctrl, len_hi, len_lo]` then `len` bytes, `len` cut to what is
/// left; a tail shorter than the header is one last frame of those bytes.
/// At most [`MAX_FRAMES`].
pub fn frames(mut data: &[u8]) -> impl Iterator<Item = FrameIn<'_>> {
    std::iter::from_fn(move || {
        let (&c, rest) = data.split_first()?;
        let (len, rest) = match rest {
            [hi, lo, rest @ ..] => (usize::from(u16::from_be_bytes([*hi, *lo])), rest),
            _ => (rest.len(), &rest[rest.len()..]),
        };
        let (frame, rest) = rest.split_at(len.min(rest.len()));
        data = rest;
        Some(FrameIn {
            ingress: c & 3,
            link: link_of(c >> 2),
            step: c >> 4,
            data: frame,
        })
    })
    .take(MAX_FRAMES)
}

/// Appends one frame in the form [`frames`] reads (cut to 65535 bytes).
pub fn encode(out: &mut Vec<u8>, ctrl: u8, frame: &[u8]) {
    let frame = &frame[..frame.len().min(usize::from(u16::MAX))];
    out.push(ctrl);
    out.extend_from_slice(&(frame.len() as u16).to_be_bytes());
    out.extend_from_slice(frame);
}

/// The clock of a multi-frame input: starts at 1 s, moves by each frame's
/// step.
#[derive(Debug, Clone, Copy)]
pub struct Clock(u64);

impl Default for Clock {
    fn default() -> Self {
        Clock(1_000_000_000)
    }
}

impl Clock {
    /// Moves by `step` and returns the new time.
    pub fn advance(&mut self, step: u8) -> Timestamp {
        self.0 = self.0.saturating_add(step_ns(step));
        Timestamp::from_nanos(self.0)
    }

    /// The time now.
    pub fn now(&self) -> Timestamp {
        Timestamp::from_nanos(self.0)
    }
}
