//! What the engine hands back: an [`Analysis`] of one image with its [`Face`]s, and the
//! [`EngineInfo`] and [`QueueDepth`] reported for health checks and metrics.

use crate::attributes::Gender;
use crate::runtime::Warmup;

/// One face in the upright image.
#[derive(Debug, Clone, PartialEq)]
pub struct Face {
    pub x1: i32,
    pub y1: i32,
    pub x2: i32,
    pub y2: i32,
    /// Detector score (1 for a caller's box that names none of the detector's faces).
    pub score: f32,
    /// Cut along its keypoints (false: a caller's box where the detector found no face, cropped
    /// upright, which embeds less reliably).
    pub aligned: bool,
    /// How usable the face is for recognition, in [0, 1]: see [`quality`](fn@crate::engine::quality).
    pub quality: f32,
    /// Flat `[x, y, ...]` keypoints used for alignment, in the detector family's order (YuNet:
    /// right eye, left eye, nose tip, right and left mouth corner); empty when none were found.
    pub landmarks: Vec<f32>,
    pub age: Option<u32>,
    pub gender: Option<Gender>,
    /// All emotion labels, most likely first.
    pub emotions: Option<Vec<String>>,
    /// JPEG bytes, when asked for with [`AnalyzeOptions::thumbnail`](crate::AnalyzeOptions::thumbnail).
    pub thumbnail: Option<Vec<u8>>,
}

/// Result of [`Engine::analyze`](crate::Engine::analyze).
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
    /// Why that recogniser: "option" (the caller named it), "gpu default", "avx-512 default" or
    /// "cpu default" (the manifest's, by provider and processor).
    pub recognizer_source: String,
    pub detector: String,
    pub dim: usize,
    /// `(id, onnx path)` of every loaded model.
    pub models: Vec<(String, String)>,
    /// Whether inputs run at fixed shapes (`fixedShapes` resolved for the providers).
    pub fixed_shapes: bool,
    /// Every model's session as it was built, in the order of `models`.
    pub sessions: Vec<SessionInfo>,
    /// With fixed shapes: each model at each of its shapes, run before the engine was ready,
    /// with the longest any worker took (ms); in the order of `sessions` and their shapes.
    pub warmup: Vec<Warmup>,
}

/// One model's sessions as the engine builds them ([`crate::engine::describe_sessions`]).
#[derive(Debug, Clone, PartialEq)]
pub struct SessionInfo {
    /// Manifest id.
    pub model: String,
    /// The options of each GPU provider asked for, exactly as ONNX Runtime is given them:
    /// provider name ("tensorrt", "cuda") and key/value pairs in the order they are set. The
    /// CPU provider takes none.
    pub providers: Vec<(String, Vec<(String, String)>)>,
    /// The input tensor shapes the model runs at with fixed shapes (its warm-up); empty
    /// without.
    pub shapes: Vec<Vec<i64>>,
}

impl SessionInfo {
    /// `{"model": ..., "providers": {"tensorrt": {"trt_fp16_enable": "1", ...}}, "shapes": [[1, 3, 320, 320], ...]}`.
    pub fn to_json(&self) -> serde_json::Value {
        let providers: serde_json::Map<String, serde_json::Value> = self
            .providers
            .iter()
            .map(|(name, options)| (name.clone(), options.iter().map(|(k, v)| (k.clone(), serde_json::Value::from(v.as_str()))).collect()))
            .collect();
        serde_json::json!({"model": self.model, "providers": providers, "shapes": self.shapes})
    }
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
