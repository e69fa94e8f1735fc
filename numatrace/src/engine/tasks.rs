//! The engine's memory of every task between snapshots: each task's kernel entry as last read,
//! updated in place by each read of the task map, and whether the latest snapshot reported it
//! exited. A snapshot's task list is built from it in one ordered pass, merged with the exit
//! records of the ring buffer; a task missing from the map keeps what it had (carried
//! forward).
//!
//! At 100 000 tasks a snapshot is ~18 MiB of records (their counts packed, see
//! [`crate::model::PackedCounts`]): the table keeps the raw entries packed to
//! their words that are not zero (see [`PackedStats`]: ~72 MB whole), an index by key and the
//! key order (re-sorted only when tasks come or go), so that building the list is the only
//! per-task work left, and that is done on every core.

use std::{
    collections::{BTreeMap, HashMap, HashSet, VecDeque},
    hash::BuildHasherDefault,
    ops::Bound,
    sync::OnceLock,
};

use numatrace_common::TaskStats;
use rayon::prelude::*;

use super::{
    increments::{Increments, Stream},
    packed_stats::PackedStats,
};
use crate::model::{CgroupPath, Counts, TaskRecord, TaskRow};

/// A task across snapshots: (pid, creation time of its entry); a pid reused later is another.
pub type Key = (u32, u64);

fn key(s: &TaskStats) -> Key {
    (s.pid, s.first_ns)
}

pub use crate::model::key_hash::KeyHasher;

/// Where `key` is in `list` (ascending by `key_of`, keys distinct), looked for from `*at` on: a
/// walk of keys in the same order finds each where the previous one left off, in one step,
/// where a hashed lookup of a large record costs a cache miss; a key out of that order is
/// found by a search. `*at` moves past the keys below `key`.
pub fn seek<T>(list: &[T], at: &mut usize, key: Key, key_of: impl Fn(&T) -> Key) -> Option<usize> {
    while list.get(*at).is_some_and(|e| key_of(e) < key) {
        *at += 1;
    }
    match list.get(*at) {
        Some(e) if key_of(e) == key => Some(*at),
        _ => list.binary_search_by_key(&key, key_of).ok(),
    }
}

type Index = HashMap<Key, u32, BuildHasherDefault<KeyHasher>>;

#[derive(Clone, Copy, Debug, Default)]
struct Flags {
    /// Read from the kernel's map by the latest completed read.
    in_map: bool,
    /// Read by the read in progress.
    reading: bool,
    /// Reported exited by the latest snapshot.
    exited: bool,
    /// The entry as last read was marked exited (`TaskStats::exited`): kept here so that
    /// building the key order's bookkeeping does not touch the 720-byte entries.
    read_exited: bool,
    /// No task: forgotten, the slot free for another.
    free: bool,
    /// The entry as last read had a hint fault in flight (`maps::fault_in_flight`): what an
    /// unchanged entry still has.
    fault_in_flight: bool,
    /// The record the next commit builds from this slot may differ from the one the previous
    /// commit built: the entry read differs, the slot is new, or the previous record was its
    /// exit record's.
    record_dirty: bool,
    /// Added by the read in progress: its increment is taken in by the commit (a read that
    /// fails drops it unsummed).
    fresh: bool,
    /// Counted something since increments were last taken (see [`Stream`]).
    counted: bool,
}

#[derive(Default)]
pub struct TaskTable {
    keys: Vec<Key>,
    raw: Vec<PackedStats>,
    /// Each slot's entry's stamp (`TaskStats::touched`), beside the packed entries: what
    /// decides whether an entry is compared at all.
    touched: Vec<u32>,
    flags: Vec<Flags>,
    index: Index,
    free: Vec<u32>,
    /// Occupied slots in key order, valid unless `dirty`.
    order: Vec<u32>,
    dirty: bool,
    /// Slots the read in progress created.
    added: Vec<u32>,
    /// The slot each position of the previous read found: a map walk meets the entries in the
    /// same (bucket) order each time, so the index is consulted only where that changed.
    read_slots: Vec<u32>,
    /// Position of the read in progress.
    read_pos: usize,
    /// Per slot: the first commit since which every commit has built the same record from it
    /// (see [`Reuse`]).
    stable_since: Vec<u64>,
    /// Commits so far: the number of the latest.
    commits: u64,
    /// Records the latest commit kept from its list.
    kept: usize,
    /// The key list of the latest commits, by commit, as a generation that changes whenever a
    /// commit's list of keys may differ from the one before: a list handed back whose keys are
    /// the new list's (no task came or went) needs no record moved nor read to align it (a read
    /// of each record's key costs a cache miss: ~10 ms at 100 000 tasks), and no key compared.
    keys_of: VecDeque<(u64, u64)>,
    /// The generation of the latest commit's key list (see `keys_of`).
    key_gen: u64,
    /// The keys of the latest commit's exit records that no slot held (their own list entries).
    lone_exits: Vec<Key>,
    /// Where what each task counted is summed as it is read, for a frontend that asked
    /// ([`TaskTable::track_increments`]).
    stream: Option<Stream>,
    /// Commits build no records: the frontend walks the latest commit's rows
    /// ([`TaskTable::rows`]) and asks for the counts of the few tasks it needs
    /// ([`TaskTable::counts_of`]).
    rows_only: bool,
    /// Rows mode: the latest commit's list, as where each task came from: a slot (and
    /// [`EXITED`] where the list has it exited), or [`FROM_EXIT`] and the index of its exit
    /// record in `row_exits`.
    row_srcs: Vec<u32>,
    /// The exit records the latest commit listed, by key (ascending), packed: the frontend
    /// walks them without holding the ring buffer's records (whose reader waits meanwhile).
    row_exits: Vec<(Key, PackedStats)>,
}

/// In `row_srcs`: the task came from its exit record.
const FROM_EXIT: u32 = 1 << 31;
/// In `row_srcs`: the slot's task is listed exited.
const EXITED: u32 = 1 << 30;

/// How many of the latest commits' key lists [`TaskTable`] keeps: `top` hands back the list
/// of the commit before the previous.
const KEY_LISTS_KEPT: usize = 3;

/// The list a commit writes its records into: empty, or a list an earlier commit of the same
/// table returned, its records as that commit built them (the caller may have refreshed their
/// cgroup paths, nothing else). Such a list's record of a task whose slot has built the same
/// record ever since is kept as it is: at 100 000 tasks of which a tenth changed, building
/// every record was most of a snapshot's time.
#[derive(Default)]
pub struct Reuse {
    pub list: Vec<TaskRecord>,
    /// The commit that built `list` (see [`TaskTable::commits`]); `None`: nothing to keep.
    pub built: Option<u64>,
    /// Whether the cgroup paths of the kept records are still what `cgroup` gives (no walk of
    /// the hierarchy since `list` was built): else they are looked up again.
    pub cgroups_valid: bool,
}

impl TaskTable {
    fn slot(&self, k: &Key) -> Option<usize> {
        self.index.get(k).map(|&i| i as usize)
    }

    /// Whether the table holds task `k`.
    pub fn contains(&self, k: &Key) -> bool {
        self.slot(k).is_some()
    }

    /// The number of the latest commit (0: none yet).
    pub fn commits(&self) -> u64 {
        self.commits
    }

    /// Records the latest commit kept as its list had them (see [`Reuse`]).
    pub fn kept(&self) -> usize {
        self.kept
    }

