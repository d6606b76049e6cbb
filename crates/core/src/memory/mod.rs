//! Test doubles (feature `testing`): in-memory implementations of every server-side port, a
//! test embedder, and a fake clock with its own executor, for native tests of the pipeline. The
//! in-memory local cache that runtimes without IndexedDB use is [`MemLocal`](crate::cache::mem_local).
//!
//! They follow the server's semantics (leases with tokens and fences, fenced cache writes,
//! compare-and-delete locks, attempt limits and a dead-letter list) closely enough that the
//! pipeline's branches are exercised for real, and they let a test inject failures.
//!
//! One double per file: [`clock`] ([`FakeClock`], [`Watchdog`]), [`server`] ([`MemServer`]) and
//! [`embedder`] ([`FakeEmbedder`]).

mod clock;
mod embedder;
mod server;

pub use self::clock::{FakeClock, FakeSleep, Watchdog};
pub use self::embedder::FakeEmbedder;
pub use self::server::MemServer;
