"""docker-compose.yml and its variants parse, every Locust flag and LOCUST_* variable they pass is one
the suite knows, and their defaults are safe: a bounded wait for workers, nothing published beyond
127.0.0.1, the master-worker port kept inside the compose network. tests/test_containers.py runs
the same file on a real engine."""

import os
import re

import yaml
from locust import argument_parser

from plugin.options import DECLARED, add_arguments
from tests.helpers import ROOT

COMPOSE = os.path.join(ROOT, "docker-compose.yml")
UI = os.path.join(ROOT, "deploy", "compose.ui.yml")
MASTER_HOST = os.path.join(ROOT, "deploy", "compose.master.yml")
WORKER_HOST = os.path.join(ROOT, "deploy", "compose.worker.yml")
RESULTS = "/home/locust/suite/results"
WORKLOADS = "/home/locust/suite/workloads"

# Suite options the compose file sets itself instead of passing the host's variable through
FIXED = {
    "LOCUST_RESULTS_DIR": "the ./results bind mount",
    "LOCUST_PROMETHEUS_PORT": "9646, scraped by the prometheus service",
    "LOCUST_PROMETHEUS_HOST": "0.0.0.0 inside the compose network",
    "LOCUST_API_KEY": "given to the workers only (README: Security)",
    "LOCUST_SIM_PROFILE": "the built-in simulator is not used: the simulator service has SIM_PROFILE",
}


def load(path: str) -> dict:
    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f)


def expand(arg: str, env: dict | None = None) -> str:
    """${VAR:-default}, ${VAR-default} and ${VAR} as compose expands them with `env` set."""
    env = env or {}

    def sub(m):
        name, op, default = m.group(1), m.group(2), m.group(3) or ""
        value = env.get(name)
        if op == ":-":
            return value if value else default
        if op == "-":
            return default if value is None else value
        if op == ":?":
            assert value, f"{name} is required: {default}"
            return value
        return value or ""

    return re.sub(r"\$\{([A-Z_]+)(?:(:-|-|:\?)([^}]*))?\}", sub, arg)


def parser():
    """Locust's parser with the suite's options (a loaded locustfile's listener may have added them already)."""
    p = argument_parser.get_parser()
    if "--endpoint" not in p._option_string_actions:
        add_arguments(p)
    return p


def env_vars(p) -> set:
    return {a.env_var for a in p._actions if getattr(a, "env_var", None)}


def known_env_vars() -> set:
    return env_vars(parser())


def suite_env_vars() -> set:
    """The LOCUST_* variables of the suite's own options."""
    return {d.env for d in DECLARED}


def environment(service: dict, env: dict | None = None) -> dict:
    """A service's environment as the container gets it: bare names only when set on the host."""
    out = {}
    entries = service.get("environment", [])
    items = entries.items() if isinstance(entries, dict) else [(e.split("=", 1) + [None])[:2] for e in entries]
    for name, value in items:
        if value is None:
            if env and name in env:
                out[name] = env[name]
        else:
            out[name] = expand(str(value), env)
    return out


def command(service: dict, env: dict | None = None) -> list:
    return [expand(a, env) for a in service["command"]]


def parse_locust(args: list, env: dict):
    """Locust's parse of a service's command with its environment, as inside the container."""
    assert args[:3] == ["locust", "-f", "locustfile.py"]
    saved = {k: v for k, v in os.environ.items() if k.startswith("LOCUST_")}
    try:
        for k in saved:
            del os.environ[k]
        os.environ.update({k: v for k, v in env.items() if k.startswith("LOCUST_")})
        return parser().parse_args(args[3:])  # raises SystemExit on an unknown flag
    finally:
        for k in [k for k in os.environ if k.startswith("LOCUST_")]:
            del os.environ[k]
        os.environ.update(saved)


