//! Face embeddings (and, from models that also predict them, age and gender).
//!
//! A recogniser turns an aligned face crop into a vector; two crops of the same person give
//! vectors pointing the same way. Vectors are L2-normalised here so that a dot product is the
//! cosine similarity everywhere downstream, whatever the model's own output scale.

use std::path::Path;

use ort::session::Session;

use crate::attributes::{decode_age, decode_gender, Gender};
use crate::error::{EngineError, Result};
use crate::manifest::{InputSpec, ModelEntry};
use crate::runtime::{self, Output, Provider, ProviderReport, Runtime};
use crate::simd;

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
    session: Session,
    pub input: InputSpec,
    pub id: String,
    outputs: OutputMap,
    max_batch: usize,
    /// Embedding length, known after the warm-up run.
    pub dim: usize,
}

impl Recognizer {
    /// Loads the model and runs one blank crop through it to learn the output layout (and to
    /// pay the first-run cost at start-up rather than on the first request).
    pub fn load(rt: &Runtime, dir: &Path, entry: &ModelEntry, providers: &[Provider], intra: usize, max_batch: usize) -> Result<(Self, ProviderReport)> {
        let (session, report) = rt.session(&crate::manifest::Manifest::onnx_path(dir, entry), providers, intra)?;
        let named = |keys: &[&str]| keys.iter().find_map(|k| entry.output(k)).map(str::to_string);
        let outputs = OutputMap {
            embedding: named(&["embedding", "descriptor", "embeddings"]),
            age: named(&["age"]),
            gender: named(&["gender"]),
        };
        let max_batch = if entry.input.dynamic_batch { max_batch.max(1) } else { 1 };
        let mut r = Recognizer { session, input: entry.input.clone(), id: entry.id.clone(), outputs, max_batch, dim: 0 };
        let blank = vec![128u8; (entry.input.width * entry.input.height * 3) as usize];
        let out = r.run(&[&blank[..]])?;
        r.dim = out[0].embedding.as_ref().map_or(0, Vec::len);
        Ok((r, report))
    }

    /// Runs crops (RGB8 at the model's input size) in batches of at most `max_batch`.
    pub fn run(&mut self, crops: &[&[u8]]) -> Result<Vec<FaceVector>> {
        let mut all = Vec::with_capacity(crops.len());
        for chunk in crops.chunks(self.max_batch) {
            let outputs = runtime::run_crops(&mut self.session, &self.input, chunk)?;
            self.resolve_outputs(&outputs);
            all.extend(self.split(&outputs, chunk.len())?);
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
