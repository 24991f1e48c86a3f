"""A tiny Llama with random weights and a locally trained byte-level BPE tokenizer.

No model hub is reachable here, so the real-server tests serve a model made on the spot:

  tokenizer  byte-level BPE (GPT-2 style pre-tokenizer, all 256 byte symbols in the alphabet)
             trained with `tokenizers` on text generated from the workload templates and a
             seeded word generator; ChatML special tokens and chat template.
  model      `LlamaForCausalLM` in a small configuration (head dim 32, which vLLM's CPU backend
             needs), random weights, saved with `save_pretrained` (safetensors).

Random weights emit end-of-sequence and stray UTF-8 continuation bytes at random, which would make
output lengths and chunk texts random. The weights are shaped so that neither can happen, under
greedy or sampled decoding alike, whatever the server's flags:

  * every input embedding carries a constant +ANCHOR in hidden dimension 0, far above the other
    dimensions and the small layer outputs, so after the final RMSNorm that dimension is always
    about +ANCHOR / rms > 0 at every position;
  * the lm_head rows of the "banned" tokens (all special tokens, EOS included, and every token
    whose bytes are not printable ASCII) get -BAN in dimension 0 and the other rows 0 there, so a
    banned token's logit is about -BAN * 3 below the rest: probability below 1e-100.

So every reply runs to max_tokens, and every generated token is complete ASCII text (one token
never ends inside a UTF-8 sequence). The rest of the logits stay random: replies are varied text.

Run with the servers venv (torch + transformers):  python bench/servers/model.py OUT_DIR
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

SEED = 1234
VOCAB_SIZE = 4096
HIDDEN = 128
HEADS = 4  # head dim 32
KV_HEADS = 2
LAYERS = 2
INTERMEDIATE = 256
MAX_POSITIONS = 4096
ANCHOR = 4.0
BAN = 30.0
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
EOS = "<|im_end|>"
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
# Bumped whenever anything above or below changes what gets built: the cache key.
BUILD_VERSION = "1"

SYLLABLES = [
    "ka",
    "lo",
    "mi",
    "ra",
    "ten",
    "vo",
    "zu",
    "pe",
    "sha",
    "ni",
    "or",
    "qu",
    "el",
    "an",
    "dri",
    "fo",
    "gu",
    "be",
    "st",
    "th",
]


def training_text(repo_root: Path) -> list[str]:
    """Generated training text: the workload templates plus seeded pseudo-words and numbers."""
    rng = random.Random(SEED)
    lines = []
    templates = repo_root / "workloads" / "templates.jsonl"
    if templates.exists():
        for line in templates.read_text(encoding="utf-8").splitlines():
            if line.strip():
                lines.append(json.loads(line)["text"])
    for _ in range(4000):
        words = []
        for _ in range(rng.randint(4, 16)):
            word = "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 3)))
            if rng.random() < 0.1:
                word = word.capitalize()
            if rng.random() < 0.05:
                word = str(rng.randint(0, 9999))
            words.append(word)
        lines.append(" ".join(words) + rng.choice([".", ",", "?", "!", ":", ""]))
    return lines


def build_tokenizer(repo_root: Path, out: Path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(training_text(repo_root), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|endoftext|>",
        eos_token=EOS,
        pad_token="<|endoftext|>",
        unk_token=None,
        model_max_length=MAX_POSITIONS,
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    return fast


def banned_ids(fast) -> list[int]:
    """Special tokens and every token that is not printable ASCII text on its own."""
    byte_of = {ch: b for b, ch in _bytes_to_unicode().items()}
    banned = []
    for token, idx in fast.get_vocab().items():
        if token in SPECIAL:
            banned.append(idx)
            continue
        raw = [byte_of.get(ch) for ch in token]
        if any(b is None or b >= 0x80 or (b < 0x20 and b not in (0x0A,)) for b in raw):
            banned.append(idx)
    return sorted(banned)


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map (what ByteLevel uses)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def build_model(fast, out: Path) -> dict:
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(SEED)
    vocab = len(fast)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=HIDDEN,
        intermediate_size=INTERMEDIATE,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        head_dim=HIDDEN // HEADS,
        max_position_embeddings=MAX_POSITIONS,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
        torch_dtype="float32",
    )
    model = LlamaForCausalLM(config).eval()
    banned = banned_ids(fast)
    with torch.no_grad():
        emb = model.model.embed_tokens.weight
        emb.normal_(0.0, 1.0)
        emb[:, 0] = ANCHOR * 4  # dominates the residual stream's dimension 0 at every position
        head = model.lm_head.weight
        head.normal_(0.0, 0.5)
        head[:, 0] = 0.0
        head[banned, 0] = -BAN
    model.save_pretrained(out, safe_serialization=True)
    GenerationConfig(
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
        do_sample=False,
        max_new_tokens=256,
    ).save_pretrained(out)
    return {"vocab_size": vocab, "banned": len(banned), "params": sum(p.numel() for p in model.parameters())}


def build(out: Path, repo_root: Path) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    fast = build_tokenizer(repo_root, out)
    info = build_model(fast, out)
    info.update(build_version=BUILD_VERSION, eos=EOS, chat_template=CHAT_TEMPLATE)
    (out / "tiny_model.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    return info


if __name__ == "__main__":
    target = Path(sys.argv[1])
    root = Path(__file__).resolve().parents[2]
    print(json.dumps(build(target, root)))
