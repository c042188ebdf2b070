//! The mock's host functions: run in order on one worker thread, with callbacks seeing their
//! stream's status; a driver call from one is refused and counted.

use std::time::Instant;

use cuda_stream_sys::*;

use super::{
    Log, NOT_READY, SUCCESS, callback, calls_the_driver, destroy_event, destroy_stream, elapsed,
    enter, event, launch, leave, mock, note, query, query_event, record, stream, sync,
};

#[test]
fn host_functions_run_in_order_on_one_worker_thread() {
    let (_g, m) = mock();
    enter(0);
    let (a, b) = (stream(0), stream(1));
    let (e_idle, e_busy) = (event(0), event(0));
    assert_eq!(record(e_idle, a), SUCCESS);
    // `e_idle` completed by now, at the latest.
    let idle_at = Instant::now();
    assert_eq!(
        query_event(e_idle),
        SUCCESS,
        "recorded on an idle stream: complete"
    );

    let log = Log::leak();
    launch(a, note(log, 0, true));
    launch(b, note(log, 1, false));
    // SAFETY: `callback` takes the leaked `Note`.
    let rc = unsafe { cuStreamAddCallback(a, Some(callback), note(log, 2, false), 0) };
    assert_eq!(rc, SUCCESS);
    assert_eq!(record(e_busy, a), SUCCESS);
    launch(a, note(log, 3, false));

    // The first host function is held: everything behind it waits.
    log.wait_until_held();
    assert_eq!(query(a), NOT_READY);
    assert_eq!(
        query(b),
        NOT_READY,
        "one worker: b's function is queued behind a's"
    );
    assert_eq!(query_event(e_busy), NOT_READY);
    assert_eq!(elapsed(e_idle, e_busy).0, NOT_READY);
    assert_eq!(m.pending_host_fns(), 5);
    assert!(log.entries().is_empty());

    // `e_busy` can complete only after this.
    let held = idle_at.elapsed();
    log.open_gate();
    sync(b);
    sync(a);
    // SAFETY: the mock checks the handle.
    assert_eq!(unsafe { cuEventSynchronize(e_busy) }, SUCCESS);
    // SAFETY: no pointers.
    assert_eq!(unsafe { cuCtxSynchronize() }, SUCCESS);
    assert_eq!(query(a), SUCCESS);
    assert_eq!(query(b), SUCCESS);
    assert_eq!(query_event(e_busy), SUCCESS);
    let (rc, ms) = elapsed(e_idle, e_busy);
    assert_eq!(rc, SUCCESS);
    // Up to the rounding of an `f32`.
    let held_ms = held.as_secs_f64() * 1e3;
    assert!(
        f64::from(ms) >= held_ms * (1.0 - 1e-6),
        "the record completed after the held function: {ms} ms, held {held_ms} ms"
    );
    assert_eq!(m.pending_host_fns(), 0);

    let entries = log.entries();
    let tags: Vec<usize> = entries
        .iter()
        .filter(|e| e.2.is_none())
        .map(|e| e.0)
        .collect();
    assert_eq!(tags, [0, 1, 2, 3], "enqueue order");
    let worker = entries[0].1;
    assert_ne!(
        worker,
        std::thread::current().id(),
        "not on the calling thread"
    );
    assert!(entries.iter().all(|e| e.1 == worker), "all on one thread");
    assert!(
        entries.contains(&(a as usize, worker, Some(SUCCESS))),
        "the callback gets (stream, CUDA_SUCCESS, userData)"
    );

    for s in [a, b] {
        assert_eq!(destroy_stream(s), SUCCESS);
    }
    for e in [e_idle, e_busy] {
        assert_eq!(destroy_event(e), SUCCESS);
    }
    assert_eq!(m.host_fn_api_calls(), 0);
    leave(0);
}

#[test]
fn a_host_function_may_not_call_the_driver() {
    let (_g, m) = mock();
    enter(0);
    let s = stream(0);
    let log = Log::leak();
    // SAFETY: `calls_the_driver` takes the leaked `Note`.
    let rc = unsafe { cuLaunchHostFunc(s, Some(calls_the_driver), note(log, 7, false)) };
    assert_eq!(rc, SUCCESS);
    sync(s);
    let entries = log.entries();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].2, Some(CUresult::CUDA_ERROR_NOT_PERMITTED));
    assert_eq!(m.host_fn_api_calls(), 1);
    assert_eq!(destroy_stream(s), SUCCESS);
    leave(0);
}
