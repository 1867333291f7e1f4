//! Per-GPU timelines: the metrics a segment can set, the flattening of overlapping segments into
//! sorted pieces, and the energy track (prefix sums of power at piece boundaries).
//!
//! Invariants:
//! - A track's pieces are sorted, disjoint, and cover `[0, u64::MAX)`; a piece holds the signal
//!   of the last segment (in file order) that sets the metric there, or `None` for "derived
//!   default". Lookup is a binary search: O(log segments), independent of the tick.
//! - The energy track covers `[0, u64::MAX)` with explicit power signals; `cum_mj[i]` is the
//!   exact closed-form energy of all ticks before piece `i` (energy of tick `t` is
//!   `power_W(t) * tick_ms` mJ), so `energy(t)` costs one lookup plus one closed-form sum.

use crate::behaviour::{Shape, Signal};
use crate::values::{RawBehaviour, RawShape};

/// Every metric a timeline segment can set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    UtilGpu,
    UtilMem,
    MemUsed,
    Temp,
    Power,
    Fan,
    SmClock,
    MemClock,
    PcieTx,
    PcieRx,
    PcieGen,
    PcieWidth,
    Pstate,
    Throttle,
    EccCorrected,
    EccUncorrected,
    RemappedCorr,
    RemappedUnc,
    RemapPending,
    RetiredSbe,
    RetiredDbe,
    RetiredPending,
    /// GPM's tensor-pipe activity (% of the interval), Hopper and later.
    TensorActive,
    /// A row remap failed (0 or 1).
    RemapFailure,
    /// GPM's SM activity, SM occupancy and DRAM bandwidth use (% of the interval), Hopper
    /// and later.
    SmActive,
    SmOccupancy,
    DramActive,
    /// The recovery action the driver asks for (`nvmlDeviceGpuRecoveryAction_t`, 0–7).
    RecoveryAction,
    /// The NVLinks that are down, as a bitmask (bit N: link N).
    NvlinkDown,
    /// NVLink error counters, totals over the GPU's links (flow-control CRC, data CRC,
    /// replays, recoveries).
    NvlinkCrcFlit,
    NvlinkCrcData,
    NvlinkReplay,
    NvlinkRecovery,
    /// The fabric registration's state (`nvmlGpuFabricState_t`: 1 not started, 2 in
    /// progress, 3 completed) and its status once completed (an `nvmlReturn_t`).
    FabricState,
    FabricStatus,
}

pub const METRIC_COUNT: usize = 35;

impl Metric {
    /// Stable number for noise keys and track indexing.
    pub fn id(self) -> usize {
        self as usize
    }

    /// The (min, max) a value written for this metric must stay within, before noise.
    pub fn bounds(self) -> (f64, f64) {
        match self {
            Metric::UtilGpu
            | Metric::UtilMem
            | Metric::Fan
            | Metric::TensorActive
            | Metric::SmActive
            | Metric::SmOccupancy
            | Metric::DramActive => (0.0, 100.0),
            Metric::Temp => (0.0, 150.0),
            Metric::PcieGen => (1.0, 6.0),
            Metric::PcieWidth => (1.0, 32.0),
            Metric::Pstate => (0.0, 15.0),
            Metric::RecoveryAction => (0.0, 7.0),
            Metric::NvlinkDown => (0.0, f64::from(u32::MAX)),
            Metric::FabricState => (1.0, 3.0),
            Metric::FabricStatus => (0.0, 999.0),
            _ => (0.0, f64::MAX),
        }
    }
}

/// A span of ticks `[start, end)` and what the metric does there.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Piece {
    pub start: u64,
    pub end: u64,
    pub signal: Option<Signal>,
}

/// Sorted, disjoint pieces covering all ticks.
#[derive(Debug, Clone, PartialEq)]
pub struct Track(pub Vec<Piece>);

impl Default for Track {
    fn default() -> Self {
        Track(vec![Piece {
            start: 0,
            end: u64::MAX,
            signal: None,
        }])
    }
}

impl Track {
    /// Let `signal` rule `[start, end)`, cutting whatever was there.
    pub fn overlay(&mut self, start: u64, end: u64, signal: Signal) {
        if start >= end {
            return;
        }
        let mut out = Vec::with_capacity(self.0.len() + 2);
        for p in &self.0 {
            if p.end <= start || p.start >= end {
                out.push(*p);
                continue;
            }
            if p.start < start {
                out.push(Piece { end: start, ..*p });
            }
            if p.end > end {
                out.push(Piece { start: end, ..*p });
            }
        }
        out.push(Piece {
            start,
            end,
            signal: Some(signal),
        });
        out.sort_by_key(|p| p.start);
        self.0 = out;
    }

    /// The piece containing `tick`.
    pub fn at(&self, tick: u64) -> &Piece {
        let i = self.0.partition_point(|p| p.end <= tick);
        // The pieces cover [0, u64::MAX); only tick == u64::MAX falls past the end.
        &self.0[i.min(self.0.len() - 1)]
    }
}

/// Power with its energy prefix sums.
#[derive(Debug, Clone, PartialEq)]
pub struct EnergyTrack {
    pub spans: Vec<(u64, u64, Signal)>,
    pub cum_mj: Vec<f64>,
    pub tick_ms: f64,
}

