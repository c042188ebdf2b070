//! Checked launches, typed kernels, launch attributes and occupancy against the mock driver, on
//! every driver flavour (each in a child process, through
//! [`checked_launches_behave_on_every_driver_flavour`]): the kernel's parameters come from
//! `cuFuncGetParamInfo` from CUDA 12.4 (read once per kernel) and from the PTX before; a launch
//! or a typed kernel whose arguments differ in number, size or order is an error naming the
//! kernel, the parameter and both sizes, and reaches no driver; launch attributes go through
//! `cuLaunchKernelEx` (`Unsupported` on CUDA 11.4, which lacks it).

use std::sync::{Mutex, OnceLock};

use cuda_mock_driver::{FLAVOURS, Flavour, MockDriver, Serialized, report, run_in_each_flavour};
use cuda_stream::ffi::{CUlaunchAttributeID, CUresult};
use cuda_stream::{
    ArgKind, ArgMismatch, CaptureMode, Context, DeviceBuffer, Error, KernelArg, LaunchConfig,
    Module, ParamInfo, ParamKind, kernel_args,
};

/// `saxpy` (computed by the mock), a kernel without parameters, one of a 16-byte struct with
/// `.maxntid 128`, and one with a `.ptr` parameter.
const PTX: &str = r#"
.version 7.8
.target sm_90
.address_size 64

.visible .entry saxpy(
    .param .u32 saxpy_n,
    .param .f32 saxpy_a,
    .param .u64 saxpy_x,   // const float *
    .param .u64 saxpy_y    // float *
)
{
    ret;
}

.visible .entry nothing()
{
    ret;
}

.visible .entry small(.param .align 8 .b8 small_p[16])
.maxntid 128, 1, 1
{
    ret;
}

.visible .entry pointed(.param .u64 .ptr .global .align 4 pointed_p, .param .f64 pointed_v)
{
    ret;
}
"#;

static LOCK: Mutex<()> = Mutex::new(());

fn flavour() -> &'static Flavour {
    Flavour::from_env().unwrap_or(Flavour::full())
}

/// Serialises the test, installs this process's flavour as the driver (once) and resets it.
fn mock() -> (Serialized, &'static MockDriver) {
    static MOCK: OnceLock<MockDriver> = OnceLock::new();
    let guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let m = MOCK.get_or_init(|| {
        let path = flavour().path();
        // SAFETY: the mock driver, built with this test.
        let driver =
            unsafe { cuda_stream_sys::Driver::open(&path) }.expect("the mock driver library opens");
        cuda_stream_sys::Driver::install_global(driver).expect("nothing loaded a driver before");
        // SAFETY: the mock driver, built with this test.
        unsafe { MockDriver::open(&path) }.expect("the mock's control functions resolve")
    });
    m.reset();
    (m.checked(guard), m)
}

fn has_param_info() -> bool {
    flavour().version >= 12040
}

fn mismatch(e: Error) -> (String, ArgMismatch) {
    match e {
        Error::ArgumentMismatch { kernel, mismatch } => (kernel, mismatch),
        other => panic!("not a mismatch: {other:?}"),
    }
}

#[test]
fn parameters_are_read_once_from_the_driver_or_the_ptx() {
    let (_lock, m) = mock();
    let ctx = Context::primary(0).unwrap();
    let module = Module::from_ptx(&ctx, PTX).unwrap();
    let saxpy = module.function("saxpy").unwrap();
    let int = |size| ParamInfo {
        size,
        kind: ParamKind::Integer,
    };
    let float = ParamInfo {
        size: 4,
        kind: ParamKind::Float,
    };
    assert_eq!(saxpy.name(), "saxpy");
    assert_eq!(saxpy.params().unwrap(), [int(4), float, int(8), int(8)]);
    let calls = m.calls("cuFuncGetParamInfo");
    // One call per parameter, on drivers that have it: the PTX gives their number, so nothing
    // past the end is asked (that call's CUDA_ERROR_INVALID_VALUE is an API error that plain
    // compute-sanitizer reports).
    assert_eq!(calls, if has_param_info() { 4 } else { 0 });
    let again = module.function("saxpy").unwrap();
    assert_eq!(again.params(), saxpy.params());
    assert_eq!(m.calls("cuFuncGetParamInfo"), calls, "read once per kernel");
    let small = module.function("small").unwrap().params().unwrap().to_vec();
    assert_eq!(
        small,
        [ParamInfo {
            size: 16,
            kind: ParamKind::Any
        }]
    );
    let pointed = module
        .function("pointed")
        .unwrap()
        .params()
        .unwrap()
        .to_vec();
    assert_eq!(pointed[0].kind, ParamKind::Pointer);
    assert_eq!(module.function("nothing").unwrap().params().unwrap(), []);

    // PTX handed over as an image is read as PTX too.
    let image = format!("{PTX}\0");
    // SAFETY: NUL-terminated PTX text.
    let module = unsafe { Module::from_image(&ctx, image.as_bytes()) }.unwrap();
    assert_eq!(module.function("saxpy").unwrap().params().unwrap().len(), 4);
}

