//! NVLink and fabric faults on NVLink boards (HGX H100/H200 behind NVSwitches, A100 SXM4), and
//! the healthy NVLink host they must be told from: a link going down, a CRC storm or link
//! recoveries, a fabric registration that fails or never completes; and a busy host whose
//! links see a trickle of corrected errors and whose fabric registers in its first minutes.
//!
//! Invariants: as in `faults.rs` — onsets are where the fault starts in the data, variant 0
//! puts the fault on GPU 0. NVLink and the fabric are read from NVML only (no log carries
//! them), so every label needs it; GPUs without NVLink (L40S, T4, RTX 4090) appear in every
//! other family and have no NVLink values at all.

use super::faults::{fault_gpu, gpus};
use super::workload::Ctx;
use super::{Draft, Label, Need};
use crate::scenario::{B, Segment};

const MIN: u64 = 60;

/// The models with NVLink (links: 18, 18, 12, 12).
const NVLINK_MODELS: [&str; 4] = [
    "H100-SXM-80GB",
    "H200-141GB",
    "A100-SXM4-80GB",
    "A100-SXM4-40GB",
];
/// The models in an NVLink fabric (Hopper: fabric info is Hopper and later).
const FABRIC_MODELS: [&str; 2] = ["H100-SXM-80GB", "H200-141GB"];

fn links(c: &Ctx, gpu: usize) -> u64 {
    u64::from(c.preset(gpu).nvlinks)
}

/// A healthy link's trickle of corrected errors on every GPU: a CRC error and a replay every
/// 10–100 s, counted from the driver's load (a few hundred already at tick 0).
fn trickle(c: &mut Ctx, n: usize) {
    for g in 0..n {
        let per_s = c.real(0.01, 0.1);
        let start = c.int(0, 500) as f64;
        let end = start + per_s * c.text.duration as f64;
        let replays = c.real(0.5, 1.0);
        c.segment(
            g,
            Segment::new(0, None)
                .set(
                    "nvlink_crc_flit_errors",
                    B::ramp(start, end.round(), Some(c.text.duration), 0.0),
                )
                .set(
                    "nvlink_replay_errors",
                    B::ramp(
                        (start * replays).round(),
                        (end * replays).round(),
                        Some(c.text.duration),
                        0.0,
                    ),
                ),
        );
    }
}

/// One or two links of one GPU of a busy NVLink host go down at T (20–60 min) and stay down.
pub(super) fn nvlink_down(c: &mut Ctx) -> Result<Draft, String> {
    c.set_duration(0);
    let n = gpus(c, &NVLINK_MODELS, &[2, 4, 8]);
    let g = fault_gpu(c, n);
    c.busy_fleet();
    trickle(c, n);
    let at = c.mins(20, 60);
    let total = links(c, g);
    let k = c.int(1, 2);
    let mut down: Vec<u64> = Vec::new();
    while (down.len() as u64) < k {
        let l = c.int(0, total - 1);
        if !down.contains(&l) {
            down.push(l);
        }
    }
    down.sort_unstable();
    let list = down
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    c.segment(
        g,
        Segment::new(at, None).raw("nvlink_down", &format!("[{list}]")),
    );
    c.param("down_s", at);
    c.param("links_down", down);
    Ok(Draft {
        labels: vec![Label::new("gpu_nvlink_down", g, at, 3 * MIN, Need::Nvml)],
        ..Draft::default()
    })
}

