//! The coordinator's side of the lanes ([`super::lane`]): which lane owns which GPU, the
//! requests of a tick and the wait for their answers, and the moves that keep a stalled call
//! from costing more than its GPU.
//!
//! Invariants:
//! - Every GPU belongs to exactly one lane; a lane that is still busy with an earlier request
//!   (or stuck in it) gets no new one.
//! - A lane stalled in one GPU (for the stall time during a wait, or still busy at the next
//!   tick) keeps only that GPU; its other GPUs move to a new lane, and those the tick still
//!   waits for are asked again at once.
//! - A split-off lane that finished [`MERGE_AFTER`] requests in time gives its GPUs back to
//!   the lane with the most GPUs, and its thread ends (its channel closes).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Sender};
use std::time::{Duration, Instant};

use nvml_wrapper::Nvml;

use super::device::SystemInfo;
use super::lane::{self, GpuCell, IDLE, LaneParts, Progress, Request};
use super::mailbox::Mailbox;

/// Ticks a split-off lane answers in time before its GPUs go back to the main lane.
pub const MERGE_AFTER: u32 = 60;

/// The coordinator's handle on one lane.
struct Lane {
    id: usize,
    tx: Sender<Request>,
    /// The GPUs it owns, in index order.
    gpus: Vec<u32>,
    progress: Arc<Progress>,
    /// The tick of the newest request sent to it.
    asked: Option<u64>,
    /// Consecutive requests it finished within their tick's deadline.
    on_time: u32,
}

impl Lane {
    /// Still working on an earlier request (or stuck in it).
    fn busy(&self) -> bool {
        self.asked
            .is_some_and(|t| self.progress.done_tick.load(Ordering::Acquire) < t)
    }

    /// The GPU it has been reading for at least `stall`, if any.
    fn stalled_in(&self, stall: Duration) -> Option<u32> {
        let current = self.progress.current.load(Ordering::Acquire);
        if current == IDLE || !self.busy() {
            return None;
        }
        let since = self.progress.since_us.load(Ordering::Acquire);
        let stall_us = u64::try_from(stall.as_micros()).unwrap_or(u64::MAX);
        (lane::now_us().saturating_sub(since) >= stall_us).then_some(current)
    }
}

/// Every lane, and what a new one needs.
pub(super) struct Pool {
    lanes: Vec<Lane>,
    next_lane_id: usize,
    nvml: Arc<Nvml>,
    sys: SystemInfo,
    cells: Arc<[GpuCell]>,
    pub(super) mailbox: Mailbox,
    /// The sampler's stop flag, which ends the lanes' sleeps.
    stop: Arc<AtomicBool>,
}

impl Pool {
    pub(super) fn new(
        nvml: Arc<Nvml>,
        sys: SystemInfo,
        cells: Arc<[GpuCell]>,
        stop: Arc<AtomicBool>,
    ) -> Self {
        Self {
            lanes: Vec::new(),
            next_lane_id: 0,
            nvml,
            sys,
            cells,
            mailbox: Mailbox::default(),
            stop,
        }
    }

    /// How many lanes (NVML threads) there are now.
    pub(super) fn len(&self) -> usize {
        self.lanes.len()
    }

    /// Counts the lanes asked for `tick_id` that finished it in time (call after the wait).
    pub(super) fn count_on_time(&mut self, tick_id: u64) {
        for lane in &mut self.lanes {
            if lane.asked == Some(tick_id) {
                lane.on_time = if lane.busy() { 0 } else { lane.on_time + 1 };
            }
        }
    }

    /// Starts a lane owning `gpus`; returns its position in `lanes`.
    pub(super) fn spawn_lane(&mut self, gpus: Vec<u32>) -> Result<usize, std::io::Error> {
        let id = self.next_lane_id;
        let (tx, rx) = mpsc::channel();
        let progress = Arc::new(Progress::default());
        let parts = LaneParts {
            id,
            nvml: self.nvml.clone(),
            sys: self.sys.clone(),
            cells: self.cells.clone(),
            progress: progress.clone(),
            requests: rx,
            mailbox: self.mailbox.clone(),
            stop: self.stop.clone(),
        };
        std::thread::Builder::new()
            .name(format!("gpuwatch-lane{id}"))
            .spawn(move || lane::run(parts))?;
        self.next_lane_id += 1;
        // Owned from now on: the lane it leaves skips these GPUs from its next read on.
        for &g in &gpus {
            if let Some(cell) = self.cells.get(g as usize) {
                cell.owner.store(id, Ordering::Release);
            }
        }
        self.lanes.push(Lane {
            id,
            tx,
            gpus,
            progress,
            asked: None,
            on_time: 0,
        });
        Ok(self.lanes.len() - 1)
    }

    /// Moves every GPU of the lane at `pos` but `stuck` to a new lane; returns the new lane's
    /// position and the GPUs moved.
    fn split(&mut self, pos: usize, stuck: u32) -> Option<(usize, Vec<u32>)> {
        let moving: Vec<u32> = self.lanes[pos]
            .gpus
            .iter()
            .copied()
            .filter(|&g| g != stuck)
            .collect();
        if moving.is_empty() {
            return None;
        }
        tracing::warn!(
            gpu = stuck,
            others = ?moving,
            "an NVML call on this GPU stalls; the other GPUs of its lane move to a new one"
        );
        match self.spawn_lane(moving.clone()) {
            Ok(new) => {
                self.lanes[pos].gpus.retain(|&g| g == stuck);
                self.lanes[pos].on_time = 0;
                Some((new, moving))
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot start a new NVML lane; these GPUs wait for the stalled call");
                None
            }
        }
    }

