//! The saxpy module the module and launch tests load through `cuda-stream`'s own API
//! (`Module`, `Function::launch`): `saxpy` and a `reverse` through dynamic shared memory, with
//! helpers to load it and launch `saxpy`.

use cuda_stream::{Context, Enqueue, Function, LaunchConfig, Module, kernel_args};

use crate::gpu::error_chain;

/// `y[i] = a * x[i] + y[i]` for `i < n`, and `reverse`: each block reverses its `blockDim.x`
/// values of `p` through dynamic shared memory.
pub const SAXPY_PTX: &str = r#"
.version 7.0
.target sm_50
.address_size 64

.extern .shared .align 4 .b8 smem[];

.visible .entry saxpy(
    .param .u32 saxpy_n,
    .param .f32 saxpy_a,
    .param .u64 saxpy_x,
    .param .u64 saxpy_y
)
{
    .reg .pred  %p<2>;
    .reg .b32   %r<6>;
    .reg .f32   %f<5>;
    .reg .b64   %rd<8>;

    ld.param.u32        %r1, [saxpy_n];
    ld.param.f32        %f1, [saxpy_a];
    ld.param.u64        %rd1, [saxpy_x];
    ld.param.u64        %rd2, [saxpy_y];
    mov.u32             %r2, %ctaid.x;
    mov.u32             %r3, %ntid.x;
    mov.u32             %r4, %tid.x;
    mad.lo.s32          %r5, %r2, %r3, %r4;
    setp.ge.u32         %p1, %r5, %r1;
    @%p1 bra            $L_done;
    cvta.to.global.u64  %rd3, %rd1;
    cvta.to.global.u64  %rd4, %rd2;
    mul.wide.u32        %rd5, %r5, 4;
    add.s64             %rd6, %rd3, %rd5;
    add.s64             %rd7, %rd4, %rd5;
    ld.global.f32       %f2, [%rd6];
    ld.global.f32       %f3, [%rd7];
    fma.rn.f32          %f4, %f1, %f2, %f3;
    st.global.f32       [%rd7], %f4;
$L_done:
    ret;
}

.visible .entry reverse(
    .param .u64 reverse_p
)
{
    .reg .b32   %r<8>;
    .reg .b64   %rd<10>;

    ld.param.u64        %rd1, [reverse_p];
    cvta.to.global.u64  %rd2, %rd1;
    mov.u32             %r1, %tid.x;
    mov.u32             %r2, %ntid.x;
    mov.u32             %r3, %ctaid.x;
    mad.lo.s32          %r4, %r3, %r2, %r1;
    mul.wide.u32        %rd3, %r4, 4;
    add.s64             %rd4, %rd2, %rd3;
    ld.global.u32       %r5, [%rd4];
    mov.u64             %rd5, smem;
    mul.wide.u32        %rd6, %r1, 4;
    add.s64             %rd7, %rd5, %rd6;
    st.shared.u32       [%rd7], %r5;
    bar.sync            0;
    sub.s32             %r6, %r2, %r1;
    sub.s32             %r6, %r6, 1;
    mul.wide.u32        %rd8, %r6, 4;
    add.s64             %rd9, %rd5, %rd8;
    ld.shared.u32       %r7, [%rd9];
    st.global.u32       [%rd4], %r7;
    ret;
}
"#;

/// Loads [`SAXPY_PTX`], printing the JIT log if the driver refuses it.
pub fn saxpy_module(ctx: &Context) -> Module {
    Module::from_ptx(ctx, SAXPY_PTX).unwrap_or_else(|e| panic!("{}", error_chain(&e)))
}

/// Enqueues `y = a * x + y` over `n` floats at raw addresses, on a stream or into a capture.
///
/// # Safety
/// `x` and `y` hold `n` floats of `f`'s context and outlive the work.
pub unsafe fn saxpy(s: impl Enqueue, f: &Function<'_>, n: usize, a: f32, x: u64, y: u64) {
    let n = n as u32;
    // SAFETY: `saxpy` takes (u32, f32, pointer, pointer); the caller vouches for the memory.
    unsafe {
        f.launch(
            &s,
            LaunchConfig::for_elements(n, 256),
            &kernel_args![n, a, x, y],
        )
    }
    .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
}

/// `n` floats counting 0, 1, ... 999, 0, 1, ...
pub fn ramp(n: usize) -> Vec<f32> {
    (0..n).map(|i| (i % 1000) as f32).collect()
}
