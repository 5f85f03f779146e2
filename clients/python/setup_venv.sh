#!/usr/bin/env bash
# Creates or refreshes a Python venv for end-to-end tests: the blossom-client package from this
# tree plus the third-party clients the server must work with unmodified (OpenAI's `openai`,
# Hugging Face's `text-generation`), at pinned versions.
#
#   clients/python/setup_venv.sh [VENV_DIR]      # default: <repo>/.venv-e2e
#   PYTHON=python3.12 clients/python/setup_venv.sh /tmp/venv
#
# Idempotent: an existing venv is reused, pinned packages already installed are left alone, and
# blossom-client is always rebuilt from the current tree (its stubs come from proto/). Needs
# Python >= 3.10 with the venv module (Debian: apt-get install python3-venv) and access to PyPI.
# Then: bazel test --test_env=BLOSSOM_E2E_PYTHON=<VENV_DIR>/bin/python //clients/python:python_client_test
set -euo pipefail

OPENAI_VERSION=3.54.0
TEXT_GENERATION_VERSION=0.7.0
# For the end-to-end check that the server registers gRPC reflection (matches grpcio).
GRPCIO_REFLECTION_VERSION=1.85.1
# Property-based requests against the gateway's /openapi.json (tests/e2e/openapi_schemathesis_test.py).
SCHEMATHESIS_VERSION=4.32.5

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
venv="${1:-$repo/.venv-e2e}"
python="${PYTHON:-python3}"

if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
  echo "setup_venv: $python is missing or older than 3.10 (set PYTHON=...)" >&2
  exit 1
fi
if [ ! -x "$venv/bin/python" ]; then
  echo "setup_venv: creating $venv"
  "$python" -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check)
# Pinned third-party clients (no-ops when already at these versions).
"${pip[@]}" install --quiet "openai==$OPENAI_VERSION" "text-generation==$TEXT_GENERATION_VERSION" \
  "grpcio-reflection==$GRPCIO_REFLECTION_VERSION" "schemathesis==$SCHEMATHESIS_VERSION"
# blossom-client: dependencies resolved normally, then the package itself rebuilt from the tree
# even if the version number did not change. The build runs in-tree (it reads ../../proto).
"${pip[@]}" install --quiet "$repo/clients/python"
"${pip[@]}" install --quiet --no-deps --force-reinstall "$repo/clients/python"
"$venv/bin/python" -I -c 'import blossom_client, openai, text_generation
print("setup_venv: ok: blossom-client", blossom_client.__version__, "| openai", openai.__version__)'
echo "setup_venv: export BLOSSOM_E2E_PYTHON=$venv/bin/python"
