//! Shared helpers for the GPU integration tests.
