//! One shard: a usearch graph, its gallery table, optional exact vectors, and the change
//! position its contents reflect.
//!
//! Locking: `data` is a RwLock so searches share it while updates, which touch the graph,
//! the gallery table and the position together, take it exclusively for one change at a
//! time. The lifecycle lives in an atomic beside the lock so searches and health checks can
//! skip a shard that is not serving without queueing behind a long write; it only changes
//! while the write lock is held, so writers always see it consistent with `data`.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, SystemTime};

use usearch::{Index, IndexOptions, MetricKind};

use crate::error::{IndexError, Result};
use crate::exact::ExactStore;
use crate::membership::Membership;
use crate::options::{Scalar, ShardSetOptions};
use crate::snapshot;

/// Reported state of a shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ShardState {
    /// Reading a snapshot; updates are buffered.
    Loading,
    /// Empty or being refilled from the database; updates are buffered until
    /// `finish_rebuild`. Every shard starts here.
    Rebuilding,
    /// Serving searches and applying updates.
    Live,
    /// An update failed half-way, so contents are untrustworthy; updates are buffered and
    /// the shard must be rebuilt (`begin_rebuild`).
    Failed,
    /// Taken out of search by an operator; still applies updates so it is current when
    /// brought back.
    Offline,
}

impl ShardState {
    pub fn as_str(self) -> &'static str {
        match self {
            ShardState::Loading => "loading",
            ShardState::Rebuilding => "rebuilding",
            ShardState::Live => "live",
            ShardState::Failed => "failed",
            ShardState::Offline => "offline",
        }
    }
}

const LOADING: u8 = 0;
const REBUILDING: u8 = 1;
const LIVE: u8 = 2;
const FAILED: u8 = 3;

fn lifecycle_state(v: u8) -> ShardState {
    match v {
        LOADING => ShardState::Loading,
        REBUILDING => ShardState::Rebuilding,
        LIVE => ShardState::Live,
        _ => ShardState::Failed,
    }
}

/// What happened to one positioned change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Applied,
    /// The position is at or below what the shard already reflects (replay): ignored.
    Stale,
    /// The face is not in the shard (remove / set_galleries); the position still advances.
    Missing,
    /// The shard is loading, rebuilding or failed: the change is buffered and applied when
    /// the shard becomes live, unless the snapshot or rebuild already covers its position.
    Deferred,
}

/// One search result.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hit {
    pub id: u64,
    /// Cosine similarity in [-1, 1]; exact f32 when re-ranked or when the index is f32.
    pub similarity: f32,
    pub shard: u32,
}

/// A shard's line in the health report.
#[derive(Debug, Clone)]
pub struct ShardHealth {
    pub shard: usize,
    pub state: ShardState,
    /// Faces in the shard.
    pub size: usize,
    /// Graph (usearch `memory_usage`) plus gallery table plus exact vectors, in bytes.
    pub memory_bytes: usize,
    /// Change position the contents reflect (0: none).
    pub position: u64,
    /// Changes buffered while not live.
    pub pending: usize,
    /// Position covered by the last snapshot saved or loaded.
    pub snapshot_position: Option<u64>,
    pub snapshot_age: Option<Duration>,
}

/// Memory of the usearch graphs. usearch grows its arenas in power-of-two blocks, so
/// `allocated` can be up to twice `used` right after a growth step; untouched reserve is
/// mostly not resident, so process RSS tracks `used` more closely.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IndexMemory {
    pub allocated: usize,
    pub used: usize,
}

#[derive(Clone)]
pub(crate) enum Change {
    Upsert {
        id: u64,
        vector: Box<[f32]>,
        galleries: Vec<String>,
    },
    Remove {
        id: u64,
    },
    SetGalleries {
        id: u64,
        galleries: Vec<String>,
    },
}

struct Data {
    index: Index,
    members: Membership,
    exact: Option<ExactStore>,
    position: u64,
    /// (position, change) in arrival order, which is commit order.
    pending: Vec<(u64, Change)>,
}

pub(crate) struct Shard {
    pub k: usize,
    lifecycle: AtomicU8,
    offline: AtomicBool,
    data: RwLock<Data>,
    snapshot: Mutex<Option<(u64, SystemTime)>>,
}

