//! The "kernel changed under us" guard: `plan()` and the argument mapping, checked against what
//! numatrace read in a 2-node guest of every kernel line it supports (`numatrace probes --facts`,
//! saved by `cargo xtask vm-test` and committed under `tests/fixtures/kernels/`), without
//! booting them. A newer kernel of a line that changes a hooked signature or a field shows up
//! in vm-test's table as a fixture that differs; refreshing the fixture reruns these.

use numatrace_common::*;

use super::{
    HookKind, HookPlan, Mechanism, Plan, Programs, Reason, Refusal, fentry_fallback, plan,
};
use crate::kernel::facts::{FentryTest, KernelFacts, KernelVersion};

/// Each line's fixture, by vm-test label.
const LINES: &[(&str, &str)] = &[
    (
        "5.10",
        include_str!("../../tests/fixtures/kernels/5.10.json"),
    ),
    ("6.1", include_str!("../../tests/fixtures/kernels/6.1.json")),
    ("6.8", include_str!("../../tests/fixtures/kernels/6.8.json")),
    (
        "6.12",
        include_str!("../../tests/fixtures/kernels/6.12.json"),
    ),
    ("7.x", include_str!("../../tests/fixtures/kernels/7.x.json")),
    // arm64's lines (`cargo xtask vm-test --arch arm64`).
    (
        "arm64-6.1",
        include_str!("../../tests/fixtures/kernels/arm64-6.1.json"),
    ),
    (
        "arm64-6.12",
        include_str!("../../tests/fixtures/kernels/arm64-6.12.json"),
    ),
    (
        "arm64-7.x",
        include_str!("../../tests/fixtures/kernels/arm64-7.x.json"),
    ),
];

fn facts(label: &str) -> KernelFacts {
    let text = LINES
        .iter()
        .find(|(l, _)| *l == label)
        .map(|(_, t)| *t)
        .unwrap_or_else(|| panic!("no fixture for {label}"));
    serde_json::from_str(text).unwrap_or_else(|e| panic!("fixture {label}: {e}"))
}

fn hook<'a>(p: &'a Plan, name: &str) -> &'a HookPlan {
    p.hooks
        .iter()
        .find(|h| h.spec.name == name)
        .unwrap_or_else(|| panic!("no hook {name}"))
}

const MIGRATE: &str = "migrate_misplaced_folio|_page";

/// On every line: each function the kernel has is hooked, by fentry where its probe program
/// loaded (with the program variant whose parameter names are the kernel's) on a kernel that
/// does not preempt kernel code, else by kprobe; nothing is left without a reason.
#[test]
fn every_line_hooks_every_function_it_has() {
    for (label, _) in LINES {
        let f = facts(label);
        assert!(f.numa_nodes >= 2, "{label}: fixture from a 2-node guest");
        let p = plan(&f);
        for h in &p.hooks {
            let HookKind::Function { .. } = h.spec.kind else {
                continue;
            };
            let Some(sym) = &h.symbol else {
                assert!(!h.reasons.is_empty(), "{label} {}", h.spec.name);
                continue;
            };
            assert!(h.will_attach(), "{label} {}: {:?}", h.spec.name, h.reasons);
            let fentry_loads = f.fentry.get(sym) == Some(&FentryTest::Loaded);
            let preemptible = f.preemption.as_ref().is_some_and(|p| p.model.preemptible());
            let want = if fentry_loads && !preemptible {
                Mechanism::Fentry
            } else {
                Mechanism::Kprobe
            };
            assert_eq!(
                h.mechanism, want,
                "{label} {}: {:?}",
                h.spec.name, h.reasons
            );
            if h.mechanism == Mechanism::Fentry {
                let Programs::Function { fentry, .. } = h.spec.programs else {
                    unreachable!()
                };
                let names: Vec<&str> = f.btf_signatures[sym]
                    .iter()
                    .map(|p| p.name.as_str())
                    .collect();
                assert!(
                    fentry[h.fentry_variant].matches(&names),
                    "{label} {sym}{names:?}"
                );
            }
        }
    }
}

