//! Rule unit-test files (`gpuwatch rules test`): TOML → a typed [`TestFile`] whose series are
//! expanded, durations parsed and metric names checked.
//!
//! Invariants: a file either parses completely or yields every problem found, each as
//! `file:line:col: message (hint)` ([`RuleError`]) pointing at the offending value (inside a
//! series string, at the offending term); rule-file paths are resolved against the test
//! file's directory; nothing is read but the test file itself.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;

use super::check::{RuleError, RuleErrors};
use super::lex::parse_duration;
use super::series_notation::parse_series;

/// A series of samples; `None` = missing.
pub type Values = Vec<Option<f64>>;

/// The per-GPU metrics a test can feed (the names of docs/RULES.md).
pub const GPU_METRICS: &[&str] = &[
    "util_gpu",
    "util_mem",
    "mem_used",
    "mem_free",
    "mem_total",
    "temp",
    "fan",
    "clock_sm",
    "clock_mem",
    "power",
    "power_limit",
    "pstate",
    "pcie_tx",
    "pcie_rx",
    "pcie_gen",
    "pcie_width",
    "thermal_throttle",
    "hw_slowdown",
    "ecc_corrected",
    "ecc_uncorrected",
    "retired_pages",
    "remapped_rows_uncorrectable",
    "remap_pending",
    "lost",
    "gap",
    "process_count",
    "tensor_active",
    "sm_active",
    "sm_occupancy",
    "dram_active",
    "recovery_action",
    "nvlink_links_up",
    "nvlink_crc_flit_errors",
    "nvlink_crc_data_errors",
    "nvlink_replay_errors",
    "nvlink_recovery_errors",
    "nvlink_traffic",
    "fabric_state",
    "fabric_status",
];

