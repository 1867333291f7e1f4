//! Reading one nvidia-smi CSV file: lines, sections (a header starts one), and rows turned
//! into staged samples and process samples.
//!
//! Invariants:
//! - Lines are numbered from 1 as an editor shows them; blank lines and `#` comments are
//!   skipped; `\r\n` endings and a UTF-8 byte-order mark are accepted.
//! - Without `--columns` a file must start with a header; a later header line starts a new
//!   section (logs appended by several runs). With `--columns` the file has no header.
//! - A row that cannot be read is a [`BadLine`] (`file:line: what`) and contributes nothing.
//!   A header that cannot be imported (or data before any header) ends the import: every row
//!   after it would be unreadable.
//! - A `--query-compute-apps` section without a timestamp column takes the time of the most
//!   recent timestamped row before it in the same file; rows before any such row are bad.

use std::io::BufRead;

use super::fields::{Layout, SectionKind, Target, looks_like_header};
use super::registry::Registry;
use super::values::{self as v, Clock, Unit};
use super::{BadLine, SmiError};
use crate::model::{GpuSample, TsMs};
use crate::store::StoreError;
use crate::store::import::{MinuteRollups, StagedMinute};

const MIB: f64 = 1_048_576.0;

/// Why a row was not imported: a bad line, or the store failed (which ends the import).
pub enum RowError {
    Bad(String),
    /// A line that makes the rest of the file unreadable (a bad header): ends the import.
    Fatal(String),
    Store(StoreError),
}

impl From<String> for RowError {
    fn from(m: String) -> Self {
        RowError::Bad(m)
    }
}

/// Per-file reading state.
pub struct FileReader<'a> {
    pub path: String,
    pub host: usize,
    pub layout: Option<Layout>,
    /// `--columns` was given: no header lines.
    pub fixed: bool,
    pub clock: &'a mut Clock,
    pub last_ts: Option<TsMs>,
    pub rows: u64,
    pub ignored: Vec<String>,
    /// `import csv --map`: the first line is the file's own header, read through the map.
    pub map: Option<&'a super::map::ColumnMap>,
}

/// A row for the staging tables, parsed. Samples are nearly every row: kept inline (a box
/// would cost an allocation per row), the smaller process rows pay the difference.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
pub enum Staged {
    /// A sample of importer-local GPU `.0`.
    Sample(usize, GpuSample),
    App {
        ts_ms: TsMs,
        gpu_ref: usize,
        proc: usize,
        used_mem_bytes: Option<u64>,
    },
    /// A finished minute of one GPU's rollups (one per 60 samples at 1 s: boxed).
    Minute(Box<StagedMinute>),
}

/// Rows per batch handed to the staging side.
pub const BATCH: usize = 4096;

/// Parsed rows on their way to the thread that stages them, in batches (parsing and the
/// SQLite inserts overlap). A closed channel means staging failed: the read stops, and the
/// staging side reports its own error.
pub struct StageQueue {
    rows: Vec<Staged>,
    tx: std::sync::mpsc::SyncSender<Vec<Staged>>,
    /// The samples' minutes, rolled up here on the parsing thread.
    minutes: MinuteRollups,
}

impl StageQueue {
    pub fn new(tx: std::sync::mpsc::SyncSender<Vec<Staged>>) -> Self {
        Self {
            rows: Vec::with_capacity(BATCH),
            tx,
            minutes: MinuteRollups::default(),
        }
    }

    fn push(&mut self, row: Staged) -> Result<(), RowError> {
        if let Staged::Sample(gpu, s) = &row
            && let Some(m) = self.minutes.add(*gpu, s)
        {
            self.rows.push(Staged::Minute(Box::new(m)));
        }
        self.rows.push(row);
        if self.rows.len() >= BATCH {
            self.flush().map_err(RowError::Store)?;
        }
        Ok(())
    }

    /// Hands over the rows queued and the minutes still open (parsing is over); returns the
    /// minutes' account for the publish.
    pub fn finish(mut self) -> Result<MinuteRollups, StoreError> {
        let open = self.minutes.finish();
        self.rows
            .extend(open.into_iter().map(|m| Staged::Minute(Box::new(m))));
        self.flush()?;
        Ok(self.minutes)
    }

    /// Hands over the rows queued so far.
    pub fn flush(&mut self) -> Result<(), StoreError> {
        if self.rows.is_empty() {
            return Ok(());
        }
        let rows = std::mem::replace(&mut self.rows, Vec::with_capacity(BATCH));
        self.tx
            .send(rows)
            .map_err(|_| StoreError::Config("import staging stopped".into()))
    }
}

/// Where the rows go.
pub struct Sinks<'s> {
    pub staging: &'s mut StageQueue,
    pub registry: &'s mut Registry,
}

