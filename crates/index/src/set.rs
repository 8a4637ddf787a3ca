//! The partitioned index: routing, fan-out search and merge, operator control.

use std::path::Path;
use std::sync::Arc;

use rayon::prelude::*;

use crate::error::{IndexError, Result};
use crate::options::{IndexKind, ShardSetOptions};
use crate::route::shard_of;
use crate::shard::{sort_hits, Change, Hit, IndexMemory, Outcome, Query, Shard, ShardHealth, ShardState};

/// Exact similarity used to re-rank quantised candidates and score small galleries.
/// Both arguments are L2-normalised, so a dot product is the cosine.
pub type Similarity = Arc<dyn Fn(&[f32], &[f32]) -> f32 + Send + Sync>;

/// Scalar reference dot product, the default [`Similarity`]. Eight accumulators let the
/// compiler vectorise it without fast-math, and the summation order is fixed so results
/// are reproducible.
///
/// `face_engine::simd::dot_scalar` is the other scalar dot in the workspace, on purpose: it
/// is the reference the engine's AVX2/AVX-512 kernels are tested against, and this crate
/// must build, test and benchmark with plain `cargo` without the engine (ONNX Runtime,
/// image codecs), while the engine has no reason to link usearch. The service does not use
/// this one: the addon installs the engine's run-time dispatched `face_engine::simd::dot`
/// with [`ShardSet::with_similarity`]. The two differ only in float rounding (summation
/// order), which the contract of `with_similarity` allows.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    debug_assert_eq!(a.len(), b.len());
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail
}

/// Result of a fan-out search.
#[derive(Debug, Clone)]
pub struct SearchResult {
    /// Top `n` across the searched shards, best first.
    pub hits: Vec<Hit>,
    /// Shards that answered.
    pub searched: Vec<usize>,
    /// Faces in scope (the gallery's, or every face) across the shards that answered: the N of
    /// a 1:N search, which decides how likely a stranger's best match is to score high.
    pub faces: u64,
    /// Shards not searched (not live, or failed during this search), with the reason.
    pub skipped: Vec<SkippedShard>,
}

impl SearchResult {
    /// True when every shard answered, i.e. the hits are not missing a partition.
    pub fn complete(&self) -> bool {
        self.skipped.is_empty()
    }
}

#[derive(Debug, Clone)]
pub struct SkippedShard {
    pub shard: usize,
    pub state: ShardState,
    /// Set when the shard was live but its search returned an error.
    pub error: Option<String>,
}

/// One change for [`ShardSet::apply_batch`] and [`ShardSet::replay`].
#[derive(Debug, Clone)]
pub enum Update {
    /// Inserts or replaces the face (vector normalised on the way in) with its galleries.
    Upsert {
        id: u64,
        vector: Vec<f32>,
        galleries: Vec<String>,
    },
    Remove { id: u64 },
    SetGalleries { id: u64, galleries: Vec<String> },
}

impl Update {
    pub fn id(&self) -> u64 {
        match self {
            Update::Upsert { id, .. } | Update::Remove { id } | Update::SetGalleries { id, .. } => *id,
        }
    }
}

/// N shards of face embeddings. Send + Sync: share it behind an `Arc`.
///
/// Lifecycle: every shard starts `Rebuilding` and empty. Bring each one live either with
/// [`ShardSet::load`] / [`ShardSet::load_all`] from a snapshot, or by a refill:
/// `begin_rebuild` (implicit for new shards), `rebuild_upsert`/`rebuild_batch` with rows from a
/// database snapshot consistent at position P, then `finish_rebuild(k, P)`. Changes that
/// arrive meanwhile through `upsert`/`remove`/`set_galleries` are buffered and applied on
/// going live if newer than what the snapshot or refill covers. Afterwards replay the change
/// log from [`ShardSet::replay_from`]; already-reflected positions are ignored.
///
/// A shard that fails, or that an operator marks failed, heals while the others serve:
/// [`ShardSet::reload`] puts its last snapshot back (or empties it when the snapshot is
/// unusable), [`ShardSet::refill`] fills it from a database scan if the log no longer reaches
/// back far enough, [`ShardSet::replay`] catches it up from the change log, and
/// `finish_rebuild` brings it live.
///
/// Threads: the set owns one bounded pool ([`ShardSetOptions::threads`]). Searches fan out
/// over the shards on it, and callers hand whole calls to it with [`ShardSet::spawn`], so
/// the number of threads never grows with the load.
pub struct ShardSet {
    opts: ShardSetOptions,
    /// The shards held, in shard-number order ([`ShardSetOptions::owned`]).
    shards: Vec<Shard>,
    /// Shard number → index in `shards`, for every shard of the deployment.
    slots: Vec<Option<usize>>,
    similarity: Similarity,
    pool: rayon::ThreadPool,
    gather: std::sync::Mutex<Gather>,
}

