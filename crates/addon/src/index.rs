//! Node.js bindings for `face-index`: the search shards.
//!
//! Arguments are copied into owned Rust values on the JavaScript thread; the work (applying
//! changes, searching, snapshotting) runs on a thread of its own and the promise settles back
//! on the JavaScript thread. Operator switches and the health report only touch atomics and
//! briefly held locks, so they are synchronous.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use face_index::{IndexError, Scalar, ShardSet, ShardSetOptions};
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
    /// Graph storage: "f32", "f16" or "i8".
    #[napi(ts_type = "\"f32\" | \"f16\" | \"i8\"")]
    pub scalar: String,
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
    /// Every gallery of the face, `default` included (upsert, galleries).
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
}

/// Partitioned nearest-neighbour search over face embeddings.
#[napi]
pub struct FaceIndex {
    set: Mutex<Option<Arc<ShardSet>>>,
    dir: PathBuf,
}

enum Op {
    Upsert { id: u64, vector: Vec<f32>, galleries: Vec<String> },
    Delete { id: u64 },
    Galleries { id: u64, galleries: Vec<String> },
}

fn whole(name: &str, v: f64) -> std::result::Result<u64, IndexError> {
    if v.is_finite() && v >= 0.0 && v <= MAX_SAFE && v.fract() == 0.0 {
        Ok(v as u64)
    } else {
        Err(IndexError::BadOption(format!("{name} must be a whole number between 0 and 2^53-1")))
    }
}

fn owned_changes(changes: Vec<IndexChange>) -> std::result::Result<Vec<(u64, Op)>, IndexError> {
    changes
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            let position = whole("position", c.position)?;
            let id = whole("id", c.id)?;
            let op = match c.op.as_str() {
                "upsert" => Op::Upsert {
                    id,
                    vector: c
                        .vector
                        .map(|v| v.to_vec())
                        .ok_or_else(|| IndexError::BadOption(format!("change {i}: upsert needs a vector")))?,
                    galleries: c.galleries.unwrap_or_default(),
                },
                "delete" => Op::Delete { id },
                "galleries" => Op::Galleries { id, galleries: c.galleries.unwrap_or_default() },
                other => return Err(IndexError::BadOption(format!("change {i}: unknown op {other:?}"))),
            };
            Ok((position, op))
        })
        .collect()
}

/// Runs `work` on a thread of its own and settles the promise with its result.
fn off_thread<'env, R, T, W, F>(env: &'env Env, name: &str, work: W, to_js: F) -> Result<Object<'env>>
where
    R: Send + 'static,
    T: ToNapiValue + 'static,
    W: FnOnce() -> std::result::Result<R, IndexError> + Send + 'static,
    F: FnOnce(Env, R) -> Result<T> + Send + 'static,
{
    let (pending, promise) = PendingPromise::new(env)?;
    let in_thread = pending.clone();
    let spawned = std::thread::Builder::new().name(name.into()).spawn(move || {
        let result = catch_unwind(AssertUnwindSafe(work))
            .unwrap_or_else(|_| Err(IndexError::Native("panic in the index".into())));
        in_thread.settle(result, to_js);
    });
    if let Err(e) = spawned {
        pending.reject(IndexError::Native(format!("cannot start index thread: {e}")));
    }
    Ok(promise)
}

