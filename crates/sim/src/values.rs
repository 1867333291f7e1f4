//! Small scenario value types with their own TOML forms: durations, behaviours, throttle
//! masks, p-states, return codes, block specs and compute modes.
//!
//! Invariants: each type checks its own form while deserialising, so a malformed value is
//! reported by toml with the value's exact `line:col`; cross-field checks happen later in
//! `compile`.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};

use crate::nvml;

/// A duration in milliseconds: `"90s"`, `"5m"`, `"1h30m"`, `"250ms"`, `"2d"`, or a bare number
/// of seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Dur(pub u64);

/// Parse `"1h30m"`-style text into milliseconds.
pub fn parse_duration(text: &str) -> Result<u64, String> {
    let t = text.trim();
    if t.is_empty() {
        return Err("empty duration".into());
    }
    let mut total: u64 = 0;
    let mut rest = t;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(format!("`{text}`: expected a number before `{rest}`"));
        }
        let number: f64 = rest[..digits]
            .parse()
            .map_err(|_| format!("`{text}`: `{}` is not a number", &rest[..digits]))?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit = rest[..unit_len].trim();
        rest = &rest[unit_len..];
        let scale = match unit {
            "ms" => 1.0,
            "s" | "" => 1_000.0,
            "m" | "min" => 60_000.0,
            "h" => 3_600_000.0,
            "d" => 86_400_000.0,
            _ => {
                return Err(format!(
                    "`{text}`: unknown unit `{unit}` (expected ms, s, m, h or d, e.g. \"1h30m\")"
                ));
            }
        };
        total = total.saturating_add((number * scale).round() as u64);
    }
    Ok(total)
}

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Dur;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(
                    "a duration such as \"90s\", \"5m\" or \"1h30m\" (a bare number is seconds)",
                )
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Dur, E> {
                u64::try_from(v)
                    .map(|s| Dur(s.saturating_mul(1000)))
                    .map_err(|_| E::custom("a duration cannot be negative"))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Dur, E> {
                Ok(Dur(v.saturating_mul(1000)))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Dur, E> {
                if v.is_finite() && v >= 0.0 {
                    Ok(Dur((v * 1000.0).round() as u64))
                } else {
                    Err(E::custom(
                        "a duration must be a finite number of seconds >= 0",
                    ))
                }
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Dur, E> {
                parse_duration(v).map(Dur).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

/// The noise-free form of a behaviour as written.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RawShape {
    Value(f64),
    Ramp(f64, f64),
    Sawtooth(f64, f64),
    /// `pulse = [low, high]`: `high` for `width` at the start of every `period`, else `low`.
    Pulse(f64, f64),
}

/// A behaviour as written: `95`, or `{ ramp = [0, 95], over = "5m", noise = 2 }`, ...
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RawBehaviour {
    pub shape: RawShape,
    pub noise: f64,
    pub over: Option<Dur>,
    pub delay: Option<Dur>,
    pub period: Option<Dur>,
    pub width: Option<Dur>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BehaviourTable {
    value: Option<f64>,
    ramp: Option<[f64; 2]>,
    sawtooth: Option<[f64; 2]>,
    pulse: Option<[f64; 2]>,
    noise: Option<f64>,
    over: Option<Dur>,
    delay: Option<Dur>,
    period: Option<Dur>,
    width: Option<Dur>,
}

const BEHAVIOUR_FORMS: &str = "a number, or a table with one of `value = N`, `ramp = [from, to]` \
     `sawtooth = [low, high]` or `pulse = [low, high]` (plus optional `noise`, `over`, \
     `delay`, `period`, `width`)";

impl BehaviourTable {
    fn check(self) -> Result<RawBehaviour, String> {
        let shape = match (self.value, self.ramp, self.sawtooth, self.pulse) {
            (Some(v), None, None, None) => RawShape::Value(v),
            (None, Some([a, b]), None, None) => RawShape::Ramp(a, b),
            (None, None, Some([a, b]), None) => RawShape::Sawtooth(a, b),
            (None, None, None, Some([a, b])) => RawShape::Pulse(a, b),
            _ => {
                return Err(format!(
                    "a behaviour needs exactly one shape: expected {BEHAVIOUR_FORMS}"
                ));
            }
        };
        let (a, b) = match shape {
            RawShape::Value(v) => (v, v),
            RawShape::Ramp(a, b) | RawShape::Sawtooth(a, b) | RawShape::Pulse(a, b) => (a, b),
        };
        if !(a.is_finite() && b.is_finite()) {
            return Err("behaviour values must be finite numbers".into());
        }
        let noise = self.noise.unwrap_or(0.0);
        if !(noise.is_finite() && noise >= 0.0) {
            return Err(format!(
                "`noise` must be a finite amplitude >= 0, got {noise}"
            ));
        }
        match shape {
            RawShape::Sawtooth(..) | RawShape::Pulse(..)
                if self.period.is_none_or(|p| p.0 == 0) =>
            {
                let name = if matches!(shape, RawShape::Pulse(..)) {
                    "pulse"
                } else {
                    "sawtooth"
                };
                return Err(format!(
                    "a {name} needs `period` (a duration > 0, e.g. \"2m\")"
                ));
            }
            RawShape::Pulse(..)
                if self
                    .width
                    .is_none_or(|w| w.0 == 0 || self.period.is_some_and(|p| w.0 >= p.0)) =>
            {
                return Err(
                    "a pulse needs `width` (a duration > 0 and shorter than `period`, e.g. \"3s\")"
                        .into(),
                );
            }
            RawShape::Sawtooth(..) | RawShape::Pulse(..) | RawShape::Value(_)
                if self.over.is_some() =>
            {
                return Err("`over` only applies to `ramp`".into());
            }
            RawShape::Ramp(..) | RawShape::Value(_) if self.period.is_some() => {
                return Err("`period` only applies to `sawtooth` and `pulse`".into());
            }
            RawShape::Value(_) | RawShape::Ramp(..) | RawShape::Sawtooth(..)
                if self.width.is_some() =>
            {
                return Err("`width` only applies to `pulse`".into());
            }
            RawShape::Ramp(..) if self.over.is_some_and(|o| o.0 == 0) => {
                return Err("a ramp's `over` must be > 0".into());
            }
            _ => {}
        }
        Ok(RawBehaviour {
            shape,
            noise,
            over: self.over,
            delay: self.delay,
            period: self.period,
            width: self.width,
        })
    }
}

impl RawBehaviour {
    pub fn constant(v: f64) -> Self {
        RawBehaviour {
            shape: RawShape::Value(v),
            noise: 0.0,
            over: None,
            delay: None,
            period: None,
            width: None,
        }
    }

    /// The extreme noise-free values the shape takes.
    pub fn range(&self) -> (f64, f64) {
        match self.shape {
            RawShape::Value(v) => (v, v),
            RawShape::Ramp(a, b) | RawShape::Sawtooth(a, b) | RawShape::Pulse(a, b) => {
                (a.min(b), a.max(b))
            }
        }
    }
}

impl<'de> Deserialize<'de> for RawBehaviour {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawBehaviour;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(BEHAVIOUR_FORMS)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<RawBehaviour, E> {
                Ok(RawBehaviour::constant(v as f64))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<RawBehaviour, E> {
                Ok(RawBehaviour::constant(v as f64))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<RawBehaviour, E> {
                if v.is_finite() {
                    Ok(RawBehaviour::constant(v))
                } else {
                    Err(E::custom("behaviour values must be finite numbers"))
                }
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<RawBehaviour, A::Error> {
                let table =
                    BehaviourTable::deserialize(de::value::MapAccessDeserializer::new(map))?;
                table.check().map_err(de::Error::custom)
            }
        }
        d.deserialize_any(V)
    }
}

/// A throttle-reason bitmask: an integer (`0x48`), a name (`"hw_thermal"`) or a list of names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Throttle(pub u64);

fn throttle_bit<E: de::Error>(name: &str) -> Result<u64, E> {
    nvml::THROTTLE_NAMES
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, b)| *b)
        .or_else(|| name.eq_ignore_ascii_case("none").then_some(0))
        .ok_or_else(|| {
            let names: Vec<&str> = nvml::THROTTLE_NAMES.iter().map(|(n, _)| *n).collect();
            E::custom(format!(
                "unknown throttle reason `{name}`; expected one of none, {}",
                names.join(", ")
            ))
        })
}

impl<'de> Deserialize<'de> for Throttle {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Throttle;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(
                    "a bitmask (e.g. 0x40) or reason names (e.g. [\"sw_thermal\", \"hw_thermal\"])",
                )
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Throttle, E> {
                u64::try_from(v)
                    .ok()
                    .filter(|v| v & !nvml::throttle::ALL == 0)
                    .map(Throttle)
                    .ok_or_else(|| {
                        E::custom(format!("throttle mask {v:#x} has bits outside 0x1FF"))
                    })
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Throttle, E> {
                throttle_bit(v).map(Throttle)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Throttle, A::Error> {
                let mut mask = 0;
                while let Some(name) = seq.next_element::<String>()? {
                    mask |= throttle_bit::<A::Error>(&name)?;
                }
                Ok(Throttle(mask))
            }
        }
        d.deserialize_any(V)
    }
}

/// A performance state: `0`..`15` or `"P0"`..`"P15"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pstate(pub u32);

impl<'de> Deserialize<'de> for Pstate {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Pstate;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a p-state 0..15 or \"P0\"..\"P15\"")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Pstate, E> {
                match u32::try_from(v) {
                    Ok(p) if p <= 15 => Ok(Pstate(p)),
                    _ => Err(E::custom(format!("p-state {v} is outside 0..15"))),
                }
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Pstate, E> {
                let n = v.strip_prefix('P').or_else(|| v.strip_prefix('p'));
                match n.and_then(|n| n.parse::<u32>().ok()) {
                    Some(p) if p <= 15 => Ok(Pstate(p)),
                    _ => Err(E::custom(format!("`{v}`: expected \"P0\"..\"P15\""))),
                }
            }
        }
        d.deserialize_any(V)
    }
}

/// An NVML return code: a name (`"GPU_IS_LOST"`, `"NVML_ERROR_TIMEOUT"`) or a number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReturnCode(pub u32);

impl<'de> Deserialize<'de> for ReturnCode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = ReturnCode;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an NVML return code name such as \"GPU_IS_LOST\" or a number")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<ReturnCode, E> {
                match u32::try_from(v) {
                    Ok(c) if c != 0 => Ok(ReturnCode(c)),
                    _ => Err(E::custom(format!(
                        "`{v}` is not an NVML error code (expected 1..=999)"
                    ))),
                }
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ReturnCode, E> {
                match nvml::return_code(v) {
                    Some(0) => Err(E::custom(
                        "SUCCESS is not an error; remove the fault instead",
                    )),
                    Some(c) => Ok(ReturnCode(c)),
                    None => {
                        let names: Vec<&str> =
                            nvml::RETURN_CODES.iter().skip(1).map(|(_, n)| *n).collect();
                        Err(E::custom(format!(
                            "unknown NVML error `{v}`; expected one of {}",
                            names.join(", ")
                        )))
                    }
                }
            }
        }
        d.deserialize_any(V)
    }
}

