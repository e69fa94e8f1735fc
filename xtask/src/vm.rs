//! `cargo xtask vm-test`: the real-kernel tests inside 2-node QEMU guests (TCG), one per kernel
//! line a user runs — Debian 11 (5.10), 12 (6.1), 13 (6.12), 13's backports (7.x) and Ubuntu
//! 24.04's release kernel 6.8.0-31 (which predates seed 002) — where NUMA balancing really
//! migrates pages and fentry and kprobes work.
//!
//! The guests run the same integration-test binaries as the host (static, musl) from an
//! initramfs whose /init runs each binary and prints `vm-test: END <name> rc=<n>`; the host
//! reads the serial console and prints a table. A guest that panics, hangs or stops early
//! fails the run.

use std::{
    collections::BTreeMap,
    fs,
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};

use crate::{
    process::{check, output},
    setup::{Tools, cache_dir, workspace_root},
};

pub const MUSL: &str = "x86_64-unknown-linux-musl";
/// The kernel line whose guest also runs the tests that need 2 nodes but nothing of a line.
const PRIMARY_LINE: &str = "6.12";

/// A guest that has not powered off by then has hung.
const GUEST_TIMEOUT: Duration = Duration::from_secs(20 * 60);

pub struct GuestKernel {
    pub label: &'static str,
    source: KernelSource,
    /// Test binaries not run on this kernel, with why.
    skip: &'static [(&'static str, &'static str)],
}

enum KernelSource {
    /// The newest package named `prefix` + version + `suffix` in these suites' package indexes
    /// on the machine's own Debian mirror (archive `debian` or `debian-security`): no apt source
    /// is added, nothing is installed.
    Index {
        suites: &'static [(&'static str, &'static str)],
        prefix: &'static str,
        suffix: &'static str,
    },
    /// A fixed .deb (its file name is the cache key), checked against its SHA-256.
    Url {
        url: &'static str,
        sha256: &'static str,
    },
}

/// One boot per kernel line a user runs: Debian 11, 12, 13, 13's backports, Ubuntu 24.04.
/// Test binaries the guests do not run: nothing in them depends on the kernel line (the host
/// runs them; every guest runs the same rest).
const HOST_ONLY: &[(&str, &str)] = &[
    ("cgroup", "cgroup attribution, the same on every kernel"),
    ("deploy", "files and promtool"),
    (
        "engine",
        "snapshot seam; its map/kernel_seen check is numa_guest's",
    ),
    (
        "lifecycle",
        "exit paths of the tracepoint programs, kernel-independent",
    ),
    ("privileges", "command-line errors"),
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
        "reliability",
        "ends by signal and panic, hostile mounts: checked in the host kernel's BPF object lists",
    ),
    (
        "scan_share",
        "the sampling fallback, never used where task_numa_work is hooked",
    ),
];

pub const KERNELS: [GuestKernel; 5] = [
    GuestKernel {
        label: "5.10",
        source: KernelSource::Index {
            suites: &[
                ("debian", "bullseye"),
                ("debian-security", "bullseye-security"),
            ],
            prefix: "linux-image-5.10.0-",
            suffix: "-cloud-amd64-unsigned",
        },
        skip: &[],
    },
    GuestKernel {
        label: "6.1",
        source: KernelSource::Index {
            suites: &[
                ("debian", "bookworm"),
                ("debian-security", "bookworm-security"),
            ],
            prefix: "linux-image-6.1.0-",
            suffix: "-cloud-amd64-unsigned",
        },
        skip: &[],
    },
    // Ubuntu 24.04's release pocket never changes: 6.8 as released, without the later
    // backport of seed 002 (6.8.0-1xx carry it), so the guest where 002 behaves unpatched.
    GuestKernel {
        label: "6.8",
        source: KernelSource::Url {
            url: "http://archive.ubuntu.com/ubuntu/pool/main/l/linux/\
                  linux-image-unsigned-6.8.0-31-generic_6.8.0-31.31_amd64.deb",
            sha256: "35115ceb5ddc1e73034a73d6b064b9c6d38c534f20279fd7229c510515b931d8",
        },
        skip: &[],
    },
    GuestKernel {
        label: "6.12",
        source: KernelSource::Index {
            suites: &[("debian", "trixie"), ("debian-security", "trixie-security")],
            prefix: "linux-image-6.12.",
            suffix: "+deb13-cloud-amd64-unsigned",
        },
        skip: &[],
    },
    // From Debian 13 the image package is a meta package: the kernel is in linux-binary-*.
    GuestKernel {
        label: "7.x",
        source: KernelSource::Index {
            suites: &[("debian", "trixie-backports")],
            prefix: "linux-binary-7.",
            suffix: "+deb13-cloud-amd64",
        },
        skip: &[],
    },
];

