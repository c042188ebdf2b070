//! NVRTC on the GPU (feature `nvrtc`, built by the GPU bundle): a kernel template with a header
//! given by name and a `-D` option, compiled for device 0 (CUBIN where the loaded NVRTC supports
//! its architecture), loaded in one call, two instances found by their lowered names and
//! launched through typed kernels, results checked on the host; the same program as PTX,
//! JIT-compiled by the driver; and an instance captured into a graph and replayed.
//!
//! Every test prints why it skips without a driver or without NVRTC (`CUDA_SYS_LIBNVRTC`, the
//! wheel beside Python, `libnvrtc.so.13`, a toolkit; `gpu-bundle/run.sh` points
//! `CUDA_SYS_LIBNVRTC` at the wheel beside Python); `CUDA_STREAM_TESTS_REQUIRE_NVRTC=1` makes a
//! missing NVRTC a failure.

use cuda_stream::ffi::CUresult;
use cuda_stream::nvrtc::{Arch, Code, CodeKind, CompiledProgram, Program, version};
use cuda_stream::{CaptureMode, Context, DeviceBuffer, LaunchConfig, Module, driver_version};
use cuda_stream_tests::{alone, alongside_others, error_chain, gpu, ramp};

/// `y[i] = a * x[i] + y[i] + OFFSET` for any `T`, its arithmetic in a header.
const SOURCE: &str = r#"
#include "ops.h"

template <typename T>
__global__ void axpy(T *y, const T *x, T a, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = ops::axpy(a, x[i], y[i]) + T(OFFSET);
}

template <typename T>
__global__ void add(T *y, T a, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += a;
}
"#;

const OPS_H: &str = r#"
#pragma once
namespace ops {
template <typename T> __device__ T axpy(T a, T x, T y) { return a * x + y; }
}
"#;

const OFFSET: i32 = 1;

/// Device 0's context when a driver and NVRTC are there; else `None`, with the reason printed.
fn nvrtc_gpu() -> Option<Context> {
    let ctx = gpu()?;
    match version() {
        Ok((major, minor)) => {
            let lib = cuda_stream::ffi::nvrtc::Nvrtc::global().expect("loaded");
            println!("NVRTC {major}.{minor} from {}", lib.path().display());
            Some(ctx)
        }
        Err(e) => {
            let why = format!("skipped: no NVRTC: {}", error_chain(&e));
            assert!(
                std::env::var_os("CUDA_STREAM_TESTS_REQUIRE_NVRTC").is_none(),
                "{why}"
            );
            println!("{why}");
            None
        }
    }
}

fn program() -> Program {
    Program::new(SOURCE)
        .name("axpy.cu")
        .header("ops.h", OPS_H)
        .options(["-std=c++17".to_string(), format!("-DOFFSET={OFFSET}")])
        .name_expression("axpy<float>")
        .name_expression("axpy<int>")
        .name_expression("add<float>")
}

fn compile(program: Program, ctx: &Context) -> CompiledProgram {
    program
        .compile(ctx.device())
        .unwrap_or_else(|e| panic!("{}", error_chain(&e)))
}

fn load(compiled: &CompiledProgram, ctx: &Context) -> Module {
    compiled
        .load(ctx)
        .unwrap_or_else(|e| panic!("{}", error_chain(&e)))
}

/// Runs both `axpy` instances of `module` over `n` elements and checks every value.
fn run_both_instances(ctx: &Context, compiled: &CompiledProgram, module: &Module) {
    let float = module
        .function(compiled.lowered_name("axpy<float>").unwrap())
        .unwrap()
        .typed::<(&mut DeviceBuffer<f32>, &DeviceBuffer<f32>, f32, u32)>()
        .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    let int = module
        .function(compiled.lowered_name("axpy<int>").unwrap())
        .unwrap()
        .typed::<(&mut DeviceBuffer<i32>, &DeviceBuffer<i32>, i32, u32)>()
        .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    let n = 1 << 20;
    let (a, b) = (ctx.new_stream().unwrap(), ctx.new_stream().unwrap());
    let host = ramp(n);
    let x = DeviceBuffer::from_host(ctx, &a, &host).unwrap();
    let mut y = DeviceBuffer::from_host(ctx, &a, &vec![1.0f32; n]).unwrap();
    let config = LaunchConfig::for_elements(n as u32, 256);
    // On b, after the uploads on a (ordered by the buffers' use tracking).
    // SAFETY: axpy<float> reads x[..n] and writes y[..n].
    unsafe { float.launch(&b, config, (&mut y, &x, 2.0, n as u32)) }.unwrap();
    let want: Vec<f32> = host.iter().map(|v| 2.0 * v + 1.0 + OFFSET as f32).collect();
    assert_eq!(y.to_vec(&a).unwrap(), want);

    let host: Vec<i32> = (0..n as i32).map(|i| i % 1000 - 500).collect();
    let x = DeviceBuffer::from_host(ctx, &a, &host).unwrap();
    let mut y = DeviceBuffer::from_host(ctx, &a, &vec![7i32; n]).unwrap();
    // SAFETY: axpy<int> reads x[..n] and writes y[..n].
    unsafe { int.launch(&b, config, (&mut y, &x, -3, n as u32)) }.unwrap();
    let want: Vec<i32> = host.iter().map(|v| -3 * v + 7 + OFFSET).collect();
    assert_eq!(y.to_vec(&a).unwrap(), want);
}

