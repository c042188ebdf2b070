#!/usr/bin/env python3
"""Interop of cuda-stream with PyTorch, CuPy and cuda.core, on the GPU, in both directions.

Loads the `cuda-stream-interop` cdylib with ctypes and, for each framework that is installed:

* a framework stream lent to Rust: the framework writes (after a long-running op on the same
  stream), Rust's kernel reads and adds on that stream, the framework reads Rust's result on it;
* across streams: Rust records an event on stream A, stream B waits on it (through Rust and, where
  the framework can wrap a raw event, natively), the framework reads on B; and the other way: the
  framework records an event on A, Rust makes B wait on it and adds on B;
* the framework stream is still usable afterwards, and Rust finds the same device from the handle;
* a Rust stream lent to the framework: the framework enqueues a fill on it (after a long op), Rust
  synchronizes its stream and checks every element;
* graph capture begun by the framework (`with torch.cuda.graph(g):`, in PyTorch's default and
  thread-local error modes; CuPy's `Stream.begin_capture`): Rust reads the capture status from
  the handle and enqueues a kernel and a counting `Fn` host function into the capture between the
  framework's own ops; the framework replays the graph and the test checks the tensor and the Rust
  host-function count after every replay, then that the Rust closure is freed with the graph.

Usage:
    cargo build --release -p cuda-stream-interop
    python3 tests/interop/test_interop.py [path/to/libcuda_stream_interop.so]

The library path is argv[1], else $CUDA_STREAM_INTEROP_LIB, else target/release of this checkout.
Plain python3, no pytest. Prints one line per check and `N passed, M failed, K skipped`; exits
nonzero if any check failed.
"""

import ctypes
import gc
import importlib
import os
import struct
import sys
import time
import traceback
from pathlib import Path

N = 1 << 20  # elements (uint32) per buffer
INIT = 7  # what buffers hold before a test's stream work
ADD = 12345  # what Rust's kernel adds
SPIN_CYCLES = int(1e8)  # ~50 ms of GPU time before the framework's write
COUNTS = {"passed": 0, "failed": 0, "skipped": 0}


def report(name, ok, detail=""):
    COUNTS["passed" if ok else "failed"] += 1
    print(f"{'ok' if ok else 'FAIL'}: {name}" + (f" -- {detail}" if detail else ""), flush=True)


def skip(name, reason=None):
    COUNTS["skipped"] += 1
    print(f"skipped: {name}" + (f": {reason}" if reason else ""), flush=True)


def info(msg):
    print(f"  info: {msg}", flush=True)


# ---------------------------------------------------------------------------------------------
# The library


class CsiError(Exception):
    def __init__(self, fn, rc, msg):
        super().__init__(f"{fn} returned {rc}: {msg}")
        self.rc = rc


def load_library():
    if len(sys.argv) > 1:
        path = sys.argv[1]
    elif os.environ.get("CUDA_STREAM_INTEROP_LIB"):
        path = os.environ["CUDA_STREAM_INTEROP_LIB"]
    else:
        root = Path(__file__).resolve().parents[2]
        path = str(root / "target" / "release" / "libcuda_stream_interop.so")
    lib = ctypes.CDLL(path)
    u, u64, u32, i32 = ctypes.c_size_t, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_int32
    sigs = {
        "csi_fill_u32": [u, u64, u64, u32],
        "csi_add_u32": [u, u64, u64, u32],
        "csi_borrowed_copy_u32": [u, u64, u64, u64],
        "csi_record_event": [u, ctypes.POINTER(u)],
        "csi_destroy_event": [u],
        "csi_wait_event": [u, u],
        "csi_stream_device": [u, ctypes.POINTER(i32)],
        "csi_stream_create": [i32, ctypes.POINTER(u)],
        "csi_stream_wait_and_check": [u, u64, u64, u32],
        "csi_stream_destroy": [u],
        "csi_capture_status": [u, ctypes.POINTER(i32), ctypes.POINTER(u64)],
        "csi_capture_add_and_count": [u, u64, u64, u32],
    }
    if hasattr(lib, "csi_nccl_all_reduce_u32"):  # built with the nccl feature
        sigs["csi_nccl_all_reduce_u32"] = [u, u64, u64, u32]
    for name, args in sigs.items():
        fn = getattr(lib, name)
        fn.argtypes = args
        fn.restype = i32
    for name in ("csi_host_fn_runs", "csi_host_fns_alive"):
        fn = getattr(lib, name)
        fn.argtypes = []
        fn.restype = u64
    lib.csi_last_error.argtypes = []
    lib.csi_last_error.restype = ctypes.c_char_p
    return path, lib


