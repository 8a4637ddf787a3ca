//! Face embeddings for the index benchmarks: the real ones that `bench/search/face-vectors.ts`
//! writes (SFace on LFW and the labelled photos), and a generator fitted to them that
//! extends them to millions of synthetic faces with the same structure
//! (docs/face-vectors.md has the method and the validation).
//!
//! The model: a person is a cluster. Their centre direction is drawn from a Gaussian fitted
//! to the real people's centres (mean and full covariance) and normalised; each photo is
//! `normalise(a * centre + e)`, with `a` the measured length of a real person's mean
//! embedding and `e` drawn from the pooled within-person covariance of the real photos.
//! Photos per person follow the real people's counts. Everything is deterministic by seed,
//! and a person's photos depend only on (seed, person), so generation splits over threads.

#![allow(dead_code)] // each example uses part of this module

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use face_index::{dot, route::mix64};

// ---------------------------------------------------------------------------------------
// Real embeddings

/// The rows of `<stem>.f32` with the identities of `<stem>.json`.
pub struct RealFaces {
    pub dims: usize,
    /// count × dims, unit rows.
    pub vectors: Vec<f32>,
    /// Per row: person index, or -1 where the person is not known.
    pub identity: Vec<i32>,
    pub model: String,
}

impl RealFaces {
    pub fn count(&self) -> usize {
        self.identity.len()
    }

    pub fn row(&self, r: usize) -> &[f32] {
        &self.vectors[r * self.dims..(r + 1) * self.dims]
    }

    /// Rows of each known person, persons in index order (people without rows are absent).
    pub fn people(&self) -> Vec<Vec<usize>> {
        let max = self.identity.iter().copied().max().unwrap_or(-1);
        let mut by: Vec<Vec<usize>> = vec![Vec::new(); (max + 1).max(0) as usize];
        for (r, &p) in self.identity.iter().enumerate() {
            if p >= 0 {
                by[p as usize].push(r);
            }
        }
        by.retain(|rows| !rows.is_empty());
        by
    }
}

/// Where `bench/search/face-vectors.ts` writes the SFace embeddings by default.
pub fn default_stem() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/data/sface-real")
}

pub fn load_real(stem: &Path) -> io::Result<RealFaces> {
    let with = |ext: &str| {
        let mut p = stem.as_os_str().to_owned();
        p.push(ext);
        PathBuf::from(p)
    };
    let (json_path, f32_path) = (with(".json"), with(".f32"));
    let bad = |what: String| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: {what}", json_path.display()),
        )
    };
    let json = fs::read_to_string(&json_path).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!(
                "{}: {e} (write it with `node dist/bench/search/face-vectors.js`)",
                json_path.display()
            ),
        )
    })?;
    let field =
        |key: &str| top_level(&json, key).ok_or_else(|| bad(format!("no top-level \"{key}\"")));
    let number = |key: &str| -> io::Result<usize> {
        field(key)?
            .parse()
            .map_err(|_| bad(format!("\"{key}\" is not a count")))
    };
    let dims = number("dims")?;
    let count = number("count")?;
    let identity: Vec<i32> = int_array(field("identity")?)
        .ok_or_else(|| bad("\"identity\" is not an array of integers".into()))?;
    let model = field("model")?.trim_matches('"').to_string();
    if identity.len() != count || dims == 0 {
        return Err(bad(format!(
            "{} identities for {count} rows of {dims} dims",
            identity.len()
        )));
    }
    let bytes = fs::read(&f32_path)?;
    if bytes.len() != count * dims * 4 {
        return Err(bad(format!(
            "{} holds {} bytes, not {count} x {dims} float32",
            f32_path.display(),
            bytes.len()
        )));
    }
    let vectors = bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    Ok(RealFaces {
        dims,
        vectors,
        identity,
        model,
    })
}

/// The raw text of a top-level member of a JSON object, without parsing the rest: the
/// file's large arrays are read once, by the caller, and keys in nested objects never match.
fn top_level<'a>(json: &'a str, key: &str) -> Option<&'a str> {
    let b = json.as_bytes();
    let ws = |mut i: usize| {
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        i
    };
    let mut i = ws(0);
    if b.get(i) != Some(&b'{') {
        return None;
    }
    i += 1;
    loop {
        i = ws(i);
        if b.get(i) != Some(&b'"') {
            return None;
        }
        let end = skip_value(b, i)?;
        let name = &json[i + 1..end - 1];
        i = ws(end);
        if b.get(i) != Some(&b':') {
            return None;
        }
        let start = ws(i + 1);
        let stop = skip_value(b, start)?;
        if name == key {
            return Some(&json[start..stop]);
        }
        i = ws(stop);
        match b.get(i) {
            Some(b',') => i += 1,
            _ => return None,
        }
    }
}

