//! Graphs: launching a captured graph (`GraphExec::launch` against `cuGraphLaunch` of the same
//! executable graph), capturing and instantiating a 10-node graph (against the raw calls), 100
//! small kernels replayed as one graph against the same kernels enqueued one by one, and the
//! capture check that run-once host functions now make.
//!
//! The kernel is an empty PTX kernel (`<<<1, 1>>>`, no parameters), JIT-compiled by the driver
//! once, untimed; it is launched with raw `cuLaunchKernel` on every side, so the rows measure the
//! capture and graph calls, not a kernel-launch API.

use std::ffi::CString;
use std::hint::black_box;
use std::ptr;

use cuda_stream::{CaptureMode, Error, GraphExec};
use cuda_stream_sys as sys;

use super::Fixture;
use crate::fail::{must, must_cudarc, ok};
use crate::method::case;
use crate::report::{Rows, Target};

/// An empty kernel; the header is tried with the targets below until the driver accepts one.
const EMPTY_PTX: &str = ".visible .entry csb_empty()\n{\n\tret;\n}\n";
const PTX_HEADERS: [&str; 3] = [
    ".version 7.0\n.target sm_50\n.address_size 64\n",
    ".version 7.0\n.target sm_75\n.address_size 64\n",
    ".version 7.8\n.target sm_90\n.address_size 64\n",
];

/// cudarc's own binding types for its graph calls.
const CUDARC_THREAD_LOCAL: cudarc::driver::sys::CUstreamCaptureMode =
    cudarc::driver::sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
const CUDARC_NO_FLAGS: cudarc::driver::sys::CUgraphInstantiate_flags =
    cudarc::driver::sys::CUgraphInstantiate_flags(0);

/// Kernels in the "one by one vs one graph" row.
const MANY: usize = 100;
/// Kernels in the capture + instantiate row.
const TEN: usize = 10;

/// The raw graph calls, resolved once before timing.
#[derive(Clone, Copy)]
struct GraphRaw {
    launch_kernel: sys::pfn::cuLaunchKernel,
    begin_capture: sys::pfn::cuStreamBeginCapture,
    end_capture: sys::pfn::cuStreamEndCapture,
    instantiate: sys::pfn::cuGraphInstantiate,
    graph_launch: sys::pfn::cuGraphLaunch,
    graph_destroy: sys::pfn::cuGraphDestroy,
    exec_destroy: sys::pfn::cuGraphExecDestroy,
}

impl GraphRaw {
    fn load() -> Result<GraphRaw, sys::LoadError> {
        Ok(GraphRaw {
            launch_kernel: sys::fns::cuLaunchKernel()?,
            begin_capture: sys::fns::cuStreamBeginCapture()?,
            end_capture: sys::fns::cuStreamEndCapture()?,
            instantiate: sys::fns::cuGraphInstantiate()?,
            graph_launch: sys::fns::cuGraphLaunch()?,
            graph_destroy: sys::fns::cuGraphDestroy()?,
            exec_destroy: sys::fns::cuGraphExecDestroy()?,
        })
    }

    /// Enqueues `csb_empty<<<1, 1>>>()` on `s`.
    #[inline(always)]
    fn empty(&self, f: sys::CUfunction, s: sys::CUstream) {
        // SAFETY: `f` is the loaded parameterless kernel of the current context; `s` is a live
        // stream of it (or one being captured); a kernel without parameters takes null arrays.
        let rc = unsafe {
            (self.launch_kernel)(f, 1, 1, 1, 1, 1, 1, 0, s, ptr::null_mut(), ptr::null_mut())
        };
        ok(rc, "cuLaunchKernel");
    }

