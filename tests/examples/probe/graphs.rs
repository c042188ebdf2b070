//! Graph cases: capture and replay with every step printed, the launch cost of a graph holding
//! user objects, and the capture status after kernels in each capture mode.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use cuda_stream::CaptureMode;

use crate::{Case, Fixture};

impl Fixture {
    /// Runs a graph case `c`; false if `c` is not one.
    #[inline(always)]
    pub(crate) fn graphs(&self, c: &Case<'_>) -> bool {
        let Case {
            name, iters, us, ..
        } = *c;
        match name {
            "capture-graph" => {
                use std::io::Write;
                let step = |what: &str| {
                    println!("capture-graph: {what}");
                    let _ = std::io::stdout().flush();
                };
                let replays = us.unwrap_or(10);
                let k = self.kernels();
                let buf = cuda_stream_tests::DeviceBuffer::new(&self.ctx, 1024);
                let p = buf.ptr();
                let ran = Arc::new(AtomicU64::new(0));
                for _ in 0..iters {
                    let mut st = self.ctx.new_stream().expect("a stream");
                    let seen = ran.clone();
                    let graph = st
                        .capture(CaptureMode::ThreadLocal, |cap| {
                            // SAFETY: `buf` holds 1024 u32 and outlives the graph's launches.
                            unsafe { cuda_stream::memset_d32_async(&cap, p, 0, 1024) }?;
                            step(&format!("memset captured: {:?}", cap.status()));
                            cap.scope(|sc| {
                                let (a, b) = (sc.fork()?, sc.fork()?);
                                k.store(a, p, 1);
                                k.store(b, p + 4, 2);
                                Ok(())
                            })?;
                            step(&format!("forks joined: {:?}", cap.status()));
                            // SAFETY: as above: both halves inside `buf`.
                            unsafe { cuda_stream::memcpy_dtod_async(&cap, p + 2048, p, 2048) }?;
                            step(&format!("copy captured: {:?}", cap.status()));
                            cap.launch_host_func(move || {
                                seen.fetch_add(1, Ordering::Relaxed);
                            })?;
                            step(&format!("host function captured: {:?}", cap.status()));
                            Ok(())
                        })
                        .expect("capture");
                    step(&format!(
                        "captured, {} nodes",
                        graph.node_count().expect("nodes")
                    ));
                    let exec = graph.instantiate().expect("instantiate");
                    step("instantiated");
                    for r in 0..replays {
                        exec.launch(&st).expect("launch");
                        if r < 3 {
                            st.synchronize().expect("synchronize");
                            step(&format!("replay {r} done"));
                        }
                    }
                    st.synchronize().expect("synchronize");
                    step(&format!(
                        "{replays} replays done; the host function ran {} times",
                        ran.load(Ordering::Relaxed)
                    ));
                    drop(exec);
                    drop(graph);
                    step("graph dropped");
                }
            }
            "graph-user-objects" => {
                let k = self.kernels();
                let ties = us.unwrap_or(0);
                let buf = cuda_stream_tests::DeviceBuffer::new(&self.ctx, 16);
                let p = buf.ptr();
                let mut st = self.ctx.new_stream().expect("a stream");
                let graph = st
                    .capture(CaptureMode::ThreadLocal, |cap| {
                        k.store(cap, p, 1);
                        for i in 0..ties {
                            cap.keep_alive(Arc::new(i))?;
                        }
                        Ok(())
                    })
                    .expect("capture");
                let exec = graph.instantiate().expect("instantiate");
                for _ in 0..iters {
                    exec.launch(&st).expect("launch");
                    st.synchronize().expect("synchronize");
                    let t = Instant::now();
                    for _ in 0..1000 {
                        exec.launch(&st).expect("launch");
                    }
                    let enqueue = t.elapsed();
                    st.synchronize().expect("synchronize");
                    let all = t.elapsed();
                    println!(
                        "graph-user-objects {ties}: 1000 launches: {:.2} us each to enqueue, \
                     {:.2} us each until done",
                        enqueue.as_secs_f64() * 1e3,
                        all.as_secs_f64() * 1e3
                    );
                }
            }
            "capture-kernels" => {
                let k = self.kernels();
                let buf = cuda_stream_tests::DeviceBuffer::new(&self.ctx, 16);
                let p = buf.ptr();
                for _ in 0..iters {
                    for mode in [
                        CaptureMode::Global,
                        CaptureMode::ThreadLocal,
                        CaptureMode::Relaxed,
                    ] {
                        for forks in [false, true] {
                            let mut st = self.ctx.new_stream().expect("a stream");
                            let mut steps = Vec::new();
                            let got = st.capture(mode, |cap| {
                                k.store(cap, p, 1);
                                steps.push(format!("kernel: {:?}", cap.status()));
                                if forks {
                                    cap.scope(|sc| {
                                        let (a, b) = (sc.fork()?, sc.fork()?);
                                        steps.push(format!("forked: {:?}", cap.status()));
                                        k.store(a, p + 4, 2);
                                        steps.push(format!("kernel on a: {:?}", cap.status()));
                                        k.store(b, p + 8, 3);
                                        steps.push(format!("kernel on b: {:?}", cap.status()));
                                        Ok(())
                                    })?;
                                    steps.push(format!("joined: {:?}", cap.status()));
                                }
                                Ok(())
                            });
                            let what = if forks {
                                "a kernel, 2 forks with a kernel each"
                            } else {
                                "one kernel"
                            };
                            match got {
                                Ok(g) => println!(
                                    "capture-kernels {mode:?}, {what}: ok, {} nodes [{}]",
                                    g.node_count().unwrap_or(0),
                                    steps.join("; ")
                                ),
                                Err(e) => println!(
                                    "capture-kernels {mode:?}, {what}: FAILED {e} [{}]",
                                    steps.join("; ")
                                ),
                            }
                        }
                    }
                }
            }
            _ => return false,
        }
        true
    }
}
