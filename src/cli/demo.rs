//! `gpuwatch demo`: the whole daemon on simulated GPUs, faster than real time.
//!
//! It loads a private copy of the fake NVML library through the same nvml-wrapper path as
//! `gpuwatch run`, drives the scenario's clock, stores everything in a database, and prints
//! what it samples: a status table every `--every` of simulated time and every event as it
//! happens.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use crate::alerts::engine::Transition;
use crate::clock::now_ms;
use crate::config::Config;
use crate::daemon::{self, DaemonParts};
use crate::model::{GpuInventory, TickBatch, TsMs};
use crate::sampler::nvml;
use crate::sim::{SimGpus, find_fake_library};
use crate::store::{self, read::GpuProcessRow, read::GpuStatusRow};

use super::{Failure, exit, fail};
use crate::views::gpus as format;

/// The scenario played when none is given.
const DEMO_SCENARIO: &str = include_str!("../../scenarios/demo.toml");

#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Simulated seconds per wall-clock second.
    #[arg(long, default_value_t = 30.0)]
    pub speed: f64,
    /// Scenario file to play (format: crates/sim/SCENARIOS.md) [default: the built-in demo].
    #[arg(long, value_name = "FILE")]
    pub scenario: Option<PathBuf>,
    /// Keep the history in this database (default: a new file in a temporary directory).
    #[arg(long, value_name = "PATH")]
    pub db: Option<PathBuf>,
    /// Print a status table every this much simulated time.
    #[arg(long, default_value = "2m", value_parser = humantime::parse_duration)]
    pub every: Duration,
    /// Stop after this much simulated time (default: the scenario's duration).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub duration: Option<Duration>,
    /// Deliver the demo's alerts through the receivers and routes of this config file's
    /// `[notify]` section (Slack, email, webhook, Alertmanager; see docs/ALERTING.md), with
    /// its `[analysis]` follow-ups (docs/ANALYSIS.md), and push its series to the file's
    /// `[[remote_write]]` targets. Group timing runs on the simulated clock.
    #[arg(long, short = 'c', value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Path of the simulated NVML library [default: next to this binary, or $GPUWATCH_FAKE_NVML].
    #[arg(long, value_name = "PATH")]
    pub fake_nvml: Option<PathBuf>,
    /// Serve /healthz, /metrics, the API and the live page on this address (loopback only;
    /// default: a free loopback port, not printed).
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<std::net::SocketAddr>,
    /// The database's size bound (`max_db_size`, e.g. "256MiB"); oldest raw samples go first.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub max_db_size: Option<u64>,
}

/// `2026-12-06 14:05:07 +00:08:00`: the UTC time (as `gpuwatch alerts` prints it), then the
/// simulated time since the demo's start.
fn stamp(ts: TsMs, start_ms: TsMs) -> String {
    let s = (ts - start_ms).max(0) / 1000;
    format!(
        "{} +{:02}:{:02}:{:02}",
        crate::format::utc_seconds(ts),
        s / 3600,
        s / 60 % 60,
        s % 60
    )
}

/// One printed line per transition: `ALERT`, a change of severity of an alert that already
/// fired (`ESCALATED`/`DOWNGRADED`, not a new alert), or `RESOLVED`.
fn alert_line(tr: &Transition, start_ms: TsMs) -> String {
    let (mark, severity) = match (tr.state, tr.severity_from, tr.active_since) {
        ("firing", Some(from), _) => (
            if tr.severity > from {
                "ESCALATED"
            } else {
                "DOWNGRADED"
            }
            .to_string(),
            format!("{} → {}", from.as_str(), tr.severity.as_str()),
        ),
        ("firing", None, _) => ("ALERT".to_string(), tr.severity.as_str().to_string()),
        (_, _, Some(since)) => (
            format!("RESOLVED after {}", crate::format::duration(tr.at - since)),
            tr.severity.as_str().to_string(),
        ),
        _ => ("RESOLVED".to_string(), tr.severity.as_str().to_string()),
    };
    let words = crate::notify::text::placement_words(&tr.labels);
    let at = if words.is_empty() {
        String::new()
    } else {
        format!(" [{}]", words.join(" · "))
    };
    format!(
        "[{}] {mark} {} ({severity}): {}{at}",
        stamp(tr.at, start_ms),
        tr.rule,
        tr.summary
    )
}

