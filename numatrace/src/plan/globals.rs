//! The programs' globals: tracepoint record offsets from tracefs formats, struct field offsets
//! and argument positions from BTF, and the per-version conventions the programs are told.

use numatrace_common::*;

use crate::kernel::{
    btf::BtfParam,
    facts::{KernelFacts, KernelVersion},
    tracefs::Format,
};

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

impl Offsets {
    /// The tracepoints whose format has the layout compiled into the programs (`CTX_*` bits,
    /// the `TP_CTX_READS` global): those read their record in place, the others copy it. Every
    /// offset must match, absent fields included, so that no program reads a field the running
    /// kernel's record lacks or has elsewhere.
    pub fn ctx_reads(&self) -> u32 {
        [
            (self.skip_vma == SkipVmaOffsets::KNOWN, CTX_SKIP_VMA),
            (self.move_numa == MoveOffsets::KNOWN, CTX_MOVE),
            (self.swap_numa == PairOffsets::KNOWN, CTX_SWAP),
            (self.stick_numa == PairOffsets::KNOWN, CTX_STICK),
            (self.migrate == MigrateOffsets::KNOWN, CTX_MIGRATE),
        ]
        .into_iter()
        .filter(|(same, _)| *same)
        .fold(0, |bits, (_, bit)| bits | bit)
    }
}

/// A field's offset, absent where the format lacks it or it lies past the bytes the programs
/// copy of a record (`TP_RECORD_BYTES`; none does on any known kernel, the check keeps a
/// future layout from being misread), or is not aligned to its size.
fn off(f: &Format, names: &[&str], size: u32) -> u32 {
    f.offset(names, size)
        .filter(|o| o + size <= TP_RECORD_BYTES && o % size == 0)
        .unwrap_or(FIELD_ABSENT)
}

/// Writes the offsets of tracepoint `name` from its format; returns the fields its program
/// needs that the format lacks (empty: none).
pub(super) fn tracepoint_offsets(name: &str, f: &Format, o: &mut Offsets) -> Vec<&'static str> {
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
    missing
}

/// Offset of BTF field `struct.path`, `FIELD_ABSENT` where BTF lacks it.
pub(super) fn field(facts: &KernelFacts, name: &str) -> u32 {
    facts
        .btf_fields
        .get(name)
        .copied()
        .flatten()
        .unwrap_or(FIELD_ABSENT)
}

/// mpol_misplaced's second argument is a `struct vm_fault *` (6.11+), not the vma.
pub(super) fn mpol_takes_vmf(facts: &KernelFacts) -> bool {
    facts
        .btf_signatures
        .get("mpol_misplaced")
        .and_then(|s| s.get(1))
        .is_some_and(|p| p.name == "vmf" || p.ty == "struct vm_fault *")
}

/// Position of the parameter named `names` (`a|b`: either) in `sig`.
pub(super) fn arg_position(sig: &[BtfParam], names: &str) -> Option<u32> {
    sig.iter()
        .position(|p| names.split('|').any(|n| n == p.name))
        .map(|i| i as u32)
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
pub(super) fn function_globals(facts: &KernelFacts, o: &mut Offsets) {
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
        // Checked first: FIELD_ABSENT + the page size overflows.
        if off == FIELD_ABSENT {
            return None;
        }
        Some(facts.page_size? + off)
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
        // Only for the record's copy of it: absent, that reads 0.
        mm_numa_scan_offset: field(facts, "mm_struct.numa_scan_offset"),
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
        // Decided once the hooks are (`plan`).
        whole_hook: 0,
    };
    let range = |n: &str| facts.scan_ranges.get(n).copied().unwrap_or([0, 0]);
    o.scan_ranges = ScanRanges {
        task_numa_work: range("task_numa_work"),
        change_prot_numa: range("change_prot_numa"),
    };
}

/// x86-64's vmemmap start without memory randomization (4-level paging).
const X86_64_VMEMMAP_START: u64 = 0xffff_ea00_0000_0000;

