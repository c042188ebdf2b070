//! A program as text: its objects, then one line per operation (a body's steps indented).

use std::fmt;

use super::program::*;

impl fmt::Display for Buf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Buf::Slot(i) => write!(f, "b{i}"),
            Buf::Graph(g) => write!(f, "g{g}"),
        }
    }
}

impl fmt::Display for Act {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Act::Fill { b, v } => write!(f, "{b}.fill({v:#x})"),
            Act::FillHalves { b, v, high_first } => {
                let order = if *high_first {
                    "high, low"
                } else {
                    "low, high"
                };
                write!(f, "{b}.split_at_mut(half): fill({v:#x}) {order}")
            }
            Act::Copy { dst, src } => write!(f, "{dst}.copy_from({src})"),
            Act::Peer { dst, src } => write!(f, "{dst}.copy_from_peer({src})"),
            Act::Kernel { k, dst, src } => match (k, src) {
                (Kern::Set(v), _) => write!(f, "rp_set({dst}, {v:#x})"),
                (Kern::Add(k), Some(s)) => write!(f, "rp_add({dst} += {s} + {k:#x})"),
                (Kern::Scale(m, a), Some(s)) => {
                    write!(f, "rp_scale({dst} = {s} * {m:#x} + {a:#x})")
                }
                (_, None) => write!(f, "kernel({dst})"),
            },
            Act::KeepAlive { b } => write!(f, "{b}.keep_alive_in"),
            Act::HostFn => write!(f, "launch_host_func"),
        }
    }
}

impl fmt::Display for CapAct {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CapAct::Act(a) => write!(f, "{a}"),
            CapAct::GraphAlloc { g, zeroed } => {
                write!(
                    f,
                    "g{g} = GraphBuffer::{}",
                    if *zeroed { "zeroed" } else { "alloc" }
                )
            }
            CapAct::GraphFree { g } => write!(f, "g{g}.free()"),
            CapAct::Outside { s, act } => write!(f, "outside the capture, on s{s}: {act}"),
            CapAct::DropInside { b } => write!(f, "drop(b{b})"),
        }
    }
}

fn steps<A: fmt::Display>(f: &mut fmt::Formatter<'_>, what: &str, body: &[Step<A>]) -> fmt::Result {
    for st in body {
        let lane = match st.lane {
            0 => "parent".to_string(),
            n => format!("fork {n}"),
        };
        writeln!(f, "        {what} {lane}: {}", st.act)?;
    }
    Ok(())
}

impl fmt::Display for Program {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "program {:#x}: {} thread(s), {} values per buffer, pools keep {} bytes of freed blocks",
            self.seed,
            self.threads,
            self.len,
            if self.cache_limit == u64::MAX {
                "any number of".to_string()
            } else {
                self.cache_limit.to_string()
            }
        )?;
        for (i, s) in self.streams.iter().enumerate() {
            writeln!(f, "    s{i}: {:?} stream of context {}", s.kind, s.ctx)?;
        }
        for (i, c) in self.buffers.iter().enumerate() {
            writeln!(f, "    b{i}: buffer of context {c}")?;
        }
        for (i, op) in self.ops.iter().enumerate() {
            let loose = if op.loose { " (loose)" } else { "" };
            write!(f, "  #{i} [t{}]{loose} ", op.thread)?;
            match &op.kind {
                OpKind::Scope { s, forks, body } => {
                    writeln!(f, "s{s}.scope with {forks} fork(s):")?;
                    steps(f, "", body)?;
                }
                OpKind::Capture {
                    s,
                    mode,
                    exec,
                    forks,
                    pre,
                    scoped,
                    post,
                    ..
                } => {
                    writeln!(f, "e{exec} = s{s}.capture({mode:?}), {forks} fork(s):")?;
                    steps(f, "before the scope,", pre)?;
                    steps(f, "in the scope,", scoped)?;
                    steps(f, "after the scope,", post)?;
                }
                OpKind::Act { s, act } => writeln!(f, "on s{s}: {act}")?,
                other => writeln!(f, "{other:?}")?,
            }
        }
        Ok(())
    }
}
