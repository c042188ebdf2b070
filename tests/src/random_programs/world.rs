//! The objects a program runs on: the process-wide [`Env`] (contexts, the kernels' modules,
//! memory pools, stream pools) and a program's [`World`] (its streams, buffers, page-locked
//! buffers and executable graphs, each behind a lock: the operations' order keeps the locks
//! uncontended but for shared reads), made before the program and torn down after it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};

use cuda_stream::ffi::{self, CUresult};
use cuda_stream::{
    AsStream, BorrowedBuffer, Context, DeviceBuffer, Error, GraphExec, ManagedBuffer, MemPool,
    Module, OwnedStream, PinnedHostBuffer, PooledStream, Result, Stream, StreamOptions, StreamPool,
};

use super::program::{Program, StreamKind};
use super::{Config, Harness, RP_PTX};

/// What every program of a process shares.
#[derive(Debug)]
pub struct Env {
    pub cfg: Config,
    pub ctxs: Vec<Context>,
    pub modules: Vec<Module>,
    pub mem_pools: Vec<Option<MemPool>>,
    pub stream_pools: Vec<StreamPool>,
}

impl Env {
    /// The contexts of the first `cfg.devices` devices, peer access both ways, the kernels
    /// loaded in each, a memory pool where `cfg.pools` says, a stream pool each.
    pub fn new(cfg: Config) -> Result<Env> {
        let ctxs: Vec<Context> = (0..cfg.devices)
            .map(Context::primary)
            .collect::<Result<_>>()?;
        if ctxs.len() == 2 && ctxs[0].device().can_access_peer(ctxs[1].device())? {
            ctxs[0].enable_peer_access(&ctxs[1])?;
            ctxs[1].enable_peer_access(&ctxs[0])?;
        }
        let modules = ctxs
            .iter()
            .map(|c| Module::from_ptx(c, RP_PTX))
            .collect::<Result<_>>()?;
        let mem_pools = ctxs
            .iter()
            .enumerate()
            .map(|(i, c)| {
                if cfg.pools[i] {
                    MemPool::new(c).map(Some)
                } else {
                    Ok(None)
                }
            })
            .collect::<Result<_>>()?;
        let stream_pools = ctxs
            .iter()
            .map(|c| StreamPool::new(c, StreamOptions::new()))
            .collect();
        Ok(Env {
            cfg,
            ctxs,
            modules,
            mem_pools,
            stream_pools,
        })
    }
}

/// A raw driver handle, usable from any thread.
#[derive(Debug, Clone, Copy)]
pub struct Raw(pub usize);

impl Raw {
    pub fn stream(self) -> ffi::CUstream {
        self.0 as ffi::CUstream
    }
}

/// What a stream slot holds.
#[derive(Debug)]
pub enum StreamObj<'e> {
    Gone,
    Owned(OwnedStream),
    Pooled(PooledStream<'e>),
    Borrowed(Raw),
    Legacy,
    PerThread,
}

/// What a buffer slot holds.
#[derive(Debug)]
pub enum BufObj {
    Empty,
    Own(DeviceBuffer<u32>),
    /// Managed memory.
    Managed(ManagedBuffer<u32>),
    /// Memory the test owns (`cuMemAlloc`, `ptr`) on its raw stream `owner`, borrowed.
    Borrowed {
        buf: BorrowedBuffer<'static, u32>,
        ptr: u64,
        owner: Raw,
    },
}

impl BufObj {
    pub fn get(&self) -> &DeviceBuffer<u32> {
        match self {
            BufObj::Own(b) => b,
            BufObj::Managed(m) => m,
            BufObj::Borrowed { buf, .. } => buf,
            BufObj::Empty => panic!("the generator used an empty buffer slot"),
        }
    }
}

fn check(rc: CUresult, call: &'static str) -> Result<()> {
    if rc == CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(Error::Refused {
            call,
            reason: "a raw driver call of the test failed",
        })
    }
}

/// A raw stream of `ctx` (another library's), non-blocking.
pub fn raw_stream(ctx: &Context) -> Result<Raw> {
    let _bound = ctx.bind()?;
    let mut s = std::ptr::null_mut();
    // SAFETY: a valid out-pointer; the context is current.
    let rc = unsafe { cuda_stream_sys::cuStreamCreate(&mut s, 1) };
    check(rc, "cuStreamCreate")?;
    Ok(Raw(s as usize))
}

