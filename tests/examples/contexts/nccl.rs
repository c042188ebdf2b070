//! The second part: what NCCL does to the calling thread's current context.

use std::ffi::{c_int, c_void};
use std::ptr;

use cuda_stream_sys::{self as sys, CUcontext, CUstream};

use crate::ops::{BIG, Target};
use crate::{current, ok, primary_active, set_current, which};

pub(crate) fn nccl_part(
    nccl: &'static sys::nccl::Nccl,
    t0: &Target,
    t1: &Target,
    names: &[(&str, CUcontext)],
) {
    use sys::nccl::{ncclComm_t, ncclDataType_t, ncclRedOp_t, ncclResult_t};
    let mut version = 0;
    // SAFETY: a valid out-pointer.
    unsafe { nccl.ncclGetVersion().unwrap()(&mut version) };
    println!("\nNCCL {version}");
    let nok = |rc: ncclResult_t, what: &str| {
        assert_eq!(rc, ncclResult_t::ncclSuccess, "{what}: {rc:?}");
    };
    let names2: Vec<(String, usize)> = names
        .iter()
        .map(|(s, c)| (s.to_string(), *c as usize))
        .collect();
    let show = move |label: &str| {
        let named: Vec<(&str, CUcontext)> = names2
            .iter()
            .map(|(s, c)| (s.as_str(), *c as CUcontext))
            .collect();
        println!(
            "  {label}: current = {}; primary active: device 0 {}, device 1 {}",
            which(current(), &named),
            primary_active(0),
            primary_active(1)
        );
    };
    let (s0, s1) = (t0.stream as usize, t1.stream as usize);
    let (d0, d1) = (t0.d as usize, t1.d as usize);
    let count = BIG / 4;

    // ncclCommInitAll from a thread with nothing current, then a group from such a thread.
    let comms: Vec<usize> = std::thread::scope(|sc| {
        sc.spawn(|| {
            show("fresh thread, before ncclCommInitAll");
            let mut comms: [ncclComm_t; 2] = [ptr::null_mut(); 2];
            let devs = [0, 1];
            // SAFETY: room for two communicators; two device ordinals.
            nok(
                unsafe { nccl.ncclCommInitAll().unwrap()(comms.as_mut_ptr(), 2, devs.as_ptr()) },
                "ncclCommInitAll",
            );
            show("after ncclCommInitAll");
            comms.iter().map(|&c| c as usize).collect()
        })
        .join()
        .unwrap()
    });
    let group = |label: &str, bind: Option<usize>| {
        std::thread::scope(|sc| {
            sc.spawn(|| {
                if let Some(c) = bind {
                    set_current(c as CUcontext);
                }
                show(&format!("{label}, before a group of two all-reduces"));
                // SAFETY: live communicators, buffers of `count` floats on their devices,
                // streams of their contexts.
                unsafe {
                    nok(nccl.ncclGroupStart().unwrap()(), "ncclGroupStart");
                    for (c, d, s) in [(comms[0], d0, s0), (comms[1], d1, s1)] {
                        nok(
                            nccl.ncclAllReduce().unwrap()(
                                d as *const c_void,
                                d as *mut c_void,
                                count,
                                ncclDataType_t::ncclFloat32,
                                ncclRedOp_t::ncclSum,
                                c as ncclComm_t,
                                s as _,
                            ),
                            "ncclAllReduce",
                        );
                    }
                    nok(nccl.ncclGroupEnd().unwrap()(), "ncclGroupEnd");
                    sys::cuStreamSynchronize(s0 as CUstream);
                    sys::cuStreamSynchronize(s1 as CUstream);
                }
                show("after the group");
            });
        });
    };
    group("fresh thread", None);
    group(
        "thread with device 1's primary current",
        Some(t1.ctx as usize),
    );
    for c in &comms {
        // SAFETY: each communicator once.
        unsafe { nccl.ncclCommDestroy().unwrap()(*c as ncclComm_t) };
    }

    // One rank per thread, as two processes would: init with the rank's context pushed (and
    // popped after), then one all-reduce from a thread with nothing current.
    let mut id = sys::nccl::ncclUniqueId::default();
    // SAFETY: a valid out-pointer.
    nok(
        unsafe { nccl.ncclGetUniqueId().unwrap()(&mut id) },
        "ncclGetUniqueId",
    );
    let ranks: Vec<(usize, CUcontext, usize, usize)> =
        vec![(0, t0.ctx, d0, s0), (1, t1.ctx, d1, s1)];
    let ranks: Vec<(usize, usize, usize, usize)> = ranks
        .into_iter()
        .map(|(r, c, d, s)| (r, c as usize, d, s))
        .collect();
    std::thread::scope(|sc| {
        for &(rank, ctx, d, s) in &ranks {
            let show = &show;
            sc.spawn(move || {
                // SAFETY: live context; pushed and popped on this thread.
                unsafe { ok(sys::cuCtxPushCurrent(ctx as CUcontext), "cuCtxPushCurrent") };
                let mut comm: ncclComm_t = ptr::null_mut();
                // SAFETY: a valid out-pointer; rank below 2.
                nok(
                    unsafe { nccl.ncclCommInitRank().unwrap()(&mut comm, 2, id, rank as c_int) },
                    "ncclCommInitRank",
                );
                let mut popped = ptr::null_mut();
                // SAFETY: pops what this thread pushed.
                unsafe { sys::cuCtxPopCurrent(&mut popped) };
                show(&format!(
                    "rank {rank}, after ncclCommInitRank with its context pushed and popped"
                ));
                // SAFETY: as for the group above.
                unsafe {
                    nok(
                        nccl.ncclAllReduce().unwrap()(
                            d as *const c_void,
                            d as *mut c_void,
                            count,
                            ncclDataType_t::ncclFloat32,
                            ncclRedOp_t::ncclSum,
                            comm,
                            s as _,
                        ),
                        "ncclAllReduce",
                    );
                }
                show(&format!(
                    "rank {rank}, after ncclAllReduce from nothing current"
                ));
                // SAFETY: the rank's stream.
                unsafe { sys::cuStreamSynchronize(s as CUstream) };
                // SAFETY: once.
                unsafe { nccl.ncclCommDestroy().unwrap()(comm) };
                set_current(ptr::null_mut());
            });
        }
    });
}

