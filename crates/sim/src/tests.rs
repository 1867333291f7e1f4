//! Scenario-level unit tests: parsing, defaults, behaviours, constant time, energy, faults,
//! events, processes, training, error messages, and the shipped scenario files.

use std::time::{Duration, Instant};

use crate::nvml::{code, throttle};
use crate::{CallOutcome, Scenario, ScenarioError, StallKind};

const MIB: u64 = 1 << 20;

fn parse(text: &str) -> Scenario {
    match Scenario::from_toml_str(text, "test.toml") {
        Ok(s) => s,
        Err(e) => panic!("scenario should parse:\n{e}"),
    }
}

fn error_of(text: &str) -> String {
    match Scenario::from_toml_str(text, "bad.toml") {
        Ok(_) => panic!("scenario should not parse:\n{text}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn builtin_default_parses() {
    let s = Scenario::builtin_default();
    assert_eq!(s.gpu_count(), 2);
    assert_eq!(s.name(), "builtin-default");
    assert_eq!(s.processes().len(), 2);
    assert!(!s.training_at(100).is_empty());
}

#[test]
fn header_defaults_and_inventory_from_preset() {
    let s = parse("[[gpu]]\nmodel = \"H100-SXM-80GB\"\n[[gpu]]\nmodel = \"t4\"\n");
    assert_eq!(s.name(), "test");
    assert_eq!(s.tick_ms(), 1000);
    assert_eq!(s.duration_ticks(), 3600);
    assert_eq!(s.speed(), 1.0);
    assert_eq!(s.driver_version(), "550.90.07");
    assert_eq!(s.nvml_version(), "12.550.90.07");
    assert_eq!(s.cuda_driver_version(), 12040);
    assert_eq!(s.process_struct_size(), 24);
    let g = s.gpu(0);
    assert_eq!(g.name, "NVIDIA H100 80GB HBM3");
    assert_eq!(g.memory_total_bytes, 81_559 * MIB);
    assert_eq!(g.power_limit_mw, 700_000);
    assert_eq!((g.temp_slowdown_c, g.temp_shutdown_c), (88, 94));
    assert_eq!((g.pcie_max_gen, g.pcie_max_width), (5, 16));
    assert_eq!(g.pci_bus_id, "00000000:18:00.0");
    assert!(
        g.uuid.starts_with("GPU-") && g.uuid.len() == 40,
        "{}",
        g.uuid
    );
    assert_ne!(s.gpu(0).uuid, s.gpu(1).uuid);
    assert_eq!(s.gpu(1).name, "Tesla T4");
    // Presets decide support: H100 remaps rows, T4 retires pages.
    assert!(s.supports(0, "nvmlDeviceGetRemappedRows"));
    assert!(!s.supports(0, "nvmlDeviceGetRetiredPages_v2"));
    assert!(!s.supports(1, "nvmlDeviceGetRemappedRows"));
    assert!(s.supports(1, "nvmlDeviceGetRetiredPages"));
}

#[test]
fn identifiers_depend_on_seed_and_overrides_win() {
    let a = parse("[scenario]\nseed = 1\n[[gpu]]\nmodel = \"L40S\"\n");
    let b = parse("[scenario]\nseed = 2\n[[gpu]]\nmodel = \"L40S\"\n");
    assert_ne!(a.gpu(0).uuid, b.gpu(0).uuid);
    assert_eq!(
        a.gpu(0).uuid,
        parse("[scenario]\nseed = 1\n[[gpu]]\nmodel = \"L40S\"\n")
            .gpu(0)
            .uuid
    );
    let c = parse(
        r#"[[gpu]]
model = "RTX-4090"
name = "My Card"
uuid = "GPU-00000000-0000-0000-0000-000000000001"
pci_bus_id = "00000000:65:00.0"
memory_total_mib = 1000
power_limit_w = 300
temp_slowdown = 80
not_supported = ["nvmlDeviceGetPowerUsage"]
supported = ["nvmlDeviceGetTotalEccErrors"]
"#,
    );
    let g = c.gpu(0);
    assert_eq!(g.name, "My Card");
    assert_eq!(g.pci_bus, 0x65);
    assert_eq!(g.memory_total_bytes, 1000 * MIB);
    assert_eq!(g.power_limit_mw, 300_000);
    assert_eq!(g.temp_slowdown_c, 80);
    assert!(!c.supports(0, "nvmlDeviceGetPowerUsage"));
    assert!(c.supports(0, "nvmlDeviceGetTotalEccErrors"));
    assert!(!c.supports(0, "nvmlDeviceGetSerial"));
}

#[test]
fn idle_defaults_are_a_healthy_idle_gpu() {
    let s = parse("[[gpu]]\nmodel = \"H100-SXM-80GB\"\n");
    for t in [0, 10, 5000] {
        let st = s.gpu_state(0, t);
        assert_eq!(st.util_gpu, 0);
        assert_eq!(st.util_mem, 0);
        assert!((30..=33).contains(&st.temp_c), "{}", st.temp_c);
        assert!((70_000..=74_000).contains(&st.power_mw), "{}", st.power_mw);
        assert!((400 * MIB..=560 * MIB).contains(&st.mem_used_bytes));
        assert_eq!(
            st.mem_used_bytes + st.mem_free_bytes + st.mem_reserved_bytes,
            st.mem_total_bytes
        );
        assert_eq!(st.throttle_reasons, throttle::GPU_IDLE);
        assert_eq!(st.sm_clock_mhz, 345);
        assert_eq!((st.pcie_gen, st.pcie_width), (5, 16));
        assert_eq!(st.ecc_uncorrected, 0);
        assert!(!st.lost);
    }
}

#[test]
fn behaviours_const_ramp_sawtooth_noise() {
    let s = parse(
        r#"[[gpu]]
model = "H100-SXM-80GB"
[[gpu.timeline]]
from = "0s"
to = "100s"
util_gpu = { ramp = [0, 100] }
temp = 50
mem_used_mib = { sawtooth = [1000, 2000], period = "10s" }
[[gpu.timeline]]
from = "100s"
util_gpu = { value = 90, noise = 5 }
power_w = { ramp = [100, 200], over = "50s", delay = "10s" }
"#,
    );
    assert_eq!(s.gpu_state(0, 0).util_gpu, 0);
    assert_eq!(s.gpu_state(0, 50).util_gpu, 50);
    assert_eq!(s.gpu_state(0, 99).util_gpu, 99);
    assert_eq!(s.gpu_state(0, 42).temp_c, 50);
    assert_eq!(s.gpu_state(0, 0).mem_used_bytes, 1000 * MIB);
    assert_eq!(s.gpu_state(0, 5).mem_used_bytes, 1500 * MIB);
    assert_eq!(s.gpu_state(0, 10).mem_used_bytes, 1000 * MIB);
    let utils: Vec<u32> = (100..400).map(|t| s.gpu_state(0, t).util_gpu).collect();
    assert!(utils.iter().all(|u| (85..=95).contains(u)));
    assert!(utils.iter().any(|u| *u != 90), "noise must vary");
    assert_eq!(s.gpu_state(0, 105).power_mw, 100_000);
    assert_eq!(s.gpu_state(0, 135).power_mw, 150_000);
    assert_eq!(s.gpu_state(0, 500).power_mw, 200_000);
    // Temperature was only set in the first segment: afterwards it derives from utilisation.
    assert!(s.gpu_state(0, 300).temp_c > 55);
}

#[test]
fn later_segments_override_only_what_they_set() {
    let s = parse(
        r#"[[gpu]]
model = "A100-SXM4-40GB"
[[gpu.timeline]]
util_gpu = 95
[[gpu.timeline]]
from = "10m"
to = "12m"
util_gpu = 3
[[gpu.timeline]]
from = "20m"
to = "25m"
temp = { ramp = [70, 88] }
throttle = ["sw_thermal", "hw_thermal"]
pstate = "P2"
"#,
    );
    let busy = s.gpu_state(0, 60);
    assert_eq!(busy.util_gpu, 95);
    assert_eq!(busy.sm_clock_mhz, 1410);
    assert_eq!(busy.pstate, 0);
    assert!(busy.power_mw > 300_000);
    let checkpoint = s.gpu_state(0, 11 * 60);
    assert_eq!(checkpoint.util_gpu, 3);
    assert!(checkpoint.power_mw < 80_000);
    let hot = s.gpu_state(0, 25 * 60 - 5);
    assert_eq!(hot.util_gpu, 95);
    assert!(hot.temp_c >= 85);
    assert_eq!(
        hot.throttle_reasons,
        throttle::SW_THERMAL | throttle::HW_THERMAL
    );
    assert_eq!(hot.pstate, 2);
    assert_eq!(s.gpu_state(0, 26 * 60).throttle_reasons, 0);
}

#[test]
fn lookups_are_constant_time_in_the_tick() {
    let s = Scenario::builtin_default();
    let far = 1_000_000_000u64;
    let start = Instant::now();
    for i in 0..1000 {
        let st = s.gpu_state(0, far + i);
        assert!(st.energy_mj > 0);
        let _ = s.processes_at(1, far + i);
        let _ = s.training_at(far + i);
    }
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "{:?}",
        start.elapsed()
    );
    let step = s
        .training_at(far)
        .iter()
        .find(|v| v.name == "training_step")
        .map(|v| v.value);
    assert_eq!(step, Some((far as f64 * 0.8).floor()));
}

#[test]
fn energy_is_the_integral_of_power() {
    let s = parse(
        r#"[scenario]
tick_ms = 500
[[gpu]]
model = "H100-SXM-80GB"
[[gpu.timeline]]
to = "30s"
util_gpu = { ramp = [0, 100], noise = 4 }
[[gpu.timeline]]
from = "30s"
to = "60s"
power_w = { sawtooth = [200, 400], period = "7s", noise = 15 }
[[gpu.timeline]]
from = "45s"
util_gpu = { value = 80, noise = 3 }
"#,
    );
    let e0 = s.gpu_state(0, 0).energy_mj;
    let mut acc = 0u64;
    for t in 0..400u64 {
        let st = s.gpu_state(0, t);
        let expected = e0 + acc / 1000;
        // Power is reported rounded to 1 mW: at most 0.25 mJ of drift per 500 ms tick.
        let tolerance = 2 + t / 4;
        assert!(
            st.energy_mj.abs_diff(expected) <= tolerance,
            "tick {t}: {} vs {expected}",
            st.energy_mj
        );
        acc += u64::from(st.power_mw) * 500; // mW * ms = µJ
    }
    // Far away it is still a plain lookup, and it keeps growing at the current power.
    let a = s.gpu_state(0, 1_000_000_000);
    let b = s.gpu_state(0, 1_000_000_010);
    let avg_w = (b.energy_mj - a.energy_mj) as f64 / 10.0 / 500.0;
    assert!(
        (avg_w - 0.001 * f64::from(a.power_mw)).abs() < 40.0,
        "{avg_w}"
    );
}

#[test]
fn noise_is_deterministic() {
    let text = "[scenario]\nseed = 9\n[[gpu]]\nmodel = \"L40S\"\n[[gpu.timeline]]\nutil_gpu = { value = 50, noise = 10 }\n";
    let (a, b) = (parse(text), parse(text));
    for t in (0..10_000).step_by(37) {
        assert_eq!(a.gpu_state(0, t), b.gpu_state(0, t));
    }
    let other = parse(&text.replace("seed = 9", "seed = 10"));
    assert!((0..100).any(|t| other.gpu_state(0, t).util_gpu != a.gpu_state(0, t).util_gpu));
}

#[test]
fn processes_fill_memory_and_come_and_go() {
    let s = parse(
        r#"[[gpu]]
model = "H100-SXM-80GB"
baseline_mib = 500
[[gpu]]
model = "H100-SXM-80GB"
[[process]]
pid = 100
name = "python"
user = "alice"
gpus = [0, 1]
mem_mib = 10000
[[process]]
pid = 200
name = "leaky"
gpu = 0
start = "1m"
end = "3m"
mem_mib = { ramp = [1000, 3000], over = "2m" }
"#,
    );
    assert_eq!(s.processes()[0].cmdline, "python");
    assert_eq!(s.processes()[1].start_tick, 60);
    assert_eq!(s.processes()[1].end_tick, Some(180));
    assert_eq!(s.gpu_state(0, 0).mem_used_bytes, 10_500 * MIB);
    assert_eq!(s.processes_at(0, 0).len(), 1);
    let p = s.processes_at(0, 120);
    assert_eq!(p.len(), 2);
    assert_eq!(p[1].pid, 200);
    assert_eq!(p[1].used_bytes, 2000 * MIB);
    assert_eq!(s.gpu_state(0, 120).mem_used_bytes, 12_500 * MIB);
    assert_eq!(s.processes_at(0, 180).len(), 1);
    assert_eq!(s.processes_at(1, 120).len(), 1);
}

#[test]
fn faults_lost_gpus_and_not_supported() {
    let s = parse(
        r#"[[gpu]]
model = "RTX-4090"
lost_at = "10m"
[[gpu]]
model = "H100-SXM-80GB"
[[fault]]
gpu = 1
symbol = "nvmlDeviceGetPowerUsage"
from = "1m"
until = "2m"
error = "TIMEOUT"
[[fault]]
symbol = "nvmlDeviceGetTemperature"
from = "5m"
block = "3s"
[[fault]]
gpus = [1]
symbol = "*"
from = "20m"
block = "forever"
"#,
    );
    assert_eq!(
        s.call_outcome(1, "nvmlDeviceGetPowerUsage", 59),
        CallOutcome::Ok
    );
    assert_eq!(
        s.call_outcome(1, "nvmlDeviceGetPowerUsage", 60),
        CallOutcome::Error(code::TIMEOUT)
    );
    assert_eq!(
        s.call_outcome(1, "nvmlDeviceGetPowerUsage", 120),
        CallOutcome::Ok
    );
    assert_eq!(
        s.call_outcome(0, "nvmlDeviceGetPowerUsage", 90),
        CallOutcome::Ok
    );
    assert_eq!(
        s.call_outcome(0, "nvmlDeviceGetTotalEccErrors", 0),
        CallOutcome::Error(code::NOT_SUPPORTED)
    );
    assert_eq!(
        s.call_outcome(0, "nvmlDeviceGetTemperature", 300),
        CallOutcome::Block(Duration::from_secs(3))
    );
    assert_eq!(s.call_error(0, "nvmlDeviceGetTemperature", 300), None);
    assert_eq!(
        s.call_outcome(0, "nvmlDeviceGetName", 600),
        CallOutcome::Error(code::GPU_IS_LOST)
    );
    assert!(s.gpu_state(0, 600).lost && !s.gpu_state(0, 599).lost);
    // A fault beats a lost GPU: a lost GPU whose calls hang.
    assert!(matches!(
        s.call_outcome(0, "nvmlDeviceGetTemperature", 700),
        CallOutcome::Block(_)
    ));
    assert_eq!(
        s.call_outcome(1, "nvmlDeviceGetMemoryInfo_v2", 1200),
        CallOutcome::BlockForever
    );
    assert_eq!(
        s.call_outcome(5, "nvmlDeviceGetName", 0),
        CallOutcome::Error(code::INVALID_ARGUMENT)
    );
}

#[test]
fn events_in_ranges() {
    let s = parse(
        "[[gpu]]\nmodel = \"T4\"\n[[gpu]]\nmodel = \"T4\"\n\
         [[event]]\ngpu = 1\nat = \"2m\"\nxid = 48\n[[event]]\ngpu = 0\nat = \"1m\"\nxid = 13\n",
    );
    let all = s.events_between(None, 1000);
    assert_eq!(
        all.iter()
            .map(|e| (e.gpu, e.tick, e.xid))
            .collect::<Vec<_>>(),
        vec![(0, 60, 13), (1, 120, 48)]
    );
    assert_eq!(s.events_between(Some(60), 120).len(), 1);
    assert_eq!(s.events_between(Some(0), 59).len(), 0);
    assert_eq!(s.events_between(None, 60).len(), 1);
}

#[test]
fn a_repeated_event_is_a_storm_of_one_xid() {
    let s = parse(
        "[[gpu]]\nmodel = \"T4\"\n\
         [[event]]\ngpu = 0\nat = \"1m\"\nxid = 94\nrepeat = 1000\nevery = \"50ms\"\n",
    );
    let all = s.events_between(None, 1000);
    assert_eq!(all.len(), 1000);
    assert!(all.iter().all(|e| e.gpu == 0 && e.xid == 94));
    assert_eq!(
        (all[0].tick, all[999].tick),
        (60, 109),
        "50 s at 20 a second"
    );
    for bad in ["repeat = 0", "repeat = 3"] {
        let text =
            format!("[[gpu]]\nmodel = \"T4\"\n[[event]]\ngpu = 0\nat = \"1m\"\nxid = 94\n{bad}\n");
        assert!(
            Scenario::from_toml_str(&text, "bad.toml").is_err(),
            "{bad} (no `every`) is refused"
        );
    }
}

#[test]
fn training_series_with_hang() {
    let s = parse(
        r#"[[gpu]]
model = "H100-SXM-80GB"
[[training]]
job = "gpt"
gpus = [0]
start = "10s"
end = "10m"
steps_per_sec = 1
per_gpu = true
loss = { initial = 5.0, final = 2.0, decay_steps = 100 }
[[training.stall]]
from = "1m"
to = "2m"
kind = "hang"
"#,
    );
    assert!(s.training_at(5).is_empty());
    let at = |t| {
        s.training_at(t)
            .iter()
            .find(|v| v.name == "training_step")
            .map(|v| v.value)
    };
    assert_eq!(at(10), Some(0.0));
    assert_eq!(at(60), Some(50.0));
    assert_eq!(at(100), Some(50.0));
    assert_eq!(at(130), Some(60.0));
    assert!(s.training_at(600).is_empty());
    assert_eq!(s.training_jobs()[0].stalls[0].kind, StallKind::Hang);
    let v = s.training_at(60);
    assert_eq!(
        v[0].labels,
        vec![
            ("gpu".to_string(), "0".to_string()),
            ("job".to_string(), "gpt".to_string())
        ]
    );
    let loss = v
        .iter()
        .find(|v| v.name == "training_loss")
        .map(|v| v.value);
    assert!(loss.is_some_and(|l| (l - (2.0 + 3.0 * (-0.5f64).exp())).abs() < 1e-9));
}

#[test]
fn training_labels_are_added_and_reserved_names_refused() {
    let s = parse(
        r#"[[gpu]]
model = "H100-SXM-80GB"
[[training]]
job = "gpt"
gpus = [0]
steps_per_sec = 1
labels = { pod = "gpt-0", namespace = "research" }
"#,
    );
    let v = s.training_at(5);
    let labels: Vec<(&str, &str)> = v[0]
        .labels
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(
        labels,
        [("job", "gpt"), ("namespace", "research"), ("pod", "gpt-0")]
    );
    let e = error_of(
        r#"[[gpu]]
model = "H100-SXM-80GB"
[[training]]
job = "gpt"
gpus = [0]
steps_per_sec = 1
labels = { gpu = "1" }
"#,
    );
    assert!(
        e.starts_with("bad.toml:7:10:") && e.contains("label `gpu`"),
        "{e}"
    );
}

#[test]
fn training_gaps_and_restarts() {
    let s = parse(
        r#"[[gpu]]
model = "H100-SXM-80GB"
[[training]]
job = "gpt"
gpus = [0]
steps_per_sec = 2
per_gpu = true
[[training.stall]]
from = "1m"
to = "2m"
kind = "gap"
[[training.stall]]
from = "5m"
to = "7m"
kind = "restart"
rewind = 100
[[training.stall]]
from = "10m"
to = "11m"
kind = "restart"
"#,
    );
    let at = |t| {
        s.training_at(t)
            .iter()
            .find(|v| v.name == "training_step")
            .map(|v| v.value)
    };
    // A gap: nothing is reported, but the job trains on.
    assert_eq!(at(59), Some(118.0));
    assert_eq!(at(60), None);
    assert_eq!(at(119), None);
    assert_eq!(at(120), Some(240.0));
    // A restart: nothing reported, no steps, then 100 steps below the value at the crash.
    assert_eq!(at(299), Some(598.0));
    assert_eq!(at(300), None);
    assert_eq!(at(419), None);
    assert_eq!(at(420), Some(500.0));
    assert_eq!(at(421), Some(502.0));
    // rewind defaults to 0: the job resumes where it stopped.
    assert_eq!(at(599), Some(858.0));
    assert_eq!(at(660), Some(860.0));
    // Still closed form: a far tick is arithmetic, not a sum over ticks.
    assert_eq!(at(1_000_000), Some(((1_000_000 - 180) * 2 - 100) as f64));
    let stalls = &s.training_jobs()[0].stalls;
    assert_eq!(stalls[0].kind, StallKind::Gap);
    assert_eq!(
        (stalls[1].kind, stalls[1].rewind),
        (StallKind::Restart, 100)
    );
    assert_eq!((stalls[2].kind, stalls[2].rewind), (StallKind::Restart, 0));
}

#[test]
fn training_stall_errors_have_places() {
    let base = "[[gpu]]\nmodel = \"T4\"\n[[training]]\njob = \"j\"\ngpus = [0]\nsteps_per_sec = 1\n[[training.stall]]\nfrom = \"1m\"\nto = \"2m\"\n";
    let e = error_of(&format!("{base}kind = \"hang\"\nrewind = 10\n"));
    assert!(
        e.starts_with("bad.toml:11:10:")
            && e.contains("`rewind` only applies to kind = \"restart\""),
        "{e}"
    );
    let e = error_of(&format!("{base}kind = \"restart\"\nrewind = -5\n"));
    assert!(
        e.starts_with("bad.toml:11:10:") && e.contains("whole number of steps"),
        "{e}"
    );
    let e = error_of(&format!("{base}kind = \"restart\"\nrewind = 1.5\n"));
    assert!(e.starts_with("bad.toml:11:10:"), "{e}");
    let e = error_of(&format!("{base}kind = \"crash\"\n"));
    assert!(
        e.starts_with("bad.toml:10:8:") && e.contains("\"gap\" or \"restart\""),
        "{e}"
    );
}

#[test]
fn syntax_errors_have_line_and_column() {
    let e = error_of("[[gpu]]\nmodel = \"H100-SXM-80GB\"\n[[gpu.timeline]]\nutill_gpu = 5\n");
    assert!(
        e.starts_with("bad.toml:4:1: unknown field `utill_gpu`"),
        "{e}"
    );
    let e =
        error_of("[[gpu]]\nmodel = \"H100-SXM-80GB\"\n[[gpu.timeline]]\nfrom = \"5 parsecs\"\n");
    assert!(
        e.starts_with("bad.toml:4:8:") && e.contains("unknown unit"),
        "{e}"
    );
    let e = error_of(
        "[[gpu]]\nmodel = \"H100-SXM-80GB\"\n[[gpu.timeline]]\nutil_gpu = { ramp = [1, 2], value = 3 }\n",
    );
    assert!(
        e.starts_with("bad.toml:4:") && e.contains("exactly one shape"),
        "{e}"
    );
    let e = error_of("[scenario\n");
    assert!(e.starts_with("bad.toml:1:"), "{e}");
    let e = error_of("[[fault]]\nerror = \"GPU_IS_LOSTT\"\n");
    assert!(
        e.starts_with("bad.toml:2:9:") && e.contains("GPU_IS_LOST"),
        "{e}"
    );
}

#[test]
fn semantic_errors_are_all_reported_with_places() {
    let text = r#"[scenario]
tick_ms = 0
[[gpu]]
model = "H100-SXM"
[[gpu]]
model = "T4"
[[gpu.timeline]]
from = "5m"
to = "1m"
util_gpu = 50
[[gpu.timeline]]
from = "1m"
util_gpu = { ramp = [0, 100] }
[[gpu.timeline]]
util_gpu = 150
[[process]]
pid = 1
name = "x"
gpu = 7
[[fault]]
symbol = "nvmlDeviceGetPowerUsag"
error = "UNKNOWN"
[[event]]
gpu = 0
at = "1m"
xid = 0
"#;
    let err = Scenario::from_toml_str(text, "bad.toml").err();
    let Some(ScenarioError::Invalid(problems)) = err else {
        panic!("expected Invalid, got {err:?}");
    };
    let lines: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
    let has = |prefix: &str, needle: &str| {
        lines
            .iter()
            .any(|l| l.starts_with(prefix) && l.contains(needle))
    };
    assert!(has("bad.toml:2:11:", "tick_ms must be >= 1"), "{lines:#?}");
    assert!(
        has("bad.toml:4:9:", "did you mean `H100-SXM-80GB`"),
        "{lines:#?}"
    );
    assert!(has("bad.toml:9:6:", "must be after"), "{lines:#?}");
    assert!(has("bad.toml:13:", "needs `over`"), "{lines:#?}");
    assert!(has("bad.toml:15:", "outside 0..=100"), "{lines:#?}");
    assert!(
        has("bad.toml:19:7:", "GPU index 7 does not exist"),
        "{lines:#?}"
    );
    assert!(
        has("bad.toml:21:10:", "did you mean `nvmlDeviceGetPowerUsage`"),
        "{lines:#?}"
    );
    assert!(
        has("bad.toml:26:7:", "xid must be a positive"),
        "{lines:#?}"
    );
    // Sorted by place.
    let mut sorted = problems.clone();
    sorted.sort_by_key(|p| (p.line, p.col));
    assert_eq!(sorted, problems);
}

#[test]
fn shipped_scenarios_parse() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).expect("scenarios/ exists") {
        let path = entry.expect("readable dir entry").path();
        if path.extension().is_some_and(|e| e == "toml") {
            if let Err(e) = Scenario::from_path(&path) {
                panic!("{e}");
            }
            seen += 1;
        }
    }
    assert!(
        seen >= 2,
        "expected the shipped scenarios in {}",
        dir.display()
    );
}

