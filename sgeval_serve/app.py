"""The web application (Starlette): HTML pages rendered with Jinja2 and the JSON API beside them.

Every page has its data at the same path under ``/api`` (``/b/psg`` and ``/api/b/psg``). Browsers
log in with their token once and then hold a session cookie; API clients send
``Authorization: Bearer <token>``. Every form carries a CSRF token tied to the browser's session
(before logging in: to a cookie of the browser).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
import hmac
import json
import logging
import math
import re
import secrets
import time
import unicodedata
from pathlib import Path
from urllib.parse import urlsplit

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, RedirectResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

import sgeval

from . import boards, checks, jobs, limits, uploads
from . import store as store_module
from .store import Duplicate, QuotaExceeded, Store

log = logging.getLogger("sgeval.serve")
HERE = Path(__file__).resolve().parent
SESSION_COOKIE, CSRF_COOKIE = "sgeval_session", "sgeval_csrf"
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9 ._-]{0,39}")
ADMIN_ACTIONS = {"approve": ("approved", 1), "unapprove": ("approved", 0), "hide": ("hidden", 1),
                 "unhide": ("hidden", 0)}
OWNER_ACTIONS = {"publish": ("public", 1), "unpublish": ("public", 0)}
HIDDEN_CATEGORIES = {"Cc", "Cf", "Co", "Cs", "Cn", "Zl", "Zp"}  # refused in names and links
SECURITY_HEADERS = [(b"content-security-policy", b"default-src 'self'; img-src 'self'; style-src 'self'; "
                     b"script-src 'none'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"),
                    (b"x-content-type-options", b"nosniff"), (b"x-frame-options", b"DENY"),
                    (b"referrer-policy", b"same-origin")]


class Problem(Exception):
    """An error for the client: HTTP status and one line per problem (shown as a page or JSON)."""

    def __init__(self, status, problems, **extra):
        super().__init__("\n".join(problems))
        self.status, self.problems, self.extra = status, list(problems), extra


def _is_api(request):
    return request.url.path.startswith("/api/")


def _page(request, template, data, status=200):
    """HTML: the template with data; under /api: data as JSON."""
    if _is_api(request):
        return JSONResponse(data, status_code=status)
    state = request.app.state
    context = {"data": data, "user": request.state.user, "csrf": _csrf_token(request), "site": state.settings.title,
               "signup": state.settings.signup, "benchmarks": state.settings.benchmarks}
    response = state.templates.TemplateResponse(request, template, context, status_code=status)
    if request.state.new_csrf_cookie:
        response.set_cookie(CSRF_COOKIE, request.state.csrf_cookie, httponly=True, samesite="strict",
                            secure=request.url.scheme == "https")
    return response


def _redirect(request, path, data=None, status=200):
    if _is_api(request):
        return JSONResponse(data or {}, status_code=status)
    return RedirectResponse(path, status_code=303)


# users, sessions and CSRF ------------------------------------------------------------------


def _authenticate(request):
    """Sets request.state.user (None for a visitor). The API takes only tokens
    (Authorization: Bearer), the pages only the session cookie, so the API needs no CSRF token."""
    store = request.app.state.store
    request.state.user, request.state.session_key = None, None
    authorization = request.headers.get("authorization", "")
    if _is_api(request) and authorization[:7].lower() == "bearer ":
        request.state.user = store.user_by_token(authorization[7:].strip())
        if request.state.user is None:
            raise Problem(401, ["the API token is not valid (or was revoked)"])
    elif not _is_api(request) and request.cookies.get(SESSION_COOKIE):
        request.state.user = store.user_by_session(request.cookies[SESSION_COOKIE],
                                                   request.app.state.settings.session_days)
        if request.state.user is not None:
            request.state.session_key = request.cookies[SESSION_COOKIE]
    _read_csrf_cookie(request)


def _read_csrf_cookie(request):
    """The browser's CSRF cookie, or a new one (set by the response) when it has none."""
    cookie = request.cookies.get(CSRF_COOKIE, "")
    request.state.new_csrf_cookie = not re.fullmatch(r"[A-Za-z0-9_-]{32,64}", cookie)
    request.state.csrf_cookie = secrets.token_urlsafe(32) if request.state.new_csrf_cookie else cookie


