//! YuNet face detection: one pass over the photo at a working resolution, decoded from its
//! anchor-free heads at strides 8, 16 and 32.
//!
//! YuNet takes any input whose sides are multiples of 32 and finds faces from about
//! [`MODEL_MIN_FACE`] input pixels up to the whole frame, so one pass replaces the tile pyramid
//! a fixed-size detector needs. The working scale is the coarsest at which a face of
//! `min_face` photo pixels still reaches [`MODEL_MIN_FACE`], but never coarser than
//! [`WORKING_SIDE`] on the longer side (small faces are easier to find with more pixels) and
//! never a magnification. Only a photo so large that this scale would exceed [`MAX_SIDE`] is
//! split into overlapping tiles, with one more pass over the whole photo at [`MAX_SIDE`] for
//! the faces too big for a tile.

use std::path::Path;

use image::RgbImage;
use ort::session::Session;

use crate::align;
use crate::detector::{Detection, Pass};
use crate::error::{EngineError, Result};
use crate::manifest::{InputSpec, Manifest, ModelEntry};
use crate::runtime::{self, Provider, ProviderReport, Runtime};

/// Keypoints YuNet returns, in this order (the subject's right eye is the one on the left of
/// an unmirrored photo).
pub const KEYPOINTS: usize = 5;
/// Index of each keypoint in a YuNet detection.
pub mod kp {
    pub const RIGHT_EYE: usize = 0;
    pub const LEFT_EYE: usize = 1;
    pub const NOSE: usize = 2;
    pub const MOUTH_RIGHT: usize = 3;
    pub const MOUTH_LEFT: usize = 4;
}

const STRIDES: [u32; 3] = [8, 16, 32];
/// Smallest face side, in input pixels, that YuNet finds reliably (its finest anchors are at
/// stride 8; libfacedetection documents faces from about 10 px).
pub const MODEL_MIN_FACE: f32 = 16.0;
/// Photos are not worked on at fewer pixels than this on their longer side.
pub const WORKING_SIDE: f32 = 640.0;
/// Longest input side of one pass; beyond it the photo is tiled.
pub const MAX_SIDE: f32 = 2048.0;
/// Tiles overlap by this fraction of their side, and leave faces bigger than it to the
/// whole-photo pass, so every face fits whole in some pass.
const TILE_OVERLAP: f32 = 0.25;
/// A photo with no face found is looked at once more inside a frame this many times its
/// longer side, so a face that fills a tight crop looks like a face in a scene.
pub const RETRY_FRAME: f32 = 2.0;

/// One prepared detector input: NCHW floats of `height` x `width`.
pub struct YunetInput {
    pub data: Vec<f32>,
    pub width: u32,
    pub height: u32,
}

/// A pass over part (or all) of the photo: where it reads from and the input it makes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Window {
    pub pass: Pass,
    /// Input pixels covered by the photo (the rest, up to the multiple of 32, is black).
    pub content_width: u32,
    pub content_height: u32,
}

impl Window {
    fn input_size(&self) -> (u32, u32) {
        let round_up = |v: u32| v.max(1).div_ceil(InputSpec::SIZE_MULTIPLE) * InputSpec::SIZE_MULTIPLE;
        (round_up(self.content_width), round_up(self.content_height))
    }
}

/// At most this many windows per photo: beyond it the working scale is lowered (the smallest
/// face found grows) rather than the work.
pub const MAX_WINDOWS: usize = 64;
/// At most this many detector input pixels per photo (all windows together), the detector's
/// time budget: about 2 s of one core here, 16x a 2 MP photo's pass. A photo that would need
/// more is searched at a coarser scale (its smallest findable face grows) instead of costing
/// more: a 40 MP photo runs at 16 MP instead of the 21 MP its minimum face would ask for.
pub const MAX_INPUT_PIXELS: u64 = 16_000_000;
/// The framed retry only makes sense for a photo that could be a single face: one at most
/// this elongated.
pub const RETRY_MAX_ASPECT: f32 = 3.0;

