//! 4-bit product codes scanned with byte shuffles ("fast scan").
//!
//! A vector is cut into `m` sub-vectors of `sub` components; each sub-vector is replaced by
//! the nearest of 16 centroids of its sub-space, so a face costs `m / 2` bytes (16 bytes at
//! 128 dimensions). For a query, the inner product of each sub-vector with each of the 16
//! centroids is one look-up table per sub-space; a face's approximate similarity is the sum
//! of `m` table entries. Tables are quantised to u8 so that one AVX2 `vpshufb` looks up the
//! entries of 32 faces at once, and the sums stay exact in u16.
//!
//! Codes are stored in blocks of [`BLOCK`] faces: for each pair of sub-spaces `(2p, 2p+1)`,
//! 32 bytes whose byte `j` holds face `j`'s code of sub-space `2p` in its low nibble and of
//! `2p+1` in its high nibble. One 32-byte load then feeds two table look-ups for 32 faces.
//!
//! The scores only rank candidates; the caller re-scores the best of them exactly.

use rayon::prelude::*;

/// Faces per block of codes: one AVX2 register of byte lanes.
pub const BLOCK: usize = 32;

/// Centroids per sub-space (4 bits).
const K: usize = 16;

/// Trained sub-space centroids, and how a vector is cut.
#[derive(Clone, Debug, PartialEq)]
pub struct Codebook {
    pub dims: usize,
    /// Components per sub-space; the last sub-spaces are zero-padded when `dims` does not
    /// divide evenly.
    pub sub: usize,
    /// Sub-spaces, always even (a padding sub-space of zeros is added when needed).
    pub m: usize,
    /// `m * 16 * sub` values: sub-space, centroid, component.
    pub centroids: Vec<f32>,
}

impl Codebook {
    /// How `dims` is cut: 4 components per sub-space while the u16 sums cannot overflow
    /// (`m * 255 < 65536` with room for the even/odd split, so at most 256 sub-spaces),
    /// wider sub-spaces above 1024 dimensions.
    pub fn shape(dims: usize) -> (usize, usize) {
        let sub = dims.div_ceil(256).max(4);
        let m = dims.div_ceil(sub);
        (sub, m + m % 2)
    }

    /// Bytes of codes per block of [`BLOCK`] faces.
    pub fn block_bytes(&self) -> usize {
        self.m / 2 * BLOCK
    }

    fn sub_vector<'a>(&self, v: &'a [f32], s: usize, buf: &'a mut [f32]) -> &'a [f32] {
        let from = s * self.sub;
        let to = (from + self.sub).min(self.dims);
        if from >= self.dims {
            buf.fill(0.0);
            return buf;
        }
        if to - from == self.sub {
            return &v[from..to];
        }
        buf.fill(0.0);
        buf[..to - from].copy_from_slice(&v[from..to]);
        buf
    }

    fn centroid(&self, s: usize, c: usize) -> &[f32] {
        let at = (s * K + c) * self.sub;
        &self.centroids[at..at + self.sub]
    }

    /// Trains the centroids of every sub-space by k-means (Lloyd, L2) on up to `sample`
    /// rows of `rows` (`n * dims`, row-major), picked at an even stride so the result does
    /// not depend on insertion order within the stride. Deterministic.
    pub fn train(rows: &[f32], dims: usize, sample: usize, iterations: usize) -> Codebook {
        let (sub, m) = Self::shape(dims);
        let n = rows.len() / dims;
        let take = n.min(sample).max(1);
        let picked: Vec<usize> = (0..take).map(|i| i * n / take).collect();
        let mut book = Codebook { dims, sub, m, centroids: Vec::new() };
        // Sub-spaces train independently, on the caller's rayon pool.
        let per_space: Vec<Vec<f32>> = (0..m)
            .into_par_iter()
            .map(|s| {
                // The sub-space's sample, contiguous.
                let mut buf = vec![0f32; sub];
                let mut pts = Vec::with_capacity(take * sub);
                for &r in &picked {
                    let v = &rows[r * dims..(r + 1) * dims];
                    pts.extend_from_slice(book.sub_vector(v, s, &mut buf));
                }
                kmeans(&pts, sub, iterations)
            })
            .collect();
        book.centroids = per_space.concat();
        book
    }

