//! Face embeddings (and, from models that also predict them, age and gender).
//!
//! A recogniser turns an aligned face crop into a vector; two crops of the same person give
//! vectors pointing the same way. Vectors are L2-normalised here so that a dot product is the
//! cosine similarity everywhere downstream, whatever the model's own output scale.
//!
//! The embedding the service stores may come from more than one recogniser run
//! ([`RecognizerSpec`]): a model's crop and its mirror image, summed, and several models'
//! normalised embeddings concatenated. One vector per face keeps storage, shards and SIMD
//! matching as they are for a single model.

use crate::attributes::{decode_age, decode_gender, Gender};
use crate::error::{EngineError, Result};
use crate::manifest::{InputSpec, ModelEntry};
use crate::runtime::{self, ModelSession, Output, ProviderReport, SessionSource};
use crate::simd;
use crate::telemetry::Telemetry;

/// Most recognisers one spec may combine.
const MAX_PARTS: usize = 4;

/// One recogniser run of a spec: a manifest model, and whether its crop's mirror image is
/// embedded too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecPart {
    pub id: String,
    pub mirror: bool,
}

/// Which recognisers make a face's embedding: `id[:mirror]` parts joined by `+`
/// (`sface`, `sface:mirror`, `sface:mirror+dlib-resnet`), or a name the manifest gives such a
/// spec (`accurate`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecognizerSpec {
    pub parts: Vec<SpecPart>,
}

impl RecognizerSpec {
    /// Parses `text`, resolving a named mode through `modes` first. Fails with BAD_PARAM on an
    /// empty part, an unknown suffix, a model named twice or more than [`MAX_PARTS`] parts;
    /// whether the models exist is the manifest's to say.
    pub fn parse(text: &str, modes: &std::collections::HashMap<String, String>) -> Result<RecognizerSpec> {
        let text = modes.get(text).map_or(text, String::as_str);
        let bad = |why: String| EngineError::BadParam(format!("recognizer {text:?}: {why}"));
        let mut parts: Vec<SpecPart> = Vec::new();
        for raw in text.split('+') {
            let (id, mirror) = match raw.split_once(':') {
                None => (raw, false),
                Some((id, "mirror")) => (id, true),
                Some((_, suffix)) => return Err(bad(format!("unknown option {suffix:?} (only \"mirror\")"))),
            };
            if id.is_empty() {
                return Err(bad("empty model id".into()));
            }
            if parts.iter().any(|p| p.id == id) {
                return Err(bad(format!("model {id} named twice")));
            }
            parts.push(SpecPart { id: id.to_string(), mirror });
        }
        if parts.len() > MAX_PARTS {
            return Err(bad(format!("at most {MAX_PARTS} models")));
        }
        Ok(RecognizerSpec { parts })
    }

    /// The spec written out in full, as stored faces record it: two specs that embed alike
    /// have the same name.
    pub fn name(&self) -> String {
        self.parts.iter().map(|p| if p.mirror { format!("{}:mirror", p.id) } else { p.id.clone() }).collect::<Vec<_>>().join("+")
    }
}

/// Flips an RGB8 crop `width` pixels wide left to right.
pub fn mirror_rgb(crop: &[u8], width: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(crop.len());
    for row in crop.chunks_exact(width * 3) {
        out.extend(row.chunks_exact(3).rev().flatten());
    }
    out
}

/// One unit vector from the parts' unit embeddings: concatenated and scaled by 1/sqrt(parts),
/// so the dot product of two such vectors is the mean of the parts' cosine similarities.
pub fn concat_normalized(parts: &[&[f32]]) -> Vec<f32> {
    let k = 1.0 / (parts.len() as f32).sqrt();
    parts.iter().flat_map(|p| p.iter().map(move |x| x * k)).collect()
}

