//! The build and run steps.

use std::process::Command;

use anyhow::{Context as _, Result};
use clap::Args;

use crate::{
    process::{check, is_root},
    setup::{Tools, workspace_root},
};

/// `cargo xtask build`'s options.
#[derive(Args)]
pub struct BuildOpts {
    /// Build static (musl) binaries at target/<arch>-unknown-linux-musl/release/ instead.
    #[arg(long = "static")]
    pub static_: bool,
    /// The architecture to build for: amd64 (the default) or arm64 (static, cross-compiled
    /// with Debian's gcc-aarch64-linux-gnu as linker; the eBPF object reads arm64's registers).
    #[arg(long, default_value = "amd64", value_parser = parse_arch)]
    pub arch: numatrace_lab::arch::Arch,
}

pub fn parse_arch(s: &str) -> Result<numatrace_lab::arch::Arch, String> {
    s.parse()
}

/// `cargo xtask run`'s options.
#[derive(Args)]
pub struct RunOpts {
    /// What to pass to numatrace.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub args: Vec<String>,
}

pub fn build(tools: &Tools) -> Result<()> {
    check(tools.cargo(&tools.pins.stable).args([
        "build",
        "--release",
        "--package",
        "numatrace",
        "--bins",
    ]))?;
    eprintln!(
        "xtask: built {}",
        workspace_root().join("target/release/numatrace").display()
    );
    Ok(())
}

/// The host crates' release binaries as the host tests build them, uplifted into target/release
/// (nothing to compile right after those tests).
pub fn build_tested(tools: &Tools) -> Result<()> {
    check(
        tools
            .cargo(&tools.pins.stable)
            .args(["test", "--release", "--no-run", "--quiet"])
            .args(HOST_PACKAGES),
    )?;
    eprintln!(
        "xtask: built {} (the tests' build)",
        workspace_root().join("target/release/numatrace").display()
    );
    Ok(())
}

/// The host crates, as lint and the host tests name them; the guests run the executables
/// `cargo test --release` builds for exactly these (vm::build): another set could unify
/// features differently and compile everything again.
pub const HOST_PACKAGES: &[&str] = &[
    "--package",
    "numatrace",
    "--package",
    "numatrace-common",
    "--package",
    "numatrace-lab",
    "--package",
    "xtask",
];

/// Runs the built binary; only this command runs as root, never the build.
pub fn run_numatrace(args: &[String]) -> Result<()> {
    let bin = workspace_root().join("target/release/numatrace");
    let mut cmd = if is_root() {
        Command::new(&bin)
    } else {
        eprintln!("xtask: numatrace needs root; running it through sudo");
        let mut c = Command::new("sudo");
        c.arg(&bin);
        c
    };
    let status = cmd.args(args).status().context("running numatrace")?;
    std::process::exit(status.code().unwrap_or(1));
}
