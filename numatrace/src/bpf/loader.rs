//! Executes a plan: loads the object with the tracepoint offsets and config as globals, tests
//! fentry per function, attaches what the plan allows, and reports every hook's outcome.
//!
//! Links are owned by file descriptors of this process: whatever way it ends, the kernel
//! detaches and frees the programs when the last descriptor closes.

use aya::{
    Btf, Ebpf, EbpfLoader,
    programs::{
        BtfTracePoint, FEntry, FExit, KProbe, PerfEvent, ProgramError, TracePoint,
        perf_event::{PerfEventConfig, PerfEventScope, SamplePolicy, SoftwareEvent},
    },
};
use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::needs::Needs;
use crate::{
    kernel::facts::{FentryTest, KernelFacts},
    plan::{HookKind, HookPlan, Mechanism, Plan, Reason, fentry_fallback, kprobe_fallback, plan},
};
use numatrace_common::{
    Config, GLOBAL_CONFIG, GLOBAL_FORK_OFFSETS, GLOBAL_FUNC_CONFIG, GLOBAL_MIGRATE_OFFSETS,
    GLOBAL_MOVE_OFFSETS, GLOBAL_SCAN_RANGES, GLOBAL_SKIP_VMA_OFFSETS, GLOBAL_STICK_OFFSETS,
    GLOBAL_SWAP_OFFSETS, GLOBAL_TASK_OFFSETS, MAP_EVENTS, MAP_TASK_STATS, PROG_FENTRY_PROBE,
};

#[derive(Debug, Error)]
pub enum LoadError {
    #[error("loading the eBPF object: {0}")]
    Object(#[from] aya::EbpfError),
    #[error("filling the task map's free slots: {0}")]
    FreeSlots(String),
    #[error("no hook could be attached on this kernel:\n{summary}")]
    NothingAttached {
        summary: String,
        facts: Box<KernelFacts>,
        hooks: Vec<HookReport>,
    },
}

/// Sizes and switches chosen by the user.
#[derive(Clone, Copy, Debug)]
pub struct LoadOptions {
    pub max_tasks: u32,
    /// Capacity of the per-VMA map (`--max-vmas`).
    pub max_vmas: u32,
    pub ringbuf_bytes: u32,
    pub filter_tgids: bool,
    /// What the command reads (records, spans, optional aggregates): the programs do only
    /// that, see `bpf::needs`.
    pub needs: Needs,
    pub bpf_log: bool,
    /// CPU-clock sampling frequency of the scan-share fallback.
    pub sample_hz: u64,
    /// Do not use fentry/fexit (`--no-fentry`).
    pub no_fentry: bool,
}

impl Default for LoadOptions {
    /// System-wide, the maps at their default sizes, every record kind and aggregate, no
    /// timeline, 99 Hz sampling.
    fn default() -> Self {
        Self {
            max_tasks: numatrace_common::DEFAULT_MAX_TASKS,
            max_vmas: numatrace_common::MAX_VMAS,
            ringbuf_bytes: numatrace_common::DEFAULT_RINGBUF_BYTES,
            filter_tgids: false,
            needs: super::needs::EVERYTHING,
            bpf_log: false,
            sample_hz: 99,
            no_fentry: false,
        }
    }
}

impl LoadOptions {
    /// The defaults, with what `needs` declares the command reads.
    pub fn reading(needs: Needs) -> Self {
        Self {
            needs,
            ..Self::default()
        }
    }
}

/// What happened to one hook.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HookReport {
    pub name: String,
    pub kind: String,
    /// The best mechanism this kernel allows for it (`none`: nothing).
    pub mechanism: Mechanism,
    pub symbol: Option<String>,
    pub attached: bool,
    /// Why it is not attached, or why a better mechanism was not possible.
    pub reasons: Vec<String>,
    pub what: String,
}

/// A loaded, attached object and the report of what it covers. Dropping it detaches everything.
pub struct Session {
    pub ebpf: Ebpf,
    pub facts: KernelFacts,
    pub plan: Plan,
    pub hooks: Vec<HookReport>,
    /// The kernel's BTF, where readable (the task iterator loads against it).
    pub btf: Option<Btf>,
}

