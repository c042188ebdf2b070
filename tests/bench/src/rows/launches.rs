//! Kernel launches through cuda-stream against the raw calls of the same kernel: a typed launch
//! and a checked untyped launch against `cuLaunchKernel`, and a launch with a cluster attribute
//! against the raw `cuLaunchKernelEx`. The kernel (`csb_args(u64, u32)`, an empty body) is
//! loaded once through `Module`, untimed; each side launches the same `CUfunction`
//! `<<<2, 32>>>`.

use std::ffi::c_void;
use std::hint::black_box;
use std::ptr;

use cuda_stream::{DeviceBuffer, Error, LaunchConfig, Module, kernel_args};
use cuda_stream_sys as sys;

use super::Fixture;
use crate::fail::{must, ok};
use crate::method::case;
use crate::report::{Rows, Target};

const ARGS_PTX: &str =
    ".visible .entry csb_args(.param .u64 csb_args_p, .param .u32 csb_args_n)\n{\n\tret;\n}\n";
const PTX_HEADERS: [&str; 3] = [
    ".version 7.0\n.target sm_50\n.address_size 64\n",
    ".version 7.0\n.target sm_75\n.address_size 64\n",
    ".version 7.8\n.target sm_90\n.address_size 64\n",
];

/// The kernel's module, loaded with the first PTX target the driver accepts.
fn load(fx: &Fixture<'_>) -> Result<Module, String> {
    let mut failures = Vec::new();
    for header in PTX_HEADERS {
        match Module::from_ptx(fx.ctx, &format!("{header}{ARGS_PTX}")) {
            Ok(m) => return Ok(m),
            Err(e) => failures.push(e.to_string()),
        }
    }
    Err(failures.join("; "))
}

