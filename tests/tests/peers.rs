//! Peers on the GPU: what the driver answers on one device (no peer), and with two devices peer
//! access enabled idempotently and peer copies both ways whose uses are ordered on both devices
//! (a copy on device 1 of a buffer that a kernel on device 0 writes late reads the new value,
//! round after round, with no event written by the test).

use cuda_stream::ffi::CUresult;
use cuda_stream::{Context, Device, DeviceBuffer, Error, LaunchConfig, Module, kernel_args};
use cuda_stream_tests::{alongside_others, error_chain, gpu, ptx_source, sanitizer};

#[test]
fn one_device_is_not_its_own_peer() {
    let Some(ctx) = gpu() else { return };
    let _turn = alongside_others();
    let d = ctx.device();
    assert!(!d.can_access_peer(d).unwrap(), "the driver answers no peer");
    let e = ctx.enable_peer_access(&ctx).unwrap_err();
    assert_eq!(e.call(), Some("cuCtxEnablePeerAccess"), "{e}");
    println!("enabling a device's access to itself: {e}");
    let s = ctx.new_stream().unwrap();
    let a = DeviceBuffer::<u32>::zeroed(&ctx, &s, 16).unwrap();
    let b = DeviceBuffer::<u32>::zeroed(&ctx, &s, 16).unwrap();
    assert!(matches!(
        b.copy_from_peer(&s, &a),
        Err(Error::InvalidArgument { .. })
    ));
}

fn two_gpus() -> Option<(Context, Context)> {
    let ctx0 = gpu()?;
    let n = Device::count().unwrap();
    if n < 2 {
        println!("skipped: peer tests need 2 devices, this machine has {n}");
        return None;
    }
    Some((ctx0, Context::primary(1).unwrap()))
}

fn store_after_spin(
    module: &Module,
    stream: &cuda_stream::OwnedStream,
    y: &mut DeviceBuffer<u32>,
    value: u32,
    ns: u64,
) {
    // SAFETY: store_after_spin(u32 *p, u32 value, u64 ns) writes p[0] only.
    unsafe {
        module.function("store_after_spin").unwrap().launch(
            stream,
            LaunchConfig::new(1, 1),
            &kernel_args![y.write(), value, ns],
        )
    }
    .unwrap();
}

#[test]
fn peer_access_is_idempotent() {
    let Some((c0, c1)) = two_gpus() else { return };
    let _turn = alongside_others();
    let (d0, d1) = (c0.device(), c1.device());
    let (p01, p10) = (
        d0.can_access_peer(d1).unwrap(),
        d1.can_access_peer(d0).unwrap(),
    );
    println!("peer access 0->1: {p01}, 1->0: {p10}");
    if p01 {
        c0.enable_peer_access(&c1).unwrap();
        c0.enable_peer_access(&c1).unwrap(); // already enabled: Ok
    } else {
        let e = c0.enable_peer_access(&c1).unwrap_err();
        assert_eq!(
            e.driver_code(),
            Some(CUresult::CUDA_ERROR_PEER_ACCESS_UNSUPPORTED)
        );
    }
    if p10 {
        c1.enable_peer_access(&c0).unwrap();
        c1.enable_peer_access(&c0).unwrap();
    }
}

