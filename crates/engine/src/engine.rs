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

use std::path::PathBuf;
use std::sync::{Arc, Once};
use std::time::Duration;

use image::RgbImage;

use crate::align::{self, Affine};
use crate::attributes::{self, AgeGender, AttributeModel, EmotionModel, Gender};
use crate::batcher::{Batcher, BatcherConfig, CancelToken, Lane, Pool, PoolConfig};
use crate::detector::{self, kp, Detection, DetectorModel, NmsOptions, PlanOptions};
use crate::yunet::{self, WindowJob, YunetModel};
use crate::error::{EngineError, Result};
use crate::image_io::{self, DecodeLimits, Header};
use crate::manifest::{Alignment, Decoder, InputSpec, Manifest, ModelEntry};
use crate::recognizer::{FaceVector, Recognizer};
use crate::runtime::{self, Provider};
use crate::simd;
use crate::telemetry::{Drained, Telemetry};
use crate::thumbnail;

/// Engine configuration (mirrors the JavaScript `EngineOptions`).
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// Folder holding `manifest.json` and the converted models.
    pub model_dir: PathBuf,
    /// Path of the ONNX Runtime shared library.
    pub ort_library: PathBuf,
    /// Execution providers in priority order ("tensorrt", "cuda", "cpu").
    pub providers: Vec<String>,
    /// ONNX Runtime intra-op threads per session.
    pub intra_threads: usize,
    /// Worker threads per model stage; each owns its own sessions.
    pub inference_workers: usize,
    /// Largest batch a worker runs at once.
    pub max_batch: usize,
    /// How long a partial batch waits for more inputs.
    pub batch_wait_us: u64,
    /// Requests that may wait for a pipeline thread; beyond it `submit` fails with OVERLOADED.
    pub queue_capacity: usize,
    /// Images whose header announces more pixels are refused before decoding.
    pub max_pixels: u64,
    /// Manifest id of the recogniser (default: the manifest's).
    pub recognizer: Option<String>,
    /// Manifest id of the detector (default: the manifest's).
    pub detector: Option<String>,
    /// Manifest id of the age model (default: the manifest's `age`, else its `ageGender`, else
    /// the recogniser's own head).
    pub age_model: Option<String>,
    /// Manifest id of the gender model (defaults as for age, with the manifest's `gender`).
    pub gender_model: Option<String>,
    /// Detector score threshold.
    pub detect_threshold: Option<f32>,
    /// Threads decoding and cropping; 0 picks the number of CPUs.
    pub pipeline_threads: usize,
    /// Smallest face (box side, photo pixels) searched for in large photos.
    pub min_face: f32,
    /// Most bytes decoding one image may hold; beyond it the image is refused (IMAGE_TOO_LARGE).
    pub max_decode_bytes: u64,
    /// Longest side over shortest side beyond which an image is refused (IMAGE_ASPECT_RATIO).
    pub max_aspect_ratio: u32,
    /// Estimated milliseconds of heavy work (huge photos) that may be queued and running at
    /// once; beyond it a heavy request is refused with OVERLOADED.
    pub heavy_queue_ms: u64,
    /// Pipeline threads that may work on heavy requests at once (0: half of them, at least 1);
    /// the others keep serving light ones.
    pub heavy_threads: usize,
    /// Folder where TensorRT keeps the engines it builds (None: rebuilt at every start).
    pub tensorrt_cache: Option<PathBuf>,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            model_dir: PathBuf::from("models"),
            ort_library: PathBuf::from("node_modules/onnxruntime-node/bin/napi-v6/linux/x64/libonnxruntime.so.1"),
            providers: vec!["cpu".into()],
            intra_threads: 1,
            inference_workers: 1,
            max_batch: 16,
            batch_wait_us: 2000,
            queue_capacity: 64,
            max_pixels: 64_000_000,
            recognizer: None,
            detector: None,
            age_model: None,
            gender_model: None,
            detect_threshold: None,
            pipeline_threads: 0,
            min_face: 40.0,
            max_decode_bytes: 512 << 20,
            max_aspect_ratio: 20,
            heavy_queue_ms: 10_000,
            heavy_threads: 0,
            tensorrt_cache: None,
        }
    }
}

/// What to compute for each face.
#[derive(Debug, Clone, Default)]
pub struct AnalyzeOptions {
    pub embed: bool,
    pub age: bool,
    pub gender: bool,
    pub emotions: bool,
    /// Caller-given `[x1, y1, x2, y2]` boxes: one face per box, in order, instead of detection.
    pub boxes: Option<Vec<[f32; 4]>>,
    /// Also return a JPEG crop of each face, its longer side at most this many pixels.
    pub thumbnail: Option<u32>,
}

/// One face in the upright image.
#[derive(Debug, Clone, PartialEq)]
pub struct Face {
    pub x1: i32,
    pub y1: i32,
    pub x2: i32,
    pub y2: i32,
    /// Detector score (1 for caller-given boxes).
    pub score: f32,
    /// How usable the face is for recognition, in [0, 1]: see [`quality`].
    pub quality: f32,
    /// Flat `[x, y, ...]` keypoints used for alignment, in the detector family's order (YuNet:
    /// right eye, left eye, nose tip, right and left mouth corner); empty when none were found.
    pub landmarks: Vec<f32>,
    pub age: Option<u32>,
    pub gender: Option<Gender>,
    /// All emotion labels, most likely first.
    pub emotions: Option<Vec<String>>,
    /// JPEG bytes, when asked for with [`AnalyzeOptions::thumbnail`].
    pub thumbnail: Option<Vec<u8>>,
}

/// Result of [`Engine::analyze`].
#[derive(Debug, Clone)]
pub struct Analysis {
    pub width: u32,
    pub height: u32,
    /// Biggest first for detected faces; caller order for caller boxes.
    pub faces: Vec<Face>,
    /// `faces.len() * dim` L2-normalised values, row-major; empty unless `embed`.
    pub embeddings: Vec<f32>,
    pub dim: usize,
}

/// What the engine runs on, for health checks.
#[derive(Debug, Clone)]
pub struct EngineInfo {
    /// Execution providers in use, highest priority first (ends with "cpu").
    pub providers: Vec<String>,
    pub simd: String,
    pub recognizer: String,
    pub detector: String,
    pub dim: usize,
    /// `(id, onnx path)` of every loaded model.
    pub models: Vec<(String, String)>,
}

