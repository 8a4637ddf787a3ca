//! Partitioned nearest-neighbour search over face embeddings.
//!
//! A [`ShardSet`] splits faces over N shards, each a usearch HNSW graph or a batched scan
//! of 4-bit product codes ([`IndexKind`]), by a frozen hash of the face id
//! ([`route`]), applies database changes in commit order by position (so replaying a log is
//! idempotent), searches all live shards in parallel and merges their top hits, restricts
//! searches to a gallery inside the graph walk, optionally re-scores quantised candidates
//! exactly in f32, and snapshots each shard to disk with checksums so a damaged shard is
//! rebuilt while the others serve.

mod checksum;
mod error;
mod exact;
pub mod fastscan;
mod ids;
mod membership;
mod options;
pub mod route;
mod scan;
mod set;
mod shard;
mod snapshot;

pub use error::{IndexError, Result};
pub use options::{IndexKind, Scalar, ShardSetOptions};
pub use set::{dot, GatheredSearch, Reply, SearchResult, ShardSet, Similarity, SkippedShard, Update};
pub use shard::{Hit, IndexMemory, Outcome, ShardHealth, ShardState};

/// Version of the usearch library linked in, for health reporting.
pub fn usearch_version() -> &'static str {
    usearch::version()
}

#[cfg(test)]
mod tests {
    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn shard_set_is_send_and_sync() {
        assert_send_sync::<super::ShardSet>();
    }
}
