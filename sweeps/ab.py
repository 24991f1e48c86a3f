"""An A/B of one change: two configurations at the same load, in interleaved rounds.

Round r runs A then B when r is odd and B then A when it is even (ABBA over two rounds), so a
drift of the machine over time falls on both alike; both runs of a round use the same seeds (the
request sequence of --seed + r - 1). Each run is an ordinary run with its own results folder
(round-NN/A/run, round-NN/B/run), read back through runfolder/. The difference of each metric over
the rounds, its interval and its verdict are stats/rounds.py's; when to stop is stats/
sequential.py's rule, unless --rounds gives the number. With a capacity search as the load, the
capacity is compared in the search's own unit, users or requests/s (sweeps/capacity_unit.py); a
resumed folder whose complete runs searched in the other unit is refused before anything starts.
"""

from __future__ import annotations

import json
import os
import shlex

from core.errors import InputError
from core.files import write_atomic
from stats.rounds import BETTER, NO_DIFFERENCE, WORSE, bracket_difference, paired_replicates, rounds_difference
from stats.sequential import CONTINUE, SequentialRule, fixed_rounds
from sweeps.capacity_unit import USERS, of_load, refuse_mixed
from sweeps.figures import AB_METRICS, run_values
from sweeps.folder_lock import lock_folder
from sweeps.grid import Point, build_grid, check_template, points
from sweeps.journal import Journal
from sweeps.load import RUN_ID, SLACK_S, UNKNOWN_RUN_S, check_load_args, is_complete, locust_argv, run_time_s
from sweeps.servers import RunningServer, SimulatorServer, TemplateServer
from sweeps.sweep import run_one, run_unit

EXIT_NO_WORSE, EXIT_WORSE, EXIT_BAD_INPUT, EXIT_NOT_MEASURED, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
AB_JSON, AB_MD = "ab.json", "ab.md"
DIRECTION = {name: higher for name, _b, higher, _u in AB_METRICS} | {"capacity": True}
NO_POINT = Point(0, {}, {})


def add_arguments(ap, common) -> None:
    for side in ("a", "b"):
        S = side.upper()
        ap.add_argument(
            f"--{side}-server", default=None, help=f"{S}: a command template with {{port}}, started per run"
        )
        ap.add_argument(f"--{side}-url", default=None, help=f"{S}: a server already running at this URL")
        ap.add_argument(
            f"--{side}-set",
            action="append",
            default=[],
            metavar="NAME=VALUE",
            help=f"{S}: a simulator profile field over --profile (repeatable)",
        )
    ap.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="rounds to run (each: one run of A, one of B); "
        "default: the sequential rule between --min-rounds and --max-rounds",
    )
    ap.add_argument(
        "--min-rounds", type=int, default=2, help="sequential rule: first look after this many rounds (default 2)"
    )
    ap.add_argument("--max-rounds", type=int, default=6, help="sequential rule: the budget of rounds (default 6)")
    ap.add_argument(
        "--min-effect",
        type=float,
        default=5.0,
        help="sequential rule: the smallest change worth finding, %% of A (default 5); stops once the "
        "interval lies within +-this",
    )
    ap.add_argument(
        "--primary",
        default=None,
        help="the metric the rule watches: capacity with a capacity search as "
        "the load, else ttft.p95 (or tpot.p95, e2e.p95, total_tokens_per_s, goodput_per_s)",
    )
    ap.add_argument(
        "--gate",
        default=None,
        help="metrics whose 'worse' fails the exit code, comma-separated, or all (default: the primary metric)",
    )
    common(ap)


def config(args, side: str, start_timeout: float):
    server, url, sets = getattr(args, f"{side}_server"), getattr(args, f"{side}_url"), getattr(args, f"{side}_set")
    given = [x for x in (server, url, sets or None) if x]
    S = side.upper()
    if len(given) != 1:
        raise InputError(
            f"--{side}-server / --{side}-url / --{side}-set: give exactly one way to run {S} (got {len(given)})"
        )
    if server:
        check_template(server, {}, option=f"--{side}-server")
        return TemplateServer(server, start_timeout)
    if url:
        if not url.startswith(("http://", "https://")):
            raise InputError(f"--{side}-url {url}: give the server's base URL, e.g. http://127.0.0.1:8000")
        return RunningServer(url)
    for text in sets:
        if "," in text:
            raise InputError(f"--{side}-set {text!r}: write NAME=VALUE, one value (a profile field of the simulator)")
    (point,) = points(build_grid(sets))
    sim = SimulatorServer(args.profile or "v100-7b-tp8", start_timeout, extra=point.values)
    sim.check(NO_POINT, option=f"--{side}-set")
    return sim