fn parse_size(s: &str) -> Result<u64, String> {
    s.trim()
        .parse::<bytesize::ByteSize>()
        .map(|b| b.0)
        .map_err(|e| format!("{e} (e.g. \"256MiB\")"))
}

pub fn run(args: DemoArgs) -> Result<(), Failure> {
    if !(args.speed > 0.0 && args.speed.is_finite()) {
        return Err(fail(
            exit::USAGE,
            anyhow::anyhow!("--speed must be a positive number"),
        ));
    }
    let fake = match &args.fake_nvml {
        Some(p) => p.clone(),
        None => find_fake_library().map_err(|e| fail(exit::USAGE, e))?,
    };
    let (text, origin) = match &args.scenario {
        Some(p) => (
            std::fs::read_to_string(p).map_err(|e| {
                fail(
                    exit::USAGE,
                    anyhow::anyhow!("cannot read {}: {e}", p.display()),
                )
            })?,
            p.display().to_string(),
        ),
        None => (DEMO_SCENARIO.to_string(), "scenarios/demo.toml".to_string()),
    };
    let sim = SimGpus::prepare(&fake, &text, &origin).map_err(|e| fail(exit::USAGE, e))?;
    let scenario = &sim.scenario;
    let tick_ms = scenario.tick_ms();
    let ticks = args.duration.map_or(scenario.duration_ticks(), |d| {
        (d.as_millis() as u64).div_ceil(tick_ms)
    });
    let sim_ms = (ticks * tick_ms) as i64;
    let wall_ms = (sim_ms as f64 / args.speed) as i64;
    // Start in the past so that the simulated clock reaches "now" when the demo ends.
    let start_ms = (now_ms() + wall_ms - sim_ms) / 1000 * 1000;

    let db = match &args.db {
        Some(p) => p.clone(),
        None => {
            let dir = tempfile::Builder::new()
                .prefix("gpuwatch-demo-")
                .tempdir()
                .map_err(|e| {
                    fail(
                        exit::FAILURE,
                        anyhow::anyhow!("cannot create a temporary directory: {e}"),
                    )
                })?
                .keep();
            dir.join("demo.db")
        }
    };
    let pace = Duration::from_secs_f64(tick_ms as f64 / 1000.0 / args.speed);
    let mut config = Config {
        host: "demo-node".into(),
        database: db.clone(),
        nvml_library: Some(sim.library_path()),
        interval: Duration::from_millis(tick_ms),
        sample_deadline: pace.mul_f64(0.8).max(Duration::from_millis(10)),
        ..Config::default()
    };
    // Ticks are held together for at most `commit_interval` of wall time: the same 5 s of
    // the scenario's time as `run`'s, so the newest stored sample stays as fresh on the
    // simulated clock as on a real daemon's (within `[http] stall_after`).
    config.commit_interval = config.commit_interval.div_f64(args.speed.max(1.0));
    config.http.listen = ([127, 0, 0, 1], 0).into();
    if let Some(addr) = args.listen {
        if !addr.ip().is_loopback() {
            return Err(fail(
                exit::USAGE,
                anyhow::anyhow!("--listen {addr}: the demo serves loopback addresses only"),
            ));
        }
        config.http.listen = addr;
    }
    if let Some(bound) = args.max_db_size {
        config.max_db_size = bound;
    }
    if let Some(path) = &args.config {
        let loaded = Config::load(path).map_err(|e| fail(exit::USAGE, e))?;
        config.notify = loaded.notify;
        config.analysis = loaded.analysis;
        config.remote_write = loaded.remote_write;
    }

    println!(
        "gpuwatch demo: scenario \"{}\", {} simulated GPUs, {} of simulated time at {}x (about {}s).",
        scenario.name(),
        scenario.gpu_count(),
        humantime::format_duration(Duration::from_millis(sim_ms as u64)),
        args.speed,
        wall_ms / 1000
    );
    println!(
        "NVML: {} (simulated) | database: {}",
        sim.library_path().display(),
        db.display()
    );
    println!(
        "Times are UTC, as the database and `gpuwatch alerts` show them, then +HH:MM:SS of simulated time since the start.\n"
    );

    // The scenario's pods, served the way a kubelet serves them: the daemon asks over the
    // pod-resources socket, exactly as on a Kubernetes node.
    let _kubelet = match sim.serve_pods() {
        Ok(Some(k)) => {
            println!(
                "kubelet: {} simulated pods on {}\n",
                scenario.pods().len(),
                k.socket.display()
            );
            k.configure(&mut config);
            Some(k)
        }
        Ok(None) => None,
        Err(e) => {
            return Err(fail(
                exit::FAILURE,
                anyhow::anyhow!("cannot serve the scenario's pods: {e}"),
            ));
        }
    };

    let handle = nvml::init(config.nvml_library.as_deref()).map_err(|e| fail(exit::NVML, e))?;
    let ticker = sim
        .ticker(start_ms, args.speed, Some(ticks))
        .map_err(|e| fail(exit::FAILURE, e))?;
    let overrides = sim.process_overrides(start_ms);
    let stop = Arc::new(AtomicBool::new(false));
    let _ = crate::clock::watch_signals(stop.clone(), None);
    let rules = crate::rules::load_configured(true, &[]).map_err(|e| fail(exit::FAILURE, e))?;
    let mut view = LiveView::new(start_ms, args.every.as_millis().max(1) as i64);
    let alert_clock = start_ms;
    let summary = daemon::run(
        DaemonParts {
            config: config.clone(),
            rules,
            alert_sink: Some(Box::new(move |tr: &Transition| {
                println!("{}", alert_line(tr, alert_clock));
            })),
            nvml: handle,
            ticker: Box::new(ticker),
            overrides,
            reload: None,
            observer: Some(Box::new(move |b: &TickBatch| view.show(b))),
        },
        stop,
    )?;

    let conn = store::open_read_only(&db)?;
    let last = store::read::last_sample_ts(&conn, None)?.unwrap_or(start_ms);
    let rows = store::read::latest_per_gpu(&conn, None, last)?;
    println!(
        "\nStored {} ticks. The database now says (`gpuwatch status --db {}`):",
        summary.ticks,
        db.display()
    );
    print!("{}", format::table(&rows, 10 * tick_ms as i64));
    // Who held the GPUs and how much of it was idle: the usage ledger of the run.
    let usage = crate::views::usage::UsageQuery {
        by: crate::usage::summary::By::Holder,
        range: Default::default(),
        host: None,
        format: crate::views::usage::Format::Table,
    };
    if let Ok(table) = crate::views::usage::output(&usage, &conn, &config.usage, last) {
        println!("\n`gpuwatch usage --by holder --db {}`:", db.display());
        print!("{table}");
    }
    if !config.notify.receivers.is_empty() {
        println!("\nAlert delivery:");
        for b in store::outbox::backlog(&conn)? {
            println!(
                "  {}: {} alert notification(s) delivered in {} message(s), {} pending, {} dead letter(s){}",
                b.receiver,
                b.delivered,
                b.messages,
                b.pending,
                b.dead,
                b.last_dead_error
                    .map(|e| format!(" (last: {e})"))
                    .unwrap_or_default()
            );
        }
    }
    Ok(())
}

