//! Healthy traps: scenarios that look like a fault to a naive rule (pauses, warm-ups, memory
//! patterns, hot but healthy GPUs, free GPUs, jobs that end or restart, scrape gaps) but need
//! no alert; any alert on them is a false alarm.
//!
//! Invariants: no labels; pauses of one job are the same on all of its GPUs (data parallel);
//! the first pause of a job comes after 20–30 minutes of training, so a monitor has not yet
//! seen one when it starts.

use super::workload::{Ctx, MODELS, power_at};
use super::{Draft, Family, Need};
use crate::scenario::{B, Segment, Stall, XidAt};

const MIN: u64 = 60;

pub(super) fn build(family: Family, c: &mut Ctx) -> Result<Draft, String> {
    if family == Family::NvlinkHealthy {
        // NVLink boards only: the model is the family's own draw.
        super::fabric::nvlink_healthy(c);
        return Ok(Draft {
            only: Some(Need::Nvml),
            ..Draft::default()
        });
    }
    let free = family == Family::Free;
    c.set_duration(if free && !c.quick { 180 * MIN } else { 0 });
    let model = c.pick(&MODELS);
    let n = c.pick(&[1, 2, 4, 8]);
    c.add_gpus(model, n);
    match family {
        Family::Checkpoints => checkpoints(c, n),
        Family::EvalHighUtil => eval_high_util(c, n),
        Family::CkptLong => ckpt_long(c, n),
        Family::Warmup => memory(c, n, Memory::Warmup),
        Family::Sawtooth => memory(c, n, Memory::Sawtooth),
        Family::WarmupSawtooth => warmup_sawtooth(c, n),
        Family::CkptBumps => ckpt_bumps(c, n),
        Family::HotHealthy => hot_healthy(c, n),
        Family::Free => free_gpus(c, n),
        Family::JobEnded => job_ended(c, n),
        Family::Restart => restart(c, n),
        Family::PromGap => prom_gap(c, n),
        Family::BusyNoProcs => memory(c, n, Memory::Busy),
        Family::DataloaderBound => memory(c, n, Memory::Dataloader),
        Family::XidBenign => xid_benign(c, n),
        other => return Err(format!("{} is not a healthy family", other.name())),
    }
    Ok(Draft {
        only: (family == Family::XidBenign).then_some(Need::Nvml),
        ..Draft::default()
    })
}

fn pause(from: u64, to: u64) -> Stall {
    Stall {
        from,
        to,
        kind: "checkpoint",
        rewind: None,
    }
}

/// Checkpoints (every 20–30 min, 2–5 min near idle with bursts: `Ctx::checkpoint_util`) and
/// eval phases (every ~45 min, 3–10 min
/// at 20–60 %); the steps stop in both.
fn checkpoints(c: &mut Ctx, n: usize) {
    c.busy_fleet();
    let d = c.text.duration;
    let first = c.mins(20, 30);
    let ckpts = c.schedule(first, (20, 30), (2, 5), d);
    let eval_first = c.mins(40, 50);
    let evals: Vec<(u64, u64)> = c
        .schedule(eval_first, (35, 45), (3, 10), d)
        .into_iter()
        .filter(|&(a, b)| {
            ckpts
                .iter()
                .all(|&(x, y)| b + 3 * MIN <= x || y + 3 * MIN <= a)
        })
        .collect();
    let mut stalls = Vec::new();
    for &(from, to) in &ckpts {
        let util = c.checkpoint_util();
        for g in 0..n {
            c.segment(g, Segment::new(from, Some(to)).set("util_gpu", util));
        }
        stalls.push(pause(from, to));
    }
    for &(from, to) in &evals {
        let util = c.real(20.0, 60.0);
        for g in 0..n {
            c.segment(
                g,
                Segment::new(from, Some(to)).set("util_gpu", B::noisy(util, 5.0)),
            );
        }
        stalls.push(pause(from, to));
    }
    stalls.sort_by_key(|s| s.from);
    c.param("checkpoints", ckpts.len());
    c.param("evals", evals.len());
    c.param("first_pause_s", first);
    c.training((0..n).collect(), None, stalls);
}