#[test]
fn demo_scenario_tells_its_story() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/demo.toml");
    let s = Scenario::from_path(&path).unwrap_or_else(|e| panic!("{e}"));
    let m = |min: f64| (min * 60.0) as u64;
    assert_eq!(s.gpu_count(), 4);
    assert_eq!(s.duration_ticks(), m(40.0));
    // GPU 0: training, checkpoint pause.
    assert!(s.gpu_state(0, m(10.0)).util_gpu >= 90);
    assert!(s.gpu_state(0, m(12.5)).util_gpu <= 10);
    // GPU 1: the leak grows 150..200 MiB per minute.
    let leak = |t| s.processes_at(1, t)[0].used_bytes as f64 / MIB as f64;
    let rate = (leak(m(30.0)) - leak(m(10.0))) / 20.0;
    assert!((150.0..=200.0).contains(&rate), "{rate}");
    assert!(s.gpu_state(1, m(39.0)).mem_used_bytes * 10 > s.gpu(1).memory_total_bytes * 9);
    // GPU 2: idle but holding memory from 10 to 40 min.
    for t in [m(11.0), m(25.0), m(39.0)] {
        let st = s.gpu_state(2, t);
        assert_eq!(st.util_gpu, 0);
        assert!(st.mem_used_bytes > 29_000 * MIB);
    }
    // GPU 3: near the slowdown threshold, then thermal slowdown with power and clock drop.
    let slowdown = s.gpu(3).temp_slowdown_c;
    let hot = s.gpu_state(3, m(19.9)).temp_c;
    assert!(hot + 5 >= slowdown && hot < slowdown, "{hot} vs {slowdown}");
    let throttled = s.gpu_state(3, m(22.0));
    assert_eq!(throttled.throttle_reasons & 0x60, 0x60);
    assert!(throttled.power_mw < s.gpu_state(3, m(10.0)).power_mw);
    assert!(throttled.sm_clock_mhz < s.gpu_state(3, m(10.0)).sm_clock_mhz);
    assert_eq!(s.gpu_state(3, m(30.0)).throttle_reasons, 0);
    // Hang: steps stop, utilisation ~100 %, power near idle on the job's GPUs.
    let step = |t| {
        s.training_at(t)
            .iter()
            .find(|v| {
                v.name == "training_step"
                    && v.labels
                        .iter()
                        .any(|(k, l)| k == "job" && l == "llama-70b-ft")
            })
            .map(|v| v.value)
    };
    assert_eq!(step(m(29.0)), step(m(35.0)));
    assert!(step(m(37.0)) > step(m(35.0)));
    for g in [0, 1] {
        let st = s.gpu_state(g, m(32.0));
        assert!(st.util_gpu >= 99 && st.power_mw < 120_000, "{st:?}");
    }
    // XIDs and a process that comes and goes.
    let xids: Vec<u64> = s
        .events_between(None, m(40.0))
        .iter()
        .map(|e| e.xid)
        .collect();
    assert_eq!(xids, vec![13, 48]);
    assert_eq!(s.processes_at(3, m(5.0)).len(), 2);
    assert_eq!(s.processes_at(3, m(10.0)).len(), 1);
}

#[test]
fn documented_example_parses() {
    let doc = include_str!("../SCENARIOS.md");
    let start = doc.find("```toml\n").expect("an example in SCENARIOS.md") + "```toml\n".len();
    let end = start + doc[start..].find("```").expect("closed example");
    let s = parse(&doc[start..end]);
    assert_eq!(s.name(), "overheat");
    assert_eq!(s.gpu_state(0, 19 * 60 + 59).throttle_reasons, 0x60);
    assert_eq!(s.training_jobs()[0].stalls[0].kind, StallKind::Hang);
}
