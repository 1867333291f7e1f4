//! The Prometheus exposition formats: text 0.0.4 (what dcgm-exporter serves, the default)
//! and OpenMetrics 1.0 (when the scraper's `Accept` asks for it), from one family model.
//!
//! Why not the prometheus-client crate: it encodes OpenMetrics only, and appends `_total` to
//! every counter — dcgm-exporter's counters (`DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`, the
//! remapped-row counters) have no `_total`, and NVIDIA's dashboard queries them by their
//! names. Here a counter says whether its samples carry `_total`; one without it is exposed
//! as `unknown` in OpenMetrics (whose counters must end in `_total`), under the same name.
//!
//! Invariants: label values are escaped (`\`, `"`, newline); label names are valid (callers
//! pass names from fixed tables or [`label_name`]); a family with no samples is not written;
//! non-finite values are written as `NaN` / `+Inf` / `-Inf`.

use std::borrow::Cow;
use std::fmt::Write;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Gauge,
    /// `total`: the samples are named `<family>_total` (gpuwatch's counters); false for
    /// dcgm-exporter's counters, whose samples carry the family's name.
    Counter {
        total: bool,
    },
    Histogram,
}

/// One labelled value. `suffix` is `_bucket` / `_sum` / `_count` for histograms.
#[derive(Debug, Clone)]
pub struct Sample {
    pub suffix: &'static str,
    pub labels: Labels,
    pub value: f64,
}

