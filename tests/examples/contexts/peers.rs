//! The third part: peer copies of stream-ordered memory with and without peer access and pool
//! grants, and a kernel of one device reading the other's pool memory.

use std::ffi::{c_int, c_void};
use std::ptr;
use std::time::Instant;

use cuda_stream_sys::{self as sys, CUcontext, CUdeviceptr, CUresult, CUstream};

use crate::ops::{PTX, Target};
use crate::{OK, current, name, ok, set_current};

fn time_copies(
    label: &str,
    dst: (CUdeviceptr, CUcontext),
    src: (CUdeviceptr, CUcontext),
    bytes: usize,
    s: CUstream,
) {
    let reps = 10;
    eprintln!("({label}: first cuMemcpyPeerAsync)");
    // SAFETY: live allocations of `bytes` on their devices; the stream is live.
    unsafe {
        let rc = sys::cuMemcpyPeerAsync(dst.0, dst.1, src.0, src.1, bytes, s);
        let sync = sys::cuStreamSynchronize(s);
        if rc != OK || sync != OK {
            println!(
                "| {label} | cuMemcpyPeerAsync {} (sync {}) | |",
                name(rc),
                name(sync)
            );
            use std::io::Write;
            let _ = std::io::stdout().flush();
            return;
        }
        let t = Instant::now();
        for _ in 0..reps {
            ok(
                sys::cuMemcpyPeerAsync(dst.0, dst.1, src.0, src.1, bytes, s),
                "cuMemcpyPeerAsync",
            );
        }
        ok(sys::cuStreamSynchronize(s), "cuStreamSynchronize");
        let peer = (bytes * reps) as f64 / t.elapsed().as_secs_f64() / 1e9;
        let rc = sys::cuMemcpyDtoDAsync(dst.0, src.0, bytes, s);
        if rc != OK {
            println!("| {label} | {peer:.1} | {} |", name(rc));
            return;
        }
        ok(sys::cuStreamSynchronize(s), "cuStreamSynchronize");
        let t = Instant::now();
        for _ in 0..reps {
            ok(
                sys::cuMemcpyDtoDAsync(dst.0, src.0, bytes, s),
                "cuMemcpyDtoDAsync",
            );
        }
        ok(sys::cuStreamSynchronize(s), "cuStreamSynchronize");
        let dtod = (bytes * reps) as f64 / t.elapsed().as_secs_f64() / 1e9;
        println!("| {label} | {peer:.1} | {dtod:.1} |");
    }
}

pub(crate) fn pool_of(dev: c_int) -> sys::CUmemoryPool {
    let mut pool = ptr::null_mut();
    // SAFETY: a valid out-pointer.
    ok(
        unsafe { sys::cuDeviceGetDefaultMemPool(&mut pool, dev) },
        "cuDeviceGetDefaultMemPool",
    );
    pool
}

pub(crate) fn access(pool: sys::CUmemoryPool, dev: c_int) -> String {
    let mut flags = sys::CUmemAccess_flags(0);
    let mut loc = sys::CUmemLocation {
        type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
        id: dev,
    };
    // SAFETY: valid pointers.
    let rc = unsafe { sys::cuMemPoolGetAccess(&mut flags, pool, &mut loc) };
    if rc != OK {
        return name(rc).into();
    }
    format!("{}", flags.0)
}

pub(crate) fn grant(pool: sys::CUmemoryPool, dev: c_int, flags: u32) -> CUresult {
    let desc = sys::CUmemAccessDesc {
        location: sys::CUmemLocation {
            type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
            id: dev,
        },
        flags: sys::CUmemAccess_flags(flags),
    };
    // SAFETY: one valid descriptor.
    unsafe { sys::cuMemPoolSetAccess(pool, &desc, 1) }
}

pub(crate) fn peer_access(from: CUcontext, to: CUcontext, enable: bool) -> CUresult {
    let before = current();
    set_current(from);
    // SAFETY: `to` is a live context; `from` is current.
    let rc = unsafe {
        if enable {
            sys::cuCtxEnablePeerAccess(to, 0)
        } else {
            sys::cuCtxDisablePeerAccess(to)
        }
    };
    set_current(before);
    rc
}

