//! From parsed TOML to a validated [`Scenario`]: defaults, unit conversion, cross-references
//! (GPU indices, PIDs, symbols) and every semantic problem collected with its place.
//!
//! The `[scenario]` header and the cross-entry checks live here; GPUs are compiled by `gpu`,
//! processes, faults and training jobs by `entries`.
//!
//! Invariants: a `Scenario` only exists if no problem was found; all times are converted to
//! ticks while compiling (`ms / tick_ms`, rounded down), so the engine never sees a duration.

use std::time::Duration;

use toml::Spanned;

use crate::Scenario;
use crate::behaviour::noise_key;
use crate::entries::Ctx;
use crate::error::{Problems, ScenarioError, from_toml};
use crate::gpu::{GpuModel, compile_spec, compile_timeline};
use crate::spec::{RawFile, RawScenario};
use crate::training::TrainingJob;
use crate::types::{PodSpec, ProcessSpec, XidEvent};

/// Most GPUs a scenario may describe (the fake library has this many handle slots).
pub const MAX_GPUS: usize = 64;
/// The most times one `[[event]]` may repeat its XID (`repeat`).
pub const MAX_EVENT_REPEAT: i64 = 1_000_000;

/// Faults as the engine checks them.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Fault {
    pub gpus: Option<Vec<usize>>,
    /// Base symbol name; `None` is `*`.
    pub symbol: Option<String>,
    pub from: u64,
    pub until: Option<u64>,
    pub action: FaultAction,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum FaultAction {
    Error(u32),
    Block(Duration),
    Forever,
}

/// `"; did you mean `x`?"` when a candidate is within a small edit distance.
pub(crate) fn did_you_mean<'a>(word: &str, candidates: impl Iterator<Item = &'a str>) -> String {
    fn distance(a: &str, b: &str) -> usize {
        let b: Vec<char> = b.to_lowercase().chars().collect();
        let mut prev: Vec<usize> = (0..=b.len()).collect();
        for (i, ca) in a.to_lowercase().chars().enumerate() {
            let mut cur = vec![i + 1];
            for (j, cb) in b.iter().enumerate() {
                cur.push(
                    (prev[j] + usize::from(ca != *cb))
                        .min(prev[j + 1] + 1)
                        .min(cur[j] + 1),
                );
            }
            prev = cur;
        }
        prev[b.len()]
    }
    let lower = word.to_lowercase();
    candidates
        .map(|c| {
            let prefix = !lower.is_empty() && c.to_lowercase().starts_with(&lower);
            (if prefix { 0 } else { distance(word, c) }, c)
        })
        .filter(|(d, c)| *d <= 3.max(c.len() / 4))
        .min_by_key(|(d, _)| *d)
        .map_or(String::new(), |(_, c)| format!(" (did you mean `{c}`?)"))
}

