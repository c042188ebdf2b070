#!/usr/bin/env python3
"""Times the benchmark's operations through PyTorch, CuPy and cuda.core on GPU 0.

The Python peers of `cuda-stream-bench`: the same rows (same ids), each written as a user of the
framework writes it (`torch.cuda.Stream().query()`, `cupy.cuda.Event().record(s)`,
`cuda.core` `Device().create_stream()`, ...), with the same method: an untimed warm-up batch,
then repetitions of a batch of many iterations, ns per operation from the median batch, with the
fastest and slowest batch as the spread. Work a batch enqueues is drained, untimed, between
batches.

Each framework runs in its own child process (this script with `--child NAME`), so that one that
is missing, fails, crashes or hangs is reported as such and the others still run. A framework
that is not installed is reported as missing, never as a failure.

Usage:
    python3 tests/bench/peers.py [--quick] [--json FILE] [--only torch,cupy,cuda.core]
    python3 tests/bench/peers.py --nccl [--quick]

`--nccl` (for a machine with two GPUs) times `torch.distributed.all_reduce` (NCCL backend, two
processes, one GPU each, sum of f32 in place) at 1 MiB, 64 MiB and 1 GiB and prints NCCL's bus
bandwidth, for the benchmark's multi-GPU all-reduce rows; it sets NCCL_NVLS_ENABLE=0 in both
processes, and skips (exit 0, saying why) without PyTorch or with fewer than two GPUs.

Prints a Markdown table of ns per operation; `--json FILE` writes the results for
`combine.py`, which prints them beside the raw, cuda-stream and cudarc columns. Exits 0 when
every framework either ran or is missing (or has no device), 1 when one failed, crashed, timed
out (PEERS_TIMEOUT_S per framework, default 300, 120 with --quick) or raised in a row.
Plain python3 (stdlib only) outside the frameworks themselves.
"""

import functools
import importlib
import itertools
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import threading
import time

FRAMEWORKS = [("torch", "PyTorch"), ("cupy", "CuPy"), ("cuda.core", "cuda.core")]

# The rows of cuda-stream-bench, by id, with the label the tables print when no Rust results are
# at hand. A row a framework cannot do is `{"na": why}`.
ROWS = [
    ("stream_create", "stream create + destroy"),
    ("stream_create_aa", "A/A control: stream create + destroy, raw against raw"),
    ("event_create", "event create + destroy (timing disabled)"),
    ("event_create_close", "event create + destroy, no spare events (Event::new + close())"),
    ("record_event", "record_event() + drop"),
    ("event_create_in_current", "event create + destroy, unsafe Event::new_in_current"),
    ("context_check", "the context check alone"),
    ("query", "query (idle stream)"),
    ("record", "event record (reused event)"),
    ("wait_event", "wait on an event"),
    ("synchronize", "synchronize (idle stream)"),
    ("wait_stream", "wait_stream"),
    ("host_round_trip", "host function round trip (launch + synchronize)"),
    ("host_throughput", "host function throughput (per host fn)"),
    ("host_throughput_boxed", "host function throughput, capturing closure (per host fn)"),
    ("host_throughput_boxed_raw_box", "the same, raw side boxing the closure"),
    ("host_throughput_boxed_plain", "the same, raw side passing no data"),
    ("pool_acquire", "pool acquire + release, warm"),
    ("completed", "completed().await"),
    ("completed_nospin", "completed().spin_limit(ZERO).await"),
    ("completed_after_kernel", "completed().await after a 5 µs kernel"),
    ("completed_after_kernel_nospin", "completed().spin_limit(ZERO).await after a 5 µs kernel"),
    ("completed_after_host_fn", "completed().await after a 5 µs host function"),
    ("completed_after_host_fn_nospin", "completed().spin_limit(ZERO).await after a 5 µs host function"),
    ("scope_2_forks", "scope with 2 forks"),
    ("mem_alloc_free", "alloc + free of 1 MiB hitting the block cache"),
    ("mem_temporaries", "temporaries, per step: 3 buffers of mixed sizes (4 KiB to 3 MiB), each allocated then filled, then all freed"),
    ("mem_pipeline", "double-buffered pipeline, 64 chunks of 4 MiB up, computed, down over 3 streams"),
    ("nvrtc_compile", "compile a 4-line CUDA C++ kernel to CUBIN for the device"),
]
# Rows only the Rust benchmark has: each framework reports them as n/a with this reason.
COMPLETED_ROWS = [
    "completed", "completed_nospin", "completed_after_kernel", "completed_after_kernel_nospin",
    "completed_after_host_fn", "completed_after_host_fn_nospin",
]
BOXED_DIAGNOSTICS = ["host_throughput_boxed_raw_box", "host_throughput_boxed_plain"]
CONTROL = "a control of the Rust benchmark's method: the raw code against itself"
CUDA_STREAM_ONLY = "a diagnostic of cuda-stream's own event creation"
NO_FUTURE = "no completion future (nothing awaits a stream without blocking a thread)"
NO_POOL = "no stream pool"
PYTHON_CALLBACKS = "every Python callback is an object: see the row above"
TAG = "peers-row:"
HOST_PROBE_S = 10.0


