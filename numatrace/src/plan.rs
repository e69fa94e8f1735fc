//! The one place that knows about kernel differences: a catalogue of every hook of the product
//! and a pure `plan(facts)` that decides, hook by hook, how (or why not) to attach it.

use serde::{Deserialize, Serialize};

use crate::kernel::{
    btf::BtfParam,
    facts::{FentryTest, KernelFacts, KernelVersion},
    tracefs::Format,
};
use numatrace_common::*;

pub use crate::kernel::catalogue::{
    FentryVariant, GAP_FIELDS, HOOKS, HookKind, HookSpec, Programs,
};

/// How a hook is (or would be) attached.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mechanism {
    Tracepoint,
    TpBtf,
    Fentry,
    Kprobe,
    PerfEvent,
    None,
}

impl std::fmt::Display for Mechanism {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Tracepoint => "tracepoint",
            Self::TpBtf => "tp_btf",
            Self::Fentry => "fentry",
            Self::Kprobe => "kprobe",
            Self::PerfEvent => "perf_event",
            Self::None => "none",
        })
    }
}

/// The decision for one hook.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HookPlan {
    pub spec: HookSpec,
    /// What this kernel allows (`None`: nothing).
    pub mechanism: Mechanism,
    /// For functions: the symbol that would be hooked.
    pub symbol: Option<String>,
    /// Why a better mechanism, or any, is not possible here.
    pub reasons: Vec<String>,
    /// For fentry: which of the hook's fentry variants matches this kernel's signature.
    pub fentry_variant: usize,
}

impl PartialEq for HookSpec {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}
impl Eq for HookSpec {}

impl HookPlan {
    /// The programs to attach: those of the chosen mechanism (empty: nothing to attach).
    pub fn programs(&self) -> Vec<&'static str> {
        match (self.spec.programs, self.mechanism) {
            (Programs::Function { fentry, .. }, Mechanism::Fentry) => fentry
                .get(self.fentry_variant)
                .map_or_else(Vec::new, |v| v.programs.to_vec()),
            (Programs::Function { kprobe, .. }, Mechanism::Kprobe) => kprobe.to_vec(),
            (Programs::Tracepoint(p), Mechanism::Tracepoint)
            | (Programs::PerfEvent(p), Mechanism::PerfEvent)
            | (Programs::TpBtf(p), Mechanism::TpBtf) => vec![p],
            _ => vec![],
        }
    }

    /// The loader attaches it: the kernel allows it and this version has programs for it.
    pub fn will_attach(&self) -> bool {
        !self.programs().is_empty()
    }
}

/// Field offsets and conventions handed to the programs as globals.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Offsets {
    pub skip_vma: SkipVmaOffsets,
    pub move_numa: MoveOffsets,
    pub swap_numa: PairOffsets,
    pub stick_numa: PairOffsets,
    pub migrate: MigrateOffsets,
    pub fork: ForkOffsets,
    pub task: TaskOffsets,
    pub func: FuncConfig,
    pub scan_ranges: ScanRanges,
    pub page: PageOffsets,
    pub node_map: NodeMap,
    pub gap: GapOffsets,
}

impl Default for Offsets {
    fn default() -> Self {
        Self {
            skip_vma: SkipVmaOffsets::ABSENT,
            move_numa: MoveOffsets::ABSENT,
            swap_numa: PairOffsets::ABSENT,
            stick_numa: PairOffsets::ABSENT,
            migrate: MigrateOffsets::ABSENT,
            fork: ForkOffsets::ABSENT,
            task: TaskOffsets::ABSENT,
            func: FuncConfig::DEFAULT,
            scan_ranges: ScanRanges {
                task_numa_work: [0, 0],
                change_prot_numa: [0, 0],
            },
            page: PageOffsets::ABSENT,
            node_map: NodeMap::EMPTY,
            gap: GapOffsets::ABSENT,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub hooks: Vec<HookPlan>,
    pub offsets: Offsets,
}

impl Plan {
    pub fn attachable(&self) -> impl Iterator<Item = &HookPlan> {
        self.hooks.iter().filter(|h| h.will_attach())
    }
}

fn off(f: &Format, names: &[&str], size: u32) -> u32 {
    f.offset(names, size).unwrap_or(FIELD_ABSENT)
}

/// Offsets of one tracepoint; `Err` names the required fields it lacks.
fn tracepoint_offsets(name: &str, f: &Format, o: &mut Offsets) -> Result<(), Vec<&'static str>> {
    let mut missing = Vec::new();
    let mut need = |v: u32, field: &'static str| {
        if v == FIELD_ABSENT {
            missing.push(field);
        }
        v
    };
    match name {
        "sched:sched_skip_vma_numa" => {
            o.skip_vma = SkipVmaOffsets {
                numa_scan_offset: off(f, &["numa_scan_offset"], 8),
                vm_start: off(f, &["vm_start"], 8),
                vm_end: off(f, &["vm_end"], 8),
                reason: need(off(f, &["reason"], 4), "reason"),
            }
        }
        "sched:sched_move_numa" => {
            o.move_numa = MoveOffsets {
                pid: need(off(f, &["pid"], 4), "pid"),
                tgid: need(off(f, &["tgid"], 4), "tgid"),
                src_cpu: off(f, &["src_cpu"], 4),
                src_nid: off(f, &["src_nid"], 4),
                dst_cpu: off(f, &["dst_cpu"], 4),
                dst_nid: off(f, &["dst_nid"], 4),
            }
        }
        "sched:sched_swap_numa" | "sched:sched_stick_numa" => {
            // Before 5.10 stick_numa had one task (pid/tgid) and no destination task.
            let p = PairOffsets {
                src_pid: need(off(f, &["src_pid", "pid"], 4), "src_pid"),
                src_tgid: need(off(f, &["src_tgid", "tgid"], 4), "src_tgid"),
                src_cpu: off(f, &["src_cpu"], 4),
                src_nid: off(f, &["src_nid"], 4),
                dst_pid: off(f, &["dst_pid"], 4),
                dst_tgid: off(f, &["dst_tgid"], 4),
                dst_cpu: off(f, &["dst_cpu"], 4),
                dst_nid: off(f, &["dst_nid"], 4),
            };
            if name == "sched:sched_swap_numa" {
                need(p.dst_pid, "dst_pid");
                need(p.dst_tgid, "dst_tgid");
                o.swap_numa = p;
            } else {
                o.stick_numa = p;
            }
        }
        "migrate:mm_migrate_pages" => {
            o.migrate = MigrateOffsets {
                succeeded: need(off(f, &["succeeded"], 8), "succeeded"),
                failed: need(off(f, &["failed"], 8), "failed"),
                thp_succeeded: off(f, &["thp_succeeded"], 8),
                thp_failed: off(f, &["thp_failed"], 8),
                mode: off(f, &["mode"], 4),
                reason: need(off(f, &["reason"], 4), "reason"),
            }
        }
        "sched:sched_process_fork" => {
            o.fork = ForkOffsets {
                parent_pid: off(f, &["parent_pid"], 4),
                child_pid: need(off(f, &["child_pid"], 4), "child_pid"),
            }
        }
        _ => {}
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(missing)
    }
}

