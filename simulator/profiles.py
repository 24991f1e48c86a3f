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
max_model_len               4096       prompt + max_tokens above this -> HTTP 400
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
kv_cache_tokens             524288     KV tokens; a request reserves prompt + max_tokens
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
frontend_service_s          0.0        API-server intake time per request; > 0 turns on the
                                       front-end queue model (simulator.engine.Frontend)
frontend_cpu_per_token_s    0.0        API-server CPU per streamed token (front-end load)
admission                   fifo       ``fifo``: the queue head blocks the others when it
                                       does not fit; ``first_fit``: later requests that
                                       fit are admitted ahead of it
admission_lookahead         64         first_fit: waiting requests examined per step
--- both ---
faults                      {}         ``{name: {rate: p, param: x}}``, see simulator.faults
==========================  =========  ===================================================
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, fields

import yaml

PROFILE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "profiles")


class ProfileError(ValueError):
    """A profile that cannot be used; the message names the field."""


@dataclass
class Profile:
    name: str = "custom"
    kind: str = "batch"
    description: str = ""
    model: str = "sim-model"
    stream_interval: int = 1
    max_model_len: int = 4096
    # fixed
    ttft_s: float = 0.1
    itl_s: float = 0.02
    tick_s: float = 0.001
    # batch
    scheduler: str = "chunked"
    max_num_seqs: int = 128
    kv_cache_tokens: int = 524288
    max_num_batched_tokens: int = 2048
    step_base_s: float = 0.01
    per_seq_s: float = 0.0001
    per_prefill_token_s: float = 0.0001
    per_context_token_s: float = 0.0
    prefill_step_base_s: float = 0.0
    frontend_latency_s: float = 0.0
    frontend_service_s: float = 0.0
    frontend_cpu_per_token_s: float = 0.0
    admission: str = "fifo"
    admission_lookahead: int = 64
    faults: dict = field(default_factory=dict)


_INT_FIELDS = {"admission_lookahead", "stream_interval", "max_model_len", "max_num_seqs", "kv_cache_tokens", "max_num_batched_tokens"}
_FLOAT_FIELDS = {
    "ttft_s", "itl_s", "tick_s", "step_base_s", "per_seq_s", "per_prefill_token_s",
    "per_context_token_s", "frontend_latency_s", "prefill_step_base_s",
    "frontend_service_s", "frontend_cpu_per_token_s",
}
_STR_FIELDS = {"name", "description", "model"}
_CHOICES = {"kind": ("batch", "fixed"), "scheduler": ("chunked", "prefill_first"), "admission": ("fifo", "first_fit")}
_POSITIVE = {"admission_lookahead", "stream_interval", "max_model_len", "max_num_seqs", "kv_cache_tokens", "max_num_batched_tokens", "tick_s"}


def available_profiles() -> list[str]:
    return sorted(f[:-5] for f in os.listdir(PROFILE_DIR) if f.endswith(".yaml"))


def profile_from_dict(data: dict, name: str = "custom") -> Profile:
    if not isinstance(data, dict):
        raise ProfileError(f"profile {name}: top level must be a mapping")
    known = {f.name for f in fields(Profile)}
    kw = {"name": name}
    for key, val in data.items():
        if key not in known:
            raise ProfileError(f"profile {name}: unknown field '{key}'")
        if key in _INT_FIELDS:
            if isinstance(val, bool) or not isinstance(val, int):
                raise ProfileError(f"profile {name}: field '{key}' must be an integer, got {val!r}")
        elif key in _FLOAT_FIELDS:
            if isinstance(val, bool) or not isinstance(val, (int, float)):
                raise ProfileError(f"profile {name}: field '{key}' must be a number, got {val!r}")
            val = float(val)
            if val < 0:
                raise ProfileError(f"profile {name}: field '{key}' must be >= 0, got {val!r}")
        elif key in _STR_FIELDS:
            if not isinstance(val, str):
                raise ProfileError(f"profile {name}: field '{key}' must be a string, got {val!r}")
        elif key in _CHOICES:
            if val not in _CHOICES[key]:
                raise ProfileError(f"profile {name}: field '{key}' must be one of {'/'.join(_CHOICES[key])}, got {val!r}")
        elif key == "faults":
            if not isinstance(val, dict):
                raise ProfileError(f"profile {name}: field 'faults' must be a mapping")
            from .faults import FaultError, parse_fault_mapping

            try:
                val = parse_fault_mapping(val)
            except FaultError as e:
                raise ProfileError(f"profile {name}: field 'faults': {e}") from None
        if key in _POSITIVE and val <= 0:
            raise ProfileError(f"profile {name}: field '{key}' must be > 0, got {val!r}")
        kw[key] = val
    p = Profile(**kw)
    if p.kind == "batch" and p.kv_cache_tokens < p.max_model_len:
        raise ProfileError(f"profile {name}: field 'kv_cache_tokens' must be >= max_model_len ({p.max_model_len})")
    return p


def load_profile(spec: str) -> Profile:
    """Load a profile by name (bundled) or by path to a YAML file."""
    if os.sep in spec or spec.endswith((".yaml", ".yml")) or os.path.exists(spec):
        path, name = spec, os.path.splitext(os.path.basename(spec))[0]
    else:
        path, name = os.path.join(PROFILE_DIR, spec + ".yaml"), spec
        if not os.path.exists(path):
            raise ProfileError(f"unknown profile '{spec}' (available: {', '.join(available_profiles())})")
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f) or {}
    except OSError as e:
        raise ProfileError(f"profile {spec}: cannot read: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise ProfileError(f"profile {spec}: invalid YAML: {str(e).splitlines()[0]}") from None
    return profile_from_dict(data, name)