/// A crop's embedding and its mirror image's, summed and normalised again.
fn sum_normalized(a: &[f32], b: &[f32]) -> Vec<f32> {
    let mut v: Vec<f32> = a.iter().zip(b).map(|(x, y)| x + y).collect();
    simd::l2_normalize(&mut v);
    v
}

/// Every recogniser of a spec, loaded, owned by one worker thread.
pub struct RecognizerSet {
    parts: Vec<(Recognizer, bool)>,
}

impl RecognizerSet {
    /// Loads each part's model (see [`Recognizer::load`]); returns the provider report of each.
    pub fn load(src: &SessionSource, parts: &[(ModelEntry, bool)]) -> Result<(Self, Vec<ProviderReport>)> {
        let mut loaded = Vec::with_capacity(parts.len());
        let mut reports = Vec::with_capacity(parts.len());
        for (entry, mirror) in parts {
            let (r, report) = Recognizer::load(src, entry)?;
            if r.dim == 0 {
                return Err(EngineError::Model(format!("model {} gives no embedding", entry.id)));
            }
            loaded.push((r, *mirror));
            reports.push(report);
        }
        Ok((RecognizerSet { parts: loaded }, reports))
    }

    /// Length of the combined embedding.
    pub fn dim(&self) -> usize {
        self.parts.iter().map(|(r, _)| r.dim).sum()
    }

    /// Embeds faces: `crops[k][i]` is face `i`'s crop for part `k`. Each part runs once over
    /// all faces, a mirrored part with the mirror images as extra rows of the same batches;
    /// part `k`'s runs are counted under telemetry slot `first_slot + k`. Age and gender come
    /// from the first part's own crops.
    pub fn run(&mut self, crops: &[Vec<&[u8]>], telemetry: &Telemetry, first_slot: u16) -> Result<Vec<FaceVector>> {
        let faces = crops.first().map_or(0, Vec::len);
        let mut out: Vec<FaceVector> = Vec::new();
        let mut embeddings: Vec<Vec<Vec<f32>>> = Vec::with_capacity(self.parts.len());
        for (k, (model, mirror)) in self.parts.iter_mut().enumerate() {
            let part = &crops[k];
            let mirrored: Vec<Vec<u8>> = if *mirror { part.iter().map(|c| mirror_rgb(c, model.input.width as usize)).collect() } else { Vec::new() };
            let rows: Vec<&[u8]> = part.iter().copied().chain(mirrored.iter().map(Vec::as_slice)).collect();
            let mut vectors = telemetry.timed(first_slot + k as u16, rows.len(), || model.run(&rows))?;
            if vectors.len() != rows.len() {
                return Err(EngineError::Model(format!("model {} returned {} rows for {}", model.id, vectors.len(), rows.len())));
            }
            let flipped = vectors.split_off(faces);
            let part_embeddings = vectors
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    let e = v.embedding.as_deref().unwrap_or_default();
                    match flipped.get(i).and_then(|f| f.embedding.as_deref()) {
                        Some(m) => sum_normalized(e, m),
                        None => e.to_vec(),
                    }
                })
                .collect();
            embeddings.push(part_embeddings);
            if k == 0 {
                out = vectors;
            }
        }
        for (i, face) in out.iter_mut().enumerate() {
            let parts: Vec<&[f32]> = embeddings.iter().map(|p| p[i].as_slice()).collect();
            face.embedding = Some(if parts.len() == 1 { parts[0].to_vec() } else { concat_normalized(&parts) });
        }
        Ok(out)
    }
}

/// What one face crop yields.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FaceVector {
    pub embedding: Option<Vec<f32>>,
    pub age: Option<f32>,
    pub gender: Option<Gender>,
}

/// Which output holds what, resolved once from the manifest and the first run's shapes.
#[derive(Debug, Clone, Default)]
struct OutputMap {
    embedding: Option<String>,
    age: Option<String>,
    gender: Option<String>,
}

