"""FAISS and hnswlib methods on the vectors of an index-benchmark dump, each swept until its
recall@1 reaches a target: for every method and setting, recall@1 and recall@10 against the
dump's exact top 10, timings one query per call and in calls of --batch rows, CPU time per
query, memory per face, and the training and build rates.

    bench/.venv/bin/python bench/search/ann-peers.py DUMP_DIR [--methods LIST] [--target-recall1 0.99]
        [--batch 64] [--threads N] [--scan-queries 200] [--full-sweep] [--json FILE]
        [--m 16] [--ef-construction 128] [--efs 16,32,64,128,256,512,1024,2048,4096,8192]
        [--k-factors 1,2,4,8,16,32,64,128,256] [--nlist N] [--nprobes 1,2,4,...] [--ivf-k-factors 16,64]

DUMP_DIR is what `cargo run --release -p face-index --example bench -- --dump DIR` writes
(bench/search/ann.ts runs both), in the layout of big-ann-benchmarks: every file is two little-endian
u32 (rows, columns) and then the rows; base.fbin (the gallery, f32 unit rows), query.fbin,
groundtruth.neighbors.ibin (i32 exact top 10 per query, gallery rows from 0, best first),
optionally base.person.ibin and query.person.ibin (i32 person per row, -1 for nobody), and
dataset.json (dims, base, queries, k, about). Setup: `sh bench/search/ann-setup.sh` (bench/.venv from
bench/search/requirements-ann.txt).

Methods (--methods, comma-separated; default all of these), all inner product (rows are unit
length, so this is cosine), each with the setting it sweeps:
- faiss-flat: FAISS IndexFlatIP, exact. Setting {}.
- numpy: one BLAS product per call, exact. Setting {}.
- faiss-hnsw: FAISS IndexHNSWFlat; hnswlib: the same graph in hnswlib. M = --m and efConstruction
  = --ef-construction, which default to what usearch uses when our index leaves them at 0
  (connectivity 16, expansion_add 128). Setting {"ef": efSearch} over --efs.
- faiss-pqfs<M>-refine (faiss-pqfs32-refine, faiss-pqfs64-refine): IndexPQFastScan, M
  sub-quantisers of 4 bits, inside IndexRefineFlat: the codes give k * k_factor candidates,
  which the kept f32 vectors re-rank exactly. Setting {"k_factor"} over --k-factors. Without
  -refine, the codes alone: setting {}.
- faiss-ivfpqfs<M>-refine (faiss-ivfpqfs32-refine): IndexIVFPQFastScan with --nlist lists
  (default 4 sqrt(n) rounded to a power of two: 512 at 20k, 4096 at 1M; k-means on at most 64
  rows per list) and M x 4-bit codes of the residuals, inside IndexRefineFlat. Setting
  {"k_factor", "nprobe"}: for each k_factor of --ivf-k-factors (16,64), nprobe over --nprobes
  (default powers of two up to nlist), so a k_factor too small to reach the target at any
  nprobe gives way to the next.
- faiss-sq8: IndexScalarQuantizer QT_8bit, an exhaustive scan of 8-bit codes. Setting {}.
  faiss-sq8-refine: the same inside IndexRefineFlat. Setting {"k_factor"} over --k-factors.

Sweeps run in the order given and stop at the first setting whose recall@1 reaches
--target-recall1 (--full-sweep: every setting). Each method then prints a "chosen" line: that
setting, or `"reached": false` with the best recall@1 it got, when no setting reaches it.

Measured, per setting:
- Batch 1: every query alone, one call each on one thread; queries/s = timed queries / summed
  call time, p50/p99 of the call times, CPU = process CPU time over the pass / queries. Graph
  and IVF methods time every query; the exhaustive scans (faiss-flat, numpy, PQ fast scan,
  SQ8), whose every query reads the whole gallery, time the first --scan-queries. Each call
  includes the Python binding's cost, measured on its own as `call_us` (a search of a 16-row
  index) where the method has a cheap tiny index (flat, HNSW, hnswlib, numpy).
- Batch --batch (64): the queries in calls of that many rows, on --threads threads (default
  all cores); the fastest of up to 3 passes (a second and third while they add up to under
  0.3 s): queries/s = queries / wall time of the pass, p50/p99 of the call times, CPU time
  of the pass / queries. Recall@1, recall@10 and rank-1 come from this pass, over every query
  (--batch 0 skips it, and the batch-1 pass then covers every query).
- Rank-1, where the dump names the person of every query: the top hit is an enrolled photo of
  the query's own person.
Per method, once: train_s (k-means for PQ and IVF, ranges for SQ8), add_s and faces/s = n /
add_s, both on --threads threads; rss_bytes_per_face, the growth of the resident set over
training and adding; code_bytes_per_face, what the index holds per face by its own sizes:
code_size (plus 4 * dims of f32 vectors inside IndexRefineFlat, 8 for an IVF list's id and the
centroids shared out, the graph links of IndexHNSWFlat), hnswlib's index_file_size() / n.

Every method runs in a child process of its own, so each build's memory growth is its own.
Output: one JSON line per result on stdout (`{"type": "meta" | "build" | "search" | "chosen",
"method": ..., "setting": {...}, ...}`), progress on stderr, then readable tables.
"""
import argparse
import ctypes
import json
import math
import os
import platform
import re
import subprocess
import sys
import time
from types import SimpleNamespace

