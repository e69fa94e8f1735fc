//! The live engine: attaches the kernel side, keeps reading its ring buffer, and takes
//! [`Snapshot`]s of everything counted so far — any number of times while attached, without
//! disturbing counting. Every frontend only reads snapshots, through a session window or itself.
//!
//! Consistency: a snapshot reads the kernel maps first and drains the ring buffer after. A
//! task's exit snapshot is submitted before its map entry is deleted, so a task missing from
//! the map read has its exit record in the drain; one present in both is taken from the exit
//! record, which is later and only larger. `/proc/vmstat` is read before and after the maps.

pub mod accum;
pub mod increments;
mod packed_stats;
pub mod snapshot;
pub mod spare;
pub mod tasks;

use std::{
    collections::{BTreeMap, HashSet},
    os::fd::{AsFd as _, OwnedFd},
    sync::{Arc, Mutex, MutexGuard, atomic::AtomicBool},
};

use anyhow::{Context as _, Result, anyhow};
use aya::{
    Ebpf,
    maps::{Array, HashMap, MapData, RingBuf},
};
use numatrace_common::{
    Counter, MAP_COUNTERS, MAP_EVENTS, MAP_FAULT_PAGES, MAP_HOT_THRESHOLD, MAP_MIGRATE_LATENCY,
    MAP_MIGRATE_MATRIX, MAP_MIGRATED_PAGES, MAP_NODE_FAULTS, MAP_REGION_FAULTS, MAP_TIERING,
    MAP_TRACKED_TGIDS, MAP_VMA_GAPS, MAP_VMA_STATS, MAX_NODES, TierConfig,
};
use tokio::{io::unix::AsyncFd, sync::watch, task::JoinHandle};

use crate::{
    bpf::loader::{HookReport, LoadOptions, Session},
    kernel::{
        facts::KernelFacts,
        nodes::system_nodes,
        tiering::{self, Tiering},
        vmstat::Vmstat,
    },
    model::{Counts, GapRecord, SkipCounts, TaskRow, VmaRecord},
    plan::Plan,
    sources::{
        cgroups::CgroupResolver,
        maps::{self, Maps},
        procfs, progstats, ringbuf,
        stamps::{self, Jiffies, Stamps},
        task_iter::{self, TaskIter, TaskRec},
        task_map::{self, MarkedSlots, TaskMap},
    },
};
use accum::Accum;
pub use snapshot::{InFlight, Snapshot};
use tasks::{Key, TaskTable};

/// How much a snapshot reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Detail {
    /// Tasks, counters, histograms, node arrays, vmstat: cheap enough for every refresh.
    Summary,
    /// Also every VMA the scanner touched or skipped, with mapping names from /proc and scan
    /// times: for reports.
    Full,
}

struct Shared {
    ring: RingBuf<MapData>,
    acc: Accum,
    tap: Option<Tap>,
    /// Frees the task table's marked entries as their tasks finish ([`Shared::settle`]).
    marked: MarkedSlots,
    /// When [`Shared::settle`] last ran.
    settled_at: std::time::Instant,
}

/// How often the ring's reader frees marked entries: their tasks need a moment to be reaped,
/// and a /proc read a pending entry.
const SETTLE_INTERVAL: std::time::Duration = std::time::Duration::from_millis(500);

/// Decoded records kept for a frontend that wants each one (`record`), up to a bound.
struct Tap {
    events: Vec<ringbuf::Event>,
    cap: usize,
    /// Records not kept because the frontend had not taken the earlier ones yet.
    lost: u64,
}

impl Shared {
    fn drain(&mut self) {
        let Self { ring, acc, tap, .. } = self;
        while let Some(item) = ring.next() {
            match ringbuf::decode(&item) {
                Ok(ev) => {
                    acc.apply(&ev);
                    if let Some(tap) = tap {
                        if tap.events.len() < tap.cap {
                            tap.events.push(ev);
                        } else {
                            tap.lost += 1;
                        }
                    }
                }
                Err(e) => {
                    acc.undecodable += 1;
                    tracing::warn!("ring buffer: {e}");
                }
            }
        }
        if self.settled_at.elapsed() >= SETTLE_INTERVAL {
            self.settle();
        }
    }

    /// Frees the marked entries (see [`MarkedSlots`]) whose task is gone, each taken as its
    /// exit record would have been: the table's slots do not wait for a snapshot.
    fn settle(&mut self) {
        self.settled_at = std::time::Instant::now();
        let Self { marked, acc, .. } = self;
        if let Err(e) = marked.settle(procfs::task_done, |k, stats| {
            acc.exited.insert(k, stats);
        }) {
            tracing::warn!("freeing the task table's marked entries: {e}");
        }
    }
}

