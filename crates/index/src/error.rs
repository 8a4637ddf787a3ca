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
    /// There is no snapshot at all (a shard never saved): expected on a first start. The
    /// remedy is the one for an unusable snapshot, so it shares that code; `is_missing_file`
    /// tells the two apart.
    #[error("shard {shard} has no snapshot at {path}")]
    NoSnapshot { shard: usize, path: PathBuf },
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
        matches!(self, IndexError::NoSnapshot { .. })
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
            IndexError::NoSnapshot { .. } | IndexError::Snapshot { .. } => "SNAPSHOT_INVALID",
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The codes are a contract with the JavaScript side (src/native/face-index.ts): every
    /// variant is listed, so a new one cannot arrive without a code chosen for it.
    #[test]
    fn codes_are_the_contract_strings() {
        let io = || std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        let all = [
            (IndexError::Dimensions { expected: 4, got: 3 }, "BAD_PARAM"),
            (IndexError::NonFinite, "BAD_PARAM"),
            (IndexError::ZeroVector, "BAD_PARAM"),
            (IndexError::BadOption("x".into()), "BAD_PARAM"),
            (IndexError::NoSuchShard(9), "BAD_PARAM"),
            (IndexError::ShardFailed(1), "INDEX_UNAVAILABLE"),
            (IndexError::Behind { shard: 1, position: 2 }, "INDEX_UNAVAILABLE"),
            (IndexError::WrongState { shard: 1, state: "loading" }, "INDEX_UNAVAILABLE"),
            (IndexError::NoSnapshot { shard: 1, path: "m".into() }, "SNAPSHOT_INVALID"),
            (IndexError::Snapshot { shard: 1, path: "m".into(), reason: "x".into() }, "SNAPSHOT_INVALID"),
            (IndexError::io("p", io()), "INTERNAL"),
            (IndexError::Native("x".into()), "INTERNAL"),
        ];
        for (err, code) in &all {
            assert_eq!(err.code(), *code, "{err}");
            // Only a missing snapshot counts as missing (the addon's load report says so).
            assert_eq!(err.is_missing_file(), matches!(err, IndexError::NoSnapshot { .. }), "{err}");
        }
    }
}
