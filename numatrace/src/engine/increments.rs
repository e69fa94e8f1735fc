//! What the tasks counted since a frontend last asked, summed while the engine reads the
//! kernel's task map: each entry that changed adds what it counted since the table last held
//! it. For `serve`, whose exported aggregates grow only by increments: without this it kept a
//! copy of every task's counts from one scrape to the next, to difference them (~21 MiB at
//! 100 000 tasks, a quarter of its memory).

use std::{
    collections::{HashMap, HashSet},
    hash::BuildHasherDefault,
};

use numatrace_common::TaskStats;

use crate::model::{Counts, SparseSum, key_hash::KeyHasher};

/// A task across snapshots, as the table keys it: (pid, creation time of its entry).
type Key = (u32, u64);

type Fast = BuildHasherDefault<KeyHasher>;

/// The increments since the previous [`Stream::take`]. Each task's is in one place: under its
/// cgroup id, or apart for the tasks asked for ([`Stream::watch`]); each counted once.
#[derive(Debug, Default)]
pub struct Increments {
    /// By the cgroup id the entry had when read: tasks neither watched nor numatrace's own, and
    /// only increments that counted something ([`Counts::counted_nothing`]).
    pub by_cgroup: HashMap<u64, SparseSum, Fast>,
    /// numatrace's own tasks: every increment.
    pub own: Counts,
    /// The watched tasks (as in `by_cgroup`), each with its cgroup id when last read.
    pub watched: HashMap<Key, (u64, SparseSum), Fast>,
    /// Per record of the snapshot taken last, in its order: whether that task (not one of
    /// numatrace's) counted something since the previous take.
    pub counted: Vec<bool>,
}

/// Where increments are summed, and what the table must remember to sum each exactly once.
#[derive(Debug, Default)]
pub struct Stream {
    self_tgid: u32,
    incs: Increments,
    watch: HashSet<Key, Fast>,
    /// Tasks whose exit record has been taken in: it is final, and their entries no longer add.
    exits_in: HashSet<Key, Fast>,
    /// Exit records with no entry in the table that counted something since the take.
    lone_counted: HashSet<Key, Fast>,
}

impl Stream {
    pub fn new(self_tgid: u32) -> Self {
        Self {
            self_tgid,
            ..Self::default()
        }
    }

    /// Task `key` went from `before` (`None`: nothing, a task first seen) to `now`. Whether it
    /// counted something (numatrace's own tasks: never, they are summed apart).
    pub fn take_in(&mut self, key: Key, before: Option<&TaskStats>, now: &TaskStats) -> bool {
        let c = Counts::from_stats(now);
        let inc = match before {
            Some(b) => c.delta(&Counts::from_stats(b)),
            None => c,
        };
        self.add(key, now.tgid, now.cgroup_id, &inc)
    }

    /// Adds `inc`, what task `key` of thread group `tgid` in cgroup `cgroup_id` counted.
    fn add(&mut self, key: Key, tgid: u32, cgroup_id: u64, inc: &Counts) -> bool {
        if tgid == self.self_tgid {
            self.incs.own.add(inc);
            return false;
        }
        // What counted nothing adds nothing (its maxima come with the next increment that does,
        // which carries the later ones).
        if inc.counted_nothing() {
            return false;
        }
        match self.watch.contains(&key) {
            true => {
                let w = self.incs.watched.entry(key).or_default();
                w.0 = cgroup_id;
                w.1.add(inc);
            }
            false => self.incs.by_cgroup.entry(cgroup_id).or_default().add(inc),
        }
        true
    }

    /// An exit record, with the entry the table held of its task (`None`: none): taken in once.
    /// Whether it counted something.
    pub fn take_exit(&mut self, held: Option<&TaskStats>, s: &TaskStats) -> bool {
        let key = (s.pid, s.first_ns);
        if !self.exits_in.insert(key) {
            return held.is_none() && self.lone_counted.contains(&key);
        }
        let counted = self.take_in(key, held, s);
        if counted && held.is_none() {
            self.lone_counted.insert(key);
        }
        counted
    }

    /// Whether `key`'s exit record has been taken in.
    pub fn exit_in(&self, key: &Key) -> bool {
        self.exits_in.contains(key)
    }

    /// `key` was forgotten.
    pub fn forget(&mut self, key: &Key) {
        self.exits_in.remove(key);
        self.lone_counted.remove(key);
    }

    /// The latest commit's record flags (see [`Increments::counted`]).
    pub fn set_counted(&mut self, counted: Vec<bool>) {
        self.incs.counted = counted;
    }

    /// The increments so far (the tasks of the latest [`Stream::watch`] summed apart).
    pub fn take(&mut self) -> Increments {
        self.lone_counted.clear();
        std::mem::take(&mut self.incs)
    }

    /// From now on, sums what the tasks of `keys` count apart ([`Increments::watched`]).
    pub fn watch(&mut self, keys: impl IntoIterator<Item = Key>) {
        self.watch = keys.into_iter().collect();
    }
}

/// The increments between consecutive snapshots worked out from their records, as the engine
/// sums them while reading: the reference the tests hold the table's and the fold's to.
#[cfg(test)]
#[derive(Default)]
pub struct Differ {
    last: HashMap<Key, Counts>,
    pub watch: HashSet<Key, Fast>,
}

#[cfg(test)]
impl Differ {
    pub fn take(&mut self, snap: &super::Snapshot) -> Increments {
        let mut s = Stream::new(snap.self_tgid);
        s.watch(self.watch.iter().copied());
        let counted = snap
            .tasks
            .iter()
            .map(|t| {
                let now = t.counts();
                let inc = match self.last.insert(t.key(), now.clone()) {
                    Some(b) => now.delta(&b),
                    None => now,
                };
                s.add(t.key(), t.tgid, t.cgroup_id, &inc)
            })
            .collect();
        s.set_counted(counted);
        s.take()
    }

    pub fn forget(&mut self, key: &Key) {
        self.last.remove(key);
    }
}
