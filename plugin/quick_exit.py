"""The end of a Locust process: once its last event has fired, it leaves without tearing down its heap.

Locust fires `quit` with the process's exit code just before it calls `sys.exit(code)`. What Python
does after that, freeing every module and object one by one and letting pyarrow stop its thread
pools, took 0.17-0.26 s of CPU on a 2-core machine with the suite loaded (bench/RESULTS.md "What a
process pays outside the load"): a fifth of all a worker spends outside its load at 1,024 streams.
None of it is the suite's output; results are written and closed at `quitting`, before `quit`.

So the last exit handler does what that teardown did that anyone would miss, and ends the process
with the code Locust chose:
  - the standard streams and the log's handlers are flushed;
  - the messages still queued for the master, or for the workers, are given up to ZMQ_LINGER_MS to
    leave (a teardown left that to chance: pyzmq does not wait for its queues at interpreter exit);
  - `os._exit(code)`.

Exit handlers registered before this module's are the ones it skips: Python's logging (flushed
here), pyzmq's and certifi's (they only mark or remove interpreter state), pyarrow's S3 finalizer
(no S3 is used). Those registered later (Locust's own, a run's) have run by then. A process that
ends on an uncaught exception after `quit` ends the usual way, with Python's code for it.
`LLM_QUICK_EXIT=0` turns this off (a process then exits as Python does, to compare or to debug).
"""

from __future__ import annotations

import atexit
import logging
import os
import sys

ZMQ_LINGER_MS = 500  # a queued message to a live peer leaves in well under this; a lost peer costs at most this

_armed: tuple[int, object] | None = None  # (exit code, the environment) once `quit` has fired


def arm(environment, exit_code) -> None:
    """Locust's `quit` listener: the process ends with `exit_code` once its exit handlers have run."""
    global _armed
    if os.environ.get("LLM_QUICK_EXIT", "1") == "0":
        return
    try:
        _armed = (int(exit_code or 0), environment)
    except (TypeError, ValueError):  # a code Python would print rather than return: its own exit does that
        _armed = None


def _disarm_on_error(hook):
    def excepthook(*exc):
        global _armed
        _armed = None
        hook(*exc)

    return excepthook


def _flush_messages(environment) -> None:
    runner = getattr(environment, "runner", None)
    rpc = getattr(runner, "client", None) or getattr(runner, "server", None)
    socket = getattr(rpc, "socket", None)
    if socket is None:
        return
    context = socket.context
    socket.close(linger=ZMQ_LINGER_MS)
    context.destroy(linger=ZMQ_LINGER_MS)  # returns once the queues are sent or the linger has passed


def _leave() -> None:
    if _armed is None:
        return
    code, environment = _armed
    try:
        _flush_messages(environment)
    except Exception as e:  # the process ends either way: say why its last messages may not have left
        logging.getLogger("llm").warning("the last messages to the master or the workers may be lost: %r", e)
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):  # closed, or replaced by a test's capture
            pass
    os._exit(code)


def install() -> None:
    """At import of the plugin: registered early, this handler runs after every later one."""
    atexit.register(_leave)
    sys.excepthook = _disarm_on_error(sys.excepthook)
