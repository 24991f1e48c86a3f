"""Shared prefixes (`shared_prefix: {share, count, chars}`): validation, the same texts in every
process and run, the share and per-class override, verbatim classes, the default spec staying
randomised, and end to end the bodies a server receives."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from collections import Counter

import pytest

from core.errors import InputError
from tests.helpers import ROOT, read_results, run_locust
from tests.test_sessions import CaptureServer
from workloads import Sampler, load_spec

SPEC = """
name: prefix
shared_prefix: {share: 0.5, count: 4, chars: 1500}
classes:
  short:
    weight: 0.6
    input_chars: {min: 20, max: 200}
    output_tokens: 4
    system_prompt: {share: 0.3}
  fresh:
    weight: 0.4
    input_chars: {min: 201, max: 800}
    output_tokens: 4
    shared_prefix: {share: 0}
"""


def write(tmp_path, text=SPEC):
    p = tmp_path / "spec.yaml"
    p.write_text(text, encoding="utf-8")
    return str(p)


def texts_digest(path: str) -> str:
    spec = load_spec(path)
    return hashlib.sha256("\x00".join(spec.classes["short"].shared_prefix.texts).encode()).hexdigest()


@pytest.mark.process
def test_prefixes_are_fixed_distinct_and_exact(tmp_path):
    path = write(tmp_path)
    spec = load_spec(path)
    sp = spec.classes["short"].shared_prefix
    assert (sp.share, sp.count, sp.chars) == (0.5, 4, 1500)
    assert len(sp.texts) == 4 and all(len(t) == 1500 for t in sp.texts)
    assert len({t[:12] for t in sp.texts}) == 4  # distinct from their first characters: no common prefix
    assert spec.classes["fresh"].shared_prefix.share == 0
    assert spec.to_dict()["shared_prefix"] == {"share": 0.5, "count": 4, "chars": 1500}
    assert "shared prefix 50% (4 x 1500 chars)" in spec.describe_classes()[0]
    # the same texts in another process (workers must agree, or nothing is shared)
    out = subprocess.run(
        [sys.executable, "-c", f"from tests.test_prefix import texts_digest; print(texts_digest({path!r}))"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.stdout.strip() == texts_digest(path), out.stderr


def test_share_and_what_a_request_carries(tmp_path):
    spec = load_spec(write(tmp_path))
    prefixes = set(spec.classes["short"].shared_prefix.texts)
    for seed in (1, 2):
        reqs = Sampler(spec, seed).sample(6000)
        short = [r for r in reqs if r.request_class == "short"]
        fresh = [r for r in reqs if r.request_class == "fresh"]
        with_prefix = [r for r in short if r.system in prefixes]
        assert abs(len(with_prefix) / len(short) - 0.5) < 0.03
        assert not any(r.system in prefixes for r in fresh)
        assert Counter(r.system for r in with_prefix).keys() == prefixes  # all of them used
        for r in with_prefix:  # the prefix replaces any system prompt; the class range covers the rest
            assert 20 <= r.input_chars - 1500 <= 200 and r.input_chars == len(r.system) + len(r.user)
        others = [r for r in short if r.system not in prefixes]
        assert any(r.system is not None for r in others)  # the library's system prompts still appear
        assert all(r.input_chars <= 200 for r in others)


def test_default_spec_stays_randomised():
    spec = load_spec(None)
    assert spec.shared_prefix is None and all(c.shared_prefix is None for c in spec.classes.values())
    reqs = Sampler(spec, 0).sample(3000)
    users = Counter(r.user for r in reqs)
    assert users.most_common(1)[0][1] <= len(reqs) // 100  # no fixed prompt: short questions repeat, rarely
    assert max(len(r.system or "") for r in reqs) < 1000


def test_verbatim_classes_take_a_prefix_too(tmp_path):
    (tmp_path / "lib.jsonl").write_text(
        "".join(
            f'{{"kind": "prompt", "domain": "d", "lang": "en", "text": "logged question {i}?", "id": "p{i}"}}\n'
            for i in range(20)
        ),
        encoding="utf-8",
    )
    spec = load_spec(
        write(
            tmp_path,
            "templates: lib.jsonl\nshared_prefix: {share: 1.0, count: 2, chars: 300}\n"
            "classes:\n  v:\n    weight: 1\n    prompts: verbatim\n"
            "    input_chars: {dist: empirical}\n    output_tokens: 3\n",
        )
    )
    reqs = Sampler(spec, 1).sample(50)
    assert {len(r.system) for r in reqs} == {300} and len({r.system for r in reqs}) == 2
    assert all(r.user.startswith("logged question") and r.input_chars == 300 + len(r.user) for r in reqs)


@pytest.mark.parametrize(
    "raw,needle",
    [
        ("{share: 1.5}", "share 1.5 is outside [0, 1]"),
        ("{share: 0.5, count: 0}", "count 0 is outside"),
        ("{share: 0.5, chars: 5}", "chars 5 is outside"),
        ("{share: 0.5, size: 10}", "unknown field"),
        ("0.5", "expected a mapping"),
    ],
)
def test_validation(tmp_path, raw, needle):
    p = write(
        tmp_path,
        f"shared_prefix: {raw}\nclasses:\n  a: {{weight: 1, input_chars: {{min: 20, max: 200}}, output_tokens: 5}}\n",
    )
    with pytest.raises(InputError) as ei:
        load_spec(p)
    assert needle in str(ei.value) and "shared_prefix" in str(ei.value)


@pytest.mark.process
def test_server_receives_the_shared_prefixes(tmp_path):
    """What goes over the wire: about half of the `short` requests open with one of the four
    1500-character system prompts, byte for byte the same in every request that uses it."""
    with CaptureServer() as srv:
        proc = run_locust(
            "--host",
            srv.url,
            "--model",
            "capture",
            "--workload",
            write(tmp_path),
            "-u",
            "4",
            "-r",
            "4",
            "-t",
            "5s",
            "--seed",
            "3",
            "--results-dir",
            str(tmp_path),
            "--run-id",
            "px",
            "--stop-timeout",
            "5",
            timeout=120,
        )
        bodies = dict(srv.bodies)
    assert proc.returncode == 0, proc.stderr[-3000:]
    df, summary = read_results(str(tmp_path), "px")
    short = df[df["request_class"] == "short"]
    firsts = [bodies[r]["messages"][0]["content"] for r in short["request_id"] if r in bodies]
    long_systems = Counter(t for t in firsts if len(t) == 1500)
    assert len(long_systems) == 4 and 0.3 < sum(long_systems.values()) / len(firsts) < 0.7, len(firsts)
    assert (short[short["input_chars"] > 1500]["input_chars"] <= 1700).all()
    assert set(summary["by_class"]) == {"short", "fresh"}  # per-class TTFT: split cached and fresh traffic by class
