"""Tests of the workloads package: spec loading and validation, the template
library, the seeded sampler and the ``python -m workloads check`` command."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
import time
from collections import Counter

import pytest

import workloads
from core.errors import InputError
from workloads import DEFAULT_SPEC_PATH, DEFAULT_TEMPLATES_PATH, Request, Sampler, WorkloadSpec, load_spec
from workloads.__main__ import main as cli_main

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
N = 10_000


@pytest.fixture(scope="module")
def spec() -> WorkloadSpec:
    return load_spec(None)


@pytest.fixture(scope="module")
def samples(spec) -> list[Request]:
    return Sampler(spec, seed=1234).sample(N)


# --------------------------------------------------------------------- default spec


@pytest.mark.timing
def test_default_spec_loads(spec):
    assert spec.name == "reference-mix"
    assert spec.class_weights() == [("short", 0.4), ("medium", 0.4), ("long", 0.2)]
    assert workloads.class_weights() == spec.class_weights()
    assert len(spec.spec_hash) == 64
    d = spec.to_dict()
    json.dumps(d)  # serialisable
    assert d["classes"]["short"]["input_chars"] == {"dist": "uniform", "min": 20, "max": 200}
    assert d["system_prompt"]["share"] == 0.3
    assert len(spec.describe_classes()) == 3


@pytest.mark.timing
def test_load_cost_visible():
    t0 = time.perf_counter()
    s = load_spec(DEFAULT_SPEC_PATH)
    assert time.perf_counter() - t0 < 0.5  # generous; typically ~10 ms
    assert s.load_seconds < 0.1


def test_class_shares(samples):
    c = Counter(r.request_class for r in samples)
    assert abs(c["short"] / N - 0.4) < 0.02
    assert abs(c["medium"] / N - 0.4) < 0.02
    assert abs(c["long"] / N - 0.2) < 0.02


def test_ranges(spec, samples):
    for r in samples:
        cls = spec.classes[r.request_class]
        assert cls.input_chars.min <= r.input_chars <= cls.input_chars.max, r
        assert cls.output_tokens.min <= r.max_tokens <= cls.output_tokens.max, r
        assert isinstance(r.max_tokens, int)
        assert r.input_chars == len(r.system or "") + len(r.user)


def test_inputs_spread_over_range(spec, samples):
    # uniform targets: the realised lengths cover the range, not just its ends
    for name, c in spec.classes.items():
        vals = sorted(r.input_chars for r in samples if r.request_class == name)
        lo, hi = c.input_chars.min, c.input_chars.max
        median = vals[len(vals) // 2]
        assert abs(median - (lo + hi) / 2) < 0.15 * (hi - lo), (name, median)


def test_system_prompt_share(samples):
    share = sum(r.system is not None for r in samples) / N
    assert abs(share - 0.3) < 0.02


def test_questions_are_from_library(spec, samples):
    questions = {t.text for t in spec.library.questions}
    systems = {t.text for t in spec.library.systems}
    for r in samples[:2000]:
        assert r.user.split("\n\n")[-1] in questions
        if r.system is not None:
            assert r.system in systems


def test_variety(samples):
    # no single fixed prompt: users are overwhelmingly distinct
    assert len({r.user for r in samples}) > 0.8 * N


def test_context_language_matches_question(spec):
    # contexts follow the question's language where possible
    zh_q = {t.text for t in spec.library.questions if t.lang == "zh"}
    zh_ctx = {t.text for t in spec.library.contexts if t.lang == "zh"}
    en_ctx = {t.text for t in spec.library.contexts if t.lang == "en"}
    s = Sampler(spec, seed=5)
    checked = 0
    for r in s.sample(3000):
        parts = r.user.split("\n\n")
        if r.request_class != "long" or parts[-1] not in zh_q:
            continue
        first = parts[0]
        if any(c.startswith(first) for c in zh_ctx):
            checked += 1
        else:
            assert not any(c.startswith(first) for c in en_ctx if len(first) > 40)
    assert checked > 100


# --------------------------------------------------------------------- determinism


def test_same_seed_same_sequence(spec):
    a = Sampler(spec, seed=42).sample(500)
    b = Sampler(spec, seed=42).sample(500)
    assert a == b


def test_different_seeds_differ(spec):
    a = Sampler(spec, seed=1).sample(200)
    b = Sampler(spec, seed=2).sample(200)
    assert a != b
    assert sum(x == y for x, y in zip(a, b)) < 20


def test_seed_none_is_random(spec):
    a = Sampler(spec, seed=None).sample(50)
    b = Sampler(spec, seed=None).sample(50)
    assert a != b


def test_sampler_does_not_touch_global_random(spec):
    import random

    random.seed(7)
    expected = random.random()
    random.seed(7)
    Sampler(spec, seed=3).sample(100)
    assert random.random() == expected


def test_derive_seed():
    assert workloads.derive_seed(None, 3) is None
    assert workloads.derive_seed(1, 3) == workloads.derive_seed(1, 3)
    assert workloads.derive_seed(1, 3) != workloads.derive_seed(1, 4)


# --------------------------------------------------------------------- request shape


def test_request_is_frozen_slotted():
    r = Request("short", None, "hello there", 10, 11)
    assert not hasattr(r, "__dict__")
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.max_tokens = 5  # type: ignore[misc]


def test_messages_and_prompt():
    r = Request("short", "Be brief.", "What is 2+2?", 16, 21)
    assert r.messages() == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+2?"}]
    assert r.prompt() == "Be brief.\n\nWhat is 2+2?"
    r2 = Request("short", None, "What is 2+2?", 16, 12)
    assert r2.messages() == [{"role": "user", "content": "What is 2+2?"}]
    assert r2.prompt() == "What is 2+2?"


def test_iteration_protocol(spec):
    s = Sampler(spec, seed=9)
    it = iter(s)
    assert isinstance(next(it), Request)
    assert s.count == 1


# --------------------------------------------------------------------- speed


@pytest.mark.timing
def test_sampler_speed(spec):
    s = Sampler(spec, seed=0)
    s.sample(1000)  # warm up
    n = 20_000
    t0 = time.perf_counter()
    for _ in range(n):
        s.next()
    rate = n / (time.perf_counter() - t0)
    assert rate > 5_000, f"{rate:.0f} requests/s"


# --------------------------------------------------------------------- library


def test_library_contents(spec):
    lib = spec.library
    c = lib.counts()
    assert c["by_kind"]["question"] >= 300
    assert c["by_kind"]["context"] >= 120
    assert 8 <= c["by_kind"]["system"] <= 20
    domains = {"customer-service", "finance", "e-commerce", "it-support"}
    for kind in ("question", "context", "system"):
        assert set(c["by_lang"][kind]) == {"zh", "en"}
        assert set(c["by_domain"][kind]) == domains
    # roughly half each language
    q = c["by_lang"]["question"]
    assert 0.4 < q["zh"] / (q["zh"] + q["en"]) < 0.6
    assert lib.duplicates() == []


def test_library_lines_unique_and_lengths():
    with open(DEFAULT_TEMPLATES_PATH, encoding="utf-8") as fh:
        lines = [ln for ln in fh.read().splitlines() if ln.strip()]
    assert len(lines) == len(set(lines))
    rows = [json.loads(ln) for ln in lines]
    for r in rows:
        assert set(r) == {"kind", "domain", "lang", "text"}
        n = len(r["text"])
        if r["kind"] == "question":
            assert 10 <= n <= 150, r
        elif r["kind"] == "context":
            assert 100 <= n <= 1500, r
    # diversity: few texts share their first 20 characters
    heads = Counter(r["text"][:20] for r in rows if r["kind"] == "question")
    assert heads.most_common(1)[0][1] <= 3
    assert "lorem" not in "".join(r["text"].lower() for r in rows)


def test_library_generator_up_to_date():
    from workloads import build_templates

    with open(DEFAULT_TEMPLATES_PATH, encoding="utf-8") as fh:
        assert fh.read() == build_templates.render(build_templates.build())


# --------------------------------------------------------------------- custom specs


def write(tmp_path, text: str, name: str = "spec.yaml") -> str:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text), encoding="utf-8")
    return str(p)


GOOD = f"""\
name: t
templates: {DEFAULT_TEMPLATES_PATH}
system_prompt: {{share: 0.5}}
classes:
  a:
    weight: 0.5
    input_chars: {{min: 50, max: 300, dist: normal, mean: 150, stddev: 40}}
    output_tokens: {{min: 10, max: 400, dist: lognormal, median: 80, sigma: 0.6}}
  b:
    weight: 0.5
    input_chars: {{dist: fixed, value: 1000}}
    output_tokens: 128
    system_prompt: {{share: 1.0, text: "You are a terse assistant."}}
    templates: {{domains: [finance], langs: [en]}}
