//! `cuda-stream-bench`: times each `cuda-stream` operation against the raw driver call it wraps,
//! and against cudarc's equivalent, in one process, on the same context, and prints Markdown
//! tables for `BENCHMARKS.md` (and, with `--json FILE`, the same results as JSON).
//!
//! ```sh
//! cargo run --release -p cuda-stream-bench            # full run
//! cargo run --release -p cuda-stream-bench -- --quick # smoke test
//! ```
//!
//! Method (`method.rs`): for every operation the raw body (the driver's function pointers,
//! resolved once before timing, so the raw column is the floor a C program pays), the safe body
//! (the `cuda-stream` call) and, where cudarc has one, cudarc's body are each run for many
//! iterations per repetition; an even number of repetitions, each order followed by its reverse,
//! so half run the raw side first and half the safe side; the median ns/op of each side is
//! reported, and the median, spread and per-order medians of the repetitions' own ratios to raw
//! (each from batches run back to back, so drift cancels). Work that an operation enqueues is
//! drained (untimed) between batches. An A/A row (the raw code against itself) shows the
//! method's own noise.
//!
//! The rows live in `rows/`, one module per group; the cudarc column in `cudarc_column.rs`; the
//! "first use" table comes from child processes (`first_use.rs`).
//!
//! Without a CUDA driver it prints `no CUDA driver found: <error>` and exits with status 2.

mod bandwidth;
mod cudarc_column;
mod executor;
mod fail;
mod first_use;
mod kernel;
mod method;
mod pin;
mod raw;
mod report;
mod rows;
#[cfg(test)]
mod scripts;

use std::process::ExitCode;

use cuda_stream::{Context, Error};
use cuda_stream_sys as sys;

use crate::fail::chain;
use crate::method::Config;
use crate::report::Machine;

fn usage() -> &'static str {
    "usage: cuda-stream-bench [--quick] [--reps N] [--no-cudarc] [--pin-cpu N] [--json FILE]\n\
     \x20                        [--only GROUP,...]\n\
     Times cuda-stream operations against the raw CUDA driver calls (and cudarc's) on GPU 0 and\n\
     prints Markdown tables.\n  \
       --quick       few iterations: a smoke test, the numbers are not meaningful\n  \
       --reps N      repetitions per row (even: half run raw first; default 16, 4 with --quick)\n  \
       --no-cudarc   leave the cudarc column out (raw and cuda-stream only)\n  \
       --pin-cpu N   run the measuring thread on CPU N only (the driver's threads stay free;\n  \
                     with --multi-gpu, from after NCCL's initialisation, whose threads keep\n  \
                     every CPU)\n  \
       --json FILE   also write the results as JSON to FILE (read by tests/bench/combine.py)\n  \
       --only G,...  only these groups of rows (create, hot_path, host_fn, pool_async_scope,\n  \
                     graphs, memory, temporaries, launches, nvrtc), without the first-use and\n  \
                     bandwidth lines\n  \
       --multi-gpu   only the two-GPU rows: NCCL all-reduce and peer copy bandwidth"
}

/// What the command line asked for.
#[derive(Debug)]
struct Args {
    cfg: Config,
    json: Option<String>,
    pin_cpu: Option<usize>,
    multi_gpu: bool,
}

fn parse_args(args: impl IntoIterator<Item = String>) -> Result<Option<Args>, String> {
    let mut cfg = Config::full();
    let mut cudarc = true;
    let mut json = None;
    let mut reps = None;
    let mut pin_cpu = None;
    let mut multi_gpu = false;
    let mut only = 0;
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--quick" => cfg = Config::quick(),
            "--no-cudarc" => cudarc = false,
            "--multi-gpu" => multi_gpu = true,
            "--json" => json = Some(args.next().ok_or("--json needs a file name")?),
            "--only" => {
                let list = args.next().ok_or("--only needs groups of rows")?;
                for g in list.split(',') {
                    let Some(bit) = rows::group_index(g) else {
                        let names: Vec<&str> = rows::GROUPS.iter().map(|(n, _)| *n).collect();
                        return Err(format!("--only {g:?}: one of {}", names.join(", ")));
                    };
                    only |= 1 << bit;
                }
            }
            "--reps" => {
                let n = args.next().ok_or("--reps needs a number")?;
                match n.parse::<usize>() {
                    Ok(n) if n >= 2 && n % 2 == 0 => reps = Some(n),
                    _ => {
                        return Err(format!(
                            "--reps {n:?}: an even number of at least 2 (half the repetitions \
                             run the raw side first)"
                        ));
                    }
                }
            }
            "--pin-cpu" => {
                let n = args.next().ok_or("--pin-cpu needs a CPU number")?;
                pin_cpu = Some(
                    n.parse::<usize>()
                        .map_err(|_| format!("--pin-cpu {n:?}: a CPU number"))?,
                );
            }
            "-h" | "--help" => return Ok(None),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    cfg.cudarc = cudarc;
    cfg.only = only;
    if let Some(n) = reps {
        cfg.reps = n;
    }
    Ok(Some(Args {
        cfg,
        json,
        pin_cpu,
        multi_gpu,
    }))
}

