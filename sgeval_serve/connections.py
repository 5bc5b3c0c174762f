"""uvicorn's HTTP/1.1 protocol (h11) with the bounds it lacks.

- ``header_timeout``: a request's head (its line and headers) must be complete within this many
  seconds of the connection's start, or of the end of the previous response; else the connection
  is closed. uvicorn has no such deadline: a client that sends its head a byte at a time holds its
  connection and a file descriptor for ever (its keep-alive timeout is reset by every byte).
- A request answered before its body has arrived (a refusal): the rest of the body is read and
  dropped while it keeps coming (no pause of header_timeout), for at most LINGER_SECONDS, so the
  client reads the answer rather than a reset; then the next request's head has header_timeout.
  (A client that sent ``Connection: close`` is cut at once, as uvicorn does.)
- ``max_connections``: a connection beyond this many closes the connection that has waited longest
  for a request's head, or itself when every other connection is busy with a request. uvicorn's
  ``limit_concurrency`` answers 503 only once a request's head has arrived, so it does not bound
  connections that never send one; a server without a bound runs out of file descriptors.

The head's size is bounded by h11 (``h11_max_incomplete_event_size``, 16 KiB), a body's size and
time by limits.BodyLimits. serve() checks that the open-file limit leaves room for max_connections.
"""

from __future__ import annotations

import resource
import time

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

MAX_HEAD_BYTES = 16 * 1024  # a request's line and headers (h11_max_incomplete_event_size)
LINGER_SECONDS = 60  # the most time the rest of a refused request's body is read for
SPARE_FILES = 64  # open files beside the connections: the database, uploads, logs, pipes, libraries


class BoundedH11Protocol(H11Protocol):
    """uvicorn's H11Protocol with header_timeout and max_connections (set by protocol_class)."""

    header_timeout = 10.0
    max_connections = 100

    def connection_made(self, transport):
        super().connection_made(transport)
        self.head_deadline, self.waiting_since = None, None
        self._wait_for_head()
        open_connections = [c for c in self.connections if not c.transport.is_closing()]
        if len(open_connections) > self.max_connections:
            waiting = [c for c in open_connections if c is not self and getattr(c, "waiting_since", None) is not None]
            (min(waiting, key=lambda c: c.waiting_since) if waiting else self).transport.close()

    def data_received(self, data):
        cycle, lingering = self.cycle, self.conn.our_state is h11.DONE and self.conn.their_state is h11.SEND_BODY
        super().data_received(data)
        if self.cycle is not cycle:  # a request's head arrived (its cycle began)
            self._head_arrived()
        elif lingering and not self.transport.is_closing():
            if self.conn.their_state is not h11.SEND_BODY:
                self._wait_for_head()  # the refused request's body has ended: the next head's deadline starts
            else:  # it goes on: a pause of header_timeout ends it, as does the end of its time
                self._wait_for_head(min(self.header_timeout, self.linger_until - time.monotonic()), keep_since=True)

    def on_response_complete(self):
        cycle = self.cycle
        super().on_response_complete()
        if self.cycle is cycle and not self.transport.is_closing():  # no pipelined request began: wait for one
            self.linger_until = time.monotonic() + LINGER_SECONDS
            self._wait_for_head(self.header_timeout if self.conn.their_state is h11.SEND_BODY else None)

    def connection_lost(self, exc):
        self._head_arrived()
        super().connection_lost(exc)

    def _wait_for_head(self, seconds=None, keep_since=False):
        """The deadline of the next request's head (or of the rest of a refused body): in seconds,
        else header_timeout."""
        since = self.waiting_since
        self._head_arrived()
        self.waiting_since = since if keep_since and since is not None else time.monotonic()
        self.head_deadline = self.loop.call_later(max(0.0, seconds or self.header_timeout), self._head_overdue)

    def _head_arrived(self):
        self.waiting_since = None
        if self.head_deadline is not None:
            self.head_deadline.cancel()
            self.head_deadline = None

    def _head_overdue(self):
        self.head_deadline = None
        if not self.transport.is_closing():
            self.transport.close()


def protocol_class(settings):
    """BoundedH11Protocol with the settings' header_timeout and max_connections."""
    return type("BoundedH11Protocol", (BoundedH11Protocol,), {"header_timeout": float(settings.header_timeout),
                                                             "max_connections": settings.max_connections})


def ensure_open_files(max_connections):
    """Raise the soft open-file limit to fit max_connections (and SPARE_FILES) when it is lower;
    returns None, or the problem when the hard limit does not allow it."""
    needed = max_connections + SPARE_FILES
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        if hard != resource.RLIM_INFINITY and hard < needed:
            return (f"max_connections {max_connections} needs {needed} open files, more than this process may open "
                    f"({hard}: ulimit -Hn); lower max_connections")
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
    return None
