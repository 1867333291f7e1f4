//! The pieces cases are made of: the seeded context (RNG, parameters, the scenario being
//! written), GPU models, busy training utilisation with short dips, processes with a memory
//! warm-up, training jobs and pause schedules.
//!
//! Invariants: all randomness comes from the case's seeded [`fastrand::Rng`], drawn in a fixed
//! order, so a case is reproducible from its seed; pids are unique within a case; a memory
//! level is always below what the GPU can hold (total − reserved − the driver's baseline).

use fastrand::Rng;
use gpuwatch_sim::presets::{self, Preset};
use serde_json::{Map, Value};

use crate::scenario::{B, Gpu, Process, ScenarioText, Segment, Stall, Training};

/// The sim presets cases draw their GPUs from.
pub const MODELS: [&str; 7] = [
    "H100-SXM-80GB",
    "H200-141GB",
    "A100-SXM4-80GB",
    "A100-SXM4-40GB",
    "L40S",
    "T4",
    "RTX-4090",
];

/// Leak rates of the leak variants, MiB per minute.
pub const LEAK_RATES: [u32; 5] = [150, 30, 60, 500, 1500];

/// The seeded state of one case being built.
pub struct Ctx {
    pub rng: Rng,
    pub quick: bool,
    pub variant: u32,
    pub text: ScenarioText,
    pub params: Map<String, Value>,
    next_pid: u32,
}

impl Ctx {
    pub fn new(name: &str, seed: u64, variant: u32, quick: bool) -> Ctx {
        let mut rng = Rng::with_seed(seed);
        let next_pid = rng.u32(2_000..30_000);
        Ctx {
            text: ScenarioText {
                name: name.to_string(),
                seed: seed % 1_000_000,
                ..ScenarioText::default()
            },
            rng,
            quick,
            variant,
            params: Map::new(),
            next_pid,
        }
    }

    pub fn param(&mut self, key: &str, v: impl Into<Value>) {
        self.params.insert(key.to_string(), v.into());
    }

    /// A whole number in `lo..=hi`.
    pub fn int(&mut self, lo: u64, hi: u64) -> u64 {
        self.rng.u64(lo..=hi)
    }

    /// A number in `[lo, hi)`, rounded to 2 decimals.
    pub fn real(&mut self, lo: f64, hi: f64) -> f64 {
        ((lo + (hi - lo) * self.rng.f64()) * 100.0).round() / 100.0
    }

    /// Seconds in `lo_min..=hi_min` minutes.
    pub fn mins(&mut self, lo_min: u64, hi_min: u64) -> u64 {
        self.int(lo_min * 60, hi_min * 60)
    }

