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
