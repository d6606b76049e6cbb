//! The one error type of the crate.

/// What can go wrong when loading a model or a vocabulary, or when passing raw token ids.
///
/// Every variant is permanent: the same bytes always fail the same way, so retrying is pointless.
/// Embedding text ([`crate::Engine::embed`]) cannot fail.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The file does not start with `TERN`.
    #[error("bad magic: expected \"TERN\", found {found:?}")]
    BadMagic {
        /// The first four bytes (or fewer, for a shorter file).
        found: Vec<u8>,
    },
    /// The header's `format_version` is not 1.
    #[error("unsupported TERN format version {0} (only version 1 is supported)")]
    UnsupportedVersion(u16),
    /// The header's `embedding_format` is not 0 (fp32), 1 (int8), 2 (ternary) or 3 (int4).
    #[error("unsupported embedding format {0} (expected 0 fp32, 1 int8, 2 ternary or 3 int4)")]
    UnsupportedEmbeddingFormat(u8),
    /// The header's `weights_format` is not 0 (ternary packed).
    #[error("unsupported weights format {0} (expected 0, ternary packed)")]
    UnsupportedWeightsFormat(u8),
    /// The header's dimensions cannot describe a model.
    #[error("inconsistent dimensions: {0}")]
    InconsistentDims(String),
    /// The file ends before the section `what` is complete.
    #[error(
        "truncated file: {what} needs {needed} bytes at offset {offset}, only {available} left"
    )]
    Truncated {
        /// The section being read.
        what: String,
        /// Its byte offset.
        offset: usize,
        /// Bytes it needs.
        needed: usize,
        /// Bytes left in the file (before the trailer).
        available: usize,
    },
    /// There are bytes between the last section and the SHA-256 trailer.
    #[error("{0} trailing bytes after the projection and before the SHA-256 trailer")]
    TrailingBytes(usize),
    /// The SHA-256 trailer does not match the bytes before it.
    #[error("checksum mismatch: trailer says {expected}, content hashes to {actual}")]
    ChecksumMismatch {
        /// The trailer, hex.
        expected: String,
        /// The hash of the content, hex.
        actual: String,
    },
    /// A ternary weight uses the reserved code `11`.
    #[error("reserved ternary code 0b11 in {0}")]
    ReservedTernaryCode(String),
    /// A value in the file is unusable: a NaN or infinite float, or a zero weight scale.
    #[error("bad value in {0}")]
    BadValue(String),
    /// Token ids given to [`crate::Engine::embed_ids`] do not fit the model.
    #[error("invalid token ids: {0}")]
    InvalidIds(String),
    /// The vocabulary does not fit the model or lacks a special token.
    #[error("vocabulary: {0}")]
    Vocab(String),
}

impl Error {
    /// Whether retrying the same operation could succeed. Always `false`: loading is a pure
    /// function of the bytes.
    #[must_use]
    pub fn is_retryable(&self) -> bool {
        false
    }
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
