//! Training jobs: the `training_step` and `training_loss` series a job would export to
//! Prometheus, so the demo and tests can feed gpuwatch's training-metrics path.
//!
//! Invariants: the step count at a tick is `steps_per_tick * (ticks since start minus ticks
//! inside step-stopping stall windows)`, minus the steps rewound by the restarts that ended by
//! then, computed in O(stalls) — independent of the tick; it never goes below 0. Gap and
//! restart windows report no points. Loss is a function of the whole step number (so it
//! freezes exactly when the steps do, and goes back up after a rewind) with deterministic
//! noise.

use crate::behaviour::{noise_key, unit};
use crate::types::{StallKind, TrainingSpec, TrainingValue};

/// Loss curve: `final + (initial - final) * exp(-step / decay_steps) + noise`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Loss {
    pub initial: f64,
    pub final_: f64,
    pub decay_steps: f64,
    pub noise: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TrainingJob {
    pub spec: TrainingSpec,
    pub steps_per_tick: f64,
    pub loss: Option<Loss>,
    pub key: u64,
    /// Windows without steps (hang, checkpoint, restart) merged into disjoint, sorted
    /// `[from, to)` spans.
    pub merged: Vec<(u64, u64)>,
    /// Windows without points (gap, restart), merged the same way.
    pub silent: Vec<(u64, u64)>,
    /// One entry per restart, sorted by its end: (end tick, steps rewound by all restarts that
    /// ended by then).
    pub rewinds: Vec<(u64, u64)>,
}

/// Sorts `[from, to)` spans and merges the overlapping ones.
fn merge(mut spans: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    spans.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(spans.len());
    for (a, b) in spans {
        match merged.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => merged.push((a, b)),
        }
    }
    merged
}

impl TrainingJob {
    pub fn new(
        spec: TrainingSpec,
        tick_ms: u64,
        loss: Option<Loss>,
        seed: u64,
        index: usize,
    ) -> Self {
        let spans = |keep: fn(StallKind) -> bool| {
            merge(
                spec.stalls
                    .iter()
                    .filter(|s| keep(s.kind))
                    .map(|s| (s.from_tick, s.to_tick))
                    .collect(),
            )
        };
        let merged = spans(StallKind::stops_steps);
        let silent = spans(StallKind::silences_series);
        let mut restarts: Vec<_> = spec
            .stalls
            .iter()
            .filter(|s| s.kind == StallKind::Restart)
            .map(|s| (s.to_tick, s.from_tick, s.rewind))
            .collect();
        restarts.sort_unstable();
        let mut job = TrainingJob {
            steps_per_tick: spec.steps_per_sec * tick_ms as f64 / 1000.0,
            spec,
            loss,
            key: noise_key(&[seed, 0x7EA1, index as u64]),
            merged,
            silent,
            rewinds: Vec::with_capacity(restarts.len()),
        };
        // In end order, every restart that ended before this one started is already listed,
        // so `step_at(from)` is the value the job had when it crashed.
        let mut total = 0u64;
        for (to, from, rewind) in restarts {
            total += rewind.min(job.step_at(from));
            job.rewinds.push((to, total));
        }
        job
    }

    pub fn running_at(&self, tick: u64) -> bool {
        self.spec.start_tick <= tick && self.spec.end_tick.is_none_or(|e| tick < e)
    }

    /// True when the job reports no points at `tick` (a gap or a restart).
    fn silent_at(&self, tick: u64) -> bool {
        self.silent.iter().any(|&(a, b)| a <= tick && tick < b)
    }

    /// The step counter at `tick`: whole steps completed, less the steps rewound by the
    /// restarts that ended by then.
    pub fn step_at(&self, tick: u64) -> u64 {
        let start = self.spec.start_tick;
        if tick <= start {
            return 0;
        }
        let stalled: u64 = self
            .merged
            .iter()
            .map(|&(a, b)| b.min(tick).saturating_sub(a.max(start)))
            .sum();
        let active = tick - start - stalled;
        let done = (active as f64 * self.steps_per_tick).floor() as u64;
        let ended = self.rewinds.partition_point(|&(to, _)| to <= tick);
        let rewound = ended.checked_sub(1).map_or(0, |i| self.rewinds[i].1);
        done.saturating_sub(rewound)
    }

    fn loss_at(&self, step: u64, gpu: Option<usize>) -> Option<f64> {
        let l = self.loss?;
        let curve = l.final_ + (l.initial - l.final_) * (-(step as f64) / l.decay_steps).exp();
        let key = noise_key(&[self.key, gpu.map_or(u64::MAX, |g| g as u64)]);
        let noisy = curve + 2.0 * l.noise * unit(key, step);
        Some(noisy.max(0.0))
    }

