//! What numatrace counts, as plain data: the counters of one task, process, cgroup or window
//! ([`Counts`]) and the records that carry them. No aya types, serde both ways (a capture file
//! and an offline report read them back), shared by every frontend.
//!
//! Every counter struct is declared once with [`counter_struct!`], which also derives how two
//! values add up (tasks into a process) and how a later value differs from an earlier one
//! (two snapshots): the field list is written in one place.

use std::collections::BTreeMap;

pub mod filter;
pub mod hist;
mod item;
pub mod key_hash;
pub mod window;

pub use filter::{Filter, within};
pub use hist::{Log2Bucket, log2_buckets, quantile};
pub use item::Item;
pub use window::{Scope, Window};

use numatrace_common::{
    RegionKey, SKIP_REASON_NAMES, SKIP_REASON_OTHER, SKIP_REASON_SLOTS, TaskStats,
};
use serde::{Deserialize, Serialize};

/// Declares a counter struct; each field has a kind that says how it combines (the kinds of
/// numatrace-common's counter table, plus `nested`):
/// - `sum`: a count; added, and differenced between snapshots; `computed` likewise (a count
///   userspace computes from the kernel's values);
/// - `max`: a high-water mark or a level (longest call, scan sequence): the larger is kept when
///   adding, the later value in a difference;
/// - `level`: an `Option<f64>` measured on one task: the later value in a difference, left alone
///   when adding (it does not add up);
/// - `ratio`: an `Option<f64>` derived from sums: recomputed by `finished()`;
/// - `derived`: a count derived from others (remote = faults − local): recomputed by
///   `finished()`, never compared (the kernel updates its parts one after the other, so a
///   copy taken in between may be one off);
/// - `nested`: another such struct.
macro_rules! counter_struct {
    (
        $(#[$sm:meta])*
        pub struct $name:ident {
            $( $(#[$fm:meta])* $kind:ident $f:ident : $t:ty ),* $(,)?
        }
    ) => {
        $(#[$sm])*
        #[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
        // Fields added later read as zero from older JSON (captures, saved reports).
        #[serde(default)]
        pub struct $name { $( $(#[$fm])* pub $f: $t ),* }

        impl $name {
            /// 64-bit words a value packs into (see [`PackedCounts`]).
            pub const WORDS: usize = 0 $( + counter_struct!(@n $kind $t) )*;

            /// Each field as 64-bit words, in declaration order (an `Option<f64>` as whether
            /// it is set, then its bits): the value again through [`Self::from_words`].
            /// Inlined whole, so that each word's position is a constant.
            #[inline(always)]
            pub fn put_words(&self, out: &mut impl FnMut(u64)) {
                $( counter_struct!(@put $kind self.$f, out); )*
            }

            /// The value whose [`Self::put_words`] gave the words `next` returns in turn.
            #[inline(always)]
            pub fn from_words(next: &mut impl FnMut() -> u64) -> Self {
                Self { $( $f: counter_struct!(@get $kind $t, next) ),* }
            }

            /// Adds `o` into `self` (ratios are left to `finished()`).
            pub fn add(&mut self, o: &Self) {
                $( counter_struct!(@add $kind self.$f, o.$f); )*
            }

            /// What was counted between `earlier` and `self` (ratios: see `finished()`).
            pub fn delta(&self, earlier: &Self) -> Self {
                Self { $( $f: counter_struct!(@sub $kind self.$f, earlier.$f) ),* }
            }

            /// Names of the counters that are lower in `self` than in `earlier`: counters only
            /// grow, so any name here is a bug or a lost update.
            pub fn decreased(&self, earlier: &Self, prefix: &str, out: &mut Vec<String>) {
                $( counter_struct!(@dec $kind self.$f, earlier.$f, prefix, stringify!($f), out); )*
            }
        }
    };
    (@n nested $t:ty) => { <$t>::WORDS };
    (@n level $t:ty) => { 2 };
    (@n ratio $t:ty) => { 2 };
    (@n $other:ident $t:ty) => { 1 };
    (@put nested $a:expr, $out:expr) => { $a.put_words($out) };
    (@put level $a:expr, $out:expr) => { put_option($a, $out) };
    (@put ratio $a:expr, $out:expr) => { put_option($a, $out) };
    (@put $other:ident $a:expr, $out:expr) => { $out($a) };
    (@get nested $t:ty, $next:expr) => { <$t>::from_words($next) };
    (@get level $t:ty, $next:expr) => { get_option($next) };
    (@get ratio $t:ty, $next:expr) => { get_option($next) };
    (@get $other:ident $t:ty, $next:expr) => { $next() };
    // Saturating: counters from a capture can be anything, and a total pinned at u64::MAX
    // says "at least this" where a wrapped one would be small and wrong.
    (@add sum $a:expr, $b:expr) => { $a = $a.saturating_add($b) };
    (@add computed $a:expr, $b:expr) => { $a = $a.saturating_add($b) };
    (@add max $a:expr, $b:expr) => { $a = $a.max($b) };
    (@add level $a:expr, $b:expr) => { let _ = (&$a, &$b); };
    (@add ratio $a:expr, $b:expr) => { let _ = (&$a, &$b); };
    (@add derived $a:expr, $b:expr) => { let _ = (&$a, &$b); };
    (@add nested $a:expr, $b:expr) => { $a.add(&$b) };
    (@sub sum $a:expr, $b:expr) => { $a.saturating_sub($b) };
    (@sub computed $a:expr, $b:expr) => { $a.saturating_sub($b) };
    (@sub max $a:expr, $b:expr) => { $a };
    (@sub level $a:expr, $b:expr) => { $a };
    (@sub ratio $a:expr, $b:expr) => { None };
    (@sub derived $a:expr, $b:expr) => { 0 };
    (@sub nested $a:expr, $b:expr) => { $a.delta(&$b) };
    (@dec sum $a:expr, $b:expr, $p:expr, $n:expr, $out:expr) => {
        if $a < $b {
            $out.push(format!("{}{}", $p, $n));
        }
    };
    (@dec computed $a:expr, $b:expr, $p:expr, $n:expr, $out:expr) => {
        counter_struct!(@dec sum $a, $b, $p, $n, $out)
    };
    (@dec nested $a:expr, $b:expr, $p:expr, $n:expr, $out:expr) => {
        $a.decreased(&$b, &format!("{}{}.", $p, $n), $out)
    };
    (@dec $other:ident $a:expr, $b:expr, $p:expr, $n:expr, $out:expr) => {};
}

/// Skipped VMAs by reason, indexed like the kernel's `enum numa_vmaskip_reason` (last slot: a
/// reason newer than this build). In JSON, a map of the reasons that occurred.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SkipCounts(pub [u64; SKIP_REASON_SLOTS]);

pub fn skip_reason_name(slot: usize) -> &'static str {
    if slot >= SKIP_REASON_OTHER {
        return "other";
    }
    SKIP_REASON_NAMES.get(slot).copied().unwrap_or("other")
}

/// An `Option<f64>` as two words (see `put_words`): set or not, then its bits.
#[inline(always)]
fn put_option(v: Option<f64>, out: &mut impl FnMut(u64)) {
    out(u64::from(v.is_some()));
    out(v.map_or(0, f64::to_bits));
}

#[inline(always)]
fn get_option(next: &mut impl FnMut() -> u64) -> Option<f64> {
    let set = next() != 0;
    let bits = next();
    set.then(|| f64::from_bits(bits))
}

impl SkipCounts {
    pub const WORDS: usize = SKIP_REASON_SLOTS;

    #[inline(always)]
    pub fn put_words(&self, out: &mut impl FnMut(u64)) {
        self.0.iter().for_each(|&w| out(w));
    }

    #[inline(always)]
    pub fn from_words(next: &mut impl FnMut() -> u64) -> Self {
        Self(std::array::from_fn(|_| next()))
    }

    pub fn from_slots(slots: &[u64]) -> Self {
        let mut s = Self::default();
        for (i, n) in slots.iter().enumerate() {
            let slot = &mut s.0[i.min(SKIP_REASON_OTHER)];
            *slot = slot.saturating_add(*n);
        }
        s
    }

    pub fn total(&self) -> u64 {
        self.0.iter().fold(0u64, |a, b| a.saturating_add(*b))
    }

    pub fn is_empty(&self) -> bool {
        self.total() == 0
    }

    /// (reason, count) of the reasons that occurred, in the kernel's order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        self.0
            .iter()
            .enumerate()
            .filter(|(_, n)| **n > 0)
            .map(|(i, n)| (skip_reason_name(i), *n))
    }

    pub fn get(&self, reason: &str) -> u64 {
        self.iter()
            .find(|(r, _)| *r == reason)
            .map_or(0, |(_, n)| n)
    }

    /// The most frequent reason.
    pub fn top(&self) -> Option<&'static str> {
        self.iter().max_by_key(|(_, n)| *n).map(|(r, _)| r)
    }

    pub fn add(&mut self, o: &Self) {
        for (a, b) in self.0.iter_mut().zip(o.0) {
            *a = a.saturating_add(b);
        }
    }

    pub fn delta(&self, earlier: &Self) -> Self {
        let mut d = *self;
        for (a, b) in d.0.iter_mut().zip(earlier.0) {
            *a = a.saturating_sub(b);
        }
        d
    }

    pub fn decreased(&self, earlier: &Self, prefix: &str, out: &mut Vec<String>) {
        for (i, (a, b)) in self.0.iter().zip(earlier.0).enumerate() {
            if *a < b {
                out.push(format!("{prefix}{}", skip_reason_name(i)));
            }
        }
    }
}

impl Serialize for SkipCounts {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.iter())
    }
}

impl<'de> Deserialize<'de> for SkipCounts {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let m = BTreeMap::<String, u64>::deserialize(d)?;
        let mut s = Self::default();
        for (k, v) in m {
            let slot = SKIP_REASON_NAMES
                .iter()
                .position(|n| *n == k)
                .unwrap_or(SKIP_REASON_OTHER);
            s.0[slot] = s.0[slot].saturating_add(v);
        }
        Ok(s)
    }
}

/// A model field's type by its table kind.
macro_rules! model_ty {
    (sum) => { u64 };
    (max) => { u64 };
    (computed) => { u64 };
    (derived) => { u64 };
    (ratio) => { Option<f64> };
    (level) => { Option<f64> };
}

/// A model field's value from the kernel's (only `sum` and `max` are kept there; the others
/// are filled in by [`Counts::from_stats`] and [`Counts::finished`]).
macro_rules! from_kernel {
    (sum, $e:expr) => {
        $e
    };
    (max, $e:expr) => {
        $e
    };
    (computed, $e:expr) => {
        0
    };
    (derived, $e:expr) => {
        0
    };
    (ratio, $e:expr) => {
        None
    };
    (level, $e:expr) => {
        None
    };
}

macro_rules! to_value {
    (ratio, $e:expr) => {
        CountValue::Ratio($e)
    };
    (level, $e:expr) => {
        CountValue::Ratio($e)
    };
    ($other:ident, $e:expr) => {
        CountValue::Count($e)
    };
}

/// A counter's value, looked up by its one name ([`Counts::value`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum CountValue {
    Count(u64),
    Ratio(Option<f64>),
}

