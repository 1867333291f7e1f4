//! `gpuwatch job timeline`: a multi-node job's stall, GPU by GPU across its nodes, from the
//! fleet's Prometheus (the series every node exports, `crate::fleet`): when each GPU entered
//! the stall, how, when its step last advanced, on which host — and which GPU stopped first.
//!
//! Invariants: the order is by the nodes' own stall timestamps; two first stalls on
//! different hosts closer than [`CLOCK_MARGIN_MS`] (the nodes' clock uncertainty), or on one
//! host closer than its sampling ([`SAME_HOST_MARGIN_MS`]), name no first GPU ("undetermined", listing them); no stall
//! data is an error, never an empty "first".

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::config::MetricNames;
use crate::model::TsMs;
use crate::training::{FetchError, Matrix, PromClient};

/// The clock uncertainty between nodes (NTP keeps them within a few milliseconds; the
/// margin also covers a node's sampling interval of 1 s): first stalls on two hosts closer
/// than this are not told apart. The shipped fleet rules use the same margin.
pub const CLOCK_MARGIN_MS: TsMs = 2_000;

/// Stalls on one host closer than this (its 1-s sampling) are not told apart either.
pub const SAME_HOST_MARGIN_MS: TsMs = 1_000;

/// One GPU's stall.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuStall {
    pub host: String,
    pub gpu_index: Option<u32>,
    pub gpu_uuid: Option<String>,
    pub at_ms: TsMs,
    pub signature: String,
    pub last_progress_ms: Option<TsMs>,
}

/// Which GPU stopped first.
#[derive(Debug, Clone, PartialEq)]
pub enum First {
    /// This one (an index into [`Timeline::gpus`]).
    One(usize),
    /// These, too close to tell apart.
    Undetermined(Vec<usize>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Timeline {
    pub job: String,
    /// Earliest stall first.
    pub gpus: Vec<GpuStall>,
    pub first: First,
}

#[derive(Debug, thiserror::Error)]
pub enum TimelineError {
    #[error("fleet data unavailable")]
    Fetch(#[from] FetchError),
    #[error("fleet data unavailable: cannot start the HTTP client's runtime: {0}")]
    Runtime(String),
    #[error(
        "no stall of job {job:?} between {from} and {to}: no node exported gpuwatch_gpu_stall_start_timestamp_seconds for it (a node exports it only while the job's step is stalled on that GPU; check the job's name with gpuwatch_job_info, and --from/--to)"
    )]
    NoStall {
        job: String,
        from: String,
        to: String,
    },
}

/// A PromQL string literal.
fn quoted(v: &str) -> String {
    format!("\"{}\"", v.replace('\\', "\\\\").replace('"', "\\\""))
}

/// Fetches the job's stalls in `[from, to]` and orders them.
pub async fn fetch(
    client: &PromClient,
    job: &str,
    from_ms: TsMs,
    to_ms: TsMs,
    names: MetricNames,
) -> Result<Timeline, TimelineError> {
    let step = ((to_ms - from_ms) / 1000).max(15_000);
    let sel = format!("{{training_job={}}}", quoted(job));
    let stalls = client
        .query_range(
            &format!("gpuwatch_gpu_stall_start_timestamp_seconds{sel}"),
            from_ms,
            to_ms,
            step,
        )
        .await?;
    let progress = client
        .query_range(
            &format!("gpuwatch_training_last_progress_timestamp_seconds{sel}"),
            from_ms,
            to_ms,
            step,
        )
        .await?;
    build(job, &stalls, &progress, names).ok_or_else(|| TimelineError::NoStall {
        job: job.to_string(),
        from: crate::format::rfc3339_ms(from_ms),
        to: crate::format::rfc3339_ms(to_ms),
    })
}

/// A GPU in the answers: (host, gpu index label, UUID label).
type GpuKey = (String, Option<String>, Option<String>);

/// [`fetch`] for a command: the client of `prom` and a one-thread runtime for the call.
pub fn fetch_blocking(
    prom: &crate::config::PrometheusConfig,
    job: &str,
    from_ms: TsMs,
    to_ms: TsMs,
    names: MetricNames,
) -> Result<Timeline, TimelineError> {
    let client = PromClient::new(prom)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| TimelineError::Runtime(e.to_string()))?;
    rt.block_on(fetch(&client, job, from_ms, to_ms, names))
}

