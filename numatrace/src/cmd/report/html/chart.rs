//! Charts as SVG text, drawn by plotters' SVG backend: lines over time, the node → node
//! heatmap and log2 histograms. Labels come from the caller already escaped for a terminal
//! (no control characters); plotters escapes them for XML.

use plotters::{
    coord::Shift,
    prelude::*,
    style::text_anchor::{HPos, Pos, VPos},
};

const W: u32 = 820;
const H: u32 = 280;

/// Line colours, readable on white and told apart by more than hue where they can be (the
/// legend also names each line).
pub const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(255, 127, 14),
    RGBColor(23, 190, 207),
    RGBColor(127, 127, 127),
];

/// One line: (seconds, value) per interval end; `None` leaves a gap (nothing counted there).
pub struct Line {
    pub label: String,
    pub points: Vec<(f64, Option<f64>)>,
    pub color: RGBColor,
}

type Fail = String;

fn fail<E: std::fmt::Debug>(e: E) -> Fail {
    format!("{e:?}")
}

/// 12 345 678 → "12.3M": tick labels that fit the axis.
pub fn short(v: f64) -> String {
    let a = v.abs();
    if a >= 1e9 {
        format!("{:.1}G", v / 1e9)
    } else if a >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if a >= 1e4 {
        format!("{:.0}k", v / 1e3)
    } else if a >= 10.0 || a == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

/// Runs of consecutive defined points.
fn segments(points: &[(f64, Option<f64>)]) -> Vec<Vec<(f64, f64)>> {
    let mut out: Vec<Vec<(f64, f64)>> = vec![];
    let mut cur = vec![];
    for &(x, y) in points {
        match y {
            Some(y) if y.is_finite() => cur.push((x, y)),
            _ => {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
            }
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

fn svg(draw: impl FnOnce(&DrawingArea<SVGBackend, Shift>) -> Result<(), Fail>) -> String {
    svg_sized((W, H), draw)
}

fn svg_sized(
    size: (u32, u32),
    draw: impl FnOnce(&DrawingArea<SVGBackend, Shift>) -> Result<(), Fail>,
) -> String {
    let mut buf = String::new();
    let result = {
        let root = SVGBackend::with_string(&mut buf, size).into_drawing_area();
        root.fill(&WHITE)
            .map_err(fail)
            .and_then(|_| draw(&root))
            .and_then(|_| root.present().map_err(fail))
    };
    match result {
        Ok(()) => buf,
        // Drawing into a string fails only on a bug; the page says so where the chart goes.
        Err(e) => format!("<p class=\"nm\">chart not drawn: {}</p>", super::esc(&e)),
    }
}

/// Lines over the window: x in seconds from the start, y from 0.
pub fn lines(y_label: &str, lines: &[Line]) -> String {
    let x_max = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.0))
        .fold(1.0f64, f64::max);
    let y_max = lines
        .iter()
        .flat_map(|l| l.points.iter().filter_map(|p| p.1))
        .filter(|v| v.is_finite())
        .fold(0.0f64, f64::max);
    let y_max = if y_max > 0.0 { y_max * 1.12 } else { 1.0 };
    svg(|root| {
        let mut chart = ChartBuilder::on(root)
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(64)
            .build_cartesian_2d(0f64..x_max, 0f64..y_max)
            .map_err(fail)?;
        chart
            .configure_mesh()
            .x_desc("time since the recording started (s)")
            .y_desc(y_label)
            .label_style(("sans-serif", 13))
            .axis_desc_style(("sans-serif", 14))
            .y_label_formatter(&|v| short(*v))
            .light_line_style(RGBColor(235, 235, 235))
            .draw()
            .map_err(fail)?;
        for l in lines {
            let style = l.color.stroke_width(2);
            let mut labelled = false;
            for seg in segments(&l.points) {
                let drawn = if seg.len() == 1 {
                    chart
                        .draw_series(PointSeries::of_element(
                            seg,
                            3,
                            l.color.filled(),
                            &|c, s, st| Circle::new(c, s, st),
                        ))
                        .map_err(fail)?
                } else {
                    chart
                        .draw_series(LineSeries::new(seg, style))
                        .map_err(fail)?
                };
                if !labelled {
                    let c = l.color;
                    drawn.label(l.label.as_str()).legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(3))
                    });
                    labelled = true;
                }
            }
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .label_font(("sans-serif", 13))
            .background_style(WHITE.mix(0.85))
            .border_style(RGBColor(180, 180, 180))
            .draw()
            .map_err(fail)
    })
}

