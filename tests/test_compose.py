"""docker-compose.yml parses, and every Locust flag it passes is an option the suite knows.
(No container engine runs here: the image and compose file are validated, not started.)"""

import os
import re

import yaml
from locust import argument_parser

from plugin.options import add_arguments
from tests.helpers import ROOT


def load_compose() -> dict:
    with open(os.path.join(ROOT, "docker-compose.yml"), encoding="utf-8") as f:
        return yaml.safe_load(f)


def expand(arg: str) -> str:
    """${VAR:-default} as compose would expand it with nothing set."""
    return re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", arg)


def parser():
    p = argument_parser.get_parser()
    add_arguments(p)
    return p


def test_compose_services_and_locust_flags_are_known():
    compose = load_compose()
    services = compose["services"]
    assert {"master", "worker", "simulator"} <= set(services)
    known = parser()
    for name in ("master", "worker"):
        command = [expand(a) for a in services[name]["command"]]
        assert command[:3] == ["locust", "-f", "locustfile.py"]
        args = command[3:]
        options = known.parse_args(args)  # raises SystemExit on an unknown flag
        assert options.locustfile == "locustfile.py"
    master = known.parse_args([expand(a) for a in services["master"]["command"]][3:])
    assert master.master and master.headless and master.expect_workers >= 1
    worker = known.parse_args([expand(a) for a in services["worker"]["command"]][3:])
    assert worker.worker and worker.master_host == "master"


def test_compose_results_volume_and_simulator():
    services = load_compose()["services"]
    assert any(v.endswith(":/home/locust/suite/results") for v in services["master"]["volumes"])
    sim = [expand(a) for a in services["simulator"]["command"]]
    assert sim[:3] == ["python", "-m", "simulator"] and "0.0.0.0" in sim


def test_image_is_based_on_the_official_locust_image():
    with open(os.path.join(ROOT, "deploy", "Dockerfile"), encoding="utf-8") as f:
        text = f.read()
    assert re.search(r"^FROM locustio/locust:2\.47\.0$", text, re.M)
    assert "requirements.txt" in text
