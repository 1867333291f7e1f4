//! The ledger's state machine: observations of each GPU in time order → interval rows (as
//! [`Op`]s for the store) and the held / idle-held counters of `/metrics`.
//!
//! Invariants:
//! - A row opens only when a holder or a state changes, at a UTC midnight, or after a gap;
//!   a GPU not observed for longer than its staleness bound gets an `unknown` row for the gap.
//! - An idle onset found `w` late moves the start of idle-held back (one [`Op::IdleSince`]),
//!   never before the current holders took the GPU; the counters move the same time from busy
//!   to idle-held, so they only grow.
//! - Counters count from the ledger's start (a restart is a counter reset, as Prometheus
//!   expects); a holder's counters are dropped a day after it last held the GPU.

use std::collections::{BTreeMap, HashMap};

use super::{Holder, State, day_start};
use crate::model::TsMs;

/// Counters of a holder not seen for this long are dropped.
const COUNTER_TTL_MS: i64 = 86_400_000;

/// One change of the stored ledger.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// A new open interval of `gpu_id` from `start`: one row per holder (share 1/rows).
    Open {
        gpu_id: i64,
        start: TsMs,
        rows: Vec<(Holder, State)>,
    },
    /// The interval of `gpu_id` that started at `start` ends at `end`.
    Close { gpu_id: i64, start: TsMs, end: TsMs },
    /// From `onset` on, the GPU's busy rows of known holders were idle-held (the row that
    /// spans `onset` is split there).
    IdleSince { gpu_id: i64, onset: TsMs },
}

/// What the evaluator learned about one GPU at one time.
#[derive(Debug, Clone, PartialEq)]
pub struct Observation {
    pub gpu_id: i64,
    pub t: TsMs,
    pub label: GpuLabel,
    /// One row per holder, sorted (one unnamed holder when none is known).
    pub rows: Vec<(Holder, State)>,
    /// Idle by the window test: when the idle began (the window's start).
    pub idle_since: Option<TsMs>,
}

/// An interval still open, as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct OpenRow {
    pub start: TsMs,
    pub rows: Vec<(Holder, State)>,
}

#[derive(Debug, Clone, Default)]
struct Book {
    open: Option<OpenRow>,
    /// The last observation (or, after a restart, the GPU's newest stored sample).
    last_t: Option<TsMs>,
    /// Since when the current holders have held the GPU (no idle onset before it).
    run_start: TsMs,
}

/// A holder's time on one GPU since the ledger started (ms).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Counter {
    pub held_ms: f64,
    pub idle_held_ms: f64,
    pub last_t: TsMs,
}

/// What `/metrics` shows of a GPU the counters name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GpuLabel {
    pub index: Option<u32>,
    pub uuid: String,
    pub model: Option<String>,
    /// A MIG instance: its GPU instance id, profile and parent GPU's UUID.
    pub mig: Option<crate::model::MigInstance>,
}

#[derive(Debug, Default)]
pub struct Ledger {
    books: HashMap<i64, Book>,
    counters: BTreeMap<(i64, Holder), Counter>,
    gpus: HashMap<i64, GpuLabel>,
}

fn held(h: &Holder, s: State) -> bool {
    h.is_known() && s != State::Free
}

impl Ledger {
    /// A ledger that continues the stored open rows: `open` per GPU, with the GPU's newest
    /// sample time (the end of what the last run saw).
    pub fn resume(open: Vec<(i64, OpenRow, Option<TsMs>)>) -> Ledger {
        let mut l = Ledger::default();
        for (gpu_id, row, last) in open {
            l.books.insert(
                gpu_id,
                Book {
                    run_start: row.start,
                    last_t: last.map(|t| t.max(row.start)).or(Some(row.start)),
                    open: Some(row),
                },
            );
        }
        l
    }

