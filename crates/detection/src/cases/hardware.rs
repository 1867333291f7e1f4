//! Driver and hardware faults (a wedged context, a lost GPU, critical XIDs, uncorrected ECC
//! errors) and stragglers: each on one GPU of an otherwise healthy busy host. Also the XID
//! patterns that need more than one event to judge: a job killed by an application XID on
//! several GPUs, one code on one GPU in two jobs, and a storm of one code.
//!
//! Invariants: as in `faults.rs` — onsets are where the fault starts in the data, variant 0
//! puts the fault on GPU 0; XIDs and lost GPUs exist only in NVML, so their labels need it.

use super::faults::{background, fault_gpu, gpus};
use super::workload::{Ctx, MODELS};
use super::{Draft, Label, Need};
use crate::scenario::{B, Segment, XidAt};

const MIN: u64 = 60;

/// The application XIDs of the `xid_app_crash` variants, one each.
pub const APP_CRASH_XIDS: [u32; 4] = [13, 31, 43, 45];

/// The codes of the `xid_repeat` variants: the catalogue's hardware codes, then two
/// application codes.
pub const REPEAT_XIDS: [u32; 5] = [48, 79, 94, 13, 31];

/// The critical codes of the `xid_storm` variants.
pub const STORM_XIDS: [u32; 3] = [48, 94, 95];

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
    c.text.events.push(XidAt::once(g, at, code));
    c.param("xid", code);
    Ok(Draft {
        labels: vec![Label::new("gpu_xid_error", g, at, 3 * MIN, Need::Nvml)],
        ..Draft::default()
    })
}

/// A data-parallel job on 2, 4 or 8 GPUs (every GPU of the host) killed by an application
/// fault: at T (20–60 min) the variant's code hits at least half of its GPUs within 5 s (the
/// lowest-index one at T; GPU 0 among them in variant 0), every process of the job exits
/// 0–30 s after T and the job's series stop at T; the GPUs are free afterwards. One incident:
/// the job crashed, the GPUs need nothing.
pub(super) fn xid_app_crash(c: &mut Ctx) -> Result<Draft, String> {
    let at = c.mins(20, 60);
    c.set_duration(at + 30 * MIN);
    let n = gpus(c, &MODELS, &[2, 4, 8]);
    let code = APP_CRASH_XIDS[c.variant as usize % APP_CRASH_XIDS.len()];
    let k = c.int(n.div_ceil(2) as u64, n as u64) as usize;
    let mut order: Vec<usize> = (0..n).collect();
    c.rng.shuffle(&mut order);
    if c.variant == 0 {
        order.retain(|&g| g != 0);
        order.insert(0, 0);
    }
    let mut hit = order[..k].to_vec();
    hit.sort_unstable();
    for (i, &g) in hit.iter().enumerate() {
        let t = if i == 0 { at } else { at + c.int(0, 5) };
        c.text.events.push(XidAt::once(g, t, code));
    }
    let mut last_exit = at;
    for g in 0..n {
        let exit = at + c.int(0, 30);
        c.busy(g, 0, Some(at));
        let plateau = c.plateau(g);
        c.train_process(g, 0, Some(exit), plateau);
        last_exit = last_exit.max(exit);
    }
    c.training((0..n).collect(), Some(at), Vec::new());
    let first_hit = hit[0];
    c.param("xid", code);
    c.param("crash_s", at);
    c.param("hit_gpus", hit);
    c.param("last_exit_s", last_exit);
    Ok(Draft {
        labels: vec![Label::new(
            "xid_application_crash",
            first_hit,
            at,
            3 * MIN,
            Need::Nvml,
        )],
        ..Draft::default()
    })
}

/// One code on one GPU in two jobs. Job A (every GPU of the host) runs 40–70 min and ends
/// cleanly; job B (new processes, a new job) starts on the same GPUs 1–5 min later. The
/// variant's code hits GPU g once during A (10 min after its start at the earliest, 10 min
/// before its end at the latest) and again 10–40 min into B; no process exits at an XID.
/// A hardware code (48, 79, 94) is an alert each time it comes: the two occurrences are at
/// least 21 min apart, two incidents, two labels (79 keeps the GPU on the bus, as in `xid`).
/// An application code (13, 31) is the job's own fault the first time; the same code on the
/// same GPU in another job points at the GPU: one label, at the second occurrence.
pub(super) fn xid_repeat(c: &mut Ctx) -> Result<Draft, String> {
    let a_end = c.mins(40, 70);
    let first = c.int(10 * MIN, a_end - 10 * MIN);
    let b_start = a_end + c.mins(1, 5);
    let second = b_start + c.mins(10, 40);
    c.set_duration(second + 30 * MIN);
    let n = gpus(c, &MODELS, &[1, 2, 4, 8]);
    let g = fault_gpu(c, n);
    let code = REPEAT_XIDS[c.variant as usize % REPEAT_XIDS.len()];
    for gpu in 0..n {
        c.busy(gpu, 0, Some(a_end));
        let plateau = c.plateau(gpu);
        c.train_process(gpu, 0, Some(a_end), plateau);
        c.busy(gpu, b_start, None);
        let plateau = c.plateau(gpu);
        c.train_process(gpu, b_start, None, plateau);
    }
    c.training((0..n).collect(), Some(a_end), Vec::new());
    c.training_from((0..n).collect(), Some(b_start), None, Vec::new());
    c.text.events.push(XidAt::once(g, first, code));
    c.text.events.push(XidAt::once(g, second, code));
    c.param("xid", code);
    c.param("first_xid_s", first);
    c.param("job_a_end_s", a_end);
    c.param("job_b_start_s", b_start);
    c.param("second_xid_s", second);
    let application = matches!(code, 13 | 31);
    let onsets = if application {
        vec![second]
    } else {
        vec![first, second]
    };
    Ok(Draft {
        labels: onsets
            .into_iter()
            .map(|at| Label::new("gpu_xid_error", g, at, 3 * MIN, Need::Nvml))
            .collect(),
        ..Draft::default()
    })
}

/// An XID storm: one GPU of a busy host gets 10,000–12,000 events of one critical code (the
/// variant's) spread evenly over 5–10 min from T (20–40 min); the work goes on. One incident,
/// one alert at T.
pub(super) fn xid_storm(c: &mut Ctx) -> Result<Draft, String> {
    c.set_duration(0);
    let n = gpus(c, &MODELS, &[1, 2, 4, 8]);
    let g = fault_gpu(c, n);
    c.busy_fleet();
    let at = c.mins(20, 40);
    let span = c.mins(5, 10);
    let count = c.int(10_000, 12_000);
    let code = STORM_XIDS[c.variant as usize % STORM_XIDS.len()];
    // `count` events evenly over `span` seconds, the first at `at`.
    c.text.events.push(XidAt {
        repeat: Some((count, span * 1000 / count)),
        ..XidAt::once(g, at, code)
    });
    c.param("xid", code);
    c.param("storm_s", at);
    c.param("storm_len_s", span);
    c.param("events", count);
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
