//! Validating the entries that refer to GPUs: processes, faults and training jobs, plus the
//! shared pieces (GPU lists, time windows).
//!
//! Invariants: each function records every problem it finds and returns `None` for an entry
//! that cannot be built; GPU indices it returns are always `< gpu_count`.

use std::time::Duration;

use toml::Spanned;

use crate::behaviour::{Signal, noise_key};
use crate::compile::{Fault, FaultAction};
use crate::error::Problems;
use crate::gpu::check_symbol;
use crate::nvml;
use crate::spec::{RawFault, RawProcess, RawTraining};
use crate::timeline::to_signal;
use crate::training::{Loss, TrainingJob};
use crate::types::{ProcessSpec, Stall, StallKind, TrainingSpec};
use crate::values::{BlockSpec, Dur, GpuList, RawBehaviour};

pub(crate) struct Ctx {
    pub gpu_count: usize,
    pub tick_ms: u64,
    pub seed: u64,
}

impl Ctx {
    fn ticks(&self, ms: u64) -> u64 {
        ms / self.tick_ms
    }

    pub(crate) fn gpu_index(
        &self,
        p: &mut Problems,
        g: i64,
        span: std::ops::Range<usize>,
    ) -> Option<usize> {
        match usize::try_from(g) {
            Ok(i) if i < self.gpu_count => Some(i),
            _ => {
                p.at(
                    Some(span),
                    format!(
                        "GPU index {g} does not exist; expected 0..{} ({} [[gpu]] tables)",
                        self.gpu_count.saturating_sub(1),
                        self.gpu_count
                    ),
                );
                None
            }
        }
    }

    /// Resolve `gpu = ...` / `gpus = [...]`; `Ok(None)` when neither is given.
    pub(crate) fn gpu_list(
        &self,
        p: &mut Problems,
        a: &Option<Spanned<GpuList>>,
        b: &Option<Spanned<GpuList>>,
        entry: std::ops::Range<usize>,
    ) -> Result<Option<Vec<usize>>, ()> {
        let given = match (a, b) {
            (Some(_), Some(_)) => {
                p.at(Some(entry), "give `gpu` or `gpus`, not both");
                return Err(());
            }
            (Some(x), None) | (None, Some(x)) => x,
            (None, None) => return Ok(None),
        };
        if given.get_ref().0.is_empty() {
            p.at(Some(given.span()), "the GPU list is empty");
            return Err(());
        }
        let mut out = Vec::new();
        for &g in &given.get_ref().0 {
            let i = self.gpu_index(p, g, given.span()).ok_or(())?;
            if out.contains(&i) {
                p.at(Some(given.span()), format!("GPU {i} is listed twice"));
                return Err(());
            }
            out.push(i);
        }
        Ok(Some(out))
    }

    fn window(
        &self,
        p: &mut Problems,
        from: &Option<Spanned<Dur>>,
        to: &Option<Spanned<Dur>>,
        what: &str,
    ) -> Option<(u64, Option<u64>)> {
        let a = from.as_ref().map_or(0, |d| self.ticks(d.get_ref().0));
        let b = to.as_ref().map(|d| self.ticks(d.get_ref().0));
        match (b, to) {
            (Some(b), Some(span)) if b <= a => {
                p.at(
                    Some(span.span()),
                    format!("`{what}` must be after the start"),
                );
                None
            }
            _ => Some((a, b)),
        }
    }

    pub(crate) fn process(
        &self,
        p: &mut Problems,
        rp: &Spanned<RawProcess>,
        i: usize,
    ) -> Option<(ProcessSpec, Signal)> {
        let r = rp.get_ref();
        let pid = match u32::try_from(*r.pid.get_ref()) {
            Ok(pid) if pid > 0 => Some(pid),
            _ => {
                p.at(Some(r.pid.span()), "pid must be 1..=4294967295");
                None
            }
        };
        let gpus = match self.gpu_list(p, &r.gpu, &r.gpus, rp.span()) {
            Ok(Some(g)) => Some(g),
            Ok(None) => {
                p.at(
                    Some(rp.span()),
                    "a process needs `gpu = N` or `gpus = [..]`",
                );
                None
            }
            Err(()) => None,
        };
        let (start, end) = self.window(p, &r.start, &r.end, "end")?;
        if r.name.is_empty() {
            p.at(Some(rp.span()), "process name must not be empty");
        }
        let (mem, scale) = match (&r.mem_mib, &r.mem_bytes) {
            (Some(_), Some(_)) => {
                p.at(Some(rp.span()), "give mem_mib or mem_bytes, not both");
                return None;
            }
            (Some(m), None) => (m.clone(), 1_048_576.0),
            (None, Some(b)) => (b.clone(), 1.0),
            (None, None) => (
                Spanned::new(0..0, RawBehaviour::constant(1024.0)),
                1_048_576.0,
            ),
        };
        if mem.get_ref().range().0 < 0.0 {
            p.at(Some(mem.span()), "process memory must be >= 0");
        }
        let sig = to_signal(
            mem.get_ref(),
            start,
            end.map(|e| e - start),
            self.tick_ms,
            scale,
            noise_key(&[self.seed, i as u64]),
        )
        .map_err(|e| p.at(Some(mem.span()), e))
        .ok()?;
        let spec = ProcessSpec {
            pid: pid?,
            name: r.name.clone(),
            cmdline: r.cmdline.clone().unwrap_or_else(|| r.name.clone()),
            user: r.user.clone().unwrap_or_else(|| "root".into()),
            gpus: gpus?,
            start_tick: start,
            end_tick: end,
            cgroup: r.cgroup.clone(),
            mig: r.mig.as_ref().map(|m| *m.get_ref()),
        };
        Some((spec, sig))
    }

