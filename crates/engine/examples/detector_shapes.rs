//! Which detector input sizes the YuNet plan makes, and how well the fixed-shape buckets hold
//! them: the measurement [`face_engine::yunet::BUCKETS`] was chosen from.
//!
//! `cargo run --release -p face-engine --example detector_shapes -- [--min-face N] [--windows]`
//!
//! `--windows` prints one line per window instead (photo, width, height), to try other sets.
//!
//! Photos: phone photos of 12, 24 and 48 MP at 4:3, 3:4, 16:9, 9:16 and 1:1, the six demo
//! photos, small ones (250x250, 640x480, 1280x720, 1920x1080), the labelled photos of
//! `../shared/testdata/faces` when present, and the 320x320 window around a caller's box. Each
//! is planned as the engine plans it: decoded at the JPEG scale the plan allows, searched for
//! faces of FACE_MIN_FACE (default 40) photo pixels. Prints every window size (rounded up to
//! the multiple of 32) with how often it occurs, the bucket each lands in, and the padding
//! wasted: bucket pixels over window pixels, by count and by pixels run.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use face_engine::yunet::{self, BUCKETS};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `(label, width, height)` of every photo measured.
fn photos() -> Vec<(String, u32, u32)> {
    let mut out = Vec::new();
    for mp in [12.0f64, 24.0, 48.0] {
        for (aw, ah) in [(4.0, 3.0), (3.0, 4.0), (16.0, 9.0), (9.0, 16.0), (1.0, 1.0)] {
            let h = (mp * 1e6 * ah / aw).sqrt();
            let w = h * aw / ah;
            out.push((format!("{mp} MP {aw}:{ah}"), w.round() as u32, h.round() as u32));
        }
    }
    for n in 1..=6 {
        let path = root().join(format!("node_modules/@vladmandic/face-api/demo/sample{n}.jpg"));
        if let Ok((w, h)) = image::image_dimensions(&path) {
            out.push((format!("demo sample{n}"), w, h));
        }
    }
    for (w, h) in [(250, 250), (640, 480), (480, 640), (1280, 720), (1920, 1080)] {
        out.push((format!("small {w}x{h}"), w, h));
    }
    let labelled = root().join("../shared/testdata/faces");
    if let Ok(dir) = std::fs::read_dir(&labelled) {
        let mut files: Vec<PathBuf> = dir.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "jpg" || x == "png")).collect();
        files.sort();
        for p in files {
            if let Ok((w, h)) = image::image_dimensions(&p) {
                out.push((format!("labelled {}", p.file_name().unwrap().to_string_lossy()), w, h));
            }
        }
    }
    out
}

/// The window sizes the engine runs for a `w` x `h` JPEG: decoded at the coarsest DCT scale
/// that keeps the plan's finest level (as `Engine::estimate` picks it), then planned.
fn window_sizes(w: u32, h: u32, min_face: f32) -> Vec<(u32, u32)> {
    let finest = yunet::finest_scale(&yunet::plan(w, h, min_face));
    let d = [8u32, 4, 2].into_iter().find(|&d| 1.0 / d as f32 >= finest).unwrap_or(1);
    let (dw, dh) = (w.div_ceil(d), h.div_ceil(d));
    let per_pixel = w as f32 / dw as f32;
    yunet::plan(dw, dh, min_face / per_pixel).iter().map(|win| win.input_size()).collect()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let min_face: f32 = args
        .iter()
        .position(|a| a == "--min-face")
        .map(|i| args[i + 1].parse().expect("--min-face N"))
        .or_else(|| std::env::var("FACE_MIN_FACE").ok().and_then(|v| v.parse().ok()))
        .unwrap_or(40.0);
    let photos = photos();
    if args.iter().any(|a| a == "--windows") {
        // One line per window: photo, window width and height (for trying other bucket sets).
        for (label, w, h) in &photos {
            for (a, b) in window_sizes(*w, *h, min_face) {
                println!("{} {a} {b}", label.replace(' ', "_"));
            }
        }
        return;
    }
    // Window size -> (count, photos it occurs in).
    let mut sizes: BTreeMap<(u32, u32), (usize, Vec<String>)> = BTreeMap::new();
    let mut per_photo = Vec::new();
    for (label, w, h) in &photos {
        let windows = window_sizes(*w, *h, min_face);
        let input: u64 = windows.iter().map(|&(a, b)| a as u64 * b as u64).sum();
        let padded: u64 = windows.iter().map(|&(a, b)| yunet::bucket_for(a, b).map_or(a as u64 * b as u64, |(x, y)| x as u64 * y as u64)).sum();
        per_photo.push((label.clone(), *w, *h, windows.len(), input, padded));
        for s in windows {
            let e = sizes.entry(s).or_default();
            e.0 += 1;
            if e.1.len() < 3 && !e.1.contains(label) {
                e.1.push(label.clone());
            }
        }
    }
    // The caller-box window (a fixed 320x320 input).
    sizes.entry((320, 320)).or_default().1.push("caller box".into());

    println!("YuNet windows over {} photos at FACE_MIN_FACE {min_face}", photos.len());
    println!("buckets: {}", BUCKETS.iter().map(|(w, h)| format!("{w}x{h}")).collect::<Vec<_>>().join(", "));
    println!();
    println!("| window | count | bucket | padding | e.g. |");
    println!("|---|---|---|---|---|");
    let (mut total_in, mut total_pad, mut count) = (0u64, 0u64, 0usize);
    let mut bucket_counts: BTreeMap<(u32, u32), usize> = BTreeMap::new();
    for (&(w, h), (n, examples)) in &sizes {
        let bucket = yunet::bucket_for(w, h);
        let (bw, bh) = bucket.unwrap_or((w, h));
        let waste = (bw * bh) as f64 / (w * h) as f64 - 1.0;
        println!("| {w}x{h} | {n} | {} | {:+.0}% | {} |", bucket.map_or("none".into(), |(a, b)| format!("{a}x{b}")), waste * 100.0, examples.join(", "));
        total_in += *n as u64 * (w * h) as u64;
        total_pad += *n as u64 * (bw * bh) as u64;
        count += n;
        *bucket_counts.entry((bw, bh)).or_default() += n;
    }
    println!();
    println!("{count} windows, {} distinct sizes; padded to buckets they run {:.1}% more pixels", sizes.len(), (total_pad as f64 / total_in as f64 - 1.0) * 100.0);
    println!("windows per bucket: {}", bucket_counts.iter().map(|((w, h), n)| format!("{w}x{h}: {n}")).collect::<Vec<_>>().join(", "));
    println!();
    println!("| photo | size | windows | input Mpx | padded Mpx | extra |");
    println!("|---|---|---|---|---|---|");
    for (label, w, h, n, input, padded) in per_photo.iter().filter(|p| !p.0.starts_with("labelled")) {
        println!("| {label} | {w}x{h} | {n} | {:.2} | {:.2} | {:+.0}% |", *input as f64 / 1e6, *padded as f64 / 1e6, (*padded as f64 / *input as f64 - 1.0) * 100.0);
    }
    let labelled: Vec<_> = per_photo.iter().filter(|p| p.0.starts_with("labelled")).collect();
    if !labelled.is_empty() {
        let (i, p): (u64, u64) = labelled.iter().fold((0, 0), |(a, b), x| (a + x.4, b + x.5));
        println!("| {} labelled photos | | {} | {:.2} | {:.2} | {:+.0}% |", labelled.len(), labelled.iter().map(|x| x.3).sum::<usize>(), i as f64 / 1e6, p as f64 / 1e6, (p as f64 / i as f64 - 1.0) * 100.0);
    }
}
