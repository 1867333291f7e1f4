//! Incident analysis: turns an alert and what the store holds around it into "likely cause,
//! evidence, what to do" — rule-based always ([`analyse`]), a language model on request
//! ([`llm`], `gpuwatch incident ID --explain`).
//!
//! Owns: gathering the facts ([`facts`]), what changed just before the alert ([`changes`]),
//! the ranked causes with next steps ([`rank`]), the one serialised form ([`Analysis`], the
//! JSON of `incident --format json`) and its text ([`text`]), the prompt made of the same
//! facts ([`prompt`]), redaction ([`redact`]) and the OpenAI-compatible client ([`llm`]), and the follow-up message after a Slack delivery
//! ([`followup`]).
//!
//! Invariants:
//! - Deterministic: the same database gives the same analysis (no clock, no randomness).
//! - Unknown is not zero: a fact the store does not hold is listed in `unknown`, never
//!   guessed; a cause is only proposed from facts that are present.
//! - Text and JSON are two renderings of one [`Analysis`] value.

pub mod changes;
pub mod facts;
pub mod followup;
pub mod llm;
pub mod prompt;
pub mod rank;
pub mod redact;
pub mod text;

use serde::Serialize;

use crate::model::TsMs;
use crate::store::analysis::GpuPoint;
pub use facts::Facts;

/// How far before an alert's start the analysis in a message looks.
pub const MESSAGE_WINDOW_MS: TsMs = 20 * 60_000;
/// The most characters of the analysis line in a message.
pub const MESSAGE_LINE_CHARS: usize = 300;

/// The rule-based analysis of alert `id` in one line for a message (the sender adds it to
/// Slack and email messages); `None` (logged) when it cannot be read: a message is never
/// held back for its analysis.
pub fn message_line(conn: &rusqlite::Connection, id: i64) -> Option<String> {
    let row = match crate::store::incident::alert(conn, id) {
        Ok(r) => r?,
        Err(e) => {
            tracing::debug!(alert = id, error = %e, "no analysis line: cannot read the alert");
            return None;
        }
    };
    match Facts::gather(conn, &row, MESSAGE_WINDOW_MS) {
        Ok(f) => Some(text::one_line(&analyse(&f), MESSAGE_LINE_CHARS)),
        Err(e) => {
            tracing::debug!(alert = id, error = %e, "no analysis line");
            None
        }
    }
}

/// One fact the alert rests on, with its value.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Evidence {
    pub fact: String,
    pub value: String,
}

/// What kind of change happened near the alert.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    ProcessExit,
    ProcessStart,
    PodChange,
    Xid,
    Event,
    Throttle,
    PowerLimit,
    SampleGap,
    StepStopped,
    StepRestart,
    PrometheusGap,
}

/// Something that changed in the window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Change {
    pub at_ms: TsMs,
    /// Seconds relative to the alert's start (negative: before).
    pub offset_s: i64,
    pub kind: ChangeKind,
    pub text: String,
}

/// An alert of the same incident (same rule, host and job), with when its GPU stopped.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Member {
    pub alert_id: i64,
    pub gpu: Option<i64>,
    pub pod: Option<String>,
    pub started_ms: TsMs,
    /// When the GPU left its working state (power under half its busy level, or
    /// utilisation under 10 %), from its samples; `None`: the samples do not say.
    pub stopped_ms: Option<TsMs>,
}

/// Another alert of the host around the same time.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RelatedAlert {
    pub alert_id: i64,
    pub rule: String,
    pub gpu: Option<i64>,
    pub state: String,
    pub started_ms: TsMs,
}

/// How sure a cause is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Confidence {
    Possible,
    Likely,
}

/// One candidate cause.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Cause {
    pub cause: String,
    pub confidence: Confidence,
    /// The facts behind it.
    pub because: Vec<String>,
    pub next_steps: Vec<String>,
    /// Orders the causes (higher first); not shown.
    #[serde(skip)]
    pub score: u32,
}

/// An XID of the window with the catalogue's words.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct XidNote {
    pub code: i64,
    pub at_ms: TsMs,
    pub meaning: Option<String>,
    pub cause: Option<String>,
    pub action: Option<String>,
}

