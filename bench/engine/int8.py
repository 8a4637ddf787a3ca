"""Does an int8 (QDQ, static) SFace keep LFW accuracy and run faster than the float32 one on this CPU?

    bench/.venv/bin/python bench/engine/int8.py [--calib 300] [--seconds 2] [--rounds 3] [--variants ...]
                                         [--ship u8s8t-pr] [--no-prelu] [--box x0,y0,x1,y1] [--skip-accuracy]

Experiment only: nothing here is used by the service.

1. A fixed face crop for LFW's deep-funnelled 250x250 photos. YuNet
   (models/onnx/yunet.onnx) runs on the calibration photos; the median of its
   five landmarks (face nearest the centre) is fitted by least squares (scale
   and translation, no rotation) to the ArcFace five-point template, which
   gives one square box in photo pixels. Every photo, for calibration and for
   evaluation, float32 and int8 alike, is cut to that box and resized to
   112x112 (PIL bilinear, which antialiases). This is not the service's
   per-face landmark alignment, so accuracy sits below the service's 99.21%;
   float32 against int8 on identical crops is the point.
2. Int8 models: onnxruntime.quantization.quant_pre_process (shape inference,
   BatchNormalization folded into Conv), then quantize_static in QDQ format,
   per-channel int8 weights, calibrated on --calib photos of people who are
   in no pairs.txt pair (one photo per person, fixed seed). Variants:
   u8s8   uint8 activations, int8 weights, MinMax, every op ORT quantises;
   s8s8   int8 activations (ORT's QDQ default; on x86 its QDQ S8->U8
          transformer runs it as u8s8, identical numbers);
   u8s8r  u8s8 with reduce_range (7-bit weights: no VPMADDUBSW saturation on
          AVX2 without VNNI);
   u8s8t  tuned: Percentile calibration and the first conv (raw RGB in, the
          worst saturation) left float;
   u8s8t-pr  u8s8t on the graph with PRelu rewritten (below), only Conv and
          Gemm quantised, the PRelu arithmetic stays float.
   fp32-pr is the float32 graph with every PRelu(x, s) rewritten as
   Relu(x) + Min(x, 0) * s: identical numbers, but ONNX Runtime's CPU PRelu
   with a [C,1,1] slope is about 20x slower than a broadcast Mul and takes half
   of SFace's time, in float32 and int8 graphs alike.
3. Speed: plain ONNX Runtime sessions (CPU provider, ORT_ENABLE_ALL), intra-op
   threads 1 and 2, batch 1 and 8; models are timed in interleaved rounds of
   --seconds each and the best round is kept (the machine is shared).
4. Accuracy: every photo of pairs.txt embedded by each model (batch 16,
   --threads intra-op threads), L2-normalised, cosine per pair; standard
   10-fold accuracy (threshold chosen on nine folds, accept when score > t,
   measured on the tenth; mean and sample sd over folds), the cosine between
   the float32 and int8 embedding of each crop, and the pairs one model gets
   right and the other wrong under those thresholds.

Writes models and results.json under .bench-out/int8/ and prints a table and a verdict.
"""
import argparse
import json
import os
import platform
import random
import sys
import time

import numpy as np
import onnx
from onnx import helper, numpy_helper
import onnxruntime as ort
from onnxruntime.quantization import CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType, quantize_static
from onnxruntime.quantization.shape_inference import quant_pre_process
from PIL import Image

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LFW = os.path.join(os.path.dirname(ROOT), "shared", "testdata", "lfw")
if not os.path.isdir(LFW):
    LFW = "/work/shared/testdata/lfw"
SFACE = os.path.join(ROOT, "models", "onnx", "sface.onnx")
YUNET = os.path.join(ROOT, "models", "onnx", "yunet.onnx")
OUT = os.path.join(ROOT, ".bench-out", "int8")

# ArcFace five-point template for 112x112 (right eye, left eye, nose, right and left mouth corner
# on the subject's sides, i.e. image left first), the one the service aligns to.
ARCFACE = np.array(
    [[38.2946, 51.6963], [73.5318, 51.5014], [56.0252, 71.7366], [41.5493, 92.3655], [70.7299, 92.2041]],
    dtype=np.float64,
)