/// Canonical keypoint positions (right eye, left eye, nose, mouth) as fractions of a square of
/// the detector box's size centred on the box: the median detector keypoints over 138 faces of
/// the demo and labelled photos, made left-right symmetric. Aligning to where the detector puts
/// keypoints on an average face keeps the crop framed as the recogniser's publisher framed it
/// (box-centred), while levelling the eyes. Ears are left out because they vanish or swing with
/// head yaw. On the labelled identities this gave ROC AUC 0.992 (cosine, faceres).
const FACE_TEMPLATE: [(f32, f32); 4] = [(0.295, 0.29), (0.705, 0.29), (0.5, 0.555), (0.5, 0.75)];
/// The five-point template of ArcFace-style recognisers on their 112x112 crop: right eye, left
/// eye, nose tip, right and left mouth corner (the subject's right is on the image's left).
const ARCFACE_TEMPLATE: [(f32, f32); 5] =
    [(38.2946, 51.6963), (73.5318, 51.5014), (56.0252, 71.7366), (41.5493, 92.3655), (70.7299, 92.2041)];
const ARCFACE_SIDE: f32 = 112.0;
/// The recogniser crop is the detector box enlarged this much (as the FaceRes pipeline it was
/// published with does).
const RECOGNIZER_CROP: f32 = 1.4;
/// Emotion models were trained on tight face crops.
const EMOTION_CROP: f32 = 1.0;
/// Side of a dlib face chip over the detector box's side, for the upright crop used without
/// keypoints (and the plausibility check of the fitted one): over the 165 YuNet faces of the
/// labelled photos the chip fitted to the eyes is 1.02 box sides (median; 0.79 to 1.19 from
/// the 5th to the 95th percentile), centred 0.04 chip sides below the box centre.
const DLIB_CHIP_CROP: f32 = 1.0;

/// A recogniser-type stage's input and where the face sits in it.
#[derive(Clone)]
struct CropSpec {
    input: InputSpec,
    alignment: Alignment,
    /// Context around the detector box (box alignment only).
    enlarge: f32,
}

impl CropSpec {
    fn of(entry: &ModelEntry, enlarge: f32) -> CropSpec {
        CropSpec { input: entry.input.clone(), alignment: entry.alignment, enlarge }
    }

    /// An age or gender model's crop: its own chip, or the recogniser's box crop.
    fn attribute(entry: &ModelEntry) -> CropSpec {
        CropSpec::of(entry, if entry.alignment == Alignment::DlibChip { DLIB_CHIP_CROP } else { RECOGNIZER_CROP })
    }
}

/// Where age (or gender) comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AttributeSource {
    /// The recogniser's own head (FaceRes), from the recogniser run.
    Recognizer,
    /// The face worker's attribute model at this index.
    Model(usize),
}

/// Resolves one attribute's model id to its source, adding the model to `models` (with what it
/// is asked for: age, gender) unless the recogniser or an earlier entry already gives it.
fn attribute_source(
    manifest: &Manifest,
    id: &str,
    recognizer_id: &str,
    age: bool,
    models: &mut Vec<(ModelEntry, (bool, bool))>,
) -> Result<AttributeSource> {
    if id == recognizer_id {
        return Ok(AttributeSource::Recognizer);
    }
    let k = match models.iter().position(|(e, _)| e.id == id) {
        Some(k) => k,
        None => {
            models.push((manifest.get(id)?.clone(), (false, false)));
            models.len() - 1
        }
    };
    let (wants_age, wants_gender) = &mut models[k].1;
    if age {
        *wants_age = true;
    } else {
        *wants_gender = true;
    }
    Ok(AttributeSource::Model(k))
}

/// The detector stage: worker threads owning the sessions, and how their inputs are made.
enum DetectorStage {
    Blazeface {
        batcher: Batcher<Vec<f32>, Vec<Detection>>,
        input: InputSpec,
        plan: PlanOptions,
        /// Score a tile detection needs; the whole-photo pass accepts WHOLE_PHOTO_MARGIN less.
        tile_threshold: f32,
    },
    Yunet {
        /// Renders and runs windows (the model knows its input).
        batcher: Batcher<WindowJob, Vec<Detection>>,
        min_face: f32,
    },
}

impl DetectorStage {
    fn queued(&self) -> usize {
        match self {
            DetectorStage::Blazeface { batcher, .. } => batcher.queued(),
            DetectorStage::Yunet { batcher, .. } => batcher.queued(),
        }
    }
}

struct FaceJob {
    recognizer: Option<Vec<u8>>,
    /// One crop per attribute model, where that model is needed.
    attributes: Vec<Option<Vec<u8>>>,
    emotion: Option<Vec<u8>>,
}

#[derive(Default)]
struct FaceOut {
    vector: Option<FaceVector>,
    /// Per attribute model, as in [`FaceJob::attributes`].
    attributes: Vec<Option<AgeGender>>,
    emotions: Option<Vec<(String, f32)>>,
}

struct Inner {
    limits: DecodeLimits,
    detector: DetectorStage,
    /// Keypoint order of the detections.
    decoder: Decoder,
    faces: Batcher<FaceJob, FaceOut>,
    recognizer_crop: CropSpec,
    /// Crops of the face worker's attribute models, in its order.
    attribute_crops: Vec<CropSpec>,
    age_from: AttributeSource,
    gender_from: AttributeSource,
    emotion_crop: Option<CropSpec>,
    info: EngineInfo,
    telemetry: Arc<Telemetry>,
}

/// Work waiting right now at each stage (for metrics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueDepth {
    /// Requests waiting for a pipeline thread, light lane.
    pub light: usize,
    /// Requests waiting for a pipeline thread, heavy lane (huge photos).
    pub heavy: usize,
    /// Detector inputs waiting for a detector worker.
    pub detector: usize,
    /// Face crops waiting for a face worker (recogniser and attribute models).
    pub faces: usize,
}

/// A loaded engine. Cheap to clone; the last clone dropped stops the worker threads once
/// their queued work is done.
#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
    pool: Arc<Pool>,
}

