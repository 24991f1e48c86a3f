"""LLM load test: Locust entry point.

    locust -f locustfile.py --headless -u 30 -r 10 -t 60s                 # against the built-in simulator
    locust -f locustfile.py --headless -u 50 -r 10 -t 5m --host http://gpu-box:8000 --model my-model

Everything lives in the packages next to this file (README "Layout"); this file only names the
user class Locust runs and loads the event wiring. The endpoint is an option (--endpoint chat |
completions). To mix both in one run, write a locustfile that imports ChatCompletionsUser and
CompletionsUser from users.llm with the weights you want.
"""

import plugin.hooks  # noqa: F401  options, results, distributed shipping, built-in simulator
import plugin.prometheus, plugin.server_metrics  # noqa: F401,E401  /metrics for Prometheus; --server-metrics scraping
from plugin.shape import LLMShape  # noqa: F401  step ramps and capacity search (inactive otherwise)
import plugin.replay  # noqa: F401  --replay: ends the run once every process sent its share
import reports.plugin  # noqa: F401  report.html and report.md at the end of every run
import plugin.health  # noqa: F401  client self-health: CPU, loop lag, token lag; client_bound in summary.json
import webui.plugin  # noqa: F401  the LLM view in the web UI (/llm, LLM tab)
from users.llm import ConfiguredUser  # noqa: F401
