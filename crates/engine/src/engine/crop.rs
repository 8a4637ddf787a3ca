//! Face crops for the recogniser-type models: the candidate faces they are cut around, where a
//! detection's eyes, nose and mouth are, the templates they are fitted to, and the photo → crop
//! transform of each model's input.

use image::RgbImage;

use crate::align::{self, Affine};
use crate::attributes;
use crate::blazeface::{self, kp};
use crate::detection::Detection;
use crate::manifest::{Alignment, Decoder, InputSpec, ModelEntry};
use crate::yunet;

/// Canonical keypoint positions (right eye, left eye, nose, mouth) as fractions of a square of
/// the detector box's size centred on the box: the median detector keypoints over 138 faces of
/// the demo and labelled photos, made left-right symmetric. Aligning to where the detector puts
/// keypoints on an average face keeps the crop framed as the recogniser's publisher framed it
/// (box-centred), while levelling the eyes. Ears are left out because they vanish or swing with
/// head yaw. On the labelled identities this gave ROC AUC 0.992 (cosine, faceres).
const FACE_TEMPLATE: [(f32, f32); 4] = [(0.295, 0.29), (0.705, 0.29), (0.5, 0.555), (0.5, 0.75)];
/// The five-point template of ArcFace-style recognisers on their 112x112 crop: right eye, left
/// eye, nose tip, right and left mouth corner (the subject's right is on the image's left).
const ARCFACE_TEMPLATE: [(f32, f32); 5] =
    [(38.2946, 51.6963), (73.5318, 51.5014), (56.0252, 71.7366), (41.5493, 92.3655), (70.7299, 92.2041)];
const ARCFACE_SIDE: f32 = 112.0;
/// The recogniser crop is the detector box enlarged this much (as the FaceRes pipeline it was
/// published with does).
const RECOGNIZER_CROP: f32 = 1.4;
/// Emotion models were trained on tight face crops.
pub(super) const EMOTION_CROP: f32 = 1.0;
/// Side of a dlib face chip (padding 0.2) over the detector box's side, for the upright crop
/// used without keypoints (and the plausibility check of the fitted one): over the 165 YuNet faces of the
/// labelled photos the chip fitted to the eyes is 1.02 box sides (median; 0.79 to 1.19 from
/// the 5th to the 95th percentile), centred 0.04 chip sides below the box centre.
const DLIB_CHIP_CROP: f32 = 1.0;
/// Where YuNet's five points (image-left eye, image-right eye, nose tip, image-left and
/// image-right mouth corner) sit on dlib's face chip, as fractions of the unpadded chip:
/// the Procrustes mean of YuNet's points mapped into the chips dlib cuts from its own
/// five-point landmarks, over 1,553 LFW photos (`bench/engine/dlib-chip-fit.py`). Fitting all
/// five points to it moves the chip's corners 9.2 chip pixels from dlib's own chip on average
/// (150 px chip, padding 0.25), against 12.2 for the two eye centres alone.
const DLIB_CHIP_YUNET_TEMPLATE: [(f32, f32); 5] =
    [(0.223_084, 0.203_03), (0.790_41, 0.204_265), (0.503_149, 0.525_01), (0.263_403, 0.777_688), (0.749_046, 0.785_468)];

/// A face on its way through the pipeline, in decoded-image coordinates: what a crop is cut
/// around. Kept beside the crops rather than with the pipeline or the detector stage, which
/// both make candidates, so that the crops depend on neither.
pub(super) struct Candidate {
    pub(super) det: Detection,
    /// Whether `det`'s keypoints were found (a caller's box without them is cropped upright).
    pub(super) has_keypoints: bool,
    /// The caller's box, reported instead of `det`'s, where `det` is the detector's face it names.
    pub(super) shown: Option<Detection>,
}

/// A recogniser-type stage's input and where the face sits in it.
#[derive(Clone)]
pub(super) struct CropSpec {
    input: InputSpec,
    alignment: Alignment,
    /// Context around the detector box (box alignment only).
    enlarge: f32,
    /// dlib chips: the padding the model was trained with.
    chip_padding: f32,
}

impl CropSpec {
    pub(super) fn of(entry: &ModelEntry, enlarge: f32) -> CropSpec {
        let chip_padding = entry.chip_padding.unwrap_or(attributes::DLIB_CHIP_PADDING);
        CropSpec { input: entry.input.clone(), alignment: entry.alignment, enlarge, chip_padding }
    }

    /// A recogniser's or an age or gender model's crop: its own chip, else the box crop.
    pub(super) fn face_model(entry: &ModelEntry) -> CropSpec {
        let spec = CropSpec::of(entry, RECOGNIZER_CROP);
        if !entry.alignment.is_dlib_chip() {
            return spec;
        }
        // The upright fallback grows with the chip's padding, measured at dlib's default.
        let enlarge = DLIB_CHIP_CROP * (1.0 + 2.0 * spec.chip_padding) / (1.0 + 2.0 * attributes::DLIB_CHIP_PADDING);
        CropSpec { enlarge, ..spec }
    }

    /// The model input for one face; `decoder` says in which order its keypoints come.
    pub(super) fn cut(&self, img: &RgbImage, c: &Candidate, decoder: Decoder) -> Vec<u8> {
        let input = &self.input;
        let t = face_transform(c, decoder, self, input.width);
        let t = if input.width == input.height {
            t
        } else {
            // Non-square inputs: stretch the square crop's height.
            align::compose(&Affine { a: 1.0, b: 0.0, c: 0.0, d: 0.0, e: input.height as f32 / input.width as f32, f: 0.0 }, &t)
        };
        align::warp_antialiased(img, &t, input.width, input.height)
    }
}