#[test]
fn peer_copies_both_ways_are_ordered_on_both_devices() {
    let Some((c0, c1)) = two_gpus() else { return };
    let _turn = alongside_others();
    for (a, b) in [(&c0, &c1), (&c1, &c0)] {
        if a.device().can_access_peer(b.device()).unwrap() {
            a.enable_peer_access(b).unwrap();
        }
    }
    let m0 = Module::from_ptx(&c0, &ptx_source()).unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    let m1 = Module::from_ptx(&c1, &ptx_source()).unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    let (s0, s1) = (c0.new_stream().unwrap(), c1.new_stream().unwrap());
    let (t0, t1) = (c0.new_stream().unwrap(), c1.new_stream().unwrap());
    let mut x0 = DeviceBuffer::<u32>::zeroed(&c0, &s0, 1).unwrap();
    let mut y1 = DeviceBuffer::<u32>::zeroed(&c1, &s1, 1).unwrap();
    let z0 = DeviceBuffer::<u32>::zeroed(&c0, &t0, 1).unwrap();
    let rounds = if sanitizer().is_some() { 10 } else { 200 };
    let (mut stale_there, mut stale_back) = (0, 0);
    for round in 1..=rounds as u32 {
        let ns = if round % 10 == 0 { 2_000_000 } else { 20_000 };
        // Device 0 writes x late; device 1's stream copies it: waits for the kernel.
        store_after_spin(&m0, &s0, &mut x0, round, ns);
        y1.copy_from_peer(&s1, &x0).unwrap();
        // Read on device 1's other stream: waits for the copy.
        if y1.to_vec(&t1).unwrap()[0] != round {
            stale_there += 1;
        }
        // Device 1 adds to y late; device 1's stream copies y into z on device 0, and z is read
        // on device 0's other stream: waits for the copy, which waited for the kernel.
        store_after_spin(&m1, &s1, &mut y1, round + 1_000_000, ns);
        z0.copy_from_peer(&s1, &y1).unwrap();
        if z0.to_vec(&t0).unwrap()[0] != round + 1_000_000 {
            stale_back += 1;
        }
    }
    assert_eq!(
        (stale_there, stale_back),
        (0, 0),
        "stale reads in {rounds} rounds"
    );
    // Large copies both ways carry every value.
    let n = 4 << 20;
    let src: Vec<u32> = (0..n as u32).collect();
    let a = DeviceBuffer::from_host(&c0, &s0, &src).unwrap();
    let b = DeviceBuffer::<u32>::alloc_on(&c1, &s1, n).unwrap();
    b.copy_from_peer(&s1, &a).unwrap();
    let c = DeviceBuffer::<u32>::alloc_on(&c0, &t0, n).unwrap();
    c.copy_from_peer(&t0, &b).unwrap();
    assert!(
        c.to_vec(&s0).unwrap() == src,
        "a round trip over two devices"
    );
}

const CHILD_VAR: &str = "CUDA_STREAM_PEERS_CHILD";

