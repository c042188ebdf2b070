//! Bogus values (null, small integers, out-of-range ordinals and attributes, garbage IPC bytes,
//! text that is no PTX, objects of another context, huge sizes) fed to every safe function that
//! passes a caller's value to the driver, on a real driver. Each case runs in a child process,
//! so a crash fails it with the signal; the cases are in `tests/src/bogus.rs`, and the table
//! of verdicts in `tests/README.md` ("Caller-supplied values reaching the driver").
//!
//! Without a driver or a device each test prints why it is skipped.

use cuda_stream::{Device, Stream};
use cuda_stream_tests::bogus::{self, Driver, Env};
use cuda_stream_tests::{RawContext, gpu, raw_stream_create, raw_stream_destroy, sys};

/// A stream of a non-primary context on device 0, lent to `f`, then destroyed with it.
fn with_stream_of_a_raw_context(device: Device, f: &mut dyn FnMut(Stream<'_>)) {
    let other = RawContext::create(device);
    let raw = raw_stream_create(&other, sys::CUstream_flags::CU_STREAM_NON_BLOCKING.0);
    {
        let owner = ();
        // SAFETY: `raw` is a live stream of the live `other`, destroyed after the view is gone.
        let view = unsafe { Stream::borrow_raw(raw, &owner) }.expect("borrow_raw");
        f(view);
    }
    // SAFETY: created above; the view is gone.
    unsafe { raw_stream_destroy(raw) };
}

/// Runs case `name` in a child process, or, in that child, runs `case` on the GPU.
fn gpu_case(name: &str, case: fn(&Env)) {
    let Some(ctx) = gpu() else { return };
    if !bogus::is_child(name) {
        return bogus::run_in_child(name);
    }
    let live = RawContext::create(ctx.device());
    let destroyed = RawContext::create(ctx.device()).raw();
    let device = ctx.device();
    let env = Env {
        ctx,
        driver: Driver::Real,
        calls: None,
        other_stream: Some(Box::new(move |f| with_stream_of_a_raw_context(device, f))),
        non_primary_contexts: vec![live.raw(), destroyed],
    };
    bogus::run_case(name, &env, case);
    drop(live);
}

cuda_stream_tests::bogus_cases!(gpu_case);
