#!/usr/bin/env bash
# The code a `probe` case's iteration runs, in distinct 64-byte lines (tests/examples/probe/),
# under callgrind: per object, and for the program (which holds cuda-stream's code) per function.
# Right after a driver call little of the crate's code is still in the first-level cache, so on
# the GPU a path that spreads over more lines pays more for the same instructions (see
# BENCHMARKS.md, "The code a call touches"). A line counts when instructions on it ran at least
# once per iteration (90 % of ITERS).
#
#   tests/perf/code-lines.sh CASE...           # e.g. fill-raw fill-safe
#   ITERS=3000 DRIVER=path/to/libcuda.so PROBE=path/to/probe tests/perf/code-lines.sh CASE...
set -euo pipefail
ITERS=${ITERS:-3000}
# shellcheck source=probe-setup.sh
source "$(dirname "$0")/probe-setup.sh"
for case in "$@"; do
    rm -f "$work"/cg.*
    valgrind -q --tool=callgrind --dump-instr=yes --callgrind-out-file="$work/cg.%p" \
        "$bin" "$case" "$ITERS" >/dev/null
    # The main thread's profile is the largest file.
    profile=$(ls -S "$work"/cg.* | head -1)
    echo "$case: distinct code lines run every iteration"
    python3 - "$profile" "$ITERS" "$(basename "$bin")" <<'PY'
import re, sys
from collections import defaultdict

path, iters, program = sys.argv[1], int(sys.argv[2]), sys.argv[3]
objs, fns = {}, {}
obj = fn = None
ir = defaultdict(int)  # (object, function, address) -> instructions
last = 0
after_call = False
for line in open(path):
    line = line.rstrip("\n")
    m = re.match(r"^(c?)ob=\((\d+)\)(?: (.*))?$", line)
    if m:
        if m.group(3):
            objs[m.group(2)] = m.group(3).split("/")[-1]
        if not m.group(1):
            obj = objs.get(m.group(2))
        continue
    m = re.match(r"^(c?)fn=\((\d+)\)(?: (.*))?$", line)
    if m:
        if m.group(3):
            fns[m.group(2)] = m.group(3)
        if not m.group(1):
            fn = fns.get(m.group(2))
        continue
    if line.startswith("calls="):
        after_call = True
        continue
    if not line or line[0] not in "0123456789+-*":
        continue
    parts = line.split()
    a = parts[0]
    if a.startswith("0x"):
        last = int(a, 16)
    elif a[0] in "+-":
        last += int(a)
    elif a != "*":
        last = int(a)
    if after_call:
        # The cost line of a call: inclusive, the callee's.
        after_call = False
        continue
    if len(parts) >= 3:
        ir[(obj, fn, last)] += int(parts[2])
lines, by_fn = defaultdict(set), defaultdict(set)
for (o, f, a), n in ir.items():
    if n >= 0.9 * iters:
        lines[o].add(a >> 6)
        if o == program:
            by_fn[f].add(a >> 6)
for o, s in sorted(lines.items(), key=lambda x: -len(x[1])):
    print(f"  {o}: {len(s)}")
for f, s in sorted(by_fn.items(), key=lambda x: -len(x[1])):
    print(f"    {len(s):3d} {f}")
PY
done
