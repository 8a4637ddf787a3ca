//! Vector kernels for comparing embeddings.
//!
//! Every kernel has a scalar reference beside it, and the tests hold each accelerated kernel to
//! that reference. The kernel is chosen once per process from what the CPU reports at run time,
//! so one binary runs everywhere; `FACE_SIMD=scalar` (or `avx2`) forces a lower level, which is
//! how the scalar path gets exercised on a modern machine.

use std::sync::OnceLock;

/// The instruction-set level a kernel is written for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Scalar,
    Avx2,
    Avx512,
}

impl Level {
    /// Name reported in `info()` and health checks.
    pub fn name(self) -> &'static str {
        match self {
            Level::Scalar => "scalar",
            Level::Avx2 => "avx2+fma",
            Level::Avx512 => "avx512f",
        }
    }

    /// Whether this CPU can run kernels of this level.
    pub fn supported(self) -> bool {
        match self {
            Level::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Level::Avx2 => is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"),
            #[cfg(target_arch = "x86_64")]
            Level::Avx512 => is_x86_feature_detected!("avx512f"),
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }
}

/// The best level this CPU supports, lowered by `FACE_SIMD` when set.
fn detect() -> Level {
    let cap = match std::env::var("FACE_SIMD").ok().as_deref().map(str::trim) {
        Some("scalar") => Level::Scalar,
        Some("avx2") => Level::Avx2,
        _ => Level::Avx512,
    };
    let order = [Level::Avx512, Level::Avx2, Level::Scalar];
    let start = order.iter().position(|l| *l == cap).unwrap_or(0);
    order[start..].iter().copied().find(|l| l.supported()).unwrap_or(Level::Scalar)
}

static ACTIVE: OnceLock<Level> = OnceLock::new();

/// The level used by [`dot`] and friends in this process.
pub fn active_level() -> Level {
    *ACTIVE.get_or_init(detect)
}

/// Dot product with the process-wide kernel. Panics if the lengths differ.
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    dot_with(active_level(), a, b)
}

/// Dot product with an explicit kernel; a level the CPU lacks falls back to scalar.
pub fn dot_with(level: Level, a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "dot of vectors with different lengths");
    match level {
        // SAFETY: the guard found AVX-512F on this CPU; the lengths are equal (asserted above).
        #[cfg(target_arch = "x86_64")]
        Level::Avx512 if Level::Avx512.supported() => unsafe { x86::dot_avx512(a, b) },
        // SAFETY: the guard found AVX2 and FMA on this CPU; the lengths are equal (asserted above).
        #[cfg(target_arch = "x86_64")]
        Level::Avx2 if Level::Avx2.supported() => unsafe { x86::dot_avx2(a, b) },
        _ => dot_scalar(a, b),
    }
}

/// The reference every accelerated kernel must match. Four partial sums keep the compiler from
/// serialising on one accumulator while still summing in a fixed, portable order.
///
/// `face_index::dot` is a second scalar dot, kept on purpose: it is the index crate's default
/// similarity, and that crate builds without this one (see its doc comment for why).
pub fn dot_scalar(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 4];
    let chunks = a.len() / 4;
    for i in 0..chunks {
        for k in 0..4 {
            acc[k] += a[i * 4 + k] * b[i * 4 + k];
        }
    }
    let mut sum = (acc[0] + acc[1]) + (acc[2] + acc[3]);
    for i in chunks * 4..a.len() {
        sum += a[i] * b[i];
    }
    sum
}

/// Cosine similarity; 0 when either vector has zero length.
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let na = dot(a, a).sqrt();
    let nb = dot(b, b).sqrt();
    if na == 0.0 || nb == 0.0 {
        return 0.0;
    }
    dot(a, b) / (na * nb)
}

/// Scales `v` in place to unit length (left as is when all zeros).
pub fn l2_normalize(v: &mut [f32]) {
    let n = dot(v, v).sqrt();
    if n > 0.0 && n.is_finite() {
        let inv = 1.0 / n;
        v.iter_mut().for_each(|x| *x *= inv);
    }
}