/// The windows covering a `width` x `height` photo so that faces of `min_face` photo pixels
/// and larger are found. Empty when no face the detector can find fits in the photo (a sliver
/// a few pixels high): there is nothing to look at, and tiling it would cost a pass per sliver.
pub fn plan(width: u32, height: u32, min_face: f32) -> Vec<Window> {
    let (w, h) = (width as f32, height as f32);
    let long = w.max(h);
    // Input pixels per photo pixel.
    let needed = MODEL_MIN_FACE / min_face.max(1.0);
    let mut scale = needed.max(WORKING_SIDE / long).min(1.0);
    loop {
        if w.min(h) * scale < MODEL_MIN_FACE {
            return Vec::new();
        }
        let windows = windows_at(w, h, scale);
        if windows.len() <= MAX_WINDOWS && input_pixels(&windows) <= MAX_INPUT_PIXELS {
            return windows;
        }
        scale *= 0.8;
    }
}

/// Detector input pixels of these windows together: what running them costs.
pub fn input_pixels(windows: &[Window]) -> u64 {
    windows.iter().map(|w| w.input_size()).map(|(w, h)| w as u64 * h as u64).sum()
}

/// Input pixels per photo pixel of the finest window: a photo decoded at this scale or finer
/// loses nothing the detector would see.
pub fn finest_scale(windows: &[Window]) -> f32 {
    windows.iter().map(|w| 1.0 / w.pass.scale).fold(0.0, f32::max)
}

/// Whether a photo with no face found is worth the framed retry: only one shaped like a face
/// crop, never a strip (whose shrunken copy would be a line in a black square).
pub fn worth_framing(width: u32, height: u32) -> bool {
    let (long, short) = (width.max(height) as f32, width.min(height).max(1) as f32);
    long / short <= RETRY_MAX_ASPECT
}

/// Input pixels of the framed retry.
pub const FRAMED_INPUT_PIXELS: u64 = (WORKING_SIDE * WORKING_SIDE) as u64;

fn windows_at(w: f32, h: f32, scale: f32) -> Vec<Window> {
    let long = w.max(h);
    let whole = |scale: f32| Window {
        pass: Pass { origin_x: 0.0, origin_y: 0.0, scale: 1.0 / scale, level: 0, tiled: false },
        content_width: (w * scale).round().max(1.0) as u32,
        content_height: (h * scale).round().max(1.0) as u32,
    };
    if long * scale <= MAX_SIDE {
        return vec![whole(scale)];
    }
    // Tiles of MAX_SIDE input pixels at `scale`, spread evenly so the last ends at the edge.
    let tile = MAX_SIDE / scale;
    let step = tile * (1.0 - TILE_OVERLAP);
    let starts = |extent: f32| -> Vec<f32> {
        if extent <= tile {
            return vec![0.0];
        }
        let n = ((extent - tile) / step).ceil() as usize;
        (0..=n).map(|i| i as f32 * (extent - tile) / n as f32).collect()
    };
    let mut windows = vec![whole(MAX_SIDE / long)];
    for &y in &starts(h) {
        for &x in &starts(w) {
            windows.push(Window {
                pass: Pass { origin_x: x, origin_y: y, scale: 1.0 / scale, level: 0, tiled: true },
                content_width: (tile.min(w - x) * scale).round().max(1.0) as u32,
                content_height: (tile.min(h - y) * scale).round().max(1.0) as u32,
            });
        }
    }
    windows
}

/// Whether a tile should leave this detection (input pixels) to the whole-photo pass: it may
/// be cut by the tile's edge, and the whole-photo pass sees it whole.
pub fn leave_to_whole_pass(window: &Window, d: &Detection) -> bool {
    window.pass.tiled && d.width().max(d.height()) > TILE_OVERLAP * MAX_SIDE
}

