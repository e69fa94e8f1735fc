//! The guests' kernels: one per kernel line a user runs, found in Debian's package indexes on
//! the machine's own mirror (or a pinned Ubuntu package), downloaded once and cached with the
//! config the package ships (`debian:6.12` in `numatrace lab`, the lines of `vm-test`).

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result, bail};

use crate::{arch::Arch, cache_dir, check, output};

pub struct GuestKernel {
    pub label: &'static str,
    pub arch: Arch,
    /// How a user names it in `numatrace lab --kernel` (`debian:6.12`).
    pub distro: &'static str,
    source: KernelSource,
    /// Test binaries not run on this kernel, with why.
    pub skip: &'static [(&'static str, &'static str)],
    /// How many times the guest's `check` tests run each seed's check (`check --repeat`): 2
    /// on the primary amd64 line (6.12), 1 elsewhere (3 on 6.12 and 7.x until the arm64 guest
    /// needed the CI time, then 2 on both until the suite had to come back under its hour:
    /// `vm-test --check-repeat 3` still does it on any line).
    pub check_repeat: u32,
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

/// The amd64 line labelled `label` (`6.12`), if there is one.
pub fn line(label: &str) -> Option<&'static GuestKernel> {
    line_of(Arch::Amd64, label)
}

/// The line of `arch` labelled `label`.
pub fn line_of(arch: Arch, label: &str) -> Option<&'static GuestKernel> {
    lines(arch).iter().find(|k| k.label == label)
}

/// The kernel lines of `arch`.
pub fn lines(arch: Arch) -> &'static [GuestKernel] {
    match arch {
        Arch::Amd64 => &KERNELS,
        Arch::Arm64 => &ARM64_KERNELS,
    }
}

/// One boot per kernel line a user runs: Debian 11, 12, 13, 13's backports, Ubuntu 24.04.
pub const KERNELS: [GuestKernel; 5] = [
    GuestKernel {
        arch: Arch::Amd64,
        label: "5.10",
        distro: "debian",
        check_repeat: 1,
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
        arch: Arch::Amd64,
        label: "6.1",
        distro: "debian",
        check_repeat: 1,
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
        arch: Arch::Amd64,
        label: "6.8",
        distro: "ubuntu",
        check_repeat: 1,
        source: KernelSource::Url {
            url: "http://archive.ubuntu.com/ubuntu/pool/main/l/linux/\
                  linux-image-unsigned-6.8.0-31-generic_6.8.0-31.31_amd64.deb",
            sha256: "35115ceb5ddc1e73034a73d6b064b9c6d38c534f20279fd7229c510515b931d8",
        },
        skip: &[],
    },
    GuestKernel {
        arch: Arch::Amd64,
        label: "6.12",
        distro: "debian",
        check_repeat: 2,
        source: KernelSource::Index {
            suites: &[("debian", "trixie"), ("debian-security", "trixie-security")],
            prefix: "linux-image-6.12.",
            suffix: "+deb13-cloud-amd64-unsigned",
        },
        skip: &[],
    },
    // From Debian 13 the image package is a meta package: the kernel is in linux-binary-*.
    GuestKernel {
        arch: Arch::Amd64,
        label: "7.x",
        distro: "debian",
        check_repeat: 1,
        source: KernelSource::Index {
            suites: &[("debian", "trixie-backports")],
            prefix: "linux-binary-7.",
            suffix: "+deb13-cloud-amd64",
        },
        skip: &[],
    },
];

