#!/usr/bin/env bash
# Bazel sh_tests of benchmarks/gpu's stdlib-only Python modules (side_by_side_report_test,
# ncu_summary_test) with the system python3 (no torch needed): the test module's name is the
# first argument (default side_by_side_report_test). Run directly, it uses the files beside itself.
set -euo pipefail
module="${1:-side_by_side_report_test}"
if [ -n "${TEST_SRCDIR:-}" ]; then
  dir="$TEST_SRCDIR/${TEST_WORKSPACE:-blossom}/benchmarks/gpu"
else
  dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
fi
cd "$dir"
# -B: no __pycache__ in the runfiles tree; -m unittest finds the module by name from this folder.
exec python3 -B -m unittest -v "$module"
