"""FAISS HNSW, hnswlib and exact search on the vectors of an index-benchmark dump, with the
numbers our index reports: build rate, memory, and for each efSearch recall@1 and recall@10
against the dump's exact top 10, queries/s one query at a time on one thread and in one batch
on all threads, p50/p99 latency and CPU time per query.

    bench/.venv/bin/python bench/search/ann-peers.py DUMP_DIR [--m 16] [--ef-construction 128]
        [--efs 10,16,24,32,48,64,96,128,192,256,384,512] [--target-recall1 0.99]
        [--engines exact,faiss,hnswlib] [--threads N] [--exact-queries 200] [--json FILE]

DUMP_DIR is what `cargo run --release -p face-index --example bench -- --dump DIR` writes
(bench/search/ann.ts runs both), in the layout of big-ann-benchmarks: every file is two little-endian
u32 (rows, columns) and then the rows; base.fbin (the gallery, f32 unit rows), query.fbin,
groundtruth.neighbors.ibin (i32 exact top 10 per query, gallery rows from 0, best first),
optionally base.person.ibin and query.person.ibin (i32 person per row, -1 for nobody), and
dataset.json (dims, base, queries, k, about). Setup: `sh bench/search/ann-setup.sh` (bench/.venv from
bench/search/requirements-ann.txt).

- Graphs: FAISS IndexHNSWFlat and hnswlib, both inner product (rows are unit length, so this
  is cosine), built with M = --m and efConstruction = --ef-construction, which default to what
  usearch uses when our index leaves them at 0 (connectivity 16, expansion_add 128). Both build
  on --threads threads (default all cores, as ours does).
- Memory: growth of the process's resident set over the build, per face (vectors and graph).
- Single: every query alone (one call each, one thread); queries/s = queries / summed call
  time, p50/p99 of the call times, CPU = process CPU time over the pass / queries. Each call
  includes the Python binding's cost, measured on its own as `call_us` (a search of a 16-row
  index) and printed with the build line.
- Batch: all queries in one call on --threads threads; the best of up to 3 passes (at least
  0.3 s of calls), CPU time of that pass / queries.
- Exact: numpy (one BLAS matrix product per query, or per block of queries) and FAISS
  IndexFlatIP; --exact-queries of the queries are timed one at a time, all of them in batch.
  Their recall checks that the dump's ground truth is read right (it must be 1.000).
- Rank-1, where the dump names the person of every query: the top hit (of the batch pass) is
  an enrolled photo of the query's own person.
- Equal recall: for each graph, the smallest swept ef whose recall@1 reaches --target-recall1.

Every engine runs in a child process of its own, so each build's memory growth is its own.
Output: one JSON line per result on stdout (`{"type": "meta" | "build" | "search" | "chosen",
...}`), progress on stderr, then a readable table.
"""
import argparse
import ctypes
import json
import os
import platform
import subprocess
import sys
import time

ENGINES = ("exact", "faiss", "hnswlib")


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
    k = min(found.shape[1], truth.shape[1], 10)
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


def batch_pass(search_all, queries):
    """All queries in one call: (ids, wall s, CPU s) of the fastest of up to 3 passes."""
    best = None
    spent = 0.0
    for i in range(3):
        c0, t0 = cpu_seconds(), time.perf_counter()
        ids = search_all(queries)
        wall, cpu = time.perf_counter() - t0, cpu_seconds() - c0
        spent += wall
        if best is None or wall < best[1]:
            best = (ids, wall, cpu)
        if i >= 1 and spent >= 0.3:
            break
    return best


def pct(lat, p):
    s = sorted(lat)
    return float(s[int(round((len(s) - 1) * p))]) if s else float("nan")


def rank1(np, found, persons):
    """Identification: the top hit is an enrolled photo of the query's own person."""
    if persons is None:
        return None
    gp, qp = persons
    top = np.asarray(found)[:, 0]
    who = np.where(top >= 0, gp[np.clip(top, 0, len(gp) - 1)], -1)
    return float(np.mean((who >= 0) & (who == qp[: len(top)])))


