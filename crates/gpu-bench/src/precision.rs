//! fp16 against fp32: the dev set's faces embedded by two engines, one with TensorRT's fp16
//! flag off and the fp32 models, one with the flag on and, where given, the models stored in
//! float16 (how fp16 runs on the CUDA provider, which has no such flag). How far each face's
//! embedding moved, each side's best verification accuracy over every pair, the pairs whose
//! `medium` verdict differs, and how far detection moved.

use face_engine::{AnalyzeOptions, Engine};
use serde::Serialize;

use crate::photos::Labelled;

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PrecisionCheck {
    pub mode: String,
    /// What the fp16 side is.
    pub fp16: String,
    pub providers: Vec<String>,
    /// Faces compared: photos where both sides found the face.
    pub faces: usize,
    pub only_fp32_found: usize,
    pub only_fp16_found: usize,
    pub min_cosine: f64,
    pub mean_cosine: f64,
    pub identical: bool,
    pub fp32_accuracy: f64,
    pub fp16_accuracy: f64,
    pub pairs: usize,
    /// The cosine of the `medium` preset the verdicts are counted at (none: not calibrated).
    pub medium_cosine: Option<f64>,
    pub medium_verdicts_differing: usize,
    pub detections: DetectionShift,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DetectionShift {
    pub photos: usize,
    /// Faces both found.
    pub faces: usize,
    pub only_fp32: usize,
    pub only_fp16: usize,
    /// Landmark displacement over the face's width: median, 99th percentile, largest.
    pub median_shift: f64,
    pub p99_shift: f64,
    pub max_shift: f64,
    pub shifted_over_1_percent: usize,
}

const EMBED: AnalyzeOptions = AnalyzeOptions { embed: true, age: false, gender: false, emotions: false, boxes: None, thumbnail: None };
const DETECT: AnalyzeOptions = AnalyzeOptions { embed: false, ..EMBED };

/// Each labelled photo's first face's embedding, None where no face was found.
fn embed_all(engine: &Engine, set: &[Labelled]) -> Result<Vec<Option<Vec<f32>>>, String> {
    set.iter()
        .map(|l| {
            let a = engine.analyze(&l.bytes, &EMBED).map_err(|e| format!("{}: {e}", l.file))?;
            Ok((!a.faces.is_empty()).then(|| a.embeddings[..a.dim].to_vec()))
        })
        .collect()
}

fn row(side: &[Option<Vec<f32>>], i: usize) -> &[f32] {
    side[i].as_deref().expect("found on both sides")
}

fn dot(a: &[f32], b: &[f32]) -> f64 {
    a.iter().zip(b).map(|(x, y)| f64::from(*x) * f64::from(*y)).sum()
}

/// The best accuracy any threshold gives over `scores` (true: same person).
pub fn best_accuracy(scores: &[f64], same: &[bool]) -> f64 {
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&a, &b| scores[a].total_cmp(&scores[b]));
    // A threshold below every score accepts every pair: the genuine ones are right.
    let mut correct = same.iter().filter(|&&s| s).count() as i64;
    let mut best = correct;
    for (k, &i) in order.iter().enumerate() {
        correct += if same[i] { -1 } else { 1 };
        // Only between distinct scores can a threshold separate them.
        if order.get(k + 1).is_some_and(|&j| scores[j] == scores[i]) {
            continue;
        }
        best = best.max(correct);
    }
    best as f64 / scores.len().max(1) as f64
}

