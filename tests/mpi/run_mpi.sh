#!/usr/bin/env bash
# sh_test script: `run_mpi.sh NP PROGRAM [ARGS...]` runs PROGRAM as NP processes under Open MPI's
# mpirun and passes its exit status through. Rank 0 writes the JUnit XML ($XML_OUTPUT_FILE,
# gtest's convention); the other ranks write none. Without mpirun the target reports one SKIPPED
# case with the reason.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/mpi_env.sh" 2>/dev/null ||
  source "${TEST_SRCDIR:-.}/${TEST_WORKSPACE:-blossom}/tests/mpi/mpi_env.sh"

if [ $# -lt 2 ]; then
  echo "usage: run_mpi.sh NP PROGRAM [ARGS...]" >&2
  exit 2
fi
np="$1"
shift
mpi_setup
# Only rank 0 writes the XML file and owns Bazel's premature-exit marker.
export BLOSSOM_MPI_XML="$mpi_xml"
unset XML_OUTPUT_FILE GTEST_OUTPUT
timeout --signal=KILL 55 mpirun -np "$np" "${MPIRUN_ARGS[@]}" /bin/sh -c '
  if [ "${OMPI_COMM_WORLD_RANK:-0}" = 0 ]; then
    [ -n "$BLOSSOM_MPI_XML" ] && export XML_OUTPUT_FILE="$BLOSSOM_MPI_XML"
  else
    unset TEST_PREMATURE_EXIT_FILE
  fi
  exec "$@"' mpi-rank "$@"