/// An attached kernel side. Dropping it (or [`Engine::stop`]) detaches everything.
pub struct Engine {
    ebpf: Ebpf,
    pub facts: KernelFacts,
    pub hooks: Vec<HookReport>,
    /// The plan as executed (a hook that fell back to its kprobe has its kprobe plan here).
    pub plan: Plan,
    maps: Maps,
    tracked: HashMap<MapData, u32, u8>,
    shared: Arc<Mutex<Shared>>,
    stop_tx: watch::Sender<bool>,
    reader: JoinHandle<()>,
    logger: Option<JoinHandle<()>>,
    cgroups: CgroupResolver,
    self_tgid: u32,
    /// Every task of the previous snapshot (to carry forward those that went missing), as the
    /// latest read of the kernel's task map found it.
    table: TaskTable,
    /// The task list handed back for the next snapshot, and the lists handed out
    /// ([`Engine::recycle`]).
    lists: spare::Lists,
    /// The slot of each entry reads found marked exited in the kernel's task map (its exit
    /// record lost to a full ring buffer, or made in do_exit): userspace frees it once its task
    /// is gone ([`Engine::settle_marked`]).
    marked_slots: std::collections::HashMap<Key, u32>,
    /// Marked entries read at least once and then gone from the map with no exit record (a
    /// hand-over to the ring's reader that the kernel refused, see [`Engine::settle_marked`]):
    /// seen, not lost.
    marked_gone: u64,
    /// Holds the kernel's BPF run-time statistics on (`enable_bpf_stats`).
    stats_fd: Option<OwnedFd>,
    /// The tier classes the kernel side counts promotions by, and what they were made from.
    tier_map: Array<MapData, TierConfig>,
    tier_config: Option<TierConfig>,
    /// Each node's promotion hot threshold as the kernel side last read it.
    hot_thresholds: Array<MapData, u64>,
    tiering: Tiering,
    /// The next snapshot reads every task entry whole ([`Engine::read_whole_next`]).
    whole_next: bool,
    /// Keys of the latest task read through the iterator (`None`: read whole).
    read_keys: Option<u64>,
    /// Entries the latest task read took as unchanged since the one before (the iterator's
    /// keys, or the batched read's entries stamped before its margin); `None`: read whole.
    unchanged: Option<u64>,
    /// The stamps' clock of batched reads (see [`stamps`]): entries no program took since the
    /// previous read are taken as they were, not compared with the table's.
    batch_stamps: Stamps,
    /// The iterator's failed reads in a row, and whether to keep it after one.
    iter_retry: task_iter::IterRetry,
    /// The kernel's jiffies for batched reads (HZ known at start: one system call).
    jiffies: Option<Jiffies>,
    /// Entries evicted, as the latest snapshot estimated: an incremental read that finds more
    /// missing is done again whole.
    evicted: u64,
}

/// Reads of one snapshot before it is taken as it is (see [`Engine::snapshot`]).
const SNAPSHOT_ATTEMPTS: u32 = 3;
/// No read is repeated once it held this many tasks: a read that long (~10 ms natively at
/// 10 000 tasks) is as likely to see the kernel mid-update again, and each repeat would cost as
/// much. A count, not a time, so that a slow machine (an emulated guest) keeps the repeats of
/// a small table.
const RETRY_MAX_TASKS: usize = 8192;

/// Counters whose change during a read means the read saw the kernel mid-update: every tally,
/// and created entries (the eviction estimate rests on them).
fn watched(c: Counter) -> bool {
    c.is_tally() || c == Counter::TasksCreated
}

/// Why a read of the task map through the iterator failed.
#[derive(Debug, thiserror::Error)]
enum TaskReadError {
    /// The iterator failed: batched reads take over.
    #[error(transparent)]
    Iterator(task_iter::IterError),
    /// Looking up an entry the walk did not meet failed.
    #[error(transparent)]
    Map(aya::maps::MapError),
}

fn take<T>(ebpf: &mut Ebpf, name: &str) -> Result<T>
where
    T: TryFrom<aya::maps::Map, Error = aya::maps::MapError>,
{
    let map = ebpf
        .take_map(name)
        .ok_or_else(|| anyhow!("map {name} missing from the eBPF object"))?;
    T::try_from(map).with_context(|| format!("map {name}"))
}

/// Keeps the slot of `e` if it is marked exited (see [`Engine::settle_marked`]).
fn note_marked(slots: &mut std::collections::HashMap<Key, u32>, e: &numatrace_common::TaskEntry) {
    if e.stats.exited != 0 {
        slots.insert((e.stats.pid, e.stats.first_ns), e.slot);
    }
}

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