    /// Tasks in the table.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// From now on, sums what each task counts as its entry is read (see [`Stream`]); before
    /// the first read, so that every task's whole history is summed. `self_tgid`'s tasks are
    /// summed apart.
    pub fn track_increments(&mut self, self_tgid: u32) {
        debug_assert!(self.is_empty(), "increments from the first read on");
        self.stream = Some(Stream::new(self_tgid));
    }

    /// From now on, commits build no records (see `rows_only`). Before the first commit.
    pub fn list_rows_only(&mut self) {
        self.rows_only = true;
    }

    pub fn rows_only(&self) -> bool {
        self.rows_only
    }

    /// The tasks the latest commit listed (rows mode; 0 otherwise).
    pub fn listed(&self) -> usize {
        self.row_srcs.len()
    }

    /// Each task of the latest commit, in its order (rows mode; nothing otherwise), its
    /// cgroup path from `cgroup`.
    pub fn rows(
        &self,
        cgroup: &mut dyn FnMut(u64) -> Option<CgroupPath>,
        each: &mut dyn FnMut(&TaskRow),
    ) {
        // The slots in key order are all over memory, their words too: ask for them ahead, as
        // the commit does.
        let slot_at = |n: usize| {
            self.row_srcs
                .get(n)
                .filter(|&&src| src & FROM_EXIT == 0)
                .map(|&src| &self.raw[(src & !EXITED) as usize])
        };
        for (n, &src) in self.row_srcs.iter().enumerate() {
            if let Some(r) = slot_at(n + PREFETCH_AHEAD) {
                prefetch(r);
            }
            if let Some(r) = slot_at(n + PREFETCH_AHEAD / 2) {
                prefetch_words(r);
            }
            let (s, exited) = if src & FROM_EXIT != 0 {
                (self.row_exits[(src & !FROM_EXIT) as usize].1.unpack(), true)
            } else {
                let i = (src & !EXITED) as usize;
                (self.raw[i].unpack(), src & EXITED != 0)
            };
            each(&TaskRow::from_stats(&s, exited, cgroup(s.cgroup_id)));
        }
    }

    /// The counts of the tasks of `keys` (rows mode), from what the latest commit listed them
    /// from (an exit record, or the slot); a key it did not list has none.
    pub fn counts_of(&self, keys: &[Key]) -> Vec<Counts> {
        let stats = |k: &Key| match self.row_exits.binary_search_by_key(k, |(k, _)| *k) {
            Ok(n) => Some(self.row_exits[n].1.unpack()),
            Err(_) => self.slot(k).map(|i| self.raw[i].unpack()),
        };
        keys.iter()
            .map(|k| stats(k).map(|s| Counts::from_stats(&s)).unwrap_or_default())
            .collect()
    }

    /// What the tasks counted since the previous call (`None`: not tracked).
    pub fn take_increments(&mut self) -> Option<Increments> {
        let stream = self.stream.as_mut()?;
        for f in &mut self.flags {
            f.counted = false;
        }
        Some(stream.take())
    }

    /// From now on, sums the tasks of `keys` apart (see [`Increments::watched`]).
    pub fn watch_increments(&mut self, keys: impl IntoIterator<Item = Key>) {
        if let Some(stream) = &mut self.stream {
            stream.watch(keys);
        }
    }

    /// Takes in that slot `i`'s task went from `before` to `now`.
    fn stream_in(&mut self, i: usize, before: Option<&TaskStats>, now: &TaskStats) {
        if let Some(stream) = &mut self.stream
            && stream.take_in(self.keys[i], before, now)
        {
            self.flags[i].counted = true;
        }
    }

    /// Whether the latest read found `k` in the kernel's map.
    #[cfg(test)]
    pub fn in_map(&self, k: &Key) -> bool {
        self.slot(k).is_some_and(|i| self.flags[i].in_map)
    }

    /// Whether the latest read found `k` in the kernel's map and the latest snapshot reported it
    /// exited: an entry marked exited in the map (created in do_exit, or its exit record lost
    /// to a full ring buffer), or one whose exit record has arrived since.
    pub fn marked_in_map(&self, k: &Key) -> bool {
        self.slot(k).is_some_and(|i| self.marked(i))
    }

    /// Slot `i` read in the map by the latest read and reported exited by the latest snapshot.
    fn marked(&self, i: usize) -> bool {
        self.flags[i].in_map && self.flags[i].exited
    }

    /// Whether `k` was carried forward (missing from the latest read) and reported exited.
    pub fn carried_exited(&self, k: &Key) -> bool {
        self.slot(k)
            .is_some_and(|i| !self.flags[i].in_map && self.flags[i].exited)
    }

    /// Keys marked in the map (see [`TaskTable::marked_in_map`]) whose task `done` says has
    /// finished.
    pub fn marked_done(&self, done: impl Fn(u32) -> bool) -> HashSet<Key> {
        self.occupied()
            .filter(|&i| self.marked(i))
            .map(|i| self.keys[i])
            .filter(|k| done(k.0))
            .collect()
    }

