//! Turning uploaded bytes into an upright RGB image.
//!
//! The format is decided by magic bytes, never by a file name or content type the client sent.
//! The pixel count is read from the header and checked before any pixel buffer is allocated, so
//! a small file announcing a huge image ("decompression bomb") is refused cheaply. EXIF
//! orientation is applied so every coordinate the engine reports refers to the image as a
//! person would see it.

use std::io::Cursor;

use image::{DynamicImage, ImageDecoder, ImageFormat, ImageReader, RgbImage};

use crate::error::{EngineError, Result};

/// Formats the engine accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Jpeg,
    Png,
    WebP,
}

impl Format {
    fn image_format(self) -> ImageFormat {
        match self {
            Format::Jpeg => ImageFormat::Jpeg,
            Format::Png => ImageFormat::Png,
            Format::WebP => ImageFormat::WebP,
        }
    }
}

const JPEG_MAGIC: &[u8] = &[0xFF, 0xD8, 0xFF];
const PNG_MAGIC: &[u8] = &[0x89, b'P', b'N', b'G', 0x0D, 0x0A, 0x1A, 0x0A];

/// Identifies the format from the first bytes.
///
/// Empty input, or input too short to finish a known signature it starts, is reported as
/// corrupt rather than unsupported: it is most likely a truncated upload of a real image.
pub fn sniff(bytes: &[u8]) -> Result<Format> {
    if bytes.is_empty() {
        return Err(EngineError::ImageCorrupt("empty input".into()));
    }
    if bytes.starts_with(JPEG_MAGIC) {
        return Ok(Format::Jpeg);
    }
    if bytes.starts_with(PNG_MAGIC) {
        return Ok(Format::Png);
    }
    if bytes.len() >= 12 && &bytes[0..4] == b"RIFF" && &bytes[8..12] == b"WEBP" {
        return Ok(Format::WebP);
    }
    let is_prefix_of = |magic: &[u8]| bytes.len() < magic.len() && magic.starts_with(bytes);
    let riff_prefix = bytes.len() < 12 && (b"RIFF".starts_with(&bytes[..bytes.len().min(4)]))
        && (bytes.len() <= 8 || b"WEBP".starts_with(&bytes[8..]));
    if is_prefix_of(JPEG_MAGIC) || is_prefix_of(PNG_MAGIC) || riff_prefix {
        return Err(EngineError::ImageCorrupt("input ends inside the file signature".into()));
    }
    Err(EngineError::ImageUnsupported)
}

/// Width and height as stored (before EXIF rotation), read from the header only.
pub fn header_dimensions(bytes: &[u8], format: Format) -> Result<(u32, u32)> {
    ImageReader::with_format(Cursor::new(bytes), format.image_format())
        .into_dimensions()
        .map_err(|e| EngineError::ImageCorrupt(e.to_string()))
}

/// Whether a JPEG stream reaches its end-of-image marker after the first scan.
///
/// Header segments are skipped by their lengths (an EXIF thumbnail carries its own end marker,
/// which must not count); inside entropy-coded data a 0xFF byte is always followed by 0x00 or a
/// restart marker, so the first `FF D9` after the scan starts is the real end.
pub fn jpeg_has_end(bytes: &[u8]) -> bool {
    let mut i = 2; // after SOI
    while i + 4 <= bytes.len() {
        if bytes[i] != 0xFF {
            return false;
        }
        let marker = bytes[i + 1];
        match marker {
            0xFF => i += 1, // fill byte
            0xD8 | 0x01 | 0xD0..=0xD7 => i += 2,
            0xD9 => return true,
            _ => {
                let len = u16::from_be_bytes([bytes[i + 2], bytes[i + 3]]) as usize;
                if marker == 0xDA {
                    let scan = i + 2 + len;
                    return scan <= bytes.len() && bytes[scan..].windows(2).any(|w| w == [0xFF, 0xD9]);
                }
                i += 2 + len;
            }
        }
    }
    false
}

/// A decoded, upright image.
#[derive(Debug)]
pub struct Decoded {
    pub format: Format,
    pub image: RgbImage,
}

