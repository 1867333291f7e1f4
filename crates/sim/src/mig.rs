//! MIG: a GPU in MIG mode split into GPU instances (`[[gpu.mig]]`), each a GPU of its own to
//! the people using it — its own UUID (`MIG-…`), memory, processes and activity — while the
//! parent keeps temperature, power, clocks and hardware health.
//!
//! Invariants: instances exist only on a GPU in MIG mode whose model has a profile table (the
//! H100 80GB's, from a real `nvidia-smi` capture); GPU instance ids are unique per GPU and the
//! instances' slices fit the GPU's 7; an instance lives in `[from, until)` (created or
//! destroyed while a monitor runs); its memory is its processes' (`[[process]] mig = GI`) plus
//! a small baseline, unless a segment sets it; its activity (the SMs' share of time with work,
//! what GPM reports per instance) is a behaviour of its timeline, the other GPM metrics
//! derived from it as on a whole GPU; every value is a pure function of the tick.

use serde::Deserialize;
use toml::Spanned;

use crate::behaviour::{Signal, mix, noise_key};
use crate::error::Problems;
use crate::timeline::{Track, to_signal};
use crate::types::ProcessSpec;
use crate::values::{Dur, RawBehaviour};

/// One MIG profile of a model: nvidia-smi's name (`1g.10gb`), NVML's profile id as
/// `nvidia-smi mig -lgip` prints it, compute slices, memory and SMs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MigProfile {
    pub name: &'static str,
    pub id: u32,
    pub slices: u32,
    pub memory_mib: u64,
    pub sms: u32,
    /// The GPU instance ids NVML gives this profile's placements, in order.
    pub gi_ids: &'static [u32],
}

/// The H100 80GB's profiles. Memory and SM counts of 1g.10gb, 2g.20gb and 3g.40gb are those
/// of `nvidia-smi -q` on an H100 80GB HBM3 in MIG mode, driver 590.48.01 (9984, 20096 and
/// 40448 MiB; 16, 32 and 60 SMs); the others follow NVIDIA's MIG user guide's H100 table.
pub const H100_PROFILES: &[MigProfile] = &[
    MigProfile {
        name: "1g.10gb",
        id: 19,
        slices: 1,
        memory_mib: 9_984,
        sms: 16,
        gi_ids: &[7, 8, 9, 10, 11, 12, 13],
    },
    MigProfile {
        name: "1g.20gb",
        id: 15,
        slices: 1,
        memory_mib: 20_096,
        sms: 16,
        gi_ids: &[3, 4, 5, 6],
    },
    MigProfile {
        name: "2g.20gb",
        id: 14,
        slices: 2,
        memory_mib: 20_096,
        sms: 32,
        gi_ids: &[3, 4, 5],
    },
    MigProfile {
        name: "3g.40gb",
        id: 9,
        slices: 3,
        memory_mib: 40_448,
        sms: 60,
        gi_ids: &[1, 2],
    },
    MigProfile {
        name: "4g.40gb",
        id: 5,
        slices: 4,
        memory_mib: 40_448,
        sms: 64,
        gi_ids: &[1],
    },
    MigProfile {
        name: "7g.80gb",
        id: 0,
        slices: 7,
        memory_mib: 80_896,
        sms: 132,
        gi_ids: &[0],
    },
];

/// Most MIG devices on one GPU.
pub const MAX_MIG: usize = 7;

/// The profile table of a preset, if it has one.
pub fn profiles(model: &str) -> Option<&'static [MigProfile]> {
    (model == "H100-SXM-80GB").then_some(H100_PROFILES)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMig {
    pub profile: Spanned<String>,
    /// GPU instance id (default: the profile's next placement).
    pub gi: Option<Spanned<u32>>,
    pub uuid: Option<Spanned<String>>,
    pub from: Option<Spanned<Dur>>,
    pub until: Option<Spanned<Dur>>,
    #[serde(default)]
    pub timeline: Vec<Spanned<RawMigSegment>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMigSegment {
    pub from: Option<Spanned<Dur>>,
    pub to: Option<Spanned<Dur>>,
    /// % of the instance's SM time with work (GPM's SM activity of the instance).
    pub activity: Option<Spanned<RawBehaviour>>,
    pub mem_used_mib: Option<Spanned<RawBehaviour>>,
}

/// One instance, as a client sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct MigSpec {
    /// Its place among the GPU's instances (`nvmlDeviceGetMigDeviceHandleByIndex`).
    pub index: usize,
    pub gi_id: u32,
    pub ci_id: u32,
    pub profile: MigProfile,
    pub uuid: String,
    pub memory_bytes: u64,
    pub from_tick: u64,
    pub until_tick: Option<u64>,
}

