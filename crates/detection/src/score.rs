//! Matching alerts to labels, and the tallies the report is made of.
//!
//! Rules of the match (one run = one case in one shape):
//! - A label is detected by the first alert of its rule on its GPU that fires in
//!   `[onset − 60 s, onset + max delay]`; its delay is fire time − onset. Each alert detects
//!   at most one label.
//! - Every other firing alert is a false positive of its rule: wrong GPU, wrong time, or a
//!   repeat of a detected label's rule on its GPU inside the label's window (flapping), which
//!   is also counted as a repeat.
//! - A label the shape cannot observe is skipped (neither detected nor missed); alerts are
//!   scored whatever the shape, so an alert no shape should give is still a false positive.

use serde::Serialize;

use crate::cases::Label;
use crate::run::Alert;

/// Seconds before the onset an alert may fire and still count (sampling and evaluation
/// jitter).
pub const EARLY_S: f64 = 60.0;

/// A detected label.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Match {
    /// Index into the run's labels.
    pub label: usize,
    /// Index into the run's alerts.
    pub alert: usize,
    pub delay_s: f64,
}

/// The score of one run.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RunScore {
    pub matches: Vec<Match>,
    /// Observable labels without a matching alert.
    pub missed: Vec<usize>,
    /// Alerts that detect nothing.
    pub false_positives: Vec<usize>,
    /// The false positives that repeat a detected label's rule and GPU inside its window
    /// (flapping), as alert indices.
    pub repeats: Vec<usize>,
}

fn in_window(l: &Label, a: &Alert) -> bool {
    a.rule == l.rule
        && a.gpu == Some(l.gpu)
        && a.at_s >= l.onset_s as f64 - EARLY_S
        && a.at_s <= (l.onset_s + l.max_delay_s) as f64
}

/// Scores one run: `observable[i]` says whether label `i` can be seen in the run's shape.
pub fn score(labels: &[Label], observable: &[bool], alerts: &[Alert]) -> RunScore {
    let mut order: Vec<usize> = (0..alerts.len()).collect();
    order.sort_by(|&a, &b| alerts[a].at_s.total_cmp(&alerts[b].at_s));
    let mut used = vec![false; alerts.len()];
    let mut out = RunScore::default();
    let mut by_onset: Vec<usize> = (0..labels.len()).filter(|&i| observable[i]).collect();
    by_onset.sort_by_key(|&i| labels[i].onset_s);
    for i in by_onset {
        let l = &labels[i];
        match order
            .iter()
            .copied()
            .find(|&a| !used[a] && in_window(l, &alerts[a]))
        {
            Some(a) => {
                used[a] = true;
                out.matches.push(Match {
                    label: i,
                    alert: a,
                    delay_s: alerts[a].at_s - l.onset_s as f64,
                });
            }
            None => out.missed.push(i),
        }
    }
    out.false_positives = order.into_iter().filter(|&a| !used[a]).collect();
    out.repeats = out
        .false_positives
        .iter()
        .copied()
        .filter(|&a| {
            out.matches
                .iter()
                .any(|m| in_window(&labels[m.label], &alerts[a]))
        })
        .collect();
    out.matches.sort_by_key(|m| m.label);
    out
}

/// Counts over many runs, for one rule (or family) in one set of shapes.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Tally {
    pub tp: usize,
    pub fn_: usize,
    pub fp: usize,
    pub repeats: usize,
    pub delays_s: Vec<f64>,
}

impl Tally {
    pub fn add(&mut self, other: &Tally) {
        self.tp += other.tp;
        self.fn_ += other.fn_;
        self.fp += other.fp;
        self.repeats += other.repeats;
        self.delays_s.extend_from_slice(&other.delays_s);
    }

    /// TP / (TP + FN); `None` without labels.
    pub fn recall(&self) -> Option<f64> {
        ratio(self.tp, self.tp + self.fn_)
    }

    /// TP / (TP + FP); `None` without alerts.
    pub fn precision(&self) -> Option<f64> {
        ratio(self.tp, self.tp + self.fp)
    }

