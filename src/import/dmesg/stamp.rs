//! The timestamp shapes of saved kernel logs, one line at a time: which shape a line has,
//! when it was logged (as far as the line alone says) and where its text starts.
//!
//! | shape | example |
//! |---|---|
//! | `dmesg -T` | `[Sun Feb 23 16:24:18 2025] NVRM: ...` (local time) |
//! | `dmesg --time-format iso` | `2024-11-15T05:39:15,491363+00:00 NVRM: ...` |
//! | `journalctl -k -o short-iso` (and rsyslog's RFC 3339 files) | `2025-01-21T02:21:33+0000 host kernel: NVRM: ...` |
//! | syslog | `Jan 21 02:21:33 host kernel: [12345.678] NVRM: ...` (local time, no year) |
//! | `dmesg` | `[12345.678901] NVRM: ...` (seconds since boot) |
//!
//! `dmesg --decode` prefixes (`kern  :warn  : `) and raw priorities (`<4>`) are dropped
//! first, whatever follows. In the journal and syslog shapes only `kernel:` lines are kernel
//! lines: another program quoting an XID is not one.
//!
//! Invariant: this module reads only what the line says; the zone, the year of a syslog
//! line and the boot time are decided by the caller ([`When`]).

use std::sync::LazyLock;

use chrono::{NaiveDate, NaiveDateTime};
use regex::Regex;

use crate::model::TsMs;

/// How a line was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Shape {
    Ctime,
    Iso,
    Journal,
    Syslog,
    SinceBoot,
}

impl Shape {
    /// The command that writes this shape.
    pub fn name(self) -> &'static str {
        match self {
            Shape::Ctime => "dmesg -T",
            Shape::Iso => "dmesg --time-format iso",
            Shape::Journal => "journalctl -k -o short-iso",
            Shape::Syslog => "syslog",
            Shape::SinceBoot => "dmesg (seconds since boot)",
        }
    }
}

/// When a line was logged, as far as the line says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    /// An instant (the line carries its offset).
    At(TsMs),
    /// A wall time without a zone.
    Local(NaiveDateTime),
    /// A syslog wall time: month (1–12), day, seconds of the day; no year, no zone.
    NoYear { month: u32, day: u32, secs: u32 },
    /// Microseconds since boot.
    SinceBoot(i64),
}

/// One line's timestamp and text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stamped<'a> {
    pub shape: Shape,
    pub when: When,
    /// The host a journal or syslog line names.
    pub host: Option<&'a str>,
    /// The text after the timestamp (and after `host kernel: [seconds]`).
    pub text: &'a str,
    /// False for another program's journal or syslog line (`host gpud[42]: ...`), which may
    /// quote kernel lines but is not one.
    pub from_kernel: bool,
}

/// A line whose timestamp has a known shape but impossible values (Feb 30, 25:00).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadStamp {
    /// 0-based character offset of the timestamp.
    pub offset: usize,
    pub what: String,
}

fn re(pattern: &str) -> Regex {
    Regex::new(pattern).unwrap_or_else(|e| unreachable!("the pattern {pattern} is valid: {e}"))
}

static PREFIX: LazyLock<Regex> =
    LazyLock::new(|| re(r"^(?:<[0-9]{1,3}>|[a-z]{2,8} *:[a-z]{3,6} *: )"));
static CTIME: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"^\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) ([A-Z][a-z]{2}) +([0-9]{1,2}) ([0-9]{2}):([0-9]{2}):([0-9]{2}) ([0-9]{4})\] ?",
    )
});
static ISO: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"^([0-9]{4}-[0-9]{2}-[0-9]{2})T([0-9]{2}:[0-9]{2}:[0-9]{2})(?:[.,]([0-9]{1,9}))?(Z|[+-][0-9]{2}:?[0-9]{2}) ",
    )
});
static KERNEL: LazyLock<Regex> = LazyLock::new(|| re(r"^([^ ]+) kernel: "));
/// `host program[pid]: ` after a journal or syslog timestamp: another program's line.
static PROGRAM: LazyLock<Regex> = LazyLock::new(|| re(r"^[^ ]+ [^ :\[]+(?:\[[0-9]+\])?: "));
static SYSLOG: LazyLock<Regex> =
    LazyLock::new(|| re(r"^([A-Z][a-z]{2}) +([0-9]{1,2}) ([0-9]{2}):([0-9]{2}):([0-9]{2}) "));
static SINCE_BOOT: LazyLock<Regex> = LazyLock::new(|| re(r"^\[ *([0-9]{1,10})\.([0-9]{1,9})\] ?"));

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

fn month(name: &str) -> Option<u32> {
    MONTHS.iter().position(|m| *m == name).map(|i| i as u32 + 1)
}

