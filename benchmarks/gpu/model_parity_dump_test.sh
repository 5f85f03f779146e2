#!/usr/bin/env bash
# Bazel sh_test //benchmarks/gpu:model_parity_dump_test: model_parity_dump_test.py (stdlib only)
# with the system python3 on the dump binary and a fixture model from the runfiles.
set -euo pipefail
R="$TEST_SRCDIR/${TEST_WORKSPACE:-blossom}"
exec python3 -B "$R/benchmarks/gpu/model_parity_dump_test.py" "$R/$1" "$R/$2" "$R/$3"
