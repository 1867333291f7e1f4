//! `import dmesg`: XIDs from saved kernel logs — `dmesg -T`, `dmesg --time-format iso`
//! (with or without `--decode`), `journalctl -k -o short-iso`, syslog files and raw `dmesg`
//! (seconds since boot, given the boot time), mixed in one file too (shapes: [`stamp`]).
//!
//! Which lines count: `NVRM: Xid (PCI:…): N, …` lines are XIDs; `NVRM: GPU at PCI:… GPU-…`
//! lines say which GPU is at an address (an XID takes the UUID of the latest such line for
//! its address before it, else the first one after it); every other line is skipped and
//! counted.
//!
//! Times: a line with an offset is exact; `dmesg -T` and syslog lines are read in `--tz`
//! (default: the local zone; a wall time a daylight-saving change skipped is an error, a
//! repeated one takes the earlier instant); raw seconds need `--boot-time`. A syslog line has
//! no year: it takes the year that puts it nearest the closest line with a full date in the
//! same file (before it, else after it), or, in a file without one, the latest year that
//! does not put it after the file was last modified (plus a day).
//!
//! Invariants: every file is read completely before anything is written; an XID line whose
//! time or content cannot be read is an error `file:line:col: what (how to fix)` and fails
//! the whole import; only XID lines are kept in memory.

pub mod stamp;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::BufRead;
use std::path::{Path, PathBuf};

use chrono::{Datelike, NaiveDate, NaiveDateTime, TimeZone};

use crate::import::nvidia_smi::Zone;
use crate::model::TsMs;
use crate::xid::nvrm::{self, Nvrm, PciAddr};

use self::stamp::{Shape, When};

/// Errors shown one by one; the rest are counted.
const SHOWN_ERRORS: usize = 20;
/// A syslog line may be this much after its file's modification time (zones, clock skew).
const MTIME_SLACK_MS: i64 = 86_400_000;

/// How to read the files.
#[derive(Debug, Clone)]
pub struct Options {
    /// The zone of `dmesg -T` and syslog times.
    pub zone: Zone,
    /// When the machine booted (ms UTC), for raw `dmesg` seconds.
    pub boot_ms: Option<TsMs>,
}

/// One XID line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Xid {
    pub ts_ms: TsMs,
    pub pci: PciAddr,
    pub code: i64,
    /// The line from `Xid` on.
    pub message: String,
    /// From an `NVRM: GPU at` line of the files, if one named the address.
    pub uuid: Option<String>,
}

/// What one file held.
#[derive(Debug, Clone, Default)]
pub struct FileSummary {
    pub path: String,
    pub lines: u64,
    /// XID lines per shape.
    pub shapes: BTreeMap<Shape, u64>,
    /// Lines that are not NVRM XID lines.
    pub skipped: u64,
}

