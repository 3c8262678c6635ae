//! Multicast forwarding with per-interface Bloom filters of groups
//! (Grönvall's scheme): every interface has a filter of the multicast groups
//! wanted behind it, and a packet to group `G` that arrived on interface `i`
//! leaves through every *other* interface whose filter holds `G`. One
//! bit-sliced [`PortFilter`] query answers for all interfaces at once, and a
//! batch is answered by one [`PortFilter::query_batch_low`].
//!
//! # Group keys
//!
//! A group is hashed as four 32-bit words ([`GroupKey`]), big-endian reads
//! of a 128-bit address: an IPv6 group is its own address, an IPv4 group
//! its IPv4-mapped form `::ffff:a.b.c.d` (RFC 4291 §2.5.5.2, the convention
//! of [`crate::flow`]), i.e. `[0, 0, 0xffff, group]`. The map is injective
//! (an IPv6 multicast address starts with `0xff`, a mapped one with zero), so
//! two groups never share a key: the only confusion is the Bloom filters'
//! own false positives.
//!
//! # Control path: who wants what
//!
//! [`MulticastControl`] keeps, per interface, an exact membership table
//! (group -> expiry) — the source of truth — and a [`CountingBloom`] kept in
//! step with it: a group is inserted into the counting filter when it
//! becomes a member (static group at start-up, or first join) and removed
//! exactly once when the membership ends (leave or expiry). A group that
//! was never inserted is never removed, so the counting filter has no false
//! negatives (see [`CountingBloom`]).
//!
//! Memberships come from the config ([`InterfaceConfig::static_groups`]:
//! never expire, ignore leaves) and from IGMP/MLD reports seen on an
//! interface:
//!
//! | message                                   | effect on `G` |
//! |-------------------------------------------|---------------|
//! | IGMPv1/v2 report, MLDv1 report            | join |
//! | IGMPv2 leave, MLDv1 done                  | leave |
//! | v3/MLDv2 `MODE_IS_EXCLUDE`, `CHANGE_TO_EXCLUDE_MODE` (any sources) | join |
//! | v3/MLDv2 `MODE_IS_INCLUDE`, `CHANGE_TO_INCLUDE_MODE` with sources   | join (an (S,G) record) |
//! | v3/MLDv2 `MODE_IS_INCLUDE`, `CHANGE_TO_INCLUDE_MODE` without sources | leave |
//! | v3/MLDv2 `ALLOW_NEW_SOURCES` with sources  | join (an (S,G) record) |
//! | v3/MLDv2 `BLOCK_OLD_SOURCES`              | no change (an (S,G) record) |
//! | queries, unknown record types             | no change |
//!
//! This is [`RecordType::is_join`] for joins; the only departure is
//! `BLOCK_OLD_SOURCES`, which is not a leave here: a host in EXCLUDE mode
//! blocking one more source still wants the group, and without per-source
//! state a leave would be a false negative. The group then ages out with
//! the membership timer unless refreshed. Source lists are not kept: the
//! forwarding state is per group (an INCLUDE with sources forwards every
//! source of `G`), and records with sources are counted
//! ([`MulticastCounters::sg_records`]).
//!
//! A join (re)arms the membership timer to `now +` the group membership
//! interval ([`GROUP_MEMBERSHIP_INTERVAL_NS`] by default: robustness 2 ×
//! query interval 125 s + query response interval 10 s = 260 s, RFC 3376
//! §8.4 and RFC 3810 §9.4); a membership whose timer has run out at `now` is
//! removed. A leave removes the membership at once (immediate leave: this
//! router sends no group-specific queries, so other listeners on the link
//! are relearned from their next report). Timers live in a min-heap with one
//! entry per membership, so expiry costs `O(log n)` per membership, never a
//! scan.
//!
//! Reports for a group outside 224/4 or ff00::/8 are ignored
//! ([`MulticastCounters::invalid_groups`]); with
//! [`MulticastConfig::verify_checksums`] (the default) an IGMP or MLD
//! message whose checksum fails is ignored ([`MulticastCounters::bad_checksums`]).
//!
//! # Bounds: what a host flooding reports can do
//!
//! Any host on a port can send reports, so the control path is bounded
//! three ways, none of which costs the data path anything:
//!
//! * **A cap on learned groups per interface**
//!   ([`MulticastConfig::max_learned_groups`], by default
//!   `expected_groups`, the number the filter is sized for). A join of a
//!   new group on an interface at its cap is refused and counted
//!   ([`MulticastCounters::joins_refused`], and per interface in
//!   [`InterfaceStats::refused`]); refreshes and leaves of current members
//!   go on as before. Static groups are not counted against the cap; the
//!   config may list at most `expected_groups` of them per interface, and
//!   `expected_groups` is at most [`MAX_EXPECTED_GROUPS`]. So a filter
//!   holds at most twice the groups it was sized for, and its
//!   false-positive rate stays near the configured one whatever arrives.
//! * **A budget of group records per batch**
//!   ([`MulticastConfig::records_per_batch`], 1024 by default): the
//!   records beyond it are ignored and counted
//!   ([`MulticastCounters::records_over_budget`]), so a burst of reports
//!   delays a batch's forwarding by a bounded amount. IGMP and MLD repeat
//!   their reports (robustness variable), so a member whose report fell
//!   over the budget in a flood is learned from its next one.
//! * **Arithmetic that ends**: a filter's false-positive estimate is
//!   computed in bounded time whatever its fill, and a full filter's is 1
//!   ([`Params::false_positive_rate`]).
//!
//! Each interface's fill (the fraction of filter positions set) and
//! false-positive estimate are recomputed at every publish and reported in
//! [`InterfaceStats`].
//!
//! # Replicas: one membership state over several workers
//!
//! In the live router each worker has its own stage, and a report reaches
//! only the worker its flow hashes to. [`MulticastControl::share`] makes a
//! control one *replica* of a shared state: every membership change it
//! learns from a report (a join, refresh included, or a leave, after the
//! mapping above and the port and group checks) is also queued as a
//! [`MembershipEvent`] — interface, group, kind, the learning batch's `now`
//! and the replica's id — which the owner takes with
//! [`MulticastControl::take_events`] and hands to the other replicas'
//! [`MulticastControl::apply`]. An applied event is never queued again, so
//! each event crosses once; source lists are not kept (above), so an event
//! carries none. The transport is the runtime's (`runtime::share`).
//!
//! Events reach the replicas in different orders, so a replica resolves a
//! join and a leave of the same membership by their stamps `(time,
//! replica)`, last writer wins: a leave ends a membership only if it is not
//! older than the membership's latest join, and a join older than the
//! latest leave seen for that membership (a tombstone, kept for the expiry
//! grace below) is stale and ignored ([`MulticastCounters::events_superseded`]).
//! Events of one replica arrive in the order it learned them, which breaks
//! ties of equal stamps. Every replica that has applied the same events
//! therefore holds the same memberships — those one stage would hold after
//! seeing every report in stamp order — with the same timers (a refresh
//! anywhere re-arms the timer everywhere: expiry is `time + interval` of
//! the latest join). Their counting filters then hold the same groups; only
//! their false positives may differ, since a counter a replica's own
//! history saturated stays saturated. Expiry runs on each replica's own batch clock, so it
//! is deferred by a grace (the runtime uses 1 s): a refresh still in flight
//! from another replica cannot lose to the timer. That grace costs at most
//! that long of extra copies after a membership runs out; it is never a
//! false negative. Without [`MulticastControl::share`] (one worker) none of
//! this runs: no events, no tombstones, no grace.
//!
//! # Data path and the double buffer
//!
//! The data path reads an `Arc<PortFilter>` built from the counting filters.
//! When memberships change, the interfaces that changed are marked dirty and,
//! between batches, [`MulticastControl::publish`] rewrites only those
//! interfaces' bit slices ([`PortFilter::set_port`]) through
//! [`Arc::make_mut`]: copy-on-write. When no other reader holds the filter
//! (one worker, the usual case) it is updated in place between two batches —
//! nobody can be reading it then; when other workers still hold the old
//! snapshot, the new one is built aside (a copy) and the pointer swapped, so
//! a reader always sees a complete filter and packet processing never waits
//! for the control path. Other workers pick a new snapshot up between their
//! batches with [`MulticastStage::install_filter`] (see
//! [`MulticastStage::filter`]).
//!
//! # Filter geometry
//!
//! [`MulticastStage::new`] sizes every interface's filter with
//! [`Params::for_port_filter`]: the blocked layout (512-position blocks)
//! with the fewest positions per key `k` that reaches
//! [`MulticastConfig::false_positive_rate`] at
//! [`MulticastConfig::expected_groups`], within twice the smallest size
//! that does. In the bit-sliced [`PortFilter`] every position is a
//! word-set of its own, so a query costs one cache line and three
//! instructions per position: `k` is the cost. At the defaults (1,024
//! groups, 0.1%) that is 32 Ki positions with `k = 3` (rate 0.084% at 1,024
//! groups), where the split-block layout needed the same 32 Ki positions
//! (its `k = 8` misses 0.1% at 16 Ki) with 8 lines per query and a rate
//! of 0.004%: the same memory, a rate still within the target, and
//! 3 lines instead of 8. Callgrind on `bench/examples/stages_cg.rs`
//! counts 55 instructions per packet for the split-block query of
//! `multicast/query/64` (64 interfaces) and 41 for blocked `k = 3` with the
//! egress mask fused into the query ([`PortFilter::query_batch_low`]); the
//! README's benchmark tables give the times. The measured false-forwarding rate
//! matches the blocked formula at `k` = 2, 3, 4 for 8 to 64 interfaces
//! (`tests/multicast.rs`, `false_forward_rate_matches_formula_blocked`).
//! [`MulticastStage::with_params`] takes any geometry.
//!
//! # Per batch
//!
//! 1. Expire memberships whose timer ran out by the batch's earliest packet
//!    time (or `now` if earlier); joins in the batch are timed at `now`.
//!    Both err towards keeping a membership a batch longer.
//! 2. IGMP messages and MLD messages (ICMPv6 130, 131, 132, 143) are handed
//!    to the control path. Those sent to a multicast address are consumed:
//!    they are link-scoped control traffic (TTL/hop limit 1, router alert),
//!    the router's own input, never forwarded as data: their verdict is
//!    [`Verdict::Consumed`] and they are counted in
//!    [`MulticastCounters::control`]. IGMP/MLD sent to a
//!    unicast address is learned from and otherwise left alone.
//! 3. If a membership changed, publish (above), so data in the same batch
//!    already sees a join that preceded it.
//! 4. The other live packets to a multicast address: link-local scope
//!    (224.0.0.0/24; IPv6 scope 0, 1 or 2, which includes ff02::/16) is
//!    dropped with [`DropReason::NoRoute`] and counted unless
//!    [`MulticastConfig::forward_link_local`]; the rest have their group
//!    keys gathered and answered by one batched query. The verdict becomes
//!    `Forward(set)` (or `Mark(set)` if an earlier stage marked it), `set`
//!    being the answer without the ingress interface; an empty set is
//!    dropped with [`DropReason::NoRoute`] and counted as suppressed.
//!    Unicast packets pass untouched.
//!
//! # False-forward estimate
//!
//! A copy sent to interface `j` for a group no one behind `j` wants is a
//! false forward; its probability is the false-positive rate `f_j` of `j`'s
//! filter, taken from the filter's own estimate ([`Bloom::false_positive_rate`]
//! of the exported counting filter, recomputed whenever `j` changes). The
//! packets *not* for `j`'s groups are not known on the data path without an
//! exact lookup, but the packets whose answer excludes `j` (misses) are:
//! in expectation `misses = N_non (1 - f_j)`, so the expected false forwards
//! are `f_j N_non = f_j misses / (1 - f_j)`. Misses are counted from the
//! per-interface copies (`candidates - copies`), so the data path adds only
//! a count per copy and per ingress interface.
//!
//! [`Bloom::false_positive_rate`]: kernels::bloom::Bloom::false_positive_rate

