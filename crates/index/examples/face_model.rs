//! Fits the synthetic face generator (examples/faces/mod.rs) to the real SFace embeddings
//! and checks it: a synthetic set with the real set's people and photo counts must show the
//! same same-person and different-person cosines and the same nearest-neighbour statistics.
//!
//!     node dist/bench/search/face-vectors.js        # once: bench/data/sface-real.{f32,json}
//!     cargo run --release -p face-index --example face_model
//!
//! Then the same check through the index: each set split as the index bench splits it (a
//! person's first photo enrolled, their other photos the queries, people with one photo as
//! distractors) goes into one HNSW graph, and recall and rank-1 at small candidate lists
//! show whether synthetic faces are as easy or as hard for the graph as real ones.
//!
//! Options: --real STEM (bench/data/sface-real), --within full|diagonal|both (both),
//! --no-spread (one more column: every photo with the pooled noise, no per-photo scale),
//! --efs (10,16,32,64,128; below 10 is 10, the candidates asked for), --seed (1), --threads (cores). The numbers are in
//! docs/face-vectors.md.

mod faces;

use std::path::PathBuf;
use std::time::Instant;

use face_index::{dot, Scalar, ShardSet, ShardSetOptions};
use faces::{FaceModel, FitReport, SetStats, Spectrum, Within};

fn main() {
    let mut stem = faces::default_stem();
    let mut withins = vec![Within::Full, Within::Diagonal];
    let mut seed = 1u64;
    let mut threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut efs = vec![10, 16, 32, 64, 128];
    let mut no_spread = false;
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut val = || it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--real" => stem = PathBuf::from(val()),
            "--within" => {
                withins = match val().as_str() {
                    "full" => vec![Within::Full],
                    "diagonal" => vec![Within::Diagonal],
                    "both" => vec![Within::Full, Within::Diagonal],
                    other => panic!("--within full|diagonal|both, not {other}"),
                }
            }
            "--seed" => seed = val().parse().expect("--seed"),
            "--no-spread" => no_spread = true,
            "--efs" => {
                efs = val()
                    .split(',')
                    .map(|v| v.parse().expect("--efs"))
                    .collect()
            }
            "--threads" => threads = val().parse().expect("--threads"),
            other => panic!("unknown option {other}"),
        }
    }

    let real = faces::load_real(&stem).unwrap_or_else(|e| panic!("{e}"));
    println!(
        "real: {} faces x {} dims ({}) from {}",
        real.count(),
        real.dims,
        real.model,
        stem.display()
    );

    // The real set as the statistics see it: known people only, labelled 0..P.
    let people = real.people();
    let mut vectors = Vec::new();
    let mut person = Vec::new();
    for (p, rows) in people.iter().enumerate() {
        for &r in rows {
            vectors.extend_from_slice(real.row(r));
            person.push(p as u32);
        }
    }
    let counts: Vec<u32> = people.iter().map(|r| r.len() as u32).collect();
    let t = Instant::now();
    let real_stats = faces::set_stats(&vectors, &person, real.dims, threads);
    println!("real statistics in {:.1}s", t.elapsed().as_secs_f64());

    let mut columns = vec![("real".to_string(), real_stats)];
    let mut graphs = vec![(
        "real".to_string(),
        graph_check(&vectors, &person, real.dims, &efs),
    )];
    let mut variants: Vec<(Within, bool)> = withins.iter().map(|&w| (w, true)).collect();
    if no_spread {
        variants.push((withins[0], false));
    }
    for (within, spread) in variants {
        let (mut model, report) = FaceModel::fit(&real, within);
        if within == withins[0] && spread {
            print_fit(&report);
        }
        if !spread {
            model.spreads = vec![vec![1.0]];
        }
        let label = format!(
            "synthetic, {} within{}",
            name(within),
            if spread { "" } else { ", no spread" }
        );
        // Same people, same photo counts: only the vectors differ.
        let t = Instant::now();
        let synthetic = model.generate(&counts, seed, 0, threads);
        let gen_s = t.elapsed().as_secs_f64();
        let stats = faces::set_stats(&synthetic, &person, real.dims, threads);
        println!(
            "{label}: {} photos generated in {:.3}s ({:.0} faces/s)",
            person.len(),
            gen_s,
            person.len() as f64 / gen_s
        );
        graphs.push((
            label.clone(),
            graph_check(&synthetic, &person, real.dims, &efs),
        ));
        columns.push((label, stats));
    }
    print_comparison(&columns);
    print_graphs(&graphs, &efs);
}

