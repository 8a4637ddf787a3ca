//! The detector stage: the workers owning the detector's sessions, and the passes each detector
//! family makes over a photo: BlazeFace a padded whole-photo pass plus tiles, YuNet windows at
//! a working resolution (a heavy photo's a round at a time). Caller boxes get a pass each, to
//! find keypoints for aligning their crops.

use std::sync::Arc;

use image::RgbImage;

use crate::align;
use crate::batcher::{Batcher, BatcherConfig};
use crate::blazeface::{self, BlazefaceModel, PlanOptions};
use crate::cancel::CancelToken;
use crate::detection::{self, Detection, NmsOptions, Pass};
use crate::error::{EngineError, Result};
use crate::manifest::{Decoder, InputSpec, ModelEntry};
use crate::yunet::{self, WindowJob, YunetModel};

use super::crop::Candidate;
use super::models::TELEMETRY_DETECTOR;
use super::stage::StageSettings;
use super::EngineOptions;

/// Detector score threshold when neither the caller nor the manifest sets one. Chosen on the
/// demo and labelled photos: true faces scored 0.77 and up, background texture at most 0.71
/// once tiles stopped reporting large boxes.
const DEFAULT_THRESHOLD: f32 = 0.7;

/// YuNet's score threshold when neither the caller nor the manifest sets one. On the demo and
/// labelled photos every true face scores 0.81 or more; the pyramid's finer levels see a few
/// more false positives, the highest a painted lake at 0.79, so this sits just below the faces.
const YUNET_THRESHOLD: f32 = 0.8;

/// A face that fills the frame (a portrait or a face chip) is seen only by the whole-photo pass,
/// squeezed into the padded square, and scores lower there (a 200 px chip: 0.67). Such large
/// detections accept this much less; small ones must meet the tile threshold, since false
/// positives on texture are small (an eagle's head: 0.66 at 15 input pixels).
const WHOLE_PHOTO_MARGIN: f32 = 0.1;

/// Width, as a fraction of the detector input, from which a whole-photo detection counts as
/// frame-filling.
const LARGE_FACE_FRACTION: f32 = 0.2;

/// Input side of the detector pass that looks for keypoints around a caller's box (the box
/// then spans a half or a third of it, well within what the detector finds).
pub(super) const CALLER_BOX_INPUT: f32 = 320.0;

/// The windows around a caller's box that the photo's own detection did not explain, as
/// multiples of the box's longer side: the first that finds the face wins.
const CALLER_BOX_WINDOWS: [f32; 2] = [2.0, 3.0];

/// Overlap (IoU) from which a detection is the face a caller's box names. Boxes of other
/// detectors are looser or tighter than ours; two faces' boxes overlap this much only in
/// a crowd pressed together, where the larger overlap wins.
const CALLER_BOX_IOU: f32 = 0.3;

/// How YuNet's detections from overlapping windows are merged.
const YUNET_NMS: NmsOptions = NmsOptions { iou: 0.3, containment: 0.65, weighted: false };

/// The detector stage: worker threads owning the sessions, and how their inputs are made.
pub(super) enum DetectorStage {
    Blazeface {
        batcher: Batcher<Vec<f32>, Vec<Detection>>,
        input: InputSpec,
        plan: PlanOptions,
        /// Score a tile detection needs; the whole-photo pass accepts WHOLE_PHOTO_MARGIN less.
        tile_threshold: f32,
    },
    Yunet {
        /// Renders and runs windows (the model knows its input).
        batcher: Batcher<WindowJob, Vec<Detection>>,
        min_face: f32,
    },
}

