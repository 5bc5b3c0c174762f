"""An upload's check (uploads.check_prediction) in a child process bounded in time and memory.

The server's process never reads an uploaded file's records: a child does, forked from a
multiprocessing fork server that imported sgeval once (so a check starts in milliseconds, not the
half second of a new interpreter). The child

- limits its address space to what it had at its start plus ``validation_memory_mb``
  (RLIMIT_AS: an allocation beyond it fails with MemoryError) and its CPU time to
  ``validation_timeout`` + 1 s (RLIMIT_CPU), and dies with the fork server, which dies with the
  server (so a killed server leaves no check running);
- reads the file under its own name in its folder, so every problem line starts with that name,
  which is replaced (that prefix only) by the name the submitter gave: no text of the file is
  rewritten, and no server path can appear;
- stops at ``max_records_factor`` x the split's images valid records, and at as many problems
  (at least uploads.MAX_PROBLEMS), keeping the first MAX_PROBLEMS problem lines.

The server kills the child at ``validation_timeout`` seconds (wall clock). The answer names the
bound that was hit.
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.forkserver
import os
import resource
import signal
import typing
from pathlib import Path

from . import uploads

log = logging.getLogger("sgeval.serve")
_CONTEXT = multiprocessing.get_context("forkserver")


class Limits(typing.NamedTuple):
    """The bounds of one check (from the service's settings)."""

    seconds: int  # validation_timeout
    memory_mb: int  # validation_memory_mb
    records_factor: int  # max_records_factor

    @classmethod
    def of(cls, settings):
        return cls(settings.validation_timeout, settings.validation_memory_mb, settings.max_records_factor)


def start():
    """Start the fork server (sgeval imported in it) now rather than at the first upload."""
    _CONTEXT.set_forkserver_preload(["sgeval_serve.uploads"])
    multiprocessing.forkserver.ensure_running()


def check_upload(path, shown_name, info, benchmark, limits):
    """uploads.check_prediction of the file at path in a bounded child process: (counts,
    problems), the problems naming the file shown_name. Blocks (run it in a thread)."""
    path = Path(path)
    receiver, sender = _CONTEXT.Pipe(duplex=False)
    child = _CONTEXT.Process(target=_child, args=(sender, str(path), info, benchmark, limits), daemon=True,
                             name="sgeval-check")
    child.start()
    sender.close()
    try:
        answer = receiver.recv() if receiver.poll(limits.seconds) else "timeout"
    except (EOFError, OSError):  # the child died without an answer
        answer = None
    finally:
        receiver.close()
        if child.is_alive():
            child.kill()
        child.join()
    empty = {"predicted": 0, "missing": len(info.image_ids), "extra": 0, "missing_examples": []}
    if answer == "timeout" or child.exitcode == -signal.SIGXCPU:
        return empty, [f"{shown_name}: checking the file took longer than the limit of {limits.seconds} s "
                       "(validation_timeout)"]
    if answer == "memory":
        return empty, [f"{shown_name}: checking the file needed more than the memory limit of {limits.memory_mb} MiB "
                       "(validation_memory_mb)"]
    if answer is None:
        log.error("the check of an upload (%s) ended with exit code %s", path.name, child.exitcode)
        return empty, [f"{shown_name}: the check of the file stopped (exit code {child.exitcode}); it may need more "
                       f"than the memory limit of {limits.memory_mb} MiB (validation_memory_mb)"]
    counts, problems = answer
    prefix = path.name + ": "
    return counts, [shown_name + ": " + line[len(prefix):] if line.startswith(prefix) else line for line in problems]


def _address_space():
    """This process's address space in bytes (/proc/self/statm's first field)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def _child(sender, path, info, benchmark, limits):
    """The check in the child: bounded, then (counts, problems), "memory" or nothing sent."""
    from .jobs import _die_with_parent

    _die_with_parent()
    memory = _address_space() + (limits.memory_mb << 20)
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CPU, (limits.seconds + 1, limits.seconds + 2))
    os.chdir(os.path.dirname(path))
    try:
        answer = uploads.check_prediction(os.path.basename(path), None, info, benchmark, limits.records_factor)
    except MemoryError:
        answer = "memory"
    sender.send(answer)
    sender.close()
