//! The execution providers the engine knows ([`Provider`]) and the GPU providers' options, in
//! one place: a plain description of what TensorRT and CUDA are given for one model
//! ([`ProviderSettings`]), the `ort` providers built from it, and the same options as ONNX
//! Runtime's own key/value pairs ([`ProviderSettings::options`]), which the engine reports
//! (`EngineInfo::sessions`) so that what a GPU host will be given can be read back on a machine
//! without one.
//!
//! Why each option is set is documented on its field. The pairs and the providers are made by
//! two functions side by side; `tests::built_providers_carry_exactly_the_described_options`
//! checks that the providers hold exactly the pairs described.

use std::path::PathBuf;

use ort::ep::{ArenaExtendStrategy, CUDA, TensorRT};

use crate::error::{EngineError, Result};

/// Execution providers the engine knows how to request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    TensorRt,
    Cuda,
    Cpu,
}

impl Provider {
    /// `tensorrt` (or `trt`), `cuda` or `cpu`, in any case.
    pub fn parse(name: &str) -> Result<Provider> {
        match name.trim().to_ascii_lowercase().as_str() {
            "tensorrt" | "trt" => Ok(Provider::TensorRt),
            "cuda" => Ok(Provider::Cuda),
            "cpu" => Ok(Provider::Cpu),
            other => Err(EngineError::BadParam(format!("unknown execution provider {other:?} (expected tensorrt, cuda or cpu)"))),
        }
    }

    /// The provider's name as [`Provider::parse`] reads it and the engine reports it.
    pub fn name(self) -> &'static str {
        match self {
            Provider::TensorRt => "tensorrt",
            Provider::Cuda => "cuda",
            Provider::Cpu => "cpu",
        }
    }
}

/// A TensorRT optimisation profile for the model's one input: every shape the model will be
/// run at lies between `min` and `max`, dimension by dimension, and kernels are tuned for `opt`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    /// The input's name in the ONNX graph (the manifest's `input.name`).
    pub input: String,
    pub min: Vec<i64>,
    pub opt: Vec<i64>,
    pub max: Vec<i64>,
}

impl Profile {
    /// ONNX Runtime's spelling of one shape: `name:1x3x320x320`.
    fn shape(&self, dims: &[i64]) -> String {
        format!("{}:{}", self.input, dims_text(dims))
    }
}

/// `[1, 3, 320, 320]` as `1x3x320x320`.
pub fn dims_text(dims: &[i64]) -> String {
    dims.iter().map(i64::to_string).collect::<Vec<_>>().join("x")
}

/// What TensorRT is given for one model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorRtSettings {
    /// The GPU: the service runs one process per GPU, so always the first one it is shown
    /// (`CUDA_VISIBLE_DEVICES` picks which).
    pub device_id: i32,
    /// Half-precision kernels where TensorRT finds them faster, as on tensor-core GPUs
    /// (engine option `trtFp16`, `FACE_TRT_FP16`; on by default). How far fp16 moves the
    /// embeddings is for the first GPU host to measure; `false` keeps every model in fp32.
    pub fp16: bool,
    /// Folder for built engines and the timing cache: a restart, or a second worker of the same
    /// engine, loads an engine instead of building it again (minutes per model). `None`: built
    /// engines live as long as their session.
    pub cache: Option<PathBuf>,
    /// Every shape the model will be run at, declared up front (fixed shapes only): TensorRT
    /// builds one engine for the whole range at start-up instead of a new one each time an
    /// input falls outside the shapes seen so far, which on a fresh host meant rebuilding for
    /// hours as photo sizes and batch sizes arrived. `None`: TensorRT learns shapes as they come.
    pub profile: Option<Profile>,
}

/// How cuDNN picks a convolution algorithm, per convolution shape it meets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConvSearch {
    /// Times every algorithm the first time a shape is seen: the fastest kernels, paid once per
    /// shape. Right when shapes are fixed, as the warm-up meets every shape before the service
    /// is ready.
    Exhaustive,
    /// cuDNN's own ranking, no timing. Right when shapes follow each photo: an exhaustive search
    /// on every new photo size would land on requests.
    Heuristic,
}

