//! The guests' binaries: numatrace, numatrace-workload and the integration tests, static (musl).

use std::{collections::BTreeMap, path::PathBuf, process::Command};

use anyhow::{Result, bail};

use crate::{
    process::{check, output},
    setup::{Tools, ensure_packages, workspace_root},
};

pub const MUSL: &str = "x86_64-unknown-linux-musl";

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
pub fn build_static_tests(tools: &Tools) -> Result<BTreeMap<String, PathBuf>> {
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
