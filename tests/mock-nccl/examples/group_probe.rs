//! `group_probe`: the host path of one NCCL group of two in-place all-reduces (devices 0 and 1
//! of the test driver, the fake NCCL), raw or through `cuda_stream::nccl::Group`, ITERS times in
//! `measured_loop`, for instruction counts under callgrind: the difference between the two is
//! cuda-stream's own work per group (the fake's and the mock's costs are nothing like NCCL's and
//! libcuda's, but the two sides make the same calls of theirs but for the safe side's checks).
//!
//! `raw-calls ITERS` and `safe-calls ITERS` print the driver's and NCCL's calls per group;
//! `time ITERS` times batches of both sides, alternating, and prints the medians.
//!
//! With `GROUP_PROBE_EVICT=BYTES` each group is followed by a walk over a buffer of that many
//! bytes (one byte of every 64, or of every `GROUP_PROBE_STRIDE`: 4096 walks pages, to empty the
//! TLB rather than the caches), as NCCL's own host work (some 20 us a group on the GPU machine) evicts what the crate
//! touched: under cachegrind's cache simulation the misses per group are then the cold lines
//! (data and code) each side pays.
//!
//! ```sh
//! cargo build --release -p cuda-mock-nccl --example group_probe -p cuda-mock-driver
//! valgrind --tool=callgrind --toggle-collect=group_probe::measured_loop \
//!     target/release/examples/group_probe safe 2000
//! GROUP_PROBE_EVICT=$((8 << 20)) valgrind --tool=cachegrind --cache-sim=yes \
//!     target/release/examples/group_probe safe 200
//! ```

use std::hint::black_box;

use cuda_mock_driver::MockDriver;
use cuda_mock_nccl::{MockNccl, mock_nccl_path};
use cuda_stream::ffi::nccl::{Nccl, ncclDataType_t, ncclRedOp_t};
use cuda_stream::nccl::{Communicator, Group, ReduceOp};
use cuda_stream::{Context, DeviceBuffer, OwnedStream};

/// The calls `raw-calls` and `safe-calls` count.
const CALLS: &[&str] = &[
    "cuCtxGetCurrent",
    "cuCtxPushCurrent_v2",
    "cuCtxPopCurrent_v2",
    "cuCtxSetCurrent",
    "cuStreamIsCapturing",
    "cuStreamGetCaptureInfo_v3",
    "cuEventRecord",
    "cuEventRecordWithFlags",
    "cuStreamWaitEvent",
    "cuEventQuery",
    "cuEventCreate",
    "cuStreamQuery",
    "ncclCommGetAsyncError",
    "ncclGroupStart",
    "ncclGroupEnd",
    "ncclAllReduce",
];

#[inline(never)]
fn measured_loop(n: usize, f: &mut dyn FnMut()) {
    for _ in 0..n {
        f();
    }
}

