//! The main example: real work on device 0. A SAXPY kernel that ships as PTX text (the driver
//! compiles it; no CUDA toolkit) runs over 32 Mi floats (past the L2 cache) on two streams of
//! different priorities: the data goes up and comes back through pinned memory with safe
//! asynchronous copies, the buffers order their uses across the streams themselves (no event by
//! hand), kernels are timed by events, and every result is checked on the host. Then the same work runs 100
//! times enqueued directly, and is captured once into a graph and replayed 100 times: both are
//! timed per iteration and checked. Then host functions run in order, a current-stream guard
//! names a stream for other libraries, and a fork/join scope with pooled streams splits the work
//! in two.
//!
//! ```sh
//! cargo run --release -p cuda-stream --example streams [-- --elements N --replays R]
//! ```
//!
//! Without an NVIDIA driver it says so and exits with status 2.

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use cuda_stream::{
    AsStream, CaptureMode, Device, DeviceBuffer, Enqueue, Error, EventOptions, LaunchConfig,
    Module, OwnedStream, PinnedHostBuffer, StreamOptions, StreamPool, TypedKernel, current_stream,
    memset_d32_async,
};

/// `saxpy` with its arguments declared (and checked against its PTX parameters once): over
/// whole buffers, whose uses the launch orders and records, and over raw device addresses.
#[derive(Clone, Copy)]
struct Saxpy<'m> {
    buffers: TypedKernel<
        'm,
        (
            u32,
            f32,
            &'static DeviceBuffer<f32>,
            &'static mut DeviceBuffer<f32>,
        ),
    >,
    addresses: TypedKernel<'m, (u32, f32, u64, u64)>,
}

/// `y[i] = a * x[i] + y[i]` for `i < n`, one thread per element.
const SAXPY_PTX: &str = r#"
.version 7.0
.target sm_50
.address_size 64

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
"#;

/// Elements per vector unless `--elements` says otherwise: 32 Mi floats, 128 MiB each, so that
/// a SAXPY's 384 MiB of traffic is well past the L2 cache (50 MB on an H100) and its bandwidth
/// is the device memory's.
const DEFAULT_ELEMENTS: usize = 1 << 25;
/// Graph replays (and direct iterations) timed unless `--replays` says otherwise.
const DEFAULT_REPLAYS: usize = 100;

/// What the command line asks for.
struct Args {
    elements: usize,
    replays: usize,
}

impl Args {
    /// `[--elements N] [--replays R]`.
    fn parse() -> Result<Args, String> {
        let mut args = Args {
            elements: DEFAULT_ELEMENTS,
            replays: DEFAULT_REPLAYS,
        };
        let mut it = std::env::args().skip(1);
        while let Some(flag) = it.next() {
            let value = |it: &mut dyn Iterator<Item = String>| -> Result<usize, String> {
                let v = it.next().ok_or(format!("{flag} needs a number"))?;
                match v.parse::<usize>() {
                    Ok(n) if n > 0 => Ok(n),
                    _ => Err(format!("{flag} {v}: not a positive number")),
                }
            };
            match flag.as_str() {
                "--elements" => args.elements = value(&mut it)?,
                "--replays" => args.replays = value(&mut it)?,
                _ => return Err(format!("unknown argument {flag}")),
            }
        }
        if args.elements > u32::MAX as usize {
            return Err(format!("--elements {}: at most 2^32 - 1", args.elements));
        }
        Ok(args)
    }
}

fn main() -> ExitCode {
    let args = match Args::parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}\nusage: streams [--elements N] [--replays R]");
            return ExitCode::FAILURE;
        }
    };
    match run(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(Error::Load(e)) => {
            eprintln!("no CUDA driver found: {e}");
            eprintln!("this example needs an NVIDIA GPU and its driver (libcuda)");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("error: {e}");
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                eprintln!("  caused by: {s}");
                source = s.source();
            }
            ExitCode::FAILURE
        }
    }
}

/// Enqueues `y = a * x + y` over whole buffers on `stream`. The buffers are passed as
/// `x.read()` and `y.write()`: the launch waits for the uses it conflicts with on other streams
/// (the last write of `x`, every use of `y`) and records its own, so no event is written here.
fn saxpy(
    stream: &impl Enqueue,
    kernel: &Saxpy<'_>,
    a: f32,
    x: &DeviceBuffer<f32>,
    y: &mut DeviceBuffer<f32>,
) -> cuda_stream::Result<()> {
    let n = u32::try_from(y.len()).expect("fewer than 2^32 elements");
    assert_eq!(x.len(), y.len());
    let config = LaunchConfig::for_elements(n, 256);
    // SAFETY: `saxpy` reads x[..n] and writes y[..n] only, and both buffers hold `n` floats.
    unsafe { kernel.buffers.launch(stream, config, (n, a, x, y)) }
}