/// The rule-based analysis of one alert.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Analysis {
    pub alert_id: i64,
    pub rule: String,
    /// One line: the top cause and its first reason.
    pub headline: String,
    /// Most likely first.
    pub causes: Vec<Cause>,
    pub evidence: Vec<Evidence>,
    pub changes: Vec<Change>,
    /// This alert and the alerts grouped with it (one incident), by when they stopped.
    pub incident: Vec<Member>,
    /// For a group: how it reads ("all 8 ranks stalled within 20 s; GPU 5 stopped first").
    pub incident_summary: Option<String>,
    pub related: Vec<RelatedAlert>,
    pub xids: Vec<XidNote>,
    /// Facts the analysis needed and the store does not hold.
    pub unknown: Vec<String>,
}

/// The analysis of the alert whose facts are `f`.
pub fn analyse(f: &Facts) -> Analysis {
    let d = Derived::of(f);
    let evidence = evidence(f, &d);
    let changes = changes::detect(f);
    let (incident, incident_summary) = rank::incident(f);
    let xids = f
        .events
        .iter()
        .filter(|e| e.kind == "xid")
        .filter_map(|e| e.code.map(|c| (c, e.ts_ms)))
        .map(|(code, at_ms)| {
            let e = crate::xid::lookup(code);
            XidNote {
                code,
                at_ms,
                meaning: Some(
                    e.map_or(crate::xid::NOT_IN_CATALOGUE, |e| e.meaning)
                        .to_string(),
                ),
                cause: e.map(|e| e.cause.to_string()),
                action: e.map(|e| e.action.as_str().to_string()),
            }
        })
        .collect::<Vec<_>>();
    let mut unknown = d.unknown.clone();
    let causes = rank::causes(
        f,
        &d,
        &changes,
        (&incident, incident_summary.as_deref()),
        &mut unknown,
    );
    // In time order, then by GPU and rule (ids of alerts raised at one tick vary by run).
    let mut related: Vec<RelatedAlert> = f
        .related
        .iter()
        .map(|a| RelatedAlert {
            alert_id: a.alert_id,
            rule: a.rule.clone(),
            gpu: a.gpu_index,
            state: a.state.clone(),
            started_ms: a.active_since_ms,
        })
        .collect();
    related.sort_by(|a, b| {
        (a.started_ms, a.gpu, &a.rule, a.alert_id).cmp(&(b.started_ms, b.gpu, &b.rule, b.alert_id))
    });
    let headline = match causes.first() {
        Some(c) => match c.because.first() {
            Some(b) => format!("{} cause: {} ({b})", confidence_word(c.confidence), c.cause),
            None => format!("{} cause: {}", confidence_word(c.confidence), c.cause),
        },
        None => "no cause could be derived from the stored facts".to_string(),
    };
    Analysis {
        alert_id: f.alert.alert_id,
        rule: f.alert.rule.clone(),
        headline,
        causes,
        evidence,
        changes,
        incident,
        incident_summary,
        related,
        xids,
        unknown,
    }
}

fn confidence_word(c: Confidence) -> &'static str {
    match c {
        Confidence::Likely => "likely",
        Confidence::Possible => "possible",
    }
}

/// Summary numbers of the alert's GPU, before and during.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Derived {
    pub util_before: Option<f64>,
    pub util_during: Option<f64>,
    pub util_during_min: Option<f64>,
    pub power_during: Option<f64>,
    /// The 90th percentile of power before the start: the GPU's busy level.
    pub power_busy: Option<f64>,
    pub power_limit: Option<f64>,
    pub temp_during_max: Option<f64>,
    pub temp_before: Option<f64>,
    pub clock_before: Option<f64>,
    pub clock_during: Option<f64>,
    pub mem_during_max: Option<f64>,
    /// Clock-event reasons set in some sample during the alert.
    pub throttle_during: Vec<&'static str>,
    /// When the joined step series last changed before the start, and its value then.
    pub step_stopped: Option<(TsMs, f64)>,
    pub unknown: Vec<String>,
}

pub(crate) fn avg(v: impl Iterator<Item = f64>) -> Option<f64> {
    let (n, s) = v.fold((0u64, 0.0), |(n, s), x| (n + 1, s + x));
    (n > 0).then(|| s / n as f64)
}

pub(crate) fn quantile(mut v: Vec<f64>, q: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let i = ((v.len() - 1) as f64 * q).round() as usize;
    v.get(i).copied()
}

fn field(points: &[GpuPoint], f: fn(&GpuPoint) -> Option<f64>) -> Vec<f64> {
    points
        .iter()
        .filter(|p| p.status == 0)
        .filter_map(f)
        .collect()
}