impl CountValue {
    /// As a number (a ratio not measured: None).
    pub fn as_f64(self) -> Option<f64> {
        match self {
            CountValue::Count(n) => Some(n as f64),
            CountValue::Ratio(r) => r,
        }
    }
}

/// Declares the model's counter groups, [`Counts`] and the mapping from the kernel's entry, from
/// numatrace-common's counter table (one line there per counter).
macro_rules! model_groups {
    (
        feeds { $($feeds:tt)* }
        groups { $( $group:ident $Group:ident {
            $( $(#[doc = $doc:literal])* $kind:ident $f:ident [ $($row:tt)* ]; )*
        } )* }
        system { $($system:tt)* }
    ) => {
        $(
            counter_struct! {
                pub struct $Group { $( $(#[doc = $doc])* $kind $f: model_ty!($kind) ),* }
            }
        )*

        counter_struct! {
            /// The counters of one task, process, cgroup or the whole window.
            pub struct Counts {
                /// Skipped VMAs by reason name (only reasons that occurred).
                nested skipped_vmas: SkipCounts,
                sum skipped_vmas_total: u64,
                $( nested $group: $Group, )*
            }
        }

        impl Counts {
            /// The one mapping from the kernel's per-task entry to counts.
            pub fn from_stats(s: &TaskStats) -> Self {
                let skipped_vmas = SkipCounts::from_slots(&s.skip_vma);
                let mut c = Self {
                    skipped_vmas_total: skipped_vmas.total(),
                    skipped_vmas,
                    $( $group: $Group { $( $f: from_kernel!($kind, s.$group.$f) ),* }, )*
                };
                c.scan.task_runtime_ns = s.runtime_last_ns.saturating_sub(s.runtime_first_ns);
                c.scan.share_between_calls = {
                    let den = s.scan_last_entry_runtime.saturating_sub(s.runtime_first_ns);
                    let num = s.scan.runtime_in_scan_ns.saturating_sub(s.scan_last_call_rt);
                    (s.scan.calls >= 2 && den > 0).then(|| num as f64 / den as f64)
                };
                c.finished()
            }

            /// The counter called `path` (`migrations.refused`: its one name in the table).
            pub fn value(&self, path: &str) -> Option<CountValue> {
                $( $(
                    if path == concat!(stringify!($group), ".", stringify!($f)) {
                        return Some(to_value!($kind, self.$group.$f));
                    }
                )* )*
                None
            }
        }
    };
}

numatrace_common::counter_table!(model_groups);

pub(crate) fn ratio(num: u64, den: u64) -> Option<f64> {
    (den > 0).then(|| num as f64 / den as f64)
}

impl Counts {
    /// Computes the ratios, which are not additive: call after summing or differencing.
    pub fn finished(mut self) -> Self {
        let sc = &mut self.scan;
        sc.share = ratio(sc.runtime_in_scan_ns, sc.task_runtime_ns);
        sc.wall_share = ratio(sc.time_ns, sc.task_runtime_ns);
        sc.sampled_share = ratio(sc.scan_samples, sc.samples);
        let m = &mut self.migrations;
        m.latency_ns_mean = ratio(m.latency_ns_total, m.attempts);
        let h = &mut self.hint_faults;
        h.remote = h.faults.saturating_sub(h.local);
        let t = &mut self.tiering;
        t.promote_candidates = t.promote_hot.saturating_add(t.promote_rate_limited);
        t.hint_latency_ms_mean = ratio(t.hint_latency_ms_total, t.hint_latency_faults);
        self
    }

    /// Hint faults, PTE updates or scan calls were counted: the sums a busy task has, which
    /// answer "nothing happened?" without comparing whole records.
    pub fn busy(&self) -> bool {
        self.hint_faults.faults != 0 || self.scan.pte_updates != 0 || self.scan.calls != 0
    }

    /// An increment (a [`Counts::delta`]) in which nothing was counted: every sum is zero
    /// (maxima and levels carry over in a delta, so they are not compared).
    pub fn counted_nothing(&self) -> bool {
        // The common answer first (the full test copies and compares two 624-byte records).
        if self.busy() {
            return false;
        }
        static EMPTY: std::sync::LazyLock<Counts> =
            std::sync::LazyLock::new(|| Counts::default().finished());
        let mut z = self.clone();
        z.scan.max_ns = 0;
        z.scan.scan_seq = 0;
        z.scan.share_between_calls = None;
        z.finished() == *EMPTY
    }

    /// Nothing NUMA-balancing related happened (samples and run time alone do not count).
    pub fn is_empty(&self) -> bool {
        // The common answer first (the full test copies and compares two 624-byte records,
        // several times per task and refresh).
        if self.busy() {
            return false;
        }
        let mut c = self.clone();
        c.clear_not_activity();
        c == Self::default()
    }

    /// Clears what [`Counts::is_empty`] does not take as activity.
    fn clear_not_activity(&mut self) {
        let sc = &mut self.scan;
        sc.samples = 0;
        sc.task_runtime_ns = 0;
        sc.max_ns = 0;
        sc.scan_seq = 0;
        sc.share = None;
        sc.wall_share = None;
        sc.share_between_calls = None;
        sc.sampled_share = None;
    }
}

/// Which words of a packing ([`Counts::put_words`]) answer [`PackedCounts::busy`] and
/// [`PackedCounts::is_empty`], and where two often read counters are: worked out once from
/// [`Counts`] itself, so they follow its declaration.
struct WordMap {
    busy: [u64; PACKED_MASK_WORDS],
    activity: [u64; PACKED_MASK_WORDS],
    skipped_vmas_total: usize,
}

static WORD_MAP: std::sync::LazyLock<WordMap> = std::sync::LazyLock::new(|| {
    let mask = |c: &Counts| PackedCounts::scratch(c).0;
    let mut busy = Counts::default();
    busy.hint_faults.faults = 1;
    busy.scan.pte_updates = 1;
    busy.scan.calls = 1;
    // Every word set, then what is not activity cleared: the words that are.
    let mut all = Counts::from_words(&mut || 1);
    all.clear_not_activity();
    WordMap {
        busy: mask(&busy),
        activity: mask(&all),
        skipped_vmas_total: PackedCounts::word_index(|c| c.skipped_vmas_total = 1),
    }
});

/// [`Counts`] as their non-zero words alone (see [`Counts::put_words`]): a bitmap of which
/// words are not zero, and those words in order. A task's counts are mostly zeros (a busy
/// task has a dozen counters or so of ~90 words), so a frontend that keeps each task's counts
/// from one read to the next (`serve`'s previous counts) holds 48 bytes a task and 8 a word
/// (~120 with eight counters set) instead of 656. Bit-exact: an `Option<f64>` compares by its
/// bits.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PackedCounts {
    nonzero: [u64; PACKED_MASK_WORDS],
    words: Box<[u64]>,
}

const PACKED_MASK_WORDS: usize = Counts::WORDS.div_ceil(64);

impl PackedCounts {
    pub fn pack(c: &Counts) -> Self {
        let (nonzero, words, n) = Self::scratch(c);
        Self {
            nonzero,
            words: words[..n].into(),
        }
    }

    /// `c`'s bitmap and non-zero words, on the stack: (bitmap, words, how many).
    fn scratch(c: &Counts) -> ([u64; PACKED_MASK_WORDS], [u64; Counts::WORDS], usize) {
        let mut nonzero = [0; PACKED_MASK_WORDS];
        let mut words = [0; Counts::WORDS];
        let (mut i, mut n) = (0, 0);
        c.put_words(&mut |w| {
            if w != 0 {
                nonzero[i / 64] |= 1 << (i % 64);
                words[n] = w;
                n += 1;
            }
            i += 1;
        });
        (nonzero, words, n)
    }

    /// [`Counts::busy`], from the bitmap alone.
    pub fn busy(&self) -> bool {
        intersects(&self.nonzero, &WORD_MAP.busy)
    }

    /// [`Counts::is_empty`], from the bitmap alone.
    pub fn is_empty(&self) -> bool {
        !intersects(&self.nonzero, &WORD_MAP.activity)
    }

    /// Where the one `u64` counter that `set` sets to 1 is in a packing (see
    /// [`PackedCounts::word`]); work it out once.
    pub fn word_index(set: fn(&mut Counts)) -> usize {
        let mut c = Counts::default();
        set(&mut c);
        let m = Self::scratch(&c).0;
        assert_eq!(
            m.iter().map(|w| w.count_ones()).sum::<u32>(),
            1,
            "one word set"
        );
        let i = m.iter().position(|w| *w != 0).unwrap_or_default();
        i * 64 + m[i].trailing_zeros() as usize
    }

    /// Word `i` of the packing (0 where it is not held): the counter at `i` without
    /// unpacking the others.
    pub fn word(&self, i: usize) -> u64 {
        let (at, bit) = (i / 64, i % 64);
        if self.nonzero[at] & (1 << bit) == 0 {
            return 0;
        }
        let below = self.nonzero[..at]
            .iter()
            .map(|w| w.count_ones())
            .sum::<u32>()
            + (self.nonzero[at] & ((1 << bit) - 1)).count_ones();
        self.words[below as usize]
    }

    /// `skipped_vmas_total`, without unpacking (lists are sorted by it).
    pub fn skipped_vmas_total(&self) -> u64 {
        self.word(WORD_MAP.skipped_vmas_total)
    }

    /// Adds these counts into `c` (see [`Counts::add`]).
    pub fn add_to(&self, c: &mut Counts) {
        if self.words.is_empty() {
            return;
        }
        c.add(&self.unpack());
    }

    /// Bytes its words take on the heap.
    pub fn heap_bytes(&self) -> usize {
        size_of_val::<[u64]>(&self.words)
    }

    /// Makes `self` a copy of `other`, keeping its allocation where it is as long.
    pub fn assign(&mut self, other: &Self) {
        self.put(other.nonzero, &other.words);
    }

    /// Makes `self` the packing of `now`, keeping its allocation where as many words are not
    /// zero as before.
    pub fn set(&mut self, now: &Counts) {
        let (nonzero, words, n) = Self::scratch(now);
        self.put(nonzero, &words[..n]);
    }

    /// Holds `nonzero` and `words`, in its own allocation where that is as long.
    fn put(&mut self, nonzero: [u64; PACKED_MASK_WORDS], words: &[u64]) {
        self.nonzero = nonzero;
        if self.words.len() == words.len() {
            self.words.copy_from_slice(words);
        } else {
            self.words = words.into();
        }
    }

    pub fn unpack(&self) -> Counts {
        from_held(&self.nonzero, &self.words)
    }
}

/// How [`Counts::add`] combines each word of [`Counts::put_words`]: summed, the larger kept, or
/// left as it is (levels, ratios and what `finished` derives).
#[derive(Clone, Copy, PartialEq, Eq)]
enum WordSum {
    Add,
    Max,
    Keep,
}

/// Each word's [`WordSum`], found by adding a 2 to a 1 in that word alone.
static WORD_SUMS: std::sync::LazyLock<[WordSum; Counts::WORDS]> = std::sync::LazyLock::new(|| {
    std::array::from_fn(|i| {
        let only = |v: u64| {
            let mut n = 0;
            Counts::from_words(&mut || {
                n += 1;
                if n - 1 == i { v } else { 0 }
            })
        };
        let mut c = only(1);
        c.add(&only(2));
        let (mut n, mut got) = (0, 0);
        c.put_words(&mut |w| {
            if n == i {
                got = w;
            }
            n += 1;
        });
        match got {
            3 => WordSum::Add,
            2 => WordSum::Max,
            _ => WordSum::Keep,
        }
    })
});

/// Bitmaps of the words [`Counts::add`] sums or keeps the larger of (the others it leaves).
static SUMMED: std::sync::LazyLock<([u64; PACKED_MASK_WORDS], [u64; PACKED_MASK_WORDS])> =
    std::sync::LazyLock::new(|| {
        let (mut summed, mut maxed) = ([0; PACKED_MASK_WORDS], [0; PACKED_MASK_WORDS]);
        for (i, kind) in WORD_SUMS.iter().enumerate() {
            if *kind != WordSum::Keep {
                summed[i / 64] |= 1 << (i % 64);
            }
            if *kind == WordSum::Max {
                maxed[i / 64] |= 1 << (i % 64);
            }
        }
        (summed, maxed)
    });

/// A running sum of [`Counts`] increments that holds only the words they set (a bitmap, and
/// those words in order): [`SparseSum::counts`] is what [`Counts::add`] into `Counts::default()`
/// gives. A cgroup's increments set a dozen of the ~90 words, and the engine keeps a sum per
/// cgroup id between two scrapes of `serve` (10 000 whole ones were 10 MiB).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SparseSum {
    set: [u64; PACKED_MASK_WORDS],
    words: Vec<u64>,
}

impl SparseSum {
    pub fn add(&mut self, inc: &Counts) {
        let (mut dense, mut mask) = ([0; Counts::WORDS], [0; PACKED_MASK_WORDS]);
        let mut i = 0;
        inc.put_words(&mut |w| {
            dense[i] = w;
            mask[i / 64] |= u64::from(w != 0) << (i % 64);
            i += 1;
        });
        let (summed, maxed) = &*SUMMED;
        for (m, s) in mask.iter_mut().zip(summed) {
            *m &= s;
        }
        if mask.iter().zip(&self.set).any(|(m, s)| m & !s != 0) {
            self.widen(&mask);
        }
        for (at, bits) in mask.iter().enumerate() {
            let mut bits = *bits;
            while bits != 0 {
                let bit = bits.trailing_zeros() as usize;
                bits &= bits - 1;
                let w = dense[at * 64 + bit];
                let pos = self.rank(at, bit);
                let v = &mut self.words[pos];
                *v = if maxed[at] & (1 << bit) != 0 {
                    (*v).max(w)
                } else {
                    v.saturating_add(w)
                };
            }
        }
    }

    /// Where word `at * 64 + bit` (held) is in `words`.
    fn rank(&self, at: usize, bit: usize) -> usize {
        let below: u32 = self.set[..at].iter().map(|w| w.count_ones()).sum();
        (below + (self.set[at] & ((1 << bit) - 1)).count_ones()) as usize
    }

    /// Holds the words of `more` too, at 0.
    fn widen(&mut self, more: &[u64; PACKED_MASK_WORDS]) {
        let mut set = self.set;
        for (s, m) in set.iter_mut().zip(more) {
            *s |= m;
        }
        let mut words = Vec::with_capacity(set.iter().map(|w| w.count_ones() as usize).sum());
        let mut old = self.words.iter();
        for (at, bits) in set.iter().enumerate() {
            let mut bits = *bits;
            while bits != 0 {
                let bit = bits.trailing_zeros();
                bits &= bits - 1;
                let held = self.set[at] & (1 << bit) != 0;
                words.push(if held { *old.next().unwrap_or(&0) } else { 0 });
            }
        }
        (self.set, self.words) = (set, words);
    }

    pub fn counts(&self) -> Counts {
        from_held(&self.set, &self.words)
    }
}

/// Counts whose words are those `held` marks, with the values `words` in order, the others 0.
fn from_held(held: &[u64; PACKED_MASK_WORDS], words: &[u64]) -> Counts {
    let (mut i, mut at) = (0, 0);
    Counts::from_words(&mut || {
        let w = if held[i / 64] & (1 << (i % 64)) != 0 {
            at += 1;
            words[at - 1]
        } else {
            0
        };
        i += 1;
        w
    })
}

fn intersects(a: &[u64; PACKED_MASK_WORDS], b: &[u64; PACKED_MASK_WORDS]) -> bool {
    a.iter().zip(b).any(|(x, y)| x & y != 0)
}

/// A task's comm as its record holds it: inline up to 24 bytes (a kernel comm is at most 15;
/// invalid UTF-8 replaced, or a capture's, may be longer and is then on the heap), so that a
/// snapshot of 100 000 tasks allocates nothing for them.
pub type Comm = compact_str::CompactString;

/// A cgroup's path, shared by the records of all its tasks.
pub type CgroupPath = std::sync::Arc<str>;

pub fn comm_of(comm: &[u8; 16]) -> Comm {
    let end = comm.iter().position(|&b| b == 0).unwrap_or(comm.len());
    // compact_str's lossy conversion goes by char even for valid text (it was a tenth of a
    // 100 000-task snapshot).
    match std::str::from_utf8(&comm[..end]) {
        Ok(s) => Comm::new(s),
        Err(_) => Comm::from_utf8_lossy(&comm[..end]),
    }
}

/// A NUMA node's id as a task's record holds it: two bytes, and `None` in none (a kernel has
/// at most 1 024 nodes, `MAX_NUMNODES`).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Node(std::num::NonZeroU16);

/// The id, not the stored id + 1.
impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Node").field(&self.id()).finish()
    }
}

impl Node {
    /// Node `id`; `None` for one no kernel has (65 535 or more: a capture's, say).
    pub fn new(id: u32) -> Option<Self> {
        let plus_one = u16::try_from(id.checked_add(1)?).ok()?;
        std::num::NonZeroU16::new(plus_one).map(Self)
    }

    /// A node as the kernel side writes it in a task's entry: its id + 1, 0 for none.
    pub fn from_entry(v: u32) -> Option<Self> {
        v.checked_sub(1).and_then(Self::new)
    }

    pub fn id(self) -> u32 {
        u32::from(self.0.get()) - 1
    }
}

impl std::fmt::Display for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.id().fmt(f)
    }
}

