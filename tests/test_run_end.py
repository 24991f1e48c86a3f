"""Every way a run ends goes through its one end (plugin/run_end.py), once: two stops that overlap
still write every record, summary.json and the table, and the process exits only after them."""

from __future__ import annotations

import logging
import os
import signal
from types import SimpleNamespace

import gevent
import pytest

from plugin import exit_codes
from plugin.failfast import FAIL_FAST_S
from plugin.interrupts import watch_signals
from plugin.run_end import end_run
from plugin.state import SuiteState
from tests.edges import ended, kill_all, launch, records, summary_of, truth_ids
from tests.helpers import simulator


class _Run:
    """The results side of a run as end_run sees it: its end, its writer, its finish."""

    def __init__(self, finish):
        self.ending = None
        self.writer = SimpleNamespace(closed=True, path="/results/r")
        self.finish = finish


def _environment(run) -> SimpleNamespace:
    state = SuiteState("master", ())  # the results side only: no users to close
    state.run = run
    return SimpleNamespace(llm=state, process_exit_code=None)


@pytest.mark.unit
def test_a_second_end_waits_for_the_first_and_the_results_are_written_once():
    said = []

    def finish():
        said.append("writing")
        gevent.sleep(0.2)  # the writer's flush runs in a thread: other greenlets run meanwhile
        said.append("written")

    env = _environment(_Run(finish))
    first = gevent.spawn(end_run, env)
    gevent.sleep(0.05)
    second = gevent.spawn(lambda: (end_run(env), said.append("second stop returned")))
    gevent.joinall([first, second], raise_error=True)
    assert said == ["writing", "written", "second stop returned"]
    assert env.llm.run is None
    end_run(env)  # the run has ended: nothing is written again
    assert said.count("writing") == 1


@pytest.mark.unit
def test_an_end_that_fails_says_in_one_line_what_was_not_written(caplog):
    def finish():
        raise OSError(28, "No space left on device")

    env = _environment(_Run(finish))
    with caplog.at_level(logging.ERROR, logger="llm"):
        end_run(env)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and lines[0].startswith("results not written (exit 5): summary.json could not be written")
    assert "No space left on device" in lines[0] and "/results/r" in lines[0]
    assert env.process_exit_code == exit_codes.RESULTS_NOT_WRITTEN and env.llm.run is None


@pytest.mark.unit
@pytest.mark.parametrize("headless", [True, False])
def test_a_ctrl_c_while_the_results_are_written_waits_for_them(headless):
    """Not raised into the writing: a headless run quits once they are written anyway; the web UI,
    which stays up after a STOP, gets the Ctrl-C once they are."""
    said = []

    def finish():
        os.kill(os.getpid(), signal.SIGINT)
        gevent.sleep(0.1)
        said.append("written")

    run = _Run(finish)
    run.environment = SimpleNamespace(parsed_options=SimpleNamespace(headless=headless))
    env = _environment(run)
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        pytest.skip("SIGINT is not Python's default here: the suite leaves such a handler alone")
    hub = gevent.get_hub()
    not_error = hub.NOT_ERROR
    try:
        watch_signals(env.llm)
        try:
            end_run(env)
            gevent.sleep(0.3)  # a Ctrl-C given back comes now
            given_back = False
        except KeyboardInterrupt:
            given_back = True
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        env.llm.sigterm_watcher.cancel()
        hub.NOT_ERROR = not_error
    assert said == ["written"] and env.llm.signal == "SIGINT"
    assert given_back is not headless


@pytest.mark.process
@pytest.mark.timing  # the two stops must overlap: the order of seconds matters
def test_the_time_limit_during_the_all_failed_stops_drain_writes_every_record(tmp_path):
    """Streams of 5 s that all fail (an error event after 6 tokens, 1 s apart): the all-failed check
    stops the run at the end of the second round (~10 s), four streams still in flight; -t 13s fires
    while they drain. Every request the server served is a record, and the results are written."""
    profile = tmp_path / "slow.yaml"
    profile.write_text("kind: fixed\nmodel: sim-model\nttft_s: 0.1\nitl_s: 1.0\nmax_model_len: 1048576\n")
    truth = str(tmp_path / "truth.jsonl")
    log_path = tmp_path / "twice.log"
    with simulator("--profile", str(profile), "--fault", "mid_stream_error=1.0:6", truth_log=truth) as url:
        proc = launch(
            "--headless",
            "--host",
            url,
            "-u",
            "4",
            "-r",
            "4",
            "-t",
            f"{FAIL_FAST_S + 3:g}s",
            "--model",
            "sim-model",
            "--max-tokens-override",
            "30",
            "--results-dir",
            str(tmp_path),
            "--run-id",
            "twice",
            log_path=log_path,
        )
        try:
            code = ended(proc, 60)
        finally:
            kill_all(proc)
    log = log_path.read_text()
    # the break's conditions held: the all-failed stop came first, -t fired while it drained
    failfast, limit = log.find("every request failed"), log.find("--run-time limit reached")
    assert 0 <= failfast < limit, log[-3000:]
    assert code == exit_codes.INCOMPLETE, log[-3000:]
    assert "LLM results" in log[limit:], "the table is printed"
    summary = summary_of(tmp_path / "twice")
    assert summary["complete"] is False and "no request succeeded" in summary["reason"]
    df = records(tmp_path / "twice" / "requests.parquet")
    served = truth_ids(truth)
    assert sorted(df["request_id"]) == sorted(served), "every request the server served is one record"
    assert len(served) >= 9  # two rounds of four, and the streams in flight at the stop
    assert set(df["error"]) == {"mid_stream_error"}  # the drained streams ended as the server ended them
    assert "results: " in log and "results not written" not in log