/// End (exclusive) of the JSON value starting at `i`.
fn skip_value(b: &[u8], mut i: usize) -> Option<usize> {
    let mut depth = 0usize;
    loop {
        match *b.get(i)? {
            b'"' => {
                i += 1;
                while *b.get(i)? != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            }
            b'{' | b'[' => {
                depth += 1;
                i += 1;
            }
            b'}' | b']' => {
                depth = depth.checked_sub(1)?;
                i += 1;
            }
            b',' | b':' if depth == 0 => return Some(i),
            c if depth == 0 && c.is_ascii_whitespace() => return Some(i),
            _ => i += 1,
        }
        if depth == 0 && matches!(b.get(i), None | Some(b',' | b'}' | b']' | b':')) {
            return Some(i);
        }
    }
}

fn int_array(raw: &str) -> Option<Vec<i32>> {
    let inner = raw.trim().strip_prefix('[')?.strip_suffix(']')?.trim();
    if inner.is_empty() {
        return Some(Vec::new());
    }
    inner.split(',').map(|t| t.trim().parse().ok()).collect()
}

// ---------------------------------------------------------------------------------------
// Random numbers

/// SplitMix64 stream keyed by (seed, stream): a person's draws depend on nothing else.
pub struct Rng {
    state: u64,
    spare: Option<f64>,
}

impl Rng {
    pub fn new(seed: u64, stream: u64) -> Rng {
        Rng {
            state: mix64(seed ^ mix64(stream)),
            spare: None,
        }
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix64(self.state)
    }

    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.uniform() * n as f64) as usize
    }

    /// Standard normal (Box-Muller, both values used).
    pub fn normal(&mut self) -> f64 {
        if let Some(z) = self.spare.take() {
            return z;
        }
        let u = self.uniform().max(1e-300);
        let v = self.uniform();
        let r = (-2.0 * u.ln()).sqrt();
        let t = std::f64::consts::TAU * v;
        self.spare = Some(r * t.sin());
        r * t.cos()
    }
}

// Stream tags, so the draws of one purpose never repeat another's.
const PERSON_STREAM: u64 = 0x5045_5253_4F4E_0000;
const COUNT_STREAM: u64 = 0x434F_554E_5400_0000;

// ---------------------------------------------------------------------------------------
// Linear algebra on small dense symmetric matrices (d × d, row-major, f64)

/// Mean and covariance (divided by `n - 1`) of the rows.
fn mean_cov(rows: &[Vec<f64>], d: usize) -> (Vec<f64>, Vec<f64>) {
    let n = rows.len() as f64;
    let mut mean = vec![0.0; d];
    for r in rows {
        mean.iter_mut().zip(r).for_each(|(m, x)| *m += x / n);
    }
    let mut cov = vec![0.0; d * d];
    let mut c = vec![0.0; d];
    for r in rows {
        c.iter_mut()
            .zip(r.iter().zip(&mean))
            .for_each(|(c, (x, m))| *c = x - m);
        add_outer(&mut cov, &c, 1.0);
    }
    cov.iter_mut().for_each(|v| *v /= n - 1.0);
    (mean, cov)
}

fn add_outer(m: &mut [f64], v: &[f64], w: f64) {
    let d = v.len();
    for i in 0..d {
        let vi = v[i] * w;
        for j in 0..=i {
            m[i * d + j] += vi * v[j];
        }
    }
    // Only the lower triangle was accumulated; callers mirror once at the end.
}

fn mirror_lower(m: &mut [f64], d: usize) {
    for i in 0..d {
        for j in 0..i {
            m[j * d + i] = m[i * d + j];
        }
    }
}

/// Lower-triangular L with L Lᵀ = m, or None when m is not positive definite.
pub fn cholesky(m: &[f64], d: usize) -> Option<Vec<f64>> {
    let mut l = vec![0.0; d * d];
    for i in 0..d {
        for j in 0..=i {
            let s: f64 = (0..j).map(|k| l[i * d + k] * l[j * d + k]).sum();
            if i == j {
                let v = m[i * d + i] - s;
                if v <= 0.0 || !v.is_finite() {
                    return None;
                }
                l[i * d + i] = v.sqrt();
            } else {
                l[i * d + j] = (m[i * d + j] - s) / l[j * d + j];
            }
        }
    }
    Some(l)
}

