//! The per-GPU health summary end to end: a real `gpuwatch run` on simulated GPUs whose
//! scenario sets clock-event reasons, row-remap state, retired pages, a down-trained PCIe link
//! and a lost GPU; `status --format json` and `/api/v1/status` carry the same `health`
//! objects, the `status` table names the reasons with their fixes, and `/metrics` exports the
//! verdicts, the reasons and the decoded clock-event reasons, lint-clean.

use std::time::Duration;

use serde_json::Value;

use crate::http_support::{Node, promtool_lint, series_value, wait_for};

/// GPUs 2.. after the node's two (0: busy and hot but healthy, 1: idle).
const GPUS: &str = r#"
[[gpu]]
model = "H100-SXM-80GB"
[[gpu.timeline]]
util_gpu = 95
throttle = ["hw_slowdown", "hw_power_brake"]
[[gpu]]
model = "H100-SXM-80GB"
[[gpu.timeline]]
util_gpu = 90
pcie_gen = 3
remap_pending = true
[[gpu]]
model = "H100-SXM-80GB"
[[gpu.timeline]]
util_gpu = 0
pcie_gen = 1
[[gpu]]
model = "A100-SXM4-80GB"
[[gpu.timeline]]
util_gpu = 80
remap_failure = true
remapped_rows_unc = 8
[[gpu]]
model = "T4"
[[gpu.timeline]]
util_gpu = 50
retired_pages_sbe = 31
retired_pages_dbe = 30
[[gpu]]
model = "H100-SXM-80GB"
lost_at = "3s"
"#;

