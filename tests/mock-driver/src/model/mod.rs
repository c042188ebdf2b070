//! The records the driver keeps (contexts, streams, events, device memory and modules, captures,
//! graphs, and the jobs of the queue): plain data, and the operations on it alone.
//! May import `base`; knows nothing of the process-wide state or the exports.

// Bottom to top: each module imports only the ones above it (checked by tests/layers.rs).
pub(crate) mod records;

pub(crate) mod races;

pub(crate) mod ptx;

pub(crate) mod kernels;

pub(crate) mod pools;

pub(crate) mod device;

pub(crate) mod capture;

pub(crate) mod graph;

pub(crate) mod jobs;