/// Renders a window of the photo as the model's input (antialiased when it shrinks).
pub fn render(img: &RgbImage, window: &Window, spec: &InputSpec) -> YunetInput {
    let p = &window.pass;
    let (cw, ch) = (window.content_width, window.content_height);
    let content = if p.origin_x >= 0.0 && p.origin_y >= 0.0 && p.origin_x + cw as f32 * p.scale <= img.width() as f32 + 0.5 && p.origin_y + ch as f32 * p.scale <= img.height() as f32 + 0.5 {
        // Axis-aligned and inside the photo (every planned window): one SIMD resample.
        let region = [p.origin_x as f64, p.origin_y as f64, (cw as f32 * p.scale) as f64, (ch as f32 * p.scale) as f64];
        let [l, t, w, h] = region;
        let clamped = [l, t, w.min(img.width() as f64 - l), h.min(img.height() as f64 - t)];
        align::resize_region(img, clamped, cw, ch).into_raw()
    } else {
        // Windows reaching past the photo (around a caller's box near an edge): edge-clamped warp.
        let t = p.photo_to_input();
        align::warp_antialiased(img, &t, cw, ch)
    };
    let (iw, ih) = window.input_size();
    let rgb = if (iw, ih) == (cw, ch) {
        content
    } else {
        let mut padded = vec![0u8; (iw * ih * 3) as usize];
        let row = (cw * 3) as usize;
        for (y, src) in content.chunks_exact(row).enumerate() {
            let o = y * (iw * 3) as usize;
            padded[o..o + row].copy_from_slice(src);
        }
        padded
    };
    let mut data = Vec::with_capacity((iw * ih * 3) as usize);
    spec.push_image(&rgb, &mut data);
    YunetInput { data, width: iw, height: ih }
}

/// The photo shrunk to fit [`WORKING_SIDE`] / [`RETRY_FRAME`] and centred in a black square
/// [`RETRY_FRAME`] times its longer side, with the pass that maps detections in the square back
/// to photo pixels.
pub fn framed(img: &RgbImage) -> (RgbImage, Window) {
    let (w, h) = img.dimensions();
    let long = w.max(h) as f32;
    let inner = (WORKING_SIDE / RETRY_FRAME).min(long);
    let k = inner / long; // square pixels per photo pixel
    let (sw, sh) = (((w as f32 * k).round() as u32).max(1), ((h as f32 * k).round() as u32).max(1));
    let small = align::resize_region(img, [0.0, 0.0, w as f64, h as f64], sw, sh);
    let side = (inner * RETRY_FRAME).round() as u32;
    let mut square = RgbImage::new(side, side);
    let (ox, oy) = ((side - sw) / 2, (side - sh) / 2);
    image::imageops::replace(&mut square, &small, ox as i64, oy as i64);
    let window = Window {
        pass: Pass { origin_x: -(ox as f32) / k, origin_y: -(oy as f32) / k, scale: 1.0 / k, level: 0, tiled: false },
        content_width: side,
        content_height: side,
    };
    (square, window)
}

/// Decodes one run's heads, given per stride as `(cls, obj, bbox, kps)` slices, into detections
/// scoring at least `threshold`, in input pixels. Score = sqrt(cls * obj), both already
/// sigmoids; the box centre is `(col + dx, row + dy) * stride` with side `exp(d) * stride`, and
/// keypoints are `(col + kx, row + ky) * stride`.
pub fn decode(width: u32, heads: &[(&[f32], &[f32], &[f32], &[f32]); 3], threshold: f32) -> Vec<Detection> {
    let mut out = Vec::new();
    for (&stride, &(cls, obj, bbox, kps)) in STRIDES.iter().zip(heads) {
        let cols = (width / stride) as usize;
        let s = stride as f32;
        for (i, (&c, &o)) in cls.iter().zip(obj).enumerate() {
            let score = (c.clamp(0.0, 1.0) * o.clamp(0.0, 1.0)).sqrt();
            if score < threshold || cols == 0 {
                continue;
            }
            let (col, row) = ((i % cols) as f32, (i / cols) as f32);
            let b = &bbox[i * 4..i * 4 + 4];
            let (cx, cy) = ((col + b[0]) * s, (row + b[1]) * s);
            let (bw, bh) = (b[2].min(20.0).exp() * s, b[3].min(20.0).exp() * s);
            let k = &kps[i * 10..i * 10 + 10];
            let keypoints = (0..KEYPOINTS).map(|j| ((col + k[2 * j]) * s, (row + k[2 * j + 1]) * s)).collect();
            out.push(Detection { score, x1: cx - bw / 2.0, y1: cy - bh / 2.0, x2: cx + bw / 2.0, y2: cy + bh / 2.0, keypoints });
        }
    }
    out
}

/// A YuNet session, owned by one worker thread.
pub struct YunetModel {
    session: Session,
    pub input: InputSpec,
    pub id: String,
    /// ONNX output names per stride: cls, obj, bbox, kps.
    outputs: [[String; 4]; 3],
    threshold: f32,
}

