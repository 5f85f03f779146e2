#!/usr/bin/env bash
# Creates or refreshes the Python venv of the deploy/ checks (//deploy:k8s_manifests_test):
# PyYAML and kubernetes-validate (Kubernetes OpenAPI schemas for offline validation), pinned.
#
#   deploy/setup_venv.sh [VENV_DIR]      # default: <repo>/.venv-deploy
#
# Idempotent; needs python3 with the venv module (Debian: python3-venv) and access to PyPI.
# Then: bazel test --test_env=BLOSSOM_DEPLOY_PYTHON=<VENV_DIR>/bin/python //deploy:k8s_manifests_test
set -euo pipefail
KUBERNETES_VALIDATE_VERSION=1.37.0
PYYAML_VERSION=6.0.3

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${1:-$repo/.venv-deploy}"
python="${PYTHON:-python3}"
if [ ! -x "$venv/bin/python" ]; then
  echo "deploy/setup_venv: creating $venv"
  "$python" -m venv "$venv"
fi
"$venv/bin/python" -m pip --disable-pip-version-check install --quiet \
  "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION" "PyYAML==$PYYAML_VERSION"
"$venv/bin/python" -I -c 'import yaml, kubernetes_validate
print("deploy/setup_venv: ok: kubernetes-validate", kubernetes_validate.__version__ if hasattr(kubernetes_validate, "__version__") else "")'
echo "deploy/setup_venv: export BLOSSOM_DEPLOY_PYTHON=$venv/bin/python"
