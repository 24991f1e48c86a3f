"""`python -m reports compare BASE NEW`: side-by-side metrics, deltas, and whether they are beyond noise.

Values are exact, computed from the per-request records as metrics/summary.py computes them (the
same window, the same `distribution` function). Whether a difference is beyond noise is decided by
a bootstrap confidence interval of the difference (NEW - BASE), which is "significant" only when
it excludes 0.

The bootstrap resamples *time blocks*, not single requests: the measurement window (of the run,
or of a load step) is cut into K equal blocks, and each of B resamples (default 1000, seeded)
draws K blocks with replacement (multinomial weights). A statistic of a resample is the statistic
of the records in the drawn blocks, weighted by how often each block was drawn. Requests close in
time share the server's state (queue, batch), so their latencies are correlated; whole blocks keep
that correlation inside the resample and give honest (wider) intervals than resampling requests.
The same method serves every metric:

  latency percentiles  weighted quantile ('linear', as numpy) of the drawn blocks' values; values
                       are sorted once and, above 20000 values, grouped into 20000 groups of
                       consecutive ranks (the interval's precision, never the reported value)
  latency mean         weighted mean
  ITL                  every gap belongs to its request's block (gaps of one request stay together)
  throughput           completions per block by completion time, tokens per block by arrival
                       (as summary.json counts them); a resample's rate is its total over the
                       window length
  error_rate           failed / ended requests of the drawn blocks

Both runs are resampled independently; the interval is the central `confidence` range of the B
differences (percentile method).
"""

from __future__ import annotations

import json
import math
import os
import re
import zlib
from dataclasses import dataclass
from urllib.parse import urlsplit

import numpy as np
import pyarrow as pa

from core.errors import InputError
from core.files import write_atomic
from metrics.record import NOT_SERVER_FAILURES
from metrics.summary import distribution
from metrics.timing import itl_gaps
from reports.data import RunData, client_warning, load_run
from reports.junit import Case, write_junit
from reports.series import tokens_by_interval

LATENCY = ("ttft", "ttfa", "tpot", "itl", "e2e")
STATS = ("mean", "p50", "p90", "p95", "p99")
RATES = ("requests_per_s", "output_tokens_per_s", "total_tokens_per_s")
METRIC_NAMES = [f"{m}.{s}" for m in LATENCY for s in STATS] + list(RATES) + ["error_rate"]
UNITS = {**{f"{m}.{s}": "ms" for m in LATENCY for s in STATS}, "requests_per_s": "req/s",
         "output_tokens_per_s": "tok/s", "total_tokens_per_s": "tok/s", "error_rate": "%"}  # fmt: skip
MAX_GROUPS = 20_000  # exact up to this many values; above, rank groups of n / 20000 values


# ---------------------------------------------------------------------------------------------
# rules

_RULE = re.compile(
    r"^\s*(?:(?P<scope>[A-Za-z0-9_\-]+)\.)?(?P<metric>(?:ttft|ttfa|tpot|itl|e2e)\.(?:mean|p50|p90|p95|p99)|requests_per_s|"
    r"output_tokens_per_s|total_tokens_per_s|error_rate)\s*(?P<op>[<>])\s*(?P<sign>[+-]?)\s*(?P<value>\d+(?:\.\d*)?)\s*"
    r"(?P<unit>%|ms|s|pp)?\s*$"
)
RULE_HELP = (
    "write [CLASS.|stepN.]METRIC>+N% or METRIC<-N%, with METRIC one of ttft|ttfa|tpot|itl|e2e . mean|p50|p90|p95|p99, "
    "requests_per_s, output_tokens_per_s, total_tokens_per_s, error_rate; N% is a relative change, "
    "Nms/Ns an absolute one for latencies, Npp percentage points for error_rate; "
    "e.g. 'ttft.p95>+10%,output_tokens_per_s<-5%,short.e2e.p99>+200ms'"
)


@dataclass(frozen=True)
class Rule:
    text: str
    scope: str  # "overall", a class name, or "step:N"
    metric: str
    op: str  # ">" regression when the change is above the threshold, "<" below
    threshold: float
    relative: bool  # threshold in % of the base value, else in the metric's unit

    def describe(self) -> str:
        return self.text


