//! The ranked causes of an alert, with the facts behind each and the next steps.
//!
//! Invariants: a cause is proposed only from facts that are present; a rule without built-in
//! knowledge says so rather than guessing; ranking is by a fixed score, ties in a fixed order.

use super::facts::Facts;
use super::incident::{FIRST_RANK_MARGIN_MS, who};
use super::{Cause, Change, ChangeKind, Confidence, Derived, Member, n0};
use crate::model::TsMs;

/// An XID this long before an alert's start (or up to 1 min after) is a likely cause of it.
const XID_NEAR_MS: TsMs = 5 * 60_000;

fn cause(
    score: u32,
    confidence: Confidence,
    cause: &str,
    because: Vec<String>,
    next: &[&str],
) -> Cause {
    Cause {
        cause: cause.to_string(),
        confidence,
        because,
        next_steps: next.iter().map(|s| s.to_string()).collect(),
        score,
    }
}

/// The candidate causes, most likely first. Adds to `unknown` what a rule needed and lacked.
pub fn causes(
    f: &Facts,
    d: &Derived,
    changes: &[Change],
    (members, group): (&[Member], Option<&str>),
    unknown: &mut Vec<String>,
) -> Vec<Cause> {
    use Confidence::{Likely, Possible};
    let mut out: Vec<Cause> = Vec::new();
    let before_start = |k: ChangeKind| {
        changes
            .iter()
            .filter(move |c| c.kind == k && c.at_ms <= f.start)
    };
    // XIDs in the window that ask for more than nothing: a hardware or driver fault.
    for x in f.events.iter().filter(|e| e.kind == "xid") {
        let Some(code) = x.code else { continue };
        let Some(e) = crate::xid::lookup(code) else {
            out.push(cause(
                40,
                Possible,
                &format!("XID {code}, which the catalogue does not list"),
                vec![format!("XID {code} at {}", super::text::hms(x.ts_ms))],
                &["look the number up in NVIDIA's XID documentation and the driver's release notes"],
            ));
            continue;
        };
        if e.action == crate::xid::Action::None {
            continue;
        }
        let hw = matches!(
            f.alert.rule.as_str(),
            "gpu_xid_error" | "gpu_ecc_uncorrected" | "gpu_lost" | "cuda_driver_error"
        );
        // Relevance: for the hardware rules the XID is the alert; otherwise an XID shortly
        // before (or at) the start may be the cause, an older one possibly, a later one not.
        let rel = x.ts_ms - f.start;
        let (confidence, score) = if hw {
            (Likely, 95)
        } else if (-XID_NEAR_MS..=60_000).contains(&rel) {
            (Likely, 90)
        } else if rel < 0 {
            (Possible, 35)
        } else {
            continue;
        };
        out.push(Cause {
            cause: format!("XID {code}: {}", e.meaning),
            confidence,
            because: vec![
                format!(
                    "XID {code} at {} ({} from the alert's start)",
                    super::text::hms(x.ts_ms),
                    super::text::offset(rel.div_euclid(1000))
                ),
                format!("usual cause: {}", e.cause),
            ],
            next_steps: vec![format!("{}: {}", e.action.as_str(), e.detail)],
            score,
        });
    }
    let util = d.util_during;
    let power_low = match (d.power_during, d.power_busy) {
        (Some(p), Some(b)) => Some(b > 0.0 && p < 0.5 * b),
        _ => None,
    };
    let first = members.first().filter(|_| members.len() > 1).filter(|m| {
        let second = members.get(1).and_then(|s| s.stopped_ms);
        matches!((m.stopped_ms, second), (Some(a), Some(b)) if b - a >= FIRST_RANK_MARGIN_MS)
    });
    let stopped = d.step_stopped.map(|(at, v)| {
        format!(
            "the training step stopped at {v:.0} at {}",
            super::text::hms(at)
        )
    });
    match f.alert.rule.as_str() {
        "training_hang" => {
            let mut because: Vec<String> = stopped.iter().cloned().collect();
            if let Some(g) = group {
                because.push(g.to_string());
            }
            for c in before_start(ChangeKind::ProcessExit) {
                out.push(cause(
                    85,
                    Likely,
                    "a rank's process ended (crash, OOM kill or exit) and the other ranks wait for it",
                    vec![format!("{} at {}", c.text, super::text::hms(c.at_ms))],
                    &[
                        "read that process's last log lines (kubectl logs --previous, or the job's log) and its exit status",
                        "look for the kernel's OOM killer in dmesg / journalctl -k",
                        "restart the job from its last checkpoint",
                    ],
                ));
            }
            if util.is_some_and(|u| u >= 90.0) && power_low == Some(true) {
                let mut b = vec![format!(
                    "utilisation {} % at {} W ({} % of the power limit), against {} W busy before: kernels spin without work",
                    n0(util),
                    n0(d.power_during),
                    n0(d.power_pct()),
                    n0(d.power_busy)
                )];
                b.extend(because.iter().cloned());
                let mut next: Vec<String> = Vec::new();
                if let Some(m) = first {
                    next.push(format!(
                        "check the rank that stopped first: {}: its process's stack (py-spy dump --pid PID), its log, its XIDs and NVLink/network errors",
                        who(m)
                    ));
                }
                next.extend(
                    [
                        "dump every rank's stack (py-spy dump) to find the collective they wait in and the rank missing from it",
                        "rerun with NCCL_DEBUG=INFO (and TORCH_NCCL_ASYNC_ERROR_HANDLING=1 / a NCCL timeout) to get the failing peer",
                        "check the fabric: nvidia-smi nvlink -e, ibstat / the NICs' error counters",
                        "restart the job from its last checkpoint if it does not recover",
                    ]
                    .map(String::from),
                );
                out.push(Cause {
                    cause: "a stuck collective (NCCL hang): the ranks wait in a collective one of them never joined".into(),
                    confidence: Likely,
                    because: b,
                    next_steps: next,
                    score: 80,
                });
            } else if util.is_some_and(|u| u < 10.0) {
                let mut b = vec![format!("utilisation {} % during: no kernels run", n0(util))];
                b.extend(because.iter().cloned());
                out.push(cause(
                    75,
                    Likely,
                    "a host-side hang: a dead dataloader, a deadlock, or waiting on storage or the network",
                    b,
                    &[
                        "dump the process's stack (py-spy dump --pid PID) to see where it waits",
                        "check the dataloader workers (alive? stuck on I/O?) and the storage the job reads",
                        "restart the job from its last checkpoint",
                    ],
                ));
            } else {
                out.push(cause(
                    30,
                    Possible,
                    "training stalled; the GPU data shows no clear hang signature",
                    because.clone(),
                    &["dump the process's stack (py-spy dump --pid PID) and read the job's log"],
                ));
            }
            for c in changes.iter().filter(|c| c.kind == ChangeKind::PrometheusGap) {
                out.push(cause(
                    20,
                    Possible,
                    "a gap in the training metrics rather than a stalled job",
                    vec![c.text.clone()],
                    &["check the job's metrics endpoint and Prometheus (gpuwatch status --training)"],
                ));
            }
            if d.step_stopped.is_none() {
                unknown.push("when the training step stopped (no step series joined to this GPU in the window)".into());
            }
        }
        "gpu_memory_leak" => {
            let who = f
                .alert
                .process_name
                .as_deref()
                .map_or("the process".to_string(), |n| format!("process {} ({n})", f.alert.pid.unwrap_or(0)));
            out.push(cause(
                70,
                Likely,
                &format!("{who} keeps allocating GPU memory it does not free (tensors kept alive, a growing cache)"),
                vec![
                    f.alert.summary.clone().unwrap_or_else(|| "memory grew steadily".into()),
                    format!("GPU memory in use up to {} MiB during the alert", n0(d.mem_during_max)),
                ],
                &[
                    "look for tensors kept across steps (losses accumulated with their graph, lists of outputs, caches)",
                    "torch.cuda.memory_summary() / memory snapshots at two steps to see what grows",
                    "plan a restart from a checkpoint before the GPU fills up",
                ],
            ));
            out.push(cause(
                30,
                Possible,
                "the framework's caching allocator still growing towards its working set (not a leak if it levels off)",
                vec!["growth alone does not tell a leak from a warming cache".into()],
                &["watch whether the growth levels off: gpuwatch query mem_used --gpu N"],
            ));
        }
        "gpu_overheating" | "gpu_straggler" => {
            let thermal: Vec<&str> = d
                .throttle_during
                .iter()
                .copied()
                .filter(|r| r.contains("thermal"))
                .collect();
            let same_host_hot = f
                .related
                .iter()
                .filter(|r| r.rule == "gpu_overheating" && r.gpu_id != f.alert.gpu_id)
                .count();
            let mut b = vec![format!(
                "temperature up to {} °C during, {} °C before",
                n0(d.temp_during_max),
                n0(d.temp_before)
            )];
            if !thermal.is_empty() {
                b.push(format!(
                    "thermal slowdown: {}; SM clock {} MHz during vs {} MHz before",
                    thermal.join(", "),
                    n0(d.clock_during),
                    n0(d.clock_before)
                ));
            }
            if same_host_hot > 0 {
                out.push(cause(
                    75,
                    Likely,
                    "host-level cooling: several GPUs of the host run hot",
                    vec![format!("{same_host_hot} other GPU(s) of {} overheat at the same time", f.alert.host)],
                    &[
                        "check the chassis fans and inlet temperature (ipmitool sdr / the BMC)",
                        "check the room's cooling and the rack's airflow",
                    ],
                ));
            }
            let heavy = d.power_pct().is_some_and(|p| p >= 90.0);
            out.push(cause(
                if heavy { 50 } else { 65 },
                if thermal.is_empty() { Possible } else { Likely },
                "cooling of this GPU cannot keep up (a fan, its airflow, dust, or a neighbour's exhaust)",
                b.clone(),
                &[
                    "compare with the host's other GPUs (gpuwatch status): one hot GPU points at its own airflow",
                    "check its fan speed and the slot's airflow; clean the heatsink",
                    "lower its power limit meanwhile (gpuwatch gpu set --power-limit W)",
                ],
            ));
            if heavy {
                out.push(cause(
                    60,
                    Possible,
                    "sustained load at the power limit heats the GPU to its slowdown threshold",
                    vec![format!("power {} % of the limit during", n0(d.power_pct()))],
                    &["lower the power limit a little: throughput drops less than the temperature"],
                ));
            }
            if f.alert.rule == "gpu_straggler" && thermal.is_empty() {
                out.push(cause(
                    55,
                    Possible,
                    "a slower input pipeline or a different workload on this rank",
                    vec!["no thermal clock-event reason during the alert".into()],
                    &["compare this rank's step time and dataloader wait with its peers"],
                ));
            }
        }
        "gpu_xid_error" if out.is_empty() => {
            unknown.push("the XID itself: no XID event of this GPU is stored in the window".into());
        }
        "gpu_ecc_uncorrected" => out.push(cause(
            90,
            Likely,
            "an uncorrectable (double-bit) memory error on the GPU",
            vec![f.alert.summary.clone().unwrap_or_else(|| "new uncorrected ECC errors".into())],
            &[
                "stop the work on this GPU: results computed with the bad memory are suspect",
                "reset the GPU (nvidia-smi -r) so that the pending row remap takes effect",
                "if remapping failed or the errors return: RMA",
            ],
        )),
        "gpu_idle" | "gpu_unallocated" => {
            let holders: Vec<String> = f
                .procs
                .iter()
                .map(|p| {
                    format!(
                        "process {} ({}, user {})",
                        p.pid,
                        p.name.as_deref().unwrap_or("name unknown"),
                        p.user.as_deref().unwrap_or("unknown")
                    )
                })
                .collect();
            out.push(cause(
                60,
                Likely,
                if f.alert.rule == "gpu_idle" {
                    "a job or notebook that finished or paused but still holds the GPU"
                } else {
                    "nothing is scheduled on this GPU"
                },
                if holders.is_empty() { vec![format!("utilisation {} % during", n0(util))] } else { holders },
                &["ask the owner to release it (end the kernel / pod), or reclaim it per your policy"],
            ));
        }
        "gpu_memory_orphaned" => out.push(cause(
            60,
            Likely,
            "memory held by a context whose process is gone or invisible (another PID namespace, a zombie)",
            vec![f.alert.summary.clone().unwrap_or_default()],
            &["nvidia-smi --query-compute-apps=pid,used_memory --format=csv on the host", "reset the GPU once idle if nothing owns it"],
        )),
        "gpu_lost" => out.push(cause(
            90,
            Likely,
            "the GPU fell off the bus or stopped answering the driver",
            changes.iter().filter(|c| c.kind == ChangeKind::SampleGap).map(|c| c.text.clone()).take(1).collect(),
            &["drain the node", "reset the GPU or reboot; check XID 79 and PCIe errors in the kernel log", "RMA if it recurs"],
        )),
        "cuda_driver_error" => out.push(cause(
            70,
            Likely,
            "a driver or CUDA context error: the GPU reports work without memory",
            vec![format!("utilisation {} % during, memory in use up to {} MiB", n0(util), n0(d.mem_during_max))],
            &["restart the job", "if it persists: reset the GPU; check the driver version (gpuwatch doctor)"],
        )),
        "training_metrics_unavailable" => out.push(cause(
            70,
            Likely,
            "Prometheus (or the job's metrics) cannot be reached",
            vec![f.alert.summary.clone().unwrap_or_default()],
            &["gpuwatch doctor (checks the Prometheus URL)", "gpuwatch status --training for the last error"],
        )),
        _ => {}
    }
    if out.is_empty() {
        unknown.push(format!(
            "built-in knowledge of rule {:?}: the facts above are all there is",
            f.alert.rule
        ));
    }
    out.sort_by(|a, b| b.score.cmp(&a.score).then(b.confidence.cmp(&a.confidence)));
    out
}