    fn occupied(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.flags.len()).filter(|&i| !self.flags[i].free)
    }

    /// Starts a read of the kernel's map: [`TaskTable::note`] each entry, then
    /// [`TaskTable::commit`] (or [`TaskTable::abort_read`]).
    pub fn begin_read(&mut self) {
        for f in &mut self.flags {
            f.reading = false;
        }
        self.added.clear();
        self.read_pos = 0;
    }

    /// An entry of the map as read now (a walk meeting it twice: the later wins), and whether
    /// it has a hint fault in flight. `untouched`: no program took the entry since the table
    /// last read it (its stamp, `touched`, is older than the previous read: see
    /// [`crate::sources::stamps`]), so an entry the table holds with that same stamp is taken as
    /// the table has it, not compared (at 100 000 tasks, comparing was a fifth of a
    /// snapshot). Whether it was.
    pub fn note(&mut self, s: &TaskStats, fault_in_flight: bool, untouched: bool) -> bool {
        // The stamp of an entry a few ahead, where the previous read found it: the walk meets
        // the entries in the same order each time, and the table's are out of cache.
        if let Some(&ahead) = self.read_slots.get(self.read_pos + PREFETCH_AHEAD)
            && let Some(t) = self.touched.get(ahead as usize)
        {
            prefetch_line((t as *const u32).cast());
            prefetch(&self.raw[ahead as usize]);
        }
        // Nearer, the words of an entry whose place (asked for above) has come in by now.
        if let Some(&near) = self.read_slots.get(self.read_pos + PREFETCH_AHEAD / 2)
            && let Some(r) = self.raw.get(near as usize)
        {
            prefetch_words(r);
        }
        let mut taken = false;
        let i = match self.find(key(s)) {
            Some(i) => {
                taken = untouched && self.touched[i] == s.touched;
                if !taken {
                    // A new slot's whole entry is taken in by the commit; an exited task's
                    // record is final.
                    let before = self
                        .stream
                        .as_ref()
                        .filter(|st| !self.flags[i].fresh && !st.exit_in(&self.keys[i]))
                        .map(|_| self.raw[i].unpack());
                    if self.raw[i].update(s) {
                        self.flags[i].record_dirty = true;
                        if let Some(b) = before {
                            self.stream_in(i, Some(&b), s);
                        }
                    }
                    self.touched[i] = s.touched;
                }
                self.flags[i].reading = true;
                self.flags[i].read_exited = s.exited != 0;
                self.flags[i].fault_in_flight = fault_in_flight;
                i
            }
            None => self.add(key(s), s, fault_in_flight),
        };
        self.read_at(i);
        taken
    }

    /// An entry of the map that no program took since the table last read it (the task
    /// iterator's key record): read now as it was. Whether it has a hint fault in flight;
    /// `None` when the table does not hold `k` (the caller reads the map again in full).
    pub fn note_unchanged(&mut self, k: Key) -> Option<bool> {
        let i = self.find(k)?;
        self.flags[i].reading = true;
        self.read_at(i);
        Some(self.flags[i].fault_in_flight)
    }

    /// Keys the latest completed read met that the read in progress has not (yet).
    pub fn unmet(&self) -> Vec<Key> {
        self.occupied()
            .filter(|&i| self.flags[i].in_map && !self.flags[i].reading)
            .map(|i| self.keys[i])
            .collect()
    }

    /// Tasks the read in progress met with a hint fault in flight (each once, however many
    /// times the walk met it).
    pub fn in_flight(&self) -> u64 {
        self.occupied()
            .filter(|&i| self.flags[i].reading && self.flags[i].fault_in_flight)
            .count() as u64
    }

    /// The slot holding `k`: first where the previous read found the entry at this position.
    fn find(&self, k: Key) -> Option<usize> {
        self.read_slots
            .get(self.read_pos)
            .map(|&i| i as usize)
            .filter(|&i| !self.flags[i].free && self.keys[i] == k)
            .or_else(|| self.slot(&k))
    }

    /// Slot `i` is the read's next position.
    fn read_at(&mut self, i: usize) {
        let pos = self.read_pos;
        self.read_pos += 1;
        match self.read_slots.get_mut(pos) {
            Some(p) => *p = i as u32,
            None => self.read_slots.push(i as u32),
        }
    }

    fn add(&mut self, k: Key, s: &TaskStats, fault_in_flight: bool) -> usize {
        let flags = Flags {
            reading: true,
            read_exited: s.exited != 0,
            fault_in_flight,
            record_dirty: true,
            fresh: true,
            ..Flags::default()
        };
        let i = match self.free.pop() {
            Some(i) => {
                let i = i as usize;
                (self.keys[i], self.touched[i], self.flags[i]) = (k, s.touched, flags);
                self.raw[i].update(s);
                i
            }
            None => {
                self.keys.push(k);
                self.raw.push(PackedStats::pack(s));
                self.touched.push(s.touched);
                self.flags.push(flags);
                self.stable_since.push(u64::MAX);
                self.keys.len() - 1
            }
        };
        self.index.insert(k, i as u32);
        self.added.push(i as u32);
        self.dirty = true;
        i
    }

    /// A read that failed: the tasks it added are dropped again.
    pub fn abort_read(&mut self) {
        for i in std::mem::take(&mut self.added) {
            let k = self.keys[i as usize];
            self.release(&k);
        }
        for f in &mut self.flags {
            f.reading = false;
        }
    }

    /// Entries the latest read found marked (see [`TaskTable::marked_in_map`]) that the read in
    /// progress does not find, with no exit record (one freed by the ring's reader or a
    /// snapshot is in `exited`, as its own exit's would be).
    pub fn replaced(&self, exited: &BTreeMap<Key, TaskStats>) -> u64 {
        self.occupied()
            .filter(|&i| {
                self.marked(i) && !self.flags[i].reading && !exited.contains_key(&self.keys[i])
            })
            .count() as u64
    }

    /// Distinct tasks of the read in progress and of `exited` whose entry was created by
    /// `created_by` (bpf_ktime_get_ns).
    pub fn seen(&self, created_by: u64, exited: &BTreeMap<Key, TaskStats>) -> u64 {
        let read = self
            .occupied()
            .filter(|&i| self.flags[i].reading && self.keys[i].1 <= created_by)
            .count();
        let mut both = 0;
        let mut gone = 0;
        for k in exited.keys().filter(|k| k.1 <= created_by) {
            gone += 1;
            both += usize::from(self.slot(k).is_some_and(|i| self.flags[i].reading));
        }
        (read + gone - both) as u64
    }

    /// Completes the read in progress: every task in key order, the exit records in `exited`
    /// winning over the map's entries (read later, they only grew).
    ///
    /// A task seen before and missing now stays, with the counts it had: an entry the table
    /// evicted (counted under `evicted`), or an exit record not yet readable (behind a record
    /// another CPU has reserved but not committed). Without this, the next snapshot would count
    /// such a task's whole history again. A carried task is marked exited once it cannot be
    /// live any more: its pid has a newer entry (reused, or the task was seen again after its
    /// entry was evicted) or `pid_exists` says it is gone. Such a task then settles and a
    /// long-running frontend may forget it.
    ///
    /// `out`: the list to fill (see [`prepared_records`] and [`Reuse`]); `cgroup`: each record's
    /// cgroup path from its id, as far as known without a walk. The records of a large
    /// snapshot are built on every core (see [`pool`]), in key order.
    pub fn commit(
        &mut self,
        out: Reuse,
        exited: &BTreeMap<Key, TaskStats>,
        pid_exists: impl Fn(u32) -> bool,
        cgroup: impl Fn(u64) -> Option<CgroupPath> + Sync,
    ) -> Vec<TaskRecord> {
        self.commits += 1;
        let now = self.commits;
        for f in &mut self.flags {
            f.in_map = f.reading;
        }
        for i in std::mem::take(&mut self.added) {
            let i = i as usize;
            self.flags[i].fresh = false;
            // An entry still read after its exit record was taken in (the walk passed it, the
            // record drained, the kernel had not yet deleted it): the record has it all.
            if self
                .stream
                .as_ref()
                .is_some_and(|st| !st.exit_in(&self.keys[i]))
            {
                self.stream_in(i, None, &self.raw[i].unpack());
            }
        }
        self.read_slots.truncate(self.read_pos);
        // A slot was taken or freed since the latest commit (the order is stale): the list's
        // keys may differ.
        let slots_changed = self.dirty;
        self.sort();
        let order = std::mem::take(&mut self.order);
        // What each record is made from, in key order: the bookkeeping is sequential (cheap),
        // the records (most of the work) are not.
        let mut srcs: Vec<Source<'_>> = Vec::with_capacity(order.len() + exited.len());
        let mut ex = exited.iter().peekable();
        let mut lone_exits = Vec::new();
        // Per record: its task counted something since increments were last taken.
        let mut counted = Vec::new();
        let mut pos = 0;
        loop {
            let slot = order.get(pos).map(|&i| i as usize);
            let next = match (slot.map(|i| &self.keys[i]), ex.peek()) {
                (None, None) => break,
                (Some(k), Some((e, _))) => k.cmp(e),
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
            };
            if next.is_ge()
                && let Some((_, s)) = ex.next()
            {
                srcs.push(Source::Exit(s));
                if let Some(stream) = &mut self.stream {
                    let held = next.is_eq().then(|| slot.unwrap_or_default());
                    let c = match held {
                        Some(i) => {
                            if !stream.exit_in(&key(s))
                                && stream.take_exit(Some(&self.raw[i].unpack()), s)
                            {
                                self.flags[i].counted = true;
                            }
                            self.flags[i].counted
                        }
                        None => stream.take_exit(None, s),
                    };
                    counted.push(c);
                }
                if next.is_gt() {
                    lone_exits.push(key(s));
                }
                if next.is_eq() {
                    let i = slot.unwrap_or_default();
                    self.flags[i].exited = true;
                    // Its next record from the slot is not this one.
                    self.flags[i].record_dirty = true;
                    pos += 1;
                }
                continue;
            }
            let Some(i) = slot else { break };
            let exited_now = if self.flags[i].in_map {
                self.flags[i].read_exited
            } else {
                let (pid, _) = self.keys[i];
                self.flags[i].exited
                    || self.superseded(&order[pos + 1..], self.keys[i], exited)
                    || !pid_exists(pid)
            };
            let f = &mut self.flags[i];
            if f.record_dirty || f.exited != exited_now {
                self.stable_since[i] = now;
                f.record_dirty = false;
            }
            f.exited = exited_now;
            srcs.push(Source::Slot(i as u32, exited_now));
            if self.stream.is_some() {
                counted.push(f.counted);
            }
            pos += 1;
        }
        self.order = order;
        if let Some(stream) = &mut self.stream {
            stream.set_counted(counted);
        }
        // The list's keys are the occupied slots' and the lone exit records': unchanged unless
        // a slot was taken or freed, or the lone exits differ.
        if slots_changed || lone_exits != self.lone_exits {
            self.key_gen += 1;
        }
        self.lone_exits = lone_exits;
        if self.rows_only {
            self.row_srcs.clear();
            self.row_exits.clear();
            for src in &srcs {
                self.row_srcs.push(match *src {
                    Source::Slot(i, exited) => i | if exited { EXITED } else { 0 },
                    Source::Exit(s) => {
                        self.row_exits.push((key(s), PackedStats::pack(s)));
                        FROM_EXIT | (self.row_exits.len() - 1) as u32
                    }
                });
            }
            self.kept = 0;
            return Vec::new();
        }
        let (raw, stable) = (&self.raw, &self.stable_since);
        // Which records the list keeps: the sources' keys it holds, moved into place.
        let Reuse {
            list: mut out,
            built,
            cgroups_valid,
        } = out;
        let same_keys = |b: u64| {
            out.len() == srcs.len()
                && self
                    .keys_of
                    .iter()
                    .any(|&(c, g)| c == b && g == self.key_gen)
        };
        let kept = match built {
            Some(b) if !out.is_empty() && same_keys(b) => vec![true; out.len()],
            Some(_) if !out.is_empty() => {
                let keys = &self.keys;
                align(&mut out, &srcs, |src: &Source<'_>| match *src {
                    Source::Exit(s) => key(s),
                    Source::Slot(i, _) => keys[i as usize],
                })
            }
            // No list of the engine's own (`Lists::recycle` empties any other).
            _ => {
                out.clear();
                Vec::new()
            }
        };
        if self.keys_of.len() >= KEY_LISTS_KEPT {
            self.keys_of.pop_front();
        }
        self.keys_of.push_back((now, self.key_gen));
        let keep = |n: usize| match srcs[n] {
            Source::Slot(i, _) => {
                kept.get(n) == Some(&true) && built.is_some_and(|b| stable[i as usize] <= b)
            }
            Source::Exit(_) => false,
        };
        // Written in place: a record of the list handed back keeps its counts' allocation.
        let fill = |n: usize, src: &Source<'_>, t: &mut TaskRecord| {
            if let Some(Source::Slot(ahead, _)) = srcs.get(n + PREFETCH_AHEAD)
                && !keep(n + PREFETCH_AHEAD)
            {
                prefetch(&raw[*ahead as usize]);
            }
            if let Some(Source::Slot(near, _)) = srcs.get(n + PREFETCH_AHEAD / 2)
                && !keep(n + PREFETCH_AHEAD / 2)
            {
                prefetch_words(&raw[*near as usize]);
            }
            match *src {
                Source::Exit(s) => t.refill(s, true),
                Source::Slot(i, exited) => t.refill(&raw[i as usize].unpack(), exited),
            }
            t.cgroup = cgroup(t.cgroup_id);
        };
        let build = |n: usize, src: &Source<'_>| {
            let mut t = TaskRecord::default();
            fill(n, src, &mut t);
            t
        };
        let update = |n: usize, t: &mut TaskRecord| {
            if !keep(n) {
                fill(n, &srcs[n], t);
            } else if !cgroups_valid {
                t.cgroup = cgroup(t.cgroup_id);
            }
        };
        self.kept = if kept.is_empty() {
            0
        } else {
            (0..srcs.len()).filter(|&n| keep(n)).count()
        };
        let pool = (srcs.len() >= PREPARE_FROM).then(pool).flatten();
        match (pool, out.is_empty()) {
            (Some(pool), true) => pool.install(|| {
                srcs.par_iter()
                    .enumerate()
                    .map(|(n, src)| build(n, src))
                    .collect_into_vec(&mut out)
            }),
            (None, true) => out.extend(srcs.iter().enumerate().map(|(n, src)| build(n, src))),
            (Some(pool), false) => pool.install(|| {
                out.par_iter_mut()
                    .enumerate()
                    .for_each(|(n, t)| update(n, t))
            }),
            (None, false) => out.iter_mut().enumerate().for_each(|(n, t)| update(n, t)),
        }
        out
    }

    /// Whether the read in progress or an exit record has a newer entry of `k`'s pid than `k`
    /// (`after`: the slots after `k`'s in key order).
    fn superseded(&self, after: &[u32], k: Key, exited: &BTreeMap<Key, TaskStats>) -> bool {
        let newer_read = after
            .iter()
            .map(|&i| i as usize)
            .take_while(|&i| self.keys[i].0 == k.0)
            .any(|i| self.flags[i].in_map);
        newer_read
            || exited
                .range((Bound::Excluded(k), Bound::Included((k.0, u64::MAX))))
                .next()
                .is_some()
    }

    /// Forgets `k` (a frontend folded its final counts).
    pub fn remove(&mut self, k: &Key) {
        if let Some(stream) = &mut self.stream {
            stream.forget(k);
        }
        self.release(k);
    }

    /// Frees `k`'s slot (its exit record, if taken in, stays taken in: a read that failed
    /// releases what it added).
    fn release(&mut self, k: &Key) {
        if let Some(i) = self.index.remove(k) {
            self.flags[i as usize] = Flags {
                free: true,
                ..Flags::default()
            };
            // Its words go (a burst of exits is not held until the slots are taken again).
            self.raw[i as usize] = PackedStats::default();
            self.touched[i as usize] = 0;
            self.free.push(i);
            self.dirty = true;
        }
    }

    fn sort(&mut self) {
        if !self.dirty {
            return;
        }
        let mut by_key: Vec<(Key, u32)> =
            self.occupied().map(|i| (self.keys[i], i as u32)).collect();
        by_key.sort_unstable();
        self.order.clear();
        self.order.extend(by_key.into_iter().map(|(_, i)| i));
        self.dirty = false;
    }
}

