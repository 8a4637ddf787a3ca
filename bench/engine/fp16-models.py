"""A copy of the model folder with every model stored in float16, to estimate on the CPU what
TensorRT's fp16 mode (FACE_TRT_FP16, on by default on GPU hosts) does to detection and
embeddings before a GPU runs it.

    bench/.venv/bin/python bench/engine/fp16-models.py [--models DIR] [--out DIR] [--only id,id]
    FACE_FIXED_SHAPES=on npm run bench:gpu -- --fp16-models .bench-out/fp16-models

Each model's weights and every tensor between its nodes become float16 (onnxconverter-common,
inputs and outputs kept float32, so the engine feeds and reads them as before). ONNX Runtime's
CPU provider has no float16 kernels for most of these operators, so it computes each node in
float32 between casts: every weight and activation is rounded to float16 as TensorRT stores
them, but the arithmetic inside a node stays float32, where TensorRT may accumulate in float16
and fuses nodes (fewer roundings). An estimate of the rounding, not a GPU measurement.

Writes manifest.json (unchanged) and onnx/<id>.onnx for each model present: converted, or
with --only the others copied as they are. Float16 overflows above 65504; the conversion does
not look for it, but an overflow would move embeddings, which bench:gpu's comparison shows.
"""
import argparse
import json
import os
import shutil
import sys
import warnings

import onnx
from onnxconverter_common import float16

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=os.path.join(ROOT, "models"), help="model folder with manifest.json (default ./models)")
    ap.add_argument("--out", default=os.path.join(ROOT, ".bench-out", "fp16-models"))
    ap.add_argument("--only", help="comma-separated manifest ids to convert (the rest are copied as they are)")
    args = ap.parse_args()

    manifest_file = os.path.join(args.models, "manifest.json")
    with open(manifest_file) as f:
        manifest = json.load(f)
    only = set(args.only.split(",")) if args.only else None
    os.makedirs(os.path.join(args.out, "onnx"), exist_ok=True)
    shutil.copyfile(manifest_file, os.path.join(args.out, "manifest.json"))
    converted = 0
    for entry in manifest["models"]:
        src = os.path.join(args.models, entry["onnx"])
        if not os.path.exists(src):
            continue
        dst = os.path.join(args.out, entry["onnx"])
        if only and entry["id"] not in only:
            shutil.copyfile(src, dst)
            continue
        model = onnx.load(src)
        with warnings.catch_warnings():
            # It warns for every weight below float16's smallest normal number, which it flushes.
            warnings.simplefilter("ignore")
            half = float16.convert_float_to_float16(model, keep_io_types=True)
        onnx.save(half, dst)
        print(f"{entry['id']}: {os.path.getsize(src) / 2**20:.1f} MiB -> {os.path.getsize(dst) / 2**20:.1f} MiB, {dst}")
        converted += 1
    if converted == 0:
        print(f"no converted models found under {args.models} (run npm run models)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
