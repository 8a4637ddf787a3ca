//! Fixtures shared by this crate's unit tests and its `tests/` integration tests. Not part of the
//! engine's API: kept public only because integration tests see nothing else.

/// Where the end-to-end tests find the project: the repository root, two folders above this
/// crate.
pub fn project_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// onnxruntime-node's library, where the engine's default looks for it from the project root
/// (`FACE_ORT_LIBRARY` overrides it).
pub fn ort_library() -> std::path::PathBuf {
    std::env::var_os("FACE_ORT_LIBRARY").map(std::path::PathBuf::from).unwrap_or_else(|| project_root().join(crate::EngineOptions::default().ort_library))
}

/// The models folder: `FACE_MODEL_DIR`, else the project's `models`.
pub fn model_dir() -> std::path::PathBuf {
    std::env::var_os("FACE_MODEL_DIR").map(std::path::PathBuf::from).unwrap_or_else(|| project_root().join("models"))
}

/// The manifest's YuNet on one CPU thread, as the detector examples and tests run it alone:
/// `plan` None runs shapes as they come, `Some(&SessionPlan::new(true, []))` fixed shapes with
/// nothing to warm up. `threshold` is the lowest score it reports.
pub fn cpu_yunet(plan: Option<&crate::runtime::SessionPlan>, threshold: f32) -> crate::yunet::YunetModel {
    let dir = model_dir();
    let manifest = crate::manifest::Manifest::load(&dir).expect("manifest");
    let entry = manifest.models.iter().find(|m| m.decoder == crate::manifest::Decoder::Yunet).expect("a YuNet model in the manifest");
    let rt = crate::runtime::init(&ort_library()).expect("onnxruntime");
    let src = crate::runtime::SessionSource { rt, dir: &dir, providers: &[crate::providers::Provider::Cpu], intra: 1, max_batch: 1, plan };
    crate::yunet::YunetModel::load(&src, entry, threshold).expect("YuNet loads").0
}

/// A missing prerequisite skips an end-to-end test on a fresh clone, but fails it in CI (`CI`
/// set), where the models and the labelled photos are always present.
pub fn skip(reason: String) {
    if std::env::var_os("CI").is_some() {
        panic!("{reason}, and CI must have it");
    }
    eprintln!("SKIPPED: {reason}");
}

/// Whether the converted models are there (`models/manifest.json` and an `.onnx` file in
/// `models/onnx`, from `npm run models`); if not, says so through [`skip`].
pub fn has_models() -> bool {
    let models = project_root().join("models");
    let has_onnx = std::fs::read_dir(models.join("onnx"))
        .map(|d| d.flatten().any(|e| e.path().extension().is_some_and(|x| x == "onnx")))
        .unwrap_or(false);
    if !models.join("manifest.json").exists() || !has_onnx {
        skip(format!("no converted models in {} (run `npm run models`)", models.display()));
        return false;
    }
    true
}

/// Whether an engine can be opened on the converted models: they are there ([`has_models`]) and
/// so is ONNX Runtime's library; if not, says which is missing through [`skip`].
pub fn can_open_engine() -> bool {
    if !has_models() {
        return false;
    }
    if !ort_library().exists() {
        skip(format!("onnxruntime library not found at {}", ort_library().display()));
        return false;
    }
    true
}

/// Inserts an APP1 Exif segment holding only an orientation tag right after the JPEG's SOI.
pub fn with_exif_orientation(jpeg: &[u8], orientation: u16) -> Vec<u8> {
    let mut tiff = Vec::new();
    tiff.extend_from_slice(b"MM\0\x2A");
    tiff.extend_from_slice(&8u32.to_be_bytes()); // first IFD right after the header
    tiff.extend_from_slice(&1u16.to_be_bytes()); // one entry
    tiff.extend_from_slice(&0x0112u16.to_be_bytes()); // Orientation
    tiff.extend_from_slice(&3u16.to_be_bytes()); // SHORT
    tiff.extend_from_slice(&1u32.to_be_bytes()); // count
    tiff.extend_from_slice(&orientation.to_be_bytes());
    tiff.extend_from_slice(&[0, 0]); // value padding to 4 bytes
    tiff.extend_from_slice(&0u32.to_be_bytes()); // no next IFD
    let mut payload = b"Exif\0\0".to_vec();
    payload.extend_from_slice(&tiff);
    let mut out = jpeg[..2].to_vec();
    out.extend_from_slice(&[0xFF, 0xE1]);
    out.extend_from_slice(&((payload.len() + 2) as u16).to_be_bytes());
    out.extend_from_slice(&payload);
    out.extend_from_slice(&jpeg[2..]);
    out
}

/// Small deterministic xorshift generator so tests need no extra crates and failures reproduce.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407) | 1)
    }

    pub fn next_u32(&mut self) -> u32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 32) as u32
    }

    /// Uniform in [-1, 1].
    pub fn unit(&mut self) -> f32 {
        (self.next_u32() as f32 / u32::MAX as f32) * 2.0 - 1.0
    }
}

