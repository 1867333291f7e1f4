//! The World's XIDs: stored runs fed as events over time, and each judged by the job it hit
//! and the GPU's history (`crate::xid::judge`) into the rule language's `xid`,
//! `xid_critical` and `xid_crash` series.
//!
//! Invariants:
//! - A run (`store::events`: one XID repeated on one GPU) is fed as its events: by the
//!   evaluation time `t`, `1 + (count - 1) × (t - first) / (last - first)` of them (all once
//!   `t` reaches its last), each batch at one point whose value is its number of events. A
//!   run that grows in the store (the live daemon) is read again and fed what it added.
//! - A batch is judged when fed: hardware (critical) at once; otherwise it waits at most
//!   [`CRASH_WINDOW_MS`] for its job's processes to exit — a crash of the job is
//!   application-caused (`xid_crash`), else it is not an alert. `xid` (the code) and
//!   `xid_critical` (0 or the batch's events) are pushed at once either way.
//! - `[[xid.override]]` decides first: `ignore` is never fed; `hardware` with `count` within
//!   `within` is critical from the count-th event of its codes on the GPU within that time.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

use crate::config::OverrideClass;
use crate::model::TsMs;
use crate::rules::ast::Metric;
use crate::store::history::XidRunRow;
use crate::xid::judge::{self, CRASH_WINDOW_MS, Evidence, JobCrash, REPEAT_WINDOW_MS, XidClass};

use super::{Gpu, World, push};

/// A stored run and how much of it was fed.
#[derive(Debug, Clone)]
pub(super) struct RunFeed {
    gpu_id: i64,
    code: i64,
    first: TsMs,
    last: TsMs,
    count: i64,
    fed: i64,
}

/// One XID batch the GPU saw, for repeats and crashes.
#[derive(Debug, Clone)]
struct Seen {
    ts: TsMs,
    code: i64,
    /// The job it hit (`None`: no job is known).
    job: Option<String>,
}

/// A batch waiting for its job's crash (or its deadline).
#[derive(Debug, Clone)]
struct Waiting {
    gpu_id: i64,
    code: i64,
    ts: TsMs,
    n: i64,
    forced: Option<XidClass>,
    /// The GPUs of the job on the host when it hit.
    job_gpus: Vec<i64>,
}

/// The World's XID state.
#[derive(Debug, Default)]
pub(super) struct Xids {
    runs: BTreeMap<i64, RunFeed>,
    /// (GPU, override) → the recent (time, events) of its codes, for `count` within `within`.
    recent: HashMap<(i64, usize), VecDeque<(TsMs, i64)>>,
    seen: HashMap<i64, VecDeque<Seen>>,
    waiting: Vec<Waiting>,
    /// Crashes found: (time, the job's GPUs). A later batch of the same crash joins it.
    crashes: Vec<(TsMs, Vec<i64>)>,
}

impl Xids {
    /// Takes the runs read from the store (new ones, and the same ones grown).
    pub(super) fn read(&mut self, rows: Vec<XidRunRow>) {
        for e in rows {
            let (Some(gpu_id), Some(code)) = (e.gpu_id, e.code) else {
                continue;
            };
            let run = self.runs.entry(e.id).or_insert(RunFeed {
                gpu_id,
                code,
                first: e.ts_ms,
                last: e.last_ms,
                count: e.count,
                fed: 0,
            });
            run.last = run.last.max(e.last_ms);
            run.count = run.count.max(e.count);
        }
    }
}

impl World {
    /// Feeds the XID events due by `upto`, judges them and decides the waiting ones.
    pub(super) fn feed_xids(&mut self, upto: TsMs) {
        let mut batches: Vec<(TsMs, i64, i64, i64)> = Vec::new(); // (ts, gpu, code, n)
        for run in self.xids.runs.values_mut() {
            if run.first > upto {
                continue;
            }
            let due = if upto >= run.last || run.last <= run.first {
                run.count
            } else {
                let span = (run.last - run.first) as f64;
                let done = ((run.count - 1) as f64 * (upto - run.first) as f64 / span).floor();
                1 + done as i64
            };
            if due > run.fed {
                batches.push((upto.min(run.last), run.gpu_id, run.code, due - run.fed));
                run.fed = due;
            }
        }
        // Runs fed completely and closed for good are forgotten.
        let fed_to = upto;
        self.xids.runs.retain(|_, r| {
            r.fed < r.count || fed_to - r.last <= crate::store::events::XID_RUN_GAP_MS
        });
        batches.sort_by_key(|b| (b.0, b.1));
        for (ts, gpu_id, code, n) in batches {
            self.feed_batch(gpu_id, code, ts, n);
        }
        self.decide_waiting(upto);
    }