fn dpkg_installed(pkg: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", pkg])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
}

fn apt_update() -> Result<()> {
    check(Command::new("apt-get").args(["update", "-qq"]))
}

/// Installs Debian packages that are missing (needs root).
pub fn ensure_packages(pkgs: &[&str]) -> Result<()> {
    let missing: Vec<&str> = pkgs
        .iter()
        .copied()
        .filter(|p| !dpkg_installed(p))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    eprintln!("xtask: apt-get install {}", missing.join(" "));
    apt_update()?;
    check(
        Command::new("apt-get")
            .args(["install", "-y", "-qq", "--no-install-recommends"])
            .args(&missing)
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )
}

/// The host of the Debian mirror the machine's apt sources use (`deb.debian.org` if none).
fn debian_mirror() -> String {
    for f in [
        "/etc/apt/sources.list.d/debian.sources",
        "/etc/apt/sources.list",
    ] {
        let Ok(text) = fs::read_to_string(f) else {
            continue;
        };
        let uri = text.lines().find_map(|l| {
            let l = l.trim();
            l.strip_prefix("URIs:")
                .map(|u| u.trim().to_owned())
                .or_else(|| {
                    l.strip_prefix("deb ")
                        .and_then(|r| r.split_whitespace().find(|w| w.contains("://")))
                        .map(str::to_owned)
                })
                .filter(|u| !u.contains("security") && !u.starts_with('#'))
        });
        // `http://host/debian` -> `http://host`: the security archive sits beside it.
        if let Some(uri) = uri {
            let uri = uri.trim_end_matches('/');
            return uri.rsplit_once('/').map_or(uri, |(h, _)| h).to_owned();
        }
    }
    "http://deb.debian.org".to_owned()
}

/// A package in an index: its name, Debian version and path on the mirror.
#[derive(Debug, PartialEq)]
struct IndexEntry {
    name: String,
    version: String,
    filename: String,
}

/// The entries of a `Packages` index whose name is `prefix` + a version + `suffix`, where the
/// version part starts with a digit (so `linux-binary-7.` skips `linux-binary-unsigned-…`).
fn index_matches(index: &str, prefix: &str, suffix: &str) -> Vec<IndexEntry> {
    let mut out = Vec::new();
    for stanza in index.split("\n\n") {
        let field = |f: &str| {
            stanza
                .lines()
                .find_map(|l| l.strip_prefix(f).map(|v| v.trim().to_owned()))
        };
        let (Some(name), Some(version), Some(filename)) =
            (field("Package:"), field("Version:"), field("Filename:"))
        else {
            continue;
        };
        let middle = name
            .strip_prefix(prefix)
            .and_then(|r| r.strip_suffix(suffix));
        if middle.is_some_and(|m| {
            !m.is_empty()
                && m.chars().all(|c| c.is_ascii_digit() || c == '.')
                && m.starts_with(|c: char| c.is_ascii_digit())
        }) {
            out.push(IndexEntry {
                name,
                version,
                filename,
            });
        }
    }
    out
}

/// Orders Debian versions by their numbers (`5.10.223-1` < `5.10.240-1`, `7.2.12` < `7.3.4`):
/// enough for one kernel line, whose versions differ only in numbers.
fn version_key(v: &str) -> Vec<u64> {
    v.split(|c: char| !c.is_ascii_digit())
        .filter_map(|s| s.parse().ok())
        .collect()
}

