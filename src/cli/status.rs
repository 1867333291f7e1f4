//! `gpuwatch status`: the GPUs as the database last saw them.

use crate::clock::now_ms;
use crate::store;

use super::format;
use super::{ConfigArgs, Failure, exit, fail};

#[derive(Debug, Clone, Copy, clap::ValueEnum, Default)]
pub enum Format {
    #[default]
    Table,
    Json,
}

#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
    /// Show only this host (default: every host in the database).
    #[arg(long)]
    pub host: Option<String>,
}

pub fn run(args: StatusArgs) -> Result<(), Failure> {
    let cfg = args.config.load().map_err(|e| fail(exit::USAGE, e))?;
    let conn = store::open_read_only(&cfg.database)?;
    let now = now_ms();
    let rows = store::read::latest_per_gpu(&conn, args.host.as_deref(), now)?;
    let errors = store::read::metric_error_summary(&conn, args.host.as_deref())?;
    let stale = cfg.http.stall_after.as_millis() as i64;
    match args.format {
        Format::Table if rows.is_empty() => {
            println!("no GPUs recorded in {} yet", cfg.database.display());
        }
        Format::Table => {
            print!("{}", format::table(&rows, stale));
            if !errors.is_empty() {
                println!("\nNVML reads failing (counted, logged once):");
                for e in &errors {
                    println!(
                        "  GPU {} {}: {} ({} times, last {} ago)",
                        e.gpu_index
                            .map_or_else(|| e.error.gpu_uuid.clone(), |i| i.to_string()),
                        e.error.metric,
                        e.error.error,
                        e.error.count,
                        format::age(now - e.error.last_ms)
                    );
                }
            }
        }
        Format::Json => {
            let mut v = format::json(&rows, stale);
            for gpu in v.as_array_mut().into_iter().flatten() {
                let failing: Vec<serde_json::Value> = errors
                    .iter()
                    .filter(|e| gpu["uuid"] == e.error.gpu_uuid.as_str())
                    .map(|e| {
                        serde_json::json!({
                            "metric": e.error.metric,
                            "error": e.error.error,
                            "count": e.error.count,
                            "first_ms": e.error.first_ms,
                            "last_ms": e.error.last_ms,
                        })
                    })
                    .collect();
                gpu["read_errors"] = serde_json::Value::Array(failing);
            }
            println!("{v}");
        }
    }
    Ok(())
}
