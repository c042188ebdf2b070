//! A fake NCCL for tests without a GPU: the `nccl*` functions `cuda-stream` calls, with their
//! arguments checked as NCCL checks them, and fault injection, so CI reaches every NCCL error
//! path (init failures, asynchronous errors, failed collectives and groups).
//!
//! It moves no data: collectives record their arguments (count, datatype, stream) and return.
//! The memory each would read and write is reported to the test driver's race detector, through
//! the hook a test installs ([`MockNccl::set_access_hook`], the driver's
//! `cuda_mock_stream_access`): as NCCL enqueues its kernels, at the call, or inside a group at
//! the outermost `ncclGroupEnd` (also when a failure injected there fails it: NCCL may have
//! enqueued part of it; but a group with a call NCCL refused launches nothing). As NCCL since
//! 2.14, a call on a communicator with an asynchronous error is refused with that error (unless
//! `MOCK_NCCL_VERSION` gives an older version).
//! Communicators are handles of this library; `ncclCommInitAll` accepts devices 0 and 1 (the
//! mock driver's), `ncclCommInitRank` ids made by its `ncclGetUniqueId` and one rank per id
//! (more would wait for peers that never come). Calls are counted; [`MockNccl::fail`] makes the
//! n-th call of a function (or every call) return a code, and
//! [`MockNccl::set_async_error`] makes a communicator report an asynchronous error.
//!
//! The `mock_nccl_*` control functions are called through the loaded library by [`MockNccl`],
//! so the tests see the state of the one copy `cuda_stream_sys::nccl::Nccl` loaded too.

// The exported functions have NCCL's C names.
#![allow(non_snake_case)]

use std::collections::HashMap;
use std::ffi::{CStr, c_char, c_int, c_void};
use std::sync::{Mutex, MutexGuard};

use cuda_stream_sys::nccl::{ncclComm_t, ncclDataType_t, ncclRedOp_t, ncclResult_t, ncclUniqueId};

mod accesses;
mod control;
mod control_exports;
mod cudart;

use accesses::{
    HOOK, Shape, Work, gather, read_only, report, same, scatter, type_size, write_only,
};
pub use control::{
    MockNccl, find_next_to_exe, mock_nccl_file_name, mock_nccl_path, partial_nccl_file_name,
    partial_nccl_path,
};

const OK: ncclResult_t = ncclResult_t::ncclSuccess;
const INVALID: ncclResult_t = ncclResult_t::ncclInvalidArgument;
const MAGIC: &[u8; 8] = b"MOCKNCCL";
const DEVICES: c_int = 2;

#[derive(Debug, Clone, Copy)]
struct Comm {
    rank: c_int,
    size: c_int,
    device: c_int,
    async_error: ncclResult_t,
}

#[derive(Default)]
struct State {
    comms: HashMap<usize, Comm>,
    next: usize,
    calls: HashMap<String, u64>,
    /// name -> (the call that fails, 0 for every call; the code).
    fail: HashMap<String, (u64, ncclResult_t)>,
    group_depth: i32,
    /// The devices of the collectives issued in the open group, whose work its end launches.
    group_devices: Vec<c_int>,
    /// name -> (count, datatype, stream) of the last call.
    last: HashMap<String, (usize, u32, usize)>,
    /// The accesses of the calls of the group under way, reported at its end.
    grouped: Vec<Work>,
    /// The first error of a call in the group under way: the group's end fails with it and
    /// launches nothing, as NCCL's does.
    group_error: Option<ncclResult_t>,
    /// Collectives launched (their work reported) since the last reset.
    launched: u64,
}

/// A call refused with `code`: inside a group, the group fails with it.
fn refuse(st: &mut State, code: ncclResult_t) -> ncclResult_t {
    if st.group_depth > 0 {
        st.group_error.get_or_insert(code);
    }
    code
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

fn lock() -> MutexGuard<'static, Option<State>> {
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Counts the call and applies the failure rules: `Some(code)` if it must fail.
fn enter(st: &mut State, name: &str) -> Option<ncclResult_t> {
    let n = st.calls.entry(name.to_string()).or_default();
    *n += 1;
    let n = *n;
    match st.fail.get(name) {
        Some(&(k, code)) if k == 0 || k == n => Some(code),
        _ => None,
    }
}

fn with(name: &str, f: impl FnOnce(&mut State) -> ncclResult_t) -> ncclResult_t {
    let mut g = lock();
    let st = g.get_or_insert_with(State::default);
    if let Some(code) = enter(st, name) {
        return code;
    }
    f(st)
}

fn comm(st: &State, c: ncclComm_t) -> Result<Comm, ncclResult_t> {
    st.comms.get(&(c as usize)).copied().ok_or(INVALID)
}

fn new_comm(st: &mut State, c: Comm) -> ncclComm_t {
    st.next += 0x100;
    let h = 0x7000_0000 + st.next;
    st.comms.insert(h, c);
    h as ncclComm_t
}

macro_rules! tri {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(code) => return code,
        }
    };
}