/// A fabric registration state (`nvmlGpuFabricState_t`): `"not_started"` (1),
/// `"in_progress"` (2) or `"completed"` (3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FabricState(pub u32);

impl<'de> Deserialize<'de> for FabricState {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        match name.as_str() {
            "not_started" => Ok(FabricState(1)),
            "in_progress" => Ok(FabricState(2)),
            "completed" => Ok(FabricState(3)),
            _ => Err(de::Error::custom(format!(
                "unknown fabric state `{name}`; expected \"not_started\", \"in_progress\" or \"completed\""
            ))),
        }
    }
}

/// How long a faulty call blocks, in wall time: a duration or `"forever"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockSpec {
    For(Dur),
    Forever,
}

impl<'de> Deserialize<'de> for BlockSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = BlockSpec;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a wall-clock duration such as \"3s\", or \"forever\"")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<BlockSpec, E> {
                u64::try_from(v)
                    .map(|s| BlockSpec::For(Dur(s.saturating_mul(1000))))
                    .map_err(|_| E::custom("a block duration cannot be negative"))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<BlockSpec, E> {
                if v.trim().eq_ignore_ascii_case("forever") {
                    Ok(BlockSpec::Forever)
                } else {
                    parse_duration(v)
                        .map(|ms| BlockSpec::For(Dur(ms)))
                        .map_err(|e| E::custom(format!("{e}; or \"forever\"")))
                }
            }
        }
        d.deserialize_any(V)
    }
}

