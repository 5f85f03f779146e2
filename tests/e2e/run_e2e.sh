#!/usr/bin/env bash
# Bazel sh_test wrapper of the Python end-to-end tests: runs the *_test.py files matching
# PATTERN (default: all of them that the target ships) with the interpreter in
# $BLOSSOM_E2E_PYTHON (a venv made by clients/python/setup_venv.sh, holding blossom-client,
# openai and text-generation), writing JUnit XML of every case to $XML_OUTPUT_FILE.
# tools/test.sh sets the variable; without a usable interpreter the target reports one SKIPPED
# case with the reason (never a silent pass).
#   run_e2e.sh [PATTERN]
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
pattern="${1:-*_test.py}"
source "$here/skip.sh"

require_python BLOSSOM_E2E_PYTHON "blossom_client, openai, text_generation, aiohttp" \
  clients/python/setup_venv.sh
py="$BLOSSOM_E2E_PYTHON"
cd "$here"
exec "$py" "$here/../util/junit_runner.py" --xml "${XML_OUTPUT_FILE:-}" --pattern "$pattern" "$here"
