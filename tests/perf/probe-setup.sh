# Sourced by callgrind.sh and code-lines.sh: the repository root as the working folder, the
# driver the probe loads (DRIVER, default the test driver), the probe (PROBE, default built here
# with the test driver), and a scratch folder `$work`, removed on exit.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
export CUDA_SYS_LIBCUDA=${DRIVER:-$root/target/release/libcuda_mock_driver.so}
bin=${PROBE:-$root/target/release/examples/probe}
if [ -z "${PROBE:-}" ]; then
    cargo build -q --release -p cuda-mock-driver -p cuda-stream-tests --example probe
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
