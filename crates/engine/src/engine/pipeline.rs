//! One analysis, on a pipeline thread: decode → detect (or look around the caller's boxes) →
//! cut the crops each face needs → run them on the face workers → faces in photo pixels.

use std::sync::Arc;

use image::RgbImage;

use crate::attributes::AgeGender;
use crate::cancel::CancelToken;
use crate::detection::Detection;
use crate::error::{EngineError, Result};
use crate::image_io;
use crate::thumbnail;

use super::crop::Candidate;
use super::estimate::Estimate;
use super::face_stage::{FaceJob, FaceOut};
use super::models::AttributeSource;
use super::{quality, Analysis, AnalyzeOptions, Face, Inner};

impl Inner {
    /// Analyses one image whose header `estimate` has read; stops before the next stage once
    /// `cancel` is cancelled.
    pub(super) fn analyze(&self, bytes: &[u8], opts: &AnalyzeOptions, estimate: &Estimate, cancel: &CancelToken) -> Result<Analysis> {
        cancel.check()?;
        let decoded = image_io::decode_scaled(bytes, &estimate.header, estimate.denominator, self.limits.max_bytes)?;
        cancel.check()?;
        // The pipeline works in decoded pixels; what it reports is mapped to photo pixels.
        let (sx, sy) = decoded.scale();
        let (w, h) = (decoded.width, decoded.height);
        let img = Arc::new(decoded.image);
        let candidates = self.candidates(&img, opts, (sx, sy), estimate.heavy(), cancel)?;
        let outs = self.run_face_models(&img, &candidates, opts, cancel)?;
        let dim = self.info.dim;
        let mut faces = Vec::with_capacity(candidates.len());
        let mut embeddings = Vec::with_capacity(if opts.embed { candidates.len() * dim } else { 0 });
        let to_photo = |d: &Detection| Detection {
            score: d.score,
            x1: d.x1 * sx,
            y1: d.y1 * sy,
            x2: d.x2 * sx,
            y2: d.y2 * sy,
            keypoints: d.keypoints.iter().map(|&(x, y)| (x * sx, y * sy)).collect(),
        };
        for (c, out) in candidates.iter().zip(outs) {
            let d = &to_photo(&c.det);
            // A caller's box is reported as given, whichever face of the detector's it names.
            let shown = &c.shown.as_ref().map(to_photo).unwrap_or_else(|| d.clone());
            let clamp_x = |v: f32| (v.round() as i64).clamp(0, w as i64) as i32;
            let clamp_y = |v: f32| (v.round() as i64).clamp(0, h as i64) as i32;
            let attribute = |from: AttributeSource| match from {
                AttributeSource::Recognizer => out.vector.as_ref().map(|v| AgeGender { age: v.age, gender: v.gender }),
                AttributeSource::Model(k) => out.attributes.get(k).copied().flatten(),
            };
            let (age, gender) = (attribute(self.age_from).and_then(|a| a.age), attribute(self.gender_from).and_then(|a| a.gender));
            let mut face = Face {
                x1: clamp_x(shown.x1),
                y1: clamp_y(shown.y1),
                x2: clamp_x(shown.x2),
                y2: clamp_y(shown.y2),
                score: d.score,
                aligned: c.has_keypoints,
                quality: if c.has_keypoints { quality(d, self.decoder) } else { 0.0 },
                landmarks: if c.has_keypoints { d.keypoints.iter().flat_map(|&(x, y)| [x, y]).collect() } else { Vec::new() },
                age: None,
                gender: None,
                emotions: None,
                thumbnail: None,
            };
            if let Some(side) = opts.thumbnail {
                face.thumbnail = Some(thumbnail::face_thumbnail(&img, decoded_box(&img, &c.det), side)?);
            }
            if opts.age {
                face.age = age.map(|a| a.round().max(0.0) as u32);
            }
            if opts.gender {
                face.gender = gender;
            }
            if opts.emotions {
                face.emotions = out.emotions.map(|e| e.into_iter().map(|(label, _)| label).collect());
            }
            if opts.embed {
                match out.vector.and_then(|v| v.embedding) {
                    Some(e) if e.len() == dim => embeddings.extend_from_slice(&e),
                    _ => return Err(EngineError::Model("recogniser returned no embedding".into())),
                }
            }
            faces.push(face);
        }
        Ok(Analysis { width: w, height: h, faces, embeddings, dim })
    }

