//! Task entries the benchmark writes into a running numatrace's kernel task map itself, for
//! task counts real activity cannot reach here (sleeping threads rarely take hint faults; the
//! host has one node). Their pids lie above `pid_max`, so no live task can collide with them.

use std::fs;

use anyhow::{Context as _, Result, bail};
use aya::maps::{Array, HashMap, Map, MapData, MapInfo, Stack};
use numatrace::sources::{stamps::Jiffies, task_map::holds_task};
use numatrace_common::{
    MAP_FREE_SLOTS, MAP_TASK_ITER, MAP_TASK_SLOT, MAP_TASK_STATS, SlotRef, TaskEntry,
    TaskIterControl, TaskStats,
};

/// The first pid written (the kernel's limit is 2^22 = 4 194 304).
pub const PID_BASE: u32 = 4_000_000;
/// Threads per synthetic process.
const THREADS: u32 = 10;

/// The map named `name` among the open descriptors of process `pid` (their fdinfo names the
/// map id), the newest if several.
fn owned_map(pid: u32, name: &str) -> Result<MapData> {
    map_of(pid, name)?.with_context(|| format!("process {pid} holds no {name} map"))
}

/// The task iterator's control value of process `pid`, if it reads its task map through the
/// iterator.
fn iter_control_of(pid: u32) -> Result<Option<Array<MapData, TaskIterControl>>> {
    map_of(pid, MAP_TASK_ITER)?
        .map(|data| Array::try_from(Map::Array(data)).context(MAP_TASK_ITER))
        .transpose()
}

/// The newest map named `name` among the open descriptors of process `pid`.
fn map_of(pid: u32, name: &str) -> Result<Option<MapData>> {
    let dir = format!("/proc/{pid}/fdinfo");
    let mut newest = None;
    for e in fs::read_dir(&dir).with_context(|| format!("reading {dir}"))? {
        let Ok(text) = fs::read_to_string(e?.path()) else {
            continue;
        };
        let Some(id) = text
            .lines()
            .find_map(|l| l.strip_prefix("map_id:")?.trim().parse::<u32>().ok())
        else {
            continue;
        };
        if MapInfo::from_id(id).is_ok_and(|i| i.name_as_str() == Some(name)) {
            newest = newest.max(Some(id));
        }
    }
    newest
        .map(|id| MapData::from_id(id).with_context(|| format!("map id {id}")))
        .transpose()
}

/// Fails unless every synthetic pid is beyond what the kernel hands out.
pub fn check_pid_max(tasks: usize) -> Result<()> {
    let max: u64 = fs::read_to_string("/proc/sys/kernel/pid_max")?
        .trim()
        .parse()?;
    if max > u64::from(PID_BASE) {
        bail!("pid_max {max} reaches the synthetic pids {PID_BASE}..: they could collide");
    }
    if u64::from(PID_BASE) + tasks as u64 > u64::from(u32::MAX) {
        bail!("{tasks} synthetic tasks overflow the pid range");
    }
    Ok(())
}

/// `tasks` entries spread round-robin over `cgroups`, rewritten with growing counters.
pub struct Synthetic {
    map: Array<MapData, TaskEntry>,
    /// The slot of each entry written, popped from the owner's free slots as a program pops
    /// one for a new task, its pid given it in the owner's pid → slot map.
    slots: Vec<SlotRef>,
    /// The owner's task iterator, if it has one: an entry written is stamped as a program
    /// stamps the entries it takes, so that the next read sends it whole.
    iter: Option<Array<MapData, TaskIterControl>>,
    /// The kernel's jiffies, to stamp what is written as a program would.
    jiffies: Option<Jiffies>,
    cgroups: Vec<u64>,
    tasks: usize,
    first_ns: u64,
}

