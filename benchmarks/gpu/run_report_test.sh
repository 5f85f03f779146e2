#!/usr/bin/env bash
# Bazel sh_test //benchmarks/gpu:side_by_side_report_test: the stdlib-only unit tests of
# side_by_side_report.py with the system python3 (no torch needed). Run directly, it uses the
# files beside itself.
set -euo pipefail
if [ -n "${TEST_SRCDIR:-}" ]; then
  dir="$TEST_SRCDIR/${TEST_WORKSPACE:-blossom}/benchmarks/gpu"
else
  dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
fi
cd "$dir"
# -B: no __pycache__ in the runfiles tree; -m unittest finds the module by name from this folder.
exec python3 -B -m unittest -v side_by_side_report_test
