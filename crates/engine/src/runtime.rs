//! ONNX Runtime: loading the shared library, choosing execution providers, building sessions.
//!
//! The library is loaded at run time from a path the caller gives (the one shipped with
//! onnxruntime-node by default), so the same binary can use a CPU build or a GPU build.
//! Execution providers are tried in the caller's order; ONNX Runtime would otherwise fall back
//! to CPU silently, so what is active and what was skipped, and why, is logged as one JSON
//! line on stderr and reported by `info()`.
//!
//! What an engine asks of the sessions its workers build (each provider's options per model,
//! fixed shapes and the warm-up) is its [`SessionPlan`]. Every model loader is handed it, with
//! the runtime, the model folder, the providers and the cap on batches, as a [`SessionSource`],
//! so what a session follows is in its loader's arguments rather than in its thread.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use ort::ep::ExecutionProvider;
use ort::environment::Environment;
use ort::session::builder::GraphOptimizationLevel;
use ort::session::Session;
use ort::value::Tensor;
use serde_json::json;

use crate::error::{EngineError, Result};
use crate::manifest::{InputSpec, Manifest, ModelEntry};
use crate::providers::{self, Provider, ProviderSettings};
use crate::shapes;

/// The loaded runtime. One per process: ONNX Runtime's library and environment are global.
pub struct Runtime {
    env: Environment,
    library: PathBuf,
    version: String,
}

static RUNTIME: OnceLock<Runtime> = OnceLock::new();
static INIT_LOCK: Mutex<()> = Mutex::new(());
/// Where TensorRT keeps the engines it builds (see [`set_tensorrt_cache`]).
static TENSORRT_CACHE: Mutex<Option<PathBuf>> = Mutex::new(None);

/// Has TensorRT keep the engines (and timing data) it builds in `dir`, so a restart loads them
/// instead of spending minutes rebuilding each model. Process-wide, like the runtime itself:
/// sessions built after this call use it. `None` keeps engines in memory only.
pub fn set_tensorrt_cache(dir: Option<PathBuf>) -> Result<()> {
    if let Some(d) = &dir {
        std::fs::create_dir_all(d).map_err(|e| EngineError::Model(format!("cannot create TensorRT cache folder {}: {e}", d.display())))?;
    }
    *TENSORRT_CACHE.lock().map_err(|_| EngineError::Internal("TensorRT cache lock poisoned".into()))? = dir;
    Ok(())
}

/// Provider options for a session built outside any engine's plan (examples, tests): the
/// process-wide TensorRT cache, fp16, shapes as they come.
fn unplanned_settings() -> ProviderSettings {
    ProviderSettings::new(true, TENSORRT_CACHE.lock().ok().and_then(|d| d.clone()), false, None)
}

/// What an engine asks of every session its model workers build: each model's provider
/// options, whether shapes are fixed, and the shapes to run each model at before the engine is
/// ready (its warm-up), with what each took. Its workers reach it through their
/// [`SessionSource`]; a model it has no entry for gets the unplanned provider options and no
/// warm-up, but still runs at fixed shapes when the plan says so.
#[derive(Debug, Default)]
pub struct SessionPlan {
    pub fixed_shapes: bool,
    /// Where each session writes ONNX Runtime's profile ([`crate::EngineOptions::profile_dir`]).
    pub profile_dir: Option<PathBuf>,
    /// Per model, by the path of its `.onnx` file (as [`crate::manifest::Manifest::onnx_path`]
    /// makes it).
    models: HashMap<PathBuf, ModelPlan>,
    /// Every warm-up run, of every worker.
    warmups: Mutex<Vec<Warmup>>,
    /// Held while a session is built and warmed up when TensorRT is asked for: the engine's
    /// other workers then load the engines the first one built from the cache instead of
    /// building them again at the same time.
    building: Mutex<()>,
}

