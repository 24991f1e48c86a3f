"""core/sizes.py: sizes as people write them, and back in the same form."""

from __future__ import annotations

import pytest

from core.errors import InputError
from core.sizes import format_size, parse_size


@pytest.mark.parametrize(
    "text, n",
    [
        ("64MB", 64 << 20),
        ("512KB", 512 << 10),
        ("1.5GB", 3 << 29),
        ("64MiB", 64 << 20),
        ("1048576", 1 << 20),
        ("2g", 2 << 30),
    ],
)
def test_parse_size(text, n):
    assert parse_size("max-response-size", text) == n


@pytest.mark.parametrize("text", ["lots", "-1MB", "0", "5TB"])
def test_a_bad_size_names_its_option(text):
    with pytest.raises(InputError, match="^--max-response-size: "):
        parse_size("max-response-size", text)


@pytest.mark.parametrize(
    "n, text",
    [(512 << 20, "512MB"), (320 << 10, "320KB"), (2 << 30, "2GB"), (1000, "1000 bytes"), (1536 << 10, "1536KB")],
)
def test_format_size_reads_back(n, text):
    assert format_size(n) == text and parse_size("x", text.replace(" bytes", "")) == n
