"""docker-compose.yml on a real engine: images built here, the stack run, the results checked.

    python -m pytest -m containers          # this file alone (about 5 minutes cold, as root)

tests/containers.py builds a Debian bookworm base with debootstrap, the suite's image on it
(deploy/Dockerfile with BASE) and a Prometheus image of Debian's package, then, in a fresh clone of
this checkout owned by root, runs `podman-compose up --exit-code-from master` of the master, two
workers, the simulator and Prometheus for a 20 s headless run (replies cut to 64 tokens: the
drain is short and the run has enough records), and checks on the host:
- the exit code is the master's, and 0;
- summary.json names 2 workers, each of whose records all arrived;
- the records (requests.parquet rows) equal the simulator's own request count (its /metrics) and
  the master's request counter as Prometheus scraped it, over its HTTP API;
- every metric a panel of the provisioned Grafana dashboard names is one the master or the
  simulator exposed in this run, and every panel query returns data (Grafana itself cannot be
  installed here);
- only Prometheus is published, on 127.0.0.1; the image runs as uid 1000 without .git, .cache,
  results or tests in it, and runs `python -m reports` on the results;
- the results belong to uid 1000 (the clone's results folder, made by root, is handed over).
Then a clone owned by a normal user (uid 1234) runs a short test: its results belong to that user
(./results made by the engine as root, handed to the checkout's owner), and its SLO, missed, is
the exit code of `up` (3).
Then the UI variant serves the LLM view on 127.0.0.1:8089, and a ramp started there shows live.
Then the route for several hosts: deploy/compose.master.yml publishes 5557 on a private address
(192.0.2.10, a documentation address on an interface inside the test's namespace) and a second compose
project of deploy/compose.worker.yml, on a network of its own, joins it with two workers.
Then `podman kube play` of deploy/kubernetes/podman.yaml (the Kubernetes manifests as Pods and a
Deployment) runs the same distributed test, its results taken out of the volume; and the image's
default command, `locust -f locustfile.py --help`, lists the suite's options.
"""

from __future__ import annotations

import json
import os
import re
import time
import urllib.parse

import pyarrow.parquet as pq
import pytest
import yaml

from tests import containers as ct
from tests.helpers import ROOT

REASON = ct.unavailable_reason()
if REASON and os.environ.get("CI"):
    raise RuntimeError(f"tests/test_containers.py must run in CI: {REASON}")  # never a silent skip there
pytestmark = [pytest.mark.containers, pytest.mark.skipif(REASON is not None, reason=REASON or "")]

# A metric a dashboard query names only as an alternative for older vLLM versions
FALLBACK_METRICS = {"vllm:gpu_cache_usage_perc"}
PROMQL_WORDS = {
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "or",
    "and",
    "unless",
    "bool",
    "offset",
    "le",
}


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    workdir = str(tmp_path_factory.mktemp("containers"))
    engine = ct.Engine(workdir)
    t0 = time.monotonic()
    base = ct.base_image(engine)
    images = {"base": base, "prometheus": ct.prometheus_image(engine, base, workdir)}
    clone = ct.fresh_clone(os.path.join(workdir, "clone-root"))
    images["suite"] = f"{ct.TAG}/suite:{ct.tree_key(clone)}"
    t1 = time.monotonic()
    out = ct.compose_build(engine, clone, base, images["suite"])
    # one build for the simulator, the master and the workers (a build each made four, in parallel)
    assert out.count("STEP 1/") == 1, ct.tail(out)
    assert engine.image_exists(images["suite"])
    ct.log(
        f"suite image (podman-compose build): {time.monotonic() - t1:.0f}s; all images ready after {time.monotonic() - t0:.0f}s"
    )
    engine.make_netns()
    try:
        yield engine, images, clone, workdir
    finally:
        engine.remove_netns()


def summary_and_records(clone: str):
    runs = os.listdir(os.path.join(clone, "results"))
    assert len(runs) == 1, runs
    run = os.path.join(clone, "results", runs[0])
    with open(os.path.join(run, "summary.json"), encoding="utf-8") as f:
        summary = json.load(f)
    return run, summary, pq.read_table(os.path.join(run, "requests.parquet"))


