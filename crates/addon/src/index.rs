//! Node.js bindings for `face-index`: the search shards.
//!
//! Arguments are copied into owned Rust values on the JavaScript thread; the work (applying
//! changes, searching, snapshotting, healing a shard) runs on the shard set's bounded worker
//! pool and the promise settles back on the JavaScript thread. The health report, positions
//! and the operator's offline switch only read or write atomics, so they are synchronous:
//! none of them waits for a shard's lock.
//!
//! Errors: every failure this module raises, thrown or as a rejection, is an `IndexError`
//! turned into a JavaScript error by `crate::error` (`err.code` = `IndexError::code()`:
//! BAD_PARAM, INDEX_UNAVAILABLE, SNAPSHOT_INVALID, INTERNAL). Only napi's own conversion of
//! argument types (a string where a number is declared) throws with napi's status instead;
//! the TypeScript wrapper's types rule that out, and it maps anything uncoded to INTERNAL.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use face_index::{GatheredSearch, IndexError, IndexKind, Scalar, ShardSet, ShardSetOptions, Update};
use napi::bindgen_prelude::*;
use napi_derive::napi;

use crate::error::{js_error, rejected, PendingPromise};

/// Largest integer a JavaScript number holds exactly: positions and ids beyond it would be
/// silently rounded, so they are refused instead.
const MAX_SAFE: f64 = 9_007_199_254_740_991.0;

/// Index configuration.
#[napi(object)]
pub struct IndexOptions {
    /// Folder of the shard snapshots (created when missing).
    pub dir: String,
    /// Number of shards; 0 means one per core. Snapshots written with another count are ignored.
    pub shards: u32,
    /// Embedding dimension.
    pub dims: u32,
    /// "hnsw" (graphs), "scan" (batched scans of 4-bit codes, re-ranked in f16) or "auto"
    /// (the scan); absent: auto. Snapshots of the other kind are ignored (rebuild).
    #[napi(ts_type = "\"hnsw\" | \"scan\" | \"auto\"")]
    pub kind: Option<String>,
    /// Scan kind: candidates per query re-scored exactly; absent: the crate's default.
    pub rerank: Option<u32>,
    /// Graph storage: "f32", "f16" or "i8".
    #[napi(ts_type = "\"f32\" | \"f16\" | \"i8\"")]
    pub scalar: String,
    /// Worker threads of the index pool; 0 or absent means one per core.
    pub threads: Option<u32>,
    /// Keep exact f32 copies for re-ranking; absent chooses per scalar kind (only i8 keeps them).
    pub keep_exact: Option<bool>,
    /// The shards to hold, by number below `shards`; absent holds them all. Changes of faces
    /// in other shards are skipped (a shard server of a multi-server deployment).
    pub owned: Option<Vec<u32>>,
}

/// The index's own defaults for the options a service setting feeds. The service declares its
/// defaults in src/config/service-settings.ts; its test compares them with these.
#[napi(object)]
pub struct IndexDefaults {
    pub kind: String,
    pub rerank: u32,
    pub scalar: String,
    /// 0: one per core.
    pub threads: u32,
}

#[napi]
pub fn index_defaults() -> IndexDefaults {
    let d = ShardSetOptions::new(0);
    IndexDefaults { kind: d.kind.as_str().into(), rerank: d.rerank as u32, scalar: d.scalar.as_str().into(), threads: d.threads as u32 }
}

/// The shard that owns face `id` among `shards` shards: the rule the index routes by, for
/// callers that must know which server holds a face. Throws BAD_PARAM for an id that is not
/// a whole number in 0..2^53 or for no shards.
#[napi]
pub fn shard_of(env: Env, id: f64, shards: u32) -> Result<u32> {
    let id = whole("id", id).map_err(|e| js_error(&env, &e))?;
    if shards == 0 {
        return Err(js_error(&env, &IndexError::BadOption("shards must be at least 1".into())));
    }
    Ok(face_index::route::shard_of(id, shards as usize) as u32)
}

/// One database change, applied in position order.
#[napi(object)]
pub struct IndexChange {
    /// Position in the change log; increases in commit order.
    pub position: f64,
    #[napi(ts_type = "\"upsert\" | \"delete\" | \"galleries\"")]
    pub op: String,
    pub id: f64,
    /// The face's embedding (upsert).
    pub vector: Option<Float32Array>,
    /// The galleries a gallery-restricted search finds the face in (upsert, galleries). The
    /// service leaves out `default`, which holds every face and is searched unfiltered.
    pub galleries: Option<Vec<String>>,
}