class Csi:
    """Thin wrappers that raise CsiError with csi_last_error() on a nonzero return."""

    def __init__(self, lib):
        self.lib = lib

    def _call(self, name, *args):
        rc = getattr(self.lib, name)(*args)
        if rc != 0:
            raise CsiError(name, rc, self.last_error())
        return rc

    def last_error(self):
        return (self.lib.csi_last_error() or b"").decode(errors="replace")

    def fill(self, h, ptr, n, v):
        self._call("csi_fill_u32", h, ptr, n, v)

    def add(self, h, ptr, n, v):
        self._call("csi_add_u32", h, ptr, n, v)

    def borrowed_copy(self, h, src, dst, n):
        self._call("csi_borrowed_copy_u32", h, src, dst, n)

    def record_event(self, h):
        out = ctypes.c_size_t(0)
        self._call("csi_record_event", h, ctypes.byref(out))
        return out.value

    def destroy_event(self, e):
        self._call("csi_destroy_event", e)

    def wait_event(self, h, e):
        self._call("csi_wait_event", h, e)

    def stream_device(self, h):
        out = ctypes.c_int32(-1)
        self._call("csi_stream_device", h, ctypes.byref(out))
        return out.value

    def stream_create(self, device):
        out = ctypes.c_size_t(0)
        self._call("csi_stream_create", device, ctypes.byref(out))
        return out.value

    def stream_wait_and_check(self, h, ptr, n, expected):
        self._call("csi_stream_wait_and_check", h, ptr, n, expected)

    def stream_destroy(self, h):
        self._call("csi_stream_destroy", h)

    def capture_status(self, h):
        status, cid = ctypes.c_int32(-1), ctypes.c_uint64(0)
        self._call("csi_capture_status", h, ctypes.byref(status), ctypes.byref(cid))
        return status.value, cid.value

    def capture_add_and_count(self, h, ptr, n, v):
        self._call("csi_capture_add_and_count", h, ptr, n, v)

    def host_fn_runs(self):
        return self.lib.csi_host_fn_runs()

    def host_fns_alive(self):
        return self.lib.csi_host_fns_alive()


class StreamProtocol(tuple):
    """`(0, handle)` that works both as the `__cuda_stream__` method (newer CuPy and cuda.core
    call it) and as the attribute (older cuda.core read it)."""

    def __call__(self):
        return self


class ForeignStream:
    """A stand-in for a foreign library's stream object: only the CUDA stream protocol."""

    def __init__(self, handle):
        self._protocol = StreamProtocol((0, handle))

    @property
    def __cuda_stream__(self):
        return self._protocol


# ---------------------------------------------------------------------------------------------
# Framework adapters: allocate, do long/short work on a framework stream object, check values on
# a stream. Values are compared on the GPU on the given stream, then that stream is synchronized.


class TorchOps:
    name = "torch"

    def __init__(self, torch):
        self.t = torch
        self.device = torch.cuda.current_device()

    def new_stream(self):
        return self.t.cuda.Stream()

    def handle(self, s):
        return int(s.cuda_stream)

    def wrap_external(self, h):
        return (
            self.t.cuda.ExternalStream(h, device=self.t.device("cuda", self.device)),
            "torch.cuda.ExternalStream(handle)",
        )

    def alloc(self, n, init):
        a = self.t.full((n,), init, dtype=self.t.int32, device=f"cuda:{self.device}")
        self.t.cuda.synchronize()
        return a

    def ptr(self, a):
        return a.data_ptr()

    def busy(self, s):
        with self.t.cuda.stream(s):
            if hasattr(self.t.cuda, "_sleep"):
                self.t.cuda._sleep(SPIN_CYCLES)
                return f"torch.cuda._sleep({SPIN_CYCLES})"
            x = self.t.rand((4096, 4096), device=f"cuda:{self.device}")
            for _ in range(30):
                x = (x @ x) * (1.0 / 4096)
            return "30 matmuls of 4096x4096"

    def fill(self, s, a, v):
        with self.t.cuda.stream(s):
            a.fill_(v)

    def query(self, s):
        return s.query()

    def sync(self, s):
        s.synchronize()

    def check(self, s, a, expected):
        with self.t.cuda.stream(s):
            bad = (a != expected).sum()
            head = a[:4].clone()
        s.synchronize()
        nbad = int(bad.item())
        return nbad == 0, f"{nbad} of {a.numel()} wrong, head {head.tolist()}, expected {expected}"

    def stream_device(self, s):
        return s.device.index if s.device.index is not None else self.device

    def new_event_on(self, s):
        e = self.t.cuda.Event()
        e.record(s)
        raw = e.cuda_event if hasattr(e, "cuda_event") else e._as_parameter_.value
        return e, int(raw), "torch.cuda.Event().record(A); e.cuda_event"


