//! Membership filters on the wire: their geometry, cut into segments that
//! fit a frame, put back together, and the bits that changed between two
//! versions.

use kernels::bloom::{Bloom, HEADER_LEN, Params};

use crate::addr::GroupKey;
use crate::wire::peer::{MAX_SEGMENTS, Segment, segment_capacity};

/// The geometry of every membership filter: the classic filter with the
/// fewest range-coded bytes for `groups` groups at `fpr`
/// ([`Params::for_transfer`]: Mitzenmacher's sizing), whose raw form stays
/// below the groups' list of IPv4 addresses when that is possible, and
/// which fits [`MAX_SEGMENTS`] segments in any case.
///
/// # Errors
/// When no filter does.
pub fn params(groups: u64, fpr: f64) -> Result<Params, String> {
    let most = u64::from(MAX_SEGMENTS) * segment_capacity(true) as u64 * 8;
    let list = groups
        .saturating_mul(4)
        .saturating_sub(HEADER_LEN as u64 + 1)
        .saturating_mul(8);
    Params::for_transfer(groups, fpr, list.min(most))
        .or_else(|_| Params::for_transfer(groups, fpr, most))
        .map_err(|e| {
            format!("no filter of at most {most} bits holds {groups} groups at {fpr}: {e}")
        })
}

/// A filter's transfer form cut into segment bodies (index, count, the
/// items the sender says it holds, the bytes), each fitting a message.
pub fn segments(encoded: &[u8], items: u32, tagged: bool) -> Vec<Vec<u8>> {
    let cap = segment_capacity(tagged);
    let chunks: Vec<&[u8]> = encoded.chunks(cap).collect();
    let count = chunks.len() as u16;
    chunks
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let mut b = Vec::with_capacity(c.len() + 8);
            Segment {
                index: i as u16,
                count,
                items,
                bytes: c,
            }
            .emit(&mut b);
            b
        })
        .collect()
}

/// A filter being put back together from its segments.
#[derive(Debug, Clone)]
pub struct Assembly {
    /// The version (or nonce) the segments belong to.
    id: u64,
    parts: Vec<Option<Vec<u8>>>,
    have: usize,
}

/// Adds `seg` of filter `id` to `slot` (a segment of another id starts it
/// again; one whose count disagrees with the others is dropped); returns
/// the whole transfer form once every segment is there.
pub fn assemble(slot: &mut Option<Assembly>, id: u64, seg: &Segment<'_>) -> Option<Vec<u8>> {
    let count = usize::from(seg.count);
    let a = match slot {
        Some(a) if a.id == id && a.parts.len() == count => a,
        Some(a) if a.id == id => return None,
        _ => slot.insert(Assembly {
            id,
            parts: vec![None; count],
            have: 0,
        }),
    };
    let part = a.parts.get_mut(usize::from(seg.index))?;
    if part.is_none() {
        *part = Some(seg.bytes.to_vec());
        a.have += 1;
    }
    if a.have < a.parts.len() {
        return None;
    }
    let whole = a.parts.iter().flatten().flatten().copied().collect();
    *slot = None;
    Some(whole)
}

/// The positions of the bits that differ between two filters of one
/// geometry.
pub fn flipped(old: &Bloom, new: &Bloom) -> Vec<u32> {
    let mut v = Vec::new();
    for (w, (a, b)) in old.words().zip(new.words()).enumerate() {
        let mut x = a ^ b;
        while x != 0 {
            v.push((w * 64) as u32 + x.trailing_zeros());
            x &= x - 1;
        }
    }
    v
}

/// Bytes of `groups` as a list of addresses: 4 per IPv4 group, 16 per IPv6.
pub fn list_bytes(groups: &[GroupKey]) -> u64 {
    groups
        .iter()
        .map(|g| if g[..3] == [0, 0, 0xffff] { 4 } else { 16 })
        .sum()
}

/// An attenuated Bloom filter (the survey's resource routing, §6.1):
/// layer `d` holds the groups `d` routers beyond the sender (layer 0 its
/// own hosts' groups). Layers let a router tell how far a group is, so
/// that in a network with cycles a group that no host wants any more
/// climbs one layer per update and falls off the last, instead of going
/// round the cycle for ever.
#[derive(Debug, Clone, PartialEq)]
pub struct Layers(Vec<Bloom>);

