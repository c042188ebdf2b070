//! The raw driver API (cuda-stream-sys only) against a real driver, and the test kernels themselves.

use std::ffi::c_char;
use std::io::Write as _;
use std::ptr;
use std::time::{Duration, Instant};

use cuda_stream_tests::{DeviceBuffer, Kernels, check, current_context, gpu, sys};

#[test]
fn raw_driver_smoke() {
    let Some(ctx) = gpu() else { return };

    // SAFETY: cuInit takes a flags word, which must be 0.
    check(unsafe { sys::cuInit(0) }, "cuInit");

    let mut version = 0;
    // SAFETY: `version` is a valid out-pointer.
    check(
        unsafe { sys::cuDriverGetVersion(&mut version) },
        "cuDriverGetVersion",
    );
    println!(
        "driver supports CUDA {} ({version}); bindings from CUDA {}",
        sys::format_version(version),
        sys::format_version(sys::HEADER_CUDA_VERSION as i32)
    );
    assert!(version >= 1000, "implausible driver version {version}");
    assert_eq!(cuda_stream::driver_version().unwrap(), version);

    let mut count = 0;
    // SAFETY: `count` is a valid out-pointer.
    check(
        unsafe { sys::cuDeviceGetCount(&mut count) },
        "cuDeviceGetCount",
    );
    println!("{count} device(s)");
    assert!(count >= 1);
    assert_eq!(cuda_stream::Device::count().unwrap(), count as usize);

    for ordinal in 0..count {
        let mut dev = 0;
        // SAFETY: `dev` is a valid out-pointer; the ordinal is below the count.
        check(
            unsafe { sys::cuDeviceGet(&mut dev, ordinal) },
            "cuDeviceGet",
        );
        let mut name = [0 as c_char; 256];
        // SAFETY: the buffer is writable for the length passed.
        check(
            unsafe { sys::cuDeviceGetName(name.as_mut_ptr(), name.len() as i32, dev) },
            "cuDeviceGetName",
        );
        // SAFETY: the driver NUL-terminates the name within the buffer.
        let name = unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        println!("device {ordinal}: {name}");
        assert!(!name.is_empty());
        let safe = cuda_stream::Device::new(ordinal as usize).unwrap();
        assert_eq!(safe.raw(), dev);
        assert_eq!(safe.name().unwrap(), name);
    }

    // A stream created and destroyed through the raw API, on a thread with no current context.
    std::thread::spawn(|| {
        assert!(current_context().is_null());
        let mut primary = ptr::null_mut();
        // SAFETY: `primary` is a valid out-pointer; device 0 exists.
        check(
            unsafe { sys::cuDevicePrimaryCtxRetain(&mut primary, 0) },
            "cuDevicePrimaryCtxRetain",
        );
        // SAFETY: the context was just retained.
        check(
            unsafe { sys::cuCtxPushCurrent(primary) },
            "cuCtxPushCurrent",
        );
        let mut stream = ptr::null_mut();
        // SAFETY: `stream` is a valid out-pointer; a context is current.
        check(
            unsafe {
                sys::cuStreamCreate(&mut stream, sys::CUstream_flags::CU_STREAM_NON_BLOCKING.0)
            },
            "cuStreamCreate",
        );
        assert!(!stream.is_null());
        println!("raw stream {stream:p} in context {primary:p}");
        // SAFETY: the stream is live.
        check(unsafe { sys::cuStreamQuery(stream) }, "cuStreamQuery");
        // SAFETY: the stream is live.
        check(
            unsafe { sys::cuStreamSynchronize(stream) },
            "cuStreamSynchronize",
        );
        // SAFETY: created above, destroyed once.
        check(unsafe { sys::cuStreamDestroy(stream) }, "cuStreamDestroy");
        let mut popped = ptr::null_mut();
        // SAFETY: pops what was pushed above.
        check(
            unsafe { sys::cuCtxPopCurrent(&mut popped) },
            "cuCtxPopCurrent",
        );
        assert_eq!(popped, primary);
        // SAFETY: releases the retain taken above.
        check(
            unsafe { sys::cuDevicePrimaryCtxRelease(0) },
            "cuDevicePrimaryCtxRelease",
        );
        assert!(current_context().is_null());
    })
    .join()
    .unwrap();
    drop(ctx);
}

