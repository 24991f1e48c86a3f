"""What a master sends its workers with a run: the plan it validated and the run's inputs themselves.

One set of inputs and one set of options per run: a worker does not rebuild the plan from option
strings, nor read a file of its own. The inputs (`RunInputs`) are read once, where the run is
planned (plugin/run.py `prepare_run`): the workload with its templates and image files, the
replayed trace with its templates, the tokenizer as files. At test start the master puts a
`RunStart` (the plan, those files as it read them, compressed, the run id, the run's start, the
number of load processes, and what plugins share) under one key of its options, `llm_run`: Locust
sends the master's options with every spawn message, to each worker, also to one that joins late
and before its first users start (a custom message could reach a late joiner before it can receive
one). A stepped run sends a spawn message at every step (and a spawn rate several per start), and
the start can hold a tokenizer of up to 64 MiB: the master sends it once per worker and run, with
the first spawn message a worker gets (`OncePerWorker`), again only to a worker that joins again (a
new Locust worker node). The worker takes it out of its options as it reads it, so a run never starts
from an earlier run's start. The worker validates it (`received`, then `RunStart.inputs`: each input rebuilt from its
files and checked against its hash) and runs exactly that: a worker whose own workload, trace or
tokenizer differs, or that has none, runs the master's. The API key is not in it (RunPlan leaves it
out): a worker uses its own LOCUST_API_KEY, else the key Locust's spawn message copies with the
options (docs/security.md).
"""

from __future__ import annotations

import base64
import zlib
from dataclasses import dataclass
from typing import Any

import gevent
from pydantic import BaseModel, ConfigDict

from core.errors import InputError
from core.validation import build
from plugin.plan import RunPlan
from shapes.replay import Trace, load_trace
from workloads import WorkloadSpec, load_spec
from workloads.tokenizer import Tokenizer, tokenizer_from

CARRIER = "llm_run"  # the key of Locust's options that carries it


@dataclass(frozen=True)
class RunInputs:
    """What a run reads from files, read once where it is planned: each process's users use these."""

    workload: WorkloadSpec
    trace: Trace | None = None  # --replay
    tokenizer: Tokenizer | None = None  # --tokenizer


def off_loop(read, *args):
    """`read(*args)` in gevent's thread pool: reading inputs can take seconds (a tokenizer's first
    load imports transformers), and meanwhile the event loop goes on (heartbeats: a master does not
    take a worker for lost, nor a worker its master). Its InputError is raised here (the pool would
    print a raised one's traceback)."""

    def call():
        try:
            return read(*args), None
        except InputError as e:
            return None, e

    value, error = gevent.get_hub().threadpool.apply(call)
    if error is not None:
        raise error
    return value


def _pack(files: dict[str, bytes]) -> dict[str, str]:
    return {k: base64.b64encode(zlib.compress(v, 6)).decode() for k, v in files.items()}


def _unpack(files: dict[str, str]) -> dict[str, bytes]:
    return {k: zlib.decompress(base64.b64decode(v)) for k, v in files.items()}


