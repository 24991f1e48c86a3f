"""Output tokens when the server sends no usage: the client tokenizer (--tokenizer, a local folder
loaded with transformers.AutoTokenizer), else the chunk count; each record names its source."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.servers.model import build_tokenizer
from metrics.record import RequestRecord
from metrics.sse import parse_stream
from metrics.timing import fill_record
from tests.helpers import ROOT, read_results, run_locust, simulator
from tests.test_sse_reader import END, HEAD, chunked, content, run_script, sse
from workloads.tokenizer import read_tokenizer


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("tok")
    build_tokenizer(Path(ROOT), out)
    return str(out)


def test_tokenizer_count_when_no_usage(tokenizer_dir):
    from transformers import AutoTokenizer

    texts = ["Hello", " there,", " how are", " you today?"]
    script = [(0, HEAD)] + [(0.01, chunked(sse(content(t)))) for t in texts]
    script.append((0, chunked(sse(content("", "stop")) + b"data: [DONE]\n\n") + END))
    rec, ex, _ = run_script(script)
    counter = read_tokenizer(tokenizer_dir).count
    rec2 = RequestRecord("r", "t", "chat", "short", 1, 16)
    rec2.t_send = ex.t_send
    fill_record(rec2, ex.status, parse_stream(ex.pieces), counter)
    expected = len(AutoTokenizer.from_pretrained(tokenizer_dir).encode("".join(texts), add_special_tokens=False))
    assert rec2.tokens_source == "tokenizer" and rec2.output_tokens == expected
    assert rec.tokens_source == "chunks" and rec.output_tokens == 4  # no tokenizer: one per chunk
    assert rec2.tpot_s == pytest.approx((rec2.e2e_s - rec2.ttft_s) / (expected - 1))


@pytest.mark.process
def test_run_without_usage_counts_with_the_tokenizer(tmp_path, tokenizer_dir):
    no_usage = '{"stream_options": {"include_usage": false}}'
    with simulator("--profile", "fixed") as url:
        proc = run_locust(
            "--host",
            url,
            "-u",
            "4",
            "-r",
            "4",
            "-t",
            "4s",
            "--tokenizer",
            tokenizer_dir,
            "--extra-body",
            no_usage,
            "--max-tokens-override",
            "12",
            "--results-dir",
            str(tmp_path),
            "--run-id",
            "tok",
        )
    assert proc.returncode == 0, proc.stderr[-2000:]
    df, summary = read_results(str(tmp_path), "tok")
    assert df["ok"].all() and (df["tokens_source"] == "tokenizer").all()
    assert (df["output_tokens"] > 0).all() and (df["prompt_tokens"] == -1).all()
    assert summary["overall"]["tokens"]["source"] == {"tokenizer": summary["overall"]["requests"]["ok"]}


@pytest.mark.process
def test_missing_tokenizer_is_refused_before_load(tmp_path):
    proc = run_locust(
        "--host",
        "http://127.0.0.1:9",
        "--model",
        "m",
        "-t",
        "2s",
        "--tokenizer",
        str(tmp_path / "nope"),
        "--results-dir",
        str(tmp_path),
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("error: --tokenizer:")
