//! The memory-tiering part of a window's report: the mode, the tiers and the promotion knobs at
//! its start and end, what numatrace counted (promotions by the followed tasks, demotions
//! system-wide) beside the kernel's own `pgpromote_*` / `pgdemote_*`, and findings in words.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use numatrace_common::Counter;

use crate::{
    engine::Snapshot,
    kernel::tiering::{Tier, Tiering},
    model::Counts,
    report::measured::{Feed, Measured},
};

/// Demotions numatrace counted (system-wide: reclaim demotes for no followed task).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Demotions {
    pub calls: u64,
    pub pages: u64,
    pub failed: u64,
    /// By who reclaimed, as the kernel splits `pgdemote_*`.
    pub kswapd: u64,
    pub khugepaged: u64,
    /// Direct reclaim and proactive reclaim (`memory.reclaim`) together: the tracepoint does
    /// not tell them apart (`pgdemote_direct` + `pgdemote_proactive`).
    pub direct_or_proactive: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TieringReport {
    /// `kernel.numa_balancing` at the window's start and end.
    pub mode_start: Option<u32>,
    pub mode_end: Option<u32>,
    /// Memory tiers at the end, fastest first, and how the top tier is known.
    pub tiers: Vec<Tier>,
    pub source: String,
    pub promote_rate_limit_mbps_start: Option<u64>,
    pub promote_rate_limit_mbps_end: Option<u64>,
    pub hot_threshold_ms_start: Option<u64>,
    pub hot_threshold_ms_end: Option<u64>,
    pub demotion_enabled: Option<bool>,
    /// Each node's adjusted hot threshold (ms) as numatrace last read it at the window's start
    /// and end (`Tiering::node_hot_threshold_ms`), and the bounds the kernel keeps it in.
    pub node_hot_threshold_ms_start: BTreeMap<u32, u64>,
    pub node_hot_threshold_ms_end: BTreeMap<u32, u64>,
    pub hot_threshold_floor_ms: Option<u64>,
    pub hot_threshold_ceiling_ms: Option<u64>,
    /// Whether numatrace reads the per-node thresholds (tiering mode, 6.0+, kallsyms' and
    /// BTF's help).
    pub node_thresholds_read: bool,
    /// Promotions by the window's tasks (filtered like the totals).
    pub promoted_pages: u64,
    pub promote_failed: u64,
    pub slow_tier_faults: u64,
    /// The kernel's promotion decisions on the traced tasks' slow-tier hint faults, in pages
    /// (`TierCounts`, four disjoint outcomes): hot and let through, hot and held back by the
    /// rate limit, not hot, let through for free room; `promote_candidates` = hot + held back
    /// (= the kernel's `pgpromote_candidate` when every task that faults on the slow tier is
    /// traced).
    pub promote_hot: u64,
    pub promote_rate_limited: u64,
    pub promote_not_hot: u64,
    pub promote_free_room: u64,
    pub promote_candidates: u64,
    /// Slow-tier hint faults whose latency was measured, and their mean latency (ms from the
    /// scanner's stamp to the fault: what the kernel compares with the hot threshold).
    pub hint_latency_faults: u64,
    pub hint_latency_ms_mean: Option<f64>,
    pub demotions: Demotions,
    /// The kernel's `pgpromote_*` / `pgdemote_*` over the window (system-wide, /proc/vmstat;
    /// absent where the kernel lacks the counter).
    pub kernel: BTreeMap<String, u64>,
    /// The same per node (node vmstat): promotions on the node they arrive at, demotions on
    /// the node they leave (pgdemote_* per node from 6.8).
    pub per_node: BTreeMap<u32, BTreeMap<String, u64>>,
    /// Plain-words findings.
    pub findings: Vec<String>,
    /// Why promotions, slow-tier faults or demotions were not measured (their hooks did not
    /// attach), for the text; the JSON leaves those keys out instead.
    #[serde(skip)]
    pub not_measured: Measured,
}

/// Each node's counters' growth between two reads (`Tiering::node_counters`); a node or
/// counter the start lacks has no known growth and is left out, as are zeros.
pub(crate) fn node_delta(
    end: &BTreeMap<u32, BTreeMap<String, u64>>,
    start: &BTreeMap<u32, BTreeMap<String, u64>>,
) -> BTreeMap<u32, BTreeMap<String, u64>> {
    end.iter()
        .map(|(n, c)| {
            let before = start.get(n);
            let d = c
                .iter()
                .filter_map(|(k, v)| {
                    // A node or counter the start lacks: its growth is unknown (not since boot).
                    let b = before?.get(k).copied()?;
                    Some((k.clone(), v.saturating_sub(b)))
                })
                .filter(|(_, v)| *v > 0)
                .collect::<BTreeMap<_, _>>();
            (*n, d)
        })
        .filter(|(_, d)| !d.is_empty())
        .collect()
}

