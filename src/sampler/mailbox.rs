//! Where lanes leave their answers: one queue the coordinator drains once per tick, woken
//! once, by the answer that completes the tick (or by its deadline), instead of once per GPU.
//!
//! Invariants: every answer is kept until drained, whatever tick it belongs to (a late one
//! frees its GPU for the next tick); the coordinator waits for a set of GPUs, and only the
//! first answer of each of them to the tick being waited for counts (a GPU read twice, by the
//! lane it left and the lane it moved to, does not end the wait early); a wait never outlasts
//! its deadline, and a stop requested through [`crate::clock::request_stop`] ends it at once
//! (the mailbox is registered with [`crate::clock::wake_on_stop`]).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use super::lane::Response;

#[derive(Debug, Default)]
struct State {
    answers: VecDeque<Response>,
    /// The tick being waited for and the GPUs whose answer to it is still out.
    tick_id: u64,
    outstanding: Vec<u32>,
}

#[derive(Debug, Default)]
struct Inner {
    state: Mutex<State>,
    arrived: Condvar,
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A lane that panicked while holding the lock left a consistent queue.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl crate::clock::WakeOnStop for Inner {
    fn wake(&self) {
        // Under the lock: a waiter between its stop check and its wait cannot miss it.
        let _s = self.lock();
        self.arrived.notify_all();
    }
}

/// Shared by the coordinator and every lane (clone it into each).
#[derive(Debug, Clone)]
pub struct Mailbox(Arc<Inner>);

impl Default for Mailbox {
    fn default() -> Self {
        let inner = Arc::new(Inner::default());
        let wake: Arc<dyn crate::clock::WakeOnStop> = inner.clone();
        crate::clock::wake_on_stop(Arc::downgrade(&wake));
        Self(inner)
    }
}

impl Mailbox {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.0.lock()
    }

    /// A lane's answer for one GPU; wakes the coordinator when it is the last one it waits for.
    pub fn post(&self, r: Response) {
        let mut s = self.lock();
        let mut completes = false;
        if r.tick_id == s.tick_id
            && let Some(at) = s.outstanding.iter().position(|&g| g == r.index)
        {
            s.outstanding.swap_remove(at);
            completes = s.outstanding.is_empty();
        }
        s.answers.push_back(r);
        drop(s);
        if completes {
            self.0.arrived.notify_one();
        }
    }

    /// Every answer left so far, without waiting: the mailbox's queue and `into` (emptied
    /// first) trade places, so that a caller keeping its queue between ticks allocates nothing.
    pub fn swap_answers(&self, into: &mut VecDeque<Response>) {
        into.clear();
        std::mem::swap(&mut self.lock().answers, into);
    }

    /// Every answer left so far, without waiting (the tests' shorthand).
    #[cfg(test)]
    pub fn drain(&self) -> Vec<Response> {
        self.lock().answers.drain(..).collect()
    }

    /// Says that the answers of `gpus` to `tick_id` are coming (call before sending the
    /// requests).
    pub fn expect(&self, tick_id: u64, gpus: &[u32]) {
        let mut s = self.lock();
        s.tick_id = tick_id;
        s.outstanding.clear();
        s.outstanding.extend_from_slice(gpus);
    }

    /// The GPUs whose answer to the tick being waited for is still out.
    pub fn outstanding(&self) -> Vec<u32> {
        self.lock().outstanding.clone()
    }

    /// One expected answer will not come (its request could not be sent).
    pub fn forgo(&self, gpu: u32) {
        let mut s = self.lock();
        s.outstanding.retain(|&g| g != gpu);
    }

    /// Waits until every expected answer arrived, `until` passed or `stop` was set through
    /// [`crate::clock::request_stop`]; true when they all arrived.
    pub fn wait(&self, until: Instant, stop: Option<&AtomicBool>) -> bool {
        let mut s = self.lock();
        while !s.outstanding.is_empty() {
            if stop.is_some_and(|s| s.load(Ordering::Relaxed)) {
                return false;
            }
            let Some(left) = until.checked_duration_since(Instant::now()) else {
                return false;
            };
            s = match self.0.arrived.wait_timeout(s, left) {
                Ok((g, _)) => g,
                Err(e) => e.into_inner().0,
            };
        }
        true
    }

    /// Ends the wait for the current tick: answers still out count as late.
    pub fn close(&self) {
        self.lock().outstanding.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn answer(index: u32, tick_id: u64) -> Response {
        Response {
            index,
            tick_id,
            ts_ms: 0,
            inventory: None,
            sample: None,
            processes: None,
            errors: Vec::new(),
            lost: None,
            instances: Vec::new(),
        }
    }

    #[test]
    fn wakes_when_the_last_answer_arrives_and_keeps_late_ones() {
        let m = Mailbox::default();
        m.expect(2, &[0, 1, 2]);
        m.post(answer(0, 1)); // late, from tick 1: kept, does not count
        let posters: Vec<_> = (0..3)
            .map(|i| {
                let m = m.clone();
                std::thread::spawn(move || m.post(answer(i, 2)))
            })
            .collect();
        assert!(m.wait(Instant::now() + Duration::from_secs(30), None));
        posters.into_iter().for_each(|p| p.join().expect("poster"));
        let all: Vec<_> = m.drain().iter().map(|r| r.tick_id).collect();
        assert_eq!(all.iter().filter(|&&t| t == 2).count(), 3);
        assert_eq!(all.iter().filter(|&&t| t == 1).count(), 1);
    }

    #[test]
    fn a_missing_answer_ends_the_wait_at_the_deadline() {
        let m = Mailbox::default();
        m.expect(5, &[0, 1]);
        m.post(answer(0, 5));
        let start = Instant::now();
        assert!(!m.wait(start + Duration::from_millis(50), None));
        assert!(start.elapsed() >= Duration::from_millis(50));
        assert_eq!(m.outstanding(), vec![1]);
        m.close();
        assert_eq!(m.drain().len(), 1);
        // The straggler arrives later and waits for the next drain.
        m.post(answer(1, 5));
        assert_eq!(m.drain().len(), 1);
    }

    #[test]
    fn a_stop_ends_the_wait_at_once() {
        let m = Mailbox::default();
        m.expect(3, &[0]);
        let stop = Arc::new(AtomicBool::new(false));
        let stopper = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                crate::clock::request_stop(&stop);
            })
        };
        let start = Instant::now();
        assert!(!m.wait(start + Duration::from_secs(3600), Some(&stop)));
        assert!(start.elapsed() < Duration::from_secs(600));
        stopper.join().expect("stopper");
    }

    #[test]
    fn a_gpu_answered_twice_counts_once() {
        let m = Mailbox::default();
        m.expect(7, &[0, 1]);
        m.post(answer(0, 7));
        m.post(answer(0, 7));
        assert!(!m.wait(Instant::now() + Duration::from_millis(20), None));
        m.post(answer(1, 7));
        assert!(m.wait(Instant::now() + Duration::from_millis(20), None));
    }
}
