#!/usr/bin/env bash
# Bazel sh_test //tests/e2e:lm_eval_test: lm_eval_test.py needs, besides the e2e venv that
# run_e2e.sh checks, the lm_eval venv in $BLOSSOM_LM_EVAL_PYTHON (tests/e2e/setup_lm_eval_venv.sh;
# tools/test.sh sets it). Without it the target reports one SKIPPED case with the reason.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/skip.sh"

require_python BLOSSOM_LM_EVAL_PYTHON "lm_eval, torch, transformers" tests/e2e/setup_lm_eval_venv.sh
exec "$here/run_e2e.sh" lm_eval_test.py