    /// The 4-bit code of each sub-space of `v` (nearest centroid by L2).
    pub fn encode(&self, v: &[f32], out: &mut [u8]) {
        debug_assert_eq!(out.len(), self.m);
        let mut buf = vec![0f32; self.sub];
        for (s, code) in out.iter_mut().enumerate() {
            let x = self.sub_vector(v, s, &mut buf);
            *code = nearest(x, &self.centroids[s * K * self.sub..(s + 1) * K * self.sub], self.sub) as u8;
        }
    }

    /// The query's tables: for every sub-space, its inner product with each centroid,
    /// quantised to u8 with one step for all sub-spaces so entries add up comparably.
    pub fn tables(&self, q: &[f32]) -> Tables {
        let mut exact = vec![0f32; self.m * K];
        let mut buf = vec![0f32; self.sub];
        for s in 0..self.m {
            let x = self.sub_vector(q, s, &mut buf);
            for c in 0..K {
                exact[s * K + c] = x.iter().zip(self.centroid(s, c)).map(|(a, b)| a * b).sum();
            }
        }
        let mut bias = 0f32;
        let mut widest = 0f32;
        let mins: Vec<f32> = exact
            .chunks_exact(K)
            .map(|t| {
                let lo = t.iter().copied().fold(f32::INFINITY, f32::min);
                let hi = t.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                widest = widest.max(hi - lo);
                bias += lo;
                lo
            })
            .collect();
        let step = if widest > 0.0 { widest / 255.0 } else { 1.0 };
        let lut = exact
            .chunks_exact(K)
            .zip(&mins)
            .flat_map(|(t, &lo)| t.iter().map(move |&v| ((v - lo) / step).round().clamp(0.0, 255.0) as u8))
            .collect();
        Tables { lut, step, bias }
    }
}

/// One query's quantised look-up tables (`m * 16` bytes) and how to read a sum back as an
/// approximate inner product: `bias + step * sum`.
#[derive(Clone, Debug)]
pub struct Tables {
    pub lut: Vec<u8>,
    pub step: f32,
    pub bias: f32,
}

fn nearest(x: &[f32], cents: &[f32], sub: usize) -> usize {
    let mut best = (f32::INFINITY, 0);
    for (c, cent) in cents.chunks_exact(sub).enumerate() {
        let d: f32 = x.iter().zip(cent).map(|(a, b)| (a - b) * (a - b)).sum();
        if d < best.0 {
            best = (d, c);
        }
    }
    best.1
}

/// Lloyd's k-means with K centroids of `sub` components over `pts`. Seeds are spread over
/// the sample; an empty cluster takes the point farthest from its centroid.
fn kmeans(pts: &[f32], sub: usize, iterations: usize) -> Vec<f32> {
    let n = pts.len() / sub;
    let mut cents = vec![0f32; K * sub];
    for c in 0..K {
        let r = (c * n / K + c * 7919) % n.max(1);
        cents[c * sub..(c + 1) * sub].copy_from_slice(&pts[r * sub..(r + 1) * sub]);
    }
    let mut assign = vec![0usize; n];
    for _ in 0..iterations {
        let mut sums = vec![0f64; K * sub];
        let mut counts = [0usize; K];
        let mut far = (0f32, 0usize);
        for (i, p) in pts.chunks_exact(sub).enumerate() {
            let c = nearest(p, &cents, sub);
            assign[i] = c;
            counts[c] += 1;
            for (s, &x) in sums[c * sub..(c + 1) * sub].iter_mut().zip(p) {
                *s += x as f64;
            }
            let d: f32 = p.iter().zip(&cents[c * sub..]).map(|(a, b)| (a - b) * (a - b)).sum();
            if d > far.0 {
                far = (d, i);
            }
        }
        for c in 0..K {
            let cent = &mut cents[c * sub..(c + 1) * sub];
            if counts[c] == 0 {
                cent.copy_from_slice(&pts[far.1 * sub..(far.1 + 1) * sub]);
                continue;
            }
            for (x, s) in cent.iter_mut().zip(&sums[c * sub..(c + 1) * sub]) {
                *x = (*s / counts[c] as f64) as f32;
            }
        }
    }
    cents
}

