#!/usr/bin/env python3
"""Smoke test: Python's nvidia-ml-py (pynvml) against the fake NVML library.

Usage (from the repository root):
    pip install nvidia-ml-py
    cargo build -p gpuwatch-fake-nvml
    python3 crates/fake-nvml/scripts/pynvml_smoke.py [scenario.toml]

It copies target/debug/libgpuwatch_fake_nvml.so to a temp dir as libnvidia-ml.so.1 with the
scenario beside it (default: scenarios/demo.toml), re-runs itself with LD_LIBRARY_PATH pointing
there, reads every value pynvml users usually read, checks that they hang together, prints them
and exits non-zero on the first inconsistency. Not part of CI (it needs pynvml installed).
"""
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def relaunch() -> int:
    scenario = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "scenarios" / "demo.toml"
    built = ROOT / "target" / "debug" / "deps" / "libgpuwatch_fake_nvml.so"
    if not built.exists():
        built = ROOT / "target" / "debug" / "libgpuwatch_fake_nvml.so"
    if not built.exists():
        print("build the library first: cargo build -p gpuwatch-fake-nvml", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(built, Path(tmp) / "libnvidia-ml.so.1")
        shutil.copy(scenario, Path(tmp) / "gpuwatch-scenario.toml")
        env = dict(os.environ, LD_LIBRARY_PATH=tmp, PYNVML_SMOKE_CHILD="1", GPUWATCH_FAKE_SPEED="600")
        env.pop("GPUWATCH_FAKE_SCENARIO", None)
        return subprocess.call([sys.executable, __file__], env=env)


def check(cond: bool, what: str) -> None:
    if not cond:
        raise SystemExit(f"FAILED: {what}")


def child() -> int:
    import time
    import pynvml as n

    n.nvmlInit()
    print("driver", n.nvmlSystemGetDriverVersion(), "nvml", n.nvmlSystemGetNVMLVersion(),
          "cuda", n.nvmlSystemGetCudaDriverVersion())
    count = n.nvmlDeviceGetCount()
    check(count > 0, "at least one GPU")
    time.sleep(0.5)  # 600 simulated s per wall s: five simulated minutes in
    for i in range(count):
        h = n.nvmlDeviceGetHandleByIndex(i)
        name, uuid = n.nvmlDeviceGetName(h), n.nvmlDeviceGetUUID(h)
        m1 = n.nvmlDeviceGetMemoryInfo(h)
        m2 = n.nvmlDeviceGetMemoryInfo(h, version=n.nvmlMemory_v2)
        check(m1.total == m2.total and m1.free == m2.free, "v1 and v2 memory agree")
        check(m1.used == m1.total - m1.free, "v1 used = total - free")
        check(m2.used + m2.free + m2.reserved == m2.total, "v2 adds up")
        u = n.nvmlDeviceGetUtilizationRates(h)
        check(0 <= u.gpu <= 100 and 0 <= u.memory <= 100, "utilisation in range")
        temp = n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU)
        power = n.nvmlDeviceGetPowerUsage(h)
        limit = n.nvmlDeviceGetPowerManagementLimit(h)
        check(0 < power <= limit * 1.2, "power below the limit")
        energy = n.nvmlDeviceGetTotalEnergyConsumption(h)
        sm = n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM)
        mem = n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_MEM)
        tx = n.nvmlDeviceGetPcieThroughput(h, n.NVML_PCIE_UTIL_TX_BYTES)
        rx = n.nvmlDeviceGetPcieThroughput(h, n.NVML_PCIE_UTIL_RX_BYTES)
        reasons = n.nvmlDeviceGetCurrentClocksThrottleReasons(h)
        try:
            fan = n.nvmlDeviceGetFanSpeed(h)
        except n.NVMLError_NotSupported:
            fan = "n/a"
        try:
            ecc = n.nvmlDeviceGetTotalEccErrors(h, n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, n.NVML_VOLATILE_ECC)
        except n.NVMLError_NotSupported:
            ecc = "n/a"
        procs = n.nvmlDeviceGetComputeRunningProcesses(h)
        check(all(p.gpuInstanceId == 0xFFFFFFFF for p in procs), "no MIG instance ids")
        check(sum(p.usedGpuMemory for p in procs) <= m2.used, "processes fit in used memory")
        print(f"{i} {name} {uuid} bus={n.nvmlDeviceGetPciInfo(h).busId}")
        print(f"  mem MiB total={m2.total >> 20} reserved={m2.reserved >> 20} used={m2.used >> 20} "
              f"free={m2.free >> 20}  util={u.gpu}/{u.memory}%  temp={temp}C  power={power}mW "
              f"energy={energy}mJ  sm={sm} mem={mem}MHz  pcie tx/rx={tx}/{rx}KB/s "
              f"reasons={reasons:#x}  fan={fan}  ecc_dbe={ecc}")
        print("  processes", [(p.pid, p.usedGpuMemory >> 20) for p in procs])
    try:
        n.nvmlDeviceGetHandleByIndex(count)
        check(False, "a handle past the count is refused")
    except n.NVMLError_InvalidArgument as e:
        print("past the count:", e)
    n.nvmlShutdown()
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(child() if os.environ.get("PYNVML_SMOKE_CHILD") else relaunch())
