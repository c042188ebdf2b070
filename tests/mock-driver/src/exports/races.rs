//! The race detector's control functions (the model is `model/races.rs`): the races found since
//! the last reset, accesses a test or another library declares (the host reading page-locked
//! memory; the fake NCCL's collectives, which move no data).

use std::collections::HashSet;
use std::ffi::{c_char, c_int};
use std::sync::Mutex;

use cuda_stream_sys::{CUresult, CUstream};

use super::call::{SUCCESS, c_str, guard, read};
use crate::model::device::DeviceWork;
use crate::model::jobs::Work;
use crate::model::races::{Acc, Kind, Space};
use crate::state::capture::on_device_work;
use crate::state::{self, State};

/// Races found since the last reset (`cuda_mock_reset` or [`cuda_mock_clear_races`]).
#[unsafe(no_mangle)]
pub extern "C" fn cuda_mock_races() -> u64 {
    read(|st| st.races.count())
}

/// Copies the text of race report `i` (the first 64 are kept) to `out` (at most `cap` bytes, no
/// NUL). Returns its length, or -1 if there is no such report.
///
/// # Safety
///
/// `out` is null or valid for `cap` bytes of writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuda_mock_race_report(i: u32, out: *mut u8, cap: usize) -> i64 {
    guard(-1, || {
        let st = state::lock();
        let Some(r) = st.races.reports().get(i as usize) else {
            return -1;
        };
        if !out.is_null() {
            // SAFETY: the caller's promise; at most `cap` bytes.
            unsafe { std::ptr::copy_nonoverlapping(r.as_ptr(), out, r.len().min(cap)) };
        }
        r.len() as i64
    })
}

/// Forgets the races found so far (what the detector knows of the accesses stays).
#[unsafe(no_mangle)]
pub extern "C" fn cuda_mock_clear_races() {
    guard((), || state::lock().races.clear_reports());
}

/// The host reads (`write == 0`) or writes `len` bytes at `ptr`, page-locked host memory or
/// device memory: checked against the accesses it is not ordered after (what the host learnt
/// from synchronisations). Returns 0, or -1 for memory the mock did not hand out.
#[unsafe(no_mangle)]
pub extern "C" fn cuda_mock_host_access(ptr: u64, len: usize, write: c_int) -> c_int {
    guard(-1, || {
        let mut st = state::lock();
        let kind = if write == 0 { Kind::Read } else { Kind::Write };
        let acc = if st.device.host.base_of(ptr as usize).is_some() {
            Acc::host(ptr as usize, len, kind)
        } else {
            Acc::device(ptr, len, kind)
        };
        if st.device.base_of(&acc).is_none() {
            return -1;
        }
        st.race_host_op("cuda_mock_host_access", &[acc]);
        0
    })
}

/// A name that lives as long as the process (one copy per distinct name).
fn intern(name: &str) -> &'static str {
    static NAMES: Mutex<Option<HashSet<&'static str>>> = Mutex::new(None);
    let mut names = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    let set = names.get_or_insert_with(HashSet::new);
    if let Some(n) = set.get(name) {
        return n;
    }
    let leaked: &'static str = Box::leak(name.to_string().into_boxed_str());
    set.insert(leaked);
    leaked
}

/// Work of another library (`name`, such as `ncclAllReduce`) enqueued on `stream`, touching `n`
/// device ranges (`ptrs[i]`, `lens[i]` bytes, written where `writes[i] != 0`): queued in stream
/// order (it changes no memory) and checked by the race detector, or, on a capturing stream, a
/// node of the capture that each launch checks. Ranges outside the mock's allocations are left
/// out. Returns `CUDA_SUCCESS`, or the error the stream handle or the capture gives.
///
/// # Safety
///
/// `name` is null or a NUL-terminated string; `ptrs`, `lens` and `writes` are each valid for `n`
/// reads.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuda_mock_stream_access(
    stream: CUstream,
    name: *const c_char,
    n: usize,
    ptrs: *const u64,
    lens: *const usize,
    writes: *const u8,
) -> CUresult {
    // SAFETY: the caller's promise.
    let name = intern(unsafe { c_str(name) }.unwrap_or("external work"));
    let mut accesses = Vec::with_capacity(n);
    for i in 0..n {
        // SAFETY: the caller's promise: `n` entries each.
        let (p, len, w) = unsafe { (*ptrs.add(i), *lens.add(i), *writes.add(i)) };
        let kind = if w == 0 { Kind::Read } else { Kind::Write };
        accesses.push(Acc::device(p, len, kind));
    }
    guard(CUresult::CUDA_ERROR_UNKNOWN, || {
        let mut st = state::lock();
        external(&mut st, stream, name, accesses).unwrap_or_else(|rc| rc)
    })
}

fn external(
    st: &mut State,
    stream: CUstream,
    name: &'static str,
    mut accesses: Vec<Acc>,
) -> Result<CUresult, CUresult> {
    let s = st.stream(stream)?;
    accesses.retain(|a| a.space == Space::Device && st.device.base_of(a).is_some());
    let work = DeviceWork::External { name, accesses };
    if let Some(rc) = on_device_work(st, s, &work) {
        return Ok(rc);
    }
    st.race_work(s, name, &work);
    st.enqueue(s, Work::Device(work))?;
    Ok(SUCCESS)
}