/// arm64: Debian 12, 13 and 13's backports (cloud-arm64 flavour; Ubuntu's 6.8 and Debian 11's
/// 5.10 are amd64 lines only).
pub const ARM64_KERNELS: [GuestKernel; 3] = [
    GuestKernel {
        arch: Arch::Arm64,
        label: "6.1",
        distro: "debian",
        check_repeat: 1,
        source: KernelSource::Index {
            suites: &[
                ("debian", "bookworm"),
                ("debian-security", "bookworm-security"),
            ],
            prefix: "linux-image-6.1.0-",
            suffix: "-cloud-arm64-unsigned",
        },
        skip: &[],
    },
    GuestKernel {
        arch: Arch::Arm64,
        label: "6.12",
        distro: "debian",
        check_repeat: 1,
        source: KernelSource::Index {
            suites: &[("debian", "trixie"), ("debian-security", "trixie-security")],
            prefix: "linux-image-6.12.",
            suffix: "+deb13-cloud-arm64-unsigned",
        },
        skip: &[],
    },
    GuestKernel {
        arch: Arch::Arm64,
        label: "7.x",
        distro: "debian",
        check_repeat: 1,
        source: KernelSource::Index {
            suites: &[("debian", "trixie-backports")],
            prefix: "linux-binary-7.",
            suffix: "+deb13-cloud-arm64",
        },
        skip: &[],
    },
];

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
            if l.starts_with('#') {
                return None;
            }
            l.strip_prefix("URIs:")
                .map(|u| u.trim().to_owned())
                .or_else(|| {
                    l.strip_prefix("deb ")
                        .and_then(|r| r.split_whitespace().find(|w| w.contains("://")))
                        .map(str::to_owned)
                })
                // The Debian archive itself: not its security half, not a third party's.
                .filter(|u| !u.contains("security") && u.trim_end_matches('/').ends_with("/debian"))
        });
        // `http://host/debian` -> `http://host`: the security archive sits beside it.
        if let Some(uri) = uri {
            let uri = uri.trim_end_matches('/');
            return uri.rsplit_once('/').map_or(uri, |(h, _)| h).to_owned();
        }
    }
    "http://deb.debian.org".to_owned()
}

/// The mirror answered 404: its index names a file its pool no longer has.
#[derive(Debug, thiserror::Error)]
#[error("not served: {0}")]
struct NotServed(String);

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
        let field = |f: &str| stanza_field(stanza, f);
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

/// A field (`Filename:`) of one package's stanza in an index.
fn stanza_field(stanza: &str, field: &str) -> Option<String> {
    stanza
        .lines()
        .find_map(|l| l.strip_prefix(field).map(|v| v.trim().to_owned()))
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
    arch: Arch,
    mirror: &str,
    suites: &[(&str, &str)],
    prefix: &str,
    suffix: &str,
    say: &dyn Fn(&str),
) -> Result<Vec<(IndexEntry, String)>> {
    let mut all: Vec<(IndexEntry, String)> = Vec::new();
    for (archive, suite) in suites {
        let base = format!("{mirror}/{archive}");
        let url = index_url(&base, suite, arch);
        let Some(index) = read_index(&url)? else {
            // A suite the mirror lacks is not fatal while another has the line.
            say(&format!("{url}: not readable, skipped"));
            continue;
        };
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

/// A suite's `Packages.xz` for `arch` under an archive's base URL.
fn index_url(base: &str, suite: &str, arch: Arch) -> String {
    format!(
        "{base}/dists/{suite}/main/binary-{}/Packages.xz",
        arch.debian()
    )
}

/// A package index, decompressed; `None` when the mirror does not serve it.
fn read_index(url: &str) -> Result<Option<String>> {
    let out = Command::new("bash")
        .arg("-c")
        .arg("set -o pipefail; curl -fsSL --retry 3 \"$1\" | xz -dc")
        .arg("bash")
        .arg(url)
        .output()
        .context("curl | xz (Debian's curl and xz-utils)")?;
    Ok(out
        .status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned()))
}

/// Downloads the .deb at `url`, unpacks it (`dpkg-deb -x`) in the scratch directory
/// `DIR.partial`, lets `keep(unpacked, done)` copy what is cached into `done`, then puts `done`
/// in the place of `dir` whole (a partial download never looks cached); the scratch is removed
/// however it ends.
fn install_from_deb(
    url: &str,
    sha256: Option<&str>,
    dir: &Path,
    keep: impl FnOnce(&Path, &Path) -> Result<()>,
) -> Result<()> {
    let name = dir.file_name().context("a cache directory's name")?;
    let tmp = dir.with_file_name(format!("{}.partial", name.to_string_lossy()));
    let _ = fs::remove_dir_all(&tmp);
    fs::create_dir_all(&tmp)?;
    let result = (|| {
        download_deb(url, sha256, &tmp)?;
        let deb = fs::read_dir(&tmp)?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|e| e == "deb"))
            .context("the download left no .deb")?;
        let x = tmp.join("x");
        check(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&x))?;
        let done = tmp.join("done");
        fs::create_dir_all(&done)?;
        keep(&x, &done)?;
        let _ = fs::remove_dir_all(dir);
        if let Some(parent) = dir.parent() {
            fs::create_dir_all(parent)?;
        }
        fs::rename(&done, dir)?;
        Ok(())
    })();
    let _ = fs::remove_dir_all(&tmp);
    result
}

