//! The `gpuwatch-kubelet` thread: asks the kubelet for the GPU allocations on a timer and
//! when the sampler pokes it (a GPU with processes but no known allocation), and publishes
//! the newest answer for the sampling thread to pick up between ticks.
//!
//! Invariants: the sampling thread never waits for the kubelet (it reads the published
//! answer, or nothing) — except once, before its first tick, at most [`FIRST_ANSWER_WAIT`],
//! so that the first samples and alerts after a start already carry their pods; one refresh at a time, each within its deadline, at most one poke
//! per `MIN_POKE_GAP`; a failure is logged when it starts and when it ends, not every
//! refresh; with `enabled = "auto"` a node without the socket is silent.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use std::collections::BTreeSet;

use super::pods::{self, PodJobs, PodsClient};
use super::{Allocations, allocations, client};

/// How often allocations are read without a poke.
pub const REFRESH: Duration = Duration::from_secs(30);
/// The deadline of one `List` call.
pub const DEADLINE: Duration = Duration::from_secs(5);
const MIN_POKE_GAP: Duration = Duration::from_secs(5);
/// How long a start waits for the kubelet's first answer (or failure) before sampling.
pub const FIRST_ANSWER_WAIT: Duration = Duration::from_secs(2);

/// What the thread publishes: the allocations of the newest successful refresh, numbered.
#[derive(Debug, Default)]
struct Published {
    version: u64,
    allocations: Allocations,
    /// The first `List` has finished (answered or failed).
    settled: bool,
}

/// The sampling thread's side.
#[derive(Debug, Clone)]
pub struct KubeletView {
    published: Arc<Mutex<Published>>,
    settled: Arc<Condvar>,
    poke: Arc<tokio::sync::Notify>,
}

impl KubeletView {
    /// The allocations if they changed since `seen` (a version number; start with 0).
    pub fn changed_since(&self, seen: &mut u64) -> Option<Allocations> {
        let p = self
            .published
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        (p.version != *seen).then(|| {
            *seen = p.version;
            p.allocations.clone()
        })
    }

    /// Waits until the first `List` has finished, at most `timeout`; true when it has.
    pub fn wait_first_answer(&self, timeout: Duration) -> bool {
        let p = self
            .published
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let (p, _) = self
            .settled
            .wait_timeout_while(p, timeout, |p| !p.settled)
            .unwrap_or_else(PoisonError::into_inner);
        p.settled
    }

    fn settle(&self) {
        let mut p = self
            .published
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if !p.settled {
            p.settled = true;
            self.settled.notify_all();
        }
    }

    /// Asks for a refresh now (rate-limited by the thread).
    pub fn poke(&self) {
        self.poke.notify_one();
    }

    /// A view no thread feeds (tests publish into it).
    #[cfg(test)]
    pub(crate) fn detached() -> Self {
        Self {
            published: Arc::default(),
            settled: Arc::default(),
            poke: Arc::new(tokio::sync::Notify::new()),
        }
    }

    /// Publishes a new answer (the thread; tests through [`KubeletView::detached`]).
    pub(crate) fn publish(&self, a: Allocations) {
        let mut p = self
            .published
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        p.version += 1;
        p.allocations = a;
    }
}

/// Starts the thread for the socket at `socket`; `required` logs a missing socket as a
/// warning (`enabled = true`) instead of staying silent (`"auto"`); `pods`: also name each
/// allocated pod's job from the kubelet's `/pods` (`[kubernetes] kubelet_pods`).
pub fn spawn(
    socket: PathBuf,
    required: bool,
    pods: Option<crate::config::KubeletPods>,
    stop: Arc<AtomicBool>,
) -> std::io::Result<KubeletView> {
    let view = KubeletView {
        published: Arc::default(),
        settled: Arc::default(),
        poke: Arc::new(tokio::sync::Notify::new()),
    };
    let v = view.clone();
    std::thread::Builder::new()
        .name("gpuwatch-kubelet".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(rt) => rt,
                Err(e) => {
                    tracing::error!(error = %e, "cannot start the kubelet client; pods come from cgroups only");
                    v.settle();
                    return;
                }
            };
            let pods = pods.and_then(|cfg| match PodsClient::new(&cfg) {
                Ok(c) => Some(Jobs::new(c)),
                Err(e) => {
                    tracing::warn!("{e}; training_job falls back to pod names");
                    None
                }
            });
            rt.block_on(run(socket, required, pods, stop, v));
        })?;
    Ok(view)
}

