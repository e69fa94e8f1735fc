//! numatrace: a live tracer of the Linux kernel's automatic NUMA balancing.
//!
//! Layers, each importing only those below it (`tests/layers.rs` checks it): [`model`],
//! [`invoker`], [`safe_fs`] and [`text_escape`] at the ground; [`kernel`] reads what the running kernel
//! offers (and holds the hook catalogue); [`plan`] decides each hook's mechanism; [`bpf`] loads
//! and attaches; [`sources`] turn maps, ring buffer records, procfs and cgroupfs into plain
//! data; [`engine`] keeps the kernel side attached and takes snapshots; [`session`] runs a
//! window; [`capture`] and [`report`] write and print; [`cli`] parses; [`cmd`] holds the
//! frontends, one per subcommand.
pub mod bpf;
pub mod capture;
pub mod cli;
pub mod cmd;
pub mod engine;
pub mod identity;
pub mod invoker;
pub mod kernel;
pub mod model;
pub mod plan;
pub mod report;
pub mod safe_fs;
pub mod session;
pub mod sources;
pub mod spawn;
pub mod text_escape;

/// Panics when `NUMATRACE_TEST_PANIC` names this point (`attach`: every program attached;
/// `frame`: `top` drew its first frame). For the reliability suite, which checks that a panic
/// leaves nothing attached in the kernel and the terminal restored; unset, it does nothing.
pub fn test_panic(point: &str) {
    if std::env::var_os("NUMATRACE_TEST_PANIC").is_some_and(|v| v == point) {
        panic!("NUMATRACE_TEST_PANIC={point}: forced panic");
    }
}