fn plan_tracepoint(facts: &KernelFacts, spec: HookSpec, offsets: &mut Offsets) -> HookPlan {
    let HookKind::Tracepoint { since, .. } = spec.kind else {
        unreachable!("plan_tracepoint called for another kind of hook")
    };
    let mut plan = HookPlan {
        spec,
        mechanism: Mechanism::None,
        symbol: None,
        reasons: Vec::new(),
        fentry_variant: 0,
    };
    match facts.tracepoints.get(spec.name) {
        None if facts.tracefs.is_none() => plan.reasons.push("tracefs is not available".into()),
        None => plan.reasons.push(match since {
            Some(v) if facts.version < v => format!(
                "tracepoint absent on this kernel version ({} < {}.{}, where it was added)",
                facts.version, v.major, v.minor
            ),
            _ => "tracepoint absent on this kernel".into(),
        }),
        Some(format) => match tracepoint_offsets(spec.name, format, offsets) {
            Ok(()) => plan.mechanism = Mechanism::Tracepoint,
            Err(missing) => plan.reasons.push(format!(
                "tracepoint format lacks field(s) {}",
                missing.join(", ")
            )),
        },
    }
    plan
}

fn errno_name(errno: i32) -> &'static str {
    match errno {
        libc::EPERM => "EPERM",
        libc::EACCES => "EACCES",
        libc::EINVAL => "EINVAL",
        libc::ENOENT => "ENOENT",
        ENOTSUPP => "ENOTSUPP",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::ESRCH => "ESRCH",
        libc::E2BIG => "E2BIG",
        _ => "errno",
    }
}

/// Kernel-internal ENOTSUPP, which BPF returns for trampolines it cannot build; not in libc.
const ENOTSUPP: i32 = 524;

/// `sig` as `(name, name)` for messages.
fn signature_text(sig: &[BtfParam]) -> String {
    let names: Vec<&str> = sig.iter().map(|p| p.name.as_str()).collect();
    format!("({})", names.join(", "))
}

/// Position of the parameter named `names` (`a|b`: either) in `sig`.
fn arg_position(sig: &[BtfParam], names: &str) -> Option<u32> {
    sig.iter()
        .position(|p| names.split('|').any(|n| n == p.name))
        .map(|i| i as u32)
}

/// When fentry may be chosen for a function hook.
#[derive(Clone, Copy, PartialEq, Eq)]
enum FentryUse {
    /// Not at all (its programs were refused).
    Never,
    /// Where it loads, unless the kernel is preemptible and the kprobe works.
    Auto,
    /// Where it loads (the kprobe chosen for a preemptible kernel was refused).
    First,
}

/// How `probes` says that a kprobe was chosen over a working fentry.
const PREEMPT_REASON: &str = "fentry not used: this kernel preempts kernel code";

