"""When an A/B in rounds may stop: a sequential rule over the interval of its primary metric.

After each round from `min_rounds` on, the rule looks at the interval of the primary metric's
difference (stats/rounds.py) and stops when
  - the interval excludes 0, or the metric's own verdict says better or worse: the change is
    measured (a capacity's verdict is a rule on the search's brackets whose interval of the
    difference may touch 0 while it is measured: stats/rounds.py `bracket_difference`);
  - the interval lies within +-`min_effect_pct` % of A: any change is smaller than the smallest
    one worth finding, and more rounds would only narrow it further;
  - `max_rounds` rounds have run: the budget is spent.
Otherwise another round runs.

Looking after every round gives a false verdict more chances than one look would, so each look's
interval is taken at a confidence raised for the number of looks (Bonferroni): with L possible
looks (max_rounds - min_rounds + 1) and an overall `confidence`, each look uses
1 - (1 - confidence) / L. The chance of any false "better" or "worse" over all looks is then at
most 1 - confidence. The verdicts reported at the end use that same per-look confidence.
"""

from __future__ import annotations

from dataclasses import dataclass

CONTINUE, DECIDED, SMALL, BUDGET = "continue", "decided", "smaller than the least change of interest", "budget spent"


@dataclass(frozen=True)
class SequentialRule:
    min_rounds: int = 2
    max_rounds: int = 6
    min_effect_pct: float = 5.0
    confidence: float = 0.95

    def __post_init__(self):
        if self.min_rounds < 1 or self.max_rounds < self.min_rounds:
            raise ValueError("1 <= min_rounds <= max_rounds")
        if not 0.5 <= self.confidence < 1:
            raise ValueError("confidence between 0.5 and 1")

    @property
    def looks(self) -> int:
        return self.max_rounds - self.min_rounds + 1

    @property
    def look_confidence(self) -> float:
        """The confidence of each look's interval (Bonferroni over the looks)."""
        return 1 - (1 - self.confidence) / self.looks

    def decide(self, rounds: int, lo_pct: float | None, hi_pct: float | None, measured: bool = False) -> str:
        """After `rounds` rounds, with the primary metric's interval in percent of A (None: none
        yet) and whether its verdict is better or worse: CONTINUE, or why to stop."""
        if rounds < self.min_rounds:
            return CONTINUE
        if measured:
            return DECIDED
        if lo_pct is not None and hi_pct is not None:
            if lo_pct > 0 or hi_pct < 0:
                return DECIDED
            if -self.min_effect_pct < lo_pct and hi_pct < self.min_effect_pct:
                return SMALL
        return BUDGET if rounds >= self.max_rounds else CONTINUE


def fixed_rounds(rounds: int, confidence: float = 0.95) -> SequentialRule:
    """A given number of rounds: one look, at `confidence`."""
    return SequentialRule(min_rounds=rounds, max_rounds=rounds, min_effect_pct=0.0, confidence=confidence)
