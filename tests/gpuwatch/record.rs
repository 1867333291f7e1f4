//! `gpuwatch scenario record` writes a scenario the simulated library loads, with the
//! recorded GPUs' identity, limits and unsupported calls (recorded here from the simulated
//! library itself; on a GPU machine, from the real driver).

use std::process::Command;

use gpuwatch_sim::Scenario;

use crate::common::sim;

#[test]
fn a_recorded_scenario_loads_and_keeps_identity_limits_and_unsupported_calls() {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios/demo.toml"))
        .expect("demo");
    let sim = sim(&text);
    let out = sim.dir().join("recorded.toml");
    let o = Command::new(env!("CARGO_BIN_EXE_gpuwatch"))
        .args([
            "scenario",
            "record",
            "--duration",
            "1500ms",
            "--interval",
            "500ms",
            "--nvml-library",
        ])
        .arg(sim.library_path())
        .arg("-o")
        .arg(&out)
        .output()
        .expect("record runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let recorded_text = std::fs::read_to_string(&out).expect("written");
    let rec = Scenario::from_toml_str(&recorded_text, "recorded.toml")
        .unwrap_or_else(|e| panic!("{e}\n{recorded_text}"));
    let orig = &sim.scenario;
    assert_eq!(rec.gpu_count(), orig.gpu_count());
    assert_eq!(rec.duration_ticks(), 3);
    for i in 0..orig.gpu_count() {
        let (r, g) = (rec.gpu(i), orig.gpu(i));
        assert_eq!(
            (&r.uuid, &r.name, &r.serial, &r.pci_bus_id),
            (&g.uuid, &g.name, &g.serial, &g.pci_bus_id)
        );
        assert_eq!(r.memory_total_bytes, g.memory_total_bytes);
        assert_eq!(
            (r.power_limit_mw, r.power_min_mw, r.power_max_mw),
            (g.power_limit_mw, g.power_min_mw, g.power_max_mw)
        );
        assert_eq!(
            (r.temp_slowdown_c, r.temp_shutdown_c),
            (g.temp_slowdown_c, g.temp_shutdown_c)
        );
        let state = rec.gpu_state(i, 1);
        assert!(state.util_gpu <= 100 && state.mem_used_bytes <= state.mem_total_bytes);
    }
    // The H100s report no fan (datacenter boards): the recording says so.
    assert_eq!(
        rec.call_error(0, "nvmlDeviceGetFanSpeed_v2", 0),
        Some(3),
        "NOT_SUPPORTED"
    );
    assert_eq!(rec.call_error(0, "nvmlDeviceGetTemperature", 0), None);
}
