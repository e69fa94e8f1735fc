//! Snapshots of the per-task map and the per-CPU counters.

use aya::maps::{HashMap, MapData, MapError, PerCpuArray};
use numatrace_common::{COUNTER_SLOTS, Counter, TaskStats};

/// Per-CPU counters summed over CPUs, indexed by [`Counter`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters(pub Vec<u64>);

impl Counters {
    pub fn get(&self, c: Counter) -> u64 {
        self.0.get(c as usize).copied().unwrap_or(0)
    }
}

pub struct Maps {
    pub tasks: HashMap<MapData, u32, TaskStats>,
    pub counters: PerCpuArray<MapData, u64>,
}

impl Maps {
    pub fn counters(&self) -> Result<Counters, MapError> {
        (0..COUNTER_SLOTS)
            .map(|i| Ok(self.counters.get(&i, 0)?.iter().sum()))
            .collect::<Result<_, MapError>>()
            .map(Counters)
    }

    /// Every live entry. Entries may change while being read; each value is read atomically.
    pub fn tasks(&self) -> Result<Vec<TaskStats>, MapError> {
        let mut out = Vec::new();
        for kv in self.tasks.iter() {
            match kv {
                Ok((_, v)) => out.push(v),
                // An entry deleted between listing and lookup (its task exited): its exit
                // snapshot is on the ring buffer.
                Err(MapError::KeyNotFound) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }
}
