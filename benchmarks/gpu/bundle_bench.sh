#!/usr/bin/env bash
# Builds the benchmark binaries on this (GPU-less) machine and bundles them, with the scripts,
# the tokenizer and every non-system shared library they load, into one folder the device tool
# can carry to a GPU machine, where run_bench_on_device.sh (copied into the bundle) runs them.
# Mirrors tools/gpu/run_gpu_suite.sh (same library rules), for binaries instead of tests.
#
# Usage (from anywhere in the repository):
#   benchmarks/gpu/bundle_bench.sh [BUNDLE_DIR]      # default BUNDLE_DIR: .device/bench
#   BLOSSOM_BUNDLE_NO_BUILD=1 benchmarks/gpu/bundle_bench.sh   # bundle what bazel-bin holds
#
# Then, with the device tool (/.device/ is git-ignored, so the bundle must be named in carry):
#   run(command="bash .device/bench/run_bench_on_device.sh all", carry=[".device/bench"])
# When the bundle and the working tree exceed the tool's 64 MiB, the bundle is also packed into
# .device/pack/bench.txz (xz, ~8 MiB), which travels instead: carry ".device/pack" and unpack it
# first there (the script prints the command).
# See benchmarks/gpu/README.md for the calls in order and what comes back.
#
# What goes in the bundle:
#   bin/                blossom-bench, make-random-checkpoint, blossom-server, cuda_hardware_probe_test,
#                       model-parity-dump, blossom-gateway
#   wrap/               one wrapper per binary that sets LD_LIBRARY_PATH for it alone (so the
#                       Python/torch process never sees the bundled libraries)
#   lib/                every non-system shared library they load (grpc, protobuf, abseil, ssl,
#                       spdlog, fmt, cudart, ...), resolved with ldd on this machine
#   lib/compat/         this machine's libstdc++/libgcc_s, used only if the device's are older
#   tokenizer/          tests/fixtures/tokenizer (make-random-checkpoint copies it into checkpoints)
#   corpus.txt          tests/fixtures/corpus.txt (blossom-bench serve cuts prompts from it)
#   hf_side_by_side.py, side_by_side_report.py, model_parity.py, serve_check.py, ncu_summary.py,
#   run_bench_on_device.sh
#   manifest.json       commit, dirty flag, build time, binaries, whether blossom-bench has --backend,
#                       libraries left to the device
# cuBLAS/cuBLASLt/NCCL (hundreds of MB) exceed the 64 MiB carry limit and are NOT bundled: the GPU
# image has CUDA 13 (run_bench_on_device.sh finds them under /usr/local/cuda or the Python nvidia-*
# wheels). Anything else larger than BLOSSOM_MAX_LIB_MB (default 16) is likewise left to the device.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
# shellcheck source=tools/gpu/bundle_libs.sh
source "$ROOT/tools/gpu/bundle_libs.sh"
BUNDLE="${1:-$ROOT/.device/bench}"
case "$BUNDLE" in /*) ;; *) BUNDLE="$ROOT/$BUNDLE" ;; esac
MAX_LIB_MB="${BLOSSOM_MAX_LIB_MB:-16}"
TARGETS=(//benchmarks:blossom-bench //benchmarks:make-random-checkpoint //server:blossom-server
         //benchmarks/gpu:cuda_hardware_probe_test //benchmarks/gpu:model-parity-dump
         //clients/gateway:blossom-gateway)

if [[ "${BLOSSOM_BUNDLE_NO_BUILD:-0}" != 1 ]]; then
  echo "== building ${TARGETS[*]}"
  # Without Open MPI: Debian's libmpi pulls libevent, which needs glibc 2.36, and the GPU image
  # may be older (single-process launches never use MPI).
  bazel build --config=nompi "${TARGETS[@]}"
fi
BIN_ROOT="$(bazel info --config=nompi bazel-bin 2>/dev/null || echo "$ROOT/bazel-bin")"

echo "== bundling into $BUNDLE"
rm -rf "$BUNDLE"
mkdir -p "$BUNDLE/bin" "$BUNDLE/wrap" "$BUNDLE/lib/compat" "$BUNDLE/tokenizer"
declare -A LIBS=()
LEFT_TO_DEVICE=()
NAMES=()
for target in "${TARGETS[@]}"; do
  pkg="${target#//}"; pkg="${pkg%%:*}"; name="${target##*:}"
  bin="$BIN_ROOT/$pkg/$name"
  [[ -x "$bin" ]] || { echo "missing binary $bin (build it, or unset BLOSSOM_BUNDLE_NO_BUILD)" >&2; exit 1; }
  cp -L "$bin" "$BUNDLE/bin/$name"
  chmod u+w "$BUNDLE/bin/$name"
  NAMES+=("$name")
  collect_libs "$bin"
done

bundle_shared_libs
check_bundle_glibc

# Wrappers: the bundled libraries go on LD_LIBRARY_PATH for Blossom's binaries only.
# run_bench_on_device.sh exports the path it resolved as BLOSSOM_BENCH_LD_PATH; run by hand, a
# wrapper falls back to the bundle's lib/ and the CUDA toolkit's.
for name in "${NAMES[@]}"; do
  cat > "$BUNDLE/wrap/$name" <<EOF
#!/usr/bin/env bash
HERE="\$(cd "\$(dirname "\${BASH_SOURCE[0]}")" && pwd)"
export LD_LIBRARY_PATH="\${BLOSSOM_BENCH_LD_PATH:-\$HERE/../lib:/usr/local/cuda/lib64}"
exec "\$HERE/../bin/$name" "\$@"
EOF
  chmod +x "$BUNDLE/wrap/$name"
done

cp tests/fixtures/tokenizer/tokenizer.json tests/fixtures/tokenizer/tokenizer_config.json \
   tests/fixtures/tokenizer/special_tokens_map.json "$BUNDLE/tokenizer/"
cp tests/fixtures/corpus.txt "$BUNDLE/corpus.txt"
cp benchmarks/gpu/hf_side_by_side.py benchmarks/gpu/side_by_side_report.py benchmarks/gpu/model_parity.py benchmarks/gpu/serve_check.py \
   benchmarks/gpu/ncu_summary.py \
   benchmarks/gpu/run_bench_on_device.sh "$BUNDLE/"
chmod +x "$BUNDLE/run_bench_on_device.sh" "$BUNDLE/hf_side_by_side.py"

# Whether this blossom-bench can run the CUDA backend at all (absl's --helpfull exits 1).
HAS_BACKEND=false
# (The help text goes into a variable first: grep -q closing the pipe early would fail the
# pipeline under pipefail.)
BENCH_HELP="$(LD_LIBRARY_PATH="$BUNDLE/lib" "$BUNDLE/bin/blossom-bench" --helpfull 2>&1 || true)"
if grep -Eq '^\s*--backend\b' <<< "$BENCH_HELP"; then HAS_BACKEND=true; fi
COMMIT="$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)"
DIRTY="$( (git status --porcelain 2>/dev/null || true) | wc -l | tr -d ' ')"
NVCC="$(/usr/local/cuda/bin/nvcc --version 2>/dev/null | tail -1 || echo unknown)"
{
  echo "{"
  echo "  \"commit\": \"$COMMIT\","
  echo "  \"uncommitted_changes\": $DIRTY,"
  echo "  \"built_at\": \"$(date -u +%Y-%m-%dT%H:%M:%SZ)\","
  echo "  \"built_on\": \"$(hostname)\","
  echo "  \"nvcc\": \"$NVCC\","
  echo "  \"targets\": [$(printf '"%s",' "${TARGETS[@]}" | sed 's/,$//')],"
  echo "  \"blossom_bench_has_backend_flag\": $HAS_BACKEND,"
  echo "  \"glibc_needed\": \"${GLIBC_NEEDED:-}\","
  echo "  \"libraries_expected_on_device\": [$( ((${#LEFT_TO_DEVICE[@]})) && printf '"%s",' "${LEFT_TO_DEVICE[@]}" | sed 's/,$//')]"
  echo "}"
} > "$BUNDLE/manifest.json"

SIZE_MB=$(( $(du -sbL "$BUNDLE" | cut -f1) / 1048576 ))
echo "== bundle: ${SIZE_MB} MiB ($(du -sbL "$BUNDLE" | cut -f1) bytes), binaries: ${NAMES[*]}"
echo "   left to the device: ${LEFT_TO_DEVICE[*]:-none}"
echo "   commit $COMMIT, $DIRTY uncommitted changes; blossom-bench --backend: $HAS_BACKEND"
if [[ "$HAS_BACKEND" != true ]]; then
  echo "WARNING: this blossom-bench has no --backend flag: the sweep cannot run on the GPU" \
       "(see benchmarks/gpu/README.md, 'Wiring')" >&2
fi
check_travel_size "$ROOT/.device/pack/$(basename "$BUNDLE").txz"
REL="${BUNDLE#"$ROOT"/}"
if [[ -n "${PACKED_TO:-}" ]]; then
  echo "== on the GPU machine (device tool, carry=[\"${PACKED_TO#"$ROOT"/}\" folder]): unpack as above, then"
else
  echo "== on the GPU machine (device tool, carry=[\"$REL\"]):"
fi
echo "   bash $REL/run_bench_on_device.sh all"
