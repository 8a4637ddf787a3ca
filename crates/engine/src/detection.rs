//! What every detector family decodes into, and how the detections of overlapping passes are
//! merged: a [`Detection`] in the frame it was decoded in, the [`Pass`] that maps it back to
//! the photo, and non-maximum suppression ([`nms`]). BlazeFace ([`crate::blazeface`]) and
//! YuNet ([`crate::yunet`]) both build on these.

/// A face found by a detector, in the coordinate frame of whatever it was decoded in
/// (detector input pixels first, photo pixels after [`Pass::to_photo`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Detection {
    pub score: f32,
    pub x1: f32,
    pub y1: f32,
    pub x2: f32,
    pub y2: f32,
    /// In the detector family's own order ([`crate::blazeface::kp`] for BlazeFace, [`crate::yunet::kp`] for YuNet).
    pub keypoints: Vec<(f32, f32)>,
}

impl Detection {
    /// Box width, 0 for an inverted box.
    pub fn width(&self) -> f32 {
        (self.x2 - self.x1).max(0.0)
    }
    /// Box height, 0 for an inverted box.
    pub fn height(&self) -> f32 {
        (self.y2 - self.y1).max(0.0)
    }
    /// Box area, 0 for an inverted box.
    pub fn area(&self) -> f32 {
        self.width() * self.height()
    }
    fn intersection(&self, o: &Detection) -> f32 {
        let w = (self.x2.min(o.x2) - self.x1.max(o.x1)).max(0.0);
        let h = (self.y2.min(o.y2) - self.y1.max(o.y1)).max(0.0);
        w * h
    }
    /// Intersection over union.
    pub fn iou(&self, o: &Detection) -> f32 {
        let inter = self.intersection(o);
        let union = self.area() + o.area() - inter;
        if union <= 0.0 { 0.0 } else { inter / union }
    }
    /// Intersection over the smaller box: high when one box sits inside the other.
    pub fn overlap_of_smaller(&self, o: &Detection) -> f32 {
        let smaller = self.area().min(o.area());
        if smaller <= 0.0 { 0.0 } else { self.intersection(o) / smaller }
    }
}

/// One detector run: a window of a (rescaled) photo.
///
/// Input pixel `(u, v)` shows photo point `(origin_x + u * scale, origin_y + v * scale)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pass {
    pub origin_x: f32,
    pub origin_y: f32,
    pub scale: f32,
    /// Index into the pyramid returned with BlazeFace's plan ([`crate::blazeface::plan`]); YuNet's
    /// windows render straight from the photo and leave it 0.
    pub level: usize,
    /// Whether this pass covers only part of the photo; detections touching an inner edge of
    /// such a tile are dropped because a neighbouring tile sees that face whole.
    pub tiled: bool,
}

impl Pass {
    /// Photo pixels → detector-input pixels, for rendering the pass through a warp.
    pub fn photo_to_input(&self) -> crate::align::Affine {
        let k = 1.0 / self.scale;
        crate::align::Affine { a: k, b: 0.0, c: -self.origin_x * k, d: 0.0, e: k, f: -self.origin_y * k }
    }

    /// Maps a detection from detector-input pixels to photo pixels.
    pub fn to_photo(&self, d: &Detection) -> Detection {
        let m = |x: f32, y: f32| (self.origin_x + x * self.scale, self.origin_y + y * self.scale);
        let (x1, y1) = m(d.x1, d.y1);
        let (x2, y2) = m(d.x2, d.y2);
        let keypoints = d.keypoints.iter().map(|p| m(p.0, p.1)).collect();
        Detection { score: d.score, x1, y1, x2, y2, keypoints }
    }
}

/// How overlapping detections are merged.
#[derive(Debug, Clone, Copy)]
pub struct NmsOptions {
    /// Boxes overlapping the kept one by more than this IoU are merged into it.
    pub iou: f32,
    /// Boxes covered by the kept one over this fraction of their own area are merged too:
    /// catches a partial face found by a tile next to the whole face found by another pass.
    pub containment: f32,
    /// Average the merged boxes and keypoints weighted by score (steadier boxes), instead of
    /// keeping the best one as is.
    pub weighted: bool,
}

