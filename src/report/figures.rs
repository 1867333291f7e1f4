//! The charts of a report as HTML: the legend, one figure per GPU metric and per training
//! metric, one line per GPU or training series, alert periods shaded.
//!
//! Invariants: GPU colours avoid the alert bands' reds and ambers; unknown values are gaps;
//! every label goes through [`esc`].

use std::collections::BTreeSet;
use std::fmt::Write as _;

use plotters::style::RGBColor;

use super::chart::{self, Band, ChartSpec, Line};
use super::html::esc;
use super::{ReportData, ReportError};
use crate::model::TsMs;

/// One colour per GPU / training series, in order.
/// (No reds, ambers or oranges: those are the alert bands' colours.)
const PALETTE: &[RGBColor] = &[
    RGBColor(31, 119, 180),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(23, 190, 207),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(55, 65, 81),
    RGBColor(188, 189, 34),
];
const MAX_TRAINING_LINES: usize = 8;

fn hex(c: RGBColor) -> String {
    format!("#{:02X}{:02X}{:02X}", c.0, c.1, c.2)
}

fn severity_colour(sev: Option<&str>) -> RGBColor {
    match sev {
        Some("critical") => RGBColor(220, 38, 38),
        Some("warning") => RGBColor(245, 158, 11),
        Some("info") => RGBColor(59, 130, 246),
        _ => RGBColor(107, 114, 128),
    }
}

/// The shaded periods: the firing part of each alert, its pending part lighter. In an
/// alert's report that alert is shaded at full height and the others are strips along the
/// top, so that overlapping alerts do not hide the lines.
fn bands(d: &ReportData) -> Vec<Band> {
    let mut out = Vec::new();
    for a in &d.alerts {
        let own = d.focus.as_ref().is_some_and(|f| f.id == a.id);
        let full = own || d.focus.is_none();
        let colour = severity_colour(a.severity.as_deref());
        let firing_from = a.fired_ms.unwrap_or(a.end_ms());
        let (pending, firing) = match (own, full) {
            (true, _) => (0.10, 0.28),
            (false, true) => (0.05, 0.12),
            (false, false) => (0.15, 0.45),
        };
        // Which alert a band is: its number (the alerts table's first column) and its GPU, on
        // the firing part (the pending part when it never fired).
        let label = format!("#{} {}", a.id, d.gpu_label(a.gpu_id));
        if a.active_since_ms < firing_from {
            out.push(Band {
                from_ms: a.active_since_ms,
                to_ms: firing_from,
                colour,
                opacity: pending,
                full,
                label: a.fired_ms.is_none().then(|| label.clone()),
            });
        }
        if a.fired_ms.is_some() {
            out.push(Band {
                from_ms: firing_from,
                to_ms: a.end_ms().max(firing_from + 1000),
                colour,
                opacity: firing,
                full,
                label: Some(label),
            });
        }
    }
    // Events (XIDs, a GPU lost) as thin dark lines, about two pixels wide.
    let px = ((d.to_ms - d.from_ms) / i64::from(chart::WIDTH)).max(1);
    for e in &d.events {
        out.push(Band {
            from_ms: e.ts_ms,
            to_ms: e.ts_ms + 2 * px,
            colour: EVENT_COLOUR,
            opacity: 0.8,
            full: true,
            label: None,
        });
    }
    out
}

/// The colour of event markers.
pub(super) const EVENT_COLOUR: RGBColor = RGBColor(127, 29, 29);

fn legend(o: &mut String, items: &[(String, RGBColor, bool)]) {
    o.push_str("<div class=\"legend\">");
    for (label, c, em) in items {
        let _ = write!(
            o,
            "<span class=\"sw\" style=\"background:{}\"></span>{}{}",
            hex(*c),
            esc(label),
            if *em { " (alert)" } else { "" }
        );
    }
    o.push_str("</div>\n");
}

/// The lines drawn exactly over an earlier one (the same values at the same times), as
/// legend text: `GPU 1 has the same values as GPU 0 (drawn under it)`.
fn hidden_lines(names: &[String], lines: &[Line]) -> Vec<String> {
    let mut out = Vec::new();
    for (j, l) in lines.iter().enumerate() {
        if !l.points.iter().any(|p| p.1.is_some()) {
            continue;
        }
        if let Some(i) = (0..j).find(|&i| lines[i].points == l.points) {
            out.push(format!(
                "{} has the same values as {} (drawn under it)",
                names[j], names[i]
            ));
        }
    }
    out
}

/// A chart, with its title above it when given and a note of the lines it hides.
fn figure(
    o: &mut String,
    title: Option<&str>,
    spec: &ChartSpec<'_>,
    hidden: &[String],
) -> Result<(), ReportError> {
    let svg = chart::svg(spec).map_err(|message| ReportError::Chart {
        chart: title.unwrap_or("training").to_string(),
        message,
    })?;
    let h3 = title.map_or_else(String::new, |t| format!("<h3>{}</h3>", esc(t)));
    let note = if hidden.is_empty() {
        String::new()
    } else {
        format!(
            "<div class=\"legend hidden-lines\">{}</div>",
            esc(&hidden.join("; "))
        )
    };
    let _ = writeln!(o, "<figure>{h3}{note}{svg}</figure>");
    Ok(())
}

