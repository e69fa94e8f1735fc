//! Reading the running kernel: facts for the plan, tracefs, capabilities, /proc/vmstat.
pub mod caps;
pub mod facts;
pub mod tracefs;
pub mod vmstat;
