//! Printing a computed history: the table (averages, local times), CSV and JSON (avg/min/max,
//! epoch ms and UTC), and terminal sparklines.
//!
//! Invariant: an unknown value prints as `-` (CSV: empty, JSON: `null`, sparkline: a space),
//! never as 0.

use std::time::Duration;

use serde::Serialize;

use crate::model::TsMs;
use crate::store::history::GpuRow;
use crate::store::window::{Series, Source};

#[derive(Serialize)]
struct JsonHistory<'a> {
    from_ms: TsMs,
    to_ms: TsMs,
    from_utc: String,
    to_utc: String,
    step_ms: i64,
    source: &'static str,
    series: Vec<JsonSeries<'a>>,
}

#[derive(Serialize)]
struct JsonSeries<'a> {
    host: Option<&'a str>,
    /// The index, or `"N/I"` for a MIG instance.
    gpu_index: Option<serde_json::Value>,
    gpu_uuid: Option<&'a str>,
    metric: &'static str,
    unit: &'static str,
    points: Vec<JsonPoint<'a>>,
}

#[derive(Serialize)]
struct JsonPoint<'a> {
    ts_ms: TsMs,
    time_utc: &'a str,
    avg: Option<f64>,
    min: Option<f64>,
    max: Option<f64>,
}

/// A computed history, ready to print.
pub struct History<'a> {
    pub gpus: &'a [GpuRow],
    pub series: &'a [Series],
    pub from: TsMs,
    pub to: TsMs,
    pub step: i64,
    pub source: Source,
}

fn num(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.1}"))
}

fn csv_num(v: Option<f64>) -> String {
    v.map_or_else(String::new, |v| format!("{v:.3}"))
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

use crate::format::rfc3339_ms as rfc3339;

fn local(ms: TsMs) -> String {
    chrono::DateTime::from_timestamp_millis(ms).map_or_else(
        || ms.to_string(),
        |t| {
            t.with_timezone(&chrono::Local)
                .format("%Y-%m-%d %H:%M:%S")
                .to_string()
        },
    )
}

impl History<'_> {
    fn gpu(&self, id: i64) -> Option<&GpuRow> {
        self.gpus.iter().find(|g| g.gpu_id == id)
    }

    fn gpu_label(&self, id: i64) -> String {
        let multi = self.gpus.iter().any(|g| g.host != self.gpus[0].host);
        match self.gpu(id) {
            Some(g) if multi => format!("{}/{}", g.host, g.inventory.index),
            Some(g) => g.inventory.index.to_string(),
            None => "?".into(),
        }
    }

    /// The metrics per GPU: `series` is GPU-major, so chunks of `width`.
    fn width(&self) -> usize {
        let first = self.series.first().map(|s| s.gpu_id);
        self.series
            .iter()
            .take_while(|s| Some(s.gpu_id) == first)
            .count()
            .max(1)
    }

    fn footer(&self) -> String {
        let src = match self.source {
            Source::Raw => "raw samples",
            Source::Rollups => "1-minute rollups",
        };
        format!(
            "source: {src}; step {}; {} .. {} (local time); {} GPU(s)\n",
            humantime::format_duration(Duration::from_millis(self.step.max(0) as u64)),
            local(self.from),
            local(self.to),
            self.gpus.len()
        )
    }

    /// One line per step and GPU, the average of each metric.
    pub fn table(&self) -> String {
        let w = self.width();
        let mut head = format!("{:<19}  {:>6}", "TIME", "GPU");
        for s in self.series.iter().take(w) {
            head.push_str(&format!(
                "  {:>14}",
                format!("{} {}", s.metric.name.to_uppercase(), s.metric.unit)
            ));
        }
        let mut out = head + "\n";
        let n = self.series.first().map_or(0, |s| s.points.len());
        for i in 0..n {
            let time = self.series.first().map(|s| local(s.points[i].ts_ms));
            for chunk in self.series.chunks(w) {
                let mut line = format!(
                    "{:<19}  {:>6}",
                    time.as_deref().unwrap_or(""),
                    self.gpu_label(chunk[0].gpu_id)
                );
                for s in chunk {
                    line.push_str(&format!("  {:>14}", num(s.points[i].avg)));
                }
                out.push_str(&line);
                out.push('\n');
            }
        }
        out.push_str(&self.footer());
        out
    }

    /// A header row, then one row per step and GPU: avg, min and max of each metric.
    pub fn csv(&self) -> String {
        let w = self.width();
        let mut out = String::from("ts_ms,time_utc,host,gpu_index,gpu_uuid");
        for s in self.series.iter().take(w) {
            let n = s.metric.name;
            out.push_str(&format!(",{n},{n}_min,{n}_max"));
        }
        out.push('\n');
        // Per GPU once: `host,index,uuid`.
        let ids: Vec<String> = self
            .series
            .chunks(w)
            .map(|c| {
                self.gpu(c[0].gpu_id).map_or_else(
                    || ",,".to_string(),
                    |g| {
                        format!(
                            "{},{},{}",
                            csv_field(&g.host),
                            g.inventory.address(),
                            csv_field(&g.inventory.uuid)
                        )
                    },
                )
            })
            .collect();
        let n = self.series.first().map_or(0, |s| s.points.len());
        for i in 0..n {
            let ts = self.series[0].points[i].ts_ms;
            let time = rfc3339(ts);
            for (chunk, id) in self.series.chunks(w).zip(&ids) {
                out.push_str(&format!("{ts},{time},{id}"));
                for s in chunk {
                    let p = s.points[i];
                    out.push_str(&format!(
                        ",{},{},{}",
                        csv_num(p.avg),
                        csv_num(p.min),
                        csv_num(p.max)
                    ));
                }
                out.push('\n');
            }
        }
        out
    }

    /// `{from_ms, to_ms, step_ms, source, series: [{host, gpu_index, gpu_uuid, metric, unit,
    /// points: [{ts_ms, time_utc, avg, min, max}]}]}`, compact (a week per minute is large).
    pub fn json(&self) -> String {
        // Every series has the same buckets: format their times once.
        let times: Vec<String> = self
            .series
            .first()
            .map(|s| s.points.iter().map(|p| rfc3339(p.ts_ms)).collect())
            .unwrap_or_default();
        let doc = JsonHistory {
            from_ms: self.from,
            to_ms: self.to,
            from_utc: rfc3339(self.from),
            to_utc: rfc3339(self.to),
            step_ms: self.step,
            source: self.source.as_str(),
            series: self
                .series
                .iter()
                .map(|s| {
                    let g = self.gpu(s.gpu_id);
                    JsonSeries {
                        host: g.map(|g| g.host.as_str()),
                        gpu_index: g.map(|g| match g.inventory.mig {
                            Some(_) => serde_json::Value::from(g.inventory.address()),
                            None => serde_json::Value::from(g.inventory.index),
                        }),
                        gpu_uuid: g.map(|g| g.inventory.uuid.as_str()),
                        metric: s.metric.name,
                        unit: s.metric.unit,
                        points: s
                            .points
                            .iter()
                            .enumerate()
                            .map(|(i, p)| JsonPoint {
                                ts_ms: p.ts_ms,
                                time_utc: times.get(i).map_or("", String::as_str),
                                avg: p.avg,
                                min: p.min,
                                max: p.max,
                            })
                            .collect(),
                    }
                })
                .collect(),
        };
        serde_json::to_string(&doc).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}")) + "\n"
    }

    /// One sparkline per GPU per metric, at most `max_width` characters wide.
    pub fn chart(&self, max_width: usize) -> String {
        let mut out = String::new();
        for s in self.series {
            let avgs: Vec<Option<f64>> = s.points.iter().map(|p| p.avg).collect();
            let lo = s
                .points
                .iter()
                .filter_map(|p| p.min.or(p.avg))
                .reduce(f64::min);
            let hi = s
                .points
                .iter()
                .filter_map(|p| p.max.or(p.avg))
                .reduce(f64::max);
            let label = format!(
                "GPU {} {} {}",
                self.gpu_label(s.gpu_id),
                s.metric.name,
                s.metric.unit
            );
            out.push_str(&format!(
                "{label:<24} {:>9} {} {}\n",
                num(lo),
                sparkline(&shrink(&avgs, max_width), lo, hi),
                num(hi)
            ));
        }
        out.push_str(&self.footer());
        out
    }
}

