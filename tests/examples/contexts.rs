//! `contexts`: what the driver and NCCL do with the calling thread's current context, in raw
//! driver and NCCL calls only (no code of cuda-stream), so that the crate's rules for binding a
//! context rest on what the driver does rather than on what its manual leaves unsaid.
//!
//! ```sh
//! target/release/examples/contexts            # on a machine with one or more GPUs
//! ```
//!
//! 1. For each operation the crate enqueues on an explicit stream (copies of pageable and pinned
//!    host memory, memsets, device copies, pool allocations, kernels, events, host functions,
//!    captures), its answer with no context current, with another context current (a second
//!    context of the same device, and the primary context of another device) and with the
//!    stream's own context current.
//! 2. With two GPUs and NCCL: the current context before and after `ncclCommInitAll`,
//!    `ncclCommInitRank` and a collective, called from threads with no context current and with
//!    the communicator's context current; which primary contexts NCCL made active.
//! 3. With two GPUs: peer copy bandwidth of stream-ordered pool memory with no peer access, with
//!    context peer access, with the pools' access granted, and with only the grant.

use std::ffi::{c_int, c_uint, c_void};
use std::ptr;
use std::time::Instant;

use cuda_stream_tests::RawContext;
use cuda_sys::{self as sys, CUcontext, CUdeviceptr, CUresult, CUstream};

const OK: CUresult = CUresult::CUDA_SUCCESS;

const PTX: &str = r#"
.version 7.0
.target sm_52
.address_size 64
.visible .entry store(
	.param .u64 store_param_0,
	.param .u32 store_param_1
)
{
	.reg .b32 	%r<2>;
	.reg .b64 	%rd<3>;
	ld.param.u64 	%rd1, [store_param_0];
	ld.param.u32 	%r1, [store_param_1];
	cvta.to.global.u64 	%rd2, %rd1;
	st.global.u32 	[%rd2], %r1;
	ret;
}
.visible .entry copy_u32(
	.param .u64 copy_param_0,
	.param .u64 copy_param_1
)
{
	.reg .b32 	%r<2>;
	.reg .b64 	%rd<5>;
	ld.param.u64 	%rd1, [copy_param_0];
	ld.param.u64 	%rd2, [copy_param_1];
	cvta.to.global.u64 	%rd3, %rd1;
	cvta.to.global.u64 	%rd4, %rd2;
	ld.global.u32 	%r1, [%rd4];
	st.global.u32 	[%rd3], %r1;
	ret;
}
"#;

fn name(rc: CUresult) -> &'static str {
    let n = sys::result_name(rc);
    n.strip_prefix("CUDA_ERROR_").unwrap_or(n)
}

#[track_caller]
fn ok(rc: CUresult, what: &str) {
    assert_eq!(rc, OK, "{what}: {}", sys::result_name(rc));
}

fn current() -> CUcontext {
    let mut c = ptr::null_mut();
    // SAFETY: a valid out-pointer.
    ok(unsafe { sys::cuCtxGetCurrent(&mut c) }, "cuCtxGetCurrent");
    c
}

fn set_current(c: CUcontext) {
    // SAFETY: `c` is null or a live context of this program.
    ok(unsafe { sys::cuCtxSetCurrent(c) }, "cuCtxSetCurrent");
}

fn primary(dev: c_int) -> CUcontext {
    let mut c = ptr::null_mut();
    // SAFETY: a valid out-pointer; the ordinal is below the device count.
    ok(
        unsafe { sys::cuDevicePrimaryCtxRetain(&mut c, dev) },
        "cuDevicePrimaryCtxRetain",
    );
    c
}

fn primary_active(dev: c_int) -> bool {
    let (mut flags, mut active) = (0 as c_uint, 0 as c_int);
    // SAFETY: valid out-pointers.
    ok(
        unsafe { sys::cuDevicePrimaryCtxGetState(dev, &mut flags, &mut active) },
        "cuDevicePrimaryCtxGetState",
    );
    active != 0
}

/// What a stream of `ctx` needs for the operations: made with `ctx` current, which is undone.
struct Target {
    ctx: CUcontext,
    stream: CUstream,
    dev: c_int,
    d: CUdeviceptr,
    d2: CUdeviceptr,
    pinned: *mut c_void,
    event: sys::CUevent,
    store: sys::CUfunction,
}

const BIG: usize = 1 << 20;
const SMALL: usize = 4096;