/// The threads that build a large snapshot's records: at most 8, started at the first such
/// snapshot (a small one is built on the calling thread: no thread for the common case);
/// `None` where they cannot be started (a low `pids.max`): the records are then built on the
/// calling thread, where rayon's global pool would panic.
fn pool() -> Option<&'static rayon::ThreadPool> {
    static POOL: OnceLock<Option<rayon::ThreadPool>> = OnceLock::new();
    POOL.get_or_init(|| {
        let n = std::thread::available_parallelism().map_or(1, |n| n.get().min(8));
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .thread_name(|i| format!("numatrace-rec{i}"))
            .build()
            .map_err(|e| tracing::debug!("building records on one thread: {e}"))
            .ok()
    })
    .as_ref()
}

/// What one record of [`TaskTable::commit`] is built from: an exit record, or a slot of the
/// table and whether its task is reported exited.
#[derive(Clone, Copy)]
enum Source<'a> {
    Exit(&'a TaskStats),
    Slot(u32, bool),
}

/// Moves the records of `list` (ascending by key, as a commit left it) to the positions of
/// their keys among `srcs` (ascending by key): records of keys no longer there are dropped,
/// positions of new keys hold a placeholder. Whether each position holds its key's earlier
/// record. A snapshot where no task came or went moves nothing.
fn align<'a>(
    list: &mut Vec<TaskRecord>,
    srcs: &[Source<'a>],
    key_of: impl Fn(&Source<'a>) -> Key,
) -> Vec<bool> {
    // Drop the keys gone (both lists are in key order: one cursor).
    let mut at = 0;
    list.retain(|t| seek(srcs, &mut at, t.key(), &key_of).is_some());
    // Every record left has a position; from the end, move each to it (a position above the
    // records not yet placed holds a placeholder or a placed record).
    let mut left = list.len();
    // Room for these and a few to come (as `Lists::take` makes), not the doubling
    // `resize_with` makes of a list a few records short.
    if list.capacity() < srcs.len() {
        list.reserve_exact(srcs.len() + srcs.len() / 16 - list.len());
    }
    list.resize_with(srcs.len(), TaskRecord::default);
    let mut kept = vec![false; srcs.len()];
    for n in (0..srcs.len()).rev() {
        if left == 0 {
            break;
        }
        if list[left - 1].key() == key_of(&srcs[n]) {
            list.swap(left - 1, n);
            kept[n] = true;
            left -= 1;
        }
    }
    kept
}

/// How many tasks ahead of the one being built [`TaskTable::commit`] asks for: enough entries
/// in flight to hide the memory's latency.
const PREFETCH_AHEAD: usize = 8;

/// Starts loading `*v` into the cache, where this build knows the CPU's instruction for it:
/// the table is read in key order, not in the order the map walk filled it, so without it
/// every task waits for memory (building the list of 100 000 tasks took twice as long).
#[inline(always)]
fn prefetch<T>(v: &T) {
    let base = (v as *const T).cast::<u8>();
    for off in (0..size_of::<T>()).step_by(64) {
        prefetch_line(base.wrapping_add(off));
    }
}

/// Prefetch hints for a packed entry's words (their place is read from the entry: ask for the
/// entry first).
fn prefetch_words(r: &PackedStats) {
    let (base, len) = r.words_bytes();
    for off in (0..len).step_by(64) {
        prefetch_line(base.wrapping_add(off));
    }
}

/// A prefetch hint for the cache line of `line`.
#[inline(always)]
fn prefetch_line(line: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch hint: it cannot fault and changes nothing.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(line.cast())
    };
    #[cfg(target_arch = "aarch64")]
    // SAFETY: as above (PRFM never faults).
    unsafe {
        std::arch::asm!("prfm pldl1keep, [{0}]", in(reg) line, options(nostack, readonly, preserves_flags))
    };
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    let _ = line;
}