/// Averages neighbouring values so that at most `width` remain (None only where all were).
pub fn shrink(values: &[Option<f64>], width: usize) -> Vec<Option<f64>> {
    if values.len() <= width || width == 0 {
        return values.to_vec();
    }
    (0..width)
        .map(|i| {
            let a = i * values.len() / width;
            let b = ((i + 1) * values.len() / width).max(a + 1);
            let known: Vec<f64> = values[a..b].iter().flatten().copied().collect();
            (!known.is_empty()).then(|| known.iter().sum::<f64>() / known.len() as f64)
        })
        .collect()
}

/// `▁▂▃▄▅▆▇█` scaled between `lo` and `hi` (default: the known values' min and max);
/// unknown values are spaces.
pub fn sparkline(values: &[Option<f64>], lo: Option<f64>, hi: Option<f64>) -> String {
    const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let known = values.iter().flatten();
    let lo = lo.or_else(|| known.clone().copied().reduce(f64::min));
    let hi = hi.or_else(|| known.copied().reduce(f64::max));
    values
        .iter()
        .map(|v| match (v, lo, hi) {
            (Some(v), Some(lo), Some(hi)) if hi > lo => {
                BARS[(((v - lo) / (hi - lo)) * 7.0).round().clamp(0.0, 7.0) as usize]
            }
            (Some(_), _, _) => BARS[3],
            (None, _, _) => ' ',
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparklines_keep_gaps_and_scale() {
        assert_eq!(sparkline(&[Some(0.0), None, Some(7.0)], None, None), "▁ █");
        assert_eq!(sparkline(&[Some(5.0), Some(5.0)], None, None), "▄▄");
        assert_eq!(sparkline(&[Some(7.0)], Some(0.0), Some(14.0)), "▅");
        assert_eq!(
            shrink(&[Some(1.0), Some(3.0), None, None], 2),
            [Some(2.0), None]
        );
    }
}
