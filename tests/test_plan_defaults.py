"""Each option's default is written once, in plugin/options.py: the run plan's fields hold the
options' values (plugin/plan.py `held`), and a plan built without options is the plan of the
options' defaults."""

from __future__ import annotations

from argparse import Namespace

import pytest

from plugin.options import Options
from plugin.plan import HealthLimits, Held, PrometheusEndpoint, RunPlan

pytestmark = pytest.mark.unit

GIVEN_BY_THE_RUN = {"run_time_s", "load"}  # Locust's -t and the load model chosen from the options


def _held(model) -> dict:
    return {name: [m for m in f.metadata if isinstance(m, Held)] for name, f in model.model_fields.items()}


def test_every_plan_field_holds_an_option_and_no_default_of_its_own():
    for model in (RunPlan, HealthLimits, PrometheusEndpoint):
        for name, held in _held(model).items():
            if model is RunPlan and name in GIVEN_BY_THE_RUN:
                assert not held, name
                continue
            assert len(held) == 1, f"{model.__name__}.{name} holds no option: its default would be written twice"
            field = model.model_fields[name]
            assert field.default_factory is not None, f"{model.__name__}.{name} has a default of its own"


def test_the_default_plan_is_the_plan_of_the_default_options():
    """A plan made without options (a test's RunPlan(), a worker's missing key) and the plan of a
    command line that gives none agree field by field, and each held-by-name value is the option's
    parsed default (a duration in seconds, a size in bytes)."""
    bare, parsed = RunPlan(), RunPlan.from_options(Namespace())
    assert bare == parsed and bare.record() == parsed.record()
    defaults = Options()
    assert (bare.warmup_s, bare.max_response_bytes, bare.retry_max_wait_s) == (defaults.warmup, 64 << 20, 30.0)
    assert (bare.timeouts.connect, bare.timeouts.first_token, bare.timeouts.idle, bare.timeouts.total) == (
        10.0,
        300.0,
        120.0,
        900.0,
    )
    assert bare.health == HealthLimits(
        cpu_pct=70.0, loop_lag_s=0.010, token_lag_s=0.005, sustain_s=5.0, target_cpu_pct=60.0
    )
    assert bare.prometheus == PrometheusEndpoint(port=0, host="127.0.0.1", linger_s=0.0)
    assert (bare.stream, bare.workload, bare.tokenizer, bare.slo, bare.extra) == (True, None, None, (), {})


def test_a_given_option_reaches_its_field_and_the_plan_stays_frozen():
    plan = RunPlan.from_options(
        Namespace(
            health_cpu_limit="85", prometheus_linger="2s", timeout_idle="3s", no_stream=True, retry="2", warmup="1m"
        )
    )
    assert (
        plan.health.cpu_pct,
        plan.prometheus.linger_s,
        plan.timeouts.idle,
        plan.stream,
        plan.retry,
        plan.warmup_s,
    ) == (85.0, 2.0, 3.0, False, 2, 60.0)
    assert plan.health.loop_lag_s == 0.010 and plan.timeouts.connect == 10.0  # the others at their defaults
    with pytest.raises(Exception, match="frozen"):
        plan.warmup_s = 0.0
    with pytest.raises(Exception, match="extra"):
        RunPlan(no_such_field=1)