/// One task: who it is, and its counts packed ([`PackedCounts`]: a busy task's counters in
/// ~80 bytes of words where whole counts take 624). At 100 000 tasks a list of records with
/// whole counts was 68 MiB, packed it is 18 (measured by the benchmark's scale run), and `top`
/// holds six lists. In JSON its counts are flattened into it, as [`Counts`] write themselves.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TaskRecord {
    pub pid: u32,
    pub tgid: u32,
    pub comm: Comm,
    /// The task has exited.
    pub exited: bool,
    /// cgroup v2 id (0: never seen running) and its path under the cgroup2 mount (`None`:
    /// the cgroup was removed before numatrace resolved it, or no cgroup2 is mounted).
    pub cgroup_id: u64,
    pub cgroup: Option<CgroupPath>,
    /// `numa_preferred_nid` at the last scan or hint fault (`None`: no preference or unknown),
    /// and the node of the CPU it last ran a counted event on.
    pub preferred_node: Option<Node>,
    pub last_node: Option<Node>,
    /// `bpf_ktime_get_ns` when its kernel entry was created: with `pid`, what tells a reused
    /// pid apart.
    pub first_ns: u64,
    /// Its counts: [`PackedCounts::unpack`] gives them whole.
    pub counts: PackedCounts,
}

