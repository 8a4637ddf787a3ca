//! The engine as a GPU host runs it, in one self-contained binary: no Node, no network, ONNX
//! Runtime loaded from the path the plan names. `npm run bench:gpu` runs it on this machine with
//! the service's settings; `npm run gpu:pack` packs it with ONNX Runtime's GPU build, the
//! models and the photos for a GPU host (docs/engine.md, "Running on a GPU test host").
//!
//! 1. Providers: what each model runs on, its GPU provider options as ONNX Runtime gets them,
//!    its fixed shapes, and the warm-up (every model at every shape before the engine is ready).
//! 2. Throughput per recogniser mode, batch size (the engine's `maxBatch`, one engine per size),
//!    photo set (the demo photos; the same as 12 MP phone photos) and task: detect (decode +
//!    detection; first mode only), embed (the faces given as boxes), detect + embed (the whole
//!    identify path); with the recogniser's own time per face and the rows per model call.
//! 3. Time to first answer of a fresh process: cold TensorRT cache, warm, fixed shapes off.
//! 4. fp16 against fp32 per mode on the labelled dev set ([`precision`]).
//!
//! With `--probe`, the detector probe ([`probe`]) runs first: where one detection's time goes.

mod first_answer;
mod photos;
mod plan;
mod precision;
mod probe;
mod throughput;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use face_engine::{AnalyzeOptions, Engine, EngineInfo, EngineOptions};
use serde_json::{json, Value};

use plan::{Args, Plan};
use throughput::{PhotoSet, Task};

const USAGE: &str = "face-gpu-bench --plan FILE [--json FILE] [--providers cuda,cpu] [--ort-library FILE] [--modes a,b] \
[--batches 1,4,16,64] [--sets demo,12mp] [--time MS] [--workers N] [--pipeline-threads N] [--no-start] [--no-precision] [--probe]";

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("face-gpu-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), String> {
    let raw: Vec<String> = std::env::args().skip(1).collect();
    let args = Args::parse(raw.iter().cloned())?;
    let plan_file = args.plan.clone().ok_or(format!("--plan is required\nusage: {USAGE}"))?;
    let mut plan = Plan::load(&plan_file)?;
    plan.apply(&args)?;
    if let Some(first) = &args.first_answer {
        return first_answer::child(&plan, first);
    }
    let started = Instant::now();
    let mut log = |line: String| println!("{line}");
    let report = bench(&plan, &plan_file, &engine_overrides(&raw), &mut log)?;
    log(format!("done in {:.1} s", started.elapsed().as_secs_f64()));
    if let Some(file) = &args.json {
        let text = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
        std::fs::write(file, text).map_err(|e| format!("cannot write {}: {e}", file.display()))?;
    }
    Ok(())
}

/// The arguments that change the engine, for the first-answer processes.
fn engine_overrides(raw: &[String]) -> Vec<String> {
    const ENGINE: [&str; 4] = ["--providers", "--ort-library", "--workers", "--pipeline-threads"];
    let mut out = Vec::new();
    let mut it = raw.iter();
    while let Some(arg) = it.next() {
        if ENGINE.contains(&arg.as_str()) {
            out.push(arg.clone());
            out.extend(it.next().cloned());
        }
    }
    out
}

