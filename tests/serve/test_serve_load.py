"""The benchmark service (sgeval_serve) as a real server on loopback, with bench/serve_load.py's
helpers: 20 concurrent uploads among 200 leaderboard reads (nothing lost, every evaluation done; the
latencies printed with pytest -s, and written as JSON to the file SGEVAL_LOAD_REPORT names); a server
killed (SIGKILL) or stopped (SIGINT, SIGTERM) in the middle of an evaluation, its evaluation process
gone with it, finishes the evaluation after its next start; an evaluation longer than job_timeout
fails and the next one in the queue runs; a stop that comes between a worker's claim and its
evaluation process kills that process (jobs.Dispatcher in this process).

The slow evaluations are valid predictions that take long by their size (serve_load.slow_prediction:
many overlapping masks per image). About a minute on 2 cores."""

import json
import os
import signal
import time

import pytest

from bench import serve_load
from bench.serve_load import SLUG, Server, call, evaluation_processes, until, upload
from sgeval_serve import jobs
from sgeval_serve.settings import load_settings
from sgeval_serve.store import Store

RESTART_MASKS = 800  # masks per image of the evaluation a restart interrupts: about 3.5 s on one core
TIMEOUT_MASKS = 2500  # about 17 s: far beyond JOB_TIMEOUT
JOB_TIMEOUT = 10  # s; the demo's evaluation takes 1.5 s (the child's start, imports and figure), more when loaded
UPLOADS, READS = 8, 100  # make bench-serve runs 50 and 1,000


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return serve_load.demo_data(tmp_path_factory.mktemp("demo"))


def test_concurrent_uploads_and_reads_lose_nothing(demo, tmp_path):
    load, figures, problems = serve_load.measure(demo, tmp_path, uploads=UPLOADS, reads=READS, threads=32,
                                                 workers=2, drain_timeout=120)
    print(f"\nserve load, {UPLOADS} uploads and {READS} reads from 32 threads, 2 workers: {json.dumps(figures)}")
    if os.environ.get("SGEVAL_LOAD_REPORT"):
        with open(os.environ["SGEVAL_LOAD_REPORT"], "w") as report:
            json.dump(figures, report, indent=1)
    assert problems == []
    assert len(load["uploads"]) == UPLOADS and len(load["reads"]) == READS


def service(demo, folder, **settings):
    """A config and state folder of its own, with the owner's and an admin's tokens (CLI)."""
    config = serve_load.write_config(folder / "serve.yaml", demo, folder / "state", **settings)
    return config, serve_load.cli(config, "token", "owner"), serve_load.cli(config, "token", "admin", "--admin")


def submission(server, token, submission_id):
    reply = call(server.url, "GET", f"/api/submissions/{submission_id}", token)
    assert reply.status == 200, reply.body
    return reply.json()


def wait_status(server, token, submission_id, wanted, timeout):
    until(lambda: submission(server, token, submission_id)["entry"]["status"] in wanted, timeout,
          f"submission {submission_id} to be {' or '.join(wanted)}")
    return submission(server, token, submission_id)


def submit(server, token, path, method):
    reply = upload(server.url, token, path, method)
    assert reply.status == 201, reply.body
    return reply.json()["id"]


def interrupt(server, owner, submission_id, state, stop, seconds_in=0.0):
    """When the submission's evaluation runs in its process (and seconds_in later), stop(server);
    then that process must end too."""
    wait_status(server, owner, submission_id, ("running",), 60)
    until(lambda: evaluation_processes(state), 30, "the evaluation process")
    children = set(evaluation_processes(state))
    time.sleep(seconds_in)
    stop(server)
    until(lambda: not children & set(evaluation_processes(state)), 15,
          f"the evaluation process(es) {sorted(children)} to end with the server")


def evaluations(state, submission_id):
    """(status, attempts) of a submission's evaluations, from the database of a stopped server."""
    return [(row["status"], row["attempts"]) for row in Store(state).evaluations_of(submission_id)]


def assert_done_once(server, owner, admin, submission_id, attempts):
    """The submission's one evaluation is done after attempts attempts; nothing else queued; the
    board shows it once."""
    data = wait_status(server, owner, submission_id, ("done", "failed"), 90)
    assert [(e["status"], e["attempts"]) for e in data["evaluations"]] == [("done", attempts)], data["evaluations"]
    view = call(server.url, "GET", "/api/admin", admin).json()
    assert [row["id"] for row in view["submissions"]] == [submission_id]
    assert view["queue"] == {"queued": 0, "running": 0, "done": 1, "failed": 0}
    board = call(server.url, "GET", f"/api/b/{SLUG}").json()
    assert [entry["id"] for entry in board["entries"]] == [submission_id]


