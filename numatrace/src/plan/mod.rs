//! The one place that knows about kernel differences: a pure `plan(facts)` that decides, hook by
//! hook of the catalogue, how (or why not) to attach it, and the globals its programs read.
//!
//! `mechanism` chooses each hook's mechanism and says why not the others as a [`Reason`]
//! (`reason`), `globals` builds the programs' offsets and conventions from tracefs formats and
//! BTF.

use serde::{Deserialize, Serialize};

use crate::kernel::facts::KernelFacts;

pub use crate::kernel::catalogue::{
    FentryVariant, GAP_FIELDS, HOOKS, HookKind, HookSpec, Programs, SKIP_VMA_BTF_HOOK,
    SKIP_VMA_HOOK,
};
pub use globals::Offsets;
pub use mechanism::{fentry_fallback, kprobe_fallback};
pub use reason::{Reason, Refusal};

mod globals;
mod mechanism;
mod reason;

#[cfg(test)]
mod lines;
#[cfg(test)]
mod tests;

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
    /// Why a better mechanism, or any, is not possible here, and what the chosen one lacks.
    pub reasons: Vec<Reason>,
    /// For fentry: which of the hook's fentry variants matches this kernel's signature.
    pub fentry_variant: usize,
    /// The hook whose program does this one's work too (attached, it attaches nothing of its
    /// own; see [`carry_skip_vma`]).
    pub carried_by: Option<&'static str>,
}

impl PartialEq for HookSpec {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}
impl Eq for HookSpec {}

impl HookPlan {
    /// The programs to attach: those of the chosen mechanism (empty: nothing to attach, or
    /// carried by another hook's).
    pub fn programs(&self) -> Vec<&'static str> {
        if self.carried_by.is_some() {
            return vec![];
        }
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

    /// The loader attaches it: the kernel allows it and this version has programs for it
    /// (or another hook's program does its work).
    pub fn will_attach(&self) -> bool {
        self.carried_by.is_some() || !self.programs().is_empty()
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

/// Decides every hook of [`HOOKS`] for a kernel described by `facts`.
pub fn plan(facts: &KernelFacts) -> Plan {
    let mut offsets = Offsets::default();
    globals::function_globals(facts, &mut offsets);
    let mut hooks: Vec<HookPlan> = Vec::new();
    for spec in HOOKS {
        let h = match spec.kind {
            HookKind::Tracepoint { .. } => {
                // Its offsets are globals; the fields its program needs decide whether it is used.
                let lacks = facts
                    .tracepoints
                    .get(spec.name)
                    .map(|f| globals::tracepoint_offsets(spec.name, f, &mut offsets));
                mechanism::tracepoint(facts, *spec, lacks)
            }
            HookKind::Function { .. } => mechanism::function(facts, *spec),
            HookKind::BtfTracepoint { .. } => mechanism::btf_tracepoint(facts, *spec),
            HookKind::Sampling => {
                let work = hooks.iter().find(|h| h.spec.name == "task_numa_work");
                mechanism::sampling(facts, *spec, work)
            }
        };
        hooks.push(h);
    }
    offsets.gap.whole_hook = carry_skip_vma(&mut hooks).into();
    Plan { hooks, offsets }
}

/// Where both `sched_skip_vma_numa` programs would attach, the tp_btf one does the classic
/// one's work too and the classic one is not attached: one program run per skip instead of
/// two, and its per-VMA counts in a map instead of a record each. Returns whether it does.
fn carry_skip_vma(hooks: &mut [HookPlan]) -> bool {
    let btf = hooks
        .iter()
        .any(|h| h.spec.name == SKIP_VMA_BTF_HOOK && h.will_attach());
    let Some(classic) = hooks
        .iter_mut()
        .find(|h| h.spec.name == SKIP_VMA_HOOK && h.will_attach())
    else {
        return false;
    };
    if !btf {
        return false;
    }
    classic.mechanism = Mechanism::TpBtf;
    classic.carried_by = Some(SKIP_VMA_BTF_HOOK);
    classic.reasons.push(Reason::CarriedBy(SKIP_VMA_BTF_HOOK));
    true
}

impl HookPlan {
    /// This hook as it is without its carrier: its own programs (the loader's fallback when
    /// the carrier's program fails).
    pub fn uncarried(&self) -> Option<Self> {
        self.carried_by?;
        let mut h = self.clone();
        h.carried_by = None;
        h.mechanism = match h.spec.programs {
            Programs::Tracepoint(_) => Mechanism::Tracepoint,
            _ => return None,
        };
        h.reasons.retain(|r| !matches!(r, Reason::CarriedBy(_)));
        Some(h)
    }
}
