"""OpenCV's FaceDetectorYN + FaceRecognizerSF on the peer set written by
`cargo run --release -p face-engine --example phone_photos -- peers DIR`: the
same YuNet and SFace weights (our float32 ONNX files), run the way OpenCV's
face_detect.py sample runs them (the photo at its own size, setInputSize to
it, alignCrop + feature per face). Prints photos/s and faces found beside the
truth, as the engine's side of the same command does.

    bench/.venv/bin/python bench/peers/opencv_faces.py DIR [--threshold 0.8] [--scale 1.0]

The sample's default score threshold is 0.9; 0.8 is the service's, so the
counts compare like with like. `--scale` shrinks the photo first, as the
sample's --scale does.
"""

import argparse
import json
import os
import time

import cv2
import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def iou(a, b):
    iw = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    ih = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = iw * ih
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / max(union, 1e-6)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("dir")
    p.add_argument("--threshold", type=float, default=0.8)
    p.add_argument("--scale", type=float, default=1.0)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    models = os.path.join(ROOT, "models", "onnx")
    detector = cv2.FaceDetectorYN.create(os.path.join(models, "yunet.onnx"), "", (320, 320), args.threshold, 0.3, 5000)
    recognizer = cv2.FaceRecognizerSF.create(os.path.join(models, "sface.onnx"), "")
    truth = json.load(open(os.path.join(args.dir, "truth.json")))

    def analyse(path):
        img = cv2.imread(path)
        if args.scale != 1.0:
            img = cv2.resize(img, (int(img.shape[1] * args.scale), int(img.shape[0] * args.scale)))
        detector.setInputSize((img.shape[1], img.shape[0]))
        _, faces = detector.detect(img)
        faces = [] if faces is None else faces
        for f in faces:
            recognizer.feature(recognizer.alignCrop(img, f))
        return [[float(f[0]) / args.scale, float(f[1]) / args.scale, float(f[0] + f[2]) / args.scale, float(f[1] + f[3]) / args.scale] for f in faces]

    print(f"OpenCV {cv2.__version__}, {cv2.getNumThreads()} threads, threshold {args.threshold}, scale {args.scale}")
    print("| set | photos | faces placed | found | extra | photos/s, one at a time |")
    print("|---|---|---|---|---|---|")
    for label, names in [("demo photos (1920 px)", lambda n: n.startswith("demo")), ("12 MP phone photos", lambda n: not n.startswith("demo"))]:
        part = [t for t in truth if names(t["file"])]
        placed = found = extra = 0
        for t in part:
            boxes = analyse(os.path.join(args.dir, t["file"]))
            used = [False] * len(boxes)
            placed += len(t["faces"])
            for f in t["faces"]:
                m = [i for i, b in enumerate(boxes) if iou(f, b) >= 0.5]
                if m:
                    found += 1
                for i in m:
                    used[i] = True
            extra += sum(1 for i, b in enumerate(boxes) if not used[i] and not any(iou(q, b) > 0.1 for q in t["partial"]))
        start = time.perf_counter()
        for _ in range(args.rounds):
            for t in part:
                analyse(os.path.join(args.dir, t["file"]))
        rate = args.rounds * len(part) / (time.perf_counter() - start)
        print(f"| {label} | {len(part)} | {placed} | {found} | {extra} | {rate:.2f} |")


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
