"""sgeval serve under hostile input and load (issue 29, part 2): bodies bounded while they stream,
problem lists capped, uploads checked in a bounded child process, the trusted proxy's headers,
slow and many connections, nothing that confirms the hidden GT's location or content, and the
smaller holes (bad URLs, look-alike names, sessions, CSRF, a read-only state folder, ...).

Most attacks run through Starlette's test client; those that need real sockets (a body that never
ends, slow headers, many connections, a proxy's headers) run against the real server on loopback
(bench/serve_load.Server), bounded in count and time. bench/serve_load.py --hostile measures the
server's peak RSS and a legitimate upload's latency under each attack."""

import asyncio
import collections
import contextlib
import io
import json
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
import zipfile

import numpy
import pytest
import yaml
from starlette.testclient import TestClient

import sgeval
from bench import serve_hostile, serve_load
from bench.serve_load import SLUG, Server
from sgeval_serve import checks, connections, jobs, uploads
from sgeval_serve.app import create_app
from sgeval_serve.settings import load_settings

BODY_TIMEOUT = 2  # s: the live server's body_timeout
CHECK_TIMEOUT = 60  # s: the live server's validation_timeout (longer than any check here)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return serve_load.demo_data(tmp_path_factory.mktemp("demo"))


@pytest.fixture(scope="module")
def live(demo, tmp_path_factory):
    """The real server on a free loopback port (no evaluation worker needed beyond one), with an
    admin's and a submitter's token."""
    folder = tmp_path_factory.mktemp("live")
    config = serve_load.write_config(folder / "serve.yaml", demo, folder / "state", workers=1,
                                     body_timeout=BODY_TIMEOUT, validation_timeout=CHECK_TIMEOUT)
    admin = serve_load.cli(config, "token", "admin", "--admin")
    owner = serve_load.cli(config, "token", "owner")
    with Server(config, folder / "server.log") as server:
        yield {"server": server, "url": server.url, "admin": admin, "owner": owner, "folder": folder, "demo": demo}


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
    """The demo benchmark's app (no evaluation workers) with further server keys."""
    folder.mkdir(parents=True, exist_ok=True)
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
    app = make_app(demo, tmp_path, max_records_factor=1000)
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


# 3. uploads are checked in a bounded child process --------------------------------------------


@pytest.fixture(scope="module")
def bomb(tmp_path_factory):
    """A 300 KB ZIP whose triplets.json inflates to 300 MB of white space: about 4 s to read (3 s
    to write)."""
    path = tmp_path_factory.mktemp("bomb") / "bomb.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as archive, \
            archive.open("triplets.json", "w") as member:
        member.write(b'{"version": 1, "images": [')
        for _ in range(300):
            member.write(b" " * (1 << 20))
        member.write(b"]}")
    return path


def test_a_check_over_the_time_limit_is_stopped(demo, tmp_path, bomb):
    """The white-space bomb is stopped at validation_timeout; the message says which bound it hit."""
    app = make_app(demo, tmp_path, validation_timeout=1)
    with TestClient(app) as client:
        app.state.client = client
        started = time.monotonic()
        reply = send(app, bearer(app, "ann"), bomb.read_bytes(), name="bomb.zip")
    assert reply.status_code == 422 and time.monotonic() - started < 5
    assert reply.json()["problems"] == ["bomb.zip: checking the file took longer than the limit of 1 s "
                                        "(validation_timeout)"]


def test_a_check_over_the_memory_limit_is_stopped(demo, tmp_path):
    """One record of 3 million triplets (35 KB zipped, some 400 MB as Python objects) against a
    memory limit of 64 MiB."""
    app = make_app(demo, tmp_path, validation_memory_mb=64)
    payload = zipped({"triplets.json": b'{"version": 1, "images": [{"id": 1, "instances": [], "triplets": ['
                      + b"[0,0,0]," * 2999999 + b"[0,0,0]]}]}"})
    with TestClient(app) as client:
        app.state.client = client
        reply = send(app, bearer(app, "ann"), payload, name="big.zip")
    assert reply.status_code == 422
    assert reply.json()["problems"] == ["big.zip: checking the file needed more than the memory limit of 64 MiB "
                                        "(validation_memory_mb)"]


