//! Snapshots of the per-task map and the per-CPU counters. The hash maps, which hold up to one
//! entry per task, VMA or region, are read in batches where the kernel can ([`super::batch`]),
//! else element by element.

use std::{
    os::fd::AsFd as _,
    sync::atomic::{AtomicBool, Ordering},
};

use aya::{
    Pod,
    maps::{HashMap, IterableMap as _, MapData, MapError, PerCpuArray},
};
use numatrace_common::{
    COUNTER_SLOTS, Counter, FAULT_PAGE_BUCKETS, LATENCY_BUCKETS, MATRIX_SLOTS, MAX_NODES,
    MIGRATED_PAGES_SLOTS, NODE_FAULT_SLOTS, RegionKey, TaskEntry, VmaGap, VmaKey, VmaStats,
};
use serde::{Deserialize, Serialize};

use super::batch::{Batch, BatchError};
use crate::model::RegionCount;

/// Per-CPU counters summed over CPUs, indexed by [`Counter`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters(pub Vec<u64>);

impl Counters {
    pub fn get(&self, c: Counter) -> u64 {
        self.0.get(c as usize).copied().unwrap_or(0)
    }
}

pub struct Maps {
    pub tasks: super::task_map::TaskMap,
    /// The task map's iterator, where it loaded: reads that copy only what changed.
    pub task_iter: Option<super::task_iter::TaskIter>,
    pub counters: Slots<{ COUNTER_SLOTS as usize }>,
    pub migrate_latency: Slots<{ LATENCY_BUCKETS as usize }>,
    pub fault_pages: Slots<{ FAULT_PAGE_BUCKETS as usize }>,
    pub migrate_matrix: Slots<{ MATRIX_SLOTS as usize }>,
    pub migrated_pages: Slots<{ MIGRATED_PAGES_SLOTS as usize }>,
    pub node_faults: Slots<{ NODE_FAULT_SLOTS as usize }>,
    pub vmas: HashMap<MapData, VmaKey, VmaStats>,
    pub gaps: HashMap<MapData, VmaKey, VmaGap>,
    pub region_faults: HashMap<MapData, RegionKey, u64>,
    /// False once the kernel said it has no batched lookup: iterate from then on.
    pub batched: AtomicBool,
}

/// Elements per batched call of the smaller-valued maps.
const CHUNK: usize = 1024;

/// Raw per-node arrays (layouts in numatrace-common).
pub struct NodeArrays {
    pub migrate_matrix: Vec<u64>,
    pub migrated_pages: Vec<u64>,
    pub node_faults: Vec<u64>,
}

/// Migrations between two nodes (`src` None: the source node could not be resolved).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeFlow {
    pub src: Option<u32>,
    pub dst: u32,
    /// migrate_misplaced_* calls that migrated / did not migrate (folios); left out of the
    /// JSON where it did not attach.
    #[serde(default)]
    pub migrated: u64,
    #[serde(default)]
    pub not_migrated: u64,
    /// Pages hint faults migrated (task_numa_fault with TNF_MIGRATED): what reconciles with
    /// `numa_pages_migrated`.
    #[serde(default)]
    pub pages: u64,
}

/// Non-zero cells of the `[ok | failed][src 0..=MAX_NODES][dst]` call matrix and the
/// `[src 0..=MAX_NODES][dst]` pages matrix.
pub fn node_flows(cells: &[u64], pages: &[u64]) -> Vec<NodeFlow> {
    let n = MAX_NODES as usize;
    let half = (n + 1) * n;
    let mut out = Vec::new();
    for src in 0..=n {
        for dst in 0..n {
            let ok = cells.get(src * n + dst).copied().unwrap_or(0);
            let failed = cells.get(half + src * n + dst).copied().unwrap_or(0);
            let pages = pages.get(src * n + dst).copied().unwrap_or(0);
            if ok > 0 || failed > 0 || pages > 0 {
                out.push(NodeFlow {
                    src: (src < n).then_some(src as u32),
                    dst: dst as u32,
                    migrated: ok,
                    not_migrated: failed,
                    pages,
                });
            }
        }
    }
    out
}

/// A per-CPU array of counters held as one value (see the kernel side's `Slots`): one lookup
/// reads every slot on every CPU.
pub type Slots<const N: usize> = PerCpuArray<MapData, [u64; N]>;

/// Each slot summed over CPUs.
fn sum_array<const N: usize>(a: &Slots<N>) -> Result<Vec<u64>, MapError> {
    let mut out = vec![0u64; N];
    for cpu in a.get(&0, 0)?.iter() {
        for (o, v) in out.iter_mut().zip(cpu) {
            *o += v;
        }
    }
    Ok(out)
}

/// Reads `map` in batches through `buf` while `batched` holds; Ok(false) when the kernel has
/// no batched lookup (nothing was read: iterate instead, and `batched` is cleared).
fn read_batched<K: Pod, V: Pod>(
    batched: &AtomicBool,
    map: &HashMap<MapData, K, V>,
    buf: &mut Batch<K, V>,
    each: impl FnMut(&K, &V),
) -> Result<bool, MapError> {
    if !batched.load(Ordering::Relaxed) {
        return Ok(false);
    }
    match buf.read(map.map().fd().as_fd(), each) {
        Ok(()) => Ok(true),
        Err(BatchError::Unsupported(e)) => {
            tracing::debug!("reading maps element by element: {e}");
            batched.store(false, Ordering::Relaxed);
            Ok(false)
        }
        Err(e) => Err(e.into_map_error()),
    }
}

