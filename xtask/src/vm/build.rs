//! The guests' binaries: numatrace, numatrace-workload and the integration tests (the host's
//! release build and its shared libraries), and `cargo xtask build --static` (musl).

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::Command,
};

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

/// What the test guests run: the host's own release build of numatrace, numatrace-workload and
/// the integration tests (the very executables the host tests just ran, so nothing compiles a
/// second time), and the shared libraries they load, packed at their own paths (the guests'
/// initramfs has no C library of its own; the host's glibc runs on every guest kernel).
pub struct GuestBinaries {
    /// numatrace and numatrace-workload, by name.
    pub bins: BTreeMap<String, PathBuf>,
    /// Integration-test executables of the numatrace crate, by test name.
    pub tests: BTreeMap<String, PathBuf>,
    /// Every shared library any of them loads (with the dynamic loader): (path, path in the
    /// guest's root).
    pub libs: Vec<(PathBuf, PathBuf)>,
}

/// The host test step's build (`cargo xtask test` runs the same cargo arguments, so when it
/// ran first this only reads cargo's record of it).
pub fn build_guest_binaries(tools: &Tools) -> Result<GuestBinaries> {
    let out = output(
        tools
            .cargo(&tools.pins.stable)
            .args(["test", "--release"])
            .args(crate::test::HOST_PACKAGES)
            .args(["--no-run", "--message-format=json"]),
    )?;
    let tests_dir = workspace_root().join("numatrace/tests");
    let mut bins = BTreeMap::new();
    let mut tests = BTreeMap::new();
    for line in out.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let (Some(name), Some(exe), Some(src)) = (
            v["target"]["name"].as_str(),
            v["executable"].as_str(),
            v["target"]["src_path"].as_str(),
        ) else {
            continue;
        };
        let is_test = v["profile"]["test"].as_bool() == Some(true);
        match v["target"]["kind"][0].as_str() {
            Some("test") if is_test && Path::new(src).starts_with(&tests_dir) => {
                tests.insert(name.to_owned(), PathBuf::from(exe));
            }
            Some("bin") if !is_test && ["numatrace", "numatrace-workload"].contains(&name) => {
                bins.insert(name.to_owned(), PathBuf::from(exe));
            }
            _ => {}
        }
    }
    if tests.is_empty() || bins.len() != 2 {
        bail!(
            "the release build listed {} numatrace binaries and {} integration tests",
            bins.len(),
            tests.len()
        );
    }
    let mut libs = Vec::new();
    for exe in bins.values().chain(tests.values()) {
        for (file, at) in numatrace_lab::shared_libraries(exe)? {
            let inside = at.strip_prefix("/")?.to_owned();
            if !libs.iter().any(|(_, i)| *i == inside) {
                libs.push((file, inside));
            }
        }
    }
    Ok(GuestBinaries { bins, tests, libs })
}