impl Layers {
    /// `depth` empty layers.
    pub fn empty(params: Params, hasher: &kernels::Hasher, depth: usize) -> Layers {
        Layers(
            (0..depth.max(1))
                .map(|_| Bloom::new(params, hasher.clone()))
                .collect(),
        )
    }

    /// The layers, nearest first.
    pub fn layers(&self) -> &[Bloom] {
        &self.0
    }

    /// Layer `d`, writable.
    pub fn layer_mut(&mut self, d: usize) -> Option<&mut Bloom> {
        self.0.get_mut(d)
    }

    /// Every layer ORed: the groups reachable through the sender at any
    /// distance (the receiving port's multicast filter).
    pub fn union(&self) -> Bloom {
        let mut u = self.0[0].clone();
        for l in &self.0[1..] {
            let _ = u.union_with(l);
        }
        u
    }

    /// The groups of layers 1 and beyond (other routers'), estimated from
    /// their fill (0 when they are empty).
    pub fn beyond(&self) -> u64 {
        let mut u = Bloom::new(self.0[0].params(), self.0[0].hasher().clone());
        for l in &self.0[1..] {
            let _ = u.union_with(l);
        }
        u.estimate_items().round() as u64
    }

    /// The layers up to the last that holds anything.
    fn used(&self) -> usize {
        self.0
            .iter()
            .rposition(|l| l.count_ones() > 0)
            .map_or(1, |i| i + 1)
    }

    /// The transfer form: `u8` layers sent (trailing empty ones left out,
    /// at least one), then each layer as a `u32` length and its
    /// compressed transfer form ([`Bloom::to_compressed_bytes`]).
    pub fn encode(&self) -> Vec<u8> {
        let n = self.used();
        let mut out = vec![n as u8];
        for l in &self.0[..n] {
            let b = l.to_compressed_bytes();
            out.extend_from_slice(&(b.len() as u32).to_be_bytes());
            out.extend_from_slice(&b);
        }
        out
    }

    /// The raw size of what [`encode`](Self::encode) sends: each sent
    /// layer's header and bit vector.
    pub fn raw_len(&self) -> u64 {
        self.used() as u64 * (HEADER_LEN as u64 + self.0[0].params().bits() / 8)
    }

    /// Reads [`encode`](Self::encode)'s form: at most `depth` layers, each
    /// of geometry `params` under `hasher`'s key, the rest empty. `None`
    /// for anything else.
    pub fn decode(
        bytes: &[u8],
        params: Params,
        hasher: &kernels::Hasher,
        depth: usize,
    ) -> Option<Layers> {
        let (&n, mut rest) = bytes.split_first()?;
        let n = usize::from(n);
        if n == 0 || n > depth {
            return None;
        }
        let mut out = Layers::empty(params, hasher, depth);
        for d in 0..n {
            let (len, r) = rest.split_first_chunk::<4>()?;
            let len = u32::from_be_bytes(*len) as usize;
            let (b, r) = r.split_at_checked(len)?;
            let f = Bloom::from_bytes(b, hasher.clone()).ok()?;
            if f.params() != params {
                return None;
            }
            out.0[d] = f;
            rest = r;
        }
        rest.is_empty().then_some(out)
    }

    /// The positions (`layer * m + bit`) that differ from `other`, of the
    /// same geometry and depth.
    pub fn flipped(&self, other: &Layers) -> Vec<u32> {
        let m = self.0[0].params().bits() as u32;
        let mut v = Vec::new();
        for (d, (a, b)) in self.0.iter().zip(&other.0).enumerate() {
            v.extend(flipped(a, b).into_iter().map(|p| d as u32 * m + p));
        }
        v
    }

    /// Flips position `layer * m + bit`; `false` when out of range.
    pub fn flip(&mut self, position: u32) -> bool {
        let m = self.0[0].params().bits();
        let (d, bit) = (u64::from(position) / m, u64::from(position) % m);
        self.0.get_mut(d as usize).is_some_and(|l| l.flip(bit))
    }
}
