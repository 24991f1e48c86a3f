"""One server process: started in a process group of its own with its output in a log file, waited
for until it is ready or has died, stopped with its whole group; and why a start failed.

The tests' real servers, the benches, the built-in simulator that a run without --host starts, and
a sweep's servers all start through `ServerProcess`, so a start that fails reads the same
everywhere: `ServerStartError` says whether the process died (with its exit code) or never became
ready, with the tail of its log, and `classify_start_failure` names the kind a sweep records.

Standard library only (ground layer). Under gevent (a Locust process) the waits are its patched
`time.sleep` and `subprocess`, so they yield to the run's other greenlets.
"""

from __future__ import annotations

import http.client
import math
import os
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

READY_PATHS = (
    "/health",
    "/v1/models",
)  # vLLM, SGLang, TGI and llama.cpp answer the first; any OpenAI server the second
# Checks come soon at first (the simulator is up in a quarter of a second), then every LINE_POLL_S
# for a printed line (a read of the log's new bytes) or every HTTP_POLL_S for an HTTP probe.
POLL_FIRST_S, LINE_POLL_S, HTTP_POLL_S = 0.01, 0.05, 0.25
TAIL_LINES = 40
TAIL_BYTES = 64 * 1024  # the tail is read from the end of the log: a server's log may be large

# What a failed start's log says, for `classify_start_failure` (case-insensitive).
OUT_OF_MEMORY = re.compile(
    r"out of memory"  # "CUDA out of memory", "HIP out of memory", llama.cpp's "out of memory"
    r"|OutOfMemoryError"  # torch.OutOfMemoryError, torch.cuda.OutOfMemoryError
    r"|\bMemoryError\b"  # Python's own
    r"|No available memory for the cache blocks"  # vLLM: the weights left no room for the KV cache
    r"|insufficient memory"
    r"|Cannot allocate memory",  # ENOMEM
    re.IGNORECASE,
)
REFUSED = re.compile(
    r"^\S*: error: "  # argparse: "api_server.py: error: argument --max-num-seqs: invalid int value"
    r"|\berror: (argument|unrecognized arguments|the following arguments are required)"
    r"|\bValueError\b"  # a setting the server checked and rejected
    r"|\bValidationError\b",  # pydantic-checked settings (vLLM's engine arguments)
    re.IGNORECASE | re.MULTILINE,
)
KINDS = ("start_timeout", "exited", "out_of_memory", "refused")


def classify_start_failure(exit_code: int | None, log_text: str) -> str:
    """The kind of a failed start: `out_of_memory` when the log says memory ran out (a server can
    hang after that as well as exit), `refused` when it exited rejecting a setting, `start_timeout`
    when it was still running but not ready when the wait ended (`exit_code` None), else `exited`."""
    if OUT_OF_MEMORY.search(log_text):
        return "out_of_memory"
    if exit_code is None:
        return "start_timeout"
    if REFUSED.search(log_text):
        return "refused"
    return "exited"


class ServerStartError(RuntimeError):
    """A start that failed: `kind` (one of KINDS), `exit_code` (None when it was still running at
    the deadline and was stopped), `log_tail` (the last lines of its log)."""

    def __init__(self, message: str, *, name: str, kind: str, exit_code: int | None, log_tail: str):
        super().__init__(message)
        self.name, self.kind, self.exit_code, self.log_tail = name, kind, exit_code, log_tail


_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # 127.0.0.1 never goes through a proxy


