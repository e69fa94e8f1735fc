//! One task's refreshes in `top`'s history, packed. A busy task keeps a minute of them (its
//! sparklines and the longest activity window): at 100 000 busy tasks one boxed array of
//! amounts per task and refresh was 1.5 GiB and 100 000 allocations a refresh. Here each
//! refresh is a few bytes in one ring per task: its end, and the amounts that are not zero, as
//! variable-length integers (most amounts are small).

use std::collections::VecDeque;

/// A refresh of a task as stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry<const N: usize> {
    /// CLOCK_MONOTONIC at the refresh's end.
    pub end_ns: u64,
    /// The task did something in it (else only its run time is kept).
    pub active: bool,
    pub amounts: [u64; N],
}

/// Where an entry starts: stays valid while entries come and the older ones go, until that
/// entry itself goes.
pub type Pos = u64;

/// A task's entries, oldest first; their ends must not decrease.
#[derive(Clone, Debug, Default)]
pub struct Packed<const N: usize> {
    bytes: VecDeque<u8>,
    /// Bytes dropped from the front so far: a [`Pos`] less this is an index into `bytes`.
    dropped: u64,
    /// The end the entries' ends are counted from (the first one pushed).
    base_ns: u64,
}

impl<const N: usize> Packed<N> {
    /// Room for `entries` more like the latest one (so that the rings of tasks that became busy
    /// together do not all grow at the same refresh).
    pub fn reserve_like_last(&mut self, entries: usize, last: Pos) {
        let size = (self.end() - last) as usize;
        self.bytes.reserve(size.saturating_mul(entries));
    }

    pub fn push(&mut self, e: &Entry<N>) {
        if self.bytes.is_empty() && self.dropped == 0 {
            self.base_ns = e.end_ns;
        }
        debug_assert!(e.end_ns >= self.base_ns, "ends must not decrease");
        const { assert!(N < 32, "the mask holds N bits and the active flag") };
        let mut mask = u64::from(e.active) << N;
        for (i, a) in e.amounts.iter().enumerate() {
            mask |= u64::from(*a != 0) << i;
        }
        put_varint(&mut self.bytes, e.end_ns.saturating_sub(self.base_ns));
        put_varint(&mut self.bytes, mask);
        for a in e.amounts.iter().filter(|a| **a != 0) {
            put_varint(&mut self.bytes, *a);
        }
    }

    /// The oldest entry's position.
    pub fn start(&self) -> Pos {
        self.dropped
    }

    /// Where the next entry will start.
    pub fn end(&self) -> Pos {
        self.dropped + self.bytes.len() as u64
    }

    /// Index into `bytes` of the entry at `at` (`None` at the end).
    fn index(&self, at: Pos) -> Option<usize> {
        let i = usize::try_from(at.checked_sub(self.dropped)?).ok()?;
        (i < self.bytes.len()).then_some(i)
    }

    /// The end of the entry at `at` (`None` at the end), without decoding its amounts.
    pub fn end_ns_at(&self, at: Pos) -> Option<u64> {
        let mut i = self.index(at)?;
        Some(self.base_ns + get_varint(&self.bytes, &mut i))
    }

    /// Where the entry after the one at `at` starts, its amounts skipped, not decoded.
    fn next_after(&self, at: Pos) -> Option<Pos> {
        let mut i = self.index(at)?;
        get_varint(&self.bytes, &mut i);
        let mask = get_varint(&self.bytes, &mut i);
        for _ in 0..(mask & ((1 << N) - 1)).count_ones() {
            while self.bytes.get(i).is_some_and(|b| b & 0x80 != 0) {
                i += 1;
            }
            i += 1;
        }
        Some(self.dropped + i as u64)
    }

    /// The entry at `at` and where the next starts (`None` at the end).
    pub fn read(&self, at: Pos) -> Option<(Entry<N>, Pos)> {
        let mut i = self.index(at)?;
        let end_ns = self.base_ns + get_varint(&self.bytes, &mut i);
        let mask = get_varint(&self.bytes, &mut i);
        let mut amounts = [0; N];
        for (b, a) in amounts.iter_mut().enumerate() {
            if mask & (1 << b) != 0 {
                *a = get_varint(&self.bytes, &mut i);
            }
        }
        let e = Entry {
            end_ns,
            active: mask & (1 << N) != 0,
            amounts,
        };
        Some((e, self.dropped + i as u64))
    }

