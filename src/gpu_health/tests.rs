use super::*;
use crate::model::{GpuInventory, GpuSample};

const STALE: i64 = 10_000;

/// A healthy busy H100: every health reading read, nothing wrong.
fn busy() -> GpuStatusRow {
    GpuStatusRow {
        host: "h".into(),
        inventory: GpuInventory {
            index: 2,
            uuid: "GPU-2".into(),
            name: Some("NVIDIA H100 80GB HBM3".into()),
            pcie_max_gen: Some(5),
            pcie_max_width: Some(16),
            ..Default::default()
        },
        inventory_known: true,
        first_seen_ms: 0,
        last_seen_ms: 0,
        lost_at_ms: None,
        latest: Some(GpuSample {
            ts_ms: 1_000,
            uuid: "GPU-2".into(),
            util_gpu_pct: Some(95),
            temp_c: Some(70),
            throttle_reasons: Some(0),
            ecc_uncorrected: Some(0),
            remapped_rows_correctable: Some(0),
            remapped_rows_uncorrectable: Some(0),
            remap_pending: Some(false),
            remap_failure: Some(false),
            pcie_gen: Some(5),
            pcie_width: Some(16),
            ..Default::default()
        }),
        age_ms: Some(1_000),
        processes: Vec::new(),
        holder: None,
        recent_xids: Vec::new(),
    }
}

fn with(f: impl FnOnce(&mut GpuSample)) -> GpuStatusRow {
    let mut r = busy();
    if let Some(s) = r.latest.as_mut() {
        f(s);
    }
    r
}

fn codes(h: &Health) -> Vec<&'static str> {
    h.reasons.iter().map(|r| r.code).collect()
}

/// Every reason carries a listed code with its listed severity, a text and a fix.
fn judged(r: &GpuStatusRow) -> Health {
    let h = judge(r, STALE);
    for x in &h.reasons {
        assert!(CODES.contains(&(x.code, x.severity)), "{x:?}");
        assert!(!x.text.is_empty() && !x.fix.is_empty(), "{x:?}");
    }
    h
}

#[test]
fn a_healthy_busy_gpu_is_ok_with_every_check_made() {
    let h = judged(&busy());
    assert_eq!(h.status, Status::Ok);
    assert!(h.reasons.is_empty() && h.not_checked.is_empty(), "{h:?}");
    assert_eq!(h.clock_events, Some(vec![]));
}

#[test]
fn the_power_brake_and_hardware_thermal_fail_by_name() {
    let h = judged(&with(|s| s.throttle_reasons = Some(0x80 | 0x08)));
    assert_eq!(h.status, Status::Fail);
    assert_eq!(
        codes(&h),
        ["hw_power_brake_slowdown"],
        "HW slowdown is folded"
    );
    assert_eq!(
        h.clock_events,
        Some(vec!["hw_slowdown", "hw_power_brake_slowdown"])
    );
    let h = judged(&with(|s| s.throttle_reasons = Some(0x40 | 0x08)));
    assert_eq!(codes(&h), ["hw_thermal_slowdown"]);
    assert!(h.reasons[0].text.contains("70 °C"), "{h:?}");
    let h = judged(&with(|s| s.throttle_reasons = Some(0x08)));
    assert_eq!((h.status, codes(&h)), (Status::Fail, vec!["hw_slowdown"]));
}

#[test]
fn software_thermal_warns_only_when_the_gpu_is_busy_or_may_be() {
    let h = judged(&with(|s| s.throttle_reasons = Some(0x20)));
    assert_eq!(
        (h.status, codes(&h)),
        (Status::Warn, vec!["sw_thermal_slowdown"])
    );
    let h = judged(&with(|s| {
        s.throttle_reasons = Some(0x20 | 0x1);
        s.util_gpu_pct = Some(0);
    }));
    assert_eq!(h.status, Status::Ok, "{h:?}");
    let h = judged(&with(|s| {
        s.throttle_reasons = Some(0x20);
        s.util_gpu_pct = None;
    }));
    assert_eq!(h.status, Status::Warn, "utilisation unknown is not idle");
}

#[test]
fn power_cap_idle_and_application_clocks_are_not_problems() {
    let h = judged(&with(|s| {
        s.throttle_reasons = Some(0x4 | 0x2 | 0x10 | 0x100)
    }));
    assert_eq!(h.status, Status::Ok, "{h:?}");
    assert_eq!(
        h.clock_events,
        Some(vec![
            "applications_clocks_setting",
            "sw_power_cap",
            "sync_boost",
            "display_clock_setting"
        ])
    );
}