/// Eigenvalues of a symmetric matrix, descending (cyclic Jacobi; d is small).
pub fn eigenvalues(m: &[f64], d: usize) -> Vec<f64> {
    let mut a = m.to_vec();
    for _sweep in 0..100 {
        let off: f64 = (0..d)
            .flat_map(|i| (0..d).filter(move |&j| j != i).map(move |j| (i, j)))
            .map(|(i, j)| a[i * d + j].powi(2))
            .sum();
        let diag: f64 = (0..d).map(|i| a[i * d + i].powi(2)).sum();
        if off <= 1e-22 * diag {
            break;
        }
        for p in 0..d {
            for q in p + 1..d {
                let apq = a[p * d + q];
                if apq.abs() < 1e-300 {
                    continue;
                }
                let theta = (a[q * d + q] - a[p * d + p]) / (2.0 * apq);
                let t = theta.signum() / (theta.abs() + (theta * theta + 1.0).sqrt());
                let t = if theta == 0.0 { 1.0 } else { t };
                let c = 1.0 / (t * t + 1.0).sqrt();
                let s = t * c;
                for k in 0..d {
                    let akp = a[k * d + p];
                    let akq = a[k * d + q];
                    a[k * d + p] = c * akp - s * akq;
                    a[k * d + q] = s * akp + c * akq;
                }
                for k in 0..d {
                    let apk = a[p * d + k];
                    let aqk = a[q * d + k];
                    a[p * d + k] = c * apk - s * aqk;
                    a[q * d + k] = s * apk + c * aqk;
                }
            }
        }
    }
    let mut ev: Vec<f64> = (0..d).map(|i| a[i * d + i]).collect();
    ev.sort_by(|x, y| y.total_cmp(x));
    ev
}

/// Spectrum summary of a covariance matrix, to judge whether it is safe to sample from.
#[derive(Debug, Clone)]
pub struct Spectrum {
    pub trace: f64,
    pub largest: f64,
    pub smallest: f64,
    /// (Σλ)² / Σλ²: how many directions carry the variance (d for an isotropic one).
    pub effective_dims: f64,
}

pub fn spectrum(m: &[f64], d: usize) -> Spectrum {
    let ev = eigenvalues(m, d);
    let trace: f64 = ev.iter().sum();
    let sq: f64 = ev.iter().map(|x| x * x).sum();
    Spectrum {
        trace,
        largest: ev[0],
        smallest: ev[d - 1],
        effective_dims: trace * trace / sq,
    }
}

// ---------------------------------------------------------------------------------------
// The model

/// How photo noise around a person's centre is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Within {
    /// Full pooled covariance (Cholesky factor).
    Full,
    /// Per-component variances only (the diagonal of the pooled covariance).
    Diagonal,
}

pub struct FaceModel {
    pub dims: usize,
    /// Mean of the real centres, and the Cholesky factor of their covariance (less the
    /// part that comes from averaging few photos).
    pub centre_mean: Vec<f64>,
    pub centre_chol: Vec<f64>,
    /// Length of a person's centre before the photo noise is added (`a` above).
    pub centre_norm: f64,
    pub within: Within,
    /// Cholesky factor of the pooled within-person covariance (full), or its diagonal's
    /// square roots (diagonal).
    pub within_chol: Vec<f64>,
    /// Photo count of every real known person (singletons included): drawn from uniformly.
    pub photo_counts: Vec<u32>,
    /// Per real person with 3+ photos, the noise scale of each photo (mean square 1 over
    /// all of them): a synthetic person takes one person's list and draws each photo's scale
    /// from it, so some people are tighter clusters than others, as real people are.
    pub spreads: Vec<Vec<f64>>,
}

