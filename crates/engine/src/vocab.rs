//! The WordPiece vocabulary: token text ↔ id, in one string and one open-addressing table.
//!
//! Built without one allocation per token (a 30 522-line vocabulary loads in a few milliseconds,
//! even in wasm), and looked up by `&str` slices: continuation pieces are found as `"##" + piece`
//! without building that string.

/// Token text ↔ id.
#[derive(Debug, Clone)]
pub struct Vocab {
    /// Every token's text, concatenated.
    text: String,
    /// `(start, len)` in `text`, by id.
    spans: Vec<(u32, u32)>,
    /// Open addressing, power-of-two size: `id + 1`, or 0 for empty.
    slots: Vec<u32>,
}

/// FNV-1a over `prefix` then `s`.
#[inline]
fn hash(prefix: &[u8], s: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in prefix.iter().chain(s) {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    h ^ (h >> 29)
}

impl Vocab {
    /// One token per line; the id is the 0-based line number; trailing whitespace is trimmed (as
    /// HF does). A repeated token maps to its last line.
    #[must_use]
    pub fn parse(vocab_text: &str) -> Self {
        let n = vocab_text.lines().count();
        let mut text = String::with_capacity(vocab_text.len());
        let mut spans = Vec::with_capacity(n);
        for line in vocab_text.lines() {
            let tok = line.trim_end();
            spans.push((text.len() as u32, tok.len() as u32));
            text.push_str(tok);
        }
        let size = (n * 2).next_power_of_two().max(16);
        let mut v = Self {
            text,
            spans,
            slots: vec![0; size],
        };
        for id in 0..n {
            let tok = v.token(id as u32).unwrap_or_default().as_bytes();
            let mask = v.slots.len() - 1;
            let mut i = hash(b"", tok) as usize & mask;
            loop {
                let s = v.slots[i];
                if s == 0 || v.token(s - 1).map(str::as_bytes) == Some(tok) {
                    v.slots[i] = id as u32 + 1;
                    break;
                }
                i = (i + 1) & mask;
            }
        }
        v
    }

    /// Number of lines (ids are below this).
    #[must_use]
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    /// Whether there are no tokens.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// The text of token `id`.
    #[must_use]
    pub fn token(&self, id: u32) -> Option<&str> {
        let &(start, len) = self.spans.get(id as usize)?;
        self.text.get(start as usize..(start + len) as usize)
    }

    /// The id of `prefix + piece` (`prefix` is `""` or `"##"`).
    #[inline]
    #[must_use]
    pub fn get(&self, prefix: &str, piece: &str) -> Option<u32> {
        let (p, s) = (prefix.as_bytes(), piece.as_bytes());
        let mask = self.slots.len() - 1;
        let mut i = hash(p, s) as usize & mask;
        loop {
            let slot = self.slots[i];
            if slot == 0 {
                return None;
            }
            let (start, len) = self.spans[slot as usize - 1];
            let t = &self.text.as_bytes()[start as usize..(start + len) as usize];
            if t.len() == p.len() + s.len() && t.starts_with(p) && &t[p.len()..] == s {
                return Some(slot - 1);
            }
            i = (i + 1) & mask;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookups() {
        let v = Vocab::parse("[PAD]\na\n##b\nab  \na\n");
        assert_eq!(v.len(), 5);
        assert_eq!(
            v.get("", "a"),
            Some(4),
            "a repeated token maps to its last line"
        );
        assert_eq!(v.get("##", "b"), Some(2));
        assert_eq!(v.get("", "##b"), Some(2));
        assert_eq!(v.get("", "ab"), Some(3), "trailing spaces trimmed");
        assert_eq!(v.get("##", "a"), None);
        assert_eq!(v.token(3), Some("ab"));
        assert_eq!(v.token(9), None);
    }
}
