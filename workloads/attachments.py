"""What a workload class attaches to its chat requests besides text: tool definitions and images.

    tools:  {count: 3}                         # the first 3 of the built-in sample tools (TOOLS)
    tools:  {definitions: [{type: function, function: {name: ..., parameters: {...}}}, ...],
             choice: auto, parallel: true}     # OpenAI tool objects, as the API takes them
    images: {count: 1, width: 512, height: 512, share: 1.0}       # PNGs made here, as data URLs
    images: {count: {min: 1, max: 3}, files: [a.png, b.jpg]}      # or files, relative to the spec

`choice` is sent as `tool_choice` (auto | required | none | a function name, sent as the named
form); `parallel: false` sends `parallel_tool_calls: false`. A reply that calls tools is answered,
in a conversation class (`session`), by one tool message per call before the next turn
(workloads/session.py). `share` is the fraction of a class's requests that carry images; `count`
an integer distribution of images per request.

Generated images are noise PNGs (in blocks, so their size is that of a photo of their size) made
once per size when the spec is loaded, a few variants each, the same bytes in every process and run; they
go out as `data:image/png;base64,...` URLs in `image_url` content parts.
"""

from __future__ import annotations

import base64
import mimetypes
import os
import random
import struct
import zlib
from functools import lru_cache
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from core.validation import FieldError, Fix

# Sample tools, as an agent framework would declare them (OpenAI function-tool objects).
TOOLS = tuple(
    {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {p: {"type": "string", "description": d} for p, d in params},
                "required": [params[0][0]],
            },
        },
    }
    for name, description, params in (
        ("get_weather", "Current weather for a city.", (("city", "City name"), ("unit", "celsius or fahrenheit"))),
        ("search_docs", "Search the knowledge base and return the best passages.", (("query", "Search terms"),)),
        ("get_order", "Look up an order by its id.", (("order_id", "The order id"),)),
        ("get_time", "Current local time in a time zone.", (("tz", "IANA time zone, e.g. Europe/Paris"),)),
        ("send_email", "Send an e-mail.", (("to", "Recipient address"), ("subject", "Subject line"), ("body", "Text"))),
        (
            "convert_currency",
            "Convert an amount between currencies.",
            (("amount", "Amount"), ("from", "ISO code"), ("to", "ISO code")),
        ),
        ("create_ticket", "Open a support ticket.", (("title", "Short title"), ("details", "Description"))),
        ("run_sql", "Run a read-only SQL query.", (("sql", "The query"),)),
    )
)

IMAGE_VARIANTS = 4  # distinct generated images per size: requests do not all carry the same bytes


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _definition(v: Any) -> Any:
    fn = v.get("function") if isinstance(v, dict) else None
    if (
        not isinstance(fn, dict)
        or v.get("type", "function") != "function"
        or not isinstance(fn.get("name"), str)
        or not fn["name"]
    ):
        raise FieldError(
            "a tool must be {type: function, function: {name: ..., parameters: {...}}}",
            "write each tool as the OpenAI API takes it",
        )
    return {"type": "function", **v}


class ToolsSpec(_Model):
    count: Annotated[
        int | None, Field(strict=True, ge=1, le=len(TOOLS)), Fix(f"give 1 to {len(TOOLS)} built-in tools")
    ] = None
    definitions: Annotated[tuple[dict, ...] | None, Fix("give a list of OpenAI tool objects")] = None
    choice: Annotated[str, Fix("give auto, required, none or a function name")] = "auto"
    parallel: Annotated[bool, Field(strict=True), Fix("write true or false")] = True

    @field_validator("definitions")
    @classmethod
    def _defs(cls, v):
        if v is not None:
            if not v:
                raise FieldError("no tools given", "give at least one tool, or use count")
            v = tuple(_definition(d) for d in v)
        return v

    @model_validator(mode="after")
    def _check(self):
        if (self.count is None) == (self.definitions is None):
            raise FieldError("give either count (built-in tools) or definitions", "write tools: {count: 3}", at="count")
        names = [d["function"]["name"] for d in self.tools()]
        if self.choice not in ("auto", "required", "none") and self.choice not in names:
            raise FieldError(
                f"choice {self.choice!r} is not auto, required, none or one of the tools ({', '.join(names)})",
                "name one of the class's tools",
                at="choice",
            )
        return self

    def tools(self) -> tuple[dict, ...]:
        return self.definitions if self.definitions is not None else TOOLS[: self.count]

    def body(self) -> dict:
        """The request fields: tools, tool_choice, parallel_tool_calls."""
        choice: Any = self.choice
        if choice not in ("auto", "required", "none"):
            choice = {"type": "function", "function": {"name": choice}}
        out = {"tools": list(self.tools()), "tool_choice": choice}
        if not self.parallel:
            out["parallel_tool_calls"] = False
        return out

    def to_dict(self) -> dict:
        return self.model_dump(exclude_none=True)


def png(width: int, height: int, seed: int) -> bytes:
    """A `width` x `height` RGB PNG of noise in 4 x 4 pixel blocks (seeded: the same bytes for the
    same arguments); it compresses about as far as a photo does as JPEG (some 50 KB at 512 x 512)."""
    rng = random.Random(seed)
    rows = []
    for _ in range(-(-height // 4)):
        blocks = rng.randbytes(-(-width // 4) * 3)
        row = b"\x00" + b"".join(blocks[i : i + 3] * 4 for i in range(0, len(blocks), 3))[: width * 3]
        rows += [row] * 4
    raw = b"".join(rows[:height])

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    head = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", head) + chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b"")


@lru_cache(maxsize=64)
def generated_image(width: int, height: int, variant: int) -> str:
    """A generated PNG of this size as a data URL (made once per size and variant)."""
    return data_url(png(width, height, variant))


def data_url(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def image_urls(spec, spec_dir: str, read=None) -> tuple[str, ...]:
    """The data URLs a class draws its images from (`spec`: a workloads.spec_file.ImagesSpec): its
    files, or generated PNGs. `read(name, path)` returns a file's bytes (workloads.spec.load_spec
    keeps what it read); by default the file is read."""
    if spec.files:
        out = []
        for name in spec.files:
            path = name if os.path.isabs(name) else os.path.join(spec_dir, name)
            if read is not None:
                data = read(name, path)
            else:
                with open(path, "rb") as f:
                    data = f.read()
            out.append(data_url(data, mimetypes.guess_type(path)[0] or "image/png"))
        return tuple(out)
    return tuple(generated_image(spec.width, spec.height, i) for i in range(IMAGE_VARIANTS))


def image_parts(text: str, urls: tuple[str, ...]) -> list[dict]:
    """A user message's content: its text, then one image_url part per image."""
    return [{"type": "text", "text": text}, *({"type": "image_url", "image_url": {"url": u}} for u in urls)]


__all__ = ["TOOLS", "ToolsSpec", "png", "data_url", "generated_image", "image_urls", "image_parts"]
