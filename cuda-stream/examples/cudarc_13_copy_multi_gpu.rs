//! cudarc's `13-copy-multi-gpu`: zeroes 10 values on device 0, copies them to device 1 and reads
//! both back. Here the peer copy orders itself after the zeroing on device 0 and before the read
//! on device 1 (uses tracked on both devices), and each stream view borrows its own context.

use std::process::ExitCode;

use cuda_stream::{Context, DeviceBuffer, Error};

mod common;

const NAME: &str = "cudarc_13_copy_multi_gpu";

fn run() -> Result<String, Error> {
    let size = 10;

    let ctx1 = Context::primary(0)?;
    let stream1 = ctx1.null_stream();
    let a = DeviceBuffer::<f64>::zeroed(&ctx1, &stream1, size)?;

    let ctx2 = Context::primary(1)?;
    let stream2 = ctx2.null_stream();
    // cudarc's `stream2.clone_dtod(&a)`: a buffer on device 1 (set to -1 here, so that only the
    // copy can make it zeros), then the copy from device 0 on device 1's stream.
    let b = DeviceBuffer::from_host(&ctx2, &stream2, &[-1.0f64; 10])?;
    b.copy_from_peer(&stream2, &a)?;

    assert_eq!(b.to_vec(&stream2)?, [0.0; 10]);
    assert_eq!(a.to_vec(&stream1)?, [0.0; 10]);
    let peer = ctx1.device().can_access_peer(ctx2.device())?;
    Ok(format!(
        "{size} zeros copied from device 0 to device 1 (peer access: {peer}), both read back"
    ))
}

fn main() -> ExitCode {
    common::main(NAME, 2, run)
}
