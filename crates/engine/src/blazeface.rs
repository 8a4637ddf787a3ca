//! BlazeFace-family face detection: planning the detector passes over a photo, rendering
//! them, decoding the anchor-relative outputs, and the model's session.
//!
//! The detectors see a small square (128–256 px). One pass over a whole 2-megapixel photo
//! shrinks a face at the back of a group to a few pixels, below what the model can find, so
//! the photo is covered by several passes: one over the whole (padded) photo for large faces,
//! then overlapping tiles at finer scales for small ones. Every pass maps its detections back
//! to photo coordinates, and one non-maximum suppression over all passes
//! ([`crate::detection::nms`]) removes the duplicates that overlapping tiles and neighbouring
//! scales produce.

use image::RgbImage;

use crate::detection::{Detection, Pass};
use crate::error::{EngineError, Result};

/// Keypoints every BlazeFace variant returns, in this order (the subject's right eye is the
/// one on the left of an unmirrored photo).
pub const KEYPOINTS: usize = 6;
/// Index of each keypoint in a detection.
pub mod kp {
    pub const RIGHT_EYE: usize = 0;
    pub const LEFT_EYE: usize = 1;
    pub const NOSE: usize = 2;
    pub const MOUTH: usize = 3;
    pub const RIGHT_EAR: usize = 4;
    pub const LEFT_EAR: usize = 5;
}

/// Anchor centres in detector-input pixels, in the order the model emits its rows.
///
/// Two layouts exist in the family: the short-range one (a grid at stride S/16 with 2 anchors
/// per cell followed by a grid at stride S/8 with 6) and the full-range one (a single grid at
/// stride 4 with one anchor per cell). The layout is chosen by the total row count.
pub fn anchors(input: u32, total: usize) -> Result<Vec<(f32, f32)>> {
    let s = input as f32;
    let grid = |stride: f32, per_cell: usize, out: &mut Vec<(f32, f32)>| {
        let cells = (s / stride).ceil() as usize;
        for gy in 0..cells {
            for gx in 0..cells {
                for _ in 0..per_cell {
                    out.push((stride * (gx as f32 + 0.5), stride * (gy as f32 + 0.5)));
                }
            }
        }
    };
    let mut short = Vec::new();
    grid(s / 16.0, 2, &mut short);
    grid(s / 8.0, 6, &mut short);
    if short.len() == total {
        return Ok(short);
    }
    let mut full = Vec::new();
    grid(4.0, 1, &mut full);
    if full.len() == total {
        return Ok(full);
    }
    Err(EngineError::Model(format!("no known anchor layout has {total} anchors for a {input}px detector")))
}

/// One output tensor of a detector run: `rows` x `cols` values (batch already split off).
#[derive(Debug, Clone)]
pub struct Head<'a> {
    pub rows: usize,
    pub cols: usize,
    pub data: &'a [f32],
}

/// Puts a detector's outputs into one score column and one 16-value regression row per
/// anchor, in anchor order.
///
/// Converted models differ in how they split heads: some give one `[N, 17]` tensor (score
/// first), others separate `[N, 1]` scores and `[N, 16]` boxes per feature map. Heads are
/// matched by row count and the finer feature map (more rows) comes first, as in the anchors.
pub fn gather_heads(heads: &[Head<'_>]) -> Result<(Vec<f32>, Vec<[f32; 16]>)> {
    let mut combined: Vec<&Head> = heads.iter().filter(|h| h.cols == 17).collect();
    let mut scores: Vec<&Head> = heads.iter().filter(|h| h.cols == 1).collect();
    let mut boxes: Vec<&Head> = heads.iter().filter(|h| h.cols == 16).collect();
    let by_rows_desc = |a: &&Head, b: &&Head| b.rows.cmp(&a.rows);
    combined.sort_by(by_rows_desc);
    scores.sort_by(by_rows_desc);
    boxes.sort_by(by_rows_desc);
    let mut out_scores = Vec::new();
    let mut out_boxes = Vec::new();
    if !combined.is_empty() {
        for h in combined {
            for r in h.data.chunks_exact(17).take(h.rows) {
                out_scores.push(r[0]);
                out_boxes.push(r[1..17].try_into().expect("16 values"));
            }
        }
        return Ok((out_scores, out_boxes));
    }
    if scores.len() != boxes.len() || scores.is_empty() || scores.iter().zip(&boxes).any(|(s, b)| s.rows != b.rows) {
        return Err(EngineError::Model("detector outputs do not pair up into score and box heads".into()));
    }
    for (s, b) in scores.iter().zip(&boxes) {
        out_scores.extend_from_slice(&s.data[..s.rows]);
        for r in b.data.chunks_exact(16).take(b.rows) {
            out_boxes.push(r.try_into().expect("16 values"));
        }
    }
    Ok((out_scores, out_boxes))
}

#[inline]
fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x.clamp(-80.0, 80.0)).exp())
}

