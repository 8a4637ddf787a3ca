//! The engine's single error type. Every failure maps to one stable code string that the
//! addon hands to JavaScript as `err.code`; the message is for humans and logs only.

/// Everything that can go wrong between image bytes and an analysis.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EngineError {
    /// The bytes are not JPEG, PNG or WebP.
    #[error("image is not JPEG, PNG or WebP")]
    ImageUnsupported,
    /// The bytes claim a supported format but cannot be decoded (empty, truncated, damaged).
    #[error("image could not be decoded: {0}")]
    ImageCorrupt(String),
    /// The header announces more pixels than the configured limit; nothing was decoded.
    #[error("image is {width}x{height} = {pixels} pixels, over the limit of {limit}")]
    ImageTooLarge { width: u32, height: u32, pixels: u64, limit: u64 },
    /// One side is so much longer than the other that the image cannot be a photo of faces,
    /// while decoding and resampling it would cost as much as a full-size photo.
    #[error("image is {width}x{height}: its sides are more than {limit}:1 apart")]
    ImageAspectRatio { width: u32, height: u32, limit: u32 },
    /// Decoding would hold more memory than one image may use; nothing was decoded.
    #[error("image would need {bytes} bytes to decode, over the limit of {limit}")]
    DecodeBudget { bytes: u64, limit: u64 },
    /// The caller gave up on the request (client gone, deadline passed) before it finished.
    #[error("analysis was cancelled")]
    Cancelled,
    /// A caller-supplied value is out of range or inconsistent.
    #[error("bad parameter: {0}")]
    BadParam(String),
    /// A bounded queue is full; the caller should back off and retry.
    #[error("engine is busy: the {0} queue is full, retry shortly")]
    Overloaded(&'static str),
    /// A large photo would wait longer than the caller's budget behind the large photos ahead
    /// of it (estimated from their headers); retry shortly.
    #[error("engine is busy: this photo would be answered in about {wait_ms} ms, beyond the {limit_ms} ms allowed for large photos; retry shortly")]
    Backlog { wait_ms: u64, limit_ms: u64 },
    /// Loading a model or running inference failed.
    #[error("model error: {0}")]
    Model(String),
    /// A bug or an unexpected state (worker gone, panic caught, engine closed).
    #[error("internal error: {0}")]
    Internal(String),
}

impl EngineError {
    /// The stable code the JavaScript side matches on.
    pub fn code(&self) -> &'static str {
        match self {
            EngineError::ImageUnsupported => "IMAGE_UNSUPPORTED",
            EngineError::ImageCorrupt(_) => "IMAGE_CORRUPT",
            EngineError::ImageTooLarge { .. } | EngineError::DecodeBudget { .. } => "IMAGE_TOO_LARGE",
            EngineError::ImageAspectRatio { .. } => "IMAGE_ASPECT_RATIO",
            EngineError::Cancelled => "CANCELLED",
            EngineError::BadParam(_) => "BAD_PARAM",
            EngineError::Overloaded(_) | EngineError::Backlog { .. } => "OVERLOADED",
            EngineError::Model(_) => "MODEL",
            EngineError::Internal(_) => "INTERNAL",
        }
    }
}

impl From<ort::Error> for EngineError {
    fn from(e: ort::Error) -> Self {
        EngineError::Model(e.to_string())
    }
}

/// Shorthand used across the crate.
pub type Result<T, E = EngineError> = std::result::Result<T, E>;

/// A queue's lock was poisoned: a thread panicked while holding it (batcher and pool queues).
pub(crate) fn queue_poisoned() -> EngineError {
    EngineError::Internal("queue lock poisoned".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_the_contract_strings() {
        let all = [
            (EngineError::ImageUnsupported, "IMAGE_UNSUPPORTED"),
            (EngineError::ImageCorrupt("x".into()), "IMAGE_CORRUPT"),
            (EngineError::ImageTooLarge { width: 1, height: 1, pixels: 1, limit: 0 }, "IMAGE_TOO_LARGE"),
            (EngineError::ImageAspectRatio { width: 1, height: 99, limit: 20 }, "IMAGE_ASPECT_RATIO"),
            (EngineError::DecodeBudget { bytes: 2, limit: 1 }, "IMAGE_TOO_LARGE"),
            (EngineError::Cancelled, "CANCELLED"),
            (EngineError::BadParam("x".into()), "BAD_PARAM"),
            (EngineError::Overloaded("inference"), "OVERLOADED"),
            (EngineError::Backlog { wait_ms: 2, limit_ms: 1 }, "OVERLOADED"),
            (EngineError::Model("x".into()), "MODEL"),
            (EngineError::Internal("x".into()), "INTERNAL"),
        ];
        for (err, code) in all {
            assert_eq!(err.code(), code);
        }
    }
}