/// What fitting measured, for the report.
pub struct FitReport {
    pub rows: usize,
    pub people: usize,
    pub people_with_two: usize,
    pub photos_of_people_with_two: usize,
    /// Σ (n_p - 1) over people with ≥ 2 photos: degrees of freedom of the within covariance.
    pub within_dof: usize,
    pub within: Spectrum,
    pub centres_observed: Spectrum,
    pub centres: Spectrum,
    /// mean over people of 1/n_p: how much of the observed centre spread is photo noise.
    pub noise_share: f64,
    pub centre_mean_norm: f64,
    pub centre_norm: f64,
    /// Whether the observed centre covariance had to be used as is (the corrected one was
    /// not positive definite).
    pub centres_uncorrected: bool,
    pub mean_photos_per_person: f64,
    pub max_photos_per_person: u32,
    /// Photo noise scales: people and photos they come from, quantiles (p1, p10, p50, p90,
    /// p99), and the share of the variance of log scale that lies between people.
    pub spread_people: usize,
    pub spread_photos: usize,
    pub spread_quantiles: [f64; 5],
    pub spread_between_people: f64,
}

impl FaceModel {
    pub fn fit(real: &RealFaces, within: Within) -> (FaceModel, FitReport) {
        let d = real.dims;
        let people = real.people();
        let photo_counts: Vec<u32> = people.iter().map(|rows| rows.len() as u32).collect();
        let multi: Vec<&Vec<usize>> = people.iter().filter(|rows| rows.len() >= 2).collect();

        let mut centres = Vec::with_capacity(multi.len());
        let mut sw = vec![0.0; d * d];
        let mut dof = 0usize;
        let mut inv_n = 0.0;
        let mut centre_sq = 0.0;
        let mut e = vec![0.0; d];
        for rows in &multi {
            let n = rows.len() as f64;
            let mut c = vec![0.0; d];
            for &r in rows.iter() {
                c.iter_mut()
                    .zip(real.row(r))
                    .for_each(|(c, &x)| *c += x as f64 / n);
            }
            for &r in rows.iter() {
                e.iter_mut()
                    .zip(real.row(r).iter().zip(&c))
                    .for_each(|(e, (&x, c))| *e = x as f64 - c);
                add_outer(&mut sw, &e, 1.0);
            }
            dof += rows.len() - 1;
            inv_n += 1.0 / n;
            centre_sq += c.iter().map(|x| x * x).sum::<f64>();
            centres.push(c);
        }
        mirror_lower(&mut sw, d);
        sw.iter_mut().for_each(|v| *v /= dof as f64);
        let people_n = multi.len() as f64;
        let noise_share = inv_n / people_n;

        let (centre_mean, mut sc) = mean_cov(&centres, d);
        mirror_lower(&mut sc, d);
        let centres_observed = spectrum(&sc, d);
        // A centre averaged from n photos carries 1/n of the photo noise: take the mean of
        // that share out so sampled centres are not spread wider than real people are.
        let corrected: Vec<f64> = sc
            .iter()
            .zip(&sw)
            .map(|(c, w)| c - noise_share * w)
            .collect();
        let (centre_cov, centre_chol, centres_uncorrected) = match cholesky(&corrected, d) {
            Some(l) => (corrected, l, false),
            None => {
                let l = cholesky(&sc, d).expect("centre covariance is not positive definite");
                (sc.clone(), l, true)
            }
        };
        // E|c_p|² = a² + tr(Σw)/n_p, so a² is the mean squared centre length less the
        // photo-noise part.
        let tr_w: f64 = (0..d).map(|i| sw[i * d + i]).sum();
        let centre_norm = (centre_sq / people_n - tr_w * noise_share).sqrt();
        // Each photo's distance from its person's other photos, less what the leave-one-out
        // centre's own noise adds (E|c₋ᵢ − c|² ≈ tr(Σw)/(n−1)), in units of tr(Σw).
        let mut spreads: Vec<Vec<f64>> = Vec::new();
        for rows in multi.iter().filter(|r| r.len() >= 3) {
            let n = rows.len() as f64;
            let mut sum = vec![0.0; d];
            for &r in rows.iter() {
                sum.iter_mut()
                    .zip(real.row(r))
                    .for_each(|(s, &x)| *s += x as f64);
            }
            let list = rows
                .iter()
                .map(|&r| {
                    let d2: f64 = real
                        .row(r)
                        .iter()
                        .zip(&sum)
                        .map(|(&x, s)| {
                            let x = x as f64;
                            (x - (s - x) / (n - 1.0)).powi(2)
                        })
                        .sum();
                    // A floor keeps near-duplicate photos (a negative estimate) possible but rare.
                    ((d2 - tr_w / (n - 1.0)) / tr_w).max(0.01)
                })
                .collect();
            spreads.push(list);
        }
        let all: Vec<f64> = spreads.iter().flatten().copied().collect();
        let mean_sq = all.iter().sum::<f64>() / all.len() as f64;
        spreads
            .iter_mut()
            .flatten()
            .for_each(|v| *v = (*v / mean_sq).sqrt());
        let mut sorted: Vec<f64> = spreads.iter().flatten().copied().collect();
        sorted.sort_by(f64::total_cmp);
        let q = |p: f64| sorted[((sorted.len() - 1) as f64 * p).round() as usize];
        // One-way variance decomposition of log scale: between people vs total.
        let logs: Vec<Vec<f64>> = spreads
            .iter()
            .map(|l| l.iter().map(|v| v.ln()).collect())
            .collect();
        let grand = logs.iter().flatten().sum::<f64>() / sorted.len() as f64;
        let total_var = logs
            .iter()
            .flatten()
            .map(|v| (v - grand).powi(2))
            .sum::<f64>();
        let within_var: f64 = logs
            .iter()
            .map(|l| {
                let m = l.iter().sum::<f64>() / l.len() as f64;
                l.iter().map(|v| (v - m).powi(2)).sum::<f64>()
            })
            .sum();
        let spread_between_people = 1.0 - within_var / total_var;
        let within_chol = match within {
            Within::Full => {
                cholesky(&sw, d).expect("within-person covariance is not positive definite")
            }
            Within::Diagonal => (0..d).map(|i| sw[i * d + i].sqrt()).collect(),
        };
        let report = FitReport {
            rows: real.count(),
            people: people.len(),
            people_with_two: multi.len(),
            photos_of_people_with_two: multi.iter().map(|r| r.len()).sum(),
            within_dof: dof,
            within: spectrum(&sw, d),
            centres_observed,
            centres: spectrum(&centre_cov, d),
            noise_share,
            centre_mean_norm: centre_mean.iter().map(|x| x * x).sum::<f64>().sqrt(),
            centre_norm,
            centres_uncorrected,
            mean_photos_per_person: photo_counts.iter().map(|&c| c as f64).sum::<f64>()
                / photo_counts.len() as f64,
            max_photos_per_person: photo_counts.iter().copied().max().unwrap_or(0),
            spread_people: spreads.len(),
            spread_photos: sorted.len(),
            spread_quantiles: [q(0.01), q(0.1), q(0.5), q(0.9), q(0.99)],
            spread_between_people,
        };
        let model = FaceModel {
            dims: d,
            centre_mean,
            centre_chol,
            centre_norm,
            within,
            within_chol,
            photo_counts,
            spreads,
        };
        (model, report)
    }

