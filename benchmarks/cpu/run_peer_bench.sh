#!/usr/bin/env bash
# One command: Blossom vs llama.cpp, CTranslate2 and transformers on a bloom-560m-shaped random
# checkpoint, fp32 / bf16 / int8, on this CPU; results in benchmarks/results/.
#
#   benchmarks/cpu/run_peer_bench.sh [WORK_DIR (default ~/.cache/blossom-peers)] [peer_bench.py args]
#
# Builds Blossom's cpu-step-bench and make-random-checkpoint, makes the f32 and bf16 checkpoints,
# runs peers/setup_peers.sh (venv, llama.cpp from the llama-cpp-python sdist, conversions), then
# peer_bench.py. The first run downloads and builds for 15-30 minutes on 2 cores; the benchmark
# itself takes about 30 minutes per run of every engine and dtype on bloom-560m. Run it on a quiet
# machine: the numbers are wall times.
set -euo pipefail
cd "$(dirname "$0")/../.."
WORK=${1:-$HOME/.cache/blossom-peers}
shift || true
bazel build -c opt //benchmarks/cpu:cpu-step-bench //benchmarks:make-random-checkpoint >/dev/null
mkdir -p "$WORK/models"
for dtype in f32 bf16; do
  dir="$WORK/models/bloom-560m-$dtype"
  [ -s "$dir/model.safetensors" ] ||
    bazel-bin/benchmarks/make-random-checkpoint --shape 560m --dtype "$dtype" --out "$dir"
done
benchmarks/cpu/peers/setup_peers.sh "$WORK" "$WORK/models/bloom-560m-f32" \
    "$WORK/models/bloom-560m-bf16"
stem="benchmarks/results/$(date -u +%Y-%m-%d)-cpu-560m-peers"
python3 benchmarks/cpu/peer_bench.py --blossom bazel-bin/benchmarks/cpu/cpu-step-bench \
    --peers "$WORK" --f32-model "$WORK/models/bloom-560m-f32" \
    --bf16-model "$WORK/models/bloom-560m-bf16" --out-prefix "$stem" \
    --commit "$(git rev-parse --short HEAD)" --machine "$(nproc) cores" "$@"
