"""summary.json's `setup`: the load and the target a run was given (plugin/setup.py), and what the
run ran against (`Target`, also in run.json: `python -m reports compare` refuses two runs whose
targets differ)."""

from __future__ import annotations

from typing import Any

from metrics.schema.base import Model, Num


class LoadSetup(Model):
    kind: str  # closed | steps | capacity | open | rate_steps | replay
    text: str  # the plan's one line: "step ramp 5,10 users, 60s each (10s warm-up)"
    users: int | None = None  # closed loop: -u (the web form's user count)
    parameters: dict[str, Any] = {}  # the load model's own fields (run.json plan.load)


class Target(Model):
    """What the run ran against: the built-in simulator's profile (its name and the SHA-256 of the
    profile as loaded), and the server's configuration where the server states it on /metrics
    (vLLM's `vllm:cache_config_info` labels: block size, GPU memory utilisation, number of blocks;
    the simulator's `llm_simulator_scheduler_config_info`), with the model and version."""

    simulator_profile: str | None = None  # the built-in simulator's profile (its name, or the file it was given)
    simulator_profile_hash: str | None = None  # SHA-256 of the profile as loaded (simulator/profiles.py)
    model: str = ""
    server_version: str | None = None
    config: dict[str, str] = {}  # the stated configuration: label -> value, from every *_config_info gauge
    config_source: list[str] = []  # the gauges it was read from

    def text(self) -> str:
        """One line: 'simulator profile fixed (hash 1a2b3c4d5e6f), model sim-model, version 0.1;
        block_size 16, ...'."""
        parts = []
        if self.simulator_profile:
            parts.append(
                f"simulator profile {self.simulator_profile} (hash {(self.simulator_profile_hash or '?')[:12]})"
            )
        if self.model:
            parts.append(f"model {self.model}")
        if self.server_version:
            parts.append(f"version {self.server_version}")
        head = ", ".join(parts) or "unknown server"
        config = ", ".join(f"{k} {v}" for k, v in self.config.items() if k in STATED)
        return f"{head}; {config}" if config else head

    def stated(self) -> str:
        """The profile and the configuration alone (a header that names the model and version
        elsewhere): 'simulator profile fixed (hash 1a2b3c4d5e6f)', 'block_size 16, ...'."""
        profile = (
            f"simulator profile {self.simulator_profile} (hash {(self.simulator_profile_hash or '?')[:12]})"
            if self.simulator_profile
            else ""
        )
        config = ", ".join(f"{k} {v}" for k, v in self.config.items() if k in STATED)
        config = config or ("" if profile else "no configuration stated (GET /metrics has no *_config_info gauge)")
        return "; ".join(x for x in (profile, config) if x)


# the configuration labels a header shows (the rest are in summary.json setup.target.config)
STATED = (
    "block_size",
    "gpu_memory_utilization",
    "num_gpu_blocks",
    "max_num_seqs",
    "max_num_batched_tokens",
    "max_model_len",
    "enable_prefix_caching",
)


class Setup(Model):
    """What load ran against what target (plugin/setup.py): the first thing every report states."""

    load: LoadSetup
    run_time_s: Num = None  # -t, the time asked for (None: until stopped)
    measured_s: Num = None  # the measurement window
    slo: list[str] = []
    workload: str  # its name
    workload_hash: str
    server: str  # the URL, credentials left out
    model: str
    server_version: str | None = None  # where the server tells it (plugin/setup.py server_version)
    server_version_source: str | None = (
        None  # where: "GET /version", "GET /metrics NAME{version}", "response header server"
    )
    target: Target | None = None  # what the run ran against (also run.json target)
    label: str = ""  # --label: what this run is (what an A/B changed)
    client_hosts: list[str]
    workers: int  # processes that ran users (1 for a local run)
    suite_version: str
