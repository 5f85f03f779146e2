#!/usr/bin/env bash
# Bazel sh_test wrapper for the deploy/ checks: runs one check program and writes a JUnit XML
# case (passed, failed with the output's tail, or skipped with the reason) to $XML_OUTPUT_FILE.
#
#   run_check.sh NAME NEEDS CHECK.py ARGS...
#
# NEEDS says what the check runs with: "python3" (the system interpreter, standard library),
# "promtool" (also needs Prometheus's promtool on PATH: apt-get install prometheus), or "venv"
# (the interpreter in $BLOSSOM_DEPLOY_PYTHON, a venv from deploy/setup_venv.sh with PyYAML and
# kubernetes-validate; tools/test.sh sets it). A missing tool or venv is SKIPPED with the
# reason, never a silent pass. Paths in ARGS are relative to the workspace root (runfiles).
set -uo pipefail
name="$1"; needs="$2"; shift 2
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
xml="${XML_OUTPUT_FILE:-}"

escape() { sed -e 's/&/\&amp;/g' -e 's/</\&lt;/g' -e 's/>/\&gt;/g' -e 's/"/\&quot;/g' -e "s/'/\&apos;/g"; }
write_xml() {  # status body
  [ -n "$xml" ] || return 0
  local inner=""
  case "$1" in
    skipped) inner="<skipped message=\"$(printf '%s' "$2" | escape)\"/>" ;;
    failed) inner="<failure message=\"$name failed\">$(printf '%s' "$2" | escape)</failure>" ;;
  esac
  printf '<?xml version="1.0" encoding="UTF-8"?>\n<testsuites><testsuite name="%s" tests="1" failures="%d" skipped="%d"><testcase classname="deploy" name="%s">%s</testcase></testsuite></testsuites>\n' \
    "$name" "$([ "$1" = failed ] && echo 1 || echo 0)" "$([ "$1" = skipped ] && echo 1 || echo 0)" \
    "$name" "$inner" > "$xml"
}
skip() { echo "SKIPPED: $1"; write_xml skipped "$1"; exit 0; }

py=python3
case "$needs" in
  python3) ;;
  promtool)
    command -v promtool >/dev/null || skip "promtool not on PATH (apt-get install prometheus; tools/install_deps.sh does)"
    ;;
  venv)
    py="${BLOSSOM_DEPLOY_PYTHON:-}"
    [ -n "$py" ] || skip "BLOSSOM_DEPLOY_PYTHON is not set (tools/test.sh sets it after deploy/setup_venv.sh)"
    [ -x "$py" ] || skip "BLOSSOM_DEPLOY_PYTHON=$py is not an executable interpreter"
    if ! err=$("$py" -I -c "import yaml, kubernetes_validate" 2>&1); then
      skip "$py lacks PyYAML or kubernetes-validate (run deploy/setup_venv.sh): $(printf '%s' "$err" | tail -n 1)"
    fi
    ;;
  *) echo "run_check.sh: NEEDS must be python3, promtool or venv" >&2; exit 2 ;;
esac

out=$("$py" "$@" 2>&1); rc=$?
printf '%s\n' "$out"
if [ "$rc" -eq 0 ]; then
  write_xml passed ""
else
  write_xml failed "$(printf '%s' "$out" | tail -n 60)"
fi
exit "$rc"
