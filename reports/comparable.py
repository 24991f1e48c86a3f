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
    simulator take a free port each run) and model."""
    info = run.run
    load = info.load_level()  # a closed loop's level is -u (the web form's user count)
    wl = info.workload
    parts = urlsplit(info.host or "")
    host = parts.hostname or ""
    server = f"{parts.scheme}://{host}{'' if host in LOOPBACK or not parts.port else f':{parts.port}'}{parts.path}"
    return {
        "workload": f"{wl.name or '?'} (hash {wl.hash[:12] or '?'})" if wl is not None else "? (hash ?)",
        "load": ", ".join(f"{k} {v}" for k, v in load.items() if v is not None),
        "server": server.rstrip("/"),
        "model": info.model or "",
    }


def differences(base: RunData, new: RunData) -> list[str]:
    """'load: kind closed, users 10 (base) vs kind closed, users 40 (new)' for each difference."""
    a, b = identity(base), identity(new)
    return [f"{k}: {a[k]} (base) vs {b[k]} (new)" for k in a if a[k] != b[k]]
