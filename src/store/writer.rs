//! The writer thread: a dedicated `std::thread` owns the [`Store`] and writes what a bounded
//! channel brings.
//!
//! Invariants:
//! - [`WriterHandle::send_tick`] waits at most its `wait` argument for room (the sampling
//!   thread passes one tick interval, so a simulated clock is paced by the writer instead of
//!   outrunning it); when the queue is still full (the disk stalled for about
//!   [`WRITER_QUEUE_CAPACITY`] sends) the ticks are refused, counted in
//!   [`WriterStats::dropped_batches`] and logged; the caller learns it from the result. At one
//!   tick per second the queue holds about a minute, far longer than any normal write.
//! - With a hold ([`WriterHandle::spawn_with`]), ticks wait on the sender's side and are
//!   written together, in one transaction: a tick is held at most the hold (it is sent with
//!   the tick before which the hold would pass) and at most [`MAX_HELD`] ticks are held; a tick
//!   with news (events, inventory, allocations, setting changes) and the first
//!   [`UNHELD_AT_START`] ticks are sent at once, with those held before them. A kill loses the held ticks, never alert state (alerts are evaluated on
//!   committed ticks only).
//! - Commands are handled in order: a flush or shutdown replies after every tick queued
//!   before it has been written (or has failed).
//! - Errors are logged with `tracing` and counted; the thread does not panic on them and
//!   keeps writing the next ticks.
//! - [`WriterHandle::flush`] and [`WriterHandle::shutdown`] block: call them from a blocking
//!   context (`tokio::task::spawn_blocking`). Dropping the handle shuts the thread down too.
//! - [`TrainingSender`] (for the training fetcher's task) never blocks: a full queue refuses
//!   the poll's write (counted in `dropped_batches`); the next poll's overlap refetches it.
//!   After the writer shuts down, its sends fail with [`SendTickError::Closed`].
//! - An [`AfterCommit`] (the daemon's rule evaluator) runs on this thread after every committed
//!   tick, with the writer's own connection: it reads what was just committed from a warm page
//!   cache, and never anything uncommitted (it runs between transactions). A flush replies
//!   after it ran for every tick queued before the flush.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::Connection;

use super::{Store, StoreError};
use crate::model::{TickBatch, TrainingWrite, TsMs};

/// Work that follows the writer's commits on the writer's own thread (the rule evaluator):
/// no thread of its own to wake, and the pages it reads are the ones just written.
pub trait AfterCommit: Send {
    /// Called after each committed tick, with `upto` the newest committed tick time.
    fn committed(&mut self, conn: &Connection, upto: TsMs);
}

/// Builds the [`AfterCommit`] on the writer thread, with its connection, before the first tick
/// is written (the evaluator fills its windows from the stored history here).
pub type AfterCommitStart = Box<dyn FnOnce(&Connection) -> Box<dyn AfterCommit> + Send>;

/// Sends (of one or more ticks) the queue holds by default.
pub const WRITER_QUEUE_CAPACITY: usize = 64;

/// The most ticks held before they are sent, whatever the hold.
pub const MAX_HELD: usize = 16;

/// The first ticks are sent one by one, whatever the hold: a daemon that just started shows
/// its GPUs (and `status`, `/metrics` their readings) at once.
pub const UNHELD_AT_START: u64 = 10;

/// Counters of the writer thread (a snapshot).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WriterStats {
    pub ticks_written: u64,
    pub rows_written: u64,
    /// Ticks whose transaction failed (lost, and logged: the first of a run of failures as
    /// an error, the rest at debug level).
    pub write_errors: u64,
    /// Ticks lost since the last successful write (0 while writes succeed).
    pub failing_ticks: u64,
    /// Maintenance steps that failed (the ticks were written).
    pub maintenance_errors: u64,
    /// Ticks refused by [`WriterHandle::send_tick`] because the queue was full or closed.
    pub dropped_batches: u64,
    /// Writes that hit SQLITE_FULL, freed space and succeeded on the retry.
    pub full_retries: u64,
    pub last_error: Option<String>,
    /// `ts_ms` of the newest tick written.
    pub last_tick_ms: Option<TsMs>,
    /// Duration of the last write call (transaction plus maintenance).
    pub last_write: Duration,
    /// Longest write call so far.
    pub max_write: Duration,
    /// Used bytes of the database after the last maintenance step.
    pub used_bytes: u64,
}