/// Writes face `j` (0..BLOCK) of a block: its `m` codes into the nibbles of `block`.
pub fn put_codes(block: &mut [u8], j: usize, codes: &[u8]) {
    for (p, pair) in codes.chunks_exact(2).enumerate() {
        block[p * BLOCK + j] = (pair[0] & 0x0f) | (pair[1] << 4);
    }
}

/// Copies face `from` of block `src` to face `to` of block `dst`.
pub fn move_codes(src: &[u8], from: usize, dst: &mut [u8], to: usize) {
    for p in 0..src.len() / BLOCK {
        dst[p * BLOCK + to] = src[p * BLOCK + from];
    }
}

/// The sum of table entries of every face of `block`, for `Q` queries at once, and which
/// faces reach each query's cut-off.
///
/// `out[q]` holds the sums in the kernel's order, even faces then odd ones: face `j`'s sum
/// is `out[q][sum_index(j)]`. The returned mask of query `q` has bit `j` set when face
/// `j`'s sum is at least `cuts[q]`: most blocks of a large shard have no face above the
/// cut-off of a query's best candidates so far, and are dismissed by one test.
///
/// Dispatches to AVX2 when the CPU has it; [`block_sums_scalar`] is the reference.
#[inline]
pub fn block_sums<const Q: usize>(luts: [&[u8]; Q], block: &[u8], cuts: [u16; Q], out: &mut [[u16; BLOCK]; Q]) -> [u32; Q] {
    #[cfg(target_arch = "x86_64")]
    {
        if avx2() {
            // SAFETY: `avx2()` just found AVX2 on this CPU, the one requirement left to the
            // caller; `block_sums_avx2` asserts the tables' lengths itself.
            return unsafe { block_sums_avx2(luts, block, cuts, out) };
        }
    }
    block_sums_scalar(luts, block, cuts, out)
}

/// Where face `j`'s sum is in a row of [`block_sums`]'s output.
#[inline]
pub fn sum_index(j: usize) -> usize {
    (j & 1) * (BLOCK / 2) + j / 2
}

/// Reference for [`block_sums`]: byte by byte.
pub fn block_sums_scalar<const Q: usize>(luts: [&[u8]; Q], block: &[u8], cuts: [u16; Q], out: &mut [[u16; BLOCK]; Q]) -> [u32; Q] {
    let mut masks = [0u32; Q];
    for q in 0..Q {
        let lut = luts[q];
        let mut sums = [0u16; BLOCK];
        for (p, codes) in block.chunks_exact(BLOCK).enumerate() {
            let (lo, hi) = (&lut[2 * p * K..(2 * p + 1) * K], &lut[(2 * p + 1) * K..(2 * p + 2) * K]);
            for (j, &c) in codes.iter().enumerate() {
                sums[j] += lo[(c & 0x0f) as usize] as u16 + hi[(c >> 4) as usize] as u16;
            }
        }
        for (j, &sum) in sums.iter().enumerate() {
            out[q][sum_index(j)] = sum;
            if sum >= cuts[q] {
                masks[q] |= 1 << j;
            }
        }
    }
    masks
}

/// Inner product of an f32 query with an f16 vector, for re-ranking: widened on the fly
/// (F16C) into fused multiply-adds when the CPU has them. Conversions are exact, so it
/// differs from [`dot_f16_scalar`] only in summation order.
#[inline]
pub fn dot_f16(q: &[f32], v: &[half::f16]) -> f32 {
    debug_assert_eq!(q.len(), v.len());
    #[cfg(target_arch = "x86_64")]
    {
        if f16c_fma() {
            // SAFETY: `f16c_fma()` just found AVX2, FMA and F16C on this CPU, the one
            // requirement left to the caller; `dot_f16_avx2` reads only the shorter slice's length.
            return unsafe { dot_f16_avx2(q, v) };
        }
    }
    dot_f16_scalar(q, v)
}

