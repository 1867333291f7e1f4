//! Cell values of nvidia-smi CSV: NULL markers, numbers with or without units, states and
//! flags, and the zone-less timestamps.
//!
//! Invariants:
//! - Any bracketed value (`[N/A]`, `[Not Supported]`, `[Unknown Error]`, ...), `N/A` and an
//!   empty cell are NULL (`Ok(None)`), never 0 and never an error, whatever the field.
//! - A unit written after a number must be the field's unit (`MiB`, `W`, `MHz`, `%`, `C`,
//!   `us`); converted values use the store's units (bytes, mW, MHz, %, °C).
//! - A timestamp carries no zone: it is read in the zone given by [`Zone`]; a wall time that
//!   does not exist there (skipped by a DST change) is an error, an ambiguous one takes the
//!   earlier instant.

use chrono::{NaiveDate, NaiveDateTime, TimeZone, Timelike};

use crate::model::TsMs;

/// A cell that could not be read: the message says what was expected.
pub type CellResult<T> = Result<Option<T>, String>;

/// True for the values nvidia-smi writes when it has no value.
pub fn is_null(s: &str) -> bool {
    s.is_empty() || (s.starts_with('[') && s.ends_with(']')) || s.eq_ignore_ascii_case("N/A")
}

/// The unit a numeric field is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    MiB,
    Watt,
    MHz,
    Percent,
    Celsius,
    Count,
}

impl Unit {
    fn accepts(self, u: &str) -> bool {
        match self {
            Unit::MiB => u == "MiB",
            Unit::Watt => u == "W",
            Unit::MHz => u == "MHz",
            Unit::Percent => u == "%",
            Unit::Celsius => u == "C" || u == "°C",
            Unit::Count => false,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Unit::MiB => "MiB",
            Unit::Watt => "W",
            Unit::MHz => "MHz",
            Unit::Percent => "%",
            Unit::Celsius => "C",
            Unit::Count => "no unit",
        }
    }
}

/// A number, with the field's unit or none; NULL markers give `None`.
pub fn number(s: &str, unit: Unit) -> CellResult<f64> {
    if is_null(s) {
        return Ok(None);
    }
    let (num, u) = match s.find(' ') {
        Some(i) => (&s[..i], s[i + 1..].trim()),
        None => (s, ""),
    };
    if !u.is_empty() && !unit.accepts(u) {
        return Err(format!("`{s}`: expected a value in {}", unit.name()));
    }
    let v: f64 = match num.parse::<i64>() {
        Ok(i) => i as f64,
        Err(_) => num.parse().map_err(|_| format!("`{s}` is not a number"))?,
    };
    if !v.is_finite() {
        return Err(format!("`{s}` is not a finite number"));
    }
    Ok(Some(v))
}

/// A non-negative number scaled by `scale` and rounded, as u64.
pub fn scaled_u64(s: &str, unit: Unit, scale: f64) -> CellResult<u64> {
    match number(s, unit)? {
        None => Ok(None),
        Some(v) if v < 0.0 => Err(format!("`{s}` is negative")),
        Some(v) => Ok(Some((v * scale).round() as u64)),
    }
}

/// A non-negative number scaled by `scale` and rounded, as u32.
pub fn scaled_u32(s: &str, unit: Unit, scale: f64) -> CellResult<u32> {
    match scaled_u64(s, unit, scale)? {
        None => Ok(None),
        Some(v) => u32::try_from(v)
            .map(Some)
            .map_err(|_| format!("`{s}` is out of range")),
    }
}

/// A signed number rounded to an integer (`temperature.gpu.tlimit` can be negative).
pub fn signed(s: &str, unit: Unit) -> CellResult<i64> {
    Ok(number(s, unit)?.map(|v| v.round() as i64))
}

/// `Active`/`Not Active`, `Enabled`/`Disabled`, `Yes`/`No`, `True`/`False`, `1`/`0`.
pub fn flag(s: &str) -> CellResult<bool> {
    if is_null(s) {
        return Ok(None);
    }
    let l = s.to_ascii_lowercase();
    match l.as_str() {
        "active" | "enabled" | "yes" | "true" | "1" | "on" => Ok(Some(true)),
        "not active" | "disabled" | "no" | "false" | "0" | "off" => Ok(Some(false)),
        _ => Err(format!(
            "`{s}`: expected Active/Not Active, Enabled/Disabled or Yes/No"
        )),
    }
}