use core::any::Any;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::net::IpAddr;
use std::sync::Arc;

use kernels::Hasher;
use kernels::bloom::{Bloom, CountingBloom, ParamError, Params, PortError, PortFilter};
use serde::{Deserialize, Serialize};

use crate::clock::Timestamp;
use crate::packet::{Batch, DropReason, PortSet, Verdict};
use crate::pipeline::Stage;
use crate::wire::icmpv6::{self, Message as Icmpv6Message};
use crate::wire::igmp::{self, RecordType};
use crate::wire::{IpProtocol, Parsed, mld};

pub use crate::addr::{GroupKey, group_addr, group_key, group_key_v4, group_key_v6};

/// Robustness variable (RFC 3376 §8.1).
pub const ROBUSTNESS: u64 = 2;
/// Query interval (RFC 3376 §8.2), nanoseconds.
pub const QUERY_INTERVAL_NS: u64 = 125_000_000_000;
/// Query response interval (RFC 3376 §8.3), nanoseconds.
pub const QUERY_RESPONSE_INTERVAL_NS: u64 = 10_000_000_000;
/// Group membership interval: `robustness * query interval + query
/// response interval` = 260 s (RFC 3376 §8.4, RFC 3810 §9.4).
pub const GROUP_MEMBERSHIP_INTERVAL_NS: u64 =
    ROBUSTNESS * QUERY_INTERVAL_NS + QUERY_RESPONSE_INTERVAL_NS;

/// Group-record chunk answered by one kernel call (the kernels' batch).
const QUERY_CHUNK: usize = 64;

/// Whether `group` is of link-local scope, never routed by default:
/// 224.0.0.0/24 (RFC 5771), or an IPv6 multicast address of scope 0, 1
/// (interface-local) or 2 (link-local, ff02::/16) (RFC 4291 §2.7).
pub fn is_link_local(group: IpAddr) -> bool {
    match group {
        IpAddr::V4(a) => a.octets()[..3] == [224, 0, 0],
        IpAddr::V6(a) => a.octets()[0] == 0xff && a.octets()[1] & 0x0f <= 2,
    }
}

fn default_interval_ms() -> u64 {
    GROUP_MEMBERSHIP_INTERVAL_NS / 1_000_000
}
fn default_expected_groups() -> u64 {
    1024
}
fn default_fpr() -> f64 {
    0.001
}
fn default_true() -> bool {
    true
}
fn default_records_per_batch() -> u32 {
    DEFAULT_RECORDS_PER_BATCH
}

/// Group records the control path takes from one batch by default
/// ([`MulticastConfig::records_per_batch`]): six full IGMPv3 reports,
/// about 100 us of control work per batch at most.
pub const DEFAULT_RECORDS_PER_BATCH: u32 = 1024;

/// The most groups per interface a filter may be sized for
/// ([`MulticastConfig::expected_groups`]): 256 Ki groups at the default
/// rate is 4 Mi positions, 32 MiB of port filter.
pub const MAX_EXPECTED_GROUPS: u64 = 1 << 18;

/// One interface's settings.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct InterfaceConfig {
    /// A name for reports (optional).
    pub name: Option<String>,
    /// Groups always forwarded out of this interface: never expire, never
    /// removed by a leave.
    pub static_groups: Vec<IpAddr>,
}