"""


def test_custom_spec_distributions_and_overrides(tmp_path):
    spec = load_spec(write(tmp_path, GOOD))
    reqs = Sampler(spec, seed=11).sample(4000)
    a = [r for r in reqs if r.request_class == "a"]
    b = [r for r in reqs if r.request_class == "b"]
    assert all(50 <= r.input_chars <= 300 for r in a)
    assert all(10 <= r.max_tokens <= 400 for r in a)
    mids = sorted(r.max_tokens for r in a)[len(a) // 2]
    assert 65 <= mids <= 95  # lognormal median 80
    assert all(r.input_chars == 1000 for r in b)
    assert all(r.max_tokens == 128 for r in b)
    assert all(r.system == "You are a terse assistant." for r in b)
    fin_en = {t.text for t in spec.library.questions if t.domain == "finance" and t.lang == "en"}
    assert all(r.user.split("\n\n")[-1] in fin_en for r in b)
    assert 0.45 < sum(r.system is not None for r in a) / len(a) < 0.55


def test_default_templates_when_omitted(tmp_path):
    p = write(
        tmp_path,
        """\
        classes:
          only: {weight: 1, input_chars: {min: 100, max: 400}, output_tokens: {min: 1, max: 64}}
    """,
    )
    spec = load_spec(p)
    assert spec.templates_path == DEFAULT_TEMPLATES_PATH
    assert spec.name == "spec"
    assert all(100 <= r.input_chars <= 400 for r in Sampler(spec, 1).sample(1000))


def test_spec_hash_changes_with_templates(tmp_path):
    lib = tmp_path / "lib.jsonl"
    lib.write_text(
        '{"kind": "question", "domain": "d", "lang": "en", "text": "How do I reset my password?"}\n'
        '{"kind": "context", "domain": "d", "lang": "en", "text": "' + "Reset it in settings. " * 10 + '"}\n',
        encoding="utf-8",
    )
    p = write(
        tmp_path,
        """\
        templates: lib.jsonl
        classes:
          x: {weight: 1.0, input_chars: {min: 30, max: 200}, output_tokens: {min: 1, max: 10}}
    """,
    )
    h1 = load_spec(p).spec_hash
    assert load_spec(p).spec_hash == h1
    with open(lib, "a", encoding="utf-8") as fh:
        fh.write('{"kind": "question", "domain": "d", "lang": "en", "text": "Where is the settings page?"}\n')
    assert load_spec(p).spec_hash != h1


# --------------------------------------------------------------------- bad specs


def _cls(extra: str = "") -> str:
    return (
        "classes:\n"
        "  short: {weight: 0.6, input_chars: {min: 20, max: 200}, output_tokens: {min: 1, max: 50}" + extra + "}\n"
        "  long: {weight: 0.4, input_chars: {min: 300, max: 900}, output_tokens: {min: 1, max: 50}}\n"
    )


BAD_SPECS = {
    "malformed_yaml": ("classes:\n  short: {weight: 0.4\n  long: [\n", "line "),
    "not_mapping": ("- a\n- b\n", "must be a mapping"),
    "empty": ("", "empty"),
    "weights_sum": (
        "classes:\n"
        "  short: {weight: 0.5, input_chars: {min: 20, max: 200}, output_tokens: {min: 1, max: 5}}\n"
        "  long: {weight: 0.4, input_chars: {min: 300, max: 900}, output_tokens: {min: 1, max: 5}}\n",
        "classes.short.weight",
    ),
    "negative_weight": (
        "classes:\n"
        "  short: {weight: -0.2, input_chars: {min: 20, max: 200}, output_tokens: {min: 1, max: 5}}\n"
        "  long: {weight: 1.2, input_chars: {min: 300, max: 900}, output_tokens: {min: 1, max: 5}}\n",
        "classes.short.weight",
    ),
    "min_above_max": (
        "classes:\n  short: {weight: 1, input_chars: {min: 300, max: 200}, output_tokens: {min: 1, max: 5}}\n",
        "classes.short.input_chars.min",
    ),
    "negative_length": (
        "classes:\n  short: {weight: 1, input_chars: {min: 20, max: 200}, output_tokens: {min: -5, max: 5}}\n",
        "classes.short.output_tokens.min",
    ),
    "unknown_dist": (
        "classes:\n  short: {weight: 1, input_chars: {min: 20, max: 200, dist: poisson}, output_tokens: 5}\n",
        "classes.short.input_chars.dist",
    ),
    "missing_dist_param": (
        "classes:\n  short: {weight: 1, input_chars: {min: 20, max: 200, dist: normal, mean: 100}, output_tokens: 5}\n",
        "classes.short.input_chars.stddev",
    ),
    "missing_fixed_value": (
        "classes:\n  short: {weight: 1, input_chars: {min: 20, max: 200}, output_tokens: {dist: fixed}}\n",
        "classes.short.output_tokens.value",
    ),
    "unknown_top_field": ("classs: {}\n" + _cls(), "classs"),
    "unknown_class_field": (_cls(", wieght: 3"), "classes.short.wieght"),
    "unknown_dist_field": (
        "classes:\n  short: {weight: 1, input_chars: {min: 20, max: 200, mean: 50}, output_tokens: 5}\n",
        "classes.short.input_chars.mean",
    ),
    "unknown_system_field": ("system_prompt: {share: 0.2, shares: 1}\n" + _cls(), "system_prompt.shares"),
    "missing_templates_file": ("templates: nowhere.jsonl\n" + _cls(), "templates"),
    "share_out_of_range": ("system_prompt: {share: 1.5}\n" + _cls(), "system_prompt.share"),
    "class_share_out_of_range": (_cls(", system_prompt: {share: -0.1}"), "classes.short.system_prompt.share"),
    "no_classes": ("name: x\n", "classes"),
    "empty_classes": ("classes: {}\n", "classes"),
    "classes_not_mapping": ("classes: [a, b]\n", "classes"),
    "missing_weight": (
        "classes:\n  short: {input_chars: {min: 20, max: 200}, output_tokens: 5}\n",
        "classes.short.weight",
    ),
    "max_below_shortest_question": (
        "classes:\n  short: {weight: 1, input_chars: {min: 1, max: 5}, output_tokens: 5}\n",
        "classes.short.input_chars.max",
    ),
    "no_room_for_system": (
        "system_prompt: {share: 0.5, text: '" + "You are an assistant. " * 10 + "'}\n"
        "classes:\n"
        "  short: {weight: 1, input_chars: {min: 10, max: 60}, output_tokens: 5}\n",
        "classes.short.input_chars.max",
    ),
    "filter_matches_nothing": (_cls(", templates: {domains: [astrology]}"), "classes.short.templates.domains"),
    "weight_not_number": (_cls("").replace("weight: 0.6", "weight: lots"), "classes.short.weight"),
    "bad_class_name": (
        "classes:\n  'a b': {weight: 1, input_chars: {min: 20, max: 200}, output_tokens: 5}\n",
        "classes.a b",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_SPECS))
def test_bad_spec(tmp_path, case):
    text, field = BAD_SPECS[case]
    p = write(tmp_path, text, name=f"{case}.yaml")
    with pytest.raises(InputError) as ei:
        load_spec(p)
    msg = str(ei.value)
    assert "\n" not in msg
    assert msg.startswith(p + ": "), msg
    assert field in msg, msg
    assert "(" in msg and msg.endswith(")"), msg  # a fix is suggested


def test_malformed_yaml_has_line_number(tmp_path):
    p = write(tmp_path, "name: x\nclasses:\n  a: {weight: 1\n  b: 2\n")
    with pytest.raises(InputError, match=r"line \d+"):
        load_spec(p)


def test_unknown_field_lists_allowed(tmp_path):
    p = write(tmp_path, _cls(", wieght: 3"))
    with pytest.raises(InputError) as ei:
        load_spec(p)
    assert "allowed fields: weight, input_chars, output_tokens, system_prompt, templates" in str(ei.value)


def test_weight_message_format(tmp_path):
    p = write(tmp_path, BAD_SPECS["weights_sum"][0])
    with pytest.raises(InputError) as ei:
        load_spec(p)
    assert str(ei.value) == f"{p}: classes.short.weight: weights sum to 0.9, must sum to 1.0 (adjust the weights)"


def test_weights_tolerance(tmp_path):
    p = write(
        tmp_path,
        "classes:\n"
        "  a: {weight: 0.3333333, input_chars: {min: 20, max: 200}, output_tokens: 5}\n"
        "  b: {weight: 0.3333333, input_chars: {min: 20, max: 200}, output_tokens: 5}\n"
        "  c: {weight: 0.3333334, input_chars: {min: 20, max: 200}, output_tokens: 5}\n",
    )
    load_spec(p)


def test_missing_spec_file(tmp_path):
    with pytest.raises(InputError, match="not found"):
        load_spec(str(tmp_path / "nope.yaml"))


LIB_CASES = {
    "empty": ("\n\n", "empty"),
    "malformed_line": (
        '{"kind": "question", "domain": "d", "lang": "en", "text": "How do I log in?"}\n'
        '{"kind": "question", "domain": \n',
        "line 2",
    ),
    "not_object": ('["question"]\n', "line 1"),
    "missing_key": ('{"kind": "question", "domain": "d", "text": "How do I log in here?"}\n', "'lang'"),
    "unknown_kind": ('{"kind": "answer", "domain": "d", "lang": "en", "text": "Yes you can."}\n', "unknown kind"),
    "unknown_key": (
        '{"kind": "question", "domain": "d", "lang": "en", "text": "How do I log in?", "x": 1}\n',
        "unknown key",
    ),
    "no_questions": (
        '{"kind": "context", "domain": "d", "lang": "en", "text": "' + "Some context. " * 10 + '"}\n',
        "no questions",
    ),
}


@pytest.mark.parametrize("case", sorted(LIB_CASES))
def test_bad_library(tmp_path, case):
    content, needle = LIB_CASES[case]
    (tmp_path / "lib.jsonl").write_text(content, encoding="utf-8")
    p = write(
        tmp_path,
        "templates: lib.jsonl\nclasses:\n  a: {weight: 1, input_chars: {min: 20, max: 200}, output_tokens: 5}\n",
    )
    with pytest.raises(InputError) as ei:
        load_spec(p)
    msg = str(ei.value)
    assert "\n" not in msg
    assert msg.startswith(p + ": templates: "), msg
    assert needle in msg, msg


def test_min_unreachable_without_contexts(tmp_path):
    (tmp_path / "lib.jsonl").write_text(
        '{"kind": "question", "domain": "d", "lang": "en", "text": "How do I reset my password?"}\n', encoding="utf-8"
    )
    p = write(
        tmp_path,
        "templates: lib.jsonl\nclasses:\n  a: {weight: 1, input_chars: {min: 500, max: 900}, output_tokens: 5}\n",
    )
    with pytest.raises(InputError, match=r"classes\.a\.input_chars\.min"):
        load_spec(p)


def test_no_system_prompts_in_library(tmp_path):
    (tmp_path / "lib.jsonl").write_text(
        '{"kind": "question", "domain": "d", "lang": "en", "text": "How do I reset my password?"}\n'
        '{"kind": "context", "domain": "d", "lang": "en", "text": "' + "Open settings, then security. " * 5 + '"}\n',
        encoding="utf-8",
    )
    p = write(
        tmp_path,
        "templates: lib.jsonl\nsystem_prompt: {share: 0.2}\n"
        "classes:\n  a: {weight: 1, input_chars: {min: 20, max: 200}, output_tokens: 5}\n",
    )
    with pytest.raises(InputError, match=r"classes\.a\.system_prompt\.share"):
        load_spec(p)


def test_tiny_library_still_lands_in_range(tmp_path):
    # one short context must be reused to fill a long class
    (tmp_path / "lib.jsonl").write_text(
        '{"kind": "question", "domain": "d", "lang": "en", "text": "How do I reset my password?"}\n'
        '{"kind": "context", "domain": "d", "lang": "en", "text": "Open settings. Choose security. Press reset."}\n',
        encoding="utf-8",
    )
    p = write(
        tmp_path,
        "templates: lib.jsonl\nclasses:\n  a: {weight: 1, input_chars: {min: 700, max: 800}, output_tokens: 5}\n",
    )
    for r in Sampler(load_spec(p), 3).sample(300):
        assert 700 <= r.input_chars <= 800


def test_narrow_ranges_land_exactly(tmp_path):
    p = write(
        tmp_path,
        "classes:\n"
        "  a: {weight: 0.5, input_chars: {dist: fixed, value: 37}, output_tokens: 5}\n"
        "  b: {weight: 0.5, input_chars: {min: 150, max: 152}, output_tokens: 5}\n",
    )
    spec = load_spec(p)
    for r in Sampler(spec, 3).sample(2000):
        c = spec.classes[r.request_class].input_chars
        assert c.min <= r.input_chars <= c.max, r


# --------------------------------------------------------------------- command line


def test_cli_check_default(capsys):
    assert cli_main(["check", DEFAULT_SPEC_PATH, "--samples", "2000"]) == 0
    out = capsys.readouterr().out
    for word in ("short", "medium", "long", "questions", "contexts", "systems", "zh", "en", "finance"):
        assert word in out
    assert len(out.splitlines()) < 40  # one screen


def test_cli_check_bad_spec(tmp_path, capsys):
    p = write(tmp_path, BAD_SPECS["weights_sum"][0])
    assert cli_main(["check", p]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "classes.short.weight" in err


@pytest.mark.process
def test_cli_module_runs(tmp_path):
    p = write(tmp_path, BAD_SPECS["unknown_dist"][0])
    r = subprocess.run(
        [sys.executable, "-m", "workloads", "check", p], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 2
    assert "classes.short.input_chars.dist" in r.stderr
