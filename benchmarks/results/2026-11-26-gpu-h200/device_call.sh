#!/usr/bin/env bash
# Session 12's one device call: GPU suite (tests) and racecheck of the new kernels while the 7b1
# checkpoint is written, then the speed phases. Everything is packed into $OUT at the end.
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
FINAL="$OUT"; W=/tmp/s12; mkdir -p $W
python3 -c "import tarfile; tarfile.open('.device/pack/bench.txz').extractall('.device')"
echo "unpacked at $(el)s"
( OUT=$W/race BLOSSOM_ONLY="cuda_backend_attention_test cuda_backend_graph_test cuda_sampling_test device_test lt_gemm_test" \
  BLOSSOM_DEADLINE_S=${RACE_S:-220} bash .device/gpu_suite/run_on_device.sh racecheck --out $W/race > $W/race.log 2>&1 ) &
RACE=$!
( OUT=$W/ckpt BLOSSOM_DEADLINE_S=230 bash .device/bench/run_bench_on_device.sh checkpoint > $W/ckpt.log 2>&1 ) &
CK=$!
BLOSSOM_DEADLINE_S=200 bash .device/gpu_suite/run_on_device.sh preflight tests --out $W/tests > $W/tests.log 2>&1
echo "tests rc=$? at $(el)s"
wait $RACE; echo "race rc=$? at $(el)s"
wait $CK; echo "ckpt rc=$? at $(el)s"
REM=$(( ${TOTAL_S:-560} - $(el) ))
OUT=$W/bench BLOSSOM_DEADLINE_S=$REM BLOSSOM_BATCH_SIZES=1,2,4,8,16,32,64,128,256 \
  BLOSSOM_HF_BATCH_SIZES=${HF_BS:-1,2,4,8,16,32,64,128,256} BLOSSOM_CYCLES=3 \
  bash .device/bench/run_bench_on_device.sh probe sweep graphs prefill hf > $W/bench.log 2>&1
echo "bench rc=$? at $(el)s"
cp $W/tests/results.md $FINAL/tests.md 2>/dev/null; cp $W/tests/results.json $FINAL/tests.json 2>/dev/null
cp $W/race/results.md $FINAL/race.md 2>/dev/null
cp $W/bench/bench_results/summary.md $FINAL/bench_summary.md 2>/dev/null
cp $W/bench/bench_results/side_by_side.json $FINAL/ 2>/dev/null
tar czf $FINAL/everything.tgz -C /tmp s12 2>/dev/null
ls -la $FINAL