/// Per-search scratch contexts usearch must have reserved: one per concurrent search plus
/// one for the (exclusive) writer.
fn contexts(o: &ShardSetOptions) -> usize {
    o.max_concurrent_searches + 1
}

fn new_index(o: &ShardSetOptions) -> Result<Index> {
    let index = Index::new(&IndexOptions {
        dimensions: o.dims,
        // Embeddings are unit length, so the inner product is their cosine. It skips the two
        // norms cosine recomputes for every candidate: on 1024-d f16 the graph builds 1.9x and
        // searches 1.2-1.3x faster at the same recall (examples/bench.rs, 20k, --near 1.0).
        // f16 rounding moves norms by about 1e-4, and candidates are re-scored exactly in f32.
        // i8 stays cosine: usearch rescales each vector into the i8 range, so norms are not kept.
        metric: match o.scalar {
            Scalar::I8 => MetricKind::Cos,
            Scalar::F16 | Scalar::F32 => MetricKind::IP,
        },
        quantization: o.scalar.to_usearch(),
        connectivity: o.connectivity,
        expansion_add: o.expansion_add,
        expansion_search: o.expansion_search,
        multi: false,
    })
    .map_err(IndexError::native)?;
    index
        .reserve_capacity_and_threads(1024, contexts(o))
        .map_err(IndexError::native)?;
    Ok(index)
}

fn empty_data(o: &ShardSetOptions, pending: Vec<(u64, Change)>) -> Result<Data> {
    Ok(Data {
        index: new_index(o)?,
        members: Membership::default(),
        exact: o.reranks().then(|| ExactStore::new(o.dims)),
        position: 0,
        pending,
    })
}

fn ensure_capacity(index: &Index, o: &ShardSetOptions) -> Result<()> {
    let cap = index.capacity();
    if index.size() + 1 > cap {
        let grown = (cap + cap / 2).max(cap + 1024);
        index
            .reserve_capacity_and_threads(grown, contexts(o))
            .map_err(IndexError::native)?;
    }
    Ok(())
}

fn apply(d: &mut Data, change: &Change, o: &ShardSetOptions) -> Result<Outcome> {
    match change {
        Change::Upsert {
            id,
            vector,
            galleries,
        } => {
            // usearch refuses duplicate keys, so an update is remove + add.
            if d.index.contains(*id) {
                d.index.remove(*id).map_err(IndexError::native)?;
            }
            ensure_capacity(&d.index, o)?;
            d.index.add(*id, &vector[..]).map_err(IndexError::native)?;
            if let Some(x) = d.exact.as_mut() {
                x.put(*id, vector);
            }
            d.members.set(*id, &galleries[..]);
            Ok(Outcome::Applied)
        }
        Change::Remove { id } => {
            let removed = d.index.remove(*id).map_err(IndexError::native)?;
            if let Some(x) = d.exact.as_mut() {
                x.remove(*id);
            }
            d.members.clear(*id);
            Ok(if removed > 0 {
                Outcome::Applied
            } else {
                Outcome::Missing
            })
        }
        Change::SetGalleries { id, galleries } => {
            if !d.index.contains(*id) {
                return Ok(Outcome::Missing);
            }
            d.members.set(*id, &galleries[..]);
            Ok(Outcome::Applied)
        }
    }
}

pub(crate) type SimilarityFn = dyn Fn(&[f32], &[f32]) -> f32 + Send + Sync;

impl Shard {
    pub fn new(k: usize, o: &ShardSetOptions) -> Result<Shard> {
        Ok(Shard {
            k,
            lifecycle: AtomicU8::new(REBUILDING),
            offline: AtomicBool::new(false),
            data: RwLock::new(empty_data(o, Vec::new())?),
            snapshot: Mutex::new(None),
        })
    }

    // A panic while holding the lock (only possible from a bug) must not take the whole
    // index down with poisoning; the lifecycle flag is what guards consistency.
    fn read(&self) -> RwLockReadGuard<'_, Data> {
        self.data.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Data> {
        self.data.write().unwrap_or_else(|e| e.into_inner())
    }

