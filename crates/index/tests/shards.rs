//! Behaviour of the shard set as the service uses it: updates by position, fan-out search,
//! gallery filtering, snapshots and operator control.

mod common;

use std::collections::HashSet;

use common::{brute_force, live_set, options, temp_dir, Rng};
use face_index::{route, Outcome, Scalar, ShardSet, ShardState};

const NO_GALLERIES: &[&str] = &[];

#[test]
fn upsert_then_search_finds_each_face_first() {
    let o = options(64, 3, Scalar::F32);
    let set = live_set(&o);
    let mut rng = Rng::new(1);
    let faces: Vec<(u64, Vec<f32>)> = (1..=600).map(|id| (id, rng.unit_vector(64))).collect();
    for (i, (id, v)) in faces.iter().enumerate() {
        assert_eq!(
            set.upsert(*id, v, NO_GALLERIES, i as u64 + 1).unwrap(),
            Outcome::Applied
        );
    }
    assert_eq!(set.len(), 600);
    for (id, v) in faces.iter().step_by(17) {
        let r = set.search(v, 5, None).unwrap();
        assert!(r.complete());
        assert_eq!(r.searched, vec![0, 1, 2]);
        assert_eq!(r.hits.len(), 5);
        assert_eq!(r.hits[0].id, *id);
        assert!(
            (r.hits[0].similarity - 1.0).abs() < 1e-4,
            "{}",
            r.hits[0].similarity
        );
        assert_eq!(r.hits[0].shard as usize, set.shard_of(*id));
        assert!(r
            .hits
            .windows(2)
            .all(|w| w[0].similarity >= w[1].similarity));
    }
}

