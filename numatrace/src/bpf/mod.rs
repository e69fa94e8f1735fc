//! Loading numatrace's eBPF object and attaching it as a [`crate::plan::Plan`] says.
pub mod loader;

/// The eBPF object built by build.rs (numatrace-ebpf for bpfel-unknown-none), embedded so the
/// binary is self-contained.
pub static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/numatrace"));