impl TieringReport {
    /// From a window (`delta`: the later snapshot minus the earlier) and its filtered totals.
    pub fn of(delta: &Snapshot, totals: &Counts, measured: &Measured) -> Self {
        let c = |k: Counter| delta.counters.get(k);
        let (pages, kswapd, khugepaged) = (
            c(Counter::DemotePages),
            c(Counter::DemoteKswapd),
            c(Counter::DemoteKhugepaged),
        );
        let end = &delta.tiering;
        let start = delta.tiering_start.as_ref().unwrap_or(end);
        let kernel: BTreeMap<String, u64> = delta
            .vmstat_hi
            .iter()
            .filter(|(k, _)| k.starts_with("pgpromote_") || k.starts_with("pgdemote_"))
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        let bounds = end.threshold_bounds().filter(|_| end.node_thresholds_read);
        let mut r = Self {
            mode_start: start.mode,
            mode_end: end.mode,
            tiers: end.tiers.clone(),
            source: end.source.clone(),
            promote_rate_limit_mbps_start: start.promote_rate_limit_mbps,
            promote_rate_limit_mbps_end: end.promote_rate_limit_mbps,
            hot_threshold_ms_start: start.hot_threshold_ms,
            hot_threshold_ms_end: end.hot_threshold_ms,
            demotion_enabled: end.demotion_enabled,
            node_hot_threshold_ms_start: start.node_hot_threshold_ms.clone(),
            node_hot_threshold_ms_end: end.node_hot_threshold_ms.clone(),
            hot_threshold_floor_ms: bounds.map(|b| b.0),
            hot_threshold_ceiling_ms: bounds.map(|b| b.1),
            node_thresholds_read: end.node_thresholds_read,
            promoted_pages: totals.tiering.promoted_pages,
            promote_failed: totals.tiering.promote_failed,
            slow_tier_faults: totals.tiering.slow_tier_faults,
            promote_hot: totals.tiering.promote_hot,
            promote_rate_limited: totals.tiering.promote_rate_limited,
            promote_not_hot: totals.tiering.promote_not_hot,
            promote_free_room: totals.tiering.promote_free_room,
            promote_candidates: totals.tiering.promote_candidates,
            hint_latency_faults: totals.tiering.hint_latency_faults,
            hint_latency_ms_mean: totals.tiering.hint_latency_ms_mean,
            demotions: Demotions {
                calls: c(Counter::DemoteCalls),
                pages,
                failed: c(Counter::DemoteFailed),
                kswapd,
                khugepaged,
                direct_or_proactive: pages.saturating_sub(kswapd).saturating_sub(khugepaged),
            },
            kernel,
            per_node: node_delta(&end.node_counters, &start.node_counters),
            findings: Vec::new(),
            not_measured: measured.clone(),
        };
        r.findings = r.find(end);
        r
    }