class CupyOps:
    name = "cupy"

    def __init__(self, cp):
        self.cp = cp
        self.device = cp.cuda.Device().id
        self._spin = None

    def new_stream(self):
        return self.cp.cuda.Stream(non_blocking=True)

    def handle(self, s):
        return int(s.ptr)

    def wrap_external(self, h):
        S = self.cp.cuda.Stream
        if hasattr(S, "from_external"):
            return S.from_external(ForeignStream(h)), "cupy.cuda.Stream.from_external(__cuda_stream__)"
        return (
            self.cp.cuda.ExternalStream(h, self.device),
            "cupy.cuda.ExternalStream(handle) (this CuPy has no Stream.from_external)",
        )

    def alloc(self, n, init):
        a = self.cp.full((n,), init, dtype=self.cp.uint32)
        self.cp.cuda.Device().synchronize()
        return a

    def ptr(self, a):
        return int(a.data.ptr)

    def busy(self, s):
        cp = self.cp
        with s:
            if self._spin is not False:
                try:
                    if self._spin is None:
                        self._spin = cp.RawKernel(
                            r"""extern "C" __global__ void csi_spin(long long cycles) {
                                long long start = clock64();
                                while (clock64() - start < cycles) { }
                            }""",
                            "csi_spin",
                        )
                    self._spin((1,), (1,), (cp.int64(SPIN_CYCLES),))
                    return f"cupy.RawKernel clock64 spin ({SPIN_CYCLES} cycles)"
                except Exception as e:  # no NVRTC: fall back to plain elementwise work
                    info(f"cupy RawKernel spin unavailable ({e!r}); using elementwise loop")
                    self._spin = False
            x = cp.ones((1 << 26,), dtype=cp.float32)
            for _ in range(100):
                x *= 1.0001
            return "100 elementwise passes over 256 MiB"

    def fill(self, s, a, v):
        with s:
            a.fill(v)

    def query(self, s):
        return s.done

    def sync(self, s):
        s.synchronize()

    def check(self, s, a, expected):
        cp = self.cp
        with s:
            bad = cp.count_nonzero(a != cp.uint32(expected))
            head = a[:4].copy()
        s.synchronize()
        nbad = int(bad.get())
        return nbad == 0, f"{nbad} of {a.size} wrong, head {head.get().tolist()}, expected {expected}"

    def stream_device(self, s):
        return self.device

    def new_event_on(self, s):
        e = self.cp.cuda.Event(disable_timing=True)
        e.record(s)
        return e, int(e.ptr), "cupy.cuda.Event().record(A); e.ptr"

    def native_wait_raw(self, s, event):
        self.cp.cuda.runtime.streamWaitEvent(s.ptr, event, 0)
        return "cupy.cuda.runtime.streamWaitEvent"


# ---------------------------------------------------------------------------------------------
# Checks shared by all frameworks. `ops` works on framework stream objects; `h(s)` is the raw
# handle Rust borrows; for cuda.core the stream objects are the allocating framework's wrappers
# of cuda.core's handles.


def guarded(name, fn):
    try:
        fn()
    except Exception as e:
        report(name, False, f"{type(e).__name__}: {e}")
        traceback.print_exc(limit=4, file=sys.stdout)


def check_same_stream(csi, label, ops, s, h, value, fill=None):
    """Framework writes on s after a long op, Rust reads+adds on s, framework reads on s."""
    a = ops.alloc(N, INIT)
    producer = ops.busy(s)
    how = (fill or ops.fill)(s, a, value) or f"{ops.name} fill"
    csi.add(h, ops.ptr(a), N, ADD)
    busy = not ops.query(s)
    ok, detail = ops.check(s, a, value + ADD)
    report(
        f"{label}: framework write -> Rust add -> framework read, same stream",
        ok,
        f"{detail}; producer {producer}, write by {how}; stream still busy when Rust enqueued: {busy}",
    )
    return a


