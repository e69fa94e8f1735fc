//! Why a hook does not get a better mechanism (or any), and notes on the one it gets, typed:
//! the plan and the loader's fallbacks decide by variant, `probes` prints the `Display` text.

use std::fmt;

use crate::{
    kernel::catalogue::FentryVariant,
    kernel::{facts::KernelVersion, preempt::Preemption},
};

use super::Mechanism;

/// Why a mechanism, or the whole hook, is not used on this kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    NoTracefs,
    /// The tracepoint was added after this kernel's version.
    TracepointTooOld {
        version: KernelVersion,
        since: KernelVersion,
    },
    TracepointAbsent,
    /// Its tracefs format lacks fields the program needs.
    FormatLacks(Vec<&'static str>),
    /// No candidate symbol of a function hook is in kallsyms or BTF.
    SymbolAbsent(&'static [&'static str]),
    /// fentry or tp_btf without `/sys/kernel/btf/vmlinux`.
    NoKernelBtf(Mechanism),
    NoBtfFunc(String),
    /// No fentry program set of this numatrace reads the function's parameters.
    NoFentryVariant {
        symbol: String,
        /// Parameter names in BTF (`None`: no signature).
        params: Option<Vec<String>>,
        variants: &'static [FentryVariant],
    },
    /// The probe fentry program did not load.
    FentryRefused {
        errno: i32,
        error: String,
    },
    FentryNotTried(String),
    FentryNotTested,
    /// fentry loads, but the kernel preempts kernel code, so the kprobe is preferred.
    Preemptible(Preemption),
    NoKprobes,
    NoKallsyms(String),
    /// BTF's signature has no parameter with the name of an argument the kprobe reads.
    ArgumentNamesUnknown {
        symbol: String,
        params: Vec<String>,
        unknown: Vec<&'static str>,
    },
    /// mpol_misplaced without the fields that tell a COW-shared page.
    CowUnrecognisable(Vec<&'static str>),
    /// tp_btf: the classic tracepoint it rides on is absent.
    BaseTracepointAbsent(&'static str),
    NoBtfTrace(&'static str),
    BtfLacks(Vec<&'static str>),
    /// Sampling: task_numa_work itself is hooked.
    NotNeeded,
    /// Sampling: no address range to attribute samples to task_numa_work.
    NoScanRange,
}

/// One line of a hook's "why not / notes": a refusal, or what the chosen mechanism lacks or
/// works around.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reason {
    Refused(Refusal),
    /// A kprobe without a BTF signature reads arguments at the usual positions.
    UsualArgumentPositions(String),
    /// fentry chosen on a preemptible kernel after its kprobe was refused.
    PreemptibleFentry,
    /// BTF lacks a field the programs read: the hook attaches without what it gives.
    ReadsLost {
        field: &'static str,
        loses: &'static str,
    },
    /// Another hook's program does this one's work (that hook's name).
    CarriedBy(&'static str),
    /// The loader's program of `refused` failed; it attached `used` instead.
    FellBack {
        refused: Mechanism,
        used: Mechanism,
        error: String,
    },
}

impl From<Refusal> for Reason {
    fn from(r: Refusal) -> Self {
        Self::Refused(r)
    }
}

/// Kernel-internal ENOTSUPP, which BPF returns for trampolines it cannot build; not in libc.
const ENOTSUPP: i32 = 524;

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

/// `(a, b)`.
struct Signature<'a>(&'a [String]);

impl fmt::Display for Signature<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "({})", self.0.join(", "))
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoTracefs => f.write_str("tracefs is not available"),
            Self::TracepointTooOld { version, since } => write!(
                f,
                "tracepoint absent on this kernel version ({version} < {}.{}, where it was added)",
                since.major, since.minor
            ),
            Self::TracepointAbsent => f.write_str("tracepoint absent on this kernel"),
            Self::FormatLacks(fields) => {
                write!(f, "tracepoint format lacks field(s) {}", fields.join(", "))
            }
            Self::SymbolAbsent(symbols) => write!(
                f,
                "symbol {} absent from kallsyms and BTF (inlined, renamed or not built in)",
                symbols.join(" / ")
            ),
            Self::NoKernelBtf(m) => write!(f, "{m}: no kernel BTF (/sys/kernel/btf/vmlinux)"),
            Self::NoBtfFunc(sym) => write!(f, "fentry: {sym} has no BTF FUNC entry"),
            Self::NoFentryVariant {
                symbol,
                params,
                variants,
            } => {
                write!(f, "fentry: no program for {symbol}")?;
                match params {
                    Some(p) => write!(f, "{}", Signature(p))?,
                    None => f.write_str("(?)")?,
                }
                let reads: Vec<String> = variants
                    .iter()
                    .map(|v| format!("({})", v.params.join(", ")))
                    .collect();
                write!(f, " (this numatrace reads {})", reads.join(" or "))
            }
            Self::FentryRefused { errno, error } => write!(
                f,
                "fentry refused: {} ({errno}): {error}",
                errno_name(*errno)
            ),
            Self::FentryNotTried(why) => write!(f, "fentry not tried: {why}"),
            Self::FentryNotTested => f.write_str("fentry not tested"),
            Self::Preemptible(p) => write!(
                f,
                "fentry not used: this kernel preempts kernel code (preempt={}, from {}), and \
                 the kernel skips a trampoline program on a CPU where a preempted run of it is \
                 pending (lost calls); a kprobe program runs with preemption off",
                p.model, p.from
            ),
            Self::NoKprobes => {
                f.write_str("kprobe: kprobes not built in (no kprobe PMU, no kprobe_events)")
            }
            Self::NoKallsyms(sym) => write!(f, "kprobe: {sym} is not in kallsyms (inlined?)"),
            Self::ArgumentNamesUnknown {
                symbol,
                params,
                unknown,
            } => write!(
                f,
                "kprobe: {symbol}{} has no parameter named {}",
                Signature(params),
                unknown.join(", ")
            ),
            Self::CowUnrecognisable(fields) => write!(
                f,
                "BTF lacks {}: COW-shared pages cannot be recognised",
                fields.join(", ")
            ),
            Self::BaseTracepointAbsent(tp) => write!(f, "tracepoint {tp} absent on this kernel"),
            Self::NoBtfTrace(name) => write!(f, "tp_btf: BTF has no btf_trace_{name}"),
            Self::BtfLacks(fields) => write!(f, "BTF lacks {}", fields.join(", ")),
            Self::NotNeeded => {
                f.write_str("not needed: task_numa_work is hooked, scan time is measured exactly")
            }
            Self::NoScanRange => {
                f.write_str("task_numa_work's address is not in /proc/kallsyms (hidden or absent)")
            }
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Refused(r) => r.fmt(f),
            Self::UsualArgumentPositions(sym) => write!(
                f,
                "kprobe: no BTF signature of {sym}: arguments read at their usual positions"
            ),
            Self::PreemptibleFentry => {
                f.write_str("fentry on a preemptible kernel: runs it skips are in program_misses")
            }
            Self::ReadsLost { field, loses } => write!(f, "BTF lacks {field}: no {loses}"),
            Self::CarriedBy(hook) => write!(
                f,
                "counted by {hook}'s program, the one program on the tracepoint (the classic \
                 program is the fallback)"
            ),
            Self::FellBack {
                refused,
                used,
                error,
            } => write!(f, "{refused} program refused, fell back to {used}: {error}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::preempt::Model;

    /// `probes` prints these; scripts and docs/kernels.md quote them.
    #[test]
    fn texts_are_stable() {
        const VARIANTS: &[FentryVariant] = &[
            FentryVariant {
                params: &["page|folio", "vma", "node"],
                programs: &[],
            },
            FentryVariant {
                params: &["folio", "node"],
                programs: &[],
            },
        ];
        let v = |major, minor, patch| KernelVersion::new(major, minor, patch);
        let names = |n: &[&str]| n.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        for (r, text) in [
            (Refusal::NoTracefs.into(), "tracefs is not available"),
            (
                Refusal::TracepointTooOld {
                    version: v(6, 1, 0),
                    since: v(6, 7, 0),
                }
                .into(),
                "tracepoint absent on this kernel version (6.1.0 < 6.7, where it was added)",
            ),
            (
                Refusal::TracepointAbsent.into(),
                "tracepoint absent on this kernel",
            ),
            (
                Refusal::FormatLacks(vec!["src_tgid", "dst_pid"]).into(),
                "tracepoint format lacks field(s) src_tgid, dst_pid",
            ),
            (
                Refusal::SymbolAbsent(&["a", "b"]).into(),
                "symbol a / b absent from kallsyms and BTF (inlined, renamed or not built in)",
            ),
            (
                Refusal::NoKernelBtf(Mechanism::Fentry).into(),
                "fentry: no kernel BTF (/sys/kernel/btf/vmlinux)",
            ),
            (
                Refusal::NoKernelBtf(Mechanism::TpBtf).into(),
                "tp_btf: no kernel BTF (/sys/kernel/btf/vmlinux)",
            ),
            (
                Refusal::NoBtfFunc("f".into()).into(),
                "fentry: f has no BTF FUNC entry",
            ),
            (
                Refusal::NoFentryVariant {
                    symbol: "m".into(),
                    params: Some(names(&["folio", "vmf"])),
                    variants: VARIANTS,
                }
                .into(),
                "fentry: no program for m(folio, vmf) (this numatrace reads \
                 (page|folio, vma, node) or (folio, node))",
            ),
            (
                Refusal::NoFentryVariant {
                    symbol: "m".into(),
                    params: None,
                    variants: &VARIANTS[1..],
                }
                .into(),
                "fentry: no program for m(?) (this numatrace reads (folio, node))",
            ),
            (
                Refusal::FentryRefused {
                    errno: 1,
                    error: "Operation not permitted".into(),
                }
                .into(),
                "fentry refused: EPERM (1): Operation not permitted",
            ),
            (
                Refusal::FentryRefused {
                    errno: 524,
                    error: "x".into(),
                }
                .into(),
                "fentry refused: ENOTSUPP (524): x",
            ),
            (
                Refusal::FentryRefused {
                    errno: 99,
                    error: "x".into(),
                }
                .into(),
                "fentry refused: errno (99): x",
            ),
            (
                Refusal::FentryNotTried("--no-fentry".into()).into(),
                "fentry not tried: --no-fentry",
            ),
            (Refusal::FentryNotTested.into(), "fentry not tested"),
            (
                Refusal::Preemptible(Preemption {
                    model: Model::Lazy,
                    from: "uname -v".into(),
                })
                .into(),
                "fentry not used: this kernel preempts kernel code (preempt=lazy, from uname -v), \
                 and the kernel skips a trampoline program on a CPU where a preempted run of it \
                 is pending (lost calls); a kprobe program runs with preemption off",
            ),
            (
                Refusal::NoKprobes.into(),
                "kprobe: kprobes not built in (no kprobe PMU, no kprobe_events)",
            ),
            (
                Refusal::NoKallsyms("f".into()).into(),
                "kprobe: f is not in kallsyms (inlined?)",
            ),
            (
                Refusal::ArgumentNamesUnknown {
                    symbol: "f".into(),
                    params: names(&["a", "b"]),
                    unknown: vec!["node", "vma|vmf"],
                }
                .into(),
                "kprobe: f(a, b) has no parameter named node, vma|vmf",
            ),
            (
                Refusal::CowUnrecognisable(vec!["vm_area_struct.vm_flags", "page._mapcount"])
                    .into(),
                "BTF lacks vm_area_struct.vm_flags, page._mapcount: COW-shared pages cannot be \
                 recognised",
            ),
            (
                Refusal::BaseTracepointAbsent("sched:sched_skip_vma_numa").into(),
                "tracepoint sched:sched_skip_vma_numa absent on this kernel",
            ),
            (
                Refusal::NoBtfTrace("sched_skip_vma_numa").into(),
                "tp_btf: BTF has no btf_trace_sched_skip_vma_numa",
            ),
            (
                Refusal::BtfLacks(vec!["a.b", "c.d"]).into(),
                "BTF lacks a.b, c.d",
            ),
            (
                Refusal::NotNeeded.into(),
                "not needed: task_numa_work is hooked, scan time is measured exactly",
            ),
            (
                Refusal::NoScanRange.into(),
                "task_numa_work's address is not in /proc/kallsyms (hidden or absent)",
            ),
            (
                Reason::UsualArgumentPositions("f".into()),
                "kprobe: no BTF signature of f: arguments read at their usual positions",
            ),
            (
                Reason::PreemptibleFentry,
                "fentry on a preemptible kernel: runs it skips are in program_misses",
            ),
            (
                Reason::ReadsLost {
                    field: "task_struct.node_stamp",
                    loses: "the node_stamp invariants (seed 003)",
                },
                "BTF lacks task_struct.node_stamp: no the node_stamp invariants (seed 003)",
            ),
            (
                Reason::FellBack {
                    refused: Mechanism::Kprobe,
                    used: Mechanism::Fentry,
                    error: "e".into(),
                },
                "kprobe program refused, fell back to fentry: e",
            ),
        ] {
            let r: Reason = r;
            assert_eq!(r.to_string(), text);
        }
    }
}
