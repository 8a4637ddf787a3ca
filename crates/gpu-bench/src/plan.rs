//! What one run measures: a JSON plan written by `npm run bench:gpu` (from the service's
//! settings) or by `npm run gpu:pack` (for a GPU host), with a few command-line overrides.
//! Relative paths in the plan are taken from the plan's own folder, so a pack can be unpacked
//! anywhere.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use face_engine::EngineOptions;
use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    /// The engine's options, as the service's settings give them.
    pub engine: EngineOptions,
    /// Recogniser modes to measure, one after the other; the first also gets the detect-only
    /// rows and the time to first answer.
    pub modes: Vec<String>,
    /// The `medium` preset's cosine per recogniser (full spec name), from the service's
    /// calibration: the verdicts the fp16 comparison counts.
    pub medium_cosine: HashMap<String, f64>,
    pub batches: Vec<usize>,
    /// Photo sets: `demo` (the demo photos as they are), `12mp` (each placed in a 4000x3000 frame).
    pub sets: Vec<String>,
    /// Measured time per throughput row, ms.
    pub time_ms: u64,
    /// Folder of the demo photos (`sample1.jpg` ... `sample6.jpg`).
    pub demo_photos: PathBuf,
    /// Folder of the labelled dev set (`labels.json` and its photos), for fp16 against fp32.
    pub dev_set: Option<PathBuf>,
    /// A copy of the model folder stored in float16 (`bench/engine/fp16-models.py`): the fp16
    /// side loads it, which is how fp16 runs where TensorRT (which has its own flag) is absent.
    pub fp16_models: Option<PathBuf>,
    pub first_answer: bool,
    pub precision: bool,
    /// Whether the detector probe ([`crate::probe`]) runs before the throughput rows.
    #[serde(default)]
    pub probe: bool,
    /// What one H100-class GPU should give, end to end (faces/s).
    pub goal_faces_per_second: f64,
}

impl Plan {
    /// Reads the plan at `file` and makes its paths absolute.
    pub fn load(file: &Path) -> Result<Plan, String> {
        let text = std::fs::read_to_string(file).map_err(|e| format!("cannot read plan {}: {e}", file.display()))?;
        let mut plan: Plan = serde_json::from_str(&text).map_err(|e| format!("plan {}: {e}", file.display()))?;
        let base = file.parent().map(Path::to_path_buf).unwrap_or_default();
        let at = |p: &Path| if p.is_absolute() { p.to_path_buf() } else { base.join(p) };
        plan.engine.model_dir = at(&plan.engine.model_dir);
        plan.engine.ort_library = at(&plan.engine.ort_library);
        plan.demo_photos = at(&plan.demo_photos);
        plan.dev_set = plan.dev_set.as_deref().map(at);
        plan.fp16_models = plan.fp16_models.as_deref().map(at);
        Ok(plan)
    }

    /// Applies `--name value` overrides (see [`crate::USAGE`]).
    pub fn apply(&mut self, args: &Args) -> Result<(), String> {
        if let Some(p) = &args.providers {
            self.engine.providers = list(p);
        }
        if let Some(l) = &args.ort_library {
            self.engine.ort_library = l.clone();
        }
        if let Some(m) = &args.modes {
            self.modes = list(m);
        }
        if let Some(b) = &args.batches {
            self.batches = list(b).iter().map(|n| n.parse().ok().filter(|&n: &usize| n > 0).ok_or(format!("--batches takes positive whole numbers, not {n}"))).collect::<Result<_, _>>()?;
        }
        if let Some(s) = &args.sets {
            self.sets = list(s);
        }
        if let Some(t) = args.time_ms {
            self.time_ms = t;
        }
        if args.no_start {
            self.first_answer = false;
        }
        if args.no_precision {
            self.precision = false;
        }
        if args.probe {
            self.probe = true;
        }
        if let Some(w) = args.workers {
            self.engine.inference_workers = w;
        }
        if let Some(t) = args.pipeline_threads {
            self.engine.pipeline_threads = t;
        }
        Ok(())
    }
}

fn list(text: &str) -> Vec<String> {
    text.split(',').map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect()
}

/// The command line.
#[derive(Debug, Default)]
pub struct Args {
    pub plan: Option<PathBuf>,
    pub json: Option<PathBuf>,
    pub providers: Option<String>,
    pub ort_library: Option<PathBuf>,
    pub modes: Option<String>,
    pub batches: Option<String>,
    pub sets: Option<String>,
    pub time_ms: Option<u64>,
    pub workers: Option<usize>,
    pub pipeline_threads: Option<usize>,
    pub no_start: bool,
    pub no_precision: bool,
    pub probe: bool,
    /// Internal: run as the fresh process of the time-to-first-answer check.
    pub first_answer: Option<FirstAnswerArgs>,
}

/// What the parent hands the fresh process of one first-answer run.
#[derive(Debug, Default)]
pub struct FirstAnswerArgs {
    pub mode: String,
    pub tensorrt_cache: PathBuf,
    pub fixed_shapes: String,
}

impl Args {
    pub fn parse(mut it: impl Iterator<Item = String>) -> Result<Args, String> {
        let mut a = Args::default();
        let mut first = FirstAnswerArgs::default();
        let mut first_answer = false;
        while let Some(flag) = it.next() {
            let mut value = || it.next().ok_or(format!("{flag} needs a value"));
            match flag.as_str() {
                "--plan" => a.plan = Some(value()?.into()),
                "--json" => a.json = Some(value()?.into()),
                "--providers" => a.providers = Some(value()?),
                "--ort-library" => a.ort_library = Some(value()?.into()),
                "--modes" => a.modes = Some(value()?),
                "--batches" => a.batches = Some(value()?),
                "--sets" => a.sets = Some(value()?),
                "--time" => a.time_ms = Some(value()?.parse().map_err(|_| "--time takes milliseconds")?),
                "--workers" => a.workers = Some(value()?.parse().map_err(|_| "--workers takes a count")?),
                "--pipeline-threads" => a.pipeline_threads = Some(value()?.parse().map_err(|_| "--pipeline-threads takes a count")?),
                "--no-start" => a.no_start = true,
                "--no-precision" => a.no_precision = true,
                "--probe" => a.probe = true,
                "--first-answer" => {
                    first_answer = true;
                    first.mode = value()?;
                }
                "--trt-cache" => first.tensorrt_cache = value()?.into(),
                "--fixed-shapes" => first.fixed_shapes = value()?,
                other => return Err(format!("unknown argument {other}")),
            }
        }
        if first_answer {
            a.first_answer = Some(first);
        }
        Ok(a)
    }
}
