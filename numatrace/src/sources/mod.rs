//! Where data comes from: the kernel programs' ring buffer and maps, procfs (mapping names,
//! process liveness, own CPU time, tasks' NUMA state), cgroupfs and the programs' run statistics. Each source turns raw
//! bytes into the plain types of [`crate::model`]; none of them aggregates.
pub mod batch;
pub mod cgroups;
pub mod maps;
pub mod procfs;
pub mod progstats;
pub mod ringbuf;
pub mod stamps;
pub mod task_iter;
pub mod task_map;
pub mod task_numa;