/// Settings of the multicast stage (the `[multicast]` table of the config).
///
/// ```
/// use dataplane::stage::multicast::MulticastConfig;
/// let cfg: MulticastConfig = serde_json::from_str(
///     r#"{ "interfaces": [ {}, { "static_groups": ["239.1.1.1", "ff0e::1"] } ],
///          "membership_interval_ms": 260000 }"#,
/// ).unwrap();
/// assert_eq!(cfg.interfaces.len(), 2);
/// assert!(!cfg.forward_link_local);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MulticastConfig {
    /// The interfaces, port `i` being `interfaces[i]` (1 to 64).
    pub interfaces: Vec<InterfaceConfig>,
    /// Forward link-local-scope groups (224.0.0.0/24, ff02::/16) like any
    /// other (default: no).
    pub forward_link_local: bool,
    /// Group membership interval in milliseconds (default 260 000).
    #[serde(default = "default_interval_ms")]
    pub membership_interval_ms: u64,
    /// Groups per interface each filter is sized for (default 1024).
    #[serde(default = "default_expected_groups")]
    pub expected_groups: u64,
    /// Target false-positive rate per filter at `expected_groups` (default 0.001).
    #[serde(default = "default_fpr")]
    pub false_positive_rate: f64,
    /// Ignore IGMP/MLD messages whose checksum fails (default: yes).
    #[serde(default = "default_true")]
    pub verify_checksums: bool,
    /// The most groups an interface learns from reports (static groups not
    /// counted); a join of one more is refused and counted (default:
    /// `expected_groups`, so a filter never holds more learned groups than
    /// it was sized for). 0 turns learning off.
    pub max_learned_groups: Option<u64>,
    /// The most group records (a v1/v2 report or leave is one) the control
    /// path takes from one batch; the rest of the batch's reports are
    /// counted and ignored (default 1024). Bounds the time a report flood
    /// can take from forwarding.
    #[serde(default = "default_records_per_batch")]
    pub records_per_batch: u32,
    /// Hash seed (default: the process-wide random key).
    pub seed: Option<u64>,
}

impl Default for MulticastConfig {
    fn default() -> Self {
        MulticastConfig {
            interfaces: vec![InterfaceConfig::default(); 2],
            forward_link_local: false,
            membership_interval_ms: default_interval_ms(),
            expected_groups: default_expected_groups(),
            false_positive_rate: default_fpr(),
            verify_checksums: true,
            max_learned_groups: None,
            records_per_batch: DEFAULT_RECORDS_PER_BATCH,
            seed: None,
        }
    }
}

impl MulticastConfig {
    /// `ports` interfaces with no static groups, other settings default.
    pub fn with_ports(ports: usize) -> Self {
        MulticastConfig {
            interfaces: vec![InterfaceConfig::default(); ports],
            ..MulticastConfig::default()
        }
    }

    /// The cap on learned groups per interface in force
    /// ([`max_learned_groups`](Self::max_learned_groups), else
    /// `expected_groups`).
    pub fn learned_cap(&self) -> u64 {
        self.max_learned_groups.unwrap_or(self.expected_groups)
    }
}

/// Why a multicast configuration was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MulticastError {
    /// `interfaces` must hold 1 to 64 entries (the pipeline's port sets).
    #[error("multicast.interfaces: {0} interfaces, need 1..=64")]
    Ports(usize),
    /// A static group is not a multicast address.
    #[error("multicast.interfaces[{port}].static_groups: {group} is not a multicast address")]
    NotMulticast {
        /// The interface.
        port: usize,
        /// The address.
        group: IpAddr,
    },
    /// `membership_interval_ms` must be positive.
    #[error("multicast.membership_interval_ms: must be at least 1")]
    Interval,
    /// `expected_groups` is above [`MAX_EXPECTED_GROUPS`].
    #[error(
        "multicast.expected_groups: {0} is above the limit of {MAX_EXPECTED_GROUPS} per interface"
    )]
    ExpectedGroups(u64),
    /// An interface lists more static groups than its filter is sized for.
    #[error(
        "multicast.interfaces[{port}].static_groups: {count} groups, more than multicast.expected_groups = {expected} that the filters are sized for (raise expected_groups, up to {MAX_EXPECTED_GROUPS})"
    )]
    TooManyStatic {
        /// The interface.
        port: usize,
        /// Its static groups.
        count: usize,
        /// `expected_groups`.
        expected: u64,
    },
    /// The filter geometry.
    #[error("multicast.expected_groups / false_positive_rate: {0}")]
    Params(#[from] ParamError),
    /// The port filter.
    #[error("multicast: port filter: {0}")]
    Port(#[from] PortError),
}

/// The stage's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct MulticastCounters {
    /// Multicast data packets looked up.
    pub data_packets: u64,
    /// Data packets forwarded (to at least one interface).
    pub forwarded: u64,
    /// Copies sent (sum of the egress set sizes).
    pub copies: u64,
    /// Data packets no other interface wants (dropped, `no_route`).
    pub suppressed: u64,
    /// Link-local-scope data packets not forwarded (dropped, `no_route`).
    pub link_local: u64,
    /// IGMP/MLD messages to a multicast address consumed by the control
    /// path (dropped, `no_route`).
    pub control: u64,
    /// IGMP/MLD reports parsed (v1/v2/v3 reports, IGMPv2 leaves, MLDv1 dones).
    pub reports: u64,
    /// IGMP/MLD queries seen.
    pub queries: u64,
    /// Group records in v3/MLDv2 reports.
    pub records: u64,
    /// Records with a source list, or `BLOCK_OLD_SOURCES`: (S,G) state,
    /// forwarded per group.
    pub sg_records: u64,
    /// New memberships learned from reports seen here (not refreshes;
    /// not events of other workers).
    pub joins: u64,
    /// Joins of a current membership (timer re-armed) seen here.
    pub refreshes: u64,
    /// Memberships ended by a leave seen here.
    pub leaves: u64,
    /// Leaves seen here for a group that was not a (non-static) member,
    /// or older than its latest join.
    pub leaves_ignored: u64,
    /// Memberships whose timer ran out.
    pub expiries: u64,
    /// Reports naming a non-multicast group.
    pub invalid_groups: u64,
    /// IGMP/MLD messages with a bad checksum (ignored).
    pub bad_checksums: u64,
    /// IGMP/MLD messages that did not parse (ignored).
    pub malformed: u64,
    /// Reports from an ingress port beyond the configured interfaces.
    pub unknown_port: u64,
    /// Joins of a new group refused because the interface already had
    /// [`MulticastConfig::max_learned_groups`] learned groups (events of
    /// other workers included).
    pub joins_refused: u64,
    /// Group records ignored because the batch had used up
    /// [`MulticastConfig::records_per_batch`].
    pub records_over_budget: u64,
    /// Times the data-path filter was republished.
    pub publishes: u64,
    /// Membership events learned here and queued for the other workers
    /// (a shared replica: the live router with more than one worker).
    pub events_sent: u64,
    /// Membership events of other workers applied here (not counted as
    /// joins or leaves).
    pub events_applied: u64,
    /// Events, learned here or applied, that lost to a newer one: a join
    /// older than a leave already seen, a leave older than the latest join.
    pub events_superseded: u64,
}

impl InterfaceStats {
    /// Folds another worker's figures for the same interface into these:
    /// counts add up; memberships, fill and rate (replicas of one state)
    /// take the larger.
    pub fn merge(&mut self, o: &InterfaceStats) {
        self.members = self.members.max(o.members);
        self.learned = self.learned.max(o.learned);
        self.max_learned = self.max_learned.max(o.max_learned);
        self.refused += o.refused;
        self.copies += o.copies;
        self.fill = self.fill.max(o.fill);
        self.fpr = self.fpr.max(o.fpr);
        self.false_forward_estimate += o.false_forward_estimate;
    }
}

