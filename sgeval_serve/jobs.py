"""The evaluation queue's workers.

``workers`` threads of the server each take the oldest queued evaluation from the database and run
it in a child process (``python -m sgeval_serve.jobs <job.json>``): sgeval.evaluate on the
benchmark's hidden GT, its results.json and per-predicate figure written to the attempt's folder.
The thread kills the child at the job's timeout. A server that stops leaves its running evaluations
"running"; the next start puts them back in the queue (store.requeue_interrupted).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import sgeval

from . import boards, uploads

log = logging.getLogger("sgeval.serve")

EXIT_BAD_INPUT = 2  # the child's exit code when sgeval refused the input (problems.json written)
EXIT_ORPHAN = 3  # the child's exit code when the server died before it started evaluating
AUDIT_SHOWN = ("duplicate_instances", "duplicate_relations_after_merge")


def summary(results, benchmark):
    """What the leaderboard shows of one evaluation: the shown metrics per protocol, the audit per
    image and the image counts."""
    by_protocol = boards.sections(results)
    metrics = {protocol: {key: (by_protocol.get(protocol) or {}).get("metrics", {}).get(key)
                          for key in benchmark.protocol_metrics} for protocol in benchmark.protocols}
    if benchmark.pq_metrics:  # one value each, in the results' metrics whatever the protocol
        metrics[boards.PQ_GROUP] = {key: results.get("metrics", {}).get(key) for key in benchmark.pq_metrics}
    audit = (results.get("protocol_audit") or {}).get("per_image_mean") or {}
    return {"metrics": metrics, "audit": {key: audit.get(key) for key in AUDIT_SHOWN}, "images": results["images"]}


# What sgeval's messages on a prediction's masks say of the GT image's size, and what the submitter sees instead.
GT_SIZE_WORDS = [(re.compile(r"mask size \((\d+), (\d+)\) differs from the GT image size \(\d+, \d+\)"),
                  r"mask size (\1, \2) is not the image's size"),
                 (re.compile(r"the file holds more than \d+ bytes, more than its masks can need"),
                  "the file is larger than its masks can need")]


SGEVAL_COUNT = re.compile(r"\.\.\. and [0-9]+ more problems \(the first [0-9]+ are listed\)")


def failure_reason(problems, pred, shown_name):
    """An evaluation's problem lines as the submitter sees them. A line about the upload starts
    with its path (pred): that prefix becomes shown_name, and what sgeval says of the GT image's
    size is left out; nothing else in the line is replaced, so text of the upload comes back as it
    was sent. Lines about anything else (the GT, the server) become one line saying so."""
    prefix, lines, elsewhere = f"{pred}: ", [], False
    for line in problems:
        if SGEVAL_COUNT.fullmatch(line):  # sgeval's count of the lines it left out
            lines.append(line)
        elif line.startswith(prefix):
            rest = line[len(prefix):]
            for pattern, words in GT_SIZE_WORDS:
                rest = pattern.sub(words, rest)
            lines.append(f"{shown_name}: {rest}")
        elif not elsewhere:
            elsewhere = True
            lines.append("the evaluation failed on the server's side (its log has the details)")
    return "\n".join(lines)


def public_config(config, benchmark, shown_name):
    """The evaluation's config as the service stores and shows it: the hidden paths named, not given."""
    hidden = {"gt": f"<{benchmark.slug}: hidden ground truth>", "gt_seg": f"<{benchmark.slug}: hidden panoptic masks>",
              "train_gt": f"<{benchmark.slug}: training annotations>", "pred": shown_name}
    return {key: (hidden[key] if key in hidden and value is not None else value) for key, value in config.items()
            if key not in ("output", "per_image")}


