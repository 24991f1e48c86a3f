"""A sweep: for each point of the grid, start its server (a command template or the built-in
simulator), wait until it is ready, run the load as an ordinary run, stop the server, and read the
point's results folder back; then the table, the ranking and the report.

A point never hangs the sweep: the start is bounded (--start-timeout), the load is bounded (its
-t plus a slack, or --point-timeout), and a server that dies during the load stops the load at
once. A failed point is recorded with its class and its log's tail, and the sweep goes on. A point
whose results folder is complete is not run again (resume): a resumed folder whose complete
points searched capacity in another unit than this load (users against requests/s) is refused
before anything starts (sweeps/capacity_unit.py).
"""

from __future__ import annotations

import json
import os
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from core.errors import InputError
from core.files import write_atomic
from core.server_process import ServerStartError, classify_start_failure
from metrics.schema import load_summary
from runfolder.layout import SUMMARY
from sweeps.capacity_unit import of_capacity, of_load, refuse_mixed
from sweeps.figures import point_figures
from sweeps.folder_lock import lock_folder
from sweeps.grid import Point
from sweeps.journal import Journal
from sweeps.load import RUN_ID, SLACK_S, UNKNOWN_RUN_S, is_complete, locust_argv, run_load, run_time_s
from sweeps.ranking import AUTO, RANKINGS, rank
from sweeps.report import write_report
from sweeps.servers import SimulatorServer, TemplateServer
from sweeps.table import write_table

POINTS = "points"
POINT_JSON = "point.json"
SWEEP_JSON = "sweep.json"
SERVER_STOP_S = 20.0
# A point's server took longer than this to start and the load's own length is unknown: the
# estimate of the time left counts this much per point until one has been measured
FIRST_ESTIMATE_S = 60.0


@dataclass
class Sweep:
    folder: str
    points: list[Point]
    server: TemplateServer | SimulatorServer
    load_args: list[str]
    seed: int | None = 0
    point_timeout: float | None = None
    ranking: str = AUTO
    gpus: int | None = None
    settings: list[str] = field(default_factory=list)
    command: str = ""
    say: Callable[[str], None] = print

    def point_folder(self, point: Point) -> str:
        return os.path.join(self.folder, POINTS, point.name)

    def load_bound(self) -> float:
        if self.point_timeout:
            return self.point_timeout
        t = run_time_s(self.load_args)
        return t + SLACK_S if t is not None else UNKNOWN_RUN_S


def dry_run(sw: Sweep) -> None:
    """Every point's commands, nothing started ({port}: a port picked per point when it runs)."""
    check_units(sw)
    sw.say(f"{len(sw.points)} points, folder {sw.folder}")
    for p in sw.points:
        folder = sw.point_folder(p)
        launch = _describe(sw, p, folder)
        done = " (complete: would be skipped)" if is_complete(folder) else ""
        sw.say(f"point {p.index}/{len(sw.points)} {p.label}{done}")
        sw.say(f"  server: {launch}")
        sw.say(f"  load:   {shlex.join(locust_argv('http://127.0.0.1:PORT', folder, sw.load_args, sw.seed))}")


def _describe(sw: Sweep, p: Point, folder: str) -> str:
    if isinstance(sw.server, TemplateServer):
        return sw.server.template.format(port="PORT", **p.texts)
    return f"python -m simulator --port PORT --profile {os.path.join(folder, 'profile.yaml')} ({sw.server.base_name} with {p.label})"


def run_sweep(sw: Sweep) -> int:
    with lock_folder(sw.folder):
        return _run_sweep(sw)


def check_units(sw: Sweep) -> None:
    """The load and the points already complete in the folder search capacity in one unit."""
    refuse_mixed(
        {"this load": of_load(sw.load_args)}
        | {
            f"complete point {p.label}": run_unit(sw.point_folder(p))
            for p in sw.points
            if is_complete(sw.point_folder(p))
        }
    )


def run_unit(folder: str) -> str | None:
    """The capacity unit of a complete run's summary.json (None: no capacity answer)."""
    return of_capacity(load_summary(os.path.join(folder, RUN_ID, SUMMARY)).capacity)