impl MigSpec {
    pub fn alive_at(&self, tick: u64) -> bool {
        self.from_tick <= tick && self.until_tick.is_none_or(|u| tick < u)
    }
}

/// One instance's values at a tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MigState {
    pub mem_total_bytes: u64,
    pub mem_used_bytes: u64,
    pub mem_free_bytes: u64,
    pub sm_active_pct: u32,
    pub sm_occupancy_pct: u32,
    pub dram_active_pct: u32,
    pub tensor_active_pct: u32,
}

/// A compiled instance: its spec and its two tracks (activity, memory).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct MigModel {
    pub spec: MigSpec,
    activity: Track,
    memory: Track,
    baseline_bytes: u64,
}

/// Driver memory of an instance with no process, MiB.
const BASELINE_MIB: u64 = 9;

fn mig_uuid(seed: u64, gpu: usize, gi: u32) -> String {
    let a = mix(seed ^ mix(gpu as u64 ^ 0x4D16 ^ (u64::from(gi) << 20)));
    let b = mix(a ^ 0x4D1);
    format!(
        "MIG-{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xFFFF,
        (a & 0x0FFF) | 0x5000,
        (b >> 48) & 0x3FFF | 0x8000,
        b & 0xFFFF_FFFF_FFFF
    )
}

