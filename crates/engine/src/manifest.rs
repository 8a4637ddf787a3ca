//! `models/manifest.json`: which converted models exist and how to feed them.
//!
//! The manifest is written by the model converter next to the `.onnx` files. The engine trusts
//! it for preprocessing facts (input size, colour, scale and offset) because those are not
//! recorded in the ONNX graph itself; output shapes it reads from the session instead.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::{EngineError, Result};

/// The whole manifest file.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    pub version: u32,
    pub defaults: Defaults,
    pub models: Vec<ModelEntry>,
    /// Named recogniser settings (`"accurate"`), each a recogniser spec as
    /// [`crate::recognizer::RecognizerSpec`] parses it.
    #[serde(default)]
    pub recognizer_modes: HashMap<String, String>,
}

/// Which model fills each role when the caller does not choose.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Defaults {
    pub detector: String,
    /// The recogniser spec used when the caller names none, no GPU provider is asked for and
    /// the processor lacks AVX-512.
    pub recognizer: String,
    /// The recogniser spec used when the caller names none, no GPU provider is asked for and
    /// the processor has AVX-512 (where ONNX Runtime runs the bigger mode at no more than twice
    /// SFace's cost through the API); absent: `recognizer`.
    #[serde(default)]
    pub recognizer_avx512: Option<String>,
    /// The recogniser spec used when the caller names none and asks for a GPU provider
    /// (TensorRT or CUDA); absent: `recognizer`.
    #[serde(default)]
    pub recognizer_gpu: Option<String>,
    #[serde(default)]
    pub emotion: Option<String>,
    /// Age and gender from one model (a recogniser with heads, or an age-gender model).
    #[serde(default)]
    pub age_gender: Option<String>,
    /// Age model; falls back to `age_gender`, then to the recogniser.
    #[serde(default)]
    pub age: Option<String>,
    /// Gender model; falls back to `age_gender`, then to the recogniser.
    #[serde(default)]
    pub gender: Option<String>,
}

/// What a model is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    Detector,
    Recognizer,
    Emotion,
    AgeGender,
    Age,
    Gender,
    /// Roles this engine does not use yet; kept so a newer manifest still loads.
    #[serde(other)]
    Other,
}

/// One converted model.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelEntry {
    pub id: String,
    pub role: Role,
    /// Path of the `.onnx` file relative to the manifest's folder.
    pub onnx: String,
    pub input: InputSpec,
    /// Semantic output name → ONNX output name.
    #[serde(default)]
    pub outputs: HashMap<String, String>,
    #[serde(default)]
    pub preprocess: Option<String>,
    /// Class labels in output order: the emotions of an emotion model, or the order of a
    /// two-way gender head ("female", "male"; `[male, female]` when absent).
    #[serde(default)]
    pub labels: Option<Vec<String>>,
    /// Age of each class of an age head: age = sum of probability x weight (the expected value).
    /// Absent: a 100-class head is read as one-year bins around its peak, a 7-class head by
    /// its bin centres.
    #[serde(default)]
    pub age_weights: Option<Vec<f32>>,
    #[serde(default)]
    pub source: serde_json::Value,
    /// Threshold suggested by the converter for detectors.
    #[serde(default)]
    pub score_threshold: Option<f32>,
    /// How a detector's outputs are decoded.
    #[serde(default)]
    pub decoder: Decoder,
    /// Where a recogniser expects the face's landmarks to sit in its input crop.
    #[serde(default)]
    pub alignment: Alignment,
    /// dlib chips only: the padding the model was trained with, as a fraction of the
    /// template's square on every edge (absent: dlib's default, 0.2).
    #[serde(default)]
    pub chip_padding: Option<f32>,
}

/// Detector output families.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Decoder {
    /// Anchor-relative SSD heads at a fixed square input (BlazeFace and its relatives).
    #[default]
    Blazeface,
    /// Anchor-free heads at strides 8, 16 and 32 over an input of any size (YuNet).
    Yunet,
}

