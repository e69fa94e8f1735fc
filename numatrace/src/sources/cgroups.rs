//! cgroup v2: where the unified hierarchy is mounted, and the path of a cgroup id.
//!
//! On cgroup v2 a cgroup's id (what `bpf_get_current_cgroup_id` returns) is the inode number of
//! its directory, so ids are resolved by walking the mount. Paths are cached for good: a task
//! that outlives its cgroup's directory keeps the path it was seen with. An id that a walk
//! begun after it was asked for did not find belonged to a cgroup removed before it could be
//! resolved (ids are never reused); it is not walked for again.

use std::{
    collections::{HashMap, HashSet},
    fs,
    hash::BuildHasherDefault,
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, Instant},
};

use crate::model::key_hash::KeyHasher;

/// The cgroup2 mount point in `/proc/self/mountinfo` text (the unified layout mounts it at
/// /sys/fs/cgroup, the hybrid one at /sys/fs/cgroup/unified).
pub fn cgroup2_mount(mountinfo: &str) -> Option<PathBuf> {
    mountinfo.lines().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        let fstype = right.split_whitespace().next()?;
        let point = left.split_whitespace().nth(4)?;
        (fstype == "cgroup2").then(|| PathBuf::from(unescape(point)))
    })
}

/// mountinfo escapes space, tab, newline and backslash as octal.
fn unescape(s: &str) -> String {
    let mut out = String::new();
    let mut it = s.chars().peekable();
    while let Some(c) = it.next() {
        if c == '\\' {
            let oct: String = it.clone().take(3).collect();
            if let Ok(v) = u8::from_str_radix(&oct, 8)
                && oct.len() == 3
            {
                out.push(v as char);
                it.nth(2);
                continue;
            }
        }
        out.push(c);
    }
    out
}

/// A user's `--cgroup` argument as a path under the mount: `/system.slice/x.service`, or
/// the full filesystem path under the mount. Trailing slashes do not matter.
pub fn relative_path(mount: Option<&Path>, arg: &str) -> String {
    let arg = arg.trim_end_matches('/');
    let rel = mount
        .and_then(|m| Path::new(arg).strip_prefix(m).ok())
        .map_or_else(|| arg.to_owned(), |r| format!("/{}", r.display()));
    let rel = rel.trim_end_matches('/');
    if rel.is_empty() {
        "/".to_owned()
    } else if rel.starts_with('/') {
        rel.to_owned()
    } else {
        format!("/{rel}")
    }
}

pub struct CgroupResolver {
    mount: Option<PathBuf>,
    /// Shared by every task record of the cgroup (a snapshot clones a pointer, not the path).
    paths: HashMap<u64, Arc<str>, BuildHasherDefault<KeyHasher>>,
    last_walk: Option<Instant>,
    /// Unknown ids and when they were first asked for, until a walk settles them.
    asked: HashMap<u64, Instant, BuildHasherDefault<KeyHasher>>,
    /// Ids of cgroups removed before they were resolved.
    gone: HashSet<u64, BuildHasherDefault<KeyHasher>>,
    /// Changes to what [`CgroupResolver::cached`] answers (paths learnt or renamed, ids gone).
    epoch: u64,
}

/// How often an unknown id may trigger a walk of the whole hierarchy.
const WALK_EVERY: Duration = Duration::from_secs(1);

impl CgroupResolver {
    pub fn new() -> Self {
        let mount = fs::read_to_string("/proc/self/mountinfo")
            .ok()
            .and_then(|t| cgroup2_mount(&t));
        Self {
            mount,
            paths: HashMap::default(),
            last_walk: None,
            asked: HashMap::default(),
            gone: HashSet::default(),
            epoch: 0,
        }
    }

    /// Changes so far to what [`CgroupResolver::cached`] answers for any id: a path looked up
    /// at one epoch is still the answer while the epoch is the same.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    pub fn mount(&self) -> Option<&Path> {
        self.mount.as_deref()
    }

    /// What is known of cgroup `id` without walking: its path, `Some(None)` where it has none
    /// (0: never seen running, or removed before it was resolved), `None` where only
    /// [`CgroupResolver::path`] can tell.
    pub fn cached(&self, id: u64) -> Option<Option<&Arc<str>>> {
        if id == 0 || self.gone.contains(&id) {
            return Some(None);
        }
        self.paths.get(&id).map(Some)
    }

    /// The path of cgroup `id`, walking the hierarchy (at most once a second) when unknown.
    /// `id` must have been read from a running task before this call (so that a walk that
    /// misses it afterwards shows its cgroup removed).
    pub fn path(&mut self, id: u64) -> Option<Arc<str>> {
        if id == 0 {
            return None;
        }
        if let Some(p) = self.paths.get(&id) {
            return Some(p.clone());
        }
        if self.gone.contains(&id) {
            return None;
        }
        self.asked.entry(id).or_insert_with(Instant::now);
        if self.last_walk.is_none_or(|t| t.elapsed() >= WALK_EVERY) {
            self.walk();
        }
        self.paths.get(&id).cloned()
    }

    fn walk(&mut self) {
        let started = Instant::now();
        self.last_walk = Some(started);
        self.walk_tree();
        let Self {
            paths,
            asked,
            gone,
            epoch,
            ..
        } = self;
        asked.retain(|id, at| {
            if paths.contains_key(id) {
                false
            } else if *at <= started {
                *epoch += u64::from(gone.insert(*id));
                false
            } else {
                true
            }
        });
    }

    fn walk_tree(&mut self) {
        let Some(root) = self.mount.clone() else {
            return;
        };
        let mut stack = vec![(root, "/".to_owned())];
        while let Some((dir, rel)) = stack.pop() {
            if let Ok(m) = fs::metadata(&dir) {
                // The same Arc while the path is the same: records and frontends compare
                // paths by pointer first.
                if self.paths.get(&m.ino()).is_none_or(|p| **p != *rel) {
                    self.paths.insert(m.ino(), Arc::from(rel.as_str()));
                    self.epoch += 1;
                }
            }
            for e in fs::read_dir(&dir).into_iter().flatten().flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    let name = e.file_name().to_string_lossy().into_owned();
                    let child = if rel == "/" {
                        format!("/{name}")
                    } else {
                        format!("{rel}/{name}")
                    };
                    stack.push((e.path(), child));
                }
            }
        }
    }
}