/// One search for [`ShardSet::search_gathered`]: like the arguments of
/// [`ShardSet::search_batch_in`], owned.
#[derive(Debug, Clone)]
pub struct GatheredSearch {
    /// One or more queries, `dims` values each.
    pub queries: Vec<f32>,
    pub n: usize,
    pub gallery: Option<String>,
    pub only: Option<Vec<usize>>,
}

/// Receives a gathered search's results (one per query), on a pool thread.
pub type Reply = Box<dyn FnOnce(Result<Vec<SearchResult>>) + Send>;

/// Searches waiting for the one in flight.
#[derive(Default)]
struct Gather {
    waiting: std::collections::VecDeque<(GatheredSearch, Reply)>,
    /// Queries waiting.
    queued: usize,
    /// Batches running (at most one, plus one per `gather_max` queries that arrived while
    /// it ran).
    in_flight: usize,
}

impl Gather {
    /// The next batch to run, if one should start now: when nothing runs, or when
    /// `gather_max` queries wait. Takes searches up to `gather_max` queries (at least one).
    fn next_batch(&mut self, o: &ShardSetOptions) -> Option<Vec<(GatheredSearch, Reply)>> {
        if self.waiting.is_empty() || (self.in_flight > 0 && self.queued < o.gather_max) {
            return None;
        }
        let mut batch = Vec::new();
        let mut taken = 0;
        while let Some((search, _)) = self.waiting.front() {
            let count = search.queries.len() / o.dims.max(1);
            if !batch.is_empty() && taken + count > o.gather_max {
                break;
            }
            taken += count;
            batch.push(self.waiting.pop_front().expect("front exists"));
        }
        self.queued -= taken.min(self.queued);
        self.in_flight += 1;
        Some(batch)
    }
}

