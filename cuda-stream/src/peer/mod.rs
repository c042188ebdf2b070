//! Several devices: peer access between contexts, peer copies between buffers of two devices
//! with their uses tracked on both sides, and the nesting of use tracking over several streams
//! that peer copies and NCCL groups share. Imports `base`, `driver`, `stream`, `graph` and
//! `memory`.

// Bottom to top: each module imports only the ones above it (checked by tests/layers.rs).
pub(crate) mod tracked;

pub(crate) mod access;

pub(crate) mod copy;