#[test]
fn mismatched_arguments_are_errors_before_the_driver() {
    let (_lock, m) = mock();
    let ctx = Context::primary(0).unwrap();
    let module = Module::from_ptx(&ctx, PTX).unwrap();
    let saxpy = module.function("saxpy").unwrap();
    let stream = ctx.new_stream().unwrap();
    let x = DeviceBuffer::from_host(&ctx, &stream, &[1.0f32; 64]).unwrap();
    let mut y = DeviceBuffer::from_host(&ctx, &stream, &[0.0f32; 64]).unwrap();
    let config = LaunchConfig::for_elements(64, 64);
    let launches = m.calls("cuLaunchKernel");
    let (n, a, n64) = (64u32, 2.0f32, 64u64);

    // SAFETY: refused before the driver is called (so for each launch below).
    let count = unsafe { saxpy.launch(&stream, config, &kernel_args![n, a, x.read()]) };
    let (kernel, count) = mismatch(count.unwrap_err());
    assert_eq!(kernel, "saxpy");
    assert_eq!(count, ArgMismatch::Count { params: 4, args: 3 });

    // SAFETY: refused before the driver is called: the arguments do not match.
    let size = unsafe { saxpy.launch(&stream, config, &kernel_args![n64, a, x.read(), y.write()]) };
    let size = size.unwrap_err();
    assert_eq!(
        size.to_string(),
        "kernel `saxpy` parameter 0 is 4 bytes, the argument is 8 bytes"
    );
    assert_eq!(
        mismatch(size).1,
        ArgMismatch::Size {
            index: 0,
            param: 4,
            arg: 8
        }
    );

    // The first two swapped: same sizes, but a float where the PTX says `.u32`.
    // SAFETY: refused before the driver is called: the arguments do not match.
    let order = unsafe { saxpy.launch(&stream, config, &kernel_args![a, n, x.read(), y.write()]) };
    assert_eq!(
        mismatch(order.unwrap_err()).1,
        ArgMismatch::Kind {
            index: 0,
            param: ParamKind::Integer,
            arg: ArgKind::Float
        }
    );
    // A buffer first: 8 bytes for a 4-byte parameter.
    // SAFETY: refused before the driver is called: the arguments do not match.
    let order = unsafe { saxpy.launch(&stream, config, &kernel_args![x.read(), n, a, y.write()]) };
    assert_eq!(
        mismatch(order.unwrap_err()).1,
        ArgMismatch::Size {
            index: 0,
            param: 4,
            arg: 8
        }
    );
    // A float for a `.ptr` parameter; a raw pointer of a known size, checked by size.
    let pointed = module.function("pointed").unwrap();
    let v = 1.0f64;
    // SAFETY: refused before the driver is called: the arguments do not match.
    let e = unsafe { pointed.launch(&stream, config, &kernel_args![v, v]) }.unwrap_err();
    assert!(matches!(mismatch(e).1, ArgMismatch::Kind { index: 0, .. }));
    let raw = KernelArg::from_ptr_sized((&v as *const f64).cast(), 4);
    // SAFETY: refused before the driver is called: the arguments do not match.
    let e = unsafe { pointed.launch(&stream, config, &[KernelArg::new(&n64), raw]) }.unwrap_err();
    assert!(matches!(mismatch(e).1, ArgMismatch::Size { index: 1, .. }));
    assert_eq!(
        m.calls("cuLaunchKernel"),
        launches,
        "no launch reached the driver"
    );

    // Typed kernels are checked once, when typed.
    let e = saxpy.typed::<(u32, f32, &DeviceBuffer<f32>)>().unwrap_err();
    assert_eq!(mismatch(e).1, ArgMismatch::Count { params: 4, args: 3 });
    let e = saxpy
        .typed::<(u64, f32, &DeviceBuffer<f32>, &mut DeviceBuffer<f32>)>()
        .unwrap_err();
    assert!(matches!(
        mismatch(e).1,
        ArgMismatch::Size {
            index: 0,
            param: 4,
            arg: 8
        }
    ));
    let e = saxpy
        .typed::<(f32, u32, &DeviceBuffer<f32>, &mut DeviceBuffer<f32>)>()
        .unwrap_err();
    assert!(matches!(mismatch(e).1, ArgMismatch::Kind { index: 0, .. }));
    let e = saxpy
        .typed::<(u32, f32, u16, &mut DeviceBuffer<f32>)>()
        .unwrap_err();
    assert!(matches!(
        mismatch(e).1,
        ArgMismatch::Size {
            index: 2,
            param: 8,
            arg: 2
        }
    ));
    assert_eq!(m.calls("cuLaunchKernel"), launches);

    // What matches is launched.
    // SAFETY: saxpy reads x[..64] and writes y[..64].
    unsafe { saxpy.launch(&stream, config, &kernel_args![n, a, x.read(), y.write()]) }.unwrap();
    assert_eq!(y.to_vec(&stream).unwrap(), vec![2.0; 64]);
}