/// What CUDA is given for one model: the provider that runs what TensorRT does not (when both
/// are asked for, the nodes TensorRT cannot take; when TensorRT is absent, everything).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CudaSettings {
    /// As [`TensorRtSettings::device_id`].
    pub device_id: i32,
    /// Exhaustive with fixed shapes, heuristic without (see [`ConvSearch`]).
    pub conv_search: ConvSearch,
    /// Grow the memory arena by what a run asks for rather than to the next power of two: each
    /// worker owns its own sessions, so doubling would reserve up to twice the largest input's
    /// memory per worker and model for nothing, and the largest input is known (the largest
    /// bucket or batch).
    pub arena_same_as_requested: bool,
}

/// Both GPU providers' options for one model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderSettings {
    pub tensorrt: TensorRtSettings,
    pub cuda: CudaSettings,
}

impl ProviderSettings {
    /// The options for a model run at fixed shapes (`profile`) or at whatever comes
    /// (`profile: None`, `fixed_shapes` false).
    pub fn new(fp16: bool, cache: Option<PathBuf>, fixed_shapes: bool, profile: Option<Profile>) -> ProviderSettings {
        ProviderSettings {
            tensorrt: TensorRtSettings { device_id: 0, fp16, cache, profile: if fixed_shapes { profile } else { None } },
            cuda: CudaSettings {
                device_id: 0,
                conv_search: if fixed_shapes { ConvSearch::Exhaustive } else { ConvSearch::Heuristic },
                arena_same_as_requested: true,
            },
        }
    }

    /// The options of each provider in `providers` that takes any (TensorRT, CUDA), as ONNX
    /// Runtime receives them: provider name and key/value pairs in the order they are set.
    pub fn options(&self, providers: &[Provider]) -> Vec<(Provider, Vec<(String, String)>)> {
        providers
            .iter()
            .filter_map(|&p| match p {
                Provider::TensorRt => Some((p, tensorrt_options(&self.tensorrt))),
                Provider::Cuda => Some((p, cuda_options(&self.cuda))),
                Provider::Cpu => None,
            })
            .collect()
    }
}

/// The TensorRT provider for `s`.
pub fn tensorrt(s: &TensorRtSettings) -> TensorRT {
    let mut ep = TensorRT::default().with_device_id(s.device_id).with_fp16(s.fp16);
    if let Some(dir) = &s.cache {
        let dir = dir.display().to_string();
        ep = ep.with_engine_cache(true).with_engine_cache_path(&dir).with_timing_cache(true).with_timing_cache_path(&dir);
    }
    if let Some(p) = &s.profile {
        ep = ep.with_profile_min_shapes(p.shape(&p.min)).with_profile_opt_shapes(p.shape(&p.opt)).with_profile_max_shapes(p.shape(&p.max));
    }
    ep
}

/// [`tensorrt`]'s options as ONNX Runtime's key/value pairs, in the same order.
fn tensorrt_options(s: &TensorRtSettings) -> Vec<(String, String)> {
    // `ort` writes flags as "true" and "false" (ONNX Runtime parses those as well as 1 and 0).
    let flag = |b: bool| b.to_string();
    let mut out = vec![("device_id".to_string(), s.device_id.to_string()), ("trt_fp16_enable".to_string(), flag(s.fp16))];
    if let Some(dir) = &s.cache {
        let dir = dir.display().to_string();
        out.push(("trt_engine_cache_enable".into(), flag(true)));
        out.push(("trt_engine_cache_path".into(), dir.clone()));
        out.push(("trt_timing_cache_enable".into(), flag(true)));
        out.push(("trt_timing_cache_path".into(), dir));
    }
    if let Some(p) = &s.profile {
        out.push(("trt_profile_min_shapes".into(), p.shape(&p.min)));
        out.push(("trt_profile_opt_shapes".into(), p.shape(&p.opt)));
        out.push(("trt_profile_max_shapes".into(), p.shape(&p.max)));
    }
    out
}

