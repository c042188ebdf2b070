//! The bottom layer: what this library is (its flavour, the driver functions it implements) and
//! how a test configures it (`CUDA_MOCK_CONFIG`). Plain values and parsing, no state.
//! Imports nothing from the rest of the crate.

// Bottom to top: each module imports only the ones above it (checked by tests/layers.rs).
pub(crate) mod flavour;

pub(crate) mod config;
