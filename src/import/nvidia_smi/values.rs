//! Cell values of nvidia-smi CSV: NULL markers, numbers with or without units, states and
//! flags; timestamps are read by the importers' one reader of times, [`crate::import::time`].
//!
//! Invariants:
//! - Any bracketed value (`[N/A]`, `[Not Supported]`, `[Unknown Error]`, ...), `N/A` and an
//!   empty cell are NULL (`Ok(None)`), never 0 and never an error, whatever the field.
//! - A unit written after a number must be the field's unit (`MiB`, `W`, `MHz`, `%`, `C`,
//!   `us`); converted values use the store's units (bytes, mW, MHz, %, °C).

pub use crate::import::time::{Clock, EpochUnit, Zone};

/// A cell that could not be read: the message says what was expected.
pub type CellResult<T> = Result<Option<T>, String>;

/// True for the values nvidia-smi writes when it has no value.
pub fn is_null(s: &str) -> bool {
    s.is_empty() || (s.starts_with('[') && s.ends_with(']')) || s.eq_ignore_ascii_case("N/A")
}

/// The unit a numeric field is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    MiB,
    Watt,
    MHz,
    Percent,
    Celsius,
    Count,
}

impl Unit {
    fn accepts(self, u: &str) -> bool {
        match self {
            Unit::MiB => u == "MiB",
            Unit::Watt => u == "W",
            Unit::MHz => u == "MHz",
            Unit::Percent => u == "%",
            Unit::Celsius => u == "C" || u == "°C",
            Unit::Count => false,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Unit::MiB => "MiB",
            Unit::Watt => "W",
            Unit::MHz => "MHz",
            Unit::Percent => "%",
            Unit::Celsius => "C",
            Unit::Count => "no unit",
        }
    }
}

/// A number, with the field's unit or none; NULL markers give `None`.
pub fn number(s: &str, unit: Unit) -> CellResult<f64> {
    if is_null(s) {
        return Ok(None);
    }
    let (num, u) = match s.find(' ') {
        Some(i) => (&s[..i], s[i + 1..].trim()),
        None => (s, ""),
    };
    if !u.is_empty() && !unit.accepts(u) {
        return Err(format!("`{s}`: expected a value in {}", unit.name()));
    }
    let v: f64 = match num.parse::<i64>() {
        Ok(i) => i as f64,
        Err(_) => num.parse().map_err(|_| format!("`{s}` is not a number"))?,
    };
    if !v.is_finite() {
        return Err(format!("`{s}` is not a finite number"));
    }
    Ok(Some(v))
}

/// A non-negative number scaled by `scale` and rounded, as u64.
pub fn scaled_u64(s: &str, unit: Unit, scale: f64) -> CellResult<u64> {
    match number(s, unit)? {
        None => Ok(None),
        Some(v) if v < 0.0 => Err(format!("`{s}` is negative")),
        Some(v) => Ok(Some((v * scale).round() as u64)),
    }
}

/// A non-negative number scaled by `scale` and rounded, as u32.
pub fn scaled_u32(s: &str, unit: Unit, scale: f64) -> CellResult<u32> {
    match scaled_u64(s, unit, scale)? {
        None => Ok(None),
        Some(v) => u32::try_from(v)
            .map(Some)
            .map_err(|_| format!("`{s}` is out of range")),
    }
}

/// A signed number rounded to an integer (`temperature.gpu.tlimit` can be negative).
pub fn signed(s: &str, unit: Unit) -> CellResult<i64> {
    Ok(number(s, unit)?.map(|v| v.round() as i64))
}

/// `Active`/`Not Active`, `Enabled`/`Disabled`, `Yes`/`No`, `True`/`False`, `1`/`0`.
pub fn flag(s: &str) -> CellResult<bool> {
    if is_null(s) {
        return Ok(None);
    }
    let l = s.to_ascii_lowercase();
    match l.as_str() {
        "active" | "enabled" | "yes" | "true" | "1" | "on" => Ok(Some(true)),
        "not active" | "disabled" | "no" | "false" | "0" | "off" => Ok(Some(false)),
        _ => Err(format!(
            "`{s}`: expected Active/Not Active, Enabled/Disabled or Yes/No"
        )),
    }
}

/// A performance state `P0` ..= `P15`; `P32` (NVML's "unknown") is NULL.
pub fn pstate(s: &str) -> CellResult<u32> {
    if is_null(s) {
        return Ok(None);
    }
    let n = s
        .strip_prefix('P')
        .or_else(|| s.strip_prefix('p'))
        .and_then(|n| n.parse::<u32>().ok())
        .ok_or_else(|| format!("`{s}` is not a P-state (P0 .. P15)"))?;
    match n {
        0..=15 => Ok(Some(n)),
        32 => Ok(None),
        _ => Err(format!("`{s}` is not a P-state (P0 .. P15)")),
    }
}

/// A bitmask written in hex (`0x0000000000000040`) or decimal.
pub fn mask(s: &str) -> CellResult<u64> {
    if is_null(s) {
        return Ok(None);
    }
    let v = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse(),
    };
    v.map(Some)
        .map_err(|_| format!("`{s}` is not a bitmask (0x...)"))
}

/// Free text: NULL markers give `None`.
pub fn text(s: &str) -> Option<String> {
    (!is_null(s)).then(|| s.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nulls_are_null_for_every_kind() {
        for s in [
            "[N/A]",
            "[Not Supported]",
            "[Requested functionality has been deprecated]",
            "[Unknown Error]",
            "N/A",
            "",
        ] {
            assert_eq!(number(s, Unit::MiB), Ok(None), "{s}");
            assert_eq!(flag(s), Ok(None));
            assert_eq!(pstate(s), Ok(None));
            assert_eq!(mask(s), Ok(None));
            assert_eq!(text(s), None);
        }
    }

    #[test]
    fn numbers_with_and_without_units() {
        assert_eq!(
            scaled_u64("19818 MiB", Unit::MiB, 1048576.0),
            Ok(Some(19818 * 1048576))
        );
        assert_eq!(
            scaled_u64("19818", Unit::MiB, 1048576.0),
            Ok(Some(19818 * 1048576))
        );
        assert_eq!(
            scaled_u32("631.95 W", Unit::Watt, 1000.0),
            Ok(Some(631_950))
        );
        assert_eq!(scaled_u32("0 %", Unit::Percent, 1.0), Ok(Some(0)));
        assert!(scaled_u32("12 W", Unit::MiB, 1.0).is_err());
        assert!(scaled_u32("abc", Unit::Percent, 1.0).is_err());
        assert!(scaled_u32("-3", Unit::Percent, 1.0).is_err());
        assert_eq!(signed("-4", Unit::Celsius), Ok(Some(-4)));
    }

    #[test]
    fn states_and_flags() {
        assert_eq!(flag("Active"), Ok(Some(true)));
        assert_eq!(flag("Not Active"), Ok(Some(false)));
        assert_eq!(flag("Disabled"), Ok(Some(false)));
        assert!(flag("maybe").is_err());
        assert_eq!(pstate("P0"), Ok(Some(0)));
        assert_eq!(pstate("P8"), Ok(Some(8)));
        assert_eq!(pstate("P32"), Ok(None));
        assert!(pstate("X1").is_err());
        assert_eq!(mask("0x0000000000000040"), Ok(Some(0x40)));
    }
}
