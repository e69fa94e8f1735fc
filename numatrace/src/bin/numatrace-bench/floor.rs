//! The floor of each attached program: a do-nothing program of the same type on the same hook
//! (the eBPF object's `*_floor` programs and `fentry_probe`), each from its own copy of the
//! object so that the kernel keeps one run-time statistic per hook.

use anyhow::{Context as _, Result, anyhow};
use aya::{Btf, Ebpf, EbpfLoader};
use numatrace::{
    bpf::{
        OBJECT,
        loader::{LoadOptions, attach_program},
    },
    plan::{HookPlan, Plan},
};
use numatrace_common::{
    MAP_EVENTS, MAP_TASK_STATS, MAP_VMA_GAPS, MAP_VMA_STATS, PROG_FENTRY_PROBE,
    PROG_FLOOR_BTF_TRACEPOINT, PROG_FLOOR_FEXIT, PROG_FLOOR_KPROBE, PROG_FLOOR_KRETPROBE,
    PROG_FLOOR_TRACEPOINT,
};

/// The empty program of `program`'s type (perf_event samplers have none: they are not
/// triggered by the hook's events).
pub fn floor_of(program: &str) -> Option<&'static str> {
    [
        ("fentry_", PROG_FENTRY_PROBE),
        ("fexit_", PROG_FLOOR_FEXIT),
        ("kprobe_", PROG_FLOOR_KPROBE),
        ("kretprobe_", PROG_FLOOR_KRETPROBE),
        ("tp_", PROG_FLOOR_TRACEPOINT),
        ("btf_", PROG_FLOOR_BTF_TRACEPOINT),
    ]
    .into_iter()
    .find_map(|(prefix, floor)| program.starts_with(prefix).then_some(floor))
}

/// One empty program attached beside `twin` on hook `hook`.
pub struct Floor {
    pub hook: String,
    pub twin: &'static str,
    name: &'static str,
    ebpf: Ebpf,
}

impl Floor {
    /// (run time ns, runs) so far (both 0 while statistics are off).
    pub fn stats(&self) -> (u64, u64) {
        run_stats(&self.ebpf, self.name)
    }
}

/// (run time ns, runs) of program `name` of `ebpf` so far (both 0 while statistics are off, or
/// for a program it does not hold).
pub fn run_stats(ebpf: &Ebpf, name: &str) -> (u64, u64) {
    ebpf.program(name)
        .and_then(|p| p.info().ok())
        .map_or((0, 0), |i| (i.run_time().as_nanos() as u64, i.run_count()))
}

fn attach_one(
    h: &HookPlan,
    twin: &'static str,
    btf: Option<&Btf>,
    opts: &LoadOptions,
) -> Result<Floor> {
    let name = floor_of(twin).ok_or_else(|| anyhow!("{twin}: no floor program of its type"))?;
    // A copy of the object with its big maps at their smallest: only the program is used.
    let mut ebpf = EbpfLoader::new()
        .map_max_entries(MAP_TASK_STATS, 64)
        .map_max_entries(MAP_VMA_STATS, 64)
        .map_max_entries(MAP_VMA_GAPS, 64)
        .map_max_entries(MAP_EVENTS, 4096)
        .load(OBJECT)
        .context("loading a copy of the eBPF object")?;
    attach_program(&mut ebpf, name, h, btf, opts)
        .map_err(|e| anyhow!("{name} on {}: {e}", h.spec.name))?;
    Ok(Floor {
        hook: h.spec.name.to_owned(),
        twin,
        name,
        ebpf,
    })
}

/// Floors for every program of every hook of `plan` that attached (`attached` by hook name).
/// A floor that cannot attach is reported, not fatal.
pub fn attach_all(
    plan: &Plan,
    attached: impl Fn(&str) -> bool,
    opts: &LoadOptions,
) -> (Vec<Floor>, Vec<String>) {
    let btf = Btf::from_sys_fs().ok();
    let (mut floors, mut errors) = (Vec::new(), Vec::new());
    for h in plan.hooks.iter().filter(|h| attached(h.spec.name)) {
        for twin in h.programs() {
            if floor_of(twin).is_none() {
                continue;
            }
            match attach_one(h, twin, btf.as_ref(), opts) {
                Ok(f) => floors.push(f),
                Err(e) => errors.push(format!("{e:#}")),
            }
        }
    }
    (floors, errors)
}
