//! What gpuwatch knows about NVIDIA GPU models without asking the GPU: a built-in table of
//! thresholds and sizes, for data that lacks them (imported `nvidia-smi --query-gpu` logs
//! without `temperature.gpu.tlimit` or `power.limit`, GPUs whose NVML does not report a
//! threshold).
//!
//! Every number comes from a real capture in `../shared/data` (`nvidia-smi -q`, `-q -x` and
//! `--query-gpu` outputs of other projects) or, where marked, from the same silicon; nothing
//! is guessed. Models that are not here have no entry: rules then have no data for the
//! threshold and cannot alert for want of it (docs/RULES.md, "Thresholds").
//!
//! Semantics the captures show:
//! - Recent drivers report temperatures on the **T.Limit** scale: `GPU T.Limit Temp` (and
//!   `temperature.gpu.tlimit`) is the margin from the current temperature to T.Limit, the
//!   maximum operating temperature; the slowdown and shutdown thresholds are given relative
//!   to T.Limit (`GPU Slowdown T.Limit Temp: -2 C` = slowdown 2 °C above T.Limit). Every
//!   capture on that scale has the slowdown 2 °C above T.Limit ([`SLOWDOWN_ABOVE_TLIMIT_C`]);
//!   the shutdown offset differs per model.
//! - `memory.reserved` is what the driver and firmware keep; drivers that count it as used
//!   show about that much on a free GPU, newer ones a few MiB. It is the most memory a free
//!   GPU of the model shows as used ([`ModelSpec::reserved_mib`]).
//!
//! Invariants: lookups are by the product name NVML and nvidia-smi print, matched on its
//! words (case-insensitive, `-` and spaces separate words), so `NVIDIA A100-SXM4-80GB` and
//! `nvidia a100-sxm4-80gb` are one model and `NVIDIA A10` is not `NVIDIA A100`.

/// The slowdown threshold above T.Limit on the T.Limit scale, °C (every capture: `-2 C`).
pub const SLOWDOWN_ABOVE_TLIMIT_C: u32 = 2;

/// One GPU model's known facts. `None` where no capture says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelSpec {
    /// The product name as NVML prints it.
    pub name: &'static str,
    /// Words the product name must contain (lower case).
    words: &'static [&'static str],
    /// Words it must not contain (a sibling product).
    not: &'static [&'static str],
    pub memory_total_mib: Option<u64>,
    /// Default power limit, W.
    pub power_default_w: Option<u32>,
    /// Maximum operating temperature (T.Limit), °C.
    pub temp_max_c: Option<u32>,
    pub temp_slowdown_c: Option<u32>,
    pub temp_shutdown_c: Option<u32>,
    /// Shutdown threshold above T.Limit, °C (the model's `GPU Shutdown T.Limit Temp`, negated).
    pub shutdown_above_tlimit_c: Option<u32>,
    /// Memory reserved by the driver and firmware, MiB (the largest any captured driver
    /// reserved): the most a free GPU of the model shows as used.
    pub reserved_mib: Option<u32>,
    /// NVLinks the board has (SXM boards; PCIe boards' bridges are optional, so none).
    pub nvlinks: Option<u32>,
    /// Where the numbers come from.
    pub source: &'static str,
}

const fn spec(name: &'static str, words: &'static [&'static str]) -> ModelSpec {
    ModelSpec {
        name,
        words,
        not: &[],
        memory_total_mib: None,
        power_default_w: None,
        temp_max_c: None,
        temp_slowdown_c: None,
        temp_shutdown_c: None,
        shutdown_above_tlimit_c: None,
        reserved_mib: None,
        nvlinks: None,
        source: "",
    }
}

impl ModelSpec {
    const fn not(mut self, not: &'static [&'static str]) -> Self {
        self.not = not;
        self
    }
    const fn memory(mut self, total_mib: u64, reserved_mib: u32) -> Self {
        self.memory_total_mib = Some(total_mib);
        self.reserved_mib = Some(reserved_mib);
        self
    }
    const fn power(mut self, w: u32) -> Self {
        self.power_default_w = Some(w);
        self
    }
    /// Absolute thresholds: shutdown, slowdown, max operating (nvidia-smi's order).
    const fn temps(mut self, shutdown: u32, slowdown: u32, max: Option<u32>) -> Self {
        self.temp_shutdown_c = Some(shutdown);
        self.temp_slowdown_c = Some(slowdown);
        self.temp_max_c = max;
        self
    }
    /// Thresholds on the T.Limit scale: T.Limit and the shutdown offset above it.
    const fn tlimit(mut self, tlimit: u32, shutdown_above: u32) -> Self {
        self.temp_max_c = Some(tlimit);
        self.temp_slowdown_c = Some(tlimit + SLOWDOWN_ABOVE_TLIMIT_C);
        self.temp_shutdown_c = Some(tlimit + shutdown_above);
        self.shutdown_above_tlimit_c = Some(shutdown_above);
        self
    }
    const fn nvlinks(mut self, links: u32) -> Self {
        self.nvlinks = Some(links);
        self
    }
    const fn from(mut self, source: &'static str) -> Self {
        self.source = source;
        self
    }

    /// The short name shown in alert texts ("H100 80GB HBM3", "RTX 4090").
    pub fn short(&self) -> &'static str {
        let n = self.name.strip_prefix("NVIDIA ").unwrap_or(self.name);
        n.strip_prefix("GeForce ").unwrap_or(n)
    }

    fn matches(&self, words: &[String]) -> bool {
        self.words.iter().all(|w| words.iter().any(|x| x == w))
            && !self.not.iter().any(|w| words.iter().any(|x| x == w))
    }
}

