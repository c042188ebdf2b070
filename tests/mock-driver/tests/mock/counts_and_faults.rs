//! What the mock counts (live streams, bad and foreign destroys, calls) and the faults it injects:
//! the n-th call failing, an overridden version.

use cuda_stream_sys::*;

use super::{
    INVALID_HANDLE, LEGACY, SUCCESS, destroy_event, destroy_stream, enter, event, leave, mock,
    query, stream,
};

#[test]
fn streams_are_counted() {
    let (_g, m) = mock();
    let ctx = enter(0);
    assert_eq!(m.live_primary_retains(), 1);
    let a = stream(0);
    let b = stream(1);
    let mut c = std::ptr::null_mut();
    // SAFETY: valid out-pointer.
    let rc = unsafe { cuStreamCreateWithPriority(&mut c, 0, -10) };
    assert_eq!(rc, SUCCESS);
    assert_eq!(m.live_streams(), 3);
    assert_eq!(m.calls("cuStreamCreate"), 2);
    assert_eq!(m.calls("cuStreamCreateWithPriority"), 1);
    for s in [a, b, c] {
        assert!(s as usize > 2, "a created stream is never a special handle");
        assert_eq!(m.destroyed(s), Some(false));
    }

    let (mut prio, mut flags, mut dev, mut got) = (1, 7, -1, std::ptr::null_mut());
    let (mut id_a, mut id_b) = (0, 0);
    // SAFETY: valid out-pointers, handles from the driver.
    unsafe {
        assert_eq!(cuStreamGetPriority(c, &mut prio), SUCCESS);
        assert_eq!(cuStreamGetFlags(b, &mut flags), SUCCESS);
        assert_eq!(cuStreamGetDevice(a, &mut dev), SUCCESS);
        assert_eq!(cuStreamGetCtx(a, &mut got), SUCCESS);
        assert_eq!(cuStreamGetId(a, &mut id_a), SUCCESS);
        assert_eq!(cuStreamGetId(b, &mut id_b), SUCCESS);
    }
    assert_eq!(prio, -5, "clamped to the greatest priority");
    assert_eq!(flags, 1);
    assert_eq!(dev, 0);
    assert_eq!(got, ctx);
    assert_ne!(id_a, id_b);

    for s in [a, b, c] {
        assert_eq!(destroy_stream(s), SUCCESS);
        assert_eq!(m.destroyed(s), Some(true));
    }
    assert_eq!(m.live_streams(), 0);
    assert_eq!(m.destroyed_streams(), 3);
    assert_eq!(m.calls("cuStreamDestroy"), 3);
    assert_eq!((m.bad_destroys(), m.bad_uses()), (0, 0));
    leave(0);
    assert_eq!(m.live_primary_retains(), 0);
}

#[test]
fn a_double_or_foreign_destroy_is_counted() {
    let (_g, m) = mock();
    enter(0);
    let s = stream(0);
    assert_eq!(destroy_stream(s), SUCCESS);
    assert_eq!(destroy_stream(s), INVALID_HANDLE);
    assert_eq!(m.bad_destroys(), 1);
    assert_eq!(m.destroyed(s), Some(true));
    assert_eq!(m.live_streams(), 0);
    assert_eq!(m.destroyed_streams(), 1);

    let foreign: CUstream = std::ptr::without_provenance_mut(0xdead_bee0);
    assert_eq!(destroy_stream(foreign), INVALID_HANDLE);
    assert_eq!(destroy_stream(LEGACY), INVALID_HANDLE);
    assert_eq!(destroy_stream(std::ptr::null_mut()), INVALID_HANDLE);
    assert_eq!(m.bad_destroys(), 4);
    assert_eq!(m.destroyed(foreign), None);

    // Using what was destroyed is a bad use, and an event is not a stream.
    assert_eq!(query(s), INVALID_HANDLE);
    let e = event(0);
    assert_eq!(query(e.cast()), INVALID_HANDLE);
    assert_eq!(m.bad_uses(), 2);
    assert_eq!(destroy_stream(e.cast()), INVALID_HANDLE);
    assert_eq!(destroy_event(e), SUCCESS);
    assert_eq!(destroy_event(e), INVALID_HANDLE);
    assert_eq!(m.bad_destroys(), 6);
    assert_eq!((m.live_events(), m.destroyed_events()), (0, 1));
    leave(0);
}

#[test]
fn the_nth_call_fails() {
    let (_g, m) = mock();
    enter(0);
    m.fail("cuStreamCreate", 2, CUresult::CUDA_ERROR_OUT_OF_MEMORY);
    let a = stream(0);
    let mut b = std::ptr::null_mut();
    // SAFETY: valid out-pointer.
    let rc = unsafe { cuStreamCreate(&mut b, 0) };
    assert_eq!(rc, CUresult::CUDA_ERROR_OUT_OF_MEMORY);
    assert!(b.is_null(), "a failed call writes nothing");
    let c = stream(0);
    assert_eq!(m.live_streams(), 2);
    assert_eq!(m.calls("cuStreamCreate"), 3);

    // Every call, by the C name of a versioned symbol, until the reset.
    m.fail_always("cuStreamDestroy", CUresult::CUDA_ERROR_LAUNCH_FAILED);
    for _ in 0..3 {
        assert_eq!(destroy_stream(a), CUresult::CUDA_ERROR_LAUNCH_FAILED);
    }
    assert_eq!(m.live_streams(), 2);
    assert_eq!(m.bad_destroys(), 0);
    m.reset();
    assert_eq!(m.calls("cuStreamDestroy_v2"), 0);
    assert_eq!(destroy_stream(a), SUCCESS);
    assert_eq!(destroy_stream(c), SUCCESS);

    // The same through the configuration string.
    assert!(m.configure("fail=cuEventCreate:1:CUDA_ERROR_OUT_OF_MEMORY; fail=cuEventCreate:3:700"));
    let mut e = std::ptr::null_mut();
    // SAFETY: valid out-pointers.
    unsafe {
        assert_eq!(cuEventCreate(&mut e, 0), CUresult::CUDA_ERROR_OUT_OF_MEMORY);
        assert_eq!(cuEventCreate(&mut e, 0), SUCCESS);
        assert_eq!(destroy_event(e), SUCCESS);
        assert_eq!(cuEventCreate(&mut e, 0), CUresult(700));
    }
    assert!(
        !m.configure("omit=cuStreamGetId"),
        "omission is not a run-time setting"
    );
    assert!(
        !m.configure("fail=cuTexObjectCreate:1:2"),
        "not an export of the mock"
    );
    leave(0);
}

#[test]
fn the_version_is_overridden() {
    let (_g, m) = mock();
    let d = Driver::global().unwrap();
    assert_eq!(d.version(), Ok(13000));
    m.set_version(12040);
    assert_eq!(d.version(), Ok(12040));
    assert!(m.configure("version=12080"));
    let mut v = 0;
    // SAFETY: valid out-pointer.
    assert_eq!(unsafe { cuDriverGetVersion(&mut v) }, SUCCESS);
    assert_eq!(v, 12080);
    m.reset();
    assert_eq!(d.version(), Ok(13000));
}
