#!/usr/bin/env bash
# Runs the CPU-side test suite under a sanitizer: tools/sanitizers/run.sh [asan|ubsan|tsan]
# (no argument: all three, one after the other). Prints a one-line summary last,
# "asan: N passed, N failed[; ubsan: ...]", and exits non-zero if any test failed or did not build.
#
# Uses its own Bazel output base (a second Bazel server), so the shared default server and its
# cache are never disturbed; the first run of each sanitizer rebuilds everything once. One job by
# default, to leave a core to others (BLOSSOM_SAN_JOBS overrides). The server is shut down after.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT="$PWD"
OUTPUT_BASE="${BLOSSOM_SAN_OUTPUT_BASE:-/tmp/bazel-san}"
JOBS="${BLOSSOM_SAN_JOBS:-1}"

if [ $# -eq 0 ]; then set -- asan ubsan tsan; fi

BAZEL=(bazel "--output_base=$OUTPUT_BASE")
# CUDA and GPU code is not sanitized (nvcc); //tests/e2e and //benchmarks are not in scope.
# --symlink_prefix=/: no bazel-bin/bazel-testlogs links, so the default build's links keep
# pointing at the default output base.
COMMON=(--symlink_prefix=/ --jobs="$JOBS" --keep_going --build_tag_filters=-gpu --test_tag_filters=-gpu
        --test_output=errors)
SUMMARIES=()
rc=0
for san in "$@"; do
  case "$san" in
    asan|ubsan)
      targets=(//kernels/... //engine/... //server/... //clients/... //tools/...)
      extra=(--test_env=LSAN_OPTIONS=suppressions=$ROOT/tools/sanitizers/lsan.supp) ;;
    tsan)
      targets=(//kernels/cpu/... //engine/serving/... //engine/model/... //server/...)
      # The .bazelrc cannot name an absolute path, so the suppressions file is added here.
      extra=(--test_env=TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:history_size=4:suppressions=$ROOT/tools/sanitizers/tsan.supp) ;;
    *)
      echo "usage: $0 [asan|ubsan|tsan]..." >&2
      exit 2 ;;
  esac
  log="/tmp/blossom-san-$san.log"
  : > "$log"
  echo "== $san: ${targets[*]} (log: $log)" >&2
  # Tests run under mpirun (tests/mpi/run_mpi.sh) start Open MPI, which is not instrumented and
  # leaks thousands of objects by design, most from plug-ins it has dlclose()d by exit (their
  # frames cannot even be symbolized, so they cannot be suppressed narrowly). Under asan those
  # run as a second invocation with leak detection off; every other ASan check stays on.
  mpi_tests=()
  if [ "$san" = asan ]; then
    universe=$(printf ' + %s' "${targets[@]}"); universe="${universe:3}"
    mapfile -t mpi_tests < <("${BAZEL[@]}" query --noshow_progress \
      "rdeps($universe, //tests/mpi:run_mpi.sh, 1) intersect tests($universe)" 2>/dev/null)
  fi
  excluded=()
  for t in "${mpi_tests[@]}"; do excluded+=("-$t"); done
  "${BAZEL[@]}" test "--config=$san" "${COMMON[@]}" "${extra[@]}" -- "${targets[@]}" \
    "${excluded[@]}" 2>&1 | tee -a "$log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
  if [ "${#mpi_tests[@]}" -gt 0 ]; then
    "${BAZEL[@]}" test "--config=$san" "${COMMON[@]}" "${extra[@]}" \
      --test_env=ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:strict_string_checks=1 \
      -- "${mpi_tests[@]}" 2>&1 | tee -a "$log"
    [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
  fi
  passed=$(grep -cE '^//[^ ]+ +(\(cached\) )?PASSED' "$log")
  failed=$(grep -cE '^//[^ ]+ +(\(cached\) )?(FAILED in|TIMEOUT|FLAKY|INCOMPLETE)' "$log")
  unbuilt=$(grep -cE '^//[^ ]+ +(FAILED TO BUILD|NO STATUS)' "$log")
  [ "$failed" -eq 0 ] && [ "$unbuilt" -eq 0 ] || rc=1
  SUMMARIES+=("$san: $passed passed, $failed failed$([ "$unbuilt" -gt 0 ] && echo ", $unbuilt not built")")
done
"${BAZEL[@]}" shutdown
(IFS=';'; echo "${SUMMARIES[*]}" | sed 's/;/; /g')
exit $rc
