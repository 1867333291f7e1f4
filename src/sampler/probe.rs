//! `gpuwatch doctor`'s look at NVML: initialise it, read the system facts, then read every GPU's
//! identity (and minor number: the N of its `/dev/nvidiaN`) and health settings once
//! (persistence, compute and MIG modes, ECC, row remapping and retired pages, PCIe link), each
//! answer kept with its error's [`Diagnosis`].
//!
//! Invariants: NVML is called here (inside `sampler/`, like every NVML call) on one
//! `gpuwatch-doctor-nvml` thread; the caller waits at most `per_step` for each step (init, then
//! each GPU), so a GPU whose calls hang is reported as hung instead of hanging the doctor. The
//! thread is never joined: a call that never returns keeps it (and the library) alive until the
//! process exits.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use nvml_wrapper::enum_wrappers::device::{ComputeMode, RetirementCause};
use nvml_wrapper::error::NvmlError;

use super::diagnosis::{Diagnosis, diagnose};
use super::nvml::{self, InitError};

/// One NVML answer: the value, or what its error means.
pub type Answer<T> = Result<T, Diagnosis>;

/// NVML's system-level facts.
#[derive(Debug, Clone)]
pub struct SystemProbe {
    /// The file the process actually mapped (from `/proc/self/maps`), when it can be told.
    pub loaded_from: Option<PathBuf>,
    pub driver_version: Answer<String>,
    pub nvml_version: Answer<String>,
    pub device_count: Answer<u32>,
}

/// Current and maximum PCIe link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PcieLink {
    pub gen_now: u32,
    pub gen_max: u32,
    pub width_now: u32,
    pub width_max: u32,
}

/// Row remapping (Ampere and later).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Remapped {
    pub correctable: u32,
    pub uncorrectable: u32,
    pub pending: bool,
    pub failure: bool,
}

/// Page retirement (before Ampere).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retired {
    pub single_bit: usize,
    pub double_bit: usize,
    pub pending: bool,
}

/// The compute mode, by its `nvidia-smi` name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compute {
    Default,
    ExclusiveThread,
    ExclusiveProcess,
    Prohibited,
}

/// (current, pending) of a mode that applies after a reset.
pub type Pending = (bool, bool);

/// One GPU's answers. `handle` failing means nothing else was asked.
#[derive(Debug, Clone)]
pub struct GpuProbe {
    pub index: u32,
    pub handle: Answer<()>,
    pub name: Answer<String>,
    pub uuid: Answer<String>,
    /// `nvmlDeviceGetMinorNumber`: the GPU's device node is `/dev/nvidia<minor>`.
    pub minor: Answer<u32>,
    pub persistence: Answer<bool>,
    pub compute: Answer<Compute>,
    pub mig: Answer<Pending>,
    pub ecc: Answer<Pending>,
    pub remapped: Answer<Remapped>,
    pub retired: Answer<Retired>,
    pub pcie: Answer<PcieLink>,
    /// `nvmlDeviceGetGpuFabricInfo`: (state, status); NOT_SUPPORTED outside an NVLink fabric.
    pub fabric: Answer<(u8, u32)>,
}

/// Everything the probe learnt; `hung` names the step that did not return in time.
#[derive(Debug)]
pub struct Probe {
    pub system: SystemProbe,
    pub gpus: Vec<GpuProbe>,
    /// The GPU whose reads did not return within the deadline (the probe stopped there).
    pub hung: Option<u32>,
}

/// Why the probe learnt nothing.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("{0}")]
    Init(#[from] InitError),
    #[error("NVML initialisation did not return within {0:?}")]
    InitHung(Duration),
    #[error("cannot start the NVML thread: {0}")]
    Thread(std::io::Error),
}

enum Msg {
    Init(Result<SystemProbe, InitError>),
    Gpu(Box<GpuProbe>),
}

/// Initialises NVML from `library` (else the system's `libnvidia-ml.so.1`) and reads every
/// GPU, waiting at most `per_step` for init and for each GPU.
pub fn probe(library: Option<&Path>, per_step: Duration) -> Result<Probe, ProbeError> {
    let (tx, rx) = mpsc::channel();
    let library = library.map(Path::to_path_buf);
    std::thread::Builder::new()
        .name("gpuwatch-doctor-nvml".into())
        .spawn(move || run(library, &tx))
        .map_err(ProbeError::Thread)?;
    let system = match rx.recv_timeout(per_step) {
        Ok(Msg::Init(r)) => r?,
        Ok(Msg::Gpu(_)) | Err(_) => return Err(ProbeError::InitHung(per_step)),
    };
    let count = system.device_count.unwrap_or(0);
    let mut gpus = Vec::new();
    let mut hung = None;
    for index in 0..count {
        match rx.recv_timeout(per_step) {
            Ok(Msg::Gpu(g)) => gpus.push(*g),
            _ => {
                hung = Some(index);
                break;
            }
        }
    }
    Ok(Probe { system, gpus, hung })
}