/// Cosine similarity of every row of `a` against every row of `b`, both flat row-major with
/// `dim` columns. Returns `rows(a) * rows(b)` values, row-major by `a`.
///
/// Rows are re-normalised here rather than trusted to be unit length: callers store vectors
/// that went through JSON and databases, and a norm near but not at 1 would skew scores.
pub fn similarity_matrix(a: &[f32], b: &[f32], dim: usize) -> Vec<f32> {
    assert!(dim > 0 && a.len().is_multiple_of(dim) && b.len().is_multiple_of(dim), "matrix sizes must be multiples of dim");
    let inv_norms = |m: &[f32]| -> Vec<f32> {
        m.chunks_exact(dim)
            .map(|r| {
                let n = dot(r, r).sqrt();
                if n > 0.0 { 1.0 / n } else { 0.0 }
            })
            .collect()
    };
    let (na, nb) = (inv_norms(a), inv_norms(b));
    let rows_b = b.len() / dim;
    let mut out = vec![0f32; (a.len() / dim) * rows_b];
    let fill = |out: &mut [f32], a_rows: &[f32], first_row: usize| {
        for (i, ra) in a_rows.chunks_exact(dim).enumerate() {
            let scale_a = na[first_row + i];
            for (j, rb) in b.chunks_exact(dim).enumerate() {
                out[i * rows_b + j] = dot(ra, rb) * scale_a * nb[j];
            }
        }
    };
    // Large comparisons (a probe set against a gallery) are split by rows across cores; small
    // ones stay on this thread because spawning costs more than it saves.
    let work = out.len() * dim;
    let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    if work < 4_000_000 || threads == 1 || a.len() / dim < 2 {
        fill(&mut out, a, 0);
        return out;
    }
    let rows_a = a.len() / dim;
    let per = rows_a.div_ceil(threads);
    std::thread::scope(|s| {
        for (t, chunk) in out.chunks_mut(per * rows_b).enumerate() {
            let first = t * per;
            let rows = chunk.len() / rows_b;
            let a_rows = &a[first * dim..(first + rows) * dim];
            let fill = &fill;
            s.spawn(move || fill(chunk, a_rows, first));
        }
    });
    out
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// # Safety
    /// The CPU must support AVX2 and FMA; `a` and `b` must have equal lengths.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn dot_avx2(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len();
        let (pa, pb) = (a.as_ptr(), b.as_ptr());
        // Four independent accumulators hide the FMA latency.
        let mut acc = [_mm256_setzero_ps(); 4];
        let mut i = 0;
        while i + 32 <= n {
            for (k, slot) in acc.iter_mut().enumerate() {
                let x = _mm256_loadu_ps(pa.add(i + 8 * k));
                let y = _mm256_loadu_ps(pb.add(i + 8 * k));
                *slot = _mm256_fmadd_ps(x, y, *slot);
            }
            i += 32;
        }
        while i + 8 <= n {
            acc[0] = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i)), acc[0]);
            i += 8;
        }
        let s = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
        let lo = _mm256_castps256_ps128(s);
        let hi = _mm256_extractf128_ps(s, 1);
        let q = _mm_add_ps(lo, hi);
        let q = _mm_add_ps(q, _mm_movehl_ps(q, q));
        let q = _mm_add_ss(q, _mm_shuffle_ps(q, q, 1));
        let mut sum = _mm_cvtss_f32(q);
        while i < n {
            sum += *pa.add(i) * *pb.add(i);
            i += 1;
        }
        sum
    }

    /// # Safety
    /// The CPU must support AVX-512F; `a` and `b` must have equal lengths.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn dot_avx512(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len();
        let (pa, pb) = (a.as_ptr(), b.as_ptr());
        let mut acc0 = _mm512_setzero_ps();
        let mut acc1 = _mm512_setzero_ps();
        let mut i = 0;
        while i + 32 <= n {
            acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(pa.add(i)), _mm512_loadu_ps(pb.add(i)), acc0);
            acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(pa.add(i + 16)), _mm512_loadu_ps(pb.add(i + 16)), acc1);
            i += 32;
        }
        // The tail goes through a lane mask instead of a scalar loop.
        while i < n {
            let rest = (n - i).min(16);
            let mask: __mmask16 = if rest == 16 { 0xFFFF } else { (1u16 << rest) - 1 };
            let x = _mm512_maskz_loadu_ps(mask, pa.add(i));
            let y = _mm512_maskz_loadu_ps(mask, pb.add(i));
            acc0 = _mm512_fmadd_ps(x, y, acc0);
            i += rest;
        }
        _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Rng;

    fn vec(rng: &mut Rng, n: usize) -> Vec<f32> {
        (0..n).map(|_| rng.unit()).collect()
    }

    #[test]
    fn every_kernel_matches_scalar_reference() {
        let mut rng = Rng::new(7);
        let levels: Vec<Level> = [Level::Avx2, Level::Avx512].into_iter().filter(|l| l.supported()).collect();
        eprintln!("kernels under test: {:?}", levels);
        for round in 0..2000 {
            let n = if round < 300 { round } else { (rng.next_u32() % 2100) as usize };
            let (a, b) = (vec(&mut rng, n), vec(&mut rng, n));
            let reference = dot_scalar(&a, &b);
            // Summation order differs between kernels, so compare against the magnitude of the
            // terms rather than the (possibly cancelling) result.
            let magnitude: f32 = a.iter().zip(&b).map(|(x, y)| (x * y).abs()).sum::<f32>().max(1.0);
            for &level in &levels {
                let got = dot_with(level, &a, &b);
                assert!(
                    (got - reference).abs() <= 1e-5 * magnitude,
                    "{level:?} n={n}: {got} vs {reference}"
                );
            }
        }
    }

    #[test]
    fn unit_vectors_match_within_1e5() {
        let mut rng = Rng::new(11);
        for n in [1usize, 7, 8, 15, 16, 17, 31, 33, 63, 127, 128, 129, 192, 512, 1023, 1024] {
            let mut a = vec(&mut rng, n);
            let mut b = vec(&mut rng, n);
            l2_normalize(&mut a);
            l2_normalize(&mut b);
            let reference = dot_scalar(&a, &b);
            for level in [Level::Avx2, Level::Avx512] {
                assert!((dot_with(level, &a, &b) - reference).abs() <= 1e-5, "{level:?} n={n}");
            }
        }
    }

    #[test]
    fn cosine_and_normalize() {
        let mut v = vec![3.0, 4.0];
        l2_normalize(&mut v);
        assert!((v[0] - 0.6).abs() < 1e-6 && (v[1] - 0.8).abs() < 1e-6);
        assert!((cosine(&[1.0, 0.0], &[0.0, 2.0])).abs() < 1e-6);
        assert!((cosine(&[1.0, 1.0], &[2.0, 2.0]) - 1.0).abs() < 1e-6);
        assert_eq!(cosine(&[0.0, 0.0], &[1.0, 0.0]), 0.0);
    }

    #[test]
    fn similarity_matrix_matches_pairwise_cosine() {
        let mut rng = Rng::new(3);
        for (ra, rb, dim) in [(3, 5, 7), (1, 1, 1024), (4, 2, 128), (64, 300, 256)] {
            let a = vec(&mut rng, ra * dim);
            let b = vec(&mut rng, rb * dim);
            let m = similarity_matrix(&a, &b, dim);
            assert_eq!(m.len(), ra * rb);
            for i in 0..ra {
                for j in 0..rb {
                    let expect = cosine(&a[i * dim..(i + 1) * dim], &b[j * dim..(j + 1) * dim]);
                    assert!((m[i * rb + j] - expect).abs() < 1e-5);
                }
            }
        }
    }

    #[test]
    fn active_level_is_supported() {
        assert!(active_level().supported());
    }
}
