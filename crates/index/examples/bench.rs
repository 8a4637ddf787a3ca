//! Build time, memory, snapshot size, start-up time, latency, throughput and recall of the
//! shard set against exact brute force, for each scalar kind, with and without exact
//! re-ranking, over a sweep of the search candidate list.
//!
//!     cargo run --release -p face-index --example bench -- --data sface --n 1000000 --kinds f16
//!     cargo run --release -p face-index --example bench -- --n 1000000 --dim 1024
//!
//! Data (`--data`):
//! - `random` (default): synthetic unit vectors of `--dim` dimensions, the hardest case for a
//!   graph index (every neighbour is nearly orthogonal). Queries are fresh random vectors, or
//!   with `--near SIGMA` a stored face plus Gaussian noise of relative size SIGMA (cosine to
//!   its source about 1/sqrt(1+SIGMA^2), 0.71 for 1.0, like a new photo of an enrolled
//!   person); rank-1 then counts the source as the right answer.
//! - `sface`: face embeddings (docs/face-vectors.md). Every real person with two or more
//!   photos (bench/data/sface-real, written by bench/search/face-vectors.ts) has one photo enrolled
//!   and the others are the queries; the rest of the `--n` faces are synthetic people from
//!   the generator fitted to the real embeddings (examples/faces/mod.rs), in a seeded random
//!   order. Rank-1 counts a query as identified when its top hit is its own person's
//!   enrolled photo.
//!
//! Per scalar kind the graph is built once (`rebuild_batch`, which fills shards in parallel)
//! and snapshotted; each (re-ranking, candidate list) row loads it back, which is the
//! service's start-up, and searches every query from 1 and from 2 client threads (and in
//! batches, `search_batch`). Recall is against an exact f32 scan of the same gallery.
//!
//! Options: --data random|sface, --n faces (100000), --dim (1024, random only),
//! --queries (random: 1000; sface: all, or a seeded sample of this many),
//! --kinds (f32,f16,i8: graphs of that scalar; scan: the scan kind, swept over --rerank
//! instead of the candidate list), --rerank (64; a list sweeps it), --exact on,off (re-ranking with kept f32 copies, for f16/i8;
//! random: on, sface: on,off; --no-exact is `--exact off`), --shards (0 = cores),
//! --expansion-search (0 = usearch default 64; a list such as 64,128,256 sweeps it),
//! --target-recall R (stop a sweep at the first value whose recall@10 reaches R),
//! --target-recall1 R (the same by recall@1),
//! --oversample (4), --connectivity (0 = usearch default 16), --expansion-add (0 = usearch
//! default 128), --threads (the index's worker pool; 0 = cores), --clients (1,2), --batch (64; 0 skips the batched pass),
//! --near SIGMA, --seed (1), --real STEM (bench/data/sface-real),
//! --snapshots DIR (system temp dir), --dump DIR (see below), --dump-only.
//!
//! `--dump DIR` writes the gallery, the queries and the exact top-10 in the layout of
//! big-ann-benchmarks and cuVS, so other ANN libraries can be measured on the very same data:
//! every file starts with two little-endian u32, rows and columns, then the rows:
//! `base.fbin` (gallery, f32, unit rows), `query.fbin` (f32, unit rows),
//! `groundtruth.neighbors.ibin` (i32 gallery row numbers from 0, best first, 10 per query),
//! `groundtruth.distances.fbin` (f32 cosine similarity = inner product of those rows, best
//! first), `base.person.ibin` and `query.person.ibin` (i32 person per row, 1 column; -1 for
//! synthetic distractors or where there is none), and `dataset.json` describing the run.
//! Gallery row r is face id r + 1 in the index.
//!
//! Besides the two markdown tables, every build and every search row is printed as one JSON
//! line (`{"type": "build" | "search", "engine": "ours-<kind>[-rerank|-norerank]", ...}`)
//! for bench/search/ann.ts, which sets these numbers beside other libraries'. The engine is plain
//! `ours-<kind>` for the service's default re-ranking of that kind (f16 without, i8 with).

mod faces;

use std::fs;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use face_index::{dot, route::mix64, IndexKind, Scalar, ShardSet, ShardSetOptions};
use faces::{FaceModel, Rng, Within};

const K: usize = 10;
/// Person number for a gallery row that is nobody's enrolled photo.
const NOBODY: u32 = u32::MAX;

/// What a row builds: a graph of a scalar kind, or the scan kind.
#[derive(Clone, Copy, PartialEq)]
enum Built {
    Graph(Scalar),
    Scan,
}

impl Built {
    fn as_str(self) -> &'static str {
        match self {
            Built::Graph(s) => s.as_str(),
            Built::Scan => "scan",
        }
    }
}

