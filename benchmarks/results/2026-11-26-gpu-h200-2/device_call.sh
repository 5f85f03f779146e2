#!/usr/bin/env bash
# Session 12's second device call: the GPU suite (tests) with a memcheck of the new kernels'
# cases while the 7b1 checkpoint is written, then probe, sweep, skinny A/B, ncu profile, HF, serve.
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
FINAL="$OUT"; W=/tmp/s12b; mkdir -p $W
python3 -c "import tarfile; tarfile.open('.device/pack/bench.txz').extractall('.device')"
echo "unpacked at $(el)s"
( BLOSSOM_ONLY="cuda_backend_ops_test cuda_backend_attention_test" \
  BLOSSOM_SANITIZER_FILTER='*Skinny*:*Decode*:*Mixed*:*PrefillOnly*' BLOSSOM_DEADLINE_S=150 \
  bash .device/gpu_suite/run_on_device.sh memcheck --out $W/mem > $W/mem.log 2>&1 ) &
MEM=$!
( OUT=$W/ckpt BLOSSOM_DEADLINE_S=200 bash .device/bench/run_bench_on_device.sh checkpoint > $W/ckpt.log 2>&1 ) &
CK=$!
BLOSSOM_DEADLINE_S=150 bash .device/gpu_suite/run_on_device.sh preflight tests --out $W/tests > $W/tests.log 2>&1
echo "tests rc=$? at $(el)s"
wait $MEM; echo "memcheck rc=$? at $(el)s"
wait $CK; echo "ckpt rc=$? at $(el)s"
REM=$(( ${TOTAL_S:-440} - $(el) ))
OUT=$W/bench BLOSSOM_DEADLINE_S=$REM BLOSSOM_BATCH_SIZES=1,2,4,8,16,32,64,128,256 \
  BLOSSOM_HF_BATCH_SIZES=1,2,4,8,16,32,64,128,256 BLOSSOM_CYCLES=3 BLOSSOM_PROFILE_TOKENS=4 BLOSSOM_PROFILE_PROMPT_TOKENS=2048 \
  bash .device/bench/run_bench_on_device.sh probe sweep skinny profile hf serve > $W/bench.log 2>&1
echo "bench rc=$? at $(el)s"
cp $W/tests/results.md $FINAL/tests.md 2>/dev/null
cp $W/mem/results.md $FINAL/mem.md 2>/dev/null
cp $W/bench/bench_results/summary.md $FINAL/bench_summary.md 2>/dev/null
tar czf $FINAL/everything.tgz -C /tmp s12b 2>/dev/null
ls -la $FINAL