/// Prints tables and events from the batches as they pass.
struct LiveView {
    start_ms: TsMs,
    every_ms: i64,
    next_table: TsMs,
    inventory: HashMap<String, GpuInventory>,
    /// pid → (name, cmdline) of processes seen at the previous tick, per GPU.
    procs: BTreeMap<(String, u32), String>,
    training: BTreeMap<String, (f64, Option<f64>)>,
}

impl LiveView {
    fn new(start_ms: TsMs, every_ms: i64) -> Self {
        Self {
            start_ms,
            every_ms,
            next_table: start_ms,
            inventory: HashMap::new(),
            procs: BTreeMap::new(),
            training: BTreeMap::new(),
        }
    }

    fn clock(&self, ts: TsMs) -> String {
        stamp(ts, self.start_ms)
    }

    fn gpu_name(&self, uuid: Option<&str>) -> String {
        match uuid.and_then(|u| self.inventory.get(u)) {
            Some(inv) => format!("GPU {}", inv.index),
            None => "host".into(),
        }
    }

    fn show(&mut self, b: &TickBatch) {
        for inv in &b.inventory {
            self.inventory.insert(inv.uuid.clone(), inv.clone());
        }
        let t = self.clock(b.ts_ms);
        for ev in &b.events {
            println!(
                "[{t}] {} {}: {}",
                self.gpu_name(ev.gpu_uuid.as_deref()),
                ev.kind,
                ev.message
            );
        }
        let mut now: BTreeMap<(String, u32), String> = BTreeMap::new();
        for p in &b.processes {
            let what = p
                .process
                .cmdline
                .clone()
                .or(p.process.name.clone())
                .unwrap_or_default();
            now.insert((p.gpu_uuid.clone(), p.process.pid), what);
        }
        for (key, what) in &now {
            if !self.procs.contains_key(key) && b.ts_ms > self.start_ms {
                println!(
                    "[{t}] {} process {} started: {what}",
                    self.gpu_name(Some(&key.0)),
                    key.1
                );
            }
        }
        for (key, what) in &self.procs {
            if !now.contains_key(key) {
                println!(
                    "[{t}] {} process {} ended: {what}",
                    self.gpu_name(Some(&key.0)),
                    key.1
                );
            }
        }
        self.procs = now;
        for p in &b.training {
            let job = p
                .labels
                .iter()
                .find(|(k, _)| k == "job")
                .map_or("job", |(_, v)| v.as_str());
            if p.labels.iter().any(|(k, _)| k == "gpu") {
                continue;
            }
            let e = self.training.entry(job.to_string()).or_insert((0.0, None));
            match p.name.as_str() {
                "training_step" => e.0 = p.value,
                "training_loss" => e.1 = Some(p.value),
                _ => {}
            }
        }
        if b.ts_ms >= self.next_table {
            self.next_table += self.every_ms;
            println!("── {t} ──────────────────────────────────────────────────────────────");
            let rows = self.rows(b);
            print!("{}", format::table(&rows, i64::MAX));
            for (job, (step, loss)) in &self.training {
                let loss = loss.map_or("-".to_string(), |l| format!("{l:.3}"));
                println!("     training job {job}: step {step:.0}, loss {loss}");
            }
        }
    }

