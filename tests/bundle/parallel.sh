#!/usr/bin/env bash
# Runs the bundle's parts side by side on a machine with several GPUs, each part on GPUs of its
# own (CUDA_VISIBLE_DEVICES), so that one device call covers what run.sh does in several:
#
#   gpu-bundle/parallel.sh            # on a machine with 4 or more GPUs
#
# - GPUs 0 and 1: `run.sh --multi-gpu` (NCCL, peers, two-GPU tests, the multi-GPU benchmark
#   rows twice, memcheck of those binaries), then, side by side, on GPU 0 the plain bundle with
#   the CUDA 12.0 ABIs as well (`run.sh --quick --abi 12000`) and on GPU 1 the test binaries
#   under memcheck;
# - GPU 2: the test binaries under racecheck; GPU 3: under synccheck.
#
# With 2 or 3 GPUs the sanitizer parts share the last GPU, one after the other. Each part writes
# its logs under $OUT/<part>/gpu-logs and its output to $OUT/<part>.out; this script prints each
# part's summary and exits non-zero if any part failed. SANITIZER_BUDGET_S bounds each sanitizer
# part (default 520 s for racecheck and synccheck; memcheck gets what is left after the
# multi-GPU part).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/parallel}
mkdir -p "$out"
ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
echo "GPUs visible: $ngpu"
if [ "$ngpu" -lt 2 ]; then
    echo "parallel.sh needs 2 or more GPUs; use run.sh"
    exit 2
fi
export NCCL_NVLS_ENABLE=0
budget=${SANITIZER_BUDGET_S:-520}
start=$(date +%s)

# One part: its name, its GPUs, then run.sh's arguments (environment through `env`).
part() {
    local name=$1 gpus=$2
    shift 2
    mkdir -p "$out/$name"
    OUT="$out/$name" CUDA_VISIBLE_DEVICES=$gpus "$@" >"$out/$name.out" 2>&1
    echo $? >"$out/$name.rc"
}

last=$((ngpu - 1))
(
    part multi-gpu 0,1 "$here/run.sh" --multi-gpu
    left=$((budget - ($(date +%s) - start)))
    part plain 0 "$here/run.sh" --quick --abi 12000 &
    part memcheck 1 env SANITIZER_TOOLS=memcheck SANITIZER_BUDGET_S=$left "$here/run.sh" --sanitize-only &
    wait
) &
if [ "$ngpu" -ge 4 ]; then
    part racecheck 2 env SANITIZER_TOOLS=racecheck SANITIZER_BUDGET_S="$budget" "$here/run.sh" --sanitize-only &
    part synccheck 3 env SANITIZER_TOOLS=synccheck SANITIZER_BUDGET_S="$budget" "$here/run.sh" --sanitize-only &
else
    half=$((budget / 2))
    (
        part racecheck "$last" env SANITIZER_TOOLS=racecheck SANITIZER_BUDGET_S=$half "$here/run.sh" --sanitize-only
        part synccheck "$last" env SANITIZER_TOOLS=synccheck SANITIZER_BUDGET_S=$half "$here/run.sh" --sanitize-only
    ) &
fi
wait

fail=0
for name in multi-gpu plain memcheck racecheck synccheck; do
    [ -f "$out/$name.rc" ] || continue
    rc=$(cat "$out/$name.rc")
    echo
    echo "==== part $name (exit $rc)"
    grep -E '^(FAIL|compute-sanitizer .*: [1-9][0-9]* errors|compute-sanitizer .*not run)' "$out/$name.out"
    sed -n '/^== summary/,$p' "$out/$name.out"
    [ "$rc" -eq 0 ] || fail=1
done
echo
echo "parallel.sh: $(($(date +%s) - start)) s"
exit $fail