def parse_rules(text: str) -> list[Rule]:
    rules = []
    for part in [p.strip() for p in (text or "").split(",") if p.strip()]:
        m = _RULE.match(part)
        if not m:
            hint = ""
            stat = re.match(r"^\s*(?:\w+\.)?(ttft|tpot|itl|e2e)\s*[<>]", part)
            if stat:
                hint = f" (name a statistic, e.g. {stat.group(1)}.p95)"
            raise InputError(f"--fail-on: cannot read rule '{part}'{hint}; {RULE_HELP}")
        metric, unit = m["metric"], m["unit"] or ""
        value = float(m["value"]) * (-1 if m["sign"] == "-" else 1)
        is_latency = metric.split(".")[0] in LATENCY
        example = f"{metric}{m['op']}{m['sign'] or '+'}{m['value']}%"
        if unit in ("ms", "s") and not is_latency:
            raise InputError(f"--fail-on: rule '{part}': {unit} applies to latencies only; use %, e.g. '{example}'")
        if unit == "pp" and metric != "error_rate":
            raise InputError(f"--fail-on: rule '{part}': pp (percentage points) applies to error_rate only; use %, e.g. '{example}'")
        if unit == "" and m["value"]:
            raise InputError(f"--fail-on: rule '{part}': give a unit for the threshold: % (relative)"
                            f"{', ms or s' if is_latency else (', pp' if metric == 'error_rate' else '')}; {RULE_HELP}")
        if unit == "s":
            value *= 1000.0
        scope = m["scope"] or "overall"
        step = re.fullmatch(r"step(\d+)", scope)
        rules.append(Rule(part, f"step:{int(step.group(1))}" if step else scope, metric, m["op"], value, unit == "%"))
    return rules


# ---------------------------------------------------------------------------------------------
# data of one run


@dataclass
class Prepared:
    run: RunData
    wall: np.ndarray
    done: np.ndarray
    ok: np.ndarray
    failed: np.ndarray  # failed, neither "stopped" nor "cancelled" (not server failures)
    cls: np.ndarray
    step: np.ndarray
    values: dict  # metric -> (sorted seconds of the successful records, the record of each value)


def prepare(path: str) -> Prepared:
    run = load_run(path)
    df = run.df
    wall = df["wall_send"].to_numpy(dtype=float)
    e2e = df["e2e_s"].to_numpy(dtype=float)
    ok = df["ok"].to_numpy(dtype=bool)
    failed = ~ok & ~df["error"].isin(NOT_SERVER_FAILURES).to_numpy()
    ok_idx = np.nonzero(ok)[0]
    gaps, rows = itl_gaps(run.chunk_times.filter(pa.array(ok)))
    values = {"itl": _sorted(gaps, ok_idx[rows])}  # sorted once; a scope's subset of a sorted array stays sorted
    for metric in ("ttft", "ttfa", "tpot", "e2e"):
        v = df[f"{metric}_s"].to_numpy(dtype=float)
        good = ok & ~np.isnan(v)
        values[metric] = _sorted(v[good], np.nonzero(good)[0])
    return Prepared(
        run, wall, wall + e2e, ok, failed, df["request_class"].astype(str).to_numpy(), df["step"].to_numpy(),
        values,
    )  # fmt: skip


