//! The pipeline threads: a fixed set of threads running jobs from two bounded queues, a light
//! lane bounded by count and a heavy lane bounded by estimated cost (see [`Pool`]). Each lane
//! serves its parties (the service's tenants) in turn ([`TurnQueue`]).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use crate::cancel::CancelToken;
use crate::error::{queue_poisoned, EngineError, Result};

/// Which queue of the [`Pool`] a job waits in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// Cheap work (a phone photo): always goes first.
    Light,
    /// Work estimated to cost `cost_ms` milliseconds of a core (a huge photo): runs on at most
    /// the pool's heavy limit of threads, so light work always has a thread.
    Heavy { cost_ms: u64 },
}

/// A fixed set of threads running queued jobs from two bounded queues.
///
/// Within a lane, jobs are taken from their parties in turn, first come first served within a
/// party: a party that floods its lane waits behind its own jobs, while another party's next job
/// is at most one job of each waiting party away. Both bounds stay on the lane's total, so the
/// memory held is what it was with one queue.
///
/// Used for the per-request pipeline (decode, plan, crop) so that callers hand work over and
/// return at once. Light jobs wait in a queue bounded by count and always go first. Heavy jobs
/// wait in a queue bounded by their estimated cost, and at most `heavy_limit` threads run them,
/// so a burst of huge photos neither starves small ones nor queues more work than can finish
/// in reasonable time: beyond the budget the answer is `OVERLOADED` at once.
pub struct Pool {
    shared: Arc<PoolShared>,
}

type Job = Box<dyn FnOnce(Option<EngineError>) + Send + 'static>;

struct Task {
    id: u64,
    job: Job,
    lane: Lane,
}

/// A queue that serves its parties in turn: each party's jobs in arrival order, the parties
/// round robin. `order` holds each party with waiting jobs once, the next to be served first.
#[derive(Default)]
struct TurnQueue {
    parties: HashMap<u64, VecDeque<Task>>,
    order: VecDeque<u64>,
    len: usize,
}

impl TurnQueue {
    fn len(&self) -> usize {
        self.len
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn push(&mut self, party: u64, task: Task) {
        let queue = self.parties.entry(party).or_default();
        if queue.is_empty() {
            self.order.push_back(party);
        }
        queue.push_back(task);
        self.len += 1;
    }

    /// The next party's oldest job; the party goes to the back of the turn when it has more.
    fn pop(&mut self) -> Option<Task> {
        let party = self.order.pop_front()?;
        let queue = self.parties.get_mut(&party)?;
        let task = queue.pop_front();
        if queue.is_empty() {
            self.parties.remove(&party);
        } else {
            self.order.push_back(party);
        }
        self.len -= usize::from(task.is_some());
        task
    }

    fn contains(&self, id: u64) -> bool {
        self.parties.values().any(|q| q.iter().any(|t| t.id == id))
    }

    fn remove(&mut self, id: u64) -> Option<Task> {
        let (&party, queue) = self.parties.iter_mut().find(|(_, q)| q.iter().any(|t| t.id == id))?;
        let at = queue.iter().position(|t| t.id == id)?;
        let task = queue.remove(at)?;
        if queue.is_empty() {
            self.parties.remove(&party);
            self.order.retain(|&p| p != party);
        }
        self.len -= 1;
        Some(task)
    }
}

struct PoolState {
    light: TurnQueue,
    heavy: TurnQueue,
    heavy_running: usize,
    /// Estimated cost of the heavy jobs queued and running.
    heavy_cost_ms: u64,
    next_id: u64,
}

struct PoolShared {
    state: Mutex<PoolState>,
    ready: Condvar,
    closed: AtomicBool,
    capacity: usize,
    heavy_limit: usize,
    heavy_budget_ms: u64,
    name: &'static str,
}

/// Sizing of a [`Pool`].
#[derive(Debug, Clone)]
pub struct PoolConfig {
    pub name: &'static str,
    pub threads: usize,
    /// Light jobs that may wait.
    pub capacity: usize,
    /// Threads that may run heavy jobs at once (at most `threads - 1` when there are two or more).
    pub heavy_limit: usize,
    /// Estimated milliseconds of heavy work that may be queued and running together; one heavy
    /// job is always admitted when none is queued or running.
    pub heavy_budget_ms: u64,
}

impl Pool {
    pub fn new(name: &'static str, threads: usize, capacity: usize) -> Result<Pool> {
        Pool::with_config(PoolConfig { name, threads, capacity, heavy_limit: 1, heavy_budget_ms: u64::MAX })
    }

