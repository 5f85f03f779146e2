#!/usr/bin/env bash
# The GPU machine's scripts end to end on a machine without a GPU: bundle the gpu-tagged test
# binaries (tools/gpu/make_gpu_bundle.sh), run the bundle's run_on_device.sh --dry-run, and check
# what would come back through the device tool: three files (results.json, results.md,
# logs.tgz) one folder down, every test case SKIPPED with its reason, the glibc the bundle needs
# and a tail for nothing. Then plant the failures the scripts must catch. So the first run on a
# lent GPU cannot fail on plumbing.
# Usage (Bazel): gpu_suite_dry_run_test.sh BINARY...
set -euo pipefail
fail() { echo "FAIL: $*" >&2; exit 1; }
R="$TEST_SRCDIR/blossom"
BUNDLE="$TEST_TMPDIR/bundle"
BINS=()
for b in "$@"; do BINS+=("$R/$b"); done

"$R/tools/gpu/make_gpu_bundle.sh" "$BUNDLE" "$TEST_SRCDIR" "${BINS[@]}" > "$TEST_TMPDIR/bundle.log" 2>&1 ||
  { cat "$TEST_TMPDIR/bundle.log"; fail "make_gpu_bundle.sh failed"; }
for f in bin lib runfiles/blossom/tests/fixtures/models manifest.json run_on_device.sh; do
  [[ -e "$BUNDLE/$f" ]] || fail "bundle lacks $f"
done
[[ $(ls "$BUNDLE/bin" | wc -l) -eq $# ]] || fail "bundle has $(ls "$BUNDLE/bin" | wc -l) binaries, expected $#"

OUT="$TEST_TMPDIR/out"
mkdir -p "$OUT"
if ! BLOSSOM_DEADLINE_S=240 bash "$BUNDLE/run_on_device.sh" --dry-run preflight tests --out "$OUT/gpu_results" \
    > "$TEST_TMPDIR/run.log" 2>&1; then
  cat "$TEST_TMPDIR/run.log"; fail "run_on_device.sh --dry-run failed"
fi
[[ "$(cd "$OUT/gpu_results" && ls | sort | tr '\n' ' ')" == "logs.tgz results.json results.md " ]] ||
  fail "unexpected output files: $(ls "$OUT/gpu_results")"
python3 - "$OUT/gpu_results/results.json" "$#" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
expected = int(sys.argv[2])
assert r["dry_run"] is True, r["dry_run"]
assert r["summary"]["runs"] == expected, r["summary"]
assert r["summary"]["runs_failed"] == 0, r["summary"]
assert r["summary"]["test_cases"] > 0, r["summary"]
assert r["all_skipped"], "a GPU test ran without a GPU? " + json.dumps(r["summary"])
assert r["glibc"] != "unknown" and "ldd --version" in r["preflight"], r["glibc"]
assert r["glibc_needed_by_bundle"], r["glibc_needed_by_bundle"]
assert not r["ldd_problems"], r["ldd_problems"]
assert all("log_tail" not in run for run in r["runs"]), "a tail for a run that passed"
print("dry run ok:", r["summary"], "glibc needed", r["glibc_needed_by_bundle"])
PY
LOGS="$(tar -tzf "$OUT/gpu_results/logs.tgz")"
grep -q 'preflight.txt' <<< "$LOGS" || fail "logs.tgz lacks preflight.txt"
grep -q '\.none\.xml$' <<< "$LOGS" || fail "logs.tgz lacks the gtest XML"

# Planted failures. 1: a real (not dry) run where every case skipped is a failure.
if bash "$BUNDLE/run_on_device.sh" tests --out "$OUT/real" > "$TEST_TMPDIR/real.log" 2>&1; then
  fail "a run with every test SKIPPED passed without --dry-run"
fi
# 2: more files than the device tool returns.
mkdir -p "$OUT/crowded"
for i in 1 2 3 4 5 6; do echo x > "$OUT/crowded/extra$i.txt"; done
if bash "$BUNDLE/run_on_device.sh" --dry-run tests --out "$OUT/crowded" > "$TEST_TMPDIR/crowded.log" 2>&1; then
  fail "9 output files passed the layout check"
fi
grep -q "the device tool returns 8" "$TEST_TMPDIR/crowded.log" || fail "the layout failure was not named"
# 3: a failing test binary gets its log tail into results.json.
cp -r "$BUNDLE" "$TEST_TMPDIR/broken"
printf '#!/bin/sh\necho "planted failure line"\nexit 3\n' > "$TEST_TMPDIR/broken/bin/zz_planted_test"
chmod +x "$TEST_TMPDIR/broken/bin/zz_planted_test"
if bash "$TEST_TMPDIR/broken/run_on_device.sh" --dry-run tests --out "$OUT/broken" > "$TEST_TMPDIR/broken.log" 2>&1; then
  fail "a failing binary passed"
fi
python3 - "$OUT/broken/results.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
bad = [run for run in r["runs"] if run["test"] == "zz_planted_test"]
assert bad and not bad[0]["passed"] and "planted failure line" in bad[0].get("log_tail", ""), bad
PY
# 4: a bundle needing a newer glibc than allowed is refused at bundling time.
if BLOSSOM_MAX_GLIBC=2.2 "$R/tools/gpu/make_gpu_bundle.sh" "$TEST_TMPDIR/old_glibc" "$TEST_SRCDIR" "${BINS[0]}" \
    > "$TEST_TMPDIR/glibc.log" 2>&1; then
  fail "a bundle needing glibc > 2.2 was accepted with BLOSSOM_MAX_GLIBC=2.2"
fi
grep -q "needs glibc" "$TEST_TMPDIR/glibc.log" || fail "the glibc refusal did not say why"
# 5: a "tree" bundle (run_gpu_suite.sh's: the fixtures are the working tree's, which travels
# anyway) carries none and links <repo>/tests/fixtures on the device.
REPO="$TEST_TMPDIR/repo"
mkdir -p "$REPO/tests" "$REPO/.device"
cp -rL "$R/tests/fixtures" "$REPO/tests/fixtures"
"$R/tools/gpu/make_gpu_bundle.sh" "$REPO/.device/suite" tree "${BINS[@]}" > "$TEST_TMPDIR/tree.log" 2>&1 ||
  { cat "$TEST_TMPDIR/tree.log"; fail "make_gpu_bundle.sh tree failed"; }
[[ ! -e "$REPO/.device/suite/runfiles/blossom/tests/fixtures" ]] || fail "a tree bundle copied the fixtures"
grep -q '"fixtures": "working tree"' "$REPO/.device/suite/manifest.json" || fail "manifest lacks the fixture mode"
if ! BLOSSOM_DEADLINE_S=240 bash "$REPO/.device/suite/run_on_device.sh" --dry-run tests --out "$OUT/tree" \
    > "$TEST_TMPDIR/tree_run.log" 2>&1; then
  cat "$TEST_TMPDIR/tree_run.log"; fail "a tree bundle's dry run failed"
fi
grep -q "fixtures: the working tree's" "$TEST_TMPDIR/tree_run.log" || fail "the tree fixtures were not linked"
python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); assert r["summary"]["runs_failed"] == 0 and r["all_skipped"], r["summary"]' \
  "$OUT/tree/results.json" || fail "a tree bundle's tests did not all skip cleanly"
# ...and one that is not inside a repository says why instead of running without data.
if "$R/tools/gpu/make_gpu_bundle.sh" "$TEST_TMPDIR/loose" tree "${BINS[0]}" > "$TEST_TMPDIR/loose.log" 2>&1; then
  fail "a tree bundle outside a repository was accepted"
fi
echo "PASS"
