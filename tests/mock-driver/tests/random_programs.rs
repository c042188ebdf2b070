//! Random programs over the safe API (`cuda_stream_tests::random_programs`, shared with the GPU
//! suite) against the test driver, with its race detector: every program must read what the
//! reference model says, run its host functions as often, race nowhere, use no dead handle and
//! leave no allocation behind.
//!
//! The run is bounded by operations and time: the fixed seeds 1 to [`FIXED_SEEDS`] first, then
//! fresh seeds (printed), until [`OPS_VAR`] operations (default 1,000,000) have run; it fails if
//! [`SECONDS_VAR`] seconds (default 900) pass first. [`SEED_VAR`] runs one seed and prints its
//! program ([`REPEAT_VAR`] times); [`HOLES_VAR`]` = include` also generates what the known holes leave out. A failure
//! prints its seed and the program minimised.

use std::sync::{Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cuda_mock_driver::{MockDriver, report};
use cuda_stream::ffi::CUresult;
use cuda_stream_tests::random_programs::{
    Config, Env, HOLES_VAR, Harness, KNOWN_HOLES, SEED_VAR, campaign, check_seed, generate,
};

static LOCK: Mutex<()> = Mutex::new(());

/// The fixed seeds every run starts with.
const FIXED_SEEDS: u64 = 2000;
/// The operations a run makes at least (default 1,000,000).
const OPS_VAR: &str = "CUDA_STREAM_RANDOM_OPS";
/// With [`SEED_VAR`]: how many times to run the seed (default 1).
const REPEAT_VAR: &str = "CUDA_STREAM_RANDOM_REPEAT";
/// The time a run may take (default 900 s).
const SECONDS_VAR: &str = "CUDA_STREAM_RANDOM_SECONDS";
/// How many failing programs end the run (default 3), and how long each may be minimised
/// (default 60 s): the mutation harness (`tests/perf/mutations.py`) stops at the first.
const MAX_FAILURES_VAR: &str = "CUDA_STREAM_RANDOM_MAX_FAILURES";
const SHRINK_SECONDS_VAR: &str = "CUDA_STREAM_RANDOM_SHRINK_SECONDS";

/// The test driver as the programs' harness.
struct Mock {
    m: &'static MockDriver,
    /// Allocations (device, page-locked) alive before the program.
    base: Mutex<(u64, u64)>,
}

impl Harness for Mock {
    fn start(&self) {
        self.m.reset();
        *self.base.lock().unwrap_or_else(|e| e.into_inner()) =
            (self.m.live_allocations(), self.m.live_host_allocations());
    }

    fn host_access(&self, ptr: u64, len: usize, write: bool) {
        assert!(
            self.m.host_access(ptr, len, write),
            "page-locked memory the mock made"
        );
    }

    fn fail_next(&self, call: &str) {
        self.m.fail(call, 1, CUresult::CUDA_ERROR_LAUNCH_FAILED);
    }

    fn clear_failures(&self) {
        self.m.clear_failures();
    }

    fn settle(&self) {
        while self.m.pending_host_fns() > 0 {
            std::thread::sleep(Duration::from_micros(50));
        }
    }

    fn finish(&self) -> Vec<String> {
        let m = self.m;
        let mut p: Vec<String> = m
            .race_reports()
            .into_iter()
            .map(|r| format!("race: {r}"))
            .collect();
        if m.races() > p.len() as u64 {
            p.push(format!("{} races in all", m.races()));
        }
        let base = *self.base.lock().unwrap_or_else(|e| e.into_inner());
        let now = (m.live_allocations(), m.live_host_allocations());
        if now != base {
            p.push(format!(
                "allocations (device, page-locked) {now:?} after the program, {base:?} before"
            ));
        }
        for (what, n) in [
            ("uses of dead handles or freed memory", m.bad_uses()),
            ("bad destroys", m.bad_destroys()),
            ("driver calls from host functions", m.host_fn_api_calls()),
        ] {
            if n > 0 {
                p.push(format!("{n} {what}"));
            }
        }
        m.reset();
        p
    }
}

fn setup() -> (cuda_mock_driver::Serialized, &'static Env, Mock) {
    let m = MockDriver::global();
    m.set_memory_pools(0, true);
    m.set_memory_pools(1, false);
    let guard = m.serialize(&LOCK);
    static ENV: OnceLock<Env> = OnceLock::new();
    let env = ENV.get_or_init(|| Env::new(Config::test_driver()).expect("the programs' objects"));
    let h = Mock {
        m,
        base: Mutex::new((0, 0)),
    };
    (guard, env, h)
}

fn var(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    let v = v.trim();
    Some(match v.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).unwrap_or_else(|_| panic!("{name}={v}")),
        None => v.parse().unwrap_or_else(|_| panic!("{name}={v}")),
    })
}

#[test]
fn random_programs_read_what_the_model_says_and_never_race() {
    let (_g, env, h) = setup();
    if let Some(seed) = var(SEED_VAR) {
        let p = generate(seed, &env.cfg);
        report(&format!("{p}"));
        // A failure that depends on the threads' timing may need a few runs.
        for _ in 0..var(REPEAT_VAR).unwrap_or(1) {
            match check_seed(seed, env, &h, Duration::from_secs(300)) {
                Ok(n) => report(&format!("seed {seed:#x}: {n} operations, passed")),
                Err(f) => panic!("{f}"),
            }
        }
        return;
    }
    let min_ops = var(OPS_VAR).unwrap_or(1_000_000);
    let budget = Duration::from_secs(var(SECONDS_VAR).unwrap_or(900));
    let fresh = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
        | (1 << 63);
    let seeds = (1..=FIXED_SEEDS).chain((0..).map(|i| fresh.wrapping_add(i)));
    let max_failures = var(MAX_FAILURES_VAR).unwrap_or(3) as usize;
    let shrink = Duration::from_secs(var(SHRINK_SECONDS_VAR).unwrap_or(60));
    let c = campaign(env, &h, seeds, min_ops, budget, max_failures, shrink);
    let excluded: Vec<u32> = env.cfg.excluded.iter().map(|h| h.number()).collect();
    report(&format!(
        "random programs: {} programs, {} operations in {:.1} s ({:.0} operations/s; seeds 1 to \
         {FIXED_SEEDS}, then {fresh:#x} on; known holes left out: {excluded:?} of {:?}{})",
        c.programs,
        c.ops,
        c.elapsed.as_secs_f64(),
        c.ops as f64 / c.elapsed.as_secs_f64().max(1e-9),
        KNOWN_HOLES.iter().map(|h| h.number()).collect::<Vec<_>>(),
        if excluded.is_empty() && !KNOWN_HOLES.is_empty() {
            format!(", {HOLES_VAR}=include")
        } else {
            String::new()
        }
    ));
    for f in &c.failures {
        report(&format!("{f}"));
    }
    assert!(
        c.failures.is_empty(),
        "{} random program(s) failed (printed above)",
        c.failures.len()
    );
    assert!(
        c.ops >= min_ops,
        "only {} of {min_ops} operations ran in {budget:?} ({SECONDS_VAR} raises the limit)",
        c.ops
    );
}
