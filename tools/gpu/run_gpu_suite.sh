#!/usr/bin/env bash
# Builds Blossom's GPU test binaries on this (GPU-less) machine and bundles them, with their
# runfiles (test fixtures) and the shared libraries a GPU machine will not have, into one folder
# that the device tool can carry to a GPU machine, where run_on_device.sh runs them.
#
# Usage (from anywhere in the repository):
#   tools/gpu/run_gpu_suite.sh [BUNDLE_DIR]        # default BUNDLE_DIR: .device/gpu_suite
#
# Then, with the device tool (carry the bundle; /.device/ is git-ignored, so it must be named),
# one call per mode, each fitting the 10-minute limit:
#   run(command="bash .device/gpu_suite/run_on_device.sh preflight tests", carry=[".device/gpu_suite"])
#   run(command="bash .device/gpu_suite/run_on_device.sh memcheck",        carry=[".device/gpu_suite"])
#   run(command="bash .device/gpu_suite/run_on_device.sh racecheck",       carry=[".device/gpu_suite"])
# Each call writes $OUT/gpu_results/{results.json,results.md,logs.tgz} (3 files: the device tool
# returns at most 8); copy them to benchmarks/results/<date>-gpu-suite/ in the repository.
#
# The bundle's layout and checks: tools/gpu/make_gpu_bundle.sh. The binaries are built with
# --config=nompi, so none links Open MPI (whose Debian libevent needs glibc 2.36; the GPU image may
# be older), and the bundle fails here, not on the GPU machine, if it needs glibc > 2.35 or would
# not fit the device tool's 64 MiB together with the working tree.
#
# What runs: every gpu-tagged test in //kernels/cuda, //kernels/nccl, //engine/... and
# //tests/gpu, plus //engine/model:model_runner_test (its CUDA cases run where a GPU is visible).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
BUNDLE="${1:-$ROOT/.device/gpu_suite}"
case "$BUNDLE" in /*) ;; *) BUNDLE="$ROOT/$BUNDLE" ;; esac

echo "== finding gpu-tagged tests"
mapfile -t TARGETS < <(bazel query 'attr(tags, "\bgpu\b", tests(//kernels/cuda:all + //kernels/nccl:all + //engine/... + //tests/gpu:all))' 2>/dev/null | sort)
if [[ ${#TARGETS[@]} -eq 0 ]]; then
  TARGETS=(//kernels/cuda:device_test //kernels/cuda:cuda_backend_attention_test
           //kernels/cuda:cuda_backend_basics_test //kernels/cuda:cuda_backend_ops_test
           //kernels/cuda:cuda_backend_graph_test
           //kernels/cuda:cuda_sampling_test //kernels/cuda:cuda_sampling_logprobs_test
           //kernels/cuda:lt_gemm_test //engine/model:lora_cuda_test
           //kernels/nccl:nccl_communicator_test //tests/gpu:bloom_cuda_test
           //engine/sampling:cuda_batch_sampler_test //engine/model:runner_sampler_test
           //engine/serving:speculative_cuda_test //engine/serving:beam_search_cuda_test)
fi
TARGETS+=(//engine/model:model_runner_test)
printf '  %s\n' "${TARGETS[@]}"

echo "== building (--config=nompi)"
bazel build --config=nompi "${TARGETS[@]}"
BIN_ROOT="$(bazel info --config=nompi bazel-bin 2>/dev/null)"
BINARIES=()
for target in "${TARGETS[@]}"; do
  pkg="${target#//}"; pkg="${pkg%%:*}"; name="${target##*:}"
  BINARIES+=("$BIN_ROOT/$pkg/$name")
done

echo "== bundling into $BUNDLE"
# The fixtures travel with the working tree: the bundle links them on the device ("tree").
FIXTURE_MODE=tree
[[ "$(cd "$BUNDLE/../.." 2>/dev/null && pwd)" == "$ROOT" ]] || FIXTURE_MODE=-
"$ROOT/tools/gpu/make_gpu_bundle.sh" "$BUNDLE" "$FIXTURE_MODE" "${BINARIES[@]}"
REL="${BUNDLE#"$ROOT"/}"
echo "== on the GPU machine (device tool, carry=[\"$REL\"]), one call each:"
echo "   bash $REL/run_on_device.sh preflight   # glibc, nvidia-smi, CUDA libraries, ldd of every binary"
echo "   bash $REL/run_on_device.sh tests       # then: memcheck, racecheck"
