"""`make bench-serve`: the benchmark service (sgeval_serve) under load, on loopback.

    python -m bench.serve_load                              # 50 uploads and 1,000 reads, 3 runs
    python -m bench.serve_load --uploads 20 --reads 200 --runs 1 --threads 32 --workers 2

One run: the real server (``python -m sgeval_serve --config <file> --port <free port>``, a child
process in its own process group) on the demo benchmark (``tools.make_demo``; the settings of
configs/serve/demo.yaml with the given workers and a quota no run reaches), a fresh state folder,
an admin token from the CLI (``token admin --admin``) and one user per upload, each issued by the
admin through the API (``POST /api/admin/tokens``). Then, from THREADS client threads at once, in a
fixed shuffled order: UPLOADS uploads (``POST /api/b/psg-demo/submissions``, multipart, public),
each a distinct copy of the demo's pred.zip (its triplets.json ends in another number of newlines,
so no two files have the same hash), and READS leaderboard reads, alternately the HTML page
(``/b/psg-demo``) and its JSON (``/api/b/psg-demo``). Every request opens its own connection
(urllib), as separate clients do. Measured: each request's latency (from sending to the last byte
of the reply), and the time from the first request until every evaluation has ended (the admin's
view polled every 0.2 s). Checked: every upload got 201 and an id, the ids are distinct, the admin's
view lists exactly those submissions, every evaluation is done, every read got 200, and the public
leaderboard lists each submission once.

tests/serve/test_serve_load.py runs the same load at 20 uploads and 200 reads with these helpers, and
uses them to restart the server in the middle of an evaluation (``Server``, ``slow_prediction``).
Results go to bench/results/serve-load.json. Run from the repository root.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
SLUG = "psg-demo"
DEMO_CONFIG = ROOT / "configs" / "serve" / "demo.yaml"
FINISHED = ("done", "failed")


# data ---------------------------------------------------------------------------------------


def demo_data(folder):
    """The demo's GT and predictions (tools.make_demo) in folder; returns folder."""
    from tools import make_demo

    make_demo.make_demo(folder)
    return Path(folder)


def distinct_copies(pred_zip, n, folder):
    """n copies of a prediction ZIP with the same predictions and different bytes (copy i's
    triplets.json ends in i newlines): n files the service takes from one user. Returns the paths."""
    with zipfile.ZipFile(pred_zip) as archive:
        members = [(info, archive.read(info)) for info in archive.infolist()]
    paths = []
    for index in range(n):
        path = Path(folder) / f"pred-{index:03d}.zip"
        with zipfile.ZipFile(path, "w") as archive:
            for info, data in members:
                archive.writestr(info, data + b"\n" * index if info.filename == "triplets.json" else data)
        paths.append(path)
    return paths