def _csrf_token(request):
    """The forms' CSRF token: bound to the session of a logged-in browser, else to its CSRF cookie
    (a cookie planted by another site then makes no token valid in anyone's session)."""
    session = getattr(request.state, "session_key", None)
    bound = f"session:{session}" if session else f"cookie:{request.state.csrf_cookie}"
    return hmac.new(request.app.state.store.secret, bound.encode(), hashlib.sha256).hexdigest()


def _check_csrf(request, sent):
    """Forms must carry the token of their browser's cookie (the API does not read cookies)."""
    if _is_api(request):
        return
    if request.state.new_csrf_cookie or not hmac.compare_digest(str(sent or ""), _csrf_token(request)):
        raise Problem(403, ["the form has expired or did not come from this site: reload the page and send it again"])


async def _small_body(request):
    """A small request's body, read while it streams and cut at limits.SMALL_BODY bytes."""
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > limits.SMALL_BODY:
            raise limits.BodyTooLarge(limits.SMALL_BODY)
    return body


async def _fields(request):
    """A small request's fields: a page's form (CSRF checked) or the API's JSON or form body."""
    if _is_api(request) and request.headers.get("content-type", "").startswith("application/json"):
        body = await _small_body(request)
        try:
            value = json.loads(body)
        except ValueError:
            raise Problem(400, ["the body is not valid JSON"]) from None
        return value if isinstance(value, dict) else {}
    try:
        async with request.form(max_files=0, max_fields=8, max_part_size=4096) as form:
            fields = {key: str(value) for key, value in form.items()}
    except (limits.BodyTooLarge, limits.BodyTimeout):
        raise
    except Exception as error:  # python-multipart's and Starlette's errors on a malformed body
        raise Problem(400, [f"the form cannot be read ({type(error).__name__})"]) from None
    _check_csrf(request, fields.get("csrf"))
    return fields


def _need_user(request):
    if request.state.user is None:
        raise Problem(401, ["log in with your token first" if not _is_api(request)
                            else "send your API token: Authorization: Bearer <token>"])
    return request.state.user


def _need_admin(request):
    user = _need_user(request)
    if not user["admin"]:
        raise Problem(403, ["only admins can do this"])
    return user


def _benchmark(request):
    benchmark = request.app.state.settings.benchmarks.get(request.path_params["slug"])
    if benchmark is None:
        raise Problem(404, ["no such benchmark"])
    return benchmark


def _submission_id(request):
    value = request.path_params["submission_id"]
    if not value.isdigit() or len(value) > 12:
        raise Problem(404, ["no such submission"])
    return int(value)


# pages -------------------------------------------------------------------------------------


async def index(request):
    data = await run_in_threadpool(boards.index, request.app.state.store, request.app.state.settings)
    return _page(request, "index.html", data)


async def leaderboard(request):
    benchmark = _benchmark(request)
    board = request.path_params.get("board", "public")
    query = request.query_params
    try:
        data = await run_in_threadpool(boards.leaderboard, request.app.state.store, benchmark, board,
                                       request.state.user, query.get("sort"), query.get("order"))
    except boards.NotVisible:
        raise Problem(404, [f"no board '{board}' (boards: {', '.join(boards.BOARDS)})"]) from None
    return _page(request, "board.html", data)


async def submission(request):
    state = request.app.state
    try:
        data = await run_in_threadpool(boards.submission, state.store, state.settings, _submission_id(request),
                                       request.state.user)
    except boards.NotVisible:
        raise Problem(404, ["no such submission (or it is not public)"]) from None
    return _page(request, "submission.html", data)


