//! The importers' one reader of times: the wall-clock timestamps of logs (nvidia-smi's
//! `2024/05/01 12:00:00.000`, with `-` or `T`), RFC 3339 times with their own offset, and
//! Unix epoch seconds, milliseconds, microseconds or nanoseconds (what `date +%s`-style
//! loggers write), with the unit from a column header (`timestamp [ms]`) or by size.
//!
//! Invariants:
//! - A wall time without a zone is read in the zone given by [`Zone`]; one that does not exist
//!   there (skipped by a DST change) is an error, an ambiguous one takes the interpretation
//!   that keeps the log running forward. An epoch number and an RFC 3339 time with an offset
//!   are absolute: the zone does not apply.
//! - An epoch number outside 2000..2100 is an error, never a time in 1970 (`20240501` is a
//!   date written without separators, not 20 million seconds).

use chrono::{NaiveDate, NaiveDateTime, TimeZone, Timelike};

use crate::model::TsMs;

/// The unit of an epoch timestamp column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EpochUnit {
    Seconds,
    Millis,
    Micros,
    Nanos,
}

impl EpochUnit {
    /// The unit a header cell names (`timestamp [ms]`): `s`, `ms`, `us`/`µs`, `ns`; `None` for
    /// anything else.
    pub fn from_header(unit: &str) -> Option<Self> {
        match unit.trim() {
            "s" | "sec" | "seconds" => Some(Self::Seconds),
            "ms" => Some(Self::Millis),
            "us" | "µs" => Some(Self::Micros),
            "ns" => Some(Self::Nanos),
            _ => None,
        }
    }

    /// The unit as a column header names it (`timestamp [ms]`).
    pub fn header(self) -> &'static str {
        match self {
            Self::Seconds => "s",
            Self::Millis => "ms",
            Self::Micros => "us",
            Self::Nanos => "ns",
        }
    }

    /// Milliseconds per unit.
    fn ms(self) -> f64 {
        match self {
            Self::Seconds => 1000.0,
            Self::Millis => 1.0,
            Self::Micros => 1e-3,
            Self::Nanos => 1e-6,
        }
    }

    /// The unit of an epoch number without one, by its size (a time between 2000 and 2100 has
    /// 10 digits in seconds, 13 in ms, 16 in µs, 19 in ns).
    fn by_size(v: f64) -> Self {
        if v < 1e11 {
            Self::Seconds
        } else if v < 1e14 {
            Self::Millis
        } else if v < 1e17 {
            Self::Micros
        } else {
            Self::Nanos
        }
    }
}

/// 2000-01-01 and 2100-01-01 UTC, in ms: the times an epoch number may stand for.
const EPOCH_FROM_MS: i64 = 946_684_800_000;
const EPOCH_TO_MS: i64 = 4_102_444_800_000;

/// Epoch ms of an epoch number cell (`1764189075`, `1764189075.25`, `1764189075123`); `None`
/// when the cell is not a plain number.
pub fn epoch_ms(s: &str, unit: Option<EpochUnit>) -> Option<Result<TsMs, String>> {
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    if int.is_empty() || !int.bytes().chain(frac.bytes()).all(|c| c.is_ascii_digit()) {
        return None;
    }
    let v: f64 = s.parse().ok()?;
    let unit = unit.unwrap_or_else(|| EpochUnit::by_size(v));
    let ms = (v * unit.ms()).round();
    if !(EPOCH_FROM_MS as f64..EPOCH_TO_MS as f64).contains(&ms) {
        return Some(Err(format!(
            "`{s}` read as Unix epoch {} is not between 2000 and 2100 (write times like \
             2024/05/01 12:00:00.000, or epoch seconds or milliseconds)",
            match unit {
                EpochUnit::Seconds => "seconds",
                EpochUnit::Millis => "milliseconds",
                EpochUnit::Micros => "microseconds",
                EpochUnit::Nanos => "nanoseconds",
            }
        )));
    }
    Some(Ok(ms as TsMs))
}

/// The zone timestamps are read in.
#[derive(Debug, Clone)]
pub enum Zone {
    /// The importing machine's local zone (`TZ`, `/etc/localtime`).
    Local,
    /// An IANA zone (`--tz Europe/Berlin`).
    Named(chrono_tz::Tz),
}

impl Zone {
    /// `None` is the local zone; otherwise an IANA name.
    pub fn parse(name: Option<&str>) -> Result<Self, String> {
        match name {
            None => Ok(Zone::Local),
            Some(n) => n.parse::<chrono_tz::Tz>().map(Zone::Named).map_err(|_| {
                format!("unknown time zone `{n}`: use an IANA name such as UTC, Europe/Berlin or America/New_York")
            }),
        }
    }