def prometheus_query(engine, expr: str, at: float | None = None) -> list:
    params = {"query": expr, **({"time": f"{at:.3f}"} if at else {})}
    body = json.loads(engine.http_get(f"http://127.0.0.1:9090/api/v1/query?{urllib.parse.urlencode(params)}"))
    assert body["status"] == "success", body
    return body["data"]["result"]


def prometheus_names(engine, job: str) -> set:
    q = urllib.parse.urlencode({"match[]": f'{{job="{job}"}}'})
    body = json.loads(engine.http_get(f"http://127.0.0.1:9090/api/v1/label/__name__/values?{q}"))
    return set(body["data"])


def metric_names(expr: str) -> set:
    """The metric names a PromQL expression refers to."""
    expr = re.sub(r"\{[^}]*\}", " ", expr)  # label matchers
    expr = re.sub(r"\[[^\]]*\]", " ", expr)  # range selectors
    expr = re.sub(r"\b(by|without)\s*\([^)]*\)", " ", expr)  # grouping labels
    names = set()
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", expr):
        rest = expr[m.end() :].lstrip()
        if rest.startswith("(") or m.group(0) in PROMQL_WORDS:
            continue  # a function or a keyword
        names.add(m.group(0))
    return names


def dashboard_queries() -> list:
    with open(os.path.join(ROOT, "deploy", "grafana", "dashboards", "llm-loadtest.json"), encoding="utf-8") as f:
        dash = json.load(f)
    out = [(p["title"], t["expr"]) for p in dash["panels"] for t in p.get("targets", [])]
    out += [
        ("variable " + v["name"], re.sub(r"^label_values\(([^,]+),.*$", r"\1", v["query"]))
        for v in dash["templating"]["list"]
    ]
    return out


def test_metric_names_parser():
    assert metric_names(
        'histogram_quantile(0.95, sum by (le, request_class) (rate(llm_ttft_seconds_bucket{request_class=~"$request_class"}[$__rate_interval])))'
    ) == {"llm_ttft_seconds_bucket"}
    assert metric_names("max(vllm:kv_cache_usage_perc) or max(vllm:gpu_cache_usage_perc)") == {
        "vllm:kv_cache_usage_perc",
        "vllm:gpu_cache_usage_perc",
    }
    assert metric_names('sum(rate(a_total[1m])) + sum(rate(b_total{x="y"}[1m]))') == {"a_total", "b_total"}


