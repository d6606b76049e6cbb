//! Compact vector encoding: little-endian f32, base64 in JSON.
//!
//! Embedding vectors cross the wire as the standard base64 (RFC 4648, padded) of their
//! little-endian `f32` bytes: a 384-dimension vector is 2 048 characters instead of ~8 KB of JSON
//! numbers, and decoding is exact (no decimal round trip). [`Vector`] wraps a `Vec<f32>` and
//! (de)serialises through this encoding, so protocol types just hold a `Vector`.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::{Error, Result};

/// Encodes `v` as base64 of its little-endian bytes.
pub fn encode_vector(v: &[f32]) -> String {
    let mut bytes = Vec::with_capacity(v.len() * 4);
    for x in v {
        bytes.extend_from_slice(&x.to_le_bytes());
    }
    STANDARD.encode(bytes)
}

/// Decodes the output of [`encode_vector`].
///
/// # Errors
/// [`Error::Protocol`] (permanent) when the text is not base64, its length is not whole `f32`s,
/// or a component is not finite (a vector that would poison every similarity computed from it).
pub fn decode_vector(s: &str) -> Result<Vec<f32>> {
    let bytes = STANDARD
        .decode(s.as_bytes())
        .map_err(|e| Error::Protocol(format!("vector is not valid base64: {e}")))?;
    if bytes.len() % 4 != 0 {
        return Err(Error::Protocol(format!(
            "vector byte length {} is not a multiple of 4",
            bytes.len()
        )));
    }
    let v: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    if let Some(i) = v.iter().position(|x| !x.is_finite()) {
        return Err(Error::Protocol(format!(
            "vector component {i} is not finite"
        )));
    }
    Ok(v)
}

/// An embedding vector that travels as base64 of little-endian `f32` bytes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Vector(pub Vec<f32>);

impl From<Vec<f32>> for Vector {
    fn from(v: Vec<f32>) -> Self {
        Vector(v)
    }
}

/// The schema of what [`Vector`]'s serde writes and reads: a base64 string.
#[cfg(feature = "schema")]
impl schemars::JsonSchema for Vector {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Vector".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({ "type": "string", "format": "byte" })
    }
}

impl Serialize for Vector {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(&encode_vector(&self.0))
    }
}

impl<'de> Deserialize<'de> for Vector {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        decode_vector(&s)
            .map(Vector)
            .map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_is_exact() {
        let v = vec![0.0, -1.5, 3.25e-8, f32::MAX, f32::MIN_POSITIVE];
        assert_eq!(decode_vector(&encode_vector(&v)).unwrap(), v);
    }

    #[test]
    fn little_endian_layout() {
        // 1.0f32 = 0x3f800000 → LE bytes 00 00 80 3f
        assert_eq!(encode_vector(&[1.0]), "AACAPw==");
    }

    #[test]
    fn empty_vector() {
        assert_eq!(encode_vector(&[]), "");
        assert_eq!(decode_vector("").unwrap(), Vec::<f32>::new());
    }

    #[test]
    fn rejects_bad_input() {
        let msg = |s: &str| decode_vector(s).unwrap_err().to_string();
        assert!(msg("!!").contains("not valid base64"));
        assert!(msg("AAA=").contains("byte length 2"));
        let nan = encode_vector(&[1.0, f32::NAN]);
        assert!(msg(&nan).contains("component 1 is not finite"));
        assert!(matches!(decode_vector("!!"), Err(Error::Protocol(_))));
    }

    #[test]
    fn vector_serde() {
        let v = Vector(vec![1.0, 2.0]);
        let j = serde_json::to_string(&v).unwrap();
        assert_eq!(j, "\"AACAPwAAAEA=\"");
        assert_eq!(serde_json::from_str::<Vector>(&j).unwrap(), v);
        assert!(serde_json::from_str::<Vector>("\"AAA=\"").is_err());
    }
}