# name: (rewrite PRelu, activation type, reduce_range, calibration, keep first conv float, ops to quantize)
VARIANTS = {
    # the plain recipe: every op ORT can quantise, MinMax
    "u8s8": dict(pr=False, act=QuantType.QUInt8, rr=False, method=CalibrationMethod.MinMax, first=False, ops=None),
    "s8s8": dict(pr=False, act=QuantType.QInt8, rr=False, method=CalibrationMethod.MinMax, first=False, ops=None),
    "u8s8r": dict(pr=False, act=QuantType.QUInt8, rr=True, method=CalibrationMethod.MinMax, first=False, ops=None),
    # tuned: Percentile calibration, the first conv (raw RGB in, the worst saturation) left float
    "u8s8t": dict(pr=False, act=QuantType.QUInt8, rr=False, method=CalibrationMethod.Percentile, first=True, ops=None),
    # tuned, on the graph with PRelu rewritten; only Conv and Gemm quantised (the PRelu arithmetic stays float)
    "u8s8t-pr": dict(pr=True, act=QuantType.QUInt8, rr=False, method=CalibrationMethod.Percentile, first=True, ops=["Conv", "Gemm"]),
}


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def session(path: str, threads: int) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])


# ---------------------------------------------------------------- LFW


def read_pairs():
    pairs = []
    with open(os.path.join(LFW, "pairs.txt")) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            p = line.split()
            fold = int(p[0])
            if len(p) == 4:
                a, b, same = (p[1], int(p[2])), (p[1], int(p[3])), True
            else:
                a, b, same = (p[1], int(p[2])), (p[3], int(p[4])), False
            pairs.append((fold, a, b, same))
    return pairs


def image_path(name: str, n: int) -> str:
    return os.path.join(LFW, "images", name, f"{name}_{n:04d}.jpg")


def calibration_files(pairs, count: int, seed: int = 0):
    """One photo each of `count` people named in no pair (fixed seed)."""
    in_pairs = {a[0] for _, a, _, _ in pairs} | {b[0] for _, _, b, _ in pairs}
    people = sorted(p for p in os.listdir(os.path.join(LFW, "images")) if p not in in_pairs)
    rng = random.Random(seed)
    rng.shuffle(people)
    files = []
    for p in people[:count]:
        jpgs = sorted(os.listdir(os.path.join(LFW, "images", p)))
        files.append(os.path.join(LFW, "images", p, rng.choice(jpgs)))
    return files, len(people)


# ---------------------------------------------------------------- fixed crop from YuNet landmarks


def yunet_landmarks(sess, rgb: np.ndarray):
    """Five landmarks of the detection nearest the centre (score >= 0.78), or None."""
    h, w = rgb.shape[:2]
    H, W = (h + 31) // 32 * 32, (w + 31) // 32 * 32
    x = np.zeros((1, 3, H, W), np.float32)
    x[0, :, :h, :w] = rgb[:, :, ::-1].transpose(2, 0, 1)  # BGR 0..255
    outs = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, {"input": x})))
    best = None
    for s in (8, 16, 32):
        cols = W // s
        score = np.sqrt(np.clip(outs[f"cls_{s}"][0, :, 0], 0, 1) * np.clip(outs[f"obj_{s}"][0, :, 0], 0, 1))
        for i in np.nonzero(score >= 0.78)[0]:
            col, row = i % cols, i // cols
            b = outs[f"bbox_{s}"][0, i]
            cx, cy = (col + b[0]) * s, (row + b[1]) * s
            d = (cx - w / 2) ** 2 + (cy - h / 2) ** 2
            k = outs[f"kps_{s}"][0, i]
            kp = np.array([[(col + k[2 * j]) * s, (row + k[2 * j + 1]) * s] for j in range(5)])
            if best is None or d < best[0] - 1.0 or (abs(d - best[0]) <= 1.0 and score[i] > best[1]):
                best = (d, score[i], kp)
    return None if best is None else best[2]


def fixed_box(files):
    """Square box (x0, y0, x1, y1) in photo pixels that maps the median landmarks onto the template."""
    sess = session(YUNET, 2)
    pts = []
    for f in files:
        kp = yunet_landmarks(sess, np.asarray(Image.open(f).convert("RGB"), np.float32))
        if kp is not None:
            pts.append(kp)
    med = np.median(np.stack(pts), axis=0)
    # template = s * photo + t  (least squares over the five points, same s on both axes)
    pc, tc = med - med.mean(0), ARCFACE - ARCFACE.mean(0)
    s = (pc * tc).sum() / (pc * pc).sum()
    t = ARCFACE.mean(0) - s * med.mean(0)
    x0, y0 = -t / s
    side = 112 / s
    residual = float(np.sqrt((((s * med + t) - ARCFACE) ** 2).sum(1).mean()))
    return (float(x0), float(y0), float(x0 + side), float(y0 + side)), med, len(pts), residual


