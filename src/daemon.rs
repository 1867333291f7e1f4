//! The daemon: wires sampler → store writer, serves HTTP, and shuts down cleanly.
//!
//! Threads and tasks:
//! - the **sampling thread** (this module's loop) waits for the ticker, asks the sampler for a
//!   batch (bounded by the sample deadline) and hands it to the store writer;
//! - the **NVML lanes** (one, unless a call stalls) and one **event thread** (in
//!   [`crate::sampler`]), and the **kernel-log thread** ([`crate::kmsg`]) that sends its XIDs
//!   on the event thread's channel;
//! - the **store writer thread** (in [`crate::store`]) owns the write connection and runs
//!   the rule evaluation ([`crate::alerts::evaluator`]) after each committed tick;
//! - a small **tokio runtime** serves HTTP and polls the training metrics
//!   ([`crate::training`]);
//! - the **sender thread** (in [`crate::notify::sender`]) that delivers the outbox;
//! - the **remote-write thread** ([`crate::remote_write`]), the **kubelet watcher** on
//!   Kubernetes nodes ([`crate::attribution`]) and, for `run` and `demo`, the **signal
//!   thread** ([`crate::clock`]).
//!
//! Invariants: one daemon per database (`run` holds the store's [`store::DaemonLock`] from
//! before it opens the database until it returns; a second one is refused at once); stopping
//! (`stop` set by SIGINT/SIGTERM or the caller) ends the loop within a tick, then every batch already produced is written before `run` returns; nothing in the
//! loop waits on NVML longer than the deadline or on the network at all.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::clock::Ticker;
use crate::config::Config;
use crate::model::{SampleStatus, TickBatch};
use crate::sampler::nvml::NvmlHandle;
use crate::sampler::procs::ProcessOverrides;
use crate::sampler::{Sampler, SamplerConfig, SamplerError};
use crate::store::{self, StoreConfig, StoreError};
use crate::telemetry::Health;

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("{0}")]
    Store(#[from] StoreError),
    #[error("{0}")]
    Sampler(#[from] SamplerError),
    #[error(
        "cannot listen on {addr}: {source} (set [http] listen to a free address, or enabled = false)"
    )]
    Listen {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot start the store writer: {0}")]
    Thread(std::io::Error),
    #[error("cannot start the training metrics fetcher: {0}")]
    Training(#[from] crate::training::FetchError),
    #[error("cannot start the runtime: {0}")]
    Runtime(std::io::Error),
    #[error("{0} (set [http] token_env or token_file to a readable token)")]
    Token(String),
    #[error("{0} (fix [http] tls_cert_file / tls_key_file)")]
    Tls(String),
}

/// The page cache of the daemon's writer connection, in KiB.
const WRITER_CACHE_KIB: i64 = 1024;

/// Called with every batch after it was handed to the writer (the demo prints from it).
pub type BatchObserver = Box<dyn FnMut(&TickBatch) + Send>;

/// Everything `run` needs; tests and the demo build it with a simulated ticker.
pub struct DaemonParts {
    pub config: Config,
    /// The rules to evaluate (already loaded and checked).
    pub rules: Vec<crate::rules::rule::Rule>,
    /// Called with every alert transition (besides the log line).
    pub alert_sink: Option<crate::alerts::evaluator::TransitionSink>,
    /// How to reload the rules when asked (SIGHUP).
    pub reload: Option<crate::alerts::evaluator::Reload>,
    pub nvml: NvmlHandle,
    pub ticker: Box<dyn Ticker>,
    pub overrides: ProcessOverrides,
    pub observer: Option<BatchObserver>,
}

/// What a run did, for logs and tests.
#[derive(Debug, Clone, Default)]
pub struct RunSummary {
    pub ticks: u64,
    pub gpus: usize,
    pub http_addr: Option<std::net::SocketAddr>,
}

/// The kubelet watcher, when `[kubernetes] enabled` asks for it (`"auto"`: when the
/// pod-resources socket exists at start).
fn start_kubelet(
    config: &Config,
    stop: &Arc<AtomicBool>,
) -> Option<crate::attribution::kubelet::watch::KubeletView> {
    use crate::attribution::kubelet::watch::{self, FIRST_ANSWER_WAIT};
    use crate::config::Kubelet;
    let k = &config.kubernetes;
    let socket = &k.pod_resources_socket;
    let unused = || {
        if k.kubelet_pods.is_some() {
            tracing::warn!(
                "[kubernetes] kubelet_pods is set but the kubelet's pod-resources API is not read (enabled = false, or no socket): it names the pods whose owners /pods tells"
            );
        }
    };
    let required = match k.enabled {
        Kubelet::Off => {
            unused();
            return None;
        }
        Kubelet::Auto if !socket.exists() => {
            tracing::debug!(socket = %socket.display(), "no kubelet pod-resources socket: not a Kubernetes node");
            unused();
            return None;
        }
        Kubelet::Auto => false,
        Kubelet::On => true,
    };
    tracing::info!(socket = %socket.display(), "reading GPU allocations from the kubelet");
    match watch::spawn(
        socket.clone(),
        required,
        config.kubernetes.kubelet_pods.clone(),
        stop.clone(),
    ) {
        Ok(view) => {
            // Once, before the first tick: the first samples and alerts carry their pods.
            if !view.wait_first_answer(FIRST_ANSWER_WAIT) {
                tracing::warn!(socket = %socket.display(), wait = ?FIRST_ANSWER_WAIT, "the kubelet has not answered yet; sampling starts, pod labels follow when it answers");
            }
            Some(view)
        }
        Err(e) => {
            tracing::error!(error = %e, "cannot start the kubelet client; pods come from cgroups only");
            None
        }
    }
}

/// The kernel log to follow for XIDs, if any: `[xid] kmsg_path`, or `/dev/kmsg` for real
/// GPUs (simulated ones have nothing in the host's kernel log).
fn kernel_log_path(x: &crate::config::XidConfig, simulated: bool) -> Option<std::path::PathBuf> {
    match (&x.kmsg_path, x.kernel_log, simulated) {
        (_, false, _) => None,
        (Some(p), true, _) => Some(p.clone()),
        (None, true, false) => Some(crate::config::DEFAULT_KMSG_PATH.into()),
        (None, true, true) => None,
    }
}

/// Runs until `stop` is set or the ticker ends. Blocks the calling thread.
pub fn run(parts: DaemonParts, stop: Arc<AtomicBool>) -> Result<RunSummary, DaemonError> {
    let DaemonParts {
        config,
        rules,
        alert_sink,
        reload,
        nvml,
        mut ticker,
        overrides,
        mut observer,
    } = parts;
    // One daemon per database: held until `run` returns (the kernel releases it on any exit).
    let lock = store::DaemonLock::acquire(&config.database)?;
    let mut store = store::open_daemon(
        &config.database,
        &StoreConfig {
            retention: config.retention,
            rollup_retention: config.rollup_retention,
            max_db_size: config.max_db_size,
            host: config.host.clone(),
        },
        &lock,
    )?;
    // Room to go on writing (deleting the oldest samples) when the disk fills up.
    store.keep_reserve();
    // Tick times go on after the newest stored tick, even if the wall clock stepped back
    // while the daemon was stopped.
    if let Some(newest) = store.host_last_seen_ms()? {
        crate::clock::steps::not_before(newest);
    }
    // A damaged database moved aside at this start: the self alert, through the outbox.
    crate::notify::recovered::announce(&store, &config);
    // Kernel-log history up to the newest XID already stored is not stored again.
    let xids_stored_until = store::events::newest_xid_ms(store.conn(), &config.host)?;
    let health = Health::new(config.http.stall_after);
    health.set_sample_clock(ticker.clock());
    let eval_stop = Arc::new(AtomicBool::new(false));
    // The rules run on the writer thread after each commit; they wake the sender when they
    // queued notifications (no polling).
    let outbox_bell = Arc::new(tokio::sync::Notify::new());
    // Also without rules: the usage ledger is kept on the same path.
    let evaluator = {
        let bell = outbox_bell.clone();
        Some(crate::alerts::evaluator::after_commit(
            config.database.clone(),
            rules,
            crate::alerts::engine::EngineOptions {
                staleness_ms: 3 * ticker.interval().as_millis() as i64,
                eval_every_ms: config
                    .rules
                    .eval_interval
                    .map_or(0, |d| d.as_millis() as i64),
                job_label: config.fleet.job_label.clone(),
                xid_overrides: config.xid.overrides.clone(),
            },
            eval_stop.clone(),
            crate::alerts::evaluator::Outputs {
                sink: alert_sink.unwrap_or_else(|| Box::new(|_| {})),
                reload,
                router: crate::notify::route::Router::new(&config.notify)
                    .multi_node(config.fleet.multi_node),
                wake: Some(Box::new(move || bell.notify_one())),
                health: Some(health.clone()),
                usage_host: Some(config.host.clone()),
                usage_config: config.usage.clone(),
            },
        ))
    };
    // The writer touches the newest pages of a few tables (and the rules read the same): a
    // 1 MB cache holds them; SQLite's 2 MB default filled with the history read at start.
    store.set_cache_kib(WRITER_CACHE_KIB)?;
    let writer = store::WriterHandle::spawn_with(
        store,
        store::WRITER_QUEUE_CAPACITY,
        config.commit_interval,
        evaluator,
    )
    .map_err(DaemonError::Thread)?;
    // Remediation (`[remediation]` only): its own thread, deciding from the stored alerts and
    // verdicts, writing only its log.
    let remediate_stop = Arc::new(AtomicBool::new(false));
    let remediator = crate::remediate::watch::spawn(&config, remediate_stop.clone())
        .map_err(DaemonError::Thread)?;
    // Alert delivery: its own thread, reading the outbox the rules thread fills.
    let notify_stop = Arc::new(AtomicBool::new(false));
    let sender = crate::notify::sender::spawn(crate::notify::sender::SenderParts {
        db: config.database.clone(),
        config: config.notify.clone(),
        host: config.host.clone(),
        now: ticker.clock(),
        stop: notify_stop.clone(),
        history: config.rollup_retention,
        bell: outbox_bell.clone(),
        wall_clock: !ticker.simulated(),
        analyst: Some(Arc::new(crate::analysis::followup::Analyst::new(
            config.database.clone(),
            config.analysis.clone(),
        ))),
    })
    .map_err(DaemonError::Thread)?;

    let shared_config = Arc::new(config.clone());
    let scraper = crate::http::metrics::SharedScraper::default();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("gpuwatch-http")
        .enable_all()
        .build()
        .map_err(DaemonError::Runtime)?;
    let (http_stop_tx, http_stop_rx) = tokio::sync::oneshot::channel::<()>();
    let mut summary = RunSummary::default();
    if config.http.enabled {
        // The token and the certificate first: a listener that could not check requests
        // or speak TLS never opens.
        let api = crate::http::Api::new(health.clone(), shared_config.clone(), scraper.clone())
            .map_err(DaemonError::Token)?;
        let tls = match &config.http.tls {
            Some((cert, key)) => {
                Some(crate::http::tls::acceptor(cert, key).map_err(DaemonError::Tls)?)
            }
            None => None,
        };
        let addr = config.http.listen;
        let listener = runtime
            .block_on(crate::http::bind(addr))
            .map_err(|source| DaemonError::Listen { addr, source })?;
        summary.http_addr = listener.local_addr().ok();
        tracing::info!(addr = ?summary.http_addr, "serving /metrics, /api/v1 and the live page");
        runtime.spawn(async move {
            let shutdown = async {
                let _ = http_stop_rx.await;
            };
            if let Err(e) = crate::http::serve(listener, tls, api, shutdown).await {
                tracing::error!(error = %e, "HTTP server failed");
            }
        });
    }

    // Remote write: its own thread, reading the store like a scrape, pushing from a queue.
    let push_stop = Arc::new(AtomicBool::new(false));
    let push_bell = Arc::new(tokio::sync::Notify::new());
    let pusher = crate::remote_write::spawn(crate::remote_write::Parts {
        config: shared_config.clone(),
        health: health.clone(),
        stop: push_stop.clone(),
        bell: push_bell.clone(),
        scraper: scraper.clone(),
    })
    .map_err(DaemonError::Thread)?;

    // Training metrics from Prometheus: polled on the runtime, written through the writer,
    // read by the rules thread like everything else.
    let (fetch_stop_tx, fetch_stop_rx) = tokio::sync::oneshot::channel::<()>();
    let fetcher = match (&config.prometheus, writer.training_sender()) {
        (Some(p), Some(tx)) => {
            let f = crate::training::TrainingFetcher::new(p, &config.host)?;
            tracing::info!(url = %p.url, "polling training metrics");
            let shutdown = async {
                let _ = fetch_stop_rx.await;
            };
            Some(f.spawn(
                runtime.handle(),
                crate::clock::now_ms,
                move |w| {
                    let _ = tx.send(w);
                },
                shutdown,
            ))
        }
        _ => None,
    };

    let simulated = overrides.simulated;
    let mut sampler = Sampler::start(
        &nvml,
        SamplerConfig {
            deadline: config.sample_deadline,
            inventory_interval: config.inventory_interval,
            processes: config.processes.enabled,
            redact_patterns: config.processes.redact_patterns.clone(),
            startup_timeout: config.sample_deadline.max(Duration::from_secs(5)),
            proc_root: config.processes.proc_root.clone(),
            pod_logs_dir: config.kubernetes.pod_logs_dir.clone(),
            first_probe: config.lost_probe_after,
        },
        overrides,
    )?;
    summary.gpus = sampler.gpu_count();
    if let Some(path) = kernel_log_path(&config.xid, simulated) {
        crate::kmsg::spawn(
            crate::kmsg::Follow {
                path,
                stored_until_ms: xids_stored_until,
            },
            sampler.event_sender(),
            stop.clone(),
        );
    }
    health.set_xid_watch(sampler.xid_watch());
    let mut holders = crate::attribution::holders::Holders::new(start_kubelet(&config, &stop));
    health
        .gpus
        .store(sampler.gpu_count() as u32, Ordering::Relaxed);
    tracing::info!(gpus = sampler.gpu_count(), interval = ?ticker.interval(), db = %config.database.display(), "sampling");

    while let Some((tick, at)) = ticker.next_due(&stop) {
        let timing = crate::sampler::Timing {
            at,
            next_at: at.map(|at| at + ticker.interval()),
        };
        let started = timing.start();
        let Some(mut batch) = sampler.tick_at(tick.ts_ms, timing, &stop) else {
            break;
        };
        batch.training = tick.training;
        holders.apply(&mut batch);
        let gaps = batch
            .samples
            .iter()
            .filter(|s| s.status == SampleStatus::DeadlineMissed)
            .count();
        let lost = batch
            .samples
            .iter()
            .filter(|s| s.status == SampleStatus::Lost)
            .count();
        let sampled = batch
            .samples
            .iter()
            .filter(|s| s.status == SampleStatus::Ok)
            .count();
        let batch_progress = sampled > 0 || lost == batch.samples.len();
        health.gaps.fetch_add(gaps as u64, Ordering::Relaxed);
        health.gpus_lost.store(lost as u32, Ordering::Relaxed);
        for ev in &batch.events {
            tracing::warn!(kind = %ev.kind, gpu = ?ev.gpu_uuid, code = ?ev.code, "{}", ev.message);
        }
        if let Some(obs) = observer.as_mut() {
            obs(&batch);
        }
        if writer.send_tick(batch, ticker.interval()).is_err() {
            health.write_errors.fetch_add(1, Ordering::Relaxed);
        }
        health.tick_seconds.observe(started.elapsed());
        health.tick_done(tick.ts_ms, batch_progress);
        summary.ticks += 1;
    }

    tracing::info!(ticks = summary.ticks, "stopping: flushing the store");
    drop(sampler);
    let _ = http_stop_tx.send(());
    let _ = fetch_stop_tx.send(());
    if let Some(f) = fetcher {
        let _ = runtime.block_on(f);
    }
    // Every tick produced is written and evaluated; from here a failing alert save gives up
    // after a few tries instead of holding the shutdown.
    let _ = writer.flush();
    eval_stop.store(true, Ordering::Relaxed);
    remediate_stop.store(true, Ordering::Relaxed);
    if let Some(r) = remediator {
        let _ = r.join();
    }
    // Remote write sends what it can within its grace period; the rest stays queued.
    push_stop.store(true, Ordering::Relaxed);
    push_bell.notify_one();
    if let Some(p) = pusher {
        let _ = p.join();
    }
    // Then deliver what is due (bounded); the rest waits in the outbox for the next start.
    notify_stop.store(true, Ordering::Relaxed);
    outbox_bell.notify_one();
    if let Some(s) = sender {
        let _ = s.join();
    }
    let stats = writer.shutdown();
    tracing::info!(
        ticks = stats.ticks_written,
        rows = stats.rows_written,
        "store closed: {stats}"
    );
    runtime.shutdown_timeout(Duration::from_secs(2));
    drop(lock);
    Ok(summary)
}
