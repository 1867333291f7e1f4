//! `gpuwatch silence add|list|expire`: silences stored in the database; the running daemon
//! reads them at every delivery cycle, so they apply at once. Silenced alerts are still
//! recorded (alerts, outbox), just not sent.

use std::time::Duration;

use crate::clock::now_ms;
use crate::notify::matcher::Matcher;
use crate::store;

use super::format::age;
use super::{ConfigArgs, Failure, exit, fail};

#[derive(Debug, clap::Args)]
pub struct SilenceArgs {
    #[command(subcommand)]
    pub command: SilenceCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum SilenceCommand {
    /// Silence alerts matching labels, e.g. `--match rule=gpu_idle,gpu=3 --for 2h`.
    Add(AddArgs),
    /// Show the silences in force (`--all`: every silence ever made).
    List(ListArgs),
    /// End a silence now.
    Expire(ExpireArgs),
}

#[derive(Debug, clap::Args)]
pub struct AddArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Label matchers, comma-separated: name=value, name!=value, name=~regex, name!~regex.
    /// Labels: rule, severity, host, gpu, uuid, pid and the rule's own labels.
    #[arg(long = "match", short = 'm', value_name = "MATCHERS")]
    pub matchers: String,
    /// How long it lasts (e.g. 30m, 2h, 1d).
    #[arg(long = "for", value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// Why (shown by `silence list`).
    #[arg(long, default_value = "")]
    pub comment: String,
    /// Who (default: $USER).
    #[arg(long)]
    pub author: Option<String>,
}

#[derive(Debug, clap::Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Include expired and ended silences.
    #[arg(long)]
    pub all: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct ExpireArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// The silence's ID (from `silence add` or `silence list`).
    pub id: i64,
}

pub fn run(args: SilenceArgs) -> Result<(), Failure> {
    match args.command {
        SilenceCommand::Add(a) => add(a),
        SilenceCommand::List(a) => list(a),
        SilenceCommand::Expire(a) => expire(a),
    }
}

fn open_rw(config: &ConfigArgs) -> Result<store::Store, Failure> {
    let cfg = config.load().map_err(|e| fail(exit::USAGE, e))?;
    // Creates and migrates the database when needed (a silence may precede the daemon).
    let st = store::open(&cfg.database, &store::StoreConfig::new(cfg.host.clone()))?;
    crate::notify::recovered::announce(&st, &cfg);
    Ok(st)
}

fn add(a: AddArgs) -> Result<(), Failure> {
    let matchers = Matcher::parse_list(&a.matchers).map_err(|e| {
        fail(
            exit::USAGE,
            anyhow::anyhow!(
                "--match {:?}: {e}\nwrite e.g. --match rule=gpu_idle,gpu=3",
                a.matchers
            ),
        )
    })?;
    if a.duration.is_zero() {
        return Err(fail(
            exit::USAGE,
            anyhow::anyhow!("--for must be longer than 0"),
        ));
    }
    let text: Vec<String> = matchers.iter().map(ToString::to_string).collect();
    let text = text.join(",");
    let store = open_rw(&a.config)?;
    let conn = store.conn();
    let now = now_ms();
    let author = a.author.or_else(|| std::env::var("USER").ok());
    let id = store::silences::add(
        conn,
        &text,
        now,
        now + a.duration.as_millis() as i64,
        &a.comment,
        author.as_deref(),
        now,
    )?;
    println!(
        "silence {id} added: {text} for {} (until {})",
        humantime::format_duration(a.duration),
        crate::notify::text::utc(now + a.duration.as_millis() as i64)
    );
    Ok(())
}

fn list(a: ListArgs) -> Result<(), Failure> {
    let cfg = a.config.load().map_err(|e| fail(exit::USAGE, e))?;
    let conn = store::open_read_only(&cfg.database)?;
    let now = now_ms();
    let rows = store::silences::list(&conn, now, a.all)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    if rows.is_empty() {
        println!("no silences{}", if a.all { "" } else { " in force" });
        return Ok(());
    }
    println!(
        "{:>4}  {:<10} {:<36} {:<24} COMMENT",
        "ID", "STATE", "MATCHERS", "ENDS"
    );
    for s in rows {
        let state = if s.expired_ms.is_some() {
            "expired"
        } else if s.is_active(now) {
            "active"
        } else if s.ends_ms <= now {
            "ended"
        } else {
            "pending"
        };
        let ends = if s.ends_ms > now {
            format!("in {}", age(s.ends_ms - now))
        } else {
            format!("{} ago", age(now - s.ends_ms))
        };
        let by = s.created_by.map(|b| format!(" ({b})")).unwrap_or_default();
        println!(
            "{:>4}  {state:<10} {:<36} {ends:<24} {}{by}",
            s.id, s.matchers, s.comment
        );
    }
    Ok(())
}

fn expire(a: ExpireArgs) -> Result<(), Failure> {
    let store = open_rw(&a.config)?;
    if store::silences::expire(store.conn(), a.id, now_ms())? {
        println!("silence {} expired", a.id);
        Ok(())
    } else {
        Err(fail(
            exit::FAILURE,
            anyhow::anyhow!(
                "no silence {} in force (see `gpuwatch silence list --all`)",
                a.id
            ),
        ))
    }
}