/// Enqueues `y[..n] = a * x[..n] + y[..n]` on `stream` from raw device addresses: for parts of
/// buffers, and for captures whose buffers outlive the graph by construction (see
/// `direct_then_graph`). Not recorded as uses: the caller orders it.
///
/// # Safety
///
/// `x` and `y` are device addresses of at least `n` floats in the kernel's context that stay
/// allocated until the work has run (and for every launch of a graph it is captured into), and
/// nothing else writes them meanwhile.
unsafe fn saxpy_raw(
    stream: &impl Enqueue,
    kernel: &Saxpy<'_>,
    n: usize,
    a: f32,
    x: u64,
    y: u64,
) -> cuda_stream::Result<()> {
    let n = u32::try_from(n).expect("fewer than 2^32 elements");
    let config = LaunchConfig::for_elements(n, 256);
    // SAFETY: `saxpy` touches x[..n] and y[..n], which the caller keeps allocated.
    unsafe { kernel.addresses.launch(stream, config, (n, a, x, y)) }
}

/// The device memory's peak bandwidth in GB/s, from its clock and bus width (double data rate),
/// where the driver says them.
fn memory_bandwidth_limit(device: Device) -> Option<f64> {
    use cuda_stream::ffi::CUdevice_attribute as A;
    let khz = device
        .attribute(A::CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE)
        .ok()?;
    let bits = device
        .attribute(A::CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH)
        .ok()?;
    (khz > 0 && bits > 0).then(|| 2.0 * f64::from(khz) * 1e3 * f64::from(bits) / 8.0 / 1e9)
}

/// Bytes moved per second by a SAXPY over `n` floats (two reads and a write each).
fn gb_per_s(n: usize, t: Duration) -> f64 {
    (3 * 4 * n) as f64 / t.as_secs_f64() / 1e9
}

/// Counts the results that differ from `expected(i)`, and says so.
fn wrong_results(what: &str, got: &[f32], expected: impl Fn(usize) -> f32) -> usize {
    let wrong = (0..got.len()).filter(|&i| got[i] != expected(i)).count();
    if wrong > 0 {
        eprintln!("{what}: {wrong} of {} results are wrong", got.len());
    }
    wrong
}

/// One iteration of the two-stream work, enqueued directly: `low` sets `y` to 1, `high`
/// computes `y = 2x + y`, `low` computes `y = -x + y`. The cross-stream waits are the buffers'
/// use tracking's: `high`'s kernel waits for `low`'s fill, `low`'s kernel for `high`'s.
fn direct_iteration(
    high: &OwnedStream,
    low: &OwnedStream,
    kernel: &Saxpy<'_>,
    x: &DeviceBuffer<f32>,
    y: &mut DeviceBuffer<f32>,
) -> cuda_stream::Result<()> {
    y.fill(low, 1.0)?;
    saxpy(high, kernel, 2.0, x, y)?;
    saxpy(low, kernel, -1.0, x, y)
}

/// Enqueues `iterations` times with `enqueue`, timing the work on `low` (where every iteration
/// ends) by events and the enqueueing by the host's clock; both per iteration.
fn per_iteration(
    low: &OwnedStream,
    iterations: usize,
    mut enqueue: impl FnMut() -> cuda_stream::Result<()>,
) -> cuda_stream::Result<(Duration, Duration)> {
    let timed = EventOptions::new().timing(true);
    let start = low.record_event_with(timed)?;
    let host = Instant::now();
    for _ in 0..iterations {
        enqueue()?;
    }
    let host = host.elapsed();
    let end = low.record_event_with(timed)?;
    end.synchronize()?;
    let gpu = end.elapsed_since(&start)?;
    let per = |t: Duration| t / u32::try_from(iterations).unwrap_or(u32::MAX);
    Ok((per(gpu), per(host)))
}