/// Records of this many tasks or more are worth [`prepared_records`] on another thread, and
/// building on every core (see [`pool`]).
pub const PREPARE_FROM: usize = 8192;

/// An empty list with room for `n` records, its memory already faulted in. A snapshot of
/// 100 000 tasks is ~10 MiB of records, mapped afresh each time (the allocator hands blocks
/// that large back to the kernel when they are freed); faulting it in takes about as long as
/// filling it, so the engine has it done on another thread while it reads the kernel's map.
pub fn prepared_records(n: usize) -> Vec<TaskRecord> {
    let v: Vec<TaskRecord> = Vec::with_capacity(n);
    let (at, len) = (v.as_ptr() as usize, n * size_of::<TaskRecord>());
    let start = at.next_multiple_of(4096);
    let end = (at + len) / 4096 * 4096;
    if end > start {
        // SAFETY: populates (faults in, zeroed) whole pages of the list's own allocation, not
        // yet used; no contents change. 5.14+: elsewhere the pages fault in as records are
        // written.
        unsafe {
            libc::madvise(
                start as *mut libc::c_void,
                end - start,
                libc::MADV_POPULATE_WRITE,
            )
        };
    }
    v
}

#[cfg(test)]
pub(crate) mod tests {
    //! The table against the engine's earlier task bookkeeping (a BTreeMap of the previous
    //! snapshot's records and a set of the keys read), kept here as the reference: over random
    //! histories of entries appearing, growing, being marked, evicted, replaced by a new task of
    //! the same pid, exiting (with their exit record before or after the read) and forgotten,
    //! both give the same snapshots and the same answers.
    use std::collections::{BTreeMap, HashMap as StdHashMap, HashSet};

    use super::*;
    use crate::model::TaskRecord;

    /// The earlier bookkeeping, as it was.
    #[derive(Default)]
    struct Reference {
        previous: BTreeMap<Key, TaskRecord>,
        live_keys: HashSet<Key>,
    }

    impl Reference {
        fn marked_in_map(&self, k: &Key) -> bool {
            self.live_keys.contains(k) && self.previous.get(k).is_some_and(|t| t.exited)
        }

        fn done_marked(&self, done: impl Fn(u32) -> bool) -> HashSet<Key> {
            self.previous
                .keys()
                .filter(|k| self.marked_in_map(k) && done(k.0))
                .copied()
                .collect()
        }

        /// (tasks, replaced, seen) of one read.
        fn read(
            &mut self,
            live: &[TaskStats],
            in_map: &HashSet<Key>,
            exited: &BTreeMap<Key, TaskStats>,
            created_by: u64,
            pid_exists: impl Fn(u32) -> bool,
        ) -> (Vec<TaskRecord>, u64, u64) {
            let tasks = crate::engine::Snapshot::tasks_from(live, exited);
            let replaced = self
                .previous
                .keys()
                .filter(|k| self.marked_in_map(k) && !in_map.contains(k) && !exited.contains_key(k))
                .count() as u64;
            let seen = tasks.iter().filter(|t| t.first_ns <= created_by).count() as u64;
            self.live_keys = live.iter().map(|s| (s.pid, s.first_ns)).collect();
            let mut by_key: BTreeMap<Key, TaskRecord> =
                tasks.into_iter().map(|t| (t.key(), t)).collect();
            let newest: StdHashMap<u32, u64> =
                by_key.keys().fold(StdHashMap::new(), |mut m, (pid, f)| {
                    let e = m.entry(*pid).or_insert(*f);
                    *e = (*e).max(*f);
                    m
                });
            for (k, t) in &self.previous {
                by_key.entry(*k).or_insert_with(|| {
                    let mut t = t.clone();
                    let superseded = newest.get(&t.pid).is_some_and(|f| *f > t.first_ns);
                    if !t.exited && (superseded || !pid_exists(t.pid)) {
                        t.exited = true;
                    }
                    t
                });
            }
            let tasks: Vec<TaskRecord> = by_key.into_values().collect();
            self.previous = tasks.iter().map(|t| (t.key(), t.clone())).collect();
            (tasks, replaced, seen)
        }
    }

    /// A small deterministic generator (xorshift64*), for random histories.
    pub(crate) struct Rng(pub(crate) u64);

    impl Rng {
        pub(crate) fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
        pub(crate) fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
        pub(crate) fn chance(&mut self, percent: u64) -> bool {
            self.below(100) < percent
        }
    }

    fn entry(pid: u32, first_ns: u64) -> TaskStats {
        let mut s = TaskStats::new(pid, pid);
        s.first_ns = first_ns;
        s.cgroup_id = u64::from(pid % 3);
        s.comm[..4].copy_from_slice(b"task");
        s
    }

    /// Which of the reference's and the table's forget rules let `k` go (the engine's
    /// `forget_exited`, minus the exit records, which both sides share).
    fn forgettable(
        carried_exited: bool,
        marked: bool,
        done: &HashSet<Key>,
        exited: &mut BTreeMap<Key, TaskStats>,
        k: &Key,
    ) -> (bool, bool) {
        if exited.remove(k).is_some() || carried_exited {
            (true, false)
        } else if marked && done.contains(k) {
            (true, true)
        } else {
            (false, false)
        }
    }

