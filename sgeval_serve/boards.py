"""The data behind every page: leaderboards, a submission's drill-down, the index, a user's
submissions and the admin's view. Plain dicts, rendered as HTML by the templates and returned as
they are by the JSON API; nothing here knows about HTTP. Who may see what is decided here too."""

from __future__ import annotations

import functools
import json
import math

import sgeval

BOARDS = ("public", "approved")
LOWER_IS_BETTER = ("PRank",)
PQ_GROUP = "panoptic_quality"  # the column group of the PQ keys, shown once beside the protocols


class NotVisible(LookupError):
    """No such thing, or not for this user (the two look the same from outside)."""


def can_see(row, user):
    """Admins see everything; owners their own; others public, not hidden, evaluated entries."""
    if user and (user["admin"] or user["id"] == row["user_id"]):
        return True
    return bool(row["public"] and not row["hidden"] and row["done_id"])


def _summary(row):
    return json.loads(row["summary"]) if row.get("summary") else None


def entry(row, user=None):
    """One submission as lists and pages show it."""
    summary = _summary(row)
    item = {key: row[key] for key in ("id", "benchmark", "method", "paper_url", "code_url", "submitter", "created",
                                      "status", "reason", "file_name", "size", "sha256", "images_predicted",
                                      "images_missing", "images_extra", "sgeval_version", "evaluated")}
    item.update(public=bool(row["public"]), approved=bool(row["approved"]), hidden=bool(row["hidden"]),
                metrics=summary["metrics"] if summary else None, audit=summary["audit"] if summary else None,
                images=summary["images"] if summary else None,
                own=bool(user and user["id"] == row["user_id"]))
    if not (user and (user["admin"] or item["own"])):
        item["reason"] = ""  # a failure's messages are for the submitter
    return item


def sections(results):
    """Each protocol's part of a results file (sgeval writes by_protocol only for two or more)."""
    return results.get("by_protocol") or {results["config"]["protocol"]: results}


def columns(benchmark):
    """The sortable columns, headline protocol first, then panoptic quality (PQ_GROUP) when shown:
    {key, protocol, metric}."""
    groups = [(protocol, benchmark.protocol_metrics) for protocol in benchmark.protocols]
    return [{"key": f"{group}:{metric}", "protocol": group, "metric": metric}
            for group, metrics in [*groups, (PQ_GROUP, benchmark.pq_metrics)] for metric in metrics]


def default_sort(benchmark):
    """The column the boards sort by unless asked: order_by, under the headline protocol (a PQ key:
    in the panoptic quality group)."""
    group = PQ_GROUP if benchmark.order_by in benchmark.pq_metrics else benchmark.headline
    return f"{group}:{benchmark.order_by}"


def _sort_value(item, protocol, metric):
    value = ((item["metrics"] or {}).get(protocol) or {}).get(metric)
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else value


def sort_entries(items, benchmark, sort=None, order=None):
    """Sort by one column (default: default_sort, the benchmark's order_by); missing values last,
    ties by submission date. Returns (items, sort, order)."""
    keys = {column["key"]: (column["protocol"], column["metric"]) for column in columns(benchmark)}
    sort = sort if sort in keys else default_sort(benchmark)
    protocol, metric = keys[sort]
    if order not in ("asc", "desc"):
        order = "asc" if metric in LOWER_IS_BETTER else "desc"
    present = [item for item in items if _sort_value(item, protocol, metric) is not None]
    absent = [item for item in items if _sort_value(item, protocol, metric) is None]
    present.sort(key=lambda item: item["created"])
    present.sort(key=lambda item: _sort_value(item, protocol, metric), reverse=order == "desc")
    return present + absent, sort, order


def benchmark_info(benchmark):
    return {"slug": benchmark.slug, "title": benchmark.title, "dataset": benchmark.dataset, "split": benchmark.split,
            "task": benchmark.task, "description": benchmark.description, "headline": benchmark.headline,
            "protocols": list(benchmark.protocols), "metrics": list(benchmark.metrics),
            "protocol_metrics": list(benchmark.protocol_metrics), "pq_metrics": list(benchmark.pq_metrics),
            "order_by": benchmark.order_by,
            "quota": {"per_day": benchmark.quota_per_day, "total": benchmark.quota_total},
            "missing_images": benchmark.missing_images, "mode": "mask" if benchmark.gt_seg else "box"}


