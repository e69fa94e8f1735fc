//! A guest: its initramfs (busybox, the binaries, /init) and its boot in a QEMU TCG machine
//! with two nodes and a slower, CPU-less third one, whose serial console is returned.

use std::{
    fs,
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result};

use super::build::GuestBinaries;
use crate::process::check;

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

pub fn pack_initramfs(built: &GuestBinaries, filter: Option<&str>, out: &Path) -> Result<()> {
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
    pack_root(
        &files,
        &format!(
            "{INIT_SETUP}{}",
            INIT.replace("__FILTER__", filter.unwrap_or_default())
        ),
        out,
    )
}

/// A gzipped initramfs with busybox, `files` (source, path inside) and `init` as /init.
pub fn pack_root(files: &[(PathBuf, PathBuf)], init: &str, out: &Path) -> Result<()> {
    let root = out.with_extension("d");
    let _ = fs::remove_dir_all(&root);
    for d in ["bin", "proc", "sys", "dev", "tmp"] {
        fs::create_dir_all(root.join(d))?;
    }
    fs::copy("/bin/busybox", root.join("bin/busybox")).context("busybox-static")?;
    for (src, dest) in files {
        let to = root.join(dest);
        if let Some(dir) = to.parent() {
            fs::create_dir_all(dir)?;
        }
        fs::copy(src, &to).with_context(|| format!("copying {}", src.display()))?;
    }
    fs::write(root.join("init"), init)?;
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(root.join("init"), fs::Permissions::from_mode(0o755))?;
    check(
        Command::new("sh")
            .arg("-c")
            .arg(format!(
                "find . | cpio -o -H newc --quiet | gzip -1 > '{}'",
                out.display()
            ))
            .current_dir(&root),
    )?;
    let _ = fs::remove_dir_all(&root);
    Ok(())
}

/// The guest died of an `int3` Oops at a patched instruction: the kernel was live-patching its
/// text (static keys or ftrace, e.g. when a tracefs instance starts pid filtering) and a vCPU
/// executed a stale breakpoint after the patch had completed — a race of emulated
/// cross-modifying code under multi-threaded TCG, seen once in many runs on 6.12 while the
/// stat_skip_vma test set up its tracefs reference (6.12, and 6.8 with `__text_poke` on the
/// stack). A crash of any other kind is not retried. 6.12 prints `Oops: int3: 0000 [#1]`,
/// 6.8 `int3: 0000 [#1]`.
pub fn tcg_text_patch_flake(log: &str) -> bool {
    log.lines().any(|l| l.contains("int3: 0000 [#"))
}

/// How QEMU runs the guest's vCPUs: one host thread each (the default, faster), or all on one
/// thread, where emulated cross-modifying code is coherent (the retry after a text-patch flake),
/// or on one thread with guest time counting executed instructions (`-icount shift=N`: 2^N ns
/// per instruction, no sleeping, no alignment with the host clock), so that what the guest
/// measures in nanoseconds is a count of instructions and repeats from run to run.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Tcg {
    Multi,
    Single,
    Icount(u8),
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
    /// The line whose guest also runs the tests that need 2 nodes but nothing of a line.
    pub primary: bool,
    /// `check --repeat` for the check tests (0: the tests' default, once).
    pub check_repeat: u32,
}

