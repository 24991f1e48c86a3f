"""Engine profiles: YAML files in ``simulator/profiles/``.

A profile is selected with ``--profile NAME`` (a file ``NAME.yaml`` in this
package's ``profiles`` folder) or ``--profile PATH`` (any YAML file).

Fields (all optional except ``kind``; defaults below):

==========================  =========  ===================================================
field                       default    meaning
==========================  =========  ===================================================
kind                        batch      ``batch`` (continuous-batching engine) or ``fixed``
description                 ""         free text
model                       sim-model  model id served (``--model`` overrides)
stream_interval             1          tokens per SSE chunk (vLLM ``--stream-interval``)
max_model_len               4096       a prompt of this many tokens or more, or prompt +
                                       max_tokens above it -> HTTP 400 with vLLM's message
role_chunk                  with_first_token
                                       chat streams: ``with_first_token`` writes the
                                       role-only chunk together with the first content
                                       chunk (vLLM: headers at once, role and first token
                                       in one write); ``at_once`` writes it with the
                                       headers at arrival (transformers serve). Tools that
                                       time TTFT to the first chunk see the difference
reasoning_tokens            0          chat: the first tokens of every reply are reasoning,
                                       streamed in ``delta.reasoning`` (vLLM's reasoning
                                       parser), then the answer; a reply of max_tokens or
                                       fewer is reasoning only. A request with
                                       ``chat_template_kwargs: {enable_thinking: false}``
                                       gets none
reasoning_usage             true       report them in ``usage.completion_tokens_details``
                                       (false: the client must count them from the stream)
tool_call_rate              1.0        chat requests with ``tools`` (tool_choice ``auto``
                                       or absent) answered by tool calls (the rest with
                                       content), drawn per request id; ``required`` or a
                                       named function: always; ``none``: never
parallel_tool_calls         1          tool calls in one such reply (1 when the request
                                       sets ``parallel_tool_calls: false``); the answer's
                                       tokens are split between them, each call's first
                                       token its name, the rest its arguments, streamed in
                                       vLLM's ``delta.tool_calls`` format
image_patch_px              28         chat: each ``image_url`` part adds prompt tokens (and
                                       so prefill time): one per patch_px x patch_px tile of a
                                       PNG data URL's size
image_tokens                576        ... and this many for any other image
embedding_base_s            0.002      /v1/embeddings: each request costs this plus
embedding_per_token_s       0.00002    this per input token, served one request at a time
                                       in arrival order (requests queue behind each other)
embedding_dim               256        numbers per embedding vector
--- fixed ---
ttft_s                      0.1        constant time to first token, per request
itl_s                       0.02       constant inter-token latency, per request
tick_s                      0.001      timer grouping quantum: tokens due in the same
                                       tick are written by one timer callback
--- batch ---
scheduler                   chunked    ``chunked``: mixed steps, decode first, then
                                       prefill chunks within the token budget (vLLM V1);
                                       ``prefill_first``: a step is either a prefill-only
                                       step of whole prompts or a decode step, prefill
                                       whenever a waiting request can be admitted (vLLM V0)
max_num_seqs                128        running (admitted) sequences at most
max_num_batched_tokens      2048       per-step token budget (decode + prefill tokens)
step_base_s                 0.01       fixed cost of one engine step
per_seq_s                   0.0001     cost per decoding sequence in a step
per_prefill_token_s         0.0001     cost per prompt token prefilled in a step
per_context_token_s         0.0        cost per context token (prompt + generated) of the
                                       decoding sequences (attention reads of the KV cache)
prefill_step_base_s         0.0        extra fixed cost of a step that prefills anything
                                       (prefill runs without CUDA graphs)
frontend_latency_s          0.0        fixed latency between a request's arrival and its
                                       entry into the engine queue (API server, tokenizer);
                                       it adds to TTFT but takes no engine time
frontend_service_s          0.0        API-server intake work per request (mean); > 0 turns
                                       on the front-end model (simulator.engine.Frontend):
                                       the work is shared with every request in flight
frontend_cpu_per_token_s    0.0        API-server CPU per streamed token (front-end load)
admission                   fifo       ``fifo``: the queue head blocks the others when it
                                       does not fit; ``first_fit``: later requests that
                                       fit are admitted ahead of it
admission_lookahead         64         first_fit: waiting requests examined per step
--- batch: KV cache (simulator.kv_cache; vLLM's flag of the same name where one exists) ---
block_size                  16         tokens per KV-cache block
num_gpu_blocks_override     null       blocks of the KV cache; null: from the memory below
gpu_memory_gib              80.0       memory of one GPU, GiB
tensor_parallel_size        1          GPUs the model is split over
gpu_memory_utilization      0.9        share of each GPU's memory the engine may use
weights_gib                 12.55      the model's weights, all GPUs together (7 B in FP16)
activation_gib              1.0        per GPU: peak activations and other memory that is
                                       neither weights nor KV cache
kv_bytes_per_token          524288     KV bytes of one token, all layers and GPUs together:
                                       2 x layers x KV heads x head dim x bytes per value
                                       (Llama-2-7B in FP16: 2 x 32 x 32 x 128 x 2 = 512 KiB)
                                       blocks = (tp x (gpu x utilisation - activation)
                                       - weights) / (kv_bytes_per_token x block_size);
                                       they must hold max_model_len tokens
enable_prefix_caching       false      share full prompt blocks between requests, keep
                                       them cached (LRU) after use
enable_prompt_tokens_details false     usage carries prompt_tokens_details.cached_tokens
                                       (when a request had prefix-cache hits)
enable_per_request_metrics  false      the final usage chunk (and a non-streaming body)
                                       carries vLLM's per-request ``metrics`` object
--- both ---
faults                      {}         ``{name: {rate: p, param: x}}``, see simulator.faults
==========================  =========  ===================================================
"""