def search_row(np, engine, label, ef, truth, persons, single, batch, threads):
    found, lat, cpu1 = single
    ids_b, wall_b, cpu_b = batch
    q = len(lat)
    r1, r10 = recall(np, found, truth[:q])
    rb1, rb10 = recall(np, ids_b, truth)
    return dict(
        type="search", engine=engine, label=label, ef=ef, queries=len(truth), timed_single=q,
        recall1=r1, recall10=r10, recall1_batch=rb1, recall10_batch=rb10,
        rank1=rank1(np, ids_b, persons), rank1_exact=rank1(np, truth, persons),
        qps1=q / float(np.sum(lat)), p50_ms=pct(lat, 0.5) * 1e3, p99_ms=pct(lat, 0.99) * 1e3,
        cpu_s_per_query1=cpu1 / q,
        qps_batch=len(truth) / wall_b, cpu_s_per_query_batch=cpu_b / len(truth), threads_batch=threads,
    )


def call_overhead_us(make_tiny, search_one, dims, np, calls=2000):
    """Seconds per call of a search over a 16-row index: the binding's own cost, which every
    single-query figure of the peers includes and the Rust figures do not."""
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


# ---------------------------------------------------------------------------- engines (children)


def child(engine, a, d):
    import numpy as np

    threads = a.threads
    data, queries, truth, persons = load(d, np)
    n, dims, k = d["n"], d["dims"], 10
    progress(f"{engine}: {n} x {dims} gallery, {len(queries)} queries, {threads} threads")
    efs = [int(v) for v in a.efs.split(",") if v]

    if engine == "exact":
        import faiss

        blas_ok = blas_threads(1)
        timed = queries[: a.exact_queries]

        def np_one(q):
            s = data @ q
            top = np.argpartition(-s, k)[:k]
            return top[np.argsort(-s[top])]

        block = max(1, (64 << 20) // max(1, n))  # at most 64M scores (256 MiB) at once

        def np_all(qs):
            out = np.empty((len(qs), k), dtype=np.int64)
            for s0 in range(0, len(qs), block):
                s = qs[s0 : s0 + block] @ data.T
                top = np.argpartition(-s, k, axis=1)[:, :k]
                order = np.argsort(-np.take_along_axis(s, top, 1), axis=1)
                out[s0 : s0 + block] = np.take_along_axis(top, order, 1)
            return out

        single = single_pass(np, np_one, timed)
        blas_threads(threads)
        batch = batch_pass(np_all, queries)
        emit(dict(type="build", engine="numpy", label="exact: numpy (BLAS)", n=n, dims=dims, threads=threads,
                  build_s=0.0, faces_per_s=None, build_cpu_s=0.0, rss_bytes_per_face=dims * 4,
                  version=np.__version__, blas_threads_set=blas_ok,
                  call_us=call_overhead_us(lambda t: t, lambda t, q: np.argsort(-(t @ q))[:k], dims, np)))
        emit(search_row(np, "numpy", "exact: numpy (BLAS)", None, truth, persons, single, batch, threads))

        faiss.omp_set_num_threads(threads)
        r0 = rss_bytes()
        c0, t0 = cpu_seconds(), time.perf_counter()
        flat = faiss.IndexFlatIP(dims)
        flat.add(data)
        build_s, build_cpu = time.perf_counter() - t0, cpu_seconds() - c0
        grown = rss_bytes() - r0

        def make_flat(t):
            i = faiss.IndexFlatIP(dims)
            i.add(t)
            return i

        emit(dict(type="build", engine="faiss-flat", label="exact: FAISS IndexFlatIP", n=n, dims=dims, threads=threads,
                  build_s=build_s, faces_per_s=n / build_s if build_s > 0 else None, build_cpu_s=build_cpu,
                  rss_bytes_per_face=grown / n, version=faiss.__version__,
                  call_us=call_overhead_us(make_flat, lambda i, q: i.search(q[None, :], k), dims, np)))
        faiss.omp_set_num_threads(1)
        single = single_pass(np, lambda q: flat.search(q[None, :], k)[1][0], timed)
        faiss.omp_set_num_threads(threads)
        batch = batch_pass(lambda qs: flat.search(qs, k)[1], queries)
        emit(search_row(np, "faiss-flat", "exact: FAISS IndexFlatIP", None, truth, persons, single, batch, threads))
        return

    if engine == "faiss":
        import faiss

        label = f"FAISS IndexHNSWFlat M{a.m}"
        version = faiss.__version__
        faiss.omp_set_num_threads(threads)
        r0 = rss_bytes()
        c0, t0 = cpu_seconds(), time.perf_counter()
        index = faiss.IndexHNSWFlat(dims, a.m, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = a.ef_construction
        index.add(data)
        build_s, build_cpu = time.perf_counter() - t0, cpu_seconds() - c0
        grown = rss_bytes() - r0

        def make_tiny(t):
            i = faiss.IndexHNSWFlat(dims, a.m, faiss.METRIC_INNER_PRODUCT)
            i.add(t)
            return i

        overhead = call_overhead_us(make_tiny, lambda i, q: i.search(q[None, :], k), dims, np)

        def set_ef(ef):
            index.hnsw.efSearch = ef

        def one(q):
            return index.search(q[None, :], k)[1][0]

        def all_(qs):
            return index.search(qs, k)[1]

        def single_threads(t):
            faiss.omp_set_num_threads(t)

    elif engine == "hnswlib":
        import hnswlib

        label = f"hnswlib M{a.m}"
        version = getattr(hnswlib, "__version__", "0.8.0")
        r0 = rss_bytes()
        c0, t0 = cpu_seconds(), time.perf_counter()
        index = hnswlib.Index(space="ip", dim=dims)
        index.init_index(max_elements=n, ef_construction=a.ef_construction, M=a.m, random_seed=100)
        index.add_items(data, np.arange(n), num_threads=threads)
        build_s, build_cpu = time.perf_counter() - t0, cpu_seconds() - c0
        grown = rss_bytes() - r0

        def make_tiny(t):
            i = hnswlib.Index(space="ip", dim=dims)
            i.init_index(max_elements=len(t), ef_construction=a.ef_construction, M=a.m)
            i.add_items(t, np.arange(len(t)), num_threads=1)
            return i

        overhead = call_overhead_us(make_tiny, lambda i, q: i.knn_query(q[None, :], k=k, num_threads=1), dims, np)
        cur = {"threads": 1}

        def set_ef(ef):
            index.set_ef(ef)

        def one(q):
            return index.knn_query(q[None, :], k=k, num_threads=1)[0][0]

        def all_(qs):
            return index.knn_query(qs, k=k, num_threads=cur["threads"])[0]

        def single_threads(t):
            cur["threads"] = t

    else:
        raise SystemExit(f"unknown engine {engine}")

    emit(dict(type="build", engine=engine, label=label, n=n, dims=dims, threads=threads, M=a.m,
              ef_construction=a.ef_construction, build_s=build_s, faces_per_s=n / build_s,
              build_cpu_s=build_cpu, rss_bytes_per_face=grown / n, version=version, call_us=overhead))
    progress(f"{label}: built in {build_s:.1f} s ({n / build_s:.0f} faces/s, {threads} threads), "
             f"RSS +{grown / n:.0f} B/face, call overhead {overhead:.1f} us")
    for ef in efs:
        set_ef(ef)
        single_threads(1)
        single = single_pass(np, one, queries)
        single_threads(threads)
        batch = batch_pass(all_, queries)
        row = search_row(np, engine, label, ef, truth, persons, single, batch, threads)
        emit(row)
        progress(f"{label} ef {ef}: recall@1 {row['recall1']:.3f}, recall@10 {row['recall10']:.3f}, "
                 f"{row['qps1']:.0f} q/s single, {row['qps_batch']:.0f} q/s batch, p50 {row['p50_ms']:.3f} ms")
        if a.stop_recall10 is not None and row["recall10"] >= a.stop_recall10 and row["recall1"] >= a.target_recall1:
            break


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


def fmt(v, spec):
    return "–" if v is None else format(v, spec)


def table(rows, builds, chosen):
    print()
    print("| engine | ef | recall@1 | recall@10 | rank-1 | q/s 1 thread | p50 ms | p99 ms | CPU ms/q | q/s batch | CPU ms/q batch |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        mark = " *" if chosen.get(r["engine"]) == r["ef"] and r["ef"] is not None else ""
        print(f"| {r['label']} | {fmt(r['ef'], 'd')}{mark} | {r['recall1']:.3f} | {r['recall10']:.3f} | {fmt(r['rank1'], '.3f')} | {r['qps1']:.0f} | "
              f"{r['p50_ms']:.3f} | {r['p99_ms']:.3f} | {r['cpu_s_per_query1'] * 1e3:.3f} | {r['qps_batch']:.0f} | "
              f"{r['cpu_s_per_query_batch'] * 1e3:.3f} |")
    print("(* the smallest ef reaching the recall@1 target)")
    print()
    print("| engine | build s | faces/s | threads | build CPU s | RSS B/face | call overhead µs |")
    print("|---|---|---|---|---|---|---|")
    for b in builds:
        print(f"| {b['label']} | {b['build_s']:.1f} | {fmt(b['faces_per_s'], '.0f')} | {b['threads']} | {b['build_cpu_s']:.1f} | "
              f"{b['rss_bytes_per_face']:.0f} | {b['call_us']:.1f} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dump")
    ap.add_argument("--m", type=int, default=16)
    ap.add_argument("--ef-construction", type=int, default=128)
    ap.add_argument("--efs", default="10,16,24,32,48,64,96,128,192,256,384,512")
    ap.add_argument("--target-recall1", type=float, default=0.99)
    ap.add_argument("--stop-recall10", type=float, default=None,
                    help="end a graph's sweep once recall@10 reaches this (and recall@1 the target)")
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--exact-queries", type=int, default=200)
    ap.add_argument("--json", default=None, help="also write every result to this file")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    d = read_dump(a.dump)
    if a.child:
        child(a.child, a, d)
        return

    engines = [e for e in a.engines.split(",") if e]
    for e in engines:
        if e not in ENGINES:
            raise SystemExit(f"unknown engine {e} ({', '.join(ENGINES)})")
    meta = dict(type="meta", dump=os.path.abspath(a.dump), n=d["n"], dims=d["dims"], queries=d["queries"], k=d["k"],
                M=a.m, ef_construction=a.ef_construction, threads=a.threads,
                target_recall1=a.target_recall1, machine=machine(), dataset=d["meta"])
    emit(meta)
    results = [meta]
    passthrough = []
    for flag in ("m", "ef_construction", "efs", "target_recall1", "stop_recall10", "threads", "exact_queries"):
        v = getattr(a, flag)
        if v is not None:
            passthrough += ["--" + flag.replace("_", "-"), str(v)]
    for e in engines:
        proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), a.dump, "--child", e, *passthrough],
                                stdout=subprocess.PIPE, text=True)
        for line in proc.stdout:
            line = line.strip()
            if line.startswith("{"):
                results.append(json.loads(line))
            print(line, flush=True)
        if proc.wait() != 0:
            raise SystemExit(f"{e} failed (exit {proc.returncode})")

    rows = [r for r in results if r["type"] == "search"]
    builds = [r for r in results if r["type"] == "build"]
    chosen = {}
    for e in ("faiss", "hnswlib"):
        mine = [r for r in rows if r["engine"] == e]
        if not mine:
            continue
        hit = next((r for r in mine if r["recall1"] >= a.target_recall1), None)
        pick = hit or max(mine, key=lambda r: (r["recall1"], r["recall10"]))
        chosen[e] = pick["ef"]
        c = dict(type="chosen", engine=e, label=pick["label"], ef=pick["ef"], target_recall1=a.target_recall1,
                 reached=hit is not None, recall1=pick["recall1"], recall10=pick["recall10"])
        emit(c)
        results.append(c)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    m = meta["machine"]
    print(f"\n{d['n']} faces x {d['dims']} dims, {d['queries']} queries, top 10; M {a.m}, efConstruction {a.ef_construction}; "
          f"{m['cpu']}, {m['cores']} cores (load {m['load_per_core']:.2f}/core at start), Python {m['python']}")
    table(rows, builds, chosen)
    for e, ef in chosen.items():
        c = next(r for r in results if r["type"] == "chosen" and r["engine"] == e)
        if not c["reached"]:
            print(f"{c['label']}: no swept ef reached recall@1 {a.target_recall1}; best ef {ef} ({c['recall1']:.3f})")


if __name__ == "__main__":
    main()
