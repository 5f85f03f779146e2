#!/usr/bin/env bash
# Launches one process per tensor-parallel rank with Open MPI's mpirun, optionally across
# machines: blossom-server / blossom generate with `--launcher mpi --tp N` (rank 0 serves and
# schedules, the others execute its step plans; on CUDA the NCCL unique id is broadcast over MPI).
#
#   deploy/launch_tp.sh --np N [--hostfile FILE] [--grace S] [--check] [-- COMMAND ARGS...]
#
#   --np N         total ranks (required); COMMAND's --tp must be the same N
#   --hostfile F   Open MPI hostfile ("host slots=ranks" per line) for several machines
#   --grace S      seconds (at least) mpirun lets the ranks drain after forwarding SIGTERM/SIGINT,
#                  before SIGKILL (default 60; keep it above blossom-server's --drain_timeout)
#   --check        first run kernels/nccl:nccl_mpi_check (all-reduce + all-gather on every GPU)
#   COMMAND        the per-rank program (each process picks its GPU from its local rank)
#
# Example: deploy/launch_tp.sh --np 2 --hostfile hosts.txt -- \
#            blossom-server --model /models/bloom --launcher mpi --tp 2
# To drain, send SIGTERM to rank 0's process (then every process exits 0) or to this script's
# mpirun (forwarded to every rank; mpirun then exits non-zero).
#
# Needs: apt-get install -y libopenmpi-dev openmpi-bin (on every machine), and the binaries at the
# same path on every machine. Environment passed to every rank: NCCL_* and CUDA_VISIBLE_DEVICES.
set -euo pipefail

np=""
hostfile=""
grace=60
check=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --np) np="$2"; shift 2 ;;
    --hostfile) hostfile="$2"; shift 2 ;;
    --grace) grace="$2"; shift 2 ;;
    --check) check=1; shift ;;
    --) shift; break ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
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

if [[ ! "$grace" =~ ^[0-9]+$ ]]; then
  echo "launch_tp.sh: --grace S takes whole seconds" >&2
  exit 2
fi

# odls_base_sigkill_timeout: how long mpirun waits after forwarding SIGTERM before SIGKILL.
mpi_args=(-np "$np" --bind-to none --mca odls_base_sigkill_timeout "$grace")
# Running as root inside a container is common for GPU jobs; Open MPI refuses it unless asked.
if [[ "$(id -u)" == 0 ]]; then mpi_args+=(--allow-run-as-root); fi
if [[ -n "$hostfile" ]]; then
  [[ "$hostfile" == /* ]] || hostfile="$PWD/$hostfile"  # --check runs from the source tree
  mpi_args+=(--hostfile "$hostfile")
fi
# Names with digits too (NCCL_P2P_LEVEL, NCCL_P2P_DISABLE): a rank without them would run
# another NCCL configuration than the others.
for var in $(env | grep -o '^NCCL_[A-Z0-9_]*=' | tr -d '=' || true) CUDA_VISIBLE_DEVICES; do
  if [[ -n "${!var:-}" ]]; then mpi_args+=(-x "$var"); fi
done

if [[ "$check" == 1 ]]; then
  # From a source tree (Bazel builds the check); the command below keeps the caller's directory,
  # so relative paths in it (--hostfile, --model) mean what the caller meant.
  (cd "$(dirname "$0")/.." && bazel build //kernels/nccl:nccl_mpi_check &&
   mpirun "${mpi_args[@]}" bazel-bin/kernels/nccl/nccl_mpi_check)
fi
if [[ $# -gt 0 ]]; then
  exec mpirun "${mpi_args[@]}" "$@"
fi
