//! `cargo xtask vm-test`: the real-kernel tests inside QEMU guests (TCG; two nodes and a slow
//! CPU-less third), one per kernel
//! line a user runs — Debian 11 (5.10), 12 (6.1), 13 (6.12), 13's backports (7.x) and Ubuntu
//! 24.04's release kernel 6.8.0-31 (which predates seed 002) — where NUMA balancing really
//! migrates pages and fentry and kprobes work.
//!
//! The guests run the integration-test executables the host tests ran (with the host's shared
//! libraries) from an initramfs whose /init runs each binary and prints `vm-test: END <name> rc=<n>`; the host
//! reads the serial console and prints a table. A guest that panics, hangs or stops early
//! fails the run.
//!
//! Modules, none of which imports another: `build` (the static binaries and test executables),
//! `guest` (the tests' initramfs and boot, on numatrace-lab's machine: what `numatrace lab`
//! boots), `report` (the console read back, the results table); the kernel lines and their
//! cache are numatrace-lab's `kernels`. This file runs them in order.

mod build;
mod guest;
mod report;

use std::{fs, time::Instant};

use anyhow::{Context as _, Result, bail};

pub use self::guest::{
    INIT_SETUP, Line, Tcg, boot_for, pack_root, parse_filter, tcg_text_patch_flake,
};
use self::{
    build::build_guest_binaries,
    guest::{boot, pack_initramfs},
    report::{compare_facts, guest_captures, host_report, parse_console, print_table},
};
pub use numatrace_lab::{
    kernels::{GuestKernel, KERNELS},
    shared_libraries,
};

/// A kernel line's image, fetched once into the cache: (package, image).
pub fn kernel_image(k: &GuestKernel) -> Result<(String, std::path::PathBuf)> {
    let files = numatrace_lab::kernels::kernel_image(k, false, &|s| eprintln!("xtask: {s}"))?;
    Ok((files.package, files.image))
}
use crate::setup::{Tools, ensure_packages, workspace_root};
use numatrace_lab::arch::Arch;

/// The arm64 line `cargo xtask test` boots (every arm64 line: `vm-test --arch arm64`).
pub const ARM64_DEFAULT_LINE: &str = "6.12";

/// The kernel line whose guest also runs the tests that need 2 nodes but nothing of a line.
const PRIMARY_LINE: &str = "6.12";

/// Of [`HOST_ONLY`], what another architecture's guests run all the same: cgroup attribution
/// is checked against memory.stat on every architecture the package is built for.
const CROSS_ALSO: &[&str] = &["cgroup"];

/// Test binaries the guests do not run: nothing in them depends on the kernel line (the host
/// runs them; every guest runs the same rest).
const HOST_ONLY: &[(&str, &str)] = &[
    ("cgroup", "cgroup attribution, the same on every kernel"),
    ("deploy", "files and promtool"),
    (
        "lifecycle",
        "exit paths of the tracepoint programs, kernel-independent",
    ),
    ("privileges", "command-line errors"),
    ("layers", "reads the sources: no kernel involved"),
    (
        "program_size",
        "the eBPF object's instruction counts against the committed baseline",
    ),
    (
        "escape",
        "escaping of what processes name themselves: the same on every kernel",
    ),
    (
        "untrusted_capture",
        "hostile capture files read by report: no kernel involved",
    ),
    (
        "safety",
        "files, scratch space and users of traced commands: the same on every kernel",
    ),
    (
        "sudo_boundary",
        "what an invoker of sudo numatrace can make root do: the same on every kernel",
    ),
    (
        "reliability",
        "ends by signal and panic, hostile mounts: checked in the host kernel's BPF object lists",
    ),
    (
        "lab",
        "boots QEMU guests of its own, from the host (the guests have no QEMU)",
    ),
    (
        "html",
        "renders pages in the host's Chromium; vm-test draws each guest capture's page",
    ),
    (
        "scan_share",
        "the sampling fallback, never used where task_numa_work is hooked",
    ),
];