# The kernel the nvrtc_compile row compiles (the Rust row's `rows/nvrtc.rs` SOURCE, the same text).
NVRTC_SOURCE = (
    'extern "C" __global__ void csb_scale(float *x, float a, unsigned n) {\n'
    "    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    if (i < n) x[i] = a * x[i];\n"
    "}\n"
)
COMPILES = 20  # compiles per batch (each takes milliseconds)


def unique_sources():
    """The row's source with a new trailing comment each call: frameworks that cache compiled
    kernels by their source (CuPy, in memory and on disk) compile every time."""
    n = itertools.count()
    return lambda: NVRTC_SOURCE + f"// {next(n)} {os.getpid()}\n"


class Config:
    def __init__(self, quick):
        self.quick = quick
        if quick:
            self.reps, self.fast, self.medium, self.slow, self.host_batch = 4, 500, 200, 50, 1_000
        else:
            self.reps, self.fast, self.medium, self.slow, self.host_batch = 16, 20_000, 5_000, 2_000, 100_000

    def as_json(self):
        return {
            "reps": self.reps,
            "iterations": {"fast": self.fast, "medium": self.medium, "slow": self.slow, "host_batch": self.host_batch},
        }


# ---------------------------------------------------------------------------------------------
# The method


def batch(body, iters):
    """ns per iteration of `iters` calls of `body`."""
    clock = time.perf_counter_ns
    t = clock()
    for _ in range(iters):
        body()
    return (clock() - t) / iters


def measure(cfg, body, iters, settle=None, per_iter=1):
    """Warm-up batch, then `cfg.reps` batches; ns per operation: median, min and max batch."""
    settle = settle or (lambda: None)
    batch(body, max(1, min(iters, 1_000)))
    settle()
    samples = []
    for _ in range(cfg.reps):
        samples.append(batch(body, iters))
        settle()
    return {
        "ns": statistics.median(samples) / per_iter,
        "min": min(samples) / per_iter,
        "max": max(samples) / per_iter,
    }


def emit(row_id, result):
    """One row's result, printed as soon as it is known (a hang later loses nothing before it)."""
    print(f"{TAG} {json.dumps({'id': row_id, **result})}", flush=True)


def run_row(cfg, row_id, call, thunk):
    """Measures one row: `thunk()` returns the arguments of `measure` after `cfg`; `call` says
    what is timed. An exception becomes the row's error, and the other rows go on."""
    try:
        result = measure(cfg, *thunk())
        result["call"] = call
    except Exception as e:  # a framework's error: report it in the row
        result = {"error": f"{type(e).__name__}: {e}"}
    emit(row_id, result)


def na(row_id, why):
    emit(row_id, {"na": why})


def na_rust_only(host_why=None):
    """The rows that only the Rust benchmark has (`host_why`: why the framework has no
    capturing-closure diagnostics, where it is not that every Python callback is an object)."""
    na("stream_create_aa", CONTROL)
    na("event_create_in_current", CUDA_STREAM_ONLY)
    na("context_check", CUDA_STREAM_ONLY)
    for row in COMPLETED_ROWS:
        na(row, NO_FUTURE)
    for row in BOXED_DIAGNOSTICS:
        na(row, host_why or PYTHON_CALLBACKS)


def wait_for_host_fn(launch, query):
    """Enqueues one host function and waits for it by polling (never blocking in a driver call
    while holding the GIL): the callbacks need the GIL to run."""
    done = threading.Event()
    launch(lambda *args: done.set())
    deadline = time.monotonic() + HOST_PROBE_S
    while not done.is_set():
        if time.monotonic() > deadline:
            raise RuntimeError(f"a host function did not run within {HOST_PROBE_S:.0f} s")
        time.sleep(0.001)
    while not query():
        time.sleep(0.001)


# ---------------------------------------------------------------------------------------------
# The frameworks. Each `run_*` measures every row it can, emits every row, and returns
# (version, gpu name).


PIPELINE_CHUNKS, PIPELINE_WORDS = 64, 1 << 20  # 64 chunks of 4 MiB of 32-bit words, as the Rust row

# The mem_temporaries row (the Rust row's `rows/temporaries.rs` PLAN): sizes in 32-bit words,
# 4 KiB, 96 KiB, 1 MiB, 3 MiB, 256 KiB; each step takes the next three, so five steps (one
# iteration) go through every size three times. ns are per step.
TEMP_SIZES = [1 << 10, 24 << 10, 1 << 18, 3 << 18, 1 << 16]
TEMP_STEPS = [[TEMP_SIZES[(3 * k + j) % 5] for j in range(3)] for k in range(5)]
TEMP_FILL = 7


