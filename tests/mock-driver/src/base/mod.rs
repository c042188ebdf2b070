//! The bottom layer: what this library is (its flavour, the driver functions it implements) and
//! how a test configures it (`CUDA_MOCK_CONFIG`). Plain values and parsing, no state.
//! Imports nothing from the rest of the crate.

// Bottom to top: each module imports only the ones above it (checked by tests/layers.rs).
pub(crate) mod flavour;

pub(crate) mod config;

/// Prints where a bad use was counted, with a backtrace, when `CUDA_MOCK_TRACE_BAD_USES` is set:
/// for a test that finds one and must say which call made it.
pub(crate) fn trace_bad_use(file: &str, line: u32) {
    if std::env::var_os("CUDA_MOCK_TRACE_BAD_USES").is_some() {
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "mock driver: bad use counted at {file}:{line}\n{}",
            std::backtrace::Backtrace::force_capture()
        );
    }
}