/// Compiles the instances of GPU `gpu` (`model` its preset, `mig_mode` its mode).
pub(crate) fn compile(
    p: &mut Problems,
    raw: &[Spanned<RawMig>],
    gpu: usize,
    model: &str,
    mig_mode: bool,
    seed: u64,
    tick_ms: u64,
) -> Vec<MigModel> {
    if raw.is_empty() {
        return Vec::new();
    }
    if !mig_mode {
        p.at(
            Some(raw[0].span()),
            "MIG instances need the GPU in MIG mode: add mig_mode = true to the [[gpu]]",
        );
        return Vec::new();
    }
    let Some(table) = profiles(model) else {
        p.at(
            Some(raw[0].span()),
            format!("MIG instances are simulated on H100-SXM-80GB only (its profiles come from a real capture), not {model}"),
        );
        return Vec::new();
    };
    if raw.len() > MAX_MIG {
        p.at(
            Some(raw[MAX_MIG].span()),
            format!("at most {MAX_MIG} MIG instances per GPU"),
        );
    }
    let mut out: Vec<MigModel> = Vec::new();
    let mut slices = 0;
    for (i, rm) in raw.iter().enumerate().take(MAX_MIG) {
        let r = rm.get_ref();
        let Some(profile) = table.iter().find(|x| x.name == r.profile.get_ref().trim()) else {
            let names: Vec<&str> = table.iter().map(|x| x.name).collect();
            p.at(
                Some(r.profile.span()),
                format!(
                    "unknown MIG profile `{}`; expected one of {}",
                    r.profile.get_ref(),
                    names.join(", ")
                ),
            );
            continue;
        };
        slices += profile.slices;
        let taken = |g: u32| out.iter().any(|m| m.spec.gi_id == g);
        let gi = match &r.gi {
            Some(g) if taken(*g.get_ref()) => {
                p.at(
                    Some(g.span()),
                    format!("GPU instance id {} is used twice", g.get_ref()),
                );
                continue;
            }
            Some(g) => *g.get_ref(),
            None => match profile.gi_ids.iter().copied().find(|&g| !taken(g)) {
                Some(g) => g,
                None => {
                    p.at(
                        Some(rm.span()),
                        format!("no free placement left for a {}: give `gi`", profile.name),
                    );
                    continue;
                }
            },
        };
        let from = r.from.as_ref().map_or(0, |d| d.get_ref().0 / tick_ms);
        let until = r.until.as_ref().map(|d| d.get_ref().0 / tick_ms);
        if let (Some(u), Some(s)) = (until, &r.until)
            && u <= from
        {
            p.at(Some(s.span()), "`until` must be after `from`");
        }
        let key = noise_key(&[seed, gpu as u64, 0x4D16, u64::from(gi)]);
        let mut activity = Track::default();
        let mut memory = Track::default();
        for seg in &r.timeline {
            let s = seg.get_ref();
            let a = s.from.as_ref().map_or(0, |d| d.get_ref().0 / tick_ms);
            let b = s.to.as_ref().map(|d| d.get_ref().0 / tick_ms);
            for (track, beh, scale, max) in [
                (&mut activity, &s.activity, 1.0, 100.0),
                (
                    &mut memory,
                    &s.mem_used_mib,
                    1_048_576.0,
                    profile.memory_mib as f64,
                ),
            ] {
                let Some(beh) = beh else { continue };
                let (lo, hi) = beh.get_ref().range();
                if lo < 0.0 || hi > max {
                    p.at(
                        Some(beh.span()),
                        format!("value outside 0..={max} for this metric"),
                    );
                    continue;
                }
                match to_signal(
                    beh.get_ref(),
                    a,
                    b.map(|b| b.saturating_sub(a)),
                    tick_ms,
                    scale,
                    key,
                ) {
                    Ok(sig) => track.overlay(a, b.unwrap_or(u64::MAX), sig),
                    Err(e) => p.at(Some(beh.span()), e),
                }
            }
        }
        out.push(MigModel {
            spec: MigSpec {
                index: i,
                gi_id: gi,
                ci_id: 0,
                profile: *profile,
                uuid: r
                    .uuid
                    .as_ref()
                    .map_or_else(|| mig_uuid(seed, gpu, gi), |u| u.get_ref().clone()),
                memory_bytes: profile.memory_mib << 20,
                from_tick: from,
                until_tick: until,
            },
            activity,
            memory,
            baseline_bytes: BASELINE_MIB << 20,
        });
    }
    if slices > 7 {
        p.at(
            Some(raw[0].span()),
            format!("the instances take {slices} compute slices; an H100 has 7"),
        );
    }
    out
}

impl MigModel {
    /// The instance's values at `tick` (`processes`: the scenario's, with their memory
    /// signals on this GPU).
    pub(crate) fn state(
        &self,
        tick: u64,
        procs: &[(usize, Signal)],
        processes: &[ProcessSpec],
    ) -> MigState {
        let total = self.spec.memory_bytes;
        let used = match self.memory.at(tick).signal {
            Some(sig) => sig.value(tick).max(0.0) as u64,
            None => self
                .process_bytes(procs, processes, tick)
                .fold(self.baseline_bytes, |a, (_, b)| a.saturating_add(b)),
        }
        .min(total);
        let u = self
            .activity
            .at(tick)
            .signal
            .map_or(0.0, |s| s.value(tick))
            .clamp(0.0, 100.0);
        let share = |f: f64| (u * f).round().clamp(0.0, 100.0) as u32;
        MigState {
            mem_total_bytes: total,
            mem_used_bytes: used,
            mem_free_bytes: total - used,
            sm_active_pct: u.round() as u32,
            sm_occupancy_pct: share(0.45),
            dram_active_pct: share(0.5),
            tensor_active_pct: share(0.55),
        }
    }

    /// (pid, bytes) of the live processes on this instance.
    pub(crate) fn process_bytes<'a>(
        &'a self,
        procs: &'a [(usize, Signal)],
        processes: &'a [ProcessSpec],
        tick: u64,
    ) -> impl Iterator<Item = (u32, u64)> + 'a {
        procs.iter().filter_map(move |(i, sig)| {
            let p = &processes[*i];
            (p.mig == Some(self.spec.gi_id) && p.alive_at(tick))
                .then(|| (p.pid, sig.value(tick).max(0.0) as u64))
        })
    }
}