/// A face found by search.
#[napi(object)]
pub struct IndexMatch {
    pub id: f64,
    /// Cosine similarity in [-1, 1].
    pub similarity: f64,
}

/// Result of search().
#[napi(object)]
pub struct IndexSearchResult {
    /// Best first.
    pub matches: Vec<IndexMatch>,
    /// Shards that answered.
    pub live: u32,
    pub total: u32,
    /// Shards not searched (not live, or failed during the search).
    pub missing: Vec<u32>,
    /// Faces compared against: those in scope (the gallery, or all) on the shards that answered.
    pub faces: f64,
}

/// One shard's line in the health report.
#[napi(object)]
pub struct ShardInfo {
    pub shard: u32,
    #[napi(ts_type = "\"loading\" | \"rebuilding\" | \"live\" | \"failed\" | \"offline\"")]
    pub state: String,
    /// Faces in the shard.
    pub size: f64,
    /// Change position the shard reflects.
    pub position: f64,
    /// Changes buffered while not live.
    pub pending: u32,
    pub memory_bytes: f64,
    /// Seconds since the last snapshot was written or loaded; absent when none.
    pub snapshot_age_s: Option<f64>,
    /// Change position the last snapshot written or loaded covers; absent when none.
    pub snapshot_position: Option<f64>,
}

/// What happened to one shard's snapshot (loading at open, reloading, or saving).
#[napi(object)]
pub struct ShardSnapshot {
    pub shard: u32,
    /// Position the snapshot covers; 0 when it could not be used.
    pub position: f64,
    /// Why the snapshot could not be loaded or saved; absent on success.
    pub error: Option<String>,
    /// Loading only: there was no snapshot to load (a shard never saved), which is expected on
    /// a first start and not a fault.
    pub missing: bool,
    /// Saving only: the shard was not live, so nothing was written (not an error).
    pub skipped: bool,
}

/// Partitioned nearest-neighbour search over face embeddings.
#[napi]
pub struct FaceIndex {
    set: Mutex<Option<Arc<ShardSet>>>,
    dir: PathBuf,
    /// Per shard at open: position, and why its snapshot was not used (and whether it was simply missing).
    loaded: Vec<(u32, f64, Option<(String, bool)>)>,
}

fn whole(name: &str, v: f64) -> std::result::Result<u64, IndexError> {
    if v.is_finite() && v >= 0.0 && v <= MAX_SAFE && v.fract() == 0.0 {
        Ok(v as u64)
    } else {
        Err(IndexError::BadOption(format!("{name} must be a whole number between 0 and 2^53-1")))
    }
}

fn owned_changes(changes: Vec<IndexChange>) -> std::result::Result<Vec<(u64, Update)>, IndexError> {
    changes
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            let position = whole("position", c.position)?;
            let id = whole("id", c.id)?;
            let update = match c.op.as_str() {
                "upsert" => Update::Upsert {
                    id,
                    vector: c
                        .vector
                        .map(|v| v.to_vec())
                        .ok_or_else(|| IndexError::BadOption(format!("change {i}: upsert needs a vector")))?,
                    galleries: c.galleries.unwrap_or_default(),
                },
                "delete" => Update::Remove { id },
                "galleries" => Update::SetGalleries { id, galleries: c.galleries.unwrap_or_default() },
                other => return Err(IndexError::BadOption(format!("change {i}: unknown op {other:?}"))),
            };
            Ok((position, update))
        })
        .collect()
}

fn search_result(r: face_index::SearchResult, total: u32) -> IndexSearchResult {
    IndexSearchResult {
        matches: r.hits.iter().map(|h| IndexMatch { id: h.id as f64, similarity: h.similarity as f64 }).collect(),
        live: r.searched.len() as u32,
        total,
        missing: r.skipped.iter().map(|s| s.shard as u32).collect(),
        faces: r.faces as f64,
    }
}

fn settle_in<R, T, W, F>(pending: PendingPromise<T>, work: W, to_js: F)
where
    R: Send + 'static,
    T: ToNapiValue + 'static,
    W: FnOnce() -> std::result::Result<R, IndexError> + Send + 'static,
    F: FnOnce(Env, R) -> Result<T> + Send + 'static,
{
    let result =
        catch_unwind(AssertUnwindSafe(work)).unwrap_or_else(|_| Err(IndexError::Native("panic in the index".into())));
    pending.settle(result, to_js);
}

