//! The one text form of times and durations, shared by every stage and front end (the
//! bottom of the house: it imports nothing of gpuwatch but the timestamp type).
//!
//! Invariants: times are UTC and say so where a reader could doubt it; a time chrono cannot
//! represent prints as its millisecond number, never as a made-up date; durations never
//! print a negative amount (0 instead).

use std::time::Duration;

use crate::model::TsMs;

/// A duration in the two largest units: `42s`, `5m 3s`, `2h 15m` (alert texts, logs).
pub fn duration(ms: i64) -> String {
    let s = ms.max(0) / 1000;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m {}s", s / 60, s % 60),
        _ => format!("{}h {}m", s / 3600, s / 60 % 60),
    }
}

/// A duration in every unit, whole seconds: `1h 4m 10s`; under a second `250ms`, nothing `0s`
/// (tables of alert durations).
pub fn duration_words(ms: i64) -> String {
    if ms <= 0 {
        return "0s".into();
    }
    if ms < 1000 {
        return format!("{ms}ms");
    }
    humantime::format_duration(Duration::from_secs((ms / 1000) as u64)).to_string()
}

/// RFC 3339 UTC with milliseconds: `2026-11-30T18:02:11.250Z` (JSON, payloads).
pub fn rfc3339_ms(ms: TsMs) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_else(|| ms.to_string())
}

/// `2026-11-30 14:05:07`, UTC (table cells under a header that says UTC).
pub fn utc_seconds(ms: TsMs) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S").to_string())
        .unwrap_or_else(|| ms.to_string())
}

/// `2026-11-30 14:05:07 UTC` (sentences, messages).
pub fn utc_label(ms: TsMs) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
        .unwrap_or_else(|| ms.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_form_each() {
        assert_eq!(duration(42_900), "42s");
        assert_eq!(duration(303_000), "5m 3s");
        assert_eq!(duration(8_100_000), "2h 15m");
        assert_eq!(duration(-5), "0s");
        assert_eq!(duration_words(3_725_000), "1h 2m 5s");
        assert_eq!(duration_words(250), "250ms");
        assert_eq!(duration_words(0), "0s");
        let t = 1_796_063_459_250;
        assert_eq!(rfc3339_ms(t), "2026-11-30T18:30:59.250Z");
        assert_eq!(utc_seconds(t), "2026-11-30 18:30:59");
        assert_eq!(utc_label(t), "2026-11-30 18:30:59 UTC");
        assert_eq!(rfc3339_ms(i64::MAX), i64::MAX.to_string());
    }
}
