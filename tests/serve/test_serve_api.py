"""sgeval serve through Starlette's test client: uploads (checked, refused, queued), evaluation in
worker processes, leaderboards, access rules, CSRF, and that the hidden GT never shows."""

import json
import re
import subprocess
import sys
import time
import types
import zipfile

import pytest
from starlette.testclient import TestClient

from conftest import ROOT, edit_zip, rewrite_json, sgeval
from sgeval_serve import boards, store as store_module
from sgeval_serve.app import create_app
from sgeval_serve.settings import SERVER_KEYS, load_settings
from tools import make_demo

SERVICE_YAML = """
title: test benchmarks
state_dir: {state}
workers: 1
job_timeout: 120
max_upload_mb: 1
signup: {signup}
benchmarks:
  psg-demo:
    title: PSG demo
    gt: {gt}
    gt_seg: {seg}
    protocols: [singlempo, unique, openpsg]
    metrics: [R@20, R@50, mR@50, PRank]
    order_by: R@50
    quota: {{per_day: {per_day}, total: 100}}
    missing_images: {missing}
"""


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    out = tmp_path_factory.mktemp("serve-demo")
    gt, pred = make_demo.make_demo(out / "data")
    return {"gt": gt, "seg": out / "data" / "panoptic", "A": pred, "B": pred.parent / "pred-b.zip", "dir": out}


def write_settings(folder, demo, signup=True, per_day=50, missing="count"):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "serve.yaml"
    path.write_text(SERVICE_YAML.format(state=folder / "state", gt=demo["gt"], seg=demo["seg"], signup=str(signup).lower(),
                                        per_day=per_day, missing=missing))
    return load_settings(path)


@pytest.fixture(scope="module")
def service(demo, tmp_path_factory):
    """A running app (one evaluation worker) with an admin and two submitters."""
    settings = write_settings(tmp_path_factory.mktemp("service"), demo)
    app = create_app(settings)
    with TestClient(app) as client:
        tokens = {name: app.state.store.add_user(name, admin=name == "admin") for name in ("admin", "ann", "bob")}
        yield {"client": client, "app": app, "settings": settings, "tokens": tokens,
               "headers": {name: {"Authorization": f"Bearer {token}"} for name, token in tokens.items()}}


def upload(service, user, path, name=None, **fields):
    data = {"method": "Model", **fields}
    with open(path, "rb") as file:
        return service["client"].post("/api/b/psg-demo/submissions", headers=service["headers"][user], data=data,
                                      files={"file": (name or path.name, file)})