/// Runs the test `name` again in a child process (the same binary, that test alone) and fails
/// if the child does: for a case that crashed the process before its fix.
fn in_child(name: &str) {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(CHILD_VAR, name)
        .output()
        .expect("the child process runs");
    print!("{}", String::from_utf8_lossy(&out.stdout));
    assert!(
        out.status.success(),
        "{name} in a child process: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

fn is_child(name: &str) -> bool {
    std::env::var(CHILD_VAR).is_ok_and(|v| v == name)
}

/// A peer copy from a thread with no context current, both ways. On main the driver (580)
/// crashed the process in `cuMemcpyPeerAsync` of pool memory so (tests/examples/contexts.rs);
/// the copy now binds its stream's context. In a child process, so a crash fails this test only.
#[test]
fn peer_copies_from_a_thread_with_nothing_current() {
    const NAME: &str = "peer_copies_from_a_thread_with_nothing_current";
    if !is_child(NAME) {
        if two_gpus().is_some() {
            let _turn = alongside_others();
            in_child(NAME);
        }
        return;
    }
    let (c0, c1) = two_gpus().unwrap();
    std::thread::spawn(move || {
        assert!(cuda_stream::current_context_raw().unwrap().is_null());
        let (s0, s1) = (c0.new_stream().unwrap(), c1.new_stream().unwrap());
        let src: Vec<u32> = (0..1 << 20).collect();
        let a = DeviceBuffer::from_host(&c0, &s0, &src).unwrap();
        let b = DeviceBuffer::<u32>::zeroed(&c1, &s1, src.len()).unwrap();
        b.copy_from_peer(&s1, &a).unwrap();
        let back = DeviceBuffer::<u32>::zeroed(&c0, &s0, src.len()).unwrap();
        back.copy_from_peer(&s0, &b).unwrap();
        assert!(
            back.to_vec(&s0).unwrap() == src,
            "values after two peer copies"
        );
        assert!(cuda_stream::current_context_raw().unwrap().is_null());
        println!("peer copies with nothing current: values checked");
    })
    .join()
    .unwrap();
}

/// Copies of buffers of device 1 with device 0's context current, as NCCL and the CUDA runtime
/// leave it. On main every copy of stream-ordered memory failed so
/// (`cuMemcpyHtoDAsync: CUDA_ERROR_INVALID_VALUE`); copies bind their stream's context now.
#[test]
fn copies_work_with_another_devices_context_current() {
    let Some((c0, c1)) = two_gpus() else { return };
    let _turn = alongside_others();
    std::thread::scope(|sc| {
        sc.spawn(|| {
            let _other = c0.bind().unwrap();
            let s1 = c1.new_stream().unwrap();
            let data: Vec<u32> = (0..1 << 16).collect();
            let x = DeviceBuffer::from_host(&c1, &s1, &data).unwrap();
            let y = DeviceBuffer::<u32>::zeroed(&c1, &s1, data.len()).unwrap();
            y.copy_from(&s1, &x).unwrap();
            assert_eq!(y.to_vec(&s1).unwrap(), data);
            let mut pinned = cuda_stream::PinnedHostBuffer::<u32>::zeroed(&c1, data.len()).unwrap();
            y.copy_to_pinned(&s1, &mut pinned).unwrap();
            s1.synchronize().unwrap();
            assert_eq!(pinned.as_slice().unwrap(), &data[..]);
            assert_eq!(cuda_stream::current_context_raw().unwrap(), c0.raw());
            println!("copies on device 1 with device 0's context current: values checked");
        });
    });
}

/// After `c1.enable_peer_access(&c0)`, device 0's default pool grants device 1 read-write
/// access, and a kernel of device 1 reads and writes a buffer of device 0, ordered after
/// device 0's late write and before device 0's later read, round after round. On main a typed
/// launch refused the buffer (`ContextMismatch`), and the kernel could not have read the pool's
/// memory (not mapped for device 1).
#[test]
fn kernels_read_and_write_a_peer_buffer_after_enable_peer_access() {
    let Some((c0, c1)) = two_gpus() else { return };
    let _turn = alongside_others();
    if !c1.device().can_access_peer(c0.device()).unwrap() {
        println!("skipped: device 1 cannot address device 0");
        return;
    }
    c1.enable_peer_access(&c0).unwrap();
    let pool0 = cuda_stream::MemPool::default_for(&c0).unwrap();
    assert_eq!(
        pool0.access(c1.device()).unwrap(),
        cuda_stream::PoolAccess::ReadWrite
    );
    let m0 = Module::from_ptx(&c0, &ptx_source()).unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    let m1 = Module::from_ptx(&c1, &ptx_source()).unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    let copy = m1
        .function("copy_u32")
        .unwrap()
        .typed::<(&mut DeviceBuffer<u32>, &DeviceBuffer<u32>)>()
        .unwrap();
    let (s0, s1) = (c0.new_stream().unwrap(), c1.new_stream().unwrap());
    let mut x0 = DeviceBuffer::<u32>::zeroed(&c0, &s0, 1).unwrap();
    let mut y1 = DeviceBuffer::<u32>::zeroed(&c1, &s1, 1).unwrap();
    let one = LaunchConfig::new(1, 1);
    let rounds = if sanitizer().is_some() { 10 } else { 200 };
    let (mut stale_read, mut stale_write) = (0, 0);
    for round in 1..=rounds as u32 {
        let ns = if round % 10 == 0 { 2_000_000 } else { 20_000 };
        // Device 0 writes x late; device 1's kernel reads it: waits for the write.
        store_after_spin(&m0, &s0, &mut x0, round, ns);
        // SAFETY: copy_u32(u32 *dst, const u32 *src) copies one value.
        unsafe { copy.launch(&s1, one, (&mut y1, &x0)) }.unwrap();
        if y1.to_vec(&s1).unwrap()[0] != round {
            stale_read += 1;
        }
        // Device 1's kernel writes x; device 0 reads it on its own stream: waits for it.
        store_after_spin(&m1, &s1, &mut y1, round + 1_000_000, ns);
        // SAFETY: as above.
        unsafe { copy.launch(&s1, one, (&mut x0, &y1)) }.unwrap();
        if x0.to_vec(&s0).unwrap()[0] != round + 1_000_000 {
            stale_write += 1;
        }
    }
    assert_eq!(
        (stale_read, stale_write),
        (0, 0),
        "stale values in {rounds} rounds"
    );
    println!("a kernel of device 1 on device 0's pool memory: {rounds} rounds checked");
}
