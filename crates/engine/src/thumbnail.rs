//! Small JPEG crops of faces, kept with camera sightings so that a history record can be shown
//! without the (often unstored) camera frame.

use image::codecs::jpeg::JpegEncoder;
use image::imageops;
use image::RgbImage;

use crate::error::{EngineError, Result};

/// Extra context around the face box on every side, as a fraction of the box side: enough to
/// show hair and chin, which is what a person checking a sighting recognises.
const MARGIN: f32 = 0.25;

/// JPEG quality: thumbnails are looked at, not analysed, and are kept for every sighting.
const QUALITY: u8 = 85;

/// The face box widened by [`MARGIN`], clipped to the image, scaled so that its longer side is at
/// most `max_side` (never enlarged), as JPEG bytes.
pub fn face_thumbnail(img: &RgbImage, b: [i32; 4], max_side: u32) -> Result<Vec<u8>> {
    if max_side == 0 {
        return Err(EngineError::BadParam("thumbnail size must be at least 1 pixel".into()));
    }
    let (w, h) = img.dimensions();
    let [x1, y1, x2, y2] = b;
    let (bw, bh) = ((x2 - x1).max(1) as f32, (y2 - y1).max(1) as f32);
    let clip = |v: f32, hi: u32| (v.round() as i64).clamp(0, hi as i64) as u32;
    let left = clip(x1 as f32 - MARGIN * bw, w);
    let top = clip(y1 as f32 - MARGIN * bh, h);
    let right = clip(x2 as f32 + MARGIN * bw, w).max(left + 1).min(w);
    let bottom = clip(y2 as f32 + MARGIN * bh, h).max(top + 1).min(h);
    if left >= right || top >= bottom {
        return Err(EngineError::BadParam(format!("face box {b:?} lies outside the {w}x{h} image")));
    }
    let (cw, ch) = (right - left, bottom - top);
    let scale = (max_side as f32 / cw.max(ch) as f32).min(1.0);
    let sized = if scale < 1.0 {
        let tw = ((cw as f32 * scale).round() as u32).max(1);
        let th = ((ch as f32 * scale).round() as u32).max(1);
        crate::align::resize_region(img, [left as f64, top as f64, cw as f64, ch as f64], tw, th)
    } else {
        imageops::crop_imm(img, left, top, cw, ch).to_image()
    };
    let mut out = Vec::with_capacity(8 << 10);
    JpegEncoder::new_with_quality(&mut out, QUALITY)
        .encode_image(&sized)
        .map_err(|e| EngineError::Internal(format!("thumbnail encoding failed: {e}")))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use image::{ImageReader, Rgb};
    use std::io::Cursor;

    fn decode(bytes: &[u8]) -> RgbImage {
        ImageReader::new(Cursor::new(bytes)).with_guessed_format().unwrap().decode().unwrap().into_rgb8()
    }

    #[test]
    fn crop_is_the_box_with_margin_scaled_to_the_limit() {
        let img = RgbImage::from_pixel(1000, 800, Rgb([10, 200, 30]));
        let jpeg = face_thumbnail(&img, [400, 300, 600, 500], 100).unwrap();
        assert_eq!(&jpeg[..2], &[0xFF, 0xD8]);
        // 200x200 box + 25% each side = 300x300, scaled to 100.
        assert_eq!(decode(&jpeg).dimensions(), (100, 100));
    }

    #[test]
    fn margin_is_clipped_at_the_border_and_small_crops_are_not_enlarged() {
        let img = RgbImage::from_pixel(120, 90, Rgb([255, 255, 255]));
        let thumb = decode(&face_thumbnail(&img, [0, 10, 40, 50], 160).unwrap());
        // Left margin clipped at 0: x 0..50, y 0..60.
        assert_eq!(thumb.dimensions(), (50, 60));
    }

    #[test]
    fn keeps_the_aspect_ratio() {
        let img = RgbImage::from_pixel(2000, 2000, Rgb([0, 0, 0]));
        let thumb = decode(&face_thumbnail(&img, [100, 100, 500, 900], 160).unwrap());
        // 400x800 box + margins, clipped at the top: 600x1100, scaled to 160 high.
        assert_eq!(thumb.dimensions(), (87, 160));
    }

    #[test]
    fn a_box_outside_the_image_is_refused() {
        let img = RgbImage::new(50, 50);
        assert!(matches!(face_thumbnail(&img, [500, 500, 600, 600], 64), Err(EngineError::BadParam(_))));
        assert!(matches!(face_thumbnail(&img, [0, 0, 10, 10], 0), Err(EngineError::BadParam(_))));
    }
}