def slow_prediction(gt_json, path, masks_per_image):
    """A valid prediction that is slow to evaluate and quick to write: for every test image of a GT
    whose images share one size, masks_per_image masks of one category, each of stripes of half
    the image (rows or columns, another width or offset each). Every pair of them has the same
    box and about the same area, so no bound spares a comparison, and most pairs overlap by less
    than an IoU of 0.5: the audit's duplicate count and the SingleMPO merge intersect every pair,
    a cost growing with the square of masks_per_image (on the demo's 120 x 160 images: about 5 s
    for 1,000 masks, in the service's four protocols, on one core). 100 triplets per image."""
    import numpy as np

    import sgeval

    gt = json.loads(Path(gt_json).read_text())
    height, width = gt["data"][0]["height"], gt["data"][0]["width"]
    stripes = [(axis, size, offset) for size in range(1, min(height, width) // 2)
               for offset in range(2 * size) for axis in (0, 1)]
    if masks_per_image > len(stripes):
        raise ValueError(f"at most {len(stripes)} masks per image on {height} x {width} images")
    rows, columns = np.arange(height)[:, None], np.arange(width)[None, :]
    masks = np.empty((masks_per_image, height, width), bool)
    for mask, (axis, size, offset) in zip(masks, stripes):
        mask[:] = ((rows if axis == 0 else columns) + offset) // size % 2 == 0
    tiff = sgeval.encode_masks(masks)
    instances = [{"category": 0, "bbox": [0.0, 0.0, float(width), float(height)], "score": 0.5}] * masks_per_image
    triplets = [[index, (index + 1) % masks_per_image, 0] for index in range(100)]
    sgeval.write_predictions(path, ({"id": image_id, "instances": instances, "triplets": triplets, "tiff": tiff}
                                    for image_id in gt["test_image_ids"]))
    return Path(path)


def write_config(path, data, state_dir, workers=2, job_timeout=600, quota=100_000, **server_keys):
    """configs/serve/demo.yaml with the demo data in folder data, another state folder, workers,
    job_timeout, a quota (per day and in total) of quota submissions and any further server keys."""
    config = yaml.safe_load(DEMO_CONFIG.read_text())
    config.update(state_dir=str(state_dir), workers=workers, job_timeout=job_timeout, **server_keys)
    config["benchmarks"][SLUG].update(gt=str(Path(data) / "psg.json"), gt_seg=str(Path(data) / "panoptic"),
                                      quota={"per_day": quota, "total": quota})
    Path(path).write_text(yaml.safe_dump(config, sort_keys=False))
    return Path(path)


# the server -------------------------------------------------------------------------------


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def cli(config, *args):
    """The service's CLI (``python -m sgeval_serve --config CONFIG ARGS``, e.g. ``token NAME --admin``):
    its output, stripped."""
    command = [sys.executable, "-m", "sgeval_serve", "--config", str(config), *map(str, args)]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()


class Server:
    """``python -m sgeval_serve --config CONFIG --port <free>`` as a child process leading its own
    process group, its output appended to log. start() returns when the index answers."""

    def __init__(self, config, log):
        self.config, self.log, self.process, self.url = Path(config), Path(log), None, None

    def start(self, timeout=60):
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen([sys.executable, "-m", "sgeval_serve", "--config", str(self.config),
                                             "--port", str(port)], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True)
        until(lambda: self.process.poll() is not None or call(self.url, "GET", "/api/", timeout=5).status == 200,
              timeout, f"the server to answer ({self.log})")
        if self.process.poll() is not None:
            raise RuntimeError(f"the server exited with {self.process.returncode}: {self.log_tail()}")
        return self

    def kill(self):
        """SIGKILL to the server's process group (its evaluation processes have their own)."""
        os.killpg(self.process.pid, signal.SIGKILL)
        return self.process.wait()

    def stop(self, sig=signal.SIGTERM, timeout=60):
        """A graceful stop: sig to the server; returns its exit code."""
        self.process.send_signal(sig)
        return self.process.wait(timeout)

    def log_tail(self, lines=20):
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        if self.process.poll() is None:
            self.kill()


def evaluation_processes(state_dir):
    """The live evaluation processes (``python -m sgeval_serve.jobs <state_dir>/evaluations/...``)."""
    found, where = [], str(Path(state_dir).resolve() / "evaluations") + os.sep
    for entry in Path("/proc").iterdir():
        try:
            command = (entry / "cmdline").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):  # not a process, or gone meanwhile
            continue
        if b"sgeval_serve.jobs" in command and any(arg.decode(errors="replace").startswith(where) for arg in command) \
                and state not in "ZX":
            found.append(int(entry.name))
    return found


def until(condition, timeout, what, interval=0.05):
    """Wait for condition() to be true; raises TimeoutError naming what after timeout seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout} s for {what}")
        time.sleep(interval)


# HTTP -------------------------------------------------------------------------------------


class Reply:
    def __init__(self, status, body, seconds):
        self.status, self.body, self.seconds = status, body, seconds

    def json(self):
        return json.loads(self.body)


def call(base, method, path, token=None, json_body=None, form=None, file=None, timeout=120):
    """One request on a new connection: Reply(status (0: no reply), body, seconds). form: text
    fields; file: a path sent as the form's file (multipart/form-data)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    body = None
    if json_body is not None:
        body, headers["Content-Type"] = json.dumps(json_body).encode(), "application/json"
    elif form is not None or file is not None:
        boundary = uuid.uuid4().hex
        parts = [f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode()
                 for name, value in (form or {}).items()]
        if file is not None:
            parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{Path(file).name}"'
                         f'\r\nContent-Type: application/octet-stream\r\n\r\n'.encode() + Path(file).read_bytes()
                         + b"\r\n")
        body = b"".join(parts) + f"--{boundary}--\r\n".encode()
        headers["Content-Type"] = f"multipart/form-data; boundary={boundary}"
    request = urllib.request.Request(base + path, data=body, method=method, headers=headers)
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status, data = response.status, response.read()
    except urllib.error.HTTPError as error:
        status, data = error.code, error.read()
    except OSError as error:  # refused, reset, timed out
        status, data = 0, repr(error).encode()
    return Reply(status, data, time.perf_counter() - started)


def upload(base, token, path, method, public=True):
    """Submit a prediction file to the demo benchmark through the API."""
    return call(base, "POST", f"/api/b/{SLUG}/submissions", token,
                form={"method": method, "paper_url": "", "code_url": "", "public": "1" if public else "0"}, file=path)


