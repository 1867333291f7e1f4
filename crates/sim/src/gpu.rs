//! Compiling one `[[gpu]]` table: preset + overrides into a [`GpuSpec`], and its timeline
//! segments into per-metric tracks and the power/energy track.
//!
//! Invariants: identifiers not given are pure functions of `(seed, index)`; a metric no segment
//! sets is derived from the utilisation shape (an idle GPU when nothing is set), and derived
//! power is an affine map of that shape, so energy keeps its closed form.

use toml::Spanned;

use crate::behaviour::{Signal, mix, noise_key};
use crate::error::Problems;
use crate::nvml;
use crate::presets::{self, Preset};
use crate::spec::{RawGpu, RawSegment};
use crate::timeline::{EnergyTrack, METRIC_COUNT, Metric, Track, to_signal};
use crate::types::GpuSpec;
use crate::values::RawBehaviour;

const MIB: f64 = 1_048_576.0;

/// Numbers behind the derived (not explicitly set) metrics.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Params {
    pub idle_power_w: f64,
    pub load_power_w: f64,
    pub idle_temp: f64,
    pub load_temp: f64,
    pub fan_idle: f64,
    pub fan_load: f64,
    pub sm_clock_idle: f64,
    pub mem_clock_idle: f64,
    pub pcie_load_tx_kbs: f64,
    pub pcie_load_rx_kbs: f64,
    pub idle_pstate: u32,
    /// NVLink traffic of one link in one tick, KiB each way (1 GiB/s).
    pub nvlink_link_kib_per_tick: f64,
}

/// A compiled GPU: inventory plus everything needed to answer `gpu_state` in O(log segments).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct GpuModel {
    pub spec: GpuSpec,
    pub params: Params,
    pub tracks: Vec<Track>,
    pub energy: EnergyTrack,
    pub energy_base_mj: f64,
    pub baseline_bytes: u64,
    pub keys: [u64; METRIC_COUNT],
    /// `(index into Scenario::processes, memory signal in bytes)` for processes on this GPU.
    pub procs: Vec<(usize, Signal)>,
    /// MIG instances (`spec.mig_instances` holds their specs).
    pub mig: Vec<crate::mig::MigModel>,
}

/// DGX-style PCI bus numbers for the first eight GPUs.
const BUSES: [u32; 8] = [0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb];

fn gen_uuid(seed: u64, index: usize) -> String {
    let a = mix(seed ^ mix(index as u64 ^ 0xA11D));
    let b = mix(a ^ 0xB0B);
    format!(
        "GPU-{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xFFFF,
        a & 0xFFFF,
        b >> 48,
        b & 0xFFFF_FFFF_FFFF
    )
}

fn gen_serial(p: &Preset, seed: u64, index: usize) -> String {
    let n = mix(seed ^ mix(index as u64 ^ 0x5E71A1)) % 1_000_000_000;
    format!("{}{:09}", p.serial_prefix, n)
}

/// Parse `"00000000:18:00.0"` (or `"0000:18:00.0"`) into (domain, bus, device).
fn parse_bus_id(s: &str) -> Option<(u32, u32, u32)> {
    let (domain, rest) = s.split_once(':')?;
    let (bus, rest) = rest.split_once(':')?;
    let (dev, func) = rest.split_once('.')?;
    let hex = |x: &str| u32::from_str_radix(x, 16).ok();
    hex(func)?;
    Some((hex(domain)?, hex(bus)?, hex(dev)?))
}

fn text_field(
    p: &mut Problems,
    given: &Option<Spanned<String>>,
    default: String,
    max: usize,
    what: &str,
) -> String {
    match given {
        Some(s) if s.get_ref().is_empty() || s.get_ref().len() >= max => {
            p.at(
                Some(s.span()),
                format!("{what} must be 1..{} characters", max - 1),
            );
            default
        }
        Some(s) => s.get_ref().clone(),
        None => default,
    }
}

