"""Writes deploy/grafana/dashboards/llm-loadtest.json, the provisioned Grafana dashboard.

    python deploy/grafana/build_dashboard.py

The JSON is generated so that the queries stay in one readable place; edit here, re-run, commit
both. Client panels read the suite's metrics (plugin/prometheus.py); server panels read vLLM's
names (the simulator exposes the same), and stay empty for servers that do not expose them.
"""

from __future__ import annotations

import json
import os

DS = {"type": "prometheus", "uid": "llm-prometheus"}  # deploy/grafana/provisioning/datasources
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dashboards", "llm-loadtest.json")
CLASS = 'request_class=~"$request_class"'
RATE = "$__rate_interval"


def quantiles(metric: str, qs=(0.5, 0.95, 0.99), by: str = "request_class", selector: str = CLASS) -> list:
    sel = "{" + selector + "}" if selector else ""
    legend = "{{" + by + "}} " if by else ""
    group = f"le, {by}" if by else "le"
    return [
        (f"histogram_quantile({q}, sum by ({group}) (rate({metric}_bucket{sel}[{RATE}])))", f"{legend}p{q * 100:g}")
        for q in qs
    ]


class Builder:
    def __init__(self):
        self.panels: list[dict] = []
        self.y = 0
        self.x = 0
        self.next_id = 1

    def _id(self) -> int:
        self.next_id += 1
        return self.next_id - 1

    def row(self, title: str) -> None:
        if self.x:
            self.x, self.y = 0, self.y + 8
        self.panels.append(
            {
                "type": "row",
                "title": title,
                "collapsed": False,
                "id": self._id(),
                "panels": [],
                "gridPos": {"h": 1, "w": 24, "x": 0, "y": self.y},
            }
        )
        self.y += 1

    def timeseries(self, title: str, targets: list, unit: str, description: str = "", w: int = 12) -> None:
        if self.x + w > 24:
            self.x, self.y = 0, self.y + 8
        self.panels.append(
            {
                "type": "timeseries",
                "title": title,
                "description": description,
                "id": self._id(),
                "datasource": DS,
                "gridPos": {"h": 8, "w": w, "x": self.x, "y": self.y},
                "fieldConfig": {
                    "defaults": {"unit": unit, "custom": {"lineWidth": 1, "fillOpacity": 0, "spanNulls": True}},
                    "overrides": [],
                },
                "options": {
                    "legend": {"displayMode": "table", "placement": "bottom", "calcs": ["lastNotNull", "max"]},
                    "tooltip": {"mode": "multi", "sort": "desc"},
                },
                "targets": [
                    {"refId": chr(ord("A") + i), "datasource": DS, "expr": expr, "legendFormat": legend, "range": True}
                    for i, (expr, legend) in enumerate(targets)
                ],
            }
        )
        self.x += w


def dashboard() -> dict:
    b = Builder()
    b.row("Client latency (suite records, per request class)")
    b.timeseries(
        "TTFT", quantiles("llm_ttft_seconds"), "s", "Time to first token of successful requests (llm_ttft_seconds)."
    )
    b.timeseries(
        "TPOT",
        quantiles("llm_tpot_seconds", (0.5, 0.95)),
        "s",
        "Time per output token after the first (llm_tpot_seconds).",
    )
    b.timeseries(
        "ITL",
        quantiles("llm_itl_seconds", (0.5, 0.95, 0.99)),
        "s",
        "Gaps between token-bearing chunks, pooled (llm_itl_seconds).",
    )
    b.timeseries(
        "E2E latency",
        quantiles("llm_e2e_seconds", (0.5, 0.95)),
        "s",
        "End-to-end latency of successful requests (llm_e2e_seconds).",
    )
    b.row("Client load and throughput")
    b.timeseries(
        "Requests/s by outcome",
        [(f"sum by (outcome) (rate(llm_requests_total{{{CLASS}}}[{RATE}]))", "{{outcome}}")],
        "reqps",
        "Completed requests per second: ok, or the failure class (http_429, timeout, ...).",
    )
    b.timeseries(
        "Tokens/s",
        [
            (f"sum(rate(llm_output_tokens_total{{{CLASS}}}[{RATE}]))", "output"),
            (f"sum(rate(llm_prompt_tokens_total{{{CLASS}}}[{RATE}]))", "prompt"),
            (
                f"sum(rate(llm_output_tokens_total{{{CLASS}}}[{RATE}])) + sum(rate(llm_prompt_tokens_total{{{CLASS}}}[{RATE}]))",
                "total",
            ),
        ],
        "short",
        "Tokens per second of successful requests, counted when the request completes.",
    )
    b.timeseries(
        "Users, in flight, target rate",
        [
            ("llm_users", "users"),
            ("llm_in_flight_requests", "in flight"),
            ("llm_target_rate", "target rate (req/s, open loop)"),
        ],
        "short",
        "In flight is estimated as the number of users in a closed loop.",
    )
    b.timeseries(
        "Load generator CPU",
        [("llm_worker_cpu_percent", "worker {{worker}}"), ("llm_master_cpu_percent", "master")],
        "percent",
        "Percent of one core per process. Timing degrades well before 90 %: add workers.",
    )
    b.row("Server (vLLM metrics; empty when the target exposes none)")
    b.timeseries(
        "Requests running / waiting",
        [("sum(vllm:num_requests_running)", "running"), ("sum(vllm:num_requests_waiting)", "waiting")],
        "short",
    )
    b.timeseries(
        "KV cache usage",
        [("max(vllm:kv_cache_usage_perc) or max(vllm:gpu_cache_usage_perc)", "KV cache used")],
        "percentunit",
        "vllm:kv_cache_usage_perc (gpu_cache_usage_perc before vLLM's V1 engine).",
    )
    b.timeseries(
        "Server TTFT",
        quantiles("vllm:time_to_first_token_seconds", (0.5, 0.95, 0.99), by="", selector=""),
        "s",
        "vLLM's own TTFT: from its arrival, without the network and client.",
    )
    b.timeseries(
        "Generation tokens/s: server vs client",
        [
            (f"sum(rate(vllm:generation_tokens_total[{RATE}]))", "server"),
            (f"sum(rate(llm_output_tokens_total[{RATE}]))", "client"),
        ],
        "short",
        "The two agree when every request succeeds; the server also counts tokens of failed or cut requests.",
    )
    return {
        "uid": "llm-loadtest",
        "title": "LLM load test",
        "tags": ["llm", "locust", "vllm"],
        "timezone": "browser",
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "graphTooltip": 1,
        "refresh": "5s",
        "time": {"from": "now-15m", "to": "now"},
        "templating": {
            "list": [
                {
                    "name": "request_class",
                    "label": "Request class",
                    "type": "query",
                    "datasource": DS,
                    "query": "label_values(llm_requests_total, request_class)",
                    "definition": "label_values(llm_requests_total, request_class)",
                    "refresh": 2,
                    "multi": True,
                    "includeAll": True,
                    "allValue": ".*",
                    "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
                    "sort": 1,
                }
            ]
        },
        "annotations": {"list": []},
        "panels": b.panels,
    }


def main() -> None:
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(dashboard(), f, indent=2)
        f.write("\n")
    print(OUT)


if __name__ == "__main__":
    main()
