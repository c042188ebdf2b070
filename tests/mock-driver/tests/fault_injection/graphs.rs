//! Fault cases of graphs and executable graphs: instantiation with options, upload, update,
//! the DOT dump, `close`, raw handles.

use cuda_stream::ffi;
use cuda_stream::{AsStream, CaptureMode, Error, Graph, InstantiateOptions};

use crate::harness::capture::{one_host_fn, with_probes};
use crate::harness::fixture::{Op, op};
use crate::harness::swallowed::{SWALLOW_CLOSE_GRAPH, SWALLOW_GRAPH};

/// Graphs and executable graphs.
pub(crate) fn ops() -> Vec<Op> {
    vec![
        op(
            "GraphExec::update from a graph of the same shape",
            SWALLOW_GRAPH,
            |fx| {
                with_probes(|p| {
                    let mut s = fx.pool.acquire()?;
                    let first = one_host_fn(&mut s, p)?;
                    let second = one_host_fn(&mut s, p)?;
                    let mut exec = first.instantiate()?;
                    drop(first);
                    exec.launch(&s)?;
                    exec.update(&second)?;
                    drop(second);
                    exec.launch(&s)?;
                    s.synchronize()?;
                    assert_eq!(p.ran(), 2);
                    Ok(())
                })
            },
        ),
        op(
            "GraphExec::update from a graph of another shape is refused",
            SWALLOW_GRAPH,
            |fx| {
                with_probes(|p| {
                    let mut s = fx.pool.acquire()?;
                    let one = one_host_fn(&mut s, p)?;
                    let two = s.capture(CaptureMode::ThreadLocal, |cap| {
                        cap.launch_host_func(p.host_fn())?;
                        cap.launch_host_func(p.host_fn())
                    })?;
                    let mut exec = one.instantiate()?;
                    match exec.update(&two) {
                        Err(Error::GraphUpdate { result, .. }) => assert_eq!(
                            result,
                            ffi::CUgraphExecUpdateResult::CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED
                        ),
                        other => return other,
                    }
                    exec.launch(&s)?;
                    s.synchronize()?;
                    assert_eq!(p.ran(), 1, "the refused update left the old work");
                    Ok(())
                })
            },
        ),
        op(
            "Graph::instantiate_with(auto free, node priority) + GraphExec::upload",
            SWALLOW_GRAPH,
            |fx| {
                with_probes(|p| {
                    let mut s = fx.pool.acquire()?;
                    let graph = one_host_fn(&mut s, p)?;
                    let options = InstantiateOptions::new()
                        .auto_free_on_launch(true)
                        .use_node_priority(true);
                    let exec = graph.instantiate_with(options)?;
                    exec.upload(&s)?;
                    exec.launch(&s)?;
                    s.synchronize()?;
                    assert_eq!(p.ran(), 1);
                    Ok(())
                })
            },
        ),
        op("Graph::instantiate_with(upload)", SWALLOW_GRAPH, |fx| {
            with_probes(|p| {
                let mut s = fx.pool.acquire()?;
                let graph = one_host_fn(&mut s, p)?;
                let exec =
                    graph.instantiate_with(InstantiateOptions::new().upload(s.as_stream()))?;
                exec.launch(&s)?;
                s.synchronize()?;
                assert_eq!(p.ran(), 1);
                Ok(())
            })
        }),
        op("Graph::debug_dot", SWALLOW_GRAPH, |fx| {
            with_probes(|p| {
                let mut s = fx.pool.acquire()?;
                let graph = one_host_fn(&mut s, p)?;
                let path = std::env::temp_dir().join(format!(
                    "cuda-mock-graph-{}-{:?}.dot",
                    std::process::id(),
                    std::thread::current().id()
                ));
                let r = graph.debug_dot(&path);
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                let _ = std::fs::remove_file(&path);
                r?;
                assert!(text.starts_with("digraph"), "{text}");
                Ok(())
            })
        }),
        op(
            "Graph::close + GraphExec::close",
            SWALLOW_CLOSE_GRAPH,
            |fx| {
                with_probes(|p| {
                    let mut s = fx.pool.acquire()?;
                    let graph = one_host_fn(&mut s, p)?;
                    let exec = graph.instantiate()?;
                    graph.close()?;
                    exec.launch(&s)?;
                    exec.close()?;
                    s.synchronize()?;
                    assert_eq!(p.ran(), 1);
                    Ok(())
                })
            },
        ),
        op("Graph::into_raw + from_raw", SWALLOW_GRAPH, |fx| {
            with_probes(|p| {
                let mut s = fx.pool.acquire()?;
                let raw = one_host_fn(&mut s, p)?.into_raw();
                // SAFETY: handed over by `into_raw`; its work is of `fx.ctx`.
                let graph = unsafe { Graph::from_raw(raw, &fx.ctx) }?;
                graph.instantiate()?.launch(&s)?;
                s.synchronize()?;
                assert_eq!(p.ran(), 1);
                Ok(())
            })
        }),
    ]
}
