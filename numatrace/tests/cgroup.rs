//! Per-cgroup attribution: a workload started inside a fresh cgroup v2 directory is attributed
//! to it, and `stat --cgroup` follows that subtree.

mod common;

use std::{fs, path::PathBuf, process::Command};

use common::{Sysctl, workload_bin};
use numatrace::sources::cgroups::cgroup2_mount;

/// A cgroup directory made for the test, removed (after its processes exited) on drop.
struct TestCgroup {
    dir: PathBuf,
    rel: String,
}

impl TestCgroup {
    fn new(mount: &std::path::Path) -> std::io::Result<Self> {
        let name = format!("numatrace-test-{}", std::process::id());
        let dir = mount.join(&name);
        fs::create_dir_all(dir.join("inner"))?;
        Ok(Self {
            dir,
            rel: format!("/{name}"),
        })
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        let _ = fs::remove_dir(self.dir.join("inner"));
        let _ = fs::remove_dir(&self.dir);
    }
}

#[test]
fn a_workload_in_a_fresh_cgroup_is_attributed_to_it() {
    const TEST: &str = "a_workload_in_a_fresh_cgroup_is_attributed_to_it";
    require_root!(TEST);
    let Some(mount) = fs::read_to_string("/proc/self/mountinfo")
        .ok()
        .and_then(|t| cgroup2_mount(&t))
    else {
        common::skip(TEST, "no cgroup v2 hierarchy is mounted here");
        return;
    };
    let cg = match TestCgroup::new(&mount) {
        Ok(c) => c,
        Err(e) => {
            common::skip(
                TEST,
                format!("cannot create a cgroup under {}: {e}", mount.display()),
            );
            return;
        }
    };
    let _balancing = Sysctl::set("kernel.numa_balancing", "1").unwrap();
    // The workload runs in a child cgroup: `--cgroup` of the parent must include it.
    let procs = cg.dir.join("inner/cgroup.procs");
    let v = common::stat_window(&[], &["--cgroup", &cg.rel], || {
        let script = format!(
            "echo $$ > {} && exec {} threads --threads 4 --mem-mib 32 --duration 6s",
            procs.display(),
            workload_bin()
        );
        let out = Command::new("sh").args(["-c", &script]).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    });
    let inner = format!("{}/inner", cg.rel);
    assert_eq!(v["window"]["cgroup_filter"], cg.rel.as_str());
    let tasks = v["tasks"].as_array().unwrap();
    println!("cgroups: {}", v["cgroups"]);
    assert!(
        !tasks.is_empty(),
        "no task of the workload was counted: {}",
        v["totals"]
    );
    for t in tasks {
        assert_eq!(
            t["cgroup"],
            inner.as_str(),
            "a task outside the cgroup: {t}"
        );
        assert!(t["cgroup_id"].as_u64().unwrap() > 0);
        assert!(
            t["comm"].as_str().unwrap().starts_with("ntw-thread") || t["comm"] == "numatrace-workl",
            "{t}"
        );
    }
    let cgroups = v["cgroups"].as_array().unwrap();
    assert_eq!(cgroups.len(), 1, "{cgroups:?}");
    assert_eq!(cgroups[0]["path"], inner.as_str());
    assert_eq!(cgroups[0]["tasks"].as_u64().unwrap(), tasks.len() as u64);
    // A count whose hook did not attach is absent.
    let activity = |c: &serde_json::Value| {
        let n = |v: &serde_json::Value| v.as_u64().unwrap_or(0);
        n(&c["skipped_vmas_total"]) + n(&c["scan"]["pte_updates"]) + n(&c["hint_faults"]["faults"])
    };
    assert!(activity(&cgroups[0]) > 0, "{}", cgroups[0]);
    assert_eq!(
        activity(&cgroups[0]),
        activity(&v["totals"]),
        "the cgroup is the whole view"
    );
}