class Dispatcher:
    """The worker threads; start() at the server's start, stop() at its end."""

    def __init__(self, store, settings, poll=1.0):
        self.store, self.settings, self.poll = store, settings, poll
        self.wake, self.stopping = threading.Event(), threading.Event()
        self.threads, self.children, self.lock = [], {}, threading.Lock()

    def start(self):
        requeued = self.store.requeue_interrupted()
        if requeued:
            log.info("requeued %d evaluation(s) interrupted by the last stop", requeued)
        for index in range(self.settings.workers):
            thread = threading.Thread(target=self._loop, name=f"sgeval-worker-{index}", daemon=True)
            thread.start()
            self.threads.append(thread)

    def stop(self):
        """Stop taking jobs; running children are killed and their evaluations requeued."""
        self.stopping.set()
        self.wake.set()
        with self.lock:
            for child in self.children.values():
                _kill(child)
        for thread in self.threads:
            thread.join(timeout=30)

    def notify(self):
        self.wake.set()

    def _loop(self):
        while not self.stopping.is_set():
            try:
                job = self.store.claim()
            except Exception:  # a locked or broken database: log, wait, retry
                log.exception("cannot take a job from the queue")
                job = None
            if job is None:
                self.wake.wait(self.poll)
                self.wake.clear()
                continue
            try:
                self.run(*job)
            except Exception:
                log.exception("evaluation %d failed in the server", job[0])
                self.store.finish(job[0], "failed", "internal error (the server's log has the details)")

    def run(self, evaluation_id, submission_id, attempt):
        submission = self.store.submission(submission_id)
        benchmark = self.settings.benchmarks.get(submission["benchmark"]) if submission else None
        if benchmark is None:
            self.store.finish(evaluation_id, "failed", "the submission or its benchmark no longer exists")
            return
        folder = self.store.evaluation_dir(evaluation_id, attempt)
        folder.mkdir(parents=True, exist_ok=True)
        pred = self.store.submission_file(submission_id, submission["file_kind"])
        config = benchmark.sgeval_config(pred)
        job = {"config": dataclasses.asdict(config),
               "plot_metric": benchmark.per_predicate_metric, "label": submission["method"],
               "server_pid": os.getpid()}
        (folder / "job.json").write_text(json.dumps(job))
        outcome, reason = self._child(evaluation_id, folder)
        if self.stopping.is_set() and outcome == "killed":
            self.store.requeue(evaluation_id)
            return
        if outcome == "done":
            results = json.loads((folder / "results.json").read_text())
            self.store.finish(evaluation_id, "done", sgeval_version=results["sgeval_version"],
                              config=public_config(results["config"], benchmark, submission["file_name"]),
                              sha256=submission["sha256"], summary=summary(results, benchmark),
                              results_dir=str(folder.relative_to(self.store.root)))
            log.info("evaluation %d of submission %d done", evaluation_id, submission_id)
            return
        if outcome == "bad_input":
            problems = json.loads((folder / "problems.json").read_text())
            reason = failure_reason(problems, pred, submission["file_name"])
            if any(not line.startswith(f"{pred}: ") for line in problems):
                log.error("evaluation %d of submission %d: %s", evaluation_id, submission_id, "\n".join(problems))
        self.store.finish(evaluation_id, "failed", reason)
        log.info("evaluation %d of submission %d failed: %s", evaluation_id, submission_id, reason.splitlines()[0])

    def _child(self, evaluation_id, folder):
        """Run the child; returns (outcome, reason): done, bad_input, killed or failed."""
        timeout = self.settings.job_timeout
        with open(folder / "log.txt", "wb") as log_file:
            child = subprocess.Popen([sys.executable, "-m", "sgeval_serve.jobs", str(folder / "job.json")],
                                     stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True, cwd=folder, env=_child_environment())
            with self.lock:
                self.children[evaluation_id] = child
                if self.stopping.is_set():  # stop() came after this evaluation was claimed: it did not see the child
                    _kill(child)
            try:
                code = child.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                _kill(child)
                return "failed", f"timed out: the evaluation took longer than {timeout:g} s"
            finally:
                with self.lock:
                    self.children.pop(evaluation_id, None)
        if code == 0 and (folder / "results.json").exists():
            return "done", ""
        if code == EXIT_BAD_INPUT and (folder / "problems.json").exists():
            return "bad_input", ""
        if code < 0 or self.stopping.is_set():
            return "killed", f"the evaluation process was stopped (signal {-code})"
        log.error("evaluation %d: the child exited with %d; see %s", evaluation_id, code, folder / "log.txt")
        return "failed", "internal error (the server's log has the details)"


def _child_environment():
    """The server's environment, with sgeval and this package importable from where they are."""
    paths = [str(Path(sgeval.__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
    existing = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": os.pathsep.join(dict.fromkeys(paths + ([existing] if existing else [])))}


def _kill(child):
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    child.wait()


def die_with_parent():
    """Linux: the child is killed when the server dies, so an interrupted job is never finished twice
    (run_job then checks that the server did not die before this call)."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _write_atomic(path, text):
    temporary = path.with_suffix(".tmp")
    temporary.write_text(text)
    os.replace(temporary, path)


def run_job(job_path):
    """The child: evaluate, write results.json (or problems.json) and the per-predicate figure."""
    die_with_parent()
    folder = Path(job_path).parent
    job = json.loads(Path(job_path).read_text())
    if job.get("server_pid") not in (None, os.getppid()):  # the server died while this process started
        print(f"the server (process {job['server_pid']}) is gone: not evaluating", file=sys.stderr)
        return EXIT_ORPHAN
    config = sgeval.make_config(job["config"])
    started = time.perf_counter()
    try:
        results = sgeval.evaluate(config)
    except sgeval.SGEvalError as error:
        _write_atomic(folder / "problems.json", json.dumps(uploads.capped(error.problems, config.pred)))
        return EXIT_BAD_INPUT
    results["evaluation_seconds"] = round(time.perf_counter() - started, 3)
    draw_per_predicate(results, job["plot_metric"], folder / "per_predicate")
    _write_atomic(folder / "results.json", json.dumps(results))
    return 0


def draw_per_predicate(results, key, stem):
    """The per-predicate figure: one bar per protocol for each predicate's value of key."""
    try:
        import sgeval_plots
        import sgeval_report
    except ImportError:  # matplotlib missing: the page shows the table only
        return
    runs = [sgeval_report.Run(protocol, "", {**results, "per_predicate": section.get("per_predicate") or {}})
            for protocol, section in boards.sections(results).items()]
    sgeval_plots.per_predicate_recall(runs, sgeval_report.predicate_order(results), stem, ("png",), key=key)


if __name__ == "__main__":
    sys.exit(run_job(sys.argv[1]))
