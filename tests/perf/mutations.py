#!/usr/bin/env python3
"""Mutation testing of the use tracking: does the random-program generator notice a missing wait?

Each mutation removes one wait that the use tracking makes (a `cuStreamWaitEvent`, an event
synchronisation or poll, a context synchronisation, a free's check that the uses completed),
written as a textual patch over the source: `ORIGINAL` must occur exactly once in its file and
becomes `MUTATED`. Nothing in the checkout changes: the workspace's tracked files are copied to a
scratch folder (`--work`, default `target/mutations`, git-ignored), each mutation patched there in
turn, and the random programs run against the test driver (`cargo test -p cuda-mock-driver --test
random_programs`, with its race detector) until the first failure or `--ops` operations. The
unmutated source runs first and must pass. The table printed says, for each mutation, whether it
was caught, after how many programs' operations, and the first problem seen.

A wait that only a precise interleaving of two threads needs (another thread taking a stream's
handle between a check and the work) is out of the random programs' reach: such a mutation names
the test that holds a thread at that point (a sixth field, `cargo test` arguments), which runs
first; the mutation is caught when that test fails.

    tests/perf/mutations.py                   # every mutation, 300,000 operations each at most
    tests/perf/mutations.py --ops 1000000 --only wait_for_event
    tests/perf/mutations.py --list

Exits non-zero if a mutation is not caught (or the unmutated run fails).
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import time

TRACKING = "cuda-stream/src/memory/use_tracking/mod.rs"
MARKS = "cuda-stream/src/memory/use_tracking/marks.rs"
RELEASE = "cuda-stream/src/memory/use_tracking/release.rs"
CAPTURE = "cuda-stream/src/memory/use_tracking/capture.rs"
ALLOCATION = "cuda-stream/src/memory/allocation.rs"
PINNED = "cuda-stream/src/memory/pinned.rs"
BUFFER_OPS = "cuda-stream/src/memory/buffer_ops.rs"
ACROSS = "cuda-stream/src/memory/across.rs"
ALLOC_CALLS = "cuda-stream/src/memory/alloc_calls.rs"
REPEAT = "cuda-stream/src/memory/use_tracking/repeat.rs"
KNOWN_STREAMS = "cuda-stream/src/stream/known_streams.rs"
BLOCK_CACHE = "cuda-stream/src/stream/block_cache.rs"

# (name, file, original, mutated, what the wait is for[, the dedicated test's cargo arguments])
MUTATIONS = [
    (
        "wait_for_lazy_mark",
        MARKS,
        "(None, Mark::Event(ev)) => self.wait(waiter, ev),",
        "(None, Mark::Event(_ev)) => Ok(()),",
        "a use on another stream waits for the event just recorded after a lazy use",
    ),
    (
        "wait_for_final_event",
        MARKS,
        "(Some(End::Marked(fev)), _) => self.wait(waiter, fev),",
        "(Some(End::Marked(_fev)), _) => Ok(()),",
        "a use waits for the final event of the ended stream of a lazy use",
    ),
    (
        "wait_for_lost_end_sync",
        MARKS,
        "                    _ => {\n                        self.synchronize_context()?;",
        "                    _ => {",
        "a lazy use on a stream that ended where nothing marks its end (inside a host function): "
        "the context is synchronised",
    ),
    (
        "wait_for_event",
        MARKS,
        "Mark::Event(ev) => self.wait(waiter, ev),\n            Mark::Lost => {",
        "Mark::Event(_ev) => Ok(()),\n            Mark::Lost => {",
        "a use waits for the event recorded after an evented (eager) use",
    ),
    (
        "wait_for_lost_mark_sync",
        MARKS,
        "host function).\n                self.synchronize_context()?;",
        "host function).",
        "a use marked lost (its event could not be recorded): the context is synchronised",
    ),
    (
        "own_event_service_wait",
        MARKS,
        "                self.wait(service, fev)?;\n",
        "",
        "an event for a lazy use of an ended stream is recorded on the service stream after "
        "a wait for the stream's final event",
    ),
    (
        "around_waits_for_last_write",
        TRACKING,
        "            inner.wait_for(waiter, w).map_err(not_enqueued)?;\n",
        "            let _ = w;\n",
        "a new use waits for the buffer's last write",
    ),
    (
        "around_waits_for_reads",
        TRACKING,
        "                inner.wait_for(waiter, r).map_err(not_enqueued)?;\n",
        "                let _ = r;\n",
        "a write waits for the reads since the last write",
    ),
    (
        "free_waits_for_uses",
        RELEASE,
        "            self.wait_for(stream, u)?;\n",
        "            let _ = u;\n",
        "a stream-ordered free waits for every use",
    ),
    (
        "hand_back_waits",
        RELEASE,
        "if let Err(e) = inner.wait_for(owner, u) {",
        "if let Err(e) = { let _ = (owner, &u); Ok::<(), Error>(()) } {",
        "the end of a borrow: the owner's stream waits for every use",
    ),
    (
        "settle_polls_final_event",
        CAPTURE,
        "                    Some(&End::Marked(fev)) => {\n                        poll_until_done(fev)?;",
        "                    Some(&End::Marked(_fev)) => {",
        "work recorded into a capture: the host waits for the final event of the ended stream "
        "of a conflicting use",
    ),
    (
        "settle_polls_event",
        CAPTURE,
        "                    poll_until_done(ev)?;\n",
        "",
        "work recorded into a capture: the host waits for the event of a conflicting use",
    ),
    (
        "into_raw_synchronizes",
        ALLOC_CALLS,
        'check(unsafe { f(ev) }, "cuEventSynchronize")?;',
        "let _ = (f, ev);",
        "into_raw waits on the host for every use",
    ),
    (
        "plain_free_checks_events",
        ALLOCATION,
        "if must_defer_free() || !all_done(&events) {",
        "if must_defer_free() {",
        "a plain free is made now only if every use's event has completed",
    ),
    (
        "pending_free_checks_events",
        ALLOCATION,
        "if all_done(&pending[i].events) {",
        "if true {",
        "a pending plain free is made only once every use's event has completed",
    ),
    (
        "plain_free_after_context_sync",
        ALLOCATION,
        "    match synchronize_context_outside_captures(ctx.raw()) {",
        "    match Some(Ok::<(), crate::Error>(())) {",
        "a plain free after a use nothing marks waits for the context",
    ),
    (
        "pinned_host_access_waits",
        PINNED,
        'check(unsafe { f(c.event) }, "cuEventSynchronize")?;',
        "let _ = (f, c);",
        "host access to a page-locked buffer waits for the copies it conflicts with",
    ),
    (
        "pinned_copy_waits",
        PINNED,
        'check(unsafe { wait(raw, c.event, 0) }, "cuStreamWaitEvent")?;',
        "let _ = (wait, raw, c);",
        "a copy to or from a page-locked buffer waits for the copies it conflicts with",
    ),
    (
        "pinned_forgets_only_completed",
        PINNED,
        "        if rc != ffi::CUresult::CUDA_SUCCESS {\n            return true;\n        }",
        "        let _ = rc;",
        "a page-locked buffer forgets a copy only once its event has completed",
    ),
    (
        "across_service_waits_for_work",
        ACROSS,
        "            hand_over(raw, ctx.raw(), proxy)?;\n",
        "            let _ = proxy;\n",
        "the service stream of a peer copy's other context waits for the copy before the other "
        "buffer's use is recorded there",
    ),
    (
        "replay_waits_for_uses",
        BUFFER_OPS,
        "        return Uses::around_all(&mut list, stream, launch);",
        "        let _ = &mut list;\n        return launch();",
        "a graph launch waits for the other uses of the buffers its graph holds",
    ),
    (
        "capture_orders_forks",
        CAPTURE,
        "            self.order_after(stream, other, stream_ctx)?;",
        "            let _ = (other, stream_ctx);",
        "work recorded into a capture waits, inside the graph, for a conflicting use on another "
        "stream of the capture",
    ),
    (
        "repeated_use_rechecks_its_epoch",
        REPEAT,
        "    if u.end.as_ref().is_some_and(|e| e.has_ended()) {\n"
        "        inner.mark_now(u);\n"
        "    }",
        "    let _ = (inner, u);",
        "a use that repeated the last one on its stream gets an event of its own if the stream's "
        "epoch ended while its work was enqueued (the handle taken on another thread)",
        "-p cuda-mock-nccl --test nccl_views "
        "a_repeated_use_whose_stream_is_lent_meanwhile_is_marked_after_its_work",
    ),
    (
        "repeated_fill_rechecks_its_epoch",
        REPEAT,
        "        let _recheck = Recheck { inner, u };\n",
        "        let _ = u;\n",
        "a fill (or any single-buffer use) that repeated the last use on its stream gets an event "
        "of its own if the stream's epoch ended before its work was enqueued (the handle taken on "
        "another thread)",
        "-p cuda-mock-driver --test ordering_holes "
        "a_repeated_fill_whose_stream_is_lent_meanwhile_is_marked_after_its_work",
    ),
    (
        "unheld_end_counted_under_lock",
        KNOWN_STREAMS,
        "        let mut state = end.lock();\n        if Arc::strong_count(&end) == 1 {",
        "        let mut state = end.lock();\n        if true {",
        "an epoch found unheld as its stream is forgotten is settled if an allocation took it from "
        "its thread's cache before the end's lock was taken",
        "-p cuda-mock-driver --test ordering_holes "
        "an_allocation_on_a_stream_lent_meanwhile_is_never_recorded_in_its_capture",
    ),
    (
        "alloc_under_end_lock",
        ALLOC_CALLS,
        "        refuse_capturing(ctx, stream, refuse)?;\n"
        "        match alloc_from_pool(ctx, stream, bytes, pool) {\n"
        "            Err(e) if out_of_memory(&e) && !retried => {\n"
        "                drop(guard);\n",
        "        drop(guard);\n"
        "        refuse_capturing(ctx, stream, refuse)?;\n"
        "        match alloc_from_pool(ctx, stream, bytes, pool) {\n"
        "            Err(e) if out_of_memory(&e) && !retried => {\n",
        "an allocation on a private stream is made while its epoch's end is locked, so that the "
        "epoch's settling event comes after it",
        "-p cuda-mock-driver --test block_cache "
        "an_allocation_while_another_thread_takes_the_handle_is_ordered_before_the_settling",
    ),
    (
        "spare_given_back_when_let_go",
        BLOCK_CACHE,
        "            if std::mem::take(&mut bin.spare) {\n"
        "                bin.stats.sub(bin.bytes as u64);\n"
        "            }\n"
        "            for ptr in bin.ptrs.drain(..) {",
        "            for ptr in bin.ptrs.drain(..) {",
        "a cache that lets go of its blocks gives its spare's count back to the pool",
        "-p cuda-mock-driver --test block_cache "
        "a_block_taken_back_keeps_its_count_for_its_return_and_gives_it_back_when_let_go",
    ),
    (
        "one_spare_per_bin",
        BLOCK_CACHE,
        "        if std::mem::replace(&mut bin.spare, true) {\n"
        "            bin.stats.sub(bytes as u64);\n"
        "        }",
        "        bin.spare = true;",
        "a second hit in a row gives the first spare's count back to the pool",
        "-p cuda-mock-driver --test block_cache two_blocks_taken_back_count_one_spare",
    ),
]


def sh(cmd, cwd, env=None, timeout=None):
    return subprocess.run(
        cmd, cwd=cwd, env=env, timeout=timeout, text=True, capture_output=True, shell=True
    )


def copy_tree(root, work):
    """The tracked files, copied with the time of the copy (cargo rebuilds from modification
    times: a file older than the last build of a mutated version would not be rebuilt)."""
    src = os.path.join(work, "src")
    files = sh("git ls-files -z", root).stdout.split("\0")
    for f in filter(None, files):
        dst = os.path.join(src, f)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copyfile(os.path.join(root, f), dst)
        shutil.copymode(os.path.join(root, f), dst)
    return src


def run_programs(src, target, ops, seconds):
    env = dict(os.environ)
    env.update(
        CARGO_TARGET_DIR=target,
        CUDA_STREAM_RANDOM_OPS=str(ops),
        CUDA_STREAM_RANDOM_SECONDS=str(seconds),
        CUDA_STREAM_RANDOM_MAX_FAILURES="1",
        CUDA_STREAM_RANDOM_SHRINK_SECONDS="20",
        CARGO_TERM_COLOR="never",
    )
    build = sh("cargo test -q -p cuda-mock-driver --test random_programs --no-run", src, env)
    if build.returncode != 0:
        return ("build failed", build.stderr.strip().splitlines()[-1:], 0)
    start = time.time()
    r = sh(
        "cargo test -q -p cuda-mock-driver --test random_programs -- --nocapture",
        src,
        env,
        timeout=seconds + 600,
    )
    out = r.stdout + r.stderr
    m = re.search(r"random programs: (\d+) programs, (\d+) operations", out)
    n_ops = int(m.group(2)) if m else 0
    first = re.search(r"^seed (0x[0-9a-f]+) failed \(\d+ operations\): (.*)$", out, re.M)
    if r.returncode == 0:
        return ("passed", [], n_ops)
    if first:
        return ("caught", [first.group(1), first.group(2)[:160]], n_ops)
    return ("failed", out.strip().splitlines()[-3:], n_ops)


def run_test(src, target, cargo_args):
    """A dedicated test against the mutated source: `caught` when it fails."""
    env = dict(os.environ)
    env.update(CARGO_TARGET_DIR=target, CARGO_TERM_COLOR="never")
    r = sh(f"cargo test -q {cargo_args}", src, env, timeout=1800)
    if r.returncode == 0:
        return ("passed", [], 0)
    out = r.stdout + r.stderr
    first = re.search(r"panicked at ([^\n]*)\n(.*)", out)
    if first:
        return ("caught", ["(test)", f"{first.group(1)} {first.group(2)}"[:160]], 0)
    return ("failed", out.strip().splitlines()[-3:], 0)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--ops", type=int, default=300_000, help="operations per mutation at most")
    ap.add_argument("--seconds", type=int, default=600, help="time per mutation at most")
    ap.add_argument("--only", action="append", help="run these mutations only (by name)")
    ap.add_argument("--work", help="scratch folder (default: target/mutations)")
    ap.add_argument("--list", action="store_true", help="list the mutations and exit")
    ap.add_argument("--skip-baseline", action="store_true", help="do not run the unmutated source")
    args = ap.parse_args()
    root = sh("git rev-parse --show-toplevel", os.path.dirname(os.path.abspath(__file__))).stdout.strip()
    muts = [m for m in MUTATIONS if not args.only or m[0] in args.only]
    if args.list:
        for name, path, _, _, what, *test in muts:
            print(f"{name:32} {path}: {what}{' (test: ' + test[0] + ')' if test else ''}")
        return 0
    work = os.path.abspath(args.work or os.path.join(root, "target", "mutations"))
    shutil.rmtree(os.path.join(work, "src"), ignore_errors=True)
    src = copy_tree(root, work)
    target = os.path.join(work, "target")
    pristine = {}
    for _, path, original, *_ in muts:
        text = open(os.path.join(src, path)).read()
        pristine[path] = text
        n = text.count(original)
        if n != 1:
            print(f"{path}: the patch's original text occurs {n} times (must be once):\n{original}")
            return 2
    rows = []
    ok = True
    if not args.skip_baseline:
        status, detail, n = run_programs(src, target, args.ops, args.seconds)
        print(f"unmutated: {status} ({n} operations) {' '.join(detail)}", flush=True)
        if status != "passed":
            return 1
    for name, path, original, mutated, what, *test in muts:
        full = os.path.join(src, path)
        open(full, "w").write(pristine[path].replace(original, mutated, 1))
        t0 = time.time()
        status = None
        if test:
            status, detail, n = run_test(src, target, test[0])
        if status != "caught":
            status, detail, n = run_programs(src, target, args.ops, args.seconds)
        open(full, "w").write(pristine[path])
        rows.append((name, status, n, time.time() - t0, detail))
        print(f"{name}: {status} after {n} operations ({time.time() - t0:.0f} s) {' '.join(detail)}", flush=True)
        ok &= status == "caught"
    print()
    print(f"| mutation (wait removed) | caught | operations run | seed | first problem |")
    print(f"| --- | --- | --- | --- | --- |")
    for name, status, n, secs, detail in rows:
        seed, problem = (detail + ["", ""])[:2] if status == "caught" else ("", " ".join(detail))
        print(f"| `{name}` | {'yes' if status == 'caught' else 'NO: ' + status} | {n} | {seed} | {problem} |")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