@pytest.mark.timeout(900)
def test_compose_up_runs_a_distributed_test(stack):
    engine, images, clone, workdir = stack
    # replies of at most 64 tokens: the reference mix's long replies would make the drain after the
    # run last longer than the run itself (~150 records in 20 s instead of ~80 in 30 s)
    env = {
        "WORKERS": "2",
        "LOCUST_RUN_TIME": "20s",
        "LOCUST_USERS": "16",
        "LOCUST_SPAWN_RATE": "16",
        "LOCUST_SEED": "7",
        "LOCUST_MAX_TOKENS_OVERRIDE": "64",
        "SUITE_IMAGE": images["suite"],
        "PROMETHEUS_IMAGE": images["prometheus"],
    }
    # the simulator's truth log: the same command as docker-compose.yml's, plus --truth-log
    truth = os.path.join(workdir, "truth")
    os.mkdir(truth)
    os.chown(truth, 1000, 1000)
    sim = yaml.safe_load(open(os.path.join(clone, "docker-compose.yml"), encoding="utf-8"))["services"]["simulator"]
    override = os.path.join(workdir, "truth.yml")
    with open(override, "w", encoding="utf-8") as f:
        yaml.safe_dump(
            {
                "services": {
                    "simulator": {
                        "command": sim["command"] + ["--truth-log", "/truth/truth.jsonl"],
                        "volumes": [f"{truth}:/truth"],
                    }
                }
            },
            f,
        )
    project = ct.Project(engine, clone, files=("docker-compose.yml", override), env=env)
    try:
        t0 = time.monotonic()
        up = project.compose(
            "up", "--exit-code-from", "master", "master", "worker", "simulator", "prometheus", timeout=400, check=False
        )
        up_s = time.monotonic() - t0
        logs = ct.tail(up.stdout + up.stderr, 6000)
        ct.log(f"compose up: {up_s:.0f}s, exit code {up.returncode}")
        master = project.container("master")
        assert master["Exited"] and up.returncode == master["ExitCode"] == 0, logs
        assert len([c for c in project.containers() if c["Labels"]["com.docker.compose.service"] == "worker"]) == 2

        run, summary, records = summary_and_records(clone)
        rows = records.num_rows
        assert summary["complete"] and rows > 50, (rows, logs)
        workers = summary["workers"]
        assert len(workers) == 2 and sorted(w["index"] for w in workers.values()) == [0, 1], workers
        assert all(w["final_received"] and not w["missing_batches"] and w["records"] > 0 for w in workers.values())
        assert sum(w["records"] for w in workers.values()) == rows
        assert all(records.column("ok").to_pylist()), "every request to the simulator succeeds"
        ct.log(f"records: {rows}; per worker: {sorted(w['records'] for w in workers.values())}")

        # the simulator's own count: its truth log, one line per request it finished
        with open(os.path.join(truth, "truth.jsonl"), encoding="utf-8") as f:
            lines = [json.loads(line) for line in f]
        assert len(lines) == rows and all(line["outcome"] == "ok" for line in lines), (len(lines), rows)
        assert sorted(line["request_id"] for line in lines) == sorted(records.column("request_id").to_pylist())

        # the healthcheck the master's start waits on (with engines that run healthchecks) passes
        sim = project.container("simulator")
        engine.podman("start", sim["Id"], ns=True)
        deadline = time.monotonic() + 30
        while engine.podman("healthcheck", "run", sim["Id"], check=False).returncode != 0:
            assert time.monotonic() < deadline, "the simulator's healthcheck never passed"
            time.sleep(1)

        # Prometheus scraped the master's counters before it exited (--prometheus-linger)
        engine.podman("start", project.container("prometheus")["Id"], ns=True)  # stopped with the master; its data kept
        deadline = time.monotonic() + 30
        while True:
            try:
                engine.http_get("http://127.0.0.1:9090/-/ready")
                break
            except OSError:
                assert time.monotonic() < deadline, "prometheus not ready"
                time.sleep(1)
        (result,) = prometheus_query(engine, "sum(max_over_time(llm_requests_total[15m]))")
        assert float(result["value"][1]) == rows
        (result,) = prometheus_query(engine, "sum(max_over_time(vllm:request_success_total[15m]))")
        assert float(result["value"][1]) == rows
        ct.log(f"simulator truth log: {len(lines)} requests; Prometheus: master and simulator counters {rows}")

        # every metric a dashboard panel names is exposed by the master or the simulator
        exposed = prometheus_names(engine, "llm-loadtest") | prometheus_names(engine, "llm-server")
        assert {"llm_requests_total", "llm_ttft_seconds_bucket", "vllm:num_requests_running"} <= exposed
        end = min(
            float(s["value"][1]) for s in prometheus_query(engine, "timestamp(max_over_time(llm_requests_total[15m]))")
        )
        for title, expr in dashboard_queries():
            names = metric_names(expr)
            assert names and names - FALLBACK_METRICS <= exposed, f"{title}: {sorted(names - exposed)} not exposed"
            assert names & exposed, title
            q = expr.replace("$__rate_interval", "30s").replace("$request_class", ".*")
            # over the stack's whole life (it is this test's own): the workers' gauges end when they
            # quit, and the master's results and report, then its linger, can outlast 40 s on a busy machine
            series = prometheus_query(engine, f"max_over_time(({q})[15m:5s])", at=end)
            assert series, f"{title}: {expr} returned nothing"
        ct.log(f"dashboard: {len(dashboard_queries())} queries, every metric exposed ({len(exposed)} names scraped)")

        # only Prometheus is published, and on 127.0.0.1
        published = {c["Labels"]["com.docker.compose.service"]: c.get("Ports") or [] for c in project.containers()}
        assert {s for s, p in published.items() if p} == {"prometheus"}, published
        assert all(p["host_ip"] == "127.0.0.1" for p in published["prometheus"]), published

        # the results belong to the image's user: root's results folder was handed to uid 1000
        for dirpath, _dirs, files in os.walk(os.path.join(clone, "results")):
            for name in [dirpath, *(os.path.join(dirpath, f) for f in files)]:
                assert os.stat(name).st_uid == 1000, name

        # the same image: its user, what it holds, and the reports CLI on these results
        probe = engine.podman(
            "run",
            "--rm",
            "--entrypoint",
            "sh",
            images["suite"],
            "-c",
            "id -u; python --version; ls -A results | wc -l; ls -A",
        ).stdout.split()
        uid, _, version, in_results, *listing = probe
        assert uid == "1000" and version.startswith("3.11.") and in_results == "0", probe
        assert {
            "locustfile.py",
            "core",
            "metrics",
            "plugin",
            "users",
            "simulator",
            "reports",
            "webui",
            "workloads",
            "deploy",
        } <= set(listing), listing
        assert not {".git", ".cache", ".venv", "venv", "tests", "bench", ".ci", "docs"} & set(listing), listing
        show = engine.podman(
            "run",
            "--rm",
            "-v",
            f"{os.path.join(clone, 'results')}:/home/locust/suite/results:ro",
            images["suite"],
            "python",
            "-m",
            "reports",
            "show",
            f"results/{os.path.basename(run)}",
        ).stdout
        assert str(rows) in show.replace(",", ""), show[-2000:]
    finally:
        project.down()


