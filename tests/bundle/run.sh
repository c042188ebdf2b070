#!/usr/bin/env bash
# Runs the whole GPU bundle on a machine with an NVIDIA GPU: every test binary, the examples, the
# Python interop test, then the GPU tests again under compute-sanitizer (memcheck, racecheck,
# synccheck) where it is installed. Prints a pass/fail summary with the GPU and driver, and exits
# non-zero on any failure. `--quick` skips the sanitizers; `--sanitize-only` runs only the
# sanitizers. `--bench` also runs the benchmark: `cuda-stream-bench` twice (two full processes),
# then the Python peers (bench/peers.py: PyTorch, CuPy, cuda.core), then bench/combine.py, which
# prints each target row's ratio in both runs (`met` only when both are within the target) and one
# table of every column (raw, cuda-stream, cudarc, PyTorch, CuPy, cuda.core); the JSON and logs
# go to $OUT/gpu-logs (or /tmp/gpu-logs). `--bench-only` runs only that; `--bench-quick` passes
# `--quick` to the benchmark and the peers (a smoke test). The sanitizer runs stop starting new
# binaries after SANITIZER_BUDGET_S seconds (default 480), so one call fits a 10-minute limit;
# SANITIZER_TOOLS picks the tools (default "memcheck racecheck synccheck");
# SANITIZER_PER_BINARY_S bounds each binary (default 120); SANITIZER_ONLY="query pool" limits the
# binaries. `--abi 12000` (or `--abi 12.0`) runs every test binary a second time with
# CUDA_SYS_ABI_VERSION set to that version, so cuda-stream-sys resolves only the ABIs of that CUDA
# version and cuda-stream takes its fallbacks on the real driver (`elapsed_since` through the
# original cuEventElapsedTime, ...); it prints its own PASS/FAIL lines and libtest counts,
# prefixed `abi 12000`. `--abi-only 12000` runs just that pass.
# `--multi-gpu` runs only the work for a machine with several GPUs: the NCCL, peer and
# multi-GPU test binaries (two GPUs in one process, two processes with one rank each, peer copies
# both ways), the benchmark's multi-GPU rows twice (all-reduce bus bandwidth at 1 MiB, 64 MiB and
# 1 GiB, peer copy bandwidth, and torch.distributed's all-reduce from bench/peers.py --nccl), and
# the three test binaries again under compute-sanitizer memcheck (MULTI_SANITIZE=0: not); it
# skips, saying why, where fewer than 2 GPUs are visible. NCCL is found through Python (the
# nvidia-nccl-cu13 wheel: `import nvidia.nccl`) unless CUDA_SYS_LIBNCCL names it; NVLink
# multicast stays off: NCCL_NVLS_ENABLE=0 is exported for every process this script starts.
# NVRTC (for tests/nvrtc.rs and the cudarc ports) is found through Python too (the
# nvidia-cuda-nvrtc wheel) unless CUDA_SYS_LIBNVRTC names it.
# Every plain run is bounded too, so a hang fails (exit 124, reported as a timeout) instead of
# stalling: PER_BINARY_S for each test binary (default 300), each example and the Python interop
# test (120 s each), each benchmark run (BENCH_S, default 300). The benchmark's measuring thread
# is pinned to the last CPU (BENCH_PIN_CPU=N for another, BENCH_PIN_CPU=none for none).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bench=0
multi=0
bench_quick=()
sanitize=1
tests=1
abi=""
next_is_abi=0
for a in "$@"; do
    if [ $next_is_abi -eq 1 ]; then abi=$a; next_is_abi=0; continue; fi
    case "$a" in
        --abi) next_is_abi=1 ;;
        --abi-only) next_is_abi=1; tests=0; sanitize=0 ;;
        --bench) bench=1 ;;
        --bench-only) bench=1; tests=0; sanitize=0 ;;
        --bench-quick) bench=1; bench_quick=(--quick) ;;
        --quick) sanitize=0 ;;
        --multi-gpu) multi=1; tests=0; sanitize=0 ;;
        --sanitize-only) tests=0 ;;
        *) echo "unknown option $a" >&2; exit 2 ;;
    esac
