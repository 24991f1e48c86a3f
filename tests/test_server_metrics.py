"""Server metrics in the results (plugin/server_metrics.py): parsing, aliases, deltas, and a run
with --server-metrics against the simulator whose counters must match the client's records."""

from __future__ import annotations

import json

import pandas as pd
import pyarrow.parquet as pq
import pytest

from core.urls import public_url
from plugin.server_metrics import (
    FILE_NAME,
    ServerMetricsScraper,
    arrow_schema,
    canonical,
    increase,
    parse_text,
)
from tests.test_prometheus import _rec, free_port, locust, simulator, tail, wait_exit  # noqa: F401 (fixture)

VLLM_OLD = """\
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="m"} 0.25
# TYPE vllm:gpu_prefix_cache_queries counter
vllm:gpu_prefix_cache_queries_total{model_name="m"} 100.0
# TYPE vllm:generation_tokens counter
vllm:generation_tokens_total{model_name="m",engine="0"} 40.0
vllm:generation_tokens_total{model_name="m",engine="1"} 2.0
# TYPE vllm:time_per_output_token_seconds histogram
vllm:time_per_output_token_seconds_bucket{le="0.01",model_name="m"} 3.0
vllm:time_per_output_token_seconds_bucket{le="+Inf",model_name="m"} 4.0
vllm:time_per_output_token_seconds_count{model_name="m"} 4.0
vllm:time_per_output_token_seconds_sum{model_name="m"} 0.05
# TYPE vllm:inter_token_latency_seconds histogram
vllm:inter_token_latency_seconds_bucket{le="0.01",model_name="m"} 3.0
vllm:inter_token_latency_seconds_bucket{le="+Inf",model_name="m"} 4.0
vllm:inter_token_latency_seconds_count{model_name="m"} 4.0
vllm:inter_token_latency_seconds_sum{model_name="m"} 0.05
# TYPE node_load1 gauge
node_load1 0.5
"""


def test_canonical_names():
    assert canonical("vllm:gpu_cache_usage_perc") == "vllm:kv_cache_usage_perc"
    assert canonical("vllm:gpu_prefix_cache_hits_total") == "vllm:prefix_cache_hits_total"
    assert canonical("vllm:gpu_prefix_cache_queries_created") == "vllm:prefix_cache_queries_created"
    assert canonical("vllm:time_per_output_token_seconds_bucket") == "vllm:inter_token_latency_seconds_bucket"
    assert (
        canonical("vllm:request_time_per_output_token_seconds_sum") == "vllm:request_time_per_output_token_seconds_sum"
    )
    assert canonical("vllm:kv_cache_usage_perc") == "vllm:kv_cache_usage_perc"
    assert canonical("DCGM_FI_DEV_GPU_UTIL") == "DCGM_FI_DEV_GPU_UTIL"


def test_parse_text_aliases_labels_and_totals():
    rows, totals = parse_text(VLLM_OLD, 123.0, "http://h/metrics")
    df = pd.DataFrame(rows, columns=arrow_schema().names)
    kv = df[df["metric"] == "vllm:kv_cache_usage_perc"].iloc[0]
    assert kv["raw_metric"] == "vllm:gpu_cache_usage_perc" and kv["value"] == 0.25 and kv["timestamp"] == 123.0
    assert json.loads(kv["labels"]) == {"model_name": "m"}
    assert "vllm:prefix_cache_queries_total" in set(df["metric"])
    # old and new name in the same scrape (vLLM's deprecation period): only the new one is kept
    itl = df[df["metric"].str.startswith("vllm:inter_token_latency_seconds")]
    assert len(itl) == 4 and set(itl["raw_metric"]) == {
        "vllm:inter_token_latency_seconds_bucket",
        "vllm:inter_token_latency_seconds_count",
        "vllm:inter_token_latency_seconds_sum",
    }
    labels = df[df["raw_metric"] == "vllm:generation_tokens_total"]["labels"].tolist()
    assert labels[0] == '{"engine":"0","model_name":"m"}'  # sorted keys
    assert totals == {"vllm:generation_tokens_total": 42.0}
    assert df[df["metric"] == "node_load1"]["labels"].tolist() == ["{}"]


def test_increase_is_reset_aware():
    assert increase([10, 15, 20]) == 10
    assert increase([10, 15, 3, 8]) == 5 + 3 + 5  # restarted server: counts from 0 again
    assert increase([7]) == 0