/// Two nodes with a CPU and 1 GiB each, and a third, CPU-less node of 512 MiB that the ACPI
/// HMAT describes as slower (latency 4x, bandwidth 1/4 of local): kernels that place boot-time
/// nodes in memory tiers by HMAT (about 6.10+; 6.12 and 7.3 here, not 6.1 or 6.8) put it in a
/// tier of its own below nodes 0-1, which memory
/// tiering (`kernel.numa_balancing=2`) promotes from and demotion demotes to. Older kernels
/// see a plain third node, which nothing uses unless told to.
pub fn topology() -> Vec<String> {
    let mut a: Vec<String> = [
        "-machine",
        "hmat=on",
        "-object",
        "memory-backend-ram,id=m0,size=1G",
        "-object",
        "memory-backend-ram,id=m1,size=1G",
        "-object",
        "memory-backend-ram,id=m2,size=512M",
        "-numa",
        "node,nodeid=0,cpus=0,memdev=m0",
        "-numa",
        "node,nodeid=1,cpus=1,memdev=m1",
        "-numa",
        "node,nodeid=2,memdev=m2,initiator=0",
        "-numa",
        "dist,src=0,dst=1,val=20",
        "-numa",
        "dist,src=0,dst=2,val=30",
        "-numa",
        "dist,src=1,dst=2,val=30",
    ]
    .map(String::from)
    .to_vec();
    for initiator in 0..2 {
        for target in 0..3 {
            let (latency, bandwidth) = match (initiator == target, target) {
                (true, _) => (10, "8G"),
                (false, 2) => (40, "2G"),
                (false, _) => (20, "4G"),
            };
            a.push("-numa".into());
            a.push(format!(
                "hmat-lb,initiator={initiator},target={target},hierarchy=memory,\
                 data-type=access-latency,latency={latency}"
            ));
            a.push("-numa".into());
            a.push(format!(
                "hmat-lb,initiator={initiator},target={target},hierarchy=memory,\
                 data-type=access-bandwidth,bandwidth={bandwidth}"
            ));
        }
    }
    a
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
    let mut append = "console=ttyS0 quiet numa_balancing=enable panic=-1 oops=panic".to_owned();
    if line.primary {
        append.push_str(" numatrace.primary=1");
    }
    if line.check_repeat > 0 {
        append.push_str(&format!(" numatrace.check_repeat={}", line.check_repeat));
    }
    if !skip.is_empty() {
        append.push_str(&format!(" numatrace.skip={}", skip.join(",")));
    }
    let mut qemu = Command::new("qemu-system-x86_64");
    if let Tcg::Icount(shift) = tcg {
        qemu.args(["-icount", &format!("shift={shift},sleep=off,align=off")]);
    }
    let mut child = qemu
        .args([
            "-accel",
            match tcg {
                Tcg::Multi => "tcg,thread=multi",
                Tcg::Single | Tcg::Icount(_) => "tcg,thread=single",
            },
            "-cpu",
            "max",
            "-m",
            "2560M",
            "-smp",
            "2",
        ])
        .args(topology())
        .arg("-kernel")
        .arg(vmlinuz)
        .arg("-initrd")
        .arg(initrd)
        .args(["-nographic", "-no-reboot", "-serial", "mon:stdio"])
        .arg("-append")
        .arg(&append)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .context("starting qemu-system-x86_64")?;
    let stdout = child.stdout.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let mut log = String::new();
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            println!("  | {line}");
            log.push_str(&line);
            log.push('\n');
        }
        log
    });
    let start = Instant::now();
    loop {
        if child.try_wait()?.is_some() {
            break;
        }
        if start.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            eprintln!("xtask: guest hung: killed after {timeout:?}");
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let log = reader.join().unwrap_or_default();
    fs::write(log_path, &log)?;
    Ok(log)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_int3_text_patching_crash_is_retried() {
        let int3 = "test x ... [  240.88] Oops: int3: 0000 [#1] PREEMPT SMP NOPTI\n\
                    RIP: 0010:__schedule+0x339/0xbf0\nKernel panic - not syncing\n";
        assert!(tcg_text_patch_flake(int3));
        let int3_68 = "test x ... [  518.84] int3: 0000 [#1] PREEMPT SMP NOPTI\n\
                       RIP: 0010:ttwu_do_activate+0x12d/0x260\n";
        assert!(tcg_text_patch_flake(int3_68));
        let gp = "Oops: general protection fault, probably for non-canonical address\n\
                  Kernel panic - not syncing\n";
        assert!(!tcg_text_patch_flake(gp));
        assert!(!tcg_text_patch_flake("vm-test: DONE\n"));
    }
}