def pipeline_rows(cfg, make, run_once, check):
    """The double-buffered pipeline row: `make()` builds the pinned chunks, the two device slots
    and the three streams; `run_once(state)` runs the 64 chunks up, computed (a fill standing for
    a kernel, as the Rust row's memset) and down, ordered by events, and waits for the last;
    `check(state)` says whether every chunk came back right."""
    state = {}

    def thunk():
        state.update(make())
        return (lambda: run_once(state), 1)

    run_row(cfg, "mem_pipeline", "64 x 4 MiB: H2D copy, fill, D2H copy over 3 streams, events by hand, pinned host memory",
            thunk)
    if state and not check(state):
        emit("mem_pipeline", {"error": "a chunk came back wrong"})


def run_torch(cfg):
    import torch

    if not torch.cuda.is_available():
        raise NoDevice("torch.cuda.is_available() is False")
    torch.cuda.set_device(0)
    torch.cuda.init()
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    f1, f2 = torch.cuda.Stream(), torch.cuda.Stream()
    e = torch.cuda.Event()  # timing disabled by default; the CUDA event is made at first record
    e.record(s2)
    torch.cuda.synchronize()

    def settle():
        for s in (s1, s2, f1, f2):
            s.synchronize()

    na("stream_create", "torch.cuda.Stream() hands out one of a fixed pool of streams and never "
       "destroys them: see the pool row")
    lazy = ("torch.cuda.Event() makes its CUDA event lazily, at the first record, and alone makes "
            "no driver call: see record_event")
    na("event_create", lazy)
    na("event_create_close", lazy)
    na_rust_only(host_why="PyTorch has no host-function API")
    na("nvrtc_compile", "PyTorch compiles no user CUDA C++ at run time (load_inline runs nvcc and a C++ compiler)")
    run_row(cfg, "record_event", "s.record_event() + drop (a new torch.cuda.Event, made at the record)",
            lambda: (s1.record_event, cfg.medium, settle))
    run_row(cfg, "query", "s.query()", lambda: (s1.query, cfg.fast))
    run_row(cfg, "record", "e.record(s)", lambda: (functools.partial(e.record, s1), cfg.fast, settle))
    e.record(s2)
    settle()
    run_row(cfg, "wait_event", "s.wait_event(e)",
            lambda: (functools.partial(s1.wait_event, e), cfg.fast, settle))
    run_row(cfg, "synchronize", "s.synchronize()", lambda: (s1.synchronize, cfg.medium))
    run_row(cfg, "wait_stream", "s.wait_stream(other) (records a new event per call)",
            lambda: (functools.partial(s1.wait_stream, s2), cfg.fast, settle))
    for row in ("host_round_trip", "host_throughput", "host_throughput_boxed"):
        na(row, "PyTorch has no host-function API")
    run_row(cfg, "pool_acquire", "torch.cuda.Stream() (from torch's stream pool) + drop",
            lambda: (torch.cuda.Stream, cfg.fast))

    def fork_join():
        f1.wait_stream(s1)
        f2.wait_stream(s1)
        s1.wait_stream(f1)
        s1.wait_stream(f2)

    run_row(cfg, "scope_2_forks", "2 pre-made streams: f.wait_stream(s) x2, s.wait_stream(f) x2",
            lambda: (fork_join, cfg.medium, settle))
    settle()

    def alloc_free():
        x = torch.empty(1 << 18, dtype=torch.float32, device="cuda")
        del x

    torch.cuda.set_stream(s1)  # the allocations are ordered on s1, as the Rust row's
    run_row(cfg, "mem_alloc_free", "torch.empty(1 MiB) + del on s (the caching allocator)",
            lambda: (alloc_free, cfg.medium, settle))

    def temporaries():
        for a, b, c in TEMP_STEPS:
            x = torch.empty(a, dtype=torch.int32, device="cuda")
            x.fill_(TEMP_FILL)
            y = torch.empty(b, dtype=torch.int32, device="cuda")
            y.fill_(TEMP_FILL)
            z = torch.empty(c, dtype=torch.int32, device="cuda")
            z.fill_(TEMP_FILL)
            del x, y, z

    run_row(cfg, "mem_temporaries", "per step 3 x (torch.empty(n, int32) + fill_(7)), then del, on s "
            "(the caching allocator; fill_ is a kernel)", lambda: (temporaries, cfg.slow, settle, len(TEMP_STEPS)))
    torch.cuda.set_stream(torch.cuda.default_stream())

    def make():
        n, w = PIPELINE_CHUNKS, PIPELINE_WORDS
        ins = [torch.full((w,), i, dtype=torch.int32).pin_memory() for i in range(n)]
        outs = [torch.zeros(w, dtype=torch.int32).pin_memory() for _ in range(n)]
        slots = [torch.empty(w, dtype=torch.int32, device="cuda") for _ in range(2)]
        streams = [torch.cuda.Stream() for _ in range(3)]
        events = [[torch.cuda.Event() for _ in range(2)] for _ in range(3)]
        torch.cuda.synchronize()
        return {"ins": ins, "outs": outs, "slots": slots, "streams": streams, "events": events}

    def run_once(st):
        up, comp, down = st["streams"]
        h2d, done, read = st["events"]
        for i in range(PIPELINE_CHUNKS):
            k = i % 2
            slot = st["slots"][k]
            if i >= 2:
                up.wait_event(read[k])
            with torch.cuda.stream(up):
                slot.copy_(st["ins"][i], non_blocking=True)
                h2d[k].record(up)
            comp.wait_event(h2d[k])
            with torch.cuda.stream(comp):
                slot.fill_(i + 1)
                done[k].record(comp)
            down.wait_event(done[k])
            with torch.cuda.stream(down):
                st["outs"][i].copy_(slot, non_blocking=True)
                read[k].record(down)
        down.synchronize()

    def check(st):
        return all(bool((o == i + 1).all()) for i, o in enumerate(st["outs"]))

    pipeline_rows(cfg, make, run_once, check)
    torch.cuda.synchronize()
    return torch.__version__, torch.cuda.get_device_name(0)


