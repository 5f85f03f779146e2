#!/usr/bin/env bash
# The whole test suite: installs what is missing, runs every test (CUDA code is compiled when
# /usr/local/cuda exists; GPU tests report SKIPPED without a GPU), checks the CPU-only build,
# fuzzes every libFuzzer target for a minute, and prints "N passed, N failed, N skipped" last.
set -uo pipefail
cd "$(dirname "$0")/.."
tools/install_deps.sh || { echo "0 passed, 1 failed"; exit 1; }
CONFIG=()
[ "${CI:-}" = "true" ] && CONFIG+=(--config=ci)
# The end-to-end tests drive the servers with real Python clients (openai, text-generation,
# blossom-client) from a venv; if PyPI cannot be reached they report SKIPPED with the reason.
VENV="$PWD/.venv-e2e"
if clients/python/setup_venv.sh "$VENV" >/tmp/blossom-setup-venv.log 2>&1; then
  export BLOSSOM_E2E_PYTHON="$VENV/bin/python"
else
  echo "warning: clients/python/setup_venv.sh failed (see /tmp/blossom-setup-venv.log);" \
       "the Python end-to-end tests will report SKIPPED" >&2
fi
# The Kubernetes manifest check validates with kubernetes-validate (PyPI) from its own venv; it
# reports SKIPPED with the reason if PyPI cannot be reached.
DEPLOY_VENV="$PWD/.venv-deploy"
if deploy/setup_venv.sh "$DEPLOY_VENV" >/tmp/blossom-setup-deploy-venv.log 2>&1; then
  export BLOSSOM_DEPLOY_PYTHON="$DEPLOY_VENV/bin/python"
else
  echo "warning: deploy/setup_venv.sh failed (see /tmp/blossom-setup-deploy-venv.log);" \
       "//deploy:k8s_manifests_test will report SKIPPED" >&2
fi
# lm-evaluation-harness scores a task through the gateway (//tests/e2e:lm_eval_test) from its own
# venv over Debian's python3-torch; it reports SKIPPED with the reason if PyPI cannot be reached.
LM_EVAL_VENV="$PWD/.venv-lm-eval"
if tests/e2e/setup_lm_eval_venv.sh "$LM_EVAL_VENV" >/tmp/blossom-setup-lm-eval-venv.log 2>&1; then
  export BLOSSOM_LM_EVAL_PYTHON="$LM_EVAL_VENV/bin/python"
else
  echo "warning: tests/e2e/setup_lm_eval_venv.sh failed (see /tmp/blossom-setup-lm-eval-venv.log);" \
       "//tests/e2e:lm_eval_test will report SKIPPED" >&2
fi
rm -rf bazel-testlogs/ .fuzz-results/ 2>/dev/null || true
bazel test "${CONFIG[@]}" //...; rc=$?
# A build without CUDA must work too (the CPU-only server).
if [ -d /usr/local/cuda ]; then
  bazel build "${CONFIG[@]}" --config=nocuda //... || rc=1
fi
# Fuzzing: every libFuzzer target for BLOSSOM_FUZZ_SECONDS (default 60) from its corpus, built
# with clang-14 in its own output base (tools/fuzz/run.sh); counted in the summary below.
bazel shutdown >/dev/null 2>&1  # the fuzz build runs its own Bazel server: free this one's memory
tools/fuzz/run.sh "${BLOSSOM_FUZZ_SECONDS:-60}" || rc=1
python3 tools/test_summary.py || rc=1
exit $rc
