"""A results folder's name and ownership: a new run id, and the OS lock that makes one run (one
process) the only writer of a folder, checked before any load (a second run with the same --run-id
is refused) and held until the run's writing ends.
"""

from __future__ import annotations

import fcntl
import logging
import os
import secrets
import shutil
from datetime import UTC, datetime

from core.errors import InputError
from runfolder.layout import RUN
from runfolder.unwritten import unwritten_limit

log = logging.getLogger("llm")

LOCK = ".lock"  # the run writing the folder holds an OS lock on it (`lock_folder`)


def new_run_id() -> str:
    return datetime.now(UTC).strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


def _in_use(path: str) -> bool:
    return os.path.isdir(path) and any(e.name != LOCK for e in os.scandir(path))


# Folders whose lock this process holds (real path -> the lock file's descriptor). The lock is
# fcntl.flock on the folder's .lock file: held from the moment a run claims the folder (at init for a
# named headless run, so that a second run with the same --run-id is refused before any load) to
# the end of its writing, and released by the kernel when the process ends, however it ends.
_held: dict[str, int] = {}


def lock_folder(path: str) -> bool:
    """Take the OS lock of a results folder (made if missing) for this process; False when another
    process holds it. Taking it again in the process that holds it is a no-op."""
    key = os.path.realpath(path)
    if key in _held:
        return True
    os.makedirs(path, exist_ok=True)
    fd = os.open(os.path.join(path, LOCK), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return False
    _held[key] = fd
    return True


def unlock_folder(path: str) -> None:
    fd = _held.pop(os.path.realpath(path), None)
    if fd is not None:
        os.close(fd)  # closing the descriptor releases the lock


def is_locked(path: str) -> bool:
    """Another process holds the folder's lock: a run is writing it now (whatever its files' age)."""
    if os.path.realpath(path) in _held:
        return False
    try:
        fd = os.open(os.path.join(path, LOCK), os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def _being_written(path: str, option: str) -> InputError:
    return InputError(
        f"{option}: {path} is being written by a run now (another process holds its lock); "
        "choose another --run-id, or wait for that run to end"
    )


def check_folder(results_dir: str, run_id: str, overwrite: bool) -> None:
    """A named run's folder must be free: refused (InputError, one line) when it holds anything,
    unless `overwrite`, and always when a run is writing it (it holds the folder's lock). Called
    before any load; `reserve_folder` / the writer then take the lock. The writer's limit on
    unwritten records (LLM_RESULTS_UNWRITTEN_LIMIT) is checked here too."""
    unwritten_limit()
    if not run_id:
        return
    path = os.path.join(results_dir, run_id)
    if os.path.exists(path) and not os.path.isdir(path):
        raise InputError(f"--run-id: {path} exists and is not a folder; choose another --run-id")
    if is_locked(path):
        raise _being_written(path, "--overwrite" if overwrite else "--run-id")
    if not _in_use(path):
        return
    if not overwrite:
        raise InputError(
            f"--run-id: {path} already holds a run; choose another --run-id, or add --overwrite to replace it"
        )
    if not os.path.exists(os.path.join(path, RUN)):
        raise InputError(
            f"--overwrite: {path} is not a results folder (no run.json); remove it yourself or choose another --run-id"
        )


def reserve_folder(results_dir: str, run_id: str, overwrite: bool) -> None:
    """A named run's folder, checked (`check_folder`) and locked for this process before any load:
    of two runs started with one --run-id, the second is refused here (InputError), before its
    users start. The writer keeps the lock; nothing is removed yet (--overwrite removes the earlier
    run when the run starts)."""
    check_folder(results_dir, run_id, overwrite)
    if run_id:
        path = os.path.join(results_dir, run_id)
        if not lock_folder(path):
            raise _being_written(path, "--overwrite" if overwrite else "--run-id")
        check_folder(results_dir, run_id, overwrite)  # what the folder holds, now that no other run can write it


def claim_folder(results_dir: str, run_id: str, overwrite: bool) -> str:
    """The run's folder, made and locked (`lock_folder`): two writers with one run id cannot both
    have it. With `overwrite`, an earlier run in it is removed, the lock file kept."""
    path = os.path.join(results_dir, run_id)
    os.makedirs(results_dir, exist_ok=True)
    if not lock_folder(path):
        raise _being_written(path, "--overwrite" if overwrite else "--run-id")
    if _in_use(path):
        try:
            check_folder(results_dir, run_id, overwrite)
        except InputError:
            unlock_folder(path)
            raise
        for entry in os.scandir(path):
            if entry.name != LOCK:
                shutil.rmtree(entry.path) if entry.is_dir(follow_symlinks=False) else os.remove(entry.path)
        log.warning("--overwrite: removed the earlier run in %s", path)
    return path
