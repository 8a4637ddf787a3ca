//! Where one detection's time goes: each photo of the first set detected a few times in a row,
//! one at a time on one inference worker, with the detector's own run time beside each call's;
//! then ONNX Runtime's per-node profile of those runs (warm-up left out), summed per operator
//! and provider. Twice: at fixed shapes (exhaustive cuDNN search at warm-up; under CUDA alone a
//! session per shape) and with shapes as they come (heuristic search, one session).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use face_engine::{Engine, EngineOptions};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::throughput::{PhotoSet, NONE};

/// Calls per photo: the first shows what a photo's first call adds.
const CALLS: usize = 3;
/// Operators listed per profile, the costliest first.
const TOP_OPERATORS: usize = 8;

/// Runs the probe on `set` with engines opened from `options`, writing profiles under `scratch`.
pub fn detector(options: &EngineOptions, set: &PhotoSet, scratch: &Path, log: &mut dyn FnMut(String)) -> Result<Value, String> {
    let mut out = Vec::new();
    for fixed_shapes in ["on", "off"] {
        let dir = scratch.join(format!("face-gpu-profile-{fixed_shapes}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let opts = EngineOptions { fixed_shapes: fixed_shapes.into(), inference_workers: 1, max_batch: 1, profile_dir: Some(dir.clone()), ..options.clone() };
        let opened = Instant::now();
        let engine = Engine::open(opts).map_err(|e| format!("cannot open the engine: {e}"))?;
        log(format!("detector probe, fixed shapes {fixed_shapes} (engine opened in {:.1} s):", opened.elapsed().as_secs_f64()));
        let calls = calls(&engine, set, log)?;
        let info = engine.info();
        let warmups = info.warmup.iter().filter(|w| w.model == info.detector).count();
        drop(engine); // the sessions write their profiles as they close
        let profile = summarise(&dir, &info.detector, warmups)?;
        let operators: Vec<String> = profile.operators.iter().map(|o| format!("{} on {} {:.2} ({} nodes)", o.op, o.provider, o.ms_per_run, o.nodes)).collect();
        log(format!(
            "  profile of {} ({} sessions, {} runs after warm-up): {:.2} ms/run; per operator, ms/run: {}",
            info.detector,
            profile.sessions,
            profile.runs,
            profile.ms_per_run,
            operators.join(", ")
        ));
        out.push(json!({"fixedShapes": fixed_shapes, "calls": calls, "profile": profile.to_json()}));
    }
    Ok(Value::Array(out))
}

/// Each photo of `set` detected [`CALLS`] times in a row: the call's wall time and the
/// detector's own runs inside it (from the engine's telemetry).
fn calls(engine: &Engine, set: &PhotoSet, log: &mut dyn FnMut(String)) -> Result<Vec<Value>, String> {
    let info = engine.info();
    let slot = info.models.iter().position(|(id, _)| *id == info.detector).map(|i| i as u16);
    engine.drain_telemetry();
    let mut out = Vec::new();
    for (k, photo) in set.photos.iter().enumerate() {
        let mut walls = Vec::new();
        let mut runs = Vec::new();
        for _ in 0..CALLS {
            let t = Instant::now();
            engine.analyze(photo, &NONE).map_err(|e| format!("detect on photo {k}: {e}"))?;
            walls.push(t.elapsed().as_secs_f64() * 1e3);
            runs.push(engine.drain_telemetry().runs.iter().filter(|r| Some(r.model) == slot).map(|r| f64::from(r.seconds) * 1e3).collect::<Vec<f64>>());
        }
        let walls_text: Vec<String> = walls.iter().map(|ms| format!("{ms:.1}")).collect();
        let runs_text: Vec<String> = runs.iter().map(|r| format!("{} x {:.1}", r.len(), r.iter().sum::<f64>() / r.len().max(1) as f64)).collect();
        log(format!("  photo {k} ({} KiB, {} faces): calls {} ms; detector runs {} ms", photo.len() / 1024, set.boxes[k].len(), walls_text.join(", "), runs_text.join(", ")));
        out.push(json!({"photo": k, "callMs": walls, "detectorRunMs": runs}));
    }
    Ok(out)
}

/// One event of ONNX Runtime's profile (Chrome's trace format).
#[derive(Deserialize)]
struct Event {
    #[serde(default)]
    cat: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    ts: u64,
    #[serde(default)]
    dur: u64,
    #[serde(default)]
    args: BTreeMap<String, Value>,
}

struct Operator {
    op: String,
    provider: String,
    nodes: usize,
    ms_per_run: f64,
}

struct Profile {
    sessions: usize,
    runs: usize,
    ms_per_run: f64,
    operators: Vec<Operator>,
}

impl Profile {
    fn to_json(&self) -> Value {
        let operators: Vec<Value> = self.operators.iter().map(|o| json!({"op": o.op, "provider": o.provider, "nodes": o.nodes, "msPerRun": o.ms_per_run})).collect();
        json!({"sessions": self.sessions, "runs": self.runs, "msPerRun": self.ms_per_run, "operators": operators})
    }
}

/// The detector's profiles in `dir` (one per session: one, or one per shape under CUDA alone):
/// the runs after each session's share of the `warmups` warm-up runs, their mean time, and
/// their node time per operator and provider.
fn summarise(dir: &Path, detector: &str, warmups: usize) -> Result<Profile, String> {
    let prefix = format!("{detector}-");
    let files: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| format!("cannot read {}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".json")))
        .collect();
    if files.is_empty() {
        return Err(format!("no profile of {detector} in {}", dir.display()));
    }
    let mut run_ms = Vec::new();
    let mut per_op: BTreeMap<(String, String), u64> = BTreeMap::new();
    let mut nodes: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let events = read_profile(file)?;
        let runs: Vec<&Event> = events.iter().filter(|e| e.cat == "Session" && e.name == "model_run").collect();
        let measured = &runs[(warmups / files.len()).min(runs.len())..];
        let Some(first) = measured.first() else { continue };
        run_ms.extend(measured.iter().map(|r| r.dur as f64 / 1e3));
        for e in events.iter().filter(|e| e.cat == "Node" && e.ts >= first.ts && e.name.ends_with("_kernel_time")) {
            let text = |k: &str| e.args.get(k).and_then(Value::as_str).unwrap_or("?").to_string();
            let key = (text("op_name"), text("provider").trim_end_matches("ExecutionProvider").to_string());
            *per_op.entry(key.clone()).or_default() += e.dur;
            nodes.entry(key).or_default().insert(e.name.clone());
        }
    }
    let n = run_ms.len().max(1) as f64;
    let mut operators: Vec<Operator> = per_op
        .into_iter()
        .map(|((op, provider), us)| {
            let nodes = nodes.get(&(op.clone(), provider.clone())).map_or(0, BTreeSet::len);
            Operator { op, provider, nodes, ms_per_run: us as f64 / 1e3 / n }
        })
        .collect();
    operators.sort_by(|a, b| b.ms_per_run.total_cmp(&a.ms_per_run));
    operators.truncate(TOP_OPERATORS);
    Ok(Profile { sessions: files.len(), runs: run_ms.len(), ms_per_run: run_ms.iter().sum::<f64>() / n, operators })
}

/// One profile's events. The engine's workers close their sessions after the engine is
/// dropped, and a session writes its file as it closes: wait for it.
fn read_profile(file: &Path) -> Result<Vec<Event>, String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = std::fs::read_to_string(file).map_err(|e| format!("cannot read {}: {e}", file.display()))?;
        match serde_json::from_str(&text) {
            Ok(events) => return Ok(events),
            Err(e) if Instant::now() > deadline => return Err(format!("{}: {e}", file.display())),
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}