impl std::fmt::Display for WriterStats {
    /// One line in words: `wrote 1234 ticks (9872 rows), database 12.3 MiB, slowest write
    /// 45 ms`, then the failures, only when there were any.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "wrote {} ticks ({} rows), database {:.1} MiB, slowest write {} ms",
            self.ticks_written,
            self.rows_written,
            self.used_bytes as f64 / 1_048_576.0,
            self.max_write.as_millis()
        )?;
        for (n, what) in [
            (self.write_errors, "ticks lost to failed writes"),
            (self.dropped_batches, "ticks dropped (queue full)"),
            (self.maintenance_errors, "failed maintenance steps"),
            (self.full_retries, "writes retried after the disk filled"),
        ] {
            if n > 0 {
                write!(f, "; {n} {what}")?;
            }
        }
        if let Some(e) = &self.last_error {
            write!(f, "; last error: {e}")?;
        }
        Ok(())
    }
}

/// Why [`WriterHandle::send_tick`] refused a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SendTickError {
    #[error("the store writer's queue is full; the tick was dropped")]
    Full,
    #[error("the store writer has stopped; the tick was dropped")]
    Closed,
}

enum Command {
    Ticks(Vec<TickBatch>),
    Training(Box<TrainingWrite>),
    Flush(SyncSender<WriterStats>),
    Shutdown(SyncSender<WriterStats>),
}

struct Shared {
    stats: Mutex<WriterStats>,
    dropped: AtomicU64,
    /// Signalled after each committed tick and by [`Committed::ring`].
    advanced: Condvar,
    /// Bumped by [`Committed::ring`] (read and written under `stats`' lock).
    rings: AtomicU64,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, WriterStats> {
        self.stats.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn snapshot(&self) -> WriterStats {
        let mut s = self.lock().clone();
        s.dropped_batches = self.dropped.load(Ordering::Relaxed);
        s
    }
}

/// Reads how far the writer has committed (the newest tick time written), for readers that
/// must not run ahead of it (the rule evaluator).
#[derive(Clone)]
pub struct Committed(Arc<Shared>);

impl Committed {
    pub fn get(&self) -> Option<TsMs> {
        self.0.lock().last_tick_ms
    }

    /// Blocks until the writer has committed past `seen`, [`Committed::ring`] is called, or
    /// `timeout` passes (no polling: the writer wakes the waiter); returns the committed time.
    pub fn wait_past(&self, seen: Option<TsMs>, timeout: Duration) -> Option<TsMs> {
        let guard = self.0.lock();
        let rings = self.0.rings.load(Ordering::Relaxed);
        let (guard, _) = self
            .0
            .advanced
            .wait_timeout_while(guard, timeout, |s| {
                s.last_tick_ms == seen && self.0.rings.load(Ordering::Relaxed) == rings
            })
            .unwrap_or_else(|e| e.into_inner());
        guard.last_tick_ms
    }

    /// Wakes every [`Committed::wait_past`] now (a stop or reload request).
    pub fn ring(&self) {
        let _guard = self.0.lock();
        self.0.rings.fetch_add(1, Ordering::Relaxed);
        self.0.advanced.notify_all();
    }
}

/// Ticks held on the sender's side, to be written together.
#[derive(Default)]
struct Held {
    /// Ticks handed over so far.
    count: u64,
    ticks: Vec<TickBatch>,
    /// When the oldest held tick was handed over.
    since: Option<std::time::Instant>,
}

/// The sampler's side of the writer thread.
pub struct WriterHandle {
    tx: Option<SyncSender<Command>>,
    thread: Option<JoinHandle<()>>,
    shared: Arc<Shared>,
    hold: Duration,
    held: Mutex<Held>,
}

impl WriterHandle {
    /// Starts the writer thread with a queue of [`WRITER_QUEUE_CAPACITY`] ticks.
    pub fn spawn(store: Store) -> std::io::Result<WriterHandle> {
        Self::spawn_with_capacity(store, WRITER_QUEUE_CAPACITY)
    }

    /// Starts the writer thread with a queue of `capacity` sends (at least 1); every tick is
    /// written on its own.
    pub fn spawn_with_capacity(store: Store, capacity: usize) -> std::io::Result<WriterHandle> {
        Self::spawn_with(store, capacity, Duration::ZERO, None)
    }

    /// Starts the writer thread with a queue of `capacity` sends, ticks held up to `hold`
    /// before they are written together (zero: each on its own), and `after`, which is built
    /// on the thread and then runs after every commit.
    pub fn spawn_with(
        store: Store,
        capacity: usize,
        hold: Duration,
        after: Option<AfterCommitStart>,
    ) -> std::io::Result<WriterHandle> {
        let (tx, rx) = sync_channel(capacity.max(1));
        let shared = Arc::new(Shared {
            stats: Mutex::new(WriterStats::default()),
            dropped: AtomicU64::new(0),
            advanced: Condvar::new(),
            rings: AtomicU64::new(0),
        });
        let thread_shared = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("gpuwatch-store".into())
            .spawn(move || {
                let after = after.map(|start| start(store.conn()));
                run(store, rx, &thread_shared, after)
            })?;
        Ok(WriterHandle {
            tx: Some(tx),
            thread: Some(thread),
            shared,
            hold,
            held: Mutex::new(Held::default()),
        })
    }

