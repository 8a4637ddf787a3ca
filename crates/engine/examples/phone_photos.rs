//! Phone photos through the engine: are faces of every size found, and what does a photo of
//! 12 to 48 MP cost. The photos are built from the demo group photos (and, when present, the
//! large single-face photos of `../shared/testdata/faces`): a real face scaled to a fraction
//! of a phone frame's shorter side, on a plain background, so where every face is is known.
//!
//! `cargo run --release -p face-engine --example phone_photos -- [coverage] [timing] [--demo] [--concurrent N] [--runs N]`
//!
//! - `coverage`: selfies (one face at 2% to 90% of the short side) and groups in six frame
//!   sizes, EXIF orientations cycling 1 to 8; recall, duplicates, extra faces and IoU per size.
//!   Faces under 1.5 x FACE_MIN_FACE are not placed. `--demo`: the demo photos only.
//! - `timing`: detect (no embedding) on 12, 24, 36 and 48 MP group photos, one at a time and
//!   N at once (default 4), with the engine's own cost estimate beside the measured time.
//!
//! Settings as the service's on this machine: one inference worker per core, one intra-op
//! thread each. Environment: FACE_MODEL_DIR, FACE_ORT_LIBRARY, FACE_MIN_FACE.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Instant;

use face_engine::testing::phone::{self, Built, FaceBox, Score};
use face_engine::{AnalyzeOptions, Engine, EngineOptions};
use image::RgbImage;

const DETECT: AnalyzeOptions = AnalyzeOptions { embed: false, age: false, gender: false, emotions: false, boxes: None, thumbnail: None };
const FRAMES: [(u32, u32); 6] = [(3024, 4032), (4000, 6000), (1080, 1920), (1920, 1080), (4032, 3024), (2448, 3264)];
const FRACTIONS: [f32; 10] = [0.02, 0.03, 0.05, 0.1, 0.2, 0.35, 0.5, 0.7, 0.8, 0.9];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

struct Source {
    photo: RgbImage,
    faces: Vec<FaceBox>,
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |name: &str| args.iter().position(|a| a == name).map(|i| args[i + 1].parse::<usize>().expect("a number"));
    let concurrent = flag("--concurrent").unwrap_or(4);
    let runs = flag("--runs").unwrap_or(5);
    let all = !args.iter().any(|a| a == "coverage" || a == "timing");
    let demo_only = args.iter().any(|a| a == "--demo");
    let engine = open_engine();
    let sources = sources(&engine, demo_only);
    eprintln!("{} source photos, {} faces", sources.len(), sources.iter().map(|s| s.faces.len()).sum::<usize>());
    if all || args.iter().any(|a| a == "coverage") {
        coverage(&engine, &sources);
    }
    if all || args.iter().any(|a| a == "timing") {
        timing(&engine, &sources[0], runs, concurrent);
    }
}

fn open_engine() -> Engine {
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2);
    let mut opts = EngineOptions {
        model_dir: std::env::var("FACE_MODEL_DIR").map(PathBuf::from).unwrap_or_else(|_| root().join("models")),
        ort_library: std::env::var("FACE_ORT_LIBRARY")
            .map(PathBuf::from)
            .unwrap_or_else(|_| root().join("node_modules/onnxruntime-node/bin/napi-v6/linux/x64/libonnxruntime.so.1")),
        inference_workers: cores.min(8),
        max_pixels: 64_000_000,
        queue_capacity: 256,
        ..EngineOptions::default()
    };
    if let Some(m) = std::env::var("FACE_MIN_FACE").ok().and_then(|v| v.parse().ok()) {
        opts.min_face = m;
    }
    Engine::open(opts).expect("engine opens")
}

fn boxes(engine: &Engine, bytes: &[u8]) -> Vec<FaceBox> {
    engine.analyze(bytes, &DETECT).expect("analysis").faces.iter().map(|f| [f.x1 as f32, f.y1 as f32, f.x2 as f32, f.y2 as f32]).collect()
}

/// The demo photos, and the large single-face labelled photos when present, with their faces
/// as the engine finds them at their own size.
fn sources(engine: &Engine, demo_only: bool) -> Vec<Source> {
    let mut paths: Vec<PathBuf> = (1..=6).map(|n| root().join(format!("node_modules/@vladmandic/face-api/demo/sample{n}.jpg"))).collect();
    let dir = root().join("../shared/testdata/faces");
    if let Ok(text) = std::fs::read(dir.join("labels.json")).map_err(|_| ()).and_then(|t| if demo_only { Err(()) } else { Ok(t) }) {
        let labels: serde_json::Value = serde_json::from_slice(&text).expect("labels.json");
        for l in labels.as_array().into_iter().flatten() {
            if l["faces"] == 1 && l["width"].as_u64().unwrap_or(0).min(l["height"].as_u64().unwrap_or(0)) >= 800 {
                paths.push(dir.join(l["file"].as_str().unwrap()));
            }
        }
    }
    paths
        .iter()
        .filter_map(|p| {
            let bytes = std::fs::read(p).ok()?;
            let photo = image::load_from_memory(&bytes).ok()?.into_rgb8();
            let faces = boxes(engine, &bytes);
            (!faces.is_empty()).then_some(Source { photo, faces })
        })
        .collect()
}

