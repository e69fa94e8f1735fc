//! numatrace's lab: any kernel image booted in a QEMU guest with real multi-node NUMA (and a
//! slower, CPU-less HMAT tier), numatrace inside, results brought back. `numatrace lab` is built
//! on it, and so are xtask's `vm-test` and `bench`: the tests boot what users boot.
//!
//! Modules, none of which imports another except through this file's helpers:
//! - `arch`: amd64 and arm64: QEMU, console, Debian and Rust names;
//! - `kernels`: the Debian and Ubuntu kernel lines, fetched once into a cache;
//! - `spec`: what `--kernel` names (an image, a built tree, `debian:6.12`), resolved to files;
//! - `image`: is a file an x86-64 kernel image, its version string, its embedded config;
//! - `config`: the kernel options numatrace needs, what each costs, the fragment that sets them;
//! - `initramfs`: a gzipped cpio written in Rust (files, directories, a device node);
//! - `machine`: the QEMU command line (nodes, distances, HMAT) and a boot with a deadline;
//! - `results`: the byte stream a guest sends back on its second serial port, written and read;
//! - `guest`: PID 1 of a lab guest (numatrace itself, as `/init`);
//! - `interrupt`: Ctrl-C and SIGTERM turned into a flag, so a boot is stopped and cleaned up.

pub mod arch;
pub mod config;
pub mod guest;
pub mod image;
pub mod initramfs;
pub mod interrupt;
pub mod kernels;
pub mod machine;
pub mod results;
pub mod spec;

use std::{
    env,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result, bail};

/// Where kernels (and what else is fetched once) are kept: `NUMATRACE_CACHE`, else
/// `$XDG_CACHE_HOME/numatrace`, else `~/.cache/numatrace`.
pub fn cache_dir() -> PathBuf {
    if let Some(d) = env::var_os("NUMATRACE_CACHE") {
        return d.into();
    }
    let base = env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| env::var_os("HOME").map(|h| Path::new(&h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from("/var/cache"));
    base.join("numatrace")
}

/// Runs `cmd`, inheriting stdio; fails with the command line when it fails.
pub fn check(cmd: &mut Command) -> Result<()> {
    let status = cmd.status().with_context(|| format!("running {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed: {status}");
    }
    Ok(())
}

/// Runs `cmd` and returns its stdout.
pub fn output(cmd: &mut Command) -> Result<String> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8(out.stdout)?)
}

/// A file's ELF `e_machine` ([`image::elf_machine`]), for a little-endian ELF file.
pub fn elf_machine(path: &Path) -> Result<u16> {
    use std::io::Read as _;
    let mut h = [0u8; 20];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut h))
        .with_context(|| format!("reading {}", path.display()))?;
    match image::elf_machine(&h) {
        Some(m) if h[5] == 1 => Ok(m),
        _ => bail!("{}: not a little-endian ELF file", path.display()),
    }
}

/// The shared libraries `exe` loads, the dynamic loader included, as `ldd` resolves them here:
/// (file, absolute path the guest needs it at). The loader is needed where the executable
/// names it (`/lib64/ld-linux-x86-64.so.2 => /usr/lib64/...` on some distributions). A static
/// executable has none.
pub fn shared_libraries(exe: &Path) -> Result<Vec<(PathBuf, PathBuf)>> {
    let out = Command::new("ldd")
        .arg(exe)
        .output()
        .context("running ldd (Debian's libc-bin)")?;
    let ldd = String::from_utf8_lossy(&out.stdout);
    let mut libs = Vec::new();
    for line in ldd.lines() {
        // `libx.so.1 => /lib/x/libx.so.1 (0x...)` or `/lib64/ld-linux-x86-64.so.2 (0x...)`.
        if line.contains("not found") {
            bail!(
                "{}: a shared library is missing: {}",
                exe.display(),
                line.trim()
            );
        }
        let (left, right) = line.split_once("=>").unwrap_or(("", line));
        let Some(file) = right
            .split_whitespace()
            .next()
            .filter(|p| p.starts_with('/'))
        else {
            continue;
        };
        libs.push((PathBuf::from(file), PathBuf::from(file)));
        let named = left.trim();
        if named.starts_with('/') && named != file {
            libs.push((PathBuf::from(file), PathBuf::from(named)));
        }
    }
    Ok(libs)
}
