"""How much of the CPU's floating-point peak ONNX Runtime gets out of the default models.

    bench/.venv/bin/python bench/engine/model-flops.py [--peak-per-core GFLOPS] [--seconds S]

Counts the multiply-adds of every Conv and Gemm of the converted YuNet (at a
640x480 input, the working size of a 2 MP photo) and SFace (112x112) from the
shapes ONNX's shape inference gives, then times plain ONNX Runtime sessions
(the CPU provider, all graph optimisations) at 1 and 2 intra-op threads, and
SFace at batch 1 and 16. FLOPs are 2 x multiply-adds; everything else (ReLU,
BatchNorm folded away, PReLU, pooling) is left out, so the GFLOP/s figures are
a slight underestimate of the work done. Prints one JSON line per run.
"""
import argparse
import json
import os
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import shape_inference

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def multiply_adds(path: str, input_shape: list[int]) -> int:
    model = onnx.load(path)
    graph = model.graph
    dims = graph.input[0].type.tensor_type.shape.dim
    for d, v in zip(dims, input_shape):
        d.ClearField("dim_param")
        d.dim_value = v
    inferred = shape_inference.infer_shapes(model).graph
    shapes = {}
    for vi in list(inferred.value_info) + list(inferred.output) + list(inferred.input):
        shapes[vi.name] = [d.dim_value for d in vi.type.tensor_type.shape.dim]
    weights = {t.name: list(t.dims) for t in graph.initializer}
    total = 0
    for node in graph.node:
        if node.op_type == "Conv":
            out = shapes[node.output[0]]
            w = weights[node.input[1]]  # [Cout, Cin/group, kh, kw]
            total += int(np.prod(out)) * w[1] * w[2] * w[3]
        elif node.op_type == "Gemm":
            a = shapes[node.input[0]]
            w = weights[node.input[1]]
            total += a[0] * w[0] * w[1]
    return total


def time_session(path: str, feed_name: str, feed: np.ndarray, threads: int, seconds: float) -> float:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    sess.run(None, {feed_name: feed})
    runs, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        sess.run(None, {feed_name: feed})
        runs += 1
    return (time.perf_counter() - start) / runs


def main() -> None:
    parser = argparse.ArgumentParser()
    # This machine: 2 AMD EPYC cores at 2.45 GHz with AVX2 + FMA (no AVX-512): 2 FMA pipes x 8
    # lanes x 2 FLOP = 32 FLOP per cycle per core, 78.4 GFLOP/s per core, 157 for both.
    parser.add_argument("--peak-per-core", type=float, default=78.4, help="fp32 peak of one core, GFLOP/s")
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    cases = [
        ("yunet", "input", [1, 3, 480, 640]),
        ("sface", "data", [1, 3, 112, 112]),
        ("sface", "data", [16, 3, 112, 112]),
    ]
    for model, feed_name, shape in cases:
        path = os.path.join(ROOT, "models", "onnx", f"{model}.onnx")
        macs = multiply_adds(path, shape)
        feed = np.random.default_rng(0).uniform(0, 255, size=shape).astype(np.float32)
        for threads in (1, 2):
            s = time_session(path, feed_name, feed, threads, args.seconds)
            gflops = 2 * macs / s / 1e9
            print(json.dumps({
                "model": model, "input": shape, "threads": threads, "gflop_per_run": round(2 * macs / 1e9, 3),
                "ms_per_run": round(s * 1000, 2), "gflop_s": round(gflops, 1), "of_peak_of_threads": round(gflops / (args.peak_per_core * threads), 3),
                "onnxruntime": ort.__version__,
            }))


if __name__ == "__main__":
    main()
