//! Fault cases of every stream operation on every kind of stream (owned, pooled, borrowed, and
//! the legacy, per-thread and null default streams): queries, events, waits, host functions, the
//! current-stream guard, completion, scopes with forks, launches, memsets and copies.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use cuda_stream::{
    AsStream, CaptureStatus, DeviceBuffer, EventOptions, LaunchConfig, Result, Stream,
    current_stream, kernel_args,
};

use crate::harness::fixture::{Fixture, Op, op, op_frees};
use crate::harness::swallowed::{
    SWALLOW_COMPLETED, SWALLOW_DROP, SWALLOW_MAKE_CURRENT, VARYING_COMPLETED,
};
use crate::harness::{ZST_DROPS, ZstDrop, block_on, flavour, token_check};

/// The streams every stream operation runs on.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Kind {
    Owned,
    Pooled,
    Borrowed,
    Legacy,
    PerThread,
    Null,
}

impl Kind {
    pub(crate) const ALL: [Kind; 6] = [
        Kind::Owned,
        Kind::Pooled,
        Kind::Borrowed,
        Kind::Legacy,
        Kind::PerThread,
        Kind::Null,
    ];
}

/// Runs `f` on a view of the fixture's stream of kind `kind`: the owned one, a lease of the
/// fixture's pool, the raw stream borrowed (`Stream::borrow_raw`, which calls the driver too), or
/// one of the context's default streams.
fn on_stream(fx: &Fixture, kind: Kind, f: impl FnOnce(Stream<'_>) -> Result<()>) -> Result<()> {
    match kind {
        Kind::Owned => f(fx.owned.as_stream()),
        Kind::Pooled => {
            let lease = fx.pool.acquire()?;
            f(lease.as_stream())
        }
        Kind::Borrowed => {
            // SAFETY: `fx.borrowed` is a live stream that only `Fixture::finish` destroys, after
            // every view of it (each borrows `fx`) is gone.
            let s = unsafe { Stream::borrow_raw(fx.borrowed_raw(), fx) }?;
            assert_eq!(s.context_raw(), fx.ctx.raw());
            f(s)
        }
        Kind::Legacy => f(fx.ctx.legacy_stream()),
        Kind::PerThread => f(fx.ctx.per_thread_stream()),
        Kind::Null => f(fx.ctx.null_stream()),
    }
}

/// The stream operations, on a stream of `kind`.
pub(crate) fn ops(kind: Kind) -> Vec<Op> {
    let k = kind;
    let name = |op: &str| format!("{k:?} stream: {op}");
    let mut ops = vec![
        op(name("query"), SWALLOW_DROP, move |fx| {
            on_stream(fx, k, |s| s.query().map(drop))
        }),
        op(name("synchronize"), SWALLOW_DROP, move |fx| {
            on_stream(fx, k, |s| s.synchronize())
        }),
        op(name("record_event"), SWALLOW_DROP, move |fx| {
            on_stream(fx, k, |s| {
                let e = s.record_event()?;
                assert!(e.is_recorded());
                Ok(())
            })
        }),
        op(name("record_event_with(timing)"), SWALLOW_DROP, move |fx| {
            on_stream(fx, k, |s| {
                s.record_event_with(EventOptions::new().timing(true))?
                    .synchronize()
            })
        }),
        op(name("record"), SWALLOW_DROP, move |fx| {
            on_stream(fx, k, |s| s.record(&fx.event))
        }),
        op(name("wait_event"), SWALLOW_DROP, move |fx| {
            on_stream(fx, k, |s| s.wait_event(&fx.recorded))
        }),
        op(name("wait_event(other context)"), SWALLOW_DROP, move |fx| {
            on_stream(fx, k, |s| s.wait_event(&fx.event1))
        }),
        op(name("wait_stream"), SWALLOW_DROP, move |fx| {
            on_stream(fx, k, |s| s.wait_stream(&fx.other))
        }),
        op(name("waited on by wait_stream"), SWALLOW_DROP, move |fx| {
            on_stream(fx, k, |s| fx.other.wait_stream(&s))
        }),
        op(name("launch_host_func"), SWALLOW_DROP, move |fx| {
            on_stream(fx, k, |s| {
                let token = Arc::new(());
                let t = token.clone();
                let r = s.launch_host_func(move || drop(t));
                token_check(&token, &r);
                r
            })
        }),
        // A closure that captures nothing takes another path (no allocation): it is dropped
        // by hand when refused. `ZstDrop` is zero-sized, so the closure is too.
        op(
            name("launch_host_func(capturing nothing)"),
            SWALLOW_DROP,
            move |fx| {
                on_stream(fx, k, |s| {
                    let before = ZST_DROPS.load(Ordering::SeqCst);
                    let z = ZstDrop;
                    let f = move || drop(z);
                    assert_eq!(std::mem::size_of_val(&f), 0);
                    let r = s.launch_host_func(f);
                    if r.is_err() {
                        assert!(ZST_DROPS.load(Ordering::SeqCst) > before, "not dropped");
                    }
                    r
                })
            },
        ),
        op(name("add_callback"), SWALLOW_DROP, move |fx| {
            on_stream(fx, k, |s| {
                let token = Arc::new(());
                let t = token.clone();
                let r = s.add_callback(move |_status| drop(t));
                token_check(&token, &r);
                r
            })
        }),
        op(name("device"), SWALLOW_DROP, move |fx| {
            on_stream(fx, k, |s| {
                assert_eq!(s.device()?, fx.ctx.device());
                Ok(())
            })
        }),
        op(name("flags"), SWALLOW_DROP, move |fx| {
            on_stream(fx, k, |s| s.flags().map(drop))
        }),
        op(name("is_nonblocking"), SWALLOW_DROP, move |fx| {
            on_stream(fx, k, |s| s.is_nonblocking().map(drop))
        }),
        op(name("priority"), SWALLOW_DROP, move |fx| {
            on_stream(fx, k, |s| s.priority().map(drop))
        }),
        op(name("make_current"), SWALLOW_MAKE_CURRENT, move |fx| {
            on_stream(fx, k, |s| {
                let guard = s.make_current();
                let r = current_stream(&fx.ctx, |cur| {
                    assert_eq!(cur, s);
                    cur.query().map(drop)
                });
                drop(guard);
                r
            })
        }),
        op(name("capture_status"), SWALLOW_DROP, move |fx| {
            on_stream(fx, k, |s| {
                assert_eq!(s.capture_status()?, CaptureStatus::None);
                Ok(())
            })
        }),
        op(name("completed"), SWALLOW_COMPLETED, move |fx| {
            on_stream(fx, k, |s| block_on(s.completed()))
        })
        .varying(VARYING_COMPLETED),
        op(name("scope with forks"), SWALLOW_DROP, move |fx| {
            on_stream(fx, k, |s| {
                s.scope(|sc| {
                    assert_eq!(sc.parent(), s);
                    let a = sc.fork()?;
                    let b = sc.fork()?;
                    assert_ne!(a, b);
                    a.launch_host_func(|| ())?;
                    b.wait_stream(&a)?;
                    b.query()?;
                    Ok(())
                })
            })
        }),
        op(name("Function::launch"), SWALLOW_DROP, move |fx| {
            on_stream(fx, k, |s| {
                let scale = fx.module.function("scale")?;
                let (x, n) = (fx.bytes.device_ptr(), 16u32);
                let config = LaunchConfig::for_elements(n, 32);
                // SAFETY: `scale` takes a pointer and a u32; the mock runs no device code.
                unsafe { scale.launch(&s, config, &kernel_args![x, n]) }
            })
        }),
        op_frees(
            name("DeviceBuffer::zeroed + TypedKernel::launch + free"),
            SWALLOW_DROP,
            move |fx| {
                on_stream(fx, k, |s| {
                    let scale = fx
                        .module
                        .function("scale")?
                        .typed::<(&mut DeviceBuffer<u8>, u32)>()?;
                    let mut b = DeviceBuffer::<u8>::zeroed(&fx.ctx, &s, 16)?;
                    let config = LaunchConfig::for_elements(16, 32);
                    // SAFETY: the mock runs no device code.
                    unsafe { scale.launch(&s, config, (&mut b, 16)) }?;
                    b.free()
                })
            },
        ),
        op_frees(
            name("DeviceBuffer::zeroed + fill + copy_from + free"),
            SWALLOW_DROP,
            move |fx| {
                on_stream(fx, k, |s| {
                    let a = DeviceBuffer::<u32>::zeroed(&fx.ctx, &s, 8)?;
                    let b = DeviceBuffer::<u32>::alloc(&fx.ctx, 8)?;
                    b.fill(&s, 3)?;
                    a.copy_from(&s, &b)?;
                    a.free()?;
                    b.free()
                })
            },
        ),
        op_frees(
            name("DeviceBuffer::from_host + copy_from_host + copy_to_host + to_vec + free"),
            SWALLOW_DROP,
            move |fx| {
                on_stream(fx, k, |s| {
                    let a = DeviceBuffer::from_host(&fx.ctx, &s, &[1u16, 2, 3])?;
                    a.copy_from_host(&s, &[4, 5, 6])?;
                    let mut out = [0u16; 3];
                    a.copy_to_host(&s, &mut out)?;
                    assert_eq!(out, [4, 5, 6]);
                    assert_eq!(a.to_vec(&s)?, [4, 5, 6]);
                    a.free()
                })
            },
        ),
        op_frees(
            name("DeviceBuffer async host copies + free"),
            SWALLOW_DROP,
            move |fx| {
                on_stream(fx, k, |s| {
                    let a = DeviceBuffer::<u32>::alloc(&fx.ctx, 4)?;
                    let mut out = [0u32; 4];
                    // SAFETY: the host slices are untouched until the stream is synchronised (or
                    // the mock has finished with them: it reads and writes host memory at the call).
                    unsafe {
                        a.copy_from_host_async(&s, &[7; 4])?;
                        a.copy_to_host_async(&s, &mut out)?;
                    }
                    s.synchronize()?;
                    assert_eq!(out, [7; 4]);
                    a.free()
                })
            },
        ),
        op(name("raw memset and memcpy"), SWALLOW_DROP, move |fx| {
            on_stream(fx, k, |s| {
                let p = fx.bytes.device_ptr();
                let mut out = [0u8; 8];
                // SAFETY: every range lies in the fixture's 64-byte buffer, which outlives the
                // work; the host slices live until the stream is synchronised.
                unsafe {
                    cuda_stream::memset_d8_async(&s, p, 1, 8)?;
                    cuda_stream::memset_d16_async(&s, p + 8, 2, 4)?;
                    cuda_stream::memset_d32_async(&s, p + 16, 3, 2)?;
                    cuda_stream::memcpy_dtod_async(&s, p + 24, p, 8)?;
                    cuda_stream::memcpy_htod_async(&s, p + 32, &[9u8; 8])?;
                    cuda_stream::memcpy_dtoh_async(&s, &mut out, p + 24)?;
                }
                s.synchronize()?;
                assert_eq!(out, [1; 8]);
                Ok(())
            })
        }),
    ];
    // Launch attributes need cuLaunchKernelEx (CUDA 11.6); before, `Unsupported`
    // (`checked_launches.rs` checks that).
    if flavour().has_abi("cuLaunchKernelEx") {
        ops.push(op(
            name("Function::launch with attributes"),
            SWALLOW_DROP,
            move |fx| {
                on_stream(fx, k, |s| {
                    let scale = fx.module.function("scale")?;
                    let (x, n) = (fx.bytes.device_ptr(), 16u32);
                    let config = LaunchConfig::new(4, 32)
                        .cluster(2)
                        .cooperative(true)
                        .programmatic_serialization(true)
                        .priority(0);
                    // SAFETY: `scale` takes a pointer and a u32; the mock runs no device code.
                    unsafe { scale.launch(&s, config, &kernel_args![x, n]) }
                })
            },
        ));
    }
    // Stream ids need CUDA 12.0; before, `id` is `Unsupported` without a driver call
    // (`old_driver.rs` checks that).
    if flavour().has_abi("cuStreamGetId") {
        ops.push(op(name("id"), SWALLOW_DROP, move |fx| {
            on_stream(fx, k, |s| s.id().map(drop))
        }));
    }
    ops
}
