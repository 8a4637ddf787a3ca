//! The face stage: workers owning the recogniser, the age and gender models and the emotion
//! model, each running whichever of its models a batch of face crops asks for.

use std::sync::{mpsc, Arc};

use crate::attributes::{AgeGender, AttributeModel, EmotionModel};
use crate::batcher::Batcher;
use crate::error::{EngineError, Result};
use crate::recognizer::{FaceVector, Recognizer};
use crate::telemetry::Telemetry;

use super::models::{telemetry_attribute, ModelChoice, TELEMETRY_RECOGNIZER};
use super::open::StageSettings;

/// One face's crops, one per model that should see it.
pub(super) struct FaceJob {
    pub(super) recognizer: Option<Vec<u8>>,
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
    let (rec_entry, attr_entries, emo_entry) = (models.recognizer.clone(), models.attributes.clone(), models.emotion.clone());
    let faces = Batcher::start(stage.batcher_config("face"), move |n| {
        let (rec, report) = Recognizer::load(s.rt, &s.dir, &rec_entry, &s.providers, s.intra, s.max_batch)?;
        let attrs = attr_entries
            .iter()
            .map(|(e, wants)| AttributeModel::load(s.rt, &s.dir, e, *wants, &s.providers, s.intra, s.max_batch))
            .collect::<Result<Vec<_>>>()?;
        let emo = emo_entry
            .as_ref()
            .map(|e| EmotionModel::load(s.rt, &s.dir, e, &s.providers, s.intra, s.max_batch))
            .transpose()?;
        s.log_providers(n, &rec_entry.id, &report);
        for ((e, _), (_, r)) in attr_entries.iter().zip(&attrs) {
            s.log_providers(n, &e.id, r);
        }
        if let (Some(e), Some((_, r))) = (&emo_entry, &emo) {
            s.log_providers(n, &e.id, r);
        }
        if n == 0 {
            let _ = dim_tx.send((rec.dim, report.active.clone()));
        }
        let mut models = FaceModels {
            recognizer: rec,
            attributes: attrs.into_iter().map(|(m, _)| m).collect(),
            emotion: emo.map(|(m, _)| m),
            telemetry: Arc::clone(&s.telemetry),
        };
        Ok(move |jobs: Vec<FaceJob>| models.run(&jobs))
    })?;
    let (dim, active) = dim_rx.recv().map_err(|_| EngineError::Internal("face worker did not report".into()))?;
    Ok((faces, dim, active))
}

/// One face worker's sessions.
struct FaceModels {
    recognizer: Recognizer,
    attributes: Vec<AttributeModel>,
    emotion: Option<EmotionModel>,
    telemetry: Arc<Telemetry>,
}

impl FaceModels {
    /// Runs each model once, over the crops of the jobs that have one for it.
    fn run(&mut self, jobs: &[FaceJob]) -> Result<Vec<FaceOut>> {
        let mut outs: Vec<FaceOut> = (0..jobs.len()).map(|_| FaceOut { attributes: vec![None; self.attributes.len()], ..FaceOut::default() }).collect();
        let telemetry = &self.telemetry;
        let recognizer = &mut self.recognizer;
        let crops: Vec<Option<&[u8]>> = jobs.iter().map(|j| j.recognizer.as_deref()).collect();
        for (i, v) in run_on_crops(&crops, |c| telemetry.timed(TELEMETRY_RECOGNIZER, c.len(), || recognizer.run(c)))? {
            outs[i].vector = Some(v);
        }
        for (k, model) in self.attributes.iter_mut().enumerate() {
            let crops: Vec<Option<&[u8]>> = jobs.iter().map(|j| j.attributes.get(k).and_then(Option::as_deref)).collect();
            for (i, v) in run_on_crops(&crops, |c| telemetry.timed(telemetry_attribute(k), c.len(), || model.run(c)))? {
                outs[i].attributes[k] = Some(v);
            }
        }
        if let Some(emotion) = self.emotion.as_mut() {
            let slot = telemetry_attribute(self.attributes.len());
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