K = 10
METHODS = ("faiss-flat", "numpy", "faiss-hnsw", "hnswlib", "faiss-pqfs32-refine", "faiss-pqfs64-refine",
           "faiss-ivfpqfs32-refine", "faiss-sq8", "faiss-sq8-refine")
PQ_METHOD = re.compile(r"faiss-(ivf)?pqfs(\d+)(-refine)?")


def known_method(name):
    return name in METHODS or PQ_METHOD.fullmatch(name) is not None


# ---------------------------------------------------------------------------- the dump


def read_bin(path, dtype, np):
    """A big-ann-benchmarks file: two little-endian u32 (rows, columns), then the rows."""
    rows, cols = (int(v) for v in np.fromfile(path, dtype="<u4", count=2))
    data = np.fromfile(path, dtype=dtype, offset=8)
    if data.size != rows * cols:
        raise SystemExit(f"{path}: header says {rows} x {cols}, the file holds {data.size} values")
    return data.reshape(rows, cols)


def read_dump(folder):
    """dataset.json of a dump, checked against the files' headers."""
    path = os.path.join(folder, "dataset.json")
    if not os.path.exists(path):
        raise SystemExit(f"{folder}: no dataset.json (write it with the Rust example's --dump {folder})")
    with open(path) as f:
        meta = json.load(f)
    d = dict(folder=folder, meta=meta, dims=int(meta["dims"]), n=int(meta["base"]), queries=int(meta["queries"]), k=int(meta.get("k", 10)))
    for name in ("base.fbin", "query.fbin", "groundtruth.neighbors.ibin"):
        if not os.path.exists(os.path.join(folder, name)):
            raise SystemExit(f"{folder}: {name} is missing")
    return d


def load(d, np):
    """Gallery, queries, exact top-k rows (from 0) and, where the dump has them, the person of
    every gallery row and query (-1: nobody / unknown; None when no query has a person)."""
    f = lambda name: os.path.join(d["folder"], name)
    data = read_bin(f("base.fbin"), "<f4", np)
    queries = read_bin(f("query.fbin"), "<f4", np)
    truth = read_bin(f("groundtruth.neighbors.ibin"), "<i4", np).astype(np.int64)
    if data.shape != (d["n"], d["dims"]) or queries.shape != (d["queries"], d["dims"]) or truth.shape[0] != d["queries"]:
        raise SystemExit(f"{d['folder']}: the files do not match dataset.json")
    persons = None
    if os.path.exists(f("base.person.ibin")) and os.path.exists(f("query.person.ibin")):
        gp = read_bin(f("base.person.ibin"), "<i4", np)[:, 0]
        qp = read_bin(f("query.person.ibin"), "<i4", np)[:, 0]
        if (qp >= 0).any():
            persons = (gp, qp)
    return np.ascontiguousarray(data), np.ascontiguousarray(queries), truth, persons


# ---------------------------------------------------------------------------- measuring


def rss_bytes():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def cpu_seconds():
    """CPU time of this process, every thread (user + system)."""
    return time.process_time()


