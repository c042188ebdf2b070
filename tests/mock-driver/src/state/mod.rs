//! The one process-wide [`State`] behind one mutex, the queue its worker thread runs, and the
//! capture rules that work enqueued on a stream goes through.
//! May import `base` and `model`; knows nothing of the exports.

// Bottom to top: each module imports only the ones above it (checked by tests/layers.rs).
pub(crate) mod threads;

pub(crate) mod store;

pub(crate) mod worker;

pub(crate) mod capture;

pub(crate) mod races;

pub(crate) use store::State;
pub(crate) use worker::{lock, wait_until_done};