/// A session for a recognition-type model, owned by one worker thread.
pub struct Recognizer {
    session: ModelSession,
    pub input: InputSpec,
    pub id: String,
    outputs: OutputMap,
    max_batch: usize,
    /// The batch sizes it runs at, with fixed shapes.
    batch_sizes: Option<Vec<usize>>,
    /// Embedding length, known after the warm-up run.
    pub dim: usize,
}

impl Recognizer {
    /// Loads the model and runs one blank crop through it to learn the output layout (and to
    /// pay the first-run cost at start-up rather than on the first request).
    pub fn load(src: &SessionSource, entry: &ModelEntry) -> Result<(Self, ProviderReport)> {
        let (session, report) = src.session(entry)?;
        let named = |keys: &[&str]| keys.iter().find_map(|k| entry.output(k)).map(str::to_string);
        let outputs = OutputMap {
            embedding: named(&["embedding", "descriptor", "embeddings"]),
            age: named(&["age"]),
            gender: named(&["gender"]),
        };
        let max_batch = if entry.input.dynamic_batch { src.max_batch.max(1) } else { 1 };
        let batch_sizes = src.batch_sizes(max_batch);
        let mut r = Recognizer { session, input: entry.input.clone(), id: entry.id.clone(), outputs, max_batch, batch_sizes, dim: 0 };
        let blank = vec![128u8; (entry.input.width * entry.input.height * 3) as usize];
        let out = r.run(&[&blank[..]])?;
        r.dim = out[0].embedding.as_ref().map_or(0, Vec::len);
        Ok((r, report))
    }

    /// Runs crops (RGB8 at the model's input size) in batches of at most `max_batch`. With
    /// fixed shapes (see [`SessionSource::batch_sizes`]) a batch runs at the next batch size,
    /// padded with copies of its first crop, and the padding's rows are dropped.
    pub fn run(&mut self, crops: &[&[u8]]) -> Result<Vec<FaceVector>> {
        let mut all = Vec::with_capacity(crops.len());
        for chunk in crops.chunks(self.max_batch) {
            let rows = self.batch_sizes.as_deref().map_or(chunk.len(), |s| crate::shapes::batch_for(chunk.len(), s));
            let outputs = runtime::run_crops(&mut self.session, &self.input, &crate::shapes::pad_rows(chunk, rows))?;
            self.resolve_outputs(&outputs);
            let mut vectors = self.split(&outputs, rows)?;
            vectors.truncate(chunk.len());
            all.extend(vectors);
        }
        Ok(all)
    }

    /// Fills in outputs the manifest did not name, by shape: one value per face is gender, 100
    /// is the age distribution, the widest remaining one is the embedding.
    fn resolve_outputs(&mut self, outputs: &[Output]) {
        let cols = |o: &Output| o.shape.iter().skip(1).product::<i64>();
        if self.outputs.gender.is_none() {
            self.outputs.gender = outputs.iter().find(|o| cols(o) == 1).map(|o| o.name.clone());
        }
        if self.outputs.age.is_none() {
            self.outputs.age = outputs.iter().find(|o| cols(o) == 100).map(|o| o.name.clone());
        }
        if self.outputs.embedding.is_none() {
            let taken = [self.outputs.gender.clone(), self.outputs.age.clone()];
            self.outputs.embedding = outputs
                .iter()
                .filter(|o| !taken.contains(&Some(o.name.clone())))
                .max_by_key(|o| cols(o))
                .map(|o| o.name.clone());
        }
    }

