//! The partitioned index: routing, fan-out search and merge, operator control.

use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};

use crate::error::{IndexError, Result};
use crate::options::ShardSetOptions;
use crate::route::shard_of;
use crate::shard::{sort_hits, Change, Hit, IndexMemory, Outcome, Shard, ShardHealth, ShardState};

/// Exact similarity used to re-rank quantised candidates and score small galleries.
/// Both arguments are L2-normalised, so a dot product is the cosine.
pub type Similarity = Arc<dyn Fn(&[f32], &[f32]) -> f32 + Send + Sync>;

/// Scalar reference dot product, the default [`Similarity`]. Eight accumulators let the
/// compiler vectorise it without fast-math, and the summation order is fixed so results
/// are reproducible.
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

/// Counting semaphore: usearch fails (rather than waits) when a shard runs out of search
/// contexts, so callers beyond `max_concurrent_searches` wait here instead.
struct Permits {
    free: Mutex<usize>,
    cv: Condvar,
}

struct Permit<'a>(&'a Permits);

impl Permits {
    fn acquire(&self) -> Permit<'_> {
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        while *free == 0 {
            free = self.cv.wait(free).unwrap_or_else(|e| e.into_inner());
        }
        *free -= 1;
        Permit(self)
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        *self.0.free.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        self.0.cv.notify_one();
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
pub struct ShardSet {
    opts: ShardSetOptions,
    shards: Vec<Shard>,
    similarity: Similarity,
    permits: Permits,
}

impl ShardSet {
    pub fn new(options: &ShardSetOptions) -> Result<ShardSet> {
        let opts = options.resolved()?;
        let shards = (0..opts.shards)
            .map(|k| Shard::new(k, &opts))
            .collect::<Result<Vec<_>>>()?;
        let permits = Permits {
            free: Mutex::new(opts.max_concurrent_searches),
            cv: Condvar::new(),
        };
        Ok(ShardSet {
            opts,
            shards,
            similarity: Arc::new(dot),
            permits,
        })
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

    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// The shard that owns `id` (see [`crate::route`]).
    pub fn shard_of(&self, id: u64) -> usize {
        shard_of(id, self.shards.len())
    }

    fn shard(&self, k: usize) -> Result<&Shard> {
        self.shards.get(k).ok_or(IndexError::NoSuchShard(k))
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

    /// Whether face `id` is in its shard (whatever the shard's state).
    pub fn contains(&self, id: u64) -> bool {
        self.shards[self.shard_of(id)].contains(id)
    }

    /// Face `id`'s galleries as its shard currently has them.
    pub fn galleries_of(&self, id: u64) -> Vec<String> {
        self.shards[self.shard_of(id)].galleries_of(id)
    }

    /// Top `n` faces by cosine similarity across all live shards, optionally only faces in
    /// `gallery`. Shards are searched in parallel; a shard that is not live is skipped and
    /// reported, never waited for.
    pub fn search(&self, query: &[f32], n: usize, gallery: Option<&str>) -> Result<SearchResult> {
        let q = self.normalised(query)?;
        let mut result = SearchResult {
            hits: Vec::new(),
            searched: Vec::new(),
            skipped: Vec::new(),
        };
        if n == 0 {
            return Ok(result);
        }
        let (live, down): (Vec<&Shard>, Vec<&Shard>) =
            self.shards.iter().partition(|s| s.searchable());
        result.skipped = down
            .iter()
            .map(|s| SkippedShard {
                shard: s.k,
                state: s.state(),
                error: None,
            })
            .collect();

        let _permit = self.permits.acquire();
        let run = |s: &Shard| s.search(&q, n, gallery, &self.opts, &*self.similarity);
        let answers: Vec<(usize, Result<Vec<Hit>>)> = match live.as_slice() {
            [] => Vec::new(),
            [only] => vec![(only.k, run(only))],
            [first, rest @ ..] => std::thread::scope(|scope| {
                let handles: Vec<_> = rest
                    .iter()
                    .map(|s| (s.k, scope.spawn(move || run(s))))
                    .collect();
                let mut out = vec![(first.k, run(first))];
                for (k, h) in handles {
                    let r = h.join().unwrap_or_else(|_| {
                        Err(IndexError::Native("search thread panicked".into()))
                    });
                    out.push((k, r));
                }
                out
            }),
        };
        for (k, r) in answers {
            match r {
                Ok(hits) => {
                    result.searched.push(k);
                    result.hits.extend(hits);
                }
                Err(e) => result.skipped.push(SkippedShard {
                    shard: k,
                    state: self.shards[k].state(),
                    error: Some(e.to_string()),
                }),
            }
        }
        result.searched.sort_unstable();
        result.skipped.sort_by_key(|s| s.shard);
        sort_hits(&mut result.hits);
        result.hits.truncate(n);
        Ok(result)
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
        self.shards[self.shard_of(id)].rebuild_upsert(id, v, g, &self.opts)
    }

    /// [`ShardSet::rebuild_upsert`] for a batch: `vectors` is `ids.len() * dims` row-major,
    /// `galleries` is either empty (no galleries) or one list per id. Shards fill in
    /// parallel. Returns how many faces were taken.
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
        let mut by_shard: Vec<Vec<usize>> = vec![Vec::new(); self.shards.len()];
        for (i, &id) in ids.iter().enumerate() {
            by_shard[self.shard_of(id)].push(i);
        }
        let none: Vec<S> = Vec::new();
        std::thread::scope(|scope| {
            let handles: Vec<_> = by_shard
                .iter()
                .enumerate()
                .filter(|(_, rows)| !rows.is_empty())
                .map(|(k, rows)| {
                    let none = &none;
                    scope.spawn(move || -> Result<usize> {
                        let mut taken = 0;
                        for &i in rows {
                            let v = self.normalised(&vectors[i * dims..(i + 1) * dims])?;
                            let g = Self::gallery_list(galleries.get(i).unwrap_or(none))?;
                            taken +=
                                self.shards[k].rebuild_upsert(ids[i], v, g, &self.opts)? as usize;
                        }
                        Ok(taken)
                    })
                })
                .collect();
            let mut total = 0;
            for h in handles {
                total += h.join().unwrap_or_else(|_| {
                    Err(IndexError::Native("rebuild thread panicked".into()))
                })?;
            }
            Ok(total)
        })
    }

    /// Declares shard `k`'s refill complete as of change `position` and brings it live.
    pub fn finish_rebuild(&self, k: usize, position: u64) -> Result<()> {
        self.shard(k)?.finish_rebuild(position, &self.opts)
    }

    /// Shards that need a refill from the database (rebuilding or failed).
    pub fn needs_rebuild(&self) -> Vec<usize> {
        self.shards
            .iter()
            .filter(|s| matches!(s.state(), ShardState::Rebuilding | ShardState::Failed))
            .map(|s| s.k)
            .collect()
    }

    /// Lowest position any shard reflects: replaying the change log from just after it
    /// brings every shard current.
    pub fn replay_from(&self) -> u64 {
        self.shards.iter().map(Shard::position).min().unwrap_or(0)
    }

    /// Snapshots shard `k` into `dir`; returns the position it covers.
    pub fn save(&self, k: usize, dir: &Path) -> Result<u64> {
        self.shard(k)?.save(dir, self.shards.len(), &self.opts)
    }

    /// Snapshots every live shard one after another (to bound disk bandwidth); a shard
    /// that is not live yields its `WrongState` error and the rest still save.
    pub fn save_all(&self, dir: &Path) -> Vec<Result<u64>> {
        self.shards
            .iter()
            .map(|s| s.save(dir, self.shards.len(), &self.opts))
            .collect()
    }

    /// Loads shard `k` from `dir`. An error means "rebuild this shard": it is left empty and
    /// rebuilding while the others keep serving.
    pub fn load(&self, k: usize, dir: &Path) -> Result<u64> {
        self.shard(k)?.load(dir, self.shards.len(), &self.opts)
    }

    /// Loads every shard from `dir` in parallel; per-shard results as in [`ShardSet::load`].
    pub fn load_all(&self, dir: &Path) -> Vec<Result<u64>> {
        std::thread::scope(|scope| {
            let handles: Vec<_> = self
                .shards
                .iter()
                .map(|s| scope.spawn(move || s.load(dir, self.shards.len(), &self.opts)))
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
