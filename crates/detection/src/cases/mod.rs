//! The catalogue of labelled cases: faults (each with the alerts gpuwatch should raise) and
//! healthy traps (no alert is right), built from seeded parameters into scenario text for the
//! one scenario engine, `gpuwatch-sim`.
//!
//! Invariants:
//! - A case is a pure function of (family, variant, set, seed): the same arguments give the
//!   same text, labels and parameters on every machine.
//! - Every case's text compiles in the sim (a case that does not is a catalogue bug, reported
//!   as [`CatalogueError`]), so renderers and the daemon see the same values.
//! - Labels hold times in simulated seconds from tick 0 and say which shapes can observe them;
//!   a healthy case has no labels.
//! - Nothing here knows how gpuwatch's rules work: labels state what a correct monitor
//!   should say, not what today's rules do.

mod fabric;
mod faults;
mod hardware;
mod traps;
mod workload;

use serde::Serialize;

use crate::shape::Shape;

pub use workload::MODELS;

/// A kind of case; each family is built with several seeded variants.
///
/// The discriminant is mixed into every case's seed, so families added later are appended
/// (the older families' cases stay the same); [`Family::ALL`] gives the reading order, faults
/// first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Family {
    IdleHeld,
    IdleContext,
    Leak,
    NcclHang,
    ZeroHang,
    Overheat,
    Orphaned,
    Wedged,
    Lost,
    Xid,
    Ecc,
    Straggler,
    Checkpoints,
    EvalHighUtil,
    Warmup,
    Sawtooth,
    CkptBumps,
    HotHealthy,
    Free,
    JobEnded,
    Restart,
    PromGap,
    BusyNoProcs,
    DataloaderBound,
    XidBenign,
    XidAppCrash,
    XidRepeat,
    XidStorm,
    CkptLong,
    WarmupSawtooth,
    NvlinkDown,
    NvlinkErrors,
    FabricNotReady,
    NvlinkHealthy,
}

impl Family {
    pub const ALL: [Family; 34] = [
        Family::IdleHeld,
        Family::IdleContext,
        Family::Leak,
        Family::NcclHang,
        Family::ZeroHang,
        Family::Overheat,
        Family::Orphaned,
        Family::Wedged,
        Family::Lost,
        Family::Xid,
        Family::Ecc,
        Family::Straggler,
        Family::XidAppCrash,
        Family::XidRepeat,
        Family::XidStorm,
        Family::NvlinkDown,
        Family::NvlinkErrors,
        Family::FabricNotReady,
        Family::Checkpoints,
        Family::EvalHighUtil,
        Family::CkptLong,
        Family::Warmup,
        Family::Sawtooth,
        Family::WarmupSawtooth,
        Family::CkptBumps,
        Family::HotHealthy,
        Family::Free,
        Family::JobEnded,
        Family::Restart,
        Family::PromGap,
        Family::BusyNoProcs,
        Family::DataloaderBound,
        Family::XidBenign,
        Family::NvlinkHealthy,
    ];

    /// The families of the quick set (one variant each).
    pub const QUICK: [Family; 13] = [
        Family::IdleHeld,
        Family::IdleContext,
        Family::Leak,
        Family::NcclHang,
        Family::ZeroHang,
        Family::Overheat,
        Family::Orphaned,
        Family::Wedged,
        Family::Checkpoints,
        Family::Warmup,
        Family::Free,
        Family::BusyNoProcs,
        Family::Restart,
    ];