impl FileReader<'_> {
    /// Reads every line; bad lines go to `bad` (or end the import when `strict`).
    pub fn read(
        &mut self,
        input: &mut impl BufRead,
        sinks: &mut Sinks<'_>,
        strict: bool,
        bad: &mut dyn FnMut(BadLine),
        progress: &mut dyn FnMut(u64),
    ) -> Result<(), SmiError> {
        let mut buf = Vec::with_capacity(4096);
        let mut line_no = 0u64;
        let mut pending = 0u64;
        loop {
            buf.clear();
            let n = input
                .read_until(b'\n', &mut buf)
                .map_err(|e| SmiError::Io {
                    path: self.path.clone(),
                    source: e,
                })?;
            if n == 0 {
                break;
            }
            pending += n as u64;
            if pending >= 1 << 20 {
                progress(pending);
                pending = 0;
            }
            line_no += 1;
            let mut bytes = buf.as_slice();
            while let [rest @ .., b'\n' | b'\r'] = bytes {
                bytes = rest;
            }
            if line_no == 1 {
                bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
            }
            let result = match std::str::from_utf8(bytes) {
                Ok(line) => self.line(line.trim(), line_no, sinks),
                Err(_) => Err(RowError::Bad("the line is not valid UTF-8".to_string())),
            };
            if let Err(e) = result {
                let (message, fatal) = match e {
                    RowError::Bad(m) => (m, false),
                    RowError::Fatal(m) => (m, true),
                    RowError::Store(e) => return Err(SmiError::Store(e)),
                };
                let b = BadLine {
                    file: self.path.clone(),
                    line: line_no,
                    message,
                };
                if strict || fatal {
                    return Err(SmiError::Bad(b));
                }
                bad(b);
            }
        }
        progress(pending);
        Ok(())
    }

    fn line(&mut self, line: &str, line_no: u64, sinks: &mut Sinks<'_>) -> Result<(), RowError> {
        if line.is_empty() || line.starts_with('#') {
            return Ok(());
        }
        if let Some(map) = self.map
            && self.layout.is_none()
        {
            let cells: Vec<&str> = line.split(',').collect();
            let layout = map.layout(&cells).map_err(RowError::Fatal)?;
            self.ignored.extend(layout.ignored.iter().cloned());
            self.layout = Some(layout);
            return Ok(());
        }
        if self.map.is_none() && looks_like_header(line) {
            if self.fixed {
                return Err(RowError::Bad(
                    "this looks like a header line, but --columns says the file has none: drop --columns"
                        .to_string(),
                ));
            }
            let cells: Vec<&str> = line.split(',').collect();
            let layout =
                Layout::new(&cells).map_err(|e| RowError::Fatal(format!("header: {e}")))?;
            if layout.kind == SectionKind::Apps {
                sinks.registry.saw_apps(self.host);
            }
            self.ignored.extend(layout.ignored.iter().cloned());
            self.layout = Some(layout);
            return Ok(());
        }
        let Some(layout) = self.layout.take() else {
            return Err(RowError::Fatal(
                "expected a header line first (nvidia-smi --format=csv writes one); for a log \
                 written with noheader, pass the --query-gpu fields as --columns"
                    .to_string(),
            ));
        };
        let r = self.row(&layout, line, line_no, sinks);
        self.layout = Some(layout);
        r
    }

    fn row(
        &mut self,
        layout: &Layout,
        line: &str,
        line_no: u64,
        sinks: &mut Sinks<'_>,
    ) -> Result<(), RowError> {
        let mut cells: Vec<&str> = line.split(',').map(str::trim).collect();
        let n = layout.names.len();
        let mut joined = String::new();
        if cells.len() > n && layout.kind == SectionKind::Apps {
            // Process names may contain commas: nvidia-smi does not quote them.
            if let Some(pc) = layout.col(Target::ProcessName) {
                let extra = cells.len() - n;
                let start = line.split(',').take(pc).map(|c| c.len() + 1).sum::<usize>();
                let raw: Vec<&str> = line[start..].splitn(extra + 2, ',').collect();
                joined = raw[..=extra].join(",").trim().to_string();
                cells.drain(pc + 1..=pc + extra);
            }
        }
        if cells.len() != n {
            return Err(RowError::Bad(format!(
                "expected {n} fields as in the header, found {}",
                cells.len()
            )));
        }
        if !joined.is_empty()
            && let Some(pc) = layout.col(Target::ProcessName)
        {
            cells[pc] = &joined;
        }
        let get = |t: Target| layout.col(t).map(|c| cells[c]);
        let ctx = |t: Target, e: String| {
            let name = layout.col(t).map_or("?", |c| layout.names[c].as_str());
            format!("{name}: {e}")
        };
        let ts = match get(Target::Timestamp) {
            Some(s) if v::is_null(s) => {
                return Err(RowError::Bad("timestamp: no value".to_string()));
            }
            Some(s) => self
                .clock
                .parse_as(s, layout.ts_unit)
                .map_err(|e| ctx(Target::Timestamp, e))?,
            None => self.last_ts.ok_or_else(|| {
                "no timestamp: this --query-compute-apps log has no timestamp column and no \
                 timestamped row comes before it in the file; add timestamp to the query"
                    .to_string()
            })?,
        };
        let uuid = get(Target::Uuid).filter(|s| !v::is_null(s));
        let bus = get(Target::BusId).filter(|s| !v::is_null(s));
        match layout.kind {
            SectionKind::Gpu => self.gpu_row(layout, &cells, ts, uuid, sinks, ctx)?,
            SectionKind::Apps => {
                let pid = get(Target::Pid)
                    .map(|s| v::scaled_u32(s, Unit::Count, 1.0).map_err(|e| ctx(Target::Pid, e)))
                    .transpose()?
                    .flatten()
                    .ok_or_else(|| "pid: no value".to_string())?;
                let name = get(Target::ProcessName).filter(|s| !v::is_null(s));
                let used = layout
                    .col(Target::UsedMem)
                    .map(|c| {
                        v::scaled_u64(cells[c], Unit::MiB, MIB * layout.scale(c))
                            .map_err(|e| ctx(Target::UsedMem, e))
                    })
                    .transpose()?
                    .flatten();
                let path = &self.path;
                let gref = sinks
                    .registry
                    .gpu_ref(self.host, uuid, bus, || format!("{path}:{line_no}"));
                let proc = sinks.registry.process(self.host, pid, name, ts);
                sinks.staging.push(Staged::App {
                    ts_ms: ts,
                    gpu_ref: gref,
                    proc,
                    used_mem_bytes: used,
                })?;
            }
        }
        if get(Target::Timestamp).is_some() {
            self.last_ts = Some(ts);
        }
        self.rows += 1;
        Ok(())
    }

    fn gpu_row(
        &mut self,
        layout: &Layout,
        cells: &[&str],
        ts: TsMs,
        uuid: Option<&str>,
        sinks: &mut Sinks<'_>,
        ctx: impl Fn(Target, String) -> String,
    ) -> Result<(), RowError> {
        let get = |t: Target| layout.col(t).map(|c| cells[c]);
        let u32_of = |t: Target, unit: Unit, scale: f64| -> Result<Option<u32>, String> {
            match layout.col(t) {
                None => Ok(None),
                Some(c) => {
                    v::scaled_u32(cells[c], unit, scale * layout.scale(c)).map_err(|e| ctx(t, e))
                }
            }
        };
        let u64_of = |t: Target, unit: Unit, scale: f64| -> Result<Option<u64>, String> {
            match layout.col(t) {
                None => Ok(None),
                Some(c) => {
                    v::scaled_u64(cells[c], unit, scale * layout.scale(c)).map_err(|e| ctx(t, e))
                }
            }
        };
        let flag_of = |t: Target| -> Result<Option<bool>, String> {
            get(t).map_or(Ok(None), |s| v::flag(s).map_err(|e| ctx(t, e)))
        };
        let index = match layout.col(Target::Index) {
            None => None,
            Some(c) => {
                v::scaled_u32(cells[c], Unit::Count, 1.0).map_err(|e| ctx(Target::Index, e))?
            }
        };
        let real_uuid = uuid.is_some_and(|u| !super::registry::is_masked(u));
        if layout.col(Target::Index).is_some() && index.is_none() && !real_uuid {
            return Err(RowError::Bad(
                "no usable uuid (missing or masked) and no index: cannot tell which GPU this is"
                    .to_string(),
            ));
        }
        let mut throttle = match get(Target::ThrottleMask) {
            Some(s) => v::mask(s).map_err(|e| ctx(Target::ThrottleMask, e))?,
            None => None,
        };
        if throttle.is_none() {
            for &(c, bit) in &layout.reasons {
                let name = &layout.names[c];
                if let Some(active) = v::flag(cells[c]).map_err(|e| format!("{name}: {e}"))? {
                    throttle = Some(throttle.unwrap_or(0) | if active { bit } else { 0 });
                }
            }
        }
        let sbe = u32_of(Target::RetiredSbe, Unit::Count, 1.0)?;
        let dbe = u32_of(Target::RetiredDbe, Unit::Count, 1.0)?;
        let temp = u32_of(Target::Temp, Unit::Celsius, 1.0)?;
        let margin = match get(Target::TempMargin) {
            Some(s) => v::signed(s, Unit::Celsius).map_err(|e| ctx(Target::TempMargin, e))?,
            None => None,
        };
        let sample = GpuSample {
            ts_ms: ts,
            util_gpu_pct: u32_of(Target::UtilGpu, Unit::Percent, 1.0)?,
            util_mem_pct: u32_of(Target::UtilMem, Unit::Percent, 1.0)?,
            mem_used_bytes: u64_of(Target::MemUsed, Unit::MiB, MIB)?,
            mem_free_bytes: u64_of(Target::MemFree, Unit::MiB, MIB)?,
            mem_total_bytes: u64_of(Target::MemTotal, Unit::MiB, MIB)?,
            temp_c: temp,
            fan_pct: u32_of(Target::Fan, Unit::Percent, 1.0)?,
            clock_sm_mhz: u32_of(Target::ClockSm, Unit::MHz, 1.0)?,
            clock_mem_mhz: u32_of(Target::ClockMem, Unit::MHz, 1.0)?,
            power_mw: u32_of(Target::Power, Unit::Watt, 1000.0)?,
            power_limit_mw: u32_of(Target::SamplePowerLimit, Unit::Watt, 1000.0)?,
            pstate: match get(Target::Pstate) {
                Some(s) => v::pstate(s).map_err(|e| ctx(Target::Pstate, e))?,
                None => None,
            },
            pcie_gen: u32_of(Target::PcieGen, Unit::Count, 1.0)?,
            pcie_width: u32_of(Target::PcieWidth, Unit::Count, 1.0)?,
            throttle_reasons: throttle,
            ecc_corrected: u64_of(Target::EccCorrected, Unit::Count, 1.0)?,
            ecc_uncorrected: u64_of(Target::EccUncorrected, Unit::Count, 1.0)?,
            retired_pages: match (sbe, dbe) {
                (None, None) => None,
                (a, b) => Some(a.unwrap_or(0).saturating_add(b.unwrap_or(0))),
            },
            remapped_rows_correctable: u32_of(Target::RemapCorrectable, Unit::Count, 1.0)?,
            remapped_rows_uncorrectable: u32_of(Target::RemapUncorrectable, Unit::Count, 1.0)?,
            remap_pending: flag_of(Target::RemapPending)?,
            remap_failure: flag_of(Target::RemapFailure)?,
            ..GpuSample::default()
        };
        let inv_power = u32_of(Target::InvPowerLimit, Unit::Watt, 1000.0)?;
        let power_min = u32_of(Target::PowerMin, Unit::Watt, 1000.0)?;
        let power_max = u32_of(Target::PowerMax, Unit::Watt, 1000.0)?;
        let max_gen = u32_of(Target::PcieMaxGen, Unit::Count, 1.0)?;
        let max_width = u32_of(Target::PcieMaxWidth, Unit::Count, 1.0)?;
        let persistence = flag_of(Target::Persistence)?;
        let mig = flag_of(Target::Mig)?;

        // Everything parsed: only now touch the registry and the staging tables.
        let id = sinks.registry.gpu(self.host, uuid, index, ts);
        let mem_total = sample.mem_total_bytes;
        sinks.staging.push(Staged::Sample(id, sample))?;
        let acc = &mut sinks.registry.gpus[id];
        acc.sampled(ts);
        if let (Some(t), Some(m)) = (temp, margin) {
            acc.vote_tlimit(i64::from(t) + m);
        }
        let inv = acc.inv();
        let set_text = |slot: &mut Option<String>, s: Option<&str>| {
            if let Some(s) = s.filter(|s| !v::is_null(s))
                && slot.as_deref() != Some(s)
            {
                *slot = Some(s.to_string());
            }
        };
        set_text(&mut inv.name, get(Target::Name));
        set_text(&mut inv.serial, get(Target::Serial));
        set_text(&mut inv.pci_bus_id, get(Target::BusId));
        set_text(&mut inv.driver_version, get(Target::Driver));
        fn keep<T>(slot: &mut Option<T>, v: Option<T>) {
            if v.is_some() {
                *slot = v;
            }
        }
        keep(&mut inv.memory_total_bytes, mem_total);
        keep(&mut inv.power_limit_mw, inv_power);
        keep(&mut inv.power_limit_min_mw, power_min);
        keep(&mut inv.power_limit_max_mw, power_max);
        keep(&mut inv.pcie_max_gen, max_gen);
        keep(&mut inv.pcie_max_width, max_width);
        keep(&mut inv.persistence_mode, persistence);
        keep(&mut inv.mig_mode, mig);
        Ok(())
    }
}
