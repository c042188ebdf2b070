//! Values and errors: the types every layer names (priorities, capture modes, the plain data
//! that travels to the device), whether the thread runs a host function, and the chokepoints
//! every driver call passes: the lookup of its function (refused inside a host function) and
//! the one that turns a `CUresult` into a `Result`.
//! Makes no driver object and imports nothing else from this crate.

// Bottom to top: each module imports only the ones above it (checked by tests/layers.rs).
pub(crate) mod priority;

pub(crate) mod capture_mode;

pub(crate) mod plain_data;

pub(crate) mod params;

pub(crate) mod host_fn_flag;

pub(crate) mod error;

pub(crate) mod newest_abi;

#[cfg(feature = "test-hooks")]
pub(crate) mod lock_probe;

#[cfg(feature = "test-hooks")]
pub(crate) mod hold_point;