/// One model's part of a [`SessionPlan`].
#[derive(Debug, Clone)]
pub struct ModelPlan {
    /// Manifest id.
    pub id: String,
    pub input: InputSpec,
    pub providers: ProviderSettings,
    /// Input tensor shapes the model is run at (empty unless shapes are fixed): its warm-up.
    pub shapes: Vec<Vec<i64>>,
}

/// One warm-up run: a model at one input shape, and how long it took (session build excluded).
#[derive(Debug, Clone, PartialEq)]
pub struct Warmup {
    pub model: String,
    pub shape: Vec<i64>,
    pub ms: f64,
}

impl SessionPlan {
    pub fn new(fixed_shapes: bool, models: impl IntoIterator<Item = (PathBuf, ModelPlan)>) -> SessionPlan {
        SessionPlan { fixed_shapes, models: models.into_iter().collect(), ..SessionPlan::default() }
    }

    /// Every warm-up run so far, in the order they finished.
    pub fn warmups(&self) -> Vec<Warmup> {
        self.warmups.lock().map(|w| w.clone()).unwrap_or_default()
    }
}

/// Loads ONNX Runtime from `library` (first call) and returns the process-wide runtime. Later
/// calls with another path keep the library already loaded, and say so in the log.
pub fn init(library: &Path) -> Result<&'static Runtime> {
    let _guard = INIT_LOCK.lock().map_err(|_| EngineError::Internal("runtime init lock poisoned".into()))?;
    if let Some(rt) = RUNTIME.get() {
        if rt.library != library {
            log_json(
                LogLevel::Warn,
                "onnxruntime already loaded; ignoring other library path",
                json!({"loaded": rt.library.display().to_string(), "requested": library.display().to_string()}),
            );
        }
        return Ok(rt);
    }
    if !library.exists() {
        return Err(EngineError::Model(format!("onnxruntime library not found at {}", library.display())));
    }
    let builder = ort::init_from(library).map_err(|e| EngineError::Model(format!("cannot load onnxruntime: {e}")))?;
    let env = builder
        .with_name("face-engine")
        .with_telemetry(false)
        .build()
        .map_err(|e| EngineError::Model(format!("cannot create onnxruntime environment: {e}")))?;
    let version = library_version(library).unwrap_or_else(|| "unknown".into());
    let rt = Runtime { env, library: library.to_path_buf(), version };
    let _ = RUNTIME.set(rt);
    Ok(RUNTIME.get().expect("just set"))
}

/// What a session ended up running on.
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderReport {
    /// Providers registered, in priority order; always ends with "cpu".
    pub active: Vec<String>,
    /// Providers requested but not registered, with the reason.
    pub skipped: Vec<(String, String)>,
}

impl Runtime {
    /// ONNX Runtime build description (for logs).
    pub fn version(&self) -> &str {
        &self.version
    }
}

/// How a model worker builds its sessions: the runtime, the model folder, the providers and
/// intra-op threads of each session, the cap on a model's batches, and the engine's plan.
/// Code without an engine (examples, tests) passes no plan (shapes as they come), or a plan
/// with no models to get fixed shapes with the unplanned provider options.
#[derive(Clone, Copy)]
pub struct SessionSource<'a> {
    pub rt: &'a Runtime,
    pub dir: &'a Path,
    pub providers: &'a [Provider],
    /// ONNX Runtime intra-op threads per session.
    pub intra: usize,
    /// Most rows a model with a dynamic batch runs at once.
    pub max_batch: usize,
    pub plan: Option<&'a SessionPlan>,
}