/// The version the fake reports: 22707 (2.27.7), or the code in `MOCK_NCCL_VERSION` (read once),
/// for a process that tests an older NCCL's behaviour.
fn version() -> c_int {
    static VERSION: std::sync::OnceLock<c_int> = std::sync::OnceLock::new();
    *VERSION.get_or_init(|| {
        std::env::var("MOCK_NCCL_VERSION")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(22707)
    })
}

/// The first NCCL that refuses a call on a communicator with an asynchronous error itself.
const CHECKS_READY: c_int = 21403;

/// `ncclGetVersion`: see [`version`].
///
/// # Safety
///
/// `version` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclGetVersion(version: *mut c_int) -> ncclResult_t {
    with("ncclGetVersion", |_| {
        if version.is_null() {
            return INVALID;
        }
        // SAFETY: non-null; the caller's contract makes it writable.
        unsafe { version.write(self::version()) };
        OK
    })
}

/// `ncclGetErrorString`.
#[unsafe(no_mangle)]
pub extern "C" fn ncclGetErrorString(result: ncclResult_t) -> *const c_char {
    let s: &CStr = match result.0 {
        0 => c"no error",
        4 => c"invalid argument",
        5 => c"invalid usage",
        6 => c"remote process exited or there was a network error",
        _ => c"unhandled error",
    };
    s.as_ptr()
}

/// `ncclGetUniqueId`: an id this library recognises.
///
/// # Safety
///
/// `id` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclGetUniqueId(id: *mut ncclUniqueId) -> ncclResult_t {
    with("ncclGetUniqueId", |_| {
        if id.is_null() {
            return INVALID;
        }
        let mut v = ncclUniqueId::default();
        for (d, s) in v.internal.iter_mut().zip(MAGIC) {
            *d = *s as c_char;
        }
        // SAFETY: non-null; the caller's contract makes it writable.
        unsafe { id.write(v) };
        OK
    })
}

/// `ncclCommInitRank`: one rank per id.
///
/// # Safety
///
/// `out` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommInitRank(
    out: *mut ncclComm_t,
    nranks: c_int,
    id: ncclUniqueId,
    rank: c_int,
) -> ncclResult_t {
    with("ncclCommInitRank", |st| {
        let ours = id.internal.iter().zip(MAGIC).all(|(a, b)| *a as u8 == *b);
        if out.is_null() || nranks < 1 || rank < 0 || rank >= nranks || !ours {
            return INVALID;
        }
        if nranks > 1 {
            // The other ranks would have to join: the fake has no peers.
            return ncclResult_t::ncclInvalidUsage;
        }
        // NCCL's rank is on the runtime's current device.
        let device = cudart::get_device();
        let c = new_comm(
            st,
            Comm {
                rank,
                size: nranks,
                device,
                async_error: OK,
            },
        );
        // SAFETY: non-null; the caller's contract makes it writable.
        unsafe { out.write(c) };
        OK
    })
}

/// `ncclCommInitAll`: devices 0 and 1.
///
/// # Safety
///
/// `out` has room for `ndev` handles and `devlist` holds `ndev` ordinals (or is null).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommInitAll(
    out: *mut ncclComm_t,
    ndev: c_int,
    devlist: *const c_int,
) -> ncclResult_t {
    with("ncclCommInitAll", |st| {
        if out.is_null() || ndev < 1 {
            return INVALID;
        }
        let devs: Vec<c_int> = (0..ndev as usize)
            .map(|i| {
                if devlist.is_null() {
                    i as c_int
                } else {
                    // SAFETY: the caller's contract: `ndev` ordinals.
                    unsafe { devlist.add(i).read() }
                }
            })
            .collect();
        if devs.iter().any(|d| !(0..DEVICES).contains(d)) {
            return INVALID;
        }
        // NCCL sets up each device in turn, then makes the one it found current again.
        cudart::on_devices(&devs, |_| ());
        for (i, d) in devs.iter().enumerate() {
            let c = new_comm(
                st,
                Comm {
                    rank: i as c_int,
                    size: ndev,
                    device: *d,
                    async_error: OK,
                },
            );
            // SAFETY: the caller's contract: room for `ndev` handles.
            unsafe { out.add(i).write(c) };
        }
        OK
    })
}

