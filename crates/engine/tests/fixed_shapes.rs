//! Fixed shapes (`fixedShapes`), checked on the CPU: the detector's windows padded to its
//! buckets and the face models' batches padded to fixed sizes find the same faces, with the
//! same landmarks, scores and embeddings, as the shapes that follow each photo; the engine
//! warms up every shape of every model before it is ready; and the GPU providers' options
//! carry the buckets and batch sizes as TensorRT's profiles.
//!
//! Needs the converted models and onnxruntime-node's library, and reads the labelled photos
//! when present; as in `models.rs`, each test that lacks them prints why and passes, except in
//! CI (`CI` set), where it fails.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use face_engine::testing::phone;
use face_engine::testing::{can_open_engine, has_models, ort_library, project_root as root, skip};
use face_engine::{describe_sessions, AnalyzeOptions, Analysis, Engine, EngineOptions, SessionInfo};

/// The options both engines share: the GPU hosts' default recogniser (`accurate`: SFace and
/// its mirror image, and dlib's ResNet), so padded batches carry mirrored rows and two models.
fn options(fixed: &str) -> EngineOptions {
    EngineOptions {
        model_dir: root().join("models"),
        ort_library: ort_library(),
        inference_workers: 2,
        queue_capacity: 256,
        recognizer: Some("accurate".into()),
        fixed_shapes: fixed.into(),
        ..EngineOptions::default()
    }
}

/// Engines with fixed shapes off and on, or `None` when models or runtime are absent.
fn engines() -> Option<&'static (Engine, Engine)> {
    static ENGINES: OnceLock<Option<(Engine, Engine)>> = OnceLock::new();
    ENGINES
        .get_or_init(|| {
            if !can_open_engine() {
                return None;
            }
            let off = Engine::open(options("off")).expect("engine opens with shapes that follow each photo");
            let t = Instant::now();
            let on = Engine::open(options("on")).expect("engine opens with fixed shapes");
            eprintln!("engine with fixed shapes opened (warm-up included) in {:?}", t.elapsed());
            Some((off, on))
        })
        .as_ref()
}

fn demo(n: u32) -> Vec<u8> {
    std::fs::read(root().join(format!("node_modules/@vladmandic/face-api/demo/sample{n}.jpg"))).expect("demo photo")
}

const ALL: AnalyzeOptions = AnalyzeOptions { embed: true, age: true, gender: true, emotions: true, boxes: None, thumbnail: None };
const DETECT_ONLY: AnalyzeOptions = AnalyzeOptions { embed: false, age: false, gender: false, emotions: false, boxes: None, thumbnail: None };

/// How far the two engines may differ on one face: its box (IoU above `iou`, or every side
/// within 1 px), landmarks (within `landmarks_px`, or `landmarks_of_side` of the face's side),
/// score, embedding (cosine distance) and attributes (gender and top emotion equal, age within
/// a year; `attributes` false skips them).
#[derive(Clone, Copy)]
struct Tolerance {
    iou: f32,
    landmarks_px: f32,
    landmarks_of_side: f32,
    score: f32,
    embedding: f32,
    attributes: bool,
}

/// What the brief of fixed shapes asks where padding cannot reach: the same faces to rounding.
const SAME: Tolerance = Tolerance { iou: 0.98, landmarks_px: 1.0, landmarks_of_side: 0.0, score: 0.01, embedding: 1e-4, attributes: true };

/// Faces near a window's right or bottom edge, which its padding grows past: YuNet's deeper
/// layers see the padding not as zeros but as what their biases make of black, so such a face
/// moves a little when the black grows. `examples/bucket_padding.rs` (demo, labelled and 300
/// LFW photos, window by window): within 64 input pixels of the padding landmarks move by a
/// median 0.8% of the face's side (p90 3%, at most 11%), touching it 2.8% (p90 7%, at most
/// 18%); beyond 160 pixels not at all. After the engine's merging, the labelled photos (tight
/// face crops, all edge) moved at most 8.7% of the side, IoU 0.89, embeddings 0.046 apart;
/// the bounds hold that with a margin.
const NEAR_PADDING: Tolerance = Tolerance { iou: 0.85, landmarks_px: 1.0, landmarks_of_side: 0.12, score: 0.05, embedding: 0.08, attributes: false };