impl SessionSource<'_> {
    /// Builds the sessions of `entry` with the requested providers. The CPU provider keeps an
    /// arena, which holds the largest run's memory for good: bounded for every model here, the
    /// detector included, since its windows are at most 1280 pixels on a side
    /// ([`crate::yunet::TILE_SIDE`]). With it YuNet runs 30-40% faster (`face_sizes --cost`:
    /// 25 against 36 ns per input pixel at 1024 px) and the 12-48 MP timing bench peaked lower
    /// (840 against 940 MiB).
    ///
    /// Where the plan has an entry for the model, the providers get its options, and with
    /// fixed shapes each session runs once at each of its shapes before it is returned, so
    /// TensorRT's engines are built (or loaded from the cache) and cuDNN's algorithms chosen
    /// before the engine reports ready. Under the CUDA provider without TensorRT, a model with
    /// several fixed shapes gets a session for each (see [`ModelSession`]).
    pub fn session(&self, entry: &ModelEntry) -> Result<(ModelSession, ProviderReport)> {
        let model = Manifest::onnx_path(self.dir, entry);
        let model_plan = self.plan.and_then(|p| p.models.get(&model));
        let settings = model_plan.map_or_else(unplanned_settings, |m| m.providers.clone());
        let _building = match self.plan {
            Some(p) if self.providers.contains(&Provider::TensorRt) => Some(p.building.lock().map_err(|_| EngineError::Internal("session build lock poisoned".into()))?),
            _ => None,
        };
        let warmed = match (self.plan, model_plan) {
            (Some(plan), Some(m)) if plan.fixed_shapes => Some((plan, m)),
            _ => None,
        };
        let Some((plan, m)) = warmed else {
            let (session, report) = self.build(entry, &model, &settings)?;
            return Ok((ModelSession { sessions: vec![(None, session)] }, report));
        };
        let groups: Vec<Vec<Vec<i64>>> = if self.session_per_shape() && m.shapes.len() > 1 { m.shapes.iter().map(|s| vec![s.clone()]).collect() } else { vec![m.shapes.clone()] };
        let mut sessions = Vec::with_capacity(groups.len());
        let mut report = None;
        for shapes in groups {
            let (mut session, r) = self.build(entry, &model, &settings)?;
            let runs = warm_up(&mut session, &m.id, &shapes)?;
            plan.warmups.lock().map_err(|_| EngineError::Internal("warm-up record poisoned".into()))?.extend(runs);
            sessions.push(((shapes.len() == 1).then(|| shapes[0].clone()), session));
            report.get_or_insert(r);
        }
        let report = report.ok_or_else(|| EngineError::Internal(format!("no session built for {}", m.id)))?;
        Ok((ModelSession { sessions }, report))
    }

    /// Whether a model with several fixed shapes gets a session per shape: under the CUDA
    /// provider without TensorRT. ONNX Runtime's CUDA provider (1.20 on, with cuDNN 9) prepares
    /// each convolution again whenever a session's input shape differs from its previous run's,
    /// and YuNet's depthwise convolutions make that slow: on an H200 (ONNX Runtime 1.31.1,
    /// cuDNN 9) one YuNet run took 1.43 s, every run, warm-up done, when a photo's two windows
    /// alternated between two shapes. TensorRT runs the convolutions itself, over one profile
    /// covering every shape.
    fn session_per_shape(&self) -> bool {
        self.providers.contains(&Provider::Cuda) && !self.providers.contains(&Provider::TensorRt)
    }

    /// One session of `entry` (its `.onnx` file at `model`) on the requested providers.
    fn build(&self, entry: &ModelEntry, model: &Path, settings: &ProviderSettings) -> Result<(Session, ProviderReport)> {
        let mut builder = Session::builder(&self.rt.env)?
            .with_optimization_level(GraphOptimizationLevel::Level3)
            .map_err(ort::Error::from)?
            .with_intra_threads(self.intra.max(1))
            .map_err(ort::Error::from)?;
        if let Some(dir) = self.plan.and_then(|p| p.profile_dir.as_ref()) {
            // ONNX Runtime names the file from this prefix and the second it was opened, so
            // the sequence number keeps the sessions of one model apart.
            static PROFILES: AtomicUsize = AtomicUsize::new(0);
            let prefix = dir.join(format!("{}-{}", entry.id, PROFILES.fetch_add(1, Ordering::Relaxed)));
            builder = builder.with_profiling(prefix).map_err(ort::Error::from)?;
        }
        let mut report = ProviderReport { active: Vec::new(), skipped: Vec::new() };
        for &p in self.providers {
            let registered = match p {
                Provider::Cpu => break, // always there, and lowest priority by definition
                Provider::TensorRt => register(providers::tensorrt(&settings.tensorrt), &mut builder),
                Provider::Cuda => register(providers::cuda(&settings.cuda), &mut builder),
            };
            match registered {
                Ok(()) => report.active.push(p.name().to_string()),
                Err(reason) => report.skipped.push((p.name().to_string(), reason)),
            }
        }
        report.active.push("cpu".into());
        let session = builder.commit_from_file(model).map_err(|e| EngineError::Model(format!("cannot load {}: {e}", model.display())))?;
        Ok((session, report))
    }

    /// Whether inputs run at fixed shapes: only under a plan that says so.
    pub fn fixed_shapes(&self) -> bool {
        self.plan.is_some_and(|p| p.fixed_shapes)
    }

    /// The batch sizes a model batching at most `cap` rows runs at: `None` (any size) unless
    /// shapes are fixed (see [`shapes::batch_sizes`]).
    pub fn batch_sizes(&self, cap: usize) -> Option<Vec<usize>> {
        self.fixed_shapes().then(|| shapes::batch_sizes(cap))
    }
}

