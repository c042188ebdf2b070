//! The rows, in groups, and what they share: one context, two streams and one reused event.
//!
//! To add a row, add to the group it belongs to (or a new module here, called from [`run`]):
//!
//! ```ignore
//! rows.add(
//!     "my_op",                               // stable id: the peers' results use it too
//!     "my op (what the raw column does)",    // the table's label
//!     Target::Ratio(1.05),                   // or Target::BelowNs(..), Target::None
//!     case(cfg.fast, || raw_body(), || safe_body()).settle(|| fx.settle()).run(cfg),
//! );
//! ```
//!
//! Each body is one iteration; check every return code (`ok` for a `CUresult`, `must` for a
//! `cuda_stream::Result`) and pass results through `black_box`.

mod create;
mod host_fn;
mod hot_path;
mod pool_async_scope;

use cuda_stream::{Context, Error, Event, EventOptions, OwnedStream};
use cuda_sys as sys;

use crate::fail::ok;
use crate::method::Config;
use crate::raw::Raw;
use crate::report::Rows;

/// What the rows share.
pub(crate) struct Fixture<'a> {
    pub(crate) cfg: &'a Config,
    /// The primary context, current on the benchmark thread for the whole run.
    pub(crate) ctx: &'a Context,
    pub(crate) raw: Raw,
    /// The stream most rows work on.
    pub(crate) s1: OwnedStream,
    /// A second stream (the other side of `wait_stream`, where the waited-on event is recorded).
    pub(crate) s2: OwnedStream,
    /// One reused event (timing disabled) for the record / wait rows, on both sides.
    pub(crate) event: Event,
}

impl Fixture<'_> {
    /// `cuStreamSynchronize(s)`, checked.
    pub(crate) fn sync_raw(&self, s: sys::CUstream) {
        // SAFETY: `s` is a live stream of the current context.
        ok(
            unsafe { (self.raw.stream_synchronize)(s) },
            "cuStreamSynchronize",
        );
    }

    /// Drains both streams (untimed, between batches).
    pub(crate) fn settle(&self) {
        self.sync_raw(self.s1.raw());
        self.sync_raw(self.s2.raw());
    }
}

/// Measures every row, in order.
pub(crate) fn run(cfg: &Config, ctx: &Context) -> Result<Rows, Error> {
    // The primary context stays current on this thread for the whole run, for both columns: the
    // raw creation calls need a current context, and the safe ones then find it already current.
    let _bound = ctx.bind()?;
    let fx = Fixture {
        cfg,
        ctx,
        raw: Raw::load().map_err(Error::Load)?,
        s1: ctx.new_stream()?,
        s2: ctx.new_stream()?,
        event: Event::new(ctx, EventOptions::new())?,
    };
    let mut rows = Rows::default();
    create::rows(&fx, &mut rows)?;
    hot_path::rows(&fx, &mut rows)?;
    host_fn::rows(&fx, &mut rows)?;
    pool_async_scope::rows(&fx, &mut rows)?;
    Ok(rows)
}