#[test]
fn test_kernels_compute_what_they_claim() {
    let Some(ctx) = gpu() else { return };
    let k = Kernels::load(&ctx);
    let s = ctx.new_stream().unwrap();
    let buf = DeviceBuffer::new(&ctx, 4);
    assert_eq!(buf.read(), [0, 0, 0, 0], "a new buffer is zeroed");

    let spin = Duration::from_millis(50);
    let start = Instant::now();
    k.store_after_spin(&s, buf.at(0), 42, spin);
    k.copy_u32(&s, buf.at(1), buf.at(0));
    k.add_u32(&s, buf.at(2), 5);
    k.add_u32(&s, buf.at(2), 6);
    k.spin(&s, spin);
    s.synchronize().unwrap();
    let took = start.elapsed();
    println!("two 50 ms spins took {took:?} on the host");
    // Two spins in one stream run one after the other; the host saw at least their GPU time.
    assert!(took >= spin * 2 * 9 / 10, "spins ended early: {took:?}");
    assert_eq!(buf.read(), [42, 42, 11, 0]);

    buf.fill_async(&s, 9);
    s.synchronize().unwrap();
    assert_eq!(buf.read(), [9, 9, 9, 9]);
    k.store(&s, buf.at(3), 1);
    s.synchronize().unwrap();
    assert_eq!(buf.get(3), 1);
}

/// Every binding the driver has resolves, through the driver's own `cuGetProcAddress` at the
/// binding's ABI version (the per-thread flag for `_ptsz` / `_ptds`), and none newer than
/// [`Driver::abi_version`](sys::Driver::abi_version) does. Prints how many resolved, and how many
/// of those are the very address the driver exports under the binding's symbol.
#[test]
fn every_binding_the_driver_has_resolves_at_its_abi_version() {
    let Some(_ctx) = gpu() else { return };
    let d = sys::Driver::global().unwrap();
    let abi = d.abi_version();
    let version = d.driver_version().expect("the driver tells its version");
    // Past the harness's capture, so that the GPU bundle's log shows it for a passing test.
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "driver CUDA {}, bindings resolve ABIs up to CUDA {}{}, through {}",
        sys::format_version(version),
        sys::format_version(abi as i32),
        d.abi_limit()
            .map(|l| format!(" (limit {})", sys::format_version(l as i32)))
            .unwrap_or_default(),
        d.resolver()
    );
    if version >= 12000 {
        assert_eq!(d.resolver(), sys::Resolver::ProcAddressV2);
    }
    // SAFETY: the same library the driver was opened from; only addresses are compared.
    let lib = unsafe { libloading::Library::new(d.path()) }.unwrap();
    let (mut resolved, mut same, mut only_by_proc, mut absent) = (0, 0, 0, 0);
    let mut elsewhere = Vec::new();
    let mut wrong = Vec::new();
    for s in sys::SymbolInfo::all() {
        let got = d.address(s.name).expect("a binding");
        if s.since > abi {
            if got.is_ok() {
                wrong.push(format!(
                    "{} (CUDA {}) resolved above the ABI",
                    s.name, s.since
                ));
            }
            continue;
        }
        // SAFETY: only the address is read.
        let exported = unsafe { lib.get::<*mut std::ffi::c_void>(s.symbol.to_bytes_with_nul()) }
            .ok()
            .map(|p| *p);
        match (got, exported) {
            (Ok(p), Some(e)) => {
                resolved += 1;
                if p == e {
                    same += 1;
                } else {
                    elsewhere.push(s.name);
                }
            }
            (Ok(_), None) => {
                resolved += 1;
                only_by_proc += 1;
            }
            (Err(e), Some(_)) => {
                wrong.push(format!("{} is exported but did not resolve: {e}", s.name))
            }
            (Err(_), None) => absent += 1,
        }
    }
    let _ = writeln!(
        out,
        "{resolved} bindings resolved ({same} at the exported symbol's address, {only_by_proc} not \
         exported but handed out by cuGetProcAddress, {} elsewhere), {absent} absent",
        elsewhere.len()
    );
    if !elsewhere.is_empty() {
        let _ = writeln!(
            out,
            "resolved elsewhere than the exported symbol: {elsewhere:?}"
        );
    }
    drop(out);
    assert!(wrong.is_empty(), "{wrong:#?}");
    assert!(resolved >= 400, "only {resolved} bindings resolved");
    // The two ABIs of cuEventElapsedTime, when both are there, are two functions.
    if abi >= 12080 {
        let v1 = d.address("cuEventElapsedTime_v2000").unwrap().unwrap();
        let v2 = d.address("cuEventElapsedTime_v12080").unwrap().unwrap();
        println!("cuEventElapsedTime: v1 at {v1:?}, v2 at {v2:?}");
    }
}
