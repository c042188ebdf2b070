//! Events: creation and destruction, records, queries, synchronisation, elapsed time and IPC
//! handles.

use std::ffi::{c_char, c_uint};
use std::time::Instant;

use cuda_stream_sys::{CUevent, CUipcEventHandle, CUresult, CUstream};

use super::call::{INVALID_HANDLE, INVALID_VALUE, NOT_READY, SUCCESS, api, put};
use crate::model::jobs::Work;
use crate::model::records::{Core, EventRec, Object};
use crate::state::{self, State};

const CU_EVENT_BLOCKING_SYNC: c_uint = 1;
const CU_EVENT_DISABLE_TIMING: c_uint = 2;
const CU_EVENT_INTERPROCESS: c_uint = 4;

fn new_event(st: &mut State, ctx: usize, flags: c_uint, core: u64) -> usize {
    st.live_events += 1;
    st.new_handle(Object::Event(EventRec {
        ctx,
        flags,
        core,
        alive: true,
    }))
}

/// `cuEventCreate`: flags are `CU_EVENT_BLOCKING_SYNC` (1), `CU_EVENT_DISABLE_TIMING` (2) and
/// `CU_EVENT_INTERPROCESS` (4, only with `DISABLE_TIMING`).
///
/// # Safety
///
/// `ph_event` is null or valid for a write.
#[cfg_attr(exported = "cuEventCreate", unsafe(no_mangle))]
pub unsafe extern "C" fn cuEventCreate(ph_event: *mut CUevent, flags: c_uint) -> CUresult {
    api("cuEventCreate", false, |mut st| {
        let known = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
        if ph_event.is_null()
            || flags & !known != 0
            || (flags & CU_EVENT_INTERPROCESS != 0 && flags & CU_EVENT_DISABLE_TIMING == 0)
        {
            return INVALID_VALUE;
        }
        let ctx = tri!(st.current_ctx());
        let core = st.next_id();
        st.cores.insert(core, Core::default());
        let h = new_event(&mut st, ctx, flags, core);
        // SAFETY: non-null; the caller's contract makes it writable.
        unsafe { put(ph_event, h as CUevent) };
        SUCCESS
    })
}

/// `cuEventDestroy_v2`: anything but a live event the mock created is counted as a bad destroy.
///
/// # Safety
///
/// None beyond the C contract; the handle is only looked up, never dereferenced.
#[cfg_attr(exported = "cuEventDestroy_v2", unsafe(no_mangle))]
pub unsafe extern "C" fn cuEventDestroy_v2(h_event: CUevent) -> CUresult {
    destroy_event("cuEventDestroy_v2", h_event)
}

/// `cuEventDestroy` (the CUDA 2.0 ABI): as `_v2`.
///
/// # Safety
///
/// None beyond the C contract; the handle is only looked up, never dereferenced.
#[cfg_attr(exported = "cuEventDestroy", unsafe(no_mangle))]
pub unsafe extern "C" fn cuEventDestroy(h_event: CUevent) -> CUresult {
    destroy_event("cuEventDestroy", h_event)
}

fn destroy_event(symbol: &'static str, h_event: CUevent) -> CUresult {
    api(symbol, false, |mut st| {
        match st.objects.get_mut(&(h_event as usize)) {
            Some(Object::Event(e)) if e.alive => {
                e.alive = false;
                st.live_events -= 1;
                st.counters.destroyed_events += 1;
                SUCCESS
            }
            _ => {
                st.counters.bad_destroys += 1;
                INVALID_HANDLE
            }
        }
    })
}

