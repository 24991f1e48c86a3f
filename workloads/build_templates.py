"""Generator of the built-in template library ``workloads/templates.jsonl``.

    python -m workloads.build_templates            # rewrite templates.jsonl
    python -m workloads.build_templates --check    # verify the file is up to date

Questions, system prompts and policy/FAQ passages are hand-written (in
``workloads/templates_src/``); record-like passages (orders, statements,
tickets, logs...) are composed from hand-written parts with a fixed seed, so
the output is reproducible byte for byte.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys

from .templates_src.passages import CONTEXTS, SYSTEMS
from .templates_src.questions import QUESTIONS
from .templates_src.records import build_records

SEED = 20240611
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates.jsonl")
Q_RANGE = (10, 150)
C_RANGE = (100, 1500)


def _fit_context(text: str) -> str:
    """Keep a composed passage within C_RANGE by dropping whole trailing lines."""
    while len(text) > C_RANGE[1] and "\n" in text:
        text = text.rsplit("\n", 1)[0]
    return text


def build() -> list[dict]:
    rows: list[dict] = []
    for (domain, lang), block in QUESTIONS.items():
        for line in block.strip().splitlines():
            if line.strip():
                rows.append({"kind": "question", "domain": domain, "lang": lang, "text": line.strip()})
    for domain, lang, text in SYSTEMS:
        rows.append({"kind": "system", "domain": domain, "lang": lang, "text": text})
    for domain, lang, text in CONTEXTS:
        rows.append({"kind": "context", "domain": domain, "lang": lang, "text": text.strip()})
    for domain, lang, text in build_records(random.Random(SEED)):
        rows.append({"kind": "context", "domain": domain, "lang": lang, "text": _fit_context(text)})

    problems = []
    seen: set[str] = set()
    for r in rows:
        n = len(r["text"])
        if r["kind"] == "question" and not Q_RANGE[0] <= n <= Q_RANGE[1]:
            problems.append(f"question of {n} chars: {r['text'][:60]}")
        if r["kind"] == "context" and not C_RANGE[0] <= n <= C_RANGE[1]:
            problems.append(f"context of {n} chars: {r['text'][:60]!r}")
        if r["text"] in seen:
            problems.append(f"duplicate: {r['text'][:60]!r}")
        seen.add(r["text"])
    if problems:
        raise SystemExit("template library problems:\n  " + "\n  ".join(problems))
    # questions first, then system prompts, then contexts; stable order by domain/lang
    order = {"question": 0, "system": 1, "context": 2}
    rows.sort(key=lambda r: (order[r["kind"]], r["domain"], r["lang"]))
    return rows


def render(rows: list[dict]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m workloads.build_templates", description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if templates.jsonl is out of date")
    ap.add_argument("--out", default=OUT)
    args = ap.parse_args(argv)
    text = render(build())
    if args.check:
        with open(args.out, encoding="utf-8") as fh:
            same = fh.read() == text
        print("up to date" if same else f"{args.out} is out of date; run python -m workloads.build_templates")
        return 0 if same else 1
    with open(args.out, "w", encoding="utf-8") as fh:
        fh.write(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
