//! Construction options for a [`crate::ShardSet`].

use crate::error::{IndexError, Result};

/// How the ANN graph stores each vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scalar {
    /// 4 bytes per component: exact similarities, most memory.
    F32,
    /// 2 bytes per component: ~1e-3 similarity error, half the memory and bandwidth.
    F16,
    /// 1 byte per component: usearch scales each unit vector into [-127, 127]; coarse
    /// enough that rankings shuffle near ties, so pair it with exact re-ranking.
    I8,
}

impl Scalar {
    pub fn as_str(self) -> &'static str {
        match self {
            Scalar::F32 => "f32",
            Scalar::F16 => "f16",
            Scalar::I8 => "i8",
        }
    }

    pub(crate) fn to_usearch(self) -> usearch::ScalarKind {
        match self {
            Scalar::F32 => usearch::ScalarKind::F32,
            Scalar::F16 => usearch::ScalarKind::F16,
            Scalar::I8 => usearch::ScalarKind::I8,
        }
    }

    pub(crate) fn tag(self) -> u8 {
        match self {
            Scalar::F32 => 1,
            Scalar::F16 => 2,
            Scalar::I8 => 3,
        }
    }

    pub(crate) fn from_tag(tag: u8) -> Option<Scalar> {
        match tag {
            1 => Some(Scalar::F32),
            2 => Some(Scalar::F16),
            3 => Some(Scalar::I8),
            _ => None,
        }
    }
}

impl std::str::FromStr for Scalar {
    type Err = IndexError;
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "f32" => Ok(Scalar::F32),
            "f16" => Ok(Scalar::F16),
            "i8" => Ok(Scalar::I8),
            other => Err(IndexError::BadOption(format!(
                "unknown scalar kind {other:?} (f32, f16, i8)"
            ))),
        }
    }
}

/// How a shard stores and searches its faces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IndexKind {
    /// A usearch HNSW graph: cost per query grows slowly with the shard, recall depends on
    /// `expansion_search`.
    Hnsw,
    /// Every face scanned as a 4-bit product code for a whole batch of queries, the best
    /// `rerank` re-scored exactly ([`crate::scan`]): cost per query grows with the shard,
    /// recall depends on `rerank`.
    Scan,
    /// [`IndexKind::Scan`]: on face embeddings it is faster than the graph at the same
    /// recall at every size measured, up to 10M faces on one node (bench/RESULTS.md,
    /// "Search"), so no crossover to the graph is known to choose by.
    Auto,
}

impl IndexKind {
    pub fn as_str(self) -> &'static str {
        match self {
            IndexKind::Hnsw => "hnsw",
            IndexKind::Scan => "scan",
            IndexKind::Auto => "auto",
        }
    }

    pub(crate) fn tag(self) -> u8 {
        match self {
            IndexKind::Hnsw => 1,
            IndexKind::Scan | IndexKind::Auto => 2,
        }
    }

    pub(crate) fn from_tag(tag: u8) -> Option<IndexKind> {
        match tag {
            1 => Some(IndexKind::Hnsw),
            2 => Some(IndexKind::Scan),
            _ => None,
        }
    }
}

impl std::str::FromStr for IndexKind {
    type Err = IndexError;
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "hnsw" => Ok(IndexKind::Hnsw),
            "scan" => Ok(IndexKind::Scan),
            "auto" => Ok(IndexKind::Auto),
            other => Err(IndexError::BadOption(format!("unknown index kind {other:?} (hnsw, scan, auto)"))),
        }
    }
}

