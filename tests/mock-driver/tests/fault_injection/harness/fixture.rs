//! The objects the operations use without creating them, the table's row type, and one run of
//! a row.

use cuda_mock_driver::MockDriver;
use cuda_stream::ffi;
use cuda_stream::{
    Context, DeviceBuffer, Event, EventOptions, Module, OwnedStream, Result, StreamOptions,
    StreamPool, poll_pending_frees,
};

use super::{SUCCESS, on_fresh_thread, raw_destroy, raw_stream, settle};

/// The module the kernel operations load: one kernel with a pointer and a count.
pub(crate) const PTX: &str = ".version 7.0\n.target sm_50\n.address_size 64\n\
    .visible .entry scale(.param .u64 scale_x, .param .u32 scale_n)\n{\n\tret;\n}\n";

/// Objects the operations use without creating them.
pub(crate) struct Fixture {
    pub(crate) ctx: Context,
    /// Device 1's primary context.
    pub(crate) ctx1: Context,
    /// A non-blocking owned stream.
    pub(crate) owned: OwnedStream,
    /// A blocking owned stream: the partner of `wait_stream`.
    pub(crate) other: OwnedStream,
    /// A stream created with raw calls, only ever borrowed (a `usize` so the fixture is `Sync`).
    pub(crate) borrowed: usize,
    /// An event the operations record (reused).
    pub(crate) event: Event,
    /// An event recorded on `owned`.
    pub(crate) recorded: Event,
    /// An event of device 1's context.
    pub(crate) event1: Event,
    /// The pool the `pooled` stream kind leases from.
    pub(crate) pool: StreamPool,
    /// A module of [`PTX`], loaded in `ctx`.
    pub(crate) module: Module,
    /// 64 bytes of device memory in `ctx`.
    pub(crate) bytes: DeviceBuffer<u8>,
}

impl Fixture {
    pub(crate) fn new() -> Fixture {
        let ctx = Context::primary(0).expect("device 0");
        let ctx1 = Context::primary(1).expect("device 1");
        // The default pools keep no freed block: an operation's driver calls are then the same
        // in every run, whatever the runs before it left (the cases of the block cache use pools
        // of their own, emptied within the operation).
        for c in [&ctx, &ctx1] {
            if let Ok(pool) = cuda_stream::MemPool::default_for(c) {
                pool.set_cache_limit(0);
            }
        }
        let owned = ctx.new_stream().expect("stream");
        let other = ctx
            .new_stream_with(StreamOptions::new().blocking(true))
            .expect("stream");
        let borrowed = raw_stream(&ctx) as usize;
        let event = ctx.new_event(EventOptions::new()).expect("event");
        let recorded = owned.record_event().expect("record");
        // Recorded: a wait on an event never recorded makes no driver call.
        let event1 = ctx1
            .new_stream()
            .and_then(|s| s.record_event())
            .expect("event");
        let pool = StreamPool::new(&ctx, StreamOptions::new());
        let module = Module::from_ptx(&ctx, PTX).expect("module");
        let bytes = DeviceBuffer::zeroed(&ctx, &owned, 64).expect("buffer");
        Fixture {
            ctx,
            ctx1,
            owned,
            other,
            borrowed,
            event,
            recorded,
            event1,
            pool,
            module,
            bytes,
        }
    }

    pub(crate) fn borrowed_raw(&self) -> ffi::CUstream {
        self.borrowed as ffi::CUstream
    }

    /// The handles that must stay alive through every case.
    pub(crate) fn handles(&self) -> Vec<(&'static str, usize)> {
        vec![
            ("owned stream", self.owned.raw() as usize),
            ("other stream", self.other.raw() as usize),
            ("borrowed stream", self.borrowed),
            ("event", self.event.raw() as usize),
            ("recorded event", self.recorded.raw() as usize),
            ("device 1 event", self.event1.raw() as usize),
        ]
    }

    /// Drops everything; the borrowed stream must survive that, and is then destroyed raw.
    pub(crate) fn finish(self, m: &MockDriver) {
        let borrowed = self.borrowed_raw();
        let Fixture {
            ctx,
            ctx1,
            owned,
            other,
            event,
            recorded,
            event1,
            pool,
            module,
            bytes,
            ..
        } = self;
        let owned_raw = owned.raw();
        bytes.free().expect("free the fixture's buffer");
        module.close().expect("unload the fixture's module");
        drop((owned, other, event, recorded, event1, pool));
        assert_eq!(m.destroyed(owned_raw), Some(true));
        assert_eq!(
            m.destroyed(borrowed),
            Some(false),
            "a borrowed stream was destroyed"
        );
        assert_eq!(raw_destroy(borrowed), SUCCESS);
        drop((ctx, ctx1));
    }
}

pub(crate) type OpFn = Box<dyn Fn(&Fixture) -> Result<()> + Send + Sync>;

/// One public operation (or a short sequence that needs it), and the driver functions whose
/// failure it may swallow.
pub(crate) struct Op {
    pub(crate) name: String,
    pub(crate) swallowed: &'static [&'static str],
    /// Whether it frees a module or a buffer, which a failure may leave allocated (see
    /// [`expected_after`]).
    pub(crate) frees: bool,
    /// Swallowed calls whose number depends on timing (a spin's queries): a case failing one of
    /// them may find the call no longer made.
    pub(crate) varying: &'static [&'static str],
    pub(crate) run: OpFn,
}

impl Op {
    pub(crate) fn varying(mut self, varying: &'static [&'static str]) -> Op {
        self.varying = varying;
        self
    }
}

pub(crate) fn op(
    name: impl Into<String>,
    swallowed: &'static [&'static str],
    run: impl Fn(&Fixture) -> Result<()> + Send + Sync + 'static,
) -> Op {
    Op {
        name: name.into(),
        swallowed,
        frees: false,
        varying: &[],
        run: Box::new(run),
    }
}

/// [`op`] for an operation that frees a module or a buffer.
pub(crate) fn op_frees(
    name: impl Into<String>,
    swallowed: &'static [&'static str],
    run: impl Fn(&Fixture) -> Result<()> + Send + Sync + 'static,
) -> Op {
    Op {
        frees: true,
        ..op(name, swallowed, run)
    }
}

/// Runs one operation on a fresh thread; `Err` if it panicked. The run ends by waiting for its
/// host functions and device work (a stream-ordered free runs when its stream reaches it), by
/// making the frees of memory without pools whose uses have completed (`cuda-stream` makes them
/// at the next allocation or free; every use has completed once the queue is empty, so none may
/// remain), and by destroying the spare events it left in the fixture's contexts (their failure
/// is swallowed, as a drop's: the handle then stays alive, see [`expected_after`]).
pub(crate) fn run(fx: &Fixture, op: &Op) -> std::thread::Result<Result<()>> {
    on_fresh_thread(|| {
        let r = (op.run)(fx);
        settle();
        // A second poll makes a free whose first query was the failing call (it waits for the
        // next poll, as it would for the program's next allocation).
        if poll_pending_frees() != 0 {
            poll_pending_frees();
        }
        // A poll may enqueue a free (a kept block that could not be freed on its stream goes on
        // the context's service stream): the run ends once it has run.
        settle();
        let _ = fx.ctx.clear_event_cache();
        let _ = fx.ctx1.clear_event_cache();
        r
    })
}