async def plot(request):
    try:
        path = boards.plot_path(request.app.state.store, _submission_id(request), request.state.user)
    except boards.NotVisible:
        raise Problem(404, ["no such figure"]) from None
    return FileResponse(path, media_type="image/png")


async def mine(request):
    user = _need_user(request)
    data = await run_in_threadpool(boards.mine, request.app.state.store, request.app.state.settings, user)
    return _page(request, "me.html", data)


async def admin(request):
    _need_admin(request)
    data = await run_in_threadpool(boards.admin, request.app.state.store, request.app.state.settings)
    return _page(request, "admin.html", data)


# submitting --------------------------------------------------------------------------------


def visible(text):
    """False when text holds a control, format (bidi overrides, zero-width), private-use,
    surrogate, unassigned or line/paragraph-separator character."""
    return not any(unicodedata.category(c) in HIDDEN_CATEGORIES for c in text)


def _words(value):
    """A text field with its runs of white space made single spaces and its ends trimmed."""
    return " ".join(str(value or "").split())


def _url(value, field, problems):
    value = (value or "").strip()
    if not value:
        return value
    try:
        parts = urlsplit(value)
        valid = len(value) <= 500 and parts.scheme in ("http", "https") and bool(parts.hostname) and visible(value)
    except ValueError:  # urlsplit's on a malformed address, such as http://[::1
        valid = False
    if not valid:
        problems.append(f"{field}: give an http:// or https:// address (at most 500 characters)")
    return value


def submission_fields(fields):
    """The form's text fields checked: (method, paper_url, code_url, public) or Problem."""
    problems = []
    method = _words(fields.get("method"))
    if not 1 <= len(method) <= 100:
        problems.append("method: give the method's name (1 to 100 characters)")
    elif not visible(method):
        problems.append("method: give the method's name (1 to 100 characters) without control, format (bidi, "
                        "zero-width) or private-use characters")
    paper, code = _url(fields.get("paper_url"), "paper_url", problems), _url(fields.get("code_url"), "code_url", problems)
    public = fields.get("public", "1") not in ("0", "false", "no", "off", "")
    if problems:
        raise Problem(400, problems)
    return method, paper, code, public


async def submit_form(request):
    benchmark = _benchmark(request)
    _need_user(request)
    return _page(request, "submit.html", {"benchmark": boards.benchmark_info(benchmark), "problems": [],
                                          "fields": {"public": "1"}})


async def submit(request):
    """Receive, validate and queue an upload; the HTML form gets its page back with the problems."""
    benchmark = _benchmark(request)
    try:
        submission_id, counts = await _accept(request, benchmark)
    except Problem as problem:
        if _is_api(request) or request.state.user is None:
            raise
        data = {"benchmark": boards.benchmark_info(benchmark), "problems": problem.problems,
                "fields": problem.extra.get("fields", {}), "images": problem.extra.get("images")}
        return _page(request, "submit.html", data, status=problem.status)
    data = {"id": submission_id, "status": "queued", "images": counts, "url": f"/submissions/{submission_id}"}
    return _redirect(request, f"/submissions/{submission_id}", data, status=201)


class RefusedUploads:
    """The times of each submitter's refused uploads in the last hour (in memory: a restart
    forgets them)."""

    def __init__(self, per_hour):
        self.per_hour, self.times = per_hour, collections.defaultdict(collections.deque)

    def add(self, user_id):
        self.times[user_id].append(time.monotonic())

    def count(self, user_id):
        """The user's refused uploads in the last hour."""
        times = self.times[user_id]
        while times and times[0] < time.monotonic() - 3600:
            times.popleft()
        return len(times)

    def wait(self, user_id):
        """Seconds until the user may upload again (0: now)."""
        return 0 if self.count(user_id) < self.per_hour else self.times[user_id][0] + 3600 - time.monotonic()


