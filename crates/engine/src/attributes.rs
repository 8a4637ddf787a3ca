//! Face attributes: emotion, age and gender.
//!
//! Emotion has its own small model (a 64x64 gray crop in, seven scores out). Age and gender
//! come from the recogniser's extra heads (FaceRes) or from dedicated models ([`AttributeModel`]:
//! a model with age and gender heads such as FaceRes or GEAR, or one classifier per attribute
//! such as Cydral's dlib age and gender networks); the decoders here accept each head layout.

use crate::error::{EngineError, Result};
use crate::manifest::{InputSpec, ModelEntry};
use crate::runtime::{self, ModelSession, Output, ProviderReport, SessionSource};
use crate::shapes;

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
    decode_gender_ordered(head, [Gender::Male, Gender::Female])
}

/// Gender from a head whose two probabilities are in `order` (a tie picks the first, as
/// dlib's classifier does); a one-value head is a sigmoid, above 0.5 male.
pub fn decode_gender_ordered(head: &[f32], order: [Gender; 2]) -> Option<Gender> {
    match head {
        [p] if p.is_finite() => Some(if *p > 0.5 { Gender::Male } else { Gender::Female }),
        [a, b] if a.is_finite() && b.is_finite() => Some(if a >= b { order[0] } else { order[1] }),
        _ => None,
    }
}

/// The expected age of a class distribution whose classes stand for `weights` years (Cydral's
/// 81 classes: 0.25, then 1 to 80), summed in class order as dlib does.
pub fn decode_age_weighted(head: &[f32], weights: &[f32]) -> Option<f32> {
    if head.len() != weights.len() || head.iter().any(|v| !v.is_finite()) {
        return None;
    }
    Some(head.iter().zip(weights).fold(0f32, |sum, (p, w)| sum + p * w))
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

/// dlib's five-point face chip template (`get_face_chip_details`), as fractions of the unpadded
/// chip, in dlib's part order: the outer and inner corner of the eye on the image's right, the
/// outer and inner corner of the eye on the image's left, the bottom of the nose (dlib 20's
/// values: its own landmarks land there on its chips). Only the eye corners are used here.
pub const DLIB_CHIP_TEMPLATE: [(f32, f32); 5] = [
    (0.859_567_5, 0.213_498_15),
    (0.646_060_46, 0.228_967_44),
    (0.120_575_06, 0.213_727_45),
    (0.334_085_06, 0.229_064_24),
    (0.490_112_3, 0.627_797_5),
];
/// dlib's default padding, which the Cydral models were trained with: the chip is the
/// template's square grown by this fraction of its side on every edge.
pub const DLIB_CHIP_PADDING: f32 = 0.2;

/// Where a template point lands on a chip of `side` pixels padded by `padding`, in this
/// crate's pixel convention (pixel `i` spans `[i, i + 1)`; dlib's chip pixel `i` is centred on
/// template coordinate `i`, hence the half pixel).
pub fn dlib_chip_point((x, y): (f32, f32), side: f32, padding: f32) -> (f32, f32) {
    let k = side / (1.0 + 2.0 * padding);
    ((x + padding) * k + 0.5, (y + padding) * k + 0.5)
}

/// The eye centres on a dlib chip of `side` pixels padded by `padding`: the midpoints of the
/// template's corner pairs, image-left eye (the subject's right) first.
pub fn dlib_chip_eyes(side: f32, padding: f32) -> [(f32, f32); 2] {
    let t = &DLIB_CHIP_TEMPLATE;
    let mid = |a: (f32, f32), b: (f32, f32)| ((a.0 + b.0) / 2.0, (a.1 + b.1) / 2.0);
    [dlib_chip_point(mid(t[2], t[3]), side, padding), dlib_chip_point(mid(t[0], t[1]), side, padding)]
}

/// Age and gender of one face, as far as a model gives them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct AgeGender {
    pub age: Option<f32>,
    pub gender: Option<Gender>,
}