    fn find(&self, end: &Tiering) -> Vec<String> {
        let mut out = Vec::new();
        let k = |name: &str| self.kernel.get(name).copied();
        let tiering_on = end.tiering_mode();
        let m = &self.not_measured;
        // A count whose hook did not attach is no evidence, not even of zero.
        let promotions = m.is(Feed::Promotions);
        let faults = m.is(Feed::HintFaults);
        let demotions = m.is(Feed::MigratePages);
        if tiering_on && end.known && end.slow_nodes().is_empty() {
            out.push(format!(
                "memory tiering is on (kernel.numa_balancing={}) but every node is in the top \
                 tier: nothing can be promoted (a slow node needs a tier of its own: placed by \
                 HMAT at boot from ~6.10, or onlined through dax/kmem)",
                end.mode.unwrap_or(0)
            ));
        }
        if let (Some(cand), Some(ok)) = (k("pgpromote_candidate"), k("pgpromote_success")) {
            // Candidates passed the hot threshold; those not promoted were held back by the
            // rate limit or failed to migrate (candidate_nrl: promoted past the rate limit
            // because the fast node had room, counted in success but not in candidate).
            let promoted_as_candidates =
                ok.saturating_sub(k("pgpromote_candidate_nrl").unwrap_or(0));
            let held = cand.saturating_sub(promoted_as_candidates);
            // Counters from a capture can be anything: no overflow.
            if cand > 0 && held.saturating_mul(5) >= cand {
                out.push(format!(
                    "{} % of promotion candidates ({held} of {cand} pages) were not promoted: \
                     the rate limit ({} MB/s) held them back, or their migration was refused \
                     or failed{}",
                    u128::from(held) * 100 / u128::from(cand),
                    self.promote_rate_limit_mbps_end
                        .map_or("?".into(), |v| v.to_string()),
                    if faults {
                        format!(" ({} such faults by the traced tasks)", self.promote_failed)
                    } else {
                        String::new()
                    }
                ));
            }
        }
        if let (Some(floor), Some(ceiling)) =
            (self.hot_threshold_floor_ms, self.hot_threshold_ceiling_ms)
        {
            for (node, th) in &self.node_hot_threshold_ms_end {
                if *th <= floor {
                    out.push(format!(
                        "the hot threshold of node {node} fell to its floor ({th} ms, 1/8 of \
                         the {} ms reference): more slow-tier pages turned out hot than the \
                         rate limit ({} MB/s) lets through, so only pages touched within {th} \
                         ms of their scan are promoted into it",
                        ceiling / 2,
                        self.promote_rate_limit_mbps_end
                            .map_or("?".into(), |v| v.to_string())
                    ));
                } else if *th >= ceiling {
                    out.push(format!(
                        "the hot threshold of node {node} rose to its ceiling ({th} ms, twice \
                         the reference): fewer pages turned out hot than the rate limit allows, \
                         so pages touched up to {th} ms after their scan count as hot"
                    ));
                }
            }
        }
        // Promoted past the threshold and the rate limit: the node had free room (the kernel
        // then resets its threshold; 6.18+ counts these as pgpromote_candidate_nrl, before
        // they are in pgpromote_success alone).
        // (Only where the kernel counts candidates at all: 6.0+.)
        let counts_candidates = self.kernel.contains_key("pgpromote_candidate");
        for (node, c) in self.per_node.iter().filter(|_| counts_candidates) {
            let g = |k: &str| c.get(k).copied().unwrap_or(0);
            let past_candidates = g("pgpromote_success").saturating_sub(
                g("pgpromote_candidate").saturating_add(g("pgpromote_candidate_nrl")),
            );
            let bypassed = g("pgpromote_candidate_nrl").max(past_candidates);
            if bypassed > 0 {
                out.push(format!(
                    "node {node} had free room: at least {bypassed} pages were promoted into it \
                     past the hot threshold and the rate limit (the kernel resets the node's \
                     threshold then)"
                ));
            }
        }
        out.extend(self.decision_findings());
        if promotions && self.slow_tier_faults > 0 && self.promoted_pages == 0 && tiering_on {
            // Where the decisions were counted, say which of the kernel's reasons it was.
            let why = if m.is(Feed::PromoteDecisions) {
                format!(
                    "{} pages were not hot, {} hot ones held back by the rate limit, and {} \
                     faults' migrations were refused or failed",
                    self.promote_not_hot, self.promote_rate_limited, self.promote_failed
                )
            } else {
                format!(
                    "none of those pages was hot enough (accessed again within the hot \
                     threshold, {} ms by default) or the top tier had no room",
                    self.hot_threshold_ms_end
                        .map_or("?".into(), |v| v.to_string())
                )
            };
            out.push(format!(
                "{} hint faults on slow-tier pages and no promotion: {why}",
                self.slow_tier_faults
            ));
        }
        if faults && self.slow_tier_faults > 0 && !tiering_on {
            out.push(format!(
                "{} hint faults on slow-tier pages with memory tiering off (mode {}): NUMA \
                 balancing treats the slow node like any other",
                self.slow_tier_faults,
                end.mode.unwrap_or(0)
            ));
        }
        if promotions && demotions && self.demotions.pages > 0 && self.promoted_pages > 0 {
            out.push(format!(
                "pages moved both ways: {} promoted, {} demoted (system-wide) — a working set \
                 larger than the top tier bounces between tiers",
                self.promoted_pages, self.demotions.pages
            ));
        }
        if self.mode_start != self.mode_end {
            out.push(format!(
                "kernel.numa_balancing changed during the window ({} -> {})",
                self.mode_start.map_or("?".into(), |v| v.to_string()),
                self.mode_end.map_or("?".into(), |v| v.to_string())
            ));
        }
        out
    }