fn end_comm(name: &str, c: ncclComm_t) -> ncclResult_t {
    with(name, |st| match st.comms.remove(&(c as usize)) {
        Some(comm) => {
            // NCCL tears the communicator down on its device, then makes the device it found
            // current again (device 0 when nothing was current: the runtime's answer).
            cudart::on_devices(&[comm.device], |_| ());
            OK
        }
        None => INVALID,
    })
}

/// `ncclCommDestroy`.
#[unsafe(no_mangle)]
pub extern "C" fn ncclCommDestroy(comm: ncclComm_t) -> ncclResult_t {
    end_comm("ncclCommDestroy", comm)
}

/// `ncclCommAbort`.
#[unsafe(no_mangle)]
pub extern "C" fn ncclCommAbort(comm: ncclComm_t) -> ncclResult_t {
    end_comm("ncclCommAbort", comm)
}

/// `ncclCommGetAsyncError`: what [`MockNccl::set_async_error`] set.
///
/// # Safety
///
/// `state` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommGetAsyncError(
    c: ncclComm_t,
    state: *mut ncclResult_t,
) -> ncclResult_t {
    with("ncclCommGetAsyncError", |st| {
        let c = tri!(comm(st, c));
        if state.is_null() {
            return INVALID;
        }
        // SAFETY: non-null; the caller's contract makes it writable.
        unsafe { state.write(c.async_error) };
        OK
    })
}

/// `ncclCommCount`.
///
/// # Safety
///
/// `count` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommCount(c: ncclComm_t, count: *mut c_int) -> ncclResult_t {
    with("ncclCommCount", |st| {
        let c = tri!(comm(st, c));
        if count.is_null() {
            return INVALID;
        }
        // SAFETY: as above.
        unsafe { count.write(c.size) };
        OK
    })
}

/// `ncclCommCuDevice`.
///
/// # Safety
///
/// `device` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommCuDevice(c: ncclComm_t, device: *mut c_int) -> ncclResult_t {
    with("ncclCommCuDevice", |st| {
        let c = tri!(comm(st, c));
        if device.is_null() {
            return INVALID;
        }
        // SAFETY: as above.
        unsafe { device.write(c.device) };
        OK
    })
}

/// `ncclCommUserRank`.
///
/// # Safety
///
/// `rank` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommUserRank(c: ncclComm_t, rank: *mut c_int) -> ncclResult_t {
    with("ncclCommUserRank", |st| {
        let c = tri!(comm(st, c));
        if rank.is_null() {
            return INVALID;
        }
        // SAFETY: as above.
        unsafe { rank.write(c.rank) };
        OK
    })
}

/// The checks every collective makes, its record, and the report of its memory accesses
/// (`bufs[i]` sized and written as `shape` says; a buffer read and written, in place, is one
/// write).
#[allow(clippy::too_many_arguments)]
fn collective(
    name: &'static CStr,
    c: ncclComm_t,
    bufs: &[*const c_void],
    shape: Shape,
    count: usize,
    datatype: ncclDataType_t,
    op: Option<ncclRedOp_t>,
    rank: Option<c_int>,
    stream: *mut c_void,
) -> ncclResult_t {
    let text = name.to_str().unwrap_or_default();
    let mut now = Vec::new();
    let rc = with(text, |st| {
        let c = match comm(st, c) {
            Ok(c) => c,
            Err(code) => return refuse(st, code),
        };
        // NCCL (since 2.14) refuses a call on a communicator that reported an asynchronous
        // error (`ncclCommEnsureReady`), with that error; an older one goes on.
        if c.async_error != OK && version() >= CHECKS_READY {
            return refuse(st, c.async_error);
        }
        let null = count > 0 && bufs.iter().any(|b| b.is_null());
        let bad_type = datatype.0 >= ncclDataType_t::ncclNumTypes.0;
        let bad_op = op.is_some_and(|o| o.0 >= ncclRedOp_t::ncclNumOps.0);
        let bad_rank = rank.is_some_and(|r| r < 0 || r >= c.size);
        if null || bad_type || bad_op || bad_rank {
            return refuse(st, INVALID);
        }
        st.last
            .insert(text.to_string(), (count, datatype.0, stream as usize));
        let sizes = shape(c.size as usize, count);
        let mut accesses: Vec<(u64, usize, bool)> = Vec::new();
        for (&b, &(values, write)) in bufs.iter().zip(&sizes) {
            let bytes = values * type_size(datatype);
            if b.is_null() || bytes == 0 {
                continue;
            }
            match accesses.iter_mut().find(|a| a.0 == b as u64) {
                Some(a) => {
                    a.1 = a.1.max(bytes);
                    a.2 |= write;
                }
                None => accesses.push((b as u64, bytes, write)),
            }
        }
        let work = Work {
            name,
            stream: stream as usize,
            accesses,
        };
        // The work is launched on the communicator's device: now, or at the group's end.
        if st.group_depth > 0 {
            st.grouped.push(work);
            st.group_devices.push(c.device);
        } else {
            now.push(work);
            st.launched += 1;
            cudart::on_devices(&[c.device], |_| ());
        }
        OK
    });
    report(now);
    rc
}