/// A kernel line's packages across its suites, newest first, each with the archive URL to
/// fetch it from.
fn candidates_in_indexes(
    mirror: &str,
    suites: &[(&str, &str)],
    prefix: &str,
    suffix: &str,
) -> Result<Vec<(IndexEntry, String)>> {
    let mut all: Vec<(IndexEntry, String)> = Vec::new();
    for (archive, suite) in suites {
        let base = format!("{mirror}/{archive}");
        let url = format!("{base}/dists/{suite}/main/binary-amd64/Packages.xz");
        let out = Command::new("bash")
            .arg("-c")
            .arg(format!(
                "set -o pipefail; curl -fsSL --retry 3 '{url}' | xz -dc"
            ))
            .output()
            .context("curl | xz")?;
        if !out.status.success() {
            // A suite the mirror lacks is not fatal while another has the line.
            eprintln!("xtask: {url}: not readable, skipped");
            continue;
        }
        let index = String::from_utf8_lossy(&out.stdout);
        all.extend(
            index_matches(&index, prefix, suffix)
                .into_iter()
                .map(|e| (e, base.clone())),
        );
    }
    all.sort_by_key(|(e, _)| std::cmp::Reverse(version_key(&e.version)));
    if all.is_empty() {
        bail!("no package {prefix}*{suffix} in {suites:?} on {mirror}");
    }
    Ok(all)
}

/// Downloads `url` into `dir`, checking its SHA-256 when one is pinned.
fn download_deb(url: &str, sha256: Option<&str>, dir: &Path) -> Result<()> {
    let name = url.rsplit('/').next().unwrap_or("kernel.deb");
    let deb = dir.join(name);
    check(
        Command::new("curl")
            .args(["-fsSL", "--retry", "3", "-o"])
            .arg(&deb)
            .arg(url),
    )?;
    if let Some(sha256) = sha256 {
        let sum = output(Command::new("sha256sum").arg(&deb))?;
        if sum.split_whitespace().next() != Some(sha256) {
            bail!("{name}: SHA-256 {sum} is not the pinned {sha256}");
        }
    }
    Ok(())
}

/// `vmlinuz-*` under `/boot` (up to Debian 12, Ubuntu) or `vmlinuz` under
/// `/usr/lib/modules/VERSION/` (from Debian 13).
fn find_vmlinuz(root: &Path) -> Option<PathBuf> {
    let in_boot = fs::read_dir(root.join("boot")).ok().and_then(|d| {
        d.filter_map(Result::ok).map(|e| e.path()).find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("vmlinuz-"))
        })
    });
    in_boot.or_else(|| {
        fs::read_dir(root.join("usr/lib/modules"))
            .ok()?
            .filter_map(Result::ok)
            .map(|e| e.path().join("vmlinuz"))
            .find(|p| p.exists())
    })
}

/// The kernel image of `k`, downloaded once into the cache (keyed by package name). From a
/// package index, the newest package whose file the mirror serves (an index can name a file
/// its pool no longer has, as bullseye-security does for 5.10).
pub fn kernel_image(k: &GuestKernel) -> Result<(String, PathBuf)> {
    let candidates: Vec<(String, String, Option<&str>)> = match &k.source {
        KernelSource::Index {
            suites,
            prefix,
            suffix,
        } => candidates_in_indexes(&debian_mirror(), suites, prefix, suffix)?
            .into_iter()
            .map(|(e, base)| (e.name, format!("{base}/{}", e.filename), None))
            .collect(),
        KernelSource::Url { url, sha256 } => vec![(
            url.rsplit('/')
                .next()
                .and_then(|f| f.strip_suffix(".deb"))
                .unwrap_or(k.label)
                .to_owned(),
            (*url).to_owned(),
            Some(*sha256),
        )],
    };
    let mut last_err = None;
    for (pkg, url, sha256) in candidates {
        let dir = cache_dir().join("kernels").join(&pkg);
        let vmlinuz = dir.join("vmlinuz");
        if vmlinuz.exists() {
            return Ok((pkg, vmlinuz));
        }
        // A file the mirror did not serve is not asked for again on every run.
        let missing = cache_dir().join("kernels").join(format!("{pkg}.missing"));
        if missing.exists() {
            continue;
        }
        match download_kernel(&pkg, &url, sha256, &vmlinuz) {
            Ok(()) => return Ok((pkg, vmlinuz)),
            Err(e) => {
                eprintln!("xtask: {pkg}: {e:#}; trying the next older package");
                let _ = fs::write(&missing, format!("{url}: {e:#}\n"));
                last_err = Some(e);
            }
        }
    }
    Err(last_err.unwrap_or_else(|| anyhow::anyhow!("no kernel package for {}", k.label)))
}

