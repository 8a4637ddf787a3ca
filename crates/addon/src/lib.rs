//! Node.js bindings for `face-engine`.
//!
//! Deliberately thin: argument conversion, error codes and promise plumbing only. Every export
//! that does real work returns a promise; the work runs on the engine's own threads and the
//! promise settles back on the JavaScript thread. Panics are caught at this boundary and
//! reported as `INTERNAL` rejections rather than aborting the process.

mod error;
mod index;

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::Mutex;

use face_engine::{
    Analysis as CoreAnalysis, AnalyzeOptions as CoreAnalyzeOptions, CancelToken as CoreCancelToken, Engine, EngineError,
    EngineOptions as CoreEngineOptions,
};
use napi::bindgen_prelude::*;
use napi_derive::napi;

use crate::error::{js_error, rejected, PendingPromise};

/// Engine configuration. Passed to the engine unchecked: `Engine::open` checks the values.
// Each field but ageModel and genderModel is a service setting declared once in
// src/config/engine-options.ts; src/config/engine-options.test.ts fails while the two disagree,
// or while a default these docs state "(default ...)" differs from the table's.
#[napi(object)]
pub struct EngineOptions {
    /// Folder holding manifest.json and the converted *.onnx files.
    pub model_dir: String,
    /// Path of the ONNX Runtime shared library (libonnxruntime.so).
    pub ort_library: String,
    /// Execution providers in priority order, e.g. ["tensorrt", "cuda", "cpu"]; unavailable ones are skipped with a log line.
    pub providers: Vec<String>,
    /// ONNX Runtime intra-op threads per session.
    pub intra_threads: u32,
    /// Threads per model stage that own sessions and pull batches.
    pub inference_workers: u32,
    /// Recogniser batch size cap.
    pub max_batch: u32,
    /// How long a partial batch waits for more faces, in microseconds.
    pub batch_wait_us: u32,
    /// Requests allowed to wait; beyond it analyze() rejects with OVERLOADED.
    pub queue_capacity: u32,
    /// Images whose header says width*height > maxPixels are refused before decoding.
    pub max_pixels: f64,
    /// Manifest id of the recogniser (default: the manifest's).
    pub recognizer: Option<String>,
    /// Manifest id of the detector (default: the manifest's).
    pub detector: Option<String>,
    /// Manifest id of the age model (default: the manifest's age, else ageGender, else the recogniser's own head).
    pub age_model: Option<String>,
    /// Manifest id of the gender model (default: the manifest's gender, else ageGender, else the recogniser's own head).
    pub gender_model: Option<String>,
    /// Detector score threshold 0..1 (default: the detector's own, 0.8 for YuNet and 0.7 for BlazeFace).
    pub detect_threshold: Option<f64>,
    /// Smallest face side in pixels searched for in large photos (default 40); sets the
    /// detector's working resolution.
    pub min_face: Option<f64>,
    /// Most bytes decoding one image may hold (default 512 MiB); beyond it IMAGE_TOO_LARGE.
    pub max_decode_bytes: Option<f64>,
    /// Longest side over shortest side beyond which an image is refused with
    /// IMAGE_ASPECT_RATIO (default 20).
    pub max_aspect_ratio: Option<u32>,
    /// Estimated milliseconds of work on huge photos that may be queued and running at once
    /// (default 10000); beyond it such a photo is refused with OVERLOADED.
    pub heavy_queue_ms: Option<u32>,
    /// Threads decoding photos, running the detector's passes and cropping faces (default 0:
    /// one per CPU). Each holds one photo's faces while the face workers embed them, so on a
    /// GPU host more threads than CPUs let batches fill.
    pub pipeline_threads: Option<u32>,
    /// Pipeline threads that may work on huge photos at once (default: half of them, at least 1).
    pub heavy_threads: Option<u32>,
    /// Folder where TensorRT keeps the engines it builds, so a restart does not rebuild them.
    pub tensorrt_cache: Option<String>,
    /// Whether model inputs are padded to a few fixed shapes, each run once before open()
    /// resolves, so a GPU provider prepares for all of them at start-up: "on", "off", or
    /// "auto" (default: on exactly when "tensorrt" or "cuda" is among the providers).
    pub fixed_shapes: Option<String>,
    /// Whether TensorRT may use half-precision kernels (default true).
    pub trt_fp16: Option<bool>,
}

