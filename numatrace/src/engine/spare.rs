//! The task lists between snapshots: the one a frontend handed back, which the next snapshot
//! writes into, and which of the lists handed out are still recognisable as the engine's own.
//!
//! At 100 000 tasks a list is ~10 MiB of records and ~8 MiB of their packed counts: a fresh
//! one is that much to fault in and allocate, and to unmap and free again when the old one is
//! dropped; a list the engine built itself, handed back, is written over in place (its
//! records' counts keep their allocations), and keeps its records for the tasks that did not
//! change (see [`tasks::Reuse`]).

use crate::{
    engine::tasks::{self, PREPARE_FROM},
    model::TaskRecord,
};

/// What built a list's records: the table's commit and the cgroup resolver's epoch then.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Built {
    pub commit: u64,
    pub epoch: u64,
}

/// A list handed out by a snapshot: where its records are, how many, what built them.
struct Issued {
    at: usize,
    len: usize,
    built: Built,
}

/// How many of the latest lists handed out are recognised: `top` hands back the one before
/// the previous.
const ISSUED_KEPT: usize = 4;

/// The list the next snapshot writes into.
pub enum Next {
    /// A list handed back (maybe empty), grown to the room the snapshot needs; its records
    /// kept where `built` says what built them.
    Spare(Vec<TaskRecord>, Option<Built>),
    /// None large enough: the caller has one of this many records faulted in meanwhile (see
    /// [`tasks::prepared_records`]).
    Prepare(usize),
}

#[derive(Default)]
pub struct Lists {
    spare: Vec<TaskRecord>,
    built: Option<Built>,
    issued: Vec<Issued>,
}

impl Lists {
    /// Takes the list for a snapshot of a table of `tasks` tasks.
    pub fn take(&mut self, tasks: usize) -> Next {
        let expected = tasks + tasks / 16;
        let mut spare = std::mem::take(&mut self.spare);
        let built = self.built.take();
        if expected >= PREPARE_FROM && spare.capacity() < PREPARE_FROM {
            return Next::Prepare(expected);
        }
        if spare.capacity() < tasks {
            // A list a little short (tasks came since) grows in place, with room for more: a
            // large block is remapped, not copied, and only its new end faults in. A fresh list
            // instead would fault in all of it (a third of a second of `top`'s frame at 100 000
            // tasks, each time one more task appeared). Room for `expected` in all, the records
            // kept counted in.
            spare.reserve_exact(expected.saturating_sub(spare.len()));
        }
        Next::Spare(spare, built)
    }

    /// A list taken and not written (the snapshot is read again): as it was.
    pub fn put_back(&mut self, list: Vec<TaskRecord>, built: Option<Built>) {
        self.spare = list;
        self.built = built;
    }

    /// `list` is handed out, its records built by `built`.
    pub fn issue(&mut self, list: &[TaskRecord], built: Built) {
        let at = list.as_ptr() as usize;
        self.issued.retain(|i| i.at != at);
        if self.issued.len() >= ISSUED_KEPT {
            self.issued.remove(0);
        }
        self.issued.push(Issued {
            at,
            len: list.len(),
            built,
        });
    }

    /// A list handed back by its holder (see `Engine::recycle`), `tasks` tasks in the table:
    /// kept unless much larger than the table (so that it does not outlive a burst of tasks)
    /// or small and not one of the engine's own; a list of the engine's own, the newest first,
    /// is preferred to one that is not, which is emptied.
    pub fn recycle(&mut self, mut list: Vec<TaskRecord>, tasks: usize) {
        let cap = list.capacity();
        let at = list.as_ptr() as usize;
        let built = self
            .issued
            .iter()
            .position(|i| i.at == at && i.len == list.len())
            .map(|n| self.issued.remove(n).built);
        if cap > 2 * tasks.max(PREPARE_FROM) || (built.is_none() && cap < PREPARE_FROM) {
            return;
        }
        let better = match (built, self.built) {
            (Some(new), Some(old)) => new.commit > old.commit,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => cap > self.spare.capacity(),
        };
        if better {
            if built.is_none() {
                list.clear();
            }
            self.spare = list;
            self.built = built;
        }
    }
}