/// Downloads `url` into `dir`, checking its SHA-256 when one is pinned.
fn download_deb(url: &str, sha256: Option<&str>, dir: &Path) -> Result<()> {
    let name = url.rsplit('/').next().unwrap_or("kernel.deb");
    let deb = dir.join(name);
    let out = Command::new("curl")
        .args(["-fsSL", "--show-error", "--retry", "3", "-o"])
        .arg(&deb)
        .arg(url)
        .output()
        .context("running curl (Debian's curl)")?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr).trim().to_owned();
        // Only a file the mirror says it does not have is remembered as missing: a network
        // failure or an interrupted download is tried again next time.
        if err.contains("404") {
            return Err(NotServed(err).into());
        }
        bail!("curl {url}: {err}");
    }
    if let Some(sha256) = sha256 {
        let sum = output(Command::new("sha256sum").arg(&deb))?;
        if sum.split_whitespace().next() != Some(sha256) {
            bail!("{name}: SHA-256 {sum} is not the expected {sha256}");
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

/// A kernel line's files in the cache.
pub struct KernelFiles {
    /// The package it came from (the cache key).
    pub package: String,
    pub image: PathBuf,
    /// The config the package ships, if it ships one (not in caches made before the lab).
    pub config: Option<PathBuf>,
}

/// The kernel image of `k`, downloaded once into the cache (keyed by package name). From a
/// package index, the newest package whose file the mirror serves (an index can name a file
/// its pool no longer has, as bullseye-security does for 5.10). `need_config`: a cached image
/// without its config is fetched again. `say` hears what is downloaded.
pub fn kernel_image(k: &GuestKernel, need_config: bool, say: &dyn Fn(&str)) -> Result<KernelFiles> {
    let candidates: Vec<(String, String, Option<&str>)> = match &k.source {
        KernelSource::Index {
            suites,
            prefix,
            suffix,
        } => match candidates_in_indexes(k.arch, &debian_mirror(), suites, prefix, suffix, say) {
            Ok(c) => c
                .into_iter()
                .map(|(e, base)| (e.name, format!("{base}/{}", e.filename), None))
                .collect(),
            // Offline: the newest package of the line already in the cache, if any.
            Err(e) => match newest_cached(prefix, suffix, need_config) {
                Some(files) => {
                    say(&format!(
                        "package indexes not readable ({e:#}): using the cached {}",
                        files.package
                    ));
                    return Ok(files);
                }
                None => return Err(e),
            },
        },
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
        let files = |package: String| {
            let config = dir.join("config");
            KernelFiles {
                package,
                image: dir.join("vmlinuz"),
                config: config.exists().then_some(config),
            }
        };
        if dir.join("vmlinuz").exists() && (!need_config || dir.join("config").exists()) {
            return Ok(files(pkg));
        }
        // A file the mirror did not serve is not asked for again on every run.
        let missing = cache_dir().join("kernels").join(format!("{pkg}.missing"));
        if missing.exists() {
            continue;
        }
        match download_kernel(&pkg, &url, sha256, &dir, say) {
            Ok(()) => return Ok(files(pkg)),
            Err(e) if e.downcast_ref::<NotServed>().is_some() => {
                say(&format!("{pkg}: {e:#}; trying the next older package"));
                let _ = fs::write(&missing, format!("{url}: {e:#}\n"));
                last_err = Some(e);
            }
            Err(e) => return Err(e),
        }
    }
    Err(last_err.unwrap_or_else(|| anyhow::anyhow!("no kernel package for {}", k.label)))
}

/// The newest cached package named `prefix`…`suffix` with an image (and a config if needed).
fn newest_cached(prefix: &str, suffix: &str, need_config: bool) -> Option<KernelFiles> {
    let dir = cache_dir().join("kernels");
    fs::read_dir(&dir)
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let ok = name.starts_with(prefix)
                && name.ends_with(suffix)
                && e.path().join("vmlinuz").exists()
                && (!need_config || e.path().join("config").exists());
            ok.then_some(name)
        })
        .max_by_key(|n| version_key(n))
        .map(|package| {
            let d = dir.join(&package);
            let config = d.join("config");
            KernelFiles {
                package,
                image: d.join("vmlinuz"),
                config: config.exists().then_some(config),
            }
        })
}

