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
    /// Build static (musl) binaries at target/x86_64-unknown-linux-musl/release/ instead.
    #[arg(long = "static")]
    pub static_: bool,
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
