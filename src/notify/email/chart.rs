//! The inline PNG charts of an email: the alert's metric on its GPU over the hour before the
//! notification, with the time the alert was active shaded and its start marked.
//!
//! Invariants:
//! - At most [`MAX_CHARTS`] charts per message, for alerts that have a per-GPU sample metric
//!   and a `gpu_id`; other alerts get none and no note.
//! - A chart that cannot be drawn (no samples, the database unreadable or too slow) becomes a
//!   one-line [`Outcome::Note`]; nothing here fails a send.
//! - No text is drawn (there are no fonts): numbers, units and the time span are returned as
//!   [`Stats`] for the HTML beside the image.
//! - Blocking (SQLite, PNG encoding): call [`render`] from `spawn_blocking`.

use std::path::Path;

use plotters::backend::RGBPixel;
use plotters::prelude::*;

use crate::model::TsMs;
use crate::notify::{AlertMsg, Notification};
use crate::rules::ast::Metric;
use crate::rules::names::metric_name;
use crate::store::{open_read_only, series};

/// Charts per message at most.
pub const MAX_CHARTS: usize = 4;
/// The window drawn: this long before the notification's `now_ms`.
pub const WINDOW_MS: i64 = 3_600_000;
pub const WIDTH: u32 = 560;
pub const HEIGHT: u32 = 150;

/// One chart to draw.
#[derive(Debug, Clone, PartialEq)]
pub struct Spec {
    /// Index of the alert in `Notification::alerts`.
    pub alert: usize,
    pub gpu_id: i64,
    pub metric: Metric,
    /// The shaded span: the alert's start and (resolved alerts) end.
    pub starts_ms: TsMs,
    pub ends_ms: Option<TsMs>,
    pub firing: bool,
    pub severity: String,
}

/// What the HTML shows beside a chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Stats {
    /// The rule-language name (`util_gpu`).
    pub metric: &'static str,
    /// `%`, `°C`, `MiB`, `W`, ... (empty for ratios and flags).
    pub unit: &'static str,
    pub min: f64,
    pub max: f64,
    pub last: f64,
    pub first_ms: TsMs,
    pub last_ms: TsMs,
    /// Samples with a value.
    pub samples: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Image {
        png: Vec<u8>,
        stats: Stats,
    },
    /// Why there is no chart (one line, for the HTML).
    Note(String),
}

/// The charts a notification gets: the first [`MAX_CHARTS`] alerts with a per-GPU sample
/// metric and a `gpu_id`.
pub fn wanted(n: &Notification) -> Vec<Spec> {
    n.alerts
        .iter()
        .enumerate()
        .filter_map(|(i, a)| spec(i, a))
        .take(MAX_CHARTS)
        .collect()
}

fn spec(i: usize, a: &AlertMsg) -> Option<Spec> {
    let metric = series::sample_metric(a.metric.as_deref()?)?;
    Some(Spec {
        alert: i,
        gpu_id: a.gpu_id?,
        metric,
        starts_ms: a.starts_ms,
        ends_ms: if a.is_firing() { None } else { a.ends_ms },
        firing: a.is_firing(),
        severity: a.severity.clone(),
    })
}

/// Reads the series from the database at `db` and draws every chart (blocking).
pub fn render(db: &Path, specs: &[Spec], now_ms: TsMs) -> Vec<Outcome> {
    if specs.is_empty() {
        return Vec::new();
    }
    let conn = match open_read_only(db) {
        Ok(c) => c,
        Err(e) => {
            let note = format!("No chart: the history database could not be read ({e}).");
            return specs.iter().map(|_| Outcome::Note(note.clone())).collect();
        }
    };
    let from = now_ms - WINDOW_MS;
    specs
        .iter()
        .map(|s| {
            let name = metric_name(s.metric);
            match series::metric_series(&conn, s.gpu_id, name, from, now_ms) {
                Err(e) => Outcome::Note(format!("No chart: reading {name} failed ({e}).")),
                Ok(points) => draw_one(s, &points, from, now_ms),
            }
        })
        .collect()
}

fn draw_one(s: &Spec, points: &[(TsMs, Option<f64>)], from: TsMs, to: TsMs) -> Outcome {
    let name = metric_name(s.metric);
    let values: Vec<(TsMs, f64)> = points
        .iter()
        .filter_map(|&(t, v)| v.filter(|v| v.is_finite()).map(|v| (t, v)))
        .collect();
    let (Some(first), Some(last)) = (values.first(), values.last()) else {
        return Outcome::Note(format!(
            "No chart: no {name} samples of this GPU in the last hour."
        ));
    };
    let min = values.iter().map(|p| p.1).fold(f64::INFINITY, f64::min);
    let max = values.iter().map(|p| p.1).fold(f64::NEG_INFINITY, f64::max);
    let stats = Stats {
        metric: name,
        unit: unit(s.metric),
        min,
        max,
        last: last.1,
        first_ms: first.0,
        last_ms: last.0,
        samples: values.len(),
    };
    match draw(s, points, from, to, y_range(s.metric, min, max)) {
        Ok(png) => Outcome::Image { png, stats },
        Err(e) => Outcome::Note(format!("No chart: drawing {name} failed ({e}).")),
    }
}

