//! Scratch cgroup v2 directories for the scale measurement: `N` empty cgroups under one
//! dedicated directory, removed when dropped (also on an error or a panic on the way).

use std::{
    fs,
    os::unix::fs::MetadataExt as _,
    path::{Path, PathBuf},
};

use anyhow::{Context as _, Result};
use numatrace::sources::cgroups::cgroup2_mount;

/// The dedicated directory under the cgroup2 mount.
const DIR: &str = "numatrace-bench-scale";

pub struct CgroupDirs {
    root: PathBuf,
    /// Each cgroup's id (its directory's inode number: what `bpf_get_current_cgroup_id` gives).
    pub ids: Vec<u64>,
}

impl CgroupDirs {
    /// Creates `n` cgroups `DIR/g0` … `DIR/g{n-1}` (a tree left by a killed run is removed first).
    pub fn create(n: usize) -> Result<Self> {
        let mountinfo = fs::read_to_string("/proc/self/mountinfo").context("mountinfo")?;
        let mount = cgroup2_mount(&mountinfo).context("no cgroup2 mount")?;
        let root = mount.join(DIR);
        if root.exists() {
            remove(&root).with_context(|| format!("removing {} left over", root.display()))?;
        }
        fs::create_dir(&root).with_context(|| format!("creating {}", root.display()))?;
        // The guard first: whatever was created is removed if a later mkdir fails.
        let mut dirs = Self {
            root,
            ids: Vec::with_capacity(n),
        };
        for i in 0..n {
            let d = dirs.root.join(format!("g{i}"));
            fs::create_dir(&d).with_context(|| format!("creating {}", d.display()))?;
            dirs.ids.push(fs::metadata(&d)?.ino());
        }
        Ok(dirs)
    }
}

impl Drop for CgroupDirs {
    fn drop(&mut self) {
        if let Err(e) = remove(&self.root) {
            eprintln!("numatrace-bench: {}: {e:#}", self.root.display());
        }
    }
}

/// rmdir of each child, then of `root` (cgroupfs directories are removed by rmdir alone: their
/// interface files cannot be unlinked).
fn remove(root: &Path) -> Result<()> {
    for e in fs::read_dir(root)?.flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            fs::remove_dir(e.path()).with_context(|| format!("rmdir {}", e.path().display()))?;
        }
    }
    fs::remove_dir(root).with_context(|| format!("rmdir {}", root.display()))
}
