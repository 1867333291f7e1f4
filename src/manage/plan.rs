//! From a request to a plan: which GPUs `--gpu` names, and for each GPU every change with
//! its current value, checked against what the GPU accepts.
//!
//! Invariants: pure (NVML's answers come in as [`Current`]); every problem of every GPU is
//! collected, so one run reports them all; a plan exists only when every change on every
//! selected GPU passed, so nothing is written unless everything was valid.

use super::nvml::{Answer, Current, GpuId};
use crate::setting::{Change, Setting, mhz_range, on_off, watts};

/// One `--gpu` word: an index, a UUID, or `all`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    All,
    Index(u32),
    Uuid(String),
}

/// Parses `--gpu`: `all`, or indices and UUIDs separated by commas (`0,2`, `GPU-8f…`).
pub fn parse_selectors(text: &str) -> Result<Vec<Selector>, String> {
    let mut out = Vec::new();
    for word in text.split(',').map(str::trim) {
        out.push(match word {
            "" => return Err(format!("{text:?}: an empty GPU in the list")),
            w if w.eq_ignore_ascii_case("all") => Selector::All,
            w if w.bytes().all(|b| b.is_ascii_digit()) => Selector::Index(
                w.parse()
                    .map_err(|_| format!("{w:?}: not a GPU index (0, 1, ...)"))?,
            ),
            w if w.len() > 4 && w[..4].eq_ignore_ascii_case("GPU-") => Selector::Uuid(w.into()),
            w => {
                return Err(format!(
                    "{w:?} is not a GPU: give an index (0, 1, ...), a UUID (GPU-...) or all"
                ));
            }
        });
    }
    Ok(out)
}

/// The GPUs `selectors` name, in index order, each once. `gpus` is NVML's list by index.
pub fn select(
    gpus: &[Result<GpuId, String>],
    selectors: &[Selector],
) -> Result<Vec<GpuId>, Vec<String>> {
    let mut picked: Vec<u32> = Vec::new();
    let mut problems = Vec::new();
    let known = || {
        gpus.iter()
            .filter_map(|g| g.as_ref().ok())
            .map(|g| g.index.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    for sel in selectors {
        match sel {
            Selector::All => picked.extend(0..gpus.len() as u32),
            Selector::Index(i) if (*i as usize) < gpus.len() => picked.push(*i),
            Selector::Index(i) => problems.push(format!(
                "there is no GPU {i} (this machine has GPUs {})",
                if gpus.is_empty() {
                    "none".into()
                } else {
                    known()
                }
            )),
            Selector::Uuid(u) => match gpus
                .iter()
                .filter_map(|g| g.as_ref().ok())
                .find(|g| g.uuid.eq_ignore_ascii_case(u))
            {
                Some(g) => picked.push(g.index),
                None => problems.push(format!(
                    "no GPU has the UUID {u} (`nvidia-smi -L` lists them)"
                )),
            },
        }
    }
    picked.sort_unstable();
    picked.dedup();
    let mut out = Vec::new();
    for i in picked {
        match &gpus[i as usize] {
            Ok(g) => out.push(g.clone()),
            Err(e) => problems.push(format!("GPU {i}: cannot be identified: {e}")),
        }
    }
    if problems.is_empty() {
        Ok(out)
    } else {
        Err(problems)
    }
}

/// One change on one GPU, with the value it replaces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub change: Change,
    /// The current value's text; `None` when NVML cannot tell (locked clocks have no getter).
    pub old: Option<String>,
}

impl Step {
    /// The GPU already has the new value: there is nothing to write.
    pub fn unchanged(&self) -> bool {
        self.old.as_deref() == Some(self.change.text().as_str())
    }
}

/// Every change of one GPU, in the order they are applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuPlan {
    pub gpu: GpuId,
    pub steps: Vec<Step>,
}

/// `GPU 1 (NVIDIA A100-SXM4-40GB)`.
pub fn gpu_label(g: &GpuId) -> String {
    match &g.name {
        Some(n) => format!("GPU {} ({n})", g.index),
        None => format!("GPU {}", g.index),
    }
}

/// The flag that asked for a change, for messages.
fn flag(c: Change) -> &'static str {
    match c {
        Change::PowerLimit { .. } => "--power-limit",
        Change::Persistence(_) => "--persistence",
        Change::LockClocks { .. } => "--lock-clocks",
        Change::ResetClocks => "--reset-clocks",
        Change::LockMemoryClocks { .. } => "--lock-memory-clocks",
        Change::ResetMemoryClocks => "--reset-memory-clocks",
        Change::ComputeMode(_) => "--compute-mode",
    }
}

/// Checks every change against what `gpu` accepts; the problems name the allowed range.
pub fn validate(gpu: &GpuId, cur: &Current, changes: &[Change]) -> Result<GpuPlan, Vec<String>> {
    let mut steps = Vec::new();
    let mut problems = Vec::new();
    let who = gpu_label(gpu);
    let mut ordered = changes.to_vec();
    ordered.sort_by_key(|c| c.setting());
    for change in ordered {
        let problem = match change {
            Change::PowerLimit { mw } => range_problem(
                &who,
                change,
                ("power limits", cur.power_constraints),
                (mw, mw),
                watt_range,
            ),
            Change::LockClocks { min_mhz, max_mhz } => range_problem(
                &who,
                change,
                ("graphics clocks", cur.graphics_clocks),
                (min_mhz, max_mhz),
                mhz_range,
            ),
            Change::LockMemoryClocks { min_mhz, max_mhz } => range_problem(
                &who,
                change,
                ("memory clocks", cur.memory_clocks),
                (min_mhz, max_mhz),
                mhz_range,
            ),
            Change::Persistence(_)
            | Change::ResetClocks
            | Change::ResetMemoryClocks
            | Change::ComputeMode(_) => None,
        };
        match problem {
            Some(p) => problems.push(p),
            None => steps.push(Step {
                change,
                old: old_value(cur, change.setting()),
            }),
        }
    }
    if problems.is_empty() {
        Ok(GpuPlan {
            gpu: gpu.clone(),
            steps,
        })
    } else {
        Err(problems)
    }
}