impl std::str::FromStr for Built {
    type Err = String;
    fn from_str(s: &str) -> Result<Built, String> {
        match s {
            "scan" => Ok(Built::Scan),
            other => other.parse::<Scalar>().map(Built::Graph).map_err(|e| e.to_string()),
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Data {
    Random,
    Sface,
}

struct Args {
    data: Data,
    n: usize,
    /// Random data only; face embeddings have their model's.
    dim: Option<usize>,
    queries: Option<usize>,
    kinds: Vec<Built>,
    rerank: Vec<usize>,
    target_recall1: Option<f64>,
    exact: Option<Vec<bool>>,
    shards: usize,
    expansion_search: Vec<usize>,
    target_recall: Option<f64>,
    oversample: usize,
    connectivity: usize,
    expansion_add: usize,
    threads: usize,
    clients: Vec<usize>,
    batch: usize,
    near: Option<f64>,
    seed: u64,
    real: PathBuf,
    snapshots: PathBuf,
    dump: Option<PathBuf>,
    dump_only: bool,
}

fn parse_args() -> Args {
    let mut a = Args {
        data: Data::Random,
        n: 100_000,
        dim: None,
        queries: None,
        kinds: vec![Built::Graph(Scalar::F32), Built::Graph(Scalar::F16), Built::Graph(Scalar::I8)],
        rerank: vec![64],
        target_recall1: None,
        exact: None,
        shards: 0,
        expansion_search: vec![0],
        target_recall: None,
        oversample: 4,
        connectivity: 0,
        expansion_add: 0,
        threads: 0,
        clients: vec![1, 2],
        batch: 64,
        near: None,
        seed: 1,
        real: faces::default_stem(),
        snapshots: std::env::temp_dir(),
        dump: None,
        dump_only: false,
    };
    let list = |v: String, what: &str| -> Vec<usize> {
        v.split(',')
            .map(|x| x.parse().unwrap_or_else(|_| panic!("{what}")))
            .collect()
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut val = || it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--data" => {
                a.data = match val().as_str() {
                    "random" => Data::Random,
                    "sface" => Data::Sface,
                    other => panic!("--data random|sface, not {other}"),
                }
            }
            "--n" => a.n = val().parse().expect("--n"),
            "--dim" => a.dim = Some(val().parse().expect("--dim")),
            "--queries" => a.queries = Some(val().parse().expect("--queries")),
            "--kinds" => {
                a.kinds = val()
                    .split(',')
                    .map(|k| k.parse().expect("--kinds"))
                    .collect()
            }
            "--exact" => {
                a.exact = Some(
                    val()
                        .split(',')
                        .map(|v| match v {
                            "on" => true,
                            "off" => false,
                            other => panic!("--exact on,off, not {other}"),
                        })
                        .collect(),
                )
            }
            "--no-exact" => a.exact = Some(vec![false]),
            "--shards" => a.shards = val().parse().expect("--shards"),
            "--expansion-search" => a.expansion_search = list(val(), "--expansion-search"),
            "--target-recall" => a.target_recall = Some(val().parse().expect("--target-recall")),
            "--target-recall1" => a.target_recall1 = Some(val().parse().expect("--target-recall1")),
            "--rerank" => a.rerank = list(val(), "--rerank"),
            "--oversample" => a.oversample = val().parse().expect("--oversample"),
            "--connectivity" => a.connectivity = val().parse().expect("--connectivity"),
            "--expansion-add" => a.expansion_add = val().parse().expect("--expansion-add"),
            "--threads" => a.threads = val().parse().expect("--threads"),
            "--clients" => a.clients = list(val(), "--clients"),
            "--batch" => a.batch = val().parse().expect("--batch"),
            "--near" => a.near = Some(val().parse().expect("--near")),
            "--seed" => a.seed = val().parse().expect("--seed"),
            "--real" => a.real = PathBuf::from(val()),
            "--snapshots" => a.snapshots = PathBuf::from(val()),
            "--dump" => a.dump = Some(PathBuf::from(val())),
            "--dump-only" => a.dump_only = true,
            other => panic!("unknown option {other}"),
        }
    }
    if a.dump_only && a.dump.is_none() {
        panic!("--dump-only needs --dump DIR");
    }
    a
}

// ---------------------------------------------------------------------------------------
// Data

struct Dataset {
    dims: usize,
    /// n × dims, unit rows; row r is face id r + 1.
    gallery: Vec<f32>,
    queries: Vec<f32>,
    /// Whose enrolled photo each gallery row is (NOBODY for distractors), and whom each
    /// query shows: present when rank-1 identification means something.
    gallery_person: Option<Vec<u32>>,
    query_person: Option<Vec<u32>>,
    /// Lines for the report and for dataset.json.
    about: Vec<(String, String)>,
}

impl Dataset {
    fn n(&self) -> usize {
        self.gallery.len() / self.dims
    }
    fn q(&self) -> usize {
        self.queries.len() / self.dims
    }
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

fn random_data(a: &Args, threads: usize) -> Dataset {
    let q = a.queries.unwrap_or(1000);
    let dim = a.dim.unwrap_or(1024);
    let gallery = unit_rows(a.n, dim, a.seed, threads);
    let mut queries = unit_rows(q, dim, a.seed ^ 0xDEAD_BEEF, threads);
    let mut about = vec![("data".into(), format!("random unit vectors, {} dims", dim))];
    let (mut gallery_person, mut query_person) = (None, None);
    if let Some(sigma) = a.near {
        let mut sources = Vec::with_capacity(q);
        for (i, v) in queries.chunks_exact_mut(dim).enumerate() {
            let src = (mix64(a.seed ^ i as u64) % a.n as u64) as usize;
            let base = &gallery[src * dim..(src + 1) * dim];
            v.iter_mut()
                .zip(base)
                .for_each(|(x, b)| *x = b + *x * sigma as f32);
            let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            v.iter_mut().for_each(|x| *x /= norm);
            sources.push(src as u32);
        }
        gallery_person = Some((0..a.n as u32).collect());
        query_person = Some(sources);
        about.push((
            "queries".into(),
            format!("a stored vector plus noise of relative size {sigma}"),
        ));
    } else {
        about.push(("queries".into(), "fresh random unit vectors".into()));
    }
    Dataset {
        dims: dim,
        gallery,
        queries,
        gallery_person,
        query_person,
        about,
    }
}

fn sface_data(a: &Args, threads: usize) -> Dataset {
    let real = faces::load_real(&a.real).unwrap_or_else(|e| panic!("{e}"));
    let d = real.dims;
    if a.dim.is_some_and(|x| x != d) {
        eprintln!("--dim ignored: the embeddings have {d} dimensions");
    }
    let (model, fit) = FaceModel::fit(&real, Within::Full);
    let people = real.people();
    let mut gallery = Vec::with_capacity(a.n * d);
    let mut gallery_person = Vec::with_capacity(a.n);
    let mut queries = Vec::new();
    let mut query_person = Vec::new();
    for (p, rows) in people.iter().filter(|r| r.len() >= 2).enumerate() {
        gallery.extend_from_slice(real.row(rows[0]));
        gallery_person.push(p as u32);
        for &r in &rows[1..] {
            queries.extend_from_slice(real.row(r));
            query_person.push(p as u32);
        }
    }
    let enrolled = gallery_person.len();
    assert!(
        a.n >= enrolled,
        "--n must be at least the {enrolled} enrolled real people"
    );
    let all_queries = query_person.len();
    if let Some(q) = a.queries.filter(|&q| q < all_queries) {
        // A seeded sample, kept in its original order.
        let mut rng = Rng::new(a.seed, 0x5155_4552_5900);
        let mut order: Vec<usize> = (0..all_queries).collect();
        for i in 0..q {
            let j = i + rng.below(all_queries - i);
            order.swap(i, j);
        }
        let mut keep = order[..q].to_vec();
        keep.sort_unstable();
        queries = keep
            .iter()
            .flat_map(|&i| queries[i * d..(i + 1) * d].to_vec())
            .collect();
        query_person = keep.iter().map(|&i| query_person[i]).collect();
    }
    let t = Instant::now();
    let counts = model.counts_for(a.n - enrolled, a.seed);
    gallery.extend_from_slice(&model.generate(&counts, a.seed, 0, threads));
    gallery_person.resize(a.n, NOBODY);
    // Enrolment order is nobody's: the real people first, or each person's photos together,
    // would build a different graph (real people inserted first are found more often).
    let mut rng = Rng::new(a.seed, 0x4f52_4445_5200);
    for i in (1..a.n).rev() {
        let j = rng.below(i + 1);
        if i != j {
            gallery_person.swap(i, j);
            let (lo, hi) = gallery.split_at_mut(i * d);
            lo[j * d..(j + 1) * d].swap_with_slice(&mut hi[..d]);
        }
    }
    let gen_s = t.elapsed().as_secs_f64();
    let about = vec![
        ("data".into(), format!("{} face embeddings, {} dims ({})", real.model, d, a.real.display())),
        (
            "gallery".into(),
            format!(
                "{enrolled} real people enrolled (one photo each), {} synthetic distractor faces of {} people ({:.1}s to generate)",
                a.n - enrolled,
                counts.len(),
                gen_s
            ),
        ),
        ("queries".into(), format!("{} other photos of the enrolled people (of {all_queries})", query_person.len())),
        (
            "generator".into(),
            format!(
                "fitted on {} people with 2+ photos: centre length {:.4}, within-person trace {:.4}, seed {}",
                fit.people_with_two, fit.centre_norm, fit.within.trace, a.seed
            ),
        ),
    ];
    Dataset {
        dims: d,
        gallery,
        queries,
        gallery_person: Some(gallery_person),
        query_person: Some(query_person),
        about,
    }
}

// ---------------------------------------------------------------------------------------
// Exact search

/// Top-k (similarity, row) kept sorted best first; ties by lower row.
#[derive(Clone)]
struct TopK {
    hits: Vec<(f32, u32)>,
}

impl TopK {
    fn new() -> TopK {
        TopK {
            hits: Vec::with_capacity(K + 1),
        }
    }
    fn worst(&self) -> f32 {
        if self.hits.len() < K {
            f32::NEG_INFINITY
        } else {
            self.hits[K - 1].0
        }
    }
    fn offer(&mut self, s: f32, row: u32) {
        if self.hits.len() == K
            && !(s > self.hits[K - 1].0 || (s == self.hits[K - 1].0 && row < self.hits[K - 1].1))
        {
            return;
        }
        let at = self
            .hits
            .partition_point(|&(t, r)| t > s || (t == s && r < row));
        self.hits.insert(at, (s, row));
        self.hits.truncate(K);
    }
}

/// Similarities of one gallery row with a block of queries (`qs` is `out.len()` rows of `d`).
/// With AVX2 and FMA (checked at run time) eight queries share each load of the row, which
/// makes the exact scan of millions of faces about four times faster than the reference
/// [`dot`]; the summation order differs from it only by float rounding.
fn block_dots(qs: &[f32], d: usize, row: &[f32], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if d.is_multiple_of(8)
        && std::arch::is_x86_feature_detected!("avx2")
        && std::arch::is_x86_feature_detected!("fma")
    {
        // SAFETY: the CPU has AVX2 and FMA and `d` is a multiple of 8 (checked above); every
        // load stays inside `qs` and `row`, whose lengths are asserted here.
        assert!(qs.len() >= out.len() * d && row.len() == d);
        unsafe { block_dots_avx2(qs, d, row, out) };
        return;
    }
    for (o, q) in out.iter_mut().zip(qs.chunks_exact(d)) {
        *o = dot(q, row);
    }
}

/// [`block_dots`] with AVX2 and FMA.
///
/// # Safety
/// The CPU must support AVX2 and FMA; `d` must be a multiple of 8, `qs` hold at least
/// `out.len() * d` values and `row` exactly `d`: loads are unchecked.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn block_dots_avx2(qs: &[f32], d: usize, row: &[f32], out: &mut [f32]) {
    let m = out.len();
    let mut i = 0;
    while i + 8 <= m {
        group_avx2::<8>(qs.as_ptr().add(i * d), d, row.as_ptr(), &mut out[i..i + 8]);
        i += 8;
    }
    while i < m {
        group_avx2::<1>(qs.as_ptr().add(i * d), d, row.as_ptr(), &mut out[i..i + 1]);
        i += 1;
    }
}

/// `N` queries (rows of `d` from `qs`) against one row: one accumulator per query.
///
/// # Safety
/// The CPU must support AVX2 and FMA; `d` must be a multiple of 8, `qs` point to `N * d`
/// readable values and `row` to `d`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn group_avx2<const N: usize>(qs: *const f32, d: usize, row: *const f32, out: &mut [f32]) {
    use std::arch::x86_64::*;
    let mut acc = [_mm256_setzero_ps(); N];
    let mut j = 0;
    while j < d {
        let r = _mm256_loadu_ps(row.add(j));
        for (k, a) in acc.iter_mut().enumerate() {
            *a = _mm256_fmadd_ps(_mm256_loadu_ps(qs.add(k * d + j)), r, *a);
        }
        j += 8;
    }
    for (o, a) in out.iter_mut().zip(acc) {
        let s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
        *o = _mm_cvtss_f32(s);
    }
}