done
if [ $next_is_abi -eq 1 ]; then echo "--abi needs a CUDA version (12000 or 12.0)" >&2; exit 2; fi
budget=${SANITIZER_BUDGET_S:-480}
per_binary=${SANITIZER_PER_BINARY_S:-120}
plain_per_binary=${PER_BINARY_S:-300}
bench_s=${BENCH_S:-300}
# BENCH_ONLY=hot_path,memory runs only those groups of rows (see cuda-stream-bench --help);
# BENCH_PEERS=0 leaves the Python peers out.
bench_only=()
if [ -n "${BENCH_ONLY:-}" ]; then
    bench_only=(--only "$BENCH_ONLY")
fi
only=${SANITIZER_ONLY:-}
log_dir=${OUT:-/tmp}/gpu-logs
mkdir -p "$log_dir"

gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n1)
echo "GPU: ${gpu:-unknown (no nvidia-smi)}"
ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
echo "GPUs visible: $ngpu"

# NVLink multicast stays off in every process started here (never cuMulticastCreate).
export NCCL_NVLS_ENABLE=0
# NCCL: the nvidia-nccl-cu13 wheel beside PyTorch, found through Python.
if [ -z "${CUDA_SYS_LIBNCCL:-}" ]; then
    nccl_lib=$(python3 -c 'import os, nvidia.nccl as n; print(os.path.join(list(n.__path__)[0], "lib", "libnccl.so.2"))' 2>/dev/null)
    if [ -n "$nccl_lib" ] && [ -f "$nccl_lib" ]; then
        export CUDA_SYS_LIBNCCL=$nccl_lib
    fi