@pytest.mark.timeout(600)
def test_a_clone_owned_by_a_normal_user(stack):
    engine, images, _, workdir = stack
    clone = ct.fresh_clone(os.path.join(workdir, "clone-user"))
    for dirpath, _dirs, files in os.walk(clone):
        for name in [dirpath, *(os.path.join(dirpath, f) for f in files)]:
            os.chown(name, 1234, 1234)
    assert not os.path.exists(os.path.join(clone, "results"))  # the engine makes it, as root
    # an objective no server meets: the master exits with 3, and so does `up`
    env = {
        "WORKERS": "1",
        "LOCUST_RUN_TIME": "5s",
        "LOCUST_USERS": "4",
        "LOCUST_PROMETHEUS_LINGER": "0s",
        "LOCUST_SLO": "ttft.p50<1ms",
        "LOCUST_MAX_TOKENS_OVERRIDE": "64",
        "SUITE_IMAGE": images["suite"],
        "PROMETHEUS_IMAGE": images["prometheus"],
    }
    project = ct.Project(engine, clone, env=env)
    try:
        up = project.compose(
            "up", "--exit-code-from", "master", "master", "worker", "simulator", timeout=300, check=False
        )
        assert up.returncode == project.container("master")["ExitCode"] == 3, ct.tail(up.stdout + up.stderr)
        _, summary, records = summary_and_records(clone)
        assert len(summary["workers"]) == 1 and records.num_rows > 0 and summary["slo"]["passed"] is False
        for dirpath, _dirs, files in os.walk(os.path.join(clone, "results")):
            for name in [dirpath, *(os.path.join(dirpath, f) for f in files)]:
                st = os.stat(name)
                assert (st.st_uid, st.st_gid) == (1234, 1234), name
    finally:
        project.down()


@pytest.mark.timeout(300)
def test_ui_variant_serves_the_llm_view(stack):
    engine, images, _, workdir = stack
    clone = ct.fresh_clone(os.path.join(workdir, "clone-ui"))
    env = {
        "WORKERS": "1",
        "LOCUST_STOP_TIMEOUT": "5",
        "LOCUST_MAX_TOKENS_OVERRIDE": "64",
        "SUITE_IMAGE": images["suite"],
        "PROMETHEUS_IMAGE": images["prometheus"],
    }
    project = ct.Project(engine, clone, files=("docker-compose.yml", "deploy/compose.ui.yml"), env=env)
    try:
        project.compose("up", "-d", "master", "worker", "simulator", timeout=180)
        deadline = time.monotonic() + 90
        while True:
            try:
                page = engine.http_get("http://127.0.0.1:8089/llm").decode()
                stats = json.loads(engine.http_get("http://127.0.0.1:8089/llm/stats"))
                break
            except OSError as e:
                assert time.monotonic() < deadline, f"no web UI on 127.0.0.1:8089: {e}"
                time.sleep(2)
        assert "<html" in page.lower() and stats["seq"] == 0
        # a ramp started by hand, as from the start form: the LLM view shows its requests live
        base = "http://127.0.0.1:8089"
        started = json.loads(
            engine.http_get(base + "/swarm", form={"user_count": 4, "spawn_rate": 4, "host": "http://simulator:8000"})
        )
        assert started["success"], started
        deadline = time.monotonic() + 90
        while True:
            live = json.loads(engine.http_get(base + "/llm/stats?history=0"))
            if live["seq"] and live["overall"] and live["overall"]["requests"]["ok"] and live["users"] == 4:
                break
            assert time.monotonic() < deadline, f"no live LLM statistics: {live}"
            time.sleep(2)
        assert live["workers"] == 1 and live["overall"]["ttft_ms"]["p50"] > 0
        engine.http_get(base + "/stop", form={}, timeout=60)  # answers after the drain (LOCUST_STOP_TIMEOUT)
        deadline = time.monotonic() + 90
        while not (final := json.loads(engine.http_get(base + "/llm/stats?history=0")))["run"]["report_url"]:
            assert time.monotonic() < deadline, f"the stopped run wrote no report: {final['run']}"
            time.sleep(2)
        run_dirs = os.listdir(os.path.join(clone, "results"))
        assert final["run"]["id"] in run_dirs and os.path.exists(
            os.path.join(clone, "results", final["run"]["id"], "summary.json")
        )
        ct.log(
            f"UI variant: {live['overall']['requests']['ok']} requests in the live view, TTFT p50 "
            f"{live['overall']['ttft_ms']['p50']:.0f} ms; the stopped run's report: {final['run']['report_url']}"
        )
        ports = project.container("master").get("Ports") or []
        assert [(p["host_ip"], p["host_port"], p["container_port"]) for p in ports] == [("127.0.0.1", 8089, 8089)], (
            ports
        )
        cfg = yaml.safe_load(project.compose("config", timeout=60).stdout)
        assert "--headless" not in cfg["services"]["master"]["command"]
    finally:
        project.down()