/// One GPU's links degrade at T (20–60 min): a CRC storm (200–5,000 errors/s, flow control
/// or data, each followed by replays at a tenth of the rate) for 10–20 min in even variants,
/// one to three link recoveries within a minute in odd ones; the work goes on.
pub(super) fn nvlink_errors(c: &mut Ctx) -> Result<Draft, String> {
    c.set_duration(0);
    let n = gpus(c, &NVLINK_MODELS, &[2, 4, 8]);
    let g = fault_gpu(c, n);
    c.busy_fleet();
    trickle(c, n);
    let at = c.mins(20, 60);
    let seg = Segment::new(at, None);
    let seg = if c.variant.is_multiple_of(2) {
        let rate = c.int(200, 5_000) as f64;
        let len = c.mins(10, 20);
        let crc = if c.rng.bool() {
            "nvlink_crc_data_errors"
        } else {
            "nvlink_crc_flit_errors"
        };
        c.param("crc_per_s", rate);
        c.param("storm_len_s", len);
        c.param("counter", crc);
        // The storm's counts on top of the trickle's level at T (a later segment wins).
        let base = 1_000.0;
        seg.set(crc, B::ramp(base, base + rate * len as f64, Some(len), 0.0))
            .set(
                "nvlink_replay_errors",
                B::ramp(base, base + rate * len as f64 / 10.0, Some(len), 0.0),
            )
    } else {
        let k = c.int(1, 3) as f64;
        c.param("recoveries", k);
        seg.set("nvlink_recovery_errors", B::ramp(0.0, k, Some(60), 0.0))
    };
    c.segment(g, seg);
    c.param("onset_s", at);
    Ok(Draft {
        labels: vec![Label::new("gpu_nvlink_errors", g, at, 5 * MIN, Need::Nvml)],
        ..Draft::default()
    })
}

/// One GPU of an HGX host never joins the fabric: its registration completes with an error
/// (variant 0 mod 3), stays in progress (1) or never starts (2: the Fabric Manager is not
/// running). CUDA cannot start there, so that GPU stays idle with no process; the others
/// register in their first 30–90 s and work. The fault is there from boot: onset 0.
pub(super) fn fabric_not_ready(c: &mut Ctx) -> Result<Draft, String> {
    c.set_duration(0);
    let n = gpus(c, &FABRIC_MODELS, &[1, 2, 4, 8]);
    let g = fault_gpu(c, n);
    for other in (0..n).filter(|&o| o != g) {
        c.busy(other, 0, None);
        let plateau = c.plateau(other);
        c.train_process(other, 0, None, plateau);
        let ready = c.int(30, 90);
        c.segment(
            other,
            Segment::new(0, Some(ready)).raw("fabric_state", "\"in_progress\""),
        );
    }
    let (state, status) = match c.variant % 3 {
        0 => (
            "\"completed\"",
            Some(c.pick(&["\"NOT_READY\"", "\"UNKNOWN\"", "\"INSUFFICIENT_RESOURCES\""])),
        ),
        1 => ("\"in_progress\"", None),
        _ => ("\"not_started\"", None),
    };
    let mut seg = Segment::new(0, None).raw("fabric_state", state).raw(
        "nvlink_down",
        &format!(
            "[{}]",
            (0..links(c, g))
                .map(|l| l.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    );
    if let Some(s) = status {
        seg = seg.raw("fabric_status", s);
    }
    c.segment(g, seg);
    c.param("fabric_state", state.trim_matches('"'));
    c.param(
        "fabric_status",
        status.unwrap_or("\"SUCCESS\"").trim_matches('"'),
    );
    Ok(Draft {
        labels: vec![Label::new(
            "gpu_fabric_not_ready",
            g,
            0,
            6 * MIN,
            Need::Nvml,
        )],
        ..Draft::default()
    })
}

/// A busy NVLink host at its healthiest: every link up, a trickle of corrected CRC errors and
/// replays (0.01–0.1/s), the fabric (on Hopper) in progress for its first 30–90 s. No alert
/// is right.
pub(super) fn nvlink_healthy(c: &mut Ctx) {
    c.set_duration(0);
    let model = c.pick(&NVLINK_MODELS);
    let n = c.pick(&[2, 4, 8]);
    c.add_gpus(model, n);
    c.busy_fleet();
    trickle(c, n);
    if FABRIC_MODELS.contains(&model) {
        for g in 0..n {
            let ready = c.int(30, 90);
            c.segment(
                g,
                Segment::new(0, Some(ready)).raw("fabric_state", "\"in_progress\""),
            );
        }
    }
}
