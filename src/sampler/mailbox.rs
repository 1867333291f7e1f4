//! Where GPU workers leave their answers: one queue the coordinator drains once per tick,
//! woken once, by the answer that completes the tick (or by its deadline), instead of once
//! per GPU.
//!
//! Invariants: every answer is kept until drained, whatever tick it belongs to (a late one
//! frees its GPU for the next tick); only answers to the tick being waited for count
//! towards waking the coordinator; a wait never outlasts its deadline.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use super::worker::Response;

#[derive(Debug, Default)]
struct State {
    answers: VecDeque<Response>,
    /// The tick being waited for and how many of its answers are still out.
    tick_id: u64,
    outstanding: usize,
}

/// Shared by the coordinator and every worker (clone it into each).
#[derive(Debug, Clone, Default)]
pub struct Mailbox(Arc<(Mutex<State>, Condvar)>);

impl Mailbox {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A worker that panicked while holding the lock left a consistent queue.
        self.0.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A worker's answer; wakes the coordinator when it is the last one it waits for.
    pub fn post(&self, r: Response) {
        let mut s = self.lock();
        let completes = r.tick_id == s.tick_id && s.outstanding == 1;
        if r.tick_id == s.tick_id && s.outstanding > 0 {
            s.outstanding -= 1;
        }
        s.answers.push_back(r);
        drop(s);
        if completes {
            self.0.1.notify_one();
        }
    }

    /// Every answer left so far, without waiting.
    pub fn drain(&self) -> Vec<Response> {
        self.lock().answers.drain(..).collect()
    }

    /// Says that `n` answers to `tick_id` are coming (call before sending the requests).
    pub fn expect(&self, tick_id: u64, n: usize) {
        let mut s = self.lock();
        s.tick_id = tick_id;
        s.outstanding = n;
    }

    /// One expected answer will not come (its request could not be sent).
    pub fn forgo(&self) {
        let mut s = self.lock();
        s.outstanding = s.outstanding.saturating_sub(1);
    }

    /// Waits until every expected answer arrived or `deadline` passed, then drains.
    pub fn wait(&self, deadline: Instant) -> Vec<Response> {
        let mut s = self.lock();
        while s.outstanding > 0 {
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                break;
            };
            s = match self.0.1.wait_timeout(s, left) {
                Ok((g, _)) => g,
                Err(e) => e.into_inner().0,
            };
        }
        s.outstanding = 0;
        s.answers.drain(..).collect()
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
            inventory: None,
            sample: None,
            processes: None,
            errors: Vec::new(),
            lost: None,
        }
    }

    #[test]
    fn wakes_when_the_last_answer_arrives_and_keeps_late_ones() {
        let m = Mailbox::default();
        m.expect(2, 3);
        m.post(answer(0, 1)); // late, from tick 1: kept, does not count
        let posters: Vec<_> = (0..3)
            .map(|i| {
                let m = m.clone();
                std::thread::spawn(move || m.post(answer(i, 2)))
            })
            .collect();
        let got = m.wait(Instant::now() + Duration::from_secs(30));
        posters.into_iter().for_each(|p| p.join().expect("poster"));
        let rest = m.drain();
        let all: Vec<_> = got.iter().chain(&rest).map(|r| r.tick_id).collect();
        assert_eq!(all.iter().filter(|&&t| t == 2).count(), 3);
        assert_eq!(all.iter().filter(|&&t| t == 1).count(), 1);
    }

    #[test]
    fn a_missing_answer_ends_the_wait_at_the_deadline() {
        let m = Mailbox::default();
        m.expect(5, 2);
        m.post(answer(0, 5));
        let start = Instant::now();
        let got = m.wait(start + Duration::from_millis(50));
        assert!(start.elapsed() >= Duration::from_millis(50));
        assert_eq!(got.len(), 1);
        // The straggler arrives later and waits for the next drain.
        m.post(answer(1, 5));
        assert_eq!(m.drain().len(), 1);
    }
}