impl DetectorStage {
    /// Starts the detector workers for `entry`'s family.
    pub(super) fn start(stage: &StageSettings, entry: &ModelEntry, opts: &EngineOptions) -> Result<DetectorStage> {
        let threshold = opts.detect_threshold.or(entry.score_threshold).unwrap_or(match entry.decoder {
            Decoder::Blazeface => DEFAULT_THRESHOLD,
            Decoder::Yunet => YUNET_THRESHOLD,
        });
        let (s, model_entry) = (stage.clone(), entry.clone());
        match entry.decoder {
            Decoder::Blazeface => {
                let batcher = Batcher::start(stage.batcher_config("detector"), move |n| {
                    let floor = (threshold - WHOLE_PHOTO_MARGIN).max(0.0);
                    let (mut model, report) = BlazefaceModel::load(&s.source(), &model_entry, floor)?;
                    s.log_providers(n, &model_entry.id, &report);
                    let telemetry = Arc::clone(&s.telemetry);
                    Ok(move |inputs: Vec<Vec<f32>>| telemetry.timed(TELEMETRY_DETECTOR, inputs.len(), || model.run(inputs)))
                })?;
                let plan = PlanOptions { input: entry.input.width, min_face: opts.min_face, ..PlanOptions::default() };
                Ok(DetectorStage::Blazeface { batcher, input: entry.input.clone(), plan, tile_threshold: threshold })
            }
            Decoder::Yunet => {
                // One input per run: YuNet runs inputs one by one anyway (their sizes differ), and
                // a worker that took a huge tile and a small photo together would make the small
                // one wait for the tile.
                let config = BatcherConfig { max_batch: 1, ..stage.batcher_config("detector") };
                let batcher = Batcher::start(config, move |n| {
                    let (mut model, report) = YunetModel::load(&s.source(), &model_entry, threshold)?;
                    s.log_providers(n, &model_entry.id, &report);
                    let telemetry = Arc::clone(&s.telemetry);
                    Ok(move |jobs: Vec<WindowJob>| telemetry.timed(TELEMETRY_DETECTOR, jobs.len(), || model.run_windows(jobs)))
                })?;
                Ok(DetectorStage::Yunet { batcher, min_face: opts.min_face })
            }
        }
    }

    /// Detector inputs waiting for a worker.
    pub(super) fn queued(&self) -> usize {
        match self {
            DetectorStage::Blazeface { batcher, .. } => batcher.queued(),
            DetectorStage::Yunet { batcher, .. } => batcher.queued(),
        }
    }

    /// Finds the faces of the (decoded) photo with whichever detector is loaded; `photo_per_pixel`
    /// is how many photo pixels one decoded pixel stands for, so the smallest face searched
    /// stays the same in photo pixels. A heavy request runs its windows a round at a time (one
    /// per detector worker), queued behind light requests' windows, so it keeps a round's
    /// inputs in memory and stops between rounds once cancelled.
    pub(super) fn detect(&self, img: &Arc<RgbImage>, photo_per_pixel: f32, heavy: bool, cancel: &CancelToken) -> Result<Vec<Detection>> {
        let (w, h) = img.dimensions();
        let merged = match self {
            DetectorStage::Blazeface { batcher, input, plan, tile_threshold } => blazeface_passes(batcher, input, plan, *tile_threshold, img)?,
            DetectorStage::Yunet { batcher, min_face } => {
                let windows = yunet::plan(w, h, *min_face / photo_per_pixel);
                if heavy {
                    // One window per detector worker at a time, behind every light photo's
                    // windows: a heavy photo uses idle workers but never delays a light one by
                    // more than the windows running, and stops between rounds once cancelled.
                    let mut all = Vec::new();
                    for round in windows.chunks(batcher.workers()) {
                        cancel.check()?;
                        let results = batcher.run_behind(WindowJob::each(img, round))?;
                        all.extend(kept_in_photo(img, round, results));
                    }
                    detection::nms(all, YUNET_NMS)
                } else {
                    yunet_passes(batcher, img, &windows)?
                }
            }
        };
        // Boxes centred outside the photo come from the padding and are not faces.
        Ok(merged
            .into_iter()
            .filter(|d| {
                let (cx, cy) = ((d.x1 + d.x2) / 2.0, (d.y1 + d.y2) / 2.0);
                cx >= 0.0 && cy >= 0.0 && cx < w as f32 && cy < h as f32
            })
            .collect())
    }

