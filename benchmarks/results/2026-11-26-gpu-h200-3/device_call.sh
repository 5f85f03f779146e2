#!/usr/bin/env bash
# Session 12's third device call: the GPU suite with a racecheck of the attention kernels while the
# 7b1 checkpoint is written, then probe, sweep, prefill, ncu profile and serve. Tests go straight
# to $OUT/t (they come back even if the call is cut short); the rest is packed at the end.
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
FINAL="$OUT"; W=/tmp/s12c; mkdir -p $W
python3 -c "import tarfile; tarfile.open('.device/pack/bench.txz').extractall('.device')"
( BLOSSOM_ONLY="cuda_backend_attention_test" BLOSSOM_DEADLINE_S=70 \
  BLOSSOM_SANITIZER_FILTER='AttentionParity.PrefillOnly:AttentionParity.DecodeOverLongScatteredContexts' \
  bash .device/gpu_suite/run_on_device.sh racecheck --out $W/race > $W/race.log 2>&1 ) &
RACE=$!
( OUT=$W/ckpt BLOSSOM_DEADLINE_S=200 bash .device/bench/run_bench_on_device.sh checkpoint > $W/ckpt.log 2>&1 ) &
CK=$!
BLOSSOM_DEADLINE_S=90 bash .device/gpu_suite/run_on_device.sh preflight tests --out $FINAL/t > $W/tests.log 2>&1
echo "tests rc=$? at $(el)s"
wait $RACE; echo "racecheck rc=$? at $(el)s"
wait $CK; echo "ckpt rc=$? at $(el)s"
REM=$(( ${TOTAL_S:-175} - $(el) ))
OUT=$W/bench BLOSSOM_DEADLINE_S=$REM BLOSSOM_BATCH_SIZES=1,2,4,8,16,32,64,128,256 BLOSSOM_CYCLES=3 \
  BLOSSOM_PROFILE_TOKENS=4 BLOSSOM_PROFILE_PROMPT_TOKENS=2048 BLOSSOM_MIN_PHASE_S=25 \
  bash .device/bench/run_bench_on_device.sh probe sweep prefill profile serve > $W/bench.log 2>&1
echo "bench rc=$? at $(el)s"
cp $W/race/results.md $FINAL/race.md 2>/dev/null
cp $W/bench/bench_results/summary.md $FINAL/bench_summary.md 2>/dev/null
tar czf $FINAL/everything.tgz -C /tmp s12c 2>/dev/null
ls -la $FINAL
