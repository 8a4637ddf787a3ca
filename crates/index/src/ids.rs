//! Hashing for face-id keyed tables.
//!
//! The gallery predicate runs once per graph node visited during a filtered search, so the
//! default SipHash (built to resist adversarial keys, which database ids are not) would be a
//! measurable share of search time. Ids go through the same SplitMix64 mix as routing.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

#[derive(Default)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Only reached for non-u64 keys; still correct, just slower.
        for &b in bytes {
            self.0 = crate::route::mix64(self.0 ^ b as u64);
        }
    }
    fn write_u64(&mut self, id: u64) {
        // Salted so the bucket index does not line up with the shard index (mix64 % shards).
        self.0 = crate::route::mix64(id ^ 0x5bd1_e995_5bd1_e995);
    }
}

pub type IdMap<V> = HashMap<u64, V, BuildHasherDefault<IdHasher>>;
pub type IdSet = HashSet<u64, BuildHasherDefault<IdHasher>>;
