"""One suite per run: a master and its workers run the same version of the suite, or the worker is
refused.

The version (runfolder/provenance.py `suite_version`: `git describe`, and where the checkout is
modified or there is none, a hash of the source) and the hash of the source are read as this
module is imported, when the process loads its code; two processes are of one version when their
sources hash alike. The master puts its own under one key of its options, which Locust sends
with every spawn message: a worker of another version cannot start the run and says so naming both
(plugin/worker.py `cannot_run`). Every worker report carries the worker's version too, so a worker
that does not check (one older than this exchange) is refused by the master: a worker running other
code records other figures (another classification of the same replies, batches of a run the master
does not know), and a run with it would state one version.

A worker started from the master's own folder after that folder was edited is of another version
too: it runs other code than the master loaded, whatever the folder's name. Its refusal says the
folder was edited between the two starts.
"""

from __future__ import annotations

import socket

from runfolder.provenance import ROOT, source_hash, suite_version

KEY = "llm_suite_version"  # in the master's options (each spawn message) and in each worker report
# the code this process loaded: compared by its source (a commit made meanwhile in the same tree changes
# `git describe`, not the code), named by its version
SOURCE = source_hash()
VERSION = suite_version()
OURS = {"version": VERSION, "source": SOURCE, "tree": f"{socket.gethostname()}:{ROOT}"}
SAME = "start the master and its workers from the same version of this suite"


def named(v: dict) -> str:
    """A version as a line names it: with its source's hash, unless it already says it."""
    version, source = str(v.get("version")), str(v.get("source"))
    return version if source in version else f"{version}, source {source}"


def announce(environment) -> None:
    """Master: its version travels to the workers with its options."""
    setattr(environment.parsed_options, KEY, OURS)


def report(data: dict) -> None:
    """Worker: its version, with every report."""
    data[KEY] = OURS


def _same(theirs) -> bool:
    """Of one version: the same source, wherever it was started from."""
    return isinstance(theirs, dict) and theirs.get("source") == SOURCE


def _edited(theirs: dict) -> str:
    """What a refusal adds when both processes were started from this folder on this machine."""
    return f" (the folder {ROOT} was edited between their starts)" if theirs.get("tree") == OURS["tree"] else ""


def masters_differs(environment) -> str | None:
    """Worker: why it cannot run the master's run, when the master's version is not its own."""
    theirs = getattr(environment.parsed_options, KEY, None)
    if _same(theirs):
        return None
    if not isinstance(theirs, dict):
        return f"the master sent no suite version (it runs a version older than this worker's {named(OURS)}); {SAME}"
    return f"this worker runs suite version {named(OURS)}, its master {named(theirs)}{_edited(theirs)}; {SAME}"


def workers_differs(client_id: str, data: dict) -> str | None:
    """Master: why a worker is refused, when the version in its report is not the master's."""
    theirs = data.pop(KEY, None)
    if _same(theirs):
        return None
    if not isinstance(theirs, dict):
        return f"worker {client_id} sent no suite version (it runs a version older than the master's {named(OURS)}); {SAME}"
    return f"worker {client_id} runs suite version {named(theirs)}, the master {named(OURS)}{_edited(theirs)}; {SAME}"