/// The timeline from the two series' range answers: per GPU its latest stall in the range,
/// and its last progress as of then. `None` without any stall.
pub fn build(
    job: &str,
    stalls: &Matrix,
    progress: &Matrix,
    names: MetricNames,
) -> Option<Timeline> {
    let (uuid_l, host_l) = match names {
        MetricNames::Dcgm => ("UUID", "Hostname"),
        MetricNames::Gpuwatch => ("uuid", "host"),
    };
    let get = |labels: &[(String, String)], k: &str| {
        labels.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
    };
    let key = |labels: &[(String, String)]| -> GpuKey {
        (
            get(labels, host_l).unwrap_or_default(),
            get(labels, "gpu"),
            get(labels, uuid_l),
        )
    };
    // The latest stall of each GPU (the newest point of any of its signatures).
    let mut latest: BTreeMap<GpuKey, (TsMs, f64, String)> = BTreeMap::new();
    for s in &stalls.series {
        let Some(&(seen, v)) = s.points.last() else {
            continue;
        };
        let sig = get(&s.labels, "signature").unwrap_or_default();
        let e = latest
            .entry(key(&s.labels))
            .or_insert((seen, v, sig.clone()));
        if seen > e.0 {
            *e = (seen, v, sig);
        }
    }
    let mut gpus: Vec<GpuStall> = latest
        .into_iter()
        .map(|((host, gpu, uuid), (seen, v, signature))| {
            let last_progress_ms = progress
                .series
                .iter()
                .filter(|p| key(&p.labels) == (host.clone(), gpu.clone(), uuid.clone()))
                .flat_map(|p| p.points.iter())
                .filter(|(t, _)| *t <= seen)
                .max_by_key(|(t, _)| *t)
                .map(|(_, v)| (v * 1000.0).round() as TsMs);
            GpuStall {
                host,
                gpu_index: gpu.and_then(|g| g.parse().ok()),
                gpu_uuid: uuid,
                at_ms: (v * 1000.0).round() as TsMs,
                signature,
                last_progress_ms,
            }
        })
        .collect();
    gpus.sort_by(|a, b| (a.at_ms, &a.host, a.gpu_index).cmp(&(b.at_ms, &b.host, b.gpu_index)));
    let head = gpus.first()?;
    let tied: Vec<usize> = gpus
        .iter()
        .enumerate()
        .filter(|(_, g)| {
            let d = g.at_ms - head.at_ms;
            if g.host == head.host {
                d < SAME_HOST_MARGIN_MS
            } else {
                d < CLOCK_MARGIN_MS
            }
        })
        .map(|(i, _)| i)
        .collect();
    let first = if tied.len() > 1 {
        First::Undetermined(tied)
    } else {
        First::One(0)
    };
    Some(Timeline {
        job: job.to_string(),
        gpus,
        first,
    })
}

fn gpu_json(g: &GpuStall) -> serde_json::Map<String, Value> {
    let mut o = serde_json::Map::new();
    o.insert("host".into(), json!(g.host));
    o.insert("gpu_index".into(), json!(g.gpu_index));
    o.insert("gpu_uuid".into(), json!(g.gpu_uuid));
    o.insert("at".into(), json!(crate::format::rfc3339_ms(g.at_ms)));
    o.insert("at_ms".into(), json!(g.at_ms));
    o.insert("signature".into(), json!(g.signature));
    o
}

/// Where `host` stands in a job's stall.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// Its GPU stopped first.
    First,
    /// One of the GPUs too close to tell apart is its.
    Undetermined,
    /// It stalled after the first GPU, on another host.
    Followed,
    /// None of its GPUs is in the timeline.
    NotStalled,
}

impl Standing {
    pub fn as_str(self) -> &'static str {
        match self {
            Standing::First => "first",
            Standing::Undetermined => "undetermined",
            Standing::Followed => "followed",
            Standing::NotStalled => "not_stalled",
        }
    }
}

impl Timeline {
    /// Where `host` stands: first, among the undetermined first ones, or a follower.
    pub fn standing(&self, host: &str) -> Standing {
        let mine = |i: &usize| self.gpus[*i].host == host;
        match &self.first {
            First::One(i) if mine(i) => Standing::First,
            First::Undetermined(ix) if ix.iter().any(mine) => Standing::Undetermined,
            _ if self.gpus.iter().any(|g| g.host == host) => Standing::Followed,
            _ => Standing::NotStalled,
        }
    }

    /// The hosts with a stalled GPU.
    pub fn hosts(&self) -> usize {
        let hosts: std::collections::BTreeSet<&str> =
            self.gpus.iter().map(|g| g.host.as_str()).collect();
        hosts.len()
    }

