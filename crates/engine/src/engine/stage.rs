//! What every model stage's workers start from: the runtime, the models' folder, the
//! providers and the session plan their sessions follow, and how their batchers are sized.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::batcher::BatcherConfig;
use crate::providers::Provider;
use crate::runtime::{self, ProviderReport, Runtime, SessionPlan, SessionSource};
use crate::telemetry::Telemetry;

use super::EngineOptions;

/// What every model stage's workers are started with. Each worker loads its own sessions from
/// it on its own thread ([`StageSettings::source`]).
#[derive(Clone)]
pub(super) struct StageSettings {
    rt: &'static Runtime,
    dir: PathBuf,
    providers: Vec<Provider>,
    /// ONNX Runtime intra-op threads per session.
    intra: usize,
    max_batch: usize,
    workers: usize,
    max_wait: Duration,
    /// Inputs that may wait for a worker.
    capacity: usize,
    pub(super) telemetry: Arc<Telemetry>,
    /// What every session a worker builds follows.
    sessions: Arc<SessionPlan>,
}

impl StageSettings {
    /// The settings of an engine opened with `opts` on `providers`, its sessions following `sessions`.
    pub(super) fn new(rt: &'static Runtime, opts: &EngineOptions, providers: Vec<Provider>, telemetry: &Arc<Telemetry>, sessions: &Arc<SessionPlan>) -> StageSettings {
        StageSettings {
            sessions: Arc::clone(sessions),
            rt,
            dir: opts.model_dir.clone(),
            providers,
            intra: opts.intra_threads,
            max_batch: opts.max_batch,
            workers: opts.inference_workers,
            max_wait: Duration::from_micros(opts.batch_wait_us),
            capacity: opts.queue_capacity * 64,
            telemetry: Arc::clone(telemetry),
        }
    }

    /// The stage's batcher, named `name` in thread names and OVERLOADED messages.
    pub(super) fn batcher_config(&self, name: &'static str) -> BatcherConfig {
        BatcherConfig {
            name,
            workers: self.workers,
            max_batch: self.max_batch,
            max_wait: self.max_wait,
            capacity: self.capacity,
        }
    }

    /// What a worker loads its models from: the engine's runtime, models, providers and plan.
    pub(super) fn source(&self) -> SessionSource<'_> {
        SessionSource {
            rt: self.rt,
            dir: &self.dir,
            providers: &self.providers,
            intra: self.intra,
            max_batch: self.max_batch,
            plan: Some(&self.sessions),
        }
    }

    /// Logs which providers a model runs on; only the first worker (`n` 0) of a stage does, as
    /// the others load the same models on the same providers.
    pub(super) fn log_providers(&self, n: usize, model_id: &str, report: &ProviderReport) {
        if n == 0 {
            runtime::log_providers(model_id, &self.providers, report);
        }
    }
}
