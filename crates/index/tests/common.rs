//! Shared helpers for the integration tests: deterministic random unit vectors and an
//! exact reference search.

#![allow(dead_code)]

use face_index::{dot, IndexKind, Scalar, ShardSet, ShardSetOptions};

pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        face_index::route::mix64(self.0)
    }
    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Standard normal (Box-Muller), so normalised vectors are uniform on the sphere.
    pub fn normal(&mut self) -> f32 {
        let u = self.unit().max(1e-300);
        let v = self.unit();
        ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()) as f32
    }
    pub fn unit_vector(&mut self, dims: usize) -> Vec<f32> {
        let mut v: Vec<f32> = (0..dims).map(|_| self.normal()).collect();
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter_mut().for_each(|x| *x /= n);
        v
    }
}

/// Graph shards storing `scalar`.
pub fn options(dims: usize, shards: usize, scalar: Scalar) -> ShardSetOptions {
    let mut o = ShardSetOptions::new(dims);
    o.shards = shards;
    o.kind = IndexKind::Hnsw;
    o.scalar = scalar;
    o
}

/// Scan shards.
pub fn scan_options(dims: usize, shards: usize) -> ShardSetOptions {
    let mut o = ShardSetOptions::new(dims);
    o.shards = shards;
    o.kind = IndexKind::Scan;
    o
}

/// A set whose shards are all live and empty (as for a brand-new database at position 0).
pub fn live_set(o: &ShardSetOptions) -> ShardSet {
    let set = ShardSet::new(o).unwrap();
    for k in 0..set.shard_count() {
        set.finish_rebuild(k, 0).unwrap();
    }
    set
}

/// Exact top-n ids by dot product over (id, vector) pairs.
pub fn brute_force(faces: &[(u64, Vec<f32>)], q: &[f32], n: usize) -> Vec<u64> {
    let mut scored: Vec<(f32, u64)> = faces.iter().map(|(id, v)| (dot(q, v), *id)).collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    scored.into_iter().take(n).map(|(_, id)| id).collect()
}

pub fn temp_dir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("face-index-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}
