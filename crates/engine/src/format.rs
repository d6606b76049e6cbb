//! The TERN v1 header: 32 little-endian bytes that give the model's shape.

use crate::error::{Error, Result};

/// Length of the fixed header.
pub const HEADER_LEN: usize = 32;
/// Length of the SHA-256 trailer.
pub const TRAILER_LEN: usize = 32;
/// The magic bytes every TERN file starts with.
pub const MAGIC: &[u8; 4] = b"TERN";

/// How the token embedding table is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EmbeddingFormat {
    /// `V·D` little-endian f32.
    Fp32 = 0,
    /// `V·D` i8 codes, then `V` f32 row scales; value = code × scale.
    Int8 = 1,
    /// `V·D/4` bytes of 2-bit codes (`00`=0, `01`=+1, `10`=−1), then `V` f32 row scales.
    Ternary = 2,
    /// `V·D/2` bytes of two's-complement nibbles (low nibble = even element), then `V` f32 row
    /// scales.
    Int4 = 3,
}

impl EmbeddingFormat {
    /// The format for a header byte.
    ///
    /// # Errors
    /// [`Error::UnsupportedEmbeddingFormat`] for any byte but 0..=3.
    pub fn from_byte(b: u8) -> Result<Self> {
        match b {
            0 => Ok(Self::Fp32),
            1 => Ok(Self::Int8),
            2 => Ok(Self::Ternary),
            3 => Ok(Self::Int4),
            other => Err(Error::UnsupportedEmbeddingFormat(other)),
        }
    }

    /// Short lowercase name: `fp32`, `int8`, `ternary`, `int4`.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Fp32 => "fp32",
            Self::Int8 => "int8",
            Self::Ternary => "ternary",
            Self::Int4 => "int4",
        }
    }

    /// Parses a name as printed by [`EmbeddingFormat::name`].
    #[must_use]
    pub fn from_name(name: &str) -> Option<Self> {
        [Self::Fp32, Self::Int8, Self::Ternary, Self::Int4]
            .into_iter()
            .find(|f| f.name() == name)
    }

    /// Bytes of codes for `rows × cols` values (scales not included).
    #[must_use]
    pub fn code_bytes(self, rows: usize, cols: usize) -> usize {
        match self {
            Self::Fp32 => rows * cols * 4,
            Self::Int8 => rows * cols,
            Self::Ternary => rows * cols / 4,
            Self::Int4 => rows * cols / 2,
        }
    }
}

/// The model's shape, as read from the header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Config {
    /// Embedding storage.
    pub embedding_format: EmbeddingFormat,
    /// Number of token ids (`V`).
    pub vocab_size: u32,
    /// Hidden width (`D`).
    pub d_model: u16,
    /// Transformer layers.
    pub n_layers: u8,
    /// Attention heads; divides `d_model`.
    pub n_heads: u8,
    /// Feed-forward width (`F`).
    pub ffn_dim: u16,
    /// Output vector length (`O`).
    pub output_dim: u16,
    /// Most token ids per input, `[CLS]` and `[SEP]` included.
    pub max_seq_len: u16,
}

impl Config {
    /// Width of one attention head.
    #[must_use]
    pub fn d_head(&self) -> usize {
        usize::from(self.d_model) / usize::from(self.n_heads)
    }