pub(crate) fn peer_part(t0: &Target, t1: &Target) {
    let bytes = 256 << 20;
    let (pool0, pool1) = (pool_of(0), pool_of(1));
    let alloc = |t: &Target, pool| {
        let mut p = 0;
        // SAFETY: a valid out-pointer, the target's stream.
        ok(
            unsafe { sys::cuMemAllocFromPoolAsync(&mut p, bytes, pool, t.stream) },
            "cuMemAllocFromPoolAsync",
        );
        // SAFETY: the target's stream.
        ok(
            unsafe { sys::cuStreamSynchronize(t.stream) },
            "cuStreamSynchronize",
        );
        p
    };
    let (a0, a1) = (alloc(t0, pool0), alloc(t1, pool1));
    let mut can = 0;
    // SAFETY: a valid out-pointer; two device ordinals.
    ok(
        unsafe { sys::cuDeviceCanAccessPeer(&mut can, 1, 0) },
        "cuDeviceCanAccessPeer",
    );
    println!(
        "\npeer copies of 256 MiB of default-pool memory, device 0 -> device 1 (GB/s); can access peer: {can}"
    );
    println!(
        "pool access before: pool0 for device 1 = {}, pool1 for device 0 = {}",
        access(pool0, 1),
        access(pool1, 0)
    );
    println!("| state | cuMemcpyPeerAsync on dst stream | cuMemcpyDtoDAsync on dst stream |");
    println!("| --- | --- | --- |");
    time_copies(
        "no peer access",
        (a1, t1.ctx),
        (a0, t0.ctx),
        bytes,
        t1.stream,
    );
    println!(
        "enable peer access 1->0 {}, 0->1 {}",
        name(peer_access(t1.ctx, t0.ctx, true)),
        name(peer_access(t0.ctx, t1.ctx, true))
    );
    time_copies(
        "context peer access both ways",
        (a1, t1.ctx),
        (a0, t0.ctx),
        bytes,
        t1.stream,
    );
    println!(
        "grant pool0 to device 1 {}, pool1 to device 0 {} (flags 3 = read-write)",
        name(grant(pool0, 1, 3)),
        name(grant(pool1, 0, 3))
    );
    println!(
        "pool access after: pool0 for device 1 = {}, pool1 for device 0 = {}",
        access(pool0, 1),
        access(pool1, 0)
    );
    time_copies(
        "context peer access + pool grant",
        (a1, t1.ctx),
        (a0, t0.ctx),
        bytes,
        t1.stream,
    );
    time_copies(
        "the same, on the source's stream",
        (a1, t1.ctx),
        (a0, t0.ctx),
        bytes,
        t0.stream,
    );
    // A new allocation after the grant.
    let b0 = alloc(t0, pool0);
    time_copies(
        "a block allocated after the grant",
        (a1, t1.ctx),
        (b0, t0.ctx),
        bytes,
        t1.stream,
    );
    // A kernel of device 1 reading device 0's pool memory.
    // SAFETY: live allocations; t1's kernel module; a 4-byte read and write.
    unsafe {
        ok(
            sys::cuMemsetD32Async(a0, 1234, 1, t0.stream),
            "cuMemsetD32Async",
        );
        ok(sys::cuStreamSynchronize(t0.stream), "cuStreamSynchronize");
        let before = current();
        set_current(t1.ctx);
        let mut m = ptr::null_mut();
        let src = std::ffi::CString::new(PTX).unwrap();
        ok(
            sys::cuModuleLoadData(&mut m, src.as_ptr().cast()),
            "cuModuleLoadData",
        );
        let mut f = ptr::null_mut();
        ok(
            sys::cuModuleGetFunction(&mut f, m, c"copy_u32".as_ptr()),
            "cuModuleGetFunction",
        );
        set_current(before);
        let (mut dst, mut src_p) = (a1, a0);
        let mut args = [
            (&mut dst as *mut CUdeviceptr).cast::<c_void>(),
            (&mut src_p as *mut CUdeviceptr).cast::<c_void>(),
        ];
        let rc = sys::cuLaunchKernel(
            f,
            1,
            1,
            1,
            1,
            1,
            1,
            0,
            t1.stream,
            args.as_mut_ptr(),
            ptr::null_mut(),
        );
        let sync = sys::cuStreamSynchronize(t1.stream);
        let mut v = 0u32;
        sys::cuMemcpyDtoH((&mut v as *mut u32).cast(), a1, 4);
        println!(
            "a kernel of device 1 reading device 0's pool memory after the grant: launch {}, sync {}, read {v}",
            name(rc),
            name(sync)
        );
    }
    println!(
        "disable peer access 1->0 {}, 0->1 {}",
        name(peer_access(t1.ctx, t0.ctx, false)),
        name(peer_access(t0.ctx, t1.ctx, false))
    );
    time_copies(
        "pool grant only (context peer access disabled)",
        (a1, t1.ctx),
        (a0, t0.ctx),
        bytes,
        t1.stream,
    );
    println!(
        "grant pool0 to device 1 with no context peer access: {}",
        name(grant(pool0, 1, 3))
    );
}