    /// The entries from `at` on, each with its position.
    pub fn from(&self, at: Pos) -> impl Iterator<Item = (Pos, Entry<N>)> + '_ {
        let mut next = Some(at);
        std::iter::from_fn(move || {
            let at = next?;
            let (e, after) = self.read(at)?;
            next = Some(after);
            Some((at, e))
        })
    }

    /// Every entry, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = Entry<N>> + '_ {
        self.from(self.start()).map(|(_, e)| e)
    }

    /// Drops the entries that ended before `oldest_ns`.
    pub fn drop_before(&mut self, oldest_ns: u64) {
        while self
            .end_ns_at(self.dropped)
            .is_some_and(|end| end < oldest_ns)
        {
            let Some(next) = self.next_after(self.dropped) else {
                break;
            };
            let n = ((next - self.dropped) as usize).min(self.bytes.len());
            self.bytes.drain(..n);
            self.dropped += n as u64;
        }
    }
}

/// LEB128: seven bits a byte, low first.
fn put_varint(out: &mut VecDeque<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push_back((v as u8) | 0x80);
        v >>= 7;
    }
    out.push_back(v as u8);
}

fn get_varint(bytes: &VecDeque<u8>, i: &mut usize) -> u64 {
    let mut v = 0u64;
    let mut shift = 0;
    while let Some(&b) = bytes.get(*i) {
        *i += 1;
        if shift < 64 {
            v |= u64::from(b & 0x7f) << shift;
        }
        if b & 0x80 == 0 {
            break;
        }
        shift += 7;
    }
    v
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn entry(end_ns: u64, active: bool, amounts: [u64; 3]) -> Entry<3> {
        Entry {
            end_ns,
            active,
            amounts,
        }
    }

    #[test]
    fn entries_come_back_as_pushed_and_go_oldest_first() {
        let mut p = Packed::<3>::default();
        let es = [
            entry(5_000_000_000, true, [1, 0, u64::MAX]),
            entry(6_000_000_000, false, [0, 0, 0]),
            entry(7_000_000_000, true, [0, 300, 0]),
        ];
        let mut at = Vec::new();
        for e in &es {
            at.push(p.end());
            p.push(e);
        }
        assert_eq!(p.iter().collect::<Vec<_>>(), es);
        assert_eq!(
            p.read(at[2]).map(|(e, next)| (e, next == p.end())),
            Some((es[2], true))
        );
        p.drop_before(6_000_000_000);
        assert_eq!(p.start(), at[1]);
        // Positions of the entries left stay valid.
        assert_eq!(p.read(at[2]).map(|(e, _)| e), Some(es[2]));
        assert_eq!(p.read(at[0]), None);
        p.drop_before(u64::MAX);
        assert_eq!(p.iter().count(), 0);
        assert_eq!(p.start(), p.end());
        // The ends are still counted from the first entry ever pushed.
        p.push(&es[2]);
        assert_eq!(p.iter().collect::<Vec<_>>(), [es[2]]);
    }

    proptest! {
        #[test]
        fn any_entries_round_trip(
            steps in proptest::collection::vec((0u64..3_000_000_000, any::<bool>(), any::<[u64; 3]>(), 0u64..4), 1..60),
        ) {
            let mut p = Packed::<3>::default();
            let mut want: VecDeque<Entry<3>> = VecDeque::new();
            let mut end = 1_000;
            for (gap, active, mut amounts, zeros) in steps {
                end += gap;
                // Small and zero amounts, as most are.
                for a in amounts.iter_mut().take(zeros as usize) {
                    *a %= 1000;
                }
                let e = entry(end, active, amounts);
                p.push(&e);
                want.push_back(e);
                if gap % 5 == 0 {
                    let oldest = end.saturating_sub(gap * 3);
                    p.drop_before(oldest);
                    while want.front().is_some_and(|e| e.end_ns < oldest) {
                        want.pop_front();
                    }
                }
                prop_assert_eq!(p.iter().collect::<Vec<_>>(), want.iter().copied().collect::<Vec<_>>());
                // The shortcuts agree with a full read.
                for (at, e) in p.from(p.start()) {
                    prop_assert_eq!(p.end_ns_at(at), Some(e.end_ns));
                    prop_assert_eq!(p.next_after(at), p.read(at).map(|(_, next)| next));
                }
            }
        }
    }
}
