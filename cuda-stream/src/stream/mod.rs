//! Streams: the borrowed view every operation is written on, its owners (`OwnedStream`, the
//! pool), and the conveniences that each add their own `impl Stream` block (host functions, the
//! current stream, completion futures, fork/join). Imports `base` and `driver`.

// Bottom to top: each module imports only the ones above it (checked by tests/layers.rs).
pub(crate) mod host_panics;

pub(crate) mod guarded_streams;

pub(crate) mod block_cache;

pub(crate) mod known_streams;

pub(crate) mod wait_event_cache;

pub(crate) mod view;

pub(crate) mod owned;

pub(crate) mod pool;

pub(crate) mod host_fn;

pub(crate) mod current;

pub(crate) mod completion;

pub(crate) mod scope;
