//! The window reader's view of the metric registry ([`crate::metric`]): lookups by name for
//! `gpuwatch history`, reports, email charts and incidents, and `--metric` resolution with the
//! registry's one set of aliases.
//!
//! Invariants:
//! - Every per-GPU sample metric of the rule language is a registry row whose SQL gives the
//!   evaluator's own number for the same row (`SampleMetric::of`), in the rule language's
//!   units; the window tests check every row.
//! - Values come from `status = 0` (ok) rows only; a missed deadline or a lost GPU is no data.
//!   The exceptions are `lost` (`status = 2`) and `gap` (`status = 1`): 0/1 flags made of the
//!   status itself, defined for every row.
//! - Metrics without a rollup column ([`SampleMetric::has_rollup`] false) read as no data
//!   (`None`) from the rollups, never 0; `gpuwatch history` offers only the metrics with one
//!   ([`resolve_metrics`]), since it reads long ranges from the rollups.

pub use crate::metric::SampleMetric;
use crate::metric::{ALIASES, ROLLED_METRICS, SampleId};

/// The metric named `name` (rule-language name only), any row of the registry.
pub fn window_metric(name: &str) -> Option<SampleMetric> {
    SampleId::by_name(name).map(|id| *id.def())
}

/// The metrics `gpuwatch history` offers: those with a rollup column.
fn offered(name: &str) -> Option<SampleMetric> {
    window_metric(name).filter(SampleMetric::has_rollup)
}

/// Resolves `gpuwatch history --metric` names and aliases (`util`, `clocks`) into metrics
/// with a rollup column, without duplicates; the error names the first unknown name and
/// lists the valid ones.
pub fn resolve_metrics<S: AsRef<str>>(names: &[S]) -> Result<Vec<SampleMetric>, String> {
    let mut out: Vec<SampleMetric> = Vec::new();
    for n in names {
        let n = n.as_ref().trim();
        let found: Vec<SampleMetric> = match ALIASES.iter().find(|(a, _)| *a == n) {
            Some((_, targets)) => targets.iter().filter_map(|t| offered(t)).collect(),
            None => offered(n).into_iter().collect(),
        };
        if found.is_empty() {
            let names: Vec<&str> = ROLLED_METRICS.iter().map(|m| m.name).collect();
            let aliases: Vec<&str> = ALIASES
                .iter()
                .filter(|(_, t)| t.iter().all(|t| offered(t).is_some()))
                .map(|(a, _)| *a)
                .collect();
            return Err(format!(
                "unknown metric {n:?}: valid metrics are {} (aliases: {})",
                names.join(", "),
                aliases.join(", ")
            ));
        }
        for f in found {
            if !out.contains(&f) {
                out.push(f);
            }
        }
    }
    Ok(out)
}