    pub fn name(self) -> &'static str {
        use Family::*;
        match self {
            IdleHeld => "idle_held",
            IdleContext => "idle_context",
            Leak => "leak",
            NcclHang => "nccl_hang",
            ZeroHang => "zero_hang",
            Overheat => "overheat",
            Orphaned => "orphaned",
            Wedged => "wedged",
            Lost => "lost",
            Xid => "xid",
            Ecc => "ecc",
            Straggler => "straggler",
            Checkpoints => "checkpoints",
            EvalHighUtil => "eval_high_util",
            Warmup => "warmup",
            Sawtooth => "sawtooth",
            CkptBumps => "ckpt_bumps",
            HotHealthy => "hot_healthy",
            Free => "free",
            JobEnded => "job_ended",
            Restart => "restart",
            PromGap => "prom_gap",
            BusyNoProcs => "busy_no_procs",
            DataloaderBound => "dataloader_bound",
            XidBenign => "xid_benign",
            XidAppCrash => "xid_app_crash",
            XidRepeat => "xid_repeat",
            XidStorm => "xid_storm",
            CkptLong => "ckpt_long",
            WarmupSawtooth => "warmup_sawtooth",
            NvlinkDown => "nvlink_down",
            NvlinkErrors => "nvlink_errors",
            FabricNotReady => "fabric_not_ready",
            NvlinkHealthy => "nvlink_healthy",
        }
    }

    /// True for healthy traps: any alert on them is a false alarm.
    pub fn healthy(self) -> bool {
        use Family::*;
        match self {
            IdleHeld | IdleContext | Leak | NcclHang | ZeroHang | Overheat | Orphaned | Wedged
            | Lost | Xid | Ecc | Straggler | XidAppCrash | XidRepeat | XidStorm | NvlinkDown
            | NvlinkErrors | FabricNotReady => false,
            Checkpoints | EvalHighUtil | Warmup | Sawtooth | CkptBumps | HotHealthy | Free
            | JobEnded | Restart | PromGap | BusyNoProcs | DataloaderBound | XidBenign
            | CkptLong | WarmupSawtooth | NvlinkHealthy => true,
        }
    }

    /// Variants in the full set: 3 per fault family (one per leak rate for leaks, one per XID
    /// code for the XID patterns, more where a family runs in one shape only), 2 per healthy
    /// family (3 for the nvml-only one, one per climb for the warm-up sawtooth, 4 for long
    /// pauses: two of each kind).
    fn full_variants(self) -> u32 {
        match self {
            Family::Leak => workload::LEAK_RATES.len() as u32,
            Family::Lost | Family::Xid => 4,
            Family::XidAppCrash => hardware::APP_CRASH_XIDS.len() as u32,
            Family::XidRepeat => hardware::REPEAT_XIDS.len() as u32,
            Family::XidStorm => hardware::STORM_XIDS.len() as u32,
            Family::XidBenign => 3,
            Family::WarmupSawtooth => traps::WARMUP_CLIMB_GB.len() as u32,
            Family::CkptLong => 4,
            Family::NvlinkErrors => 4,
            Family::NvlinkHealthy => 3,
            f if f.healthy() => 2,
            _ => 3,
        }
    }
}

/// What a shape must record for a label to be observable in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Need {
    /// Utilisation and memory: every shape.
    Any,
    /// Only NVML knows (XIDs, a lost GPU).
    Nvml,
    /// A temperature column.
    Temp,
    /// An SM clock column, for every GPU.
    Clocks,
    /// ECC counters.
    Ecc,
    /// Process rows.
    Processes,
    /// No process rows (what a monitor should say without them).
    NoProcesses,
    /// Every GPU of the host, by index.
    AllGpus,
}

/// One alert a correct monitor raises.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Label {
    pub rule: String,
    pub gpu: u32,
    /// Simulated seconds from tick 0.
    pub onset_s: u64,
    /// An alert later than `onset_s + max_delay_s` does not count.
    pub max_delay_s: u64,
    pub need: Need,
}

impl Label {
    pub fn new(rule: &str, gpu: usize, onset_s: u64, max_delay_s: u64, need: Need) -> Label {
        Label {
            rule: rule.to_string(),
            gpu: gpu as u32,
            onset_s,
            max_delay_s,
            need,
        }
    }