impl MulticastCounters {
    /// Adds `o`'s counts to these (workers' counters into one report).
    pub fn merge(&mut self, o: &MulticastCounters) {
        let MulticastCounters {
            data_packets,
            forwarded,
            copies,
            suppressed,
            link_local,
            control,
            reports,
            queries,
            records,
            sg_records,
            joins,
            refreshes,
            leaves,
            leaves_ignored,
            expiries,
            invalid_groups,
            bad_checksums,
            malformed,
            unknown_port,
            joins_refused,
            records_over_budget,
            publishes,
            events_sent,
            events_applied,
            events_superseded,
        } = o;
        self.data_packets += data_packets;
        self.forwarded += forwarded;
        self.copies += copies;
        self.suppressed += suppressed;
        self.link_local += link_local;
        self.control += control;
        self.reports += reports;
        self.queries += queries;
        self.records += records;
        self.sg_records += sg_records;
        self.joins += joins;
        self.refreshes += refreshes;
        self.leaves += leaves;
        self.leaves_ignored += leaves_ignored;
        self.expiries += expiries;
        self.invalid_groups += invalid_groups;
        self.bad_checksums += bad_checksums;
        self.malformed += malformed;
        self.unknown_port += unknown_port;
        self.joins_refused += joins_refused;
        self.records_over_budget += records_over_budget;
        self.publishes += publishes;
        self.events_sent += events_sent;
        self.events_applied += events_applied;
        self.events_superseded += events_superseded;
    }
}

/// One interface's figures.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct InterfaceStats {
    /// Port number.
    pub port: usize,
    /// Current members (static included).
    pub members: usize,
    /// Current members learned from reports.
    pub learned: usize,
    /// The cap on learned members ([`MulticastConfig::max_learned_groups`]).
    pub max_learned: u64,
    /// Joins refused at the cap.
    pub refused: u64,
    /// Copies sent out of this interface.
    pub copies: u64,
    /// The fraction of the filter's positions set, as last published.
    pub fill: f64,
    /// The filter's own false-positive estimate now.
    pub fpr: f64,
    /// Expected copies sent for groups no one behind the interface wants
    /// (see the module docs).
    pub false_forward_estimate: f64,
}

/// What a membership timer says.
#[derive(Debug, Clone, Copy)]
struct Member {
    /// Expiry time in ns; `u64::MAX` for a static group.
    expires: u64,
    /// The time the heap entry for this membership carries.
    queued: u64,
    /// The stamp of the latest join (see "Replicas" in the module docs).
    joined: Stamp,
}

const STATIC: u64 = u64::MAX;

/// The order of membership events between replicas: (time in ns, replica).
type Stamp = (u64, u16);

/// What a [`MembershipEvent`] does to its membership.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MembershipChange {
    /// A join or refresh: the membership holds until `at +` the group
    /// membership interval (or longer).
    Join,
    /// A leave: the membership ends.
    Leave,
}

/// A membership change one replica learned from a report, for the other
/// replicas to [`apply`](MulticastControl::apply) (see "Replicas" in the
/// module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MembershipEvent {
    /// Join or leave.
    pub change: MembershipChange,
    /// The interface.
    pub port: u8,
    /// The group.
    pub group: GroupKey,
    /// When it was learned (the learning batch's `now`).
    pub at: Timestamp,
    /// The replica that learned it.
    pub origin: u16,
}

impl MembershipEvent {
    fn stamp(&self) -> Stamp {
        (self.at.as_nanos(), self.origin)
    }
}

/// How a join met the membership table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Joined {
    New,
    Refreshed,
    /// Older than a leave already applied: ignored.
    Stale,
    /// A new group on an interface at its cap of learned groups: ignored.
    Refused,
}

/// How a leave met the membership table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Left {
    Ended,
    /// Nothing learned to end (not a member, or a static group).
    NotLearned,
    /// Older than the membership's latest join: ignored.
    Superseded,
}

/// The sharing state of a replica (see [`MulticastControl::share`]).
#[derive(Debug, Clone, Default)]
struct Sharing {
    origin: u16,
    grace_ns: u64,
    /// Events learned here, not yet taken.
    outbox: Vec<MembershipEvent>,
    /// Latest leave stamp per (port, group): the tombstones.
    left: HashMap<(u8, GroupKey), Stamp, ahash::RandomState>,
    /// The tombstones in the order they were set, for pruning.
    left_order: std::collections::VecDeque<(u64, u8, GroupKey)>,
}

/// The control path: exact membership tables, counting filters, timers.
#[derive(Debug, Clone)]
pub struct MulticastControl {
    params: Params,
    ports: usize,
    interval_ns: u64,
    verify_checksums: bool,
    members: Vec<HashMap<GroupKey, Member, ahash::RandomState>>,
    /// Learned (not static) members per port, against `max_learned`.
    learned: Vec<usize>,
    max_learned: usize,
    /// Joins refused at the cap, per port.
    refused: Vec<u64>,
    /// Group records this batch may still take (see [`Self::set_budget`]).
    budget: u32,
    counting: Vec<CountingBloom>,
    timers: BinaryHeap<Reverse<(u64, u8, GroupKey)>>,
    dirty: u64,
    fill: Vec<f64>,
    fpr: Vec<f64>,
    counters: MulticastCounters,
    sharing: Option<Box<Sharing>>,
}

impl MulticastControl {
    /// Empty tables for `ports` interfaces (1..=64) with filters of `params`.
    ///
    /// # Errors
    /// [`MulticastError::Ports`] for a bad port count.
    pub fn new(
        ports: usize,
        params: Params,
        hasher: Hasher,
        interval_ns: u64,
    ) -> Result<Self, MulticastError> {
        if !(1..=usize::from(PortSet::MAX_PORTS)).contains(&ports) {
            return Err(MulticastError::Ports(ports));
        }
        if interval_ns == 0 {
            return Err(MulticastError::Interval);
        }
        Ok(MulticastControl {
            params,
            ports,
            interval_ns,
            verify_checksums: true,
            members: vec![HashMap::default(); ports],
            learned: vec![0; ports],
            max_learned: usize::MAX,
            refused: vec![0; ports],
            budget: u32::MAX,
            counting: vec![CountingBloom::new(params, hasher); ports],
            timers: BinaryHeap::new(),
            dirty: 0,
            fill: vec![0.0; ports],
            fpr: vec![0.0; ports],
            counters: MulticastCounters::default(),
            sharing: None,
        })
    }

    /// Caps the groups each interface learns from reports (and from other
    /// replicas' events) at `max` (default: no cap). A join of a new group
    /// beyond it is refused and counted
    /// ([`MulticastCounters::joins_refused`]); refreshes and leaves of
    /// current members still count. Replicas at the cap may hold different
    /// learned groups: each keeps those it took first.
    pub fn set_max_learned(&mut self, max: u64) {
        self.max_learned = usize::try_from(max).unwrap_or(usize::MAX);
    }

    /// Lets the control path take at most `records` more group records
    /// (a v1/v2 report or leave is one) until the next call; the rest are
    /// ignored and counted ([`MulticastCounters::records_over_budget`]).
    /// The stage calls it at the start of every batch.
    pub fn set_budget(&mut self, records: u32) {
        self.budget = records;
    }

    /// Takes one record from the budget; `false` (and counted) when none
    /// is left.
    fn take_budget(&mut self) -> bool {
        if self.budget == 0 {
            self.counters.records_over_budget += 1;
            return false;
        }
        self.budget -= 1;
        true
    }

    /// Makes this control replica `origin` of a membership state shared
    /// with others (see "Replicas" in the module docs): from now on the
    /// joins and leaves it learns are also queued for
    /// [`take_events`](Self::take_events), joins and leaves are ordered by
    /// their stamps, and memberships expire `expiry_grace_ns` after their
    /// timer runs out.
    pub fn share(&mut self, origin: u16, expiry_grace_ns: u64) {
        self.sharing = Some(Box::new(Sharing {
            origin,
            grace_ns: expiry_grace_ns,
            ..Sharing::default()
        }));
    }

