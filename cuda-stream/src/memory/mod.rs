//! Device memory on streams: `DeviceBuffer` and the raw memset/memcpy forms, all taking any
//! `Enqueue` (a stream or a capture). Imports `base`, `driver`, `stream` and `graph`.

// Bottom to top: each module imports only the ones above it (checked by tests/layers.rs).
pub(crate) mod raw;

pub(crate) mod fill_pattern;

pub(crate) mod buffer;