#[test]
fn vectors_are_normalised_on_the_way_in() {
    let set = live_set(&options(8, 1, Scalar::F32));
    set.upsert(
        1,
        &[3.0, 4.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
        NO_GALLERIES,
        1,
    )
    .unwrap();
    let r = set
        .search(&[6.0, 8.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0], 1, None)
        .unwrap();
    assert!((r.hits[0].similarity - 1.0).abs() < 1e-5);
}

#[test]
fn bad_vectors_are_refused_with_bad_param() {
    let set = live_set(&options(4, 1, Scalar::F32));
    for v in [vec![1.0; 3], vec![f32::NAN, 0.0, 0.0, 1.0], vec![0.0; 4]] {
        let e = set.upsert(1, &v, NO_GALLERIES, 1).unwrap_err();
        assert_eq!(e.code(), "BAD_PARAM", "{e}");
        assert_eq!(set.search(&v, 1, None).unwrap_err().code(), "BAD_PARAM");
    }
}

#[test]
fn shard_rule_is_the_documented_one() {
    let set = live_set(&options(8, 5, Scalar::F32));
    let mut rng = Rng::new(2);
    let mut expected = vec![0usize; 5];
    for id in 1..=500u64 {
        assert_eq!(set.shard_of(id), route::shard_of(id, 5));
        expected[route::shard_of(id, 5)] += 1;
        set.upsert(id, &rng.unit_vector(8), NO_GALLERIES, id)
            .unwrap();
    }
    let sizes: Vec<usize> = set.health().iter().map(|h| h.size).collect();
    assert_eq!(sizes, expected);
}

/// 1% of faces in the gallery; the graph walk (not a small-gallery scan) must still fill n.
#[test]
fn rare_gallery_search_fills_n_and_never_leaks() {
    let dims = 64;
    for scalar in [Scalar::F32, Scalar::I8] {
        let mut o = options(dims, 2, scalar);
        o.exact_scan_below = 0; // force usearch filtered_search
        let set = live_set(&o);
        let mut rng = Rng::new(3);
        let mut rare = HashSet::new();
        let mut faces = Vec::new();
        for id in 1..=5000u64 {
            let v = rng.unit_vector(dims);
            let galleries: &[&str] = if id % 100 == 7 {
                rare.insert(id);
                &["rare", "everyone"]
            } else {
                &["everyone"]
            };
            set.upsert(id, &v, galleries, id).unwrap();
            faces.push((id, v));
        }
        assert_eq!(rare.len(), 50);
        for q in 0..20 {
            let query = rng.unit_vector(dims);
            for n in [1, 10, 50, 80] {
                let r = set.search(&query, n, Some("rare")).unwrap();
                assert_eq!(r.hits.len(), n.min(50), "{scalar:?} n={n} q={q}");
                assert!(
                    r.hits.iter().all(|h| rare.contains(&h.id)),
                    "face outside the gallery returned"
                );
            }
            let all = set.search(&query, 80, Some("rare")).unwrap();
            let got: HashSet<u64> = all.hits.iter().map(|h| h.id).collect();
            assert_eq!(got, rare, "every member reachable");
            // Filtered results are the gallery's true top 10.
            let members: Vec<(u64, Vec<f32>)> = faces
                .iter()
                .filter(|(id, _)| rare.contains(id))
                .cloned()
                .collect();
            let top: Vec<u64> = set
                .search(&query, 10, Some("rare"))
                .unwrap()
                .hits
                .iter()
                .map(|h| h.id)
                .collect();
            assert_eq!(top, brute_force(&members, &query, 10), "{scalar:?}");
        }
        assert!(set
            .search(&faces[0].1, 5, Some("no-such-gallery"))
            .unwrap()
            .hits
            .is_empty());
    }
}

#[test]
fn small_gallery_scan_is_exact_and_follows_membership_changes() {
    let dims = 32;
    let set = live_set(&options(dims, 2, Scalar::F16));
    let mut rng = Rng::new(4);
    let mut faces = Vec::new();
    for id in 1..=400u64 {
        let v = rng.unit_vector(dims);
        let g: &[&str] = if id % 4 == 0 { &["a"] } else { &["b"] };
        set.upsert(id, &v, g, id).unwrap();
        faces.push((id, v));
    }
    let q = rng.unit_vector(dims);
    let in_a: Vec<(u64, Vec<f32>)> = faces
        .iter()
        .filter(|(id, _)| id % 4 == 0)
        .cloned()
        .collect();
    let got: Vec<u64> = set
        .search(&q, 7, Some("a"))
        .unwrap()
        .hits
        .iter()
        .map(|h| h.id)
        .collect();
    assert_eq!(got, brute_force(&in_a, &q, 7));

    // Move face 8 from a to b: it must leave a's results and appear in b's.
    assert_eq!(
        set.set_galleries(8, &["b"], 1000).unwrap(),
        Outcome::Applied
    );
    assert_eq!(set.galleries_of(8), ["b"]);
    let v8 = &faces[7].1;
    assert!(set
        .search(v8, 100, Some("a"))
        .unwrap()
        .hits
        .iter()
        .all(|h| h.id != 8));
    assert_eq!(set.search(v8, 1, Some("b")).unwrap().hits[0].id, 8);
    assert_eq!(
        set.set_galleries(99_999, &["b"], 1001).unwrap(),
        Outcome::Missing
    );
}

#[test]
fn deleted_faces_never_come_back_even_after_reload() {
    let dims = 48;
    for scalar in [Scalar::F32, Scalar::F16, Scalar::I8] {
        let o = options(dims, 2, scalar);
        let set = live_set(&o);
        let mut rng = Rng::new(5);
        let faces: Vec<(u64, Vec<f32>)> =
            (1..=400u64).map(|id| (id, rng.unit_vector(dims))).collect();
        let mut pos = 0;
        for (id, v) in &faces {
            pos += 1;
            set.upsert(*id, v, &["g"], pos).unwrap();
        }
        let removed: HashSet<u64> = faces.iter().map(|f| f.0).filter(|id| id % 3 == 0).collect();
        for &id in &removed {
            pos += 1;
            assert_eq!(set.remove(id, pos).unwrap(), Outcome::Applied);
        }
        pos += 1;
        assert_eq!(set.remove(999_999, pos).unwrap(), Outcome::Missing);

        let check = |set: &ShardSet| {
            assert_eq!(set.len(), 400 - removed.len());
            for (id, v) in faces.iter().filter(|f| removed.contains(&f.0)) {
                assert!(!set.contains(*id));
                for gallery in [None, Some("g")] {
                    let r = set.search(v, 30, gallery).unwrap();
                    assert!(
                        r.hits.iter().all(|h| !removed.contains(&h.id)),
                        "{scalar:?}: deleted face returned"
                    );
                }
            }
        };
        check(&set);

        let dir = temp_dir(&format!("delete-{}", scalar.as_str()));
        let saved: Vec<u64> = set.save_all(&dir).into_iter().map(|r| r.unwrap()).collect();
        let positions: Vec<u64> = set.health().iter().map(|h| h.position).collect();
        assert_eq!(saved, positions);
        let reloaded = ShardSet::new(&o).unwrap();
        let loaded: Vec<u64> = reloaded
            .load_all(&dir)
            .into_iter()
            .map(|r| r.unwrap())
            .collect();
        assert_eq!(loaded, positions);
        check(&reloaded);
        // A removed id can be added again.
        let (id, v) = faces.iter().find(|f| removed.contains(&f.0)).unwrap();
        pos += 1;
        reloaded.upsert(*id, v, &["g"], pos).unwrap();
        assert_eq!(reloaded.search(v, 1, Some("g")).unwrap().hits[0].id, *id);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[test]
fn replay_by_position_is_idempotent() {
    let dims = 16;
    let set = live_set(&options(dims, 2, Scalar::F32));
    let mut rng = Rng::new(6);
    let v1 = rng.unit_vector(dims);
    let v2 = rng.unit_vector(dims);
    let other = rng.unit_vector(dims);
    // A log: add 1 and 2, move 1, put 1 in a gallery, delete 2.
    let log = |set: &ShardSet| -> Vec<Outcome> {
        vec![
            set.upsert(1, &v1, NO_GALLERIES, 1).unwrap(),
            set.upsert(2, &other, NO_GALLERIES, 2).unwrap(),
            set.upsert(1, &v2, NO_GALLERIES, 3).unwrap(),
            set.set_galleries(1, &["vip"], 4).unwrap(),
            set.remove(2, 5).unwrap(),
        ]
    };
    assert!(log(&set).iter().all(|o| *o == Outcome::Applied));
    // Replaying the whole log (e.g. after a restart from an older checkpoint) changes nothing.
    let again = log(&set);
    for (i, o) in again.iter().enumerate() {
        assert_eq!(*o, Outcome::Stale, "change {i}");
    }
    assert_eq!(set.len(), 1);
    assert!(!set.contains(2));
    let r = set.search(&v2, 1, Some("vip")).unwrap();
    assert_eq!(r.hits[0].id, 1);
    assert!(
        (r.hits[0].similarity - 1.0).abs() < 1e-5,
        "the later vector wins"
    );
    // An older change arriving late is ignored too.
    assert_eq!(set.upsert(1, &v1, NO_GALLERIES, 2).unwrap(), Outcome::Stale);
    assert!((set.search(&v2, 1, None).unwrap().hits[0].similarity - 1.0).abs() < 1e-5);
    assert_eq!(
        set.replay_from(),
        set.health().iter().map(|h| h.position).min().unwrap()
    );
}

#[test]
fn changes_during_rebuild_are_buffered_and_applied_after_the_refill_position() {
    let dims = 16;
    let set = ShardSet::new(&options(dims, 1, Scalar::F32)).unwrap();
    assert_eq!(set.state(0).unwrap(), ShardState::Rebuilding);
    let mut rng = Rng::new(7);
    let (a, b, c) = (
        rng.unit_vector(dims),
        rng.unit_vector(dims),
        rng.unit_vector(dims),
    );
    // The change feed runs ahead of the refill.
    assert_eq!(
        set.upsert(2, &b, NO_GALLERIES, 9).unwrap(),
        Outcome::Deferred
    );
    assert_eq!(set.remove(1, 11).unwrap(), Outcome::Deferred);
    assert_eq!(
        set.upsert(3, &c, NO_GALLERIES, 12).unwrap(),
        Outcome::Deferred
    );
    assert_eq!(set.health()[0].pending, 3);
    // The database scan, consistent as of position 10, holds faces 1 and 2.
    assert!(set.rebuild_upsert(1, &a, NO_GALLERIES).unwrap());
    assert!(set.rebuild_upsert(2, &b, NO_GALLERIES).unwrap());
    set.finish_rebuild(0, 10).unwrap();
    // 9 was covered by the scan; 11 and 12 were applied on top.
    assert!(!set.contains(1));
    assert!(set.contains(2) && set.contains(3));
    let h = &set.health()[0];
    assert_eq!((h.state, h.position, h.pending), (ShardState::Live, 12, 0));
    assert!(
        !set.rebuild_upsert(4, &a, NO_GALLERIES).unwrap(),
        "live shards take no scan rows"
    );
}

#[test]
fn corrupt_or_missing_snapshot_leaves_only_that_shard_rebuilding() {
    let dims = 32;
    let o = options(dims, 3, Scalar::I8);
    let set = live_set(&o);
    let mut rng = Rng::new(8);
    let faces: Vec<(u64, Vec<f32>)> = (1..=900u64).map(|id| (id, rng.unit_vector(dims))).collect();
    for (id, v) in &faces {
        set.upsert(*id, v, &["g"], *id).unwrap();
    }
    let dir = temp_dir("corrupt");
    for r in set.save_all(&dir) {
        r.unwrap();
    }

    // Flip one byte in the middle of shard 1's graph.
    let graph = dir.join("shard-1.usearch");
    let mut bytes = std::fs::read(&graph).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    std::fs::write(&graph, &bytes).unwrap();

    let restored = ShardSet::new(&o).unwrap();
    let results = restored.load_all(&dir);
    assert!(results[0].is_ok() && results[2].is_ok());
    let e = results[1].as_ref().unwrap_err();
    assert_eq!(e.code(), "SNAPSHOT_INVALID", "{e}");
    assert_eq!(restored.needs_rebuild(), vec![1]);

    // The other shards serve; the result says which partition is missing.
    let q = &faces[0].1;
    let r = restored.search(q, 10, None).unwrap();
    assert_eq!(r.searched, vec![0, 2]);
    assert_eq!(r.skipped.len(), 1);
    assert_eq!(
        (r.skipped[0].shard, r.skipped[0].state),
        (1, ShardState::Rebuilding)
    );
    assert!(r.hits.iter().all(|h| h.shard != 1));

    // Rebuild path: one scan of every face refills only the damaged shard.
    let ids: Vec<u64> = faces.iter().map(|f| f.0).collect();
    let flat: Vec<f32> = faces.iter().flat_map(|f| f.1.iter().copied()).collect();
    let galleries: Vec<Vec<&str>> = ids.iter().map(|_| vec!["g"]).collect();
    let taken = restored.rebuild_batch(&ids, &flat, &galleries).unwrap();
    assert_eq!(
        taken,
        ids.iter().filter(|&&id| restored.shard_of(id) == 1).count()
    );
    restored.finish_rebuild(1, 900).unwrap();
    for (id, v) in faces.iter().step_by(50) {
        let a = restored.search(v, 5, Some("g")).unwrap();
        assert!(a.complete());
        assert_eq!(a.hits[0].id, *id);
        let b = set.search(v, 5, Some("g")).unwrap();
        assert_eq!(
            a.hits.iter().map(|h| h.id).collect::<Vec<_>>(),
            b.hits.iter().map(|h| h.id).collect::<Vec<_>>()
        );
    }

    // A missing sidecar and a truncated sidecar are refused the same way.
    std::fs::remove_file(dir.join("shard-0.meta")).unwrap();
    let meta2 = dir.join("shard-2.meta");
    let len = std::fs::metadata(&meta2).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&meta2)
        .unwrap()
        .set_len(len - 3)
        .unwrap();
    let again = ShardSet::new(&o).unwrap();
    let results = again.load_all(&dir);
    assert_eq!(results[0].as_ref().unwrap_err().code(), "SNAPSHOT_INVALID");
    assert_eq!(results[2].as_ref().unwrap_err().code(), "SNAPSHOT_INVALID");
    assert_eq!(again.needs_rebuild(), vec![0, 1, 2]);

    // A snapshot written for a different shard count is refused rather than misrouted.
    for r in set.save_all(&dir) {
        r.unwrap();
    }
    let other_count = ShardSet::new(&options(dims, 2, Scalar::I8)).unwrap();
    assert!(other_count.load_all(&dir).iter().all(|r| r.is_err()));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn offline_shard_is_excluded_and_reported() {
    let dims = 16;
    let set = live_set(&options(dims, 2, Scalar::F32));
    let mut rng = Rng::new(9);
    let faces: Vec<(u64, Vec<f32>)> = (1..=200u64).map(|id| (id, rng.unit_vector(dims))).collect();
    for (id, v) in &faces {
        set.upsert(*id, v, NO_GALLERIES, *id).unwrap();
    }
    set.set_offline(0).unwrap();
    assert_eq!(set.health()[0].state, ShardState::Offline);
    let (id0, v0) = faces.iter().find(|f| set.shard_of(f.0) == 0).unwrap();
    let r = set.search(v0, 10, None).unwrap();
    assert_eq!(r.searched, vec![1]);
    assert_eq!(
        (r.skipped[0].shard, r.skipped[0].state),
        (0, ShardState::Offline)
    );
    assert!(r.hits.iter().all(|h| h.shard == 1 && h.id != *id0));
    // Offline shards keep applying updates so they come back current.
    let fresh = rng.unit_vector(dims);
    let new_id = (1000..).find(|&id| set.shard_of(id) == 0).unwrap();
    assert_eq!(
        set.upsert(new_id, &fresh, NO_GALLERIES, 500).unwrap(),
        Outcome::Applied
    );
    set.set_online(0).unwrap();
    let r = set.search(&fresh, 1, None).unwrap();
    assert!(r.complete());
    assert_eq!(r.hits[0].id, new_id);
    assert!(set.set_offline(7).is_err());
}

#[test]
fn health_reports_sizes_positions_and_snapshot_age() {
    let dims = 16;
    let set = live_set(&options(dims, 2, Scalar::F16));
    let mut rng = Rng::new(10);
    for id in 1..=50u64 {
        set.upsert(id, &rng.unit_vector(dims), NO_GALLERIES, id)
            .unwrap();
    }
    let h = set.health();
    assert_eq!(h.iter().map(|s| s.size).sum::<usize>(), 50);
    assert!(h
        .iter()
        .all(|s| s.snapshot_age.is_none() && s.memory_bytes > 0));
    let dir = temp_dir("health");
    set.save(1, &dir).unwrap();
    let h = set.health();
    assert!(h[0].snapshot_position.is_none());
    assert_eq!(h[1].snapshot_position, Some(h[1].position));
    assert!(h[1].snapshot_age.unwrap().as_secs() < 60);
    assert!(!set.hardware_acceleration().is_empty());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn concurrent_searches_and_updates_do_not_fail() {
    let dims = 32;
    let mut o = options(dims, 2, Scalar::F16);
    o.threads = 2; // fewer pool threads than searching callers
    let set = live_set(&o);
    let mut rng = Rng::new(11);
    for id in 1..=500u64 {
        set.upsert(id, &rng.unit_vector(dims), &["g"], id).unwrap();
    }
    let next = std::sync::atomic::AtomicU64::new(501);
    std::thread::scope(|s| {
        for t in 0..6u64 {
            let set = &set;
            s.spawn(move || {
                let mut rng = Rng::new(100 + t);
                for _ in 0..100 {
                    let q = rng.unit_vector(dims);
                    let r = set
                        .search(&q, 10, if t % 2 == 0 { Some("g") } else { None })
                        .unwrap();
                    assert!(r.complete());
                    assert_eq!(r.hits.len(), 10);
                }
            });
        }
        s.spawn(|| {
            let mut rng = Rng::new(99);
            let mut pos = 1000;
            for _ in 0..200 {
                let id = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                pos += 1;
                set.upsert(id, &rng.unit_vector(dims), &["g"], pos).unwrap();
            }
        });
    });
    assert_eq!(set.len(), 700);
}

/// Identify's confidence depends on how many faces a search compared against: every face,
/// a gallery's members, and only those on the shards that answered.
#[test]
fn a_search_counts_the_faces_in_its_scope() {
    for kind in [face_index::IndexKind::Scan, face_index::IndexKind::Hnsw] {
        let mut o = options(32, 3, Scalar::F32);
        o.kind = kind;
        let set = live_set(&o);
        let mut rng = Rng::new(5);
        for id in 1..=300u64 {
            let galleries: &[&str] = if id % 3 == 0 { &["staff"] } else { NO_GALLERIES };
            set.upsert(id, &rng.unit_vector(32), galleries, id).unwrap();
        }
        let q = rng.unit_vector(32);
        assert_eq!(set.search(&q, 1, None).unwrap().faces, 300, "{kind:?}");
        assert_eq!(set.search(&q, 1, Some("staff")).unwrap().faces, 100, "{kind:?}");
        assert_eq!(set.search(&q, 1, Some("nobody")).unwrap().faces, 0, "{kind:?}");
        let batch = set.search_batch(&[q.clone(), q.clone()].concat(), 1, Some("staff")).unwrap();
        assert!(batch.iter().all(|r| r.faces == 100), "{kind:?}");

        set.set_offline(1).unwrap();
        let r = set.search(&q, 1, None).unwrap();
        let on_shard_1 = (1..=300u64).filter(|&id| set.shard_of(id) == 1).count() as u64;
        assert_eq!(r.faces, 300 - on_shard_1, "{kind:?}");
    }
}