def test_compose_services_and_locust_flags_are_known():
    services = load(COMPOSE)["services"]
    assert {"master", "worker", "simulator", "prometheus", "grafana"} <= set(services)
    for name in ("master", "worker"):
        options = parse_locust(command(services[name]), environment(services[name]))
        assert options.locustfile == "locustfile.py"
    master = parse_locust(command(services["master"]), environment(services["master"]))
    assert master.master and master.headless and master.expect_workers == 2
    assert 0 < master.expect_workers_max_wait <= 600, "the master must not wait for workers forever"
    assert master.host == "http://simulator:8000" and master.num_users == 20 and master.run_time == 60
    assert master.results_dir == "results" and master.prometheus_port == "9646"
    worker = parse_locust(command(services["worker"]), environment(services["worker"]))
    assert worker.worker and worker.master_host == "master"


def test_workers_variable_sets_replicas_and_expectation_together():
    services = load(COMPOSE)["services"]
    for workers in ("2", "5"):
        env = {"WORKERS": workers} if workers != "2" else {}
        assert expand(str(services["worker"]["deploy"]["replicas"]), env) == workers
        assert f"--expect-workers={workers}" in command(services["master"], env)


def test_locust_variables_pass_through_to_the_master():
    services = load(COMPOSE)["services"]
    known = known_env_vars()
    for name, service in services.items():
        for var in environment(service, {k: "x" for k in known}):
            if var.startswith("LOCUST_"):
                assert var in known, f"{name}: {var} is not a variable Locust or the suite reads"
    passed = set(environment(services["master"], {k: "x" for k in known}))
    assert len(suite_env_vars()) > 30
    for var in sorted(suite_env_vars()):
        assert var in passed or var in FIXED, f"{var} is neither passed to the master nor set by docker-compose.yml"
    for var in (
        "LOCUST_HOST",
        "LOCUST_MODEL",
        "LOCUST_USERS",
        "LOCUST_REQUEST_RATE",
        "LOCUST_STEPS",
        "LOCUST_SLO",
        "LOCUST_RUN_TIME",
    ):
        assert var in passed
    # the host's values reach Locust's parse, defaults included
    host_env = {
        "LOCUST_HOST": "http://gpu-box:8000",
        "LOCUST_MODEL": "m",
        "LOCUST_USERS": "7",
        "LOCUST_STEPS": "1,2",
        "LOCUST_SLO": "ttft.p95<5s",
        "LOCUST_RUN_TIME": "5m",
        "LOCUST_REQUEST_RATE": "3",
    }
    options = parse_locust(command(services["master"], host_env), environment(services["master"], host_env))
    assert (
        options.host,
        options.model,
        options.num_users,
        options.steps,
        options.slo,
        options.run_time,
        options.request_rate,
    ) == ("http://gpu-box:8000", "m", 7, "1,2", "ttft.p95<5s", 300, "3")
    assert environment(services["master"], host_env)["SUITE_WAIT_FOR"] == "http://gpu-box:8000"
    # unset variables are not passed at all (an empty LOCUST_USERS would not parse)
    assert "LOCUST_STEPS" not in environment(services["master"])
    # the key goes to the workers only
    assert "LOCUST_API_KEY" not in environment(services["master"], {"LOCUST_API_KEY": "k"})
    assert environment(services["worker"], {"LOCUST_API_KEY": "k"})["LOCUST_API_KEY"] == "k"


def published(service: dict) -> list:
    return [
        p if isinstance(p, str) else f"{p.get('host_ip', '')}:{p['published']}:{p['target']}"
        for p in service.get("ports", [])
    ]