/// How one output is read.
#[derive(Debug, Clone)]
struct Head {
    output: String,
    /// Age: class weights for the expected value (none: [`decode_age`]).
    weights: Option<Vec<f32>>,
    /// Gender: the classes of a two-way head, in output order.
    order: [Gender; 2],
}

/// A session giving age, gender or both per face crop, owned by one worker thread: the
/// manifest's `age` and `gender` outputs of the model, decoded by its `ageWeights` and `labels`.
pub struct AttributeModel {
    session: ModelSession,
    pub input: InputSpec,
    pub id: String,
    age: Option<Head>,
    gender: Option<Head>,
    max_batch: usize,
    /// The batch sizes it runs at, with fixed shapes.
    batch_sizes: Option<Vec<usize>>,
}

impl AttributeModel {
    /// Loads the model for the attributes asked for (each must be a named output) and runs
    /// one blank crop through it to check that the heads decode.
    pub fn load(src: &SessionSource, entry: &ModelEntry, (want_age, want_gender): (bool, bool)) -> Result<(Self, ProviderReport)> {
        let head = |key: &str| -> Result<Head> {
            let output = entry.output(key).ok_or_else(|| EngineError::Model(format!("model {} names no {key} output in the manifest", entry.id)))?;
            let order = match entry.labels.as_deref() {
                Some([a, b]) if a == "female" && b == "male" => [Gender::Female, Gender::Male],
                Some([a, b]) if a == "male" && b == "female" => [Gender::Male, Gender::Female],
                Some(l) if key == "gender" => return Err(EngineError::Model(format!("model {}: gender labels {l:?} are not male and female", entry.id))),
                _ => [Gender::Male, Gender::Female],
            };
            Ok(Head { output: output.to_string(), weights: entry.age_weights.clone(), order })
        };
        let age = want_age.then(|| head("age")).transpose()?;
        let gender = want_gender.then(|| head("gender")).transpose()?;
        let (session, report) = src.session(entry)?;
        let max_batch = if entry.input.dynamic_batch { src.max_batch.max(1) } else { 1 };
        let batch_sizes = src.batch_sizes(max_batch);
        let mut m = AttributeModel { session, input: entry.input.clone(), id: entry.id.clone(), age, gender, max_batch, batch_sizes };
        let blank = vec![128u8; (entry.input.width * entry.input.height * 3) as usize];
        let out = m.run(&[&blank[..]])?;
        if (want_age && out[0].age.is_none()) || (want_gender && out[0].gender.is_none()) {
            return Err(EngineError::Model(format!("model {}: its age or gender output does not decode (check ageWeights and the head size)", entry.id)));
        }
        Ok((m, report))
    }

    /// Runs crops (RGB8 at the model's input size) in batches of at most `max_batch`, padded
    /// with fixed shapes as [`crate::recognizer::Recognizer::run`] pads them.
    pub fn run(&mut self, crops: &[&[u8]]) -> Result<Vec<AgeGender>> {
        let mut all = Vec::with_capacity(crops.len());
        for chunk in crops.chunks(self.max_batch) {
            let rows = self.batch_sizes.as_deref().map_or(chunk.len(), |s| shapes::batch_for(chunk.len(), s));
            let outputs = runtime::run_crops(&mut self.session, &self.input, &shapes::pad_rows(chunk, rows))?;
            let (age, gender) = (head_rows(&self.id, &outputs, self.age.as_ref(), rows)?, head_rows(&self.id, &outputs, self.gender.as_ref(), rows)?);
            for i in 0..chunk.len() {
                all.push(AgeGender {
                    age: age.and_then(|(h, data, n)| {
                        let row = &data[i * n..(i + 1) * n];
                        match &h.weights {
                            Some(w) => decode_age_weighted(row, w),
                            None => decode_age(row),
                        }
                    }),
                    gender: gender.and_then(|(h, data, n)| decode_gender_ordered(&data[i * n..(i + 1) * n], h.order)),
                });
            }
        }
        Ok(all)
    }
}

