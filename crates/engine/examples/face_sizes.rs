//! How big a face YuNet finds: one detector run per face, the face scaled to a given side in
//! detector-input pixels, with recall and box IoU per size. This is the measurement the
//! detection plan (`yunet::plan`) is built on.
//!
//! `cargo run --release -p face-engine --example face_sizes -- [--lfw N] [--faces]`
//!
//! Sources: single-face photos whose face YuNet finds at their own size (that box is the truth,
//! scaled with the photo). `--lfw N` takes the first photo of N people from
//! `../shared/testdata/lfw` (250 px, so large sizes are upscaled and soft); `--faces` takes the
//! single-face photos of `../shared/testdata/faces` at least 600 px on the short side (sharp
//! at every size). Each face is run three ways:
//! - scene: the whole source photo scaled so its face has the side asked, the face about 40% of
//!   the frame as in a selfie, on a grey canvas rounded up to the model's multiple of 32;
//! - tight: the face box (x1.15) alone, scaled to the side asked: a face that is the frame;
//! - framed: the tight crop centred in a black square twice its side.
//!
//! Environment: FACE_MODEL_DIR (default models), FACE_ORT_LIBRARY.

use std::path::PathBuf;
use std::time::Instant;

use face_engine::align;
use face_engine::detection::{self, Detection, NmsOptions};
use face_engine::testing::{cpu_yunet, project_root as root};
use face_engine::yunet::{YunetInput, YunetModel};
use image::RgbImage;

/// The service's default YuNet threshold (engine.rs): a face below it is not reported.
const THRESHOLD: f32 = 0.78;
const SIZES: [u32; 20] = [10, 12, 14, 16, 20, 24, 32, 48, 64, 96, 128, 192, 256, 320, 384, 448, 512, 640, 768, 1024];

struct Source {
    photo: RgbImage,
    face: Detection,
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let lfw = args.iter().position(|a| a == "--lfw").map(|i| args[i + 1].parse::<usize>().expect("--lfw N"));
    let faces = args.iter().any(|a| a == "--faces");
    let cost_only = args.iter().any(|a| a == "--cost");
    // A low floor, so a face found below the service's threshold still shows its score.
    let mut model = cpu_yunet(None, 0.3);

    if cost_only {
        return pass_cost(&mut model);
    }
    let mut paths = Vec::new();
    if let Some(n) = lfw {
        let dir = root().join("../shared/testdata/lfw/images");
        let mut people: Vec<PathBuf> = std::fs::read_dir(&dir).expect("LFW images").flatten().map(|e| e.path()).collect();
        people.sort();
        for person in people.into_iter().take(n) {
            let mut photos: Vec<PathBuf> = std::fs::read_dir(person).unwrap().flatten().map(|e| e.path()).collect();
            photos.sort();
            paths.push(photos[0].clone());
        }
    }
    if faces {
        let dir = root().join("../shared/testdata/faces");
        let labels: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("labels.json")).expect("labels.json")).unwrap();
        for l in labels.as_array().unwrap() {
            if l["faces"] == 1 && l["width"].as_u64().unwrap_or(0).min(l["height"].as_u64().unwrap_or(0)) >= 600 {
                paths.push(dir.join(l["file"].as_str().unwrap()));
            }
        }
    }
    let mut sources = Vec::new();
    for p in &paths {
        let photo = image::open(p).expect("photo").into_rgb8();
        if let Some(face) = reference_face(&mut model, &photo) {
            sources.push(Source { photo, face });
        }
    }
    eprintln!("{} sources with a face found at their own size (of {})", sources.len(), paths.len());

    println!("| face side (input px) | scene: recall | IoU | score | extra | tight: recall | IoU | framed: recall | IoU |");
    println!("|---|---|---|---|---|---|---|---|---|");
    let mut timing = Vec::new();
    for &side in &SIZES {
        let mut rows = [Stats::default(), Stats::default(), Stats::default()];
        for s in &sources {
            let long = s.face.width().max(s.face.height());
            let k = side as f32 / long;
            // Scene: the whole photo at scale k.
            let (w, h) = ((s.photo.width() as f32 * k).round().max(1.0) as u32, (s.photo.height() as f32 * k).round().max(1.0) as u32);
            let scene = align::resize_region(&s.photo, [0.0, 0.0, s.photo.width() as f64, s.photo.height() as f64], w, h);
            let truth = scaled(&s.face, k, 0.0, 0.0);
            let t = Instant::now();
            rows[0].add(run(&mut model, &scene, 0, 0), &truth);
            timing.push((w.div_ceil(32) * 32 * h.div_ceil(32) * 32, t.elapsed().as_secs_f64()));
            // Tight: the face box grown by 15%.
            let (cx, cy) = ((s.face.x1 + s.face.x2) / 2.0, (s.face.y1 + s.face.y2) / 2.0);
            let crop_side = long * 1.15;
            let out = ((crop_side * k).round() as u32).max(8);
            let t_ = align::square_crop_transform(cx, cy, crop_side, out);
            let tight = RgbImage::from_raw(out, out, align::warp_antialiased(&s.photo, &t_, out, out)).unwrap();
            let ox = cx - crop_side / 2.0;
            let oy = cy - crop_side / 2.0;
            let truth = scaled(&s.face, out as f32 / crop_side, -ox, -oy);
            rows[1].add(run(&mut model, &tight, 0, 0), &truth);
            // Framed: the tight crop in the middle of a black square twice its side.
            let pad = out / 2;
            let framed_truth = scaled(&truth, 1.0, pad as f32, pad as f32);
            rows[2].add(run(&mut model, &tight, pad, pad), &framed_truth);
        }
        let [scene, tight, framed] = &rows;
        println!(
            "| {side} | {} | {:.2} | {:.2} | {} | {} | {:.2} | {} | {:.2} |",
            scene.recall(),
            scene.iou(),
            scene.score(),
            scene.extra,
            tight.recall(),
            tight.iou(),
            framed.recall(),
            framed.iou()
        );
    }
    // Cost of a pass by input size, to weigh a pyramid level against a tile.
    timing.sort_by_key(|t| t.0);
    eprintln!("input pixels -> ms (scene passes)");
    for chunk in timing.chunks(timing.len().div_ceil(8).max(1)) {
        let px = chunk.iter().map(|t| t.0 as f64).sum::<f64>() / chunk.len() as f64;
        let s = chunk.iter().map(|t| t.1).sum::<f64>() / chunk.len() as f64;
        eprintln!("  {:>9.0} px  {:>7.1} ms  {:.0} ns/px", px, s * 1000.0, s * 1e9 / px);
    }
}

