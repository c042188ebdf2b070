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

mod nccl;
mod ops;
mod peers;

use std::ffi::{c_int, c_uint};
use std::ptr;
use std::time::Instant;

use cuda_stream_sys::{self as sys, CUcontext, CUresult};
use cuda_stream_tests::RawContext;

use ops::{Target, table};
use peers::{grant, peer_access, pool_of};

const OK: CUresult = CUresult::CUDA_SUCCESS;

pub(crate) fn name(rc: CUresult) -> &'static str {
    let n = sys::result_name(rc);
    n.strip_prefix("CUDA_ERROR_").unwrap_or(n)
}

#[track_caller]
pub(crate) fn ok(rc: CUresult, what: &str) {
    assert_eq!(rc, OK, "{what}: {}", sys::result_name(rc));
}

pub(crate) fn current() -> CUcontext {
    let mut c = ptr::null_mut();
    // SAFETY: a valid out-pointer.
    ok(unsafe { sys::cuCtxGetCurrent(&mut c) }, "cuCtxGetCurrent");
    c
}

pub(crate) fn set_current(c: CUcontext) {
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

pub(crate) fn primary_active(dev: c_int) -> bool {
    let (mut flags, mut active) = (0 as c_uint, 0 as c_int);
    // SAFETY: valid out-pointers.
    ok(
        unsafe { sys::cuDevicePrimaryCtxGetState(dev, &mut flags, &mut active) },
        "cuDevicePrimaryCtxGetState",
    );
    active != 0
}

fn count() -> c_int {
    let mut n = 0;
    // SAFETY: a valid out-pointer.
    ok(unsafe { sys::cuDeviceGetCount(&mut n) }, "cuDeviceGetCount");
    n
}

pub(crate) fn which(c: CUcontext, names: &[(&str, CUcontext)]) -> String {
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
        peers::peer_part(&t0, &t1);
        return;
    }

    // `contexts first-init [none|dev0|dev1]`: NCCL's first `ncclCommInitAll` of the process
    // over both devices, from a fresh thread with that context pushed; then the thread's context
    // stack, popped one entry at a time.
    if args.first().map(String::as_str) == Some("first-init") {
        if n < 2 {
            println!("one device: no two-device init");
            return;
        }
        let (p0, p1) = (primary(0), primary(1));
        let pushed = match args.get(1).map(String::as_str) {
            Some("dev0") => p0,
            Some("dev1") => p1,
            _ => ptr::null_mut(),
        };
        let names = [("device 0's primary", p0), ("device 1's primary", p1)];
        match sys::nccl::Nccl::global() {
            Err(e) => println!("no NCCL: {e}"),
            Ok(nccl) => nccl::first_init(nccl, pushed, &names),
        }
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
    match sys::nccl::Nccl::global() {
        Err(e) => println!("\nNCCL: not loaded ({e})"),
        Ok(nccl) => nccl::nccl_part(nccl, &t0, &t1_plain, &names),
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