fi
echo "NCCL: ${CUDA_SYS_LIBNCCL:-not found through Python, libnccl.so.2 from the library path if any}; NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE"
# NVRTC (tests/nvrtc.rs): the nvidia-cuda-nvrtc wheel beside PyTorch (CUDA 13's layout, else
# the cu12 wheel's), found through Python, unless CUDA_SYS_LIBNVRTC names it.
if [ -z "${CUDA_SYS_LIBNVRTC:-}" ]; then
    nvrtc_lib=$(python3 -c 'import os, nvidia
subs = ("cu13/lib/libnvrtc.so.13", "cuda_nvrtc/lib/libnvrtc.so.12")
print(next((p for d in nvidia.__path__ for p in (os.path.join(d, s) for s in subs) if os.path.isfile(p)), ""))' 2>/dev/null)
    if [ -n "$nvrtc_lib" ] && [ -f "$nvrtc_lib" ]; then
        export CUDA_SYS_LIBNVRTC=$nvrtc_lib
    fi
fi
echo "NVRTC: ${CUDA_SYS_LIBNVRTC:-not found through Python, libnvrtc.so.13 from the library path or a toolkit if any}"

pass=0
fail=0
failed=()
sanitizer_errors=0
internal_errors=0
tests_passed=0
tests_failed=0

record() { # name status
    if [ "$2" -eq 0 ]; then
        pass=$((pass + 1)); echo "PASS $1"
    elif [ "$2" -eq 124 ] || [ "$2" -eq 137 ]; then
        fail=$((fail + 1)); failed+=("$1 (timed out)"); echo "FAIL $1 (timed out, exit $2)"
    else
        fail=$((fail + 1)); failed+=("$1"); echo "FAIL $1 (exit $2)"
    fi
}

for t in "$here"/tests/*; do
    [ $tests -eq 1 ] || break
    name=$(basename "$t")
    timeout -k 10 "$plain_per_binary" "$t" --test-threads=4 >"$log_dir/$name.log" 2>&1
    st=$?
    # libtest's own counts, summed over binaries.
    while read -r p f; do
        tests_passed=$((tests_passed + p)); tests_failed=$((tests_failed + f))
    done < <(sed -n 's/^test result: [A-Za-z]*\. \([0-9]*\) passed; \([0-9]*\) failed.*/\1 \2/p' "$log_dir/$name.log")
    grep -h "^skipped\|^  *skipped\|skipped:" "$log_dir/$name.log" | sort | uniq -c | head -5
    # What cuda-stream-sys resolved, and which ABI elapsed_since ran through (timing.rs, raw_smoke.rs).
    grep -h "elapsed_since ran through\|bindings resolve ABIs up to\|bindings resolved (" \
        "$log_dir/$name.log"
    record "$name" $st
    if [ $st -ne 0 ]; then tail -n 40 "$log_dir/$name.log"; fi
done

if [ $multi -eq 1 ]; then
    if [ "$ngpu" -lt 2 ]; then
        echo "skipped: --multi-gpu needs 2 GPUs, $ngpu visible"
    else
        echo "== multi-GPU: NCCL, peers and two-GPU tests (every one required to run, none skipped), one test at a time and then four at a time"
        for run in 1 4; do
        for name in cuda-stream-tests--nccl cuda-stream-tests--peers cuda-stream-tests--multi_gpu; do
            t="$here/tests/$name"
            [ -x "$t" ] || { record "$name (missing)" 1; continue; }
            # Four at a time as well: a drain of work queued by another test (a communicator
            # destroyed with its last graph) on a test's thread is what four threads found.
            name_run=$name
            [ $run -eq 1 ] || name_run="$name, 4 threads"
            CUDA_STREAM_TESTS_REQUIRE_GPU=1 CUDA_STREAM_TESTS_REQUIRE_NCCL=1 \
                timeout -k 10 "$plain_per_binary" "$t" --test-threads=$run --nocapture \
                >"$log_dir/multi-$name.log" 2>&1
            st=$?
            while read -r p f; do
                tests_passed=$((tests_passed + p)); tests_failed=$((tests_failed + f))
            done < <(sed -n 's/^test result: [A-Za-z]*\. \([0-9]*\) passed; \([0-9]*\) failed.*/\1 \2/p' "$log_dir/multi-$name.log")
            grep -h "skipped\|^NCCL \|peer access\|rank 1:" "$log_dir/multi-$name.log" | sort | uniq -c | head -8
            record "multi-gpu $name_run" $st
            if [ $st -ne 0 ]; then tail -n 40 "$log_dir/multi-$name.log"; fi
        done
        done
        # The port of cudarc's multi-GPU copy example, with both GPUs visible (the plain part
        # runs the examples on one GPU, where it says it is skipped).
        if [ -x "$here/bin/cudarc_13_copy_multi_gpu" ]; then
            timeout -k 10 120 "$here/bin/cudarc_13_copy_multi_gpu" >"$log_dir/multi-cudarc_13.log" 2>&1
            st=$?
            cat "$log_dir/multi-cudarc_13.log"
            if [ $st -eq 0 ] && grep -q "skipped" "$log_dir/multi-cudarc_13.log"; then st=1; fi
            record "multi-gpu example cudarc_13_copy_multi_gpu" $st
        fi
        if [ -x "$here/bin/cuda-stream-bench" ]; then
            # Two full runs (two processes): a target counts as met only when both are within it.
            for run in 1 2; do
                echo "== multi-GPU benchmark rows, run $run of 2 (cuda-stream vs raw NCCL and cuMemcpyPeerAsync)"
                timeout -k 10 "$bench_s" "$here/bin/cuda-stream-bench" --multi-gpu "${bench_quick[@]}" \
                    2>&1 | tee "$log_dir/bench-multi-$run.log"
                record "multi-gpu benchmark run $run" "${PIPESTATUS[0]}"
            done
        fi
        if [ -f "$here/bench/peers.py" ]; then
            echo "== torch.distributed all_reduce (NCCL backend, 2 processes)"
            PYTHONUNBUFFERED=1 timeout -k 10 600 python3 "$here/bench/peers.py" --nccl \
                2>&1 | tee "$log_dir/peers-nccl.log"
            record "python torch.distributed all_reduce" "${PIPESTATUS[0]}"
        fi
        # The multi-GPU test binaries under compute-sanitizer memcheck (API errors not reported:
        # the tests provoke some on purpose). MULTI_SANITIZE=0 leaves this out.
        cs=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -n1)
        if [ "${MULTI_SANITIZE:-1}" != 0 ] && [ -n "$cs" ]; then
            for name in cuda-stream-tests--peers cuda-stream-tests--multi_gpu cuda-stream-tests--nccl; do
                t="$here/tests/$name"
                [ -x "$t" ] || continue
                CUDA_STREAM_UNDER_SANITIZER=memcheck CUDA_STREAM_TESTS_REQUIRE_GPU=1 \
                    CUDA_STREAM_TESTS_REQUIRE_NCCL=1 timeout -k 10 "$per_binary" "$cs" --tool memcheck \
                    --report-api-errors no --error-exitcode 99 "$t" --test-threads=1 \
                    >"$log_dir/multi-san-memcheck-$name.log" 2>&1
                st=$?
                n=$(sed -n 's/.*ERROR SUMMARY: \([0-9]*\) error.*/\1/p' \
                    "$log_dir/multi-san-memcheck-$name.log" | tail -n1)
                n=${n:-0}
                sanitizer_errors=$((sanitizer_errors + n))
                echo "compute-sanitizer memcheck $name (two GPUs): ${n} errors (exit $st)"
                if [ "$st" -ne 0 ]; then tail -n 30 "$log_dir/multi-san-memcheck-$name.log"; fi
                record "multi-gpu sanitizer memcheck $name" "$st"
            done
        fi
    fi