/// The two-stream work `args.replays` times enqueued directly, then captured once into a graph
/// (the memset, a fork for `high`'s kernel, `low`'s kernel after the join) and replayed as many
/// times; prints both timings and checks both results. `Ok(false)` if a result was wrong.
fn direct_then_graph(
    args: &Args,
    high: &OwnedStream,
    low: &mut OwnedStream,
    kernel: &Saxpy<'_>,
    host_x: &[f32],
    x: &DeviceBuffer<f32>,
    y: &mut DeviceBuffer<f32>,
) -> cuda_stream::Result<bool> {
    let (n, iterations) = (y.len(), args.replays);
    let us = |t: Duration| t.as_secs_f64() * 1e6;

    let (direct_gpu, direct_host) = per_iteration(low, iterations, || {
        direct_iteration(high, low, kernel, x, &mut *y)
    })?;
    if wrong_results("direct", &y.to_vec(&*low)?, |i| host_x[i] + 1.0) > 0 {
        return Ok(false);
    }
    println!(
        "direct: {iterations} iterations (a memset, 2 kernels, 2 cross-stream waits): \
         {:.1} us per iteration on the GPU, {:.1} us to enqueue",
        us(direct_gpu),
        us(direct_host)
    );

    // Captured on `low`; a fork of the capture plays `high`'s part (its scope joins it back
    // before `low`'s kernel). The capture records the work, it runs nothing.
    let graph = low.capture(CaptureMode::ThreadLocal, |cap| {
        // `y.fill(&cap, 1.0)` and `x.keep_alive_in(&cap)` would tie the buffers to the graph
        // (safe whatever outlives what), but a graph holding driver user objects costs about
        // 2 us more per launch (H100, driver 580: 3.8 us instead of 1.4-2.1 us, probe
        // `graph-user-objects`). Here the buffers outlive the executable graph by construction,
        // so the raw memset is used.
        // SAFETY: `y` holds `n` floats and outlives every launch of the graph (`exec` is
        // dropped first, and `y`'s free is ordered after its last recorded use, on `low`,
        // where the replays run).
        unsafe { memset_d32_async(&cap, y.device_ptr(), 1f32.to_bits(), n) }?;
        cap.scope(|s| {
            let side = s.fork()?;
            // SAFETY: as above, for `x` and `y`.
            unsafe { saxpy_raw(&side, kernel, n, 2.0, x.device_ptr(), y.device_ptr()) }
        })?;
        // SAFETY: as above.
        unsafe { saxpy_raw(&cap, kernel, n, -1.0, x.device_ptr(), y.device_ptr()) }
    });
    let graph = match graph {
        Ok(g) => g,
        Err(e @ Error::Unsupported { .. }) => {
            println!("graph: skipped, this driver cannot capture ({e})");
            return Ok(true);
        }
        Err(e) => return Err(e),
    };
    let exec = graph.instantiate()?;
    y.fill(&*low, 0.0)?; // so that only the replays can produce the expected values
    let (graph_gpu, graph_host) = per_iteration(low, iterations, || exec.launch(&*low))?;
    if wrong_results("graph", &y.to_vec(&*low)?, |i| host_x[i] + 1.0) > 0 {
        return Ok(false);
    }
    println!(
        "graph: {iterations} replays of the same work captured once ({} nodes): {:.1} us per \
         iteration on the GPU, {:.1} us to enqueue; all {n} results checked",
        graph.node_count()?,
        us(graph_gpu),
        us(graph_host)
    );
    println!(
        "graph replay vs direct, per iteration: {:.2}x on the GPU, {:.2}x to enqueue",
        direct_gpu.as_secs_f64() / graph_gpu.as_secs_f64().max(1e-12),
        direct_host.as_secs_f64() / graph_host.as_secs_f64().max(1e-12)
    );
    Ok(true)
}

