//! Training jobs: the `training_step` and `training_loss` series a job would export to
//! Prometheus, so the demo and tests can feed gpuwatch's training-metrics path.
//!
//! Invariants: the step count at a tick is `steps_per_tick * (ticks since start minus ticks
//! inside stall windows)`, computed in O(stalls) — independent of the tick; loss is a function of
//! the whole step number (so it freezes exactly when the steps do) with deterministic noise.

use crate::behaviour::{noise_key, unit};
use crate::types::{TrainingSpec, TrainingValue};

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
    /// Stall windows merged into disjoint, sorted `[from, to)` spans.
    pub merged: Vec<(u64, u64)>,
}

impl TrainingJob {
    pub fn new(
        spec: TrainingSpec,
        tick_ms: u64,
        loss: Option<Loss>,
        seed: u64,
        index: usize,
    ) -> Self {
        let mut spans: Vec<(u64, u64)> = spec
            .stalls
            .iter()
            .map(|s| (s.from_tick, s.to_tick))
            .collect();
        spans.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(spans.len());
        for (a, b) in spans {
            match merged.last_mut() {
                Some(last) if a <= last.1 => last.1 = last.1.max(b),
                _ => merged.push((a, b)),
            }
        }
        TrainingJob {
            steps_per_tick: spec.steps_per_sec * tick_ms as f64 / 1000.0,
            spec,
            loss,
            key: noise_key(&[seed, 0x7EA1, index as u64]),
            merged,
        }
    }

    pub fn running_at(&self, tick: u64) -> bool {
        self.spec.start_tick <= tick && self.spec.end_tick.is_none_or(|e| tick < e)
    }

    /// Whole steps completed by `tick`.
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
        (active as f64 * self.steps_per_tick).floor() as u64
    }

    fn loss_at(&self, step: u64, gpu: Option<usize>) -> Option<f64> {
        let l = self.loss?;
        let curve = l.final_ + (l.initial - l.final_) * (-(step as f64) / l.decay_steps).exp();
        let key = noise_key(&[self.key, gpu.map_or(u64::MAX, |g| g as u64)]);
        let noisy = curve + 2.0 * l.noise * unit(key, step);
        Some(noisy.max(0.0))
    }

    /// The job's samples at `tick`; empty when it is not running.
    pub fn values_at(&self, tick: u64) -> Vec<TrainingValue> {
        if !self.running_at(tick) {
            return Vec::new();
        }
        let step = self.step_at(tick);
        let job = ("job".to_string(), self.spec.job.clone());
        let mut out = Vec::new();
        let mut push = |labels: Vec<(String, String)>, gpu: Option<usize>| {
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
    use crate::types::{Stall, StallKind};

    fn job(stalls: Vec<Stall>, per_gpu: bool) -> TrainingJob {
        let spec = TrainingSpec {
            job: "j".into(),
            gpus: vec![0, 1],
            start_tick: 10,
            end_tick: Some(1000),
            steps_per_sec: 2.0,
            per_gpu,
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
            },
            Stall {
                from_tick: 55,
                to_tick: 70,
                kind: StallKind::Hang,
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
        let single = job(vec![], false).values_at(20);
        assert_eq!(single.len(), 2);
        assert_eq!(single[0].labels, vec![("job".into(), "j".into())]);
    }
}
