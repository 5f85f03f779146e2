#!/usr/bin/env bash
# Bazel sh_test wrapper: runs one unittest file of this folder with the system python3 (standard
# library only) through tests/util/junit_runner.py, which writes JUnit XML to $XML_OUTPUT_FILE.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"
exec python3 "$here/../util/junit_runner.py" --xml "${XML_OUTPUT_FILE:-}" --pattern "$1" "$here"
