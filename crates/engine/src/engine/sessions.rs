//! The engine's session plan: for every model it loads, the GPU providers' options, and with
//! fixed shapes the input shapes it runs at (the detector's buckets, the face models' batch
//! sizes), which are also its warm-up and TensorRT's optimisation profile. Built once from
//! the options and the models chosen; [`describe_sessions`] gives the same without loading
//! anything, so the options a GPU host would get can be checked on any machine.

use std::collections::BTreeMap;

use crate::error::Result;
use crate::manifest::{Manifest, ModelEntry};
use crate::providers::{Profile, Provider, ProviderSettings};
use crate::runtime::{self, ModelPlan, SessionPlan, Warmup};
use crate::shapes;
use crate::yunet;

use super::models::ModelChoice;
use super::{EngineOptions, SessionInfo};

/// The plan for `models` under `opts`, and its description, model by model in the order of
/// [`ModelChoice::loaded`].
pub(super) fn plan(opts: &EngineOptions, providers: &[Provider], models: &ModelChoice) -> Result<(SessionPlan, Vec<SessionInfo>)> {
    let fixed = opts.shapes_fixed()?;
    let mut entries: Vec<&ModelEntry> = vec![&models.detector];
    entries.extend(models.recognizers.iter().map(|(e, _)| e));
    entries.extend(models.attributes.iter().map(|(e, _)| e));
    entries.extend(models.emotion.iter());
    let mut plans = Vec::with_capacity(entries.len());
    let mut described = Vec::with_capacity(entries.len());
    for entry in entries {
        let m = model_plan(entry, opts, fixed);
        described.push(SessionInfo {
            model: m.id.clone(),
            providers: m.providers.options(providers).into_iter().map(|(p, o)| (p.name().to_string(), o)).collect(),
            shapes: m.shapes.clone(),
        });
        plans.push((Manifest::onnx_path(&opts.model_dir, entry), m));
    }
    let mut plan = SessionPlan::new(fixed, plans);
    plan.profile_dir = opts.profile_dir.clone();
    Ok((plan, described))
}

/// The sessions an engine opened with `opts` would build, described without loading the
/// runtime or any model: each model's GPU provider options exactly as ONNX Runtime would get
/// them, and its fixed shapes. Reads the manifest; fails as [`crate::Engine::open`] would on
/// bad options or models the manifest lacks.
pub fn describe_sessions(opts: &EngineOptions) -> Result<Vec<SessionInfo>> {
    opts.validate()?;
    let manifest = Manifest::load(&opts.model_dir)?;
    let models = ModelChoice::resolve(&manifest, opts)?;
    Ok(plan(opts, &opts.execution_providers()?, &models)?.1)
}

/// One model's shapes and provider options. A model with any dynamic input dimension gets a
/// TensorRT profile over its shapes; one whose input is static needs none.
fn model_plan(entry: &ModelEntry, opts: &EngineOptions, fixed: bool) -> ModelPlan {
    let spec = &entry.input;
    let (shapes, profile) = if spec.dynamic_size {
        // The detector: one image at each bucket.
        let shape = |(w, h): (u32, u32)| spec.shape(1, h, w).to_vec();
        let shapes: Vec<Vec<i64>> = yunet::BUCKETS.iter().map(|&b| shape(b)).collect();
        let (min_w, min_h) = (yunet::BUCKETS.iter().map(|b| b.0).min().unwrap_or(0), yunet::BUCKETS.iter().map(|b| b.1).min().unwrap_or(0));
        let (max_w, max_h) = (yunet::BUCKETS.iter().map(|b| b.0).max().unwrap_or(0), yunet::BUCKETS.iter().map(|b| b.1).max().unwrap_or(0));
        let profile = Profile { input: spec.name.clone(), min: shape((min_w, min_h)), opt: shape(yunet::OPT_BUCKET), max: shape((max_w, max_h)) };
        (shapes, Some(profile))
    } else {
        // Face models (and BlazeFace): their own input size, at each batch size. The cap is
        // the loaders' own: `max_batch` for a model with a dynamic batch, else 1.
        let cap = if spec.dynamic_batch { opts.max_batch.max(1) } else { 1 };
        let sizes = shapes::batch_sizes(cap);
        let shape = |b: usize| spec.shape(b, spec.height, spec.width).to_vec();
        let profile = spec.dynamic_batch.then(|| Profile {
            input: spec.name.clone(),
            min: shape(sizes[0]),
            opt: shape(shapes::opt_batch(&sizes)),
            max: shape(*sizes.last().unwrap_or(&1)),
        });
        (sizes.into_iter().map(shape).collect(), profile)
    };
    ModelPlan {
        id: entry.id.clone(),
        input: spec.clone(),
        providers: ProviderSettings::new(opts.trt_fp16, opts.tensorrt_cache.clone(), fixed, profile),
        shapes: if fixed { shapes } else { Vec::new() },
    }
}

/// The warm-up as the engine reports it: each model's shapes in plan order, each with the
/// longest any worker took (the workers warm up their own sessions, and the engine is ready
/// once the slowest is). Logs one line per model.
pub(super) fn warmup_report(plan: &SessionPlan, sessions: &[SessionInfo]) -> Vec<Warmup> {
    let mut slowest: BTreeMap<(String, Vec<i64>), (f64, usize)> = BTreeMap::new();
    for w in plan.warmups() {
        let e = slowest.entry((w.model, w.shape)).or_insert((0.0, 0));
        e.0 = e.0.max(w.ms);
        e.1 += 1;
    }
    let mut report = Vec::new();
    for s in sessions {
        let runs: Vec<(Warmup, usize)> = s
            .shapes
            .iter()
            .filter_map(|shape| slowest.get(&(s.model.clone(), shape.clone())).map(|&(ms, n)| (Warmup { model: s.model.clone(), shape: shape.clone(), ms }, n)))
            .collect();
        if runs.is_empty() {
            continue;
        }
        runtime::log_json(
            runtime::LogLevel::Info,
            "warm-up",
            serde_json::json!({
                "model": s.model,
                "workers": runs.iter().map(|r| r.1).max().unwrap_or(0),
                "ms": runs.iter().map(|r| r.0.ms).sum::<f64>().round(),
                "shapes": runs.iter().map(|(w, _)| serde_json::json!({"shape": crate::providers::dims_text(&w.shape), "ms": (w.ms * 10.0).round() / 10.0})).collect::<Vec<_>>(),
            }),
        );
        report.extend(runs.into_iter().map(|r| r.0));
    }
    report
}