const Q_8XH100: &str = "nvidia-smi -q, 8 x H100 80GB HBM3, driver 535.183.01 (T.Limit 86 °C on 7 of 8, 87 on one); nvidia-smi -q and --query-gpu, H100 80GB HBM3, driver 590.48.01; nvidia-smi nvlink -s, H100 80GB HBM3, driver 590.48.01 (links 0-17 at 26.562 GB/s)";

/// The table. Keep it sorted by family; every entry names its source.
#[rustfmt::skip]
const MODELS: &[ModelSpec] = &[
    spec("NVIDIA H100 80GB HBM3", &["h100", "hbm3"]).not(&["nvl", "pcie"])
        .memory(81559, 551).power(700).tlimit(86, 8).nvlinks(18).from(Q_8XH100),
    spec("NVIDIA H200", &["h200"]).not(&["nvl"])
        .memory(143771, 614).power(700).tlimit(87, 8).nvlinks(18)
        .from("nvidia-smi -q, H200, driver 590.48.01 (T.Limit 87 °C idle and loaded); nvidia-smi nvlink -s, H200, driver 590.48.01 (links 0-17 at 26.562 GB/s)"),
    spec("NVIDIA L40S", &["l40s"])
        .memory(46068, 609).power(350).tlimit(88, 5)
        .from("nvidia-smi -q, L40S, driver 595.80 (T.Limit 88 °C idle and loaded)"),
    spec("NVIDIA GeForce RTX 4090", &["rtx", "4090"])
        .memory(24564, 346).power(450).tlimit(83, 7)
        .from("nvidia-smi -q, 8 x RTX 4090, driver 535.154.05 (T.Limit 83-84 °C)"),
    spec("NVIDIA RTX 4000 SFF Ada Generation", &["rtx", "4000", "ada"])
        .memory(20475, 460).power(70).tlimit(87, 7)
        .from("nvidia-smi -q -x (schema v13), RTX 4000 SFF Ada"),
    spec("NVIDIA A100-SXM4-80GB", &["a100", "80gb"])
        .temps(92, 89, Some(85))
        .from("nvidia-smi -q -x (schema v12), A100-SXM4-80GB (a 500 W board: the default power limit differs between A100 boards, so it is not tabled)"),
    spec("NVIDIA A100-SXM4-40GB", &["a100", "40gb"]).power(400)
        .temps(92, 89, Some(85))
        .from("thresholds of the A100-SXM4-80GB capture (the same GA100 die); 400 W is the SXM4 40GB board's limit"),
    spec("NVIDIA A10G", &["a10g"])
        .memory(23028, 435).power(300).temps(98, 95, Some(88))
        .from("nvidia-smi -q -x (schema v11), A10G"),
    spec("NVIDIA A10", &["a10"])
        .memory(23028, 512).power(150).temps(101, 98, Some(91))
        .from("nvidia-smi -q, A10, driver 535.129.03"),
    spec("Tesla T4", &["t4"])
        .memory(15360, 388).power(70).temps(96, 93, Some(85))
        .from("nvidia-smi -q -x (schema v11), Tesla T4"),
    spec("NVIDIA TITAN V", &["titan", "v"])
        .memory(12288, 239).power(250).temps(100, 97, Some(91))
        .from("nvidia-smi -q, TITAN V, driver 560.35.03"),
    spec("NVIDIA GeForce RTX 3090", &["rtx", "3090"])
        .memory(24576, 316).power(350).temps(98, 95, Some(93))
        .from("nvidia-smi -q -x (schema v12), RTX 3090"),
    spec("NVIDIA GeForce RTX 3080", &["rtx", "3080"])
        .memory(10240, 397).power(320).temps(98, 95, Some(93))
        .from("nvidia-smi -q -x (schema v12, v13), RTX 3080"),
    spec("NVIDIA GeForce RTX 3060", &["rtx", "3060"])
        .memory(12288, 368).power(170).temps(98, 95, Some(93))
        .from("nvidia-smi -q -x (schema v12), RTX 3060"),
    spec("Quadro P2000", &["quadro", "p2000"])
        .memory(5120, 66).power(75).temps(104, 101, None)
        .from("nvidia-smi -q -x (schema v12), Quadro P2000"),
];

/// The largest driver reservation of any model in the table, MiB: the most memory a free
/// GPU of a model gpuwatch does not know can be expected to show as used.
pub fn largest_reserved_mib() -> u32 {
    MODELS
        .iter()
        .filter_map(|m| m.reserved_mib)
        .max()
        .unwrap_or(0)
}

/// The product name's words: lower case, split on spaces, `-` and `_`.
fn words(name: &str) -> Vec<String> {
    name.split([' ', '-', '_'])
        .filter(|w| !w.is_empty())
        .map(str::to_ascii_lowercase)
        .collect()
}

/// The table entry of the GPU named `name` (as NVML or nvidia-smi print it).
pub fn lookup(name: &str) -> Option<&'static ModelSpec> {
    let w = words(name);
    MODELS.iter().find(|m| m.matches(&w))
}

#[cfg(test)]
mod tests;
