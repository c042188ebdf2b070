//! Fault cases of several devices: peer queries, enabling peer access, and peer copies both ways
//! (uses tracked on both devices; device 1 has no memory pools), plain and in a capture; a
//! pool's access granted and read back; a kernel of device 1 on a buffer of device 0's pool.

use cuda_stream::{CaptureMode, DeviceBuffer, LaunchConfig, MemPool, Module, PoolAccess};

use crate::harness::capture::then_graph_frees;
use crate::harness::fixture::{Op, PTX, op, op_frees};
use crate::harness::swallowed::{
    SWALLOW_DROP, SWALLOW_PLAIN_FREE, SWALLOW_POOL_DROP, SWALLOW_POOL_MODULE_DROP,
};

/// A capture with a buffer of device 1 (no memory pools) that the graph holds: the graph's
/// frees ([`SWALLOW_GRAPH_FREES`]) and the polls of the plain free's events (`cuEventQuery`,
/// whose number depends on timing, as do the host's waits before the capture records the copy).
const SWALLOW_GRAPH_PLAIN_FREES: &[&str] = &[
    "cuCtxPopCurrent",
    "cuStreamDestroy",
    "cuEventDestroy",
    "cuDevicePrimaryCtxRelease",
    "cuGraphDestroy",
    "cuGraphExecDestroy",
    "cuThreadExchangeStreamCaptureMode",
    "cuCtxGetCurrent",
    "cuCtxPushCurrent",
    "cuCtxSynchronize",
    "cuMemFree",
    "cuMemFreeAsync",
    "cuEventCreate",
    "cuEventRecord",
    "cuStreamWaitEvent",
    "cuEventQuery",
];

pub(crate) fn ops() -> Vec<Op> {
    vec![
        op("Device::can_access_peer", SWALLOW_DROP, |fx| {
            let (d0, d1) = (fx.ctx.device(), fx.ctx1.device());
            assert!(d0.can_access_peer(d1)?, "two mock devices are peers");
            assert!(!d0.can_access_peer(d0)?, "a device is not its own peer");
            Ok(())
        }),
        op("Context::enable_peer_access, twice", SWALLOW_DROP, |fx| {
            fx.ctx.enable_peer_access(&fx.ctx1)?;
            fx.ctx.enable_peer_access(&fx.ctx1)
        }),
        op_frees(
            "DeviceBuffer::copy_from_peer both ways, on either device's stream",
            SWALLOW_PLAIN_FREE,
            |fx| {
                let s0 = fx.ctx.new_stream()?;
                let s1 = fx.ctx1.new_stream()?;
                let a = DeviceBuffer::<u32>::zeroed(&fx.ctx, &s0, 16)?;
                a.fill(&s0, 5)?;
                let b = DeviceBuffer::<u32>::alloc_on(&fx.ctx1, &s1, 16)?;
                b.copy_from_peer(&s1, &a)?; // on device 1: waits for the fill on device 0
                let c = DeviceBuffer::<u32>::alloc_on(&fx.ctx, &s0, 16)?;
                c.copy_from_peer(&s1, &b)?; // device 1's stream writes device 0's buffer
                assert_eq!(c.to_vec(&s0)?, [5; 16]);
                // Device 0's frees reported (device 1's buffer is freed once its uses complete).
                a.free()?;
                c.free()
            },
        ),
        Op {
            varying: &["cuEventQuery"],
            ..op_frees(
                "DeviceBuffer::copy_from_peer in a capture; the graph replays it",
                SWALLOW_GRAPH_PLAIN_FREES,
                |fx| {
                    then_graph_frees(|| {
                        let mut s = fx.pool.acquire()?;
                        let a = DeviceBuffer::<u32>::zeroed(&fx.ctx, &s, 8)?;
                        let s1 = fx.ctx1.new_stream()?;
                        let b = DeviceBuffer::<u32>::zeroed(&fx.ctx1, &s1, 8)?;
                        b.fill(&s1, 9)?;
                        let graph =
                            s.capture(CaptureMode::ThreadLocal, |cap| a.copy_from_peer(&cap, &b))?;
                        drop(b);
                        let exec = graph.instantiate()?;
                        drop(graph);
                        exec.launch(&s)?;
                        assert_eq!(a.to_vec(&s)?, [9; 8]);
                        Ok(())
                    })
                },
            )
        },
        op("MemPool::set_access + access", SWALLOW_POOL_DROP, |fx| {
            let pool = MemPool::new(&fx.ctx)?;
            let d1 = fx.ctx1.device();
            pool.set_access(d1, PoolAccess::Read)?;
            assert_eq!(pool.access(d1)?, PoolAccess::Read);
            pool.set_access(d1, PoolAccess::None)?;
            assert_eq!(pool.access(d1)?, PoolAccess::None);
            Ok(())
        }),
        op_frees(
            "a typed kernel of device 1 reading a buffer of device 0's pool",
            SWALLOW_POOL_MODULE_DROP,
            |fx| {
                let pool = MemPool::new(&fx.ctx)?;
                pool.set_access(fx.ctx1.device(), PoolAccess::ReadWrite)?;
                let s0 = fx.ctx.new_stream()?;
                let s1 = fx.ctx1.new_stream()?;
                let mut x = DeviceBuffer::<u32>::alloc_in(&pool, &s0, 4)?;
                x.fill(&s0, 3)?;
                let module = Module::from_ptx(&fx.ctx1, PTX)?;
                let scale = module
                    .function("scale")?
                    .typed::<(&mut DeviceBuffer<u32>, u32)>()?;
                // SAFETY: the mock runs no code for `scale`.
                unsafe { scale.launch(&s1, LaunchConfig::new(1, 1), (&mut x, 4)) }?;
                assert_eq!(x.to_vec(&s0)?, [3; 4]);
                x.free()
            },
        ),
    ]
}
