//! The engine: image bytes in, faces with boxes, keypoints, embeddings and attributes out.
//!
//! Threads, from the caller inwards:
//! - pipeline threads (a bounded [`Pool`]) decode the image, plan the detector passes and cut
//!   the face crops; [`Engine::submit`] hands a request to them and returns at once;
//! - detector workers and face workers ([`Batcher`]s) own the ONNX Runtime sessions and run
//!   whatever the pipeline threads queue, several requests' inputs per batch when they arrive
//!   together.
//!
//! Everything between the bytes and the result stays in Rust; nothing per pixel or per face
//! crosses into JavaScript.
//!
//! This file holds [`Engine`] and its calls; the parts live beside it in `engine/`:
//! - `options` — [`EngineOptions`] with their one validation, [`AnalyzeOptions`]
//! - `results` — [`Analysis`], [`Face`], [`EngineInfo`], [`QueueDepth`]
//! - `sessions` — the session plan: providers' options, fixed shapes, warm-up; [`describe_sessions`]
//! - `open` — [`Engine::open`]: pick the models, start the worker stages and the pipeline threads
//! - `models` — which manifest models the options pick, and where age and gender come from
//! - `stage` — what every model stage's workers start from: runtime, providers, session plan, batching
//! - `detector_stage` — the detector workers and each detector family's passes
//! - `face_stage` — the face workers: recogniser, age/gender and emotion models
//! - `estimate` — a request's cost from its header: its lane and decode scale
//! - `pipeline` — one analysis: decode → detect → crops → face workers → faces
//! - `crop` — the candidate faces crops are cut around, keypoints, templates and the photo → crop transforms
//! - `quality` — [`quality`](fn@quality), how usable a face is for recognition

mod crop;
mod detector_stage;
mod estimate;
mod face_stage;
mod models;
mod open;
mod options;
mod pipeline;
mod quality;
mod results;
mod sessions;
mod stage;

use std::sync::Arc;

use crate::batcher::Batcher;
use crate::cancel::CancelToken;
use crate::error::{EngineError, Result};
use crate::image_io::DecodeLimits;
use crate::manifest::Decoder;
use crate::pool::Pool;
use crate::simd;
use crate::telemetry::{Drained, Telemetry};

use crop::CropSpec;
use detector_stage::DetectorStage;
use face_stage::{FaceJob, FaceOut};
use models::AttributeSource;

pub use options::{AnalyzeOptions, EngineOptions};
pub use quality::quality;
pub use results::{Analysis, EngineInfo, Face, QueueDepth, SessionInfo};
pub use sessions::describe_sessions;

/// What the pipeline threads share: the stages and how to cut crops for them.
struct Inner {
    limits: DecodeLimits,
    detector: DetectorStage,
    /// Keypoint order of the detections.
    decoder: Decoder,
    faces: Batcher<FaceJob, FaceOut>,
    /// Crops of the recogniser spec's models, in its order.
    recognizer_crops: Vec<CropSpec>,
    /// Crops of the face worker's attribute models, in its order.
    attribute_crops: Vec<CropSpec>,
    age_from: AttributeSource,
    gender_from: AttributeSource,
    emotion_crop: Option<CropSpec>,
    info: EngineInfo,
    telemetry: Arc<Telemetry>,
}

/// A loaded engine. Cheap to clone; the last clone dropped stops the worker threads once
/// their queued work is done.
#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
    pool: Arc<Pool>,
}

impl Engine {
    /// What the engine runs on.
    pub fn info(&self) -> EngineInfo {
        self.inner.info.clone()
    }

    /// Work waiting at each stage right now.
    pub fn queue_depth(&self) -> QueueDepth {
        let (light, heavy) = self.pool.queued();
        QueueDepth { light, heavy, detector: self.inner.detector.queued(), faces: self.inner.faces.queued() }
    }

    /// Model runs since the last call (see [`crate::telemetry`]).
    pub fn drain_telemetry(&self) -> Drained {
        self.inner.telemetry.drain()
    }

    /// Runs the whole analysis on the calling thread (blocking on the model workers).
    pub fn analyze(&self, bytes: &[u8], opts: &AnalyzeOptions) -> Result<Analysis> {
        let estimate = self.inner.estimate(bytes, opts)?;
        self.inner.analyze(bytes, opts, &estimate, &CancelToken::new())
    }

