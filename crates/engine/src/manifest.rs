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
pub struct Manifest {
    pub version: u32,
    pub defaults: Defaults,
    pub models: Vec<ModelEntry>,
}

/// Which model fills each role when the caller does not choose.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Defaults {
    pub detector: String,
    pub recognizer: String,
    #[serde(default)]
    pub emotion: Option<String>,
    #[serde(default)]
    pub age_gender: Option<String>,
}

/// What a model is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    Detector,
    Recognizer,
    Emotion,
    AgeGender,
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
    #[serde(default)]
    pub labels: Option<Vec<String>>,
    #[serde(default)]
    pub source: serde_json::Value,
    /// Threshold suggested by the converter for detectors.
    #[serde(default)]
    pub score_threshold: Option<f32>,
}

/// How to build the input tensor: NHWC float32 with `value = pixel * scale + offset`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InputSpec {
    pub name: String,
    pub height: u32,
    pub width: u32,
    pub channels: u32,
    #[serde(default = "default_layout")]
    pub layout: String,
    #[serde(default = "default_color")]
    pub color: Color,
    pub scale: f32,
    pub offset: f32,
    #[serde(default)]
    pub dynamic_batch: bool,
}

/// Channel content expected by a model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Color {
    Rgb,
    Bgr,
    Gray,
}

fn default_layout() -> String {
    "NHWC".into()
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
            if i.layout != "NHWC" {
                return Err(EngineError::Model(format!("model {}: only NHWC inputs are supported", entry.id)));
            }
            let channels_ok = match i.color {
                Color::Gray => i.channels == 1,
                Color::Rgb | Color::Bgr => i.channels == 3,
            };
            if !channels_ok || i.width == 0 || i.height == 0 {
                return Err(EngineError::Model(format!("model {}: inconsistent input shape", entry.id)));
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

    /// Appends one image (RGB8, `width` x `height`, row-major) to a NHWC float batch in the
    /// colour order and value range this model expects. Gray uses the ITU-R 601 luma weights.
    pub fn push_image(&self, rgb: &[u8], out: &mut Vec<f32>) {
        debug_assert_eq!(rgb.len(), (self.width * self.height * 3) as usize);
        let (scale, offset) = (self.scale, self.offset);
        match self.color {
            Color::Rgb => out.extend(rgb.iter().map(|&v| v as f32 * scale + offset)),
            Color::Bgr => {
                for p in rgb.chunks_exact(3) {
                    out.extend([p[2], p[1], p[0]].iter().map(|&v| v as f32 * scale + offset));
                }
            }
            Color::Gray => {
                for p in rgb.chunks_exact(3) {
                    let luma = 0.2989 * p[0] as f32 + 0.5870 * p[1] as f32 + 0.1140 * p[2] as f32;
                    out.push(luma * scale + offset);
                }
            }
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
    fn rejects_inconsistent_inputs() {
        let bad = SAMPLE.replace("\"channels\": 1, \"color\": \"gray\"", "\"channels\": 3, \"color\": \"gray\"");
        assert_eq!(Manifest::parse(&bad).unwrap_err().code(), "MODEL");
        assert_eq!(Manifest::parse("{").unwrap_err().code(), "MODEL");
    }
}
