//! One time-series chart as inline SVG (plotters' `SVGBackend`): lines over a time axis,
//! shaded bands for alert periods, gaps where values are unknown.
//!
//! Invariants: the SVG references nothing outside itself (no fonts, images or scripts; the
//! `xmlns` URL, an identifier that inline SVG in HTML does not need, is removed); a `None`
//! value breaks its line (never drawn as 0); text is drawn by the browser from the generic
//! `sans-serif` family.

use plotters::prelude::*;

use crate::model::TsMs;

/// Size of every chart, in CSS pixels.
pub const WIDTH: u32 = 1100;
pub const HEIGHT: u32 = 240;

/// One line of a chart.
#[derive(Debug, Clone)]
pub struct Line {
    pub colour: RGBColor,
    /// Drawn thicker (the alert's GPU).
    pub emphasis: bool,
    /// Drawn lighter (the other GPUs when one is emphasised).
    pub dim: bool,
    pub points: Vec<(TsMs, Option<f64>)>,
}

/// A shaded time span (an alert period).
#[derive(Debug, Clone)]
pub struct Band {
    pub from_ms: TsMs,
    pub to_ms: TsMs,
    pub colour: RGBColor,
    pub opacity: f64,
    /// Full height; else a strip along the top (an alert other than the report's own).
    pub full: bool,
    /// Written at the band's top left (`#12 GPU 3`: which alert it is).
    pub label: Option<String>,
}

/// What to draw.
#[derive(Debug, Clone)]
pub struct ChartSpec<'a> {
    pub from_ms: TsMs,
    pub to_ms: TsMs,
    /// A fixed y range (e.g. 0–100 for percentages); else from the data.
    pub y_range: Option<(f64, f64)>,
    pub lines: &'a [Line],
    pub bands: &'a [Band],
}

fn y_bounds(spec: &ChartSpec<'_>) -> (f64, f64) {
    if let Some(r) = spec.y_range {
        return r;
    }
    let vals = spec
        .lines
        .iter()
        .flat_map(|l| l.points.iter().filter_map(|p| p.1));
    let lo = vals.clone().fold(f64::INFINITY, f64::min);
    let hi = vals.fold(f64::NEG_INFINITY, f64::max);
    if !lo.is_finite() || !hi.is_finite() {
        return (0.0, 1.0);
    }
    let pad = if hi > lo {
        (hi - lo) * 0.08
    } else {
        hi.abs().max(1.0) * 0.1
    };
    let lo = if lo >= 0.0 && lo - pad < 0.0 {
        0.0
    } else {
        lo - pad
    };
    (lo, hi + pad)
}

/// Axis label for a time: `HH:MM` (UTC), with the date when the window spans days.
fn time_label(ms: TsMs, long: bool) -> String {
    chrono::DateTime::from_timestamp_millis(ms).map_or_else(String::new, |t| {
        t.format(if long { "%m-%d %H:%M" } else { "%H:%M" })
            .to_string()
    })
}

