//! Host functions and callbacks: order, placement after GPU work, status, and panics.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cuda_stream::{AsStream, Error};
use cuda_stream_tests::{DeviceBuffer, Kernels, gpu};

const SPIN: Duration = Duration::from_millis(100);

#[test]
fn host_functions_run_in_enqueue_order() {
    let Some(ctx) = gpu() else { return };
    let s = ctx.new_stream().unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    for i in 0..200 {
        let log = log.clone();
        if i % 2 == 0 {
            s.launch_host_func(move || log.lock().unwrap().push(i))
                .unwrap();
        } else {
            s.add_callback(move |status| {
                assert!(status.is_ok());
                log.lock().unwrap().push(i);
            })
            .unwrap();
        }
    }
    s.synchronize().unwrap();
    assert_eq!(*log.lock().unwrap(), (0..200).collect::<Vec<_>>());
}

#[test]
fn host_function_runs_after_prior_gpu_work() {
    let Some(ctx) = gpu() else { return };
    let k = Kernels::load(&ctx);
    let s = ctx.new_stream().unwrap();
    let buf = DeviceBuffer::new(&ctx, 1);
    let (tx, rx) = mpsc::channel();
    let enqueued = Instant::now();
    k.store_after_spin(&s, buf.ptr(), 7, SPIN);
    s.launch_host_func(move || tx.send(enqueued.elapsed()).unwrap())
        .unwrap();
    s.synchronize().unwrap();
    let ran_after = rx.recv().unwrap();
    println!("host function ran {ran_after:?} after the 100 ms kernel was enqueued");
    assert!(ran_after >= SPIN * 9 / 10, "ran before the kernel ended");
    assert_eq!(buf.get(0), 7);
}

#[test]
fn work_after_a_host_function_waits_for_it_to_return() {
    let Some(ctx) = gpu() else { return };
    let (a, b) = (ctx.new_stream().unwrap(), ctx.new_stream().unwrap());
    let flag = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(AtomicBool::new(false));
    {
        let flag = flag.clone();
        a.launch_host_func(move || {
            std::thread::sleep(SPIN);
            flag.store(true, Ordering::SeqCst);
        })
        .unwrap();
    }
    let ev = a.record_event().unwrap();
    b.wait_event(&ev).unwrap();
    {
        let (flag, seen) = (flag.clone(), seen.clone());
        b.launch_host_func(move || seen.store(flag.load(Ordering::SeqCst), Ordering::SeqCst))
            .unwrap();
    }
    b.synchronize().unwrap();
    assert!(
        seen.load(Ordering::SeqCst),
        "b's host function ran before a's returned"
    );
}

#[test]
fn add_callback_receives_ok_after_prior_work() {
    let Some(ctx) = gpu() else { return };
    let k = Kernels::load(&ctx);
    let s = ctx.new_stream().unwrap();
    let buf = DeviceBuffer::new(&ctx, 1);
    let (tx, rx) = mpsc::channel();
    let enqueued = Instant::now();
    k.store_after_spin(&s, buf.ptr(), 3, SPIN);
    s.as_stream()
        .add_callback(move |status| tx.send((status, enqueued.elapsed())).unwrap())
        .unwrap();
    s.synchronize().unwrap();
    let (status, after) = rx.recv().unwrap();
    assert!(matches!(status, Ok(())), "status {status:?}");
    assert!(
        after >= SPIN * 9 / 10,
        "callback ran before the kernel ended"
    );
    assert_eq!(buf.get(0), 3);
}

#[test]
fn a_panicking_host_function_is_reported_and_the_process_survives() {
    let Some(ctx) = gpu() else { return };
    let k = Kernels::load(&ctx);
    let s = ctx.new_stream().unwrap();
    let other = ctx.new_stream().unwrap();
    let buf = DeviceBuffer::new(&ctx, 1);

    // Reported by the next synchronize, once.
    s.launch_host_func(|| panic!("boom from a host function"))
        .unwrap();
    other.launch_host_func(|| ()).unwrap();
    match s.synchronize() {
        Err(Error::HostFnPanicked { stream, message }) => {
            assert_eq!(stream, s.raw() as usize);
            assert!(message.contains("boom from a host function"), "{message}");
        }
        r => panic!("expected HostFnPanicked, got {r:?}"),
    }
    s.synchronize().unwrap();
    // Another stream is not affected.
    other.synchronize().unwrap();

    // The process and the stream keep working.
    k.store(&s, buf.ptr(), 5);
    s.synchronize().unwrap();
    assert_eq!(buf.get(0), 5);

    // A panicking callback, with a String payload.
    s.add_callback(|_| panic!("callback boom {}", 42)).unwrap();
    match s.synchronize() {
        Err(Error::HostFnPanicked { message, .. }) => {
            assert!(message.contains("callback boom 42"), "{message}")
        }
        r => panic!("expected HostFnPanicked, got {r:?}"),
    }

    // Reported by query once the function has run.
    s.launch_host_func(|| panic!("seen by query")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match s.query() {
            Ok(false) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(1)),
            Err(Error::HostFnPanicked { message, .. }) => {
                assert!(message.contains("seen by query"));
                break;
            }
            r => panic!("expected HostFnPanicked from query, got {r:?}"),
        }
    }
    assert!(s.query().unwrap());

    // Reported by the next launch, which then does not enqueue its function.
    s.launch_host_func(|| panic!("seen by launch")).unwrap();
    s.record_event().unwrap().synchronize().unwrap();
    let ran = Arc::new(AtomicBool::new(false));
    let r = {
        let ran = ran.clone();
        s.launch_host_func(move || ran.store(true, Ordering::SeqCst))
    };
    assert!(
        matches!(&r, Err(Error::HostFnPanicked { message, .. }) if message.contains("seen by launch")),
        "{r:?}"
    );
    s.synchronize().unwrap();
    assert!(!ran.load(Ordering::SeqCst), "a refused host function ran");
}
