//! The photos the bench runs on: the demo photos, the same photos as 12 MP phone photos built
//! here (nothing that large travels with a pack), and the labelled dev set.

use std::io::Cursor;
use std::path::Path;

use image::codecs::jpeg::JpegEncoder;
use image::imageops::{self, FilterType};
use image::{Rgb, RgbImage};
use serde::Deserialize;

/// The photo a fresh process answers first.
pub const FIRST_PHOTO: &str = "sample1.jpg";
/// The demo photos: six, with 3 to 5 faces each.
const DEMO: [&str; 6] = ["sample1.jpg", "sample2.jpg", "sample3.jpg", "sample4.jpg", "sample5.jpg", "sample6.jpg"];
/// A phone photo's frame, and the share of its width and height the photo may take.
const PHONE_FRAME: (u32, u32) = (4000, 3000);
const FILL: f64 = 0.9;
/// What a phone encodes at.
const JPEG_QUALITY: u8 = 90;

pub fn read(file: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(file).map_err(|e| format!("cannot read {}: {e}", file.display()))
}

pub fn demo(dir: &Path) -> Result<Vec<Vec<u8>>, String> {
    DEMO.iter().map(|name| read(&dir.join(name))).collect()
}

/// `photo` scaled to fill most of a 4000x3000 frame (bilinear), centred on a noisy grey
/// background so the JPEG is not trivially compressible, encoded at quality 90.
pub fn phone_photo(photo: &[u8]) -> Result<Vec<u8>, String> {
    let src = image::load_from_memory(photo).map_err(|e| format!("cannot decode a demo photo: {e}"))?.to_rgb8();
    let (width, height) = PHONE_FRAME;
    let scale = (f64::from(width) * FILL / f64::from(src.width())).min(f64::from(height) * FILL / f64::from(src.height()));
    let (w, h) = ((f64::from(src.width()) * scale).round() as u32, (f64::from(src.height()) * scale).round() as u32);
    let scaled = imageops::resize(&src, w, h, FilterType::Triangle);
    let mut seed: u32 = 12345;
    let mut frame = RgbImage::from_fn(width, height, |_, _| {
        seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12345);
        let v = 110 + ((seed >> 16) % 36) as u8;
        Rgb([v, v, v])
    });
    imageops::replace(&mut frame, &scaled, i64::from((width - w) / 2), i64::from((height - h) / 2));
    let mut out = Cursor::new(Vec::new());
    JpegEncoder::new_with_quality(&mut out, JPEG_QUALITY).encode_image(&frame).map_err(|e| format!("cannot encode a 12 MP photo: {e}"))?;
    Ok(out.into_inner())
}

/// One photo of the dev set's `labels.json`.
#[derive(Debug, Deserialize)]
struct Label {
    file: String,
    identities: Vec<String>,
    faces: Option<u32>,
}

/// A photo of one labelled person with one face.
pub struct Labelled {
    pub file: String,
    pub person: String,
    pub bytes: Vec<u8>,
}

/// The labelled dev set.
pub struct DevSet {
    /// Its photos of one person with one face: the embedding comparison.
    pub labelled: Vec<Labelled>,
    /// All its photos: the detection comparison.
    pub photos: Vec<Vec<u8>>,
}

/// The dev set in `dir`; None when the folder has no `labels.json`.
pub fn dev_set(dir: &Path) -> Result<Option<DevSet>, String> {
    let file = dir.join("labels.json");
    if !file.exists() {
        return Ok(None);
    }
    let labels: Vec<Label> = serde_json::from_slice(&read(&file)?).map_err(|e| format!("{}: {e}", file.display()))?;
    let mut single = Vec::new();
    let mut all = Vec::new();
    for l in labels {
        let bytes = read(&dir.join(&l.file))?;
        if l.identities.len() == 1 && l.faces == Some(1) {
            single.push(Labelled { file: l.file, person: l.identities[0].clone(), bytes: bytes.clone() });
        }
        all.push(bytes);
    }
    Ok(Some(DevSet { labelled: single, photos: all }))
}
