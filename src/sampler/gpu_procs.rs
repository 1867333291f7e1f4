//! Lists a GPU's compute processes by calling `nvmlDeviceGetComputeRunningProcesses_v3`
//! ourselves, so a driver quirk can never corrupt memory.
//!
//! nvml-wrapper sizes its buffer for 24-byte entries (count + 5); some early R535 drivers
//! write 32-byte entries, which scrambles the result and, past ~15 processes, writes beyond
//! the buffer. Here the buffer always has room for `capacity` entries of the *largest* known
//! stride (32 bytes), the driver is told `capacity`, and the stride is then detected from the
//! data.
//!
//! Invariant: the driver can never write past our buffer, whatever stride it uses.

use nvml_wrapper::Device;
use nvml_wrapper::error::{NvmlError, nvml_try};

/// Return code NVML_ERROR_INSUFFICIENT_SIZE.
const INSUFFICIENT_SIZE: u32 = 7;
const MAX_STRIDE: usize = 32;
const NO_INSTANCE: u32 = 0xFFFF_FFFF;

/// One compute process as the driver reported it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawProcess {
    pub pid: u32,
    /// None when the driver does not know (NVML_VALUE_NOT_AVAILABLE, e.g. under some vGPUs).
    pub used_mem_bytes: Option<u64>,
}

/// Reads the compute processes of `device`.
pub fn compute_processes(
    device: &Device<'_>,
    nvml: &nvml_wrapper::Nvml,
) -> Result<Vec<RawProcess>, NvmlError> {
    let sym = nvml
        .lib()
        .nvmlDeviceGetComputeRunningProcesses_v3
        .as_ref()
        .map_err(|e| NvmlError::FailedToLoadSymbol(e.to_string()))?;
    // SAFETY: the handle stays valid while `device` (and thus the Nvml) lives.
    let handle = unsafe { device.handle() };
    let mut count: u32 = 0;
    // SAFETY: a null buffer with count 0 is the documented way to ask for the count.
    let rc = unsafe { sym(handle, &mut count, std::ptr::null_mut()) };
    match rc {
        0 => return Ok(Vec::new()),
        INSUFFICIENT_SIZE => {}
        other => nvml_try(other)?,
    }
    // Room for processes started between the two calls.
    let capacity = count.saturating_add(8).min(4096);
    let words = capacity as usize * MAX_STRIDE / 8;
    let mut buf: Vec<u64> = vec![0; words];
    let mut n = capacity;
    // SAFETY: buf holds `capacity` entries of the largest known stride (32 bytes), u64-aligned;
    // the driver writes at most `n` entries of its stride.
    let rc = unsafe { sym(handle, &mut n, buf.as_mut_ptr().cast()) };
    nvml_try(rc)?;
    let n = (n.min(capacity)) as usize;
    // SAFETY: viewing an initialised u64 buffer as bytes is always valid.
    let bytes: &[u8] = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast(), words * 8) };
    Ok(parse_entries(bytes, n))
}

/// Parses `n` entries, choosing the stride whose entries look valid (24 if both do).
pub fn parse_entries(bytes: &[u8], n: usize) -> Vec<RawProcess> {
    let stride = if entries_valid(bytes, n, 24) || !entries_valid(bytes, n, 32) {
        24
    } else {
        32
    };
    (0..n)
        .filter_map(|i| entry(bytes, i * stride))
        .map(|(pid, mem, _, _)| RawProcess {
            pid,
            used_mem_bytes: (mem != u64::MAX).then_some(mem),
        })
        .collect()
}

fn entry(bytes: &[u8], off: usize) -> Option<(u32, u64, u32, u32)> {
    let b = bytes.get(off..off + 24)?;
    let u32_at = |o: usize| {
        b.get(o..o + 4)
            .and_then(|s| s.try_into().ok())
            .map(u32::from_ne_bytes)
    };
    let u64_at = |o: usize| {
        b.get(o..o + 8)
            .and_then(|s| s.try_into().ok())
            .map(u64::from_ne_bytes)
    };
    Some((u32_at(0)?, u64_at(8)?, u32_at(16)?, u32_at(20)?))
}

/// An entry is plausible when its PID is non-zero and its instance ids are "none" or small.
fn entries_valid(bytes: &[u8], n: usize, stride: usize) -> bool {
    (0..n).all(|i| match entry(bytes, i * stride) {
        Some((pid, _, gi, ci)) => {
            pid != 0 && (gi == NO_INSTANCE || gi < 64) && (ci == NO_INSTANCE || ci < 64)
        }
        None => false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(stride: usize, procs: &[(u32, u64)]) -> Vec<u8> {
        let mut out = vec![0u8; (procs.len() + 8) * 32];
        for (i, (pid, mem)) in procs.iter().enumerate() {
            let o = i * stride;
            out[o..o + 4].copy_from_slice(&pid.to_ne_bytes());
            out[o + 8..o + 16].copy_from_slice(&mem.to_ne_bytes());
            out[o + 16..o + 20].copy_from_slice(&NO_INSTANCE.to_ne_bytes());
            out[o + 20..o + 24].copy_from_slice(&NO_INSTANCE.to_ne_bytes());
            // 32-byte entries carry usedGpuCcProtectedMemory (0) in the last 8 bytes.
        }
        out
    }

    #[test]
    fn standard_24_byte_entries() {
        let procs: Vec<(u32, u64)> = (1..=20).map(|i| (1000 + i, (i as u64) << 20)).collect();
        let got = parse_entries(&encode(24, &procs), procs.len());
        assert_eq!(got.len(), 20);
        assert_eq!(got[19].pid, 1020);
        assert_eq!(got[19].used_mem_bytes, Some(20 << 20));
    }

    #[test]
    fn quirky_32_byte_entries_are_detected() {
        let procs: Vec<(u32, u64)> = (1..=20).map(|i| (2000 + i, 7 << 20)).collect();
        let got = parse_entries(&encode(32, &procs), procs.len());
        let pids: Vec<u32> = got.iter().map(|p| p.pid).collect();
        assert_eq!(pids, (2001..=2020).collect::<Vec<_>>());
    }

    #[test]
    fn single_entry_is_the_same_in_both_layouts() {
        let got = parse_entries(&encode(32, &[(42, 5)]), 1);
        assert_eq!(
            got,
            vec![RawProcess {
                pid: 42,
                used_mem_bytes: Some(5)
            }]
        );
    }

    #[test]
    fn unknown_memory_is_none() {
        let got = parse_entries(&encode(24, &[(42, u64::MAX)]), 1);
        assert_eq!(got[0].used_mem_bytes, None);
    }
}