impl ShardSet {
    pub fn new(options: &ShardSetOptions) -> Result<ShardSet> {
        let opts = options.resolved()?;
        let owned = opts.owned.clone().unwrap_or_default();
        let shards = owned
            .iter()
            .map(|&k| Shard::new(k, &opts))
            .collect::<Result<Vec<_>>>()?;
        let mut slots = vec![None; opts.shards];
        for (i, &k) in owned.iter().enumerate() {
            slots[k] = Some(i);
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(opts.threads)
            .thread_name(|i| format!("face-index-{i}"))
            .build()
            .map_err(|e| IndexError::Native(format!("cannot start the index threads: {e}")))?;
        Ok(ShardSet {
            opts,
            shards,
            slots,
            similarity: Arc::new(dot),
            pool,
            gather: std::sync::Mutex::new(Gather::default()),
        })
    }

    /// Runs `job` on the set's pool (without waiting for it). For callers that must not
    /// block, such as the Node.js bindings: the pool bounds how many such jobs run at once.
    pub fn spawn(&self, job: impl FnOnce() + Send + 'static) {
        self.pool.spawn(job);
    }

    /// Threads in the set's pool.
    pub fn threads(&self) -> usize {
        self.pool.current_num_threads()
    }

    /// Replaces the exact similarity kernel (e.g. with a SIMD one); it must agree with
    /// [`dot`] to within float rounding.
    pub fn with_similarity(mut self, similarity: Similarity) -> Self {
        self.similarity = similarity;
        self
    }

    /// The options in force, with defaults filled in (e.g. the shard count).
    pub fn options(&self) -> &ShardSetOptions {
        &self.opts
    }

    /// The deployment's shard count (what routing and snapshots use), held or not.
    pub fn shard_count(&self) -> usize {
        self.opts.shards
    }

    /// The numbers of the shards this set holds, ascending.
    pub fn shard_ids(&self) -> Vec<usize> {
        self.shards.iter().map(|s| s.k).collect()
    }

    /// The shard that owns `id` (see [`crate::route`]).
    pub fn shard_of(&self, id: u64) -> usize {
        shard_of(id, self.opts.shards)
    }

    fn shard(&self, k: usize) -> Result<&Shard> {
        self.held(k).ok_or(IndexError::NoSuchShard(k))
    }

    /// Shard `k` when this set holds it.
    fn held(&self, k: usize) -> Option<&Shard> {
        self.slots.get(k).copied().flatten().map(|i| &self.shards[i])
    }

    fn normalised(&self, v: &[f32]) -> Result<Box<[f32]>> {
        if v.len() != self.opts.dims {
            return Err(IndexError::Dimensions {
                expected: self.opts.dims,
                got: v.len(),
            });
        }
        if v.iter().any(|c| !c.is_finite()) {
            return Err(IndexError::NonFinite);
        }
        let norm = v.iter().map(|&c| c as f64 * c as f64).sum::<f64>().sqrt();
        if !(norm > 1e-12) {
            return Err(IndexError::ZeroVector);
        }
        let inv = (1.0 / norm) as f32;
        Ok(v.iter().map(|&c| c * inv).collect())
    }

    fn gallery_list<S: AsRef<str>>(galleries: &[S]) -> Result<Vec<String>> {
        if galleries.len() > u16::MAX as usize {
            return Err(IndexError::BadOption(
                "a face can belong to at most 65535 galleries".into(),
            ));
        }
        Ok(galleries.iter().map(|g| g.as_ref().to_owned()).collect())
    }

    /// Inserts or replaces face `id` (vector normalised here) with its gallery set, as the
    /// change at `position`. Positions must increase in commit order; a position at or below
    /// the shard's current one is a replay and is ignored ([`Outcome::Stale`]).
    pub fn upsert<S: AsRef<str>>(
        &self,
        id: u64,
        vector: &[f32],
        galleries: &[S],
        position: u64,
    ) -> Result<Outcome> {
        let change = Change::Upsert {
            id,
            vector: self.normalised(vector)?,
            galleries: Self::gallery_list(galleries)?,
        };
        self.shard(self.shard_of(id))?
            .apply_positioned(change, position, &self.opts)
    }

    /// Deletes face `id` as the change at `position`.
    pub fn remove(&self, id: u64, position: u64) -> Result<Outcome> {
        self.shard(self.shard_of(id))?
            .apply_positioned(Change::Remove { id }, position, &self.opts)
    }

    /// Replaces face `id`'s gallery set as the change at `position`.
    pub fn set_galleries<S: AsRef<str>>(
        &self,
        id: u64,
        galleries: &[S],
        position: u64,
    ) -> Result<Outcome> {
        let change = Change::SetGalleries {
            id,
            galleries: Self::gallery_list(galleries)?,
        };
        self.shard(self.shard_of(id))?
            .apply_positioned(change, position, &self.opts)
    }

    fn to_change(&self, update: Update) -> Result<Change> {
        Ok(match update {
            Update::Upsert {
                id,
                vector,
                galleries,
            } => Change::Upsert {
                id,
                vector: self.normalised(&vector)?,
                galleries: Self::gallery_list(&galleries)?,
            },
            Update::Remove { id } => Change::Remove { id },
            Update::SetGalleries { id, galleries } => Change::SetGalleries {
                id,
                galleries: Self::gallery_list(&galleries)?,
            },
        })
    }

    /// Applies positioned changes in commit order, shards in parallel on the pool: each
    /// shard sees its own changes in the order given, which is all that ordering means for
    /// a face, since a face lives in one shard. Every position up to the last one given
    /// counts as offered ([`ShardSet::advance_to`]). The first error is returned after the
    /// other shards finish; a malformed change is refused before anything is applied.
    pub fn apply_batch(&self, changes: Vec<(u64, Update)>) -> Result<()> {
        let last = changes.last().map(|(p, _)| *p);
        let mut by_shard: Vec<Vec<(u64, Change)>> = vec![Vec::new(); self.shards.len()];
        for (position, update) in changes {
            // Faces of shards held elsewhere: their positions still count as offered.
            let Some(i) = self.slots[self.shard_of(update.id())] else {
                continue;
            };
            by_shard[i].push((position, self.to_change(update)?));
        }
        let results: Vec<Result<()>> = self.pool.install(|| {
            by_shard
                .into_par_iter()
                .enumerate()
                .map(|(i, list)| {
                    for (position, change) in list {
                        self.shards[i].apply_positioned(change, position, &self.opts)?;
                    }
                    Ok(())
                })
                .collect()
        });
        results.into_iter().collect::<Result<()>>()?;
        if let Some(p) = last {
            self.advance_to(p);
        }
        Ok(())
    }

    /// Catches shard `k` up from the change log while it is rebuilding: changes of faces
    /// in other shards, and positions the shard already reflects, are skipped. Returns how
    /// many were applied.
    pub fn replay(&self, k: usize, changes: Vec<(u64, Update)>) -> Result<usize> {
        let shard = self.shard(k)?;
        let mut applied = 0;
        for (position, update) in changes {
            if self.shard_of(update.id()) != k {
                continue;
            }
            let change = self.to_change(update)?;
            if shard.replay(change, position, &self.opts)? != Outcome::Stale {
                applied += 1;
            }
        }
        Ok(applied)
    }

    /// Takes shard `k` out of search as failed; it is rebuilt by the healing steps above.
    pub fn mark_failed(&self, k: usize) -> Result<()> {
        self.shard(k)?.mark_failed()
    }

    /// Whether face `id` is in its shard (whatever the shard's state).
    pub fn contains(&self, id: u64) -> bool {
        self.held(self.shard_of(id)).is_some_and(|s| s.contains(id))
    }

    /// Face `id`'s galleries as its shard currently has them.
    pub fn galleries_of(&self, id: u64) -> Vec<String> {
        self.held(self.shard_of(id)).map_or_else(Vec::new, |s| s.galleries_of(id))
    }

    /// Top `n` faces by cosine similarity across all live shards, optionally only faces in
    /// `gallery`. Shards are searched in parallel; a shard that is not live is skipped and
    /// reported, never waited for.
    pub fn search(&self, query: &[f32], n: usize, gallery: Option<&str>) -> Result<SearchResult> {
        let mut all = self.search_batch(query, n, gallery)?;
        Ok(all.pop().unwrap_or_else(|| SearchResult {
            hits: Vec::new(),
            searched: Vec::new(),
            faces: 0,
            skipped: Vec::new(),
        }))
    }

    /// [`ShardSet::search`] for several queries at once: `queries` is `count * dims`
    /// row-major, and every (query, shard) pair is one task on the pool, so one call keeps
    /// every thread busy however few faces or shards there are. Results in query order.
    pub fn search_batch(
        &self,
        queries: &[f32],
        n: usize,
        gallery: Option<&str>,
    ) -> Result<Vec<SearchResult>> {
        self.search_batch_in(queries, n, gallery, None)
    }

    /// [`ShardSet::search_batch`] over only the held shards named in `only` (all when
    /// `None`); the others are neither searched nor reported. A server holding a shard
    /// that is moving to another is asked this way for the rest of its shards.
    pub fn search_batch_in(
        &self,
        queries: &[f32],
        n: usize,
        gallery: Option<&str>,
        only: Option<&[usize]>,
    ) -> Result<Vec<SearchResult>> {
        let qs = self.normalised_rows(queries)?;
        let asked: Vec<Query<'_>> = qs.iter().map(|q| Query { vector: q, n, gallery }).collect();
        Ok(self.search_queries(&asked, only))
    }

    fn normalised_rows(&self, queries: &[f32]) -> Result<Vec<Box<[f32]>>> {
        let dims = self.opts.dims;
        if queries.is_empty() || queries.len() % dims != 0 {
            return Err(IndexError::Dimensions {
                expected: dims,
                got: queries.len(),
            });
        }
        queries.chunks_exact(dims).map(|q| self.normalised(q)).collect()
    }

    /// Every query over the live shards (of `only`), merged per query. A scan shard takes
    /// all the queries in one pass (its blocks split over the pool); a graph takes one task
    /// per query and shard, so either way one call keeps every thread busy.
    fn search_queries(&self, qs: &[Query<'_>], only: Option<&[usize]>) -> Vec<SearchResult> {
        let (live, down): (Vec<&Shard>, Vec<&Shard>) = self
            .shards
            .iter()
            .filter(|s| only.is_none_or(|o| o.contains(&s.k)))
            .partition(|s| s.searchable());
        let skipped: Vec<SkippedShard> = down
            .iter()
            .map(|s| SkippedShard {
                shard: s.k,
                state: s.state(),
                error: None,
            })
            .collect();
        let mut results: Vec<SearchResult> = (0..qs.len())
            .map(|_| SearchResult {
                hits: Vec::new(),
                searched: Vec::new(),
                faces: 0,
                skipped: skipped.clone(),
            })
            .collect();
        let sim = &*self.similarity;
        // (first query, shard, hits of the queries from the first on)
        let answers: Vec<(usize, usize, Result<Vec<Vec<Hit>>>)> = self.pool.install(|| match self.opts.kind {
            IndexKind::Hnsw => (0..qs.len() * live.len())
                .into_par_iter()
                .map(|t| {
                    let (qi, s) = (t / live.len(), live[t % live.len()]);
                    (qi, s.k, s.search(&qs[qi..qi + 1], &self.opts, sim))
                })
                .collect(),
            IndexKind::Scan | IndexKind::Auto => live
                .par_iter()
                .map(|s| (0, s.k, s.search(qs, &self.opts, sim)))
                .collect(),
        });
        for (first, k, r) in answers {
            match r {
                Ok(per_query) => {
                    let shard = self.held(k);
                    for ((out, hits), q) in results[first..].iter_mut().zip(per_query).zip(&qs[first..]) {
                        out.searched.push(k);
                        out.faces += shard.map_or(0, |s| s.scope_len(q.gallery)) as u64;
                        out.hits.extend(hits);
                    }
                }
                Err(e) => {
                    let count = if self.opts.kind == IndexKind::Hnsw { 1 } else { qs.len() };
                    for out in &mut results[first..first + count] {
                        out.skipped.push(SkippedShard {
                            shard: k,
                            state: self.shard(k).map_or(ShardState::Failed, Shard::state),
                            error: Some(e.to_string()),
                        });
                    }
                }
            }
        }
        for (out, q) in results.iter_mut().zip(qs) {
            out.searched.sort_unstable();
            out.skipped.sort_by_key(|s| s.shard);
            sort_hits(&mut out.hits);
            out.hits.truncate(q.n);
        }
        results
    }

    /// [`ShardSet::search_batch_in`] for callers that do not wait: `reply` is called with
    /// the results on a pool thread. Searches that arrive while another is in flight are
    /// gathered and run together, in one pass per shard ([`ShardSetOptions::gather_max`]).
    pub fn search_gathered(self: &Arc<Self>, search: GatheredSearch, reply: Reply) {
        let ready = {
            let mut g = self.gather.lock().unwrap_or_else(|e| e.into_inner());
            g.queued += search.queries.len() / self.opts.dims.max(1);
            g.waiting.push_back((search, reply));
            g.next_batch(&self.opts)
        };
        if let Some(batch) = ready {
            self.run_gathered(batch);
        }
    }

    fn run_gathered(self: &Arc<Self>, batch: Vec<(GatheredSearch, Reply)>) {
        let set = Arc::clone(self);
        self.pool.spawn(move || {
            // Whatever happens to this batch, the next must still start: a batch that never
            // counted itself out would hold every later one back.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| set.answer(batch)));
            let next = {
                let mut g = set.gather.lock().unwrap_or_else(|e| e.into_inner());
                g.in_flight -= 1;
                g.next_batch(&set.opts)
            };
            if let Some(batch) = next {
                set.run_gathered(batch);
            }
        });
    }

    /// Runs a gathered batch and replies to each of its searches. A search with bad input
    /// is answered with its own error; the others still run, grouped by the shards asked.
    fn answer(&self, batch: Vec<(GatheredSearch, Reply)>) {
        let mut groups: Vec<(Option<Vec<usize>>, Vec<(Vec<Box<[f32]>>, GatheredSearch, Reply)>)> = Vec::new();
        for (search, reply) in batch {
            match self.normalised_rows(&search.queries) {
                Err(e) => reply(Err(e)),
                Ok(rows) => match groups.iter_mut().find(|(only, _)| *only == search.only) {
                    Some((_, members)) => members.push((rows, search, reply)),
                    None => groups.push((search.only.clone(), vec![(rows, search, reply)])),
                },
            }
        }
        for (only, members) in groups {
            let asked: Vec<Query<'_>> = members
                .iter()
                .flat_map(|(rows, s, _)| rows.iter().map(|q| Query { vector: q, n: s.n, gallery: s.gallery.as_deref() }))
                .collect();
            let found = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.search_queries(&asked, only.as_deref())));
            let mut found = match found {
                Ok(r) => r.into_iter(),
                Err(_) => {
                    for (_, _, reply) in members {
                        reply(Err(IndexError::Native("panic in a gathered search".into())));
                    }
                    continue;
                }
            };
            for (rows, _, reply) in members {
                reply(Ok(found.by_ref().take(rows.len()).collect()));
            }
        }
    }