/// Removes, at any depth, the keys whose values move from one read to the next.
fn without(mut v: Value, keys: &[&str]) -> Value {
    match &mut v {
        Value::Object(o) => {
            for k in keys {
                o.remove(*k);
            }
            for x in o.values_mut() {
                *x = without(x.take(), keys);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|x| *x = without(x.take(), keys)),
        _ => {}
    }
    v
}

fn codes(h: &Value) -> Vec<&str> {
    h["reasons"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["code"].as_str())
        .collect()
}

#[test]
fn status_the_api_and_metrics_show_each_gpus_health_with_reasons() {
    let node = Node::with_scenario("node-h", 21, "", "", GPUS);
    let _d = node.start(&[]);
    // Until every GPU is judged from a sample and the lost one is known lost.
    let status = wait_for("every GPU judged", Duration::from_secs(40), || {
        let v: Value = serde_json::from_str(&node.cli(&["status", "--format", "json"])).ok()?;
        let gpus = v["gpus"].as_array()?;
        let judged = gpus.len() == 8
            && gpus.iter().all(|g| g["health"]["status"] != "unknown")
            && codes(&gpus[7]["health"]) == ["gpu_lost"];
        judged.then_some(v)
    });
    let health = |i: usize| status["gpus"][i]["health"].clone();

    for i in [0, 1] {
        assert_eq!(health(i)["status"], "ok", "{}", health(i));
    }
    assert_eq!(
        health(1)["clock_events"],
        serde_json::json!(["gpu_idle"]),
        "decoded by name"
    );
    let h = health(2);
    assert_eq!(h["status"], "fail", "{h}");
    assert_eq!(codes(&h), ["hw_power_brake_slowdown"]);
    assert_eq!(h["reasons"][0]["severity"], "fail");
    assert!(
        h["reasons"][0]["fix"]
            .as_str()
            .is_some_and(|f| f.contains("power supplies"))
    );
    assert_eq!(
        h["clock_events"],
        serde_json::json!(["hw_slowdown", "hw_power_brake_slowdown"])
    );
    let h = health(3);
    assert_eq!(h["status"], "warn", "{h}");
    assert_eq!(codes(&h), ["row_remap_pending", "pcie_link_degraded"]);
    assert!(
        h["reasons"][1]["text"]
            .as_str()
            .is_some_and(|t| t.contains("Gen3 x16") && t.contains("Gen5 x16")),
        "{h}"
    );
    // Idle at Gen1: power saving, not a degraded link; the link is simply not judged.
    let h = health(4);
    assert_eq!(h["status"], "ok", "{h}");
    assert_eq!(h["not_checked"], serde_json::json!(["pcie_link"]));
    let h = health(5);
    assert_eq!(
        (h["status"].clone(), codes(&h)),
        ("fail".into(), vec!["row_remap_failure"])
    );
    assert!(
        h["reasons"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("8 uncorrectable"))
    );
    let h = health(6);
    assert_eq!(codes(&h), ["retired_pages_limit"], "{h}");
    assert!(
        h["reasons"][0]["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("61 "))
    );
    assert_eq!(health(7)["status"], "fail");

    // The API serves the CLI's document.
    let (code, _, body) = node.get("/api/v1/status", None);
    assert_eq!(code, 200, "{body}");
    let api: Value = serde_json::from_str(&body).expect("json");
    let cli: Value =
        serde_json::from_str(&node.cli(&["status", "--format", "json"])).expect("json");
    let moving = ["age_ms", "sample_ts_ms", "count", "last_ms"];
    assert_eq!(without(api.clone(), &moving), without(cli, &moving));
    assert_eq!(api["gpus"][2]["health"], status["gpus"][2]["health"]);

    // The table: a HEALTH column and one line per reason with its fix.
    let table = node.cli(&["status"]);
    let line = |gpu: &str| {
        table
            .lines()
            .find(|l| l.starts_with(&format!("{gpu:<4} ")))
            .unwrap_or_else(|| panic!("no line for GPU {gpu}: {table}"))
            .to_string()
    };
    assert!(
        table.lines().next().is_some_and(|h| h.contains(" HEALTH ")),
        "{table}"
    );
    assert!(line("2").contains(" FAIL "), "{table}");
    assert!(line("3").contains(" WARN "), "{table}");
    assert!(line("4").contains(" ok "), "{table}");
    assert!(
        table.contains("GPU 3 WARN row_remap_pending: a memory row remap is pending")
            && table.contains("fix: reset the GPU when its work is drained (`nvidia-smi -r -i 3`)"),
        "{table}"
    );

    // /metrics: the state set, the reasons and the clock-event reasons.
    let (_, _, m) = node.get("/metrics", None);
    let health_of = |gpu: &str, s: &str| {
        series_value(&m, "gpuwatch_gpu_health", &[("gpu", gpu), ("status", s)])
    };
    assert_eq!(health_of("2", "fail"), Some(1.0), "{m}");
    assert_eq!(health_of("2", "ok"), Some(0.0));
    assert_eq!(health_of("3", "warn"), Some(1.0));
    assert_eq!(health_of("4", "ok"), Some(1.0));
    assert_eq!(health_of("7", "fail"), Some(1.0));
    assert_eq!(
        series_value(
            &m,
            "gpuwatch_gpu_health_reason",
            &[
                ("gpu", "3"),
                ("code", "pcie_link_degraded"),
                ("severity", "warn")
            ]
        ),
        Some(1.0)
    );
    let event = |gpu: &str, reason: &str| {
        series_value(
            &m,
            "gpuwatch_gpu_clock_event_reason",
            &[("gpu", gpu), ("reason", reason)],
        )
    };
    assert_eq!(event("2", "hw_power_brake_slowdown"), Some(1.0));
    assert_eq!(event("0", "hw_power_brake_slowdown"), Some(0.0));
    assert_eq!(event("1", "gpu_idle"), Some(1.0));
    assert_eq!(
        event("7", "gpu_idle"),
        None,
        "a lost GPU's reasons are not known"
    );
    for l in promtool_lint(&m) {
        assert!(
            l.starts_with("DCGM_FI_"),
            "gpuwatch_* families are lint-clean: {l}"
        );
    }
}
