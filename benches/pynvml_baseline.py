#!/usr/bin/env python3
"""The NVML-tutorial way of doing gpuwatch's sampling, as a baseline for docs/BENCHMARKS.md:
a Python loop with nvidia-ml-py (pynvml) reading the same fields every interval and inserting
them into sqlite3, one transaction per tick.

    python3 benches/pynvml_baseline.py --db /tmp/py.db --interval 1 --seconds 600
"""
import argparse
import os
import sqlite3
import time

import pynvml as N


def safe(f, *a):
    try:
        return f(*a)
    except N.NVMLError:
        return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--db", required=True)
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--seconds", type=float, default=600)
    args = ap.parse_args()

    N.nvmlInit()
    db = sqlite3.connect(args.db)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(
        "CREATE TABLE IF NOT EXISTS samples (ts REAL, gpu INTEGER, util INTEGER, mem_util INTEGER,"
        " mem_used INTEGER, mem_free INTEGER, mem_total INTEGER, temp INTEGER, fan INTEGER,"
        " sm_clock INTEGER, mem_clock INTEGER, power INTEGER, power_limit INTEGER, energy INTEGER,"
        " pstate INTEGER, pcie_tx INTEGER, pcie_rx INTEGER, pcie_gen INTEGER, pcie_width INTEGER,"
        " throttle INTEGER, ecc_corr INTEGER, ecc_unc INTEGER)"
    )
    db.execute("CREATE TABLE IF NOT EXISTS procs (ts REAL, gpu INTEGER, pid INTEGER, mem INTEGER)")
    handles = [N.nvmlDeviceGetHandleByIndex(i) for i in range(N.nvmlDeviceGetCount())]
    end = time.time() + args.seconds
    ticks = 0
    while time.time() < end:
        ts = time.time()
        with db:
            for i, h in enumerate(handles):
                util = safe(N.nvmlDeviceGetUtilizationRates, h)
                mem = safe(N.nvmlDeviceGetMemoryInfo, h)
                row = (
                    ts, i,
                    util.gpu if util else None, util.memory if util else None,
                    mem.used if mem else None, mem.free if mem else None, mem.total if mem else None,
                    safe(N.nvmlDeviceGetTemperature, h, N.NVML_TEMPERATURE_GPU),
                    safe(N.nvmlDeviceGetFanSpeed, h),
                    safe(N.nvmlDeviceGetClockInfo, h, N.NVML_CLOCK_SM),
                    safe(N.nvmlDeviceGetClockInfo, h, N.NVML_CLOCK_MEM),
                    safe(N.nvmlDeviceGetPowerUsage, h),
                    safe(N.nvmlDeviceGetEnforcedPowerLimit, h),
                    safe(N.nvmlDeviceGetTotalEnergyConsumption, h),
                    safe(N.nvmlDeviceGetPerformanceState, h),
                    safe(N.nvmlDeviceGetPcieThroughput, h, N.NVML_PCIE_UTIL_TX_BYTES),
                    safe(N.nvmlDeviceGetPcieThroughput, h, N.NVML_PCIE_UTIL_RX_BYTES),
                    safe(N.nvmlDeviceGetCurrPcieLinkGeneration, h),
                    safe(N.nvmlDeviceGetCurrPcieLinkWidth, h),
                    safe(N.nvmlDeviceGetCurrentClocksThrottleReasons, h),
                    safe(N.nvmlDeviceGetTotalEccErrors, h, N.NVML_MEMORY_ERROR_TYPE_CORRECTED, N.NVML_VOLATILE_ECC),
                    safe(N.nvmlDeviceGetTotalEccErrors, h, N.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, N.NVML_VOLATILE_ECC),
                )
                db.execute("INSERT INTO samples VALUES (" + ",".join("?" * len(row)) + ")", row)
                for p in safe(N.nvmlDeviceGetComputeRunningProcesses, h) or []:
                    db.execute("INSERT INTO procs VALUES (?,?,?,?)", (ts, i, p.pid, p.usedGpuMemory))
        ticks += 1
        time.sleep(max(0.0, args.interval - (time.time() - ts)))
    N.nvmlShutdown()
    print(f"ticks={ticks} gpus={len(handles)} pid={os.getpid()}")


if __name__ == "__main__":
    main()
