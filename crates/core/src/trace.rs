//! W3C trace context: every job carries a `traceparent`, sent on every request the job causes.

use crate::rng::Rng;

/// A parsed `traceparent` (`00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceParent {
    /// 32 lowercase hex digits.
    pub trace_id: String,
    /// 16 lowercase hex digits.
    pub parent_id: String,
    /// Trace flags (01 = sampled).
    pub flags: u8,
}

fn is_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

impl TraceParent {
    /// Parses a header value; `None` when malformed or all-zero.
    pub fn parse(s: &str) -> Option<Self> {
        let mut parts = s.trim().split('-');
        let (v, t, p, f) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() || v != "00" || !is_hex(t, 32) || !is_hex(p, 16) || !is_hex(f, 2)
        {
            return None;
        }
        if t.bytes().all(|b| b == b'0') || p.bytes().all(|b| b == b'0') {
            return None;
        }
        Some(TraceParent {
            trace_id: t.to_owned(),
            parent_id: p.to_owned(),
            flags: u8::from_str_radix(f, 16).ok()?,
        })
    }

    /// A new root trace.
    pub fn new_root(rng: &Rng) -> Self {
        TraceParent {
            trace_id: format!("{:016x}{:016x}", rng.next_u64() | 1, rng.next_u64()),
            parent_id: format!("{:016x}", rng.next_u64() | 1),
            flags: 1,
        }
    }

    /// The same trace with a new span id: what a step sends on its own requests.
    pub fn child(&self, rng: &Rng) -> Self {
        TraceParent {
            trace_id: self.trace_id.clone(),
            parent_id: format!("{:016x}", rng.next_u64() | 1),
            flags: self.flags,
        }
    }

    /// The header value.
    pub fn header(&self) -> String {
        format!("00-{}-{}-{:02x}", self.trace_id, self.parent_id, self.flags)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_malformed() {
        let h = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let t = TraceParent::parse(h).unwrap();
        assert_eq!(t.header(), h);
        let c = t.child(&Rng::new(1));
        assert_eq!(c.trace_id, t.trace_id);
        assert_ne!(c.parent_id, t.parent_id);
        for bad in [
            "",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
        ] {
            assert!(TraceParent::parse(bad).is_none(), "{bad}");
        }
        let r = TraceParent::new_root(&Rng::new(5));
        assert!(TraceParent::parse(&r.header()).is_some());
    }
}