/// This machine: processor, cores and GPU, as one line.
fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| t.lines().find(|l| l.starts_with("model name")).and_then(|l| l.split(':').nth(1)).map(|m| m.trim().to_string()))
        .unwrap_or_else(|| "unknown processor".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let gpu = std::process::Command::new("nvidia-smi")
        .args(["--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().replace('\n', "; "))
        .unwrap_or_else(|| "no GPU".into());
    format!("{cpu}, {cores} cores; {gpu}")
}

fn open(options: &EngineOptions) -> Result<Engine, String> {
    Engine::open(options.clone()).map_err(|e| format!("cannot open the engine: {e}"))
}

fn with_mode(plan: &Plan, mode: &str) -> EngineOptions {
    EngineOptions { recognizer: Some(mode.to_string()), ..plan.engine.clone() }
}

/// The providers, sessions and warm-up of one engine.
fn describe(info: &EngineInfo, asked: &[String], log: &mut dyn FnMut(String)) -> Value {
    log(format!("providers: {} (asked for {}); fixed shapes {}", info.providers.join(", "), asked.join(", "), if info.fixed_shapes { "on" } else { "off" }));
    log(format!("recogniser {} ({}-d), detector {}", info.recognizer, info.dim, info.detector));
    for s in &info.sessions {
        let options: Vec<String> = s.providers.iter().map(|(name, kv)| format!("{name}: {}", kv.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" "))).collect();
        let shapes = if s.shapes.is_empty() {
            "shapes as they come".to_string()
        } else {
            format!("{} shapes ({})", s.shapes.len(), s.shapes.iter().map(|d| d.iter().map(i64::to_string).collect::<Vec<_>>().join("x")).collect::<Vec<_>>().join(", "))
        };
        log(format!("  {}: {shapes}{}", s.model, if options.is_empty() { String::new() } else { format!("; {}", options.join("; ")) }));
    }
    let warmup: Vec<Value> = info
        .models
        .iter()
        .filter_map(|(id, _)| {
            let runs: Vec<_> = info.warmup.iter().filter(|w| &w.model == id).collect();
            (!runs.is_empty()).then(|| json!({"model": id, "shapes": runs.len(), "ms": runs.iter().map(|w| w.ms).sum::<f64>()}))
        })
        .collect();
    if info.fixed_shapes {
        let parts: Vec<String> = warmup.iter().map(|w| format!("{} {} shapes {:.2} s", w["model"].as_str().unwrap_or(""), w["shapes"], w["ms"].as_f64().unwrap_or(0.0) / 1000.0)).collect();
        log(format!("warm-up: {}", parts.join(", ")));
    }
    json!({
        "providers": info.providers, "recognizer": info.recognizer, "detector": info.detector, "dim": info.dim,
        "fixedShapes": info.fixed_shapes, "sessions": info.sessions.iter().map(|s| s.to_json()).collect::<Vec<_>>(), "warmup": warmup,
    })
}

/// The photo sets, with each photo's faces as `engine` finds them.
fn photo_sets(plan: &Plan, engine: &Engine, log: &mut dyn FnMut(String)) -> Result<Vec<PhotoSet>, String> {
    let demo = photos::demo(&plan.demo_photos)?;
    let mut sets = Vec::new();
    for name in &plan.sets {
        let photos = match name.as_str() {
            "demo" => demo.clone(),
            "12mp" => demo.iter().map(|p| photos::phone_photo(p)).collect::<Result<_, _>>()?,
            other => return Err(format!("unknown photo set {other} (known: demo, 12mp)")),
        };
        let boxes = photos
            .iter()
            .map(|p| Ok(engine.analyze(p, &AnalyzeOptions::default()).map_err(|e| e.to_string())?.faces.iter().map(|f| [f.x1 as f32, f.y1 as f32, f.x2 as f32, f.y2 as f32]).collect()))
            .collect::<Result<Vec<Vec<_>>, String>>()?;
        let set = PhotoSet { name: name.clone(), photos, boxes };
        log(format!("photo set {name}: {} photos, {} faces", set.photos.len(), set.faces()));
        sets.push(set);
    }
    Ok(sets)
}

fn bench(plan: &Plan, plan_file: &Path, overrides: &[String], log: &mut dyn FnMut(String)) -> Result<Value, String> {
    let machine = machine();
    log(machine.clone());
    let time = Duration::from_millis(plan.time_ms);
    let workers = plan.engine.inference_workers;
    let mut modes = Vec::new();
    let mut rows = Vec::new();
    let mut precision_checks = Vec::new();
    let mut first_answers = Value::Null;
    let mut probe = Value::Null;
    let dev = match &plan.dev_set {
        Some(dir) if plan.precision => photos::dev_set(dir)?,
        _ => None,
    };
    for (m, mode) in plan.modes.iter().enumerate() {
        log(format!("== mode {mode}"));
        let options = with_mode(plan, mode);
        let mut sets = Vec::new();
        let tasks: &[Task] = if m == 0 { &[Task::Detect, Task::Embed, Task::DetectEmbed] } else { &[Task::Embed, Task::DetectEmbed] };
        for (b, &batch) in plan.batches.iter().enumerate() {
            let opened = Instant::now();
            let engine = open(&EngineOptions { max_batch: batch, ..options.clone() })?;
            let open_ms = opened.elapsed().as_secs_f64() * 1000.0;
            if b == 0 {
                let mut described = describe(&engine.info(), &options.providers, log);
                described["openMs"] = json!(open_ms);
                modes.push(described);
                sets = photo_sets(plan, &engine, log)?;
                if m == 0 && plan.probe {
                    let set = sets.first().ok_or("the probe needs a photo set")?;
                    probe = probe::detector(&options, set, &std::env::temp_dir(), log)?;
                }
                log(format!("throughput ({} ms per row, {workers} inference workers x {} threads):", plan.time_ms, plan.engine.intra_threads));
            }
            log(format!("  batch {batch}: engine opened in {:.2} s", open_ms / 1000.0));
            rows.extend(throughput::measure(&engine, workers, mode, batch, &sets, tasks, time, log));
        }
        if m == 0 && plan.first_answer {
            log("time to first answer (a fresh process each):".into());
            let scratch = std::env::temp_dir();
            first_answers = serde_json::to_value(first_answer::measure(plan_file, overrides, mode, &plan.engine.fixed_shapes, &scratch, log)?).map_err(|e| e.to_string())?;
        }
        if plan.precision {
            match &dev {
                None => log(format!("fp16 against fp32: skipped, no labelled dev set at {:?}", plan.dev_set)),
                Some(dev) => {
                    let check = precision_check(plan, &options, mode, dev, &sets, log)?;
                    precision_checks.push(serde_json::to_value(check).map_err(|e| e.to_string())?);
                }
            }
        }
    }
    let best = rows.iter().filter(|r| r.task != Task::Detect).map(|r| r.faces_per_second).fold(0.0, f64::max);
    log(format!("best faces/s with embedding: {best:.1} (goal on one H100-class GPU: {})", plan.goal_faces_per_second));
    Ok(json!({
        "machine": machine, "modes": modes, "throughput": rows, "bestFacesPerSecond": best,
        "firstAnswer": first_answers, "precision": precision_checks, "probe": probe,
    }))
}

fn precision_check(
    plan: &Plan,
    options: &EngineOptions,
    mode: &str,
    dev: &photos::DevSet,
    sets: &[PhotoSet],
    log: &mut dyn FnMut(String),
) -> Result<precision::PrecisionCheck, String> {
    // A TensorRT cache folder each, so that neither side can load the other's engines.
    let cache = |name: &str| options.tensorrt_cache.as_ref().map(|c| c.join(format!("bench-{name}")));
    let fp32 = open(&EngineOptions { trt_fp16: false, tensorrt_cache: cache("fp32"), ..options.clone() })?;
    let fp16_dir: Option<&PathBuf> = plan.fp16_models.as_ref();
    let fp16 = open(&EngineOptions { trt_fp16: true, tensorrt_cache: cache("fp16"), model_dir: fp16_dir.cloned().unwrap_or_else(|| options.model_dir.clone()), ..options.clone() })?;
    let what = fp16_dir.map_or("trtFp16".to_string(), |d| format!("float16 models from {}", d.display()));
    let recognizer = fp32.info().recognizer;
    let photos: Vec<Vec<u8>> = dev.photos.iter().cloned().chain(sets.iter().flat_map(|s| s.photos.iter().cloned())).collect();
    let p = precision::compare(mode, &what, &fp32, &fp16, &dev.labelled, &photos, plan.medium_cosine.get(&recognizer).copied())?;
    let d = &p.detections;
    let pct = |v: f64| format!("{:.3}%", v * 100.0);
    log(format!("fp16 against fp32, {mode} (fp16: {what}):"));
    log(format!(
        "  {} faces on {}: {}; best accuracy fp32 {:.2}%, fp16 {:.2}% over {} pairs; medium verdicts differing: {}{}",
        p.faces,
        p.providers.join(", "),
        if p.identical { "identical embeddings".to_string() } else { format!("cosine fp16 to fp32 min {:.6}, mean {:.6}", p.min_cosine, p.mean_cosine) },
        p.fp32_accuracy * 100.0,
        p.fp16_accuracy * 100.0,
        p.pairs,
        p.medium_cosine.map_or("not calibrated".to_string(), |_| p.medium_verdicts_differing.to_string()),
        if p.only_fp32_found + p.only_fp16_found > 0 { format!("; a face in {} photos only in fp32, {} only in fp16", p.only_fp32_found, p.only_fp16_found) } else { String::new() },
    ));
    log(format!(
        "  detection, {} photos: {} faces in both, {} only in fp32, {} only in fp16; landmarks moved median {}, p99 {}, at most {} of the face's width ({} faces over 1%)",
        d.photos,
        d.faces,
        d.only_fp32,
        d.only_fp16,
        pct(d.median_shift),
        pct(d.p99_shift),
        pct(d.max_shift),
        d.shifted_over_1_percent
    ));
    Ok(p)
}