    /// Captures `n` empty kernels on `s` and instantiates them; the graph and the executable
    /// graph, for the caller to destroy.
    fn capture(
        &self,
        f: sys::CUfunction,
        s: sys::CUstream,
        n: usize,
    ) -> (sys::CUgraph, sys::CUgraphExec) {
        let mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
        // SAFETY: `s` is a live stream, not capturing.
        ok(
            unsafe { (self.begin_capture)(s, mode) },
            "cuStreamBeginCapture",
        );
        for _ in 0..n {
            self.empty(f, s);
        }
        let mut graph = ptr::null_mut();
        // SAFETY: the capture was begun on `s` on this thread; valid out-pointer.
        ok(
            unsafe { (self.end_capture)(s, &mut graph) },
            "cuStreamEndCapture",
        );
        let mut exec = ptr::null_mut();
        // SAFETY: the graph is live; valid out-pointer.
        ok(
            unsafe { (self.instantiate)(&mut exec, graph, 0) },
            "cuGraphInstantiate",
        );
        (graph, exec)
    }

    /// Destroys what [`GraphRaw::capture`] made.
    fn destroy(&self, graph: sys::CUgraph, exec: sys::CUgraphExec) {
        // SAFETY: made by `capture`, destroyed once.
        ok(unsafe { (self.exec_destroy)(exec) }, "cuGraphExecDestroy");
        // SAFETY: as above.
        ok(unsafe { (self.graph_destroy)(graph) }, "cuGraphDestroy");
    }
}

/// Loads the empty kernel in the current context, trying each PTX target.
fn load_empty_kernel() -> Result<sys::CUfunction, String> {
    let mut failures = Vec::new();
    for header in PTX_HEADERS {
        let image = CString::new(format!("{header}{EMPTY_PTX}")).map_err(|e| e.to_string())?;
        let mut module = ptr::null_mut();
        // SAFETY: a NUL-terminated PTX image; valid out-pointer; the context is current.
        let rc = unsafe { sys::cuModuleLoadData(&mut module, image.as_ptr().cast()) };
        if rc != sys::CUresult::CUDA_SUCCESS {
            failures.push(format!(
                "{}: {}",
                header.replace('\n', " ").trim(),
                sys::result_name(rc)
            ));
            continue;
        }
        let mut f = ptr::null_mut();
        // SAFETY: the module is loaded (for the life of the process); the name is NUL-terminated.
        let rc = unsafe { sys::cuModuleGetFunction(&mut f, module, c"csb_empty".as_ptr()) };
        if rc != sys::CUresult::CUDA_SUCCESS {
            return Err(format!("cuModuleGetFunction: {}", sys::result_name(rc)));
        }
        return Ok(f);
    }
    Err(format!("cuModuleLoadData: {}", failures.join("; ")))
}

/// `n` empty kernels captured on `stream` through cuda-stream, instantiated.
fn safe_capture(
    stream: &mut cuda_stream::OwnedStream,
    raw: &GraphRaw,
    f: sys::CUfunction,
    n: usize,
) -> GraphExec {
    let graph = stream.capture(CaptureMode::ThreadLocal, |cap| {
        for _ in 0..n {
            raw.empty(f, cap.raw());
        }
        Ok(())
    });
    must(
        must(graph, "OwnedStream::capture").instantiate(),
        "Graph::instantiate",
    )
}