/// Milliseconds per run and nanoseconds per input pixel for square inputs of several sides:
/// what one big window costs against several small ones.
fn pass_cost(model: &mut YunetModel) {
    println!("| input side | ms per run | ns per input pixel |");
    println!("|---|---|---|");
    for side in [256u32, 512, 768, 1024, 1280, 1536, 2048, 2560] {
        let img = RgbImage::from_fn(side, side, |x, y| image::Rgb([(x * 7 + y * 3) as u8, (x ^ y) as u8, (x * y) as u8]));
        run(model, &img, 0, 0);
        let runs = (40_000_000 / (side * side)).clamp(3, 100);
        let t = Instant::now();
        for _ in 0..runs {
            run(model, &img, 0, 0);
        }
        let s = t.elapsed().as_secs_f64() / runs as f64;
        println!("| {side} | {:.1} | {:.1} |", s * 1000.0, s * 1e9 / (side * side) as f64);
    }
}

/// The most central confident face of a photo, run at a size where faces are found well
/// (the photo's longer side at most 640 px).
fn reference_face(model: &mut YunetModel, photo: &RgbImage) -> Option<Detection> {
    let (w, h) = photo.dimensions();
    let k = (640.0 / w.max(h) as f32).min(1.0);
    let (sw, sh) = ((w as f32 * k).round() as u32, (h as f32 * k).round() as u32);
    let small = align::resize_region(photo, [0.0, 0.0, w as f64, h as f64], sw, sh);
    let dets = run(model, &small, 0, 0);
    let centre = (sw as f32 / 2.0, sh as f32 / 2.0);
    let dist = |d: &Detection| ((d.x1 + d.x2) / 2.0 - centre.0).hypot((d.y1 + d.y2) / 2.0 - centre.1);
    dets.into_iter().filter(|d| d.score >= THRESHOLD && d.width() >= 40.0).min_by(|a, b| dist(a).total_cmp(&dist(b))).map(|d| scaled(&d, 1.0 / k, 0.0, 0.0))
}

fn scaled(d: &Detection, k: f32, dx: f32, dy: f32) -> Detection {
    Detection {
        score: d.score,
        x1: (d.x1 + dx) * k,
        y1: (d.y1 + dy) * k,
        x2: (d.x2 + dx) * k,
        y2: (d.y2 + dy) * k,
        keypoints: d.keypoints.iter().map(|&(x, y)| ((x + dx) * k, (y + dy) * k)).collect(),
    }
}

/// One detector run on `img` placed at (left, top) of a canvas padded to multiples of 32
/// (grey when there is no margin asked, black around a framed crop).
fn run(model: &mut YunetModel, img: &RgbImage, left: u32, top: u32) -> Vec<Detection> {
    let (w, h) = img.dimensions();
    let (cw, ch) = ((w + 2 * left).div_ceil(32) * 32, (h + 2 * top).div_ceil(32) * 32);
    let fill = if left == 0 { 114 } else { 0 };
    let mut canvas = RgbImage::from_pixel(cw, ch, image::Rgb([fill, fill, fill]));
    image::imageops::replace(&mut canvas, img, left as i64, top as i64);
    let mut data = Vec::with_capacity((cw * ch * 3) as usize);
    model.input.push_image(canvas.as_raw(), &mut data);
    let mut out = model.run(vec![YunetInput { data, width: cw, height: ch }]).expect("detector runs");
    detection::nms(out.remove(0), NmsOptions { iou: 0.3, containment: 0.65, weighted: false })
}

#[derive(Default)]
struct Stats {
    n: usize,
    found: usize,
    iou_sum: f32,
    score_sum: f32,
    extra: usize,
}

impl Stats {
    fn add(&mut self, dets: Vec<Detection>, truth: &Detection) {
        self.n += 1;
        let kept: Vec<&Detection> = dets.iter().filter(|d| d.score >= THRESHOLD).collect();
        let best = kept.iter().map(|d| (d.iou(truth), d.score)).max_by(|a, b| a.0.total_cmp(&b.0));
        if let Some((iou, score)) = best.filter(|b| b.0 >= 0.5) {
            self.found += 1;
            self.iou_sum += iou;
            self.score_sum += score;
            self.extra += kept.len() - 1;
        } else {
            self.extra += kept.len();
        }
    }
    fn recall(&self) -> String {
        format!("{:.3}", self.found as f32 / self.n.max(1) as f32)
    }
    fn iou(&self) -> f32 {
        self.iou_sum / self.found.max(1) as f32
    }
    fn score(&self) -> f32 {
        self.score_sum / self.found.max(1) as f32
    }
}
