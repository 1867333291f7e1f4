//! The fake NVML library is a drop-in for other NVML clients: Python's nvidia-ml-py (pynvml)
//! loads it through LD_LIBRARY_PATH and reads the same values gpuwatch reads.

use std::process::Command;
use std::time::Duration;

use crate::common::rig;

/// Constant values, so wall-clock ticks in the Python process cannot change them.
const SCENARIO: &str = r#"
[scenario]
name = "py"
duration = "1h"
[[gpu]]
model = "H100-SXM-80GB"
[[gpu.timeline]]
util_gpu = 77
util_mem = 31
temp = 64
power_w = 432
mem_used_mib = 20000
[[gpu]]
model = "T4"
[[gpu.timeline]]
util_gpu = 0
temp = 41
power_w = 30
[[process]]
pid = 4242
name = "python"
gpu = 0
mem_mib = 19000
"#;

const SCRIPT: &str = r#"
import json, pynvml
pynvml.nvmlInit()
out = []
for i in range(pynvml.nvmlDeviceGetCount()):
    h = pynvml.nvmlDeviceGetHandleByIndex(i)
    name = pynvml.nvmlDeviceGetName(h)
    uuid = pynvml.nvmlDeviceGetUUID(h)
    mem = pynvml.nvmlDeviceGetMemoryInfo(h)
    util = pynvml.nvmlDeviceGetUtilizationRates(h)
    procs = pynvml.nvmlDeviceGetComputeRunningProcesses(h)
    out.append({
        "name": name if isinstance(name, str) else name.decode(),
        "uuid": uuid if isinstance(uuid, str) else uuid.decode(),
        "mem_total": mem.total, "mem_used": mem.used, "mem_free": mem.free,
        "util_gpu": util.gpu, "util_mem": util.memory,
        "temp": pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
        "power_mw": pynvml.nvmlDeviceGetPowerUsage(h),
        "procs": [[p.pid, p.usedGpuMemory] for p in procs],
    })
pynvml.nvmlShutdown()
print(json.dumps(out))
"#;

#[test]
fn pynvml_reads_the_same_values_as_gpuwatch() {
    let mut r = rig(SCENARIO, Duration::from_secs(2));
    let b = r.tick();
    let o = Command::new("python3")
        .args(["-c", SCRIPT])
        .env("LD_LIBRARY_PATH", r.sim.dir())
        .output()
        .expect("python3 runs (scripts/test.sh installs nvidia-ml-py)");
    assert!(
        o.status.success(),
        "pynvml failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let py: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json from python");
    let py = py.as_array().expect("array");
    assert_eq!(py.len(), 2);
    for (i, s) in b.samples.iter().enumerate() {
        let p = &py[i];
        let inv = r
            .sampler
            .inventories()
            .find(|v| v.index == i as u32)
            .expect("inventory");
        assert_eq!(p["uuid"], s.uuid.as_str());
        assert_eq!(p["name"], inv.name.as_deref().expect("name"));
        assert_eq!(
            p["mem_total"],
            s.mem_total_bytes.expect("total"),
            "v1 memory info: total"
        );
        let (total, free) = (
            s.mem_total_bytes.expect("total"),
            s.mem_free_bytes.expect("free"),
        );
        assert_eq!(p["mem_free"], free, "v1 memory info: free");
        // v1 counts the driver's reserved memory as used; v2 (what gpuwatch reads) does not.
        assert_eq!(
            p["mem_used"],
            total - free,
            "v1 memory info: used = total - free"
        );
        assert!(
            s.mem_used_bytes.expect("used") < total - free,
            "v2 used excludes reserved"
        );
        assert_eq!(p["util_gpu"], s.util_gpu_pct.expect("util"));
        assert_eq!(p["util_mem"], s.util_mem_pct.expect("util mem"));
        assert_eq!(p["temp"], s.temp_c.expect("temp"));
        assert_eq!(p["power_mw"], s.power_mw.expect("power"));
    }
    assert_eq!(py[0]["procs"], serde_json::json!([[4242, 19000u64 << 20]]));
    assert_eq!(py[1]["util_gpu"], 0, "a real zero through pynvml too");
}

/// An H100 in MIG mode with three instances (the capture's 3g.40gb, 2g.20gb and 1g.10gb), one
/// process on the 2g.20gb.
const MIG_SCENARIO: &str = r#"
[scenario]
name = "py-mig"
duration = "1h"
[[gpu]]
model = "H100-SXM-80GB"
mig_mode = true
[[gpu.mig]]
profile = "3g.40gb"
gi = 2
[[gpu.mig]]
profile = "2g.20gb"
gi = 3
[[gpu.mig]]
profile = "1g.10gb"
gi = 9
[[process]]
pid = 4343
name = "python"
gpu = 0
mig = 3
mem_mib = 7000
"#;

