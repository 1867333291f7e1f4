//! Remote write: pushes the series of `/metrics` to each `[[remote_write]]` target
//! (Prometheus remote-write 1.0: protobuf + snappy over HTTP), for fleets that do not scrape.
//!
//! The `gpuwatch-remote-write` thread takes a snapshot of the series every target's
//! `interval` (the same [`Scraper::collect`] a scrape runs, stamped with the snapshot's
//! time), queues it in the database ([`crate::store::remote_write`]) and sends each target's
//! queue oldest first.
//!
//! Invariants: nothing is lost to an outage or a restart up to `max_queue` (the oldest go
//! first when it is full, counted); one request in flight per target and the head blocks
//! the rest, so every series arrives in time order; 2xx deletes the request, 5xx / 408 /
//! 429 / timeouts / refused connections retry it with backoff (`Retry-After` honoured),
//! other 4xx refuse it for good (counted, logged): the receiver will never take it; errors
//! never carry a secret. It never touches NVML, and never blocks the sampling thread.

pub mod proto;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use prost::Message;

use crate::clock::now_ms;
use crate::config::{Config, RemoteWriteConfig};
use crate::http::metrics::SharedScraper;
use crate::http::metrics::expo::{Family, Kind};
use crate::model::TsMs;
use crate::notify::SendError;
use crate::store::remote_write::{Queued, RemoteWriteQueue};
use crate::telemetry::Health;
use crate::training::client::{Credentials, http_client};

/// The longest wait between two attempts of one request.
const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// How long a stopping daemon keeps sending what is queued.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// The WriteRequest of one snapshot: every sample at `ts_ms`, `external` labels added
/// (a series' own label of the same name wins), labels sorted; and its sample count.
pub fn write_request(
    families: &[Family],
    external: &[(String, String)],
    ts_ms: TsMs,
) -> (proto::WriteRequest, usize) {
    let mut req = proto::WriteRequest::default();
    for f in families.iter().filter(|f| !f.samples.is_empty()) {
        let base = f.text_name();
        req.metadata.push(proto::MetricMetadata {
            r#type: match f.kind {
                Kind::Gauge => proto::MetricType::Gauge,
                Kind::Counter { .. } => proto::MetricType::Counter,
                Kind::Histogram => proto::MetricType::Histogram,
            } as i32,
            metric_family_name: base.to_string(),
            help: f.help.to_string(),
            unit: f.unit.unwrap_or_default().to_string(),
        });
        for s in &f.samples {
            let mut labels: Vec<proto::Label> =
                Vec::with_capacity(s.labels.len() + external.len() + 1);
            labels.push(proto::Label {
                name: "__name__".into(),
                value: format!("{base}{}", s.suffix),
            });
            let own: BTreeSet<&str> = s.labels.iter().map(|(k, _)| k.as_ref()).collect();
            labels.extend(s.labels.iter().map(|(k, v)| proto::Label {
                name: k.to_string(),
                value: v.clone(),
            }));
            labels.extend(
                external
                    .iter()
                    .filter(|(k, _)| !own.contains(k.as_str()))
                    .map(|(k, v)| proto::Label {
                        name: k.clone(),
                        value: v.clone(),
                    }),
            );
            labels.sort_by(|a, b| a.name.cmp(&b.name));
            req.timeseries.push(proto::TimeSeries {
                labels,
                samples: vec![proto::Sample {
                    value: s.value,
                    timestamp: ts_ms,
                }],
            });
        }
    }
    let n = req.timeseries.len();
    (req, n)
}

/// The request body: protobuf, snappy block format (what remote write 1.0 specifies).
pub fn encode(req: &proto::WriteRequest) -> Vec<u8> {
    let raw = req.encode_to_vec();
    // Only an input over snappy's 4 GiB limit fails; a snapshot is kilobytes.
    snap::raw::Encoder::new()
        .compress_vec(&raw)
        .unwrap_or_default()
}

struct Target {
    cfg: RemoteWriteConfig,
    client: reqwest::Client,
    creds: Credentials,
    next_snapshot: TsMs,
}

pub struct Parts {
    pub config: Arc<Config>,
    pub health: Arc<Health>,
    pub stop: Arc<AtomicBool>,
    /// Rung to stop (and wake) the thread.
    pub bell: Arc<tokio::sync::Notify>,
    /// The daemon's one scraper (its connection is shared with `/metrics` and the API).
    pub scraper: SharedScraper,
}

