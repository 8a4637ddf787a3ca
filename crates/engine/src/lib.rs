//! Face analysis over ONNX Runtime: decode an uploaded image, find the faces, align them, and
//! compute embeddings and attributes. Pure Rust with no JavaScript dependency; the Node addon
//! (`crates/addon`) is a thin layer over [`Engine`].
//!
//! Where things are:
//! - [`image_io`] — bytes → upright RGB (format sniffing, pixel limit, EXIF orientation)
//! - [`manifest`] — `models/manifest.json`, what each model expects
//! - [`runtime`] — ONNX Runtime loading, sessions on the requested providers, an engine's session plan
//! - [`providers`] — the execution providers the engine knows, the TensorRT and CUDA providers' options and their description
//! - [`shapes`] — fixed input shapes for GPU providers: batch sizes, `fixedShapes`
//! - [`detection`] — what every detector decodes into: detections, passes, NMS over them
//! - [`blazeface`] — multi-pass BlazeFace detection: plan, rendering, decoding, its model
//! - [`yunet`] — single-pass YuNet detection at a working resolution
//! - [`align`] — similarity transform to the canonical face and crop warping
//! - [`recognizer`] — embeddings (and age/gender heads), and recogniser specs combining models
//! - [`attributes`] — emotion, age and gender decoding
//! - [`batcher`] — bounded queues and the worker threads that own sessions
//! - [`pool`] — the pipeline threads, with a light lane and a cost-bounded heavy lane
//! - [`cancel`] — the token that withdraws a request
//! - [`simd`] — dot product / cosine kernels with runtime dispatch
//! - [`telemetry`] — model runs recorded for the service's metrics
//! - [`thumbnail`] — small JPEG crops of faces for camera sightings
//! - [`engine`] — the pipeline tying it together: [`Engine`], its options and results

pub mod align;
pub mod attributes;
pub mod batcher;
pub mod blazeface;
pub mod cancel;
pub mod detection;
pub mod engine;
pub mod error;
pub mod image_io;
pub mod manifest;
pub mod pool;
pub mod providers;
pub mod recognizer;
pub mod runtime;
pub mod shapes;
pub mod simd;
pub mod telemetry;
pub mod thumbnail;
pub mod yunet;

#[doc(hidden)]
pub mod testing;

pub use attributes::Gender;
pub use cancel::CancelToken;
pub use engine::{describe_sessions, Analysis, AnalyzeOptions, Engine, EngineInfo, EngineOptions, Face, QueueDepth, SessionInfo};
pub use error::{EngineError, Result};
