//! The vocabulary of GPU management: the settings `gpu set` changes, the changes people ask
//! for, and the one text form of every value — what `gpu set` prints, what the audit stores
//! (`old_value`, `new_value`) and what the daemon's observed changes are compared with.
//!
//! Invariant: a value has exactly one text (`500 W`, `on`, `1200-1500 MHz`, `unlocked`,
//! `exclusive-process`), so an observed change and the `gpu set` row that made it compare
//! equal in SQL.

use std::fmt;

/// A setting `gpu set` can change, in the order it applies them on each GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Setting {
    /// First: without persistence mode the driver may unload between clients and forget the
    /// other settings.
    Persistence,
    PowerLimit,
    GpuLockedClocks,
    MemoryLockedClocks,
    ComputeMode,
}

impl Setting {
    /// The audit's name (`gpu_audit.setting`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Persistence => "persistence",
            Self::PowerLimit => "power_limit",
            Self::GpuLockedClocks => "gpu_locked_clocks",
            Self::MemoryLockedClocks => "memory_locked_clocks",
            Self::ComputeMode => "compute_mode",
        }
    }

    /// For people.
    pub fn label(self) -> &'static str {
        match self {
            Self::Persistence => "persistence mode",
            Self::PowerLimit => "power limit",
            Self::GpuLockedClocks => "locked clocks",
            Self::MemoryLockedClocks => "locked memory clocks",
            Self::ComputeMode => "compute mode",
        }
    }
}

/// NVML's compute modes (`exclusive-thread` can be read on old GPUs, never set).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ComputeMode {
    Default,
    ExclusiveProcess,
    Prohibited,
    #[value(skip)]
    ExclusiveThread,
}

impl ComputeMode {
    pub fn text(self) -> &'static str {
        match self {
            Self::Default => "default",
            Self::ExclusiveProcess => "exclusive-process",
            Self::Prohibited => "prohibited",
            Self::ExclusiveThread => "exclusive-thread",
        }
    }
}

/// One change asked for on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    PowerLimit { mw: u32 },
    Persistence(bool),
    LockClocks { min_mhz: u32, max_mhz: u32 },
    ResetClocks,
    LockMemoryClocks { min_mhz: u32, max_mhz: u32 },
    ResetMemoryClocks,
    ComputeMode(ComputeMode),
}

impl Change {
    pub fn setting(self) -> Setting {
        match self {
            Self::PowerLimit { .. } => Setting::PowerLimit,
            Self::Persistence(_) => Setting::Persistence,
            Self::LockClocks { .. } | Self::ResetClocks => Setting::GpuLockedClocks,
            Self::LockMemoryClocks { .. } | Self::ResetMemoryClocks => Setting::MemoryLockedClocks,
            Self::ComputeMode(_) => Setting::ComputeMode,
        }
    }

    /// The new value's text.
    pub fn text(self) -> String {
        match self {
            Self::PowerLimit { mw } => watts(mw),
            Self::Persistence(on) => on_off(on).to_string(),
            Self::LockClocks { min_mhz, max_mhz } | Self::LockMemoryClocks { min_mhz, max_mhz } => {
                mhz_range(min_mhz, max_mhz)
            }
            Self::ResetClocks | Self::ResetMemoryClocks => UNLOCKED.to_string(),
            Self::ComputeMode(m) => m.text().to_string(),
        }
    }
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.setting().label(), self.text())
    }
}

/// The new value of a clock reset: the driver's default, unlocked clocks.
pub const UNLOCKED: &str = "unlocked";

/// `500 W`, `212.5 W`: milliwatts as watts, without trailing zeros.
pub fn watts(mw: u32) -> String {
    if mw.is_multiple_of(1000) {
        format!("{} W", mw / 1000)
    } else {
        let w = format!("{:.3}", f64::from(mw) / 1000.0);
        format!("{} W", w.trim_end_matches('0').trim_end_matches('.'))
    }
}

pub fn on_off(on: bool) -> &'static str {
    if on { "on" } else { "off" }
}

/// `1200-1500 MHz`.
pub fn mhz_range(min: u32, max: u32) -> String {
    format!("{min}-{max} MHz")
}

/// Parses `--power-limit`: watts, whole or decimal (`300`, `212.5`), into milliwatts.
pub fn parse_watts(text: &str) -> Result<u32, String> {
    let t = text.trim().trim_end_matches(['W', 'w']).trim();
    match t.parse::<f64>() {
        Ok(w) if w.is_finite() && w > 0.0 && w * 1000.0 <= f64::from(u32::MAX) => {
            Ok((w * 1000.0).round() as u32)
        }
        _ => Err(format!(
            "{text:?} is not a power limit: give watts, e.g. --power-limit 300"
        )),
    }
}

/// Parses `--lock-clocks` / `--lock-memory-clocks`: `MIN,MAX` in MHz, MIN <= MAX.
pub fn parse_clock_range(text: &str) -> Result<(u32, u32), String> {
    let bad = || format!("{text:?} is not a clock range: give MIN,MAX in MHz, e.g. 1200,1500");
    let (a, b) = text.split_once(',').ok_or_else(bad)?;
    let mhz = |s: &str| {
        s.trim()
            .trim_end_matches("MHz")
            .trim()
            .parse::<u32>()
            .ok()
            .filter(|v| *v > 0)
    };
    let (min, max) = (mhz(a).ok_or_else(bad)?, mhz(b).ok_or_else(bad)?);
    if min > max {
        return Err(format!(
            "{text:?}: MIN {min} is above MAX {max}; give MIN,MAX"
        ));
    }
    Ok((min, max))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_line_values_parse_or_say_what_is_expected() {
        assert_eq!(parse_watts("300"), Ok(300_000));
        assert_eq!(parse_watts("212.5W"), Ok(212_500));
        for bad in ["0", "-5", "lots", "", "inf", "1e12"] {
            assert!(
                parse_watts(bad).unwrap_err().contains("give watts"),
                "{bad}"
            );
        }
        assert_eq!(parse_clock_range("1200, 1500"), Ok((1200, 1500)));
        assert_eq!(parse_clock_range("1200,1200"), Ok((1200, 1200)));
        assert!(
            parse_clock_range("1500,1200")
                .unwrap_err()
                .contains("above MAX")
        );
        for bad in ["1200", "a,b", "0,100", "1200-1500"] {
            assert!(
                parse_clock_range(bad).unwrap_err().contains("MIN,MAX"),
                "{bad}"
            );
        }
    }

    #[test]
    fn every_value_has_one_text() {
        assert_eq!(watts(500_000), "500 W");
        assert_eq!(watts(212_500), "212.5 W");
        assert_eq!(watts(1), "0.001 W");
        assert_eq!(Change::Persistence(false).text(), "off");
        let lock = Change::LockClocks {
            min_mhz: 1200,
            max_mhz: 1500,
        };
        assert_eq!(lock.text(), "1200-1500 MHz");
        assert_eq!(lock.to_string(), "locked clocks 1200-1500 MHz");
        assert_eq!(Change::ResetMemoryClocks.text(), "unlocked");
        assert_eq!(
            Change::ComputeMode(ComputeMode::ExclusiveProcess).text(),
            "exclusive-process"
        );
        let mut order = [
            Setting::ComputeMode,
            Setting::PowerLimit,
            Setting::Persistence,
        ];
        order.sort();
        assert_eq!(order[0], Setting::Persistence);
    }
}
