//! The lifecycle of one alert instance: inactive → pending → firing → resolved, with `for`,
//! `keep_firing_for`, hysteresis and escalation.
//!
//! Invariants:
//! - `step` is a pure function of the previous state, the evaluation time and what the rule
//!   said; it never reads a clock.
//! - Pending becomes firing only after the condition held for `for` (time already pending
//!   counts, also across "keep last" evaluations); firing resolves only after the condition
//!   stopped holding for `keep_firing_for`.
//! - "Keep last" (no data or an error under that policy) changes nothing.

use std::time::Duration;

use crate::model::TsMs;
use crate::rules::rule::Severity;

/// What the rule said about the alert at one evaluation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The condition holds (or the rule maps missing data to alerting).
    True,
    /// It does not.
    False,
    /// Leave the state as it is.
    Keep,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Phase {
    #[default]
    Inactive,
    Pending,
    Firing,
}

/// The state of one alert instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AlertState {
    pub phase: Phase,
    /// When the condition started to hold (pending since).
    pub active_since: Option<TsMs>,
    /// When the alert fired.
    pub fired_at: Option<TsMs>,
    /// The last evaluation at which the condition held.
    pub last_true: Option<TsMs>,
    /// The first evaluation at which a firing alert's condition no longer held
    /// (`keep_firing_for` counts from here, as in Prometheus).
    pub kept_since: Option<TsMs>,
    pub severity: Option<Severity>,
}

/// A change worth telling people about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    Fired(Severity),
    /// Still firing, at another severity (up or down).
    Escalated {
        from: Option<Severity>,
        to: Severity,
    },
    Resolved,
}

/// The timing parameters of a rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Timing {
    pub for_: Duration,
    pub keep_firing_for: Duration,
}

impl AlertState {
    /// Whether `other` differs in anything worth saving: everything but `last_true`, which
    /// moves at every evaluation while the condition holds and decides nothing (the
    /// `keep_firing_for` count starts at `kept_since`), so saving it would write the database
    /// at every tick of a live alert.
    pub fn changed_from(&self, other: &AlertState) -> bool {
        AlertState {
            last_true: None,
            ..*self
        } != AlertState {
            last_true: None,
            ..*other
        }
    }

    /// Advances the state to time `t`. `severity` is the severity the condition asks for
    /// while it holds (escalation).
    pub fn step(
        &mut self,
        t: TsMs,
        verdict: Verdict,
        severity: Severity,
        timing: Timing,
    ) -> Option<Change> {
        let for_ms = timing.for_.as_millis() as i64;
        let keep_ms = timing.keep_firing_for.as_millis() as i64;
        match (self.phase, verdict) {
            (_, Verdict::Keep) => None,
            (Phase::Inactive, Verdict::False) => None,
            (Phase::Inactive, Verdict::True) => {
                *self = AlertState::default();
                self.active_since = Some(t);
                self.last_true = Some(t);
                self.phase = Phase::Pending;
                self.try_fire(t, for_ms, severity)
            }
            (Phase::Pending, Verdict::True) => {
                self.last_true = Some(t);
                self.try_fire(t, for_ms, severity)
            }
            (Phase::Pending, Verdict::False) => {
                *self = AlertState::default();
                None
            }
            (Phase::Firing, Verdict::True) => {
                self.last_true = Some(t);
                self.kept_since = None;
                if self.severity != Some(severity) {
                    let from = self.severity.replace(severity);
                    return Some(Change::Escalated { from, to: severity });
                }
                None
            }
            (Phase::Firing, Verdict::False) => {
                let since = *self.kept_since.get_or_insert(t);
                if t - since >= keep_ms {
                    // Inactive again; the rest stays for the resolved message.
                    self.phase = Phase::Inactive;
                    self.kept_since = None;
                    Some(Change::Resolved)
                } else {
                    None
                }
            }
        }
    }

    /// Time not observed (the wall clock stepped forward by `ms`) does not count towards
    /// `for` or `keep_firing_for`: the pending and keeping counts move by `ms`. True when the
    /// state changed.
    pub fn discount(&mut self, ms: i64) -> bool {
        let mut changed = false;
        if self.phase == Phase::Pending
            && let Some(a) = self.active_since.as_mut()
        {
            *a += ms;
            changed = true;
        }
        if let Some(k) = self.kept_since.as_mut() {
            *k += ms;
            changed = true;
        }
        changed
    }

