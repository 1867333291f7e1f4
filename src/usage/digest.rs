//! The usage digest (`[usage] digest`, docs/USAGE.md): when a period ends, the period's top
//! idle holders and total, as one document every receiver renders its own way (Slack text
//! blocks, an email with a chart, the JSON itself to webhooks). Not an alert: never sent to
//! Alertmanager.
//!
//! Invariants: periods end at `hour` (on `day`, weekly) in the configured time zone, so a
//! daylight-saving change moves the UTC time, never the local one; a period is identified by
//! its end (the store records each once).

use chrono::{Datelike, Duration as ChronoDuration, NaiveDate, TimeZone};
use serde::{Deserialize, Serialize};

use super::summary::{Sums, Usage};
use crate::config::usage::{Digest, DigestPeriod};
use crate::model::TsMs;

/// One period: `[from_ms, to_ms)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Period {
    pub from_ms: TsMs,
    pub to_ms: TsMs,
}

/// The local time `hour:00` of `date` in `d.zone` (the first valid one across a gap).
fn at(d: &Digest, date: NaiveDate) -> Option<TsMs> {
    for h in d.hour..24 {
        let local = date.and_hms_opt(h, 0, 0)?;
        if let Some(t) = d.zone.from_local_datetime(&local).earliest() {
            return Some(t.timestamp_millis());
        }
    }
    None
}

/// The period that ended last at or before `t`.
pub fn last_period(d: &Digest, t: TsMs) -> Option<Period> {
    let now = d.zone.timestamp_millis_opt(t).single()?;
    let mut date = now.date_naive();
    let step = match d.period {
        DigestPeriod::Daily => 1,
        DigestPeriod::Weekly => 7,
    };
    if d.period == DigestPeriod::Weekly {
        let back = (7 + date.weekday().num_days_from_monday() as i64
            - d.day.num_days_from_monday() as i64)
            % 7;
        date -= ChronoDuration::days(back);
    }
    let mut end = at(d, date)?;
    if end > t {
        date -= ChronoDuration::days(step);
        end = at(d, date)?;
    }
    let start = at(d, date - ChronoDuration::days(step))?;
    Some(Period {
        from_ms: start,
        to_ms: end,
    })
}

/// A holder's (or the total's) line of the digest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DigestLine {
    /// Who (`namespace/pod`, `slurm job 777 (carol)`, `user dave`); absent in the total.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub holder: Option<String>,
    pub gpus: usize,
    pub held_hours: f64,
    pub busy_hours: f64,
    pub idle_held_hours: f64,
    pub idle_share: Option<f64>,
    pub longest_idle_s: f64,
    pub cost: Option<f64>,
    pub idle_cost: Option<f64>,
}

/// The digest as queued, delivered and posted to webhooks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DigestMsg {
    /// Always `usage_digest`.
    pub kind: String,
    /// `weekly` or `daily`.
    pub period: String,
    pub host: String,
    pub from: String,
    pub to: String,
    pub from_ms: TsMs,
    pub to_ms: TsMs,
    pub currency: Option<String>,
    pub total: DigestLine,
    /// The top idle holders, most idle GPU-hours first.
    pub top: Vec<DigestLine>,
}

fn round(v: f64, places: i32) -> f64 {
    let k = 10f64.powi(places);
    (v * k).round() / k
}

fn line(holder: Option<String>, s: &Sums) -> DigestLine {
    DigestLine {
        holder,
        gpus: s.gpus.len(),
        held_hours: round(s.held / 3600.0, 3),
        busy_hours: round(s.busy / 3600.0, 3),
        idle_held_hours: round(s.idle_held / 3600.0, 3),
        idle_share: s.idle_share().map(|v| round(v, 4)),
        longest_idle_s: s.longest_idle_ms as f64 / 1000.0,
        cost: s.cost.map(|c| round(c, 2)),
        idle_cost: s.idle_cost.map(|c| round(c, 2)),
    }
}

