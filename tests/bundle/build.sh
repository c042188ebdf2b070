#!/usr/bin/env bash
# Builds the GPU bundle: every GPU test binary, the examples, the benchmark and its Python peers
# and combiner, its experiments (probe, gpu-experiments.sh), the interop library and its Python
# test, stripped, with run.sh, in one git-ignored folder (gpu-bundle/, < 64 MiB).
#
#   tests/bundle/build.sh            # here (no GPU needed)
#   gpu-bundle/run.sh [--bench]      # on the GPU machine, from the repository root
#
# It also packs the bundle (gpu-pack/bundle.tgz, about a third of its size) for copies that must
# stay small: `tar xzf gpu-pack/bundle.tgz && gpu-bundle/run.sh` there.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
out="$root/gpu-bundle"
rm -rf "$out"
mkdir -p "$out/tests" "$out/bin" "$out/lib" "$out/bench"

echo "== building test binaries (release)"
cargo test --release --workspace --exclude ui-tests --exclude build-support \
    --exclude 'cuda-mock-driver*' --exclude 'cuda-mock-nccl*' \
    --features cuda-stream-tests/nccl,cuda-stream-tests/nvrtc --no-run \
    --message-format=json 2>/dev/null >"$out/.cargo-tests.json"
python3 - "$out" <<'PY'
import json, os, shutil, sys
out = sys.argv[1]
seen = set()
for line in open(os.path.join(out, ".cargo-tests.json")):
    try:
        msg = json.loads(line)
    except ValueError:
        continue
    if msg.get("reason") != "compiler-artifact" or not msg.get("executable"):
        continue
    if not msg.get("profile", {}).get("test"):
        continue
    # `path+file:///dir#name@1.0` or, when the name is the folder's, `path+file:///dir#1.0`.
    where, _, spec = msg["package_id"].partition("#")
    pkg = spec.split("@")[0] if "@" in spec else where.rstrip("/").split("/")[-1]
    name = msg["target"]["name"]
    kind = msg["target"]["kind"][0]
    if kind == "bin":
        continue
    dest = f"{pkg}--{name}" if kind != "lib" else f"{pkg}--lib"
    # Runs the example (and the ports of cudarc's examples) against the test driver: CI tests (the
    # bundle runs the examples themselves).
    # The others read the workspace's files or check layouts and tables, and the crates' unit
    # tests open no driver: CI's (the bundle then stays under the 64 MiB a device call carries
    # with the tracked tree). So are the crates' NVRTC tests, which need no GPU (the one that
    # loads NVRTC's output into the test driver could not run here either);
    # cuda-stream-tests--nvrtc is the GPU's.
    if dest in ("cuda-stream--example", "cuda-stream--cudarc_examples",
                "cuda-stream--layers", "cuda-stream--driver_versions",
                "cuda-stream-sys--layout", "cuda-stream--nvrtc", "cuda-stream--nvrtc_module",
                "cuda-stream--nvrtc_old_driver",
                "cuda-stream-sys--nvrtc") or dest.endswith("--lib"):
        continue
    if dest in seen:
        continue
    seen.add(dest)
    shutil.copy2(msg["executable"], os.path.join(out, "tests", dest))
print(f"{len(seen)} test binaries")
PY
rm -f "$out/.cargo-tests.json"

echo "== building the examples, the benchmark and the interop library"
cargo build --release -p cuda-stream --example streams
cp target/release/examples/streams "$out/bin/streams"
# The ports of cudarc's examples (cuda-stream/examples/cudarc_*.rs; kernels compiled by NVRTC).
cudarc_examples=()
for f in cuda-stream/examples/cudarc_*.rs; do cudarc_examples+=("$(basename "$f" .rs)"); done
cargo build --release -p cuda-stream --features nvrtc "${cudarc_examples[@]/#/--example=}"
for name in "${cudarc_examples[@]}"; do cp "target/release/examples/$name" "$out/bin/$name"; done
cargo build --release -p cuda-stream-bench --features nccl,nvrtc
cp target/release/cuda-stream-bench "$out/bin/"
cp tests/bench/peers.py tests/bench/combine.py "$out/bench/"
# The experiments behind the benchmark's analysis (tests/perf/gpu-experiments.sh).
cargo build --release -p cuda-stream-tests --example probe
cp target/release/examples/probe "$out/bin/probe"
# What the driver and NCCL do with the current context, in raw calls (`bin/contexts`).
cargo build --release -p cuda-stream-tests --example contexts --features nccl
cp target/release/examples/contexts "$out/bin/contexts"
# Whether a host function that is to wake a parked thread runs, in raw calls (`bin/host_fn_wake`,
# plainly and under each compute-sanitizer tool: see tests/examples/host_fn_wake/).
cargo build --release -p cuda-stream-tests --example host_fn_wake
cp target/release/examples/host_fn_wake "$out/bin/host_fn_wake"
# The same question through this crate's `completed()`, step by step (`bin/completion_probe`).
cargo build --release -p cuda-stream-tests --example completion_probe
cp target/release/examples/completion_probe "$out/bin/completion_probe"
# Which stream-ordered calls wait for a host function on the legacy stream (`bin/blocking_calls`).
cargo build --release -p cuda-stream-tests --example blocking_calls
cp target/release/examples/blocking_calls "$out/bin/blocking_calls"
cp tests/perf/gpu-experiments.sh "$out/bin/"
if [ -d tests/interop ]; then
    cargo build --release -p cuda-stream-interop --features nccl
    cp target/release/libcuda_stream_interop.so "$out/lib/"
    cp tests/interop/*.py "$out/lib/"
fi

strip "$out"/tests/* "$out"/bin/* "$out"/lib/*.so 2>/dev/null || true
cp tests/bundle/run.sh tests/bundle/parallel.sh "$out/"
chmod +x "$out/run.sh" "$out/parallel.sh"
size=$(du -sm "$out" | cut -f1)
echo "== gpu-bundle: ${size} MiB in $out"
# The same, compressed, for a copy that must stay small (the bundle and the working tree together
# under 64 MiB): gpu-pack/bundle.tgz, unpacked there with `tar xzf gpu-pack/bundle.tgz`.
rm -rf "$root/gpu-pack"
mkdir -p "$root/gpu-pack"
tar -C "$root" -czf "$root/gpu-pack/bundle.tgz" gpu-bundle
packed=$(du -sm "$root/gpu-pack" | cut -f1)
echo "== gpu-pack: ${packed} MiB in $root/gpu-pack (tar xzf gpu-pack/bundle.tgz && gpu-bundle/run.sh)"
if [ "$packed" -ge 48 ]; then
    echo "the packed bundle is over 48 MiB: with the working tree it would pass the 64 MiB carry limit" >&2
    exit 1
fi
