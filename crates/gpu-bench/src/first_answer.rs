//! Time to first answer: a fresh process (this binary with `--first-answer`) opens the engine
//! and answers one photo; the parent times the lines it prints from the moment it spawned it,
//! so loading ONNX Runtime, building sessions and the warm-up all count. First with a new,
//! empty TensorRT cache folder (cold), then with the folder that run filled (warm), then with
//! shapes following each photo (no warm-up: the preparing falls on the first requests).

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use face_engine::{AnalyzeOptions, Engine};
use serde::Serialize;

use crate::photos;
use crate::plan::{FirstAnswerArgs, Plan};

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FirstAnswer {
    pub run: String,
    pub fixed_shapes: bool,
    /// Spawn to the engine opened, warm-up included.
    pub open_ms: f64,
    /// Spawn to the first photo's answer.
    pub first_answer_ms: f64,
    pub warmup_ms: f64,
    pub cache_files: usize,
    pub cache_bytes: u64,
}

const OPENED: &str = "opened";
const ANSWERED: &str = "answered";

/// In the child: open, print, answer one photo, print.
pub fn child(plan: &Plan, args: &FirstAnswerArgs) -> Result<(), String> {
    let mut options = plan.engine.clone();
    options.recognizer = Some(args.mode.clone());
    options.tensorrt_cache = Some(args.tensorrt_cache.clone());
    options.fixed_shapes = args.fixed_shapes.clone();
    let engine = Engine::open(options).map_err(|e| e.to_string())?;
    let info = engine.info();
    let warmup_ms: f64 = info.warmup.iter().map(|w| w.ms).fold(0.0, |n, ms| n + ms); // not sum(): an empty one is -0
    let mut out = std::io::stdout().lock();
    let say = |out: &mut std::io::StdoutLock, line: String| writeln!(out, "{line}").and_then(|()| out.flush()).map_err(|e| e.to_string());
    say(&mut out, format!("{OPENED} {warmup_ms} {}", info.fixed_shapes))?;
    let photo = photos::read(&plan.demo_photos.join(photos::FIRST_PHOTO))?;
    engine.analyze(&photo, &AnalyzeOptions { embed: true, ..AnalyzeOptions::default() }).map_err(|e| e.to_string())?;
    say(&mut out, ANSWERED.to_string())
}

/// Runs `exe` (this binary) as a fresh process answering one photo.
fn run_child(exe: &Path, plan_file: &Path, overrides: &[String], mode: &str, cache: &Path, fixed_shapes: &str) -> Result<(f64, f64, f64, bool), String> {
    let start = Instant::now();
    let mut child = Command::new(exe)
        .arg("--plan")
        .arg(plan_file)
        .args(overrides)
        .args(["--first-answer", mode, "--fixed-shapes", fixed_shapes, "--trt-cache"])
        .arg(cache)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("cannot start the first-answer process: {e}"))?;
    let stdout = child.stdout.take().expect("piped");
    let (mut open_ms, mut answer_ms, mut warmup_ms, mut fixed) = (None, None, 0.0, false);
    for line in BufReader::new(stdout).lines() {
        let line = line.map_err(|e| e.to_string())?;
        let at = start.elapsed().as_secs_f64() * 1000.0;
        let mut words = line.split_whitespace();
        match words.next() {
            Some(OPENED) => {
                open_ms = Some(at);
                warmup_ms = words.next().and_then(|w| w.parse().ok()).unwrap_or(0.0);
                fixed = words.next() == Some("true");
            }
            Some(ANSWERED) => answer_ms = Some(at),
            _ => {}
        }
    }
    let status = child.wait().map_err(|e| e.to_string())?;
    match (status.success(), open_ms, answer_ms) {
        (true, Some(o), Some(a)) => Ok((o, a, warmup_ms, fixed)),
        _ => Err(format!("first-answer process ended with {status} before answering")),
    }
}

fn folder_size(dir: &Path) -> (usize, u64) {
    let mut out = (0, 0);
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let Ok(meta) = entry.metadata() else { continue };
        if meta.is_dir() {
            let (f, b) = folder_size(&entry.path());
            out = (out.0 + f, out.1 + b);
        } else {
            out = (out.0 + 1, out.1 + meta.len());
        }
    }
    out
}

/// The three runs, in a cache folder of their own under `scratch`; the first two with the
/// plan's `fixed_shapes`.
pub fn measure(plan_file: &Path, overrides: &[String], mode: &str, fixed_shapes: &str, scratch: &Path, log: &mut dyn FnMut(String)) -> Result<Vec<FirstAnswer>, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let cache: PathBuf = scratch.join(format!("trt-cache-{}", std::process::id()));
    std::fs::create_dir_all(&cache).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for (run, fixed_shapes) in [("cold cache", fixed_shapes), ("warm cache", fixed_shapes), ("fixed shapes off", "off")] {
        let result = run_child(&exe, plan_file, overrides, mode, &cache, fixed_shapes);
        let (open_ms, first_answer_ms, warmup_ms, fixed) = match result {
            Ok(r) => r,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&cache);
                return Err(e);
            }
        };
        let (cache_files, cache_bytes) = folder_size(&cache);
        log(format!(
            "  {run} (fixed shapes {}): open {:.2} s (warm-up {:.2} s), first answer {:.2} s after start; cache {cache_files} files, {:.1} MiB",
            if fixed { "on" } else { "off" },
            open_ms / 1000.0,
            warmup_ms / 1000.0,
            first_answer_ms / 1000.0,
            cache_bytes as f64 / f64::from(1 << 20)
        ));
        out.push(FirstAnswer { run: run.to_string(), fixed_shapes: fixed, open_ms, first_answer_ms, warmup_ms, cache_files, cache_bytes });
    }
    let _ = std::fs::remove_dir_all(&cache);
    Ok(out)
}
