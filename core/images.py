"""Image sizes read from data URLs, without decoding the image (the simulator's prompt-token count
per image, the log importer's image placeholders)."""

from __future__ import annotations

import base64

PNG_URL = "data:image/png;base64,"


def png_size(url: str) -> tuple[int, int] | None:
    """Width and height of a base64 PNG data URL, from its IHDR chunk (the first 24 bytes); None
    for anything else."""
    if not url.startswith(PNG_URL):
        return None
    try:
        raw = base64.b64decode(url[len(PNG_URL) : len(PNG_URL) + 32])
    except ValueError:
        return None
    if raw[:8] != b"\x89PNG\r\n\x1a\n" or raw[12:16] != b"IHDR":
        return None
    return int.from_bytes(raw[16:20], "big"), int.from_bytes(raw[20:24], "big")