fi

abi_passed=0
abi_failed=0
if [ -n "$abi" ]; then
    echo "== the test binaries again, with CUDA_SYS_ABI_VERSION=$abi (the ABIs of CUDA $abi only)"
    for t in "$here"/tests/*; do
        name=$(basename "$t")
        CUDA_SYS_ABI_VERSION=$abi timeout -k 10 "$plain_per_binary" "$t" --test-threads=4 \
            >"$log_dir/abi-$abi-$name.log" 2>&1
        st=$?
        while read -r p f; do
            abi_passed=$((abi_passed + p)); abi_failed=$((abi_failed + f))
        done < <(sed -n 's/^test result: [A-Za-z]*\. \([0-9]*\) passed; \([0-9]*\) failed.*/\1 \2/p' "$log_dir/abi-$abi-$name.log")
        # What resolved, and which ABI elapsed_since ran through (timing.rs, raw_smoke.rs).
        grep -h "elapsed_since ran through\|bindings resolve ABIs up to\|bindings resolved (" \
            "$log_dir/abi-$abi-$name.log" | sed "s/^/abi $abi: /"
        record "abi $abi $name" $st
        if [ $st -ne 0 ]; then tail -n 40 "$log_dir/abi-$abi-$name.log"; fi
    done
    echo "abi $abi: libtest $abi_passed tests passed, $abi_failed failed"
fi

if [ $tests -eq 1 ]; then
    timeout -k 10 120 "$here/bin/streams" >"$log_dir/example.log" 2>&1
    st=$?
    cat "$log_dir/example.log"
    record "example streams" $st
    # The ports of cudarc's examples (cuda-stream/doc/from-cudarc.md), each checking its results
    # (cudarc_13_copy_multi_gpu skips, saying so, with fewer than 2 GPUs).
    for e in "$here"/bin/cudarc_*; do
        [ -x "$e" ] || continue
        name=$(basename "$e")
        timeout -k 10 120 "$e" >"$log_dir/$name.log" 2>&1
        st=$?
        cat "$log_dir/$name.log"
        record "example $name" $st
    done