def check_borrowed_memory(csi, label, ops, s, h, value):
    """The framework writes a tensor on s after a long op; Rust borrows it and another tensor as
    BorrowedBuffers and copies between them on a stream of its own, with no event by hand; the
    framework then reads the copy on s. Right only if the copy waited for the write and s waited
    for the copy."""
    a = ops.alloc(N, INIT)
    b = ops.alloc(N, INIT)
    producer = ops.busy(s)
    ops.fill(s, a, value)
    csi.borrowed_copy(h, ops.ptr(a), ops.ptr(b), N)
    busy = not ops.query(s)
    ok, detail = ops.check(s, b, value)
    report(
        f"{label}: framework write -> Rust copy of borrowed tensors on its own stream -> framework read",
        ok and busy,
        f"{detail}; producer {producer}; returned while the stream was busy (no host wait): {busy}",
    )


def check_rust_event(csi, label, ops, sa, sb, ha, hb, value, native_waiter=None):
    """Rust records an event on A after its add; B waits (Rust, and natively where possible);
    the framework reads on B."""
    a = ops.alloc(N, INIT)
    producer = ops.busy(sa)
    ops.fill(sa, a, value)
    csi.add(ha, ops.ptr(a), N, ADD)
    ev = csi.record_event(ha)
    try:
        csi.wait_event(hb, ev)
        busy = not ops.query(sa)
        ok, detail = ops.check(sb, a, value + ADD)
        report(
            f"{label}: Rust event on A, csi_wait_event on B, framework reads on B",
            ok,
            f"{detail}; producer {producer}; A still busy when B waited: {busy}",
        )
        if native_waiter is None:
            skip(f"{label}: native wait on a Rust event", f"{ops.name} cannot wrap a raw CUevent")
        else:
            sc, waiter = native_waiter
            b = ops.alloc(N, INIT)
            ops.busy(sa)
            ops.fill(sa, b, value + 1)
            csi.add(ha, ops.ptr(b), N, ADD)
            ev2 = csi.record_event(ha)
            try:
                used = waiter(sc, ev2)
                ok, detail = ops.check(sc, b, value + 1 + ADD)
                report(f"{label}: Rust event on A, {used} on C, framework reads on C", ok, detail)
            finally:
                csi.destroy_event(ev2)
    finally:
        csi.destroy_event(ev)


def check_framework_event(csi, label, ops, sa, sb, hb, value, make_event):
    """The framework records an event on A after its write; Rust makes B wait on it and adds on B;
    the framework reads on B."""
    a = ops.alloc(N, INIT)
    producer = ops.busy(sa)
    ops.fill(sa, a, value)
    keep, raw, how = make_event(sa)
    csi.wait_event(hb, raw)
    csi.add(hb, ops.ptr(a), N, ADD)
    busy = not ops.query(sa)
    ok, detail = ops.check(sb, a, value + ADD)
    report(
        f"{label}: framework event on A ({how}), Rust waits on B and adds on B",
        ok,
        f"{detail}; producer {producer}; A still busy when Rust enqueued: {busy}",
    )
    del keep


def check_still_usable(csi, label, ops, s, h, value):
    a = ops.alloc(N, INIT)
    ops.fill(s, a, value)
    ops.sync(s)
    done = ops.query(s)
    ok, detail = ops.check(s, a, value)
    report(f"{label}: stream still usable by the framework after the calls", ok and done, f"{detail}; idle after sync: {done}")
    producer = ops.busy(s)
    csi.fill(h, ops.ptr(a), N, value + 1)
    ok, detail = ops.check(s, a, value + 1)
    report(f"{label}: csi_fill_u32 on the borrowed stream, framework reads after", ok, f"{detail}; after {producer}")


def check_nccl_all_reduce(csi, label, ops, s, h, value):
    """An NCCL all-reduce (one rank) on the borrowed framework stream, after the framework's
    long op there; the framework reads the result on its stream."""
    name = f"{label}: NCCL all-reduce on the borrowed stream, framework reads after"
    if not hasattr(csi.lib, "csi_nccl_all_reduce_u32"):
        skip(name, "the interop library was built without the nccl feature")
        return
    a = ops.alloc(N, INIT)
    producer = ops.busy(s)
    try:
        csi._call("csi_nccl_all_reduce_u32", h, ops.ptr(a), N, value)
    except CsiError as e:
        if "no usable NCCL" in str(e):
            skip(name, str(e))
            return
        raise
    ok, detail = ops.check(s, a, value)
    report(name, ok, f"{detail}; after {producer}")