    /// Whether `shape` records what this label needs (and the label's GPU).
    pub fn observable(&self, shape: &Shape) -> bool {
        let c = shape.caps();
        let data = match self.need {
            Need::Any => true,
            Need::Nvml => c.nvml,
            Need::Temp => c.temp,
            Need::Clocks => c.clocks && c.all_gpus,
            Need::Ecc => c.ecc,
            Need::Processes => c.processes,
            Need::NoProcesses => !c.processes,
            Need::AllGpus => c.all_gpus,
        };
        data && (c.all_gpus || self.gpu == 0)
    }
}

/// A leak's reference times, for the lead-time figure.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LeakInfo {
    pub rate_mib_per_min: u32,
    /// First tick at which the GPU's memory is at 99 % of what the sim can hold.
    pub full_s: u64,
}

/// One labelled case.
#[derive(Debug, Clone)]
pub struct Case {
    /// `family-variant`, e.g. `leak-2`.
    pub name: String,
    pub family: Family,
    pub variant: u32,
    pub seed: u64,
    /// The seeded parameters, for the JSON records.
    pub params: serde_json::Map<String, serde_json::Value>,
    pub toml: String,
    pub scenario: gpuwatch_sim::Scenario,
    pub labels: Vec<Label>,
    /// A healthy case that only makes sense in some shapes (XIDs exist only in NVML).
    pub only: Option<Need>,
    pub leak: Option<LeakInfo>,
}

impl Case {
    /// Whether the case is run in `shape`: a fault case where one of its labels is
    /// observable, a healthy case everywhere it makes sense.
    pub fn runs_in(&self, shape: &Shape) -> bool {
        if self.family.healthy() {
            self.only
                .is_none_or(|need| Label::new("", 0, 0, 0, need).observable(shape))
        } else {
            self.labels.iter().any(|l| l.observable(shape))
        }
    }
}

/// Which cases to build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Set {
    /// One variant of 13 families, shorter scenarios: the test-suite slice.
    Quick,
    /// Every family with several variants.
    Full,
}

#[derive(Debug, thiserror::Error)]
#[error("case {case}: the generated scenario does not compile (a catalogue bug): {message}")]
pub struct CatalogueError {
    pub case: String,
    pub message: String,
}

