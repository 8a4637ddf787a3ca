//! How padding a detector window to its bucket changes what YuNet finds, against the window
//! padded only to the next multiple of 32 (shapes that follow the photo), for several ways of
//! filling the padding.
//!
//! `cargo run --release -p face-engine --example bucket_padding -- [--lfw N]`
//!
//! YuNet's deeper layers see the padding not as zeros but as what their biases make of black,
//! so a face near the right or bottom edge of a window moves a little when the black grows.
//! Photos: the demo photos, the labelled photos and the first N LFW photos (default 300) when
//! present. Every window of each photo's plan runs once per fill; each face found at the
//! reference is matched (IoU) to the fill's, and their landmark and score differences printed
//! by the face's distance to the padded edge.
//!
//! Environment: FACE_MODEL_DIR (default models), FACE_ORT_LIBRARY.

use std::path::PathBuf;

use face_engine::detection::Detection;
use face_engine::testing::{cpu_yunet, project_root as root};
use face_engine::yunet::{self, YunetInput};

/// How the part of the bucket beyond the window's multiple of 32 is filled.
#[derive(Clone, Copy, Debug)]
enum Fill {
    /// Black, like the multiple-of-32 padding before it.
    Zeros,
    /// Mid grey.
    Grey,
}

/// The reference input (NCHW, `w` x `h`) padded to `bw` x `bh` with `fill`.
fn pad(input: &YunetInput, (bw, bh): (u32, u32), fill: Fill) -> YunetInput {
    let (w, h) = (input.width as usize, input.height as usize);
    let (bw, bh) = (bw as usize, bh as usize);
    let mut data = vec![0f32; 3 * bw * bh];
    for c in 0..3 {
        for y in 0..bh {
            for x in 0..bw {
                let inside = x < w && y < h;
                data[c * bw * bh + y * bw + x] = if inside {
                    input.data[c * w * h + y * w + x]
                } else {
                    match fill {
                        Fill::Zeros => 0.0,
                        Fill::Grey => 128.0,
                    }
                }
            }
        }
    }
    YunetInput { data, width: bw as u32, height: bh as u32 }
}

fn photos(lfw: usize) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = (1..=6).map(|n| root().join(format!("node_modules/@vladmandic/face-api/demo/sample{n}.jpg"))).collect();
    let faces = root().join("../shared/testdata/faces");
    let mut labelled: Vec<PathBuf> = std::fs::read_dir(&faces).map(|d| d.flatten().map(|e| e.path()).collect()).unwrap_or_default();
    labelled.retain(|p| p.extension().is_some_and(|x| x == "jpg" || x == "png"));
    labelled.sort();
    out.extend(labelled);
    let lfw_dir = root().join("../shared/testdata/lfw/images");
    let mut people: Vec<PathBuf> = std::fs::read_dir(&lfw_dir).map(|d| d.flatten().map(|e| e.path()).collect()).unwrap_or_default();
    people.sort();
    for person in people {
        if out.len() >= lfw + 140 {
            break;
        }
        let mut files: Vec<PathBuf> = std::fs::read_dir(&person).map(|d| d.flatten().map(|e| e.path()).collect()).unwrap_or_default();
        files.sort();
        out.extend(files.into_iter().take(1));
    }
    out
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let lfw = args.iter().position(|a| a == "--lfw").map_or(300, |i| args[i + 1].parse().expect("--lfw N"));
    let mut model = cpu_yunet(None, 0.8);
    let fills = [Fill::Zeros, Fill::Grey];
    // Per fill: (distance band, landmark deviation / face side, score difference), unmatched.
    let mut deviations: Vec<Vec<(usize, f32, f32)>> = vec![Vec::new(); fills.len()];
    let mut unmatched = vec![0usize; fills.len()];
    let mut extra = vec![0usize; fills.len()];
    let bands = ["touching (< 8 px)", "8 to 64 px", "64 to 160 px", "over 160 px"];
    let band = |d: f32| if d < 8.0 { 0 } else if d < 64.0 { 1 } else if d < 160.0 { 2 } else { 3 };
    let paths = photos(lfw);
    for path in &paths {
        let Ok(img) = image::open(path) else { continue };
        let img = img.into_rgb8();
        for win in yunet::plan(img.width(), img.height(), 40.0) {
            let size = win.input_size();
            let bucket = yunet::bucket_for(size.0, size.1).expect("a bucket");
            if bucket == size {
                continue;
            }
            let input = yunet::render(&img, &win, &model.input);
            let (cw, ch) = (win.content_width as f32, win.content_height as f32);
            let keep = |dets: Vec<Detection>| -> Vec<Detection> { dets.into_iter().filter(|d| (d.x1 + d.x2) / 2.0 < cw && (d.y1 + d.y2) / 2.0 < ch).collect() };
            let reference = keep(model.run(vec![YunetInput { data: input.data.clone(), width: input.width, height: input.height }]).unwrap().remove(0));
            for (k, &fill) in fills.iter().enumerate() {
                let found = keep(model.run(vec![pad(&input, bucket, fill)]).unwrap().remove(0));
                for r in &reference {
                    let best = found.iter().map(|f| (r.iou(f), f)).max_by(|a, b| a.0.total_cmp(&b.0));
                    match best {
                        Some((iou, f)) if iou > 0.5 => {
                            let side = r.width().max(r.height());
                            let lm = r.keypoints.iter().zip(&f.keypoints).map(|(p, q)| (p.0 - q.0).abs().max((p.1 - q.1).abs())).fold(0.0, f32::max);
                            let edge = (cw - r.x2).min(ch - r.y2).max(0.0);
                            deviations[k].push((band(edge), lm / side, (r.score - f.score).abs()));
                        }
                        _ => unmatched[k] += 1,
                    }
                }
                extra[k] += found.len().saturating_sub(reference.len());
            }
        }
    }
    println!("{} photos; windows whose bucket is larger than their multiple of 32", paths.len());
    println!();
    println!("| fill | distance to the padded edge | faces | landmarks: median / p90 / max (of face side) | score: max diff | lost | extra |");
    println!("|---|---|---|---|---|---|---|");
    for (k, fill) in fills.iter().enumerate() {
        for (b, name) in bands.iter().enumerate() {
            let mut lm: Vec<f32> = deviations[k].iter().filter(|d| d.0 == b).map(|d| d.1).collect();
            if lm.is_empty() {
                continue;
            }
            lm.sort_by(f32::total_cmp);
            let score = deviations[k].iter().filter(|d| d.0 == b).map(|d| d.2).fold(0.0, f32::max);
            let q = |p: f32| lm[((lm.len() - 1) as f32 * p) as usize] * 100.0;
            println!(
                "| {fill:?} | {name} | {} | {:.2}% / {:.2}% / {:.2}% | {score:.3} | {} | {} |",
                lm.len(),
                q(0.5),
                q(0.9),
                q(1.0),
                if b == 0 { unmatched[k].to_string() } else { String::new() },
                if b == 0 { extra[k].to_string() } else { String::new() },
            );
        }
    }
}
