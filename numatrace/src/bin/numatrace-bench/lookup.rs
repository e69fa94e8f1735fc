//! How numatrace's programs find the running task's entry, measured on the hooks they run on:
//! beside each hook's programs, three from the `numatrace-lookups` object that do only that and
//! one count: through the pid hash numatrace used, through BPF task storage (issue 37's
//! proposed replacement), and through a per-CPU cache of the last task's slot in an array. Each
//! hook's programs come from their own copy of the object, so that the kernel keeps one
//! run-time statistic per hook, and every copy shares the same maps (pinned while the copies
//! load), as numatrace's programs share one task map: a task's entry is made at its first
//! event on any hook, not once per hook.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, anyhow};
use aya::{Btf, Ebpf, EbpfLoader};
use numatrace::{
    bpf::{
        LOOKUPS_OBJECT,
        loader::{LoadOptions, attach_program},
    },
    kernel::private_mount::{self, Fs},
    plan::{HookPlan, Plan},
};
use numatrace_common::{LOOKUP_PROGRAMS, LOOKUP_SHARED_MAPS, PROG_EXIT, PROG_FORK};

/// The LRU hash's capacity (one, shared by every copy): above the tasks a benchmark run
/// creates, so that no lookup pays an eviction.
const TASKS: u32 = 8192;

/// A directory under the private bpffs, where the shared maps are pinned while the copies
/// load; removed with its pins when dropped (the maps live on in the copies).
struct Pins(PathBuf);

impl Pins {
    fn new() -> Result<Self> {
        let dir =
            Path::new(Fs::Bpffs.dir()).join(format!("numatrace-bench-{}", std::process::id()));
        // A new directory (an existing one is an error, never reused).
        std::fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(Self(dir))
    }
}

impl Drop for Pins {
    fn drop(&mut self) {
        for name in LOOKUP_SHARED_MAPS {
            let _ = std::fs::remove_file(self.0.join(name));
        }
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// The programs of `program`'s type: [pid hash, task storage, per-CPU cache]; `None` for the
/// samplers.
pub fn trio_of(program: &str) -> Option<[&'static str; 3]> {
    LOOKUP_PROGRAMS
        .iter()
        .find(|(prefix, _)| program.starts_with(prefix))
        .map(|&(_, names)| names)
}

/// One hook's three, attached beside `twin`, its first program.
pub struct Lookup {
    pub hook: String,
    pub mechanism: String,
    pub twin: &'static str,
    names: [&'static str; 3],
    ebpf: Ebpf,
}

impl Lookup {
    /// (run time ns, runs) of the pid-hash program, the task-storage one and the cached one.
    pub fn stats(&self) -> [(u64, u64); 3] {
        self.names
            .map(|name| crate::floor::run_stats(&self.ebpf, name))
    }
}

fn attach_one(
    h: &HookPlan,
    twin: &'static str,
    pins: &Pins,
    btf: Option<&Btf>,
    opts: &LoadOptions,
) -> Result<Lookup> {
    let names = trio_of(twin).ok_or_else(|| anyhow!("{twin}: no lookup programs of its type"))?;
    let mut loader = EbpfLoader::new();
    loader
        .map_max_entries("LOOKUP_TASKS", TASKS)
        // The task-storage map: aya 0.16 creates it, and has no type of its own for it.
        .allow_unsupported_maps();
    for name in LOOKUP_SHARED_MAPS {
        loader.map_pin_path(name, pins.0.join(name));
    }
    let mut ebpf = loader
        .load(LOOKUPS_OBJECT)
        .context("loading the lookup object (BPF task storage for tracing programs: 5.12+)")?;
    for name in names {
        attach_program(&mut ebpf, name, h, btf, opts)
            .map_err(|e| anyhow!("{name} on {}: {e}", h.spec.name))?;
    }
    Ok(Lookup {
        hook: h.spec.name.to_owned(),
        mechanism: h.mechanism.to_string(),
        twin,
        names,
        ebpf,
    })
}

/// The three on every hook of `plan` that attached (`attached` by hook name), but fork's and
/// exit's, beside its first program of a type they have. Three that cannot attach on a hook
/// are reported, not fatal; an object that does not load (no task storage: before 5.12) is
/// reported once. The copies load in a private mount namespace, on a bpffs instance of its own
/// (the maps are pinned only while the copies load, and in no one else's view).
pub fn attach_all(
    plan: &Plan,
    attached: impl Fn(&str) -> bool + Sync,
    opts: &LoadOptions,
) -> (Vec<Lookup>, Vec<String>) {
    private_mount::in_private_namespace(|ns| match ns.mount_private_bpffs() {
        Ok(()) => attach_pinned(plan, &attached, opts),
        Err(e) => (Vec::new(), vec![e]),
    })
    .unwrap_or_else(|e| (Vec::new(), vec![e]))
}

fn attach_pinned(
    plan: &Plan,
    attached: &(impl Fn(&str) -> bool + Sync),
    opts: &LoadOptions,
) -> (Vec<Lookup>, Vec<String>) {
    let btf = Btf::from_sys_fs().ok();
    let (mut found, mut errors) = (Vec::new(), Vec::new());
    let pins = match Pins::new() {
        Ok(p) => p,
        Err(e) => return (found, vec![format!("{e:#}")]),
    };
    for h in plan.hooks.iter().filter(|h| attached(h.spec.name)) {
        // Fork's program follows children and exit's hands an entry over: neither finds or
        // creates the running task's entry, and programs there would create one per new task.
        if h.programs()
            .iter()
            .any(|p| [PROG_FORK, PROG_EXIT].contains(p))
        {
            continue;
        }
        let Some(&twin) = h.programs().iter().find(|p| trio_of(p).is_some()) else {
            continue;
        };
        match attach_one(h, twin, &pins, btf.as_ref(), opts) {
            Ok(l) => found.push(l),
            // The same object fails the same way on every hook.
            Err(e) if e.downcast_ref::<aya::EbpfError>().is_some() => {
                errors.push(format!("{e:#}"));
                break;
            }
            Err(e) => errors.push(format!("{e:#}")),
        }
    }
    (found, errors)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_hooked_program_type_but_the_sampler_has_its_three() {
        assert_eq!(
            trio_of("fentry_task_numa_fault"),
            Some([
                "fentry_lookup_hash",
                "fentry_lookup_ts",
                "fentry_lookup_cpu"
            ])
        );
        assert_eq!(
            trio_of("kretprobe_task_numa_work").map(|t| t[0]),
            Some("kretprobe_lookup_hash")
        );
        assert_eq!(
            trio_of("tp_sched_stick_numa").map(|t| t[2]),
            Some("tp_lookup_cpu")
        );
        assert_eq!(trio_of("btf_skip_vma").map(|t| t[1]), Some("btf_lookup_ts"));
        assert_eq!(trio_of("perf_sample_scan"), None);
    }
}
