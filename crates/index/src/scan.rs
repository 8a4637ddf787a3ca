//! The scan index kind: a shard's faces in flat arrays, searched by reading all of them for
//! a whole batch of queries at once.
//!
//! Face embeddings are hard for graphs: a person's other photo sits far from the query in
//! 128 dimensions, so a graph needs very long candidate lists to find it reliably. A scan
//! finds it by construction. Per face it keeps:
//! - its 4-bit product code ([`crate::fastscan`], 16 bytes at 128 dimensions), read for
//!   every query to rank all faces approximately;
//! - its unit vector in f16 (256 bytes at 128 dimensions), read only for the best
//!   `rerank` candidates of each query, which are re-scored exactly.
//!
//! Reading the codes once per block for every query of a batch is what makes a batch
//! cheaper than its queries one by one: the codes come from memory once, the tables stay
//! in cache. Until the shard has [`TRAIN_AT`] faces it has no codes and scores every face
//! exactly (that many faces take well under a millisecond). Its codebook is trained on the
//! shard's own faces when it first reaches that size and once more at [`RETRAIN_AT`];
//! later faces are encoded with it.
//!
//! Slots are dense: a removed face's slot is filled by the last face, so a scan never
//! meets holes. Gallery restriction is tested inside the scan, only for candidates that
//! beat the query's current cut-off, so a gallery costs nothing per face scanned and no
//! memory per gallery.

use std::sync::atomic::{AtomicU16, Ordering};

use half::f16;
use half::slice::HalfFloatSliceExt;
use rayon::prelude::*;

use crate::fastscan::{self, Codebook, Tables, BLOCK};
use crate::ids::IdMap;
use crate::membership::Membership;

/// Faces at which a shard trains its codebook; below it every face is scored exactly.
pub const TRAIN_AT: usize = 4096;
/// Faces at which the codebook is trained once more, on a larger sample.
pub const RETRAIN_AT: usize = 65_536;
/// Most faces a codebook is trained on.
const TRAIN_SAMPLE: usize = 65_536;
const TRAIN_ITERATIONS: usize = 12;
/// How many faces ahead [`ScanStore::score_each`] requests a vector before it scores it:
/// enough misses in flight to hide memory latency, few enough to stay in L1.
const PREFETCH_AHEAD: usize = 8;
/// Blocks per task of a shard's scan: 2,048 blocks are 65,536 faces (1 MB of codes at 128
/// dimensions), so a shard of a million faces makes 16 tasks for the pool to balance, and
/// each task's pass is long enough for its candidate lists to settle.
const BLOCKS_PER_TASK: usize = 2048;

#[derive(Clone)]
pub struct ScanStore {
    dims: usize,
    /// Slot → face id.
    ids: Vec<u64>,
    slot_of: IdMap<u32>,
    /// `len * dims` unit vectors in f16, slot-major.
    vectors: Vec<f16>,
    codes: Option<Codes>,
}

#[derive(Clone)]
struct Codes {
    book: Codebook,
    /// Faces the codebook was trained on.
    trained_on: usize,
    /// One block of `book.block_bytes()` per [`BLOCK`] slots (the last one partly used).
    blocks: Vec<u8>,
}

/// Asks the CPU to bring `v` into cache; a hint with no effect on results.
#[inline]
fn prefetch(v: &[f16]) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let bytes = std::mem::size_of_val(v);
        let p = v.as_ptr() as *const i8;
        for line in (0..bytes).step_by(64) {
            // SAFETY: prefetching is a hint that never faults, and `line` stays inside `v`.
            unsafe { _mm_prefetch(p.add(line), _MM_HINT_T0) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = v;
}

/// What one query asks of a shard's scan.
#[derive(Clone, Copy)]
pub struct ScanQuery<'a> {
    pub vector: &'a [f32],
    /// Results wanted.
    pub n: usize,
    /// Candidates re-scored exactly (at least `n`).
    pub rerank: usize,
    /// Only faces of this gallery (a gallery id of the shard's [`Membership`]).
    pub gallery: Option<u32>,
}

