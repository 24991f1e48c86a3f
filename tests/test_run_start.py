"""What a master sends its workers with a run (plugin/run_start.py): the plan and the run's inputs
(workload, replayed trace, tokenizer as files), rebuilt on the worker and checked against their
hashes; a damaged or differently counting copy is refused with one line. End to end, with workers
in other directories: tests/test_edges_workers.py."""

from __future__ import annotations

import json

import pytest

from core.errors import InputError
from core.validation import build
from plugin.plan import RunPlan
from plugin.run import _read_inputs
from plugin.run_start import CARRIER, RunStart, received
from tests.test_replay import parse, write_trace
from workloads import tokenizer as tokenizer_module


def byte_tokenizer(out) -> None:
    """A tokenizer that counts every byte as a token (a byte-level BPE without merges)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    tok = Tokenizer(models.BPE(vocab={ch: i for i, ch in enumerate(alphabet)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token=None).save_pretrained(str(out))


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    """A replay plan with a tokenizer, its inputs read as a master reads them, and its start as
    the worker receives it (JSON, as Locust's spawn message carries it)."""
    tmp = tmp_path_factory.mktemp("start")
    lib = tmp / "templates.jsonl"
    lib.write_text(
        json.dumps({"kind": "prompt", "domain": "d", "lang": "en", "text": "From the library?", "id": "p1"}) + "\n"
    )
    trace = write_trace(tmp / "t.jsonl", [{"t": 0.5, "prompt": "p1"}, {"t": 1.0, "text": "inline", "max_tokens": 3}])
    byte_tokenizer(tmp / "tok")
    plan = RunPlan.from_options(parse("--replay", trace, "--tokenizer", str(tmp / "tok")))
    inputs = _read_inputs(plan)
    start = RunStart.of(plan, inputs, run_id="r", started=1.0, processes=2)
    return tmp, plan, inputs, json.loads(json.dumps(start.model_dump(mode="json")))


def test_the_worker_rebuilds_the_masters_trace_and_tokenizer(planned):
    tmp, plan, inputs, sent = planned
    got = build(RunStart, sent).inputs()
    assert got.trace.digest == inputs.trace.digest == plan.load.digest
    assert got.trace.requests == inputs.trace.requests and got.trace.times == (0.5, 1.0)
    assert got.trace.requests[0].user == "From the library?"  # the trace's templates travelled with it
    assert got.tokenizer.digest == inputs.tokenizer.digest and got.tokenizer.count("héllo") == 6  # bytes
    assert got.workload.spec_hash == inputs.workload.spec_hash


def _damaged(sent: dict, where: str, key: str, value) -> dict:
    out = json.loads(json.dumps(sent))
    out[where][key] = value
    return out


@pytest.mark.parametrize(
    "where, key, value, message",
    [
        ("trace", "digest", "0" * 64, "--replay: the master's trace does not match its plan"),
        ("tokenizer", "digest", "0" * 64, "--tokenizer: the master's tokenizer '{tok}' arrived damaged"),
        ("tokenizer", "probe", "0" * 64, "--tokenizer: this worker counts with '{tok}' differently from its master"),
    ],
)
def test_a_damaged_or_differently_counting_input_is_refused_in_one_line(planned, where, key, value, message):
    tmp, plan, inputs, sent = planned
    with pytest.raises(InputError) as e:
        build(RunStart, _damaged(sent, where, key, value)).inputs()
    assert str(e.value).startswith(message.format(tok=tmp / "tok")) and "\n" not in str(e.value), str(e.value)


def test_a_trace_whose_bytes_differ_from_its_hash_is_refused(planned):
    tmp, plan, inputs, sent = planned
    bad = json.loads(json.dumps(sent))
    bad["trace"]["digest"] = bad["plan"]["load"]["digest"] = (
        "f" * 64
    )  # a plan and a trace that agree, bytes that do not
    with pytest.raises(InputError, match=r"^--replay: the master's trace .* arrived damaged \(hash"):
        build(RunStart, bad).inputs()


def test_a_trace_changed_after_planning_is_refused(tmp_path):
    path = write_trace(tmp_path / "t.jsonl", [{"t": 0, "text": "a"}])
    plan = RunPlan.from_options(parse("--replay", path))
    write_trace(tmp_path / "t.jsonl", [{"t": 0, "text": "b"}, {"t": 1, "text": "c"}])
    with pytest.raises(InputError, match="^--replay: .* changed since the run was planned; start the run again$"):
        _read_inputs(plan)


def test_a_tokenizer_too_large_to_send_is_refused(planned, monkeypatch):
    tmp = planned[0]
    monkeypatch.setattr(tokenizer_module, "MAX_BYTES", 2**20 // 1024)
    with pytest.raises(InputError) as e:
        tokenizer_module.read_tokenizer(str(tmp / "tok"))
    assert str(e.value).startswith(
        f"--tokenizer: '{tmp / 'tok'}' is 0.0 MiB of files, more than the 0.000976562 MiB a run "
        "sends to its workers; give a tokenizer folder"
    ), str(e.value)


def test_a_start_from_another_version_of_the_suite_is_refused_in_one_line(planned):
    from types import SimpleNamespace

    sent = dict(planned[3], later_field=1)
    environment = SimpleNamespace(parsed_options=SimpleNamespace(**{CARRIER: sent}))
    with pytest.raises(InputError) as e:
        received(environment)
    assert str(e.value).startswith("the master's run does not fit this worker (later_field: unknown field")
    assert str(e.value).endswith("start the master and the workers from the same version of this suite")


def test_the_master_sends_the_start_once_per_worker_node_and_run():
    """Locust puts the master's options in every spawn message; the start rides only on the first
    to each worker node of a run: again to a worker that reported ready anew (a new node: it joined
    again, reconnected or stopped) and to every worker at the next run. Other messages pass as they are."""
    from types import SimpleNamespace

    from locust.rpc.protocol import Message

    from plugin.run_start import OncePerWorker

    wire = []
    options = SimpleNamespace(users=4, **{CARRIER: {"run_id": "a"}})
    runner = SimpleNamespace(
        server=SimpleNamespace(send_to_client=wire.append), clients={"w1": object(), "w2": object()}
    )

    def spawn(worker):
        runner.server.send_to_client(Message("spawn", {"parsed_options": vars(options), "users": 1}, worker))
        return CARRIER in wire[-1].data["parsed_options"]

    OncePerWorker.on(runner).new_run()
    assert [spawn("w1"), spawn("w2"), spawn("w1"), spawn("w2")] == [True, True, False, False]
    assert wire[-1].data["parsed_options"] == {"users": 4} and wire[-1].data["users"] == 1
    assert CARRIER in vars(options)  # the master's own options keep it (for the next worker)
    runner.server.send_to_client(Message("heartbeat", {"parsed_options": vars(options)}, "w1"))
    assert CARRIER in wire[-1].data["parsed_options"]  # not a spawn message: as Locust sent it
    runner.clients["w1"] = object()  # w1 reported ready again: a new node
    assert [spawn("w1"), spawn("w1"), spawn("w2")] == [True, False, False]
    assert spawn("w3") is True and spawn("w3") is True  # not (yet) a node of the master: always carried
    assert OncePerWorker.on(runner) is runner.server.send_to_client  # installed once per server
    OncePerWorker.on(runner).new_run()  # the next run: every worker gets its start
    assert [spawn("w1"), spawn("w2"), spawn("w2")] == [True, True, False]
    runner.server = SimpleNamespace(send_to_client=wire.append)  # Locust replaced its broken server
    assert isinstance(OncePerWorker.on(runner), OncePerWorker) and spawn("w1") is True and spawn("w1") is False


def test_a_worker_takes_the_start_out_of_its_options(planned):
    """A worker reads the start once: the next run's comes with that run's first spawn message, and
    a run whose start did not come is refused in one line, never run with the last run's."""
    from types import SimpleNamespace

    environment = SimpleNamespace(parsed_options=SimpleNamespace(users=4, **{CARRIER: planned[3]}))
    assert received(environment).run_id == RunStart.model_validate(planned[3]).run_id
    assert vars(environment.parsed_options) == {"users": 4}
    with pytest.raises(InputError) as e:
        received(environment)
    assert str(e.value).startswith("the master sent no run plan with its spawn message")