    fn lifecycle(&self) -> u8 {
        self.lifecycle.load(Ordering::Acquire)
    }

    fn set_lifecycle(&self, v: u8) {
        self.lifecycle.store(v, Ordering::Release);
    }

    fn wrong_state(&self) -> IndexError {
        IndexError::WrongState {
            shard: self.k,
            state: self.state().as_str(),
        }
    }

    pub fn state(&self) -> ShardState {
        let l = self.lifecycle();
        if l == LIVE && self.offline.load(Ordering::Acquire) {
            ShardState::Offline
        } else {
            lifecycle_state(l)
        }
    }

    pub fn searchable(&self) -> bool {
        self.lifecycle() == LIVE && !self.offline.load(Ordering::Acquire)
    }

    pub fn set_offline(&self, offline: bool) {
        self.offline.store(offline, Ordering::Release);
    }

    pub fn position(&self) -> u64 {
        self.read().position
    }

    pub fn contains(&self, id: u64) -> bool {
        self.read().index.contains(id)
    }

    pub fn galleries_of(&self, id: u64) -> Vec<String> {
        self.read()
            .members
            .galleries_of(id)
            .into_iter()
            .map(str::to_owned)
            .collect()
    }

    /// Applies a change in commit order; see [`Outcome`].
    pub fn apply_positioned(
        &self,
        change: Change,
        position: u64,
        o: &ShardSetOptions,
    ) -> Result<Outcome> {
        let mut d = self.write();
        if self.lifecycle() != LIVE {
            d.pending.push((position, change));
            return Ok(Outcome::Deferred);
        }
        if position <= d.position {
            return Ok(Outcome::Stale);
        }
        match apply(&mut d, &change, o) {
            Ok(outcome) => {
                d.position = position;
                Ok(outcome)
            }
            Err(e) => {
                // The graph may now lack a face it should have; stop serving it and keep
                // the change so a rebuild that predates it still ends up current.
                self.set_lifecycle(FAILED);
                d.pending.push((position, change));
                Err(e)
            }
        }
    }

    /// Records that every change up to `position` has been offered to this shard, so a
    /// shard that owns none of the recent faces does not hold the replay point back. Only
    /// a live shard advances: one that is buffering must still see its pending changes.
    pub fn advance_to(&self, position: u64) {
        let mut d = self.write();
        if self.lifecycle() == LIVE && d.pending.is_empty() && position > d.position {
            d.position = position;
        }
    }

    /// Empties the shard for a refill from the database, keeping buffered changes.
    pub fn begin_rebuild(&self, o: &ShardSetOptions) -> Result<()> {
        let mut d = self.write();
        if self.lifecycle() == LOADING {
            return Err(self.wrong_state());
        }
        let pending = std::mem::take(&mut d.pending);
        *d = empty_data(o, pending)?;
        self.set_lifecycle(REBUILDING);
        Ok(())
    }

    /// Adds one face scanned from the database; false (and nothing done) unless rebuilding.
    pub fn rebuild_upsert(
        &self,
        id: u64,
        vector: Box<[f32]>,
        galleries: Vec<String>,
        o: &ShardSetOptions,
    ) -> Result<bool> {
        let mut d = self.write();
        if self.lifecycle() != REBUILDING {
            return Ok(false);
        }
        apply(
            &mut d,
            &Change::Upsert {
                id,
                vector,
                galleries,
            },
            o,
        )
        .map(|_| true)
        .inspect_err(|_| {
            self.set_lifecycle(FAILED);
        })
    }

    /// Marks the refill as reflecting every change up to `position`, applies buffered
    /// changes after it, and goes live.
    pub fn finish_rebuild(&self, position: u64, o: &ShardSetOptions) -> Result<()> {
        let mut d = self.write();
        if self.lifecycle() != REBUILDING {
            return Err(self.wrong_state());
        }
        d.position = position;
        self.drain_pending(&mut d, o)?;
        self.set_lifecycle(LIVE);
        Ok(())
    }

