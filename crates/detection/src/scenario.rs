//! Scenario text for `gpuwatch-sim`: a small builder that writes the TOML of one case
//! (GPUs with timeline segments, processes, XID events, training jobs with stalls), so the
//! catalogue describes cases in code and the sim stays the one engine that gives them values.
//!
//! Invariants: every time is whole simulated seconds (written as bare numbers, which the sim
//! reads as seconds); every generated scenario has `tick_ms = 1000` and `per_gpu = true`
//! training jobs; the builder writes text only — [`ScenarioText::compile`] is where the sim
//! validates it, and a case whose text does not compile is a bug in the catalogue.

use std::fmt::Write as _;

/// How a metric moves within a segment (the sim's behaviour forms).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum B {
    Value(f64, f64),
    /// `ramp = [from, to]` over `over` seconds (the segment's length when `None`), after
    /// holding `from` for `delay` seconds; with noise.
    Ramp {
        from: f64,
        to: f64,
        over: Option<u64>,
        delay: Option<u64>,
        noise: f64,
    },
    /// `sawtooth = [low, high]` rising over each `period` seconds, after holding `low` for
    /// `delay` seconds; with noise.
    Sawtooth {
        low: f64,
        high: f64,
        period: u64,
        delay: Option<u64>,
        noise: f64,
    },
    /// `pulse = [low, high]`: `high` for `width` seconds at the start of every `period`.
    Pulse {
        low: f64,
        high: f64,
        period: u64,
        width: u64,
        noise: f64,
    },
}

impl B {
    pub fn value(v: f64) -> B {
        B::Value(v, 0.0)
    }

    pub fn noisy(v: f64, noise: f64) -> B {
        B::Value(v, noise)
    }

    pub fn ramp(from: f64, to: f64, over: Option<u64>, noise: f64) -> B {
        B::Ramp {
            from,
            to,
            over,
            delay: None,
            noise,
        }
    }

    fn toml(&self) -> String {
        let mut s = match *self {
            B::Value(v, 0.0) => return num(v),
            B::Value(v, n) => format!("{{ value = {}, noise = {}", num(v), num(n)),
            B::Ramp {
                from,
                to,
                over,
                delay,
                noise,
            } => {
                let mut s = format!("{{ ramp = [{}, {}]", num(from), num(to));
                if let Some(o) = over {
                    let _ = write!(s, ", over = {o}");
                }
                if let Some(d) = delay {
                    let _ = write!(s, ", delay = {d}");
                }
                let _ = write!(s, ", noise = {}", num(noise));
                s
            }
            B::Sawtooth {
                low,
                high,
                period,
                delay,
                noise,
            } => {
                let mut s = format!(
                    "{{ sawtooth = [{}, {}], period = {period}",
                    num(low),
                    num(high)
                );
                if let Some(d) = delay {
                    let _ = write!(s, ", delay = {d}");
                }
                let _ = write!(s, ", noise = {}", num(noise));
                s
            }
            B::Pulse {
                low,
                high,
                period,
                width,
                noise,
            } => format!(
                "{{ pulse = [{}, {}], period = {period}, width = {width}, noise = {}",
                num(low),
                num(high),
                num(noise)
            ),
        };
        s.push_str(" }");
        s
    }
}

/// A number as TOML: at most 3 decimals, always with a point (a float for the sim).
fn num(v: f64) -> String {
    format!("{:?}", (v * 1000.0).round() / 1000.0)
}

/// One `[[gpu.timeline]]` segment: `[from, to)` seconds and the metrics it sets.
#[derive(Debug, Clone, Default)]
pub struct Segment {
    pub from: u64,
    pub to: Option<u64>,
    sets: Vec<(&'static str, String)>,
}

impl Segment {
    pub fn new(from: u64, to: Option<u64>) -> Segment {
        Segment {
            from,
            to,
            sets: Vec::new(),
        }
    }

    /// Sets a metric to a behaviour.
    pub fn set(mut self, metric: &'static str, b: B) -> Segment {
        self.sets.push((metric, b.toml()));
        self
    }

    /// Sets a key to literal TOML (`throttle = ["sw_thermal"]`).
    pub fn raw(mut self, key: &'static str, toml: &str) -> Segment {
        self.sets.push((key, toml.to_string()));
        self
    }
}

#[derive(Debug, Clone)]
pub struct Gpu {
    pub model: &'static str,
    /// Driver memory with no process, MiB (`None`: the sim's seeded preset default).
    pub baseline_mib: Option<u64>,
    pub lost_at: Option<u64>,
    pub timeline: Vec<Segment>,
}

#[derive(Debug, Clone)]
pub struct Process {
    pub pid: u32,
    pub name: &'static str,
    pub gpu: usize,
    pub start: u64,
    pub end: Option<u64>,
    pub mem_mib: B,
}

#[derive(Debug, Clone, Copy)]
pub struct Stall {
    pub from: u64,
    pub to: u64,
    /// `hang`, `checkpoint`, `gap` or `restart`.
    pub kind: &'static str,
    pub rewind: Option<u64>,
}

#[derive(Debug, Clone)]
pub struct Training {
    pub job: String,
    pub gpus: Vec<usize>,
    /// `None`: from tick 0.
    pub start: Option<u64>,
    pub end: Option<u64>,
    pub steps_per_sec: f64,
    pub stalls: Vec<Stall>,
}

/// An XID event (`[[event]]`), or a storm of one XID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XidAt {
    pub gpu: usize,
    /// Seconds from tick 0.
    pub at: u64,
    pub xid: u32,
    /// A storm: (how many times, ms between two).
    pub repeat: Option<(u64, u64)>,
}

