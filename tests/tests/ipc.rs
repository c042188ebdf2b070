//! Interprocess events: option validation, handles, and a child process (this test binary,
//! re-run) that opens the event and device memory and waits for the parent's work.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cuda_stream::{Error, Event, EventOptions, IpcEventHandle};
use cuda_stream_tests::{DeviceBuffer, Kernels, bind, check, gpu, read_u32s, sys};

/// Set in the child's environment: `<event handle hex>:<memory handle hex>`.
const CHILD_VAR: &str = "CUDA_STREAM_TESTS_IPC_CHILD";
const CHILD_TEST: &str = "ipc_child_entry";
const MARKER: &str = "ipc-child: value=";

fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn from_hex(s: &str) -> [u8; 64] {
    assert_eq!(s.len(), 128, "a 64-byte handle in hex");
    let mut out = [0u8; 64];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).expect("hex digit");
    }
    out
}

#[test]
fn interprocess_with_timing_is_invalid() {
    let Some(ctx) = gpu() else { return };
    let opts = EventOptions::new().interprocess(true).timing(true);
    assert!(matches!(
        opts.flags(),
        Err(Error::InvalidEventOptions { .. })
    ));
    let r = Event::new(&ctx, opts);
    assert!(matches!(r, Err(Error::InvalidEventOptions { .. })), "{r:?}");
    // A plain event has no IPC handle.
    let plain = Event::new(&ctx, EventOptions::new()).unwrap();
    let r = plain.ipc_handle();
    assert!(matches!(r, Err(Error::InvalidEventOptions { .. })), "{r:?}");
}

#[test]
fn ipc_handle_and_same_process_open() {
    let Some(ctx) = gpu() else { return };
    let ev = Event::new(&ctx, EventOptions::new().interprocess(true)).unwrap();
    assert!(ev.options().is_interprocess());
    let h = match ev.ipc_handle() {
        Ok(h) => h,
        Err(e) if e.is_unsupported() => {
            println!("skipped: IPC events are not supported here: {e}");
            return;
        }
        Err(e) => panic!("ipc_handle: {e:?}"),
    };
    assert_eq!(IpcEventHandle::from_bytes(h.to_bytes()), h);

    let k = Kernels::load(&ctx);
    let s = ctx.new_stream().unwrap();
    k.spin(&s, Duration::from_millis(50));
    s.record(&ev).unwrap();
    match Event::open_ipc(&ctx, &h) {
        Ok(opened) => {
            println!("the driver opened an IPC event handle in its own process");
            assert!(opened.options().is_interprocess());
            let waiter = ctx.new_stream().unwrap();
            waiter.wait_event(&opened).unwrap();
            waiter.synchronize().unwrap();
            opened.synchronize().unwrap();
            assert!(opened.query().unwrap());
            assert!(
                ev.query().unwrap(),
                "waiting on the opened event waited for the original"
            );
        }
        Err(e) => {
            println!("the driver refused to open an IPC event handle in its own process: {e}");
            assert_eq!(e.call(), Some("cuIpcOpenEventHandle"), "{e:?}");
            assert!(e.driver_code().is_some(), "{e:?}");
        }
    }
    s.synchronize().unwrap();
}

#[test]
fn ipc_event_orders_work_for_a_child_process() {
    let Some(ctx) = gpu() else { return };
    let ev = Event::new(&ctx, EventOptions::new().interprocess(true)).unwrap();
    let eh = match ev.ipc_handle() {
        Ok(h) => h,
        Err(e) if e.is_unsupported() => {
            println!("skipped: IPC events are not supported here: {e}");
            return;
        }
        Err(e) => panic!("ipc_handle: {e:?}"),
    };
    let k = Kernels::load(&ctx);
    let buf = DeviceBuffer::new(&ctx, 1);
    let mut mh = sys::CUipcMemHandle::default();
    {
        let _bound = bind(&ctx);
        // SAFETY: `mh` is a valid out-pointer; the buffer came from cuMemAlloc in this context.
        let rc = unsafe { sys::cuIpcGetMemHandle(&mut mh, buf.ptr()) };
        if rc == sys::CUresult::CUDA_ERROR_NOT_SUPPORTED {
            println!("skipped: IPC memory is not supported here");
            return;
        }
        check(rc, "cuIpcGetMemHandle");
    }
    let mem_bytes: Vec<u8> = mh.reserved.iter().map(|&c| c as u8).collect();

    // Long enough that the child usually opens the event while it is pending.
    let spin = Duration::from_secs(2);
    let s = ctx.new_stream().unwrap();
    k.store_after_spin(&s, buf.ptr(), 7, spin);
    s.record(&ev).unwrap();

    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(exe)
        .args([
            CHILD_TEST,
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(
            CHILD_VAR,
            format!("{}:{}", to_hex(&eh.to_bytes()), to_hex(&mem_bytes)),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the child");
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the child did not finish within 120 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = out_reader.join().unwrap();
    let stderr = err_reader.join().unwrap();
    println!("child stdout:\n{stdout}\nchild stderr:\n{stderr}");
    assert!(status.success(), "child failed: {status}");
    assert!(
        stdout.contains(&format!("{MARKER}7 ")),
        "the child did not report the value 7"
    );
    s.synchronize().unwrap();
    assert_eq!(buf.get(0), 7);
}

/// The child side of `ipc_event_orders_work_for_a_child_process`; ignored in normal runs, and a
/// no-op if run without the parent's environment.
#[test]
#[ignore = "child process entry of ipc_event_orders_work_for_a_child_process"]
fn ipc_child_entry() {
    let Ok(spec) = std::env::var(CHILD_VAR) else {
        println!("not started by the IPC test: nothing to do");
        return;
    };
    let ctx = gpu().expect("the child sees no GPU");
    let (ev_hex, mem_hex) = spec.split_once(':').expect("two handles");
    let ev = Event::open_ipc(&ctx, &IpcEventHandle::from_bytes(from_hex(ev_hex))).unwrap();
    let pending_at_open = !ev.query().unwrap();
    let mh = sys::CUipcMemHandle {
        reserved: from_hex(mem_hex).map(|b| b as std::ffi::c_char),
    };
    let mut dptr = 0;
    {
        let _bound = bind(&ctx);
        check(
            // SAFETY: `dptr` is a valid out-pointer; the handle came from the parent.
            unsafe {
                sys::cuIpcOpenMemHandle(
                    &mut dptr,
                    mh,
                    sys::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS.0,
                )
            },
            "cuIpcOpenMemHandle",
        );
    }
    // A stream of the child waits on the parent's event, then the host waits on that stream.
    let s = ctx.new_stream().unwrap();
    s.wait_event(&ev).unwrap();
    s.synchronize().unwrap();
    let after_stream = read_u32s(&ctx, dptr, 1)[0];
    ev.synchronize().unwrap();
    let value = read_u32s(&ctx, dptr, 1)[0];
    {
        let _bound = bind(&ctx);
        // SAFETY: opened above, closed once.
        check(
            unsafe { sys::cuIpcCloseMemHandle(dptr) },
            "cuIpcCloseMemHandle",
        );
    }
    println!("{MARKER}{value} after_stream_wait={after_stream} pending_at_open={pending_at_open}");
    assert_eq!(
        after_stream, 7,
        "the stream wait did not wait for the parent's work"
    );
    assert_eq!(value, 7);
}