/// `config-*` beside the image in `/boot`, or `config` in `/usr/lib/modules/VERSION/`.
fn find_config(root: &Path) -> Option<PathBuf> {
    let in_boot = fs::read_dir(root.join("boot")).ok().and_then(|d| {
        d.filter_map(Result::ok).map(|e| e.path()).find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("config-"))
        })
    });
    in_boot.or_else(|| {
        fs::read_dir(root.join("usr/lib/modules"))
            .ok()?
            .filter_map(Result::ok)
            .map(|e| e.path().join("config"))
            .find(|p| p.exists())
    })
}

/// Downloads one kernel package and keeps only its image (`vmlinuz`) and config (`config`) in
/// `dir`, replaced whole (a partial download never looks cached).
fn download_kernel(
    pkg: &str,
    url: &str,
    sha256: Option<&str>,
    dir: &Path,
    say: &dyn Fn(&str),
) -> Result<()> {
    say(&format!("downloading {pkg} ({url})"));
    install_from_deb(url, sha256, dir, |x, done| {
        let image = find_vmlinuz(x).context("no vmlinuz in the package")?;
        fs::copy(&image, done.join("vmlinuz"))?;
        if let Some(config) = find_config(x) {
            fs::copy(config, done.join("config"))?;
        }
        Ok(())
    })
}

/// Debian 12's static busybox for `arch` (the test guests' shell and tools): the host's own
/// `/bin/busybox` (busybox-static) for its architecture, else the package for `arch` fetched
/// once from the machine's mirror into the cache.
pub fn busybox(arch: Arch, say: &dyn Fn(&str)) -> Result<PathBuf> {
    if arch == Arch::host() {
        return Ok(PathBuf::from("/bin/busybox"));
    }
    let dir = cache_dir().join("busybox").join(arch.debian());
    let bin = dir.join("busybox");
    if bin.exists() {
        return Ok(bin);
    }
    let mirror = debian_mirror();
    let url = index_url(&format!("{mirror}/debian"), "bookworm", arch);
    let index = read_index(&url)?.with_context(|| format!("{url}: not readable"))?;
    let stanza = index
        .split("\n\n")
        .find(|st| st.lines().any(|l| l.trim() == "Package: busybox-static"))
        .with_context(|| format!("no busybox-static in {url}"))?;
    let field = |f: &str| {
        stanza_field(stanza, f).with_context(|| format!("busybox-static in {url} has no {f}"))
    };
    // The index's checksum: the mirror is trusted for the index, not for the file beside it.
    let (filename, sha256) = (field("Filename:")?, field("SHA256:")?);
    say(&format!("downloading busybox-static for {arch}"));
    let url = format!("{mirror}/debian/{filename}");
    install_from_deb(&url, Some(&sha256), &dir, |x, done| {
        fs::copy(x.join("bin/busybox"), done.join("busybox"))?;
        Ok(())
    })?;
    Ok(bin)
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
}