/// What to compute for each face.
#[napi(object)]
pub struct AnalyzeOptions {
    /// Compute L2-normalised embeddings.
    pub embed: bool,
    pub age: bool,
    pub gender: bool,
    pub emotions: bool,
    /// Caller-given [x1, y1, x2, y2] boxes: one face per box, in order, instead of detection.
    pub boxes: Option<Vec<Vec<f64>>>,
    /// Also return a JPEG crop of each face (box plus margin), its longer side at most this many pixels.
    pub thumbnail: Option<u32>,
    /// Whose request this is (the service's tenant): parties take turns in the engine's queues.
    pub party: Option<u32>,
}

/// One face in the EXIF-upright image.
#[napi(object)]
pub struct FaceResult {
    pub x1: i32,
    pub y1: i32,
    pub x2: i32,
    pub y2: i32,
    /// Detector score 0..1 (1 for a caller's box that names none of the detector's faces).
    pub score: f64,
    /// Cut along its keypoints; false for a caller's box where the detector found no face,
    /// cropped upright.
    pub aligned: bool,
    /// Recognition quality 0..1: detector score x size factor x frontality (0 without landmarks).
    pub quality: f64,
    /// Flat [x, y, ...] keypoints used for alignment, in the detector's order. YuNet: right eye,
    /// left eye, nose tip, right mouth corner, left mouth corner (subject's sides). BlazeFace:
    /// right eye, left eye, nose, mouth, right ear, left ear. Empty when none were found.
    pub landmarks: Vec<f64>,
    /// Integer years.
    pub age: Option<u32>,
    #[napi(ts_type = "\"male\" | \"female\"")]
    pub gender: Option<String>,
    /// All 7 labels, most likely first.
    pub emotions: Option<Vec<String>>,
    /// JPEG bytes, when options.thumbnail was given.
    pub thumbnail: Option<Buffer>,
}

/// Result of analyze().
#[napi(object)]
pub struct Analysis {
    /// Upright image width.
    pub width: u32,
    /// Upright image height.
    pub height: u32,
    /// Detected faces biggest first; caller boxes in the given order.
    pub faces: Vec<FaceResult>,
    /// faces.length * dim values, row-major; empty when embed is false.
    pub embeddings: Float32Array,
    pub dim: u32,
}

/// A loaded model.
#[napi(object)]
pub struct ModelInfo {
    pub id: String,
    pub onnx: String,
}

/// One execution provider's options for one model, exactly as ONNX Runtime is given them.
#[napi(object)]
pub struct ProviderOptions {
    /// "tensorrt" or "cuda" (the CPU provider takes none).
    pub name: String,
    /// ONNX Runtime's option names and values, e.g. trt_fp16_enable: "true",
    /// trt_profile_min_shapes: "input:1x3x320x320".
    pub options: HashMap<String, String>,
}

/// How the engine builds one model's sessions.
#[napi(object)]
pub struct SessionInfo {
    /// Manifest id.
    pub model: String,
    /// The options of each GPU provider asked for.
    pub providers: Vec<ProviderOptions>,
    /// Input tensor shapes the model runs at with fixed shapes (its warm-up); empty without.
    pub shapes: Vec<Vec<i64>>,
}

/// One model run at one shape before the engine was ready.
#[napi(object)]
pub struct WarmupRun {
    pub model: String,
    pub shape: Vec<i64>,
    /// Milliseconds, the slowest worker's.
    pub ms: f64,
}

/// What the engine runs on.
#[napi(object)]
pub struct EngineInfo {
    /// Execution providers in use, highest priority first.
    pub providers: Vec<String>,
    /// SIMD level used for similarity ("avx512f", "avx2+fma" or "scalar").
    pub simd: String,
    pub recognizer: String,
    /// Why that recogniser: "option", "gpu default", "avx-512 default" or "cpu default".
    pub recognizer_source: String,
    pub detector: String,
    pub dim: u32,
    pub models: Vec<ModelInfo>,
    /// Whether inputs run at fixed shapes.
    pub fixed_shapes: bool,
    /// Every model's sessions, in the order of models.
    pub sessions: Vec<SessionInfo>,
    /// With fixed shapes, every model at every shape, run before open() resolved.
    pub warmup: Vec<WarmupRun>,
}

