#!/usr/bin/env bash
# Packs built GPU test binaries, their fixtures and the shared libraries they load into one
# folder that the device tool carries to a GPU machine, where run_on_device.sh (copied in) runs
# them. Called by tools/gpu/run_gpu_suite.sh after its Bazel build, and by the dry-run test
# (//tools/gpu:gpu_suite_dry_run_test) on the binaries in its runfiles. Needs no Bazel.
#
# Usage: make_gpu_bundle.sh BUNDLE_DIR RUNFILES_DIR BINARY...
#   RUNFILES_DIR  a runfiles tree holding blossom/tests/fixtures (the binaries' data), "-" to
#                 use each binary's own BINARY.runfiles, or "tree" to copy none: the bundle then
#                 sits in the repository (BUNDLE_DIR = <repo>/.device/<name>) and run_on_device.sh
#                 links <repo>/tests/fixtures, which travels with the working tree anyway (the
#                 fixtures are 13 MiB of the device tool's 64 MiB; carrying them twice crowded
#                 out the benchmark bundle)
#
# Layout made:
#   bin/<test>          the test binaries
#   runfiles/blossom/   their data (fixtures; linked on the device in "tree" mode), used as
#                       TEST_SRCDIR on the device
#   lib/                every non-system shared library they load (abseil, gtest, spdlog, fmt,
#                       cudart, ...), resolved with ldd
#   lib/compat/         this machine's libstdc++/libgcc_s, used only if the device's are older
#   manifest.json       commit, dirty flag, build time, tests, glibc needed, libraries left to the
#                       device (cuBLAS, cuBLASLt, NCCL: over BLOSSOM_MAX_LIB_MB, default 16)
#   run_on_device.sh    the runner
# Fails when the bundle needs a glibc newer than 2.35 or would not travel (bundle_libs.sh).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tools/gpu/bundle_libs.sh
source "$HERE/bundle_libs.sh"
if [[ $# -lt 3 ]]; then
  echo "usage: $0 BUNDLE_DIR RUNFILES_DIR|- BINARY..." >&2
  exit 2
fi
BUNDLE="$1"; RUNFILES="$2"; shift 2
MAX_LIB_MB="${BLOSSOM_MAX_LIB_MB:-16}"

rm -rf "$BUNDLE"
mkdir -p "$BUNDLE/bin" "$BUNDLE/lib/compat" "$BUNDLE/runfiles/blossom"
declare -A LIBS=()
LEFT_TO_DEVICE=()
TESTS=()
for bin in "$@"; do
  [[ -x "$bin" ]] || { echo "missing binary $bin" >&2; exit 1; }
  name="$(basename "$bin")"
  cp -L "$bin" "$BUNDLE/bin/$name"
  chmod u+w "$BUNDLE/bin/$name"
  TESTS+=("$name")
  collect_libs "$bin"
done
# The data every GPU test reads lives under tests/fixtures (tiny models and goldens).
copy_fixtures() {  # $1: a runfiles root
  if [[ -d "$1/blossom/tests/fixtures" ]]; then
    mkdir -p "$BUNDLE/runfiles/blossom/tests"
    cp -rL "$1/blossom/tests/fixtures" "$BUNDLE/runfiles/blossom/tests/"
  fi
}
FIXTURES="bundled"
if [[ "$RUNFILES" == tree ]]; then
  FIXTURES="working tree"
  [[ -d "$BUNDLE/../../tests/fixtures/models" ]] || {
    echo "\"tree\" needs the bundle at <repo>/.device/<name>: no $BUNDLE/../../tests/fixtures" >&2
    exit 1
  }
elif [[ "$RUNFILES" == - ]]; then
  for bin in "$@"; do [[ -d "$bin.runfiles" ]] && copy_fixtures "$bin.runfiles"; done
else
  copy_fixtures "$RUNFILES"
fi
chmod -R u+w "$BUNDLE/runfiles"
if [[ "$FIXTURES" == bundled && ! -d "$BUNDLE/runfiles/blossom/tests/fixtures" ]]; then
  echo "no fixtures found in the runfiles" >&2
  exit 1
fi

bundle_shared_libs
cp "$HERE/run_on_device.sh" "$BUNDLE/run_on_device.sh"
chmod +x "$BUNDLE/run_on_device.sh"
check_bundle_glibc

COMMIT="$(git rev-parse HEAD 2>/dev/null || echo unknown)"
DIRTY="$( (git status --porcelain 2>/dev/null || true) | wc -l | tr -d ' ')"
NVCC="$(/usr/local/cuda/bin/nvcc --version 2>/dev/null | tail -1 || echo unknown)"
json_list() { (( $# )) && printf '"%s",' "$@" | sed 's/,$//'; }
cat > "$BUNDLE/manifest.json" <<EOF
{
  "commit": "$COMMIT",
  "uncommitted_changes": $DIRTY,
  "built_at": "$(date -u +%Y-%m-%dT%H:%M:%SZ)",
  "built_on": "$(hostname)",
  "nvcc": "$NVCC",
  "glibc_needed": "${GLIBC_NEEDED:-}",
  "fixtures": "$FIXTURES",
  "tests": [$(json_list "${TESTS[@]}")],
  "libraries_expected_on_device": [$(json_list "${LEFT_TO_DEVICE[@]}")]
}
EOF
check_travel_size
echo "== bundle $BUNDLE: tests ${TESTS[*]}; left to the device: ${LEFT_TO_DEVICE[*]:-none}"