    pub fn with_config(config: PoolConfig) -> Result<Pool> {
        let threads = config.threads.max(1);
        let heavy_limit = if threads > 1 { config.heavy_limit.clamp(1, threads - 1) } else { 1 };
        let shared = Arc::new(PoolShared {
            state: Mutex::new(PoolState { light: TurnQueue::default(), heavy: TurnQueue::default(), heavy_running: 0, heavy_cost_ms: 0, next_id: 0 }),
            ready: Condvar::new(),
            closed: AtomicBool::new(false),
            capacity: config.capacity.max(1),
            heavy_limit,
            heavy_budget_ms: config.heavy_budget_ms,
            name: config.name,
        });
        for n in 0..threads {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name(format!("face-{}-{n}", config.name))
                .spawn(move || pool_thread(&shared))
                .map_err(|e| EngineError::Internal(format!("cannot spawn pool thread: {e}")))?;
        }
        Ok(Pool { shared })
    }

    /// Queues a light job, or refuses it when the queue is full.
    pub fn spawn(&self, job: impl FnOnce() + Send + 'static) -> Result<()> {
        self.submit(Lane::Light, None, move |refused| {
            if refused.is_none() {
                job()
            }
        })
    }

    /// Queues a job in its lane, or refuses it (`OVERLOADED`) when the lane is full. The job
    /// runs with `None`, or is called with `Some(error)` instead of running when it is dropped
    /// from the queue: its token was cancelled (the job is removed at once) or the pool closed.
    pub fn submit(&self, lane: Lane, token: Option<&CancelToken>, job: impl FnOnce(Option<EngineError>) + Send + 'static) -> Result<()> {
        self.submit_for(0, lane, token, job)
    }

    /// [`Pool::submit`] for `party`: its jobs take their turn with other parties' in the lane.
    pub fn submit_for(&self, party: u64, lane: Lane, token: Option<&CancelToken>, job: impl FnOnce(Option<EngineError>) + Send + 'static) -> Result<()> {
        let id = {
            let mut st = self.shared.state.lock().map_err(|_| queue_poisoned())?;
            if self.shared.closed.load(Ordering::Acquire) {
                return Err(EngineError::Internal("engine is closed".into()));
            }
            let id = st.next_id;
            st.next_id += 1;
            let task = Task { id, job: Box::new(job), lane };
            match lane {
                Lane::Light => {
                    if st.light.len() >= self.shared.capacity {
                        return Err(EngineError::Overloaded(self.shared.name));
                    }
                    st.light.push(party, task);
                }
                Lane::Heavy { cost_ms } => {
                    let busy = !st.heavy.is_empty() || st.heavy_running > 0;
                    // The work ahead is shared by the heavy threads; this job's answer comes
                    // after its share of it and its own cost.
                    let wait_ms = st.heavy_cost_ms / self.shared.heavy_limit as u64 + cost_ms;
                    if busy && wait_ms > self.shared.heavy_budget_ms {
                        return Err(EngineError::Backlog { wait_ms, limit_ms: self.shared.heavy_budget_ms });
                    }
                    if busy && st.heavy.len() >= self.shared.capacity {
                        return Err(EngineError::Overloaded("heavy image"));
                    }
                    st.heavy_cost_ms += cost_ms;
                    st.heavy.push(party, task);
                }
            }
            id
        };
        self.shared.ready.notify_all();
        if let Some(token) = token {
            // A cancelled job leaves the queue at once, so its place and its share of the
            // heavy budget go to the next request rather than to a client that has gone.
            let shared = Arc::downgrade(&self.shared);
            token.on_cancel(move || {
                let Some(shared) = shared.upgrade() else { return };
                let removed = shared.state.lock().ok().and_then(|mut st| {
                    let queue = if st.light.contains(id) { &mut st.light } else { &mut st.heavy };
                    let task = queue.remove(id)?;
                    if let Lane::Heavy { cost_ms } = task.lane {
                        st.heavy_cost_ms = st.heavy_cost_ms.saturating_sub(cost_ms);
                    }
                    Some(task)
                });
                if let Some(task) = removed {
                    (task.job)(Some(EngineError::Cancelled));
                }
            });
        }
        Ok(())
    }

