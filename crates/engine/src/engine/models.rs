//! Which manifest models the options pick: the detector, the recogniser, the age and gender
//! models (or the recogniser's own heads) and the emotion model; and the telemetry slot each
//! model's runs are counted under.

use crate::error::{EngineError, Result};
use crate::manifest::{Manifest, ModelEntry, Role};
use crate::recognizer::RecognizerSpec;
use crate::providers::Provider;
use crate::simd;

use super::EngineOptions;

/// The models one engine loads.
pub(super) struct ModelChoice {
    pub(super) detector: ModelEntry,
    /// The recogniser spec's models in order, each with whether its mirror image is embedded.
    pub(super) recognizers: Vec<(ModelEntry, bool)>,
    /// The spec written out in full ([`RecognizerSpec::name`]).
    pub(super) recognizer_name: String,
    /// Why it is this recogniser ([`RecognizerSource`]).
    pub(super) recognizer_source: RecognizerSource,
    /// Models the face workers load for age and gender, with what each is asked for
    /// (age, gender); empty when the recogniser's own heads give both.
    pub(super) attributes: Vec<(ModelEntry, (bool, bool))>,
    pub(super) age_from: AttributeSource,
    pub(super) gender_from: AttributeSource,
    pub(super) emotion: Option<ModelEntry>,
}

impl ModelChoice {
    /// The options' models, else the manifest's defaults (the recogniser by provider and
    /// processor: [`RecognizerSource`]); fails on an id the manifest lacks or a recogniser that
    /// is not one.
    pub(super) fn resolve(manifest: &Manifest, opts: &EngineOptions) -> Result<ModelChoice> {
        let detector_id = opts.detector.clone().unwrap_or_else(|| manifest.defaults.detector.clone());
        let gpu = opts.execution_providers()?.iter().any(|p| matches!(p, Provider::TensorRt | Provider::Cuda));
        let (recognizer, recognizer_source) = recognizer_default(manifest, opts.recognizer.as_deref(), gpu, simd::active_level() == simd::Level::Avx512);
        let spec = RecognizerSpec::parse(recognizer, &manifest.recognizer_modes)?;
        let detector = manifest.get(&detector_id)?.clone();
        let recognizers = spec
            .parts
            .iter()
            .map(|p| {
                let entry = manifest.get(&p.id)?;
                if entry.role != Role::Recognizer {
                    return Err(EngineError::BadParam(format!("recognizer {}: model {} is a {:?} model", spec.name(), p.id, entry.role)));
                }
                Ok((entry.clone(), p.mirror))
            })
            .collect::<Result<Vec<_>>>()?;
        // Heads of the recogniser (age, gender) are read from the first model's run.
        let recognizer_id = spec.parts[0].id.clone();
        let emotion = manifest.defaults.emotion.as_deref().map(|id| manifest.get(id)).transpose()?.cloned();
        // Age and gender: the caller's model, else the manifest's for that attribute, else its
        // shared one, else the recogniser's own heads; a model serving both is loaded once.
        let attribute_id = |chosen: &Option<String>, default: &Option<String>| {
            chosen.clone().or_else(|| default.clone()).or_else(|| manifest.defaults.age_gender.clone()).unwrap_or_else(|| recognizer_id.clone())
        };
        let mut attributes = Vec::new();
        let age_id = attribute_id(&opts.age_model, &manifest.defaults.age);
        let age_from = attribute_source(manifest, &age_id, &recognizer_id, true, &mut attributes)?;
        let gender_id = attribute_id(&opts.gender_model, &manifest.defaults.gender);
        let gender_from = attribute_source(manifest, &gender_id, &recognizer_id, false, &mut attributes)?;
        Ok(ModelChoice { detector, recognizers, recognizer_name: spec.name(), recognizer_source, attributes, age_from, gender_from, emotion })
    }

    /// `(id, onnx path)` of every model, in telemetry slot order (see [`TELEMETRY_DETECTOR`]).
    pub(super) fn loaded(&self) -> Vec<(String, String)> {
        let mut models = vec![(self.detector.id.clone(), self.detector.onnx.clone())];
        models.extend(self.recognizers.iter().map(|(e, _)| (e.id.clone(), e.onnx.clone())));
        models.extend(self.attributes.iter().map(|(e, _)| (e.id.clone(), e.onnx.clone())));
        models.extend(self.emotion.iter().map(|e| (e.id.clone(), e.onnx.clone())));
        models
    }

    /// Telemetry slot of the face workers' `k`th attribute model; the emotion model's is the
    /// one after the last attribute model's.
    pub(super) fn telemetry_attribute(&self, k: usize) -> u16 {
        (TELEMETRY_RECOGNIZER as usize + self.recognizers.len() + k) as u16
    }
}