    #[test]
    fn the_table_gives_what_the_earlier_bookkeeping_gave() {
        let (mut unchanged, mut kept_lists, mut kept_records, mut aborted) = (0, 0, 0, 0);
        let mut by_stamp = 0;
        for seed in 1..=400u64 {
            // What the table was last given whole, per key.
            let mut sent: StdHashMap<Key, TaskStats> = StdHashMap::new();
            let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
            let mut map: BTreeMap<u32, TaskStats> = BTreeMap::new();
            let (mut ex_ref, mut ex_new) = (BTreeMap::new(), BTreeMap::new());
            let (mut reference, mut table) = (Reference::default(), TaskTable::default());
            let mut warm = TaskTable::default();
            // A third, as `serve` has it: rows, no records.
            let mut rowed = TaskTable::default();
            rowed.list_rows_only();
            let lag = 1 + (seed % 2) as usize;
            let mut recent = std::collections::VecDeque::new();
            let mut epoch = 0u64;
            let (mut forgotten_ref, mut forgotten_new) = (HashSet::new(), HashSet::new());
            let mut clock = 1u64;
            // The kernel's jiffies (wrapping soon), and the start of the latest completed read
            // (the batched read's `since`, margin 0: the model's counts land at their stamp).
            let mut jiffies = u32::MAX - 30;
            let mut since: Option<u32> = None;
            // What the table sums as it reads, held to the differences of its snapshots;
            // pid 5 is numatrace's own.
            table.track_increments(5);
            let mut differ = crate::engine::increments::Differ::default();
            // Tasks whose exit record has been sent: the kernel deletes their entry next, and
            // nothing adds to it meanwhile.
            let mut drained: HashSet<Key> = HashSet::new();
            let mut commits_untaken = 0;
            for step in 0..40 {
                // The kernel side between two reads.
                for pid in 1..=6u32 {
                    clock += 1;
                    if rng.chance(20) {
                        jiffies = jiffies.wrapping_add(1);
                    }
                    match rng.below(10) {
                        0 | 1 => {
                            map.entry(pid).or_insert_with(|| entry(pid, clock));
                        }
                        2 if map.get(&pid).is_some_and(|s| drained.contains(&key(s))) => {
                            map.remove(&pid);
                        }
                        2 if map.contains_key(&pid) => {
                            // Exits: its record now (or the entry is only marked).
                            let mut s = map.remove(&pid).unwrap_or_else(|| entry(pid, 0));
                            s.hint_faults.faults += 1;
                            // Every program stamps what it takes (the batched read's cue).
                            s.touched = jiffies;
                            if rng.chance(70) {
                                ex_ref.insert((s.pid, s.first_ns), s);
                                ex_new.insert((s.pid, s.first_ns), s);
                            } else {
                                s.exited = 1;
                                map.insert(pid, s);
                            }
                        }
                        3 => {
                            // Evicted, or replaced by a new task of the same pid.
                            map.remove(&pid);
                            if rng.chance(50) {
                                map.insert(pid, entry(pid, clock));
                            }
                        }
                        4 if map.contains_key(&pid) && rng.chance(30) => {
                            // Its exit record drains while the entry is still read.
                            let s = map[&pid];
                            ex_ref.insert((s.pid, s.first_ns), s);
                            ex_new.insert((s.pid, s.first_ns), s);
                            drained.insert(key(&s));
                        }
                        _ => {
                            if let Some(s) = map.get_mut(&pid)
                                && !drained.contains(&key(s))
                            {
                                s.hint_faults.faults += rng.below(3);
                                s.placement.moves += rng.below(2);
                                if rng.chance(10) {
                                    // Moved to another cgroup.
                                    s.cgroup_id = rng.below(3);
                                }
                                s.touched = jiffies;
                            }
                        }
                    }
                }
                let alive: Vec<bool> = (0..=6).map(|_| rng.chance(60)).collect();
                let done: Vec<bool> = (0..=6).map(|_| rng.chance(50)).collect();
                let pid_exists = |pid: u32| alive[pid as usize];
                let task_done = |pid: u32| done[pid as usize];
                // One read: map order shuffled, an entry met twice now and then.
                let mut read: Vec<TaskStats> = map.values().copied().collect();
                for i in (1..read.len()).rev() {
                    read.swap(i, rng.below(i as u64 + 1) as usize);
                }
                if !read.is_empty() && rng.chance(20) {
                    let twice = read[rng.below(read.len() as u64) as usize];
                    read.push(twice);
                }
                let created_by = clock - rng.below(4);

                let done_ref = reference.done_marked(task_done);
                let done_new = table.marked_done(task_done);
                assert_eq!(done_ref, done_new, "seed {seed} step {step}: done marked");

                // The engine's read: forgotten entries skipped.
                let in_map: HashSet<Key> = read.iter().map(|s| (s.pid, s.first_ns)).collect();
                forgotten_ref.retain(|k| in_map.contains(k));
                let live: Vec<TaskStats> = read
                    .iter()
                    .filter(|s| !forgotten_ref.contains(&(s.pid, s.first_ns)))
                    .copied()
                    .collect();
                let (tasks_ref, replaced_ref, seen_ref) =
                    reference.read(&live, &in_map, &ex_ref, created_by, pid_exists);

                // As the task iterator reads: an entry the table holds as it is now comes as
                // its key (mostly; a full read sends it whole), the rest whole.
                // Now and then a read that fails midway (the engine then reads again): what
                // it noted stays in both tables' entries, what it added goes.
                if rng.chance(10) {
                    table.begin_read();
                    warm.begin_read();
                    rowed.begin_read();
                    for s in read.iter().filter(|_| rng.chance(50)) {
                        let k = (s.pid, s.first_ns);
                        let in_flight = s.hint_faults.faults % 2 == 1;
                        if forgotten_new.contains(&k) {
                            continue;
                        }
                        table.note(s, in_flight, false);
                        warm.note(s, in_flight, false);
                        rowed.note(s, in_flight, false);
                        if sent.contains_key(&k) {
                            sent.insert(k, *s);
                        }
                    }
                    table.abort_read();
                    warm.abort_read();
                    rowed.abort_read();
                    aborted += 1;
                    // As the engine does: the next read compares every entry.
                    since = None;
                }
                table.begin_read();
                warm.begin_read();
                rowed.begin_read();
                let started = jiffies;
                let mut forgotten_seen = HashSet::new();
                for s in &read {
                    let k = (s.pid, s.first_ns);
                    let in_flight = s.hint_faults.faults % 2 == 1;
                    if forgotten_new.contains(&k) {
                        forgotten_seen.insert(k);
                    } else if sent.get(&k) == Some(s) && rng.chance(35) {
                        unchanged += 1;
                        assert_eq!(
                            table.note_unchanged(k),
                            Some(in_flight),
                            "seed {seed} step {step}: unchanged {k:?}"
                        );
                        assert_eq!(warm.note_unchanged(k), Some(in_flight));
                        assert_eq!(rowed.note_unchanged(k), Some(in_flight));
                    } else {
                        // As the batched read decides: stamped before the previous read began.
                        let untouched = crate::sources::stamps::untouched(s.touched, since);
                        let taken = table.note(s, in_flight, untouched);
                        assert_eq!(warm.note(s, in_flight, untouched), taken);
                        assert_eq!(rowed.note(s, in_flight, untouched), taken);
                        if taken {
                            by_stamp += 1;
                            assert_eq!(
                                sent.get(&k),
                                Some(s),
                                "seed {seed} step {step}: {k:?} taken as unchanged, changed"
                            );
                        }
                        sent.insert(k, *s);
                    }
                }
                forgotten_new.retain(|k| forgotten_seen.contains(k));
                let replaced_new = table.replaced(&ex_new);
                let seen_new = table.seen(created_by, &ex_new);
                let tasks_new = table.commit(Reuse::default(), &ex_new, pid_exists, |_| None);
                since = Some(started);
                assert_eq!(tasks_ref, tasks_new, "seed {seed} step {step}: tasks");
                // Now and then the increments are not taken after a commit (a snapshot read
                // again, as `serve`'s are while the kernel counts): the next take has both.
                let took = rng.chance(75);
                if took {
                    let watch: HashSet<Key> = tasks_new
                        .iter()
                        .filter(|_| rng.chance(30))
                        .map(TaskRecord::key)
                        .collect();
                    let got = table.take_increments().unwrap();
                    table.watch_increments(watch.iter().copied());
                    let want = differ.take(&crate::engine::Snapshot {
                        self_tgid: 5,
                        tasks: tasks_new.clone(),
                        ..Default::default()
                    });
                    differ.watch = watch.into_iter().collect();
                    let at = format!("seed {seed} step {step}: increments");
                    assert_eq!(got.own, want.own, "{at} own");
                    assert_eq!(got.counted, want.counted, "{at} counted");
                    if commits_untaken == 0 {
                        assert_eq!(got.by_cgroup, want.by_cgroup, "{at} by cgroup");
                        assert_eq!(got.watched, want.watched, "{at} watched");
                    } else {
                        // Over several reads a task that moved cgroups left what it counted
                        // before the move with its cgroup of then; the snapshots' difference
                        // puts it all under the latest.
                        let sum = |i: &Increments| {
                            let mut c = crate::model::Counts::default();
                            i.by_cgroup.values().for_each(|s| c.add(&s.counts()));
                            i.watched.values().for_each(|(_, s)| c.add(&s.counts()));
                            c
                        };
                        assert_eq!(sum(&got), sum(&want), "{at} over several reads");
                    }
                    commits_untaken = 0;
                } else {
                    commits_untaken += 1;
                }

                // The twin writes into the list it returned `lag` commits ago (serve hands back
                // the previous snapshot, top the one before), its cgroup paths changed by a
                // walk now and then.
                let walked = rng.chance(10);
                epoch += u64::from(walked);
                let path = |id: u64| Some(CgroupPath::from(format!("/{epoch}/{id}")));
                let spare = if recent.len() >= lag {
                    recent.pop_front()
                } else {
                    None
                };
                let spare = spare.map_or_else(Reuse::default, |(list, built, at)| {
                    kept_lists += 1;
                    Reuse {
                        list,
                        built: Some(built),
                        cgroups_valid: at == epoch,
                    }
                });
                let tasks_warm = warm.commit(spare, &ex_new, pid_exists, path);
                let want: Vec<TaskRecord> = tasks_new
                    .iter()
                    .map(|t| TaskRecord {
                        cgroup: path(t.cgroup_id),
                        ..t.clone()
                    })
                    .collect();
                assert_eq!(want, tasks_warm, "seed {seed} step {step}: kept records");
                kept_records += warm.kept();
                // Rows mode: the rows and counts of the same list.
                let none = rowed.commit(Reuse::default(), &ex_new, pid_exists, path);
                assert!(
                    none.is_empty(),
                    "seed {seed} step {step}: rows mode built records"
                );
                let mut rows = Vec::new();
                rowed.rows(&mut |id| path(id), &mut |r| rows.push(r.clone()));
                let want_rows: Vec<TaskRow> = want.iter().map(TaskRow::of).collect();
                assert_eq!(rows, want_rows, "seed {seed} step {step}: rows");
                let some: Vec<Key> = want.iter().step_by(5).map(TaskRecord::key).collect();
                let want_counts: Vec<Counts> = (want.iter().step_by(5))
                    .map(|t| t.counts().finished())
                    .collect();
                assert_eq!(
                    rowed.counts_of(&some),
                    want_counts,
                    "seed {seed} step {step}: counts of rows"
                );
                recent.push_back((tasks_warm, warm.commits(), epoch));
                assert_eq!(
                    replaced_ref, replaced_new,
                    "seed {seed} step {step}: replaced"
                );
                assert_eq!(seen_ref, seen_new, "seed {seed} step {step}: seen");

                // A frontend forgets some exited tasks, once it has their increments.
                let keys: Vec<Key> = tasks_new
                    .iter()
                    .filter(|t| took && t.exited && rng.chance(50))
                    .map(|t| t.key())
                    .collect();
                for k in &keys {
                    let carried_ref = reference.previous.get(k).is_some_and(|t| t.exited)
                        && !reference.live_keys.contains(k);
                    let a = forgettable(
                        carried_ref,
                        reference.marked_in_map(k),
                        &done_ref,
                        &mut ex_ref,
                        k,
                    );
                    let b = forgettable(
                        table.carried_exited(k),
                        table.marked_in_map(k),
                        &done_new,
                        &mut ex_new,
                        k,
                    );
                    assert_eq!(a, b, "seed {seed} step {step}: forgetting {k:?}");
                    if a.0 {
                        reference.previous.remove(k);
                        table.remove(k);
                        warm.remove(k);
                        rowed.remove(k);
                        differ.forget(k);
                        sent.remove(k);
                        assert_eq!(table.note_unchanged(*k), None, "forgotten {k:?}");
                    }
                    if a.1 {
                        forgotten_ref.insert(*k);
                        forgotten_new.insert(*k);
                    }
                }
            }
        }
        // The histories leave most entries unchanged between two reads.
        assert!(unchanged > 5_000, "{unchanged} entries read as unchanged");
        assert!(by_stamp > 2_500, "{by_stamp} entries taken by their stamps");
        assert!(kept_lists > 10_000, "{kept_lists} lists written again");
        assert!(kept_records > 10_000, "{kept_records} records kept");
        assert!(aborted > 1000, "{aborted} reads aborted");
    }