from __future__ import annotations

import os
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from core.errors import InputError
from core.validation import FieldError, Fix, build, dotted

from .faults import FaultTable
from .kv_cache import num_gpu_blocks

PROFILE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "profiles")

# numbers are numbers: strict, so neither true nor "5" passes for one
Count = Annotated[int, Field(strict=True, gt=0), Fix("give a whole number > 0")]
Seconds = Annotated[float, Field(strict=True, ge=0), Fix("give seconds as a number >= 0")]
Cost = Annotated[float, Field(strict=True, ge=0), Fix("give a number >= 0")]


class Profile(BaseModel):
    """An engine profile (the fields are the table above); validated once, when it is loaded."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Annotated[str, Fix("quote the text")] = "custom"
    kind: Annotated[Literal["batch", "fixed"], Fix("kind is batch or fixed")] = "batch"
    description: Annotated[str, Fix("quote the text")] = ""
    model: Annotated[str, Fix("give the served model id")] = "sim-model"
    stream_interval: Count = 1
    max_model_len: Count = 4096
    role_chunk: Annotated[Literal["with_first_token", "at_once"], Fix("role_chunk is with_first_token or at_once")] = (
        "with_first_token"
    )
    reasoning_tokens: Annotated[int, Field(strict=True, ge=0), Fix("give a whole number >= 0")] = 0
    reasoning_usage: Annotated[bool, Field(strict=True), Fix("write true or false")] = True
    tool_call_rate: Annotated[float, Field(strict=True, ge=0, le=1), Fix("give a probability between 0 and 1")] = 1.0
    parallel_tool_calls: Count = 1
    image_patch_px: Count = 28
    image_tokens: Count = 576
    embedding_base_s: Seconds = 0.002
    embedding_per_token_s: Seconds = 0.00002
    embedding_dim: Count = 256
    # fixed
    ttft_s: Seconds = 0.1
    itl_s: Seconds = 0.02
    tick_s: Annotated[float, Field(strict=True, gt=0), Fix("give seconds as a number > 0")] = 0.001
    # batch
    scheduler: Annotated[Literal["chunked", "prefill_first"], Fix("scheduler is chunked or prefill_first")] = "chunked"
    max_num_seqs: Count = 128
    max_num_batched_tokens: Count = 2048
    step_base_s: Seconds = 0.01
    per_seq_s: Seconds = 0.0001
    per_prefill_token_s: Seconds = 0.0001
    per_context_token_s: Seconds = 0.0
    prefill_step_base_s: Seconds = 0.0
    frontend_latency_s: Seconds = 0.0
    frontend_service_s: Seconds = 0.0
    frontend_cpu_per_token_s: Cost = 0.0
    admission: Annotated[Literal["fifo", "first_fit"], Fix("admission is fifo or first_fit")] = "fifo"
    admission_lookahead: Count = 64
    # batch: KV cache
    block_size: Count = 16
    num_gpu_blocks_override: Count | None = None
    gpu_memory_gib: Annotated[float, Field(strict=True, gt=0), Fix("give GiB as a number > 0")] = 80.0
    tensor_parallel_size: Count = 1
    gpu_memory_utilization: Annotated[float, Field(strict=True, gt=0, le=1), Fix("give a share between 0 and 1")] = 0.9
    weights_gib: Annotated[float, Field(strict=True, ge=0), Fix("give GiB as a number >= 0")] = 12.55
    activation_gib: Annotated[float, Field(strict=True, ge=0), Fix("give GiB as a number >= 0")] = 1.0
    kv_bytes_per_token: Count = 524288
    enable_prefix_caching: Annotated[bool, Field(strict=True), Fix("write true or false")] = False
    enable_prompt_tokens_details: Annotated[bool, Field(strict=True), Fix("write true or false")] = False
    enable_per_request_metrics: Annotated[bool, Field(strict=True), Fix("write true or false")] = False
    faults: Annotated[FaultTable, Fix("write {NAME: {rate: p, param: x}} or {NAME: p}, see simulator.faults")] = Field(
        default_factory=lambda: FaultTable({})
    )

    @model_validator(mode="before")
    @classmethod
    def _replaced(cls, data):
        if isinstance(data, dict) and "kv_cache_tokens" in data:
            raise FieldError(
                "no longer a field: the KV cache is blocks, allocated as tokens grow",
                "write num_gpu_blocks_override: tokens / block_size (16), or size it from GPU memory, "
                "see simulator/profiles.py",
                at="kv_cache_tokens",
            )
        return data

    @model_validator(mode="after")
    def _fits(self):
        if self.kind == "batch":
            blocks = num_gpu_blocks(self)
            if blocks * self.block_size < self.max_model_len:
                where = "num_gpu_blocks_override" if self.num_gpu_blocks_override is not None else "gpu_memory_gib"
                raise FieldError(
                    f"the KV cache holds {blocks} blocks of {self.block_size} tokens, fewer than "
                    f"max_model_len ({self.max_model_len}) tokens",
                    "a batch engine holds at least one whole sequence, as vLLM refuses to start "
                    "otherwise: more blocks (memory) or a lower max_model_len",
                    at=where,
                )
        return self


def available_profiles() -> list[str]:
    return sorted(f[:-5] for f in os.listdir(PROFILE_DIR) if f.endswith(".yaml"))


def profile_summaries() -> list[tuple[str, str]]:
    """(name, the first line of its file's leading comment) of each bundled profile: the table of
    ``python -m simulator --help``."""
    out = []
    for name in available_profiles():
        with open(os.path.join(PROFILE_DIR, name + ".yaml"), encoding="utf-8") as f:
            first = f.readline()
        out.append((name, first[1:].strip() if first.startswith("#") else ""))
    return out


def profile_from_dict(data: Any, name: str = "custom") -> Profile:
    """A validated profile; a mistake is an `InputError` naming the profile and the field."""
    if not isinstance(data, dict):
        raise InputError(f"profile {name}: the file must be a mapping of fields (see simulator/profiles.py)")
    return build(Profile, {"name": name, **data}, field_name=lambda loc: f"profile {name}: {dotted(loc)}")


def profile_fields(spec: str) -> tuple[dict, str]:
    """A profile's fields as its YAML file writes them, and its name, by name (bundled) or by path
    to a YAML file; a sweep writes a point's profile as these fields plus its own settings."""
    if os.sep in spec or spec.endswith((".yaml", ".yml")) or os.path.exists(spec):
        path, name = spec, os.path.splitext(os.path.basename(spec))[0]
    else:
        path, name = os.path.join(PROFILE_DIR, spec + ".yaml"), spec
        if not os.path.exists(path):
            raise InputError(
                f"--profile: unknown profile '{spec}' (available: {', '.join(available_profiles())}, or a YAML path)"
            )
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f) or {}
    except OSError as e:
        raise InputError(f"profile {spec}: cannot read: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise InputError(f"profile {spec}: invalid YAML: {str(e).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise InputError(f"profile {name}: the file must be a mapping of fields (see simulator/profiles.py)")
    return data, name


def load_profile(spec: str) -> Profile:
    """Load a profile by name (bundled) or by path to a YAML file."""
    return profile_from_dict(*profile_fields(spec))
