//! numatrace: a live tracer of the Linux kernel's automatic NUMA balancing.
//!
//! Layers: [`kernel`] reads what the running kernel offers, [`plan`] decides the hooks,
//! [`bpf`] loads and attaches them, [`sources`] turn maps and ring buffer records into plain
//! data, [`model`] aggregates, [`report`] prints, [`cmd`] wires one subcommand together.
pub mod bpf;
pub mod check;
pub mod cli;
pub mod cmd;
pub mod kernel;
pub mod model;
pub mod plan;
pub mod report;
pub mod sources;
pub mod spawn;