/// Runs `work` on a thread of its own and settles the promise with its result: only for
/// opening, which happens once and before the set (and its pool) exists.
fn off_thread<'env, R, T, W, F>(env: &'env Env, name: &str, work: W, to_js: F) -> Result<Object<'env>>
where
    R: Send + 'static,
    T: ToNapiValue + 'static,
    W: FnOnce() -> std::result::Result<R, IndexError> + Send + 'static,
    F: FnOnce(Env, R) -> Result<T> + Send + 'static,
{
    let (pending, promise) = PendingPromise::new(env)?;
    let in_thread = pending.clone();
    let spawned = std::thread::Builder::new().name(name.into()).spawn(move || settle_in(in_thread, work, to_js));
    if let Err(e) = spawned {
        pending.reject(IndexError::Native(format!("cannot start index thread: {e}")));
    }
    Ok(promise)
}

fn to_js_whole(v: u64) -> f64 {
    v as f64
}

#[napi]
impl FaceIndex {
    /// Creates the shards and loads each from its snapshot in `dir`. A shard without a usable
    /// snapshot stays empty and rebuilding at position 0 (see `loadReport`): the caller
    /// refills it and calls `finishRebuild`.
    #[napi(ts_return_type = "Promise<FaceIndex>")]
    pub fn open<'env>(env: &'env Env, opts: IndexOptions) -> Result<Object<'env>> {
        let dir = PathBuf::from(&opts.dir);
        let prepared = (|| -> std::result::Result<ShardSetOptions, IndexError> {
            let mut o = ShardSetOptions::new(opts.dims as usize);
            o.shards = opts.shards as usize;
            o.scalar = opts.scalar.parse::<Scalar>()?;
            if let Some(kind) = &opts.kind {
                o.kind = kind.parse::<IndexKind>()?;
            }
            if let Some(r) = opts.rerank {
                o.rerank = r as usize;
            }
            o.threads = opts.threads.unwrap_or(0) as usize;
            o.keep_exact = opts.keep_exact;
            o.owned = opts.owned.as_ref().map(|ks| ks.iter().map(|&k| k as usize).collect());
            Ok(o)
        })();
        let options = match prepared {
            Ok(o) => o,
            Err(e) => return rejected::<FaceIndex, _>(env, e),
        };
        let in_thread = dir.clone();
        off_thread(
            env,
            "face-index-open",
            move || {
                std::fs::create_dir_all(&in_thread).map_err(|e| IndexError::Io { path: in_thread.clone(), source: e })?;
                let set = ShardSet::new(&options)?.with_similarity(Arc::new(face_engine::simd::dot));
                let loaded = set
                    .shard_ids()
                    .into_iter()
                    .zip(set.load_all(&in_thread))
                    .map(|(k, r)| match r {
                        Ok(p) => (k as u32, to_js_whole(p), None),
                        Err(e) => (k as u32, 0.0, Some((e.to_string(), e.is_missing_file()))),
                    })
                    .collect::<Vec<_>>();
                Ok((set, loaded))
            },
            move |_env, (set, loaded)| Ok(FaceIndex { set: Mutex::new(Some(Arc::new(set))), dir, loaded }),
        )
    }

    /// How each shard's snapshot loaded at open: its position, or why it could not be used.
    #[napi]
    pub fn load_report(&self) -> Vec<ShardSnapshot> {
        self.loaded
            .iter()
            .map(|(shard, position, error)| ShardSnapshot {
                shard: *shard,
                position: *position,
                error: error.as_ref().map(|(why, _)| why.clone()),
                missing: error.as_ref().is_some_and(|(_, missing)| *missing),
                skipped: false,
            })
            .collect()
    }

    /// Applies changes in the given order, shards in parallel; each must carry a higher
    /// position than the last one its shard saw (lower ones are replays and are ignored).
    /// Every position up to the last one given counts as offered: the caller feeds a
    /// gap-free log.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn apply<'env>(&self, env: &'env Env, changes: Vec<IndexChange>) -> Result<Object<'env>> {
        let changes = match owned_changes(changes) {
            Ok(c) => c,
            Err(e) => return rejected::<(), _>(env, e),
        };
        self.on_set(env, move |set| set.apply_batch(changes), |_env, ()| Ok(()))
    }

    /// Top `n` faces by cosine similarity over the live shards for each of the queries
    /// (`queries` holds them one after another, `dims` each), optionally only in `gallery`
    /// and only over the held shards named in `shards`. One call for all the faces of a
    /// photo; calls that arrive while another search runs are gathered into one pass
    /// over the shards (`ShardSet::search_gathered`).
    #[napi(ts_return_type = "Promise<IndexSearchResult[]>")]
    pub fn search_batch<'env>(
        &self,
        env: &'env Env,
        queries: Float32Array,
        n: u32,
        gallery: Option<String>,
        shards: Option<Vec<u32>>,
    ) -> Result<Object<'env>> {
        let set = match self.set() {
            Ok(s) => s,
            Err(e) => return rejected::<Vec<IndexSearchResult>, _>(env, e),
        };
        let only: Option<Vec<usize>> = shards.map(|ks| ks.into_iter().map(|k| k as usize).collect());
        let total = match &only {
            Some(ks) => ks.iter().filter(|&&k| set.shard_ids().contains(&k)).count() as u32,
            None => set.shard_ids().len() as u32,
        };
        let (pending, promise) = PendingPromise::new(env)?;
        let search = GatheredSearch { queries: queries.to_vec(), n: n as usize, gallery, only };
        set.search_gathered(
            search,
            Box::new(move |found| {
                let rendered = found.map(|rs| rs.into_iter().map(|r| search_result(r, total)).collect::<Vec<_>>());
                pending.settle(rendered, |_env, r| Ok(r));
            }),
        );
        Ok(promise)
    }

    /// Per-shard state, size, position and snapshot age, from published figures.
    #[napi]
    pub fn shards(&self, env: Env) -> Result<Vec<ShardInfo>> {
        let set = self.set().map_err(|e| js_error(&env, &e))?;
        Ok(set
            .health()
            .into_iter()
            .map(|h| ShardInfo {
                shard: h.shard as u32,
                state: h.state.as_str().to_string(),
                size: h.size as f64,
                position: h.position as f64,
                pending: h.pending as u32,
                memory_bytes: h.memory_bytes as f64,
                snapshot_age_s: h.snapshot_age.map(|d| d.as_secs_f64()),
                snapshot_position: h.snapshot_position.map(to_js_whole),
            })
            .collect())
    }

    /// Threads in the index's worker pool.
    #[napi]
    pub fn threads(&self, env: Env) -> Result<u32> {
        let set = self.set().map_err(|e| js_error(&env, &e))?;
        Ok(set.threads() as u32)
    }

    /// Takes shard `k` out of search; it keeps applying changes.
    #[napi]
    pub fn set_offline(&self, env: Env, k: u32) -> Result<()> {
        let set = self.set().map_err(|e| js_error(&env, &e))?;
        set.set_offline(k as usize).map_err(|e| js_error(&env, &e))
    }

    /// Puts shard `k` back into search.
    #[napi]
    pub fn set_online(&self, env: Env, k: u32) -> Result<()> {
        let set = self.set().map_err(|e| js_error(&env, &e))?;
        set.set_online(k as usize).map_err(|e| js_error(&env, &e))
    }

    /// Takes shard `k` out of search as failed, to be rebuilt (`reload`, `replay`,
    /// `finishRebuild`).
    #[napi(ts_return_type = "Promise<void>")]
    pub fn mark_failed<'env>(&self, env: &'env Env, k: u32) -> Result<Object<'env>> {
        self.on_set(env, move |set| set.mark_failed(k as usize), |_env, ()| Ok(()))
    }

    /// Puts failed or rebuilding shard `k` back to its snapshot, still out of search. Resolves
    /// to the snapshot's position, or to position 0 and the reason when there is no usable
    /// snapshot (the shard is then empty).
    #[napi(ts_return_type = "Promise<ShardSnapshot>")]
    pub fn reload<'env>(&self, env: &'env Env, k: u32) -> Result<Object<'env>> {
        let dir = self.dir.clone();
        self.on_set(
            env,
            move |set| {
                Ok(match set.reload(k as usize, &dir) {
                    Ok(p) => ShardSnapshot { shard: k, position: to_js_whole(p), error: None, missing: false, skipped: false },
                    Err(e @ (IndexError::NoSuchShard(_) | IndexError::WrongState { .. })) => return Err(e),
                    Err(e) => ShardSnapshot { shard: k, position: 0.0, missing: e.is_missing_file(), error: Some(e.to_string()), skipped: false },
                })
            },
            |_env, r| Ok(r),
        )
    }

    /// Empties rebuilding or failed shard `k` for a refill from the database.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn begin_rebuild<'env>(&self, env: &'env Env, k: u32) -> Result<Object<'env>> {
        self.on_set(env, move |set| set.begin_rebuild(k as usize), |_env, ()| Ok(()))
    }

    /// Adds the faces of a database scan that belong to rebuilding shard `k` (the others are
    /// skipped): `ids` one per face, `vectors` one embedding after another, `galleries` one
    /// list per face. Resolves to how many were taken.
    #[napi(ts_return_type = "Promise<number>")]
    pub fn refill<'env>(
        &self,
        env: &'env Env,
        k: u32,
        ids: Float64Array,
        vectors: Float32Array,
        galleries: Vec<Vec<String>>,
    ) -> Result<Object<'env>> {
        let ids = match ids.iter().map(|&id| whole("id", id)).collect::<std::result::Result<Vec<_>, _>>() {
            Ok(ids) => ids,
            Err(e) => return rejected::<f64, _>(env, e),
        };
        let vectors = vectors.to_vec();
        self.on_set(env, move |set| Ok(set.refill(k as usize, &ids, &vectors, &galleries)? as f64), |_env, n| Ok(n))
    }

    /// Applies logged changes to rebuilding shard `k` (changes of other shards, and positions
    /// it already reflects, are skipped). Resolves to how many were applied.
    #[napi(ts_return_type = "Promise<number>")]
    pub fn replay<'env>(&self, env: &'env Env, k: u32, changes: Vec<IndexChange>) -> Result<Object<'env>> {
        let changes = match owned_changes(changes) {
            Ok(c) => c,
            Err(e) => return rejected::<f64, _>(env, e),
        };
        self.on_set(env, move |set| Ok(set.replay(k as usize, changes)? as f64), |_env, n| Ok(n))
    }

    /// Declares rebuilding shard `k` current as of `position` (every change up to it has
    /// been refilled or replayed) and puts it back into search.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn finish_rebuild<'env>(&self, env: &'env Env, k: u32, position: f64) -> Result<Object<'env>> {
        let position = match whole("position", position) {
            Ok(p) => p,
            Err(e) => return rejected::<(), _>(env, e),
        };
        self.on_set(env, move |set| set.finish_rebuild(k as usize, position), |_env, ()| Ok(()))
    }

    /// Snapshots every live shard into the index folder, one after another. Resolves to one
    /// outcome per shard: the position saved, skipped (not live), or the error.
    #[napi(ts_return_type = "Promise<ShardSnapshot[]>")]
    pub fn snapshot<'env>(&self, env: &'env Env) -> Result<Object<'env>> {
        let dir = self.dir.clone();
        self.on_set(
            env,
            move |set| {
                Ok(set
                    .shard_ids()
                    .into_iter()
                    .zip(set.save_all(&dir))
                    .map(|(k, r)| {
                        let shard = k as u32;
                        match r {
                            Ok(p) => ShardSnapshot { shard, position: to_js_whole(p), error: None, missing: false, skipped: false },
                            Err(IndexError::WrongState { .. }) => ShardSnapshot { shard, position: 0.0, error: None, missing: false, skipped: true },
                            Err(e) => ShardSnapshot { shard, position: 0.0, error: Some(e.to_string()), missing: false, skipped: false },
                        }
                    })
                    .collect::<Vec<_>>())
            },
            |_env, r| Ok(r),
        )
    }

    /// Lowest change position every shard covers: replaying the log after it makes all current.
    #[napi]
    pub fn position(&self, env: Env) -> Result<f64> {
        let set = self.set().map_err(|e| js_error(&env, &e))?;
        Ok(set.replay_from() as f64)
    }

    /// Releases the shards once calls in flight finish; later calls reject.
    #[napi]
    pub fn close(&self) {
        if let Ok(mut s) = self.set.lock() {
            s.take();
        }
    }
}

impl FaceIndex {
    /// Runs `work` with the shards on their worker pool and settles the promise with its
    /// result; rejects at once when the index is closed.
    fn on_set<'env, R, T, W, F>(&self, env: &'env Env, work: W, to_js: F) -> Result<Object<'env>>
    where
        R: Send + 'static,
        T: ToNapiValue + 'static,
        W: FnOnce(&ShardSet) -> std::result::Result<R, IndexError> + Send + 'static,
        F: FnOnce(Env, R) -> Result<T> + Send + 'static,
    {
        let set = match self.set() {
            Ok(s) => s,
            Err(e) => return rejected::<T, _>(env, e),
        };
        let (pending, promise) = PendingPromise::new(env)?;
        let worker = set.clone();
        set.spawn(move || settle_in(pending, move || work(&worker), to_js));
        Ok(promise)
    }

    fn set(&self) -> std::result::Result<Arc<ShardSet>, IndexError> {
        self.set
            .lock()
            .map_err(|_| IndexError::Native("index lock poisoned".into()))?
            .clone()
            .ok_or_else(|| IndexError::Native("index is closed".into()))
    }
}