/// Calls `each` with every entry of `map`: batched through `buf` where the kernel can, else
/// iterated (`skip_missing`: an entry deleted between listing and lookup is left out rather
/// than an error).
fn for_each_in<K: Pod, V: Pod>(
    batched: &AtomicBool,
    map: &HashMap<MapData, K, V>,
    buf: &mut Batch<K, V>,
    skip_missing: bool,
    mut each: impl FnMut(&K, &V),
) -> Result<(), MapError> {
    if read_batched(batched, map, buf, &mut each)? {
        return Ok(());
    }
    for kv in map.iter() {
        match kv {
            Ok((k, v)) => each(&k, &v),
            Err(MapError::KeyNotFound) if skip_missing => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// [`for_each_in`] with a buffer of its own.
fn for_each<K: Pod, V: Pod>(
    batched: &AtomicBool,
    map: &HashMap<MapData, K, V>,
    skip_missing: bool,
    each: impl FnMut(&K, &V),
) -> Result<(), MapError> {
    for_each_in(batched, map, &mut Batch::new(CHUNK), skip_missing, each)
}

/// Every entry of a map keyed by VMA, as (tgid, vm_start, value).
fn per_vma<V: Pod>(
    batched: &AtomicBool,
    map: &HashMap<MapData, VmaKey, V>,
) -> Result<Vec<(u32, u64, V)>, MapError> {
    let mut out = Vec::new();
    for_each(batched, map, false, |k, v| {
        out.push((k.tgid, k.vm_start, *v))
    })?;
    Ok(out)
}

impl Maps {
    pub fn counters(&self) -> Result<Counters, MapError> {
        sum_array(&self.counters).map(Counters)
    }

    /// The per-node arrays, summed over CPUs.
    pub fn node_arrays(&self) -> Result<NodeArrays, MapError> {
        Ok(NodeArrays {
            migrate_matrix: sum_array(&self.migrate_matrix)?,
            migrated_pages: sum_array(&self.migrated_pages)?,
            node_faults: sum_array(&self.node_faults)?,
        })
    }

    /// Hint faults of each (2 MiB region, scan pass).
    pub fn region_faults(&self) -> Result<Vec<RegionCount>, MapError> {
        let mut out = Vec::new();
        // An entry evicted (LRU) between listing and lookup is left out.
        for_each(&self.batched, &self.region_faults, true, |k, v| {
            out.push(RegionCount::from_key(k, *v))
        })?;
        Ok(out)
    }

    /// PTE updates per VMA: (tgid, vm_start, stats).
    pub fn vmas(&self) -> Result<Vec<(u32, u64, VmaStats)>, MapError> {
        per_vma(&self.batched, &self.vmas)
    }

    /// pid_inactive skips per VMA: (tgid, vm_start, gaps).
    pub fn gaps(&self) -> Result<Vec<(u32, u64, VmaGap)>, MapError> {
        per_vma(&self.batched, &self.gaps)
    }

    /// Raw (migrate_misplaced latency in ns, pages per hint fault) log2 histograms.
    pub fn histograms(&self) -> Result<(Vec<u64>, Vec<u64>), MapError> {
        Ok((
            sum_array(&self.migrate_latency)?,
            sum_array(&self.fault_pages)?,
        ))
    }

    /// Calls `each` with every entry of the task map that holds a task
    /// ([`super::task_map::TaskMap::each`]).
    pub fn tasks(&mut self, each: impl FnMut(&TaskEntry)) -> Result<(), MapError> {
        self.tasks.each(each)
    }
}

/// Whether `e`'s task had a hint fault between its migrate_misplaced call and its
/// task_numa_fault when read (the kernel counted it in numa_hint_faults, before migrating;
/// numatrace counts it in task_numa_fault). A task that exited has nothing in flight: what its
/// entry kept is stale.
pub fn fault_in_flight(e: &TaskEntry) -> bool {
    e.stats.exited == 0 && e.inflight.fault_in_flight()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matrix_cells_become_flows() {
        let n = MAX_NODES as usize;
        let mut cells = vec![0; MATRIX_SLOTS as usize];
        cells[n] = 7; // ok, src 1 -> dst 0
        cells[(n + 1) * n + 1] = 2; // failed, src 0 -> dst 1
        cells[n * n + 1] = 3; // ok, src unknown -> dst 1
        let mut pages = vec![0; (n + 1) * n];
        pages[n] = 7 * 512;
        let f = node_flows(&cells, &pages);
        assert_eq!(f.len(), 3);
        assert_eq!(f[1].pages, 7 * 512);
        assert_eq!(
            f[0],
            NodeFlow {
                src: Some(0),
                dst: 1,
                migrated: 0,
                not_migrated: 2,
                pages: 0,
            }
        );
        assert_eq!(
            f[1],
            NodeFlow {
                src: Some(1),
                dst: 0,
                migrated: 7,
                not_migrated: 0,
                pages: 7 * 512,
            }
        );
        assert_eq!(f[2].src, None);
    }
}