    /// Checks that the dimensions describe a computable model.
    ///
    /// # Errors
    /// [`Error::InconsistentDims`] naming the first broken rule: zero dimensions, `d_model` not a
    /// multiple of `n_heads` or of 4, `ffn_dim` not a multiple of 4, `max_seq_len < 2`.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::InconsistentDims(m));
        let zero = [
            ("vocab_size", self.vocab_size == 0),
            ("d_model", self.d_model == 0),
            ("n_layers", self.n_layers == 0),
            ("n_heads", self.n_heads == 0),
            ("ffn_dim", self.ffn_dim == 0),
            ("output_dim", self.output_dim == 0),
        ];
        if let Some((name, _)) = zero.iter().find(|(_, z)| *z) {
            return bad(format!("{name} is 0"));
        }
        if self.d_model % 4 != 0 {
            return bad(format!("d_model {} is not a multiple of 4", self.d_model));
        }
        if self.ffn_dim % 4 != 0 {
            return bad(format!("ffn_dim {} is not a multiple of 4", self.ffn_dim));
        }
        if self.d_model % u16::from(self.n_heads) != 0 {
            return bad(format!(
                "d_model {} is not a multiple of n_heads {}",
                self.d_model, self.n_heads
            ));
        }
        if self.max_seq_len < 2 {
            return bad(format!(
                "max_seq_len {} leaves no room for [CLS] and [SEP]",
                self.max_seq_len
            ));
        }
        Ok(())
    }

    /// Parses and validates the 32-byte header.
    ///
    /// # Errors
    /// [`Error::BadMagic`], [`Error::Truncated`], [`Error::UnsupportedVersion`],
    /// [`Error::UnsupportedEmbeddingFormat`], [`Error::UnsupportedWeightsFormat`] or
    /// [`Error::InconsistentDims`].
    pub fn parse_header(bytes: &[u8]) -> Result<Self> {
        if bytes.len() < 4 || &bytes[..4] != MAGIC {
            return Err(Error::BadMagic {
                found: bytes[..bytes.len().min(4)].to_vec(),
            });
        }
        if bytes.len() < HEADER_LEN {
            return Err(Error::Truncated {
                what: "header".into(),
                offset: 0,
                needed: HEADER_LEN,
                available: bytes.len(),
            });
        }
        let u16_at = |o: usize| u16::from_le_bytes([bytes[o], bytes[o + 1]]);
        let version = u16_at(4);
        if version != 1 {
            return Err(Error::UnsupportedVersion(version));
        }
        let embedding_format = EmbeddingFormat::from_byte(bytes[6])?;
        if bytes[7] != 0 {
            return Err(Error::UnsupportedWeightsFormat(bytes[7]));
        }
        let config = Self {
            embedding_format,
            vocab_size: u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]),
            d_model: u16_at(12),
            n_layers: bytes[14],
            n_heads: bytes[15],
            ffn_dim: u16_at(16),
            output_dim: u16_at(18),
            max_seq_len: u16_at(20),
        };
        config.validate()?;
        Ok(config)
    }

    /// The 32 header bytes for this configuration (reserved bytes zero).
    #[must_use]
    pub fn header_bytes(&self) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        h[..4].copy_from_slice(MAGIC);
        h[4..6].copy_from_slice(&1u16.to_le_bytes());
        h[6] = self.embedding_format as u8;
        h[7] = 0;
        h[8..12].copy_from_slice(&self.vocab_size.to_le_bytes());
        h[12..14].copy_from_slice(&self.d_model.to_le_bytes());
        h[14] = self.n_layers;
        h[15] = self.n_heads;
        h[16..18].copy_from_slice(&self.ffn_dim.to_le_bytes());
        h[18..20].copy_from_slice(&self.output_dim.to_le_bytes());
        h[20..22].copy_from_slice(&self.max_seq_len.to_le_bytes());
        h
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> Config {
        Config {
            embedding_format: EmbeddingFormat::Int4,
            vocab_size: 100,
            d_model: 64,
            n_layers: 2,
            n_heads: 4,
            ffn_dim: 128,
            output_dim: 32,
            max_seq_len: 128,
        }
    }

    #[test]
    fn header_round_trips() {
        let c = base();
        assert_eq!(Config::parse_header(&c.header_bytes()).unwrap(), c);
    }

    #[test]
    fn rejects_bad_headers() {
        let mut h = base().header_bytes();
        h[0] = b'X';
        assert!(matches!(
            Config::parse_header(&h),
            Err(Error::BadMagic { .. })
        ));
        let mut h = base().header_bytes();
        h[4] = 2;
        assert_eq!(Config::parse_header(&h), Err(Error::UnsupportedVersion(2)));
        let mut h = base().header_bytes();
        h[6] = 4;
        assert_eq!(
            Config::parse_header(&h),
            Err(Error::UnsupportedEmbeddingFormat(4))
        );
        let mut h = base().header_bytes();
        h[7] = 1;
        assert_eq!(
            Config::parse_header(&h),
            Err(Error::UnsupportedWeightsFormat(1))
        );
        for c in [
            Config {
                n_heads: 5,
                ..base()
            },
            Config {
                d_model: 66,
                n_heads: 2,
                ..base()
            },
            Config {
                ffn_dim: 130,
                ..base()
            },
            Config {
                max_seq_len: 1,
                ..base()
            },
            Config {
                vocab_size: 0,
                ..base()
            },
            Config {
                output_dim: 0,
                ..base()
            },
        ] {
            assert!(matches!(
                Config::parse_header(&c.header_bytes()),
                Err(Error::InconsistentDims(_))
            ));
        }
        assert!(matches!(
            Config::parse_header(&base().header_bytes()[..20]),
            Err(Error::Truncated { .. })
        ));
    }
}
