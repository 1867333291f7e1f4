//! The NVIDIA driver's kernel-log lines that matter for XIDs, from the text of one record
//! (what follows the timestamp in any log shape):
//!
//! - `NVRM: Xid (PCI:0000:19:00): 48, pid=1248209, name=python3.10, <driver's message>` —
//!   also `pid='<unknown>', name=<unknown>`, and older drivers' `NVRM: Xid (0000:01:00): 31,
//!   Ch 0000000b, ...` without `PCI:` or the pid and name;
//! - `NVRM: GPU at PCI:0000:9b:00: GPU-509665ad-b600-ac93-3616-d754b23d636d` — which GPU sits
//!   at an address, printed when the driver reports a GPU problem.
//!
//! Invariants: anything else (other NVRM lines included) is `Ok(None)`; a line that starts an
//! XID report (`NVRM: Xid`) but cannot be read is an error with the column where reading
//! stopped, never skipped. PCI addresses compare in one normal form, [`PciAddr`].

use std::sync::LazyLock;

use regex::Regex;

/// A GPU's PCI address as `dddd:bb:dd` (domain, bus, device; lower-case hex), the kernel
/// log's form. NVML's `00000000:19:00.0` and the kernel's `0000:19:00` both normalise to
/// `0000:19:00`; the function number is dropped (the kernel log does not print it, and a GPU
/// is function 0).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PciAddr(String);

impl PciAddr {
    /// Reads `[domain:]bus:device[.function]` in hex; `None` when it is not such an address.
    pub fn parse(s: &str) -> Option<PciAddr> {
        let s = s.trim();
        let s = s.strip_prefix("PCI:").unwrap_or(s);
        let (s, function) = match s.rsplit_once('.') {
            Some((a, f)) => (a, Some(f)),
            None => (s, None),
        };
        if let Some(f) = function
            && (f.len() != 1 || !matches!(f.as_bytes()[0], b'0'..=b'7'))
        {
            return None;
        }
        let parts: Vec<&str> = s.split(':').collect();
        let (domain, bus, device) = match parts.as_slice() {
            [d, b, v] => (*d, *b, *v),
            [b, v] => ("0", *b, *v),
            _ => return None,
        };
        let hex = |t: &str, max_len: usize| {
            (!t.is_empty() && t.len() <= max_len && t.bytes().all(|c| c.is_ascii_hexdigit()))
                .then(|| u32::from_str_radix(t, 16).ok())
                .flatten()
        };
        let (d, b, v) = (hex(domain, 8)?, hex(bus, 2)?, hex(device, 2)?);
        if v > 0x1f {
            return None;
        }
        Some(PciAddr(format!("{d:04x}:{b:02x}:{v:02x}")))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for PciAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// One `NVRM: Xid` report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XidLine {
    pub pci: PciAddr,
    pub code: i64,
    /// The process the driver names; `None` for `pid='<unknown>'` or none printed.
    pub pid: Option<u32>,
    pub process: Option<String>,
    /// The record from `Xid` on, as the kernel printed it (the event's message).
    pub text: String,
}

/// What an `NVRM:` line says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Nvrm {
    Xid(XidLine),
    /// `NVRM: GPU at PCI:…: GPU-…`: the GPU with this UUID is at this address.
    GpuAt {
        pci: PciAddr,
        uuid: String,
    },
}

/// An `NVRM: Xid` line that cannot be read: where (0-based character offset in the text
/// given to [`parse`]) and what was expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what}")]
pub struct NvrmError {
    pub offset: usize,
    pub what: String,
}

static XID: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^Xid \((?:PCI:)?([0-9A-Fa-f]{1,8}:[0-9A-Fa-f]{1,2}:[0-9A-Fa-f]{1,2}(?:\.[0-7])?|[0-9A-Fa-f]{1,2}:[0-9A-Fa-f]{1,2}(?:\.[0-7])?)\): ([0-9]{1,9})\b")
        .unwrap_or_else(|e| unreachable!("the XID pattern is valid: {e}"))
});
static WHO: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^, pid=(?:'<unknown>'|<unknown>|([0-9]{1,10})), name=(<unknown>|[^,]*)")
        .unwrap_or_else(|e| unreachable!("the pid pattern is valid: {e}"))
});
static GPU_AT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^GPU at PCI:([0-9A-Fa-f:.]+): (GPU-[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12})\s*$")
        .unwrap_or_else(|e| unreachable!("the GPU-at pattern is valid: {e}"))
});