/// Destroys a raw stream made by [`raw_stream`].
pub fn raw_destroy(s: Raw) {
    // SAFETY: made by `raw_stream`, destroyed once.
    let _ = unsafe { cuda_stream_sys::cuStreamDestroy(s.stream()) };
}

/// One program's objects.
pub struct World<'e> {
    pub env: &'e Env,
    pub prog: &'e Program,
    pub h: &'e dyn Harness,
    pub streams: Vec<RwLock<StreamObj<'e>>>,
    pub bufs: Vec<RwLock<BufObj>>,
    pub pinned: Vec<RwLock<PinnedHostBuffer<u32>>>,
    pub execs: Vec<Mutex<Option<GraphExec>>>,
    /// Runs of the program's host functions (replays included).
    pub host_fns: Arc<AtomicU64>,
    /// Streams handed over (`into_raw`) inside host functions, destroyed by the teardown.
    pub handed_over: Arc<Mutex<Vec<Raw>>>,
}

fn read<T>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|e| e.into_inner())
}

fn write<T>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|e| e.into_inner())
}

impl<'e> World<'e> {
    pub fn new(env: &'e Env, prog: &'e Program, h: &'e dyn Harness) -> Result<World<'e>> {
        // The program's cache limit on every pool (the default pools and the env's own).
        for c in &env.ctxs {
            if let Ok(pool) = MemPool::default_for(c) {
                pool.set_cache_limit(prog.cache_limit);
            }
        }
        for pool in env.mem_pools.iter().flatten() {
            pool.set_cache_limit(prog.cache_limit);
        }
        let mut streams = Vec::new();
        for sp in &prog.streams {
            streams.push(RwLock::new(Self::make_stream(env, sp.kind, sp.ctx)?));
        }
        let pinned = (0..prog.pinned)
            .map(|_| PinnedHostBuffer::zeroed(&env.ctxs[0], prog.len).map(RwLock::new))
            .collect::<Result<_>>()?;
        Ok(World {
            env,
            prog,
            h,
            streams,
            bufs: (0..prog.buffers.len())
                .map(|_| RwLock::new(BufObj::Empty))
                .collect(),
            pinned,
            execs: (0..prog.execs).map(|_| Mutex::new(None)).collect(),
            host_fns: Arc::new(AtomicU64::new(0)),
            handed_over: Arc::new(Mutex::new(Vec::new())),
        })
    }

    pub fn make_stream(env: &'e Env, kind: StreamKind, ctx: usize) -> Result<StreamObj<'e>> {
        let c = &env.ctxs[ctx];
        Ok(match kind {
            StreamKind::Owned => StreamObj::Owned(c.new_stream()?),
            StreamKind::Pooled => StreamObj::Pooled(env.stream_pools[ctx].acquire()?),
            StreamKind::Borrowed => StreamObj::Borrowed(raw_stream(c)?),
            StreamKind::Legacy => StreamObj::Legacy,
            StreamKind::PerThread => StreamObj::PerThread,
        })
    }

    pub fn ctx(&self, i: usize) -> &'e Context {
        &self.env.ctxs[i]
    }

    /// Runs `f` with a view of stream slot `s`.
    pub fn with_stream<R>(&self, s: usize, f: impl FnOnce(Stream<'_>) -> Result<R>) -> Result<R> {
        let g = read(&self.streams[s]);
        let ctx = self.ctx(self.prog.streams[s].ctx);
        match &*g {
            StreamObj::Owned(o) => f(o.as_stream()),
            StreamObj::Pooled(p) => f(p.as_stream()),
            StreamObj::Borrowed(raw) => {
                let owner = ();
                // SAFETY: the raw stream lives until the slot's `DropStream`, which the
                // program orders after every use of the slot.
                let view = unsafe { Stream::borrow_raw(raw.stream(), &owner) }?;
                f(view)
            }
            StreamObj::Legacy => f(ctx.legacy_stream()),
            StreamObj::PerThread => f(ctx.per_thread_stream()),
            StreamObj::Gone => panic!("the generator used stream s{s} after its drop"),
        }
    }

    pub fn buf(&self, b: usize) -> RwLockReadGuard<'_, BufObj> {
        read(&self.bufs[b])
    }

    pub fn buf_mut(&self, b: usize) -> RwLockWriteGuard<'_, BufObj> {
        write(&self.bufs[b])
    }

