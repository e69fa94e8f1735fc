//! The guests' binaries: numatrace, numatrace-workload and the integration tests (the host's
//! release build and its shared libraries, or another architecture's static build).

use std::{
    collections::BTreeMap,
    fs,
    path::{Path, PathBuf},
};

use anyhow::{Result, bail};

use crate::{
    musl::musl_cargo,
    process::output,
    setup::{Tools, workspace_root},
};

use numatrace_lab::arch::Arch;

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
/// For another architecture: numatrace's binaries and the tests a guest runs (those not in
/// `host_only`), built static for it: one build for all that architecture's guests and its
/// package.
pub fn build_guest_binaries(
    tools: &Tools,
    arch: Arch,
    host_only: &[&str],
) -> Result<GuestBinaries> {
    let out = if arch == Arch::host() {
        output(
            tools
                .cargo(&tools.pins.stable)
                .args(["test", "--release"])
                .args(crate::cmd::HOST_PACKAGES)
                .args(["--no-run", "--message-format=json"]),
        )?
    } else {
        eprintln!("xtask: building numatrace and its guest tests for {arch} (static)");
        let mut cargo = musl_cargo(tools, arch, "test")?;
        cargo.args(["--no-run", "--message-format=json"]);
        for t in fs::read_dir(workspace_root().join("numatrace/tests"))? {
            let path = t?.path();
            let Some(name) = path.file_stem().map(|n| n.to_string_lossy().into_owned()) else {
                continue;
            };
            if path.extension().is_some_and(|e| e == "rs") && !host_only.contains(&name.as_str()) {
                cargo.args(["--test", &name]);
            }
        }
        output(&mut cargo)?
    };
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