    fn rows(&self, b: &TickBatch) -> Vec<GpuStatusRow> {
        let mut rows: Vec<GpuStatusRow> = b
            .samples
            .iter()
            .map(|s| GpuStatusRow {
                host: "demo-node".into(),
                inventory: self.inventory.get(&s.uuid).cloned().unwrap_or_default(),
                inventory_known: true,
                first_seen_ms: self.start_ms,
                last_seen_ms: b.ts_ms,
                lost_at_ms: None,
                latest: Some(s.clone()),
                age_ms: Some(0),
                processes: b
                    .processes
                    .iter()
                    .filter(|p| p.gpu_uuid == s.uuid)
                    .map(|p| GpuProcessRow {
                        pid: p.process.pid,
                        start_time_ms: p.process.start_time_ms,
                        name: p.process.name.clone(),
                        user: p.process.user.clone(),
                        used_mem_bytes: p.used_mem_bytes,
                        placement: p.process.placement.as_deref().cloned(),
                    })
                    .collect(),
                holder: None,
                recent_xids: Vec::new(),
            })
            .collect();
        rows.sort_by_key(|r| r.inventory.index);
        rows
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::rule::{Scope, Severity};

    fn transition(state: &'static str, severity: Severity, from: Option<Severity>) -> Transition {
        Transition {
            at: 1_764_189_075_000 + 8 * 60_000,
            state,
            rule: "gpu_overheating".into(),
            severity,
            subject: Default::default(),
            labels: Default::default(),
            summary: "GPU 3 hot".into(),
            description: None,
            active_since: Some(1_764_189_075_000 + 5 * 60_000),
            fired_at: None,
            gpu_id: 1,
            process_id: None,
            scope: Scope::Gpu,
            metric: None,
            severity_from: from,
        }
    }

    #[test]
    fn lines_carry_utc_and_simulated_time_and_say_a_change_of_severity() {
        let start = 1_764_189_075_000;
        let fired = alert_line(&transition("firing", Severity::Warning, None), start);
        assert_eq!(
            fired,
            "[2025-11-26 20:39:15 +00:08:00] ALERT gpu_overheating (warning): GPU 3 hot"
        );
        let up = alert_line(
            &transition("firing", Severity::Critical, Some(Severity::Warning)),
            start,
        );
        assert!(
            up.contains("] ESCALATED gpu_overheating (warning → critical): "),
            "{up}"
        );
        let down = alert_line(
            &transition("firing", Severity::Warning, Some(Severity::Critical)),
            start,
        );
        assert!(
            down.contains("] DOWNGRADED gpu_overheating (critical → warning): "),
            "{down}"
        );
        let over = alert_line(&transition("resolved", Severity::Warning, None), start);
        assert!(
            over.contains("] RESOLVED after 3m 0s gpu_overheating"),
            "{over}"
        );
    }
}
