//! Fixed input shapes (engine option `fixedShapes`): the batch sizes face models run at, and
//! whether shapes are fixed at all. The detector's fixed sizes are its plan's
//! ([`crate::yunet::BUCKETS`]).
//!
//! A GPU provider prepares for each input shape it meets: TensorRT builds an engine for it
//! (minutes), cuDNN times its convolution algorithms. With shapes that follow each photo and
//! each batch, a fresh host keeps preparing for hours as new sizes arrive. With fixed shapes
//! every input is padded to one of a few sizes, all known at start-up, and the engine runs each
//! once before it reports ready ([`crate::runtime::SessionPlan`]). On the CPU padding only
//! costs time, so by default shapes are fixed exactly when a GPU provider is asked for.

use crate::error::{EngineError, Result};
use crate::providers::Provider;

/// Batch sizes before the cap: each four times the one before, so a padded batch runs at most
/// four times the rows it holds, and a model has at most five sizes to prepare.
pub const BATCH_STEPS: [usize; 4] = [1, 4, 16, 64];

/// The batch size TensorRT tunes its kernels for, when the cap allows: bursts fill batches of
/// this size or more, and one photo's faces (a group) about this many.
pub const OPT_BATCH: usize = 16;

/// Whether inputs are padded to fixed shapes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FixedShapes {
    /// On exactly when a GPU provider (TensorRT or CUDA) is asked for.
    Auto,
    On,
    Off,
}

impl FixedShapes {
    /// `auto`, `on` or `off`.
    pub fn parse(text: &str) -> Result<FixedShapes> {
        match text.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(FixedShapes::Auto),
            "on" => Ok(FixedShapes::On),
            "off" => Ok(FixedShapes::Off),
            other => Err(EngineError::BadParam(format!("fixedShapes must be auto, on or off, not {other:?}"))),
        }
    }

    /// Whether shapes are fixed for sessions on `providers`.
    pub fn resolve(self, providers: &[Provider]) -> bool {
        match self {
            FixedShapes::On => true,
            FixedShapes::Off => false,
            FixedShapes::Auto => providers.iter().any(|p| matches!(p, Provider::TensorRt | Provider::Cuda)),
        }
    }
}

/// The batch sizes of a model whose batches hold at most `max_batch` rows: the steps below the
/// cap, and the cap itself (so a full batch is never padded).
pub fn batch_sizes(max_batch: usize) -> Vec<usize> {
    let max_batch = max_batch.max(1);
    let mut sizes: Vec<usize> = BATCH_STEPS.iter().copied().filter(|&s| s < max_batch).collect();
    sizes.push(max_batch);
    sizes
}

/// The batch size TensorRT's profile is tuned for among `sizes`: [`OPT_BATCH`], or the largest
/// size when the cap is below it.
pub fn opt_batch(sizes: &[usize]) -> usize {
    sizes.iter().copied().filter(|&s| s <= OPT_BATCH).max().unwrap_or(1)
}

/// The size a batch of `rows` runs at: the smallest of `sizes` that holds it (`rows` itself
/// when none does, which chunking by the cap never leaves).
pub fn batch_for(rows: usize, sizes: &[usize]) -> usize {
    sizes.iter().copied().filter(|&s| s >= rows).min().unwrap_or(rows)
}

/// `rows` padded to `size` rows with copies of the first: a real crop, so the padding runs
/// through the model like any input; its results are dropped.
pub fn pad_rows<'a>(rows: &[&'a [u8]], size: usize) -> Vec<&'a [u8]> {
    let mut out = rows.to_vec();
    if let Some(&first) = rows.first() {
        out.resize(size.max(rows.len()), first);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_sizes_stop_at_the_cap() {
        assert_eq!(batch_sizes(16), vec![1, 4, 16]);
        assert_eq!(batch_sizes(32), vec![1, 4, 16, 32]);
        assert_eq!(batch_sizes(64), vec![1, 4, 16, 64]);
        assert_eq!(batch_sizes(100), vec![1, 4, 16, 64, 100]);
        assert_eq!(batch_sizes(10), vec![1, 4, 10]);
        assert_eq!(batch_sizes(1), vec![1]);
        assert_eq!(opt_batch(&batch_sizes(32)), 16);
        assert_eq!(opt_batch(&batch_sizes(10)), 10);
        assert_eq!(opt_batch(&[1]), 1);
    }

    #[test]
    fn batches_round_up_to_the_next_size() {
        let sizes = batch_sizes(32);
        let runs: Vec<usize> = [1, 2, 4, 5, 16, 17, 32].iter().map(|&n| batch_for(n, &sizes)).collect();
        assert_eq!(runs, vec![1, 4, 4, 16, 16, 32, 32]);
        let (a, b) = ([1u8, 2][..].to_vec(), [3u8, 4][..].to_vec());
        let padded = pad_rows(&[&a, &b], 4);
        assert_eq!(padded, vec![&a[..], &b[..], &a[..], &a[..]]);
        assert!(pad_rows(&[], 4).is_empty());
    }

    #[test]
    fn auto_fixes_shapes_for_gpu_providers_only() {
        assert!(FixedShapes::parse("auto").unwrap().resolve(&[Provider::TensorRt, Provider::Cpu]));
        assert!(FixedShapes::parse(" Auto ").unwrap().resolve(&[Provider::Cuda]));
        assert!(!FixedShapes::Auto.resolve(&[Provider::Cpu]));
        assert!(FixedShapes::parse("on").unwrap().resolve(&[Provider::Cpu]));
        assert!(!FixedShapes::parse("off").unwrap().resolve(&[Provider::TensorRt]));
        assert_eq!(FixedShapes::parse("yes").unwrap_err().code(), "BAD_PARAM");
    }
}