def http_get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    """(status, body) of a GET; an HTTP error status is an answer too. Raises OSError when nothing answers."""
    try:
        with _NO_PROXY.open(url, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


class ServerProcess:
    """One server command. Ready when `ready_line` (a regular expression) matches a line of its
    output, or else when GET `url` + one of `ready_paths` answers 200. A `ready_line` with a group
    named `url` sets `url` from the line (a server that picks its own port prints it)."""

    def __init__(
        self,
        argv: list[str],
        log_path: str | os.PathLike,
        *,
        name: str = "server",
        url: str = "",
        env: dict[str, str] | None = None,
        cwd: str | os.PathLike | None = None,
        ready_paths: tuple[str, ...] = READY_PATHS,
        ready_line: str | None = None,
        start_timeout: float = 60.0,
        stop_timeout: float = 20.0,
    ):
        if not url and ready_line is None:
            raise ValueError("ServerProcess needs a url to probe or a ready_line to wait for")
        self.argv, self.name, self.url, self.env, self.cwd = list(argv), name, url.rstrip("/"), env, cwd
        self.log_path = Path(log_path)
        self.ready_paths = ready_paths
        self.ready_line = re.compile(ready_line) if ready_line is not None else None
        self.ready_match: re.Match | None = None
        self.start_timeout, self.stop_timeout = start_timeout, stop_timeout
        self.proc: subprocess.Popen | None = None
        self.ready_s = math.nan
        self._read_at, self._partial = 0, b""
        self._stopped = False

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def start(self, timeout: float | None = None) -> ServerProcess:
        """Starts the command and waits until it is ready; raises ServerStartError (the process
        stopped) when it dies first or is not ready within `timeout` seconds."""
        timeout = self.start_timeout if timeout is None else timeout
        t0 = time.monotonic()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                self.argv,
                cwd=self.cwd,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # its own process group: stop() reaches the children it forks
            )
        self._read_at, self._partial, self._stopped = 0, b"", False
        deadline = t0 + timeout
        pause, most = POLL_FIRST_S, LINE_POLL_S if self.ready_line is not None else HTTP_POLL_S
        while True:
            code = self.proc.poll()
            if code is not None:
                self.stop()  # children it left behind
                raise self._failure(f"{self.name} exited with {code} while starting", code)
            if self._is_ready():
                self.ready_s = time.monotonic() - t0
                return self
            if time.monotonic() >= deadline:
                self.stop()
                raise self._failure(f"{self.name} not ready after {timeout:.0f} s", None)
            time.sleep(pause)
            pause = min(2 * pause, most)

    def _is_ready(self) -> bool:
        if self.ready_line is not None:
            for line in self._new_lines():
                match = self.ready_line.search(line)
                if match:
                    self.ready_match = match
                    if "url" in self.ready_line.groupindex:
                        self.url = match["url"].rstrip("/")
                    return True
            return False
        for path in self.ready_paths:
            try:
                status, _ = http_get(self.url + path, timeout=2)
            except (OSError, http.client.HTTPException):
                return False  # not listening yet: the next path would not answer either
            if status == 200:
                return True
        return False

    def _new_lines(self) -> list[str]:
        """Complete lines the process wrote since the last call."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self._read_at)
                data = f.read()
        except OSError:
            return []
        self._read_at += len(data)
        *lines, self._partial = (self._partial + data).split(b"\n")
        return [line.decode(errors="replace") for line in lines]

    def _failure(self, head: str, exit_code: int | None) -> ServerStartError:
        tail = self.log_tail()
        kind = classify_start_failure(exit_code, tail)
        return ServerStartError(f"{head}:\n{tail}", name=self.name, kind=kind, exit_code=exit_code, log_tail=tail)

    def log_tail(self, lines: int = TAIL_LINES) -> str:
        """The last `lines` lines of its log ("(no log)" when there is none)."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(max(0, f.seek(0, os.SEEK_END) - TAIL_BYTES))
                text = f.read().decode(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout: float | None = None) -> None:
        """SIGTERM to its process group, `timeout` seconds for the leader to exit, then SIGKILL to
        the group; what remains of the group (children that outlived their leader, vLLM's engine
        core) is killed either way."""
        proc = self.proc
        if proc is None or self._stopped:
            return  # once: the group id is the leader's pid, free for reuse once the group is gone
        timeout = self.stop_timeout if timeout is None else timeout
        pgid = proc.pid  # start_new_session: the server leads its own process group
        if proc.poll() is None:
            try:
                os.killpg(pgid, signal.SIGTERM)
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                _killpg(pgid)
                proc.wait(10)
            except ProcessLookupError:
                pass
        _killpg(pgid)
        self._stopped = True

    def __enter__(self) -> ServerProcess:
        if self.proc is None:
            self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _killpg(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