    /// A list handed back whose length matches but whose exit records without a map entry
    /// are others (one forgotten, one arrived; no slot taken or freed) has other keys: its
    /// records are aligned, not kept in place.
    #[test]
    fn other_lone_exit_records_are_other_keys() {
        let mut table = TaskTable::default();
        let live = entry(5, 50);
        let commit = |table: &mut TaskTable, out: Reuse, exited: &BTreeMap<Key, TaskStats>| {
            table.begin_read();
            table.note(&live, false, false);
            table.commit(out, exited, |_| true, |_| None)
        };
        let lone = |pid: u32| BTreeMap::from([((pid, 1), entry(pid, 1))]);
        let first = commit(&mut table, Reuse::default(), &lone(3));
        assert_eq!(
            first.iter().map(TaskRecord::key).collect::<Vec<_>>(),
            [(3, 1), (5, 50)]
        );
        let built = table.commits();
        let second = commit(
            &mut table,
            Reuse {
                list: first,
                built: Some(built),
                cgroups_valid: true,
            },
            &lone(9),
        );
        let want = crate::engine::Snapshot::tasks_from(&[live], &lone(9));
        assert_eq!(second, want);
    }

    #[test]
    fn a_large_snapshot_built_on_every_core_is_the_reference_list() {
        // Above PREPARE_FROM: the records are built by the pool, in key order.
        let mut rng = Rng(0x5eed);
        let n = PREPARE_FROM as u32 + 1000;
        let live: Vec<TaskStats> = (1..=n)
            .map(|pid| {
                let mut s = entry(pid, u64::from(pid) * 7);
                s.hint_faults.faults = rng.below(1000);
                s.exited = u32::from(rng.chance(5));
                s.cgroup_id = rng.below(4);
                s
            })
            .collect();
        let mut exited = BTreeMap::new();
        for s in live.iter().filter(|_| rng.chance(3)) {
            let mut e = *s;
            e.hint_faults.faults += 1;
            exited.insert((e.pid, e.first_ns), e);
        }
        for pid in n + 1..n + 50 {
            exited.insert((pid, 1), entry(pid, 1));
        }
        let mut table = TaskTable::default();
        table.begin_read();
        for s in live.iter().rev() {
            table.note(s, false, false);
        }
        let path = |id: u64| (id == 2).then(|| CgroupPath::from("/two"));
        let got = table.commit(Reuse::default(), &exited, |_| true, path);
        let mut want = crate::engine::Snapshot::tasks_from(&live, &exited);
        for t in &mut want {
            t.cgroup = path(t.cgroup_id);
        }
        assert_eq!(got.len(), want.len());
        assert!(got == want, "the parallel build differs from the reference");
    }