def test_a_killed_server_finishes_the_interrupted_evaluation_after_its_restart(demo, tmp_path):
    """SIGKILL to the server's process group as soon as the evaluation's process exists (it has
    a session of its own: it must die with the server, not finish the evaluation unseen)."""
    config, owner, admin = service(demo, tmp_path, workers=1)
    slow = serve_load.slow_prediction(demo / "psg.json", tmp_path / "slow.zip", RESTART_MASKS)
    state, log = tmp_path / "state", tmp_path / "server.log"
    with Server(config, log) as server:
        submission_id = submit(server, owner, slow, "Slow")
        interrupt(server, owner, submission_id, state, Server.kill)
    assert evaluations(state, submission_id) == [("running", 1)]  # the next start requeues it
    first = Store(state).evaluation_dir(Store(state).evaluations_of(submission_id)[0]["id"], 1)
    assert (first / "job.json").exists() and not (first / "results.json").exists()
    with Server(config, log) as server:
        assert_done_once(server, owner, admin, submission_id, attempts=2)
        assert not (first / "results.json").exists()  # no process of the first server finished it


def test_a_stopped_server_requeues_the_running_evaluation(demo, tmp_path):
    """SIGINT, then SIGTERM, in the middle of the evaluation: each stop kills the evaluation's
    process and puts it back in the queue (an attempt each); the third start finishes it."""
    config, owner, admin = service(demo, tmp_path, workers=1)
    slow = serve_load.slow_prediction(demo / "psg.json", tmp_path / "slow.zip", RESTART_MASKS)
    state, log = tmp_path / "state", tmp_path / "server.log"
    with Server(config, log) as server:
        submission_id = submit(server, owner, slow, "Slow")
        interrupt(server, owner, submission_id, state, lambda s: s.stop(signal.SIGINT, timeout=30), seconds_in=1.0)
    assert evaluations(state, submission_id) == [("queued", 1)]
    with Server(config, log) as server:
        interrupt(server, owner, submission_id, state, lambda s: s.stop(signal.SIGTERM, timeout=30), seconds_in=1.0)
    assert evaluations(state, submission_id) == [("queued", 2)]
    assert log.read_text().count("Application shutdown complete") == 2
    with Server(config, log) as server:
        assert_done_once(server, owner, admin, submission_id, attempts=3)


def test_an_evaluation_over_the_time_limit_fails_and_the_next_one_runs(demo, tmp_path):
    """job_timeout 10 s, not 1: an evaluation's process takes about 1.5 s to start, import and
    draw its figure (several times that on a loaded machine), so with less the demo's evaluation
    behind the slow one could time out too."""
    config, owner, admin = service(demo, tmp_path, workers=1, job_timeout=JOB_TIMEOUT)
    slow = serve_load.slow_prediction(demo / "psg.json", tmp_path / "slow.zip", TIMEOUT_MASKS)
    state = tmp_path / "state"
    with Server(config, tmp_path / "server.log") as server:
        slow_id = submit(server, owner, slow, "Slow")
        fast_id = submit(server, owner, demo / "pred.zip", "Model A")
        timed_out = wait_status(server, owner, slow_id, ("done", "failed"), JOB_TIMEOUT + 60)
        assert timed_out["entry"]["status"] == "failed"
        assert timed_out["entry"]["reason"] == f"timed out: the evaluation took longer than {JOB_TIMEOUT} s"
        assert wait_status(server, owner, fast_id, ("done", "failed"), 60)["entry"]["status"] == "done"
        assert evaluation_processes(state) == []
        board = call(server.url, "GET", f"/api/b/{SLUG}").json()
        assert [entry["id"] for entry in board["entries"]] == [fast_id]


def test_a_stop_between_a_claim_and_its_process_kills_the_process(demo, tmp_path):
    """Dispatcher.stop() kills the evaluation processes it knows of; a worker that claimed an
    evaluation before the stop starts its process after it: that process is killed at once and
    the evaluation requeued (it ran to its end while the stop waited for the thread)."""
    config = serve_load.write_config(tmp_path / "serve.yaml", demo, tmp_path / "state", workers=1)
    serve_load.cli(config, "submit", demo / "pred.zip", "--benchmark", SLUG, "--user", "owner", "--method", "Model A")
    store = Store(tmp_path / "state")
    dispatcher = jobs.Dispatcher(store, load_settings(config))
    evaluation_id, submission_id, attempt = store.claim()
    dispatcher.stopping.set()  # what stop() does first; it finds no process to kill
    dispatcher.run(evaluation_id, submission_id, attempt)
    assert evaluations(tmp_path / "state", submission_id) == [("queued", 1)]
    assert not (store.evaluation_dir(evaluation_id, attempt) / "results.json").exists()

