//! Text graphics for `top`, readable without colour: sparklines of block characters
//! (`▁▂▃▄▅▆▇█`, a blank for zero) and a node-to-node matrix shaded with `░▒▓█`. Plain strings,
//! so the terminal view and `top -b` draw the same thing.

use crate::sources::maps::NodeFlow;

const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
const SHADES: [char; 5] = [' ', '░', '▒', '▓', '█'];

/// A rate in the width of a column: `123k`, `456`, `7.8`.
pub(super) fn fmt_rate(v: f64) -> String {
    match v {
        v if v >= 100_000.0 => format!("{:.0}k", v / 1000.0),
        v if v >= 100.0 => format!("{v:.0}"),
        v => format!("{v:.1}"),
    }
}

/// `values` (oldest first) as at most `width` block characters scaled to their largest: a
/// blank for 0, at least `▁` for anything above it. With more values than columns, each column
/// shows the largest of the values it covers (a one-refresh burst stays visible); the last
/// column always holds the newest value.
pub fn sparkline(values: &[f64], width: usize) -> String {
    if width == 0 || values.is_empty() {
        return String::new();
    }
    let cols: Vec<f64> = if values.len() <= width {
        values.to_vec()
    } else {
        // Column i covers values [start(i), start(i+1)), counted from the newest end.
        let n = values.len();
        let start = |i: usize| n - (width - i) * n / width;
        (0..width)
            .map(|i| {
                values[start(i)..start(i + 1).max(start(i) + 1)]
                    .iter()
                    .copied()
                    .fold(0.0, f64::max)
            })
            .collect()
    };
    let max = cols.iter().copied().fold(0.0, f64::max);
    cols.iter()
        .map(|&v| {
            // NaN too: blank.
            if v.is_nan() || v <= 0.0 || max <= 0.0 {
                ' '
            } else {
                let i = ((v / max) * BARS.len() as f64).ceil() as usize;
                BARS[i.clamp(1, BARS.len()) - 1]
            }
        })
        .collect()
}

/// The shade of `v` on a scale up to `max`: blank for 0, `░` for anything above it, `█` for
/// the largest.
pub fn shade(v: u64, max: u64) -> char {
    if v == 0 || max == 0 {
        return SHADES[0];
    }
    let i = (v as f64 / max as f64 * 4.0).ceil() as usize;
    SHADES[i.clamp(1, 4)]
}

/// The node matrix as lines: a row per source node (`?`: unknown), a column per destination,
/// each cell its shade twice and the pages; `nodes` lists the machine's nodes.
pub fn node_grid(flows: &[NodeFlow], nodes: &[u32]) -> Vec<String> {
    let pages = |src: Option<u32>, dst: u32| -> u64 {
        flows
            .iter()
            .filter(|f| f.src == src && f.dst == dst)
            .map(|f| f.pages)
            .sum()
    };
    let mut dsts: Vec<u32> = nodes.to_vec();
    dsts.extend(flows.iter().map(|f| f.dst));
    dsts.sort_unstable();
    dsts.dedup();
    let mut srcs: Vec<Option<u32>> = dsts.iter().copied().map(Some).collect();
    srcs.extend(flows.iter().filter(|f| f.pages > 0).map(|f| f.src));
    srcs.sort_unstable_by_key(|s| s.map_or(u64::MAX, u64::from));
    srcs.dedup();
    let max = flows.iter().map(|f| f.pages).max().unwrap_or(0);
    let cell_w = max.to_string().len().max(4) + 3;
    let mut out = vec![format!(
        "{:>8}{}",
        "from\\to",
        dsts.iter()
            .map(|d| format!(" {d:>cell_w$}"))
            .collect::<String>()
    )];
    for s in srcs {
        let mut line = format!("{:>8}", s.map_or("?".into(), |s| s.to_string()));
        for &d in &dsts {
            let n = pages(s, d);
            let c = shade(n, max);
            let num = n.to_string();
            line.push_str(&format!(" {c}{c}{num:>w$}", w = cell_w.saturating_sub(2)));
        }
        out.push(line.trim_end().to_owned());
    }
    out
}

/// One sparkline with its label: a value per refresh (oldest first), or why it is not measured.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Series {
    pub label: &'static str,
    pub values: Vec<f64>,
    /// Why this kernel does not measure it (`None`: it does).
    pub missing: Option<String>,
    /// The values are shares, shown in % (`~`: a sampled estimate).
    pub share: bool,
    pub sampled: bool,
}

impl Series {
    /// The largest value, as the tables print it.
    pub fn peak(&self) -> String {
        let max = self.values.iter().copied().fold(0.0, f64::max);
        if self.share {
            format!("{}{:.2}%", if self.sampled { "~" } else { "" }, max * 100.0)
        } else {
            fmt_rate(max)
        }
    }

    /// `hint/s [ ▁█▃] max 1234` with a sparkline at most `spark` wide; `peak` `None` leaves
    /// the peak out, `Some(false)` leaves out the word "max". Not measured: `hint/s not
    /// measured`, and with `why`, the reason.
    fn text(&self, spark: usize, peak: Option<bool>, why: bool) -> String {
        if let Some(w) = &self.missing {
            return if why {
                format!("{}: not measured: {w}", self.label)
            } else {
                format!("{} not measured", self.label)
            };
        }
        let line = sparkline(&self.values, spark);
        match peak {
            None => format!("{} [{line}]", self.label),
            Some(false) => format!("{} [{line}] {}", self.label, self.peak()),
            Some(true) => format!("{} [{line}] max {}", self.label, self.peak()),
        }
    }

