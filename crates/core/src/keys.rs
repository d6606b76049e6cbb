//! Job ids and cache keys.
//!
//! Both are derived from the model id and the text, so the same text embedded by the same model
//! always lands on the same job (duplicates collapse at enqueue) and the same cache entry.
//!
//! - job id: the first 32 hex digits (128 bits) of SHA-256(`model_id` + `"\n"` + `text`);
//! - cache key: `model_id` + `":"` + the first 32 hex digits of SHA-256(`text`).
//!
//! 128 bits keep ids short in URLs and logs while collisions stay out of reach
//! (≈2⁶⁴ texts for a 50 % chance).

use sha2::{Digest, Sha256};

/// Hex digits kept from the SHA-256 digest.
pub const HASH_HEX_LEN: usize = 32;

/// Longest id or key the protocol accepts (in bytes).
pub const MAX_KEY_LEN: usize = 200;

fn hex_prefix(digest: &[u8]) -> String {
    hex::encode(&digest[..HASH_HEX_LEN / 2])
}

/// Hex of the text's SHA-256, truncated to [`HASH_HEX_LEN`] digits.
pub fn text_hash(text: &str) -> String {
    hex_prefix(&Sha256::digest(text.as_bytes()))
}

/// Default job id for `text` under `model_id` (empty when the job names no model and the server
/// has none).
pub fn job_id(model_id: &str, text: &str) -> String {
    let mut h = Sha256::new();
    h.update(model_id.as_bytes());
    h.update(b"\n");
    h.update(text.as_bytes());
    hex_prefix(&h.finalize())
}

/// Cache key for `text` under `model_id`: `model_id:texthash`.
pub fn cache_key(model_id: &str, text: &str) -> String {
    format!("{model_id}:{}", text_hash(text))
}

/// Whether `s` is acceptable as a job id, cache key or lock key: 1..=[`MAX_KEY_LEN`] bytes of
/// ASCII letters, digits and `-_.:`. Keys go into URLs and store keys unescaped, so the alphabet
/// is deliberately small.
pub fn is_valid_key(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_KEY_LEN
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_id_is_stable_and_separates_models() {
        let a = job_id("0123456789abcdef", "hello");
        assert_eq!(a.len(), HASH_HEX_LEN);
        assert_eq!(a, job_id("0123456789abcdef", "hello"));
        assert_ne!(a, job_id("fedcba9876543210", "hello"));
        // The separator keeps (model "ab", text "c") apart from (model "a", text "bc"); model
        // ids never contain a newline, so the split is unambiguous.
        assert_ne!(job_id("ab", "c"), job_id("a", "bc"));
    }

    #[test]
    fn known_vectors() {
        // SHA-256("") = e3b0c442 98fc1c14 9afbf4c8 996fb924 …
        assert_eq!(text_hash(""), "e3b0c44298fc1c149afbf4c8996fb924");
        // SHA-256("\n") = 01ba4719 c80b6fe9 11b091a7 c05124b6 …
        assert_eq!(job_id("", ""), "01ba4719c80b6fe911b091a7c05124b6");
        assert_eq!(cache_key("m", ""), "m:e3b0c44298fc1c149afbf4c8996fb924");
    }

    #[test]
    fn key_validation() {
        assert!(is_valid_key(&cache_key("0123456789abcdef", "x")));
        assert!(is_valid_key(&job_id("m", "x")));
        assert!(!is_valid_key(""));
        assert!(!is_valid_key("a/b"));
        assert!(!is_valid_key("a b"));
        assert!(!is_valid_key(&"a".repeat(MAX_KEY_LEN + 1)));
    }
}