/// Phone photos built from small ones: a source photo whose faces are known is scaled and
/// placed into a frame of a phone's size, so a test knows where every face is at any size.
pub mod phone {
    use image::{DynamicImage, ImageEncoder, Rgb, RgbImage};

    use super::Rng;
    use crate::align;
    use crate::detection::Detection;

    /// A face box `[x1, y1, x2, y2]` in pixels.
    pub type FaceBox = [f32; 4];

    /// A built photo, upright, with where its faces are.
    pub struct Built {
        pub photo: RgbImage,
        /// Faces placed whole: each must be found.
        pub faces: Vec<FaceBox>,
        /// Faces cut by the edge of what was placed: found or not, neither counts.
        pub partial: Vec<FaceBox>,
    }

    /// A frame with no face in it: a smooth two-colour gradient with some grain, like a wall or
    /// sky behind a subject.
    pub fn background(width: u32, height: u32, seed: u64) -> RgbImage {
        let mut rng = Rng::new(seed);
        let a: [f32; 3] = std::array::from_fn(|_| 90.0 + 60.0 * rng.unit());
        let b: [f32; 3] = std::array::from_fn(|_| 150.0 + 60.0 * rng.unit());
        let (w, h) = (width.max(1) as f32, height.max(1) as f32);
        let mut img = RgbImage::new(width, height);
        for (x, y, p) in img.enumerate_pixels_mut() {
            let t = (x as f32 / w + y as f32 / h) / 2.0;
            let grain = 6.0 * rng.unit();
            *p = Rgb(std::array::from_fn(|c| (a[c] + (b[c] - a[c]) * t + grain).clamp(0.0, 255.0) as u8));
        }
        img
    }

    /// Copies `region` (`[x, y, w, h]`, source pixels) of `source` into `frame` scaled by `k`,
    /// with the region's top-left corner at `(left, top)` (frame pixels, may be negative: what
    /// falls outside the frame is cut). Returns the faces of `source` (`known`) as placed: whole
    /// ones, and those the region or the frame cut.
    pub fn place(frame: &mut RgbImage, source: &RgbImage, known: &[FaceBox], region: [f32; 4], k: f32, left: f32, top: f32) -> (Vec<FaceBox>, Vec<FaceBox>) {
        let (fw, fh) = (frame.width() as f32, frame.height() as f32);
        // The part of the region that lands inside the frame, in source pixels.
        let sx0 = region[0].max(region[0] + (-left) / k).max(0.0);
        let sy0 = region[1].max(region[1] + (-top) / k).max(0.0);
        let sx1 = (region[0] + region[2]).min(region[0] + (fw - left) / k).min(source.width() as f32);
        let sy1 = (region[1] + region[3]).min(region[1] + (fh - top) / k).min(source.height() as f32);
        let to_frame = |x: f32, y: f32| (left + (x - region[0]) * k, top + (y - region[1]) * k);
        if sx1 > sx0 && sy1 > sy0 {
            let (dx0, dy0) = to_frame(sx0, sy0);
            let (dx1, dy1) = to_frame(sx1, sy1);
            let (dx0, dy0) = (dx0.round().max(0.0) as u32, dy0.round().max(0.0) as u32);
            let (dw, dh) = ((dx1.round() as u32).min(frame.width()).saturating_sub(dx0), (dy1.round() as u32).min(frame.height()).saturating_sub(dy0));
            if dw > 0 && dh > 0 {
                let patch = align::resize_region(source, [sx0 as f64, sy0 as f64, (sx1 - sx0) as f64, (sy1 - sy0) as f64], dw, dh);
                image::imageops::replace(frame, &patch, dx0 as i64, dy0 as i64);
            }
        }
        let (mut whole, mut partial) = (Vec::new(), Vec::new());
        for f in known {
            let inside = f[0] >= sx0 && f[1] >= sy0 && f[2] <= sx1 && f[3] <= sy1;
            let touches = f[2] > sx0 && f[3] > sy0 && f[0] < sx1 && f[1] < sy1;
            let (x1, y1) = to_frame(f[0], f[1]);
            let (x2, y2) = to_frame(f[2], f[3]);
            if inside {
                whole.push([x1, y1, x2, y2]);
            } else if touches {
                partial.push([x1, y1, x2, y2]);
            }
        }
        (whole, partial)
    }

    /// A selfie: the face `face` of `source` (with `context` times its side of surroundings)
    /// scaled so the face's side is `fraction` of the frame's shorter side, centred at
    /// (`cx`, `cy`) as fractions of the frame, on a background.
    pub fn selfie(source: &RgbImage, known: &[FaceBox], face: usize, context: f32, width: u32, height: u32, fraction: f32, centre: (f32, f32), seed: u64) -> Built {
        let f = known[face];
        let side = (f[2] - f[0]).max(f[3] - f[1]);
        let (fx, fy) = ((f[0] + f[2]) / 2.0, (f[1] + f[3]) / 2.0);
        let half = side * context / 2.0;
        let region = [fx - half, fy - half, 2.0 * half, 2.0 * half];
        let k = fraction * width.min(height) as f32 / side;
        let mut photo = background(width, height, seed);
        let (left, top) = (centre.0 * width as f32 - half * k, centre.1 * height as f32 - half * k);
        let (faces, partial) = place(&mut photo, source, known, region, k, left, top);
        Built { photo, faces, partial }
    }

