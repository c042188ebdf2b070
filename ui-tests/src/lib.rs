//! Compile-fail tests for `cuda-stream`: misuse that the compiler must reject, each for the
//! right reason (a borrow, lifetime or trait error, never a typo), plus uses that must compile.
//!
//! The cases are run by [trybuild] from `tests/ui.rs` (so a plain `cargo test` at the
//! workspace root runs them):
//!
//! - `tests/ui/fail/<topic>/<case>.rs`: one misuse per file; the compiler's output is compared
//!   with the `<case>.stderr` beside it (paths normalised to `$DIR`, `$WORKSPACE` and `$RUST`).
//! - `tests/ui/pass/<case>.rs`: uses that must compile (`Send + Sync` types moved into and shared
//!   with threads, `'static` host functions, current-stream guards, borrows within their
//!   owners' lifetimes). trybuild also runs them: they skip (exit 0) when no CUDA driver or
//!   device is present, and exercise the driver for real where one is.
//!
//! The case files are not reachable from any crate root, so `cargo fmt` never touches them; they
//! are kept rustfmt-formatted anyway, so that running `rustfmt` on one by hand does not shift the
//! line numbers recorded in its `.stderr`.
//!
//! Re-bless the expected output with `TRYBUILD=overwrite cargo test -p ui-tests` only when a
//! compiler upgrade (or a change to the notes it prints about `cuda-stream`'s own types) changes
//! the wording, and read every changed `.stderr` before committing it: it must still name the
//! error the case is about. Never re-bless to make a real failure pass: a case that starts to
//! compile, or fails with a different error code, means the API stopped enforcing the rule.
//!
//! [trybuild]: https://docs.rs/trybuild
