//! `[xid]`: the kernel log as a second source of XIDs, and `[[xid.override]]`: what the
//! default rules make of particular codes here (docs/XID.md).
//!
//! Invariants: every code appears in at most one override; `count` and `within` go together;
//! an override changes what is counted as critical (`xid_critical`), never what is stored.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::raw::Checker;

/// `[xid] kmsg_path` when the config does not set it.
pub const DEFAULT_KMSG_PATH: &str = "/dev/kmsg";

/// `[xid]`: the kernel log as a second source of XIDs, and the overrides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XidConfig {
    /// Follow the kernel log for `NVRM: Xid` lines (besides NVML's event API).
    pub kernel_log: bool,
    /// The kernel log device, or a FIFO or file of records in its format (tests, a host's
    /// `/dev/kmsg` mounted elsewhere); `None`: [`DEFAULT_KMSG_PATH`], which simulated GPUs
    /// (the demo) do not follow: the host's kernel log says nothing about them.
    pub kmsg_path: Option<PathBuf>,
    /// `[[xid.override]]`, in file order.
    pub overrides: Vec<XidOverride>,
}

impl Default for XidConfig {
    fn default() -> Self {
        Self {
            kernel_log: true,
            kmsg_path: None,
            overrides: Vec::new(),
        }
    }
}

/// What an override makes of its codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OverrideClass {
    /// Never critical (the event is still stored and shown).
    Ignore,
    /// The application's: never critical.
    Application,
    /// The GPU's hardware: critical (at the `count`-th within `within`, when set).
    Hardware,
}

impl OverrideClass {
    /// The class the judge is given (`crate::xid::judge`); `None` for `ignore` (never
    /// judged: not counted at all).
    pub fn judged(self) -> Option<crate::xid::judge::XidClass> {
        match self {
            OverrideClass::Ignore => None,
            OverrideClass::Application => Some(crate::xid::judge::XidClass::Application),
            OverrideClass::Hardware => Some(crate::xid::judge::XidClass::Hardware),
        }
    }
}

impl XidConfig {
    /// The override of `code`, if one names it.
    pub fn override_of(&self, code: i64) -> Option<&XidOverride> {
        self.overrides.iter().find(|o| o.codes.contains(&code))
    }
}

/// `[[xid.override]]`: `codes`, `class`, and optionally `count` within `within`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XidOverride {
    pub codes: Vec<i64>,
    pub class: OverrideClass,
    /// Critical only from the `count`-th event of these codes on one GPU within `within`.
    pub count_within: Option<(u32, Duration)>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawXid {
    kernel_log: Option<bool>,
    kmsg_path: Option<PathBuf>,
    #[serde(default, rename = "override")]
    overrides: Vec<Spanned<RawOverride>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOverride {
    codes: Spanned<Vec<Spanned<i64>>>,
    class: Spanned<String>,
    count: Option<Spanned<i64>>,
    within: Option<Spanned<String>>,
}

impl RawXid {
    pub(super) fn compile(self, c: &mut Checker<'_>) -> XidConfig {
        let mut overrides: Vec<XidOverride> = Vec::new();
        for o in self.overrides {
            let span = o.span();
            let o = o.into_inner();
            let class = match o.class.get_ref().as_str() {
                "ignore" => OverrideClass::Ignore,
                "application" => OverrideClass::Application,
                "hardware" => OverrideClass::Hardware,
                other => {
                    c.error(
                        o.class.span(),
                        format!("`xid.override.class` = {other:?} is not a class"),
                        "use \"ignore\" (never alert), \"application\" (the program's fault: never critical) or \"hardware\" (critical)",
                    );
                    continue;
                }
            };
            if o.codes.get_ref().is_empty() {
                c.error(
                    o.codes.span(),
                    "`xid.override.codes` is empty".into(),
                    "list the XID numbers it applies to, e.g. codes = [13, 31]",
                );
            }
            let mut codes = Vec::new();
            for code in o.codes.get_ref() {
                let v = *code.get_ref();
                if !(1..=65_535).contains(&v) {
                    c.error(
                        code.span(),
                        format!("`xid.override.codes`: {v} is not an XID number"),
                        "XIDs are numbers from 1 (docs/XID.md lists the known ones)",
                    );
                } else if overrides.iter().any(|x| x.codes.contains(&v)) || codes.contains(&v) {
                    c.error(
                        code.span(),
                        format!("XID {v} is already in another `[[xid.override]]`"),
                        "give each code one override",
                    );
                } else {
                    codes.push(v);
                }
            }
            let count_within = match (&o.count, &o.within) {
                (None, None) => None,
                (Some(n), Some(w)) => {
                    let within = c.duration(
                        "xid.override.within",
                        &Some(w.clone()),
                        Duration::from_secs(3600),
                        Duration::from_secs(1),
                        Duration::from_secs(7 * 86_400),
                    );
                    match u32::try_from(*n.get_ref()) {
                        Ok(n) if n >= 1 => Some((n, within)),
                        _ => {
                            c.error(
                                n.span(),
                                format!("`xid.override.count` = {} is not a count", n.get_ref()),
                                "use a whole number from 1 (alert at the N-th within `within`)",
                            );
                            None
                        }
                    }
                }
                (Some(_), None) | (None, Some(_)) => {
                    c.error(
                        span.clone(),
                        "`count` and `within` go together in an `[[xid.override]]`".into(),
                        "write both, e.g. count = 3 and within = \"1h\" (critical at the 3rd within an hour)",
                    );
                    None
                }
            };
            if count_within.is_some() && class != OverrideClass::Hardware {
                c.error(
                    span,
                    "`count`/`within` apply to class = \"hardware\" only".into(),
                    "an ignored or application XID is never critical; drop count and within",
                );
            }
            overrides.push(XidOverride {
                codes,
                class,
                count_within,
            });
        }
        XidConfig {
            kernel_log: self.kernel_log.unwrap_or(true),
            kmsg_path: self.kmsg_path,
            overrides,
        }
    }
}
