//! cudarc's `02-copy`: device-to-device, host-to-device and device-to-host copies on the default
//! stream, checked on the host. Here a copy whose lengths differ is an error value, not a panic,
//! and the stream view cannot outlive the context it borrows.

use std::process::ExitCode;

use cuda_stream::{Context, DeviceBuffer, Error};

mod common;

const NAME: &str = "cudarc_02_copy";

fn run() -> Result<String, Error> {
    let ctx = Context::primary(0)?;
    let stream = ctx.null_stream();

    let a = DeviceBuffer::<f64>::zeroed(&ctx, &stream, 10)?;
    let b = DeviceBuffer::<f64>::zeroed(&ctx, &stream, 10)?;

    // Device to device (`memcpy_dtod(&a, &mut b)`).
    b.copy_from(&stream, &a)?;

    // Host to device into allocated buffers (`memcpy_htod`), from any slice.
    b.copy_from_host(&stream, &vec![2.0; b.len()])?;
    b.copy_from_host(&stream, &[3.0; 10])?;

    // Back to the host (`clone_dtoh`).
    let mut a_host: Vec<f64> = a.to_vec(&stream)?;
    assert_eq!(a_host, [0.0; 10]);
    let b_host = b.to_vec(&stream)?;
    assert_eq!(b_host, [3.0; 10]);

    // Into a slice allocated before (`memcpy_dtoh`).
    b.copy_to_host(&stream, &mut a_host)?;
    assert_eq!(a_host, b_host);

    // What cudarc's `assert!(dst.len() >= src.len())` panics on is an error here.
    let short = b.copy_to_host(&stream, &mut [0.0; 3]);
    assert!(
        matches!(short, Err(Error::LengthMismatch { .. })),
        "{short:?}"
    );
    Ok("dtod, 2 htod, 3 dtoh of 10 f64 values; a short host slice refused".into())
}

fn main() -> ExitCode {
    common::main(NAME, 1, run)
}