#[allow(clippy::too_many_arguments)]
pub fn compare(mode: &str, fp16: &str, fp32_engine: &Engine, fp16_engine: &Engine, set: &[Labelled], photos: &[Vec<u8>], medium_cosine: Option<f64>) -> Result<PrecisionCheck, String> {
    let a = embed_all(fp32_engine, set)?;
    let b = embed_all(fp16_engine, set)?;
    let common: Vec<usize> = (0..set.len()).filter(|&i| a[i].is_some() && b[i].is_some()).collect();
    let cosines: Vec<f64> = common.iter().map(|&i| dot(row(&a, i), row(&b, i))).collect();
    let (mut sa, mut sb, mut same) = (Vec::new(), Vec::new(), Vec::new());
    for (x, &i) in common.iter().enumerate() {
        for &j in &common[x + 1..] {
            sa.push(dot(row(&a, i), row(&a, j)));
            sb.push(dot(row(&b, i), row(&b, j)));
            same.push(set[i].person == set[j].person);
        }
    }
    let differing = medium_cosine.map_or(0, |t| sa.iter().zip(&sb).filter(|(x, y)| (**x >= t) != (**y >= t)).count());
    let found = |side: &[Option<Vec<f32>>]| side.iter().filter(|e| e.is_some()).count();
    let all_photos: Vec<&[u8]> = set.iter().map(|l| l.bytes.as_slice()).chain(photos.iter().map(Vec::as_slice)).collect();
    Ok(PrecisionCheck {
        mode: mode.to_string(),
        fp16: fp16.to_string(),
        providers: fp16_engine.info().providers,
        faces: common.len(),
        only_fp32_found: found(&a) - common.len(),
        only_fp16_found: found(&b) - common.len(),
        min_cosine: cosines.iter().copied().fold(f64::INFINITY, f64::min),
        mean_cosine: cosines.iter().sum::<f64>() / cosines.len().max(1) as f64,
        identical: common.len() == found(&a) && common.iter().all(|&i| row(&a, i) == row(&b, i)),
        fp32_accuracy: best_accuracy(&sa, &same),
        fp16_accuracy: best_accuracy(&sb, &same),
        pairs: sa.len(),
        medium_cosine,
        medium_verdicts_differing: differing,
        detections: compare_detections(fp32_engine, fp16_engine, &all_photos)?,
    })
}

/// Every photo through both engines, faces paired by box overlap (IoU ≥ 0.5), and how far each
/// pair's landmarks lie apart: the largest of the points' distances, over the face's width.
fn compare_detections(a: &Engine, b: &Engine, photos: &[&[u8]]) -> Result<DetectionShift, String> {
    let mut shifts = Vec::new();
    let (mut only_a, mut only_b) = (0, 0);
    for photo in photos {
        let x = a.analyze(photo, &DETECT).map_err(|e| e.to_string())?;
        let y = b.analyze(photo, &DETECT).map_err(|e| e.to_string())?;
        let mut paired = vec![false; y.faces.len()];
        for f in &x.faces {
            let iou = |g: &face_engine::Face| {
                let inter = f64::from((f.x2.min(g.x2) - f.x1.max(g.x1)).max(0)) * f64::from((f.y2.min(g.y2) - f.y1.max(g.y1)).max(0));
                let area = |h: &face_engine::Face| f64::from(h.x2 - h.x1) * f64::from(h.y2 - h.y1);
                inter / (area(f) + area(g) - inter)
            };
            let best = y.faces.iter().enumerate().map(|(j, g)| (j, iou(g))).max_by(|p, q| p.1.total_cmp(&q.1));
            match best {
                Some((j, v)) if v >= 0.5 && !paired[j] => {
                    paired[j] = true;
                    let g = &y.faces[j];
                    let most = f.landmarks.chunks(2).zip(g.landmarks.chunks(2)).map(|(p, q)| f64::from((p[0] - q[0]).hypot(p[1] - q[1]))).fold(0.0, f64::max);
                    shifts.push(most / f64::from(f.x2 - f.x1));
                }
                _ => only_a += 1,
            }
        }
        only_b += paired.iter().filter(|p| !**p).count();
    }
    shifts.sort_by(f64::total_cmp);
    let at = |q: f64| shifts.get(((q * shifts.len() as f64) as usize).min(shifts.len().saturating_sub(1))).copied().unwrap_or(0.0);
    Ok(DetectionShift {
        photos: photos.len(),
        faces: shifts.len(),
        only_fp32: only_a,
        only_fp16: only_b,
        median_shift: at(0.5),
        p99_shift: at(0.99),
        max_shift: shifts.last().copied().unwrap_or(0.0),
        shifted_over_1_percent: shifts.iter().filter(|&&s| s > 0.01).count(),
    })
}

#[cfg(test)]
mod tests {
    use super::best_accuracy;

    #[test]
    fn best_accuracy_finds_the_separating_threshold() {
        assert_eq!(best_accuracy(&[0.1, 0.2, 0.8, 0.9], &[false, false, true, true]), 1.0);
        // One impostor above a genuine pair: the best threshold gets four of five right.
        assert_eq!(best_accuracy(&[0.1, 0.3, 0.2, 0.9, 0.4], &[false, true, false, true, false]), 0.8);
        // Tied scores cannot be split.
        assert_eq!(best_accuracy(&[0.5, 0.5], &[true, false]), 0.5);
    }
}
