//! Per hook, the mechanism this kernel allows and, as typed [`Reason`]s, why not the better
//! ones (or any); and the loader's fallbacks when the kernel refuses the chosen programs.

use crate::{
    kernel::catalogue::{FentryVariant, HookKind, HookSpec, Programs},
    kernel::{
        btf::BtfParam,
        facts::{FentryTest, KernelFacts},
    },
};

use super::{
    HookPlan, Mechanism,
    globals::{arg_position, field, mpol_takes_vmf},
    reason::{Reason, Refusal},
};
use numatrace_common::FIELD_ABSENT;

impl HookPlan {
    /// No mechanism yet, no reason yet.
    fn none(spec: HookSpec, symbol: Option<String>) -> Self {
        Self {
            spec,
            mechanism: Mechanism::None,
            symbol,
            reasons: Vec::new(),
            fentry_variant: 0,
            carried_by: None,
        }
    }
}

/// A tracepoint hook; `lacks`: the fields its program needs that its format lacks (`None`: the
/// tracepoint is absent).
pub(super) fn tracepoint(
    facts: &KernelFacts,
    spec: HookSpec,
    lacks: Option<Vec<&'static str>>,
) -> HookPlan {
    let HookKind::Tracepoint { since, .. } = spec.kind else {
        unreachable!("tracepoint called for another kind of hook")
    };
    let mut plan = HookPlan::none(spec, None);
    let refusal = match lacks {
        None if facts.tracefs.is_none() => Refusal::NoTracefs,
        None => match since {
            Some(since) if facts.version < since => Refusal::TracepointTooOld {
                version: facts.version,
                since,
            },
            _ => Refusal::TracepointAbsent,
        },
        Some(missing) if missing.is_empty() => {
            plan.mechanism = Mechanism::Tracepoint;
            return plan;
        }
        Some(missing) => Refusal::FormatLacks(missing),
    };
    plan.reasons.push(refusal.into());
    plan
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

/// Why the fentry programs of `sym` cannot be used, if they cannot; `variant` is the program
/// set that reads its signature.
fn fentry_refusal(
    facts: &KernelFacts,
    sym: &str,
    sig: Option<&[BtfParam]>,
    variants: &'static [FentryVariant],
    variant: Option<usize>,
) -> Option<Refusal> {
    if !facts.btf_vmlinux {
        return Some(Refusal::NoKernelBtf(Mechanism::Fentry));
    }
    if !facts.btf_functions.contains(sym) {
        return Some(Refusal::NoBtfFunc(sym.to_owned()));
    }
    if variant.is_none() {
        return Some(Refusal::NoFentryVariant {
            symbol: sym.to_owned(),
            params: sig.map(|s| s.iter().map(|p| p.name.clone()).collect()),
            variants,
        });
    }
    match facts.fentry.get(sym) {
        Some(FentryTest::Loaded) => None,
        Some(FentryTest::Refused { errno, error }) => Some(Refusal::FentryRefused {
            errno: *errno,
            error: error.clone(),
        }),
        Some(FentryTest::NotTried { why }) => Some(Refusal::FentryNotTried(why.clone())),
        None => Some(Refusal::FentryNotTested),
    }
}

/// Why the kprobe programs of `sym` cannot be used, if they cannot.
fn kprobe_refusal(
    facts: &KernelFacts,
    sym: &str,
    sig: Option<&[BtfParam]>,
    args: &[&'static str],
) -> Option<Refusal> {
    if !facts.kprobes {
        return Some(Refusal::NoKprobes);
    }
    if !facts.kallsyms.contains(sym) {
        return Some(Refusal::NoKallsyms(sym.to_owned()));
    }
    // The programs read arguments at the positions BTF names; without BTF, at the positions
    // every kernel up to 6.13 has.
    let sig = sig?;
    let unknown: Vec<&str> = args
        .iter()
        .copied()
        .filter(|a| arg_position(sig, a).is_none())
        .collect();
    (!unknown.is_empty()).then(|| Refusal::ArgumentNamesUnknown {
        symbol: sym.to_owned(),
        params: sig.iter().map(|p| p.name.clone()).collect(),
        unknown,
    })
}

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
    // Prefer the first candidate the kernel has at all.
    let present = symbols
        .iter()
        .find(|s| facts.kallsyms.contains(**s) || facts.btf_functions.contains(**s));
    let Some(&sym) = present else {
        let mut plan = HookPlan::none(spec, None);
        plan.reasons.push(Refusal::SymbolAbsent(symbols).into());
        return plan;
    };
    let mut reasons = Vec::new();
    let sig = facts.btf_signatures.get(sym).map(Vec::as_slice);
    let names: Vec<&str> = sig.map_or_else(Vec::new, |s| s.iter().map(|p| &*p.name).collect());
    let variant = variants.iter().position(|v| v.matches(&names));

    let fentry_ok = fentry != FentryUse::Never
        && match fentry_refusal(facts, sym, sig, variants, variant) {
            None => true,
            Some(r) => {
                reasons.push(r.into());
                false
            }
        };
    let kprobe = kprobe_refusal(facts, sym, sig, args);
    let preempted = facts
        .preemption
        .as_ref()
        .filter(|p| p.model.preemptible() && fentry == FentryUse::Auto);
    let mechanism = if fentry_ok
        && kprobe.is_none()
        && let Some(p) = preempted
    {
        reasons.push(Refusal::Preemptible(p.clone()).into());
        Mechanism::Kprobe
    } else if fentry_ok {
        Mechanism::Fentry
    } else if let Some(r) = kprobe {
        reasons.push(r.into());
        Mechanism::None
    } else {
        if sig.is_none() && !args.is_empty() {
            reasons.push(Reason::UsualArgumentPositions(sym.to_owned()));
        }
        Mechanism::Kprobe
    };
    HookPlan {
        spec,
        mechanism,
        symbol: Some(sym.to_owned()),
        reasons,
        fentry_variant: variant.unwrap_or(0),
        carried_by: None,
    }
}

/// A function hook, with what it loses where BTF lacks fields its programs read.
pub(super) fn function(facts: &KernelFacts, spec: HookSpec) -> HookPlan {
    let mut h = plan_function(facts, spec, FentryUse::Auto);
    field_notes(facts, &mut h);
    h
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
    let preemptible = |r: &Reason| matches!(r, Reason::Refused(Refusal::Preemptible(_)));
    if h.mechanism != Mechanism::Kprobe || !h.reasons.iter().any(preemptible) {
        return None;
    }
    let f = plan_function(facts, h.spec, FentryUse::First);
    (f.mechanism == Mechanism::Fentry).then(|| HookPlan {
        reasons: h
            .reasons
            .iter()
            .filter(|r| !preemptible(r))
            .cloned()
            .chain(std::iter::once(Reason::PreemptibleFentry))
            .collect(),
        ..f
    })
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
            h.reasons.push(Refusal::CowUnrecognisable(missing).into());
            h.mechanism = Mechanism::None;
        }
        return;
    }
    if h.spec.name != "task_numa_work" {
        return;
    }
    for (field_name, loses) in [
        (
            "task_struct.se.sum_exec_runtime",
            "runtime deltas and scan share",
        ),
        (
            "task_struct.node_stamp",
            "the node_stamp invariants (seed 003)",
        ),
    ] {
        if field(facts, field_name) == FIELD_ABSENT {
            h.reasons.push(Reason::ReadsLost {
                field: field_name,
                loses,
            });
        }
    }
}