    /// Milliseconds of one core this analysis is estimated to cost, from the image header
    /// alone: what admission to the heavy lane weighs.
    pub fn estimate_ms(&self, bytes: &[u8], opts: &AnalyzeOptions) -> Result<u64> {
        Ok(self.inner.estimate(bytes, opts)?.millis)
    }

    /// Queues an analysis on the pipeline threads and returns at once; `done` runs on a
    /// pipeline thread with the result. Fails when the image is refused from its header or the
    /// queue is full (OVERLOADED), in which case `done` is not called.
    pub fn submit(&self, bytes: Vec<u8>, opts: AnalyzeOptions, done: impl FnOnce(Result<Analysis>) + Send + 'static) -> Result<()> {
        self.submit_cancellable(bytes, opts, &CancelToken::new(), done)
    }

    /// [`Engine::submit`], with a token that withdraws the request: once `cancel` is cancelled,
    /// `done` gets `Err(Cancelled)` at once (on the cancelling thread), a queued request is
    /// dropped without running and a running one stops at its next stage.
    ///
    /// The image header is read here, before queueing, to estimate the request's cost: cheap
    /// requests (a phone photo) go to the light lane; expensive ones (many detector windows,
    /// tens of megapixels to decode) to the heavy lane, whose queue is bounded by estimated
    /// time, so a burst of huge photos is refused with OVERLOADED instead of stalling everyone.
    pub fn submit_cancellable(
        &self,
        bytes: Vec<u8>,
        opts: AnalyzeOptions,
        cancel: &CancelToken,
        done: impl FnOnce(Result<Analysis>) + Send + 'static,
    ) -> Result<()> {
        self.submit_for(0, bytes, opts, cancel, done)
    }

    /// [`Engine::submit_cancellable`] for `party` (the service's tenant): in its lane, the
    /// request takes its turn with other parties' requests rather than waiting behind all of
    /// them ([`crate::pool::Pool`]).
    pub fn submit_for(
        &self,
        party: u64,
        bytes: Vec<u8>,
        opts: AnalyzeOptions,
        cancel: &CancelToken,
        done: impl FnOnce(Result<Analysis>) + Send + 'static,
    ) -> Result<()> {
        cancel.check()?;
        let estimate = self.inner.estimate(&bytes, &opts)?;
        let lane = estimate.lane();
        // `done` runs once: from the job, or from the cancel hook, whichever comes first.
        let done = Arc::new(std::sync::Mutex::new(Some(done)));
        let finish = {
            let done = Arc::clone(&done);
            move |result: Result<Analysis>| {
                if let Some(done) = done.lock().ok().and_then(|mut d| d.take()) {
                    done(result);
                }
            }
        };
        let finish_on_cancel = finish.clone();
        let inner = Arc::clone(&self.inner);
        let token = cancel.clone();
        self.pool.submit_for(party, lane, Some(cancel), move |refused| {
            if let Some(e) = refused {
                return finish(Err(e));
            }
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| inner.analyze(&bytes, &opts, &estimate, &token)))
                .unwrap_or_else(|_| Err(EngineError::Internal("analysis panicked".into())));
            finish(result);
        })?;
        cancel.on_cancel(move || finish_on_cancel(Err(EngineError::Cancelled)));
        Ok(())
    }

    /// Runs any CPU-heavy closure on the pipeline threads (same queue and limit as `submit`).
    pub fn spawn(&self, job: impl FnOnce() + Send + 'static) -> Result<()> {
        self.pool.spawn(job)
    }

    /// Cosine similarity of every row of `a` against every row of `b`.
    pub fn similarity(a: &[f32], b: &[f32], dim: usize) -> Result<Vec<f32>> {
        if dim == 0 || !a.len().is_multiple_of(dim) || !b.len().is_multiple_of(dim) {
            return Err(EngineError::BadParam(format!("vector lengths {} and {} are not multiples of dim {dim}", a.len(), b.len())));
        }
        if a.iter().chain(b).any(|v| !v.is_finite()) {
            return Err(EngineError::BadParam("vectors contain NaN or infinity".into()));
        }
        Ok(simd::similarity_matrix(a, b, dim))
    }
}
