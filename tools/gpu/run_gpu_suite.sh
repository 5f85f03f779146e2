#!/usr/bin/env bash
# Builds Blossom's GPU test binaries on this (GPU-less) machine and bundles them, with their
# runfiles (test fixtures) and the shared libraries a GPU machine will not have, into one folder
# that the device tool can carry to a GPU machine, where run_on_device.sh runs them.
#
# Usage (from anywhere in the repository):
#   tools/gpu/run_gpu_suite.sh [BUNDLE_DIR]        # default BUNDLE_DIR: .device/gpu_suite
#
# Then, with the device tool (carry the bundle; /.device/ is git-ignored, so it must be named):
#   run(command="bash .device/gpu_suite/run_on_device.sh tests",     carry=[".device/gpu_suite"])
#   run(command="bash .device/gpu_suite/run_on_device.sh memcheck",  carry=[".device/gpu_suite"])
#   run(command="bash .device/gpu_suite/run_on_device.sh racecheck", carry=[".device/gpu_suite"])
# (or "all" in one call if it fits the 10-minute limit). Each call writes
# $OUT/gpu_results/{results.json,results.md,logs/} on the device; copy the fetched folder to
# benchmarks/results/<date>-gpu-suite/ in the repository.
#
# What goes in the bundle:
#   bin/<test>          the gpu-tagged cc_test binaries (bazel query over //kernels/cuda and //tests/gpu)
#   runfiles/blossom/   their merged runfiles (fixtures), used as TEST_SRCDIR on the device
#   lib/                every non-system shared library they load (Bazel's _solib_k8 libraries,
#                       abseil, gtest, spdlog, fmt, cudart), resolved with ldd
#   lib/compat/         this machine's libstdc++/libgcc_s, used only if the device's are older
#   manifest.json       commit, dirty flag, build time, tests, libraries left to the device
#   run_on_device.sh    the runner
# cuBLAS/cuBLASLt/NCCL (hundreds of MB) exceed the device tool's 64 MiB carry limit, so they are
# NOT bundled: the GPU image has CUDA 13 (run_on_device.sh finds them under /usr/local/cuda or
# the Python nvidia-* wheels). Anything else larger than BLOSSOM_MAX_LIB_MB (default 16) is
# likewise left to the device and listed in the manifest.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
# shellcheck source=tools/gpu/bundle_libs.sh
source "$ROOT/tools/gpu/bundle_libs.sh"
BUNDLE="${1:-$ROOT/.device/gpu_suite}"
case "$BUNDLE" in /*) ;; *) BUNDLE="$ROOT/$BUNDLE" ;; esac
MAX_LIB_MB="${BLOSSOM_MAX_LIB_MB:-16}"

echo "== finding gpu-tagged tests"
mapfile -t TARGETS < <(bazel query 'attr(tags, "\bgpu\b", tests(//kernels/cuda:all + //tests/gpu:all))' 2>/dev/null | sort)
if [[ ${#TARGETS[@]} -eq 0 ]]; then
  TARGETS=(//kernels/cuda:device_test //kernels/cuda:cuda_backend_test //kernels/cuda:cuda_sampling_test
           //tests/gpu:bloom_cuda_test)
fi
printf '  %s\n' "${TARGETS[@]}"

echo "== building"
bazel build "${TARGETS[@]}"
BIN_ROOT="$(bazel info bazel-bin 2>/dev/null)"

echo "== bundling into $BUNDLE"
rm -rf "$BUNDLE"
mkdir -p "$BUNDLE/bin" "$BUNDLE/lib/compat" "$BUNDLE/runfiles"
declare -A LIBS=()
LEFT_TO_DEVICE=()
TESTS=()
for target in "${TARGETS[@]}"; do
  pkg="${target#//}"; pkg="${pkg%%:*}"; name="${target##*:}"
  bin="$BIN_ROOT/$pkg/$name"
  [[ -x "$bin" ]] || { echo "missing binary $bin" >&2; exit 1; }
  cp -L "$bin" "$BUNDLE/bin/$name"
  chmod u+w "$BUNDLE/bin/$name"
  TESTS+=("$name")
  if [[ -d "$bin.runfiles" ]]; then
    # Dereference the symlink forest; the libraries and binaries inside it are bundled elsewhere.
    cp -rL "$bin.runfiles/." "$BUNDLE/runfiles/"
    chmod -R u+w "$BUNDLE/runfiles"
    rm -rf "$BUNDLE/runfiles/blossom/_solib_k8" "$BUNDLE/runfiles/blossom/$pkg/$name" \
           "$BUNDLE/runfiles/MANIFEST" "$BUNDLE/runfiles/blossom/$pkg/$name.runfiles_manifest"
  fi
  while read -r lib path; do
    LIBS["$lib"]="$path"
  done < <(ldd "$bin" | awk '/=>/ && $3 ~ /^\// {print $1, $3} /not found/ {print $1, "NOT_FOUND"}')
done
# Fixtures must be present even if a runfiles tree was missing (TEST_SRCDIR layout).
mkdir -p "$BUNDLE/runfiles/blossom/tests"
if [[ ! -d "$BUNDLE/runfiles/blossom/tests/fixtures" ]]; then
  mkdir -p "$BUNDLE/runfiles/blossom/tests/fixtures"
  cp -r tests/fixtures/models tests/fixtures/goldens "$BUNDLE/runfiles/blossom/tests/fixtures/"
fi

bundle_shared_libs
cp tools/gpu/run_on_device.sh "$BUNDLE/run_on_device.sh"
chmod +x "$BUNDLE/run_on_device.sh"

COMMIT="$(git rev-parse HEAD 2>/dev/null || echo unknown)"
DIRTY="$(git status --porcelain 2>/dev/null | wc -l | tr -d ' ')"
NVCC="$(/usr/local/cuda/bin/nvcc --version 2>/dev/null | tail -1 || echo unknown)"
{
  echo "{"
  echo "  \"commit\": \"$COMMIT\","
  echo "  \"uncommitted_changes\": $DIRTY,"
  echo "  \"built_at\": \"$(date -u +%Y-%m-%dT%H:%M:%SZ)\","
  echo "  \"built_on\": \"$(hostname)\","
  echo "  \"nvcc\": \"$NVCC\","
  echo "  \"targets\": [$(printf '"%s",' "${TARGETS[@]}" | sed 's/,$//')],"
  echo "  \"tests\": [$(printf '"%s",' "${TESTS[@]}" | sed 's/,$//')],"
  echo "  \"libraries_expected_on_device\": [$( ((${#LEFT_TO_DEVICE[@]})) && printf '"%s",' "${LEFT_TO_DEVICE[@]}" | sed 's/,$//')]"
  echo "}"
} > "$BUNDLE/manifest.json"

SIZE_MB=$(( $(du -sbL "$BUNDLE" | cut -f1) / 1048576 ))
echo "== bundle: ${SIZE_MB} MiB, tests: ${TESTS[*]}"
echo "   left to the device: ${LEFT_TO_DEVICE[*]:-none}"
if (( SIZE_MB > 60 )); then
  echo "WARNING: the device tool carries at most 64 MiB; lower BLOSSOM_MAX_LIB_MB" >&2
fi
REL="${BUNDLE#$ROOT/}"
echo "== on the GPU machine (device tool, carry=[\"$REL\"]):"
echo "   bash $REL/run_on_device.sh tests        # then memcheck, racecheck (or: all)"
