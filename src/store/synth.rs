//! Synthetic tick batches for tests and benchmarks of the store: deterministic (a seeded
//! xorshift), with realistic value ranges and noise so that row sizes match real data, and
//! the NULLs a data-centre GPU really has (no fan reading).
//!
//! This is not the GPU simulator (`gpuwatch-sim` drives scenarios); it only feeds the store.

use crate::model::{
    GpuInventory, GpuSample, ProcessInfo, ProcessSample, SampleStatus, TickBatch, TrainingPoint,
    TsMs,
};

const GIB: u64 = 1 << 30;

/// Generates one [`TickBatch`] per call, for `gpus` GPUs with `procs_per_gpu` processes each.
#[derive(Debug, Clone)]
pub struct TickGen {
    pub gpus: usize,
    pub procs_per_gpu: usize,
    /// Training series emitting one point every 15 s (0 = none).
    pub training_series: usize,
    /// Prefix of the GPU uuids (distinct per simulated host).
    pub uuid_prefix: String,
    rng: u64,
    ticks: u64,
    util: Vec<u32>,
    mem: Vec<u64>,
    energy: Vec<u64>,
}

impl TickGen {
    pub fn new(gpus: usize, procs_per_gpu: usize) -> Self {
        Self {
            gpus,
            procs_per_gpu,
            training_series: 0,
            uuid_prefix: "GPU-5e1f0c3a-0000-0000-0000-".into(),
            rng: 0x9E37_79B9_7F4A_7C15,
            ticks: 0,
            util: vec![90; gpus],
            mem: vec![40 * GIB; gpus],
            energy: vec![1_000_000_000; gpus],
        }
    }

    /// The uuid of GPU `i`.
    pub fn uuid(&self, i: usize) -> String {
        format!("{}{i:012}", self.uuid_prefix)
    }

    /// An H100-like inventory for every GPU.
    pub fn inventory(&self) -> Vec<GpuInventory> {
        (0..self.gpus)
            .map(|i| GpuInventory {
                index: i as u32,
                uuid: self.uuid(i),
                name: Some("NVIDIA H100 80GB HBM3".into()),
                serial: Some(format!("165412{i:07}")),
                pci_bus_id: Some(format!("00000000:{:02X}:00.0", 0x18 + i * 0x10)),
                driver_version: Some("550.54.15".into()),
                cuda_driver_version: Some(12040),
                nvml_version: Some("12.550.54.15".into()),
                memory_total_bytes: Some(80 * GIB),
                power_limit_mw: Some(700_000),
                power_limit_min_mw: Some(200_000),
                power_limit_max_mw: Some(700_000),
                temp_slowdown_c: Some(87),
                temp_shutdown_c: Some(92),
                temp_gpu_max_c: Some(85),
                pcie_max_gen: Some(5),
                pcie_max_width: Some(16),
                persistence_mode: Some(true),
                mig_mode: Some(false),
                mig: None,
            })
            .collect()
    }

    fn next(&mut self) -> u64 {
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        x
    }

    fn noise(&mut self, span: u64) -> u64 {
        self.next() % span.max(1)
    }

    /// The next tick at `ts_ms`; the first one carries the inventory.
    pub fn tick(&mut self, ts_ms: TsMs) -> TickBatch {
        let mut b = TickBatch {
            ts_ms,
            ..TickBatch::default()
        };
        if self.ticks == 0 {
            b.inventory = self.inventory();
        }
        self.ticks += 1;
        for i in 0..self.gpus {
            let step = self.noise(7) as i64 - 3;
            self.util[i] = (self.util[i] as i64 + step).clamp(0, 100) as u32;
            let util = self.util[i];
            self.mem[i] = (self.mem[i] + self.noise(8 << 20)).saturating_sub(4 << 20);
            let power = 90_000 + util * 5_500 + self.noise(20_000) as u32;
            self.energy[i] += u64::from(power);
            let mut s = GpuSample::empty(ts_ms, &self.uuid(i), SampleStatus::Ok);
            s.util_gpu_pct = Some(util);
            s.util_mem_pct = Some(util * 6 / 10);
            s.mem_used_bytes = Some(self.mem[i]);
            s.mem_total_bytes = Some(80 * GIB);
            s.mem_free_bytes = Some(80 * GIB - self.mem[i] - (500 << 20));
            s.temp_c = Some(35 + util * 4 / 10 + self.noise(3) as u32);
            s.fan_pct = None;
            s.clock_sm_mhz = Some(1_980 - self.noise(200) as u32);
            s.clock_mem_mhz = Some(2_619);
            s.power_mw = Some(power);
            s.power_limit_mw = Some(700_000);
            s.energy_mj = Some(self.energy[i]);
            s.pstate = Some(0);
            s.pcie_tx_kbs = Some(self.noise(400_000) as u32);
            s.pcie_rx_kbs = Some(self.noise(900_000) as u32);
            s.pcie_gen = Some(5);
            s.pcie_width = Some(16);
            s.throttle_reasons = Some(if util > 95 { 0x4 } else { 0 });
            s.ecc_corrected = Some(0);
            s.ecc_uncorrected = Some(0);
            s.retired_pages = None;
            s.remapped_rows_correctable = Some(0);
            s.remapped_rows_uncorrectable = Some(0);
            s.remap_pending = Some(false);
            s.remap_failure = Some(false);
            s.process_count = Some(self.procs_per_gpu as u32);
            b.samples.push(s);
            for j in 0..self.procs_per_gpu {
                let pid = 10_000 + (i * self.procs_per_gpu + j) as u32;
                b.processes.push(ProcessSample {
                    ts_ms,
                    gpu_uuid: self.uuid(i),
                    process: ProcessInfo {
                        pid,
                        start_time_ms: 1_700_000_000_000,
                        name: Some("python".into()),
                        cmdline: Some(format!("python train.py --local-rank {i}")),
                        user: Some("alice".into()),
                        placement: None,
                    },
                    used_mem_bytes: Some(self.mem[i] / self.procs_per_gpu as u64),
                });
            }
        }
        if self.training_series > 0 && ts_ms.rem_euclid(15_000) < 1_000 {
            for k in 0..self.training_series {
                b.training.push(TrainingPoint {
                    ts_ms,
                    name: "training_step".into(),
                    labels: vec![("rank".into(), k.to_string())],
                    value: (ts_ms / 15_000) as f64,
                });
            }
        }
        b
    }
}
