//! Fault families: scenarios in which a correct monitor raises specific alerts, with their
//! labels (rule, GPU, onset, the longest delay that still counts, what a shape must record).
//! This file holds the workload faults (idle, leak, hang, heat, orphaned memory);
//! `hardware.rs` the driver and hardware ones, the XID patterns and stragglers.
//!
//! Invariants: a fault's onset is the moment the fault is observable in the data (the idle
//! start, the first tick within 3 °C of slowdown, ...), computed from the sim where noise
//! decides it; the scenario runs long enough after the onset for the label's window (leaks
//! excepted: their window lasts until the GPU is full, which may be after the end). Variant 0
//! puts single-GPU faults on GPU 0, so the one-GPU `minimal` shape can observe them.

use super::hardware;
use super::workload::{Ctx, LEAK_RATES, MODELS, first_tick, power_at, temp_at};
use super::{Draft, Family, Label, LeakInfo, Need};
use crate::scenario::{B, ScenarioText, Segment, Stall};

const MIN: u64 = 60;

pub(super) fn build(family: Family, c: &mut Ctx) -> Result<Draft, String> {
    match family {
        Family::IdleHeld => idle_held(c),
        Family::IdleContext => idle_context(c),
        Family::Leak => leak(c),
        Family::NcclHang => hang(c, false),
        Family::ZeroHang => hang(c, true),
        Family::Overheat => overheat(c),
        Family::Orphaned => orphaned(c),
        Family::Wedged => hardware::wedged(c),
        Family::Lost => hardware::lost(c),
        Family::Xid => hardware::xid(c),
        Family::Ecc => hardware::ecc(c),
        Family::Straggler => hardware::straggler(c),
        Family::XidAppCrash => hardware::xid_app_crash(c),
        Family::XidRepeat => hardware::xid_repeat(c),
        Family::XidStorm => hardware::xid_storm(c),
        Family::NvlinkDown => super::fabric::nvlink_down(c),
        Family::NvlinkErrors => super::fabric::nvlink_errors(c),
        Family::FabricNotReady => super::fabric::fabric_not_ready(c),
        other => Err(format!("{} is not a fault family", other.name())),
    }
}

/// The GPU a single-GPU fault is on: 0 in variant 0, else any.
pub(super) fn fault_gpu(c: &mut Ctx, n: usize) -> usize {
    let g = if c.variant == 0 { 0 } else { c.rng.usize(..n) };
    c.param("fault_gpu", g);
    g
}

/// Every GPU but `g` busy with its own training process (no job metrics).
pub(super) fn background(c: &mut Ctx, except: usize) {
    for g in (0..c.text.gpus.len()).filter(|&g| g != except) {
        c.busy(g, 0, None);
        let plateau = c.plateau(g);
        c.train_process(g, 0, None, plateau);
    }
}

