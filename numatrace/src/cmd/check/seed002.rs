//! Seed 002's reproducer: its workload and control under the collector, then its verdict.

use super::*;
use crate::report::verdicts::seed002::*;

const REPRODUCER_THREADS_002: u32 = 4;

/// Seed 002's reproducer: fast scan sequences (short delay and period) and a scan size below
/// VMA B's 256 MiB, so that scanning B uses up each call's budget: the kernel then never
/// reaches the end of the address space in a call that skipped A, where it would force-scan A
/// whatever its history.
const TUNABLES_002: [(&str, &str); 4] = [
    ("scan_delay_ms", "100"),
    ("scan_period_min_ms", "100"),
    ("scan_period_max_ms", "200"),
    ("scan_size_mb", "16"),
];

pub async fn run(args: &CheckArgs, no_fentry: bool, signals: &mut Signals) -> Result<CheckResult> {
    let reproduce = args.command.is_empty();
    // In a fresh private directory (mkdtemp, 0700), removed with it.
    let scratch = crate::safe_fs::scratch_dir("numatrace-check-002-")?;
    let state = scratch.path().join("state");
    let command: Vec<OsString> = if reproduce {
        // Four threads (one touching, three asleep): on a patched kernel the gap climbs to
        // exactly 4 and stops, which nothing but the patch's rule would do.
        let mut c = vec![workload_binary()?.into_os_string(), "idle-vma".into()];
        c.extend([
            "--threads".into(),
            REPRODUCER_THREADS_002.to_string().into(),
        ]);
        c.extend(["--duration".into(), duration_arg(args.duration).into()]);
        c.extend(["--state-file".into(), state.clone().into_os_string()]);
        c
    } else {
        args.command.clone()
    };
    // Restored when the guard drops, whatever happens in between.
    let (_tunables, applied) = Tunables::set_if(reproduce, &TUNABLES_002);
    let collected = collect(&window_for(command, args, no_fentry), signals).await;
    let state_text = std::fs::read_to_string(&state).unwrap_or_default();
    drop(scratch);
    let (r, _) = collected?;
    let mut facts = match require(&r, &[GAP_HOOK]) {
        Ok(f) => f,
        Err(why) => return Ok(SEED.unsupported(why)),
    };
    if !applied.is_empty() {
        facts.insert("tunables".into(), applied.join(", "));
    }
    let all: Vec<&crate::model::VmaRecord> =
        r.processes.iter().flat_map(|p| p.vmas.iter()).collect();
    let gaps = gaps_of(&r);
    let (mut verdict, mut sentence, mut evidence) = verdict_002(&gaps);
    if reproduce {
        let st = parse_idle_vma_state(&state_text);
        let a = st.a.and_then(|(a0, _)| {
            all.iter().copied().find(|v| {
                let end = u64::from_str_radix(v.end.trim_start_matches("0x"), 16).unwrap_or(0);
                v.start_addr <= a0 && a0 < end
            })
        });
        let scan_times = match hook(&r, "change_prot_numa") {
            Some(h) if h.attached && h.mechanism == crate::plan::Mechanism::Fentry => true,
            _ => {
                facts.insert(
                    "scan_times".into(),
                    "unknown: change_prot_numa is not hooked with fexit (it needs the VMA)".into(),
                );
                false
            }
        };
        let phase = |n: &str| st.phases.get(n).copied();
        let times = a.map(|v| v.scan_times_ns.as_slice()).unwrap_or_default();
        let between = |from: Option<u64>, to: Option<u64>| match (from, to) {
            (Some(f), Some(t)) => times.iter().filter(|&&x| x >= f && x < t).count() as u64,
            _ => 0,
        };
        evidence.insert(
            "reproducer.a_vma".into(),
            json!(a.map(label).or(st.a.map(|(s, e)| format!("{s:#x}-{e:#x}")))),
        );
        let a_gaps = a.and_then(|v| v.pid_inactive).unwrap_or_default();
        evidence.insert(
            "reproducer.a_pid_inactive_skips".into(),
            json!(a_gaps.skips),
        );
        evidence.insert("reproducer.a_max_gap".into(), json!(a_gaps.max_gap));
        evidence.insert(
            "reproducer.a_skips_by_reason".into(),
            json!(a.map(|v| v.skips).unwrap_or_default()),
        );
        if scan_times {
            evidence.insert(
                "reproducer.a_scans_while_idle".into(),
                json!(between(phase("b-only"), phase("a-only"))),
            );
            evidence.insert(
                "reproducer.a_scans_after_renewed_access".into(),
                json!(between(phase("a-only"), phase("end"))),
            );
            evidence.insert(
                "reproducer.a_first_scan_after_renewed_access_ms".into(),
                json!(phase("a-only").and_then(|t| first_after_ms(times, t))),
            );
        }
        if verdict != Verdict::BehavesAsUnpatched && a_gaps.at_threshold == 0 {
            verdict = Verdict::NotExercised;
            sentence = format!(
                "The reproducer's idle VMA A was skipped {} time(s) as pid_inactive but never \
                 reached the patch's threshold (gap = thread count): scan sequences were too \
                 slow for its run; try a longer --duration.",
                a_gaps.skips
            );
        }
    }
    if let Some(off) = balancing_off(verdict, &r) {
        sentence = off;
    }
    Ok(SEED.result(verdict, sentence, evidence, facts))
}