    fn split(&self, outputs: &[Output], batch: usize) -> Result<Vec<FaceVector>> {
        let find = |name: &Option<String>| -> Result<Option<&Output>> {
            match name {
                None => Ok(None),
                Some(n) => outputs
                    .iter()
                    .find(|o| &o.name == n)
                    .map(Some)
                    .ok_or_else(|| EngineError::Model(format!("model {} has no output {n:?}", self.id))),
            }
        };
        let rows = |o: &Output| -> Result<usize> {
            if !o.data.len().is_multiple_of(batch) {
                return Err(EngineError::Model(format!("model {}: output {} does not split into {batch} rows", self.id, o.name)));
            }
            Ok(o.data.len() / batch)
        };
        let emb = find(&self.outputs.embedding)?;
        let age = find(&self.outputs.age)?;
        let gender = find(&self.outputs.gender)?;
        let mut out = Vec::with_capacity(batch);
        for i in 0..batch {
            let mut v = FaceVector::default();
            if let Some(o) = emb {
                let n = rows(o)?;
                let mut e = o.data[i * n..(i + 1) * n].to_vec();
                simd::l2_normalize(&mut e);
                v.embedding = Some(e);
            }
            if let Some(o) = age {
                let n = rows(o)?;
                v.age = decode_age(&o.data[i * n..(i + 1) * n]);
            }
            if let Some(o) = gender {
                let n = rows(o)?;
                v.gender = decode_gender(&o.data[i * n..(i + 1) * n]);
            }
            out.push(v);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn modes() -> HashMap<String, String> {
        HashMap::from([("accurate".to_string(), "sface:mirror+dlib-resnet".to_string())])
    }

    #[test]
    fn parses_specs_and_names_them_in_full() {
        let one = RecognizerSpec::parse("sface", &modes()).unwrap();
        assert_eq!(one.parts, vec![SpecPart { id: "sface".into(), mirror: false }]);
        assert_eq!(one.name(), "sface");
        let accurate = RecognizerSpec::parse("accurate", &modes()).unwrap();
        assert_eq!(accurate.name(), "sface:mirror+dlib-resnet");
        assert_eq!(accurate, RecognizerSpec::parse("sface:mirror+dlib-resnet", &modes()).unwrap());
        assert!(accurate.parts[0].mirror && !accurate.parts[1].mirror);
    }

    #[test]
    fn refuses_malformed_specs() {
        for bad in ["", "sface+", "+sface", "sface:flip", "sface+sface:mirror", "a+b+c+d+e", ":mirror"] {
            let e = RecognizerSpec::parse(bad, &modes()).unwrap_err();
            assert_eq!(e.code(), "BAD_PARAM", "{bad:?}: {e}");
        }
    }

    #[test]
    fn mirrors_rows_pixel_by_pixel() {
        // Two rows of three RGB pixels.
        let crop: Vec<u8> = (0..18).collect();
        let m = mirror_rgb(&crop, 3);
        assert_eq!(m, vec![6, 7, 8, 3, 4, 5, 0, 1, 2, 15, 16, 17, 12, 13, 14, 9, 10, 11]);
        assert_eq!(mirror_rgb(&m, 3), crop);
    }

    #[test]
    fn concatenation_scores_the_mean_of_the_parts_cosines() {
        let unit = |v: Vec<f32>| {
            let mut v = v;
            simd::l2_normalize(&mut v);
            v
        };
        let (a1, a2) = (unit(vec![1.0, 2.0, 3.0]), unit(vec![0.5, -1.0, 2.0, 1.0]));
        let (b1, b2) = (unit(vec![2.0, 1.0, 3.0]), unit(vec![1.0, 1.0, -1.0, 0.0]));
        let (a, b) = (concat_normalized(&[&a1, &a2]), concat_normalized(&[&b1, &b2]));
        let dot = |x: &[f32], y: &[f32]| x.iter().zip(y).map(|(p, q)| p * q).sum::<f32>();
        assert!((dot(&a, &a) - 1.0).abs() < 1e-6);
        assert!((dot(&a, &b) - (dot(&a1, &b1) + dot(&a2, &b2)) / 2.0).abs() < 1e-6);
    }

    #[test]
    fn a_mirrored_pair_sums_to_a_unit_vector() {
        let v = sum_normalized(&[1.0, 0.0], &[0.0, 1.0]);
        assert!((v[0] - std::f32::consts::FRAC_1_SQRT_2).abs() < 1e-6 && (v[0] - v[1]).abs() < 1e-6);
    }
}