def _run_sweep(sw: Sweep) -> int:
    check_units(sw)
    os.makedirs(os.path.join(sw.folder, POINTS), exist_ok=True)
    journal = Journal(sw.folder)
    write_atomic(
        os.path.join(sw.folder, SWEEP_JSON),
        json.dumps(
            {
                "command": sw.command,
                "server": sw.server.kind,
                "template": getattr(sw.server, "template", None),
                "profile": getattr(sw.server, "base_name", None),
                "settings": sw.settings,
                "points": [p.texts for p in sw.points],
                "load": sw.load_args,
                "seed": sw.seed,
                "ranking": sw.ranking,
                "gpus": sw.gpus,
            },
            indent=2,
        )
        + "\n",
    )
    journal.write("sweep_start", points=len(sw.points), command=sw.command)
    n = len(sw.points)
    spent: list[float] = []
    todo = [p for p in sw.points if not is_complete(sw.point_folder(p))]
    t_sweep = time.monotonic()
    try:
        for p in sw.points:
            folder = sw.point_folder(p)
            head = f"point {p.index}/{n} {p.label}"
            if p not in todo:
                sw.say(f"{head}: complete results folder, not run again")
                journal.write("point_skipped", point=p.name, reason="complete")
                continue
            left = _left(sw, spent, todo, p)
            sw.say(f"{head}: starting the server ({left} left, estimated)")
            t0 = time.monotonic()
            outcome = run_point(sw, p, folder, journal, head)
            outcome["seconds"] = round(time.monotonic() - t0, 1)
            write_atomic(os.path.join(folder, POINT_JSON), json.dumps(outcome, indent=2, default=str) + "\n")
            journal.write("point_end", **{k: v for k, v in outcome.items() if k != "log_tail"})
            if outcome["status"] == "done":  # a failed point says little about how long the next one runs
                spent.append(outcome["seconds"])
            sw.say(
                f"{head}: {outcome['status']}"
                + (f" ({outcome['why']})" if outcome.get("why") else "")
                + f" in {outcome['seconds']:.0f} s"
            )
            if outcome["status"] == "load_refused":
                raise InputError(
                    f"the load arguments were refused by the run (exit 2): {outcome['why']}; fix them after --"
                )
    except KeyboardInterrupt:
        journal.write("sweep_interrupted")
        sw.say("sweep interrupted; run the same command again to resume (complete points are not run again)")
        finish(sw, journal)
        return 130
    journal.write("sweep_end", seconds=round(time.monotonic() - t_sweep, 1))
    return finish(sw, journal)


def _left(sw: Sweep, spent: list[float], todo: list[Point], p: Point) -> str:
    remaining = len(todo) - todo.index(p)
    if spent:
        each = sum(spent) / len(spent)
    else:
        t = run_time_s(sw.load_args)
        each = (t + 15.0) if t is not None else FIRST_ESTIMATE_S
    s = int(each * remaining)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def run_point(sw: Sweep, p: Point, folder: str, journal: Journal, head: str) -> dict:
    return run_one(sw.server, p, folder, sw.load_args, sw.seed, sw.load_bound(), journal, sw.say, head)


