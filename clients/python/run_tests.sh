#!/usr/bin/env bash
# Bazel sh_test //clients/python:python_client_test: runs clients/python/tests with the
# interpreter in $BLOSSOM_E2E_PYTHON (a venv where `pip install ./clients/python` was done, e.g.
# by clients/python/setup_venv.sh), writing JUnit XML of the real results to $XML_OUTPUT_FILE.
# Without a usable interpreter it reports one SKIPPED case with the reason and exits 0.
#
# The package under test is this tree's blossom_client/*.py, not the venv's installed copy (which
# is only as new as the last setup_venv.sh). The venv still supplies grpcio, protobuf and the
# generated blossom.v1 stubs (blossom_client/_proto: generated at install time by grpcio-tools,
# a build-time requirement the venv does not hold), so a proto change needs setup_venv.sh again.
#
#   clients/python/setup_venv.sh
#   bazel test --test_env=BLOSSOM_E2E_PYTHON=$PWD/.venv-e2e/bin/python //clients/python:python_client_test
set -uo pipefail

# Under Bazel the tests and sources are runfiles (the script itself runs from bazel-bin); run
# directly, they sit beside this script.
if [ -n "${TEST_SRCDIR:-}" ]; then
  here="$TEST_SRCDIR/${TEST_WORKSPACE:-blossom}/clients/python"
else
  here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
fi
tests_dir="$here/tests"
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
# -I: isolated mode, so nothing from the working directory or PYTHON* variables decides what is
# imported; the tree's package is put first on sys.path explicitly below.
# `stubs`: the installed package's _proto directory.
if ! stubs=$("$py" -I -c "import os, grpc_health.v1.health
import blossom_client._proto as p
print(os.path.dirname(p.__file__))
import blossom_client._proto.blossom.v1.blossom_pb2_grpc" 2>&1); then
  why="$(printf '%s' "$stubs" | tail -n 1)"
  skip "$py cannot import blossom_client (pip install ./clients/python into it): $why"
fi

# The tree's modules plus the venv's stubs, as one package in a scratch directory.
if [ -n "${TEST_TMPDIR:-}" ]; then
  overlay="$TEST_TMPDIR/blossom_client_tree"
  rm -rf "$overlay"
else
  overlay="$(mktemp -d)"
  trap 'rm -rf "$overlay"' EXIT
fi
mkdir -p "$overlay/blossom_client"
ln -s "$here"/blossom_client/*.py "$overlay/blossom_client/"
ln -s "$stubs" "$overlay/blossom_client/_proto"

# Not exec: the EXIT trap above must still run when not under Bazel.
runner="$tests_dir/../../../tests/util/junit_runner.py"
"$py" -I - "$overlay" "$runner" --xml "$xml" "$tests_dir" <<'PY'
import os, runpy, sys
overlay, runner = sys.argv[1], sys.argv[2]
sys.path.insert(0, overlay)
import blossom_client
if not os.path.abspath(blossom_client.__file__).startswith(os.path.join(overlay, "")):
    sys.exit(f"run_tests.sh: imported {blossom_client.__file__}, not the tree's copy in {overlay}")
print(f"run_tests.sh: testing the tree's blossom_client ({overlay}; stubs from the venv)",
      file=sys.stderr)
sys.argv = [runner] + sys.argv[3:]
runpy.run_path(runner, run_name="__main__")
PY