fn plan_function(facts: &KernelFacts, spec: HookSpec, fentry: FentryUse) -> HookPlan {
    let HookKind::Function { symbols, args } = spec.kind else {
        unreachable!("plan_function called for another kind of hook")
    };
    let Programs::Function {
        fentry: variants, ..
    } = spec.programs
    else {
        unreachable!("a function hook has function programs")
    };
    let mut reasons = Vec::new();
    // Prefer the first candidate the kernel has at all.
    let present = symbols
        .iter()
        .find(|s| facts.kallsyms.contains(**s) || facts.btf_functions.contains(**s));
    let Some(sym) = present else {
        reasons.push(format!(
            "symbol {} absent from kallsyms and BTF (inlined, renamed or not built in)",
            symbols.join(" / ")
        ));
        return HookPlan {
            spec,
            mechanism: Mechanism::None,
            symbol: None,
            reasons,
            fentry_variant: 0,
        };
    };
    let sig = facts.btf_signatures.get(*sym);
    let names: Vec<&str> = sig.map_or_else(Vec::new, |s| s.iter().map(|p| &*p.name).collect());
    let variant = variants.iter().position(|v| v.matches(&names));

    let fentry_ok = if fentry == FentryUse::Never {
        false
    } else if !facts.btf_vmlinux {
        reasons.push("fentry: no kernel BTF (/sys/kernel/btf/vmlinux)".into());
        false
    } else if !facts.btf_functions.contains(*sym) {
        reasons.push(format!("fentry: {sym} has no BTF FUNC entry"));
        false
    } else if variant.is_none() {
        reasons.push(format!(
            "fentry: no program for {sym}{} (this numatrace reads {})",
            sig.map_or_else(|| "(?)".into(), |s| signature_text(s)),
            variants
                .iter()
                .map(|v| format!("({})", v.params.join(", ")))
                .collect::<Vec<_>>()
                .join(" or ")
        ));
        false
    } else {
        match facts.fentry.get(*sym) {
            Some(FentryTest::Loaded) => true,
            Some(FentryTest::Refused { errno, error }) => {
                reasons.push(format!(
                    "fentry refused: {} ({errno}): {error}",
                    errno_name(*errno)
                ));
                false
            }
            Some(FentryTest::NotTried { why }) => {
                reasons.push(format!("fentry not tried: {why}"));
                false
            }
            None => {
                reasons.push("fentry not tested".into());
                false
            }
        }
    };
    // The kprobe programs read arguments at the positions BTF names; without BTF, at the
    // positions every kernel up to 6.13 has.
    let unknown_args: Vec<&str> = match sig {
        Some(sig) => args
            .iter()
            .copied()
            .filter(|a| arg_position(sig, a).is_none())
            .collect(),
        None => Vec::new(),
    };
    let kprobe_ok = facts.kprobes && facts.kallsyms.contains(*sym) && unknown_args.is_empty();
    let preempted = facts
        .preemption
        .as_ref()
        .filter(|p| p.model.preemptible() && fentry == FentryUse::Auto);
    let mechanism = if fentry_ok && let (Some(p), true) = (preempted, kprobe_ok) {
        reasons.push(format!(
            "{PREEMPT_REASON} (preempt={}, from {}), and the kernel skips a trampoline program \
             on a CPU where a preempted run of it is pending (lost calls); a kprobe program runs \
             with preemption off",
            p.model, p.from
        ));
        Mechanism::Kprobe
    } else if fentry_ok {
        Mechanism::Fentry
    } else if !facts.kprobes {
        reasons.push("kprobe: kprobes not built in (no kprobe PMU, no kprobe_events)".into());
        Mechanism::None
    } else if !facts.kallsyms.contains(*sym) {
        reasons.push(format!("kprobe: {sym} is not in kallsyms (inlined?)"));
        Mechanism::None
    } else if !unknown_args.is_empty() {
        reasons.push(format!(
            "kprobe: {sym}{} has no parameter named {}",
            sig.map_or_else(String::new, |s| signature_text(s)),
            unknown_args.join(", ")
        ));
        Mechanism::None
    } else {
        if sig.is_none() && !args.is_empty() {
            reasons.push(format!(
                "kprobe: no BTF signature of {sym}: arguments read at their usual positions"
            ));
        }
        Mechanism::Kprobe
    };
    HookPlan {
        spec,
        mechanism,
        symbol: Some((*sym).to_owned()),
        reasons,
        fentry_variant: variant.unwrap_or(0),
    }
}

/// Whether the kernel could take the hook's kprobe instead (after its fentry programs were
/// refused at load): the same checks as the plan's, without the fentry test.
pub fn kprobe_fallback(facts: &KernelFacts, h: &HookPlan) -> Option<HookPlan> {
    if h.mechanism != Mechanism::Fentry {
        return None;
    }
    let k = plan_function(facts, h.spec, FentryUse::Never);
    (k.mechanism == Mechanism::Kprobe).then(|| HookPlan {
        mechanism: Mechanism::Kprobe,
        reasons: h.reasons.clone(),
        ..k
    })
}

/// The hook's fentry programs, when its kprobe was chosen only because the kernel is
/// preemptible and the kernel refused the kprobe.
pub fn fentry_fallback(facts: &KernelFacts, h: &HookPlan) -> Option<HookPlan> {
    if h.mechanism != Mechanism::Kprobe || !h.reasons.iter().any(|r| r.starts_with(PREEMPT_REASON))
    {
        return None;
    }
    let f = plan_function(facts, h.spec, FentryUse::First);
    (f.mechanism == Mechanism::Fentry).then(|| HookPlan {
        reasons: h
            .reasons
            .iter()
            .filter(|r| !r.starts_with(PREEMPT_REASON))
            .cloned()
            .chain(std::iter::once(
                "fentry on a preemptible kernel: runs it skips are in program_misses".to_owned(),
            ))
            .collect(),
        ..f
    })
}

fn field(facts: &KernelFacts, name: &str) -> u32 {
    facts
        .btf_fields
        .get(name)
        .copied()
        .flatten()
        .unwrap_or(FIELD_ABSENT)
}

/// mpol_misplaced's second argument is a `struct vm_fault *` (6.11+), not the vma.
fn mpol_takes_vmf(facts: &KernelFacts) -> bool {
    facts
        .btf_signatures
        .get("mpol_misplaced")
        .and_then(|s| s.get(1))
        .is_some_and(|p| p.name == "vmf" || p.ty == "struct vm_fault *")
}

/// The hooked functions' argument positions, by parameter name in BTF (the usual positions
/// where BTF does not say), and the return convention of migrate_misplaced_*.
fn func_config(facts: &KernelFacts) -> FuncConfig {
    let mut c = FuncConfig::DEFAULT;
    let sig = |f: &str| facts.btf_signatures.get(f).map(Vec::as_slice);
    let migrate = sig("migrate_misplaced_folio").or_else(|| sig("migrate_misplaced_page"));
    let set = |slot: &mut u32, sig: Option<&[BtfParam]>, names: &str| {
        if let Some(i) = sig.and_then(|s| arg_position(s, names)) {
            *slot = i;
        }
    };
    set(&mut c.migrate_page_arg, migrate, "page|folio");
    set(&mut c.migrate_node_arg, migrate, "node");
    let mpol = sig("mpol_misplaced");
    set(&mut c.mpol_page_arg, mpol, "page|folio");
    set(&mut c.mpol_vma_arg, mpol, "vma|vmf");
    set(&mut c.mpol_addr_arg, mpol, "addr");
    let fault = sig("task_numa_fault");
    set(&mut c.fault_node_arg, fault, "mem_node");
    set(&mut c.fault_pages_arg, fault, "pages");
    set(&mut c.fault_flags_arg, fault, "flags");
    set(&mut c.prot_vma_arg, sig("change_prot_numa"), "vma");
    // int return, 0 on success, from 6.10; 1 = migrated before.
    c.migrate_ok_is_zero = u32::from(facts.version >= KernelVersion::new(6, 10, 0));
    c
}

