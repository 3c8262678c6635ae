//! SFB's arrival kernel: every backend the CPU has is bit-identical to the
//! scalar reference, on random bin sets (counts and probabilities anywhere
//! in range, including 0, the target and 0xFFFF probabilities), offset
//! words and steps, and over sequences of arrivals on one set.

use kernels::Backend;
use kernels::sfb::{self, Kernel, SLOTS, Steps};
use proptest::prelude::*;

fn kernels() -> Vec<Kernel> {
    Backend::available_list()
        .into_iter()
        .filter_map(|b| Kernel::new(b).ok())
        .collect()
}

/// A bin word: counts kept below `u16::MAX` (the kernel's contract), often
/// 0 or near the target; probabilities often 0 or near 0xFFFF.
fn word() -> impl Strategy<Value = u32> {
    let q = prop_oneof![Just(0u32), 0u32..40, 0u32..0xFFFE];
    let p = prop_oneof![
        Just(0u32),
        Just(0xFFFF),
        0xFF00u32..=0xFFFF,
        any::<u16>().prop_map(u32::from)
    ];
    (q, p).prop_map(|(q, p)| (p << 16) | q)
}

fn steps() -> impl Strategy<Value = Steps> {
    (0u16..40, any::<u16>(), any::<u16>())
        .prop_map(|(target, increment, decrement)| Steps::new(target, increment, decrement))
}

proptest! {
    #[test]
    fn backends_equal_scalar(
        words in proptest::collection::vec(word(), 128),
        packed in proptest::collection::vec(any::<u64>(), 1..40),
        s in steps(),
    ) {
        let mut start = [0u32; SLOTS];
        start[..128].copy_from_slice(&words);
        let mut want = start;
        let mut expect = Vec::new();
        for &p in &packed {
            expect.push(sfb::update_raise_scalar(&mut want, sfb::offsets(p), &s));
        }
        for k in kernels() {
            let mut got = start;
            for (&p, &e) in packed.iter().zip(&expect) {
                let r = k.update_raise(&mut got, sfb::offsets(p), &s);
                prop_assert_eq!(r, e, "{:?}", k.backend());
            }
            prop_assert_eq!(&got[..], &want[..], "{:?}", k.backend());
        }
    }

    #[test]
    fn lower_undoes_the_raise_of_counts(
        words in proptest::collection::vec(word(), 128),
        p in any::<u64>(),
    ) {
        let mut bins = [0u32; SLOTS];
        bins[..128].copy_from_slice(&words);
        let before = bins;
        let offs = sfb::offsets(p);
        sfb::raise(&mut bins, offs);
        sfb::lower(&mut bins, offs);
        prop_assert_eq!(&bins[..], &before[..]);
    }
}
