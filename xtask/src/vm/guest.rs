//! A test guest: its initramfs (busybox, the binaries, /init) and its boot in the lab's QEMU
//! machine (numatrace-lab: what `numatrace lab` boots) with two nodes and a slower, CPU-less
//! third one, whose serial console is returned.

use std::{
    fs,
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::Result;
use numatrace_lab::{
    initramfs::Initramfs,
    machine::{Accel, Boot, Machine, Outcome},
};

use super::build::GuestBinaries;

/// A guest that has not powered off by then has hung.
const GUEST_TIMEOUT: Duration = Duration::from_secs(20 * 60);

/// The start of every guest's /init: busybox, the kernel filesystems a distribution mounts,
/// loopback up (`serve` is scraped on 127.0.0.1).
pub const INIT_SETUP: &str = r#"#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev 2>/dev/null
mount -t tmpfs tmp /tmp
mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null
mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null
mount -t cgroup2 cgroup2 /sys/fs/cgroup 2>/dev/null
ip link set lo up 2>/dev/null || ifconfig lo 127.0.0.1 up
"#;

/// The rest of the test guests' /init (after [`INIT_SETUP`]).
const INIT: &str = r#"
export PATH=/bin:/numatrace/bin HOME=/tmp TMPDIR=/tmp RUST_BACKTRACE=1
export NUMATRACE_BIN=/numatrace/bin/numatrace NUMATRACE_WORKLOAD_BIN=/numatrace/bin/numatrace-workload
# Captures a test leaves here are printed (base64) for the host to read them back.
export NUMATRACE_CAPTURE_OUT=/tmp/captures
mkdir -p /tmp/captures
echo "vm-test: kernel $(uname -r), nodes: $(ls -d /sys/devices/system/node/node* | wc -l)"
numatrace probes
# What numatrace read about this kernel: the fixture its plan is unit-tested against.
numatrace probes --facts > /tmp/captures/facts.json
# One probes report for every test that only reads it (each load costs seconds under TCG), and
# the tests the host run covers (no path specific to a kernel line) skip, saying so.
numatrace probes --json > /tmp/probes.json
export NUMATRACE_PROBES_JSON=/tmp/probes.json NUMATRACE_IN_GUEST=1
# Tests that need 2 nodes but nothing of a kernel line run on the primary line only.
grep -q 'numatrace.primary=1' /proc/cmdline && export NUMATRACE_PRIMARY_LINE=1
# How many times the check tests repeat each seed's check (numatrace check --repeat).
export NUMATRACE_CHECK_REPEAT=$(sed -n 's/.*numatrace\.check_repeat=\([0-9]*\).*/\1/p' /proc/cmdline)
skip=$(sed -n 's/.*numatrace\.skip=\([^ ]*\).*/\1/p' /proc/cmdline | tr , ' ')
for t in /numatrace/tests/*; do
  name=$(basename "$t")
  case " $skip " in *" $name "*) echo "vm-test: SKIP $name"; continue;; esac
  echo "vm-test: BEGIN $name"
  began=$(cut -d. -f1 /proc/uptime)
  "$t" --test-threads=1 --show-output __FILTER__
  rc=$?
  echo "vm-test: END $name rc=$rc secs=$(( $(cut -d. -f1 /proc/uptime) - began ))"
done
for f in /tmp/captures/*; do
  [ -e "$f" ] || continue
  echo "NUMATRACE-CAPTURE-BEGIN $(basename "$f")"
  base64 "$f"
  echo "NUMATRACE-CAPTURE-END"
done
echo "vm-test: DONE"
poweroff -f
"#;

/// A test-name filter goes into the guest's shell script: letters, digits, `_` and `:` only.
pub fn parse_filter(s: &str) -> Result<String, String> {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    {
        Ok(s.to_owned())
    } else {
        Err("a test name (letters, digits, _ and :)".into())
    }
}

pub fn pack_initramfs(
    built: &GuestBinaries,
    filter: Option<&str>,
    busybox: &Path,
    out: &Path,
) -> Result<()> {
    let mut files: Vec<(PathBuf, PathBuf)> = built
        .bins
        .iter()
        .map(|(name, exe)| (exe.clone(), Path::new("numatrace/bin").join(name)))
        .collect();
    files.extend(
        built
            .tests
            .iter()
            .map(|(name, exe)| (exe.clone(), Path::new("numatrace/tests").join(name))),
    );
    files.extend(built.libs.iter().cloned());
    pack_root_with(
        busybox,
        &files,
        &format!(
            "{INIT_SETUP}{}",
            INIT.replace("__FILTER__", filter.unwrap_or_default())
        ),
        out,
    )
}

/// A gzipped initramfs with the host's busybox, `files` (source, path inside) and `init` as
/// /init.
pub fn pack_root(files: &[(PathBuf, PathBuf)], init: &str, out: &Path) -> Result<()> {
    pack_root_with(Path::new("/bin/busybox"), files, init, out)
}

/// The same with `busybox` (another architecture's).
fn pack_root_with(
    busybox: &Path,
    files: &[(PathBuf, PathBuf)],
    init: &str,
    out: &Path,
) -> Result<()> {
    let mut root = Initramfs::new();
    for d in ["bin", "proc", "sys", "dev", "tmp"] {
        root.dir(d)?;
    }
    root.char_device("dev/console", 5, 1)?;
    root.file("bin/busybox", busybox)?;
    for (src, dest) in files {
        root.file(&dest.to_string_lossy(), src)?;
    }
    root.bytes("init", init.as_bytes(), 0o755)?;
    let _ = fs::remove_file(out);
    root.write(out)
}

pub use numatrace_lab::machine::tcg_text_patch_flake;

/// How QEMU runs the guest's vCPUs: one host thread each (the default, faster), or all on one
/// thread, where emulated cross-modifying code is coherent (the retry after a text-patch flake),
/// or with guest time counting instructions ([`Accel::Icount`]).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Tcg {
    Multi,
    Single,
    Icount(u8),
}

impl Tcg {
    fn accel(self) -> Accel {
        match self {
            Tcg::Multi => Accel::Tcg,
            Tcg::Single => Accel::TcgSingle,
            Tcg::Icount(s) => Accel::Icount(s),
        }
    }
}

pub fn boot(
    vmlinuz: &Path,
    initrd: &Path,
    skip: &[&str],
    log_path: &Path,
    tcg: Tcg,
    line: Line,
) -> Result<String> {
    // Each repetition of the checks adds about 2 minutes on the slowest line.
    let timeout = GUEST_TIMEOUT + Duration::from_secs(180) * line.check_repeat;
    boot_for(vmlinuz, initrd, skip, log_path, tcg, timeout, line)
}

/// What a test guest is told about its kernel line (on its command line).
#[derive(Clone, Copy, Default)]
pub struct Line {
    /// The guest's architecture (its machine and console).
    pub arch: numatrace_lab::arch::Arch,
    /// The line whose guest also runs the tests that need 2 nodes but nothing of a line.
    pub primary: bool,
    /// `check --repeat` for the check tests (0: the tests' default, once).
    pub check_repeat: u32,
}

pub fn boot_for(
    vmlinuz: &Path,
    initrd: &Path,
    skip: &[&str],
    log_path: &Path,
    tcg: Tcg,
    timeout: Duration,
    line: Line,
) -> Result<String> {
    let mut append = format!(
        "console={} quiet numa_balancing=enable panic=-1 oops=panic",
        line.arch.console()
    );
    if line.primary {
        append.push_str(" numatrace.primary=1");
    }
    if line.check_repeat > 0 {
        append.push_str(&format!(" numatrace.check_repeat={}", line.check_repeat));
    }
    if !skip.is_empty() {
        append.push_str(&format!(" numatrace.skip={}", skip.join(",")));
    }
    let booted = Machine::harness_for(line.arch, tcg.accel()).boot(
        &Boot {
            kernel: vmlinuz,
            initrd,
            append: &append,
            timeout,
            data: None,
            sign: None,
        },
        &mut |line| println!("  | {line}"),
    )?;
    match &booted.outcome {
        Outcome::TimedOut(t) => eprintln!("xtask: guest hung: killed after {t:?}"),
        Outcome::Failed(status) => eprintln!("xtask: qemu exited: {status}"),
        Outcome::Interrupted => anyhow::bail!("interrupted"),
        Outcome::Exited | Outcome::NoSign => {}
    }
    fs::write(log_path, &booted.console)?;
    Ok(booted.console)
}