def run_cupy(cfg):
    import cupy as cp

    try:
        ndev = cp.cuda.runtime.getDeviceCount()
    except Exception as e:
        raise NoDevice(f"cupy.cuda.runtime.getDeviceCount(): {e}")
    if ndev == 0:
        raise NoDevice("cupy sees no CUDA device")
    cp.cuda.Device(0).use()
    S, E = cp.cuda.Stream, cp.cuda.Event
    s1, s2 = S(non_blocking=True), S(non_blocking=True)
    f1, f2 = S(non_blocking=True), S(non_blocking=True)
    e = E(disable_timing=True)
    e.record(s2)
    cp.cuda.Device().synchronize()

    def settle():
        for s in (s1, s2, f1, f2):
            s.synchronize()

    run_row(cfg, "stream_create", "cupy.cuda.Stream(non_blocking=True) + drop",
            lambda: (functools.partial(S, non_blocking=True), cfg.slow))
    run_row(cfg, "event_create", "cupy.cuda.Event(disable_timing=True) + drop",
            lambda: (functools.partial(E, disable_timing=True), cfg.medium))
    run_row(cfg, "event_create_close", "cupy.cuda.Event(disable_timing=True) + drop (CuPy keeps no spare events)",
            lambda: (functools.partial(E, disable_timing=True), cfg.medium))
    run_row(cfg, "record_event", "s.record() + drop (a new Event per call)", lambda: (s1.record, cfg.medium, settle))
    na_rust_only()
    run_row(cfg, "query", "s.done", lambda: (lambda: s1.done, cfg.fast))
    source = unique_sources()

    def cupy_compile():
        k = cp.RawKernel(source(), "csb_scale")
        k.compile()  # NVRTC, then the module load (CuPy loads what it compiles)

    run_row(cfg, "nvrtc_compile", "cupy.RawKernel(src, name).compile() (a new source each time: no cache hit; includes its module load)",
            lambda: (cupy_compile, COMPILES))
    run_row(cfg, "record", "e.record(s)", lambda: (functools.partial(e.record, s1), cfg.fast, settle))
    e.record(s2)
    settle()
    run_row(cfg, "wait_event", "s.wait_event(e)",
            lambda: (functools.partial(s1.wait_event, e), cfg.fast, settle))
    run_row(cfg, "synchronize", "s.synchronize()", lambda: (s1.synchronize, cfg.medium))
    run_row(cfg, "wait_stream", "s.wait_event(other.record()) (a new event per call; CuPy has no wait_stream)",
            lambda: (lambda: s1.wait_event(s2.record()), cfg.fast, settle))
    na("pool_acquire", NO_POOL)

    def fork_join():
        f1.wait_event(s1.record())
        f2.wait_event(s1.record())
        s1.wait_event(f1.record())
        s1.wait_event(f2.record())

    run_row(cfg, "scope_2_forks", "2 pre-made streams: f.wait_event(s.record()) x2, s.wait_event(f.record()) x2",
            lambda: (fork_join, cfg.medium, settle))

    # Host functions last: a Python callback needs the GIL on the driver's thread.
    if not hasattr(s1, "launch_host_func"):
        for row in ("host_round_trip", "host_throughput"):
            na(row, "this CuPy has no Stream.launch_host_func")
    else:
        calls = [0]

        def cb(_arg):
            calls[0] += 1

        def round_trip():
            s1.launch_host_func(cb, None)
            s1.synchronize()

        n = cfg.host_batch

        def throughput():
            for _ in range(n):
                s1.launch_host_func(cb, None)
            s1.synchronize()

        try:
            wait_for_host_fn(lambda f: s1.launch_host_func(f, None), lambda: s1.done)
            run_row(cfg, "host_round_trip", "s.launch_host_func(cb, None); s.synchronize()",
                    lambda: (round_trip, cfg.slow))
            run_row(cfg, "host_throughput", f"{n} x s.launch_host_func(cb, None), one s.synchronize()",
                    lambda: (throughput, 1, None, n))
        except Exception as ex:
            for row in ("host_round_trip", "host_throughput"):
                emit(row, {"error": f"{type(ex).__name__}: {ex}"})
    na("host_throughput_boxed", PYTHON_CALLBACKS)
    settle()
    name = cp.cuda.runtime.getDeviceProperties(0)["name"]
    def alloc_free():
        x = cp.empty(1 << 18, dtype=cp.float32)
        del x

    def temporaries():
        for a, b, c in TEMP_STEPS:
            x = cp.empty(a, dtype=cp.int32)
            x.fill(TEMP_FILL)
            y = cp.empty(b, dtype=cp.int32)
            y.fill(TEMP_FILL)
            z = cp.empty(c, dtype=cp.int32)
            z.fill(TEMP_FILL)
            del x, y, z

    with s1:
        run_row(cfg, "mem_alloc_free", "cupy.empty(1 MiB) + del on s (CuPy's memory pool)",
                lambda: (alloc_free, cfg.medium, settle))
        run_row(cfg, "mem_temporaries", "per step 3 x (cupy.empty(n, int32) + fill(7)), then del, on s "
                "(CuPy's memory pool; fill is a kernel)", lambda: (temporaries, cfg.slow, settle, len(TEMP_STEPS)))

    def make():
        import cupyx

        n, w = PIPELINE_CHUNKS, PIPELINE_WORDS
        ins = []
        for i in range(n):
            a = cupyx.empty_pinned((w,), dtype=cp.int32)
            a[...] = i
            ins.append(a)
        outs = [cupyx.zeros_pinned((w,), dtype=cp.int32) for _ in range(n)]
        slots = [cp.empty(w, dtype=cp.int32) for _ in range(2)]
        streams = [S(non_blocking=True) for _ in range(3)]
        events = [[E(disable_timing=True) for _ in range(2)] for _ in range(3)]
        cp.cuda.Device().synchronize()
        return {"ins": ins, "outs": outs, "slots": slots, "streams": streams, "events": events}

    def run_once(st):
        up, comp, down = st["streams"]
        h2d, done, read = st["events"]
        for i in range(PIPELINE_CHUNKS):
            k = i % 2
            slot = st["slots"][k]
            if i >= 2:
                up.wait_event(read[k])
            slot.set(st["ins"][i], stream=up)
            h2d[k].record(up)
            comp.wait_event(h2d[k])
            with comp:
                slot.fill(i + 1)
            done[k].record(comp)
            down.wait_event(done[k])
            slot.get(stream=down, out=st["outs"][i])
            read[k].record(down)
        down.synchronize()

    def check(st):
        return all(bool((o == i + 1).all()) for i, o in enumerate(st["outs"]))

    pipeline_rows(cfg, make, run_once, check)
    cp.cuda.Device().synchronize()
    return cp.__version__, name.decode() if isinstance(name, bytes) else str(name)