    /// One line for `incident`: whether `host` stopped first or followed, and who was first.
    pub fn line_for(&self, host: &str) -> String {
        let who = |g: &GpuStall| {
            format!(
                "{} GPU {} at {}",
                g.host,
                g.gpu_index.map_or("?".to_string(), |i| i.to_string()),
                crate::format::rfc3339_ms(g.at_ms)
            )
        };
        let span = format!(
            "job {} stalled on {} GPU(s) across {} host(s)",
            self.job,
            self.gpus.len(),
            self.hosts()
        );
        match (self.standing(host), &self.first) {
            (Standing::First, First::One(i)) => format!(
                "{span}; this node stopped first: {} ({})",
                who(&self.gpus[*i]),
                self.gpus[*i].signature
            ),
            (_, First::Undetermined(ix)) => {
                let names: Vec<String> = ix.iter().map(|i| who(&self.gpus[*i])).collect();
                format!(
                    "{span}; the first stall is undetermined (within {CLOCK_MARGIN_MS} ms): {}",
                    names.join(", ")
                )
            }
            (Standing::Followed, First::One(i)) => {
                let first = &self.gpus[*i];
                let lag = self
                    .gpus
                    .iter()
                    .filter(|g| g.host == host)
                    .map(|g| g.at_ms - first.at_ms)
                    .min()
                    .unwrap_or(0);
                format!(
                    "{span}; this node followed, {} after the first: {} ({})",
                    crate::format::duration(lag),
                    who(first),
                    first.signature
                )
            }
            (_, First::One(i)) => format!(
                "{span}; none of this node's GPUs is in it; the first: {}",
                who(&self.gpus[*i])
            ),
        }
    }

    /// `training_job`, `first` (null when undetermined; then `undetermined` lists the
    /// candidates), `gpus` in order.
    pub fn json(&self) -> Value {
        let gpus: Vec<Value> = self
            .gpus
            .iter()
            .map(|g| {
                let mut o = gpu_json(g);
                o.insert(
                    "last_progress".into(),
                    json!(g.last_progress_ms.map(crate::format::rfc3339_ms)),
                );
                o.insert("last_progress_ms".into(), json!(g.last_progress_ms));
                Value::Object(o)
            })
            .collect();
        let (first, undetermined) = match &self.first {
            First::One(i) => (Value::Object(gpu_json(&self.gpus[*i])), Value::Null),
            First::Undetermined(ix) => (
                Value::Null,
                Value::Array(
                    ix.iter()
                        .map(|i| Value::Object(gpu_json(&self.gpus[*i])))
                        .collect(),
                ),
            ),
        };
        json!({
            "training_job": self.job,
            "first": first,
            "undetermined": undetermined,
            "clock_margin_ms": CLOCK_MARGIN_MS,
            "gpus": gpus,
        })
    }

