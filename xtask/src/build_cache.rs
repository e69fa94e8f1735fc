//! Compiled dependencies kept between clean clones: CI runs `cargo xtask test` on a fresh
//! clone each time, and compiling the crates.io dependencies again (for clippy, the release
//! tests, the package and the static builds) was about five of its minutes on 2 cores.
//!
//! In a clone that has not built yet, the target directories those steps write are made links
//! into the cache: root's in /var/cache (tests run programs from target/release as `nobody`,
//! who cannot pass through /root), anyone else's in their own cache directory. Cargo names a workspace crate's artifacts by a hash of its path relative to
//! the workspace, so every clone writes the same files over the last one's (the cache does not
//! grow from run to run), and it rebuilds them from the clone's sources; a dependency whose
//! fingerprint still holds is reused. A tree that has built already keeps its own directories.

use std::{
    fs,
    os::unix::fs::PermissionsExt as _,
    path::{Path, PathBuf},
};

use anyhow::{Context as _, Result};

use crate::setup::workspace_root;

/// The target subdirectories that hold compiled dependencies: the host release build (tests,
/// package, and the host half of every cross build), the eBPF crate's x86-64 clippy, its
/// aarch64 clippy (a target directory of its own) and the static builds.
const KEPT: &[&str] = &[
    "release",
    "bpfel-unknown-none",
    "ebpf-clippy-aarch64",
    "x86_64-unknown-linux-musl",
    "aarch64-unknown-linux-musl",
];

/// Links the target directories of [`KEPT`] that do not exist yet into the cache for the
/// `stable` toolchain; the caches of other toolchains are removed (a pin's bump would otherwise
/// leave gigabytes behind).
pub fn link(stable: &str) -> Result<()> {
    let root = builds_dir();
    let kept = root.join(stable);
    let target = workspace_root().join("target");
    let mut linked = Vec::new();
    for d in KEPT {
        let link = target.join(d);
        // A directory of the tree's own, or a link made by an earlier run.
        if link.symlink_metadata().is_ok() {
            continue;
        }
        let dir = kept.join(d);
        fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        // Passable by `nobody` whatever the umask (what a test runs from here as nobody).
        let top = root.parent().unwrap_or(&root);
        for p in dir.ancestors().take_while(|p| p.starts_with(top)) {
            fs::set_permissions(p, fs::Permissions::from_mode(0o755))?;
        }
        fs::create_dir_all(&target)?;
        std::os::unix::fs::symlink(&dir, &link)
            .with_context(|| format!("linking {} to {}", link.display(), dir.display()))?;
        linked.push(*d);
    }
    if !linked.is_empty() {
        eprintln!(
            "xtask: target/{{{}}} kept in {} (compiled dependencies reused by the next clean \
             clone)",
            linked.join(","),
            kept.display()
        );
        remove_others(&root, stable)?;
    }
    Ok(())
}

/// Where the builds of each toolchain are kept.
fn builds_dir() -> PathBuf {
    if crate::process::is_root() {
        PathBuf::from("/var/cache/numatrace/builds")
    } else {
        crate::setup::cache_dir().join("builds")
    }
}

/// Removes the caches of toolchains other than `stable`.
fn remove_others(root: &Path, stable: &str) -> Result<()> {
    for e in fs::read_dir(root)? {
        let e = e?;
        if e.file_name() != stable && e.file_type()?.is_dir() {
            eprintln!(
                "xtask: removing {} (another toolchain's builds)",
                e.path().display()
            );
            fs::remove_dir_all(e.path())?;
        }
    }
    Ok(())
}
