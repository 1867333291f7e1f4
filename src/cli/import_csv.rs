//! `gpuwatch import csv --map FIELD=COLUMN[:UNIT],... FILE...`: GPU logs people's own scripts
//! wrote, read through a column map by the nvidia-smi importer
//! ([`crate::import::nvidia_smi::map`]): same timestamps, units, summary and exit codes as
//! `import nvidia-smi`.

use std::path::PathBuf;

use crate::import::nvidia_smi::map::ColumnMap;
use crate::import::nvidia_smi::{Options, Zone};

use super::{ConfigArgs, Failure, exit, fail};

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Example: gpuwatch import csv --map timestamp=ts,index=gpu,utilization.gpu=util,memory.used=mem_mb --db incident.db node7.csv\nUnits other than nvidia-smi's: memory.used=mem_gb:GiB, utilization.gpu=util:ratio, power.draw=pw:kW, timestamp=t:ms (docs/IMPORT.md)."
)]
pub struct ImportCsvArgs {
    /// CSV files with a header line (comma-separated, no quoted commas).
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// The columns to read: `FIELD=COLUMN[:UNIT],...` with nvidia-smi field names, e.g.
    /// `timestamp=ts,index=gpu,utilization.gpu=util,memory.used=mem_gb:GiB`. A `timestamp`
    /// is required; `index` or `uuid` tells GPUs apart.
    #[arg(long, value_name = "MAP", required = true)]
    pub map: String,
    #[command(flatten)]
    pub config: ConfigArgs,
    /// IANA zone of wall-clock timestamps without an offset [default: this machine's zone];
    /// epoch numbers and RFC 3339 times with an offset are absolute.
    #[arg(long, value_name = "ZONE")]
    pub tz: Option<String>,
    /// Host the rows belong to [default: each file's name without extension].
    #[arg(long, value_name = "NAME")]
    pub host: Option<String>,
    /// Fail (importing nothing) on the first line that cannot be read, instead of skipping it.
    #[arg(long)]
    pub strict: bool,
}

pub fn run(args: ImportCsvArgs) -> Result<(), Failure> {
    let cfg = args.config.load().map_err(|e| fail(exit::USAGE, e))?;
    let zone = Zone::parse(args.tz.as_deref())
        .map_err(|e| fail(exit::USAGE, anyhow::anyhow!("--tz: {e}")))?;
    if args.host.as_deref().is_some_and(str::is_empty) {
        return Err(fail(
            exit::USAGE,
            anyhow::anyhow!("--host must not be empty"),
        ));
    }
    let map = ColumnMap::parse(&args.map)
        .map_err(|e| fail(exit::USAGE, anyhow::anyhow!("--map: {e}")))?;
    let opts = Options {
        zone,
        host: args.host.clone(),
        columns: None,
        strict: args.strict,
        map: Some(map),
    };
    super::import_smi::import_files(&cfg, &args.files, &opts)
}