fi

if [ $tests -eq 1 ] && [ -f "$here/lib/test_interop.py" ]; then
    PYTHONUNBUFFERED=1 timeout -k 10 120 python3 "$here/lib/test_interop.py" \
        "$here/lib/libcuda_stream_interop.so" >"$log_dir/interop.log" 2>&1
    st=$?
    cat "$log_dir/interop.log"
    record "python interop" $st
fi

if [ $bench -eq 1 ] && [ -x "$here/bin/cuda-stream-bench" ]; then
    # The measuring thread runs on the last CPU (CPU 0 takes more of the machine's interrupts,
    # and a thread moved between CPUs times its batches with more spread); BENCH_PIN_CPU=none
    # leaves it unpinned.
    pin=()
    cpus=$(nproc 2>/dev/null || echo 1)
    pin_cpu=${BENCH_PIN_CPU:-$((cpus - 1))}
    if [ "$pin_cpu" != none ] && [ "$cpus" -ge 4 ]; then
        pin=(--pin-cpu "$pin_cpu")
    fi
    # Two full runs: a target counts as met only when both are within it.
    for run in 1 2; do
        echo "== benchmark, run $run of 2"
        rm -f "$log_dir/bench-$run.json"
        timeout -k 10 "$bench_s" "$here/bin/cuda-stream-bench" "${bench_quick[@]}" "${pin[@]}" \
            "${bench_only[@]}" --json "$log_dir/bench-$run.json" 2>&1 \
            | tee "$log_dir/bench-$run.log"
        record "benchmark run $run" "${PIPESTATUS[0]}"
    done
    peers=()
    if [ -f "$here/bench/peers.py" ] && [ "${BENCH_PEERS:-1}" != 0 ]; then
        echo "== Python peers (PyTorch, CuPy, cuda.core)"
        rm -f "$log_dir/peers.json"
        PYTHONUNBUFFERED=1 timeout -k 10 1000 python3 "$here/bench/peers.py" "${bench_quick[@]}" --json "$log_dir/peers.json" \
            2>&1 | tee "$log_dir/peers.log"
        record "python peers" "${PIPESTATUS[0]}"
        peers=(--peers "$log_dir/peers.json")
    fi
    if [ -f "$here/bench/combine.py" ]; then
        echo "== benchmark: both runs and every column"
        python3 "$here/bench/combine.py" "$log_dir/bench-1.json" "$log_dir/bench-2.json" \
            "${peers[@]}" | tee "$log_dir/bench-combined.md"
        record "benchmark tables" "${PIPESTATUS[0]}"
    fi
fi