/// Unread ring-buffer bytes past which a record wakes the reader: a quarter of the ring, so
/// that a burst is read long before the ring fills while the timer (`READ_INTERVAL`) is
/// far off.
pub fn wake_bytes(ringbuf_bytes: u32) -> u32 {
    ringbuf_bytes / 4
}

/// Whether the kernel has `bpf_get_current_task_btf` (5.11+ upstream; asked of the kernel, as
/// every fact, not read off its version): the programs then read `current` with plain loads.
fn typed_current() -> u32 {
    let has = aya::sys::is_helper_supported(
        aya::programs::ProgramType::TracePoint,
        aya::sys::BpfHelper::BPF_FUNC_get_current_task_btf,
    );
    let has = has.unwrap_or_else(|e| {
        tracing::debug!("probing bpf_get_current_task_btf: {e}");
        false
    });
    tracing::debug!(typed_current = has, "current's fields by plain loads");
    u32::from(has)
}

fn load_object(plan: &Plan, opts: &LoadOptions) -> Result<Ebpf, aya::EbpfError> {
    let config = Config {
        filter_tgids: opts.filter_tgids.into(),
        emit_events: opts.needs.emit_events,
        emit_spans: opts.needs.emit_spans.into(),
        debug_log: opts.bpf_log.into(),
        self_tgid: std::process::id(),
        wake_bytes: wake_bytes(opts.ringbuf_bytes),
        reads: opts.needs.reads,
    };
    let o = &plan.offsets;
    let typed_current = typed_current();
    let ctx_reads = o.ctx_reads();
    tracing::debug!(
        ctx_reads = format_args!("{ctx_reads:#x}"),
        "tracepoints read in place"
    );
    EbpfLoader::new()
        .override_global(GLOBAL_CONFIG, &config, true)
        .override_global(GLOBAL_SKIP_VMA_OFFSETS, &o.skip_vma, true)
        .override_global(GLOBAL_MOVE_OFFSETS, &o.move_numa, true)
        .override_global(GLOBAL_SWAP_OFFSETS, &o.swap_numa, true)
        .override_global(GLOBAL_STICK_OFFSETS, &o.stick_numa, true)
        .override_global(GLOBAL_MIGRATE_OFFSETS, &o.migrate, true)
        .override_global(GLOBAL_FORK_OFFSETS, &o.fork, true)
        .override_global(GLOBAL_TASK_OFFSETS, &o.task, true)
        .override_global(GLOBAL_FUNC_CONFIG, &o.func, true)
        .override_global(GLOBAL_SCAN_RANGES, &o.scan_ranges, true)
        .override_global(numatrace_common::GLOBAL_PAGE_OFFSETS, &o.page, true)
        .override_global(numatrace_common::GLOBAL_NODE_MAP, &o.node_map, true)
        .override_global(numatrace_common::GLOBAL_GAP_OFFSETS, &o.gap, true)
        .override_global(numatrace_common::GLOBAL_TYPED_CURRENT, &typed_current, true)
        .override_global(numatrace_common::GLOBAL_TP_CTX_READS, &ctx_reads, true)
        .map_max_entries(MAP_TASK_STATS, opts.max_tasks)
        .map_max_entries(numatrace_common::MAP_TASK_SLOT, opts.max_tasks)
        .map_max_entries(numatrace_common::MAP_FREE_SLOTS, opts.max_tasks)
        .map_max_entries(numatrace_common::MAP_MARKED, opts.max_tasks)
        .map_max_entries(numatrace_common::MAP_VMA_STATS, opts.max_vmas)
        .map_max_entries(numatrace_common::MAP_VMA_GAPS, opts.max_vmas)
        .map_max_entries(MAP_EVENTS, opts.ringbuf_bytes)
        .load(super::OBJECT)
}

fn errno_of(e: &ProgramError) -> Option<i32> {
    match e {
        ProgramError::LoadError { io_error, .. } => io_error.raw_os_error(),
        ProgramError::SyscallError(s) => s.io_error.raw_os_error(),
        _ => None,
    }
}