/// Recogniser crop conventions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Alignment {
    /// A square around the detector box, enlarged, with the eyes levelled (FaceRes as published).
    #[default]
    Box,
    /// The five-point ArcFace template on a 112x112 crop (eyes, nose tip, mouth corners).
    Arcface,
    /// dlib's face chip (`get_face_chip_details` with the entry's `chipPadding`) from its
    /// five-point template, fitted to the eye centres (see [`crate::attributes::dlib_chip_eyes`]).
    DlibChip,
    /// dlib's face chip as above, fitted from all five YuNet points to a template measured
    /// against dlib's own landmarks (eye centres only without mouth corners).
    DlibChipFitted,
}

impl Alignment {
    /// Whether the crop is one of dlib's face chips.
    pub fn is_dlib_chip(self) -> bool {
        matches!(self, Alignment::DlibChip | Alignment::DlibChipFitted)
    }
}

/// Memory order of an image tensor.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub enum Layout {
    #[default]
    NHWC,
    NCHW,
}

/// How to build the input tensor: float32 with `value = (pixel - mean[channel]) * scale + offset`
/// (`mean` zero when absent), in the layout and channel order given.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InputSpec {
    pub name: String,
    pub height: u32,
    pub width: u32,
    pub channels: u32,
    #[serde(default)]
    pub layout: Layout,
    #[serde(default = "default_color")]
    pub color: Color,
    pub scale: f32,
    pub offset: f32,
    /// Per-channel value subtracted before scaling, in the tensor's channel order.
    #[serde(default)]
    pub mean: Option<[f32; 3]>,
    #[serde(default)]
    pub dynamic_batch: bool,
    /// Height and width may be any multiple of [`InputSpec::SIZE_MULTIPLE`]; `height` and
    /// `width` are then only the model's nominal size.
    #[serde(default)]
    pub dynamic_size: bool,
}

/// Channel content expected by a model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Color {
    Rgb,
    Bgr,
    Gray,
}

fn default_color() -> Color {
    Color::Rgb
}

impl Manifest {
    /// Reads and checks `<dir>/manifest.json`.
    pub fn load(dir: &Path) -> Result<Manifest> {
        let path = dir.join("manifest.json");
        let text = std::fs::read_to_string(&path)
            .map_err(|e| EngineError::Model(format!("cannot read {}: {e}", path.display())))?;
        let manifest = Self::parse(&text).map_err(|e| match e {
            EngineError::Model(m) => EngineError::Model(format!("{}: {m}", path.display())),
            other => other,
        })?;
        Ok(manifest)
    }

    /// Parses manifest text and checks the invariants the engine relies on.
    pub fn parse(text: &str) -> Result<Manifest> {
        let m: Manifest = serde_json::from_str(text).map_err(|e| EngineError::Model(format!("invalid manifest: {e}")))?;
        if m.version != 1 {
            return Err(EngineError::Model(format!("unsupported manifest version {}", m.version)));
        }
        for entry in &m.models {
            let i = &entry.input;
            let channels_ok = match i.color {
                Color::Gray => i.channels == 1,
                Color::Rgb | Color::Bgr => i.channels == 3,
            };
            if !channels_ok || i.width == 0 || i.height == 0 {
                return Err(EngineError::Model(format!("model {}: inconsistent input shape", entry.id)));
            }
            if i.mean.is_some() && i.channels != 3 {
                return Err(EngineError::Model(format!("model {}: per-channel means need 3 channels", entry.id)));
            }
        }
        Ok(m)
    }

    /// Looks a model up by id.
    pub fn get(&self, id: &str) -> Result<&ModelEntry> {
        self.models
            .iter()
            .find(|m| m.id == id)
            .ok_or_else(|| EngineError::Model(format!("model {id:?} is not in the manifest")))
    }

    /// Absolute path of a model's ONNX file.
    pub fn onnx_path(dir: &Path, entry: &ModelEntry) -> PathBuf {
        dir.join(&entry.onnx)
    }
}

