//! Photos/s and faces/s per photo set, batch size and task, through the engine's own queues
//! (`Engine::submit`, as the service calls it), with a closed loop keeping a fixed number of
//! requests in flight.

use std::collections::HashSet;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use face_engine::{AnalyzeOptions, Engine, EngineInfo};
use serde::Serialize;

/// A set of photos and each photo's faces as the engine found them (the embed task's boxes).
pub struct PhotoSet {
    pub name: String,
    pub photos: Vec<Vec<u8>>,
    pub boxes: Vec<Vec<[f32; 4]>>,
}

impl PhotoSet {
    pub fn faces(&self) -> usize {
        self.boxes.iter().map(Vec::len).sum()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Task {
    #[serde(rename = "detect")]
    Detect,
    #[serde(rename = "embed")]
    Embed,
    #[serde(rename = "detect + embed")]
    DetectEmbed,
}

impl Task {
    pub fn name(self) -> &'static str {
        match self {
            Task::Detect => "detect",
            Task::Embed => "embed",
            Task::DetectEmbed => "detect + embed",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Row {
    pub mode: String,
    pub set: String,
    pub batch: usize,
    pub task: Task,
    pub in_flight: usize,
    pub photos_per_second: f64,
    pub faces_per_second: f64,
    /// The recogniser's own run time per face (all its models, summed over the workers).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recognizer_ms_per_face: Option<f64>,
    /// Rows handed to each recogniser model per call, the mean over its calls (a face is one
    /// row, two with its mirror image; a call runs in batches of at most `batch`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rows_per_call: Option<f64>,
    pub failures: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_failure: Option<String>,
}

impl Row {
    pub fn line(&self) -> String {
        let mut line = format!(
            "  {}, batch {}, {}, {} in flight: {:.1} photos/s, {:.1} faces/s",
            self.set,
            self.batch,
            self.task.name(),
            self.in_flight,
            self.photos_per_second,
            self.faces_per_second
        );
        if let (Some(ms), Some(rows)) = (self.recognizer_ms_per_face, self.rows_per_call) {
            line += &format!("; recogniser {ms:.2} ms/face, {rows:.1} rows/call");
        }
        if self.failures > 0 {
            line += &format!("; {} failed, the first: {}", self.failures, self.first_failure.as_deref().unwrap_or(""));
        }
        line
    }
}

struct Loop {
    calls: usize,
    faces: usize,
    failures: usize,
    first_failure: Option<String>,
    seconds: f64,
}

/// Keeps `in_flight` requests outstanding for `time`, then waits for the last; `request(k)`
/// gives the k-th request's photo and options.
fn closed_loop(engine: &Engine, in_flight: usize, time: Duration, request: &dyn Fn(usize) -> (Vec<u8>, AnalyzeOptions)) -> Loop {
    let (tx, rx) = mpsc::channel::<Result<usize, String>>();
    let start = Instant::now();
    let deadline = start + time;
    let mut out = Loop { calls: 0, faces: 0, failures: 0, first_failure: None, seconds: 0.0 };
    let mut next = 0;
    let mut outstanding = 0;
    let fail = |out: &mut Loop, e: String| {
        out.failures += 1;
        out.first_failure.get_or_insert(e);
    };
    let submit = |out: &mut Loop, k: usize| -> bool {
        let (bytes, opts) = request(k);
        let tx = tx.clone();
        match engine.submit(bytes, opts, move |r| {
            let _ = tx.send(r.map(|a| a.faces.len()).map_err(|e| e.to_string()));
        }) {
            Ok(()) => true,
            Err(e) => {
                fail(out, e.to_string());
                false
            }
        }
    };
    for _ in 0..in_flight {
        outstanding += usize::from(submit(&mut out, next));
        next += 1;
    }
    while outstanding > 0 {
        let Ok(result) = rx.recv() else { break };
        outstanding -= 1;
        match result {
            Ok(n) => {
                out.calls += 1;
                out.faces += n;
            }
            Err(e) => fail(&mut out, e),
        }
        if Instant::now() < deadline {
            outstanding += usize::from(submit(&mut out, next));
            next += 1;
        }
    }
    out.seconds = start.elapsed().as_secs_f64();
    out
}

/// Positions in `info.models` (telemetry slots) of the recogniser's models.
pub fn recognizer_slots(info: &EngineInfo) -> HashSet<u16> {
    let ids: HashSet<&str> = info.recognizer.split('+').map(|part| part.split(':').next().unwrap_or(part)).collect();
    info.models.iter().enumerate().filter(|(_, (id, _))| ids.contains(id.as_str())).map(|(i, _)| i as u16).collect()
}

/// The recogniser's seconds and mean rows per call since the last drain.
fn recognizer_runs(engine: &Engine, slots: &HashSet<u16>) -> (f64, Option<f64>) {
    let runs = engine.drain_telemetry().runs;
    let mine: Vec<_> = runs.iter().filter(|r| slots.contains(&r.model)).collect();
    let seconds = mine.iter().map(|r| f64::from(r.seconds)).sum();
    let rows: u64 = mine.iter().map(|r| u64::from(r.batch)).sum();
    (seconds, (!mine.is_empty()).then(|| rows as f64 / mine.len() as f64))
}

/// Detection only.
pub const NONE: AnalyzeOptions = AnalyzeOptions { embed: false, age: false, gender: false, emotions: false, boxes: None, thumbnail: None };

/// Every task on every set with one engine (opened at one batch size with `workers` inference
/// workers), `time` each after a warm loop of a quarter of it (at most 1 s).
#[allow(clippy::too_many_arguments)]
pub fn measure(engine: &Engine, workers: usize, mode: &str, batch: usize, sets: &[PhotoSet], tasks: &[Task], time: Duration, log: &mut dyn FnMut(String)) -> Vec<Row> {
    let slots = recognizer_slots(&engine.info());
    let mut rows = Vec::new();
    for set in sets {
        let faces_per_photo = set.faces() as f64 / set.photos.len() as f64;
        // Photos: one per batch row on each worker, at most 16 per worker (the detector takes one
        // window per run whatever the batch, so more would only lengthen the queue).
        let photo_in_flight = workers.max((batch * workers).min(16 * workers));
        // Caller boxes: faces enough for two full batches on each worker.
        let embed_in_flight = workers.max(((2 * batch * workers) as f64 / faces_per_photo.max(1.0)).ceil() as usize);
        for &task in tasks {
            let photo = |k: usize| set.photos[k % set.photos.len()].clone();
            let request: Box<dyn Fn(usize) -> (Vec<u8>, AnalyzeOptions)> = match task {
                Task::Detect => Box::new(move |k| (photo(k), NONE)),
                Task::Embed => Box::new(move |k| (photo(k), AnalyzeOptions { embed: true, boxes: Some(set.boxes[k % set.photos.len()].clone()), ..NONE })),
                Task::DetectEmbed => Box::new(move |k| (photo(k), AnalyzeOptions { embed: true, ..NONE })),
            };
            let in_flight = if task == Task::Embed { embed_in_flight } else { photo_in_flight };
            closed_loop(engine, in_flight, (time / 4).min(Duration::from_secs(1)), &request); // warm: caches, allocators
            recognizer_runs(engine, &slots);
            let r = closed_loop(engine, in_flight, time, &request);
            let (rec_seconds, rows_per_call) = recognizer_runs(engine, &slots);
            let measured_recognizer = task != Task::Detect && rec_seconds > 0.0 && r.faces > 0;
            let row = Row {
                mode: mode.to_string(),
                set: set.name.clone(),
                batch,
                task,
                in_flight,
                photos_per_second: r.calls as f64 / r.seconds,
                faces_per_second: r.faces as f64 / r.seconds,
                recognizer_ms_per_face: measured_recognizer.then(|| rec_seconds * 1000.0 / r.faces as f64),
                rows_per_call: if measured_recognizer { rows_per_call } else { None },
                failures: r.failures,
                first_failure: r.first_failure,
            };
            log(row.line());
            rows.push(row);
        }
    }
    rows
}
