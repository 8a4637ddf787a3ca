//! The scan kind through the shard set: it finds what an exact search finds on face-like
//! vectors, keeps to galleries inside the scan, survives deletes, snapshots and damage, and
//! gathered searches answer as the same searches asked one by one.

mod common;

use std::sync::{mpsc, Arc};

use common::{brute_force, live_set, options, scan_options, temp_dir, Rng};
use face_index::{dot, GatheredSearch, IndexKind, Scalar, ShardSet, ShardSetOptions};

const DIMS: usize = 128;

/// Face-like vectors: people are random directions, each photo its person's direction
/// plus noise, so two photos of one person sit at cosine about 0.66 and strangers near 0,
/// as SFace's embeddings do. Returns (id, vector, person).
fn photos(people: usize, per_person: usize, rng: &mut Rng) -> Vec<(u64, Vec<f32>, usize)> {
    let sigma = 0.72f32;
    let mut out = Vec::new();
    for p in 0..people {
        let centre = rng.unit_vector(DIMS);
        for _ in 0..per_person {
            let noise = rng.unit_vector(DIMS);
            let mut v: Vec<f32> = centre.iter().zip(&noise).map(|(c, n)| c + sigma * n).collect();
            let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            v.iter_mut().for_each(|x| *x /= norm);
            out.push((out.len() as u64 + 1, v, p));
        }
    }
    out
}

fn filled(o: &ShardSetOptions, faces: &[(u64, Vec<f32>, usize)], gallery: impl Fn(u64) -> Option<&'static str>) -> ShardSet {
    let set = live_set(o);
    for (id, v, _) in faces {
        let g: Vec<&str> = gallery(*id).into_iter().collect();
        set.upsert(*id, v, &g, *id).unwrap();
    }
    set
}

#[test]
fn finds_the_exact_top_face_of_face_like_queries() {
    let mut rng = Rng::new(5);
    // 12,000 photos of 6,000 people: the shards train their codes on the way.
    let faces = photos(6000, 2, &mut rng);
    let set = filled(&scan_options(DIMS, 2), &faces, |_| None);
    let pairs: Vec<(u64, Vec<f32>)> = faces.iter().map(|(id, v, _)| (*id, v.clone())).collect();
    // Queries: new photos of enrolled people.
    let queries = photos(300, 1, &mut Rng::new(6));
    let mut agree = 0;
    for (_, q, _) in &queries {
        let truth = brute_force(&pairs, q, 1);
        let got = set.search(q, 1, None).unwrap();
        assert!(got.complete());
        agree += (got.hits[0].id == truth[0]) as usize;
    }
    // Unrelated queries have no close face, the hardest case for codes; recall@1 on them:
    let recall = agree as f64 / queries.len() as f64;
    eprintln!("scan recall@1 on stranger queries: {recall:.3}");
    assert!(recall >= 0.9, "recall@1 {recall}");

    // Another photo of an enrolled person: the exact top face must be found.
    let mut hits = 0;
    let asked = 300;
    for (id, v, p) in faces.iter().step_by(faces.len() / asked).take(asked) {
        let truth = brute_force(&pairs, v, 2);
        let got = set.search(v, 2, None).unwrap();
        assert_eq!(got.hits[0].id, *id, "a face finds itself first");
        assert!((got.hits[0].similarity - 1.0).abs() < 2e-3);
        hits += (got.hits[1].id == truth[1]) as usize;
        let _ = p;
    }
    let recall = hits as f64 / asked as f64;
    eprintln!("scan recall of the person's other photo: {recall:.3}");
    assert!(recall >= 0.99, "recall {recall}");
}

#[test]
fn large_gallery_is_filtered_inside_the_scan() {
    let mut rng = Rng::new(9);
    let faces = photos(5000, 2, &mut rng);
    // A quarter of the faces (2,500 per shard: above the direct-scoring threshold).
    let quarter = |id: u64| (id % 4 == 0).then_some("quarter");
    let mut o = scan_options(DIMS, 2);
    o.exact_scan_below = 100;
    let set = filled(&o, &faces, quarter);
    let members: Vec<(u64, Vec<f32>)> = faces.iter().filter(|f| f.0 % 4 == 0).map(|(id, v, _)| (*id, v.clone())).collect();
    // Photos whose person's other photo is a member (ids 4k+3 and 4k+4 are one person).
    for (_, q, _) in faces.iter().filter(|f| f.0 % 4 == 3).step_by(23) {
        let got = set.search(q, 10, Some("quarter")).unwrap();
        assert_eq!(got.hits.len(), 10);
        assert!(got.hits.iter().all(|h| h.id % 4 == 0), "a non-member leaked");
        assert_eq!(got.hits[0].id, brute_force(&members, q, 1)[0]);
    }
    assert!(set.search(&faces[0].1, 5, Some("nobody")).unwrap().hits.is_empty());
}

