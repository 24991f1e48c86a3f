"""Fixes to Locust's own machinery that the suite needs, applied once when the locustfile loads."""

from __future__ import annotations

import time

import gevent


def memoize_default_args() -> None:
    """Locust's worker rebuilds its whole option parser once per option of every spawn message
    (locust/runners.py, `k not in argument_parser.default_args_dict()` inside a comprehension):
    about 150 parses, 0.1-0.4 s with the suite's options, during which no stream is read. Spawn
    messages come once a second while users ramp up and at every step of a load shape. The
    defaults are Locust's own options and never change within a process: parse them once."""
    from locust import argument_parser

    original = argument_parser.default_args_dict
    if getattr(original, "memoized", False):
        return
    cache: list[dict] = []

    def default_args_dict() -> dict:
        if not cache:
            cache.append(original())
        return dict(cache[0])

    default_args_dict.memoized = True
    argument_parser.default_args_dict = default_args_dict


def end_dispatch_after_rebalance() -> None:
    """Locust's users dispatcher marks a dispatch in progress while its generator runs, and its
    generator returns early after a rebalance that leaves the user count as it was (a worker went
    missing: its users are moved to the others) without clearing the mark (locust/dispatch.py,
    `_dispatcher`). The master starts a new dispatch when a worker comes back only if none is in
    progress: a worker that returned from a freeze kept its users and the others kept theirs, 15
    users for a plan of 10 until the run ended. The mark is cleared whenever the generator ends."""
    from locust.dispatch import UsersDispatcher

    original = UsersDispatcher._dispatcher
    if getattr(original, "ends_dispatch", False):
        return

    def _dispatcher(self):
        yield from original(self)
        # ended, not abandoned: a generator that a new dispatch replaced is closed without reaching here
        self._dispatch_in_progress = False

    _dispatcher.ends_dispatch = True
    UsersDispatcher._dispatcher = _dispatcher


def stop_names_its_caller_cheaply() -> None:
    """Locust's Runner.stop names its caller in a debug line through inspect.stack(), which reads a
    line of source for every frame of the stack; the first such read maps the file of every loaded
    module (27 ms with a worker's 1,000 modules, more with pandas loaded), and paid at the stop it
    delayed the first token of every stream in flight by that much. Its module's `inspect` is
    replaced by one whose stack() and getframeinfo() take no source lines (context 0): the caller's
    file and line, as the debug line says them, for microseconds."""
    import inspect

    from locust import runners

    if isinstance(runners.inspect, _NoSourceLines):
        return
    runners.inspect = _NoSourceLines(inspect)


class _NoSourceLines:
    """The inspect module, but for stack() and getframeinfo() without source lines."""

    def __init__(self, module):
        self._module = module

    def __getattr__(self, name):
        return getattr(self._module, name)

    def stack(self, context: int = 1):
        return self._module.stack(0)

    def getframeinfo(self, frame, context: int = 1):
        return self._module.getframeinfo(frame, 0)


def one_stop_at_a_time() -> None:
    """A master's stop fires test_stopping first, and the suite's drain runs inside it (it waits up
    to --stop-timeout for every worker's last records) while Locust's state still says running. A
    second stop or quit meanwhile (-t firing while a replay's end or a STOP drains, a replay's
    watch of lost workers, the heartbeat's "last worker went missing") went on through Locust's
    stop: it fired test_stop, which wrote the results with only the records received so far (20 of
    40, exit 0), then sent its workers quit in the middle of their stop. Here a stop from another
    greenlet while one is under way returns at once, and a quit waits for that stop before it
    quits. (The waiting quit is the -t timer's, a replay's end or a signal's greenlet; never the
    greenlet that receives the workers' messages, which the drain needs.)"""
    from gevent.event import Event
    from locust.runners import MasterRunner

    stop, quit = MasterRunner.stop, MasterRunner.quit
    if getattr(stop, "one_at_a_time", False):
        return

    def under_way(runner):
        """(greenlet, done) of a stop under way in another greenlet, else None."""
        ongoing = getattr(runner, "_llm_stop", None)
        return ongoing if ongoing is not None and ongoing[0] is not gevent.getcurrent() else None

    def one_stop(self, send_stop_to_client: bool = True) -> None:
        if getattr(self, "_llm_stop", None) is not None:
            return  # another greenlet's stop, or this one's own from inside it: that stop ends the run
        done = Event()
        self._llm_stop = (gevent.getcurrent(), done)
        try:
            stop(self, send_stop_to_client)
        finally:
            self._llm_stop = None
            done.set()

    def quit_after_stop(self) -> None:
        ongoing = under_way(self)
        if ongoing is not None:
            ongoing[1].wait()
        quit(self)

    one_stop.one_at_a_time = True
    MasterRunner.stop = one_stop
    MasterRunner.quit = quit_after_stop