/// Exact top-10 of every query: each thread scans its share of the gallery for blocks of
/// queries (a gallery row is read once per block, not once per query), then the shares merge.
fn exact_top(ds: &Dataset, threads: usize) -> Vec<TopK> {
    let d = ds.dims;
    let n = ds.n();
    let per = n.div_ceil(threads).max(1);
    let parts: Vec<Vec<TopK>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    let (from, to) = ((t * per).min(n), ((t + 1) * per).min(n));
                    let mut tops = vec![TopK::new(); ds.q()];
                    const BLOCK: usize = 16;
                    let mut sims = [0f32; BLOCK];
                    for (b, qs) in ds.queries.chunks(BLOCK * d).enumerate() {
                        let m = qs.len() / d;
                        let tops = &mut tops[b * BLOCK..];
                        let mut worst: Vec<f32> = (0..m).map(|i| tops[i].worst()).collect();
                        for r in from..to {
                            block_dots(qs, d, &ds.gallery[r * d..(r + 1) * d], &mut sims[..m]);
                            for (i, &sim) in sims[..m].iter().enumerate() {
                                if sim >= worst[i] {
                                    tops[i].offer(sim, r as u32);
                                    worst[i] = tops[i].worst();
                                }
                            }
                        }
                    }
                    tops
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut it = parts.into_iter();
    let mut all = it.next().unwrap();
    for part in it {
        for (a, b) in all.iter_mut().zip(part) {
            for (s, r) in b.hits {
                a.offer(s, r);
            }
        }
    }
    all
}

