#!/usr/bin/env bash
# Installs the Debian 12 packages the build needs, only if some are missing (idempotent, quiet).
set -euo pipefail
PACKAGES=(
  bazel-bootstrap bazel-rules-java bazel-platforms pkg-config g++ python3
  libabsl-dev libspdlog-dev libfmt-dev libgtest-dev libgmock-dev nlohmann-json3-dev
  libprotobuf-dev protobuf-compiler libgrpc++-dev protobuf-compiler-grpc
  # server/http: Boost.Beast/Asio (header-only), TLS over OpenSSL, openssl to make test certs.
  libboost1.74-dev libssl-dev openssl
  # Multi-process tensor parallelism (kernels/mpi, mpirun in tests/mpi).
  libopenmpi-dev openmpi-bin
  # Fuzzing (tools/fuzz/run.sh): clang and libFuzzer.
  clang-14 libfuzzer-14-dev
  # End-to-end tests: a venv for the Python clients, curl, and a real Prometheus server.
  python3-venv curl prometheus
  # The lm_eval end-to-end test's venv builds on Debian's torch (tests/e2e/setup_lm_eval_venv.sh).
  python3-torch
)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "Installing: ${missing[*]}" >&2
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq >/dev/null
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