async def _accept(request, benchmark):
    """Checks before the body is read (quota, refused uploads, one upload at a time per
    submitter), then receive and queue. A refusal after them counts against refused_per_hour."""
    state, user = request.app.state, _need_user(request)
    try:  # add_submission checks again in the transaction that queues
        await run_in_threadpool(state.store.check_quota, user["id"], benchmark)
    except QuotaExceeded as error:
        raise Problem(429, [str(error)]) from None
    wait = state.refused.wait(user["id"])
    if wait:
        raise Problem(429, [f"{state.settings.refused_per_hour} refused uploads in the last hour (refused_per_hour: "
                            f"{state.settings.refused_per_hour}): the next one can be sent in "
                            f"{math.ceil(wait / 60)} minute(s)"])
    if user["id"] in state.uploading:
        raise Problem(429, ["another upload of yours is being received or checked: send the next one when it is "
                            "answered"])
    state.uploading.add(user["id"])
    try:
        try:
            upload = await uploads.receive(request, state.store.root / "incoming", state.settings.max_upload_bytes)
        except uploads.UploadError as error:
            raise Problem(error.status, error.problems, fields=_shown_fields(error.fields)) from None
        try:
            return await _queue(request, benchmark, user, upload)
        finally:
            if upload.path is not None:
                upload.path.unlink(missing_ok=True)  # gone already when it was queued
    except Problem as problem:
        if problem.status != 429:
            state.refused.add(user["id"])
        raise
    finally:
        state.uploading.discard(user["id"])


def _shown_fields(fields):
    """The text fields a refused form shows again."""
    return {key: fields.get(key, "") for key in ("method", "paper_url", "code_url", "public")}


async def _queue(request, benchmark, user, upload):
    state, shown = request.app.state, _shown_fields(upload.fields)
    _check_csrf(request, upload.fields.get("csrf"))
    try:
        method, paper, code, public = submission_fields(upload.fields)
    except Problem as problem:
        raise Problem(problem.status, problem.problems, fields=shown) from None
    if upload.path is None or upload.size == 0:
        raise Problem(400, ["file: choose a prediction file (.zip or .json)"], fields=shown)
    other = await run_in_threadpool(state.store.look_alike_method, user["id"], benchmark.slug, method)
    if other is not None:
        raise Problem(409, [f"method: '{method}' looks like '{other}' of another submitter on this benchmark (names "
                            "are compared ignoring case, width, look-alike letters, spaces, '-', '_' and '.'): add "
                            "what tells yours apart"], fields=shown)
    known = await run_in_threadpool(state.store.submitted, user["id"], benchmark.slug, upload.sha256)
    if known is not None:  # before the check: a replay costs no check
        raise Problem(409, [f"{upload.file_name}: you submitted this file already (submission #{known}); a "
                            "submission is evaluated once"], fields=shown)
    counts, problems = await checks.check_upload(state.check_turns, state.refused.count(user["id"]), upload.path,
                                                 upload.file_name, state.gt_info[benchmark.slug], benchmark,
                                                 checks.Limits.of(state.settings))
    if problems:
        raise Problem(422, problems, fields=shown, images=counts)
    fields = uploads.submission_row(user["id"], method, paper, code, public, upload, counts)
    try:
        submission_id = await run_in_threadpool(state.store.add_submission, fields, upload.path, benchmark)
    except QuotaExceeded as error:
        raise Problem(429, [str(error)], fields=shown) from None
    except Duplicate as duplicate:
        raise Problem(409, [f"{upload.file_name}: you submitted this file already (submission "
                            f"#{duplicate.submission_id}); a submission is evaluated once"], fields=shown) from None
    state.dispatcher.notify()
    log.info("submission %d queued on %s by %s", submission_id, benchmark.slug, user["name"])
    return submission_id, counts


