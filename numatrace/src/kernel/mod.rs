//! Reading the running kernel: facts for the plan, tracefs, capabilities, /proc/vmstat, and
//! the catalogue of every hook the product uses with what each needs of a kernel.
pub mod btf;
pub mod caps;
pub mod catalogue;
pub mod facts;
pub mod mempolicy;
pub mod nodes;
pub mod preempt;
pub mod tracefs;
pub mod tunables;
pub mod version;
pub mod vmstat;