/// NCCL's first `ncclCommInitAll` over devices 0 and 1 from a fresh thread with `pushed` pushed
/// (none if null); then what is current, and the stack popped entry by entry.
pub(crate) fn first_init(
    nccl: &'static sys::nccl::Nccl,
    pushed: CUcontext,
    names: &[(&str, CUcontext)],
) {
    let pushed = pushed as usize;
    let names: Vec<(String, usize)> = names
        .iter()
        .map(|(s, c)| (s.to_string(), *c as usize))
        .collect();
    std::thread::scope(|sc| {
        sc.spawn(move || {
            let named: Vec<(&str, CUcontext)> = names
                .iter()
                .map(|(s, c)| (s.as_str(), *c as CUcontext))
                .collect();
            if pushed != 0 {
                // SAFETY: a live primary context, pushed on this thread.
                ok(
                    unsafe { sys::cuCtxPushCurrent(pushed as CUcontext) },
                    "cuCtxPushCurrent",
                );
            }
            println!(
                "before ncclCommInitAll: current = {} (pushed {})",
                which(current(), &named),
                which(pushed as CUcontext, &named)
            );
            let mut comms: [sys::nccl::ncclComm_t; 2] = [ptr::null_mut(); 2];
            let devs = [0, 1];
            // SAFETY: room for two communicators; two device ordinals.
            let rc =
                unsafe { nccl.ncclCommInitAll().unwrap()(comms.as_mut_ptr(), 2, devs.as_ptr()) };
            println!(
                "ncclCommInitAll: {rc:?}; current = {}",
                which(current(), &named)
            );
            for i in 0..6 {
                let mut popped = ptr::null_mut();
                // SAFETY: a valid out-pointer; pops this thread's stack.
                let rc = unsafe { sys::cuCtxPopCurrent(&mut popped) };
                println!(
                    "pop {i}: {} popped {}; current now {}",
                    crate::name(rc),
                    which(popped, &named),
                    which(current(), &named)
                );
                if rc != sys::CUresult::CUDA_SUCCESS {
                    break;
                }
            }
            for c in comms {
                // SAFETY: each communicator once.
                unsafe { nccl.ncclCommDestroy().unwrap()(c) };
            }
        });
    });
}
