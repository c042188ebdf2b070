//! The caller's host memory page-locked for a scope (`RegisteredHost::scope`,
//! `cuMemHostRegister`) against the test driver: copies both ways through the same calls as a
//! `PinnedHostBuffer`, ordered against the device buffer's other uses and against host access
//! (the race detector checks both sides); the scope waits for every copy in flight before it
//! unregisters the memory and returns (a copy still queued then would be a bad use of
//! unregistered memory), also when the closure panics; a range registered twice is the driver's
//! error; an empty slice is not registered.

use std::sync::Mutex;
use std::sync::mpsc;
use std::time::Duration;

use cuda_mock_driver::{MockDriver, Serialized};
use cuda_stream::{Context, DeviceBuffer, Error, RegisteredHost};

static LOCK: Mutex<()> = Mutex::new(());

fn mock() -> (Serialized, &'static MockDriver) {
    let guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let m = MockDriver::global();
    m.reset();
    (m.checked(guard), m)
}

#[test]
fn copies_both_ways_are_ordered_and_the_scope_gives_the_memory_back() {
    let (_lock, m) = mock();
    let ctx = Context::primary(0).unwrap();
    let (s, t) = (ctx.new_stream().unwrap(), ctx.new_stream().unwrap());
    let dev = DeviceBuffer::<u32>::zeroed(&ctx, &s, 1024).unwrap();
    let mut data: Vec<u32> = (0..1024).collect();
    for round in 0..20u32 {
        let sum = RegisteredHost::scope(&ctx, &mut data, |host| {
            assert_eq!(m.registered_host_ranges(), 1);
            assert_eq!(host.len(), 1024);
            dev.copy_from_pinned(&s, host)?;
            // On another stream: waits for the upload (a write of `dev`).
            dev.fill(&t, round).unwrap();
            // Back into the host memory on `s`: waits for the fill.
            dev.copy_to_pinned(&s, host)?;
            // Host access waits for the download.
            let sum: u64 = host.as_slice()?.iter().map(|&v| u64::from(v)).sum();
            // Writing from the host waits for every copy; the next upload reads what it wrote.
            host.as_mut_slice()?.iter_mut().for_each(|v| *v += 1);
            dev.copy_from_pinned(&t, host)?;
            Ok::<u64, Error>(sum)
        })
        .unwrap()
        .unwrap();
        assert_eq!(sum, u64::from(round) * 1024, "round {round}");
        assert_eq!(m.registered_host_ranges(), 0, "unregistered at the end");
        assert_eq!(data, vec![round + 1; 1024]);
        assert_eq!(dev.to_vec(&s).unwrap(), vec![round + 1; 1024]);
    }
    assert_eq!((m.bad_uses(), m.bad_destroys()), (0, 0));
    assert_eq!(m.races(), 0, "{:?}", m.race_reports());
}

/// Holds `stream`'s later work until the returned sender is dropped (or a second passes).
fn gate(stream: &cuda_stream::OwnedStream) -> mpsc::Sender<()> {
    let (tx, rx) = mpsc::channel::<()>();
    stream
        .launch_host_func(move || {
            let _ = rx.recv_timeout(Duration::from_secs(1));
        })
        .expect("host function");
    tx
}

#[test]
fn the_scope_waits_for_copies_in_flight_also_after_a_panic() {
    let (_lock, m) = mock();
    let ctx = Context::primary(0).unwrap();
    let s = ctx.new_stream().unwrap();
    let dev = DeviceBuffer::<u32>::zeroed(&ctx, &s, 256).unwrap();
    dev.fill(&s, 9).unwrap();
    let mut data = vec![0u32; 256];
    // The closure returns with the download still queued behind a gate that opens later, from
    // another thread: the scope must wait for it before unregistering.
    let (tx_out, rx_out) = mpsc::channel();
    RegisteredHost::scope(&ctx, &mut data, |host| {
        let g = gate(&s);
        dev.copy_to_pinned(&s, host).unwrap();
        assert!(matches!(host.try_as_slice(), Err(Error::Busy { .. })));
        assert_eq!(host.copies_in_flight(), 1);
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            drop(g);
            tx_out.send(()).unwrap();
        });
    })
    .unwrap();
    rx_out.recv().unwrap();
    assert_eq!(
        data,
        vec![9; 256],
        "the copy completed before the scope returned"
    );
    // The same with a panic in the closure.
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        RegisteredHost::scope(&ctx, &mut data, |host| {
            let g = gate(&s);
            dev.fill(&s, 11).unwrap();
            dev.copy_to_pinned(&s, host).unwrap();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                drop(g);
            });
            panic!("in the scope");
        })
    }));
    assert!(r.is_err());
    assert_eq!(data, vec![11; 256], "waited for before the panic went on");
    assert_eq!(m.registered_host_ranges(), 0);
    assert_eq!((m.bad_uses(), m.bad_destroys()), (0, 0));
}

#[test]
fn a_range_registered_twice_is_the_drivers_error_and_empty_is_not_registered() {
    let (_lock, m) = mock();
    let ctx = Context::primary(0).unwrap();
    let mut data = vec![1u8; 4096];
    let (a, b) = data.split_at_mut(2048);
    let inner = RegisteredHost::scope(&ctx, a, |_| {
        // Another scope over other memory is fine; over the same, the driver refuses.
        RegisteredHost::scope(&ctx, b, |_| ()).unwrap();
        assert_eq!(m.registered_host_ranges(), 1);
        m.calls("cuMemHostRegister_v2")
    })
    .unwrap();
    assert_eq!(inner, 2);
    // Memory that is page-locked already (a `PinnedHostBuffer`'s) cannot be registered: the
    // driver's CUDA_ERROR_INVALID_VALUE (H100, driver 580).
    let mut pinned = cuda_stream::PinnedHostBuffer::<u32>::zeroed(&ctx, 16).unwrap();
    match RegisteredHost::scope(&ctx, pinned.as_mut_slice().unwrap(), |_| ()) {
        Err(e) => assert_eq!(e.to_string(), "cuMemHostRegister: CUDA_ERROR_INVALID_VALUE"),
        Ok(()) => panic!("registered twice"),
    }
    let before = m.calls("cuMemHostRegister_v2");
    let mut empty: Vec<u32> = Vec::new();
    RegisteredHost::scope(&ctx, &mut empty, |host| assert!(host.is_empty())).unwrap();
    assert_eq!(
        m.calls("cuMemHostRegister_v2"),
        before,
        "nothing registered"
    );
}