def import_cuda_core():
    errors = []
    for module in ("cuda.core", "cuda.core.experimental"):
        try:
            m = importlib.import_module(module)
            if hasattr(m, "Device"):
                return m
            errors.append(f"{module} has no Device")
        except Exception as e:
            errors.append(f"{module}: {e}")
    raise ImportError("; ".join(errors))


def run_cuda_core(cfg):
    cc = import_cuda_core()
    try:
        dev = cc.Device(0)
        dev.set_current()
    except Exception as e:
        raise NoDevice(f"cuda.core Device(0).set_current(): {e}")
    s1, s2 = dev.create_stream(), dev.create_stream()
    f1, f2 = dev.create_stream(), dev.create_stream()
    new_event = getattr(dev, "create_event", None)
    e = new_event() if new_event is not None else s2.record()
    s2.record(e)
    dev.sync()

    def settle():
        for s in (s1, s2, f1, f2):
            s.sync()

    def stream_create_close():
        dev.create_stream().close()

    run_row(cfg, "stream_create", "Device().create_stream() + close()", lambda: (stream_create_close, cfg.slow))
    cc_source = unique_sources()

    def cuda_core_compile():
        arch = "sm_" + "".join(str(v) for v in dev.compute_capability)
        cc.Program(cc_source(), "c++", cc.ProgramOptions(arch=arch)).compile("cubin")

    run_row(cfg, "nvrtc_compile", "Program(src, 'c++', ProgramOptions(arch=sm_XY)).compile('cubin')",
            lambda: (cuda_core_compile, COMPILES))
    if new_event is None:
        na("event_create", "this cuda.core has no Device.create_event")
        na("event_create_close", "this cuda.core has no Device.create_event")
    else:
        def event_create_close():
            dev.create_event().close()

        def event_create_drop():
            dev.create_event()

        run_row(cfg, "event_create", "Device().create_event() + drop",
                lambda: (event_create_drop, cfg.medium))
        run_row(cfg, "event_create_close", "Device().create_event() + close()",
                lambda: (event_create_close, cfg.medium))
    run_row(cfg, "record_event", "s.record() + drop (a new event per call)", lambda: (s1.record, cfg.medium, settle))
    na_rust_only()
    if hasattr(type(s1), "is_done"):
        run_row(cfg, "query", "s.is_done", lambda: (lambda: s1.is_done, cfg.fast))
    else:
        na("query", "cuda.core's Stream has no query (Event.is_done queries an event)")
    run_row(cfg, "record", "s.record(e)", lambda: (functools.partial(s1.record, e), cfg.fast, settle))
    s2.record(e)
    settle()
    run_row(cfg, "wait_event", "s.wait(e)", lambda: (functools.partial(s1.wait, e), cfg.fast, settle))
    run_row(cfg, "synchronize", "s.sync()", lambda: (s1.sync, cfg.medium))
    run_row(cfg, "wait_stream", "s.wait(other) (records a new event per call)",
            lambda: (functools.partial(s1.wait, s2), cfg.fast, settle))
    na("pool_acquire", NO_POOL)

    def fork_join():
        f1.wait(s1)
        f2.wait(s1)
        s1.wait(f1)
        s1.wait(f2)

    run_row(cfg, "scope_2_forks", "2 pre-made streams: f.wait(s) x2, s.wait(f) x2",
            lambda: (fork_join, cfg.medium, settle))

    host_launch = getattr(cc, "host_launch", None)
    if host_launch is None:
        for row in ("host_round_trip", "host_throughput"):
            na(row, f"this cuda.core ({getattr(cc, '__version__', '?')}) has no host_launch")
    else:
        calls = [0]

        def cb():
            calls[0] += 1

        def round_trip():
            host_launch(s1, cb)
            s1.sync()

        n = cfg.host_batch

        def throughput():
            for _ in range(n):
                host_launch(s1, cb)
            s1.sync()

        try:
            probe_stream = dev.create_stream()
            done = [False]

            def mark():
                done[0] = True

            host_launch(probe_stream, mark)
            deadline = time.monotonic() + HOST_PROBE_S
            while not done[0]:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"a host function did not run within {HOST_PROBE_S:.0f} s")
                time.sleep(0.001)
            probe_stream.sync()
            run_row(cfg, "host_round_trip", "host_launch(s, cb); s.sync()", lambda: (round_trip, cfg.slow))
            run_row(cfg, "host_throughput", f"{n} x host_launch(s, cb), one s.sync()",
                    lambda: (throughput, 1, None, n))
        except Exception as ex:
            for row in ("host_round_trip", "host_throughput"):
                emit(row, {"error": f"{type(ex).__name__}: {ex}"})
    na("host_throughput_boxed", PYTHON_CALLBACKS)

    def alloc_free_thunk():
        mr = getattr(dev, "memory_resource", None)
        if mr is None:
            mr = cc.DeviceMemoryResource(dev.device_id)

        def alloc_free():
            buf = mr.allocate(1 << 20, stream=s1)
            buf.close(s1)

        return (alloc_free, cfg.medium, settle)

    run_row(cfg, "mem_alloc_free", "dev.memory_resource.allocate(1 MiB, stream=s) + buf.close(s) "
            "(DeviceMemoryResource: stream-ordered)", alloc_free_thunk)

    def temporaries_thunk():
        mr = getattr(dev, "memory_resource", None)
        if mr is None:
            mr = cc.DeviceMemoryResource(dev.device_id)
        pattern = TEMP_FILL.to_bytes(4, "little")  # a 4-byte pattern: cuMemsetD32Async

        def temporaries():
            for sizes in TEMP_STEPS:
                bufs = []
                for words in sizes:
                    buf = mr.allocate(words * 4, stream=s1)
                    buf.fill(pattern, stream=s1)
                    bufs.append(buf)
                for buf in bufs:
                    buf.close(s1)

        return (temporaries, cfg.slow, settle, len(TEMP_STEPS))

    buffer_class = getattr(cc, "Buffer", None)
    has_fill = buffer_class is not None and hasattr(buffer_class, "fill")
    if has_fill:
        run_row(cfg, "mem_temporaries", "per step 3 x (memory_resource.allocate(n, stream=s) + "
                "buf.fill(4-byte pattern, stream=s)), then buf.close(s) (DeviceMemoryResource: stream-ordered)",
                temporaries_thunk)
    else:
        na("mem_temporaries", f"this cuda.core ({getattr(cc, '__version__', '?')}) has no Buffer.fill")
    na("mem_pipeline", "cuda.core has no copy between pinned host arrays and device buffers "
       "short of raw driver bindings")
    settle()
    version = getattr(cc, "__version__", None)
    if version is None:
        try:
            version = importlib.import_module("cuda.core").__version__
        except Exception:
            version = "?"
    return version, getattr(dev, "name", "?")