/// One label: a name (mostly static) and its value.
pub type Label = (Cow<'static, str>, String);
/// A sample's labels, shared: a GPU's label set is built once and carried by every family.
pub type Labels = std::sync::Arc<[Label]>;

#[derive(Debug, Clone)]
pub struct Family {
    pub name: Cow<'static, str>,
    pub help: Cow<'static, str>,
    pub kind: Kind,
    /// OpenMetrics `# UNIT` (only when the name ends with `_<unit>`).
    pub unit: Option<&'static str>,
    pub samples: Vec<Sample>,
}

impl Family {
    pub fn new(
        name: impl Into<Cow<'static, str>>,
        kind: Kind,
        help: impl Into<Cow<'static, str>>,
    ) -> Self {
        Family {
            name: name.into(),
            help: help.into(),
            kind,
            unit: None,
            samples: Vec::new(),
        }
    }

    pub fn unit(mut self, unit: &'static str) -> Self {
        if self.name.ends_with(&format!("_{unit}")) {
            self.unit = Some(unit);
        }
        self
    }

    /// The name the text format (and remote write) gives the family: a `_total` counter's
    /// name carries its suffix.
    pub fn text_name(&self) -> Cow<'_, str> {
        match self.kind {
            Kind::Counter { total: true } => Cow::Owned(format!("{}_total", self.name)),
            _ => Cow::Borrowed(&self.name),
        }
    }

    pub fn push(&mut self, labels: impl Into<Labels>, value: f64) {
        self.samples.push(Sample {
            suffix: "",
            labels: labels.into(),
            value,
        });
    }

    /// Adds a histogram's samples from cumulative bucket counts (`bounds[i]` ↔ `counts[i]`,
    /// then `+Inf` = `count`).
    pub fn push_histogram(
        &mut self,
        labels: &[Label],
        bounds: &[f64],
        cumulative: &[u64],
        sum: f64,
        count: u64,
    ) {
        for (b, c) in bounds.iter().zip(cumulative) {
            let mut l = labels.to_vec();
            l.push(("le".into(), fmt_value(*b)));
            self.samples.push(Sample {
                suffix: "_bucket",
                labels: l.into(),
                value: *c as f64,
            });
        }
        let mut l = labels.to_vec();
        l.push(("le".into(), "+Inf".into()));
        self.samples.push(Sample {
            suffix: "_bucket",
            labels: l.into(),
            value: count as f64,
        });
        self.samples.push(Sample {
            suffix: "_sum",
            labels: Labels::from(labels),
            value: sum,
        });
        self.samples.push(Sample {
            suffix: "_count",
            labels: Labels::from(labels),
            value: count as f64,
        });
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `text/plain; version=0.0.4`.
    Text,
    /// `application/openmetrics-text; version=1.0.0`.
    OpenMetrics,
}

impl Format {
    /// OpenMetrics when the `Accept` header lists it with a non-zero weight, else text.
    pub fn negotiate(accept: Option<&str>) -> Format {
        let Some(accept) = accept else {
            return Format::Text;
        };
        for part in accept.split(',') {
            let mut params = part.split(';').map(str::trim);
            let media = params.next().unwrap_or_default();
            if !media.eq_ignore_ascii_case("application/openmetrics-text") {
                continue;
            }
            let q = params
                .filter_map(|p| p.strip_prefix("q="))
                .find_map(|q| q.parse::<f64>().ok())
                .unwrap_or(1.0);
            if q > 0.0 {
                return Format::OpenMetrics;
            }
        }
        Format::Text
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Format::Text => "text/plain; version=0.0.4; charset=utf-8",
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }
}

/// A valid label name from any string (Prometheus's rule: `[a-zA-Z_][a-zA-Z0-9_]*`).
pub fn label_name(s: &str) -> String {
    let mut out: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.is_empty() || out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    out
}

pub fn fmt_value(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v == f64::INFINITY {
        "+Inf".into()
    } else if v == f64::NEG_INFINITY {
        "-Inf".into()
    } else {
        format!("{v}")
    }
}

fn escape_help(s: &str, out: &mut String) {
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

fn escape_value(s: &str, out: &mut String) {
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// Writes `families` in `format` (the tests' shorthand for [`encode_into`]).
#[cfg(test)]
pub fn encode(families: &[Family], format: Format) -> String {
    let mut out = String::new();
    encode_into(families, format, &mut out);
    out
}

/// [`encode`] appended to `out` (a scrape reuses one buffer: `Scraper::scrape`).
pub fn encode_into(families: &[Family], format: Format, out: &mut String) {
    for f in families.iter().filter(|f| !f.samples.is_empty()) {
        let (type_name, sample_base): (&str, Cow<str>) = match (f.kind, format) {
            (Kind::Gauge, _) => ("gauge", f.name.clone()),
            (Kind::Histogram, _) => ("histogram", f.name.clone()),
            (Kind::Counter { .. }, Format::Text) => ("counter", f.text_name()),
            (Kind::Counter { total: true }, Format::OpenMetrics) => ("counter", f.name.clone()),
            (Kind::Counter { total: false }, Format::OpenMetrics) => ("unknown", f.name.clone()),
        };
        let sample_suffix = match (f.kind, format) {
            (Kind::Counter { total: true }, Format::OpenMetrics) => "_total",
            _ => "",
        };
        // In text format a counter's HELP/TYPE name is its sample name.
        let family_name: &str = match format {
            Format::Text => &sample_base,
            Format::OpenMetrics => &f.name,
        };
        out.push_str("# HELP ");
        out.push_str(family_name);
        out.push(' ');
        escape_help(&f.help, out);
        out.push('\n');
        let _ = writeln!(out, "# TYPE {family_name} {type_name}");
        if let (Format::OpenMetrics, Some(unit)) = (format, f.unit) {
            let _ = writeln!(out, "# UNIT {family_name} {unit}");
        }
        for s in &f.samples {
            out.push_str(&sample_base);
            out.push_str(sample_suffix);
            out.push_str(s.suffix);
            if !s.labels.is_empty() {
                out.push('{');
                for (i, (k, v)) in s.labels.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(k);
                    out.push_str("=\"");
                    escape_value(v, out);
                    out.push('"');
                }
                out.push('}');
            }
            out.push(' ');
            out.push_str(&fmt_value(s.value));
            out.push('\n');
        }
    }
    if format == Format::OpenMetrics {
        out.push_str("# EOF\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fam() -> Vec<Family> {
        let mut g = Family::new(
            "DCGM_FI_DEV_GPU_TEMP",
            Kind::Gauge,
            "GPU temperature (in C).",
        );
        g.push(
            vec![
                ("gpu".into(), "0".into()),
                ("modelName".into(), "H\"1\\00\n".into()),
            ],
            41.0,
        );
        let mut c = Family::new(
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
            Kind::Counter { total: false },
            "Total energy",
        );
        c.push(Vec::new(), 1e6);
        let mut t = Family::new("gpuwatch_ticks", Kind::Counter { total: true }, "Ticks.");
        t.push(Vec::new(), 3.0);
        let mut h =
            Family::new("gpuwatch_tick_duration_seconds", Kind::Histogram, "Tick.").unit("seconds");
        h.push_histogram(&[], &[0.001, 0.01], &[1, 2], 0.0125, 3);
        let empty = Family::new("gpuwatch_nothing", Kind::Gauge, "never written");
        vec![g, c, t, h, empty]
    }

    #[test]
    fn text_format_keeps_dcgm_names_and_escapes() {
        let t = encode(&fam(), Format::Text);
        assert!(t.contains("# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n"));
        assert!(
            t.contains("DCGM_FI_DEV_GPU_TEMP{gpu=\"0\",modelName=\"H\\\"1\\\\00\\n\"} 41\n"),
            "{t}"
        );
        assert!(t.contains("# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter\nDCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION 1000000\n"));
        assert!(t.contains("# TYPE gpuwatch_ticks_total counter\ngpuwatch_ticks_total 3\n"));
        assert!(t.contains("gpuwatch_tick_duration_seconds_bucket{le=\"+Inf\"} 3\n"));
        assert!(!t.contains("gpuwatch_nothing"));
        assert!(!t.contains("# EOF"));
    }

    #[test]
    fn openmetrics_names_counters_by_its_rules() {
        let t = encode(&fam(), Format::OpenMetrics);
        assert!(t.contains("# TYPE gpuwatch_ticks counter\ngpuwatch_ticks_total 3\n"));
        assert!(t.contains("# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION unknown\n"));
        assert!(t.contains("# UNIT gpuwatch_tick_duration_seconds seconds\n"));
        assert!(t.ends_with("# EOF\n"));
    }

    #[test]
    fn accept_negotiation() {
        let prom = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(Format::negotiate(Some(prom)), Format::OpenMetrics);
        assert_eq!(Format::negotiate(Some("text/plain")), Format::Text);
        assert_eq!(
            Format::negotiate(Some("application/openmetrics-text;q=0")),
            Format::Text
        );
        assert_eq!(Format::negotiate(None), Format::Text);
        assert_eq!(
            label_name("app.kubernetes.io/name"),
            "app_kubernetes_io_name"
        );
        assert_eq!(label_name("1x"), "_1x");
        assert_eq!(fmt_value(f64::INFINITY), "+Inf");
        assert_eq!(fmt_value(0.5), "0.5");
    }
}