/// Face detection, embedding and attributes over ONNX Runtime.
#[napi]
pub struct FaceEngine {
    engine: Mutex<Option<Engine>>,
}

#[napi]
impl FaceEngine {
    /// Loads the runtime and models and starts the worker threads.
    #[napi(ts_return_type = "Promise<FaceEngine>")]
    pub fn open<'env>(env: &'env Env, opts: EngineOptions) -> Result<Object<'env>> {
        // Passed through unchecked: Engine::open checks every option (EngineOptions::validate)
        // and rejects with BAD_PARAM naming it.
        let options = core_engine_options(opts);
        let (pending, promise) = PendingPromise::new(env)?;
        let in_thread = pending.clone();
        // Loading models takes a while; it gets a thread of its own.
        let spawned = std::thread::Builder::new().name("face-engine-open".into()).spawn(move || {
            let result = catch_unwind(AssertUnwindSafe(|| Engine::open(options)))
                .unwrap_or_else(|_| Err(EngineError::Internal("panic while opening the engine".into())));
            in_thread.settle(result, |_env, engine| Ok(FaceEngine { engine: Mutex::new(Some(engine)) }));
        });
        if let Err(e) = spawned {
            pending.reject(EngineError::Internal(format!("cannot start engine thread: {e}")));
        }
        Ok(promise)
    }

    /// Finds the faces in an image (JPEG, PNG or WebP bytes) and computes what `opts` asks for.
    /// `cancel.cancel()` withdraws the request: the promise rejects with CANCELLED at once, and
    /// the work is dropped from the queue, or stops at its next stage when already running.
    #[napi(ts_return_type = "Promise<Analysis>")]
    pub fn analyze<'env>(&self, env: &'env Env, image: Buffer, opts: AnalyzeOptions, cancel: &CancelToken) -> Result<Object<'env>> {
        let prepared = catch_unwind(AssertUnwindSafe(|| -> std::result::Result<_, EngineError> {
            let engine = self.engine()?;
            let party = u64::from(opts.party.unwrap_or(0));
            Ok((engine, image.to_vec(), party, core_analyze_options(opts)?))
        }));
        let (engine, bytes, party, options) = match prepared {
            Ok(Ok(p)) => p,
            Ok(Err(e)) => return rejected::<Analysis, _>(env, e),
            Err(_) => return rejected::<Analysis, _>(env, EngineError::Internal("panic while reading arguments".into())),
        };
        let (pending, promise) = PendingPromise::new(env)?;
        let in_callback = pending.clone();
        let submitted = engine.submit_for(party, bytes, options, &cancel.token, move |result| {
            in_callback.settle(result, |_env, analysis| Ok(js_analysis(analysis)));
        });
        if let Err(e) = submitted {
            pending.reject(e);
        }
        Ok(promise)
    }

    /// Reports execution providers, SIMD level, recogniser, detector and embedding size.
    #[napi]
    pub fn info(&self, env: Env) -> Result<EngineInfo> {
        let engine = self.engine().map_err(|e| js_error(&env, &e))?;
        let info = engine.info();
        Ok(EngineInfo {
            providers: info.providers,
            simd: info.simd,
            recognizer: info.recognizer,
            recognizer_source: info.recognizer_source,
            detector: info.detector,
            dim: info.dim as u32,
            models: info.models.into_iter().map(|(id, onnx)| ModelInfo { id, onnx }).collect(),
            fixed_shapes: info.fixed_shapes,
            sessions: info
                .sessions
                .into_iter()
                .map(|s| SessionInfo {
                    model: s.model,
                    providers: s.providers.into_iter().map(|(name, options)| ProviderOptions { name, options: options.into_iter().collect() }).collect(),
                    shapes: s.shapes,
                })
                .collect(),
            warmup: info.warmup.into_iter().map(|w| WarmupRun { model: w.model, shape: w.shape, ms: w.ms }).collect(),
        })
    }

    /// Work queued at each stage now, and the model runs since the last call. Cheap (a few
    /// short lock holds and a copy), so it runs on the calling thread.
    #[napi]
    pub fn stats(&self, env: Env) -> Result<EngineStats> {
        let engine = self.engine().map_err(|e| js_error(&env, &e))?;
        let depth = engine.queue_depth();
        let drained = engine.drain_telemetry();
        let mut runs = Vec::with_capacity(drained.runs.len() * 3);
        for r in &drained.runs {
            runs.extend([f64::from(r.model), f64::from(r.batch), f64::from(r.seconds)]);
        }
        Ok(EngineStats {
            queued_light: depth.light as u32,
            queued_heavy: depth.heavy as u32,
            queued_detector: depth.detector as u32,
            queued_faces: depth.faces as u32,
            runs: Float64Array::new(runs),
            runs_dropped: drained.dropped_total as f64,
        })
    }

    /// Cosine similarity of every row of `a` against every row of `b` (rows of `dim` values);
    /// the result has a.rows x b.rows values, row-major.
    #[napi(ts_return_type = "Promise<Float32Array>")]
    pub fn similarity<'env>(&self, env: &'env Env, a: Float32Array, b: Float32Array, dim: u32) -> Result<Object<'env>> {
        let engine = match self.engine() {
            Ok(e) => e,
            Err(e) => return rejected::<Float32Array, _>(env, e),
        };
        let (a, b) = (a.to_vec(), b.to_vec());
        let (pending, promise) = PendingPromise::new(env)?;
        let in_job = pending.clone();
        let spawned = engine.spawn(move || {
            let result = catch_unwind(AssertUnwindSafe(|| Engine::similarity(&a, &b, dim as usize)))
                .unwrap_or_else(|_| Err(EngineError::Internal("panic in similarity".into())));
            in_job.settle(result, |_env, m| Ok(Float32Array::new(m)));
        });
        if let Err(e) = spawned {
            pending.reject(e);
        }
        Ok(promise)
    }

    /// Stops accepting work. Requests already queued finish; the models are unloaded when the
    /// last one completes.
    #[napi]
    pub fn close(&self) {
        if let Ok(mut e) = self.engine.lock() {
            e.take();
        }
    }
}