/// Records that fentry was not tried on any function, and why.
fn fentry_not_tried(facts: &mut KernelFacts, why: &str) {
    for f in &facts.btf_functions {
        facts
            .fentry
            .insert(f.clone(), FentryTest::NotTried { why: why.into() });
    }
}

/// Loads the do-nothing fentry program against each BTF function of the catalogue.
fn fentry_tests(ebpf: &mut Ebpf, facts: &mut KernelFacts, btf: &Btf) {
    let Some(prog) = ebpf.program_mut(PROG_FENTRY_PROBE) else {
        return;
    };
    let prog: &mut FEntry = match prog.try_into() {
        Ok(p) => p,
        Err(_) => return,
    };
    for f in facts.btf_functions.clone() {
        let result = match prog.load(&f, btf) {
            Ok(()) => {
                let _ = prog.unload();
                FentryTest::Loaded
            }
            Err(e) => FentryTest::Refused {
                errno: errno_of(&e).unwrap_or(0),
                error: match &e {
                    ProgramError::LoadError { io_error, .. } => io_error.to_string(),
                    other => first_line(&other.to_string()),
                },
            },
        };
        facts.fentry.insert(f, result);
    }
}

fn first_line(s: &str) -> String {
    // Verifier logs can be long; the first line says what went wrong.
    s.lines()
        .next()
        .unwrap_or_default()
        .chars()
        .take(200)
        .collect()
}

fn err(what: &str, e: impl std::fmt::Display) -> String {
    format!("{what}: {}", first_line(&e.to_string()))
}

/// A load error with the verifier's verdict: its log ends with the reason, while its first
/// lines are often only warnings.
fn load_err(e: ProgramError) -> String {
    match &e {
        ProgramError::LoadError {
            io_error,
            verifier_log,
        } => {
            let log = verifier_log.to_string();
            let tail: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).collect();
            let tail = tail[tail.len().saturating_sub(8)..].join(" | ");
            // The reason is at the very end (before "processed N insns"): keep the end.
            let chars: Vec<char> = tail.chars().collect();
            let from = chars.len().saturating_sub(400);
            let ellipsis = if from > 0 { "…" } else { "" };
            format!(
                "load: {io_error}; verifier: {ellipsis}{}",
                chars[from..].iter().collect::<String>()
            )
        }
        _ => err("load", e),
    }
}

/// Loads and attaches one program; its type is in its name (see `plan::Programs`).
pub fn attach_program(
    ebpf: &mut Ebpf,
    program: &str,
    h: &HookPlan,
    btf: Option<&Btf>,
    opts: &LoadOptions,
) -> Result<(), String> {
    let prog = ebpf
        .program_mut(program)
        .ok_or_else(|| format!("program {program} missing from the object"))?;
    let symbol = h.symbol.as_deref().unwrap_or_default();
    let need_btf = || btf.ok_or_else(|| "kernel BTF unreadable".to_owned());
    if program.starts_with("fentry_") {
        let p: &mut FEntry = prog.try_into().map_err(|e| err("type", e))?;
        p.load(symbol, need_btf()?).map_err(load_err)?;
        p.attach().map_err(|e| err("attach", e))?;
    } else if program.starts_with("fexit_") {
        let p: &mut FExit = prog.try_into().map_err(|e| err("type", e))?;
        p.load(symbol, need_btf()?).map_err(load_err)?;
        p.attach().map_err(|e| err("attach", e))?;
    } else if program.starts_with("kprobe_") || program.starts_with("kretprobe_") {
        let p: &mut KProbe = prog.try_into().map_err(|e| err("type", e))?;
        p.load().map_err(load_err)?;
        p.attach(symbol, 0).map_err(|e| err("attach", e))?;
    } else if program.starts_with("perf_") {
        let p: &mut PerfEvent = prog.try_into().map_err(|e| err("type", e))?;
        p.load().map_err(load_err)?;
        let cpus = aya::util::online_cpus().map_err(|(what, e)| err(what, e))?;
        for cpu in cpus {
            p.attach(
                PerfEventConfig::Software(SoftwareEvent::CpuClock),
                PerfEventScope::AllProcessesOneCpu { cpu },
                SamplePolicy::Frequency(opts.sample_hz),
                false,
            )
            .map_err(|e| err("attach", e))?;
        }
    } else if let HookKind::BtfTracepoint { tracepoint, .. } = h.spec.kind {
        let name = tracepoint.split(':').nth(1).unwrap_or(tracepoint);
        let p: &mut BtfTracePoint = prog.try_into().map_err(|e| err("type", e))?;
        p.load(name, need_btf()?).map_err(load_err)?;
        p.attach().map_err(|e| err("attach", e))?;
    } else if let HookKind::Tracepoint { category, name, .. } = h.spec.kind {
        let p: &mut TracePoint = prog.try_into().map_err(|e| err("type", e))?;
        p.load().map_err(load_err)?;
        p.attach(category, name).map_err(|e| err("attach", e))?;
    } else {
        return Err(format!("no way to attach {program}"));
    }
    Ok(())
}