impl Derived {
    pub fn of(f: &Facts) -> Derived {
        let split = f.points.partition_point(|p| p.ts_ms < f.start);
        let (before, during) = f.points.split_at(split);
        let mut d = Derived {
            util_before: avg(field(before, |p| p.util).into_iter()),
            util_during: avg(field(during, |p| p.util).into_iter()),
            util_during_min: field(during, |p| p.util).into_iter().reduce(f64::min),
            power_during: avg(field(during, |p| p.power_w).into_iter()),
            power_busy: quantile(field(before, |p| p.power_w), 0.9),
            power_limit: f.points.iter().rev().find_map(|p| p.power_limit_w),
            temp_during_max: field(during, |p| p.temp).into_iter().reduce(f64::max),
            temp_before: avg(field(before, |p| p.temp).into_iter()),
            clock_before: avg(field(before, |p| p.clock_sm).into_iter()),
            clock_during: avg(field(during, |p| p.clock_sm).into_iter()),
            mem_during_max: field(during, |p| p.mem_used_mib)
                .into_iter()
                .reduce(f64::max),
            ..Default::default()
        };
        let mask = during
            .iter()
            .filter_map(|p| p.throttle)
            .fold(0, |a, b| a | b);
        d.throttle_during = crate::gpu_health::clock_events::decode(mask)
            .filter(|r| r.bit != crate::gpu_health::clock_events::GPU_IDLE)
            .map(|r| r.name)
            .collect();
        d.step_stopped = f
            .training
            .iter()
            .filter(|t| t.name == "training_step")
            .filter_map(|t| {
                let at = t.last_change_before()?;
                let v = t.before.iter().find(|p| p.0 == at)?.1;
                Some((at, v))
            })
            .min_by_key(|x| x.0)
            // A step that moved in the last minute before the start has not stopped.
            .filter(|(at, _)| f.start - at >= 60_000);
        if during.is_empty() {
            d.unknown.push(
                "no GPU samples during the alert (the GPU did not answer, or the data aged out)"
                    .into(),
            );
        } else if d.power_during.is_none() {
            d.unknown
                .push("power was not read: the power signature cannot be checked".into());
        }
        if during.iter().all(|p| p.throttle.is_none()) && !during.is_empty() {
            d.unknown
                .push("clock-event (throttle) reasons were not read".into());
        }
        d
    }

    /// Power during the alert as a share of the power limit, in %.
    pub fn power_pct(&self) -> Option<f64> {
        match (self.power_during, self.power_limit) {
            (Some(p), Some(l)) if l > 0.0 => Some(100.0 * p / l),
            _ => None,
        }
    }
}

/// `12.3` → "12", unknown → "unknown".
pub(crate) fn n0(v: Option<f64>) -> String {
    v.map_or("unknown".to_string(), |v| format!("{v:.0}"))
}

fn evidence(f: &Facts, d: &Derived) -> Vec<Evidence> {
    let mut e = Vec::new();
    let mut push = |fact: &str, value: String| {
        e.push(Evidence {
            fact: fact.to_string(),
            value,
        })
    };
    if let Some(s) = &f.alert.summary {
        push("alert", s.clone());
    }
    push(
        "utilisation",
        format!(
            "{} % during (min {}), {} % before",
            n0(d.util_during),
            n0(d.util_during_min),
            n0(d.util_before)
        ),
    );
    let pct = d.power_pct().map_or(String::new(), |p| {
        format!(
            " ({p:.0} % of the {:.0} W limit)",
            d.power_limit.unwrap_or(0.0)
        )
    });
    push(
        "power",
        format!(
            "{} W during{pct}, busy level before {} W",
            n0(d.power_during),
            n0(d.power_busy)
        ),
    );
    push(
        "temperature",
        format!(
            "max {} °C during, {} °C before",
            n0(d.temp_during_max),
            n0(d.temp_before)
        ),
    );
    push(
        "SM clock",
        format!(
            "{} MHz during, {} MHz before",
            n0(d.clock_during),
            n0(d.clock_before)
        ),
    );
    if !d.throttle_during.is_empty() {
        push("clock-event reasons during", d.throttle_during.join(", "));
    }
    if let Some((at, v)) = d.step_stopped {
        push(
            "training step",
            format!(
                "last advanced at {} (value {v:.0}), {} s before the alert started",
                text::hms(at),
                (f.start - at) / 1000
            ),
        );
    }
    e
}