def describe(server) -> str:
    if isinstance(server, TemplateServer):
        return server.template
    if isinstance(server, RunningServer):
        return server.url
    return f"simulator {server.base_name} with {server.label}"


def main_ab(args, load: list[str], command: str) -> int:
    from core.durations import parse_duration

    check_load_args(load)
    start_timeout = parse_duration("start-timeout", args.start_timeout)
    a, b = config(args, "a", start_timeout), config(args, "b", start_timeout)
    if args.rounds is not None:
        if args.rounds < 1:
            raise InputError("--rounds: give a whole number >= 1")
        rule = fixed_rounds(args.rounds)
    else:
        if not 1 <= args.min_rounds <= args.max_rounds:
            raise InputError("--min-rounds, --max-rounds: give 1 <= --min-rounds <= --max-rounds")
        rule = SequentialRule(args.min_rounds, args.max_rounds, args.min_effect)
    primary = args.primary or ("capacity" if of_load(load) is not None else "ttft.p95")
    if primary not in DIRECTION:
        raise InputError(f"--primary {primary}: choose one of {', '.join(DIRECTION)}")
    gate = list(DIRECTION) if args.gate == "all" else [g.strip() for g in (args.gate or primary).split(",")]
    for g in gate:
        if g not in DIRECTION:
            raise InputError(f"--gate {g}: choose among {', '.join(DIRECTION)}, or all")
    t = run_time_s(load)
    bound = (
        parse_duration("point-timeout", args.point_timeout)
        if args.point_timeout
        else (t + SLACK_S if t else UNKNOWN_RUN_S)
    )
    ab = AB(args.out, a, b, load, args.seed, bound, rule, primary, gate, command)
    if args.dry_run:
        ab.dry_run()
        return 0
    return ab.run()