def check_device(csi, label, h, expected):
    got = csi.stream_device(h)
    report(f"{label}: csi_stream_device matches the framework's device", got == expected, f"rust {got}, framework {expected}")


def check_rust_stream_lent(csi, label, ops, device, wrap, value, fill=None):
    """A Rust-owned stream lent to the framework: the framework enqueues a long op and a fill on
    it; Rust synchronizes its stream and checks every element."""
    h = csi.stream_create(device)
    try:
        s, how = wrap(h)
        info(f"{label}: wrapped the Rust stream {h:#x} with {how}")
        a = ops.alloc(N, INIT)
        producer = ops.busy(s)
        fill_how = (fill or ops.fill)(s, a, value) or f"{ops.name} fill"
        busy = not ops.query(s)
        try:
            csi.stream_wait_and_check(h, ops.ptr(a), N, value)
            ok, detail = True, "all elements match"
        except CsiError as e:
            ok, detail = False, str(e)
        report(
            f"{label}: framework work on a Rust stream ({how}), Rust waits and checks",
            ok,
            f"{detail}; producer {producer}, write by {fill_how}; busy when Rust waited: {busy}",
        )
        del s
    finally:
        csi.stream_destroy(h)


# ---------------------------------------------------------------------------------------------
# Graph capture begun by the framework, Rust enqueueing into it

GRAPH_N = 1 << 16  # elements of the graph test's buffer
REPLAYS = 50  # replays, each checked
NOT_CAPTURING = -8  # CSI_ERR_NOT_CAPTURING


def wait_freed(csi, alive_before, seconds=5.0):
    """Waits for the Rust host functions to be freed (the driver frees a graph's user objects on
    its own thread, after the graph is destroyed)."""
    deadline = time.monotonic() + seconds
    while csi.host_fns_alive() > alive_before and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.01)
    return csi.host_fns_alive() - alive_before


def check_outside_capture(csi, label, h):
    status, cid = csi.capture_status(h)
    report(f"{label}: csi_capture_status outside a capture is 'none'", status == 0, f"status {status}, id {cid}")
    try:
        csi.capture_add_and_count(h, 0, 0, 0)
        report(f"{label}: enqueueing into a capture is refused when there is none", False, "it was accepted")
    except CsiError as e:
        report(f"{label}: enqueueing into a capture is refused when there is none", e.rc == NOT_CAPTURING, str(e))


def check_replays(csi, label, replay, read_bad, runs0, per_replay):
    """Replays REPLAYS times; after each, every element must be `per_replay * i` and the Rust host
    function must have run `i` times."""
    for i in range(1, REPLAYS + 1):
        replay()
        bad, head = read_bad(per_replay * i)
        runs = csi.host_fn_runs() - runs0
        if bad or runs != i:
            report(
                f"{label}: {REPLAYS} replays of the framework's and Rust's work",
                False,
                f"replay {i}: {bad} of {GRAPH_N} wrong (head {head}, expected {per_replay * i}), Rust host function ran {runs} times",
            )
            return False
    report(
        f"{label}: {REPLAYS} replays of the framework's and Rust's work",
        True,
        f"every element {per_replay * REPLAYS}, Rust host function ran {REPLAYS} times, checked after each replay",
    )
    return True