impl Default for NmsOptions {
    fn default() -> Self {
        NmsOptions { iou: 0.3, containment: 0.65, weighted: true }
    }
}

/// Non-maximum suppression, best score first. Returns detections sorted by score.
pub fn nms(mut dets: Vec<Detection>, opts: NmsOptions) -> Vec<Detection> {
    dets.sort_by(|a, b| b.score.total_cmp(&a.score));
    let mut used = vec![false; dets.len()];
    let mut kept = Vec::new();
    for i in 0..dets.len() {
        if used[i] {
            continue;
        }
        used[i] = true;
        let best = &dets[i];
        let mut group = vec![i];
        for j in i + 1..dets.len() {
            if !used[j] && (best.iou(&dets[j]) > opts.iou || best.overlap_of_smaller(&dets[j]) > opts.containment) {
                used[j] = true;
                group.push(j);
            }
        }
        if !opts.weighted || group.len() == 1 {
            kept.push(best.clone());
            continue;
        }
        // Only boxes that really describe the same face (not a contained fragment) are
        // averaged; fragments are just dropped.
        let members: Vec<&Detection> = group.iter().map(|&g| &dets[g]).filter(|d| best.iou(d) > opts.iou).collect();
        let total: f32 = members.iter().map(|d| d.score).sum();
        let avg = |f: &dyn Fn(&Detection) -> f32| members.iter().map(|d| f(d) * d.score).sum::<f32>() / total;
        let mut merged = best.clone();
        merged.x1 = avg(&|d| d.x1);
        merged.y1 = avg(&|d| d.y1);
        merged.x2 = avg(&|d| d.x2);
        merged.y2 = avg(&|d| d.y2);
        for k in 0..merged.keypoints.len() {
            merged.keypoints[k] = (avg(&|d| d.keypoints[k].0), avg(&|d| d.keypoints[k].1));
        }
        kept.push(merged);
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    fn det(score: f32, x1: f32, y1: f32, x2: f32, y2: f32) -> Detection {
        Detection { score, x1, y1, x2, y2, keypoints: vec![((x1 + x2) / 2.0, (y1 + y2) / 2.0); 5] }
    }

    #[test]
    fn nms_merges_overlaps_and_keeps_separate_faces() {
        let dets = vec![
            det(0.9, 0.0, 0.0, 10.0, 10.0),
            det(0.8, 1.0, 1.0, 11.0, 11.0),
            det(0.7, 50.0, 50.0, 60.0, 60.0),
            det(0.6, 2.0, 2.0, 6.0, 6.0), // fragment inside the first
        ];
        let plain = nms(dets.clone(), NmsOptions { weighted: false, ..Default::default() });
        assert_eq!(plain.len(), 2);
        assert_eq!(plain[0], dets[0]);
        let weighted = nms(dets, NmsOptions::default());
        assert_eq!(weighted.len(), 2);
        let m = &weighted[0];
        assert_eq!(m.score, 0.9);
        // Score-weighted mean of the two overlapping boxes: 0.8/(1.7) of the way to 1.0.
        assert!((m.x1 - 0.8 / 1.7).abs() < 1e-5, "{m:?}");
        assert_eq!(weighted[1].x1, 50.0);
    }

    #[test]
    fn iou_maths() {
        let a = det(1.0, 0.0, 0.0, 10.0, 10.0);
        let b = det(1.0, 5.0, 0.0, 15.0, 10.0);
        assert!((a.iou(&b) - 50.0 / 150.0).abs() < 1e-6);
        let inner = det(1.0, 2.0, 2.0, 4.0, 4.0);
        assert_eq!(a.overlap_of_smaller(&inner), 1.0);
        assert_eq!(a.iou(&det(1.0, 20.0, 20.0, 30.0, 30.0)), 0.0);
    }
}
