//! The sampler against the machine's real NVIDIA driver. Built only with the `real-nvml`
//! feature (there is no GPU in CI):
//!
//!   cargo test --features real-nvml --test real_nvml -- --nocapture
//!
//! Checks the invariants the simulated tests check, on real hardware: inventory, per-tick
//! values in their physical ranges, processes, and the cost of a tick.

use std::time::{Duration, Instant};

use gpuwatch::model::SampleStatus;
use gpuwatch::sampler::nvml;
use gpuwatch::sampler::{Sampler, SamplerConfig};

fn sampler() -> (nvml::NvmlHandle, Sampler) {
    let lib = std::env::var_os("GPUWATCH_NVML_LIBRARY").map(std::path::PathBuf::from);
    let h = nvml::init(lib.as_deref()).expect("the real NVML initialises");
    let s = Sampler::start(
        &h,
        SamplerConfig {
            deadline: Duration::from_secs(2),
            inventory_interval: Duration::from_secs(300),
            processes: true,
            redact_patterns: Vec::new(),
            startup_timeout: Duration::from_secs(10),
            ..Default::default()
        },
        Default::default(),
    )
    .expect("sampler starts");
    (h, s)
}

#[test]
fn inventory_is_complete() {
    let (h, s) = sampler();
    assert!(s.gpu_count() > 0, "no GPU found");
    println!(
        "driver {:?}, NVML {:?}, CUDA {:?}",
        h.driver_version, h.nvml_version, h.cuda_driver_version
    );
    for inv in s.inventories() {
        println!("{inv:?}");
        assert!(
            inv.uuid.starts_with("GPU-") || inv.uuid.starts_with("MIG-"),
            "{}",
            inv.uuid
        );
        assert!(inv.name.is_some());
        assert!(inv.memory_total_bytes.unwrap_or(0) > 1 << 30);
        let (slow, shut) = (
            inv.temp_slowdown_c.expect("slowdown"),
            inv.temp_shutdown_c.expect("shutdown"),
        );
        assert!((60..=110).contains(&slow) && slow < shut, "{slow} {shut}");
        assert!(inv.power_limit_mw.unwrap_or(0) > 10_000);
        assert!(inv.pcie_max_gen.unwrap_or(0) >= 3);
    }
}

#[test]
fn ticks_give_physical_values() {
    let (_h, mut s) = sampler();
    // Hopper boards have GPM: from the second tick on they give tensor-pipe activity.
    let hopper: Vec<String> = s
        .inventories()
        .filter(|i| {
            i.name.as_deref().is_some_and(|n| {
                ["H100", "H200", "H800", "H20", "GH200"]
                    .iter()
                    .any(|m| n.contains(m))
            })
        })
        .map(|i| i.uuid.clone())
        .collect();
    let mut costs = Vec::new();
    for i in 0..20 {
        let t = Instant::now();
        let b = s.tick(1_700_000_000_000 + i * 1000);
        costs.push(t.elapsed());
        for smp in &b.samples {
            assert_eq!(smp.status, SampleStatus::Ok, "{smp:?}");
            assert!(smp.util_gpu_pct.expect("util") <= 100);
            let (used, total) = (
                smp.mem_used_bytes.expect("used"),
                smp.mem_total_bytes.expect("total"),
            );
            assert!(used <= total);
            assert!((5..=110).contains(&smp.temp_c.expect("temp")));
            assert!(smp.power_mw.expect("power") > 1000);
            assert!(smp.clock_sm_mhz.expect("sm clock") > 0);
            assert!(smp.pstate.is_some());
            assert!(smp.throttle_reasons.is_some());
            for (what, v) in [
                ("tensor", smp.tensor_active_pct),
                ("SM", smp.sm_active_pct),
                ("SM occupancy", smp.sm_occupancy_pct),
                ("DRAM", smp.dram_active_pct),
            ] {
                if let Some(t) = v {
                    assert!((0.0..=100.0).contains(&t), "{what} activity {t}");
                }
            }
            // NVLink and the fabric: consistent where the board has them, absent elsewhere.
            if let (Some(up), Some(mask)) = (smp.nvlink_links_up, smp.nvlink_down_mask) {
                assert!(
                    up <= 18 && up + mask.count_ones() <= 18,
                    "{up} up, mask {mask:#x}"
                );
            }
            if let Some(st) = smp.fabric_state {
                assert!((1..=3).contains(&st), "fabric state {st}");
                assert!(smp.fabric_status.is_some());
            }
            if i > 0 && hopper.contains(&smp.uuid) {
                assert!(smp.tensor_active_pct.is_some(), "GPM on {}", smp.uuid);
                assert!(smp.sm_active_pct.is_some(), "GPM SM_UTIL on {}", smp.uuid);
            }
        }
        if i == 0 {
            println!("{:#?}", b.samples);
            println!("processes: {:#?}", b.processes);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    costs.sort();
    println!(
        "tick wall time: median {:?}, max {:?}",
        costs[costs.len() / 2],
        costs[costs.len() - 1]
    );
}