    /// Declares that every change up to `position` has been offered to this set (the caller
    /// replays a gap-free log), so live shards that received none of them still move their
    /// position forward and [`ShardSet::replay_from`] does not stay behind.
    pub fn advance_to(&self, position: u64) {
        for s in &self.shards {
            s.advance_to(position);
        }
    }

    /// Empties shard `k` and marks it rebuilding (buffered changes are kept).
    pub fn begin_rebuild(&self, k: usize) -> Result<()> {
        self.shard(k)?.begin_rebuild(&self.opts)
    }

    /// Adds one face from a database scan to its shard if that shard is rebuilding;
    /// returns whether it was taken. Faces of live shards are skipped, so one full scan can
    /// refill any subset of shards.
    pub fn rebuild_upsert<S: AsRef<str>>(
        &self,
        id: u64,
        vector: &[f32],
        galleries: &[S],
    ) -> Result<bool> {
        let v = self.normalised(vector)?;
        let g = Self::gallery_list(galleries)?;
        self.shard(self.shard_of(id))?.rebuild_upsert(id, v, g, &self.opts)
    }

    /// [`ShardSet::rebuild_upsert`] for a batch: `vectors` is `ids.len() * dims` row-major,
    /// `galleries` is either empty (no galleries) or one list per id. Shards fill one after
    /// another, each with all the pool's worth of workers inserting in parallel. Returns how
    /// many faces were taken.
    pub fn rebuild_batch<S: AsRef<str> + Sync>(
        &self,
        ids: &[u64],
        vectors: &[f32],
        galleries: &[Vec<S>],
    ) -> Result<usize> {
        let dims = self.opts.dims;
        if vectors.len() != ids.len() * dims {
            return Err(IndexError::Dimensions {
                expected: ids.len() * dims,
                got: vectors.len(),
            });
        }
        if !galleries.is_empty() && galleries.len() != ids.len() {
            return Err(IndexError::BadOption(
                "galleries must be empty or one list per id".into(),
            ));
        }
        let mut by_shard: Vec<Vec<(u64, Box<[f32]>, Vec<String>)>> =
            (0..self.shards.len()).map(|_| Vec::new()).collect();
        let mut seen = crate::ids::IdSet::default();
        // Last occurrence wins, as it would applied one by one.
        for i in (0..ids.len()).rev() {
            if !seen.insert(ids[i]) {
                continue;
            }
            let v = self.normalised(&vectors[i * dims..(i + 1) * dims])?;
            let g = match galleries.get(i) {
                Some(list) => Self::gallery_list(list)?,
                None => Vec::new(),
            };
            if let Some(slot) = self.slots[self.shard_of(ids[i])] {
                by_shard[slot].push((ids[i], v, g));
            }
        }
        let mut taken = 0;
        for (slot, mut rows) in by_shard.into_iter().enumerate() {
            rows.reverse();
            taken += self.shards[slot].rebuild_bulk(rows, &self.opts)?;
        }
        Ok(taken)
    }

