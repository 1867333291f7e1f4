//! Data shapes: the forms in which gpuwatch sees a case. `nvml` is the live daemon on the
//! simulated NVML library; the CSV shapes are what people keep from `nvidia-smi
//! --query-gpu=... --format=csv -l N` (with or without a `--query-compute-apps` log), at 1, 5,
//! 15 or 60 s, plus the job's training step scraped every 15 s.
//!
//! Invariants: a shape's name round-trips through [`Shape::parse`]; [`Shape::caps`] is the one
//! place that says what a shape records (labels decide observability from it).

use std::fmt;

/// The column set of a CSV shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// Every field gpuwatch uses: identity, utilisation, memory, temperature and its margin,
    /// power, clocks, p-state, clock-event reasons, ECC, fans.
    Full,
    /// index, name, utilisation, memory, temperature, power.
    Basic,
    /// utilisation.gpu and memory.used of GPU 0 only (no index column: one GPU).
    Minimal,
}

/// One data shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Shape {
    Nvml,
    Csv {
        kind: Kind,
        /// A `--query-compute-apps` log comes with the GPU log.
        apps: bool,
        interval_s: u32,
    },
}

/// CSV sampling intervals, seconds.
pub const INTERVALS: [u32; 4] = [1, 5, 15, 60];

/// Shape groups, the columns of the report: each CSV group aggregates its intervals.
pub const GROUPS: [&str; 6] = [
    "nvml",
    "full+apps",
    "full",
    "basic+apps",
    "basic",
    "minimal",
];

/// What a shape records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    pub nvml: bool,
    pub temp: bool,
    pub clocks: bool,
    pub ecc: bool,
    pub processes: bool,
    /// Every GPU of the case, by index (not only GPU 0).
    pub all_gpus: bool,
}

impl Shape {
    /// Every shape: nvml, then each CSV group at each interval.
    pub fn all() -> Vec<Shape> {
        let mut out = vec![Shape::Nvml];
        for (kind, apps) in [
            (Kind::Full, true),
            (Kind::Full, false),
            (Kind::Basic, true),
            (Kind::Basic, false),
            (Kind::Minimal, false),
        ] {
            for interval_s in INTERVALS {
                out.push(Shape::Csv {
                    kind,
                    apps,
                    interval_s,
                });
            }
        }
        out
    }

    /// The shapes of the quick set.
    pub fn quick() -> Vec<Shape> {
        ["nvml", "full+apps@5s", "basic@15s", "minimal@60s"]
            .iter()
            .filter_map(|s| Shape::parse(s))
            .collect()
    }

    /// `nvml`, `full+apps@5s`, `basic@60s`, `minimal@15s`, ...
    pub fn parse(s: &str) -> Option<Shape> {
        if s == "nvml" {
            return Some(Shape::Nvml);
        }
        let (group, interval) = s.split_once('@')?;
        let interval_s: u32 = interval.strip_suffix('s')?.parse().ok()?;
        let (kind, apps) = match group {
            "full+apps" => (Kind::Full, true),
            "full" => (Kind::Full, false),
            "basic+apps" => (Kind::Basic, true),
            "basic" => (Kind::Basic, false),
            "minimal" => (Kind::Minimal, false),
            _ => return None,
        };
        (interval_s > 0).then_some(Shape::Csv {
            kind,
            apps,
            interval_s,
        })
    }

    /// The report column this shape belongs to (one of [`GROUPS`]).
    pub fn group(&self) -> &'static str {
        match self {
            Shape::Nvml => "nvml",
            Shape::Csv {
                kind: Kind::Full,
                apps: true,
                ..
            } => "full+apps",
            Shape::Csv {
                kind: Kind::Full, ..
            } => "full",
            Shape::Csv {
                kind: Kind::Basic,
                apps: true,
                ..
            } => "basic+apps",
            Shape::Csv {
                kind: Kind::Basic, ..
            } => "basic",
            Shape::Csv {
                kind: Kind::Minimal,
                ..
            } => "minimal",
        }
    }

    /// The sampling interval of a CSV shape (`None` for nvml: 1 s ticks).
    pub fn interval_s(&self) -> Option<u32> {
        match self {
            Shape::Nvml => None,
            Shape::Csv { interval_s, .. } => Some(*interval_s),
        }
    }

    pub fn caps(&self) -> Caps {
        match *self {
            Shape::Nvml => Caps {
                nvml: true,
                temp: true,
                clocks: true,
                ecc: true,
                processes: true,
                all_gpus: true,
            },
            Shape::Csv { kind, apps, .. } => Caps {
                nvml: false,
                temp: kind != Kind::Minimal,
                clocks: kind == Kind::Full,
                ecc: kind == Kind::Full,
                processes: apps,
                all_gpus: kind != Kind::Minimal,
            },
        }
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Shape::Nvml => f.write_str("nvml"),
            Shape::Csv { interval_s, .. } => write!(f, "{}@{interval_s}s", self.group()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_groups_cover_every_shape() {
        let all = Shape::all();
        assert_eq!(all.len(), 21);
        for s in &all {
            assert_eq!(Shape::parse(&s.to_string()), Some(*s), "{s}");
            assert!(GROUPS.contains(&s.group()));
        }
        assert_eq!(Shape::quick().len(), 4);
        assert_eq!(Shape::parse("basic@0s"), None);
        assert_eq!(Shape::parse("medium@5s"), None);
    }
}
