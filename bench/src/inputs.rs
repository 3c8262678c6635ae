//! Deterministic benchmark inputs, generated outside the timed sections.

/// SplitMix64 (the route tables' generator), so inputs are identical run to
/// run without pulling a random-number crate into the timed binary.
pub use dataplane::route::synth::Rng;

/// An IPv4 5-tuple as the kernels see it (4 words) and as a peer hashing
/// bytes sees it (the 13 packed bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct V4Key {
    /// `[src, dst, (sport << 16) | dport, proto]`.
    pub words: [u32; 4],
    /// src(4) dst(4) sport(2) dport(2) proto(1), network byte order.
    pub bytes: [u8; 13],
}

impl V4Key {
    /// Builds both forms from the tuple.
    pub fn new(src: u32, dst: u32, sport: u16, dport: u16, proto: u8) -> Self {
        let mut bytes = [0u8; 13];
        bytes[0..4].copy_from_slice(&src.to_be_bytes());
        bytes[4..8].copy_from_slice(&dst.to_be_bytes());
        bytes[8..10].copy_from_slice(&sport.to_be_bytes());
        bytes[10..12].copy_from_slice(&dport.to_be_bytes());
        bytes[12] = proto;
        V4Key {
            words: [
                src,
                dst,
                (u32::from(sport) << 16) | u32::from(dport),
                u32::from(proto),
            ],
            bytes,
        }
    }
}

/// `n` distinct-looking random IPv4 5-tuples (TCP/UDP mix) from `seed`.
pub fn v4_keys(seed: u64, n: usize) -> Vec<V4Key> {
    let mut r = Rng::new(seed);
    (0..n)
        .map(|_| {
            let ports = r.next_u32();
            let proto = if r.next_u32() & 1 == 0 { 6 } else { 17 };
            V4Key::new(
                r.next_u32(),
                r.next_u32(),
                (ports >> 16) as u16,
                ports as u16,
                proto,
            )
        })
        .collect()
}

/// `n` random IPv6 5-tuples in the kernels' 10-word form.
pub fn v6_words(seed: u64, n: usize) -> Vec<[u32; 10]> {
    let mut r = Rng::new(seed);
    (0..n)
        .map(|_| {
            let mut w: [u32; 10] = std::array::from_fn(|_| r.next_u32());
            w[9] = 6;
            w
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_forms_agree() {
        let k = V4Key::new(0x0a000001, 0x0a000002, 1234, 80, 6);
        assert_eq!(k.words, [0x0a000001, 0x0a000002, (1234 << 16) | 80, 6]);
        assert_eq!(k.bytes, [10, 0, 0, 1, 10, 0, 0, 2, 0x04, 0xd2, 0, 80, 6]);
        assert_eq!(v4_keys(1, 10), v4_keys(1, 10));
    }
}
