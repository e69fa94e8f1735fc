//! The filters a window is given on the command line, checked against the running system.

use anyhow::{Result, bail};

use crate::{engine::Engine, sources::cgroups::relative_path, text_escape};

/// `--cgroup ARG` as a path under the cgroup2 mount, checked to be a cgroup.
pub fn cgroup_filter(engine: &Engine, arg: Option<&str>) -> Result<Option<String>> {
    let Some(arg) = arg else {
        return Ok(None);
    };
    let Some(mount) = engine.cgroup_mount() else {
        bail!("--cgroup: no cgroup v2 hierarchy is mounted (see /proc/self/mountinfo)");
    };
    // Under the mount and nowhere else: `..` would let root test for directories anywhere.
    if std::path::Path::new(arg)
        .components()
        .any(|c| c == std::path::Component::ParentDir)
    {
        bail!(
            "--cgroup: {} has a '..' component: name the cgroup by its path under the cgroup2 \
             mount",
            text_escape::Escaped(arg)
        );
    }
    let rel = relative_path(Some(mount), arg);
    let dir = mount.join(rel.trim_start_matches('/'));
    if !dir.is_dir() {
        bail!(
            "--cgroup: {} is not a cgroup (no directory {})",
            text_escape::Escaped(arg),
            text_escape::EscapedBytes(dir.as_os_str().as_encoded_bytes())
        );
    }
    Ok(Some(rel))
}