/// What to run: kernel lines and test binaries (empty: all), a test-name filter, and how many
/// times the check tests repeat each check on every line (`None`: each line's own count).
/// `cargo xtask vm-test`'s options: which lines and tests (none: all; what `test` runs).
#[derive(clap::Args, Default)]
pub struct Selection {
    /// Only these kernel lines (e.g. `--kernels 5.10,7.x`).
    #[arg(long, value_delimiter = ',')]
    pub kernels: Vec<String>,
    /// Only these test binaries (e.g. `--only probes,numa_guest`).
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// Only the tests whose name contains this (passed to each test binary, e.g.
    /// `--filter check_002`).
    #[arg(long, value_parser = parse_filter)]
    pub filter: Option<String>,
    /// The guests' architecture: amd64 (the default: 5.10, 6.1, 6.8, 6.12, 7.x) or arm64
    /// (6.1, 6.12, 7.x in QEMU's `virt` machine, two nodes, numatrace and its tests built
    /// static for aarch64).
    #[arg(long, default_value = "amd64", value_parser = crate::cmd::parse_arch)]
    pub arch: numatrace_lab::arch::Arch,
    /// Run each seed's check this many times (`numatrace check --repeat N`) in the check
    /// tests on every line, which then assert that the verdicts agree (default: 2 on 6.12
    /// and 7.x, once elsewhere).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=20))]
    pub check_repeat: Option<u32>,
}