/// Rank-1 of exact search, then per candidate list size (recall@1, recall@10, rank-1) of
/// the queries against exact search.
type GraphCheck = (f64, Vec<(f64, f64, f64)>);

/// Rows are grouped by person (`person` ascending). Gallery: every person's first photo;
/// queries: the other photos. One f32 shard built on one thread, so the graph depends on
/// the data alone.
fn graph_check(vectors: &[f32], person: &[u32], d: usize, efs: &[usize]) -> GraphCheck {
    let mut gallery = Vec::new();
    let mut gallery_person = Vec::new();
    let mut queries = Vec::new();
    let mut query_person = Vec::new();
    for (r, &p) in person.iter().enumerate() {
        let row = &vectors[r * d..(r + 1) * d];
        if r == 0 || person[r - 1] != p {
            gallery.extend_from_slice(row);
            gallery_person.push(p);
        } else {
            queries.extend_from_slice(row);
            query_person.push(p);
        }
    }
    let truth: Vec<Vec<u64>> = queries
        .chunks_exact(d)
        .map(|q| {
            let mut all: Vec<(f32, u64)> = gallery
                .chunks_exact(d)
                .enumerate()
                .map(|(i, g)| (dot(q, g), i as u64 + 1))
                .collect();
            all.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            all.into_iter().take(10).map(|h| h.1).collect()
        })
        .collect();
    let exact_rank1 = truth
        .iter()
        .zip(&query_person)
        .filter(|(t, &p)| gallery_person[t[0] as usize - 1] == p)
        .count() as f64
        / query_person.len() as f64;
    let ids: Vec<u64> = (1..=gallery_person.len() as u64).collect();
    let none: Vec<Vec<&str>> = Vec::new();
    let rows = efs
        .iter()
        .map(|&ef| {
            let mut o = ShardSetOptions::new(d);
            o.shards = 1;
            o.threads = 1;
            o.scalar = Scalar::F32;
            o.expansion_search = ef;
            // The graph's own answer: no extra candidates beyond the ten asked for.
            o.oversample = 1;
            let set = ShardSet::new(&o).unwrap();
            set.rebuild_batch(&ids, &gallery, &none).unwrap();
            set.finish_rebuild(0, 0).unwrap();
            let (mut r1, mut r10, mut ident) = (0usize, 0usize, 0usize);
            for ((q, t), &p) in queries.chunks_exact(d).zip(&truth).zip(&query_person) {
                let hits: Vec<u64> = set
                    .search(q, 10, None)
                    .unwrap()
                    .hits
                    .iter()
                    .map(|h| h.id)
                    .collect();
                r1 += (hits.first() == t.first()) as usize;
                r10 += hits.iter().filter(|h| t.contains(h)).count();
                ident += hits
                    .first()
                    .is_some_and(|&h| gallery_person[h as usize - 1] == p)
                    as usize;
            }
            let q = query_person.len() as f64;
            (r1 as f64 / q, r10 as f64 / (q * 10.0), ident as f64 / q)
        })
        .collect();
    (exact_rank1, rows)
}

fn print_graphs(graphs: &[(String, GraphCheck)], efs: &[usize]) {
    println!();
    println!("One HNSW graph (f32, usearch defaults) of each set's enrolled photos and one-photo people; recall@1 / recall@10 / rank-1 of the other photos:");
    println!();
    print!("| ef |");
    for (name, _) in graphs {
        print!(" {name} |");
    }
    println!();
    println!("|{}|", vec!["---"; graphs.len() + 1].join("|"));
    print!("| exact |");
    for (_, g) in graphs {
        print!(" 1 / 1 / {:.4} |", g.0);
    }
    println!();
    for (i, ef) in efs.iter().enumerate() {
        print!("| {ef} |");
        for (_, g) in graphs {
            let (a, b, c) = g.1[i];
            print!(" {a:.4} / {b:.4} / {c:.4} |");
        }
        println!();
    }
}