/// Reads a line's timestamp; `Ok(None)` when the line has none of the known shapes.
pub fn read(line: &str) -> Result<Option<Stamped<'_>>, BadStamp> {
    let skip = PREFIX.find(line).map_or(0, |m| m.end());
    let rest = &line[skip..];
    let at = line[..skip].chars().count();
    let bad = |what: String| BadStamp { offset: at, what };
    if let Some(c) = CTIME.captures(rest) {
        let m = month(&c[1]).ok_or_else(|| bad(format!("`{}` is not a month", &c[1])))?;
        let date = date(&c[6], m, &c[2])
            .ok_or_else(|| bad(format!("{} {} {} is not a date", &c[1], &c[2], &c[6])))?;
        let t = date
            .and_hms_opt(num(&c[3]), num(&c[4]), num(&c[5]))
            .ok_or_else(|| bad("the time of day is out of range".into()))?;
        let end = c.get(0).map_or(0, |m| m.end());
        return Ok(Some(Stamped {
            shape: Shape::Ctime,
            when: When::Local(t),
            host: None,
            text: &rest[end..],
            from_kernel: true,
        }));
    }
    if let Some(c) = ISO.captures(rest) {
        let when = iso(&c[1], &c[2], c.get(3).map(|m| m.as_str()), &c[4])
            .ok_or_else(|| bad(format!("`{}` is not a valid time", c[0].trim_end())))?;
        let after = &rest[c.get(0).map_or(0, |m| m.end())..];
        if let Some(k) = KERNEL.captures(after) {
            let text = strip_since_boot(&after[k.get(0).map_or(0, |m| m.end())..]);
            return Ok(Some(Stamped {
                shape: Shape::Journal,
                when: When::At(when),
                host: k.get(1).map(|m| m.as_str()),
                text,
                from_kernel: true,
            }));
        }
        return Ok(Some(Stamped {
            shape: Shape::Iso,
            when: When::At(when),
            host: None,
            text: after,
            // Another program's journal line (it may quote an XID) is not from the kernel.
            from_kernel: !PROGRAM.is_match(after),
        }));
    }
    if let Some(c) = SYSLOG.captures(rest)
        && let Some(m) = month(&c[1])
    {
        let after = &rest[c.get(0).map_or(0, |m| m.end())..];
        let (day, h, mi, s) = (num(&c[2]), num(&c[3]), num(&c[4]), num(&c[5]));
        if !(1..=31).contains(&day) || h > 23 || mi > 59 || s > 60 {
            return Err(bad(format!("`{}` is not a valid time", c[0].trim_end())));
        }
        let when = When::NoYear {
            month: m,
            day,
            secs: h * 3600 + mi * 60 + s.min(59),
        };
        let kernel = KERNEL.captures(after);
        return Ok(Some(Stamped {
            shape: Shape::Syslog,
            when,
            host: kernel.as_ref().and_then(|k| k.get(1)).map(|m| m.as_str()),
            text: match &kernel {
                Some(k) => strip_since_boot(&after[k.get(0).map_or(0, |m| m.end())..]),
                None => after,
            },
            // Another program's line (it may quote an XID) is not from the kernel.
            from_kernel: kernel.is_some(),
        }));
    }
    if let Some(c) = SINCE_BOOT.captures(rest) {
        let secs: i64 = c[1]
            .parse()
            .map_err(|_| bad("seconds out of range".into()))?;
        let frac = &c[2];
        let frac_us: i64 = format!("{:0<6}", &frac[..frac.len().min(6)])
            .parse()
            .map_err(|_| bad("seconds out of range".into()))?;
        return Ok(Some(Stamped {
            shape: Shape::SinceBoot,
            when: When::SinceBoot(secs * 1_000_000 + frac_us),
            host: None,
            text: &rest[c.get(0).map_or(0, |m| m.end())..],
            from_kernel: true,
        }));
    }
    Ok(None)
}

/// A kernel line in a journal or syslog may keep its `[seconds since boot]`.
fn strip_since_boot(text: &str) -> &str {
    SINCE_BOOT.find(text).map_or(text, |m| &text[m.end()..])
}

fn num(s: &str) -> u32 {
    s.parse().unwrap_or(u32::MAX)
}

fn date(year: &str, month: u32, day: &str) -> Option<NaiveDate> {
    NaiveDate::from_ymd_opt(year.parse().ok()?, month, day.parse().ok()?)
}

