#!/usr/bin/env bash
# Instructions per iteration of `probe` cases (tests/examples/probe/) under callgrind,
# split by thread and by object (the program, which holds cuda-stream's code; the driver library;
# libc), so that cuda-stream's own work can be told from the driver's. Each case runs twice, with
# LOW and HIGH iterations; the difference divided by HIGH - LOW is the per-iteration cost, free
# of start-up and teardown.
#
#   tests/perf/callgrind.sh CASE...            # e.g. stream-create-raw stream-create-safe
#   LOW=200 HIGH=2200 DRIVER=path/to/libcuda.so tests/perf/callgrind.sh CASE...
#
# By default the driver is the mock (target/release/libcuda_mock_driver.so), whose own costs are
# not libcuda's: compare cases that make the same driver calls.
set -euo pipefail
LOW=${LOW:-200}
HIGH=${HIGH:-2200}
# shellcheck source=probe-setup.sh
source "$(dirname "$0")/probe-setup.sh"
for case in "$@"; do
    for n in "$LOW" "$HIGH"; do
        valgrind -q --tool=callgrind --separate-threads=yes \
            --callgrind-out-file="$work/$case.$n.%p" "$bin" "$case" "$n" >/dev/null
    done
done
python3 - "$work" "$LOW" "$HIGH" "$@" <<'PY'
import glob, os, re, sys
from collections import defaultdict

work, low, high, cases = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]

def self_cost(path):
    """Self instruction counts by object (calls' inclusive costs are left out)."""
    names, cur, out, skip = {}, None, defaultdict(int), False
    for line in open(path):
        line = line.rstrip("\n")
        m = re.match(r"^(c?)ob=\((\d+)\)(?: (.*))?$", line)
        if m:
            if m.group(3):
                names[m.group(2)] = os.path.basename(m.group(3))
            if not m.group(1):
                cur = names.get(m.group(2), "?")
            continue
        if line.startswith("calls="):
            skip = True
            continue
        if line and (line[0].isdigit() or line[0] in "+-*"):
            if skip:
                skip = False
                continue
            parts = line.split()
            if len(parts) >= 2:
                out[cur] += int(parts[1])
    return out

def by_thread(case, n):
    res = {}
    for f in sorted(glob.glob(os.path.join(work, f"{case}.{n}.*"))):
        t = re.search(r"-(\d+)$", f)
        res[int(t.group(1)) if t else 1] = self_cost(f)
    return res

for case in cases:
    lo, hi = by_thread(case, low), by_thread(case, high)
    print(f"{case}: instructions per iteration")
    for t in sorted(set(lo) | set(hi)):
        a, b = lo.get(t, {}), hi.get(t, {})
        objs = sorted(set(a) | set(b))
        per = {o: (b.get(o, 0) - a.get(o, 0)) / (high - low) for o in objs}
        total = sum(per.values())
        if abs(total) < 1:
            continue
        parts = ", ".join(f"{o} {v:.0f}" for o, v in sorted(per.items(), key=lambda x: -abs(x[1])) if abs(v) >= 1)
        print(f"  thread {t}: {total:.0f} ({parts})")
PY