/// Decodes raw scores (logits) and regressions into detections above `threshold`, in detector
/// input pixels. Regressions are offsets from the anchor centre for the box centre and the
/// keypoints, and absolute width and height, all in input pixels.
pub fn decode(scores: &[f32], regressions: &[[f32; 16]], anchors: &[(f32, f32)], threshold: f32) -> Vec<Detection> {
    let mut out = Vec::new();
    for ((&logit, r), &(ax, ay)) in scores.iter().zip(regressions).zip(anchors) {
        let score = sigmoid(logit);
        if score < threshold {
            continue;
        }
        let (cx, cy, w, h) = (ax + r[0], ay + r[1], r[2], r[3]);
        if !(w > 0.0 && h > 0.0) {
            continue;
        }
        let keypoints = (0..KEYPOINTS).map(|k| (ax + r[4 + 2 * k], ay + r[5 + 2 * k])).collect();
        out.push(Detection { score, x1: cx - w / 2.0, y1: cy - h / 2.0, x2: cx + w / 2.0, y2: cy + h / 2.0, keypoints });
    }
    out
}

/// How the photo is covered by detector passes.
#[derive(Debug, Clone, Copy)]
pub struct PlanOptions {
    /// Side of the square detector input.
    pub input: u32,
    /// The whole-photo pass places the photo in a square this many times its longer side, so
    /// tight face crops (a face filling the frame) still look like a face in a scene.
    pub global_pad: f32,
    /// Faces smaller than this (photo pixels, box side) are not searched for; sets how fine
    /// the finest tiles are.
    pub min_face: f32,
    /// The smallest face, as a fraction of the detector input, that the model finds reliably.
    pub model_min_face: f32,
    /// Tiles never magnify the photo beyond this factor.
    pub max_upscale: f32,
}

impl Default for PlanOptions {
    fn default() -> Self {
        PlanOptions { input: 256, global_pad: 1.5, min_face: 40.0, model_min_face: 0.1, max_upscale: 1.0 }
    }
}

/// The passes covering a `width` x `height` photo, and the pyramid scales they read from
/// (photo pixels per level pixel).
pub fn plan(width: u32, height: u32, opts: &PlanOptions) -> (Vec<Pass>, Vec<f32>) {
    let s = opts.input as f32;
    let long = width.max(height) as f32;
    let mut passes = Vec::new();
    let mut levels: Vec<f32> = Vec::new();
    // Whole photo, centred in a padded square.
    let side = long * opts.global_pad.max(1.0);
    let scale = side / s;
    levels.push(scale);
    passes.push(Pass {
        origin_x: (width as f32 - side) / 2.0,
        origin_y: (height as f32 - side) / 2.0,
        scale,
        level: 0,
        tiled: false,
    });
    // Tiles: each level halves the tile side, until tiles are small enough that a face of
    // `min_face` photo pixels is `model_min_face` of the detector input.
    let finest = (opts.min_face / opts.model_min_face).max(s / opts.max_upscale);
    let mut tile = long / 2.0;
    while tile >= finest {
        let scale = tile / s;
        let level = levels.len();
        levels.push(scale);
        let step = tile / 2.0;
        let starts = |extent: f32| -> Vec<f32> {
            if extent <= tile {
                return vec![(extent - tile) / 2.0];
            }
            let n = ((extent - tile) / step).ceil() as usize;
            // Spread the tiles evenly so the last one ends at the photo edge.
            (0..=n).map(|i| i as f32 * (extent - tile) / n as f32).collect()
        };
        for &y in &starts(height as f32) {
            for &x in &starts(width as f32) {
                passes.push(Pass { origin_x: x, origin_y: y, scale, level, tiled: true });
            }
        }
        tile /= 2.0;
    }
    (passes, levels)
}

/// Largest face, as a fraction of the detector input, that a tile pass reports. Below one half
/// (the factor between tile levels) so that every size is still covered with some overlap;
/// measured on the demo and labelled photos, where 0.5 let background texture through.
pub const TILE_MAX_FACE: f32 = 0.4;