impl InputSpec {
    /// Values per image in the input tensor.
    pub fn values_per_image(&self) -> usize {
        (self.width * self.height * self.channels) as usize
    }

    /// Sides of a dynamically sized input are multiples of this (the coarsest feature stride).
    pub const SIZE_MULTIPLE: u32 = 32;

    /// Appends one RGB8 image (row-major, `len / 3` pixels, at the model's input size or, for
    /// dynamic sizes, any size) to a float batch in the layout, colour order and value range
    /// this model expects. Gray uses the ITU-R 601 luma weights.
    pub fn push_image(&self, rgb: &[u8], out: &mut Vec<f32>) {
        debug_assert!(self.dynamic_size || rgb.len() == (self.width * self.height * 3) as usize);
        let (scale, offset) = (self.scale, self.offset);
        let mean = self.mean.unwrap_or([0.0; 3]);
        // Tensor channel k holds source channel order[k].
        let value = |k: usize, v: u8| (v as f32 - mean[k]) * scale + offset;
        let order: [usize; 3] = match self.color {
            Color::Bgr => [2, 1, 0],
            _ => [0, 1, 2],
        };
        match (self.color, self.layout) {
            (Color::Gray, _) => {
                for p in rgb.chunks_exact(3) {
                    let luma = 0.2989 * p[0] as f32 + 0.5870 * p[1] as f32 + 0.1140 * p[2] as f32;
                    out.push(luma * scale + offset);
                }
            }
            (_, Layout::NHWC) => {
                for p in rgb.chunks_exact(3) {
                    out.extend([0, 1, 2].map(|k| value(k, p[order[k]])));
                }
            }
            (_, Layout::NCHW) => {
                for (k, c) in order.into_iter().enumerate() {
                    out.extend(rgb.chunks_exact(3).map(|p| value(k, p[c])));
                }
            }
        }
    }

    /// Tensor shape of a batch of `batch` images of `height` x `width`.
    pub fn shape(&self, batch: usize, height: u32, width: u32) -> [i64; 4] {
        let (b, h, w, c) = (batch as i64, height as i64, width as i64, self.channels as i64);
        match self.layout {
            Layout::NHWC => [b, h, w, c],
            Layout::NCHW => [b, c, h, w],
        }
    }
}

impl ModelEntry {
    /// The ONNX output name recorded for a semantic name, if the converter recorded one.
    pub fn output(&self, semantic: &str) -> Option<&str> {
        self.outputs.get(semantic).map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = r#"{
      "version": 1,
      "defaults": { "detector": "blazeface-back", "recognizer": "faceres", "emotion": "emotion", "ageGender": "faceres" },
      "models": [
        { "id": "blazeface-back", "role": "detector",
          "source": { "package": "p", "version": "1", "graph": "g.json", "graphSha256": "00", "weights": ["g.bin"] },
          "onnx": "onnx/blazeface-back.onnx",
          "input": { "name": "input", "height": 256, "width": 256, "channels": 3, "layout": "NHWC", "color": "rgb", "scale": 0.0078431, "offset": -1.0, "dynamicBatch": false },
          "outputs": { "scores": "Identity:0" },
          "preprocess": "resize to 256x256" },
        { "id": "emotion", "role": "emotion", "onnx": "onnx/emotion.onnx",
          "input": { "name": "x", "height": 64, "width": 64, "channels": 1, "color": "gray", "scale": 0.0078431, "offset": -1.0, "dynamicBatch": true },
          "labels": ["angry", "disgust", "fear", "happy", "sad", "surprise", "neutral"] },
        { "id": "iris", "role": "landmarks", "onnx": "onnx/iris.onnx",
          "input": { "name": "x", "height": 64, "width": 64, "channels": 3, "scale": 1, "offset": 0 } }
      ]
    }"#;