/// Where the recogniser came from, as `info().recognizerSource` and the start-up log say it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecognizerSource {
    /// The caller named it (`FACE_RECOGNIZER`, or the service's recorded recogniser).
    Option,
    /// The manifest's default for GPU providers.
    GpuDefault,
    /// The manifest's default for processors with AVX-512.
    Avx512Default,
    /// The manifest's CPU default.
    CpuDefault,
}

impl RecognizerSource {
    pub fn name(self) -> &'static str {
        match self {
            RecognizerSource::Option => "option",
            RecognizerSource::GpuDefault => "gpu default",
            RecognizerSource::Avx512Default => "avx-512 default",
            RecognizerSource::CpuDefault => "cpu default",
        }
    }
}

/// The recogniser spec to load: the caller's, else the manifest's default for a GPU provider,
/// else for a processor with AVX-512 (`simd` level, which `FACE_SIMD` can lower), else its CPU
/// default; each default falls back to the CPU one when the manifest has none.
fn recognizer_default<'a>(manifest: &'a Manifest, chosen: Option<&'a str>, gpu: bool, avx512: bool) -> (&'a str, RecognizerSource) {
    let d = &manifest.defaults;
    match (chosen, gpu, avx512) {
        (Some(r), _, _) => (r, RecognizerSource::Option),
        (None, true, _) if d.recognizer_gpu.is_some() => (d.recognizer_gpu.as_deref().unwrap_or(&d.recognizer), RecognizerSource::GpuDefault),
        (None, false, true) if d.recognizer_avx512.is_some() => (d.recognizer_avx512.as_deref().unwrap_or(&d.recognizer), RecognizerSource::Avx512Default),
        _ => (&d.recognizer, RecognizerSource::CpuDefault),
    }
}

// Telemetry slots: a model's position in `EngineInfo::models`, as `ModelChoice::loaded` lists
// them: detector, the recognisers, attribute models, emotion.
pub(super) const TELEMETRY_DETECTOR: u16 = 0;
/// The first recogniser's slot; the others follow it.
pub(super) const TELEMETRY_RECOGNIZER: u16 = 1;

/// Where age (or gender) comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum AttributeSource {
    /// The recogniser's own head (FaceRes), from the recogniser run.
    Recognizer,
    /// The face worker's attribute model at this index.
    Model(usize),
}

/// Resolves one attribute's model id to its source, adding the model to `models` (with what it
/// is asked for: age, gender) unless the recogniser or an earlier entry already gives it.
fn attribute_source(
    manifest: &Manifest,
    id: &str,
    recognizer_id: &str,
    age: bool,
    models: &mut Vec<(ModelEntry, (bool, bool))>,
) -> Result<AttributeSource> {
    if id == recognizer_id {
        return Ok(AttributeSource::Recognizer);
    }
    let k = match models.iter().position(|(e, _)| e.id == id) {
        Some(k) => k,
        None => {
            models.push((manifest.get(id)?.clone(), (false, false)));
            models.len() - 1
        }
    };
    let (wants_age, wants_gender) = &mut models[k].1;
    if age {
        *wants_age = true;
    } else {
        *wants_gender = true;
    }
    Ok(AttributeSource::Model(k))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::Defaults;

    fn manifest(avx512: Option<&str>, gpu: Option<&str>) -> Manifest {
        let defaults = Defaults {
            detector: "yunet".into(),
            recognizer: "sface:mirror".into(),
            recognizer_avx512: avx512.map(String::from),
            recognizer_gpu: gpu.map(String::from),
            emotion: None,
            age_gender: None,
            age: None,
            gender: None,
        };
        Manifest { version: 1, defaults, models: Vec::new(), recognizer_modes: Default::default() }
    }

    #[test]
    fn the_recogniser_follows_the_option_then_the_provider_then_the_processor() {
        let m = manifest(Some("accurate"), Some("gpu-mode"));
        assert_eq!(recognizer_default(&m, Some("sface"), true, true), ("sface", RecognizerSource::Option));
        assert_eq!(recognizer_default(&m, None, true, false), ("gpu-mode", RecognizerSource::GpuDefault));
        assert_eq!(recognizer_default(&m, None, true, true), ("gpu-mode", RecognizerSource::GpuDefault));
        assert_eq!(recognizer_default(&m, None, false, true), ("accurate", RecognizerSource::Avx512Default));
        assert_eq!(recognizer_default(&m, None, false, false), ("sface:mirror", RecognizerSource::CpuDefault));
        // A manifest without the provider's or processor's default falls back to the CPU one.
        let plain = manifest(None, None);
        assert_eq!(recognizer_default(&plain, None, true, true), ("sface:mirror", RecognizerSource::CpuDefault));
        assert_eq!(recognizer_default(&plain, None, false, true), ("sface:mirror", RecognizerSource::CpuDefault));
    }
}
