"""Transition only: the suite has one bad-input error, `core.errors.InputError`. This alias lets the
modules still importing `WorkloadError` (plugin/context.py, shapes/replay.py) load until they import
InputError; then this file goes."""

from core.errors import InputError as WorkloadError

__all__ = ["WorkloadError"]
