"""deploy/kubernetes/: every resource passes the Kubernetes API schemas (kubernetes-validate, strict:
no unknown field), as written and as kustomize renders it (`kubectl kustomize`), and the manifests
agree with each other and with the suite (kustomize: the kubectl of tests/kubectl.py, pinned): the master's flags and LOCUST_* variables are known, the
workers reach the master's Service, as many as it expects, only the workers reach port 5557,
nothing runs as root; the image and the worker count are set in kustomization.yaml alone."""

from __future__ import annotations

import copy
import os
import shutil
import subprocess

import kubernetes_validate
import pytest
import yaml

from tests.helpers import ROOT
from tests.kubectl import kubectl
from tests.test_compose import known_env_vars, parse_locust

DIR = os.path.join(ROOT, "deploy", "kubernetes")
VERSIONS = ("1.29.0", "1.37.0")  # an older release still in use, and the newest the validator knows


def kustomization(folder: str = DIR) -> dict:
    with open(os.path.join(folder, "kustomization.yaml"), encoding="utf-8") as f:
        return yaml.safe_load(f)


def resources() -> list[dict]:
    """The resources the kustomization names, as written."""
    out = []
    for name in kustomization()["resources"]:
        with open(os.path.join(DIR, name), encoding="utf-8") as f:
            out += [d for d in yaml.safe_load_all(f) if d]
    return out


def one(kind: str, name: str) -> dict:
    (r,) = [r for r in resources() if r["kind"] == kind and r["metadata"]["name"] == name]
    return r


def pod(r: dict) -> dict:
    return r["spec"]["template"]["spec"]


@pytest.mark.parametrize("version", VERSIONS)
def test_every_resource_passes_the_api_schema(version):
    found = resources()
    kinds = sorted((r["kind"], r["metadata"]["name"]) for r in found)
    assert ("Job", "llm-loadtest-worker") in kinds and ("Service", "llm-loadtest-master") in kinds
    for r in found:
        kubernetes_validate.validate(r, version, strict=True)  # raises ValidationError


def test_the_validator_rejects_a_broken_manifest():
    worker = one("Job", "llm-loadtest-worker")
    typo = copy.deepcopy(worker)
    typo["spec"]["paralelism"] = typo["spec"].pop("parallelism")
    bad_type = copy.deepcopy(worker)
    bad_type["spec"]["parallelism"] = "two"
    for broken in (typo, bad_type):
        with pytest.raises(kubernetes_validate.ValidationError):
            kubernetes_validate.validate(broken, VERSIONS[-1], strict=True)


def env(container: dict) -> dict:
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def test_master_and_workers_agree():
    master_job = one("Job", "llm-loadtest-master")
    (master,) = pod(master_job)["containers"]
    master_env = {k: v for k, v in env(master).items() if v is not None}
    options = parse_locust(master["args"], master_env)
    assert options.master and options.headless and options.expect_workers_max_wait > 0
    assert options.results_dir == "results" and options.prometheus_host == "0.0.0.0"
    known = known_env_vars()
    assert {k for k in env(master) if k.startswith("LOCUST_")} <= known
    assert "LOCUST_API_KEY" not in env(master), "the key goes to the workers only"

    service = one("Service", "llm-loadtest-master")
    assert service["spec"]["selector"].items() <= master_job["spec"]["template"]["metadata"]["labels"].items()
    ports = {p["containerPort"] for p in master["ports"]}
    assert {p["port"] for p in service["spec"]["ports"]} == ports == {5557, 9646}

    worker_job = one("Job", "llm-loadtest-worker")
    (worker,) = pod(worker_job)["containers"]
    wopts = parse_locust(worker["args"], {})
    assert wopts.worker and wopts.master_host == service["metadata"]["name"] and wopts.master_port == 5557
    assert worker_job["spec"]["parallelism"] == worker_job["spec"]["completions"] == options.expect_workers
    # the workers end with the run: a Job, never restarted, waiting first for the master's port
    assert pod(worker_job)["restartPolicy"] == "Never" and worker_job["spec"]["backoffLimit"] == 0
    assert env(worker)["SUITE_WAIT_FOR"] == f"{service['metadata']['name']}:5557"
    assert worker["image"] == master["image"]
    assert env(worker).keys() <= known | {"SUITE_WAIT_FOR", "SUITE_WAIT_TIMEOUT"}

    sim = one("Service", "llm-loadtest-simulator")
    target = f"http://{sim['metadata']['name']}:{sim['spec']['ports'][0]['port']}"
    assert master_env["LOCUST_HOST"] == master_env["SUITE_WAIT_FOR"] == target


