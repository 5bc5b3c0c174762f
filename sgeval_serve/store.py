"""The service's state: one SQLite database and the files under the state folder.

    state_dir/sgeval-serve.sqlite3     users, sessions, submissions, evaluations
    state_dir/secret                   the key of the forms' CSRF tokens
    state_dir/incoming/<random>.part   uploads being received or checked (emptied at each start)
    state_dir/submissions/<id>/        the accepted file (prediction.zip or prediction.json)
    state_dir/evaluations/<id>/<attempt>/  an evaluation's results.json and figure

File names come from ids and random strings, never from what a client sends; an id is never
given again (AUTOINCREMENT), so a deleted submission's folders and URL never name another. Every
write is one transaction, so a killed server leaves the database as it was before or after it.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import os
import re
import secrets
import shutil
import sqlite3
import time
import unicodedata
from pathlib import Path

SCHEMA = """
CREATE TABLE IF NOT EXISTS users (
    id INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL, token_hash TEXT UNIQUE NOT NULL,
    admin INTEGER NOT NULL DEFAULT 0, revoked INTEGER NOT NULL DEFAULT 0, created TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sessions (
    key_hash TEXT PRIMARY KEY, user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    created TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS submissions (
    id INTEGER PRIMARY KEY AUTOINCREMENT, benchmark TEXT NOT NULL, user_id INTEGER NOT NULL REFERENCES users(id),
    method TEXT NOT NULL, paper_url TEXT NOT NULL, code_url TEXT NOT NULL, public INTEGER NOT NULL,
    approved INTEGER NOT NULL DEFAULT 0, hidden INTEGER NOT NULL DEFAULT 0, created TEXT NOT NULL,
    file_name TEXT NOT NULL, file_kind TEXT NOT NULL, size INTEGER NOT NULL, sha256 TEXT NOT NULL,
    images_predicted INTEGER NOT NULL, images_missing INTEGER NOT NULL, images_extra INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS submissions_by_user ON submissions (user_id, benchmark, created);
CREATE TABLE IF NOT EXISTS evaluations (
    id INTEGER PRIMARY KEY AUTOINCREMENT, submission_id INTEGER NOT NULL REFERENCES submissions(id) ON DELETE CASCADE,
    status TEXT NOT NULL, reason TEXT NOT NULL DEFAULT '', queued TEXT NOT NULL, started TEXT,
    finished TEXT, attempts INTEGER NOT NULL DEFAULT 0, sgeval_version TEXT, config TEXT, sha256 TEXT,
    summary TEXT, results_dir TEXT);
CREATE INDEX IF NOT EXISTS evaluations_by_status ON evaluations (status, id);
CREATE INDEX IF NOT EXISTS evaluations_by_submission ON evaluations (submission_id, id);
"""
STATUSES = ("queued", "running", "done", "failed")
MAX_ATTEMPTS = 3  # an evaluation interrupted this often (a server that dies during it) fails


# Cyrillic and Greek letters drawn like Latin ones (lower case: name_key case-folds first).
LOOK_ALIKES = str.maketrans("авекмнорстухіјѕԁԛԝαβεζηικμνορτυχ", "abekmhopctyxijsdqwabezhikmnoptyx")
SEPARATORS = re.compile(r"[\s._-]+")


def name_key(name):
    """What two names that look alike have in common: NFKC (full-width and other compatibility
    forms), case-folded, look-alike letters made Latin, spaces, '.', '_' and '-' left out."""
    return SEPARATORS.sub("", unicodedata.normalize("NFKC", name).casefold().translate(LOOK_ALIKES))


def now():
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def ago(days):
    """The time days before now, as now() writes times (they compare as text)."""
    moment = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(days=days)
    return moment.isoformat(timespec="seconds")


def token_hash(token):
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def new_token():
    return "sgv_" + secrets.token_urlsafe(32)


class StateError(Exception):
    """The state folder or its database cannot be used (one line for the admin)."""


class QuotaExceeded(Exception):
    pass


class Duplicate(Exception):
    def __init__(self, submission_id):
        super().__init__(submission_id)
        self.submission_id = submission_id


class Store:
    """The database and the state folder. Safe to use from several threads: every call opens its
    own connection."""

    def __init__(self, state_dir):
        """Opens (makes) the state folder and its database; StateError when either cannot be
        written."""
        self.root = Path(state_dir)
        self.path = self.root / "sgeval-serve.sqlite3"
        try:
            for sub in ("incoming", "submissions", "evaluations"):
                (self.root / sub).mkdir(parents=True, exist_ok=True)
            with self.connect() as db:
                db.execute("PRAGMA journal_mode=WAL")
                db.executescript(SCHEMA)
                db.execute("BEGIN IMMEDIATE")  # a write lock: fails on a database that cannot be written
                db.execute("COMMIT")
            self.secret = self._secret()
            probe = self.root / "incoming" / f".probe-{secrets.token_hex(8)}"
            probe.write_bytes(b"")
            probe.unlink()
        except (OSError, sqlite3.Error, ValueError) as error:
            raise StateError(f"{self.root}: the state folder cannot be used ({type(error).__name__}: {error})") from None

    def _secret(self):
        path = self.root / "secret"
        if not path.exists():
            with contextlib.suppress(FileExistsError), open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600),
                                                             "w") as file:
                file.write(secrets.token_hex(32))
        return bytes.fromhex(path.read_text().strip())

    def clear_incoming(self):
        """At the server's start: remove what uploads left in incoming/ (a server killed while it
        received or checked them). A file of the CLI's submit younger than an hour may be in use:
        it stays. Returns how many were removed."""
        removed = 0
        for path in (self.root / "incoming").iterdir():
            if path.name.startswith("cli-") and time.time() - path.stat().st_mtime < 3600:
                continue
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
            removed += 1
        return removed

    @contextlib.contextmanager
    def connect(self):
        db = sqlite3.connect(self.path, timeout=60, isolation_level=None)
        db.row_factory = sqlite3.Row
        db.execute("PRAGMA foreign_keys=ON")
        db.execute("PRAGMA busy_timeout=60000")
        try:
            yield db
        finally:
            db.close()

    @contextlib.contextmanager
    def transaction(self):
        with self.connect() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    def one(self, sql, *args):
        with self.connect() as db:
            row = db.execute(sql, args).fetchone()
        return None if row is None else dict(row)

    def all(self, sql, *args):
        with self.connect() as db:
            return [dict(row) for row in db.execute(sql, args)]

    def all_rows(self, sql, *args):
        with self.connect() as db:
            return [tuple(row) for row in db.execute(sql, args)]

    # users and sessions -------------------------------------------------------------------

    def add_user(self, name, admin=False):
        """A new user and their token (shown once; only its hash is kept). Raises ValueError if
        the name is taken."""
        token = new_token()
        try:
            with self.transaction() as db:
                for (other,) in db.execute("SELECT name FROM users"):
                    if other != name and name_key(other) == name_key(name):
                        raise ValueError(f"'{name}' looks like the name '{other}' of another user (names are "
                                         "compared ignoring case, spaces, '-', '_' and '.')")
                db.execute("INSERT INTO users (name, token_hash, admin, created) VALUES (?, ?, ?, ?)",
                           (name, token_hash(token), int(admin), now()))
        except sqlite3.IntegrityError:
            raise ValueError(f"the name '{name}' is taken") from None
        return token

    def new_token_for(self, name):
        """Replace a user's token (the old one stops working); None if there is no such user."""
        token = new_token()
        with self.transaction() as db:
            changed = db.execute("UPDATE users SET token_hash = ?, revoked = 0 WHERE name = ?",
                                 (token_hash(token), name)).rowcount
            db.execute("DELETE FROM sessions WHERE user_id = (SELECT id FROM users WHERE name = ?)", (name,))
        return token if changed else None

    def revoke(self, user_id):
        with self.transaction() as db:
            db.execute("UPDATE users SET revoked = 1 WHERE id = ?", (user_id,))
            db.execute("DELETE FROM sessions WHERE user_id = ?", (user_id,))

    def user_by_token(self, token):
        return self.one("SELECT * FROM users WHERE token_hash = ? AND revoked = 0", token_hash(token))

    def user_by_name(self, name):
        return self.one("SELECT * FROM users WHERE name = ?", name)

    def users(self):
        return self.all("SELECT id, name, admin, revoked, created FROM users ORDER BY id")

    def new_session(self, user_id, days):
        """A new session's key; the sessions older than days end."""
        key = secrets.token_urlsafe(32)
        with self.transaction() as db:
            db.execute("DELETE FROM sessions WHERE created < ?", (ago(days),))
            db.execute("INSERT INTO sessions (key_hash, user_id, created) VALUES (?, ?, ?)",
                       (token_hash(key), user_id, now()))
        return key

    def user_by_session(self, key, days):
        """The user of a session younger than days (and not revoked), or None."""
        return self.one("SELECT users.* FROM sessions JOIN users ON users.id = sessions.user_id "
                        "WHERE sessions.key_hash = ? AND sessions.created >= ? AND users.revoked = 0",
                        token_hash(key), ago(days))

    def end_session(self, key):
        with self.transaction() as db:
            db.execute("DELETE FROM sessions WHERE key_hash = ?", (token_hash(key),))

    # submissions ----------------------------------------------------------------------------

    def quota_used(self, user_id, benchmark, db=None):
        """(submissions today (UTC), submissions in total) of a user on a benchmark (its slug)."""
        if db is None:
            with self.connect() as db:
                return self.quota_used(user_id, benchmark, db)
        today = now()[:10]
        row = db.execute("SELECT COUNT(*), COALESCE(SUM(substr(created, 1, 10) = ?), 0) FROM submissions "
                         "WHERE user_id = ? AND benchmark = ?", (today, user_id, benchmark)).fetchone()
        return row[1], row[0]

    def check_quota(self, user_id, benchmark, db=None):
        """Raises QuotaExceeded when the user has no submission left on the benchmark."""
        day, total = self.quota_used(user_id, benchmark.slug, db)
        if day >= benchmark.quota_per_day or total >= benchmark.quota_total:
            raise QuotaExceeded(f"quota reached: {day} of {benchmark.quota_per_day} submissions today (UTC), "
                                f"{total} of {benchmark.quota_total} in total on {benchmark.slug}")

    def add_submission(self, fields, upload_path, benchmark, quota=True):
        """Queue a validated upload: checks the quota (unless quota is False: an admin's command)
        and duplicates and moves the file in, in one transaction. Returns the submission id;
        raises QuotaExceeded or Duplicate."""
        with self.transaction() as db:
            if quota:
                self.check_quota(fields["user_id"], benchmark, db)
            same = db.execute("SELECT id FROM submissions WHERE user_id = ? AND benchmark = ? AND sha256 = ?",
                              (fields["user_id"], benchmark.slug, fields["sha256"])).fetchone()
            if same:
                raise Duplicate(same[0])
            columns = ", ".join(fields)
            cursor = db.execute(f"INSERT INTO submissions (benchmark, created, {columns}) VALUES (?, ?, "
                                f"{', '.join('?' * len(fields))})", (benchmark.slug, now(), *fields.values()))
            submission_id = cursor.lastrowid
            target = self.submission_file(submission_id, fields["file_kind"])
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(upload_path, target)
            db.execute("INSERT INTO evaluations (submission_id, status, queued) VALUES (?, 'queued', ?)",
                       (submission_id, now()))
        return submission_id

    def submitted(self, user_id, benchmark, sha256):
        """The id of the user's submission of a file with this SHA-256 on the benchmark (its slug), or None."""
        row = self.one("SELECT id FROM submissions WHERE user_id = ? AND benchmark = ? AND sha256 = ?", user_id,
                       benchmark, sha256)
        return None if row is None else row["id"]

    def look_alike_method(self, user_id, benchmark, method):
        """A method name of another submitter on the benchmark (its slug) that looks like method
        (store.name_key), or None."""
        key = name_key(method)
        for (other,) in self.all_rows("SELECT DISTINCT method FROM submissions WHERE benchmark = ? AND user_id != ?",
                                      benchmark, user_id):
            if name_key(other) == key:
                return other
        return None

    def submission_file(self, submission_id, kind):
        return self.root / "submissions" / str(int(submission_id)) / f"prediction.{kind}"

    def submission(self, submission_id):
        """A submission with its latest evaluation's fields (evaluation_id, status, ...) and the
        submitter's name."""
        return self.one(SUBMISSION_SELECT + " WHERE submissions.id = ?", submission_id)

    def submissions(self, where="1", *args):
        return self.all(SUBMISSION_SELECT + f" WHERE {where} ORDER BY submissions.id DESC", *args)

    def set_flag(self, submission_id, flag, value):
        if flag not in ("approved", "hidden", "public"):
            raise ValueError(flag)
        with self.transaction() as db:
            return db.execute(f"UPDATE submissions SET {flag} = ? WHERE id = ?", (int(value), submission_id)).rowcount

    def delete_submission(self, submission_id):
        with self.transaction() as db:
            evaluations = [row[0] for row in db.execute("SELECT id FROM evaluations WHERE submission_id = ?",
                                                        (submission_id,))]
            deleted = db.execute("DELETE FROM submissions WHERE id = ?", (submission_id,)).rowcount
        for folder in [self.root / "submissions" / str(int(submission_id))] + [self.evaluation_dir(e) for e in evaluations]:
            shutil.rmtree(folder, ignore_errors=True)
        return deleted

    def evaluation_dir(self, evaluation_id, attempt=None):
        folder = self.root / "evaluations" / str(int(evaluation_id))
        return folder if attempt is None else folder / f"attempt-{int(attempt)}"

    def reevaluate(self, submission_id):
        """Queue a new evaluation of a submission (the admin's action); its previous results stay
        on the board until the new one is done."""
        with self.transaction() as db:
            if not db.execute("SELECT 1 FROM submissions WHERE id = ?", (submission_id,)).fetchone():
                return None
            busy = db.execute("SELECT id FROM evaluations WHERE submission_id = ? AND status IN ('queued', 'running')",
                              (submission_id,)).fetchone()
            if busy:
                return busy[0]
            return db.execute("INSERT INTO evaluations (submission_id, status, queued) VALUES (?, 'queued', ?)",
                              (submission_id, now())).lastrowid

    # the queue -----------------------------------------------------------------------------

    def requeue_interrupted(self):
        """At start: evaluations left running by a server that stopped go back to the queue (or fail
        after MAX_ATTEMPTS). Returns how many were requeued."""
        with self.transaction() as db:
            db.execute("UPDATE evaluations SET status = 'failed', finished = ?, reason = ? "
                       "WHERE status = 'running' AND attempts >= ?",
                       (now(), f"interrupted {MAX_ATTEMPTS} times (the server stopped during the evaluation)",
                        MAX_ATTEMPTS))
            return db.execute("UPDATE evaluations SET status = 'queued' WHERE status = 'running'").rowcount

    def claim(self):
        """Take the oldest queued evaluation: (evaluation id, submission id, attempt) or None."""
        with self.transaction() as db:
            row = db.execute("UPDATE evaluations SET status = 'running', started = ?, attempts = attempts + 1 "
                             "WHERE id = (SELECT id FROM evaluations WHERE status = 'queued' ORDER BY id LIMIT 1) "
                             "RETURNING id, submission_id, attempts", (now(),)).fetchone()
        return None if row is None else tuple(row)

    def finish(self, evaluation_id, status, reason="", **fields):
        """Record an evaluation's end: done with version, config, sha256, summary, results_dir; or
        failed with the reason. A no-op when it is no longer running (requeued or deleted)."""
        fields = {key: json.dumps(value) if isinstance(value, dict) else value for key, value in fields.items()}
        sets = "".join(f", {key} = ?" for key in fields)
        with self.transaction() as db:
            return db.execute(f"UPDATE evaluations SET status = ?, reason = ?, finished = ?{sets} "
                              "WHERE id = ? AND status = 'running'",
                              (status, reason, now(), *fields.values(), evaluation_id)).rowcount

    def requeue(self, evaluation_id):
        with self.transaction() as db:
            db.execute("UPDATE evaluations SET status = 'queued' WHERE id = ? AND status = 'running'",
                       (evaluation_id,))

    def queue_counts(self):
        rows = self.all("SELECT status, COUNT(*) AS n FROM evaluations GROUP BY status")
        return {status: 0 for status in STATUSES} | {row["status"]: row["n"] for row in rows}

    def results_of(self, submission_id):
        """The latest finished (done) evaluation of a submission, or None."""
        return self.one("SELECT * FROM evaluations WHERE submission_id = ? AND status = 'done' "
                        "ORDER BY id DESC LIMIT 1", submission_id)

    def evaluations_of(self, submission_id):
        return self.all("SELECT id, status, reason, queued, started, finished, attempts, sgeval_version, sha256 "
                        "FROM evaluations WHERE submission_id = ? ORDER BY id", submission_id)


# A submission row with its latest evaluation and its best (latest done) results.
SUBMISSION_SELECT = """
SELECT submissions.*, users.name AS submitter,
       latest.id AS evaluation_id, latest.status, latest.reason, latest.queued, latest.started, latest.finished,
       latest.attempts,
       done.id AS done_id, done.summary, done.sgeval_version, done.config, done.results_dir, done.finished AS evaluated
FROM submissions
JOIN users ON users.id = submissions.user_id
JOIN evaluations AS latest ON latest.id = (SELECT MAX(id) FROM evaluations WHERE submission_id = submissions.id)
LEFT JOIN evaluations AS done ON done.id = (SELECT MAX(id) FROM evaluations
                                            WHERE submission_id = submissions.id AND status = 'done')
"""