    /// The zone's name for messages.
    pub fn describe(&self) -> String {
        match self {
            Zone::Local => "the local zone".to_string(),
            Zone::Named(tz) => tz.name().to_string(),
        }
    }

    /// `local time - UTC` in ms at this wall time: (earliest, latest) interpretation; they
    /// differ in the hour a daylight-saving change repeats.
    fn offset_ms(&self, naive: NaiveDateTime) -> Result<(i64, i64), String> {
        fn pick<Tz: TimeZone>(r: chrono::LocalResult<chrono::DateTime<Tz>>) -> Option<(i64, i64)> {
            match r {
                chrono::LocalResult::Single(d) => {
                    Some((d.timestamp_millis(), d.timestamp_millis()))
                }
                chrono::LocalResult::Ambiguous(a, b) => {
                    let (a, b) = (a.timestamp_millis(), b.timestamp_millis());
                    Some((a.min(b), a.max(b)))
                }
                chrono::LocalResult::None => None,
            }
        }
        let utc = match self {
            Zone::Local => pick(chrono::Local.from_local_datetime(&naive)),
            Zone::Named(tz) => pick(tz.from_local_datetime(&naive)),
        };
        let wall = naive.and_utc().timestamp_millis();
        utc.map(|(early, late)| (wall - early, wall - late))
            .ok_or_else(|| {
                format!(
                    "{naive} does not exist in {} (skipped by a daylight-saving change)",
                    self.describe()
                )
            })
    }
}

/// Reads timestamps: `YYYY/MM/DD HH:MM:SS[.fff]` (or with `-`, or `T` between date and time)
/// in the zone, RFC 3339 with an offset, and epoch numbers; caches the zone offset per minute
/// (zone offsets change on whole minutes).
#[derive(Debug)]
pub struct Clock {
    zone: Zone,
    /// (wall minute, offset of its earliest and latest interpretation).
    cache: Option<(i64, (i64, i64))>,
    /// The previous timestamp read: in a repeated hour, the interpretation that does not go
    /// back in time is taken (a log runs forward).
    last: Option<TsMs>,
}

impl Clock {
    pub fn new(zone: Zone) -> Self {
        Self {
            zone,
            cache: None,
            last: None,
        }
    }

    /// Epoch ms of a timestamp cell (an epoch number's unit judged by its size).
    pub fn parse(&mut self, s: &str) -> Result<TsMs, String> {
        self.parse_as(s, None)
    }