/// [`TaskRecord`] as JSON writes it.
#[derive(Serialize)]
struct TaskRecordOut<'a> {
    pid: u32,
    tgid: u32,
    comm: &'a Comm,
    exited: bool,
    cgroup_id: u64,
    cgroup: &'a Option<CgroupPath>,
    preferred_node: Option<u32>,
    last_node: Option<u32>,
    first_ns: u64,
    #[serde(flatten)]
    counts: Counts,
}

/// [`TaskRecord`] as JSON reads back (fields added later read as their default from older
/// captures).
#[derive(Deserialize)]
struct TaskRecordIn {
    pid: u32,
    tgid: u32,
    comm: Comm,
    exited: bool,
    #[serde(default)]
    cgroup_id: u64,
    #[serde(default)]
    cgroup: Option<CgroupPath>,
    #[serde(default)]
    preferred_node: Option<u32>,
    #[serde(default)]
    last_node: Option<u32>,
    #[serde(default)]
    first_ns: u64,
    #[serde(flatten)]
    counts: Counts,
}

impl Serialize for TaskRecord {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        TaskRecordOut {
            pid: self.pid,
            tgid: self.tgid,
            comm: &self.comm,
            exited: self.exited,
            cgroup_id: self.cgroup_id,
            cgroup: &self.cgroup,
            preferred_node: self.preferred_node.map(Node::id),
            last_node: self.last_node.map(Node::id),
            first_ns: self.first_ns,
            counts: self.counts.unpack(),
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for TaskRecord {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let t = TaskRecordIn::deserialize(d)?;
        Ok(Self {
            pid: t.pid,
            tgid: t.tgid,
            comm: t.comm,
            exited: t.exited,
            cgroup_id: t.cgroup_id,
            cgroup: t.cgroup,
            preferred_node: t.preferred_node.and_then(Node::new),
            last_node: t.last_node.and_then(Node::new),
            first_ns: t.first_ns,
            counts: PackedCounts::pack(&t.counts),
        })
    }
}

/// Writes `list` over with a record per item of `items`, each made by `fill` over whatever
/// record is in its place (a fresh one past the list's end; the list's surplus dropped): a
/// list written again each refresh keeps its memory and its records' counts' allocations.
pub fn write_over<I>(
    list: &mut Vec<TaskRecord>,
    items: impl ExactSizeIterator<Item = I>,
    mut fill: impl FnMut(I, &mut TaskRecord),
) {
    list.truncate(items.len());
    let reused = list.len();
    for (i, item) in items.enumerate() {
        if i >= reused {
            list.push(TaskRecord::default());
        }
        fill(item, &mut list[i]);
    }
}

impl TaskRecord {
    pub fn from_stats(s: &TaskStats, exited: bool) -> Self {
        let mut t = Self::default();
        t.refill(s, exited);
        t
    }

