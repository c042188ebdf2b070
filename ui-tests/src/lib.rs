//! Compile-fail tests live in `tests/ui`.