class NoDevice(Exception):
    pass


RUNNERS = {"torch": run_torch, "cupy": run_cupy, "cuda.core": run_cuda_core}


def child(name, cfg):
    """Runs one framework; prints tagged lines. Exit 0: ran; 3: missing; 4: no device."""
    floor = measure(cfg, lambda: None, cfg.fast)["ns"]
    print(f"{TAG} {json.dumps({'loop_floor_ns': floor})}", flush=True)
    try:
        version, gpu = RUNNERS[name](cfg)
    except ImportError as e:
        print(f"{TAG} {json.dumps({'status': 'missing', 'detail': str(e)})}", flush=True)
        return 3
    except NoDevice as e:
        print(f"{TAG} {json.dumps({'status': 'no device', 'detail': str(e)})}", flush=True)
        return 4
    print(f"{TAG} {json.dumps({'status': 'ok', 'version': str(version), 'gpu': str(gpu)})}", flush=True)
    return 0


# ---------------------------------------------------------------------------------------------
# The parent: one child per framework, results merged.


def parse_child_output(text):
    out = {"rows": {}}
    for line in text.splitlines():
        if not line.startswith(TAG):
            continue
        try:
            rec = json.loads(line[len(TAG):])
        except ValueError:
            continue
        if "id" in rec:
            out["rows"][rec.pop("id")] = rec
        else:
            out.update(rec)
    return out