@pytest.mark.timeout(400)
def test_workers_from_another_compose_project_join_the_master(stack):
    engine, images, _, workdir = stack
    clone = ct.fresh_clone(os.path.join(workdir, "clone-hosts"))
    address = "192.0.2.10"
    engine.add_address(address)
    # the target too must be reachable from the other "host": the simulator published on the address (test only)
    override = os.path.join(workdir, "simulator-published.yml")
    with open(override, "w", encoding="utf-8") as f:
        yaml.safe_dump({"services": {"simulator": {"ports": [f"{address}:8000:8000"]}}}, f)
    common = {"SUITE_IMAGE": images["suite"], "PROMETHEUS_IMAGE": images["prometheus"]}
    master = ct.Project(
        engine,
        clone,
        files=("docker-compose.yml", "deploy/compose.master.yml", override),
        env={
            **common,
            "MASTER_ADDRESS": address,
            "WORKERS": "2",
            "LOCUST_HOST": f"http://{address}:8000",
            "LOCUST_RUN_TIME": "10s",
            "LOCUST_USERS": "4",
            "LOCUST_PROMETHEUS_LINGER": "0s",
            "LOCUST_MAX_TOKENS_OVERRIDE": "64",
        },
    )
    workers = ct.Project(
        engine, clone, files=("deploy/compose.worker.yml",), env={**common, "MASTER_HOST": address, "WORKERS": "2"}
    )
    try:
        master.compose(
            "up", "-d", "master", "simulator", timeout=180
        )  # (podman-compose 1.6.0 fails on naming a service of 0 replicas)
        assert [c for c in master.containers() if c["Labels"]["com.docker.compose.service"] == "worker"] == []
        workers.compose("up", "-d", timeout=180)
        assert len(workers.containers()) == 2
        code = engine.podman("wait", master.container("master")["Id"], timeout=240).stdout.strip()
        assert code == "0", ct.tail(engine.podman("logs", master.container("master")["Id"], check=False).stderr)
        _, summary, records = summary_and_records(clone)
        assert len(summary["workers"]) == 2 and records.num_rows > 0
        assert sum(w["records"] for w in summary["workers"].values()) == records.num_rows
        ports = master.container("master").get("Ports") or []
        assert [(p["host_ip"], p["host_port"]) for p in ports] == [(address, 5557)], ports
        ct.log(f"several hosts: 2 workers of another project, {records.num_rows} records")
    finally:
        workers.down()
        master.down()


