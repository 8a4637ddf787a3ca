//! YuNet face detection: a pyramid of passes over the photo, decoded from YuNet's
//! anchor-free heads at strides 8, 16 and 32.
//!
//! YuNet takes any input whose sides are multiples of 32, but finds faces reliably only within
//! a band of sizes. Measured with `examples/face_sizes.rs` (113 faces from LFW and the
//! labelled photos, each scaled to a side in input pixels, threshold 0.78): recall 0.09 at
//! 16 px, 0.66 at 20, 0.96 at 24, 1.00 from 32 to 448, 0.99 at 512, 0.75 at 640 and 0.18 at
//! 768. A face that fills the frame is found like one in a scene (a tight crop: 1.00 from 32
//! to 448 as well), so what matters is the face's size in input pixels, not its share of the
//! frame. [`MODEL_MIN_FACE`] and [`MODEL_MAX_FACE`] are that band.
//!
//! The plan is a pyramid. Its finest level runs at the scale where a face of `min_face` photo
//! pixels reaches [`MODEL_MIN_FACE`] (never coarser than [`WORKING_SIDE`] on the longer side,
//! never a magnification), split into tiles of at most [`TILE_SIDE`] when larger. Each tiled
//! level keeps the faces up to [`HANDOFF_FACE`] input pixels (a whole one, up to
//! [`MODEL_MAX_FACE`]) and leaves bigger ones to the next,
//! [`LEVEL_STEP`] times coarser, where they are at least [`HANDOFF_FACE`] x [`LEVEL_STEP`]
//! pixels: well inside the band. The coarsest level shows the photo's shorter side at
//! [`FRAME_FACE`] pixels, so a face as big as the frame sits inside the band, and it keeps
//! every face it finds. Coarser levels
//! cost little (each has 1/16 of the pixels of the one before), and nothing depends on what
//! another level found, so no false face can hide a true one.

use std::sync::Arc;

use image::RgbImage;

use crate::align;
use crate::detection::{Detection, Pass};
use crate::error::{EngineError, Result};
use crate::manifest::{InputSpec, ModelEntry};
use crate::runtime::{self, ModelSession, ProviderReport, SessionSource};

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
/// Smallest face side, in input pixels, that YuNet finds reliably (recall 0.96 at 24 px, 0.66
/// at 20, see the module comment).
pub const MODEL_MIN_FACE: f32 = 24.0;
/// Largest face side, in input pixels, that YuNet finds reliably (recall 1.00 at 448 px, 0.75
/// at 640).
pub const MODEL_MAX_FACE: f32 = 448.0;
/// The coarsest level shows the photo's shorter side at this many input pixels: a face that
/// fills the frame (its box can outgrow the frame a little) stays well inside the band. At
/// [`MODEL_MAX_FACE`] a 150 px face crop enlarged to 12 MP was missed.
pub const FRAME_FACE: f32 = 320.0;
/// Faces bigger than this (input pixels) are left by a level to the next coarser one.
pub const HANDOFF_FACE: f32 = 160.0;
/// Scale of each pyramid level relative to the one before: a face handed off at
/// [`HANDOFF_FACE`] arrives at 40 px, where recall is 1.00.
pub const LEVEL_STEP: f32 = 0.25;
/// Photos are not worked on at fewer pixels than this on their longer side.
pub const WORKING_SIDE: f32 = 640.0;
/// Longest side of one tile. Smaller inputs cost less per pixel (on one core: 27 ns at 256 px,
/// 36-45 at 768-1280, 55 at 1536, 59 at 2048, 73 at 2560; `face_sizes --cost`), and tiles
/// let the detector workers share one photo.
pub const TILE_SIDE: f32 = 1280.0;
/// Tiles overlap by this many input pixels: every face a level keeps fits whole in some tile.
const TILE_OVERLAP: f32 = HANDOFF_FACE + 32.0;