def blas_threads(n):
    """numpy's OpenBLAS thread count (what threadpoolctl does): a per-query matrix-vector product
    must not fan out over the cores in the single-thread pass."""
    done = False
    with open("/proc/self/maps") as f:
        libs = {line.split()[-1] for line in f if "openblas" in line and line.rstrip().endswith(".so")}
    for path in libs:
        lib = ctypes.CDLL(path)
        for sym in ("scipy_openblas_set_num_threads64_", "openblas_set_num_threads64_", "openblas_set_num_threads"):
            fn = getattr(lib, sym, None)
            if fn is not None:
                fn(ctypes.c_int(n))
                done = True
                break
    return done


def emit(obj):
    print(json.dumps(obj), flush=True)


def progress(msg):
    print(msg, file=sys.stderr, flush=True)


def recall(np, found, truth):
    found = np.asarray(found)
    hit1 = float(np.mean(found[:, 0] == truth[:, 0]))
    k = min(found.shape[1], truth.shape[1], K)
    hit10 = sum(len(set(f[:k].tolist()) & set(t[:k].tolist())) for f, t in zip(found, truth))
    return hit1, hit10 / (k * len(truth))


def single_pass(np, search_one, queries, warm=20):
    """One call per query, one thread: (ids, latencies in s, CPU seconds)."""
    for q in queries[:warm]:
        search_one(q)
    found, lat = [], []
    c0 = cpu_seconds()
    for q in queries:
        t = time.perf_counter()
        found.append(search_one(q))
        lat.append(time.perf_counter() - t)
    return np.array(found), np.array(lat), cpu_seconds() - c0


def batch_pass(np, search_many, queries, batch):
    """The queries in calls of `batch` rows: (ids, call latencies in s, wall s, CPU s) of the
    fastest of up to 3 passes (more than one only while they add up to under 0.3 s)."""
    search_many(queries[:batch])
    best = None
    spent = 0.0
    for i in range(3):
        found, lat = [], []
        c0, t0 = cpu_seconds(), time.perf_counter()
        for s in range(0, len(queries), batch):
            t = time.perf_counter()
            found.append(search_many(queries[s : s + batch]))
            lat.append(time.perf_counter() - t)
        wall, cpu = time.perf_counter() - t0, cpu_seconds() - c0
        spent += wall
        if best is None or wall < best[2]:
            best = (np.concatenate(found), np.array(lat), wall, cpu)
        if spent >= 0.3:
            break
    return best


def pct(lat, p):
    s = sorted(lat)
    return float(s[int(round((len(s) - 1) * p))]) if len(s) else float("nan")


def rank1(np, found, persons):
    """Identification: the top hit is an enrolled photo of the query's own person."""
    if persons is None:
        return None
    gp, qp = persons
    top = np.asarray(found)[:, 0]
    who = np.where(top >= 0, gp[np.clip(top, 0, len(gp) - 1)], -1)
    return float(np.mean((who >= 0) & (who == qp[: len(top)])))


def search_row(np, m, setting, truth, persons, single, batch, batch_size, threads):
    found, lat, cpu1 = single
    q = len(lat)
    row = dict(type="search", method=m.name, label=m.label, setting=setting, queries=len(truth), timed_single=q,
               qps1=q / float(np.sum(lat)), p50_ms=pct(lat, 0.5) * 1e3, p99_ms=pct(lat, 0.99) * 1e3,
               cpu_s_per_query1=cpu1 / q, threads1=1, batch=batch_size)
    if batch is not None:
        ids, blat, wall, cpu = batch
        row.update(qps_batch=len(truth) / wall, batch_p50_ms=pct(blat, 0.5) * 1e3, batch_p99_ms=pct(blat, 0.99) * 1e3,
                   cpu_s_per_query_batch=cpu / len(truth), threads_batch=threads)
        scored = ids
    else:
        scored = found
    r1, r10 = recall(np, scored, truth[: len(scored)])
    row.update(recall1=r1, recall10=r10, rank1=rank1(np, scored, persons), rank1_exact=rank1(np, truth, persons))
    return row


def call_overhead_us(make_tiny, search_one, dims, np, calls=2000):
    """Microseconds per call of a search over a 16-row index: the binding's own cost, which
    every batch-1 figure of the peers includes and the Rust figures do not."""
    rng = np.random.default_rng(0)
    tiny = rng.standard_normal((16, dims)).astype(np.float32)
    tiny /= np.linalg.norm(tiny, axis=1, keepdims=True)
    idx = make_tiny(tiny)
    q = tiny[0]
    for _ in range(100):
        search_one(idx, q)
    t = time.perf_counter()
    for _ in range(calls):
        search_one(idx, q)
    return (time.perf_counter() - t) / calls * 1e6


