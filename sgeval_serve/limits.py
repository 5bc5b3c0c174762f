"""Bounds on what one request may send, applied before any other work on it (authentication
included): its body's size, counted while the body streams in, and the time its body may take.

An upload (``POST /b/<name>/submissions`` and its ``/api`` twin) may send ``max_upload_mb`` and
the form around the file; every other request at most SMALL_BODY bytes (a form or JSON object of a
few short fields). A declared ``Content-Length`` over the bound is refused at once, before the body
is read (an upload's is left to uploads.receive, which reads the form's fields before the file so
that a refused form keeps them); a body sent without one is cut when it passes the bound. A body
that stops arriving for ``body_timeout`` seconds ends its request with 408.
"""

from __future__ import annotations

import asyncio
import re

SMALL_BODY = 8192  # bytes of any request but an upload
FORM_OVERHEAD = 64 * 1024  # an upload's form around its file: the text fields and the parts' headers
UPLOAD_PATH = re.compile(r"(?:/api)?/b/[^/]+/submissions")


class BodyTooLarge(Exception):
    """The request's body passed its bound (raised by the receive of BodyLimits)."""

    def __init__(self, limit):
        super().__init__(f"the request is larger than the limit of {limit:,} bytes")
        self.limit = limit


class BodyTimeout(Exception):
    """The request's body stopped arriving for body_timeout seconds."""

    def __init__(self, seconds):
        super().__init__(f"the request's body stopped arriving for {seconds:g} s")
        self.seconds = seconds


def is_upload(scope):
    return scope["method"] == "POST" and UPLOAD_PATH.fullmatch(scope["path"]) is not None


def declared_length(scope):
    """The request's Content-Length (h11 has checked that it is a number), or None."""
    for name, value in scope["headers"]:
        if name == b"content-length":
            return int(value)
    return None


class BodyLimits:
    """ASGI middleware: every request's body bounded in size and time (see the module's docstring).
    refuse(scope, receive, send, status, message) answers a request refused before its body."""

    def __init__(self, app, upload_bytes, body_timeout, refuse):
        self.app, self.upload_limit, self.body_timeout, self.refuse = app, upload_bytes + FORM_OVERHEAD, body_timeout, refuse

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        upload = is_upload(scope)
        limit = self.upload_limit if upload else SMALL_BODY
        declared = declared_length(scope)
        if declared is not None and declared > limit and not upload:
            return await self.refuse(scope, receive, send, 413, str(BodyTooLarge(limit)))
        received, ended, over = 0, False, False

        async def bounded_receive():
            nonlocal received, ended, over
            if over:
                raise BodyTooLarge(limit)
            if ended:  # the body is in: what follows is the wait for a disconnect, not bounded here
                return await receive()
            try:
                message = await asyncio.wait_for(receive(), self.body_timeout)
            except asyncio.TimeoutError:
                raise BodyTimeout(self.body_timeout) from None
            if message["type"] != "http.request":
                ended = True
                return message
            body = message.get("body", b"")
            ended = not message.get("more_body", False)
            if received + len(body) > limit:  # the part within the bound now, the refusal at the next call
                message = {**message, "body": body[:limit - received], "more_body": True}
                over, ended = True, False
            received += len(message["body"])
            return message

        return await self.app(scope, bounded_receive, send)