/// Which argument is which, per line, as the kernel sources have them.
#[test]
fn argument_positions_by_name() {
    for (label, symbol, node_arg, ok_is_zero, programs) in [
        (
            "5.10",
            "migrate_misplaced_page",
            2,
            0,
            PROG_FENTRY_MIGRATE_MISPLACED,
        ),
        (
            "6.1",
            "migrate_misplaced_page",
            2,
            0,
            PROG_FENTRY_MIGRATE_MISPLACED,
        ),
        (
            "6.8",
            "migrate_misplaced_folio",
            2,
            0,
            PROG_FENTRY_MIGRATE_MISPLACED,
        ),
        (
            "6.12",
            "migrate_misplaced_folio",
            2,
            1,
            PROG_FENTRY_MIGRATE_MISPLACED,
        ),
        // (folio, node) from 6.14: its own fentry programs, node in slot 1.
        (
            "7.x",
            "migrate_misplaced_folio",
            1,
            1,
            PROG_FENTRY_MIGRATE_MISPLACED_NO_VMA,
        ),
    ] {
        let f = facts(label);
        let p = plan(&f);
        let m = hook(&p, MIGRATE);
        assert_eq!(m.symbol.as_deref(), Some(symbol), "{label}");
        // On a preemptible line the kprobe comes first; the fentry pair it would fall back to
        // is the one for the line's signature all the same.
        let fentry = fentry_fallback(&f, m).unwrap_or_else(|| m.clone());
        assert_eq!(fentry.programs()[0], programs, "{label}");
        let c = p.offsets.func;
        assert_eq!(c.prot_vma_arg, 0, "{label}");
        assert_eq!(c.migrate_page_arg, 0, "{label}");
        assert_eq!(c.migrate_node_arg, node_arg, "{label}");
        assert_eq!(c.migrate_ok_is_zero, ok_is_zero, "{label}");
        assert_eq!(
            (c.fault_node_arg, c.fault_pages_arg, c.fault_flags_arg),
            (1, 2, 3),
            "{label}"
        );
        assert_eq!(
            (c.mpol_page_arg, c.mpol_vma_arg, c.mpol_addr_arg),
            (0, 1, 2),
            "{label}"
        );
        // mpol_misplaced's second argument is a vm_fault from 6.11: the vma is read through it.
        let vmf = f.version >= KernelVersion::new(6, 11, 0);
        assert_eq!(p.offsets.page.vmf_vma != FIELD_ABSENT, vmf, "{label}");
        for field in [
            p.offsets.task.sum_exec_runtime,
            p.offsets.task.node_stamp,
            p.offsets.task.mm,
            p.offsets.page.vm_flags,
            p.offsets.page.mapcount,
            p.offsets.page.large_mapcount,
        ] {
            assert_ne!(field, FIELD_ABSENT, "{label}: {:?}", p.offsets);
        }
    }
}

/// What each line lacks, said as docs/kernels.md's table says it.
#[test]
fn per_line_tracepoints_and_fallbacks() {
    for (label, _) in LINES {
        let f = facts(label);
        let p = plan(&f);
        let skip = hook(&p, "sched:sched_skip_vma_numa");
        let has_skip = f.version >= KernelVersion::new(6, 7, 0);
        assert_eq!(skip.will_attach(), has_skip, "{label}: {skip:?}");
        let gap = hook(&p, "tp_btf:sched_skip_vma_numa");
        assert_eq!(
            gap.will_attach(),
            f.version >= KernelVersion::new(6, 8, 0),
            "{label}: {gap:?}"
        );
        // mm_migrate_pages has thp_succeeded/thp_failed on every supported line (5.9+).
        assert_ne!(p.offsets.migrate.thp_succeeded, FIELD_ABSENT, "{label}");
        assert_eq!(
            hook(&p, "migrate:mm_migrate_pages").mechanism,
            Mechanism::Tracepoint
        );
    }
    // 5.10 refuses fentry on do_huge_pmd_numa_page (EINVAL): its kprobe instead.
    let p = plan(&facts("5.10"));
    let h = hook(&p, "do_huge_pmd_numa_page");
    assert_eq!(h.mechanism, Mechanism::Kprobe, "{h:?}");
    assert!(h.reasons[0].to_string().contains("EINVAL"), "{h:?}");
    assert!(matches!(
        h.reasons[0],
        Reason::Refused(Refusal::FentryRefused {
            errno: libc::EINVAL,
            ..
        })
    ));
}