    /// Hands a tick over: held (see the module's invariants) or queued with the ticks held
    /// before it, waiting up to `wait` for room in the queue (`Duration::ZERO`: never blocks,
    /// safe from async code). `wait` is also taken as the time to the next tick: a tick is
    /// not held when the hold would pass before the next one comes.
    pub fn send_tick(&self, batch: TickBatch, wait: Duration) -> Result<(), SendTickError> {
        let news = !batch.events.is_empty()
            || !batch.inventory.is_empty()
            || !batch.allocations.is_empty()
            || !batch.setting_changes.is_empty();
        let ticks = {
            let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
            let now = std::time::Instant::now();
            let since = *held.since.get_or_insert(now);
            held.ticks.push(batch);
            held.count += 1;
            let due = news
                || held.count <= UNHELD_AT_START
                || held.ticks.len() >= MAX_HELD
                || now.duration_since(since) + wait >= self.hold;
            if !due {
                return Ok(());
            }
            held.since = None;
            std::mem::take(&mut held.ticks)
        };
        self.send(ticks, wait)
    }

    /// Sends what is held now.
    fn send_held(&self) -> Result<(), SendTickError> {
        let ticks = {
            let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
            held.since = None;
            std::mem::take(&mut held.ticks)
        };
        if ticks.is_empty() {
            return Ok(());
        }
        self.send(ticks, Duration::from_secs(1))
    }

    fn send(&self, ticks: Vec<TickBatch>, wait: Duration) -> Result<(), SendTickError> {
        let deadline = std::time::Instant::now() + wait;
        let n = ticks.len() as u64;
        let mut cmd = Command::Ticks(ticks);
        let mut pause = Duration::from_micros(100);
        let err = loop {
            let Some(tx) = &self.tx else {
                break SendTickError::Closed;
            };
            match tx.try_send(cmd) {
                Ok(()) => return Ok(()),
                Err(TrySendError::Disconnected(_)) => break SendTickError::Closed,
                Err(TrySendError::Full(back)) => {
                    if std::time::Instant::now() >= deadline {
                        break SendTickError::Full;
                    }
                    cmd = back;
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(10));
                }
            }
        };
        let total = self.shared.dropped.fetch_add(n, Ordering::Relaxed) + n;
        tracing::error!(dropped_total = total, ticks = n, error = %err, "dropped sample batches");
        Err(err)
    }

    /// A cloneable, never-blocking sender of training writes into this writer's queue.
    /// `None` once the writer is shut down.
    pub fn training_sender(&self) -> Option<TrainingSender> {
        Some(TrainingSender {
            tx: self.tx.clone()?,
            shared: Arc::clone(&self.shared),
        })
    }

    /// A handle that tells how far the writer has committed.
    pub fn committed(&self) -> Committed {
        Committed(Arc::clone(&self.shared))
    }

    /// The counters now, without waiting for the thread.
    pub fn stats(&self) -> WriterStats {
        self.shared.snapshot()
    }

    /// Waits until every tick handed over so far is written; returns the counters then.
    pub fn flush(&self) -> Result<WriterStats, SendTickError> {
        self.send_held()?;
        let tx = self.tx.as_ref().ok_or(SendTickError::Closed)?;
        let (reply_tx, reply_rx) = sync_channel(1);
        tx.send(Command::Flush(reply_tx))
            .map_err(|_| SendTickError::Closed)?;
        let mut s = reply_rx.recv().map_err(|_| SendTickError::Closed)?;
        s.dropped_batches = self.shared.dropped.load(Ordering::Relaxed);
        Ok(s)
    }

    /// Writes what is queued, closes the database and returns the final counters.
    pub fn shutdown(mut self) -> WriterStats {
        self.stop()
    }

    fn stop(&mut self) -> WriterStats {
        let _ = self.send_held();
        if let Some(tx) = self.tx.take() {
            let (reply_tx, reply_rx) = sync_channel(1);
            if tx.send(Command::Shutdown(reply_tx)).is_ok() {
                // Ignore a lost reply: the thread is gone either way.
                let _ = reply_rx.recv();
            }
        }
        if self.thread.take().is_some_and(|t| t.join().is_err()) {
            tracing::error!("the store writer thread panicked");
        }
        self.shared.snapshot()
    }
}

impl Drop for WriterHandle {
    fn drop(&mut self) {
        self.stop();
    }
}