/// Globals of the function hooks: BTF offsets, per-version conventions, sampled ranges.
fn function_globals(facts: &KernelFacts, o: &mut Offsets) {
    o.task = TaskOffsets {
        sum_exec_runtime: field(facts, "task_struct.se.sum_exec_runtime"),
        node_stamp: field(facts, "task_struct.node_stamp"),
        mm: field(facts, "task_struct.mm"),
        mm_numa_scan_seq: field(facts, "mm_struct.numa_scan_seq"),
        numa_preferred_nid: field(facts, "task_struct.numa_preferred_nid"),
        flags: field(facts, "task_struct.flags"),
        start_time: field(facts, "task_struct.start_time"),
    };
    o.func = func_config(facts);
    // A large folio's total mapcount: folio._large_mapcount (6.11+), else the PMD mappings in
    // folio._entire_mapcount (6.2-6.10) or in the first tail page's compound_mapcount (older).
    let large_mapcount = [
        field(facts, "folio._large_mapcount"),
        field(facts, "folio._entire_mapcount"),
    ]
    .into_iter()
    .find(|&o| o != FIELD_ABSENT)
    .or_else(|| {
        let off = field(facts, "page.compound_mapcount");
        (off != FIELD_ABSENT).then_some(facts.page_size? + off)
    })
    .unwrap_or(FIELD_ABSENT);
    o.page = PageOffsets {
        flags: field(facts, "page.flags"),
        head_bit: facts.page_head_bit.unwrap_or(FIELD_ABSENT),
        mapcount: field(facts, "page._mapcount"),
        large_mapcount,
        vmf_vma: if mpol_takes_vmf(facts) {
            field(facts, "vm_fault.vma")
        } else {
            FIELD_ABSENT
        },
        vm_flags: field(facts, "vm_area_struct.vm_flags"),
        vm_start: field(facts, "vm_area_struct.vm_start"),
        vm_end: field(facts, "vm_area_struct.vm_end"),
        _pad: 0,
    };
    o.node_map = node_map(facts);
    o.gap = GapOffsets {
        vma_numab_state: field(facts, "vm_area_struct.numab_state"),
        prev_scan_seq: field(facts, "vma_numab_state.prev_scan_seq"),
        mm_numa_scan_seq: field(facts, "mm_struct.numa_scan_seq"),
        task_signal: field(facts, "task_struct.signal"),
        nr_threads: field(facts, "signal_struct.nr_threads"),
        vm_start: field(facts, "vm_area_struct.vm_start"),
        vm_end: field(facts, "vm_area_struct.vm_end"),
        pid_inactive: facts.pid_inactive_reason.unwrap_or(
            SKIP_REASON_NAMES
                .iter()
                .position(|r| *r == "pid_inactive")
                .unwrap_or(4) as u32,
        ),
    };
    let range = |n: &str| facts.scan_ranges.get(n).copied().unwrap_or([0, 0]);
    o.scan_ranges = ScanRanges {
        task_numa_work: range("task_numa_work"),
        change_prot_numa: range("change_prot_numa"),
    };
}

/// x86-64's vmemmap start without memory randomization (4-level paging).
const X86_64_VMEMMAP_START: u64 = 0xffff_ea00_0000_0000;

/// Where to find a page's node (x86-64, SPARSEMEM_VMEMMAP): see `NodeMap`.
fn node_map(facts: &KernelFacts) -> NodeMap {
    let mut m = NodeMap::EMPTY;
    if !cfg!(target_arch = "x86_64") || facts.node_pfn_ranges.is_empty() {
        return m;
    }
    m.page_size = facts.page_size.map_or(0, u64::from);
    match facts.vmemmap_base_sym {
        Some(sym) => m.vmemmap_base_sym = sym,
        None => m.vmemmap_const = X86_64_VMEMMAP_START,
    }
    for (slot, r) in m.ranges.iter_mut().zip(&facts.node_pfn_ranges) {
        *slot = *r;
    }
    m.nranges = facts.node_pfn_ranges.len().min(NODE_RANGES) as u64;
    m
}

/// What a function hook loses when BTF lacks a field it reads.
fn field_notes(facts: &KernelFacts, h: &mut HookPlan) {
    if h.mechanism == Mechanism::None {
        return;
    }
    if h.spec.name == "mpol_misplaced" {
        // Without these it could not tell a COW-shared page from any other: do not attach.
        let mut need = vec!["vm_area_struct.vm_flags", "page._mapcount"];
        if mpol_takes_vmf(facts) {
            need.push("vm_fault.vma");
        }
        let missing: Vec<_> = need
            .into_iter()
            .filter(|f| field(facts, f) == FIELD_ABSENT)
            .collect();
        if !missing.is_empty() {
            h.reasons.push(format!(
                "BTF lacks {}: COW-shared pages cannot be recognised",
                missing.join(", ")
            ));
            h.mechanism = Mechanism::None;
        }
        return;
    }
    if h.spec.name != "task_numa_work" {
        return;
    }
    for (f, loses) in [
        (
            "task_struct.se.sum_exec_runtime",
            "runtime deltas and scan share",
        ),
        (
            "task_struct.node_stamp",
            "the node_stamp invariants (seed 003)",
        ),
    ] {
        if field(facts, f) == FIELD_ABSENT {
            h.reasons.push(format!("BTF lacks {f}: no {loses}"));
        }
    }
}

