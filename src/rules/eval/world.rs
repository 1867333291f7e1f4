//! The evaluator's in-memory view of the stored history: per GPU the series of the metrics
//! the rules read, per process its memory, per training series its points, fed slice by slice
//! from the store in time order.
//!
//! Invariants:
//! - Data enters only through [`World::advance`], in time order, up to the evaluation time:
//!   the live daemon and `replay` see exactly the same sequence.
//! - Only metrics some rule reads are kept, each for the longest window that reads it.
//! - A NULL in the store is a gap in the series (no data), never a 0.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

use rusqlite::Connection;

use crate::model::{GpuHolder, GpuInventory, GpuSample, Placement, TsMs};
use crate::rules::ast::{Metric, SampleId};
use crate::store::{StoreError, history};
use crate::training::join::{GpuRef, SeriesRef, choose};

use super::needs::{Need, Needs};
use super::series::Series;
use super::window::TrendCache;

mod pauses;
mod xids;

/// The longest stretch fed at once while pauses are tracked.
const PAUSE_CHUNK_MS: i64 = 60_000;

/// How far back training points are read again on every fetch (they are written by the
/// Prometheus fetcher after the fact).
const TRAINING_OVERLAP_MS: i64 = 5 * 60_000;

/// A series with the cache of its trend statistics.
#[derive(Debug, Clone, Default)]
pub struct Tracked {
    pub series: Series,
    pub trend: RefCell<TrendCache>,
}