impl Engine {
    /// Loads and attaches; must run inside a tokio runtime (the ring buffer is read on it).
    pub fn start(facts: KernelFacts, opts: &LoadOptions) -> Result<Self> {
        let Session {
            mut ebpf,
            facts,
            hooks,
            plan,
            btf,
        } = Session::start(facts, opts)?;
        let (stop_tx, stop_rx) = watch::channel(false);
        let logger = if opts.bpf_log {
            Some(spawn_bpf_logger(&mut ebpf, stop_rx.clone())?)
        } else {
            None
        };
        let ring: RingBuf<MapData> = take(&mut ebpf, MAP_EVENTS)?;
        let ring_fd: OwnedFd = ring
            .as_fd()
            .try_clone_to_owned()
            .context("duplicating the ring buffer descriptor")?;
        let (tasks, marked) = TaskMap::take(&mut ebpf).context("the task map")?;
        // Where it loads (5.9+, kernel BTF): reads send only what changed.
        let task_iter = btf.as_ref().and_then(|btf| {
            TaskIter::open(&mut ebpf, btf, tasks.fd())
                .map_err(|e| tracing::info!("{e}: the task map is read whole at each snapshot"))
                .ok()
        });
        let maps = Maps {
            tasks,
            task_iter,
            counters: take(&mut ebpf, MAP_COUNTERS)?,
            migrate_latency: take(&mut ebpf, MAP_MIGRATE_LATENCY)?,
            fault_pages: take(&mut ebpf, MAP_FAULT_PAGES)?,
            migrate_matrix: take(&mut ebpf, MAP_MIGRATE_MATRIX)?,
            migrated_pages: take(&mut ebpf, MAP_MIGRATED_PAGES)?,
            node_faults: take(&mut ebpf, MAP_NODE_FAULTS)?,
            vmas: take(&mut ebpf, MAP_VMA_STATS)?,
            gaps: take(&mut ebpf, MAP_VMA_GAPS)?,
            region_faults: take(&mut ebpf, MAP_REGION_FAULTS)?,
            batched: AtomicBool::new(true),
        };
        let tracked = take(&mut ebpf, MAP_TRACKED_TGIDS)?;
        let tier_map = take(&mut ebpf, MAP_TIERING)?;
        let hot_thresholds = take(&mut ebpf, MAP_HOT_THRESHOLD)?;
        let shared = Arc::new(Mutex::new(Shared {
            ring,
            acc: Accum::default(),
            tap: None,
            marked,
            settled_at: std::time::Instant::now(),
        }));
        // SAFETY: the duplicated descriptor is owned by the AsyncFd alone and closed with it.
        let fd = unsafe { AsyncFd::register_with_interest(ring_fd, tokio::io::Interest::READABLE) }
            .context("polling the ring buffer")?;
        let reader = tokio::spawn(read_ring(fd, Arc::clone(&shared), stop_rx));
        Ok(Self {
            ebpf,
            facts,
            hooks,
            plan,
            maps,
            tracked,
            shared,
            stop_tx,
            reader,
            logger,
            cgroups: CgroupResolver::new(),
            self_tgid: std::process::id(),
            table: TaskTable::default(),
            lists: spare::Lists::default(),
            marked_slots: Default::default(),
            marked_gone: 0,
            stats_fd: None,
            tier_map,
            tier_config: None,
            hot_thresholds,
            tiering: Tiering::default(),
            whole_next: false,
            read_keys: None,
            unchanged: None,
            batch_stamps: Stamps::default(),
            iter_retry: task_iter::IterRetry::default(),
            jiffies: Jiffies::probe(),
            evicted: 0,
        })
        .map(|mut e| {
            e.refresh_tiering();
            match e.jiffies {
                Some(j) => {
                    tracing::debug!("kernel HZ {}: batched reads skip untouched entries", j.hz());
                    e.batch_stamps.set_hz(j.hz());
                    if let Some(iter) = &mut e.maps.task_iter {
                        iter.set_hz(j.hz());
                    }
                }
                None => tracing::info!(
                    "the kernel's HZ is not known (the coarse clock's resolution is no tick): \
                     every batched read compares every task entry"
                ),
            }
            e
        })
    }

    /// Re-reads the tiering mode and tiers, and tells the kernel side when its classes
    /// changed (a mode switched between two snapshots is seen at the next one).
    fn refresh_tiering(&mut self) {
        self.tiering = Tiering::read(self.facts.version);
        let mut config = self.tiering.config(self.facts.version);
        tiering::kernel_sources(&self.facts, &mut config);
        self.tiering.node_thresholds_read = config.reads_threshold();
        let raw = (0..MAX_NODES).filter_map(|n| Some((n, self.hot_thresholds.get(&n, 0).ok()?)));
        self.tiering.set_node_thresholds(raw);
        if self.tier_config != Some(config) {
            match self.tier_map.set(0, &config, 0) {
                Ok(()) => self.tier_config = Some(config),
                Err(e) => tracing::warn!("memory tiers not passed to the kernel side: {e}"),
            }
        }
    }

    /// Follows process `tgid` (and what it forks from now on) when the engine filters.
    pub fn follow(&mut self, tgid: u32) -> Result<()> {
        self.tracked
            .insert(&tgid, &1u8, 0)
            .with_context(|| format!("registering pid {tgid} with the kernel filter"))
    }

    pub fn cgroup_mount(&self) -> Option<&std::path::Path> {
        self.cgroups.mount()
    }