/// One query's exact top-10 by a plain scan, the latency a service without an index has.
fn brute_one(gallery: &[f32], d: usize, q: &[f32]) -> TopK {
    let mut top = TopK::new();
    let mut worst = f32::NEG_INFINITY;
    for (r, row) in gallery.chunks_exact(d).enumerate() {
        let s = dot(q, row);
        if s >= worst {
            top.offer(s, r as u32);
            worst = top.worst();
        }
    }
    top
}

// ---------------------------------------------------------------------------------------
// Dump

fn write_bin<T: Copy>(
    path: &Path,
    rows: usize,
    cols: usize,
    data: &[T],
    to_le: impl Fn(T) -> [u8; 4],
) {
    assert_eq!(data.len(), rows * cols);
    let mut w = BufWriter::with_capacity(
        1 << 20,
        fs::File::create(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
    );
    w.write_all(&(rows as u32).to_le_bytes()).unwrap();
    w.write_all(&(cols as u32).to_le_bytes()).unwrap();
    for &v in data {
        w.write_all(&to_le(v)).unwrap();
    }
    w.flush().unwrap();
}

fn dump(dir: &Path, ds: &Dataset, truth: &[TopK], a: &Args) {
    fs::create_dir_all(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let (n, q, d) = (ds.n(), ds.q(), ds.dims);
    write_bin(&dir.join("base.fbin"), n, d, &ds.gallery, f32::to_le_bytes);
    write_bin(&dir.join("query.fbin"), q, d, &ds.queries, f32::to_le_bytes);
    let ids: Vec<i32> = truth
        .iter()
        .flat_map(|t| t.hits.iter().map(|h| h.1 as i32))
        .collect();
    let sims: Vec<f32> = truth
        .iter()
        .flat_map(|t| t.hits.iter().map(|h| h.0))
        .collect();
    write_bin(
        &dir.join("groundtruth.neighbors.ibin"),
        q,
        K,
        &ids,
        i32::to_le_bytes,
    );
    write_bin(
        &dir.join("groundtruth.distances.fbin"),
        q,
        K,
        &sims,
        f32::to_le_bytes,
    );
    let person = |p: &Option<Vec<u32>>, rows: usize| -> Vec<i32> {
        match p {
            Some(v) => v
                .iter()
                .map(|&x| if x == NOBODY { -1 } else { x as i32 })
                .collect(),
            None => vec![-1; rows],
        }
    };
    write_bin(
        &dir.join("base.person.ibin"),
        n,
        1,
        &person(&ds.gallery_person, n),
        i32::to_le_bytes,
    );
    write_bin(
        &dir.join("query.person.ibin"),
        q,
        1,
        &person(&ds.query_person, q),
        i32::to_le_bytes,
    );
    let about: Vec<String> = ds
        .about
        .iter()
        .map(|(k, v)| {
            format!(
                "    \"{k}\": \"{}\"",
                v.replace('\\', "\\\\").replace('"', "\\\"")
            )
        })
        .collect();
    let json = format!(
        "{{\n  \"dims\": {d},\n  \"base\": {n},\n  \"queries\": {q},\n  \"k\": {K},\n  \"metric\": \"inner product of unit vectors (cosine); larger is nearer\",\n  \
         \"ids\": \"row numbers from 0; the index bench stores row r as face id r + 1\",\n  \"seed\": {},\n  \"about\": {{\n{}\n  }}\n}}\n",
        a.seed,
        about.join(",\n")
    );
    fs::write(dir.join("dataset.json"), json).unwrap();
    println!(
        "dumped gallery, queries and exact top-{K} to {}",
        dir.display()
    );
}

// ---------------------------------------------------------------------------------------
// Measuring

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

/// CPU time of this process, all threads (user + system), from /proc in USER_HZ (100/s) ticks.
fn cpu_seconds() -> f64 {
    fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            // The command name may hold spaces; the fields after it do not.
            let rest = &s[s.rfind(')')? + 2..];
            let f: Vec<&str> = rest.split_whitespace().collect();
            Some((f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?) / 100.0)
        })
        .unwrap_or(f64::NAN)
}

