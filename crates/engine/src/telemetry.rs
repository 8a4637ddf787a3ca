//! What the model workers did, for the service's metrics.
//!
//! Each model run (one batch through one model) is recorded as an event: which model, how
//! many inputs, how long. The service drains the events now and then and feeds them to its
//! own histograms, so the histogram buckets are chosen in one place (the metrics layer) and
//! nothing here needs to know about Prometheus.
//!
//! The buffer is bounded: when nobody drains it (no scrapes), the oldest events are dropped
//! and counted, so memory stays flat however long the service runs unobserved.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// Events kept between drains; at a few hundred batches a second this covers about a minute.
pub const EVENT_CAPACITY: usize = 16_384;

/// One batch run through one model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModelRun {
    /// Position of the model in [`crate::EngineInfo::models`].
    pub model: u16,
    /// Inputs in the batch (faces, or detector windows).
    pub batch: u32,
    pub seconds: f32,
}

/// Events recorded since the last drain.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Drained {
    pub runs: Vec<ModelRun>,
    /// Events dropped because the buffer was full, since the engine started.
    pub dropped_total: u64,
}

#[derive(Default)]
pub struct Telemetry {
    events: Mutex<VecDeque<ModelRun>>,
    dropped: AtomicU64,
}

impl Telemetry {
    pub fn record(&self, model: u16, batch: usize, elapsed: Duration) {
        let run = ModelRun { model, batch: batch as u32, seconds: elapsed.as_secs_f32() };
        // A poisoned lock means a panic mid-push; losing telemetry is better than spreading it.
        let Ok(mut events) = self.events.lock() else { return };
        if events.len() >= EVENT_CAPACITY {
            events.pop_front();
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
        events.push_back(run);
    }

    /// Takes every event recorded so far.
    pub fn drain(&self) -> Drained {
        let runs = self.events.lock().map(|mut e| e.drain(..).collect()).unwrap_or_default();
        Drained { runs, dropped_total: self.dropped.load(Ordering::Relaxed) }
    }

    /// Runs `f` and records it as one batch of `batch` inputs through `model`.
    pub fn timed<T>(&self, model: u16, batch: usize, f: impl FnOnce() -> T) -> T {
        let started = std::time::Instant::now();
        let out = f();
        self.record(model, batch, started.elapsed());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drain_returns_events_once_in_order() {
        let t = Telemetry::default();
        t.record(0, 1, Duration::from_millis(5));
        t.record(1, 8, Duration::from_millis(20));
        let d = t.drain();
        assert_eq!(d.runs.len(), 2);
        assert_eq!((d.runs[0].model, d.runs[0].batch), (0, 1));
        assert_eq!((d.runs[1].model, d.runs[1].batch), (1, 8));
        assert!((d.runs[1].seconds - 0.02).abs() < 1e-6);
        assert_eq!(d.dropped_total, 0);
        assert!(t.drain().runs.is_empty());
    }

    #[test]
    fn a_full_buffer_drops_the_oldest_and_counts_them() {
        let t = Telemetry::default();
        for i in 0..EVENT_CAPACITY + 10 {
            t.record(0, i, Duration::ZERO);
        }
        let d = t.drain();
        assert_eq!(d.runs.len(), EVENT_CAPACITY);
        assert_eq!(d.dropped_total, 10);
        assert_eq!(d.runs[0].batch, 10, "the ten oldest went first");
    }
}