async def submission_action(request):
    """approve / unapprove / hide / unhide / reevaluate / delete (admins); publish / unpublish (owner)."""
    state, action, submission_id = request.app.state, request.path_params["action"], _submission_id(request)
    await _fields(request)
    user = _need_user(request)
    row = await run_in_threadpool(state.store.submission, submission_id)
    if row is None or not boards.can_see(row, user):
        raise Problem(404, ["no such submission"])
    if action in OWNER_ACTIONS:
        if not (user["admin"] or row["user_id"] == user["id"]):
            raise Problem(403, ["only the submitter or an admin can make a submission public or private"])
        await run_in_threadpool(state.store.set_flag, submission_id, *OWNER_ACTIONS[action])
    elif action in (*ADMIN_ACTIONS, "reevaluate", "delete"):
        _need_admin(request)
        if action == "delete":
            await run_in_threadpool(state.store.delete_submission, submission_id)
            log.info("submission %d deleted by %s", submission_id, user["name"])
            return _redirect(request, f"/b/{row['benchmark']}", {"id": submission_id, "deleted": True})
        if action == "reevaluate":
            await run_in_threadpool(state.store.reevaluate, submission_id)
            state.dispatcher.notify()
        else:
            await run_in_threadpool(state.store.set_flag, submission_id, *ADMIN_ACTIONS[action])
        log.info("submission %d: %s by %s", submission_id, action, user["name"])
    else:
        raise Problem(404, [f"no action '{action[:40]}' on submissions"])
    row = await run_in_threadpool(state.store.submission, submission_id)
    return _redirect(request, f"/submissions/{submission_id}", boards.entry(row, user))


# logging in, signing up and tokens ---------------------------------------------------------


async def login_form(request):
    return _page(request, "login.html", {"problems": []})


async def login(request):
    fields = await _fields(request)
    store = request.app.state.store
    user = await run_in_threadpool(store.user_by_token, fields.get("token", "").strip())
    if user is None:
        return _page(request, "login.html", {"problems": ["that token is not valid (or was revoked)"]}, status=401)
    response = RedirectResponse("/me", status_code=303)
    await _start_session(request, response, user)
    return response


async def _start_session(request, response, user):
    """Log the browser in: a new session, its key in an HttpOnly cookie on response. Returns the key."""
    days = request.app.state.settings.session_days
    key = await run_in_threadpool(request.app.state.store.new_session, user["id"], days)
    response.set_cookie(SESSION_COOKIE, key, httponly=True, samesite="lax", secure=request.url.scheme == "https",
                        max_age=days * 86400)
    return key


class NewTokens:
    """Tokens just issued in a browser, shown by GET /token to that browser's session for
    SHOWN_SECONDS (the POST that made one redirects there, so a reload posts nothing again). In
    memory, at most MAX entries; the server keeps no token otherwise."""

    SHOWN_SECONDS, MAX = 600, 10_000

    def __init__(self):
        self.shown = {}  # session key hash -> (until, page data)

    def add(self, session_key, data):
        now = time.monotonic()
        for key in [key for key, (until, _) in self.shown.items() if until < now]:
            del self.shown[key]
        while len(self.shown) >= self.MAX:
            del self.shown[next(iter(self.shown))]
        self.shown[store_module.token_hash(session_key)] = (now + self.SHOWN_SECONDS, data)

    def get(self, session_key):
        until, data = self.shown.get(store_module.token_hash(session_key or ""), (0, None))
        return data if until > time.monotonic() else None


async def new_token(request):
    """The token just issued in this browser (sign-up, or an admin's issue)."""
    data = request.app.state.new_tokens.get(request.state.session_key)
    if data is None:
        raise Problem(404, ["no token to show here: a token is shown for a few minutes, in the browser that signed up "
                            "or issued it; ask an admin for a new one"])
    return _page(request, "token.html", data)


async def logout(request):
    await _fields(request)
    if request.cookies.get(SESSION_COOKIE):
        await run_in_threadpool(request.app.state.store.end_session, request.cookies[SESSION_COOKIE])
    response = RedirectResponse("/", status_code=303)
    response.delete_cookie(SESSION_COOKIE)
    return response


