"""What a capacity search counts, users or requests/s, and the refusal to compare the two.

A search in users (`--find-capacity`, or a step ramp `--steps` with `--slo`) answers with a user
count; a search in requests/s (`--find-capacity --capacity-unit rate`, or `--rate-steps` with
`--slo`) answers with an open-loop rate (summary.json `capacity.unit` "rate", its answer in `rate`
and `next_failing_rate`). 96 users and 9.6 requests/s are not on one scale: a sweep or an A/B whose
runs mix the two ranks nothing and compares nothing, it is refused. Every point of a sweep and
both sides of an A/B run the same load, so a mix comes from the folder being resumed: runs made
complete by an earlier command whose load searched in the other unit. That is checked before any
server starts; a load that does not say its unit on the command line (a config file) is checked
again once its runs are read back.
"""

from __future__ import annotations

from core.errors import InputError

USERS = "users"
RATE = "requests/s"


def of_capacity(cap) -> str | None:
    """The unit of summary.json's `capacity` (None: the run had no capacity answer)."""
    if cap is None:
        return None
    return RATE if cap.unit == "rate" else USERS


def _value(args: list[str], name: str) -> str | None:
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None


def _given(args: list[str], name: str) -> bool:
    return any(a == name or a.startswith(name + "=") for a in args)


def of_load(args: list[str]) -> str | None:
    """The unit the load arguments search in; None: they make no capacity search (or do not say so
    on the command line)."""
    if _given(args, "--find-capacity"):
        return RATE if _value(args, "--capacity-unit") == "rate" else USERS
    if _given(args, "--slo"):
        if _given(args, "--rate-steps"):
            return RATE
        if _given(args, "--steps"):
            return USERS
    return None


def refuse_mixed(units: dict[str, str | None]) -> str | None:
    """The one unit of `units` ({what: its unit}, None where it has no capacity); one line naming
    each side when they mix users and requests/s."""
    by_unit: dict[str, list[str]] = {}
    for what, unit in units.items():
        if unit is not None:
            by_unit.setdefault(unit, []).append(what)
    if len(by_unit) > 1:
        sides = "; ".join(f"{_names(whats)}: {unit}" for unit, whats in sorted(by_unit.items()))
        raise InputError(
            f"--capacity-unit: capacity searches in two units ({sides}), whose capacities are not "
            "comparable; give every run one --capacity-unit (a load in the other unit: another --out)"
        )
    return next(iter(by_unit), None)


def _names(whats: list[str]) -> str:
    shown = ", ".join(whats[:3])
    return shown + (f" and {len(whats) - 3} more" if len(whats) > 3 else "")