@pytest.mark.timeout(900)
def test_kube_play_runs_the_kubernetes_manifests_distributed(stack):
    """deploy/kubernetes/podman.yaml (the kustomization as Pods and a Deployment) played by podman
    on a network of its own inside the test's namespace: the master Pod, two workers of the
    Deployment, the simulator Pod, the results volume. The master exits 0 after a 20 s run, the
    results come out with the documented `podman volume export`, and summary.json names both
    workers, all of whose records arrived."""
    engine, images, clone, workdir = stack
    with open(os.path.join(clone, "deploy", "kubernetes", "podman.yaml"), encoding="utf-8") as f:
        resources = [d for d in yaml.safe_load_all(f) if d]
    settings = {
        "LOCUST_RUN_TIME": "20s",
        "LOCUST_USERS": "16",
        "LOCUST_SPAWN_RATE": "16",
        "LOCUST_SEED": "7",
        "LOCUST_MAX_TOKENS_OVERRIDE": "64",
        "LOCUST_PROMETHEUS_LINGER": "1s",
    }
    for r in resources:
        spec = r["spec"]["template"]["spec"] if r["kind"] == "Deployment" else r["spec"]
        for c in spec.get("containers", []):
            assert c["image"] == "llm-loadtest:latest" and "ports" not in c, c  # nothing published on the host
            c["image"] = images["suite"]
            if c["name"] == "master":  # the run's settings, as a person edits master.yaml's LOCUST_* values
                c["env"] = [e for e in c["env"] if e["name"] not in settings] + [
                    {"name": k, "value": v} for k, v in settings.items()
                ]
    play = os.path.join(workdir, "podman-play.yaml")
    with open(play, "w", encoding="utf-8") as f:
        yaml.safe_dump_all(resources, f)
    network = f"llmkp{os.urandom(3).hex()}"
    results = os.path.join(workdir, "kube-results")
    try:
        engine.podman("network", "create", network, ns=True)
        t0 = time.monotonic()
        engine.podman("kube", "play", "--network", network, play, ns=True, timeout=180)
        status = engine.podman("wait", "llm-loadtest-master-master", timeout=400).stdout.strip()
        logs = ct.tail(engine.podman("logs", "llm-loadtest-master-master", check=False).stderr, 6000)
        ct.log(f"kube play: the master exited {status} after {time.monotonic() - t0:.0f}s")
        assert status == "0", logs
        workers = [
            c
            for c in json.loads(engine.podman("ps", "-a", "--format", "json").stdout)
            if any(n.startswith("llm-loadtest-worker-pod-") and n.endswith("-worker") for n in c["Names"])
        ]
        assert len(workers) == 2, workers
        os.mkdir(results)
        # docs/containers.md "Kubernetes with podman": the results volume to a local folder
        engine.run(["sh", "-c", f"podman volume export llm-loadtest-results | tar -C {results} -xf -"], 120)
        (run_id,) = os.listdir(results)
        with open(os.path.join(results, run_id, "summary.json"), encoding="utf-8") as f:
            summary = json.load(f)
        records = pq.read_table(os.path.join(results, run_id, "requests.parquet"))
        rows = records.num_rows
        assert summary["complete"] and rows > 50, (rows, logs)
        joined = summary["workers"]
        assert len(joined) == 2 and all(
            w["final_received"] and not w["missing_batches"] and w["records"] > 0 for w in joined.values()
        ), joined
        assert sum(w["records"] for w in joined.values()) == rows == summary["records"]["total"]
        assert all(records.column("ok").to_pylist()), summary["records"]["by_error"]
        ct.log(f"kube play: {rows} records from workers {sorted(w['records'] for w in joined.values())}")
    finally:
        engine.podman("kube", "down", play, ns=True, check=False, timeout=120)
        engine.podman("volume", "rm", "-f", "llm-loadtest-results", check=False)
        engine.podman("network", "rm", "-f", network, check=False)


def test_the_images_default_command_lists_the_suites_options(stack):
    """The image's command, `locust -f locustfile.py --help`, lists the suite's options with their
    variables: the image installs the project (requirements.txt's `.`), whose start-up hook adds them."""
    engine, images, clone, workdir = stack
    out = engine.podman("run", "--rm", "--network", "none", images["suite"], timeout=120).stdout
    text = " ".join(out.split())
    assert "--spawn-rate" in text and "Target and model:" in text, out[-2000:]
    for flag, env in (
        ("--slo", "LOCUST_SLO"),
        ("--find-capacity", "LOCUST_FIND_CAPACITY"),
        ("--model", "LOCUST_MODEL"),
    ):
        assert f" {flag} " in text and f"env {env}]" in text, flag