def issue_tokens(base, admin_token, names):
    """New users with their tokens, issued by an admin through the API: {name: token}."""
    tokens = {}
    for name in names:
        reply = call(base, "POST", "/api/admin/tokens", admin_token, json_body={"name": name})
        if reply.status != 201:
            raise RuntimeError(f"issuing a token for {name}: {reply.status} {reply.body[:200]!r}")
        tokens[name] = reply.json()["token"]
    return tokens


# the load ---------------------------------------------------------------------------------


def run_load(base, uploads, reads, threads, admin_token, drain_timeout):
    """uploads: [(token, path)] sent with reads leaderboard reads from threads threads, then the
    admin's view polled until every evaluation has ended (or drain_timeout seconds). Returns
    {"uploads": [Reply], "reads": [(kind, Reply)], "load_s", "drain_s" (None: not drained),
    "load_average": the machine's over the last minute, "submissions": the admin's view's list,
    "board": the public leaderboard}, the last three as they are at the end."""
    tasks = [("upload", index) for index in range(len(uploads))] + \
            [("html" if index % 2 else "json", index) for index in range(reads)]
    random.Random(0).shuffle(tasks)

    def send(task):
        kind, index = task
        if kind == "upload":
            token, path = uploads[index]
            return kind, upload(base, token, path, f"Model {index:03d}")
        return kind, call(base, "GET", f"/b/{SLUG}" if kind == "html" else f"/api/b/{SLUG}")

    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        done = list(pool.map(send, tasks))
    load_s = time.perf_counter() - started
    ids = {reply.json().get("id") for kind, reply in done if kind == "upload" and reply.status == 201}
    drain_s, deadline = None, time.monotonic() + drain_timeout
    while time.monotonic() < deadline:
        view = call(base, "GET", "/api/admin", admin_token)
        if view.status == 200:
            rows = [row for row in view.json()["submissions"] if row["id"] in ids]
            if len(rows) == len(ids) and all(row["status"] in FINISHED for row in rows):
                drain_s = time.perf_counter() - started
                break
        time.sleep(0.2)
    return {"uploads": [reply for kind, reply in done if kind == "upload"],
            "reads": [(kind, reply) for kind, reply in done if kind != "upload"], "load_s": load_s,
            "drain_s": drain_s, "load_average": os.getloadavg()[0],
            "submissions": call(base, "GET", "/api/admin", admin_token).json()["submissions"],
            "board": call(base, "GET", f"/api/b/{SLUG}").json()}


def problems(load, n_uploads, n_reads):
    """What went wrong in a run_load: [] when every check holds."""
    found = []
    bad = [(reply.status, reply.body[:200]) for reply in load["uploads"] if reply.status != 201]
    found += [f"{len(bad)} of {n_uploads} uploads did not get 201, e.g. {bad[:3]}"] if bad else []
    ids = [reply.json().get("id") for reply in load["uploads"] if reply.status == 201]
    if len(set(ids)) != len(ids) or not all(isinstance(i, int) for i in ids):
        found.append(f"the upload ids are not distinct whole numbers: {sorted(map(str, ids))}")
    listed = sorted(row["id"] for row in load["submissions"])
    if listed != sorted(ids) or len(ids) != n_uploads:
        found.append(f"the admin's view lists {len(listed)} submissions, {n_uploads} were uploaded: {listed}")
    if load["drain_s"] is None:
        found.append("the queue did not drain in time")
    statuses = {row["id"]: row["status"] for row in load["submissions"]}
    not_done = {i: status for i, status in statuses.items() if status != "done"}
    found += [f"evaluations not done: {not_done}"] if not_done else []
    bad = [(kind, reply.status) for kind, reply in load["reads"] if reply.status != 200]
    found += [f"{len(bad)} of {n_reads} reads did not get 200, e.g. {bad[:3]}"] if bad else []
    on_board = sorted(entry["id"] for entry in load["board"]["entries"])
    if on_board != sorted(ids):
        found.append(f"the leaderboard lists {on_board}, not the {len(ids)} submissions once each")
    return found


def percentiles(seconds):
    """p50, p95 (nearest rank) and max of durations, in milliseconds."""
    ranked = sorted(seconds)
    if not ranked:
        return {"n": 0, "p50": None, "p95": None, "max": None}

    def milliseconds(q):
        return round(ranked[max(math.ceil(q * len(ranked)) - 1, 0)] * 1e3, 1)

    return {"n": len(ranked), "p50": milliseconds(0.5), "p95": milliseconds(0.95), "max": milliseconds(1.0)}


