# Sourced by the e2e test wrappers. A missing venv is reported, never a silent pass.

# skip REASON: reports the Bazel target as one SKIPPED case (stdout, and JUnit XML in
# $XML_OUTPUT_FILE) and exits 0.
skip() {
  echo "SKIPPED: $1"
  local xml="${XML_OUTPUT_FILE:-}" name="${TEST_TARGET:-e2e_test}"
  name="${name##*:}"
  if [ -n "$xml" ]; then
    local reason
    reason=$(printf '%s' "$1" | sed -e 's/&/\&amp;/g' -e 's/</\&lt;/g' -e 's/>/\&gt;/g' -e 's/"/\&quot;/g')
    printf '<?xml version="1.0" encoding="UTF-8"?>\n<testsuites><testsuite name="%s" tests="1" skipped="1"><testcase classname="%s" name="%s"><skipped message="%s"/></testcase></testsuite></testsuites>\n' "$name" "$name" "$name" "$reason" > "$xml"
  fi
  exit 0
}

# require_python VAR MODULES SETUP: skips unless the variable VAR names an interpreter that
# imports MODULES ("a, b"); SETUP is the script that makes that venv (for the reason).
require_python() {
  local var="$1" modules="$2" setup="$3" py="${!1:-}" err
  [ -n "$py" ] || skip "$var is not set (tools/test.sh sets it after $setup)"
  [ -x "$py" ] || skip "$var=$py is not an executable interpreter"
  if ! err=$("$py" -I -c "import $modules" 2>&1); then
    skip "$py lacks $modules (run $setup): $(printf '%s' "$err" | tail -n 1)"
  fi
}