/// Starts the thread when targets are configured. A target whose client cannot be built
/// (unreadable CA file, missing env secret) is reported and left out.
pub fn spawn(parts: Parts) -> std::io::Result<Option<JoinHandle<()>>> {
    if parts.config.remote_write.is_empty() {
        return Ok(None);
    }
    let mut targets = Vec::new();
    for t in &parts.config.remote_write {
        let made = Credentials::new(&t.auth).and_then(|creds| {
            let client = http_client(t.timeout, t.ca_file.as_deref(), false, &t.url)?;
            Ok((client, creds))
        });
        match made {
            Ok((client, creds)) => targets.push(Target {
                cfg: t.clone(),
                client,
                creds,
                next_snapshot: 0,
            }),
            Err(e) => {
                tracing::error!(target = %t.name, error = %e, "remote write to this target is off")
            }
        }
    }
    if targets.is_empty() {
        return Ok(None);
    }
    crate::clock::spawn_runtime_thread("gpuwatch-remote-write", "remote write", move || {
        run(parts, targets)
    })
    .map(Some)
}

async fn run(parts: Parts, mut targets: Vec<Target>) {
    let mut queue = match RemoteWriteQueue::open(&parts.config.database) {
        Ok(q) => q,
        Err(e) => {
            tracing::error!(error = %e, "remote write disabled: cannot open the queue");
            return;
        }
    };
    for t in &targets {
        tracing::info!(target = %t.cfg.name, url = %t.cfg.url, interval = ?t.cfg.interval, "remote write");
    }
    let mut stopping_since: Option<std::time::Instant> = None;
    loop {
        let stop = parts.stop.load(Ordering::Relaxed);
        if stop && stopping_since.is_none() {
            stopping_since = Some(std::time::Instant::now());
        }
        let now = now_ms();
        if !stop {
            snapshot(&parts, &mut queue, &mut targets, now);
        }
        let mut next_due: Option<TsMs> = None;
        for t in &targets {
            if let Some(due) = deliver(&mut queue, t, stopping_since).await {
                next_due = Some(next_due.map_or(due, |d: TsMs| d.min(due)));
            }
        }
        if let Some(since) = stopping_since
            && (next_due.is_none() || since.elapsed() >= STOP_GRACE)
        {
            return;
        }
        let next_snapshot = targets
            .iter()
            .map(|t| t.next_snapshot)
            .min()
            .unwrap_or(now + 1000);
        let wake = next_due.map_or(next_snapshot, |d| d.min(next_snapshot));
        let wait = Duration::from_millis((wake - now_ms()).clamp(10, 60_000) as u64);
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = parts.bell.notified() => {}
        }
    }
}

/// Queues a snapshot for every target whose interval has come.
fn snapshot(parts: &Parts, queue: &mut RemoteWriteQueue, targets: &mut [Target], now: TsMs) {
    if !targets.iter().any(|t| now >= t.next_snapshot) {
        return;
    }
    // The shared scraper is held for the read only, not for the encoding and queueing.
    let collected = parts
        .scraper
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .collect(&parts.config, &parts.health, now);
    let families = match collected {
        Ok(f) => f,
        Err(e) => {
            tracing::warn!(error = %e, "remote write: cannot read the database for a snapshot");
            return;
        }
    };
    for t in targets.iter_mut().filter(|t| now >= t.next_snapshot) {
        let every = t.cfg.interval.as_millis() as i64;
        // On the interval's grid: snapshots of several daemons line up, and a late wake-up
        // does not shift the ones after it.
        t.next_snapshot = (now / every + 1) * every;
        let (req, samples) = write_request(&families, &t.cfg.labels, now);
        let body = encode(&req);
        match queue.push(
            &t.cfg.name,
            now,
            samples as i64,
            &body,
            t.cfg.max_queue_bytes,
        ) {
            Ok((0, _)) => {}
            Ok((requests, samples)) => tracing::warn!(
                target = %t.cfg.name, requests, samples,
                "remote write queue full (max_queue): dropped the oldest requests"
            ),
            Err(e) => {
                tracing::error!(target = %t.cfg.name, error = %e, "remote write: cannot queue a snapshot")
            }
        }
    }
}

