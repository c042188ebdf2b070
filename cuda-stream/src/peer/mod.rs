//! Several devices: peer access between contexts and to memory pools, and peer copies between
//! buffers of two devices with their uses tracked on both sides (`memory::across`). Imports
//! `base`, `driver`, `stream`, `graph` and `memory`.

// Bottom to top: each module imports only the ones above it (checked by tests/layers.rs).
pub(crate) mod access;

pub(crate) mod copy;