    /// The faces the caller's boxes name. A box is a way to name a face, not to change how it is
    /// embedded: a box that overlaps one of the detector's own faces on the photo (as detect finds
    /// them) is that face, cut, aligned and embedded exactly as without the box. A box the photo's
    /// detection does not explain (a face below the smallest searched, another detector's box)
    /// gets passes of its own around it, at CALLER_BOX_WINDOWS scales, for keypoints; one where
    /// none finds any is cropped upright, and reported as not aligned.
    pub(super) fn caller_boxes(&self, img: &Arc<RgbImage>, boxes: &[[f32; 4]], photo_per_pixel: f32, heavy: bool, cancel: &CancelToken) -> Result<Vec<Candidate>> {
        let (w, h) = img.dimensions();
        for (i, b) in boxes.iter().enumerate() {
            let [x1, y1, x2, y2] = *b;
            if b.iter().any(|v| !v.is_finite()) || x2 <= x1 || y2 <= y1 {
                return Err(EngineError::BadParam(format!("box {i} must be [x1, y1, x2, y2] with x2 > x1 and y2 > y1")));
            }
            if x2 <= 0.0 || y2 <= 0.0 || x1 >= w as f32 || y1 >= h as f32 {
                return Err(EngineError::BadParam(format!("box {i} lies outside the {w}x{h} image")));
            }
        }
        if boxes.len() > 1024 {
            return Err(EngineError::BadParam("at most 1024 boxes per image".into()));
        }
        let given: Vec<Detection> = boxes.iter().map(|b| Detection { score: 1.0, x1: b[0], y1: b[1], x2: b[2], y2: b[3], keypoints: Vec::new() }).collect();
        let detected = self.detect(img, photo_per_pixel, heavy, cancel)?;
        let mut found: Vec<Option<Detection>> = given.iter().map(|g| best_overlap(g, detected.iter().cloned())).collect();
        for factor in CALLER_BOX_WINDOWS {
            let missing: Vec<usize> = (0..boxes.len()).filter(|&i| found[i].is_none()).collect();
            if missing.is_empty() {
                break;
            }
            cancel.check()?;
            let around: Vec<[f32; 4]> = missing.iter().map(|&i| boxes[i]).collect();
            for (&i, dets) in missing.iter().zip(self.windows_around(img, &around, factor)?) {
                found[i] = best_overlap(&given[i], dets.into_iter());
            }
        }
        Ok(given
            .into_iter()
            .zip(found)
            .map(|(given, found)| match found {
                Some(det) => Candidate { det, has_keypoints: true, shown: Some(given) },
                None => Candidate { det: given, has_keypoints: false, shown: None },
            })
            .collect())
    }

    /// The detector's faces in a square window around each box, `factor` times the box's longer
    /// side (in photo pixels): one pass each, at the box's own scale.
    fn windows_around(&self, img: &Arc<RgbImage>, boxes: &[[f32; 4]], factor: f32) -> Result<Vec<Vec<Detection>>> {
        let pass_for = |b: &[f32; 4], input: f32| {
            let side = (b[2] - b[0]).max(b[3] - b[1]) * factor;
            Pass { origin_x: (b[0] + b[2]) / 2.0 - side / 2.0, origin_y: (b[1] + b[3]) / 2.0 - side / 2.0, scale: side / input, level: 0, tiled: false }
        };
        let (passes, results) = match self {
            DetectorStage::Blazeface { batcher, input, .. } => {
                let passes: Vec<Pass> = boxes.iter().map(|b| pass_for(b, input.width as f32)).collect();
                let inputs = passes
                    .iter()
                    .map(|p| {
                        let t = p.photo_to_input();
                        let rgb = align::warp_antialiased(img, &t, input.width, input.height);
                        let mut buf = Vec::with_capacity(input.values_per_image());
                        input.push_image(&rgb, &mut buf);
                        buf
                    })
                    .collect();
                (passes, batcher.run(inputs)?)
            }
            DetectorStage::Yunet { batcher, .. } => {
                let side = CALLER_BOX_INPUT as u32;
                let windows: Vec<yunet::Window> = boxes.iter().map(|b| yunet::Window::around(pass_for(b, CALLER_BOX_INPUT), side)).collect();
                (windows.iter().map(|win| win.pass).collect(), batcher.run(WindowJob::each(img, &windows))?)
            }
        };
        Ok(passes.iter().zip(results).map(|(pass, dets)| dets.iter().map(|d| pass.to_photo(d)).collect()).collect())
    }
}