    /// Makes `self` the record of `s` ([`TaskRecord::from_stats`]), its cgroup path unknown,
    /// keeping its counts' allocation where as many counters are set as before: a list
    /// written again at each snapshot then allocates (and frees) nothing for most tasks.
    pub fn refill(&mut self, s: &TaskStats, exited: bool) {
        self.set_identity(&TaskIdentity::from_stats(s, exited, None));
        self.counts.set(&Counts::from_stats(s));
    }

    /// Makes `self` the task `id` is, its counts left as they are.
    pub fn set_identity(&mut self, id: &TaskIdentity) {
        self.pid = id.pid;
        self.tgid = id.tgid;
        self.comm.clone_from(&id.comm);
        self.exited = id.exited;
        self.cgroup_id = id.cgroup_id;
        self.cgroup.clone_from(&id.cgroup);
        self.preferred_node = id.preferred_node;
        self.last_node = id.last_node;
        self.first_ns = id.first_ns;
    }

    /// Makes `self` a copy of `t` with counts `c` (`None`: `t`'s), keeping its counts'
    /// allocation as [`TaskRecord::refill`] does.
    pub fn assign(&mut self, t: &TaskRecord, c: Option<&Counts>) {
        self.pid = t.pid;
        self.tgid = t.tgid;
        self.comm.clone_from(&t.comm);
        self.exited = t.exited;
        self.cgroup_id = t.cgroup_id;
        self.cgroup.clone_from(&t.cgroup);
        self.preferred_node = t.preferred_node;
        self.last_node = t.last_node;
        self.first_ns = t.first_ns;
        match c {
            Some(c) => self.counts.set(c),
            None => self.counts.assign(&t.counts),
        }
    }

    /// Key of a task across snapshots: a pid reused later is another task.
    pub fn key(&self) -> (u32, u64) {
        (self.pid, self.first_ns)
    }

    /// This task with counts `c` instead.
    pub fn with_counts(&self, c: &Counts) -> Self {
        let mut t = Self::default();
        t.assign(self, Some(c));
        t
    }

    /// Its counts, whole.
    pub fn counts(&self) -> Counts {
        self.counts.unpack()
    }

    /// Its counts are now `c`.
    pub fn set_counts(&mut self, c: &Counts) {
        self.counts.set(c);
    }
}

/// Who a task is: a [`TaskRecord`] without its counts. What `serve` reads of every task besides
/// three counts ([`TaskRow`]), and what `top` keeps of a task between refreshes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TaskIdentity {
    pub pid: u32,
    pub tgid: u32,
    pub comm: Comm,
    pub exited: bool,
    pub cgroup_id: u64,
    pub cgroup: Option<CgroupPath>,
    pub preferred_node: Option<Node>,
    pub last_node: Option<Node>,
    pub first_ns: u64,
}

impl TaskIdentity {
    /// Who `t` is.
    pub fn of(t: &TaskRecord) -> Self {
        Self {
            pid: t.pid,
            tgid: t.tgid,
            comm: t.comm.clone(),
            exited: t.exited,
            cgroup_id: t.cgroup_id,
            cgroup: t.cgroup.clone(),
            preferred_node: t.preferred_node,
            last_node: t.last_node,
            first_ns: t.first_ns,
        }
    }

    /// Who the task of kernel entry `s` is (the one decoding of an entry's comm and nodes).
    pub fn from_stats(s: &TaskStats, exited: bool, cgroup: Option<CgroupPath>) -> Self {
        Self {
            pid: s.pid,
            tgid: s.tgid,
            comm: comm_of(&s.comm),
            exited,
            cgroup_id: s.cgroup_id,
            cgroup,
            preferred_node: Node::from_entry(s.preferred_nid),
            last_node: Node::from_entry(s.last_nid),
            first_ns: s.first_ns,
        }
    }

    /// Key of a task across snapshots (as [`TaskRecord::key`]).
    pub fn key(&self) -> (u32, u64) {
        (self.pid, self.first_ns)
    }
}

/// What a frontend that exports only a few tasks' counts (`serve`) reads of every task: who it
/// is, and the three counts it orders tasks by, read off the engine's table one task at a time.
/// At 100 000 tasks a list of records was ~18 MiB.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TaskRow {
    pub id: TaskIdentity,
    /// `scan.time_ns`, `scan.scan_samples` and `hint_faults.faults` of its counts.
    pub activity: (u64, u64, u64),
}

