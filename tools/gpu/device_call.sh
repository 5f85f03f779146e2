#!/usr/bin/env bash
# One device call that does a session's GPU work at once, on the lent GPU machine: the GPU suite
# (preflight + tests), a sanitizer run of chosen binaries and the benchmark checkpoint (CPU only)
# in the background, then the benchmark phases in the time left. The device lends 15 minutes per
# session and a machine takes ~35 s to start, so few calls that each do several things pay.
#
# Usage (device tool, from the repository root there; carry [".device/gpu_suite", ".device/pack"]):
#   bash tools/gpu/device_call.sh [--total S] [--sanitize TOOL BINARIES] [--no-tests] [--dry-run]
#                                 [PHASE ...]
#   --total S        seconds the whole command may take (default 540; set the run's timeout_s
#                    ~30 s above it). The benchmark phases get what is left after the suite.
#   --sanitize TOOL BINARIES
#                    memcheck or racecheck over BINARIES (a space-separated list, one argument)
#                    alongside the suite (deadline: --sanitize-s; a gtest filter for it:
#                    BLOSSOM_SANITIZER_FILTER).
#   --sanitize-s S   the sanitizer run's own budget (default 120).
#   --no-tests       skip the suite (e.g. a speed-only call).
#   --dry-run        for a machine without a GPU: the suite and sanitizer runs accept SKIPPED
#                    tests (run_on_device.sh --dry-run); set BLOSSOM_DEVICE=cpu and a small
#                    BLOSSOM_SHAPE for the benchmark (run_bench_on_device.sh's header).
#   PHASE ...        run_bench_on_device.sh phases (probe sweep prefill mma skinny graphs profile variants
#                    hf serve parity servecheck); "checkpoint" is added in the background when a
#                    phase needs the 7b1 checkpoint.
# BLOSSOM_* variables pass through to both scripts (BLOSSOM_MIN_PHASE_S, BLOSSOM_BATCH_SIZES,
# BLOSSOM_SERVE_CONCURRENCY, BLOSSOM_PROFILE_PROMPT_TOKENS, ...).
#
# What comes back ($OUT, 6 files at most; the tool returns 8): suite/{results.json,results.md,
# logs.tgz} (written as soon as the suite ends, so they come back even if the call is cut short),
# sanitizer.md, bench_summary.md and everything.tgz (every log and result of the call).
# Exit status: 0 when the suite, the sanitizer run and every phase passed.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
T0=$(date +%s)
elapsed() { echo $(( $(date +%s) - T0 )); }

TOTAL=540 SAN_S=120 TESTS=1 DRY=() SAN_TOOL="" SAN_BINS=""
PHASES=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --total) TOTAL="$2"; shift ;;
    --sanitize) SAN_TOOL="$2"; SAN_BINS="$3"; shift 2 ;;
    --sanitize-s) SAN_S="$2"; shift ;;
    --no-tests) TESTS=0 ;;
    --dry-run) DRY=(--dry-run) ;;
    --*) echo "unknown option $1 (see the header of $0)" >&2; exit 2 ;;
    *) PHASES+=("$1") ;;
  esac
  shift
done
case "$SAN_TOOL" in ""|memcheck|racecheck) ;; *) echo "--sanitize takes memcheck or racecheck" >&2; exit 2 ;; esac

FINAL="${OUT:-${TMPDIR:-/tmp}/device_call_out}"
W="$(mktemp -d "${TMPDIR:-/tmp}/device_call.XXXXXX")"
mkdir -p "$FINAL"
SUITE="$ROOT/.device/gpu_suite/run_on_device.sh"
BENCH="$ROOT/.device/bench/run_bench_on_device.sh"

# The bench bundle travels packed (benchmarks/gpu/bundle_bench.sh) when it would not fit with the
# working tree: unpack it unless an unpacked one is already here.
if [[ ! -f "$BENCH" && -f "$ROOT/.device/pack/bench.txz" ]]; then
  python3 -c "import tarfile, sys; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" \
    "$ROOT/.device/pack/bench.txz" "$ROOT/.device" || { echo "cannot unpack the bench bundle" >&2; exit 1; }
fi
echo "== device_call: total ${TOTAL}s; suite $TESTS; sanitizer ${SAN_TOOL:-none} ${SAN_BINS}; phases ${PHASES[*]:-none}"

FAILED=0
pids=()
if [[ -n "$SAN_TOOL" ]]; then
  ( BLOSSOM_ONLY="$SAN_BINS" BLOSSOM_DEADLINE_S="$SAN_S" bash "$SUITE" "${DRY[@]}" "$SAN_TOOL" --out "$W/sanitizer" > "$W/sanitizer.log" 2>&1 ) &
  SAN_PID=$!
fi
NEEDS_CHECKPOINT=0
for p in "${PHASES[@]}"; do
  case "$p" in sweep|hf|serve|graphs|skinny|prefill|mma|profile|all) NEEDS_CHECKPOINT=1 ;; esac
done
if (( NEEDS_CHECKPOINT )); then
  ( OUT="$W/checkpoint" BLOSSOM_DEADLINE_S=$(( TOTAL > 200 ? 200 : TOTAL )) bash "$BENCH" checkpoint \
      > "$W/checkpoint.log" 2>&1 ) &
  CK_PID=$!
fi
if (( TESTS )); then
  BLOSSOM_DEADLINE_S=$(( TOTAL / 2 )) bash "$SUITE" "${DRY[@]}" preflight tests --out "$FINAL/suite" \
    > "$W/suite.log" 2>&1 || FAILED=1
  echo "== suite done at $(elapsed) s (rc $FAILED)"
fi
if [[ -n "${SAN_PID:-}" ]]; then
  wait "$SAN_PID" || FAILED=1
  echo "== ${SAN_TOOL} done at $(elapsed) s"
fi
if [[ -n "${CK_PID:-}" ]]; then
  wait "$CK_PID" || FAILED=1
  echo "== checkpoint done at $(elapsed) s"
fi
if (( ${#PHASES[@]} > 0 )); then
  left=$(( TOTAL - $(elapsed) - 15 ))  # 15 s to pack what comes back
  OUT="$W/bench" BLOSSOM_DEADLINE_S=$left bash "$BENCH" "${PHASES[@]}" > "$W/bench.log" 2>&1 || FAILED=1
  echo "== bench done at $(elapsed) s"
fi

cp "$W/sanitizer/results.md" "$FINAL/sanitizer.md" 2>/dev/null
cp "$W/bench/bench_results/summary.md" "$FINAL/bench_summary.md" 2>/dev/null
tar czf "$FINAL/everything.tgz" -C "$W" . 2>/dev/null
for f in "$W"/*.log; do [[ -f "$f" ]] && { echo "---- tail of $(basename "$f")"; tail -5 "$f"; }; done
ls -la "$FINAL" "$FINAL/suite" 2>/dev/null
exit "$FAILED"