impl std::fmt::Debug for WriterHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriterHandle")
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

/// Queues training writes for the writer thread (see [`WriterHandle::training_sender`]).
#[derive(Clone)]
pub struct TrainingSender {
    tx: SyncSender<Command>,
    shared: Arc<Shared>,
}

impl TrainingSender {
    /// Queues `w` without waiting; safe from async code.
    pub fn send(&self, w: TrainingWrite) -> Result<(), SendTickError> {
        let err = match self.tx.try_send(Command::Training(Box::new(w))) {
            Ok(()) => return Ok(()),
            Err(TrySendError::Full(_)) => SendTickError::Full,
            Err(TrySendError::Disconnected(_)) => SendTickError::Closed,
        };
        let n = self.shared.dropped.fetch_add(1, Ordering::Relaxed) + 1;
        tracing::warn!(dropped_total = n, error = %err, "dropped a training-metrics write");
        Err(err)
    }
}

impl std::fmt::Debug for TrainingSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrainingSender").finish_non_exhaustive()
    }
}

fn run(
    mut store: Store,
    rx: Receiver<Command>,
    shared: &Shared,
    mut after: Option<Box<dyn AfterCommit>>,
) {
    while let Ok(cmd) = rx.recv() {
        match cmd {
            Command::Ticks(batches) => {
                let upto = write_many(&mut store, &batches, shared);
                if let (Some(a), Some(upto)) = (after.as_mut(), upto) {
                    a.committed(store.conn(), upto);
                }
            }
            Command::Training(w) => write_training(&mut store, &w, shared),
            Command::Flush(reply) => {
                let _ = reply.send(shared.snapshot());
            }
            Command::Shutdown(reply) => {
                if let Err(e) = store.checkpoint() {
                    tracing::warn!(error = %e, "checkpoint at shutdown failed");
                }
                let _ = reply.send(shared.snapshot());
                return;
            }
        }
    }
}

/// How long the writer keeps retrying a tick while another process holds the write lock
/// (an import publishing a long log): the queue holds the ticks meanwhile.
const BUSY_RETRY_FOR: std::time::Duration = std::time::Duration::from_secs(60);

/// Writes ticks in one transaction; returns the newest committed tick time when they were
/// written.
fn write_many(store: &mut Store, batches: &[TickBatch], shared: &Shared) -> Option<TsMs> {
    let started = std::time::Instant::now();
    let mut result = store.write_ticks(batches);
    while result.as_ref().is_err_and(StoreError::is_busy) && started.elapsed() < BUSY_RETRY_FOR {
        tracing::debug!("the database is locked by another process; retrying the ticks");
        result = store.write_ticks(batches);
    }
    let newest = batches.iter().map(|b| b.ts_ms).max();
    let mut s = shared.lock();
    match result {
        Ok(w) => {
            if s.failing_ticks > 0 {
                tracing::warn!(lost_ticks = s.failing_ticks, "writing sample batches again");
                s.failing_ticks = 0;
            }
            s.ticks_written += batches.len() as u64;
            s.rows_written += w.rows as u64;
            s.full_retries += u64::from(w.retried_after_full);
            s.last_tick_ms = s.last_tick_ms.max(newest);
            shared.advanced.notify_all();
            s.last_write = w.total_time;
            s.max_write = s.max_write.max(w.total_time);
            s.used_bytes = w.maintenance.used_bytes;
            if let Some(e) = w.maintenance_error {
                s.maintenance_errors += 1;
                s.last_error = Some(e);
            }
            s.last_tick_ms
        }
        Err(e) => {
            s.write_errors += batches.len() as u64;
            s.last_error = Some(e.to_string());
            // Once per run of failures, not once per tick (a full disk fails every commit).
            if s.failing_ticks == 0 {
                tracing::error!(error = %e, ts_ms = ?newest, ticks = batches.len(), "writing sample batches failed; later failures of this run are logged at debug level");
            } else {
                tracing::debug!(error = %e, ts_ms = ?newest, ticks = batches.len(), "writing sample batches failed");
            }
            s.failing_ticks += batches.len() as u64;
            None
        }
    }
}

fn write_training(store: &mut Store, w: &TrainingWrite, shared: &Shared) {
    let result = store.write_training(w);
    let mut s = shared.lock();
    match result {
        Ok(stats) => {
            s.rows_written += stats.rows as u64;
            if let Some(e) = stats.maintenance_error {
                s.maintenance_errors += 1;
                s.last_error = Some(e);
            }
        }
        Err(e) => {
            s.write_errors += 1;
            s.last_error = Some(e.to_string());
            tracing::error!(error = %e, points = w.points.len(), "writing training metrics failed");
        }
    }
}
