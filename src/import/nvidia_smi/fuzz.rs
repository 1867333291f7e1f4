//! The fuzzing harness of the nvidia-smi CSV reader (see [`crate::fuzzing`]): one file read
//! by [`reader::FileReader`] exactly as `import nvidia-smi` reads it, without a database (the
//! staged rows are counted instead of inserted).
//!
//! Checked: no line is lost silently (every data line becomes a row or a bad line, and a
//! fatal error names a line of the file); `strict` fails at the first bad line of a lenient
//! read, and succeeds when the lenient read found none.

use super::reader::{BATCH, FileReader, Sinks, StageQueue, Staged};
use super::{BadLine, SmiError, fields, registry, values};

/// `--columns` of the second read (a file without a header).
const COLUMNS: &[&str] = &[
    "timestamp",
    "index",
    "uuid",
    "utilization.gpu [%]",
    "memory.used [MiB]",
    "temperature.gpu",
];

/// What one read gave: rows staged, bad lines, or the error that ended it.
struct Read {
    staged: u64,
    rows: u64,
    bad: Vec<BadLine>,
    end: Result<(), SmiError>,
}

fn read(data: &[u8], fixed: Option<&fields::Layout>, strict: bool) -> Read {
    // Room for every batch (rows and the minutes they finish): the harness reads them after.
    let (tx, rx) = std::sync::mpsc::sync_channel(2 * (data.len() / BATCH) + 4);
    let mut queue = StageQueue::new(tx);
    let mut registry = registry::Registry::default();
    let mut clock = values::Clock::new(values::Zone::Named(chrono_tz::UTC));
    let host = registry.host("fuzz", Vec::new);
    let mut fr = FileReader {
        path: "fuzz.csv".to_string(),
        host,
        layout: fixed.cloned(),
        fixed: fixed.is_some(),
        clock: &mut clock,
        last_ts: None,
        rows: 0,
        ignored: Vec::new(),
        map: None,
    };
    let mut bad = Vec::new();
    let mut sinks = Sinks {
        staging: &mut queue,
        registry: &mut registry,
    };
    let end = fr.read(
        &mut &data[..],
        &mut sinks,
        strict,
        &mut |b| bad.push(b),
        &mut |_| {},
    );
    // Finished even after an error, so that every counted row is seen staged.
    let flushed = queue.finish().map(drop).map_err(SmiError::Store);
    let end = end.and(flushed);
    let staged = rx
        .iter()
        .flatten()
        .filter(|row| !matches!(row, Staged::Minute(_)))
        .count() as u64;
    let _ = registry.plan();
    Read {
        staged,
        rows: fr.rows,
        bad,
        end,
    }
}

/// The lines a read must account for: neither blank, nor a comment, nor (without
/// `--columns`) a header.
fn data_lines(data: &[u8], fixed: bool) -> u64 {
    let mut n = 0;
    for (i, raw) in data.split_inclusive(|&b| b == b'\n').enumerate() {
        let mut bytes = raw;
        while let [rest @ .., b'\n' | b'\r'] = bytes {
            bytes = rest;
        }
        if i == 0 {
            bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
        }
        let Ok(line) = std::str::from_utf8(bytes) else {
            n += 1;
            continue;
        };
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || (!fixed && fields::looks_like_header(line)) {
            continue;
        }
        n += 1;
    }
    n
}

/// Reads `data` as a file with a header and as a `--columns` file, leniently and strictly.
pub fn fuzz_read(data: &[u8]) {
    let Ok(fixed) = fields::Layout::new(COLUMNS) else {
        panic!("the harness's --columns are not a layout");
    };
    let lines = data.split_inclusive(|&b| b == b'\n').count() as u64;
    for layout in [None, Some(&fixed)] {
        let lenient = read(data, layout, false);
        assert_eq!(lenient.rows, lenient.staged, "rows counted but not staged");
        let mut last = 0;
        for b in &lenient.bad {
            assert!(
                b.line > last && b.line <= lines,
                "bad line {} after {last} of {lines}",
                b.line
            );
            last = b.line;
        }
        match &lenient.end {
            Ok(()) => {
                let want = data_lines(data, layout.is_some());
                assert_eq!(
                    lenient.staged + lenient.bad.len() as u64,
                    want,
                    "rows lost silently: {} staged, {} bad, {want} data lines",
                    lenient.staged,
                    lenient.bad.len()
                );
            }
            Err(SmiError::Bad(b)) => {
                assert!(
                    b.line > last && b.line <= lines,
                    "fatal line {} of {lines}",
                    b.line
                )
            }
            Err(e) => panic!("a read from memory failed: {e}"),
        }
        let strict = read(data, layout, true);
        match (&strict.end, lenient.bad.first(), &lenient.end) {
            (Ok(()), None, Ok(())) => assert_eq!(strict.staged, lenient.staged),
            (Err(SmiError::Bad(s)), Some(first), _) => assert_eq!(s, first),
            (Err(SmiError::Bad(s)), None, Err(SmiError::Bad(fatal))) => assert_eq!(s, fatal),
            (s, first, l) => panic!(
                "strict read {s:?} after a lenient read with first bad line {first:?} and end {l:?}"
            ),
        }
        assert!(
            strict.bad.is_empty(),
            "a strict read reported a bad line and went on"
        );
    }
}
