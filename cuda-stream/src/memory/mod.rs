//! Device memory on streams: `DeviceBuffer`, its views (`DeviceSlice`, `DeviceSliceMut`) and the
//! raw memset/memcpy forms, all taking any
//! `Enqueue` (a stream or a capture), and use tracking across streams and contexts (`across`).
//! Imports `base`, `driver`, `stream` and `graph`.

// Bottom to top: each module imports only the ones above it (checked by tests/layers.rs).
pub(crate) mod raw;

pub(crate) mod fill_pattern;

pub(crate) mod use_tracking;

pub(crate) mod tracked;

pub(crate) mod alloc_calls;

pub(crate) mod pool;

pub(crate) mod allocation;

pub(crate) mod buffer;

pub(crate) mod slice;

pub(crate) mod buffer_ops;

pub(crate) mod slice_ops;

pub(crate) mod across;

pub(crate) mod pinned;

pub(crate) mod registered;

pub(crate) mod borrowed;

pub(crate) mod managed;

pub(crate) mod graph_buffer;
