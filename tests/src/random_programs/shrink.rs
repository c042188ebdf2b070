//! Minimising a failing program: operations (and steps of captures and scopes) are dropped, and
//! threads merged, one at a time, while the program is still valid (every object it uses exists
//! at that point) and still fails; each candidate runs up to three times, as a failure that
//! depends on the threads' timing may not show every time.

use std::time::{Duration, Instant};

use super::program::*;
use super::world::Env;
use super::{Harness, Hole};

/// Whether `p` uses only objects that exist where it uses them (as the generator made it).
pub fn valid(p: &Program) -> bool {
    let mut streams = vec![true; p.streams.len()];
    // What each slot holds: an owned buffer (OWN), a borrow (BORROWED), managed memory (MANAGED).
    const OWN: u8 = 0;
    const BORROWED: u8 = 1;
    const MANAGED: u8 = 2;
    let mut bufs: Vec<Option<u8>> = vec![None; p.buffers.len()];
    // Each executable graph's context, while it exists.
    let mut execs: Vec<Option<usize>> = vec![None; p.execs];
    let alive_bufs =
        |a: &Act, bufs: &[Option<u8>]| a.buffers().iter().all(|(b, _)| bufs[*b].is_some());
    // Managed memory stays out of captures and peer copies (as the generator keeps it).
    let managed =
        |a: &Act, bufs: &[Option<u8>]| a.buffers().iter().any(|(b, _)| bufs[*b] == Some(MANAGED));
    for op in &p.ops {
        let ok = match &op.kind {
            OpKind::Alloc { b, s, how } => {
                let ok = bufs[*b].is_none() && streams[*s];
                bufs[*b] = Some(if *how == AllocHow::Managed {
                    MANAGED
                } else {
                    OWN
                });
                ok
            }
            OpKind::ManagedWrite { b, .. } | OpKind::ManagedRead { b } => bufs[*b] == Some(MANAGED),
            OpKind::Borrow { b, .. } => {
                let ok = bufs[*b].is_none();
                bufs[*b] = Some(BORROWED);
                ok
            }
            OpKind::Act { s, act } => {
                streams[*s]
                    && alive_bufs(act, &bufs)
                    && !(matches!(act, Act::Peer { .. }) && managed(act, &bufs))
            }
            OpKind::CopyFromHost { b, s, .. }
            | OpKind::ToVec { b, s, .. }
            | OpKind::FromPinned { b, s, .. }
            | OpKind::ToPinned { b, s, .. } => streams[*s] && bufs[*b].is_some(),
            OpKind::PinnedWrite { .. } | OpKind::PinnedRead { .. } | OpKind::CtxSync { .. } => true,
            OpKind::Drop { b } => {
                let ok = matches!(bufs[*b], Some(OWN | MANAGED));
                bufs[*b] = None;
                ok
            }
            OpKind::Free { b } | OpKind::IntoRaw { b } => {
                let ok = bufs[*b] == Some(OWN);
                bufs[*b] = None;
                ok
            }
            OpKind::IntoRawFails { b } => {
                let ok = bufs[*b] == Some(OWN);
                bufs[*b] = None;
                ok
            }
            OpKind::Release { b } => {
                let ok = bufs[*b] == Some(BORROWED);
                bufs[*b] = None;
                ok
            }
            OpKind::Sync { s }
            | OpKind::Query { s }
            | OpKind::EventSync { s }
            | OpKind::Completion { s } => streams[*s],
            OpKind::WaitStream { s, other } => streams[*s] && streams[*other],
            OpKind::DropStream { s } => std::mem::replace(&mut streams[*s], false),
            OpKind::FaultyAct { s, act } => streams[*s] && alive_bufs(act, &bufs),
            OpKind::DropStreamInHostFn { s, on, .. } => {
                let ok = streams[*on] && s != on && streams[*s];
                streams[*s] = false;
                ok
            }
            OpKind::NewStream { s } => !std::mem::replace(&mut streams[*s], true),
            OpKind::Scope { s, body, .. } => {
                streams[*s] && body.iter().all(|st| alive_bufs(&st.act, &bufs))
            }
            OpKind::Capture {
                s,
                exec,
                graph_buffers,
                pre,
                scoped,
                post,
                ..
            } => {
                let mut ok = streams[*s];
                let mut graph = vec![false; *graph_buffers];
                for st in pre.iter().chain(scoped).chain(post) {
                    let g_ok = |a: &Act, graph: &[bool]| {
                        let gs = match a {
                            Act::Fill { b, .. }
                            | Act::FillHalves { b, .. }
                            | Act::KeepAlive { b } => {
                                vec![*b]
                            }
                            Act::Copy { dst, src } | Act::Peer { dst, src } => vec![*dst, *src],
                            Act::Kernel { dst, src, .. } => {
                                std::iter::once(*dst).chain(*src).collect()
                            }
                            Act::HostFn => vec![],
                        };
                        gs.iter().all(|b| match b {
                            Buf::Graph(g) => graph.get(*g).copied().unwrap_or(false),
                            Buf::Slot(_) => true,
                        })
                    };
                    ok &= match &st.act {
                        CapAct::Act(a) => {
                            alive_bufs(a, &bufs) && g_ok(a, &graph) && !managed(a, &bufs)
                        }
                        CapAct::GraphAlloc { g, .. } => {
                            graph[*g] = true;
                            true
                        }
                        CapAct::GraphFree { g } => std::mem::replace(&mut graph[*g], false),
                        CapAct::Outside { s: t, act } => {
                            streams[*t] && t != s && alive_bufs(act, &bufs) && !managed(act, &bufs)
                        }
                        CapAct::DropInside { b } => {
                            let ok = bufs[*b] == Some(OWN);
                            bufs[*b] = None;
                            ok
                        }
                    };
                }
                execs[*exec] = Some(p.streams[*s].ctx);
                ok
            }
            OpKind::Replay { exec, s, .. } => {
                execs[*exec] == Some(p.streams[*s].ctx) && streams[*s]
            }
            OpKind::DropExec { exec } => execs[*exec].take().is_some(),
        };
        if !ok {
            return false;
        }
    }
    true
}

