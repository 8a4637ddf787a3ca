//! A bounded queue drained in batches by worker threads that own their state.
//!
//! ONNX Runtime sessions need `&mut` to run, and running several inputs as one batch is far
//! cheaper than one at a time, so each model gets a few worker threads. Each worker builds its
//! own state (its sessions) on its own thread, then repeatedly takes up to `max_batch` queued
//! items. A partial batch waits at most `max_wait` after its first item was queued for more to
//! arrive: latency for a lone request is bounded, while a burst fills whole batches.
//!
//! The queue is bounded: a submission that would overflow it fails at once with
//! `OVERLOADED` instead of growing memory and latency without limit.
//!
//! The pipeline threads that feed the batchers are a [`Pool`](crate::pool::Pool); requests are
//! withdrawn with a [`CancelToken`](crate::cancel::CancelToken).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::error::{queue_poisoned, EngineError, Result};

/// Sizing of one batcher.
#[derive(Debug, Clone)]
pub struct BatcherConfig {
    /// Used in thread names and in the OVERLOADED message.
    pub name: &'static str,
    pub workers: usize,
    pub max_batch: usize,
    pub max_wait: Duration,
    /// Most items that may wait in the queue (items being processed do not count).
    pub capacity: usize,
}

struct Item<I, O> {
    input: I,
    index: usize,
    queued_at: Instant,
    reply: mpsc::Sender<(usize, Result<O>)>,
}

struct Queue<I, O> {
    items: VecDeque<Item<I, O>>,
    /// Work that waits until `items` is empty (see [`Batcher::run_behind`]).
    behind: VecDeque<Item<I, O>>,
}

impl<I, O> Queue<I, O> {
    fn len(&self) -> usize {
        self.items.len() + self.behind.len()
    }
}

struct Shared<I, O> {
    queue: Mutex<Queue<I, O>>,
    ready: Condvar,
    closed: AtomicBool,
    config: BatcherConfig,
}

/// Handle for submitting work; dropping it lets the workers finish what is queued and exit.
pub struct Batcher<I, O> {
    shared: Arc<Shared<I, O>>,
}

