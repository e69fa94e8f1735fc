//! `plan()` on two kernels described in fixtures (this development host's 6.18 and Debian
//! 12's 6.1), and on variations of them that each lack one thing.

use numatrace_common::*;

use super::{globals::field, *};
use crate::kernel::{
    facts::{FentryTest, KernelFacts},
    tracefs::Format,
};

/// This machine: 6.18, BTF, no kprobes, fentry refused with EPERM, do_numa_page inlined; BTF
/// field `i` of `BTF_FIELDS` at `100 + 8 * i`.
const HOST_6_18: &str = include_str!("fixtures/host_6_18.json");
/// Debian 12's 6.1 cloud kernel: BTF, kprobes, fentry works, no skip_vma tracepoint,
/// migrate_misplaced_page, mm_migrate_pages without large_folio_split; no folio fields (the
/// compound mapcount lives in the first tail page); BTF field `i` at `10 + 8 * i`.
const DEBIAN_6_1: &str = include_str!("fixtures/debian_6_1.json");

fn host_6_18() -> KernelFacts {
    serde_json::from_str(HOST_6_18).expect("fixtures/host_6_18.json")
}

fn debian_6_1() -> KernelFacts {
    serde_json::from_str(DEBIAN_6_1).expect("fixtures/debian_6_1.json")
}

/// The hook's reasons as `probes` prints them.
fn texts(h: &HookPlan) -> Vec<String> {
    h.reasons.iter().map(ToString::to_string).collect()
}

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

fn hook<'a>(p: &'a Plan, name: &str) -> &'a HookPlan {
    p.hooks.iter().find(|h| h.spec.name == name).unwrap()
}

#[test]
fn host_6_18_attaches_every_tracepoint_and_no_function() {
    let p = plan(&host_6_18());
    for h in &p.hooks {
        match h.spec.kind {
            HookKind::Tracepoint { .. } if h.spec.name == SKIP_VMA_HOOK => {
                // Its tp_btf twin does its work: one program on the tracepoint.
                assert_eq!(h.mechanism, Mechanism::TpBtf);
                assert_eq!(h.carried_by, Some(SKIP_VMA_BTF_HOOK));
                assert!(h.programs().is_empty());
                assert!(h.will_attach());
                assert!(texts(h)[0].contains("counted by tp_btf:sched_skip_vma_numa"));
            }
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
                assert_eq!(h.programs(), [PROG_BTF_SKIP_VMA]);
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
    assert!(texts(work).iter().any(|r| r.contains("EPERM")), "{work:?}");
    assert!(
        texts(work)
            .iter()
            .any(|r| r.contains("kprobes not built in"))
    );
    let dnp = hook(&p, "do_numa_page");
    assert!(texts(dnp)[0].contains("absent from kallsyms"), "{dnp:?}");
    assert_eq!(
        hook(&p, "migrate_misplaced_folio|_page").symbol.as_deref(),
        Some("migrate_misplaced_folio")
    );
    assert_eq!(p.offsets.skip_vma.reason, 32);
    assert_eq!(p.offsets.migrate.reason, 60);
    assert_eq!(p.offsets.migrate.mode, 56);
    assert_eq!(p.offsets.fork.child_pid, 44);
    // 8 tracepoints (6.16+ has sched_skip_cpuset_numa), the tp_btf gap program and the
    // sampling fallback.
    assert_eq!(p.attachable().count(), 10);
    assert_eq!(p.offsets.gap.whole_hook, 1);
}

#[test]
fn the_classic_skip_program_is_the_fallback_of_the_tp_btf_one() {
    let p = plan(&host_6_18());
    let carried = hook(&p, SKIP_VMA_HOOK);
    let own = carried.uncarried().expect("carried, so it has its own");
    assert_eq!(own.mechanism, Mechanism::Tracepoint);
    assert_eq!(own.programs(), [PROG_SKIP_VMA]);
    assert!(own.reasons.is_empty(), "{own:?}");
    // Without the tp_btf program (here: BTF lacks a field it reads) the classic one counts.
    let mut f = host_6_18();
    f.btf_fields
        .insert("vma_numab_state.prev_scan_seq".into(), None);
    let p = plan(&f);
    let classic = hook(&p, SKIP_VMA_HOOK);
    assert_eq!(classic.mechanism, Mechanism::Tracepoint);
    assert_eq!(classic.carried_by, None);
    assert_eq!(classic.programs(), [PROG_SKIP_VMA]);
    assert_eq!(p.offsets.gap.whole_hook, 0);
    assert!(classic.uncarried().is_none());
}

#[test]
fn debian_6_1_lacks_skip_vma_and_prefers_fentry() {
    let p = plan(&debian_6_1());
    let skip = hook(&p, "sched:sched_skip_vma_numa");
    assert_eq!(skip.mechanism, Mechanism::None);
    assert!(texts(skip)[0].contains("6.1.0 < 6.7"), "{skip:?}");
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
    assert!(texts(sampling)[0].contains("not needed"), "{sampling:?}");
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
    assert!(texts(gap)[0].contains("absent"), "{gap:?}");
    assert_eq!(p.offsets.gap.whole_hook, 0);
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
        texts(gap),
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
            texts(h).iter().any(|r| r.contains("preempt=lazy")),
            "{}: {:?}",
            h.spec.name,
            h.reasons
        );
    }
    // A refused kprobe falls back to the fentry that loaded.
    let k = hook(&p, "task_numa_fault");
    let back = fentry_fallback(&f, k).expect("fentry fallback");
    assert_eq!(back.mechanism, Mechanism::Fentry);
    assert!(
        back.reasons.contains(&Reason::PreemptibleFentry),
        "{back:?}"
    );
    assert!(
        !back
            .reasons
            .iter()
            .any(|r| matches!(r, Reason::Refused(Refusal::Preemptible(_)))),
        "{back:?}"
    );
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
    assert!(texts(h)[0].contains("ENOTSUPP"), "{h:?}");
    assert!(matches!(
        h.reasons[0],
        Reason::Refused(Refusal::FentryRefused { errno: 524, .. })
    ));
    assert_eq!(h.programs(), [PROG_KPROBE_TASK_NUMA_FAULT]);
}

#[test]
fn mpol_misplaced_needs_its_fields() {
    let mut f = debian_6_1();
    f.btf_fields.insert("vm_area_struct.vm_flags".into(), None);
    let p = plan(&f);
    let h = hook(&p, "mpol_misplaced");
    assert_eq!(h.mechanism, Mechanism::None);
    assert!(texts(h).iter().any(|r| r.contains("vm_flags")), "{h:?}");
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
    assert!(texts(h)[0].contains("node_stamp"), "{h:?}");
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
    assert!(texts(swap)[0].contains("src_tgid"), "{swap:?}");
    assert!(texts(swap)[0].contains("dst_pid"));
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
        texts(hook(&p, "sched:sched_move_numa"))[0].contains("tracefs"),
        "{:?}",
        hook(&p, "sched:sched_move_numa")
    );
}

#[test]
fn no_mapcount_fields_at_all() {
    let mut f = debian_6_1();
    f.btf_fields.insert("page.compound_mapcount".into(), None);
    assert_eq!(plan(&f).offsets.page.large_mapcount, FIELD_ABSENT);
}