impl Engine {
    /// Loads the runtime and every model the options name, starting all worker threads.
    pub fn open(opts: EngineOptions) -> Result<Engine> {
        let providers: Vec<Provider> = opts.providers.iter().map(|p| Provider::parse(p)).collect::<Result<_>>()?;
        if providers.is_empty() {
            return Err(EngineError::BadParam("providers must not be empty".into()));
        }
        if opts.max_batch == 0 || opts.inference_workers == 0 || opts.queue_capacity == 0 || opts.max_pixels == 0 {
            return Err(EngineError::BadParam("maxBatch, inferenceWorkers, queueCapacity and maxPixels must be positive".into()));
        }
        if let Some(t) = opts.detect_threshold {
            if !(0.0..=1.0).contains(&t) {
                return Err(EngineError::BadParam("detectThreshold must be within 0..1".into()));
            }
        }
        let manifest = Manifest::load(&opts.model_dir)?;
        let rt = runtime::init(&opts.ort_library)?;
        if providers.contains(&Provider::TensorRt) {
            runtime::set_tensorrt_cache(opts.tensorrt_cache.clone())?;
        }
        let detector_id = opts.detector.clone().unwrap_or_else(|| manifest.defaults.detector.clone());
        let recognizer_id = opts.recognizer.clone().unwrap_or_else(|| manifest.defaults.recognizer.clone());
        let detector_entry = manifest.get(&detector_id)?.clone();
        let recognizer_entry = manifest.get(&recognizer_id)?.clone();
        let emotion_entry = manifest.defaults.emotion.as_deref().map(|id| manifest.get(id)).transpose()?.cloned();
        // Age and gender: the caller's model, else the manifest's for that attribute, else its
        // shared one, else the recogniser's own heads; a model serving both is loaded once.
        let attribute_id = |chosen: &Option<String>, default: &Option<String>| {
            chosen.clone().or_else(|| default.clone()).or_else(|| manifest.defaults.age_gender.clone()).unwrap_or_else(|| recognizer_id.clone())
        };
        let mut attribute_entries = Vec::new();
        let age_id = attribute_id(&opts.age_model, &manifest.defaults.age);
        let age_from = attribute_source(&manifest, &age_id, &recognizer_id, true, &mut attribute_entries)?;
        let gender_id = attribute_id(&opts.gender_model, &manifest.defaults.gender);
        let gender_from = attribute_source(&manifest, &gender_id, &recognizer_id, false, &mut attribute_entries)?;

        let threshold = opts.detect_threshold.or(detector_entry.score_threshold).unwrap_or(match detector_entry.decoder {
            Decoder::Blazeface => DEFAULT_THRESHOLD,
            Decoder::Yunet => YUNET_THRESHOLD,
        });
        let intra = opts.intra_threads.max(1);
        let workers = opts.inference_workers;
        let wait = Duration::from_micros(opts.batch_wait_us);
        let dir = opts.model_dir.clone();
        // Model positions as in `EngineInfo::models`: detector, recogniser, attribute models, emotion.
        let telemetry = Arc::new(Telemetry::default());
        const DETECTOR: u16 = 0;
        const RECOGNIZER: u16 = 1;
        let attribute_model = |k: usize| 2 + k as u16;
        let emotion_model = 2 + attribute_entries.len() as u16;

        // Provider lines are logged by the first worker of each stage only.
        let detector_config = |name| BatcherConfig { name, workers, max_batch: opts.max_batch, max_wait: wait, capacity: opts.queue_capacity * 64 };
        let detector = match detector_entry.decoder {
            Decoder::Blazeface => {
                let (dir, entry, providers) = (dir.clone(), detector_entry.clone(), providers.clone());
                let max_batch = opts.max_batch;
                let telemetry = Arc::clone(&telemetry);
                let batcher = Batcher::start(detector_config("detector"), move |n| {
                    let floor = (threshold - WHOLE_PHOTO_MARGIN).max(0.0);
                    let (mut model, report) = DetectorModel::load(rt, &dir, &entry, &providers, intra, max_batch, floor)?;
                    if n == 0 {
                        runtime::log_providers(&entry.id, &providers, &report);
                    }
                    let telemetry = Arc::clone(&telemetry);
                    Ok(move |inputs: Vec<Vec<f32>>| telemetry.timed(DETECTOR, inputs.len(), || model.run(inputs)))
                })?;
                let plan = PlanOptions { input: detector_entry.input.width, min_face: opts.min_face.max(8.0), ..PlanOptions::default() };
                DetectorStage::Blazeface { batcher, input: detector_entry.input.clone(), plan, tile_threshold: threshold }
            }
            Decoder::Yunet => {
                let (dir, entry, providers) = (dir.clone(), detector_entry.clone(), providers.clone());
                // One input per run: YuNet runs inputs one by one anyway (their sizes differ), and
                // a worker that took a huge tile and a small photo together would make the small
                // one wait for the tile.
                let config = BatcherConfig { max_batch: 1, ..detector_config("detector") };
                let telemetry = Arc::clone(&telemetry);
                let batcher = Batcher::start(config, move |n| {
                    let (mut model, report) = YunetModel::load(rt, &dir, &entry, &providers, intra, threshold)?;
                    if n == 0 {
                        runtime::log_providers(&entry.id, &providers, &report);
                    }
                    let telemetry = Arc::clone(&telemetry);
                    Ok(move |jobs: Vec<WindowJob>| telemetry.timed(DETECTOR, jobs.len(), || model.run_windows(jobs)))
                })?;
                DetectorStage::Yunet { batcher, min_face: opts.min_face.max(8.0) }
            }
        };

        let (dim_tx, dim_rx) = std::sync::mpsc::channel::<(usize, Vec<String>)>();
        let faces = {
            let dir = dir.clone();
            let providers = providers.clone();
            let (rec_entry, attr_entries, emo_entry) = (recognizer_entry.clone(), attribute_entries.clone(), emotion_entry.clone());
            let max_batch = opts.max_batch;
            let telemetry = Arc::clone(&telemetry);
            Batcher::start(
                BatcherConfig { name: "face", workers, max_batch, max_wait: wait, capacity: opts.queue_capacity * 64 },
                move |n| {
                    let (mut rec, report) = Recognizer::load(rt, &dir, &rec_entry, &providers, intra, max_batch)?;
                    let mut attrs = attr_entries
                        .iter()
                        .map(|(e, wants)| AttributeModel::load(rt, &dir, e, *wants, &providers, intra, max_batch))
                        .collect::<Result<Vec<_>>>()?;
                    let mut emo = emo_entry
                        .as_ref()
                        .map(|e| EmotionModel::load(rt, &dir, e, &providers, intra, max_batch))
                        .transpose()?;
                    if n == 0 {
                        runtime::log_providers(&rec_entry.id, &providers, &report);
                        for ((e, _), (_, r)) in attr_entries.iter().zip(&attrs) {
                            runtime::log_providers(&e.id, &providers, r);
                        }
                        if let (Some(e), Some((_, r))) = (&emo_entry, &emo) {
                            runtime::log_providers(&e.id, &providers, r);
                        }
                        let _ = dim_tx.send((rec.dim, report.active.clone()));
                    }
                    let telemetry = Arc::clone(&telemetry);
                    Ok(move |jobs: Vec<FaceJob>| -> Result<Vec<FaceOut>> {
                        let mut outs: Vec<FaceOut> =
                            (0..jobs.len()).map(|_| FaceOut { attributes: vec![None; attrs.len()], ..FaceOut::default() }).collect();
                        let rec_idx: Vec<usize> = (0..jobs.len()).filter(|&i| jobs[i].recognizer.is_some()).collect();
                        if !rec_idx.is_empty() {
                            let crops: Vec<&[u8]> = rec_idx.iter().map(|&i| jobs[i].recognizer.as_deref().unwrap()).collect();
                            for (i, v) in rec_idx.iter().zip(telemetry.timed(RECOGNIZER, crops.len(), || rec.run(&crops))?) {
                                outs[*i].vector = Some(v);
                            }
                        }
                        for (k, (model, _)) in attrs.iter_mut().enumerate() {
                            let crop = |i: usize| jobs[i].attributes.get(k).and_then(Option::as_deref);
                            let idx: Vec<usize> = (0..jobs.len()).filter(|&i| crop(i).is_some()).collect();
                            if !idx.is_empty() {
                                let crops: Vec<&[u8]> = idx.iter().filter_map(|&i| crop(i)).collect();
                                for (i, v) in idx.iter().zip(telemetry.timed(attribute_model(k), crops.len(), || model.run(&crops))?) {
                                    outs[*i].attributes[k] = Some(v);
                                }
                            }
                        }
                        if let Some((emo, _)) = emo.as_mut() {
                            let idx: Vec<usize> = (0..jobs.len()).filter(|&i| jobs[i].emotion.is_some()).collect();
                            if !idx.is_empty() {
                                let crops: Vec<&[u8]> = idx.iter().map(|&i| jobs[i].emotion.as_deref().unwrap()).collect();
                                for (i, v) in idx.iter().zip(telemetry.timed(emotion_model, crops.len(), || emo.run(&crops))?) {
                                    outs[*i].emotions = Some(v);
                                }
                            }
                        }
                        Ok(outs)
                    })
                },
            )?
        };
        let (dim, active) = dim_rx.recv().map_err(|_| EngineError::Internal("face worker did not report".into()))?;

        let mut models = vec![
            (detector_entry.id.clone(), detector_entry.onnx.clone()),
            (recognizer_entry.id.clone(), recognizer_entry.onnx.clone()),
        ];
        models.extend(attribute_entries.iter().map(|(e, _)| (e.id.clone(), e.onnx.clone())));
        models.extend(emotion_entry.iter().map(|e| (e.id.clone(), e.onnx.clone())));
        let info = EngineInfo {
            providers: active,
            simd: simd::active_level().name().to_string(),
            recognizer: recognizer_entry.id.clone(),
            detector: detector_entry.id.clone(),
            dim,
            models,
        };
        let pipeline_threads = if opts.pipeline_threads == 0 {
            std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2)
        } else {
            opts.pipeline_threads
        };
        // At least two threads, so that one is always free for light requests.
        let pipeline_threads = pipeline_threads.max(2);
        let heavy_threads = if opts.heavy_threads == 0 { (pipeline_threads / 2).max(1) } else { opts.heavy_threads };
        let pool = Pool::with_config(PoolConfig {
            name: "pipeline",
            threads: pipeline_threads,
            capacity: opts.queue_capacity,
            heavy_limit: heavy_threads,
            heavy_budget_ms: opts.heavy_queue_ms,
        })?;
        let inner = Inner {
            limits: DecodeLimits { max_pixels: opts.max_pixels, max_aspect_ratio: opts.max_aspect_ratio.max(1), max_bytes: opts.max_decode_bytes },
            detector,
            decoder: detector_entry.decoder,
            faces,
            recognizer_crop: CropSpec::of(&recognizer_entry, RECOGNIZER_CROP),
            attribute_crops: attribute_entries.iter().map(|(e, _)| CropSpec::attribute(e)).collect(),
            age_from,
            gender_from,
            emotion_crop: emotion_entry.as_ref().map(|e| CropSpec::of(e, EMOTION_CROP)),
            info,
            telemetry,
        };
        static SIMD_LOG: Once = Once::new();
        SIMD_LOG.call_once(|| {
            runtime::log_json(
                runtime::LogLevel::Info,
                "engine ready",
                serde_json::json!({
                    "simd": simd::active_level().name(),
                    "onnxruntime": rt.version(),
                    "recognizer": recognizer_entry.id,
                    "dim": dim,
                }),
            )
        });
        Ok(Engine { inner: Arc::new(inner), pool: Arc::new(pool) })
    }

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
        cancel.check()?;
        let estimate = self.inner.estimate(&bytes, &opts)?;
        let lane = if estimate.millis > LIGHT_MS { Lane::Heavy { cost_ms: estimate.millis } } else { Lane::Light };
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
        self.pool.submit(lane, Some(cancel), move |refused| {
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

/// Detector score threshold when neither the caller nor the manifest sets one. Chosen on the
/// demo and labelled photos: true faces scored 0.77 and up, background texture at most 0.71
/// once tiles stopped reporting large boxes.
const DEFAULT_THRESHOLD: f32 = 0.7;

/// YuNet's score threshold when neither the caller nor the manifest sets one. On the demo and
/// labelled photos every true face scores 0.81 or more; the pyramid's finer levels see a few
/// more false positives, the highest a painted lake at 0.79, so this sits just below the faces.
const YUNET_THRESHOLD: f32 = 0.8;

/// A face that fills the frame (a portrait or a face chip) is seen only by the whole-photo pass,
/// squeezed into the padded square, and scores lower there (a 200 px chip: 0.67). Such large
/// detections accept this much less; small ones must meet the tile threshold, since false
/// positives on texture are small (an eagle's head: 0.66 at 15 input pixels).
const WHOLE_PHOTO_MARGIN: f32 = 0.1;

/// Width, as a fraction of the detector input, from which a whole-photo detection counts as
/// frame-filling.
const LARGE_FACE_FRACTION: f32 = 0.2;

/// Requests estimated to cost more than this many milliseconds of a core go to the heavy lane:
/// a 12 MP phone photo (about 250 ms by this estimate) stays light, a 24 MP one (about 500)
/// does not, so photos of 24 MP and more cannot hold every thread while small ones wait.
const LIGHT_MS: u64 = 500;
/// Decoding a JPEG costs about this many nanoseconds per stored pixel on one core, at full size
/// (zune-jpeg, 4.0) or at 1/2 (jpeg-decoder, 4.1); `examples/decoders.rs`.
const JPEG_DECODE_NS_PER_PIXEL: u64 = 4;
/// PNG and WebP decoding, per stored pixel (PNG's inflate and filters cost about 3x JPEG's).
const OTHER_DECODE_NS_PER_PIXEL: u64 = 12;
/// YuNet costs about this many nanoseconds per input pixel on one intra-op thread at the tile
/// sizes the plan uses (23 to 28 at 768 to 1280 px, `face_sizes --cost`), plus rendering the
/// windows from the decoded photo (about 8); checked against measured costs from 2 to 48 MP
/// by `examples/phone_photos.rs timing`.
const DETECT_NS_PER_PIXEL: u64 = 32;
/// Aligning and embedding one face, for caller boxes whose count is known up front.
const FACE_MS: u64 = 30;

/// What a request will cost, worked out from the image header before anything is decoded.
struct Estimate {
    header: Header,
    /// Decode at 1 / denominator of the stored size.
    denominator: u32,
    millis: u64,
}

/// A face on its way through the pipeline, in photo coordinates.
struct Candidate {
    det: Detection,
    has_keypoints: bool,
}

impl Inner {
    /// Reads the header (refusing an image over a limit) and estimates the request's cost. For
    /// detection with YuNet the photo is decoded at the coarsest DCT scale that still holds the
    /// detector's finest window: a 40 MP JPEG decodes at 1/2 or less, without the detail the
    /// detector would throw away. Caller boxes keep full resolution for their crops.
    fn estimate(&self, bytes: &[u8], opts: &AnalyzeOptions) -> Result<Estimate> {
        let header = image_io::inspect(bytes, &self.limits)?;
        let (w, h) = header.upright();
        let (denominator, detect_pixels, faces) = match (&opts.boxes, &self.detector) {
            (Some(boxes), _) => (1, boxes.len() as u64 * (CALLER_BOX_INPUT * CALLER_BOX_INPUT) as u64, boxes.len() as u64),
            (None, DetectorStage::Yunet { min_face, .. }) => {
                let windows = yunet::plan(w, h, *min_face);
                (header.denominator_for(yunet::finest_scale(&windows)), yunet::input_pixels(&windows), 0)
            }
            (None, DetectorStage::Blazeface { .. }) => (1, w as u64 * h as u64, 0),
        };
        let decode_ns = if header.format == image_io::Format::Jpeg { JPEG_DECODE_NS_PER_PIXEL } else { OTHER_DECODE_NS_PER_PIXEL };
        let millis = (w as u64 * h as u64 * decode_ns + detect_pixels * DETECT_NS_PER_PIXEL) / 1_000_000 + faces * FACE_MS;
        Ok(Estimate { header, denominator, millis })
    }

    fn analyze(&self, bytes: &[u8], opts: &AnalyzeOptions, estimate: &Estimate, cancel: &CancelToken) -> Result<Analysis> {
        cancel.check()?;
        let heavy = estimate.millis > LIGHT_MS;
        let decoded = image_io::decode_scaled(bytes, &estimate.header, estimate.denominator, self.limits.max_bytes)?;
        cancel.check()?;
        // The pipeline works in decoded pixels; what it reports is mapped to photo pixels.
        let (sx, sy) = decoded.scale();
        let (w, h) = (decoded.width, decoded.height);
        let img = Arc::new(decoded.image);
        let candidates = match &opts.boxes {
            Some(boxes) => {
                let scaled: Vec<[f32; 4]> = boxes.iter().map(|b| [b[0] / sx, b[1] / sy, b[2] / sx, b[3] / sy]).collect();
                self.caller_boxes(&img, &scaled)?
            }
            None => {
                let min_face = (sx + sy) / 2.0;
                let mut dets = self.detect(&img, min_face, heavy, cancel)?;
                // Biggest first, as reported: by the area left once the box is clamped to the photo.
                let (dw, dh) = img.dimensions();
                let clamped = |d: &Detection| (d.x2.min(dw as f32) - d.x1.max(0.0)).max(0.0) * (d.y2.min(dh as f32) - d.y1.max(0.0)).max(0.0);
                dets.sort_by(|a, b| clamped(b).total_cmp(&clamped(a)));
                dets.into_iter().map(|det| Candidate { det, has_keypoints: true }).collect()
            }
        };
        let from_recognizer = |want: bool, from: AttributeSource| want && from == AttributeSource::Recognizer;
        let want_rec = opts.embed || from_recognizer(opts.age, self.age_from) || from_recognizer(opts.gender, self.gender_from);
        let want_attr: Vec<bool> = (0..self.attribute_crops.len())
            .map(|k| (opts.age && self.age_from == AttributeSource::Model(k)) || (opts.gender && self.gender_from == AttributeSource::Model(k)))
            .collect();
        let want_emo = opts.emotions && self.emotion_crop.is_some();
        let outs = if candidates.is_empty() || !(want_rec || want_attr.contains(&true) || want_emo) {
            (0..candidates.len()).map(|_| FaceOut::default()).collect()
        } else {
            let jobs = candidates
                .iter()
                .map(|c| FaceJob {
                    recognizer: want_rec.then(|| self.crop(&img, c, &self.recognizer_crop)),
                    attributes: want_attr.iter().zip(&self.attribute_crops).map(|(&want, spec)| want.then(|| self.crop(&img, c, spec))).collect(),
                    emotion: want_emo.then(|| self.crop(&img, c, self.emotion_crop.as_ref().expect("loaded"))),
                })
                .collect();
            cancel.check()?;
            self.faces.run(jobs)?
        };
        let dim = self.info.dim;
        let mut faces = Vec::with_capacity(candidates.len());
        let mut embeddings = Vec::with_capacity(if opts.embed { candidates.len() * dim } else { 0 });
        let to_photo = |d: &Detection| Detection {
            score: d.score,
            x1: d.x1 * sx,
            y1: d.y1 * sy,
            x2: d.x2 * sx,
            y2: d.y2 * sy,
            keypoints: d.keypoints.iter().map(|&(x, y)| (x * sx, y * sy)).collect(),
        };
        for (c, out) in candidates.iter().zip(outs) {
            let d = &to_photo(&c.det);
            let clamp_x = |v: f32| (v.round() as i64).clamp(0, w as i64) as i32;
            let clamp_y = |v: f32| (v.round() as i64).clamp(0, h as i64) as i32;
            let attribute = |from: AttributeSource| match from {
                AttributeSource::Recognizer => out.vector.as_ref().map(|v| AgeGender { age: v.age, gender: v.gender }),
                AttributeSource::Model(k) => out.attributes.get(k).copied().flatten(),
            };
            let (age, gender) = (attribute(self.age_from).and_then(|a| a.age), attribute(self.gender_from).and_then(|a| a.gender));
            let mut face = Face {
                x1: clamp_x(d.x1),
                y1: clamp_y(d.y1),
                x2: clamp_x(d.x2),
                y2: clamp_y(d.y2),
                score: d.score,
                quality: if c.has_keypoints { quality(d, self.decoder) } else { 0.0 },
                landmarks: if c.has_keypoints { d.keypoints.iter().flat_map(|&(x, y)| [x, y]).collect() } else { Vec::new() },
                age: None,
                gender: None,
                emotions: None,
                thumbnail: None,
            };
            if let Some(side) = opts.thumbnail {
                let (dw, dh) = img.dimensions();
                let decoded_box = [
                    ((c.det.x1.round() as i64).clamp(0, dw as i64)) as i32,
                    ((c.det.y1.round() as i64).clamp(0, dh as i64)) as i32,
                    ((c.det.x2.round() as i64).clamp(0, dw as i64)) as i32,
                    ((c.det.y2.round() as i64).clamp(0, dh as i64)) as i32,
                ];
                face.thumbnail = Some(thumbnail::face_thumbnail(&img, decoded_box, side)?);
            }
            if opts.age {
                face.age = age.map(|a| a.round().max(0.0) as u32);
            }
            if opts.gender {
                face.gender = gender;
            }
            if opts.emotions {
                face.emotions = out.emotions.map(|e| e.into_iter().map(|(label, _)| label).collect());
            }
            if opts.embed {
                match out.vector.and_then(|v| v.embedding) {
                    Some(e) if e.len() == dim => embeddings.extend_from_slice(&e),
                    _ => return Err(EngineError::Model("recogniser returned no embedding".into())),
                }
            }
            faces.push(face);
        }
        Ok(Analysis { width: w, height: h, faces, embeddings, dim })
    }

    /// Finds the faces of the (decoded) photo with whichever detector is loaded; `photo_per_pixel`
    /// is how many photo pixels one decoded pixel stands for, so the smallest face searched
    /// stays the same in photo pixels. A heavy request runs its windows a round at a time (one
    /// per detector worker), queued behind light requests' windows, so it keeps a round's
    /// inputs in memory and stops between rounds once cancelled.
    fn detect(&self, img: &Arc<RgbImage>, photo_per_pixel: f32, heavy: bool, cancel: &CancelToken) -> Result<Vec<Detection>> {
        let (w, h) = img.dimensions();
        let merged = match &self.detector {
            DetectorStage::Blazeface { batcher, input, plan, tile_threshold } => blazeface_passes(batcher, input, plan, *tile_threshold, img)?,
            DetectorStage::Yunet { batcher, min_face } => {
                let windows = yunet::plan(w, h, *min_face / photo_per_pixel);
                if heavy {
                    // One window per detector worker at a time, behind every light photo's
                    // windows: a heavy photo uses idle workers but never delays a light one by
                    // more than the windows running, and stops between rounds once cancelled.
                    let mut all = Vec::new();
                    for round in windows.chunks(batcher.workers()) {
                        cancel.check()?;
                        let results = batcher.run_behind(WindowJob::each(img, round))?;
                        all.extend(kept_in_photo(img, round, results));
                    }
                    detector::nms(all, YUNET_NMS)
                } else {
                    yunet_passes(batcher, img, &windows)?
                }
            }
        };
        // Boxes centred outside the photo come from the padding and are not faces.
        Ok(merged
            .into_iter()
            .filter(|d| {
                let (cx, cy) = ((d.x1 + d.x2) / 2.0, (d.y1 + d.y2) / 2.0);
                cx >= 0.0 && cy >= 0.0 && cx < w as f32 && cy < h as f32
            })
            .collect())
    }

    /// Caller boxes are validated, then the detector looks inside each (with some margin) for
    /// keypoints so that the crop can still be aligned; a box where it finds none is cropped
    /// upright.
    fn caller_boxes(&self, img: &Arc<RgbImage>, boxes: &[[f32; 4]]) -> Result<Vec<Candidate>> {
        let (w, h) = img.dimensions();
        for (i, b) in boxes.iter().enumerate() {
            let [x1, y1, x2, y2] = *b;
            if b.iter().any(|v| !v.is_finite()) || x2 <= x1 || y2 <= y1 {
                return Err(EngineError::BadParam(format!("box {i} must be [x1, y1, x2, y2] with x2 > x1 and y2 > y1")));
            }
            if x2 <= 0.0 || y2 <= 0.0 || x1 >= w as f32 || y1 >= h as f32 {
                return Err(EngineError::BadParam(format!("box {i} lies outside the {w}x{h} image")));
            }
        }
        if boxes.len() > 1024 {
            return Err(EngineError::BadParam("at most 1024 boxes per image".into()));
        }
        // Each box is its own pass at its own scale: a square twice the box's side around it.
        let pass_for = |b: &[f32; 4], input: f32| {
            let side = (b[2] - b[0]).max(b[3] - b[1]) * 2.0;
            detector::Pass { origin_x: (b[0] + b[2]) / 2.0 - side / 2.0, origin_y: (b[1] + b[3]) / 2.0 - side / 2.0, scale: side / input, level: 0, tiled: false }
        };
        let (passes, results) = match &self.detector {
            DetectorStage::Blazeface { batcher, input, .. } => {
                let passes: Vec<detector::Pass> = boxes.iter().map(|b| pass_for(b, input.width as f32)).collect();
                let inputs = passes
                    .iter()
                    .map(|p| {
                        let t = p.photo_to_input();
                        let rgb = align::warp_antialiased(img, &t, input.width, input.height);
                        let mut buf = Vec::with_capacity(input.values_per_image());
                        input.push_image(&rgb, &mut buf);
                        buf
                    })
                    .collect();
                (passes, batcher.run(inputs)?)
            }
            DetectorStage::Yunet { batcher, .. } => {
                let side = CALLER_BOX_INPUT as u32;
                let windows: Vec<yunet::Window> = boxes
                    .iter()
                    .map(|b| yunet::Window::around(pass_for(b, CALLER_BOX_INPUT), side))
                    .collect();
                (windows.iter().map(|win| win.pass).collect(), batcher.run(WindowJob::each(img, &windows))?)
            }
        };
        let mut out = Vec::with_capacity(boxes.len());
        for ((b, pass), dets) in boxes.iter().zip(&passes).zip(results) {
            let given = Detection { score: 1.0, x1: b[0], y1: b[1], x2: b[2], y2: b[3], keypoints: Vec::new() };
            let best = dets
                .iter()
                .map(|d| pass.to_photo(d))
                .map(|d| (given.iou(&d), d))
                .filter(|(iou, _)| *iou > 0.3)
                .max_by(|a, b| a.0.total_cmp(&b.0));
            match best {
                Some((_, found)) => out.push(Candidate { det: Detection { keypoints: found.keypoints, ..given }, has_keypoints: true }),
                None => out.push(Candidate { det: given, has_keypoints: false }),
            }
        }
        Ok(out)
    }

    /// The model input for one face of a recogniser-type stage.
    fn crop(&self, img: &RgbImage, c: &Candidate, spec: &CropSpec) -> Vec<u8> {
        let input = &spec.input;
        let t = face_transform(c, self.decoder, spec, input.width);
        let t = if input.width == input.height {
            t
        } else {
            // Non-square inputs: stretch the square crop's height.
            align::compose(&Affine { a: 1.0, b: 0.0, c: 0.0, d: 0.0, e: input.height as f32 / input.width as f32, f: 0.0 }, &t)
        };
        align::warp_antialiased(img, &t, input.width, input.height)
    }
}

/// Input side of the detector pass that looks for keypoints around a caller's box (the box
/// then spans half of it, well within what the detector finds).
const CALLER_BOX_INPUT: f32 = 320.0;

/// BlazeFace: a padded whole-photo pass plus tiles, merged by one weighted NMS.
fn blazeface_passes(
    batcher: &Batcher<Vec<f32>, Vec<Detection>>,
    spec: &InputSpec,
    plan: &PlanOptions,
    tile_threshold: f32,
    img: &RgbImage,
) -> Result<Vec<Detection>> {
    let (w, h) = img.dimensions();
    let (passes, scales) = detector::plan(w, h, plan);
    let levels = detector::pyramid(img, &scales);
    let inputs: Vec<Vec<f32>> = passes
        .iter()
        .map(|p| {
            let mut buf = vec![0f32; spec.values_per_image()];
            detector::render_pass(&levels[p.level], w, h, p, spec, &mut buf);
            buf
        })
        .collect();
    let results = batcher.run(inputs)?;
    let mut all = Vec::new();
    for (pass, dets) in passes.iter().zip(results) {
        for d in dets {
            let frame_filling = !pass.tiled && d.width() >= LARGE_FACE_FRACTION * spec.width as f32;
            let needed = if frame_filling { tile_threshold - WHOLE_PHOTO_MARGIN } else { tile_threshold };
            if d.score < needed {
                continue;
            }
            if detector::cut_by_tile_edge(pass, &d, spec.width, w, h) || detector::too_big_for_tile(pass, &d, spec.width) {
                continue;
            }
            all.push(pass.to_photo(&d));
        }
    }
    Ok(detector::nms(all, NmsOptions::default()))
}

/// How YuNet's detections from overlapping windows are merged.
const YUNET_NMS: NmsOptions = NmsOptions { iou: 0.3, containment: 0.65, weighted: false };

/// YuNet over the given windows of `img`, merged by NMS, in `img` pixels.
fn yunet_passes(batcher: &Batcher<WindowJob, Vec<Detection>>, img: &Arc<RgbImage>, windows: &[yunet::Window]) -> Result<Vec<Detection>> {
    Ok(detector::nms(yunet_detections(batcher, img, windows)?, YUNET_NMS))
}

/// YuNet over the given windows of `img`, unmerged, in `img` pixels.
fn yunet_detections(batcher: &Batcher<WindowJob, Vec<Detection>>, img: &Arc<RgbImage>, windows: &[yunet::Window]) -> Result<Vec<Detection>> {
    let results = batcher.run(WindowJob::each(img, windows))?;
    Ok(kept_in_photo(img, windows, results))
}

/// The detections each window keeps, in `img` pixels.
fn kept_in_photo(img: &RgbImage, windows: &[yunet::Window], results: Vec<Vec<Detection>>) -> Vec<Detection> {
    let (w, h) = img.dimensions();
    let mut all = Vec::new();
    for (win, dets) in windows.iter().zip(results) {
        all.extend(dets.iter().filter(|d| win.keeps(d, w, h)).map(|d| win.pass.to_photo(d)));
    }
    all
}

/// Eyes, nose and mouth of a detection, whatever the detector family.
struct FacePoints {
    right_eye: (f32, f32),
    left_eye: (f32, f32),
    nose: (f32, f32),
    /// Mouth centre.
    mouth: (f32, f32),
    /// Right and left mouth corners, when the detector gives them.
    corners: Option<[(f32, f32); 2]>,
}

impl FacePoints {
    fn of(det: &Detection, decoder: Decoder) -> Option<FacePoints> {
        let p = &det.keypoints;
        match decoder {
            Decoder::Blazeface if p.len() == detector::KEYPOINTS => Some(FacePoints {
                right_eye: p[kp::RIGHT_EYE],
                left_eye: p[kp::LEFT_EYE],
                nose: p[kp::NOSE],
                mouth: p[kp::MOUTH],
                corners: None,
            }),
            Decoder::Yunet if p.len() == yunet::KEYPOINTS => {
                let (r, l) = (p[yunet::kp::MOUTH_RIGHT], p[yunet::kp::MOUTH_LEFT]);
                Some(FacePoints {
                    right_eye: p[yunet::kp::RIGHT_EYE],
                    left_eye: p[yunet::kp::LEFT_EYE],
                    nose: p[yunet::kp::NOSE],
                    mouth: ((r.0 + l.0) / 2.0, (r.1 + l.1) / 2.0),
                    corners: Some([r, l]),
                })
            }
            _ => None,
        }
    }
}

/// How usable a detected face is for recognition, in [0, 1]: the detector's score, times a
/// size factor (1 from [`QUALITY_FULL_SIZE`] pixels of box side down, linear below it), times
/// frontality (1 when the nose tip sits midway between the eyes along the eye line, 0 when it
/// is level with an eye, as in a profile). Roll does not count: alignment undoes it.
pub fn quality(det: &Detection, decoder: Decoder) -> f32 {
    let Some(p) = FacePoints::of(det, decoder) else { return 0.0 };
    let size = (det.width().min(det.height()) / QUALITY_FULL_SIZE).clamp(0.0, 1.0);
    let (ex, ey) = (p.left_eye.0 - p.right_eye.0, p.left_eye.1 - p.right_eye.1);
    let eye_dist2 = ex * ex + ey * ey;
    if eye_dist2 < 1e-6 {
        return 0.0;
    }
    let mid = ((p.left_eye.0 + p.right_eye.0) / 2.0, (p.left_eye.1 + p.right_eye.1) / 2.0);
    // Nose offset from the eyes' midpoint along the eye line, in eye distances (0 frontal, 0.5 at an eye).
    let along = ((p.nose.0 - mid.0) * ex + (p.nose.1 - mid.1) * ey) / eye_dist2;
    let frontality = (1.0 - 2.0 * along.abs()).clamp(0.0, 1.0);
    (det.score.clamp(0.0, 1.0) * size * frontality).clamp(0.0, 1.0)
}

/// Box side in pixels from which a face counts as big enough for the recognisers (their
/// inputs are 112 to 224 pixels; a 64 px face is already upsampled).
const QUALITY_FULL_SIZE: f32 = 64.0;

/// Photo → crop transform for one face: keypoints fitted to the recogniser's template when
/// there are keypoints, else an upright square around the box.
fn face_transform(c: &Candidate, decoder: Decoder, spec: &CropSpec, out: u32) -> Affine {
    let d = &c.det;
    let side = d.width().max(d.height()) * spec.enlarge;
    let upright = align::square_crop_transform((d.x1 + d.x2) / 2.0, (d.y1 + d.y2) / 2.0, side, out);
    let Some(p) = c.has_keypoints.then(|| FacePoints::of(d, decoder)).flatten() else { return upright };
    let (src, dst): (Vec<(f32, f32)>, Vec<(f32, f32)>) = match spec.alignment {
        Alignment::Box => {
            let to_crop = |(x, y): (f32, f32)| ((0.5 + (x - 0.5) / spec.enlarge) * out as f32, (0.5 + (y - 0.5) / spec.enlarge) * out as f32);
            (vec![p.right_eye, p.left_eye, p.nose, p.mouth], FACE_TEMPLATE.iter().map(|&q| to_crop(q)).collect())
        }
        Alignment::Arcface => {
            let k = out as f32 / ARCFACE_SIDE;
            let t: Vec<(f32, f32)> = ARCFACE_TEMPLATE.iter().map(|&(x, y)| (x * k, y * k)).collect();
            match p.corners {
                Some([r, l]) => (vec![p.right_eye, p.left_eye, p.nose, r, l], t),
                // Without corners, the mouth centre goes to the middle of the template's corners.
                None => (vec![p.right_eye, p.left_eye, p.nose, p.mouth], vec![t[0], t[1], t[2], ((t[3].0 + t[4].0) / 2.0, (t[3].1 + t[4].1) / 2.0)]),
            }
        }
        // dlib fits its chip to five points of its own landmark model (eye corners and the
        // bottom of the nose); ours has eye centres, which go to the middle of each corner pair.
        // Our nose tip is not dlib's nose bottom: fitting it to that point as a third pair made
        // Cydral's age worse on the labelled photos (MAE 8.9 years against 7.5 from the eyes
        // alone, gender 90% against 92%), so the eyes alone fix the chip.
        Alignment::DlibChip => (vec![p.right_eye, p.left_eye], attributes::dlib_chip_eyes(out as f32).to_vec()),
    };
    match align::similarity_transform(&src, &dst) {
        // Keypoints that disagree wildly with the box (a bad detection) would zoom the crop
        // onto a fragment; keep the upright crop unless the fitted scale is plausible.
        Some(t) if (t.scale() / upright.scale() - 1.0).abs() < 0.5 => t,
        _ => upright,
    }
}
