//! User objects: creation, references, and graphs' references to them; and the control functions
//! that count graphs, executable graphs, user objects and captures.

use std::ffi::{c_uint, c_void};

use cuda_stream_sys::{CUgraph, CUhostFn, CUresult, CUuserObject};

use super::call::{INVALID_VALUE, SUCCESS, api, graph_api, put, read};
use super::graphs::graph_mut;
use crate::model::graph::{UserObject, fresh_handle};
use crate::state::worker::release;

const USER_OBJECT_NO_DESTRUCTOR_SYNC: c_uint = 1;
const GRAPH_USER_OBJECT_MOVE: c_uint = 1;

/// `cuUserObjectCreate`: `flags` must be `CU_USER_OBJECT_NO_DESTRUCTOR_SYNC`, the count at
/// least 1; the caller owns the initial references.
///
/// # Safety
///
/// `object` is null or valid for a write; `destroy` must be sound to call once with `ptr` from
/// another thread.
#[cfg_attr(exported = "cuUserObjectCreate", unsafe(no_mangle))]
pub unsafe extern "C" fn cuUserObjectCreate(
    object: *mut CUuserObject,
    ptr: *mut c_void,
    destroy: CUhostFn,
    initial_refcount: c_uint,
    flags: c_uint,
) -> CUresult {
    api("cuUserObjectCreate", false, |mut st| {
        let Some(destroy) = destroy else {
            return INVALID_VALUE;
        };
        if object.is_null() || initial_refcount == 0 || flags != USER_OBJECT_NO_DESTRUCTOR_SYNC {
            return INVALID_VALUE;
        }
        let h = fresh_handle();
        st.graphs.objects.insert(
            h,
            UserObject {
                ptr: ptr as usize,
                destroy,
                refs: u64::from(initial_refcount),
            },
        );
        st.graphs.live_user_objects += 1;
        // SAFETY: non-null; the caller's contract makes it writable.
        unsafe { put(object, h as CUuserObject) };
        SUCCESS
    })
}

/// `cuUserObjectRetain`.
///
/// # Safety
///
/// None beyond the C contract; the handle is only looked up.
#[cfg_attr(exported = "cuUserObjectRetain", unsafe(no_mangle))]
pub unsafe extern "C" fn cuUserObjectRetain(object: CUuserObject, count: c_uint) -> CUresult {
    api("cuUserObjectRetain", false, |mut st| {
        if count == 0 {
            return INVALID_VALUE;
        }
        match st.graphs.objects.get_mut(&(object as usize)) {
            Some(o) => {
                o.refs += u64::from(count);
                SUCCESS
            }
            None => {
                st.counters.bad_uses += 1;
                crate::base::trace_bad_use(file!(), line!());
                INVALID_VALUE
            }
        }
    })
}

/// `cuUserObjectRelease`: releasing more references than exist is a bad destroy.
///
/// # Safety
///
/// None beyond the C contract; the handle is only looked up.
#[cfg_attr(exported = "cuUserObjectRelease", unsafe(no_mangle))]
pub unsafe extern "C" fn cuUserObjectRelease(object: CUuserObject, count: c_uint) -> CUresult {
    api("cuUserObjectRelease", false, |mut st| {
        tri!(release(&mut st, object as usize, u64::from(count)));
        SUCCESS
    })
}

/// `cuGraphRetainUserObject`: the graph takes `count` references; with
/// `CU_GRAPH_USER_OBJECT_MOVE` they are the caller's, moved.
///
/// # Safety
///
/// None beyond the C contract; the handles are only looked up.
#[cfg_attr(exported = "cuGraphRetainUserObject", unsafe(no_mangle))]
pub unsafe extern "C" fn cuGraphRetainUserObject(
    graph: CUgraph,
    object: CUuserObject,
    count: c_uint,
    flags: c_uint,
) -> CUresult {
    graph_api("cuGraphRetainUserObject", graph as usize, |mut st| {
        if count == 0 || flags & !GRAPH_USER_OBJECT_MOVE != 0 {
            return INVALID_VALUE;
        }
        tri!(graph_mut(&mut st, graph as usize));
        let Some(o) = st.graphs.objects.get_mut(&(object as usize)) else {
            st.counters.bad_uses += 1;
            crate::base::trace_bad_use(file!(), line!());
            return INVALID_VALUE;
        };
        if flags & GRAPH_USER_OBJECT_MOVE == 0 {
            o.refs += u64::from(count);
        }
        let g = st
            .graphs
            .graphs
            .get_mut(&(graph as usize))
            .expect("checked alive");
        match g.objects.iter_mut().find(|(h, _)| *h == object as usize) {
            Some((_, n)) => *n += u64::from(count),
            None => g.objects.push((object as usize, u64::from(count))),
        }
        SUCCESS
    })
}

/// `cuGraphReleaseUserObject`: gives back references the graph holds.
///
/// # Safety
///
/// None beyond the C contract; the handles are only looked up.
#[cfg_attr(exported = "cuGraphReleaseUserObject", unsafe(no_mangle))]
pub unsafe extern "C" fn cuGraphReleaseUserObject(
    graph: CUgraph,
    object: CUuserObject,
    count: c_uint,
) -> CUresult {
    graph_api("cuGraphReleaseUserObject", graph as usize, |mut st| {
        let g = tri!(graph_mut(&mut st, graph as usize));
        let Some(i) = g.objects.iter().position(|(h, _)| *h == object as usize) else {
            return INVALID_VALUE;
        };
        let count = u64::from(count);
        if count == 0 || g.objects[i].1 < count {
            return INVALID_VALUE;
        }
        g.objects[i].1 -= count;
        if g.objects[i].1 == 0 {
            g.objects.swap_remove(i);
        }
        tri!(release(&mut st, object as usize, count));
        SUCCESS
    })
}

// ---------------------------------------------------------------------------------------------
// Control

/// Graphs created (by captures) and not destroyed.
#[unsafe(no_mangle)]
pub extern "C" fn cuda_mock_live_graphs() -> u64 {
    read(|st| st.graphs.live_graphs)
}

/// Executable graphs instantiated and not destroyed.
#[unsafe(no_mangle)]
pub extern "C" fn cuda_mock_live_graph_execs() -> u64 {
    read(|st| st.graphs.live_execs)
}

/// User objects with references left (their destructor not yet queued).
#[unsafe(no_mangle)]
pub extern "C" fn cuda_mock_live_user_objects() -> u64 {
    read(|st| st.graphs.live_user_objects)
}

/// User-object destructors that have run, over the life of the process (not reset).
#[unsafe(no_mangle)]
pub extern "C" fn cuda_mock_user_object_destructors_run() -> u64 {
    read(|st| st.graphs.destructors_run)
}

/// Explicit graph calls made while another on the same graph was under way, since the last
/// reset (the driver does not synchronise graph objects).
#[unsafe(no_mangle)]
pub extern "C" fn cuda_mock_concurrent_graph_calls() -> u64 {
    read(|st| st.counters.concurrent_graph_calls)
}

/// Captures under way (active or invalidated).
#[unsafe(no_mangle)]
pub extern "C" fn cuda_mock_live_captures() -> u64 {
    read(|st| st.graphs.captures.count())
}
