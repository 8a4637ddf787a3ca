//! What the engine is opened with ([`EngineOptions`], checked in one place by
//! [`EngineOptions::validate`]) and what one analysis asks for ([`AnalyzeOptions`]).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::error::{EngineError, Result};
use crate::providers::Provider;
use crate::shapes::FixedShapes;

/// Engine configuration (mirrors the JavaScript `EngineOptions`, whose JSON it reads with the
/// same field names: the GPU bench's plan carries the service's settings this way).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
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
    /// Whether model inputs are padded to a few fixed shapes, each run once before the engine
    /// is ready: "on", "off", or "auto" (on exactly when TensorRT or CUDA is asked for). See
    /// [`crate::shapes`].
    pub fixed_shapes: String,
    /// Whether TensorRT may use half-precision kernels.
    pub trt_fp16: bool,
    /// Folder where every session writes ONNX Runtime's per-node profile when it closes (None:
    /// no profile). For diagnosis only (the GPU bench's detector probe): it records every run.
    pub profile_dir: Option<PathBuf>,
}

/// The service's defaults (src/config/engine-options.ts declares them; its test compares them
/// with these through the addon's `engineDefaults`), so examples and benches that start from
/// `EngineOptions::default()` run the engine the service runs.
impl Default for EngineOptions {
    fn default() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let workers = default_inference_workers(cores);
        EngineOptions {
            model_dir: PathBuf::from("models"),
            ort_library: PathBuf::from("node_modules/onnxruntime-node/bin/napi-v6/linux/x64/libonnxruntime.so.1"),
            providers: vec!["cpu".into()],
            intra_threads: (cores / workers).max(1),
            inference_workers: workers,
            max_batch: 32,
            batch_wait_us: 2000,
            queue_capacity: 256,
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
            fixed_shapes: "auto".into(),
            trt_fp16: true,
            profile_dir: None,
        }
    }
}

/// Inference workers side by side, each with single-threaded sessions, beat one worker whose
/// session spreads over the cores: on 2 cores, 2 x 1 gave 1.2x the photos/s of 1 x 2 for
/// detect + embed (bench/RESULTS.md). Beyond 8 workers, the cores go to intra-op threads.
pub fn default_inference_workers(cores: usize) -> usize {
    cores.clamp(1, 8)
}

/// Smallest `min_face` accepted, in photo pixels.
const MIN_FACE: f32 = 8.0;
/// Smallest `max_decode_bytes` accepted (1 MiB).
const MIN_DECODE_BYTES: u64 = 1 << 20;

impl EngineOptions {
    /// Checks every option, failing with BAD_PARAM on the first one out of range and naming it
    /// as JavaScript callers spell it. [`Engine::open`](crate::Engine::open) calls it first;
    /// the rest of the engine relies on what it checks.
    pub fn validate(&self) -> Result<()> {
        if self.execution_providers()?.is_empty() {
            return Err(bad_param("providers must not be empty"));
        }
        let counts = [
            ("intraThreads", self.intra_threads as u64),
            ("inferenceWorkers", self.inference_workers as u64),
            ("maxBatch", self.max_batch as u64),
            ("queueCapacity", self.queue_capacity as u64),
            ("maxPixels", self.max_pixels),
            ("maxAspectRatio", u64::from(self.max_aspect_ratio)),
        ];
        if let Some((name, _)) = counts.iter().find(|(_, v)| *v == 0) {
            return Err(bad_param(&format!("{name} must be positive")));
        }
        if self.detect_threshold.is_some_and(|t| !(0.0..=1.0).contains(&t)) {
            return Err(bad_param("detectThreshold must be within 0..1"));
        }
        if !(self.min_face.is_finite() && self.min_face >= MIN_FACE) {
            return Err(bad_param("minFace must be at least 8"));
        }
        if self.max_decode_bytes < MIN_DECODE_BYTES {
            return Err(bad_param("maxDecodeBytes must be at least 1 MiB"));
        }
        FixedShapes::parse(&self.fixed_shapes)?;
        Ok(())
    }

    /// Whether inputs run at fixed shapes: `fixedShapes` resolved for the providers asked for.
    pub fn shapes_fixed(&self) -> Result<bool> {
        Ok(FixedShapes::parse(&self.fixed_shapes)?.resolve(&self.execution_providers()?))
    }

    /// The execution providers, parsed, highest priority first.
    pub fn execution_providers(&self) -> Result<Vec<Provider>> {
        self.providers.iter().map(|p| Provider::parse(p)).collect()
    }
}

fn bad_param(message: &str) -> EngineError {
    EngineError::BadParam(message.to_string())
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

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(change: impl FnOnce(&mut EngineOptions)) -> String {
        let mut opts = EngineOptions::default();
        change(&mut opts);
        let err = opts.validate().unwrap_err();
        assert_eq!(err.code(), "BAD_PARAM");
        err.to_string()
    }

    #[test]
    fn validate_names_the_option_out_of_range() {
        assert!(EngineOptions::default().validate().is_ok());
        assert!(refused(|o| o.providers.clear()).contains("providers must not be empty"));
        assert!(refused(|o| o.providers = vec!["gpu".into()]).contains("unknown execution provider"));
        assert!(refused(|o| o.intra_threads = 0).contains("intraThreads must be positive"));
        assert!(refused(|o| o.inference_workers = 0).contains("inferenceWorkers must be positive"));
        assert!(refused(|o| o.max_batch = 0).contains("maxBatch must be positive"));
        assert!(refused(|o| o.queue_capacity = 0).contains("queueCapacity must be positive"));
        assert!(refused(|o| o.max_pixels = 0).contains("maxPixels must be positive"));
        assert!(refused(|o| o.max_aspect_ratio = 0).contains("maxAspectRatio must be positive"));
        assert!(refused(|o| o.detect_threshold = Some(1.5)).contains("detectThreshold"));
        assert!(refused(|o| o.detect_threshold = Some(f32::NAN)).contains("detectThreshold"));
        assert!(refused(|o| o.min_face = 7.5).contains("minFace must be at least 8"));
        assert!(refused(|o| o.min_face = f32::NAN).contains("minFace"));
        assert!(refused(|o| o.max_decode_bytes = 1000).contains("maxDecodeBytes must be at least 1 MiB"));
        assert!(refused(|o| o.fixed_shapes = "always".into()).contains("fixedShapes must be auto, on or off"));
    }

    #[test]
    fn fixed_shapes_default_to_gpu_providers_only() {
        let with = |providers: &[&str], fixed: &str| {
            let opts = EngineOptions { providers: providers.iter().map(|p| p.to_string()).collect(), fixed_shapes: fixed.into(), ..EngineOptions::default() };
            opts.shapes_fixed().unwrap()
        };
        assert!(!with(&["cpu"], "auto"));
        assert!(with(&["tensorrt", "cuda", "cpu"], "auto"));
        assert!(with(&["cuda", "cpu"], "auto"));
        assert!(with(&["cpu"], "on"));
        assert!(!with(&["tensorrt", "cpu"], "off"));
        assert!(EngineOptions::default().trt_fp16);
    }
}
