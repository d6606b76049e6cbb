//! The cache side of the data path. The levels a text passes (local → remote → lock → engine or
//! backend → write-through) are run by [`crate::pipeline`] over the ports in [`crate::ports`];
//! the remote level speaks the server's protocol through [`crate::server_client`].
//!
//! - [`mem_local`]: the in-memory local cache (bounded by bytes and entries): the browser's hot
//!   tier in front of IndexedDB, and the whole local level on the edge, in Node and under WASI.

pub mod mem_local;
