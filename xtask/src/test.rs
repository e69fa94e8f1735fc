//! `cargo xtask test`: the whole suite, in the order that fails fastest.

use anyhow::Result;

use crate::{process::check, setup::Tools};

pub fn run(tools: &Tools, lint: bool) -> Result<()> {
    let stable = &tools.pins.stable;
    let nightly = &tools.pins.nightly;
    if lint {
        eprintln!("xtask: cargo fmt --check");
        check(tools.cargo(stable).args(["fmt", "--all", "--", "--check"]))?;
        eprintln!("xtask: clippy (host crates)");
        check(tools.cargo(stable).args([
            "clippy",
            "--release",
            "--all-targets",
            "--package",
            "numatrace",
            "--package",
            "numatrace-common",
            "--package",
            "xtask",
            "--",
            "-D",
            "warnings",
        ]))?;
        eprintln!("xtask: clippy (eBPF crate, bpfel-unknown-none)");
        check(tools.cargo(nightly).args([
            "clippy",
            "--release",
            "--package",
            "numatrace-ebpf",
            "--target",
            "bpfel-unknown-none",
            "-Z",
            "build-std=core",
            "--",
            "-D",
            "warnings",
        ]))?;
    }
    // `top` is tested in a real terminal: tmux (and pgrep) from Debian; `serve`'s exposition
    // and deploy/'s scrape config by promtool, from Debian's prometheus package; the kernel's
    // BPF object lists by bpftool and mount namespaces by unshare (util-linux). As root.
    if crate::process::is_root() {
        crate::vm::ensure_packages(&["tmux", "procps", "prometheus", "bpftool", "util-linux"])?;
    } else {
        eprintln!(
            "xtask: not root: tmux, promtool and bpftool are not installed, the terminal test \
             of `top`, the promtool checks and the reliability suite will skip"
        );
    }
    // Real-kernel tests share kernel state (sysctls, tracefs, attached programs): one at a time.
    eprintln!("xtask: unit and real-kernel tests");
    check(tools.cargo(stable).args([
        "test",
        "--release",
        "--package",
        "numatrace",
        "--package",
        "numatrace-common",
        "--package",
        "xtask",
        "--",
        "--test-threads=1",
    ]))?;
    Ok(())
}
