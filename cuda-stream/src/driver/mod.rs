//! Driver objects: devices, contexts and events, with the host-function rule they all obey
//! (a destroy asked for inside a host function is deferred to an ordinary thread). Imports only
//! `base`.

// Bottom to top: each module imports only the ones above it (checked by tests/layers.rs).
pub(crate) mod deferred_destroy;

pub(crate) mod recycled_events;

pub(crate) mod device;

pub(crate) mod context;

pub(crate) mod facts;

pub(crate) mod event;

pub(crate) mod capture_query;