# `--report-api-errors no`: the tests provoke driver errors on purpose (CUDA_ERROR_NOT_READY from
# a pending event, CUDA_ERROR_INVALID_CONTEXT from opening an IPC event in its own process) to
# check that they are reported; the sanitizers count memory, race and synchronisation errors.
if [ $sanitize -eq 1 ]; then
    cs=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -n1)
    if [ -n "$cs" ]; then
        start=$(date +%s)
        # The example (a module loaded, kernels looked up and launched) under plain
        # compute-sanitizer, API errors reported: a call the crate makes that the driver
        # refuses shows here (the probe past a kernel's last parameter did).
        if [ -x "$here/bin/streams" ]; then
            timeout -k 10 "$per_binary" "$cs" --error-exitcode 99 "$here/bin/streams" \
                >"$log_dir/san-plain-example.log" 2>&1
            st=$?
            n=$(sed -n 's/.*ERROR SUMMARY: \([0-9]*\) error.*/\1/p' "$log_dir/san-plain-example.log" | tail -n1)
            n=${n:-0}
            sanitizer_errors=$((sanitizer_errors + n))
            echo "compute-sanitizer (plain, API errors reported) example streams: ${n} errors (exit $st)"
            if [ "$st" -ne 0 ]; then grep -m5 -A6 "Program hit\|========= Error\|=========     " "$log_dir/san-plain-example.log"; fi
            record "sanitizer plain example streams" "$st"
        fi
        for tool in ${SANITIZER_TOOLS:-memcheck racecheck synccheck}; do
            for t in "$here"/tests/cuda-stream-tests--*; do
                name=$(basename "$t")
                # NCCL's own kernels and proxy threads are not this crate's to sanitise.
                case "$name" in *stress*|*lib|*leak*|*nccl*) continue ;; esac
                if [ -n "$only" ] && ! echo " $only " | grep -q " ${name#cuda-stream-tests--} "; then
                    continue
                fi
                left=$((budget - ($(date +%s) - start)))
                if [ $left -le 20 ]; then
                    echo "compute-sanitizer $tool $name: not run (sanitizer budget spent)"
                    continue
                fi
                # The tests read the tool's name (cuda_stream_tests::sanitizer) to size work the
                # tool's bookkeeping cannot hold at full size.
                CUDA_STREAM_UNDER_SANITIZER=$tool timeout -k 10 $((left < per_binary ? left : per_binary)) "$cs" --tool "$tool" --report-api-errors no --error-exitcode 99 "$t" --test-threads=1 \
                    >"$log_dir/san-$tool-$name.log" 2>&1
                st=$?
                # memcheck and synccheck end with "ERROR SUMMARY: N errors", racecheck with
                # "RACECHECK SUMMARY: H hazards displayed (N errors, W warnings)".
                n=$(sed -n -e 's/.*ERROR SUMMARY: \([0-9]*\) error.*/\1/p' \
                    -e 's/.*RACECHECK SUMMARY: .*(\([0-9]*\) error.*/\1/p' \
                    "$log_dir/san-$tool-$name.log" | tail -n1)
                n=${n:-0}
                # The tool's own failures ("Internal Sanitizer Error: Detected a failure to track
                # a kernel launch", racecheck on the random programs' GPU mode) count in its
                # summary but are no finding about the program: counted and shown apart.
                internal=$(grep -c "Internal Sanitizer Error" "$log_dir/san-$tool-$name.log")
                if [ "$internal" -gt 0 ] && [ "$n" -ge "$internal" ]; then
                    n=$((n - internal))
                    internal_errors=$((internal_errors + internal))
                    grep -m2 "Internal Sanitizer Error" "$log_dir/san-$tool-$name.log"
                    if [ "$st" -eq 99 ] && [ "$n" -eq 0 ]; then st=0; fi
                fi
                sanitizer_errors=$((sanitizer_errors + n))
                echo "compute-sanitizer $tool $name: ${n} errors (exit $st)$([ "$internal" -gt 0 ] && echo ", and $internal internal errors of the tool")"
                if [ "$st" -ne 0 ] && [ "$st" -ne 99 ]; then
                    tail -n 20 "$log_dir/san-$tool-$name.log"
                fi
                case "$st" in 0|124|137) ;; *) st=1 ;; esac
                record "sanitizer $tool $name" "$st"
            done
        done
    else
        echo "compute-sanitizer not found: sanitizer runs skipped"
    fi
fi

echo
echo "== summary (${gpu:-unknown GPU})"
echo "libtest: $tests_passed tests passed, $tests_failed failed"
if [ -n "$abi" ]; then
    echo "libtest with CUDA_SYS_ABI_VERSION=$abi: $abi_passed tests passed, $abi_failed failed"
fi
echo "sanitizer errors: $sanitizer_errors (internal errors of the tool, apart: $internal_errors)"
for f in "${failed[@]}"; do echo "failed: $f"; done
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