/// The node → node grid: one cell per (from, to), shaded by its share of the largest cell,
/// its number written in it (readable without colour).
pub fn heatmap(from: &[String], to: &[String], cells: &[Vec<u64>], unit: &str) -> String {
    let max = cells.iter().flatten().copied().max().unwrap_or(0).max(1);
    let side = 70 * to.len().max(from.len()).max(2) as u32;
    let size = (side + 150, side + 90);
    svg_sized(size, |root| {
        let mut chart = ChartBuilder::on(root)
            .margin(12)
            .x_label_area_size(44)
            .y_label_area_size(80)
            .caption(
                format!("{unit} by node pair"),
                ("sans-serif", 16).into_font(),
            )
            .build_cartesian_2d(
                // A segmented range holds its end too: 0..n-1 is n cells.
                (0..to.len() as i32 - 1).into_segmented(),
                (0..from.len() as i32 - 1).into_segmented(),
            )
            .map_err(fail)?;
        chart
            .configure_mesh()
            .disable_mesh()
            .x_desc("to node")
            .y_desc("from node")
            .label_style(("sans-serif", 14))
            .axis_desc_style(("sans-serif", 14))
            .x_labels(to.len())
            .y_labels(from.len())
            .x_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) => to.get(*i as usize).cloned().unwrap_or_default(),
                _ => String::new(),
            })
            .y_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) => from.get(*i as usize).cloned().unwrap_or_default(),
                _ => String::new(),
            })
            .draw()
            .map_err(fail)?;
        let centre = Pos::new(HPos::Center, VPos::Center);
        for (r, row) in cells.iter().enumerate() {
            for (c, &v) in row.iter().enumerate() {
                let share = v as f64 / max as f64;
                let shade = (255.0 - 215.0 * share) as u8;
                let fill = RGBColor(shade, shade, 255);
                let (x, y) = (c as i32, r as i32);
                chart
                    .draw_series(std::iter::once(Rectangle::new(
                        [
                            (SegmentValue::Exact(x), SegmentValue::Exact(y)),
                            (SegmentValue::Exact(x + 1), SegmentValue::Exact(y + 1)),
                        ],
                        fill.filled(),
                    )))
                    .map_err(fail)?;
                let ink = if share > 0.6 { WHITE } else { BLACK };
                chart
                    .draw_series(std::iter::once(Text::new(
                        short(v as f64),
                        (SegmentValue::CenterOf(x), SegmentValue::CenterOf(y)),
                        ("sans-serif", 15).into_font().color(&ink).pos(centre),
                    )))
                    .map_err(fail)?;
            }
        }
        Ok(())
    })
}

/// Bars of a log2 histogram: `labels` name the buckets ("< 4 µs"), `counts` their heights.
pub fn bars(x_label: &str, labels: &[String], counts: &[u64]) -> String {
    let max = counts.iter().copied().max().unwrap_or(0).max(1) as f64 * 1.15;
    svg(|root| {
        let mut chart = ChartBuilder::on(root)
            .margin(12)
            .x_label_area_size(44)
            .y_label_area_size(64)
            .build_cartesian_2d((0..labels.len() as i32 - 1).into_segmented(), 0f64..max)
            .map_err(fail)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_desc(x_label)
            .y_desc("count")
            .label_style(("sans-serif", 13))
            .axis_desc_style(("sans-serif", 14))
            .x_labels(labels.len())
            .x_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) => labels.get(*i as usize).cloned().unwrap_or_default(),
                _ => String::new(),
            })
            .y_label_formatter(&|v| short(*v))
            .light_line_style(RGBColor(235, 235, 235))
            .draw()
            .map_err(fail)?;
        chart
            .draw_series(counts.iter().enumerate().map(|(i, &c)| {
                Rectangle::new(
                    [
                        (SegmentValue::Exact(i as i32), 0.0),
                        (SegmentValue::Exact(i as i32 + 1), c as f64),
                    ],
                    PALETTE[0].mix(0.8).filled(),
                )
            }))
            .map_err(fail)?;
        Ok(())
    })
}