#[test]
fn row_remap_failure_fails_and_pending_warns_with_the_reset() {
    let h = judged(&with(|s| {
        s.remap_failure = Some(true);
        s.remap_pending = Some(true);
        s.remapped_rows_uncorrectable = Some(8);
    }));
    assert_eq!(
        (h.status, codes(&h)),
        (Status::Fail, vec!["row_remap_failure"])
    );
    assert!(h.reasons[0].text.contains("8 uncorrectable"), "{h:?}");
    assert!(h.reasons[0].fix.contains("RMA"), "{h:?}");
    let h = judged(&with(|s| s.remap_pending = Some(true)));
    assert_eq!(
        (h.status, codes(&h)),
        (Status::Warn, vec!["row_remap_pending"])
    );
    assert!(h.reasons[0].fix.contains("nvidia-smi -r -i 2"), "{h:?}");
}

#[test]
fn retired_pages_warn_at_15_and_fail_at_60() {
    let pages = |n: Option<u32>| {
        judged(&with(|s| {
            s.remap_failure = None;
            s.remap_pending = None;
            s.retired_pages = n;
        }))
    };
    assert_eq!(pages(Some(14)).status, Status::Ok);
    assert_eq!(codes(&pages(Some(15))), ["retired_pages_high"]);
    assert_eq!(pages(Some(15)).status, Status::Warn);
    assert_eq!(codes(&pages(Some(60))), ["retired_pages_limit"]);
    assert_eq!(pages(Some(64)).status, Status::Fail);
    let h = pages(None);
    assert_eq!(
        h.not_checked,
        [MEMORY_REPAIR],
        "neither remap nor pages read"
    );
    assert_eq!(h.status, Status::Ok);
}

#[test]
fn uncorrectable_ecc_errors_warn() {
    let h = judged(&with(|s| s.ecc_uncorrected = Some(2)));
    assert_eq!(
        (h.status, codes(&h)),
        (Status::Warn, vec!["ecc_uncorrectable"])
    );
    assert!(h.reasons[0].text.starts_with("2 uncorrectable"));
}

#[test]
fn a_pcie_link_below_its_maximum_warns_under_load_only() {
    let h = judged(&with(|s| s.pcie_gen = Some(3)));
    assert_eq!(
        (h.status, codes(&h)),
        (Status::Warn, vec!["pcie_link_degraded"])
    );
    assert!(h.reasons[0].text.contains("Gen3 x16"), "{h:?}");
    let h = judged(&with(|s| s.pcie_width = Some(8)));
    assert_eq!(codes(&h), ["pcie_link_degraded"]);
    // An idle GPU at Gen1 is saving power, not degraded: the link is simply not judged.
    let h = judged(&with(|s| {
        s.pcie_gen = Some(1);
        s.util_gpu_pct = Some(0);
    }));
    assert_eq!(h.status, Status::Ok, "{h:?}");
    assert_eq!(h.not_checked, [PCIE_LINK]);
    let h = judged(&with(|s| s.pcie_gen = None));
    assert_eq!(h.status, Status::Ok, "the width alone is judged");
    assert!(h.not_checked.is_empty());
}

#[test]
fn a_recovery_action_fails_with_the_action_to_take() {
    let h = judged(&with(|s| s.recovery_action = Some(2)));
    assert_eq!(h.status, Status::Fail);
    assert_eq!(codes(&h), ["recovery_action"]);
    assert!(
        h.reasons[0].text.contains("node reboot"),
        "{}",
        h.reasons[0].text
    );
    let h = judged(&with(|s| s.recovery_action = Some(1)));
    assert!(
        h.reasons[0].fix.contains("nvidia-smi -r -i 2"),
        "{}",
        h.reasons[0].fix
    );
    // None asked, or not reported: nothing to say (and not an unmade check).
    for a in [Some(0), None] {
        let h = judged(&with(|s| s.recovery_action = a));
        assert_eq!(h.status, Status::Ok, "{a:?}");
        assert!(h.not_checked.is_empty(), "{a:?}");
    }
}

#[test]
fn nvlinks_and_the_fabric_are_judged_where_the_gpu_reports_them() {
    // An H100 (18 links in the table) with links 3 and 7 down.
    let h = judged(&with(|s| {
        s.nvlink_links_up = Some(16);
        s.nvlink_down_mask = Some((1 << 3) | (1 << 7));
    }));
    assert_eq!((h.status, codes(&h)), (Status::Fail, vec!["nvlink_down"]));
    assert!(
        h.reasons[0].text.contains("16 of the model's 18"),
        "{:?}",
        h.reasons
    );
    assert!(h.reasons[0].text.contains("3, 7 down"), "{:?}", h.reasons);
    // Every link up, or no NVLink at all (a PCIe board, MIG mode): nothing to say.
    for (up, mask) in [(Some(18), Some(0)), (None, None)] {
        let h = judged(&with(|s| {
            s.nvlink_links_up = up;
            s.nvlink_down_mask = mask;
        }));
        assert_eq!(h.status, Status::Ok, "{up:?}");
        assert!(h.not_checked.is_empty());
    }
    let h = judged(&with(|s| {
        s.fabric_state = Some(3);
        s.fabric_status = Some(27);
    }));
    assert_eq!((h.status, codes(&h)), (Status::Fail, vec!["fabric_failed"]));
    let h = judged(&with(|s| {
        s.fabric_state = Some(2);
        s.fabric_status = Some(0);
    }));
    assert_eq!(codes(&h), ["fabric_not_ready"]);
    let h = judged(&with(|s| {
        s.fabric_state = Some(3);
        s.fabric_status = Some(0);
    }));
    assert_eq!(h.status, Status::Ok);
}