impl Synthetic {
    /// The entries of process `owner`'s task map.
    pub fn new(owner: u32, cgroups: &[u64], tasks: usize) -> Result<Self> {
        let map = Array::try_from(Map::Array(owned_map(owner, MAP_TASK_STATS)?))
            .context(MAP_TASK_STATS)?;
        let mut slot_of: HashMap<MapData, u32, SlotRef> =
            HashMap::try_from(Map::HashMap(owned_map(owner, MAP_TASK_SLOT)?))
                .context(MAP_TASK_SLOT)?;
        let mut free: Stack<MapData, SlotRef> =
            Stack::try_from(Map::Stack(owned_map(owner, MAP_FREE_SLOTS)?))
                .context(MAP_FREE_SLOTS)?;
        let mut slots = Vec::with_capacity(tasks);
        for i in 0..tasks {
            let r = free
                .pop(0)
                .with_context(|| format!("a free slot for entry {i} of {tasks}"))?;
            slot_of
                .insert(&(PID_BASE + i as u32), &r, 0)
                .with_context(|| format!("the slot of entry {i} of {tasks}"))?;
            slots.push(r);
        }
        Ok(Self {
            map,
            slots,
            iter: iter_control_of(owner)?,
            jiffies: Jiffies::probe(),
            cgroups: cgroups.to_vec(),
            tasks,
            first_ns: 1,
        })
    }

    pub fn map(&self) -> &Array<MapData, TaskEntry> {
        &self.map
    }

    /// Entries that hold a task now (before writing: the ones the kernel side created).
    pub fn count(&self) -> usize {
        self.map
            .iter()
            .filter(|r| r.as_ref().is_ok_and(holds_task))
            .count()
    }

    /// Writes every entry as at `generation` (1, 2, …): each counter grows with it, so each
    /// write changes every entry, as if every task had been active since the previous one.
    pub fn write(&mut self, generation: u64) -> Result<()> {
        self.write_share(generation, 100)
    }

    /// Writes `percent` of the entries as at `generation` (the same ones each time: the busy
    /// tasks), the others left as they were (idle since).
    pub fn write_share(&mut self, generation: u64, percent: usize) -> Result<()> {
        // The kernel's jiffies now, as a program stamps an entry it takes: at or after the
        // start of the owner's latest read, so the next read takes the entry as changed.
        // Without that clock, the start of the owner's latest iterator read (the batched read
        // then takes nothing as unchanged).
        let touched = match self.jiffies.and_then(|j| j.now()) {
            Some(j) => j,
            None => match &self.iter {
                Some(a) => a.get(&0, 0).context(MAP_TASK_ITER)?.started as u32,
                None => 0,
            },
        };
        for i in (0..self.tasks).filter(|i| i % 100 < percent) {
            let mut e = self.entry(i, generation);
            e.stats.touched = touched;
            let r = self.slots[i];
            (e.slot, e.generation) = (r.slot, r.generation);
            self.map
                .set(r.slot, &e, 0)
                .with_context(|| format!("writing entry {i} of {}", self.tasks))?;
        }
        Ok(())
    }

    fn entry(&self, i: usize, g: u64) -> TaskEntry {
        let pid = PID_BASE + i as u32;
        let mut s = TaskStats::new(pid, PID_BASE + i as u32 / THREADS * THREADS);
        s.comm[..9].copy_from_slice(b"ntb-scale");
        s.first_ns = self.first_ns;
        s.last_ns = self.first_ns + g * 1_000_000_000;
        s.cgroup_id = self
            .cgroups
            .get(i % self.cgroups.len().max(1))
            .copied()
            .unwrap_or(0);
        s.preferred_nid = 1;
        s.last_nid = 1;
        let k = i as u64;
        let faults = g * (1 + k % 7);
        s.hint_faults.faults = faults;
        s.hint_faults.local = faults;
        s.hint_faults.pages = faults;
        s.hint_faults.faults_4k = faults;
        s.scan.pte_updates = g * 64 * (1 + k % 5);
        s.scan.prot_numa_calls = g;
        s.scan.samples = g;
        s.scan.scan_samples = g * u64::from(k.is_multiple_of(50));
        s.skip_vma[3] = g;
        TaskEntry {
            stats: s,
            ..TaskEntry::default()
        }
    }
}