impl TaskRow {
    /// The row of `t`.
    pub fn of(t: &TaskRecord) -> Self {
        // Three words of the packing, not the whole counts.
        static AT: std::sync::LazyLock<[usize; 3]> = std::sync::LazyLock::new(|| {
            [
                PackedCounts::word_index(|c| c.scan.time_ns = 1),
                PackedCounts::word_index(|c| c.scan.scan_samples = 1),
                PackedCounts::word_index(|c| c.hint_faults.faults = 1),
            ]
        });
        let w = |i: usize| t.counts.word(AT[i]);
        Self {
            id: TaskIdentity::of(t),
            activity: (w(0), w(1), w(2)),
        }
    }

    /// The row of kernel entry `s`, as [`TaskRow::of`] the record [`TaskRecord::from_stats`]
    /// makes of it, with `cgroup` for its path.
    pub fn from_stats(s: &TaskStats, exited: bool, cgroup: Option<CgroupPath>) -> Self {
        Self {
            id: TaskIdentity::from_stats(s, exited, cgroup),
            activity: (s.scan.time_ns, s.scan.scan_samples, s.hint_faults.faults),
        }
    }

    /// Key of a task across snapshots (as [`TaskRecord::key`]).
    pub fn key(&self) -> (u32, u64) {
        self.id.key()
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProcessRecord {
    pub tgid: u32,
    /// comm of the thread-group leader if seen, else of its first thread.
    pub comm: String,
    pub threads: u32,
    #[serde(flatten)]
    pub counts: Counts,
    /// VMAs change_prot_numa worked on, most PTE updates first.
    pub vmas: Vec<VmaRecord>,
}

/// The tasks of one cgroup v2 directory (not its descendants).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CgroupRecord {
    pub id: u64,
    /// Path under the cgroup2 mount (`/` is the root); `None` if it could not be resolved.
    pub path: Option<String>,
    pub tasks: u32,
    #[serde(flatten)]
    pub counts: Counts,
}

/// One NUMA node: what sysfs says of it, and what happened there over the window.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
// Counts whose hook did not attach are left out of the JSON: they read back as 0.
#[serde(default)]
pub struct NodeRecord {
    pub node: u32,
    /// CPUs, as in sysfs `cpulist`.
    pub cpus: String,
    /// Memory in bytes (sysfs `meminfo` when the snapshot was taken).
    pub mem_total_bytes: Option<u64>,
    pub mem_free_bytes: Option<u64>,
    /// SLIT distances to nodes 0, 1, ...
    pub distances: Vec<u32>,
    /// Hint faults taken by traced tasks running on this node's CPUs: local / remote to it,
    /// and the pages they covered.
    pub hint_faults: u64,
    pub hint_faults_local: u64,
    pub hint_faults_remote: u64,
    pub hint_pages: u64,
    /// Pages migrated by hint faults into / out of this node (out: where the source node was
    /// known), and migrate_misplaced calls that succeeded into / out of it (folios).
    pub pages_migrated_in: u64,
    pub pages_migrated_out: u64,
    pub migrations_in: u64,
    pub migrations_out: u64,
    /// Traced tasks whose preferred node this is, and that last ran here.
    pub tasks_preferring: u32,
    pub tasks_last_ran: u32,
}

/// By node id, the live traced tasks that prefer it and that last ran on it: counted by
/// whoever walks the tasks (a snapshot's records, or `serve`'s walk of the rows), and put
/// into the [`NodeRecord`]s.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeTasks(BTreeMap<u32, (u32, u32)>);

impl NodeTasks {
    /// One live task with these nodes (an exited task is not counted).
    pub fn add(&mut self, preferred: Option<Node>, last: Option<Node>) {
        if let Some(node) = preferred {
            self.0.entry(node.id()).or_default().0 += 1;
        }
        if let Some(node) = last {
            self.0.entry(node.id()).or_default().1 += 1;
        }
    }

    /// (preferring, last ran) for `node`.
    pub fn of(&self, node: u32) -> (u32, u32) {
        self.0.get(&node).copied().unwrap_or_default()
    }
}

/// One VMA's share of the scanning (change_prot_numa calls on it), and how long the scanner
/// left it alone (pid_inactive skips).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VmaRecord {
    /// Hex start and end addresses, and the same as numbers.
    pub start: String,
    pub end: String,
    pub start_addr: u64,
    pub end_addr: u64,
    /// Left out of the JSON where change_prot_numa did not attach.
    #[serde(default)]
    pub pte_updates: u64,
    #[serde(default)]
    pub calls: u64,
    /// From /proc/PID/maps while the process lives; `None` once it has exited.
    pub mapping: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid_inactive: Option<GapRecord>,
    /// sched_skip_vma_numa events on it, by reason (the tp_btf program's map, or the classic
    /// program's records).
    #[serde(default, skip_serializing_if = "SkipCounts::is_empty")]
    pub skips: SkipCounts,
    /// CLOCK_MONOTONIC times of its change_prot_numa calls, oldest first (at most
    /// [`MAX_SCAN_TIMES`]; fexit only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scan_times_ns: Vec<u64>,
}

impl VmaRecord {
    pub fn new(start: u64, end: u64) -> Self {
        Self {
            start: format!("{start:#x}"),
            end: format!("{end:#x}"),
            start_addr: start,
            end_addr: end,
            pte_updates: 0,
            calls: 0,
            mapping: None,
            pid_inactive: None,
            skips: SkipCounts::default(),
            scan_times_ns: Vec::new(),
        }
    }

    /// What happened to this VMA since `earlier` (gaps: the later, cumulative values).
    pub fn delta(&self, earlier: &Self) -> Self {
        let since = earlier.scan_times_ns.last().copied().unwrap_or(0);
        let pid_inactive = match (self.pid_inactive, earlier.pid_inactive) {
            (Some(g), Some(e)) => Some(GapRecord {
                skips: g.skips.saturating_sub(e.skips),
                over_threads: g.over_threads.saturating_sub(e.over_threads),
                at_threshold: g.at_threshold.saturating_sub(e.at_threshold),
                // The largest gap so far: a level, not a count.
                ..g
            }),
            (g, _) => g,
        };
        Self {
            pte_updates: self.pte_updates.saturating_sub(earlier.pte_updates),
            calls: self.calls.saturating_sub(earlier.calls),
            skips: self.skips.delta(&earlier.skips),
            pid_inactive,
            scan_times_ns: self
                .scan_times_ns
                .iter()
                .copied()
                .filter(|&t| t > since)
                .collect(),
            ..self.clone()
        }
    }

    pub fn is_empty(&self) -> bool {
        self.pte_updates == 0
            && self.calls == 0
            && self.skips.is_empty()
            && self.pid_inactive.is_none_or(|g| g.skips == 0)
    }
}

/// Kept per VMA: enough for minutes of scanning at the fastest scan period.
pub const MAX_SCAN_TIMES: usize = 65536;

/// pid_inactive skips of one VMA and the scan-sequence gap at each (seed 002, tp_btf).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GapRecord {
    pub skips: u64,
    /// Skips with gap > the task's thread count: a patched kernel scans instead.
    pub over_threads: u64,
    /// Skips with gap == the thread count: the VMA reached the patch's threshold.
    pub at_threshold: u64,
    pub max_gap: u64,
    pub max_gap_threads: u64,
}