fn name(w: Within) -> &'static str {
    match w {
        Within::Full => "full",
        Within::Diagonal => "diagonal",
    }
}

fn print_spectrum(what: &str, s: &Spectrum) {
    println!(
        "  {what}: trace {:.4}, eigenvalues {:.3e} .. {:.3e} (condition {:.0}), effective dims {:.1}",
        s.trace,
        s.smallest,
        s.largest,
        s.largest / s.smallest,
        s.effective_dims
    );
}

fn print_fit(r: &FitReport) {
    println!(
        "fit: {} known faces of {} people; {} people with 2+ photos ({} photos, {} within-person degrees of freedom); \
         photos per person mean {:.2}, max {}",
        r.rows, r.people, r.people_with_two, r.photos_of_people_with_two, r.within_dof, r.mean_photos_per_person, r.max_photos_per_person
    );
    print_spectrum("within-person covariance", &r.within);
    print_spectrum("centre covariance, observed", &r.centres_observed);
    print_spectrum(
        if r.centres_uncorrected {
            "centre covariance (uncorrected: the corrected one is not positive definite)"
        } else {
            "centre covariance, less photo noise"
        },
        &r.centres,
    );
    println!(
        "  mean 1/n over people {:.3}; |mean centre| {:.4}; centre length a {:.4} (a² {:.4} + within trace {:.4} = {:.4})",
        r.noise_share,
        r.centre_mean_norm,
        r.centre_norm,
        r.centre_norm.powi(2),
        r.within.trace,
        r.centre_norm.powi(2) + r.within.trace
    );
    let q = r.spread_quantiles;
    println!(
        "  photo noise scale ({} photos of {} people with 3+): p1 {:.3}, p10 {:.3}, p50 {:.3}, p90 {:.3}, p99 {:.3}; \
         {:.0}% of the variance of its log lies between people",
        r.spread_photos, r.spread_people, q[0], q[1], q[2], q[3], q[4], r.spread_between_people * 100.0
    );
}

fn print_comparison(columns: &[(String, SetStats)]) {
    println!();
    print!("| {:<44} |", "measure");
    for (name, _) in columns {
        print!(" {:>26} |", name);
    }
    println!();
    println!("|{}|", vec!["---"; columns.len() + 1].join("|"));
    let row = |label: &str, f: &dyn Fn(&SetStats) -> String| {
        print!("| {:<44} |", label);
        for (_, s) in columns {
            print!(" {:>26} |", f(s));
        }
        println!();
    };
    row("photos / same pairs / different pairs", &|s| {
        format!(
            "{} / {} / {}",
            s.photos,
            s.same.count(),
            s.different.count()
        )
    });
    for (label, h) in [
        (
            "same-person cosine",
            (|s: &SetStats| &s.same) as fn(&SetStats) -> &faces::Histogram,
        ),
        ("different-person cosine", |s| &s.different),
        ("nearest neighbour cosine (any)", |s| &s.nearest),
        ("nearest same-person cosine", |s| &s.nearest_same),
        ("nearest different-person cosine", |s| &s.nearest_different),
    ] {
        row(&format!("{label}: mean"), &|s| {
            format!("{:.4}", h(s).mean())
        });
        for (q, ql) in [(0.01, "p1"), (0.5, "p50"), (0.99, "p99")] {
            row(&format!("{label}: {ql}"), &|s| {
                format!("{:.4}", h(s).quantile(q))
            });
        }
    }
    row("different-person cosine: p99.9", &|s| {
        format!("{:.4}", s.different.quantile(0.999))
    });
    row("different-person cosine: p99.99", &|s| {
        format!("{:.4}", s.different.quantile(0.9999))
    });
    for (t, what) in [(0.3773, "default 0.3773"), (0.471, "strict 0.471")] {
        row(&format!("different pairs above {what}"), &|s| {
            format!("{:.2e}", s.different.share_above(t))
        });
        row(&format!("same pairs at or below {what}"), &|s| {
            format!("{:.4}", 1.0 - s.same.share_above(t))
        });
    }
    row("nearest neighbour is same person (2+ photos)", &|s| {
        format!(
            "{:.4} ({}/{})",
            s.rank1_hits as f64 / s.rank1_of.max(1) as f64,
            s.rank1_hits,
            s.rank1_of
        )
    });
}
