#!/usr/bin/env bash
# Bazel sh_test //benchmarks/gpu:serve_check_test: serve_check_test.py with the system python3.
set -euo pipefail
R="$TEST_SRCDIR/${TEST_WORKSPACE:-blossom}"
exec python3 -B "$R/benchmarks/gpu/serve_check_test.py" "$R/$1" "$R/$2" "$R/$3" "$R/benchmarks/gpu/serve_check.py"
