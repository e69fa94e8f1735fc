//! Seed 004 — "mm, thp: Add mm flag to control THP (PR_SET_THP_DISABLE)".

use super::*;

pub const SEED: Seed = Seed {
    id: "004",
    title: TITLE_004,
    needs: &["task_numa_fault"],
};

pub const TITLE_004: &str = "mm, thp: Add mm flag to control THP (PR_SET_THP_DISABLE)";

/// One process's THP state as the reproducer recorded it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThpState {
    pub role: String,
    pub pid: u32,
    /// PR_GET_THP_DISABLE's answer.
    pub prctl: i64,
    /// /proc/PID/status `THP_enabled:` (-1 when the kernel does not show it).
    pub thp_enabled: i64,
}

/// Parses the reproducer's `role pid prctl=N thp_enabled=N` lines.
pub fn parse_thp_states(text: &str) -> Vec<ThpState> {
    text.lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let role = it.next()?.to_owned();
            let pid = it.next()?.parse().ok()?;
            let prctl = it.next()?.strip_prefix("prctl=")?.parse().ok()?;
            let thp_enabled = it.next()?.strip_prefix("thp_enabled=")?.parse().ok()?;
            Some(ThpState {
                role,
                pid,
                prctl,
                thp_enabled,
            })
        })
        .collect()
}

/// Seed 004: the exec'd child of a PR_SET_THP_DISABLE parent must have THP disabled
/// (inherited across fork, kept across exec) and take no THP hint faults, while the control's
/// child does take them.
pub fn verdict_004(
    disabled_thp_faults: u64,
    control_thp_faults: u64,
    disabled_child: Option<&ThpState>,
) -> (Verdict, String) {
    let Some(child) = disabled_child else {
        return (
            Verdict::NotExercised,
            "The reproducer's child did not report its THP state.".into(),
        );
    };
    if child.prctl != 1 || child.thp_enabled == 1 {
        return (
            Verdict::BehavesAsUnpatched,
            format!(
                "The exec'd child of a PR_SET_THP_DISABLE parent reports prctl={} THP_enabled={}: the flag was not inherited.",
                child.prctl, child.thp_enabled
            ),
        );
    }
    if control_thp_faults == 0 {
        return (
            Verdict::NotExercised,
            "The control took no THP hint faults (THP off, or its memory never scanned): nothing to compare.".into(),
        );
    }
    if disabled_thp_faults > 0 {
        return (
            Verdict::BehavesAsUnpatched,
            format!("{disabled_thp_faults} THP hint faults in a process with THP disabled."),
        );
    }
    (
        Verdict::BehavesAsPatched,
        format!(
            "THP stayed disabled across fork and exec (prctl=1), and that child took no THP hint faults while the control's took {control_thp_faults}."
        ),
    )
}

pub async fn run(args: &CheckArgs, no_fentry: bool, signals: &mut Signals) -> Result<CheckResult> {
    if !args.command.is_empty() {
        return Ok(SEED.unsupported(
            "004 needs its reproducer (it compares a THP-disabled process with a control): run it \
             without -- COMMAND"
                .into(),
        ));
    }
    let workload = workload_binary()?;
    // Fresh and private (mkdtemp, 0700): a directory someone made first is never used.
    let scratch = crate::safe_fs::scratch_dir("numatrace-check-004-")?;
    let dir = scratch.path();
    let mut runs = Vec::new();
    for control in [false, true] {
        let state = dir.join(if control { "control" } else { "disabled" });
        let _ = std::fs::remove_file(&state);
        let mut c = vec![workload.clone().into_os_string(), "thp-disable".into()];
        if control {
            c.push("--control".into());
        }
        c.extend(["--mem-mib".into(), "64".into(), "--duration".into()]);
        c.push(duration_arg(args.duration).into());
        c.push("--state-file".into());
        c.push(state.clone().into_os_string());
        let (r, _) = collect(&window_for(c, args, no_fentry), signals).await?;
        let states = parse_thp_states(&std::fs::read_to_string(&state).unwrap_or_default());
        runs.push((r, states));
    }
    drop(scratch);
    let facts = match require(&runs[0].0, &["task_numa_fault"]) {
        Ok(f) => f,
        Err(why) => return Ok(SEED.unsupported(why)),
    };
    let thp = |r: &StatReport| r.totals.hint_faults.faults_thp;
    let child = runs[0].1.iter().find(|s| s.role == "child");
    let (verdict, sentence) = verdict_004(thp(&runs[0].0), thp(&runs[1].0), child);
    let mut evidence = BTreeMap::new();
    for ((r, states), name) in runs.iter().zip(["disabled", "control"]) {
        evidence.insert(format!("{name}.thp_hint_faults"), json!(thp(r)));
        evidence.insert(
            format!("{name}.hint_faults"),
            json!(r.totals.hint_faults.faults),
        );
        for s in states {
            evidence.insert(
                format!("{name}.{}", s.role),
                json!({"pid": s.pid, "prctl_thp_disable": s.prctl, "thp_enabled": s.thp_enabled}),
            );
        }
    }
    Ok(SEED.result(verdict, sentence, evidence, facts))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_004_states_and_verdicts() {
        let s = parse_thp_states(
            "parent 10 prctl=1 thp_enabled=0\nchild 11 prctl=1 thp_enabled=0\ngarbage\n",
        );
        assert_eq!(s.len(), 2);
        assert_eq!(
            s[1],
            ThpState {
                role: "child".into(),
                pid: 11,
                prctl: 1,
                thp_enabled: 0
            }
        );
        assert_eq!(verdict_004(0, 40, Some(&s[1])).0, Verdict::BehavesAsPatched);
        assert_eq!(
            verdict_004(3, 40, Some(&s[1])).0,
            Verdict::BehavesAsUnpatched
        );
        assert_eq!(verdict_004(0, 0, Some(&s[1])).0, Verdict::NotExercised);
        let lost = ThpState {
            prctl: 0,
            thp_enabled: 1,
            ..s[1].clone()
        };
        assert_eq!(
            verdict_004(0, 40, Some(&lost)).0,
            Verdict::BehavesAsUnpatched
        );
        assert_eq!(verdict_004(0, 40, None).0, Verdict::NotExercised);
    }
}
