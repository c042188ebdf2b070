#!/usr/bin/env bash
# The cost of depending on cuda-stream, from cold: a binary whose only dependency is cuda-stream
# against one whose only dependency is cudarc 0.19 (`driver`, `dynamic-loading`, as
# tests/bench uses it), each built debug and release in a fresh target directory with
# `cargo build --timings`, side by side in one run, and printed as one table: the wall time of
# the build and the crates on its critical path with their own times.
#
#   tests/perf/cold-build.sh                      # both, debug and release, RUNS=1
#   RUNS=3 tests/perf/cold-build.sh               # each build 3 times, alternating; the median
#   OTHER=/path/to/another/checkout tests/perf/cold-build.sh   # adds that tree's cuda-stream
#   KEEP=1 tests/perf/cold-build.sh               # keeps the work folder (the timing reports)
#   PROFILES=release tests/perf/cold-build.sh     # one profile only
#
# Run it on a quiet machine: every build of the run shares the CPUs with whatever else runs.
# Downloads are made before any timing (`cargo fetch`); nothing is built in the workspace.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
RUNS=${RUNS:-1}
work=$(mktemp -d /tmp/cold-build.XXXXXX)
if [ -z "${KEEP:-}" ]; then trap 'rm -rf "$work"' EXIT; else echo "work folder: $work"; fi

# make_user NAME DEPENDENCY-LINE MAIN-BODY: a binary package with that one dependency.
make_user() {
    mkdir -p "$work/$1/src"
    cat >"$work/$1/Cargo.toml" <<EOF
[package]
name = "$1"
version = "0.0.0"
edition = "2024"
publish = false

[dependencies]
$2

[workspace]
EOF
    printf 'fn main() {\n%s\n}\n' "$3" >"$work/$1/src/main.rs"
    # The workspace's lock file pins what both share (thiserror, libloading, ...); cargo drops
    # the rest.
    cp "$root/Cargo.lock" "$work/$1/Cargo.lock"
    (cd "$work/$1" && cargo fetch -q)
}

users=(stream-user cudarc-user)
make_user stream-user "cuda-stream = { path = \"$root/cuda-stream\" }" \
    '    println!("{}", cuda_stream::driver_version().is_ok());'
make_user cudarc-user \
    'cudarc = { version = "0.19", default-features = false, features = ["std", "driver", "dynamic-loading", "cuda-13000"] }' \
    '    println!("{}", cudarc::driver::result::init().is_ok());'
if [ -n "${OTHER:-}" ]; then
    other=$(cd "$OTHER" && pwd)
    make_user other-user "cuda-stream = { path = \"$other/cuda-stream\" }" \
        '    println!("{}", cuda_stream::driver_version().is_ok());'
    users+=(other-user)
fi

echo "rustc: $(rustc --version); cores: $(nproc); load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for run in $(seq 1 "$RUNS"); do
    for profile in ${PROFILES:-debug release}; do
        for user in "${users[@]}"; do
            flag=()
            [ "$profile" = release ] && flag=(--release)
            dir="$work/$user"
            target="$work/target-$user-$profile-$run"
            start=$(date +%s.%N)
            (cd "$dir" && CARGO_TARGET_DIR="$target" cargo build -q --offline --timings "${flag[@]}")
            end=$(date +%s.%N)
            report=$(ls "$target"/cargo-timings/cargo-timing-*.html | head -1)
            echo "$user $profile $run $(python3 -c "print($end - $start)") $report" >>"$work/results"
        done
    done
done

python3 - "$work" "$RUNS" <<'PY'
import json, os, re, statistics, subprocess, sys
from collections import defaultdict

work, runs = sys.argv[1], int(sys.argv[2])
results = os.path.join(work, "results")
HOST = re.search(r"^host: (\S+)", subprocess.check_output(["rustc", "-vV"], text=True), re.M).group(1)
rows = defaultdict(list)
for line in open(results):
    user, profile, run, wall, report = line.split()
    rows[(user, profile)].append((float(wall), report))

def units(report):
    """The units of a cargo timing report: name, start, duration (s)."""
    text = open(report).read()
    m = re.search(r"const UNIT_DATA = (\[.*?\]);\n", text, re.S)
    return json.loads(m.group(1)) if m else []

def dependencies(user):
    """Package name -> the names of its normal and build dependencies (cargo metadata)."""
    meta = json.loads(subprocess.check_output(
        ["cargo", "metadata", "-q", "--offline", "--format-version", "1", "--filter-platform",
         HOST], cwd=os.path.join(work, user)))
    name = {p["id"]: p["name"] for p in meta["packages"]}
    return {
        name[n["id"]]: [name[d["pkg"]] for d in n["deps"]
                        if any(k["kind"] in (None, "build") for k in d["dep_kinds"])]
        for n in meta["resolve"]["nodes"]
    }


def critical_path(data, deps, root):
    """The longest chain of dependencies, weighted by each package's own time (its build
    script, its run and its library): what bounds the build however many cores there are,
    whatever the scheduling. A library waits only for the frontend of a library it depends on
    (pipelining: the metadata is enough), for the whole of a proc macro or a build dependency."""
    own, front = defaultdict(float), {}
    for u in data:
        own[u["name"]] += u["duration"]
        sections = dict(u.get("sections") or [])
        if "build-script" not in u.get("target", "") and "frontend" in sections:
            front[u["name"]] = u["duration"] - sections["frontend"]["end"]  # what it may skip
    memo = {}

    def longest(p):
        if p not in memo:
            best = (0.0, [])
            for d in deps.get(p, []):
                if d in own:
                    length, chain = longest(d)
                    early = front.get(d, 0.0) if p != root else 0.0  # a binary links rlibs
                    best = max(best, (length - early, chain), key=lambda b: b[0])
            memo[p] = (best[0] + own[p], best[1] + [p])
        return memo[p]

    length, chain = max((longest(p) for p in own), key=lambda b: b[0], default=(0, []))
    return length, " -> ".join(f"{p} {own[p]:.1f}" for p in chain)

print()
print(f"| binary | profile | cold build, s (median of {runs}) | longest chain, s | the chain, in the run nearest the median (each package's own time, s) |")
print("| --- | --- | --- | --- | --- |")
for (user, profile), got in sorted(rows.items(), key=lambda kv: (kv[0][1], kv[0][0])):
    walls = sorted(w for w, _ in got)
    median = statistics.median(walls)
    report = min(got, key=lambda g: abs(g[0] - median))[1]
    length, chain = critical_path(units(report), dependencies(user), user)
    print(f"| {user} | {profile} | {median:.1f} | {length:.1f} | {chain} |")
PY
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
