//! One shard: its faces (a usearch graph with optional exact vectors, or a scan store), its
//! gallery table, and the change position its contents reflect.
//!
//! Locking: `data` is a RwLock so searches share it while updates, which touch the graph,
//! the gallery table and the position together, take it exclusively for one change at a
//! time. The lifecycle lives in an atomic beside the lock so searches and health checks can
//! skip a shard that is not serving without queueing behind a long write; it only changes
//! while the write lock is held, so writers always see it consistent with `data`.
//!
//! What health reports (position, size, buffered changes, memory) is also published into
//! atomics at the end of every locked write, so the service's event loop reads it without
//! ever queueing behind a writer that is regrowing the graph or draining its buffer.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, SystemTime};

use usearch::{Index, IndexOptions, MetricKind};

use crate::error::{IndexError, Result};
use crate::exact::ExactStore;
use crate::membership::Membership;
use crate::options::{IndexKind, Scalar, ShardSetOptions};
use crate::scan::{ScanQuery, ScanStore};
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
    /// Graph (usearch `memory_usage`) plus gallery table plus exact vectors, in bytes, as
    /// measured at the last snapshot, load or refill and scaled by the faces since.
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

/// Where a shard's vectors live, by [`IndexKind`].
enum Store {
    Graph {
        index: Index,
        exact: Option<ExactStore>,
    },
    Scan(ScanStore),
}

impl Store {
    fn len(&self) -> usize {
        match self {
            Store::Graph { index, .. } => index.size(),
            Store::Scan(s) => s.len(),
        }
    }

    fn contains(&self, id: u64) -> bool {
        match self {
            Store::Graph { index, .. } => index.contains(id),
            Store::Scan(s) => s.contains(id),
        }
    }

    /// Heap bytes (for the graph: usearch's own figure, a walk over every node).
    fn memory(&self) -> usize {
        match self {
            Store::Graph { index, exact } => index.memory_usage() + exact.as_ref().map_or(0, ExactStore::heap_bytes),
            Store::Scan(s) => s.heap_bytes(),
        }
    }

    fn upsert(&mut self, id: u64, vector: &[f32], o: &ShardSetOptions) -> Result<()> {
        match self {
            Store::Graph { index, exact } => {
                // usearch refuses duplicate keys, so an update is remove + add.
                if index.contains(id) {
                    index.remove(id).map_err(IndexError::native)?;
                }
                ensure_capacity(index, o)?;
                index.add(id, vector).map_err(IndexError::native)?;
                if let Some(x) = exact.as_mut() {
                    x.put(id, vector);
                }
            }
            Store::Scan(s) => s.put(id, vector),
        }
        Ok(())
    }

    fn remove(&mut self, id: u64) -> Result<bool> {
        match self {
            Store::Graph { index, exact } => {
                let removed = index.remove(id).map_err(IndexError::native)?;
                if let Some(x) = exact.as_mut() {
                    x.remove(id);
                }
                Ok(removed > 0)
            }
            Store::Scan(s) => Ok(s.remove(id)),
        }
    }
}

struct Data {
    store: Store,
    members: Membership,
    position: u64,
    /// (position, change) in arrival order, which is commit order.
    pending: Vec<(u64, Change)>,
}

/// The health figures of a shard, published by writers (under the write lock) and read
/// without it.
#[derive(Default)]
struct Published {
    position: AtomicU64,
    size: AtomicUsize,
    pending: AtomicUsize,
    /// Memory measured at the last snapshot, load or refill, and the face count it was
    /// measured at: usearch's own figure walks every node, so it is not taken per write.
    memory: AtomicUsize,
    memory_faces: AtomicUsize,
}

pub(crate) struct Shard {
    pub k: usize,
    lifecycle: AtomicU8,
    offline: AtomicBool,
    data: RwLock<Data>,
    published: Published,
    /// Highest position dropped from a full buffer (0: none). The shard cannot go live at
    /// an earlier position: the change log must be replayed past it first.
    dropped_through: AtomicU64,
    snapshot: Mutex<Option<(u64, SystemTime)>>,
}

