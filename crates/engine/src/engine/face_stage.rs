//! The face stage: workers owning the recogniser, the age and gender models and the emotion
//! model, each running whichever of its models a batch of face crops asks for.

use std::sync::{mpsc, Arc};

use crate::attributes::{AgeGender, AttributeModel, EmotionModel};
use crate::batcher::Batcher;
use crate::error::{EngineError, Result};
use crate::recognizer::{FaceVector, RecognizerSet};
use crate::telemetry::Telemetry;

use super::models::{ModelChoice, TELEMETRY_RECOGNIZER};
use super::stage::StageSettings;

/// One face's crops, one per model that should see it.
pub(super) struct FaceJob {
    /// One crop per recogniser of the spec, in its order.
    pub(super) recognizer: Option<Vec<Vec<u8>>>,
    /// One crop per attribute model, where that model is needed.
    pub(super) attributes: Vec<Option<Vec<u8>>>,
    pub(super) emotion: Option<Vec<u8>>,
}

#[derive(Default)]
pub(super) struct FaceOut {
    pub(super) vector: Option<FaceVector>,
    /// Per attribute model, as in [`FaceJob::attributes`].
    pub(super) attributes: Vec<Option<AgeGender>>,
    pub(super) emotions: Option<Vec<(String, f32)>>,
}

/// Starts the face workers for `models`. Returns them with the embedding length and the
/// execution providers in use, as the first worker found them.
pub(super) fn start(stage: &StageSettings, models: &ModelChoice) -> Result<(Batcher<FaceJob, FaceOut>, usize, Vec<String>)> {
    let (dim_tx, dim_rx) = mpsc::channel::<(usize, Vec<String>)>();
    let s = stage.clone();
    let (rec_parts, attr_entries, emo_entry) = (models.recognizers.clone(), models.attributes.clone(), models.emotion.clone());
    let attribute_slots: Vec<u16> = (0..=attr_entries.len()).map(|k| models.telemetry_attribute(k)).collect();
    let faces = Batcher::start(stage.batcher_config("face"), move |n| {
        let src = s.source();
        let (rec, reports) = RecognizerSet::load(&src, &rec_parts)?;
        let attrs = attr_entries.iter().map(|(e, wants)| AttributeModel::load(&src, e, *wants)).collect::<Result<Vec<_>>>()?;
        let emo = emo_entry.as_ref().map(|e| EmotionModel::load(&src, e)).transpose()?;
        for ((e, _), r) in rec_parts.iter().zip(&reports) {
            s.log_providers(n, &e.id, r);
        }
        for ((e, _), (_, r)) in attr_entries.iter().zip(&attrs) {
            s.log_providers(n, &e.id, r);
        }
        if let (Some(e), Some((_, r))) = (&emo_entry, &emo) {
            s.log_providers(n, &e.id, r);
        }
        if n == 0 {
            let _ = dim_tx.send((rec.dim(), reports[0].active.clone()));
        }
        let mut models = FaceModels {
            recognizer: rec,
            attributes: attrs.into_iter().map(|(m, _)| m).collect(),
            emotion: emo.map(|(m, _)| m),
            telemetry: Arc::clone(&s.telemetry),
            attribute_slots: attribute_slots.clone(),
        };
        Ok(move |jobs: Vec<FaceJob>| models.run(&jobs))
    })?;
    let (dim, active) = dim_rx.recv().map_err(|_| EngineError::Internal("face worker did not report".into()))?;
    Ok((faces, dim, active))
}

/// One face worker's sessions.
struct FaceModels {
    recognizer: RecognizerSet,
    attributes: Vec<AttributeModel>,
    emotion: Option<EmotionModel>,
    telemetry: Arc<Telemetry>,
    /// Telemetry slot of each attribute model, then the emotion model's.
    attribute_slots: Vec<u16>,
}

impl FaceModels {
    /// Runs each model once, over the crops of the jobs that have one for it.
    fn run(&mut self, jobs: &[FaceJob]) -> Result<Vec<FaceOut>> {
        let mut outs: Vec<FaceOut> = (0..jobs.len()).map(|_| FaceOut { attributes: vec![None; self.attributes.len()], ..FaceOut::default() }).collect();
        let telemetry = &self.telemetry;
        let with_crops: Vec<usize> = (0..jobs.len()).filter(|&i| jobs[i].recognizer.is_some()).collect();
        if !with_crops.is_empty() {
            let parts = jobs[with_crops[0]].recognizer.as_ref().map_or(0, Vec::len);
            let crops: Vec<Vec<&[u8]>> = (0..parts)
                .map(|k| with_crops.iter().map(|&i| jobs[i].recognizer.as_ref().map_or(&[][..], |c| c[k].as_slice())).collect())
                .collect();
            for (i, v) in with_crops.into_iter().zip(self.recognizer.run(&crops, telemetry, TELEMETRY_RECOGNIZER)?) {
                outs[i].vector = Some(v);
            }
        }
        let slots = &self.attribute_slots;
        for (k, model) in self.attributes.iter_mut().enumerate() {
            let crops: Vec<Option<&[u8]>> = jobs.iter().map(|j| j.attributes.get(k).and_then(Option::as_deref)).collect();
            for (i, v) in run_on_crops(&crops, |c| telemetry.timed(slots[k], c.len(), || model.run(c)))? {
                outs[i].attributes[k] = Some(v);
            }
        }
        if let Some(emotion) = self.emotion.as_mut() {
            let slot = slots[self.attributes.len()];
            let crops: Vec<Option<&[u8]>> = jobs.iter().map(|j| j.emotion.as_deref()).collect();
            for (i, v) in run_on_crops(&crops, |c| telemetry.timed(slot, c.len(), || emotion.run(c)))? {
                outs[i].emotions = Some(v);
            }
        }
        Ok(outs)
    }
}

/// Runs `run` once over the crops present (none: not at all) and pairs each result with its
/// crop's index in `crops`.
fn run_on_crops<T>(crops: &[Option<&[u8]>], run: impl FnOnce(&[&[u8]]) -> Result<Vec<T>>) -> Result<Vec<(usize, T)>> {
    let idx: Vec<usize> = (0..crops.len()).filter(|&i| crops[i].is_some()).collect();
    if idx.is_empty() {
        return Ok(Vec::new());
    }
    let present: Vec<&[u8]> = crops.iter().filter_map(|c| *c).collect();
    Ok(idx.into_iter().zip(run(&present)?).collect())
}