def test_only_workers_reach_the_master_worker_port():
    policy = one("NetworkPolicy", "llm-loadtest-master")
    master_labels = one("Job", "llm-loadtest-master")["spec"]["template"]["metadata"]["labels"]
    worker_labels = one("Job", "llm-loadtest-worker")["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= master_labels.items()
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    for rule in policy["spec"]["ingress"]:
        ports = {p["port"] for p in rule["ports"]}
        if 5557 in ports:
            assert ports == {5557}
            (source,) = rule["from"]
            assert source["podSelector"]["matchLabels"].items() <= worker_labels.items()


def test_nothing_runs_as_root():
    for r in resources():
        if r["kind"] not in ("Deployment", "Job"):
            continue
        spec = pod(r)
        assert spec["securityContext"]["runAsNonRoot"] and spec["securityContext"]["runAsUser"] == 1000
        for c in spec["containers"]:
            assert c["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def render(folder: str) -> list[dict]:
    out = subprocess.run([kubectl(), "kustomize", folder], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


@pytest.mark.process
def test_kustomization_sets_the_image_and_the_worker_count_in_one_place(tmp_path):
    """The rendered manifests pass the schemas; changing the image and the count in
    kustomization.yaml alone changes every container's image, the workers' parallelism and
    completions, and the master's expected workers."""
    rendered = render(DIR)
    assert sorted((r["kind"], r["metadata"]["name"]) for r in rendered) == sorted(
        (r["kind"], r["metadata"]["name"]) for r in resources()
    )
    for r in rendered:
        kubernetes_validate.validate(r, VERSIONS[-1], strict=True)

    folder = tmp_path / "kubernetes"
    shutil.copytree(DIR, folder)
    k = kustomization(str(folder))
    k["images"][0].update(newName="registry.example/llm-loadtest", newTag="2026.12")
    k["patches"][0]["patch"] = k["patches"][0]["patch"].replace("value: 2}", "value: 7}")
    (folder / "kustomization.yaml").write_text(yaml.safe_dump(k))
    rendered = {(r["kind"], r["metadata"]["name"]): r for r in render(str(folder))}
    images = {c["image"] for r in rendered.values() if r["kind"] in ("Job", "Deployment") for c in pod(r)["containers"]}
    assert images == {"registry.example/llm-loadtest:2026.12"}
    workers = rendered[("Job", "llm-loadtest-worker")]["spec"]
    assert workers["parallelism"] == workers["completions"] == 7
    (master,) = pod(rendered[("Job", "llm-loadtest-master")])["containers"]
    assert env(master)["LOCUST_EXPECT_WORKERS"] == "7"
    assert parse_locust(master["args"], {k: v for k, v in env(master).items() if v is not None}).expect_workers == 7
    for r in rendered.values():
        kubernetes_validate.validate(r, VERSIONS[0], strict=True)


@pytest.mark.process
def test_the_podman_variant_is_the_rendered_kustomization_as_pods():
    """deploy/kubernetes/podman.yaml is deploy/kubernetes/podman_play.py over the kustomization as
    kustomize renders it (regenerate: the command in its first lines): every resource passes the
    schemas, each Service's workload is a Pod of the Service's name (podman resolves pod names),
    the workers a Deployment of the Job's parallelism, nothing publishes a port, the same containers."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("podman_play", os.path.join(DIR, "podman_play.py"))
    podman_play = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(podman_play)
    rendered = render(DIR)
    with open(os.path.join(DIR, "podman.yaml"), encoding="utf-8") as f:
        text = f.read()
    assert text == podman_play.render(rendered), (
        "deploy/kubernetes/podman.yaml is stale: run the command in its first lines"
    )
    played = {(r["kind"], r["metadata"]["name"]): r for r in yaml.safe_load_all(text) if r}
    assert sorted(played) == [
        ("Deployment", "llm-loadtest-worker"),
        ("PersistentVolumeClaim", "llm-loadtest-results"),
        ("Pod", "llm-loadtest-master"),
        ("Pod", "llm-loadtest-simulator"),
    ]
    for r in played.values():
        kubernetes_validate.validate(r, VERSIONS[-1], strict=True)
    source = {(r["kind"], r["metadata"]["name"]): r for r in rendered}
    workers = played[("Deployment", "llm-loadtest-worker")]
    assert workers["spec"]["replicas"] == source[("Job", "llm-loadtest-worker")]["spec"]["parallelism"] == 2
    pairs = [
        (played[("Pod", "llm-loadtest-master")]["spec"], pod(source[("Job", "llm-loadtest-master")])),
        (played[("Pod", "llm-loadtest-simulator")]["spec"], pod(source[("Deployment", "llm-loadtest-simulator")])),
        (pod(workers), pod(source[("Job", "llm-loadtest-worker")])),
    ]
    for got, want in pairs:
        assert got["securityContext"] == want["securityContext"] and got.get("volumes") == want.get("volumes")
        for g, w in zip(got["containers"], want["containers"], strict=True):
            assert "ports" not in g  # podman kube play 4.3 publishes a containerPort on 0.0.0.0
            assert {k: v for k, v in g.items() if k not in ("readinessProbe", "livenessProbe")} == {
                k: v for k, v in w.items() if k not in ("ports", "readinessProbe", "livenessProbe")
            }
    assert (
        played[("Pod", "llm-loadtest-simulator")]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["port"] == 8000
    )
    assert played[("Pod", "llm-loadtest-master")]["spec"]["restartPolicy"] == pod(workers)["restartPolicy"] == "Never"