def check_torch_graph(csi, ops, mode):
    torch = ops.t
    label = f"torch.cuda.graph (capture_error_mode={mode})"
    a = torch.zeros((GRAPH_N,), dtype=torch.int32, device=f"cuda:{ops.device}")
    h0 = ops.handle(torch.cuda.current_stream())
    check_outside_capture(csi, label, h0)
    # Loads Rust's kernel outside any capture (loading a module could break one).
    csi.add(h0, a.data_ptr(), GRAPH_N, 0)
    a.add_(0)
    torch.cuda.synchronize()
    runs0, alive0 = csi.host_fn_runs(), csi.host_fns_alive()
    g = torch.cuda.CUDAGraph()
    inside = {}
    kwargs = {} if mode == "default" else {"capture_error_mode": mode}
    with torch.cuda.graph(g, **kwargs):
        h = ops.handle(torch.cuda.current_stream())
        inside["status"] = csi.capture_status(h)
        a.add_(1)  # PyTorch's work
        csi.capture_add_and_count(h, a.data_ptr(), GRAPH_N, 10)  # Rust's kernel and host function
        a.add_(100)  # PyTorch's again, after Rust's
    status, cid = inside["status"]
    report(f"{label}: Rust sees the capture on PyTorch's capture stream", status == 1 and cid != 0, f"status {status}, capture id {cid}")
    torch.cuda.synchronize()
    idle = csi.host_fn_runs() == runs0 and int((a != 0).sum()) == 0
    report(f"{label}: nothing ran during the capture", idle, f"host function runs {csi.host_fn_runs() - runs0}")
    report(f"{label}: the capture owns one Rust closure", csi.host_fns_alive() - alive0 == 1, f"alive {csi.host_fns_alive() - alive0}")

    def replay():
        g.replay()
        torch.cuda.synchronize()

    def read_bad(expected):
        return int((a != expected).sum()), a[:4].tolist()

    check_replays(csi, label, replay, read_bad, runs0, 111)
    del g
    left = wait_freed(csi, alive0)
    report(f"{label}: the Rust closure is freed with the graph", left == 0, f"{left} still alive")


def check_cupy_graph(csi, ops):
    cp = ops.cp
    label = "cupy Stream.begin_capture"
    s = ops.new_stream()
    if not hasattr(s, "begin_capture"):
        skip(label, "this CuPy has no Stream.begin_capture")
        return
    a = cp.zeros((GRAPH_N,), dtype=cp.uint32)
    check_outside_capture(csi, label, s.ptr)
    with s:
        a += 1  # compiles and loads CuPy's kernel outside any capture
        a -= 1
    csi.add(s.ptr, int(a.data.ptr), GRAPH_N, 0)
    s.synchronize()
    runs0, alive0 = csi.host_fn_runs(), csi.host_fns_alive()
    with s:
        s.begin_capture()
        try:
            status, cid = csi.capture_status(s.ptr)
            a += 1
            csi.capture_add_and_count(s.ptr, int(a.data.ptr), GRAPH_N, 10)
        finally:
            graph = s.end_capture()
    report(f"{label}: Rust sees the capture on CuPy's stream", status == 1 and cid != 0, f"status {status}, capture id {cid}")

    def replay():
        graph.launch(stream=s)
        s.synchronize()

    def read_bad(expected):
        return int(cp.count_nonzero(a != cp.uint32(expected)).get()), a[:4].get().tolist()

    check_replays(csi, label, replay, read_bad, runs0, 11)
    del graph
    left = wait_freed(csi, alive0)
    report(f"{label}: the Rust closure is freed with the graph", left == 0, f"{left} still alive")


# ---------------------------------------------------------------------------------------------


def import_framework(module):
    try:
        return importlib.import_module(module), None
    except Exception as e:  # ImportError, or a broken install
        return None, e


def run_torch(csi):
    torch, err = import_framework("torch")
    if torch is None:
        skip(f"torch not installed ({err})")
        return
    if not torch.cuda.is_available():
        skip("torch", "torch has no CUDA device")
        return
    ops = TorchOps(torch)
    info(f"torch {torch.__version__}, device {ops.device}, _sleep: {hasattr(torch.cuda, '_sleep')}")
    sa, sb = ops.new_stream(), ops.new_stream()
    ha, hb = ops.handle(sa), ops.handle(sb)
    guarded("torch.cuda.Stream", lambda: check_same_stream(csi, "torch.cuda.Stream", ops, sa, ha, 1001))

    cur = torch.cuda.current_stream()
    hc = ops.handle(cur)
    info(f"torch.cuda.current_stream().cuda_stream = {hc:#x}")
    guarded("torch.cuda.current_stream", lambda: check_same_stream(csi, "torch.cuda.current_stream", ops, cur, hc, 1002))
    guarded("torch.cuda.current_stream device", lambda: check_device(csi, "torch.cuda.current_stream", hc, ops.stream_device(cur)))

    guarded("torch Rust event", lambda: check_rust_event(csi, "torch", ops, sa, sb, ha, hb, 1003, None))
    guarded("torch borrowed tensors", lambda: check_borrowed_memory(csi, "torch", ops, sa, ha, 1009))
    guarded("torch framework event", lambda: check_framework_event(csi, "torch", ops, sa, sb, hb, 1005, ops.new_event_on))
    guarded("torch usable", lambda: check_still_usable(csi, "torch.cuda.Stream", ops, sa, ha, 1006))
    guarded("torch nccl", lambda: check_nccl_all_reduce(csi, "torch.cuda.Stream", ops, sa, ha, 1010))
    guarded("torch device", lambda: check_device(csi, "torch.cuda.Stream", ha, ops.stream_device(sa)))
    guarded("torch lent", lambda: check_rust_stream_lent(csi, "torch", ops, ops.device, ops.wrap_external, 1008))
    for mode in ("default", "thread_local"):
        guarded(f"torch graph {mode}", lambda: check_torch_graph(csi, ops, mode))
    torch.cuda.synchronize()


