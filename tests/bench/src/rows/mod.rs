//! The rows, in groups, and what they share: one context, two streams and one reused event.
//!
//! To add a row, add to the group it belongs to (or a new module here, called from [`run`]):
//!
//! ```ignore
//! rows.add(
//!     "my_op",                               // stable id: tests/bench/peers.py uses it too
//!     "my op (what the raw column does)",    // the table's label
//!     Target::Ratio(1.05),                   // or Target::BelowNs(..), Target::None
//!     case(cfg.fast, || raw_body(), || safe_body())
//!         .peer(fx.cudarc().map(|c| move || cudarc_body(c)))  // or .no_peer("why cudarc can't")
//!         .settle(|| fx.settle())            // where a batch enqueues work
//!         .run(cfg),
//! );
//! ```
//!
//! Each body is one iteration; check every return code (`ok` for a `CUresult`, `must` for a
//! `cuda_stream::Result`, `must_cudarc` for cudarc's) and pass results through `black_box`. A
//! row that the Python frameworks can do too gets the same id in `peers.py`.

mod create;
mod graphs;
mod host_fn;
mod hot_path;
mod launches;
mod memory;
mod nvrtc;
mod pool_async_scope;
mod temporaries;

use cuda_stream::{Context, Error, Event, EventOptions, OwnedStream};
use cuda_stream_sys as sys;

use crate::cudarc_column::Cudarc;
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
    /// cudarc's context, streams and event, where the cudarc column runs.
    cudarc: Option<Cudarc>,
}

impl Fixture<'_> {
    /// cudarc's side, where the cudarc column runs.
    pub(crate) fn cudarc(&self) -> Option<&Cudarc> {
        self.cudarc.as_ref()
    }

    /// `cuStreamSynchronize(s)`, checked.
    pub(crate) fn sync_raw(&self, s: sys::CUstream) {
        // SAFETY: `s` is a live stream of the current context.
        ok(
            unsafe { (self.raw.stream_synchronize)(s) },
            "cuStreamSynchronize",
        );
    }

    /// Drains the streams (untimed, between batches).
    pub(crate) fn settle(&self) {
        self.sync_raw(self.s1.raw());
        self.sync_raw(self.s2.raw());
        if let Some(c) = &self.cudarc {
            c.settle();
        }
    }
}

/// Measures every row, in order; also says whether the cudarc column ran, and if not why.
pub(crate) fn run(cfg: &Config, ctx: &Context) -> Result<(Rows, Result<(), String>), Error> {
    // The primary context stays current on this thread for the whole run, for every column: the
    // raw creation calls need a current context, and the safe ones then find it already current.
    let _bound = ctx.bind()?;
    let cudarc = if cfg.cudarc {
        Cudarc::open(ctx)
    } else {
        Err("--no-cudarc".to_string())
    };
    let status = cudarc.as_ref().map(|_| ()).map_err(Clone::clone);
    let fx = Fixture {
        cfg,
        ctx,
        raw: Raw::load().map_err(Error::Load)?,
        s1: ctx.new_stream()?,
        s2: ctx.new_stream()?,
        event: Event::new(ctx, EventOptions::new())?,
        cudarc: cudarc.ok(),
    };
    let mut rows = Rows::default();
    for (name, group) in GROUPS {
        if cfg.runs(name) {
            group(&fx, &mut rows)?;
        }
    }
    Ok((rows, status))
}

/// A group of rows: one module's `rows`.
type Group = fn(&Fixture<'_>, &mut Rows) -> Result<(), Error>;

/// Every group of rows, in the order they run, by the name `--only` takes.
pub(crate) const GROUPS: [(&str, Group); 9] = [
    ("create", create::rows),
    ("hot_path", hot_path::rows),
    ("host_fn", host_fn::rows),
    ("pool_async_scope", pool_async_scope::rows),
    ("graphs", graphs::rows),
    ("memory", memory::rows),
    ("temporaries", temporaries::rows),
    ("launches", launches::rows),
    ("nvrtc", nvrtc::rows),
];

/// The position of group `name` in [`GROUPS`], if there is one.
pub(crate) fn group_index(name: &str) -> Option<usize> {
    GROUPS.iter().position(|(g, _)| *g == name)
}

#[cfg(test)]
#[test]
fn every_group_is_named() {
    for (i, (g, _)) in GROUPS.iter().enumerate() {
        let cfg = crate::method::Config {
            only: 1 << i,
            ..crate::method::Config::quick()
        };
        assert!(cfg.runs(g));
        assert_eq!(GROUPS.iter().filter(|(g, _)| cfg.runs(g)).count(), 1);
    }
}
