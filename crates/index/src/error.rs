//! The crate's one error type, with a stable code for the napi layer.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error("vector has {got} dimensions, the index expects {expected}")]
    Dimensions { expected: usize, got: usize },
    #[error("vector contains a NaN or infinite component")]
    NonFinite,
    #[error("vector has zero length and cannot be normalised")]
    ZeroVector,
    #[error("invalid option: {0}")]
    BadOption(String),
    #[error("shard {0} does not exist")]
    NoSuchShard(usize),
    #[error("shard {0} has failed and must be rebuilt")]
    ShardFailed(usize),
    #[error("shard {shard} dropped buffered changes up to position {position}: replay the change log past it first")]
    Behind { shard: usize, position: u64 },
    #[error("shard {shard} is {state} and cannot do that now")]
    WrongState { shard: usize, state: &'static str },
    /// The snapshot cannot be trusted: the caller must rebuild this shard from the database.
    #[error("snapshot of shard {shard} at {path} is unusable: {reason}")]
    Snapshot {
        shard: usize,
        path: PathBuf,
        reason: String,
    },
    #[error("i/o error on {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("vector index: {0}")]
    Native(String),
}

impl IndexError {
    /// True when a snapshot was not found at all (a shard that was never saved), as opposed to
    /// one that exists but cannot be used.
    pub fn is_missing_file(&self) -> bool {
        matches!(self, IndexError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    }

    /// Stable UPPER_SNAKE code, mapped once here so the napi layer does not match on variants.
    pub fn code(&self) -> &'static str {
        match self {
            IndexError::Dimensions { .. }
            | IndexError::NonFinite
            | IndexError::ZeroVector
            | IndexError::BadOption(_)
            | IndexError::NoSuchShard(_) => "BAD_PARAM",
            IndexError::ShardFailed(_) | IndexError::WrongState { .. } | IndexError::Behind { .. } => {
                "INDEX_UNAVAILABLE"
            }
            IndexError::Snapshot { .. } => "SNAPSHOT_INVALID",
            IndexError::Io { .. } | IndexError::Native(_) => "INTERNAL",
        }
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        IndexError::Io {
            path: path.into(),
            source,
        }
    }

    pub(crate) fn native(e: impl std::fmt::Display) -> Self {
        IndexError::Native(e.to_string())
    }
}

pub type Result<T, E = IndexError> = std::result::Result<T, E>;
