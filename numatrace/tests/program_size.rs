//! A guard on what each eBPF program costs, that cannot flake: the instructions of every
//! program in the embedded object (its ELF symbol's size, and those of the functions it calls
//! out of line but the mem* helpers), against the committed baseline
//! `tests/fixtures/program-insns.json`. The object comes from the pinned nightly and
//! bpf-linker, so the figure is the same on every machine. A change that makes a program more
//! than 10 % (and 16 instructions) heavier fails here, naming the program, the figure and the
//! baseline; one that makes it lighter passes and says so. `NUMATRACE_UPDATE_BASELINE=1`
//! rewrites the baseline, to commit with the change that explains it.
//!
//! The baseline moves with each change it explains; the budget below does not: no program may
//! exceed its budget, whatever the baseline says. (The instructions a program runs are fewer:
//! the verifier removes what the running command does not read, see `bpf::needs`, and most
//! branches are not taken.)

use std::{collections::BTreeMap, path::Path};

use numatrace_common::PROGRAMS;
use object::{Object as _, ObjectSection as _, ObjectSymbol as _};

/// Instructions of each program of the object, by name: its own, and those of each function
/// of `.text` it calls but the mem* helpers (the rare paths kept out of line, see
/// numatrace-ebpf's `tasks::task_slot_slow`), counted once.
fn program_insns() -> BTreeMap<String, u64> {
    let file = object::File::parse(numatrace::bpf::OBJECT).expect("the embedded object parses");
    let sizes: BTreeMap<&str, u64> = file
        .symbols()
        .filter(|s| s.is_definition())
        .filter_map(|s| Some((s.name().ok()?, s.size())))
        .collect();
    let text = file.section_by_name(".text");
    // Functions of `.text` by address: (name, size).
    let out_of_line: BTreeMap<u64, (&str, u64)> = file
        .symbols()
        .filter(|s| s.is_definition() && s.kind() == object::SymbolKind::Text)
        .filter(|s| {
            text.as_ref()
                .is_some_and(|t| s.section_index() == Some(t.index()))
        })
        .filter_map(|s| Some((s.address(), (s.name().ok()?, s.size()))))
        .collect();
    PROGRAMS
        .iter()
        .map(|p| {
            let sym = file
                .symbols()
                .find(|s| s.is_definition() && s.name() == Ok(p))
                .unwrap_or_else(|| panic!("program {p} is not in the object"));
            let own = sizes[p];
            let called = calls_into_text(&file, &sym, text.as_ref().map(|t| t.index()))
                .into_iter()
                .filter_map(|at| out_of_line.get(&at))
                .filter(|(name, _)| !name.starts_with("mem"))
                .map(|(name, size)| (*name, *size))
                .collect::<BTreeMap<_, _>>();
            // One eBPF instruction is 8 bytes (a 64-bit immediate load takes two).
            (p.to_string(), (own + called.values().sum::<u64>()) / 8)
        })
        .collect()
}

/// The `.text` addresses that program `sym` calls: its call instructions relocated against
/// `.text` (R_BPF_64_32, the target in the immediate, in instructions less one).
fn calls_into_text(
    file: &object::File<'_>,
    sym: &object::Symbol<'_, '_>,
    text: Option<object::SectionIndex>,
) -> Vec<u64> {
    let (Some(text), Some(index)) = (text, sym.section_index()) else {
        return Vec::new();
    };
    let section = file.section_by_index(index).expect("the program's section");
    let data = section.data().expect("the program's bytes");
    let range = sym.address()..sym.address() + sym.size();
    section
        .relocations()
        .filter(|(at, _)| range.contains(at))
        .filter(|(_, r)| {
            matches!(r.flags(), object::RelocationFlags::Elf { r_type } if r_type == object::elf::R_BPF_64_32)
        })
        .filter(|(_, r)| match r.target() {
            object::RelocationTarget::Symbol(s) => file
                .symbol_by_index(s)
                .is_ok_and(|s| s.section_index() == Some(text)),
            _ => false,
        })
        .map(|(at, _)| {
            let at = at as usize;
            let imm = i32::from_le_bytes(data[at + 4..at + 8].try_into().unwrap());
            (i64::from(imm) + 1) as u64 * 8
        })
        .collect()
}

/// Instructions each program may have at most. The hint-fault path's main program counts the
/// fault and its tiering decision; every other program is held under a kilo-instruction; the
/// floors and the fentry probe do nothing.
fn budget(program: &str) -> u64 {
    match program {
        "fentry_task_numa_fault" | "kprobe_task_numa_fault" => 1280,
        p if p.ends_with("_floor") || p == "fentry_probe" => 2,
        _ => 1024,
    }
}

#[test]
fn every_program_is_within_its_budget() {
    let over: Vec<String> = program_insns()
        .into_iter()
        .filter(|(name, insns)| *insns > budget(name))
        .map(|(name, insns)| format!("{name}: {insns} instructions, budget {}", budget(&name)))
        .collect();
    assert!(
        over.is_empty(),
        "eBPF programs over their instruction budget:\n{}",
        over.join("\n")
    );
}

fn allowed(baseline: u64) -> u64 {
    baseline + (baseline / 10).max(16)
}

#[test]
fn no_program_grew_past_its_baseline() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/program-insns.json");
    let now = program_insns();
    if std::env::var("NUMATRACE_UPDATE_BASELINE").is_ok_and(|v| v == "1") {
        std::fs::write(&path, serde_json::to_string_pretty(&now).unwrap() + "\n").unwrap();
    }
    let baseline: BTreeMap<String, u64> =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let mut heavier = Vec::new();
    for (name, &insns) in &now {
        match baseline.get(name) {
            None => heavier.push(format!(
                "{name}: {insns} instructions, not in the baseline (a new program: \
                 NUMATRACE_UPDATE_BASELINE=1)"
            )),
            Some(&base) if insns > allowed(base) => heavier.push(format!(
                "{name}: {insns} instructions, baseline {base} (+{:.0} %, at most {} allowed)",
                (insns as f64 / base as f64 - 1.0) * 100.0,
                allowed(base)
            )),
            Some(&base) if insns < base => {
                eprintln!("{name}: {insns} instructions, lighter than its baseline {base}")
            }
            Some(_) => {}
        }
    }
    for gone in baseline.keys().filter(|k| !now.contains_key(*k)) {
        eprintln!("{gone}: in the baseline, no longer a program");
    }
    assert!(
        heavier.is_empty(),
        "eBPF programs heavier than their baseline ({}):\n{}",
        path.display(),
        heavier.join("\n")
    );
}

#[test]
fn the_guard_sees_real_programs() {
    // A figure of 0 would pass any baseline: every program has at least its exit instruction,
    // and the hot ones are hundreds of instructions long.
    let now = program_insns();
    assert!(now.values().all(|&n| n >= 2), "{now:?}");
    assert!(now["tp_sched_process_exit"] > 100, "{now:?}");
    assert_eq!(allowed(1000), 1100);
    assert_eq!(allowed(10), 26);
}