    pub fn median_delay_s(&self) -> Option<f64> {
        median(&self.delays_s)
    }

    pub fn max_delay_s(&self) -> Option<f64> {
        self.delays_s.iter().copied().reduce(f64::max)
    }

    pub fn is_empty(&self) -> bool {
        self.tp + self.fn_ + self.fp == 0
    }
}

fn ratio(a: usize, b: usize) -> Option<f64> {
    (b > 0).then(|| a as f64 / b as f64)
}

/// The median of `xs` (the mean of the middle two for an even count).
pub fn median(xs: &[f64]) -> Option<f64> {
    if xs.is_empty() {
        return None;
    }
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cases::Need;

    fn alert(rule: &str, gpu: Option<u32>, at_s: f64) -> Alert {
        Alert {
            rule: rule.into(),
            gpu,
            pid: None,
            at_s,
            severity: "warning".into(),
            summary: String::new(),
        }
    }

    #[test]
    fn first_alert_in_the_window_detects_and_the_rest_are_false_positives() {
        let labels = vec![
            Label::new("training_hang", 0, 3000, 1200, Need::Any),
            Label::new("training_hang", 1, 3000, 1200, Need::Any),
            Label::new("gpu_idle", 2, 1000, 600, Need::Any),
        ];
        let alerts = vec![
            alert("training_hang", Some(0), 3300.0), // TP gpu 0, 300 s
            alert("training_hang", Some(0), 3500.0), // repeat inside the window: FP
            alert("training_hang", Some(1), 2950.0), // TP gpu 1, 50 s early
            alert("gpu_idle", Some(2), 1700.0),      // too late: FP, label missed
            alert("gpu_idle", Some(3), 1100.0),      // wrong GPU: FP
            alert("training_metrics_unavailable", None, 10.0), // host alert: FP
        ];
        let s = score(&labels, &[true, true, true], &alerts);
        assert_eq!(
            s.matches,
            vec![
                Match {
                    label: 0,
                    alert: 0,
                    delay_s: 300.0
                },
                Match {
                    label: 1,
                    alert: 2,
                    delay_s: -50.0
                },
            ]
        );
        assert_eq!(s.missed, vec![2]);
        assert_eq!(s.false_positives, vec![5, 4, 3, 1]);
        assert_eq!(s.repeats, vec![1]);
    }

    #[test]
    fn unobservable_labels_are_skipped_but_their_alerts_still_count() {
        let labels = vec![
            Label::new("gpu_memory_orphaned", 0, 600, 1800, Need::Processes),
            Label::new("gpu_idle", 0, 600, 2700, Need::NoProcesses),
        ];
        let alerts = vec![alert("gpu_memory_orphaned", Some(0), 900.0)];
        let s = score(&labels, &[false, true], &alerts);
        assert!(s.matches.is_empty());
        assert_eq!(s.missed, vec![1]);
        assert_eq!(s.false_positives, vec![0]);
        // Too early by more than a minute is not a detection.
        let early = score(
            &labels,
            &[true, false],
            &[alert("gpu_memory_orphaned", Some(0), 539.0)],
        );
        assert_eq!((early.matches.len(), early.missed.len()), (0, 1));
    }

    #[test]
    fn tallies_give_recall_precision_and_delays() {
        let mut t = Tally {
            tp: 3,
            fn_: 1,
            fp: 1,
            repeats: 0,
            delays_s: vec![60.0, 300.0, 120.0],
        };
        assert_eq!(t.recall(), Some(0.75));
        assert_eq!(t.precision(), Some(0.75));
        assert_eq!(t.median_delay_s(), Some(120.0));
        assert_eq!(t.max_delay_s(), Some(300.0));
        t.add(&Tally {
            tp: 0,
            fn_: 0,
            fp: 2,
            repeats: 1,
            delays_s: vec![30.0],
        });
        assert_eq!(t.precision(), Some(0.5));
        assert_eq!(t.median_delay_s(), Some(90.0));
        assert_eq!(Tally::default().recall(), None);
        assert_eq!(median(&[]), None);
    }
}
