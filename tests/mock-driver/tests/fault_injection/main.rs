//! Fault injection: every public operation of `cuda-stream`, run against the mock driver with
//! each driver call it makes forced to fail in turn.
//!
//! For every operation of the table in [`operations`]: one clean run warms the process-wide
//! caches (the shared scope pools, the notifier streams), a second clean run records which
//! driver functions the operation calls and how often, then for every `(function, k)` with `k`
//! from 1 to that count the operation runs again with the k-th call of the function failing with
//! [`FAULT`]. Each run must: not panic; return an error naming exactly the failed function (or
//! `Ok`, where the function is one the operation documents as swallowed, see the `SWALLOW`
//! lists); leave no stream, event, primary-context retain, module or device allocation behind
//! (except the one handle whose destroy, release, unload or free was the failed call: it is still
//! alive in the driver, and must not be destroyed a second time; and, for operations that free a
//! module or a buffer, the one object whose free could not bind its context or wait for its
//! context's work, which must not be freed under work that may still use it); destroy nothing
//! twice, use no dead handle or freed memory, and never destroy a stream it does not own.
//!
//! Every run happens on a fresh thread (joined before the checks, so its thread-local caches are
//! destroyed, with their driver calls counted and faulted too), with no context current: the
//! default streams are exercised from a thread that has none. A run ends by waiting for the host
//! functions it enqueued and by clearing the fixture contexts' spare events (part of the run: its
//! `cuEventDestroy` calls are counted and faulted like a drop's), so every run starts with empty
//! event caches and creates what it uses.
//!
//! No driver call may be made from a host function: the mock answers one with
//! `CUDA_ERROR_NOT_PERMITTED` and counts it, and every run (clean or faulted) must leave that
//! count at zero. Host functions that drop the last owner of a stream, event, pool, lease,
//! completion or context, and `close()` inside one, have operations of their own; their deferred
//! destroys must be drained by the end of the run (each such operation drains explicitly, or
//! through the next operation that drains), and nothing may be left queued.
//!
//! The test prints `fault cases (CUDA 13.0): N (M operations)`; it fails if an operation makes no
//! driver call at all or if fewer cases than [`MIN_FAULT_CASES`] ran, so a table that checks
//! nothing cannot pass.
//!
//! # Every driver generation
//!
//! The whole suite runs against every flavour of the mock ([`cuda_mock_driver::FLAVOURS`]: CUDA
//! 11.4, 12.0, 12.2, 12.4, 12.8 and 13.0, each with and without `cuGetProcAddress`): in this
//! process against the full one, and through [`the_fault_suite_passes_on_every_driver_flavour`]
//! in one child process per other flavour (the mock's state is per process), each printing its
//! `fault cases (CUDA 12.2, no cuGetProcAddress): N (M operations)` line. A driver function is
//! failed in each ABI the flavour has (`cuEventElapsedTime_v2000` on 12.2, the 12.8 one on 13.0),
//! and the error must name the function as C code does (`cuEventElapsedTime`).
//!
//! # Files
//!
//! The shared machinery is in [`harness`]: the mock, the threads the runs happen on, the fixture
//! and the table's row type, the driver functions, the swallow lists and the checks made after
//! every run. The table's rows are in one file per layer of the safe API ([`devices`],
//! [`streams`], [`events`], [`modules`], [`memory`], [`host_fns`], [`stream_kinds`],
//! [`capture`], [`graphs`], [`capture_rules`]); the tests of single behaviours are in
//! [`destroys`] and [`host_fn_errors`].

mod capture;
mod capture_rules;
// Its tests sort before the table's, so they run first (one at a time in the flavour children),
// as when all were one file: after `a_borrowed_stream_is_never_destroyed`, `record_event` and
// `completed` make fewer driver calls in the table (94 cases fewer), and the counts depend on it.
mod destroys;
mod devices;
mod events;
mod foreign_memory;
mod graphs;
mod harness;
mod host_fn_errors;
mod host_fns;
mod memory;
mod modules;
mod peers;
mod pools;
mod stream_kinds;
mod streams;

use cuda_mock_driver::{FLAVOURS, Flavour, report, run_in_each_flavour};
use cuda_stream_sys::SymbolInfo;

