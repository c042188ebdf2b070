//! Device code: modules loaded from PTX or cubin, their functions, and kernel launches on any
//! `Enqueue`. The top layer: imports every layer below.

// Bottom to top: each module imports only the ones above it (checked by tests/layers.rs).
pub(crate) mod ptx_params;

pub(crate) mod kernel_info;

pub(crate) mod config;

pub(crate) mod module;

// Global variables of a module, as buffers.
pub(crate) mod global;

pub(crate) mod launch;

pub(crate) mod occupancy;

pub(crate) mod typed;