/// Sniffs, checks the pixel limit, decodes and rotates upright.
pub fn decode(bytes: &[u8], max_pixels: u64) -> Result<Decoded> {
    let format = sniff(bytes)?;
    let (width, height) = header_dimensions(bytes, format)?;
    let pixels = width as u64 * height as u64;
    if pixels > max_pixels {
        return Err(EngineError::ImageTooLarge { width, height, pixels, limit: max_pixels });
    }
    if pixels == 0 {
        return Err(EngineError::ImageCorrupt("image has no pixels".into()));
    }
    if format == Format::Jpeg && !jpeg_has_end(bytes) {
        // The JPEG decoder fills a cut-off scan with grey and reports success; a face search on
        // half a photo would silently miss people, so a missing end marker is an error.
        return Err(EngineError::ImageCorrupt("JPEG data ends before the end-of-image marker".into()));
    }
    let corrupt = |e: image::ImageError| EngineError::ImageCorrupt(e.to_string());
    let mut reader = ImageReader::with_format(Cursor::new(bytes), format.image_format());
    // The header check above is the real limit; the decoder's own allocation cap only has to
    // stay out of its way for images that passed it (RGBA16 is the widest decoded layout).
    let mut limits = image::Limits::default();
    limits.max_alloc = Some(pixels.saturating_mul(8).saturating_add(64 << 20));
    reader.limits(limits);
    let mut decoder = reader.into_decoder().map_err(corrupt)?;
    // A damaged EXIF block should not cost the user their photo: treat it as "no rotation".
    let orientation = decoder.orientation().unwrap_or(image::metadata::Orientation::NoTransforms);
    let mut img = DynamicImage::from_decoder(decoder).map_err(corrupt)?;
    img.apply_orientation(orientation);
    let image = match img {
        DynamicImage::ImageRgb8(rgb) => rgb,
        other => other.into_rgb8(),
    };
    Ok(Decoded { format, image })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::testing::with_exif_orientation;
    use image::{ImageEncoder, Rgb};

    pub(crate) fn encode(img: &RgbImage, format: ImageFormat) -> Vec<u8> {
        let mut out = Vec::new();
        let (w, h) = img.dimensions();
        match format {
            ImageFormat::Png => image::codecs::png::PngEncoder::new(&mut out)
                .write_image(img.as_raw(), w, h, image::ExtendedColorType::Rgb8)
                .unwrap(),
            ImageFormat::Jpeg => image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, 95)
                .write_image(img.as_raw(), w, h, image::ExtendedColorType::Rgb8)
                .unwrap(),
            ImageFormat::WebP => image::codecs::webp::WebPEncoder::new_lossless(&mut out)
                .write_image(img.as_raw(), w, h, image::ExtendedColorType::Rgb8)
                .unwrap(),
            _ => unreachable!(),
        }
        out
    }

    /// Left half red, right half blue: any rotation or mirror is visible in where red ends up.
    fn halves(w: u32, h: u32) -> RgbImage {
        RgbImage::from_fn(w, h, |x, _| if x < w / 2 { Rgb([255, 0, 0]) } else { Rgb([0, 0, 255]) })
    }

    #[test]
    fn sniffs_by_magic_bytes() {
        let img = halves(8, 4);
        assert_eq!(sniff(&encode(&img, ImageFormat::Png)).unwrap(), Format::Png);
        assert_eq!(sniff(&encode(&img, ImageFormat::Jpeg)).unwrap(), Format::Jpeg);
        assert_eq!(sniff(&encode(&img, ImageFormat::WebP)).unwrap(), Format::WebP);
        assert_eq!(sniff(b"GIF89a......").unwrap_err().code(), "IMAGE_UNSUPPORTED");
        assert_eq!(sniff(b"<svg xmlns=").unwrap_err().code(), "IMAGE_UNSUPPORTED");
        assert_eq!(sniff(b"BM\0\0\0\0\0\0\0\0\0\0\0\0").unwrap_err().code(), "IMAGE_UNSUPPORTED");
        assert_eq!(sniff(b"RIFF\0\0\0\0WAVEfmt ").unwrap_err().code(), "IMAGE_UNSUPPORTED");
    }

    #[test]
    fn empty_and_truncated_are_corrupt() {
        assert_eq!(decode(&[], 1 << 20).unwrap_err().code(), "IMAGE_CORRUPT");
        assert_eq!(decode(&[0xFF, 0xD8], 1 << 20).unwrap_err().code(), "IMAGE_CORRUPT");
        assert_eq!(decode(&PNG_MAGIC[..5], 1 << 20).unwrap_err().code(), "IMAGE_CORRUPT");
        let img = halves(64, 48);
        for format in [ImageFormat::Png, ImageFormat::Jpeg, ImageFormat::WebP] {
            let bytes = encode(&img, format);
            for cut in [bytes.len() / 2, 20] {
                let err = decode(&bytes[..cut], 1 << 20).unwrap_err();
                assert_eq!(err.code(), "IMAGE_CORRUPT", "{format:?} cut at {cut}: {err}");
            }
        }
    }

    #[test]
    fn jpeg_cut_inside_the_scan_is_corrupt() {
        let img = RgbImage::from_fn(64, 64, |x, y| Rgb([(x * 4) as u8, (y * 4) as u8, 90]));
        let jpeg = encode(&img, ImageFormat::Jpeg);
        assert!(jpeg_has_end(&jpeg));
        assert!(!jpeg_has_end(&jpeg[..jpeg.len() - 2]));
        let err = decode(&jpeg[..jpeg.len() * 3 / 4], 1 << 20).unwrap_err();
        assert_eq!(err.code(), "IMAGE_CORRUPT");
        // Bytes after the end marker (some cameras append data) are fine.
        let mut trailing = jpeg.clone();
        trailing.extend_from_slice(&[0u8; 100]);
        assert!(decode(&trailing, 1 << 20).is_ok());
        // An EXIF block does not confuse the segment walk.
        assert!(jpeg_has_end(&with_exif_orientation(&jpeg, 6)));
    }

    #[test]
    fn decodes_all_formats_to_rgb() {
        let img = halves(40, 30);
        for format in [ImageFormat::Png, ImageFormat::Jpeg, ImageFormat::WebP] {
            let d = decode(&encode(&img, format), 1 << 20).unwrap();
            assert_eq!(d.image.dimensions(), (40, 30));
            let left = d.image.get_pixel(5, 15);
            let right = d.image.get_pixel(35, 15);
            assert!(left[0] > 200 && left[2] < 60, "{format:?} {left:?}");
            assert!(right[2] > 200 && right[0] < 60, "{format:?} {right:?}");
        }
    }

    #[test]
    fn gray_png_becomes_rgb() {
        let gray = image::GrayImage::from_fn(10, 10, |x, _| image::Luma([(x * 20) as u8]));
        let mut bytes = Vec::new();
        image::codecs::png::PngEncoder::new(&mut bytes)
            .write_image(gray.as_raw(), 10, 10, image::ExtendedColorType::L8)
            .unwrap();
        let d = decode(&bytes, 1000).unwrap();
        assert_eq!(d.image.get_pixel(3, 3), &Rgb([60, 60, 60]));
    }

    #[test]
    fn pixel_limit_is_checked_before_decoding() {
        let img = halves(100, 50);
        let bytes = encode(&img, ImageFormat::Png);
        assert!(decode(&bytes, 5000).is_ok());
        let err = decode(&bytes, 4999).unwrap_err();
        assert_eq!(err.code(), "IMAGE_TOO_LARGE");
        // A header announcing 60000x60000 followed by garbage: refused as too large, which
        // proves the check ran on the header alone (decoding would have failed as corrupt).
        let mut bomb = PNG_MAGIC.to_vec();
        bomb.extend_from_slice(&13u32.to_be_bytes());
        bomb.extend_from_slice(b"IHDR");
        bomb.extend_from_slice(&60000u32.to_be_bytes());
        bomb.extend_from_slice(&60000u32.to_be_bytes());
        bomb.extend_from_slice(&[8, 2, 0, 0, 0]);
        let crc = crc32(&bomb[12..]);
        bomb.extend_from_slice(&crc.to_be_bytes());
        // A well-formed but far too short IDAT chunk, then the end.
        let mut chunk = b"IDAT".to_vec();
        chunk.extend_from_slice(&[0x78, 0x9C, 0x63, 0x00, 0x00, 0x00, 0x01, 0x00, 0x01]);
        bomb.extend_from_slice(&((chunk.len() - 4) as u32).to_be_bytes());
        bomb.extend_from_slice(&chunk);
        bomb.extend_from_slice(&crc32(&chunk).to_be_bytes());
        bomb.extend_from_slice(&0u32.to_be_bytes());
        bomb.extend_from_slice(b"IEND");
        bomb.extend_from_slice(&crc32(b"IEND").to_be_bytes());
        assert_eq!(header_dimensions(&bomb, Format::Png).unwrap(), (60000, 60000));
        assert_eq!(decode(&bomb, 40_000_000).unwrap_err().code(), "IMAGE_TOO_LARGE");
    }

    fn crc32(data: &[u8]) -> u32 {
        let mut crc = 0xFFFF_FFFFu32;
        for &b in data {
            crc ^= b as u32;
            for _ in 0..8 {
                crc = if crc & 1 != 0 { (crc >> 1) ^ 0xEDB8_8320 } else { crc >> 1 };
            }
        }
        !crc
    }

    #[test]
    fn exif_orientation_is_applied() {
        // Stored 64x32 with red on the left. Orientation 6 means "rotate 90° clockwise to
        // display", so the upright image is 32x64 with red on top.
        let jpeg = encode(&halves(64, 32), ImageFormat::Jpeg);
        let rotated = with_exif_orientation(&jpeg, 6);
        let d = decode(&rotated, 1 << 20).unwrap();
        assert_eq!(d.image.dimensions(), (32, 64));
        assert!(d.image.get_pixel(16, 8)[0] > 200, "top should be red");
        assert!(d.image.get_pixel(16, 56)[2] > 200, "bottom should be blue");

        // Orientation 8 is the opposite rotation: red ends up at the bottom.
        let d = decode(&with_exif_orientation(&jpeg, 8), 1 << 20).unwrap();
        assert_eq!(d.image.dimensions(), (32, 64));
        assert!(d.image.get_pixel(16, 56)[0] > 200, "bottom should be red");

        // Orientation 2 mirrors horizontally: same size, red on the right.
        let d = decode(&with_exif_orientation(&jpeg, 2), 1 << 20).unwrap();
        assert_eq!(d.image.dimensions(), (64, 32));
        assert!(d.image.get_pixel(56, 16)[0] > 200, "right should be red");

        // Orientation is judged on the header's stored size for the pixel limit: the same
        // number of pixels either way.
        assert_eq!(decode(&rotated, 2047).unwrap_err().code(), "IMAGE_TOO_LARGE");
    }
}