/// Build the inventory of GPU `index`; `None` when the model is unknown (already reported).
pub(crate) fn compile_spec(
    p: &mut Problems,
    raw: &Spanned<RawGpu>,
    index: usize,
    seed: u64,
    tick_ms: u64,
) -> Option<(GpuSpec, Params, &'static Preset)> {
    let g = raw.get_ref();
    let Some(pre) = presets::find(g.model.get_ref()) else {
        let hint =
            crate::compile::did_you_mean(g.model.get_ref(), presets::PRESETS.iter().map(|p| p.key));
        p.at(
            Some(g.model.span()),
            format!(
                "unknown model `{}`{hint}; expected one of {}",
                g.model.get_ref(),
                presets::keys()
            ),
        );
        return None;
    };
    let name = text_field(p, &g.name, pre.name.to_string(), 96, "name");
    let uuid = text_field(p, &g.uuid, gen_uuid(seed, index), 80, "uuid");
    let serial = text_field(p, &g.serial, gen_serial(pre, seed, index), 30, "serial");
    let default_bus = BUSES
        .get(index)
        .copied()
        .unwrap_or(0x100 - (index as u32 % 0x80));
    let bus_id = text_field(
        p,
        &g.pci_bus_id,
        format!("00000000:{default_bus:02x}:00.0"),
        32,
        "pci_bus_id",
    );
    let (pci_domain, pci_bus, pci_device) = parse_bus_id(&bus_id).unwrap_or_else(|| {
        let span = g.pci_bus_id.as_ref().map(|s| s.span());
        p.at(
            span,
            format!("pci_bus_id `{bus_id}`: expected the form \"00000000:18:00.0\""),
        );
        (0, 0, 0)
    });
    let memory_total_mib = g
        .memory_total_mib
        .as_ref()
        .map_or(pre.memory_total_mib, |m| *m.get_ref());
    if memory_total_mib == 0 {
        p.at(
            g.memory_total_mib.as_ref().map(|m| m.span()),
            "memory_total_mib must be > 0",
        );
    }
    let mw = |w: f64| (w * 1000.0).round().clamp(0.0, u32::MAX as f64) as u32;
    let limit = g.power_limit_w.unwrap_or(pre.power_limit_w);
    let min = g.power_min_w.unwrap_or(pre.power_min_w.min(limit));
    let max = g.power_max_w.unwrap_or(pre.power_max_w.max(limit));
    let default = g
        .power_default_w
        .unwrap_or(pre.power_max_w.min(max).max(min));
    if !(0.0 <= min && min <= limit && limit <= max && min <= default && default <= max) {
        p.at(
            Some(raw.span()),
            format!("power limits must satisfy 0 <= power_min_w ({min}) <= power_limit_w ({limit}) <= power_max_w ({max}), with power_default_w ({default}) between min and max"),
        );
    }
    let slowdown = g.temp_slowdown.unwrap_or(pre.temp_slowdown);
    let shutdown = g.temp_shutdown.unwrap_or(pre.temp_shutdown);
    if slowdown >= shutdown {
        p.at(
            Some(raw.span()),
            format!("temp_slowdown ({slowdown}) must be below temp_shutdown ({shutdown})"),
        );
    }
    let mut not_supported: Vec<String> = pre.not_supported.iter().map(|s| s.to_string()).collect();
    // GPM (GPU performance monitoring, NVML's profiling metrics) is Hopper and later.
    if pre.architecture < nvml::GPM_MIN_ARCHITECTURE {
        not_supported.push(nvml::GPM_SAMPLE.to_string());
    }
    for s in &g.not_supported {
        if check_symbol(p, s, false)
            && !not_supported
                .iter()
                .any(|n| n == nvml::base_symbol(s.get_ref()))
        {
            not_supported.push(nvml::base_symbol(s.get_ref()).to_string());
        }
    }
    for s in &g.supported {
        if check_symbol(p, s, false) {
            not_supported.retain(|n| n != nvml::base_symbol(s.get_ref()));
        }
    }
    let num_fans = g.num_fans.unwrap_or(pre.num_fans);
    let mig_mode = g.mig_mode.unwrap_or(false);
    let nvlinks = g.nvlinks.as_ref().map_or(pre.nvlinks, |n| *n.get_ref());
    if let Some(n) = g
        .nvlinks
        .as_ref()
        .filter(|n| *n.get_ref() > nvml::NVLINK_MAX_LINKS)
    {
        p.at(
            Some(n.span()),
            format!(
                "nvlinks must be at most {} (NVML_NVLINK_MAX_LINKS)",
                nvml::NVLINK_MAX_LINKS
            ),
        );
    }
    let fabric = g.fabric.unwrap_or(pre.fabric);
    // Without NVLink, and in MIG mode ("Nvlink queries are not supported for Devices in MIG
    // mode", nvidia-smi 590), every NVLink call answers NOT_SUPPORTED; so does the fabric's
    // on GPUs outside an NVLink fabric.
    let mut unsupported_too: Vec<&str> = Vec::new();
    if nvlinks == 0 || mig_mode {
        unsupported_too.push(nvml::NVLINK_STATE);
    }
    // In MIG mode the GPU's utilisation is not reported ("N/A" in nvidia-smi): only GPM
    // tells what the instances do.
    if mig_mode {
        unsupported_too.push("nvmlDeviceGetUtilizationRates");
    }
    if !fabric {
        unsupported_too.extend(nvml::FABRIC_INFO);
    }
    for n in unsupported_too {
        if !not_supported.iter().any(|x| x == n) {
            not_supported.push(n.to_string());
        }
    }
    let ecc_mode = g.ecc_mode.as_ref().is_none_or(|m| *m.get_ref());
    let no_ecc = not_supported.iter().any(|n| n == "nvmlDeviceGetEccMode");
    for key in [&g.ecc_mode, &g.ecc_mode_pending].into_iter().flatten() {
        if no_ecc {
            p.at(
                Some(key.span()),
                format!("{} has no ECC (nvmlDeviceGetEccMode answers NOT_SUPPORTED): remove the ECC mode, or add nvmlDeviceGetEccMode to `supported`", pre.key),
            );
        }
    }
    let spec = GpuSpec {
        index,
        model: pre.key.to_string(),
        name,
        uuid,
        serial,
        pci_bus_id: bus_id,
        pci_domain,
        pci_bus,
        pci_device,
        pci_device_id: pre.pci_device_id,
        pci_subsystem_id: pre.pci_subsystem_id,
        brand: pre.brand,
        architecture: pre.architecture,
        compute_capability: pre.compute_capability,
        vbios: pre.vbios.to_string(),
        memory_total_bytes: memory_total_mib << 20,
        memory_reserved_bytes: g.memory_reserved_mib.unwrap_or(pre.memory_reserved_mib) << 20,
        power_limit_mw: mw(limit),
        power_min_mw: mw(min),
        power_max_mw: mw(max),
        power_default_mw: mw(default),
        temp_shutdown_c: shutdown,
        temp_slowdown_c: slowdown,
        temp_gpu_max_c: g.temp_gpu_max.unwrap_or(pre.temp_gpu_max),
        temp_mem_max_c: g.temp_mem_max.or(pre.temp_mem_max),
        pcie_max_gen: g.pcie_max_gen.unwrap_or(pre.pcie_max_gen),
        pcie_max_width: g.pcie_max_width.unwrap_or(pre.pcie_max_width),
        sm_clock_max_mhz: g.sm_clock_max.unwrap_or(pre.sm_clock_max),
        mem_clock_max_mhz: g.mem_clock_max.unwrap_or(pre.mem_clock_max),
        sm_clock_idle_mhz: g.sm_clock_idle.unwrap_or(pre.sm_clock_idle),
        mem_clock_idle_mhz: g.mem_clock_idle.unwrap_or(pre.mem_clock_idle),
        num_fans,
        persistence_mode: g.persistence_mode.unwrap_or(pre.persistence_mode),
        mig_mode,
        mig_mode_pending: g.mig_mode_pending.unwrap_or(mig_mode),
        compute_mode: g.compute_mode.as_ref().map_or(0, |m| m.get_ref().0),
        ecc_mode,
        ecc_mode_pending: g
            .ecc_mode_pending
            .as_ref()
            .map_or(ecc_mode, |m| *m.get_ref()),
        lost_at_tick: g.lost_at.as_ref().map(|d| d.get_ref().0 / tick_ms),
        not_supported,
        nvlinks,
        fabric,
        mig_instances: Vec::new(),
    };
    let params = Params {
        idle_power_w: g.idle_power_w.unwrap_or(pre.idle_power_w),
        load_power_w: g.load_power_w.unwrap_or(pre.load_power_w.min(limit)),
        idle_temp: g.idle_temp.unwrap_or(pre.idle_temp),
        load_temp: g.load_temp.unwrap_or(pre.load_temp),
        fan_idle: if num_fans == 0 {
            0.0
        } else {
            pre.fan_idle.max(25.0)
        },
        fan_load: if num_fans == 0 {
            0.0
        } else {
            pre.fan_load.max(60.0)
        },
        sm_clock_idle: f64::from(g.sm_clock_idle.unwrap_or(pre.sm_clock_idle)),
        nvlink_link_kib_per_tick: tick_ms as f64 * 1_048_576.0 / 1000.0,
        mem_clock_idle: f64::from(g.mem_clock_idle.unwrap_or(pre.mem_clock_idle)),
        pcie_load_tx_kbs: pre.pcie_load_tx_kbs,
        pcie_load_rx_kbs: pre.pcie_load_rx_kbs,
        idle_pstate: pre.idle_pstate,
    };
    Some((spec, params, pre))
}