class AB:
    def __init__(self, folder, a, b, load, seed, bound, rule: SequentialRule, primary, gate, command, say=None):
        self.folder, self.configs, self.load, self.seed, self.bound = folder, {"A": a, "B": b}, load, seed, bound
        self.rule, self.primary, self.gate, self.command = rule, primary, gate, command
        self.say = say or (lambda line: print(line, flush=True))

    def run_folder(self, r: int, side: str) -> str:
        return os.path.join(self.folder, f"round-{r:02d}", side)

    @staticmethod
    def order(r: int) -> tuple[str, str]:
        return ("A", "B") if r % 2 == 1 else ("B", "A")

    def round_seed(self, r: int) -> int:
        return self.seed + r - 1

    def dry_run(self) -> None:
        self.check_units()
        self.say(f"A: {describe(self.configs['A'])}\nB: {describe(self.configs['B'])}")
        self.say(f"rounds: {self._rule_text()}")
        for r in range(1, self.rule.max_rounds + 1):
            for side in self.order(r):
                argv = locust_argv("http://127.0.0.1:PORT", self.run_folder(r, side), self.load, self.round_seed(r))
                self.say(f"round {r} {side}: {shlex.join(argv)}")

    def _rule_text(self) -> str:
        if self.rule.min_rounds == self.rule.max_rounds:
            return f"{self.rule.max_rounds} (given), 95 % intervals"
        return (
            f"sequential: {self.rule.min_rounds} to {self.rule.max_rounds}, stop once the {self.primary} interval "
            f"excludes 0 or lies within +-{self.rule.min_effect_pct:g} %; each look at "
            f"{self.rule.look_confidence:.2%} confidence (Bonferroni over {self.rule.looks} looks)"
        )

    def run(self) -> int:
        with lock_folder(self.folder):
            return self._run()

    def check_units(self) -> None:
        """The load and the runs already complete in the folder search capacity in one unit."""
        done = {
            f"complete run round {r} {side}": run_unit(self.run_folder(r, side))
            for r in range(1, self.rule.max_rounds + 1)
            for side in "AB"
            if is_complete(self.run_folder(r, side))
        }
        refuse_mixed({"this load": of_load(self.load)} | done)

    def _run(self) -> int:
        self.check_units()
        os.makedirs(self.folder, exist_ok=True)
        journal = Journal(self.folder)
        journal.write("ab_start", command=self.command, rule=self._rule_text())
        self.say(f"A: {describe(self.configs['A'])}\nB: {describe(self.configs['B'])}\nrounds: {self._rule_text()}")
        values: dict[str, list[dict]] = {"A": [], "B": []}
        result, decision = None, CONTINUE
        try:
            for r in range(1, self.rule.max_rounds + 1):
                for side in self.order(r):
                    folder = self.run_folder(r, side)
                    head = f"round {r}/{self.rule.max_rounds} {side}"
                    if is_complete(folder):
                        self.say(f"{head}: complete results folder, not run again")
                    else:
                        self.say(f"{head}: starting")
                        out = run_one(
                            self.configs[side],
                            NO_POINT,
                            folder,
                            self.load,
                            self.round_seed(r),
                            self.bound,
                            journal,
                            self.say,
                            head,
                        )
                        write_atomic(
                            os.path.join(folder, "outcome.json"), json.dumps(out, indent=2, default=str) + "\n"
                        )
                        if out["status"] != "done":
                            self.say(f"{head}: {out['status']} ({out.get('why')}); the A/B cannot go on")
                            journal.write("ab_end", status="not measured", side=side, round=r, why=out.get("why"))
                            return EXIT_NOT_MEASURED
                    # both runs of a round under one role "round" (a paired bootstrap), and each under its own
                    values[side].append(run_values(os.path.join(folder, RUN_ID), self.round_seed(r), ("round", side)))
                result = self.compare(values)
                p = result["metrics"].get(self.primary)
                lo_pct, hi_pct = (p["lo_pct"], p["hi_pct"]) if p else (None, None)
                decision = self.rule.decide(r, lo_pct, hi_pct, bool(p) and p["verdict"] in (BETTER, WORSE))
                self.say(f"round {r}: {_named(self.primary, p)} {_pct(p)}; {decision}")
                journal.write(
                    "round_end",
                    round=r,
                    primary=self.primary,
                    diff_pct=p and p["diff_pct"],
                    lo_pct=lo_pct,
                    hi_pct=hi_pct,
                    decision=decision,
                )
                if decision != CONTINUE:
                    break
        except KeyboardInterrupt:
            journal.write("ab_interrupted")
            self.say("A/B interrupted; run the same command again to resume (complete runs are not run again)")
            return EXIT_INTERRUPTED
        result["stopped"] = decision
        code = (
            EXIT_WORSE
            if any(result["metrics"].get(g, {}).get("verdict") == WORSE for g in self.gate)
            else EXIT_NO_WORSE
        )
        result["exit_code"] = code
        self.write(result)
        journal.write("ab_end", exit_code=code, stopped=decision)
        return code

    def compare(self, values: dict[str, list[dict]]) -> dict:
        conf = self.rule.look_confidence
        n = len(values["A"])
        paired = paired_replicates(n)
        metrics = {}
        for name, _boot, higher, unit in AB_METRICS:
            a = [v[name] for v in values["A"]]
            b = [v[name] for v in values["B"]]
            if any(x[0] is None for x in a + b):
                continue
            have = all(x[1] is not None for x in a + b)
            reps_a = [x[1]["round" if paired else "A"] for x in a] if have else None
            reps_b = [x[1]["round" if paired else "B"] for x in b] if have else None
            d = rounds_difference([x[0] for x in a], [x[0] for x in b], higher, conf, reps_a, reps_b)
            lo_pct, hi_pct = d.interval_pct
            metrics[name] = {
                "unit": unit,
                "a": d.a,
                "b": d.b,
                "diff": d.diff,
                "diff_pct": d.diff_pct,
                "lo": d.lo,
                "hi": d.hi,
                "lo_pct": lo_pct,
                "hi_pct": hi_pct,
                "detectable": d.half_width,
                "detectable_pct": d.detectable_pct,
                "verdict": d.verdict,
                "within": d.within,
                "between": d.between,
            }
        caps_a = [v.get("capacity") for v in values["A"]]
        caps_b = [v.get("capacity") for v in values["B"]]
        unit = refuse_mixed(
            {f"round {i} {side}": v.get("capacity_unit") for side in "AB" for i, v in enumerate(values[side], 1)}
        )
        if caps_a and all(c is not None for c in caps_a + caps_b):
            lo, hi, verdict = bracket_difference(caps_a, caps_b)
            ma = sum(c[0] for c in caps_a) / len(caps_a)
            mb = sum(c[0] for c in caps_b) / len(caps_b)
            pct = lambda x: None if x is None or not ma else x / ma * 100  # noqa: E731
            half = (hi - lo) / 2 if lo is not None and hi is not None else None
            metrics["capacity"] = {
                "unit": unit or USERS,
                "a": ma,
                "b": mb,
                "diff": mb - ma,
                "diff_pct": pct(mb - ma),
                "lo": lo,
                "hi": hi,
                "lo_pct": pct(lo),
                "hi_pct": pct(hi),
                "detectable": half,
                "detectable_pct": pct(half),
                "verdict": verdict,
                "within": None,
                "between": None,
            }
        return {
            "rounds": n,
            "confidence": conf,
            "replicates": "paired" if paired else "independent",
            "rule": self._rule_text(),
            "primary": self.primary,
            "gate": self.gate,
            "a": describe(self.configs["A"]),
            "b": describe(self.configs["B"]),
            "load": self.load,
            "command": self.command,
            "metrics": metrics,
        }

    def write(self, result: dict) -> None:
        write_atomic(os.path.join(self.folder, AB_JSON), json.dumps(result, indent=2, default=str) + "\n")
        lines = table(result)
        write_atomic(os.path.join(self.folder, AB_MD), markdown(result, lines))
        for line in lines:
            self.say(line)
        self.say(summary_line(result))
        self.say(f"written: {os.path.join(self.folder, AB_JSON)}, {os.path.join(self.folder, AB_MD)}")