pub(super) fn gpu_charts(o: &mut String, d: &ReportData) -> Result<(), ReportError> {
    o.push_str("<section><h2>GPU metrics</h2>\n");
    let focus = d.focus_gpu();
    let items: Vec<(String, RGBColor, bool)> = d
        .gpus
        .iter()
        .enumerate()
        .map(|(i, g)| {
            (
                d.gpu_label(g.gpu_id),
                PALETTE[i % PALETTE.len()],
                focus == Some(g.gpu_id),
            )
        })
        .collect();
    legend(o, &items);
    let bands = bands(d);
    for name in super::CHART_METRICS {
        let per: Vec<_> = d.series.iter().filter(|s| s.metric.name == *name).collect();
        let Some(first) = per.first() else { continue };
        let (unit, div) = if first.metric.unit == "MiB" {
            ("GiB", 1024.0)
        } else {
            (first.metric.unit, 1.0)
        };
        let lines: Vec<Line> = per
            .iter()
            .map(|s| {
                let i = d
                    .gpus
                    .iter()
                    .position(|g| g.gpu_id == s.gpu_id)
                    .unwrap_or(0);
                Line {
                    colour: PALETTE[i % PALETTE.len()],
                    emphasis: focus == Some(s.gpu_id),
                    dim: focus.is_some_and(|f| f != s.gpu_id),
                    points: s
                        .points
                        .iter()
                        .map(|p| (p.ts_ms, p.avg.map(|v| v / div)))
                        .collect(),
                }
            })
            .collect();
        let names: Vec<String> = per.iter().map(|s| d.gpu_label(s.gpu_id)).collect();
        let spec = ChartSpec {
            from_ms: d.from_ms,
            to_ms: d.to_ms,
            y_range: (unit == "%").then_some((0.0, 100.0)),
            lines: &lines,
            bands: &bands,
        };
        figure(
            o,
            Some(&format!("{} ({unit})", first.metric.title)),
            &spec,
            &hidden_lines(&names, &lines),
        )?;
    }
    o.push_str("</section>\n");
    Ok(())
}

/// `{"job":"llm-7","rank":"0"}` → `job=llm-7 rank=0`.
fn labels_text(json: &str) -> String {
    match serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(json) {
        Ok(m) if !m.is_empty() => m
            .iter()
            .map(|(k, v)| {
                format!(
                    "{k}={}",
                    v.as_str().map_or_else(|| v.to_string(), str::to_string)
                )
            })
            .collect::<Vec<_>>()
            .join(" "),
        _ => "(no labels)".into(),
    }
}

pub(super) fn training(o: &mut String, d: &ReportData) -> Result<(), ReportError> {
    if d.training.iter().all(|t| t.points.is_empty()) {
        return Ok(());
    }
    o.push_str("<section><h2>Training</h2>\n");
    let metrics: BTreeSet<&str> = d.training.iter().map(|t| t.metric.as_str()).collect();
    let bands = bands(d);
    for m in metrics {
        let all: Vec<_> = d
            .training
            .iter()
            .filter(|t| t.metric == m && !t.points.is_empty())
            .collect();
        let shown = &all[..all.len().min(MAX_TRAINING_LINES)];
        let items: Vec<(String, RGBColor, bool)> = shown
            .iter()
            .enumerate()
            .map(|(i, t)| {
                (
                    labels_text(&t.labels_json),
                    PALETTE[i % PALETTE.len()],
                    false,
                )
            })
            .collect();
        let lines: Vec<Line> = shown
            .iter()
            .enumerate()
            .map(|(i, t)| Line {
                colour: PALETTE[i % PALETTE.len()],
                emphasis: false,
                dim: false,
                points: with_gaps(&t.points, d.step_ms),
            })
            .collect();
        let spec = ChartSpec {
            from_ms: d.from_ms,
            to_ms: d.to_ms,
            y_range: None,
            lines: &lines,
            bands: &bands,
        };
        let _ = writeln!(o, "<h3>{}</h3>", esc(m));
        legend(o, &items);
        let names: Vec<String> = items.iter().map(|(n, ..)| n.clone()).collect();
        figure(o, None, &spec, &hidden_lines(&names, &lines))?;
        if all.len() > shown.len() {
            let _ = writeln!(
                o,
                "<p class=\"muted\">{} more series not drawn.</p>",
                all.len() - shown.len()
            );
        }
    }
    o.push_str("</section>\n");
    Ok(())
}

/// Sparse training buckets as a line with a gap wherever a bucket is missing.
fn with_gaps(points: &[(TsMs, f64)], step: i64) -> Vec<(TsMs, Option<f64>)> {
    let mut out = Vec::with_capacity(points.len());
    for (i, &(t, v)) in points.iter().enumerate() {
        if i > 0 && t - points[i - 1].0 > step {
            out.push((points[i - 1].0 + step, None));
        }
        out.push((t, Some(v)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identical_lines_are_said() {
        let line = |v: f64| Line {
            colour: PALETTE[0],
            emphasis: false,
            dim: false,
            points: vec![(0, Some(v)), (1, None), (2, Some(v))],
        };
        let names = ["GPU 0", "GPU 1", "GPU 2"].map(String::from);
        assert_eq!(
            hidden_lines(&names, &[line(1.0), line(1.0), line(2.0)]),
            ["GPU 1 has the same values as GPU 0 (drawn under it)"]
        );
        let empty = Line {
            points: vec![(0, None)],
            ..line(0.0)
        };
        assert!(hidden_lines(&names, &[empty.clone(), empty]).is_empty());
    }

    #[test]
    fn labels_and_gaps() {
        assert_eq!(
            labels_text(r#"{"job":"llm-7","rank":"0"}"#),
            "job=llm-7 rank=0"
        );
        assert_eq!(
            with_gaps(&[(0, 1.0), (10, 2.0), (40, 3.0)], 10),
            [(0, Some(1.0)), (10, Some(2.0)), (20, None), (40, Some(3.0))]
        );
    }
}