/// Everything read from the files.
#[derive(Debug, Clone, Default)]
pub struct Parsed {
    /// In file order.
    pub xids: Vec<Xid>,
    pub files: Vec<FileSummary>,
    /// Hosts named by the journal and syslog XID lines.
    pub hosts: BTreeSet<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum DmesgError {
    #[error("{path}: cannot read: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    /// `file:line:col: what (how to fix)` lines.
    #[error("{}", lines(.0))]
    Lines(Vec<String>),
}

fn lines(errors: &[String]) -> String {
    let mut out: Vec<String> = errors.iter().take(SHOWN_ERRORS).cloned().collect();
    if errors.len() > SHOWN_ERRORS {
        out.push(format!("... and {} more", errors.len() - SHOWN_ERRORS));
    }
    out.push("nothing was imported".into());
    out.join("\n")
}

/// An XID whose syslog time waits for its year.
struct NoYear {
    index: usize,
    month: u32,
    day: u32,
    secs: u32,
    /// The newest full-dated line before it in its file.
    before: Option<TsMs>,
    at: String,
}

/// Reads every file; all or nothing.
pub fn read_files(paths: &[PathBuf], opts: &Options) -> Result<Parsed, DmesgError> {
    let mut parsed = Parsed::default();
    let mut errors = Vec::new();
    // The first `GPU at` line of each address, for XIDs before any such line.
    let mut first_uuid: HashMap<PciAddr, String> = HashMap::new();
    for path in paths {
        read_file(path, opts, &mut parsed, &mut first_uuid, &mut errors)?;
    }
    if !errors.is_empty() {
        return Err(DmesgError::Lines(errors));
    }
    for x in &mut parsed.xids {
        if x.uuid.is_none() {
            x.uuid = first_uuid.get(&x.pci).cloned();
        }
    }
    Ok(parsed)
}

fn read_file(
    path: &Path,
    opts: &Options,
    parsed: &mut Parsed,
    first_uuid: &mut HashMap<PciAddr, String>,
    errors: &mut Vec<String>,
) -> Result<(), DmesgError> {
    let name = path.display().to_string();
    let io = |source| DmesgError::Read {
        path: name.clone(),
        source,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    let mtime_ms = file
        .metadata()
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_millis() as TsMs);
    let mut reader = std::io::BufReader::new(file);
    let mut summary = FileSummary {
        path: name.clone(),
        ..FileSummary::default()
    };
    let mut here: HashMap<PciAddr, String> = HashMap::new();
    let mut anchors: (Option<TsMs>, Option<TsMs>) = (None, None); // (first, latest)
    let mut no_year: Vec<NoYear> = Vec::new();
    let mut buf = Vec::new();
    let mut n = 0u64;
    loop {
        buf.clear();
        if reader.read_until(b'\n', &mut buf).map_err(io)? == 0 {
            break;
        }
        n += 1;
        let line = String::from_utf8_lossy(&buf);
        let line = line.trim_end_matches(['\n', '\r']);
        let at = |col: usize| format!("{name}:{n}:{}", col + 1);
        let stamped = match stamp::read(line) {
            Ok(s) => s,
            Err(bad) if line.contains("NVRM: Xid") => {
                errors.push(format!(
                    "{}: {} (fix the timestamp or remove the line)",
                    at(bad.offset),
                    bad.what
                ));
                continue;
            }
            Err(_) => {
                summary.skipped += 1;
                continue;
            }
        };
        let text = stamped.as_ref().map_or(line, |s| s.text);
        let text_col = line.chars().count() - text.chars().count();
        // A full date on any line anchors the years of syslog lines near it.
        let full = match stamped.as_ref().map(|s| s.when) {
            Some(When::At(t)) => Some(t),
            Some(When::Local(naive)) => local_ms(&opts.zone, naive).ok(),
            Some(When::SinceBoot(us)) => opts.boot_ms.map(|b| b + us / 1000),
            _ => None,
        };
        if let Some(t) = full {
            anchors.0 = anchors.0.or(Some(t));
            anchors.1 = Some(t);
        }
        if stamped.as_ref().is_some_and(|s| !s.from_kernel) {
            // Another program's line, even when it quotes an XID.
            summary.skipped += 1;
            continue;
        }
        let x = match nvrm::parse(text) {
            Ok(Some(Nvrm::Xid(x))) => x,
            Ok(Some(Nvrm::GpuAt { pci, uuid })) => {
                first_uuid
                    .entry(pci.clone())
                    .or_insert_with(|| uuid.clone());
                here.insert(pci, uuid);
                summary.skipped += 1;
                continue;
            }
            Ok(None) => {
                summary.skipped += 1;
                continue;
            }
            Err(e) => {
                errors.push(format!(
                    "{}: {} (fix or remove the line)",
                    at(text_col + e.offset),
                    e.what
                ));
                continue;
            }
        };
        let Some(s) = stamped else {
            errors.push(format!(
                "{}: an XID line without a timestamp gpuwatch can read (save the log with `dmesg -T`, `dmesg --time-format iso` or `journalctl -k -o short-iso`, which date every line)",
                at(0)
            ));
            continue;
        };
        let ts = match s.when {
            When::NoYear { month, day, secs } => {
                no_year.push(NoYear {
                    index: parsed.xids.len(),
                    month,
                    day,
                    secs,
                    before: anchors.1,
                    at: at(0),
                });
                0
            }
            When::SinceBoot(us) => match opts.boot_ms {
                Some(b) => b + us / 1000,
                None => {
                    errors.push(format!(
                        "{}: `{}` is seconds since boot, and when the machine booted is not known (pass --boot-time, e.g. the output of `uptime -s` on that machine in RFC 3339, or save the log with `dmesg -T`)",
                        at(0),
                        line[..line.len() - text.len()].trim_end()
                    ));
                    continue;
                }
            },
            _ => match full {
                Some(t) => t,
                None => {
                    let err = match s.when {
                        When::Local(naive) => local_ms(&opts.zone, naive).err(),
                        _ => None,
                    };
                    errors.push(format!(
                        "{}: {} (pass --tz with the zone the log was written in)",
                        at(0),
                        err.unwrap_or_else(|| "the time cannot be read".into())
                    ));
                    continue;
                }
            },
        };
        *summary.shapes.entry(s.shape).or_default() += 1;
        if let Some(h) = s.host {
            parsed.hosts.insert(h.to_string());
        }
        parsed.xids.push(Xid {
            ts_ms: ts,
            uuid: here.get(&x.pci).cloned(),
            pci: x.pci,
            code: x.code,
            message: x.text,
        });
    }
    summary.lines = n;
    for y in no_year {
        let reference = match (y.before, anchors.0, mtime_ms) {
            (Some(t), _, _) | (None, Some(t), _) => Reference::Near(t),
            (None, None, Some(m)) => Reference::NotAfter(m + MTIME_SLACK_MS),
            (None, None, None) => Reference::NotAfter(crate::clock::now_ms() + MTIME_SLACK_MS),
        };
        match syslog_ms(&opts.zone, y.month, y.day, y.secs, reference) {
            Ok(t) => parsed.xids[y.index].ts_ms = t,
            Err(e) => errors.push(format!(
                "{}: {e} (pass --tz with the zone the log was written in)",
                y.at
            )),
        }
    }
    parsed.files.push(summary);
    Ok(())
}

/// What decides a syslog line's year.
#[derive(Debug, Clone, Copy)]
enum Reference {
    /// The year that puts the line nearest this time.
    Near(TsMs),
    /// The latest year that does not put the line after this time.
    NotAfter(TsMs),
}

fn syslog_ms(
    zone: &Zone,
    month: u32,
    day: u32,
    secs: u32,
    reference: Reference,
) -> Result<TsMs, String> {
    let (Reference::Near(r) | Reference::NotAfter(r)) = reference;
    let year = chrono::DateTime::from_timestamp_millis(r).map_or(1970, |d| d.year());
    let mut candidates = Vec::new();
    let mut last_err = None;
    for y in [year - 1, year, year + 1] {
        let Some(naive) = NaiveDate::from_ymd_opt(y, month, day)
            .and_then(|d| d.and_hms_opt(secs / 3600, secs / 60 % 60, secs % 60))
        else {
            continue;
        };
        match local_ms(zone, naive) {
            Ok(t) => candidates.push(t),
            Err(e) => last_err = Some(e),
        }
    }
    let pick = match reference {
        Reference::Near(r) => candidates.iter().copied().min_by_key(|t| (t - r).abs()),
        Reference::NotAfter(r) => candidates
            .iter()
            .copied()
            .filter(|&t| t <= r)
            .max()
            .or_else(|| candidates.iter().copied().min()),
    };
    pick.ok_or_else(|| {
        last_err.unwrap_or_else(|| {
            format!(
                "{} {day} is not a date in any year near it",
                month_name(month)
            )
        })
    })
}

fn month_name(m: u32) -> &'static str {
    [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ]
    .get(m.saturating_sub(1) as usize)
    .copied()
    .unwrap_or("?")
}

