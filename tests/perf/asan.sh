#!/usr/bin/env bash
# The test driver's suites under AddressSanitizer: the fault suite (every driver flavour), the
# random programs and the host-function cases, with cuda-stream, the tests and the test driver's
# libraries all instrumented. Needs a nightly toolchain (`-Zsanitizer=address`), so CI does not
# run it. The test binaries export the sanitizer's runtime symbols (a dynamic list: exporting
# every symbol would let the test driver's libraries bind to the copies of their own crate
# linked into the test binary) so that the instrumented libraries they load find it.
#
#   tests/perf/asan.sh                  # each binary once
#   RUNS=10 tests/perf/asan.sh          # ten times each
#   OPS=300000 tests/perf/asan.sh       # random-program operations per run (default 300,000)
#
# Builds into target/asan (git-ignored); prints one line per run and exits non-zero on any
# failure or sanitizer report (the logs stay in target/asan/logs).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
runs=${RUNS:-1}
ops=${OPS:-300000}
target=$root/target/asan
mkdir -p "$target/logs"
list=$target/asan.list
echo '{ __asan*; __sanitizer*; __lsan*; __ubsan*; __interceptor*; };' > "$list"
export RUSTFLAGS="-Zsanitizer=address -Clink-arg=-Wl,--dynamic-list=$list"
triple=$(rustc +nightly -vV | sed -n 's/^host: //p')
flavours=$(ls tests/mock-driver/flavours | sed 's/^cuda-/-p cuda-mock-driver-/; s/\./-/')
# shellcheck disable=SC2086
cargo +nightly build --release --target "$triple" --target-dir "$target" -p cuda-mock-driver $flavours \
    || exit 1
tests=(fault_injection random_programs in_host_fn host_and_completion)
out=$(cargo +nightly test --release --target "$triple" --target-dir "$target" -p cuda-mock-driver \
    "${tests[@]/#/--test=}" --no-run --message-format=json 2>/dev/null) || exit 1
status=0
for t in "${tests[@]}"; do
    exe=$(printf '%s\n' "$out" | python3 -c '
import json, sys
name = sys.argv[1]
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == name and m.get("executable"):
        print(m["executable"])' "$t" | tail -n1)
    for i in $(seq 1 "$runs"); do
        log=$target/logs/$t-$i.log
        ASAN_OPTIONS=detect_leaks=0 CUDA_STREAM_RANDOM_OPS=$ops timeout 1800 "$exe" >"$log" 2>&1
        rc=$?
        reports=$(grep -c "ERROR: AddressSanitizer" "$log")
        echo "$t run $i: exit $rc, AddressSanitizer reports $reports"
        if [ "$rc" -ne 0 ] || [ "$reports" -ne 0 ]; then status=1; fi
    done
done
exit $status
