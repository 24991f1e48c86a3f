"""The client's tokenizer (`--tokenizer`): counts output tokens when the server sends no usage.

It is read once, where the run is planned (a local process, or the master), from a local folder
or the model hub, and saved as files (`save_pretrained`, at most MAX_BYTES). Every process that
counts loads it from those files: the local process itself, and each worker from the copy its
master sent with the run (plugin/run_start.py), never from its own disk. Two checks make every
process count alike: the files' SHA-256 (`digest`: a damaged copy is refused) and the token ids of
a fixed probe text as the master's own tokenizer encoded it (`probe`: a worker whose transformers
or tokenizers library encodes differently is refused, one line, before its first request).
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from core.errors import InputError

MAX_BYTES = 64 << 20  # the tokenizer's files travel to every worker with the run: bounded
HUB_CHECK_S = 2.0  # a hub name is fetched only when the hub answers a TCP connect this fast

# Texts whose token ids tell two tokenizers apart: words, whitespace runs, digits, code, accents,
# CJK and emoji (where byte-level, normalisation and pre-tokenisation rules differ).
PROBE = (
    "The quick brown fox jumps over the lazy dog. Hello, world!",
    "  leading spaces,\ttabs\nand\n\nnew lines   ",
    "3.14159 2026-12-01 1,000,000 0x1F $42.50 100%",
    "def f(x):\n    return {'a': [x ** 2 for x in range(10)]}",
    "naïve café Straße façade Ångström",
    "数据中心的负载测试 東京 서울",
    "🙂🚀 👩‍💻",
)


@dataclass(frozen=True)
class Tokenizer:
    """A tokenizer as files, and the counter loaded from them."""

    name: str  # as --tokenizer gave it (messages only)
    files: dict[str, bytes] = field(repr=False)  # file name -> bytes, as save_pretrained wrote them
    digest: str  # SHA-256 over the files' names and bytes
    probe: str  # SHA-256 of PROBE's token ids as the planning process's tokenizer encoded them
    count: Callable[[str], int] = field(repr=False, compare=False)  # tokens in a text (no special tokens)
    # the text of a text's first N tokens (a fast tokenizer's offsets; None for a slow one): --input-tokens cuts prompts with it
    head: Callable[[str, int], str] | None = field(default=None, repr=False, compare=False)


def files_digest(files: dict[str, bytes]) -> str:
    h = hashlib.sha256()
    for name in sorted(files):
        h.update(b"%s\0%d\0" % (name.encode(), len(files[name])))
        h.update(files[name])
    return h.hexdigest()


def _probe(tok) -> str:
    ids = [tok.encode(text, add_special_tokens=False) for text in PROBE]
    return hashlib.sha256(json.dumps(ids).encode()).hexdigest()


def _counter(tok) -> Callable[[str], int]:
    return lambda text: len(tok.encode(text, add_special_tokens=False))


def _header(tok) -> Callable[[str, int], str] | None:
    """The text of the first `n` tokens of a text, by the tokenizer's character offsets (fast
    tokenizers only); the whole text when it has fewer."""
    if not getattr(tok, "is_fast", False):
        return None

    def head(text: str, n: int) -> str:
        offsets = tok(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
        return text if n >= len(offsets) else text[: offsets[n - 1][1]] if n > 0 else ""

    return head


def _load_files(files: dict[str, bytes]):
    """The tokenizer that these files make, loaded from a temporary folder removed afterwards."""
    from transformers import AutoTokenizer  # heavy import: only when a tokenizer is asked for

    with tempfile.TemporaryDirectory(prefix="llm-tokenizer-") as folder:
        for name, data in files.items():
            with open(os.path.join(folder, name), "wb") as f:
                f.write(data)
        return AutoTokenizer.from_pretrained(folder, local_files_only=True)


def read_tokenizer(name: str) -> Tokenizer:
    """The tokenizer `name` (a local folder, or a hub name) as files, checked to count as it does
    when loaded from them. Raises InputError (one line naming --tokenizer)."""
    original = _load_original(name)
    with tempfile.TemporaryDirectory(prefix="llm-tokenizer-") as folder:
        try:
            original.save_pretrained(
                folder, **({"legacy_format": False} if getattr(original, "is_fast", False) else {})
            )
        except Exception as e:
            raise InputError(
                f"--tokenizer: '{name}' cannot be saved as files to send to workers ({type(e).__name__}: {e})"
            ) from None
        names = sorted(n for n in os.listdir(folder) if os.path.isfile(os.path.join(folder, n)))
        size = sum(os.path.getsize(os.path.join(folder, n)) for n in names)
        if size > MAX_BYTES:
            raise InputError(
                f"--tokenizer: '{name}' is {size / 2**20:.1f} MiB of files, more than the {MAX_BYTES / 2**20:g} MiB "
                "a run sends to its workers; give a tokenizer folder with a smaller tokenizer.json"
            )
        files = {}
        for n in names:
            with open(os.path.join(folder, n), "rb") as f:
                files[n] = f.read()
    probe = _probe(original)
    loaded = _load_files(files)
    if _probe(loaded) != probe:
        raise InputError(
            f"--tokenizer: '{name}' encodes differently once saved as files; give a tokenizer folder "
            "with a tokenizer.json"
        )
    return Tokenizer(name, files, files_digest(files), probe, _counter(loaded), _header(loaded))


def tokenizer_from(name: str, files: dict[str, bytes], digest: str, probe: str) -> Tokenizer:
    """The tokenizer the master read, from the files it sent, checked against its digest and probe.
    Raises InputError."""
    if files_digest(files) != digest:
        raise InputError(
            f"--tokenizer: the master's tokenizer '{name}' arrived damaged (hash differs); start the run again"
        )
    try:
        loaded = _load_files(files)
    except Exception as e:
        raise InputError(
            f"--tokenizer: this worker cannot load the master's tokenizer '{name}' ({type(e).__name__}); "
            "install the master's transformers and tokenizers versions"
        ) from None
    if _probe(loaded) != probe:
        import tokenizers
        import transformers

        raise InputError(
            f"--tokenizer: this worker counts with '{name}' differently from its master (transformers "
            f"{transformers.__version__}, tokenizers {tokenizers.__version__} here); install the master's versions"
        )
    return Tokenizer(name, files, digest, probe, _counter(loaded), _header(loaded))


def _load_original(name: str):
    """`transformers.AutoTokenizer` for `name`. A local folder, or a hub name already in the local
    cache, loads without the network. Any other hub name is fetched only when the hub (HF_ENDPOINT)
    answers a TCP connect within HUB_CHECK_S: without it the hub client retries for about a minute
    before it gives up."""
    from transformers import AutoTokenizer  # heavy import: only when a tokenizer is asked for

    def cannot(e: Exception) -> InputError:
        return InputError(f"--tokenizer: cannot load '{name}' ({type(e).__name__}); give a local tokenizer folder")

    try:
        return AutoTokenizer.from_pretrained(name, local_files_only=True)
    except Exception as e:
        if os.path.isdir(os.path.expanduser(name)):
            raise cannot(e) from None
        if not _hub_reachable():
            raise InputError(
                f"--tokenizer: '{name}' is not a local folder and the model hub cannot be reached; "
                "give a local tokenizer folder"
            ) from None
        try:
            return AutoTokenizer.from_pretrained(name)
        except Exception as e:
            raise cannot(e) from None


def _hub_reachable() -> bool:
    """The model hub (HF_ENDPOINT, default huggingface.co) answers a TCP connect within HUB_CHECK_S;
    False at once when HF_HUB_OFFLINE is set."""
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return False
    parts = urlsplit(constants.ENDPOINT)
    try:
        socket.create_connection(
            (parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)), HUB_CHECK_S
        ).close()
    except OSError:
        return False
    return True
