#!/usr/bin/env bash
# Bazel sh_test //tests/e2e:e2e_test: runs e2e_test.py with the interpreter in
# $BLOSSOM_E2E_PYTHON (a venv made by clients/python/setup_venv.sh, holding blossom-client,
# openai and text-generation), writing JUnit XML of every case to $XML_OUTPUT_FILE.
# tools/test.sh sets the variable; without a usable interpreter the target reports one SKIPPED
# case with the reason (never a silent pass).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
xml="${XML_OUTPUT_FILE:-}"

skip() {
  echo "SKIPPED: $1"
  if [ -n "$xml" ]; then
    local reason
    reason=$(printf '%s' "$1" | sed -e 's/&/\&amp;/g' -e 's/</\&lt;/g' -e 's/>/\&gt;/g' -e 's/"/\&quot;/g')
    printf '<?xml version="1.0" encoding="UTF-8"?>\n<testsuites><testsuite name="e2e_test" tests="1" skipped="1"><testcase classname="e2e_test" name="e2e_test"><skipped message="%s"/></testcase></testsuite></testsuites>\n' "$reason" > "$xml"
  fi
  exit 0
}

py="${BLOSSOM_E2E_PYTHON:-}"
[ -n "$py" ] || skip "BLOSSOM_E2E_PYTHON is not set (tools/test.sh sets it after clients/python/setup_venv.sh)"
[ -x "$py" ] || skip "BLOSSOM_E2E_PYTHON=$py is not an executable interpreter"
if ! err=$("$py" -I -c "import blossom_client, openai, text_generation, aiohttp" 2>&1); then
  skip "$py lacks the e2e packages (run clients/python/setup_venv.sh): $(printf '%s' "$err" | tail -n 1)"
fi
cd "$here"
exec "$py" "$here/../util/junit_runner.py" --xml "$xml" --pattern "*_test.py" "$here"
