# Sourced by the mpirun-driven sh_tests: skip() (a SKIPPED JUnit case with the reason, never a
# silent pass) and mpi_setup (checks mpirun, sets MPIRUN_ARGS and an environment that lets
# several sandboxed jobs run at once).

mpi_xml="${XML_OUTPUT_FILE:-}"
mpi_test_name="$(basename "${TEST_TARGET:-mpi_test}")"

skip() {
  echo "SKIPPED: $1"
  if [ -n "$mpi_xml" ]; then
    local reason
    reason=$(printf '%s' "$1" | sed -e 's/&/\&amp;/g' -e 's/</\&lt;/g' -e 's/>/\&gt;/g' -e 's/"/\&quot;/g')
    printf '<?xml version="1.0" encoding="UTF-8"?>\n<testsuites><testsuite name="%s" tests="1" skipped="1"><testcase classname="%s" name="%s"><skipped message="%s"/></testcase></testsuite></testsuites>\n' "$mpi_test_name" "$mpi_test_name" "$mpi_test_name" "$reason" > "$mpi_xml"
  fi
  exit 0
}

# Sets MPIRUN_ARGS (an array) and MPI_SESSION_DIR (removed at exit).
mpi_setup() {
  command -v mpirun >/dev/null 2>&1 ||
    skip "mpirun not found (apt-get install -y libopenmpi-dev openmpi-bin)"
  MPIRUN_ARGS=(--oversubscribe --bind-to none)  # CI has 2 cores
  # Containers often run tests as root; Open MPI refuses that unless asked.
  if [ "$(id -u)" = 0 ]; then MPIRUN_ARGS+=(--allow-run-as-root); fi
  # Shared-memory single copy (CMA) needs ptrace rights that containers usually lack.
  export OMPI_MCA_btl_vader_single_copy_mechanism=none
  # Everything Open MPI shares between processes goes to a directory private to this run, with a
  # short path (Unix socket paths are limited to 108 bytes; Bazel's TEST_TMPDIR is longer).
  # Sandboxed tests have their own PID namespaces, so concurrent jobs would otherwise derive the
  # same job id, session directory and /dev/shm segment names from identical PIDs (and crash).
  MPI_SESSION_DIR="$(mktemp -d /tmp/blossom-mpi.XXXXXX)" || exit 1
  trap 'rm -rf "$MPI_SESSION_DIR"' EXIT
  export TMPDIR="$MPI_SESSION_DIR"
  export OMPI_MCA_btl_vader_backing_directory="$MPI_SESSION_DIR"
  export PMIX_MCA_gds=hash
}