/// Check a symbol name written in a scenario; `*` is allowed where `star` is.
pub(crate) fn check_symbol(p: &mut Problems, s: &Spanned<String>, star: bool) -> bool {
    let name = s.get_ref();
    if (star && name == "*") || nvml::is_device_symbol(name) {
        return true;
    }
    let hint = crate::compile::did_you_mean(name, nvml::DEVICE_SYMBOLS.iter().copied());
    let what = if star { "`*` or " } else { "" };
    p.at(
        Some(s.span()),
        format!("unknown per-device NVML symbol `{name}`{hint}; expected {what}a name such as nvmlDeviceGetPowerUsage (the list is in SCENARIOS.md)"),
    );
    false
}

/// The behaviours a segment sets, with the metric, the unit scale and the value's span.
fn segment_metrics(seg: &RawSegment) -> Vec<(Metric, f64, RawBehaviour, std::ops::Range<usize>)> {
    let mut out = Vec::new();
    let mut add = |m: Metric, scale: f64, b: &Option<Spanned<RawBehaviour>>| {
        if let Some(b) = b {
            out.push((m, scale, *b.get_ref(), b.span()));
        }
    };
    add(Metric::UtilGpu, 1.0, &seg.util_gpu);
    add(Metric::UtilMem, 1.0, &seg.util_mem);
    add(Metric::MemUsed, MIB, &seg.mem_used_mib);
    add(Metric::MemUsed, 1.0, &seg.mem_used_bytes);
    add(Metric::Temp, 1.0, &seg.temp);
    add(Metric::Power, 1.0, &seg.power_w);
    add(Metric::Fan, 1.0, &seg.fan);
    add(Metric::SmClock, 1.0, &seg.sm_clock);
    add(Metric::MemClock, 1.0, &seg.mem_clock);
    add(Metric::PcieTx, 1.0, &seg.pcie_tx_kbs);
    add(Metric::PcieRx, 1.0, &seg.pcie_rx_kbs);
    add(Metric::TensorActive, 1.0, &seg.tensor_active);
    add(Metric::SmActive, 1.0, &seg.sm_active);
    add(Metric::SmOccupancy, 1.0, &seg.sm_occupancy);
    add(Metric::DramActive, 1.0, &seg.dram_active);
    add(Metric::RecoveryAction, 1.0, &seg.recovery_action);
    add(Metric::PcieGen, 1.0, &seg.pcie_gen);
    add(Metric::PcieWidth, 1.0, &seg.pcie_width);
    add(Metric::EccCorrected, 1.0, &seg.ecc_corrected);
    add(Metric::EccUncorrected, 1.0, &seg.ecc_uncorrected);
    add(Metric::RemappedCorr, 1.0, &seg.remapped_rows_corr);
    add(Metric::RemappedUnc, 1.0, &seg.remapped_rows_unc);
    add(Metric::RetiredSbe, 1.0, &seg.retired_pages_sbe);
    add(Metric::RetiredDbe, 1.0, &seg.retired_pages_dbe);
    add(Metric::NvlinkCrcFlit, 1.0, &seg.nvlink_crc_flit_errors);
    add(Metric::NvlinkCrcData, 1.0, &seg.nvlink_crc_data_errors);
    add(Metric::NvlinkReplay, 1.0, &seg.nvlink_replay_errors);
    add(Metric::NvlinkRecovery, 1.0, &seg.nvlink_recovery_errors);
    let konst = |v: f64| RawBehaviour::constant(v);
    if let Some(s) = &seg.pstate {
        out.push((
            Metric::Pstate,
            1.0,
            konst(f64::from(s.get_ref().0)),
            s.span(),
        ));
    }
    if let Some(s) = &seg.throttle {
        out.push((Metric::Throttle, 1.0, konst(s.get_ref().0 as f64), s.span()));
    }
    if let Some(links) = &seg.nvlink_down {
        let mask = links
            .get_ref()
            .iter()
            .filter(|&&l| l < 32)
            .fold(0u32, |m, &l| m | (1 << l));
        out.push((
            Metric::NvlinkDown,
            1.0,
            konst(f64::from(mask)),
            links.span(),
        ));
    }
    if let Some(s) = &seg.fabric_state {
        out.push((
            Metric::FabricState,
            1.0,
            konst(f64::from(s.get_ref().0)),
            s.span(),
        ));
    }
    if let Some(s) = &seg.fabric_status {
        out.push((
            Metric::FabricStatus,
            1.0,
            konst(f64::from(s.get_ref().0)),
            s.span(),
        ));
    }
    for (m, b) in [
        (Metric::RemapPending, &seg.remap_pending),
        (Metric::RemapFailure, &seg.remap_failure),
        (Metric::RetiredPending, &seg.retired_pending),
    ] {
        if let Some(b) = b {
            out.push((m, 1.0, konst(f64::from(u8::from(*b.get_ref()))), b.span()));
        }
    }
    out
}