def run_cupy(csi):
    cp, err = import_framework("cupy")
    if cp is None:
        skip(f"cupy not installed ({err})")
        return
    try:
        ndev = cp.cuda.runtime.getDeviceCount()
    except Exception as e:
        ndev, err = 0, e
    if ndev == 0:
        skip("cupy", f"cupy has no CUDA device ({err})")
        return
    ops = CupyOps(cp)
    info(f"cupy {cp.__version__}, device {ops.device}, Stream.from_external: {hasattr(cp.cuda.Stream, 'from_external')}")
    sa, sb = ops.new_stream(), ops.new_stream()
    ha, hb = ops.handle(sa), ops.handle(sb)
    guarded("cupy.cuda.Stream", lambda: check_same_stream(csi, "cupy.cuda.Stream(non_blocking=True)", ops, sa, ha, 2001))
    guarded("cupy Rust event", lambda: check_rust_event(csi, "cupy", ops, sa, sb, ha, hb, 2003, (ops.new_stream(), ops.native_wait_raw)))
    guarded("cupy framework event", lambda: check_framework_event(csi, "cupy", ops, sa, sb, hb, 2005, ops.new_event_on))
    guarded("cupy borrowed arrays", lambda: check_borrowed_memory(csi, "cupy", ops, sa, ha, 2009))
    guarded("cupy usable", lambda: check_still_usable(csi, "cupy.cuda.Stream", ops, sa, ha, 2006))
    guarded("cupy device", lambda: check_device(csi, "cupy.cuda.Stream", ha, ops.stream_device(sa)))
    guarded("cupy lent", lambda: check_rust_stream_lent(csi, "cupy", ops, ops.device, ops.wrap_external, 2008))
    guarded("cupy graph", lambda: check_cupy_graph(csi, ops))
    cp.cuda.Device().synchronize()


def import_cuda_core():
    errors = []
    for module in ("cuda.core", "cuda.core.experimental"):
        try:
            m = importlib.import_module(module)
            if hasattr(m, "Device"):
                return m, module, None
            errors.append(f"{module} has no Device")
        except Exception as e:
            errors.append(f"{module}: {e}")
    return None, None, "; ".join(errors)