/// Of `candidates`, the one overlapping `given` most, when by more than CALLER_BOX_IOU.
fn best_overlap(given: &Detection, candidates: impl Iterator<Item = Detection>) -> Option<Detection> {
    candidates
        .map(|d| (given.iou(&d), d))
        .filter(|(iou, _)| *iou > CALLER_BOX_IOU)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, d)| d)
}

/// BlazeFace: a padded whole-photo pass plus tiles, merged by one weighted NMS.
fn blazeface_passes(
    batcher: &Batcher<Vec<f32>, Vec<Detection>>,
    spec: &InputSpec,
    plan: &PlanOptions,
    tile_threshold: f32,
    img: &RgbImage,
) -> Result<Vec<Detection>> {
    let (w, h) = img.dimensions();
    let (passes, scales) = blazeface::plan(w, h, plan);
    let levels = blazeface::pyramid(img, &scales);
    let inputs: Vec<Vec<f32>> = passes
        .iter()
        .map(|p| {
            let mut buf = vec![0f32; spec.values_per_image()];
            blazeface::render_pass(&levels[p.level], w, h, p, spec, &mut buf);
            buf
        })
        .collect();
    let results = batcher.run(inputs)?;
    let mut all = Vec::new();
    for (pass, dets) in passes.iter().zip(results) {
        for d in dets {
            let frame_filling = !pass.tiled && d.width() >= LARGE_FACE_FRACTION * spec.width as f32;
            let needed = if frame_filling { tile_threshold - WHOLE_PHOTO_MARGIN } else { tile_threshold };
            if d.score < needed {
                continue;
            }
            if blazeface::cut_by_tile_edge(pass, &d, spec.width, w, h) || blazeface::too_big_for_tile(pass, &d, spec.width) {
                continue;
            }
            all.push(pass.to_photo(&d));
        }
    }
    Ok(detection::nms(all, NmsOptions::default()))
}

/// YuNet over the given windows of `img`, merged by NMS, in `img` pixels.
fn yunet_passes(batcher: &Batcher<WindowJob, Vec<Detection>>, img: &Arc<RgbImage>, windows: &[yunet::Window]) -> Result<Vec<Detection>> {
    Ok(detection::nms(yunet_detections(batcher, img, windows)?, YUNET_NMS))
}

/// YuNet over the given windows of `img`, unmerged, in `img` pixels.
fn yunet_detections(batcher: &Batcher<WindowJob, Vec<Detection>>, img: &Arc<RgbImage>, windows: &[yunet::Window]) -> Result<Vec<Detection>> {
    let results = batcher.run(WindowJob::each(img, windows))?;
    Ok(kept_in_photo(img, windows, results))
}

/// The detections each window keeps, in `img` pixels.
fn kept_in_photo(img: &RgbImage, windows: &[yunet::Window], results: Vec<Vec<Detection>>) -> Vec<Detection> {
    let (w, h) = img.dimensions();
    let mut all = Vec::new();
    for (win, dets) in windows.iter().zip(results) {
        all.extend(dets.iter().filter(|d| win.keeps(d, w, h)).map(|d| win.pass.to_photo(d)));
    }
    all
}
