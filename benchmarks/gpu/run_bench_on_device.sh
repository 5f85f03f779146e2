#!/usr/bin/env bash
# Runs Blossom's GPU benchmarks from the bundle made by benchmarks/gpu/bundle_bench.sh, on the
# lent GPU machine (no Bazel, no git, no internet; CUDA 13, PyTorch and transformers installed).
#
# Usage (device tool, carry=[".device/bench"]; the script finds its bundle beside itself):
#   bash .device/bench/run_bench_on_device.sh [PHASE ...]
# Phases, run in the order given ("all" = probe checkpoint sweep hf):
#   probe       the CUDA probe's own test: copy bandwidth and bf16/f16/f32 GEMM rates (~10 s)
#   checkpoint  a random BLOOM checkpoint (BLOSSOM_SHAPE, default 7b1, bf16) on local disk, unless
#               one is there already from an earlier call on this (still warm) machine (~1-2 min)
#   sweep       blossom-bench sweep --backend cuda over the batch sizes, with the roofline from the
#               CUDA probe: blossom_sweep.{json,md,log}, blossom_sweep-*.svg (~1-3 min)
#   hf          Hugging Face transformers on the same checkpoint, merged with the sweep's results
#               into side_by_side.{json,md} and side_by_side-throughput.svg (~2-5 min)
#   serve       blossom-server --backend cuda on the checkpoint + blossom-bench serve against it:
#               serve.{json,md}, serve-*.svg, and serve_host.md (the server's mean forward time
#               and engine host parts per step, from its /metrics) (~1-2 min; not part of "all")
#   parity      whole-model parity with HF transformers fp32/fp64 on random bloom-560m-shaped bf16
#               and f16 checkpoints: CPU fp32, CUDA fp32 and CUDA native 16-bit dumps
#               (model-parity-dump + model_parity.py): parity_*/parity.{json,md} (~2-4 min; not
#               part of "all")
#   graphs      blossom-bench sweep again with --cuda_graphs=false over BLOSSOM_GRAPH_BATCH_SIZES,
#               compared with the sweep phase's results (graphs on): graphs_ab.md (~1-2 min; run
#               it after sweep; not part of "all")
#   skinny      the same A/B for the skinny GEMM of decode-sized linears: --cuda_skinny_gemm=false
#               over BLOSSOM_SKINNY_BATCH_SIZES (1,2,4,8): skinny_ab.md (~1 min; after sweep)
#   prefill     a 2048-token prefill (BLOSSOM_PREFILL_TOKENS) at batch 1, 5 cycles, against the
#               probe's GEMM rate: prefill.md (p50 ms, TFLOP/s, share of the rate) (~1 min; not
#               part of "all")
#   mma         the prefill phase again with --cuda_mma_attention=false (the WMMA attention
#               kernel, against the default register-accumulator one): prefill_wmma.md (~5 s on
#               an H200; not part of "all")
#   profile     Nsight Compute over a short batch-BLOSSOM_PROFILE_BATCH (1) sweep with --cuda_graphs=false
#               and --cuda_time_gemm=false (no timing runs among the profiled kernels; decode-sized
#               linears then take the skinny GEMM)
#               (a prefill, of BLOSSOM_PROFILE_PROMPT_TOKENS fixed ids per sequence if set, else the
#               seed prompts, and BLOSSOM_PROFILE_TOKENS (8) - 1 decode steps): gpu__time_duration of
#               every kernel, summed by kernel name: profile.md (the top kernels, their share) and
#               profile.csv (~2-4 min on 7b1; not part of "all")
#   variants    decode with kernel options side by side at a long context: the sweep at
#               BLOSSOM_VARIANT_BATCH_SIZES (1,8,32), BLOSSOM_VARIANT_PROMPT_TOKENS (2000) prompt
#               tokens, 32 new tokens, once per variant of BLOSSOM_VARIANTS ("name=flags;...";
#               default: decode attention blocks of 512 threads, LayerNorm in registers, the
#               split-K and the tensor-core skinny GEMMs as candidates, programmatic dependent
#               launch, all five),
#               with the base run first and again last (its drift shows the noise):
#               variants.md (~1-2 min; not part of "all")
#   servecheck  the CUDA server behind the gateway on the bf16 560m checkpoint: 300 streams, 64 at a
#               time, 10% cancelled, six kinds of sampling request (greedy, seeded top-p/top-k,
#               penalties, logprobs, logit bias, guided regex); each kind's outcome exact and no KV
#               blocks left (serve_check.py):
#               servecheck.json (~1-2 min; not part of "all")
#
# Every call copies what the results folder holds so far to $OUT/bench_results (7 files at most:
# the device tool returns 8): summary.md, side_by_side.json, side_by_side-throughput.svg,
# blossom_sweep.json, serve.json, run.log, all.tgz (everything, logs and SVGs included).
#
# State kept between calls while the machine stays warm (30 s after a call): the checkpoint and
# the results folder under BLOSSOM_STATE_DIR. A fresh machine regenerates the checkpoint; an "hf"
# phase on a fresh machine without the sweep's JSON uses $BUNDLE/prev/blossom_sweep.json if you
# put the returned one there, else runs HF alone (the table then has HF columns only).
#
# Environment knobs (defaults in brackets):
#   BLOSSOM_DEADLINE_S [560]        wall-clock budget of this call (the device tool kills at 600);
#                                   a phase that cannot fit is skipped and says so
#   BLOSSOM_MIN_PHASE_S []          seconds a phase needs left to start, for every phase (default:
#                                   each phase's own generous estimate, 40 to 200 s)
#   BLOSSOM_SHAPE [7b1]             make-random-checkpoint --shape
#   BLOSSOM_MODEL_DIR []            use this existing HF BLOOM directory instead of a random one
#   BLOSSOM_BATCH_SIZES [1,2,4,8,16,32,64]    sweep batch sizes
#   BLOSSOM_HF_BATCH_SIZES [= BLOSSOM_BATCH_SIZES]
#   BLOSSOM_GRAPH_BATCH_SIZES [1,8,64]        graphs phase batch sizes
#   BLOSSOM_SKINNY_BATCH_SIZES [1,2,4,8]      skinny phase batch sizes
#   BLOSSOM_MAX_NEW_TOKENS [100]  BLOSSOM_WARMUP [1]  BLOSSOM_CYCLES [5]
#   BLOSSOM_SWEEP_ARGS []           extra blossom-bench sweep flags (e.g. "--gpu-memory-fraction 0.8")
#   BLOSSOM_SERVE_ARGS []           extra blossom-bench serve flags
#   BLOSSOM_SERVE_CONCURRENCY [64]  serve phase: the server's --max_batch_size and the requests in
#                                   flight (4x as many requests in all); 256 checks the host-time
#                                   target at batch 256
#   BLOSSOM_STATE_DIR []            default: the first of /tmp, /var/tmp, $HOME with 40 GB free
#   BLOSSOM_CHECKPOINT_ARGS []      extra make-random-checkpoint flags (e.g. "--layers 8")
#   BLOSSOM_PYTHON [python3]        the interpreter with torch + transformers
#   BLOSSOM_DEVICE [cuda]           cpu: HF on the CPU and blossom-bench --backend cpu, for a dry
#                                   run of this script on a machine without a GPU (README.md)
# Exit status: 0 when every phase asked for ran and succeeded, 1 otherwise.