/// Eval phases with the step frozen 5–10 min while utilisation stays at 95–100 % and power
/// drops to 55–80 % of training power (unlike a NCCL hang, which sits near idle power).
/// An eval phase on GPU `g` in `[from, to)`: 95–100 % utilisation at 55–80 % of training power.
fn eval_phase(c: &mut Ctx, g: usize, from: u64, to: u64) {
    let power = power_at(c.preset(g), 95.0) * c.real(0.55, 0.8);
    c.segment(
        g,
        Segment::new(from, Some(to))
            .set("util_gpu", B::noisy(97.5, 2.5))
            .set("power_w", B::noisy(power, 3.0)),
    );
}

fn eval_high_util(c: &mut Ctx, n: usize) {
    c.busy_fleet();
    let d = c.text.duration;
    let first = c.mins(25, 40);
    let evals = c.schedule(first, (25, 40), (5, 10), d);
    for &(from, to) in &evals {
        for g in 0..n {
            eval_phase(c, g, from, to);
        }
    }
    c.param("evals", evals.len());
    let stalls = evals.iter().map(|&(a, b)| pause(a, b)).collect();
    c.training((0..n).collect(), None, stalls);
}

/// Regular pauses, then one much longer: checkpoints of 45–90 s near idle with bursts
/// (`Ctx::checkpoint_util`) every 15–30 min
/// (even variants), or evals of 5–10 min at 95–100 % with power at 55–80 % of training every
/// 25–40 min (odd variants, as in `eval_high_util`). After 2–3 of them comes one pause of the
/// same kind 2–3× as long as the longest before it (a bigger save, a full eval), then training
/// and the regular pauses go on for at least 30 min. Memory holds its plateau and the step
/// stops in every pause.
fn ckpt_long(c: &mut Ctx, n: usize) {
    let eval = c.variant % 2 == 1;
    let (first, every, len) = if eval {
        (c.mins(25, 40), (25, 40), (5 * MIN, 10 * MIN))
    } else {
        (c.mins(20, 30), (15, 30), (45, 90))
    };
    let before = c.int(2, 3);
    let mut windows = Vec::new();
    let mut at = first;
    for _ in 0..before {
        let len_s = c.int(len.0, len.1);
        windows.push((at, at + len_s));
        at += len_s + c.mins(every.0, every.1);
    }
    let longest = windows.iter().map(|&(a, b)| b - a).max().unwrap_or(len.1);
    let long_s = (longest as f64 * c.real(2.0, 3.0)).round() as u64;
    let long_at = at;
    windows.push((long_at, long_at + long_s));
    let d = c.set_duration(long_at + long_s + 30 * MIN);
    at = long_at + long_s + c.mins(every.0, every.1);
    loop {
        let len_s = c.int(len.0, len.1);
        if at + len_s >= d {
            break;
        }
        windows.push((at, at + len_s));
        at += len_s + c.mins(every.0, every.1);
    }
    c.busy_fleet();
    for &(from, to) in &windows {
        if eval {
            for g in 0..n {
                eval_phase(c, g, from, to);
            }
        } else {
            let util = c.checkpoint_util();
            for g in 0..n {
                c.segment(g, Segment::new(from, Some(to)).set("util_gpu", util));
            }
        }
    }
    c.param("pause", if eval { "eval" } else { "checkpoint" });
    c.param("pauses", windows.len());
    c.param("longest_before_s", longest);
    c.param("long_pause_s", long_at);
    c.param("long_pause_len_s", long_s);
    let stalls = windows.iter().map(|&(a, b)| pause(a, b)).collect();
    c.training((0..n).collect(), None, stalls);
}

enum Memory {
    /// 2 GB → 40–70 GB over 3–12 min, then a plateau.
    Warmup,
    /// An allocator sawtooth (period 2–10 min, 2–8 GB) around a flat level.
    Sawtooth,
    /// 95–100 % busy holding 40–75 GB (without process rows: not orphaned).
    Busy,
    /// Utilisation bouncing between 20 and 70 %.
    Dataloader,
}