def test_options():
    from argparse import Namespace

    from core.errors import InputError
    from plugin.plan import RunPlan

    def plan(urls="", interval="5s"):
        return RunPlan.from_options(Namespace(server_metrics=urls, server_metrics_interval=interval))

    assert plan(" http://a:1/metrics, http://b:2/metrics ,http://a:1/metrics").server_metrics == (
        "http://a:1/metrics",
        "http://b:2/metrics",
    )
    assert plan("").server_metrics == ()
    with pytest.raises(InputError, match="--server-metrics"):
        plan("localhost:8000/metrics")
    with pytest.raises(InputError, match="'htp://h:9/metrics' needs") as e:  # a typo: the password is not shown
        plan("htp://u:secret@h:9/metrics")
    assert "secret" not in str(e.value)
    assert plan(interval="5s").server_metrics_interval_s == 5.0 and plan(interval="").server_metrics_interval_s == 5.0
    assert plan(interval="250ms").server_metrics_interval_s == 0.25
    with pytest.raises(InputError, match="--server-metrics-interval"):
        plan(interval="10ms")
    assert public_url("http://user:pw@host:9/metrics") == "http://host:9/metrics"


def test_failed_scrapes_are_counted_not_fatal(tmp_path):
    dead = f"http://127.0.0.1:{free_port()}/metrics"  # a port nobody listens on
    scraper = ServerMetricsScraper([dead], 0.1, str(tmp_path))
    scraper.start()
    scraper.add_rows([_rec(output=7), _rec(ok=False, error="timeout")])
    section = scraper.stop()
    assert section["scrapes"] == 0 and section["failed_scrapes"] >= 2
    assert section["by_source"][dead]["last_error"]
    assert section["counter_deltas"] == dict.fromkeys(section["counter_deltas"], None)
    assert section["client_counts"] == {"requests": 2, "requests_ok": 1, "prompt_tokens": 10, "output_tokens": 7}
    table = pq.read_table(tmp_path / FILE_NAME)
    assert table.schema.names == arrow_schema().names and table.num_rows == 0


@pytest.mark.process
def test_run_with_server_metrics_matches_the_records(tmp_path, simulator):  # noqa: F811 (the fixture)
    results = tmp_path / "results"
    log = str(tmp_path / "locust.log")
    dead = f"http://127.0.0.1:{free_port()}/metrics"
    proc = locust(
        "--headless",
        "-u",
        "8",
        "-r",
        "8",
        "-t",
        "5s",
        "--host",
        simulator.url,
        "--max-tokens-override",
        "24",
        "--results-dir",
        str(results),
        "--run-id",
        "sm",
        "--server-metrics",
        f"{simulator.url}/metrics,{dead}",
        "--server-metrics-interval",
        "1s",
        log_path=log,
    )
    assert wait_exit(proc, 50, log) == 0, tail(log)
    run = results / "sm"
    summary = json.loads((run / "summary.json").read_text())
    records = pd.read_parquet(run / "requests.parquet", columns=["ok", "output_tokens", "prompt_tokens"])
    output_tokens = int(records.loc[records["ok"], "output_tokens"].sum())
    assert output_tokens > 0  # every record (summary.json's tokens are those of the window only)

    df = pd.read_parquet(run / FILE_NAME)
    assert list(df.columns) == arrow_schema().names
    sim_url = f"{simulator.url}/metrics"
    assert set(df["source"]) == {sim_url}
    gen = df[df["metric"] == "vllm:generation_tokens_total"].groupby("timestamp")["value"].sum().sort_index()
    assert len(gen) >= 4  # baseline, about one a second, and the final scrape
    assert gen.iloc[0] == 0  # the baseline was taken before the first request
    assert gen.iloc[-1] - gen.iloc[0] == output_tokens
    assert {"vllm:num_requests_running", "vllm:kv_cache_usage_perc", "vllm:time_to_first_token_seconds_bucket"} <= set(
        df["metric"]
    )
    assert all(x == json.dumps(json.loads(x), sort_keys=True, separators=(",", ":")) for x in df["labels"].unique())

    sm = summary["server_metrics"]
    assert sm["sources"] == [sim_url, dead]
    assert sm["failed_scrapes"] >= len(gen) - 1 and sm["by_source"][dead]["scrapes"] == 0
    assert sm["scrapes"] == len(gen) == sm["by_source"][sim_url]["scrapes"]
    assert sm["counter_deltas"]["vllm:generation_tokens_total"] == output_tokens == sm["client_counts"]["output_tokens"]
    assert (
        sm["counter_deltas"]["vllm:request_success_total"]
        == int(records["ok"].sum())
        == sm["client_counts"]["requests_ok"]
    )
    assert sm["counter_deltas"]["vllm:prompt_tokens_total"] == sm["client_counts"]["prompt_tokens"]
    assert tail(log, 200).count(f"scraping {dead} failed") == 1  # logged once per URL