/// Whether a tiled pass should leave this detection (in detector-input pixels) to a coarser
/// pass: each tile level halves the tile, so a face filling more than 0.4 of a tile is at most
/// 0.2 of the tile, and comfortably detectable, one level up (or in the whole-photo pass). Large
/// boxes in fine tiles are mostly texture (hair, clothing) seen too close.
pub fn too_big_for_tile(pass: &Pass, d: &Detection, input: u32) -> bool {
    pass.tiled && d.width().max(d.height()) > TILE_MAX_FACE * input as f32
}

/// Whether a detection (in detector-input pixels) of a tiled pass touches an edge of the tile
/// that lies inside the photo, i.e. the face may continue in the neighbouring tile.
pub fn cut_by_tile_edge(pass: &Pass, d: &Detection, input: u32, photo_w: u32, photo_h: u32) -> bool {
    if !pass.tiled {
        return false;
    }
    let s = input as f32;
    let margin = 0.02 * s;
    let inner = |tile_edge_photo: f32, photo_edge: f32| (tile_edge_photo - photo_edge).abs() > pass.scale * 2.0;
    let left = pass.origin_x;
    let top = pass.origin_y;
    let right = pass.origin_x + s * pass.scale;
    let bottom = pass.origin_y + s * pass.scale;
    (d.x1 < margin && inner(left, 0.0) && left > 0.0)
        || (d.y1 < margin && inner(top, 0.0) && top > 0.0)
        || (d.x2 > s - margin && inner(right, photo_w as f32) && right < photo_w as f32)
        || (d.y2 > s - margin && inner(bottom, photo_h as f32) && bottom < photo_h as f32)
}

/// The photo resampled at each pyramid scale (photo pixels per level pixel).
///
/// Shrinking uses a bilinear filter sized to the scale, which averages the pixels a level
/// pixel covers; sampling the original photo directly would alias small faces into noise.
pub fn pyramid(photo: &RgbImage, scales: &[f32]) -> Vec<RgbImage> {
    let (w, h) = photo.dimensions();
    scales
        .iter()
        .map(|&sc| {
            let lw = ((w as f32 / sc).round() as u32).max(1);
            let lh = ((h as f32 / sc).round() as u32).max(1);
            if lw == w && lh == h {
                photo.clone()
            } else {
                crate::align::resize_region(photo, [0.0, 0.0, w as f64, h as f64], lw, lh)
            }
        })
        .collect()
}

/// Writes the detector input for `pass` as NHWC floats (`value = pixel * scale + offset`),
/// padding outside the photo with black.
pub fn render_pass(level_img: &RgbImage, photo_w: u32, photo_h: u32, pass: &Pass, spec: &crate::manifest::InputSpec, out: &mut [f32]) {
    let (input, scale, offset) = (spec.width, spec.scale, spec.offset);
    let (lw, lh) = level_img.dimensions();
    // Level pixels per photo pixel on each axis (levels are rounded to whole pixels).
    let kx = lw as f32 / photo_w as f32;
    let ky = lh as f32 / photo_h as f32;
    let pad = offset; // black
    let raw = level_img.as_raw();
    let s = input as usize;
    for v in 0..s {
        for u in 0..s {
            let px = pass.origin_x + (u as f32 + 0.5) * pass.scale;
            let py = pass.origin_y + (v as f32 + 0.5) * pass.scale;
            let lx = (px * kx).floor();
            let ly = (py * ky).floor();
            let o = (v * s + u) * 3;
            if lx < 0.0 || ly < 0.0 || lx >= lw as f32 || ly >= lh as f32 {
                out[o] = pad;
                out[o + 1] = pad;
                out[o + 2] = pad;
                continue;
            }
            let i = (ly as usize * lw as usize + lx as usize) * 3;
            out[o] = raw[i] as f32 * scale + offset;
            out[o + 1] = raw[i + 1] as f32 * scale + offset;
            out[o + 2] = raw[i + 2] as f32 * scale + offset;
        }
    }
}

/// A BlazeFace session, owned by one detector worker thread.
pub struct BlazefaceModel {
    session: crate::runtime::ModelSession,
    pub input: crate::manifest::InputSpec,
    pub id: String,
    anchors: Vec<(f32, f32)>,
    max_batch: usize,
    /// The batch sizes it runs at, with fixed shapes.
    batch_sizes: Option<Vec<usize>>,
    threshold: f32,
}