def _num(x, unit="") -> str:
    if x is None:
        return "-"
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:,.3g}"


def _detectable(pct: float | None) -> str:
    return "-" if pct is None else f"±{pct:.1f} %"


def _signed(x) -> str:
    return "-" if x is None else f"{x:+.1f}"


def _pct(m: dict | None) -> str:
    if not m or m.get("diff_pct") is None:
        return "no value"
    return f"{_signed(m['diff_pct'])} % [{_signed(m['lo_pct'])}, {_signed(m['hi_pct'])}] % ({m['verdict']})"


def _named(name: str, m: dict | None) -> str:
    """A metric with its unit: 'capacity (requests/s)'."""
    return f"{name} ({m['unit']})" if m else name


HEADERS = ["metric", "A", "B", "B - A", "B - A %", "interval %", "verdict", "smallest detectable"]


def table(result: dict) -> list[str]:
    rows = []
    for name, m in result["metrics"].items():
        rows.append(
            [
                _named(name, m),
                _num(m["a"]),
                _num(m["b"]),
                _num(m["diff"]),
                _signed(m["diff_pct"]) + " %",
                f"[{_signed(m['lo_pct'])}, {_signed(m['hi_pct'])}]",
                m["verdict"],
                "-" if m["detectable_pct"] is None else f"±{m['detectable_pct']:.1f} %",
            ]
        )
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(HEADERS)]

    def fmt(cells):
        return "  ".join(c.ljust(w) if i in (0, 6) else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    return [fmt(HEADERS), "-" * (sum(widths) + 2 * (len(widths) - 1))] + [fmt(r) for r in rows]


def summary_line(result: dict) -> str:
    p = result["metrics"].get(result["primary"])
    worse = [g for g in result["gate"] if result["metrics"].get(g, {}).get("verdict") == WORSE]
    name = _named(result["primary"], p)
    head = f"B against A after {result['rounds']} rounds ({result.get('stopped', '')}): {name} {_pct(p)}"
    if p and p["verdict"] == NO_DIFFERENCE and p.get("detectable_pct") is not None:
        head += f"; a change smaller than ±{p['detectable_pct']:.1f} % could not have been detected"
    return head + (f"; WORSE on {', '.join(worse)}" if worse else "; no gated metric worse")


def markdown(result: dict, lines: list[str]) -> str:
    out = [
        f"## A/B: {result['a']} (A) against {result['b']} (B)",
        "",
        f"**{summary_line(result)}**",
        "",
        f"Rounds: {result['rule']}. Load: `{' '.join(result['load'])}`. Interval: {result['confidence']:.2%} "
        "(stats/rounds.py: the larger of the within-run bootstrap and the between-round t half-widths). "
        "*Smallest detectable*: the interval's half-width in % of A; a smaller change reads as no difference.",
        "",
        "| " + " | ".join(HEADERS) + " |",
        "| --- |" + " ---: |" * 5 + " --- | ---: |",
    ]
    for name, m in result["metrics"].items():
        out.append(
            f"| {_named(name, m)} | {_num(m['a'])} | {_num(m['b'])} | {_num(m['diff'])} | {_signed(m['diff_pct'])} % | "
            f"[{_signed(m['lo_pct'])}, {_signed(m['hi_pct'])}] | {m['verdict']} | "
            f"{_detectable(m['detectable_pct'])} |"
        )
    return "\n".join(out) + "\n"


__all__ = ["AB", "add_arguments", "main_ab", "BETTER", "WORSE", "NO_DIFFERENCE"]
