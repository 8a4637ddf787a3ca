//! [`Engine::open`]: check the options, load the runtime, pick the models, start the detector
//! and face workers, then the pipeline threads.

use std::sync::{Arc, Once};

use crate::error::Result;
use crate::image_io::DecodeLimits;
use crate::manifest::Manifest;
use crate::pool::{Pool, PoolConfig};
use crate::providers::Provider;
use crate::runtime::{self, Runtime};
use crate::simd;
use crate::telemetry::Telemetry;

use super::crop::{CropSpec, EMOTION_CROP};
use super::detector_stage::DetectorStage;
use super::face_stage;
use super::models::ModelChoice;
use super::sessions;
use super::stage::StageSettings;
use super::{Engine, EngineInfo, EngineOptions, Inner};

impl Engine {
    /// Loads the runtime and every model the options name, starting all worker threads.
    pub fn open(opts: EngineOptions) -> Result<Engine> {
        opts.validate()?;
        let providers = opts.execution_providers()?;
        let manifest = Manifest::load(&opts.model_dir)?;
        let rt = runtime::init(&opts.ort_library)?;
        if providers.contains(&Provider::TensorRt) {
            runtime::set_tensorrt_cache(opts.tensorrt_cache.clone())?;
        }
        let models = ModelChoice::resolve(&manifest, &opts)?;
        let telemetry = Arc::new(Telemetry::default());
        let (plan, sessions) = sessions::plan(&opts, &providers, &models)?;
        let plan = Arc::new(plan);
        let stage = StageSettings::new(rt, &opts, providers, &telemetry, &plan);
        // Each worker builds its sessions, and with fixed shapes warms them up, before these
        // return: the engine is ready only once every shape has run.
        let detector = DetectorStage::start(&stage, &models.detector, &opts)?;
        let (faces, dim, active) = face_stage::start(&stage, &models)?;
        let warmup = sessions::warmup_report(&plan, &sessions);
        let info = EngineInfo {
            providers: active,
            simd: simd::active_level().name().to_string(),
            recognizer: models.recognizer_name.clone(),
            recognizer_source: models.recognizer_source.name().to_string(),
            detector: models.detector.id.clone(),
            dim,
            models: models.loaded(),
            fixed_shapes: plan.fixed_shapes,
            sessions,
            warmup,
        };
        let pool = pipeline_pool(&opts)?;
        let inner = Inner {
            limits: DecodeLimits { max_pixels: opts.max_pixels, max_aspect_ratio: opts.max_aspect_ratio, max_bytes: opts.max_decode_bytes },
            detector,
            decoder: models.detector.decoder,
            faces,
            recognizer_crops: models.recognizers.iter().map(|(e, _)| CropSpec::face_model(e)).collect(),
            attribute_crops: models.attributes.iter().map(|(e, _)| CropSpec::face_model(e)).collect(),
            age_from: models.age_from,
            gender_from: models.gender_from,
            emotion_crop: models.emotion.as_ref().map(|e| CropSpec::of(e, EMOTION_CROP)),
            info,
            telemetry,
        };
        log_ready(rt, &models, dim);
        Ok(Engine { inner: Arc::new(inner), pool: Arc::new(pool) })
    }
}

/// The pipeline threads (decode, detector passes, crops): as many as asked, one per CPU by
/// default.
fn pipeline_pool(opts: &EngineOptions) -> Result<Pool> {
    let threads = if opts.pipeline_threads == 0 {
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2)
    } else {
        opts.pipeline_threads
    };
    // At least two threads, so that one is always free for light requests.
    let threads = threads.max(2);
    let heavy_threads = if opts.heavy_threads == 0 { (threads / 2).max(1) } else { opts.heavy_threads };
    Pool::with_config(PoolConfig {
        name: "pipeline",
        threads,
        capacity: opts.queue_capacity,
        heavy_limit: heavy_threads,
        heavy_budget_ms: opts.heavy_queue_ms,
    })
}

/// One log line per process when the first engine is ready.
fn log_ready(rt: &Runtime, models: &ModelChoice, dim: usize) {
    static SIMD_LOG: Once = Once::new();
    SIMD_LOG.call_once(|| {
        runtime::log_json(
            runtime::LogLevel::Info,
            "engine ready",
            serde_json::json!({
                "simd": simd::active_level().name(),
                "onnxruntime": rt.version(),
                "recognizer": models.recognizer_name,
                "recognizerSource": models.recognizer_source.name(),
                "dim": dim,
            }),
        )
    });
}