/// Downloads one kernel package and keeps only its image, at `vmlinuz`.
fn download_kernel(pkg: &str, url: &str, sha256: Option<&str>, vmlinuz: &Path) -> Result<()> {
    let dir = vmlinuz.parent().context("cache path")?;
    eprintln!("xtask: downloading {pkg} ({url})");
    let tmp = dir.with_file_name(format!("{pkg}.partial"));
    let _ = fs::remove_dir_all(&tmp);
    fs::create_dir_all(&tmp)?;
    let result = (|| {
        download_deb(url, sha256, &tmp)?;
        let deb = fs::read_dir(&tmp)?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|e| e == "deb"))
            .context("the download left no .deb")?;
        check(
            Command::new("dpkg-deb")
                .arg("-x")
                .arg(&deb)
                .arg(tmp.join("x")),
        )?;
        let image = find_vmlinuz(&tmp.join("x")).context("no vmlinuz in the package")?;
        fs::create_dir_all(dir)?;
        fs::copy(&image, vmlinuz)?;
        Ok(())
    })();
    let _ = fs::remove_dir_all(&tmp);
    result
}

fn ensure_musl_target(tools: &Tools) -> Result<()> {
    let installed = output(Command::new("rustup").args([
        "target",
        "list",
        "--installed",
        "--toolchain",
        &tools.pins.stable,
    ]))?;
    if installed.lines().any(|l| l.trim() == MUSL) {
        return Ok(());
    }
    check(Command::new("rustup").args(["target", "add", MUSL, "--toolchain", &tools.pins.stable]))
}

/// Builds static numatrace and numatrace-workload at target/x86_64-unknown-linux-musl/release/.
pub fn build_static(tools: &Tools) -> Result<PathBuf> {
    ensure_musl_target(tools)?;
    ensure_musl_gcc()?;
    check(
        tools
            .cargo(&tools.pins.stable)
            .args([
                "build",
                "--release",
                "--target",
                MUSL,
                "--package",
                "numatrace",
                "--bins",
            ])
            .env(MUSL_CC_VAR, "musl-gcc"),
    )?;
    let dir = workspace_root().join("target").join(MUSL).join("release");
    eprintln!("xtask: built {}", dir.join("numatrace").display());
    Ok(dir)
}

/// The C compiler for the musl target (zstd's C library is built with it).
const MUSL_CC_VAR: &str = "CC_x86_64_unknown_linux_musl";

/// `musl-gcc` (Debian's musl-tools): installed as root, else a clear error.
fn ensure_musl_gcc() -> Result<()> {
    if Command::new("musl-gcc").arg("--version").output().is_ok() {
        return Ok(());
    }
    if !crate::process::is_root() {
        bail!(
            "static builds compile zstd's C library with musl-gcc: install Debian's musl-tools \
             (as root: apt-get install musl-tools), or run this step as root"
        );
    }
    ensure_packages(&["musl-tools"])
}

/// Static integration-test executables, by test name.
fn build_static_tests(tools: &Tools) -> Result<BTreeMap<String, PathBuf>> {
    let out = output(
        tools
            .cargo(&tools.pins.stable)
            .args([
                "test",
                "--release",
                "--target",
                MUSL,
                "--package",
                "numatrace",
                "--tests",
                "--no-run",
                "--message-format=json",
            ])
            .env(MUSL_CC_VAR, "musl-gcc"),
    )?;
    let mut tests = BTreeMap::new();
    for line in out.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let is_test = v["profile"]["test"].as_bool() == Some(true);
        let kind = &v["target"]["kind"][0];
        if is_test && kind == "test" {
            if let (Some(name), Some(exe)) =
                (v["target"]["name"].as_str(), v["executable"].as_str())
            {
                tests.insert(name.to_owned(), PathBuf::from(exe));
            }
        }
    }
    if tests.is_empty() {
        bail!("no integration-test executables were built");
    }
    Ok(tests)
}

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

