"""A one-class workload file with fixed lengths: what the real-server tests and the agreement
benches send, so every request's input and output length is known in advance."""

from __future__ import annotations

from pathlib import Path


def write_workload(
    path: Path, *, input_chars: int, output_tokens: int, system_share: float = 0.0, langs: list[str] | None = None
) -> Path:
    """A one-class workload YAML with fixed input length (chars) and fixed max_tokens."""
    lines = [
        f"name: fixed-{input_chars}c-{output_tokens}t",
        "description: one class, fixed input and output lengths (real-server tests)",
        f"system_prompt: {{share: {system_share}}}",
    ]
    if langs:
        lines.append(f"templates: {{langs: [{', '.join(langs)}]}}")
    lines += [
        "classes:",
        "  fixed:",
        "    weight: 1.0",
        f"    input_chars: {{dist: fixed, value: {input_chars}}}",
        f"    output_tokens: {{dist: fixed, value: {output_tokens}}}",
    ]
    path.write_text("\n".join(lines) + "\n")
    return path
