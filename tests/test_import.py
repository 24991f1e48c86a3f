"""`python -m workloads import`: log shapes, output-token sources, anonymisation, sampling, class
fitting, the written library/spec/trace, and (end to end) a run of an imported workload against the
real simulator that reproduces the log's input and output length distributions."""

from __future__ import annotations

import csv
import gzip
import json
import math
import random

import numpy as np
import pytest

from core.errors import InputError
from simulator.tokens import CHAT_TOKENS_PER_MESSAGE, estimate_tokens
from tests.helpers import read_results, run_locust, simulator
from workloads import Sampler, load_spec
from workloads.__main__ import main as cli
from workloads.importer import READERS, Anonymizer, Entry, Parsed, guess_lang, parse_time, read_log


def write_jsonl(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write((r if isinstance(r, str) else json.dumps(r, ensure_ascii=False)) + "\n")
    return str(path)


def do_import(tmp_path, log, *extra, capsys=None):
    out = tmp_path / "out"
    rc = cli(["import", str(log), "--out", str(out), *extra])
    if capsys is None:
        return rc, out, ""
    cap = capsys.readouterr()
    return rc, out, cap.out + cap.err


def library_rows(out):
    return [json.loads(x) for x in (out / "templates.jsonl").read_text(encoding="utf-8").splitlines()]


def trace_rows(out):
    return [json.loads(x) for x in (out / "trace.jsonl").read_text(encoding="utf-8").splitlines()]


# ------------------------------------------------------------------------------------ log shapes


def test_jsonl_chat_bodies_wrapped_with_usage_and_times(tmp_path, capsys):
    rows = [
        {
            "timestamp": "2025-03-01T10:00:00Z",
            "request": {
                "model": "m",
                "max_tokens": 300,
                "messages": [
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "First question here?"},
                ],
            },
            "response": {"usage": {"prompt_tokens": 12, "completion_tokens": 40}},
        },
        {
            "timestamp": "2025-03-01T10:00:02.5+00:00",
            "request": json.dumps(
                {
                    "messages": [
                        {"role": "user", "content": "hi"},
                        {"role": "assistant", "content": "hello!"},
                        {"role": "user", "content": [{"type": "text", "text": "And a follow-up?"}]},
                    ]
                }
            ),
            "response": {"choices": [{"message": {"content": "x" * 40}}]},
        },  # no usage: the reply text counts
        {"created": 1740823205000, "messages": [{"role": "user", "content": "Third one"}], "max_tokens": 77},
        {"time": 1740823206, "prompt": "A completion prompt", "usage": {"completion_tokens": 9}},
        {"model": "m", "messages": [{"role": "assistant", "content": "no user"}]},
        "not json",
    ]
    rc, out, printed = do_import(tmp_path, write_jsonl(tmp_path / "log.jsonl", rows), capsys=capsys)
    assert rc == 0, printed
    assert "jsonl requests (chat 3, completions 1)" in printed
    assert "no user message 1" in printed and "malformed JSON line 1" in printed
    assert "usage, 2" in printed.replace("from usage 2", "usage, 2")  # two from usage
    lib = library_rows(out)
    systems = [r for r in lib if r["kind"] == "system"]
    prompts = [r for r in lib if r["kind"] == "prompt"]
    assert [s["text"] for s in systems] == ["Be brief."]
    assert prompts[0]["system"] == systems[0]["id"] and prompts[0]["output_tokens"] == 40
    assert prompts[1]["history"] == [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello!"}]
    assert prompts[1]["text"] == "And a follow-up?" and prompts[1]["output_tokens"] == 10  # 40 chars / 4
    assert prompts[2]["output_tokens"] == 77  # max_tokens
    assert prompts[3]["text"] == "A completion prompt" and prompts[3]["output_tokens"] == 9
    trace = trace_rows(out)
    assert trace[0]["trace"]["requests"] == 4
    times = [r["t"] for r in trace[1:]]
    assert times == [0.0, 2.5, 5.0, 6.0]  # ISO, ISO with fraction, epoch ms, epoch s
    spec = load_spec(str(out / "workload.yaml"))
    reqs = Sampler(spec, 1).sample(200)
    msgs = {tuple(m["role"] for m in r.messages()) for r in reqs}
    assert ("system", "user") in msgs and ("user", "assistant", "user") in msgs
    by_text = {r.user: r for r in reqs}
    assert by_text["First question here?"].system == "Be brief."
    assert by_text["First question here?"].input_chars == len("Be brief.") + len("First question here?")


def test_json_array_and_sharegpt(tmp_path, capsys):
    conv = [
        {
            "id": "a",
            "conversations": [
                {"from": "system", "value": "You are a poet."},
                {"from": "human", "value": "Write a haiku."},
                {"from": "gpt", "value": "word " * 20},
                {"from": "human", "value": "Another one."},
                {"from": "gpt", "value": "word " * 8},
            ],
        },
        {"id": "b", "conversations": [{"from": "human", "value": "Unanswered?"}]},
        {"id": "c", "conversations": [{"from": "gpt", "value": "only the model"}]},
    ]
    log = tmp_path / "sg.json"
    log.write_text(json.dumps(conv), encoding="utf-8")
    rc, out, printed = do_import(tmp_path, log, capsys=capsys)
    assert rc == 0 and "sharegpt (turns: first)" in printed
    prompts = [r for r in library_rows(out) if r["kind"] == "prompt"]
    assert [p["text"] for p in prompts] == ["Write a haiku.", "Unanswered?"]
    assert prompts[0]["output_tokens"] == estimate_tokens("word " * 20)
    assert prompts[1]["output_tokens"] == 256  # no reply, no usage, no max_tokens: the default
    assert not (out / "trace.jsonl").exists()  # no timestamps
    rc, out2, printed = do_import(tmp_path / "all", log, "--turns", "all", capsys=capsys)
    prompts = [r for r in library_rows(out2) if r["kind"] == "prompt"]
    assert [p["text"] for p in prompts] == ["Write a haiku.", "Another one."]
    assert [m["role"] for m in prompts[1]["history"]] == ["user", "assistant"]
    assert prompts[1]["output_tokens"] == estimate_tokens("word " * 8)
    # an array of request bodies is read like JSONL
    arr = tmp_path / "arr.json"
    arr.write_text(json.dumps([{"messages": [{"role": "user", "content": "q1"}], "max_tokens": 5}]), encoding="utf-8")
    rc, out3, printed = do_import(tmp_path / "arr", arr, capsys=capsys)
    assert rc == 0 and "json requests (chat 1)" in printed


def test_csv_column_detection_and_override(tmp_path, capsys):
    log = tmp_path / "log.csv"
    with open(log, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["Question", "Output_Len", "timestamp", "other"])
        for i in range(50):
            w.writerow([f"question number {i} " + "x" * i, 10 + i, 1700000000 + i * 0.5, "z"])
        w.writerow(["", 5, 1700000100, "z"])
    rc, out, printed = do_import(tmp_path, log, capsys=capsys)
    assert rc == 0, printed
    assert "csv (prompt column 'Question', output tokens 'Output_Len')" in printed and "empty prompt 1" in printed
    prompts = [r for r in library_rows(out) if r["kind"] == "prompt"]
    assert len(prompts) == 50 and prompts[7]["output_tokens"] == 17
    assert trace_rows(out)[-1]["t"] == pytest.approx(24.5)
    # no recognisable prompt column: a clear error, exit 2
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n", encoding="utf-8")
    rc, _, err = do_import(tmp_path / "b", bad, capsys=capsys)
    assert rc == 2 and "--prompt-column" in err
    rc = cli(["import", str(bad), "--out", str(tmp_path / "b2"), "--prompt-column", "a", "--output-column", "b"])
    assert rc == 0
    assert [r["output_tokens"] for r in library_rows(tmp_path / "b2") if r["kind"] == "prompt"] == [2]


def test_gzip_and_unusable_logs(tmp_path, capsys):
    gz = tmp_path / "log.jsonl.gz"
    with gzip.open(gz, "wt", encoding="utf-8") as f:
        f.write(json.dumps({"messages": [{"role": "user", "content": "zipped"}], "max_tokens": 3}) + "\n")
    rc, out, _ = do_import(tmp_path, gz, capsys=capsys)
    assert rc == 0 and [r["text"] for r in library_rows(out)] == ["zipped"]
    empty = tmp_path / "e.jsonl"
    empty.write_text('{"foo": 1}\n', encoding="utf-8")
    rc, _, err = do_import(tmp_path / "e", empty, capsys=capsys)
    assert rc == 2 and "no usable requests" in err and "\n" not in err.strip()


def test_one_reader_per_format_chosen_by_content(tmp_path, monkeypatch):
    """Each format is a registered reader; the first (by order) that claims a file reads it, so a new
    format is one more registration."""
    from workloads.importer.readers import registry

    assert {"csv", "sharegpt", "openai_requests"} <= set(READERS)
    jsonl_sharegpt = write_jsonl(tmp_path / "sg.jsonl", [{"conversations": [{"from": "human", "value": "hello?"}]}])
    assert read_log(jsonl_sharegpt).format == "sharegpt (turns: first)"
    log = tmp_path / "custom.log"
    log.write_text("Q: what is two plus two?\nQ: and three?\n", encoding="utf-8")
    with pytest.raises(
        InputError, match="--prompt-column"
    ):  # not JSON: the CSV reader claims it, finds no prompt column
        read_log(str(log))

    def read_q(source):
        lines = [ln[3:] for ln in source.text.splitlines() if ln.startswith("Q: ")]
        return Parsed([Entry(text=t) for t in lines], "q-lines", lines=len(lines))

    monkeypatch.setitem(
        READERS, "q_lines", registry.Reader("q_lines", 5, lambda src: src.text.startswith("Q: "), read_q)
    )
    parsed = read_log(str(log))
    assert parsed.format == "q-lines" and [e.text for e in parsed.entries] == ["what is two plus two?", "and three?"]


def test_time_parsing():
    assert parse_time(1700000000) == 1700000000
    assert parse_time(1700000000123) == pytest.approx(1700000000.123)
    assert parse_time(1700000000123456) == pytest.approx(1700000000.123456)
    assert parse_time(1700000000123456789) == pytest.approx(1700000000.123456789)
    assert parse_time("1700000000.5") == 1700000000.5
    assert parse_time("2025-01-01T00:00:00Z") == parse_time("2025-01-01 00:00:00") == 1735689600.0
    assert parse_time("2025-01-01T08:00:00+08:00") == 1735689600.0
    assert parse_time("yesterday") is None and parse_time(True) is None and parse_time(-5) is None


# ------------------------------------------------------------------------------------ anonymisation


@pytest.mark.parametrize(
    "text,kind",
    [
        ("write to jane.roe+tag@mail.example.co.uk now", "email"),
        ("我的手机 13812345678 请回电", "phone"),
        ("call +86 138 1234 5678", "phone"),
        ("office 010-62345678", "phone"),
        ("ring +44 20 7946 0958 today", "phone"),
        ("US (415) 555-0134", "phone"),
        ("身份证 11010519900307231X 已提交", "id_number"),
        ("id 110105199003072316.", "id_number"),
        ("card 4111 1111 1111 1111 expired", "card"),
        ("card 4111111111111111", "card"),
        ("order 20240307123456", "digit_run"),
    ],
)
def test_anonymizer_masks_and_keeps_length(text, kind):
    a = Anonymizer()
    masked = a(text)
    assert len(masked) == len(text)
    assert a.counts[kind] == 1, (masked, a.counts)
    assert sum(ch.isdigit() for ch in masked) <= 2  # at most stray digits outside the match
    assert "*" in masked


def test_anonymizer_leaves_ordinary_text():
    a = Anonymizer()
    text = "In 2024 we sold 1,250 units at 19.99 each; version 3.11.7, room 1203, call me at noon."
    assert a(text) == text and not a.counts


def test_anonymize_option_in_import(tmp_path, capsys):
    rows = [
        {"messages": [{"role": "user", "content": f"mail a{i}@b.com or 1391234567{i % 10}"}], "max_tokens": 5}
        for i in range(5)
    ]
    rc, out, printed = do_import(tmp_path, write_jsonl(tmp_path / "l.jsonl", rows), "--anonymize", capsys=capsys)
    assert rc == 0 and "anonymised email 5, phone 5" in printed
    text = (out / "templates.jsonl").read_text(encoding="utf-8")
    assert "@b.com" not in text.replace("*@*.***", "") and "139" not in text


# ------------------------------------------------------------------------------------ sampling and fitting


def skewed_log(path, n=3000, seed=7, timed=True):
    """A production-like log: lognormal prompt lengths (long tail), lognormal output lengths, a third
    with one of three system prompts, a popular set of repeated questions, usage counted as the
    simulator counts (so input tokens can be compared), Poisson arrivals at ~10 requests/s."""
    rng = random.Random(seed)
    words = (
        "refund order account invoice delivery payment card password login address courier "
        "warranty discount coupon subscription cancel upgrade 退款 订单 账户 发票 物流"
    ).split()
    systems = [
        "You are the support assistant of an online shop. Answer politely and briefly.",
        "你是一家电商平台的客服助手，请用简洁礼貌的语言回答用户的问题。",
        "You are an internal IT helpdesk bot. Give step-by-step answers and mention ticket numbers.",
    ]
    popular = [f"How do I {w} my {v}?" for w, v in zip(words[:6], words[6:12])]
    t = 1_741_000_000.0
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(n):
            if rng.random() < 0.1:
                user = rng.choice(popular)
            else:
                target = int(min(8000, max(8, rng.lognormvariate(math.log(350), 1.0))))
                parts, length = [], 0
                while length < target:
                    parts.append(rng.choice(words))
                    length += len(parts[-1]) + 1
                user = " ".join(parts)[:target].strip() + "?"
            msgs = ([{"role": "system", "content": rng.choice(systems)}] if rng.random() < 0.33 else []) + [
                {"role": "user", "content": user}
            ]
            out_tokens = int(min(1500, max(1, rng.lognormvariate(math.log(120), 0.8))))
            prompt_tokens = sum(estimate_tokens(m["content"]) + CHAT_TOKENS_PER_MESSAGE for m in msgs)
            t += rng.expovariate(10.0)
            row = {
                "request": {"model": "prod", "messages": msgs, "max_tokens": 2048, "stream": True},
                "response": {"usage": {"prompt_tokens": prompt_tokens, "completion_tokens": out_tokens}},
            }
            if timed:
                row["timestamp"] = round(t, 3)
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return str(path)


def log_columns(path):
    chars, outs, prompt_tokens = [], [], []
    for line in open(path, encoding="utf-8"):
        r = json.loads(line)
        chars.append(sum(len(m["content"]) for m in r["request"]["messages"]))
        outs.append(r["response"]["usage"]["completion_tokens"])
        prompt_tokens.append(r["response"]["usage"]["prompt_tokens"])
    return np.array(chars), np.array(outs), np.array(prompt_tokens)


def test_classes_weights_and_ranges_follow_the_log(tmp_path, capsys):
    log = skewed_log(tmp_path / "log.jsonl", n=3000)
    chars, outs, _ = log_columns(log)
    rc, out, printed = do_import(tmp_path, log, capsys=capsys)
    assert rc == 0, printed
    spec = load_spec(str(out / "workload.yaml"))
    assert [n for n, _ in spec.class_weights()] == ["short", "medium", "long"]
    p50, p90 = np.percentile(chars, 50, method="lower"), np.percentile(chars, 90, method="lower")
    short, medium, long_ = (spec.classes[n] for n in ("short", "medium", "long"))
    assert short.input_chars.max == p50 and medium.input_chars.max == p90
    assert short.input_chars.min == chars.min() and long_.input_chars.max == chars.max()
    for c, mask in ((short, chars <= p50), (medium, (chars > p50) & (chars <= p90)), (long_, chars > p90)):
        assert c.weight == pytest.approx(mask.mean(), abs=1e-6)
        assert (
            sorted(c.output_tokens.values) == sorted(outs[mask].tolist())[:1000] or len(c.output_tokens.values) == 1000
        )  # all values, or 1000 order statistics
        assert c.prompts_mode == "verbatim"
    assert abs(sum(w for _, w in spec.class_weights()) - 1) < 1e-6
    # the summary names what it found
    with_system = sum(1 for line in open(log, encoding="utf-8") if '"role": "system"' in line) / 3000
    assert f"system     {with_system:.1%} of requests carry a system prompt (3 distinct)" in printed
    assert "100.0% of requests carry usage" in printed and "percentiles 50,90" in printed
    # fixed edges instead
    rc, out2, _ = do_import(tmp_path / "e", log, "--edges", "200,800", "--names", "s,m,l", capsys=capsys)
    spec2 = load_spec(str(out2 / "workload.yaml"))
    assert spec2.classes["s"].input_chars.max <= 200 < spec2.classes["m"].input_chars.min
    assert spec2.classes["m"].input_chars.max <= 800 < spec2.classes["l"].input_chars.min
    assert spec2.classes["s"].weight == pytest.approx((chars <= 200).mean(), abs=1e-6)
    # a sampled workload reproduces the log's distributions (no server involved)
    reqs = Sampler(spec, 5).sample(20_000)
    got_chars = np.array([r.input_chars for r in reqs])
    got_out = np.array([r.max_tokens for r in reqs])
    for q in (25, 50, 75, 90):
        assert abs(np.percentile(got_chars, q) / np.percentile(chars, q) - 1) < 0.05, q
        assert abs(np.percentile(got_out, q) / np.percentile(outs, q) - 1) < 0.05, q


def test_sampling_is_seeded_and_trace_follows(tmp_path, capsys):
    log = skewed_log(tmp_path / "log.jsonl", n=500)
    rc, a, printed = do_import(tmp_path / "a", log, "--sample", "100", "--seed", "3", capsys=capsys)
    assert rc == 0 and "sampled    100 of 500 (seed 3)" in printed
    rc, b, _ = do_import(tmp_path / "b", log, "--sample", "100", "--seed", "3", capsys=capsys)
    rc, c, _ = do_import(tmp_path / "c", log, "--sample", "100", "--seed", "4", capsys=capsys)
    assert (a / "templates.jsonl").read_bytes() == (b / "templates.jsonl").read_bytes()
    assert (a / "templates.jsonl").read_bytes() != (c / "templates.jsonl").read_bytes()
    assert len(trace_rows(a)) == 101  # header + the sampled requests
    rc, d, printed = do_import(tmp_path / "d", log, "--sample-frac", "0.25", capsys=capsys)
    assert "sampled    125 of 500" in printed
    assert sum(r["count"] for r in library_rows(d) if r["kind"] == "prompt") == 125
    # repeated prompts are stored once with their count; the trace refers to them
    lib = library_rows(a)
    ids = {r["id"] for r in lib if r["kind"] == "prompt"}
    assert {r["prompt"] for r in trace_rows(a)[1:]} == ids
    assert sum(r["count"] for r in lib if r["kind"] == "prompt") == 100


def test_bad_options_exit_2(tmp_path, capsys):
    log = skewed_log(tmp_path / "log.jsonl", n=20)
    for extra in (
        ["--quantiles", "0,50"],
        ["--edges", "x"],
        ["--names", "a,b"],
        ["--sample", "0"],
        ["--sample-frac", "1.5"],
    ):
        rc, _, err = do_import(tmp_path, log, *extra, capsys=capsys)
        assert rc == 2, extra
        assert err.startswith("error: --"), err


# ------------------------------------------------------------------------------------ end to end

FAST_PROFILE = "kind: fixed\nttft_s: 0.002\nitl_s: 0.0001\nstream_interval: 50\nmax_model_len: 1048576\n"


@pytest.mark.process
def test_imported_workload_run_reproduces_the_log(tmp_path, capsys):
    """Import ~3,000 requests, run the imported spec against the simulator, and compare the run's
    medians of prompt characters, prompt tokens (as the simulator counts them) and output tokens
    with the log's: within 5 %."""
    log = skewed_log(tmp_path / "log.jsonl", n=3000, seed=11)
    chars, outs, prompt_tokens = log_columns(log)
    rc, out, printed = do_import(tmp_path, log, capsys=capsys)
    assert rc == 0, printed
    profile = tmp_path / "fast.yaml"
    profile.write_text(FAST_PROFILE)
    with simulator("--profile", str(profile)) as url:
        proc = run_locust(
            "--host",
            url,
            "--workload",
            str(out / "workload.yaml"),
            "-u",
            "24",
            "-r",
            "24",
            "-t",
            "10s",
            "--seed",
            "5",
            "--results-dir",
            str(tmp_path),
            "--run-id",
            "imp",
            "--stop-timeout",
            "10",
            timeout=200,
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    df, summary = read_results(str(tmp_path), "imp")
    ok = df[df["ok"]]
    assert len(ok) >= 1500, len(ok)  # enough for medians within a few per cent
    for name, ours, theirs in (
        ("input chars", ok["input_chars"], chars),
        ("prompt tokens", ok["prompt_tokens"], prompt_tokens),
        ("output tokens", ok["output_tokens"], outs),
    ):
        m_run, m_log = float(np.median(ours)), float(np.median(theirs))
        assert abs(m_run / m_log - 1) < 0.05, (name, m_run, m_log)
    shares = ok["request_class"].value_counts(normalize=True)
    assert abs(shares["short"] - 0.5) < 0.05 and abs(shares["long"] - 0.1) < 0.04, shares


def test_language_guess_counts_each_script_exactly():
    """guess_lang counts in C (regex classes, map); the same guess as a count per character."""

    def by_characters(text: str) -> str:
        sample = text[:2000]
        letters = sum(1 for ch in sample if ch.isalpha()) or 1
        for lang, share, ranges in (
            ("ja", 0.05, [("\u3040", "\u30ff")]),
            ("ko", 0.2, [("\uac00", "\ud7af")]),
            ("zh", 0.2, [("\u4e00", "\u9fff"), ("\u3400", "\u4dbf")]),
        ):
            if sum(1 for ch in sample if any(a <= ch <= b for a, b in ranges)) > share * letters:
                return lang
        return "en"

    rng = random.Random(5)
    pools = [
        "refund my order ",
        "退款订单账户",
        "ひらがなカタカナ",
        "한국어텍스트",
        "\u3400\u4dbf\u9fff\u4e00\u30ff\u3040\uac00\ud7af\u33ff",
        "123 !?,.",
        "éàü",
    ]
    mixes = [rng.sample(pools, rng.randint(1, 3)) for _ in range(300)]  # one to three scripts a text
    texts = ["".join(rng.choice(rng.choice(mix)) for _ in range(rng.randint(0, 2500))) for mix in mixes]
    assert [guess_lang(t) for t in texts] == [by_characters(t) for t in texts]
    assert {guess_lang(t) for t in texts} == {"en", "ja", "ko", "zh"}
