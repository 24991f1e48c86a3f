"""LLM load test: Locust entry point.

    locust -f locustfile.py --headless -u 30 -r 10 -t 60s                 # against the built-in simulator
    locust -f locustfile.py --headless -u 50 -r 10 -t 5m --host http://gpu-box:8000 --model my-model

Everything lives in the packages next to this file (README "Layout"); this file names the user
class Locust runs, the shape of stepped runs, and the plugins of every run, in the order their
hooks are called. The endpoint is an option (--endpoint chat | completions). To mix both in one
run, write a locustfile like this one that imports ChatCompletionsUser and CompletionsUser from
plugin.users with the weights you want.
"""

from plugin.backend_flags import BackendFlags
from plugin.console import Console
from plugin.failfast import FailFast
from plugin.gpu import GpuTelemetry
from plugin.health import Health
from plugin.hooks import install
from plugin.prometheus import Prometheus
from plugin.replay import ReplayEnd
from plugin.request_budget import RequestBudgetEnd
from plugin.server_metrics import ServerMetrics
from plugin.setup import RunSetup
from plugin.shape import LLMShape  # noqa: F401  step ramps and capacity search (Locust runs it only for those)
from plugin.users import ConfiguredUser  # noqa: F401
from reports.plugin import JUnit, Reports, VllmJson
from webui.plugin import WebUI

install(
    RunSetup(),  # summary.json setup: the load and the target every report states first
    Health(),  # client self-health: CPU, loop lag, token lag; client_bound in summary.json
    Prometheus(),  # /metrics for Prometheus (--prometheus-port)
    ServerMetrics(),  # --server-metrics scraping into server_metrics.parquet
    GpuTelemetry(),  # --gpu-telemetry readings per level, energy and cost per token: summary.json gpu
    ReplayEnd(),  # --replay: the run ends once every process sent its share
    RequestBudgetEnd(),  # --num-requests: the run ends once every process sent its share
    Reports(),  # report.html and report.md at the end of every run
    JUnit(),  # --junit: the run's checks as JUnit XML
    VllmJson(),  # --save-vllm-json: the run in vLLM's result JSON fields
    WebUI(),  # the LLM view in the web UI (/llm, LLM tab) and the start form's check
    FailFast(),  # a headless run whose requests all fail from the start stops with one line
    Console(),  # a progress line every 10 s; Locust's own rounded tables left out
    BackendFlags(),  # several backends: a backend flagged while the run goes on, one console line once
)