    fn lock(&self) -> MutexGuard<'_, Shared> {
        lock(&self.shared)
    }

    /// The next snapshot reads every task entry whole, none taken as unchanged since the
    /// previous one (see [`task_iter`]): for a report's final counts, which then do not rest
    /// on the iterator's margin.
    pub fn read_whole_next(&mut self) {
        self.whole_next = true;
    }

    /// How snapshots read the task map: `iterator` (whole only the entries that changed, see
    /// [`task_iter`]) or `batched` (every entry copied; those no program took since the previous
    /// read, by their stamps, taken as they were).
    pub fn task_reader(&self) -> &'static str {
        if self.maps.task_iter.is_some() {
            "iterator"
        } else {
            "batched"
        }
    }

    /// Everything counted since attach, now.
    ///
    /// The kernel maps cannot be read atomically, so the kernel side's own counters are read
    /// before and after everything else; when they differ (something was counted meanwhile)
    /// the read is repeated, a few times at most, while the reads are quick. `consistent` says
    /// whether they matched.
    pub fn snapshot(&mut self, detail: Detail) -> Result<Snapshot> {
        let mut attempt = 0;
        let mut whole = std::mem::take(&mut self.whole_next);
        loop {
            let read = self.read_once(detail, whole).inspect_err(|_| {
                // Asked for, not done yet.
                self.whole_next |= whole;
            })?;
            let Some((snap, consistent)) = read else {
                // Again, whole (a whole read always completes or fails).
                whole = true;
                continue;
            };
            attempt += 1;
            // (A snapshot in rows mode lists no records: the table's size.)
            let tasks = snap.tasks.len().max(self.table.listed());
            if consistent || attempt >= SNAPSHOT_ATTEMPTS || tasks >= RETRY_MAX_TASKS {
                return Ok(Snapshot { consistent, ..snap });
            }
            // Its records hold the next read's (unchanged since: all but what moved).
            self.recycle(snap);
        }
    }

    /// One read of [`Engine::snapshot`]; `None`: an incremental read that must be done again
    /// whole (nothing of it kept).
    fn read_once(&mut self, detail: Detail, whole: bool) -> Result<Option<(Snapshot, bool)>> {
        self.refresh_tiering();
        let vmstat_lo = Vmstat::read().unwrap_or_default().0;
        self.settle_marked();
        // Counters before the task map: a task created in between is in the map and not yet
        // in `TasksCreated`, so entries are never taken as lost that were only new.
        let counters = self.maps.counters().context("reading counters")?;
        let created_by = monotonic_ns();
        // The snapshot's task list: a recycled one with room, or one faulted in on another
        // thread meanwhile (see `tasks::prepared_records`).
        let next = if self.table.rows_only() {
            spare::Next::Spare(Vec::new(), None)
        } else {
            self.lists.take(self.table.len())
        };
        let (read, (records, built)) = std::thread::scope(|s| {
            let (prepared, spare) = match next {
                spare::Next::Prepare(n) => (
                    Some(s.spawn(move || tasks::prepared_records(n))),
                    (Vec::new(), None),
                ),
                spare::Next::Spare(list, built) => (None, (list, built)),
            };
            let read = self.read_tasks(whole);
            let list = match prepared {
                Some(p) => (p.join().unwrap_or_default(), None),
                None => spare,
            };
            (read, list)
        });
        let rest = read.and_then(|in_flight| {
            let (migrate_latency, fault_pages) =
                self.maps.histograms().context("reading histograms")?;
            let nodes = self.maps.node_arrays().context("reading the node arrays")?;
            let region_faults = self
                .maps
                .region_faults()
                .context("reading per-region faults")?;
            let rows = match detail {
                Detail::Full => Some(self.vma_rows()?),
                Detail::Summary => None,
            };
            Ok((
                in_flight,
                migrate_latency,
                fault_pages,
                nodes,
                region_faults,
                rows,
            ))
        });
        let (in_flight, migrate_latency, fault_pages, nodes, region_faults, rows) = match rest {
            Ok(r) => r,
            Err(e) => {
                // Nothing of this read is committed; the next reads the map whole.
                self.table.abort_read();
                self.lists.put_back(records, built);
                if let Some(iter) = &mut self.maps.task_iter {
                    iter.invalidate();
                }
                self.batch_stamps.invalidate();
                return Err(e);
            }
        };
        let mono_ns = monotonic_ns();
        let (mut tasks, events, undecodable, vmas, evicted, marked_gone) = {
            // The field, not `self.lock()`: the table is updated while the lock is held.
            let mut sh = lock(&self.shared);
            sh.drain();
            let acc = &sh.acc;
            let marked_gone = self.marked_gone + self.table.replaced(&acc.exited);
            // Distinct entries that existed when `created` was read (a map walk can meet a
            // key twice; an exit can be both live and drained).
            let seen = self.table.seen(created_by, &acc.exited) + acc.forgotten + marked_gone;
            let evicted = counters.get(Counter::TasksCreated).saturating_sub(seen);
            if self.read_keys.is_some() && evicted > self.evicted {
                // More entries missing than before: evicted, or created since the previous
                // read and passed over by the iterator's walk (see `task_iter`). Read whole.
                drop(sh);
                self.table.abort_read();
                self.lists.put_back(records, built);
                return Ok(None);
            }
            let cgroups = &self.cgroups;
            let epoch = cgroups.epoch();
            let tasks = self.table.commit(
                spare::reuse(records, built, epoch),
                &acc.exited,
                procfs::pid_exists,
                |id| cgroups.cached(id).flatten().cloned(),
            );
            let commit = self.table.commits();
            if !self.table.rows_only() {
                self.lists.issue(&tasks, spare::Built { commit, epoch });
            }
            let vmas = rows.map(|rows| merge_vmas(rows, acc));
            let (events, undecodable) = (acc.events.clone(), acc.undecodable);
            (tasks, events, undecodable, vmas, evicted, marked_gone)
        };
        self.marked_gone = marked_gone;
        self.evicted = evicted;
        let vmas = vmas.map(name_mappings);
        // After the maps: a window's misses then cover its vmstat_lo interval.
        let program_misses = self.program_misses();
        let after = self.maps.counters().context("reading counters")?;
        let vmstat_hi = Vmstat::read().unwrap_or_default().0;
        let consistent = Counter::ALL
            .iter()
            .filter(|c| watched(**c))
            .all(|c| counters.get(*c) == after.get(*c));
        // Outside the lock: resolving may walk the whole hierarchy. Cgroups the task list met
        // that no walk has resolved yet.
        let unresolved: HashSet<u64> = tasks
            .iter()
            .filter(|t| t.cgroup.is_none() && self.cgroups.cached(t.cgroup_id).is_none())
            .map(|t| t.cgroup_id)
            .collect();
        if !unresolved.is_empty() {
            for t in tasks
                .iter_mut()
                .filter(|t| unresolved.contains(&t.cgroup_id))
            {
                t.cgroup = self.cgroups.path(t.cgroup_id);
            }
        }
        let detail = vmas.is_some();
        let snap = Snapshot {
            mono_ns,
            span_ns: 0,
            consistent,
            self_tgid: self.self_tgid,
            tasks,
            detail,
            vmas: vmas.unwrap_or_default(),
            counters,
            migrate_latency,
            fault_pages,
            migrate_matrix: nodes.migrate_matrix,
            migrated_pages: nodes.migrated_pages,
            node_faults: nodes.node_faults,
            region_faults,
            vmstat_lo,
            vmstat_hi,
            in_flight: InFlight {
                start: 0,
                end: in_flight,
            },
            program_misses,
            events,
            undecodable,
            evicted,
            nodes: system_nodes(),
            tiering: self.tiering.clone(),
            tiering_start: None,
        };
        Ok(Some((snap, consistent)))
    }

    /// Reads the kernel's task map into the table: how many tasks had a hint fault in flight
    /// (see [`maps::fault_in_flight`]; entries marked exited have none). `whole`: every entry
    /// read whole, none taken as unchanged since the previous read (see [`task_iter`]).
    fn read_tasks(&mut self, whole: bool) -> Result<u64> {
        self.read_keys = None;
        self.unchanged = None;
        // The iterator failed in this read already: the next read tries it (one failure counted
        // per read).
        let mut failed = false;
        if !whole
            && self
                .maps
                .task_iter
                .as_ref()
                .is_some_and(TaskIter::changed_only)
        {
            match self.read_changed() {
                Ok(Some(keys)) => {
                    self.iter_retry.succeeded();
                    self.read_keys = Some(keys);
                    self.unchanged = Some(keys);
                    return Ok(self.table.in_flight());
                }
                // An unchanged entry the table does not hold (a read it dropped): read whole.
                Ok(None) => {}
                Err(TaskReadError::Iterator(e)) => {
                    self.iterator_failed(&e);
                    failed = true;
                }
                Err(TaskReadError::Map(e)) => {
                    return Err(e).context("reading the task map");
                }
            }
            self.table.abort_read();
        }
        if let Some(iter) = &mut self.maps.task_iter
            && !failed
        {
            // Its success is not the iterator's recovery: only a changed-only read is (a
            // failure that comes back at every such read drops it after ITER_TRIES). After a
            // failed walk its stamps are cleared already, so the next read is whole.
            if let Err(e) = iter.start_whole() {
                self.iterator_failed(&e);
            }
        }
        // Without the iterator, the kernel's jiffies from times(2): entries stamped before the
        // previous read's start (less the margin) are taken as they were. The batched walk
        // meets every entry present throughout (each bucket under its lock, or the key-by-key
        // walk, which restarts rather than skips).
        let batched = self.maps.task_iter.is_none();
        let since = (batched && !whole && self.batch_stamps.changed_only())
            .then(|| self.batch_stamps.since())
            .flatten();
        self.batch_stamps.invalidate();
        let started = if batched {
            self.jiffies.and_then(|j| j.now())
        } else {
            None
        };
        let untouched = self.read_whole(since).context("reading the task map")?;
        if let Some(started) = started {
            self.batch_stamps.completed(started, since.is_none());
        }
        self.unchanged = since.map(|_| untouched);
        Ok(self.table.in_flight())
    }

    /// After the iterator failed a read (this one is batched, whole): kept for the next read
    /// while its failures may pass ([`task_iter::IterRetry`]), else dropped.
    fn iterator_failed(&mut self, e: &task_iter::IterError) {
        match self.iter_retry.failed(e) {
            task_iter::AfterFailure::TryAgain(n) => tracing::warn!(
                "{e}: this read of the task map is batched; the iterator is tried again at the \
                 next ({n} failed in a row, {} dropped it)",
                task_iter::ITER_TRIES
            ),
            task_iter::AfterFailure::Drop => {
                tracing::warn!("{e}: reading the task map in batches from now on");
                self.maps.task_iter = None;
            }
        }
    }

    /// The whole map, in batches where the kernel can (each bucket under its lock: exact).
    /// `since`: an entry stamped before it, and as the table holds it, is taken as it was
    /// (not compared). How many were.
    fn read_whole(&mut self, since: Option<u32>) -> Result<u64, aya::maps::MapError> {
        let Self {
            maps,
            table,
            marked_slots,
            ..
        } = self;
        let mut untouched = 0;
        table.begin_read();
        maps.tasks(|e| {
            note_marked(marked_slots, e);
            let old = stamps::untouched(e.stats.touched, since);
            untouched += u64::from(table.note(&e.stats, maps::fault_in_flight(e), old));
        })?;
        Ok(untouched)
    }

    /// A read through the iterator: whole only the entries touched since the previous read.
    /// What its walk did not meet is looked up (the walk can miss an entry, see
    /// [`task_iter`]). How many entries came as keys; `None`: an unchanged entry the table
    /// does not hold (the table is mid-read: abort it).
    fn read_changed(&mut self) -> Result<Option<u64>, TaskReadError> {
        let Self {
            maps,
            table,
            marked_slots,
            ..
        } = self;
        let Some(iter) = maps.task_iter.as_mut() else {
            return Ok(None);
        };
        let mut unknown = false;
        let mut keys = 0;
        table.begin_read();
        iter.read_changed(|rec| match rec {
            // Freed between the walk's look at its pid and its copy of the value.
            TaskRec::Entry(e) if !task_map::holds_task(e) => {}
            TaskRec::Entry(e) => {
                note_marked(marked_slots, e);
                table.note(&e.stats, maps::fault_in_flight(e), false);
            }
            TaskRec::Unchanged(pid, first_ns) => {
                keys += 1;
                unknown |= table.note_unchanged((pid, first_ns)).is_none();
            }
        })
        .map_err(TaskReadError::Iterator)?;
        if unknown {
            return Ok(None);
        }
        // Entries the previous read met and this walk did not: gone (exited), or their pid
        // taken by a new task whose entry was made in a slot the walk had passed.
        for k in table.unmet() {
            if let Some(e) = maps.tasks.of_pid(k.0).map_err(TaskReadError::Map)? {
                note_marked(marked_slots, &e);
                table.note(&e.stats, maps::fault_in_flight(&e), false);
            }
        }
        Ok(Some(keys))
    }

    /// The kernel side's own counters now, without a snapshot.
    pub fn counters(&self) -> Result<maps::Counters> {
        self.maps.counters().context("reading counters")
    }

    /// How many task entries the latest snapshot's read took as unchanged since the one before
    /// (the iterator's keys, or the batched read's entries stamped before its margin); `None`:
    /// it read every entry whole.
    pub fn unchanged_entries(&self) -> Option<u64> {
        self.unchanged
    }

    /// Reads the task map in batches from now on, the iterator dropped (its program detached):
    /// for tests and benchmarks that compare the two readers on one kernel.
    pub fn read_batched(&mut self) {
        self.maps.task_iter = None;
    }

    /// How many task records the latest snapshot kept from a list handed back to
    /// [`Engine::recycle`], rather than built again.
    pub fn kept_records(&self) -> usize {
        self.table.kept()
    }

    /// Per-VMA rows of the kernel maps: PTE updates, skips by reason and pid_inactive gaps by
    /// (tgid, start).
    fn vma_rows(&self) -> Result<BTreeMap<(u32, u64), VmaRecord>> {
        let mut rows: BTreeMap<(u32, u64), VmaRecord> = BTreeMap::new();
        for (tgid, start, v) in self.maps.vmas().context("reading per-VMA counts")? {
            let r = rows
                .entry((tgid, start))
                .or_insert_with(|| VmaRecord::new(start, v.vm_end));
            (r.pte_updates, r.calls) = (v.pte_updates, v.calls);
        }
        for (tgid, start, g) in self.maps.gaps().context("reading per-VMA scan gaps")? {
            let r = rows
                .entry((tgid, start))
                .or_insert_with(|| VmaRecord::new(start, g.vm_end));
            // Zero where the classic program counts the hook (merge_vmas takes its records).
            r.skips = SkipCounts::from_slots(&g.reasons);
            if g.skips == 0 {
                // Skipped for other reasons only.
                continue;
            }
            r.pid_inactive = Some(GapRecord {
                skips: g.skips,
                over_threads: g.over_threads,
                at_threshold: g.at_threshold,
                max_gap: g.max_gap,
                max_gap_threads: g.max_gap_threads,
            });
        }
        Ok(rows)
    }

    /// From now on, sums what each task counts as its entry is read, for
    /// [`Engine::take_increments`]. Before the first snapshot.
    pub fn track_increments(&mut self) {
        self.table.track_increments(self.self_tgid);
    }

    /// From now on, snapshots list no task records: a frontend that needs only a few tasks'
    /// counts (`serve`) walks each task's row ([`Engine::task_rows`]) and asks for the counts
    /// of those it exports ([`Engine::task_counts`]). At 100 000 tasks the list was ~18 MiB.
    /// Before the first snapshot.
    pub fn list_rows_only(&mut self) {
        self.table.list_rows_only();
    }

    pub fn rows_only(&self) -> bool {
        self.table.rows_only()
    }

    /// Each task of the latest snapshot (rows mode, see [`Engine::list_rows_only`]), in its
    /// order, its cgroup path resolved as a snapshot's records have it.
    pub fn task_rows(&mut self, each: &mut dyn FnMut(&TaskRow)) {
        let cgroups = &mut self.cgroups;
        let mut path = |id: u64| match cgroups.cached(id) {
            Some(p) => p.cloned(),
            // Never looked up: as a snapshot resolves its records' (a walk, then cached).
            None => cgroups.path(id),
        };
        self.table.rows(&mut path, each);
    }

    /// The whole counts of the tasks of `keys` in the latest snapshot (rows mode), in that
    /// order; a task it did not list has none.
    pub fn task_counts(&self, keys: &[Key]) -> Vec<Counts> {
        self.table.counts_of(keys)
    }

    /// What each task counted since the previous call (the first: since attach), summed as the
    /// snapshots since read it, with per-record flags of the latest snapshot (see
    /// [`increments::Increments`]). `None` unless [`Engine::track_increments`] was called.
    pub fn take_increments(&mut self) -> Option<increments::Increments> {
        self.table.take_increments()
    }

    /// From now on (until the next call), sums what the tasks of `keys` count apart from the
    /// others ([`increments::Increments::watched`]).
    pub fn watch_increments(&mut self, keys: impl IntoIterator<Item = Key>) {
        self.table.watch_increments(keys);
    }

    /// Hands back a snapshot the caller is done with: its task list's memory holds the next
    /// snapshot's records (see [`spare::Lists::recycle`]); any large snapshot will do.
    ///
    /// One of the latest snapshots this engine returned, its task list as returned (records
    /// read, not changed), also keeps its records: the next snapshot rewrites only those of
    /// tasks that changed since (see [`tasks::Reuse`]). A list changed in place must not be
    /// handed back.
    pub fn recycle(&mut self, snap: Snapshot) {
        self.lists.recycle(snap.tasks, self.table.len());
    }

    /// Keeps every decoded ring record from now on, up to `cap` not yet taken (see
    /// [`Engine::take_events`]).
    pub fn tap_events(&mut self, cap: usize) {
        self.lock().tap = Some(Tap {
            events: Vec::new(),
            cap,
            lost: 0,
        });
    }

    /// The records kept since the last call (after draining what the ring holds now), and how
    /// many were not kept since the tap started because it was full.
    pub fn take_events(&mut self) -> (Vec<ringbuf::Event>, u64) {
        let mut sh = self.lock();
        sh.drain();
        match &mut sh.tap {
            Some(t) => (std::mem::take(&mut t.events), t.lost),
            None => (Vec::new(), 0),
        }
    }

    /// Forgets exited tasks whose final counts a frontend has folded into its own aggregates
    /// (a long-running `serve` would otherwise keep every task that ever ran): those whose exit
    /// record arrived (the kernel freed their entry) or whose marked entry was taken as one
    /// ([`Engine::settle_marked`]), and those carried forward and known gone. Returns the keys
    /// forgotten.
    pub fn forget_exited(&mut self, keys: &[(u32, u64)]) -> Vec<(u32, u64)> {
        let mut gone = Vec::new();
        {
            let mut sh = self.lock();
            for k in keys {
                if sh.acc.exited.remove(k).is_some() {
                    // Seen, not lost: the eviction estimate still counts it.
                    sh.acc.forgotten += 1;
                    gone.push(*k);
                } else if self.table.carried_exited(k) {
                    // Carried forward and known gone (see `TaskTable::commit`); already counted
                    // as evicted when its entry went missing.
                    gone.push(*k);
                }
            }
        }
        for k in &gone {
            self.table.remove(k);
        }
        gone
    }

    /// Frees the slots of marked entries (created in do_exit, or whose exit record was lost to
    /// a full ring buffer) whose task had finished before the latest read, so that nothing more
    /// could count in them: each is taken as its exit record would have been, and its slot goes
    /// back to the programs. The ring's reader frees those the programs hand it as their tasks
    /// finish ([`Shared::settle`]); this frees what it could not (a hand-over the kernel
    /// refused). A slot that no longer holds the entry was freed so, or handed over by its own
    /// exit (the record is on the ring).
    fn settle_marked(&mut self) {
        let done = self.table.marked_done(procfs::task_done);
        self.marked_slots.retain(|k, _| self.table.contains(k));
        if done.is_empty() {
            return;
        }
        // Under the lock: the ring's reader frees marked entries too, and a slot pushed back
        // twice would be two tasks' at once.
        let mut sh = lock(&self.shared);
        for k in done {
            let Some(slot) = self.marked_slots.remove(&k) else {
                continue;
            };
            match sh.marked.free(slot, k) {
                Ok(Some(stats)) => {
                    sh.acc.exited.insert(k, stats);
                }
                Ok(None) => {}
                Err(e) => {
                    // Kept for the next read's try.
                    tracing::warn!("freeing the task map's slot {slot}: {e}");
                    self.marked_slots.insert(k, slot);
                }
            }
        }
    }

    /// Σ of the per-VMA pid_inactive gap records (seed 002): (skips, over the thread count, at
    /// it). The kernel map only grows (entries are never deleted), so the sums only grow.
    pub fn gap_totals(&self) -> Result<(u64, u64, u64)> {
        Ok(self
            .maps
            .gaps()
            .context("reading per-VMA scan gaps")?
            .iter()
            .fold((0, 0, 0), |(s, o, a), (_, _, g)| {
                (s + g.skips, o + g.over_threads, a + g.at_threshold)
            }))
    }

    /// Runs the kernel skipped, by program (see [`progstats::recursion_misses`]); cumulative.
    fn program_misses(&self) -> BTreeMap<String, u64> {
        self.ebpf
            .programs()
            .filter_map(|(name, p)| {
                let misses = progstats::recursion_misses(p.fd().ok()?).ok()?;
                Some((name.to_owned(), misses))
            })
            .collect()
    }

    /// Per attached program: (name, run time ns, runs), while statistics are on.
    pub fn program_stats(&self) -> Vec<(String, u64, u64)> {
        let mut v: Vec<(String, u64, u64)> = self
            .ebpf
            .programs()
            .filter_map(|(name, p)| {
                let i = p.info().ok()?;
                Some((
                    name.to_owned(),
                    i.run_time().as_nanos() as u64,
                    i.run_count(),
                ))
            })
            .collect();
        v.sort();
        v
    }

    /// Switches the kernel's BPF run-time statistics on until the engine stops (they cost a
    /// little on every program run, so only while someone looks). 5.8+.
    pub fn enable_bpf_stats(&mut self) -> Result<()> {
        let fd = aya::sys::enable_stats(aya::sys::Stats::RunTime)
            .context("enabling BPF run-time statistics")?;
        self.stats_fd = Some(fd);
        Ok(())
    }

    /// Σ run time (ns) and Σ runs of numatrace's attached programs (0 while stats are off).
    pub fn bpf_run_time(&self) -> (u64, u64) {
        self.ebpf
            .programs()
            .filter_map(|(_, p)| p.info().ok())
            .fold((0, 0), |(t, n), i| {
                (t + i.run_time().as_nanos() as u64, n + i.run_count())
            })
    }

    /// Detaches everything and waits for the readers to finish.
    pub async fn stop(self) -> Result<()> {
        let Self {
            ebpf,
            stop_tx,
            reader,
            logger,
            stats_fd,
            ..
        } = self;
        drop(ebpf);
        // Statistics off again.
        drop(stats_fd);
        let _ = stop_tx.send(true);
        reader.await.context("ring buffer reader")?;
        if let Some(logger) = logger {
            // Its last messages are flushed when it sees the stop.
            let _ = logger.await;
        }
        Ok(())
    }
}