/// The pods' jobs from `/pods`, asked again only when a pod it has not answered for holds
/// a GPU (and, after a refusal, not before [`pods::REFUSED_RETRY`]).
struct Jobs {
    client: PodsClient,
    known: PodJobs,
    asked: BTreeSet<(String, String)>,
    refused_until: Option<Instant>,
    failing: Option<String>,
}

impl Jobs {
    fn new(client: PodsClient) -> Self {
        Self {
            client,
            known: PodJobs::new(),
            asked: BTreeSet::new(),
            refused_until: None,
            failing: None,
        }
    }

    /// Names the job of each allocation's pod (asking the kubelet when new pods appeared).
    async fn fill(&mut self, a: &mut Allocations) {
        let pods: BTreeSet<(String, String)> = a
            .values()
            .map(|h| (h.namespace.clone(), h.pod.clone()))
            .collect();
        let refused = self.refused_until.is_some_and(|t| Instant::now() < t);
        if !refused && !pods.is_subset(&self.asked) {
            match self.client.fetch().await {
                Ok(jobs) => {
                    if self.failing.take().is_some() {
                        tracing::info!("the kubelet's /pods answers again");
                    }
                    tracing::debug!(pods = jobs.len(), "pod owners from the kubelet");
                    self.known = jobs;
                    self.asked = pods;
                    self.refused_until = None;
                }
                Err(e) => {
                    let text = e.to_string();
                    if self.failing.as_deref() != Some(text.as_str()) {
                        tracing::warn!("{text}");
                    }
                    if e.is_refusal() {
                        self.refused_until = Some(Instant::now() + pods::REFUSED_RETRY);
                    }
                    self.failing = Some(text);
                }
            }
        }
        for h in a.values_mut() {
            h.job = self
                .known
                .get(&(h.namespace.clone(), h.pod.clone()))
                .cloned();
        }
    }
}

async fn run(
    socket: PathBuf,
    required: bool,
    mut pods: Option<Jobs>,
    stop: Arc<AtomicBool>,
    view: KubeletView,
) {
    let mut failing: Option<String> = None;
    let mut last_call: Option<Instant> = None;
    let mut last: Option<Allocations> = None;
    let mut session = client::Session::new(&socket);
    while !stop.load(Ordering::Relaxed) {
        if let Some(t) = last_call {
            let gap = MIN_POKE_GAP.saturating_sub(t.elapsed());
            tokio::time::sleep(gap).await;
        }
        last_call = Some(Instant::now());
        match session.list(DEADLINE).await {
            Ok(resp) => {
                if failing.take().is_some() {
                    tracing::info!(socket = %socket.display(), "the kubelet answers again");
                }
                let mut a = allocations(&resp);
                if let Some(jobs) = pods.as_mut() {
                    jobs.fill(&mut a).await;
                }
                if last.as_ref() != Some(&a) {
                    tracing::debug!(devices = a.len(), "GPU allocations from the kubelet");
                    view.publish(a.clone());
                    last = Some(a);
                }
            }
            Err(e) => {
                let text = e.to_string();
                let silent = !required && matches!(e, client::KubeletError::Missing(_));
                if failing.as_deref() != Some(text.as_str()) && !silent {
                    tracing::warn!("{text}; pod labels come from cgroups until it answers");
                }
                failing = Some(text);
            }
        }
        view.settle();
        // Until the next refresh or a poke (a stop pokes too; the thread is not joined).
        let _ = tokio::time::timeout(REFRESH, view.poke.notified()).await;
    }
}