impl<I: Send + 'static, O: Send + 'static> Batcher<I, O> {
    /// Starts `config.workers` threads. `make_worker(n)` runs on worker thread `n` and returns
    /// the function that processes a batch; it must return one result per input, in order.
    /// Fails if any worker fails to build its state.
    pub fn start<M, W>(config: BatcherConfig, make_worker: M) -> Result<Self>
    where
        M: Fn(usize) -> Result<W> + Send + Sync + 'static,
        W: FnMut(Vec<I>) -> Result<Vec<O>> + 'static,
    {
        if config.workers == 0 || config.max_batch == 0 || config.capacity == 0 {
            return Err(EngineError::BadParam(format!("{}: workers, batch and capacity must be positive", config.name)));
        }
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue { items: VecDeque::new(), behind: VecDeque::new() }),
            ready: Condvar::new(),
            closed: AtomicBool::new(false),
            config: config.clone(),
        });
        let make_worker = Arc::new(make_worker);
        let (started_tx, started_rx) = mpsc::channel::<Result<()>>();
        for n in 0..config.workers {
            let shared = Arc::clone(&shared);
            let make_worker = Arc::clone(&make_worker);
            let started_tx = started_tx.clone();
            std::thread::Builder::new()
                .name(format!("face-{}-{n}", config.name))
                .spawn(move || {
                    let built = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| make_worker(n)))
                        .unwrap_or_else(|_| Err(EngineError::Internal(format!("worker {n} panicked while starting"))));
                    match built {
                        Ok(work) => {
                            let _ = started_tx.send(Ok(()));
                            drop(started_tx);
                            worker_loop(&shared, work);
                        }
                        Err(e) => {
                            let _ = started_tx.send(Err(e));
                        }
                    }
                })
                .map_err(|e| EngineError::Internal(format!("cannot spawn worker: {e}")))?;
        }
        drop(started_tx);
        let batcher = Batcher { shared };
        for _ in 0..config.workers {
            match started_rx.recv() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(e), // dropping `batcher` stops the workers that did start
                Err(_) => return Err(EngineError::Internal("worker exited while starting".into())),
            }
        }
        Ok(batcher)
    }

    /// Queues all inputs (or none, if they do not fit) and blocks until every result is back.
    /// Results come back in input order.
    pub fn run(&self, inputs: Vec<I>) -> Result<Vec<O>> {
        self.submit(inputs, false)
    }

    /// [`Batcher::run`] for work that may wait: its inputs are taken only when no input of
    /// `run` is waiting, so a big job spread over every worker still lets small ones pass.
    pub fn run_behind(&self, inputs: Vec<I>) -> Result<Vec<O>> {
        self.submit(inputs, true)
    }

    /// Worker threads.
    pub fn workers(&self) -> usize {
        self.shared.config.workers
    }

    fn submit(&self, inputs: Vec<I>, behind: bool) -> Result<Vec<O>> {
        let n = inputs.len();
        if n == 0 {
            return Ok(Vec::new());
        }
        let (tx, rx) = mpsc::channel();
        {
            let mut q = self.shared.queue.lock().map_err(|_| queue_poisoned())?;
            if self.shared.closed.load(Ordering::Acquire) {
                return Err(EngineError::Internal(format!("{} workers have stopped", self.shared.config.name)));
            }
            if q.len() + n > self.shared.config.capacity {
                return Err(EngineError::Overloaded(self.shared.config.name));
            }
            let now = Instant::now();
            let queue = if behind { &mut q.behind } else { &mut q.items };
            for (index, input) in inputs.into_iter().enumerate() {
                queue.push_back(Item { input, index, queued_at: now, reply: tx.clone() });
            }
        }
        drop(tx);
        if n == 1 {
            self.shared.ready.notify_one();
        } else {
            self.shared.ready.notify_all();
        }
        let mut out: Vec<Option<O>> = (0..n).map(|_| None).collect();
        for _ in 0..n {
            let (index, result) = rx
                .recv()
                .map_err(|_| EngineError::Internal(format!("{} worker dropped a request", self.shared.config.name)))?;
            out[index] = Some(result?);
        }
        Ok(out.into_iter().map(|o| o.expect("every index answered once")).collect())
    }

    /// Items waiting right now (for metrics and tests).
    pub fn queued(&self) -> usize {
        self.shared.queue.lock().map(|q| q.len()).unwrap_or(0)
    }
}

impl<I, O> Drop for Batcher<I, O> {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::Release);
        self.shared.ready.notify_all();
    }
}

