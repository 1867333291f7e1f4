//! The `[usage]` section (docs/USAGE.md): what a GPU-hour costs per model, in which
//! currency, and the opt-in digest of the top idle holders.
//!
//! Invariants: a cost is a finite number ≥ 0; a model without a price (and no `default`) has
//! no cost (null, never 0); the digest is off unless `digest = "weekly"` or `"daily"`; its
//! time zone is an IANA name.

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

use super::raw::Checker;

/// How often the digest is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DigestPeriod {
    Daily,
    Weekly,
}

impl DigestPeriod {
    pub fn as_str(self) -> &'static str {
        match self {
            DigestPeriod::Daily => "daily",
            DigestPeriod::Weekly => "weekly",
        }
    }
}

/// When the digest is sent: after each period, at `hour` on `day` (weekly) in `zone`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Digest {
    pub period: DigestPeriod,
    pub day: chrono::Weekday,
    pub hour: u32,
    pub zone: chrono_tz::Tz,
    /// How many holders it lists.
    pub top: usize,
}

/// The validated `[usage]` section.
#[derive(Debug, Clone, PartialEq)]
pub struct UsageConfig {
    /// Price of a GPU-hour by model name (as NVML names it); `default` for the others.
    pub cost_per_gpu_hour: BTreeMap<String, f64>,
    pub default_cost: Option<f64>,
    pub currency: String,
    pub digest: Option<Digest>,
}

impl Default for UsageConfig {
    fn default() -> Self {
        Self {
            cost_per_gpu_hour: BTreeMap::new(),
            default_cost: None,
            currency: "USD".into(),
            digest: None,
        }
    }
}

impl UsageConfig {
    /// The price of a GPU-hour of `model`, if configured.
    pub fn rate(&self, model: Option<&str>) -> Option<f64> {
        model
            .and_then(|m| self.cost_per_gpu_hour.get(m))
            .copied()
            .or(self.default_cost)
    }

    /// Whether any price is configured.
    pub fn priced(&self) -> bool {
        self.default_cost.is_some() || !self.cost_per_gpu_hour.is_empty()
    }
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawUsage {
    cost_per_gpu_hour: Option<BTreeMap<String, Spanned<f64>>>,
    currency: Option<Spanned<String>>,
    digest: Option<Spanned<String>>,
    #[serde(alias = "day")]
    digest_day: Option<Spanned<String>>,
    #[serde(alias = "hour")]
    digest_hour: Option<Spanned<i64>>,
    #[serde(alias = "zone", alias = "time_zone", alias = "timezone")]
    digest_zone: Option<Spanned<String>>,
    #[serde(alias = "top")]
    digest_top: Option<Spanned<i64>>,
}

impl RawUsage {
    pub(super) fn compile(self, c: &mut Checker<'_>) -> UsageConfig {
        let mut out = UsageConfig::default();
        for (model, v) in self.cost_per_gpu_hour.unwrap_or_default() {
            let price = *v.get_ref();
            if !price.is_finite() || price < 0.0 {
                c.error(
                    v.span(),
                    format!("`usage.cost_per_gpu_hour` of {model:?} = {price} is not a price"),
                    "use a number of the currency per GPU-hour, 0 or more, e.g. 2.5",
                );
            } else if model == "default" {
                out.default_cost = Some(price);
            } else {
                out.cost_per_gpu_hour.insert(model, price);
            }
        }
        if let Some(cur) = &self.currency {
            let s = cur.get_ref().trim();
            if s.is_empty() || s.len() > 8 {
                c.error(
                    cur.span(),
                    format!("`usage.currency` = {:?} is not a currency", cur.get_ref()),
                    "use a short code, e.g. \"USD\" or \"EUR\"",
                );
            } else {
                out.currency = s.to_string();
            }
        }
        let period = match self
            .digest
            .as_ref()
            .map(|d| (d.span(), d.get_ref().as_str()))
        {
            None | Some((_, "off")) => None,
            Some((_, "weekly")) => Some(DigestPeriod::Weekly),
            Some((_, "daily")) => Some(DigestPeriod::Daily),
            Some((span, other)) => {
                c.error(
                    span,
                    format!("`usage.digest` = {other:?} is not a period"),
                    "use \"weekly\", \"daily\" or \"off\"",
                );
                None
            }
        };
        let day = match &self.digest_day {
            None => chrono::Weekday::Mon,
            Some(d) => match d.get_ref().parse::<chrono::Weekday>() {
                Ok(w) => w,
                Err(_) => {
                    c.error(
                        d.span(),
                        format!("`usage.digest_day` = {:?} is not a day", d.get_ref()),
                        "use a weekday, e.g. \"monday\" or \"mon\"",
                    );
                    chrono::Weekday::Mon
                }
            },
        };
        let hour = match &self.digest_hour {
            None => 9,
            Some(h) if (0..24).contains(h.get_ref()) => *h.get_ref() as u32,
            Some(h) => {
                c.error(
                    h.span(),
                    format!("`usage.digest_hour` = {} is not an hour", h.get_ref()),
                    "use 0 to 23 (the hour of the day in digest_zone)",
                );
                9
            }
        };
        let zone = match &self.digest_zone {
            None => chrono_tz::UTC,
            Some(z) => match z.get_ref().parse::<chrono_tz::Tz>() {
                Ok(tz) => tz,
                Err(_) => {
                    c.error(
                        z.span(),
                        format!("`usage.digest_zone` = {:?} is not a time zone", z.get_ref()),
                        "use an IANA name, e.g. \"Europe/Berlin\" or \"UTC\"",
                    );
                    chrono_tz::UTC
                }
            },
        };
        let top = match &self.digest_top {
            None => 10,
            Some(n) if (1..=100).contains(n.get_ref()) => *n.get_ref() as usize,
            Some(n) => {
                c.error(
                    n.span(),
                    format!("`usage.digest_top` = {} is out of range", n.get_ref()),
                    "use 1 to 100 holders",
                );
                10
            }
        };
        out.digest = period.map(|period| Digest {
            period,
            day,
            hour,
            zone,
            top,
        });
        out
    }
}