fn run(engine: &Engine, built: &Built, orientation: u16) -> Score {
    let bytes = phone::jpeg(&phone::stored_for(&built.photo, orientation), 90, orientation);
    phone::score(built, &boxes(engine, &bytes))
}

fn coverage(engine: &Engine, sources: &[Source]) {
    let min_face: f32 = std::env::var("FACE_MIN_FACE").ok().and_then(|v| v.parse().ok()).unwrap_or(40.0);
    println!("| face / short side | placed | found | recall | duplicates | extra | mean IoU |");
    println!("|---|---|---|---|---|---|---|");
    let mut seed = 1u64;
    let mut total = Score::default();
    for &fraction in &FRACTIONS {
        let mut s = Score::default();
        for (i, &(w, h)) in FRAMES.iter().enumerate() {
            for (j, src) in sources.iter().enumerate() {
                seed += 1;
                if fraction * (w.min(h) as f32) < 1.5 * min_face {
                    continue;
                }
                let face = (i + j) % src.faces.len();
                // Off-centre for small faces, as a person in a scene; centred for a selfie.
                let centre = if fraction < 0.3 { (0.3 + 0.4 * ((seed * 7) % 10) as f32 / 10.0, 0.35 + 0.3 * ((seed * 3) % 10) as f32 / 10.0) } else { (0.5, 0.45) };
                let built = phone::selfie(&src.photo, &src.faces, face, 2.0, w, h, fraction, centre, seed);
                add(&mut s, run(engine, &built, (seed % 8) as u16 + 1));
            }
        }
        row(&format!("{:.0}%", fraction * 100.0), &s);
        add(&mut total, s);
    }
    let mut g = Score::default();
    for (i, &(w, h)) in FRAMES.iter().enumerate() {
        for (j, src) in sources.iter().enumerate().filter(|(_, s)| s.faces.len() > 1) {
            let fraction = [0.3, 0.6, 0.95][(i + j) % 3];
            let built = phone::group(&src.photo, &src.faces, w, h, fraction, (i * 31 + j) as u64);
            add(&mut g, run(engine, &built, ((i + j) % 8) as u16 + 1));
        }
    }
    row("groups", &g);
    add(&mut total, g);
    row("all", &total);
}

fn add(a: &mut Score, b: Score) {
    a.placed += b.placed;
    a.found += b.found;
    a.duplicates += b.duplicates;
    a.extra += b.extra;
    a.iou_sum += b.iou_sum;
}

fn row(label: &str, s: &Score) {
    println!(
        "| {label} | {} | {} | {:.3} | {} | {} | {:.2} |",
        s.placed,
        s.found,
        s.found as f32 / s.placed.max(1) as f32,
        s.duplicates,
        s.extra,
        s.iou_sum / s.found.max(1) as f32
    );
}

fn timing(engine: &Engine, source: &Source, runs: usize, concurrent: usize) {
    println!();
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2) as f64;
    println!("| photo | faces found | detector input (MP) | estimate (core-ms) | one at a time: median (ms) | {concurrent} at once: median / max latency (ms) | photos/s at {concurrent} | core-ms per photo at {concurrent} |");
    println!("|---|---|---|---|---|---|---|---|");
    let min_face: f32 = std::env::var("FACE_MIN_FACE").ok().and_then(|v| v.parse().ok()).unwrap_or(40.0);
    for (label, w, h) in [("2 MP", 1200u32, 1600u32), ("6 MP", 2000, 3000), ("12 MP", 3024, 4032), ("24 MP", 4000, 6000), ("36 MP", 4912, 7360), ("48 MP", 6000, 8000)] {
        let built = phone::group(&source.photo, &source.faces, w, h, 0.9, 7);
        let bytes = phone::jpeg(&built.photo, 90, 1);
        let found = boxes(engine, &bytes).len();
        let estimate = engine.estimate_ms(&bytes, &DETECT).expect("estimate");
        let mut one = Vec::new();
        for _ in 0..runs {
            let t = Instant::now();
            engine.analyze(&bytes, &DETECT).expect("analysis");
            one.push(t.elapsed().as_secs_f64() * 1000.0);
        }
        // `concurrent` requests at once, `runs` rounds: latency from submit to answer.
        let mut lat = Vec::new();
        let mut refused = 0;
        let t_all = Instant::now();
        for _ in 0..runs {
            let (tx, rx) = mpsc::channel();
            for _ in 0..concurrent {
                let tx = tx.clone();
                let t = Instant::now();
                if engine.submit(bytes.clone(), DETECT.clone(), move |r| tx.send((r.is_ok(), t.elapsed().as_secs_f64() * 1000.0)).unwrap()).is_err() {
                    refused += 1;
                }
            }
            drop(tx);
            for (ok, ms) in rx {
                if ok {
                    lat.push(ms);
                } else {
                    refused += 1;
                }
            }
        }
        let rate = lat.len() as f64 / t_all.elapsed().as_secs_f64();
        println!(
            "| {label} ({w}x{h}) | {found} | {:.1} | {estimate} | {:.0} | {:.0} / {:.0}{} | {rate:.2} | {:.0} |",
            face_engine::yunet::input_pixels(&face_engine::yunet::plan(w, h, min_face)) as f64 / 1e6,
            median(&mut one),
            median(&mut lat),
            lat.iter().cloned().fold(0.0, f64::max),
            if refused > 0 { format!(" ({refused} refused)") } else { String::new() },
            cores * 1000.0 / rate
        );
    }
}

fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