def test_a_known_file_is_refused_before_it_is_checked(app, demo, monkeypatch):
    headers = bearer(app, "ann")
    assert send(app, headers, (demo / "pred.zip").read_bytes(), name="a.zip").status_code == 201
    async def refuse(*args):
        pytest.fail("a known file was checked again")

    monkeypatch.setattr(checks, "check_upload", refuse)
    again = send(app, headers, (demo / "pred.zip").read_bytes(), name="again.zip")
    assert again.status_code == 409 and again.json()["problems"] == [
        "again.zip: you submitted this file already (submission #1); a submission is evaluated once"]


def test_a_file_may_not_hold_many_more_records_than_the_split_has_images(app, demo):
    """31 test images, max_records_factor 4 (the default): 124 records at most, the check stops
    at the 125th (the server used to read 20 million records for 609 s, then accept them)."""
    records = [{"id": f"x{index}", "instances": [], "triplets": []} for index in range(10_000)]
    reply = send(app, bearer(app, "ann"), prediction_json(records), name="many.json")
    assert reply.status_code == 422 and reply.json()["problems"] == [
        "many.json: holds more than 124 image records, 4 per test image of the benchmark's 31 (max_records_factor): "
        "is it for another split?"]


def test_refused_uploads_are_rate_limited_per_submitter(demo, tmp_path):
    app = make_app(demo, tmp_path, refused_per_hour=3)
    with TestClient(app) as client:
        app.state.client = client
        ann, bob = bearer(app, "ann"), bearer(app, "bob")
        for _ in range(3):
            assert send(app, ann, b'{"version": 1, "images": []}').status_code == 422
        limited = send(app, ann, (demo / "pred.zip").read_bytes(), name="good.zip")
        assert limited.status_code == 429 and limited.json()["problems"][0].startswith(
            "3 refused uploads in the last hour (refused_per_hour: 3): the next one can be sent in ")
        assert send(app, bob, (demo / "pred.zip").read_bytes(), name="good.zip").status_code == 201


def test_one_upload_at_a_time_per_submitter(app, demo):
    """A submitter's second upload while the first is being received or checked: 429 before its
    body is read (one submitter cannot take every checking slot)."""
    headers = bearer(app, "ann")
    app.state.uploading.add(app.state.store.user_by_name("ann")["id"])
    busy = send(app, headers, (demo / "pred.zip").read_bytes())
    assert busy.status_code == 429 and busy.json()["problems"] == [
        "another upload of yours is being received or checked: send the next one when it is answered"]


def test_check_turns_go_first_to_submitters_without_refusals():
    async def scenario():
        turns, order = checks.CheckTurns(running=1), []

        async def check(name, refusals, hold=0.01):
            await turns.acquire(refusals)
            order.append(name)
            await asyncio.sleep(hold)
            turns.release()

        first = asyncio.create_task(check("first", 0, hold=0.05))
        await asyncio.sleep(0.01)
        await asyncio.gather(first, check("bad-1", 3), check("bad-2", 1), check("good", 0))
        return order

    assert asyncio.run(scenario()) == ["first", "good", "bad-2", "bad-1"]


def test_bad_uploads_do_not_delay_a_legitimate_one(live, tmp_path):
    """Three attackers send a file that takes some 6 s to check (one record of 2 million
    triplets), three at a time each (one is checked, the others get 429 at once); a legitimate
    upload sent meanwhile waits at most a moment for its turn. The server used to check uploads in
    its own process in arrival order (16 s), then in two slots that two attackers' checks held for
    their whole time (13 to 20 s)."""
    heavy = tmp_path / "heavy.zip"
    heavy.write_bytes(zipped({"triplets.json": b'{"version": 1, "images": [{"id": 1, "instances": [], '
                                               b'"triplets": [' + b"[0,0,0]," * 1999999 + b"[0,0,0]]}]}"}))
    admin, url = live["admin"], live["url"]
    tokens = serve_load.issue_tokens(url, admin, [f"attacker{index}" for index in range(3)] + ["legit"])
    stop, statuses = threading.Event(), collections.Counter()

    def attack(token):
        while not stop.is_set():
            statuses[serve_load.upload(url, token, heavy, "Heavy").status] += 1

    threads = [threading.Thread(target=attack, args=(tokens[f"attacker{index % 3}"],)) for index in range(9)]
    for thread in threads:
        thread.start()
    try:
        time.sleep(1.5)  # every attacker's check has started
        legit = serve_load.upload(url, tokens["legit"], live["demo"] / "pred.zip", "Model A")
    finally:
        stop.set()
        for pid in check_processes(live["server"].process.pid):  # the attackers' last checks: not waited for
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for thread in threads:
            thread.join()
    assert legit.status == 201, legit.body
    assert legit.seconds < 3, (legit.seconds, statuses)
    assert statuses[429] >= 6, statuses