#[test]
fn typed_launches_take_values_and_record_buffer_uses() {
    let (_lock, m) = mock();
    let ctx = Context::primary(0).unwrap();
    let module = Module::from_ptx(&ctx, PTX).unwrap();
    let saxpy = module
        .function("saxpy")
        .unwrap()
        .typed::<(u32, f32, &DeviceBuffer<f32>, &mut DeviceBuffer<f32>)>()
        .unwrap();
    let (a, b) = (ctx.new_stream().unwrap(), ctx.new_stream().unwrap());
    let host: Vec<f32> = (0..256).map(|i| i as f32).collect();
    let x = DeviceBuffer::from_host(&ctx, &a, &host).unwrap();
    let mut y = DeviceBuffer::from_host(&ctx, &a, &[1.0f32; 256]).unwrap();
    let config = LaunchConfig::for_elements(256, 128);
    // On b: waits for the uploads on a by itself.
    // SAFETY: saxpy reads x[..256] and writes y[..256].
    unsafe { saxpy.launch(&b, config, (256, 2.0, &x, &mut y)) }.unwrap();
    let launch = m.last_launch().unwrap();
    assert_eq!(
        launch.params,
        vec![
            256u32.to_ne_bytes().to_vec(),
            2.0f32.to_ne_bytes().to_vec(),
            x.device_ptr().to_ne_bytes().to_vec(),
            y.device_ptr().to_ne_bytes().to_vec(),
        ]
    );
    let expect = |k: f32| -> Vec<f32> { host.iter().map(|v| 1.0 + k * 2.0 * v).collect() };
    // On a: waits for the kernel on b.
    assert_eq!(y.to_vec(&a).unwrap(), expect(1.0));

    // In a capture: the graph keeps the buffers and replays the launch.
    let mut s = ctx.new_stream().unwrap();
    let graph = s
        .capture(CaptureMode::ThreadLocal, |cap| {
            // SAFETY: as above.
            unsafe { saxpy.launch(&cap, config, (256, 2.0, &x, &mut y)) }
        })
        .unwrap();
    let exec = graph.instantiate().unwrap();
    for _ in 0..3 {
        exec.launch(&s).unwrap();
    }
    s.synchronize().unwrap();
    assert_eq!(y.to_vec(&s).unwrap(), expect(4.0));
    assert_eq!((m.bad_uses(), m.bad_destroys()), (0, 0));
}

