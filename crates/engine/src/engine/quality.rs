//! The quality score of a detected face: how usable it is for recognition.

use crate::detection::Detection;
use crate::manifest::Decoder;

use super::crop::FacePoints;

/// Box side in pixels from which a face counts as big enough for the recognisers (their
/// inputs are 112 to 224 pixels; a 64 px face is already upsampled).
const QUALITY_FULL_SIZE: f32 = 64.0;

/// How usable a detected face is for recognition, in [0, 1]: the detector's score, times a
/// size factor (1 from [`QUALITY_FULL_SIZE`] pixels of box side down, linear below it), times
/// frontality (1 when the nose tip sits midway between the eyes along the eye line, 0 when it
/// is level with an eye, as in a profile). Roll does not count: alignment undoes it.
pub fn quality(det: &Detection, decoder: Decoder) -> f32 {
    let Some(p) = FacePoints::of(det, decoder) else { return 0.0 };
    let size = (det.width().min(det.height()) / QUALITY_FULL_SIZE).clamp(0.0, 1.0);
    let (ex, ey) = (p.left_eye.0 - p.right_eye.0, p.left_eye.1 - p.right_eye.1);
    let eye_dist2 = ex * ex + ey * ey;
    if eye_dist2 < 1e-6 {
        return 0.0;
    }
    let mid = ((p.left_eye.0 + p.right_eye.0) / 2.0, (p.left_eye.1 + p.right_eye.1) / 2.0);
    // Nose offset from the eyes' midpoint along the eye line, in eye distances (0 frontal, 0.5 at an eye).
    let along = ((p.nose.0 - mid.0) * ex + (p.nose.1 - mid.1) * ey) / eye_dist2;
    let frontality = (1.0 - 2.0 * along.abs()).clamp(0.0, 1.0);
    (det.score.clamp(0.0, 1.0) * size * frontality).clamp(0.0, 1.0)
}