/// A JSON number, or null for what was not measured.
fn num(v: f64) -> String {
    if v.is_finite() {
        format!("{v}")
    } else {
        "null".into()
    }
}

/// bench/search/ann.ts's key for one of our configurations: plain `ours-<kind>` where re-ranking is
/// what the service does for that kind unless told otherwise (ShardSetOptions resolves
/// `keep_exact: None` to off for f16 and on for i8).
fn engine(built: Built, exact: bool) -> String {
    let kind = match built {
        Built::Scan => return "ours-scan".into(),
        Built::Graph(k) => k,
    };
    match (kind, exact) {
        (Scalar::F32, _) | (Scalar::F16, false) | (Scalar::I8, true) => {
            format!("ours-{}", kind.as_str())
        }
        (k, true) => format!("ours-{}-rerank", k.as_str()),
        (k, false) => format!("ours-{}-norerank", k.as_str()),
    }
}

/// The machine may be shared: the 1-minute load average goes beside the timings.
fn load_average() -> String {
    fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".into())
}

fn dir_bytes(dir: &Path) -> u64 {
    fs::read_dir(dir).map_or(0, |it| {
        it.filter_map(|e| e.ok()?.metadata().ok())
            .map(|m| m.len())
            .sum()
    })
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

/// One built graph, as the service would hold and snapshot it.
struct IndexRow {
    label: String,
    build: Duration,
    rss_per_face: f64,
    memory_per_face: f64,
    graph_per_face: f64,
    snapshot_per_face: f64,
    save: Duration,
    load: Duration,
}

impl SearchRow {
    fn json(&self, engine: &str, threads1: usize, threads_batch: usize) -> String {
        let one = self.latency.iter().find(|l| l.clients == 1);
        format!(
            "{{\"type\":\"search\",\"engine\":\"{engine}\",\"label\":\"ours: {}\",\"{}\":{},\"recall1\":{},\"recall10\":{},\"rank1\":{},\
             \"qps1\":{},\"p50_ms\":{},\"p99_ms\":{},\"cpu_s_per_query1\":{},\"threads1\":{threads1},\"qps2\":{},\
             \"qps_batch\":{},\"cpu_s_per_query_batch\":{},\"threads_batch\":{threads_batch}}}",
            self.label,
            self.setting,
            if self.ef == 0 { "null".into() } else { self.ef.to_string() },
            num(self.recall1),
            num(self.recall10),
            num(self.rank1.unwrap_or(f64::NAN)),
            num(one.map_or(f64::NAN, |l| l.qps)),
            num(one.map_or(f64::NAN, |l| ms(l.p50))),
            num(one.map_or(f64::NAN, |l| ms(l.p99))),
            num(self.cpu1),
            num(self.latency.iter().find(|l| l.clients == 2).map_or(f64::NAN, |l| l.qps)),
            num(self.batch_qps.unwrap_or(f64::NAN)),
            num(self.cpu_batch),
        )
    }
}

struct Latency {
    clients: usize,
    p50: Duration,
    p99: Duration,
    qps: f64,
}

struct SearchRow {
    label: String,
    /// What `ef` is: "ef" (a graph's candidate list) or "rerank" (a scan's re-ranked candidates).
    setting: &'static str,
    ef: usize,
    latency: Vec<Latency>,
    /// CPU seconds per query of the single-client pass.
    cpu1: f64,
    batch_qps: Option<f64>,
    cpu_batch: f64,
    recall1: f64,
    recall10: f64,
    rank1: Option<f64>,
}

fn label(built: Built, exact: bool, oversample: usize) -> String {
    let kind = match built {
        Built::Scan => return "scan 4-bit codes +rerank f16".into(),
        Built::Graph(k) => k,
    };
    match (kind, exact) {
        (Scalar::F32, _) => "usearch f32".into(),
        (k, true) => format!("usearch {} +rerank x{}", k.as_str(), oversample),
        (k, false) => format!("usearch {}", k.as_str()),
    }
}

/// Searches every query from `clients` threads; latencies per query and overall throughput.
fn timed_search(set: &ShardSet, ds: &Dataset, clients: usize) -> (Latency, Vec<Vec<u64>>) {
    let d = ds.dims;
    let q = ds.q();
    let t = Instant::now();
    let parts: Vec<Vec<(usize, Duration, Vec<u64>)>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..clients)
            .map(|c| {
                s.spawn(move || {
                    // Interleaved so every client sees the same mix of queries.
                    (c..q)
                        .step_by(clients)
                        .map(|i| {
                            let t = Instant::now();
                            let r = set
                                .search(&ds.queries[i * d..(i + 1) * d], K, None)
                                .unwrap();
                            (i, t.elapsed(), r.hits.iter().map(|h| h.id).collect())
                        })
                        .collect()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let wall = t.elapsed();
    let mut lat = Vec::with_capacity(q);
    let mut found = vec![Vec::new(); q];
    for (i, l, ids) in parts.into_iter().flatten() {
        lat.push(l);
        found[i] = ids;
    }
    lat.sort();
    (
        Latency {
            clients,
            p50: percentile(&lat, 0.5),
            p99: percentile(&lat, 0.99),
            qps: q as f64 / wall.as_secs_f64(),
        },
        found,
    )
}

/// `setting` is the swept value: the candidate list of a graph, the re-ranked candidates of a scan.
fn options(a: &Args, dims: usize, built: Built, setting: usize, exact: bool) -> ShardSetOptions {
    let mut o = ShardSetOptions::new(dims);
    o.shards = a.shards;
    match built {
        Built::Scan => {
            o.kind = IndexKind::Scan;
            o.rerank = setting;
        }
        Built::Graph(kind) => {
            o.kind = IndexKind::Hnsw;
            o.scalar = kind;
            o.expansion_search = setting;
        }
    }
    o.oversample = a.oversample;
    o.connectivity = a.connectivity;
    o.expansion_add = a.expansion_add;
    o.threads = a.threads;
    o.keep_exact = Some(exact && built != Built::Graph(Scalar::F32));
    o
}

fn main() {
    let a = parse_args();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let t = Instant::now();
    let ds = match a.data {
        Data::Random => random_data(&a, threads),
        Data::Sface => sface_data(&a, threads),
    };
    let (n, q, d) = (ds.n(), ds.q(), ds.dims);
    println!(
        "faces {n} dims {d} queries {q} cores {threads} shards {}, load average {}",
        if a.shards == 0 { threads } else { a.shards },
        load_average()
    );
    for (k, v) in &ds.about {
        println!("  {k}: {v}");
    }
    println!(
        "data ready in {:.1}s, rss {:.0} MiB",
        t.elapsed().as_secs_f64(),
        rss_bytes() as f64 / 1048576.0
    );

    let t = Instant::now();
    let truth = exact_top(&ds, threads);
    println!(
        "exact top-{K} of {q} queries in {:.1}s on {threads} threads",
        t.elapsed().as_secs_f64()
    );
    if let Some(dir) = &a.dump {
        dump(dir, &ds, &truth, &a);
        if a.dump_only {
            return;
        }
    }
    let person_of_hit = |qi: usize, row: Option<u64>| -> bool {
        match (&ds.gallery_person, &ds.query_person, row) {
            (Some(g), Some(qp), Some(r)) => g[r as usize] != NOBODY && g[r as usize] == qp[qi],
            _ => false,
        }
    };
    let identifies = ds.query_person.is_some();
    let exact_rank1 = identifies.then(|| {
        (0..q)
            .filter(|&i| person_of_hit(i, truth[i].hits.first().map(|h| h.1 as u64)))
            .count() as f64
            / q as f64
    });

    // The scan a service without an index would run, single-threaded, on up to 100 queries.
    let timed = q.min(100);
    let t = Instant::now();
    let mut brute_lat: Vec<Duration> = ds
        .queries
        .chunks_exact(d)
        .take(timed)
        .map(|qv| {
            let t = Instant::now();
            std::hint::black_box(brute_one(&ds.gallery, d, qv));
            t.elapsed()
        })
        .collect();
    let brute_qps = timed as f64 / t.elapsed().as_secs_f64();
    brute_lat.sort();
    let brute = SearchRow {
        label: "exact scan f32".into(),
        setting: "ef",
        ef: 0,
        latency: vec![Latency {
            clients: 1,
            p50: percentile(&brute_lat, 0.5),
            p99: percentile(&brute_lat, 0.99),
            qps: brute_qps,
        }],
        cpu1: f64::NAN,
        batch_qps: None,
        cpu_batch: f64::NAN,
        recall1: 1.0,
        recall10: 1.0,
        rank1: exact_rank1,
    };
    println!(
        "{}",
        brute
            .json("ours-exact", 1, 1)
            .replace("ours: exact scan f32", "ours: exact scan f32, 1 thread")
    );

    let ids: Vec<u64> = (1..=n as u64).collect();
    let none: Vec<Vec<&str>> = Vec::new();
    let mut index_rows = Vec::new();
    let mut search_rows = vec![brute];
    let exact_default = match a.data {
        Data::Random => vec![true],
        Data::Sface => vec![true, false],
    };
    let exact_list = a.exact.clone().unwrap_or(exact_default);
    for &kind in &a.kinds {
        let variants: Vec<bool> = match kind {
            Built::Graph(Scalar::F32) | Built::Scan => vec![false],
            Built::Graph(_) => exact_list.clone(),
        };
        let sweep = match kind {
            Built::Scan => &a.rerank,
            Built::Graph(_) => &a.expansion_search,
        };
        let built_exact = variants.contains(&true);
        let snap = |exact: bool| {
            a.snapshots.join(format!(
                "face-index-bench-{}-{}-{}",
                std::process::id(),
                kind.as_str(),
                if exact { "exact" } else { "plain" }
            ))
        };

        // Build once, with the exact copies if any variant needs them.
        let o = options(&a, d, kind, sweep[0], built_exact);
        let rss0 = rss_bytes();
        let set = ShardSet::new(&o).unwrap();
        let (threads_pool, shards) = (set.threads(), set.shard_count());
        let cpu0 = cpu_seconds();
        let t = Instant::now();
        let chunk = 20_000;
        for (i, part) in ids.chunks(chunk).enumerate() {
            let start = i * chunk;
            set.rebuild_batch(
                part,
                &ds.gallery[start * d..(start + part.len()) * d],
                &none,
            )
            .unwrap();
        }
        for k in 0..set.shard_count() {
            set.finish_rebuild(k, 0).unwrap();
        }
        let build = t.elapsed();
        let build_cpu = cpu_seconds() - cpu0;
        assert_eq!(set.len(), n, "every face is in the graph");
        let rss_per_face = rss_bytes().saturating_sub(rss0) as f64 / n as f64;
        eprintln!(
            "{}: built in {:.1}s, {:.0} faces/s ({})",
            kind.as_str(),
            build.as_secs_f64(),
            n as f64 / build.as_secs_f64(),
            set.hardware_acceleration()
        );
        let built_dir = snap(built_exact);
        fs::create_dir_all(&built_dir).unwrap();
        let t = Instant::now();
        for r in set.save_all(&built_dir) {
            r.unwrap();
        }
        let built_save = t.elapsed();
        let built_memory: usize = set.health().iter().map(|h| h.memory_bytes).sum();
        let built_graph = set.index_memory().used;
        drop(set);

        for &exact in &variants {
            let dir = snap(exact);
            let (mut save, mut memory, mut graph) = (built_save, built_memory, built_graph);
            if exact != built_exact {
                // The same graph without the exact copies: what a service configured so
                // would hold and snapshot.
                let set =
                    ShardSet::new(&options(&a, d, kind, sweep[0], exact)).unwrap();
                for r in set.load_all(&built_dir) {
                    r.unwrap();
                }
                fs::create_dir_all(&dir).unwrap();
                let t = Instant::now();
                for r in set.save_all(&dir) {
                    r.unwrap();
                }
                save = t.elapsed();
                memory = set.health().iter().map(|h| h.memory_bytes).sum();
                graph = set.index_memory().used;
            }
            let name = label(kind, exact, a.oversample);
            let key = engine(kind, exact);
            println!(
                "{{\"type\":\"build\",\"engine\":\"{key}\",\"label\":\"ours: {name}\",\"n\":{n},\"dims\":{d},\"threads\":{threads_pool},\
                 \"build_s\":{},\"faces_per_s\":{},\"build_cpu_s\":{},\"rss_bytes_per_face\":{},\"memory_bytes_per_face\":{},\
                 \"snapshot_bytes_per_face\":{}}}",
                num(build.as_secs_f64()),
                num(n as f64 / build.as_secs_f64()),
                num(build_cpu),
                num(if exact == built_exact { rss_per_face } else { f64::NAN }),
                num(memory as f64 / n as f64),
                num(dir_bytes(&dir) as f64 / n as f64),
            );
            let mut first_load = None;
            for &ef in sweep {
                let t = Instant::now();
                let set = ShardSet::new(&options(&a, d, kind, ef, exact)).unwrap();
                for r in set.load_all(&dir) {
                    r.unwrap();
                }
                let load = t.elapsed();
                first_load.get_or_insert(load);
                // Warm-up, so the first timed queries do not pay for first touches.
                for qv in ds.queries.chunks_exact(d).take(100) {
                    set.search(qv, K, None).unwrap();
                }
                let mut latency = Vec::new();
                let mut found = Vec::new();
                let mut cpu1 = f64::NAN;
                for &c in &a.clients {
                    let cpu0 = cpu_seconds();
                    let (l, f) = timed_search(&set, &ds, c.max(1));
                    if c == 1 {
                        cpu1 = (cpu_seconds() - cpu0) / q as f64;
                    }
                    latency.push(l);
                    found = f;
                }
                let mut cpu_batch = f64::NAN;
                let batch_qps = (a.batch > 0).then(|| {
                    let cpu0 = cpu_seconds();
                    let t = Instant::now();
                    for qs in ds.queries.chunks(a.batch * d) {
                        std::hint::black_box(set.search_batch(qs, K, None).unwrap());
                    }
                    cpu_batch = (cpu_seconds() - cpu0) / q as f64;
                    q as f64 / t.elapsed().as_secs_f64()
                });
                let (mut hit1, mut hit10, mut ident) = (0usize, 0usize, 0usize);
                for (i, ids) in found.iter().enumerate() {
                    let truth_ids: Vec<u64> =
                        truth[i].hits.iter().map(|h| h.1 as u64 + 1).collect();
                    hit1 += (ids.first() == truth_ids.first()) as usize;
                    hit10 += ids.iter().filter(|id| truth_ids.contains(id)).count();
                    ident += person_of_hit(i, ids.first().map(|id| id - 1)) as usize;
                }
                let row = SearchRow {
                    label: name.clone(),
                    setting: if kind == Built::Scan { "rerank" } else { "ef" },
                    ef: if ef == 0 { 64 } else { ef },
                    latency,
                    cpu1,
                    batch_qps,
                    cpu_batch,
                    recall1: hit1 as f64 / q as f64,
                    recall10: hit10 as f64 / (q * K) as f64,
                    rank1: identifies.then(|| ident as f64 / q as f64),
                };
                eprintln!(
                    "{} {} {}: load {:.2}s, recall@10 {:.4}, p50 {:.3} ms{}",
                    row.label,
                    row.setting,
                    row.ef,
                    load.as_secs_f64(),
                    row.recall10,
                    ms(row.latency[0].p50),
                    row.rank1
                        .map_or(String::new(), |r| format!(", rank-1 {r:.4}"))
                );
                println!("{}", row.json(&key, shards, set.threads()));
                let reached = a.target_recall.is_some_and(|r| row.recall10 >= r)
                    || a.target_recall1.is_some_and(|r| row.recall1 >= r);
                search_rows.push(row);
                if reached {
                    break;
                }
            }
            index_rows.push(IndexRow {
                label: name,
                build,
                rss_per_face: if exact == built_exact {
                    rss_per_face
                } else {
                    f64::NAN
                },
                memory_per_face: memory as f64 / n as f64,
                graph_per_face: graph as f64 / n as f64,
                snapshot_per_face: dir_bytes(&dir) as f64 / n as f64,
                save,
                load: first_load.unwrap_or_default(),
            });
        }
        for exact in [true, false] {
            let _ = fs::remove_dir_all(snap(exact));
        }
    }

    println!();
    println!("load average at the end {}", load_average());
    println!(
        "| {:<24} | {:>7} | {:>8} | {:>8} | {:>9} | {:>9} | {:>10} | {:>6} | {:>6} |",
        "index",
        "build s",
        "faces/s",
        "RSS B/f",
        "memory B/f",
        "graph B/f",
        "snapshot B/f",
        "save s",
        "load s"
    );
    println!("|{}|", ["---"; 9].join("|"));
    for r in &index_rows {
        println!(
            "| {:<24} | {:>7.1} | {:>8.0} | {:>8} | {:>9.0} | {:>9.0} | {:>10.0} | {:>6.2} | {:>6.2} |",
            r.label,
            r.build.as_secs_f64(),
            n as f64 / r.build.as_secs_f64(),
            if r.rss_per_face.is_nan() { "-".to_string() } else { format!("{:.0}", r.rss_per_face) },
            r.memory_per_face,
            r.graph_per_face,
            r.snapshot_per_face,
            r.save.as_secs_f64(),
            r.load.as_secs_f64(),
        );
    }
    println!();
    let mut head = format!("| {:<24} | {:>4} |", "search", "ef");
    for c in &a.clients {
        head.push_str(&format!(" p50 ms {c}c | p99 ms {c}c | QPS {c}c |"));
    }
    head.push_str(" QPS batch | recall@1 | recall@10 | rank-1 |");
    println!("{head}");
    println!("|{}|", vec!["---"; 2 + 3 * a.clients.len() + 4].join("|"));
    for r in &search_rows {
        let mut line = format!(
            "| {:<24} | {:>4} |",
            r.label,
            if r.ef == 0 {
                "-".into()
            } else {
                r.ef.to_string()
            }
        );
        for c in &a.clients {
            match r.latency.iter().find(|l| l.clients == *c) {
                Some(l) => line.push_str(&format!(
                    " {:>9.3} | {:>9.3} | {:>7.0} |",
                    ms(l.p50),
                    ms(l.p99),
                    l.qps
                )),
                None => line.push_str(&format!(" {:>9} | {:>9} | {:>7} |", "-", "-", "-")),
            }
        }
        line.push_str(&format!(
            " {:>9} | {:>8.4} | {:>9.4} | {:>6} |",
            r.batch_qps.map_or("-".into(), |v| format!("{v:.0}")),
            r.recall1,
            r.recall10,
            r.rank1.map_or("-".into(), |v| format!("{v:.4}"))
        ));
        println!("{line}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_dots_agree_with_the_reference_dot() {
        for d in [128, 136, 100] {
            let qs = unit_rows(13, d, 3, 1);
            let row = unit_rows(1, d, 4, 1);
            let mut out = [0f32; 13];
            block_dots(&qs, d, &row, &mut out);
            for (o, q) in out.iter().zip(qs.chunks_exact(d)) {
                assert!(
                    (o - dot(q, &row)).abs() < 1e-6,
                    "{d}: {o} vs {}",
                    dot(q, &row)
                );
            }
        }
    }

    #[test]
    fn top_k_keeps_the_best_ten_best_first() {
        let mut t = TopK::new();
        for r in 0..100u32 {
            t.offer(((r * 37) % 100) as f32, r);
        }
        let sims: Vec<f32> = t.hits.iter().map(|h| h.0).collect();
        assert_eq!(sims, (90..100).rev().map(|v| v as f32).collect::<Vec<_>>());
    }
}
