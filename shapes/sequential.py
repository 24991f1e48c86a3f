"""When an adaptive capacity search looks at a level, at what confidence, and whether its levels
can be decided at all.

A level is judged as its values arrive, not once after a fixed window: at `LOOKS` looks at most,
on a schedule of judged times (after its warm-up; with workers less the records still on their
way) longest/2^(LOOKS-1), ..., longest/2, longest, where `longest` is the most a level may be held
(MAX_STEPS_PER_LEVEL x --step-time less its warm-up): the first look at the first point of it, the
next ones when the values a met needs are due (`next_look`), the last at `longest`. The level ends
at the first look that decides it; one still undecided at the last look ends undecided.

Looking again and again at a 90 % bound and stopping at the first look that decides would make a
wrong verdict more likely than 10 %: each look is another chance for the bound to fall on the
wrong side. Each look therefore uses the bound at 1 - 0.10 / LOOKS (98 % for 5 looks): by the
union (Bonferroni) bound, the chance that any of a level's looks declares it met when its true
percentile is at or above the threshold is at most LOOKS x 2 % = 10 %, and the same for a wrong
miss: the 90 % a single look at the end of a fixed window keeps. The price is values: a P95 needs
77 values to be met at 98 % (45 at 90 %); a bounded number of looks keeps that price small
however long a level is held. A look comes sooner than the next
doubling when the values come fast enough to reach that count before it (`next_look`): its time
then depends on how many values came, never on what they are, so the bound still holds.
"""

from __future__ import annotations

import math

LOOKS = 5  # looks per level at most: 98 % bounds each
FAMILY_CONFIDENCE = 0.90  # one-sided, per side and per level, over all its looks


def look_confidence(looks: int = LOOKS, family: float = FAMILY_CONFIDENCE) -> float:
    """The confidence of each look's bounds that keeps `family` over `looks` looks (Bonferroni)."""
    return 1.0 - (1.0 - family) / looks


def look_times(longest_s: float, first_s: float, looks: int = LOOKS) -> list[float]:
    """The judged seconds at which a level is looked at: longest / 2^k, k = looks-1 .. 0, none
    before `first_s` (the shortest judged part, shapes/capacity.MIN_JUDGED_S)."""
    times = sorted({max(first_s, longest_s / 2**k) for k in range(looks)})
    return [t for t in times if t <= max(longest_s, first_s)]


def next_look(
    judged_s: float, looked: int, schedule: list[float], values: int, need: int, grain_s: float, offset_s: float = 0.0
) -> float | None:
    """The judged seconds of a level's next look after one at `judged_s` left it undecided with
    `values` values of the `need` its objectives must have to be met (`looked` looks taken, at most
    len(schedule)); None when its looks are spent. The next point of the schedule, or sooner, when
    the values come fast enough to reach `need` before it: a look then, not at the next doubling.
    A look's time depends only on how many values have come, never on what they are, so the
    union bound over the looks holds; the last look is kept for the level's longest hold. The first
    `offset_s` of judged time give no values (a first-token objective's set ends its threshold before
    the cut), so the values are projected from the time after it. Short of
    `need`, the level can only be missed, which its first look catches when it is far over: the
    next look waits for the values a met needs rather than spend a look on the way."""
    if looked >= len(schedule):
        return None
    longest = schedule[-1]
    if looked == len(schedule) - 1:
        return longest
    later = [t for t in schedule if t > judged_s + 1e-9]
    point = later[0] if later else longest
    if 0 < values < need and judged_s > offset_s:  # no met is possible before `need` values: look when they are due
        due = offset_s + (judged_s - offset_s) * need / values * 1.05  # a little past the projection: the count varies
        point = min(longest, max(due, judged_s + grain_s))
    return point


def values_needed(objective, confidence: float) -> int:
    """The fewest values that can meet `objective` at `confidence`: a percentile q needs the upper
    bound's order statistic to exist, 1 - q^n >= confidence; a mean needs 2."""
    if objective.stat == "mean":
        return 2
    q = objective.percentile() / 100.0
    return math.ceil(math.log(1.0 - confidence) / math.log(q) - 1e-9)


def decidability(
    objectives, users: int, judged_s: float, confidence: float, reply_s: float | None = None, looks: int = LOOKS
) -> tuple[str, bool]:
    """(one line, True when a level can be decided) for the level at `users` held for at most
    `judged_s` judged seconds: how many values its objectives need and what reply time that asks
    of a closed loop (each user sends its next request when its reply ends). With `reply_s` (the
    replies seen so far) it says whether the level gets them, and the fixes when it does not."""
    need = max(values_needed(o, confidence) for o in objectives)
    which = max(objectives, key=lambda o: values_needed(o, confidence)).key
    most_s = users * judged_s / need  # the longest reply that still gets `need` values in time
    plural = "s" if users != 1 else ""
    head = (
        f"{which} needs {need} values per level to be met ({confidence * 100:.3g}% bounds{f' at each of up to {looks} looks' if looks > 1 else ''}); "
        f"at {users} user{plural} a level of at most {judged_s:.0f}s judged gets them with replies of {most_s:.2g}s or less"
    )
    if reply_s is None or reply_s <= most_s:
        return head + ("" if reply_s is None else f" (replies now {reply_s:.2g}s)"), True
    gets = int(users * judged_s / reply_s)
    longer = math.ceil(need * reply_s / users)
    more = math.ceil(need * reply_s / judged_s)
    return (
        f"capacity search: at {users} user{plural} a level gets about {gets} values in {judged_s:g}s (replies of "
        f"{reply_s:.2g}s) and {which} needs {need} to be met: give --step-time about {longer / 3:.0f}s or more, a lower "
        f"percentile, or start at {more} users or more (--steps {more},{2 * more},...); lower levels are passed on the "
        f"higher levels' verdicts"
    ), False