impl ScanStore {
    pub fn new(dims: usize) -> ScanStore {
        ScanStore { dims, ids: Vec::new(), slot_of: IdMap::default(), vectors: Vec::new(), codes: None }
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn contains(&self, id: u64) -> bool {
        self.slot_of.contains_key(&id)
    }

    /// The exact similarity to the (normalised) query `q` of each face of `ids` held here, as
    /// the scan re-scores its candidates, as (id, similarity) in slot order.
    ///
    /// A few faces among many sit far apart in memory, so each vector read is a cache and
    /// TLB miss: reading them in slot order, with the vector [`PREFETCH_AHEAD`] faces on
    /// already requested, scores 5k faces of 500k 2.8x faster than in the set's order.
    pub fn score_each(&self, ids: impl Iterator<Item = u64>, q: &[f32]) -> Vec<(u64, f32)> {
        let faces: Vec<(u32, u64)> = ids.filter_map(|id| self.slot_of.get(&id).map(|&s| (s, id))).collect();
        self.score_slots(faces, q)
    }

    /// [`ScanStore::score_each`] of (slot, id) pairs: the id comes along so that scoring
    /// reads no more than the vector of each slot.
    fn score_slots(&self, mut faces: Vec<(u32, u64)>, q: &[f32]) -> Vec<(u64, f32)> {
        faces.sort_unstable_by_key(|&(slot, _)| slot);
        let mut out = Vec::with_capacity(faces.len());
        for (i, &(slot, id)) in faces.iter().enumerate() {
            if let Some(&(ahead, _)) = faces.get(i + PREFETCH_AHEAD) {
                prefetch(self.vector(ahead as usize));
            }
            out.push((id, fastscan::dot_f16(q, self.vector(slot as usize))));
        }
        out
    }

    fn vector(&self, slot: usize) -> &[f16] {
        &self.vectors[slot * self.dims..(slot + 1) * self.dims]
    }

    pub fn heap_bytes(&self) -> usize {
        self.ids.capacity() * 8
            + self.slot_of.capacity() * 13
            + self.vectors.capacity() * 2
            + self.codes.as_ref().map_or(0, |c| c.blocks.capacity() + c.book.centroids.len() * 4)
    }

    pub fn reserve(&mut self, faces: usize) {
        self.ids.reserve(faces);
        self.slot_of.reserve(faces);
        self.vectors.reserve(faces * self.dims);
        if let Some(c) = self.codes.as_mut() {
            c.blocks.reserve(faces.div_ceil(BLOCK) * c.book.block_bytes());
        }
    }

    /// Inserts or replaces face `id` (a unit vector).
    pub fn put(&mut self, id: u64, v: &[f32]) {
        debug_assert_eq!(v.len(), self.dims);
        let slot = match self.slot_of.get(&id) {
            Some(&s) => s as usize,
            None => {
                let s = self.ids.len();
                self.ids.push(id);
                self.slot_of.insert(id, s as u32);
                self.vectors.resize(self.vectors.len() + self.dims, f16::ZERO);
                s
            }
        };
        self.vectors[slot * self.dims..(slot + 1) * self.dims].convert_from_f32_slice(v);
        if self.codes.is_some() {
            self.encode(slot);
        }
        self.train_if_due();
    }

    /// Removes face `id`; false when absent. The last slot moves into its place.
    pub fn remove(&mut self, id: u64) -> bool {
        let Some(slot) = self.slot_of.remove(&id).map(|s| s as usize) else {
            return false;
        };
        let last = self.ids.len() - 1;
        if slot != last {
            let moved = self.ids[last];
            self.ids[slot] = moved;
            self.slot_of.insert(moved, slot as u32);
            let d = self.dims;
            self.vectors.copy_within(last * d..(last + 1) * d, slot * d);
            if let Some(c) = self.codes.as_mut() {
                let bb = c.book.block_bytes();
                let src = c.blocks[(last / BLOCK) * bb..(last / BLOCK + 1) * bb].to_vec();
                let dst = &mut c.blocks[(slot / BLOCK) * bb..(slot / BLOCK + 1) * bb];
                fastscan::move_codes(&src, last % BLOCK, dst, slot % BLOCK);
            }
        }
        self.ids.pop();
        self.vectors.truncate(last * self.dims);
        if let Some(c) = self.codes.as_mut() {
            c.blocks.truncate(self.ids.len().div_ceil(BLOCK) * c.book.block_bytes());
        }
        true
    }

    fn encode(&mut self, slot: usize) {
        let mut v = vec![0f32; self.dims];
        self.vector(slot).convert_to_f32_slice(&mut v);
        let c = self.codes.as_mut().expect("encode needs a codebook");
        let bb = c.book.block_bytes();
        let need = (slot / BLOCK + 1) * bb;
        if c.blocks.len() < need {
            c.blocks.resize(need, 0);
        }
        let mut codes = vec![0u8; c.book.m];
        c.book.encode(&v, &mut codes);
        fastscan::put_codes(&mut c.blocks[(slot / BLOCK) * bb..(slot / BLOCK + 1) * bb], slot % BLOCK, &codes);
    }

    /// Trains (or retrains) the codebook when the shard has grown to the next threshold,
    /// and re-encodes every face with it.
    pub fn train_if_due(&mut self) {
        let len = self.len();
        let due = match &self.codes {
            None => len >= TRAIN_AT,
            Some(c) => c.trained_on < RETRAIN_AT && len >= RETRAIN_AT,
        };
        if due {
            self.train();
        }
    }

    fn train(&mut self) {
        let mut rows = vec![0f32; self.vectors.len()];
        self.vectors.convert_to_f32_slice(&mut rows);
        let book = Codebook::train(&rows, self.dims, TRAIN_SAMPLE, TRAIN_ITERATIONS);
        let bb = book.block_bytes();
        let mut blocks = vec![0u8; self.len().div_ceil(BLOCK) * bb];
        blocks.par_chunks_mut(bb).enumerate().for_each(|(b, block)| {
            let mut codes = vec![0u8; book.m];
            for j in 0..BLOCK.min(rows.len() / self.dims - b * BLOCK) {
                let s = b * BLOCK + j;
                book.encode(&rows[s * self.dims..(s + 1) * self.dims], &mut codes);
                fastscan::put_codes(block, j, &codes);
            }
        });
        self.codes = Some(Codes { book, trained_on: self.len().min(TRAIN_SAMPLE), blocks });
    }

    /// The best `q.n` faces of every query, best first, as (id, exact similarity). Runs on
    /// the calling rayon pool: the shard's blocks are split into tasks that each scan all
    /// the queries, and their candidates are merged before the exact re-scoring.
    pub fn search(&self, queries: &[ScanQuery<'_>], members: &Membership) -> Vec<Vec<(u64, f32)>> {
        let candidates: Vec<Vec<u32>> = match &self.codes {
            None => queries.iter().map(|_| (0..self.len() as u32).collect()).collect(),
            Some(codes) => self.candidates(codes, queries, members),
        };
        queries
            .par_iter()
            .zip(candidates)
            .map(|(q, slots)| {
                let faces: Vec<(u32, u64)> = slots
                    .into_iter()
                    .map(|s| (s, self.ids[s as usize]))
                    .filter(|&(_, id)| q.gallery.is_none_or(|g| members.contains(g, id)))
                    .collect();
                let mut hits = self.score_slots(faces, q.vector);
                hits.sort_unstable_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
                hits.truncate(q.n);
                hits
            })
            .collect()
    }

    /// The `rerank` best slots of every query by code sums.
    fn candidates(&self, codes: &Codes, queries: &[ScanQuery<'_>], members: &Membership) -> Vec<Vec<u32>> {
        let tables: Vec<Tables> = queries.iter().map(|q| codes.book.tables(q.vector)).collect();
        let bb = codes.book.block_bytes();
        let blocks = self.len().div_ceil(BLOCK);
        let tasks: Vec<(usize, usize)> =
            (0..blocks).step_by(BLOCKS_PER_TASK).map(|b| (b, (b + BLOCKS_PER_TASK).min(blocks))).collect();
        // Each query's highest cut-off of any task so far. A task's cut-off is the worst of its
        // own best `rerank`, and the best `rerank` of the shard are at least as good as those of
        // any one task, so a task may skip what another task's cut-off excludes.
        let shared: Vec<AtomicU16> = queries.iter().map(|_| AtomicU16::new(0)).collect();
        // Folded rather than mapped: the candidate lists carry over between the tasks one thread
        // runs, so only a thread's first task fills them from nothing.
        let fresh = || -> Vec<Best> { queries.iter().zip(&shared).map(|(q, cut)| Best::new(q.rerank.max(q.n), cut)).collect() };
        let partial: Vec<Vec<Best>> = tasks
            .into_par_iter()
            .fold(fresh, |mut best, (from, to)| {
                let mut g = 0;
                while g < queries.len() {
                    let group = (queries.len() - g).min(4);
                    match group {
                        4 => self.scan::<4>(codes, &tables, queries, members, g, from, to, bb, &mut best),
                        3 => self.scan::<3>(codes, &tables, queries, members, g, from, to, bb, &mut best),
                        2 => self.scan::<2>(codes, &tables, queries, members, g, from, to, bb, &mut best),
                        _ => self.scan::<1>(codes, &tables, queries, members, g, from, to, bb, &mut best),
                    }
                    g += group;
                }
                best
            })
            .collect();
        let none = AtomicU16::new(0);
        (0..queries.len())
            .into_par_iter()
            .map(|qi| {
                let mut merged = Best::new(queries[qi].rerank.max(queries[qi].n), &none);
                for p in &partial {
                    for &(score, slot) in &p[qi].list {
                        merged.offer(score, slot);
                    }
                }
                merged.into_slots()
            })
            .collect()
    }

    /// Scans blocks `from..to` for queries `g..g + Q`.
    #[allow(clippy::too_many_arguments)]
    fn scan<const Q: usize>(
        &self,
        codes: &Codes,
        tables: &[Tables],
        queries: &[ScanQuery<'_>],
        members: &Membership,
        g: usize,
        from: usize,
        to: usize,
        bb: usize,
        best: &mut [Best],
    ) {
        let luts: [&[u8]; Q] = std::array::from_fn(|i| &tables[g + i].lut[..]);
        let mut sums = [[0u16; BLOCK]; Q];
        let len = self.len();
        for b in from..to {
            let cuts: [u16; Q] = std::array::from_fn(|i| best[g + i].cut());
            let masks = fastscan::block_sums(luts, &codes.blocks[b * bb..(b + 1) * bb], cuts, &mut sums);
            // The last block is partly used: its empty slots have codes too.
            let valid = if (b + 1) * BLOCK <= len { u32::MAX } else { (1u32 << (len - b * BLOCK)) - 1 };
            for i in 0..Q {
                let mut pass = masks[i] & valid;
                while pass != 0 {
                    let j = pass.trailing_zeros() as usize;
                    pass &= pass - 1;
                    let slot = (b * BLOCK + j) as u32;
                    if queries[g + i].gallery.is_some_and(|gid| !members.contains(gid, self.ids[slot as usize])) {
                        continue;
                    }
                    best[g + i].offer(sums[i][fastscan::sum_index(j)], slot);
                }
            }
        }
    }

    // ---- snapshots

    /// Writes the store: ids, f16 vectors and, when trained, the codebook and codes.
    /// Little-endian, preceded by a small header; the caller checksums the file.
    pub fn write_to(&self, w: &mut impl std::io::Write) -> std::io::Result<()> {
        w.write_all(b"FIDXSCAN")?;
        w.write_all(&1u32.to_le_bytes())?;
        w.write_all(&(self.dims as u32).to_le_bytes())?;
        w.write_all(&(self.len() as u64).to_le_bytes())?;
        for id in &self.ids {
            w.write_all(&id.to_le_bytes())?;
        }
        w.write_all(bytemuck::cast_slice(self.vectors.reinterpret_cast()))?;
        match &self.codes {
            None => w.write_all(&[0])?,
            Some(c) => {
                w.write_all(&[1])?;
                w.write_all(&(c.book.sub as u32).to_le_bytes())?;
                w.write_all(&(c.book.m as u32).to_le_bytes())?;
                w.write_all(&(c.trained_on as u64).to_le_bytes())?;
                for x in &c.book.centroids {
                    w.write_all(&x.to_le_bytes())?;
                }
                w.write_all(&c.blocks)?;
            }
        }
        Ok(())
    }

    /// Reads what [`ScanStore::write_to`] wrote; `Err` with the reason when it is not that.
    pub fn read_from(r: &mut impl std::io::Read, dims: usize) -> std::result::Result<ScanStore, String> {
        let io = |e: std::io::Error| format!("truncated or unreadable: {e}");
        let mut magic = [0u8; 8];
        r.read_exact(&mut magic).map_err(io)?;
        if &magic != b"FIDXSCAN" {
            return Err("not a scan shard".into());
        }
        let mut u32b = [0u8; 4];
        let mut u64b = [0u8; 8];
        r.read_exact(&mut u32b).map_err(io)?;
        if u32::from_le_bytes(u32b) != 1 {
            return Err("unknown scan format version".into());
        }
        r.read_exact(&mut u32b).map_err(io)?;
        if u32::from_le_bytes(u32b) as usize != dims {
            return Err("dimensions differ".into());
        }
        r.read_exact(&mut u64b).map_err(io)?;
        let len = u64::from_le_bytes(u64b) as usize;
        if len > u32::MAX as usize {
            return Err("implausible face count".into());
        }
        let mut ids = vec![0u64; len];
        r.read_exact(bytemuck::cast_slice_mut(&mut ids)).map_err(io)?;
        let mut vectors = vec![f16::ZERO; len * dims];
        r.read_exact(bytemuck::cast_slice_mut(vectors.reinterpret_cast_mut())).map_err(io)?;
        let mut slot_of = IdMap::default();
        slot_of.reserve(len);
        for (s, &id) in ids.iter().enumerate() {
            if slot_of.insert(id, s as u32).is_some() {
                return Err(format!("face {id} stored twice"));
            }
        }
        let mut flag = [0u8; 1];
        r.read_exact(&mut flag).map_err(io)?;
        let codes = match flag[0] {
            0 => None,
            1 => {
                r.read_exact(&mut u32b).map_err(io)?;
                let sub = u32::from_le_bytes(u32b) as usize;
                r.read_exact(&mut u32b).map_err(io)?;
                let m = u32::from_le_bytes(u32b) as usize;
                if (sub, m) != Codebook::shape(dims) {
                    return Err("codebook shape differs".into());
                }
                r.read_exact(&mut u64b).map_err(io)?;
                let trained_on = u64::from_le_bytes(u64b) as usize;
                let mut centroids = vec![0f32; m * 16 * sub];
                r.read_exact(bytemuck::cast_slice_mut(&mut centroids)).map_err(io)?;
                let book = Codebook { dims, sub, m, centroids };
                let mut blocks = vec![0u8; len.div_ceil(BLOCK) * book.block_bytes()];
                r.read_exact(&mut blocks).map_err(io)?;
                Some(Codes { book, trained_on, blocks })
            }
            _ => return Err("unknown codes flag".into()),
        };
        Ok(ScanStore { dims, ids, slot_of, vectors, codes })
    }
}

// The snapshot stores arrays as their in-memory bytes (`bytemuck`'s casts, which accept only
// types without padding whose every bit pattern is valid), little-endian only here. f16 goes
// through its bits as u16: half implements bytemuck's traits only behind a feature that
// would build bytemuck's derive macros.
#[cfg(not(target_endian = "little"))]
compile_error!("scan snapshots assume a little-endian machine");

/// A query's best candidates so far, at least `cap` of them once that many were offered.
///
/// Candidates at or above the cut-off are appended; when twice `cap` have gathered, the best
/// `cap` are selected (linear time) and the cut-off rises to the worst of them. Candidates are
/// ordered by sum, then slot: a candidate is only ever dropped for `cap` better ones, and the
/// cut-off (also another task's) only excludes sums below `cap` others, so the candidates kept
/// are exactly the best `cap` in that order, whatever the order of offers and tasks.
/// Each offer is then O(1) amortised, where a heap would pay a logarithm per offer, and a
/// scan offers many: every task starts with an empty list and code sums are coarse.
struct Best<'a> {
    cap: usize,
    cut: u16,
    list: Vec<(u16, u32)>,
    /// The query's cut-off across the tasks of a scan.
    shared: &'a AtomicU16,
}

impl<'a> Best<'a> {
    fn new(cap: usize, shared: &'a AtomicU16) -> Best<'a> {
        let cap = cap.max(1);
        Best { cap, cut: 0, list: Vec::with_capacity(2 * cap), shared }
    }

    /// Sums below this cannot enter: this list's cut-off or a higher one of another task.
    #[inline]
    fn cut(&mut self) -> u16 {
        self.cut = self.cut.max(self.shared.load(Ordering::Relaxed));
        self.cut
    }

    #[inline]
    fn offer(&mut self, score: u16, slot: u32) {
        if score < self.cut {
            return;
        }
        self.list.push((score, slot));
        if self.list.len() >= 2 * self.cap {
            self.shrink();
        }
    }

    /// Keeps the best `cap` and raises the cut-off to the worst kept.
    fn shrink(&mut self) {
        let cap = self.cap;
        self.list.select_nth_unstable_by(cap - 1, |a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        self.list.truncate(cap);
        let worst = self.list.iter().map(|c| c.0).min().unwrap_or(0);
        self.cut = self.cut.max(worst);
        self.shared.fetch_max(self.cut, Ordering::Relaxed);
    }

    /// The best `cap` slots.
    fn into_slots(mut self) -> Vec<u32> {
        if self.list.len() > self.cap {
            self.shrink();
        }
        self.list.into_iter().map(|(_, s)| s).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(seed: u64, dims: usize) -> Vec<f32> {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut v: Vec<f32> = (0..dims)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s % 20001) as f32 / 10000.0 - 1.0
            })
            .collect();
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter_mut().for_each(|x| *x /= n);
        v
    }

    fn query<'a>(v: &'a [f32], n: usize) -> ScanQuery<'a> {
        ScanQuery { vector: v, n, rerank: 64, gallery: None }
    }

    #[test]
    fn finds_itself_before_and_after_training_and_survives_removals() {
        let dims = 32;
        let mut s = ScanStore::new(dims);
        let members = Membership::default();
        for id in 0..(TRAIN_AT as u64 - 1) {
            s.put(id, &unit(id, dims));
        }
        assert!(s.codes.is_none());
        let q = unit(17, dims);
        assert_eq!(s.search(&[query(&q, 1)], &members)[0][0].0, 17);
        for id in (TRAIN_AT as u64 - 1)..(TRAIN_AT as u64 + 500) {
            s.put(id, &unit(id, dims));
        }
        assert!(s.codes.is_some(), "trained at {TRAIN_AT}");
        for probe in [17u64, 4000, 4500] {
            let q = unit(probe, dims);
            let hit = s.search(&[query(&q, 1)], &members)[0][0];
            assert_eq!(hit.0, probe);
            assert!((hit.1 - 1.0).abs() < 2e-3, "f16 similarity {}", hit.1);
        }
        // Remove from the middle: the last face moves into the hole and is still found.
        let last = *s.ids.last().unwrap();
        assert!(s.remove(17));
        assert!(!s.remove(17));
        assert!(!s.contains(17));
        let q = unit(last, dims);
        assert_eq!(s.search(&[query(&q, 1)], &members)[0][0].0, last);
        let q = unit(17, dims);
        assert_ne!(s.search(&[query(&q, 1)], &members)[0][0].0, 17);
    }

    #[test]
    fn batch_equals_one_by_one_and_gallery_is_respected() {
        let dims = 16;
        let mut s = ScanStore::new(dims);
        let mut members = Membership::default();
        for id in 0..10_000u64 {
            s.put(id, &unit(id, dims));
            if id % 10 == 0 {
                members.set(id, &["tens"]);
            }
        }
        let tens = members.gallery("tens").unwrap();
        let qs: Vec<Vec<f32>> = (0..7).map(|i| unit(1000 + i * 37, dims)).collect();
        let batch: Vec<ScanQuery> = qs.iter().map(|q| query(q, 5)).collect();
        let together = s.search(&batch, &members);
        for (i, q) in qs.iter().enumerate() {
            assert_eq!(s.search(&[query(q, 5)], &members)[0], together[i]);
        }
        let q = unit(1234, dims);
        let only = s.search(&[ScanQuery { vector: &q, n: 5, rerank: 64, gallery: Some(tens) }], &members);
        assert_eq!(only[0].len(), 5);
        assert!(only[0].iter().all(|(id, _)| id % 10 == 0));
        let q = unit(1230, dims);
        let only = s.search(&[ScanQuery { vector: &q, n: 1, rerank: 64, gallery: Some(tens) }], &members);
        assert_eq!(only[0][0].0, 1230);
    }

    #[test]
    fn snapshot_round_trip() {
        let dims = 8;
        let mut s = ScanStore::new(dims);
        for id in 0..5000u64 {
            s.put(id * 3, &unit(id, dims));
        }
        let mut bytes = Vec::new();
        s.write_to(&mut bytes).unwrap();
        let back = ScanStore::read_from(&mut &bytes[..], dims).unwrap();
        assert_eq!(back.ids, s.ids);
        assert_eq!(back.vectors, s.vectors);
        assert_eq!(back.codes.as_ref().unwrap().blocks, s.codes.as_ref().unwrap().blocks);
        assert!(ScanStore::read_from(&mut &bytes[..bytes.len() - 1], dims).is_err());
        assert!(ScanStore::read_from(&mut &bytes[..], dims + 1).is_err());
    }
}
