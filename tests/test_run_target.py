"""Every run says what it ran against (summary.json setup.target, run.json target, the console's
header, report.html/report.md's, the live view's rows): the built-in simulator's profile and the
SHA-256 of the profile as loaded, the server's model, version and stated configuration (vLLM's
`vllm:cache_config_info` labels). `python -m reports compare` refuses two runs on different profiles
in one line naming them, and with --allow-different names them and compares."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from plugin.setup import config_from_metrics
from simulator.profiles import PROFILE_DIR
from tests.helpers import ROOT, run_locust

VLLM_METRICS = """\
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="auto",enable_prefix_caching="True",gpu_memory_utilization="0.9",num_cpu_blocks="None",num_gpu_blocks="27136",engine="0"} 1.0
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m",engine="0"} 0.0
"""


def reports_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "reports", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def test_config_is_read_from_every_config_info_gauge():
    """vLLM's cache settings come from its labels (the engine index is not configuration); a page
    with no *_config_info gauge, or not Prometheus text, states none."""
    config, sources = config_from_metrics(VLLM_METRICS)
    assert sources == ["vllm:cache_config_info"]
    assert (
        config["block_size"] == "16"
        and config["gpu_memory_utilization"] == "0.9"
        and config["num_gpu_blocks"] == "27136"
    )
    assert "engine" not in config
    assert config_from_metrics(VLLM_METRICS.split("# HELP vllm:num")[0].replace("cache_config_info", "cache_info")) == (
        {},
        [],
    )
    assert config_from_metrics("not prometheus {{{") == ({}, [])


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The same load (2 users, 3 s, seed 1) on two profiles of the built-in simulator."""
    base = tmp_path_factory.mktemp("target")
    out = {}
    for profile in ("v100-7b-tp8", "fixed"):
        proc = run_locust(
            "-u",
            "2",
            "-r",
            "2",
            "-t",
            "3s",
            "--seed",
            "1",
            "--sim-profile",
            profile,
            "--label",
            f"on {profile}",
            "--results-dir",
            str(base),
            "--run-id",
            profile,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        out[profile] = (str(base / profile), proc.stdout + proc.stderr)
    return out


def _profile_hash_by_hand(name: str) -> str:
    """The hash of a profile as the simulator loads it, from its file and the loader's defaults."""
    import hashlib

    import orjson

    from simulator.profiles import profile_from_dict

    data = yaml.safe_load(open(os.path.join(PROFILE_DIR, name + ".yaml")))
    dumped = profile_from_dict(data, name).model_dump(mode="json", exclude={"name", "description"})
    return hashlib.sha256(orjson.dumps(dumped, option=orjson.OPT_SORT_KEYS)).hexdigest()


@pytest.mark.process
def test_every_surface_names_the_profile_and_the_configuration(runs):
    """run.json and summary.json carry the target; the v100 profile states its KV cache as vLLM does
    (the simulator's /metrics), the fixed profile states none; the console, report.md and
    report.html name it, and the report's title carries the label."""
    folder, console = runs["v100-7b-tp8"]
    info = json.load(open(os.path.join(folder, "run.json")))
    setup = json.load(open(os.path.join(folder, "summary.json")))["setup"]
    assert info["target"] == setup["target"]
    target = info["target"]
    assert target["simulator_profile"] == "v100-7b-tp8"
    assert target["simulator_profile_hash"] == _profile_hash_by_hand("v100-7b-tp8")
    assert target["config"]["block_size"] == "16" and int(target["config"]["num_gpu_blocks"]) > 0
    assert "vllm:cache_config_info" in target["config_source"]
    assert info["plan"]["label"] == setup["label"] == "on v100-7b-tp8"
    assert (
        f"against: {setup['server']} serving simulator profile v100-7b-tp8 (hash {target['simulator_profile_hash'][:12]})"
        in console
    )
    assert "run: on v100-7b-tp8" in console
    md = open(os.path.join(folder, "report.md")).read()
    assert (
        f"**against** simulator profile v100-7b-tp8 (hash {target['simulator_profile_hash'][:12]}); block_size 16" in md
    )
    html = open(os.path.join(folder, "report.html")).read()
    assert "<title>LLM load test report: v100-7b-tp8 (on v100-7b-tp8)</title>" in html
    fixed = json.load(open(os.path.join(runs["fixed"][0], "run.json")))["target"]
    assert fixed["simulator_profile"] == "fixed" and fixed["config"] == {}
    assert fixed["simulator_profile_hash"] == _profile_hash_by_hand("fixed")


@pytest.mark.process
def test_compare_refuses_two_profiles_and_names_them_when_allowed(runs, tmp_path):
    (a, _), (b, _) = runs["v100-7b-tp8"], runs["fixed"]
    proc = reports_cli("compare", a, b, "--out", str(tmp_path / "refused"))
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout + proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert (
        "simulator profile: v100-7b-tp8 (hash" in line
        and "(base) vs fixed (hash" in line
        and "--allow-different" in line
    )
    assert "load:" not in line and "workload:" not in line  # the same load and workload: only the profiles differ
    proc = reports_cli("compare", a, b, "--allow-different", "--resamples", "200", "--out", str(tmp_path / "allowed"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("DIFFERENT simulator profile: v100-7b-tp8 (hash"), proc.stdout[:300]
    assert 'base v100-7b-tp8 "on v100-7b-tp8"' in proc.stdout and 'new  fixed "on fixed"' in proc.stdout
    result = json.load(open(tmp_path / "allowed" / "compare.json"))
    assert [d.split(":")[0] for d in result["differences"]] == ["simulator profile"]
    assert result["base"]["label"] == "on v100-7b-tp8"


@pytest.mark.process
def test_compare_names_each_configuration_label_that_differs(runs, tmp_path):
    """The same profile, a server stating another KV cache (a copy of the run whose run.json says
    so, as a vLLM restarted with another --gpu-memory-utilization would): refused, the labels named."""
    import shutil

    a = runs["v100-7b-tp8"][0]
    other = str(tmp_path / "other")
    shutil.copytree(a, other)
    info = json.load(open(os.path.join(other, "run.json")))
    blocks = info["target"]["config"]["num_gpu_blocks"]
    info["target"]["config"].update(num_gpu_blocks="1000", gpu_memory_utilization="0.5")
    json.dump(info, open(os.path.join(other, "run.json"), "w"))
    proc = reports_cli("compare", a, other, "--out", str(tmp_path / "c"))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert (
        f"server configuration: gpu_memory_utilization 0.9 (base) vs 0.5 (new), num_gpu_blocks {blocks} (base) vs 1000 (new)"
        in line
    ), line
    assert "simulator profile" not in line