    /// The job's samples at `tick`; empty when it is not running or reports nothing then.
    pub fn values_at(&self, tick: u64) -> Vec<TrainingValue> {
        if !self.running_at(tick) || self.silent_at(tick) {
            return Vec::new();
        }
        let step = self.step_at(tick);
        let job = ("job".to_string(), self.spec.job.clone());
        let mut out = Vec::new();
        let mut push = |mut labels: Vec<(String, String)>, gpu: Option<usize>| {
            labels.extend(self.spec.labels.iter().cloned());
            labels.sort();
            out.push(TrainingValue {
                name: "training_step".into(),
                labels: labels.clone(),
                value: step as f64,
            });
            if let Some(loss) = self.loss_at(step, gpu) {
                out.push(TrainingValue {
                    name: "training_loss".into(),
                    labels,
                    value: loss,
                });
            }
        };
        if self.spec.per_gpu {
            for &g in &self.spec.gpus {
                push(
                    vec![("gpu".to_string(), g.to_string()), job.clone()],
                    Some(g),
                );
            }
        } else {
            push(vec![job.clone()], None);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Stall;

    fn job(stalls: Vec<Stall>, per_gpu: bool) -> TrainingJob {
        let spec = TrainingSpec {
            job: "j".into(),
            gpus: vec![0, 1],
            start_tick: 10,
            end_tick: Some(1000),
            steps_per_sec: 2.0,
            per_gpu,
            labels: Vec::new(),
            stalls,
        };
        let loss = Loss {
            initial: 4.0,
            final_: 1.0,
            decay_steps: 100.0,
            noise: 0.0,
        };
        TrainingJob::new(spec, 1000, Some(loss), 7, 0)
    }

    #[test]
    fn steps_stop_during_stalls() {
        let stalls = vec![
            Stall {
                from_tick: 50,
                to_tick: 60,
                kind: StallKind::Checkpoint,
                rewind: 0,
            },
            Stall {
                from_tick: 55,
                to_tick: 70,
                kind: StallKind::Hang,
                rewind: 0,
            },
        ];
        let j = job(stalls, false);
        assert_eq!(j.step_at(10), 0);
        assert_eq!(j.step_at(50), 80);
        assert_eq!(j.step_at(65), 80);
        assert_eq!(j.step_at(70), 80);
        assert_eq!(j.step_at(71), 82);
        // Constant time: a far tick is just arithmetic.
        assert_eq!(j.step_at(1_000_000_000), (1_000_000_000 - 10 - 20) * 2);
    }

    #[test]
    fn series_and_labels() {
        let j = job(vec![], true);
        assert!(j.values_at(5).is_empty());
        assert!(j.values_at(1000).is_empty());
        let v = j.values_at(20);
        assert_eq!(v.len(), 4);
        assert_eq!(v[0].name, "training_step");
        assert_eq!(v[0].value, 20.0);
        assert_eq!(
            v[0].labels,
            vec![("gpu".into(), "0".into()), ("job".into(), "j".into())]
        );
        assert_eq!(v[1].name, "training_loss");
        let expected = 1.0 + 3.0 * (-0.2f64).exp();
        assert!((v[1].value - expected).abs() < 1e-12);
        let mut pod = job(vec![], false);
        pod.spec.labels = vec![
            ("pod".into(), "llm-0".into()),
            ("namespace".into(), "research".into()),
        ];
        let labels: Vec<String> = pod.values_at(20)[0]
            .labels
            .iter()
            .map(|(k, _)| k.clone())
            .collect();
        assert_eq!(labels, ["job", "namespace", "pod"], "sorted by key");
        let single = job(vec![], false).values_at(20);
        assert_eq!(single.len(), 2);
        assert_eq!(single[0].labels, vec![("job".into(), "j".into())]);
    }

    #[test]
    fn gaps_report_nothing_and_restarts_rewind() {
        let stall = |from_tick, to_tick, kind, rewind| Stall {
            from_tick,
            to_tick,
            kind,
            rewind,
        };
        let j = job(
            vec![
                stall(20, 30, StallKind::Gap, 0),
                stall(50, 60, StallKind::Restart, 30),
            ],
            false,
        );
        assert!(j.values_at(25).is_empty());
        assert_eq!(j.step_at(30), 40, "a gap does not stop the steps");
        assert!(!j.values_at(30).is_empty());
        assert_eq!(j.step_at(50), 80);
        assert!(j.values_at(55).is_empty());
        assert_eq!(j.step_at(60), 50, "80 at the crash, 30 rewound");
        assert_eq!(j.step_at(61), 52);
        assert_eq!(j.step_at(1_000_000_000), (1_000_000_000 - 10 - 10) * 2 - 30);
        // A rewind deeper than the steps done stops at 0.
        let deep = job(vec![stall(15, 20, StallKind::Restart, 1000)], false);
        assert_eq!(deep.step_at(15), 10);
        assert_eq!(deep.step_at(20), 0);
        assert_eq!(deep.step_at(25), 10);
    }
}