    fn try_fire(&mut self, t: TsMs, for_ms: i64, severity: Severity) -> Option<Change> {
        let since = self.active_since.unwrap_or(t);
        if t - since >= for_ms {
            self.phase = Phase::Firing;
            self.fired_at = Some(t);
            self.severity = Some(severity);
            Some(Change::Fired(severity))
        } else {
            None
        }
    }

    pub fn is_firing(&self) -> bool {
        self.phase == Phase::Firing
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Verdict::{False, Keep, True};

    const W: Severity = Severity::Warning;

    fn run(verdicts: &[Verdict], timing: Timing) -> Vec<(i64, Change)> {
        let mut s = AlertState::default();
        verdicts
            .iter()
            .enumerate()
            .filter_map(|(i, v)| {
                s.step(i as i64 * 1000, *v, W, timing)
                    .map(|c| (i as i64, c))
            })
            .collect()
    }

    fn secs(f: u64, k: u64) -> Timing {
        Timing {
            for_: Duration::from_secs(f),
            keep_firing_for: Duration::from_secs(k),
        }
    }

    #[test]
    fn a_forward_clock_step_does_not_count_towards_for_or_keep_firing_for() {
        let t = Timing {
            for_: Duration::from_secs(30),
            keep_firing_for: Duration::from_secs(30),
        };
        let h = 3_600_000;
        let mut s = AlertState::default();
        assert_eq!(s.step(0, True, W, t), None);
        assert_eq!(s.step(10_000, True, W, t), None);
        // The wall clock jumps an hour ahead between two evaluations 1 s apart.
        assert!(s.discount(h));
        assert_eq!(
            s.step(h + 11_000, True, W, t),
            None,
            "11 s observed, not an hour"
        );
        assert_eq!(s.step(h + 30_000, True, W, t), Some(Change::Fired(W)));
        assert_eq!(s.step(h + 31_000, False, W, t), None);
        assert!(s.discount(h));
        assert_eq!(s.step(2 * h + 32_000, False, W, t), None);
        assert_eq!(s.step(2 * h + 61_000, False, W, t), Some(Change::Resolved));
        let mut idle = AlertState::default();
        assert!(!idle.discount(h), "nothing pending, nothing kept");
    }

    #[test]
    fn fires_after_for_and_resolves() {
        let v = [False, True, True, True, True, False, False];
        assert_eq!(
            run(&v, secs(2, 0)),
            vec![(3, Change::Fired(W)), (5, Change::Resolved)]
        );
    }

    #[test]
    fn zero_for_fires_at_once() {
        assert_eq!(
            run(&[True, False], secs(0, 0)),
            vec![(0, Change::Fired(W)), (1, Change::Resolved)]
        );
    }

    #[test]
    fn a_short_blip_never_fires() {
        assert_eq!(
            run(&[True, True, False, True, True, False], secs(2, 0)),
            vec![]
        );
    }

    #[test]
    fn keep_firing_for_bridges_gaps() {
        let v = [True, True, False, True, False, False, False, False];
        assert_eq!(
            run(&v, secs(1, 2)),
            vec![(1, Change::Fired(W)), (6, Change::Resolved)]
        );
    }

    #[test]
    fn keep_last_changes_nothing_and_pending_time_counts() {
        let v = [True, Keep, Keep, True, Keep, Keep, False];
        assert_eq!(
            run(&v, secs(3, 0)),
            vec![(3, Change::Fired(W)), (6, Change::Resolved)]
        );
    }

    #[test]
    fn escalation_is_reported() {
        let mut s = AlertState::default();
        let t = secs(0, 0);
        assert_eq!(s.step(0, True, W, t), Some(Change::Fired(W)));
        assert_eq!(
            s.step(1, True, Severity::Critical, t),
            Some(Change::Escalated {
                from: Some(W),
                to: Severity::Critical
            })
        );
        assert_eq!(s.step(2, True, Severity::Critical, t), None);
        assert_eq!(
            s.step(3, True, W, t),
            Some(Change::Escalated {
                from: Some(Severity::Critical),
                to: W
            })
        );
    }
}
