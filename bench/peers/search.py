"""Exact and approximate top-10 search peers on the same synthetic vectors as
the face-index benchmark (crates/index/examples/bench.rs): unit vectors whose
row i depends only on (seed, i), generated with the same mix64 stream and
Box-Muller, so both programs search the same data.

    bench/.venv/bin/python bench/peers/search.py --n 20000 --dim 1024 [--queries 200]
        [--near SIGMA] [--target-recall R] [--efs 16,32,...] [--json out.json]

Rows: numpy brute force (exact, the ground truth), FAISS IndexFlatIP (exact),
FAISS IndexHNSWFlat and hnswlib at the smallest efSearch whose recall@10
reaches --target-recall (ours, when the wrapper passes it; else 0.95), trying
the --efs values in order (default 16 … 4096). Graph
parameters match usearch's defaults (M 16, efConstruction 128) so the
comparison is about the implementation, not the settings. Latency is one
query at a time, as in the Rust benchmark.
"""
import argparse
import json
import os
import platform
import sys
import time

import numpy as np

GOLDEN = np.uint64(0x9E3779B97F4A7C15)
M1 = np.uint64(0xBF58476D1CE4E5B9)
M2 = np.uint64(0x94D049BB133111EB)


def mix64(z):
    z = z + GOLDEN
    z = (z ^ (z >> np.uint64(30))) * M1
    z = (z ^ (z >> np.uint64(27))) * M2
    return z ^ (z >> np.uint64(31))