impl YunetModel {
    /// Loads the model and runs one small blank input to check that its outputs decode.
    pub fn load(rt: &Runtime, dir: &Path, entry: &ModelEntry, providers: &[Provider], intra: usize, threshold: f32) -> Result<(Self, ProviderReport)> {
        if !entry.input.dynamic_size || entry.input.channels != 3 {
            return Err(EngineError::Model(format!("detector {} must take 3-channel input of any size", entry.id)));
        }
        let name = |key: String| {
            entry.output(&key).map(str::to_string).ok_or_else(|| EngineError::Model(format!("detector {}: manifest names no output {key}", entry.id)))
        };
        let per_stride = |s: u32| -> Result<[String; 4]> { Ok([name(format!("cls{s}"))?, name(format!("obj{s}"))?, name(format!("bbox{s}"))?, name(format!("kps{s}"))?]) };
        let outputs = [per_stride(8)?, per_stride(16)?, per_stride(32)?];
        let (session, report) = rt.session_with_arena(&Manifest::onnx_path(dir, entry), providers, intra, false)?;
        let mut m = YunetModel { session, input: entry.input.clone(), id: entry.id.clone(), outputs, threshold };
        m.run(vec![YunetInput { data: vec![0.0; 3 * 64 * 64], width: 64, height: 64 }])?;
        Ok((m, report))
    }