    /// For people: the first GPU, then one line per GPU.
    pub fn table(&self) -> String {
        let who = |g: &GpuStall| {
            format!(
                "{} GPU {}",
                g.host,
                g.gpu_index.map_or("?".to_string(), |i| i.to_string())
            )
        };
        let hosts: std::collections::BTreeSet<&str> =
            self.gpus.iter().map(|g| g.host.as_str()).collect();
        let mut out = format!(
            "Job {}: {} stalled GPU(s) on {} host(s)\n",
            self.job,
            self.gpus.len(),
            hosts.len()
        );
        match &self.first {
            First::One(i) => {
                let g = &self.gpus[*i];
                let next = self.gpus.get(1).map(|n| {
                    format!(
                        ", {} before the next",
                        crate::format::duration(n.at_ms - g.at_ms)
                    )
                });
                out.push_str(&format!(
                    "First: {} ({}) at {}, {}{}\n",
                    who(g),
                    g.gpu_uuid.as_deref().unwrap_or("?"),
                    crate::format::rfc3339_ms(g.at_ms),
                    g.signature,
                    next.unwrap_or_default()
                ));
            }
            First::Undetermined(ix) => {
                let names: Vec<String> = ix.iter().map(|i| who(&self.gpus[*i])).collect();
                out.push_str(&format!(
                    "First: undetermined: {} stalled within {} ms of each other (the nodes' clock margin)\n",
                    names.join(", "),
                    CLOCK_MARGIN_MS
                ));
            }
        }
        let mut cells = vec![vec![
            "STALLED AT".to_string(),
            "+S".into(),
            "HOST".into(),
            "GPU".into(),
            "SIGNATURE".into(),
            "LAST PROGRESS".into(),
            "UUID".into(),
        ]];
        let t0 = self.gpus.first().map_or(0, |g| g.at_ms);
        for g in &self.gpus {
            cells.push(vec![
                crate::format::rfc3339_ms(g.at_ms),
                format!("{:.1}", (g.at_ms - t0) as f64 / 1000.0),
                g.host.clone(),
                g.gpu_index.map_or("?".into(), |i| i.to_string()),
                g.signature.clone(),
                g.last_progress_ms
                    .map_or("-".into(), crate::format::rfc3339_ms),
                g.gpu_uuid.clone().unwrap_or_else(|| "-".into()),
            ]);
        }
        out.push_str(&crate::views::alerts::render(&cells));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::training::Series;

    fn series(host: &str, gpu: u32, sig: &str, seen: TsMs, v: f64) -> Series {
        Series {
            labels: vec![
                ("Hostname".into(), host.into()),
                ("UUID".into(), format!("GPU-{host}-{gpu}")),
                ("gpu".into(), gpu.to_string()),
                ("signature".into(), sig.into()),
                ("training_job".into(), "llm".into()),
            ],
            metric_name: None,
            points: vec![(seen - 15_000, v), (seen, v)],
        }
    }

    fn matrix(series: Vec<Series>) -> Matrix {
        Matrix {
            series,
            ..Matrix::default()
        }
    }

    #[test]
    fn the_first_gpu_and_the_followers_in_order() {
        let stalls = matrix(vec![
            series("node-a", 0, "spinning", 200_000, 140.5),
            series("node-b", 2, "idle", 200_000, 100.0),
            series("node-c", 1, "spinning", 200_000, 131.0),
        ]);
        let mut p = series("node-b", 2, "", 200_000, 99.0);
        p.labels.retain(|(k, _)| k != "signature");
        let t = build("llm", &stalls, &matrix(vec![p]), MetricNames::Dcgm).expect("stalls");
        assert_eq!(t.first, First::One(0));
        assert_eq!(t.gpus[0].host, "node-b");
        assert_eq!(t.gpus[0].gpu_index, Some(2));
        assert_eq!(t.gpus[0].last_progress_ms, Some(99_000));
        assert_eq!(
            t.gpus.iter().map(|g| g.host.as_str()).collect::<Vec<_>>(),
            ["node-b", "node-c", "node-a"]
        );
        let j = t.json();
        assert_eq!(j["first"]["host"], "node-b");
        assert_eq!(j["first"]["at_ms"], 100_000);
        assert_eq!(j["first"]["at"], "1970-01-01T00:01:40.000Z");
        assert_eq!(j["first"]["signature"], "idle");
        assert_eq!(j["gpus"][1]["last_progress"], Value::Null);
        assert!(t.table().contains("First: node-b GPU 2"), "{}", t.table());
    }

    #[test]
    fn stalls_closer_than_the_clock_margin_name_no_first() {
        let stalls = matrix(vec![
            series("node-a", 0, "idle", 200_000, 100.0),
            series("node-b", 3, "idle", 200_000, 101.5),
            series("node-c", 1, "spinning", 200_000, 140.0),
        ]);
        let t = build("llm", &stalls, &Matrix::default(), MetricNames::Dcgm).expect("stalls");
        assert_eq!(t.first, First::Undetermined(vec![0, 1]));
        let j = t.json();
        assert_eq!(j["first"], Value::Null);
        assert_eq!(j["undetermined"].as_array().map(Vec::len), Some(2));
        assert!(
            t.table()
                .contains("undetermined: node-a GPU 0, node-b GPU 3")
        );
        // One host's two GPUs within a second: no first either; a second apart: one.
        let same = matrix(vec![
            series("node-a", 0, "idle", 200_000, 100.0),
            series("node-a", 1, "idle", 200_000, 100.0),
        ]);
        let t = build("llm", &same, &Matrix::default(), MetricNames::Dcgm).expect("stalls");
        assert!(matches!(t.first, First::Undetermined(_)));
        let apart = matrix(vec![
            series("node-a", 0, "idle", 200_000, 100.0),
            series("node-a", 1, "idle", 200_000, 101.0),
        ]);
        let t = build("llm", &apart, &Matrix::default(), MetricNames::Dcgm).expect("stalls");
        assert_eq!(t.first, First::One(0));
        assert!(
            build(
                "llm",
                &Matrix::default(),
                &Matrix::default(),
                MetricNames::Dcgm
            )
            .is_none()
        );
    }
}