/// The detector's input sizes (width, height) when shapes are fixed (`fixedShapes`): each
/// window's tensor is padded, black on the right and bottom, into the smallest that holds it,
/// so a GPU provider sees nine shapes, known at start-up, instead of one per photo size.
///
/// Chosen from the plan's own windows (`examples/detector_shapes.rs`: 12, 24 and 48 MP phone
/// photos at 4:3, 3:4, 16:9, 9:16 and 1:1, the demo photos, small photos and the labelled
/// photos, at the default 40 px minimum face) by a search over sets of symmetric pairs for
/// the least padding: 12 MP photos run 13% more pixels, 24 MP 23%, 48 MP 13%, the 1920 px
/// demo photos 11%, small photos 23%, everything together 22%. What each is for: 320x320 the
/// caller-box window and the coarsest level of square photos; 576x320 and 320x576 the coarsest
/// level of 4:3 to 16:9 photos; 768x480 and 480x768 middle levels and small photos;
/// 1152x928 and 928x1152 the tiles of 12 MP photos and the finest level of 1920 px ones;
/// 1152x1152 and 1280x1280 the tiles of 24 and 48 MP photos. Every window fits the largest,
/// as tiles are at most [`TILE_SIDE`] on a side.
///
/// Padding is not invisible to YuNet: its deeper layers see black as their biases make it, so
/// a face within about 160 input pixels of a window's right or bottom edge moves a little
/// when the padding grows (`examples/bucket_padding.rs`, `tests/fixed_shapes.rs`).
pub const BUCKETS: [(u32, u32); 9] = [
    (320, 320),
    (576, 320),
    (320, 576),
    (768, 480),
    (480, 768),
    (1152, 928),
    (928, 1152),
    (1152, 1152),
    (1280, 1280),
];

/// The bucket TensorRT's optimisation profile tunes its kernels for: the one most windows of
/// the phone, demo and small photos land in (82 of 274, and the most pixels;
/// `examples/detector_shapes.rs`). The labelled photos' small face crops land in 320x320 more
/// often, but cost little wherever they run.
pub const OPT_BUCKET: (u32, u32) = (1280, 1280);

/// The smallest bucket (by area; the earlier of two alike) holding a `width` x `height` input,
/// or `None` when none does (a window larger than every bucket, which the plan never makes).
pub fn bucket_for(width: u32, height: u32) -> Option<(u32, u32)> {
    BUCKETS.iter().copied().filter(|&(w, h)| w >= width && h >= height).min_by_key(|&(w, h)| w as u64 * h as u64)
}

/// One prepared detector input: NCHW floats of `height` x `width`.
pub struct YunetInput {
    pub data: Vec<f32>,
    pub width: u32,
    pub height: u32,
}

/// A window of a photo for a detector worker to render and run. Rendering there, not on the
/// request's thread, lets the workers share a photo's windows: on one thread it took 40 to 65
/// ms of a 12 MP photo's 200.
pub struct WindowJob {
    pub image: Arc<RgbImage>,
    pub window: Window,
}

impl WindowJob {
    /// One job per window of `image`.
    pub fn each(image: &Arc<RgbImage>, windows: &[Window]) -> Vec<WindowJob> {
        windows.iter().map(|&window| WindowJob { image: Arc::clone(image), window }).collect()
    }
}

/// A pass over part (or all) of the photo: where it reads from and the input it makes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Window {
    pub pass: Pass,
    /// Input pixels covered by the photo (the rest, up to the multiple of 32, is black).
    pub content_width: u32,
    pub content_height: u32,
    /// Faces bigger than this (input pixels) are left to a coarser level.
    pub max_face: f32,
}

impl Window {
    pub fn input_size(&self) -> (u32, u32) {
        let round_up = |v: u32| v.max(1).div_ceil(InputSpec::SIZE_MULTIPLE) * InputSpec::SIZE_MULTIPLE;
        (round_up(self.content_width), round_up(self.content_height))
    }