    #[test]
    fn parses_the_converter_schema() {
        let m = Manifest::parse(SAMPLE).unwrap();
        assert_eq!(m.defaults.age_gender.as_deref(), Some("faceres"));
        let det = m.get("blazeface-back").unwrap();
        assert_eq!(det.role, Role::Detector);
        assert_eq!(det.input.width, 256);
        assert_eq!(det.output("scores"), Some("Identity:0"));
        let emo = m.get("emotion").unwrap();
        assert_eq!(emo.input.color, Color::Gray);
        assert!(emo.input.dynamic_batch);
        assert_eq!(emo.labels.as_ref().unwrap().len(), 7);
        assert_eq!(m.get("iris").unwrap().role, Role::Other);
        assert_eq!(m.get("nope").unwrap_err().code(), "MODEL");
    }

    #[test]
    fn pushes_pixels_in_model_order() {
        let m = Manifest::parse(SAMPLE).unwrap();
        let det = &m.get("blazeface-back").unwrap().input;
        let mut out = Vec::new();
        det.push_image(&[0, 255, 128], &mut out);
        assert!((out[0] + 1.0).abs() < 1e-6 && (out[1] - 1.0).abs() < 1e-4);
        let emo = &m.get("emotion").unwrap().input;
        let mut out = Vec::new();
        emo.push_image(&[255, 255, 255, 0, 0, 0], &mut out);
        assert_eq!(out.len(), 2);
        assert!((out[0] - 1.0).abs() < 1e-3 && (out[1] + 1.0).abs() < 1e-6);
    }

    #[test]
    fn pushes_planar_bgr() {
        let spec = InputSpec {
            name: "x".into(),
            height: 1,
            width: 2,
            channels: 3,
            layout: Layout::NCHW,
            color: Color::Bgr,
            scale: 1.0,
            offset: 0.0,
            mean: None,
            dynamic_batch: false,
            dynamic_size: false,
        };
        let mut out = Vec::new();
        spec.push_image(&[1, 2, 3, 4, 5, 6], &mut out);
        assert_eq!(out, vec![3.0, 6.0, 2.0, 5.0, 1.0, 4.0]);
        assert_eq!(spec.shape(2, 1, 2), [2, 3, 1, 2]);
    }

    #[test]
    fn subtracts_per_channel_means() {
        // dlib's convention: (byte - mean) / 256, planar RGB.
        let spec = InputSpec {
            name: "images".into(),
            height: 1,
            width: 2,
            channels: 3,
            layout: Layout::NCHW,
            color: Color::Rgb,
            scale: 1.0 / 256.0,
            offset: 0.0,
            mean: Some([100.0, 50.0, 10.0]),
            dynamic_batch: true,
            dynamic_size: false,
        };
        let mut out = Vec::new();
        spec.push_image(&[100, 50, 10, 228, 178, 138], &mut out);
        assert_eq!(out, vec![0.0, 0.5, 0.0, 0.5, 0.0, 0.5]);
        // Channel-last models get the same means per pixel.
        let nhwc = InputSpec { layout: Layout::NHWC, ..spec };
        let mut out = Vec::new();
        nhwc.push_image(&[100, 50, 10, 228, 178, 138], &mut out);
        assert_eq!(out, vec![0.0, 0.0, 0.0, 0.5, 0.5, 0.5]);
        let gray = SAMPLE.replace(r#""scale": 0.0078431, "offset": -1.0, "dynamicBatch": true }"#, r#""scale": 1, "offset": 0, "mean": [1, 2, 3], "dynamicBatch": true }"#);
        assert_eq!(Manifest::parse(&gray).unwrap_err().code(), "MODEL");
    }

    #[test]
    fn rejects_inconsistent_inputs() {
        let bad = SAMPLE.replace("\"channels\": 1, \"color\": \"gray\"", "\"channels\": 3, \"color\": \"gray\"");
        assert_eq!(Manifest::parse(&bad).unwrap_err().code(), "MODEL");
        assert_eq!(Manifest::parse("{").unwrap_err().code(), "MODEL");
    }
}