impl EnergyTrack {
    /// Build from `(start, end, power signal in W)` spans covering all ticks in order.
    pub fn new(spans: Vec<(u64, u64, Signal)>, tick_ms: u64) -> EnergyTrack {
        let tick_ms = tick_ms as f64;
        let mut cum = 0.0;
        let mut cum_mj = Vec::with_capacity(spans.len());
        for &(start, end, sig) in &spans {
            cum_mj.push(cum);
            if end != u64::MAX {
                cum += sig.sum(start, end) * tick_ms;
            }
        }
        EnergyTrack {
            spans,
            cum_mj,
            tick_ms,
        }
    }

    fn index(&self, tick: u64) -> usize {
        let i = self.spans.partition_point(|(_, end, _)| *end <= tick);
        i.min(self.spans.len().saturating_sub(1))
    }

    /// Power in W at `tick`, unclamped.
    pub fn power_w(&self, tick: u64) -> f64 {
        self.spans
            .get(self.index(tick))
            .map_or(0.0, |(_, _, s)| s.value(tick))
    }

    /// Energy in mJ of ticks `[0, tick)`.
    pub fn energy_mj(&self, tick: u64) -> f64 {
        let i = self.index(tick);
        match self.spans.get(i) {
            Some((start, _, s)) => self.cum_mj[i] + s.sum(*start, tick.max(*start)) * self.tick_ms,
            None => 0.0,
        }
    }
}

/// Convert a written behaviour into a signal.
///
/// `origin` is the tick the shape starts at; `span` the segment length in ticks when the segment
/// has an end (the default ramp length); `scale` converts scenario units (MiB) to state units.
pub fn to_signal(
    raw: &RawBehaviour,
    origin: u64,
    span: Option<u64>,
    tick_ms: u64,
    scale: f64,
    noise_key: u64,
) -> Result<Signal, String> {
    let ticks = |ms: u64| ms / tick_ms;
    // A periodic shape's period in ticks: at least one.
    let period_ticks = |shape: &str| match raw.period.map_or(0, |p| ticks(p.0)) {
        0 => Err(format!(
            "the {shape} period is shorter than one tick ({tick_ms} ms)"
        )),
        p => Ok(p),
    };
    let delay = raw.delay.map_or(0, |d| ticks(d.0));
    let shape = match raw.shape {
        RawShape::Value(v) => Shape::Const(v),
        RawShape::Ramp(from, to) => {
            let over = match (raw.over, span) {
                (Some(o), _) => ticks(o.0),
                (None, Some(s)) => s.saturating_sub(delay),
                (None, None) => {
                    return Err(
                        "a ramp without an end needs `over` (how long it takes, e.g. \
                                `over = \"10m\"`), or give the segment a `to`"
                            .into(),
                    );
                }
            };
            Shape::Ramp {
                from,
                to,
                over: over.max(1),
                delay,
            }
        }
        RawShape::Sawtooth(low, high) => {
            let period = period_ticks("sawtooth")?;
            Shape::Sawtooth {
                low,
                high,
                period,
                delay,
            }
        }
        RawShape::Pulse(low, high) => {
            let period = period_ticks("pulse")?;
            let width = raw.width.map_or(0, |w| ticks(w.0));
            if width == 0 || width >= period {
                return Err(format!(
                    "the pulse's width must be at least one tick ({tick_ms} ms) and shorter \
                     than its period by one"
                ));
            }
            Shape::Pulse {
                low,
                high,
                period,
                width,
                delay,
            }
        }
    };
    let base = Signal {
        c0: 0.0,
        c1: 1.0,
        shape,
        origin,
        noise_amp: raw.noise,
        noise_key,
    };
    Ok(base.affine(0.0, scale))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlay_cuts_and_last_wins() {
        let mut t = Track::default();
        t.overlay(10, 20, Signal::constant(1.0));
        t.overlay(15, 30, Signal::constant(2.0));
        t.overlay(0, 5, Signal::constant(3.0));
        let spans: Vec<(u64, u64, Option<f64>)> =
            t.0.iter()
                .map(|p| (p.start, p.end, p.signal.map(|s| s.base(0))))
                .collect();
        assert_eq!(
            spans,
            vec![
                (0, 5, Some(3.0)),
                (5, 10, None),
                (10, 15, Some(1.0)),
                (15, 30, Some(2.0)),
                (30, u64::MAX, None)
            ]
        );
        assert_eq!(t.at(12).signal.map(|s| s.base(12)), Some(1.0));
        assert_eq!(t.at(u64::MAX).end, u64::MAX);
    }

    #[test]
    fn energy_is_prefix_sum_of_power() {
        let ramp = Signal {
            shape: Shape::Ramp {
                from: 100.0,
                to: 300.0,
                over: 10,
                delay: 0,
            },
            origin: 5,
            ..Signal::constant(0.0)
        };
        let e = EnergyTrack::new(
            vec![
                (0, 5, Signal::constant(50.0)),
                (5, 40, ramp),
                (40, u64::MAX, Signal::constant(70.0)),
            ],
            1000,
        );
        let mut acc = 0.0;
        for t in 0..100 {
            assert!((e.energy_mj(t) - acc).abs() < 1e-6, "tick {t}");
            acc += e.power_w(t) * 1000.0;
        }
    }
}