pub(super) fn btf_tracepoint(facts: &KernelFacts, spec: HookSpec) -> HookPlan {
    let HookKind::BtfTracepoint { tracepoint, fields } = spec.kind else {
        unreachable!("btf_tracepoint called for another kind of hook")
    };
    let mut plan = HookPlan::none(spec, None);
    let name = tracepoint.split(':').nth(1).unwrap_or(tracepoint);
    let missing: Vec<&str> = fields
        .iter()
        .copied()
        .filter(|f| field(facts, f) == FIELD_ABSENT)
        .collect();
    let refusal = if !facts.tracepoints.contains_key(tracepoint) {
        Refusal::BaseTracepointAbsent(tracepoint)
    } else if !facts.btf_vmlinux {
        Refusal::NoKernelBtf(Mechanism::TpBtf)
    } else if !facts.btf_tracepoints.contains(name) {
        Refusal::NoBtfTrace(name)
    } else if !missing.is_empty() {
        Refusal::BtfLacks(missing)
    } else {
        plan.mechanism = Mechanism::TpBtf;
        return plan;
    };
    plan.reasons.push(refusal.into());
    plan
}

/// The sampling fallback of task_numa_work; `work`: that hook's plan.
pub(super) fn sampling(facts: &KernelFacts, spec: HookSpec, work: Option<&HookPlan>) -> HookPlan {
    let mut plan = HookPlan::none(spec, Some("task_numa_work".into()));
    let range = facts
        .scan_ranges
        .get("task_numa_work")
        .copied()
        .unwrap_or([0, 0]);
    let refusal = if work.is_some_and(|w| w.will_attach()) {
        Refusal::NotNeeded
    } else if range[0] == 0 || range[1] <= range[0] {
        Refusal::NoScanRange
    } else {
        plan.mechanism = Mechanism::PerfEvent;
        return plan;
    };
    plan.reasons.push(refusal.into());
    plan
}
