#!/usr/bin/env bash
# The main job on the embedded default: installs what is missing, builds the CLI and generates
# a completion with the bundled demo model on the CPU backend. Extra arguments go to
# `blossom generate` (e.g. --prompt "..." --max-new-tokens 64 --temperature 0.8 --seed 1).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install_deps.sh
bazel build --config=nocuda //clients:blossom >&2
PROMPT="The server reads"
exec bazel-bin/clients/blossom generate --model tests/fixtures/models/bloom-demo \
  --prompt "$PROMPT" --max-new-tokens 48 "$@"