/// Engine load, for metrics.
#[napi(object)]
pub struct EngineStats {
    /// Requests waiting for a pipeline thread (light and heavy lanes).
    pub queued_light: u32,
    pub queued_heavy: u32,
    /// Detector inputs and face crops waiting for a model worker.
    pub queued_detector: u32,
    pub queued_faces: u32,
    /// Model runs since the last call, three numbers each: model (its position in
    /// `info().models`), batch size, seconds.
    pub runs: Float64Array,
    /// Runs not reported because nobody asked for a long time (the buffer keeps the latest).
    pub runs_dropped: f64,
}

/// Withdraws the analyze() call it was given to: the client went away or its deadline passed.
#[napi]
pub struct CancelToken {
    token: CoreCancelToken,
}

#[napi]
impl CancelToken {
    #[napi(constructor)]
    #[allow(clippy::new_without_default)]
    pub fn new() -> Self {
        CancelToken { token: CoreCancelToken::new() }
    }

    /// Cancels the call: its promise rejects with CANCELLED at once. Later calls do nothing.
    #[napi]
    pub fn cancel(&self) {
        self.token.cancel();
    }
}

impl FaceEngine {
    fn engine(&self) -> std::result::Result<Engine, EngineError> {
        self.engine
            .lock()
            .map_err(|_| EngineError::Internal("engine lock poisoned".into()))?
            .clone()
            .ok_or_else(|| EngineError::Internal("engine is closed".into()))
    }
}