/// A performance state `P0` ..= `P15`; `P32` (NVML's "unknown") is NULL.
pub fn pstate(s: &str) -> CellResult<u32> {
    if is_null(s) {
        return Ok(None);
    }
    let n = s
        .strip_prefix('P')
        .or_else(|| s.strip_prefix('p'))
        .and_then(|n| n.parse::<u32>().ok())
        .ok_or_else(|| format!("`{s}` is not a P-state (P0 .. P15)"))?;
    match n {
        0..=15 => Ok(Some(n)),
        32 => Ok(None),
        _ => Err(format!("`{s}` is not a P-state (P0 .. P15)")),
    }
}

/// A bitmask written in hex (`0x0000000000000040`) or decimal.
pub fn mask(s: &str) -> CellResult<u64> {
    if is_null(s) {
        return Ok(None);
    }
    let v = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse(),
    };
    v.map(Some)
        .map_err(|_| format!("`{s}` is not a bitmask (0x...)"))
}

/// Free text: NULL markers give `None`.
pub fn text(s: &str) -> Option<String> {
    (!is_null(s)).then(|| s.to_string())
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

/// Reads `YYYY/MM/DD HH:MM:SS[.fff]` (or with `-`) timestamps; caches the zone offset per
/// minute (zone offsets change on whole minutes).
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

    /// Epoch ms of a timestamp cell.
    pub fn parse(&mut self, s: &str) -> Result<TsMs, String> {
        let bad = || format!("`{s}` is not a timestamp like 2024/05/01 12:00:00.000");
        let b = s.as_bytes();
        if b.len() < 19 || !matches!(b[4], b'/' | b'-') || b[4] != b[7] || b[10] != b' ' {
            return Err(bad());
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
    fn nulls_are_null_for_every_kind() {
        for s in [
            "[N/A]",
            "[Not Supported]",
            "[Requested functionality has been deprecated]",
            "[Unknown Error]",
            "N/A",
            "",
        ] {
            assert_eq!(number(s, Unit::MiB), Ok(None), "{s}");
            assert_eq!(flag(s), Ok(None));
            assert_eq!(pstate(s), Ok(None));
            assert_eq!(mask(s), Ok(None));
            assert_eq!(text(s), None);
        }
    }

    #[test]
    fn numbers_with_and_without_units() {
        assert_eq!(
            scaled_u64("19818 MiB", Unit::MiB, 1048576.0),
            Ok(Some(19818 * 1048576))
        );
        assert_eq!(
            scaled_u64("19818", Unit::MiB, 1048576.0),
            Ok(Some(19818 * 1048576))
        );
        assert_eq!(
            scaled_u32("631.95 W", Unit::Watt, 1000.0),
            Ok(Some(631_950))
        );
        assert_eq!(scaled_u32("0 %", Unit::Percent, 1.0), Ok(Some(0)));
        assert!(scaled_u32("12 W", Unit::MiB, 1.0).is_err());
        assert!(scaled_u32("abc", Unit::Percent, 1.0).is_err());
        assert!(scaled_u32("-3", Unit::Percent, 1.0).is_err());
        assert_eq!(signed("-4", Unit::Celsius), Ok(Some(-4)));
    }

    #[test]
    fn states_and_flags() {
        assert_eq!(flag("Active"), Ok(Some(true)));
        assert_eq!(flag("Not Active"), Ok(Some(false)));
        assert_eq!(flag("Disabled"), Ok(Some(false)));
        assert!(flag("maybe").is_err());
        assert_eq!(pstate("P0"), Ok(Some(0)));
        assert_eq!(pstate("P8"), Ok(Some(8)));
        assert_eq!(pstate("P32"), Ok(None));
        assert!(pstate("X1").is_err());
        assert_eq!(mask("0x0000000000000040"), Ok(Some(0x40)));
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
}