# The phase functions and the EXIT trap are called indirectly ("phase_$p", trap).
# shellcheck disable=SC2317
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
START=$(date +%s)
BUDGET="${BLOSSOM_DEADLINE_S:-560}"
left() { echo $(( START + BUDGET - $(date +%s) )); }
# Whether a phase that needs about $1 seconds (a generous estimate) still fits the budget;
# BLOSSOM_MIN_PHASE_S replaces every estimate once a machine's real phase times are known.
need() { (( $(left) >= ${BLOSSOM_MIN_PHASE_S:-$1} )); }

PHASES=("$@")
[[ ${#PHASES[@]} -eq 0 ]] && PHASES=(all)
EXPANDED=()
for p in "${PHASES[@]}"; do
  case "$p" in
    all) EXPANDED+=(probe checkpoint sweep hf) ;;
    probe|checkpoint|sweep|hf|serve|parity|servecheck|graphs|skinny|prefill|mma|profile|variants) EXPANDED+=("$p") ;;
    *) echo "unknown phase '$p' (probe|checkpoint|sweep|hf|serve|parity|servecheck|graphs|skinny|prefill|mma|profile|variants|all)" >&2; exit 2 ;;
  esac
done

PY="${BLOSSOM_PYTHON:-python3}"
DEVICE="${BLOSSOM_DEVICE:-cuda}"
SHAPE="${BLOSSOM_SHAPE:-7b1}"
BATCH_SIZES="${BLOSSOM_BATCH_SIZES:-1,2,4,8,16,32,64}"
HF_BATCH_SIZES="${BLOSSOM_HF_BATCH_SIZES:-$BATCH_SIZES}"
MAX_NEW="${BLOSSOM_MAX_NEW_TOKENS:-100}"
WARMUP="${BLOSSOM_WARMUP:-1}"
CYCLES="${BLOSSOM_CYCLES:-5}"
SERVE_CONCURRENCY="${BLOSSOM_SERVE_CONCURRENCY:-64}"
OUT_DIR="${OUT:+$OUT/bench_results}"
OUT_DIR="${OUT_DIR:-$PWD/bench_results}"
mkdir -p "$OUT_DIR"

# ---- State folder: the checkpoint is 14 GB for 7b1 (bf16); pick a disk with room. ----
pick_state_dir() {
  local d
  for d in /tmp /var/tmp "${HOME:-/root}" "$PWD"; do
    [[ -d "$d" && -w "$d" ]] || continue
    local free_kb
    free_kb=$(df -Pk "$d" 2>/dev/null | awk 'NR==2 {print $4}')
    if [[ -n "$free_kb" ]] && (( free_kb > 40 * 1024 * 1024 )); then echo "$d/blossom_bench"; return; fi
  done
  echo "/tmp/blossom_bench"
}
STATE="${BLOSSOM_STATE_DIR:-$(pick_state_dir)}"
RESULTS="$STATE/results"
mkdir -p "$RESULTS"
LOG="$RESULTS/run.log"
exec > >(tee -a "$LOG") 2>&1
echo "=== $(date -u +%Y-%m-%dT%H:%M:%SZ) run_bench_on_device.sh ${PHASES[*]} (budget ${BUDGET}s, state $STATE)"