# 4. behind the trusted TLS proxy, cookies are Secure ------------------------------------------


def csrf_of(page):
    return re.search(r'name="csrf" value="([0-9a-f]+)"', page).group(1)


def cookies_through_proxy(app, client_host):
    """The Set-Cookie headers of /login's page and of a login, both sent from client_host with
    the headers a TLS proxy adds."""
    proxy = {"X-Forwarded-Proto": "https", "X-Forwarded-For": "203.0.113.7"}
    with TestClient(app, client=(client_host, 40000)) as client:
        page = client.get("/login", headers=proxy)
        token = app.state.store.add_user(f"u{time.monotonic_ns()}")
        login = client.post("/login", headers={**proxy, "Cookie": f"sgeval_csrf={page.cookies['sgeval_csrf']}"},
                            data={"token": token, "csrf": csrf_of(page.text)}, follow_redirects=False)
    assert login.status_code == 303, login.text
    return page.headers["set-cookie"], login.headers["set-cookie"]


def test_cookies_are_secure_behind_a_trusted_proxy_only(demo, tmp_path):
    plain = make_app(demo, tmp_path / "plain")
    assert not any("secure" in cookie.lower() for cookie in cookies_through_proxy(plain, "127.0.0.1"))
    proxied = make_app(demo, tmp_path / "proxied", forwarded_allow_ips=["127.0.0.1", "10.1.0.0/16"])
    for host in ("127.0.0.1", "10.1.2.3"):
        csrf_cookie, session_cookie = cookies_through_proxy(proxied, host)
        assert csrf_cookie.startswith("sgeval_csrf=") and "; secure" in csrf_cookie.lower()
        assert session_cookie.startswith("sgeval_session=") and "; secure" in session_cookie.lower()
    assert not any("secure" in cookie.lower() for cookie in cookies_through_proxy(proxied, "10.2.0.1"))


def test_the_trusted_proxies_are_checked(demo, tmp_path):
    with pytest.raises(sgeval.SGEvalError) as error:
        make_app(demo, tmp_path, forwarded_allow_ips=["127.0.0.1", "10.0.0.1/8", "proxy"])
    assert error.value.problems == [f"{tmp_path / 'serve.yaml'}: 'forwarded_allow_ips' must be a list of IP addresses "
                                    "and networks (or [\"*\"]), not '10.0.0.1/8', 'proxy'"]


# 6. nothing confirms the hidden GT's location or content --------------------------------------


@pytest.fixture(scope="module")
def evaluating(demo, tmp_path_factory):
    """The demo benchmark's app with its evaluation worker, and a submitter's headers."""
    config = serve_load.write_config(tmp_path_factory.mktemp("evaluating") / "serve.yaml", demo,
                                     tmp_path_factory.mktemp("evaluating-state"), workers=1, max_upload_mb=2)
    app = create_app(load_settings(config))
    with TestClient(app) as client:
        app.state.client = client
        yield app, bearer(app, "ann")


def failure_of(app, headers, payload, name):
    """Upload payload (accepted), wait for its evaluation to fail, return the reason."""
    reply = send(app, headers, payload, name=name)
    assert reply.status_code == 201, reply.text
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        entry = app.state.client.get(f"/api/submissions/{reply.json()['id']}", headers=headers).json()["entry"]
        if entry["status"] in ("done", "failed"):
            assert entry["status"] == "failed", entry
            return entry["reason"]
        time.sleep(0.2)
    raise AssertionError("the evaluation did not end")


def with_record(demo, edit):
    """The demo's Model A as ZIP members, its first record with instances given to edit(record,
    members); returns (ZIP bytes, that record's image id)."""
    with zipfile.ZipFile(demo / "pred.zip") as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    data = json.loads(members["triplets.json"])
    record = next(record for record in data["images"] if record["instances"])
    edit(record, members)
    members["triplets.json"] = json.dumps(data).encode()
    return zipped(members), record["id"]