/// `100-400 W`.
fn watt_range(min: u32, max: u32) -> String {
    format!("{}-{}", watts(min).trim_end_matches(" W"), watts(max))
}

/// Why `asked` (lowest, highest) is not within `accepted`, naming the allowed range; `None`
/// when it is.
fn range_problem(
    who: &str,
    change: Change,
    (what, accepted): (&str, Answer<(u32, u32)>),
    (lo, hi): (u32, u32),
    text: fn(u32, u32) -> String,
) -> Option<String> {
    match accepted {
        Err(d) => Some(format!(
            "{who}: {} {}: cannot read the {what} it accepts: {}",
            flag(change),
            change.text(),
            d.cause
        )),
        Ok((min, max)) if lo < min || hi > max => Some(format!(
            "{who}: {} {} is outside the allowed range {}",
            flag(change),
            change.text(),
            text(min, max)
        )),
        Ok(_) => None,
    }
}

/// The current value's text, when NVML tells it.
fn old_value(cur: &Current, setting: Setting) -> Option<String> {
    match setting {
        Setting::PowerLimit => cur.power_limit_mw.ok().map(watts),
        Setting::Persistence => cur.persistence.ok().map(|p| on_off(p).to_string()),
        Setting::ComputeMode => cur.compute_mode.ok().map(|m| m.text().to_string()),
        // NVML has no getter for locked clocks.
        Setting::GpuLockedClocks | Setting::MemoryLockedClocks => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampler::diagnosis;
    use crate::setting::ComputeMode;

    fn gpu(index: u32) -> GpuId {
        GpuId {
            index,
            uuid: format!("GPU-{index:08}"),
            name: Some("NVIDIA A100-SXM4-40GB".into()),
        }
    }

    fn current() -> Current {
        Current {
            power_limit_mw: Ok(400_000),
            power_constraints: Ok((100_000, 400_000)),
            persistence: Ok(true),
            compute_mode: Ok(ComputeMode::Default),
            graphics_clocks: Ok((210, 1410)),
            memory_clocks: Err(diagnosis::NOT_SUPPORTED),
        }
    }

    #[test]
    fn gpu_words_parse_and_select_each_gpu_once() {
        let gpus = vec![Ok(gpu(0)), Ok(gpu(1)), Err("GPU is lost".to_string())];
        let s = parse_selectors("1, GPU-00000000,1").unwrap();
        let got = select(&gpus[..2], &s).unwrap();
        assert_eq!(got.iter().map(|g| g.index).collect::<Vec<_>>(), vec![0, 1]);
        assert!(parse_selectors("gpu3").unwrap_err().contains("not a GPU"));
        assert!(parse_selectors("0,").is_err());
        let all = select(&gpus, &parse_selectors("all").unwrap()).unwrap_err();
        assert_eq!(
            all,
            vec!["GPU 2: cannot be identified: GPU is lost".to_string()]
        );
        let missing = select(&gpus[..2], &[Selector::Index(5)]).unwrap_err();
        assert_eq!(
            missing,
            vec!["there is no GPU 5 (this machine has GPUs 0, 1)".to_string()]
        );
    }

    #[test]
    fn every_problem_names_the_allowed_range_and_nothing_is_planned() {
        let asked = [
            Change::ComputeMode(ComputeMode::Prohibited),
            Change::PowerLimit { mw: 500_000 },
            Change::LockClocks {
                min_mhz: 100,
                max_mhz: 1200,
            },
            Change::LockMemoryClocks {
                min_mhz: 1215,
                max_mhz: 1215,
            },
        ];
        let problems = validate(&gpu(1), &current(), &asked).unwrap_err();
        assert_eq!(
            problems,
            vec![
                "GPU 1 (NVIDIA A100-SXM4-40GB): --power-limit 500 W is outside the allowed range 100-400 W",
                "GPU 1 (NVIDIA A100-SXM4-40GB): --lock-clocks 100-1200 MHz is outside the allowed range 210-1410 MHz",
                "GPU 1 (NVIDIA A100-SXM4-40GB): --lock-memory-clocks 1215-1215 MHz: cannot read the memory clocks it accepts: this GPU or driver does not support the query",
            ]
        );
    }

    #[test]
    fn a_valid_request_is_planned_in_order_with_the_old_values() {
        let asked = [
            Change::ComputeMode(ComputeMode::Default),
            Change::LockClocks {
                min_mhz: 1200,
                max_mhz: 1410,
            },
            Change::PowerLimit { mw: 350_000 },
            Change::Persistence(false),
        ];
        let plan = validate(&gpu(0), &current(), &asked).unwrap();
        let got: Vec<(String, Option<String>, bool)> = plan
            .steps
            .iter()
            .map(|s| (s.change.to_string(), s.old.clone(), s.unchanged()))
            .collect();
        assert_eq!(
            got,
            vec![
                ("persistence mode off".into(), Some("on".into()), false),
                ("power limit 350 W".into(), Some("400 W".into()), false),
                ("locked clocks 1200-1410 MHz".into(), None, false),
                ("compute mode default".into(), Some("default".into()), true),
            ]
        );
    }
}