/// Compile the timeline of a GPU whose spec is known.
pub(crate) fn compile_timeline(
    p: &mut Problems,
    raw: &RawGpu,
    spec: GpuSpec,
    params: Params,
    pre: &Preset,
    seed: u64,
    tick_ms: u64,
) -> GpuModel {
    let index = spec.index as u64;
    let mut keys = [0u64; METRIC_COUNT];
    for (i, k) in keys.iter_mut().enumerate() {
        *k = noise_key(&[seed, index, i as u64]);
    }
    let mut tracks = vec![Track::default(); METRIC_COUNT];
    for seg in &raw.timeline {
        let s = seg.get_ref();
        let from = s.from.as_ref().map_or(0, |d| d.get_ref().0 / tick_ms);
        let to = s.to.as_ref().map(|d| d.get_ref().0 / tick_ms);
        if let Some(to) = to.filter(|&to| to <= from) {
            let span = s.to.as_ref().map(|d| d.span());
            p.at(
                span,
                format!("segment `to` (tick {to}) must be after `from` (tick {from})"),
            );
            continue;
        }
        if let Some(links) = &s.nvlink_down
            && let Some(bad) = links.get_ref().iter().find(|&&l| l >= spec.nvlinks)
        {
            p.at(
                Some(links.span()),
                format!(
                    "link {bad} is not one of this GPU's {} NVLinks (0..{})",
                    spec.nvlinks,
                    spec.nvlinks.saturating_sub(1)
                ),
            );
        }
        if s.mem_used_mib.is_some() && s.mem_used_bytes.is_some() {
            p.at(
                Some(seg.span()),
                "give mem_used_mib or mem_used_bytes, not both",
            );
        }
        for (metric, scale, b, span) in segment_metrics(s) {
            let (lo, hi) = b.range();
            let (min, max) = metric.bounds();
            let max = if metric == Metric::MemUsed {
                spec.memory_total_bytes as f64 / scale
            } else {
                max
            };
            if lo < min || hi > max {
                p.at(
                    Some(span.clone()),
                    format!(
                        "value {} is outside {min}..={max} for this metric",
                        if lo < min { lo } else { hi }
                    ),
                );
                continue;
            }
            match to_signal(
                &b,
                from,
                to.map(|t| t - from),
                tick_ms,
                scale,
                keys[metric.id()],
            ) {
                Ok(sig) => tracks[metric.id()].overlay(from, to.unwrap_or(u64::MAX), sig),
                Err(e) => p.at(Some(span), e),
            }
        }
    }
    let energy = energy_track(&tracks, &params, keys[Metric::Power.id()], tick_ms);
    let mig = crate::mig::compile(
        p,
        &raw.mig,
        spec.index,
        &spec.model,
        spec.mig_mode,
        seed,
        tick_ms,
    );
    let mut spec = spec;
    spec.mig_instances = mig.iter().map(|m| m.spec.clone()).collect();
    let baseline_mib = raw
        .baseline_mib
        .unwrap_or(pre.baseline_mib + mix(seed ^ index ^ 0xBA5E) % 101);
    GpuModel {
        energy_base_mj: 3.6e9 + (mix(seed ^ index ^ 0xE1E) % 1_000_000_000) as f64,
        baseline_bytes: baseline_mib << 20,
        spec,
        params,
        tracks,
        energy,
        keys,
        procs: Vec::new(),
        mig,
    }
}

/// Power where no segment sets it: `idle + (load - idle) * util_shape / 100`, plus noise.
pub(crate) fn derived_power(util: Option<Signal>, params: &Params, key: u64) -> Signal {
    let k = (params.load_power_w - params.idle_power_w) / 100.0;
    match util {
        Some(u) => Signal {
            noise_amp: 0.012 * params.load_power_w,
            noise_key: key,
            ..u.affine(params.idle_power_w, k)
        },
        None => Signal {
            noise_amp: 0.01 * params.idle_power_w,
            noise_key: key,
            ..Signal::constant(params.idle_power_w)
        },
    }
}

fn energy_track(tracks: &[Track], params: &Params, key: u64, tick_ms: u64) -> EnergyTrack {
    let mut spans = Vec::new();
    for piece in &tracks[Metric::Power.id()].0 {
        if let Some(sig) = piece.signal {
            spans.push((piece.start, piece.end, sig));
            continue;
        }
        for u in &tracks[Metric::UtilGpu.id()].0 {
            let (a, b) = (u.start.max(piece.start), u.end.min(piece.end));
            if a < b {
                spans.push((a, b, derived_power(u.signal, params, key)));
            }
        }
    }
    EnergyTrack::new(spans, tick_ms)
}