pub(crate) fn parse(text: &str, origin: &str) -> Result<Scenario, ScenarioError> {
    let raw: RawFile = toml::from_str(text).map_err(|e| from_toml(origin, text, &e))?;
    let mut p = Problems::new(origin, text);
    let header = raw.scenario.as_ref().map(|s| s.get_ref());
    let default_header = RawScenario::default();
    let h = header.unwrap_or(&default_header);

    let tick_ms = match &h.tick_ms {
        Some(t) if *t.get_ref() == 0 => {
            p.at(Some(t.span()), "tick_ms must be >= 1");
            1000
        }
        Some(t) => *t.get_ref(),
        None => 1000,
    };
    let speed = match &h.speed {
        Some(s) if !(s.get_ref().is_finite() && *s.get_ref() > 0.0) => {
            p.at(
                Some(s.span()),
                "speed must be a number > 0 (simulated seconds per wall second)",
            );
            1.0
        }
        Some(s) => *s.get_ref(),
        None => 1.0,
    };
    let process_struct_size = match &h.process_struct_size {
        Some(s) if ![24, 32].contains(s.get_ref()) => {
            p.at(Some(s.span()), "process_struct_size must be 24 or 32");
            24
        }
        Some(s) => *s.get_ref(),
        None => 24,
    };
    let duration_ms = h.duration.as_ref().map_or(3_600_000, |d| d.get_ref().0);
    if duration_ms < tick_ms {
        p.at(
            h.duration.as_ref().map(|d| d.span()),
            "duration must be at least one tick",
        );
    }
    let version = |v: &Option<Spanned<String>>, default: &str, p: &mut Problems| match v {
        Some(s) if s.get_ref().is_empty() || s.get_ref().len() >= 80 => {
            p.at(Some(s.span()), "versions must be 1..79 characters");
            default.to_string()
        }
        Some(s) => s.get_ref().clone(),
        None => default.to_string(),
    };
    let driver_version = version(&h.driver_version, "550.90.07", &mut p);
    let nvml_version = version(&h.nvml_version, "12.550.90.07", &mut p);
    let seed = h.seed.unwrap_or(1);

    if raw.gpu.len() > MAX_GPUS {
        p.at(
            Some(raw.gpu[MAX_GPUS].span()),
            format!("at most {MAX_GPUS} GPUs are supported"),
        );
    }
    let mut gpus: Vec<GpuModel> = Vec::new();
    for (i, g) in raw.gpu.iter().enumerate().take(MAX_GPUS) {
        if let Some((spec, params, pre)) = compile_spec(&mut p, g, i, seed, tick_ms) {
            gpus.push(compile_timeline(
                &mut p,
                g.get_ref(),
                spec,
                params,
                pre,
                seed,
                tick_ms,
            ));
        }
    }
    let gpu_count = raw.gpu.len().min(MAX_GPUS);
    for (i, a) in gpus.iter().enumerate() {
        for b in &gpus[..i] {
            if a.spec.uuid == b.spec.uuid || a.spec.pci_bus_id == b.spec.pci_bus_id {
                p.at(
                    Some(raw.gpu[a.spec.index].span()),
                    format!(
                        "GPU {} has the same uuid or pci_bus_id as GPU {}",
                        a.spec.index, b.spec.index
                    ),
                );
            }
        }
    }

    let ctx = Ctx {
        gpu_count,
        tick_ms,
        seed,
    };
    let mut processes = Vec::new();
    for (i, rp) in raw.process.iter().enumerate() {
        if let Some((spec, mem)) = ctx.process(&mut p, rp, i) {
            if let Some(prev) = processes
                .iter()
                .position(|q: &ProcessSpec| q.pid == spec.pid)
            {
                p.at(
                    Some(rp.get_ref().pid.span()),
                    format!("pid {} is already used by process #{}", spec.pid, prev + 1),
                );
            }
            if let Some(gi) = spec.mig {
                let span = rp.get_ref().mig.as_ref().map(|m| m.span());
                match spec.gpus.as_slice() {
                    [g] if gpus.iter().any(|m| {
                        m.spec.index == *g && m.mig.iter().any(|i| i.spec.gi_id == gi)
                    }) => {}
                    [g] => p.at(
                        span,
                        format!("GPU {g} has no MIG instance with GPU instance id {gi}"),
                    ),
                    _ => p.at(
                        span,
                        "a process on a MIG instance runs on one GPU: `gpu = N`",
                    ),
                }
            }
            for &g in &spec.gpus {
                if let Some(model) = gpus.iter_mut().find(|m| m.spec.index == g) {
                    let key = noise_key(&[seed, 0x9C0C, i as u64, g as u64]);
                    model.procs.push((
                        processes.len(),
                        crate::behaviour::Signal {
                            noise_key: key,
                            ..mem
                        },
                    ));
                }
            }
            processes.push(spec);
        }
    }
    let faults = raw
        .fault
        .iter()
        .filter_map(|f| ctx.fault(&mut p, f))
        .collect();
    let mut events: Vec<XidEvent> = Vec::new();
    for e in &raw.event {
        let e = e.get_ref();
        let gpu = ctx.gpu_index(&mut p, *e.gpu.get_ref(), e.gpu.span());
        if *e.xid.get_ref() <= 0 {
            p.at(
                Some(e.xid.span()),
                "xid must be a positive number (e.g. 13, 48, 79)",
            );
        }
        let repeat = e.repeat.as_ref().map_or(1, |r| *r.get_ref());
        let every = e.every.as_ref().map_or(0, |d| d.get_ref().0);
        if !(1..=MAX_EVENT_REPEAT).contains(&repeat) {
            p.at(
                e.repeat.as_ref().map(Spanned::span),
                "repeat must be between 1 and 1000000 (how many times the XID happens)",
            );
        } else if repeat > 1 && every == 0 {
            p.at(
                Some(e.xid.span()),
                "a repeated event needs `every` (e.g. every = \"50ms\"), the time between two",
            );
        }
        if let Some(gpu) = gpu
            && (1..=MAX_EVENT_REPEAT).contains(&repeat)
        {
            let at = e.at.get_ref().0;
            events.extend((0..repeat as u64).map(|k| XidEvent {
                gpu,
                tick: (at + k * every) / tick_ms,
                xid: *e.xid.get_ref() as u64,
            }));
        }
    }
    events.sort_by_key(|e| e.tick);
    let mut training = Vec::new();
    for (i, t) in raw.training.iter().enumerate() {
        if let Some(job) = ctx.training(&mut p, t, i) {
            if training
                .iter()
                .any(|j: &TrainingJob| j.spec.job == job.spec.job)
            {
                p.at(
                    Some(t.get_ref().job.span()),
                    format!("job `{}` is defined twice", job.spec.job),
                );
            }
            training.push(job);
        }
    }
    let mut pods = Vec::new();
    for rp in &raw.pod {
        let r = rp.get_ref();
        match ctx.gpu_list(&mut p, &r.gpu, &r.gpus, rp.span()) {
            Ok(Some(gpus)) => pods.push(PodSpec {
                name: r.name.clone(),
                namespace: r.namespace.clone().unwrap_or_else(|| "default".into()),
                container: r.container.clone().unwrap_or_else(|| "main".into()),
                gpus,
            }),
            Ok(None) => p.at(
                Some(rp.span()),
                "a pod needs `gpu` or `gpus`: the GPUs allocated to it",
            ),
            Err(()) => {}
        }
    }
    p.into_result()?;
    let name = h.name.clone().unwrap_or_else(|| {
        let stem = std::path::Path::new(origin).file_stem();
        stem.map_or("scenario".into(), |s| s.to_string_lossy().into_owned())
    });
    Ok(Scenario {
        name,
        tick_ms,
        duration_ticks: (duration_ms / tick_ms).max(1),
        speed,
        seed,
        driver_version,
        nvml_version,
        cuda_driver_version: h.cuda_driver_version.unwrap_or(12040),
        process_struct_size,
        init_error: h.init_error.as_ref().map(|c| c.0),
        init_block: h.init_block.as_ref().map(|b| match b.get_ref() {
            crate::values::BlockSpec::For(d) => Duration::from_millis(d.0),
            crate::values::BlockSpec::Forever => Duration::MAX,
        }),
        privileged: h.privileged,
        gpus,
        processes,
        faults,
        events,
        training,
        pods,
    })
}
