//! Compiled dependencies kept between clean clones: CI runs `cargo xtask test` on a fresh
//! clone each time, and compiling the crates.io dependencies again (for clippy, the release
//! tests, the package and the static builds) was about five of its minutes on 2 cores.
//!
//! In a clone that has not built yet, the target directories those steps write are made links
//! into the cache: root's in /var/cache (tests run programs from target/release as `nobody`,
//! who cannot pass through /root), anyone else's in their own cache directory. Cargo names a
//! workspace crate's artifacts by a hash of its path relative to the workspace, so every
//! clone writes the same files over the last one's, and each `cargo xtask` step first makes
//! sure the workspace is built from its own tree's sources ([`claim`]); a dependency whose
//! fingerprint still holds is reused. A tree that has built already keeps its own
//! directories. The workspace's files do not grow from run to run; each dependency version a
//! lock file names and each nightly's eBPF builds do, until the stable pin changes (the other
//! pins' caches are removed then) or `/var/cache/numatrace/builds` is removed by hand.

use std::{
    fs,
    os::unix::{ffi::OsStrExt as _, fs::PermissionsExt as _},
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

/// Target directories whose crates are built against the host crates of `release` (the build
/// scripts and proc macros of a `--target` build go there): linked only where `release` is.
/// A tree with a `release` of its own and these linked wrote, into the cache, crates built
/// against its own proc macros, which the next clone's build then could not load against the
/// cache's ("can't find crate for `aya_log_ebpf`"). (`ebpf-clippy-aarch64` is a target
/// directory of its own, host crates included.)
const BUILT_AGAINST_RELEASE: &[&str] = &[
    "bpfel-unknown-none",
    "x86_64-unknown-linux-musl",
    "aarch64-unknown-linux-musl",
];

/// The workspace's packages: what the cache holds of them is the last clone's to build them.
const WORKSPACE: &[&str] = &[
    "numatrace",
    "numatrace-common",
    "numatrace-lab",
    "numatrace-ebpf",
    "numatrace-fuzz",
    "xtask",
];

/// The file in a toolchain's cache naming the tree whose workspace crates it holds.
const OWNER: &str = "built-by";

/// Links the target directories of [`KEPT`] that do not exist yet (or whose link leads
/// nowhere, or to another toolchain's cache) into the cache for the `stable` toolchain (those
/// of [`BUILT_AGAINST_RELEASE`] only where `release` is linked too); the
/// caches of other toolchains are removed (a pin's bump would otherwise leave gigabytes
/// behind). [`claim`] comes after it.
pub fn link(stable: &str) -> Result<()> {
    let root = builds_dir();
    let kept = root.join(stable);
    let target = workspace_root().join("target");
    let own_release = target
        .join("release")
        .symlink_metadata()
        .is_ok_and(|m| !m.file_type().is_symlink());
    let mut linked = Vec::new();
    for d in KEPT {
        let link = target.join(d);
        let dir = kept.join(d);
        if own_release && BUILT_AGAINST_RELEASE.contains(d) {
            // A link left by an earlier run (before this rule) goes; cargo makes the directory.
            if link
                .symlink_metadata()
                .is_ok_and(|m| m.file_type().is_symlink())
            {
                fs::remove_file(&link)
                    .with_context(|| format!("removing the link {}", link.display()))?;
            }
            continue;
        }
        match link.symlink_metadata() {
            // A link made by an earlier run, still leading to this toolchain's cache.
            Ok(m) if m.file_type().is_symlink() => {
                if fs::read_link(&link).is_ok_and(|to| to == dir) && dir.is_dir() {
                    continue;
                }
                fs::remove_file(&link)
                    .with_context(|| format!("removing the stale link {}", link.display()))?;
            }
            // A directory of the tree's own.
            Ok(_) => continue,
            Err(_) => {}
        }
        fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        // Passable by `nobody` whatever the umask (tests run programs from here as nobody when
        // run as root); only the cache's own directories are touched.
        let top = if crate::process::is_root() {
            root.parent().unwrap_or(&root)
        } else {
            &root
        };
        for p in dir.ancestors().take_while(|p| p.starts_with(top)) {
            fs::set_permissions(p, fs::Permissions::from_mode(0o755))
                .with_context(|| format!("making {} passable", p.display()))?;
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

/// Where this tree's target directories are links into the cache, makes sure that the
/// workspace's crates there are rebuilt from this tree's sources when another tree built them
/// last. Cargo names those files alike in every clone and judges them by the sources'
/// times: a clone whose files are older than another's build (two clones made before either
/// built, a copy that kept its times) would otherwise take that build as its own. Their
/// fingerprints are removed, which cargo takes as "never built". One `cargo xtask` at a time
/// per cache: two trees building into it at once would still overwrite each other's files.
pub fn claim(stable: &str) -> Result<()> {
    let kept = builds_dir().join(stable);
    let target = workspace_root().join("target");
    let linked = KEPT
        .iter()
        .any(|d| fs::read_link(target.join(d)).is_ok_and(|to| to.starts_with(&kept)));
    if !linked {
        return Ok(());
    }
    claim_dir(&kept)
}

/// The same for a target directory kept outside any tree (the fuzz build's): the workspace's
/// crates in `dir` are rebuilt when another tree built them last.
pub fn claim_dir(dir: &Path) -> Result<()> {
    let owner = dir.join(OWNER);
    let me = workspace_root();
    if fs::read(&owner).is_ok_and(|b| b == me.as_os_str().as_bytes()) || !dir.is_dir() {
        return Ok(());
    }
    let removed = forget_workspace(dir)?;
    eprintln!(
        "xtask: {} holds another tree's build of the workspace: {removed} of its fingerprints \
         removed, so it is built again from {}",
        dir.display(),
        me.display()
    );
    fs::write(&owner, me.as_os_str().as_bytes())
        .with_context(|| format!("writing {}", owner.display()))
}

/// Removes, under `dir` (every target directory, nested ones included: build.rs builds the
/// eBPF crate in its own), the fingerprints of the workspace's packages; how many.
fn forget_workspace(dir: &Path) -> Result<usize> {
    let mut removed = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = fs::read_dir(&d) else {
            continue;
        };
        for e in entries {
            let e = e?;
            // Not through links: only what the cache itself holds.
            if !e.file_type()?.is_dir() {
                continue;
            }
            let path = e.path();
            if e.file_name() == ".fingerprint" {
                for f in fs::read_dir(&path)? {
                    let f = f?;
                    if is_workspace_unit(&f.file_name().to_string_lossy()) {
                        fs::remove_dir_all(f.path())?;
                        removed += 1;
                    }
                }
            } else if e.file_name() == "fingerprint" && is_workspace_unit_dir(&d) {
                fs::remove_dir_all(&path)?;
                removed += 1;
            } else {
                stack.push(path);
            }
        }
    }
    Ok(removed)
}

/// Whether a fingerprint directory's name (`PACKAGE-HASH`) is a workspace package's.
fn is_workspace_unit(name: &str) -> bool {
    name.rsplit_once('-')
        .is_some_and(|(pkg, hash)| WORKSPACE.contains(&pkg) && is_unit_hash(hash))
}

/// Whether `dir` is a workspace package's unit in the layout the nightly's cargo writes
/// (`build/PACKAGE/HASH/fingerprint`: the fuzz build, the eBPF builds), not `.fingerprint/`.
fn is_workspace_unit_dir(dir: &Path) -> bool {
    let name = |p: &Path| p.file_name().map(|n| n.to_string_lossy().into_owned());
    let pkg = dir.parent();
    name(dir).is_some_and(|h| is_unit_hash(&h))
        && pkg
            .and_then(name)
            .is_some_and(|p| WORKSPACE.contains(&p.as_str()))
        && pkg
            .and_then(Path::parent)
            .and_then(name)
            .is_some_and(|b| b == "build")
}

fn is_unit_hash(s: &str) -> bool {
    s.len() == 16 && s.bytes().all(|b| b.is_ascii_hexdigit())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_workspace_packages_fingerprints_are_named() {
        assert!(is_workspace_unit("numatrace-6d1e8bdf77c11942"));
        assert!(is_workspace_unit("numatrace-common-206003c521b341a0"));
        assert!(is_workspace_unit("numatrace-ebpf-0123456789abcdef"));
        assert!(!is_workspace_unit("numatrace-ebpf"));
        assert!(!is_workspace_unit("aya-0123456789abcdef"));
        assert!(!is_workspace_unit("numatrace-common-0123"));
        assert!(!is_workspace_unit("numatrace-xyz-0123456789abcdef"));
    }

    /// Another tree's build: the workspace's fingerprints go, nested target directories
    /// included, the dependencies' stay; then the tree owns it and nothing more goes.
    #[test]
    fn another_trees_build_loses_the_workspaces_fingerprints_once() {
        let dir = std::env::temp_dir().join(format!("xtask-claim-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let fp = |p: &str| dir.join(p);
        for d in [
            "release/.fingerprint/numatrace-6d1e8bdf77c11942",
            "release/.fingerprint/aya-0123456789abcdef",
            "release/build/numatrace-0123456789abcdef/out/ebpf-target/release/.fingerprint/numatrace-ebpf-0123456789abcdef",
            "release/build/numatrace-0123456789abcdef/out/ebpf-target/release/.fingerprint/aya-ebpf-0123456789abcdef",
            // The nightly's layout (the eBPF build, the fuzz build).
            "release/build/numatrace-0123456789abcdef/out/ebpf-target/release/build/numatrace-ebpf/0123456789abcdef/fingerprint",
            "release/build/numatrace-0123456789abcdef/out/ebpf-target/release/build/aya-ebpf/0123456789abcdef/fingerprint",
            "x86_64-unknown-linux-gnu/release/build/numatrace/5a246bbf71e0d566/fingerprint",
            "x86_64-unknown-linux-gnu/release/build/numatrace/5a246bbf71e0d566/out",
            "x86_64-unknown-linux-gnu/release/build/ring/0bf32b85076224dd/fingerprint",
        ] {
            fs::create_dir_all(fp(d)).unwrap();
        }
        fs::write(dir.join(OWNER), "/elsewhere").unwrap();
        claim_dir(&dir).unwrap();
        assert!(!fp("release/.fingerprint/numatrace-6d1e8bdf77c11942").exists());
        assert!(!fp("release/build/numatrace-0123456789abcdef/out/ebpf-target/release/.fingerprint/numatrace-ebpf-0123456789abcdef").exists());
        assert!(fp("release/.fingerprint/aya-0123456789abcdef").exists());
        assert!(fp("release/build/numatrace-0123456789abcdef/out/ebpf-target/release/.fingerprint/aya-ebpf-0123456789abcdef").exists());
        assert!(!fp("release/build/numatrace-0123456789abcdef/out/ebpf-target/release/build/numatrace-ebpf/0123456789abcdef/fingerprint").exists());
        assert!(
            !fp("x86_64-unknown-linux-gnu/release/build/numatrace/5a246bbf71e0d566/fingerprint")
                .exists()
        );
        assert!(fp("release/build/numatrace-0123456789abcdef/out/ebpf-target/release/build/aya-ebpf/0123456789abcdef/fingerprint").exists());
        assert!(
            fp("x86_64-unknown-linux-gnu/release/build/numatrace/5a246bbf71e0d566/out").exists()
        );
        assert!(
            fp("x86_64-unknown-linux-gnu/release/build/ring/0bf32b85076224dd/fingerprint").exists()
        );
        assert_eq!(
            fs::read(dir.join(OWNER)).unwrap(),
            workspace_root().as_os_str().as_bytes()
        );
        // Built again by this tree: its own now, kept.
        fs::create_dir_all(fp("release/.fingerprint/numatrace-6d1e8bdf77c11942")).unwrap();
        claim_dir(&dir).unwrap();
        assert!(fp("release/.fingerprint/numatrace-6d1e8bdf77c11942").exists());
        fs::remove_dir_all(&dir).unwrap();
    }
}
