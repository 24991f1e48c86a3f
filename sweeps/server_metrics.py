"""A point's own server scraped during its run: `--server-metrics auto` among the load arguments.

A sweep or an A/B picks each point's port itself (a simulator, or a command template's `{port}`),
so the load arguments cannot name the server's /metrics. `auto` in the value of `--server-metrics`
(alone, or among other URLs: `auto,http://gpu-box:9400/metrics`) stands for the point's own
server, `<its base URL>/metrics`, filled in per run: KV-cache use, preemptions and the queue
(`server_metrics.parquet`) and the knee's diagnosis (summary.json) are then in each point's results
folder, as in a run started by hand with `--server-metrics`.
"""

from __future__ import annotations

AUTO = "auto"
OPTION = "--server-metrics"


def fill_server_metrics(args: list[str], url: str) -> list[str]:
    """`args` with every `auto` in the value of --server-metrics replaced by `url`/metrics."""
    own = url.rstrip("/") + "/metrics"

    def fill(value: str) -> str:
        return ",".join(own if v.strip() == AUTO else v for v in value.split(","))

    out, i = [], 0
    while i < len(args):
        a = args[i]
        if a == OPTION and i + 1 < len(args):
            out += [a, fill(args[i + 1])]
            i += 2
            continue
        if a.startswith(OPTION + "="):
            a = f"{OPTION}={fill(a.split('=', 1)[1])}"
        out.append(a)
        i += 1
    return out