    /// Photos of `count` synthetic people drawn from the real counts, in person order.
    pub fn person_counts(&self, people: usize, seed: u64) -> Vec<u32> {
        let mut rng = Rng::new(seed, COUNT_STREAM);
        (0..people)
            .map(|_| self.photo_counts[rng.below(self.photo_counts.len())])
            .collect()
    }

    /// Photo counts for at least `photos` photos; the last person is cut to fit exactly.
    pub fn counts_for(&self, photos: usize, seed: u64) -> Vec<u32> {
        let mut rng = Rng::new(seed, COUNT_STREAM);
        let mut counts = Vec::new();
        let mut total = 0usize;
        while total < photos {
            let c = (self.photo_counts[rng.below(self.photo_counts.len())] as usize)
                .min(photos - total);
            counts.push(c as u32);
            total += c;
        }
        counts
    }

    /// Writes the photos of synthetic person `person` (`out.len() / dims` of them).
    pub fn person(&self, seed: u64, person: u64, out: &mut [f32]) {
        let d = self.dims;
        let mut rng = Rng::new(seed, PERSON_STREAM ^ person);
        let mut z = vec![0.0; d];
        let mut centre = vec![0.0; d];
        z.iter_mut().for_each(|v| *v = rng.normal());
        lower_times(&self.centre_chol, &z, &mut centre);
        centre
            .iter_mut()
            .zip(&self.centre_mean)
            .for_each(|(c, m)| *c += m);
        let scale = self.centre_norm / norm(&centre);
        centre.iter_mut().for_each(|c| *c *= scale);
        let spreads = &self.spreads[rng.below(self.spreads.len())];
        let mut x = vec![0.0; d];
        for row in out.chunks_exact_mut(d) {
            let spread = spreads[rng.below(spreads.len())];
            z.iter_mut().for_each(|v| *v = rng.normal());
            match self.within {
                Within::Full => lower_times(&self.within_chol, &z, &mut x),
                Within::Diagonal => x
                    .iter_mut()
                    .zip(z.iter().zip(&self.within_chol))
                    .for_each(|(x, (z, s))| *x = z * s),
            }
            x.iter_mut()
                .zip(&centre)
                .for_each(|(x, c)| *x = c + spread * *x);
            let inv = 1.0 / norm(&x);
            row.iter_mut()
                .zip(&x)
                .for_each(|(r, v)| *r = (v * inv) as f32);
        }
    }