/// The unit of a metric in rule units.
pub fn unit(m: Metric) -> &'static str {
    match m {
        Metric::UtilGpu | Metric::UtilMem | Metric::Fan => "%",
        Metric::MemUsed | Metric::MemFree | Metric::MemTotal => "MiB",
        Metric::Temp => "°C",
        Metric::ClockSm | Metric::ClockMem => "MHz",
        Metric::Power | Metric::PowerLimit => "W",
        Metric::PcieTx | Metric::PcieRx => "MB/s",
        _ => "",
    }
}

fn y_range(m: Metric, min: f64, max: f64) -> (f64, f64) {
    match m {
        Metric::UtilGpu | Metric::UtilMem | Metric::Fan => (0.0, max.max(100.0)),
        Metric::MemUsedRatio => (0.0, max.max(1.0)),
        Metric::ThermalThrottle
        | Metric::HwSlowdown
        | Metric::RemapPending
        | Metric::Lost
        | Metric::Gap => (-0.05, 1.05),
        _ => {
            let pad = if max > min {
                (max - min) * 0.1
            } else {
                (max.abs() * 0.1).max(1.0)
            };
            let lo = if min >= 0.0 {
                (min - pad).max(0.0)
            } else {
                min - pad
            };
            (lo, max + pad)
        }
    }
}

/// Colours of the shaded span and the start marker, by severity (green once resolved).
fn colours(s: &Spec) -> (RGBColor, RGBColor) {
    if !s.firing {
        return (RGBColor(0xdc, 0xfc, 0xe7), RGBColor(0x16, 0xa3, 0x4a));
    }
    match s.severity.as_str() {
        "critical" => (RGBColor(0xfe, 0xe2, 0xe2), RGBColor(0xdc, 0x26, 0x26)),
        "warning" => (RGBColor(0xfe, 0xf3, 0xc7), RGBColor(0xd9, 0x77, 0x06)),
        _ => (RGBColor(0xdb, 0xea, 0xfe), RGBColor(0x25, 0x63, 0xeb)),
    }
}

const LINE: RGBColor = RGBColor(0x1d, 0x4e, 0xd8);
const GRID: RGBColor = RGBColor(0xe5, 0xe7, 0xeb);
const FRAME: RGBColor = RGBColor(0x9c, 0xa3, 0xaf);

fn draw(
    s: &Spec,
    points: &[(TsMs, Option<f64>)],
    from: TsMs,
    to: TsMs,
    (lo, hi): (f64, f64),
) -> Result<Vec<u8>, String> {
    let err = |e: &dyn std::fmt::Display| e.to_string();
    let mut buf = vec![0u8; (WIDTH * HEIGHT * 3) as usize];
    {
        let backend = BitMapBackend::<RGBPixel>::with_buffer_and_format(&mut buf, (WIDTH, HEIGHT))
            .map_err(|e| err(&e))?;
        let root = backend.into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(&e))?;
        let mut chart = ChartBuilder::on(&root)
            .margin(6)
            .build_cartesian_2d(from..to, lo..hi)
            .map_err(|e| err(&e))?;
        let (shade, marker) = colours(s);
        let span_start = s.starts_ms.clamp(from, to);
        let span_end = s.ends_ms.unwrap_or(to).clamp(from, to);
        if span_end > span_start {
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(span_start, hi), (span_end, lo)],
                    shade.filled(),
                )))
                .map_err(|e| err(&e))?;
        }
        for k in 1..4 {
            let y = lo + (hi - lo) * f64::from(k) / 4.0;
            chart
                .draw_series(LineSeries::new([(from, y), (to, y)], GRID))
                .map_err(|e| err(&e))?;
        }
        let bucket_ms = ((to - from) / i64::from(WIDTH)).max(1);
        for seg in segments(points) {
            let cols = columns(&seg, from, bucket_ms);
            if let [only] = cols.as_slice() {
                chart
                    .draw_series(std::iter::once(Circle::new(
                        (only.t, only.avg),
                        2,
                        LINE.filled(),
                    )))
                    .map_err(|e| err(&e))?;
                continue;
            }
            // The min..max band of each pixel column, then the average as a line.
            let band: Vec<(TsMs, f64)> = cols
                .iter()
                .map(|c| (c.t, c.max))
                .chain(cols.iter().rev().map(|c| (c.t, c.min)))
                .collect();
            chart
                .draw_series(std::iter::once(Polygon::new(band, LINE.mix(0.25).filled())))
                .map_err(|e| err(&e))?;
            chart
                .draw_series(LineSeries::new(
                    cols.iter().map(|c| (c.t, c.avg)),
                    LINE.stroke_width(2),
                ))
                .map_err(|e| err(&e))?;
        }
        if s.starts_ms >= from && s.starts_ms <= to {
            let at = s.starts_ms;
            chart
                .draw_series(LineSeries::new(
                    [(at, lo), (at, hi)],
                    marker.stroke_width(2),
                ))
                .map_err(|e| err(&e))?;
        }
        if let Some(end) = s.ends_ms.filter(|e| *e >= from && *e <= to) {
            chart
                .draw_series(LineSeries::new([(end, lo), (end, hi)], marker))
                .map_err(|e| err(&e))?;
        }
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [(from, hi), (to, lo)],
                FRAME.stroke_width(1),
            )))
            .map_err(|e| err(&e))?;
        root.present().map_err(|e| err(&e))?;
    }
    encode_png(&buf)
}

