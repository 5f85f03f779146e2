#!/usr/bin/env bash
# Creates or refreshes the venv of //tests/e2e:lm_eval_test: lm-evaluation-harness (lm_eval) and
# transformers, pinned in tests/e2e/lm_eval_requirements.txt, over Debian 12's python3-torch.
#
#   tests/e2e/setup_lm_eval_venv.sh [VENV_DIR]      # default: <repo>/.venv-lm-eval
#
# Debian's /usr/bin/python3 on purpose (not a `python3` from PATH, which may be pyenv's): the venv
# sees its system site-packages, where python3-torch (tools/install_deps.sh) lives. Idempotent;
# needs access to PyPI. Then:
#   bazel test --test_env=BLOSSOM_LM_EVAL_PYTHON=<VENV_DIR>/bin/python //tests/e2e:lm_eval_test
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
venv="${1:-$repo/.venv-lm-eval}"
python=/usr/bin/python3

if ! "$python" -c 'import torch, numpy, venv' >/dev/null 2>&1; then
  echo "setup_lm_eval_venv: $python lacks torch/numpy/venv (apt-get install python3-torch python3-venv)" >&2
  exit 1
fi
if [ ! -x "$venv/bin/python" ]; then
  echo "setup_lm_eval_venv: creating $venv"
  "$python" -m venv --system-site-packages "$venv"
fi
"$venv/bin/python" -m pip --disable-pip-version-check install --quiet \
  -r "$repo/tests/e2e/lm_eval_requirements.txt"
"$venv/bin/python" -I -c 'import lm_eval, torch, transformers, datasets
from transformers import BloomForCausalLM  # noqa: F401  (must import with torch 1.13)
from lm_eval.models.openai_completions import LocalCompletionsAPI  # noqa: F401
print("setup_lm_eval_venv: ok: lm_eval", lm_eval.__version__, "| torch", torch.__version__,
      "| transformers", transformers.__version__, "| datasets", datasets.__version__)'
echo "setup_lm_eval_venv: export BLOSSOM_LM_EVAL_PYTHON=$venv/bin/python"
