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
pub mod evidence;
pub mod facts;
pub mod followup;
pub mod incident;
pub mod llm;
pub mod prompt;
pub mod rank;
pub mod redact;
pub mod text;

use serde::Serialize;

use crate::model::TsMs;
pub use evidence::Derived;
use evidence::n0;
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

/// One finding of the GPU's hardware health (`gpuwatch status`, docs/HEALTH.md).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HealthFinding {
    pub code: String,
    pub severity: String,
    pub text: String,
    pub fix: String,
}

/// The GPU's hardware health at its newest sample.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HealthNote {
    /// ok | warn | fail | unknown
    pub status: String,
    /// The newest sample judged (`None`: none stored).
    pub at_ms: Option<TsMs>,
    pub findings: Vec<HealthFinding>,
    /// Checks that could not be made from that sample.
    pub not_checked: Vec<String>,
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
    /// The GPU's hardware health now (at its newest sample), as `gpuwatch status` judges it.
    pub health: Option<HealthNote>,
    /// Facts the analysis needed and the store does not hold.
    pub unknown: Vec<String>,
}

/// The analysis of the alert whose facts are `f`.
pub fn analyse(f: &Facts) -> Analysis {
    let d = Derived::of(f);
    let evidence = evidence::evidence(f, &d);
    let changes = changes::detect(f);
    let (incident, incident_summary) = incident::incident(f);
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
        health: f.health.as_ref().map(|(at, h)| HealthNote {
            status: h.status.as_str().to_string(),
            at_ms: *at,
            findings: h
                .reasons
                .iter()
                .map(|r| HealthFinding {
                    code: r.code.to_string(),
                    severity: r.severity.as_str().to_string(),
                    text: r.text.clone(),
                    fix: r.fix.clone(),
                })
                .collect(),
            not_checked: h.not_checked.iter().map(|c| c.to_string()).collect(),
        }),
        unknown,
    }
}

fn confidence_word(c: Confidence) -> &'static str {
    match c {
        Confidence::Likely => "likely",
        Confidence::Possible => "possible",
    }
}

#[cfg(test)]
mod tests;