def test_only_prometheus_and_grafana_are_published_and_on_loopback():
    services = load(COMPOSE)["services"]
    ports = {name: published(s) for name, s in services.items() if published(s)}
    assert set(ports) == {"prometheus", "grafana"}, ports
    for name, entries in ports.items():
        for entry in entries:
            assert entry.startswith("127.0.0.1:"), f"{name}: {entry} is published beyond this machine"
    for name, service in services.items():
        assert "network_mode" not in service, name  # 5557 and 9646 stay inside the compose network
    ui = load(UI)["services"]
    assert published(ui["master"]) == ["127.0.0.1:${LOCUST_WEB_PORT:-8089}:8089"]
    master_host = load(MASTER_HOST)["services"]
    (entry,) = published(master_host["master"])
    assert entry.startswith("${MASTER_ADDRESS:?") and entry.endswith(":5557:5557"), (
        "5557 only on a given private address"
    )


def test_healthcheck_and_waits_gate_the_master():
    services = load(COMPOSE)["services"]
    check = services["simulator"]["healthcheck"]
    assert check["test"][0] == "CMD" and "http://127.0.0.1:8000/health" in " ".join(check["test"])
    assert services["master"]["depends_on"]["simulator"]["condition"] == "service_healthy"
    env = environment(services["master"])
    assert env["SUITE_WAIT_FOR"] == "http://simulator:8000" and float(env["SUITE_WAIT_TIMEOUT"]) > 0
    assert 0 < float(env["SUITE_WAIT_SETTLE"]) < float(env["SUITE_WAIT_TIMEOUT"])
    assert environment(services["worker"])["SUITE_OUTLIVE"] == "master:5557"


def test_results_and_workloads_are_bind_mounts():
    services = load(COMPOSE)["services"]
    assert "./results:" + RESULTS in services["master"]["volumes"]
    for name in ("master", "worker"):
        assert "./workloads:" + WORKLOADS + ":ro" in services[name]["volumes"]
    # the master starts as root only for the entry point, which runs Locust as the folder's owner
    assert services["master"]["user"] == "0:0" and set(services["master"]["cap_add"]) == {"CHOWN", "SETUID", "SETGID"}
    for name in ("master", "worker", "simulator"):
        assert services[name]["cap_drop"] == ["ALL"] and "no-new-privileges:true" in services[name]["security_opt"]
        assert name == "master" or "user" not in services[name]
    sim = command(services["simulator"])
    assert sim[:3] == ["python", "-m", "simulator"] and "0.0.0.0" in sim


def test_ui_variant_is_interactive():
    services = load(COMPOSE)["services"]
    ui = load(UI)["services"]["master"]
    env = {**environment(services["master"]), **environment(ui)}
    options = parse_locust(command(ui), env)
    assert options.master and not options.headless and options.web_host == "0.0.0.0"
    assert not options.run_time, "a UI run lasts until stopped unless LOCUST_RUN_TIME is set"


def test_worker_host_file():
    with open(WORKER_HOST, encoding="utf-8") as f:
        text = f.read()
    worker = yaml.safe_load(text)["services"]["worker"]
    env = {"MASTER_HOST": "10.0.0.5", "WORKERS": "4"}
    options = parse_locust(command(worker, env), environment(worker, env))
    assert options.worker and options.master_host == "10.0.0.5" and options.master_port == 5557
    assert expand(str(worker["deploy"]["replicas"]), env) == "4"
    assert environment(worker, env)["SUITE_OUTLIVE"] == "10.0.0.5:5557"
    assert worker["build"]["context"] == ".." and "../workloads:" + WORKLOADS + ":ro" in worker["volumes"]
    assert "ports" not in worker
    master_host = load(MASTER_HOST)["services"]
    assert str(master_host["worker"]["deploy"]["replicas"]) == "0"