class _Carried(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def _rebuilt(what: str, path: str, build):
    """An input rebuilt from the files the master sent, or one line saying it arrived damaged."""
    try:
        return build()
    except (KeyError, ValueError, zlib.error) as e:
        raise InputError(f"{what} {path} arrived damaged ({e})") from None


def _check_hash(what: str, path: str, got: str, sent: str) -> None:
    if got != sent:
        raise InputError(f"{what} {path} arrived damaged (hash {got[:12]}, sent {sent[:12]})")


class CarriedWorkload(_Carried):
    """A workload's files as the master read them (compressed), and the hash of what they make."""

    path: str  # as the master names it (messages only)
    sources: dict[str, str]  # WorkloadSpec.sources, each zlib-compressed, base64
    spec_hash: str

    @classmethod
    def of(cls, spec) -> CarriedWorkload:
        return cls(path=spec.path, sources=_pack(spec.sources), spec_hash=spec.spec_hash)

    def load(self):
        """The master's workload (workloads.WorkloadSpec), built from its files, or InputError."""
        spec = _rebuilt(
            "--workload: the master's workload", self.path, lambda: load_spec(self.path, sources=_unpack(self.sources))
        )
        _check_hash("--workload: the master's workload", self.path, spec.spec_hash, self.spec_hash)
        return spec


class CarriedTrace(_Carried):
    """A replayed trace's files as the master read them (compressed), and their hash."""

    path: str  # as the master names it (messages only)
    sources: dict[str, str]  # Trace.sources, each zlib-compressed, base64
    digest: str

    @classmethod
    def of(cls, trace: Trace) -> CarriedTrace:
        return cls(path=trace.path, sources=_pack(trace.sources), digest=trace.digest)

    def load(self) -> Trace:
        trace = _rebuilt(
            "--replay: the master's trace", self.path, lambda: load_trace(self.path, sources=_unpack(self.sources))
        )
        _check_hash("--replay: the master's trace", self.path, trace.digest, self.digest)
        return trace


class CarriedTokenizer(_Carried):
    """The tokenizer's files as the master saved them (compressed), their hash and its probe."""

    name: str
    files: dict[str, str]  # Tokenizer.files, each zlib-compressed, base64
    digest: str
    probe: str

    @classmethod
    def of(cls, tok: Tokenizer) -> CarriedTokenizer:
        return cls(name=tok.name, files=_pack(tok.files), digest=tok.digest, probe=tok.probe)

    def load(self) -> Tokenizer:
        try:
            files = _unpack(self.files)
        except (ValueError, zlib.error) as e:
            raise InputError(f"--tokenizer: the master's tokenizer '{self.name}' arrived damaged ({e})") from None
        return tokenizer_from(self.name, files, self.digest, self.probe)


class RunStart(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    plan: RunPlan
    workload: CarriedWorkload
    trace: CarriedTrace | None = None  # a replay's trace
    tokenizer: CarriedTokenizer | None = None
    run_id: str
    started: float  # the master's test start, wall clock: steps and open-loop schedules count from it
    processes: int  # load processes the run's schedule is split across
    shared: dict[str, Any] = {}  # what the results process's plugins tell the workers (SuiteState.shared)

    @classmethod
    def of(cls, plan: RunPlan, inputs: RunInputs, **run) -> RunStart:
        """The start of a run with these inputs (`run`: run_id, started, processes, shared)."""
        return cls(
            plan=plan,
            workload=CarriedWorkload.of(inputs.workload),
            trace=CarriedTrace.of(inputs.trace) if inputs.trace is not None else None,
            tokenizer=CarriedTokenizer.of(inputs.tokenizer) if inputs.tokenizer is not None else None,
            **run,
        )

    def inputs(self) -> RunInputs:
        """The master's inputs, each rebuilt from its files and checked (InputError when one is
        missing, damaged, or counts differently here)."""
        if (self.plan.replay is not None) != (self.trace is not None) or (
            self.trace is not None and self.trace.digest != self.plan.load.digest
        ):
            raise InputError(
                "--replay: the master's trace does not match its plan; start the master and the workers "
                "from the same version of this suite"
            )
        if bool(self.plan.tokenizer) != (self.tokenizer is not None):
            raise InputError(
                "--tokenizer: the master sent no tokenizer with its plan; start the master and the workers "
                "from the same version of this suite"
            )
        return RunInputs(
            self.workload.load(),
            self.trace.load() if self.trace is not None else None,
            self.tokenizer.load() if self.tokenizer is not None else None,
        )


def send(environment, start: RunStart) -> None:
    """Master: the run travels with the options of each worker's first spawn message from now on."""
    setattr(environment.parsed_options, CARRIER, start.model_dump(mode="json"))
    OncePerWorker.on(environment.runner).new_run()


class OncePerWorker:
    """The master's sending of messages to its workers (Locust's `server.send_to_client`), wrapped:
    a spawn message keeps the carried start only for a worker that has not had it in this run.

    A worker is known by the node Locust's master makes for it when it reports ready: a worker
    that joins late, reconnects or becomes ready after a stop is a new node and gets the start
    with its next spawn message. The wrapper belongs to the server it wraps: when Locust's master
    replaces its server (a broken connection), a new one is installed at the next run, and until
    then every spawn message carries the start, as Locust sends it."""

    def __init__(self, runner):
        self.runner = runner
        self.forward = runner.server.send_to_client
        self.had: dict[str, object] = {}  # worker id -> the node that got this run's start

    @classmethod
    def on(cls, runner) -> OncePerWorker:
        current = runner.server.send_to_client
        if isinstance(current, cls):
            return current
        wrapper = runner.server.send_to_client = cls(runner)
        return wrapper

    def new_run(self) -> None:
        self.had.clear()

    def __call__(self, msg) -> None:
        node = None
        if msg.type == "spawn" and isinstance(msg.data, dict) and CARRIER in msg.data.get("parsed_options", {}):
            node = self.runner.clients.get(msg.node_id)
            if node is not None and self.had.get(msg.node_id) is node:
                # Locust put the master's options themselves in the message: a copy without the start
                msg.data = dict(
                    msg.data, parsed_options={k: v for k, v in msg.data["parsed_options"].items() if k != CARRIER}
                )
                node = None
        self.forward(msg)
        if node is not None:  # sent (a failed send raises, and the next spawn message carries it again)
            self.had[msg.node_id] = node


def received(environment) -> RunStart:
    """Worker: the run its master sent, validated (InputError when it is missing or damaged). It is
    taken out of the options: the next run's start comes with that run's first spawn message."""
    data = vars(environment.parsed_options).pop(CARRIER, None)
    if not isinstance(data, dict):
        raise InputError(
            "the master sent no run plan with its spawn message; start the master and the workers "
            "from the same version of this suite"
        )
    try:
        return build(RunStart, data)
    except InputError as e:  # a master of another version sends fields this worker does not know, or lacks some
        raise InputError(
            f"the master's run does not fit this worker ({e}); start the master and the workers from the same "
            "version of this suite"
        ) from None