/// A case seed from the set seed, family and variant (splitmix64 of their mix).
fn case_seed(seed: u64, family: Family, variant: u32) -> u64 {
    let mut z = seed ^ ((family as u64) << 32) ^ u64::from(variant).wrapping_mul(0x9E37_79B9);
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Builds one case.
pub fn build(family: Family, variant: u32, set: Set, seed: u64) -> Result<Case, CatalogueError> {
    let name = format!("{}-{variant}", family.name());
    let seed = case_seed(seed, family, variant);
    let mut ctx = workload::Ctx::new(&name, seed, variant, set == Set::Quick);
    let draft = if family.healthy() {
        traps::build(family, &mut ctx)
    } else {
        faults::build(family, &mut ctx)
    }
    .map_err(|message| CatalogueError {
        case: name.clone(),
        message,
    })?;
    let toml = ctx.text.toml();
    let scenario = crate::scenario::ScenarioText::compile(&toml, &format!("{name}.toml")).map_err(
        |message| CatalogueError {
            case: name.clone(),
            message,
        },
    )?;
    Ok(Case {
        name,
        family,
        variant,
        seed,
        params: ctx.params,
        toml,
        scenario,
        labels: draft.labels,
        only: draft.only,
        leak: draft.leak,
    })
}

/// Every case of a set, in catalogue order.
pub fn catalogue(set: Set, seed: u64) -> Result<Vec<Case>, CatalogueError> {
    let mut out = Vec::new();
    match set {
        Set::Quick => {
            for f in Family::QUICK {
                out.push(build(f, 0, set, seed)?);
            }
        }
        Set::Full => {
            for f in Family::ALL {
                for v in 0..f.full_variants() {
                    out.push(build(f, v, set, seed)?);
                }
            }
        }
    }
    Ok(out)
}

/// What a family builder hands back besides the scenario text in the context.
#[derive(Debug, Default)]
struct Draft {
    labels: Vec<Label>,
    only: Option<Need>,
    leak: Option<LeakInfo>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_case_of_both_sets_compiles_and_is_deterministic() {
        for set in [Set::Quick, Set::Full] {
            let a = catalogue(set, 7).unwrap_or_else(|e| panic!("{e}"));
            let b = catalogue(set, 7).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(a.len(), b.len());
            for (x, y) in a.iter().zip(&b) {
                assert_eq!(x.toml, y.toml, "{}", x.name);
                assert_eq!(x.labels, y.labels, "{}", x.name);
                assert_eq!(x.family.healthy(), x.labels.is_empty(), "{}", x.name);
                for l in &x.labels {
                    assert!(
                        (l.gpu as usize) < x.scenario.gpu_count(),
                        "{}: {l:?}",
                        x.name
                    );
                }
            }
        }
        let quick = catalogue(Set::Quick, 7).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(quick.len(), 13);
    }

    fn case(family: Family, variant: u32) -> Case {
        build(family, variant, Set::Full, 7).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn every_family_is_listed_once_faults_first() {
        for (i, f) in Family::ALL.iter().enumerate() {
            assert!(
                Family::ALL[..i]
                    .iter()
                    .all(|g| g != f && g.name() != f.name()),
                "{}",
                f.name()
            );
            assert_eq!(
                serde_json::to_value(f).ok(),
                Some(serde_json::Value::from(f.name()))
            );
        }
        let traps = Family::ALL
            .iter()
            .position(|f| f.healthy())
            .unwrap_or(Family::ALL.len());
        assert!(Family::ALL[traps..].iter().all(|f| f.healthy()));
    }

    #[test]
    fn xid_patterns_hold_their_shape() {
        for v in 0..Family::XidAppCrash.full_variants() {
            let c = case(Family::XidAppCrash, v);
            let (s, l) = (&c.scenario, &c.labels[0]);
            let mut hit: Vec<usize> = s.events().iter().map(|e| e.gpu).collect();
            hit.sort_unstable();
            hit.dedup();
            assert_eq!(hit.len(), s.events().len(), "{}", c.name);
            assert!(2 * hit.len() >= s.gpu_count(), "{}", c.name);
            assert_eq!(hit[0], l.gpu as usize, "{}", c.name);
            let t = l.onset_s;
            assert!(s.events().iter().all(|e| (t..=t + 5).contains(&e.tick)));
            assert!(
                s.processes()
                    .iter()
                    .all(|p| p.end_tick.is_some_and(|e| (t..=t + 30).contains(&e))),
                "{}",
                c.name
            );
            assert!(s.training_jobs().iter().all(|j| j.end_tick == Some(t)));
        }
        for v in 0..Family::XidRepeat.full_variants() {
            let c = case(Family::XidRepeat, v);
            let s = &c.scenario;
            let ev = s.events();
            assert_eq!(ev.len(), 2, "{}", c.name);
            assert!(ev[0].gpu == ev[1].gpu && ev[0].xid == ev[1].xid);
            let jobs = s.training_jobs();
            assert_eq!(jobs.len(), 2, "{}", c.name);
            assert!(jobs[0].end_tick.is_some_and(|e| ev[0].tick + 600 <= e));
            assert!(jobs[0].end_tick.is_some_and(|e| e < jobs[1].start_tick));
            assert!(jobs[1].start_tick + 600 <= ev[1].tick);
            for e in ev {
                assert!(!s.processes_at(e.gpu, e.tick + 60).is_empty(), "{}", c.name);
            }
            let onsets: Vec<u64> = c.labels.iter().map(|l| l.onset_s).collect();
            let want = if matches!(ev[0].xid, 13 | 31) {
                vec![ev[1].tick]
            } else {
                vec![ev[0].tick, ev[1].tick]
            };
            assert_eq!(onsets, want, "{}", c.name);
        }
        for v in 0..Family::XidStorm.full_variants() {
            let c = case(Family::XidStorm, v);
            let (ev, l) = (c.scenario.events(), &c.labels[0]);
            assert!(ev.len() >= 10_000, "{}", c.name);
            assert!(
                ev.iter()
                    .all(|e| e.gpu == l.gpu as usize && e.xid == ev[0].xid)
            );
            assert_eq!(ev[0].tick, l.onset_s);
            assert!(ev[ev.len() - 1].tick < l.onset_s + 600);
        }
    }

    #[test]
    fn long_pauses_and_warm_up_sawtooths_hold_their_shape() {
        for v in 0..Family::CkptLong.full_variants() {
            let c = case(Family::CkptLong, v);
            let jobs = c.scenario.training_jobs();
            let stalls = &jobs[0].stalls;
            let lens: Vec<u64> = stalls.iter().map(|s| s.to_tick - s.from_tick).collect();
            let longest = lens.iter().copied().max().unwrap_or(0);
            let at = lens.iter().position(|&l| l == longest).unwrap_or(0);
            assert!((2..=3).contains(&at), "{}: {lens:?}", c.name);
            assert!(lens[..at].iter().all(|&l| 2 * l <= longest), "{}", c.name);
            assert!(stalls[at].to_tick + 1800 <= c.scenario.duration_ticks());
        }
        for v in 0..Family::WarmupSawtooth.full_variants() {
            let c = case(Family::WarmupSawtooth, v);
            let s = &c.scenario;
            let mib = |t: u64| s.gpu_state(0, t).mem_used_bytes as f64 / 1_048_576.0;
            let param = |k: &str| {
                c.params
                    .get(k)
                    .and_then(serde_json::Value::as_u64)
                    .unwrap_or(0)
            };
            let (warmup, period, d) = (param("warmup_s"), param("period_s"), s.duration_ticks());
            assert!(warmup > 0 && period > 0, "{}", c.name);
            let starts: Vec<u64> = (0u64..)
                .map(|i| warmup + i * period)
                .take_while(|&t| t + period <= d)
                .collect();
            let troughs: Vec<f64> = starts.iter().map(|&t| mib(t)).collect();
            let lo = troughs.iter().copied().fold(f64::MAX, f64::min);
            let hi = troughs.iter().copied().fold(f64::MIN, f64::max);
            assert!(hi - lo < 50.0, "{}: troughs {lo}..{hi}", c.name);
            assert!(mib(0) + 5_000.0 < lo, "{}: no warm-up", c.name);
            for &t in &starts {
                assert!(
                    mib(t + period - 1) > lo + 700.0,
                    "{}: no peak at {t}",
                    c.name
                );
            }
        }
    }

    #[test]
    fn observability_follows_the_shape() {
        let nvml = Shape::Nvml;
        let minimal = Shape::parse("minimal@60s").unwrap_or(Shape::Nvml);
        let full_apps = Shape::parse("full+apps@5s").unwrap_or(Shape::Nvml);
        let basic = Shape::parse("basic@15s").unwrap_or(Shape::Nvml);
        let xid = Label::new("gpu_xid_error", 0, 0, 0, Need::Nvml);
        assert!(xid.observable(&nvml) && !xid.observable(&full_apps));
        let idle1 = Label::new("gpu_idle", 1, 0, 0, Need::Any);
        assert!(idle1.observable(&basic) && !idle1.observable(&minimal));
        let orphan = Label::new("gpu_memory_orphaned", 0, 0, 0, Need::Processes);
        assert!(orphan.observable(&full_apps) && !orphan.observable(&basic));
        let instead = Label::new("gpu_idle", 0, 0, 0, Need::NoProcesses);
        assert!(instead.observable(&basic) && !instead.observable(&nvml));
        let clocks = Label::new("gpu_straggler", 2, 0, 0, Need::Clocks);
        assert!(clocks.observable(&full_apps) && !clocks.observable(&basic));
    }
}