    pub fn stream_mut(&self, s: usize) -> RwLockWriteGuard<'_, StreamObj<'e>> {
        write(&self.streams[s])
    }

    pub fn pinned(&self, p: usize) -> RwLockReadGuard<'_, PinnedHostBuffer<u32>> {
        read(&self.pinned[p])
    }

    pub fn pinned_mut(&self, p: usize) -> RwLockWriteGuard<'_, PinnedHostBuffer<u32>> {
        write(&self.pinned[p])
    }

    pub fn host_fn(&self) -> impl Fn() + Send + Sync + 'static {
        let n = self.host_fns.clone();
        move || {
            n.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// After the program: waits for every stream's work, ends the borrows (the owner reads
    /// and frees its memory), drops everything, waits for the contexts and the frees. Returns
    /// the problems (errors of these calls).
    pub fn teardown(self) -> Vec<String> {
        let mut problems = Vec::new();
        let mut note = |what: &str, r: Result<()>| {
            if let Err(e) = r {
                problems.push(format!("teardown: {what}: {e}"));
            }
        };
        for s in 0..self.streams.len() {
            if !matches!(&*read(&self.streams[s]), StreamObj::Gone) {
                note(
                    &format!("s{s}.synchronize()"),
                    self.with_stream(s, |st| st.synchronize()),
                );
            }
        }
        for c in &self.env.ctxs {
            note("context synchronize", c.synchronize());
        }
        for e in self.execs {
            drop(e.into_inner().unwrap_or_else(|e| e.into_inner()));
        }
        for (b, slot) in self.bufs.into_iter().enumerate() {
            match slot.into_inner().unwrap_or_else(|e| e.into_inner()) {
                BufObj::Empty => {}
                BufObj::Own(buf) => drop(buf),
                BufObj::Managed(buf) => drop(buf),
                BufObj::Borrowed { buf, ptr, owner } => {
                    let ctx = &self.env.ctxs[self.prog.buffers[b]];
                    note("release", buf.release());
                    note("the owner's free", free_owned(ctx, ptr, owner));
                }
            }
        }
        for s in self.streams {
            if let StreamObj::Borrowed(raw) = s.into_inner().unwrap_or_else(|e| e.into_inner()) {
                // SAFETY: a live raw stream of the program.
                let _ = unsafe { cuda_stream_sys::cuStreamSynchronize(raw.stream()) };
                raw_destroy(raw);
            }
        }
        drop(self.pinned);
        let handed =
            std::mem::take(&mut *self.handed_over.lock().unwrap_or_else(|e| e.into_inner()));
        for raw in handed {
            // SAFETY: a live stream handed over by `into_raw`, ours to destroy once.
            let _ = unsafe { cuda_stream_sys::cuStreamSynchronize(raw.stream()) };
            raw_destroy(raw);
        }
        // Until every free has been made: those deferred out of host functions, those waiting
        // for events (plain memory), those of graphs let go on the driver's thread, and the
        // blocks those frees left on streams that outlive the program (the stream pools').
        for _ in 0..1000 {
            self.h.settle();
            cuda_stream::drain_deferred();
            cuda_stream::poll_pending_frees();
            for c in &self.env.ctxs {
                c.release_cached();
            }
            for c in &self.env.ctxs {
                note("context synchronize", c.synchronize());
            }
            self.h.settle();
            if cuda_stream::pending_frees() == 0 && cuda_stream::deferred_pending() == 0 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
        problems
    }
}

/// The owner of borrowed memory frees it once its stream's work is done.
pub fn free_owned(ctx: &Context, ptr: u64, owner: Raw) -> Result<()> {
    let _bound = ctx.bind()?;
    // SAFETY: the owner's live raw stream and its own allocation, freed once, after the
    // stream's work (which the end of the borrow ordered after the borrow's uses).
    unsafe {
        check(
            cuda_stream_sys::cuStreamSynchronize(owner.stream()),
            "cuStreamSynchronize",
        )?;
        check(cuda_stream_sys::cuMemFree(ptr), "cuMemFree")?;
    }
    raw_destroy(owner);
    Ok(())
}
