#!/usr/bin/env bash
# Launches one process per GPU for NCCL tensor parallelism (Open MPI's mpirun; the NCCL unique id
# is broadcast over MPI by kernels/nccl:nccl_mpi_bootstrap, so the ranks may span machines).
#
#   deploy/launch_tp.sh --np N [--hostfile FILE] [--check] [-- COMMAND ARGS...]
#
#   --np N         total ranks = GPUs (required)
#   --hostfile F   Open MPI hostfile ("host slots=GPUs" per line) for several machines
#   --check        first run kernels/nccl:nccl_mpi_check (all-reduce + all-gather on every GPU)
#   COMMAND        the per-rank program (each process picks its GPU from its local rank)
#
# Needs: apt-get install -y libopenmpi-dev openmpi-bin (on every machine), and the binaries at the
# same path on every machine. Environment passed to every rank: NCCL_* and CUDA_VISIBLE_DEVICES.
set -euo pipefail

np=""
hostfile=""
check=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --np) np="$2"; shift 2 ;;
    --hostfile) hostfile="$2"; shift 2 ;;
    --check) check=1; shift ;;
    --) shift; break ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "launch_tp.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
if [[ -z "$np" || ! "$np" =~ ^[1-9][0-9]*$ ]]; then
  echo "launch_tp.sh: --np N (a positive number of ranks) is required" >&2
  exit 2
fi
if ! command -v mpirun >/dev/null; then
  echo "launch_tp.sh: mpirun not found (apt-get install -y libopenmpi-dev openmpi-bin)" >&2
  exit 1
fi

mpi_args=(-np "$np" --bind-to none)
# Running as root inside a container is common for GPU jobs; Open MPI refuses it unless asked.
if [[ "$(id -u)" == 0 ]]; then mpi_args+=(--allow-run-as-root); fi
if [[ -n "$hostfile" ]]; then mpi_args+=(--hostfile "$hostfile"); fi
for var in $(env | grep -o '^NCCL_[A-Z_]*' || true) CUDA_VISIBLE_DEVICES; do
  if [[ -n "${!var:-}" ]]; then mpi_args+=(-x "$var"); fi
done

cd "$(dirname "$0")/.."
if [[ "$check" == 1 ]]; then
  bazel build //kernels/nccl:nccl_mpi_check
  mpirun "${mpi_args[@]}" bazel-bin/kernels/nccl/nccl_mpi_check
fi
if [[ $# -gt 0 ]]; then
  exec mpirun "${mpi_args[@]}" "$@"
fi