def crop(path: str, box) -> np.ndarray:
    """[3,112,112] float32 RGB 0..255 (the model's own input range)."""
    img = Image.open(path).convert("RGB").resize((112, 112), Image.BILINEAR, box=box)
    return np.asarray(img, np.float32).transpose(2, 0, 1).copy()


# ---------------------------------------------------------------- quantisation


class Reader(CalibrationDataReader):
    def __init__(self, crops: np.ndarray, batch: int = 1):
        self.batches = [crops[i : i + batch] for i in range(0, len(crops), batch)]
        self.i = 0

    def get_next(self):
        if self.i >= len(self.batches):
            return None
        self.i += 1
        return {"data": self.batches[self.i - 1]}

    def rewind(self):
        self.i = 0


def rewrite_prelu(src: str, dst: str):
    """PRelu(x, s) -> Relu(x) + Min(x, 0) * s: the same numbers (0 difference), but ORT 1.32's CPU PRelu
    with a [C,1,1] slope is about 20x slower than a broadcast Mul and takes half of SFace's time."""
    m = onnx.load(src)
    g = m.graph
    g.initializer.append(numpy_helper.from_array(np.zeros((1,), np.float32), "prelu_zero"))
    nodes = []
    for n in g.node:
        if n.op_type != "PRelu":
            nodes.append(n)
            continue
        x, slope = n.input
        p = n.name or n.output[0]
        nodes += [
            helper.make_node("Relu", [x], [p + "_pos"], name=p + "_relu"),
            helper.make_node("Min", [x, "prelu_zero"], [p + "_neg"], name=p + "_min"),
            helper.make_node("Mul", [p + "_neg", slope], [p + "_negs"], name=p + "_mul"),
            helper.make_node("Add", [p + "_pos", p + "_negs"], [n.output[0]], name=p + "_add"),
        ]
    del g.node[:]
    g.node.extend(nodes)
    onnx.save(m, dst)


def quantise(pre: str, out: str, crops: np.ndarray, variant: str):
    v = VARIANTS[variant]
    m = onnx.load(pre)
    first_conv = next(n.name for n in m.graph.node if n.op_type == "Conv")
    quantize_static(
        pre,
        out,
        Reader(crops),
        quant_format=QuantFormat.QDQ,
        per_channel=True,
        reduce_range=v["rr"],
        activation_type=v["act"],
        weight_type=QuantType.QInt8,
        calibrate_method=v["method"],
        op_types_to_quantize=v["ops"],
        nodes_to_exclude=[first_conv] if v["first"] else None,
    )


def op_counts(path: str, threads: int = 1):
    """Op types of the graph ORT actually runs (after its optimisations), to see what became QLinear*."""
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opt_path = path + ".ort-optimised.onnx"
    opts.optimized_model_filepath = opt_path
    ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    m = onnx.load(opt_path)
    counts = {}
    for n in m.graph.node:
        counts[n.op_type] = counts.get(n.op_type, 0) + 1
    os.remove(opt_path)
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


# ---------------------------------------------------------------- speed


def timing(models: dict, seconds: float, rounds: int, crops: np.ndarray):
    res = {}
    for threads in (1, 2):
        for batch in (1, 8):
            feed = np.ascontiguousarray(crops[:batch])
            sessions = {k: session(p, threads) for k, p in models.items()}
            for s in sessions.values():
                for _ in range(3):
                    s.run(None, {"data": feed})
            best = {k: float("inf") for k in models}
            for _ in range(rounds):
                for k, s in sessions.items():
                    runs, start = 0, time.perf_counter()
                    while time.perf_counter() - start < seconds:
                        s.run(None, {"data": feed})
                        runs += 1
                    ms = (time.perf_counter() - start) * 1000 / (runs * batch)
                    best[k] = min(best[k], ms)
            for k in models:
                res[(k, threads, batch)] = best[k]
            log(f"  threads {threads} batch {batch}: " + ", ".join(f"{k} {best[k]:.2f}" for k in models) + " ms/face")
    return res


# ---------------------------------------------------------------- accuracy


def embed(path: str, crops: np.ndarray, threads: int, batch: int = 16) -> np.ndarray:
    s = session(path, threads)
    out = np.concatenate([s.run(None, {"data": crops[i : i + batch]})[0] for i in range(0, len(crops), batch)])
    return out / np.linalg.norm(out, axis=1, keepdims=True)