MANIFEST="$HERE/manifest.json"
# The build's commit, marked "-dirty" when the tree it was built from had uncommitted changes.
COMMIT=$("$PY" -c "import json,sys; m=json.load(open(sys.argv[1])); print(m.get('commit','') + ('-dirty' if m.get('uncommitted_changes') else ''))" "$MANIFEST" 2>/dev/null || echo "")
GPU_INFO=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1 || true)
GPU_NAME="${GPU_INFO%%,*}"
MACHINE="1x ${GPU_NAME:-unknown GPU}, $(nproc) CPU cores"
echo "GPU: ${GPU_INFO:-unknown (nvidia-smi failed)}; commit ${COMMIT:-unknown}; machine: $MACHINE"
df -h "$STATE" | tail -1 || true

# ---- Libraries for Blossom's binaries only (wrap/* read BLOSSOM_BENCH_LD_PATH). ----
find_lib_dir() {  # prints the folder holding $1, or nothing
  local name="$1" d
  for d in "$HERE/lib" /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
           /usr/local/cuda-13*/lib64 /usr/lib/x86_64-linux-gnu /usr/local/nvidia/lib64 /usr/local/lib; do
    [[ -e "$d/$name" ]] && { echo "$d"; return; }
  done
  d=$("$PY" - "$name" <<'EOF' 2>/dev/null || true
import glob, os, site, sys
roots = site.getsitepackages() + [site.getusersitepackages()]
for r in roots:
    for p in glob.glob(os.path.join(r, "nvidia", "**", sys.argv[1]), recursive=True):
        print(os.path.dirname(p)); sys.exit(0)
EOF
)
  [[ -n "$d" ]] && { echo "$d"; return; }
  d=$(timeout 60 find / -xdev -name "$name" -not -path '/proc/*' 2>/dev/null | head -1 || true)
  [[ -n "$d" ]] && dirname "$d"
  return 0
}
LIB_PATH="$HERE/lib"
EXPECTED=$("$PY" -c "import json,sys; print(' '.join(json.load(open(sys.argv[1]))['libraries_expected_on_device']))" "$MANIFEST" 2>/dev/null || echo "libcublas.so.13 libcublasLt.so.13 libnccl.so.2")
for lib in $EXPECTED libcudart.so.13; do
  dir=$(find_lib_dir "$lib")
  if [[ -n "$dir" ]]; then
    [[ ":$LIB_PATH:" == *":$dir:"* ]] || LIB_PATH="$LIB_PATH:$dir"
  else
    echo "WARNING: $lib not found on this machine" >&2
  fi
done
if LD_LIBRARY_PATH="$LIB_PATH" ldd "$HERE/bin/blossom-bench" 2>&1 | grep -q "GLIBCXX\|CXXABI\|libstdc++.*not found"; then
  LIB_PATH="$LIB_PATH:$HERE/lib/compat"
  echo "using the bundled libstdc++ (lib/compat)"