def run_framework(name, label, cfg, timeout):
    flags = ["-S"] if sys.flags.no_site else []
    cmd = [sys.executable, *flags, os.path.abspath(__file__), "--child", name] + (["--quick"] if cfg.quick else [])
    started = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        res = parse_child_output(p.stdout)
        if p.returncode not in (0, 3, 4) or "status" not in res:
            tail = (p.stderr or "").strip().splitlines()[-5:]
            res["status"] = "failed"
            how = f"exit {p.returncode}"
            if p.returncode < 0:
                try:
                    how = f"killed by {signal.Signals(-p.returncode).name}"
                except ValueError:
                    how = f"killed by signal {-p.returncode}"
            res["detail"] = how + (": " + " | ".join(tail) if tail else "")
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        res = parse_child_output(out)
        res["status"] = "timed out"
        res["detail"] = f"killed after {timeout} s; rows measured before are kept"
    res["label"] = label
    res["seconds"] = round(time.monotonic() - started, 1)
    return res


def fmt_cell(r, status="ok"):
    if r is None:
        return "missing" if status == "missing" else "—"
    if "na" in r:
        return "n/a"
    if "error" in r:
        return "error"
    return f"{r['ns']:.1f}"


def print_table(results, frameworks):
    print("| op | " + " | ".join(results[n]["label"] + " ns" for n, _ in frameworks) + " |")
    print("|---|" + "---:|" * len(frameworks))
    for row_id, label in ROWS:
        cells = [fmt_cell(results[n]["rows"].get(row_id), results[n]["status"]) for n, _ in frameworks]
        print(f"| {label} | " + " | ".join(cells) + " |")
    print()
    for n, _ in frameworks:
        r = results[n]
        what = r["status"]
        if r.get("version"):
            what += f", {r['label']} {r['version']} on {r.get('gpu', '?')}"
        if r.get("detail"):
            what += f" ({r['detail']})"
        if r.get("loop_floor_ns") is not None:
            what += f"; timing-loop floor {r['loop_floor_ns']:.1f} ns per call"
        print(f"- {r['label']}: {what}")
        for row_id, cell in r["rows"].items():
            if "error" in cell:
                print(f"  - {row_id}: {cell['error']}")


NCCL_SIZES = [(1 << 20, "1 MiB", 200), (64 << 20, "64 MiB", 40), (1 << 30, "1 GiB", 8)]