    /// The photos of people with these counts: rows person by person, generated on
    /// `threads` threads (a person's rows depend only on the seed and their index, so the
    /// result does not depend on the thread count). Person `p` is numbered `first_person + p`.
    pub fn generate(
        &self,
        counts: &[u32],
        seed: u64,
        first_person: u64,
        threads: usize,
    ) -> Vec<f32> {
        let d = self.dims;
        let total: usize = counts.iter().map(|&c| c as usize).sum();
        let mut data = vec![0f32; total * d];
        // Split people into contiguous runs of about equal photo counts.
        let per = total.div_ceil(threads.max(1)).max(1);
        let mut runs: Vec<(usize, usize, &mut [f32])> = Vec::new();
        let mut rest: &mut [f32] = &mut data;
        let (mut start, mut rows) = (0usize, 0usize);
        for (p, &c) in counts.iter().enumerate() {
            rows += c as usize;
            if rows >= per || p + 1 == counts.len() {
                let (head, tail) = std::mem::take(&mut rest).split_at_mut(rows * d);
                runs.push((start, p + 1, head));
                rest = tail;
                start = p + 1;
                rows = 0;
            }
        }
        std::thread::scope(|s| {
            for (from, to, chunk) in runs {
                s.spawn(move || {
                    let mut at = 0;
                    for (p, &c) in counts.iter().enumerate().take(to).skip(from) {
                        let n = c as usize * d;
                        self.person(seed, first_person + p as u64, &mut chunk[at..at + n]);
                        at += n;
                    }
                });
            }
        });
        data
    }
}

fn lower_times(l: &[f64], z: &[f64], out: &mut [f64]) {
    let d = z.len();
    for i in 0..d {
        out[i] = l[i * d..i * d + i + 1]
            .iter()
            .zip(z)
            .map(|(a, b)| a * b)
            .sum();
    }
}

fn norm(v: &[f64]) -> f64 {
    v.iter().map(|x| x * x).sum::<f64>().sqrt()
}

// ---------------------------------------------------------------------------------------
// Statistics of a labelled set of unit vectors

/// Cosine histogram over [-1, 1] in steps of 1e-4: percentiles to that resolution.
pub struct Histogram {
    bins: Vec<u64>,
    count: u64,
    sum: f64,
}

const BINS_PER_UNIT: f64 = 10_000.0;

impl Histogram {
    pub fn new() -> Histogram {
        Histogram {
            bins: vec![0; 2 * BINS_PER_UNIT as usize + 1],
            count: 0,
            sum: 0.0,
        }
    }

    pub fn add(&mut self, s: f32) {
        let b = (((s as f64) + 1.0) * BINS_PER_UNIT)
            .floor()
            .clamp(0.0, (self.bins.len() - 1) as f64) as usize;
        self.bins[b] += 1;
        self.count += 1;
        self.sum += s as f64;
    }