    /// Fills rebuilding shard `k` from a database scan ([`ShardSet::rebuild_batch`] for one
    /// shard's faces; faces of other shards are skipped). Returns how many were taken.
    pub fn refill<S: AsRef<str> + Sync>(
        &self,
        k: usize,
        ids: &[u64],
        vectors: &[f32],
        galleries: &[Vec<S>],
    ) -> Result<usize> {
        self.shard(k)?;
        let dims = self.opts.dims;
        let mine: Vec<usize> = (0..ids.len()).filter(|&i| self.shard_of(ids[i]) == k).collect();
        let ids_k: Vec<u64> = mine.iter().map(|&i| ids[i]).collect();
        let mut vectors_k = Vec::with_capacity(mine.len() * dims);
        for &i in &mine {
            vectors_k.extend_from_slice(vectors.get(i * dims..(i + 1) * dims).ok_or(
                IndexError::Dimensions {
                    expected: ids.len() * dims,
                    got: vectors.len(),
                },
            )?);
        }
        let galleries_k: Vec<Vec<&str>> = if galleries.is_empty() {
            Vec::new()
        } else {
            mine.iter()
                .map(|&i| galleries.get(i).map_or(Vec::new(), |g| g.iter().map(AsRef::as_ref).collect()))
                .collect()
        };
        self.rebuild_batch(&ids_k, &vectors_k, &galleries_k)
    }

