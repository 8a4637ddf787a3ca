//! Prints the faces found in each image given on the command line, one line per image.
//!
//! `cargo run --release -p face-engine --example analyze -- photo.jpg ...`
//! Environment: FACE_MODEL_DIR (default models), FACE_ORT_LIBRARY, FACE_THRESHOLD, FACE_MIN_FACE,
//! FACE_DETECTOR (manifest id), FACE_VERBOSE (per-face lines), FACE_DRAW=<dir> (annotated
//! previews), FACE_DUMP=<file> (append path, face count and first embedding per image).

use std::time::Instant;

use face_engine::{AnalyzeOptions, Engine, EngineOptions};

fn main() {
    let mut opts = EngineOptions::default();
    if let Ok(dir) = std::env::var("FACE_MODEL_DIR") {
        opts.model_dir = dir.into();
    }
    if let Ok(lib) = std::env::var("FACE_ORT_LIBRARY") {
        opts.ort_library = lib.into();
    }
    opts.detect_threshold = std::env::var("FACE_THRESHOLD").ok().and_then(|v| v.parse().ok());
    if let Some(m) = std::env::var("FACE_MIN_FACE").ok().and_then(|v| v.parse().ok()) {
        opts.min_face = m;
    }
    opts.detector = std::env::var("FACE_DETECTOR").ok();
    let engine = Engine::open(opts).expect("engine opens");
    let verbose = std::env::var("FACE_VERBOSE").is_ok();
    for path in std::env::args().skip(1) {
        let bytes = std::fs::read(&path).expect("readable file");
        let t = Instant::now();
        let analysis = engine.analyze(&bytes, &AnalyzeOptions { embed: true, age: true, gender: true, emotions: true, boxes: None, thumbnail: None });
        let ms = t.elapsed().as_secs_f64() * 1000.0;
        match analysis {
            Ok(a) => {
                if let Ok(out) = std::env::var("FACE_DUMP") {
                    use std::io::Write;
                    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(out).expect("dump file");
                    let row: Vec<String> = a.embeddings.iter().take(a.dim).map(|v| format!("{v:.6}")).collect();
                    writeln!(f, "{path}\t{}\t{}", a.faces.len(), row.join(",")).unwrap();
                }
                if let Ok(dir) = std::env::var("FACE_DRAW") {
                    draw(&bytes, &a, &path, &dir);
                }
                println!("{path}: {}x{} faces={} in {ms:.0} ms", a.width, a.height, a.faces.len());
                if verbose {
                    for f in &a.faces {
                        println!(
                            "  [{},{},{},{}] score={:.2} age={:?} gender={:?} emotion={:?} kp={:?}",
                            f.x1, f.y1, f.x2, f.y2, f.score, f.age, f.gender.map(|g| g.as_str()),
                            f.emotions.as_ref().and_then(|e| e.first()),
                            f.landmarks.iter().map(|v| v.round() as i32).collect::<Vec<_>>()
                        );
                    }
                }
            }
            Err(e) => println!("{path}: error {} {e}", e.code()),
        }
    }
}

/// Writes a half-size copy of the photo with each face's box (green) and keypoints (red).
fn draw(bytes: &[u8], a: &face_engine::Analysis, path: &str, dir: &str) {
    let mut img = face_engine::image_io::decode(bytes, u64::MAX).expect("decodes").image;
    let put = |img: &mut image::RgbImage, x: i32, y: i32, c: [u8; 3]| {
        if x >= 0 && y >= 0 && (x as u32) < img.width() && (y as u32) < img.height() {
            img.put_pixel(x as u32, y as u32, image::Rgb(c));
        }
    };
    for f in &a.faces {
        for t in 0..3 {
            for x in f.x1..=f.x2 {
                put(&mut img, x, f.y1 + t, [0, 255, 0]);
                put(&mut img, x, f.y2 - t, [0, 255, 0]);
            }
            for y in f.y1..=f.y2 {
                put(&mut img, f.x1 + t, y, [0, 255, 0]);
                put(&mut img, f.x2 - t, y, [0, 255, 0]);
            }
        }
        for p in f.landmarks.chunks(2) {
            for dy in -3..=3 {
                for dx in -3..=3 {
                    put(&mut img, p[0] as i32 + dx, p[1] as i32 + dy, [255, 0, 0]);
                }
            }
        }
    }
    let scale = (1000.0 / img.width().max(img.height()) as f32).min(1.0);
    let small = image::imageops::resize(&img, (img.width() as f32 * scale) as u32, (img.height() as f32 * scale) as u32, image::imageops::FilterType::Triangle);
    let name = std::path::Path::new(path).file_stem().unwrap().to_string_lossy().to_string();
    small.save(format!("{dir}/{name}.png")).expect("writes");
}