    /// What the traced tasks' own promotion decisions say (numatrace's counts, per task where
    /// the kernel's are system-wide).
    fn decision_findings(&self) -> Vec<String> {
        let m = &self.not_measured;
        let mut out = Vec::new();
        if !m.is(Feed::PromoteDecisions) {
            return out;
        }
        // Pages judged by their latency (free-room ones were not).
        let judged = self.promote_candidates.saturating_add(self.promote_not_hot);
        if judged > 0 && self.promote_not_hot.saturating_mul(2) >= judged {
            out.push(format!(
                "{} % of the slow-tier pages the traced tasks' faults judged by latency were not \
                 hot ({} of {judged} pages: touched at or over the node's hot threshold after \
                 their scan{})",
                u128::from(self.promote_not_hot) * 100 / u128::from(judged),
                self.promote_not_hot,
                self.hint_latency_ms_mean
                    .map_or(String::new(), |ms| format!(
                        "; mean hint-fault latency {ms:.0} ms"
                    ))
            ));
        }
        let c = self.promote_candidates;
        if c > 0 && self.promote_rate_limited.saturating_mul(5) >= c {
            out.push(format!(
                "the rate limit held back {} % of the traced tasks' promotion candidates ({} of \
                 {c} hot pages)",
                u128::from(self.promote_rate_limited) * 100 / u128::from(c),
                self.promote_rate_limited
            ));
        }
        out
    }

    /// Whether there is anything tiering-related to print.
    pub fn is_quiet(&self) -> bool {
        self.tiers.len() < 2
            && !self.mode_end.is_some_and(|m| m & 2 != 0)
            && self.promoted_pages == 0
            && self.demotions.pages == 0
            && self.kernel.values().all(|v| *v == 0)
    }