/// The CUDA provider for `s`.
pub fn cuda(s: &CudaSettings) -> CUDA {
    let search = match s.conv_search {
        ConvSearch::Exhaustive => ort::ep::cuda::ConvAlgorithmSearch::Exhaustive,
        ConvSearch::Heuristic => ort::ep::cuda::ConvAlgorithmSearch::Heuristic,
    };
    let arena = if s.arena_same_as_requested { ArenaExtendStrategy::SameAsRequested } else { ArenaExtendStrategy::NextPowerOfTwo };
    CUDA::default().with_device_id(s.device_id).with_conv_algorithm_search(search).with_arena_extend_strategy(arena)
}

/// [`cuda`]'s options as ONNX Runtime's key/value pairs, in the same order.
fn cuda_options(s: &CudaSettings) -> Vec<(String, String)> {
    let search = match s.conv_search {
        ConvSearch::Exhaustive => "EXHAUSTIVE",
        ConvSearch::Heuristic => "HEURISTIC",
    };
    let arena = if s.arena_same_as_requested { "kSameAsRequested" } else { "kNextPowerOfTwo" };
    vec![
        ("device_id".into(), s.device_id.to_string()),
        ("cudnn_conv_algo_search".into(), search.into()),
        ("arena_extend_strategy".into(), arena.into()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `{"key": "value", ...}` map a built provider prints in its Debug form: `ort` keeps
    /// its options private, but prints them.
    fn debug_map(pairs: &[(String, String)]) -> String {
        let entries: Vec<String> = pairs
            .iter()
            .map(|(k, v)| format!("{:?}: {:?}", std::ffi::CString::new(k.as_str()).unwrap(), std::ffi::CString::new(v.as_str()).unwrap()))
            .collect();
        format!("{{{}}}", entries.join(", "))
    }

    fn profile() -> Profile {
        Profile { input: "input".into(), min: vec![1, 3, 320, 320], opt: vec![1, 3, 1280, 1280], max: vec![1, 3, 1280, 1280] }
    }

    #[test]
    fn provider_names() {
        assert_eq!(Provider::parse("TensorRT").unwrap(), Provider::TensorRt);
        assert_eq!(Provider::parse("cuda").unwrap(), Provider::Cuda);
        assert_eq!(Provider::parse(" cpu ").unwrap(), Provider::Cpu);
        assert_eq!(Provider::parse("rocm").unwrap_err().code(), "BAD_PARAM");
    }

    #[test]
    fn built_providers_carry_exactly_the_described_options() {
        for (fp16, cache, fixed) in [(true, Some(PathBuf::from("/data/trt-cache")), true), (false, None, false), (true, None, true)] {
            let s = ProviderSettings::new(fp16, cache.clone(), fixed, Some(profile()));
            let described = s.options(&[Provider::TensorRt, Provider::Cuda, Provider::Cpu]);
            assert_eq!(described.len(), 2, "cpu takes no options");
            let trt = format!("{:?}", tensorrt(&s.tensorrt));
            assert_eq!(trt, format!("TensorRT(ExecutionProviderOptions({}))", debug_map(&described[0].1)));
            let cuda = format!("{:?}", cuda(&s.cuda));
            assert_eq!(cuda, format!("CUDA(ExecutionProviderOptions({}))", debug_map(&described[1].1)));
        }
    }

    #[test]
    fn profiles_and_exhaustive_search_come_with_fixed_shapes_only() {
        let fixed = ProviderSettings::new(true, None, true, Some(profile()));
        let pairs = &fixed.options(&[Provider::TensorRt])[0].1;
        let get = |k: &str| pairs.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str());
        assert_eq!(get("trt_profile_min_shapes"), Some("input:1x3x320x320"));
        assert_eq!(get("trt_profile_opt_shapes"), Some("input:1x3x1280x1280"));
        assert_eq!(get("trt_profile_max_shapes"), Some("input:1x3x1280x1280"));
        assert_eq!(get("trt_fp16_enable"), Some("true"));
        assert_eq!(fixed.cuda.conv_search, ConvSearch::Exhaustive);
        let free = ProviderSettings::new(false, None, false, Some(profile()));
        let pairs = &free.options(&[Provider::TensorRt])[0].1;
        assert!(pairs.iter().all(|(k, _)| !k.starts_with("trt_profile")));
        assert!(pairs.contains(&("trt_fp16_enable".into(), "false".into())));
        assert_eq!(free.cuda.conv_search, ConvSearch::Heuristic);
    }
}
