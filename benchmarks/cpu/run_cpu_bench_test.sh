#!/bin/bash
# CI check for the CPU benchmark: it runs end to end on the bundled tiny model and writes its
# JSON and markdown (no timing is asserted).
set -euo pipefail
out="${TEST_TMPDIR:-$(mktemp -d)}/bench"
python3 benchmarks/cpu/cpu_bench.py --model tests/fixtures/models/bloom-demo \
  --engine blossom=benchmarks/cpu/cpu-step-bench \
  --engine "int8=benchmarks/cpu/cpu-step-bench --quantize int8" --runs 2 --prompt-tokens 20 --decode-tokens 4 \
  --batch 3 --bandwidth-mib 8 --out-prefix "$out" --machine test > /dev/null
python3 - "$out.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
e = r["engines"]["blossom"]
assert len(e["runs"]) == 2, e
assert e["runs"][0]["prompt_tokens"] == 20, e["runs"][0]
assert e["median"]["decode_ms_per_token"] > 0 and e["median"]["batch_tokens_per_s"] > 0, e
assert e["decode_floor_ms"] > 0, e
q = r["engines"]["int8"]
assert q["quantize"] == "int8" and e["quantize"] == "none", (q["quantize"], e["quantize"])
assert q["weight_bytes"] < e["weight_bytes"], (q["weight_bytes"], e["weight_bytes"])
print("ok")
PY
grep -q "decode ms/token" "$out.md"
grep -q "f32 / int8" "$out.md"
