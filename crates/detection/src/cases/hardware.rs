//! Driver and hardware faults (a wedged context, a lost GPU, critical XIDs, uncorrected ECC
//! errors) and stragglers: each on one GPU of an otherwise healthy busy host.
//!
//! Invariants: as in `faults.rs` — onsets are where the fault starts in the data, variant 0
//! puts the fault on GPU 0; XIDs and lost GPUs exist only in NVML, so their labels need it.

use super::faults::{background, fault_gpu, gpus};
use super::workload::{Ctx, MODELS};
use super::{Draft, Label, Need};
use crate::scenario::{B, Segment};

const MIN: u64 = 60;

pub(super) fn wedged(c: &mut Ctx) -> Result<Draft, String> {
    c.set_duration(0);
    let n = gpus(c, &MODELS, &[1, 2, 4]);
    let g = fault_gpu(c, n);
    background(c, g);
    c.segment(
        g,
        Segment::new(10 * MIN, None)
            .set("util_gpu", B::value(100.0))
            .set("mem_used_mib", B::value(0.0)),
    );
    Ok(Draft {
        labels: vec![Label::new(
            "cuda_driver_error",
            g,
            10 * MIN,
            10 * MIN,
            Need::Any,
        )],
        ..Draft::default()
    })
}

pub(super) fn lost(c: &mut Ctx) -> Result<Draft, String> {
    c.set_duration(0);
    let n = gpus(c, &MODELS, &[1, 2, 4, 8]);
    let g = fault_gpu(c, n);
    c.busy_fleet();
    let at = c.mins(20, 40);
    c.text.gpus[g].lost_at = Some(at);
    c.param("lost_s", at);
    Ok(Draft {
        labels: vec![Label::new("gpu_lost", g, at, 3 * MIN, Need::Nvml)],
        ..Draft::default()
    })
}

pub(super) fn xid(c: &mut Ctx) -> Result<Draft, String> {
    c.set_duration(0);
    let n = gpus(c, &MODELS, &[1, 2, 4, 8]);
    let g = fault_gpu(c, n);
    c.busy_fleet();
    let at = c.mins(20, 60);
    let code = [79, 48, 94, 119][c.variant as usize % 4];
    c.text.events.push((g, at, code));
    c.param("xid", code);
    Ok(Draft {
        labels: vec![Label::new("gpu_xid_error", g, at, 3 * MIN, Need::Nvml)],
        ..Draft::default()
    })
}

pub(super) fn ecc(c: &mut Ctx) -> Result<Draft, String> {
    c.set_duration(0);
    // The RTX 4090 has no ECC.
    let n = gpus(c, &MODELS[..6], &[1, 2, 4, 8]);
    let g = fault_gpu(c, n);
    c.busy_fleet();
    let at = c.mins(20, 60);
    let errors = c.int(1, 3);
    c.segment(
        g,
        Segment::new(at, None).set("ecc_uncorrected", B::value(errors as f64)),
    );
    c.param("errors", errors);
    Ok(Draft {
        labels: vec![Label::new("gpu_ecc_uncorrected", g, at, 5 * MIN, Need::Ecc)],
        ..Draft::default()
    })
}

/// One GPU of a busy job lags its peers for 30 minutes: at 50–60 % utilisation (even
/// variants) or with its SM clock held at 70 % (odd variants, seen only with a clock column).
pub(super) fn straggler(c: &mut Ctx) -> Result<Draft, String> {
    c.set_duration(0);
    let n = gpus(c, &MODELS, &[4, 8]);
    c.busy_fleet();
    c.training((0..n).collect(), None, Vec::new());
    let g = c.rng.usize(..n);
    let at = c.mins(20, 50);
    let by_clock = c.variant % 2 == 1;
    let seg = Segment::new(at, Some(at + 30 * MIN));
    let (seg, need) = if by_clock {
        let clock = (f64::from(c.preset(g).sm_clock_max) * 0.7).round();
        (seg.set("sm_clock", B::value(clock)), Need::Clocks)
    } else {
        let util = c.real(50.0, 60.0);
        (seg.set("util_gpu", B::noisy(util, 3.0)), Need::AllGpus)
    };
    c.segment(g, seg);
    c.param("straggler_gpu", g);
    c.param("by_clock", by_clock);
    Ok(Draft {
        labels: vec![Label::new("gpu_straggler", g, at, 20 * MIN, need)],
        ..Draft::default()
    })
}
