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

/// What one image may cost to decode, checked from its header before any pixel is decoded.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DecodeLimits {
    /// Most pixels (width x height as stored).
    pub max_pixels: u64,
    /// Most the longer side may exceed the shorter one by, as a ratio.
    pub max_aspect_ratio: u32,
    /// Most bytes decoding may hold at once (pixel buffers, a progressive JPEG's coefficients).
    pub max_bytes: u64,
}

impl DecodeLimits {
    /// Only the pixel limit: for callers that have no other budget.
    pub fn pixels(max_pixels: u64) -> DecodeLimits {
        DecodeLimits { max_pixels, max_aspect_ratio: u32::MAX, max_bytes: u64::MAX }
    }
}

/// What the header says, and what decoding will cost: known before any pixel is decoded.
#[derive(Debug, Clone, Copy)]
pub struct Header {
    pub format: Format,
    /// As stored (before EXIF rotation).
    pub width: u32,
    pub height: u32,
    orientation: image::metadata::Orientation,
    /// A JPEG that `jpeg-decoder` can decode at 1/2, 1/4 or 1/8 scale (8-bit grey or colour);
    /// CMYK and 12-bit JPEGs are decoded at full size.
    scalable_jpeg: bool,
    /// Bytes a full-size decode holds besides the RGB result.
    working_bytes: u64,
}

impl Header {
    /// Width and height as a person sees the photo (EXIF rotation applied).
    pub fn upright(&self) -> (u32, u32) {
        if self.transposed() { (self.height, self.width) } else { (self.width, self.height) }
    }

    fn transposed(&self) -> bool {
        use image::metadata::Orientation::*;
        matches!(self.orientation, Rotate90 | Rotate270 | Rotate90FlipH | Rotate270FlipH)
    }

    /// Largest DCT scale denominator (1, 2, 4 or 8) that keeps at least `keep` of the photo's
    /// pixels per side; 1 for formats that cannot be decoded scaled.
    pub fn denominator_for(&self, keep: f32) -> u32 {
        if !self.scalable_jpeg {
            return 1;
        }
        [8u32, 4, 2].into_iter().find(|&d| 1.0 / d as f32 >= keep).unwrap_or(1)
    }

    /// Bytes decoding at `1 / denominator` holds at its peak.
    pub fn decode_bytes(&self, denominator: u32) -> u64 {
        let d = denominator.max(1) as u64;
        let scaled = (self.width as u64).div_ceil(d) * (self.height as u64).div_ceil(d);
        if denominator > 1 {
            // jpeg-decoder: component planes and the interleaved result at the scaled size, plus a
            // progressive image's coefficients, which it keeps at full size whatever the scale.
            scaled * 3 * 3 + self.working_bytes
        } else {
            scaled * 3 + self.working_bytes
        }
    }
}

/// Reads the header and refuses an image over any limit, before any pixel buffer exists.
pub fn inspect(bytes: &[u8], limits: &DecodeLimits) -> Result<Header> {
    let format = sniff(bytes)?;
    let (width, height) = header_dimensions(bytes, format)?;
    let pixels = width as u64 * height as u64;
    if pixels > limits.max_pixels {
        return Err(EngineError::ImageTooLarge { width, height, pixels, limit: limits.max_pixels });
    }
    if pixels == 0 {
        return Err(EngineError::ImageCorrupt("image has no pixels".into()));
    }
    // Compared as long <= ratio * short, so a limit near u32::MAX cannot overflow.
    if width.max(height) as u64 > limits.max_aspect_ratio as u64 * width.min(height) as u64 {
        return Err(EngineError::ImageAspectRatio { width, height, limit: limits.max_aspect_ratio });
    }
    let corrupt = |e: image::ImageError| EngineError::ImageCorrupt(e.to_string());
    // jpeg-decoder reads the JPEG header (it also decodes scaled); a JPEG it cannot read goes to
    // the image crate's decoder, which then decides whether it is corrupt.
    let jpeg = (format == Format::Jpeg).then(|| jpeg_header(bytes, pixels)).flatten();
    let (orientation, scalable_jpeg, working_bytes) = match jpeg {
        Some(found) => found,
        None => {
            let mut decoder = ImageReader::with_format(Cursor::new(bytes), format.image_format()).into_decoder().map_err(corrupt)?;
            let orientation = decoder.orientation().unwrap_or(image::metadata::Orientation::NoTransforms);
            // The decoder's own layout (up to 16-bit RGBA) exists beside the RGB copy made from it.
            let native = if decoder.color_type() == image::ColorType::Rgb8 { 0 } else { decoder.total_bytes() };
            (orientation, false, native)
        }
    };
    let header = Header { format, width, height, orientation, scalable_jpeg, working_bytes };
    let needed = header.decode_bytes(1).min(if scalable_jpeg { header.decode_bytes(8) } else { u64::MAX });
    if needed > limits.max_bytes {
        return Err(EngineError::DecodeBudget { bytes: needed, limit: limits.max_bytes });
    }
    Ok(header)
}