counter_struct! {
    /// Ring buffer records received, by kind.
    pub struct EventTally {
        sum skip_vma: u64,
        sum numa_move: u64,
        sum numa_swap: u64,
        sum numa_stick: u64,
        sum migrate_pages: u64,
        sum task_exit: u64,
        sum vma_scan: u64,
        /// Timed calls for `record`'s timeline (scan calls, migrations, stalls).
        sum spans: u64,
    }
}

/// Hint faults of one 2 MiB region in one scan pass (seed 001).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegionCount {
    pub tgid: u32,
    pub scan_seq: u32,
    pub region: u64,
    pub faults: u64,
}

impl RegionCount {
    pub fn from_key(k: &RegionKey, faults: u64) -> Self {
        Self {
            tgid: k.tgid,
            scan_seq: k.scan_seq,
            region: k.region,
            faults,
        }
    }

    pub fn key(&self) -> (u32, u32, u64) {
        (self.tgid, self.scan_seq, self.region)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Counts from words: each word zero, small, huge, or (an `Option<f64>`'s set word) 0/1.
    fn counts_of(words: &[u64]) -> Counts {
        let mut it = words.iter().copied();
        Counts::from_words(&mut || it.next().unwrap_or(0))
    }

    proptest! {
        /// A sparse sum of increments is what adding them whole gives, in any order.
        #[test]
        fn a_sparse_sum_is_the_whole_sum(
            incs in proptest::collection::vec(
                proptest::collection::vec(
                    prop_oneof![Just(0u64), Just(1u64), 0..1000u64, any::<u64>()],
                    Counts::WORDS,
                ),
                0..6,
            ),
        ) {
            let (mut sparse, mut backwards, mut whole) =
                (SparseSum::default(), SparseSum::default(), Counts::default());
            for w in &incs {
                sparse.add(&counts_of(w));
                whole.add(&counts_of(w));
            }
            for w in incs.iter().rev() {
                backwards.add(&counts_of(w));
            }
            let mut want = Vec::new();
            whole.put_words(&mut |w| want.push(w));
            prop_assert!(sparse.counts().put_words_eq(&want));
            prop_assert_eq!(sparse, backwards);
        }
    }

    proptest! {
        /// Packed counts unpack to the counts packed, match them, and match no other counts
        /// that differ in one word; `put_words` gives `WORDS` words, which read back.
        #[test]
        fn packed_counts_round_trip_and_tell_one_word_apart(
            words in proptest::collection::vec(
                prop_oneof![Just(0u64), Just(1u64), 0..1000u64, any::<u64>()],
                Counts::WORDS,
            ),
            flip in 0..Counts::WORDS,
            to in any::<u64>(),
        ) {
            let c = counts_of(&words);
            let mut again = Vec::new();
            c.put_words(&mut |w| again.push(w));
            prop_assert_eq!(again.len(), Counts::WORDS);
            prop_assert!(counts_of(&again).put_words_eq(&again));
            let p = PackedCounts::pack(&c);
            prop_assert_eq!(p.unpack().put_words_eq(&again), true);
            // What is read from the bitmap or one word agrees with the counts whole.
            prop_assert_eq!(p.busy(), c.busy());
            prop_assert_eq!(p.is_empty(), c.is_empty());
            prop_assert_eq!(p.skipped_vmas_total(), c.skipped_vmas_total);
            let (mut into, mut want) = (counts_of(&words), counts_of(&words));
            p.add_to(&mut into);
            want.add(&c);
            prop_assert_eq!(into.put_words_eq(&{
                let mut w = Vec::new();
                want.put_words(&mut |x| w.push(x));
                w
            }), true);
            // Set over other counts (other words set), or over the same, it is the packing.
            let flipped: Vec<u64> = words.iter().map(|w| w ^ 1).collect();
            let mut set = PackedCounts::pack(&counts_of(&flipped));
            set.set(&c);
            prop_assert_eq!(&set, &p);
            prop_assert_eq!(PackedCounts::pack(&p.unpack()), p.clone());
            let mut same = p.clone();
            same.set(&c);
            prop_assert_eq!(&same, &p);
            let mut copy = PackedCounts::pack(&counts_of(&flipped));
            copy.assign(&p);
            prop_assert_eq!(&copy, &p);
            let mut other = again.clone();
            other[flip] = to;
            let d = counts_of(&other);
            let mut d_words = Vec::new();
            d.put_words(&mut |w| d_words.push(w));
            // (A set word other than 0/1 reads back as 1: the same counts.)
            prop_assert_eq!(PackedCounts::pack(&d) == p, d_words == again);
            let mut upd = p.clone();
            upd.set(&d);
            prop_assert_eq!(upd, PackedCounts::pack(&d));
        }
    }

    impl Counts {
        fn put_words_eq(&self, words: &[u64]) -> bool {
            let mut mine = Vec::new();
            self.put_words(&mut |w| mine.push(w));
            mine == words
        }
    }

    #[test]
    fn packed_counts_hold_only_what_is_not_zero() {
        let mut s = TaskStats::new(1, 1);
        s.hint_faults.faults = 7;
        s.hint_faults.local = 5;
        s.skip_vma[2] = 1;
        let c = Counts::from_stats(&s);
        let p = PackedCounts::pack(&c);
        // faults, local, remote (derived), the skip slot and its total.
        assert_eq!(p.words.len(), 5, "{p:?}");
        assert_eq!(p.unpack(), c);
        assert!(PackedCounts::pack(&Counts::default()).words.is_empty());
        // Samples, run time and shares alone are no activity; anything counted is.
        let mut quiet = Counts::default();
        quiet.scan.samples = 3;
        quiet.scan.task_runtime_ns = 9;
        quiet.scan.share = Some(0.5);
        let q = PackedCounts::pack(&quiet);
        assert!(quiet.is_empty() && q.is_empty() && !q.busy());
        quiet.skipped_vmas_total = 2;
        let q = PackedCounts::pack(&quiet);
        assert!(!quiet.is_empty() && !q.is_empty() && !q.busy());
        assert_eq!(q.skipped_vmas_total(), 2);
        quiet.scan.calls = 1;
        assert!(PackedCounts::pack(&quiet).busy());
        assert_eq!(PackedCounts::default().unpack(), Counts::default());
    }

    fn stats(pid: u32, tgid: u32, first_ns: u64) -> TaskStats {
        let mut s = TaskStats::new(pid, tgid);
        s.first_ns = first_ns;
        s.comm[..4].copy_from_slice(b"work");
        s
    }

    proptest! {
        /// A row read off the kernel's entry is the row of its record.
        #[test]
        fn a_row_from_the_entry_is_the_row_of_its_record(
            (pid, first_ns) in (any::<u32>(), any::<u64>()),
            (time_ns, samples, faults) in (any::<u64>(), 0..3u64, any::<u64>()),
            (pref, last, cgroup_id) in (0..5u32, 0..5u32, any::<u64>()),
            exited in any::<bool>(),
        ) {
            let mut s = stats(pid, pid / 2, first_ns);
            s.scan.time_ns = time_ns;
            s.scan.scan_samples = samples;
            s.hint_faults.faults = faults;
            s.hint_faults.local = faults / 2;
            s.preferred_nid = pref;
            s.last_nid = last;
            s.cgroup_id = cgroup_id;
            let path: CgroupPath = "/a/b".into();
            let mut t = TaskRecord::from_stats(&s, exited);
            t.cgroup = Some(path.clone());
            prop_assert_eq!(TaskRow::from_stats(&s, exited, Some(path)), TaskRow::of(&t));
        }
    }

    #[test]
    fn counts_map_reasons_and_unknown_slot() {
        let mut s = stats(1, 1, 0);
        s.skip_vma[1] = 3; // shared_ro
        s.skip_vma[4] = 2; // pid_inactive
        s.skip_vma[7] = 1; // a reason newer than this build
        s.migrations.pages_ok = 10;
        let c = Counts::from_stats(&s);
        assert_eq!(c.skipped_vmas.get("shared_ro"), 3);
        assert_eq!(c.skipped_vmas.get("pid_inactive"), 2);
        assert_eq!(c.skipped_vmas.get("other"), 1);
        assert_eq!(c.skipped_vmas_total, 6);
        assert_eq!(c.migrations.pages_ok, 10);
        assert_eq!(c.skipped_vmas.get("unsuitable"), 0);
        let v = serde_json::to_value(&c).unwrap();
        assert_eq!(
            v["skipped_vmas"],
            serde_json::json!({"shared_ro": 3, "pid_inactive": 2, "other": 1})
        );
    }

    #[test]
    fn shares_are_computed_on_sums_not_summed() {
        let mut a = stats(1, 1, 0);
        a.scan.calls = 1;
        a.scan.time_ns = 20;
        a.scan.runtime_in_scan_ns = 10;
        a.runtime_first_ns = 100;
        a.runtime_last_ns = 1100; // 1% share
        a.scan.samples = 100;
        a.scan.scan_samples = 1;
        let mut b = stats(2, 1, 0);
        b.scan.calls = 1;
        b.scan.time_ns = 60;
        b.scan.runtime_in_scan_ns = 30;
        b.runtime_first_ns = 0;
        b.runtime_last_ns = 1000; // 3% share
        b.scan.samples = 100;
        b.scan.scan_samples = 3;
        b.hint_faults.faults = 4;
        b.hint_faults.local = 1;
        b.migrations.attempts = 2;
        b.migrations.latency_ns_total = 300;
        let mut t = Counts::from_stats(&a);
        t.add(&Counts::from_stats(&b));
        let t = t.finished();
        assert_eq!(t.scan.share, Some(40.0 / 2000.0));
        assert_eq!(t.scan.wall_share, Some(80.0 / 2000.0));
        assert_eq!(t.scan.sampled_share, Some(4.0 / 200.0));
        assert_eq!(t.hint_faults.remote, 3);
        assert_eq!(t.migrations.latency_ns_mean, Some(150.0));
        assert_eq!(Counts::from_stats(&b).scan.share, Some(0.03));
    }

    #[test]
    fn delta_differences_sums_keeps_levels_and_recomputes_ratios() {
        let mut a = stats(1, 1, 0);
        a.scan.calls = 2;
        a.scan.max_ns = 50;
        a.scan.runtime_in_scan_ns = 10;
        a.runtime_first_ns = 100;
        a.runtime_last_ns = 1100;
        a.skip_vma[3] = 4;
        a.scan.scan_seq = 3;
        let mut b = a;
        b.scan.calls = 5;
        b.scan.max_ns = 40; // cannot shrink in the kernel; the later value is kept anyway
        b.scan.runtime_in_scan_ns = 40;
        b.runtime_last_ns = 2100;
        b.skip_vma[3] = 9;
        b.scan.scan_seq = 7;
        let d = Counts::from_stats(&b)
            .delta(&Counts::from_stats(&a))
            .finished();
        assert_eq!(d.scan.calls, 3);
        assert_eq!(d.scan.max_ns, 40);
        assert_eq!(d.scan.scan_seq, 7);
        assert_eq!(d.scan.task_runtime_ns, 1000);
        assert_eq!(d.scan.share, Some(30.0 / 1000.0));
        assert_eq!(d.skipped_vmas.get("scan_delay"), 5);
        assert_eq!(d.skipped_vmas_total, 5);
        let mut dec = Vec::new();
        Counts::from_stats(&a).decreased(&Counts::from_stats(&b), "", &mut dec);
        assert!(dec.contains(&"scan.calls".to_owned()), "{dec:?}");
        assert!(
            !dec.iter().any(|d| d.contains("remote")),
            "derived: {dec:?}"
        );
        assert!(
            dec.contains(&"skipped_vmas.scan_delay".to_owned()),
            "{dec:?}"
        );
        assert!(!dec.iter().any(|d| d.contains("max_ns")), "{dec:?}");
    }

    #[test]
    fn samples_alone_are_not_activity() {
        let mut a = stats(1, 1, 0);
        a.scan.samples = 5;
        a.runtime_last_ns = 10;
        assert!(Counts::from_stats(&a).is_empty());
        a.placement.moves = 1;
        assert!(!Counts::from_stats(&a).is_empty());
    }

    #[test]
    fn a_node_is_its_id_in_two_bytes() {
        assert_eq!(size_of::<Option<Node>>(), 2);
        // What a list of records costs beside its counts' words: 104 bytes a task.
        assert!(
            size_of::<TaskRecord>() <= 104,
            "{}",
            size_of::<TaskRecord>()
        );
        for id in [0, 1, 1023, 65_534] {
            assert_eq!(Node::new(id).map(Node::id), Some(id));
        }
        assert_eq!(Node::new(65_535), None);
        assert_eq!(Node::new(u32::MAX), None);
        assert_eq!(Node::new(7).unwrap().to_string(), "7");
        assert_eq!(format!("{:?}", Node::new(7)), "Some(Node(7))");
        let t: TaskRecord = serde_json::from_str(
            r#"{"pid": 1, "tgid": 1, "comm": "a", "exited": false, "preferred_node": 4000000,
                "last_node": 3}"#,
        )
        .unwrap();
        assert_eq!(
            (t.preferred_node, t.last_node.map(Node::id)),
            (None, Some(3))
        );
    }

    #[test]
    fn records_round_trip_through_json() {
        let mut s = stats(7, 5, 99);
        s.skip_vma[2] = 1;
        s.hint_faults.faults = 3;
        s.cgroup_id = 42;
        s.preferred_nid = 2;
        let mut t = TaskRecord::from_stats(&s, true);
        t.cgroup = Some("/system.slice/x.service".into());
        assert_eq!(t.preferred_node.map(Node::id), Some(1));
        assert_eq!(t.last_node, None);
        let back: TaskRecord = serde_json::from_str(&serde_json::to_string(&t).unwrap()).unwrap();
        assert_eq!(back, t);
        // Packed in memory, flat in JSON as the whole counts write themselves: a capture
        // written before the packing reads back, and one written now reads in older builds.
        let v = serde_json::to_value(&t).unwrap();
        let whole = serde_json::to_value(t.counts()).unwrap();
        for (k, want) in whole.as_object().unwrap() {
            assert_eq!(&v[k], want, "{k}");
        }
        assert_eq!(v["hint_faults"]["faults"], 3);
        assert_eq!(
            (v["pid"].as_u64(), v["cgroup_id"].as_u64()),
            (Some(7), Some(42))
        );
        let old: TaskRecord = serde_json::from_str(
            r#"{"pid": 3, "tgid": 3, "comm": "a", "exited": false, "hint_faults": {"faults": 2}}"#,
        )
        .unwrap();
        assert_eq!((old.cgroup_id, old.counts().hint_faults.faults), (0, 2));
        let mut v = VmaRecord::new(0x1000, 0x3000);
        v.skips.0[4] = 2;
        v.scan_times_ns = vec![1, 2];
        let back: VmaRecord = serde_json::from_str(&serde_json::to_string(&v).unwrap()).unwrap();
        assert_eq!(back, v);
    }
}