def nccl_rank(rank, world, port, quick):
    """One rank of the torch.distributed all-reduce rows; rank 0 prints them as JSON."""
    os.environ["NCCL_NVLS_ENABLE"] = "0"
    import torch
    import torch.distributed as dist
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    rows = []
    reps = 2 if quick else 8
    for nbytes, label, iters in NCCL_SIZES:
        iters = max(2, iters // 10) if quick else iters
        x = torch.zeros(nbytes // 4, dtype=torch.float32, device=f"cuda:{rank}")
        for _ in range(3):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        times = []
        for _ in range(reps):
            dist.barrier()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(iters):
                dist.all_reduce(x)
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) / iters)
        t = sorted(times)[len(times) // 2]
        busbw = nbytes / t / 1e9 * 2 * (world - 1) / world
        rows.append({"size": label, "bytes": nbytes, "s": t, "busbw_gbps": busbw})
        del x
    if rank == 0:
        print("NCCL_ROWS " + json.dumps({"torch": torch.__version__,
                                         "nccl": ".".join(map(str, torch.cuda.nccl.version())),
                                         "rows": rows}), flush=True)
    dist.destroy_process_group()
    return 0


def nccl_main(argv):
    quick = "--quick" in argv
    probe = subprocess.run([sys.executable, "-c",
                            "import torch; print(torch.cuda.device_count())"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        print("torch.distributed all_reduce: skipped (PyTorch is not installed)")
        return 0
    ngpu = int(probe.stdout.strip() or 0)
    if ngpu < 2:
        print(f"torch.distributed all_reduce: skipped (needs 2 GPUs, PyTorch sees {ngpu})")
        return 0
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = dict(os.environ, NCCL_NVLS_ENABLE="0")
    args = ["--quick"] if quick else []
    procs = [subprocess.Popen([sys.executable, __file__, "--nccl-rank", str(r), "2", str(port)]
                              + args, env=env, stdout=subprocess.PIPE, text=True)
             for r in range(2)]
    timeout = int(os.environ.get("PEERS_TIMEOUT_S", "600"))
    outs = []
    for p in procs:
        try:
            outs.append(p.communicate(timeout=timeout)[0])
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            print("torch.distributed all_reduce: timed out")
            return 1
    if any(p.returncode != 0 for p in procs):
        print(f"torch.distributed all_reduce: failed (exit {[p.returncode for p in procs]})")
        return 1
    line = next((l for l in outs[0].splitlines() if l.startswith("NCCL_ROWS ")), None)
    if line is None:
        print("torch.distributed all_reduce: rank 0 printed no rows")
        return 1
    doc = json.loads(line[len("NCCL_ROWS "):])
    print(f"torch.distributed.all_reduce, NCCL backend, 2 processes (PyTorch {doc['torch']}, "
          f"NCCL {doc['nccl']}; sum of f32 in place; median of repetitions"
          + ("; --quick: smoke test" if quick else "") + "):")
    print()
    print("| size | time per all-reduce | bus bandwidth |")
    print("| --- | --- | --- |")
    for r in doc["rows"]:
        print(f"| {r['size']} | {r['s'] * 1e6:.1f} us | {r['busbw_gbps']:.1f} GB/s |")
    return 0


def main(argv):
    if "--nccl-rank" in argv:
        i = argv.index("--nccl-rank")
        return nccl_rank(int(argv[i + 1]), int(argv[i + 2]), int(argv[i + 3]), "--quick" in argv)
    if "--nccl" in argv:
        return nccl_main(argv)
    quick = "--quick" in argv
    cfg = Config(quick)
    if "--child" in argv:
        return child(argv[argv.index("--child") + 1], cfg)
    json_path = argv[argv.index("--json") + 1] if "--json" in argv else None
    only = argv[argv.index("--only") + 1].split(",") if "--only" in argv else None
    timeout = int(os.environ.get("PEERS_TIMEOUT_S", "120" if quick else "300"))
    frameworks = [(n, label) for n, label in FRAMEWORKS if only is None or n in only]
    results = {}
    for name, label in frameworks:
        print(f"== {label}", file=sys.stderr, flush=True)
        results[name] = run_framework(name, label, cfg, timeout)
    print(
        f"Python peers on GPU 0 (Python {platform.python_version()}; {cfg.reps} repetitions, "
        f"ns per operation from the median batch"
        + ("; --quick: smoke test, numbers not meaningful" if quick else "")
        + "):"
    )
    print()
    print_table(results, frameworks)
    doc = {"tool": "peers", "format": 1, "quick": quick, "python": platform.python_version(),
           **cfg.as_json(), "frameworks": results}
    if json_path:
        with open(json_path, "w") as f:
            json.dump(doc, f, indent=1)
    bad = [n for n, r in results.items()
           if r["status"] in ("failed", "timed out") or any("error" in c for c in r["rows"].values())]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