/// Runs of consecutive samples with a value (a NULL or a gap breaks the line).
fn segments(points: &[(TsMs, Option<f64>)]) -> Vec<Vec<(TsMs, f64)>> {
    let mut out = Vec::new();
    let mut cur = Vec::new();
    for &(t, v) in points {
        match v.filter(|v| v.is_finite()) {
            Some(v) => cur.push((t, v)),
            None if !cur.is_empty() => out.push(std::mem::take(&mut cur)),
            None => {}
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// One pixel column of a segment: the values of samples in `[t - bucket/2, t + bucket/2)`.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Column {
    t: TsMs,
    min: f64,
    max: f64,
    avg: f64,
}

/// Aggregates a segment into columns `bucket_ms` wide (a second-by-second hour would
/// otherwise be 3600 vertices on 560 pixels).
fn columns(seg: &[(TsMs, f64)], from: TsMs, bucket_ms: i64) -> Vec<Column> {
    let mut out: Vec<Column> = Vec::new();
    let mut n = 0u32;
    let mut cur_bucket = None;
    for &(t, v) in seg {
        let b = (t - from).div_euclid(bucket_ms);
        if cur_bucket != Some(b) {
            cur_bucket = Some(b);
            n = 0;
            out.push(Column {
                t: from + b * bucket_ms + bucket_ms / 2,
                min: v,
                max: v,
                avg: 0.0,
            });
        }
        if let Some(c) = out.last_mut() {
            n += 1;
            c.min = c.min.min(v);
            c.max = c.max.max(v);
            c.avg += (v - c.avg) / f64::from(n);
        }
    }
    out
}

fn encode_png(rgb: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    let mut enc = png::Encoder::new(&mut out, WIDTH, HEIGHT);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    enc.set_compression(png::Compression::Best);
    let mut w = enc.write_header().map_err(|e| e.to_string())?;
    w.write_image_data(rgb).map_err(|e| e.to_string())?;
    w.finish().map_err(|e| e.to_string())?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> Spec {
        Spec {
            alert: 0,
            gpu_id: 1,
            metric: Metric::UtilGpu,
            starts_ms: 2_400_000,
            ends_ms: None,
            firing: true,
            severity: "warning".into(),
        }
    }

    #[test]
    fn columns_aggregate_each_pixel() {
        let seg = [(0, 1.0), (5, 3.0), (10, 7.0), (25, 2.0)];
        let c = columns(&seg, 0, 10);
        assert_eq!(c.len(), 3);
        assert_eq!((c[0].t, c[0].min, c[0].max, c[0].avg), (5, 1.0, 3.0, 2.0));
        assert_eq!((c[1].t, c[1].avg), (15, 7.0));
        assert_eq!((c[2].t, c[2].avg), (25, 2.0));
    }

    #[test]
    fn gaps_split_the_line() {
        let p = [(1, Some(1.0)), (2, None), (3, Some(2.0)), (4, Some(3.0))];
        assert_eq!(segments(&p), vec![vec![(1, 1.0)], vec![(3, 2.0), (4, 3.0)]]);
    }

    #[test]
    fn draws_a_png_with_the_span_shaded() {
        let points: Vec<(TsMs, Option<f64>)> = (0..3600)
            .map(|i| {
                let t = i64::from(i) * 1000;
                let v = if (1000..1010).contains(&i) {
                    None
                } else if t >= 2_400_000 {
                    Some(2.0)
                } else {
                    Some(95.0)
                };
                (t, v)
            })
            .collect();
        let Outcome::Image { png, stats } = draw_one(&spec(), &points, 0, WINDOW_MS) else {
            panic!("no image");
        };
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        assert!(png.len() < 40_000, "{}", png.len());
        assert_eq!((stats.min, stats.max, stats.last), (2.0, 95.0, 2.0));
        assert_eq!((stats.unit, stats.samples), ("%", 3590));
    }

    #[test]
    fn no_samples_is_a_note() {
        let o = draw_one(&spec(), &[(5, None)], 0, WINDOW_MS);
        assert!(matches!(o, Outcome::Note(n) if n.contains("no util_gpu samples")));
    }
}