/// Joins the kernel's per-VMA rows with what the ring buffer said of each VMA (its scan
/// times; its skips where the classic program sent them).
fn merge_vmas(
    mut rows: BTreeMap<(u32, u64), VmaRecord>,
    acc: &Accum,
) -> BTreeMap<u32, Vec<VmaRecord>> {
    // A VMA the classic program sent skips of has a row even if no map has one (never
    // scanned, never skipped as pid_inactive), as it would in the tp_btf program's map.
    for (&(tgid, start), &(end, _)) in &acc.vma_skips {
        rows.entry((tgid, start))
            .or_insert_with(|| VmaRecord::new(start, end));
    }
    let mut out: BTreeMap<u32, Vec<VmaRecord>> = BTreeMap::new();
    for ((tgid, start), mut r) in rows {
        if let Some(times) = acc.scan_times.get(&(tgid, start)) {
            r.scan_times_ns = times.clone();
            r.scan_times_ns.sort_unstable();
        }
        // The classic program's records, where the tp_btf one did not count the reasons.
        if r.skips.is_empty()
            && let Some((_, slots)) = acc.vma_skips.get(&(tgid, start))
        {
            r.skips = SkipCounts::from_slots(slots);
        }
        out.entry(tgid).or_default().push(r);
    }
    out
}

