//! Build time, memory, latency and recall of the shard set against exact brute force,
//! for each scalar kind, on synthetic unit vectors.
//!
//!     cargo run --release -p face-index --example bench -- --n 1000000 --dim 1024
//!
//! Options: --n faces (100000), --dim (1024), --queries (1000), --kinds (f32,f16,i8),
//! --shards (0 = cores), --expansion-search (0 = usearch default; a list such as 64,256,1024
//! sweeps it on one build per kind, reloading the shards from a snapshot for each value),
//! --target-recall R (stop a sweep at the first value whose recall@10 reaches R),
//! --oversample (4), --no-exact (f16/i8 without exact re-rank), --near SIGMA (see below),
//! --seed (1).
//!
//! By default queries are fresh random unit vectors, the hardest case for a graph index
//! (every neighbour is nearly orthogonal). With `--near 1.0` each query is a stored face
//! plus Gaussian noise of relative size SIGMA (cosine to its source about 1/sqrt(1+SIGMA^2),
//! 0.71 for 1.0, like a new photo of an enrolled person), which is the identification case.

use std::time::{Duration, Instant};

use face_index::{dot, route::mix64, Scalar, ShardSet, ShardSetOptions};

struct Args {
    n: usize,
    dim: usize,
    queries: usize,
    kinds: Vec<Scalar>,
    shards: usize,
    expansion_search: Vec<usize>,
    target_recall: Option<f64>,
    oversample: usize,
    exact: bool,
    near: Option<f64>,
    seed: u64,
}

fn parse_args() -> Args {
    let mut a = Args {
        n: 100_000,
        dim: 1024,
        queries: 1000,
        kinds: vec![Scalar::F32, Scalar::F16, Scalar::I8],
        shards: 0,
        expansion_search: vec![0],
        target_recall: None,
        oversample: 4,
        exact: true,
        near: None,
        seed: 1,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut val = || it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--n" => a.n = val().parse().expect("--n"),
            "--dim" => a.dim = val().parse().expect("--dim"),
            "--queries" => a.queries = val().parse().expect("--queries"),
            "--kinds" => {
                a.kinds = val()
                    .split(',')
                    .map(|k| k.parse().expect("--kinds"))
                    .collect()
            }
            "--shards" => a.shards = val().parse().expect("--shards"),
            "--expansion-search" => {
                a.expansion_search = val()
                    .split(',')
                    .map(|v| v.parse().expect("--expansion-search"))
                    .collect()
            }
            "--target-recall" => a.target_recall = Some(val().parse().expect("--target-recall")),
            "--oversample" => a.oversample = val().parse().expect("--oversample"),
            "--seed" => a.seed = val().parse().expect("--seed"),
            "--no-exact" => a.exact = false,
            "--near" => a.near = Some(val().parse().expect("--near")),
            other => panic!("unknown option {other}"),
        }
    }
    a
}

/// Deterministic unit vectors: row `i` depends only on (seed, i), so generation can be split
/// across threads and a run is reproducible.
fn fill_unit_rows(out: &mut [f32], dim: usize, first_row: usize, seed: u64) {
    for (r, row) in out.chunks_exact_mut(dim).enumerate() {
        let mut state = mix64(seed ^ mix64((first_row + r) as u64));
        let mut next = || {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            (mix64(state) >> 11) as f64 / (1u64 << 53) as f64
        };
        for pair in row.chunks_mut(2) {
            // Box-Muller: two normals per pair of uniforms.
            let u = next().max(1e-300);
            let v = next();
            let radius = (-2.0 * u.ln()).sqrt();
            let angle = std::f64::consts::TAU * v;
            pair[0] = (radius * angle.cos()) as f32;
            if pair.len() > 1 {
                pair[1] = (radius * angle.sin()) as f32;
            }
        }
        let norm = row.iter().map(|x| x * x).sum::<f32>().sqrt();
        row.iter_mut().for_each(|x| *x /= norm);
    }
}

fn unit_rows(rows: usize, dim: usize, seed: u64, threads: usize) -> Vec<f32> {
    let mut data = vec![0f32; rows * dim];
    let per = rows.div_ceil(threads).max(1);
    std::thread::scope(|s| {
        for (t, chunk) in data.chunks_mut(per * dim).enumerate() {
            s.spawn(move || fill_unit_rows(chunk, dim, t * per, seed));
        }
    });
    data
}