    pub fn merge(&mut self, o: &Histogram) {
        self.bins.iter_mut().zip(&o.bins).for_each(|(a, b)| *a += b);
        self.count += o.count;
        self.sum += o.sum;
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn mean(&self) -> f64 {
        self.sum / self.count.max(1) as f64
    }

    /// The value below which a share `q` of the entries lie (bin midpoint).
    pub fn quantile(&self, q: f64) -> f64 {
        let target = (q * self.count as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (b, &n) in self.bins.iter().enumerate() {
            seen += n;
            if seen >= target {
                return (b as f64 + 0.5) / BINS_PER_UNIT - 1.0;
            }
        }
        1.0
    }

    /// Share of entries strictly above `t` (to the bin resolution).
    pub fn share_above(&self, t: f64) -> f64 {
        let first = ((t + 1.0) * BINS_PER_UNIT).floor() as usize + 1;
        self.bins[first.min(self.bins.len())..].iter().sum::<u64>() as f64
            / self.count.max(1) as f64
    }
}

/// Same-person and different-person cosines over every pair, and each photo's nearest
/// neighbours.
pub struct SetStats {
    pub photos: usize,
    pub same: Histogram,
    pub different: Histogram,
    /// Per photo: the highest cosine to any other photo.
    pub nearest: Histogram,
    /// Per photo with another photo of its person: the highest cosine to one of them.
    pub nearest_same: Histogram,
    /// Per photo: the highest cosine to a photo of someone else.
    pub nearest_different: Histogram,
    /// Photos with another photo of their person whose nearest neighbour is one of those.
    pub rank1_hits: usize,
    pub rank1_of: usize,
}

/// Every pair of rows (`person[r]` labels row r), on `threads` threads.
pub fn set_stats(vectors: &[f32], person: &[u32], dims: usize, threads: usize) -> SetStats {
    let n = person.len();
    let mut size: std::collections::HashMap<u32, usize> = std::collections::HashMap::new();
    for &p in person {
        *size.entry(p).or_default() += 1;
    }
    let threads = threads.max(1);
    let parts: Vec<SetStats> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let size = &size;
                s.spawn(move || {
                    let mut st = SetStats {
                        photos: 0,
                        same: Histogram::new(),
                        different: Histogram::new(),
                        nearest: Histogram::new(),
                        nearest_same: Histogram::new(),
                        nearest_different: Histogram::new(),
                        rank1_hits: 0,
                        rank1_of: 0,
                    };
                    // Interleaved rows balance the pair counting (row i counts pairs j > i).
                    for i in (t..n).step_by(threads) {
                        let q = &vectors[i * dims..(i + 1) * dims];
                        let (mut best_same, mut best_diff) = (f32::NEG_INFINITY, f32::NEG_INFINITY);
                        for j in 0..n {
                            if j == i {
                                continue;
                            }
                            let s = dot(q, &vectors[j * dims..(j + 1) * dims]);
                            let same = person[j] == person[i];
                            if same {
                                best_same = best_same.max(s);
                            } else {
                                best_diff = best_diff.max(s);
                            }
                            if j > i {
                                if same {
                                    st.same.add(s);
                                } else {
                                    st.different.add(s);
                                }
                            }
                        }
                        st.photos += 1;
                        st.nearest.add(best_same.max(best_diff));
                        st.nearest_different.add(best_diff);
                        if size[&person[i]] >= 2 {
                            st.nearest_same.add(best_same);
                            st.rank1_of += 1;
                            st.rank1_hits += (best_same > best_diff) as usize;
                        }
                    }
                    st
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut it = parts.into_iter();
    let mut all = it.next().unwrap();
    for p in it {
        all.photos += p.photos;
        all.same.merge(&p.same);
        all.different.merge(&p.different);
        all.nearest.merge(&p.nearest);
        all.nearest_same.merge(&p.nearest_same);
        all.nearest_different.merge(&p.nearest_different);
        all.rank1_hits += p.rank1_hits;
        all.rank1_of += p.rank1_of;
    }
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_top_level_members_only() {
        let j = r#"{"dims":128, "sources":[{"count":3}], "count" : 7,"identity":[1,-1, 2],"file":["a\"b"]}"#;
        assert_eq!(top_level(j, "dims"), Some("128"));
        assert_eq!(top_level(j, "count"), Some("7"));
        assert_eq!(
            int_array(top_level(j, "identity").unwrap()),
            Some(vec![1, -1, 2])
        );
        assert_eq!(top_level(j, "file"), Some(r#"["a\"b"]"#));
        assert_eq!(top_level(j, "missing"), None);
    }

    #[test]
    fn cholesky_and_eigenvalues_agree_with_a_known_matrix() {
        let m = [4.0, 2.0, 2.0, 3.0];
        let l = cholesky(&m, 2).unwrap();
        assert!(
            (l[0] - 2.0).abs() < 1e-12
                && (l[2] - 1.0).abs() < 1e-12
                && (l[3] - 2f64.sqrt()).abs() < 1e-12
        );
        let ev = eigenvalues(&m, 2);
        let disc = (1.0f64 + 16.0).sqrt();
        assert!(
            (ev[0] - (7.0 + disc) / 2.0).abs() < 1e-9 && (ev[1] - (7.0 - disc) / 2.0).abs() < 1e-9
        );
        assert!(cholesky(&[1.0, 2.0, 2.0, 1.0], 2).is_none());
    }
}