/// Debian's 7.x preempts kernel code (lazy): every function hook it has takes its kprobe, so
/// that no preempted trampoline run hides other tasks' calls; the 6.x lines keep fentry.
#[test]
fn the_preemptible_line_takes_kprobes() {
    let f = facts("7.x");
    assert!(f.preemption.as_ref().is_some_and(|p| p.model.preemptible()));
    for h in plan(&f).hooks {
        if let HookKind::Function { .. } = h.spec.kind
            && h.symbol.is_some()
        {
            assert_eq!(h.mechanism, Mechanism::Kprobe, "7.x {}", h.spec.name);
        }
    }
    let f = facts("6.12");
    assert!(!f.preemption.as_ref().is_some_and(|p| p.model.preemptible()));
    assert_eq!(hook(&plan(&f), MIGRATE).mechanism, Mechanism::Fentry);
}

/// arm64: a page's node is found from the `vmemmap` the kernel states in VMCOREINFO (48-bit VA
/// on 6.1, 52-bit on 6.12 and 7.x: different VMEMMAP_START, both the kernel's own number), never
/// from x86-64's `vmemmap_base`; the node ranges are the guest's two nodes.
#[test]
fn arm64_lines_find_a_pages_node_from_the_kernels_vmemmap() {
    for label in ["arm64-6.1", "arm64-6.12", "arm64-7.x"] {
        let f = facts(label);
        let vmemmap = f
            .vmemmap_arm64
            .unwrap_or_else(|| panic!("{label}: no vmemmap"));
        assert_eq!(f.vmemmap_base_sym, None, "{label}");
        let m = plan(&f).offsets.node_map;
        assert_eq!(m.vmemmap_const, vmemmap, "{label}");
        assert_eq!(m.vmemmap_base_sym, 0, "{label}");
        assert_eq!(m.page_size, 64, "{label}");
        assert_eq!(m.nranges, 2, "{label}");
    }
    // RAM starts at 1 GiB in QEMU's virt machine: on 6.1 (48-bit VA) struct page 0x40000 is
    // VMEMMAP_START, -(1 << 42). From 6.12 (built for 52 bits, run without LPA2 in the guests:
    // 48 bits and a negative memstart_addr) it lies inside the vmemmap region, which starts
    // below -1 GiB by the 52-bit linear map's pages.
    let first = |l: &str| facts(l).vmemmap_arm64.unwrap().wrapping_add(0x40000 * 64);
    assert_eq!(first("arm64-6.1"), 0xffff_fc00_0000_0000);
    for l in ["arm64-6.12", "arm64-7.x"] {
        assert!(
            (0xffff_c1ff_c000_0000..0xffff_ffff_c000_0000).contains(&first(l)),
            "{l}: {:#x}",
            first(l)
        );
    }
}

/// Which tracepoints each line's programs read in place (the layout compiled into them, see
/// `Offsets::ctx_reads`): every record numatrace reads from 6.8 on; 5.10 and 6.1 have the same
/// placement records, no sched_skip_vma_numa, and mm_migrate_pages without `large_folio_split`
/// (its mode and reason 8 bytes earlier), which they copy.
#[test]
fn each_line_reads_in_place_the_records_laid_out_as_compiled() {
    let sched = CTX_MOVE | CTX_SWAP | CTX_STICK;
    let all = CTX_SKIP_VMA | sched | CTX_MIGRATE;
    for (label, want) in [
        ("5.10", sched),
        ("6.1", sched),
        ("6.8", all),
        ("6.12", all),
        ("7.x", all),
        ("arm64-6.1", sched),
        ("arm64-6.12", all),
        ("arm64-7.x", all),
    ] {
        let got = plan(&facts(label)).offsets.ctx_reads();
        assert_eq!(got, want, "{label}: {got:#x}, expected {want:#x}");
    }
}