    /// A line of its own (the detail pane), the sparkline up to `width` wide in all.
    pub fn line(&self, width: usize) -> String {
        let fixed = self.text(0, Some(true), true).chars().count();
        self.text(width.saturating_sub(fixed), Some(true), true)
    }
}

/// The header's trend row: `60s: hint/s [ ▁█] max 12k  migr/s [...] max 0.0  scan% [...] max
/// ~0.85%`, each sparkline as wide as `width` allows (one column per refresh at most); on
/// narrow screens without the word "max", then without the peaks.
pub fn trend_line(prefix: &str, series: &[Series], width: usize) -> String {
    let measured = series.iter().filter(|s| s.missing.is_none()).count().max(1);
    let build = |spark: usize, peak: Option<bool>| {
        let parts: Vec<String> = series.iter().map(|s| s.text(spark, peak, false)).collect();
        format!("{prefix}{}", parts.join("  "))
    };
    // Wide enough for 8 columns, or for every value where there are fewer.
    let enough = series
        .iter()
        .map(|s| s.values.len())
        .max()
        .unwrap_or(0)
        .min(8);
    for peak in [Some(true), Some(false), None] {
        let fixed = build(0, peak).chars().count();
        let spark = width.saturating_sub(fixed) / measured;
        if spark >= enough || peak.is_none() {
            return build(spark, peak);
        }
    }
    unreachable!("the last choice returns")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparklines_scale_to_their_largest_value() {
        assert_eq!(sparkline(&[0.0, 1.0, 4.0, 8.0], 10), " ▁▄█");
        // Anything above zero is visible, zero is blank.
        assert_eq!(sparkline(&[0.001, 1000.0, 0.0], 10), "▁█ ");
        assert_eq!(sparkline(&[0.0, 0.0], 10), "  ");
        assert_eq!(sparkline(&[], 10), "");
        assert_eq!(sparkline(&[1.0], 0), "");
    }

    #[test]
    fn narrow_sparklines_keep_bursts_and_the_newest_value() {
        // 60 samples into 6 columns: a single burst survives, in its place.
        let mut v = vec![0.0; 60];
        v[15] = 9.0;
        v[59] = 3.0;
        let s = sparkline(&v, 6);
        assert_eq!(s.chars().count(), 6);
        assert_eq!(s, " █   ▃");
        // Uneven division: every value is in exactly one column.
        let v: Vec<f64> = (0..7).map(f64::from).collect();
        assert_eq!(sparkline(&v, 3).chars().count(), 3);
        assert!(sparkline(&v, 3).ends_with('█'));
    }

    #[test]
    fn trend_rows_fit_the_width_and_say_what_is_not_measured() {
        let s = |label, values: &[f64], missing: Option<&str>, share| Series {
            label,
            values: values.to_vec(),
            missing: missing.map(str::to_owned),
            share,
            sampled: share,
        };
        let mut v = vec![0.0; 60];
        v[30] = 1200.0;
        let series = [
            s("hint/s", &v, None, false),
            s("migr/s", &[0.0; 60], None, false),
            s("scan%", &v, Some("task_numa_work not attached"), true),
        ];
        let wide = trend_line("60s: ", &series, 200);
        assert!(wide.starts_with("60s: hint/s ["), "{wide}");
        assert!(wide.contains("] max 1200  migr/s ["), "{wide}");
        assert!(wide.ends_with("] max 0.0  scan% not measured"), "{wide}");
        assert!(wide.contains('█'));
        for w in [80, 100, 160, 200] {
            let t = trend_line("60s: ", &series, w);
            assert!(t.chars().count() <= w, "{w}: {t}");
        }
        // At 70 columns the peaks stay, without the word.
        let narrow = trend_line("60s: ", &series, 70);
        assert!(narrow.contains("] 1200  migr/s"), "{narrow}");
        // The detail's lines: the reason in full.
        assert_eq!(
            series[2].line(80),
            "scan%: not measured: task_numa_work not attached"
        );
        let l = s("scan%", &[0.0, 0.0085], None, true).line(80);
        assert_eq!(l, "scan% [ █] max ~0.85%");
    }

    #[test]
    fn shades_and_the_node_grid() {
        assert_eq!(shade(0, 10), ' ');
        assert_eq!(shade(1, 100), '░');
        assert_eq!(shade(50, 100), '▒');
        assert_eq!(shade(70, 100), '▓');
        assert_eq!(shade(100, 100), '█');
        let flow = |src, dst, pages| NodeFlow {
            src,
            dst,
            migrated: 0,
            not_migrated: 0,
            pages,
        };
        let g = node_grid(&[flow(Some(1), 0, 8192), flow(Some(0), 1, 12)], &[0, 1]);
        assert_eq!(
            g,
            [
                " from\\to       0       1",
                "       0       0 ░░   12",
                "       1 ██ 8192       0",
            ]
        );
        // An unknown source gets a row of its own, last.
        let g = node_grid(&[flow(None, 0, 5)], &[0]);
        assert_eq!(g.last().unwrap().trim_start(), "? ██    5");
    }
}