pub(super) fn rows(fx: &Fixture<'_>, rows: &mut Rows) -> Result<(), Error> {
    let cfg = fx.cfg;
    let module = match load(fx) {
        Ok(m) => m,
        Err(why) => {
            eprintln!("cuda-stream-bench: the launch rows are left out: {why}");
            return Ok(());
        }
    };
    let (launch, launch_ex) = match (sys::fns::cuLaunchKernel(), sys::fns::cuLaunchKernelEx()) {
        (Ok(a), b) => (a, b.ok()),
        (Err(e), _) => {
            eprintln!("cuda-stream-bench: the launch rows are left out: {e}");
            return Ok(());
        }
    };
    let f = module.function("csb_args")?;
    let typed = f.typed::<(u64, u32)>()?;
    let (s1, r1) = (&fx.s1, fx.s1.raw());
    let raw_f = f.raw();
    let buffer = DeviceBuffer::<u32>::zeroed(fx.ctx, s1, 64)?;
    let (p, n) = (buffer.device_ptr(), 64u32);
    let config = LaunchConfig::new(2, 32);
    let raw_launch = || {
        let mut params = [
            ptr::from_ref(&p).cast_mut().cast::<c_void>(),
            ptr::from_ref(&n).cast_mut().cast::<c_void>(),
        ];
        // SAFETY: a loaded kernel of the current context taking (u64, u32); a live stream of it;
        // the kernel reads nothing.
        let rc = unsafe {
            launch(
                raw_f,
                2,
                1,
                1,
                32,
                1,
                1,
                0,
                r1,
                params.as_mut_ptr(),
                ptr::null_mut(),
            )
        };
        ok(rc, "cuLaunchKernel");
    };

    rows.add(
        "typed_launch",
        "TypedKernel::launch, 2 scalar arguments (raw: cuLaunchKernel of the same kernel)",
        Target::Ratio(1.05),
        case(cfg.medium, raw_launch, || {
            // SAFETY: the kernel does nothing.
            must(
                unsafe { typed.launch(s1, config, (p, n)) },
                "TypedKernel::launch",
            )
        })
        .no_peer("no peer checks arguments against the kernel")
        .settle(|| fx.settle())
        .run(cfg),
    );
    // A view's typed launch and fill against the whole buffer's, the same work (64 values):
    // what taking a view costs on top of the buffer's own path. Both on a private stream (its
    // handle never leaves the crate), as a program that uses only the safe API: on s1, whose
    // handle the raw rows took, every buffer use records an event, and the event's cost and
    // noise would drown the view's.
    let p1 = &fx.ctx.new_stream()?;
    let settle = || {
        fx.settle();
        must(p1.synchronize(), "synchronize");
    };
    let buffered = f.typed::<(&mut DeviceBuffer<u32>, u32)>()?;
    let mut whole = DeviceBuffer::<u32>::zeroed(fx.ctx, p1, 64)?;
    let mut parent = DeviceBuffer::<u32>::zeroed(fx.ctx, p1, 128)?;
    rows.add(
        "view_typed_launch",
        "TypedKernel::launch on a view of 64 values of a buffer (against the same launch on a whole buffer of 64)",
        Target::Ratio(1.02),
        case(
            cfg.medium,
            || {
                // SAFETY: the kernel does nothing.
                must(
                    unsafe { buffered.launch(p1, config, (&mut whole, n)) },
                    "TypedKernel::launch",
                )
            },
            || {
                let view = must(parent.slice_mut(..64), "DeviceBuffer::slice_mut");
                // SAFETY: the kernel does nothing.
                must(
                    unsafe { buffered.launch(p1, config, (view, n)) },
                    "TypedKernel::launch",
                )
            },
        )
        .no_peer("the baseline is this crate's own whole-buffer launch")
        .settle(settle)
        .run(cfg),
    );
    rows.add(
        "view_fill",
        "fill of a view of 64 values of a buffer (against the fill of a whole buffer of 64)",
        Target::Ratio(1.02),
        case(
            cfg.medium,
            || must(whole.fill(p1, black_box(7)), "DeviceBuffer::fill"),
            || {
                let mut view = must(parent.slice_mut(..64), "DeviceBuffer::slice_mut");
                must(view.fill(p1, black_box(7)), "DeviceSliceMut::fill")
            },
        )
        .no_peer("the baseline is this crate's own whole-buffer fill")
        .settle(settle)
        .run(cfg),
    );
    rows.add(
        "checked_launch",
        "Function::launch checked against the kernel's parameters, 2 arguments (raw: cuLaunchKernel)",
        Target::Ratio(1.05),
        case(cfg.medium, raw_launch, || {
            // SAFETY: the kernel takes (u64, u32) and does nothing.
            must(
                unsafe { f.launch(s1, config, &kernel_args![p, n]) },
                "Function::launch",
            )
        })
        .no_peer("no peer checks arguments against the kernel")
        .settle(|| fx.settle())
        .run(cfg),
    );

    let Some(launch_ex) = launch_ex else {
        eprintln!("cuda-stream-bench: the cluster launch row is left out: no cuLaunchKernelEx");
        return Ok(());
    };
    let clustered = config.cluster(2);
    // SAFETY: as below, once, untimed: is the attribute supported here?
    if let Err(e) = unsafe { f.launch(s1, clustered, &kernel_args![p, n]) } {
        eprintln!("cuda-stream-bench: the cluster launch row is left out: {e}");
        return Ok(());
    }
    let raw_ex = || {
        let mut params = [
            ptr::from_ref(&p).cast_mut().cast::<c_void>(),
            ptr::from_ref(&n).cast_mut().cast::<c_void>(),
        ];
        let mut attr = sys::CUlaunchAttribute {
            id: sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION,
            ..Default::default()
        };
        attr.value.clusterDim =
            sys::CUlaunchAttributeValue_union__bindgen_ty_1 { x: 2, y: 1, z: 1 };
        let c = sys::CUlaunchConfig {
            gridDimX: 2,
            gridDimY: 1,
            gridDimZ: 1,
            blockDimX: 32,
            blockDimY: 1,
            blockDimZ: 1,
            sharedMemBytes: 0,
            hStream: r1,
            attrs: &mut attr,
            numAttrs: 1,
        };
        // SAFETY: as `raw_launch`, with one cluster attribute that outlives the call.
        let rc = unsafe { launch_ex(&c, raw_f, params.as_mut_ptr(), ptr::null_mut()) };
        ok(rc, "cuLaunchKernelEx");
    };
    rows.add(
        "launch_ex_cluster",
        "Function::launch with clusters of 2 blocks (raw: cuLaunchKernelEx with the cluster attribute)",
        Target::Ratio(1.05),
        case(cfg.medium, raw_ex, || {
            // SAFETY: the kernel takes (u64, u32) and does nothing.
            must(
                unsafe { f.launch(s1, clustered, &kernel_args![p, n]) },
                "Function::launch",
            )
        })
        .no_peer("cudarc's launch builder takes no launch attributes")
        .settle(|| fx.settle())
        .run(cfg),
    );
    Ok(())
}
