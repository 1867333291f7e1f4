//! Summary and description templates: `GPU {gpu} ({model}) grows {rate:.0} MiB/min`.
//! Placeholder — the parser lands with the rule-file loader.

/// A parsed template.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Template {
    pub source: String,
}