/// `cuEventRecord`: complete once everything queued on the stream before it has run. A stream of
/// another context than the event's gives `CUDA_ERROR_INVALID_HANDLE`.
///
/// # Safety
///
/// None beyond the C contract; the handles are only looked up, never dereferenced.
#[cfg_attr(exported = "cuEventRecord", unsafe(no_mangle))]
pub unsafe extern "C" fn cuEventRecord(h_event: CUevent, h_stream: CUstream) -> CUresult {
    api("cuEventRecord", false, |mut st| {
        let (ctx, _, core) = tri!(st.event(h_event as usize));
        let s = tri!(st.stream(h_stream));
        if s.ctx != ctx {
            return INVALID_HANDLE;
        }
        if let Some(rc) = crate::state::capture::on_event_record(&mut st, s, core) {
            return rc;
        }
        st.race_record(s, core);
        let record = if st.idle(s.key) {
            (0, Some(Instant::now()))
        } else {
            (tri!(st.enqueue(s, Work::Marker(core))), None)
        };
        if let Some(c) = st.cores.get_mut(&core) {
            c.record = Some(record);
        }
        SUCCESS
    })
}

/// The event's last record: `None` if never recorded, else (complete, when).
fn event_state(st: &State, core: u64) -> Option<(bool, Option<Instant>)> {
    let (seq, at) = st.cores.get(&core)?.record?;
    Some((seq <= st.completed, at))
}

/// `cuEventQuery`: `CUDA_SUCCESS` for a never-recorded event, as the real driver answers.
///
/// # Safety
///
/// None beyond the C contract; the handle is only looked up, never dereferenced.
#[cfg_attr(exported = "cuEventQuery", unsafe(no_mangle))]
pub unsafe extern "C" fn cuEventQuery(h_event: CUevent) -> CUresult {
    api("cuEventQuery", false, |mut st| {
        let (_, _, core) = tri!(st.event(h_event as usize));
        if let Some(rc) = crate::state::capture::on_event_poll(&mut st, core) {
            return rc;
        }
        match event_state(&st, core) {
            Some((false, _)) => NOT_READY,
            _ => {
                let learnt = st.race_event_clock(core);
                st.race_host_learns(&learnt);
                SUCCESS
            }
        }
    })
}

/// `cuEventSynchronize`: waits for the event's last record to complete.
///
/// # Safety
///
/// None beyond the C contract; the handle is only looked up, never dereferenced.
#[cfg_attr(exported = "cuEventSynchronize", unsafe(no_mangle))]
pub unsafe extern "C" fn cuEventSynchronize(h_event: CUevent) -> CUresult {
    api("cuEventSynchronize", false, |mut st| {
        let (_, _, core) = tri!(st.event(h_event as usize));
        if let Some(rc) = crate::state::capture::on_event_poll(&mut st, core) {
            return rc;
        }
        let target = st
            .cores
            .get(&core)
            .and_then(|c| c.record)
            .map_or(0, |r| r.0);
        let learnt = st.race_event_clock(core);
        state::wait_until_done(st, target).race_host_learns(&learnt);
        SUCCESS
    })
}

/// `cuEventElapsedTime_v2` (CUDA 12.8).
///
/// # Safety
///
/// `ms` is null or valid for a write.
#[cfg_attr(exported = "cuEventElapsedTime_v2", unsafe(no_mangle))]
pub unsafe extern "C" fn cuEventElapsedTime_v2(
    ms: *mut f32,
    h_start: CUevent,
    h_end: CUevent,
) -> CUresult {
    elapsed_time("cuEventElapsedTime_v2", ms, h_start, h_end)
}

/// `cuEventElapsedTime` (the CUDA 2.0 ABI): the same answers as `_v2` in the mock.
///
/// # Safety
///
/// `ms` is null or valid for a write.
#[cfg_attr(exported = "cuEventElapsedTime", unsafe(no_mangle))]
pub unsafe extern "C" fn cuEventElapsedTime(
    ms: *mut f32,
    h_start: CUevent,
    h_end: CUevent,
) -> CUresult {
    elapsed_time("cuEventElapsedTime", ms, h_start, h_end)
}