    fn drain_pending(&self, d: &mut Data, o: &ShardSetOptions) -> Result<()> {
        let mut pending = std::mem::take(&mut d.pending);
        // Arrival order is commit order already; the stable sort only guards a caller that
        // interleaves two feeds.
        pending.sort_by_key(|(p, _)| *p);
        let mut rest = pending.into_iter();
        while let Some((p, c)) = rest.next() {
            if p <= d.position {
                continue;
            }
            if let Err(e) = apply(d, &c, o) {
                self.set_lifecycle(FAILED);
                d.pending.push((p, c));
                d.pending.extend(rest);
                return Err(e);
            }
            d.position = p;
        }
        Ok(())
    }

    /// Writes a snapshot; returns the position it covers. Updates to this shard wait for
    /// it (the read lock keeps graph, table and position consistent); searches do not.
    pub fn save(&self, dir: &Path, shards: usize, o: &ShardSetOptions) -> Result<u64> {
        let d = self.read();
        if self.lifecycle() != LIVE {
            return Err(self.wrong_state());
        }
        let header = snapshot::Header {
            shard: self.k,
            shards,
            dims: o.dims,
            scalar: o.scalar,
            position: d.position,
            written_at: SystemTime::now(),
            faces: d.index.size() as u64,
        };
        snapshot::write(dir, &header, &d.members, d.exact.as_ref(), |p| {
            d.index.save(snapshot::utf8(p)?).map_err(IndexError::native)
        })?;
        *self.snapshot.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((header.position, header.written_at));
        Ok(header.position)
    }

    /// Replaces the contents with a snapshot. Only for a shard that is not serving
    /// (rebuilding or failed): a live shard may have applied changes newer than the snapshot.
    /// On any error the shard is left empty and rebuilding, with its buffered changes.
    pub fn load(&self, dir: &Path, shards: usize, o: &ShardSetOptions) -> Result<u64> {
        {
            let _d = self.write();
            match self.lifecycle() {
                REBUILDING | FAILED => self.set_lifecycle(LOADING),
                _ => return Err(self.wrong_state()),
            }
        }
        // The heavy part runs without the lock so buffered updates keep flowing in.
        let loaded = self.read_snapshot(dir, shards, o);
        let mut d = self.write();
        match loaded {
            Ok((index, sidecar)) => {
                d.index = index;
                d.members = sidecar.membership;
                d.exact = if o.reranks() { sidecar.exact } else { None };
                d.position = sidecar.header.position;
                *self.snapshot.lock().unwrap_or_else(|e| e.into_inner()) =
                    Some((sidecar.header.position, sidecar.header.written_at));
                self.drain_pending(&mut d, o)?;
                self.set_lifecycle(LIVE);
                Ok(sidecar.header.position)
            }
            Err(e) => {
                let pending = std::mem::take(&mut d.pending);
                *d = empty_data(o, pending)?;
                self.set_lifecycle(REBUILDING);
                Err(e)
            }
        }
    }

    fn read_snapshot(
        &self,
        dir: &Path,
        shards: usize,
        o: &ShardSetOptions,
    ) -> Result<(Index, snapshot::Sidecar)> {
        let sidecar = snapshot::read(dir, self.k, shards, o.dims, o.scalar)?;
        let graph = snapshot::graph_path(dir, self.k);
        let bad = |reason: String| IndexError::Snapshot {
            shard: self.k,
            path: graph.clone(),
            reason,
        };
        if o.reranks() && sidecar.exact.is_none() {
            return Err(bad(
                "written without exact vectors, which re-ranking needs".into()
            ));
        }
        let index = new_index(o)?;
        index
            .load(snapshot::utf8(&graph)?)
            .map_err(|e| bad(e.to_string()))?;
        if index.dimensions() != o.dims || index.scalar_kind() != o.scalar.to_usearch() {
            return Err(bad(
                "graph dimensions or scalar kind differ from the sidecar".into(),
            ));
        }
        if index.size() as u64 != sidecar.header.faces {
            return Err(bad(format!(
                "graph holds {} faces, sidecar says {}",
                index.size(),
                sidecar.header.faces
            )));
        }
        let cap = index.size() + index.size() / 8 + 1024;
        index
            .reserve_capacity_and_threads(cap, contexts(o))
            .map_err(IndexError::native)?;
        Ok((index, sidecar))
    }