/// The worst of each measure over the faces compared, for the log.
#[derive(Debug, Default)]
struct Worst {
    faces: usize,
    iou: f32,
    landmarks_of_side: f32,
    score: f32,
    embedding: f32,
}

/// Runs `bytes` through both engines and lists every way their results differ beyond `tol`
/// (face counts must be equal), with the time each engine took.
fn compare(label: &str, bytes: &[u8], opts: &AnalyzeOptions, tol: Tolerance, worst: &mut Worst) -> (Vec<String>, Duration, Duration) {
    let (off, on) = engines().expect("checked by the caller");
    let t = Instant::now();
    let a = off.analyze(bytes, opts).unwrap();
    let t_off = t.elapsed();
    let t = Instant::now();
    let b = on.analyze(bytes, opts).unwrap();
    let t_on = t.elapsed();
    (differences(label, &a, &b, tol, worst), t_off, t_on)
}

fn differences(label: &str, a: &Analysis, b: &Analysis, tol: Tolerance, worst: &mut Worst) -> Vec<String> {
    let mut out = Vec::new();
    if a.faces.len() != b.faces.len() {
        out.push(format!("{label}: {} faces with shapes that follow the photo, {} with fixed shapes", a.faces.len(), b.faces.len()));
        return out;
    }
    if worst.faces == 0 {
        worst.iou = 1.0;
    }
    let boxed = |f: &face_engine::Face| [f.x1 as f32, f.y1 as f32, f.x2 as f32, f.y2 as f32];
    for (i, fa) in a.faces.iter().enumerate() {
        let Some((j, fb)) = b.faces.iter().enumerate().max_by(|x, y| phone::iou(&boxed(fa), &boxed(x.1)).total_cmp(&phone::iou(&boxed(fa), &boxed(y.1)))) else { continue };
        worst.faces += 1;
        let iou = phone::iou(&boxed(fa), &boxed(fb));
        let sides = [fa.x1 - fb.x1, fa.y1 - fb.y1, fa.x2 - fb.x2, fa.y2 - fb.y2].iter().map(|d| d.abs()).max().unwrap_or(0);
        worst.iou = worst.iou.min(iou);
        if iou <= tol.iou && sides > 1 {
            out.push(format!("{label} face {i}: box {:?} against {:?} (IoU {iou:.4})", boxed(fa), boxed(fb)));
        }
        let side = (fa.x2 - fa.x1).max(fa.y2 - fa.y1).max(1) as f32;
        let landmarks = fa.landmarks.iter().zip(&fb.landmarks).map(|(p, q)| (p - q).abs()).fold(0.0, f32::max);
        worst.landmarks_of_side = worst.landmarks_of_side.max(landmarks / side);
        if fa.landmarks.len() != fb.landmarks.len() || landmarks > tol.landmarks_px.max(tol.landmarks_of_side * side) {
            out.push(format!("{label} face {i}: landmarks differ by {landmarks:.2} px ({:.1}% of its side)", 100.0 * landmarks / side));
        }
        worst.score = worst.score.max((fa.score - fb.score).abs());
        if (fa.score - fb.score).abs() > tol.score {
            out.push(format!("{label} face {i}: score {} against {}", fa.score, fb.score));
        }
        if a.dim > 0 && !a.embeddings.is_empty() {
            let (ea, eb) = (&a.embeddings[i * a.dim..(i + 1) * a.dim], &b.embeddings[j * b.dim..(j + 1) * b.dim]);
            let distance = 1.0 - ea.iter().zip(eb).map(|(x, y)| x * y).sum::<f32>();
            worst.embedding = worst.embedding.max(distance);
            if distance > tol.embedding {
                out.push(format!("{label} face {i}: embeddings {distance:.2e} apart (cosine distance)"));
            }
        }
        if !tol.attributes {
            continue;
        }
        if fa.gender != fb.gender {
            out.push(format!("{label} face {i}: gender {:?} against {:?}", fa.gender, fb.gender));
        }
        if let (Some(x), Some(y)) = (fa.age, fb.age) {
            if x.abs_diff(y) > 1 {
                out.push(format!("{label} face {i}: age {x} against {y}"));
            }
        }
        if fa.emotions.as_ref().and_then(|e| e.first()) != fb.emotions.as_ref().and_then(|e| e.first()) {
            out.push(format!("{label} face {i}: emotion {:?} against {:?}", fa.emotions, fb.emotions));
        }
    }
    out
}