    /// Runs each input on its own (sizes differ) and returns its detections in input pixels.
    pub fn run(&mut self, inputs: Vec<YunetInput>) -> Result<Vec<Vec<Detection>>> {
        let mut all = Vec::with_capacity(inputs.len());
        for input in inputs {
            let (w, h) = (input.width, input.height);
            if w % InputSpec::SIZE_MULTIPLE != 0 || h % InputSpec::SIZE_MULTIPLE != 0 || input.data.len() != (w * h * 3) as usize {
                return Err(EngineError::Internal(format!("detector input {w}x{h} is not a whole multiple of 32")));
            }
            let outputs = runtime::run_images(&mut self.session, &self.input, 1, h, w, input.data)?;
            let find = |name: &str| -> Result<&[f32]> {
                outputs
                    .iter()
                    .find(|o| o.name == name)
                    .map(|o| o.data.as_slice())
                    .ok_or_else(|| EngineError::Model(format!("detector {} has no output {name:?}", self.id)))
            };
            let mut heads = Vec::with_capacity(3);
            for (names, stride) in self.outputs.iter().zip(STRIDES) {
                let cells = ((w / stride) * (h / stride)) as usize;
                let [cls, obj, bbox, kps] = [find(&names[0])?, find(&names[1])?, find(&names[2])?, find(&names[3])?];
                if cls.len() != cells || obj.len() != cells || bbox.len() != cells * 4 || kps.len() != cells * 10 {
                    return Err(EngineError::Model(format!("detector {}: stride {stride} heads do not match a {w}x{h} input", self.id)));
                }
                heads.push((cls, obj, bbox, kps));
            }
            let heads: [_; 3] = heads.try_into().expect("three strides");
            all.push(decode(w, &heads, self.threshold));
        }
        Ok(all)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_photos_run_whole_at_their_own_size() {
        let w = plan(250, 250, 40.0);
        assert_eq!(w.len(), 1);
        assert_eq!((w[0].content_width, w[0].content_height), (250, 250));
        assert_eq!(w[0].input_size(), (256, 256));
    }

    #[test]
    fn medium_photos_shrink_to_the_working_side_or_the_min_face() {
        // 2 MP: a 40 px face needs 0.4, the working side asks for 0.4 as well.
        let w = plan(1600, 1200, 40.0);
        assert_eq!(w.len(), 1);
        assert_eq!((w[0].content_width, w[0].content_height), (640, 480));
        // Smaller wanted faces keep more pixels.
        let w = plan(1600, 1200, 20.0);
        assert_eq!((w[0].content_width, w[0].content_height), (1280, 960));
    }

    #[test]
    fn huge_photos_are_tiled_with_a_whole_pass() {
        let w = plan(20000, 2000, 20.0);
        assert!(w.len() > 2);
        assert!(!w[0].pass.tiled && w[0].content_width as f32 <= MAX_SIDE);
        for t in &w[1..] {
            assert!(t.pass.tiled && t.content_width as f32 <= MAX_SIDE + 1.0 && t.content_height as f32 <= MAX_SIDE + 1.0);
        }
        // The tiles reach the far edge.
        let last = w.last().unwrap();
        let right = last.pass.origin_x + last.content_width as f32 * last.pass.scale;
        assert!((right - 20000.0).abs() < 2.0, "{right}");
    }

    #[test]
    fn slivers_and_extreme_shapes_stay_bounded() {
        // 1 x 40,000,000: no face fits, nothing to run.
        assert!(plan(40_000_000, 1, 40.0).is_empty());
        assert!(plan(1, 250_000, 40.0).is_empty());
        // 200,000 x 200 (40 MP): tiles, but never more than the cap.
        let w = plan(200_000, 200, 20.0);
        assert!(!w.is_empty() && w.len() <= MAX_WINDOWS, "{}", w.len());
        // The largest photo the default pixel limit allows, square: a bounded tiling.
        assert!(plan(6325, 6325, 8.0).len() <= MAX_WINDOWS);
    }

    #[test]
    fn every_photo_within_the_pixel_limit_stays_within_the_detector_budget() {
        for (w, h) in [(6400, 6250), (8000, 5000), (20000, 2000), (6325, 6325), (28284, 1414), (1920, 1280)] {
            for min_face in [8.0, 20.0, 40.0] {
                let windows = plan(w, h, min_face);
                assert!(input_pixels(&windows) <= MAX_INPUT_PIXELS, "{w}x{h} at {min_face}: {}", input_pixels(&windows));
                assert!(finest_scale(&windows) <= 1.0);
            }
        }
        // A photo that fits stays at the scale its smallest face asks for.
        assert_eq!(plan(8000, 5000, 40.0).len(), 3);
        assert!((finest_scale(&plan(8000, 5000, 40.0)) - 0.4).abs() < 1e-6);
        assert!(worth_framing(150, 150) && worth_framing(300, 120) && !worth_framing(1000, 10));
    }

    #[test]
    fn decodes_one_cell() {
        // 64x64 input: 8x8 cells at stride 8, 4x4 at 16, 2x2 at 32.
        let mut cls8 = vec![0.0; 64];
        let mut obj8 = vec![0.0; 64];
        let mut bbox8 = vec![0.0; 256];
        let mut kps8 = vec![0.0; 640];
        let i = 3 * 8 + 2; // row 3, col 2
        cls8[i] = 0.81;
        obj8[i] = 1.0;
        bbox8[i * 4..i * 4 + 4].copy_from_slice(&[0.5, 0.5, 0.0, (2f32).ln()]);
        kps8[i * 10..i * 10 + 2].copy_from_slice(&[0.25, -0.5]);
        let (c16, b16, k16) = (vec![0.0; 16], vec![0.0; 64], vec![0.0; 160]);
        let (c32, b32, k32) = (vec![0.0; 4], vec![0.0; 16], vec![0.0; 40]);
        let heads = [
            (&cls8[..], &obj8[..], &bbox8[..], &kps8[..]),
            (&c16[..], &c16[..], &b16[..], &k16[..]),
            (&c32[..], &c32[..], &b32[..], &k32[..]),
        ];
        let d = decode(64, &heads, 0.5);
        assert_eq!(d.len(), 1);
        let d = &d[0];
        assert!((d.score - 0.9).abs() < 1e-6);
        // centre (2.5 * 8, 3.5 * 8) = (20, 28), size 8 x 16
        assert_eq!((d.x1, d.y1, d.x2, d.y2), (16.0, 20.0, 24.0, 36.0));
        assert_eq!(d.keypoints[0], (18.0, 20.0));
        assert_eq!(d.keypoints.len(), KEYPOINTS);
    }

    #[test]
    fn framing_maps_back_to_the_photo() {
        let img = RgbImage::new(100, 50);
        let (square, window) = framed(&img);
        assert_eq!(square.dimensions(), (200, 200));
        // The photo's top-left corner sits at (50, 75) in the square.
        let d = Detection { score: 1.0, x1: 50.0, y1: 75.0, x2: 150.0, y2: 125.0, keypoints: vec![] };
        let p = window.pass.to_photo(&d);
        assert_eq!((p.x1, p.y1, p.x2, p.y2), (0.0, 0.0, 100.0, 50.0));
    }
}