/// Names each VMA's mapping from its process's /proc/PID/maps (one read per process; none
/// once it has exited). Outside the engine's lock: procfs can be slow.
fn name_mappings(mut vmas: BTreeMap<u32, Vec<VmaRecord>>) -> BTreeMap<u32, Vec<VmaRecord>> {
    for (tgid, rows) in &mut vmas {
        let names = procfs::process_mapping_names(*tgid);
        for r in rows {
            r.mapping = names.get(&r.start_addr).cloned();
        }
    }
    vmas
}

/// How often the ring buffer is read: records are submitted without a wake-up until a
/// quarter of the ring is waiting (see `Config::wake_bytes`), so a quiet ring is read on this
/// timer, and every snapshot drains it.
pub const READ_INTERVAL: std::time::Duration = std::time::Duration::from_millis(100);

/// The shared state, locked. A panic while holding the lock leaves plain counters behind:
/// still readable.
fn lock(shared: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    shared.lock().unwrap_or_else(|p| p.into_inner())
}

/// Drains the ring buffer into the accumulator every [`READ_INTERVAL`] and whenever the kernel
/// signals records.
async fn read_ring(
    fd: AsyncFd<OwnedFd>,
    shared: Arc<Mutex<Shared>>,
    mut stop: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(READ_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {
                lock(&shared).drain();
            }
            guard = fd.readable() => {
                let Ok(mut guard) = guard else { break };
                lock(&shared).drain();
                guard.clear_ready();
            }
            changed = stop.changed() => {
                if changed.is_err() || *stop.borrow() {
                    break;
                }
            }
        }
    }
}

/// Forwards aya-log records until `stop`, then flushes what is left.
fn spawn_bpf_logger(ebpf: &mut Ebpf, mut stop: watch::Receiver<bool>) -> Result<JoinHandle<()>> {
    let logger = aya_log::EbpfLogger::init(ebpf).context("initialising aya-log")?;
    // SAFETY: the logger owns its map descriptor; flushing neither closes nor replaces it.
    let mut logger = unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(logger, tokio::io::Interest::READABLE)
    }
    .context("polling aya-log")?;
    Ok(tokio::spawn(async move {
        loop {
            tokio::select! {
                guard = logger.readable_mut() => {
                    let Ok(mut guard) = guard else { break };
                    guard.get_inner_mut().flush();
                    guard.clear_ready();
                }
                changed = stop.changed() => {
                    if changed.is_err() || *stop.borrow() {
                        logger.get_mut().flush();
                        break;
                    }
                }
            }
        }
    }))
}