    /// The input size the window runs at: with fixed shapes (`fixed`) its bucket
    /// ([`bucket_for`]), else (or when no bucket holds it) its own [`Window::input_size`].
    pub fn run_size(&self, fixed: bool) -> (u32, u32) {
        let (w, h) = self.input_size();
        if fixed { bucket_for(w, h).unwrap_or((w, h)) } else { (w, h) }
    }

    /// A window of its own around a caller's box, keeping whatever it finds.
    pub fn around(pass: Pass, side: u32) -> Window {
        Window { pass, content_width: side, content_height: side, max_face: f32::INFINITY }
    }

    /// Whether this window reports `d` (input pixels), of a `width` x `height` photo: not when
    /// a coarser level sees it better, nor when an inner tile edge cuts it (the neighbouring
    /// tile, which overlaps by more than any face this level keeps, sees it whole).
    pub fn keeps(&self, d: &Detection, width: u32, height: u32) -> bool {
        if d.width().max(d.height()) > self.max_face {
            return false;
        }
        if !self.pass.tiled {
            return true;
        }
        let p = &self.pass;
        let (cw, ch) = (self.content_width as f32, self.content_height as f32);
        let inner_left = p.origin_x > 0.5;
        let inner_top = p.origin_y > 0.5;
        let inner_right = p.origin_x + cw * p.scale < width as f32 - 0.5;
        let inner_bottom = p.origin_y + ch * p.scale < height as f32 - 0.5;
        const EDGE: f32 = 2.0;
        !((inner_left && d.x1 <= EDGE) || (inner_top && d.y1 <= EDGE) || (inner_right && d.x2 >= cw - EDGE) || (inner_bottom && d.y2 >= ch - EDGE))
    }
}

/// At most this many windows per photo: beyond it the working scale is lowered (the smallest
/// face found grows) rather than the work.
pub const MAX_WINDOWS: usize = 64;
/// At most this many detector input pixels per photo (all windows together), the detector's
/// time budget: about 0.9 s of one core here at tile sizes, enough for a 48 MP photo at the
/// default 40 px minimum face. A photo that would need more is searched at a coarser scale
/// (its smallest findable face grows) instead of costing more.
pub const MAX_INPUT_PIXELS: u64 = 28_000_000;

/// The windows covering a `width` x `height` photo so that faces of `min_face` photo pixels
/// and larger, up to the photo's shorter side, are found. Empty when no face the detector can
/// find fits in the photo (a sliver a few pixels high): there is nothing to look at, and
/// tiling it would cost a pass per sliver.
pub fn plan(width: u32, height: u32, min_face: f32) -> Vec<Window> {
    let (w, h) = (width as f32, height as f32);
    let (long, short) = (w.max(h), w.min(h));
    // Input pixels per photo pixel.
    let needed = MODEL_MIN_FACE / min_face.max(1.0);
    let mut scale = needed.max(WORKING_SIDE / long).min(1.0);
    loop {
        if short * scale < MODEL_MIN_FACE {
            return Vec::new();
        }
        let windows = pyramid(w, h, scale);
        if windows.len() <= MAX_WINDOWS && input_pixels(&windows, false) <= MAX_INPUT_PIXELS {
            return windows;
        }
        scale *= 0.8;
    }
}

/// Detector input pixels of these windows together, as they run (padded to their buckets with
/// fixed shapes, `fixed`): what running them costs.
pub fn input_pixels(windows: &[Window], fixed: bool) -> u64 {
    windows.iter().map(|w| w.run_size(fixed)).map(|(w, h)| w as u64 * h as u64).sum()
}

/// Input pixels per photo pixel of the finest window: a photo decoded at this scale or finer
/// loses nothing the detector would see.
pub fn finest_scale(windows: &[Window]) -> f32 {
    windows.iter().map(|w| 1.0 / w.pass.scale).fold(0.0, f32::max)
}