    /// The text block (`stat`, `report`).
    pub fn to_text(&self) -> String {
        let opt = |v: Option<u64>| v.map_or("?".to_owned(), |v| v.to_string());
        let mut out = format!(
            "tiering: kernel.numa_balancing={}{}; tiers: {}\n",
            opt(self.mode_end.map(u64::from)),
            if self.mode_start != self.mode_end {
                format!(" (was {})", opt(self.mode_start.map(u64::from)))
            } else {
                String::new()
            },
            if self.tiers.is_empty() {
                crate::text_escape::escape(&self.source).into_owned()
            } else {
                self.tiers
                    .iter()
                    .map(|t| {
                        format!(
                            "tier{} nodes {:?}{}",
                            t.tier,
                            t.nodes,
                            if t.top { " (top)" } else { "" }
                        )
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        );
        let m = &self.not_measured;
        out.push_str(&format!(
            "  promotions: {} ({}); rate limit {} MB/s, hot threshold {} ms\n",
            m.says(Feed::Promotions, || format!(
                "{} pages by the traced tasks",
                self.promoted_pages
            )),
            m.says(Feed::HintFaults, || format!(
                "{} refused or failed, {} hint faults on slow-tier pages",
                self.promote_failed, self.slow_tier_faults
            )),
            opt(self.promote_rate_limit_mbps_end),
            opt(self.hot_threshold_ms_end),
        ));
        if self.slow_tier_faults > 0 || !m.is(Feed::PromoteDecisions) {
            out.push_str(&format!(
                "  decisions (pages): {}\n",
                m.says(Feed::PromoteDecisions, || format!(
                    "{} hot and let through, {} hot held back by the rate limit ({} \
                     candidates), {} not hot, {} let through for free room; hint-fault latency {}",
                    self.promote_hot,
                    self.promote_rate_limited,
                    self.promote_candidates,
                    self.promote_not_hot,
                    self.promote_free_room,
                    match self.hint_latency_ms_mean {
                        Some(ms) =>
                            format!("mean {ms:.0} ms over {} faults", self.hint_latency_faults),
                        None => "not measured on any fault".into(),
                    }
                )),
            ));
        }
        if self.node_thresholds_read || !self.node_hot_threshold_ms_end.is_empty() {
            let bound = |th: u64| match (self.hot_threshold_floor_ms, self.hot_threshold_ceiling_ms)
            {
                (Some(f), _) if th <= f => " (floor)",
                (_, Some(c)) if th >= c => " (ceiling)",
                _ => "",
            };
            out.push_str(&format!(
                "  hot threshold per node, at its latest slow-tier fault: {}\n",
                if self.node_hot_threshold_ms_end.is_empty() {
                    "none yet (no slow-tier hint fault in tiering mode)".to_owned()
                } else {
                    self.node_hot_threshold_ms_end
                        .iter()
                        .map(|(n, th)| {
                            let was = self
                                .node_hot_threshold_ms_start
                                .get(n)
                                .filter(|s| *s != th)
                                .map_or(String::new(), |s| format!(", was {s}"));
                            format!("node {n} {th} ms{}{was}", bound(*th))
                        })
                        .collect::<Vec<_>>()
                        .join("; ")
                }
            ));
        }
        let d = &self.demotions;
        out.push_str(&format!(
            "  demotions (system-wide): {}\n",
            m.says(Feed::MigratePages, || format!(
                "{} pages in {} reclaim passes, {} not demoted; kswapd {}, khugepaged {}, direct \
                 or proactive {}",
                d.pages, d.calls, d.failed, d.kswapd, d.khugepaged, d.direct_or_proactive
            ))
        ));
        if !self.kernel.is_empty() {
            out.push_str(&format!(
                "  kernel: {}\n",
                self.kernel
                    .iter()
                    .map(|(k, v)| format!("{} +{v}", crate::text_escape::escape(k)))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        for f in &self.findings {
            out.push_str(&format!("  finding: {f}\n"));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::TierCounts;

    fn tiered(mode: u32) -> Tiering {
        Tiering {
            mode: Some(mode),
            tiers: crate::kernel::tiering::two_tiers(&[0, 1], &[2]),
            source: "memory_tiers".into(),
            known: true,
            top_nodes: vec![0, 1],
            promote_rate_limit_mbps: Some(1),
            hot_threshold_ms: Some(1000),
            demotion_enabled: Some(true),
            node_counters: BTreeMap::from([(
                0,
                BTreeMap::from([("pgpromote_success".to_owned(), 100)]),
            )]),
            node_hot_threshold_ms: BTreeMap::from([(0, 1000), (1, 1000)]),
            node_thresholds_read: true,
        }
    }

    #[test]
    fn promotions_past_the_candidates_say_the_node_had_room() {
        let mut end = tiered(2);
        end.node_counters.get_mut(&0).unwrap().extend([
            ("pgpromote_success".to_owned(), 700),
            ("pgpromote_candidate".to_owned(), 100),
        ]);
        let mut start = tiered(2);
        start
            .node_counters
            .get_mut(&0)
            .unwrap()
            .insert("pgpromote_candidate".into(), 0);
        let delta = Snapshot {
            vmstat_hi: BTreeMap::from([
                ("pgpromote_success".to_owned(), 600),
                ("pgpromote_candidate".to_owned(), 100),
            ]),
            tiering: end,
            tiering_start: Some(start),
            ..Snapshot::default()
        };
        let r = TieringReport::of(&delta, &Counts::default(), &Measured::default());
        assert!(
            r.findings
                .iter()
                .any(|f| f.starts_with("node 0 had free room: at least 500 pages")),
            "{:?}",
            r.findings
        );
    }

    #[test]
    fn a_threshold_at_its_floor_or_ceiling_is_a_finding() {
        let mut end = tiered(2);
        end.node_hot_threshold_ms = BTreeMap::from([(0, 125), (1, 2000)]);
        let delta = Snapshot {
            tiering: end,
            tiering_start: Some(tiered(2)),
            ..Snapshot::default()
        };
        let r = TieringReport::of(&delta, &Counts::default(), &Measured::default());
        assert_eq!(r.hot_threshold_floor_ms, Some(125));
        let floor = r
            .findings
            .iter()
            .find(|f| f.contains("node 0 fell to its floor"));
        assert!(
            floor.is_some_and(|f| f.contains("125 ms") && f.contains("1000 ms reference")),
            "{:?}",
            r.findings
        );
        assert!(
            r.findings
                .iter()
                .any(|f| f.contains("node 1 rose to its ceiling (2000 ms"))
        );
        let text = r.to_text();
        assert!(text.contains("node 0 125 ms (floor), was 1000"), "{text}");
        assert!(
            !r.findings.iter().any(|f| f.contains("free room")),
            "{:?}",
            r.findings
        );
        assert!(text.contains("node 1 2000 ms (ceiling)"), "{text}");

        // Not read (e.g. no kallsyms address): no bounds, no finding, no line.
        let mut unread = tiered(2);
        unread.node_hot_threshold_ms.clear();
        unread.node_thresholds_read = false;
        let delta = Snapshot {
            tiering: unread.clone(),
            tiering_start: Some(unread),
            ..Snapshot::default()
        };
        let r = TieringReport::of(&delta, &Counts::default(), &Measured::default());
        assert!(r.hot_threshold_floor_ms.is_none());
        assert!(!r.to_text().contains("hot threshold per node"));
        assert!(!r.findings.iter().any(|f| f.contains("threshold")));
    }

    #[test]
    fn counts_kernel_counters_and_findings() {
        let mut end = tiered(2);
        end.node_counters
            .get_mut(&0)
            .unwrap()
            .insert("pgpromote_success".into(), 1100);
        let mut counters = vec![0; Counter::ALL.len()];
        counters[Counter::DemotePages as usize] = 50;
        counters[Counter::DemoteKswapd as usize] = 20;
        counters[Counter::DemoteCalls as usize] = 2;
        let delta = Snapshot {
            counters: crate::sources::maps::Counters(counters),
            vmstat_hi: BTreeMap::from([
                ("pgpromote_success".to_owned(), 1000),
                ("pgpromote_candidate".to_owned(), 5000),
                ("numa_hint_faults".to_owned(), 9),
            ]),
            tiering: end,
            tiering_start: Some(tiered(2)),
            ..Snapshot::default()
        };
        let totals = Counts {
            tiering: TierCounts {
                promoted_pages: 1000,
                promote_failed: 0,
                slow_tier_faults: 6000,
                ..TierCounts::default()
            },
            ..Counts::default()
        };
        let r = TieringReport::of(&delta, &totals, &Measured::default());
        assert_eq!(r.kernel.len(), 2, "only tiering counters: {:?}", r.kernel);
        assert_eq!(r.per_node[&0]["pgpromote_success"], 1000);
        assert_eq!(r.demotions.direct_or_proactive, 30);
        assert!(
            r.findings
                .iter()
                .any(|f| f.starts_with("80 % of promotion candidates")),
            "{:?}",
            r.findings
        );
        assert!(r.findings.iter().any(|f| f.contains("both ways")));
        let text = r.to_text();
        assert!(text.contains("tier72 nodes [2]"), "{text}");
        assert!(text.contains("promotions: 1000 pages"), "{text}");
        assert!(!r.is_quiet());
    }

    #[test]
    fn the_traced_tasks_decisions_are_said_in_words() {
        let delta = Snapshot {
            tiering: tiered(2),
            tiering_start: Some(tiered(2)),
            ..Snapshot::default()
        };
        let totals = Counts {
            tiering: TierCounts {
                slow_tier_faults: 100,
                promote_hot: 10,
                promote_rate_limited: 30,
                promote_not_hot: 60,
                hint_latency_faults: 100,
                hint_latency_ms_total: 150_000,
                ..TierCounts::default()
            },
            ..Counts::default()
        }
        .finished();
        let r = TieringReport::of(&delta, &totals, &Measured::default());
        let said = |s: &str| r.findings.iter().any(|f| f.contains(s));
        assert!(
            said(
                "60 % of the slow-tier pages the traced tasks' faults judged by latency were not hot"
            ) && said("mean hint-fault latency 1500 ms"),
            "{:?}",
            r.findings
        );
        assert!(
            said(
                "the rate limit held back 75 % of the traced tasks' promotion candidates (30 of 40 hot"
            ),
            "{:?}",
            r.findings
        );
        // No promotion at all: the finding names the kernel's reasons, counted.
        assert!(
            said("100 hint faults on slow-tier pages and no promotion: 60 pages were not hot, 30"),
            "{:?}",
            r.findings
        );
        let text = r.to_text();
        assert!(
            text.contains(
                "decisions (pages): 10 hot and let through, 30 hot held back by the rate limit (40 \
                 candidates), 60 not hot, 0 let through for free room; hint-fault latency mean \
                 1500 ms over 100 faults"
            ),
            "{text}"
        );
    }

    #[test]
    fn tiering_on_without_a_slow_tier_is_said() {
        let mut t = tiered(3);
        t.tiers = vec![Tier {
            tier: 4,
            nodes: vec![0, 1, 2],
            top: true,
        }];
        let delta = Snapshot {
            tiering: t,
            ..Snapshot::default()
        };
        let r = TieringReport::of(&delta, &Counts::default(), &Measured::default());
        assert!(
            r.findings[0].contains("nothing can be promoted"),
            "{:?}",
            r.findings
        );
    }
}
