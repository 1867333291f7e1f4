//! `gpuwatch silence add|list|expire`: silences stored in the database; the running daemon
//! reads them at every delivery cycle, so they apply at once. Silenced alerts are still
//! recorded (alerts, outbox), just not sent.

use std::time::Duration;

use crate::clock::now_ms;
use crate::matcher::Matcher;
use crate::store;

use super::{ConfigArgs, Failure, exit, fail};
use crate::views::gpus::age;

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
    /// Output format: `table` for people, `json` for programs.
    #[arg(long, value_enum, default_value_t)]
    pub format: ListFormat,
    /// The same as `--format json` (kept for scripts).
    #[arg(long, hide = true)]
    pub json: bool,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ListFormat {
    /// For people: one silence per line (also accepted as `text`).
    #[default]
    #[value(alias = "text")]
    Table,
    /// A JSON array of the silences.
    Json,
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
    Ok(open_rw_with(config)?.0)
}

fn open_rw_with(config: &ConfigArgs) -> Result<(store::Store, crate::config::Config), Failure> {
    let cfg = config.load().map_err(|e| fail(exit::USAGE, e))?;
    // Creates and migrates the database when needed (a silence may precede the daemon).
    let st = store::open(&cfg.database, &store::StoreConfig::new(cfg.host.clone()))?;
    crate::notify::recovered::announce(&st, &cfg);
    Ok((st, cfg))
}

/// The rule names a silence can match: the configured rules (the defaults and the config's
/// files), gpuwatch's own alerts, and every rule the database has alerts of.
fn known_rules(cfg: &crate::config::Config, conn: &rusqlite::Connection) -> Vec<String> {
    let mut names: Vec<String> =
        crate::rules::load_configured(cfg.rules.default_rules, &cfg.rules.files)
            .map(|rules| rules.into_iter().map(|r| r.name).collect())
            .unwrap_or_default();
    names.extend(crate::notify::SELF_RULES.map(str::to_string));
    if let Ok(mut stmt) = conn.prepare("SELECT DISTINCT rule FROM alert_state") {
        let stored: Vec<String> = stmt
            .query_map([], |r| r.get(0))
            .map(|rows| rows.flatten().collect())
            .unwrap_or_default();
        names.extend(stored);
    }
    names.sort();
    names.dedup();
    names
}

/// A warning for a `rule` (or `alertname`) matcher that no known rule satisfies: the silence
/// is kept (a rule may be added later), but a typo should not pass silently.
fn unknown_rule_warnings(matchers: &[Matcher], rules: &[String]) -> Vec<String> {
    use crate::matcher::Op;
    let mut out = Vec::new();
    for m in matchers
        .iter()
        .filter(|m| matches!(m.name.as_str(), "rule" | "alertname"))
        .filter(|m| matches!(m.op, Op::Eq | Op::Re))
    {
        let hit = rules.iter().any(|r| {
            m.matches(&std::collections::BTreeMap::from([(
                m.name.clone(),
                r.clone(),
            )]))
        });
        if hit {
            continue;
        }
        let hint = crate::rules::names::closest(&m.value, rules.iter().map(String::as_str))
            .map_or_else(
                || " (`gpuwatch rules check` lists the loaded rules)".to_string(),
                |c| format!(" (did you mean `{c}`?)"),
            );
        out.push(format!(
            "warning: no loaded rule is named {:?}: the silence matches nothing until one is{hint}",
            m.value
        ));
    }
    out
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
    let (store, cfg) = open_rw_with(&a.config)?;
    let conn = store.conn();
    for w in unknown_rule_warnings(&matchers, &known_rules(&cfg, conn)) {
        eprintln!("{w}");
    }
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
        crate::format::utc_label(now + a.duration.as_millis() as i64)
    );
    Ok(())
}

fn list(a: ListArgs) -> Result<(), Failure> {
    let cfg = a.config.load().map_err(|e| fail(exit::USAGE, e))?;
    let conn = store::open_read_only(&cfg.database)?;
    let now = now_ms();
    let rows = store::silences::list(&conn, now, a.all)?;
    if a.json || a.format == ListFormat::Json {
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