    /// Whether events are waiting for [`take_events`](Self::take_events).
    pub fn has_events(&self) -> bool {
        self.sharing.as_ref().is_some_and(|s| !s.outbox.is_empty())
    }

    /// The events learned since the last call, oldest first (none unless
    /// [`share`](Self::share)d); they leave the queue as the iterator is
    /// consumed, and the queue keeps its capacity.
    pub fn take_events(&mut self) -> impl Iterator<Item = MembershipEvent> + '_ {
        self.sharing.iter_mut().flat_map(|s| s.outbox.drain(..))
    }

    /// Applies an event another replica learned: a join or leave like a
    /// report seen here, ordered by stamp against what this replica has
    /// already seen, and never queued again. Counted in
    /// [`MulticastCounters::events_applied`], not as a join or leave.
    /// Returns whether the set of memberships changed.
    pub fn apply(&mut self, event: &MembershipEvent) -> bool {
        let port = usize::from(event.port);
        if port >= self.ports {
            self.counters.unknown_port += 1;
            return false;
        }
        self.counters.events_applied += 1;
        let (changed, superseded) = match event.change {
            MembershipChange::Join => {
                let j = self.join_at(port, event.group, event.stamp());
                (j == Joined::New, j == Joined::Stale)
            }
            MembershipChange::Leave => {
                let l = self.leave_at(port, &event.group, event.stamp());
                (l == Left::Ended, l == Left::Superseded)
            }
        };
        if superseded {
            self.counters.events_superseded += 1;
        }
        changed
    }

    /// The filter geometry.
    pub fn params(&self) -> Params {
        self.params
    }

    /// The number of interfaces.
    pub fn ports(&self) -> usize {
        self.ports
    }

    /// The counters of the control path (the data-path fields are zero).
    pub fn counters(&self) -> &MulticastCounters {
        &self.counters
    }

    /// Whether `group` is a current member of `port` (exact table).
    pub fn is_member(&self, port: usize, group: &GroupKey) -> bool {
        self.members
            .get(port)
            .is_some_and(|m| m.contains_key(group))
    }

    /// The current groups of `port`, unordered.
    pub fn members(&self, port: usize) -> impl Iterator<Item = GroupKey> + '_ {
        self.members
            .get(port)
            .into_iter()
            .flat_map(|m| m.keys().copied())
    }

    /// The number of current groups of `port`.
    pub fn member_count(&self, port: usize) -> usize {
        self.members.get(port).map_or(0, HashMap::len)
    }

    /// The counting filter of `port`.
    pub fn counting_filter(&self, port: usize) -> Option<&CountingBloom> {
        self.counting.get(port)
    }

    /// The false-positive estimate of `port`'s filter as last published.
    pub fn fpr(&self, port: usize) -> f64 {
        self.fpr.get(port).copied().unwrap_or(0.0)
    }

    /// The fraction of `port`'s filter positions set, as last published.
    pub fn fill(&self, port: usize) -> f64 {
        self.fill.get(port).copied().unwrap_or(0.0)
    }

    /// The number of `port`'s current groups learned from reports.
    pub fn learned_count(&self, port: usize) -> usize {
        self.learned.get(port).copied().unwrap_or(0)
    }

    /// Joins refused on `port` because it was at the cap.
    pub fn refused(&self, port: usize) -> u64 {
        self.refused.get(port).copied().unwrap_or(0)
    }

    /// Whether a membership changed since the last publish.
    pub fn is_dirty(&self) -> bool {
        self.dirty != 0
    }

    fn insert(&mut self, port: usize, group: GroupKey, expires: u64, joined: Stamp) {
        self.members[port].insert(
            group,
            Member {
                expires,
                queued: expires,
                joined,
            },
        );
        self.counting[port].insert(&group);
        self.dirty |= 1 << port;
        if expires != STATIC {
            self.learned[port] += 1;
            self.timers.push(Reverse((expires, port as u8, group)));
        }
    }

    fn end(&mut self, port: usize, group: &GroupKey) {
        if let Some(m) = self.members[port].remove(group) {
            if m.expires != STATIC {
                self.learned[port] -= 1;
            }
            // Only a group that was inserted reaches here: the counting
            // filter keeps its no-false-negative promise.
            self.counting[port].remove(group);
            self.dirty |= 1 << port;
        }
    }

    /// The stamp of an event learned here at `now`.
    fn local_stamp(&self, now: Timestamp) -> Stamp {
        (
            now.as_nanos(),
            self.sharing.as_ref().map_or(0, |s| s.origin),
        )
    }

    /// Queues a learned event for the other replicas, if shared.
    fn emit(&mut self, change: MembershipChange, port: usize, group: GroupKey, at: Timestamp) {
        if let Some(s) = &mut self.sharing {
            s.outbox.push(MembershipEvent {
                change,
                port: port as u8,
                group,
                at,
                origin: s.origin,
            });
            self.counters.events_sent += 1;
        }
    }

    /// A join stamped `at` on a valid `port` (see "Replicas" in the module
    /// docs for stale joins).
    fn join_at(&mut self, port: usize, group: GroupKey, at: Stamp) -> Joined {
        let expires = at.0.saturating_add(self.interval_ns);
        if let Some(m) = self.members[port].get_mut(&group) {
            if m.expires != STATIC {
                m.expires = m.expires.max(expires);
            }
            m.joined = m.joined.max(at);
            return Joined::Refreshed;
        }
        let stale = self
            .sharing
            .as_ref()
            .and_then(|s| s.left.get(&(port as u8, group)))
            .is_some_and(|&left| left > at);
        if stale {
            return Joined::Stale;
        }
        if self.learned[port] >= self.max_learned {
            self.refused[port] += 1;
            self.counters.joins_refused += 1;
            return Joined::Refused;
        }
        self.insert(port, group, expires, at);
        Joined::New
    }

    /// A leave stamped `at` on a valid `port`; a shared replica keeps its
    /// tombstone.
    fn leave_at(&mut self, port: usize, group: &GroupKey, at: Stamp) -> Left {
        let outcome = match self.members[port].get(group) {
            Some(m) if m.expires == STATIC => return Left::NotLearned,
            Some(m) if self.sharing.is_some() && m.joined > at => return Left::Superseded,
            Some(_) => {
                self.end(port, group);
                Left::Ended
            }
            None => Left::NotLearned,
        };
        if let Some(s) = &mut self.sharing {
            let t = s.left.entry((port as u8, *group)).or_insert((0, 0));
            if at > *t {
                *t = at;
                s.left_order.push_back((at.0, port as u8, *group));
            }
        }
        outcome
    }

    /// Adds a group that never expires. `false` (and nothing done) for a
    /// port out of range; a current learned membership becomes static.
    pub fn add_static(&mut self, port: usize, group: GroupKey) -> bool {
        if port >= self.ports {
            return false;
        }
        match self.members[port].get_mut(&group) {
            Some(m) if m.expires != STATIC => {
                m.expires = STATIC;
                self.learned[port] -= 1;
            }
            Some(_) => {}
            None => self.insert(port, group, STATIC, (0, 0)),
        }
        true
    }

    /// A join of `group` on `port` at `now`: a new membership or a re-armed
    /// timer. Returns whether the membership is new. A shared replica
    /// queues it for the others.
    pub fn join(&mut self, port: usize, group: GroupKey, now: Timestamp) -> bool {
        if port >= self.ports {
            self.counters.unknown_port += 1;
            return false;
        }
        let joined = self.join_at(port, group, self.local_stamp(now));
        match joined {
            Joined::New => self.counters.joins += 1,
            Joined::Refreshed => self.counters.refreshes += 1,
            Joined::Stale => self.counters.events_superseded += 1,
            // Counted where refused; the other replicas need not hear of it.
            Joined::Refused => return false,
        }
        self.emit(MembershipChange::Join, port, group, now);
        joined == Joined::New
    }

    /// A leave of `group` on `port` at `now`: ends a learned membership (a
    /// static group stays). Returns whether a membership ended. A shared
    /// replica queues it for the others.
    pub fn leave(&mut self, port: usize, group: &GroupKey, now: Timestamp) -> bool {
        if port >= self.ports {
            self.counters.leaves_ignored += 1;
            return false;
        }
        let left = self.leave_at(port, group, self.local_stamp(now));
        match left {
            Left::Ended => self.counters.leaves += 1,
            Left::NotLearned => self.counters.leaves_ignored += 1,
            Left::Superseded => {
                self.counters.leaves_ignored += 1;
                self.counters.events_superseded += 1;
            }
        }
        self.emit(MembershipChange::Leave, port, *group, now);
        left == Left::Ended
    }

    /// Ends every membership whose timer ran out at `now` (expiry `<= now`,
    /// less the expiry grace of a shared replica); returns how many.
    pub fn expire(&mut self, now: Timestamp) -> usize {
        let grace = self.sharing.as_ref().map_or(0, |s| s.grace_ns);
        let now = now.as_nanos().saturating_sub(grace);
        let mut n = 0;
        while let Some(&Reverse((t, port, group))) = self.timers.peek() {
            if t > now {
                break;
            }
            self.timers.pop();
            let port = usize::from(port);
            let Some(m) = self.members[port].get_mut(&group) else {
                continue; // left before it expired
            };
            if m.queued != t || m.expires == STATIC {
                continue; // a stale entry (the membership was renewed after a leave)
            }
            if m.expires > now {
                // Refreshed since queued: one entry per membership, re-queued.
                m.queued = m.expires;
                self.timers.push(Reverse((m.expires, port as u8, group)));
                continue;
            }
            self.end(port, &group);
            self.counters.expiries += 1;
            n += 1;
        }
        if let Some(s) = &mut self.sharing {
            // Tombstones only ever reject joins older than themselves, so
            // when one goes is a matter of memory: after the grace, no
            // event older than it is still in flight.
            while let Some(&(t, port, group)) = s.left_order.front() {
                if t > now {
                    break;
                }
                s.left_order.pop_front();
                if s.left.get(&(port, group)).is_some_and(|l| l.0 == t) {
                    s.left.remove(&(port, group));
                }
            }
        }
        n
    }

    /// Learns from one IGMP or MLD message: `parsed` and `frame` are the
    /// packet, `port` its ingress. Returns `false` when the packet is not
    /// an IGMP/MLD message (nothing done).
    pub fn learn(&mut self, port: usize, parsed: &Parsed, frame: &[u8], now: Timestamp) -> bool {
        match parsed.protocol {
            IpProtocol::Igmp => {
                self.learn_igmp(port, parsed.l4_bytes(frame), now);
                true
            }
            IpProtocol::Icmpv6 if is_mld(parsed, frame) => {
                self.learn_mld(port, parsed, parsed.l4_bytes(frame), now);
                true
            }
            _ => false,
        }
    }

    fn group_join(&mut self, port: usize, group: IpAddr, now: Timestamp) {
        if !self.take_budget() {
            return;
        }
        if group.is_multicast() {
            self.join(port, group_key(group), now);
        } else {
            self.counters.invalid_groups += 1;
        }
    }

    fn group_leave(&mut self, port: usize, group: IpAddr, now: Timestamp) {
        if !self.take_budget() {
            return;
        }
        if group.is_multicast() {
            self.leave(port, &group_key(group), now);
        } else {
            self.counters.invalid_groups += 1;
        }
    }

    /// Applies one v3/MLDv2 record (see the module docs for the mapping).
    fn record(&mut self, port: usize, rt: RecordType, sources: u16, group: IpAddr, now: Timestamp) {
        if self.budget == 0 {
            self.counters.records_over_budget += 1;
            return;
        }
        self.counters.records += 1;
        if sources > 0 || rt == RecordType::BlockOldSources {
            self.counters.sg_records += 1;
        }
        match rt {
            RecordType::BlockOldSources | RecordType::Unknown(_) => {}
            _ if rt.is_join(sources) => self.group_join(port, group, now),
            _ => self.group_leave(port, group, now),
        }
    }

    fn learn_igmp(&mut self, port: usize, msg: &[u8], now: Timestamp) {
        let Ok(p) = igmp::Packet::new_checked(msg) else {
            self.counters.malformed += 1;
            return;
        };
        if self.verify_checksums && !p.verify_checksum() {
            self.counters.bad_checksums += 1;
            return;
        }
        match p.kind() {
            igmp::Kind::V1Query | igmp::Kind::V2Query | igmp::Kind::V3Query => {
                self.counters.queries += 1;
            }
            igmp::Kind::V1Report | igmp::Kind::V2Report => {
                self.counters.reports += 1;
                self.group_join(port, IpAddr::V4(p.group_addr()), now);
            }
            igmp::Kind::Leave => {
                self.counters.reports += 1;
                self.group_leave(port, IpAddr::V4(p.group_addr()), now);
            }
            igmp::Kind::V3Report => {
                self.counters.reports += 1;
                for r in p.group_records() {
                    let g = IpAddr::V4(r.multicast_addr());
                    self.record(port, r.record_type(), r.num_sources(), g, now);
                }
            }
            igmp::Kind::Other => {}
        }
    }

    fn learn_mld(&mut self, port: usize, parsed: &Parsed, msg: &[u8], now: Timestamp) {
        let Ok(p) = mld::Packet::new_checked(msg) else {
            self.counters.malformed += 1;
            return;
        };
        if self.verify_checksums {
            let ok = match parsed.flow.map(|f| (f.src(), f.dst())) {
                Some((IpAddr::V6(s), IpAddr::V6(d))) => {
                    icmpv6::Packet::new_unchecked(msg).verify_checksum(&s, &d)
                }
                _ => false,
            };
            if !ok {
                self.counters.bad_checksums += 1;
                return;
            }
        }
        match p.kind() {
            mld::Kind::V1Query | mld::Kind::V2Query => self.counters.queries += 1,
            mld::Kind::V1Report => {
                self.counters.reports += 1;
                self.group_join(port, IpAddr::V6(p.multicast_addr()), now);
            }
            mld::Kind::Done => {
                self.counters.reports += 1;
                self.group_leave(port, IpAddr::V6(p.multicast_addr()), now);
            }
            mld::Kind::V2Report => {
                self.counters.reports += 1;
                for r in p.address_records() {
                    let g = IpAddr::V6(r.multicast_addr());
                    self.record(port, r.record_type(), r.num_sources(), g, now);
                }
            }
            mld::Kind::Other => {}
        }
    }

    /// Rewrites the dirty interfaces of `filter` from their counting
    /// filters (copy-on-write: in place if no one else holds `filter`, else
    /// into a fresh copy that replaces it) and refreshes their
    /// false-positive estimates. Returns the dirty ports' mask (0: nothing
    /// to do). `filter` must have been built from this control's geometry.
    ///
    /// # Errors
    /// [`PortError`] if `filter` does not match (ports or geometry).
    pub fn publish(&mut self, filter: &mut Arc<PortFilter>) -> Result<u64, PortError> {
        let dirty = self.dirty;
        if dirty == 0 {
            return Ok(0);
        }
        let f = Arc::make_mut(filter);
        let mut d = dirty;
        while d != 0 {
            let port = d.trailing_zeros() as usize;
            d &= d - 1;
            f.set_port(port, &self.counting[port])?;
            let bloom = self.counting[port].to_bloom();
            self.fill[port] = bloom.count_ones() as f64 / bloom.params().bits() as f64;
            self.fpr[port] = bloom.false_positive_rate();
        }
        self.dirty = 0;
        self.counters.publishes += 1;
        Ok(dirty)
    }

    /// A new data-path filter from the counting filters (all interfaces).
    ///
    /// # Errors
    /// Never for a control built by [`MulticastControl::new`].
    pub fn build_filter(&self) -> Result<PortFilter, PortError> {
        PortFilter::build(&self.counting)
    }
}