def _sorted(v: np.ndarray, owner: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(v, kind="stable")
    return v[order], owner[order]


@dataclass
class Scope:
    key: str  # "overall" | class name | "step:N"
    label: str
    start: float
    end: float
    select: np.ndarray  # records of the scope sent in its window: latency and outcomes
    group: np.ndarray | bool = True  # records whose completions in the window count for throughput


def scopes(p: Prepared) -> dict[str, Scope]:
    """As metrics/summary.py cuts them: latency from the requests sent in the window; throughput
    from the successful requests of the group (all, or the class) completed in it, whenever sent."""
    start, end = p.run.window
    inside = (p.wall >= start) & (p.wall <= end)
    out = {"overall": Scope("overall", "overall", start, end, inside)}
    for name in sorted(set(p.cls[inside].tolist())):
        out[name] = Scope(name, f"class {name}", start, end, inside & (p.cls == name), p.cls == name)
    for st in p.run.summary.by_step or []:
        s, e = st.window.start, st.window.end
        out[f"step:{st.step}"] = Scope(f"step:{st.step}", f"step {st.step} ({st.users:g} users)", s, e,
                                       (p.step == st.step) & (p.wall >= s) & (p.wall <= e))  # fmt: skip
    return out


# ---------------------------------------------------------------------------------------------
# the block bootstrap


def n_blocks(window_s: float) -> int:
    """Time blocks of the bootstrap in one stratum: about 2 s each, at least 10 and at most 40."""
    return int(np.clip(round(window_s / 2.0), 10, 40))


def block_starts(p: Prepared, sc: Scope) -> tuple[np.ndarray, list[int]]:
    """The bootstrap's time blocks of a scope: their start times (sorted) and blocks per stratum.

    A run with load steps is stratified by step: its blocks are resampled within each step, so a
    resample keeps the run's mix of load levels (resampling blocks across a ramp would mix 5-user
    and 160-user periods at random and inflate every interval). A stratum spans the send times of
    its step's records in the scope, cut into equal blocks; without steps the scope's window is."""
    idx = np.nonzero(sc.select)[0]
    steps = p.step[idx]
    stratified = idx.size > 0 and not sc.key.startswith("step:") and bool((steps >= 0).all())
    strata = np.unique(steps) if stratified else np.empty(0)
    if strata.size <= 1:
        k = n_blocks(sc.end - sc.start)
        return np.linspace(sc.start, sc.end, k + 1)[:-1], [k]
    spans = sorted((float(p.wall[idx[steps == st]].min()), float(p.wall[idx[steps == st]].max())) for st in strata.tolist())
    starts, sizes = [], []
    for lo, hi in spans:  # one stratum per load step (a handful)
        k = n_blocks(hi - lo)
        starts.append(np.linspace(lo, hi, k + 1)[:-1])
        sizes.append(k)
    return np.maximum.accumulate(np.concatenate(starts)), sizes


def block_at(starts: np.ndarray, t: np.ndarray) -> np.ndarray:
    """The block of each time (before the first block: the first; after the last: the last)."""
    return np.clip(np.searchsorted(starts, t, side="right") - 1, 0, starts.size - 1).astype(np.int64)


def boot_quantiles(values: np.ndarray, blocks: np.ndarray, weights: np.ndarray, qs: list[float]) -> np.ndarray:
    """(B, len(qs)) bootstrap quantiles (numpy 'linear') of sorted `values` under block weights (B, K).

    counts[k, g] is how many values of rank group g lie in block k; with cum = cumsum over groups,
    the weighted count of values up to group g in resample b is weights[b] @ cum[:, g]. The group
    holding a given rank is found by a binary search run for all resamples at once: log2(groups)
    steps of a (B, K) product, never a (B, values) matrix."""
    b_count, k = weights.shape
    out = np.full((b_count, len(qs)), np.nan)
    n = values.size
    if n == 0:
        return out
    m = min(n, MAX_GROUPS)
    group = (np.arange(n) * m) // n  # consecutive ranks; one value per group when n <= MAX_GROUPS
    counts = np.bincount(blocks * m + group, minlength=k * m).reshape(k, m)
    cum = np.cumsum(counts, axis=1, dtype=np.float64)
    rep = np.bincount(group, weights=values, minlength=m) / np.bincount(group, minlength=m)
    total = weights @ cum[:, -1]

    def group_of(rank: np.ndarray) -> np.ndarray:
        """Smallest group g with weighted cum(g) > rank, per resample."""
        lo, hi = np.zeros(b_count, dtype=np.int64), np.full(b_count, m - 1, dtype=np.int64)
        for _ in range(int(math.ceil(math.log2(m))) + 1):
            mid = (lo + hi) // 2
            c = np.einsum("bk,kb->b", weights, cum[:, mid])
            right = c <= rank
            lo, hi = np.where(right, mid + 1, lo), np.where(right, hi, mid)
        return np.minimum(lo, m - 1)

    for j, q in enumerate(qs):
        h = (total - 1) * q / 100.0
        lo = np.floor(h)
        i_lo, i_hi = group_of(lo), group_of(np.minimum(lo + 1, total - 1))
        val = rep[i_lo] + (h - lo) * (rep[i_hi] - rep[i_lo])
        out[:, j] = np.where(total > 0, val, np.nan)
    return out


def boot_ratio(num_k: np.ndarray, den_k: np.ndarray, weights: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return (weights @ num_k) / (weights @ den_k)


def _weights(seed: int, key: str, role: str, b: int, sizes: list[int]) -> np.ndarray:
    """(b, sum(sizes)) multinomial block counts, drawn within each stratum."""
    rng = np.random.default_rng([seed, zlib.crc32(f"{role}|{key}".encode())])
    return np.hstack([rng.multinomial(k, np.full(k, 1.0 / k), size=b) for k in sizes]).astype(float)


def measure(p: Prepared, sc: Scope, seed: int, role: str, resamples: int) -> tuple[dict, int]:
    """Every metric of one scope: {metric: (exact value, bootstrap replicates)}, and the block count."""
    starts, sizes = block_starts(p, sc)
    weights = _weights(seed, sc.key, role, resamples, sizes)
    k = weights.shape[1]
    out = {}
    sel_ok = sc.select & p.ok
    blocks = np.full(p.wall.size, -1, dtype=np.int64)
    blocks[sc.select] = block_at(starts, p.wall[sc.select])  # latency: by send time
    for metric in LATENCY:
        sorted_s, owner = p.values[metric]
        keep = sel_ok[owner]
        vals_s, blk = sorted_s[keep], blocks[owner[keep]]
        vals = vals_s * 1000.0
        exact = distribution(vals_s)  # the summary's own function: the same numbers
        sums = np.bincount(blk, weights=vals, minlength=k)
        cnts = np.bincount(blk, minlength=k).astype(float)
        out[f"{metric}.mean"] = (exact.mean, boot_ratio(sums, cnts, weights))
        qs = boot_quantiles(vals, blk, weights, [50, 90, 95, 99])
        for j, stat in enumerate(("p50", "p90", "p95", "p99")):
            out[f"{metric}.{stat}"] = (exact.stat(stat), qs[:, j])
    # throughput: completions inside the window by completion time, tokens by arrival
    window = sc.end - sc.start
    fin = sc.group & p.ok & (p.done >= sc.start) & (p.done <= sc.end)
    completed = np.bincount(block_at(starts, p.done[fin]), minlength=k).astype(float)
    edges = np.maximum.accumulate(np.concatenate([[sc.start], starts[1:], [sc.end]]))
    out_tok, prompt_tok = tokens_by_interval(p.run, edges, sc.group)
    for name, per_block in (("requests_per_s", completed), ("output_tokens_per_s", out_tok), ("total_tokens_per_s", out_tok + prompt_tok)):
        value = float(per_block.sum() / window) if window > 0 else None
        out[name] = (value, (weights @ per_block) / window if window > 0 else np.full(weights.shape[0], np.nan))
    ended = sc.select & (p.ok | p.failed)
    f_k = np.bincount(blocks[sc.select & p.failed], minlength=k).astype(float)
    e_k = np.bincount(blocks[ended], minlength=k).astype(float)
    rate = float(f_k.sum() / e_k.sum() * 100) if e_k.sum() else None
    out["error_rate"] = (rate, boot_ratio(f_k, e_k, weights) * 100)
    return out, k


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


# ---------------------------------------------------------------------------------------------
# comparison


def compare(base_path: str, new_path: str, resamples: int = 1000, seed: int = 0, confidence: float = 0.95,
            rules: list[Rule] = (), allow_different: bool = False) -> dict:
    """The comparison of two runs; runs that measured different things (`differences`) are refused
    with one line naming them, unless `allow_different`, and then the differences head it."""
    base, new = prepare(base_path), prepare(new_path)
    differ = differences(base.run, new.run)
    if differ and not allow_different:
        raise InputError(f"the runs measured different things: {'; '.join(differ)}; compare runs of the same workload, "
                         f"load, server and model, or pass --allow-different to compare anyway")  # fmt: skip
    sb, sn = scopes(base), scopes(new)
    common = [k for k in sb if k in sn]
    for rule in rules:  # before the bootstrap: a rule naming a missing class is a usage error
        if rule.scope not in common:
            known = ", ".join(k for k in common if k != "overall") or "none"
            raise InputError(f"--fail-on: rule '{rule.text}': '{rule.scope}' is not a request class or step of both runs "
                            f"(classes and steps in both: {known})")
    alpha = (1 - confidence) / 2 * 100
    # the time to first answer token is TTFT itself unless a reply reasoned first: its rows only then
    # (or when a rule names it)
    answers = any(p.values["ttfa"][0].size and not np.array_equal(p.values["ttfa"][0], p.values["ttft"][0])
                  for p in (base, new)) \
        or any(r.metric.startswith("ttfa.") for r in rules)
    names = METRIC_NAMES if answers else [m for m in METRIC_NAMES if not m.startswith("ttfa.")]
    result = {
        "base": {"path": base.run.path, "run_id": base.run.run_id},
        "new": {"path": new.run.path, "run_id": new.run.run_id},
        "method": {"bootstrap": "time blocks (see reports/compare.py)", "resamples": resamples, "seed": seed,
                   "confidence": confidence, "significant": "the confidence interval of new - base excludes 0"},
        "differences": differ,
        "scopes": [],
        "only_in_base": sorted(set(sb) - set(sn)),
        "only_in_new": sorted(set(sn) - set(sb)),
        "warnings": [f"{role} run: {w}" for role, w in (("base", client_warning(base.run.summary)),
                                                          ("new", client_warning(new.run.summary))) if w],
    }  # fmt: skip
    for key in common:
        a, b = sb[key], sn[key]
        ma, ka = measure(base, a, seed, "base", resamples)
        mb, kb = measure(new, b, seed, "new", resamples)
        rows = []
        for metric in names:
            va, ra = ma[metric]
            vb, rb = mb[metric]
            row = {"metric": metric, "unit": UNITS[metric], "base": va, "new": vb, "delta": None, "delta_pct": None,
                   "ci": [None, None], "significant": False, "base_ci": _ci(ra, alpha), "new_ci": _ci(rb, alpha)}  # fmt: skip
            if va is not None and vb is not None:
                row["delta"] = vb - va
                row["delta_pct"] = _pct(va, vb)
                d = rb - ra
                d = d[np.isfinite(d)]
                if d.size >= 0.9 * resamples:  # too many empty resamples: no interval
                    lo, hi = np.percentile(d, [alpha, 100 - alpha])
                    row["ci"] = [float(lo), float(hi)]
                    row["significant"] = bool(lo > 0 or hi < 0)
            rows.append(row)
        result["scopes"].append({"scope": key, "label": b.label, "blocks": [ka, kb],
                                 "requests": [int(a.select.sum()), int(b.select.sum())], "metrics": rows})
    return result


def _ci(reps: np.ndarray, alpha: float) -> list:
    r = reps[np.isfinite(reps)]
    return [float(x) for x in np.percentile(r, [alpha, 100 - alpha])] if r.size else [None, None]


def _pct(a: float, b: float) -> float | None:
    if a == 0:
        return 0.0 if b == 0 else (math.inf if b > 0 else -math.inf)
    return (b - a) / abs(a) * 100.0


def judge(result: dict, rules: list[Rule]) -> list[dict]:
    """Each rule's verdict: it fails when the change is beyond its threshold AND significant."""
    by_scope = {s["scope"]: {r["metric"]: r for r in s["metrics"]} for s in result["scopes"]}
    verdicts = []
    for rule in rules:
        scope = by_scope.get(rule.scope)
        if scope is None:
            known = ", ".join(sorted(k for k in by_scope if k != "overall")) or "none"
            raise InputError(f"--fail-on: rule '{rule.text}': '{rule.scope}' is not a request class or step of both runs "
                            f"(classes and steps in both: {known})")
        row = scope[rule.metric]
        change = row["delta_pct"] if rule.relative else row["delta"]
        beyond = change is not None and (change > rule.threshold if rule.op == ">" else change < rule.threshold)
        failed = bool(beyond and row["significant"])
        if change is None and row["base"] is not None:  # e.g. not one successful request in NEW
            failed = True
            reason = "no value in the new run (no successful request to measure) while the base has one"
        elif change is None:
            reason = "no value in the base run: nothing to compare with"
        elif failed:
            reason = "regression: beyond the threshold and beyond noise"
        elif beyond:
            reason = "beyond the threshold but within noise (the interval includes 0)"
        else:
            reason = "within the threshold"
        verdicts.append({"rule": rule.text, "scope": rule.scope, "metric": rule.metric, "failed": failed, "change": change,
                         "relative": rule.relative, "significant": row["significant"], "ci": row["ci"], "unit": row["unit"],
                         "base": row["base"], "new": row["new"], "reason": reason})  # fmt: skip
    return verdicts


# ---------------------------------------------------------------------------------------------
# output


def _v(x, unit: str) -> str:
    if x is None:
        return "-"
    if isinstance(x, float) and math.isinf(x):
        return "+inf" if x > 0 else "-inf"
    digits = 3 if unit == "%" else (2 if abs(x) < 100 else 0)
    return f"{x:,.{digits}f}"


def _d(x, unit: str) -> str:
    s = _v(x, unit)
    return s if s in ("-", "+inf", "-inf") or s.startswith("-") else "+" + s


def rows_for(scope: dict) -> list[list[str]]:
    out = []
    for r in scope["metrics"]:
        u = r["unit"]
        ci = r["ci"]
        ci_text = f"[{_d(ci[0], u)}, {_d(ci[1], u)}]" if ci[0] is not None else "-"
        pct = "-" if r["delta_pct"] is None else (_d(r["delta_pct"], "") if math.isfinite(r["delta_pct"]) else _v(r["delta_pct"], ""))
        pct = pct if pct == "-" or "inf" in pct else pct + "%"
        out.append([f"{r['metric']} ({u})", _v(r["base"], u), _v(r["new"], u), _d(r["delta"], u), pct, ci_text,
                    "yes" if r["significant"] else ""])
    return out


HEADERS = ["metric", "base", "new", "delta", "delta %", "CI of delta", "beyond noise"]


def text_table(rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(HEADERS)]
    line = lambda cells: "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))  # noqa: E731
    return "\n".join([line(HEADERS), "-" * (sum(widths) + 2 * (len(widths) - 1))] + [line(r) for r in rows])


def markdown(result: dict, verdicts: list[dict]) -> str:
    m = result["method"]
    lines = [f"## Compare: `{result['base']['run_id']}` (base) vs `{result['new']['run_id']}` (new)", ""]
    if result.get("differences"):
        lines += ["> **The runs measured different things** (compared with --allow-different):", ">"]
        lines += [f"> - {d}" for d in result["differences"]] + [""]
    if verdicts:
        failed = [v for v in verdicts if v["failed"]]
        lines.append(f"**{'REGRESSION: ' + ', '.join(_vname(v) for v in failed) if failed else 'No regression'}** "
                     f"(rules: {', '.join('`' + v['rule'] + '`' for v in verdicts)})")
        lines += ["", "| rule | change | beyond noise | verdict | why |", "| --- | ---: | --- | --- | --- |"]
        for v in verdicts:
            lines.append(f"| `{v['rule']}` | {change_text(v)} | {'yes' if v['significant'] else 'no'} | "
                         f"{'**FAIL**' if v['failed'] else 'pass'} | {v['reason']} |")
        lines.append("")
    lines += [f"> **Warning:** {w}" for w in result.get("warnings", [])] + ([""] if result.get("warnings") else [])
    lines += [f"Deltas are new - base. *Beyond noise*: the {m['confidence']:.0%} bootstrap interval of the difference excludes 0 "
              f"({m['resamples']} resamples of time blocks, seed {m['seed']}). With many rows, about "
              f"{1 - m['confidence']:.0%} of unchanged metrics are flagged by chance; gate on a few named rules.", ""]
    for s in result["scopes"]:
        lines += [f"### {s['label']}", "", f"requests in window: base {s['requests'][0]:,}, new {s['requests'][1]:,}; "
                  f"time blocks: base {s['blocks'][0]}, new {s['blocks'][1]}", ""]
        lines.append("| " + " | ".join(HEADERS) + " |")
        lines.append("| --- | " + " | ".join("---:" for _ in HEADERS[1:]) + " |")
        lines += ["| " + " | ".join(r) + " |" for r in rows_for(s)]
        lines.append("")
    for side in ("only_in_base", "only_in_new"):
        if result[side]:
            lines.append(f"_{side.replace('_', ' ')}: {', '.join(result[side])}_")
    return "\n".join(lines) + "\n"


def _vname(v: dict) -> str:
    """The metric as a rule names it: ttft.p95, short.ttft.p95, step3.ttft.p95."""
    return v["metric"] if v["scope"] == "overall" else f"{v['scope'].replace(':', '')}.{v['metric']}"


def change_text(v: dict) -> str:
    """A rule verdict's change as every output writes it (the compare's table and console, JUnit):
    '+28.64 %' for a relative rule, '+12.5 ms' or '+1.2 pp' (a share's points) for an absolute one."""
    c = v["change"]
    if c is None:
        return "-"
    if math.isinf(c):
        return "+inf %" if c > 0 else "-inf %"
    unit = v.get("unit", "")
    return f"{c:+.2f} %" if v["relative"] else f"{c:+,.4g} {'pp' if unit == '%' else unit}".rstrip()


def compare_cases(verdicts: list[dict]) -> list[Case]:
    """The JUnit test cases of a compare: one per --fail-on rule (its verdict from `judge`)."""
    cases = []
    for v in verdicts:
        u = v.get("unit", "")
        measured = f"base {_num(v['base'], u)}, new {_num(v['new'], u)}, change {change_text(v)}; {v['reason']}"
        cases.append(Case("llm.compare", v["rule"], measured if v["failed"] else None, measured))
    return cases


def _num(x, unit: str) -> str:
    return "-" if x is None else f"{x:,.4g} {unit}".rstrip()


def run_compare(base: str, new: str, fail_on: str = "", out_dir: str | None = None, resamples: int = 1000,
                seed: int = 0, confidence: float = 0.95, junit: str | None = None, allow_different: bool = False) -> int:
    rules = parse_rules(fail_on)  # a bad rule is an error before any work
    if resamples < 100:
        raise InputError("--resamples: use at least 100 (default 1000)")
    if not 0.5 <= confidence < 1:
        raise InputError("--confidence: give a level between 0.5 and 1, e.g. 0.95")
    result = compare(base, new, resamples, seed, confidence, rules, allow_different)
    verdicts = judge(result, rules)
    result["rules"] = verdicts
    result["regression"] = any(v["failed"] for v in verdicts)
    out_dir = out_dir or result["new"]["path"]
    os.makedirs(out_dir, exist_ok=True)
    write_atomic(os.path.join(out_dir, "compare.json"), json.dumps(_json_safe(result), indent=2) + "\n")
    write_atomic(os.path.join(out_dir, "compare.md"), markdown(result, verdicts))
    if junit:
        write_junit(junit, f"compare {result['base']['run_id']} -> {result['new']['run_id']}", compare_cases(verdicts))
    m = result["method"]
    for d in result["differences"]:
        print(f"DIFFERENT {d}")
    print(f"compare: base {result['base']['run_id']} ({result['base']['path']})\n"
          f"         new  {result['new']['run_id']} ({result['new']['path']})\n"
          f"delta = new - base; beyond noise = the {m['confidence']:.0%} bootstrap interval of the delta excludes 0 "
          f"({m['resamples']} resamples of time blocks, seed {m['seed']})")
    for s in result["scopes"]:
        if s["scope"].startswith("step:"):
            continue
        print(f"\n{s['label']} (requests: base {s['requests'][0]:,}, new {s['requests'][1]:,})")
        print(text_table(rows_for(s)))
    steps = [s for s in result["scopes"] if s["scope"].startswith("step:")]
    if steps:
        print(f"\n{len(steps)} load steps compared (full tables in compare.md); changes beyond noise and >= 5 %:")
        for s in steps:
            flagged = [f"{r['metric']} {_d(r['delta_pct'], '')}%" for r in s["metrics"] if r["significant"]
                       and r["delta_pct"] is not None and math.isfinite(r["delta_pct"]) and abs(r["delta_pct"]) >= 5]
            more = f" and {len(flagged) - 6} more" if len(flagged) > 6 else ""
            print(f"  {s['label']}: {', '.join(flagged[:6]) + more if flagged else 'none'}")
    print(f"\nwritten: {os.path.join(out_dir, 'compare.md')}, {os.path.join(out_dir, 'compare.json')}" + (f", {junit}" if junit else ""))
    for w in result["warnings"]:
        print(f"\nwarning: {w}")
    if verdicts:
        print("\nrules:")
        for v in verdicts:
            print(f"  {'FAIL' if v['failed'] else 'pass'}  {v['rule']}: {change_text(v)} ({v['reason']})")
        failed = [v for v in verdicts if v["failed"]]
        if failed:
            print(f"REGRESSION: {', '.join(_vname(v) for v in failed)}")
            return 1
        print("no regression")
    return 0


def _json_safe(x):
    if isinstance(x, dict):
        return {k: _json_safe(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_json_safe(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None if math.isnan(x) else ("inf" if x > 0 else "-inf")
    if isinstance(x, (np.floating, np.integer, np.bool_)):
        return x.item()
    return x


__all__ = ["compare", "judge", "parse_rules", "run_compare", "Rule", "boot_quantiles"]