fn main() -> ExitCode {
    if first_use::is_child() {
        return first_use::child_main();
    }
    let Args {
        cfg,
        json,
        pin_cpu,
        multi_gpu,
    } = match parse_args(std::env::args().skip(1)) {
        Ok(Some(args)) => args,
        Ok(None) => {
            println!("{}", usage());
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("{e}\n{}", usage());
            return ExitCode::from(64);
        }
    };

    if multi_gpu {
        if let Err(e) = sys::Driver::global() {
            eprintln!("no CUDA driver found: {}", chain(&e));
            return ExitCode::from(2);
        }
        return match bandwidth::multi_gpu(cfg.quick, pin_cpu) {
            Ok(_) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("cuda-stream-bench: {}", chain(&e));
                ExitCode::FAILURE
            }
        };
    }
    // Only the library is loaded here (no cuInit, no context), so the first-use children run
    // first, on an idle GPU, and work even where the compute mode allows one context per GPU.
    if let Err(e) = sys::Driver::global() {
        eprintln!("no CUDA driver found: {}", chain(&e));
        return ExitCode::from(2);
    }
    let first = if cfg.only == 0 {
        first_use::measure(&cfg)
    } else {
        Err("not measured (--only)".to_string())
    };
    // After the first-use children (which would inherit the pinning).
    if let Some(cpu) = pin_cpu {
        if let Err(e) = pin::pin_this_thread(cpu) {
            eprintln!("cuda-stream-bench: {e}");
            return ExitCode::from(2);
        }
    }

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

    if cfg!(debug_assertions) {
        eprintln!("warning: a debug build; build with --release for meaningful numbers");
    }
    let started = std::time::Instant::now();
    let (rows, cudarc) = match rows::run(&cfg, &ctx) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("cuda-stream-bench: {}", chain(&e));
            return ExitCode::FAILURE;
        }
    };
    let machine = Machine {
        gpu: ctx
            .device()
            .name()
            .unwrap_or_else(|e| format!("<name unavailable: {e}>")),
        driver_version: cuda_stream::driver_version().unwrap_or(0),
        kernel_module: report::kernel_module_version(),
        cudarc,
        pinned_cpu: pin_cpu,
    };

    report::print_header(&cfg, &machine);
    report::print_rows(&rows);
    println!();
    println!(
        "The rows took {:.1} s (first use not included).",
        started.elapsed().as_secs_f64()
    );
    if cfg.only == 0 {
        first_use::print(&cfg, &first);
        bandwidth::one_gpu(&ctx, cfg.quick);
    }
    if let Some(path) = json {
        let text = report::json(&cfg, &machine, &rows, &first);
        if let Err(e) = std::fs::write(&path, text) {
            eprintln!("cuda-stream-bench: writing {path}: {e}");
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Option<Args>, String> {
        parse_args(args.iter().map(|s| s.to_string()))
    }

    #[test]
    fn arguments() {
        let a = parse(&[]).unwrap().unwrap();
        assert!(!a.cfg.quick && a.cfg.cudarc && a.json.is_none() && !a.multi_gpu);
        assert!(parse(&["--multi-gpu"]).unwrap().unwrap().multi_gpu);
        let a = parse(&["--json", "out.json", "--quick", "--no-cudarc"])
            .unwrap()
            .unwrap();
        assert!(a.cfg.quick && !a.cfg.cudarc);
        assert_eq!(a.json.as_deref(), Some("out.json"));
        assert!(parse(&["--help"]).unwrap().is_none());
        assert!(parse(&["--json"]).unwrap_err().contains("file name"));
        let a = parse(&["--only", "hot_path,memory"]).unwrap().unwrap();
        assert!(a.cfg.runs("memory") && !a.cfg.runs("graphs"));
        let a = parse(&["--only", "temporaries"]).unwrap().unwrap();
        assert!(a.cfg.runs("temporaries") && !a.cfg.runs("memory"));
        assert!(parse(&["--only", "mem"]).unwrap_err().contains("one of"));
        assert!(parse(&["--fast"]).unwrap_err().contains("--fast"));
        assert_eq!(parse(&["--reps", "32"]).unwrap().unwrap().cfg.reps, 32);
        // --quick sets its own count; a later --reps overrides it, in any order.
        let a = parse(&["--reps", "8", "--quick"]).unwrap().unwrap();
        assert!(a.cfg.quick && a.cfg.reps == 8);
        assert_eq!(parse(&[]).unwrap().unwrap().cfg.reps, 16);
        assert_eq!(
            parse(&["--pin-cpu", "3"]).unwrap().unwrap().pin_cpu,
            Some(3)
        );
        assert_eq!(parse(&[]).unwrap().unwrap().pin_cpu, None);
        assert!(
            parse(&["--pin-cpu", "x"])
                .unwrap_err()
                .contains("CPU number")
        );
        assert!(parse(&["--pin-cpu"]).unwrap_err().contains("CPU number"));
        for bad in ["15", "0", "x"] {
            assert!(
                parse(&["--reps", bad]).unwrap_err().contains("even"),
                "{bad}"
            );
        }
        assert!(parse(&["--reps"]).unwrap_err().contains("number"));
    }
}