def _new_user(store, name, admin=False):
    name = _words(name)
    if not NAME.fullmatch(name):
        raise Problem(400, ["name: 1 to 40 letters, digits, spaces, '.', '_' or '-', starting with a letter or digit"])
    try:
        return store.add_user(name, admin)
    except ValueError as error:
        raise Problem(409, [f"name: {error}"]) from None


async def signup_form(request):
    if not request.app.state.settings.signup:
        raise Problem(404, ["sign-up is closed here: ask an admin for a token"])
    return _page(request, "signup.html", {"problems": []})


async def signup(request):
    store = request.app.state.store
    if not request.app.state.settings.signup:
        raise Problem(404, ["sign-up is closed here: ask an admin for a token"])
    fields = await _fields(request)
    try:
        token = await run_in_threadpool(_new_user, store, fields.get("name"))
    except Problem as problem:
        if _is_api(request):
            raise
        return _page(request, "signup.html", {"problems": problem.problems}, status=problem.status)
    user = store.user_by_token(token)
    data = {"name": user["name"], "token": token, "admin": False}
    if _is_api(request):
        return JSONResponse(data, status_code=201)
    response = RedirectResponse("/token", status_code=303)  # POST/redirect/GET: a reload does not sign up again
    request.app.state.new_tokens.add(await _start_session(request, response, user), data)
    return response


async def issue_token(request):
    """Admins: a new user with a token, or a new token for an existing user (renew=1)."""
    fields = await _fields(request)
    _need_admin(request)
    store = request.app.state.store
    name = _words(fields.get("name"))
    if fields.get("renew") in ("1", True):
        token = await run_in_threadpool(store.new_token_for, name)
        if token is None:
            raise Problem(404, [f"name: no user '{name[:40]}'"])
    else:
        token = await run_in_threadpool(_new_user, store, name, fields.get("admin") in ("1", "on", True))
    user = store.user_by_token(token)
    data = {"name": user["name"], "token": token, "admin": bool(user["admin"])}
    if _is_api(request):
        return JSONResponse(data, status_code=201)
    request.app.state.new_tokens.add(request.state.session_key, data)
    return RedirectResponse("/token", status_code=303)


async def revoke(request):
    fields = await _fields(request)
    _need_admin(request)
    store = request.app.state.store
    user = store.user_by_name(_words(fields.get("name")))
    if user is None:
        raise Problem(404, ["name: no such user"])
    await run_in_threadpool(store.revoke, user["id"])
    return _redirect(request, "/admin", {"name": user["name"], "revoked": True})


# errors, middleware and the application ----------------------------------------------------


async def problem_page(request, problem):
    if not hasattr(request.state, "user"):  # no route matched (a 404 such as /favicon.ico) or a crash before it
        request.state.user = None
        _read_csrf_cookie(request)  # keep the browser's cookie: a new one would void its open forms' tokens
    if _is_api(request):
        return JSONResponse({"error": problem.problems[0] if problem.problems else "error",
                             "problems": problem.problems, **problem.extra}, status_code=problem.status)
    return _page(request, "error.html", {"status": problem.status, "problems": problem.problems},
                 status=problem.status)


async def http_error(request, error):
    return await problem_page(request, Problem(error.status_code, [str(error.detail)]))


async def internal_error(request, error):
    log.exception("unexpected error on %s", request.url.path)
    return await problem_page(request, Problem(500, ["internal error (the server's log has the details)"]))