/// The boxes `a` found, as caller boxes. Each names the face the engine's own detection finds
/// there, so the crops differ between the engines only as their detections do: not at all
/// away from the padding (the demo photos), within [`NEAR_PADDING`] near it.
fn as_boxes(a: &Analysis) -> AnalyzeOptions {
    AnalyzeOptions { boxes: Some(a.faces.iter().map(|f| [f.x1 as f32, f.y1 as f32, f.x2 as f32, f.y2 as f32]).collect()), ..ALL }
}

#[test]
fn demo_photos_give_the_same_faces_and_embeddings_with_fixed_shapes() {
    let Some(_) = engines() else { return };
    let mut wrong = Vec::new();
    let (mut off, mut on) = (Duration::ZERO, Duration::ZERO);
    let mut worst = Worst::default();
    for n in 1..=6 {
        let (d, a, b) = compare(&format!("sample{n}"), &demo(n), &ALL, SAME, &mut worst);
        wrong.extend(d);
        off += a;
        on += b;
    }
    eprintln!("six demo photos, all outputs: {off:?} with shapes that follow the photo, {on:?} with fixed shapes; worst {worst:?}");
    // Given the same boxes, both engines cut the same crops: only the batches differ.
    let (e_off, e_on) = engines().unwrap();
    for n in 1..=6 {
        let given = as_boxes(&e_off.analyze(&demo(n), &DETECT_ONLY).unwrap());
        wrong.extend(differences(&format!("sample{n} (caller boxes)"), &e_off.analyze(&demo(n), &given).unwrap(), &e_on.analyze(&demo(n), &given).unwrap(), SAME, &mut worst));
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// The face workers merge faces of photos submitted together into one batch: batches of
/// every size, padded, each face's embedding still its own.
#[test]
fn concurrent_photos_share_padded_batches_without_changing_any_face() {
    let Some((off, on)) = engines() else { return };
    let reference: Vec<Analysis> = (1..=6).map(|n| off.analyze(&demo(n), &ALL).unwrap()).collect();
    let (tx, rx) = std::sync::mpsc::channel();
    for round in 0..2 {
        for n in 1..=6u32 {
            let tx = tx.clone();
            on.submit(demo(n), ALL, move |r| tx.send((n, round, r)).unwrap()).unwrap();
        }
    }
    let mut wrong = Vec::new();
    for _ in 0..12 {
        let (n, round, r) = rx.recv().unwrap();
        wrong.extend(differences(&format!("sample{n} (round {round})"), &reference[n as usize - 1], &r.unwrap(), SAME, &mut Worst::default()));
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// The labelled photos, many of them tight face crops, whose faces touch the padding: the same
/// faces, moved within [`NEAR_PADDING`]; given the same boxes, the faces they name, within the
/// same bound.
#[test]
fn labelled_photos_give_the_same_faces_with_fixed_shapes() {
    let Some((off, on)) = engines() else { return };
    let dir = root().join("../shared/testdata/faces");
    let Ok(text) = std::fs::read_to_string(dir.join("labels.json")) else {
        skip(format!("labelled photos not found at {}", dir.display()));
        return;
    };
    let labels: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut wrong = Vec::new();
    let (mut t_off, mut t_on, mut photos) = (Duration::ZERO, Duration::ZERO, 0);
    let (mut detected, mut boxed) = (Worst::default(), Worst::default());
    for entry in labels.as_array().unwrap() {
        let file = entry["file"].as_str().unwrap();
        let bytes = std::fs::read(dir.join(file)).unwrap();
        let (d, a, b) = compare(file, &bytes, &AnalyzeOptions { embed: true, ..DETECT_ONLY }, NEAR_PADDING, &mut detected);
        wrong.extend(d);
        t_off += a;
        t_on += b;
        photos += 1;
        let reference = off.analyze(&bytes, &DETECT_ONLY).unwrap();
        let given = as_boxes(&reference);
        wrong.extend(differences(&format!("{file} (caller boxes)"), &off.analyze(&bytes, &given).unwrap(), &on.analyze(&bytes, &given).unwrap(), NEAR_PADDING, &mut boxed));
    }
    eprintln!("{photos} labelled photos, detect + embed: {t_off:?} with shapes that follow the photo, {t_on:?} with fixed shapes");
    eprintln!("worst, detected: {detected:?}; worst, caller boxes: {boxed:?}");
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// Phone photos built from the demo photos: groups across 12, 24 and 48 MP frames of each
/// orientation, and a selfie; every window of their plans lands in a bucket.
#[test]
fn phone_photos_give_the_same_faces_with_fixed_shapes() {
    let Some((off, _)) = engines() else { return };
    let mut wrong = Vec::new();
    let mut worst = Worst::default();
    let (mut t_off, mut t_on) = (Duration::ZERO, Duration::ZERO);
    let frames = [(4000, 3000, 0.9), (3024, 4032, 0.95), (5657, 4243, 0.6), (4080, 7252, 0.9), (8000, 6000, 0.5), (3464, 3464, 0.8)];
    for (k, &(w, h, fraction)) in frames.iter().enumerate() {
        let n = 1 + k as u32 % 6;
        let bytes = demo(n);
        let photo = image::load_from_memory(&bytes).unwrap().into_rgb8();
        let known: Vec<[f32; 4]> = off.analyze(&bytes, &DETECT_ONLY).unwrap().faces.iter().map(|f| [f.x1 as f32, f.y1 as f32, f.x2 as f32, f.y2 as f32]).collect();
        let built = phone::group(&photo, &known, w, h, fraction, 70 + k as u64);
        let jpeg = phone::jpeg(&built.photo, 90, 1);
        // Embeddings on the 12 MP frames only: detection is what the frame size changes.
        let opts = if w * h <= 13_000_000 { AnalyzeOptions { embed: true, ..DETECT_ONLY } } else { DETECT_ONLY };
        let (d, a, b) = compare(&format!("sample{n} in {w}x{h}"), &jpeg, &opts, NEAR_PADDING, &mut worst);
        eprintln!("sample{n} in {w}x{h}: {a:?} with shapes that follow the photo, {b:?} with fixed shapes");
        wrong.extend(d);
        t_off += a;
        t_on += b;
    }
    let selfie = {
        let bytes = demo(2);
        let photo = image::load_from_memory(&bytes).unwrap().into_rgb8();
        let known: Vec<[f32; 4]> = off.analyze(&bytes, &DETECT_ONLY).unwrap().faces.iter().map(|f| [f.x1 as f32, f.y1 as f32, f.x2 as f32, f.y2 as f32]).collect();
        phone::jpeg(&phone::selfie(&photo, &known, 0, 2.0, 3024, 4032, 0.5, (0.5, 0.45), 9).photo, 90, 1)
    };
    let (d, a, b) = compare("selfie 3024x4032", &selfie, &ALL, NEAR_PADDING, &mut worst);
    wrong.extend(d);
    eprintln!("phone photos: {:?} with shapes that follow the photo, {:?} with fixed shapes; worst {worst:?}", t_off + a, t_on + b);
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// The detector alone, window by window, its windows padded to the next multiple of 32 or to
/// their bucket: a face further than 160 input pixels from the window's right and bottom edges,
/// where the padding starts, is found exactly alike; nearer ones move a little (see
/// [`NEAR_PADDING`]). And nothing is found centred in the padding.
#[test]
fn padding_moves_only_the_faces_near_it() {
    use face_engine::runtime::SessionPlan;
    use face_engine::testing::cpu_yunet;
    use face_engine::yunet::{self, WindowJob};
    let Some((off, _)) = engines() else { return };
    // No plan: shapes as they come; a plan without models: fixed shapes, nothing to warm up.
    let fixed_plan = SessionPlan::new(true, []);
    let mut free = cpu_yunet(None, 0.8);
    let mut fixed = cpu_yunet(Some(&fixed_plan), 0.8);
    assert!(fixed_plan.warmups().is_empty());
    let mut photos: Vec<image::RgbImage> = (1..=6).map(|n| image::load_from_memory(&demo(n)).unwrap().into_rgb8()).collect();
    let known: Vec<[f32; 4]> = off.analyze(&demo(4), &DETECT_ONLY).unwrap().faces.iter().map(|f| [f.x1 as f32, f.y1 as f32, f.x2 as f32, f.y2 as f32]).collect();
    photos.push(phone::group(&photos[3], &known, 4000, 3000, 0.9, 5).photo);
    let (mut far, mut near, mut worst_near) = (0, 0, 0f32);
    let mut wrong = Vec::new();
    for (p, photo) in photos.into_iter().enumerate() {
        let img = std::sync::Arc::new(photo);
        for win in yunet::plan(img.width(), img.height(), 40.0) {
            let padded = yunet::bucket_for(win.input_size().0, win.input_size().1) != Some(win.input_size());
            let a = free.run_windows(WindowJob::each(&img, &[win])).unwrap().remove(0);
            let b = fixed.run_windows(WindowJob::each(&img, &[win])).unwrap().remove(0);
            let (cw, ch) = (win.content_width as f32, win.content_height as f32);
            assert!(b.iter().all(|d| (d.x1 + d.x2) / 2.0 < cw && (d.y1 + d.y2) / 2.0 < ch), "a face centred in the padding");
            for d in &a {
                let best = b.iter().map(|e| (d.iou(e), e)).max_by(|x, y| x.0.total_cmp(&y.0));
                let moved = best.map_or(f32::INFINITY, |(_, e)| d.keypoints.iter().zip(&e.keypoints).map(|(p, q)| (p.0 - q.0).abs().max((p.1 - q.1).abs())).fold(0.0, f32::max));
                let score = best.map_or(1.0, |(_, e)| (d.score - e.score).abs());
                if !padded || (cw - d.x2).min(ch - d.y2) > 160.0 {
                    far += 1;
                    if moved > 0.05 || score > 1e-3 {
                        wrong.push(format!("photo {p}, window {:?}: a face far from the padding moved {moved} px, score by {score}", win.input_size()));
                    }
                } else {
                    near += 1;
                    worst_near = worst_near.max(moved / d.width().max(d.height()));
                }
            }
        }
    }
    eprintln!("{far} faces far from the padding found alike; {near} near it moved by at most {:.1}% of their side", worst_near * 100.0);
    assert!(far > 20, "{far} faces far from the padding");
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// Every window any photo's plan makes fits a bucket: the GPU never sees another detector
/// shape. Sizes from a few pixels to the pixel limit, at every aspect ratio allowed.
#[test]
fn every_planned_window_fits_a_bucket() {
    use face_engine::yunet;
    for (w, h) in [(250, 250), (640, 480), (1920, 1080), (4000, 3000), (3000, 4000), (8000, 8000), (20000, 1000), (1000, 20000), (6325, 6325), (97, 1900)] {
        for min_face in [8.0, 20.0, 40.0, 100.0] {
            for win in yunet::plan(w, h, min_face) {
                let (iw, ih) = win.input_size();
                assert!(yunet::bucket_for(iw, ih).is_some(), "{w}x{h} at {min_face}: window {iw}x{ih} fits no bucket");
            }
        }
    }
}

#[test]
fn the_warm_up_runs_every_bucket_and_batch_size_of_every_model() {
    let Some((off, on)) = engines() else { return };
    assert!(!off.info().fixed_shapes && off.info().warmup.is_empty(), "no warm-up with shapes that follow each photo");
    let info = on.info();
    assert!(info.fixed_shapes);
    let ids: Vec<&str> = info.models.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(info.sessions.iter().map(|s| s.model.as_str()).collect::<Vec<_>>(), ids);
    for s in &info.sessions {
        let ran: Vec<&Vec<i64>> = info.warmup.iter().filter(|w| w.model == s.model).map(|w| &w.shape).collect();
        assert_eq!(ran, s.shapes.iter().collect::<Vec<_>>(), "{}: warm-up against its shapes", s.model);
        assert!(info.warmup.iter().all(|w| w.ms >= 0.0));
    }
    // The detector: one image at each bucket.
    let detector = &info.sessions[0];
    let buckets: Vec<Vec<i64>> = face_engine::yunet::BUCKETS.iter().map(|&(w, h)| vec![1, 3, h as i64, w as i64]).collect();
    assert_eq!((detector.model.as_str(), &detector.shapes), ("yunet", &buckets));
    // The face models: every batch size up to the cap (32 by default), for those that batch.
    let steps: Vec<i64> = face_engine::shapes::batch_sizes(EngineOptions::default().max_batch).into_iter().map(|b| b as i64).collect();
    assert_eq!(steps, [1, 4, 16, 32]);
    for s in &info.sessions[1..] {
        let batches: Vec<i64> = s.shapes.iter().map(|shape| shape[0]).collect();
        assert!(batches == steps || batches == [1], "{}: {batches:?}", s.model);
    }
    assert!(info.sessions.iter().any(|s| s.shapes.len() == steps.len()), "the recognisers batch");
}

/// Under the CUDA provider without TensorRT each model gets a session per fixed shape, so no
/// session ever sees its input shape change (ONNX Runtime's CUDA provider prepares each
/// convolution again when it does). Checked on the CPU: this ONNX Runtime has no CUDA
/// provider, so the engine asks for it, is told it is absent, and runs the same split sessions
/// on the CPU. Each session writes its own profile when it closes, which counts them; every
/// face and embedding equals the single-session engine's.
#[test]
fn under_cuda_alone_each_fixed_shape_gets_its_own_session() {
    let Some((_, on)) = engines() else { return };
    let dir = std::env::temp_dir().join(format!("face-split-sessions-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let split = Engine::open(EngineOptions { providers: vec!["cuda".into(), "cpu".into()], inference_workers: 1, profile_dir: Some(dir.clone()), ..options("on") }).expect("engine opens");
    let info = split.info();
    assert_eq!(info.providers, ["cpu"], "no CUDA in onnxruntime-node's library");
    let mut wrong = Vec::new();
    let mut worst = Worst::default();
    for n in 1..=3 {
        let photo = demo(n);
        wrong.extend(differences(&format!("sample{n}"), &on.analyze(&photo, &ALL).unwrap(), &split.analyze(&photo, &ALL).unwrap(), SAME, &mut worst));
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    drop(split);
    // The files appear as the worker's sessions close, after the engine is dropped.
    let count = |id: &str| std::fs::read_dir(&dir).unwrap().flatten().filter(|e| e.file_name().to_string_lossy().starts_with(&format!("{id}-"))).count();
    let expected: usize = info.sessions.iter().map(|s| s.shapes.len()).sum();
    let deadline = Instant::now() + Duration::from_secs(30);
    while info.sessions.iter().map(|s| count(&s.model)).sum::<usize>() < expected && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    for s in &info.sessions {
        assert_eq!(count(&s.model), s.shapes.len(), "{}: a session for each of its shapes", s.model);
    }
    assert_eq!(count("yunet"), face_engine::yunet::BUCKETS.len());
    let _ = std::fs::remove_dir_all(&dir);
}

/// The options a GPU host gets, read back without one: TensorRT's profile spans exactly the
/// buckets (detector) and the batch sizes (face models), fp16 follows `trtFp16`, and CUDA
/// searches convolution algorithms exhaustively, as the warm-up meets every shape.
#[test]
fn gpu_provider_options_carry_the_buckets_and_batch_sizes() {
    if !has_models() {
        return;
    }
    let gpu = |fp16: bool, fixed: &str, max_batch: usize| {
        describe_sessions(&EngineOptions {
            providers: vec!["tensorrt".into(), "cuda".into(), "cpu".into()],
            trt_fp16: fp16,
            fixed_shapes: fixed.into(),
            max_batch,
            tensorrt_cache: Some("/data/trt-cache".into()),
            ..options("auto")
        })
        .unwrap()
    };
    let option = |s: &SessionInfo, provider: &str, key: &str| -> Option<String> {
        s.providers.iter().find(|(p, _)| p == provider)?.1.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone())
    };
    let sessions = gpu(true, "auto", 32);
    let manifest = face_engine::manifest::Manifest::load(&root().join("models")).unwrap();
    let input = |id: &str| manifest.get(id).unwrap().input.name.clone();
    let yunet = &sessions[0];
    assert_eq!(yunet.model, "yunet");
    let name = input("yunet");
    assert_eq!(option(yunet, "tensorrt", "trt_profile_min_shapes"), Some(format!("{name}:1x3x320x320")), "the smallest bucket");
    assert_eq!(option(yunet, "tensorrt", "trt_profile_max_shapes"), Some(format!("{name}:1x3x1280x1280")), "the largest bucket");
    let (ow, oh) = face_engine::yunet::OPT_BUCKET;
    assert_eq!(option(yunet, "tensorrt", "trt_profile_opt_shapes"), Some(format!("{name}:1x3x{oh}x{ow}")));
    // Every bucket lies within the profile, and the profile's corners are buckets.
    let buckets = face_engine::yunet::BUCKETS;
    assert!(buckets.contains(&(320, 320)) && buckets.contains(&(1280, 1280)) && buckets.contains(&face_engine::yunet::OPT_BUCKET));
    assert!(buckets.iter().all(|&(w, h)| (320..=1280).contains(&w) && (320..=1280).contains(&h)));
    assert_eq!(yunet.shapes.len(), buckets.len());
    // With GPU providers the recogniser is the manifest's GPU default; each face model's
    // profile runs from one face to the cap, tuned for 16.
    assert_eq!(sessions.iter().map(|s| s.model.as_str()).collect::<Vec<_>>(), ["yunet", "sface", "dlib-resnet", "cydral-age", "cydral-gender", "emotion"]);
    for s in &sessions[1..] {
        let name = input(&s.model);
        let (min, opt, max) = (option(s, "tensorrt", "trt_profile_min_shapes").unwrap(), option(s, "tensorrt", "trt_profile_opt_shapes").unwrap(), option(s, "tensorrt", "trt_profile_max_shapes").unwrap());
        let batch = |text: &str| text.strip_prefix(&format!("{name}:")).and_then(|d| d.split('x').next()).map(|b| b.parse::<i64>().unwrap());
        assert_eq!((batch(&min), batch(&opt), batch(&max)), (Some(1), Some(16), Some(32)), "{}: {min} {opt} {max}", s.model);
        assert_eq!(s.shapes.iter().map(|shape| shape[0]).collect::<Vec<_>>(), [1, 4, 16, 32], "{}", s.model);
        assert_eq!(format!("{name}:{}", face_engine::providers::dims_text(&s.shapes[3])), max);
    }
    for s in &sessions {
        assert_eq!(option(s, "tensorrt", "trt_fp16_enable").as_deref(), Some("true"));
        assert_eq!(option(s, "tensorrt", "trt_engine_cache_path").as_deref(), Some("/data/trt-cache"));
        assert_eq!(option(s, "tensorrt", "trt_timing_cache_path").as_deref(), Some("/data/trt-cache"));
        assert_eq!(option(s, "cuda", "cudnn_conv_algo_search").as_deref(), Some("EXHAUSTIVE"));
        assert_eq!(option(s, "cuda", "device_id").as_deref(), Some("0"));
    }
    // fp16 follows the option; without fixed shapes there is no profile, and cuDNN ranks
    // algorithms instead of timing each new photo size.
    for s in &gpu(false, "off", 32) {
        assert_eq!(option(s, "tensorrt", "trt_fp16_enable").as_deref(), Some("false"));
        assert_eq!(option(s, "tensorrt", "trt_profile_min_shapes"), None);
        assert_eq!(option(s, "cuda", "cudnn_conv_algo_search").as_deref(), Some("HEURISTIC"));
        assert!(s.shapes.is_empty());
    }
    // A cap below 16 is the largest batch and the one tuned for.
    let small = gpu(true, "on", 10);
    let name = input("sface");
    assert_eq!(option(&small[1], "tensorrt", "trt_profile_opt_shapes"), Some(format!("{name}:10x3x112x112")));
    // The CPU takes no options.
    let cpu = describe_sessions(&options("auto")).unwrap();
    assert!(cpu.iter().all(|s| s.providers.is_empty() && s.shapes.is_empty()));
    // The description as JSON, as the addon passes it on.
    let json = sessions[0].to_json();
    assert_eq!(json["providers"]["tensorrt"]["trt_fp16_enable"], "true");
    assert_eq!(json["shapes"][0], serde_json::json!([1, 3, 320, 320]));
}
