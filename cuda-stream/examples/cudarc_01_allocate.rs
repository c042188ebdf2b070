//! cudarc's `01-allocate`: allocates uninitialised, zeroed and host-initialised device memory on
//! the context's default stream. Here the stream view borrows the context (it cannot outlive it),
//! and the uninitialised allocation is safe: every bit pattern of a `DeviceCopy` type is a value.

use std::process::ExitCode;

use cuda_stream::{Context, DeviceBuffer, Error};

mod common;

const NAME: &str = "cudarc_01_allocate";

fn run() -> Result<String, Error> {
    let ctx = Context::primary(0)?;
    let stream = ctx.null_stream(); // cudarc's `default_stream()`: the null stream

    // Uninitialised memory: `unsafe { stream.alloc::<f32>(10) }` in cudarc.
    let a: DeviceBuffer<f32> = DeviceBuffer::alloc_on(&ctx, &stream, 10)?;
    // Zeroed memory.
    let b: DeviceBuffer<f64> = DeviceBuffer::zeroed(&ctx, &stream, 10)?;
    // Initialised from host slices.
    let c: DeviceBuffer<usize> = DeviceBuffer::from_host(&ctx, &stream, &[0; 10])?;
    let d: DeviceBuffer<u32> = DeviceBuffer::from_host(&ctx, &stream, &[1, 2, 3])?;

    assert_eq!((a.len(), a.byte_len()), (10, 40));
    assert_eq!(b.to_vec(&stream)?, [0.0; 10]);
    assert_eq!(c.to_vec(&stream)?, [0; 10]);
    assert_eq!(d.to_vec(&stream)?, [1, 2, 3]);
    Ok("4 buffers allocated on the null stream, 3 read back".into())
}

fn main() -> ExitCode {
    common::main(NAME, 1, run)
}
