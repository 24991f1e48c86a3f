"""Run llama.cpp's own `convert_hf_to_gguf.py` on the tiny model (servers venv).

    python bench/servers/gguf_convert.py CONVERTER_DIR MODEL_DIR OUT.gguf

CONVERTER_DIR holds `convert_hf_to_gguf.py`, its `conversion/` package and `gguf-py/`, extracted
from the llama-cpp-python source package (bench/servers/venvs.py does that). The converter names
a BPE tokenizer's pre-tokenizer by hashing how it splits a fixed test string, and knows only the
hashes of published models; for any newly trained vocabulary it stops with "BPE pre-tokenizer was
not recognized". Registering a new hash is what llama.cpp's `convert_hf_to_gguf_update.py` does
for published models; here the answer is known by construction: bench/servers/model.py trains its
tokenizer with the GPT-2 byte-level pre-tokenizer (GPT-2's split regex), which llama.cpp calls
"gpt-2". So this runner answers that one lookup and leaves the rest of the conversion unchanged.
"""

from __future__ import annotations

import sys
from pathlib import Path


def main() -> None:
    converter, model, out = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    sys.path.insert(0, str(converter))
    sys.path.insert(1, str(converter / "gguf-py"))
    import conversion.base as base

    base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "gpt-2"
    import convert_hf_to_gguf

    sys.argv = ["convert_hf_to_gguf.py", model, "--outfile", out, "--outtype", "f32"]
    convert_hf_to_gguf.main()


if __name__ == "__main__":
    main()
