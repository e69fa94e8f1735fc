//! Reading the running kernel: facts for the plan, tracefs, capabilities, /proc/vmstat.
pub mod btf;
pub mod caps;
pub mod facts;
pub mod mempolicy;
pub mod nodes;
pub mod preempt;
pub mod tracefs;
pub mod tunables;
pub mod version;
pub mod vmstat;