/// A head's output data and row length for a batch of `batch` crops.
fn head_rows<'a>(id: &str, outputs: &'a [Output], head: Option<&'a Head>, batch: usize) -> Result<Option<(&'a Head, &'a [f32], usize)>> {
    let Some(h) = head else { return Ok(None) };
    let o = outputs.iter().find(|o| o.name == h.output).ok_or_else(|| EngineError::Model(format!("model {id} has no output {:?}", h.output)))?;
    if o.data.is_empty() || !o.data.len().is_multiple_of(batch) {
        return Err(EngineError::Model(format!("model {id}: output {} does not split into {batch} rows", o.name)));
    }
    Ok(Some((h, o.data.as_slice(), o.data.len() / batch)))
}

/// Emotion classifier session, owned by one worker thread.
pub struct EmotionModel {
    session: ModelSession,
    pub input: InputSpec,
    labels: Vec<String>,
    max_batch: usize,
    /// The batch sizes it runs at, with fixed shapes.
    batch_sizes: Option<Vec<usize>>,
}

impl EmotionModel {
    pub fn load(src: &SessionSource, entry: &ModelEntry) -> Result<(Self, ProviderReport)> {
        let (session, report) = src.session(entry)?;
        let labels = entry.labels.clone().unwrap_or_else(|| EMOTIONS.iter().map(|s| s.to_string()).collect());
        let max_batch = if entry.input.dynamic_batch { src.max_batch.max(1) } else { 1 };
        let batch_sizes = src.batch_sizes(max_batch);
        let mut m = EmotionModel { session, input: entry.input.clone(), labels, max_batch, batch_sizes };
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
            let rows = self.batch_sizes.as_deref().map_or(chunk.len(), |s| shapes::batch_for(chunk.len(), s));
            let outputs = runtime::run_crops(&mut self.session, &self.input, &shapes::pad_rows(chunk, rows))?;
            let out = outputs.first().ok_or_else(|| EngineError::Model("emotion model has no output".into()))?;
            let n = out.data.len() / rows;
            // The padding's rows are dropped.
            for row in out.data.chunks_exact(n).take(chunk.len()) {
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
    fn gender_in_label_order() {
        let female_male = [Gender::Female, Gender::Male];
        assert_eq!(decode_gender_ordered(&[0.3, 0.7], female_male), Some(Gender::Male));
        assert_eq!(decode_gender_ordered(&[0.7, 0.3], female_male), Some(Gender::Female));
        assert_eq!(decode_gender_ordered(&[0.5, 0.5], female_male), Some(Gender::Female));
        assert_eq!(decode_gender_ordered(&[f32::NAN, 0.5], female_male), None);
    }

    #[test]
    fn age_as_expected_value_of_weighted_classes() {
        let weights: Vec<f32> = std::iter::once(0.25).chain((1..81).map(|i| i as f32)).collect();
        let mut head = vec![0f32; 81];
        head[0] = 1.0;
        assert_eq!(decode_age_weighted(&head, &weights), Some(0.25));
        head[0] = 0.0;
        head[30] = 0.5;
        head[40] = 0.5;
        assert_eq!(decode_age_weighted(&head, &weights), Some(35.0));
        assert_eq!(decode_age_weighted(&head[..80], &weights), None);
    }

    #[test]
    fn dlib_chip_geometry() {
        // A template point p lands at (p + padding) / (1 + 2 * padding) * side, plus the half
        // pixel between dlib's pixel centres and ours.
        let (x, y) = dlib_chip_point((0.0, 0.0), 64.0, DLIB_CHIP_PADDING);
        assert!((x - (0.2 / 1.4 * 64.0 + 0.5)).abs() < 1e-5 && (y - x).abs() < 1e-6);
        let [l, r] = dlib_chip_eyes(1.4, DLIB_CHIP_PADDING);
        // Eye centres on the unpadded chip: x about 0.227 and 0.753, y about 0.221.
        assert!((l.0 - 0.5 - 0.2 - 0.227_33).abs() < 1e-4 && (r.0 - 0.5 - 0.2 - 0.752_81).abs() < 1e-4, "{l:?} {r:?}");
        assert!((l.1 - r.1).abs() < 1e-3);
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