/// A model, a GPU count and the GPUs; returns the count.
pub(super) fn gpus(c: &mut Ctx, models: &[&'static str], counts: &[usize]) -> usize {
    let model = c.pick(models);
    let n = c.pick(counts);
    c.add_gpus(model, n);
    n
}

fn compile(c: &Ctx) -> Result<gpuwatch_sim::Scenario, String> {
    ScenarioText::compile(&c.text.toml(), &c.text.name)
}

fn idle_held(c: &mut Ctx) -> Result<Draft, String> {
    let busy_for = c.mins(20, if c.quick { 30 } else { 50 });
    c.set_duration(busy_for + 65 * MIN);
    let n = gpus(c, &MODELS, &[1, 2, 4]);
    let g = fault_gpu(c, n);
    background(c, g);
    let held = (c.real(8.0, 70.0) * 1024.0)
        .min(c.room_mib(g) * 0.85)
        .round();
    let util = c.real(40.0, 95.0);
    let noise = c.real(3.0, 6.0);
    let idle_noise = c.real(0.0, 1.0);
    c.segment(
        g,
        Segment::new(0, Some(busy_for)).set("util_gpu", B::noisy(util, noise)),
    );
    c.segment(
        g,
        Segment::new(busy_for, None).set("util_gpu", B::noisy(0.0, idle_noise)),
    );
    c.train_process(g, 0, None, held);
    c.param("held_mib", held);
    c.param("busy_util", util);
    Ok(Draft {
        labels: vec![Label::new("gpu_idle", g, busy_for, 45 * MIN, Need::Any)],
        ..Draft::default()
    })
}

fn idle_context(c: &mut Ctx) -> Result<Draft, String> {
    let idle_for = if c.quick { 85 } else { 150 } * MIN;
    c.set_duration(5 * MIN + idle_for);
    let n = gpus(c, &MODELS, &[1, 2, 4]);
    let g = fault_gpu(c, n);
    background(c, g);
    let total = c.int(900, 1200) as f64;
    let baseline = c.text.gpus[g].baseline_mib.unwrap_or(450) as f64;
    let light = c.real(5.0, 20.0);
    let idle_noise = c.real(0.0, 1.0);
    c.segment(
        g,
        Segment::new(0, Some(5 * MIN)).set("util_gpu", B::noisy(light, 3.0)),
    );
    c.segment(
        g,
        Segment::new(5 * MIN, None).set("util_gpu", B::noisy(0.0, idle_noise)),
    );
    c.process(g, 0, None, B::noisy((total - baseline).max(64.0), 2.0));
    c.param("mem_used_mib", total);
    Ok(Draft {
        labels: vec![Label::new("gpu_idle", g, 5 * MIN, 45 * MIN, Need::Any)],
        ..Draft::default()
    })
}

fn leak(c: &mut Ctx) -> Result<Draft, String> {
    let rate = LEAK_RATES[c.variant as usize % LEAK_RATES.len()];
    let onset = c.mins(20, if c.quick { 30 } else { 60 });
    c.set_duration(onset + 40 * MIN);
    let n = gpus(c, &MODELS, &[1, 2, 4]);
    let g = fault_gpu(c, n);
    background(c, g);
    c.busy(g, 0, None);
    let room = c.room_mib(g);
    let plateau = (room * c.real(0.3, 0.5)).round();
    let warmup = c.mins(1, 5);
    let baseline = c.text.gpus[g].baseline_mib.unwrap_or(450) as f64;
    // The warm-up is seen in the GPU's memory; the process holds its plateau from the start
    // (one behaviour per process: the plateau, then the leak after `delay`).
    c.segment(
        g,
        Segment::new(0, Some(warmup)).set(
            "mem_used_mib",
            B::ramp(baseline + plateau / 4.0, baseline + plateau, None, 8.0),
        ),
    );
    let over = ((room - plateau) / f64::from(rate) * 60.0).ceil() as u64;
    c.process(
        g,
        0,
        None,
        B::Ramp {
            from: plateau,
            to: room,
            over: Some(over.max(1)),
            delay: Some(onset),
            noise: (plateau * 0.005).max(8.0),
        },
    );
    let s = compile(c)?;
    let total = s.gpu(g).memory_total_bytes - s.gpu(g).memory_reserved_bytes;
    let full_s = first_tick(&s, g, onset, over + 3600, |st| {
        st.mem_used_bytes as f64 >= 0.99 * total as f64
    })
    .ok_or("the leak never fills the GPU")?;
    c.param("rate_mib_per_min", rate);
    c.param("plateau_mib", plateau);
    c.param("full_s", full_s);
    Ok(Draft {
        labels: vec![Label::new(
            "gpu_memory_leak",
            g,
            onset,
            full_s.saturating_sub(onset),
            Need::Any,
        )],
        leak: Some(LeakInfo {
            rate_mib_per_min: rate,
            full_s,
        }),
        ..Draft::default()
    })
}

/// A data-parallel job that hangs: NCCL (util pinned at 100, power near idle) or a host-side
/// hang with util at 0; half of the variants take healthy checkpoints before. Host-side hangs
/// come in the three shapes real jobs show them: the whole job's input stalls (every GPU at
/// 0 %), one rank's host side stalls while the other ranks wait for it in a collective (that
/// GPU at 0 %, the others spinning at 100 % and low power), or a single-GPU job stalls.
fn hang(c: &mut Ctx, zero: bool) -> Result<Draft, String> {
    let at = c.mins(50, if c.quick { 60 } else { 90 });
    let d = c.set_duration(at + 25 * MIN);
    let form = if zero { c.variant % 3 } else { 0 };
    c.param(
        "host_side",
        ["whole job", "one rank", "single GPU"][form as usize],
    );
    let n = gpus(c, &MODELS, if form == 2 { &[1] } else { &[2, 4, 8] });
    let stalled_rank = c.int(0, n as u64 - 1) as usize;
    for g in 0..n {
        c.busy(g, 0, None);
        let plateau = c.plateau(g);
        c.train_process(g, 0, None, plateau);
    }
    let with_checkpoints = (c.variant + u32::from(zero)).is_multiple_of(2);
    let mut stalls = Vec::new();
    if with_checkpoints {
        let first = c.mins(20, 30);
        for (from, to) in c.schedule(first, (20, 30), (1, 4), at - 5 * MIN) {
            let util = c.checkpoint_util();
            for g in 0..n {
                c.segment(g, Segment::new(from, Some(to)).set("util_gpu", util));
            }
            stalls.push(Stall {
                from,
                to,
                kind: "checkpoint",
                rewind: None,
            });
        }
    }
    c.param("checkpoints", stalls.len());
    stalls.push(Stall {
        from: at,
        to: d * 10,
        kind: "hang",
        rewind: None,
    });
    let noise = c.real(0.0, 1.0);
    for g in 0..n {
        let idle = c.preset(g).idle_power_w;
        let at_zero = zero && (form != 1 || g == stalled_rank);
        let seg = if at_zero {
            Segment::new(at, None).set("util_gpu", B::noisy(0.0, noise))
        } else {
            // Near idle: 5–25 W above it, at most a quarter of the way to training power
            // (a T4 idles at 9 W and trains at ~67 W).
            let range = power_at(c.preset(g), 95.0) - idle;
            let power = idle + c.real(5.0, 25.0).min(0.25 * range);
            Segment::new(at, None)
                .set("util_gpu", B::noisy(100.0, noise))
                .set("power_w", B::noisy(power, 1.0))
        };
        c.segment(g, seg);
    }
    c.training((0..n).collect(), None, stalls);
    c.param("hang_s", at);
    let labels = (0..n)
        .map(|g| Label::new("training_hang", g, at, 20 * MIN, Need::Any))
        .collect();
    Ok(Draft {
        labels,
        ..Draft::default()
    })
}

fn overheat(c: &mut Ctx) -> Result<Draft, String> {
    let start = c.mins(30, if c.quick { 40 } else { 60 });
    let ramp = c.mins(5, 10);
    let (hold, cool) = (20 * MIN, 5 * MIN);
    c.set_duration(start + ramp + hold + cool + 15 * MIN);
    let n = gpus(c, &MODELS, &[1, 2, 4]);
    let g = fault_gpu(c, n);
    background(c, g);
    c.busy(g, 0, None);
    let plateau = c.plateau(g);
    c.train_process(g, 0, None, plateau);
    let p = c.preset(g);
    let slowdown = f64::from(p.temp_slowdown);
    let normal = temp_at(p, 95.0).round();
    let peak = slowdown - 1.0 + c.int(0, 3) as f64;
    let top = start + ramp;
    let down = top + hold;
    c.segment(
        g,
        Segment::new(start, Some(top)).set("temp", B::ramp(normal, peak, None, 0.5)),
    );
    c.segment(
        g,
        Segment::new(top, Some(down)).set("temp", B::noisy(peak, 0.5)),
    );
    c.segment(
        g,
        Segment::new(down, Some(down + cool)).set("temp", B::ramp(peak, normal, None, 0.5)),
    );
    if peak >= slowdown {
        // Throttled while the noise-free ramp is at or above the slowdown threshold.
        let frac = (slowdown - normal) / (peak - normal);
        let up = start + (ramp as f64 * frac).ceil() as u64;
        let off = down + (cool as f64 * (1.0 - frac)).floor() as u64 + 1;
        c.segment(
            g,
            Segment::new(up, Some(off)).raw("throttle", "[\"sw_thermal\"]"),
        );
    }
    let s = compile(c)?;
    let onset = first_tick(&s, g, start, ramp + hold, |st| {
        f64::from(st.temp_c) >= slowdown - 3.0
    })
    .ok_or("the temperature never comes within 3 °C of slowdown")?;
    c.param("peak_c", peak);
    c.param("ramp_s", ramp);
    Ok(Draft {
        labels: vec![Label::new(
            "gpu_overheating",
            g,
            onset,
            10 * MIN,
            Need::Temp,
        )],
        ..Draft::default()
    })
}

fn orphaned(c: &mut Ctx) -> Result<Draft, String> {
    let exit = c.mins(30, if c.quick { 40 } else { 60 });
    c.set_duration(exit + 50 * MIN);
    let n = gpus(c, &MODELS, &[1, 2, 4]);
    let g = fault_gpu(c, n);
    background(c, g);
    let held = (c.real(10.0, 40.0) * 1024.0)
        .min(c.room_mib(g) * 0.8)
        .round();
    let baseline = c.text.gpus[g].baseline_mib.unwrap_or(450) as f64;
    c.busy(g, 0, Some(exit));
    c.train_process(g, 0, Some(exit), held);
    c.segment(
        g,
        Segment::new(exit, None)
            .set("util_gpu", B::value(0.0))
            .set("mem_used_mib", B::noisy(baseline + held, 2.0)),
    );
    c.param("held_mib", held);
    c.param("exit_s", exit);
    Ok(Draft {
        labels: vec![
            Label::new("gpu_memory_orphaned", g, exit, 30 * MIN, Need::Processes),
            Label::new("gpu_idle", g, exit, 45 * MIN, Need::NoProcesses),
        ],
        ..Draft::default()
    })
}
