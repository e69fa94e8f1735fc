//! numatrace: a live tracer of the Linux kernel's automatic NUMA balancing.
//!
//! Layers: [`kernel`] reads what the running kernel offers, [`plan`] decides the hooks,
//! [`bpf`] loads and attaches them, [`sources`] turn maps, ring buffer records, procfs and
//! cgroupfs into plain data, [`engine`] keeps the kernel side attached and takes snapshots of
//! it, [`model`] holds the counts and records, [`report`] prints, [`cmd`] wires one
//! subcommand together.
pub mod bpf;
pub mod capture;
pub mod catalogue;
pub mod check;
pub mod cli;
pub mod cmd;
pub mod engine;
pub mod kernel;
pub mod model;
pub mod plan;
#[cfg(test)]
mod plan_lines;
pub mod report;
pub mod serve;
pub mod sources;
pub mod spawn;
pub mod top;