/// The levels from `finest` down: each [`LEVEL_STEP`] times the one before, except the last,
/// which is the finest scale at which a face as big as the shorter side fits the band.
fn pyramid(w: f32, h: f32, finest: f32) -> Vec<Window> {
    let short = w.min(h);
    let mut windows = Vec::new();
    let mut scale = finest;
    let coarsest = FRAME_FACE / short;
    loop {
        // Compared with a little slack: `coarsest * short` may round to just over the band.
        let last = scale <= coarsest * 1.001;
        windows.extend(level(w, h, scale, last));
        if last {
            return windows;
        }
        // A step that would land just above the coarsest level goes there at once: a face
        // handed off then arrives at 32 px or more instead of 40, still inside the band.
        scale = if scale * LEVEL_STEP * 0.8 <= coarsest { coarsest } else { scale * LEVEL_STEP };
    }
}

/// One level: the photo at `scale`, whole or in tiles of at most [`TILE_SIDE`]. The coarsest
/// level keeps every face; a whole one keeps every face in the band (its landmarks are finer
/// than the next level's); tiles keep only what fits their overlap.
fn level(w: f32, h: f32, scale: f32, coarsest: bool) -> Vec<Window> {
    // Tiles spread evenly: n per axis, each as long as needed for the overlap.
    let split = |extent: f32| -> Vec<(f32, f32)> {
        let input = extent * scale;
        if input <= TILE_SIDE {
            return vec![(0.0, extent)];
        }
        let n = ((input - TILE_OVERLAP) / (TILE_SIDE - TILE_OVERLAP)).ceil().max(1.0);
        let side = (input + (n - 1.0) * TILE_OVERLAP) / n / scale;
        let step = (extent - side) / (n - 1.0).max(1.0);
        (0..n as usize).map(|i| (i as f32 * step, side)).collect()
    };
    let (xs, ys) = (split(w), split(h));
    let tiled = xs.len() * ys.len() > 1;
    let max_face = if coarsest {
        f32::INFINITY
    } else if tiled {
        HANDOFF_FACE
    } else {
        MODEL_MAX_FACE
    };
    let mut windows = Vec::with_capacity(xs.len() * ys.len());
    for &(y, th) in &ys {
        for &(x, tw) in &xs {
            windows.push(Window {
                pass: Pass { origin_x: x, origin_y: y, scale: 1.0 / scale, level: 0, tiled },
                content_width: (tw * scale).round().max(1.0) as u32,
                content_height: (th * scale).round().max(1.0) as u32,
                max_face,
            });
        }
    }
    windows
}

/// Renders a window of the photo as the model's input (antialiased when it shrinks), padded
/// with black to the next multiple of 32.
pub fn render(img: &RgbImage, window: &Window, spec: &InputSpec) -> YunetInput {
    render_padded(img, window, spec, window.input_size())
}

/// Renders a window of the photo padded with black, on the right and at the bottom, to an
/// input of `(width, height)` (at least the window's content).
pub fn render_padded(img: &RgbImage, window: &Window, spec: &InputSpec, (iw, ih): (u32, u32)) -> YunetInput {
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
    let (iw, ih) = (iw.max(cw), ih.max(ch));
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
    session: ModelSession,
    pub input: InputSpec,
    pub id: String,
    /// ONNX output names per stride: cls, obj, bbox, kps.
    outputs: [[String; 4]; 3],
    threshold: f32,
    /// Whether each window runs padded to its bucket ([`BUCKETS`]) rather than to the next
    /// multiple of 32.
    fixed_shapes: bool,
}

