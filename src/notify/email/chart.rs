//! The inline PNG charts of an email: the alert's metric on its GPU over the hour before the
//! notification, with the time the alert was active shaded and its start marked. The series
//! is read through `store::window` from the raw samples, in buckets of [`step_ms`] (at most
//! ~300 per chart): each bucket's min..max is the band, its average the line.
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

use crate::metric::{Axis, SampleMetric};
use crate::model::TsMs;
use crate::notify::{AlertMsg, Notification};
use crate::store::open_read_only;
use crate::store::window::{self, Point, Source};

/// Charts per message at most.
pub const MAX_CHARTS: usize = 4;
/// The window drawn: this long before the notification's `now_ms`.
pub const WINDOW_MS: i64 = 3_600_000;
pub const WIDTH: u32 = 560;
pub const HEIGHT: u32 = 150;
/// Buckets per chart at most (about; the window's ends may cut one more).
pub const MAX_BUCKETS: i64 = 300;

/// The bucket width of a `window_ms` chart: the window / [`MAX_BUCKETS`] in whole seconds,
/// at least 1 s.
pub fn step_ms(window_ms: i64) -> i64 {
    let per = (window_ms + MAX_BUCKETS - 1) / MAX_BUCKETS;
    ((per + 999) / 1000 * 1000).max(1000)
}

/// One chart to draw.
#[derive(Debug, Clone, PartialEq)]
pub struct Spec {
    /// Index of the alert in `Notification::alerts`.
    pub alert: usize,
    pub gpu_id: i64,
    pub metric: &'static SampleMetric,
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
    /// The smallest and the largest sample of the window (the buckets' extremes).
    pub min: f64,
    pub max: f64,
    /// The newest bucket's average.
    pub last: f64,
    /// The start of the first and of the last bucket with a value.
    pub first_ms: TsMs,
    pub last_ms: TsMs,
    /// Samples with a value.
    pub samples: u64,
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
    let metric = crate::metric::by_name_or_alias(a.metric.as_deref()?)?.def();
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
    let step = step_ms(WINDOW_MS);
    specs
        .iter()
        .map(|s| {
            let (name, metric) = (s.metric.name, *s.metric);
            // `now_ms` is the newest sample drawn: the range ends just after it.
            let read = window::series(
                &conn,
                &[s.gpu_id],
                &[metric],
                from,
                now_ms + 1,
                step,
                Source::Raw,
            );
            match read {
                Err(e) => Outcome::Note(format!("No chart: reading {name} failed ({e}).")),
                Ok(series) => {
                    let points = series.first().map_or(&[][..], |x| &x.points[..]);
                    draw_one(s, metric.unit, points, step, from, now_ms)
                }
            }
        })
        .collect()
}

/// A bucket with a (finite) value.
fn value(p: &Point) -> Option<(f64, f64, f64)> {
    let avg = p.avg.filter(|v| v.is_finite())?;
    let min = p.min.filter(|v| v.is_finite()).unwrap_or(avg);
    let max = p.max.filter(|v| v.is_finite()).unwrap_or(avg);
    Some((avg, min, max))
}

fn draw_one(
    s: &Spec,
    unit: &'static str,
    points: &[Point],
    step: i64,
    from: TsMs,
    to: TsMs,
) -> Outcome {
    let name = s.metric.name;
    let values: Vec<(&Point, (f64, f64, f64))> =
        points.iter().filter_map(|p| Some((p, value(p)?))).collect();
    let (Some(first), Some(last)) = (values.first(), values.last()) else {
        return Outcome::Note(format!(
            "No chart: no {name} samples of this GPU in the last hour."
        ));
    };
    let min = values.iter().map(|v| v.1.1).fold(f64::INFINITY, f64::min);
    let max = values
        .iter()
        .map(|v| v.1.2)
        .fold(f64::NEG_INFINITY, f64::max);
    let stats = Stats {
        metric: name,
        unit,
        min,
        max,
        last: last.1.0,
        first_ms: first.0.ts_ms,
        last_ms: last.0.ts_ms,
        samples: values.iter().map(|v| v.0.n).sum(),
    };
    match draw(s, points, step, from, to, y_range(s.metric, min, max)) {
        Ok(png) => Outcome::Image { png, stats },
        Err(e) => Outcome::Note(format!("No chart: drawing {name} failed ({e}).")),
    }
}

fn y_range(m: &SampleMetric, min: f64, max: f64) -> (f64, f64) {
    match m.axis {
        Axis::Percent => (0.0, max.max(100.0)),
        Axis::Ratio => (0.0, max.max(1.0)),
        Axis::Flag => (-0.05, 1.05),
        Axis::Fit => {
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
    points: &[Point],
    step: i64,
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
        for seg in segments(points, step, from, to) {
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

/// Runs of consecutive buckets with a value (a bucket without one breaks the line), each
/// bucket at its middle (within `[from, to]`).
fn segments(points: &[Point], step: i64, from: TsMs, to: TsMs) -> Vec<Vec<Bucket>> {
    let mut out = Vec::new();
    let mut cur = Vec::new();
    for p in points {
        match value(p) {
            Some((avg, min, max)) => cur.push(Bucket {
                t: (p.ts_ms + step / 2).clamp(from, to),
                avg,
                min,
                max,
                n: p.n.max(1),
            }),
            None if !cur.is_empty() => out.push(std::mem::take(&mut cur)),
            None => {}
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// One bucket of a segment, at time `t`, with the samples behind it.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Bucket {
    t: TsMs,
    avg: f64,
    min: f64,
    max: f64,
    n: u64,
}

/// One pixel column of a segment: the buckets in `[t - bucket/2, t + bucket/2)`.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Column {
    t: TsMs,
    min: f64,
    max: f64,
    avg: f64,
}

/// Aggregates a segment into columns `bucket_ms` wide (buckets narrower than a pixel share
/// one: min of the minima, max of the maxima, the average weighted by samples).
fn columns(seg: &[Bucket], from: TsMs, bucket_ms: i64) -> Vec<Column> {
    let mut out: Vec<Column> = Vec::new();
    let mut n = 0u64;
    let mut cur_bucket = None;
    for v in seg {
        let b = (v.t - from).div_euclid(bucket_ms);
        if cur_bucket != Some(b) {
            cur_bucket = Some(b);
            n = 0;
            out.push(Column {
                t: from + b * bucket_ms + bucket_ms / 2,
                min: v.min,
                max: v.max,
                avg: 0.0,
            });
        }
        if let Some(c) = out.last_mut() {
            n += v.n;
            c.min = c.min.min(v.min);
            c.max = c.max.max(v.max);
            c.avg += (v.avg - c.avg) * v.n as f64 / n as f64;
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
mod tests;
