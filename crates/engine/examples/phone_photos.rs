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
//! - `upscale DIR [MP]`: writes every labelled photo of `../shared/testdata/faces`, resampled
//!   to MP megapixels (default 12) as a quality-90 JPEG under its own name, with
//!   `labels.json`, to DIR: `node dist/bench/engine/accuracy.js --testdata DIR --no-lfw` then runs
//!   the dev-set verification on phone-sized copies.
//!
//! - `peers DIR`: writes the peer set (the six demo photos as they are, and six 12 MP phone
//!   photos: the demo groups across the frame, and selfies at 50% and 80%) with `truth.json`
//!   (the placed faces) to DIR, then runs detect + embed on it, one photo at a time and N at
//!   once: photos/s and faces found. `bench/peers/opencv_faces.py DIR` runs OpenCV on the
//!   same files.
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
    if let Some(i) = args.iter().position(|a| a == "peers") {
        let engine = open_engine();
        let sources = sources(&engine, true);
        return peers(&engine, &sources, Path::new(args.get(i + 1).expect("peers DIR")), flag("--concurrent").unwrap_or(4));
    }
    if let Some(i) = args.iter().position(|a| a == "upscale") {
        let megapixels = args.get(i + 2).and_then(|v| v.parse::<f64>().ok()).unwrap_or(12.0);
        return upscale(Path::new(args.get(i + 1).expect("upscale DIR")), megapixels);
    }
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
    // The service's settings otherwise: the engine's defaults are the service's.
    let mut opts = EngineOptions {
        model_dir: std::env::var("FACE_MODEL_DIR").map(PathBuf::from).unwrap_or_else(|_| root().join("models")),
        ort_library: face_engine::testing::ort_library(),
        ..EngineOptions::default()
    };
    opts.min_face = min_face();
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
    let found = boxes(engine, &bytes);
    let score = phone::score(built, &found);
    if std::env::var_os("FACE_VERBOSE").is_some() && (score.found < score.placed || score.extra > 0 || score.duplicates > 0) {
        let (w, h) = built.photo.dimensions();
        eprintln!("{w}x{h} orientation {orientation}: placed {:?}, found {found:?}", built.faces);
    }
    score
}