#[test]
fn launch_attributes_go_through_cu_launch_kernel_ex() {
    let (_lock, m) = mock();
    let ctx = Context::primary(0).unwrap();
    let module = Module::from_ptx(&ctx, PTX).unwrap();
    let nothing = module.function("nothing").unwrap();
    let stream = ctx.new_stream().unwrap();
    // SAFETY: no parameters, no code.
    let launch = |c: LaunchConfig| unsafe { nothing.launch(&stream, c, &[]) };
    let plain = m.calls("cuLaunchKernel");
    let cluster = LaunchConfig::new((4, 2), 64).cluster((2, 2));
    if !flavour().has_abi("cuLaunchKernelEx") {
        let e = launch(cluster).unwrap_err();
        assert!(
            matches!(
                e,
                Error::Unsupported {
                    call: "cuLaunchKernelEx",
                    ..
                }
            ),
            "{e:?}"
        );
        return;
    }
    type Id = CUlaunchAttributeID;
    launch(cluster).unwrap();
    let last = m.last_launch().unwrap();
    assert_eq!(last.grid, [4, 2, 1]);
    assert_eq!(
        last.attributes,
        [[Id::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION.0, 2, 2, 1]]
    );
    launch(
        LaunchConfig::new(8, 32)
            .cooperative(true)
            .programmatic_serialization(true),
    )
    .unwrap();
    assert_eq!(
        m.last_launch().unwrap().attributes,
        [
            [Id::CU_LAUNCH_ATTRIBUTE_COOPERATIVE.0, 1, 0, 0],
            [
                Id::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION.0,
                1,
                0,
                0
            ],
        ]
    );
    launch(LaunchConfig::new(1, 32).priority(-1)).unwrap();
    assert_eq!(
        m.last_launch().unwrap().attributes,
        [[Id::CU_LAUNCH_ATTRIBUTE_PRIORITY.0, u32::MAX, 0, 0]]
    );
    assert_eq!(
        m.calls("cuLaunchKernel"),
        plain,
        "all through cuLaunchKernelEx"
    );
    // Without attributes: cuLaunchKernel.
    launch(LaunchConfig::new(1, 32)).unwrap();
    assert_eq!(m.calls("cuLaunchKernel"), plain + 1);

    // A grid that is no multiple of its clusters is refused before the driver; a cooperative
    // grid larger than the device holds at once is the driver's error.
    let ex = m.calls("cuLaunchKernelEx");
    let e = launch(LaunchConfig::new(3, 32).cluster(2)).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidLaunch { reason }
            if reason.contains("not a multiple of the cluster (2, 1, 1)")),
        "{e}"
    );
    assert_eq!(m.calls("cuLaunchKernelEx"), ex);
    let e = launch(LaunchConfig::new(100_000, 1024).cooperative(true)).unwrap_err();
    assert_eq!(
        e.driver_code(),
        Some(CUresult::CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE)
    );
    stream.synchronize().unwrap();
}

#[test]
fn occupancy_picks_a_block_size() {
    let (_lock, _m) = mock();
    let ctx = Context::primary(0).unwrap();
    let module = Module::from_ptx(&ctx, PTX).unwrap();
    let saxpy = module.function("saxpy").unwrap();
    let size = saxpy.max_potential_block_size(0).unwrap();
    assert_eq!((size.block, size.min_grid), (1024, 264));
    let small = module.function("small").unwrap();
    assert_eq!(small.max_potential_block_size(0).unwrap().block, 128);
    assert_eq!(
        saxpy.max_active_blocks_per_multiprocessor(256, 0).unwrap(),
        8
    );
    assert_eq!(
        small.max_active_blocks_per_multiprocessor(256, 0).unwrap(),
        0
    );
    let c = LaunchConfig::for_elements_auto(small, 1000).unwrap();
    assert_eq!((c.grid.x, c.block.x), (8, 128));
}

/// Runs the tests above again against every other flavour, one child process each.
#[test]
fn checked_launches_behave_on_every_driver_flavour() {
    if Flavour::from_env().is_some() {
        return;
    }
    let others: Vec<&'static Flavour> = FLAVOURS.iter().filter(|f| *f != Flavour::full()).collect();
    let runs = run_in_each_flavour(
        &others,
        &[
            "--test-threads=1",
            "--skip",
            "checked_launches_behave_on_every_driver_flavour",
        ],
        &[],
    );
    let mut failed = Vec::new();
    for r in &runs {
        let ok = r.lines_containing("test result: ok. 5 passed");
        report(&format!(
            "checked launches ({}): {}",
            r.flavour.name,
            if ok.len() == 1 { "5 passed" } else { "FAILED" }
        ));
        if !r.status.success() || ok.len() != 1 {
            failed.push(r.failure_report());
        }
    }
    assert_eq!(runs.len(), FLAVOURS.len() - 1);
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}