/// The digest of `usage` (summed by holder) over `p`: the `top` holders with idle time.
pub fn build(usage: &Usage, host: &str, period: DigestPeriod, p: Period, top: usize) -> DigestMsg {
    DigestMsg {
        kind: "usage_digest".into(),
        period: period.as_str().into(),
        host: host.to_string(),
        from: crate::format::rfc3339_ms(p.from_ms),
        to: crate::format::rfc3339_ms(p.to_ms),
        from_ms: p.from_ms,
        to_ms: p.to_ms,
        currency: usage.currency.clone(),
        total: line(None, &usage.total),
        top: usage
            .rows
            .iter()
            .filter(|r| r.sums.idle_held > 0.0)
            .take(top)
            .map(|r| {
                line(
                    Some(r.key.value().unwrap_or("(holder unknown)").to_string()),
                    &r.sums,
                )
            })
            .collect(),
    }
}

impl DigestMsg {
    /// The subject / title line.
    pub fn title(&self) -> String {
        format!(
            "GPU usage on {}, {} to {}: {:.1} idle GPU-hours of {:.1} held",
            self.host,
            &self.from[..10.min(self.from.len())],
            &self.to[..10.min(self.to.len())],
            self.total.idle_held_hours,
            self.total.held_hours
        )
    }

    /// The digest in plain text (email's text part, Slack's fallback).
    pub fn text(&self) -> String {
        let money = |c: Option<f64>| match (c, &self.currency) {
            (Some(c), Some(cur)) => format!(", {c:.2} {cur} idle"),
            _ => String::new(),
        };
        let mut out = format!("{}\n", self.title());
        if self.top.is_empty() {
            out.push_str("No GPU was held idle.\n");
        }
        for (i, l) in self.top.iter().enumerate() {
            out.push_str(&format!(
                "{}. {}: {:.1} idle of {:.1} held GPU-hours ({:.0} %), longest idle {}{}\n",
                i + 1,
                l.holder.as_deref().unwrap_or("-"),
                l.idle_held_hours,
                l.held_hours,
                l.idle_share.unwrap_or(0.0) * 100.0,
                crate::format::duration((l.longest_idle_s * 1000.0) as i64),
                money(l.idle_cost)
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn weekly(zone: &str) -> Digest {
        Digest {
            period: DigestPeriod::Weekly,
            day: chrono::Weekday::Mon,
            hour: 9,
            zone: zone.parse().unwrap(),
            top: 10,
        }
    }

    fn ms(s: &str) -> TsMs {
        chrono::DateTime::parse_from_rfc3339(s)
            .unwrap()
            .timestamp_millis()
    }

    #[test]
    fn a_week_ends_at_the_configured_local_hour() {
        let d = weekly("UTC");
        // Wednesday 2026-12-02: the last week ended Monday 2026-11-30 09:00.
        let p = last_period(&d, ms("2026-12-02T12:00:00Z")).unwrap();
        assert_eq!(p.to_ms, ms("2026-11-30T09:00:00Z"));
        assert_eq!(p.from_ms, ms("2026-11-23T09:00:00Z"));
        // Monday 08:59 is still in the week before; 09:00 ends it.
        let p = last_period(&d, ms("2026-11-30T08:59:00Z")).unwrap();
        assert_eq!(p.to_ms, ms("2026-11-23T09:00:00Z"));
        let p = last_period(&d, ms("2026-11-30T09:00:00Z")).unwrap();
        assert_eq!(p.to_ms, ms("2026-11-30T09:00:00Z"));
        // Berlin: 09:00 local is 08:00 UTC in winter, 07:00 in summer; the week across the
        // change is an hour short.
        let d = weekly("Europe/Berlin");
        let p = last_period(&d, ms("2026-03-31T12:00:00Z")).unwrap();
        assert_eq!(p.to_ms, ms("2026-03-30T07:00:00Z"));
        assert_eq!(p.from_ms, ms("2026-03-23T08:00:00Z"));
        let daily = Digest {
            period: DigestPeriod::Daily,
            ..weekly("UTC")
        };
        let p = last_period(&daily, ms("2026-12-02T08:00:00Z")).unwrap();
        assert_eq!(p.to_ms, ms("2026-12-01T09:00:00Z"));
        assert_eq!(p.from_ms, ms("2026-11-30T09:00:00Z"));
    }
}