/// Whether an ICMPv6 packet is an MLD message (types 130, 131, 132, 143).
fn is_mld(parsed: &Parsed, frame: &[u8]) -> bool {
    parsed
        .l4_bytes(frame)
        .first()
        .map(|&t| Icmpv6Message::from(t))
        .is_some_and(|t| {
            matches!(
                t,
                Icmpv6Message::MldQuery
                    | Icmpv6Message::MldReport
                    | Icmpv6Message::MldDone
                    | Icmpv6Message::MldReportV2
            )
        })
}

/// The multicast forwarding stage (see the module docs).
#[derive(Debug)]
pub struct MulticastStage {
    control: MulticastControl,
    filter: Arc<PortFilter>,
    forward_link_local: bool,
    records_per_batch: u32,
    /// `allow[i]`: the interfaces a packet that arrived on `i` may leave
    /// through (every interface but `i`; every interface for `i >= 64`),
    /// so an answer becomes an egress set with one AND and no branch.
    allow: Box<[u64; 256]>,
    counters: MulticastCounters,
    // Per-batch scratch, reused.
    keys: Vec<GroupKey>,
    slots: Vec<usize>,
    answers: Vec<u64>,
    // False-forward estimate (see the module docs).
    per_ingress: Vec<u64>,
    copies: Vec<u64>,
    epoch_candidates: Vec<u64>,
    epoch_copies: Vec<u64>,
    false_forward: Vec<f64>,
    /// The filters neighbouring routers advertise, by the port facing
    /// them ([`crate::peer`]): ORed into the answer for that port.
    remote: Vec<Option<Bloom>>,
    /// Ports with a remote filter.
    remote_mask: u64,
    /// Where new remote filters come from (the peering control path).
    remote_rx: Option<crossbeam_channel::Receiver<Vec<Option<Bloom>>>>,
    remote_hits: Vec<bool>,
}