/// A compute mode by name, kept as NVML's `nvmlComputeMode_t` number: `"default"` 0,
/// `"exclusive_thread"` 1 (an old drivers' mode: nvml.h marks it "support removed", and
/// setting it is refused), `"prohibited"` 2, `"exclusive_process"` 3. Case and `-` for `_` do
/// not matter (`"Exclusive_Process"`, `"exclusive-process"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ComputeMode(pub u32);

impl<'de> Deserialize<'de> for ComputeMode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        match text.trim().to_ascii_lowercase().replace('-', "_").as_str() {
            "default" => Ok(ComputeMode(0)),
            "exclusive_thread" => Ok(ComputeMode(1)),
            "prohibited" => Ok(ComputeMode(2)),
            "exclusive_process" => Ok(ComputeMode(3)),
            _ => Err(de::Error::custom(format!(
                "unknown compute mode `{text}`; expected one of default, exclusive_process, prohibited, exclusive_thread"
            ))),
        }
    }
}

/// One GPU index or a list of them (`gpu = 0` / `gpus = [0, 1]` accept either form).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuList(pub Vec<i64>);

impl<'de> Deserialize<'de> for GpuList {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = GpuList;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a GPU index or a list of GPU indices")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<GpuList, E> {
                Ok(GpuList(vec![v]))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<GpuList, A::Error> {
                let mut out = Vec::new();
                while let Some(v) = seq.next_element::<i64>()? {
                    out.push(v);
                }
                Ok(GpuList(out))
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90s"), Ok(90_000));
        assert_eq!(parse_duration("5m"), Ok(300_000));
        assert_eq!(parse_duration("1h30m"), Ok(5_400_000));
        assert_eq!(parse_duration("250ms"), Ok(250));
        assert_eq!(parse_duration("1.5m"), Ok(90_000));
        assert_eq!(parse_duration("2d"), Ok(172_800_000));
        assert_eq!(parse_duration("0"), Ok(0));
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("m").is_err());
        assert!(parse_duration("").is_err());
    }
}