fn elapsed_time(symbol: &'static str, ms: *mut f32, h_start: CUevent, h_end: CUevent) -> CUresult {
    api(symbol, false, |mut st| {
        if ms.is_null() {
            return INVALID_VALUE;
        }
        let (_, start_flags, start) = tri!(st.event(h_start as usize));
        let (_, end_flags, end) = tri!(st.event(h_end as usize));
        if (start_flags | end_flags) & CU_EVENT_DISABLE_TIMING != 0 {
            return INVALID_HANDLE;
        }
        let (Some(a), Some(b)) = (event_state(&st, start), event_state(&st, end)) else {
            return INVALID_HANDLE;
        };
        let (true, Some(t0), true, Some(t1)) = (a.0, a.1, b.0, b.1) else {
            return NOT_READY;
        };
        let millis = if t1 >= t0 {
            t1.duration_since(t0).as_secs_f64() * 1e3
        } else {
            -(t0.duration_since(t1).as_secs_f64() * 1e3)
        };
        // SAFETY: non-null; the caller's contract makes it writable.
        unsafe { put(ms, millis as f32) };
        SUCCESS
    })
}

/// The bytes of a mock IPC event handle: a tag, the process id and the event's record state.
const IPC_TAG: &[u8; 16] = b"cuda-mock-ipc-ev";

/// `cuIpcGetEventHandle`: only for events created with `CU_EVENT_INTERPROCESS`.
///
/// # Safety
///
/// `p_handle` is null or valid for a write.
#[cfg_attr(exported = "cuIpcGetEventHandle", unsafe(no_mangle))]
pub unsafe extern "C" fn cuIpcGetEventHandle(
    p_handle: *mut CUipcEventHandle,
    event: CUevent,
) -> CUresult {
    api("cuIpcGetEventHandle", false, |mut st| {
        if p_handle.is_null() {
            return INVALID_VALUE;
        }
        let (_, flags, core) = tri!(st.event(event as usize));
        if flags & CU_EVENT_INTERPROCESS == 0 {
            return INVALID_VALUE;
        }
        let mut bytes = [0u8; 64];
        bytes[..16].copy_from_slice(IPC_TAG);
        bytes[16..20].copy_from_slice(&std::process::id().to_le_bytes());
        bytes[24..32].copy_from_slice(&core.to_le_bytes());
        let handle = CUipcEventHandle {
            reserved: bytes.map(|b| b as c_char),
        };
        // SAFETY: non-null; the caller's contract makes it writable.
        unsafe { put(p_handle, handle) };
        SUCCESS
    })
}

/// `cuIpcOpenEventHandle`: a new event handle (in the current context; destroy it with
/// `cuEventDestroy`) sharing the original's record state. Handles from this process alias the
/// original event; handles from another process open as a never-recorded event.
///
/// # Safety
///
/// `ph_event` is null or valid for a write.
#[cfg_attr(exported = "cuIpcOpenEventHandle", unsafe(no_mangle))]
pub unsafe extern "C" fn cuIpcOpenEventHandle(
    ph_event: *mut CUevent,
    handle: CUipcEventHandle,
) -> CUresult {
    api("cuIpcOpenEventHandle", false, |mut st| {
        if ph_event.is_null() {
            return INVALID_VALUE;
        }
        let bytes = handle.reserved.map(|b| b as u8);
        if &bytes[..16] != IPC_TAG {
            return INVALID_VALUE;
        }
        let ctx = tri!(st.current_ctx());
        let pid = u32::from_le_bytes([bytes[16], bytes[17], bytes[18], bytes[19]]);
        let mut core_bytes = [0u8; 8];
        core_bytes.copy_from_slice(&bytes[24..32]);
        let core = u64::from_le_bytes(core_bytes);
        let core = if pid == std::process::id() && st.cores.contains_key(&core) {
            core
        } else if pid == std::process::id() {
            return INVALID_VALUE;
        } else {
            let fresh = st.next_id();
            st.cores.insert(fresh, Core::default());
            fresh
        };
        let h = new_event(
            &mut st,
            ctx,
            CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS,
            core,
        );
        // SAFETY: non-null; the caller's contract makes it writable.
        unsafe { put(ph_event, h as CUevent) };
        SUCCESS
    })
}
