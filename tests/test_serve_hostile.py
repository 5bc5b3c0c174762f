"""sgeval serve under hostile input and load (issue 29, part 2): bodies bounded while they stream,
problem lists capped, uploads checked in a bounded child process, the trusted proxy's headers,
slow and many connections, nothing that confirms the hidden GT's location or content, and the
smaller holes (bad URLs, look-alike names, sessions, CSRF, a read-only state folder, ...).

Most attacks run through Starlette's test client; those that need real sockets (a body that never
ends, slow headers, many connections, a proxy's headers) run against the real server on loopback
(bench/serve_load.Server), bounded in count and time. bench/serve_load.py --hostile measures the
server's peak RSS and a legitimate upload's latency under each attack."""

import io
import json
import socket
import time
import zipfile

import pytest
from starlette.testclient import TestClient

from bench import serve_load
from bench.serve_load import SLUG, Server
from sgeval_serve import uploads
from sgeval_serve.app import create_app
from sgeval_serve.settings import load_settings

BODY_TIMEOUT = 2  # s: the live server's body_timeout


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return serve_load.demo_data(tmp_path_factory.mktemp("demo"))


@pytest.fixture(scope="module")
def live(demo, tmp_path_factory):
    """The real server on a free loopback port (no evaluation worker needed beyond one), with an
    admin's and a submitter's token."""
    folder = tmp_path_factory.mktemp("live")
    config = serve_load.write_config(folder / "serve.yaml", demo, folder / "state", workers=1,
                                     body_timeout=BODY_TIMEOUT)
    admin = serve_load.cli(config, "token", "admin", "--admin")
    owner = serve_load.cli(config, "token", "owner")
    with Server(config, folder / "server.log") as server:
        yield {"server": server, "url": server.url, "admin": admin, "owner": owner, "folder": folder}


# raw HTTP on loopback -----------------------------------------------------------------------


def address(url):
    host, port = url.removeprefix("http://").split(":")
    return host, int(port)


def read_reply(sock, timeout):
    """The status and head of the reply on sock (None when none came within timeout s)."""
    sock.settimeout(timeout)
    data = b""
    try:
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    except (socket.timeout, ConnectionResetError):
        pass
    if not data.startswith(b"HTTP/1.1 "):
        return None, data
    return int(data[9:12]), data


def replied(sock):
    """True when the server has sent something (or closed) on sock, without waiting."""
    sock.setblocking(False)
    try:
        return sock.recv(1, socket.MSG_PEEK) is not None
    except BlockingIOError:
        return False
    except OSError:
        return True
    finally:
        sock.setblocking(True)


# 1. request bodies are bounded while they stream, before any authentication work --------------


def test_a_huge_declared_body_is_refused_before_it_is_read(live):
    """A 3 GB Content-Length POST to an admin action, without a token: 413 at once, not after
    reading (the server used to read it whole before any check)."""
    with socket.create_connection(address(live["url"])) as sock:
        sock.sendall(b"POST /api/submissions/1/approve HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 3000000000\r\n\r\n" + b"{" * 65536)
        status, head = read_reply(sock, 10)
    assert status == 413, head[:300]


def test_a_chunked_body_is_cut_while_it_streams(live):
    """A chunked JSON body without end: the server answers 413 after a few KiB, before the
    client has sent 1 MiB."""
    chunk = b"%x\r\n%s\r\n" % (16384, b" " * 16384)
    with socket.create_connection(address(live["url"])) as sock:
        sock.sendall(b"POST /api/signup HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n")
        sent = 0
        while sent < (1 << 20) and not replied(sock):
            sock.sendall(chunk)
            sent += 16384
            time.sleep(0.002)
        status, head = read_reply(sock, 10)
    assert status == 413 and sent < (1 << 20), (sent, head[:300])


def test_a_huge_upload_without_a_token_is_refused_before_it_is_read(live):
    with socket.create_connection(address(live["url"])) as sock:
        sock.sendall(f"POST /api/b/{SLUG}/submissions HTTP/1.1\r\nHost: x\r\n"
                     "Content-Type: multipart/form-data; boundary=x\r\nContent-Length: 3000000000\r\n\r\n".encode())
        status, head = read_reply(sock, 10)
    assert status == 401, head[:300]


def test_a_body_that_stops_arriving_ends_its_request(live):
    """Half a JSON body, then nothing: 408 after body_timeout."""
    with socket.create_connection(address(live["url"])) as sock:
        sock.sendall(b"POST /api/signup HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 100\r\n\r\n{\"name\": ")
        started = time.monotonic()
        status, head = read_reply(sock, BODY_TIMEOUT + 10)
    assert status == 408 and BODY_TIMEOUT - 0.5 < time.monotonic() - started < BODY_TIMEOUT + 5, head[:300]


# the application in this process (Starlette's test client) -----------------------------------


def make_app(demo, folder, **server_keys):
    """The demo benchmark's app (no evaluation workers) with further server keys, and a client."""
    config = serve_load.write_config(folder / "serve.yaml", demo, folder / "state", workers=1,
                                     max_upload_mb=2, **server_keys)
    return create_app(load_settings(config), start_workers=False)


@pytest.fixture
def app(demo, tmp_path):
    app = make_app(demo, tmp_path)
    with TestClient(app) as client:
        app.state.client = client
        yield app


def bearer(app, name, admin=False):
    user = app.state.store.user_by_name(name)
    token = app.state.store.new_token_for(name) if user else app.state.store.add_user(name, admin)
    return {"Authorization": f"Bearer {token}"}


def send(app, headers, payload, name="pred.json", **fields):
    return app.state.client.post(f"/api/b/{SLUG}/submissions", headers=headers, data={"method": "M", **fields},
                                 files={"file": (name, payload)})


def prediction_json(records):
    return json.dumps({"version": 1, "images": records}).encode()


def zipped(members):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


# 2. problem lines are capped ------------------------------------------------------------------


def test_problem_lines_are_capped(demo, tmp_path):
    """5,000 records with "id": 1.5: the first 1,000 problems, then one line counting the rest
    (the server used to keep and send every line: 739 MB for 10^7 records)."""
    app = make_app(demo, tmp_path)
    with TestClient(app) as client:
        app.state.client = client
        reply = send(app, bearer(app, "ann"), prediction_json([{"id": 1.5}] * 5000), name="ids.json")
    problems = reply.json()["problems"]
    assert reply.status_code == 422 and len(problems) == 1001 and len(reply.content) < 200_000
    assert problems[0] == "ids.json: images[0]: field 'id' must be an integer or string"
    assert problems[-1] == "ids.json: and 4,000 more problems (the first 1,000 are listed)"


def test_an_evaluations_problems_are_capped_too():
    lines = uploads.capped([f"p.zip: image {index}: bad" for index in range(1500)], "p.zip")
    assert len(lines) == 1001 and lines[-1] == "p.zip: and 500 more problems (the first 1,000 are listed)"
