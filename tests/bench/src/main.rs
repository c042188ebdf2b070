//! `cuda-stream-bench`: times each `cuda-stream` operation against the raw driver call it wraps,
//! in one process, on the same context and streams, and prints a Markdown table for
//! `BENCHMARKS.md`.
//!
//! ```sh
//! cargo run --release -p cuda-stream-bench            # full run
//! cargo run --release -p cuda-stream-bench -- --quick # smoke test
//! ```
//!
//! Method ([`method`]): for every operation the raw body (the driver's function pointers, resolved
//! once before timing, so the raw column is the floor a C program pays) and the safe body (the
//! `cuda-stream` call) are each run for many iterations per repetition; repetitions alternate
//! raw-first and safe-first; the median ns/op of each side is reported, and the median of the
//! repetitions' own safe/raw ratios (each from two batches run back to back, so drift cancels).
//! Work that an operation enqueues is drained (untimed) between batches.
//!
//! The rows live in [`rows`], one module per group; the "first use" table comes from child
//! processes ([`first_use`]).
//!
//! Without a CUDA driver it prints `no CUDA driver found: <error>` and exits with status 2.

mod executor;
mod fail;
mod first_use;
mod method;
mod raw;
mod report;
mod rows;

use std::process::ExitCode;

use cuda_stream::{Context, Error};
use cuda_sys as sys;

use crate::fail::chain;
use crate::method::Config;
use crate::report::Machine;

fn usage() -> &'static str {
    "usage: cuda-stream-bench [--quick]\n\
     Times cuda-stream operations against the raw CUDA driver calls on GPU 0 and prints\n\
     Markdown tables. --quick runs few iterations (a smoke test; numbers are not meaningful)."
}

fn main() -> ExitCode {
    if first_use::is_child() {
        return first_use::child_main();
    }
    let mut cfg = Config::full();
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--quick" => cfg = Config::quick(),
            "-h" | "--help" => {
                println!("{}", usage());
                return ExitCode::SUCCESS;
            }
            other => {
                eprintln!("unknown argument {other:?}\n{}", usage());
                return ExitCode::from(64);
            }
        }
    }

    // Only the library is loaded here (no cuInit, no context), so the first-use children run
    // first, on an idle GPU, and work even where the compute mode allows one context per GPU.
    if let Err(e) = sys::Driver::global() {
        eprintln!("no CUDA driver found: {}", chain(&e));
        return ExitCode::from(2);
    }
    let first = first_use::measure(&cfg);

    let ctx = match Context::primary(0) {
        Ok(c) => c,
        Err(e @ Error::Load(_)) => {
            eprintln!("no CUDA driver found: {}", chain(&e));
            return ExitCode::from(2);
        }
        Err(e) => {
            eprintln!("no usable CUDA device: {}", chain(&e));
            return ExitCode::from(2);
        }
    };
    let machine = Machine {
        gpu: ctx
            .device()
            .name()
            .unwrap_or_else(|e| format!("<name unavailable: {e}>")),
        driver_version: cuda_stream::driver_version().unwrap_or(0),
        kernel_module: report::kernel_module_version(),
    };

    if cfg!(debug_assertions) {
        eprintln!("warning: a debug build; build with --release for meaningful numbers");
    }
    let rows = match rows::run(&cfg, &ctx) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("cuda-stream-bench: {}", chain(&e));
            return ExitCode::FAILURE;
        }
    };

    report::print_header(&cfg, &machine);
    report::print_rows(&rows);
    first_use::print(&cfg, &first);
    ExitCode::SUCCESS
}
