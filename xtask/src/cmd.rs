//! Running commands, and the build/run steps.

use std::process::Command;

use anyhow::{Context as _, Result, bail};

use crate::setup::{Tools, workspace_root};

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

pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|v| v.split_whitespace().nth(1).map(|e| e == "0"))
        })
        .unwrap_or(false)
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
