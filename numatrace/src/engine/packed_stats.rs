//! A kernel task entry as the engine's table keeps it between reads: its 8-byte words that are
//! not zero (a bitmap of which, then those words). Whole entries were 720 bytes a task, 72 MB
//! at 100 000 tasks, in every command; a task that counted a few kinds of events has a few
//! dozen words that are not zero (its identity, stamps and counters).

use numatrace_common::TaskStats;

/// 8-byte words in an entry.
const WORDS: usize = size_of::<TaskStats>() / 8;
/// u64s of the bitmap.
const MASK: usize = WORDS.div_ceil(64);

const _: () = assert!(size_of::<TaskStats>().is_multiple_of(8) && align_of::<TaskStats>() == 8);
// No implicit padding: the fields' own sizes add up to the whole (4+4+16+4+4, the skip
// reasons, then only u64s, then two u32 nodes; as numatrace-common's layout test has it).
const _: () = assert!(
    size_of::<TaskStats>()
        == 32
            + 8 * numatrace_common::SKIP_REASON_SLOTS
            + (numatrace_common::TASK_STATS_U64S + 1) * 8
            + 8
);

/// `s` as its words.
fn words(s: &TaskStats) -> &[u64; WORDS] {
    // SAFETY: TaskStats is #[repr(C)] plain integers, aligned to 8, its size a multiple of 8
    // and without implicit padding (all asserted above): every byte is initialised, and any
    // bits are a u64.
    unsafe { &*(s as *const TaskStats).cast::<[u64; WORDS]>() }
}

/// `s` as its words, to write.
fn words_mut(s: &mut TaskStats) -> &mut [u64; WORDS] {
    // SAFETY: as in `words`; every field is an integer (or an array of them), so any bits
    // written are a valid TaskStats.
    unsafe { &mut *(s as *mut TaskStats).cast::<[u64; WORDS]>() }
}

/// `w`'s bitmap of words not zero.
#[inline(always)]
fn nonzero_of(w: &[u64; WORDS]) -> [u64; MASK] {
    let mut m = [0u64; MASK];
    for (i, &v) in w.iter().enumerate() {
        m[i / 64] |= u64::from(v != 0) << (i % 64);
    }
    m
}

/// The indices of the bits set in `m`, in order: a walk of the words not zero alone (a few
/// dozen of ~90).
#[inline(always)]
fn set_bits(m: [u64; MASK]) -> impl Iterator<Item = usize> {
    m.into_iter().enumerate().flat_map(|(b, mut bits)| {
        std::iter::from_fn(move || {
            (bits != 0).then(|| {
                let j = bits.trailing_zeros() as usize;
                bits &= bits - 1;
                b * 64 + j
            })
        })
    })
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PackedStats {
    /// Bit `i`: word `i` is not zero, and is in `words`.
    nonzero: [u64; MASK],
    /// The words not zero, in order.
    words: Box<[u64]>,
}

impl PackedStats {
    pub fn pack(s: &TaskStats) -> Self {
        let mut p = Self::default();
        p.update(s);
        p
    }

    /// Holds `s` now: whether it differs from what was held. An entry read again unchanged
    /// is compared word for word where it is not zero, without writing or allocating; a
    /// changed one keeps its allocation when the number of words not zero is the same.
    #[inline]
    pub fn update(&mut self, s: &TaskStats) -> bool {
        let w = words(s);
        let nonzero = nonzero_of(w);
        if nonzero == self.nonzero
            && set_bits(nonzero)
                .zip(self.words.iter())
                .all(|(j, &held)| w[j] == held)
        {
            return false;
        }
        let n = nonzero
            .iter()
            .map(|m| m.count_ones() as usize)
            .sum::<usize>();
        if self.words.len() != n {
            self.words = vec![0; n].into_boxed_slice();
        }
        for (slot, j) in self.words.iter_mut().zip(set_bits(nonzero)) {
            *slot = w[j];
        }
        self.nonzero = nonzero;
        true
    }

    /// The entry held.
    #[inline]
    pub fn unpack(&self) -> TaskStats {
        let mut s = TaskStats::default();
        let out = words_mut(&mut s);
        for (j, &v) in set_bits(self.nonzero).zip(self.words.iter()) {
            out[j] = v;
        }
        s
    }

    /// Where its words are and their length in bytes (for prefetch hints).
    pub fn words_bytes(&self) -> (*const u8, usize) {
        (self.words.as_ptr().cast(), self.words.len() * 8)
    }

    /// Bytes it holds beyond its own size.
    #[cfg(test)]
    fn heap_bytes(&self) -> usize {
        self.words.len() * 8
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn entry(ws: &[(usize, u64)]) -> TaskStats {
        let mut s = TaskStats::default();
        for &(i, v) in ws {
            words_mut(&mut s)[i % WORDS] = v;
        }
        s
    }

    proptest! {
        /// Packing round-trips; an update says whether the entry changed and leaves it held;
        /// an entry one word apart is told apart.
        #[test]
        fn packing_round_trips_and_updates_tell_changes(
            a in proptest::collection::vec((0..WORDS, any::<u64>()), 0..40),
            b in proptest::collection::vec((0..WORDS, prop_oneof![Just(0u64), any::<u64>()]), 0..40),
            flip in 0..WORDS,
        ) {
            let (a, b) = (entry(&a), entry(&b));
            let mut p = PackedStats::pack(&a);
            prop_assert_eq!(p.unpack(), a);
            prop_assert!(!p.update(&a), "the same entry is no change");
            prop_assert_eq!(p.update(&b), a != b);
            prop_assert_eq!(p.unpack(), b);
            let mut c = b;
            words_mut(&mut c)[flip] ^= 1;
            prop_assert!(p.update(&c), "one word apart");
            prop_assert_eq!(p.unpack(), c);
        }
    }

    #[test]
    fn only_the_words_not_zero_are_kept() {
        let s = entry(&[(0, 7), (3, 1), (WORDS - 1, u64::MAX)]);
        let p = PackedStats::pack(&s);
        assert_eq!(p.heap_bytes(), 3 * 8);
        assert_eq!(p.unpack(), s);
        assert_eq!(PackedStats::pack(&TaskStats::default()).heap_bytes(), 0);
        // A word that became zero and another that became non-zero: same count, other words.
        let mut q = p.clone();
        assert!(q.update(&entry(&[(1, 7), (3, 1), (WORDS - 1, u64::MAX)])));
        assert_eq!(q.unpack(), entry(&[(1, 7), (3, 1), (WORDS - 1, u64::MAX)]));
    }
}