#[napi]
impl FaceIndex {
    /// Creates the shards and loads each from its snapshot in `dir`. A shard without a usable
    /// snapshot starts empty at position 0 and is filled by replaying the change log.
    #[napi(ts_return_type = "Promise<FaceIndex>")]
    pub fn open<'env>(env: &'env Env, opts: IndexOptions) -> Result<Object<'env>> {
        let dir = PathBuf::from(&opts.dir);
        let prepared = (|| -> std::result::Result<ShardSetOptions, IndexError> {
            let mut o = ShardSetOptions::new(opts.dims as usize);
            o.shards = opts.shards as usize;
            o.scalar = opts.scalar.parse::<Scalar>()?;
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
                // A failed load leaves the shard empty and rebuilding; the change log refills it.
                let _ = set.load_all(&in_thread);
                for k in set.needs_rebuild() {
                    set.begin_rebuild(k)?;
                    set.finish_rebuild(k, 0)?;
                }
                Ok(set)
            },
            move |_env, set| Ok(FaceIndex { set: Mutex::new(Some(Arc::new(set))), dir }),
        )
    }

    /// Applies changes in the given order; each must carry a higher position than the last
    /// one its shard saw (lower ones are replays and are ignored). Every position up to the
    /// last one given counts as offered: the caller feeds a gap-free log.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn apply<'env>(&self, env: &'env Env, changes: Vec<IndexChange>) -> Result<Object<'env>> {
        let prepared = self.set().and_then(|set| Ok((set, owned_changes(changes)?)));
        let (set, changes) = match prepared {
            Ok(p) => p,
            Err(e) => return rejected::<(), _>(env, e),
        };
        off_thread(
            env,
            "face-index-apply",
            move || {
                let mut last = None;
                for (position, op) in changes {
                    match op {
                        Op::Upsert { id, vector, galleries } => set.upsert(id, &vector, &galleries, position)?,
                        Op::Delete { id } => set.remove(id, position)?,
                        Op::Galleries { id, galleries } => set.set_galleries(id, &galleries, position)?,
                    };
                    last = Some(position);
                }
                if let Some(p) = last {
                    set.advance_to(p);
                }
                Ok(())
            },
            |_env, ()| Ok(()),
        )
    }

    /// Top `n` faces by cosine similarity over the live shards, optionally only in `gallery`.
    #[napi(ts_return_type = "Promise<IndexSearchResult>")]
    pub fn search<'env>(&self, env: &'env Env, query: Float32Array, n: u32, gallery: Option<String>) -> Result<Object<'env>> {
        let set = match self.set() {
            Ok(s) => s,
            Err(e) => return rejected::<IndexSearchResult, _>(env, e),
        };
        let query = query.to_vec();
        off_thread(
            env,
            "face-index-search",
            move || {
                let total = set.shard_count() as u32;
                let r = set.search(&query, n as usize, gallery.as_deref())?;
                Ok(IndexSearchResult {
                    matches: r.hits.iter().map(|h| IndexMatch { id: h.id as f64, similarity: h.similarity as f64 }).collect(),
                    live: r.searched.len() as u32,
                    total,
                    missing: r.skipped.iter().map(|s| s.shard as u32).collect(),
                })
            },
            |_env, r| Ok(r),
        )
    }

    /// Per-shard state, size, position and snapshot age.
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
            })
            .collect())
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

    /// Snapshots every live shard into the index folder; resolves to the lowest position the
    /// saved snapshots cover. Shards that are not live are skipped.
    #[napi(ts_return_type = "Promise<number>")]
    pub fn snapshot<'env>(&self, env: &'env Env) -> Result<Object<'env>> {
        let set = match self.set() {
            Ok(s) => s,
            Err(e) => return rejected::<f64, _>(env, e),
        };
        let dir = self.dir.clone();
        off_thread(
            env,
            "face-index-save",
            move || {
                let mut lowest: Option<u64> = None;
                for r in set.save_all(&dir) {
                    match r {
                        Ok(p) => lowest = Some(lowest.map_or(p, |l| l.min(p))),
                        Err(IndexError::WrongState { .. }) => {}
                        Err(e) => return Err(e),
                    }
                }
                Ok(lowest.unwrap_or(0) as f64)
            },
            |_env, p| Ok(p),
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
    fn set(&self) -> std::result::Result<Arc<ShardSet>, IndexError> {
        self.set
            .lock()
            .map_err(|_| IndexError::Native("index lock poisoned".into()))?
            .clone()
            .ok_or_else(|| IndexError::Native("index is closed".into()))
    }
}