fn memory(c: &mut Ctx, n: usize, kind: Memory) {
    for g in 0..n {
        let room = c.room_mib(g);
        let mem = match kind {
            Memory::Warmup => {
                let level = (c.real(40.0, 70.0) * 1024.0).min(room * 0.9).round();
                let over = c.mins(3, 12);
                B::ramp(2048.0f64.min(level / 2.0), level, Some(over), 16.0)
            }
            Memory::Sawtooth => {
                let low = (room * c.real(0.3, 0.6)).round();
                let amp = (c.real(2.0, 8.0) * 1024.0).min(room * 0.9 - low).round();
                let period = c.mins(2, 10);
                B::Sawtooth {
                    low,
                    high: low + amp,
                    period,
                    delay: None,
                    noise: 8.0,
                }
            }
            Memory::Busy => {
                let level = (c.real(40.0, 75.0) * 1024.0).min(room * 0.9).round();
                let warmup = c.mins(1, 5);
                B::ramp(2048.0f64.min(level / 2.0), level, Some(warmup), 16.0)
            }
            Memory::Dataloader => {
                let level = c.plateau(g);
                let warmup = c.mins(1, 5);
                B::ramp(2048.0f64.min(level / 2.0), level, Some(warmup), 16.0)
            }
        };
        match kind {
            Memory::Busy => {
                c.segment(
                    g,
                    Segment::new(0, None).set("util_gpu", B::noisy(97.5, 2.5)),
                );
            }
            Memory::Dataloader => {
                c.segment(
                    g,
                    Segment::new(0, None).set("util_gpu", B::noisy(45.0, 25.0)),
                );
            }
            _ => c.busy(g, 0, None),
        }
        c.process(g, 0, None, mem);
    }
    if !matches!(kind, Memory::Busy) {
        c.training((0..n).collect(), None, Vec::new());
    }
}

/// Climbs of the `warmup_sawtooth` variants, GB (less where the GPU cannot hold it).
pub const WARMUP_CLIMB_GB: [f64; 3] = [10.0, 20.0, 30.0];

/// A warm-up, then an allocator sawtooth: memory climbs 10, 20 or 30 GB (by variant) over
/// 8–12 min, then rises by 1–3 GB over each period of 3–10 min and is released at its end;
/// each peak is within ±20 % of the mean rise and every trough is at the same level.
///
/// The sim gives a process one memory behaviour, so the job is two processes on each GPU:
/// the trainer ramps, then holds; a second process of the job holds 300–600 MiB and saws with
/// the mean rise from the end of the warm-up (the process rows). The peaks' variation is in
/// the GPU's memory: one segment per period from the end of the warm-up (as `ckpt_bumps`
/// does), aligned with the second process's periods and starting from the same trough.
fn warmup_sawtooth(c: &mut Ctx, n: usize) {
    let d = c.text.duration;
    let climb_gb = WARMUP_CLIMB_GB[c.variant as usize % WARMUP_CLIMB_GB.len()];
    let warmup = c.mins(8, 12);
    let period = c.mins(3, 10);
    let rise = (c.real(1.0, 3.0) * 1024.0).round();
    let mut climbs = Vec::new();
    for g in 0..n {
        let room = c.room_mib(g);
        let from = (c.real(1.0, 2.0) * 1024.0).round();
        let helper = c.int(300, 600) as f64;
        let climb = (climb_gb * 1024.0)
            .min(room * 0.9 - from - helper - 1.2 * rise)
            .round();
        let level = from + climb;
        c.busy(g, 0, None);
        c.process(g, 0, None, B::ramp(from, level, Some(warmup), 16.0));
        c.process(
            g,
            0,
            None,
            B::Sawtooth {
                low: helper,
                high: helper + rise,
                period,
                delay: Some(warmup),
                noise: 8.0,
            },
        );
        let baseline = c.text.gpus[g].baseline_mib.unwrap_or(450) as f64;
        let trough = baseline + level + helper;
        let mut at = warmup;
        while at < d {
            let peak = trough + rise * c.real(0.8, 1.2);
            c.segment(
                g,
                Segment::new(at, Some(at + period))
                    .set("mem_used_mib", B::ramp(trough, peak, None, 8.0)),
            );
            at += period;
        }
        climbs.push(climb);
    }
    c.param("climb_mib", climbs);
    c.param("warmup_s", warmup);
    c.param("period_s", period);
    c.param("rise_mib", rise);
    c.training((0..n).collect(), None, Vec::new());
}

/// Memory +2–6 GB for 1–3 min about every 20 min (checkpoint copies), on a flat plateau.
fn ckpt_bumps(c: &mut Ctx, n: usize) {
    let mut levels = Vec::new();
    for g in 0..n {
        c.busy(g, 0, None);
        let plateau = (c.room_mib(g) * c.real(0.4, 0.7)).round();
        c.train_process(g, 0, None, plateau);
        levels.push(plateau);
    }
    let first = c.mins(15, 25);
    let d = c.text.duration;
    let bumps = c.schedule(first, (17, 21), (1, 3), d);
    for &(from, to) in &bumps {
        for (g, level) in levels.iter().enumerate() {
            let baseline = c.text.gpus[g].baseline_mib.unwrap_or(450) as f64;
            let room = c.room_mib(g);
            let bump = (c.real(2.0, 6.0) * 1024.0).min(room * 0.95 - level);
            c.segment(
                g,
                Segment::new(from, Some(to))
                    .set("mem_used_mib", B::noisy(baseline + level + bump, 4.0)),
            );
        }
    }
    c.param("bumps", bumps.len());
    c.training((0..n).collect(), None, Vec::new());
}

