//! `cargo xtask test`: the whole suite, in the order that fails fastest.

use std::{
    env,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Result, bail};

use crate::{
    process::{check, output},
    setup::{Tools, ensure_cargo_fuzz, workspace_root},
};

/// Seconds each fuzz target runs (`NUMATRACE_FUZZ_SECONDS` overrides; 0 skips fuzzing).
const FUZZ_SECONDS: u64 = 12;

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
        crate::setup::ensure_packages(&["tmux", "procps", "prometheus", "bpftool", "util-linux"])?;
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
    fuzz(tools)
}

/// `cargo fuzz` as xtask runs it: the pinned nightly, cargo-fuzz and bpf-linker on PATH, in
/// fuzz/.
fn cargo_fuzz(tools: &Tools, bin: &Path) -> Command {
    let mut c = tools.cargo(&tools.pins.nightly);
    let path = env::var_os("PATH").unwrap_or_default();
    let paths = [bin.to_path_buf(), tools.bpf_linker_bin.clone()]
        .into_iter()
        .chain(env::split_paths(&path));
    c.env(
        "PATH",
        env::join_paths(paths).expect("PATH entries are valid"),
    )
    .current_dir(workspace_root().join("fuzz"))
    .arg("fuzz");
    c
}

/// Every fuzz target for a bounded time (libFuzzer, AddressSanitizer, overflow checks on),
/// from the committed seeds and the corpus earlier runs grew (kept in the target directory); a
/// crash, a timeout or more than 512 MiB fails the step with the reproducer's path.
fn fuzz(tools: &Tools) -> Result<()> {
    let seconds = match env::var("NUMATRACE_FUZZ_SECONDS") {
        Ok(s) => s.parse()?,
        Err(_) => FUZZ_SECONDS,
    };
    if seconds == 0 {
        eprintln!("xtask: NUMATRACE_FUZZ_SECONDS=0: fuzzing skipped");
        return Ok(());
    }
    let bin = ensure_cargo_fuzz(&tools.pins)?;
    // The instrumented build (about 13 min cold on 2 cores) is kept in the cache, so that a
    // fresh clone rebuilds only numatrace itself; corpus and crashes stay with the checkout.
    let build_dir = crate::setup::cache_dir().join(format!("fuzz-target-{}", tools.pins.nightly));
    let target_dir = env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| workspace_root().join("target"), PathBuf::from)
        .join("fuzz");
    eprintln!("xtask: cargo fuzz build");
    check(
        cargo_fuzz(tools, &bin)
            .args(["build", "--target-dir"])
            .arg(&build_dir),
    )?;
    let list = output(cargo_fuzz(tools, &bin).arg("list"))?;
    let seeds = workspace_root().join("fuzz/seeds");
    for target in list.split_whitespace() {
        let corpus = target_dir.join("corpus").join(target);
        let artifacts = target_dir.join("artifacts").join(target);
        std::fs::create_dir_all(&corpus)?;
        std::fs::create_dir_all(&artifacts)?;
        eprintln!("xtask: fuzzing {target} for {seconds} s");
        let status = cargo_fuzz(tools, &bin)
            .args(["run", "--target-dir"])
            .arg(&build_dir)
            .arg(target)
            .arg(&corpus)
            .arg(&seeds)
            .arg("--")
            .arg(format!("-max_total_time={seconds}"))
            .args(["-rss_limit_mb=512", "-timeout=10", "-print_final_stats=1"])
            .arg(format!("-artifact_prefix={}/", artifacts.display()))
            .status()?;
        if !status.success() {
            let newest = std::fs::read_dir(&artifacts)?
                .filter_map(Result::ok)
                .max_by_key(|e| e.metadata().and_then(|m| m.modified()).ok())
                .map(|e| e.path());
            match newest {
                Some(p) => bail!(
                    "fuzz target {target} failed ({status}); reproducer {}: run `cargo fuzz \
                     run {target} {}` in fuzz/ with the nightly",
                    p.display(),
                    p.display()
                ),
                None => bail!("fuzz target {target} failed ({status})"),
            }
        }
    }
    Ok(())
}
