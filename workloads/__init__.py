"""Workloads: the workload spec (YAML), its validation, the template library
and the seeded request sampler.

    spec = load_spec(None)               # the built-in reference mix
    sampler = Sampler(spec, seed=42)
    req = sampler.next()                 # Request(request_class, system, user, max_tokens, input_chars)
    req.messages()                       # OpenAI chat messages

Every mistake in a spec or a template library raises `core.errors.InputError` (one line).
"""

from .distributions import Distribution, SecondsDistribution
from .library import Library, Template, load_library
from .request import Request, derive_seed
from .sampler import Sampler
from .session import Conversation
from .spec import ClassSpec, WorkloadSpec, load_spec
from .spec_file import (
    DEFAULT_SPEC_PATH,
    DEFAULT_TEMPLATES_PATH,
    SessionSpec,
    SharedPrefixSpec,
    SystemPromptSpec,
    TemplateFilter,
    WorkloadFile,
)

__all__ = [
    "WorkloadSpec",
    "WorkloadFile",
    "ClassSpec",
    "Distribution",
    "SecondsDistribution",
    "SystemPromptSpec",
    "TemplateFilter",
    "Library",
    "Template",
    "Request",
    "Sampler",
    "load_spec",
    "load_library",
    "derive_seed",
    "class_weights",
    "DEFAULT_SPEC_PATH",
    "DEFAULT_TEMPLATES_PATH",
    "Conversation",
    "SessionSpec",
    "SharedPrefixSpec",
]


def class_weights(spec: WorkloadSpec | str | None = None) -> list[tuple[str, float]]:
    """``[(class name, weight), ...]`` of a spec (or spec path; None = default), for display."""
    if not isinstance(spec, WorkloadSpec):
        spec = load_spec(spec)
    return spec.class_weights()