/// Reads the `NVRM:` line in `text` (the record without its timestamp; a syslog or journal
/// prefix such as `host kernel: [12.3] ` may precede `NVRM:`).
pub fn parse(text: &str) -> Result<Option<Nvrm>, NvrmError> {
    let Some(at) = text.find("NVRM: ") else {
        return Ok(None);
    };
    let body = text[at + 6..].trim_end_matches(['\r', '\n']);
    let body_offset = text[..at + 6].chars().count();
    if let Some(c) = GPU_AT.captures(body) {
        return Ok(PciAddr::parse(&c[1]).map(|pci| Nvrm::GpuAt {
            pci,
            uuid: c[2].to_string(),
        }));
    }
    if !body.starts_with("Xid ") {
        return Ok(None);
    }
    let Some(c) = XID.captures(body) else {
        return Err(NvrmError {
            offset: body_offset,
            what: format!(
                "an XID report that cannot be read: expected `Xid (PCI:dddd:bb:dd): N, ...`, found `{}`",
                body.chars().take(48).collect::<String>()
            ),
        });
    };
    let (pci_text, code_text) = (&c[1], &c[2]);
    let pci = PciAddr::parse(pci_text).ok_or_else(|| NvrmError {
        offset: body_offset + 5,
        what: format!("`{pci_text}` is not a PCI address (expected dddd:bb:dd)"),
    })?;
    let code: i64 = code_text.parse().map_err(|_| NvrmError {
        offset: body_offset + c.get(2).map_or(0, |m| m.start()),
        what: format!("`{code_text}` is not an XID number"),
    })?;
    let rest = &body[c.get(0).map_or(body.len(), |m| m.end())..];
    let (pid, process) = match WHO.captures(rest) {
        Some(w) => (
            w.get(1).and_then(|p| p.as_str().parse().ok()),
            Some(&w[2])
                .filter(|n| *n != "<unknown>")
                .map(str::to_string),
        ),
        None => (None, None),
    };
    Ok(Some(Nvrm::Xid(XidLine {
        pci,
        code,
        pid,
        process,
        text: body.to_string(),
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn xid(text: &str) -> XidLine {
        match parse(text) {
            Ok(Some(Nvrm::Xid(x))) => x,
            other => panic!("{text}: {other:?}"),
        }
    }

    #[test]
    fn pci_addresses_compare_in_one_form() {
        let kernel = PciAddr::parse("0000:19:00");
        assert_eq!(kernel.as_ref().map(PciAddr::as_str), Some("0000:19:00"));
        assert_eq!(PciAddr::parse("00000000:19:00.0"), kernel);
        assert_eq!(PciAddr::parse("PCI:0000:19:00"), kernel);
        assert_eq!(PciAddr::parse("19:00.0"), kernel);
        assert_eq!(
            PciAddr::parse("00000000:9B:00.0").map(|p| p.to_string()),
            Some("0000:9b:00".into())
        );
        assert_eq!(
            PciAddr::parse("00000001:19:00.0").map(|p| p.to_string()),
            Some("0001:19:00".into())
        );
        for bad in [
            "",
            "19",
            "zz:00:00",
            "0000:19:00.9",
            "0000:1999:00",
            "0000:19:20",
            "a:b:c:d",
        ] {
            assert_eq!(PciAddr::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn reads_the_driver_s_xid_lines() {
        let x = xid("NVRM: Xid (PCI:0000:19:00): 94, pid=1248209, name=python3.10, Ch 00000008");
        assert_eq!(x.pci.as_str(), "0000:19:00");
        assert_eq!((x.code, x.pid), (94, Some(1248209)));
        assert_eq!(x.process.as_deref(), Some("python3.10"));
        assert_eq!(
            x.text,
            "Xid (PCI:0000:19:00): 94, pid=1248209, name=python3.10, Ch 00000008"
        );
        let x = xid(
            "NVRM: Xid (PCI:0000:19:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error",
        );
        assert_eq!((x.code, x.pid, x.process), (48, None, None));
        // Older drivers: no `PCI:`, no pid or name.
        let x = xid(
            "host kernel: [  966.503025] NVRM: Xid (0000:01:00): 31, Ch 0000000b, engmask 00000120",
        );
        assert_eq!((x.pci.as_str(), x.code, x.pid), ("0000:01:00", 31, None));
        let x =
            xid("NVRM: Xid (PCI:0000:9b:00): 119, pid=2024380, name=nvidia-smi, Timeout after 6s");
        assert_eq!((x.code, x.process.as_deref()), (119, Some("nvidia-smi")));
    }

    #[test]
    fn reads_which_gpu_is_at_an_address() {
        assert_eq!(
            parse("NVRM: GPU at PCI:0000:9b:00: GPU-509665ad-b600-ac93-3616-d754b23d636d"),
            Ok(Some(Nvrm::GpuAt {
                pci: PciAddr("0000:9b:00".into()),
                uuid: "GPU-509665ad-b600-ac93-3616-d754b23d636d".into()
            }))
        );
    }

    #[test]
    fn other_lines_are_not_xids_and_broken_xids_are_errors() {
        for other in [
            "NVRM: GPU Board Serial Number: 1650124014249",
            "NVRM: Rate limiting GSP RPC error prints for GPU at PCI:0000:9b:00 (printing 1 of every 30).",
            "nvidia-peermem nv_get_p2p_free_callback:127 ERROR detected invalid context",
            "NVRM: GPU4 RPC history (CPU -> GSP):",
            "",
        ] {
            assert_eq!(parse(other), Ok(None), "{other}");
        }
        let e = parse("kernel: NVRM: Xid (PCI:0000:19:00) 48 broken").unwrap_err();
        assert_eq!(e.offset, 14, "points at `Xid`");
        assert!(
            e.what.contains("expected `Xid (PCI:dddd:bb:dd): N, ...`"),
            "{e}"
        );
        let e = parse("NVRM: Xid (PCI:0000:19:77): 48, x").unwrap_err();
        assert!(e.what.contains("`0000:19:77` is not a PCI address"), "{e}");
    }
}