def run_one(
    server,
    p: Point,
    folder: str,
    load_args: list[str],
    seed: int | None,
    bound_s: float,
    journal: Journal,
    say,
    head: str,
) -> dict:
    """Starts a configuration's server (none for a running one), runs the load, stops the server;
    the outcome as a dict (`status` "done" or why not)."""
    os.makedirs(folder, exist_ok=True)
    launch = server.prepare(p, folder)
    base = {"point": p.name, "label": p.label, "settings": p.texts, "server_command": launch.command}
    journal.write("server_start", point=p.name, folder=folder, command=launch.command)
    proc = launch.process
    try:
        if proc is not None:
            try:
                proc.start()
            except ServerStartError as e:
                return {
                    **base,
                    "status": e.kind,
                    "exit_code": e.exit_code,
                    "log_tail": e.log_tail,
                    "why": _why(e.kind, e.exit_code),
                }
            journal.write("server_ready", point=p.name, folder=folder, seconds=round(proc.ready_s, 2), url=launch.url)
            say(f"{head}: server ready in {proc.ready_s:.1f} s; running the load")
        else:
            say(f"{head}: running the load against {launch.url}")
        result = run_load(launch.url, folder, load_args, seed=seed, bound_s=bound_s, server=proc)
    finally:
        if proc is not None:
            proc.stop(SERVER_STOP_S)
    out = {**base, "load_exit_code": result.exit_code, "load_seconds": round(result.seconds, 1)}
    log = os.path.join(folder, "locust.log")
    if result.server_exit is not None:
        tail = proc.log_tail()
        kind = "out_of_memory" if classify_start_failure(result.server_exit, tail) == "out_of_memory" else "died"
        return {
            **out,
            "status": kind,
            "exit_code": result.server_exit,
            "log_tail": tail,
            "why": f"the server exited with {result.server_exit} during the load",
        }
    if result.timed_out:
        return {
            **out,
            "status": "load_timeout",
            "exit_code": None,
            "log_tail": _tail(log),
            "why": f"the load ran past its bound of {bound_s:.0f} s and was stopped",
        }
    if result.exit_code == 2:
        return {**out, "status": "load_refused", "exit_code": 2, "log_tail": _tail(log), "why": _last_error(log)}
    if not is_complete(folder):
        return {
            **out,
            "status": "incomplete",
            "exit_code": result.exit_code,
            "log_tail": _tail(log),
            "why": f"the run exited with {result.exit_code} without a complete results folder",
        }
    return {**out, "status": "done", "exit_code": result.exit_code}


def _why(kind: str, code: int | None) -> str:
    return {
        "start_timeout": "not ready before --start-timeout",
        "out_of_memory": "its log says memory ran out",
        "refused": f"it exited with {code}, refusing a setting",
        "exited": f"it exited with {code} while starting",
    }[kind]


def _tail(path: str, lines: int = 40) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return "\n".join(f.read()[-64 * 1024 :].splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _last_error(path: str) -> str:
    lines = [x for x in _tail(path, 200).splitlines() if "error" in x.lower()]
    return (lines[-1] if lines else _tail(path, 1)).strip()[:300]


def collect(sw: Sweep) -> list[dict]:
    """One row per point: its outcome (point.json) and, when its results folder is complete, its
    figures read back from it."""
    rows = []
    for p in sw.points:
        folder = sw.point_folder(p)
        outcome = _read_json(os.path.join(folder, POINT_JSON))
        row = {
            "index": p.index,
            "point": p.name,
            "label": p.label,
            "settings": p.texts,
            "folder": folder,
            "status": outcome.get("status", "not run"),
            "exit_code": outcome.get("exit_code"),
            "why": outcome.get("why"),
            "log_tail": outcome.get("log_tail"),
            "seconds": outcome.get("seconds"),
        }
        if is_complete(folder):
            row["status"] = "done"
            try:
                row.update(point_figures(os.path.join(folder, RUN_ID), sw.gpus, seed=sw.seed or 0))
            except InputError as e:
                row.update(status="unreadable", why=str(e))
        rows.append(row)
    return rows


def _read_json(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError):
        return {}


def finish(sw: Sweep, journal: Journal) -> int:
    """The table, the ranking, the report; the exit code of the ranking."""
    rows = collect(sw)
    unit = of_load(sw.load_args)
    ranked = rank(rows, sw.ranking, unit)
    others = {name: rank(rows, name, unit) for name in RANKINGS if name != ranked["ranking"]}
    meta = {
        "folder": sw.folder,
        "command": sw.command,
        "load": sw.load_args,
        "gpus": sw.gpus,
        "settings": sw.settings,
        "capacity_unit": ranked["capacity_unit"],
        "other_rankings": others,
    }
    csv_path, json_path = write_table(sw.folder, rows, sw.settings, ranked, meta)
    written = [csv_path, json_path]
    written += write_report(sw.folder, rows, ranked, meta)
    failed = [r for r in rows if r["status"] not in ("done",)]
    for r in failed:
        sw.say(f"point {r['index']} {r['label']}: {r['status']}" + (f" ({r['why']})" if r.get("why") else ""))
    sw.say(ranked["sentence"])
    sw.say("written: " + ", ".join(written))
    journal.write("ranked", verdict=ranked["verdict"], exit_code=ranked["exit_code"], sentence=ranked["sentence"])
    return ranked["exit_code"]
