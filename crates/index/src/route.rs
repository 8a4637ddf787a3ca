//! Which shard owns a face.
//!
//! FROZEN RULE: `shard_of(id, n) = mix64(id) % n`, where `mix64` is the SplitMix64 finaliser
//! below. Snapshots record the shard count and each shard's contents were placed by this
//! rule, so changing the function (or its constants) silently misroutes every update and
//! delete against an existing snapshot. Never edit it; a different placement needs a new
//! snapshot format version and a full rebuild.
//!
//! Mixing first (rather than `id % n`) matters because database ids are sequential: plain
//! modulo would still balance, but ids allocated in strides (e.g. per-tenant ranges or
//! `INCREMENT BY n`) would pile onto one shard.

/// SplitMix64 finaliser: a bijection on u64 with full avalanche.
#[inline]
pub fn mix64(id: u64) -> u64 {
    let mut z = id.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The shard that owns face `id` among `shards` shards (`shards` ≥ 1).
#[inline]
pub fn shard_of(id: u64, shards: usize) -> usize {
    debug_assert!(shards > 0);
    (mix64(id) % shards as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rule_is_frozen() {
        // Pinned values: if these change, every existing snapshot is misrouted.
        assert_eq!(mix64(0), 0xE220_A839_7B1D_CDAF);
        assert_eq!(mix64(1), 0x910A_2DEC_8902_5CC1);
        let placed: Vec<usize> = (0..8).map(|id| shard_of(id, 4)).collect();
        assert_eq!(placed, [3, 1, 2, 1, 2, 2, 0, 3]);
    }

    #[test]
    fn balanced_for_sequential_ids() {
        let n = 8;
        let mut counts = vec![0usize; n];
        for id in 1..=80_000u64 {
            counts[shard_of(id, n)] += 1;
        }
        for c in counts {
            assert!((9_000..11_000).contains(&c), "unbalanced: {c}");
        }
    }
}