    /// A group: the whole source photo scaled to `fraction` of the frame's width, centred.
    pub fn group(source: &RgbImage, known: &[FaceBox], width: u32, height: u32, fraction: f32, seed: u64) -> Built {
        let k = fraction * width as f32 / source.width() as f32;
        let mut photo = background(width, height, seed);
        let (pw, ph) = (source.width() as f32 * k, source.height() as f32 * k);
        let region = [0.0, 0.0, source.width() as f32, source.height() as f32];
        let (faces, partial) = place(&mut photo, source, known, region, k, (width as f32 - pw) / 2.0, (height as f32 - ph) / 2.0);
        Built { photo, faces, partial }
    }

    /// The photo as a camera stores it for EXIF `orientation` (1 to 8): rotated or mirrored so
    /// that a viewer applying the orientation sees `upright`.
    pub fn stored_for(upright: &RgbImage, orientation: u16) -> RgbImage {
        // 6 and 8 undo each other; every other orientation is its own inverse.
        let inverse = match orientation {
            6 => 8,
            8 => 6,
            o => o,
        };
        let mut img = DynamicImage::ImageRgb8(upright.clone());
        if let Some(o) = image::metadata::Orientation::from_exif(inverse as u8) {
            img.apply_orientation(o);
        }
        img.into_rgb8()
    }

    /// Baseline JPEG at `quality`, with an EXIF orientation tag when `orientation` is not 1.
    pub fn jpeg(stored: &RgbImage, quality: u8, orientation: u16) -> Vec<u8> {
        let mut out = Vec::new();
        image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, quality)
            .write_image(stored.as_raw(), stored.width(), stored.height(), image::ExtendedColorType::Rgb8)
            .expect("JPEG encodes");
        if orientation == 1 { out } else { super::with_exif_orientation(&out, orientation) }
    }

    /// Intersection over union of two boxes (the detector's own measure).
    pub fn iou(a: &FaceBox, b: &FaceBox) -> f32 {
        let detection = |r: &FaceBox| Detection { score: 1.0, x1: r[0], y1: r[1], x2: r[2], y2: r[3], keypoints: Vec::new() };
        detection(a).iou(&detection(b))
    }

    /// How detections compare with the placed faces: each placed face matched to at most one
    /// detection (IoU ≥ 0.5), detections over a cut face ignored, the rest counted as extra.
    #[derive(Debug, Default, Clone, Copy)]
    pub struct Score {
        pub placed: usize,
        pub found: usize,
        /// Placed faces matched by more than one detection.
        pub duplicates: usize,
        pub extra: usize,
        pub iou_sum: f32,
    }

    pub fn score(built: &Built, detected: &[FaceBox]) -> Score {
        let mut s = Score { placed: built.faces.len(), ..Score::default() };
        let mut used = vec![false; detected.len()];
        for f in &built.faces {
            let matches: Vec<usize> = (0..detected.len()).filter(|&i| iou(f, &detected[i]) >= 0.5).collect();
            if let Some(&best) = matches.iter().max_by(|&&a, &&b| iou(f, &detected[a]).total_cmp(&iou(f, &detected[b]))) {
                s.found += 1;
                s.iou_sum += iou(f, &detected[best]);
                s.duplicates += usize::from(matches.len() > 1);
            }
            for i in matches {
                used[i] = true;
            }
        }
        for (i, d) in detected.iter().enumerate() {
            if !used[i] && !built.partial.iter().any(|p| iou(p, d) > 0.1 || contains(p, d)) {
                s.extra += 1;
            }
        }
        s
    }

    fn contains(outer: &FaceBox, inner: &FaceBox) -> bool {
        let (cx, cy) = ((inner[0] + inner[2]) / 2.0, (inner[1] + inner[3]) / 2.0);
        cx >= outer[0] && cx <= outer[2] && cy >= outer[1] && cy <= outer[3]
    }
}

/// A gate for jobs to block on with [`wait_on`], and the function that opens it (unit tests of
/// the batcher and the pool).
#[cfg(test)]
pub(crate) fn gate() -> (std::sync::Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>, impl Fn()) {
    let gate = std::sync::Arc::new((std::sync::Mutex::new(false), std::sync::Condvar::new()));
    let g = std::sync::Arc::clone(&gate);
    let open = move || {
        let (lock, cv) = &*g;
        *lock.lock().unwrap() = true;
        cv.notify_all();
    };
    (gate, open)
}

/// Blocks until `gate` (from [`gate`]) opens.
#[cfg(test)]
pub(crate) fn wait_on(gate: &std::sync::Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>) {
    let (lock, cv) = &**gate;
    let mut open = lock.lock().unwrap();
    while !*open {
        open = cv.wait(open).unwrap();
    }
}
