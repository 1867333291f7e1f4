//! The training job's step and loss series of an imported range: the config's
//! `[prometheus.queries]` (the ones the daemon polls), read as raw samples like the GPU
//! series, stored as `training_step` / `training_loss` on the host whose GPUs the job ran on.
//!
//! Invariants:
//! - Only queries made of plain selectors (`training_step`, `a{job="x"} or b`) are read, each
//!   selector as `SELECTOR[Ns]`; any other expression would need a subquery, which resamples
//!   and fills gaps (a scrape gap would look like a stalled step): such a query is reported
//!   and not read.
//! - A series lands on a host only on evidence: a host label (`Hostname`, `hostname`,
//!   `host`, `node`, `nodename`, `kubernetes_node`, or `instance` without its port) naming a
//!   host of the chunk, else its `pod` (and `namespace`) holding a GPU of the chunk, else the
//!   chunk's only host. Otherwise it is counted as unplaced, never guessed.

use std::collections::BTreeMap;

use super::chunk::label;
use crate::model::{TrainingPoint, TsMs};
use crate::training::Matrix;

/// The stored names of the two roles.
pub const STEP: &str = "training_step";
pub const LOSS: &str = "training_loss";

/// The selectors of a query made only of selectors joined by `or`; `None` for any other
/// expression.
pub fn selectors(query: &str) -> Option<Vec<String>> {
    let mut parts = Vec::new();
    let (mut depth, mut quote, mut start) = (0i32, false, 0usize);
    let b = query.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'"' if i == 0 || b[i - 1] != b'\\' => quote = !quote,
            b'{' if !quote => depth += 1,
            b'}' if !quote => depth -= 1,
            b'o' | b'O'
                if !quote
                    && depth == 0
                    && i > 0
                    && b[i - 1].is_ascii_whitespace()
                    && b.get(i + 1).is_some_and(|c| c.eq_ignore_ascii_case(&b'r'))
                    && b.get(i + 2).is_some_and(u8::is_ascii_whitespace) =>
            {
                parts.push(query[start..i].trim().to_string());
                start = i + 2;
                i += 2;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    parts.push(query[start..].trim().to_string());
    parts.iter().all(|p| is_selector(p)).then_some(parts)
}

/// `name`, `name{...}` or `{...}`, nothing else.
fn is_selector(p: &str) -> bool {
    let name_end = p
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .unwrap_or(p.len());
    let (name, rest) = p.split_at(name_end);
    let name_ok = name.is_empty()
        || name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':');
    let rest = rest.trim();
    name_ok
        && (!name.is_empty() || !rest.is_empty())
        && (rest.is_empty()
            || (rest.starts_with('{') && rest.ends_with('}') && !rest.contains('[')))
}

/// The host label keys, most specific first.
const HOST_LABELS: &[&str] = &[
    "Hostname",
    "hostname",
    "host",
    "node",
    "nodename",
    "kubernetes_node",
];

/// Which of `hosts` a series with `labels` belongs to (see the module doc).
pub fn place(
    labels: &[(String, String)],
    hosts: &[String],
    pods: &BTreeMap<(String, String), String>,
) -> Option<usize> {
    let named = HOST_LABELS
        .iter()
        .filter_map(|k| label(labels, k))
        .chain(label(labels, "instance").map(|i| i.rsplit_once(':').map_or(i, |(h, _)| h)));
    for h in named {
        if let Some(i) = hosts.iter().position(|x| x == h) {
            return Some(i);
        }
    }
    if let Some(pod) = label(labels, "pod") {
        let ns = label(labels, "namespace");
        let host = pods
            .iter()
            .find(|((n, p), _)| p == pod && ns.is_none_or(|ns| ns == n))
            .map(|(_, h)| h);
        if let Some(h) = host {
            return hosts.iter().position(|x| x == h);
        }
    }
    (hosts.len() == 1).then_some(0)
}

/// The points of `role`'s series (`matrices`) in `[start, end)`, each with its host; the
/// number of series no host could be found for.
pub fn points(
    role: &str,
    matrices: &[Matrix],
    hosts: &[String],
    pods: &BTreeMap<(String, String), String>,
    (start, end): (TsMs, TsMs),
) -> (Vec<(usize, TrainingPoint)>, u64) {
    let mut out = Vec::new();
    let mut unplaced = 0;
    for s in matrices.iter().flat_map(|m| &m.series) {
        let Some(h) = place(&s.labels, hosts, pods) else {
            unplaced += 1;
            continue;
        };
        out.extend(
            s.points
                .iter()
                .filter(|(t, v)| (start..end).contains(t) && v.is_finite())
                .map(|&(ts_ms, value)| {
                    (
                        h,
                        TrainingPoint {
                            ts_ms,
                            name: role.to_string(),
                            labels: s.labels.clone(),
                            value,
                        },
                    )
                }),
        );
    }
    (out, unplaced)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn only_selectors_are_read() {
        assert_eq!(
            selectors("training_step or training_step_total"),
            Some(vec!["training_step".into(), "training_step_total".into()])
        );
        assert_eq!(
            selectors(r#"step{job="a or b", x=~"y"}"#),
            Some(vec![r#"step{job="a or b", x=~"y"}"#.into()])
        );
        assert_eq!(
            selectors("training_loss"),
            Some(vec!["training_loss".into()])
        );
        assert_eq!(
            selectors(r#"{__name__="loss"}"#),
            Some(vec![r#"{__name__="loss"}"#.into()])
        );
        assert_eq!(selectors("sum(rate(step[5m]))"), None);
        assert_eq!(selectors("max by (job) (step)"), None);
        assert_eq!(selectors("step[5m]"), None);
        assert_eq!(selectors("step * 2"), None);
        assert_eq!(selectors("order"), Some(vec!["order".into()]));
    }

    #[test]
    fn a_series_lands_on_a_host_only_on_evidence() {
        let hosts = vec!["node-1".to_string(), "node-2".to_string()];
        let mut pods = BTreeMap::new();
        pods.insert(
            ("ml".to_string(), "train-1".to_string()),
            "node-2".to_string(),
        );
        assert_eq!(
            place(&l(&[("instance", "node-1:9100")]), &hosts, &pods),
            Some(0)
        );
        assert_eq!(place(&l(&[("Hostname", "node-2")]), &hosts, &pods), Some(1));
        assert_eq!(
            place(
                &l(&[
                    ("pod", "train-1"),
                    ("namespace", "ml"),
                    ("instance", "10.0.0.7:8080")
                ]),
                &hosts,
                &pods
            ),
            Some(1)
        );
        assert_eq!(
            place(
                &l(&[("pod", "train-1"), ("namespace", "other")]),
                &hosts,
                &pods
            ),
            None
        );
        assert_eq!(place(&l(&[("job", "x")]), &hosts, &pods), None);
        assert_eq!(place(&l(&[("job", "x")]), &hosts[..1], &pods), Some(0));
    }
}