    /// The faces to describe: those the caller's boxes name (given in photo pixels, `scale` photo
    /// pixels per decoded pixel), else the detector's faces, biggest first.
    fn candidates(&self, img: &Arc<RgbImage>, opts: &AnalyzeOptions, (sx, sy): (f32, f32), heavy: bool, cancel: &CancelToken) -> Result<Vec<Candidate>> {
        match &opts.boxes {
            Some(boxes) => {
                let scaled: Vec<[f32; 4]> = boxes.iter().map(|b| [b[0] / sx, b[1] / sy, b[2] / sx, b[3] / sy]).collect();
                self.detector.caller_boxes(img, &scaled, (sx + sy) / 2.0, heavy, cancel)
            }
            None => {
                let min_face = (sx + sy) / 2.0;
                let mut dets = self.detector.detect(img, min_face, heavy, cancel)?;
                // Biggest first, as reported: by the area left once the box is clamped to the photo.
                let (dw, dh) = img.dimensions();
                let clamped = |d: &Detection| (d.x2.min(dw as f32) - d.x1.max(0.0)).max(0.0) * (d.y2.min(dh as f32) - d.y1.max(0.0)).max(0.0);
                dets.sort_by(|a, b| clamped(b).total_cmp(&clamped(a)));
                Ok(dets.into_iter().map(|det| Candidate { det, has_keypoints: true, shown: None }).collect())
            }
        }
    }

    /// Cuts the crops each face needs for what `opts` asks and runs them on the face workers;
    /// one (possibly empty) output per candidate.
    fn run_face_models(&self, img: &RgbImage, candidates: &[Candidate], opts: &AnalyzeOptions, cancel: &CancelToken) -> Result<Vec<FaceOut>> {
        let from_recognizer = |want: bool, from: AttributeSource| want && from == AttributeSource::Recognizer;
        let want_rec = opts.embed || from_recognizer(opts.age, self.age_from) || from_recognizer(opts.gender, self.gender_from);
        let want_attr: Vec<bool> = (0..self.attribute_crops.len())
            .map(|k| (opts.age && self.age_from == AttributeSource::Model(k)) || (opts.gender && self.gender_from == AttributeSource::Model(k)))
            .collect();
        let want_emo = opts.emotions && self.emotion_crop.is_some();
        if candidates.is_empty() || !(want_rec || want_attr.contains(&true) || want_emo) {
            return Ok((0..candidates.len()).map(|_| FaceOut::default()).collect());
        }
        let jobs = candidates
            .iter()
            .map(|c| FaceJob {
                recognizer: want_rec.then(|| self.recognizer_crops.iter().map(|spec| spec.cut(img, c, self.decoder)).collect()),
                attributes: want_attr.iter().zip(&self.attribute_crops).map(|(&want, spec)| want.then(|| spec.cut(img, c, self.decoder))).collect(),
                emotion: want_emo.then(|| self.emotion_crop.as_ref().expect("loaded").cut(img, c, self.decoder)),
            })
            .collect();
        cancel.check()?;
        self.faces.run(jobs)
    }
}

/// A candidate's box in decoded pixels, clamped to the image.
fn decoded_box(img: &RgbImage, det: &Detection) -> [i32; 4] {
    let (dw, dh) = img.dimensions();
    [
        ((det.x1.round() as i64).clamp(0, dw as i64)) as i32,
        ((det.y1.round() as i64).clamp(0, dh as i64)) as i32,
        ((det.x2.round() as i64).clamp(0, dw as i64)) as i32,
        ((det.y2.round() as i64).clamp(0, dh as i64)) as i32,
    ]
}