#[test]
fn the_hardwares_recent_xids_are_named_with_their_action() {
    use crate::model::RecentXid;
    let mut r = busy();
    r.recent_xids = vec![
        RecentXid {
            code: 48,
            count: 3,
            last_ms: 1_000,
        },
        // An application's XID is the job's fault: not the GPU's health.
        RecentXid {
            code: 13,
            count: 5,
            last_ms: 900,
        },
    ];
    let h = judged(&r);
    assert_eq!((h.status, codes(&h)), (Status::Fail, vec!["xid_critical"]));
    assert!(h.reasons[0].text.starts_with("XID 48 ("), "{:?}", h.reasons);
    assert!(h.reasons[0].text.contains("3× in the last day"));
    assert!(
        h.reasons[0].fix.starts_with("reset the GPU"),
        "{:?}",
        h.reasons
    );
    r.recent_xids.remove(0);
    assert_eq!(judged(&r).status, Status::Ok);
}

#[test]
fn unknown_is_not_ok() {
    let mut r = busy();
    r.latest = None;
    r.age_ms = None;
    let h = judged(&r);
    assert_eq!((h.status, codes(&h)), (Status::Unknown, vec!["no_sample"]));
    assert_eq!(h.not_checked, CHECKS);
    assert_eq!(h.clock_events, None);

    let mut r = busy();
    r.age_ms = Some(STALE + 1);
    let h = judged(&r);
    assert_eq!(
        (h.status, codes(&h)),
        (Status::Unknown, vec!["stale_sample"])
    );

    let r = with(|s| {
        *s = GpuSample::empty(s.ts_ms, &s.uuid, SampleStatus::DeadlineMissed);
    });
    assert_eq!(codes(&judged(&r)), ["sample_gap"]);

    // A sampled GPU none of whose health readings was read.
    let r = with(|s| *s = GpuSample::empty(s.ts_ms, &s.uuid, SampleStatus::Ok));
    let h = judged(&r);
    assert_eq!(
        (h.status, codes(&h)),
        (Status::Unknown, vec!["nothing_read"])
    );
}

#[test]
fn a_lost_gpu_fails_whatever_its_last_sample_said() {
    let mut r = busy();
    r.lost_at_ms = Some(500);
    r.age_ms = Some(STALE * 100);
    let h = judged(&r);
    assert_eq!((h.status, codes(&h)), (Status::Fail, vec!["gpu_lost"]));
    let r = with(|s| s.status = SampleStatus::Lost);
    assert_eq!(judged(&r).status, Status::Fail);
}

#[test]
fn reasons_come_worst_first_and_the_json_has_the_documented_shape() {
    let h = judged(&with(|s| {
        s.pcie_gen = Some(4);
        s.throttle_reasons = Some(0x80);
    }));
    assert_eq!(codes(&h), ["hw_power_brake_slowdown", "pcie_link_degraded"]);
    let j = h.json();
    assert_eq!(j["status"], "fail");
    assert_eq!(j["reasons"][1]["code"], "pcie_link_degraded");
    assert_eq!(j["reasons"][1]["severity"], "warn");
    assert!(j["reasons"][0]["fix"].is_string() && j["reasons"][0]["text"].is_string());
    assert_eq!(
        j["clock_events"],
        serde_json::json!(["hw_power_brake_slowdown"])
    );
    assert_eq!(j["not_checked"], serde_json::json!([]));
}

#[test]
fn docs_health_md_lists_every_code_with_its_severity() {
    let doc = include_str!("../../docs/HEALTH.md");
    for (code, severity) in CODES {
        let row = format!("| `{code}` | {} |", severity.as_str());
        assert!(doc.contains(&row), "docs/HEALTH.md lacks {row}");
    }
}

#[test]
fn the_metric_registrys_throttle_flags_are_these_bits() {
    use super::clock_events::*;
    assert_eq!(
        crate::metric::THERMAL_BITS,
        SW_THERMAL_SLOWDOWN | HW_THERMAL_SLOWDOWN
    );
    assert_eq!(
        crate::metric::HW_SLOWDOWN_BITS,
        HW_SLOWDOWN | HW_POWER_BRAKE_SLOWDOWN
    );
}