fn run(library: Option<PathBuf>, tx: &mpsc::Sender<Msg>) {
    let handle = match nvml::init(library.as_deref()) {
        Ok(h) => h,
        Err(e) => {
            let _ = tx.send(Msg::Init(Err(e)));
            return;
        }
    };
    let nvml = &handle.nvml;
    let device_count = nvml.device_count().map_err(|e| diagnose(&e));
    let system = SystemProbe {
        loaded_from: mapped_library(),
        driver_version: nvml.sys_driver_version().map_err(|e| diagnose(&e)),
        nvml_version: nvml.sys_nvml_version().map_err(|e| diagnose(&e)),
        device_count,
    };
    if tx.send(Msg::Init(Ok(system))).is_err() {
        return;
    }
    for index in 0..device_count.unwrap_or(0) {
        let g = read_gpu(nvml, index);
        if tx.send(Msg::Gpu(Box::new(g))).is_err() {
            return;
        }
    }
}

fn read_gpu(nvml: &nvml_wrapper::Nvml, index: u32) -> GpuProbe {
    let d = |e: NvmlError| diagnose(&e);
    let dev = match nvml.device_by_index(index) {
        Ok(dev) => dev,
        Err(e) => {
            let e = d(e);
            return GpuProbe {
                index,
                handle: Err(e),
                name: Err(e),
                uuid: Err(e),
                minor: Err(e),
                persistence: Err(e),
                compute: Err(e),
                mig: Err(e),
                ecc: Err(e),
                remapped: Err(e),
                retired: Err(e),
                pcie: Err(e),
                fabric: Err(e),
            };
        }
    };
    let pcie = || -> Result<PcieLink, NvmlError> {
        Ok(PcieLink {
            gen_now: dev.current_pcie_link_gen()?,
            gen_max: dev.max_pcie_link_gen()?,
            width_now: dev.current_pcie_link_width()?,
            width_max: dev.max_pcie_link_width()?,
        })
    };
    let retired = || -> Result<Retired, NvmlError> {
        Ok(Retired {
            single_bit: dev
                .retired_pages(RetirementCause::MultipleSingleBitEccErrors)?
                .len(),
            double_bit: dev.retired_pages(RetirementCause::DoubleBitEccError)?.len(),
            pending: dev.are_pages_pending_retired()?,
        })
    };
    GpuProbe {
        index,
        handle: Ok(()),
        name: dev.name().map_err(d),
        uuid: dev.uuid().map_err(d),
        minor: dev.minor_number().map_err(d),
        persistence: dev.is_in_persistent_mode().map_err(d),
        compute: dev
            .compute_mode()
            .map(|m| match m {
                ComputeMode::Default => Compute::Default,
                ComputeMode::ExclusiveThread => Compute::ExclusiveThread,
                ComputeMode::ExclusiveProcess => Compute::ExclusiveProcess,
                ComputeMode::Prohibited => Compute::Prohibited,
            })
            .map_err(d),
        mig: dev
            .mig_mode()
            .map(|m| (m.current != 0, m.pending != 0))
            .map_err(d),
        ecc: dev
            .is_ecc_enabled()
            .map(|m| (m.currently_enabled, m.pending_enabled))
            .map_err(d),
        remapped: super::fields::remapped_rows(nvml, &dev)
            .map(|(correctable, uncorrectable, pending, failure)| Remapped {
                correctable,
                uncorrectable,
                pending,
                failure,
            })
            .map_err(d),
        retired: retired().map_err(d),
        pcie: pcie().map_err(d),
        fabric: super::nvlink::fabric_info(nvml, &dev).map_err(d),
    }
}

/// The NVML library this process mapped: the first file in `/proc/self/maps` whose name
/// starts with `libnvidia-ml`.
fn mapped_library() -> Option<PathBuf> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .map(PathBuf::from)
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("libnvidia-ml"))
        })
}