impl Default for CgroupResolver {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::within;

    #[test]
    fn finds_the_unified_mount_in_both_layouts() {
        let hybrid = "25 18 0:22 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755\n\
                      26 25 0:23 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw\n\
                      27 25 0:24 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n";
        assert_eq!(
            cgroup2_mount(hybrid),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        let unified = "30 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev shared:4 - cgroup2 cgroup2 rw\n";
        assert_eq!(
            cgroup2_mount(unified),
            Some(PathBuf::from("/sys/fs/cgroup"))
        );
        assert_eq!(cgroup2_mount("1 0 8:1 / / rw - ext4 /dev/sda1 rw\n"), None);
        let spaced = "30 23 0:26 / /tmp/my\\040cg rw - cgroup2 none rw\n";
        assert_eq!(cgroup2_mount(spaced), Some(PathBuf::from("/tmp/my cg")));
    }

    #[test]
    fn user_paths_become_mount_relative() {
        let m = Path::new("/sys/fs/cgroup/unified");
        assert_eq!(
            relative_path(Some(m), "/sys/fs/cgroup/unified/a/b/"),
            "/a/b"
        );
        assert_eq!(
            relative_path(Some(m), "/system.slice/x.service"),
            "/system.slice/x.service"
        );
        assert_eq!(relative_path(Some(m), "system.slice"), "/system.slice");
        assert_eq!(relative_path(Some(m), "/sys/fs/cgroup/unified"), "/");
        assert_eq!(relative_path(None, "/"), "/");
    }

    #[test]
    fn subtree_membership_is_by_component() {
        assert!(within("/a/b", "/a"));
        assert!(within("/a", "/a"));
        assert!(!within("/ab", "/a"));
        assert!(within("/anything", "/"));
    }

    #[test]
    fn resolves_this_process_cgroup_when_mounted() {
        let mut r = CgroupResolver::new();
        let Some(mount) = r.mount().map(Path::to_path_buf) else {
            eprintln!("SKIP resolves_this_process_cgroup_when_mounted: no cgroup2 mount here");
            return;
        };
        let ino = fs::metadata(&mount).unwrap().ino();
        assert_eq!(r.cached(ino), None, "not walked yet");
        assert_eq!(r.path(ino).as_deref(), Some("/"));
        assert_eq!(r.cached(ino), Some(Some(&std::sync::Arc::from("/"))));
        assert_eq!(r.path(0), None);
        assert_eq!(r.cached(0), Some(None));
        // An id no cgroup has: asked before the walk, settled as gone by it.
        let missing = u64::MAX - 1;
        r.last_walk = None;
        assert_eq!(r.path(missing), None);
        assert!(r.gone.contains(&missing) && r.asked.is_empty());
        assert_eq!(r.cached(missing), Some(None));
        let walked = r.last_walk;
        r.last_walk = None;
        assert_eq!(r.path(missing), None);
        assert!(r.last_walk.is_none(), "a gone id walks no more");
        assert!(walked.is_some());
    }

    #[test]
    fn the_epoch_moves_exactly_when_an_answer_changes() {
        // A directory tree stands in for the hierarchy: the walk reads only directories.
        let root = tempfile::tempdir().unwrap();
        fs::create_dir_all(root.path().join("a/b")).unwrap();
        let ino = |rel: &str| fs::metadata(root.path().join(rel)).unwrap().ino();
        let mut r = CgroupResolver::new();
        r.mount = Some(root.path().to_path_buf());
        let e0 = r.epoch();
        r.walk();
        assert!(r.epoch() > e0, "paths learnt");
        assert_eq!(r.cached(ino("a/b")).flatten().map(|p| &**p), Some("/a/b"));
        let learnt = r.epoch();
        r.walk();
        assert_eq!(r.epoch(), learnt, "nothing changed: the answers stand");
        fs::rename(root.path().join("a"), root.path().join("c")).unwrap();
        r.walk();
        assert!(r.epoch() > learnt, "a renamed cgroup");
        assert_eq!(r.cached(ino("c/b")).flatten().map(|p| &**p), Some("/c/b"));
        let renamed = r.epoch();
        // An id asked for and not found: gone, a changed answer (unknown → none).
        // Walked "just now" (an hour ahead: however slow this machine, no walk yet).
        r.last_walk = Some(Instant::now() + Duration::from_secs(3600));
        assert_eq!(r.path(u64::MAX - 1), None);
        assert_eq!(r.epoch(), renamed, "asked, not walked yet");
        r.walk();
        assert!(r.epoch() > renamed, "an id settled as gone");
        assert_eq!(r.cached(u64::MAX - 1), Some(None));
    }
}