fn coverage(engine: &Engine, sources: &[Source]) {
    let min_face = min_face();
    println!("| face / short side | placed | found | recall | duplicates | extra | mean IoU |");
    println!("|---|---|---|---|---|---|---|");
    let mut seed = 1u64;
    let mut total = Score::default();
    // FACE_FRACTIONS=0.1,0.2 runs those sizes only; FACE_VERBOSE prints every photo gone wrong.
    let fractions: Vec<f32> = std::env::var("FACE_FRACTIONS").map(|v| v.split(',').map(|f| f.parse().expect("a fraction")).collect()).unwrap_or(FRACTIONS.to_vec());
    for &fraction in &fractions {
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
    let min_face = min_face();
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
            face_engine::yunet::input_pixels(&face_engine::yunet::plan(w, h, min_face), engine.info().fixed_shapes) as f64 / 1e6,
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

/// The labelled photos resampled to `megapixels`, as JPEGs under their own names, with the labels.
fn upscale(out: &Path, megapixels: f64) {
    let dir = root().join("../shared/testdata/faces");
    let labels = std::fs::read(dir.join("labels.json")).expect("../shared/testdata/faces/labels.json");
    std::fs::create_dir_all(out).expect("output folder");
    std::fs::write(out.join("labels.json"), &labels).unwrap();
    let labels: serde_json::Value = serde_json::from_slice(&labels).unwrap();
    for l in labels.as_array().unwrap() {
        let name = l["file"].as_str().unwrap();
        let photo = image::open(dir.join(name)).expect("photo").into_rgb8();
        let (w, h) = photo.dimensions();
        let k = (megapixels * 1e6 / (w as f64 * h as f64)).sqrt();
        let (nw, nh) = ((w as f64 * k).round() as u32, (h as f64 * k).round() as u32);
        let big = face_engine::align::resize_region(&photo, [0.0, 0.0, w as f64, h as f64], nw, nh);
        std::fs::write(out.join(name), phone::jpeg(&big, 90, 1)).unwrap();
    }
    eprintln!("{} photos at {megapixels} MP in {}", labels.as_array().unwrap().len(), out.display());
}

/// Writes the peer set with its truth, then times detect + embed on it.
fn peers(engine: &Engine, sources: &[Source], out: &Path, concurrent: usize) {
    std::fs::create_dir_all(out).expect("output folder");
    let mut set: Vec<(String, Vec<u8>, Built)> = Vec::new();
    for (n, src) in sources.iter().enumerate().take(6) {
        let bytes = std::fs::read(root().join(format!("node_modules/@vladmandic/face-api/demo/sample{}.jpg", n + 1))).unwrap();
        set.push((format!("demo{}.jpg", n + 1), bytes, Built { photo: src.photo.clone(), faces: src.faces.clone(), partial: Vec::new() }));
    }
    for (n, src) in sources.iter().enumerate().take(4) {
        let built = phone::group(&src.photo, &src.faces, 3024, 4032, 0.95, n as u64);
        set.push((format!("group12mp{}.jpg", n + 1), phone::jpeg(&built.photo, 90, 1), built));
    }
    for (k, fraction) in [0.5f32, 0.8].into_iter().enumerate() {
        let src = &sources[4 + k];
        let built = phone::selfie(&src.photo, &src.faces, 0, 2.0, 3024, 4032, fraction, (0.5, 0.45), 70 + k as u64);
        set.push((format!("selfie12mp{}.jpg", k + 1), phone::jpeg(&built.photo, 90, 1), built));
    }
    let truth: Vec<serde_json::Value> = set.iter().map(|(name, _, b)| serde_json::json!({ "file": name, "faces": b.faces, "partial": b.partial })).collect();
    for (name, bytes, _) in &set {
        std::fs::write(out.join(name), bytes).unwrap();
    }
    std::fs::write(out.join("truth.json"), serde_json::to_vec_pretty(&truth).unwrap()).unwrap();
    let embed = AnalyzeOptions { embed: true, ..DETECT };
    println!("| set | photos | faces placed | found | extra | photos/s, one at a time | photos/s, {concurrent} at once |");
    println!("|---|---|---|---|---|---|---|");
    for (label, range) in [("demo photos (1920 px)", 0..6), ("12 MP phone photos", 6..set.len())] {
        let part = &set[range];
        let mut score = Score::default();
        for (_, bytes, built) in part {
            let a = engine.analyze(bytes, &embed).expect("analysis");
            let found: Vec<FaceBox> = a.faces.iter().map(|f| [f.x1 as f32, f.y1 as f32, f.x2 as f32, f.y2 as f32]).collect();
            add(&mut score, phone::score(built, &found));
        }
        let rounds = 3;
        let t = Instant::now();
        for _ in 0..rounds {
            for (_, bytes, _) in part {
                engine.analyze(bytes, &embed).expect("analysis");
            }
        }
        let sequential = (rounds * part.len()) as f64 / t.elapsed().as_secs_f64();
        let t = Instant::now();
        let (tx, rx) = mpsc::channel();
        let jobs: Vec<&Vec<u8>> = (0..rounds).flat_map(|_| part.iter().map(|p| &p.1)).collect();
        let mut next = 0;
        let mut running = 0;
        while next < jobs.len() || running > 0 {
            while running < concurrent && next < jobs.len() {
                let tx = tx.clone();
                engine.submit(jobs[next].clone(), embed.clone(), move |r| tx.send(r.is_ok()).unwrap()).expect("queued");
                next += 1;
                running += 1;
            }
            assert!(rx.recv().unwrap(), "analysis failed");
            running -= 1;
        }
        let parallel = jobs.len() as f64 / t.elapsed().as_secs_f64();
        println!("| {label} | {} | {} | {} | {} | {sequential:.2} | {parallel:.2} |", part.len(), score.placed, score.found, score.extra);
    }
}

/// FACE_MIN_FACE, else the service's default.
fn min_face() -> f32 {
    std::env::var("FACE_MIN_FACE").ok().and_then(|v| v.parse().ok()).unwrap_or(EngineOptions::default().min_face)
}