fn plan_btf_tracepoint(facts: &KernelFacts, spec: HookSpec) -> HookPlan {
    let HookKind::BtfTracepoint { tracepoint, fields } = spec.kind else {
        unreachable!("plan_btf_tracepoint called for another kind of hook")
    };
    let mut plan = HookPlan {
        spec,
        mechanism: Mechanism::None,
        symbol: None,
        reasons: Vec::new(),
        fentry_variant: 0,
    };
    let name = tracepoint.split(':').nth(1).unwrap_or(tracepoint);
    let missing: Vec<&str> = fields
        .iter()
        .copied()
        .filter(|f| field(facts, f) == FIELD_ABSENT)
        .collect();
    if !facts.tracepoints.contains_key(tracepoint) {
        plan.reasons
            .push(format!("tracepoint {tracepoint} absent on this kernel"));
    } else if !facts.btf_vmlinux {
        plan.reasons
            .push("tp_btf: no kernel BTF (/sys/kernel/btf/vmlinux)".into());
    } else if !facts.btf_tracepoints.contains(name) {
        plan.reasons
            .push(format!("tp_btf: BTF has no btf_trace_{name}"));
    } else if !missing.is_empty() {
        plan.reasons
            .push(format!("BTF lacks {}", missing.join(", ")));
    } else {
        plan.mechanism = Mechanism::TpBtf;
    }
    plan
}

fn plan_sampling(facts: &KernelFacts, spec: HookSpec, work: Option<&HookPlan>) -> HookPlan {
    let mut plan = HookPlan {
        spec,
        mechanism: Mechanism::None,
        symbol: Some("task_numa_work".into()),
        reasons: Vec::new(),
        fentry_variant: 0,
    };
    let range = facts
        .scan_ranges
        .get("task_numa_work")
        .copied()
        .unwrap_or([0, 0]);
    if work.is_some_and(|w| w.will_attach()) {
        plan.reasons
            .push("not needed: task_numa_work is hooked, scan time is measured exactly".into());
    } else if range[0] == 0 || range[1] <= range[0] {
        plan.reasons
            .push("task_numa_work's address is not in /proc/kallsyms (hidden or absent)".into());
    } else {
        plan.mechanism = Mechanism::PerfEvent;
    }
    plan
}