impl MulticastStage {
    /// A stage sized from the config (`expected_groups`,
    /// `false_positive_rate`) by [`Params::for_port_filter`], with its
    /// static groups.
    ///
    /// # Errors
    /// See [`MulticastError`].
    pub fn new(config: &MulticastConfig) -> Result<Self, MulticastError> {
        if config.expected_groups > MAX_EXPECTED_GROUPS {
            return Err(MulticastError::ExpectedGroups(config.expected_groups));
        }
        for (port, i) in config.interfaces.iter().enumerate() {
            if i.static_groups.len() as u64 > config.expected_groups {
                return Err(MulticastError::TooManyStatic {
                    port,
                    count: i.static_groups.len(),
                    expected: config.expected_groups,
                });
            }
        }
        let params = Params::for_port_filter(config.expected_groups, config.false_positive_rate)?;
        let hasher = config.seed.map_or_else(Hasher::new, Hasher::with_seed);
        Self::with_params(config, params, hasher)
    }

    /// A stage with an explicit filter geometry and hasher (tests, benches).
    ///
    /// # Errors
    /// See [`MulticastError`].
    pub fn with_params(
        config: &MulticastConfig,
        params: Params,
        hasher: Hasher,
    ) -> Result<Self, MulticastError> {
        let ports = config.interfaces.len();
        let interval = config.membership_interval_ms.saturating_mul(1_000_000);
        let mut control = MulticastControl::new(ports, params, hasher, interval)?;
        control.verify_checksums = config.verify_checksums;
        control.set_max_learned(config.learned_cap());
        for (port, i) in config.interfaces.iter().enumerate() {
            for &g in &i.static_groups {
                if !g.is_multicast() {
                    return Err(MulticastError::NotMulticast { port, group: g });
                }
                control.add_static(port, group_key(g));
            }
        }
        let mut filter = Arc::new(control.build_filter()?);
        control.publish(&mut filter)?;
        control.counters.publishes = 0;
        Ok(MulticastStage {
            control,
            filter,
            forward_link_local: config.forward_link_local,
            records_per_batch: config.records_per_batch,
            allow: allow_table(ports),
            counters: MulticastCounters::default(),
            keys: Vec::with_capacity(QUERY_CHUNK),
            slots: Vec::with_capacity(QUERY_CHUNK),
            answers: vec![0; QUERY_CHUNK],
            per_ingress: vec![0; ports],
            copies: vec![0; ports],
            epoch_candidates: vec![0; ports],
            epoch_copies: vec![0; ports],
            false_forward: vec![0.0; ports],
            remote: Vec::new(),
            remote_mask: 0,
            remote_rx: None,
            remote_hits: vec![false; QUERY_CHUNK],
        })
    }

    /// Takes the filters neighbouring routers advertise from `rx` (the
    /// peering control path sends a port's filter, or `None`, whenever
    /// one changes): the stage answers a group with the ports whose
    /// learned or static memberships hold it, or whose remote filter does.
    /// A remote filter holds no addresses, only the sender's bits.
    pub fn set_remote_filters(&mut self, rx: crossbeam_channel::Receiver<Vec<Option<Bloom>>>) {
        self.remote_rx = Some(rx);
    }

    /// The newest remote filters, if any came.
    fn poll_remote(&mut self) {
        let Some(rx) = &self.remote_rx else { return };
        if rx.is_empty() {
            return;
        }
        let mut latest = None;
        while let Ok(v) = rx.try_recv() {
            latest = Some(v);
        }
        if let Some(v) = latest {
            self.remote_mask = v
                .iter()
                .enumerate()
                .take(64)
                .filter(|(_, f)| f.is_some())
                .fold(0, |m, (i, _)| m | 1 << i);
            self.remote = v;
        }
    }

    /// The control path (membership tables).
    pub fn control(&self) -> &MulticastControl {
        &self.control
    }

    /// The control path, writable: joins, leaves, static groups. Changes
    /// reach the data path at the next [`sync`](Self::sync) (every batch
    /// begins with one).
    pub fn control_mut(&mut self) -> &mut MulticastControl {
        &mut self.control
    }

    /// The counters: data path, plus the control path's.
    pub fn counters(&self) -> MulticastCounters {
        let c = &self.control.counters;
        MulticastCounters {
            reports: c.reports,
            queries: c.queries,
            records: c.records,
            sg_records: c.sg_records,
            joins: c.joins,
            refreshes: c.refreshes,
            leaves: c.leaves,
            leaves_ignored: c.leaves_ignored,
            expiries: c.expiries,
            invalid_groups: c.invalid_groups,
            bad_checksums: c.bad_checksums,
            malformed: c.malformed,
            unknown_port: c.unknown_port,
            joins_refused: c.joins_refused,
            records_over_budget: c.records_over_budget,
            publishes: c.publishes,
            events_sent: c.events_sent,
            events_applied: c.events_applied,
            events_superseded: c.events_superseded,
            ..self.counters.clone()
        }
    }

    /// The data-path filter now (a snapshot other workers can share; see
    /// [`install_filter`](Self::install_filter)).
    pub fn filter(&self) -> Arc<PortFilter> {
        Arc::clone(&self.filter)
    }

    /// Replaces the data-path filter by a snapshot published elsewhere (a
    /// control thread or another worker), between batches.
    pub fn install_filter(&mut self, filter: Arc<PortFilter>) {
        self.filter = filter;
    }

