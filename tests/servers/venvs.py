"""`python -m tests.servers.venvs [servers] [model] [vllm] [converter]`: builds the real servers'
venvs and the tiny model (bench/servers/venvs.py, where they are made), the command .ci/run and
tests/servers/run_vllm_tests.sh run."""

from __future__ import annotations

import sys

from bench.servers.venvs import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