impl Target {
    /// `pool`: the device memory comes from the device's default pool (stream-ordered), else
    /// from `cuMemAlloc`.
    fn new(ctx: CUcontext, pool: bool) -> Target {
        let before = current();
        set_current(ctx);
        let mut t = Target {
            ctx,
            stream: ptr::null_mut(),
            dev: 0,
            d: 0,
            d2: 0,
            pinned: ptr::null_mut(),
            event: ptr::null_mut(),
            store: ptr::null_mut(),
        };
        // SAFETY: out-pointers to fields of `t`; `ctx` is current.
        unsafe {
            ok(sys::cuCtxGetDevice(&mut t.dev), "cuCtxGetDevice");
            ok(sys::cuStreamCreate(&mut t.stream, 1), "cuStreamCreate");
            if pool {
                let mut p = ptr::null_mut();
                ok(
                    sys::cuDeviceGetDefaultMemPool(&mut p, t.dev),
                    "cuDeviceGetDefaultMemPool",
                );
                ok(
                    sys::cuMemAllocFromPoolAsync(&mut t.d, BIG, p, t.stream),
                    "cuMemAllocFromPoolAsync",
                );
                ok(
                    sys::cuMemAllocFromPoolAsync(&mut t.d2, BIG, p, t.stream),
                    "cuMemAllocFromPoolAsync",
                );
                ok(sys::cuStreamSynchronize(t.stream), "cuStreamSynchronize");
            } else {
                ok(sys::cuMemAlloc(&mut t.d, BIG), "cuMemAlloc");
                ok(sys::cuMemAlloc(&mut t.d2, BIG), "cuMemAlloc");
            }
            ok(sys::cuMemHostAlloc(&mut t.pinned, BIG, 0), "cuMemHostAlloc");
            ok(sys::cuEventCreate(&mut t.event, 2), "cuEventCreate");
            let mut m = ptr::null_mut();
            let src = std::ffi::CString::new(PTX).unwrap();
            ok(
                sys::cuModuleLoadData(&mut m, src.as_ptr().cast()),
                "cuModuleLoadData",
            );
            ok(
                sys::cuModuleGetFunction(&mut t.store, m, c"store".as_ptr()),
                "cuModuleGetFunction",
            );
        }
        set_current(before);
        t
    }
}

extern "C" fn host_noop(_: *mut c_void) {}