use harness::checks::{After, KNOWN_RACES, Live, expected_after, known_races};
use harness::fixture::{Fixture, Op, run};
use harness::functions::{FUNCTIONS, abis, called, called_outside_the_list};
use harness::{FAULT, flavour, mock, panic_message};
use stream_kinds::Kind;

/// The floor on fault cases: the table discovers about 2,600 on every flavour (2,633 to 2,648
/// measured); a few hundred fewer means operations stopped calling the driver (or the table lost
/// rows), which must not pass silently.
const MIN_FAULT_CASES: usize = 2250;
/// The floor on the table's size on every flavour: stream operations on 6 stream kinds (with
/// `capture_status`, `in_capture`, kernels and device memory), the others, host functions that
/// drop or close values, the event cache, capture and graph operations (buffers in captures
/// among them), modules and buffers (238 measured on CUDA 11.4).
const MIN_OPERATIONS: usize = 238;
/// What the table adds from CUDA 12.0: `id` on each stream kind (244 operations measured).
const ID_OPERATIONS: usize = 6;

/// Every public operation of `cuda-stream` that calls the driver. (`init` is not a row of its
/// own: it caches its outcome for the process, so after the fixture's first call it calls
/// nothing; `missing_library.rs` covers its failure.)
fn operations() -> Vec<Op> {
    let mut ops = devices::ops();
    ops.extend(streams::ops());
    ops.extend(events::ops());
    ops.extend(streams::pool_ops());
    ops.extend(modules::ops());
    ops.extend(memory::ops());
    ops.extend(pools::ops());
    ops.extend(streams::pool_reserve_ops());
    ops.extend(events::cache_ops());
    ops.extend(host_fns::drop_ops());
    for kind in Kind::ALL {
        ops.extend(stream_kinds::ops(kind));
    }
    ops.extend(memory::captured_ops());
    ops.extend(foreign_memory::ops());
    ops.extend(capture::ops());
    ops.extend(graphs::ops());
    ops.extend(capture_rules::ops());
    ops.extend(peers::ops());
    ops
}