impl Tracked {
    pub fn new(need: Need) -> Self {
        Self {
            series: Series::with_summary(need.keep_ms, need.summary_ms, need.stats),
            trend: RefCell::default(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Proc {
    pub process_id: i64,
    pub pid: u32,
    pub name: Option<String>,
    pub user: Option<String>,
    pub cmdline: Option<String>,
    /// Memory used by the process on this GPU, MiB.
    pub mem: Tracked,
    pub last_seen: TsMs,
    /// Its container, pod and Slurm job (`None`: unknown).
    pub placement: Option<Placement>,
}

#[derive(Debug, Clone)]
pub struct Gpu {
    pub gpu_id: i64,
    pub host: String,
    pub inv: GpuInventory,
    pub series: HashMap<Metric, Tracked>,
    pub procs: BTreeMap<i64, Proc>,
    pub last_ts: Option<TsMs>,
    /// The model table's entry for the GPU's name (thresholds the data lacks).
    pub spec: Option<&'static crate::specs::ModelSpec>,
    /// The GPU's sampling interval: the median of its recent sample spacings (1 s to a
    /// minute, whatever the daemon or the imported log used).
    pub interval: Interval,
    /// Training series ids joined to this GPU: (step, loss).
    pub training: (Option<i64>, Option<i64>),
    /// Who the kubelet said holds the GPU: (from, to or open, holder), oldest first.
    pub holders: Vec<(TsMs, Option<TsMs>, GpuHolder)>,
    /// The pause of its training step being judged (`pauses`).
    pub pause: pauses::PauseTracker,
}

impl Gpu {
    /// The pod the GPU works for: the kubelet's holder now (with its container), else the
    /// one pod its placed processes run in.
    pub fn pod(&self) -> Option<crate::attribution::SharedPod<'_>> {
        if let Some(h) = self.last_ts.and_then(|t| self.holder_at(t)) {
            return Some(h.as_shared_pod());
        }
        crate::attribution::shared_pod(self.procs.values().filter_map(|p| p.placement.as_ref()))
    }

    /// The Slurm job the GPU's placed processes run in.
    pub fn slurm_job(&self) -> Option<u64> {
        crate::attribution::shared_slurm_job(
            self.procs.values().filter_map(|p| p.placement.as_ref()),
        )
    }

    /// The kubelet's holder of the GPU at `t`, if any.
    pub fn holder_at(&self, t: TsMs) -> Option<&GpuHolder> {
        self.holders
            .iter()
            .rev()
            .find(|(from, to, _)| *from <= t && to.is_none_or(|to| t < to))
            .map(|(_, _, h)| h)
    }
}

/// How many holder intervals a GPU keeps in memory (labels need the current one).
const HOLDERS_KEPT: usize = 8;

/// A GPU's typical sample spacing: the median of its last [`Interval::N`] spacings.
#[derive(Debug, Clone, Default)]
pub struct Interval {
    recent: [i64; Interval::N],
    seen: usize,
    median_ms: i64,
}

impl Interval {
    const N: usize = 9;

    fn observe(&mut self, gap_ms: i64) {
        if gap_ms <= 0 {
            return;
        }
        self.recent[self.seen % Self::N] = gap_ms;
        self.seen += 1;
        let n = self.seen.min(Self::N);
        let mut v = self.recent;
        let v = &mut v[..n];
        v.sort_unstable();
        self.median_ms = v[n / 2];
    }

    /// The median spacing in ms; 0 before two samples were seen.
    pub fn ms(&self) -> i64 {
        self.median_ms
    }
}

#[derive(Debug, Clone)]
pub struct TrainingSeries {
    pub host: String,
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub points: Tracked,
}

/// A GPU's training series: (step, loss).
type StepLoss = (Option<i64>, Option<i64>);

#[derive(Debug, Default)]
pub struct World {
    pub gpus: BTreeMap<i64, Gpu>,
    pub training: BTreeMap<i64, TrainingSeries>,
    needs: Needs,
    /// Everything up to this time has been fed.
    pub fed_to: TsMs,
    /// Processes not seen for this long are forgotten.
    proc_ttl_ms: i64,
    /// (host, role) whose training-metrics source is failing now (live daemon only: the
    /// store records the fetcher's status; a replay cannot know past outages).
    pub training_down: HashSet<(String, &'static str)>,
    /// Hosts whose training-metrics source ever answered with data (from the same status).
    pub training_known: HashSet<String>,
    pending: Pending,
    fetch_ahead_ms: i64,
    /// The per-sample metrics some rule reads, with their history (from `needs`).
    sample_metrics: Vec<(SampleId, Need)>,
    /// Placements read for processes not fed yet (by process id).
    placements: HashMap<i64, Option<Placement>>,
    /// A GPU's pod may have changed (a holder, a placed process): training series are
    /// joined again after this advance.
    rejoin: bool,
    /// `[fleet] job_label`: the training series label naming a job across nodes.
    pub job_label: Option<String>,
    /// `[[xid.override]]`: what particular codes count as here.
    pub xid_overrides: Vec<crate::config::XidOverride>,
    /// XID runs being fed, and what the GPUs' XIDs were judged.
    xids: xids::Xids,
}

/// Rows read from the store but not yet fed (the evaluation time has not reached them).
#[derive(Debug, Default)]
struct Pending {
    fetched_to: TsMs,
    samples: VecDeque<(i64, GpuSample)>,
    procs: VecDeque<history::ProcessSampleRow>,
    training: VecDeque<(i64, TsMs, f64)>,
}

impl World {
    pub fn new(needs: Needs, start_after: TsMs) -> Self {
        let longest = needs.values().map(Need::longest).max().unwrap_or(0);
        let mut sample_metrics: Vec<(SampleId, Need)> = needs
            .iter()
            .filter_map(|(m, k)| match m {
                Metric::Sample(id) => Some((*id, *k)),
                _ => None,
            })
            .collect();
        sample_metrics.sort_by_key(|(m, _)| *m);
        Self {
            sample_metrics,
            needs,
            fed_to: start_after,
            proc_ttl_ms: longest.max(600_000),
            ..Self::default()
        }
    }

    /// The training job GPU `g` works for, named as on every node of the job
    /// (`crate::attribution::job`).
    pub fn training_job(&self, g: &Gpu) -> Option<crate::attribution::job::TrainingJob> {
        let step_labels = g
            .training
            .0
            .and_then(|id| self.training.get(&id))
            .map(|t| t.labels.as_slice());
        crate::attribution::job::training_job(&crate::attribution::job::JobEvidence {
            slurm_job: g.slurm_job(),
            pod: g.pod().map(|p| p.pod),
            pod_owner: g
                .last_ts
                .and_then(|t| g.holder_at(t))
                .and_then(|h| h.job.as_deref()),
            step_labels,
            job_label: self.job_label.as_deref(),
        })
    }

    /// Bytes the in-memory series hold (their buffers' capacity): what the rule windows cost.
    pub fn heap_bytes(&self) -> usize {
        let gpus: usize = self
            .gpus
            .values()
            .map(|g| {
                g.series
                    .values()
                    .map(|t| t.series.heap_bytes())
                    .sum::<usize>()
                    + g.procs
                        .values()
                        .map(|p| p.mem.series.heap_bytes())
                        .sum::<usize>()
            })
            .sum();
        gpus + self
            .training
            .values()
            .map(|t| t.points.series.heap_bytes())
            .sum::<usize>()
    }

    /// The longest history any metric needs.
    pub fn longest_keep(&self) -> i64 {
        self.needs.values().map(Need::longest).max().unwrap_or(0)
    }

    fn keep(&self, m: Metric) -> Option<Need> {
        self.needs.get(&m).copied()
    }

    /// Reads this far ahead of the evaluation time in one query per table (a replay sets
    /// minutes; the live daemon leaves 0 and reads exactly up to the time it evaluates).
    pub fn set_fetch_ahead(&mut self, ms: i64) {
        self.fetch_ahead_ms = ms.max(0);
    }

    /// Reads `(pending.fetched_to, upto + fetch_ahead]` from the store into the pending queues.
    fn fetch(&mut self, conn: &Connection, upto: TsMs) -> Result<(), StoreError> {
        let after = self.pending.fetched_to.max(self.fed_to);
        let to = upto.max(after) + self.fetch_ahead_ms;
        if to <= after {
            return Ok(());
        }
        let samples = history::samples(conn, after, to)?;
        if samples.iter().any(|(id, _)| !self.gpus.contains_key(id)) {
            self.refresh_gpus(conn)?;
        }
        // Processes are read even when no rule reads their memory: their placement names the
        // GPU's pod, Slurm job and training job (labels, peers, `inhibits_job`).
        {
            let procs = history::process_samples(conn, after, to)?;
            // A process's placement is read once, when the evaluator first meets it.
            for p in &procs {
                let known = self
                    .gpus
                    .get(&p.gpu_id)
                    .is_some_and(|g| g.procs.contains_key(&p.process_id));
                if !known && !self.placements.contains_key(&p.process_id) {
                    let pl = history::process_placement(conn, p.process_id)?;
                    self.placements.insert(p.process_id, pl);
                }
            }
            self.pending.procs.extend(procs);
        }
        for h in history::holders(conn, after, to)? {
            if let Some(g) = self.gpus.get_mut(&h.gpu_id) {
                self.rejoin |= !g.holders.iter().any(|x| (x.0, x.1) == (h.from_ms, h.to_ms));
                g.holders.retain(|(from, _, _)| *from != h.from_ms);
                g.holders.push((h.from_ms, h.to_ms, h.holder));
                g.holders.sort_by_key(|(from, _, _)| *from);
                let excess = g.holders.len().saturating_sub(HOLDERS_KEPT);
                g.holders.drain(..excess);
            }
        }
        self.pending.samples.extend(samples);
        self.xids.read(history::xid_runs(conn, after, to)?);
        if self.keep(Metric::TrainingStep).is_some() || self.keep(Metric::TrainingLoss).is_some() {
            // Training points arrive late (scrape and poll lag): read an overlap again; a
            // series ignores points it already has.
            let points = history::training_points(conn, after - TRAINING_OVERLAP_MS, to)?;
            if points
                .iter()
                .any(|(id, _, _)| !self.training.contains_key(id))
            {
                self.refresh_training(conn)?;
            }
            self.pending.training.extend(points);
        }
        self.pending.fetched_to = to;
        Ok(())
    }

    /// The time of the next stored sample after what was fed, reading ahead up to `limit`.
    pub fn next_sample_time(
        &mut self,
        conn: &Connection,
        limit: TsMs,
    ) -> Result<Option<TsMs>, StoreError> {
        loop {
            if let Some((_, s)) = self.pending.samples.front() {
                return Ok((s.ts_ms <= limit).then_some(s.ts_ms));
            }
            let from = self.pending.fetched_to.max(self.fed_to);
            if from >= limit {
                return Ok(None);
            }
            // Skip stretches without samples in one query instead of scanning them.
            let Some(next) = history::next_sample_after(conn, from)? else {
                return Ok(None);
            };
            if next > limit {
                return Ok(None);
            }
            let save = self.fetch_ahead_ms;
            self.fetch_ahead_ms = 0;
            let r = self.fetch(conn, (next + save).min(limit));
            self.fetch_ahead_ms = save;
            r?;
        }
    }

    /// Feeds everything stored up to `upto` (inclusive), in time order. With pause
    /// tracking, a long stretch (a primed daemon's hours) is fed a minute at a time, so the
    /// tracker judges each pause from points that are still kept.
    pub fn advance(&mut self, conn: &Connection, upto: TsMs) -> Result<(), StoreError> {
        if self.tracks_pauses() {
            while upto - self.fed_to > PAUSE_CHUNK_MS {
                // Stretches without samples (a primed daemon's week of XID history) in one go.
                match self.next_sample_time(conn, upto)? {
                    None => break,
                    Some(next) if next - self.fed_to > PAUSE_CHUNK_MS => {
                        self.advance_to(conn, next - 1)?;
                    }
                    Some(_) => self.advance_to(conn, self.fed_to + PAUSE_CHUNK_MS)?,
                }
            }
        }
        self.advance_to(conn, upto)
    }

    fn advance_to(&mut self, conn: &Connection, upto: TsMs) -> Result<(), StoreError> {
        if upto <= self.fed_to {
            return Ok(());
        }
        if self.pending.fetched_to < upto {
            self.fetch(conn, upto)?;
        }
        while self
            .pending
            .samples
            .front()
            .is_some_and(|(_, s)| s.ts_ms <= upto)
        {
            let Some((gpu_id, s)) = self.pending.samples.pop_front() else {
                break;
            };
            self.feed_sample(gpu_id, &s);
        }
        while self.pending.procs.front().is_some_and(|p| p.ts_ms <= upto) {
            let Some(p) = self.pending.procs.pop_front() else {
                break;
            };
            self.feed_process(p);
        }
        if !self.placements.is_empty() {
            // Fed processes have their placement; keep only those still pending.
            let pending: HashSet<i64> = self.pending.procs.iter().map(|p| p.process_id).collect();
            self.placements.retain(|id, _| pending.contains(id));
        }
        self.feed_xids(upto);
        while self.pending.training.front().is_some_and(|p| p.1 <= upto) {
            let Some((id, ts, v)) = self.pending.training.pop_front() else {
                break;
            };
            if let Some(t) = self.training.get_mut(&id) {
                t.points.series.push(ts, v);
            }
        }
        let ttl = self.proc_ttl_ms;
        for g in self.gpus.values_mut() {
            g.procs.retain(|_, p| upto - p.last_seen <= ttl);
        }
        self.fed_to = upto;
        if std::mem::take(&mut self.rejoin) {
            self.join_training();
        }
        if self.tracks_pauses() {
            self.track_pauses(upto);
        }
        Ok(())
    }

    fn refresh_gpus(&mut self, conn: &Connection) -> Result<(), StoreError> {
        for row in history::gpus(conn, None)? {
            let g = self.gpus.entry(row.gpu_id).or_insert_with(|| Gpu {
                gpu_id: row.gpu_id,
                host: row.host.clone(),
                inv: row.inventory.clone(),
                series: HashMap::new(),
                procs: BTreeMap::new(),
                last_ts: None,
                spec: None,
                interval: Interval::default(),
                training: (None, None),
                holders: Vec::new(),
                pause: pauses::PauseTracker::default(),
            });
            g.spec = row.inventory.name.as_deref().and_then(crate::specs::lookup);
            g.inv = row.inventory;
        }
        self.join_training();
        Ok(())
    }

    fn feed_sample(&mut self, gpu_id: i64, s: &GpuSample) {
        let Some(g) = self.gpus.get_mut(&gpu_id) else {
            return;
        };
        if let Some(last) = g.last_ts {
            g.interval.observe(s.ts_ms - last);
        }
        g.last_ts = Some(s.ts_ms);
        for &(id, need) in &self.sample_metrics {
            if let Some(v) = id.def().of(s) {
                g.series
                    .entry(Metric::Sample(id))
                    .or_insert_with(|| Tracked::new(need))
                    .series
                    .push(s.ts_ms, v);
            }
        }
    }

    fn feed_process(&mut self, p: history::ProcessSampleRow) {
        let need = self.keep(Metric::ProcessMem).unwrap_or_default();
        let Some(g) = self.gpus.get_mut(&p.gpu_id) else {
            return;
        };
        let proc = g.procs.entry(p.process_id).or_insert_with(|| Proc {
            process_id: p.process_id,
            pid: p.pid,
            name: p.name.clone(),
            user: p.user.clone(),
            cmdline: p.cmdline.clone(),
            mem: Tracked::new(need),
            last_seen: p.ts_ms,
            placement: None,
        });
        if proc.placement.is_none()
            && let Some(pl) = self.placements.get(&p.process_id)
        {
            self.rejoin |= pl.as_ref().is_some_and(|pl| pl.pod.is_some());
            proc.placement = pl.clone();
        }
        proc.last_seen = p.ts_ms;
        if let Some(b) = p.used_mem_bytes {
            proc.mem.series.push(p.ts_ms, b as f64 / 1_048_576.0);
        }
    }

    /// What a training series keeps before it is joined: enough for either role.
    fn training_need(&self) -> Need {
        let step = self.keep(Metric::TrainingStep).unwrap_or_default();
        step.union(self.keep(Metric::TrainingLoss).unwrap_or_default())
    }

    fn refresh_training(&mut self, conn: &Connection) -> Result<(), StoreError> {
        let need = self.training_need();
        for row in history::training_series(conn)? {
            self.training
                .entry(row.series_id)
                .or_insert_with(|| TrainingSeries {
                    host: row.host,
                    name: row.name,
                    labels: row.labels,
                    points: Tracked::new(need),
                });
        }
        self.join_training();
        Ok(())
    }

    /// Joins training series to GPUs: the one chooser (`training::join::choose`) per host.
    fn join_training(&mut self) {
        let mut hosts: BTreeMap<&str, (Vec<GpuRef>, Vec<i64>)> = BTreeMap::new();
        for g in self.gpus.values() {
            let (refs, ids) = hosts.entry(g.host.as_str()).or_default();
            refs.push(GpuRef {
                index: g.inv.index,
                uuid: g.inv.uuid.clone(),
                pod: g
                    .pod()
                    .map(|p| (p.namespace.to_string(), p.pod.to_string())),
            });
            ids.push(g.gpu_id);
        }
        // (GPU id, (step series, loss series)).
        let mut chosen: Vec<(i64, StepLoss)> = Vec::new();
        for (host, (refs, ids)) in &hosts {
            let series: Vec<SeriesRef> = self
                .training
                .iter()
                .filter(|(_, t)| t.host == *host)
                .map(|(id, t)| SeriesRef {
                    id: *id,
                    name: &t.name,
                    labels: &t.labels,
                })
                .collect();
            for (c, gpu_id) in choose(&series, refs).into_iter().zip(ids) {
                chosen.push((*gpu_id, (c.step.series(), c.loss.series())));
            }
        }
        // A joined series keeps what its roles read (a loss series no rule reads keeps its
        // newest point, not the step's six hours); one no GPU joined keeps enough for either.
        let (step, loss) = (
            self.keep(Metric::TrainingStep).unwrap_or_default(),
            self.keep(Metric::TrainingLoss).unwrap_or_default(),
        );
        let mut roles: HashMap<i64, Need> = HashMap::new();
        for (_, (s, l)) in &chosen {
            for (id, need) in [(s, step), (l, loss)] {
                if let Some(id) = id {
                    let r = roles.entry(*id).or_default();
                    *r = r.union(need);
                }
            }
        }
        let unjoined = step.union(loss);
        for (id, t) in self.training.iter_mut() {
            let need = roles.get(id).copied().unwrap_or(unjoined);
            if t.points
                .series
                .retune(need.keep_ms, need.summary_ms, need.stats)
            {
                t.points.trend = RefCell::default();
            }
        }
        for (gpu_id, t) in chosen {
            if let Some(g) = self.gpus.get_mut(&gpu_id) {
                g.training = t;
            }
        }
    }
}

fn push(g: &mut Gpu, m: Metric, ts: TsMs, v: f64, needs: &Needs) {
    let Some(&need) = needs.get(&m) else { return };
    g.series
        .entry(m)
        .or_insert_with(|| Tracked::new(need))
        .series
        .push(ts, v);
}