def best_threshold(scores, same):
    """Accept when score > t; t in the middle of the first best gap (as bench/lib/lfw.ts)."""
    order = np.argsort(scores)
    s, y = scores[order], same[order]
    # threshold below all: everything accepted -> correct = #same
    correct = int(y.sum())
    best_c, best_t = correct, s[0] - 1e-3
    for k in range(len(s)):
        correct += -1 if y[k] else 1
        hi = s[k + 1] if k + 1 < len(s) else s[k] + 1e-3
        if hi > s[k] and correct > best_c:
            best_c, best_t = correct, (s[k] + hi) / 2
    return best_t


def ten_fold(scores, same, folds):
    accs, thr, right = [], [], np.zeros(len(scores), bool)
    for f in sorted(set(folds.tolist())):
        train, test = folds != f, folds == f
        t = best_threshold(scores[train], same[train])
        ok = (scores[test] > t) == same[test]
        right[test] = ok
        accs.append(ok.mean())
        thr.append(t)
    accs = np.array(accs)
    return float(accs.mean()), float(accs.std(ddof=1)), thr, right


# ---------------------------------------------------------------- main


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calib", type=int, default=300, help="calibration photos (people in no pair)")
    ap.add_argument("--seconds", type=float, default=2.0, help="seconds per timing round")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved timing rounds (best kept)")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--no-prelu", dest="prelu", action="store_false", help="leave out fp32-pr (float, PRelu rewritten)")
    ap.add_argument("--threads", type=int, default=1, help="intra-op threads of the embedding pass")
    ap.add_argument("--box", help="fixed crop x0,y0,x1,y1 instead of the one fitted from YuNet landmarks")
    ap.add_argument("--ship", default="u8s8t-pr", help="the int8 variant the verdict is about")
    ap.add_argument("--skip-accuracy", action="store_true")
    args = ap.parse_args()
    variants = [v for v in args.variants.split(",") if v]
    os.makedirs(OUT, exist_ok=True)
    t0 = time.time()
    info = {
        "onnxruntime": ort.__version__,
        "onnx": onnx.__version__,
        "python": platform.python_version(),
        "cpu": next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?"),
        "cores": os.cpu_count(),
        "loadavg_start": open("/proc/loadavg").read().split()[:3],
    }
    log(f"onnxruntime {ort.__version__}, {info['cpu']}, {info['cores']} cores, load {info['loadavg_start']}")

    pairs = read_pairs()
    calib_files, free_people = calibration_files(pairs, args.calib)
    if args.box:
        box = tuple(float(v) for v in args.box.split(","))
        info["crop"] = {"box": box, "from": "--box"}
    else:
        box, med, n, resid = fixed_box(calib_files)
        info["crop"] = {
            "box": [round(v, 2) for v in box],
            "from": f"median YuNet landmarks of {n} calibration photos fitted to the ArcFace template",
            "median_landmarks": med.round(2).tolist(),
            "template_rms_px": round(resid, 2),
        }
    log(f"crop box {[round(v, 1) for v in box]} ({info['crop']['from']})")
    calib = np.stack([crop(f, box) for f in calib_files])
    info["calibration"] = {"photos": len(calib_files), "people_not_in_pairs": free_people}

    pre = os.path.join(OUT, "sface-pre.onnx")
    quant_pre_process(SFACE, pre)
    pre_pr = os.path.join(OUT, "sface-pre-pr.onnx")
    rewrite_prelu(pre, pre_pr)
    models = {"fp32": SFACE}
    if args.prelu:
        models["fp32-pr"] = os.path.join(OUT, "sface-fp32-pr.onnx")
        rewrite_prelu(SFACE, models["fp32-pr"])
        a, b = embed(SFACE, calib, 1), embed(models["fp32-pr"], calib, 1)
        info["fp32_pr_max_abs_diff_calib"] = float(np.abs(a - b).max())
        log(f"fp32-pr: max |difference| of normalised embeddings on the calibration crops {info['fp32_pr_max_abs_diff_calib']:.3g}")
    for v in variants:
        path = os.path.join(OUT, f"sface-{v}.onnx")
        log(f"quantising {v} ...")
        quantise(pre_pr if VARIANTS[v]["pr"] else pre, path, calib, v)
        models[v] = path
    info["size_bytes"] = {k: os.path.getsize(p) for k, p in models.items()}
    info["ops_after_ort"] = {k: op_counts(p) for k, p in models.items()}
    for k, c in info["ops_after_ort"].items():
        log(f"  {k}: {c}")

    log("timing ...")
    tim = timing(models, args.seconds, args.rounds, calib)
    info["ms_per_face"] = {f"{k} t{t} b{b}": round(ms, 3) for (k, t, b), ms in tim.items()}

    acc = {}
    if not args.skip_accuracy:
        files = sorted({a for _, a, _, _ in pairs} | {b for _, _, b, _ in pairs})
        index = {f: i for i, f in enumerate(files)}
        log(f"cropping {len(files)} pair photos ...")
        crops = np.stack([crop(image_path(*f), box) for f in files])
        ia = np.array([index[a] for _, a, _, _ in pairs])
        ib = np.array([index[b] for _, _, b, _ in pairs])
        same = np.array([s for *_, s in pairs])
        folds = np.array([f for f, *_ in pairs])
        emb = {}
        for k, p in models.items():
            t1 = time.time()
            emb[k] = embed(p, crops, args.threads)
            log(f"  embedded with {k} in {time.time() - t1:.0f} s")
        ref_right = None
        for k in models:
            scores = (emb[k][ia] * emb[k][ib]).sum(1)
            mean, sd, thr, right = ten_fold(scores, same, folds)
            r = {"acc_mean": mean, "acc_sd": sd, "thresholds": [round(float(t), 4) for t in thr]}
            if k == "fp32":
                ref_right, ref_scores = right, scores
            else:
                cos = (emb[k] * emb["fp32"]).sum(1)
                r["cos_vs_fp32_mean"] = float(cos.mean())
                r["cos_vs_fp32_min"] = float(cos.min())
                r["cos_vs_fp32_p01"] = float(np.percentile(cos, 1))
                r["pair_score_abs_diff_mean"] = float(np.abs(scores - ref_scores).mean())
                r["only_fp32_right"] = int((ref_right & ~right).sum())
                r["only_int8_right"] = int((~ref_right & right).sum())
            acc[k] = r
        info["accuracy"] = {"pairs": len(pairs), "photos": len(files), **acc}
    info["loadavg_end"] = open("/proc/loadavg").read().split()[:3]
    info["seconds"] = round(time.time() - t0)
    with open(os.path.join(OUT, "results.json"), "w") as f:
        json.dump(info, f, indent=1)

    # ---- table
    print(f"\nonnxruntime {ort.__version__}, {info['cpu']} ({info['cores']} cores), load {info['loadavg_start']} -> {info['loadavg_end']}")
    print(f"crop: box {[round(v, 1) for v in box]} of the 250x250 photo -> 112x112; calibration {len(calib_files)} photos of people in no pair")
    hdr = "| model | size MB | ms/face t1 b1 | t1 b8 | t2 b1 | t2 b8 |"
    if acc:
        hdr += " LFW 10-fold | cos vs fp32 mean (min) | pairs only fp32 / only int8 right |"
    print(hdr)
    print("|" + "---|" * (hdr.count("|") - 1))
    for k in models:
        row = f"| {k} | {info['size_bytes'][k] / 1e6:.1f} |" + "".join(
            f" {tim[(k, t, b)]:.2f} |" for t in (1, 2) for b in (1, 8)
        )
        if acc:
            a = acc[k]
            row += f" {a['acc_mean'] * 100:.2f}% ± {a['acc_sd'] * 100:.2f}% |"
            row += " — | — |" if k == "fp32" else (
                f" {a['cos_vs_fp32_mean']:.4f} ({a['cos_vs_fp32_min']:.3f}) | {a['only_fp32_right']} / {a['only_int8_right']} |"
            )
        print(row)
    # ---- verdict: the candidate against float32 as shipped and against float32 with the same PRelu rewrite
    cand = args.ship if args.ship in models else [k for k in models if k.startswith(("u8", "s8"))][-1]
    ref_pr = "fp32-pr" if VARIANTS.get(cand, {}).get("pr") and "fp32-pr" in models else "fp32"
    sp = lambda ref, t, b: tim[(ref, t, b)] / tim[(cand, t, b)]
    verdict = (
        f"verdict: {cand} runs {sp('fp32', 1, 1):.2f}x float32 as shipped and {sp(ref_pr, 1, 1):.2f}x {ref_pr}"
        f" (1 thread, batch 1; batch 8: {sp('fp32', 1, 8):.2f}x / {sp(ref_pr, 1, 8):.2f}x)"
    )
    if acc:
        d = (acc[cand]["acc_mean"] - acc["fp32"]["acc_mean"]) * 100
        verdict += (
            f"; LFW {acc[cand]['acc_mean'] * 100:.2f}% vs {acc['fp32']['acc_mean'] * 100:.2f}% ({d:+.2f} pt,"
            f" {acc[cand]['only_fp32_right']} pairs lost / {acc[cand]['only_int8_right']} gained),"
            f" cosine to float32 {acc[cand]['cos_vs_fp32_mean']:.4f}"
        )
    print(verdict)

if __name__ == "__main__":
    main()