/// Exact top-k (similarity, row) by scanning every row with an f32 dot product.
fn brute_top(data: &[f32], dim: usize, q: &[f32], k: usize) -> Vec<(f32, u64)> {
    let mut top: Vec<(f32, u64)> = Vec::with_capacity(k + 1);
    let mut worst = f32::NEG_INFINITY;
    for (i, row) in data.chunks_exact(dim).enumerate() {
        let s = dot(q, row);
        if top.len() < k || s > worst {
            let at = top.partition_point(|&(t, _)| t >= s);
            top.insert(at, (s, i as u64 + 1));
            top.truncate(k);
            worst = top.last().map_or(f32::NEG_INFINITY, |t| t.0);
        }
    }
    top
}

fn rss_bytes() -> usize {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<usize>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

struct Row {
    label: String,
    build: Duration,
    alloc_bytes_per_face: f64,
    used_bytes_per_face: f64,
    total_bytes_per_face: f64,
    rss_bytes_per_face: f64,
    p50: Duration,
    p99: Duration,
    recall1: f64,
    recall10: f64,
}

fn main() {
    let a = parse_args();
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    println!(
        "faces {} dim {} queries {} cores {} shards {}",
        a.n,
        a.dim,
        a.queries,
        cores,
        if a.shards == 0 { cores } else { a.shards }
    );

    let t = Instant::now();
    let data = unit_rows(a.n, a.dim, a.seed, cores);
    let mut queries = unit_rows(a.queries, a.dim, a.seed ^ 0xDEAD_BEEF, cores);
    if let Some(sigma) = a.near {
        for (i, q) in queries.chunks_exact_mut(a.dim).enumerate() {
            let src = (mix64(a.seed ^ i as u64) % a.n as u64) as usize;
            let base = &data[src * a.dim..(src + 1) * a.dim];
            q.iter_mut()
                .zip(base)
                .for_each(|(x, b)| *x = b + *x * sigma as f32);
            let norm = q.iter().map(|x| x * x).sum::<f32>().sqrt();
            q.iter_mut().for_each(|x| *x /= norm);
        }
    }
    println!(
        "generated in {:.1}s, rss {:.0} MiB",
        t.elapsed().as_secs_f64(),
        rss_bytes() as f64 / 1048576.0
    );

    // Ground truth on all cores; latency of the brute-force scan measured single-threaded.
    let t = Instant::now();
    let per = a.queries.div_ceil(cores).max(1);
    let truth: Vec<Vec<u64>> = std::thread::scope(|s| {
        let handles: Vec<_> = queries
            .chunks(per * a.dim)
            .map(|qs| {
                let data = &data;
                s.spawn(move || {
                    qs.chunks_exact(a.dim)
                        .map(|q| {
                            brute_top(data, a.dim, q, 10)
                                .into_iter()
                                .map(|t| t.1)
                                .collect::<Vec<_>>()
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    println!("ground truth in {:.1}s", t.elapsed().as_secs_f64());
    let timed = a.queries.min(100);
    let mut brute_lat: Vec<Duration> = queries
        .chunks_exact(a.dim)
        .take(timed)
        .map(|q| {
            let t = Instant::now();
            std::hint::black_box(brute_top(&data, a.dim, q, 10));
            t.elapsed()
        })
        .collect();
    brute_lat.sort();
    let brute = Row {
        label: "brute f32 (1 thread)".into(),
        build: Duration::ZERO,
        alloc_bytes_per_face: (a.dim * 4) as f64,
        used_bytes_per_face: (a.dim * 4) as f64,
        total_bytes_per_face: (a.dim * 4) as f64,
        rss_bytes_per_face: f64::NAN,
        p50: percentile(&brute_lat, 0.5),
        p99: percentile(&brute_lat, 0.99),
        recall1: 1.0,
        recall10: 1.0,
    };

    let ids: Vec<u64> = (1..=a.n as u64).collect();
    let sweeping = a.expansion_search.len() > 1;
    let mut rows = Vec::new();
    for &kind in &a.kinds {
        let options = |ef: usize| {
            let mut o = ShardSetOptions::new(a.dim);
            o.shards = a.shards;
            o.scalar = kind;
            o.expansion_search = ef;
            o.oversample = a.oversample;
            o.keep_exact = Some(a.exact);
            o
        };
        let o = options(a.expansion_search[0]);
        let rss0 = rss_bytes();
        let mut set = ShardSet::new(&o).unwrap();
        let t = Instant::now();
        let none: Vec<Vec<&str>> = Vec::new();
        let chunk = 20_000;
        for (start, rows_ids) in ids.chunks(chunk).enumerate().map(|(i, c)| (i * chunk, c)) {
            let vecs = &data[start * a.dim..(start + rows_ids.len()) * a.dim];
            set.rebuild_batch(rows_ids, vecs, &none).unwrap();
        }
        for k in 0..set.shard_count() {
            set.finish_rebuild(k, 0).unwrap();
        }
        let build = t.elapsed();
        let rss1 = rss_bytes();
        eprintln!(
            "{}: built in {:.1}s ({})",
            kind.as_str(),
            build.as_secs_f64(),
            set.hardware_acceleration()
        );
        // A sweep searches the same graphs with other candidate lists: the list is fixed when
        // an index is created, so the shards are saved once and reloaded for each value.
        let snap = std::env::temp_dir().join(format!("face-index-bench-{}-{}", std::process::id(), kind.as_str()));
        if sweeping {
            std::fs::create_dir_all(&snap).unwrap();
            for r in set.save_all(&snap) {
                r.unwrap();
            }
        }
        for (step, &ef) in a.expansion_search.iter().enumerate() {
            if step > 0 {
                drop(set);
                set = ShardSet::new(&options(ef)).unwrap();
                for r in set.load_all(&snap) {
                    r.unwrap();
                }
            }
            let health_bytes: usize = set.health().iter().map(|h| h.memory_bytes).sum();
            let mut lat = Vec::with_capacity(a.queries);
            let (mut hit1, mut hit10) = (0usize, 0usize);
            for (q, truth) in queries.chunks_exact(a.dim).zip(&truth) {
                let t = Instant::now();
                let r = set.search(q, 10, None).unwrap();
                lat.push(t.elapsed());
                hit1 += (r.hits.first().map(|h| h.id) == truth.first().copied()) as usize;
                hit10 += r.hits.iter().filter(|h| truth.contains(&h.id)).count();
            }
            lat.sort();
            let mut label = match (kind, o.reranks()) {
                (Scalar::F32, _) => "usearch f32".to_string(),
                (k, true) => format!("usearch {} +rerank x{}", k.as_str(), a.oversample),
                (k, false) => format!("usearch {}", k.as_str()),
            };
            if sweeping || ef != 0 {
                label.push_str(&format!(" ef {}", if ef == 0 { 64 } else { ef }));
            }
            let recall10 = hit10 as f64 / (a.queries * 10) as f64;
            eprintln!("{label}: recall@10 {recall10:.3}, p50 {:.3} ms", ms(percentile(&lat, 0.5)));
            rows.push(Row {
                label,
                build,
                alloc_bytes_per_face: set.index_memory().allocated as f64 / a.n as f64,
                used_bytes_per_face: set.index_memory().used as f64 / a.n as f64,
                total_bytes_per_face: health_bytes as f64 / a.n as f64,
                rss_bytes_per_face: rss1.saturating_sub(rss0) as f64 / a.n as f64,
                p50: percentile(&lat, 0.5),
                p99: percentile(&lat, 0.99),
                recall1: hit1 as f64 / a.queries as f64,
                recall10,
            });
            if a.target_recall.is_some_and(|r| recall10 >= r) {
                break;
            }
        }
        drop(set);
        if sweeping {
            let _ = std::fs::remove_dir_all(&snap);
        }
    }

    println!();
    println!(
        "| {:<26} | {:>7} | {:>9} | {:>9} | {:>9} | {:>9} | {:>8} | {:>8} | {:>8} | {:>9} | {:>8} |",
        "method", "build s", "alloc B/f", "used B/f", "total B/f", "RSS B/f", "p50 ms", "p99 ms", "recall@1", "recall@10", "vs brute"
    );
    println!("|{}|", ["-"; 11].map(|_| "-".repeat(11)).join("|"));
    for r in std::iter::once(&brute).chain(&rows) {
        println!(
            "| {:<26} | {:>7.1} | {:>9.0} | {:>9.0} | {:>9.0} | {:>9.0} | {:>8.3} | {:>8.3} | {:>8.3} | {:>9.3} | {:>7.1}x |",
            r.label,
            r.build.as_secs_f64(),
            r.alloc_bytes_per_face,
            r.used_bytes_per_face,
            r.total_bytes_per_face,
            r.rss_bytes_per_face,
            ms(r.p50),
            ms(r.p99),
            r.recall1,
            r.recall10,
            ms(brute.p50) / ms(r.p50).max(1e-9),
        );
    }
    if let Some(f32row) = rows.iter().find(|r| r.label == "usearch f32") {
        println!();
        for r in rows.iter().filter(|r| r.label != "usearch f32" && !sweeping) {
            println!(
                "{}: used index memory {:.2}x of f32, total {:.2}x, p50 latency {:.2}x, build {:.2}x",
                r.label,
                r.used_bytes_per_face / f32row.used_bytes_per_face,
                r.total_bytes_per_face / f32row.total_bytes_per_face,
                ms(r.p50) / ms(f32row.p50),
                r.build.as_secs_f64() / f32row.build.as_secs_f64(),
            );
        }
    }
}