/// Decides every hook of [`HOOKS`] for a kernel described by `facts`.
pub fn plan(facts: &KernelFacts) -> Plan {
    let mut offsets = Offsets::default();
    function_globals(facts, &mut offsets);
    let mut hooks: Vec<HookPlan> = Vec::new();
    for spec in HOOKS {
        let h = match spec.kind {
            HookKind::Tracepoint { .. } => plan_tracepoint(facts, *spec, &mut offsets),
            HookKind::Function { .. } => {
                let mut h = plan_function(facts, *spec, FentryUse::Auto);
                field_notes(facts, &mut h);
                h
            }
            HookKind::BtfTracepoint { .. } => plan_btf_tracepoint(facts, *spec),
            HookKind::Sampling => {
                let work = hooks.iter().find(|h| h.spec.name == "task_numa_work");
                plan_sampling(facts, *spec, work)
            }
        };
        hooks.push(h);
    }
    Plan { hooks, offsets }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn fmt(fields: &[(&str, u32, u32)]) -> Format {
        let mut text = String::from(
            "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
             \tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n",
        );
        for (name, offset, size) in fields {
            text.push_str(&format!(
                "\tfield:long {name};\toffset:{offset};\tsize:{size};\tsigned:0;\n"
            ));
        }
        Format::parse(&text)
    }

    fn pair_fields() -> Vec<(&'static str, u32, u32)> {
        vec![
            ("src_pid", 8, 4),
            ("src_tgid", 12, 4),
            ("src_ngid", 16, 4),
            ("src_cpu", 20, 4),
            ("src_nid", 24, 4),
            ("dst_pid", 28, 4),
            ("dst_tgid", 32, 4),
            ("dst_ngid", 36, 4),
            ("dst_cpu", 40, 4),
            ("dst_nid", 44, 4),
        ]
    }

    fn common_tracepoints(migrate: Format) -> BTreeMap<String, Format> {
        let mut tps = BTreeMap::new();
        tps.insert(
            "sched:sched_move_numa".into(),
            fmt(&[
                ("pid", 8, 4),
                ("tgid", 12, 4),
                ("ngid", 16, 4),
                ("src_cpu", 20, 4),
                ("src_nid", 24, 4),
                ("dst_cpu", 28, 4),
                ("dst_nid", 32, 4),
            ]),
        );
        tps.insert("sched:sched_swap_numa".into(), fmt(&pair_fields()));
        tps.insert("sched:sched_stick_numa".into(), fmt(&pair_fields()));
        tps.insert("migrate:mm_migrate_pages".into(), migrate);
        tps.insert(
            "sched:sched_process_fork".into(),
            fmt(&[("parent_pid", 24, 4), ("child_pid", 44, 4)]),
        );
        tps.insert("sched:sched_process_exit".into(), fmt(&[("pid", 24, 4)]));
        tps
    }

    /// Every BTF field present, the i-th at `base + 8 * i`.
    fn btf_fields(base: u32) -> BTreeMap<String, Option<u32>> {
        crate::kernel::facts::BTF_FIELDS
            .iter()
            .enumerate()
            .map(|(i, (st, path))| (format!("{st}.{path}"), Some(base + 8 * i as u32)))
            .collect()
    }

    fn set(names: &[&str]) -> std::collections::BTreeSet<String> {
        names.iter().map(|s| (*s).to_owned()).collect()
    }

    /// This machine: 6.18, BTF, no kprobes, fentry refused with EPERM, do_numa_page inlined.
    pub(crate) fn host_6_18() -> KernelFacts {
        let mut tps = common_tracepoints(fmt(&[
            ("succeeded", 8, 8),
            ("failed", 16, 8),
            ("thp_succeeded", 24, 8),
            ("thp_failed", 32, 8),
            ("thp_split", 40, 8),
            ("large_folio_split", 48, 8),
            ("mode", 56, 4),
            ("reason", 60, 4),
        ]));
        tps.insert(
            "sched:sched_skip_vma_numa".into(),
            fmt(&[
                ("numa_scan_offset", 8, 8),
                ("vm_start", 16, 8),
                ("vm_end", 24, 8),
                ("reason", 32, 4),
            ]),
        );
        let syms = [
            "task_numa_work",
            "task_numa_fault",
            "change_prot_numa",
            "mpol_misplaced",
            "migration_entry_wait",
            "migrate_misplaced_folio",
            "do_huge_pmd_numa_page",
        ];
        let fentry = syms
            .iter()
            .map(|s| {
                (
                    (*s).to_owned(),
                    FentryTest::Refused {
                        errno: 1,
                        error: "Operation not permitted".into(),
                    },
                )
            })
            .collect();
        KernelFacts {
            release: "6.18.44-fc-v657".into(),
            version: KernelVersion::new(6, 18, 44),
            btf_vmlinux: true,
            btf_functions: set(&syms),
            kallsyms: set(&syms),
            scan_ranges: [
                (
                    "task_numa_work".to_owned(),
                    [0xffffffff813b0bb0, 0xffffffff813b1000],
                ),
                (
                    "change_prot_numa".to_owned(),
                    [0xffffffff8165a7b0, 0xffffffff8165a900],
                ),
            ]
            .into(),
            btf_fields: btf_fields(100),
            btf_signatures: sigs(&[
                ("migrate_misplaced_folio", &["folio", "node"]),
                ("mpol_misplaced", &["folio", "vmf", "addr"]),
                (
                    "task_numa_fault",
                    &["last_cpupid", "mem_node", "pages", "flags"],
                ),
                ("change_prot_numa", &["vma", "addr", "end"]),
            ]),
            page_head_bit: Some(6),
            page_size: Some(64),
            btf_tracepoints: set(&["sched_skip_vma_numa"]),
            pid_inactive_reason: Some(4),
            vmemmap_base_sym: None,
            node_pfn_ranges: vec![[0, 6291456, 0]],
            kprobes: false,
            tracefs: Some("/sys/kernel/tracing".into()),
            tracefs_mounted_by_us: true,
            tracepoints: tps,
            fentry,
            numa_nodes: 1,
            numa_balancing: Some(0),
            preemption: None,
        }
    }

    /// Debian 12's 6.1 cloud kernel: BTF, kprobes, fentry works, no skip_vma tracepoint,
    /// migrate_misplaced_page, mm_migrate_pages without large_folio_split.
    pub(crate) fn debian_6_1() -> KernelFacts {
        let tps = common_tracepoints(fmt(&[
            ("succeeded", 8, 8),
            ("failed", 16, 8),
            ("thp_succeeded", 24, 8),
            ("thp_failed", 32, 8),
            ("thp_split", 40, 8),
            ("mode", 48, 4),
            ("reason", 52, 4),
        ]));
        let syms = [
            "task_numa_work",
            "task_numa_fault",
            "change_prot_numa",
            "do_numa_page",
            "mpol_misplaced",
            "migration_entry_wait",
            "migrate_misplaced_page",
            "do_huge_pmd_numa_page",
        ];
        KernelFacts {
            release: "6.1.0-27-cloud-amd64".into(),
            version: KernelVersion::new(6, 1, 0),
            btf_vmlinux: true,
            btf_functions: set(&syms),
            kallsyms: set(&syms),
            scan_ranges: [("task_numa_work".to_owned(), [0x1000, 0x2000])].into(),
            btf_fields: {
                // 6.1: no folio fields; the compound mapcount lives in the first tail page.
                let mut f = btf_fields(10);
                f.insert("folio._large_mapcount".into(), None);
                f.insert("folio._entire_mapcount".into(), None);
                f.insert("vm_area_struct.numab_state".into(), None);
                f.insert("vma_numab_state.prev_scan_seq".into(), None);
                f
            },
            btf_signatures: sigs(&[
                ("migrate_misplaced_page", &["page", "vma", "node"]),
                ("mpol_misplaced", &["page", "vma", "addr"]),
                (
                    "task_numa_fault",
                    &["last_cpupid", "mem_node", "pages", "flags"],
                ),
                ("change_prot_numa", &["vma", "addr", "end"]),
                ("task_numa_work", &["work"]),
            ]),
            page_head_bit: Some(16),
            page_size: Some(64),
            btf_tracepoints: std::collections::BTreeSet::new(),
            pid_inactive_reason: None,
            vmemmap_base_sym: Some(0xffffffff82a0f6b8),
            node_pfn_ranges: vec![[0, 262144, 0], [262144, 524288, 1]],
            kprobes: true,
            tracefs: Some("/sys/kernel/tracing".into()),
            tracefs_mounted_by_us: false,
            tracepoints: tps,
            fentry: syms
                .iter()
                .map(|s| ((*s).to_owned(), FentryTest::Loaded))
                .collect(),
            numa_nodes: 2,
            numa_balancing: Some(1),
            preemption: None,
        }
    }

    /// BTF signatures from parameter names (types as the names imply).
    fn sigs(s: &[(&str, &[&str])]) -> BTreeMap<String, Vec<BtfParam>> {
        s.iter()
            .map(|(f, names)| {
                let params = names
                    .iter()
                    .map(|n| BtfParam {
                        name: (*n).to_owned(),
                        ty: match *n {
                            "vmf" => "struct vm_fault *",
                            "vma" => "struct vm_area_struct *",
                            "folio" => "struct folio *",
                            "page" => "struct page *",
                            _ => "int",
                        }
                        .to_owned(),
                    })
                    .collect();
                ((*f).to_owned(), params)
            })
            .collect()
    }

    fn hook<'a>(p: &'a Plan, name: &str) -> &'a HookPlan {
        p.hooks.iter().find(|h| h.spec.name == name).unwrap()
    }

    #[test]
    fn host_6_18_attaches_every_tracepoint_and_no_function() {
        let p = plan(&host_6_18());
        for h in &p.hooks {
            match h.spec.kind {
                HookKind::Tracepoint { .. } => {
                    assert_eq!(h.mechanism, Mechanism::Tracepoint, "{}", h.spec.name);
                    assert!(h.will_attach());
                }
                HookKind::Function { .. } => {
                    assert_eq!(h.mechanism, Mechanism::None, "{}", h.spec.name);
                    assert!(!h.reasons.is_empty(), "{} needs a reason", h.spec.name);
                }
                HookKind::BtfTracepoint { .. } => {
                    assert_eq!(h.mechanism, Mechanism::TpBtf, "{}", h.spec.name);
                    assert_eq!(h.programs(), [PROG_BTF_SKIP_VMA_GAP]);
                }
                HookKind::Sampling => {
                    // The fallback for the unhookable task_numa_work.
                    assert_eq!(h.mechanism, Mechanism::PerfEvent);
                    assert_eq!(h.programs(), [PROG_SAMPLE]);
                }
            }
        }
        // 6.11+: mpol_misplaced(folio, vmf, addr) and folio._large_mapcount.
        assert_eq!(p.offsets.page.vmf_vma, 100 + 8 * 9);
        assert_eq!(p.offsets.page.large_mapcount, 100 + 8 * 6);
        // 6.14+ migrate_misplaced_folio(folio, node): node is argument 1, 0 means migrated.
        assert_eq!(p.offsets.func.migrate_node_arg, 1);
        assert_eq!(p.offsets.func.mpol_vma_arg, 1);
        assert_eq!(p.offsets.func.migrate_ok_is_zero, 1);
        assert_eq!(p.offsets.scan_ranges.task_numa_work[0], 0xffffffff813b0bb0);
        assert_eq!(p.offsets.task.sum_exec_runtime, 100);
        let work = hook(&p, "task_numa_work");
        assert!(work.reasons.iter().any(|r| r.contains("EPERM")), "{work:?}");
        assert!(
            work.reasons
                .iter()
                .any(|r| r.contains("kprobes not built in"))
        );
        let dnp = hook(&p, "do_numa_page");
        assert!(dnp.reasons[0].contains("absent from kallsyms"), "{dnp:?}");
        assert_eq!(
            hook(&p, "migrate_misplaced_folio|_page").symbol.as_deref(),
            Some("migrate_misplaced_folio")
        );
        assert_eq!(p.offsets.skip_vma.reason, 32);
        assert_eq!(p.offsets.migrate.reason, 60);
        assert_eq!(p.offsets.migrate.mode, 56);
        assert_eq!(p.offsets.fork.child_pid, 44);
        // 7 tracepoints, the tp_btf gap program and the sampling fallback.
        assert_eq!(p.attachable().count(), 9);
    }

    #[test]
    fn debian_6_1_lacks_skip_vma_and_prefers_fentry() {
        let p = plan(&debian_6_1());
        let skip = hook(&p, "sched:sched_skip_vma_numa");
        assert_eq!(skip.mechanism, Mechanism::None);
        assert!(skip.reasons[0].contains("6.1.0 < 6.7"), "{skip:?}");
        assert_eq!(p.offsets.skip_vma, SkipVmaOffsets::ABSENT);
        assert_eq!(p.offsets.migrate.reason, 52);
        assert_eq!(p.offsets.migrate.thp_failed, 32);
        for name in ["task_numa_work", "task_numa_fault", "do_numa_page"] {
            let h = hook(&p, name);
            assert_eq!(h.mechanism, Mechanism::Fentry, "{name}");
            assert!(h.reasons.is_empty());
            assert!(h.will_attach());
        }
        assert_eq!(
            hook(&p, "task_numa_work").programs(),
            [PROG_FENTRY_TASK_NUMA_WORK, PROG_FEXIT_TASK_NUMA_WORK]
        );
        assert!(hook(&p, "mpol_misplaced").will_attach());
        // Randomized layout: the programs read vmemmap_base; two nodes' PFN ranges.
        assert_eq!(p.offsets.node_map.vmemmap_base_sym, 0xffffffff82a0f6b8);
        assert_eq!(p.offsets.node_map.vmemmap_const, 0);
        assert_eq!(p.offsets.node_map.nranges, 2);
        assert_eq!(p.offsets.node_map.ranges[1], [262144, 524288, 1]);
        assert_eq!(p.offsets.node_map.page_size, 64);
        // 6.1: the vma is the argument itself; THP mapcount in page[1].compound_mapcount.
        assert_eq!(p.offsets.page.vmf_vma, FIELD_ABSENT);
        assert_eq!(p.offsets.page.head_bit, 16);
        assert_eq!(p.offsets.page.large_mapcount, 64 + 10 + 8 * 8);
        let sampling = hook(&p, "sampling:cpu-clock");
        assert_eq!(sampling.mechanism, Mechanism::None);
        assert!(sampling.reasons[0].contains("not needed"), "{sampling:?}");
        assert_eq!(p.offsets.func.migrate_node_arg, 2);
        assert_eq!(
            p.offsets.func.migrate_ok_is_zero, 0,
            "6.1 returns 1 when migrated"
        );
        assert_eq!(
            hook(&p, "migrate_misplaced_folio|_page").symbol.as_deref(),
            Some("migrate_misplaced_page")
        );
        // 6 tracepoints and 8 function hooks.
        assert_eq!(p.attachable().count(), 14);
        let gap = hook(&p, "tp_btf:sched_skip_vma_numa");
        assert_eq!(gap.mechanism, Mechanism::None);
        assert!(gap.reasons[0].contains("absent"), "{gap:?}");
    }

    #[test]
    fn gap_program_needs_prev_scan_seq() {
        // 6.7: the tracepoint and numab_state exist, prev_scan_seq only from 6.8.
        let mut f = host_6_18();
        f.btf_fields
            .insert("vma_numab_state.prev_scan_seq".into(), None);
        let p = plan(&f);
        let gap = hook(&p, "tp_btf:sched_skip_vma_numa");
        assert_eq!(gap.mechanism, Mechanism::None);
        assert_eq!(
            gap.reasons,
            ["BTF lacks vma_numab_state.prev_scan_seq"],
            "{gap:?}"
        );
        let full = plan(&host_6_18());
        assert_eq!(full.offsets.gap.pid_inactive, 4);
        assert_eq!(
            full.offsets.gap.nr_threads,
            field(&host_6_18(), "signal_struct.nr_threads")
        );
        assert_ne!(full.offsets.gap.prev_scan_seq, FIELD_ABSENT);
    }

    #[test]
    fn preemptible_kernels_take_kprobes_where_they_can() {
        use crate::kernel::preempt::{Model, Preemption};
        let is_func = |h: &HookPlan| {
            matches!(h.spec.kind, HookKind::Function { .. }) && h.mechanism != Mechanism::None
        };
        let mut f = debian_6_1();
        f.preemption = Some(Preemption {
            model: Model::Lazy,
            from: "/sys/kernel/debug/sched/preempt".into(),
        });
        let p = plan(&f);
        for h in p.hooks.iter().filter(|h| is_func(h)) {
            assert_eq!(h.mechanism, Mechanism::Kprobe, "{}", h.spec.name);
            assert!(
                h.reasons.iter().any(|r| r.contains("preempt=lazy")),
                "{}: {:?}",
                h.spec.name,
                h.reasons
            );
        }
        // A refused kprobe falls back to the fentry that loaded.
        let k = hook(&p, "task_numa_fault");
        let back = fentry_fallback(&f, k).expect("fentry fallback");
        assert_eq!(back.mechanism, Mechanism::Fentry);
        assert!(kprobe_fallback(&f, &back).is_some());
        // Without kprobes fentry is still better than nothing.
        f.kprobes = false;
        let p = plan(&f);
        assert!(
            p.hooks
                .iter()
                .filter(|h| is_func(h))
                .all(|h| h.mechanism == Mechanism::Fentry)
        );
        // Voluntary preemption: fentry.
        f.kprobes = true;
        f.preemption = Some(Preemption {
            model: Model::Voluntary,
            from: "uname -v".into(),
        });
        assert!(
            plan(&f)
                .hooks
                .iter()
                .filter(|h| is_func(h))
                .all(|h| h.mechanism == Mechanism::Fentry)
        );
    }

    #[test]
    fn kprobe_fallback_when_fentry_refused() {
        let mut f = debian_6_1();
        f.fentry.insert(
            "task_numa_fault".into(),
            FentryTest::Refused {
                errno: 524,
                error: "trampoline".into(),
            },
        );
        let p = plan(&f);
        let h = hook(&p, "task_numa_fault");
        assert_eq!(h.mechanism, Mechanism::Kprobe);
        assert!(h.reasons[0].contains("ENOTSUPP"), "{h:?}");
        assert_eq!(h.programs(), [PROG_KPROBE_TASK_NUMA_FAULT]);
    }

    #[test]
    fn mpol_misplaced_needs_its_fields() {
        let mut f = debian_6_1();
        f.btf_fields.insert("vm_area_struct.vm_flags".into(), None);
        let p = plan(&f);
        let h = hook(&p, "mpol_misplaced");
        assert_eq!(h.mechanism, Mechanism::None);
        assert!(h.reasons.iter().any(|r| r.contains("vm_flags")), "{h:?}");
        assert!(hook(&p, "task_numa_fault").will_attach());
    }

    #[test]
    fn missing_btf_field_is_reported_and_only_disables_its_reads() {
        let mut f = debian_6_1();
        f.btf_fields.insert("task_struct.node_stamp".into(), None);
        let p = plan(&f);
        let h = hook(&p, "task_numa_work");
        assert_eq!(h.mechanism, Mechanism::Fentry);
        assert!(h.will_attach());
        assert!(h.reasons[0].contains("node_stamp"), "{h:?}");
        assert_eq!(p.offsets.task.node_stamp, FIELD_ABSENT);
        assert_eq!(p.offsets.task.sum_exec_runtime, 10);
    }

    #[test]
    fn missing_required_field_disables_only_that_tracepoint() {
        let mut f = host_6_18();
        f.tracepoints
            .insert("sched:sched_swap_numa".into(), fmt(&[("src_pid", 8, 4)]));
        let p = plan(&f);
        let swap = hook(&p, "sched:sched_swap_numa");
        assert_eq!(swap.mechanism, Mechanism::None);
        assert!(swap.reasons[0].contains("src_tgid"), "{swap:?}");
        assert!(swap.reasons[0].contains("dst_pid"));
        assert_eq!(
            hook(&p, "sched:sched_move_numa").mechanism,
            Mechanism::Tracepoint
        );
    }

    #[test]
    fn old_stick_numa_layout_uses_pid_and_tgid() {
        let mut f = debian_6_1();
        f.tracepoints.insert(
            "sched:sched_stick_numa".into(),
            fmt(&[
                ("pid", 8, 4),
                ("tgid", 12, 4),
                ("ngid", 16, 4),
                ("src_cpu", 20, 4),
                ("src_nid", 24, 4),
                ("dst_cpu", 28, 4),
                ("dst_nid", 32, 4),
            ]),
        );
        let p = plan(&f);
        assert_eq!(
            hook(&p, "sched:sched_stick_numa").mechanism,
            Mechanism::Tracepoint
        );
        assert_eq!(p.offsets.stick_numa.src_pid, 8);
        assert_eq!(p.offsets.stick_numa.dst_pid, FIELD_ABSENT);
        assert_eq!(p.offsets.stick_numa.dst_cpu, 28);
    }

    #[test]
    fn no_tracefs_means_no_tracepoints() {
        let mut f = host_6_18();
        f.tracefs = None;
        f.tracepoints.clear();
        let p = plan(&f);
        // Only the sampling fallback remains (it does not need tracefs).
        assert_eq!(
            p.attachable().map(|h| h.spec.name).collect::<Vec<_>>(),
            ["sampling:cpu-clock"]
        );
        assert!(
            hook(&p, "sched:sched_move_numa").reasons[0].contains("tracefs"),
            "{:?}",
            hook(&p, "sched:sched_move_numa")
        );
    }
}
