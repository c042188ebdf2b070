//! The random programs (`cuda_stream_tests::random_programs`, which the test driver's suite runs
//! with its race detector) on a GPU: the same generator and model, with real kernels whose every
//! thread spins 20 us before it writes (so a missing wait shows as a stale value), the values
//! each read sees checked on the host, and the host functions counted. Bounded by time:
//! `CUDA_STREAM_RANDOM_SECONDS` (default 60 s; 30 s under compute-sanitizer, with smaller
//! buffers). Two devices where there are two (peer copies, buffers on both). Every failure
//! prints its seed and the program minimised; `CUDA_STREAM_RANDOM_SEED` runs one seed.
//!
//! Prints `random programs (GPU): N programs, M operations in T s` and asserts that none failed.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cuda_stream::Device;
use cuda_stream_tests::random_programs::{Config, Env, Harness, SEED_VAR, campaign, check_seed};
use cuda_stream_tests::{gpu, sanitizer};

/// A GPU checks nothing beyond the model: no detector, no fault injection.
struct Gpu;

impl Harness for Gpu {
    fn start(&self) {}
    fn host_access(&self, _ptr: u64, _len: usize, _write: bool) {}
    fn fail_next(&self, _call: &str) {}
    fn clear_failures(&self) {}
    fn settle(&self) {
        // User objects' destructors run on the driver's thread, soon after their last graph.
        std::thread::sleep(Duration::from_micros(200));
    }
    fn finish(&self) -> Vec<String> {
        Vec::new()
    }
}

fn var(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    let v = v.trim().to_string();
    match v.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => v.parse().ok(),
    }
}

#[test]
fn random_programs_on_the_gpu_read_what_the_model_says() {
    let Some(_ctx) = gpu() else { return };
    let devices = Device::count().unwrap_or(1).min(2);
    let mut cfg = Config::gpu(devices);
    let mut seconds = 60;
    if sanitizer().is_some() {
        cfg.lens = vec![256];
        cfg.delay_ns = 2_000;
        cfg.ops = (10, 30);
        seconds = 30;
    }
    let seconds = var("CUDA_STREAM_RANDOM_SECONDS").unwrap_or(seconds);
    let env = Env::new(cfg).expect("the programs' objects (contexts, kernels, pools)");
    let h = Gpu;
    if let Some(seed) = var(SEED_VAR) {
        match check_seed(seed, &env, &h, Duration::from_secs(120)) {
            Ok(n) => println!("seed {seed:#x}: {n} operations, passed"),
            Err(f) => panic!("{f}"),
        }
        return;
    }
    let fresh = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
        | (1 << 63);
    let seeds = (1..=500).chain((0..).map(|i| fresh.wrapping_add(i)));
    let c = campaign(
        &env,
        &h,
        seeds,
        u64::MAX,
        Duration::from_secs(seconds),
        3,
        Duration::from_secs(60),
    );
    println!(
        "random programs (GPU, {devices} device(s)): {} programs, {} operations in {:.1} s \
         (seeds 1 to 500, then {fresh:#x} on; known holes left out: {:?})",
        c.programs,
        c.ops,
        c.elapsed.as_secs_f64(),
        env.cfg
            .excluded
            .iter()
            .map(|h| h.number())
            .collect::<Vec<_>>()
    );
    for f in &c.failures {
        println!("{f}");
    }
    assert!(
        c.failures.is_empty(),
        "{} random program(s) failed (printed above)",
        c.failures.len()
    );
    assert!(c.programs > 0, "no program ran");
}