    /// Publishes pending membership changes to the data path, folding the
    /// false-forward estimate of the changed interfaces first.
    pub fn sync(&mut self) {
        if !self.control.is_dirty() {
            return;
        }
        let mut d = self.control.dirty;
        let total = self.counters.data_packets;
        while d != 0 {
            let j = d.trailing_zeros() as usize;
            d &= d - 1;
            self.fold_estimate(j, total);
        }
        // The filter was built from this control's counting filters, so
        // their geometry and key match and `set_port` cannot fail.
        if self.control.publish(&mut self.filter).is_err() {
            self.filter = Arc::new(
                self.control
                    .build_filter()
                    .unwrap_or_else(|_| (*self.filter).clone()),
            );
        }
    }

    fn fold_estimate(&mut self, j: usize, total: u64) {
        let candidates = total - self.per_ingress[j];
        let misses = (candidates - self.epoch_candidates[j])
            .saturating_sub(self.copies[j] - self.epoch_copies[j]);
        let f = self.control.fpr(j);
        if f < 1.0 {
            self.false_forward[j] += f * misses as f64 / (1.0 - f);
        }
        self.epoch_candidates[j] = candidates;
        self.epoch_copies[j] = self.copies[j];
    }

    /// Per-interface copies, filter estimate and false-forward estimate.
    pub fn interface_stats(&self) -> Vec<InterfaceStats> {
        let total = self.counters.data_packets;
        (0..self.control.ports)
            .map(|j| {
                let candidates = total - self.per_ingress[j];
                let misses = (candidates - self.epoch_candidates[j])
                    .saturating_sub(self.copies[j] - self.epoch_copies[j]);
                let f = self.control.fpr(j);
                let open = if f < 1.0 {
                    f * misses as f64 / (1.0 - f)
                } else {
                    0.0
                };
                InterfaceStats {
                    port: j,
                    members: self.control.member_count(j),
                    learned: self.control.learned_count(j),
                    max_learned: self.control.max_learned as u64,
                    refused: self.control.refused(j),
                    copies: self.copies[j],
                    fill: self.control.fill(j),
                    fpr: f,
                    false_forward_estimate: self.false_forward[j] + open,
                }
            })
            .collect()
    }

    /// The egress sets of packets to `keys` arriving on `ingress` (same
    /// length): the interfaces whose filter holds the group, less the
    /// ingress. No counters, no allocation; pending control changes are
    /// published first. The batched query the stage uses, for benches.
    ///
    /// # Panics
    /// If `ingress` or `out` is shorter than `keys`.
    pub fn egress_batch(&mut self, keys: &[GroupKey], ingress: &[u8], out: &mut [PortSet]) {
        self.sync();
        assert!(ingress.len() >= keys.len() && out.len() >= keys.len());
        let (ingress, out) = (&ingress[..keys.len()], &mut out[..keys.len()]);
        let allow = &*self.allow;
        self.filter.query_batch_low(keys, |i, ports| {
            out[i] = PortSet::from_mask(ports & allow[usize::from(ingress[i])]);
        });
    }

    /// Answers the gathered keys and sets the verdicts.
    fn flush(&mut self, batch: &mut Batch) {
        let n = self.keys.len();
        if n == 0 {
            return;
        }
        let ans = &mut self.answers[..n];
        self.filter
            .query_batch_low(&self.keys, |i, ports| ans[i] = ports);
        let mut remote = self.remote_mask;
        while remote != 0 {
            let j = remote.trailing_zeros() as usize;
            remote &= remote - 1;
            if let Some(Some(f)) = self.remote.get(j) {
                let hits = &mut self.remote_hits[..n];
                f.contains_batch(&self.keys, hits);
                for (a, &h) in ans.iter_mut().zip(hits.iter()) {
                    *a |= u64::from(h) << j;
                }
            }
        }
        let packets = batch.packets_mut();
        for (&slot, &a) in self.slots.iter().zip(ans.iter()) {
            let p = &mut packets[slot];
            let ing = p.ingress;
            if usize::from(ing) < self.per_ingress.len() {
                self.per_ingress[usize::from(ing)] += 1;
            }
            self.counters.data_packets += 1;
            let mask = a & self.allow[usize::from(ing)];
            if mask == 0 {
                self.counters.suppressed += 1;
                p.drop_for(DropReason::NoRoute);
                continue;
            }
            self.counters.forwarded += 1;
            self.counters.copies += u64::from(mask.count_ones());
            let mut m = mask;
            while m != 0 {
                self.copies[m.trailing_zeros() as usize] += 1;
                m &= m - 1;
            }
            let set = PortSet::from_mask(mask);
            p.verdict = match p.verdict {
                Verdict::Mark(_) => Verdict::Mark(set),
                _ => Verdict::Forward(set),
            };
        }
        self.keys.clear();
        self.slots.clear();
    }
}

/// The egress masks of every ingress port for a stage of `ports`
/// interfaces (`1..=64`): all of them but the ingress.
fn allow_table(ports: usize) -> Box<[u64; 256]> {
    let all = if ports >= 64 { !0 } else { (1u64 << ports) - 1 };
    let mut t = Box::new([all; 256]);
    for (i, a) in t.iter_mut().enumerate().take(64) {
        *a &= !(1u64 << i);
    }
    t
}

impl Stage for MulticastStage {
    fn name(&self) -> &'static str {
        "multicast"
    }

    fn process(&mut self, batch: &mut Batch, now: Timestamp) {
        // Expire at the batch's earliest packet time: a membership that ends
        // inside the batch still serves the packets before its end (and a
        // few after: extra copies, never a false negative).
        self.poll_remote();
        let first = batch.packets().iter().map(|p| p.ts).min().unwrap_or(now);
        self.control.expire(first.min(now));
        self.control.set_budget(self.records_per_batch);
        // Control messages first, so a join is in force for data behind it.
        for p in batch.packets_mut() {
            if !p.is_live() {
                continue;
            }
            let Some(parsed) = p.parsed.as_ref() else {
                continue;
            };
            if !matches!(parsed.protocol, IpProtocol::Igmp | IpProtocol::Icmpv6) {
                continue;
            }
            if self
                .control
                .learn(usize::from(p.ingress), parsed, p.data(), now)
                && parsed.dst_multicast
            {
                self.counters.control += 1;
                p.verdict = Verdict::Consumed;
            }
        }
        self.sync();
        for slot in 0..batch.len() {
            let p = &mut batch.packets_mut()[slot];
            if !p.is_live() {
                continue;
            }
            let Some(parsed) = p.parsed.as_ref() else {
                continue;
            };
            if !parsed.dst_multicast {
                continue;
            }
            let Some(dst) = parsed.flow.map(|f| f.dst()) else {
                continue;
            };
            if !self.forward_link_local && is_link_local(dst) {
                self.counters.link_local += 1;
                p.drop_for(DropReason::NoRoute);
                continue;
            }
            self.keys.push(group_key(dst));
            self.slots.push(slot);
            if self.keys.len() == QUERY_CHUNK {
                self.flush(batch);
            }
        }
        self.flush(batch);
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_injective_and_invert() {
        let a: IpAddr = "239.1.2.3".parse().unwrap();
        let b: IpAddr = "ff0e::1".parse().unwrap();
        assert_eq!(group_key(a), [0, 0, 0xffff, 0xef01_0203]);
        assert_eq!(group_key(b), [0xff0e_0000, 0, 0, 1]);
        assert_eq!(group_addr(&group_key(a)), a);
        assert_eq!(group_addr(&group_key(b)), b);
    }

    #[test]
    fn link_local_scope() {
        for (a, ll) in [
            ("224.0.0.251", true),
            ("224.0.1.24", false),
            ("239.255.255.250", false),
            ("ff02::fb", true),
            ("ff01::1", true),
            ("ff05::2", false),
            ("ff0e::1", false),
        ] {
            assert_eq!(is_link_local(a.parse().unwrap()), ll, "{a}");
        }
    }

    #[test]
    fn gmi_is_260_s() {
        assert_eq!(GROUP_MEMBERSHIP_INTERVAL_NS, 260_000_000_000);
    }
}
