//! Reading the running kernel: facts for the plan, tracefs, capabilities, /proc/vmstat, the
//! machine-wide state a regression report quotes (`sysstate`), and
//! memory tiering (`tiering`), the layout the kernel states in /proc/kcore (`vmcoreinfo`), and
//! the catalogue of every hook the product uses with what each needs of a kernel.
pub mod btf;
pub mod caps;
pub mod catalogue;
pub mod facts;
pub mod mempolicy;
pub mod nodes;
pub mod preempt;
pub mod private_mount;
pub mod sysstate;
pub mod tiering;
pub mod tracefs;
pub mod tunables;
pub mod version;
pub mod vmcoreinfo;
pub mod vmstat;