    /// Jobs waiting in each lane (light, heavy), for tests and metrics.
    pub fn queued(&self) -> (usize, usize) {
        self.shared.state.lock().map(|st| (st.light.len(), st.heavy.len())).unwrap_or((0, 0))
    }
}

fn pool_thread(shared: &PoolShared) {
    loop {
        let task = {
            let Ok(mut st) = shared.state.lock() else { return };
            loop {
                if let Some(task) = st.light.pop() {
                    break task;
                }
                if st.heavy_running < shared.heavy_limit {
                    if let Some(task) = st.heavy.pop() {
                        st.heavy_running += 1;
                        break task;
                    }
                }
                if shared.closed.load(Ordering::Acquire) && st.light.is_empty() && st.heavy.is_empty() {
                    return;
                }
                st = match shared.ready.wait(st) {
                    Ok(st) => st,
                    Err(_) => return,
                };
            }
        };
        let lane = task.lane;
        // A panicking job must not take the thread down with it; the job's own completion
        // handle reports the failure to its caller.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (task.job)(None)));
        if let Lane::Heavy { cost_ms } = lane {
            if let Ok(mut st) = shared.state.lock() {
                st.heavy_running -= 1;
                st.heavy_cost_ms = st.heavy_cost_ms.saturating_sub(cost_ms);
            }
            shared.ready.notify_all();
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        // Queued jobs still run; threads exit once the queues are empty.
        self.shared.closed.store(true, Ordering::Release);
        self.shared.ready.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{gate, wait_on};
    use std::sync::mpsc;
    use std::time::Duration;

    #[test]
    fn pool_runs_jobs_and_refuses_when_full() {
        let pool = Pool::new("test", 1, 2).unwrap();
        let gate = Arc::new((Mutex::new(false), Condvar::new()));
        let (tx, rx) = mpsc::channel();
        let g = Arc::clone(&gate);
        let t = tx.clone();
        pool.spawn(move || {
            let (lock, cv) = &*g;
            let mut open = lock.lock().unwrap();
            while !*open {
                open = cv.wait(open).unwrap();
            }
            t.send(0).unwrap();
        })
        .unwrap();
        // Wait until the blocking job has left the queue.
        while pool.queued() != (0, 0) {
            std::thread::yield_now();
        }
        for i in 1..=2 {
            let t = tx.clone();
            pool.spawn(move || t.send(i).unwrap()).unwrap();
        }
        assert_eq!(pool.spawn(|| ()).unwrap_err().code(), "OVERLOADED");
        {
            let (lock, cv) = &*gate;
            *lock.lock().unwrap() = true;
            cv.notify_all();
        }
        let mut got: Vec<i32> = (0..3).map(|_| rx.recv().unwrap()).collect();
        got.sort();
        assert_eq!(got, vec![0, 1, 2]);
        pool.spawn(|| panic!("job panics")).unwrap();
        let t = tx.clone();
        pool.spawn(move || t.send(9).unwrap()).unwrap();
        assert_eq!(rx.recv().unwrap(), 9, "thread survives a panicking job");
    }

    #[test]
    fn light_jobs_pass_heavy_ones_and_heavy_work_is_budgeted() {
        let pool = Pool::with_config(PoolConfig { name: "test", threads: 2, capacity: 8, heavy_limit: 1, heavy_budget_ms: 1000 }).unwrap();
        let (gate, open) = gate();
        let (tx, rx) = mpsc::channel();
        let g = Arc::clone(&gate);
        let t = tx.clone();
        pool.submit(Lane::Heavy { cost_ms: 600 }, None, move |_| {
            wait_on(&g);
            t.send("heavy 1").unwrap();
        })
        .unwrap();
        while pool.queued().1 != 0 {
            std::thread::yield_now();
        }
        // Queued and running heavy work together may not pass the budget...
        let t = tx.clone();
        pool.submit(Lane::Heavy { cost_ms: 300 }, None, move |_| t.send("heavy 2").unwrap()).unwrap();
        let refused = pool.submit(Lane::Heavy { cost_ms: 300 }, None, |_| ()).unwrap_err();
        assert_eq!(refused.code(), "OVERLOADED");
        // 900 ms queued and running on the one heavy thread, then its own 300.
        assert!(refused.to_string().contains("answered in about 1200 ms, beyond the 1000 ms"), "{refused}");
        // ...and the second heavy job waits for the first, while a light one runs on the free thread.
        let t = tx.clone();
        pool.spawn(move || t.send("light").unwrap()).unwrap();
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), "light");
        assert_eq!(pool.queued(), (0, 1));
        open();
        assert_eq!(rx.recv().unwrap(), "heavy 1");
        assert_eq!(rx.recv().unwrap(), "heavy 2");
    }

    #[test]
    fn parties_take_turns_in_a_lane() {
        let pool = Pool::new("test", 1, 64).unwrap();
        let (gate, open) = gate();
        let g = Arc::clone(&gate);
        pool.spawn(move || wait_on(&g)).unwrap();
        while pool.queued() != (0, 0) {
            std::thread::yield_now();
        }
        // Party 1 floods first; party 2's jobs, queued after, still run every other turn.
        let (tx, rx) = mpsc::channel();
        for (party, n) in [(1u64, 6), (2, 3)] {
            for k in 0..n {
                let t = tx.clone();
                pool.submit_for(party, Lane::Light, None, move |_| t.send((party, k)).unwrap()).unwrap();
            }
        }
        // A cancelled job of party 1 leaves its place in the turn.
        let token = CancelToken::new();
        pool.submit_for(1, Lane::Light, Some(&token), |_| ()).unwrap();
        token.cancel();
        assert_eq!(pool.queued(), (9, 0));
        open();
        let order: Vec<(u64, i32)> = (0..9).map(|_| rx.recv_timeout(Duration::from_secs(5)).unwrap()).collect();
        assert_eq!(order, vec![(1, 0), (2, 0), (1, 1), (2, 1), (1, 2), (2, 2), (1, 3), (1, 4), (1, 5)]);
    }

    #[test]
    fn cancelled_jobs_leave_the_queue_at_once() {
        let pool = Pool::new("test", 1, 4).unwrap();
        let (gate, open) = gate();
        let g = Arc::clone(&gate);
        pool.spawn(move || wait_on(&g)).unwrap();
        while pool.queued() != (0, 0) {
            std::thread::yield_now();
        }
        let token = CancelToken::new();
        let (tx, rx) = mpsc::channel();
        pool.submit(Lane::Light, Some(&token), move |refused| tx.send(refused.map(|e| e.code())).unwrap()).unwrap();
        assert_eq!(pool.queued(), (1, 0));
        token.cancel();
        // Answered while the only thread is still busy: the job was dropped, not run.
        assert_eq!(rx.recv_timeout(Duration::from_secs(1)).unwrap(), Some("CANCELLED"));
        assert_eq!(pool.queued(), (0, 0));
        assert!(token.check().is_err());
        open();
        // A hook registered after cancelling runs at once.
        let (tx, rx) = mpsc::channel();
        token.on_cancel(move || tx.send(()).unwrap());
        rx.recv_timeout(Duration::from_secs(1)).unwrap();
    }
}
