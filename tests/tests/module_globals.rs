//! A module's global variables on the GPU (`Module::global`): `__constant__` coefficients
//! filled with a safe copy and read by a kernel through its name (200 rounds, each with new
//! values, every output checked), a `__device__` counter the kernel adds to, read back; a
//! `__device__` table passed to a typed kernel as the buffer it writes, read on another stream
//! (the use is tracked: 200 rounds, no stale read); and a graph that filled a variable, replayed
//! after its module was closed.

use cuda_stream::{CaptureMode, DeviceBuffer, LaunchConfig, Module};
use cuda_stream_tests::{alongside_others, error_chain, gpu, read_u32s, saxpy_module};

/// `out[i] = coeffs[i % 16]` for `i < n`, and `counter += 1` per value written.
const GLOBALS_PTX: &str = r#"
.version 7.0
.target sm_70
.address_size 64

.visible .const .align 4 .b8 coeffs[64];
.visible .global .align 4 .u32 counter;
.visible .global .align 4 .b8 table[64];

.visible .entry from_coeffs(.param .u64 out, .param .u32 n)
{
    .reg .pred %p<2>;
    .reg .b32 %r<8>;
    .reg .b64 %rd<8>;
    .reg .f32 %f<2>;
    ld.param.u64 %rd1, [out];
    ld.param.u32 %r1, [n];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.s32 %r5, %r2, %r3, %r4;
    setp.ge.u32 %p1, %r5, %r1;
    @%p1 bra DONE;
    and.b32 %r6, %r5, 15;
    mul.wide.u32 %rd2, %r6, 4;
    mov.u64 %rd3, coeffs;
    add.u64 %rd4, %rd3, %rd2;
    ld.const.f32 %f1, [%rd4];
    cvta.to.global.u64 %rd5, %rd1;
    mul.wide.u32 %rd6, %r5, 4;
    add.u64 %rd7, %rd5, %rd6;
    st.global.f32 [%rd7], %f1;
    atom.global.add.u32 %r7, [counter], 1;
DONE:
    ret;
}
"#;

fn load(ctx: &cuda_stream::Context) -> Module {
    Module::from_ptx(ctx, GLOBALS_PTX).unwrap_or_else(|e| panic!("{}", error_chain(&e)))
}

#[test]
fn constants_filled_by_a_copy_are_read_by_a_kernel() {
    let Some(ctx) = gpu() else { return };
    let _turn = alongside_others();
    let module = load(&ctx);
    let from_coeffs = module
        .function("from_coeffs")
        .unwrap()
        .typed::<(&mut DeviceBuffer<f32>, u32)>()
        .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    let coeffs = module.global::<f32>("coeffs").unwrap();
    let counter = module.global::<u32>("counter").unwrap();
    assert_eq!((coeffs.len(), counter.len()), (16, 1));
    assert_eq!(
        module.global::<[u8; 3]>("coeffs").unwrap_err().to_string(),
        "invalid argument: global variable `coeffs` (64 bytes): not a whole number of 3-byte values"
    );
    assert!(matches!(
        module.global::<u32>("missing"),
        Err(cuda_stream::Error::GlobalNotFound { .. })
    ));
    let (s, t) = (ctx.new_stream().unwrap(), ctx.new_stream().unwrap());
    counter.fill(&s, 0).unwrap();
    let n = 1 << 16;
    let mut out = DeviceBuffer::<f32>::zeroed(&ctx, &s, n).unwrap();
    let rounds = 200u32;
    for round in 0..rounds {
        let values: Vec<f32> = (0..16).map(|i| (round * 16 + i) as f32).collect();
        // The kernel reads `coeffs` by name, which is no recorded use: the copy is on the
        // launch's stream, ordered by the stream.
        coeffs.copy_from_host(&s, &values).unwrap();
        // SAFETY: from_coeffs writes out[..n] and reads the module's own variables, written on
        // this stream only.
        unsafe {
            from_coeffs.launch(
                &s,
                LaunchConfig::for_elements(n as u32, 256),
                (&mut out, n as u32),
            )
        }
        .unwrap();
        // Read on another stream: waits for the launch (a recorded write of `out`).
        let got = out.to_vec(&t).unwrap();
        for (i, &g) in got.iter().enumerate() {
            assert_eq!(g, values[i % 16], "round {round}, value {i}");
        }
    }
    assert_eq!(
        coeffs.to_vec(&s).unwrap()[15],
        ((rounds - 1) * 16 + 15) as f32
    );
    assert_eq!(counter.to_vec(&s).unwrap(), [rounds * n as u32]);
    println!(
        "globals: {rounds} rounds of {n} values read from __constant__ memory, counter checked"
    );
}

#[test]
fn a_global_passed_to_a_typed_kernel_is_a_tracked_use() {
    let Some(ctx) = gpu() else { return };
    let _turn = alongside_others();
    let module = load(&ctx);
    let saxpy = saxpy_module(&ctx);
    let saxpy = saxpy
        .function("saxpy")
        .unwrap()
        .typed::<(u32, f32, &DeviceBuffer<f32>, &mut DeviceBuffer<f32>)>()
        .unwrap();
    let mut table = module.global::<f32>("table").unwrap();
    let (s, t) = (ctx.new_stream().unwrap(), ctx.new_stream().unwrap());
    let x = DeviceBuffer::from_host(&ctx, &s, &[1.0f32; 16]).unwrap();
    for round in 0..200u32 {
        // table = round on t, then table += 2 x on s (waits for the fill), read on t.
        table.fill(&t, round as f32).unwrap();
        // SAFETY: saxpy reads x[..16] and writes table[..16].
        unsafe {
            saxpy.launch(
                &s,
                LaunchConfig::for_elements(16, 32),
                (16u32, 2.0, &x, &mut table),
            )
        }
        .unwrap();
        assert_eq!(
            table.to_vec(&t).unwrap(),
            [round as f32 + 2.0; 16],
            "round {round}"
        );
    }
    println!("globals: a __device__ table written by a typed kernel, 200 rounds, no stale read");
}

#[test]
fn a_graph_keeps_its_modules_variables() {
    let Some(ctx) = gpu() else { return };
    let _turn = alongside_others();
    let mut s = ctx.new_stream().unwrap();
    let module = load(&ctx);
    let table = module.global::<u32>("table").unwrap();
    let ptr = table.device_ptr();
    let graph = s
        .capture(CaptureMode::ThreadLocal, |cap| table.fill(&cap, 0xabc))
        .unwrap();
    let exec = graph.instantiate().unwrap();
    drop((graph, table));
    // The graph holds the variable, so the module stays loaded for its replays.
    module.close().unwrap();
    exec.launch(&s).unwrap();
    s.synchronize().unwrap();
    // Raw: no buffer of the variable is left (the executable graph holds the module).
    assert_eq!(read_u32s(&ctx, ptr, 16), [0xabc; 16]);
    drop(exec);
}