#[test]
fn a_template_compiled_for_the_device_runs_through_typed_kernels() {
    let Some(ctx) = nvrtc_gpu() else { return };
    let _turn = alongside_others();
    let arch = Arch::of(ctx.device()).unwrap();
    let compiled = compile(program(), &ctx);
    println!(
        "{arch}: {:?} for {} ({} bytes), lowered: {:?}",
        compiled.code().kind(),
        compiled.arch(),
        compiled.code().as_bytes().len(),
        compiled.lowered_names().collect::<Vec<_>>()
    );
    let supported = cuda_stream::nvrtc::supported_archs().unwrap();
    // A driver that cannot tell a cubin's parameters (before 12.4, or the CUDA 12.0 ABIs) gets
    // PTX, whose parameter lists are read at load.
    let params_known = cuda_stream::ffi::fns::cuFuncGetParamInfo().is_ok();
    if supported.contains(&arch) && params_known {
        assert!(matches!(compiled.code(), Code::Cubin(_)));
        assert_eq!(compiled.arch(), arch);
    } else {
        assert_eq!(compiled.code().kind(), CodeKind::Ptx);
        assert!(compiled.arch() <= arch);
    }
    let module = load(&compiled, &ctx);
    run_both_instances(&ctx, &compiled, &module);
    println!("axpy<float> and axpy<int> over 1 Mi elements, checked");
}

#[test]
fn ptx_from_nvrtc_is_jit_compiled_by_the_driver() {
    let Some(ctx) = nvrtc_gpu() else { return };
    let _turn = alongside_others();
    let compiled = compile(program().output(CodeKind::Ptx), &ctx);
    let Code::Ptx(ptx) = compiled.code() else {
        panic!("PTX asked for")
    };
    let target = ptx.lines().find(|l| l.starts_with(".target")).unwrap_or("");
    println!("{} bytes of PTX, {target}", ptx.len());
    let module = match compiled.load(&ctx) {
        Ok(m) => m,
        Err(e) if e.driver_code() == Some(CUresult::CUDA_ERROR_UNSUPPORTED_PTX_VERSION) => {
            // An NVRTC newer than the driver writes a PTX ISA its JIT does not know.
            let (major, minor) = version().unwrap();
            let driver = driver_version().unwrap();
            let v = cuda_stream::ffi::format_version(driver);
            assert!(
                major * 1000 + minor * 10 > driver,
                "NVRTC {major}.{minor}'s PTX refused by driver {v}: {}",
                error_chain(&e)
            );
            println!("skipped: NVRTC {major}.{minor} is newer than the driver (CUDA {v})");
            return;
        }
        Err(e) => panic!("{}", error_chain(&e)),
    };
    println!("JIT: {}", module.info_log());
    run_both_instances(&ctx, &compiled, &module);
    println!("the PTX, JIT-compiled by the driver, ran and was checked");
}

#[test]
fn an_instance_captured_into_a_graph_replays() {
    let Some(ctx) = nvrtc_gpu() else { return };
    let _turn = alone();
    let compiled = compile(program(), &ctx);
    let module = load(&compiled, &ctx);
    let add = module
        .function(compiled.lowered_name("add<float>").unwrap())
        .unwrap()
        .typed::<(&mut DeviceBuffer<f32>, f32, u32)>()
        .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    let n = 4096u32;
    let mut s = ctx.new_stream().unwrap();
    let mut y = DeviceBuffer::from_host(&ctx, &s, &vec![0.5f32; n as usize]).unwrap();
    let config = LaunchConfig::for_elements(n, 128);
    let graph = s
        .capture(CaptureMode::ThreadLocal, |cap| {
            // SAFETY: add<float> writes y[..n] only.
            unsafe { add.launch(&cap, config, (&mut y, 0.25, n)) }
        })
        .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    let exec = graph.instantiate().unwrap();
    for _ in 0..10 {
        exec.launch(&s).unwrap();
    }
    s.synchronize().unwrap();
    assert_eq!(y.to_vec(&s).unwrap(), vec![3.0f32; n as usize]);
    println!("add<float> captured once, replayed 10 times, checked");
}
