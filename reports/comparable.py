"""What a run measured, and whether two runs measured the same thing: a comparison of two runs
means something only then."""

from __future__ import annotations

from urllib.parse import urlsplit

from runfolder.reading import RunData

# ---------------------------------------------------------------------------------------------
# what was measured: a comparison of two runs means something when they share it

LOOPBACK = ("localhost", "127.0.0.1", "::1")


def identity(run: RunData) -> dict[str, str]:
    """What a run measured, from run.json: its workload (content hash), load model and level,
    server (its URL; a server on this machine without its port: local servers and the built-in
    simulator take a free port each run) and model, and what the server was (`target`: the built-in
    simulator's profile and its hash, the server's version; run.json before it was recorded has none)."""
    info = run.run
    load = info.load_level()  # a closed loop's level is -u (the web form's user count)
    wl = info.workload
    parts = urlsplit(info.host or "")
    host = parts.hostname or ""
    server = f"{parts.scheme}://{host}{'' if host in LOOPBACK or not parts.port else f':{parts.port}'}{parts.path}"
    out = {
        "workload": f"{wl.name or '?'} (hash {wl.hash[:12] or '?'})" if wl is not None else "? (hash ?)",
        "load": ", ".join(f"{k} {v}" for k, v in load.items() if v is not None),
        "server": server.rstrip("/"),
        "model": info.model or "",
    }
    target = info.target
    if target is not None:
        out["simulator profile"] = (
            f"{target.simulator_profile} (hash {(target.simulator_profile_hash or '?')[:12]})"
            if target.simulator_profile
            else "none (not the built-in simulator)"
        )
        out["server version"] = target.server_version or "not stated"
    return out


def config_differences(base: RunData, new: RunData) -> list[str]:
    """'block_size 16 (base) vs 32 (new)' for each label of the servers' stated configuration
    (vLLM's vllm:cache_config_info, ...) that differs; a label only one server states counts."""
    a, b = base.run.target, new.run.target
    if a is None or b is None:
        return []
    return [
        f"{k} {a.config.get(k, 'not stated')} (base) vs {b.config.get(k, 'not stated')} (new)"
        for k in sorted(set(a.config) | set(b.config))
        if a.config.get(k) != b.config.get(k)
    ]


def differences(base: RunData, new: RunData) -> list[str]:
    """'load: kind closed, users 10 (base) vs kind closed, users 40 (new)' for each difference. A
    run.json without a target (written before it was recorded) is compared on the rest. Two
    simulator profiles are named once: the configuration they state differs with them."""
    a, b = identity(base), identity(new)
    out = [f"{k}: {a[k]} (base) vs {b[k]} (new)" for k in a if k in b and a[k] != b[k]]
    if (
        a.get("simulator profile") == b.get("simulator profile")
        or "simulator profile" not in a
        or "simulator profile" not in b
    ):
        config = config_differences(base, new)
        if config:
            out.append(f"server configuration: {', '.join(config)}")
    return out


def label_of(run: RunData) -> str:
    """The run's --label (what an A/B changed), '' when it has none."""
    return run.run.plan.label