def unit_rows(rows, dim, seed, chunk=2048):
    out = np.empty((rows, dim), dtype=np.float32)
    steps = np.arange(1, dim + 1, dtype=np.uint64) * GOLDEN
    for start in range(0, rows, chunk):
        idx = np.arange(start, min(rows, start + chunk), dtype=np.uint64)
        s0 = mix64(np.uint64(seed) ^ mix64(idx))
        u = (mix64(s0[:, None] + steps[None, :]) >> np.uint64(11)).astype(np.float64) / float(1 << 53)
        a, b = np.maximum(u[:, 0::2], 1e-300), u[:, 1::2]
        radius = np.sqrt(-2.0 * np.log(a))
        angle = 2.0 * np.pi * b
        block = np.empty((len(idx), dim), dtype=np.float32)
        block[:, 0::2] = radius * np.cos(angle)
        block[:, 1::2] = (radius * np.sin(angle))[:, : dim // 2]
        block /= np.linalg.norm(block, axis=1, keepdims=True)
        out[start : start + len(idx)] = block
    return out


def timed_queries(search_one, queries):
    lat = []
    found = []
    for q in queries:
        t = time.perf_counter()
        ids = search_one(q)
        lat.append(time.perf_counter() - t)
        found.append(ids)
    lat = np.sort(np.array(lat)) * 1e3
    pick = lambda p: float(lat[int(round((len(lat) - 1) * p))])
    return found, pick(0.5), pick(0.99)


def recall(found, truth):
    hit1 = sum(1 for f, t in zip(found, truth) if len(f) and f[0] == t[0])
    hit10 = sum(len(set(map(int, f[:10])) & set(map(int, t))) for f, t in zip(found, truth))
    return hit1 / len(truth), hit10 / (10 * len(truth))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=1024)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--near", type=float, default=None)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--target-recall", type=float, default=0.95)
    ap.add_argument("--efs", default="16,32,64,128,256,512,1024,2048,4096")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()

    import faiss
    import hnswlib

    t = time.perf_counter()
    data = unit_rows(a.n, a.dim, a.seed)
    queries = unit_rows(a.queries, a.dim, a.seed ^ 0xDEADBEEF)
    if a.near is not None:
        src = (mix64(np.uint64(a.seed) ^ np.arange(a.queries, dtype=np.uint64)) % np.uint64(a.n)).astype(np.int64)
        queries = data[src] + queries * np.float32(a.near)
        queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    gen_s = time.perf_counter() - t
    print(f"faces {a.n} dim {a.dim} queries {a.queries} generated in {gen_s:.1f}s", file=sys.stderr)

    def progress(msg):
        print(msg, file=sys.stderr, flush=True)

    rows = []
    # Exact truth over all queries at once (BLAS), then one-at-a-time latency like the Rust brute row.
    scores = queries @ data.T
    truth = np.argsort(-scores, axis=1)[:, :10]
    del scores

    def brute_one(q):
        s = data @ q
        top = np.argpartition(-s, 10)[:10]
        return top[np.argsort(-s[top])]

    found, p50, p99 = timed_queries(brute_one, queries)
    r1, r10 = recall(found, truth)
    rows.append(dict(method="numpy brute f32", build_s=0.0, p50_ms=p50, p99_ms=p99, recall1=r1, recall10=r10, param=""))

    flat = faiss.IndexFlatIP(a.dim)
    t = time.perf_counter()
    flat.add(data)
    build = time.perf_counter() - t
    found, p50, p99 = timed_queries(lambda q: flat.search(q[None, :], 10)[1][0], queries)
    r1, r10 = recall(found, truth)
    rows.append(dict(method="faiss IndexFlatIP", build_s=build, p50_ms=p50, p99_ms=p99, recall1=r1, recall10=r10, param=""))
    del flat

    efs = [int(v) for v in a.efs.split(",")]
    steps = []  # every (method, ef) tried, for the JSON: recall@1 can be what matters (identification)

    def sweep(label, set_ef, search_one, build):
        best = None
        for ef in efs:
            set_ef(ef)
            found, p50, p99 = timed_queries(search_one, queries)
            r1, r10 = recall(found, truth)
            best = dict(method=label, build_s=build, p50_ms=p50, p99_ms=p99, recall1=r1, recall10=r10, param=f"ef {ef}")
            steps.append(best)
            progress(f"{label} ef {ef}: recall@1 {r1:.3f}, recall@10 {r10:.3f}, p50 {p50:.3f} ms, p99 {p99:.3f} ms")
            if r10 >= a.target_recall:
                break
        rows.append(best)

    hnsw = faiss.IndexHNSWFlat(a.dim, 16, faiss.METRIC_INNER_PRODUCT)
    hnsw.hnsw.efConstruction = 128
    t = time.perf_counter()
    hnsw.add(data)
    build = time.perf_counter() - t
    progress(f"faiss HNSW built in {build:.1f}s")

    def faiss_ef(ef):
        hnsw.hnsw.efSearch = ef

    sweep("faiss IndexHNSWFlat M16", faiss_ef, lambda q: hnsw.search(q[None, :], 10)[1][0], build)
    del hnsw

    h = hnswlib.Index(space="ip", dim=a.dim)
    h.init_index(max_elements=a.n, ef_construction=128, M=16)
    t = time.perf_counter()
    h.add_items(data, np.arange(a.n))
    build = time.perf_counter() - t
    progress(f"hnswlib built in {build:.1f}s")
    sweep("hnswlib M16", h.set_ef, lambda q: h.knn_query(q[None, :], k=10)[0][0], build)

    out = dict(
        n=a.n, dim=a.dim, queries=a.queries, near=a.near, target_recall=a.target_recall,
        machine=dict(cpu=platform.processor() or platform.machine(), cores=os.cpu_count(), python=platform.python_version(),
                     numpy=np.__version__, faiss=getattr(faiss, "__version__", "?"), hnswlib=getattr(hnswlib, "__version__", "?"),
                     faiss_threads=faiss.omp_get_max_threads()),
        rows=rows,
        sweep=steps,
    )
    print(f"| {'method':<26} | {'param':>8} | {'build s':>7} | {'p50 ms':>8} | {'p99 ms':>8} | {'recall@1':>8} | {'recall@10':>9} |")
    print("|" + "|".join(["-" * 10] * 7) + "|")
    for r in rows:
        print(f"| {r['method']:<26} | {r['param']:>8} | {r['build_s']:>7.1f} | {r['p50_ms']:>8.3f} | {r['p99_ms']:>8.3f} | {r['recall1']:>8.3f} | {r['recall10']:>9.3f} |")
    print("JSON " + json.dumps(out))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
