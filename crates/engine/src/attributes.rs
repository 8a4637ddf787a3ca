//! Face attributes: emotion, age and gender.
//!
//! Emotion has its own small model (a 64x64 gray crop in, seven scores out). Age and gender
//! come from the recogniser's extra heads (FaceRes) or a dedicated model; the decoders here
//! accept either head layout.

use std::path::Path;

use ort::session::Session;

use crate::error::{EngineError, Result};
use crate::manifest::{InputSpec, Manifest, ModelEntry};
use crate::runtime::{self, Provider, ProviderReport, Runtime};

/// Labels used when the manifest does not list them (the FER-2013 order).
pub const EMOTIONS: [&str; 7] = ["angry", "disgust", "fear", "happy", "sad", "surprise", "neutral"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gender {
    Male,
    Female,
}

impl Gender {
    pub fn as_str(self) -> &'static str {
        match self {
            Gender::Male => "male",
            Gender::Female => "female",
        }
    }
}

/// Gender from a head: one sigmoid (above 0.5 is male) or two probabilities `[male, female]`.
pub fn decode_gender(head: &[f32]) -> Option<Gender> {
    match head {
        [p] if p.is_finite() => Some(if *p > 0.5 { Gender::Male } else { Gender::Female }),
        [male, female] => Some(if male >= female { Gender::Male } else { Gender::Female }),
        _ => None,
    }
}

/// Representative ages of the 7-bin age head `[<=20, 21-25, 26-30, 31-40, 41-50, 51-60, >60]`.
const AGE_BIN_CENTRES: [f32; 7] = [15.0, 23.0, 28.0, 35.5, 45.5, 55.5, 65.0];

/// Age in years from a head.
///
/// A 100-bin one-year distribution is read around its peak: the expected value over the peak
/// bin and its two neighbours. That follows the peak (a bimodal tail cannot drag the estimate
/// to an age the model found unlikely) but still moves between whole years with the
/// neighbours' weight. A 7-bin head uses the expected value of its bin centres.
pub fn decode_age(head: &[f32]) -> Option<f32> {
    if head.is_empty() || head.iter().any(|v| !v.is_finite()) {
        return None;
    }
    if head.len() == AGE_BIN_CENTRES.len() {
        let total: f32 = head.iter().sum();
        if total <= 0.0 {
            return None;
        }
        return Some(head.iter().zip(AGE_BIN_CENTRES).map(|(p, c)| p * c).sum::<f32>() / total);
    }
    let peak = head.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).map(|(i, _)| i)?;
    let lo = peak.saturating_sub(1);
    let hi = (peak + 1).min(head.len() - 1);
    let (mut weight, mut sum) = (0f32, 0f32);
    for (i, &p) in head.iter().enumerate().take(hi + 1).skip(lo) {
        weight += p;
        sum += p * i as f32;
    }
    Some(if weight > 0.0 { sum / weight } else { peak as f32 })
}

/// Softmax unless the values already form a distribution (the converted emotion model ends
/// in a softmax; applying it twice would flatten the scores without changing their order).
pub fn probabilities(scores: &[f32]) -> Vec<f32> {
    let sum: f32 = scores.iter().sum();
    if scores.iter().all(|&v| (0.0..=1.0).contains(&v)) && (sum - 1.0).abs() < 1e-3 {
        return scores.to_vec();
    }
    let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let exps: Vec<f32> = scores.iter().map(|&v| (v - max).exp()).collect();
    let total: f32 = exps.iter().sum();
    exps.iter().map(|e| e / total).collect()
}

/// Labels ordered most likely first (ties keep label order).
pub fn rank_labels(probs: &[f32], labels: &[String]) -> Vec<(String, f32)> {
    let mut pairs: Vec<(String, f32)> = labels.iter().cloned().zip(probs.iter().copied()).collect();
    pairs.sort_by(|a, b| b.1.total_cmp(&a.1));
    pairs
}

