//! Uses of memory that work recorded into a graph capture meets: the host settles the
//! conflicting uses outside the capture before the node is recorded.

use crate::base::capture_mode::CaptureMode;
use crate::base::error::{Error, Result};
use crate::driver::capture_query::{capture_info, poll_until_done};
use crate::ffi;
use crate::graph::capture::begun_here;
use crate::graph::capture_mode_guard::exchange_capture_mode;
use crate::stream::known_streams::End;
use crate::stream::view::bind_if_special;

use super::{Access, Captured, Inner, Mark, State, Uses};

impl Uses {
    /// For work recorded into a graph capture on `stream`: the graph orders its own nodes, and
    /// the graph holds the memory, so no use is recorded. An earlier use on another stream that
    /// this access conflicts with cannot be waited for from inside the capture (its event is not
    /// part of the graph), so the host waits for it here, before the node is recorded: an event
    /// recorded after it (`cuEventRecord` on its stream, which is not capturing), asked
    /// (`cuEventQuery`) until it has completed, with the thread's capture mode relaxed meanwhile
    /// (`cuThreadExchangeStreamCaptureMode`). A use on a
    /// stream that has joined a capture since is refused.
    ///
    /// Inside the capture (`capture`, begun by this crate), an earlier use by work recorded on
    /// another of its streams (a fork) that this access conflicts with is ordered before it in
    /// the graph: an event recorded on that stream (a node of the capture) and waited for on
    /// `stream` (an edge). A stream that has left the capture since (joined back) is ordered by
    /// its join.
    pub(crate) fn settle_for_capture(
        &self,
        stream: ffi::CUstream,
        stream_ctx: ffi::CUcontext,
        capture: u64,
        access: Access,
    ) -> Result<()> {
        let inner = &self.0;
        let mut state = inner.lock();
        inner.order_in_capture(&mut state, stream, stream_ctx, capture, access)?;
        let State { write, reads, .. } = &mut *state;
        let conflicting = write
            .iter_mut()
            .chain(reads.iter_mut().filter(|_| access == Access::Write));
        for u in conflicting {
            // A use on the capturing stream itself, before the capture (its epoch ended as the
            // capture began), stays recorded: every replay through `GraphExec::launch` waits
            // for it, as for any recorded use.
            let here = inner.same_stream(u, stream) || (u.stream == stream && u.end.is_some());
            if u.mark == Mark::Done || (u.mark != Mark::Lost && here) {
                continue;
            }
            // What follows is for work outside the capture (an event made and recorded on
            // another stream, asked about, waited for), so it cannot break the capture; but the
            // driver refuses such calls from a thread with a capture of its own (and during a
            // global-mode capture) unless the thread's mode is relaxed, and invalidates the
            // capture. Relaxed for this use, then restored.
            let _relaxed = exchange_capture_mode(CaptureMode::Relaxed)?;
            if u.mark == Mark::Lazy {
                let guard = u.end.as_ref().map(|e| e.lock());
                match guard.as_deref() {
                    None | Some(End::Live) => {
                        let _bound = bind_if_special(u.stream, inner.raw_ctx())?;
                        if crate::driver::capture_query::is_capturing(u.stream)? {
                            return Err(Error::Refused {
                                call: "cuEventRecord",
                                reason: "the buffer's earlier use is on a stream that has joined \
                                         a capture since: use the buffer on the capturing stream",
                            });
                        }
                        u.mark = Mark::Event(inner.record_new(u.stream)?);
                    }
                    Some(&End::Marked(fev)) => {
                        poll_until_done(fev)?;
                        u.mark = Mark::Done;
                    }
                    Some(End::Lost) => u.mark = Mark::Lost,
                }
            }
            match u.mark {
                Mark::Event(ev) => {
                    // Polled, not `cuEventSynchronize`: a blocking wait invalidates the
                    // thread's capture on driver 580 even in relaxed mode (measured on the
                    // H100), a query does not.
                    poll_until_done(ev)?;
                    inner.release(ev);
                    u.mark = Mark::Done;
                }
                Mark::Lost => {
                    return Err(Error::Refused {
                        call: "cuEventQuery",
                        reason: "the buffer's earlier use was on a stream that ended inside a \
                                 host function: synchronise the context before the capture",
                    });
                }
                Mark::Lazy | Mark::Done => {}
            }
        }
        Ok(())
    }
}

impl Inner {
    /// Orders an access by work recorded into `capture` on `stream` after the conflicting
    /// accesses of that capture on its other streams, and records it.
    fn order_in_capture(
        &self,
        state: &mut State,
        stream: ffi::CUstream,
        stream_ctx: ffi::CUcontext,
        capture: u64,
        access: Access,
    ) -> Result<()> {
        let captured = &mut state.captured;
        captured.retain(|c| c.capture == capture || begun_here(c.capture));
        let write = access == Access::Write;
        let here = stream as usize;
        for c in captured.iter() {
            if c.capture != capture || c.stream == here || !(write || c.write) {
                continue;
            }
            let other = c.stream as ffi::CUstream;
            // The streams of a capture under way live until it ends (its forks are released
            // after), and this access is inside it.
            if capture_info(other)?.0.id() != Some(capture) {
                continue;
            }
            self.order_after(stream, other, stream_ctx)?;
        }
        if write {
            captured.retain(|c| c.capture != capture);
        } else {
            captured.retain(|c| c.capture != capture || c.stream != here || c.write);
        }
        captured.push(Captured {
            capture,
            stream: here,
            write,
        });
        Ok(())
    }
}