/// What a commit writes into: `list`, its records kept as `built` built them, cgroup paths
/// looked up again unless the resolver is still at the epoch `epoch`.
pub fn reuse(list: Vec<TaskRecord>, built: Option<Built>, epoch: u64) -> tasks::Reuse {
    tasks::Reuse {
        list,
        built: built.map(|b| b.commit),
        cgroups_valid: built.is_some_and(|b| b.epoch == epoch),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(n: usize) -> Vec<TaskRecord> {
        (0..n)
            .map(|i| TaskRecord {
                pid: i as u32 + 1,
                ..TaskRecord::default()
            })
            .collect()
    }

    fn spare(next: Next) -> (Vec<TaskRecord>, Option<Built>) {
        match next {
            Next::Spare(l, b) => (l, b),
            Next::Prepare(n) => panic!("a fresh list of {n} asked for"),
        }
    }

    const B1: Built = Built {
        commit: 1,
        epoch: 7,
    };
    const B2: Built = Built {
        commit: 2,
        epoch: 7,
    };

    #[test]
    fn a_list_handed_back_unchanged_keeps_its_records() {
        let mut lists = Lists::default();
        let l = list(10);
        lists.issue(&l, B1);
        lists.recycle(l.clone(), 10);
        // A copy is not the engine's list: small, it is not kept.
        let (got, built) = spare(lists.take(10));
        assert!(got.is_empty() && built.is_none());
        lists.recycle(l, 10);
        let (got, built) = spare(lists.take(10));
        assert_eq!((got.len(), built), (10, Some(B1)));
        // Handed back once: a second time it is not recognised (small: not kept).
        lists.recycle(got, 10);
        let (got, built) = spare(lists.take(10));
        assert!(got.is_empty() && built.is_none());
    }

    #[test]
    fn the_newest_own_list_wins_then_any_own_then_the_largest() {
        let mut lists = Lists::default();
        let (a, b) = (list(PREPARE_FROM), list(PREPARE_FROM));
        let c = list(PREPARE_FROM);
        lists.issue(&a, B1);
        lists.issue(&b, B2);
        lists.issue(&c, B1);
        // The newer displaces the older, not the other way round.
        lists.recycle(a, PREPARE_FROM);
        lists.recycle(b, PREPARE_FROM);
        lists.recycle(c, PREPARE_FROM);
        let (got, built) = spare(lists.take(PREPARE_FROM));
        assert_eq!((got.len(), built), (PREPARE_FROM, Some(B2)));
        // A list not the engine's own does not displace one that is; a larger one, emptied,
        // displaces a smaller.
        lists.put_back(got, built);
        lists.recycle(list(PREPARE_FROM + 5), PREPARE_FROM);
        let (got, built) = spare(lists.take(PREPARE_FROM));
        assert_eq!(built, Some(B2));
        drop(got);
        lists.recycle(list(PREPARE_FROM), PREPARE_FROM);
        lists.recycle(list(PREPARE_FROM + 100), PREPARE_FROM);
        let (got, built) = spare(lists.take(PREPARE_FROM));
        assert!(got.is_empty() && built.is_none());
        assert!(got.capacity() >= PREPARE_FROM + 100);
    }

    #[test]
    fn a_list_too_large_for_the_table_is_dropped_and_forgotten() {
        let mut lists = Lists::default();
        let l = list(3 * PREPARE_FROM);
        lists.issue(&l, B1);
        lists.recycle(l, 10);
        assert!(lists.issued.is_empty());
        assert!(matches!(lists.take(10), Next::Spare(l, None) if l.is_empty()));
    }

    #[test]
    fn a_short_own_list_grows_to_the_room_asked_for() {
        let mut lists = Lists::default();
        let n = PREPARE_FROM * 2;
        let mut l = list(n);
        l.shrink_to_fit();
        lists.issue(&l, B1);
        lists.recycle(l, n);
        let (got, built) = spare(lists.take(n + 100));
        assert_eq!((got.len(), built), (n, Some(B1)));
        let expected = n + 100 + (n + 100) / 16;
        assert!(got.capacity() >= expected && got.capacity() < 2 * (n + 100));
        // A table grown past what a small list holds: a fresh one.
        lists.put_back(list(5), None);
        assert!(matches!(lists.take(PREPARE_FROM), Next::Prepare(_)));
    }

    #[test]
    fn only_the_latest_lists_are_recognised() {
        let mut lists = Lists::default();
        let ls: Vec<Vec<TaskRecord>> = (0..=ISSUED_KEPT).map(|_| list(3)).collect();
        for (n, l) in ls.iter().enumerate() {
            lists.issue(
                l,
                Built {
                    commit: n as u64,
                    epoch: 0,
                },
            );
        }
        let mut ls = ls.into_iter();
        let oldest = ls.next().unwrap_or_default();
        lists.recycle(oldest, 3);
        assert!(spare(lists.take(3)).1.is_none(), "pushed out by newer ones");
        let next = ls.next().unwrap_or_default();
        lists.recycle(next, 3);
        assert_eq!(spare(lists.take(3)).1.map(|b| b.commit), Some(1));
    }

    #[test]
    fn cgroup_paths_are_kept_only_at_the_same_epoch() {
        assert!(reuse(list(1), Some(B1), 7).cgroups_valid);
        assert!(!reuse(list(1), Some(B1), 8).cgroups_valid);
        let cold = reuse(list(1), None, 7);
        assert!(cold.built.is_none() && !cold.cgroups_valid);
    }
}