def figures(load):
    """The run's latencies (ms) per kind of request, its load and drain times (s), and the load
    average at its end (this run keeps it near 2-3; much more: other work on the machine)."""
    reads = load["reads"]
    return {"uploads_ms": percentiles([reply.seconds for reply in load["uploads"]]),
            "reads_ms": percentiles([reply.seconds for _, reply in reads]),
            "reads_html_ms": percentiles([reply.seconds for kind, reply in reads if kind == "html"]),
            "reads_json_ms": percentiles([reply.seconds for kind, reply in reads if kind == "json"]),
            "load_s": round(load["load_s"], 2),
            "drain_s": None if load["drain_s"] is None else round(load["drain_s"], 2),
            "load_average": round(load["load_average"], 2)}


def measure(data, folder, uploads=20, reads=200, threads=32, workers=2, drain_timeout=600):
    """One run on the demo data in data, state and files under folder: the server started, tokens
    issued, the load sent and drained. Returns (run_load's result, figures, problems)."""
    folder = Path(folder)
    config = write_config(folder / "serve.yaml", data, folder / "state", workers=workers)
    files = distinct_copies(Path(data) / "pred.zip", uploads, folder)
    admin_token = cli(config, "token", "admin", "--admin")
    with Server(config, folder / "server.log") as server:
        tokens = issue_tokens(server.url, admin_token, [f"user{index:03d}" for index in range(uploads)])
        load = run_load(server.url, list(zip(tokens.values(), files)), reads, threads, admin_token, drain_timeout)
    return load, figures(load), problems(load, uploads, reads)


def table(runs):
    """The figures' medians over runs, as text."""
    lines = [f"{'':16}{'p50 ms':>10}{'p95 ms':>10}{'max ms':>10}{'n':>7}"]
    for key, label in (("uploads_ms", "uploads"), ("reads_ms", "reads"), ("reads_html_ms", "  HTML page"),
                       ("reads_json_ms", "  JSON")):
        cells = [statistics.median(run[key][q] for run in runs) for q in ("p50", "p95", "max")]
        lines.append(f"{label:16}" + "".join(f"{cell:>10.1f}" for cell in cells) + f"{runs[0][key]['n']:>7}")
    for key, label, unit in (("load_s", "requests sent in", " s"), ("drain_s", "queue drained at", " s"),
                             ("load_average", "load average", "")):
        values = [run[key] for run in runs if run[key] is not None]
        lines.append(f"{label:16}{statistics.median(values):>10.1f}{unit}" if values else f"{label:16}   (never)")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench.serve_load", description=__doc__.split("\n\n")[0])
    parser.add_argument("--uploads", type=int, default=50, help="uploads, one user each (default: 50)")
    parser.add_argument("--reads", type=int, default=1000, help="leaderboard reads, HTML and JSON (default: 1000)")
    parser.add_argument("--threads", type=int, default=32, help="client threads (default: 32)")
    parser.add_argument("--workers", type=int, default=2, help="the server's evaluation workers (default: 2)")
    parser.add_argument("--runs", type=int, default=3, help="runs, each on a fresh server (default: 3)")
    parser.add_argument("--output", default=str(ROOT / "bench" / "results" / "serve-load.json"),
                        help="the results file (default: bench/results/serve-load.json)")
    args = parser.parse_args(argv)
    from bench.run import machine

    runs, failed = [], False
    with tempfile.TemporaryDirectory(prefix="sgeval-serve-load-") as scratch:
        data = demo_data(Path(scratch) / "data")
        for run in range(args.runs):
            folder = Path(scratch) / f"run-{run}"
            folder.mkdir()
            _, numbers, found = measure(data, folder, args.uploads, args.reads, args.threads, args.workers)
            runs.append(numbers)
            print(f"run {run + 1}: uploads p50 {numbers['uploads_ms']['p50']} ms, reads p50 "
                  f"{numbers['reads_ms']['p50']} ms, drained at {numbers['drain_s']} s, load average "
                  f"{numbers['load_average']}", flush=True)
            for problem in found:
                print(f"  PROBLEM: {problem}", flush=True)
            failed |= bool(found)
    text = table(runs)
    print(f"\n{args.uploads} uploads and {args.reads} reads from {args.threads} threads, {args.workers} evaluation "
          f"workers; medians of {args.runs} run(s)\n{text}")
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps({"machine": machine(), "arguments": vars(args), "runs": runs,
                                             "failed": failed, "table": text}, indent=1) + "\n")
    print(f"results: {args.output}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