/// `date`T`time`[.frac]`offset` as ms UTC.
fn iso(date: &str, time: &str, frac: Option<&str>, offset: &str) -> Option<TsMs> {
    let naive =
        NaiveDateTime::parse_from_str(&format!("{date}T{time}"), "%Y-%m-%dT%H:%M:%S").ok()?;
    let ms = frac.map_or(Some(0), |f| {
        format!("{:0<3}", &f[..f.len().min(3)]).parse::<i64>().ok()
    })?;
    let offset_s = if offset == "Z" {
        0
    } else {
        let sign = if offset.starts_with('-') { -1 } else { 1 };
        let digits: String = offset[1..].chars().filter(char::is_ascii_digit).collect();
        if digits.len() != 4 {
            return None;
        }
        let (h, m): (i64, i64) = (digits[..2].parse().ok()?, digits[2..].parse().ok()?);
        if h > 23 || m > 59 {
            return None;
        }
        sign * (h * 3600 + m * 60)
    };
    Some((naive.and_utc().timestamp() - offset_s) * 1000 + ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(line: &str) -> (Shape, When, Option<&str>, &str) {
        let s = read(line)
            .unwrap()
            .unwrap_or_else(|| panic!("no stamp: {line}"));
        (s.shape, s.when, s.host, s.text)
    }

    fn local(s: &str) -> When {
        When::Local(NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S").unwrap())
    }

    #[test]
    fn reads_every_shape() {
        assert_eq!(
            at("[Sun Feb 23 16:24:18 2025] NVRM: Xid"),
            (
                Shape::Ctime,
                local("2025-02-23 16:24:18"),
                None,
                "NVRM: Xid"
            )
        );
        assert_eq!(
            at("[Mon Feb  3 06:04:08 2025] NVRM: x"),
            (Shape::Ctime, local("2025-02-03 06:04:08"), None, "NVRM: x")
        );
        // 2024-11-15T12:02:03.470Z
        assert_eq!(
            at("2024-11-15T12:02:03,470068+00:00 NVRM: Xid"),
            (Shape::Iso, When::At(1_731_672_123_470), None, "NVRM: Xid")
        );
        assert_eq!(
            at("kern  :warn  : 2025-01-21T02:21:33,498559+00:00 NVRM: Xid"),
            (Shape::Iso, When::At(1_737_426_093_498), None, "NVRM: Xid")
        );
        assert_eq!(
            at("2025-01-21T03:21:33+0100 node7 kernel: NVRM: Xid"),
            (
                Shape::Journal,
                When::At(1_737_426_093_000),
                Some("node7"),
                "NVRM: Xid"
            )
        );
        assert_eq!(
            at("2025-01-21T02:21:33.498559+00:00 node7 kernel: [ 12.5] NVRM: Xid"),
            (
                Shape::Journal,
                When::At(1_737_426_093_498),
                Some("node7"),
                "NVRM: Xid"
            )
        );
        assert_eq!(
            at("Jan 21 02:21:33 node7 kernel: [12345.678] NVRM: Xid"),
            (
                Shape::Syslog,
                When::NoYear {
                    month: 1,
                    day: 21,
                    secs: 2 * 3600 + 21 * 60 + 33
                },
                Some("node7"),
                "NVRM: Xid"
            )
        );
        assert_eq!(
            at("<4>[12345.678901] NVRM: Xid"),
            (
                Shape::SinceBoot,
                When::SinceBoot(12_345_678_901),
                None,
                "NVRM: Xid"
            )
        );
        assert_eq!(
            at("[    5.25] NVRM: x"),
            (
                Shape::SinceBoot,
                When::SinceBoot(5_250_000),
                None,
                "NVRM: x"
            )
        );
    }

    #[test]
    fn other_lines_have_no_stamp_and_impossible_ones_are_errors() {
        for line in [
            "NVRM: Xid (PCI:0000:19:00): 48, no time",
            "",
            "CPU: 17 PID: 2024380 Comm: nvidia-smi",
        ] {
            assert_eq!(read(line), Ok(None), "{line}");
        }
        for line in [
            "Jan 21 02:21:33 node7 gpud[42]: NVRM: Xid (PCI:0000:19:00): 48 quoted by a program",
            "2025-01-21T02:21:34+0000 node7 gpud[4242]: detected NVRM: Xid (PCI:0000:3b:00): 79, x",
        ] {
            let s = read(line).unwrap().unwrap();
            assert!(!s.from_kernel, "{line}");
        }
        let e = read("[Sun Feb 30 16:24:18 2025] NVRM: x").unwrap_err();
        assert!(e.what.contains("is not a date"), "{e:?}");
        let e = read("kern  :warn  : 2025-13-21T02:21:33,498559+00:00 NVRM: x").unwrap_err();
        assert_eq!(e.offset, 15);
        assert!(read("Jan 32 02:21:33 h kernel: NVRM: x").is_err());
    }
}