    pub fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        from[self.rng.usize(..from.len())]
    }

    /// Utilisation through a checkpoint: near idle (0.5–2.5 %) with short bursts of kernels
    /// (15–50 % for 30–45 % of a 7–13 s period: the model's shards copied out and
    /// serialised; power follows). This is what tells a job's checkpoint from a stalled host,
    /// which is flat at 0 %. Periods that divide none of the CSV intervals, so sparse
    /// samples land on bursts as often as the bursts last.
    pub fn checkpoint_util(&mut self) -> B {
        let period = self.pick(&[7, 9, 11, 13]);
        let width = ((period as f64 * self.real(0.3, 0.45)).round() as u64).max(2);
        B::Pulse {
            low: self.real(0.5, 2.5),
            high: self.real(15.0, 50.0),
            period,
            width,
            noise: 1.0,
        }
    }

    /// The scenario length: 2–3 h (quick: 90–100 min), at least `min_s`, in whole minutes.
    pub fn set_duration(&mut self, min_s: u64) -> u64 {
        let d = if self.quick {
            self.mins(90, 100)
        } else {
            self.mins(120, 180)
        };
        let d = d.max(min_s).div_ceil(60) * 60;
        self.text.duration = d;
        self.param("duration_s", d);
        d
    }

    /// `n` GPUs of `model`, each with an explicit driver baseline (preset + 0..100 MiB).
    pub fn add_gpus(&mut self, model: &'static str, n: usize) {
        let base = preset(model).baseline_mib;
        for _ in 0..n {
            let baseline = base + self.int(0, 100);
            self.text.gpus.push(Gpu {
                model,
                baseline_mib: Some(baseline),
                lost_at: None,
                timeline: Vec::new(),
            });
        }
        self.param("model", model);
        self.param("gpus", n);
    }

    pub fn preset(&self, gpu: usize) -> &'static Preset {
        preset(self.text.gpus[gpu].model)
    }

    /// MiB a process can hold on `gpu` before the sim caps the memory.
    pub fn room_mib(&self, gpu: usize) -> f64 {
        let p = self.preset(gpu);
        let baseline = self.text.gpus[gpu]
            .baseline_mib
            .unwrap_or(p.baseline_mib + 100);
        (p.memory_total_mib - p.memory_reserved_mib - baseline) as f64
    }

    pub fn segment(&mut self, gpu: usize, seg: Segment) {
        self.text.gpus[gpu].timeline.push(seg);
    }

    /// Busy training utilisation on `gpu` in `[from, to)`: 93–97 % with noise 3–6, and a few
    /// short dips (20–60 s at 30–60 %).
    pub fn busy(&mut self, gpu: usize, from: u64, to: Option<u64>) {
        let level = self.real(93.0, 97.0);
        let noise = self.real(3.0, 6.0);
        self.segment(
            gpu,
            Segment::new(from, to).set("util_gpu", B::noisy(level, noise)),
        );
        let end = to.unwrap_or(self.text.duration);
        if end < from + 600 {
            return;
        }
        let dips = self.int(0, (end - from) / 2400);
        for _ in 0..dips {
            let at = self.int(from + 60, end - 120);
            let len = self.int(20, 60);
            let depth = self.real(30.0, 60.0);
            self.segment(
                gpu,
                Segment::new(at, Some(at + len)).set("util_gpu", B::noisy(depth, 3.0)),
            );
        }
    }

    /// A new pid, unique in the case.
    pub fn pid(&mut self) -> u32 {
        self.next_pid += self.rng.u32(1..40);
        self.next_pid
    }

    /// A training process on `gpu` alive in `[start, end)` whose memory warms up over 1–5
    /// minutes to `plateau` MiB and stays there with small noise; returns its pid.
    pub fn train_process(&mut self, gpu: usize, start: u64, end: Option<u64>, plateau: f64) -> u32 {
        let warmup = self.mins(1, 5);
        let from = (plateau / 4.0).min(2048.0);
        let noise = (plateau * 0.002).max(8.0);
        self.process(gpu, start, end, B::ramp(from, plateau, Some(warmup), noise))
    }

    pub fn process(&mut self, gpu: usize, start: u64, end: Option<u64>, mem_mib: B) -> u32 {
        let pid = self.pid();
        self.text.processes.push(Process {
            pid,
            name: "python",
            gpu,
            start,
            end,
            mem_mib,
        });
        pid
    }

    /// A typical training plateau on `gpu`: 45–85 % of what the GPU can hold.
    pub fn plateau(&mut self, gpu: usize) -> f64 {
        let f = self.real(0.45, 0.85);
        (self.room_mib(gpu) * f).round()
    }

    /// Every GPU busy with its own training process, from 0 to the end.
    pub fn busy_fleet(&mut self) {
        for g in 0..self.text.gpus.len() {
            self.busy(g, 0, None);
            let plateau = self.plateau(g);
            self.train_process(g, 0, None, plateau);
        }
    }

    /// A per-GPU training job on `gpus` at 0.1–2 steps/s, from tick 0.
    pub fn training(&mut self, gpus: Vec<usize>, end: Option<u64>, stalls: Vec<Stall>) {
        self.training_from(gpus, None, end, stalls);
    }

    /// [`Ctx::training`] for a job that starts at `start` (`None`: tick 0); jobs are named
    /// `job-0`, `job-1`, ... in the order they are added.
    pub fn training_from(
        &mut self,
        gpus: Vec<usize>,
        start: Option<u64>,
        end: Option<u64>,
        stalls: Vec<Stall>,
    ) {
        let steps_per_sec = self.real(0.1, 2.0);
        self.param("steps_per_sec", steps_per_sec);
        self.text.training.push(Training {
            job: format!("job-{}", self.text.training.len()),
            gpus,
            start,
            end,
            steps_per_sec,
            stalls,
        });
    }

    /// Periodic pauses: the first at `first_s`, then every `every_min` minutes, all ending
    /// before `until`; returns `(from, to)` windows. One job's pauses of a kind take about as
    /// long each time (the same model written to the same storage): a base length is drawn
    /// from `len_min` minutes and each pause lasts within ±20 % of it.
    pub fn schedule(
        &mut self,
        first_s: u64,
        every_min: (u64, u64),
        len_min: (u64, u64),
        until: u64,
    ) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        let mut at = first_s;
        let base = self.mins(len_min.0, len_min.1) as f64;
        loop {
            let len = (base * self.real(0.8, 1.2)).round() as u64;
            if at + len >= until {
                break;
            }
            out.push((at, at + len));
            at += len + self.mins(every_min.0, every_min.1);
        }
        out
    }
}

/// The preset of a model key from [`MODELS`].
pub fn preset(model: &str) -> &'static Preset {
    // Only keys from MODELS reach here; `presets_exist` checks every one of them.
    presets::find(model).unwrap_or(&presets::PRESETS[0])
}

/// The util-derived power of a preset at `util` % (what the sim computes when no segment sets
/// power).
pub fn power_at(p: &Preset, util: f64) -> f64 {
    p.idle_power_w + (p.load_power_w.min(p.power_limit_w) - p.idle_power_w) * util / 100.0
}

/// The util-derived temperature of a preset at `util` %.
pub fn temp_at(p: &Preset, util: f64) -> f64 {
    p.idle_temp + (p.load_temp - p.idle_temp) * util / 100.0
}

/// Scans the sim from `from` for the first tick where `pred` holds (at most `limit` ticks).
pub fn first_tick(
    s: &gpuwatch_sim::Scenario,
    gpu: usize,
    from: u64,
    limit: u64,
    pred: impl Fn(&gpuwatch_sim::GpuState) -> bool,
) -> Option<u64> {
    (from..from + limit).find(|&t| pred(&s.gpu_state(gpu, t)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_exist() {
        for m in MODELS {
            assert!(presets::find(m).is_some(), "{m}");
        }
    }

    #[test]
    fn schedules_do_not_overlap() {
        let mut c = Ctx::new("t", 1, 0, false);
        let s = c.schedule(1200, (20, 30), (2, 5), 10_000);
        assert!(!s.is_empty());
        for w in s.windows(2) {
            assert!(w[0].1 < w[1].0);
        }
        assert!(s.iter().all(|&(a, b)| a < b && b < 10_000));
    }
}