fn worker_loop<I, O, W>(shared: &Shared<I, O>, mut work: W)
where
    W: FnMut(Vec<I>) -> Result<Vec<O>>,
{
    let max_batch = shared.config.max_batch;
    loop {
        let batch = {
            let Ok(mut q) = shared.queue.lock() else { return };
            // Wait for a first item.
            while q.len() == 0 {
                if shared.closed.load(Ordering::Acquire) {
                    return;
                }
                q = match shared.ready.wait(q) {
                    Ok(q) => q,
                    Err(_) => return,
                };
            }
            if q.items.is_empty() {
                // Only work that waits behind: take it as it is, without waiting for more.
                let take = q.behind.len().min(max_batch);
                q.behind.drain(..take).collect::<Vec<_>>()
            } else {
                // Give a partial batch until its oldest item's deadline to fill up.
                let deadline = q.items[0].queued_at + shared.config.max_wait;
                while q.items.len() < max_batch && !shared.closed.load(Ordering::Acquire) {
                    let now = Instant::now();
                    if now >= deadline {
                        break;
                    }
                    q = match shared.ready.wait_timeout(q, deadline - now) {
                        Ok((q, _)) => q,
                        Err(_) => return,
                    };
                    if q.items.is_empty() {
                        break; // another worker took them; start over
                    }
                }
                let take = q.items.len().min(max_batch);
                q.items.drain(..take).collect::<Vec<_>>()
            }
        };
        if batch.is_empty() {
            continue;
        }
        let (inputs, replies): (Vec<I>, Vec<_>) =
            batch.into_iter().map(|it| (it.input, (it.index, it.reply))).unzip();
        let count = inputs.len();
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work(inputs)))
            .unwrap_or_else(|_| Err(EngineError::Internal(format!("{} worker panicked", shared.config.name))));
        match result {
            Ok(outputs) if outputs.len() == count => {
                for (out, (index, reply)) in outputs.into_iter().zip(replies) {
                    let _ = reply.send((index, Ok(out)));
                }
            }
            Ok(outputs) => {
                let e = EngineError::Internal(format!("{} worker returned {} results for {count} inputs", shared.config.name, outputs.len()));
                for (index, reply) in replies {
                    let _ = reply.send((index, Err(e.clone())));
                }
            }
            Err(e) => {
                for (index, reply) in replies {
                    let _ = reply.send((index, Err(e.clone())));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{gate, wait_on};
    use std::sync::atomic::AtomicUsize;

    fn config(workers: usize, max_batch: usize, wait_ms: u64, capacity: usize) -> BatcherConfig {
        BatcherConfig { name: "test", workers, max_batch, max_wait: Duration::from_millis(wait_ms), capacity }
    }

    #[test]
    fn results_come_back_in_order() {
        let b = Batcher::start(config(2, 4, 1, 100), |_| Ok(|xs: Vec<u32>| Ok(xs.into_iter().map(|x| x * 2).collect()))).unwrap();
        let out = b.run((0..37).collect()).unwrap();
        assert_eq!(out, (0..37).map(|x| x * 2).collect::<Vec<_>>());
    }

    #[test]
    fn work_behind_waits_for_every_ordinary_input() {
        // One worker, held on a gate by the first input; then two inputs behind and one
        // ordinary input queue up: the ordinary one runs first, then those behind, in order.
        let (gate, open) = gate();
        let (started_tx, started) = mpsc::channel();
        let started_tx = Mutex::new(started_tx);
        let order = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&order);
        let b = Arc::new(
            Batcher::start(config(1, 4, 0, 100), move |_| {
                let (gate, seen, started_tx) = (Arc::clone(&gate), Arc::clone(&seen), started_tx.lock().unwrap().clone());
                Ok(move |xs: Vec<u32>| {
                    if xs == [0] {
                        started_tx.send(()).unwrap();
                        wait_on(&gate);
                    }
                    seen.lock().unwrap().push(xs.clone());
                    Ok(xs)
                })
            })
            .unwrap(),
        );
        let spawn = |behind: bool, xs: Vec<u32>| {
            let b = Arc::clone(&b);
            std::thread::spawn(move || if behind { b.run_behind(xs) } else { b.run(xs) })
        };
        let first = spawn(false, vec![0]);
        started.recv().unwrap();
        let behind = spawn(true, vec![10, 11]);
        while b.queued() != 2 {
            std::thread::yield_now();
        }
        let ordinary = spawn(false, vec![1]);
        while b.queued() != 3 {
            std::thread::yield_now();
        }
        open();
        assert_eq!(first.join().unwrap().unwrap(), vec![0]);
        assert_eq!(ordinary.join().unwrap().unwrap(), vec![1]);
        assert_eq!(behind.join().unwrap().unwrap(), vec![10, 11]);
        assert_eq!(*order.lock().unwrap(), vec![vec![0], vec![1], vec![10, 11]]);
    }

    #[test]
    fn partial_batches_wait_for_company() {
        let sizes = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&sizes);
        let b = Arc::new(
            Batcher::start(config(1, 8, 200, 100), move |_| {
                let seen = Arc::clone(&seen);
                Ok(move |xs: Vec<u32>| {
                    seen.lock().unwrap().push(xs.len());
                    Ok(xs)
                })
            })
            .unwrap(),
        );
        // Four callers arriving together within the wait window share one batch.
        let handles: Vec<_> = (0..4)
            .map(|i| {
                let b = Arc::clone(&b);
                std::thread::spawn(move || b.run(vec![i]).unwrap())
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        let sizes = sizes.lock().unwrap().clone();
        assert!(sizes.len() < 4, "expected batching, got batch sizes {sizes:?}");
    }

    #[test]
    fn lone_item_is_not_held_past_max_wait() {
        let b = Batcher::start(config(1, 64, 20, 10), |_| Ok(|xs: Vec<u8>| Ok(xs))).unwrap();
        let t = Instant::now();
        b.run(vec![1]).unwrap();
        assert!(t.elapsed() < Duration::from_millis(500));
    }

    #[test]
    fn full_queue_is_overloaded() {
        // One worker stuck on a gate; the queue holds 3; the 4th waiting item is refused.
        let gate = Arc::new((Mutex::new(false), Condvar::new()));
        let g = Arc::clone(&gate);
        let started = Arc::new(AtomicUsize::new(0));
        let s = Arc::clone(&started);
        let b = Arc::new(
            Batcher::start(config(1, 1, 0, 3), move |_| {
                let g = Arc::clone(&g);
                let s = Arc::clone(&s);
                Ok(move |xs: Vec<u32>| {
                    s.fetch_add(1, Ordering::SeqCst);
                    let (lock, cv) = &*g;
                    let mut open = lock.lock().unwrap();
                    while !*open {
                        open = cv.wait(open).unwrap();
                    }
                    Ok(xs)
                })
            })
            .unwrap(),
        );
        let spawn = |v: u32| {
            let b = Arc::clone(&b);
            std::thread::spawn(move || b.run(vec![v]))
        };
        let first = spawn(0);
        while started.load(Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
        let waiting: Vec<_> = (1..=3).map(spawn).collect();
        while b.queued() < 3 {
            std::thread::yield_now();
        }
        let err = b.run(vec![99]).unwrap_err();
        assert_eq!(err.code(), "OVERLOADED");
        // A multi-item request that does not fit is refused whole.
        assert_eq!(b.run(vec![1, 2]).unwrap_err().code(), "OVERLOADED");
        {
            let (lock, cv) = &*gate;
            *lock.lock().unwrap() = true;
            cv.notify_all();
        }
        assert_eq!(first.join().unwrap().unwrap(), vec![0]);
        for (i, h) in waiting.into_iter().enumerate() {
            assert_eq!(h.join().unwrap().unwrap(), vec![i as u32 + 1]);
        }
        // Room again once drained.
        assert_eq!(b.run(vec![5]).unwrap(), vec![5]);
    }

    #[test]
    fn worker_errors_and_panics_reach_the_caller() {
        let b = Batcher::start(config(1, 4, 0, 10), |_| {
            Ok(|xs: Vec<i32>| {
                if xs.contains(&-1) {
                    panic!("boom");
                }
                if xs.contains(&0) {
                    return Err(EngineError::Model("bad input".into()));
                }
                Ok(xs)
            })
        })
        .unwrap();
        assert_eq!(b.run(vec![0]).unwrap_err().code(), "MODEL");
        assert_eq!(b.run(vec![-1]).unwrap_err().code(), "INTERNAL");
        assert_eq!(b.run(vec![3]).unwrap(), vec![3], "worker survives a panic");
    }

    #[test]
    fn failing_worker_construction_fails_start() {
        let r = Batcher::<u8, u8>::start(config(2, 1, 0, 1), |n| {
            if n == 1 { Err(EngineError::Model("no model".into())) } else { Ok(|x: Vec<u8>| Ok(x)) }
        });
        assert_eq!(r.err().unwrap().code(), "MODEL");
    }
}