    /// Declares shard `k`'s refill complete as of change `position` and brings it live.
    pub fn finish_rebuild(&self, k: usize, position: u64) -> Result<()> {
        self.shard(k)?.finish_rebuild(position, &self.opts)
    }

    /// Shards that are rebuilding or failed: those a healer has to bring back.
    pub fn needs_rebuild(&self) -> Vec<usize> {
        self.shards
            .iter()
            .filter(|s| matches!(s.state(), ShardState::Rebuilding | ShardState::Failed))
            .map(|s| s.k)
            .collect()
    }

    /// Lowest position any shard reflects: replaying the change log from just after it
    /// brings every shard current. Read from published figures: never waits for a writer.
    pub fn replay_from(&self) -> u64 {
        self.shards.iter().map(Shard::position).min().unwrap_or(0)
    }

    /// Snapshots shard `k` into `dir`; returns the position it covers.
    pub fn save(&self, k: usize, dir: &Path) -> Result<u64> {
        self.shard(k)?.save(dir, self.opts.shards, &self.opts)
    }

    /// Snapshots every live shard one after another (to bound disk bandwidth); a shard
    /// that is not live yields its `WrongState` error and the rest still save.
    pub fn save_all(&self, dir: &Path) -> Vec<Result<u64>> {
        self.shards
            .iter()
            .map(|s| s.save(dir, self.opts.shards, &self.opts))
            .collect()
    }

