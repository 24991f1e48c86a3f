"""The locustfile's load shape: a step ramp (--steps) or a capacity search (--find-capacity).

Locust runs it only for stepped runs (plugin/hooks.py `choose_shape`, at init and at every start
from the web form); every other run keeps Locust's usual -u/-r/-t behaviour. Locust resets a shape
at every start before its first tick: it takes this run's levels (or search) from the load model of
the plan built for this start (at init, or by the web form's check), so each run ramps as its own
form said.
"""

from __future__ import annotations

import logging

from locust import LoadTestShape
from locust.runners import MasterRunner

from plugin.progress import OpenStreams
from shapes.capacity import CapacitySearch
from shapes.steps import StepPlan

log = logging.getLogger("llm")


class LLMShape(LoadTestShape):
    # -u/-r/-t stay in the web form: -t bounds a ramp and is a capacity search's time budget
    use_common_options = True
    steps: StepPlan | None = None  # fixed levels
    search: CapacitySearch | None = None  # levels decided as the run goes
    run_time_s: float | None = None

    def reset_time(self) -> None:
        super().reset_time()
        environment = self.runner.environment
        run = environment.llm.run
        if run is not None and not run.finished:
            # Locust's master resets the shape once more right after test_start: this run's steps
            # and search are built already (the run holds them); building them again would leave
            # the run's search without the levels the shape decides
            return
        self.steps = self.search = None
        plan = environment.llm.plan  # built and checked when this start was accepted (init or the web form)
        self.run_time_s = plan.run_time_s
        self.search = plan.load.new_search(plan, distributed=isinstance(self.runner, MasterRunner))
        if self.search is not None:  # each level's first tokens: the streams still open at its cut
            streams = environment.llm.plugin(OpenStreams)
            self.search.open_streams = lambda: streams.reports(environment)
            log.info("%s", self.search.precheck())
        self.steps = None if self.search is not None else plan.load.step_plan()
        log.info("shape: %s", plan.summary_line())

    def tick(self):
        elapsed = self.get_run_time()
        if self.search is not None:
            index = int(elapsed // self.search.step_s)
            users = self.search.users_for(index)  # a search in requests/s: its in-flight cap
            previous = self.search.users_for(index - 1) if index > 0 and users is not None else 0
        elif self.steps is not None:
            if elapsed >= self.steps.duration_s or (self.run_time_s is not None and elapsed >= self.run_time_s):
                return None
            index = self.steps.index_at(elapsed)
            users = self.steps.levels[index]
            previous = self.steps.levels[index - 1] if index > 0 else 0
        else:
            return None
        if users is None:
            return None
        # spawn the whole change within about a second: the step's warm-up then measures the
        # server settling, not the client ramping
        return users, float(max(1, abs(users - previous)))
