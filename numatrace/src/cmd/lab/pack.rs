//! The lab guests' initramfs: this numatrace as `/init` (and `/bin/numatrace`), the
//! numatrace-workload beside it (check's reproducers, stat's workloads), the shared libraries
//! both load, and the run's arguments. Nothing else: no shell, no disk.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use numatrace_lab::{guest, initramfs::Initramfs, shared_libraries};

/// What went in, for the progress line.
pub struct Packed {
    /// Whether numatrace-workload was found beside numatrace.
    pub workload: bool,
}

/// Writes the initramfs for `args` at `out`, with each (release, config) as
/// `/boot/config-RELEASE`.
pub fn pack(args: &[String], configs: &[(String, String)], out: &Path) -> Result<Packed> {
    let exe = std::env::current_exe().context("finding this numatrace")?;
    let workload = exe.with_file_name("numatrace-workload");
    let mut bins: Vec<(&str, PathBuf)> = vec![("numatrace", exe.clone())];
    let has_workload = workload.is_file();
    if has_workload {
        bins.push(("numatrace-workload", workload));
    }
    let mut root = Initramfs::new();
    for d in ["proc", "sys", "dev", "tmp", "run", "out"] {
        root.dir(d)?;
    }
    root.char_device("dev/console", 5, 1)?;
    let mut libs: Vec<PathBuf> = Vec::new();
    for (name, path) in &bins {
        root.file(&format!("bin/{name}"), path)?;
        for (file, at) in shared_libraries(path)? {
            if !libs.contains(&at) {
                root.file(&at.to_string_lossy(), &file)?;
                libs.push(at);
            }
        }
    }
    root.symlink("init", "bin/numatrace")?;
    for (release, config) in configs {
        // A release is a file name part only if it is plain (no '/', no ".."). Two builds of
        // one release: the first one's config stays (the archive refuses a second file).
        let plain = !release.is_empty()
            && release.len() <= 100
            && !release.starts_with('.')
            && release.chars().all(|c| c.is_ascii_graphic() && c != '/');
        if plain {
            let _ = root.bytes(&format!("boot/config-{release}"), config.as_bytes(), 0o644);
        }
    }
    root.bytes(guest::ARGS, serde_json::to_string(args)?.as_bytes(), 0o644)?;
    root.write(out)?;
    Ok(Packed {
        workload: has_workload,
    })
}