    /// Loads shard `k` from `dir` and brings it live. An error means "rebuild this shard":
    /// it is left empty and rebuilding while the others keep serving.
    pub fn load(&self, k: usize, dir: &Path) -> Result<u64> {
        self.shard(k)?.load(dir, self.opts.shards, &self.opts, true)
    }

    /// Puts a failed (or rebuilding) shard `k` back to its snapshot in `dir`, still out of
    /// search, and returns the position the snapshot covers: replay the log after it
    /// ([`ShardSet::replay`]), then `finish_rebuild`. On an error (no usable snapshot) the
    /// shard is empty at position 0: refill it from the database or replay the whole log.
    pub fn reload(&self, k: usize, dir: &Path) -> Result<u64> {
        self.shard(k)?.load(dir, self.opts.shards, &self.opts, false)
    }

    /// Loads every shard from `dir` in parallel; per-shard results as in [`ShardSet::load`].
    pub fn load_all(&self, dir: &Path) -> Vec<Result<u64>> {
        std::thread::scope(|scope| {
            let handles: Vec<_> = self
                .shards
                .iter()
                .map(|s| scope.spawn(move || s.load(dir, self.opts.shards, &self.opts, true)))
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(IndexError::Native("load thread panicked".into())))
                })
                .collect()
        })
    }

    /// Takes shard `k` out of search (it keeps applying updates).
    pub fn set_offline(&self, k: usize) -> Result<()> {
        self.shard(k)?.set_offline(true);
        Ok(())
    }

    pub fn set_online(&self, k: usize) -> Result<()> {
        self.shard(k)?.set_offline(false);
        Ok(())
    }

    pub fn state(&self, k: usize) -> Result<ShardState> {
        Ok(self.shard(k)?.state())
    }

    /// One line per shard for a health endpoint.
    pub fn health(&self) -> Vec<ShardHealth> {
        self.shards.iter().map(Shard::health).collect()
    }

    /// Faces across all shards, whatever their state.
    pub fn len(&self) -> usize {
        self.shards.iter().map(Shard::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Graph memory across shards as usearch reports it (excludes gallery tables and exact copies).
    pub fn index_memory(&self) -> IndexMemory {
        self.shards
            .iter()
            .map(Shard::index_memory)
            .fold(IndexMemory::default(), |a, m| IndexMemory {
                allocated: a.allocated + m.allocated,
                used: a.used + m.used,
            })
    }

    /// The SIMD path usearch chose at run time (e.g. "haswell", "skylake"), for health.
    pub fn hardware_acceleration(&self) -> String {
        self.shards
            .first()
            .map(Shard::hardware_acceleration)
            .unwrap_or_default()
    }
}