#[test]
fn every_operation_fails_cleanly_at_every_driver_call() {
    let (_lock, m) = mock();
    let fx = Fixture::new();
    let ops = operations();
    let mut failures: Vec<String> = Vec::new();
    let mut cases = 0usize;
    let mut discovered = 0u64;
    // Races of the operations of KNOWN_RACES, by operation.
    let mut known: Vec<(&str, usize)> = Vec::new();

    for op in &ops {
        // A clean run to fill the process-wide caches, then the one whose calls are recorded.
        let mut clean = Vec::new();
        for pass in ["warm-up", "clean"] {
            m.reset();
            let base = Live::now(m);
            let r = run(&fx, op);
            let after = After::now(m, &fx);
            // The warm-up may create what is cached for the process (the notifier stream, the
            // scope pools' streams, the fixture pool's stream); the clean run may not.
            let expected = if pass == "warm-up" { after.live } else { base };
            let problems = after.problems(&[expected]);
            match r {
                Ok(Ok(())) if problems.is_empty() => {}
                Ok(Ok(())) => failures.push(format!("{}: {pass} run: {problems:?}", op.name)),
                Ok(Err(e)) => failures.push(format!("{}: {pass} run failed: {e:?}", op.name)),
                Err(p) => failures.push(format!(
                    "{}: {pass} run panicked: {}",
                    op.name,
                    panic_message(&*p)
                )),
            }
            clean = called(m);
            // (The warm-up may resolve bindings, calling cuGetProcAddress; the clean run may not.)
            let outside = called_outside_the_list(m);
            if pass == "clean" && !outside.is_empty() {
                failures.push(format!("{}: calls {outside:?}, not in FUNCTIONS", op.name));
            }
        }
        if clean.is_empty() {
            failures.push(format!("{}: makes no driver call", op.name));
        }

        for &(symbol, binding, n) in &clean {
            discovered += n;
            for k in 1..=n {
                m.reset();
                let base = Live::now(m);
                m.fail(binding, k as u32, FAULT);
                let r = run(&fx, op);
                cases += 1;
                let fired = m.calls(binding) >= k;
                let after = After::now(m, &fx);
                let case = format!("{}: {binding} call {k}/{n} failing", op.name);
                if !fired && !op.varying.contains(&symbol) {
                    failures.push(format!("{case}: the run no longer makes that call"));
                }
                match r {
                    Err(p) => failures.push(format!("{case}: panicked: {}", panic_message(&*p))),
                    Ok(Err(e)) if e.call() == Some(symbol) && e.driver_code() == Some(FAULT) => {}
                    Ok(Err(e)) => failures.push(format!("{case}: returned {e:?}")),
                    Ok(Ok(())) if op.swallowed.contains(&symbol) => {}
                    // A varying call this run did not make often enough to fail.
                    Ok(Ok(())) if !fired => {}
                    Ok(Ok(())) => failures.push(format!("{case}: returned Ok")),
                }
                let mut problems = after.problems(&expected_after(base, Some(symbol), op.frees));
                let raced = known_races(&op.name, &mut problems);
                if raced > 0 {
                    match known.iter_mut().find(|(n, _)| *n == op.name) {
                        Some((_, k)) => *k += raced,
                        None => known.push((&op.name, raced)),
                    }
                }
                if !problems.is_empty() {
                    failures.push(format!("{case}: {problems:?}"));
                }
            }
        }
    }
    report(&format!(
        "fault cases ({}): {cases} ({} operations)",
        flavour().name,
        ops.len()
    ));
    for (name, hole) in KNOWN_RACES {
        match known.iter().find(|(n, _)| n == name) {
            Some((_, k)) => report(&format!("  known races ({k}) of `{name}`: {hole}")),
            None if !ops.iter().any(|o| o.name == *name) => {}
            None => failures.push(format!(
                "{name}: listed in KNOWN_RACES but raced in none of its fault cases: its hole is \
                 closed, remove the entry"
            )),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {cases} fault cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    m.reset();
    fx.finish(m);
    assert_eq!((m.bad_destroys(), m.bad_uses()), (0, 0));
    assert_eq!(cases as u64, discovered);
    let min_operations = if flavour().has_abi("cuStreamGetId") {
        MIN_OPERATIONS + ID_OPERATIONS
    } else {
        MIN_OPERATIONS
    };
    assert!(
        ops.len() >= min_operations,
        "only {} operations (at least {min_operations} expected)",
        ops.len()
    );
    assert!(
        cases >= MIN_FAULT_CASES,
        "only {cases} fault cases ran (at least {MIN_FAULT_CASES} expected)"
    );
}

#[test]
fn every_listed_function_is_one_the_mock_exports() {
    let (_lock, m) = mock();
    assert_eq!(
        m.flavour(),
        flavour().name,
        "the flavour's library is loaded"
    );
    for f in FUNCTIONS {
        let exported = abis(m, f);
        // The flavour has the function in some ABI unless all of its ABIs are newer.
        let expected = SymbolInfo::abis(f)
            .iter()
            .any(|s| flavour().has_abi(s.name));
        assert_eq!(!exported.is_empty(), expected, "{f}: {exported:?}");
        for b in exported {
            // Panics if the mock does not export it.
            m.fail_always(b, FAULT);
        }
    }
    m.reset();
    assert!(m.configure("version=13000"));
}

/// Runs this whole suite again against every other flavour, one child process each, and prints
/// each one's `fault cases (...)` line; fails with the output of every flavour that failed.
#[test]
fn the_fault_suite_passes_on_every_driver_flavour() {
    if Flavour::from_env().is_some() {
        return; // a child: the other tests are the suite
    }
    let others: Vec<&'static Flavour> = FLAVOURS.iter().filter(|f| *f != Flavour::full()).collect();
    let runs = run_in_each_flavour(
        &others,
        &[
            "--test-threads=1",
            "--nocapture",
            "--skip",
            "the_fault_suite_passes_on_every_driver_flavour",
        ],
        &[],
    );
    let mut failed = Vec::new();
    for r in &runs {
        let lines = r.lines_containing("fault cases (");
        match lines.as_slice() {
            [line] => report(line),
            _ => report(&format!("fault cases ({}): none reported", r.flavour.name)),
        }
        if !r.status.success() || lines.len() != 1 {
            failed.push(r.failure_report());
        }
    }
    assert_eq!(runs.len(), FLAVOURS.len() - 1);
    assert!(
        failed.is_empty(),
        "the fault suite failed on {} of {} flavours:\n{}",
        failed.len(),
        runs.len(),
        failed.join("\n")
    );
}