/// How many faces a scan reads, per face scored exactly, for the same time: one exact score
/// (a member's f16 vector found by id, then a dot product; about 170 ns on one thread, cold,
/// 10k-100k members of 1M faces) costs about as much as reading 30-60 codes in a gallery-
/// filtered scan (3-6 ns a code). Checked end to end by `npm run bench:tenants`
/// (bench/RESULTS.md, "Tenants").
const SCAN_CODES_PER_MEMBER: usize = 32;

/// Whether a search of gallery `g` scores its members one by one rather than walking the
/// graph or scanning the shard: always for a gallery of at most `exact_scan_below` faces;
/// on a scan store also for one that is a small share of the shard (a tenant among many),
/// where reading every code of the shard to keep a few would cost more.
fn scores_members(d: &Data, g: u32, o: &ShardSetOptions) -> bool {
    let count = d.members.count(g);
    count <= o.exact_scan_below || (matches!(d.store, Store::Scan(_)) && count.saturating_mul(SCAN_CODES_PER_MEMBER) <= d.store.len())
}

/// Scratch contexts usearch must have reserved per shard: one per pool thread (searches,
/// or a refill's workers, never both at once on one shard) plus one for a writer.
fn contexts(o: &ShardSetOptions) -> usize {
    o.threads + 1
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

fn empty_store(o: &ShardSetOptions) -> Result<Store> {
    Ok(match o.kind {
        IndexKind::Scan | IndexKind::Auto => Store::Scan(ScanStore::new(o.dims)),
        IndexKind::Hnsw => Store::Graph {
            index: new_index(o)?,
            exact: o.reranks().then(|| ExactStore::new(o.dims)),
        },
    })
}

fn empty_data(o: &ShardSetOptions, pending: Vec<(u64, Change)>) -> Result<Data> {
    Ok(Data {
        store: empty_store(o)?,
        members: Membership::default(),
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
            d.store.upsert(*id, vector, o)?;
            d.members.set(*id, &galleries[..]);
            Ok(Outcome::Applied)
        }
        Change::Remove { id } => {
            let removed = d.store.remove(*id)?;
            d.members.clear(*id);
            Ok(if removed {
                Outcome::Applied
            } else {
                Outcome::Missing
            })
        }
        Change::SetGalleries { id, galleries } => {
            if !d.store.contains(*id) {
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
            published: Published::default(),
            dropped_through: AtomicU64::new(0),
            snapshot: Mutex::new(None),
        })
    }

    /// Publishes the cheap health figures; every writer calls it before unlocking.
    fn publish(&self, d: &Data) {
        let p = &self.published;
        p.position.store(d.position, Ordering::Release);
        p.size.store(d.store.len(), Ordering::Release);
        p.pending.store(d.pending.len(), Ordering::Release);
    }

    /// Publishes the figures and measures memory (a walk over every node: only after work
    /// that is itself proportional to the shard, i.e. a snapshot, load or refill).
    fn publish_measured(&self, d: &Data) {
        self.publish(d);
        let bytes = d.store.memory() + d.members.heap_bytes();
        self.published.memory.store(bytes, Ordering::Release);
        self.published
            .memory_faces
            .store(d.store.len(), Ordering::Release);
    }

    /// Buffers a change for a shard that is not live, within `max_pending`.
    fn defer(&self, d: &mut Data, position: u64, change: Change, o: &ShardSetOptions) {
        if d.pending.len() >= o.max_pending {
            let last = d.pending.last().map_or(0, |(p, _)| *p).max(position);
            self.dropped_through.fetch_max(last, Ordering::AcqRel);
            d.pending = Vec::new();
            return;
        }
        if self.dropped_through.load(Ordering::Acquire) > 0 {
            // Already behind the log: buffering the rest would not make the shard whole.
            self.dropped_through.fetch_max(position, Ordering::AcqRel);
            return;
        }
        d.pending.push((position, change));
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

    /// Change position the contents reflect (published; never waits for a writer).
    pub fn position(&self) -> u64 {
        self.published.position.load(Ordering::Acquire)
    }

    pub fn contains(&self, id: u64) -> bool {
        self.read().store.contains(id)
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
        let outcome = if self.lifecycle() != LIVE {
            self.defer(&mut d, position, change, o);
            Ok(Outcome::Deferred)
        } else if position <= d.position {
            Ok(Outcome::Stale)
        } else {
            match apply(&mut d, &change, o) {
                Ok(outcome) => {
                    d.position = position;
                    Ok(outcome)
                }
                Err(e) => {
                    // The graph may now lack a face it should have; stop serving it and
                    // keep the change so a rebuild that predates it still ends up current.
                    self.set_lifecycle(FAILED);
                    self.defer(&mut d, position, change, o);
                    Err(e)
                }
            }
        };
        self.publish(&d);
        outcome
    }

    /// Applies a change from the change log to a shard being caught up (rebuilding, not
    /// serving) if it is newer than what the shard holds; see [`crate::ShardSet::replay`].
    pub fn replay(&self, change: Change, position: u64, o: &ShardSetOptions) -> Result<Outcome> {
        let mut d = self.write();
        if self.lifecycle() != REBUILDING {
            return Err(self.wrong_state());
        }
        if position <= d.position {
            return Ok(Outcome::Stale);
        }
        let outcome = apply(&mut d, &change, o).inspect_err(|_| self.set_lifecycle(FAILED));
        if outcome.is_ok() {
            d.position = position;
        }
        self.publish(&d);
        outcome
    }

    /// Takes the shard out of search as failed, to be rebuilt. Its contents stay until the
    /// rebuild replaces them.
    pub fn mark_failed(&self) -> Result<()> {
        let _d = self.write();
        if self.lifecycle() == LOADING {
            return Err(self.wrong_state());
        }
        self.set_lifecycle(FAILED);
        Ok(())
    }

    /// Records that every change up to `position` has been offered to this shard, so a
    /// shard that owns none of the recent faces does not hold the replay point back. Only
    /// a live shard advances: one that is buffering must still see its pending changes.
    pub fn advance_to(&self, position: u64) {
        let mut d = self.write();
        if self.lifecycle() == LIVE && d.pending.is_empty() && position > d.position {
            d.position = position;
            self.publish(&d);
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
        self.publish_measured(&d);
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
        let taken = apply(
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
        });
        self.publish(&d);
        taken
    }

    /// [`Shard::rebuild_upsert`] for many faces at once: capacity is reserved once and the
    /// graph inserts run on `o.threads` workers (usearch inserts are thread-safe, each in a
    /// scratch context of its own). The write lock is held throughout, so no search meets
    /// the half-built graph; the workers are plain scoped threads, not pool threads, so
    /// they cannot pick up pool work that waits for this very lock. Ids must be distinct.
    /// Returns how many faces were taken (0 unless rebuilding).
    pub fn rebuild_bulk(
        &self,
        rows: Vec<(u64, Box<[f32]>, Vec<String>)>,
        o: &ShardSetOptions,
    ) -> Result<usize> {
        let mut d = self.write();
        if self.lifecycle() != REBUILDING || rows.is_empty() {
            return Ok(0);
        }
        let d = &mut *d;
        let result = (|| -> Result<usize> {
            let (index, exact) = match &mut d.store {
                Store::Graph { index, exact } => (index, exact),
                Store::Scan(s) => {
                    s.reserve(rows.len());
                    for (id, v, galleries) in &rows {
                        s.put(*id, v);
                        d.members.set(*id, &galleries[..]);
                    }
                    return Ok(rows.len());
                }
            };
            for (id, _, _) in &rows {
                if index.contains(*id) {
                    index.remove(*id).map_err(IndexError::native)?;
                }
            }
            let need = index.size() + rows.len();
            if need > index.capacity() {
                index
                    .reserve_capacity_and_threads(need + need / 8, contexts(o))
                    .map_err(IndexError::native)?;
            }
            let workers = o.threads.clamp(1, rows.len());
            let chunk = rows.len().div_ceil(workers);
            let index = &*index;
            std::thread::scope(|scope| {
                let handles: Vec<_> = rows
                    .chunks(chunk)
                    .map(|part| {
                        scope.spawn(move || -> Result<()> {
                            for (id, v, _) in part {
                                index.add(*id, &v[..]).map_err(IndexError::native)?;
                            }
                            Ok(())
                        })
                    })
                    .collect();
                for h in handles {
                    h.join().unwrap_or_else(|_| {
                        Err(IndexError::Native("refill worker panicked".into()))
                    })?;
                }
                Ok::<(), IndexError>(())
            })?;
            if let Some(x) = exact.as_mut() {
                x.reserve(rows.len());
            }
            for (id, v, galleries) in &rows {
                if let Some(x) = exact.as_mut() {
                    x.put(*id, v);
                }
                d.members.set(*id, &galleries[..]);
            }
            Ok(rows.len())
        })();
        if result.is_err() {
            self.set_lifecycle(FAILED);
        }
        self.publish(d);
        result
    }

    /// Marks the refill as reflecting every change up to `position`, applies buffered
    /// changes after it, and goes live.
    pub fn finish_rebuild(&self, position: u64, o: &ShardSetOptions) -> Result<()> {
        let mut d = self.write();
        if self.lifecycle() != REBUILDING {
            return Err(self.wrong_state());
        }
        let dropped = self.dropped_through.load(Ordering::Acquire);
        if position < dropped {
            return Err(IndexError::Behind {
                shard: self.k,
                position: dropped,
            });
        }
        self.dropped_through.store(0, Ordering::Release);
        d.position = d.position.max(position);
        let drained = self.drain_pending(&mut d, o);
        if drained.is_ok() {
            self.set_lifecycle(LIVE);
        }
        self.publish_measured(&d);
        drained
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

    /// Writes a snapshot; returns the position it covers.
    ///
    /// A graph is copied into memory under the read lock (serialised, with its gallery
    /// table and exact vectors cloned) and written to disk after the lock is released, so
    /// changes to this shard wait for a memory copy, not for the disk; the price is a
    /// transient copy of one shard. A scan store is written straight from its arrays under
    /// the read lock: searches go on, changes to this shard wait for the disk, and no copy
    /// of the shard's largest part is ever made (the scan kind is the one meant for
    /// millions of faces per node).
    pub fn save(&self, dir: &Path, shards: usize, o: &ShardSetOptions) -> Result<u64> {
        let header = |d: &Data| snapshot::Header {
            shard: self.k,
            shards,
            dims: o.dims,
            scalar: o.scalar,
            kind: o.kind,
            position: d.position,
            written_at: SystemTime::now(),
            faces: d.store.len() as u64,
        };
        let header = {
            let d = self.read();
            if self.lifecycle() != LIVE {
                return Err(self.wrong_state());
            }
            match &d.store {
                Store::Scan(store) => {
                    let header = header(&d);
                    self.publish_measured(&d);
                    snapshot::write(dir, &header, &d.members, None, |p| {
                        let f = std::fs::File::create(p).map_err(|e| IndexError::io(p, e))?;
                        let mut w = std::io::BufWriter::with_capacity(1 << 20, f);
                        store.write_to(&mut w).and_then(|()| std::io::Write::flush(&mut w)).map_err(|e| IndexError::io(p, e))
                    })?;
                    header
                }
                Store::Graph { index, exact } => {
                    let mut graph = vec![0u8; index.serialized_length()];
                    index.save_to_buffer(&mut graph).map_err(IndexError::native)?;
                    let header = header(&d);
                    self.publish_measured(&d);
                    let (members, exact) = (d.members.clone(), exact.clone());
                    drop(d);
                    snapshot::write(dir, &header, &members, exact.as_ref(), |p| {
                        std::fs::write(p, &graph).map_err(|e| IndexError::io(p, e))
                    })?;
                    header
                }
            }
        };
        *self.snapshot.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((header.position, header.written_at));
        Ok(header.position)
    }

    /// Replaces the contents with a snapshot. Only for a shard that is not serving
    /// (rebuilding or failed): a live shard may have applied changes newer than the snapshot.
    /// With `go_live` the buffered changes after the snapshot are applied and the shard
    /// serves; without it the shard stays rebuilding at the snapshot's position, to be
    /// caught up from the change log ([`Shard::replay`], then `finish_rebuild`).
    /// On any error the shard is left empty and rebuilding at position 0, with its
    /// buffered changes.
    pub fn load(&self, dir: &Path, shards: usize, o: &ShardSetOptions, go_live: bool) -> Result<u64> {
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
        let result = match loaded {
            Ok((store, sidecar)) => {
                d.store = store;
                d.members = sidecar.membership;
                d.position = sidecar.header.position;
                *self.snapshot.lock().unwrap_or_else(|e| e.into_inner()) =
                    Some((sidecar.header.position, sidecar.header.written_at));
                self.set_lifecycle(REBUILDING);
                if go_live && self.dropped_through.load(Ordering::Acquire) == 0 {
                    match self.drain_pending(&mut d, o) {
                        Ok(()) => self.set_lifecycle(LIVE),
                        Err(e) => {
                            self.publish_measured(&d);
                            return Err(e);
                        }
                    }
                }
                Ok(sidecar.header.position)
            }
            Err(e) => {
                let pending = std::mem::take(&mut d.pending);
                *d = empty_data(o, pending)?;
                self.set_lifecycle(REBUILDING);
                Err(e)
            }
        };
        self.publish_measured(&d);
        result
    }

    fn read_snapshot(
        &self,
        dir: &Path,
        shards: usize,
        o: &ShardSetOptions,
    ) -> Result<(Store, snapshot::Sidecar)> {
        let mut sidecar = snapshot::read(dir, self.k, shards, o.dims, o.scalar, o.kind)?;
        let graph = snapshot::data_path(dir, self.k, o.kind);
        let bad = |reason: String| IndexError::Snapshot {
            shard: self.k,
            path: graph.clone(),
            reason,
        };
        if o.kind == IndexKind::Scan {
            let f = std::fs::File::open(&graph).map_err(|e| bad(format!("cannot open: {e}")))?;
            let store = ScanStore::read_from(&mut std::io::BufReader::with_capacity(1 << 20, f), o.dims).map_err(bad)?;
            if store.len() as u64 != sidecar.header.faces {
                return Err(bad(format!("holds {} faces, sidecar says {}", store.len(), sidecar.header.faces)));
            }
            return Ok((Store::Scan(store), sidecar));
        }
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
        let exact = if o.reranks() { sidecar.exact.take() } else { None };
        Ok((Store::Graph { index, exact }, sidecar))
    }

    /// The shard's health line, from published figures only: never waits for a writer.
    pub fn health(&self) -> ShardHealth {
        let state = self.state();
        let snap = *self.snapshot.lock().unwrap_or_else(|e| e.into_inner());
        let p = &self.published;
        let size = p.size.load(Ordering::Acquire);
        let (measured, at) = (
            p.memory.load(Ordering::Acquire),
            p.memory_faces.load(Ordering::Acquire),
        );
        // Between measurements, scale by the faces added or removed since.
        let memory_bytes = if at > 0 {
            (measured as f64 * size as f64 / at as f64) as usize
        } else {
            measured
        };
        ShardHealth {
            shard: self.k,
            state,
            size,
            memory_bytes,
            position: p.position.load(Ordering::Acquire),
            pending: p.pending.load(Ordering::Acquire),
            snapshot_position: snap.map(|s| s.0),
            snapshot_age: snap.map(|s| SystemTime::now().duration_since(s.1).unwrap_or_default()),
        }
    }

    /// The SIMD path in use: usearch's choice for a graph, the fast-scan kernel's for a scan.
    pub fn hardware_acceleration(&self) -> String {
        match &self.read().store {
            Store::Graph { index, .. } => index.hardware_acceleration(),
            Store::Scan(_) => crate::fastscan::acceleration().to_owned(),
        }
    }

    pub fn len(&self) -> usize {
        self.published.size.load(Ordering::Acquire)
    }

    /// Faces a search of `gallery` (every face when `None`) compares against.
    pub fn scope_len(&self, gallery: Option<&str>) -> usize {
        match gallery {
            None => self.len(),
            Some(name) => {
                let d = self.read();
                d.members.gallery(name).map_or(0, |g| d.members.count(g))
            }
        }
    }

    pub fn index_memory(&self) -> IndexMemory {
        let d = self.read();
        let index = match &d.store {
            Store::Graph { index, .. } => index,
            Store::Scan(s) => {
                let bytes = s.heap_bytes();
                return IndexMemory { allocated: bytes, used: bytes };
            }
        };
        let m = index.memory_stats();
        IndexMemory {
            allocated: m.graph_allocated + m.vectors_allocated,
            used: (m.graph_allocated - m.graph_reserved - m.graph_wasted)
                + (m.vectors_allocated - m.vectors_reserved - m.vectors_wasted),
        }
    }

    /// Top `n` of every query in this shard, best first: one pass over a scan store for
    /// all of them, one graph walk per query otherwise.
    pub fn search(&self, queries: &[Query<'_>], o: &ShardSetOptions, sim: &SimilarityFn) -> Result<Vec<Vec<Hit>>> {
        let d = self.read();
        let mut out: Vec<Option<Vec<Hit>>> = vec![None; queries.len()];
        let mut scans: Vec<(usize, ScanQuery<'_>)> = Vec::new();
        for (i, q) in queries.iter().enumerate() {
            if q.n == 0 {
                out[i] = Some(Vec::new());
                continue;
            }
            let gid = match q.gallery {
                None => None,
                Some(name) => match d.members.gallery(name) {
                    Some(g) if d.members.count(g) > 0 => Some(g),
                    _ => {
                        out[i] = Some(Vec::new());
                        continue;
                    }
                },
            };
            // A scope holding every face of the shard (the only tenant's) filters nothing: the
            // search runs unfiltered, as it did before tenants, without a membership check per candidate.
            let gid = gid.filter(|&g| d.members.count(g) < d.store.len());
            if let Some(g) = gid.filter(|&g| scores_members(&d, g, o)) {
                out[i] = Some(self.score_members(&d, q, g, o, sim)?);
                continue;
            }
            match &d.store {
                Store::Graph { index, exact } => out[i] = Some(self.walk(&d, index, exact.as_ref(), q, gid, o, sim)?),
                Store::Scan(_) => scans.push((
                    i,
                    ScanQuery { vector: q.vector, n: q.n, rerank: o.rerank.max(q.n.saturating_mul(o.oversample)), gallery: gid },
                )),
            }
        }
        if let (Store::Scan(store), false) = (&d.store, scans.is_empty()) {
            let asked: Vec<ScanQuery<'_>> = scans.iter().map(|(_, q)| *q).collect();
            for ((i, _), found) in scans.iter().zip(store.search(&asked, &d.members)) {
                out[*i] = Some(
                    found
                        .into_iter()
                        .map(|(id, similarity)| Hit { id, similarity, shard: self.k as u32 })
                        .collect(),
                );
            }
        }
        Ok(out.into_iter().map(Option::unwrap_or_default).collect())
    }

    /// A gallery's members scored directly (see `scores_members`): a filtered graph walk
    /// would visit about `expansion / selectivity` nodes, which for a tiny gallery is the
    /// whole shard, and a scan would read every code of the shard.
    fn score_members(&self, d: &Data, q: &Query<'_>, g: u32, o: &ShardSetOptions, sim: &SimilarityFn) -> Result<Vec<Hit>> {
        let shard = self.k as u32;
        let mut hits = Vec::with_capacity(d.members.count(g));
        match &d.store {
            Store::Scan(s) => hits.extend(
                s.score_each(d.members.members(g), q.vector)
                    .into_iter()
                    .map(|(id, similarity)| Hit { id, similarity, shard }),
            ),
            Store::Graph { index, exact } => {
                let mut buf = vec![0f32; o.dims];
                for id in d.members.members(g) {
                    let v = match exact.as_ref().and_then(|x| x.get(id)) {
                        Some(v) => v,
                        None => {
                            // Without exact copies this is the stored (possibly quantised) vector.
                            if index.get(id, &mut buf[..]).map_err(IndexError::native)? == 0 {
                                continue;
                            }
                            &buf[..]
                        }
                    };
                    hits.push(Hit { id, similarity: sim(q.vector, v), shard });
                }
            }
        }
        // The best `n` first, in the order sort_hits gives, without sorting every member.
        if hits.len() > q.n {
            hits.select_nth_unstable_by(q.n, |a, b| b.similarity.total_cmp(&a.similarity).then(a.id.cmp(&b.id)));
            hits.truncate(q.n);
        }
        sort_hits(&mut hits);
        Ok(hits)
    }

    #[allow(clippy::too_many_arguments)]
    fn walk(
        &self,
        d: &Data,
        index: &Index,
        exact: Option<&ExactStore>,
        q: &Query<'_>,
        gid: Option<u32>,
        o: &ShardSetOptions,
        sim: &SimilarityFn,
    ) -> Result<Vec<Hit>> {
        let shard = self.k as u32;
        // Oversampled with or without re-ranking: the graph walk returns equally similar faces
        // (the same photo enrolled twice) in no fixed order, and the merge below breaks such
        // ties by id only among the candidates it sees. The walk's candidate list is larger
        // than this anyway, so the extra results cost next to nothing.
        let want = q.n.saturating_mul(o.oversample);
        let matches = match gid {
            None => index.search(q.vector, want),
            // The predicate runs inside the graph walk, so non-members are stepped through
            // but never fill result slots: the walk keeps going until `want` members are
            // found or the graph is exhausted, rather than filtering a fixed top-k afterwards.
            Some(g) => index.filtered_search(q.vector, want, |key| d.members.contains(g, key)),
        }
        .map_err(IndexError::native)?;

        let mut hits: Vec<Hit> = match exact {
            Some(x) => matches
                .keys
                .iter()
                .filter_map(|&id| x.get(id).map(|v| Hit { id, similarity: sim(q.vector, v), shard }))
                .collect(),
            None => matches
                .keys
                .iter()
                .zip(&matches.distances)
                .map(|(&id, &dist)| Hit { id, similarity: 1.0 - dist, shard })
                .collect(),
        };
        sort_hits(&mut hits);
        hits.truncate(q.n);
        Ok(hits)
    }
}

/// One search asked of a shard: a normalised vector, how many results, and optionally a
/// gallery to stay in.
#[derive(Clone, Copy)]
pub(crate) struct Query<'a> {
    pub vector: &'a [f32],
    pub n: usize,
    pub gallery: Option<&'a str>,
}

/// Best first; ties by id so results are deterministic across runs and shard orders.
pub(crate) fn sort_hits(hits: &mut [Hit]) {
    hits.sort_unstable_by(|a, b| b.similarity.total_cmp(&a.similarity).then(a.id.cmp(&b.id)));
}