/// Orientation, whether it decodes scaled, and its full-size coefficient bytes when progressive.
fn jpeg_header(bytes: &[u8], pixels: u64) -> Option<(image::metadata::Orientation, bool, u64)> {
    let mut d = jpeg_decoder::Decoder::new(Cursor::new(bytes));
    d.read_info().ok()?;
    let info = d.info()?;
    // A damaged EXIF block should not cost the user their photo: treat it as "no rotation".
    let orientation = d.exif_data().and_then(image::metadata::Orientation::from_exif_chunk).unwrap_or(image::metadata::Orientation::NoTransforms);
    let scalable = matches!(info.pixel_format, jpeg_decoder::PixelFormat::L8 | jpeg_decoder::PixelFormat::RGB24);
    let coefficients = if info.coding_process == jpeg_decoder::CodingProcess::DctProgressive { pixels * info.pixel_format.pixel_bytes() as u64 * 2 } else { 0 };
    Some((orientation, scalable, coefficients))
}

/// A decoded, upright image, possibly at a fraction of the photo's size.
#[derive(Debug)]
pub struct Decoded {
    pub format: Format,
    pub image: RgbImage,
    /// Upright size of the photo itself: what coordinates are reported in.
    pub width: u32,
    pub height: u32,
}

impl Decoded {
    /// Photo pixels per decoded pixel, per axis (1 unless decoded scaled).
    pub fn scale(&self) -> (f32, f32) {
        (self.width as f32 / self.image.width() as f32, self.height as f32 / self.image.height() as f32)
    }
}

/// Sniffs, checks the pixel limit, decodes and rotates upright.
pub fn decode(bytes: &[u8], max_pixels: u64) -> Result<Decoded> {
    let header = inspect(bytes, &DecodeLimits::pixels(max_pixels))?;
    decode_scaled(bytes, &header, 1, u64::MAX)
}

/// Decodes at `1 / denominator` of the stored size (JPEG DCT scaling: the skipped detail is
/// never computed) and rotates upright. `max_bytes` caps what the decoder may allocate.
pub fn decode_scaled(bytes: &[u8], header: &Header, denominator: u32, max_bytes: u64) -> Result<Decoded> {
    let format = header.format;
    if format == Format::Jpeg && !jpeg_has_end(bytes) {
        // The JPEG decoder fills a cut-off scan with grey and reports success; a face search on
        // half a photo would silently miss people, so a missing end marker is an error.
        return Err(EngineError::ImageCorrupt("JPEG data ends before the end-of-image marker".into()));
    }
    let corrupt = |e: image::ImageError| EngineError::ImageCorrupt(e.to_string());
    let budget = header.decode_bytes(denominator).saturating_mul(2).saturating_add(64 << 20).min(max_bytes.max(64 << 20));
    let mut img = if denominator > 1 && header.scalable_jpeg {
        let mut d = jpeg_decoder::Decoder::new(Cursor::new(bytes));
        d.set_max_decoding_buffer_size(usize::try_from(budget).unwrap_or(usize::MAX));
        let want = |side: u32| u16::try_from(side.div_ceil(denominator)).unwrap_or(u16::MAX);
        d.scale(want(header.width), want(header.height)).map_err(|e| EngineError::ImageCorrupt(e.to_string()))?;
        let pixels = d.decode().map_err(|e| EngineError::ImageCorrupt(e.to_string()))?;
        let info = d.info().ok_or_else(|| EngineError::ImageCorrupt("JPEG has no frame header".into()))?;
        let (w, h) = (info.width as u32, info.height as u32);
        let rgb = match info.pixel_format {
            jpeg_decoder::PixelFormat::RGB24 => RgbImage::from_raw(w, h, pixels),
            jpeg_decoder::PixelFormat::L8 => image::GrayImage::from_raw(w, h, pixels).map(|g| DynamicImage::ImageLuma8(g).into_rgb8()),
            _ => None,
        };
        DynamicImage::ImageRgb8(rgb.ok_or_else(|| EngineError::ImageCorrupt("JPEG decoded to an unexpected size".into()))?)
    } else {
        let mut reader = ImageReader::with_format(Cursor::new(bytes), format.image_format());
        let mut limits = image::Limits::default();
        limits.max_alloc = Some(budget);
        reader.limits(limits);
        let decoder = reader.into_decoder().map_err(corrupt)?;
        DynamicImage::from_decoder(decoder).map_err(corrupt)?
    };
    img.apply_orientation(header.orientation);
    let image = match img {
        DynamicImage::ImageRgb8(rgb) => rgb,
        other => other.into_rgb8(),
    };
    let (width, height) = header.upright();
    Ok(Decoded { format, image, width, height })
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
