#!/usr/bin/env bash
# The experiments behind BENCHMARKS.md's analysis of stream creation, host functions with a
# capturing closure, `completed()` and the cache miss: each line runs two cases of `probe`
# (tests/examples/probe/) against each other on GPU 0, in interleaved batches (an even number
# of repetitions, each order equally often), and prints both medians, the median ratio with its
# range, the ratio's median for each order apart and their geometric mean ("balanced"), which
# cancels an effect of running first or second.
#
#   gpu-bundle/bin/gpu-experiments.sh            # on the GPU machine, ~3 minutes
#   PROBE=target/release/examples/probe tests/perf/gpu-experiments.sh
#
# `probe --list` says what each case does.
set -uo pipefail
P=${PROBE:-$(dirname "$0")/probe}
run() { echo "\$ probe --time $*"; "$P" --time "$@" || echo "(failed: $?)"; }

echo "== stream create + destroy: A/A (the method alone), then each step of the safe side"
run stream-create-raw stream-create-raw 2000 30
run stream-create-raw stream-create-safe 2000 30
run stream-create-safe stream-create-raw 2000 30
run stream-create-raw stream-create-check 2000 30
run stream-create-raw stream-create-adopt 2000 30
run stream-create-check stream-create-safe 2000 30

echo "== host functions, throughput: 100000 per batch (the benchmark's row), then 1000"
run host-raw host-raw 100000 16
run host-raw host-zst 100000 16
run host-raw host-boxed 100000 16
run host-raw host-raw-arc 100000 16
run host-raw-arc host-boxed 100000 16
run host-raw-arc host-raw-box 100000 16
run host-raw-arc host-boxed 1000 30
run host-raw-arc host-raw-box 1000 30

echo "== host function round trip with a capturing closure"
run rt-raw-arc rt-boxed 2000 16
run rt-raw-arc rt-raw-box 2000 16

echo "== completed() on an idle stream (the benchmark's row), with and without the spin"
run completed-raw completed 2000 16
run completed-raw completed-nospin 2000 16
run completed-raw completed-raw-flag 2000 16

echo "== completed() after work: a kernel of 10, 50, 200 µs, or a 20 µs host function"
run kbusy-raw:10 kbusy-completed:10 2000 16
run kbusy-raw:10 kbusy-completed:10:0 2000 16
run kbusy-raw:50 kbusy-completed:50 1000 16
run kbusy-raw:50 kbusy-completed:50:100 1000 16
run kbusy-raw:200 kbusy-completed:200 500 16
run kbusy-raw:200 kbusy-completed:200:0 500 16
run busy-raw:20 busy-completed:20 1000 16

echo "== the cache miss: alloc + free missing the block cache against its driver calls, and the"
echo "   driver calls with bookkeeping of the safe side's shape (1 box, 2 six counts, 4 two locks,"
echo "   8 two thread-local reads, 15 all)"
run miss-raw miss-raw 2000 20
run miss-raw alloc-free-miss-safe 2000 20
for k in 1 2 4 8 15; do run miss-raw miss-raw-plus:$k 2000 20; done
run miss-raw-plus:15 alloc-free-miss-safe 2000 20
