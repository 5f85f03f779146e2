#!/usr/bin/env bash
# Bazel sh_test //clients/python:python_client_test: runs clients/python/tests with the
# interpreter in $BLOSSOM_E2E_PYTHON (a venv where `pip install ./clients/python` was done, e.g.
# by clients/python/setup_venv.sh), writing JUnit XML of the real results to $XML_OUTPUT_FILE.
# Without a usable interpreter it reports one SKIPPED case with the reason and exits 0.
#
#   clients/python/setup_venv.sh
#   bazel test --test_env=BLOSSOM_E2E_PYTHON=$PWD/.venv-e2e/bin/python //clients/python:python_client_test
set -uo pipefail

# Under Bazel the tests are runfiles (the script itself runs from bazel-bin); run directly, they
# sit beside this script.
if [ -n "${TEST_SRCDIR:-}" ]; then
  tests_dir="$TEST_SRCDIR/${TEST_WORKSPACE:-blossom}/clients/python/tests"
else
  tests_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/tests"
fi
xml="${XML_OUTPUT_FILE:-}"

skip() {
  local reason="$1"
  echo "SKIPPED: $reason"
  if [ -n "$xml" ]; then
    local esc
    esc=$(printf '%s' "$reason" | sed -e 's/&/\&amp;/g' -e 's/</\&lt;/g' -e 's/>/\&gt;/g' \
                                      -e 's/"/\&quot;/g')
    cat > "$xml" <<XML
<?xml version="1.0" encoding="UTF-8"?>
<testsuites>
  <testsuite name="python_client_test" tests="1" failures="0" errors="0" skipped="1">
    <testcase classname="python_client_test" name="python_client_test">
      <skipped message="$esc"/>
    </testcase>
  </testsuite>
</testsuites>
XML
  fi
  exit 0
}

py="${BLOSSOM_E2E_PYTHON:-}"
[ -n "$py" ] || skip "BLOSSOM_E2E_PYTHON is not set; run clients/python/setup_venv.sh and pass --test_env=BLOSSOM_E2E_PYTHON=<venv>/bin/python"
[ -x "$py" ] || skip "BLOSSOM_E2E_PYTHON=$py is not an executable interpreter"
# -I: isolated mode, so nothing from the working directory or PYTHON* variables shadows the
# installed package.
if ! err=$("$py" -I -c "import blossom_client, grpc_health.v1.health" 2>&1); then
  skip "$py cannot import blossom_client (pip install ./clients/python into it): $(printf '%s' "$err" | tail -n 1)"
fi

exec "$py" -I "$tests_dir/../../../tests/util/junit_runner.py" --xml "$xml" "$tests_dir"