/// Options for a [`crate::ShardSet`]. Everything except `dims` has a usable default.
#[derive(Debug, Clone)]
pub struct ShardSetOptions {
    /// Embedding dimension (the recogniser's output size, e.g. 1024).
    pub dims: usize,
    /// Number of shards; 0 means one per available core. Recorded in every snapshot:
    /// snapshots written with a different count are refused (rebuild).
    pub shards: usize,
    /// Graph or scan; `Auto` is resolved when the set is created. Recorded in snapshots:
    /// a snapshot of the other kind is refused (rebuild).
    pub kind: IndexKind,
    /// Scan kind: candidates per query re-scored exactly (at least `oversample` times the
    /// results asked for). The recall knob of the scan. Default 512: on face embeddings at
    /// 1M faces it finds the exact top face 99.5% of the time, 128 only 97.9%, and it costs
    /// about a third more per query than 128 (bench/RESULTS.md, "Search").
    pub rerank: usize,
    /// Searches handed to [`crate::ShardSet::search_gathered`] while another gathered
    /// search is in flight wait for it and then run together, one pass over the shards for
    /// all their queries; as soon as `gather_max` queries wait they start without waiting.
    /// A search arriving at an idle set starts at once, so gathering never delays a lone
    /// query, and under load the wait is at most one batch.
    pub gather_max: usize,
    /// HNSW graph storage (the scan kind always keeps f16 vectors and 4-bit codes).
    pub scalar: Scalar,
    /// HNSW edges per node; 0 lets usearch choose (16). Default 32: on face embeddings at
    /// 1M faces it reaches a given recall at half the search time of 16 (recall@1 0.95 at
    /// 1.7 ms instead of 3.7 ms; bench/results-archive/2026-11-24.md, "Search at scale on face embeddings"), for about 130 bytes
    /// more per face and a slower build.
    pub connectivity: usize,
    /// Candidate list size while inserting; 0 lets usearch choose (128).
    pub expansion_add: usize,
    /// Candidate list size while searching; 0 lets usearch choose (64). Raised to the
    /// requested candidate count automatically. The main recall/latency knob. Face
    /// embeddings are hard for a graph (their nearest neighbours are far apart in 128
    /// dimensions): with connectivity 32, 512 finds the exact top face 98.7% of the time at
    /// 1M faces and 256 only 95%, at half the time (bench/results-archive/2026-11-24.md, "Search at scale on face embeddings").
    pub expansion_search: usize,
    /// Keep an f32 copy of every vector so f16/i8 candidates are re-scored exactly.
    /// `None` chooses per scalar kind, by the recall the copy buys on face embeddings
    /// (bench/results-archive/2026-11-24.md, "Search at scale on face embeddings"): f16 alone keeps recall@1 at the f32 graph's, so
    /// it keeps no copy; i8 reorders near ties, so it keeps one. A copy costs `dims * 4`
    /// bytes per face (512 B at 128 dims) on top of the graph and is written into snapshots.
    /// Ignored for F32, whose graph already holds exact vectors.
    pub keep_exact: Option<bool>,
    /// Fetch `n * oversample` candidates per shard before re-scoring (with exact copies) and
    /// before ordering ties by id.
    pub oversample: usize,
    /// Gallery-restricted searches on a shard where the gallery has at most this many
    /// members score those members directly instead of walking the graph: a filtered
    /// graph walk has to visit about `expansion / selectivity` nodes, which for a tiny
    /// gallery is the whole shard.
    pub exact_scan_below: usize,
    /// Worker threads of the set's pool, which runs every search, apply and snapshot
    /// handed to it and fans searches out over the shards; 0 means one per core. usearch
    /// needs one scratch context per concurrent call on a shard, and only pool threads
    /// (and, holding the shard exclusively, a bulk refill's as many workers) call it, so
    /// the contexts reserved follow from this number.
    pub threads: usize,
    /// Most changes a shard that is not live buffers. Past it the buffer is dropped and
    /// the shard must be caught up from the change log before it goes live again
    /// ([`crate::ShardSet::finish_rebuild`] refuses an earlier position): a shard that is
    /// far behind is cheaper to replay than to hold in memory.
    pub max_pending: usize,
    /// The shards this set holds, by number out of `shards`; `None` holds them all. A shard
    /// server of a multi-server deployment holds a few: faces routed to the others are
    /// skipped by [`crate::ShardSet::apply_batch`] and refills, and snapshots still record
    /// the deployment's shard count, so a shard's files can move to another server.
    pub owned: Option<Vec<usize>>,
}

/// What "0: one per core" resolves to.
fn cores() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

impl ShardSetOptions {
    pub fn new(dims: usize) -> Self {
        ShardSetOptions {
            dims,
            shards: 0,
            kind: IndexKind::Auto,
            rerank: 512,
            gather_max: 64,
            scalar: Scalar::F16,
            connectivity: 32,
            expansion_add: 0,
            expansion_search: 512,
            keep_exact: None,
            oversample: 4,
            exact_scan_below: 2048,
            threads: 0,
            max_pending: 100_000,
            owned: None,
        }
    }

    /// Fills defaults and rejects nonsense.
    pub(crate) fn resolved(&self) -> Result<ShardSetOptions> {
        let mut o = self.clone();
        if o.dims == 0 {
            return Err(IndexError::BadOption("dims must be at least 1".into()));
        }
        if o.shards == 0 {
            o.shards = cores();
        }
        if o.shards > 4096 {
            return Err(IndexError::BadOption("more than 4096 shards".into()));
        }
        o.keep_exact = Some(match o.scalar {
            Scalar::F32 => false,
            Scalar::F16 => o.keep_exact.unwrap_or(false),
            Scalar::I8 => o.keep_exact.unwrap_or(true),
        });
        if o.threads == 0 {
            o.threads = cores();
        }
        if o.threads > 1024 {
            return Err(IndexError::BadOption("more than 1024 index threads".into()));
        }
        let mut owned = o.owned.take().unwrap_or_else(|| (0..o.shards).collect());
        owned.sort_unstable();
        owned.dedup();
        if owned.is_empty() {
            return Err(IndexError::BadOption("a shard set must hold at least one shard".into()));
        }
        if let Some(&k) = owned.iter().find(|&&k| k >= o.shards) {
            return Err(IndexError::BadOption(format!("shard {k} is not below the shard count {}", o.shards)));
        }
        o.owned = Some(owned);
        o.oversample = o.oversample.max(1);
        if o.kind == IndexKind::Auto {
            o.kind = IndexKind::Scan;
        }
        if o.kind == IndexKind::Scan {
            // What the scan stores, recorded in its snapshots.
            o.scalar = Scalar::F16;
            o.keep_exact = Some(false);
        }
        o.rerank = o.rerank.max(1);
        o.gather_max = o.gather_max.max(1);
        o.max_pending = o.max_pending.max(1);
        Ok(o)
    }

    /// Whether search results are re-scored in f32 before merging.
    pub fn reranks(&self) -> bool {
        self.kind == IndexKind::Hnsw && self.scalar != Scalar::F32 && self.keep_exact == Some(true)
    }
}