/// `ncclAllReduce`.
#[unsafe(no_mangle)]
pub extern "C" fn ncclAllReduce(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    op: ncclRedOp_t,
    comm: ncclComm_t,
    stream: *mut c_void,
) -> ncclResult_t {
    let bufs = [send, recv as *const c_void];
    collective(
        c"ncclAllReduce",
        comm,
        &bufs,
        same,
        count,
        datatype,
        Some(op),
        None,
        stream,
    )
}

/// `ncclBroadcast`.
#[unsafe(no_mangle)]
pub extern "C" fn ncclBroadcast(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    root: c_int,
    comm: ncclComm_t,
    stream: *mut c_void,
) -> ncclResult_t {
    let bufs = [send, recv as *const c_void];
    collective(
        c"ncclBroadcast",
        comm,
        &bufs,
        same,
        count,
        datatype,
        None,
        Some(root),
        stream,
    )
}

/// `ncclAllGather`.
#[unsafe(no_mangle)]
pub extern "C" fn ncclAllGather(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    comm: ncclComm_t,
    stream: *mut c_void,
) -> ncclResult_t {
    let bufs = [send, recv as *const c_void];
    collective(
        c"ncclAllGather",
        comm,
        &bufs,
        gather,
        count,
        datatype,
        None,
        None,
        stream,
    )
}

/// `ncclReduceScatter`.
#[unsafe(no_mangle)]
pub extern "C" fn ncclReduceScatter(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    op: ncclRedOp_t,
    comm: ncclComm_t,
    stream: *mut c_void,
) -> ncclResult_t {
    let bufs = [send, recv as *const c_void];
    collective(
        c"ncclReduceScatter",
        comm,
        &bufs,
        scatter,
        count,
        datatype,
        Some(op),
        None,
        stream,
    )
}

/// `ncclSend`.
#[unsafe(no_mangle)]
pub extern "C" fn ncclSend(
    send: *const c_void,
    count: usize,
    datatype: ncclDataType_t,
    peer: c_int,
    comm: ncclComm_t,
    stream: *mut c_void,
) -> ncclResult_t {
    collective(
        c"ncclSend",
        comm,
        &[send],
        read_only,
        count,
        datatype,
        None,
        Some(peer),
        stream,
    )
}

/// `ncclRecv`.
#[unsafe(no_mangle)]
pub extern "C" fn ncclRecv(
    recv: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    peer: c_int,
    comm: ncclComm_t,
    stream: *mut c_void,
) -> ncclResult_t {
    let bufs = [recv as *const c_void];
    collective(
        c"ncclRecv",
        comm,
        &bufs,
        write_only,
        count,
        datatype,
        None,
        Some(peer),
        stream,
    )
}

/// `ncclGroupStart`.
#[unsafe(no_mangle)]
pub extern "C" fn ncclGroupStart() -> ncclResult_t {
    with("ncclGroupStart", |st| {
        st.group_depth += 1;
        OK
    })
}

/// `ncclGroupEnd`: `ncclInvalidUsage` without a start. A failure injected here still ends the
/// group, as NCCL's does.
#[unsafe(no_mangle)]
pub extern "C" fn ncclGroupEnd() -> ncclResult_t {
    let mut g = lock();
    let st = g.get_or_insert_with(State::default);
    let injected = enter(st, "ncclGroupEnd");
    if st.group_depth == 0 {
        return ncclResult_t::ncclInvalidUsage;
    }
    st.group_depth -= 1;
    if st.group_depth > 0 {
        return injected.unwrap_or(OK);
    }
    let work = std::mem::take(&mut st.grouped);
    let devices = std::mem::take(&mut st.group_devices);
    if let Some(code) = st.group_error.take() {
        // A call of the group failed: NCCL launches none of it.
        return injected.unwrap_or(code);
    }
    st.launched += work.len() as u64;
    drop(g);
    if !devices.is_empty() {
        cudart::on_devices(&devices, |_| ());
    }
    report(work);
    injected.unwrap_or(OK)
}
