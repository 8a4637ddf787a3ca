//! What a request will cost, worked out from the image header before anything is decoded: the
//! pipeline lane it waits in, and the scale it is decoded at.

use crate::error::Result;
use crate::image_io::{self, Header};
use crate::pool::Lane;
use crate::yunet;

use super::detector_stage::{DetectorStage, CALLER_BOX_INPUT};
use super::{AnalyzeOptions, Inner};

/// Requests estimated to cost more than this many milliseconds of a core go to the heavy lane:
/// a 12 MP phone photo (about 250 ms by this estimate) stays light, a 24 MP one (about 500)
/// does not, so photos of 24 MP and more cannot hold every thread while small ones wait.
const LIGHT_MS: u64 = 500;
/// Decoding a JPEG costs about this many nanoseconds per stored pixel on one core, at full size
/// (zune-jpeg, 4.0) or at 1/2 (jpeg-decoder, 4.1); `examples/decoders.rs`.
const JPEG_DECODE_NS_PER_PIXEL: u64 = 4;
/// PNG and WebP decoding, per stored pixel (PNG's inflate and filters cost about 3x JPEG's).
const OTHER_DECODE_NS_PER_PIXEL: u64 = 12;
/// YuNet costs about this many nanoseconds per input pixel on one intra-op thread at the tile
/// sizes the plan uses (23 to 28 at 768 to 1280 px, `face_sizes --cost`), plus rendering the
/// windows from the decoded photo (about 8); checked against measured costs from 2 to 48 MP
/// by `examples/phone_photos.rs timing`.
const DETECT_NS_PER_PIXEL: u64 = 32;
/// Aligning and embedding one face, for caller boxes whose count is known up front.
const FACE_MS: u64 = 30;

/// What a request will cost, worked out from the image header before anything is decoded.
pub(super) struct Estimate {
    pub(super) header: Header,
    /// Decode at 1 / denominator of the stored size.
    pub(super) denominator: u32,
    pub(super) millis: u64,
}

impl Estimate {
    /// Whether the request goes to the heavy lane (and runs its detector windows behind light
    /// requests' windows).
    pub(super) fn heavy(&self) -> bool {
        self.millis > LIGHT_MS
    }

    /// The pipeline lane the request waits in.
    pub(super) fn lane(&self) -> Lane {
        if self.heavy() { Lane::Heavy { cost_ms: self.millis } } else { Lane::Light }
    }
}

impl Inner {
    /// Reads the header (refusing an image over a limit) and estimates the request's cost. For
    /// detection with YuNet the photo is decoded at the coarsest DCT scale that still holds the
    /// detector's finest window: a 40 MP JPEG decodes at 1/2 or less, without the detail the
    /// detector would throw away. Caller boxes keep full resolution for their crops.
    pub(super) fn estimate(&self, bytes: &[u8], opts: &AnalyzeOptions) -> Result<Estimate> {
        let header = image_io::inspect(bytes, &self.limits)?;
        let (w, h) = header.upright();
        let (denominator, detect_pixels, faces) = match (&opts.boxes, &self.detector) {
            (Some(boxes), _) => (1, boxes.len() as u64 * (CALLER_BOX_INPUT * CALLER_BOX_INPUT) as u64, boxes.len() as u64),
            (None, DetectorStage::Yunet { min_face, .. }) => {
                let windows = yunet::plan(w, h, *min_face);
                (header.denominator_for(yunet::finest_scale(&windows)), yunet::input_pixels(&windows, self.info.fixed_shapes), 0)
            }
            (None, DetectorStage::Blazeface { .. }) => (1, w as u64 * h as u64, 0),
        };
        let decode_ns = if header.format == image_io::Format::Jpeg { JPEG_DECODE_NS_PER_PIXEL } else { OTHER_DECODE_NS_PER_PIXEL };
        let millis = (w as u64 * h as u64 * decode_ns + detect_pixels * DETECT_NS_PER_PIXEL) / 1_000_000 + faces * FACE_MS;
        Ok(Estimate { header, denominator, millis })
    }
}