/// The engine's own defaults as JSON, under the options object's field names (paths relative to
/// the working directory, unset ones null). The service declares its defaults in
/// src/config/engine-options.ts; its test compares them with these, so the engine opened by a
/// Rust example or bench and the service's engine are the same.
#[napi]
pub fn engine_defaults_json() -> Result<String> {
    serde_json::to_string(&CoreEngineOptions::default()).map_err(|e| Error::from_reason(e.to_string()))
}

/// Field for field, no checks: the engine's `EngineOptions::validate` is the one place values
/// are checked. Casts saturate: a NaN or negative number becomes 0 and is refused there, while
/// +Infinity for maxPixels or maxDecodeBytes becomes u64::MAX, no limit. Fields left out take
/// the engine's defaults. Every field of the engine's options is named here, so one added
/// there does not compile until it is wired through (or stated to be the engine's alone).
fn core_engine_options(o: EngineOptions) -> CoreEngineOptions {
    let defaults = CoreEngineOptions::default();
    CoreEngineOptions {
        model_dir: PathBuf::from(o.model_dir),
        ort_library: PathBuf::from(o.ort_library),
        providers: o.providers,
        intra_threads: o.intra_threads as usize,
        inference_workers: o.inference_workers as usize,
        max_batch: o.max_batch as usize,
        batch_wait_us: u64::from(o.batch_wait_us),
        queue_capacity: o.queue_capacity as usize,
        max_pixels: o.max_pixels as u64,
        recognizer: o.recognizer,
        detector: o.detector,
        age_model: o.age_model,
        gender_model: o.gender_model,
        detect_threshold: o.detect_threshold.map(|t| t as f32),
        min_face: o.min_face.map_or(defaults.min_face, |m| m as f32),
        max_decode_bytes: o.max_decode_bytes.map_or(defaults.max_decode_bytes, |b| b as u64),
        max_aspect_ratio: o.max_aspect_ratio.unwrap_or(defaults.max_aspect_ratio),
        heavy_queue_ms: o.heavy_queue_ms.map_or(defaults.heavy_queue_ms, u64::from),
        pipeline_threads: o.pipeline_threads.map_or(defaults.pipeline_threads, |t| t as usize),
        heavy_threads: o.heavy_threads.map_or(defaults.heavy_threads, |t| t as usize),
        tensorrt_cache: o.tensorrt_cache.map(PathBuf::from),
        fixed_shapes: o.fixed_shapes.unwrap_or_else(|| defaults.fixed_shapes.clone()),
        trt_fp16: o.trt_fp16.unwrap_or(defaults.trt_fp16),
        // Diagnosis only (the GPU bench's probe): not a setting of the service.
        profile_dir: None,
    }
}

fn core_analyze_options(o: AnalyzeOptions) -> std::result::Result<CoreAnalyzeOptions, EngineError> {
    let boxes = match o.boxes {
        None => None,
        Some(list) => Some(
            list.into_iter()
                .enumerate()
                .map(|(i, b)| match b.as_slice() {
                    [x1, y1, x2, y2] => Ok([*x1 as f32, *y1 as f32, *x2 as f32, *y2 as f32]),
                    _ => Err(EngineError::BadParam(format!("box {i} must have 4 numbers"))),
                })
                .collect::<std::result::Result<Vec<_>, _>>()?,
        ),
    };
    Ok(CoreAnalyzeOptions { embed: o.embed, age: o.age, gender: o.gender, emotions: o.emotions, boxes, thumbnail: o.thumbnail })
}

fn js_analysis(a: CoreAnalysis) -> Analysis {
    Analysis {
        width: a.width,
        height: a.height,
        faces: a
            .faces
            .into_iter()
            .map(|f| FaceResult {
                x1: f.x1,
                y1: f.y1,
                x2: f.x2,
                y2: f.y2,
                score: f.score as f64,
                aligned: f.aligned,
                quality: f.quality as f64,
                landmarks: f.landmarks.into_iter().map(|v| v as f64).collect(),
                age: f.age,
                gender: f.gender.map(|g| g.as_str().to_string()),
                emotions: f.emotions,
                thumbnail: f.thumbnail.map(Buffer::from),
            })
            .collect(),
        embeddings: Float32Array::new(a.embeddings),
        dim: a.dim as u32,
    }
}