#[derive(Debug, Clone, PartialEq)]
pub struct TestFile {
    /// `None`: the shipped default rules.
    pub rule_files: Option<Vec<PathBuf>>,
    pub interval_ms: i64,
    pub gpus: Vec<TestGpu>,
    pub training: Vec<TestTraining>,
    pub alerts: Vec<ExpectedAlerts>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct TestGpu {
    pub name: Option<String>,
    pub memory_total_mib: Option<u64>,
    pub temp_slowdown: Option<u32>,
    pub temp_shutdown: Option<u32>,
    pub power_limit_w: Option<u32>,
    /// Metric name (one of [`GPU_METRICS`]) → values.
    pub series: BTreeMap<String, Values>,
    pub processes: Vec<TestProcess>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TestProcess {
    pub pid: u32,
    pub name: Option<String>,
    /// MiB; the process exists at the samples where this has a value.
    pub mem: Values,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TestTraining {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub interval_ms: i64,
    pub values: Values,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ExpectedAlerts {
    /// Offset from the first sample, ms.
    pub at_ms: i64,
    /// As written, for messages (`15m`).
    pub at_text: String,
    pub firing: Vec<Expected>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expected {
    pub rule: String,
    /// GPU index; `None` = any GPU.
    pub gpu: Option<u32>,
    pub severity: Option<String>,
    pub pid: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    rule_files: Option<Vec<Spanned<String>>>,
    interval: Option<Spanned<String>>,
    #[serde(default)]
    gpu: Vec<RawGpu>,
    #[serde(default)]
    training: Vec<RawTraining>,
    #[serde(default)]
    alert: Vec<RawAlert>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGpu {
    name: Option<String>,
    memory_total_mib: Option<u64>,
    temp_slowdown: Option<u32>,
    temp_shutdown: Option<u32>,
    power_limit_w: Option<u32>,
    #[serde(default)]
    series: BTreeMap<String, Spanned<String>>,
    #[serde(default)]
    process: Vec<RawProcess>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProcess {
    pid: u32,
    name: Option<String>,
    mem: Spanned<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTraining {
    #[serde(default)]
    labels: BTreeMap<String, String>,
    name: Option<String>,
    series: Spanned<String>,
    interval: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAlert {
    at: Spanned<String>,
    #[serde(default)]
    firing: Vec<RawExpected>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawExpected {
    rule: String,
    gpu: Option<u32>,
    severity: Option<String>,
    pid: Option<u32>,
}

/// Parses the test file at `path` (named `origin` in messages) from `text`.
pub fn parse(path: &Path, origin: &str, text: &str) -> Result<TestFile, RuleErrors> {
    let mut p = Parser {
        origin,
        text,
        errors: Vec::new(),
    };
    let raw: Raw = match toml::from_str(text) {
        Ok(r) => r,
        Err(e) => {
            let at = e.span().map(|s| s.start);
            let msg = e.message().trim().to_string();
            p.error(at, msg, None);
            return Err(RuleErrors(p.errors));
        }
    };
    let dir = path.parent().unwrap_or(Path::new(""));
    let rule_files = raw
        .rule_files
        .map(|fs| fs.iter().map(|f| dir.join(f.get_ref())).collect());
    let interval_ms = p.interval(raw.interval.as_ref(), 1000);
    let gpus = raw.gpu.into_iter().map(|g| p.gpu(g)).collect();
    let training = raw
        .training
        .into_iter()
        .map(|t| TestTraining {
            name: t.name.unwrap_or_else(|| "training_step".into()),
            labels: t.labels.into_iter().collect(),
            interval_ms: p.interval(t.interval.as_ref(), interval_ms),
            values: p.series(&t.series),
        })
        .collect();
    let alerts = raw.alert.into_iter().map(|a| p.alert(a)).collect();
    if p.errors.is_empty() {
        Ok(TestFile {
            rule_files,
            interval_ms,
            gpus,
            training,
            alerts,
        })
    } else {
        Err(RuleErrors(p.errors))
    }
}

struct Parser<'a> {
    origin: &'a str,
    text: &'a str,
    errors: Vec<RuleError>,
}

impl Parser<'_> {
    fn error(&mut self, at: Option<usize>, message: String, hint: Option<String>) {
        self.errors.push(RuleError {
            file: self.origin.to_string(),
            position: at.map(|o| line_col(self.text, o)),
            message,
            hint,
        });
    }

    /// Byte offset in the file of byte `offset` of a string value.
    fn inside(s: &Spanned<String>, offset: usize) -> usize {
        s.span().start + 1 + offset
    }

    fn duration_ms(&mut self, s: &Spanned<String>, what: &str) -> Option<i64> {
        match parse_duration(s.get_ref()) {
            Ok(secs) => Some((secs * 1000.0).round() as i64),
            Err(e) => {
                let msg = format!("`{what}`: {}", e.message);
                self.error(Some(Self::inside(s, e.offset)), msg, e.hint);
                None
            }
        }
    }

    fn interval(&mut self, s: Option<&Spanned<String>>, default: i64) -> i64 {
        let Some(s) = s else { return default };
        match self.duration_ms(s, "interval") {
            Some(ms) if ms > 0 => ms,
            Some(_) => {
                let msg = "`interval` must be longer than 0s".to_string();
                self.error(Some(s.span().start), msg, None);
                default
            }
            None => default,
        }
    }

    fn series(&mut self, s: &Spanned<String>) -> Values {
        parse_series(s.get_ref()).unwrap_or_else(|e| {
            self.error(Some(Self::inside(s, e.offset)), e.message, e.hint);
            Vec::new()
        })
    }

    fn gpu(&mut self, g: RawGpu) -> TestGpu {
        let mut series = BTreeMap::new();
        for (name, s) in &g.series {
            if !GPU_METRICS.contains(&name.as_str()) {
                let hint = super::names::closest(name, GPU_METRICS.iter().copied())
                    .map(|c| format!("did you mean `{c}`?"));
                let msg = format!("unknown GPU metric `{name}`");
                self.error(Some(s.span().start), msg, hint);
                continue;
            }
            series.insert(name.clone(), self.series(s));
        }
        let processes = g
            .process
            .iter()
            .map(|p| TestProcess {
                pid: p.pid,
                name: p.name.clone(),
                mem: self.series(&p.mem),
            })
            .collect();
        TestGpu {
            name: g.name,
            memory_total_mib: g.memory_total_mib,
            temp_slowdown: g.temp_slowdown,
            temp_shutdown: g.temp_shutdown,
            power_limit_w: g.power_limit_w,
            series,
            processes,
        }
    }

    fn alert(&mut self, a: RawAlert) -> ExpectedAlerts {
        let at_ms = self.duration_ms(&a.at, "at").unwrap_or(0);
        ExpectedAlerts {
            at_ms,
            at_text: a.at.get_ref().clone(),
            firing: a
                .firing
                .into_iter()
                .map(|e| Expected {
                    rule: e.rule,
                    gpu: e.gpu,
                    severity: e.severity,
                    pid: e.pid,
                })
                .collect(),
        }
    }
}

/// 1-based line and column (in characters) of a byte offset.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..text.floor_char_boundary(offset.min(text.len()))];
    let line = before.matches('\n').count() + 1;
    let start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[start..].chars().count() + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors(text: &str) -> String {
        parse(Path::new("t.toml"), "t.toml", text)
            .expect_err("fails")
            .to_string()
    }

    #[test]
    fn parses_a_complete_file() {
        let text = "rule_files = [\"r.toml\"]\ninterval = \"10s\"\n[[gpu]]\npower_limit_w = 700\n[gpu.series]\nutil_gpu = \"1+1x2\"\n[[gpu.process]]\npid = 7\nmem = \"100x1\"\n[[training]]\nlabels = { gpu = \"0\" }\nseries = \"0+1x3\"\n[[alert]]\nat = \"1m\"\nfiring = [{ rule = \"x\", gpu = 0 }]\n";
        let f = parse(Path::new("d/t.toml"), "d/t.toml", text).expect("parses");
        assert_eq!(f.rule_files, Some(vec![PathBuf::from("d/r.toml")]));
        assert_eq!(f.interval_ms, 10_000);
        assert_eq!(f.gpus[0].series["util_gpu"].len(), 3);
        assert_eq!(f.gpus[0].processes[0].mem, [Some(100.0); 2]);
        assert_eq!(f.training[0].name, "training_step");
        assert_eq!(f.training[0].interval_ms, 10_000);
        assert_eq!(f.alerts[0].at_ms, 60_000);
        assert_eq!(f.alerts[0].firing[0].gpu, Some(0));
    }

    #[test]
    fn errors_point_into_the_file() {
        assert_eq!(
            errors("[[gpu]]\n[gpu.series]\nutil = \"1\"\n"),
            "t.toml:3:8: unknown GPU metric `util` (did you mean `util_gpu`?)"
        );
        assert_eq!(
            errors("[[gpu]]\n[gpu.series]\ntemp = \"1 2 q\"\n"),
            "t.toml:3:13: `q` is not a number (e.g. `0+1x60`, `95x600`, `_x10`, `1 2 _ 4`)"
        );
        assert!(errors("[[alert]]\nat = \"5min\"\n").starts_with("t.toml:2:"));
        assert!(errors("bogus = 1\n").starts_with("t.toml:1:1: unknown field `bogus`"));
    }
}