    #[test]
    fn a_large_list_written_again_is_the_list_built_afresh() {
        // Above PREPARE_FROM (built by the pool): a tenth of the entries change, some tasks go
        // (forgotten) and come, exit records arrive; the list of the previous commit, written
        // again, equals a fresh one.
        let mut rng = Rng(0xfeed);
        let n = PREPARE_FROM as u32 + 3000;
        let mut live: BTreeMap<u32, TaskStats> = (1..=n)
            .map(|pid| (pid, entry(pid, u64::from(pid))))
            .collect();
        let (mut fresh, mut warm) = (TaskTable::default(), TaskTable::default());
        let mut spare = Reuse::default();
        for step in 0..8u64 {
            let mut exited = BTreeMap::new();
            for s in live.values_mut() {
                if rng.chance(10) {
                    s.hint_faults.faults += 1 + rng.below(5);
                }
                if rng.chance(1) {
                    // Exits: the entry marked, its exit record (read later: it grew) there for
                    // this commit only.
                    s.exited = 1;
                    let mut e = *s;
                    e.hint_faults.faults += 1;
                    exited.insert(key(&e), e);
                }
            }
            fresh.begin_read();
            warm.begin_read();
            for s in live.values() {
                fresh.note(s, false, false);
                warm.note(s, false, false);
            }
            let path = |id: u64| Some(CgroupPath::from(format!("/{}/{id}", (step + 1) / 4)));
            let want = fresh.commit(Reuse::default(), &exited, |_| true, path);
            let got = warm.commit(spare, &exited, |_| true, path);
            assert!(got == want, "step {step}: the list written again differs");
            if step > 0 {
                assert!(
                    warm.kept() > n as usize / 2,
                    "step {step}: kept {}",
                    warm.kept()
                );
            }
            // Every other step, some tasks go for good, others come (new pids, and a reused
            // one); in between the list's keys stay as they are.
            if step % 2 == 1 {
                spare = Reuse {
                    list: got,
                    built: Some(warm.commits()),
                    cgroups_valid: true,
                };
                continue;
            }
            for k in want.iter().map(TaskRecord::key).filter(|_| rng.chance(2)) {
                live.remove(&k.0);
                fresh.remove(&k);
                warm.remove(&k);
            }
            for pid in (1..40).map(|i| n + u32::try_from(step).unwrap_or(0) * 40 + i) {
                live.insert(pid, entry(pid, 10 * u64::from(pid)));
            }
            let reused = 1 + rng.below(u64::from(n)) as u32;
            live.insert(reused, entry(reused, u64::MAX - step));
            spare = Reuse {
                list: got,
                built: Some(warm.commits()),
                cgroups_valid: (step + 2) / 4 == (step + 1) / 4,
            };
        }
    }

    #[test]
    fn a_failed_read_adds_no_task() {
        let mut t = TaskTable::default();
        t.begin_read();
        t.note(&entry(1, 10), false, false);
        t.commit(Reuse::default(), &BTreeMap::new(), |_| true, |_| None);
        t.begin_read();
        t.note(&entry(1, 10), false, false);
        t.note(&entry(2, 11), false, false);
        t.abort_read();
        assert_eq!(t.len(), 1);
        assert!(t.in_map(&(1, 10)) && !t.in_map(&(2, 11)));
        t.begin_read();
        t.note(&entry(1, 10), false, false);
        let tasks = t.commit(Reuse::default(), &BTreeMap::new(), |_| true, |_| None);
        assert_eq!(tasks.len(), 1);
    }

    /// An entry read as untouched is taken as the table has it only where the table holds it
    /// with the same stamp: a new key, or a stamp the table has not seen, is read as any other.
    #[test]
    fn an_untouched_entry_is_taken_only_with_the_stamp_the_table_holds() {
        let mut t = TaskTable::default();
        let stamped = |pid: u32, first_ns: u64, touched: u32, faults: u64| {
            let mut s = entry(pid, first_ns);
            s.touched = touched;
            s.hint_faults.faults = faults;
            s
        };
        let read = |t: &mut TaskTable, entries: &[(TaskStats, bool)]| {
            t.begin_read();
            let taken: Vec<bool> = entries.iter().map(|(s, u)| t.note(s, false, *u)).collect();
            let tasks = t.commit(Reuse::default(), &BTreeMap::new(), |_| true, |_| None);
            let faults = tasks
                .iter()
                .map(|r| r.counts().hint_faults.faults)
                .collect();
            (taken, faults)
        };
        let (taken, faults): (Vec<bool>, Vec<u64>) = read(
            &mut t,
            &[(stamped(1, 10, 5, 1), true), (stamped(2, 20, 5, 1), false)],
        );
        assert_eq!(taken, [false, false], "new keys are read");
        assert_eq!(faults, [1, 1]);
        // Task 1 untouched with the stamp the table holds: taken as it was (what the copy says
        // otherwise is not looked at). Task 2's stamp differs from the table's: compared.
        let (taken, faults) = read(
            &mut t,
            &[(stamped(1, 10, 5, 9), true), (stamped(2, 20, 6, 3), true)],
        );
        assert_eq!(taken, [true, false]);
        assert_eq!(faults, [1, 3]);
        // Not untouched: compared, whatever the stamp.
        let (taken, faults) = read(
            &mut t,
            &[(stamped(1, 10, 5, 4), false), (stamped(2, 20, 6, 3), false)],
        );
        assert_eq!(taken, [false, false]);
        assert_eq!(faults, [4, 3]);
        // The pid reused by a new entry: another key, read.
        let (taken, _) = read(&mut t, &[(stamped(1, 11, 5, 2), true)]);
        assert_eq!(taken, [false]);
    }

    #[test]
    fn the_key_hash_spreads_neighbouring_keys() {
        use std::hash::Hasher as _;
        let hash = |k: Key| {
            let mut h = KeyHasher::default();
            h.write_u32(k.0);
            h.write_u64(k.1);
            h.finish()
        };
        // hashbrown picks the bucket from the low bits and a tag from the top 7.
        let low: HashSet<u64> = (0..1024u32).map(|p| hash((p, 5)) & 1023).collect();
        let top: HashSet<u64> = (0..1024u32).map(|p| hash((p, 5)) >> 57).collect();
        assert!(low.len() > 600, "{} low-bit buckets of 1024", low.len());
        assert_eq!(top.len(), 128);
    }
}