const MIG_SCRIPT: &str = r#"
import json, pynvml
def as_int(v):
    # nvidia-ml-py hands back the ctypes c_uint itself here, not its value.
    return int(getattr(v, "value", v))
pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(0)
cur, pending = pynvml.nvmlDeviceGetMigMode(h)
out = {"mode": [cur, pending], "max": pynvml.nvmlDeviceGetMaxMigDeviceCount(h), "migs": []}
for i in range(out["max"]):
    try:
        m = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, i)
    except pynvml.NVMLError as e:
        if e.value == pynvml.NVML_ERROR_NOT_FOUND:
            continue
        raise
    uuid = pynvml.nvmlDeviceGetUUID(m)
    name = pynvml.nvmlDeviceGetName(m)
    mem = pynvml.nvmlDeviceGetMemoryInfo(m)
    parent = pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(m)
    try:
        pynvml.nvmlDeviceGetUtilizationRates(m)
        util = "answered"
    except pynvml.NVMLError as e:
        util = e.value
    out["migs"].append({
        "uuid": uuid if isinstance(uuid, str) else uuid.decode(),
        "name": name if isinstance(name, str) else name.decode(),
        "gi": pynvml.nvmlDeviceGetGpuInstanceId(m),
        "ci": pynvml.nvmlDeviceGetComputeInstanceId(m),
        "is_mig": as_int(pynvml.nvmlDeviceIsMigDeviceHandle(m)),
        "mem_total": mem.total, "mem_used": mem.used,
        "same_parent": pynvml.nvmlDeviceGetUUID(parent) == pynvml.nvmlDeviceGetUUID(h),
        "procs": [[p.pid, p.usedGpuMemory] for p in pynvml.nvmlDeviceGetComputeRunningProcesses(m)],
        "util": util,
    })
    by_uuid = pynvml.nvmlDeviceGetHandleByUUID(uuid)
    out["migs"][-1]["by_uuid_gi"] = pynvml.nvmlDeviceGetGpuInstanceId(by_uuid)
pynvml.nvmlShutdown()
print(json.dumps(out))
"#;

/// pynvml sees the MIG devices as a real client does: the count, each instance's handle,
/// UUID, name, instance ids, memory and processes, its parent; the classic utilisation call
/// on an instance answers NOT_SUPPORTED.
#[test]
fn pynvml_sees_the_mig_devices() {
    let r = rig(MIG_SCENARIO, Duration::from_secs(2));
    let o = Command::new("python3")
        .args(["-c", MIG_SCRIPT])
        .env("LD_LIBRARY_PATH", r.sim.dir())
        .output()
        .expect("python3 runs (scripts/test.sh installs nvidia-ml-py)");
    assert!(
        o.status.success(),
        "pynvml failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json from python");
    assert_eq!(v["mode"], serde_json::json!([1, 1]));
    assert_eq!(v["max"], 7);
    let migs = v["migs"].as_array().expect("migs");
    assert_eq!(migs.len(), 3, "{v}");
    let spec = r.sim.scenario.gpu(0);
    for (m, want) in migs.iter().zip(&spec.mig_instances) {
        assert_eq!(m["uuid"], want.uuid.as_str());
        assert!(m["uuid"].as_str().is_some_and(|u| u.starts_with("MIG-")));
        assert_eq!(m["gi"], want.gi_id);
        assert_eq!(m["by_uuid_gi"], want.gi_id);
        assert_eq!(m["ci"], 0);
        assert_eq!(m["is_mig"], 1);
        assert_eq!(m["same_parent"], true);
        assert_eq!(m["mem_total"], want.memory_bytes);
        assert_eq!(
            m["name"],
            format!("NVIDIA H100 80GB HBM3 MIG {}", want.profile.name).as_str()
        );
        assert_eq!(m["util"], 3, "NOT_SUPPORTED on a MIG device");
    }
    assert_eq!(
        migs[0]["mem_total"],
        40_448u64 << 20,
        "the capture's 3g.40gb"
    );
    assert_eq!(migs[1]["procs"], serde_json::json!([[4343, 7000u64 << 20]]));
    assert_eq!(migs[0]["procs"], serde_json::json!([]));
    assert!(
        migs[1]["mem_used"]
            .as_u64()
            .is_some_and(|u| u >= 7000 << 20)
    );
}