/// Eyes, nose and mouth of a detection, whatever the detector family.
pub(super) struct FacePoints {
    pub(super) right_eye: (f32, f32),
    pub(super) left_eye: (f32, f32),
    pub(super) nose: (f32, f32),
    /// Mouth centre.
    mouth: (f32, f32),
    /// Right and left mouth corners, when the detector gives them.
    corners: Option<[(f32, f32); 2]>,
}

impl FacePoints {
    pub(super) fn of(det: &Detection, decoder: Decoder) -> Option<FacePoints> {
        let p = &det.keypoints;
        match decoder {
            Decoder::Blazeface if p.len() == blazeface::KEYPOINTS => Some(FacePoints {
                right_eye: p[kp::RIGHT_EYE],
                left_eye: p[kp::LEFT_EYE],
                nose: p[kp::NOSE],
                mouth: p[kp::MOUTH],
                corners: None,
            }),
            Decoder::Yunet if p.len() == yunet::KEYPOINTS => {
                let (r, l) = (p[yunet::kp::MOUTH_RIGHT], p[yunet::kp::MOUTH_LEFT]);
                Some(FacePoints {
                    right_eye: p[yunet::kp::RIGHT_EYE],
                    left_eye: p[yunet::kp::LEFT_EYE],
                    nose: p[yunet::kp::NOSE],
                    mouth: ((r.0 + l.0) / 2.0, (r.1 + l.1) / 2.0),
                    corners: Some([r, l]),
                })
            }
            _ => None,
        }
    }
}

/// Photo → crop transform for one face: keypoints fitted to the recogniser's template when
/// there are keypoints, else an upright square around the box.
fn face_transform(c: &Candidate, decoder: Decoder, spec: &CropSpec, out: u32) -> Affine {
    let d = &c.det;
    let side = d.width().max(d.height()) * spec.enlarge;
    let upright = align::square_crop_transform((d.x1 + d.x2) / 2.0, (d.y1 + d.y2) / 2.0, side, out);
    let Some(p) = c.has_keypoints.then(|| FacePoints::of(d, decoder)).flatten() else { return upright };
    let (src, dst): (Vec<(f32, f32)>, Vec<(f32, f32)>) = match spec.alignment {
        Alignment::Box => {
            let to_crop = |(x, y): (f32, f32)| ((0.5 + (x - 0.5) / spec.enlarge) * out as f32, (0.5 + (y - 0.5) / spec.enlarge) * out as f32);
            (vec![p.right_eye, p.left_eye, p.nose, p.mouth], FACE_TEMPLATE.iter().map(|&q| to_crop(q)).collect())
        }
        Alignment::Arcface => {
            let k = out as f32 / ARCFACE_SIDE;
            let t: Vec<(f32, f32)> = ARCFACE_TEMPLATE.iter().map(|&(x, y)| (x * k, y * k)).collect();
            match p.corners {
                Some([r, l]) => (vec![p.right_eye, p.left_eye, p.nose, r, l], t),
                // Without corners, the mouth centre goes to the middle of the template's corners.
                None => (vec![p.right_eye, p.left_eye, p.nose, p.mouth], vec![t[0], t[1], t[2], ((t[3].0 + t[4].0) / 2.0, (t[3].1 + t[4].1) / 2.0)]),
            }
        }
        // dlib fits its chip to five points of its own landmark model (eye corners and the
        // bottom of the nose); ours has eye centres, which go to the middle of each corner pair.
        // Our nose tip is not dlib's nose bottom: fitting it to that point as a third pair made
        // Cydral's age worse on the labelled photos (MAE 8.9 years against 7.5 from the eyes
        // alone, gender 90% against 92%), so the eyes alone fix the chip.
        Alignment::DlibChip => (vec![p.right_eye, p.left_eye], attributes::dlib_chip_eyes(out as f32, spec.chip_padding).to_vec()),
        Alignment::DlibChipFitted => match p.corners {
            Some([r, l]) => {
                // The template was measured with the detector's numbers as pixel centres and
                // dlib's chip geometry, where a template point p lands at
                // (p + padding) / (1 + 2 padding) * side in pixel-area terms (pixel i spans
                // [i, i + 1), as here): the half pixel moves the points into that convention.
                let k = out as f32 / (1.0 + 2.0 * spec.chip_padding);
                let to_chip = |(x, y): (f32, f32)| ((x + spec.chip_padding) * k, (y + spec.chip_padding) * k);
                let centred = |(x, y): (f32, f32)| (x + 0.5, y + 0.5);
                (
                    [p.right_eye, p.left_eye, p.nose, r, l].map(centred).to_vec(),
                    DLIB_CHIP_YUNET_TEMPLATE.map(to_chip).to_vec(),
                )
            }
            None => (vec![p.right_eye, p.left_eye], attributes::dlib_chip_eyes(out as f32, spec.chip_padding).to_vec()),
        },
    };
    match align::similarity_transform(&src, &dst) {
        // Keypoints that disagree wildly with the box (a bad detection) would zoom the crop
        // onto a fragment; keep the upright crop unless the fitted scale is plausible.
        Some(t) if (t.scale() / upright.scale() - 1.0).abs() < 0.5 => t,
        _ => upright,
    }
}
