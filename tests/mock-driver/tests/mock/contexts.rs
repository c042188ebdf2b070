//! The mock's contexts and devices: releasing a primary context destroys what is in it; device
//! queries, errors and initialisation.

use std::ffi::{CStr, c_char};

use cuda_stream_sys::*;

use super::{
    INVALID_HANDLE, LEGACY, Log, NOT_READY, SUCCESS, destroy_event, destroy_stream, enter, event,
    launch, leave, mock, note, query, stream,
};

#[test]
fn releasing_the_primary_context_destroys_what_is_in_it() {
    let (_g, m) = mock();
    enter(0);
    let s = stream(0);
    let e = event(0);
    leave(0);
    assert_eq!(
        m.orphans(),
        2,
        "the stream and the event went with the context"
    );
    assert_eq!((m.live_streams(), m.live_events()), (0, 0));
    assert_eq!(m.destroyed(s), Some(true));
    assert_eq!(destroy_stream(s), INVALID_HANDLE);
    assert_eq!(destroy_event(e), INVALID_HANDLE);
    assert_eq!(m.bad_destroys(), 2);
    // SAFETY: no pointers.
    let rc = unsafe { cuDevicePrimaryCtxRelease(0) };
    assert_eq!(rc, CUresult::CUDA_ERROR_INVALID_CONTEXT, "not retained");
    assert_eq!(m.bad_destroys(), 3);

    // A released primary context can still be made current, but not used.
    let mut ctx = std::ptr::null_mut();
    // SAFETY: valid out-pointer.
    assert_eq!(unsafe { cuDevicePrimaryCtxRetain(&mut ctx, 0) }, SUCCESS);
    // SAFETY: no pointers.
    assert_eq!(unsafe { cuDevicePrimaryCtxRelease(0) }, SUCCESS);
    // SAFETY: a context handle from the driver.
    assert_eq!(unsafe { cuCtxSetCurrent(ctx) }, SUCCESS);
    assert_eq!(query(LEGACY), CUresult::CUDA_ERROR_CONTEXT_IS_DESTROYED);
    // SAFETY: null pops.
    assert_eq!(unsafe { cuCtxSetCurrent(std::ptr::null_mut()) }, SUCCESS);
    // SAFETY: an address the mock never handed out.
    let rc = unsafe { cuCtxPushCurrent(std::ptr::without_provenance_mut(0x1230)) };
    assert_eq!(rc, CUresult::CUDA_ERROR_INVALID_CONTEXT);
    assert_eq!(m.bad_uses(), 1);
}

/// The driver finishes a context's queued work before the release of its last reference destroys
/// it: a free queued behind a held host function runs before the context's memory goes, and
/// finds its allocation.
#[test]
fn the_last_release_finishes_the_contexts_work_first() {
    let (_g, m) = mock();
    enter(0);
    let s = stream(0);
    let mut p = 0;
    // SAFETY: valid out-pointer; a context is current.
    assert_eq!(unsafe { cuMemAllocAsync(&mut p, 256, s) }, SUCCESS);
    let log = Log::leak();
    launch(s, note(log, 0, true));
    // SAFETY: `p` is live; its free is queued behind the held host function.
    assert_eq!(unsafe { cuMemFreeAsync(p, s) }, SUCCESS);
    assert_eq!(destroy_stream(s), SUCCESS);
    log.wait_until_held();
    let opener = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(50));
        log.open_gate();
    });
    leave(0);
    assert_eq!(
        log.entries().len(),
        1,
        "the release waited for the host function"
    );
    opener.join().unwrap();
    assert_eq!(
        (m.bad_uses(), m.live_allocations(), m.pending_host_fns()),
        (0, 0, 0),
        "the free ran before the context went, and found its memory"
    );
}

#[test]
fn devices_errors_and_initialisation() {
    let (_g, m) = mock();
    let mut n = 0;
    // SAFETY: valid out-pointer.
    assert_eq!(unsafe { cuDeviceGetCount(&mut n) }, SUCCESS);
    assert_eq!(n, 2);
    let mut name = [0 as c_char; 64];
    // SAFETY: a 64-byte buffer.
    let rc = unsafe { cuDeviceGetName(name.as_mut_ptr(), 64, 1) };
    assert_eq!(rc, SUCCESS);
    // SAFETY: the mock wrote a NUL-terminated string.
    let name = unsafe { CStr::from_ptr(name.as_ptr()) };
    assert_eq!(name.to_str(), Ok("Mock CUDA Device 1"));
    let mut v = 0;
    let attr = CUdevice_attribute::CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED;
    // SAFETY: valid out-pointer.
    assert_eq!(unsafe { cuDeviceGetAttribute(&mut v, attr, 0) }, SUCCESS);
    assert_eq!(v, 1);

    m.set_device_count(1);
    let mut d = 0;
    // SAFETY: valid out-pointer.
    let rc = unsafe { cuDeviceGet(&mut d, 1) };
    assert_eq!(rc, CUresult::CUDA_ERROR_INVALID_DEVICE);
    m.reset();
    // SAFETY: valid out-pointer.
    assert_eq!(unsafe { cuDeviceGet(&mut d, 1) }, SUCCESS);

    let mut p: *const c_char = std::ptr::null();
    // SAFETY: valid out-pointer; the mock's strings live as long as the process.
    unsafe {
        assert_eq!(cuGetErrorName(NOT_READY, &mut p), SUCCESS);
        assert_eq!(CStr::from_ptr(p).to_str(), Ok("CUDA_ERROR_NOT_READY"));
        assert_eq!(cuGetErrorString(NOT_READY, &mut p), SUCCESS);
        assert!(!CStr::from_ptr(p).is_empty());
        assert_eq!(
            cuGetErrorName(CUresult(12345), &mut p),
            CUresult::CUDA_ERROR_INVALID_VALUE
        );
    }
    let (mut free, mut total) = (0, 0);
    // SAFETY: valid out-pointers.
    let rc = unsafe { cuMemGetInfo(&mut free, &mut total) };
    assert_eq!(rc, CUresult::CUDA_ERROR_INVALID_CONTEXT);
    enter(0);
    let (mut least, mut greatest) = (9, 9);
    // SAFETY: valid out-pointers.
    unsafe {
        assert_eq!(cuMemGetInfo(&mut free, &mut total), SUCCESS);
        assert_eq!(
            cuCtxGetStreamPriorityRange(&mut least, &mut greatest),
            SUCCESS
        );
    }
    assert!(free < total);
    assert_eq!((least, greatest), (0, -5));
    leave(0);
    // cuInit failing is reported, and counted like any call.
    m.fail("cuInit", 1, CUresult::CUDA_ERROR_NO_DEVICE);
    // SAFETY: no pointers.
    assert_eq!(unsafe { cuInit(0) }, CUresult::CUDA_ERROR_NO_DEVICE);
    assert_eq!(m.calls("cuInit"), 1);
}