/// Where to find a page's node (SPARSEMEM_VMEMMAP): see `NodeMap`. x86-64: `vmemmap_base`
/// (randomized layouts) or the fixed start; arm64: the kernel's own VMCOREINFO numbers.
fn node_map(facts: &KernelFacts) -> NodeMap {
    let mut m = NodeMap::EMPTY;
    if facts.node_pfn_ranges.is_empty() {
        return m;
    }
    // Only an arm64 kernel states vmemmap_arm64, so facts of either architecture plan the
    // same on any host (the unit tests read both).
    if let Some(v) = facts.vmemmap_arm64 {
        m.vmemmap_const = v;
    } else if cfg!(target_arch = "x86_64") {
        match facts.vmemmap_base_sym {
            Some(sym) => m.vmemmap_base_sym = sym,
            None => m.vmemmap_const = X86_64_VMEMMAP_START,
        }
    } else {
        return m;
    }
    m.page_size = facts.page_size.map_or(0, u64::from);
    for (slot, r) in m.ranges.iter_mut().zip(&facts.node_pfn_ranges) {
        *slot = *r;
    }
    m.nranges = facts.node_pfn_ranges.len().min(NODE_RANGES) as u64;
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_field_the_programs_cannot_read_from_their_copy_is_absent() {
        let f = Format::parse(
            "\tfield:unsigned long near;\toffset:8;\tsize:8;\tsigned:0;\n\
             \tfield:unsigned long last;\toffset:120;\tsize:8;\tsigned:0;\n\
             \tfield:unsigned long past;\toffset:128;\tsize:8;\tsigned:0;\n\
             \tfield:int odd;\toffset:10;\tsize:4;\tsigned:1;",
        );
        assert_eq!(off(&f, &["near"], 8), 8);
        assert_eq!(
            off(&f, &["last"], 8),
            120,
            "ends exactly at TP_RECORD_BYTES"
        );
        assert_eq!(off(&f, &["past"], 8), FIELD_ABSENT);
        assert_eq!(
            off(&f, &["odd"], 4),
            FIELD_ABSENT,
            "not aligned to its size"
        );
    }

    #[test]
    fn the_compiled_layouts_can_be_read_in_place() {
        // A tracepoint program may read its context at 8 and above (not the common header),
        // aligned to the field's size, within the bytes the copy would hold.
        let fields = [
            (SkipVmaOffsets::KNOWN.numa_scan_offset, 8),
            (SkipVmaOffsets::KNOWN.vm_start, 8),
            (SkipVmaOffsets::KNOWN.vm_end, 8),
            (SkipVmaOffsets::KNOWN.reason, 4),
            (MoveOffsets::KNOWN.pid, 4),
            (MoveOffsets::KNOWN.tgid, 4),
            (MoveOffsets::KNOWN.src_cpu, 4),
            (MoveOffsets::KNOWN.src_nid, 4),
            (MoveOffsets::KNOWN.dst_cpu, 4),
            (MoveOffsets::KNOWN.dst_nid, 4),
            (PairOffsets::KNOWN.src_pid, 4),
            (PairOffsets::KNOWN.src_tgid, 4),
            (PairOffsets::KNOWN.src_cpu, 4),
            (PairOffsets::KNOWN.src_nid, 4),
            (PairOffsets::KNOWN.dst_pid, 4),
            (PairOffsets::KNOWN.dst_tgid, 4),
            (PairOffsets::KNOWN.dst_cpu, 4),
            (PairOffsets::KNOWN.dst_nid, 4),
            (MigrateOffsets::KNOWN.succeeded, 8),
            (MigrateOffsets::KNOWN.failed, 8),
            (MigrateOffsets::KNOWN.thp_succeeded, 8),
            (MigrateOffsets::KNOWN.thp_failed, 8),
            (MigrateOffsets::KNOWN.mode, 4),
            (MigrateOffsets::KNOWN.reason, 4),
        ];
        for (off, size) in fields {
            assert!(
                off >= 8 && off % size == 0 && off + size <= TP_RECORD_BYTES,
                "{off}"
            );
        }
    }
}