    fn feed_batch(&mut self, gpu_id: i64, code: i64, ts: TsMs, n: i64) {
        let over = self
            .xid_overrides
            .iter()
            .enumerate()
            .find(|(_, o)| o.codes.contains(&code))
            .map(|(i, o)| (i, o.clone()));
        if over
            .as_ref()
            .is_some_and(|(_, o)| o.class == OverrideClass::Ignore)
        {
            return;
        }
        let Some(g) = self.gpus.get(&gpu_id) else {
            return;
        };
        let job = self.job_key(g);
        let job_gpus = self.job_gpus(g, job.as_deref(), ts);
        let seen = self.xids.seen.entry(gpu_id).or_default();
        while seen.front().is_some_and(|s| ts - s.ts > REPEAT_WINDOW_MS) {
            seen.pop_front();
        }
        let other_jobs: HashSet<&str> = seen
            .iter()
            .filter(|s| s.code == code)
            .filter_map(|s| s.job.as_deref())
            .filter(|j| job.as_deref().is_some_and(|now| judge::other_job(j, now)))
            .collect();
        let forced = over.as_ref().and_then(|(_, o)| o.class.judged());
        let verdict = judge::judge(&Evidence {
            code,
            forced,
            other_jobs: other_jobs.len(),
            crash: None,
        });
        seen.push_back(Seen {
            ts,
            code,
            job: job.clone(),
        });
        let critical = match &over {
            Some((i, o)) if verdict.critical => match o.count_within {
                Some((count, within)) => counted_within(
                    self.xids.recent.entry((gpu_id, *i)).or_default(),
                    (ts, n),
                    count,
                    within.as_millis() as i64,
                ),
                None => true,
            },
            _ => verdict.critical,
        };
        let needs = &self.needs;
        if let Some(g) = self.gpus.get_mut(&gpu_id) {
            push(g, Metric::Xid, ts, code as f64, needs);
            let v = if critical { n as f64 } else { 0.0 };
            push(g, Metric::XidCritical, ts, v, needs);
        }
        if verdict.class != XidClass::Hardware && !job_gpus.is_empty() {
            self.xids.waiting.push(Waiting {
                gpu_id,
                code,
                ts,
                n,
                forced,
                job_gpus,
            });
        }
    }

    /// Judges the batches waiting for their job's crash: a crash once the evidence holds, no
    /// alert once [`CRASH_WINDOW_MS`] passed without it. One crash of a job is one
    /// `xid_crash` point, on the lowest of its GPUs with the XID (one alert per job).
    fn decide_waiting(&mut self, upto: TsMs) {
        self.xids
            .crashes
            .retain(|(t, _)| upto - t <= 2 * CRASH_WINDOW_MS);
        if self.xids.waiting.is_empty() {
            return;
        }
        let waiting = std::mem::take(&mut self.xids.waiting);
        let mut found: Vec<(i64, i64)> = Vec::new();
        for w in waiting {
            let joined =
                self.xids.crashes.iter().any(|(t, gpus)| {
                    (w.ts - t).abs() <= CRASH_WINDOW_MS && gpus.contains(&w.gpu_id)
                });
            if joined {
                continue; // a batch of a crash already told
            }
            let crash = self.crash_of(&w);
            let verdict = judge::judge(&Evidence {
                code: w.code,
                forced: w.forced,
                other_jobs: 0,
                crash: Some(crash),
            });
            if verdict.crash {
                let leader = w
                    .job_gpus
                    .iter()
                    .copied()
                    .filter(|id| self.had_xid_near(*id, w.ts))
                    .min()
                    .unwrap_or(w.gpu_id);
                self.xids.crashes.push((w.ts, w.job_gpus.clone()));
                found.push((leader, w.n));
            } else if upto - w.ts <= CRASH_WINDOW_MS {
                self.xids.waiting.push(w);
            }
        }
        let needs = &self.needs;
        for (gpu_id, n) in found {
            if let Some(g) = self.gpus.get_mut(&gpu_id) {
                push(g, Metric::XidCrash, upto, n as f64, needs);
            }
        }
    }