/// `p` with every `loose` flag that no longer fits (the operation before it changed) cleared.
fn normalise(mut p: Program, no_completed_on: bool) -> Program {
    for i in 0..p.ops.len() {
        if p.ops[i].loose && !p.loose_ok(i, no_completed_on) {
            p.ops[i].loose = false;
        }
    }
    p
}

/// The smaller programs to try in place of `p`.
fn candidates(p: &Program) -> Vec<Program> {
    let mut out = Vec::new();
    if p.threads > 1 {
        let mut one = p.clone();
        one.threads = 1;
        for op in &mut one.ops {
            op.thread = 0;
            op.loose = false;
        }
        out.push(one);
    }
    for i in (0..p.ops.len()).rev() {
        let mut c = p.clone();
        c.ops.remove(i);
        out.push(c);
        let bodies = |c: &mut Program| -> Vec<Program> {
            let mut v = Vec::new();
            let n = match &c.ops[i].kind {
                OpKind::Scope { body, .. } => body.len(),
                OpKind::Capture {
                    pre, scoped, post, ..
                } => pre.len() + scoped.len() + post.len(),
                _ => 0,
            };
            for k in (0..n).rev() {
                let mut d = c.clone();
                match &mut d.ops[i].kind {
                    OpKind::Scope { body, .. } => {
                        body.remove(k);
                    }
                    OpKind::Capture {
                        pre, scoped, post, ..
                    } => {
                        if k < pre.len() {
                            pre.remove(k);
                        } else if k < pre.len() + scoped.len() {
                            scoped.remove(k - pre.len());
                        } else {
                            post.remove(k - pre.len() - scoped.len());
                        }
                    }
                    _ => {}
                }
                v.push(d);
            }
            v
        };
        out.extend(bodies(&mut p.clone()));
    }
    out
}

/// The kind of a problem (a race, a wrong read, an error, ...): a candidate must fail the same
/// way as the program it stands for.
fn kind(problem: &str) -> &'static str {
    const KINDS: [&str; 7] = [
        "race:",
        " read ",
        "returned an error",
        "host function runs",
        "allocations",
        "did not run",
        "teardown",
    ];
    KINDS
        .iter()
        .find(|k| problem.contains(*k))
        .copied()
        .unwrap_or("other")
}

/// Whether `p` fails (up to `tries` runs): its problems.
pub fn fails(p: &Program, env: &Env, h: &dyn Harness, tries: usize) -> Option<Vec<String>> {
    for _ in 0..tries {
        let (_, problems) = super::run::run(p, env, h);
        if !problems.is_empty() {
            return Some(problems);
        }
    }
    None
}

/// The smallest program found (within `budget`) that still fails, with its problems.
pub fn shrink(
    p: &Program,
    problems: Vec<String>,
    env: &Env,
    h: &dyn Harness,
    budget: Duration,
) -> (Program, Vec<String>) {
    let start = Instant::now();
    let no3 = env.cfg.excluded.contains(&Hole::CompletedOn);
    let wanted = problems.first().map_or("other", |p| kind(p));
    let mut best = (p.clone(), problems);
    'outer: while start.elapsed() < budget {
        for c in candidates(&best.0) {
            if start.elapsed() >= budget {
                break 'outer;
            }
            let c = normalise(c, no3);
            if !valid(&c) {
                continue;
            }
            if let Some(problems) = fails(&c, env, h, 3) {
                if problems.iter().any(|p| kind(p) == wanted) {
                    best = (c, problems);
                    continue 'outer;
                }
            }
        }
        break;
    }
    best
}