    pub(crate) fn fault(&self, p: &mut Problems, rf: &Spanned<RawFault>) -> Option<Fault> {
        let f = rf.get_ref();
        let gpus = self.gpu_list(p, &f.gpu, &f.gpus, rf.span()).ok()?;
        let symbol = match &f.symbol {
            Some(s) if !check_symbol(p, s, true) => return None,
            Some(s) if s.get_ref() == "*" => None,
            Some(s) => Some(nvml::base_symbol(s.get_ref()).to_string()),
            None => None,
        };
        let (from, until) = self.window(p, &f.from, &f.until, "until")?;
        let action = match (&f.error, &f.block) {
            (Some(e), None) => FaultAction::Error(e.get_ref().0),
            (None, Some(b)) => match *b.get_ref() {
                BlockSpec::For(d) => FaultAction::Block(Duration::from_millis(d.0)),
                BlockSpec::Forever => FaultAction::Forever,
            },
            _ => {
                p.at(Some(rf.span()), "a fault needs exactly one of `error = \"GPU_IS_LOST\"` (any NVML error name) or `block = \"3s\"` / `block = \"forever\"`");
                return None;
            }
        };
        Some(Fault {
            gpus,
            symbol,
            from,
            until,
            action,
        })
    }

    pub(crate) fn training(
        &self,
        p: &mut Problems,
        rt: &Spanned<RawTraining>,
        i: usize,
    ) -> Option<TrainingJob> {
        let t = rt.get_ref();
        if t.job.get_ref().is_empty() {
            p.at(Some(t.job.span()), "job name must not be empty");
        }
        let gpus = self
            .gpu_list(p, &Some(t.gpus.clone()), &None, rt.span())
            .ok()??;
        let rate = *t.steps_per_sec.get_ref();
        if !(rate.is_finite() && rate >= 0.0) {
            p.at(
                Some(t.steps_per_sec.span()),
                "steps_per_sec must be a number >= 0",
            );
        }
        let (start, end) = self.window(p, &t.start, &t.end, "end")?;
        let mut stalls = Vec::new();
        for s in &t.stall {
            let st = s.get_ref();
            let (from, to) = self.window(p, &Some(st.from.clone()), &Some(st.to.clone()), "to")?;
            let kind = match st.kind.as_ref().map(|k| k.get_ref().as_str()) {
                None | Some("hang") => StallKind::Hang,
                Some("checkpoint" | "pause") => StallKind::Checkpoint,
                Some("gap") => StallKind::Gap,
                Some("restart") => StallKind::Restart,
                Some(other) => {
                    let span = st.kind.as_ref().map(|k| k.span());
                    p.at(
                        span,
                        format!(
                            "stall kind `{other}`: expected \"hang\", \"checkpoint\", \"gap\" or \"restart\""
                        ),
                    );
                    StallKind::Hang
                }
            };
            let rewind = match &st.rewind {
                None => 0,
                Some(r) if kind != StallKind::Restart => {
                    p.at(
                        Some(r.span()),
                        "`rewind` only applies to kind = \"restart\" (steps a restarted job goes back)",
                    );
                    0
                }
                Some(r) => u64::try_from(*r.get_ref()).unwrap_or_else(|_| {
                    p.at(
                        Some(r.span()),
                        "`rewind` must be a whole number of steps >= 0",
                    );
                    0
                }),
            };
            stalls.push(Stall {
                from_tick: from,
                to_tick: to.unwrap_or(from),
                kind,
                rewind,
            });
        }
        let loss = t.loss.as_ref().and_then(|l| {
            let r = l.get_ref();
            let ok = r.initial.is_finite()
                && r.final_.is_finite()
                && r.decay_steps > 0.0
                && r.noise >= 0.0;
            if !ok {
                p.at(
                    Some(l.span()),
                    "loss needs finite `initial` and `final`, `decay_steps` > 0 and `noise` >= 0",
                );
            }
            ok.then_some(Loss {
                initial: r.initial,
                final_: r.final_,
                decay_steps: r.decay_steps,
                noise: r.noise,
            })
        });
        let mut labels = Vec::new();
        if let Some(l) = &t.labels {
            for (k, v) in l.get_ref() {
                let valid = !k.is_empty()
                    && !k.starts_with(|c: char| c.is_ascii_digit())
                    && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
                if !valid || k.starts_with("__") || k == "gpu" || k == "job" {
                    p.at(
                        Some(l.span()),
                        format!(
                            "label `{k}`: a label name is [a-zA-Z_][a-zA-Z0-9_]*, not `__`-prefixed, and not `gpu` or `job` (set by `per_gpu` and `job`)"
                        ),
                    );
                }
                labels.push((k.clone(), v.clone()));
            }
        }
        let spec = TrainingSpec {
            job: t.job.get_ref().clone(),
            gpus,
            start_tick: start,
            end_tick: end,
            steps_per_sec: rate.max(0.0),
            per_gpu: t.per_gpu,
            labels,
            stalls,
        };
        Some(TrainingJob::new(spec, self.tick_ms, loss, self.seed, i))
    }
}
