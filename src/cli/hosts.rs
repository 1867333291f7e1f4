//! `gpuwatch hosts`: the hosts a database holds (`hosts list`), and `hosts merge`, which moves
//! the rows stored under other names — a Kubernetes pod's host name, new at every rollout,
//! before gpuwatch read `NODE_NAME` — under the node's name (docs/DEPLOY.md).

use crate::store::{self, hosts};

use super::{ConfigArgs, Failure, exit, fail};
use crate::views::alerts::short;

#[derive(Debug, clap::Args)]
pub struct HostsArgs {
    #[command(subcommand)]
    pub command: HostsCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum HostsCommand {
    /// Every host of the database: GPUs, first and last data.
    List(ListArgs),
    /// Move every row of the FROM hosts under --into (GPUs by UUID, processes by pid and
    /// start time, training series by name and labels), in one transaction.
    Merge(MergeArgs),
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// For people: one host per line (also accepted as `text`).
    #[default]
    #[value(alias = "text")]
    Table,
    /// A JSON array of the hosts.
    Json,
}

#[derive(Debug, clap::Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Output format: `table` for people, `json` for programs.
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Example, after a DaemonSet stored its pods' names: gpuwatch hosts merge \
    gpuwatch-x7k2p gpuwatch-b9q4m --into gpu-node-17. Safe while the daemon runs as --into \
    (its writes wait for the merge); a FROM host that wrote in the last 10 minutes is refused \
    unless --force (a daemon may still be writing under that name)."
)]
pub struct MergeArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// The hosts to merge away (see `gpuwatch hosts list`).
    #[arg(required = true, value_name = "FROM")]
    pub from: Vec<String>,
    /// The host they become (the node's name; created when the database lacks it).
    #[arg(long, value_name = "HOST")]
    pub into: String,
    /// Merge even a host that wrote in the last 10 minutes.
    #[arg(long)]
    pub force: bool,
}

pub fn run(args: HostsArgs) -> Result<(), Failure> {
    match args.command {
        HostsCommand::List(a) => list(a),
        HostsCommand::Merge(a) => merge(a),
    }
}

fn list(a: ListArgs) -> Result<(), Failure> {
    let cfg = a.config.load().map_err(|e| fail(exit::USAGE, e))?;
    let conn = store::open_read_only(&cfg.database)?;
    let rows = hosts::list(&conn)?;
    if a.format == Format::Json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    let mut cells = vec![
        ["HOST", "GPUS", "FIRST (UTC)", "LAST (UTC)"]
            .map(String::from)
            .to_vec(),
    ];
    let when = |t: Option<i64>| t.map_or_else(|| "-".to_string(), short);
    for h in &rows {
        cells.push(vec![
            h.name.clone(),
            h.gpus.to_string(),
            when(h.first_seen_ms),
            when(h.last_seen_ms),
        ]);
    }
    print!("{}", crate::views::alerts::render(&cells));
    Ok(())
}

/// Writes newer than this (wall clock) mean a daemon may still be writing under the name.
const ACTIVE_MS: i64 = 10 * 60_000;

fn merge(a: MergeArgs) -> Result<(), Failure> {
    let cfg = a.config.load().map_err(|e| fail(exit::USAGE, e))?;
    // An older file's schema brought up to date; nothing created.
    let mut conn = store::open_existing_upgraded(&cfg.database)?;
    if !a.force {
        let now = crate::clock::now_ms();
        for h in hosts::list(&conn)? {
            if a.from.contains(&h.name) && h.last_seen_ms.is_some_and(|t| now - t < ACTIVE_MS) {
                return Err(fail(
                    exit::USAGE,
                    anyhow::anyhow!(
                        "host {:?} wrote data {} ago: a daemon may still be writing under that name; stop it first, or pass --force",
                        h.name,
                        crate::views::alerts::dur(now - h.last_seen_ms.unwrap_or(now))
                    ),
                ));
            }
        }
    }
    let r = hosts::merge(&mut conn, &a.from, &a.into).map_err(|e| match e {
        hosts::MergeError::Store(e) => fail(exit::FAILURE, e),
        e => fail(exit::USAGE, e),
    })?;
    println!(
        "merged {} host(s) into {}: {} GPU(s) joined its own, {} moved; {} row(s) re-keyed, {} duplicate(s) dropped, {} live alert(s) closed",
        r.hosts,
        a.into,
        r.gpus_joined,
        r.gpus_moved,
        r.rows_moved,
        r.duplicates_dropped,
        r.alerts_closed
    );
    Ok(())
}