fn attach(
    ebpf: &mut Ebpf,
    h: &HookPlan,
    btf: Option<&Btf>,
    opts: &LoadOptions,
) -> Result<(), String> {
    for program in h.programs() {
        attach_program(ebpf, program, h, btf, opts)?;
    }
    Ok(())
}

/// Unloads a hook's programs (detaching whatever of them did attach).
fn detach(ebpf: &mut Ebpf, h: &HookPlan) {
    for name in h.programs() {
        let Some(p) = ebpf.program_mut(name) else {
            continue;
        };
        let result = if name.starts_with("fentry_") {
            <&mut FEntry>::try_from(p).map(|p| p.unload())
        } else if name.starts_with("fexit_") {
            <&mut FExit>::try_from(p).map(|p| p.unload())
        } else if name.starts_with("kprobe_") || name.starts_with("kretprobe_") {
            // Half of a kprobe/kretprobe pair may have attached before the other was refused.
            <&mut KProbe>::try_from(p).map(|p| p.unload())
        } else {
            continue;
        };
        match result {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::debug!(program = name, "unload: {e}"),
            Err(e) => tracing::debug!(program = name, "unload: {e}"),
        }
    }
}

fn report(h: &HookPlan, attached: Result<(), String>) -> HookReport {
    let mut reasons: Vec<String> = h.reasons.iter().map(ToString::to_string).collect();
    let attached = match attached {
        Ok(()) => true,
        Err(e) => {
            // A hook the kernel cannot take already says why; otherwise say what failed.
            if h.mechanism != Mechanism::None {
                reasons.push(e);
            }
            false
        }
    };
    HookReport {
        name: h.spec.name.to_owned(),
        kind: match h.spec.kind {
            HookKind::Tracepoint { .. } => "tracepoint",
            HookKind::Function { .. } => "function",
            HookKind::BtfTracepoint { .. } => "tp_btf",
            HookKind::Sampling => "sampling",
        }
        .to_owned(),
        mechanism: h.mechanism,
        symbol: h.symbol.clone(),
        attached,
        reasons,
        what: h.spec.what.to_owned(),
    }
}