fi
export BLOSSOM_BENCH_LD_PATH="$LIB_PATH"
echo "Blossom LD_LIBRARY_PATH=$LIB_PATH"
for b in "$HERE"/bin/*; do
  problems=$(LD_LIBRARY_PATH="$LIB_PATH" ldd "$b" 2>&1 | grep -E "not found" || true)
  [[ -n "$problems" ]] && { echo "unresolved libraries of $(basename "$b"):"; echo "$problems"; }
done

# ---- Collecting results into $OUT (on every exit, also after a failure). ----
collect() {
  set +e
  {
    echo "# Blossom GPU benchmark run"
    echo
    echo "- date (UTC): $(date -u +%Y-%m-%dT%H:%M:%SZ); phases: ${PHASES[*]}; commit: ${COMMIT:-unknown}"
    echo "- GPU: ${GPU_INFO:-unknown}; machine: $MACHINE"
    echo "- phase results: ${PHASE_STATUS[*]:-none}"
    echo
    for f in probe.txt side_by_side.md blossom_sweep.md graphs_ab.md skinny_ab.md prefill.md prefill_wmma.md variants.md profile.md serve.md serve_host.md parity_bf16/parity.md parity_f16/parity.md; do
      [[ -f "$RESULTS/$f" ]] || continue
      echo "---"; echo; echo "<!-- $f -->"; cat "$RESULTS/$f"; echo
    done
  } > "$RESULTS/summary.md"
  [[ -f "$RESULTS/servecheck.json" ]] && { echo; echo "## servecheck.json"; echo; echo '```'; cat "$RESULTS/servecheck.json"; echo '```'; } >> "$RESULTS/summary.md"
  for f in summary.md side_by_side.json side_by_side-throughput.svg blossom_sweep.json serve.json run.log; do
    [[ -f "$RESULTS/$f" ]] && cp "$RESULTS/$f" "$OUT_DIR/$f"
  done
  tar -C "$RESULTS" -czf "$OUT_DIR/all.tgz" . 2>/dev/null
  ls -la "$OUT_DIR"
}
PHASE_STATUS=()
trap collect EXIT

FAILED=0
record() { PHASE_STATUS+=("$1=$2"); [[ "$2" == ok ]] || FAILED=1; echo "=== phase $1: $2 ($(left) s left)"; }

MODEL_DIR="${BLOSSOM_MODEL_DIR:-$STATE/bloom-$SHAPE-random-bf16}"

phase_probe() {
  if ! need 40; then record probe "skipped (time)"; return; fi
  local rc=0
  timeout $(( $(left) - 20 )) "$HERE/wrap/cuda_hardware_probe_test" > "$RESULTS/probe.log" 2>&1 || rc=$?
  tail -5 "$RESULTS/probe.log"
  {
    echo "## CUDA hardware probe (cuda_hardware_probe_test)"
    echo
    echo "copy bandwidth counts bytes read + written (1 GiB device-to-device cudaMemcpyAsync, best of 10);"
    echo "GEMM: cuBLASLt 8192^3, fp32 accumulation, random operands, best of 10."
    echo
    grep '^BLOSSOM_PROBE' "$RESULTS/probe.log" | sed 's/^BLOSSOM_PROBE /- /' || echo "- no numbers (see probe.log)"
  } > "$RESULTS/probe.txt"
  cat "$RESULTS/probe.txt"
  if (( rc == 0 )) && grep -q '^BLOSSOM_PROBE' "$RESULTS/probe.log"; then
    record probe ok
  elif grep -q 'SKIPPED' "$RESULTS/probe.log"; then
    record probe "failed: SKIPPED, $(grep -m1 'no GPU' "$RESULTS/probe.log" || echo 'no GPU seen')"
  else
    record probe "failed rc=$rc"
  fi
}

phase_checkpoint() {
  if [[ -n "${BLOSSOM_MODEL_DIR:-}" ]]; then
    if [[ -f "$MODEL_DIR/config.json" ]]; then record checkpoint ok; else record checkpoint "failed: no $MODEL_DIR/config.json"; fi
    return
  fi
  if [[ -f "$MODEL_DIR/.complete" ]]; then
    echo "checkpoint $MODEL_DIR is there already (from an earlier call)"
    record checkpoint ok
    return
  fi
  if ! need 150; then record checkpoint "skipped (time)"; return; fi
  rm -rf "$MODEL_DIR"  # a half-written one from an interrupted call
  local t0 rc=0
  t0=$(date +%s)
  # shellcheck disable=SC2086
  timeout $(( $(left) - 20 )) "$HERE/wrap/make-random-checkpoint" --shape "$SHAPE" --dtype bf16 \
      --out "$MODEL_DIR" --tokenizer-dir "$HERE/tokenizer" --threads "$(nproc)" \
      ${BLOSSOM_CHECKPOINT_ARGS:-} || rc=$?
  if (( rc == 0 )); then
    touch "$MODEL_DIR/.complete"
    echo "checkpoint written in $(( $(date +%s) - t0 )) s: $(du -sh "$MODEL_DIR" | cut -f1)"
    record checkpoint ok
  else
    record checkpoint "failed rc=$rc"
  fi
}

side_by_side() {  # common flags of hf_side_by_side.py, then the phase's own
  PYTHONUNBUFFERED=1 "$PY" "$HERE/hf_side_by_side.py" --model "$MODEL_DIR" --out-dir "$RESULTS" \
    --device "$DEVICE" --dtype bf16 --max-new-tokens "$MAX_NEW" --warmup "$WARMUP" --cycles "$CYCLES" \
    --commit "$COMMIT" --machine "$MACHINE" "$@"
}

phase_sweep() {
  if [[ ! -f "$MODEL_DIR/config.json" ]]; then record sweep "skipped (no checkpoint)"; return; fi
  if ! need 90; then record sweep "skipped (time)"; return; fi
  local rc=0
  side_by_side --skip-hf --stem sweep_only --batch-sizes "$BATCH_SIZES" \
    --blossom-bench "$HERE/wrap/blossom-bench" --blossom-backend "$DEVICE" \
    --blossom-args "${BLOSSOM_SWEEP_ARGS:-}" --deadline-s $(( $(left) - 20 )) || rc=$?
  if (( rc == 0 )) && [[ -f "$RESULTS/blossom_sweep.json" ]]; then record sweep ok; else record sweep "failed rc=$rc"; fi
}

# The sweep again with one feature turned off (FLAG), over BATCHES, side by side with the sweep
# phase's blossom_sweep.json (every feature on by default): NAME_ab.md.
ab_sweep() {  # NAME FLAG BATCHES TITLE
  local name="$1" flag="$2" batches="$3" title="$4"
  if [[ ! -f "$MODEL_DIR/config.json" ]]; then record "$name" "skipped (no checkpoint)"; return; fi
  if [[ ! -f "$RESULTS/blossom_sweep.json" ]]; then record "$name" "skipped (run the sweep phase first)"; return; fi
  if ! need 90; then record "$name" "skipped (time)"; return; fi
  local rc=0
  timeout $(( $(left) - 20 )) "$HERE/wrap/blossom-bench" sweep --model "$MODEL_DIR" --backend "$DEVICE" \
    --batch-sizes "$batches" --max-new-tokens "$MAX_NEW" --warmup "$WARMUP" \
    --cycles "$CYCLES" "$flag" --commit "$COMMIT" --machine "$MACHINE" \
    --json "$RESULTS/blossom_sweep_no_$name.json" ${BLOSSOM_SWEEP_ARGS:-} \
    > "$RESULTS/blossom_sweep_no_$name.log" 2>&1 || rc=$?
  if (( rc != 0 )); then tail -20 "$RESULTS/blossom_sweep_no_$name.log"; record "$name" "failed rc=$rc"; return; fi
  "$PY" - "$RESULTS/blossom_sweep.json" "$RESULTS/blossom_sweep_no_$name.json" "$title" "$flag" \
    > "$RESULTS/${name}_ab.md" <<'PYEOF' || rc=$?
import json, sys
on, off = (json.load(open(p)) for p in sys.argv[1:3])
title, flag = sys.argv[3:5]
by_batch = {r["batch_size"]: r for r in on["results"]}
print(f"## Decode with {title} (on) and without (off: {flag})\n")
print("| batch | on: decode ms/token p50 | off: decode ms/token p50 | off / on | on: tok/s | off: tok/s |")
print("|---|---|---|---|---|---|")
for r in off["results"]:
    o = by_batch.get(r["batch_size"])
    if o is None:
        continue
    a, b = o["decode_ms_per_token"]["p50"], r["decode_ms_per_token"]["p50"]
    print(f"| {r['batch_size']} | {a:.3f} | {b:.3f} | {b / a:.3f} | {o['decode_tokens_per_second']:.1f} | "
          f"{r['decode_tokens_per_second']:.1f} |")
PYEOF
  if (( rc == 0 )); then record "$name" ok; cat "$RESULTS/${name}_ab.md"; else record "$name" "failed (compare) rc=$rc"; fi
}

phase_graphs() { ab_sweep graphs --cuda_graphs=false "${BLOSSOM_GRAPH_BATCH_SIZES:-1,8,64}" "CUDA graphs"; }
phase_skinny() { ab_sweep skinny --cuda_skinny_gemm=false "${BLOSSOM_SKINNY_BATCH_SIZES:-1,2,4,8}" "the skinny GEMM"; }

# Decode at a long context once per kernel-option variant, the base first and last.
phase_variants() {
  if [[ ! -f "$MODEL_DIR/config.json" ]]; then record variants "skipped (no checkpoint)"; return; fi
  local all="--cuda_decode_attention_threads=512 --cuda_register_layernorm --cuda_skinny_split_k --cuda_skinny_mma --cuda_programmatic_launch"
  local spec="${BLOSSOM_VARIANTS:-threads512=--cuda_decode_attention_threads=512;ln_regs=--cuda_register_layernorm;split_k=--cuda_skinny_split_k;skinny_mma=--cuda_skinny_mma;pdl=--cuda_programmatic_launch;all=$all}"
  local names=(base) flags=("") item rc=0 cut=""
  IFS=';' read -r -a items <<< "$spec"
  for item in "${items[@]}"; do names+=("${item%%=*}"); flags+=("${item#*=}"); done
  names+=(base_again); flags+=("")
  local i jsons=()
  for i in "${!names[@]}"; do
    if ! need 30; then cut="cut short (time) before ${names[$i]}"; break; fi
    # shellcheck disable=SC2086
    timeout $(( $(left) - 15 )) "$HERE/wrap/blossom-bench" sweep --model "$MODEL_DIR" --backend "$DEVICE" \
      --batch-sizes "${BLOSSOM_VARIANT_BATCH_SIZES:-1,8,32}" --prompt-tokens "${BLOSSOM_VARIANT_PROMPT_TOKENS:-2000}" \
      --max-new-tokens 32 --warmup 1 --cycles 3 --commit "$COMMIT" --machine "$MACHINE" \
      --json "$RESULTS/variant_${names[$i]}.json" ${flags[$i]} ${BLOSSOM_SWEEP_ARGS:-} \
      > "$RESULTS/variant_${names[$i]}.log" 2>&1 || { rc=$?; tail -20 "$RESULTS/variant_${names[$i]}.log"; break; }
    jsons+=("${names[$i]}=$RESULTS/variant_${names[$i]}.json")
  done
  if (( ${#jsons[@]} > 0 )); then
    "$PY" - "${jsons[@]}" > "$RESULTS/variants.md" <<'PYEOF' || rc=$?
import json, sys
runs = [(a.split("=", 1)[0], json.load(open(a.split("=", 1)[1]))) for a in sys.argv[1:]]
base = [d for n, d in runs if n.startswith("base")]
def p50(doc, bs):
    return {r["batch_size"]: r["decode_ms_per_token"]["p50"] for r in doc["results"]}.get(bs)
batches = [r["batch_size"] for r in runs[0][1]["results"]]
print("## Decode ms/token p50 per variant (long context; ratio: base mean / variant, > 1 faster)\n")
print("| variant | " + " | ".join(f"batch {b}" for b in batches) + " |")
print("|---|" + "---|" * len(batches))
for name, doc in runs:
    cells = []
    for b in batches:
        v = p50(doc, b)
        ref = [p50(d, b) for d in base if p50(d, b)]
        ratio = (sum(ref) / len(ref)) / v if v and ref else float("nan")
        cells.append(f"{v:.3f} ({ratio:.3f}x)" if v else "-")
    print(f"| {name} | " + " | ".join(cells) + " |")
PYEOF
  fi
  [[ -f "$RESULTS/variants.md" ]] && cat "$RESULTS/variants.md"
  if (( rc != 0 )); then record variants "failed rc=$rc"
  elif [[ -n "$cut" ]]; then record variants "$cut"
  else record variants ok; fi
}

# One long prefill against the GEMM rate the CUDA probe measured (blossom-bench's own probe):
# NAME.{json,log,md}; EXTRA: blossom-bench flags of this variant.
prefill_run() {  # NAME TITLE EXTRA...
  local name="$1" title="$2"; shift 2
  if [[ ! -f "$MODEL_DIR/config.json" ]]; then record "$name" "skipped (no checkpoint)"; return; fi
  if ! need 60; then record "$name" "skipped (time)"; return; fi
  local rc=0 tokens="${BLOSSOM_PREFILL_TOKENS:-2048}"
  timeout $(( $(left) - 20 )) "$HERE/wrap/blossom-bench" sweep --model "$MODEL_DIR" --backend "$DEVICE" \
    --batch-sizes 1 --prompt-tokens "$tokens" --max-new-tokens 2 --warmup 1 --cycles 5 \
    --commit "$COMMIT" --machine "$MACHINE" --json "$RESULTS/$name.json" "$@" ${BLOSSOM_SWEEP_ARGS:-} \
    > "$RESULTS/$name.log" 2>&1 || rc=$?
  if (( rc != 0 )); then tail -20 "$RESULTS/$name.log"; record "$name" "failed rc=$rc"; return; fi
  "$PY" - "$RESULTS/$name.json" "$title" > "$RESULTS/$name.md" <<'PYEOF' || rc=$?
import json, sys
doc = json.load(open(sys.argv[1]))
r = doc["results"][0]
p = r["prefill_roofline"]
print(f"## {r['prompt_lengths'][0]}-token prefill against the GEMM rate{sys.argv[2]}\n")
print(f"- prefill p50 {p['measured_p50_ms']:.2f} ms (mean {r['prefill_ms']['mean']:.2f}, p90 "
      f"{r['prefill_ms']['p90']:.2f}); {p['flops'] / 1e12:.3f} TFLOP -> {p['tflops']:.2f} TFLOP/s")
print(f"- GEMM rate {doc['hardware']['gemm_tflops']:.1f} TFLOP/s ({doc['hardware']['gemm_tflops_source']}): "
      f"floor {p['compute_floor_ms']:.2f} ms, {100 * p['fraction_of_gemm_rate']:.1f}% of the rate (target 60%)")
PYEOF
  if (( rc == 0 )); then record "$name" ok; cat "$RESULTS/$name.md"; else record "$name" "failed (report) rc=$rc"; fi
}

phase_prefill() { prefill_run prefill ""; }
# The same prefill with attention on the WMMA kernel (--cuda_mma_attention=false), against the
# default mma.sync one.
phase_mma() { prefill_run prefill_wmma " (attention: WMMA kernel)" --cuda_mma_attention=false; }

# Where a step's GPU time goes, kernel by kernel (ncu reads the counters on Firecracker machines;
# --clock-control none leaves the GPU's clocks as they are).
phase_profile() {
  if [[ ! -f "$MODEL_DIR/config.json" ]]; then record profile "skipped (no checkpoint)"; return; fi
  if ! command -v ncu >/dev/null 2>&1; then record profile "skipped (no ncu on this machine)"; return; fi
  if ! need 120; then record profile "skipped (time)"; return; fi
  local rc=0
  timeout $(( $(left) - 30 )) ncu --clock-control none --target-processes all \
    --metrics gpu__time_duration.sum --csv --log-file "$RESULTS/profile.csv" \
    "$HERE/wrap/blossom-bench" sweep --model "$MODEL_DIR" --backend "$DEVICE" \
    --batch-sizes "${BLOSSOM_PROFILE_BATCH:-1}" --max-new-tokens "${BLOSSOM_PROFILE_TOKENS:-8}" \
    ${BLOSSOM_PROFILE_PROMPT_TOKENS:+--prompt-tokens "$BLOSSOM_PROFILE_PROMPT_TOKENS"} \
    --warmup 0 --cycles 1 --cuda_graphs=false --cuda_time_gemm=false ${BLOSSOM_SWEEP_ARGS:-} \
    > "$RESULTS/profile.log" 2>&1 || rc=$?
  if (( rc != 0 )); then tail -20 "$RESULTS/profile.log"; record profile "failed rc=$rc"; return; fi
  "$PY" "$HERE/ncu_summary.py" "$RESULTS/profile.csv" --by-step EmbeddingVecKernel > "$RESULTS/profile.md" || rc=$?
  if (( rc == 0 )); then record profile ok; head -30 "$RESULTS/profile.md"; else record profile "failed (summary) rc=$rc"; fi
}

phase_hf() {
  if [[ ! -f "$MODEL_DIR/config.json" ]]; then record hf "skipped (no checkpoint)"; return; fi
  if ! need 120; then record hf "skipped (time)"; return; fi
  if ! "$PY" -c "import torch, transformers; assert '$DEVICE' == 'cpu' or torch.cuda.is_available()" 2>"$RESULTS/hf_import.err"; then
    cat "$RESULTS/hf_import.err"; record hf "failed: $PY lacks torch+transformers or a GPU"; return
  fi
  local prev=() rc=0
  if [[ -f "$RESULTS/blossom_sweep.json" ]]; then
    prev=(--blossom-json "$RESULTS/blossom_sweep.json")
  elif [[ -f "$HERE/prev/blossom_sweep.json" ]]; then
    cp "$HERE/prev/blossom_sweep.json" "$RESULTS/blossom_sweep.json"
    prev=(--blossom-json "$RESULTS/blossom_sweep.json")
  else
    prev=(--skip-blossom)
    echo "no sweep results on this machine: HF alone"
  fi
  side_by_side "${prev[@]}" --batch-sizes "$HF_BATCH_SIZES" --deadline-s $(( $(left) - 20 )) || rc=$?
  if (( rc == 0 )); then record hf ok; else record hf "failed or incomplete rc=$rc"; fi
}

# Waits until the server PID logs "serving" (prints the seconds waited, status 0), or prints why
# not, naming the cause: the process exited, MAX_S passed, or the call's budget ran low.
wait_for_server() {  # PID LOG MAX_S
  local waited=0
  until grep -q "serving " "$2" 2>/dev/null; do
    if ! kill -0 "$1" 2>/dev/null; then echo "failed: the server exited while starting"; return 1; fi
    if (( waited > $3 )); then echo "failed: the server did not come up in $3 s"; return 1; fi
    if (( $(left) < 60 )); then echo "skipped (time: under 60 s left while the server started)"; return 1; fi
    sleep 2; waited=$(( waited + 2 ))
  done
  echo "$waited"
}

phase_serve() {
  if [[ ! -f "$MODEL_DIR/config.json" ]]; then record serve "skipped (no checkpoint)"; return; fi
  if ! need 150; then record serve "skipped (time)"; return; fi
  local port=18033 metrics_port=18090 rc=0 pid
  "$HERE/wrap/blossom-server" --model "$MODEL_DIR" --backend "$DEVICE" --host 127.0.0.1 --port "$port" \
      --metrics_port "$metrics_port" --max_batch_size "$SERVE_CONCURRENCY" > "$RESULTS/serve_server.log" 2>&1 &
  pid=$!
  local why
  if ! why=$(wait_for_server "$pid" "$RESULTS/serve_server.log" 240); then
    tail -20 "$RESULTS/serve_server.log"
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    record serve "$why"
    return
  fi
  echo "server up after ${why} s"
  # shellcheck disable=SC2086
  timeout $(( $(left) - 30 )) "$HERE/wrap/blossom-bench" serve --target "grpc://127.0.0.1:$port" \
      --num-requests $(( 4 * SERVE_CONCURRENCY )) --request-rate inf --max-concurrency "$SERVE_CONCURRENCY" \
      --prompt-len-dist fixed:128 \
      --output-len-dist fixed:128 --prompt-kind ids --corpus "$HERE/corpus.txt" \
      --json "$RESULTS/serve.json" --markdown "$RESULTS/serve.md" --svg-prefix "$RESULTS/serve" \
      --commit "$COMMIT" --machine "$MACHINE" ${BLOSSOM_SERVE_ARGS:-} || rc=$?
  # The server's own accounting of each step: forward time and the engine's host parts.
  "$PY" - "http://127.0.0.1:$metrics_port/metrics" > "$RESULTS/serve_host.md" <<'PYEOF' || true
import re, sys, urllib.request
text = urllib.request.urlopen(sys.argv[1], timeout=10).read().decode()
acc = {}
for line in text.splitlines():
    m = re.match(r'blossom_step_(duration|host)_seconds_(sum|count)\{([^}]*)\} (\S+)$', line)
    if not m:
        continue
    labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(3)))
    part = "forward" if m.group(1) == "duration" else labels.get("part", "")
    acc.setdefault(labels.get("phase", ""), {}).setdefault(part, {})[m.group(2)] = float(m.group(4))
print("## Server steps during serve: forward and the engine's host parts (means, ms)\n")
print("| phase | steps | forward | schedule | sample | output | deliver | host / (forward + host) |")
print("|---|---|---|---|---|---|---|---|")
for phase, parts in sorted(acc.items()):
    steps = parts.get("forward", {}).get("count", 0)
    if not steps:
        continue
    mean = {k: 1e3 * v.get("sum", 0) / steps for k, v in parts.items()}
    host = sum(mean.get(k, 0) for k in ("schedule", "sample", "output", "deliver"))
    share = host / (host + mean["forward"]) if host + mean["forward"] > 0 else 0
    print(f"| {phase} | {int(steps)} | {mean['forward']:.3f} | {mean.get('schedule', 0):.3f} | "
          f"{mean.get('sample', 0):.3f} | {mean.get('output', 0):.3f} | {mean.get('deliver', 0):.3f} | "
          f"{100 * share:.1f}% |")
PYEOF
  cat "$RESULTS/serve_host.md"
  kill -TERM "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  if (( rc == 0 )); then record serve ok; else record serve "failed rc=$rc"; fi
}

# Whole-model parity (GPU bring-up): random bloom-560m-shaped checkpoints in bf16 and f16 (seed 7),
# four fixed id prompts (5, 17, 64, 200 tokens), dumps from the CPU backend (fp32), the CUDA
# backend in fp32 (--upcast) and natively in the checkpoint's dtype; model_parity.py compares each
# with HF transformers fp32 and fp64 on this GPU: parity_<dtype>/parity.{json,md}.
# Prints the folder of a random bloom-560m-shaped checkpoint in dtype $1 (seed 7), made once.
small_checkpoint() {
  local ckpt="$STATE/parity/bloom-560m-$1"
  if [[ ! -f "$ckpt/.complete" ]]; then
    rm -rf "$ckpt"
    "$HERE/wrap/make-random-checkpoint" --shape 560m --dtype "$1" --seed 7 --out "$ckpt" \
        --tokenizer-dir "$HERE/tokenizer" --threads "$(nproc)" >&2 && touch "$ckpt/.complete" || return 1
  fi
  echo "$ckpt"
}

phase_parity() {
  if ! need 200; then record parity "skipped (time)"; return; fi
  local dir="$STATE/parity" rc=0 dt ckpt
  mkdir -p "$dir"
  "$PY" -c 'import json, random, sys; r = random.Random(0); json.dump([[r.randrange(3, 250000) for _ in range(n)] for n in (5, 17, 64, 200)], open(sys.argv[1], "w"))' "$dir/ids.json"
  for dt in bf16 f16; do
    ckpt="$(small_checkpoint "$dt")" || { rc=1; continue; }
    local dumps=()
    local name backend_args kind
    for name in cpu cuda_fp32 "cuda_$dt"; do
      case "$name" in
        cpu) backend_args=(--backend cpu); kind=fp32 ;;
        cuda_fp32) backend_args=(--backend cuda --upcast); kind=fp32 ;;
        *) backend_args=(--backend cuda); kind=half ;;
      esac
      if timeout $(( $(left) - 60 )) "$HERE/wrap/model-parity-dump" --model "$ckpt" --prompts "$dir/ids.json" \
          --out "$dir/$dt-$name" --new-tokens 16 "${backend_args[@]}" > "$RESULTS/parity_dump_$dt-$name.log" 2>&1; then
        dumps+=("--dump=$name=$dir/$dt-$name:$kind")
      else
        echo "model-parity-dump $name ($dt) failed:"; tail -5 "$RESULTS/parity_dump_$dt-$name.log"; rc=1
      fi
    done
    if (( ${#dumps[@]} )); then
      PYTHONUNBUFFERED=1 timeout $(( $(left) - 20 )) "$PY" "$HERE/model_parity.py" --model "$ckpt" \
          --prompts "$dir/ids.json" --out-dir "$RESULTS/parity_$dt" --new-tokens 16 --device "$DEVICE" \
          --commit "$COMMIT" --machine "$MACHINE" "${dumps[@]}" || rc=1
    fi
  done
  if (( rc == 0 )); then record parity ok; else record parity "failed (see parity_*/parity.md and the logs)"; fi
}