/// Busy GPUs 5–8 °C below their slowdown threshold for hours, not throttled.
fn hot_healthy(c: &mut Ctx, n: usize) {
    c.busy_fleet();
    for g in 0..n {
        let p = c.preset(g);
        let temp = f64::from(p.temp_slowdown) - c.int(5, 8) as f64;
        c.segment(
            g,
            Segment::new(0, Some(5 * MIN)).set("temp", B::ramp(p.idle_temp, temp, None, 0.5)),
        );
        c.segment(
            g,
            Segment::new(5 * MIN, None).set("temp", B::noisy(temp, 0.8)),
        );
    }
    c.training((0..n).collect(), None, Vec::new());
}

/// Nothing on the GPUs; half of the variants report the preset's driver baseline, the others
/// 0–5 MiB (as new drivers do).
fn free_gpus(c: &mut Ctx, n: usize) {
    let tiny = c.variant % 2 == 1;
    for g in 0..n {
        c.text.gpus[g].baseline_mib = if tiny { Some(c.int(0, 5)) } else { None };
    }
    c.param("baseline", if tiny { "0-5 MiB" } else { "preset" });
}

/// Training ends cleanly after 40–80 min: processes end, memory returns to the baseline, the
/// series ends; the GPUs are free afterwards.
fn job_ended(c: &mut Ctx, n: usize) {
    let end = c.mins(40, 80);
    c.set_duration(end + 60 * MIN);
    for g in 0..n {
        c.busy(g, 0, Some(end));
        let plateau = c.plateau(g);
        c.train_process(g, 0, Some(end), plateau);
    }
    c.param("end_s", end);
    c.training((0..n).collect(), Some(end), Vec::new());
}

/// A crash at 40–70 min (processes exit, memory released), new processes 2–6 min later whose
/// memory ramps up during 2–5 min of initialisation at 0 %, then training again from a
/// checkpoint 100–1000 steps back.
fn restart(c: &mut Ctx, n: usize) {
    let crash = c.mins(40, 70);
    let down = c.mins(2, 6);
    let init = c.mins(2, 5);
    let back = crash + down + init;
    c.set_duration(back + 45 * MIN);
    for g in 0..n {
        let plateau = c.plateau(g);
        c.busy(g, 0, Some(crash));
        c.train_process(g, 0, Some(crash), plateau);
        c.segment(
            g,
            Segment::new(crash, Some(back)).set("util_gpu", B::value(0.0)),
        );
        c.process(
            g,
            crash + down,
            None,
            B::ramp(2048.0f64.min(plateau / 2.0), plateau, Some(init), 16.0),
        );
        c.busy(g, back, None);
    }
    let rewind = c.int(100, 1000);
    c.param("crash_s", crash);
    c.param("back_s", back);
    c.param("rewind", rewind);
    let stall = Stall {
        from: crash,
        to: back,
        kind: "restart",
        rewind: Some(rewind),
    };
    c.training((0..n).collect(), None, vec![stall]);
}

/// Training goes on while the scrape of its series has a 5–15 min gap.
fn prom_gap(c: &mut Ctx, n: usize) {
    c.busy_fleet();
    let from = c.mins(30, 70);
    let len = c.mins(5, 15);
    c.param("gap_s", from);
    c.param("gap_len_s", len);
    let stall = Stall {
        from,
        to: from + len,
        kind: "gap",
        rewind: None,
    };
    c.training((0..n).collect(), None, vec![stall]);
}

/// XID 13 (an application error) and XID 31 (a page fault) on busy GPUs: not critical.
fn xid_benign(c: &mut Ctx, n: usize) {
    c.busy_fleet();
    let d = c.text.duration;
    for xid in [13, 31] {
        let g = c.rng.usize(..n);
        let at = c.int(10 * MIN, d - 20 * MIN);
        c.text.events.push(XidAt::once(g, at, xid));
    }
}
