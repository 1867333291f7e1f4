//! `gpuwatch import prometheus`: GPU history from the fleet's Prometheus (dcgm-exporter's
//! series), raw samples, chunk by chunk (`crate::import::prometheus`; docs/IMPORT.md).
//!
//! Exit codes: 0 samples imported (or everything already imported by an earlier run: the
//! cursor says so); 1 the source could not be read, or it had no dcgm-exporter sample in the
//! range (nothing imported); 2 a bad command line or configuration.

use super::{ConfigArgs, Failure, exit, fail};
use crate::import::prometheus::{self, PromImportError};
use crate::model::TsMs;
use crate::store;

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Example: gpuwatch import prometheus --prometheus http://prometheus:9090 --from 2026-12-01T00:00:00Z --to 2026-12-02T00:00:00Z --selector 'Hostname=~\"gpu-node-.*\"' --db incident.db; then gpuwatch replay --db incident.db"
)]
pub struct ImportPromArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// The Prometheus (or Thanos, Mimir, VictoriaMetrics query API) [default: the config's
    /// `[prometheus] url`, with its auth and TLS].
    #[arg(long, value_name = "URL")]
    pub prometheus: Option<String>,
    /// Start: RFC 3339 or unix seconds.
    #[arg(long, value_name = "TIME", value_parser = super::replay::parse_time)]
    pub from: TsMs,
    /// End (exclusive): RFC 3339 or unix seconds [default: now].
    #[arg(long, value_name = "TIME", value_parser = super::replay::parse_time)]
    pub to: Option<TsMs>,
    /// A label matcher the series must also match, e.g. `Hostname=~"gpu-node-.*"` (repeat
    /// for more).
    #[arg(long, value_name = "MATCHER")]
    pub selector: Vec<String>,
    /// Time range of one query and one transaction.
    #[arg(long, default_value = "1h", value_parser = humantime::parse_duration)]
    pub chunk: std::time::Duration,
}

pub fn run(a: ImportPromArgs) -> Result<(), Failure> {
    let cfg = a.config.load().map_err(|e| fail(exit::USAGE, e))?;
    let prom = super::job::prometheus(&cfg, a.prometheus.as_deref())?;
    let to = a.to.unwrap_or_else(crate::clock::now_ms);
    let chunk_ms = a.chunk.as_millis() as i64;
    if !(60_000..=86_400_000).contains(&chunk_ms) {
        return Err(fail(
            exit::USAGE,
            anyhow::anyhow!("--chunk must be between 1m and 24h"),
        ));
    }
    let client = crate::training::PromClient::new(&prom).map_err(|e| fail(exit::USAGE, e))?;
    let mut st_cfg = store::StoreConfig::new(cfg.host.clone());
    st_cfg.retention = cfg.retention;
    st_cfg.rollup_retention = cfg.rollup_retention;
    st_cfg.max_db_size = cfg.max_db_size;
    let mut st = store::open(&cfg.database, &st_cfg).map_err(|e| fail(exit::FAILURE, e))?;
    let source = format!("prometheus {} {}", prom.url, a.selector.join(","));
    // The job's step and loss, as the daemon would poll them (plain selectors only).
    let mut training: prometheus::TrainingQueries = Vec::new();
    let mut unread = Vec::new();
    for (role, q) in [
        (prometheus::training::STEP, &prom.queries.step),
        (prometheus::training::LOSS, &prom.queries.loss),
    ] {
        match prometheus::training::selectors(q) {
            Some(sels) => training.push((role, sels)),
            None => unread.push(format!("{role} (`{q}`)")),
        }
    }
    // A bar over the imported time, on a terminal.
    let bar = std::io::IsTerminal::is_terminal(&std::io::stderr()).then(|| {
        let b = indicatif::ProgressBar::new(((to - a.from).max(1) / 1000) as u64);
        if let Ok(style) = indicatif::ProgressStyle::with_template(
            "importing {bar:40} {percent:>3} % of the range ({msg}, {eta} left)",
        ) {
            b.set_style(style);
        }
        b
    });
    let s = prometheus::import(
        &mut st,
        &client,
        &source,
        &a.selector,
        a.from,
        to,
        chunk_ms,
        &training,
        |at| {
            if let Some(b) = &bar {
                b.set_position(((at - a.from).max(0) / 1000) as u64);
                b.set_message(format!("to {}", crate::format::utc_label(at)));
            }
        },
    )
    .map_err(|e| match e {
        PromImportError::Usage(_) => fail(exit::USAGE, e),
        _ => fail(exit::FAILURE, e),
    })?;
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    println!(
        "imported {} samples of {} GPUs on {} host(s) ({}) from {} in {} chunk(s){}",
        s.samples,
        s.gpus,
        s.hosts.len(),
        s.hosts.join(", "),
        prom.url,
        s.chunks,
        if s.resumed_chunks > 0 {
            format!(
                "; {} chunk(s) already imported by an earlier run",
                s.resumed_chunks
            )
        } else {
            String::new()
        }
    );
    if s.holders > 0 {
        println!(
            "{} holder interval(s) from the pod labels (gpu_allocations)",
            s.holders
        );
    }
    if s.training_points > 0 {
        println!(
            "{} training point(s) of the step and loss queries",
            s.training_points
        );
    }
    if s.training_unplaced > 0 {
        println!(
            "skipped {} training series that name no imported host or pod (add a Hostname, host, node or pod label)",
            s.training_unplaced
        );
    }
    for u in &unread {
        println!(
            "not read: the {u} query is not a plain selector; a subquery would resample it (write it as `metric{{labels}}` to import it)"
        );
    }
    if s.series_without_uuid > 0 {
        println!(
            "skipped {} series without a UUID label (gpuwatch keys GPUs by UUID)",
            s.series_without_uuid
        );
    }
    if !s.unmapped.is_empty() {
        println!("not stored (no gpuwatch metric): {}", s.unmapped.join(", "));
    }
    // The usage ledger of the imported range, with the pods as holders (docs/USAGE.md).
    drop(st);
    if s.samples > 0 {
        match crate::alerts::usage::account(&cfg.database, &s.hosts, (a.from, to)) {
            Ok(n) => tracing::info!(changes = n, "usage ledger accounted"),
            Err(e) => eprintln!(
                "warning: the usage ledger was not accounted ({e}); `gpuwatch usage` will not show this range"
            ),
        }
    }
    if s.samples == 0 && s.resumed_chunks == 0 {
        return Err(fail(
            exit::FAILURE,
            anyhow::anyhow!(
                "no dcgm-exporter sample in the range{}: check --from/--to and that the Prometheus scrapes dcgm-exporter (DCGM_FI_DEV_* series)",
                if a.selector.is_empty() {
                    String::new()
                } else {
                    format!(" matching {}", a.selector.join(", "))
                }
            ),
        ));
    }
    Ok(())
}