def wait(service, submission_id, user="admin", timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        data = service["client"].get(f"/api/submissions/{submission_id}", headers=service["headers"][user]).json()
        if data["entry"]["status"] in ("done", "failed") and not any(
                e["status"] in ("queued", "running") for e in data.get("evaluations", [])):
            return data
        time.sleep(0.2)
    raise AssertionError(f"submission {submission_id} did not finish")


def variant(path, out, keep=None):
    """A copy of a demo prediction (a different file), keeping the first `keep` images."""
    out.write_bytes(path.read_bytes())
    rewrite_json(out, lambda data: data.update(images=data["images"][:keep]) if keep else data.update(note=out.name))
    return out


def test_an_upload_is_checked_queued_evaluated_and_ranked(service, demo):
    response = upload(service, "ann", demo["A"], method="Model A", paper_url="https://arxiv.org/abs/1",
                      code_url="https://github.com/x/y")
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["status"] == "queued" and body["images"]["missing"] == 2 and body["images"]["predicted"] == 29
    data = wait(service, body["id"], "ann")
    entry = data["entry"]
    assert entry["status"] == "done" and entry["sgeval_version"] == sgeval.__version__
    direct = sgeval.evaluate(service["settings"].benchmarks["psg-demo"].sgeval_config(demo["A"]))
    for protocol in ("singlempo", "unique", "openpsg"):
        for key in ("R@20", "R@50", "mR@50", "PRank"):
            assert entry["metrics"][protocol][key] == direct["by_protocol"][protocol]["metrics"][key]
    audit = direct["protocol_audit"]["per_image_mean"]
    assert entry["audit"] == {key: audit[key] for key in ("duplicate_instances", "duplicate_relations_after_merge")}
    assert entry["images"] == direct["images"] and entry["images_missing"] == 2
    assert entry["sha256"] == __import__("hashlib").sha256(demo["A"].read_bytes()).hexdigest()
    rows = data["per_predicate"]["rows"]
    assert data["per_predicate"]["metric"] == "mR@50" and len(rows) == len(direct["gt_relations_per_predicate"])
    first = rows[0]
    assert first["values"]["unique"] == direct["by_protocol"]["unique"]["per_predicate"]["mR@50"][first["predicate"]]
    assert data["config"]["gt"] == "<psg-demo: hidden ground truth>" and data["config"]["pred"] == "pred.zip"
    board = service["client"].get("/api/b/psg-demo").json()
    assert [e["id"] for e in board["entries"]] == [body["id"]] and board["sort"] == "singlempo:R@50"
    assert board["entries"][0]["paper_url"] == "https://arxiv.org/abs/1"
    png = service["client"].get(f"/submissions/{body['id']}/per_predicate.png")
    assert png.status_code == 200 and png.content.startswith(b"\x89PNG")
    page = service["client"].get("/b/psg-demo").text
    assert "Model A" in page and "duplicate instances" in page and "2 images without prediction" in page


def test_a_bad_upload_shows_sgevals_messages_and_takes_no_slot(service, demo, tmp_path):
    bad = variant(demo["A"], tmp_path / "broken.zip")
    rewrite_json(bad, lambda data: data["images"][3].pop("triplets"))
    image_id = json.loads(zipfile.ZipFile(bad).read("triplets.json"))["images"][3]["id"]
    before = service["client"].get("/api/me", headers=service["headers"]["bob"]).json()
    response = upload(service, "bob", bad)
    assert response.status_code == 422
    problems = response.json()["problems"]
    assert problems == [f"broken.zip: image {image_id}: missing field 'triplets' (an empty list is valid)"]
    after = service["client"].get("/api/me", headers=service["headers"]["bob"]).json()
    assert after["submissions"] == before["submissions"] and after["quota"] == before["quota"]


@pytest.mark.parametrize("payload, status, words", [
    (b"GIF89a....", 400, "not a ZIP archive or a JSON file"),
    (b"", 400, "choose a prediction file"),
    (b"{" + b" " * (1 << 20), 413, "larger than the limit of 1 MiB"),
    (b'{"version": 1, "images": []}', 422, "predicts none of the benchmark's 31 test images"),
    (b"PK\x03\x04 not really", 422, "f.bin: not a readable ZIP archive"),
])
def test_refused_files(service, payload, status, words):
    response = service["client"].post("/api/b/psg-demo/submissions", headers=service["headers"]["bob"],
                                      data={"method": "X"}, files={"file": ("f.bin", payload)})
    assert response.status_code == status and words in " ".join(response.json()["problems"])


def test_the_form_fields_are_checked(service, demo):
    response = upload(service, "bob", demo["A"], method=" ", paper_url="javascript:alert(1)")
    assert response.status_code == 400
    assert response.json()["problems"] == ["method: give the method's name (1 to 100 characters)",
                                           "paper_url: give an http:// or https:// address (at most 500 characters)"]
    response = service["client"].post("/api/b/psg-demo/submissions", headers=service["headers"]["bob"],
                                      data={"method": "X", "extra": "1"}, files={"file": ("a.json", b"{}")})
    assert response.status_code == 400 and "unknown form field 'extra'" in response.json()["error"]


def test_a_streamed_upload_without_length_is_cut_at_the_limit(service):
    boundary = "b0undary"

    def body():
        yield (f"--{boundary}\r\nContent-Disposition: form-data; name=\"method\"\r\n\r\nX\r\n--{boundary}\r\n"
               f"Content-Disposition: form-data; name=\"file\"; filename=\"big.json\"\r\n\r\n{{").encode()
        for _ in range(40):
            yield b" " * 65536
        yield f"}}\r\n--{boundary}--\r\n".encode()

    headers = {**service["headers"]["bob"], "Content-Type": f"multipart/form-data; boundary={boundary}"}
    response = service["client"].post("/api/b/psg-demo/submissions", headers=headers, content=body())
    assert response.status_code == 413
    assert not list((service["settings"].state_dir / "incoming").iterdir())  # the partial file is gone


def test_missing_images_are_counted_or_refused(service, demo, tmp_path):
    partial = variant(demo["B"], tmp_path / "partial.zip", keep=10)
    response = upload(service, "bob", partial, method="Partial")
    assert response.status_code == 201 and response.json()["images"]["missing"] == 31 - 10
    data = wait(service, response.json()["id"], "bob")
    assert data["entry"]["images_missing"] == data["entry"]["images"]["missing_predictions"] == 21
    app = create_app(write_settings(tmp_path / "refuse", demo, missing="refuse"), start_workers=False)
    with TestClient(app) as client:
        token = app.state.store.add_user("c")
        with open(partial, "rb") as file:
            response = client.post("/api/b/psg-demo/submissions", headers={"Authorization": f"Bearer {token}"},
                                   data={"method": "P"}, files={"file": ("partial.zip", file)})
    assert response.status_code == 422 and "have no prediction (this benchmark needs every image)" in response.text


def test_duplicates_and_quota(demo, tmp_path):
    settings = write_settings(tmp_path, demo, per_day=2)
    app = create_app(settings, start_workers=False)
    with TestClient(app) as client:
        headers = {"Authorization": f"Bearer {app.state.store.add_user('q')}"}

        def send(path, name="p.zip"):
            with open(path, "rb") as file:
                return client.post("/api/b/psg-demo/submissions", headers=headers, data={"method": "M"},
                                   files={"file": (name, file)})

        assert send(demo["A"]).status_code == 201
        again = send(demo["A"])
        assert again.status_code == 409 and "you submitted this file already (submission #1)" in again.text
        bad = variant(demo["A"], tmp_path / "bad.zip")
        rewrite_json(bad, lambda data: data["images"][0].pop("triplets"))
        assert send(bad).status_code == 422  # refused: takes no slot
        assert send(variant(demo["B"], tmp_path / "b.zip")).status_code == 201
        third = send(variant(demo["B"], tmp_path / "c.zip", keep=5))
        assert third.status_code == 429 and "2 of 2 submissions today" in third.text
        assert app.state.store.queue_counts()["queued"] == 2


def test_tokens_and_sessions(service):
    client = service["client"]
    assert client.post("/api/b/psg-demo/submissions", data={"method": "X"}).status_code == 401
    wrong = client.get("/api/me", headers={"Authorization": "Bearer sgv_nope"})
    assert wrong.status_code == 401 and wrong.json()["error"] == "the API token is not valid (or was revoked)"
    assert client.get("/api/admin", headers=service["headers"]["bob"]).status_code == 403
    assert client.get("/api/admin", headers=service["headers"]["admin"]).status_code == 200
    signup = client.post("/api/signup", json={"name": "carol"})
    assert signup.status_code == 201 and signup.json()["token"].startswith("sgv_")
    assert client.post("/api/signup", json={"name": "carol"}).status_code == 409
    issued = client.post("/api/admin/tokens", headers=service["headers"]["admin"], json={"name": "dave"})
    token = issued.json()["token"]
    assert client.get("/api/me", headers={"Authorization": f"Bearer {token}"}).json()["user"]["name"] == "dave"
    client.post("/api/admin/revoke", headers=service["headers"]["admin"], json={"name": "dave"})
    assert client.get("/api/me", headers={"Authorization": f"Bearer {token}"}).status_code == 401


def test_signup_can_be_closed(demo, tmp_path):
    app = create_app(write_settings(tmp_path, demo, signup=False), start_workers=False)
    with TestClient(app) as client:
        assert client.post("/api/signup", json={"name": "x"}).status_code == 404
        assert client.get("/signup").status_code == 404


def csrf_of(page):
    return re.search(r'name="csrf" value="([0-9a-f]+)"', page).group(1)


def test_forms_need_their_csrf_token_and_log_in_with_the_token(service):
    client = TestClient(service["app"])  # a browser of its own (cookies)
    page = client.get("/login")
    refused = client.post("/login", data={"token": service["tokens"]["bob"]})
    assert refused.status_code == 403 and "did not come from this site" in refused.text
    forged = client.post("/login", data={"token": service["tokens"]["bob"], "csrf": "0" * 64})
    assert forged.status_code == 403
    logged_in = client.post("/login", data={"token": service["tokens"]["bob"], "csrf": csrf_of(page.text)},
                            follow_redirects=False)
    assert logged_in.status_code == 303 and "sgeval_session" in logged_in.cookies
    assert "HttpOnly" in logged_in.headers["set-cookie"] and "samesite=lax" in logged_in.headers["set-cookie"].lower()
    me = client.get("/me")
    assert me.status_code == 200 and "Your submissions" in me.text
    assert client.post("/logout", data={}).status_code == 403
    assert client.post("/logout", data={"csrf": csrf_of(me.text)}, follow_redirects=False).status_code == 303
    assert client.get("/me").status_code == 401
    # the API never reads the cookie: a logged-in browser is a visitor there
    assert client.get("/api/me").status_code == 401


def test_private_entries_are_seen_by_their_owner_and_the_admins_only(service, demo, tmp_path):
    response = upload(service, "bob", variant(demo["A"], tmp_path / "private.zip"), method="Secret", public="0")
    submission_id = response.json()["id"]
    wait(service, submission_id, "bob")
    client = service["client"]
    for headers, sees in (({}, False), (service["headers"]["ann"], False), (service["headers"]["bob"], True),
                          (service["headers"]["admin"], True)):
        board = client.get("/api/b/psg-demo", headers=headers).json()
        assert (submission_id in [e["id"] for e in board["entries"]]) == sees
        assert (client.get(f"/api/submissions/{submission_id}", headers=headers).status_code == 200) == sees
        assert (client.get(f"/submissions/{submission_id}/per_predicate.png").status_code == 200) is False
    assert "Secret" not in client.get("/b/psg-demo").text


def test_admin_actions(service, demo, tmp_path):
    client, admin, ann = service["client"], service["headers"]["admin"], service["headers"]["ann"]
    submission_id = upload(service, "ann", variant(demo["B"], tmp_path / "b.zip"), method="Model B").json()["id"]
    wait(service, submission_id, "ann")
    assert client.post(f"/api/submissions/{submission_id}/approve", headers=ann).status_code == 403
    assert client.post(f"/api/submissions/{submission_id}/approve", headers=admin).json()["approved"] is True
    assert submission_id in [e["id"] for e in client.get("/api/b/psg-demo/approved").json()["entries"]]
    assert client.post(f"/api/submissions/{submission_id}/hide", headers=admin).json()["hidden"] is True
    assert submission_id not in [e["id"] for e in client.get("/api/b/psg-demo/approved").json()["entries"]]
    client.post(f"/api/submissions/{submission_id}/unhide", headers=admin)
    assert client.post(f"/api/submissions/{submission_id}/reevaluate", headers=ann).status_code == 403
    client.post(f"/api/submissions/{submission_id}/reevaluate", headers=admin)
    data = wait(service, submission_id, "admin")
    assert [e["status"] for e in data["evaluations"]] == ["done", "done"]
    assert client.post(f"/api/submissions/{submission_id}/unpublish", headers=ann).json()["public"] is False
    assert client.post(f"/api/submissions/{submission_id}/publish", headers=ann).json()["public"] is True
    state = service["settings"].state_dir
    assert (state / "submissions" / str(submission_id)).is_dir()
    assert client.delete(f"/api/submissions/{submission_id}", headers=admin).status_code == 405
    assert client.post(f"/api/submissions/{submission_id}/delete", headers=admin).json()["deleted"] is True
    assert not (state / "submissions" / str(submission_id)).exists()
    assert client.get(f"/api/submissions/{submission_id}", headers=admin).status_code == 404


def test_sorting(service):
    board = service["client"].get("/api/b/psg-demo?sort=unique:PRank").json()
    assert board["sort"] == "unique:PRank" and board["order"] == "asc"  # a mean rank: lower is better
    values = [e["metrics"]["unique"]["PRank"] for e in board["entries"]]
    assert values == sorted(values)
    board = service["client"].get("/api/b/psg-demo?sort=openpsg:R@20&order=asc").json()
    values = [e["metrics"]["openpsg"]["R@20"] for e in board["entries"]]
    assert values == sorted(values) and len(values) >= 2
    assert service["client"].get("/api/b/psg-demo?sort=../../etc").json()["sort"] == "singlempo:R@50"


def test_an_upload_name_never_reaches_the_file_system(service, demo):
    response = upload(service, "ann", variant(demo["B"], demo["dir"] / "n.zip", keep=3), name="../../../evil.zip")
    submission_id = response.json()["id"]
    entry = service["client"].get(f"/api/submissions/{submission_id}", headers=service["headers"]["ann"]).json()
    assert entry["entry"]["file_name"] == "evil.zip"
    assert (service["settings"].state_dir / "submissions" / str(submission_id) / "prediction.zip").is_file()
    assert not list(service["settings"].state_dir.parent.rglob("evil.zip"))


def test_an_evaluation_that_fails_names_the_upload_not_the_server(service, demo, tmp_path):
    broken = variant(demo["A"], tmp_path / "masks.zip")
    tiff = "1002.tiff"  # an image of the GT with instances
    edit_zip(broken, {tiff: b"II*\x00garbage"})
    response = upload(service, "ann", broken, method="Broken masks")
    assert response.status_code == 201  # the records are fine; the masks are read by the evaluation
    data = wait(service, response.json()["id"], "ann")
    assert data["entry"]["status"] == "failed"
    reason = data["entry"]["reason"]
    assert reason.startswith(f"masks.zip: image {tiff[:-5]}") and str(service["settings"].state_dir) not in reason
    public = service["client"].get(f"/api/submissions/{response.json()['id']}").status_code
    assert public == 404  # failed entries are not public pages


def test_the_hidden_gt_never_shows(service, demo):
    client, benchmark = service["client"], service["settings"].benchmarks["psg-demo"]
    secrets = [str(demo["dir"]), str(service["settings"].state_dir), benchmark.gt]
    ids = [e["id"] for e in client.get("/api/admin", headers=service["headers"]["admin"]).json()["submissions"]]
    paths = ["/", "/api/", "/b/psg-demo", "/api/b/psg-demo", "/b/psg-demo/approved", "/api/admin", "/admin", "/me",
             "/api/me", "/b/psg-demo/submit", "/static/../sgeval-serve.sqlite3", "/static/%2e%2e/settings.py"]
    paths += [f"/submissions/{i}" for i in ids] + [f"/api/submissions/{i}" for i in ids]
    for path in paths:
        for headers in ({}, service["headers"]["admin"], service["headers"]["ann"]):
            text = client.get(path, headers=headers).text
            assert not any(secret in text for secret in secrets), path
    assert client.get("/static/style.css").status_code == 200
    assert client.get("/static/../store.py").status_code == 404


def test_every_page_has_its_json(service):
    client, admin = service["client"], service["headers"]["admin"]
    assert [b["slug"] for b in client.get("/api/").json()["benchmarks"]] == ["psg-demo"]
    assert client.get("/api/b/psg-demo/approved").json()["board"] == "approved"
    assert client.get("/api/b/nope").status_code == 404 and client.get("/api/b/psg-demo/other").status_code == 404
    assert client.get("/api/submissions/99999", headers=admin).status_code == 404
    assert client.get("/api/submissions/x1", headers=admin).status_code == 404
    headers = client.get("/").headers
    assert "frame-ancestors 'none'" in headers["content-security-policy"] and headers["x-frame-options"] == "DENY"


def test_an_interrupted_evaluation_is_run_again(tmp_path):
    store = store_module.Store(tmp_path)
    user = store.user_by_token(store.add_user("u"))
    with store.transaction() as db:
        db.execute("INSERT INTO submissions (id, benchmark, user_id, method, paper_url, code_url, public, created, "
                   "file_name, file_kind, size, sha256, images_predicted, images_missing, images_extra) "
                   "VALUES (1, 'b', ?, 'm', '', '', 1, 'now', 'f', 'zip', 1, 'h', 1, 0, 0)", (user["id"],))
        db.execute("INSERT INTO evaluations (submission_id, status, queued) VALUES (1, 'queued', 'now')")
    for attempt in range(1, store_module.MAX_ATTEMPTS + 1):
        assert store.claim() == (1, 1, attempt)
        assert store.claim() is None
        assert store.requeue_interrupted() == (attempt < store_module.MAX_ATTEMPTS)
    assert store.submission(1)["status"] == "failed" and "interrupted 3 times" in store.submission(1)["reason"]


def test_the_ids_of_a_deleted_submission_are_not_given_again(tmp_path):
    """The newest submission deleted, the next one gets new submission and evaluation ids, so the
    deleted one's folders (removed after the deletion's transaction, when the next upload may be
    stored already) and its URL never name another."""
    store = store_module.Store(tmp_path)
    user = store.user_by_token(store.add_user("u"))

    def add(sha256):
        path = tmp_path / "incoming" / f"{sha256}.part"
        path.write_text("{}")
        fields = {"user_id": user["id"], "method": "m", "paper_url": "", "code_url": "", "public": 1,
                  "file_name": "f.json", "file_kind": "json", "size": 2, "sha256": sha256, "images_predicted": 1,
                  "images_missing": 0, "images_extra": 0}
        submission_id = store.add_submission(fields, path, types.SimpleNamespace(slug="b"), quota=False)
        return submission_id, store.submission(submission_id)["evaluation_id"]

    first = add("a")
    assert store.delete_submission(first[0]) == 1
    second = add("b")
    assert second[0] != first[0] and second[1] != first[1]


def test_service_config_problems_are_listed(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("port: 99999\nworkerz: 2\nbenchmarks:\n  Bad_Name:\n    gt: x.json\n    protocols: [fair]\n"
                    "    metrics: [R@50, Q@5]\n    order_by: mR@50\n    evaluation: {pred: x, k: [7]}\n")
    with pytest.raises(sgeval.SGEvalError) as error:
        load_settings(path)
    assert error.value.problems == [
        f"{path}: unknown key 'workerz' (valid: {', '.join(SERVER_KEYS)})",
        f"{path}: benchmarks.Bad_Name: a benchmark's name must be lower-case letters, digits and '-' (URL-safe)",
        f"{path}: benchmarks.Bad_Name: 'protocols' must be a list of unique, singlempo, multimpo, openpsg, sgb, oi, "
        "ag (headline first)",
        f"{path}: benchmarks.Bad_Name: metric 'Q@5' is not a result key of sgeval (R@50, mR@100, PRank, ...)",
        f"{path}: benchmarks.Bad_Name: 'order_by' must be one of the metrics (R@50, Q@5), not 'mR@50'",
        f"{path}: benchmarks.Bad_Name: evaluation key 'pred' is set by the service",
        f"{path}: 'port' must be a whole number from 0 to 65535, not 99999"]


def test_entries_hide_failure_reasons_from_others():
    row = {"id": 1, "benchmark": "b", "method": "m", "paper_url": "", "code_url": "", "submitter": "s", "created": "c",
           "status": "failed", "reason": "secret", "file_name": "f", "size": 1, "sha256": "h", "images_predicted": 1,
           "images_missing": 0, "images_extra": 0, "sgeval_version": None, "evaluated": None, "public": 1,
           "approved": 0, "hidden": 0, "summary": None, "user_id": 7, "done_id": None}
    assert boards.entry(row, None)["reason"] == ""
    assert boards.entry(row, {"id": 7, "admin": 0})["reason"] == "secret"


def test_the_admin_commands(demo, tmp_path):
    settings = write_settings(tmp_path, demo)
    config = str(tmp_path / "serve.yaml")

    def serve(*args):
        return subprocess.run([sys.executable, str(ROOT / "sgeval.py"), "serve", "--config", config, *map(str, args)],
                              capture_output=True, text=True)

    token = serve("token", "alice", "--admin")
    assert token.returncode == 0 and token.stdout.startswith("sgv_")
    taken = serve("token", "alice")
    assert taken.returncode == 1 and "the name 'alice' is taken (use --renew for a new token)" in taken.stderr
    queued = serve("submit", demo["A"], "--benchmark", "psg-demo", "--user", "lab", "--method", "Baseline", "--approve")
    assert queued.stdout == "submission 1 queued (29 images predicted, 2 without prediction); a running server " \
                            "evaluates it\n"
    assert "already submitted by lab (submission 1)" in serve("submit", demo["A"], "--benchmark", "psg-demo", "--user",
                                                              "lab", "--method", "B", "--if-new").stderr
    assert serve("users").stdout.splitlines()[1].startswith("lab\tsubmitter\t")
    store = store_module.Store(settings.state_dir)
    assert store.submission(1)["approved"] == 1 and store.submission(1)["status"] == "queued"
    assert serve("reevaluate", "1").stdout == "submission 1: evaluation 1 queued\n"  # the queued one already
    missing = subprocess.run([sys.executable, "-m", "sgeval_serve", "--config", str(tmp_path / "none.yaml"), "users"],
                             capture_output=True, text=True, cwd=ROOT)
    assert missing.returncode == 1 and "none.yaml: cannot read the service config" in missing.stderr


@pytest.mark.parametrize("path", sorted((ROOT / "configs" / "serve").glob("*.yaml")), ids=lambda p: p.name)
def test_repository_service_configs_load(path):
    assert load_settings(path).benchmarks