class SecurityHeaders:
    """Adds the security headers to every response and authenticates the request."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def send_with_headers(message):
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] = list(message["headers"]) + SECURITY_HEADERS
            await send(message)

        return await self.app(scope, receive, send_with_headers)


def _body_problem(error):
    return Problem(413 if isinstance(error, limits.BodyTooLarge) else 408, [str(error)])


def authenticated(endpoint):
    async def wrapper(request):
        try:
            await run_in_threadpool(_authenticate, request)
        except Problem as problem:
            return await problem_page(request, problem)
        try:
            return await endpoint(request)
        except Problem as problem:
            return await problem_page(request, problem)
        except (limits.BodyTooLarge, limits.BodyTimeout) as error:
            return await problem_page(request, _body_problem(error))
    wrapper.__name__ = endpoint.__name__
    return wrapper


async def refuse_request(scope, receive, send, status, message):
    """limits.BodyLimits' answer to a request refused before its body is read."""
    request = Request(scope, receive)
    response = await problem_page(request, Problem(status, [message]))
    await response(scope, receive, send)


def _routes():
    pages = [("/", index, ["GET"]), ("/b/{slug}", leaderboard, ["GET"]), ("/b/{slug}/{board}", leaderboard, ["GET"]),
             ("/submissions/{submission_id}", submission, ["GET"]), ("/me", mine, ["GET"]),
             ("/admin", admin, ["GET"]), ("/signup", signup, ["POST"]),
             ("/b/{slug}/submissions", submit, ["POST"]),
             ("/submissions/{submission_id}/{action}", submission_action, ["POST"]),
             ("/admin/tokens", issue_token, ["POST"]), ("/admin/revoke", revoke, ["POST"])]
    routes = [Route("/b/{slug}/submit", authenticated(submit_form)), Route("/login", authenticated(login_form)),
              Route("/login", authenticated(login), methods=["POST"]),
              Route("/logout", authenticated(logout), methods=["POST"]),
              Route("/signup", authenticated(signup_form)), Route("/token", authenticated(new_token)),
              Route("/submissions/{submission_id}/per_predicate.png", authenticated(plot)),
              Mount("/static", StaticFiles(directory=HERE / "static"), name="static")]
    routes += [Route(path, authenticated(endpoint), methods=methods) for path, endpoint, methods in pages]
    routes += [Route("/api" + path, authenticated(endpoint), methods=methods) for path, endpoint, methods in pages]
    return routes


def create_app(settings, start_workers=True):
    """The ASGI application for a Settings (settings.load_settings). Reads every benchmark's GT
    once (an unreadable GT stops the start with sgeval's messages)."""
    store = Store(settings.state_dir)
    removed = store.clear_incoming()
    if removed:
        log.info("removed %d upload(s) a stopped server left in %s", removed, store.root / "incoming")
    gt_info = {slug: uploads.gt_info(benchmark) for slug, benchmark in settings.benchmarks.items()}
    dispatcher = jobs.Dispatcher(store, settings)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        app.state.check_turns = checks.CheckTurns()
        await run_in_threadpool(checks.start)
        if start_workers:
            dispatcher.start()
        try:
            yield
        finally:
            if start_workers:
                await run_in_threadpool(dispatcher.stop)

    app = Starlette(routes=_routes(), lifespan=lifespan,
                    exception_handlers={HTTPException: http_error, Exception: internal_error})
    app.state.settings, app.state.store, app.state.dispatcher, app.state.gt_info = settings, store, dispatcher, gt_info
    app.state.refused, app.state.uploading = RefusedUploads(settings.refused_per_hour), set()
    app.state.new_tokens = NewTokens()
    app.state.templates = Jinja2Templates(directory=HERE / "templates")
    app.state.templates.env.globals["version"] = sgeval.__version__
    app.add_middleware(limits.BodyLimits, upload_bytes=settings.max_upload_bytes, body_timeout=settings.body_timeout,
                       refuse=refuse_request)
    app.add_middleware(SecurityHeaders)  # outside BodyLimits: its refusals get the headers too
    if settings.forwarded_allow_ips:  # outermost: the scheme (for Secure cookies) and client of the proxy's request
        app.add_middleware(ProxyHeadersMiddleware, trusted_hosts=list(settings.forwarded_allow_ips))
    return app