fn pack_initramfs(
    bins: &Path,
    tests: &BTreeMap<String, PathBuf>,
    filter: Option<&str>,
    out: &Path,
) -> Result<()> {
    let mut files: Vec<(PathBuf, PathBuf)> = ["numatrace", "numatrace-workload"]
        .iter()
        .map(|b| (bins.join(b), Path::new("numatrace/bin").join(b)))
        .collect();
    files.extend(
        tests
            .iter()
            .map(|(name, exe)| (exe.clone(), Path::new("numatrace/tests").join(name))),
    );
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

/// What one guest run printed about each test binary.
#[derive(Default)]
struct GuestResult {
    /// Test binary -> (exit code, passed, failed, skipped).
    binaries: BTreeMap<String, (i32, u32, u32, u32)>,
    /// Test binary -> seconds it ran (guest uptime): where the CI time goes.
    secs: BTreeMap<String, u64>,
    done: bool,
    nodes: Option<String>,
}

fn parse_console(log: &str) -> GuestResult {
    let mut r = GuestResult::default();
    let mut current: Option<String> = None;
    let (mut passed, mut failed, mut skipped) = (0, 0, 0);
    for line in log.lines() {
        // Markers may follow terminal escapes on the same console line.
        let line = line.trim_end_matches('\r');
        let line = line.find("vm-test: ").map_or(line, |i| &line[i..]);
        if let Some(rest) = line.strip_prefix("vm-test: kernel ") {
            r.nodes = rest.split("nodes: ").nth(1).map(str::to_owned);
        } else if let Some(name) = line.strip_prefix("vm-test: BEGIN ") {
            current = Some(name.to_owned());
            (passed, failed, skipped) = (0, 0, 0);
        } else if let Some(rest) = line.strip_prefix("vm-test: END ") {
            let (name, rc) = rest.split_once(" rc=").unwrap_or((rest, "-1"));
            let (rc, secs) = rc.split_once(" secs=").unwrap_or((rc, ""));
            r.binaries.insert(
                name.to_owned(),
                (rc.trim().parse().unwrap_or(-1), passed, failed, skipped),
            );
            if let Ok(secs) = secs.trim().parse() {
                r.secs.insert(name.to_owned(), secs);
            }
            current = None;
        } else if line == "vm-test: DONE" {
            r.done = true;
        } else if current.is_some() {
            if line.starts_with("test ") && line.ends_with(" ... ok") {
                passed += 1;
            } else if line.starts_with("test ") && line.ends_with(" ... FAILED") {
                failed += 1;
            } else if line.contains("SKIPPED") {
                skipped += 1;
            }
        }
    }
    r
}

/// Captures a guest printed between `NUMATRACE-CAPTURE-BEGIN NAME` and `NUMATRACE-CAPTURE-END`
/// (the record test's, base64), by name.
fn guest_captures(log: &str) -> Vec<(String, Vec<u8>)> {
    use base64::Engine as _;
    let mut out = Vec::new();
    let mut current: Option<(String, String)> = None;
    for line in log.lines() {
        let line = line.trim_end_matches('\r');
        if let Some(name) = line.strip_prefix("NUMATRACE-CAPTURE-BEGIN ") {
            current = Some((name.trim().to_owned(), String::new()));
        } else if line == "NUMATRACE-CAPTURE-END" {
            if let Some((name, text)) = current.take() {
                // Undecodable (kernel messages interleaved on the console): empty, which the
                // host's report then names as the failure.
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(text)
                    .unwrap_or_else(|e| {
                        eprintln!("xtask: capture {name} on the console is not base64: {e}");
                        Vec::new()
                    });
                out.push((name, bytes));
            }
        } else if let Some((_, text)) = &mut current {
            text.push_str(line.trim());
        }
    }
    out
}

/// The committed fixture of a kernel line's facts (`probes --facts`), which `plan()`'s unit
/// tests read: a guest whose kernel no longer matches it in what the plan reads (a newer
/// package changed a signature or a field) is reported, with the command that refreshes it.
fn compare_facts(label: &str, fresh: &Path) -> String {
    let fixture = workspace_root()
        .join("numatrace/tests/fixtures/kernels")
        .join(format!("{label}.json"));
    let read = |p: &Path| -> Option<serde_json::Value> {
        serde_json::from_str(&fs::read_to_string(p).ok()?).ok()
    };
    let Some(new) = read(fresh) else {
        return format!("unreadable ({})", fresh.display());
    };
    // Addresses move with every boot (KASLR); the rest is the kernel build's.
    let key = |v: &serde_json::Value| {
        [
            "release",
            "btf_signatures",
            "btf_fields",
            "kallsyms",
            "fentry",
            "tracepoints",
            "preemption",
        ]
        .map(|k| v[k].clone())
    };
    match read(&fixture) {
        Some(old) if key(&old) == key(&new) => "same as the committed fixture".into(),
        Some(_) => format!(
            "DIFFERS from the committed fixture (new kernel package?): cp {} {}",
            fresh.display(),
            fixture.display()
        ),
        None => format!(
            "no fixture yet: cp {} {}",
            fresh.display(),
            fixture.display()
        ),
    }
}

/// Reads a guest's capture on the host with the host's numatrace, as a developer receiving a
/// bug report would: the summary must show migrations, node flows and the verdicts.
fn host_report(numatrace: &Path, capture: &Path) -> Result<String> {
    let out = output(
        Command::new(numatrace)
            .arg("report")
            .arg(capture)
            .arg("--json"),
    )?;
    let v: serde_json::Value = serde_json::from_str(&out).context("report JSON")?;
    let pages = v["stat"]["totals"]["hint_faults"]["migrated_pages"]
        .as_u64()
        .unwrap_or(0);
    let flows = v["stat"]["node_matrix"].as_array().map_or(0, Vec::len);
    let verdicts: Vec<String> = v["verdicts"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|x| {
                    format!(
                        "{} {}",
                        x["patch"].as_str().unwrap_or("?"),
                        x["verdict"].as_str().unwrap_or("?")
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    if pages == 0 || flows == 0 || verdicts.len() != 2 {
        bail!("{pages} pages migrated, {flows} node flows, verdicts {verdicts:?}");
    }
    Ok(format!(
        "pass (host report: {pages} pages migrated, {flows} node flows; {})",
        verdicts.join(", ")
    ))
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
/// thread, where emulated cross-modifying code is coherent (the retry after a text-patch flake).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Tcg {
    Multi,
    Single,
}

pub fn boot(
    vmlinuz: &Path,
    initrd: &Path,
    skip: &[&str],
    log_path: &Path,
    tcg: Tcg,
    primary: bool,
) -> Result<String> {
    boot_for(vmlinuz, initrd, skip, log_path, tcg, GUEST_TIMEOUT, primary)
}

pub fn boot_for(
    vmlinuz: &Path,
    initrd: &Path,
    skip: &[&str],
    log_path: &Path,
    tcg: Tcg,
    timeout: Duration,
    primary: bool,
) -> Result<String> {
    let mut append = "console=ttyS0 quiet numa_balancing=enable panic=-1 oops=panic".to_owned();
    if primary {
        append.push_str(" numatrace.primary=1");
    }
    if !skip.is_empty() {
        append.push_str(&format!(" numatrace.skip={}", skip.join(",")));
    }
    let mut child = Command::new("qemu-system-x86_64")
        .args([
            "-accel",
            match tcg {
                Tcg::Multi => "tcg,thread=multi",
                Tcg::Single => "tcg,thread=single",
            },
            "-cpu",
            "max",
            "-m",
            "2G",
            "-smp",
            "2",
        ])
        .args(["-object", "memory-backend-ram,id=m0,size=1G"])
        .args(["-object", "memory-backend-ram,id=m1,size=1G"])
        .args(["-numa", "node,nodeid=0,cpus=0,memdev=m0"])
        .args(["-numa", "node,nodeid=1,cpus=1,memdev=m1"])
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

pub fn run(tools: &Tools, kernels: &[String], only: &[String], filter: Option<&str>) -> Result<()> {
    if let Some(k) = kernels
        .iter()
        .find(|k| !KERNELS.iter().any(|g| g.label == k.as_str()))
    {
        let labels: Vec<&str> = KERNELS.iter().map(|g| g.label).collect();
        bail!(
            "--kernels: no kernel line {k} (lines: {})",
            labels.join(", ")
        );
    }
    if !crate::process::is_root() {
        eprintln!(
            "SKIPPED vm-test: needs root (apt-get install of qemu-system-x86, busybox-static, cpio, \
             curl; download of the guest kernels); CI runs it as root"
        );
        return Ok(());
    }
    ensure_packages(&["qemu-system-x86", "busybox-static", "cpio", "curl"])?;
    let bins = build_static(tools)?;
    let mut tests = build_static_tests(tools)?;
    tests.retain(|name, _| !HOST_ONLY.iter().any(|(h, _)| h == name));
    if !only.is_empty() {
        tests.retain(|name, _| only.contains(name));
        if tests.is_empty() {
            bail!("--only matches no test binary");
        }
    }
    let out = workspace_root().join("target/vm-test");
    fs::create_dir_all(&out)?;
    let initrd = out.join("initramfs.cpio.gz");
    pack_initramfs(&bins, &tests, filter, &initrd)?;

    let mut rows = Vec::new();
    let mut ok = true;
    for k in KERNELS
        .iter()
        .filter(|k| kernels.is_empty() || kernels.iter().any(|l| l == k.label))
    {
        let (pkg, vmlinuz) = kernel_image(k)?;
        eprintln!("xtask: booting {pkg} in a 2-node TCG guest");
        let skip: Vec<&str> = k.skip.iter().map(|(t, _)| *t).collect();
        let log_path = out.join(format!("{}.log", k.label));
        let primary = k.label == PRIMARY_LINE;
        let mut booted = Instant::now();
        let mut log = boot(&vmlinuz, &initrd, &skip, &log_path, Tcg::Multi, primary)?;
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
            log = boot(&vmlinuz, &initrd, &skip, &log_path, Tcg::Single, primary)?;
            r = parse_console(&log);
        }
        let guest_secs = booted.elapsed().as_secs();
        for name in tests.keys() {
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
                rows.push((
                    k.label,
                    "kernel facts".into(),
                    compare_facts(k.label, &file),
                ));
                continue;
            }
            let verdict = host_report(&bins.join("numatrace"), &file).unwrap_or_else(|e| {
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
        if r.nodes.as_deref().map(str::trim) != Some("2") {
            ok = false;
            rows.push((
                k.label,
                "(guest)".into(),
                format!("FAIL: nodes = {:?}", r.nodes),
            ));
        }
    }
    for (name, why) in HOST_ONLY {
        rows.push(("all", (*name).into(), format!("host only: {why}")));
    }
    println!("\nvm-test results:");
    println!("{:<7} {:<16} result", "kernel", "test");
    for (k, t, v) in &rows {
        println!("{k:<7} {t:<16} {v}");
    }
    if !ok {
        bail!("vm-test failed (console logs in {})", out.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_packages_are_found_in_an_index() {
        let index = "Package: linux-binary-unsigned-7.3.4+deb13-cloud-amd64\nVersion: 7.3.4-1\n\
                     Filename: pool/u.deb\n\n\
                     Package: linux-binary-7.2.12+deb13-cloud-amd64\nVersion: 7.2.12-1~bpo13+1\n\
                     Filename: pool/a.deb\n\n\
                     Package: linux-binary-7.3.4+deb13-cloud-amd64\nVersion: 7.3.4-1~bpo13+1\n\
                     Filename: pool/b.deb\n\n\
                     Package: linux-binary-7.3.4+deb13-cloud-amd64-dbg\nVersion: 7.3.4-1\n\
                     Filename: pool/c.deb\n";
        let m = index_matches(index, "linux-binary-7.", "+deb13-cloud-amd64");
        let names: Vec<&str> = m.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "linux-binary-7.2.12+deb13-cloud-amd64",
                "linux-binary-7.3.4+deb13-cloud-amd64"
            ]
        );
        assert!(version_key(&m[1].version) > version_key(&m[0].version));
        assert!(version_key("5.10.240-1") > version_key("5.10.223-1"));
        let old = "Package: linux-image-5.10.0-32-cloud-amd64-unsigned\nVersion: 5.10.223-1\n\
                   Filename: pool/k.deb\n";
        assert_eq!(
            index_matches(old, "linux-image-5.10.0-", "-cloud-amd64-unsigned")[0].filename,
            "pool/k.deb"
        );
    }

    #[test]
    fn captures_are_read_off_the_console() {
        let log = "x\nNUMATRACE-CAPTURE-BEGIN migrate\r\naGVs\nbG8=\r\nNUMATRACE-CAPTURE-END\ny\n";
        assert_eq!(
            guest_captures(log),
            vec![("migrate".to_owned(), b"hello".to_vec())]
        );
    }

    #[test]
    fn console_parsing() {
        let log = "noise\n\x1b[2Jvm-test: kernel 6.1.0, nodes: 2\r\nvm-test: BEGIN probes\n\
                   test a ... ok\nSKIPPED x: needs root\ntest b ... ok\ntest c ... FAILED\n\
                   vm-test: END probes rc=101\nvm-test: BEGIN lifecycle\nvm-test: END lifecycle rc=0 secs=12\n\
                   vm-test: DONE\n";
        let r = parse_console(log);
        assert!(r.done);
        assert_eq!(r.nodes.as_deref(), Some("2"));
        assert_eq!(r.binaries["probes"], (101, 2, 1, 1));
        assert_eq!(r.binaries["lifecycle"], (0, 0, 0, 0));
        assert_eq!(r.secs.get("lifecycle"), Some(&12));
        assert_eq!(r.secs.get("probes"), None);
    }

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
