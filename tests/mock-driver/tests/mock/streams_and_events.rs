//! The mock's streams and events: the special stream handles go through the current context, and
//! events follow the driver's rules (recording, queries, timing, waits).

use cuda_stream_sys::*;

use super::{
    INVALID_HANDLE, LEGACY, Log, NOT_READY, PER_THREAD, SUCCESS, destroy_event, destroy_stream,
    elapsed, enter, event, launch, leave, mock, note, query, query_event, record, stream, sync,
};

#[test]
fn special_stream_handles_go_through_the_current_context() {
    let (_g, m) = mock();
    for s in [std::ptr::null_mut(), LEGACY, PER_THREAD] {
        assert_eq!(query(s), CUresult::CUDA_ERROR_INVALID_CONTEXT);
    }
    let ctx1 = enter(1);
    let mut ids = Vec::new();
    for s in [std::ptr::null_mut(), LEGACY, PER_THREAD] {
        let (mut c, mut d, mut id) = (std::ptr::null_mut(), -1, 0);
        // SAFETY: valid out-pointers.
        unsafe {
            assert_eq!(cuStreamGetCtx(s, &mut c), SUCCESS);
            assert_eq!(cuStreamGetDevice(s, &mut d), SUCCESS);
            assert_eq!(cuStreamGetId(s, &mut id), SUCCESS);
        }
        assert_eq!((c, d), (ctx1, 1));
        ids.push(id);
    }
    assert_eq!(ids[0], ids[1], "the NULL stream is the legacy stream");
    assert_ne!(ids[1], ids[2]);

    let log = Log::leak();
    launch(LEGACY, note(log, 0, true));
    assert_eq!(query(std::ptr::null_mut()), NOT_READY);
    assert_eq!(query(PER_THREAD), SUCCESS);
    log.open_gate();
    sync(LEGACY);
    assert_eq!(query(LEGACY), SUCCESS);
    assert_eq!(m.bad_uses(), 0);
    leave(1);
}

#[test]
fn events_follow_the_driver_rules() {
    let (_g, m) = mock();
    let mut e = std::ptr::null_mut();
    // SAFETY: valid out-pointer.
    let rc = unsafe { cuEventCreate(&mut e, 0) };
    assert_eq!(
        rc,
        CUresult::CUDA_ERROR_INVALID_CONTEXT,
        "no current context"
    );

    // Device 1's context stays retained (not current) while its stream and event live.
    enter(1);
    let s1 = stream(0);
    let on1 = event(0);
    // SAFETY: a null out-pointer is allowed.
    assert_eq!(unsafe { cuCtxPopCurrent(std::ptr::null_mut()) }, SUCCESS);
    enter(0);
    let s0 = stream(0);
    // SAFETY: valid out-pointer.
    let rc = unsafe { cuEventCreate(&mut e, 4) };
    assert_eq!(
        rc,
        CUresult::CUDA_ERROR_INVALID_VALUE,
        "INTERPROCESS needs DISABLE_TIMING"
    );
    let (timed, untimed, ipc) = (event(0), event(2), event(2 | 4 | 1));
    let other = event(0);

    assert_eq!(query_event(timed), SUCCESS, "never recorded: success");
    assert_eq!(elapsed(timed, other).0, INVALID_HANDLE, "never recorded");
    assert_eq!(record(timed, s0), SUCCESS);
    assert_eq!(record(untimed, s0), SUCCESS);
    assert_eq!(elapsed(timed, untimed).0, INVALID_HANDLE, "no timing");
    assert_eq!(record(other, s0), SUCCESS);
    let (rc, ms) = elapsed(timed, other);
    assert_eq!(rc, SUCCESS);
    assert!(ms >= 0.0);

    // Another context's stream: recording is refused, waiting is fine.
    assert_eq!(record(timed, s1), INVALID_HANDLE);
    assert_eq!(record(on1, s0), INVALID_HANDLE);
    // SAFETY: the mock checks the handles.
    assert_eq!(unsafe { cuStreamWaitEvent(s1, timed, 0) }, SUCCESS);
    // SAFETY: as above.
    assert_eq!(unsafe { cuStreamWaitEvent(s0, on1, 0) }, SUCCESS);
    assert_eq!(m.bad_uses(), 0);

    // IPC: only for interprocess events; the opened handle shares the record state.
    let mut h = CUipcEventHandle::default();
    // SAFETY: valid out-pointer.
    let rc = unsafe { cuIpcGetEventHandle(&mut h, timed) };
    assert_eq!(rc, CUresult::CUDA_ERROR_INVALID_VALUE);
    // SAFETY: as above.
    assert_eq!(unsafe { cuIpcGetEventHandle(&mut h, ipc) }, SUCCESS);
    let mut opened = std::ptr::null_mut();
    // SAFETY: valid out-pointer.
    assert_eq!(unsafe { cuIpcOpenEventHandle(&mut opened, h) }, SUCCESS);
    assert_ne!(opened, ipc);
    let log = Log::leak();
    launch(s0, note(log, 0, true));
    assert_eq!(record(ipc, s0), SUCCESS);
    assert_eq!(query_event(opened), NOT_READY);
    // A stream of another context waiting on it is not ready either.
    // SAFETY: the mock checks the handles.
    assert_eq!(unsafe { cuStreamWaitEvent(s1, opened, 0) }, SUCCESS);
    assert_eq!(query(s1), NOT_READY);
    log.open_gate();
    // SAFETY: the mock checks the handle.
    assert_eq!(unsafe { cuEventSynchronize(opened) }, SUCCESS);
    assert_eq!(query_event(ipc), SUCCESS);
    assert_eq!(query(s1), SUCCESS);

    assert_eq!(m.live_events(), 6);
    for e in [timed, untimed, ipc, other, opened, on1] {
        assert_eq!(destroy_event(e), SUCCESS);
    }
    for s in [s0, s1] {
        assert_eq!(destroy_stream(s), SUCCESS);
    }
    assert_eq!((m.live_events(), m.live_streams()), (0, 0));
    leave(0);
    // SAFETY: no pointers.
    assert_eq!(unsafe { cuDevicePrimaryCtxRelease(1) }, SUCCESS);
    assert_eq!((m.live_primary_retains(), m.orphans()), (0, 0));
}