impl Session {
    /// Gathers facts, plans, loads and attaches. Fails only when nothing at all attaches.
    pub fn start(mut facts: KernelFacts, opts: &LoadOptions) -> Result<Self, LoadError> {
        // Tracepoint offsets do not depend on the fentry tests, so a first plan gives the
        // globals; the object is then loaded once and used for the tests and the real plan.
        let mut ebpf = load_object(&plan(&facts), opts)?;
        fill_free_slots(&mut ebpf, opts.max_tasks)
            .map_err(|e| LoadError::FreeSlots(e.to_string()))?;
        // One parse of the kernel BTF serves the fentry tests and the fentry/fexit attaches.
        let btf = Btf::from_sys_fs();
        match (&btf, opts.no_fentry) {
            (_, true) => fentry_not_tried(&mut facts, "--no-fentry"),
            (Err(e), false) => fentry_not_tried(&mut facts, &format!("kernel BTF unreadable: {e}")),
            (Ok(btf), false) => fentry_tests(&mut ebpf, &mut facts, btf),
        }
        let mut plan = plan(&facts);
        let btf = btf.ok();
        let mut hooks = Vec::with_capacity(plan.hooks.len());
        for h in &mut plan.hooks {
            let mut outcome = if h.will_attach() {
                attach(&mut ebpf, h, btf.as_ref(), opts)
            } else if h.mechanism == Mechanism::None {
                Err(String::new())
            } else {
                Err("no program for this hook in this numatrace version".into())
            };
            // The probe program loads where the real ones may not (a verifier that checks
            // what they read, e.g. a changed signature): fall back to the kprobe.
            // A refused fentry program falls back to the kprobe; a kprobe preferred on a
            // preemptible kernel that is refused, to the fentry that loaded.
            let fallback = outcome.as_ref().err().and_then(|e| {
                kprobe_fallback(&facts, h)
                    .map(|k| (k, Mechanism::Fentry, Mechanism::Kprobe, e.clone()))
                    .or_else(|| {
                        fentry_fallback(&facts, h)
                            .map(|f| (f, Mechanism::Kprobe, Mechanism::Fentry, e.clone()))
                    })
            });
            if let Some((mut alt, refused, used, e)) = fallback {
                detach(&mut ebpf, h);
                tracing::warn!(hook = %h.spec.name, "{refused} refused ({e}); using {used}");
                alt.reasons.push(Reason::FellBack {
                    refused,
                    used,
                    error: e,
                });
                outcome = attach(&mut ebpf, &alt, btf.as_ref(), opts);
                *h = alt;
            }
            hooks.push(report(h, outcome));
        }
        // A hook carried by another's program that did not attach falls back to its own.
        let orphans: Vec<usize> = (0..plan.hooks.len())
            .filter(|&i| {
                plan.hooks[i]
                    .carried_by
                    .is_some_and(|c| !hooks.iter().any(|r| r.name == c && r.attached))
            })
            .collect();
        for i in orphans {
            let Some(mut own) = plan.hooks[i].uncarried() else {
                continue;
            };
            let carrier = plan.hooks[i].carried_by.unwrap_or_default();
            tracing::warn!(hook = %own.spec.name, "{carrier} did not attach; using its own program");
            own.reasons.push(Reason::FellBack {
                refused: Mechanism::TpBtf,
                used: own.mechanism,
                error: format!("{carrier} did not attach"),
            });
            let outcome = attach(&mut ebpf, &own, btf.as_ref(), opts);
            hooks[i] = report(&own, outcome);
            plan.hooks[i] = own;
            // As the plan says now (the programs read the value loaded with them).
            plan.offsets.gap.whole_hook = 0;
        }
        for h in &hooks {
            if h.attached {
                tracing::debug!(hook = %h.name, mechanism = %h.mechanism, "attached");
            } else {
                tracing::debug!(hook = %h.name, reasons = ?h.reasons, "not attached");
            }
        }
        if !hooks.iter().any(|h| h.attached) {
            let why = hooks
                .iter()
                .map(|h| format!("  {}: {}", h.name, h.reasons.join("; ")))
                .collect::<Vec<_>>()
                .join("\n");
            return Err(LoadError::NothingAttached {
                summary: why,
                facts: Box::new(facts),
                hooks,
            });
        }
        // The reliability suite's forced panic: every program is attached now.
        crate::test_panic("attach");
        Ok(Self {
            ebpf,
            facts,
            plan,
            hooks,
            btf,
        })
    }
}

/// Fills the free-slot stack of a freshly loaded object with its `n` slots, so that pops come
/// out 0, 1, 2, …: before any program is attached.
fn fill_free_slots(ebpf: &mut aya::Ebpf, n: u32) -> Result<(), aya::maps::MapError> {
    let map = ebpf
        .map_mut(numatrace_common::MAP_FREE_SLOTS)
        .ok_or_else(|| aya::maps::MapError::InvalidName {
            name: numatrace_common::MAP_FREE_SLOTS.to_string(),
        })?;
    let mut free: aya::maps::Stack<&mut aya::maps::MapData, numatrace_common::SlotRef> =
        aya::maps::Stack::try_from(map)?;
    for slot in (0..n).rev() {
        free.push(
            &numatrace_common::SlotRef {
                slot,
                generation: 1,
            },
            0,
        )?;
    }
    Ok(())
}
