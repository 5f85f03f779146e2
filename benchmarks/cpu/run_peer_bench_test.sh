#!/bin/bash
# CI check for peer_bench.py: it runs end to end on the bundled tiny model with Blossom alone (the
# peers need a venv and a llama.cpp build that CI does not make), reports every peer it cannot
# measure with the reason, and writes its JSON, markdown and SVG. No timing is asserted.
set -euo pipefail
out="${TEST_TMPDIR:-$(mktemp -d)}/peers"
empty="${TEST_TMPDIR:-$(mktemp -d)}/no-peers"
mkdir -p "$empty"
model=tests/fixtures/models/bloom-demo
python3 benchmarks/cpu/peer_bench.py --blossom benchmarks/cpu/cpu-step-bench --peers "$empty" \
  --f32-model "$model" --bf16-model "$model" --dtypes fp32,int8 \
  --engines blossom,llama.cpp,ctranslate2,transformers --runs 2 --prompt-tokens 12 \
  --long-prompt-tokens 24 --decode-tokens 3 --batches 2,3 --out-prefix "$out" > /dev/null 2>&1
python3 - "$out.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
fp32 = r["summary"]["fp32"]
b = fp32["blossom"]
assert b["runs"] == 2, b
for point in ("decode_ms", "prefill_ms@12", "prefill_ms@24", "batch_tok_s@2", "batch_tok_s@3",
              "floor_ms"):
    assert b["median"][point] > 0, (point, b)
# Peers without their models are reported with the reason, not dropped.
assert "setup_peers.sh" in fp32["llama.cpp"]["error"], fp32["llama.cpp"]
assert "setup_peers.sh" in fp32["ctranslate2"]["error"], fp32["ctranslate2"]
assert "int8" in r["summary"]["int8"]["transformers"]["error"], r["summary"]["int8"]
print("ok")
PY
grep -q "| blossom |" "$out.md"
grep -q "not measured" "$out.md"
grep -q "<svg" "$out.svg"
