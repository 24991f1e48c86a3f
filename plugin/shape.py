"""The locustfile's load shape: a step ramp (--steps) or a capacity search (--find-capacity).

Locust runs a shape class whenever the locustfile has one; plugin/hooks.py removes it at init for
plain runs (-u/-r/-t, and open loop), so those keep Locust's usual behaviour.
"""

from __future__ import annotations

from locust import LoadTestShape


class LLMShape(LoadTestShape):
    # -u/-r/-t keep their meaning: the shape is removed for plain runs, and the capacity search
    # reads --run-time as its budget
    use_common_options = True
    plan = None  # shapes.steps.StepPlan: fixed levels
    search = None  # shapes.capacity.CapacitySearch: levels decided as the run goes

    def tick(self):
        elapsed = self.get_run_time()
        if self.search is not None:
            index = int(elapsed // self.search.step_s)
            users = self.search.level_for(index)
            previous = self.search.levels[index - 1] if index > 0 and users is not None else 0
        elif self.plan is not None:
            if elapsed >= self.plan.duration_s:
                return None
            index = self.plan.index_at(elapsed)
            users = self.plan.levels[index]
            previous = self.plan.levels[index - 1] if index > 0 else 0
        else:
            return None
        if users is None:
            return None
        # spawn the whole change within about a second: the step's warm-up then measures the
        # server settling, not the client ramping
        return users, float(max(1, abs(users - previous)))