impl BlazefaceModel {
    /// Loads the model and runs one blank input to check that its outputs decode.
    pub fn load(src: &crate::runtime::SessionSource, entry: &crate::manifest::ModelEntry, threshold: f32) -> Result<(Self, crate::runtime::ProviderReport)> {
        if entry.input.channels != 3 {
            return Err(EngineError::Model(format!("detector {} must take RGB input", entry.id)));
        }
        if entry.input.layout != crate::manifest::Layout::NHWC {
            return Err(EngineError::Model(format!("detector {} must take NHWC input", entry.id)));
        }
        if entry.input.width != entry.input.height {
            return Err(EngineError::Model(format!("detector {} must take a square input", entry.id)));
        }
        let (session, report) = src.session(entry)?;
        let max_batch = if entry.input.dynamic_batch { src.max_batch.max(1) } else { 1 };
        let batch_sizes = src.batch_sizes(max_batch);
        let mut m = BlazefaceModel { session, input: entry.input.clone(), id: entry.id.clone(), anchors: Vec::new(), max_batch, batch_sizes, threshold };
        let blank = vec![0f32; entry.input.values_per_image()];
        m.run(vec![blank])?;
        Ok((m, report))
    }

    /// Runs prepared inputs (NHWC floats, one pass each) and returns each pass's detections in
    /// detector-input pixels.
    /// With fixed shapes a batch runs at the next batch size, padded with blank inputs whose
    /// detections are dropped (see [`crate::shapes`]).
    pub fn run(&mut self, inputs: Vec<Vec<f32>>) -> Result<Vec<Vec<Detection>>> {
        let mut all = Vec::with_capacity(inputs.len());
        let mut inputs = inputs.into_iter().peekable();
        while inputs.peek().is_some() {
            let chunk: Vec<Vec<f32>> = inputs.by_ref().take(self.max_batch).collect();
            let batch = chunk.len();
            let rows = self.batch_sizes.as_deref().map_or(batch, |s| crate::shapes::batch_for(batch, s));
            let mut data: Vec<f32> = chunk.concat();
            data.resize(rows * self.input.values_per_image(), 0.0);
            let size = self.input.width;
            let outputs = crate::runtime::run_images(&mut self.session, &self.input, rows, size, size, data)?;
            for b in 0..batch {
                let heads: Vec<Head> = outputs
                    .iter()
                    .map(|o| {
                        let per = o.data.len() / rows;
                        let cols = *o.shape.last().unwrap_or(&1) as usize;
                        Head { rows: per / cols.max(1), cols, data: &o.data[b * per..(b + 1) * per] }
                    })
                    .collect();
                let (scores, regressions) = gather_heads(&heads)?;
                if self.anchors.len() != scores.len() {
                    self.anchors = anchors(size, scores.len())?;
                }
                all.push(decode(&scores, &regressions, &self.anchors, self.threshold));
            }
        }
        Ok(all)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn det(score: f32, x1: f32, y1: f32, x2: f32, y2: f32) -> Detection {
        Detection { score, x1, y1, x2, y2, keypoints: vec![((x1 + x2) / 2.0, (y1 + y2) / 2.0); KEYPOINTS] }
    }

    #[test]
    fn anchor_layouts() {
        let a = anchors(256, 896).unwrap();
        assert_eq!(a.len(), 896);
        // First grid: stride 16, two anchors per cell, row-major.
        assert_eq!(a[0], (8.0, 8.0));
        assert_eq!(a[1], (8.0, 8.0));
        assert_eq!(a[2], (24.0, 8.0));
        assert_eq!(a[32], (8.0, 24.0));
        // Second grid starts at row 512: stride 32, six per cell.
        assert_eq!(a[512], (16.0, 16.0));
        assert_eq!(a[517], (16.0, 16.0));
        assert_eq!(a[518], (48.0, 16.0));
        let a = anchors(128, 896).unwrap();
        assert_eq!(a[0], (4.0, 4.0));
        assert_eq!(a[512], (8.0, 8.0));
        let f = anchors(192, 2304).unwrap();
        assert_eq!(f[0], (2.0, 2.0));
        assert_eq!(f[48], (2.0, 6.0));
        assert!(anchors(256, 100).is_err());
    }

    #[test]
    fn heads_pair_by_rows_finer_first() {
        let s512 = vec![1.0; 512];
        let s384 = vec![2.0; 384];
        let b512 = vec![0.5; 512 * 16];
        let b384 = vec![0.25; 384 * 16];
        // Given in an arbitrary order, as converters do.
        let heads = [
            Head { rows: 384, cols: 16, data: &b384 },
            Head { rows: 512, cols: 1, data: &s512 },
            Head { rows: 384, cols: 1, data: &s384 },
            Head { rows: 512, cols: 16, data: &b512 },
        ];
        let (scores, boxes) = gather_heads(&heads).unwrap();
        assert_eq!(scores.len(), 896);
        assert_eq!((scores[0], scores[511], scores[512]), (1.0, 1.0, 2.0));
        assert_eq!((boxes[0][0], boxes[512][0]), (0.5, 0.25));
        let combined: Vec<f32> = (0..4 * 17).map(|i| i as f32).collect();
        let (scores, boxes) = gather_heads(&[Head { rows: 4, cols: 17, data: &combined }]).unwrap();
        assert_eq!(scores, vec![0.0, 17.0, 34.0, 51.0]);
        assert_eq!(boxes[1][0], 18.0);
        assert!(gather_heads(&[Head { rows: 4, cols: 1, data: &s384 }]).is_err());
    }

    #[test]
    fn decode_applies_anchor_offsets_and_sigmoid() {
        let anchors = vec![(100.0, 50.0), (10.0, 10.0)];
        let mut r = [0f32; 16];
        r[0] = 2.0; // centre x offset
        r[1] = -4.0;
        r[2] = 40.0; // width
        r[3] = 60.0;
        r[4] = -10.0; // right eye offset
        r[5] = -8.0;
        let dets = decode(&[0.0, -10.0], &[r, r], &anchors, 0.4);
        assert_eq!(dets.len(), 1, "second anchor is below threshold");
        let d = &dets[0];
        assert!((d.score - 0.5).abs() < 1e-6);
        assert_eq!((d.x1, d.y1, d.x2, d.y2), (82.0, 16.0, 122.0, 76.0));
        assert_eq!(d.keypoints[0], (90.0, 42.0));
    }

    #[test]
    fn plan_covers_the_photo_and_maps_back() {
        let opts = PlanOptions { input: 256, global_pad: 1.5, min_face: 40.0, model_min_face: 0.1, max_upscale: 1.0 };
        let (passes, levels) = plan(1920, 1280, &opts);
        assert_eq!(passes[0].level, 0);
        assert!(!passes[0].tiled);
        // The global pass is centred: input centre maps to photo centre.
        let c = passes[0].to_photo(&det(1.0, 128.0, 128.0, 128.0, 128.0));
        assert!((c.x1 - 960.0).abs() < 1e-3 && (c.y1 - 640.0).abs() < 1e-3);
        // Tiles at 960 and 480 photo px (finest allowed: 400).
        assert_eq!(levels.len(), 3);
        assert!((levels[1] - 960.0 / 256.0).abs() < 1e-5);
        // Every photo point is inside some tile of each level.
        for level in 1..levels.len() {
            let tiles: Vec<_> = passes.iter().filter(|p| p.level == level).collect();
            for y in (0..1280).step_by(37) {
                for x in (0..1920).step_by(41) {
                    let (x, y) = (x as f32, y as f32);
                    assert!(tiles.iter().any(|p| x >= p.origin_x && y >= p.origin_y && x < p.origin_x + 256.0 * p.scale && y < p.origin_y + 256.0 * p.scale));
                }
            }
        }
        // A small photo gets only the global pass.
        let (passes, _) = plan(150, 150, &opts);
        assert_eq!(passes.len(), 1);
    }

    #[test]
    fn tile_edge_cut_detection() {
        let pass = Pass { origin_x: 480.0, origin_y: 0.0, scale: 2.0, level: 1, tiled: true };
        // Touches the left edge, which is inside the photo.
        assert!(cut_by_tile_edge(&pass, &det(1.0, 1.0, 50.0, 40.0, 90.0), 256, 1920, 1280));
        // Touches the top edge, which is the photo's own edge: kept.
        assert!(!cut_by_tile_edge(&pass, &det(1.0, 50.0, 0.0, 90.0, 40.0), 256, 1920, 1280));
        assert!(!cut_by_tile_edge(&pass, &det(1.0, 50.0, 50.0, 90.0, 90.0), 256, 1920, 1280));
    }

    #[test]
    fn render_pads_outside_with_black_and_normalises() {
        let img = RgbImage::from_pixel(4, 4, image::Rgb([255, 255, 255]));
        let pass = Pass { origin_x: -2.0, origin_y: -2.0, scale: 1.0, level: 0, tiled: false };
        let mut out = vec![0f32; 8 * 8 * 3];
        let spec: crate::manifest::InputSpec = serde_json::from_str(
            r#"{"name":"x","height":8,"width":8,"channels":3,"scale":0.00784313725490196,"offset":-1.0}"#,
        )
        .unwrap();
        render_pass(&img, 4, 4, &pass, &spec, &mut out);
        assert_eq!(out[0], -1.0);
        let centre = (3 * 8 + 3) * 3;
        assert!((out[centre] - 1.0).abs() < 1e-6);
    }
}