def run_cuda_core(csi):
    cc, module, err = import_cuda_core()
    if cc is None:
        skip(f"cuda.core not installed ({err})")
        return
    # Memory and the long-running op come from an allocating framework, ordered on cuda.core's
    # streams through their handles.
    alloc = None
    for name, make in (("torch", TorchOps), ("cupy", CupyOps)):
        m, _ = import_framework(name)
        try:
            if m is not None and (m.cuda.is_available() if name == "torch" else m.cuda.runtime.getDeviceCount() > 0):
                alloc = make(m)
                break
        except Exception:
            continue
    if alloc is None:
        skip("cuda.core", "needs torch or cupy to allocate memory; neither is usable")
        return
    dev = cc.Device(alloc.device)
    dev.set_current()
    info(f"cuda.core from {module} {getattr(cc, '__version__', '?')}, device {dev.device_id}, memory and producer from {alloc.name}")
    A, B = dev.create_stream(), dev.create_stream()
    ha, hb = int(A.handle), int(B.handle)

    def wrap(h):
        return alloc.wrap_external(h)[0]

    wa, wb = wrap(ha), wrap(hb)

    Buffer = getattr(cc, "Buffer", None)
    if Buffer is None:
        try:
            Buffer = importlib.import_module(module + "._memory").Buffer
        except Exception:
            Buffer = None

    def native_fill(cstream):
        """Fill through cuda.core itself (Buffer.fill on the cuda.core stream) where it can."""

        def fill(s_wrapped, a, v):
            if Buffer is not None and hasattr(Buffer, "from_handle") and hasattr(Buffer, "fill"):
                buf = Buffer.from_handle(alloc.ptr(a), 4 * N)
                buf.fill(struct.pack("=I", v), stream=cstream)
                return "cuda.core Buffer.fill on the cuda.core stream"
            alloc.fill(s_wrapped, a, v)
            return f"{alloc.name} fill on the cuda.core stream's handle (no Buffer.fill here)"

        return fill

    guarded("cuda.core stream", lambda: check_same_stream(csi, "cuda.core Stream", alloc, wa, ha, 3001, native_fill(A)))

    def bindings_wait(s_wrapped, event):
        from cuda.bindings import driver

        (rc,) = driver.cuStreamWaitEvent(driver.CUstream(alloc.handle(s_wrapped)), driver.CUevent(event), 0)
        if int(rc) != 0:
            raise RuntimeError(f"cuStreamWaitEvent: {rc}")
        return "cuda.bindings.driver.cuStreamWaitEvent"

    C = dev.create_stream()
    guarded("cuda.core Rust event", lambda: check_rust_event(csi, "cuda.core", alloc, wa, wb, ha, hb, 3003, (wrap(int(C.handle)), bindings_wait)))

    def cc_event(_s_wrapped):
        e = A.record()
        return e, int(e.handle), "cuda.core Stream.record(); int(event.handle)"

    guarded("cuda.core framework event", lambda: check_framework_event(csi, "cuda.core", alloc, wa, wb, hb, 3005, cc_event))

    def usable():
        A.sync()
        check_still_usable(csi, "cuda.core Stream", alloc, wa, ha, 3006)
        ev = A.record()
        ev.sync()
        A.sync()
        report("cuda.core Stream: record/sync through cuda.core after the calls", True, f"event done: {ev.is_done}")

    guarded("cuda.core usable", usable)
    guarded("cuda.core device", lambda: check_device(csi, "cuda.core Stream", ha, A.device.device_id))

    def lend(h):
        Stream = getattr(cc, "Stream", None) or type(A)
        if hasattr(Stream, "from_handle"):
            cs, how = Stream.from_handle(h), "cuda.core Stream.from_handle(handle)"
        else:
            cs, how = dev.create_stream(ForeignStream(h)), "cuda.core Device.create_stream(__cuda_stream__)"
        if int(cs.handle) != h:
            raise RuntimeError(f"cuda.core reports handle {int(cs.handle):#x} for {h:#x}")
        lend.cs = cs
        return wrap(int(cs.handle)), how

    def lent_fill(s_wrapped, a, v):
        return native_fill(lend.cs)(s_wrapped, a, v)

    guarded("cuda.core lent", lambda: check_rust_stream_lent(csi, "cuda.core", alloc, alloc.device, lend, 3008, lent_fill))
    lend.cs = None
    dev.sync()


def main():
    try:
        path, lib = load_library()
    except OSError as e:
        report("load the cdylib", False, str(e))
        print(f"{COUNTS['passed']} passed, {COUNTS['failed']} failed, {COUNTS['skipped']} skipped")
        return 1
    print(f"library: {path}", flush=True)
    csi = Csi(lib)

    # The ABI's own error paths: need no driver and no GPU.
    rc = lib.csi_stream_wait_and_check(0xDEADBEEF, 0, 0, 0)
    report("unknown Rust stream handle is rejected", rc == -4 and "0xdeadbeef" in csi.last_error(), f"rc {rc}: {csi.last_error()}")
    rc = lib.csi_record_event(0x1234, None)
    report("null out-pointer is rejected", rc == -2 and "event_out" in csi.last_error(), f"rc {rc}: {csi.last_error()}")

    for run in (run_torch, run_cupy, run_cuda_core):
        try:
            run(csi)
        except Exception as e:
            report(run.__name__, False, f"{type(e).__name__}: {e}")
            traceback.print_exc(limit=6, file=sys.stdout)

    print(f"{COUNTS['passed']} passed, {COUNTS['failed']} failed, {COUNTS['skipped']} skipped")
    return 1 if COUNTS["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