# Serving correctness on the GPU (bring-up): blossom-server --backend cuda on the bf16 560m
# checkpoint behind blossom-gateway; serve_check.py sends 300 streaming completions, 64 at a
# time, 10% dropped mid-stream, and checks exact completions and an idle server with no KV
# blocks in use afterwards: servecheck.json.
phase_servecheck() {
  if ! need 120; then record servecheck "skipped (time)"; return; fi
  local ckpt rc=0 spid gpid grpc=18133 http=18180 metrics=18190
  ckpt="$(small_checkpoint bf16)" || { record servecheck "failed: no checkpoint"; return; }
  "$HERE/wrap/blossom-server" --model "$ckpt" --backend "$DEVICE" --host 127.0.0.1 --port "$grpc" \
      --metrics_port "$metrics" --max_batch_size 64 > "$RESULTS/servecheck_server.log" 2>&1 &
  spid=$!
  local why
  if ! why=$(wait_for_server "$spid" "$RESULTS/servecheck_server.log" 180); then
    tail -20 "$RESULTS/servecheck_server.log"; kill "$spid" 2>/dev/null || true
    record servecheck "$why"; return
  fi
  "$HERE/wrap/blossom-gateway" --host 127.0.0.1 --port "$http" --backend "127.0.0.1:$grpc" \
      > "$RESULTS/servecheck_gateway.log" 2>&1 &
  gpid=$!
  sleep 2
  PYTHONUNBUFFERED=1 timeout $(( $(left) - 20 )) "$PY" "$HERE/serve_check.py" --port "$http" \
      --metrics-port "$metrics" --requests 300 --concurrency 64 --max-tokens 64 --cancel-fraction 0.1 \
      --json "$RESULTS/servecheck.json" || rc=$?
  kill -TERM "$gpid" "$spid" 2>/dev/null || true
  wait "$gpid" "$spid" 2>/dev/null || true
  if (( rc == 0 )); then record servecheck ok; else record servecheck "failed rc=$rc (servecheck.json)"; fi
}

for p in "${EXPANDED[@]}"; do
  echo "=== phase $p ($(left) s left)"
  "phase_$p"
done
echo "=== done: ${PHASE_STATUS[*]} ($(( $(date +%s) - START )) s)"
exit "$FAILED"
