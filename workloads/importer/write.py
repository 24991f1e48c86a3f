"""What an import writes: the template library (``templates.jsonl``), the fitted spec
(``workload.yaml``) and, when requests carry times, the replay trace (``trace.jsonl``)."""

from __future__ import annotations

import json
import os
import re
from datetime import UTC, datetime

from .fit import Fit

TRACE_VERSION = 1


_KANA = re.compile("[\u3040-\u30ff]")
_HANGUL = re.compile("[\uac00-\ud7af]")
_HAN = re.compile("[\u4e00-\u9fff\u3400-\u4dbf]")


def guess_lang(text: str) -> str:
    """A script-based guess: zh (Han), ja (kana), ko (hangul), else en. (Counted in C: regex
    classes and `map`, not a Python loop per character; an import reads every prompt.)"""
    sample = text[:2000]
    letters = sum(map(str.isalpha, sample)) or 1
    if len(_KANA.findall(sample)) > 0.05 * letters:
        return "ja"
    if len(_HANGUL.findall(sample)) > 0.2 * letters:
        return "ko"
    if len(_HAN.findall(sample)) > 0.2 * letters:
        return "zh"
    return "en"


def _yaml_str(s: str) -> str:
    return json.dumps(s, ensure_ascii=False)


def write_outputs(
    out_dir: str, entries: list, fit: Fit, *, name: str, domain: str, source: str, summary_lines: list, with_trace: bool
) -> dict:
    os.makedirs(out_dir, exist_ok=True)
    # system prompts and prompts, deduplicated in first-seen order
    sys_ids: dict[str, str] = {}
    prompt_ids: dict[tuple, str] = {}
    prompt_rows: dict[str, dict] = {}
    entry_pid = []
    for e in entries:
        sid = None
        if e.system is not None:
            sid = sys_ids.setdefault(e.system, f"s{len(sys_ids) + 1:04d}")
        key = (e.system, json.dumps(e.history), e.text, json.dumps(e.after), json.dumps(e.tools), json.dumps(e.images))
        pid = prompt_ids.get(key)
        if pid is None:
            pid = prompt_ids[key] = f"p{len(prompt_ids) + 1:06d}"
            row = {"kind": "prompt", "domain": domain, "lang": guess_lang(e.text), "text": e.text, "id": pid}
            if sid:
                row["system"] = sid
            if e.history:
                row["history"] = [m if isinstance(m, dict) else {"role": m[0], "content": m[1]} for m in e.history]
            if e.after:
                row["after"] = [m if isinstance(m, dict) else {"role": m[0], "content": m[1]} for m in e.after]
            if e.tools:
                row["tools"] = e.tools
            if e.images:
                row["images"] = e.images
            row["count"] = 0
            row["output_tokens"] = e.output_tokens
            prompt_rows[pid] = row
        prompt_rows[pid]["count"] += 1
        entry_pid.append(pid)
    lib_path = os.path.join(out_dir, "templates.jsonl")
    with open(lib_path, "w", encoding="utf-8") as fh:
        for text, sid in sys_ids.items():
            fh.write(
                json.dumps(
                    {"kind": "system", "domain": domain, "lang": guess_lang(text), "text": text, "id": sid},
                    ensure_ascii=False,
                )
                + "\n"
            )
        for row in prompt_rows.values():
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")

    spec_path = os.path.join(out_dir, "workload.yaml")
    lines = [f"# Imported from {source} by `python -m workloads import`.", "#"]
    lines += [f"# {ln}" if ln else "#" for ln in summary_lines]
    lines += [
        "",
        f"name: {_yaml_str(name)}",
        f"description: {_yaml_str(f'Replayed production traffic from {os.path.basename(source)}: {len(entries)} requests, classes by input length, prompts sent verbatim.')}",
        "templates: templates.jsonl",
        "classes:",
    ]
    for c in fit.classes:
        lines += [
            f"  {c['name']}:",
            f"    weight: {c['weight']}",
            "    prompts: verbatim                 # the logged prompts as they are (templates.jsonl)",
            f"    input_chars: {{min: {c['min']}, max: {c['max']}, dist: empirical}}",
            f"    output_tokens: {{dist: empirical, values: {json.dumps(c['out_values'])}}}",
        ]
    with open(spec_path, "w", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n")

    written = {"templates": lib_path, "spec": spec_path, "prompts": len(prompt_rows), "system_prompts": len(sys_ids)}
    if with_trace:
        timed = [(e.time, i) for i, e in enumerate(entries) if e.time is not None]
        timed.sort()
        t0 = timed[0][0]
        duration = timed[-1][0] - t0
        trace_path = os.path.join(out_dir, "trace.jsonl")
        with open(trace_path, "w", encoding="utf-8") as fh:
            header = {
                "version": TRACE_VERSION,
                "templates": "templates.jsonl",
                "requests": len(timed),
                "duration_s": round(duration, 6),
                "source": os.path.basename(source),
                "start": datetime.fromtimestamp(t0, UTC).isoformat(),
            }
            fh.write(json.dumps({"trace": header}) + "\n")
            for t, i in timed:
                fh.write(
                    json.dumps(
                        {
                            "t": round(t - t0, 6),
                            "class": fit.names[fit.assign[i]],
                            "prompt": entry_pid[i],
                            "max_tokens": int(entries[i].output_tokens),
                        }
                    )
                    + "\n"
                )
        written.update(trace=trace_path, trace_requests=len(timed), trace_duration_s=duration)
    return written
