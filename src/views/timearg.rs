//! Time arguments shared by the post-mortem commands: a point in time is RFC 3339
//! (`2026-11-30T14:05:00Z`, `2026-11-30T15:05:00+01:00`) or unix seconds (`1764511500`,
//! `1764511500.25`); a range is `--since 2h` (up to now) or `--from T --to T`.
//!
//! Invariant: every error says what was given and what is accepted.

use std::time::Duration;

use crate::model::TsMs;

/// Parses RFC 3339 or unix seconds into epoch milliseconds.
pub fn parse_time(s: &str) -> Result<TsMs, String> {
    let t = s.trim();
    if let Ok(secs) = t.parse::<f64>()
        && secs.is_finite()
        && secs >= 0.0
    {
        return Ok((secs * 1000.0).round() as TsMs);
    }
    chrono::DateTime::parse_from_rfc3339(t)
        .map(|d| d.timestamp_millis())
        .map_err(|e| {
            format!(
                "{s:?} is not a time ({e}): write RFC 3339 like 2026-11-30T14:05:00Z or unix seconds like 1764511500"
            )
        })
}

/// `--since` / `--from` / `--to`, flattened into a command's arguments.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct RangeArgs {
    /// How far back from now (e.g. 20m, 2h, 7d). Conflicts with --from.
    #[arg(long, value_parser = humantime::parse_duration, conflicts_with = "from")]
    pub since: Option<Duration>,
    /// Start: RFC 3339 or unix seconds.
    #[arg(long, value_name = "T", value_parser = parse_time)]
    pub from: Option<TsMs>,
    /// End: RFC 3339 or unix seconds [default: now].
    #[arg(long, value_name = "T", value_parser = parse_time)]
    pub to: Option<TsMs>,
}

/// When `[from, to)` holds no data of `host` (every host when `None`): what to say instead of
/// an empty table — where the data is, and the `--from`/`--to` that show it. `None` when the
/// window overlaps the stored data.
/// `raw_only`: the command reads raw samples only (`export`), so minutes that only rollups
/// still hold are no data to it, and are said to be where `history` shows them.
pub fn no_data_hint(
    conn: &rusqlite::Connection,
    host: Option<&str>,
    from: TsMs,
    to: TsMs,
    raw_only: bool,
) -> Result<Option<String>, crate::store::StoreError> {
    use crate::format::utc_label as utc;
    let of = host.map_or(String::new(), |h| format!(" of host {h}"));
    let Some((first, last)) = crate::store::history::data_span(conn, host)? else {
        return Ok(Some(format!(
            "the database holds no samples{of} yet (`gpuwatch run` or `gpuwatch import` fills it)"
        )));
    };
    match crate::store::history::data_in(conn, host, from, to)? {
        (true, _) => return Ok(None),
        (false, true) if !raw_only => return Ok(None),
        (false, true) => {
            return Ok(Some(format!(
                "no raw samples{of} from {} to {}: only their 1-minute rollups are kept that far back (`retention`); `gpuwatch history` shows them",
                utc(from),
                utc(to)
            )));
        }
        (false, false) => {}
    }
    let rfc = |ms: TsMs| {
        chrono::DateTime::from_timestamp_millis(ms)
            .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
            .unwrap_or_else(|| (ms / 1000).to_string())
    };
    Ok(Some(format!(
        "no samples{of} from {} to {}; the data spans {} to {}: try --from {} --to {}",
        utc(from),
        utc(to),
        utc(first),
        utc(last),
        rfc(first),
        rfc(last + 1000)
    )))
}

impl RangeArgs {
    /// The range as (from, to) in ms; `default_since` when neither --since nor --from given.
    pub fn resolve(&self, now: TsMs, default_since: Duration) -> Result<(TsMs, TsMs), String> {
        let to = self.to.unwrap_or(now);
        let from = match (self.from, self.since) {
            (Some(f), _) => f,
            (None, Some(d)) => to - d.as_millis() as i64,
            (None, None) => to - default_since.as_millis() as i64,
        };
        if from >= to {
            return Err(format!(
                "the range is empty: --from {} is not before --to {}",
                crate::format::utc_label(from),
                crate::format::utc_label(to)
            ));
        }
        Ok((from, to))
    }

    /// [`RangeArgs::resolve`] when a range was given (`--since`, `--from` or `--to`), `None`
    /// for "everything stored"; the default span is a day.
    pub fn resolve_given(&self, now: TsMs) -> Result<Option<(TsMs, TsMs)>, String> {
        if self.since.is_none() && self.from.is_none() && self.to.is_none() {
            return Ok(None);
        }
        self.resolve(now, Duration::from_secs(86_400)).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_and_ranges() {
        assert_eq!(parse_time("1764511500").unwrap(), 1_764_511_500_000);
        assert_eq!(parse_time("1764511500.25").unwrap(), 1_764_511_500_250);
        assert_eq!(
            parse_time("2026-11-30T14:05:00Z").unwrap(),
            1_796_047_500_000
        );
        assert_eq!(
            parse_time("2026-11-30T15:05:00+01:00").unwrap(),
            parse_time("2026-11-30T14:05:00Z").unwrap()
        );
        assert!(parse_time("yesterday").unwrap_err().contains("RFC 3339"));
        let r = RangeArgs {
            since: Some(Duration::from_secs(7200)),
            ..Default::default()
        };
        assert_eq!(
            r.resolve(10_000_000, Duration::from_secs(60)).unwrap(),
            (2_800_000, 10_000_000)
        );
        let r = RangeArgs {
            from: Some(5),
            to: Some(5),
            ..Default::default()
        };
        assert!(r.resolve(0, Duration::ZERO).unwrap_err().contains("empty"));
    }
}
