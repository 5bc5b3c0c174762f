"""The service's YAML configuration: the server's settings and its benchmarks.

A benchmark is one (dataset, split, task) with hidden ground truth. Its leaderboard columns are
``protocols`` (the first is the headline) × ``metrics`` (result keys such as ``R@50``,
``mR@50``, ``PRank``), and the panoptic quality keys (``PQ``, ``SQ_th``, ...) once beside them:
they do not depend on the protocol, and they turn on the evaluation's ``pq`` (mask mode only).
``evaluation`` holds further sgeval config keys (``k``, ``iou_threshold``, ``pq_merge``, ...).
Paths in the file are relative to the file's folder.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from pathlib import Path

import yaml

import sgeval

SERVER_KEYS = ("title", "state_dir", "host", "port", "workers", "job_timeout", "max_upload_mb", "signup",
               "body_timeout", "validation_timeout", "validation_memory_mb", "max_records_factor", "refused_per_hour",
               "forwarded_allow_ips", "header_timeout", "max_connections", "session_days", "benchmarks")
BENCHMARK_KEYS = ("title", "dataset", "split", "task", "gt", "gt_seg", "train_gt", "description", "protocols",
                  "metrics", "order_by", "per_predicate_metric", "quota", "missing_images", "evaluation")
# keys the service sets itself for every evaluation
RESERVED_EVALUATION_KEYS = ("gt", "gt_seg", "train_gt", "pred", "protocol", "protocols", "task", "output",
                            "per_image", "workers", "model", "per_predicate")
SLUG = re.compile(r"[a-z0-9][a-z0-9-]{0,39}")
METRIC_KEY = re.compile(r"([A-Za-z]+)@([0-9]+|x[0-9.eE+-]+|inf)|InstR|PRank|"
                        + "|".join((*sgeval.OI_SCALARS, *sgeval.PQ_KEYS)))


@dataclasses.dataclass(frozen=True)
class Benchmark:
    slug: str
    title: str
    dataset: str
    split: str
    task: str
    gt: str
    gt_seg: str | None
    train_gt: str | None
    description: str
    protocols: tuple  # the first is the headline
    metrics: tuple
    order_by: str  # the boards' default sort: a metric of the headline protocol
    per_predicate_metric: str
    quota_per_day: int
    quota_total: int
    missing_images: str  # count | refuse
    evaluation: dict  # further sgeval config keys

    @property
    def headline(self):
        return self.protocols[0]

    @property
    def protocol_metrics(self):
        """The metrics shown under every protocol."""
        return tuple(key for key in self.metrics if metric_family(key) != "pq")

    @property
    def pq_metrics(self):
        """The panoptic quality keys, shown once (they do not depend on the protocol)."""
        return tuple(key for key in self.metrics if metric_family(key) == "pq")

    def sgeval_config(self, pred):
        """The sgeval Config that evaluates pred on this benchmark."""
        return sgeval.make_config({**self.evaluation, "gt": self.gt, "gt_seg": self.gt_seg, "train_gt": self.train_gt,
                                   "pred": str(pred), "protocol": self.headline, "protocols": list(self.protocols[1:]),
                                   "task": self.task, "workers": 1}, source="benchmark")


@dataclasses.dataclass(frozen=True)
class Settings:
    title: str
    state_dir: Path
    host: str
    port: int
    workers: int
    job_timeout: float
    max_upload_bytes: int
    signup: bool
    body_timeout: int  # seconds a request's body may stop arriving
    validation_timeout: int  # seconds the check of an upload may take (checks.py)
    validation_memory_mb: int  # memory the check of an upload may add to its process
    max_records_factor: int  # image records an upload may hold per test image of its split
    refused_per_hour: int  # refused uploads of one submitter in an hour before the next one waits
    forwarded_allow_ips: tuple  # the proxies whose X-Forwarded-Proto and -For are believed (empty: none)
    header_timeout: int  # seconds a request's head may take (connections.py)
    max_connections: int  # connections open at once (connections.py)
    session_days: int  # a browser's login lasts this long (on the server, and its cookie)
    benchmarks: dict  # slug -> Benchmark, in the file's order
    source: str


def _unknown(values, known, where, problems):
    problems += [f"{where}: unknown key '{key}' (valid: {', '.join(known)})" for key in values if key not in known]


def _integer(values, key, default, low, high, where, problems):
    value = values.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high \
            or (isinstance(value, float) and not value.is_integer()):
        problems.append(f"{where}: '{key}' must be a whole number from {low} to {high}, not {value!r}")
        return default
    return int(value)


def _text(values, key, default, where, problems):
    value = values.get(key, default)
    if value is not None and not isinstance(value, str):
        problems.append(f"{where}: '{key}' must be text, not {value!r}")
        return default
    return value


def _proxies(values, where, problems):
    """forwarded_allow_ips: IP addresses and networks (uvicorn's ProxyHeadersMiddleware would take a
    misspelt one as a name that never matches), or ["*"]."""
    value = values.get("forwarded_allow_ips") or []
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        problems.append(f"{where}: 'forwarded_allow_ips' must be a list of IP addresses and networks (or [\"*\"])")
        return ()
    bad = []
    for item in value:
        try:
            ipaddress.ip_network(item) if "/" in item else ipaddress.ip_address(item)
        except ValueError:
            bad += [] if item == "*" else [item]
    if bad:
        problems.append(f"{where}: 'forwarded_allow_ips' must be a list of IP addresses and networks (or [\"*\"]), "
                        f"not {', '.join(map(repr, bad))}")
    return tuple(value)


def _path(base, value):
    return None if value is None else str((base / value).resolve())


def metric_family(key):
    """The sgeval metric family of a result key (R@50 -> R, mR@inf -> Rinf; the oi protocol's own
    keys, imgR@50, wmAP_rel, score_wtd, ...: oi; PQ, SQ_th, ...: pq), or None."""
    match = METRIC_KEY.fullmatch(key)
    if not match:
        return None
    if key in sgeval.PQ_KEYS:
        return "pq"
    if key in sgeval.OI_SCALARS or match.group(1) == "imgR":
        return "oi"
    if match.group(1) is None:
        return key
    family, k = match.groups()
    return ("Rinf" if family in ("R", "mR") else None) if k == "inf" else family


def protocol_families(protocols):
    """The metric families the named protocols compute of their own (ag: semiR, fmR, vR, ...)."""
    return {family for name in protocols for family in sgeval.PROTOCOLS[name].table_families}


def _metrics(values, protocols, where, problems):
    metrics = values.get("metrics", ["R@20", "R@50", "R@100", "mR@20", "mR@50", "mR@100"])
    if not isinstance(metrics, list) or not metrics or not all(isinstance(m, str) for m in metrics):
        problems.append(f"{where}: 'metrics' must be a list of result keys such as R@50, mR@50")
        return ("R@50",)
    own = protocol_families(protocols)
    for key in metrics:
        family = metric_family(key)
        if family in (*sgeval.METRIC_FAMILIES, "oi", "pq") or family in own:
            continue
        owners = [name for name in sgeval.PROTOCOLS if family in protocol_families([name])]
        problems.append(f"{where}: metric '{key}' is a key of the {' and '.join(owners)} protocol; add it to "
                        f"'protocols'" if owners else
                        f"{where}: metric '{key}' is not a result key of sgeval (R@50, mR@100, PRank, ...)")
    return tuple(dict.fromkeys(metrics))


def _protocols(values, where, problems):
    protocols = values.get("protocols", ["singlempo", "unique", "openpsg"])
    if not isinstance(protocols, list) or not protocols or not set(map(str, protocols)) <= set(sgeval.PROTOCOLS):
        problems.append(f"{where}: 'protocols' must be a list of {', '.join(sgeval.PROTOCOLS)} (headline first)")
        return ("unique",)
    return tuple(dict.fromkeys(protocols))


def _order_by(values, metrics, where, problems):
    order_by = values.get("order_by", metrics[0])
    if order_by not in metrics:
        problems.append(f"{where}: 'order_by' must be one of the metrics ({', '.join(metrics)}), not {order_by!r}")
        return metrics[0]
    return order_by


def _evaluation(values, metrics, protocols, where, problems):
    """The benchmark's further sgeval config keys: its metric families (unless given), and pq on
    when a PQ key is shown."""
    extra = values.get("evaluation") or {}
    if not isinstance(extra, dict):
        problems.append(f"{where}: 'evaluation' must be a mapping of sgeval config keys")
        return {}
    problems += [f"{where}: evaluation key '{key}' is set by the service" for key in extra
                 if key in RESERVED_EVALUATION_KEYS]
    extra = {key: value for key, value in extra.items() if key not in RESERVED_EVALUATION_KEYS}
    # the oi protocol's keys, those of protocol_families and pq's come with their protocol or measure
    families = {metric_family(key) for key in metrics} - {None, "oi", "pq"} - protocol_families(protocols)
    if "metrics" not in extra:
        extra["metrics"] = sorted(families)
    shown = [key for key in metrics if metric_family(key) == "pq"]
    if shown:
        if extra.get("pq", True) is not True:
            problems.append(f"{where}: the metrics show panoptic quality ({', '.join(shown)}), so evaluation key "
                            f"'pq' cannot be {extra['pq']!r}")
        if not isinstance(values.get("gt_seg"), str):
            problems.append(f"{where}: the metrics show panoptic quality ({', '.join(shown)}), which needs 'gt_seg' "
                            f"(mask mode): it matches segments by their pixels, and boxes have no such segments")
        extra["pq"] = True
    return extra


def _benchmark(slug, values, base, source, problems):
    where = f"{source}: benchmarks.{slug}"
    if not SLUG.fullmatch(str(slug)):
        problems.append(f"{where}: a benchmark's name must be lower-case letters, digits and '-' (URL-safe)")
    if not isinstance(values, dict):
        problems.append(f"{where}: must be a mapping")
        return None
    _unknown(values, BENCHMARK_KEYS, where, problems)
    if not isinstance(values.get("gt"), str):
        problems.append(f"{where}: 'gt' (the hidden ground truth's psg.json) is required")
    protocols = _protocols(values, where, problems)
    metrics = _metrics(values, protocols, where, problems)
    if metrics and all(metric_family(key) == "pq" for key in metrics):
        problems.append(f"{where}: 'metrics' must name a metric of the protocols too (R@50, mR@50, ...), not only "
                        f"panoptic quality")
    m_type = [key for key in metrics if key.startswith(("mR@", "mNgR@"))]
    quota = values.get("quota") or {}
    if not isinstance(quota, dict):
        problems.append(f"{where}: 'quota' must be a mapping with per_day and total")
        quota = {}
    _unknown(quota, ("per_day", "total"), f"{where}.quota", problems)
    missing = values.get("missing_images", "count")
    if missing not in ("count", "refuse"):
        problems.append(f"{where}: 'missing_images' must be count or refuse, not {missing!r}")
    return Benchmark(
        slug=str(slug), title=_text(values, "title", str(slug), where, problems),
        dataset=_text(values, "dataset", "", where, problems), split=_text(values, "split", "test", where, problems),
        task=_text(values, "task", "sgdet", where, problems),
        gt=_path(base, values.get("gt") if isinstance(values.get("gt"), str) else "."),
        gt_seg=_path(base, _text(values, "gt_seg", None, where, problems)),
        train_gt=_path(base, _text(values, "train_gt", None, where, problems)),
        description=_text(values, "description", "", where, problems) or "",
        protocols=protocols, metrics=metrics, order_by=_order_by(values, metrics, where, problems),
        per_predicate_metric=_text(values, "per_predicate_metric", (m_type or ["mR@50"])[0], where, problems),
        quota_per_day=_integer(quota, "per_day", 5, 1, 10**6, f"{where}.quota", problems),
        quota_total=_integer(quota, "total", 100, 1, 10**9, f"{where}.quota", problems),
        missing_images=missing, evaluation=_evaluation(values, metrics, protocols, where, problems))


def load_settings(path, **overrides):
    """Read the service's YAML file; raises sgeval.SGEvalError listing every problem."""
    path = Path(path)
    try:
        values = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        raise sgeval.SGEvalError([f"{path}: cannot read the service config: {error}"]) from None
    if not isinstance(values, dict):
        raise sgeval.SGEvalError([f"{path}: the service config must be a mapping"])
    values.update({key: value for key, value in overrides.items() if value is not None})
    where, base, problems = str(path), path.resolve().parent, []
    _unknown(values, SERVER_KEYS, where, problems)
    benchmarks = values.get("benchmarks")
    if not isinstance(benchmarks, dict) or not benchmarks:
        problems.append(f"{where}: 'benchmarks' must map at least one benchmark name to its settings")
        benchmarks = {}
    parsed = {str(slug): _benchmark(slug, spec, base, where, problems) for slug, spec in benchmarks.items()}
    settings = Settings(
        title=_text(values, "title", "sgeval benchmarks", where, problems),
        state_dir=Path(_path(base, _text(values, "state_dir", "serve-state", where, problems) or "serve-state")),
        host=_text(values, "host", "127.0.0.1", where, problems),
        port=_integer(values, "port", 8000, 0, 65535, where, problems),
        workers=_integer(values, "workers", 1, 1, 64, where, problems),
        job_timeout=_integer(values, "job_timeout", 3600, 1, 7 * 86400, where, problems),
        max_upload_bytes=_integer(values, "max_upload_mb", 512, 1, 1 << 20, where, problems) << 20,
        signup=bool(values.get("signup", False)),
        body_timeout=_integer(values, "body_timeout", 30, 1, 3600, where, problems),
        validation_timeout=_integer(values, "validation_timeout", 60, 1, 86400, where, problems),
        validation_memory_mb=_integer(values, "validation_memory_mb", 2048, 16, 1 << 20, where, problems),
        max_records_factor=_integer(values, "max_records_factor", 4, 1, 10**6, where, problems),
        refused_per_hour=_integer(values, "refused_per_hour", 10, 1, 10**6, where, problems),
        forwarded_allow_ips=_proxies(values, where, problems),
        header_timeout=_integer(values, "header_timeout", 10, 1, 3600, where, problems),
        max_connections=_integer(values, "max_connections", 200, 1, 100_000, where, problems),
        session_days=_integer(values, "session_days", 14, 1, 3650, where, problems),
        benchmarks=parsed, source=where)
    for benchmark in parsed.values():
        if benchmark is None or problems:  # sgeval's own check of the evaluation keys, once the rest is right
            continue
        try:
            benchmark.sgeval_config("prediction.zip")
        except sgeval.SGEvalError as error:
            problems += [f"{where}: benchmarks.{benchmark.slug}: {p}" for p in error.problems]
    if problems:
        raise sgeval.SGEvalError(problems)
    return settings
