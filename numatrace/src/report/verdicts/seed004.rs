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
