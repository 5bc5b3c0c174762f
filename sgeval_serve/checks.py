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

The server kills the child when it has run ``validation_timeout`` seconds. The answer names the
bound that was hit.

CheckTurns decides which checks run: at most two at once (RUNNING), the others wait in line by
their submitter's refused uploads in the last hour, then by arrival. A check that has run for
QUANTUM seconds while another waits is paused (SIGSTOP) and goes back in line, so a long check
(a bomb that runs into the time limit) delays a short one by a quantum, not by its whole time. At
most ALIVE checks exist at once, running or paused (each holds its memory while paused).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import multiprocessing
import multiprocessing.forkserver
import os
import resource
import signal
import time
import typing
from pathlib import Path

import anyio.to_thread

from . import uploads

log = logging.getLogger("sgeval.serve")
_CONTEXT = multiprocessing.get_context("forkserver")
RUNNING = 2  # checks running at once
ALIVE = 8  # checks running or paused at once
QUANTUM = 0.5  # seconds a check runs before it lets a waiting one run


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


class CheckTurns:
    """Which checks run (see the module's docstring). acquire(priority) waits for a turn, release()
    ends one; contended() says whether a check waits for one."""

    def __init__(self, running=RUNNING, alive=ALIVE):
        self.free, self.waiting, self.arrivals = running, [], itertools.count()
        self.alive = asyncio.Semaphore(alive)

    async def acquire(self, priority):
        if self.free and not self.contended():
            self.free -= 1
            return
        turn = asyncio.get_running_loop().create_future()
        heapq.heappush(self.waiting, (priority, next(self.arrivals), turn))
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():  # the turn came with the cancellation: pass it on
                self.release()
            raise

    def release(self):
        while self.waiting:
            turn = heapq.heappop(self.waiting)[2]
            if not turn.done():
                turn.set_result(None)
                return
        self.free += 1

    def contended(self):
        return any(not turn.done() for _, _, turn in self.waiting)


async def check_upload(turns, priority, path, shown_name, info, benchmark, limits):
    """uploads.check_prediction of the file at path in a bounded child process, run when turns
    gives it a turn (priority: lower first): (counts, problems), the problems naming the file
    shown_name."""
    path = Path(path)
    async with turns.alive:
        await turns.acquire(priority)
        holding, child, receiver = True, None, None
        try:
            child, receiver = await anyio.to_thread.run_sync(_start, path, info, benchmark, limits)
            answer, ran = None, 0.0
            while True:
                started = time.monotonic()
                ready = await anyio.to_thread.run_sync(receiver.poll, max(0.0, min(QUANTUM, limits.seconds - ran)))
                ran += time.monotonic() - started
                if ready:
                    answer = await anyio.to_thread.run_sync(_answer, receiver)
                    break
                if ran >= limits.seconds:
                    answer = "timeout"
                    break
                if turns.contended():  # another check waits: this one pauses and goes back in line
                    os.kill(child.pid, signal.SIGSTOP)
                    holding = False
                    turns.release()
                    await turns.acquire(priority)
                    holding = True
                    os.kill(child.pid, signal.SIGCONT)
        finally:
            if holding:
                turns.release()
            if child is not None:
                await anyio.to_thread.run_sync(_end, child, receiver)
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


def check_upload_now(path, shown_name, info, benchmark, limits):
    """check_upload for a process of its own (the CLI's submit): blocks until the answer."""
    return asyncio.run(check_upload(CheckTurns(), 0, path, shown_name, info, benchmark, limits))


def _start(path, info, benchmark, limits):
    receiver, sender = _CONTEXT.Pipe(duplex=False)
    child = _CONTEXT.Process(target=_child, args=(sender, str(path), info, benchmark, limits), daemon=True,
                             name="sgeval-check")
    child.start()
    sender.close()
    return child, receiver


def _answer(receiver):
    try:
        return receiver.recv()
    except (EOFError, OSError):  # the child died without an answer
        return None


def _end(child, receiver):
    receiver.close()
    if child.is_alive():
        child.kill()  # SIGKILL ends a paused process too
    child.join()


def _address_space():
    """This process's address space in bytes (/proc/self/statm's first field)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def _child(sender, path, info, benchmark, limits):
    """The check in the child: bounded, then (counts, problems), "memory" or nothing sent."""
    from .jobs import die_with_parent

    die_with_parent()
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