/// A wall time in `zone` as ms UTC: the earlier instant of a repeated hour; an error for a
/// time a daylight-saving change skipped.
fn local_ms(zone: &Zone, naive: NaiveDateTime) -> Result<TsMs, String> {
    let r = match zone {
        Zone::Local => chrono::Local
            .from_local_datetime(&naive)
            .map(|d| d.timestamp_millis()),
        Zone::Named(tz) => tz.from_local_datetime(&naive).map(|d| d.timestamp_millis()),
    };
    match r {
        chrono::LocalResult::Single(t) => Ok(t),
        chrono::LocalResult::Ambiguous(a, b) => Ok(a.min(b)),
        chrono::LocalResult::None => Err(format!(
            "{naive} does not exist in {} (a daylight-saving change skipped it)",
            zone.describe()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc() -> Zone {
        Zone::parse(Some("UTC")).unwrap()
    }

    fn ms(s: &str) -> TsMs {
        chrono::DateTime::parse_from_rfc3339(s)
            .unwrap()
            .timestamp_millis()
    }

    #[test]
    fn a_syslog_line_takes_the_year_nearest_its_reference() {
        let t = |m, d, r| syslog_ms(&utc(), m, d, 3600, r).unwrap();
        // Near a dated line of 2025-01-01: Dec 31 is 2024, Jan 2 is 2025.
        let near = Reference::Near(ms("2025-01-01T00:00:00Z"));
        assert_eq!(t(12, 31, near), ms("2024-12-31T01:00:00Z"));
        assert_eq!(t(1, 2, near), ms("2025-01-02T01:00:00Z"));
        // A file last written on 2025-01-03: Dec 30 is 2024, Jan 2 is 2025, Jun 1 is 2024.
        let mtime = Reference::NotAfter(ms("2025-01-03T00:00:00Z") + MTIME_SLACK_MS);
        assert_eq!(t(12, 30, mtime), ms("2024-12-30T01:00:00Z"));
        assert_eq!(t(1, 2, mtime), ms("2025-01-02T01:00:00Z"));
        assert_eq!(t(6, 1, mtime), ms("2024-06-01T01:00:00Z"));
        // Feb 29 exists only in a leap year.
        let leap = Reference::NotAfter(ms("2025-03-01T00:00:00Z"));
        assert_eq!(t(2, 29, leap), ms("2024-02-29T01:00:00Z"));
    }

    #[test]
    fn wall_times_follow_the_zone() {
        let berlin = Zone::parse(Some("Europe/Berlin")).unwrap();
        let naive = |s| NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S").unwrap();
        assert_eq!(
            local_ms(&berlin, naive("2025-01-21 03:21:33")),
            Ok(ms("2025-01-21T02:21:33Z"))
        );
        // Skipped by the spring change; the autumn hour twice takes the earlier.
        assert!(local_ms(&berlin, naive("2025-03-30 02:30:00")).is_err());
        assert_eq!(
            local_ms(&berlin, naive("2025-10-26 02:30:00")),
            Ok(ms("2025-10-26T00:30:00Z"))
        );
    }
}
