//! What happens to a packet ([`Verdict`]), why one is dropped
//! ([`DropReason`]), and drops counted per reason ([`DropCounters`]).

use core::fmt;

use super::PortSet;
use crate::wire::Malformed;

macro_rules! drop_reasons {
    ($( $(#[$doc:meta])* $variant:ident => $name:literal, )+) => {
        /// Why a packet was dropped.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum DropReason {
            /// The frame did not parse (with
            /// [`MalformedPolicy::Drop`](crate::pipeline::MalformedPolicy::Drop)).
            Malformed(Malformed),
            $( $(#[$doc])* $variant, )+
        }

        impl DropReason {
            const OTHERS: [DropReason; [$($name,)+].len()] = [$(DropReason::$variant,)+];

            /// Number of distinct reasons (every malformed reason counts as one).
            pub const COUNT: usize = Malformed::COUNT + Self::OTHERS.len();

            /// Stable snake_case name: the [`Malformed::name`] of a malformed
            /// frame, e.g. `truncated_l2`, or the stage's reason, e.g. `loop`.
            pub fn name(self) -> &'static str {
                match self {
                    DropReason::Malformed(m) => m.name(),
                    $( DropReason::$variant => $name, )+
                }
            }

            /// Dense index in `0..COUNT`: malformed reasons first, in
            /// [`Malformed::ALL`] order.
            #[inline]
            pub fn index(self) -> usize {
                match self {
                    DropReason::Malformed(m) => m.index(),
                    other => {
                        Malformed::COUNT
                            + Self::OTHERS.iter().position(|r| *r == other).unwrap_or(0)
                    }
                }
            }

            /// Every reason, in [`index`](Self::index) order.
            pub fn all() -> impl Iterator<Item = DropReason> {
                Malformed::ALL
                    .iter()
                    .map(|m| DropReason::Malformed(*m))
                    .chain(Self::OTHERS.iter().copied())
            }
        }
    };
}

drop_reasons! {
    /// No route: the forwarding stage found no egress port.
    NoRoute => "no_route",
    /// The packet is on a forwarding loop (icarus).
    Loop => "loop",
    /// Policed as part of a heavy flow.
    HeavyFlow => "heavy_flow",
    /// SFB dropped a non-ECN-capable packet it would have marked.
    SfbEarly => "sfb_early",
    /// SFB dropped a packet of a flow in the penalty box.
    SfbPenalty => "sfb_penalty",
    /// SFB dropped a packet because one of its bins was full.
    SfbBucket => "sfb_bucket",
    /// SFB's fair-share check dropped a packet of a flow over its share.
    SfbRate => "sfb_rate",
    /// The egress queue was full.
    QueueFull => "queue_full",
    /// Still queued when a live router's stop deadline passed.
    EgressShutdown => "egress_shutdown",
    /// The TTL / hop limit would reach 0 at this hop (routed ports).
    TtlExpired => "ttl_expired",
    /// The next hop's MAC is unknown and could not be resolved, or its
    /// hold queue was full (routed ports).
    NoNeighbour => "no_neighbour",
    /// Larger than the egress port's MTU (routed ports; the router does
    /// not fragment).
    TooBig => "too_big",
    /// Addressed at layer 2 to another host: a routed port takes frames
    /// to its MAC and to group addresses only.
    OtherHost => "other_host",
    /// Neither IPv4, IPv6 nor ARP over Ethernet, on a routed port.
    NotRoutable => "not_routable",
    /// Multicast on a routed port that did not come in by the port of the
    /// route back to its source (the reverse-path check).
    RpfFailed => "rpf_failed",
}

impl DropReason {
    /// Decided by the egress stage on a port's copy (SFB, the queue, a live
    /// shutdown): the port's counters count the copies, and the packet is
    /// dropped for it only when no copy was left.
    pub fn at_egress(self) -> bool {
        matches!(
            self,
            DropReason::SfbEarly
                | DropReason::SfbPenalty
                | DropReason::SfbBucket
                | DropReason::SfbRate
                | DropReason::QueueFull
                | DropReason::EgressShutdown
        )
    }
}

impl fmt::Display for DropReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What happens to a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verdict {
    /// Send out of these ports.
    Forward(PortSet),
    /// Set ECN CE and send out of these ports (counted as forwarded and marked).
    Mark(PortSet),
    /// Discard.
    Drop(DropReason),
    /// Taken in by the router as its own input: addressed to it (ARP,
    /// neighbour discovery, pings), or an IGMP/MLD message the multicast
    /// stage learned from. Not forwarded, not dropped. Whatever the
    /// router answers leaves as a frame it originates.
    Consumed,
    /// Held by the forwarding stage until its next hop's MAC is known; it
    /// leaves later (forwarded) or is dropped with
    /// [`DropReason::NoNeighbour`].
    Held,
}

impl Verdict {
    /// Forwarded (possibly marked): still on its way out, so stages after
    /// the one that decided may look at it.
    #[inline]
    pub fn is_forwarded(self) -> bool {
        matches!(self, Verdict::Forward(_) | Verdict::Mark(_))
    }

    /// The egress ports of a forwarded packet (empty for any other).
    #[inline]
    pub fn ports(self) -> PortSet {
        match self {
            Verdict::Forward(p) | Verdict::Mark(p) => p,
            _ => PortSet::EMPTY,
        }
    }
}

/// Drops per [`DropReason`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DropCounters {
    counts: [u64; DropReason::COUNT],
}

impl Default for DropCounters {
    fn default() -> Self {
        DropCounters {
            counts: [0; DropReason::COUNT],
        }
    }
}

impl DropCounters {
    /// Counts one drop.
    #[inline]
    pub fn record(&mut self, reason: DropReason) {
        let c = &mut self.counts[reason.index()];
        *c = c.saturating_add(1);
    }

    /// Counts `n` drops.
    #[inline]
    pub fn record_n(&mut self, reason: DropReason, n: u64) {
        let c = &mut self.counts[reason.index()];
        *c = c.saturating_add(n);
    }

    /// Adds drops counted per reason in [`DropReason::index`] order;
    /// entries past the last reason (a tally's spare) are left out.
    #[inline]
    pub(crate) fn add_counts(&mut self, n: &[u32]) {
        for (c, &n) in self.counts.iter_mut().zip(n) {
            *c = c.saturating_add(u64::from(n));
        }
    }

    /// Drops for `reason`.
    pub fn get(&self, reason: DropReason) -> u64 {
        self.counts[reason.index()]
    }

    /// All drops.
    pub fn total(&self) -> u64 {
        self.counts.iter().fold(0u64, |a, &c| a.saturating_add(c))
    }

    /// Adds another set (merging per-worker shards).
    pub fn merge(&mut self, other: &DropCounters) {
        for (a, b) in self.counts.iter_mut().zip(other.counts.iter()) {
            *a = a.saturating_add(*b);
        }
    }

    /// `(reason, count)` for every reason with a non-zero count.
    pub fn nonzero(&self) -> impl Iterator<Item = (DropReason, u64)> + '_ {
        DropReason::all()
            .map(|r| (r, self.get(r)))
            .filter(|&(_, c)| c != 0)
    }
}
