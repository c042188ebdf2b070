//! cudarc's `05-device-repr`: passes a `#[repr(C)]` struct by value to a kernel that asserts its
//! fields. Here `device_copy!` checks at compile time that the struct has no padding and only
//! plain fields (cudarc's `unsafe impl DeviceRepr` checks nothing); `typed` checks its 32 bytes.

use std::process::ExitCode;

use cuda_stream::nvrtc::Program;
use cuda_stream::{Context, DeviceBuffer, Error, LaunchConfig};

mod common;

const NAME: &str = "cudarc_05_device_repr";

cuda_stream::device_copy! {
    /// cudarc's `MyCoolRustStruct` (`f32, f64, u32, usize`), with C's padding made fields:
    /// without `_pad0` and `_pad1` the macro refuses it.
    #[derive(Clone, Copy)]
    struct MyCoolRustStruct {
        a: f32,
        _pad0: u32,
        b: f64,
        c: u32,
        _pad1: u32,
        d: usize,
    }
}

/// cudarc's kernel, which also reports through `ok` that every field arrived.
const SRC: &str = r#"
struct MyCoolStruct {
    float a;
    double b;
    unsigned int c;
    size_t d;
};
extern "C" __global__ void my_custom_kernel(MyCoolStruct thing, int *ok) {
    assert(thing.a == 1.0);
    assert(thing.b == 2.34);
    assert(thing.c == 57);
    assert(thing.d == 420);
    *ok = thing.a == 1.0 && thing.b == 2.34 && thing.c == 57 && thing.d == 420;
}
"#;

fn run() -> Result<String, Error> {
    let ctx = Context::primary(0)?;
    let stream = ctx.null_stream();

    let module = Program::new(SRC).compile(ctx.device())?.load(&ctx)?;
    // The struct's 32 bytes are checked against the kernel's first parameter here.
    let f = module
        .function("my_custom_kernel")?
        .typed::<(MyCoolRustStruct, &mut DeviceBuffer<i32>)>()?;

    // Change one of these values to see the device assert (the stream's error, below).
    let thing = MyCoolRustStruct {
        a: 1.0,
        _pad0: 0,
        b: 2.34,
        c: 57,
        _pad1: 0,
        d: 420,
    };
    let mut ok = DeviceBuffer::<i32>::zeroed(&ctx, &stream, 1)?;
    // SAFETY: the kernel reads its struct argument and writes ok[0] only.
    unsafe { f.launch(&stream, LaunchConfig::new(1, 1), (thing, &mut ok)) }?;
    assert_eq!(ok.to_vec(&stream)?, [1], "the kernel saw other values");
    let (a, b, c, d) = (thing.a, thing.b, thing.c, thing.d);
    Ok(format!(
        "a {a}, b {b}, c {c}, d {d} passed in a 32-byte struct, seen by the kernel"
    ))
}

fn main() -> ExitCode {
    common::main(NAME, 1, run)
}