    /// Records one GPU's observation at `o.t`; `stale_ms`: a longer silence is a gap.
    pub fn observe(&mut self, o: Observation, stale_ms: i64, ops: &mut Vec<Op>) {
        let gpu_id = o.gpu_id;
        let t = o.t;
        self.gpus.entry(gpu_id).or_insert_with(|| o.label.clone());
        let book = self.books.entry(gpu_id).or_default();
        if book.last_t.is_some_and(|l| t <= l) {
            return;
        }
        // Time since the last observation: the open rows' states held it; or a gap.
        match (book.last_t, &book.open) {
            (Some(last), _) if t - last > stale_ms => {
                if let Some(open) = book.open.take() {
                    let open = split_days(gpu_id, open, last, ops);
                    close_at(gpu_id, open, last, ops);
                }
                let rows = vec![(Holder::default(), State::Unknown)];
                ops.push(Op::Open {
                    gpu_id,
                    start: last,
                    rows: rows.clone(),
                });
                let gap = split_days(gpu_id, OpenRow { start: last, rows }, t, ops);
                close_at(gpu_id, gap, t, ops);
            }
            (Some(last), Some(open)) => {
                let share = 1.0 / open.rows.len() as f64;
                for (h, s) in &open.rows {
                    if held(h, *s) {
                        let c = self.counters.entry((gpu_id, h.clone())).or_default();
                        let dt = (t - last) as f64 * share;
                        c.held_ms += dt;
                        if *s == State::IdleHeld {
                            c.idle_held_ms += dt;
                        }
                        c.last_t = t;
                    }
                }
            }
            _ => {}
        }
        book.last_t = Some(t);
        if let Some(open) = book.open.take() {
            book.open = Some(split_days(gpu_id, open, t, ops));
        }
        let same_holders = book.open.as_ref().is_some_and(|open| {
            open.rows.len() == o.rows.len()
                && open.rows.iter().zip(&o.rows).all(|(a, b)| a.0 == b.0)
        });
        if !same_holders {
            book.run_start = t;
        }
        // An idle onset seen late: idle-held from the onset on.
        if let (Some(since), true, Some(open)) = (o.idle_since, same_holders, book.open.as_mut())
            && open
                .rows
                .iter()
                .any(|(h, s)| h.is_known() && *s == State::Busy)
        {
            let onset = since.max(book.run_start);
            if onset < t {
                ops.push(Op::IdleSince { gpu_id, onset });
                let share = 1.0 / open.rows.len() as f64;
                for (h, s) in open.rows.iter_mut() {
                    if h.is_known() && *s == State::Busy {
                        *s = State::IdleHeld;
                        let c = self.counters.entry((gpu_id, h.clone())).or_default();
                        c.idle_held_ms += (t - onset) as f64 * share;
                    }
                }
                open.start = open.start.max(onset);
            }
        }
        if book.open.as_ref().map(|r| &r.rows) != Some(&o.rows) {
            if let Some(open) = book.open.take() {
                close_at(gpu_id, open, t, ops);
            }
            ops.push(Op::Open {
                gpu_id,
                start: t,
                rows: o.rows.clone(),
            });
            book.open = Some(OpenRow {
                start: t,
                rows: o.rows,
            });
        }
    }

    /// Closes every open row at its GPU's last observation (the end of an imported range:
    /// a later import must not stretch it).
    pub fn close_all(&mut self, ops: &mut Vec<Op>) {
        for (gpu_id, book) in &mut self.books {
            if let (Some(open), Some(last)) = (book.open.take(), book.last_t) {
                close_at(*gpu_id, open, last, ops);
            }
        }
    }

    /// The holders' counters, with their GPU; counters of holders gone for a day are dropped.
    pub fn counters(&mut self, now: TsMs) -> Vec<(GpuLabel, Holder, Counter)> {
        self.counters
            .retain(|_, c| now - c.last_t <= COUNTER_TTL_MS);
        self.counters
            .iter()
            .map(|((gpu, h), c)| {
                (
                    self.gpus.get(gpu).cloned().unwrap_or_default(),
                    h.clone(),
                    c.clone(),
                )
            })
            .collect()
    }
}

fn close_at(gpu_id: i64, open: OpenRow, end: TsMs, ops: &mut Vec<Op>) {
    ops.push(Op::Close {
        gpu_id,
        start: open.start,
        end,
    });
}

/// Closes `open` at each UTC midnight before `t` and opens it again there; returns the row
/// open at `t`.
fn split_days(gpu_id: i64, mut open: OpenRow, t: TsMs, ops: &mut Vec<Op>) -> OpenRow {
    loop {
        let midnight = day_start(open.start) + 86_400_000;
        if midnight > t {
            return open;
        }
        ops.push(Op::Close {
            gpu_id,
            start: open.start,
            end: midnight,
        });
        ops.push(Op::Open {
            gpu_id,
            start: midnight,
            rows: open.rows.clone(),
        });
        open.start = midnight;
    }
}

#[cfg(test)]
mod tests;