# ---------------------------------------------------------------------------- methods (children)


def ints(text):
    return [int(v) for v in text.split(",") if v]


def default_nlist(n):
    return max(1, 2 ** round(math.log2(4 * math.sqrt(n))))


def make_method(name, a, np, data, dims):
    """One method, not yet built: train() and add() build it (timed by the caller); then for
    each of `settings`, apply(setting) and search with one(q) (a query's top-k rows) or
    many(qs) (top-k rows per query); set_threads(t) picks the threads a call may use."""
    n = len(data)
    m = SimpleNamespace(name=name, scan=False, settings=[{}], params={}, version=None, call_us=lambda: None,
                        train=lambda: None, apply=lambda s: None)

    if name == "numpy":
        m.label = "numpy BLAS product (exact)"
        m.version = np.__version__
        m.scan = True
        m.set_threads = blas_threads
        m.add = lambda: None
        block = max(1, (64 << 20) // max(1, n))  # at most 64M scores (256 MiB) at once

        def one(q):
            s = data @ q
            top = np.argpartition(-s, K)[:K]
            return top[np.argsort(-s[top])]

        def many(qs):
            out = np.empty((len(qs), K), dtype=np.int64)
            for s0 in range(0, len(qs), block):
                s = qs[s0 : s0 + block] @ data.T
                top = np.argpartition(-s, K, axis=1)[:, :K]
                order = np.argsort(-np.take_along_axis(s, top, 1), axis=1)
                out[s0 : s0 + block] = np.take_along_axis(top, order, 1)
            return out

        m.one, m.many = one, many
        m.code_bytes = lambda: 4 * dims
        m.call_us = lambda: call_overhead_us(lambda t: t, lambda t, q: np.argsort(-(t @ q))[:K], dims, np)
        return m

    if name == "hnswlib":
        import hnswlib

        m.label = f"hnswlib M{a.m}"
        m.version = getattr(hnswlib, "__version__", "0.8.0")
        m.params = dict(M=a.m, ef_construction=a.ef_construction)
        index = hnswlib.Index(space="ip", dim=dims)
        index.init_index(max_elements=n, ef_construction=a.ef_construction, M=a.m, random_seed=100)
        cur = {"threads": 1}

        def make_tiny(t):
            i = hnswlib.Index(space="ip", dim=dims)
            i.init_index(max_elements=len(t), ef_construction=a.ef_construction, M=a.m)
            i.add_items(t, np.arange(len(t)), num_threads=1)
            return i

        m.set_threads = lambda t: cur.update(threads=t)
        m.add = lambda: index.add_items(data, np.arange(n), num_threads=cur["threads"])
        m.settings = [{"ef": e} for e in ints(a.efs)]
        m.apply = lambda s: index.set_ef(s["ef"])
        m.one = lambda q: index.knn_query(q[None, :], k=K, num_threads=1)[0][0]
        m.many = lambda qs: index.knn_query(qs, k=K, num_threads=cur["threads"])[0]
        m.code_bytes = lambda: index.index_file_size() / n
        m.call_us = lambda: call_overhead_us(make_tiny, lambda i, q: i.knn_query(q[None, :], k=K, num_threads=1), dims, np)
        return m

    import faiss

    m.version = faiss.__version__
    m.set_threads = faiss.omp_set_num_threads
    ip = faiss.METRIC_INNER_PRODUCT

    def tiny_call_us(make):
        return lambda: call_overhead_us(make, lambda i, q: i.search(q[None, :], K), dims, np)

    def add_flat(t):
        i = faiss.IndexFlatIP(dims)
        i.add(t)
        return i

    if name == "faiss-flat":
        m.label = "FAISS IndexFlatIP (exact)"
        m.scan = True
        index = faiss.IndexFlatIP(dims)
        m.code_bytes = lambda: index.code_size
        m.call_us = tiny_call_us(add_flat)
    elif name == "faiss-hnsw":
        m.label = f"FAISS IndexHNSWFlat M{a.m}"
        m.params = dict(M=a.m, ef_construction=a.ef_construction)
        index = faiss.IndexHNSWFlat(dims, a.m, ip)
        index.hnsw.efConstruction = a.ef_construction
        m.settings = [{"ef": e} for e in ints(a.efs)]

        def apply(s):
            index.hnsw.efSearch = s["ef"]

        def graph_bytes():
            h = index.hnsw
            links = h.neighbors.size() * 4 + h.levels.size() * 4 + h.offsets.size() * 8
            return index.storage.sa_code_size() + links / n

        def make_tiny(t):
            i = faiss.IndexHNSWFlat(dims, a.m, ip)
            i.add(t)
            return i

        m.apply, m.code_bytes, m.call_us = apply, graph_bytes, tiny_call_us(make_tiny)
    elif name in ("faiss-sq8", "faiss-sq8-refine"):
        refine = name.endswith("-refine")
        m.label = "FAISS IndexScalarQuantizer 8-bit" + (" + IndexRefineFlat" if refine else "")
        m.scan = True
        base = faiss.IndexScalarQuantizer(dims, faiss.ScalarQuantizer.QT_8bit, ip)
        index = faiss.IndexRefineFlat(base) if refine else base
        m.code_bytes = lambda: base.code_size + (4 * dims if refine else 0)
        if refine:
            m.settings = [{"k_factor": f} for f in ints(a.k_factors)]
    elif PQ_METHOD.fullmatch(name):
        ivf, sub, refine = PQ_METHOD.fullmatch(name).groups()
        sub, refine = int(sub), refine is not None
        if dims % sub:
            raise SystemExit(f"{name}: {dims} dims do not split into {sub} sub-quantisers")
        if ivf:
            nlist = a.nlist or default_nlist(n)
            quantizer = faiss.IndexFlatIP(dims)
            base = faiss.IndexIVFPQFastScan(quantizer, dims, nlist, sub, 4, ip)
            base.cp.max_points_per_centroid = 64  # k-means on at most 64 rows a list (FAISS warns under 39)
            base.cp.spherical = True  # unit centroids for inner product
            m.quantizer = quantizer  # the IVF index does not own it
            m.label = f"FAISS IndexIVFPQFastScan {nlist} lists, PQ{sub}x4" + (" + IndexRefineFlat" if refine else "")
            m.params = dict(nlist=nlist, pq_m=sub, pq_bits=4)
            probes = ints(a.nprobes) if a.nprobes else [2**i for i in range(int(math.log2(nlist)) + 1)]
            probes = [p for p in probes if p <= nlist] or [nlist]
            if refine:  # k_factor first, so that settings in sweep order are in the order ann.ts sorts them
                m.settings = [dict(k_factor=f, nprobe=p) for f in ints(a.ivf_k_factors) for p in probes]
            else:
                m.settings = [dict(nprobe=p) for p in probes]
            ivf_bytes = 8 + nlist * dims * 4 / n
        else:
            base = faiss.IndexPQFastScan(dims, sub, 4, ip)
            m.label = f"FAISS IndexPQFastScan PQ{sub}x4" + (" + IndexRefineFlat" if refine else "")
            m.params = dict(pq_m=sub, pq_bits=4)
            m.scan = True
            if refine:
                m.settings = [{"k_factor": f} for f in ints(a.k_factors)]
            ivf_bytes = 0
        index = faiss.IndexRefineFlat(base) if refine else base
        m.base = base
        m.code_bytes = lambda: base.code_size + ivf_bytes + (4 * dims if refine else 0)
    else:
        raise SystemExit(f"unknown method {name}")

    def apply_faiss(s, then=m.apply):
        if "nprobe" in s:
            m.base.nprobe = s["nprobe"]
        if "k_factor" in s:
            index.k_factor = float(s["k_factor"])
        then(s)

    m.index = index
    m.apply = apply_faiss
    m.train = lambda: index.train(data) if not index.is_trained else None
    m.add = lambda: index.add(data)
    m.one = lambda q: index.search(q[None, :], K)[1][0]
    m.many = lambda qs: index.search(qs, K)[1]
    return m


def child(name, a, d):
    import numpy as np

    threads = a.threads
    data, queries, truth, persons = load(d, np)
    n, dims = d["n"], d["dims"]
    progress(f"{name}: {n} x {dims} gallery, {len(queries)} queries, {threads} threads, batch {a.batch}")
    # Libraries load before the first RSS reading: their code is no face's memory.
    if name.startswith("faiss"):
        import faiss  # noqa: F401
    elif name == "hnswlib":
        import hnswlib  # noqa: F401
    r0 = rss_bytes()
    m = make_method(name, a, np, data, dims)
    m.set_threads(threads)
    c0, t0 = cpu_seconds(), time.perf_counter()
    m.train()
    t1 = time.perf_counter()
    m.add()
    t2 = time.perf_counter()
    build_cpu = cpu_seconds() - c0
    grown = rss_bytes() - r0
    train_s, add_s = t1 - t0, t2 - t1
    m.set_threads(1)
    emit(dict(type="build", method=name, label=m.label, n=n, dims=dims, threads=threads, params=m.params,
              train_s=train_s, add_s=add_s, build_s=train_s + add_s,
              faces_per_s=n / add_s if add_s > 1e-3 and name != "numpy" else None, build_cpu_s=build_cpu,
              rss_bytes_per_face=grown / n if name != "numpy" else None, code_bytes_per_face=m.code_bytes(), version=m.version, call_us=m.call_us()))
    progress(f"{m.label}: trained in {train_s:.1f} s, added in {add_s:.1f} s ({n / max(add_s, 1e-9):.0f} faces/s, "
             f"{threads} threads), RSS +{grown / n:.0f} B/face, index {m.code_bytes():.0f} B/face")

    # Batch 1 covers every query, except in a scan where each query reads the whole gallery;
    # without a batched pass it covers every query, since recall comes from it then.
    timed = queries if a.batch == 0 or not m.scan else queries[: a.scan_queries]
    rows = []
    for setting in m.settings:
        m.apply(setting)
        m.set_threads(1)
        single = single_pass(np, m.one, timed)
        batch = None
        if a.batch > 0:
            m.set_threads(threads)
            batch = batch_pass(np, m.many, queries, a.batch)
        row = search_row(np, m, setting, truth, persons, single, batch, a.batch, threads)
        emit(row)
        rows.append(row)
        progress(f"{m.label} {json.dumps(setting)}: recall@1 {row['recall1']:.3f}, recall@10 {row['recall10']:.3f}, "
                 f"batch 1 {row['qps1']:.0f} q/s (p50 {row['p50_ms']:.3f} ms)"
                 + (f", batch {a.batch} {row['qps_batch']:.0f} q/s" if batch else ""))
        if row["recall1"] >= a.target_recall1 and not a.full_sweep:
            break
    hit = next((r for r in rows if r["recall1"] >= a.target_recall1), None)
    if hit:
        emit(dict(type="chosen", method=name, label=m.label, target_recall1=a.target_recall1, reached=True,
                  setting=hit["setting"], recall1=hit["recall1"], recall10=hit["recall10"]))
    else:
        best = max(rows, key=lambda r: (r["recall1"], r["recall10"]))
        emit(dict(type="chosen", method=name, label=m.label, target_recall1=a.target_recall1, reached=False,
                  best_recall1=best["recall1"], best_setting=best["setting"], swept=[r["setting"] for r in rows]))
        progress(f"{m.label}: no setting reaches recall@1 {a.target_recall1}; best {best['recall1']:.3f} at {json.dumps(best['setting'])}")


# ---------------------------------------------------------------------------- parent


def machine():
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    cores = os.cpu_count() or 1
    return dict(cpu=cpu, cores=cores, load_per_core=os.getloadavg()[0] / cores, python=platform.python_version())


def fmt(v, spec, scale=1.0):
    return "–" if v is None else format(v * scale, spec)


def setting_text(s):
    return " ".join(f"{k} {v}" for k, v in s.items()) or "–"


def tables(results, batch):
    rows = [r for r in results if r["type"] == "search"]
    builds = {r["method"]: r for r in results if r["type"] == "build"}
    chosen = {r["method"]: r for r in results if r["type"] == "chosen"}
    print()
    print(f"| method | setting | recall@1 | recall@10 | rank-1 | q/s batch 1 | p50 ms | p99 ms | CPU µs/q | "
          f"q/s batch {batch} | batch p50/p99 ms | CPU µs/q batch |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        c = chosen.get(r["method"], {})
        mark = " *" if c.get("reached") and c.get("setting") == r["setting"] else ""
        print(f"| {r['label']} | {setting_text(r['setting'])}{mark} | {r['recall1']:.3f} | {r['recall10']:.3f} | {fmt(r['rank1'], '.3f')} | "
              f"{r['qps1']:.0f} | {r['p50_ms']:.3f} | {r['p99_ms']:.3f} | {r['cpu_s_per_query1'] * 1e6:.1f} | "
              f"{fmt(r.get('qps_batch'), '.0f')} | {fmt(r.get('batch_p50_ms'), '.3f')} / {fmt(r.get('batch_p99_ms'), '.3f')} | {fmt(r.get('cpu_s_per_query_batch'), '.1f', 1e6)} |")
    print("(* the first setting whose recall@1 reaches the target)")
    print()
    print("| method | train s | add s | faces/s | threads | build CPU s | RSS B/face | index B/face | call overhead µs |")
    print("|---|---|---|---|---|---|---|---|---|")
    for b in builds.values():
        print(f"| {b['label']} | {b['train_s']:.1f} | {b['add_s']:.1f} | {fmt(b['faces_per_s'], '.0f')} | {b['threads']} | "
              f"{b['build_cpu_s']:.1f} | {fmt(b['rss_bytes_per_face'], '.0f')} | {b['code_bytes_per_face']:.0f} | {fmt(b['call_us'], '.1f')} |")
    print()
    for c in chosen.values():
        if c["reached"]:
            print(f"{c['label']}: recall@1 {c['recall1']:.3f} at {setting_text(c['setting'])}")
        else:
            print(f"{c['label']}: NEVER reaches recall@1 {c['target_recall1']} in its sweep; best {c['best_recall1']:.3f} at "
                  f"{setting_text(c['best_setting'])}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dump")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--target-recall1", type=float, default=0.99)
    ap.add_argument("--full-sweep", action="store_true", help="every setting, not only up to the first reaching the target")
    ap.add_argument("--batch", type=int, default=64, help="rows per call of the throughput pass (0: none)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--scan-queries", "--exact-queries", type=int, default=200, dest="scan_queries",
                    help="queries the exhaustive scans time one at a time")
    ap.add_argument("--m", type=int, default=16)
    ap.add_argument("--ef-construction", type=int, default=128)
    ap.add_argument("--efs", default="16,32,64,128,256,512,1024,2048,4096,8192")
    ap.add_argument("--k-factors", default="1,2,4,8,16,32,64,128,256")
    ap.add_argument("--nlist", type=int, default=None, help="IVF lists (default 4 sqrt(n), a power of two)")
    ap.add_argument("--nprobes", default=None, help="IVF lists probed (default 1, 2, 4, ... nlist)")
    ap.add_argument("--ivf-k-factors", "--ivf-k-factor", default="16,64", dest="ivf_k_factors",
                    help="k_factor of the IVF's re-ranking: each value swept over every nprobe until one reaches the target")
    ap.add_argument("--json", default=None, help="also write every result to this file")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.batch < 0:
        raise SystemExit("--batch must be 0 or more")
    d = read_dump(a.dump)
    if a.child:
        child(a.child, a, d)
        return

    methods = [e for e in a.methods.split(",") if e]
    for e in methods:
        if not known_method(e):
            raise SystemExit(f"unknown method {e} ({', '.join(METHODS)}, or faiss-[ivf]pqfs<M>[-refine])")
    meta = dict(type="meta", dump=os.path.abspath(a.dump), n=d["n"], dims=d["dims"], queries=d["queries"], k=d["k"],
                methods=methods, M=a.m, ef_construction=a.ef_construction, threads=a.threads, batch=a.batch,
                scan_queries=a.scan_queries, target_recall1=a.target_recall1, full_sweep=a.full_sweep,
                machine=machine(), dataset=d["meta"])
    emit(meta)
    results = [meta]
    for e in methods:
        # The child reads the same options; --child picks its method.
        proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), *sys.argv[1:], "--child", e], stdout=subprocess.PIPE, text=True)
        for line in proc.stdout:
            line = line.strip()
            if line.startswith("{"):
                results.append(json.loads(line))
            print(line, flush=True)
        if proc.wait() != 0:
            raise SystemExit(f"{e} failed (exit {proc.returncode})")

    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    m = meta["machine"]
    print(f"\n{d['n']} faces x {d['dims']} dims, {d['queries']} queries, top {K}; target recall@1 {a.target_recall1}; "
          f"graphs M {a.m}, efConstruction {a.ef_construction}; {m['cpu']}, {m['cores']} cores "
          f"(load {m['load_per_core']:.2f}/core at start), Python {m['python']}")
    tables(results, a.batch)


if __name__ == "__main__":
    main()