pub(super) fn rows(fx: &Fixture<'_>, rows: &mut Rows) -> Result<(), Error> {
    let cfg = fx.cfg;
    let (s1, r1, r2) = (&fx.s1, fx.s1.raw(), fx.s2.raw());
    let is_capturing = sys::fns::cuStreamIsCapturing().map_err(Error::Load)?;
    // The run-once host-function check: the raw call `launch_host_func` now makes, next to the
    // public status query.
    rows.add(
        "capture_check",
        "capture check: cuStreamIsCapturing (raw, what launch_host_func adds) vs Stream::capture_status (cuStreamGetCaptureInfo)",
        Target::None,
        case(
            cfg.fast,
            || {
                let mut st = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
                // SAFETY: a live stream; valid out-pointer.
                ok(
                    unsafe { (is_capturing)(r1, &mut st) },
                    "cuStreamIsCapturing",
                );
                black_box(st);
            },
            || {
                black_box(must(s1.capture_status(), "Stream::capture_status"));
            },
        )
        .peer(fx.cudarc().map(|c| {
            move || {
                black_box(must_cudarc(c.s1.capture_status(), "CudaStream::capture_status"));
            }
        }))
        .run(cfg),
    );

    let raw = match GraphRaw::load() {
        Ok(raw) => raw,
        Err(e) => {
            eprintln!("cuda-stream-bench: the graph rows are left out: {e}");
            return Ok(());
        }
    };
    let f = match load_empty_kernel() {
        Ok(f) => f,
        Err(why) => {
            eprintln!("cuda-stream-bench: the graph rows are left out: {why}");
            return Ok(());
        }
    };
    // The stream the safe side captures on (`capture` borrows its owner exclusively).
    let mut cs = fx.ctx.new_stream()?;

    // Launching one executable graph (one empty kernel), safe against raw on the same handle.
    let exec = safe_capture(&mut cs, &raw, f, 1);
    let exec_raw = exec.raw();
    let peer_graph = fx.cudarc().and_then(|c| {
        c.s1.begin_capture(CUDARC_THREAD_LOCAL).ok()?;
        raw.empty(f, c.s1.cu_stream().cast());
        c.s1.end_capture(CUDARC_NO_FLAGS).ok().flatten()
    });
    rows.add(
        "graph_launch",
        "GraphExec::launch (raw: cuGraphLaunch of the same executable graph; one empty kernel)",
        Target::Ratio(1.05),
        case(
            cfg.medium,
            || {
                // SAFETY: a live executable graph of the current context; a live stream of it.
                ok(unsafe { (raw.graph_launch)(exec_raw, r1) }, "cuGraphLaunch");
            },
            || must(exec.launch(s1), "GraphExec::launch"),
        )
        .peer(
            peer_graph
                .as_ref()
                .map(|g| move || must_cudarc(g.launch(), "CudaGraph::launch")),
        )
        .settle(|| fx.settle())
        .run(cfg),
    );
    drop(peer_graph);

    // Capture + instantiate (+ destroy) of a 10-node graph.
    let iters = (cfg.slow / 4).max(10);
    rows.add(
        "graph_capture_instantiate_10",
        format!(
            "capture {TEN} kernels + instantiate + destroy (raw: cuStreamBeginCapture, {TEN} cuLaunchKernel, cuStreamEndCapture, cuGraphInstantiate, the two destroys)"
        ),
        Target::None,
        case(
            iters,
            || {
                let (g, e) = raw.capture(f, r2, TEN);
                raw.destroy(g, e);
            },
            || drop(safe_capture(&mut cs, &raw, f, TEN)),
        )
        .peer(fx.cudarc().map(|c| {
            move || {
                let begun = c.s2.begin_capture(CUDARC_THREAD_LOCAL);
                must_cudarc(begun, "CudaStream::begin_capture");
                for _ in 0..TEN {
                    raw.empty(f, c.s2.cu_stream().cast());
                }
                let g = c.s2.end_capture(CUDARC_NO_FLAGS);
                drop(must_cudarc(g, "CudaStream::end_capture"));
            }
        }))
        .run(cfg),
    );

    // 100 small kernels: enqueued one by one (the raw column) against one graph launch of the
    // same kernels (the cuda-stream column), each followed by a synchronize.
    let many = safe_capture(&mut cs, &raw, f, MANY);
    rows.add(
        "graph_vs_stream_100_kernels",
        format!(
            "{MANY} empty kernels + synchronize: one GraphExec::launch (cuda-stream) vs {MANY} cuLaunchKernel (raw); ratio < 1 is the graph's speedup"
        ),
        Target::None,
        case(
            iters,
            || {
                for _ in 0..MANY {
                    raw.empty(f, r1);
                }
                fx.sync_raw(r1);
            },
            || {
                must(many.launch(s1), "GraphExec::launch");
                must(s1.synchronize(), "Stream::synchronize");
            },
        )
        .no_peer("the row compares a graph with its own kernels enqueued one by one")
        .run(cfg),
    );
    drop((exec, many, cs));
    Ok(())
}