impl YunetModel {
    /// Loads the model and runs one small blank input to check that its outputs decode (with
    /// fixed shapes, as `src` says, the smallest bucket: every input is then one of
    /// [`BUCKETS`]).
    pub fn load(src: &SessionSource, entry: &ModelEntry, threshold: f32) -> Result<(Self, ProviderReport)> {
        if !entry.input.dynamic_size || entry.input.channels != 3 {
            return Err(EngineError::Model(format!("detector {} must take 3-channel input of any size", entry.id)));
        }
        let name = |key: String| {
            entry.output(&key).map(str::to_string).ok_or_else(|| EngineError::Model(format!("detector {}: manifest names no output {key}", entry.id)))
        };
        let per_stride = |s: u32| -> Result<[String; 4]> { Ok([name(format!("cls{s}"))?, name(format!("obj{s}"))?, name(format!("bbox{s}"))?, name(format!("kps{s}"))?]) };
        let outputs = [per_stride(8)?, per_stride(16)?, per_stride(32)?];
        let (session, report) = src.session(entry)?;
        let fixed_shapes = src.fixed_shapes();
        let mut m = YunetModel { session, input: entry.input.clone(), id: entry.id.clone(), outputs, threshold, fixed_shapes };
        let (w, h) = if fixed_shapes { BUCKETS[0] } else { (64, 64) };
        m.run(vec![YunetInput { data: vec![0.0; (3 * w * h) as usize], width: w, height: h }])?;
        Ok((m, report))
    }