def test_a_guessed_gt_path_in_an_upload_comes_back_as_it_was_sent(evaluating, demo):
    """A seg_filename that holds the hidden GT's real folder: the failure reason quotes it as sent
    (the server used to replace the GT's path in it, which confirmed the guess)."""
    app, headers = evaluating
    guess = "x" + str(demo / "panoptic")

    def edit(record, members):
        record["seg_filename"] = f"{guess}/{record['id']}.tiff"
        members[record["seg_filename"]] = b"II*\x00garbage"

    payload, image_id = with_record(demo, edit)
    reason = failure_of(app, headers, payload, "guess.zip")
    assert reason.startswith(f"guess.zip: image {image_id}: {guess}/{image_id}.tiff: cannot read TIFF")
    assert "hidden" not in reason


def test_failure_reasons_do_not_give_gt_image_sizes(evaluating, demo):
    app, headers = evaluating
    sizes = {str(entry["image_id"]): (entry["height"], entry["width"])
             for entry in json.loads((demo / "psg.json").read_text())["data"]}

    def edit(record, members):
        members[record["seg_filename"]] = sgeval.encode_masks(numpy.ones((len(record["instances"]), 10, 10), bool))

    payload, image_id = with_record(demo, edit)
    reason = failure_of(app, headers, payload, "small.zip")
    height, width = sizes[str(image_id)]
    assert reason == f"small.zip: image {image_id}: {image_id}.tiff: mask size (10, 10) is not the image's size"
    assert str(height) not in reason and str(width) not in reason


def test_the_read_limit_of_a_mask_file_is_not_given():
    """The limit of a TIFF's bytes is computed from the GT image's size."""
    line = ("/srv/state/submissions/3/prediction.zip: image 7: 7.tiff: cannot read TIFF: ValueError: the file holds "
            "more than 1087712 bytes, more than its masks can need")
    assert jobs.failure_reason([line], "/srv/state/submissions/3/prediction.zip", "p.zip") == \
        "p.zip: image 7: 7.tiff: cannot read TIFF: ValueError: the file is larger than its masks can need"


def test_sgevals_count_of_the_problems_it_left_out_is_shown():
    """SGEvalError keeps 1,000 lines and counts the rest in a line of its own, without a path."""
    lines = [f"/srv/s/prediction.zip: image {index}: bad" for index in range(1000)]
    lines.append("... and 5 more problems (the first 1000 are listed)")
    assert jobs.failure_reason(lines, "/srv/s/prediction.zip", "p.zip").splitlines()[-2:] == [
        "p.zip: image 999: bad", "... and 5 more problems (the first 1000 are listed)"]


def test_problems_that_are_not_about_the_upload_are_not_shown():
    reason = jobs.failure_reason(["/data/psg/panoptic/7.png: panoptic PNG is 10x12, field 'width'x'height' says 9x9",
                                  "/srv/s/prediction.zip: image 7: bad"], "/srv/s/prediction.zip", "p.zip")
    assert reason == "the evaluation failed on the server's side (its log has the details)\np.zip: image 7: bad"


def test_a_json_upload_cannot_name_masks(app, demo):
    """A .json file holds no masks: its seg_filename cannot name one (it used to be looked up beside
    the server's copy of the file when the evaluation ran)."""
    with zipfile.ZipFile(demo / "pred.zip") as archive:
        data = json.loads(archive.read("triplets.json"))
    record = next(record for record in data["images"] if record["instances"])
    reply = send(app, bearer(app, "ann"), prediction_json([record]), name="masks.json")
    assert reply.status_code == 422 and reply.json()["problems"] == [
        f"masks.json: image {record['id']}: seg_filename '{record['seg_filename']}' is not in the upload (a .json file "
        "holds no masks: send a ZIP of triplets.json and the masks)"]

# 5. slow and many connections ------------------------------------------------------------------

HEADER_TIMEOUT = 2  # s: the guarded server's header_timeout
MAX_CONNECTIONS = 40  # the guarded server's max_connections


