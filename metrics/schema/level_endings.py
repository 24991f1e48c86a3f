"""How a capacity search's load level ended (summary.json `capacity.levels[].ended`, written by
shapes/capacity.py), and the words each surface says it with: the console's line as the level
ends (shapes/capacity.py), the answer's list of levels tried (metrics/capacity.py) and the web UI's
status of the level (webui/live_steps.py). One table, so that a new ending is worded everywhere or
nowhere, and a level reads the same on every surface.

A level that -t ended before its warm-up did is stored as `time`, with its `seconds` no more than
its `warmup_s`: nothing of it was judged (summary.json's by_step has no row for it, and
`capacity.undecided` leaves it out), so every surface says "not judged" rather than its verdict
(CUT_IN_WARMUP).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True, slots=True)
class EndingWords:
    """One ending in each surface's words. The templates may take `seconds` (from the level's change
    to its end), `looks` ("2 looks") and `far_below` (the share of its threshold under which a level
    is passed, shapes.capacity.FAR_BELOW)."""

    log: str  # the console's line, after the verdict and "; " ("": nothing after the verdict)
    sentence: str  # the answer's list, in parentheses after the state ("": the verdict's margin instead)
    live: str  # the web UI's status of the level
    verdict: str | None = None  # said in place of the level's verdict (None: its own)


ENDINGS: dict[str, EndingWords] = {
    # met or missed at a look (a fixed hold: at the end of a step)
    "decided": EndingWords(log="", sentence="", live="decided in {seconds:g}s ({looks})"),
    # held to its longest and still undecided
    "held": EndingWords(
        log="held {seconds:g}s, still undecided",
        sentence="held to its longest, undecided",
        live="held {seconds:g}s, undecided",
    ),
    # while no level had missed, too few values for its longest hold: passed on the higher levels' verdicts
    "short": EndingWords(
        log="too few values for its longest hold: passed on the next levels' verdicts",
        sentence="too few values, passed on the levels above",
        live="passed over: too few values for its longest hold, judged by the levels above",
    ),
    # while no level had missed, too few values yet, all far under the threshold: passed likewise
    "passed": EndingWords(
        log="far below the threshold (under {far_below:.0%}): passed on the next level's verdict",
        sentence="far under, passed on the levels above",
        live="passed over: far under the threshold, judged by the levels above",
    ),
    # left undecided once the curve through the levels placed the crossing (shapes/search/curve.py)
    "placed": EndingWords(
        log="undecided, left: the curve through the levels places the crossing",
        sentence="undecided, left once the curve placed the crossing",
        live="left undecided after {seconds:g}s: the curve through the levels places the crossing",
    ),
    # -t ended it (in its warm-up: CUT_IN_WARMUP)
    "time": EndingWords(log="-t ended it", sentence="ended by -t", live="ended by -t"),
}
CUT_IN_WARMUP = EndingWords(
    log="-t ended it in its warm-up",
    sentence="cut by -t in its warm-up",
    live="not judged: cut by -t in its warm-up",
    verdict="not judged",
)

Ending = Literal[tuple(ENDINGS)]  # the values summary.json may carry (SearchLevel.ended)


def ending_words(ended: str, seconds: float | None, warmup_s: float | None) -> EndingWords:
    """The words of a level's ending: CUT_IN_WARMUP for one that -t ended before its warm-up did
    (as metrics.summary.by_step finds it: a window that ends at or before its start has no row)."""
    if ended == "time" and seconds is not None and warmup_s is not None and seconds <= warmup_s:
        return CUT_IN_WARMUP
    return ENDINGS[ended]