    /// Renders each window and runs it; detections in input pixels of each window. A window
    /// runs padded to its bucket with fixed shapes, else to the next multiple of 32; either
    /// way what is centred in the padding is dropped: a face there would be one cut by the
    /// window's edge, which a neighbouring tile or a coarser level sees whole, and dropped
    /// before merging it cannot suppress a better detection.
    pub fn run_windows(&mut self, jobs: Vec<WindowJob>) -> Result<Vec<Vec<Detection>>> {
        let mut all = Vec::with_capacity(jobs.len());
        for job in jobs {
            let win = &job.window;
            let input = render_padded(&job.image, win, &self.input, win.run_size(self.fixed_shapes));
            let (cw, ch) = (win.content_width as f32, win.content_height as f32);
            for mut dets in self.run(vec![input])? {
                dets.retain(|d| {
                    let (cx, cy) = ((d.x1 + d.x2) / 2.0, (d.y1 + d.y2) / 2.0);
                    cx < cw && cy < ch
                });
                all.push(dets);
            }
        }
        Ok(all)
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

    /// Photo pixels per input pixel of the finest and coarsest windows.
    fn levels(windows: &[Window]) -> Vec<f32> {
        let mut scales: Vec<f32> = windows.iter().map(|w| w.pass.scale).collect();
        scales.dedup();
        scales
    }

    #[test]
    fn small_photos_run_whole_at_their_own_size() {
        let w = plan(250, 250, 40.0);
        assert_eq!(w.len(), 1);
        assert_eq!((w[0].content_width, w[0].content_height), (250, 250));
        assert_eq!(w[0].input_size(), (256, 256));
        assert_eq!(w[0].max_face, f32::INFINITY);
    }

    #[test]
    fn the_finest_level_brings_the_smallest_face_into_the_band() {
        // 2 MP: a 40 px face needs 0.6; the coarsest level fits the 1200 px short side into the band.
        let w = plan(1600, 1200, 40.0);
        assert_eq!((w[0].content_width, w[0].content_height), (960, 720));
        assert_eq!(w[0].max_face, MODEL_MAX_FACE);
        let last = w.last().unwrap();
        assert!(last.content_height as f32 <= MODEL_MAX_FACE + 1.0 && last.max_face.is_infinite());
        // Smaller wanted faces keep more pixels, in tiles once past the tile side.
        let w = plan(1600, 1200, 20.0);
        assert!(w.iter().filter(|w| w.pass.scale == 1.0).count() > 1);
    }

    #[test]
    fn every_face_size_is_in_the_band_of_a_level_that_keeps_it() {
        for (w, h) in [(3024, 4032), (6000, 8000), (1080, 1920), (250, 250), (4000, 600), (20000, 2000)] {
            let windows = plan(w, h, 40.0);
            let finest = finest_scale(&windows);
            // Every face side from the smallest findable one up to the shorter side.
            let smallest = MODEL_MIN_FACE / finest;
            let mut face = smallest;
            while face <= w.min(h) as f32 {
                let found = windows.iter().any(|win| {
                    let side = face / win.pass.scale;
                    (MODEL_MIN_FACE..=MODEL_MAX_FACE).contains(&side) && side <= win.max_face
                });
                assert!(found, "{w}x{h}: a {face} px face falls in no level's band ({:?})", levels(&windows));
                face *= 1.05;
            }
        }
    }

    #[test]
    fn tiles_overlap_by_more_than_any_face_they_keep() {
        let windows = plan(3024, 4032, 40.0);
        let tiles: Vec<&Window> = windows.iter().filter(|w| w.pass.tiled).collect();
        assert!(tiles.len() > 1);
        for t in &tiles {
            assert!(t.content_width as f32 <= TILE_SIDE + 1.0 && t.content_height as f32 <= TILE_SIDE + 1.0);
            assert!(t.max_face <= TILE_OVERLAP);
        }
        // The tiles reach the far corner.
        let right = tiles.iter().map(|t| t.pass.origin_x + t.content_width as f32 * t.pass.scale).fold(0.0, f32::max);
        let bottom = tiles.iter().map(|t| t.pass.origin_y + t.content_height as f32 * t.pass.scale).fold(0.0, f32::max);
        assert!((right - 3024.0).abs() < 2.0 && (bottom - 4032.0).abs() < 2.0, "{right} {bottom}");
        // A face cut by an inner edge is left to the neighbour; one at the photo's edge is kept.
        let first = tiles[0];
        let edge = first.content_width as f32;
        let cut = Detection { score: 0.9, x1: edge - 50.0, y1: 100.0, x2: edge + 10.0, y2: 160.0, keypoints: vec![] };
        assert!(!first.keeps(&cut, 3024, 4032));
        let at_photo_edge = Detection { score: 0.9, x1: -5.0, y1: 100.0, x2: 60.0, y2: 160.0, keypoints: vec![] };
        assert!(first.keeps(&at_photo_edge, 3024, 4032));
        let big = Detection { score: 0.9, x1: 100.0, y1: 100.0, x2: 400.0, y2: 400.0, keypoints: vec![] };
        assert!(!first.keeps(&big, 3024, 4032));
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
        assert!(plan(8000, 8000, 8.0).len() <= MAX_WINDOWS);
    }

    #[test]
    fn every_photo_within_the_pixel_limit_stays_within_the_detector_budget() {
        for (w, h) in [(6400, 6250), (8000, 6000), (8000, 8000), (20000, 2000), (6325, 6325), (28284, 1414), (1920, 1280)] {
            for min_face in [8.0, 20.0, 40.0] {
                let windows = plan(w, h, min_face);
                assert!(input_pixels(&windows, false) <= MAX_INPUT_PIXELS, "{w}x{h} at {min_face}: {}", input_pixels(&windows, false));
                assert!(finest_scale(&windows) <= 1.0);
            }
        }
        // A 12 MP phone photo stays at the scale its smallest face asks for.
        assert!((finest_scale(&plan(3024, 4032, 40.0)) - 0.6).abs() < 1e-6);
    }

    #[test]
    fn fixed_shapes_count_the_padded_pixels() {
        for (w, h) in [(3024, 4032), (1920, 1537), (250, 250), (8000, 6000)] {
            let windows = plan(w, h, 40.0);
            assert!(input_pixels(&windows, true) >= input_pixels(&windows, false), "{w}x{h}");
        }
        // A window that is a bucket exactly runs at its own size either way.
        let pass = Pass { origin_x: 0.0, origin_y: 0.0, scale: 1.0, level: 0, tiled: false };
        let exact = [Window { pass, content_width: 576, content_height: 320, max_face: f32::INFINITY }];
        assert_eq!(input_pixels(&exact, true), 576 * 320);
        assert_eq!(input_pixels(&exact, false), 576 * 320);
        // One a little smaller runs padded to that bucket.
        let smaller = [Window { content_width: 500, content_height: 300, ..exact[0] }];
        assert_eq!(input_pixels(&smaller, false), 512 * 320);
        assert_eq!(input_pixels(&smaller, true), 576 * 320);
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
}