def test_image_base_is_a_build_argument_and_runs_as_non_root():
    with open(os.path.join(ROOT, "deploy", "Dockerfile"), encoding="utf-8") as f:
        text = f.read()
    assert re.search(r"^ARG BASE=python:3\.11-slim-bookworm$", text, re.M)
    assert re.search(r"^FROM \$\{BASE\}$", text, re.M)
    assert "requirements.txt" in text
    users = re.findall(r"^USER (\S+)$", text, re.M)
    assert users and users[-1].split(":")[0] not in ("root", "0")
    assert re.search(r'^ENTRYPOINT \["python", "/home/locust/suite/deploy/entrypoint.py"\]$', text, re.M)
    with open(os.path.join(ROOT, ".dockerignore"), encoding="utf-8") as f:
        ignored = {line.strip() for line in f if line.strip() and not line.startswith("#")}
    assert {".git", ".cache", "results", ".venv", "tests"} <= ignored
    assert "!deploy/entrypoint.py" in ignored


def test_the_image_is_built_once_for_every_service_with_base_and_ca_from_the_checkout():
    """A `build` on every suite service made podman-compose build the same image once per service,
    in parallel; the base is a variable (a local image where no registry is reachable)."""
    services = load(COMPOSE)["services"]
    suite = {name for name, s in services.items() if str(s.get("image", "")).startswith("${SUITE_IMAGE")}
    assert suite == {"simulator", "master", "worker", "replica-a", "replica-b"}, (
        suite
    )  # the replicas: the `replicas` profile
    assert len({services[n]["image"] for n in suite}) == 1
    built = [n for n, s in services.items() if "build" in s]
    assert built == ["simulator"], built
    build = services["simulator"]["build"]
    assert build["dockerfile"] == "deploy/Dockerfile" and build["args"] == {
        "BASE": "${SUITE_BASE:-python:3.11-slim-bookworm}"
    }
    worker_host = load(WORKER_HOST)["services"]["worker"]["build"]
    assert worker_host["args"] == build["args"]
    with open(os.path.join(ROOT, "deploy", "Dockerfile"), encoding="utf-8") as f:
        text = f.read()
    assert "COPY deploy/ca/ " in text and "PIP_CERT=" in text
    with open(os.path.join(ROOT, ".dockerignore"), encoding="utf-8") as f:
        assert "!deploy/ca" in f.read().split()


def test_the_replicas_profile_runs_two_replicas_behind_nginx_that_names_each():
    """COMPOSE_PROFILES=replicas (docs/replicas.md): two simulator replicas of the suite's image and
    nginx in front, none of them started without the profile; the master takes several URLs, the
    policy and the balancer's header from the host."""
    services = load(COMPOSE)["services"]
    assert all(services[n]["profiles"] == ["replicas"] for n in ("replica-a", "replica-b", "balancer"))
    assert all("profiles" not in services[n] for n in ("simulator", "master", "worker"))
    for name in ("replica-a", "replica-b"):
        sim = command(services[name])
        assert sim[:3] == ["python", "-m", "simulator"] and "8000" in sim and services[name]["cap_drop"] == ["ALL"]
    balancer = services["balancer"]
    assert "ports" not in balancer and {"replica-a", "replica-b"} <= set(balancer["depends_on"])
    (mount,) = balancer["volumes"]
    conf_path = os.path.join(ROOT, mount.split(":")[0])
    with open(conf_path, encoding="utf-8") as f:
        conf = f.read()
    for line in (
        "server replica-a:8000;",
        "server replica-b:8000;",
        "proxy_buffering off;",
        "add_header X-Upstream $upstream_addr always;",
    ):
        assert line in conf, line
    env = {"LOCUST_HOST": "http://replica-a:8000,http://replica-b:8000", "LOCUST_BALANCE": "sticky"}
    options = parse_locust(command(services["master"], env), environment(services["master"], env))
    assert (options.host, options.balance) == (env["LOCUST_HOST"], "sticky")
    assert environment(services["master"], env)["SUITE_WAIT_FOR"] == env["LOCUST_HOST"]  # each replica waited for
    env = {"LOCUST_HOST": "http://balancer:8080", "LOCUST_BACKEND_HEADER": "X-Upstream"}
    assert (
        parse_locust(command(services["master"], env), environment(services["master"], env)).backend_header
        == "X-Upstream"
    )