/// Runs everything; `Ok(false)` if a result was wrong.
fn run(args: &Args) -> cuda_stream::Result<bool> {
    let n = args.elements;
    let count = Device::count()?;
    let version = cuda_stream::driver_version()?;
    println!(
        "CUDA driver {} with {count} device(s)",
        cuda_stream::ffi::format_version(version)
    );
    if count == 0 {
        println!("no CUDA device: nothing to run");
        return Ok(true);
    }
    let device = Device::new(0)?;
    let ctx = device.primary_context()?;
    let range = ctx.priority_range()?;
    println!("device 0: {}, stream priorities {range}", device.name()?);

    // Two streams: `high` is scheduled ahead of `low` when both have work ready.
    let high = ctx.new_stream_with(StreamOptions::new().priority(range.greatest()))?;
    let low = ctx.new_stream_with(StreamOptions::new().priority(range.least()))?;
    println!(
        "streams: high priority {}, low priority {}",
        high.priority()?,
        low.priority()?
    );

    let module = Module::from_ptx(&ctx, SAXPY_PTX)?;
    let function = module.function("saxpy")?;
    println!(
        "saxpy JIT-compiled from PTX for sm_{}: {} registers, up to {} threads a block",
        function.binary_version()?,
        function.registers()?,
        function.max_threads_per_block()
    );
    let kernel = Saxpy {
        buffers: function.typed()?,
        addresses: function.typed()?,
    };

    // `low` uploads x from pinned memory and sets y to 1; `high` computes y = 2x + y; `low`
    // computes y = -x + y. The buffers order their uses across the streams themselves; the
    // explicit waits below only keep each timed interval to its kernel.
    let host_x: Vec<f32> = (0..n).map(|i| (i % 4096) as f32).collect();
    let pinned_x = PinnedHostBuffer::from_slice(&ctx, &host_x)?;
    let x = DeviceBuffer::<f32>::alloc_on(&ctx, &low, n)?;
    x.copy_from_pinned(&low, &pinned_x)?; // returns at once; the DMA runs on `low`
    let mut y = DeviceBuffer::<f32>::alloc_on(&ctx, &low, n)?;
    y.fill(&low, 1.0)?;
    let ready = low.record_event()?;

    let timed = EventOptions::new().timing(true);
    high.wait_event(&ready)?;
    let high_start = high.record_event_with(timed)?;
    saxpy(&high, &kernel, 2.0, &x, &mut y)?;
    let high_end = high.record_event_with(timed)?;

    low.wait_event(&high_end)?;
    let low_start = low.record_event_with(timed)?;
    saxpy(&low, &kernel, -1.0, &x, &mut y)?;
    let low_end = low.record_event_with(timed)?;

    // Host functions run in stream order too: `low`'s runs after `high`'s.
    let order = Arc::new(AtomicUsize::new(0));
    let seen = order.clone();
    high.launch_host_func(move || {
        seen.fetch_add(1, Ordering::SeqCst);
    })?;
    low.wait_stream(&high)?;
    let seen = order.clone();
    low.launch_host_func(move || {
        assert_eq!(seen.load(Ordering::SeqCst), 1, "after high's host function");
        seen.fetch_add(1, Ordering::SeqCst);
    })?;

    // Back through pinned memory: the copy returns at once, and `as_slice` waits for it.
    let mut pinned_y = PinnedHostBuffer::<f32>::zeroed(&ctx, n)?;
    y.copy_to_pinned(&low, &mut pinned_y)?;
    if wrong_results("two streams", pinned_y.as_slice()?, |i| host_x[i] + 1.0) > 0 {
        return Ok(false);
    }
    let (t_high, t_low) = (
        high_end.elapsed_since(&high_start)?,
        low_end.elapsed_since(&low_start)?,
    );
    let limit = memory_bandwidth_limit(device).map_or_else(
        || "the device does not say its memory bandwidth".to_string(),
        |gbs| format!("device memory peak {gbs:.0} GB/s"),
    );
    let l2 = device
        .attribute(cuda_stream::ffi::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)
        .unwrap_or(0);
    let resident = if 3 * 4 * n <= usize::try_from(l2).unwrap_or(0) {
        "; the vectors fit in the L2 cache, so this is cache bandwidth"
    } else {
        ""
    };
    println!(
        "saxpy over {n} floats on high then low: {:.1} us ({:.0} GB/s), {:.1} us ({:.0} GB/s) \
         ({limit}{resident}); all {n} results checked",
        t_high.as_secs_f64() * 1e6,
        gb_per_s(n, t_high),
        t_low.as_secs_f64() * 1e6,
        gb_per_s(n, t_low),
    );
    println!(
        "host functions ran in order ({})",
        order.load(Ordering::SeqCst)
    );

    // The same work, again and again: enqueued directly on the two streams each time, then
    // captured once into a graph and replayed.
    let mut low = low;
    if !direct_then_graph(args, &high, &mut low, &kernel, &host_x, &x, &mut y)? {
        return Ok(false);
    }

    // A current-stream guard: code that asks for "the current stream" gets `low`.
    {
        let _guard = low.make_current();
        current_stream(&ctx, |s| {
            println!("current stream is low: {}", s == low.as_stream())
        });
    }

    // A pool lease: a stream no other lease gets while this one lives.
    let pool = StreamPool::new(&ctx, StreamOptions::new());
    let lease = pool.acquire()?;
    lease.wait_stream(&low)?;
    high.wait_stream(&lease)?;
    println!("leased a stream from a pool of {}", pool.created());
    drop(lease);

    // Fork/join: two forks each take half of the vectors (y = x + y); `high` waits for both
    // when the scope ends, however it ends.
    let half = n / 2;
    let offset = (half * std::mem::size_of::<f32>()) as u64;
    high.scope(|s| {
        let (a, b) = (s.fork()?, s.fork()?);
        // Halves of the buffers go by raw address (not recorded as uses): `high` last used
        // both and the forks start after it, and the scope's end joins them back into `high`.
        // SAFETY: each fork touches its own half of `x` and `y`, which outlive the scope's work.
        unsafe {
            saxpy_raw(&a, &kernel, half, 1.0, x.device_ptr(), y.device_ptr())?;
            saxpy_raw(
                &b,
                &kernel,
                n - half,
                1.0,
                x.device_ptr() + offset,
                y.device_ptr() + offset,
            )?;
        }
        Ok(())
    })?;
    let result = y.to_vec(&high)?;
    if wrong_results("fork/join", &result, |i| 2.0 * host_x[i] + 1.0) > 0 {
        return Ok(false);
    }
    println!("fork/join over two forks of the context's pool: all {n} results checked");
    println!("ok");
    Ok(true)
}
