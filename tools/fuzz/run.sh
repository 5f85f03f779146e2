#!/usr/bin/env bash
# Builds every libFuzzer target (cc_fuzz_test's *_fuzzer, tag "fuzzer") with clang-14 under
# --config=fuzz, in its own Bazel output base (one per checkout), and fuzzes each for SECONDS (default 60) from its
# committed corpus (corpus/<target>/ beside its BUILD file). New inputs go to a scratch copy; a
# crash, leak, sanitizer report or timeout leaves its reproducer in .fuzz-results/ and fails.
#
#   tools/fuzz/run.sh [SECONDS]
#
# Prints "fuzz: N passed, N failed" last, and writes .fuzz-results/<target>.xml (JUnit) for
# tools/test_summary.py. Reports SKIPPED (exit 0) when clang-14 or libFuzzer is missing.
# To keep a finding as a regression test, copy the reproducer into the target's corpus folder:
# the ordinary build replays every corpus file (//engine/...:<target>).
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT="$PWD"
SECONDS_PER_TARGET="${1:-60}"
# An output base belongs to one workspace: one per checkout (a CI clone must not meet this one's).
OUTPUT_BASE="${BLOSSOM_FUZZ_OUTPUT_BASE:-/tmp/bazel-fuzz-$(printf '%s' "$ROOT" | md5sum | cut -c1-12)}"
RESULTS="$ROOT/.fuzz-results"
rm -rf "$RESULTS"
mkdir -p "$RESULTS"

junit() {  # name status(passed|failed|skipped) message seconds
  local msg
  msg=$(printf '%s' "$3" | sed 's/&/\&amp;/g; s/</\&lt;/g; s/>/\&gt;/g; s/"/\&quot;/g')
  {
    echo '<?xml version="1.0" encoding="UTF-8"?>'
    echo "<testsuites><testsuite name=\"fuzz\" tests=\"1\"><testcase classname=\"fuzz\" name=\"$1\" time=\"$4\">"
    case "$2" in
      failed) echo "<failure message=\"$msg\"/>" ;;
      skipped) echo "<skipped message=\"$msg\"/>" ;;
    esac
    echo "</testcase></testsuite></testsuites>"
  } > "$RESULTS/$1.xml"
}

if ! command -v clang-14 >/dev/null || ! ls /usr/lib/llvm-14/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; then
  echo "fuzz: SKIPPED: clang-14 or libFuzzer (libfuzzer-14-dev) is not installed"
  junit libfuzzer skipped "clang-14 or libfuzzer-14-dev not installed" 0
  echo "fuzz: 0 passed, 0 failed"
  exit 0
fi

BAZEL=(bazel "--output_base=$OUTPUT_BASE")
# The fuzz targets, read from the BUILD files (a `bazel query //...` would wander into the
# checkout's bazel-<name> convenience links, which differ per clone).
mapfile -t TARGETS < <(find . -name BUILD -not -path './bazel-*' -not -path './.*' -print0 |
  xargs -0 python3 -c '
import re, sys
for path in sys.argv[1:]:
    pkg = path[2:].rsplit("/", 1)[0] if "/" in path[2:] else ""
    for name in re.findall(r"cc_fuzz_test\(\s*name\s*=\s*\"([^\"]+)\"", open(path).read()):
        print(f"//{pkg}:{name}_fuzzer")' | sort)
if [[ ${#TARGETS[@]} -eq 0 ]]; then
  echo "fuzz: no cc_fuzz_test found in the BUILD files" >&2
  echo "fuzz: 0 passed, 1 failed"
  exit 1
fi
echo "== building ${#TARGETS[@]} fuzzers with clang-14 (output base $OUTPUT_BASE)"
if ! "${BAZEL[@]}" build --config=fuzz --symlink_prefix=/ "${TARGETS[@]}" > "$RESULTS/build.log" 2>&1; then
  tail -30 "$RESULTS/build.log"
  for t in "${TARGETS[@]}"; do junit "${t##*:}" failed "the fuzzer did not build (see build.log)" 0; done
  "${BAZEL[@]}" shutdown >/dev/null 2>&1
  echo "fuzz: 0 passed, ${#TARGETS[@]} failed"
  exit 1
fi
BIN_ROOT="$("${BAZEL[@]}" info --config=fuzz bazel-bin 2>/dev/null)"
"${BAZEL[@]}" shutdown >/dev/null 2>&1  # the fuzzers run without Bazel; free its memory

passed=0 failed=0
for t in "${TARGETS[@]}"; do
  pkg="${t#//}"; pkg="${pkg%%:*}"; bin_name="${t##*:}"
  test_name="${bin_name%_fuzzer}"  # the replay cc_test, whose corpus folder this is
  seeds="$ROOT/$pkg/corpus/$test_name"
  work="$(mktemp -d)"
  log="$RESULTS/$test_name.log"
  echo "== $t: ${SECONDS_PER_TARGET}s from $(ls "$seeds" 2>/dev/null | wc -l) seeds"
  start=$(date +%s)
  # -timeout: one input taking 10 s is a hang; -rss_limit_mb: runaway allocation is a finding.
  ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  timeout $(( SECONDS_PER_TARGET + 60 )) "$BIN_ROOT/$pkg/$bin_name" -max_total_time="$SECONDS_PER_TARGET" \
      -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$RESULTS/$test_name-" \
      "$work" "$seeds" > "$log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - start ))
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
  if (( rc == 0 )); then
    passed=$((passed + 1))
    echo "   ok: ${execs} inputs in ${secs}s, $(ls "$work" | wc -l) new corpus entries (not kept)"
    junit "$test_name" passed "" "$secs"
  else
    failed=$((failed + 1))
    echo "   FAILED (rc $rc): reproducer(s): $(ls "$RESULTS" | grep "^$test_name-" | tr '\n' ' ')"
    grep -m5 -E "ERROR|SUMMARY|Test unit written" "$log" | sed 's/^/   /'
    junit "$test_name" failed "$(grep -m1 -E 'ERROR|SUMMARY' "$log" || echo "rc $rc")" "$secs"
  fi
  rm -rf "$work"
done
echo "fuzz: $passed passed, $failed failed"
(( failed == 0 ))