/// Reference for [`dot_f16`].
pub fn dot_f16_scalar(q: &[f32], v: &[half::f16]) -> f32 {
    q.iter().zip(v).map(|(a, b)| a * b.to_f32()).sum()
}

#[cfg(target_arch = "x86_64")]
fn f16c_fma() -> bool {
    use std::sync::OnceLock;
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| {
        std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma")
            && std::arch::is_x86_feature_detected!("f16c")
    })
}

/// [`dot_f16`] with AVX2, FMA and F16C, over the first `min(q.len(), v.len())` values.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C (as [`f16c_fma`] checks). Any lengths are sound:
/// every load, vector or scalar, stays below the shorter slice's length.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_f16_avx2(q: &[f32], v: &[half::f16]) -> f32 {
    use std::arch::x86_64::*;
    let n = q.len().min(v.len());
    let (qp, vp) = (q.as_ptr(), v.as_ptr() as *const u16);
    let mut acc = [_mm256_setzero_ps(); 2];
    let mut i = 0;
    while i + 16 <= n {
        for (k, a) in acc.iter_mut().enumerate() {
            let h = _mm_loadu_si128(vp.add(i + 8 * k) as *const __m128i);
            *a = _mm256_fmadd_ps(_mm256_loadu_ps(qp.add(i + 8 * k)), _mm256_cvtph_ps(h), *a);
        }
        i += 16;
    }
    if i + 8 <= n {
        let h = _mm_loadu_si128(vp.add(i) as *const __m128i);
        acc[0] = _mm256_fmadd_ps(_mm256_loadu_ps(qp.add(i)), _mm256_cvtph_ps(h), acc[0]);
        i += 8;
    }
    let sum = _mm256_add_ps(acc[0], acc[1]);
    let half = _mm_add_ps(_mm256_castps256_ps128(sum), _mm256_extractf128_ps(sum, 1));
    let pairs = _mm_add_ps(half, _mm_movehl_ps(half, half));
    let mut total = _mm_cvtss_f32(_mm_add_ss(pairs, _mm_shuffle_ps(pairs, pairs, 1)));
    while i < n {
        total += q[i] * v[i].to_f32();
        i += 1;
    }
    total
}

/// The kernel [`block_sums`] runs here, for health reporting.
pub fn acceleration() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    {
        if avx2() {
            return "avx2";
        }
    }
    "scalar"
}

#[cfg(target_arch = "x86_64")]
fn avx2() -> bool {
    use std::sync::OnceLock;
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| std::arch::is_x86_feature_detected!("avx2"))
}