/// Reads and writes one byte of every cache line of `buf`, so that what a group touched is
/// out of the caches before the next.
#[inline(never)]
fn evict(buf: &mut [u8]) {
    static STRIDE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    let stride = *STRIDE.get_or_init(|| {
        std::env::var("GROUP_PROBE_STRIDE")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(64)
    });
    for b in buf.iter_mut().step_by(stride) {
        *b = black_box(*b).wrapping_add(1);
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let case = args.get(1).map_or("safe", String::as_str);
    let iters: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(1000);
    let m = MockDriver::global();
    let path = mock_nccl_path();
    // SAFETY: the fake NCCL, built with this workspace.
    let nccl = unsafe { Nccl::open(&path) }.expect("the fake NCCL opens");
    Nccl::install_global(nccl).expect("nothing loaded NCCL before");
    // SAFETY: as above.
    let fake = unsafe { MockNccl::open(&path) }.expect("its control functions resolve");
    assert!(fake.use_driver(m.path()));
    let ctxs = [Context::primary(0).unwrap(), Context::primary(1).unwrap()];
    // The first rank's context current, as NCCL leaves it in the benchmark's process.
    let _current = ctxs[0].bind().unwrap();
    let comms = Communicator::init_all(&[ctxs[0].device(), ctxs[1].device()]).unwrap();
    let streams: Vec<OwnedStream> = ctxs.iter().map(|c| c.new_stream().unwrap()).collect();
    let raw_streams: Vec<OwnedStream> = ctxs.iter().map(|c| c.new_stream().unwrap()).collect();
    let mut bufs: Vec<DeviceBuffer<f32>> = ctxs
        .iter()
        .zip(&streams)
        .map(|(c, s)| DeviceBuffer::<f32>::zeroed(c, s, 1 << 18).unwrap())
        .collect();
    let nccl = Nccl::global().unwrap();
    let all_reduce = nccl.ncclAllReduce().unwrap();
    let start = nccl.ncclGroupStart().unwrap();
    let end = nccl.ncclGroupEnd().unwrap();
    let ptrs: Vec<u64> = bufs.iter().map(DeviceBuffer::device_ptr).collect();
    let raws: Vec<_> = comms.iter().map(Communicator::raw).collect();
    let sraw: Vec<_> = raw_streams.iter().map(OwnedStream::raw).collect();
    let mut raw = || {
        // SAFETY: each buffer holds 2^18 f32 on its rank's device, alive for the loop; each
        // stream is of its rank's context.
        unsafe {
            start();
            for i in 0..2 {
                let p = ptrs[i] as *mut std::ffi::c_void;
                all_reduce(
                    p,
                    p,
                    1 << 18,
                    ncclDataType_t::ncclFloat32,
                    ncclRedOp_t::ncclSum,
                    raws[i],
                    sraw[i],
                );
            }
            black_box(end());
        }
    };
    let mut safe = || {
        let mut g = Group::new();
        for ((c, s), b) in comms.iter().zip(&streams).zip(bufs.iter_mut()) {
            g.all_reduce_in_place(c, s, b, ReduceOp::Sum).unwrap();
        }
        g.run().unwrap();
    };
    let evict_bytes: usize = std::env::var("GROUP_PROBE_EVICT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    if case == "time" {
        // Batches of ITERS groups, the two sides alternating, each group followed by the walk
        // (if asked for): the median over 30 pairs of each side's ns per group, and of the
        // differences.
        let mut buf = vec![0u8; evict_bytes];
        let batch = |f: &mut dyn FnMut(), buf: &mut [u8]| {
            let t = std::time::Instant::now();
            for _ in 0..iters {
                f();
                evict(buf);
            }
            t.elapsed().as_nanos() as f64 / iters as f64
        };
        let (mut r, mut s, mut d) = (Vec::new(), Vec::new(), Vec::new());
        for rep in 0..31 {
            let (a, b) = if rep % 2 == 0 {
                let a = batch(&mut raw, &mut buf);
                (a, batch(&mut safe, &mut buf))
            } else {
                let b = batch(&mut safe, &mut buf);
                (batch(&mut raw, &mut buf), b)
            };
            if rep > 0 {
                r.push(a);
                s.push(b);
                d.push(b - a);
            }
        }
        let median = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        println!(
            "ns per group (with the walk): raw {:.0}, safe {:.0}, safe - raw {:.0}",
            median(&mut r),
            median(&mut s),
            median(&mut d)
        );
        for s in streams.iter().chain(&raw_streams) {
            s.synchronize().unwrap();
        }
        return;
    }
    let f: &mut dyn FnMut() = if case.starts_with("raw") {
        &mut raw
    } else {
        &mut safe
    };
    f();
    m.reset();
    fake.reset();
    if evict_bytes > 0 {
        let mut buf = vec![0u8; evict_bytes];
        let mut f = || {
            f();
            evict(&mut buf);
        };
        measured_loop(iters, &mut f);
    } else {
        measured_loop(iters, f);
    }
    if case.ends_with("-calls") {
        // The driver's and NCCL's calls per group, of those either side makes.
        for name in CALLS {
            let n = m.calls(name) + fake.calls(name);
            if n > 0 {
                println!("{name}: {:.2} per group", n as f64 / iters as f64);
            }
        }
    }
    for s in streams.iter().chain(&raw_streams) {
        s.synchronize().unwrap();
    }
}
