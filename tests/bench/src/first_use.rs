//! First use, measured from nothing loaded: the binary runs itself as a child process
//! (`CUDA_STREAM_BENCH_FIRST_USE=1`) several times, before the parent creates any context, and
//! each child measures, once, the costs of a cold start (opening the library, resolving the first
//! symbol, `cuInit`, retaining the primary context, creating the first streams). The median,
//! minimum and maximum over the children are printed.

use std::hint::black_box;
use std::process::{Command, ExitCode};
use std::time::Instant;

use cuda_stream::Device;
use cuda_stream_sys as sys;

use crate::fail::chain;
use crate::method::{Config, median};
use crate::report::fmt_ns;

/// Set (to anything non-empty) in the child processes that measure first-use costs.
pub(crate) const FIRST_USE_VAR: &str = "CUDA_STREAM_BENCH_FIRST_USE";
/// The line prefix a first-use child prints its numbers after.
const FIRST_USE_TAG: &str = "first-use-ns:";
/// What a first-use child measures, in the order it prints them.
pub(crate) const FIRST_USE_STEPS: [&str; 7] = [
    "open the library (`Driver::open_default`)",
    "first `fns::cuDriverGetVersion()` + call (resolves the symbol)",
    "later `fns::cuDriverGetVersion()` + call (mean of 1000)",
    "`cuInit` (`cuda_stream::init`)",
    "primary context retain (`Device::primary_context`)",
    "first stream (`Context::new_stream`)",
    "second stream (`Context::new_stream`)",
];

/// Per step: (median, min, max) in ns over the children.
pub(crate) type FirstUse = Vec<(f64, f64, f64)>;

/// Whether this process is a first-use child.
pub(crate) fn is_child() -> bool {
    std::env::var_os(FIRST_USE_VAR).is_some_and(|v| !v.is_empty())
}

/// The child's `main`: measures once and prints the tagged line.
pub(crate) fn child_main() -> ExitCode {
    match measure_once() {
        Ok(v) => {
            let nums: Vec<String> = v.iter().map(|x| format!("{x:.1}")).collect();
            println!("{FIRST_USE_TAG} {}", nums.join(" "));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("first-use child: {e}");
            ExitCode::from(2)
        }
    }
}

fn ns_since(t: Instant) -> f64 {
    t.elapsed().as_nanos() as f64
}

fn measure_once() -> Result<Vec<f64>, String> {
    let mut out = Vec::with_capacity(FIRST_USE_STEPS.len());

    let t = Instant::now();
    let driver = sys::Driver::open_default();
    out.push(ns_since(t));
    let driver = driver.map_err(|e| format!("no CUDA driver found: {e}"))?;
    // The opened library becomes the process-wide one, so `fns::*` resolve from it.
    if sys::Driver::install_global(driver).is_err() {
        return Err("the process-wide driver was already loaded".into());
    }

    let mut version = 0;
    let t = Instant::now();
    let f = sys::fns::cuDriverGetVersion().map_err(|e| e.to_string())?;
    // SAFETY: `version` is a valid out-pointer.
    let rc = unsafe { f(&mut version) };
    out.push(ns_since(t));
    if rc != sys::CUresult::CUDA_SUCCESS {
        return Err(format!("cuDriverGetVersion: {}", sys::result_name(rc)));
    }

    const LATER: u32 = 1_000;
    let t = Instant::now();
    for _ in 0..LATER {
        let f = sys::fns::cuDriverGetVersion().map_err(|e| e.to_string())?;
        // SAFETY: `version` is a valid out-pointer.
        let rc = unsafe { f(&mut version) };
        black_box(rc);
    }
    out.push(ns_since(t) / f64::from(LATER));

    let t = Instant::now();
    let init = cuda_stream::init();
    out.push(ns_since(t));
    init.map_err(|e| chain(&e))?;

    let device = Device::new(0).map_err(|e| chain(&e))?;
    let t = Instant::now();
    let ctx = device.primary_context();
    out.push(ns_since(t));
    let ctx = ctx.map_err(|e| chain(&e))?;

    let mut streams = Vec::with_capacity(2);
    for _ in 0..2 {
        let t = Instant::now();
        let stream = ctx.new_stream();
        out.push(ns_since(t));
        streams.push(stream.map_err(|e| chain(&e))?);
    }
    black_box(&streams);
    Ok(out)
}

/// Runs the first-use children (in the parent, before it creates any context).
pub(crate) fn measure(cfg: &Config) -> Result<FirstUse, String> {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); FIRST_USE_STEPS.len()];
    for _ in 0..cfg.children {
        let out = Command::new(&exe)
            .env(FIRST_USE_VAR, "1")
            .output()
            .map_err(|e| format!("spawning {}: {e}", exe.display()))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            return Err(format!(
                "child exited with {}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let line = stdout
            .lines()
            .find_map(|l| l.strip_prefix(FIRST_USE_TAG))
            .ok_or_else(|| format!("child printed no `{FIRST_USE_TAG}` line: {stdout}"))?;
        let values: Vec<f64> = line
            .split_whitespace()
            .map(str::parse)
            .collect::<Result<_, _>>()
            .map_err(|e| format!("bad child output {line:?}: {e}"))?;
        if values.len() != FIRST_USE_STEPS.len() {
            return Err(format!("child printed {} values: {line:?}", values.len()));
        }
        for (s, v) in samples.iter_mut().zip(values) {
            s.push(v);
        }
    }
    Ok(samples
        .iter_mut()
        .map(|s| {
            let lo = s.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            (median(s), lo, hi)
        })
        .collect())
}

/// The "first use" table.
pub(crate) fn print(cfg: &Config, first: &Result<FirstUse, String>) {
    println!();
    println!(
        "First use, from nothing loaded (one child process per sample; median of {}):",
        cfg.children
    );
    println!();
    match first {
        Ok(stats) => {
            println!("| step | median | min | max |");
            println!("|---|---:|---:|---:|");
            for (step, &(med, lo, hi)) in FIRST_USE_STEPS.iter().zip(stats) {
                println!(
                    "| {step} | {} | {} | {} |",
                    fmt_ns(med),
                    fmt_ns(lo),
                    fmt_ns(hi)
                );
            }
        }
        Err(e) => println!("first-use measurement failed: {e}"),
    }
}
