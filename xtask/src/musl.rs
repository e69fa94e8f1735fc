//! Static (musl) builds of numatrace and numatrace-workload for amd64 or arm64: `cargo xtask
//! build --static [--arch arm64]`, the arm64 guests' tests and package. Every tool they need
//! (the Rust target, musl-gcc or Debian's cross gcc) is installed here, idempotently.

use std::{path::PathBuf, process::Command};

use anyhow::{Result, bail};
use numatrace_lab::arch::Arch;

use crate::{
    process::{check, output},
    setup::{Tools, ensure_packages, workspace_root},
};

fn ensure_musl_target(tools: &Tools, arch: Arch) -> Result<()> {
    let target = arch.musl_target();
    let installed = output(Command::new("rustup").args([
        "target",
        "list",
        "--installed",
        "--toolchain",
        &tools.pins.stable,
    ]))?;
    if installed.lines().any(|l| l.trim() == target) {
        return Ok(());
    }
    check(Command::new("rustup").args(["target", "add", target, "--toolchain", &tools.pins.stable]))
}

/// `cargo SUBCOMMAND --release --target <arch's musl target> --package numatrace --bins`,
/// with the C compiler that builds zstd's C library and, for another architecture than the
/// host's, the linker (Debian's cross gcc links against the Rust target's own musl; nothing of
/// glibc is linked).
pub fn musl_cargo(tools: &Tools, arch: Arch, subcommand: &str) -> Result<Command> {
    ensure_musl_target(tools, arch)?;
    let triple = arch.musl_target().replace('-', "_");
    let mut cargo = tools.cargo(&tools.pins.stable);
    cargo.args([
        subcommand,
        "--release",
        "--target",
        arch.musl_target(),
        "--package",
        "numatrace",
        "--bins",
    ]);
    if arch == Arch::host() {
        ensure_tool(
            "musl-gcc",
            "musl-tools",
            "static builds compile zstd's C library with musl-gcc",
        )?;
        cargo.env(format!("CC_{triple}"), "musl-gcc");
    } else {
        let gcc = cross_tool(arch, "gcc");
        ensure_tool(
            &gcc,
            cross_gcc_package(arch),
            &format!("{arch} builds compile zstd's C library and link with {gcc}"),
        )?;
        // ring's and zstd's C sources include the target's libc headers, which Debian's cross
        // gcc only recommends (left out by --no-install-recommends): without them the host's
        // /usr/include is found and fails (bits/libc-header-start.h).
        ensure_package(
            cross_libc_dev_package(arch),
            &format!("{arch} builds compile C against the target's libc headers"),
        )?;
        cargo.env(format!("CC_{triple}"), &gcc).env(
            format!("CARGO_TARGET_{}_LINKER", triple.to_uppercase()),
            &gcc,
        );
    }
    Ok(cargo)
}

/// Debian's cross tool `tool` (`gcc`, `strip`) for `arch`: `aarch64-linux-gnu-strip`.
pub fn cross_tool(arch: Arch, tool: &str) -> String {
    format!("{}-linux-gnu-{tool}", arch.rust_arch())
}

/// Debian's package of the cross compiler for `arch` (binutils come with it).
fn cross_gcc_package(arch: Arch) -> &'static str {
    match arch {
        Arch::Amd64 => "gcc-x86-64-linux-gnu",
        Arch::Arm64 => "gcc-aarch64-linux-gnu",
    }
}

/// Builds static numatrace and numatrace-workload for `arch` at
/// target/<arch's musl target>/release/.
pub fn build_static(tools: &Tools, arch: Arch) -> Result<PathBuf> {
    check(&mut musl_cargo(tools, arch, "build")?)?;
    let dir = workspace_root()
        .join("target")
        .join(arch.musl_target())
        .join("release");
    eprintln!("xtask: built {}", dir.join("numatrace").display());
    Ok(dir)
}

/// Debian's package of `arch`'s libc headers for its cross compiler.
fn cross_libc_dev_package(arch: Arch) -> &'static str {
    match arch {
        Arch::Amd64 => "libc6-dev-amd64-cross",
        Arch::Arm64 => "libc6-dev-arm64-cross",
    }
}

/// Debian's `package`, installed as root when missing, else a clear error.
fn ensure_package(package: &str, why: &str) -> Result<()> {
    if crate::setup::dpkg_installed(package) {
        return Ok(());
    }
    if !crate::process::is_root() {
        bail!(
            "{why}: install Debian's {package} (as root: apt-get install \
             --no-install-recommends {package}), or run this step as root"
        );
    }
    ensure_packages(&[package])
}

/// `tool` on PATH, else its Debian package installed as root, else a clear error.
fn ensure_tool(tool: &str, package: &str, why: &str) -> Result<()> {
    if Command::new(tool).arg("--version").output().is_ok() {
        return Ok(());
    }
    ensure_package(package, why)
}