/// Each operation: its name and a function that enqueues it on the target's stream.
type Op = (&'static str, fn(&Target, &mut Vec<u8>) -> CUresult);

fn ops() -> Vec<Op> {
    vec![
        ("cuMemcpyHtoDAsync pageable 1 MiB", |t, h| unsafe {
            sys::cuMemcpyHtoDAsync(t.d, h.as_ptr().cast(), BIG, t.stream)
        }),
        ("cuMemcpyHtoDAsync pageable 4 KiB", |t, h| unsafe {
            sys::cuMemcpyHtoDAsync(t.d, h.as_ptr().cast(), SMALL, t.stream)
        }),
        ("cuMemcpyDtoHAsync pageable 1 MiB", |t, h| unsafe {
            sys::cuMemcpyDtoHAsync(h.as_mut_ptr().cast(), t.d, BIG, t.stream)
        }),
        ("cuMemcpyDtoHAsync pageable 4 KiB", |t, h| unsafe {
            sys::cuMemcpyDtoHAsync(h.as_mut_ptr().cast(), t.d, SMALL, t.stream)
        }),
        ("cuMemcpyHtoDAsync pinned", |t, _| unsafe {
            sys::cuMemcpyHtoDAsync(t.d, t.pinned, BIG, t.stream)
        }),
        ("cuMemcpyDtoHAsync pinned", |t, _| unsafe {
            sys::cuMemcpyDtoHAsync(t.pinned, t.d, BIG, t.stream)
        }),
        ("cuMemcpyAsync pageable to device", |t, h| unsafe {
            sys::cuMemcpyAsync(t.d, h.as_ptr() as CUdeviceptr, BIG, t.stream)
        }),
        ("cuMemcpyHtoD (synchronous)", |t, h| unsafe {
            sys::cuMemcpyHtoD(t.d, h.as_ptr().cast(), BIG)
        }),
        ("cuMemsetD8Async", |t, _| unsafe {
            sys::cuMemsetD8Async(t.d, 7, BIG, t.stream)
        }),
        ("cuMemsetD32Async", |t, _| unsafe {
            sys::cuMemsetD32Async(t.d, 7, BIG / 4, t.stream)
        }),
        ("cuMemcpyDtoDAsync", |t, _| unsafe {
            sys::cuMemcpyDtoDAsync(t.d2, t.d, BIG, t.stream)
        }),
        ("cuMemAllocAsync + cuMemFreeAsync", |t, _| unsafe {
            let mut p = 0;
            let rc = sys::cuMemAllocAsync(&mut p, BIG, t.stream);
            if rc != OK {
                return rc;
            }
            sys::cuMemFreeAsync(p, t.stream)
        }),
        ("cuMemAllocFromPoolAsync (default pool)", |t, _| unsafe {
            let mut pool = ptr::null_mut();
            let rc = sys::cuDeviceGetDefaultMemPool(&mut pool, t.dev);
            if rc != OK {
                return rc;
            }
            let mut p = 0;
            let rc = sys::cuMemAllocFromPoolAsync(&mut p, BIG, pool, t.stream);
            if rc != OK {
                return rc;
            }
            sys::cuMemFreeAsync(p, t.stream)
        }),
        ("cuLaunchKernel", |t, _| unsafe {
            let (mut p, mut v) = (t.d, 5u32);
            let mut args = [
                (&mut p as *mut CUdeviceptr).cast::<c_void>(),
                (&mut v as *mut u32).cast::<c_void>(),
            ];
            sys::cuLaunchKernel(
                t.store,
                1,
                1,
                1,
                1,
                1,
                1,
                0,
                t.stream,
                args.as_mut_ptr(),
                ptr::null_mut(),
            )
        }),
        ("cuEventRecord + cuStreamWaitEvent", |t, _| unsafe {
            let rc = sys::cuEventRecord(t.event, t.stream);
            if rc != OK {
                return rc;
            }
            sys::cuStreamWaitEvent(t.stream, t.event, 0)
        }),
        ("cuLaunchHostFunc", |t, _| unsafe {
            sys::cuLaunchHostFunc(t.stream, Some(host_noop), ptr::null_mut())
        }),
        ("capture of a memset, instantiate, launch", |t, _| unsafe {
            let rc = sys::cuStreamBeginCapture(
                t.stream,
                sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
            );
            if rc != OK {
                return rc;
            }
            let rc1 = sys::cuMemsetD8Async(t.d, 3, BIG, t.stream);
            let mut g = ptr::null_mut();
            let rc2 = sys::cuStreamEndCapture(t.stream, &mut g);
            if rc1 != OK {
                return rc1;
            }
            if rc2 != OK {
                return rc2;
            }
            let mut e = ptr::null_mut();
            let rc = sys::cuGraphInstantiate(&mut e, g, 0);
            sys::cuGraphDestroy(g);
            if rc != OK {
                return rc;
            }
            let rc = sys::cuGraphLaunch(e, t.stream);
            sys::cuStreamSynchronize(t.stream);
            sys::cuGraphExecDestroy(e);
            rc
        }),
        ("cuStreamQuery", |t, _| unsafe {
            sys::cuStreamQuery(t.stream)
        }),
    ]
}

/// Runs every operation on `target` with each of `states` current, and prints a table.
fn table(title: &str, target: &Target, states: &[(&str, CUcontext)]) {
    println!("\n{title}");
    print!("| operation |");
    for (s, _) in states {
        print!(" {s} |");
    }
    println!();
    print!("| --- |");
    for _ in states {
        print!(" --- |");
    }
    println!();
    let mut host = vec![1u8; BIG];
    for (op, f) in ops() {
        print!("| {op} |");
        for &(_, state) in states {
            set_current(state);
            let rc = f(target, &mut host);
            set_current(ptr::null_mut());
            // SAFETY: the target's stream is live.
            let sync = unsafe { sys::cuStreamSynchronize(target.stream) };
            if sync == OK {
                print!(" {} |", name(rc));
            } else {
                print!(" {} (then sync {}) |", name(rc), name(sync));
            }
        }
        println!();
    }
    set_current(ptr::null_mut());
}

fn count() -> c_int {
    let mut n = 0;
    // SAFETY: a valid out-pointer.
    ok(unsafe { sys::cuDeviceGetCount(&mut n) }, "cuDeviceGetCount");
    n
}

fn which(c: CUcontext, names: &[(&str, CUcontext)]) -> String {
    if c.is_null() {
        return "none".into();
    }
    names
        .iter()
        .find(|(_, n)| *n == c)
        .map(|(s, _)| s.to_string())
        .unwrap_or_else(|| format!("{c:p}"))
}

fn main() {
    // SAFETY: the first call.
    let rc = unsafe { sys::cuInit(0) };
    if rc != OK {
        eprintln!("no GPU: cuInit {}", sys::result_name(rc));
        std::process::exit(2);
    }
    let n = count();
    println!("devices: {n}");
    set_current(ptr::null_mut());
    // `contexts` runs the tables and NCCL; `contexts peer none|src|dst` the peer copies with
    // that context current (each in its own process: a crash ends only that part).
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("peer") {
        if n < 2 {
            println!("one device: no peer copies");
            return;
        }
        let (p0, p1) = (primary(0), primary(1));
        let (t0, t1) = (Target::new(p0, true), Target::new(p1, true));
        let cur = match args.get(1).map(String::as_str) {
            Some("src") => p0,
            Some("dst") => p1,
            _ => ptr::null_mut(),
        };
        println!(
            "current during the copies: {}",
            args.get(1).map_or("none", |s| s.as_str())
        );
        set_current(cur);
        peer_part(&t0, &t1);
        return;
    }

    // 1a. Two contexts of one device.
    let p0 = primary(0);
    let t0 = Target::new(p0, false);
    let t0_pool = Target::new(p0, true);
    // The test driver has no cuCtxCreate: then only the other device's context is tried.
    match std::panic::catch_unwind(|| RawContext::create(cuda_stream::Device::from_raw(0))) {
        Ok(second) => {
            for (t, what) in [(&t0, "cuMemAlloc"), (&t0_pool, "default-pool")] {
                table(
                    &format!(
                        "stream of device 0's primary context, {what} memory; what is current:"
                    ),
                    t,
                    &[
                        ("none", ptr::null_mut()),
                        ("another context of device 0", second.raw()),
                        ("its own", p0),
                    ],
                );
            }
        }
        Err(_) => println!("no second context of device 0 (cuCtxCreate failed)"),
    }
    bind_costs(p0);
    if n < 2 {
        println!("\none device: the two-device parts are skipped");
        return;
    }
    // 1b. Two devices.
    let p1 = primary(1);
    let t1 = Target::new(p1, true);
    let states = [
        ("none", ptr::null_mut()),
        ("device 0's primary", p0),
        ("its own", p1),
    ];
    table(
        "stream of device 1's primary context, default-pool memory, no access granted; what is current:",
        &t1,
        &states,
    );
    let pool1 = pool_of(1);
    println!("\ngrant pool1 to device 0: {}", name(grant(pool1, 0, 3)));
    table("the same after the grant:", &t1, &states);
    println!("\nrevoke the grant: {}", name(grant(pool1, 0, 0)));
    println!(
        "enable context peer access 0->1: {}",
        name(peer_access(p0, p1, true))
    );
    table(
        "the same with context peer access 0->1 and no pool grant:",
        &t1,
        &states,
    );
    println!(
        "\ndisable context peer access 0->1: {}",
        name(peer_access(p0, p1, false))
    );
    let t1_plain = Target::new(p1, false);
    table(
        "stream of device 1's primary context, cuMemAlloc memory, no peer access; what is current:",
        &t1_plain,
        &states,
    );
    let names = [("device 0's primary", p0), ("device 1's primary", p1)];

    // 2. NCCL (the peer copies run apart: `contexts peer ...`).
    drop(t0_pool);
    match sys::nccl::Nccl::global() {
        Err(e) => println!("\nNCCL: not loaded ({e})"),
        Ok(nccl) => nccl_part(nccl, &t0, &t1_plain, &names),
    }
}

/// What binding a context costs: `cuCtxGetCurrent`, and a push + pop of another context.
fn bind_costs(ctx: CUcontext) {
    let n = 200_000;
    set_current(ptr::null_mut());
    let t = Instant::now();
    for _ in 0..n {
        std::hint::black_box(current());
    }
    let get = t.elapsed().as_nanos() as f64 / n as f64;
    let t = Instant::now();
    for _ in 0..n {
        let mut popped = ptr::null_mut();
        // SAFETY: a live context, pushed and popped on this thread.
        unsafe {
            sys::cuCtxPushCurrent(ctx);
            sys::cuCtxPopCurrent(&mut popped);
        }
    }
    let push_pop = t.elapsed().as_nanos() as f64 / n as f64;
    let t = Instant::now();
    for _ in 0..n {
        set_current(ctx);
        set_current(ptr::null_mut());
    }
    let set = t.elapsed().as_nanos() as f64 / n as f64;
    println!(
        "\nbinding costs (ns per call, medians not taken: {n} calls): cuCtxGetCurrent {get:.1}, \
         cuCtxPushCurrent + cuCtxPopCurrent {push_pop:.1}, two cuCtxSetCurrent {set:.1}"
    );
}

fn nccl_part(
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

fn pool_of(dev: c_int) -> sys::CUmemoryPool {
    let mut pool = ptr::null_mut();
    // SAFETY: a valid out-pointer.
    ok(
        unsafe { sys::cuDeviceGetDefaultMemPool(&mut pool, dev) },
        "cuDeviceGetDefaultMemPool",
    );
    pool
}

fn access(pool: sys::CUmemoryPool, dev: c_int) -> String {
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

fn grant(pool: sys::CUmemoryPool, dev: c_int, flags: u32) -> CUresult {
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

fn peer_access(from: CUcontext, to: CUcontext, enable: bool) -> CUresult {
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

fn peer_part(t0: &Target, t1: &Target) {
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