/// Emotion classifier session, owned by one worker thread.
pub struct EmotionModel {
    session: Session,
    pub input: InputSpec,
    labels: Vec<String>,
    max_batch: usize,
}

impl EmotionModel {
    pub fn load(rt: &Runtime, dir: &Path, entry: &ModelEntry, providers: &[Provider], intra: usize, max_batch: usize) -> Result<(Self, ProviderReport)> {
        let (session, report) = rt.session(&Manifest::onnx_path(dir, entry), providers, intra)?;
        let labels = entry.labels.clone().unwrap_or_else(|| EMOTIONS.iter().map(|s| s.to_string()).collect());
        let max_batch = if entry.input.dynamic_batch { max_batch.max(1) } else { 1 };
        let mut m = EmotionModel { session, input: entry.input.clone(), labels, max_batch };
        let blank = vec![128u8; (entry.input.width * entry.input.height * 3) as usize];
        let out = m.run(&[&blank[..]])?;
        if out[0].len() != m.labels.len() {
            return Err(EngineError::Model(format!("emotion model {} gives {} scores for {} labels", entry.id, out[0].len(), m.labels.len())));
        }
        Ok((m, report))
    }

    /// Crops are RGB8 at the model's input size; the gray conversion happens while filling the
    /// tensor. Returns labels with probabilities, most likely first, per crop.
    pub fn run(&mut self, crops: &[&[u8]]) -> Result<Vec<Vec<(String, f32)>>> {
        let mut all = Vec::with_capacity(crops.len());
        for chunk in crops.chunks(self.max_batch) {
            let mut data = Vec::with_capacity(chunk.len() * self.input.values_per_image());
            for crop in chunk {
                self.input.push_image(crop, &mut data);
            }
            let spec = &self.input;
            let outputs = runtime::run_images(&mut self.session, spec, chunk.len(), spec.height, spec.width, data)?;
            let out = outputs.first().ok_or_else(|| EngineError::Model("emotion model has no output".into()))?;
            let n = out.data.len() / chunk.len();
            for row in out.data.chunks_exact(n) {
                all.push(rank_labels(&probabilities(row), &self.labels));
            }
        }
        Ok(all)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gender_heads() {
        assert_eq!(decode_gender(&[0.9]), Some(Gender::Male));
        assert_eq!(decode_gender(&[0.5]), Some(Gender::Female));
        assert_eq!(decode_gender(&[0.2, 0.8]), Some(Gender::Female));
        assert_eq!(decode_gender(&[]), None);
    }

    #[test]
    fn age_from_one_year_bins() {
        let mut head = vec![0f32; 100];
        head[30] = 1.0;
        assert_eq!(decode_age(&head), Some(30.0));
        head[30] = 0.5;
        head[31] = 0.5;
        assert!((decode_age(&head).unwrap() - 30.5).abs() < 1e-5);
        // A far-away secondary mode does not pull the estimate.
        head[80] = 0.3;
        assert!((decode_age(&head).unwrap() - 30.5).abs() < 1e-5);
    }

    #[test]
    fn age_from_seven_bins() {
        let head = [0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0];
        assert_eq!(decode_age(&head), Some(28.0));
    }

    #[test]
    fn softmax_only_when_needed_and_ranking() {
        let p = probabilities(&[0.1, 0.7, 0.2]);
        assert_eq!(p, vec![0.1, 0.7, 0.2]);
        let p = probabilities(&[1.0, 3.0, 2.0]);
        assert!((p.iter().sum::<f32>() - 1.0).abs() < 1e-5);
        assert!(p[1] > p[2] && p[2] > p[0]);
        let labels: Vec<String> = ["a", "b", "c"].iter().map(|s| s.to_string()).collect();
        let ranked = rank_labels(&p, &labels);
        assert_eq!(ranked.iter().map(|(l, _)| l.as_str()).collect::<Vec<_>>(), vec!["b", "c", "a"]);
    }
}