/// AVX2: the 32 code bytes of a sub-space pair are loaded once and split into nibbles once
/// for all `Q` queries; each query then needs two shuffles (its two 16-entry tables,
/// broadcast to both 128-bit lanes) and u16 additions. A u16 lane `i` accumulates the
/// entries of faces `2i` (low byte) and `2i + 1` (high byte) together; a second
/// accumulator sums the high bytes alone, so the even faces' sums are recovered by
/// subtraction. Neither overflows: a face's sum is at most `m * 255` < 65536.
///
/// # Safety
/// The CPU must support AVX2 (as [`avx2`] checks). Lengths are checked here, not assumed:
/// every table must hold `2 * K` entries per whole [`BLOCK`]-byte pair of `block` (asserted,
/// panicking otherwise), a trailing partial pair of `block` is not read, and `out`'s rows are
/// [`BLOCK`] sums by their type.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn block_sums_avx2<const Q: usize>(luts: [&[u8]; Q], block: &[u8], cuts: [u16; Q], out: &mut [[u16; BLOCK]; Q]) -> [u32; Q] {
    use std::arch::x86_64::*;
    let pairs = block.len() / BLOCK;
    for lut in &luts {
        assert!(lut.len() >= pairs * 2 * K);
    }
    let low = _mm256_set1_epi8(0x0f);
    let mut both = [_mm256_setzero_si256(); Q];
    let mut odd = [_mm256_setzero_si256(); Q];
    for p in 0..pairs {
        let codes = _mm256_loadu_si256(block.as_ptr().add(p * BLOCK) as *const __m256i);
        let lo = _mm256_and_si256(codes, low);
        let hi = _mm256_and_si256(_mm256_srli_epi16(codes, 4), low);
        for q in 0..Q {
            let t = luts[q].as_ptr().add(2 * p * K);
            let t_lo = _mm256_broadcastsi128_si256(_mm_loadu_si128(t as *const __m128i));
            let t_hi = _mm256_broadcastsi128_si256(_mm_loadu_si128(t.add(K) as *const __m128i));
            let a = _mm256_shuffle_epi8(t_lo, lo);
            let b = _mm256_shuffle_epi8(t_hi, hi);
            both[q] = _mm256_add_epi16(both[q], _mm256_add_epi16(a, b));
            odd[q] = _mm256_add_epi16(odd[q], _mm256_add_epi16(_mm256_srli_epi16(a, 8), _mm256_srli_epi16(b, 8)));
        }
    }
    let mut masks = [0u32; Q];
    for q in 0..Q {
        // both = even + 256 * odd (mod 2^16) per u16 lane, so even = both - (odd << 8).
        let even = _mm256_sub_epi16(both[q], _mm256_slli_epi16(odd[q], 8));
        _mm256_storeu_si256(out[q].as_mut_ptr() as *mut __m256i, even);
        _mm256_storeu_si256(out[q].as_mut_ptr().add(BLOCK / 2) as *mut __m256i, odd[q]);
        // Unsigned x >= cut as max(x, cut) == x; movemask gives two bits per u16 lane, the
        // low one at bit 2i, which is face 2i's bit for the even sums and, shifted by one,
        // face 2i + 1's for the odd ones.
        let cut = _mm256_set1_epi16(cuts[q] as i16);
        let pass_even = _mm256_movemask_epi8(_mm256_cmpeq_epi16(_mm256_max_epu16(even, cut), even)) as u32;
        let pass_odd = _mm256_movemask_epi8(_mm256_cmpeq_epi16(_mm256_max_epu16(odd[q], cut), odd[q])) as u32;
        masks[q] = (pass_even & 0x5555_5555) | ((pass_odd & 0x5555_5555) << 1);
    }
    masks
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lcg(seed: &mut u64) -> u64 {
        *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        *seed >> 33
    }

    #[test]
    fn shape_keeps_sums_in_u16() {
        assert_eq!(Codebook::shape(128), (4, 32));
        assert_eq!(Codebook::shape(130), (4, 34));
        assert_eq!(Codebook::shape(512), (4, 128));
        let (sub, m) = Codebook::shape(4096);
        assert!(m * 255 < 65536 && sub * m >= 4096, "{sub} {m}");
        assert_eq!(Codebook::shape(6), (4, 2));
    }

    #[test]
    fn avx2_kernel_equals_scalar() {
        let mut seed = 7u64;
        for m in [2usize, 32, 34, 128, 256] {
            let block: Vec<u8> = (0..m / 2 * BLOCK).map(|_| lcg(&mut seed) as u8).collect();
            let luts: Vec<Vec<u8>> = (0..4).map(|_| (0..m * K).map(|_| lcg(&mut seed) as u8).collect()).collect();
            let refs = [&luts[0][..], &luts[1][..], &luts[2][..], &luts[3][..]];
            let mut want = [[0u16; BLOCK]; 4];
            let mut got = [[0u16; BLOCK]; 4];
            // Cut-offs from none to all faces passing, and in between.
            let cuts = [0, u16::MAX, (m as u16) * 128, (m as u16) * 120];
            let want_masks = block_sums_scalar(refs, &block, cuts, &mut want);
            let got_masks = block_sums(refs, &block, cuts, &mut got);
            assert_eq!(want, got, "m = {m}");
            assert_eq!(want_masks, got_masks, "m = {m}");
            assert_eq!((want_masks[0], want_masks[1]), (u32::MAX, 0));
            let mut one = [[0u16; BLOCK]; 1];
            assert_eq!(block_sums([refs[2]], &block, [cuts[2]], &mut one), [want_masks[2]]);
            assert_eq!(one[0], want[2]);
            // The reference: the mask says which sums reach the cut-off.
            for j in 0..BLOCK {
                let sum = want[3][sum_index(j)];
                assert_eq!(want_masks[3] >> j & 1 == 1, sum >= cuts[3], "m = {m}, face {j}");
            }
        }
    }

    #[test]
    fn sums_approximate_inner_products() {
        let dims = 16;
        let mut seed = 3u64;
        let mut rows: Vec<f32> = (0..4000 * dims).map(|_| (lcg(&mut seed) % 2001) as f32 / 1000.0 - 1.0).collect();
        for r in rows.chunks_exact_mut(dims) {
            let n = r.iter().map(|x| x * x).sum::<f32>().sqrt();
            r.iter_mut().for_each(|x| *x /= n);
        }
        let book = Codebook::train(&rows, dims, 4000, 10);
        let q = &rows[0..dims];
        let t = book.tables(q);
        let mut block = vec![0u8; book.block_bytes()];
        let mut codes = vec![0u8; book.m];
        for j in 0..BLOCK {
            book.encode(&rows[j * dims..(j + 1) * dims], &mut codes);
            put_codes(&mut block, j, &codes);
        }
        let mut sums = [[0u16; BLOCK]];
        block_sums([&t.lut[..]], &block, [0], &mut sums);
        for j in 0..BLOCK {
            // The sum is the query's inner product with the face's reconstruction (its
            // centroids), up to the rounding of the m table entries to the step.
            book.encode(&rows[j * dims..(j + 1) * dims], &mut codes);
            let recon: f32 = codes
                .iter()
                .enumerate()
                .map(|(s, &c)| q[s * book.sub..(s + 1) * book.sub].iter().zip(book.centroid(s, c as usize)).map(|(a, b)| a * b).sum::<f32>())
                .sum();
            let approx = t.bias + t.step * sums[0][sum_index(j)] as f32;
            let bound = book.m as f32 * t.step / 2.0 + 1e-5;
            assert!((recon - approx).abs() <= bound, "face {j}: {recon} vs {approx} (bound {bound})");
        }
        // The query's own code scores highest among these faces, up to that rounding.
        let best = *sums[0].iter().max().unwrap();
        assert!(sums[0][sum_index(0)] + (book.m as u16) >= best);
    }

    #[test]
    fn f16_dot_equals_scalar() {
        let mut seed = 11u64;
        for n in [1usize, 7, 8, 15, 16, 17, 128, 131, 512] {
            let q: Vec<f32> = (0..n).map(|_| (lcg(&mut seed) % 2001) as f32 / 1000.0 - 1.0).collect();
            let v: Vec<half::f16> = (0..n).map(|_| half::f16::from_f32((lcg(&mut seed) % 2001) as f32 / 1000.0 - 1.0)).collect();
            let (fast, slow) = (dot_f16(&q, &v), dot_f16_scalar(&q, &v));
            assert!((fast - slow).abs() <= 1e-5 * n as f32, "{n}: {fast} vs {slow}");
        }
    }

    #[test]
    fn move_codes_copies_one_face() {
        let m = 4;
        let mut a = vec![0u8; m / 2 * BLOCK];
        let mut b = vec![0u8; m / 2 * BLOCK];
        put_codes(&mut a, 5, &[1, 2, 3, 4]);
        move_codes(&a, 5, &mut b, 9);
        assert_eq!((b[9], b[BLOCK + 9]), (0x21, 0x43));
    }
}