    /// Lanes still stuck in an earlier tick keep only the GPU they are in.
    pub(super) fn split_stuck(&mut self) {
        for pos in 0..self.lanes.len() {
            let lane = &self.lanes[pos];
            if !lane.busy() || lane.gpus.len() < 2 {
                continue;
            }
            let current = lane.progress.current.load(Ordering::Acquire);
            if current != IDLE {
                self.split(pos, current);
            }
        }
    }

    /// During a tick's wait: lanes stalled in one GPU for `stall` give their other GPUs to a
    /// new lane, which is asked at once for those of them this tick still waits for.
    pub(super) fn split_stalled(&mut self, req: &Request, stall: Duration) {
        let outstanding = self.mailbox.outstanding();
        for pos in 0..self.lanes.len() {
            let lane = &self.lanes[pos];
            if lane.asked != Some(req.tick_id) || lane.gpus.len() < 2 {
                continue;
            }
            let Some(stuck) = lane.stalled_in(stall) else {
                continue;
            };
            let Some((new, moved)) = self.split(pos, stuck) else {
                continue;
            };
            let again: Vec<u32> = moved
                .into_iter()
                .filter(|g| outstanding.contains(g))
                .collect();
            if !again.is_empty() {
                self.ask(new, req, again);
            }
        }
    }

    /// Gives the GPUs of split-off lanes that answered in time for [`MERGE_AFTER`] ticks back
    /// to the lane with the most GPUs; their threads end.
    pub(super) fn merge_recovered(&mut self) {
        let Some(main) = (0..self.lanes.len())
            .filter(|&p| !self.lanes[p].busy())
            .max_by_key(|&p| (self.lanes[p].gpus.len(), std::cmp::Reverse(p)))
        else {
            return;
        };
        let main_id = self.lanes[main].id;
        let ready: Vec<usize> = (0..self.lanes.len())
            .filter(|&p| p != main)
            .filter(|&p| !self.lanes[p].busy() && self.lanes[p].on_time >= MERGE_AFTER)
            .collect();
        for &p in ready.iter().rev() {
            let lane = self.lanes.remove(p);
            for &g in &lane.gpus {
                if let Some(cell) = self.cells.get(g as usize) {
                    cell.owner.store(main_id, Ordering::Release);
                }
            }
            let Some(main) = self.lanes.iter_mut().find(|l| l.id == main_id) else {
                continue;
            };
            main.gpus.extend(&lane.gpus);
            main.gpus.sort_unstable();
            tracing::info!(gpus = ?lane.gpus, "NVML calls answer in time again; the GPUs rejoin the main lane");
        }
    }

    /// Sends `req` for `gpus` to the lane at `pos`; the GPUs whose request could not be sent
    /// are not waited for.
    fn ask(&mut self, pos: usize, req: &Request, gpus: Vec<u32>) {
        let lane = &mut self.lanes[pos];
        let sent = lane
            .tx
            .send(Request {
                gpus: gpus.clone(),
                ..req.clone()
            })
            .is_ok();
        if sent {
            lane.asked = Some(req.tick_id);
        } else {
            for g in gpus {
                self.mailbox.forgo(g);
            }
        }
    }

    /// Asks every lane that is free for its GPUs that `wanted` selects; returns the GPUs
    /// asked.
    pub(super) fn ask_all(&mut self, req: &Request, wanted: impl Fn(u32) -> bool) -> Vec<u32> {
        let plan: Vec<(usize, Vec<u32>)> = self
            .lanes
            .iter()
            .enumerate()
            .filter(|(_, l)| !l.busy())
            .map(|(p, l)| {
                let gpus = l
                    .gpus
                    .iter()
                    .copied()
                    .filter(|&g| wanted(g))
                    .collect::<Vec<u32>>();
                (p, gpus)
            })
            .filter(|(_, g)| !g.is_empty())
            .collect();
        let asked: Vec<u32> = plan.iter().flat_map(|(_, g)| g.iter().copied()).collect();
        self.mailbox.expect(req.tick_id, &asked);
        for (pos, gpus) in plan {
            self.ask(pos, req, gpus);
        }
        asked
    }

    /// Waits for the answers of `req`, read from `start` on, until `deadline`, moving GPUs
    /// off stalled lanes (the first check `stall` after `start`); false when `stop` ended the
    /// wait before every answer came.
    pub(super) fn wait(
        &mut self,
        req: &Request,
        (start, deadline): (Instant, Instant),
        stall: Duration,
        stop: Option<&AtomicBool>,
    ) -> bool {
        let mut check = start + stall;
        loop {
            if self.mailbox.wait(check.min(deadline), stop) {
                break;
            }
            if stop.is_some_and(|s| s.load(Ordering::Relaxed)) {
                self.mailbox.close();
                return false;
            }
            if Instant::now() >= deadline {
                break;
            }
            self.split_stalled(req, stall);
            check = Instant::now() + (stall / 2).max(Duration::from_millis(1));
        }
        self.mailbox.close();
        true
    }
}