/// Runs `session` (of model `id`) once at each of `shapes` on zeros, timing each run.
fn warm_up(session: &mut Session, id: &str, shapes: &[Vec<i64>]) -> Result<Vec<Warmup>> {
    let mut runs = Vec::with_capacity(shapes.len());
    for shape in shapes {
        let values = shape.iter().product::<i64>().max(0) as usize;
        let tensor = Tensor::from_array((shape.clone(), vec![0f32; values]))?;
        let t = Instant::now();
        session.run(ort::inputs![tensor]).map_err(|e| EngineError::Model(format!("model {id} fails its warm-up at {}: {e}", providers::dims_text(shape))))?;
        runs.push(Warmup { model: id.to_string(), shape: shape.clone(), ms: t.elapsed().as_secs_f64() * 1e3 });
    }
    Ok(runs)
}

/// A model's sessions on one worker: one for every input shape, or, under the CUDA provider
/// with fixed shapes, one per shape (see [`SessionSource::session_per_shape`]). A run goes to
/// the session of its shape, else to the first.
pub struct ModelSession {
    /// Each session with the one shape it runs at (None: any).
    sessions: Vec<(Option<Vec<i64>>, Session)>,
}

impl ModelSession {
    fn for_shape(&mut self, shape: &[i64]) -> &mut Session {
        let k = self.sessions.iter().position(|(s, _)| s.as_deref() == Some(shape)).unwrap_or(0);
        &mut self.sessions[k].1
    }
}

fn register<E: ExecutionProvider>(ep: E, builder: &mut ort::session::builder::SessionBuilder) -> std::result::Result<(), String> {
    match E::is_available() {
        Ok(true) => {}
        Ok(false) => return Err("not included in this onnxruntime library".into()),
        Err(e) => return Err(e.to_string()),
    }
    ep.register(builder).map_err(|e| e.to_string())
}

/// Logs which providers a model runs on, once per model.
pub fn log_providers(model_id: &str, requested: &[Provider], report: &ProviderReport) {
    let requested: Vec<&str> = requested.iter().map(|p| p.name()).collect();
    let skipped: Vec<serde_json::Value> = report.skipped.iter().map(|(p, why)| json!({"provider": p, "reason": why})).collect();
    let fell_back = report.active.first().map(String::as_str) != requested.first().copied();
    log_json(
        if fell_back { LogLevel::Warn } else { LogLevel::Info },
        "execution providers",
        json!({
            "model": model_id,
            "requested": requested,
            "active": report.active,
            "primary": report.active.first().map(String::as_str).unwrap_or("cpu"),
            "skipped": skipped,
        }),
    );
}