@pytest.fixture(scope="module")
def guarded(demo, tmp_path_factory):
    """The real server with a short header_timeout, few connections and loopback as its trusted
    proxy."""
    folder = tmp_path_factory.mktemp("guarded")
    config = serve_load.write_config(folder / "serve.yaml", demo, folder / "state", workers=1,
                                     header_timeout=HEADER_TIMEOUT, max_connections=MAX_CONNECTIONS,
                                     forwarded_allow_ips=["127.0.0.1"])
    with Server(config, folder / "server.log") as server:
        yield server


def open_files(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_a_request_head_sent_slowly_is_cut_at_the_header_timeout(guarded):
    """A request head sent a byte every 0.2 s (each byte used to keep the connection open for ever,
    as uvicorn has no deadline for a request's head)."""
    with socket.create_connection(address(guarded.url)) as sock:
        started, closed = time.monotonic(), None
        for byte in b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 200:
            try:
                sock.sendall(bytes([byte]))
            except OSError:
                closed = time.monotonic() - started
                break
            if replied(sock):
                closed = time.monotonic() - started
                break
            time.sleep(0.2)
    assert closed is not None and HEADER_TIMEOUT - 0.5 < closed < HEADER_TIMEOUT + 2, closed


def test_an_idle_connection_is_closed_after_its_response(guarded):
    """After a response, the next request's head has header_timeout too (uvicorn's keep-alive
    timeout is reset by every byte)."""
    with socket.create_connection(address(guarded.url)) as sock:
        sock.sendall(b"GET /api/ HTTP/1.1\r\nHost: x\r\n\r\n")
        status, head = read_reply(sock, 10)
        length = int(re.search(rb"content-length: ([0-9]+)", head, re.IGNORECASE).group(1))
        body = head.split(b"\r\n\r\n", 1)[1]
        while len(body) < length:
            body += sock.recv(65536)
        started = time.monotonic()
        while not is_closed(sock) and time.monotonic() - started < HEADER_TIMEOUT + 5:
            with contextlib.suppress(OSError):
                sock.sendall(b"G")
            time.sleep(0.3)
    assert status == 200 and HEADER_TIMEOUT - 0.5 < time.monotonic() - started < HEADER_TIMEOUT + 2


def test_the_rest_of_a_refused_body_is_read_before_the_connection_closes(guarded):
    """A request answered before its body is read (a 401 here): the server reads and drops the rest
    as long as it keeps coming (more than header_timeout here), so the client reads the answer
    instead of a reset, and the connection serves the next request."""
    with socket.create_connection(address(guarded.url)) as sock:
        sock.sendall(f"POST /api/b/{SLUG}/submissions HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; "
                     f"boundary=b\r\nContent-Length: {40 * 65536}\r\n\r\n".encode())
        for _ in range(40):  # 2.6 MB in 4 s
            sock.sendall(b"x" * 65536)
            time.sleep(0.1)
        status, _ = read_reply(sock, 10)
        sock.sendall(b"GET /api/ HTTP/1.1\r\nHost: x\r\n\r\n")
        data, deadline = b"", time.monotonic() + 10
        while b"HTTP/1.1 200 OK" not in data and time.monotonic() < deadline:
            data += sock.recv(65536)
    assert status == 401 and b"HTTP/1.1 200 OK" in data


def test_many_slow_connections_do_not_lock_others_out(guarded):
    """200 connections that send half a request head and wait (5 x max_connections): the server
    closes the oldest waiting ones, holds at most max_connections, answers a new client at once
    and logs no 'Too many open files'."""
    slow = []
    try:
        for _ in range(200):
            sock = socket.create_connection(address(guarded.url))
            sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")
            slow.append(sock)
        time.sleep(0.5)
        assert open_files(guarded.process.pid) < MAX_CONNECTIONS + 40
        reply = serve_load.call(guarded.url, "GET", "/api/", timeout=5)
        assert reply.status == 200 and reply.seconds < 1, (reply.status, reply.seconds)
        assert all(is_closed(sock) for sock in slow[:100])  # the oldest waiting connections went first
        assert not any(is_closed(sock) for sock in slow[-MAX_CONNECTIONS // 2:])
    finally:
        for sock in slow:
            sock.close()
    assert "Too many open files" not in guarded.log.read_text()


def is_closed(sock):
    """True when the server closed sock (reset or end of stream), without waiting."""
    try:
        return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def test_max_connections_must_fit_the_open_file_limit():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        pytest.skip("no hard limit of open files here")
    assert connections.ensure_open_files(hard) == (
        f"max_connections {hard} needs {hard + connections.SPARE_FILES} open files, more than this process may open "
        f"({hard}: ulimit -Hn); lower max_connections")
    assert connections.ensure_open_files(min(soft, hard - connections.SPARE_FILES)) is None


def test_cookies_are_secure_behind_the_trusted_proxy_on_the_real_server(guarded):
    """forwarded_allow_ips: [127.0.0.1] on the real server (uvicorn's own proxy_headers stays off)."""
    with socket.create_connection(address(guarded.url)) as sock:
        sock.sendall(b"GET /login HTTP/1.1\r\nHost: x\r\nX-Forwarded-Proto: https\r\n\r\n")
        status, head = read_reply(sock, 10)
    assert status == 200 and re.search(rb"set-cookie: sgeval_csrf=[^\r]*; secure", head, re.IGNORECASE), head


# 7. the smaller holes ------------------------------------------------------------------------


def test_a_malformed_url_is_a_400_with_a_message(app, demo):
    """urlsplit raises ValueError on 'http://[::1' (it used to end in a 500)."""
    reply = send(app, bearer(app, "ann"), (demo / "pred.zip").read_bytes(), paper_url="http://[::1")
    assert reply.status_code == 400 and reply.json()["problems"] == [
        "paper_url: give an http:// or https:// address (at most 500 characters)"]


@pytest.mark.parametrize("method", ["Model\u202eA", "Mod\u200bel", "Model\x07", "Model\u2066A", "Model\ue000"])
def test_a_method_name_with_invisible_or_control_characters_is_refused(app, demo, method):
    reply = send(app, bearer(app, "ann"), (demo / "pred.zip").read_bytes(), method=method)
    assert reply.status_code == 400 and reply.json()["problems"] == [
        "method: give the method's name (1 to 100 characters) without control, format (bidi, zero-width) or "
        "private-use characters"]


def test_look_alikes_of_another_submitters_method_are_refused(app, demo, tmp_path):
    ann, bob = bearer(app, "ann"), bearer(app, "bob")
    assert send(app, ann, (demo / "pred.zip").read_bytes(), method="Model A").status_code == 201
    copies = serve_load.distinct_copies(demo / "pred.zip", 7, tmp_path)
    for copy, method in zip(copies, ["model-a", "Model_A", "ＭＯＤＥＬ Ａ", "Model.A", "Mоdel A", "Model A"]):
        reply = send(app, bob, copy.read_bytes(), method=method)
        assert reply.status_code == 409 and reply.json()["problems"] == [
            f"method: '{method}' looks like 'Model A' of another submitter on this benchmark (names are compared "
            "ignoring case, width, look-alike letters, spaces, '-', '_' and '.'): add what tells yours apart"]
    assert send(app, ann, copies[-1].read_bytes(), method="model a").status_code == 201  # the same submitter may


def test_look_alikes_of_a_user_name_are_refused(app):
    client = app.state.client
    assert client.post("/api/signup", json={"name": "sgeval-demo"}).status_code == 201
    for name in ("Sgeval-demo", "sgeval_demo", "sgeval.demo", "SGEVAL DEMO", "sgevaldemo"):
        reply = client.post("/api/signup", json={"name": name})
        assert reply.status_code == 409 and reply.json()["problems"] == [
            f"name: '{name}' looks like the name 'sgeval-demo' of another user (names are compared ignoring case, "
            "spaces, '-', '_' and '.')"], name
    for name in ("sgeval\u202edemo", "sgeval\u200bdemo", "sgeval\x07demo"):
        assert app.state.client.post("/api/signup", json={"name": name}).status_code == 400


def test_an_upload_orphaned_by_a_killed_server_is_removed_at_the_next_start(demo, tmp_path, bomb):
    """kill -9 while an upload is being checked: its check process dies with the server (no process
    is left reading it), and the next start removes the file from incoming/."""
    config = serve_load.write_config(tmp_path / "serve.yaml", demo, tmp_path / "state", workers=1)
    token = serve_load.cli(config, "token", "ann")
    incoming = tmp_path / "state" / "incoming"
    with Server(config, tmp_path / "server.log") as server:
        sender = threading.Thread(target=serve_load.upload, args=(server.url, token, bomb, "Bomb"))
        sender.start()
        serve_load.until(lambda: list(incoming.glob("*.zip")), 30, "the upload to arrive")
        serve_load.until(lambda: len(descendants(server.process.pid)) >= 2, 30, "the check's process")
        processes = descendants(server.process.pid)
        server.kill()
        sender.join()
        serve_load.until(lambda: not [pid for pid in processes if os.path.exists(f"/proc/{pid}")
                                      and process_state(pid) not in "ZX"], 15, "the check's process to die")
    assert list(incoming.iterdir())
    with Server(config, tmp_path / "server.log"):
        assert not list(incoming.iterdir())


def check_processes(server_pid):
    """The upload checks of a server: the children of its multiprocessing fork server."""
    forkservers = [pid for pid in descendants(server_pid) if process_stat(pid)[1] == str(server_pid)
                   and b"multiprocessing.forkserver" in open(f"/proc/{pid}/cmdline", "rb").read()]
    return [pid for pid in descendants(server_pid) if process_stat(pid)[1] in map(str, forkservers)]


def descendants(pid):
    """The processes under pid (from /proc)."""
    children = collections.defaultdict(list)
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, IndexError):
                children[int(process_stat(int(entry))[1])].append(int(entry))
    found, todo = [], [pid]
    while todo:
        below = children[todo.pop()]
        found += below
        todo += below
    return found


def process_stat(pid):
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()  # state, ppid, ...


def process_state(pid):
    with contextlib.suppress(OSError):
        return process_stat(pid)[0]
    return "X"


def log_in(app, name):
    """A browser of its own, logged in as name; returns the client and its /me page."""
    client = TestClient(app)
    client.__enter__()
    token = app.state.store.new_token_for(name) if app.state.store.user_by_name(name) else app.state.store.add_user(name)
    page = client.get("/login")
    reply = client.post("/login", data={"token": token, "csrf": csrf_of(page.text)})
    assert reply.status_code == 200 and reply.url.path == "/me"
    return client, reply


def test_sessions_expire_on_the_server(demo, tmp_path):
    app = make_app(demo, tmp_path, session_days=2)
    with TestClient(app):
        client, _ = log_in(app, "ann")
        assert client.get("/me").status_code == 200
        login = client.cookies.jar
        assert any(cookie.name == "sgeval_session" and 2 * 86400 - 60 < cookie.expires - time.time() <= 2 * 86400
                   for cookie in login)
        with app.state.store.transaction() as db:
            db.execute("UPDATE sessions SET created = '2000-01-01T00:00:00+00:00'")
        assert client.get("/me").status_code == 401


def test_the_csrf_token_is_bound_to_the_session(app):
    """Two browsers made to share a CSRF cookie (one planted by an attacker): the token on the
    logged-in user's pages is not valid in the other's session."""
    ann, ann_page = log_in(app, "ann")
    bob = TestClient(app, cookies={"sgeval_csrf": ann.cookies["sgeval_csrf"]})
    bob.__enter__()
    page = bob.get("/login")
    token = app.state.store.add_user("bob")
    assert bob.post("/login", data={"token": token, "csrf": csrf_of(page.text)}).url.path == "/me"
    forged = bob.post("/logout", data={"csrf": csrf_of(ann_page.text)}, follow_redirects=False)
    assert forged.status_code == 403
    assert bob.post("/logout", data={"csrf": csrf_of(bob.get("/me").text)}, follow_redirects=False).status_code == 303


def start_in(config, *wrapper):
    return subprocess.run([*wrapper, sys.executable, "-m", "sgeval_serve", "--config", str(config), "--port", "0"],
                          cwd=serve_load.ROOT, capture_output=True, text=True, timeout=60)


def test_a_state_folder_that_cannot_be_written_is_one_line(demo, tmp_path):
    state = tmp_path / "state"
    state.write_text("a file, not a folder")
    config = serve_load.write_config(tmp_path / "serve.yaml", demo, state)
    started = start_in(config)
    assert started.returncode == 1 and "Traceback" not in started.stderr
    assert started.stderr.strip().splitlines()[-1].startswith(f"error: {state}: the state folder cannot be used (")


def test_a_read_only_state_folder_is_one_line(demo, tmp_path):
    """The state folder of a working server, then mounted read-only (as root: a bind mount in a
    mount namespace of its own; else its permissions)."""
    config = serve_load.write_config(tmp_path / "serve.yaml", demo, tmp_path / "state")
    serve_load.cli(config, "users")  # makes the state folder and its database
    state = tmp_path / "state"
    if os.geteuid() == 0:
        if subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode != 0:
            pytest.skip("root without mount namespaces: cannot make a read-only folder")
        started = start_in(config, "unshare", "-m", "sh", "-c", f'mount --bind "{state}" "{state}" && mount -o '
                           f'remount,bind,ro "{state}" && exec "$@"', "sh")
    else:
        for path in [state, *state.rglob("*")]:
            path.chmod(path.stat().st_mode & ~0o222)
        started = start_in(config)
    assert started.returncode == 1 and "Traceback" not in started.stderr, started.stderr
    last = started.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: {state}: the state folder cannot be used ("), started.stderr


def test_a_non_owner_cannot_unpublish(app):
    store = app.state.store
    owner = store.user_by_token(store.add_user("owner"))
    path = store.root / "incoming" / "x.json"
    path.write_text("{}")
    fields = {"user_id": owner["id"], "method": "m", "paper_url": "", "code_url": "", "public": 1,
              "file_name": "f.json", "file_kind": "json", "size": 2, "sha256": "h", "images_predicted": 1,
              "images_missing": 0, "images_extra": 0}
    submission_id = store.add_submission(fields, path, app.state.settings.benchmarks[SLUG], quota=False)
    evaluation_id = store.claim()[0]
    store.finish(evaluation_id, "done", summary={"metrics": {}, "audit": {}, "images": {}})
    reply = app.state.client.post(f"/api/submissions/{submission_id}/unpublish", headers=bearer(app, "bob"))
    assert reply.status_code == 403 and reply.json()["problems"] == [
        "only the submitter or an admin can make a submission public or private"]
    assert store.submission(submission_id)["public"] == 1


def test_a_413_keeps_the_forms_fields(app):
    fields = {"method": "Kept", "paper_url": "https://example.org/p", "code_url": "", "public": "0"}
    reply = send(app, bearer(app, "ann"), b"{" + b" " * (3 << 20) + b"}", **fields)
    assert reply.status_code == 413 and reply.json()["fields"] == fields

    client, me = log_in(app, "bob")
    page = client.get(f"/b/{SLUG}/submit")
    reply = client.post(f"/b/{SLUG}/submissions", data={"csrf": csrf_of(page.text), **fields},
                        files={"file": ("big.json", b"{" + b" " * (3 << 20) + b"}")})
    assert reply.status_code == 413 and 'value="Kept"' in reply.text and 'value="https://example.org/p"' in reply.text


def test_signing_up_in_a_browser_redirects(app):
    client = TestClient(app)
    page = client.get("/signup")
    reply = client.post("/signup", data={"name": "carol", "csrf": csrf_of(page.text)}, follow_redirects=False)
    assert reply.status_code == 303 and reply.headers["location"] == "/token"
    shown = client.get("/token")
    token = re.search(r'<pre class="token" id="token">(sgv_[A-Za-z0-9_-]+)</pre>', shown.text).group(1)
    assert app.state.store.user_by_token(token)["name"] == "carol"
    assert client.get("/token").text.count(token) == 1  # a reload shows it again: nothing is posted
    assert TestClient(app).get("/token").status_code == 404  # another browser sees nothing


def test_the_demo_benchmark_says_how_many_test_images_it_has(app):
    """The images the service evaluates (the split's images with relations), as its refusals count them."""
    images = len(app.state.gt_info[SLUG].image_ids)
    description = yaml.safe_load(serve_load.DEMO_CONFIG.read_text())["benchmarks"][SLUG]["description"]
    assert images == 31 and description.startswith(f"{images} synthetic test images")


def test_the_attack_benchmark_runs(tmp_path):
    """bench/serve_hostile.py (make bench-serve-hostile) on one attack for 3 s: its row and table."""
    output = tmp_path / "hostile.json"
    assert serve_hostile.main(["--seconds", "3", "--attacks", "replays", "--output", str(output)]) == 0
    row = json.loads(output.read_text())["rows"][0]
    assert row["attack"] == "replays" and row["legit_status"] == [201, 201, 201] and row["tracebacks"] == 0
    assert row["attack_outcomes"].get("409", 0) >= 3 and row["server_peak_rss_mb"] > 0
