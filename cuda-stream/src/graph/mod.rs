//! Graphs: capture through a view that offers only what is legal while capturing, graphs and
//! executable graphs, and the driver user objects that keep what a graph's nodes use alive.
//! Imports `base`, `driver` and `stream`.

// Bottom to top: each module imports only the ones above it (checked by tests/layers.rs).
pub(crate) mod user_objects;

pub(crate) mod replay_uses;

pub(crate) mod replay;

pub(crate) mod capture_view;

pub(crate) mod capture;

pub(crate) mod capture_mode_guard;