/// Severity of an engine log line, numbered as the service's logger (pino) numbers it.
#[derive(Debug, Clone, Copy)]
pub enum LogLevel {
    Info = 30,
    Warn = 40,
}

/// One JSON line on stderr, in the service's own log format (numeric level, ISO time, service,
/// msg), so one collector reads the engine's lines and the service's alike.
pub fn log_json(level: LogLevel, msg: &str, fields: serde_json::Value) {
    let mut line = json!({
        "level": level as u8,
        "time": iso_time(std::time::SystemTime::now()),
        "service": "face-service",
        "component": "engine",
        "msg": msg,
    });
    if let (Some(out), serde_json::Value::Object(extra)) = (line.as_object_mut(), fields) {
        out.extend(extra);
    }
    // Never `eprintln!`: it panics when the write fails (a full non-blocking pipe, a closed
    // stream), and a log line must not take an inference worker down.
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// UTC time as ISO 8601 with milliseconds ("2026-11-25T09:30:00.123Z"), as the service logs it.
fn iso_time(t: std::time::SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

/// The library's own version ("1.30.0"). Its build-info string names a git branch instead,
/// which says nothing for builds made from a detached HEAD (onnxruntime-node's).
fn library_version(library: &Path) -> Option<String> {
    // SAFETY: ort has already loaded this library, so this only takes another reference to it;
    // OrtGetApiBase and GetVersionString are the C API's entry points, and the string they
    // return is static and NUL-terminated.
    unsafe {
        let lib = libloading::Library::new(library).ok()?;
        let get_base: libloading::Symbol<unsafe extern "C" fn() -> *const ort::sys::OrtApiBase> = lib.get(b"OrtGetApiBase").ok()?;
        let base = get_base();
        if base.is_null() {
            return None;
        }
        let text = ((*base).GetVersionString)();
        if text.is_null() {
            return None;
        }
        Some(std::ffi::CStr::from_ptr(text).to_string_lossy().into_owned())
    }
}

/// An output tensor copied out of a session run.
#[derive(Debug, Clone)]
pub struct Output {
    pub name: String,
    pub shape: Vec<i64>,
    pub data: Vec<f32>,
}

/// Runs `session` on a batch of crops (RGB8 at the model's input size), converted to the layout,
/// colour order and value range `spec` gives.
pub fn run_crops(session: &mut ModelSession, spec: &InputSpec, crops: &[&[u8]]) -> Result<Vec<Output>> {
    let mut data = Vec::with_capacity(crops.len() * spec.values_per_image());
    for crop in crops {
        spec.push_image(crop, &mut data);
    }
    run_images(session, spec, crops.len(), spec.height, spec.width, data)
}

/// Runs `session` on one float image batch laid out as `spec` says and copies every output out.
pub fn run_images(session: &mut ModelSession, spec: &InputSpec, batch: usize, height: u32, width: u32, data: Vec<f32>) -> Result<Vec<Output>> {
    let shape = spec.shape(batch, height, width);
    let session = session.for_shape(&shape);
    let tensor = Tensor::from_array((shape, data))?;
    let outputs = session.run(ort::inputs![tensor])?;
    let mut out = Vec::with_capacity(outputs.len());
    for (name, value) in outputs.iter() {
        let (shape, data) = value.try_extract_tensor::<f32>()?;
        out.push(Output { name: name.to_string(), shape: shape.iter().copied().collect(), data: data.to_vec() });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_times_are_iso_utc() {
        let at = |secs: u64, ms: u64| iso_time(std::time::UNIX_EPOCH + std::time::Duration::from_millis(secs * 1000 + ms));
        assert_eq!(at(0, 0), "1970-01-01T00:00:00.000Z");
        assert_eq!(at(951_782_400, 5), "2000-02-29T00:00:00.005Z");
        assert_eq!(at(1_795_599_045, 123), "2026-11-25T09:30:45.123Z");
    }
}