/// A number for an axis: few digits, thousands as `k`.
pub fn short_number(v: f64) -> String {
    let a = v.abs();
    if a >= 10_000.0 {
        format!("{:.0}k", v / 1000.0)
    } else if a >= 10.0 || a == 0.0 {
        format!("{v:.0}")
    } else if a >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

/// Round times for the x axis: multiples of a "nice" step, at most about ten of them.
pub fn time_ticks(from: TsMs, to: TsMs) -> Vec<TsMs> {
    const STEPS_S: &[i64] = &[
        10, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10_800, 21_600, 43_200, 86_400, 172_800,
        604_800,
    ];
    let span = (to - from).max(1);
    let step = STEPS_S
        .iter()
        .map(|s| s * 1000)
        .find(|s| span / s <= 10)
        .unwrap_or(span / 10);
    let first = (from + step - 1).div_euclid(step) * step;
    (0..)
        .map(|i| first + i * step)
        .take_while(|&t| t <= to)
        .collect()
}

/// The runs of known values (a `None` ends a run).
fn runs(points: &[(TsMs, Option<f64>)]) -> Vec<Vec<(TsMs, f64)>> {
    let mut out: Vec<Vec<(TsMs, f64)>> = vec![Vec::new()];
    for &(t, v) in points {
        match v {
            Some(v) if v.is_finite() => out.last_mut().map_or((), |r| r.push((t, v))),
            _ if out.last().is_some_and(|r| !r.is_empty()) => out.push(Vec::new()),
            _ => {}
        }
    }
    out.retain(|r| !r.is_empty());
    out
}

/// The chart as one `<svg>` element.
pub fn svg(spec: &ChartSpec<'_>) -> Result<String, String> {
    let mut buf = String::new();
    draw(&mut buf, spec).map_err(|e| e.to_string())?;
    Ok(buf.replace(" xmlns=\"http://www.w3.org/2000/svg\"", ""))
}

fn draw(
    buf: &mut String,
    spec: &ChartSpec<'_>,
) -> Result<(), DrawingAreaErrorKind<std::io::Error>> {
    let (from, to) = (spec.from_ms, spec.to_ms.max(spec.from_ms + 1));
    let (lo, hi) = y_bounds(spec);
    let long = to - from > 36 * 3600 * 1000;
    let root = SVGBackend::with_string(buf, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE)?;
    let grey = RGBColor(107, 114, 128);
    let mut chart = ChartBuilder::on(&root)
        .margin(10)
        .margin_right(40)
        .x_label_area_size(26)
        .y_label_area_size(56)
        .build_cartesian_2d((from..to).with_key_points(time_ticks(from, to)), lo..hi)?;
    let label_style = ("sans-serif", 12).into_font().color(&grey);
    let x_fmt = |x: &TsMs| time_label(*x, long);
    let y_fmt = |y: &f64| short_number(*y);
    chart
        .configure_mesh()
        .x_labels(12)
        .y_labels(6)
        .x_label_formatter(&x_fmt)
        .y_label_formatter(&y_fmt)
        .label_style(label_style)
        .bold_line_style(RGBColor(229, 231, 235))
        .light_line_style(RGBColor(243, 244, 246))
        .axis_style(RGBColor(156, 163, 175))
        .draw()?;
    for b in spec.bands {
        let (a, z) = (b.from_ms.max(from), b.to_ms.min(to));
        if a < z {
            let bottom = if b.full { lo } else { hi - (hi - lo) * 0.07 };
            chart.draw_series(std::iter::once(Rectangle::new(
                [(a, bottom), (z, hi)],
                b.colour.mix(b.opacity).filled(),
            )))?;
        }
    }
    // Each labelled band says which alert it is; a label that would overlap an earlier one
    // goes a line lower.
    let plot_w = f64::from(WIDTH - 10 - 40 - 56);
    let plot_h = f64::from(HEIGHT - 20 - 26);
    let ms_px = plot_w / (to - from) as f64;
    let mut placed: Vec<(f64, f64, u32)> = Vec::new();
    for b in spec.bands {
        let (a, z) = (b.from_ms.max(from), b.to_ms.min(to));
        let Some(label) = b.label.as_deref().filter(|_| a < z) else {
            continue;
        };
        let x0 = (a - from) as f64 * ms_px;
        let x1 = x0 + label.chars().count() as f64 * 6.5 + 6.0;
        let mut row = 0;
        while placed
            .iter()
            .any(|&(p0, p1, r)| r == row && p0 < x1 && x0 < p1)
        {
            row += 1;
        }
        placed.push((x0, x1, row));
        let y = hi - (hi - lo) * ((3.0 + f64::from(row) * 13.0) / plot_h);
        let dark = RGBColor(
            (f64::from(b.colour.0) * 0.6) as u8,
            (f64::from(b.colour.1) * 0.6) as u8,
            (f64::from(b.colour.2) * 0.6) as u8,
        );
        chart.draw_series(std::iter::once(Text::new(
            format!(" {label}"),
            (a, y),
            ("sans-serif", 12).into_font().color(&dark),
        )))?;
    }
    // Dim lines first, so that the emphasised one is on top.
    let mut order: Vec<&Line> = spec.lines.iter().collect();
    order.sort_by_key(|l| (l.emphasis, !l.dim));
    for l in order {
        let (alpha, width) = match (l.emphasis, l.dim) {
            (true, _) => (1.0, 3),
            (false, true) => (0.45, 1),
            (false, false) => (0.95, 2),
        };
        let style = ShapeStyle {
            color: l.colour.mix(alpha),
            filled: false,
            stroke_width: width,
        };
        for run in runs(&l.points) {
            if run.len() == 1 {
                chart.draw_series(run.iter().map(|&p| Circle::new(p, 2, style.filled())))?;
            } else {
                chart.draw_series(LineSeries::new(run, style))?;
            }
        }
    }
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gaps_split_lines_and_nothing_external() {
        assert_eq!(
            runs(&[
                (0, Some(1.0)),
                (1, None),
                (2, Some(2.0)),
                (3, Some(3.0)),
                (4, None)
            ]),
            vec![vec![(0, 1.0)], vec![(2, 2.0), (3, 3.0)]]
        );
        let lines = [Line {
            colour: RGBColor(1, 2, 3),
            emphasis: false,
            dim: false,
            points: vec![
                (0, Some(1.0)),
                (60_000, None),
                (120_000, Some(3.0)),
                (180_000, Some(2.0)),
            ],
        }];
        let bands = [Band {
            from_ms: 60_000,
            to_ms: 120_000,
            colour: RGBColor(220, 38, 38),
            opacity: 0.25,
            full: true,
            label: Some("#7 GPU 3".into()),
        }];
        let s = svg(&ChartSpec {
            from_ms: 0,
            to_ms: 180_000,
            y_range: None,
            lines: &lines,
            bands: &bands,
        })
        .unwrap();
        assert!(
            s.starts_with("<svg") && s.trim_end().ends_with("</svg>"),
            "{s}"
        );
        assert!(!s.contains("http"), "{s}");
        assert!(s.contains("fill=\"#DC2626\""), "the band: {s}");
        assert!(s.contains("#7 GPU 3\n</text>"), "the band's label: {s}");
        let ours = |tag: &str| {
            s.lines()
                .filter(|l| l.starts_with(tag) && l.contains("#010203"))
                .count()
        };
        assert_eq!(ours("<polyline"), 1, "one run of two points: {s}");
        assert_eq!(ours("<circle"), 1, "one lone point: {s}");
    }

    #[test]
    fn round_time_ticks() {
        let t0 = 1_796_063_459_000; // 18:30:59
        let ticks = time_ticks(t0, t0 + 40 * 60_000);
        assert_eq!(ticks.len(), 8, "every 5 minutes");
        assert!(ticks.iter().all(|t| t % 300_000 == 0));
        assert!(ticks[0] >= t0 && ticks[0] - t0 < 300_000);
    }

    #[test]
    fn numbers_are_short() {
        assert_eq!(short_number(81_920.0), "82k");
        assert_eq!(short_number(612.4), "612");
        assert_eq!(short_number(80.0), "80");
        assert_eq!(short_number(2.25), "2.2");
        assert_eq!(short_number(0.0), "0");
    }
}