/// Sends the target's due requests, oldest first, until one fails or none is due. Returns
/// when the head is due next (`None`: the queue is empty).
async fn deliver(
    queue: &mut RemoteWriteQueue,
    t: &Target,
    stopping: Option<std::time::Instant>,
) -> Option<TsMs> {
    loop {
        let head = match queue.head(&t.cfg.name) {
            Ok(h) => h?,
            Err(e) => {
                tracing::error!(target = %t.cfg.name, error = %e, "remote write: cannot read the queue");
                return Some(now_ms() + 5000);
            }
        };
        let now = now_ms();
        if head.next_attempt_ms > now && stopping.is_none() {
            return Some(head.next_attempt_ms);
        }
        if stopping.is_some_and(|s| s.elapsed() >= STOP_GRACE) {
            return Some(now);
        }
        let result = send(t, &head).await;
        let now = now_ms();
        let saved = match result {
            Ok(()) => queue.sent(&t.cfg.name, &head, now),
            Err(SendError::Permanent(msg)) => {
                tracing::error!(target = %t.cfg.name, samples = head.samples, error = %msg, "remote write refused a request; it is dropped (not retried)");
                queue.refused(&t.cfg.name, &head, now, &msg)
            }
            Err(SendError::Transient {
                message,
                retry_after,
            }) => {
                let backoff =
                    Duration::from_secs(1u64 << head.attempts.clamp(0, 6)).min(MAX_BACKOFF);
                let wait = retry_after.map_or(backoff, |r| r.min(MAX_BACKOFF * 5));
                if head.attempts == 0 {
                    tracing::warn!(target = %t.cfg.name, error = %message, retry_in = ?wait, "remote write failed; retrying (nothing is dropped)");
                }
                let next = now + wait.as_millis() as i64;
                if let Err(e) = queue.retry_at(&t.cfg.name, &head, now, next, &message) {
                    tracing::error!(target = %t.cfg.name, error = %e, "remote write: cannot save a retry");
                }
                if stopping.is_some() {
                    return None;
                }
                return Some(next);
            }
        };
        if let Err(e) = saved {
            tracing::error!(target = %t.cfg.name, error = %e, "remote write: cannot update the queue");
            return Some(now + 5000);
        }
    }
}

async fn send(t: &Target, q: &Queued) -> Result<(), SendError> {
    let what = format!("remote write {:?}", t.cfg.name);
    let req = t
        .client
        .post(&t.cfg.url)
        .header(reqwest::header::CONTENT_TYPE, "application/x-protobuf")
        .header(reqwest::header::CONTENT_ENCODING, "snappy")
        .header("X-Prometheus-Remote-Write-Version", "0.1.0")
        .body(q.payload.clone());
    let (req, secrets) = t
        .creds
        .apply(req)
        .map_err(|e| SendError::transient(format!("{what}: {e}")))?;
    let scrub = |m: String| {
        secrets
            .iter()
            .filter(|s| !s.expose().is_empty())
            .fold(m, |m, s| m.replace(s.expose(), "***"))
    };
    let reply = crate::notify::http::send(&what, req)
        .await
        .map_err(|e| e.map_message(scrub))?;
    crate::notify::http::classify(&what, &reply).map_err(|e| e.map_message(scrub))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::metrics::expo::Family;

    #[test]
    fn a_snapshot_is_a_sorted_snappy_write_request() {
        let mut g = Family::new(
            "DCGM_FI_DEV_GPU_TEMP",
            Kind::Gauge,
            "GPU temperature (in C).",
        );
        g.push(
            vec![("gpu".into(), "0".into()), ("UUID".into(), "GPU-1".into())],
            41.0,
        );
        let mut c = Family::new("gpuwatch_ticks", Kind::Counter { total: true }, "Ticks.");
        c.push(vec![("instance".into(), "mine".into())], 7.0);
        let ext = vec![
            ("instance".into(), "node-1".into()),
            ("job".into(), "gpuwatch".into()),
        ];
        let (req, n) = write_request(&[g, c], &ext, 1234);
        assert_eq!(n, 2);
        let names: Vec<Vec<(&str, &str)>> = req
            .timeseries
            .iter()
            .map(|t| {
                t.labels
                    .iter()
                    .map(|l| (l.name.as_str(), l.value.as_str()))
                    .collect()
            })
            .collect();
        assert_eq!(
            names[0],
            [
                ("UUID", "GPU-1"),
                ("__name__", "DCGM_FI_DEV_GPU_TEMP"),
                ("gpu", "0"),
                ("instance", "node-1"),
                ("job", "gpuwatch")
            ]
        );
        assert_eq!(
            names[1],
            [
                ("__name__", "gpuwatch_ticks_total"),
                ("instance", "mine"),
                ("job", "gpuwatch")
            ]
        );
        assert_eq!(
            req.timeseries[1].samples,
            [proto::Sample {
                value: 7.0,
                timestamp: 1234
            }]
        );
        let body = encode(&req);
        let raw = snap::raw::Decoder::new().decompress_vec(&body).unwrap();
        assert_eq!(proto::WriteRequest::decode(raw.as_slice()).unwrap(), req);
    }
}