    pub fn health(&self) -> ShardHealth {
        let state = self.state();
        let snap = *self.snapshot.lock().unwrap_or_else(|e| e.into_inner());
        let d = self.read();
        ShardHealth {
            shard: self.k,
            state,
            size: d.index.size(),
            memory_bytes: d.index.memory_usage()
                + d.members.heap_bytes()
                + d.exact.as_ref().map_or(0, ExactStore::heap_bytes),
            position: d.position,
            pending: d.pending.len(),
            snapshot_position: snap.map(|s| s.0),
            snapshot_age: snap.map(|s| SystemTime::now().duration_since(s.1).unwrap_or_default()),
        }
    }

    pub fn hardware_acceleration(&self) -> String {
        self.read().index.hardware_acceleration()
    }

    pub fn len(&self) -> usize {
        self.read().index.size()
    }

    pub fn index_memory(&self) -> IndexMemory {
        let m = self.read().index.memory_stats();
        IndexMemory {
            allocated: m.graph_allocated + m.vectors_allocated,
            used: (m.graph_allocated - m.graph_reserved - m.graph_wasted)
                + (m.vectors_allocated - m.vectors_reserved - m.vectors_wasted),
        }
    }

    /// Top `n` of this shard for a normalised query, best first.
    pub fn search(
        &self,
        query: &[f32],
        n: usize,
        gallery: Option<&str>,
        o: &ShardSetOptions,
        sim: &SimilarityFn,
    ) -> Result<Vec<Hit>> {
        let d = self.read();
        let shard = self.k as u32;
        let gid = match gallery {
            None => None,
            Some(name) => match d.members.gallery(name) {
                Some(g) if d.members.count(g) > 0 => Some(g),
                _ => return Ok(Vec::new()),
            },
        };

        if let Some(g) = gid.filter(|&g| d.members.count(g) <= o.exact_scan_below) {
            let mut buf = vec![0f32; o.dims];
            let mut hits = Vec::with_capacity(d.members.count(g));
            for id in d.members.members(g) {
                let v = match d.exact.as_ref().and_then(|x| x.get(id)) {
                    Some(v) => v,
                    None => {
                        // Without exact copies this is the stored (possibly quantised) vector.
                        if d.index.get(id, &mut buf[..]).map_err(IndexError::native)? == 0 {
                            continue;
                        }
                        &buf[..]
                    }
                };
                hits.push(Hit {
                    id,
                    similarity: sim(query, v),
                    shard,
                });
            }
            sort_hits(&mut hits);
            hits.truncate(n);
            return Ok(hits);
        }

        let rerank = d.exact.is_some();
        let want = if rerank {
            n.saturating_mul(o.oversample)
        } else {
            n
        };
        let matches = match gid {
            None => d.index.search(query, want),
            // The predicate runs inside the graph walk, so non-members are stepped through
            // but never fill result slots: the walk keeps going until `want` members are
            // found or the graph is exhausted, rather than filtering a fixed top-k afterwards.
            Some(g) => d
                .index
                .filtered_search(query, want, |key| d.members.contains(g, key)),
        }
        .map_err(IndexError::native)?;

        let mut hits: Vec<Hit> = match d.exact.as_ref() {
            Some(x) => matches
                .keys
                .iter()
                .filter_map(|&id| {
                    x.get(id).map(|v| Hit {
                        id,
                        similarity: sim(query, v),
                        shard,
                    })
                })
                .collect(),
            None => matches
                .keys
                .iter()
                .zip(&matches.distances)
                .map(|(&id, &dist)| Hit {
                    id,
                    similarity: 1.0 - dist,
                    shard,
                })
                .collect(),
        };
        sort_hits(&mut hits);
        hits.truncate(n);
        Ok(hits)
    }
}

/// Best first; ties by id so results are deterministic across runs and shard orders.
pub(crate) fn sort_hits(hits: &mut [Hit]) {
    hits.sort_unstable_by(|a, b| b.similarity.total_cmp(&a.similarity).then(a.id.cmp(&b.id)));
}