pub fn run(tools: &Tools, sel: &Selection) -> Result<()> {
    let Selection {
        kernels,
        only,
        filter,
        check_repeat,
        arch,
    } = sel;
    let arch = *arch;
    let lines = numatrace_lab::kernels::lines(arch);
    let (kernels, only, filter, check_repeat) =
        (&kernels[..], &only[..], filter.as_deref(), *check_repeat);
    if let Some(k) = kernels
        .iter()
        .find(|k| !lines.iter().any(|g| g.label == k.as_str()))
    {
        let labels: Vec<&str> = lines.iter().map(|g| g.label).collect();
        bail!(
            "--kernels: no {arch} kernel line {k} (lines: {})",
            labels.join(", ")
        );
    }
    if !crate::process::is_root() {
        eprintln!(
            "SKIPPED vm-test: needs root (apt-get install of qemu-system-x86, busybox-static, curl; \
             download of the guest kernels); CI runs it as root"
        );
        return Ok(());
    }
    ensure_packages(&[arch.qemu().1, "busybox-static", "curl", "xz-utils"])?;
    let cross = arch != Arch::host();
    let host_only: Vec<&str> = HOST_ONLY
        .iter()
        .map(|(h, _)| *h)
        .filter(|h| !(cross && CROSS_ALSO.contains(h)))
        .collect();
    let mut built = build_guest_binaries(tools, arch, &host_only)?;
    // Another architecture's guests also run what the host run covers for its own: the host
    // cannot run those binaries.
    built
        .tests
        .retain(|name, _| !host_only.contains(&name.as_str()));
    // The host reads the guests' captures back with its own build.
    let host_numatrace = if cross {
        // The guests run numatrace and numatrace-workload as unpacked from the package: what an
        // arm64 user installs (the tests themselves are the same static build's). Packaging
        // builds the host's release binaries too (its man pages come from them).
        let dir = built.bins["numatrace"]
            .parent()
            .context("the binaries' directory")?
            .to_path_buf();
        let deb = crate::deb::build_from(tools, arch, Some(&dir), crate::deb::HostBuild::Tested)?;
        built.bins = crate::deb::unpacked_binaries(&deb, arch)?;
        workspace_root().join("target/release/numatrace")
    } else {
        built.bins["numatrace"].clone()
    };
    if !only.is_empty() {
        built.tests.retain(|name, _| only.contains(name));
        if built.tests.is_empty() {
            bail!("--only matches no test binary");
        }
    }
    let out = match arch {
        Arch::Amd64 => workspace_root().join("target/vm-test"),
        _ => workspace_root().join(format!("target/vm-test-{arch}")),
    };
    fs::create_dir_all(&out)?;
    let initrd = out.join("initramfs.cpio.gz");
    let busybox = numatrace_lab::kernels::busybox(arch, &|s| eprintln!("xtask: {s}"))?;
    pack_initramfs(&built, filter, &busybox, &initrd)?;
    let machine =
        numatrace_lab::machine::Machine::harness_for(arch, numatrace_lab::machine::Accel::Tcg);

    let mut rows = Vec::new();
    let mut panics = Vec::new();
    let mut ok = true;
    for k in lines
        .iter()
        .filter(|k| kernels.is_empty() || kernels.iter().any(|l| l == k.label))
    {
        let (pkg, vmlinuz) = kernel_image(k)?;
        eprintln!(
            "xtask: booting {pkg} in a TCG guest ({})",
            if machine.slow_mib.is_some() {
                "2 nodes and a slow CPU-less one"
            } else {
                "2 nodes"
            }
        );
        let skip: Vec<&str> = k.skip.iter().map(|(t, _)| *t).collect();
        let log_path = out.join(format!("{}.log", k.label));
        let line = Line {
            arch,
            primary: k.label == PRIMARY_LINE,
            check_repeat: check_repeat.unwrap_or(k.check_repeat),
        };
        let mut booted = Instant::now();
        let mut log = boot(&vmlinuz, &initrd, &skip, &log_path, Tcg::Multi, line)?;
        let mut r = parse_console(&log);
        if !r.done && tcg_text_patch_flake(&log) {
            // Not numatrace: see `tcg_text_patch_flake`. Once, loudly; a second crash fails.
            let first = log_path.with_extension("crash.log");
            fs::rename(&log_path, &first)?;
            eprintln!(
                "xtask: the {} guest hit QEMU TCG's int3 text-patching fault (log: {}); booting it \
                 once more, with single-threaded TCG (coherent self-modifying code, slower)",
                k.label,
                first.display()
            );
            rows.push((
                k.label,
                "(guest)".into(),
                format!(
                    "retried once, single-threaded TCG: int3 Oops during kernel text patching, see {}",
                    first.display()
                ),
            ));
            booted = Instant::now();
            log = boot(&vmlinuz, &initrd, &skip, &log_path, Tcg::Single, line)?;
            r = parse_console(&log);
        }
        let guest_secs = booted.elapsed().as_secs();
        for name in built.tests.keys() {
            if let Some((_, why)) = k.skip.iter().find(|(t, _)| t == name) {
                rows.push((k.label, name.clone(), format!("not run here: {why}")));
                continue;
            }
            let secs = r
                .secs
                .get(name)
                .map_or_else(String::new, |s| format!(" in {s} s"));
            let verdict = match r.binaries.get(name) {
                Some((0, p, f, s)) => format!("pass ({p} ok, {f} failed, {s} skipped){secs}"),
                Some((rc, p, f, s)) => {
                    ok = false;
                    if let Some(lines) = r.panics.get(name) {
                        panics.push((k.label, name.clone(), lines.clone()));
                    }
                    format!("FAIL rc={rc} ({p} ok, {f} failed, {s} skipped){secs}")
                }
                None => {
                    ok = false;
                    "FAIL (did not run: guest crashed or hung)".to_owned()
                }
            };
            rows.push((k.label, name.clone(), verdict));
        }
        let captures = guest_captures(&log);
        for (name, bytes) in &captures {
            let file = out.join(format!("{}-{name}", k.label));
            fs::write(&file, bytes)?;
            if name == "facts.json" {
                let fixture = match arch {
                    Arch::Amd64 => k.label.to_owned(),
                    _ => format!("{arch}-{}", k.label),
                };
                rows.push((
                    k.label,
                    "kernel facts".into(),
                    compare_facts(&fixture, &file),
                ));
                continue;
            }
            let verdict = host_report(&host_numatrace, &file).unwrap_or_else(|e| {
                ok = false;
                format!("FAIL: {e:#} ({})", file.display())
            });
            rows.push((k.label, format!("capture {name}"), verdict));
        }
        let capture_test = "a_capture_in_a_two_node_guest_shows_migrations_and_node_flows";
        if !captures.iter().any(|(n, _)| n.ends_with(".ntrace"))
            && filter.is_none()
            && r.binaries.get("record").is_some_and(|b| b.0 == 0)
            && !log.contains(&format!("SKIPPED {capture_test}"))
        {
            ok = false;
            rows.push((
                k.label,
                "capture".into(),
                "FAIL: the record test printed no capture".into(),
            ));
        }
        if !r.done {
            ok = false;
            rows.push((k.label, "(guest)".into(), "FAIL: no clean power-off".into()));
        }
        rows.push((
            k.label,
            "(guest)".into(),
            format!("{guest_secs} s from boot to power-off"),
        ));
        // Two nodes with CPUs and, on amd64, the slow, CPU-less third (Machine::topology).
        if r.nodes.as_deref().map(str::trim) != Some(machine.node_count().to_string().as_str()) {
            ok = false;
            rows.push((
                k.label,
                "(guest)".into(),
                format!("FAIL: nodes = {:?}", r.nodes),
            ));
        }
    }
    for (name, why) in HOST_ONLY {
        if !(cross && CROSS_ALSO.contains(name)) {
            rows.push(("all", (*name).into(), format!("host only: {why}")));
        }
    }
    print_table(&rows, &panics);
    if !ok {
        bail!("vm-test failed (console logs in {})", out.display());
    }
    Ok(())
}