#[test]
fn a_small_share_of_the_shard_is_scored_member_by_member_exactly() {
    let mut rng = Rng::new(21);
    let faces = photos(5000, 2, &mut rng);
    // One face in a hundred (about 50 per shard of 5,000): a tenant among many. Below a 32nd
    // of the shard, its members are scored one by one even above exact_scan_below.
    let tenant = |id: u64| (id % 100 == 0).then_some("tenant");
    let mut o = scan_options(DIMS, 2);
    o.exact_scan_below = 0;
    let set = filled(&o, &faces, tenant);
    let members: Vec<(u64, Vec<f32>)> = faces.iter().filter(|f| f.0 % 100 == 0).map(|(id, v, _)| (*id, v.clone())).collect();
    for (_, q, _) in faces.iter().step_by(97) {
        let got = set.search(q, 5, Some("tenant")).unwrap();
        assert_eq!(got.faces, members.len() as u64, "the N of the search is the tenant's faces");
        assert!(got.hits.iter().all(|h| h.id % 100 == 0), "a non-member leaked");
        // Exact: the best member first, and each rank's similarity the exact one (f16 storage aside).
        let truth = brute_force(&members, q, 5);
        assert_eq!(got.hits[0].id, truth[0]);
        let exact = |id: u64| dot(q, &members.iter().find(|m| m.0 == id).unwrap().1);
        for (hit, id) in got.hits.iter().zip(&truth) {
            assert!((hit.similarity - exact(*id)).abs() < 2e-3, "{} vs {}", hit.similarity, exact(*id));
        }
    }
}

#[test]
fn deletes_snapshots_and_damage() {
    let mut rng = Rng::new(12);
    let faces = photos(3000, 2, &mut rng);
    let o = scan_options(DIMS, 3);
    let set = filled(&o, &faces, |_| None);
    let removed: Vec<u64> = faces.iter().map(|f| f.0).filter(|id| id % 3 == 0).collect();
    let mut pos = 100_000;
    for id in &removed {
        pos += 1;
        set.remove(*id, pos).unwrap();
    }
    let dir = temp_dir("scan-snapshot");
    let saved: Vec<u64> = set.save_all(&dir).into_iter().map(Result::unwrap).collect();
    assert_eq!(saved.iter().max(), Some(&pos));
    let restored = ShardSet::new(&o).unwrap();
    for r in restored.load_all(&dir) {
        r.unwrap();
    }
    assert_eq!(restored.len(), faces.len() - removed.len());
    for (id, v, _) in faces.iter().step_by(7) {
        let top = restored.search(v, 1, None).unwrap().hits[0].id;
        if id % 3 == 0 {
            assert_ne!(top, *id, "deleted face {id} came back");
        } else {
            assert_eq!(top, *id);
        }
    }

    // A graph set refuses the scan snapshots, and the other way round: rebuild, never misread.
    let graph = ShardSet::new(&options(DIMS, 3, Scalar::F16)).unwrap();
    for r in graph.load_all(&dir) {
        assert_eq!(r.unwrap_err().code(), "SNAPSHOT_INVALID");
    }

    // One flipped byte in shard 1's data: only that shard rebuilds.
    let data = dir.join("shard-1.scan");
    let mut bytes = std::fs::read(&data).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x10;
    std::fs::write(&data, &bytes).unwrap();
    let damaged = ShardSet::new(&o).unwrap();
    let results = damaged.load_all(&dir);
    assert!(results[0].is_ok() && results[2].is_ok());
    assert_eq!(results[1].as_ref().unwrap_err().code(), "SNAPSHOT_INVALID");
    assert_eq!(damaged.needs_rebuild(), vec![1]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn gathered_searches_answer_as_one_by_one() {
    let mut rng = Rng::new(21);
    let faces = photos(4000, 2, &mut rng);
    let mut o = scan_options(DIMS, 2);
    o.gather_max = 16;
    let set = Arc::new(filled(&o, &faces, |id| (id % 2 == 0).then_some("even")));
    let (tx, rx) = mpsc::channel();
    let asked: Vec<(usize, Option<String>)> = (0..200).map(|i| (i * 37 % faces.len(), (i % 3 == 0).then(|| "even".to_string()))).collect();
    std::thread::scope(|s| {
        for chunk in asked.chunks(50) {
            let (set, tx, faces) = (&set, tx.clone(), &faces);
            s.spawn(move || {
                for (i, gallery) in chunk {
                    let tx = tx.clone();
                    let (i, g) = (*i, gallery.clone());
                    set.search_gathered(
                        GatheredSearch { queries: faces[i].1.clone(), n: 3, gallery: gallery.clone(), only: None },
                        Box::new(move |r| tx.send((i, g, r)).unwrap()),
                    );
                }
            });
        }
    });
    drop(tx);
    let answers: Vec<_> = rx.iter().collect();
    assert_eq!(answers.len(), asked.len(), "every gathered search is answered once");
    for (i, gallery, r) in answers {
        let got = r.unwrap();
        let alone = set.search(&faces[i].1, 3, gallery.as_deref()).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].hits, alone.hits);
    }
    // Bad input is answered with its own error.
    let (tx, rx) = mpsc::channel();
    set.search_gathered(GatheredSearch { queries: vec![1.0; 5], n: 1, gallery: None, only: None }, Box::new(move |r| tx.send(r).unwrap()));
    assert_eq!(rx.recv().unwrap().unwrap_err().code(), "BAD_PARAM");
}

#[test]
fn auto_is_the_scan() {
    let mut o = ShardSetOptions::new(8);
    o.shards = 1;
    assert_eq!(o.kind, IndexKind::Auto);
    let set = ShardSet::new(&o).unwrap();
    assert_eq!(set.options().kind, IndexKind::Scan);
}