def index(store, settings):
    counts = {row["benchmark"]: row["n"] for row in store.all(  # the entries the public boards show
        "SELECT benchmark, COUNT(*) AS n FROM submissions WHERE public = 1 AND hidden = 0 AND EXISTS (SELECT 1 FROM "
        "evaluations WHERE submission_id = submissions.id AND status = 'done') GROUP BY benchmark")}
    return {"title": settings.title, "sgeval_version": sgeval.__version__, "signup": settings.signup,
            "benchmarks": [benchmark_info(b) | {"public_submissions": counts.get(slug, 0)}
                           for slug, b in settings.benchmarks.items()]}


def leaderboard(store, benchmark, board, user, sort=None, order=None):
    """A benchmark's board: public (every public evaluated entry) or approved (those an admin
    approved). Owners also see their private entries, admins every private one, marked."""
    if board not in BOARDS:
        raise NotVisible(board)
    rows = store.submissions("submissions.benchmark = ? AND done.id IS NOT NULL AND submissions.hidden = 0",
                             benchmark.slug)
    rows = [row for row in rows if (row["public"] or can_see(row, user)) and (board == "public" or row["approved"])]
    items, sort, order = sort_entries([entry(row, user) for row in rows], benchmark, sort, order)
    for rank, item in enumerate(items, 1):
        item["rank"] = rank
    return {"benchmark": benchmark_info(benchmark), "board": board, "sort": sort, "order": order,
            "columns": columns(benchmark), "entries": items, "sgeval_version": sgeval.__version__}


@functools.lru_cache(maxsize=64)
def _results(path):
    with open(path, encoding="utf-8") as file:
        return json.load(file)


def per_predicate(results, benchmark):
    """Rows of (predicate, GT count, value of per_predicate_metric per protocol), by GT count."""
    key = benchmark.per_predicate_metric
    by_protocol = sections(results)
    counts = results.get("gt_relations_per_predicate") or {}
    tables = {p: ((by_protocol.get(p) or {}).get("per_predicate") or {}).get(key) or {} for p in benchmark.protocols}
    names = sorted(counts, key=lambda name: (-counts[name], name))
    return {"metric": key, "protocols": list(benchmark.protocols),
            "rows": [{"predicate": name, "gt_relations": counts[name],
                      "values": {p: tables[p].get(name) for p in benchmark.protocols}} for name in names]}


def submission(store, settings, submission_id, user):
    """A submission's page: its entry, evaluations, metrics, audit and per-predicate table."""
    row = store.submission(submission_id)
    if row is None or not can_see(row, user):
        raise NotVisible(submission_id)
    benchmark = settings.benchmarks.get(row["benchmark"])
    if benchmark is None:
        raise NotVisible(submission_id)
    data = {"entry": entry(row, user), "benchmark": benchmark_info(benchmark),
            "columns": columns(benchmark),
            "config": json.loads(row["config"]) if row["config"] else None, "per_predicate": None,
            "plot": False, "evaluation_seconds": None}
    if user and (user["admin"] or user["id"] == row["user_id"]):
        data["evaluations"] = store.evaluations_of(submission_id)
    if row["results_dir"]:
        folder = store.root / row["results_dir"]
        results = _results(str(folder / "results.json"))
        data["per_predicate"] = per_predicate(results, benchmark)
        data["plot"] = (folder / "per_predicate.png").is_file()
        data["evaluation_seconds"] = results.get("evaluation_seconds")
    return data


def plot_path(store, submission_id, user):
    row = store.submission(submission_id)
    if row is None or not can_see(row, user) or not row["results_dir"]:
        raise NotVisible(submission_id)
    path = store.root / row["results_dir"] / "per_predicate.png"
    if not path.is_file():
        raise NotVisible(submission_id)
    return path


def mine(store, settings, user):
    return {"user": {"name": user["name"], "admin": bool(user["admin"]), "created": user["created"]},
            "submissions": [entry(row, user) for row in store.submissions("submissions.user_id = ?", user["id"])],
            "quota": {slug: dict(zip(("today", "total"), store.quota_used(user["id"], slug)),
                                 per_day=b.quota_per_day, limit=b.quota_total)
                      for slug, b in settings.benchmarks.items()}}


def admin(store, settings):
    rows = store.submissions()
    outdated = [row["id"] for row in rows if row["sgeval_version"] and row["sgeval_version"] != sgeval.__version__]
    return {"users": store.users(), "submissions": [entry(row, {"admin": 1, "id": None}) for row in rows],
            "queue": store.queue_counts(), "outdated": outdated, "sgeval_version": sgeval.__version__}