impl XidAt {
    pub fn once(gpu: usize, at: u64, xid: u32) -> Self {
        Self {
            gpu,
            at,
            xid,
            repeat: None,
        }
    }
}

/// A whole scenario, written by [`ScenarioText::toml`].
#[derive(Debug, Clone, Default)]
pub struct ScenarioText {
    pub name: String,
    pub seed: u64,
    pub duration: u64,
    pub gpus: Vec<Gpu>,
    pub processes: Vec<Process>,
    pub events: Vec<XidAt>,
    pub training: Vec<Training>,
}

impl ScenarioText {
    pub fn toml(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "[scenario]\nname = {:?}\ntick_ms = 1000\nduration = {}\nseed = {}",
            self.name, self.duration, self.seed
        );
        for g in &self.gpus {
            let _ = writeln!(s, "\n[[gpu]]\nmodel = {:?}", g.model);
            if let Some(b) = g.baseline_mib {
                let _ = writeln!(s, "baseline_mib = {b}");
            }
            if let Some(l) = g.lost_at {
                let _ = writeln!(s, "lost_at = {l}");
            }
            for seg in &g.timeline {
                let _ = writeln!(s, "[[gpu.timeline]]\nfrom = {}", seg.from);
                if let Some(to) = seg.to {
                    let _ = writeln!(s, "to = {to}");
                }
                for (k, v) in &seg.sets {
                    let _ = writeln!(s, "{k} = {v}");
                }
            }
        }
        for p in &self.processes {
            let _ = writeln!(
                s,
                "\n[[process]]\npid = {}\nname = {:?}\ngpu = {}\nstart = {}\nmem_mib = {}",
                p.pid,
                p.name,
                p.gpu,
                p.start,
                p.mem_mib.toml()
            );
            if let Some(e) = p.end {
                let _ = writeln!(s, "end = {e}");
            }
        }
        for e in &self.events {
            let _ = writeln!(
                s,
                "\n[[event]]\ngpu = {}\nat = {}\nxid = {}",
                e.gpu, e.at, e.xid
            );
            if let Some((times, every_ms)) = e.repeat {
                let _ = writeln!(s, "repeat = {times}\nevery = \"{every_ms}ms\"");
            }
        }
        for t in &self.training {
            let gpus: Vec<String> = t.gpus.iter().map(usize::to_string).collect();
            let _ = writeln!(
                s,
                "\n[[training]]\njob = {:?}\ngpus = [{}]\nsteps_per_sec = {}\nper_gpu = true",
                t.job,
                gpus.join(", "),
                num(t.steps_per_sec)
            );
            if let Some(b) = t.start {
                let _ = writeln!(s, "start = {b}");
            }
            if let Some(e) = t.end {
                let _ = writeln!(s, "end = {e}");
            }
            for st in &t.stalls {
                let _ = writeln!(
                    s,
                    "[[training.stall]]\nfrom = {}\nto = {}\nkind = {:?}",
                    st.from, st.to, st.kind
                );
                if let Some(r) = st.rewind {
                    let _ = writeln!(s, "rewind = {r}");
                }
            }
        }
        s
    }

    /// The sim's view of the text.
    pub fn compile(text: &str, name: &str) -> Result<gpuwatch_sim::Scenario, String> {
        gpuwatch_sim::Scenario::from_toml_str(text, name).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_text_compiles_with_every_form() {
        let text = ScenarioText {
            name: "t".into(),
            seed: 3,
            duration: 600,
            gpus: vec![Gpu {
                model: "T4",
                baseline_mib: Some(400),
                lost_at: Some(500),
                timeline: vec![
                    Segment::new(0, None).set("util_gpu", B::noisy(95.0, 4.0)),
                    Segment::new(60, Some(120))
                        .set("temp", B::ramp(60.0, 80.0, None, 0.5))
                        .raw("throttle", "[\"sw_thermal\"]"),
                ],
            }],
            processes: vec![Process {
                pid: 7,
                name: "python",
                gpu: 0,
                start: 0,
                end: Some(400),
                mem_mib: B::Sawtooth {
                    low: 1000.0,
                    high: 2000.0,
                    period: 60,
                    delay: Some(30),
                    noise: 5.0,
                },
            }],
            events: vec![XidAt::once(0, 30, 13)],
            training: vec![Training {
                job: "j".into(),
                gpus: vec![0],
                start: Some(50),
                end: None,
                steps_per_sec: 0.5,
                stalls: vec![Stall {
                    from: 100,
                    to: 200,
                    kind: "restart",
                    rewind: Some(10),
                }],
            }],
        }
        .toml();
        let s = ScenarioText::compile(&text, "t.toml").unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(s.duration_ticks(), 600);
        assert_eq!(s.gpu_state(0, 90).throttle_reasons, 0x20);
        assert_eq!(s.processes_at(0, 10).len(), 1);
        // The sawtooth holds its low until the delay, then rises.
        let mib = |t: u64| s.processes_at(0, t)[0].used_bytes as f64 / 1_048_576.0;
        assert!((mib(20) - 1000.0).abs() <= 5.0 && (mib(60) - 1500.0).abs() <= 5.0);
        assert_eq!(s.training_jobs()[0].start_tick, 50);
        assert_eq!(s.events().len(), 1);
    }
}
