//! cudarc's `06-threading`: ten threads launch a kernel sharing one context and module, then ten
//! more each load their own. Here each thread has a stream of its own, the kernels borrow the
//! module (no thread can outlive it), and each thread's result is read back and checked.

use std::process::ExitCode;
use std::thread;

use cuda_stream::nvrtc::Program;
use cuda_stream::{Context, Device, DeviceBuffer, Error, LaunchConfig, Module};

mod common;

const NAME: &str = "cudarc_06_threading";

/// cudarc's kernel, which also writes `i` where the thread can check it.
const KERNEL_SRC: &str = r#"
extern "C" __global__ void hello_world(int i, int *seen) {
    printf("Hello from the cuda kernel in thread %d\n", i);
    *seen = i;
}
"#;

/// One thread's work: `hello_world(i)` on a new stream of `ctx`, its result checked.
fn hello(ctx: &Context, module: &Module, i: i32) -> Result<(), Error> {
    let stream = ctx.new_stream()?;
    let f = module
        .function("hello_world")?
        .typed::<(i32, &mut DeviceBuffer<i32>)>()?;
    let mut seen = DeviceBuffer::from_host(ctx, &stream, &[-1])?;
    // SAFETY: hello_world prints and writes seen[0] only.
    unsafe { f.launch(&stream, LaunchConfig::new(1, 1), (i, &mut seen)) }?;
    assert_eq!(seen.to_vec(&stream)?, [i]);
    Ok(())
}

fn run() -> Result<String, Error> {
    // Option 1: the context and the module shared by the threads (borrowed, not cloned).
    let compiled = Program::new(KERNEL_SRC).compile(Device::new(0)?)?;
    let ctx = Context::primary(0)?;
    let module = compiled.load(&ctx)?;
    let (ctx, module) = (&ctx, &module);
    thread::scope(|s| {
        let threads: Vec<_> = (0..10)
            .map(|i| s.spawn(move || hello(ctx, module, i)))
            .collect();
        threads
            .into_iter()
            .try_for_each(|t| t.join().expect("a thread panicked"))
    })?;

    // Option 2: each thread compiles and loads its own module in device 0's primary context.
    thread::scope(|s| {
        let threads: Vec<_> = (0..10)
            .map(|i| {
                s.spawn(move || {
                    let compiled = Program::new(KERNEL_SRC).compile(Device::new(0)?)?;
                    let ctx = Context::primary(0)?;
                    let module = compiled.load(&ctx)?;
                    hello(&ctx, &module, i)
                })
            })
            .collect();
        threads
            .into_iter()
            .try_for_each(|t| t.join().expect("a thread panicked"))
    })?;
    Ok("10 threads sharing a module, 10 with their own, each on its own stream, checked".into())
}

fn main() -> ExitCode {
    common::main(NAME, 1, run)
}