    /// Epoch ms of a timestamp cell; `unit`: the column's epoch unit, when its header says.
    pub fn parse_as(&mut self, s: &str, unit: Option<EpochUnit>) -> Result<TsMs, String> {
        if let Some(t) = epoch_ms(s, unit) {
            let t = t?;
            self.last = Some(t);
            return Ok(t);
        }
        let bad = || {
            format!(
                "`{s}` is not a timestamp like 2024/05/01 12:00:00.000, 2024-05-01T12:00:00Z or Unix epoch seconds or milliseconds"
            )
        };
        let b = s.as_bytes();
        if b.len() < 19
            || !matches!(b[4], b'/' | b'-')
            || b[4] != b[7]
            || !matches!(b[10], b' ' | b'T')
        {
            return Err(bad());
        }
        if !s.is_char_boundary(19) {
            return Err(bad());
        }
        // An offset of its own (`Z`, `+02:00`): an absolute time, the zone does not apply.
        let tail = &s[19..];
        let tail = tail.trim_start_matches(|c: char| c == '.' || c.is_ascii_digit());
        if !tail.is_empty() {
            let iso = format!("{}T{}", &s[..10], &s[11..]).replace('/', "-");
            let t = chrono::DateTime::parse_from_rfc3339(&iso)
                .map_err(|_| bad())?
                .timestamp_millis();
            self.last = Some(t);
            return Ok(t);
        }
        let num = |r: std::ops::Range<usize>| -> Result<u32, String> {
            let mut v = 0u32;
            for &c in &b[r] {
                if !c.is_ascii_digit() {
                    return Err(bad());
                }
                v = v * 10 + u32::from(c - b'0');
            }
            Ok(v)
        };
        if b[13] != b':' || b[16] != b':' {
            return Err(bad());
        }
        let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
        let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
        let mut frac_ms = 0i64;
        if b.len() > 19 {
            if b[19] != b'.' || b.len() == 20 {
                return Err(bad());
            }
            let digits = &b[20..];
            let mut scale = 100i64;
            for &c in digits {
                if !c.is_ascii_digit() {
                    return Err(bad());
                }
                frac_ms += i64::from(c - b'0') * scale;
                scale /= 10;
            }
        }
        let naive = NaiveDate::from_ymd_opt(y as i32, mo, d)
            .and_then(|date| date.and_hms_opt(h, mi, sec))
            .ok_or_else(bad)?;
        let wall_ms = naive.and_utc().timestamp_millis();
        let minute = wall_ms.div_euclid(60_000);
        let (early, late) = match self.cache {
            Some((m, off)) if m == minute => off,
            _ => {
                let start = naive.with_second(0).ok_or_else(bad)?;
                let off = self.zone.offset_ms(start)?;
                self.cache = Some((minute, off));
                off
            }
        };
        let first = wall_ms + frac_ms - early;
        let second = wall_ms + frac_ms - late;
        let t = match self.last {
            Some(last) if first < last && second >= last => second,
            _ => first,
        };
        self.last = Some(t);
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_repeated_hour_of_a_dst_change_runs_forward() {
        let tz = Zone::parse(Some("America/New_York")).unwrap();
        let mut c = Clock::new(tz);
        // 2026-11-01: 01:00-01:59 happens twice (EDT, then EST).
        let a = c.parse("2026/11/01 01:59:00.000").unwrap();
        let b = c.parse("2026/11/01 01:00:00.000").unwrap();
        let d = c.parse("2026/11/01 01:59:00.000").unwrap();
        assert_eq!(b - a, 60_000, "01:00 EST is a minute after 01:59 EDT");
        assert_eq!(d - b, 59 * 60_000);
        let mut fresh = Clock::new(Zone::parse(Some("America/New_York")).unwrap());
        assert_eq!(
            fresh.parse("2026/11/01 01:30:00.000").unwrap() + 3_600_000,
            {
                let mut c2 = Clock::new(Zone::parse(Some("America/New_York")).unwrap());
                c2.parse("2026/11/01 01:59:00.000").unwrap();
                c2.parse("2026/11/01 01:30:00.000").unwrap()
            }
        );
    }

    #[test]
    fn timestamps_in_a_named_zone() {
        let mut c = Clock::new(Zone::parse(Some("UTC")).unwrap());
        assert_eq!(c.parse("2024/05/01 12:00:00.250"), Ok(1_714_564_800_250));
        assert_eq!(c.parse("2024-05-01 12:00:01"), Ok(1_714_564_801_000));
        let mut b = Clock::new(Zone::parse(Some("Europe/Berlin")).unwrap());
        // CEST = UTC+2 in May.
        assert_eq!(b.parse("2024/05/01 14:00:00.250"), Ok(1_714_564_800_250));
        // 02:30 on the spring-forward day does not exist in Berlin.
        assert!(b.parse("2024/03/31 02:30:00.000").is_err());
        assert!(c.parse("2024/13/01 00:00:00").is_err());
        assert!(c.parse("yesterday").is_err());
        assert!(Zone::parse(Some("Mars/Olympus")).is_err());
    }

    #[test]
    fn epoch_numbers_and_offsets_are_absolute() {
        let mut c = Clock::new(Zone::parse(Some("Europe/Berlin")).unwrap());
        assert_eq!(c.parse("1764189075"), Ok(1_764_189_075_000));
        assert_eq!(c.parse("1764189075.25"), Ok(1_764_189_075_250));
        assert_eq!(c.parse("1764189075123"), Ok(1_764_189_075_123));
        assert_eq!(c.parse("1764189075123456"), Ok(1_764_189_075_123));
        assert_eq!(c.parse("1764189075123456789"), Ok(1_764_189_075_123));
        assert_eq!(
            c.parse_as("1764189075123", Some(EpochUnit::Millis)),
            Ok(1_764_189_075_123)
        );
        // A header's unit wins over the size: 10 digits in a [ms] column is 1970.
        assert!(c.parse_as("1764189075", Some(EpochUnit::Millis)).is_err());
        // A date without separators is not 20 million seconds after 1970.
        assert!(
            c.parse("20240501")
                .unwrap_err()
                .contains("not between 2000 and 2100")
        );
        assert_eq!(c.parse("2024-05-01T12:00:00Z"), Ok(1_714_564_800_000));
        assert_eq!(
            c.parse("2024-05-01T14:00:00.5+02:00"),
            Ok(1_714_564_800_500)
        );
        // A `T` without an offset is a wall time in the zone (CEST = UTC+2 in May).
        assert_eq!(c.parse("2024-05-01T14:00:00"), Ok(1_714_564_800_000));
        assert!(c.parse("2024-05-01T14:00:00 CEST").is_err());
        assert_eq!(EpochUnit::from_header("ms"), Some(EpochUnit::Millis));
        assert_eq!(EpochUnit::from_header("MiB"), None);
    }
}