    /// Whether GPU `id` had an XID that may crash a job within [`CRASH_WINDOW_MS`] of `ts`.
    fn had_xid_near(&self, id: i64, ts: TsMs) -> bool {
        self.xids.seen.get(&id).is_some_and(|s| {
            s.iter()
                .any(|s| (s.ts - ts).abs() <= CRASH_WINDOW_MS && judge::may_crash_a_job(s.code))
        })
    }

    /// The crash evidence of a waiting batch: of its job's GPUs, those with an XID and those
    /// whose processes exited within [`CRASH_WINDOW_MS`] of it (all of them: none runs on).
    fn crash_of(&self, w: &Waiting) -> JobCrash {
        let near = |t: TsMs| (t - w.ts).abs() <= CRASH_WINDOW_MS;
        let with_xid = w
            .job_gpus
            .iter()
            .filter(|id| self.had_xid_near(**id, w.ts))
            .count();
        let exited = w
            .job_gpus
            .iter()
            .filter(|id| {
                self.gpus.get(id).is_some_and(|g| {
                    // A process left near the XID, and none runs on now (a job's helper
                    // process that ends beside a job running on is no crash).
                    let gone = |p: &super::Proc| g.last_ts.is_some_and(|t| t > p.last_seen);
                    g.procs.values().any(|p| near(p.last_seen) && gone(p))
                        && g.procs.values().all(gone)
                })
            })
            .count();
        JobCrash {
            job_gpus: w.job_gpus.len(),
            with_xid,
            exited,
        }
    }

    /// The job GPU `g` works for, to tell one job from another: its training job, else its
    /// pod, else (no identity known) the set of its processes of the last minute
    /// (`judge::job_key_of_pids`; two such sets are two jobs only when they share no process).
    fn job_key(&self, g: &Gpu) -> Option<String> {
        if let Some(j) = self.training_job(g) {
            return Some(format!("job:{}", j.name));
        }
        if let Some(p) = g.pod() {
            return Some(format!("pod:{}/{}", p.namespace, p.pod));
        }
        // The processes running now (the world keeps gone ones a while).
        let now = g.last_ts.unwrap_or(TsMs::MIN);
        let pids: Vec<u32> = g
            .procs
            .values()
            .filter(|p| p.last_seen >= now - CRASH_WINDOW_MS)
            .map(|p| p.pid)
            .collect();
        if pids.is_empty() {
            return None;
        }
        Some(judge::job_key_of_pids(pids.into_iter().map(i64::from)))
    }

    /// The GPUs of the host working for `g`'s job at `ts`: those with the same training job
    /// or pod; without one, the host's GPUs with a process seen in the minute before.
    fn job_gpus(&self, g: &Gpu, job: Option<&str>, ts: TsMs) -> Vec<i64> {
        let busy = |o: &Gpu| {
            o.procs
                .values()
                .any(|p| p.last_seen >= ts - CRASH_WINDOW_MS)
        };
        let named = job.is_some_and(|j| !j.starts_with("pids:"));
        self.gpus
            .values()
            .filter(|o| o.host == g.host)
            .filter(|o| {
                if named {
                    self.job_key(o).as_deref() == job
                } else {
                    busy(o)
                }
            })
            .map(|o| o.gpu_id)
            .collect()
    }
}

/// Adds `(ts, n)` events to `recent` and says whether `count` or more lie within the last
/// `within_ms` (an override's "N times in T").
fn counted_within(
    recent: &mut VecDeque<(TsMs, i64)>,
    (ts, n): (TsMs, i64),
    count: u32,
    within_ms: i64,
) -> bool {
    recent.push_back((ts, n));
    while recent.front().is_some_and(|(t, _)| *t <= ts - within_ms) {
        recent.pop_front();
    }
    recent.iter().map(|(_, n)| n).sum::<i64>() >= i64::from(count)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn n_times_in_t_counts_events_and_forgets_the_old_ones() {
        let min = 60_000;
        let mut r = VecDeque::new();
        let hour = 60 * min;
        assert!(!counted_within(&mut r, (0, 1), 3, hour));
        assert!(!counted_within(&mut r, (30 * min, 1), 3, hour));
        assert!(
            counted_within(&mut r, (59 * min, 1), 3, hour),
            "the third within 1 h"
        );
        // The first fell out of the hour: two left, then a third again.
        assert!(!counted_within(&mut r, (95 * min, 1), 3, hour));
        assert!(counted_within(&mut r, (96 * min, 1), 3, hour));
        // A run's batch counts its events.
        let mut r = VecDeque::new();
        assert!(counted_within(&mut r, (0, 5), 3, hour));
    }
}