STOP_BATCH = 32  # users stopped in one turn of the loop: well under a millisecond of work
STOP_YIELD_S = 0.0005  # between batches: a timer, so the loop polls every socket before the next batch


def stop_users_in_batches() -> None:
    """Locust's `Runner.stop_users` (every stop of a run, a ramp-down) spawns one greenlet per user
    to stop, all of which run in one turn of the loop, after a walk over every user: with 1,024
    users in flight, on one core, the loop is held 21-22 ms and then 8-10 ms, while the streams in
    flight wait unread and their first tokens merge with the next in their sockets (a kernel stamp
    then takes the later one's time). Here a user in a task is marked stopping at once, in one pass
    and without a greenlet (it starts nothing new and ends its task within the stop timeout, as
    before), and the users to be killed (between tasks, no stop timeout, or left at its end) are
    killed STOP_BATCH at a time, the loop reading the sockets between batches."""
    from locust import runners
    from locust.user.users import LOCUST_STATE_RUNNING, LOCUST_STATE_STOPPING

    original = runners.Runner.stop_users
    if getattr(original, "in_batches", False):
        return

    def kill_in_batches(users) -> None:
        for i in range(0, len(users), STOP_BATCH):
            for user in users[i : i + STOP_BATCH]:
                user.group.killone(user.greenlet, block=False)
            gevent.sleep(STOP_YIELD_S)

    def still_running(users, timeout: float | None = None) -> list:
        """Waits for the users' greenlets to end, one after the other (no group: adding 1,000
        greenlets to one costs the loop a millisecond), at most `timeout` seconds in all."""
        end = None if timeout is None else time.monotonic() + timeout
        for user in users:
            if end is None:
                user.greenlet.join()
            elif not user.greenlet.dead:
                left = end - time.monotonic()
                if left <= 0:
                    break
                user.greenlet.join(left)
        return [user for user in users if not user.greenlet.dead]

    def stop_users(self, user_classes_stop_count: dict[str, int]) -> None:
        left = {self.user_classes_by_name[name]: n for name, n in user_classes_stop_count.items() if n > 0}
        picked = []  # as Locust picks them: the first of each class in the group's order
        for user_greenlet in list(self.user_greenlets):
            try:
                user = user_greenlet.args[0]
            except IndexError:
                runners.logger.error(
                    "While stopping users, we encountered a user that didn't have proper args %s", user_greenlet
                )
                continue
            if left.get(type(user), 0) > 0:
                left[type(user)] -= 1
                picked.append(user)
        current = gevent.getcurrent()
        graceful = bool(self.environment.stop_timeout)
        to_kill, finishing = [], []
        for user in picked:
            if user.greenlet is current:  # the user called runner.quit(): not waited for
                user.group.killone(user.greenlet, block=False)
            elif graceful and user._state == LOCUST_STATE_RUNNING:
                user.stop(force=False)  # in a task: ends it, starts nothing more
                finishing.append(user)
            elif graceful and user._state == LOCUST_STATE_STOPPING:  # a ramp-down asked already: only waited for
                finishing.append(user)
            else:
                to_kill.append(user)
        kill_in_batches(to_kill)
        still_running(to_kill)
        late = still_running(finishing, self.environment.stop_timeout)
        if late:
            runners.logger.info(
                f"Not all users finished their tasks & terminated in {self.environment.stop_timeout} seconds. Stopping them..."
            )
            kill_in_batches(late)
            still_running(late)
        # a greenlet leaves the runner's group in its links, run a moment after it ends: counted
        # until then (Locust's own stop waits for the group itself)
        while any(user.greenlet in self.user_greenlets for user in to_kill + finishing):
            gevent.sleep(0)
        runners.logger.debug(
            "%g users have been stopped, %g still running", sum(user_classes_stop_count.values()), self.user_count
        )

    stop_users.in_batches = True
    runners.Runner.stop_users = stop_users
