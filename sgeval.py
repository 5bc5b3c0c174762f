"""sgeval -- exact, fast evaluation of (panoptic) scene graph generation.

sgeval 0.1.0. Copyright (c) 2026 the sgeval authors. MIT licence: use, copy, modify and share this
file alone, keeping this notice (the full text: LICENSE in the sgeval repository).

One self-contained file: copy it into your repository and import it, or run it. Each image reduces
to a record of integer counts that add up; every metric is a pure function of their sums.

Three ways to evaluate
----------------------
In the model's test loop, no file written::

    import sgeval
    evaluator = sgeval.Evaluator("configs/psg.yaml")   # a YAML path, a Config or a mapping; no pred
    for image_id, output in test_loop():               # your model's outputs, image by image
        evaluator.update(image_id, labels=output.labels, masks=output.masks,
                         triplets=output.triplets, ng_triplets=output.ng_triplets)
    evaluator.sync()                                   # under torch.distributed: every rank's images
    results = evaluator.compute()                      # the results dict
    print(sgeval.format_table(results))

A prediction file from Python (an Evaluator updated with the file's records: the same numbers, to
the bit), or from the command line::

    results = sgeval.evaluate(sgeval.load_config("configs/psg.yaml", workers=2))
    python sgeval.py --config configs/psg.yaml
    python sgeval.py --gt psg.json --gt-seg panoptic/ --pred pred.zip --k 20,50,100,x10
    python sgeval.py --reference                            # the format and rules (REFERENCE, the end of this file)

Contents, in the order one image flows
--------------------------------------
 1. Configuration       Config (Inputs, Rules, RunOptions), make_config / load_config; named GT subsets.
 2. Ground truth        read_gt: psg.json entry by entry into GTImage arrays (once per Evaluator).
 3. The Evaluator       update / update_file / merge / sync / compute; an image's record of counts
                        (pack_record / unpack_record) and the state_dict.
 4. Predictions in      checked_prediction: the one check of an image's prediction, after
                        update_prediction (update's arrays) or _record (a file's JSON record,
                        read by prediction_records; with workers, its text decoded in a worker by
                        decoded_record) decoded it into arrays.
 5. Masks               the panoptic PNG (load_gt_masks, GTCache) and prediction TIFFs
                        (load_pred_masks) decoded by imagecodecs / tifffile, packed into bit rows.
 6. Kernels             numba: mask_iou, box_iou, the matchers, the SingleMPO merge, first_positions.
 7. One image           evaluate_image: the task's instances (task_instances), their IoU with the GT
                        (image_iou), the SingleMPO merge, then every protocol's counts.
 8. Count fields        CountField: every per-image count declared once, with its shape, its bound
                        and what decides it (RECALL_FIELDS, OI_FIELDS, AG_FIELDS, PQ_FIELDS).
 9. Protocols           one unit each (Protocol: unique, singlempo, multimpo, openpsg, sgb, oi, ag)
                        holding its matching, counts, metrics, rules, row lists, state checks and
                        notes; PROTOCOLS. 9b: panoptic quality, a measure beside them (MEASURES),
                        and the merge rules of overlapping masks (MERGE_RULES).
10. Per-image counts    image_counts / legacy_counts: a Matching and the rows -> the count fields.
11. Aggregation         CountStore, aggregate: the stacked counts -> metrics.
12. Results             evaluate, build_results (the results dict), per_image_lines, format_table.
13. Command line        main, cli (sgeval report / serve / convert).
14. Reference           REFERENCE: the Evaluator in detail, the formats, the limits, every rule.

Dimensions: I images, G GT instances, P predicted instances, N merged nodes or any masks, R
relations (triplets), K cut-offs, C predicate classes, W 64-bit words of a packed mask.
"""

__version__ = "0.1.0"

import codecs
import collections
import collections.abc
import concurrent.futures
import contextlib
import dataclasses
import errno
import functools
import gc
import hashlib
import hmac
import importlib
import io
import itertools
import json
import logging
import math
import multiprocessing
import os
import re
import reprlib
import shutil
import stat
import sys
import tempfile
import threading
import typing
import zipfile
import zlib
from pathlib import Path, PurePosixPath

import click
import imagecodecs
import numpy as np
import tifffile
import yaml
from PIL import Image

__all__ = [  # the public API; the other names are the parts it is made of
    # evaluate
    "Evaluator", "Panoptic", "PackedMasks", "PanopticSegmentation", "evaluate", "format_table", "Config", "Inputs",
    "Rules", "RunOptions", "load_config", "make_config", "SGEvalError",
    # the formats
    "read_gt", "read_predictions", "prediction_records", "write_predictions", "encode_masks", "encode_panoptic",
    "pack_masks",
    "GroundTruth", "GTImage", "PredImage", "GTCache", "default_gt_cache",
    # protocols, metrics and the results
    "PROTOCOLS", "RECALL_PROTOCOLS", "DEFAULT_PROTOCOL", "Protocol", "CountField", "METRIC_FAMILIES", "TASKS",
    "SUBSET_PRESETS", "PREDICATE_GROUP_PRESETS", "aggregate", "REFERENCE",
    # limits
    "MAX_WORKERS", "MAX_INSTANCES", "MAX_PROBLEMS", "MAX_ROW_LISTS",
    # the command line
    "main", "cli", "run_cli",
]

log = logging.getLogger("sgeval")

# Compiled kernels are cached beside this file; set SGEVAL_NO_JIT_CACHE=1 where that cannot work (read
# when they are compiled). They release the GIL: an Evaluator's threads run them while the model's
# thread runs Python.
_KERNELS, _KERNELS_LOCK = [], threading.Lock()  # the functions @_kernel marks, compiled at the first call of one


class _Kernel:
    """A numba kernel before numba is imported: importing sgeval (``sgeval --help``) neither
    imports numba nor compiles anything. The first call of any kernel puts numba's njit
    dispatchers of all of them in the module (kernels call each other through it) and runs."""

    def __init__(self, function):
        self.py_func, self.__name__, self.__doc__ = function, function.__name__, function.__doc__

    def __call__(self, *args):
        return _numba_kernels()[self.__name__](*args)


def _kernel(function):
    _KERNELS.append(function.__name__)
    return _Kernel(function)


def _numba_kernels():
    """The module's globals, every kernel in them made a numba dispatcher (once)."""
    module = globals()
    with _KERNELS_LOCK:  # an Evaluator's threads may call their first kernels at once
        if isinstance(module[_KERNELS[-1]], _Kernel):
            import numba  # noqa: PLC0415 - on first use: it takes longer to import than the rest of sgeval
            cache = not os.environ.get("SGEVAL_NO_JIT_CACHE")  # any non-empty value: no cache
            for name in _KERNELS:
                module[name] = numba.njit(cache=cache, nogil=True)(module[name].py_func)
    return module

METRIC_FAMILIES = ("R", "mR", "ngR", "mNgR", "F1", "PR", "InstR", "Rinf", "PRank", "zR", "ngzR", "IMR", "wIMR", "A")
DEFAULT_METRICS = tuple(family for family in METRIC_FAMILIES if family != "F1")  # A: sgcls / predcls only
DEFAULT_PROTOCOL = "unique"  # the headline protocol unless the config names one (PROTOCOLS: the registry)
TASKS = ("sgdet", "sgcls", "predcls")  # what the model was given: nothing, the GT boxes, the GT boxes and labels
BOX_TOLERANCE = 1.0  # sgcls / predcls: a predicted box is the GT's when every coordinate is within this (pixels)


class LegacyTool(typing.NamedTuple):
    """The tool a legacy protocol (rows as written, many-to-many) reproduces, and its box IoU."""

    name: str
    pixel: int  # added to box widths and heights (Scene-Graph-Benchmark's "+1 pixel")
    least_union: float | None  # the box IoU's union is at least this (mmdet's eps)
    dtype: type = np.float32  # the box IoU's arithmetic


LEGACY_NG_LIST = 100  # OpenPSG and Scene-Graph-Benchmark score the first 100 entries of their NG ranking
MERGE_IOU = 0.5  # SingleMPO and the audit: instances with IoU >= this are duplicates
VOID_ID = 0  # a panoptic PNG's pixels of this id are VOID (panoptic quality leaves them out)


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")  # and the line separators str.splitlines knows
MAX_WORKERS = 64
MAX_INSTANCES = 10_000  # instances of one prediction record
MAX_IMAGE_PIXELS = 1 << 26  # height x width of a GT image, unless SGEVAL_MAX_IMAGE_PIXELS says otherwise


MAX_PROBLEMS = 1000  # problem lines of one pass that are kept and shown; the rest are counted


class SGEvalError(ValueError):
    """Bad input. ``problems`` holds one line per problem (file, image id, field): the first
    MAX_PROBLEMS, then one line counting the rest."""

    def __init__(self, problems):  # control characters (a newline in an image id) shown escaped, long lines cut
        kept = list(itertools.islice(problems, MAX_PROBLEMS))
        more = max(len(problems) - len(kept), 0)
        self.problems = [_CONTROL.sub(lambda m: repr(m.group())[1:-1], problem) for problem in kept]
        self.problems = [p if len(p) <= 1000 else f"{p[:1000]}... ({len(p)} characters)" for p in self.problems]
        self.problems += [f"... and {more} more problems (the first {MAX_PROBLEMS} are listed)"] * bool(more)
        super().__init__("\n".join(self.problems))


class ProblemList(list):
    """The problem lines of one pass: the first MAX_PROBLEMS are kept, the others only counted;
    len() counts them all (readers compare it before and after a check)."""

    def __init__(self, lines=()):
        super().__init__()
        self.count = 0
        self.extend(lines)

    def append(self, line):
        self.count += 1
        if super().__len__() < MAX_PROBLEMS:
            super().append(line)

    def extend(self, lines):
        for line in lines:
            self.append(line)

    def __iadd__(self, lines):
        self.extend(lines)
        return self

    def __len__(self):
        return self.count

    def move_to(self, other):
        """Append these lines to another ProblemList (the uncounted ones counted there) and empty this one."""
        dropped = self.count - super().__len__()
        other.extend(list(self))
        other.count += dropped
        self.clear()
        self.count = 0


def env_count(name, default, low=0, high=1 << 40):
    """The whole number in environment variable name (default when it is unset or empty), read
    when it is used; SGEvalError for anything but decimal digits within [low, high]."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    if not re.fullmatch("[0-9]{1,20}", text) or not low <= int(text) <= high:
        raise SGEvalError([f"environment variable {name}={text[:40]!r}: expected a whole number from {low} to "
                           f"{high}"])
    return int(text)


def max_image_pixels():
    """The largest height x width of a GT image: SGEVAL_MAX_IMAGE_PIXELS, default MAX_IMAGE_PIXELS."""
    return env_count("SGEVAL_MAX_IMAGE_PIXELS", MAX_IMAGE_PIXELS, low=1)


def open_regular(path, what):
    """A binary file object of path after checking, on the open file, that it is a regular file (a
    FIFO, a device or a directory is refused without blocking: reading one can hang or never end).
    OSError when it cannot be opened, SGEvalError when it is not a regular file."""
    kind = "not a regular file (a device, FIFO or socket)"
    try:
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    except OSError as error:
        if error.errno != errno.ENXIO:  # ENXIO: a socket
            raise
        raise SGEvalError([f"{path}: cannot read {what}: it is {kind}"]) from None
    if not stat.S_ISREG(os.fstat(descriptor).st_mode):
        os.close(descriptor)
        kind = "a directory" if os.path.isdir(path) else kind
        raise SGEvalError([f"{path}: cannot read {what}: it is {kind}"])
    return os.fdopen(descriptor, "rb")


def read_regular(path, what, limit):
    """The bytes of a regular file (open_regular) of at most limit bytes, counted while reading;
    SGEvalError for a larger one or one that cannot be read."""
    try:
        with open_regular(path, what) as handle:
            size = os.fstat(handle.fileno()).st_size
            data = handle.read(limit + 1) if size <= limit else b""
    except SGEvalError:
        raise
    except (OSError, ValueError) as error:  # ValueError: a NUL byte in the path
        raise SGEvalError([f"{path}: cannot read {what}: {getattr(error, 'strerror', None) or error}"]) from None
    if size > limit or len(data) > limit:  # (it may grow while it is read)
        raise SGEvalError([f"{path}: cannot read {what}: {max(size, len(data))} bytes, more than the {limit} it "
                           f"may have"])
    return data


def _regular_file(path, what):
    """SGEvalError unless path is a regular file (a directory, a device, a FIFO or a socket is
    not read: reading one can block or never end)."""
    if os.path.exists(path) and not os.path.isfile(path):
        kind = "a directory" if os.path.isdir(path) else "not a regular file (a device, FIFO or socket)"
        raise SGEvalError([f"{path}: cannot read {what}: it is {kind}"])


# ---------------------------------------------------------------------------------------------
# 1. Configuration
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Inputs:
    """The files a run reads."""

    gt: str = ""  # OpenPSG psg.json
    gt_seg: str | None = None  # panoptic PNG root; None = box mode
    pred: str = ""  # predictions: .json, .zip or directory
    train_gt: str | None = None  # training annotations (default: gt's non-test images)
    zeroshot_triplets: str | None = None  # JSON/CSV rows [subject cat, object cat, predicate]

    @property
    def mode(self):
        """ "mask" with a panoptic PNG root (gt_seg), else "box"."""
        return "mask" if self.gt_seg else "box"


@dataclasses.dataclass(frozen=True)
class Rules:
    """What decides a run's numbers: the same inputs under the same rules give the same results,
    whatever the run's options."""

    protocol: str = DEFAULT_PROTOCOL  # the headline protocol (a name in PROTOCOLS)
    protocols: tuple = ()  # more protocols evaluated side by side in the same run
    task: str = "sgdet"  # sgdet | sgcls | predcls: sgcls / predcls instances are the GT's, in GT order
    k: tuple = ("20", "50", "100", "x1", "x10")  # absolute or relative ("x10") cut-offs
    imr_k: tuple = ("10", "20", "50")  # cut-offs per predicate for IMR / wIMR
    metrics: tuple = DEFAULT_METRICS  # metric families to report
    iou_threshold: float = 0.5  # a match needs IoU >= this
    wimr_tau: float = 0.5  # wIMR weight softness (0 = IMR)
    predicate_groups: str | None = None  # head / body / tail mR: frequency | pysgg-vg150 | a JSON/YAML file
    absent_predicates: str = "skip"  # skip | zero: predicates absent from the GT in m-type means (openpsg, sgb: zero)
    aggregation: str = "per_image"  # per_image | pooled (openpsg, sgb: always per_image)
    confusion_k: str = "50"  # the cut-off of the predicate confusion counts
    audit: bool = True  # protocol audit (off: unique / multimpo skip the masks of categories not in the GT)
    subsets: tuple = ()  # named GT subsets (SubsetSpec): R@k/<name>, ngR@k/<name>, mR@k/<name>
    pq: bool = False  # panoptic quality (PQ / SQ / RQ) of the predicted masks, as panopticapi computes it
    pq_merge: str = "none"  # overlapping masks become a panoptic segmentation by this rule (MERGE_RULES)
    pq_rule: str = "panopticapi"  # panoptic quality as panopticapi counts it, or as OpenPSG does (PQ_RULES)


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """How a run goes and where its results go; none of them changes a number."""

    workers: int = 1  # processes decoding and matching images (an Evaluator: threads)
    gt_cache: object = None  # prepared GT images: a folder; None: the user cache folder; False: none
    output: str | None = None  # JSON results file
    per_image: str | None = None  # JSON Lines file of every image's hits
    per_predicate: bool = False  # print the per-predicate table
    model: str | None = None  # the model's name in reports (default: the results file's name)


@dataclasses.dataclass(frozen=True)
class Config(RunOptions, Rules, Inputs):
    """A run's Inputs, Rules and RunOptions, flat, as YAML keys and CLI options name them
    (``config.k``); ``config.inputs``, ``config.rules`` and ``config.options`` are its three parts."""

    @property
    def inputs(self):
        return _config_part(self, Inputs)

    @property
    def rules(self):
        return _config_part(self, Rules)

    @property
    def options(self):
        return _config_part(self, RunOptions)


def _config_part(config, part):
    return part(**{field.name: getattr(config, field.name) for field in dataclasses.fields(part)})


_CHOICES = {"task": TASKS, "absent_predicates": ("skip", "zero"), "aggregation": ("per_image", "pooled")}


_K_LABEL = re.compile(r"[0-9]+|x([0-9]+\.?[0-9]*|\.[0-9]+)")  # ASCII digits, a decimal point, no exponent


def parse_k(label):
    """A cut-off label -> (number, relative): '20' -> (20, False), 'x10' -> (10.0, True); else ValueError."""
    text = str(label).strip()
    if not _K_LABEL.fullmatch(text):
        raise ValueError(text)
    relative = text.startswith("x")
    number = float(text[1:]) if relative else int(text)  # ValueError beyond 4,300 digits
    if not 0 < number < math.inf:
        raise ValueError(text)
    return number, relative


def as_list(value):
    """A comma-separated string or a list -> list."""
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _k_labels(key, value, relative_allowed, source, problems):
    """The cut-off labels as written (spaces around them dropped), one per cut-off: a later label
    of the same cut-off ('020' after '20', 'x10.0' after 'x10') is left out."""
    labels = {}
    for item in as_list(value):
        try:
            k, relative = parse_k(item)
            if relative and not relative_allowed:
                raise ValueError(item)
            labels.setdefault((k, relative), str(item).strip())
        except ValueError:
            problems.append(f"{source}: {key} value '{item}' is not a positive integer"
                            + " or x<factor>" * relative_allowed)
    if not as_list(value):
        problems.append(f"{source}: '{key}' needs at least one value")
    return tuple(labels.values())


def _one_k_label(key, value, source, problems):
    if len(as_list(value)) > 1:
        problems.append(f"{source}: {key} takes one cut-off, not {len(as_list(value))}")
    labels = _k_labels(key, value, True, source, problems)
    return labels[0] if labels else ""


def _number(key, value, low, high, source, problems, open_low=False):
    if type(value) in (int, float) and (low < value if open_low else low <= value) and value <= high:
        return float(value)
    problems.append(f"{source}: {key} must be a number in {'(' if open_low else '['}{low:g}, {high:g}]")
    return 0.0


def make_config(values, source="config", need_pred=False):
    """Build a validated Config from a mapping; all problems are reported together. ``pred`` is
    needed by evaluate() only (need_pred: report it missing with the rest)."""
    fields = {f.name: f.default for f in dataclasses.fields(Config)}
    problems = [f"{source}: unknown key '{key}'; valid keys: {', '.join(fields)}"
                for key in values if key not in fields]
    if problems:
        raise SGEvalError(problems)
    merged = {**fields, **values}
    problems += [f"{source}: '{key}' is required" for key in ("gt", "pred")[:1 + need_pred] if not merged[key]]
    lists = {key: tuple(dict.fromkeys(map(str, as_list(merged[key])))) for key in ("metrics", "protocols")}
    for key, allowed in (("metrics", METRIC_FAMILIES), ("protocols", PROTOCOLS)):
        problems += [f"{source}: unknown {key[:-1]} '{name}'; valid: {', '.join(allowed)}"
                     for name in lists[key] if name not in allowed]
    problems += [f"{source}: {key} '{merged[key]}' is not one of {', '.join(allowed)}"
                 for key, allowed in {"protocol": tuple(PROTOCOLS), **_CHOICES}.items() if merged[key] not in allowed]
    workers = merged["workers"]
    workers = int(workers) if isinstance(workers, str) and re.fullmatch(r"\s*[0-9]{1,3}\s*", workers) else workers
    if type(workers) is not int or not 1 <= workers <= MAX_WORKERS:
        problems.append(f"{source}: workers must be an integer from 1 to {MAX_WORKERS}")
    problems += [f"{source}: {key} must be true or false" for key in ("per_predicate", "audit", "pq")
                 if not isinstance(merged[key], bool)]
    if not isinstance(merged["pq_merge"], str) or merged["pq_merge"] not in MERGE_RULES:
        problems.append(f"{source}: pq_merge '{merged['pq_merge']}' is not one of {', '.join(MERGE_RULES)}")
    if not isinstance(merged["pq_rule"], str) or merged["pq_rule"] not in PQ_RULES:
        problems.append(f"{source}: pq_rule '{merged['pq_rule']}' is not one of {', '.join(PQ_RULES)}")
    config = Config(**{key: None if merged[key] in (None, "") else str(merged[key])
                       for key in ("gt_seg", "train_gt", "zeroshot_triplets", "predicate_groups", "output",
                                   "per_image", "model")},
                    gt=str(merged["gt"]), pred=str(merged["pred"]), protocol=merged["protocol"], **lists,
                    task=merged["task"],
                    k=_k_labels("k", merged["k"], True, source, problems),
                    imr_k=_k_labels("imr_k", merged["imr_k"], False, source, problems),
                    confusion_k=_one_k_label("confusion_k", merged["confusion_k"], source, problems),
                    iou_threshold=_number("iou_threshold", merged["iou_threshold"], 0, 1, source, problems, True),
                    wimr_tau=_number("wimr_tau", merged["wimr_tau"], 0, 1, source, problems),
                    absent_predicates=merged["absent_predicates"], aggregation=merged["aggregation"],
                    per_predicate=merged["per_predicate"], audit=merged["audit"], workers=workers,
                    pq=merged["pq"], pq_merge=merged["pq_merge"], pq_rule=merged["pq_rule"],
                    gt_cache=_gt_cache_value(merged["gt_cache"], source, problems),
                    subsets=subset_specs(merged["subsets"], source, problems))
    for name in dict.fromkeys(name for name in (config.protocol, *config.protocols) if isinstance(name, str)):
        problems += PROTOCOLS[name].config_problems(config, source) if name in PROTOCOLS else []
    for name in config_measures(config):
        problems += MEASURES[name].config_problems(config, source)
    if problems:
        raise SGEvalError(problems)
    return config


def _gt_cache_value(value, source, problems):
    """gt_cache: a folder (a non-empty string), None / true (the user cache folder) or false (none)."""
    if value is None or value is True:
        return None
    if value is False or isinstance(value, str) and value.strip():
        return value
    problems.append(f"{source}: gt_cache must be a folder, true (the user cache folder) or false (no cache)")
    return None


def load_config(path=None, *, need_pred=False, **overrides):
    """Config from a YAML file (optional) with keyword overrides; None overrides are ignored."""
    values = {}
    if path is not None:
        try:
            _regular_file(path, "YAML config")
            values = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
        except (OSError, ValueError, RecursionError, yaml.YAMLError) as error:  # ValueError: not UTF-8
            raise SGEvalError([f"{path}: cannot read YAML config: {' '.join(str(error).split())}"]) from None
        if not isinstance(values, dict):
            raise SGEvalError([f"{path}: the config must be a mapping of keys to values"])
        nested = [key for key, value in values.items() if key != "subsets" and isinstance(value, (list, dict))
                  and not _types(value if isinstance(value, list) else [value]) <= {str, int, float, bool, type(None)}]
        if nested:  # never printed or walked: an alias bomb expands only when it is
            raise SGEvalError([f"{path}: '{key}' must be a value or a list of values" for key in map(str, nested)])
    values.update({key: value for key, value in overrides.items() if value is not None})
    return make_config(values, source=str(path) if path else "config", need_pred=need_pred)


# ---------------------------------------------------------------------------------------------
# 1b. Named GT subsets: R@k, ngR@k and mR@k over the GT relation rows a rule picks
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class SubsetSpec:
    """A named subset of the GT relation rows, as configured (class names, checked against the
    GT's vocabulary by resolve_subsets)."""

    name: str
    kind: str  # predicates | objects | triplets
    members: tuple  # predicate or object class names; triplets: (subject, predicate, object) name triples
    role: str | None = None  # objects: which end's class must be in the set (SUBSET_ROLES)
    preset: str | None = None  # the SUBSET_PRESETS entry it is


SUBSET_KINDS = ("predicates", "objects", "triplets")
SUBSET_ROLES = {"subject": "the subject's class is in the set", "object": "the object's class is in the set",
                "both": "the subject's and the object's classes are both in the set",
                "either": "the subject's or the object's class (or both) is in the set"}
SUBSET_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}")
SUBSET_VALUES = 100_000  # a subsets value is walked up to this many items (YAML aliases can nest without end)
# OvSGTR (github.com/gpt4vision/OvSGTR at 91afa5b), VG150's open-vocabulary splits. Its evaluator flags GT
# rows by 1-based VG150 indices (datasets/sgg_metrics.py:269 objects, :298-299 predicates); these are the
# names at those indices, equal to its datasets/vg.py:31 VG150_NOVEL2BASE keys and :40 VG150_NOVEL_PREDICATE.
SUBSET_PRESETS = {
    "ovsgtr-novel-predicates": SubsetSpec("ovsgtr-novel-predicates", "predicates", (
        "belonging to", "part of", "riding", "walking in", "in", "of", "painted on", "playing", "for", "walking on",
        "says", "attached to", "eating", "on", "wears"), None, "ovsgtr-novel-predicates"),
    "ovsgtr-novel-objects": SubsetSpec("ovsgtr-novel-objects", "objects", (
        "bed", "bench", "bike", "boy", "building", "bus", "car", "cat", "chair", "dog", "door", "ear", "elephant",
        "fence", "giraffe", "girl", "glass", "hair", "hand", "hat", "head", "horse", "jacket", "leg", "man", "pant",
        "person", "plane", "plate", "pole", "shirt", "shoe", "short", "sign", "snow", "street", "table", "tail",
        "track", "train", "tree", "wheel", "window", "woman", "zebra"), "both", "ovsgtr-novel-objects"),
}
SUBSET_SOURCES = {  # where each preset's list and rule are, in OvSGTR at 91afa5b
    "ovsgtr-novel-predicates": "OvSGTR's OvR novel predicates (datasets/vg.py:40; rule: datasets/sgg_metrics.py:"
                               "298-299, 326-329, a row whose predicate is novel)",
    "ovsgtr-novel-objects": "OvSGTR's OvD novel object classes (datasets/vg.py:31; rule: datasets/sgg_metrics.py:"
                            "268-273, a row whose subject and object classes are both novel)",
}


def _within(value, budget):
    """The items left of budget after walking value's lists and mappings; negative: too many."""
    stack = [value]
    while stack and budget >= 0:
        item = stack.pop()
        budget -= 1
        if isinstance(item, dict):
            stack += [*item.keys(), *item.values()]
        elif isinstance(item, (list, tuple)):
            stack += item
    return budget


def subset_specs(value, source="config", problems=None):
    """The ``subsets`` config value -> tuple of SubsetSpec. value: a list of entries or a mapping of
    names to specs. An entry: a preset name; ``NAME=SPEC`` (the --subset form); a mapping with
    ``name`` and a spec's keys; a spec: a preset name, ``KIND:NAMES`` text or a mapping of ``kind``,
    ``members`` and ``role`` (or ``preset``). Problems are added to problems (or raised)."""
    own, problems = problems is None, ProblemList() if problems is None else problems
    where, specs = f"{source}: subsets", []
    if value in (None, "", (), [], {}):
        return ()
    if _within(value, SUBSET_VALUES) < 0:
        problems.append(f"{where}: more than {SUBSET_VALUES} values (or nested without end)")
    else:
        entries = value.items() if isinstance(value, dict) else \
            [(None, item) for item in (value if isinstance(value, (list, tuple)) else [value])]
        specs = [spec for name, item in entries if (spec := _subset_entry(name, item, where, problems))]
    twice = [name for name, n in collections.Counter(spec.name for spec in specs).items() if n > 1]
    problems += [f"{where}: the name '{name}' is given to more than one subset" for name in twice]
    if own and problems:
        raise SGEvalError(problems)
    return tuple(specs)


def _subset_entry(name, item, where, problems):
    """One subsets entry (name None: a list item) -> SubsetSpec, or None after adding its problem."""
    spec, text = item, isinstance(item, str) and name is None
    if text and "=" not in item and item.strip() not in SUBSET_PRESETS:
        problems.append(f"{where}: '{item}' is not a preset ({', '.join(SUBSET_PRESETS)}); a subset of your own is "
                        f"NAME=KIND:NAMES"[:300])
        return None
    if text:
        name, spec = item.split("=", 1) if "=" in item else (item, item)
    elif name is None and isinstance(item, (dict, SubsetSpec)):
        item = dataclasses.asdict(item) if isinstance(item, SubsetSpec) else item
        name, spec = item.get("name", ""), {key: value for key, value in item.items() if key != "name"}
    elif name is None:
        problems.append(f"{where}: {reprlib.repr(item)} is not a preset name, NAME=KIND:NAMES or a mapping with a "
                        f"name")
        return None
    if not isinstance(name, str) or not SUBSET_NAME.fullmatch(name.strip()):
        problems.append(f"{where}: {reprlib.repr(name)} is not a subset name (1 to 64 letters, digits, '.', '_', '+' "
                        f"or '-', from a letter or digit; in {reprlib.repr(item)})")
        return None
    name, where = name.strip(), f"{where.rpartition(':')[0]}: subset '{name.strip()}'"
    if isinstance(spec, str):
        return _subset_text(name, spec.strip(), where, problems)
    if not isinstance(spec, dict) or set(spec) - {"kind", "members", "role", "preset"}:
        problems.append(f"{where}: expected a preset name, KIND:NAMES or a mapping of kind, members and role "
                        f"(or preset), not {reprlib.repr(spec)}")
        return None
    if spec.get("preset") is None:
        return _subset_spec(name, spec.get("kind"), spec.get("members"), spec.get("role"), where, problems)
    preset = SUBSET_PRESETS.get(spec["preset"]) if isinstance(spec["preset"], str) else None
    if preset is None:
        problems.append(f"{where}: preset must be one of {', '.join(SUBSET_PRESETS)}")
        return None
    given = _subset_spec(name, spec.get("kind", preset.kind), spec.get("members", preset.members),
                         spec.get("role", preset.role), where, problems)
    if given is not None and (given.kind, given.members, given.role) != (preset.kind, preset.members, preset.role):
        problems.append(f"{where}: kind, members or role differ from the preset {preset.preset}'s (give one of them)")
        return None
    return dataclasses.replace(preset, name=name) if given is not None else None


def _subset_text(name, text, where, problems):
    """A subset written as text: a preset name or KIND:NAMES (KIND: predicates, objects-<role>,
    triplets; NAMES comma-separated, a triplet as subject/predicate/object)."""
    if text in SUBSET_PRESETS:
        return dataclasses.replace(SUBSET_PRESETS[text], name=name)
    kind, colon, names = text.partition(":")
    kind, _, role = kind.strip().partition("-")
    if not colon or kind not in SUBSET_KINDS:
        problems.append(f"{where}: '{text}' is neither a preset ({', '.join(SUBSET_PRESETS)}) nor KIND:NAMES "
                        f"(KIND: predicates, objects-{'|'.join(SUBSET_ROLES)} or triplets)"[:400])
        return None
    members = [part.strip() for part in names.split(",") if part.strip()]
    if kind == "triplets":
        members = [[part.strip() for part in member.split("/")] for member in members]
    return _subset_spec(name, kind, members, role or None, where, problems)


def _subset_spec(name, kind, members, role, where, problems):
    """A checked SubsetSpec of its parts, or None after adding one problem."""
    rows = list(members) if isinstance(members, (list, tuple)) else []
    names = [n for row in rows for n in (row if kind == "triplets" and isinstance(row, (list, tuple)) else [row])]
    if kind not in SUBSET_KINDS:
        problem = f"kind must be one of {', '.join(SUBSET_KINDS)}"
    elif (kind == "objects") != (role is not None) or kind == "objects" and role not in tuple(SUBSET_ROLES):
        problem = f"objects needs a role: {', '.join(SUBSET_ROLES)}" if kind == "objects" else \
            f"role is for objects only (not {kind})"
    elif not rows or not all(isinstance(n, str) and n.strip() for n in names):
        problem = "members must be a non-empty list of " + {
            "predicates": "predicate names", "objects": "object class names",
            "triplets": "[subject, predicate, object] name triples (text: subject/predicate/object)"}[kind]
    elif kind == "triplets" and not all(isinstance(row, (list, tuple)) and len(row) == 3 for row in rows):
        problem = "members must be [subject, predicate, object] name triples (text: subject/predicate/object)"
    else:
        members = (tuple(n.strip() for n in row) if kind == "triplets" else row.strip() for row in rows)
        return SubsetSpec(name, kind, tuple(dict.fromkeys(members)), role)
    problems.append(f"{where}: {problem}")
    return None


# ---------------------------------------------------------------------------------------------
# 2. Ground truth
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass
class GTImage:
    """One evaluated GT image. relations: (R, 3) int64 [s, o, p], duplicates removed; file_rows:
    the relation of each row of the file, duplicates included (what the sgb protocol counts)."""

    image_id: str
    height: int
    width: int
    seg_path: str | None  # panoptic PNG (mask mode)
    segment_ids: np.ndarray  # (G,) int64
    categories: np.ndarray  # (G,) int64
    boxes: np.ndarray  # (G, 4) float64
    relations: np.ndarray  # (R, 3) int64
    file_rows: np.ndarray  # (R_file,) int64 index into relations, in file order
    zeroshot: np.ndarray | None = None  # (R,) bool: triplet type unseen in training (set by evaluate)
    subsets: np.ndarray | None = None  # (R, S) bool: the row is in the configured subset s (set by the Evaluator)
    crowd: np.ndarray | None = None  # (G,) bool: segments_info's iscrowd (panoptic quality)
    areas: np.ndarray | None = None  # (G,) int64: segments_info's area, None when one lacks it (panoptic quality)
    video: str | None = None  # the entry's "video" (Action Genome: the frames of one video), when given


@dataclasses.dataclass
class GroundTruth:
    object_classes: list
    predicate_classes: list
    images: list  # [GTImage] in psg.json order
    skipped_no_relations: int
    training: tuple  # training_statistics() of the data entries outside test_image_ids
    skipped: dict = dataclasses.field(default_factory=dict)  # test images without relations: id -> (height, width)
    n_things: int = 0  # object_classes[:n_things] are thing_classes, the rest stuff_classes


def _types(values):
    return set(map(type, values))


def rows_array(value, width):
    """A JSON list of rows of `width` integers -> (N, width) int64, else None. Booleans are not
    integers, and [[]] is not an empty list."""
    if not isinstance(value, list) or not _types(value) <= {list} or not set(map(len, value)) <= {width}:
        return None
    flat = list(itertools.chain.from_iterable(value))
    if not _types(flat) <= {int}:
        return None
    try:
        return np.fromiter(flat, np.int64, len(flat)).reshape(-1, width)
    except OverflowError:  # beyond int64
        return None


def int_array(values):
    """(N,) int64 of a list of JSON integers, else None."""
    try:
        return np.array(values, np.int64) if _types(values) <= {int} else None
    except OverflowError:
        return None


def _float_array(values):
    """(N,) float64 of a list of finite JSON numbers, else None (booleans are not numbers)."""
    try:
        array = np.array(values, np.float64) if _types(values) <= {int, float} else None
    except OverflowError:  # an integer beyond the float range
        return None
    return array if array is not None and np.isfinite(array).all() else None


def box_array(boxes):
    """(N, 4) float64 of a list of boxes of four finite JSON numbers each, else None."""
    if not _types(boxes) <= {list} or not set(map(len, boxes)) <= {4}:
        return None
    values = _float_array(list(itertools.chain.from_iterable(boxes)))
    return None if values is None else values.reshape(-1, 4)


def _check_indices(rows, name, limits, labels, where, problems):
    """Report the first row of every column that falls outside [0, limit)."""
    if rows.size == 0 or (rows.min() >= 0 and (rows.max(axis=0) < limits).all()):
        return  # all in range (the usual case): one pass instead of one per column
    for column, (limit, label) in enumerate(zip(limits, labels)):
        bad = np.flatnonzero((rows[:, column] < 0) | (rows[:, column] >= limit))
        if bad.size:
            row, more = int(bad[0]), f" (and {bad.size - 1} more)" if bad.size > 1 else ""
            plural = "categories" if label == "category" else f"{label}s"
            problems.append(f"{where}: {name} {row} {rows[row].tolist()} is out of range: it refers to "
                            f"{label} {int(rows[row, column])}, but only {limit} {plural} exist{more}")


class _Entry(typing.NamedTuple):
    """A psg.json data entry as arrays; a malformed field is None and ``problems[field]`` says why."""

    image_id: str
    height: int | None
    width: int | None
    pan_seg_file_name: object
    segment_ids: np.ndarray | None  # (G,) int64
    categories: np.ndarray | None  # (G,) int64
    boxes: np.ndarray | None  # (G, 4) float64
    relations: np.ndarray | None  # (R, 3) int64, duplicates kept
    problems: dict
    crowd: np.ndarray | None = None  # (G,) bool: iscrowd (0 where not given)
    areas: np.ndarray | None = None  # (G,) int64: area, None unless every segment gives one
    video: str | None = None  # the entry's "video", when it is a string


def _compact_entry(entry):
    """A psg.json data entry (an object with an image_id) -> _Entry; anything else as it is."""
    if not isinstance(entry, dict) or "image_id" not in entry:
        return entry
    size = [entry[key] if type(entry.get(key)) is int and entry[key] >= 1 else None for key in ("height", "width")]
    segments, annotations = entry.get("segments_info"), entry.get("annotations")
    ids = categories = boxes = None
    crowd = areas = None
    if isinstance(segments, list) and _types(segments) <= {dict}:
        ids, categories = (int_array([s.get(key) for s in segments]) for key in ("id", "category_id"))
        crowd, areas = int_array([s.get("iscrowd", 0) for s in segments]), int_array([s.get("area") for s in segments])
    if isinstance(annotations, list) and _types(annotations) <= {dict}:
        boxes = box_array([a.get("bbox") for a in annotations])
    relations = rows_array(entry.get("relations", 0), 3)  # 0: a missing field is malformed
    problems = {key: f"field '{key}' must be a positive integer" for key, value in zip(("height", "width"), size)
                if value is None}
    if ids is None or categories is None:
        problems["segments_info"] = "field 'segments_info' must list objects with an integer 'id' and 'category_id'"
    if crowd is None or crowd.size and (crowd.min() < 0 or crowd.max() > 1):
        problems["segments_info"] = "field 'segments_info': 'iscrowd' must be 0 or 1"
    if areas is not None and areas.size and areas.min() < 0:
        problems["segments_info"] = "field 'segments_info': 'area' must be a count of pixels"
    if boxes is None:
        problems["annotations"] = "field 'annotations' must list objects with a 'bbox' of four finite numbers"
    if relations is None:
        problems["relations"] = "field 'relations' must be a list of [3 integers] rows"
    return _Entry(str(entry["image_id"]), *size, entry.get("pan_seg_file_name"), ids, categories, boxes, relations,
                  problems, None if crowd is None else crowd.astype(bool), areas,
                  entry["video"] if isinstance(entry.get("video"), str) else None)


def read_gt(gt_path, seg_root=None):
    """Read psg.json (entry by entry: memory holds arrays, not the parsed JSON); every structural
    problem is collected into one SGEvalError."""
    max_pixels = max_image_pixels()
    data = _load_annotations(gt_path, ("data", "thing_classes", "stuff_classes", "predicate_classes",
                                       "test_image_ids"))
    objects, predicates = data["thing_classes"] + data["stuff_classes"], data["predicate_classes"]
    test_ids = {str(i) for i in data["test_image_ids"]}
    problems, images, skipped, seen, train = ProblemList(), [], {}, set(), []
    for kind, names in (("object (thing_classes + stuff_classes)", objects), ("predicate_classes", predicates)):
        if not _types(names) <= {str} or len(set(names)) < len(names):
            problems.append(f"{gt_path}: the {kind} names must be distinct strings")
    for index, entry in enumerate(data["data"]):
        if not isinstance(entry, _Entry):
            problems.append(f"{gt_path}: data[{index}]: missing field 'image_id'")
            continue
        where = f"{gt_path}: image {entry.image_id}"
        if entry.image_id not in test_ids:
            train.append(entry)
            continue
        if entry.image_id in seen or entry.problems:
            problems += [f"{where}: duplicate image_id"] if entry.image_id in seen else \
                [f"{where}: {text}" for text in entry.problems.values()]
            continue
        seen.add(entry.image_id)
        if entry.height * entry.width > max_pixels:
            problems.append(f"{where}: height x width {entry.height} x {entry.width} exceeds the limit of "
                            f"{max_pixels} pixels (environment variable SGEVAL_MAX_IMAGE_PIXELS raises it)")
            continue
        relations, categories, boxes = entry.relations, entry.categories, entry.boxes
        if len(relations) == 0:
            skipped[entry.image_id] = entry.height, entry.width
            continue
        if len(boxes) != len(categories):
            problems.append(f"{where}: annotations has {len(boxes)} entries, segments_info {len(categories)}")
            continue
        _check_indices(categories[:, None], "segment", [len(objects)], ["category"], where, problems)
        _check_indices(relations, "relation", [len(categories)] * 2 + [len(predicates)],
                       ["segment", "segment", "predicate"], where, problems)
        # duplicate relations dropped (keys in range unless a problem was just reported)
        first, file_rows = _distinct_rows((relations[:, 0] * len(categories) + relations[:, 1]) * len(predicates)
                                          + relations[:, 2])
        seg_path = _segmentation_path(entry, seg_root, where, problems) if seg_root is not None else None
        if seg_path is False:
            continue
        images.append(GTImage(entry.image_id, entry.height, entry.width, seg_path, entry.segment_ids, categories,
                              boxes, relations[first], file_rows, crowd=entry.crowd, areas=entry.areas,
                              video=entry.video))
    listed = {entry.image_id for entry in data["data"] if isinstance(entry, _Entry)}
    problems += [f"{gt_path}: test_image_ids lists image {image_id}, which has no entry in 'data'"
                 for image_id in sorted(test_ids - listed)]
    training = training_statistics(train, len(objects), len(predicates), gt_path, problems)
    if problems:
        raise SGEvalError(problems)
    return GroundTruth(objects, predicates, images, len(skipped), training, skipped, len(data["thing_classes"]))


def _segmentation_path(entry, seg_root, where, problems):
    """Mask mode: the path of an entry's panoptic PNG, its segment ids checked; False when the
    entry names none (its problem appended)."""
    if not isinstance(entry.pan_seg_file_name, str):
        problems.append(f"{where}: missing field 'pan_seg_file_name' (needed in mask mode)")
        return False
    seg_path = os.path.join(seg_root, entry.pan_seg_file_name)
    if len(np.unique(entry.segment_ids)) < len(entry.segment_ids):
        problems.append(f"{where}: field 'segments_info' lists a segment id twice")
    if not os.path.isfile(seg_path):
        problems.append(f"{seg_path}: image {entry.image_id}: panoptic PNG not found "
                        f"(field 'pan_seg_file_name' under {seg_root})")
    return seg_path


def _load_annotations(path, keys, what="JSON"):
    """A psg.json-like file whose given top-level fields are lists, decoded one value at a time;
    each 'data' entry is compacted as soon as it is read."""
    _regular_file(path, what)
    try:
        with open(path, "rb") as handle:
            stream = JSONStream(handle)
            if stream.peek() != "{":  # not an object: the checks below word it
                handle.seek(0)
                data = json.load(handle)
            else:
                data = {key: ([_compact_entry(item) for item in value] if key == "data" else list(value))
                        if isinstance(value, collections.abc.Iterator) else value for key, value in stream.members()}
    except (OSError, ValueError, RecursionError) as error:
        raise SGEvalError([f"{path}: cannot read {what}: {type(error).__name__}: {error}"]) from None
    missing = [key for key in keys if not isinstance(data, dict) or key not in data]
    if missing:
        raise SGEvalError([f"{path}: missing top-level field '{key}'" for key in missing])
    not_lists = [key for key in keys if not isinstance(data[key], list)]
    if not_lists:
        raise SGEvalError([f"{path}: top-level field '{key}' must be a list" for key in not_lists])
    return data


class Training(typing.NamedTuple):
    """Statistics of the training split."""

    types: set  # (subject category, object category, predicate) triplet types
    pairs: np.ndarray  # (C,) distinct (subject category, object category) pairs per predicate: wIMR's n_p
    relations: np.ndarray  # (C,) relation rows per predicate (duplicates included): frequency groups


def training_statistics(entries, n_objects, n_predicates, path, problems):
    """The Training statistics of data entries."""
    types, relations = set(), np.zeros(n_predicates, np.int64)
    for index, entry in enumerate(entries):
        if not isinstance(entry, _Entry):
            problems.append(f"{path}: field 'data' must hold objects with an 'image_id'; data[{index}] is not one")
            continue
        where, categories, rows = f"{path}: image {entry.image_id}", entry.categories, entry.relations
        if categories is None or rows is None:
            problems += [f"{where}: {entry.problems[key]}" for key in ("segments_info", "relations")
                         if key in entry.problems]
            continue
        before = len(problems)
        _check_indices(categories[:, None], "segment", [n_objects], ["category"], where, problems)
        _check_indices(rows, "relation", [len(categories)] * 2 + [n_predicates],
                       ["segment", "segment", "predicate"], where, problems)
        if len(problems) > before:  # the statistics go on with the rows in range (the run fails anyway)
            if len(categories) and (categories.min() < 0 or categories.max() >= n_objects):
                continue
            rows = rows[(rows >= 0).all(axis=1) & (rows[:, :2] < len(categories)).all(axis=1)
                        & (rows[:, 2] < n_predicates)]
        types.update(zip(categories[rows[:, 0]].tolist(), categories[rows[:, 1]].tolist(), rows[:, 2].tolist()))
        relations += np.bincount(rows[:, 2], minlength=n_predicates)
    pairs = np.zeros(n_predicates, np.int64)
    for p, count in collections.Counter(p for _, _, p in types).items():
        pairs[p] = count
    return Training(types, pairs, relations)


def read_training(path, n_objects, n_predicates):
    """training_statistics() of another annotation file (its entries outside its test_image_ids)."""
    data = _load_annotations(path, ("data",), "training annotations (JSON)")
    test_ids, problems = {str(i) for i in data.get("test_image_ids") or []}, ProblemList()
    training = training_statistics([e for e in data["data"] if not isinstance(e, _Entry) or e.image_id not in test_ids],
                                   n_objects, n_predicates, path, problems)
    if problems:
        raise SGEvalError(problems)
    return training


def read_zeroshot(path, n_objects, n_predicates):
    """Zero-shot triplet types from JSON ([[s_cat, o_cat, p], ...]) or CSV (3 integer columns, an
    optional header line)."""
    try:
        _regular_file(path, "zero-shot triplets")
        text = Path(path).read_text()
        if str(path).endswith(".json"):
            rows = [(f"row {i}", row) for i, row in enumerate(json.loads(text) or [None])]
        else:
            rows = [(f"line {i}", [int(v) if v.strip().lstrip("-").isdigit() else v.strip() for v in
                                   line.replace(";", ",").split(",")]) for i, line in enumerate(text.splitlines(), 1)
                    if line.strip()]
            rows = rows[1:] if rows and type(rows[0][1][0]) is str else rows  # a header line
    except (OSError, ValueError, TypeError, RecursionError) as error:
        raise SGEvalError([f"{path}: cannot read zero-shot triplets: {error}"]) from None
    problems, types = ProblemList(), set()
    for where, row in rows:
        if not (isinstance(row, list) and len(row) == 3 and _types(row) <= {int}):
            problems.append(f"{path}: {where}: expected [subject category, object category, predicate] "
                            f"integers, got {row!r}")
        elif not (0 <= row[0] < n_objects and 0 <= row[1] < n_objects and 0 <= row[2] < n_predicates):
            problems.append(f"{path}: {where}: {row} is outside the vocabulary")
        else:
            types.add(tuple(row))
    if not rows:
        problems.append(f"{path}: no zero-shot triplets found")
    if problems:
        raise SGEvalError(problems)
    return types


# ---------------------------------------------------------------------------------------------
# 3. The Evaluator: every image reduces to a record of integer counts; compute() aggregates them
# ---------------------------------------------------------------------------------------------


class Panoptic(typing.NamedTuple):
    """Masks of instances that do not overlap, for Evaluator.update: an (H, W) integer map of
    segment ids and the (P,) segment id of each instance, in instance order."""

    segment_map: object
    segment_ids: object


class PackedMasks(typing.NamedTuple):
    """Masks already packed, for Evaluator.update (mask mode): ``bits`` (P, ceil(H W / 8)) uint8,
    each mask's H x W pixels row by row, eight to a byte, the first pixel in the highest bit (the
    order of np.packbits), the bits beyond H W zero. On a model's device, for bool masks (P, H, W)
    of a torch tensor ``m``: ``x = torch.nn.functional.pad(m.reshape(P, -1).to(torch.uint8), (0,
    -H * W % 8))`` then ``(x.reshape(P, -1, 8) * torch.tensor([128, 64, 32, 16, 8, 4, 2, 1],
    dtype=torch.uint8, device=m.device)).sum(-1, dtype=torch.uint8)`` (an eighth of the bytes then
    cross to the host)."""

    bits: object


class PanopticSegmentation(typing.NamedTuple):
    """A prediction's own panoptic segmentation, for Evaluator.update(panoptic=...): panoptic
    quality scores it instead of the instance masks, which the relation protocols keep matching.
    An (H, W) integer map of segment ids, the (N,) ids of its segments (pixels of any other id
    belong to no segment) and their (N,) categories. void_id_segment: the id of the segment that
    shares its id with VOID in the model's own map (in OpenPSG's pan_results, category 0 instance 0
    has id 0); ``pq_rule: openpsg`` joins the pixels of no segment to it, as OpenPSG does."""

    segment_map: object
    segment_ids: object
    categories: object
    void_id_segment: object = None


class PredPanoptic(typing.NamedTuple):
    """A checked panoptic segmentation of a prediction (PanopticSegmentation, or a file record's
    field 'panoptic')."""

    categories: np.ndarray  # (N,) int64
    segment_ids: np.ndarray  # (N,) int64
    void_index: int  # the segment void_id_segment names; -1: none
    bits: np.ndarray | None  # (N + 1, W): the segments, then the pixels of no segment; None: read from ``file``
    file: str | None = None  # the PNG in the prediction source


class Evaluator:
    """Evaluate in a model's test loop: ``update`` once per image (in any order, on any number of
    ranks), ``merge`` / ``sync`` the states, ``compute`` the results dict that ``evaluate`` returns.

    config: a Config, a mapping of its fields or a YAML path (``pred`` is not needed). The GT, the
    training statistics and the zero-shot list are read once, here. The state holds, per updated
    image, a digest of its arrays, how often it was updated and its counts (``ImageRecord``): a
    few hundred bytes, whatever the number of instances, masks or rows.
    """

    def __init__(self, config):
        if isinstance(config, (str, os.PathLike)):
            config = load_config(config)
        self.config = config if isinstance(config, Config) else make_config(dict(config))
        self.gt = read_gt(self.config.gt, self.config.gt_seg)
        n_objects, n_predicates = len(self.gt.object_classes), len(self.gt.predicate_classes)
        self.training = read_training(self.config.train_gt, n_objects, n_predicates) if self.config.train_gt \
            else self.gt.training
        given = read_zeroshot(self.config.zeroshot_triplets, n_objects, n_predicates) \
            if self.config.zeroshot_triplets else None
        mark_zeroshot(self.gt.images, self.training.types, given)
        self.groups = predicate_groups(self.config.predicate_groups, self.gt.predicate_classes, self.training.relations)
        self.subsets = evaluator_subsets(self.config, self.gt, self.groups)
        self.settings = settings_of(self.config.rules, self.config.mode, n_predicates, self.subsets, self.gt)
        folder = None if self.config.gt_cache is False else self.config.gt_cache or default_gt_cache()
        self.gt_cache = GTCache(folder, gt_cache_bytes("SGEVAL_GT_MEMORY_MIB", GT_CACHE_MEMORY_MIB)) \
            if self.settings.mode == "mask" and self.config.gt_cache is not False else None
        self.slot_of = {image.image_id: slot for slot, image in enumerate(self.gt.images)}
        self._fingerprint, self._pool, self._running = None, None, {}  # slot -> Future of its (digest, pack_record)
        self._references = {}  # (slot, protocol) -> reference_counts, for the states read
        self._free = threading.BoundedSemaphore(2 * self.config.workers)  # images checked, not yet evaluated
        self.reset()

    def __getstate__(self):  # pickle and copy: the updates evaluated, no threads
        self._drain()
        return {**self.__dict__, "_pool": None, "_running": {}, "_free": None, "_references": None}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._references = {}
        self._free = threading.BoundedSemaphore(2 * self.config.workers)

    def reset(self):
        """Forget every update."""
        self._drain(raise_problems=False)
        self.images = {}  # slot -> ImageRecord
        self.extra = {}  # image id of a test image without relations -> ImageRecord (values unused)
        self.other_records = 0  # update_file: records of images outside the test split
        self.converted_task = None  # update_file: the task a converter recorded in the file (convert.json)

    def update(self, image_id, *, labels, triplets, masks=None, boxes=None, scores=None, ng_triplets=None,
               triplet_scores=None, ng_triplet_scores=None, row_lists=None, panoptic=None):
        """Evaluate one image's predictions (numpy arrays or torch tensors; see the module
        docstring, "The Evaluator"). A bad update raises SGEvalError and changes nothing."""
        image_id = _image_id_text(image_id)
        slot, where = self.slot_of.get(image_id), f"Evaluator.update: image {image_id}"
        if slot is None and image_id not in self.gt.skipped:
            raise SGEvalError([self._unknown_image(image_id, where)])
        image = self.gt.images[slot] if slot is not None else None
        height, width = (image.height, image.width) if image is not None else self.gt.skipped[image_id]
        fields = dict(labels=labels, triplets=triplets, masks=masks, boxes=boxes, scores=scores,
                      ng_triplets=ng_triplets, triplet_scores=triplet_scores, ng_triplet_scores=ng_triplet_scores,
                      row_lists=row_lists, panoptic=panoptic)
        pred = update_prediction(image_id, where, fields, len(self.gt.object_classes), self.settings, height, width)
        problems = protocol_problems(pred, image, self.settings, where)
        if problems:
            raise SGEvalError(problems)
        if slot is None:
            return self._add(self.extra, image_id, ImageRecord(prediction_digest(pred), 1, None))
        self._drain(finished_only=slot not in self._running)  # an update again: the first's digest is needed
        if slot in self.images:
            return self._add(self.images, slot, ImageRecord(prediction_digest(pred), 1, None))
        self._free.acquire()  # blocks while 2 x workers images wait for their evaluation
        self.images[slot] = ImageRecord(None, 1, None)  # its digest and values when evaluated (_drain)
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(self.config.workers, thread_name_prefix="sgeval")
        self._running[slot] = self._pool.submit(self._evaluate, slot, pred)

    def update_file(self, pred_path, workers=None, progress=None):
        """Update with every record of a prediction file, evaluated in the file's order as the
        records are read (in ``workers`` processes, default the config's, which send back each
        image's pack_record); records of images outside the evaluated ones are counted as extra.
        Raises SGEvalError with every problem of the records and of the masks. With workers and
        msgspec, the main process checks the records' JSON and ids only; the workers decode and
        check the records of the evaluated images (their problems join in the file's order)."""
        self._drain()
        gt, settings, problems = self.gt, self.settings, ProblemList()
        gt_cache = self.gt_cache and GTCache(self.gt_cache.folder)  # one pass: the folder, no memory
        workers = self.config.workers if workers is None else workers
        handoff = self.slot_of.__contains__ if workers > 1 and record_text_decoder() else None
        read = ProblemList() if handoff else problems  # handed off: moved to problems as the results come
        source, records = prediction_records(pred_path, len(gt.object_classes), settings.n_predicates, settings.mode,
                                             read, handoff)
        self.converted_task = converted_task(pred_path) if source.kind == "zip" else None
        image_problems, done, earlier = {}, 0, collections.deque() if handoff else None
        if workers > 1:
            popcount64(np.uint64(0))  # numba's compiler is set up once here; the forked workers inherit it
        gc.freeze()  # what exists now lives to the end: the garbage collector need not walk it again
        try:
            tasks = self._file_tasks(records, pred_path, source, gt_cache, read, earlier)
            for slot, digest, record_problems, found, values in map_in_order(
                    _evaluate_record, tasks, workers, after_batch=flush_worker_gt_caches):
                if handoff:
                    earlier.popleft().move_to(problems)
                    problems.extend(record_problems)
                    if problems:  # after a problem: only check the rest
                        continue
                if found:
                    image_problems[slot] = found
                else:
                    self._add(self.images, slot, ImageRecord(digest, 1, values))
                done += 1
                if progress:
                    progress(done, len(gt.images))
            if handoff:
                read.move_to(problems)
        finally:
            gc.unfreeze()
            source.close()
            if gt_cache:
                gt_cache.flush()
        problems += [problem for slot in sorted(image_problems) for problem in image_problems[slot]]
        if problems:
            raise SGEvalError(problems)
        for done in range(done + 1, len(gt.images) + 1) if progress else ():  # the images without a record
            progress(done, len(gt.images))

    def _file_tasks(self, records, pred_path, source, gt_cache, problems, earlier):
        """update_file's items for _evaluate_record, from prediction_records' records: the extra
        and other records counted, protocol problems appended to problems. earlier: None (after a
        problem, no more items), or a deque that gets problems' lines before each item (moved)."""
        gt, settings, n_objects = self.gt, self.settings, len(self.gt.object_classes)
        for pred in records:
            slot = self.slot_of.get(pred.image_id)
            if isinstance(pred, RecordText):
                task = ImageTask(gt.images[slot], None, source, settings, gt_cache)
            elif slot is None and pred.image_id in gt.skipped:
                self._add(self.extra, pred.image_id, ImageRecord(prediction_digest(pred), 1, None))
                continue
            elif slot is None:
                self.other_records += 1
                continue
            elif found := protocol_problems(pred, gt.images[slot], settings, f"{pred_path}: image {pred.image_id}"):
                problems.extend(found)
                continue
            elif earlier is None and problems:  # after a problem: only check the rest
                continue
            else:
                task, pred = ImageTask(gt.images[slot], pred, source, settings, gt_cache), None
            if earlier is not None:
                earlier.append(ProblemList())
                problems.move_to(earlier[-1])
            yield slot, task, pred, n_objects

    def _evaluate(self, slot, pred):
        """(prediction_digest, pack_record) of one checked update (in one of the Evaluator's
        threads, so that the digest's pass over the masks is not on the caller's path)."""
        try:
            result = evaluate_image(ImageTask(self.gt.images[slot], pred, None, self.settings, self.gt_cache))
            if result.problems:  # the GT's PNG
                raise SGEvalError(result.problems)
            return prediction_digest(pred), pack_record(result, self.gt.images[slot], self.settings)
        finally:
            self._free.release()

    def _drain(self, finished_only=False, raise_problems=True):
        """Store the records of the evaluated updates (all: after waiting for them). An image whose
        evaluation failed is forgotten, and its problems are raised (any other exception once,
        noting the image, after every finished record is stored)."""
        problems, failure = [], None
        for slot in [slot for slot, future in self._running.items() if future.done() or not finished_only]:
            try:
                digest, values = self._running.pop(slot).result()
                self.images[slot] = self.images[slot]._replace(digest=digest, values=values)
            except SGEvalError as error:
                del self.images[slot]
                problems += error.problems
            except Exception as error:  # noqa: BLE001 -- raised below, once, the image forgotten
                del self.images[slot]
                error.add_note(f"sgeval: evaluating image {self.gt.images[slot].image_id} failed; its update "
                               f"is not counted")
                failure = failure or error
        if not finished_only and self.gt_cache is not None:
            self.gt_cache.flush()  # the GT images prepared meanwhile, into the folder
        if failure is not None and raise_problems:
            raise failure
        if problems and raise_problems:
            raise SGEvalError(problems)

    def _unknown_image(self, image_id, where):
        text = f"{where}: not an image of the GT's test split (test_image_ids of {self.config.gt})"
        if re.fullmatch("[0-9]{1,18}", image_id) and int(image_id) < len(self.gt.images):
            text += (f"; it looks like a dataset index: the evaluated image at index {int(image_id)} has "
                     f"image_id {self.gt.images[int(image_id)].image_id} (pass the GT's image_id)")
        return text

    def _add(self, table, key, record):
        """Count another update of a known image (or the first); different arrays are an error."""
        known = table.get(key)
        image_id = key if table is self.extra else self.gt.images[key].image_id
        if known is not None and known.digest != record.digest:
            raise SGEvalError([f"image {image_id}: updated twice with different predictions (a padded "
                               f"duplicate must repeat the same arrays)"])
        if known is not None and known.updates + record.updates > MAX_COUNT:
            raise SGEvalError([f"image {image_id}: more than {MAX_COUNT} updates"])
        table[key] = record if known is None else known._replace(updates=known.updates + record.updates)

    def state_dict(self):
        """The state as a plain picklable dict of integer numpy arrays and the fingerprint."""
        self._drain()
        slots = sorted(self.images)
        records = [self.images[slot] for slot in slots]
        values = [record.values for record in records]
        extra = sorted(self.extra)
        return {"sgeval_state": 1, "fingerprint": self.fingerprint(),
                "slots": np.array(slots, np.int64),
                "updates": np.array([record.updates for record in records], np.int64),
                "digests": np.frombuffer(b"".join(record.digest for record in records), np.uint8).reshape(-1, DIGEST),
                "offsets": np.cumsum([0] + [len(v) for v in values], dtype=np.int64),
                "values": _smallest(np.concatenate(values) if values else np.zeros(0, np.uint8)),
                "extra_ids": extra,
                "extra_updates": np.array([self.extra[i].updates for i in extra], np.int64),
                "extra_digests": np.frombuffer(b"".join(self.extra[i].digest for i in extra),
                                               np.uint8).reshape(-1, DIGEST),
                "other_records": self.other_records}

    def load_state_dict(self, state):
        """Replace the state by a state_dict() (checked: same fingerprint, well formed)."""
        self._drain()
        self.images, self.extra, self.other_records = self._read_state(state)

    def merge(self, other):
        """Add another Evaluator's state or a state_dict (commutative and associative: updates of
        an image add up). Nothing changes when it fails."""
        self._drain()
        images, extra, other_records = self._read_state(other.state_dict() if isinstance(other, Evaluator) else other)
        if self.other_records + other_records > MAX_COUNT:
            raise SGEvalError([f"state_dict: more than {MAX_COUNT} records of other images in all"])
        saved = self.images, self.extra
        self.images, self.extra = dict(self.images), dict(self.extra)
        try:
            for slot, record in images.items():
                self._add(self.images, slot, record)
            for image_id, record in extra.items():
                self._add(self.extra, image_id, record)
        except SGEvalError:
            self.images, self.extra = saved
            raise
        self.other_records += other_records
        return self

    def sync(self, all_gather_object=None, world_size=None):
        """Make every rank's state the merge of all ranks' states. Under torch.distributed (when
        torch is imported and a process group is initialised) one all_gather_object of the state;
        all_gather_object(output_list, obj) and world_size stand in for it. Else nothing to do."""
        if all_gather_object is None:
            dist = getattr(sys.modules.get("torch"), "distributed", None)
            if dist is None or not dist.is_available() or not dist.is_initialized():
                return self
            all_gather_object, world_size = dist.all_gather_object, dist.get_world_size()
        if not callable(all_gather_object):
            raise SGEvalError([f"Evaluator.sync: all_gather_object must be callable as all_gather_object(output_list, "
                               f"obj), not a {type(all_gather_object).__name__}"])
        if not isinstance(world_size, (int, np.integer)) or isinstance(world_size, bool) \
                or not 1 <= world_size <= MAX_RANKS:
            raise SGEvalError([f"Evaluator.sync: world_size must be the number of ranks, an integer from 1 to "
                               f"{MAX_RANKS}, not {reprlib.repr(world_size)}"])
        gathered = [None] * int(world_size)
        all_gather_object(gathered, self.state_dict())
        if all(_same_state(state, gathered[0]) for state in gathered[1:]):  # synced already, nothing new
            gathered = gathered[:1]
        saved = self.images, self.extra, self.other_records
        self.reset()
        try:
            for state in gathered:
                self.merge(state)
        except BaseException:
            self.images, self.extra, self.other_records = saved
            raise
        return self

    def fingerprint(self):
        """What a state depends on: the sgeval version, the GT, training and zero-shot files' bytes
        and every setting that decides the counts."""
        if self._fingerprint is None:
            config, digest = self.config, hashlib.sha256()
            for path in (config.gt, config.train_gt, config.zeroshot_triplets):
                digest.update(_file_digest(path))
            settings = self.settings._asdict()
            if not self.settings.measures:  # (states of runs without measures as before they existed)
                settings = {key: value for key, value in settings.items() if key not in MEASURE_SETTINGS}
            digest.update(json.dumps([__version__, settings], sort_keys=True).encode())
            self._fingerprint = digest.hexdigest()
        return self._fingerprint

    def _read_state(self, state):
        """{slot: ImageRecord}, {image id: ImageRecord}, other_records of a state_dict, after checking it."""
        where = "state_dict"
        if not isinstance(state, dict) or type(state.get("sgeval_state")) is not int or state["sgeval_state"] != 1:
            raise SGEvalError([f"{where}: not an sgeval Evaluator state"])
        if not isinstance(state.get("fingerprint"), str) or state["fingerprint"] != self.fingerprint():
            raise SGEvalError([f"{where}: made under another configuration (the GT, training or zero-shot files, "
                               f"the sgeval version, mode, task, protocols, k, imr_k, iou_threshold, audit, "
                               f"confusion_k or subsets differ); states merge only under the same one"])
        try:
            images, extra, other_records = _state_records(state, len(self.gt.images), self.gt.skipped, self.settings)
        except (KeyError, TypeError, ValueError, IndexError, OverflowError) as error:
            raise SGEvalError([f"{where}: malformed state: {type(error).__name__}: {error}"]) from None
        problems = ProblemList()
        for slot, record in images.items():
            problems += check_record_counts(self.gt.images[slot], *unpack_record(record.values, self.settings),
                                            self.settings, functools.partial(self._reference, slot))
        if problems:
            raise SGEvalError(problems)
        return images, extra, other_records

    def _reference(self, slot, unit):
        """A unit's gt_counts of a GT slot (made once)."""
        if (slot, unit.name) not in self._references:
            self._references[slot, unit.name] = unit.gt_counts(self.gt.images[slot], self.settings)
        return self._references[slot, unit.name]

    def compute(self, missing="empty"):
        """The results dict (as ``evaluate`` returns it) of the updates so far; the state is left
        as it is. missing: ``empty`` scores the GT images without an update as predicting
        nothing (as a file without their records); ``skip`` evaluates the updated images only."""
        return self._compute(missing)[0]

    def _compute(self, missing):
        self._drain()
        if missing not in ("empty", "skip"):
            raise SGEvalError([f"Evaluator.compute: missing must be 'empty' or 'skip', not {missing!r}"])
        slots = range(len(self.gt.images)) if missing == "empty" else sorted(self.images)
        gt = self.gt if missing == "empty" else dataclasses.replace(self.gt, images=[self.gt.images[s] for s in slots])
        counted = self._counted(slots)
        scope = {"scope": "all" if missing == "empty" else "updated",
                 "duplicate_updates": sum(r.updates - 1 for table in (self.images, self.extra) for r in table.values())}
        return build_results(self.config, gt, counted, self.training, self.groups, scope, self.subsets,
                             self.converted_task), gt, counted

    def _counted(self, slots):
        """The Counted of the given GT slots (those without an update as predicting nothing)."""
        settings = self.settings
        stores = {unit.name: CountStore(len(slots), unit.shapes(settings)) for unit in run_units(settings)}
        audits = np.zeros((len(slots), len(AUDIT_FIELDS)), np.int64)
        checks = np.zeros((len(slots), len(CHECK_FIELDS)), np.int64)
        C = settings.n_predicates
        confusion = {protocol: np.zeros(C * (C + 1), np.int64) for protocol in settings.protocols}
        predicted = np.zeros(len(slots), bool)
        for index, slot in enumerate(slots):
            record = self.images.get(slot)
            predicted[index] = record is not None
            image = self.gt.images[slot]
            values = record.values if record is not None else pack_record(
                evaluate_image(ImageTask(image, None, None, settings)), image, settings)
            columns, blocks, audit, check = unpack_record(values, settings)
            for name, fields in blocks.items():
                stores[name].images[index] = columns, fields
                if name in confusion and "confusion" in fields:
                    np.add.at(confusion[name], *fields["confusion"])
            if audit is not None:
                audits[index] = audit
            checks[index] = check
        return Counted({name: stores.pop(name) for name in settings.protocols}, audits, checks, predicted,
                       len(self.extra) + self.other_records,
                       {protocol: cells.reshape(C, C + 1) for protocol, cells in confusion.items()}, stores)


DIGEST = 16  # bytes of an update's digest
MAX_RANKS = 1 << 20  # Evaluator.sync: the most ranks a world_size may say


def _image_id_text(image_id):
    """str(image_id) for Evaluator.update; SGEvalError when that fails."""
    try:
        return str(image_id)
    except Exception as error:  # noqa: BLE001 -- any object may be given; its __str__ may raise anything
        raise SGEvalError([f"Evaluator.update: the image id (a {type(image_id).__name__}) cannot be made a "
                           f"string: str() raised {type(error).__name__}"]) from None


def _same_state(a, b):
    """Whether two state_dicts hold the same updates (every rank's after a sync)."""
    try:
        return a.keys() == b.keys() and all(np.array_equal(a[key], b[key]) if isinstance(a[key], np.ndarray)
                                            else a[key] == b[key] for key in a)
    except Exception:  # noqa: BLE001 -- anything a stand-in gathered: not the same (merge says what is wrong)
        return False


class ImageRecord(typing.NamedTuple):
    """One updated image in an Evaluator's state."""

    digest: bytes | None  # prediction_digest of its arrays (None while its update is evaluated)
    updates: int  # how often it was updated (padded duplicates add up)
    values: np.ndarray | None  # pack_record of its counts (None for a test image without relations)


def settings_of(rules, mode, n_predicates, subsets=(), gt=None):
    """The Settings every image of a run is evaluated with, of its Rules and mode (subsets:
    resolve_subsets of its specs; gt: the GroundTruth, whose vocabulary panoptic quality counts over)."""
    measures = config_measures(rules)
    return Settings(mode, tuple(dict.fromkeys((rules.protocol, *rules.protocols))), rules.iou_threshold, rules.k,
                    rules.imr_k, n_predicates, rules.audit, rules.task, rules.confusion_k, tuple(subsets), measures,
                    rules.pq_merge if measures else None, len(gt.object_classes) if gt and measures else 0,
                    gt.n_things if gt and measures else 0, rules.pq_rule if measures else None)


def _file_digest(path):
    """The SHA-256 of a file's bytes (b'' for no file)."""
    if not path:
        return b""
    digest = hashlib.sha256()
    try:
        with open_regular(path, "a file of the configuration") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
    except OSError as error:
        raise SGEvalError([f"{path}: cannot read: {error.strerror or error}"]) from None
    return digest.digest()


def prediction_digest(pred):
    """DIGEST bytes identifying a prediction's arrays (a mask file by its name, given masks by a
    CRC-32 and an Adler-32 of their packed bits)."""
    digest = hashlib.sha256()
    for array in (pred.categories, pred.boxes, pred.scores, pred.triplets, pred.ng_triplets, pred.triplet_scores,
                  pred.ng_triplet_scores):
        digest.update(b"-" if array is None else repr(array.shape).encode() + np.ascontiguousarray(array).tobytes())
    if pred.bits is not None:
        digest.update(f"{pred.bits.shape} {_bits_checksums(pred.bits)}".encode())
    digest.update(repr(pred.seg_filename).encode())
    if pred.panoptic is not None:  # its ids, categories, void index, and its PNG's name or its bits
        panoptic = pred.panoptic
        digest.update(repr((panoptic.segment_ids.tolist(), panoptic.categories.tolist(), panoptic.void_index,
                            panoptic.file)).encode())
        if panoptic.bits is not None:
            digest.update(_bits_checksums(panoptic.bits).encode())
    return digest.digest()[:DIGEST]


def _bits_checksums(bits):
    """'<CRC-32> <Adler-32>' of packed masks' bytes (prediction_digest)."""
    data = np.ascontiguousarray(bits).view(np.uint8)
    return f"{imagecodecs.deflate_crc32(data)} {imagecodecs.deflate_adler32(data)}"


def pack_record(result, image, settings):
    """An image's ImageResult as one 1-D array of non-negative integers in the smallest unsigned
    dtype that holds them (unpack_record reads it back): the predicates of its GT relations (the
    only columns where per-predicate counts can be non-zero), then per protocol its fixed-size
    count fields in declared order (per-predicate ones at those columns) and its ragged ones
    (their length, then the values), the audit counts (when on) and the CHECK_FIELDS counts."""
    columns = np.unique(image.relations[:, 2])
    parts = [[len(columns)], columns]
    for part in record_layout(settings):
        counts = result.counts[part.unit]
        for name, _, per_predicate in part.fixed:
            value = np.asarray(counts[name], np.int64)
            parts.append(value[..., columns] if per_predicate else value)
        for field in part.ragged:
            value = counts.get(field.name, np.zeros((field.dims[0], 0), np.int64))
            parts += [[value.shape[1]], value]
    parts += ([result.audit] if settings.audit else []) + [result.check]
    return _smallest(np.concatenate([np.asarray(part, np.int64).ravel() for part in parts]))


class RecordPart(typing.NamedTuple):
    """One unit's part of an image's record: its fixed-size count fields (name, shape,
    per-predicate) and its ragged CountFields, in declared order."""

    unit: str
    fixed: tuple
    ragged: tuple


def record_layout(settings):
    """The RecordParts of a record under settings, in record order (run_units)."""
    return _record_layout(settings.protocols, settings.measures, tuple(dimensions(settings).items()))


@functools.lru_cache(maxsize=64)
def _record_layout(protocols, measures, sizes):
    units = [PROTOCOLS[name] for name in protocols] + [MEASURES[name] for name in measures]
    sizes = dict(sizes)
    return tuple(RecordPart(unit.name, tuple((field.name, tuple(sizes.get(dim, dim) for dim in field.dims),
                                              field.per_predicate) for field in unit.fields if not field.ragged),
                            tuple(field for field in unit.fields if field.ragged)) for unit in units)


def _smallest(values):
    """Non-negative integers in the smallest unsigned dtype that holds them (else int64)."""
    if values.size and values.min() < 0:
        return values.astype(np.int64)
    return values.astype(np.min_scalar_type(int(values.max()) if values.size else 0))


def unpack_record(values, settings):
    """pack_record's array -> (columns, {protocol: {field: array}} (per-predicate fields at the
    columns only; a ragged field (rows, n)), audit or None, check). ValueError when the array does
    not have the layout."""
    values = np.asarray(values).astype(np.int64)
    n_columns = int(values[0])
    columns, at, blocks = values[1:1 + n_columns], 1 + n_columns, {}
    if len(columns) != n_columns or (n_columns and (columns.min() < 0 or columns.max() >= settings.n_predicates)):
        raise ValueError("the predicate columns are out of range")

    def take(shape):
        nonlocal at
        size = math.prod(shape)
        if at + size > len(values):
            raise ValueError(f"a record of {len(values)} values is too short for its layout")
        at += size
        return values[at - size:at].reshape(shape)

    for part in record_layout(settings):
        name, blocks[part.unit] = part.unit, {}
        for field, shape, per_predicate in part.fixed:
            blocks[name][field] = take(shape[:-1] + (n_columns,) if per_predicate else shape)
        for field in part.ragged:
            blocks[name][field.name] = array = take((field.dims[0], int(take((1,))[0])))
            bounds = field.bounds(settings)
            if array.size and any(bound is not None and (row.min() < 0 or row.max() >= bound)
                                  for row, bound in zip(array, bounds)):
                raise ValueError(f"field '{field.name}' of protocol {name} is out of range")
    audit = take((len(AUDIT_FIELDS),)) if settings.audit else None
    check = take((len(CHECK_FIELDS),))
    if at != len(values):
        raise ValueError(f"a record of {len(values)} values is longer than its layout ({at})")
    return columns, blocks, audit, check


def _state_records(state, n_slots, skipped, settings):
    """The ImageRecords of a state_dict ({slot: ...}, {image id: ...}) and its other_records;
    ValueError, KeyError, TypeError, IndexError or OverflowError when it is malformed."""
    slots, updates, digests, offsets = _state_arrays(state, ("slots", "updates", "digests", "offsets"), DIGEST)
    values = np.asarray(state["values"])
    if values.ndim != 1 or values.size and (values.dtype.kind not in "iu" or values.astype(np.int64).min() < 0
                                            or values.max() > 2 ** 62):
        raise ValueError("'values' must be one row of counts (non-negative integers)")
    if len(slots) and (slots.min() < 0 or slots.max() >= n_slots) or len(np.unique(slots)) < len(slots):
        raise ValueError("image slots out of range or repeated")
    if offsets[0] != 0 or offsets[-1] != len(values) or (np.diff(offsets) < 1).any():
        raise ValueError("the record offsets do not cover the values")
    images = {}
    for slot, count, digest, start, stop in zip(slots.tolist(), updates.tolist(), digests, offsets, offsets[1:]):
        record = values[start:stop].astype(np.int64)
        unpack_record(record, settings)
        images[slot] = ImageRecord(digest.tobytes(), count, _smallest(record))
    extra_ids = state["extra_ids"]
    if not isinstance(extra_ids, list) or not all(isinstance(i, str) and i in skipped for i in extra_ids) \
            or len(set(extra_ids)) < len(extra_ids):
        raise ValueError("'extra_ids' must list distinct test images without relations")
    extra_updates, extra_digests = _state_arrays(state, ("extra_updates", "extra_digests"), DIGEST, len(extra_ids))
    extra = {image_id: ImageRecord(digest.tobytes(), count, None)
             for image_id, count, digest in zip(extra_ids, extra_updates.tolist(), extra_digests)}
    if type(state["other_records"]) is not int or not 0 <= state["other_records"] <= MAX_COUNT:
        raise ValueError(f"'other_records' must be a count (at most {MAX_COUNT})")
    return images, extra, state["other_records"]


MAX_COUNT = 1 << 40  # a state's rows, audit counts, ranks per GT row and updates of an image are at most this


def check_record_counts(image, columns, blocks, audit, check, settings, reference):
    """The problems of one image's record read from a state, which cannot all come from one
    prediction of it: unpack_record's arrays; reference(unit) the unit's gt_counts of the image.
    Each unit checks its own fields (count_problems: the GT's counts are the image's, hits at most
    what they count and not decreasing as k grows, ...); the check and audit counts are bounded."""
    where = f"state_dict: image {image.image_id}"
    if not np.array_equal(columns, np.unique(image.relations[:, 2])):
        return [f"{where}: its predicate columns are not its GT's predicates"]
    problems = []
    for unit in run_units(settings):
        problems += unit.count_problems(blocks[unit.name], columns, reference(unit), settings, f"{where}: {unit.name}")
    if (check > MAX_COUNT).any() or (check[1:3] > check[0]).any() or (check[3:] > 1).any() \
            or audit is not None and (audit > MAX_COUNT).any():  # CHECK_FIELDS: rows, two parts of them, three flags
        problems.append(f"{where}: its row counts or flags are out of range")
    return problems


def field_problems(fields, columns, reference, unit_fields, settings, where):
    """The rules every unit's fields follow (CountField.gt_only, .limit, cut-off axes): the GT's
    counts equal reference's (per-predicate ones at the columns), each hit count at most the count
    it is bounded by, and hits not decreasing as the cut-off grows (k resolved for the image's GT
    rows in reference)."""
    declared = {field.name: field for field in unit_fields}
    problems = [f"{where} field '{name}' is not its GT's ({fields[name].tolist()!r:.60})"
                for name, field in declared.items() if field.gt_only and not np.array_equal(
                    fields[name], reference[name][..., columns] if field.per_predicate else reference[name])]
    if problems:
        return problems
    for name, field in declared.items():
        if field.limit is not None:
            bound = fields[field.limit]
            if 1 < bound.ndim < fields[name].ndim:  # (S, C) bounds (S, K, C)
                bound = bound.reshape(bound.shape[:1] + (1,) * (fields[name].ndim - bound.ndim) + bound.shape[1:])
            if (fields[name] > bound).any():
                problems.append(f"{where} field '{name}' counts more than its '{field.limit}'")
        for axis, order in cutoff_orders(field, settings, int(reference.get("n_rows", 0))):
            if (np.diff(fields[name].take(order, axis=axis), axis=axis) < 0).any():
                problems.append(f"{where} field '{name}' decreases as k grows")
    return problems


def cutoff_orders(field, settings, n_rows):
    """(axis, the order of its cut-offs by size) of a field's cut-off axes (K, K+1, IMR)."""
    cutoffs = {"K": settings.k, "K+1": settings.k + (OI_SCORE_K,), "IMR": settings.imr_k}
    return [(axis, np.argsort(k_values(cutoffs[dim], n_rows), kind="stable"))
            for axis, dim in enumerate(field.dims) if dim in cutoffs]


def _state_arrays(state, keys, digest_size, n=None):
    """The state's arrays named keys: [ids or slots (n,),] update counts (n,) >= 1, digests (n,
    digest_size) uint8[, offsets (n + 1,)], checked."""
    arrays = [np.asarray(state[key]) for key in keys]
    n = len(arrays[0]) if n is None else n
    shapes = {"slots": (n,), "updates": (n,), "extra_updates": (n,), "digests": (n, digest_size),
              "extra_digests": (n, digest_size), "offsets": (n + 1,)}
    for key, array in zip(keys, arrays):
        if array.shape != shapes[key] or array.size and (array.dtype.kind not in "iu" or key.endswith("digests")
                                                         and array.dtype != np.uint8):
            raise ValueError(f"'{key}' must be an integer array of shape {shapes[key]}"
                             + " and dtype uint8" * key.endswith("digests"))
    counts = arrays[keys.index("updates") if "updates" in keys else keys.index("extra_updates")]
    if counts.size and (counts.min() < 1 or counts.max() > MAX_COUNT):
        raise ValueError(f"an update count below 1 or beyond {MAX_COUNT}")
    return arrays


# ---------------------------------------------------------------------------------------------
# 4. Predictions in: one check, whichever way they come (Evaluator.update's arrays, a file's records)
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass
class PredImage:
    """One image's prediction, checked. triplets / ng_triplets: (N, 3) int64 [s, o, p]."""

    image_id: str
    categories: np.ndarray  # (P,) int64
    boxes: np.ndarray | None  # (P, 4) float64 (box mode)
    scores: np.ndarray | None  # (P,) float64, None unless every instance has a score
    triplets: np.ndarray
    ng_triplets: np.ndarray
    seg_filename: str | None
    bits: np.ndarray | None = None  # (P, W) packed masks given as arrays (Evaluator.update); else the TIFF's
    triplet_scores: np.ndarray | None = None  # (N,) float64, one per row of triplets, when given
    ng_triplet_scores: np.ndarray | None = None  # (M,) float64 for ng_triplets (the triplet_scores without them)
    row_lists: dict = dataclasses.field(default_factory=dict)  # more named lists: {name: (rows (N, 3), scores)}
    panoptic: PredPanoptic | None = None  # its own panoptic segmentation (panoptic quality scores it when given)

    def row_list(self, names):
        """(rows (N, 3), scores (N,) or None) of the first of the named lists this prediction has
        (``triplets`` and ``ng_triplets`` are its own fields; ng_triplets defaults to triplets)."""
        for name in names:
            if name in self.row_lists:
                return self.row_lists[name]
            if name in ROW_FIELDS:
                return getattr(self, name), getattr(self, ROW_FIELDS[name])
        return NO_ROWS, None

    def scores_field(self, names):
        """The field that holds (or would hold) the scores of row_list(names), for problem lines."""
        for name in names:
            if name in self.row_lists:
                return f"row_lists.{name}.scores"
            if name == "ng_triplets" and self.ng_triplets is self.triplets:
                return "triplet_scores"  # no ng_triplets given: the ng list is triplets
            if name in ROW_FIELDS:
                return ROW_FIELDS[name]
        return f"row_lists.{names[0]}.scores"


ROW_FIELDS = {"triplets": "triplet_scores", "ng_triplets": "ng_triplet_scores"}  # the two lists of the format's own
ROW_LIST_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}")
MAX_ROW_LISTS = 16  # named row lists of one prediction
NO_ROWS = np.zeros((0, 3), np.int64)


class Decoded(typing.NamedTuple):
    """A prediction's fields as arrays, before checked_prediction checks what they hold."""

    labels: np.ndarray  # (P,) int64
    boxes: np.ndarray | None  # (P, 4) float64, or None (not given)
    scores: np.ndarray | None  # (P,) float64, or None (not given for every instance)
    lists: dict  # {name: (rows (N, 3) int64, scores (N,) float64 or None)}: triplets, ng_triplets, named lists
    box_field: str  # how the source names a box ('boxes', 'bbox'), for the problem lines


def checked_prediction(image_id, where, decoded, n_objects, n_predicates, mode, problems):
    """The check every prediction passes, from Evaluator.update or a file -> PredImage (masks not
    yet read), or None after appending every problem: at most MAX_INSTANCES instances, categories
    and row indices in range, one score per row of a list, boxes required in box mode and there
    x1 <= x2, y1 <= y2."""
    labels, boxes, n = decoded.labels, decoded.boxes, len(decoded.labels)
    if n > MAX_INSTANCES:
        problems.append(f"{where}: {n} instances, more than the limit of {MAX_INSTANCES} per image")
        return None
    before = len(problems)
    _check_indices(labels[:, None], "instance", [n_objects], ["category"], where, problems)
    for name, (rows, scores) in decoded.lists.items():
        label = name[:-1] if name in ROW_FIELDS else f"row_lists.{name} row"
        _check_indices(rows, label, [n, n, n_predicates], ["instance", "instance", "predicate"], where, problems)
        scores_field = ROW_FIELDS.get(name, f"row_lists.{name}.scores")
        if scores is not None and len(scores) != len(rows):
            problems.append(f"{where}: field '{scores_field}' has {len(scores)} scores for {len(rows)} rows of "
                            f"'{name if name in ROW_FIELDS else f'row_lists.{name}.triplets'}'")
    if mode == "box" and boxes is None:
        problems.append(f"{where}: field '{decoded.box_field}' is required in box mode (no gt_seg)")
    elif mode == "box" and ((boxes[:, 2] < boxes[:, 0]) | (boxes[:, 3] < boxes[:, 1])).any():
        bad = int(np.flatnonzero((boxes[:, 2] < boxes[:, 0]) | (boxes[:, 3] < boxes[:, 1]))[0])
        problems.append(f"{where}: instance {bad}: field '{decoded.box_field}' has x2 < x1 or y2 < y1")
    if len(problems) > before or "triplets" not in decoded.lists:  # (a list that did not decode: its problem)
        return None
    lists = dict(decoded.lists)
    triplets, triplet_scores = lists.pop("triplets")
    ng_triplets, ng_triplet_scores = lists.pop("ng_triplets", (triplets, triplet_scores))
    return PredImage(image_id, labels, boxes if mode == "box" else None, decoded.scores, triplets,
                     ng_triplets, None, None, triplet_scores, ng_triplet_scores, lists)


# ---------------------------------------------------------------------------------------------
# 4b. Evaluator.update's arguments as arrays
# ---------------------------------------------------------------------------------------------


def _numpy(value):
    """A numpy array of a numpy array, a torch tensor on any device (without importing torch) or a
    nested list."""
    if hasattr(value, "detach") and hasattr(value, "cpu") and hasattr(value, "numpy"):
        value = value.detach().cpu().numpy()
    return np.asarray(value)


def _as_array(value, name, where, problems):
    """_numpy(value), or None after a problem (whatever a tensor-like object's methods raise)."""
    try:
        return _numpy(value)
    except Exception as error:  # noqa: BLE001 - a stranger's object: any of its methods may raise anything
        problems.append(f"{where}: field '{name}' is not an array: {type(error).__name__}: {error}")
        return None


def _update_field(value, name, shape, kinds, where, problems):
    """An update argument as an int64 (kinds 'iu') or float64 ('iuf') array of the given shape
    (None = any length; an empty array of any shape is 0 rows), else None after a problem."""
    array = _as_array(value, name, where, problems)
    if array is None:
        return None
    if array.shape == (0,) and len(shape) == 2:  # an empty list: no rows
        array = array.reshape(0, shape[1])
    kind = "integers" if kinds == "iu" else "numbers"
    if array.dtype.kind not in kinds and array.size:
        problems.append(f"{where}: field '{name}' must hold {kind}, not {array.dtype}")
    elif array.ndim != len(shape) or any(size is not None and size != n for size, n in zip(shape, array.shape)):
        wanted = "(" + ", ".join("n" if size is None else str(size) for size in shape) + ("," if len(shape) == 1 else "")
        problems.append(f"{where}: field '{name}' has shape {array.shape}, expected {wanted})")
    elif array.dtype.kind == "u" and array.size and array.max() > np.iinfo(np.int64).max:
        problems.append(f"{where}: field '{name}' holds integers beyond the int64 range")
    elif array.dtype.kind == "f" and not np.isfinite(array).all():
        problems.append(f"{where}: field '{name}' holds NaN or inf")
    else:
        return array.astype(np.int64 if kinds == "iu" else np.float64)
    return None


def update_prediction(image_id, where, fields, n_objects, settings, height, width):
    """Evaluator.update's arguments (``fields``: its keyword arguments) -> PredImage, its masks
    packed: the arrays decoded (_update_lists), then checked_prediction, the check a file's records
    pass too. SGEvalError with every problem. height, width: the GT image's."""
    problems = [f"{where}: field '{name}' is required (an empty array is valid)"
                for name in ("labels", "triplets") if fields.get(name) is None]
    if problems:
        raise SGEvalError(problems)
    labels = _update_field(fields["labels"], "labels", (None,), "iu", where, problems)
    lists = _update_lists(fields, where, problems)
    if labels is None or lists is None:
        raise SGEvalError(problems)
    n = len(labels)
    boxes, scores = fields.get("boxes"), fields.get("scores")
    if boxes is not None and n <= MAX_INSTANCES:  # (boxes that do not decode: checked no further)
        boxes = _update_field(boxes, "boxes", (n, 4), "iuf", where, problems)
        boxes = np.zeros((n, 4)) if boxes is None else boxes
    scores = None if scores is None or n > MAX_INSTANCES else _update_field(scores, "scores", (n,), "iuf", where,
                                                                            problems)
    pred = checked_prediction(image_id, where, Decoded(labels, boxes, scores, lists, "boxes"), n_objects,
                              settings.n_predicates, settings.mode, problems)
    masks = fields.get("masks")
    bits = update_masks(masks, n, height, width, where, problems) \
        if settings.mode == "mask" and n <= MAX_INSTANCES and (n or masks is not None) else None
    panoptic = fields.get("panoptic")
    panoptic = update_panoptic(panoptic, n_objects, height, width, where, problems) \
        if panoptic is not None and settings.mode == "mask" else None  # (box mode reads no masks)
    if problems:
        raise SGEvalError(problems)
    pred.bits, pred.panoptic = bits, panoptic
    return pred


def _update_lists(fields, where, problems):
    """{name: (rows (N, 3) int64, scores (N,) float64 or None)} of update's triplets, ng_triplets
    (when given), their scores and row_lists; None after a problem."""
    before, lists = len(problems), {}
    for name, scores_name in ROW_FIELDS.items():
        rows, scores = fields.get(name), fields.get(scores_name)
        if rows is None and scores is not None:
            problems.append(f"{where}: field '{scores_name}' is given without '{name}'")
        if rows is not None:
            lists[name] = (_update_field(rows, name, (None, 3), "iu", where, problems),
                           None if scores is None else _update_field(scores, scores_name, (None,), "iuf", where,
                                                                     problems))
    named = fields.get("row_lists") or {}
    if not isinstance(named, collections.abc.Mapping) or len(named) > MAX_ROW_LISTS:
        problems.append(f"{where}: field 'row_lists' must map at most {MAX_ROW_LISTS} names to row lists")
        named = {}
    for name, value in named.items():
        if not isinstance(name, str) or not ROW_LIST_NAME.fullmatch(name) or name in ROW_FIELDS:
            problems.append(f"{where}: field 'row_lists': {name!r} is not a list name (1 to 64 letters, digits, "
                            f"'.', '_', '+', '-'; not triplets or ng_triplets)")
            continue
        if isinstance(value, collections.abc.Mapping):
            value = value.get("triplets"), value.get("scores")
        rows, scores = value if isinstance(value, tuple) and len(value) == 2 else (value, None)
        lists[name] = (_update_field(rows, f"row_lists.{name}.triplets", (None, 3), "iu", where, problems),
                       None if scores is None else _update_field(scores, f"row_lists.{name}.scores", (None,),
                                                                 "iuf", where, problems))
    return lists if len(problems) == before else None


def update_masks(masks, n, height, width, where, problems):
    """Packed (n, W) masks of an update's ``masks``: (n, H, W) bool or 0/1 integers, or Panoptic
    (an (H, W) integer map, the n segment ids); None after a problem. H, W: the GT image's."""
    if masks is None:
        problems.append(f"{where}: field 'masks' is required in mask mode (gt_seg is set)")
        return None
    if isinstance(masks, PackedMasks):
        return _packed_masks(masks.bits, n, height, width, where, problems)
    if isinstance(masks, Panoptic) or isinstance(masks, (tuple, list)) and len(masks) == 2 and \
            _ndim(masks[0]) == 2 and _ndim(masks[1]) == 1:
        return _panoptic_masks(*masks, n, height, width, where, problems)
    array = _as_array(masks, "masks", where, problems)
    if array is None:
        return None
    if n == 0 and array.shape in ((0,), (0, height, width)):  # no masks, of any dtype (nothing to threshold)
        return np.zeros((0, _words(height * width)), np.uint64)
    size = (height, width)
    if array.dtype.kind not in "biu":
        problems.append(f"{where}: field 'masks' must be bool or 0/1 integers, not {array.dtype} (float masks are "
                        f"not thresholded: compare them with your threshold first)")
    elif array.shape != (n, *size):
        problems.append(f"{where}: field 'masks' has shape {array.shape}; expected ({n}, {size[0]}, {size[1]}) "
                        f"(one mask per instance, the GT image's height and width)")
    elif array.dtype.kind != "b" and array.size and (array.min() < 0 or array.max() > 1):
        problems.append(f"{where}: field 'masks' holds values other than 0 and 1")
    else:
        return pack_masks(array.view(bool) if array.dtype.itemsize == 1 else array != 0)
    return None


def _packed_masks(bits, n, height, width, where, problems):
    """Packed (n, W) masks of the PackedMasks form, checked (its layout, the padding bits zero)."""
    n_bytes = (height * width + 7) // 8
    array = _as_array(bits, "masks", where, problems)
    if array is None:
        return None
    if array.dtype != np.uint8 or array.shape != (n, n_bytes):
        problems.append(f"{where}: field 'masks' (PackedMasks) must be ({n}, {n_bytes}) uint8, not {array.dtype} "
                        f"{array.shape} (one row of ceil(H W / 8) bytes per instance, the GT image's H x W)")
        return None
    spare = 8 * n_bytes - height * width
    if spare and n and (array[:, -1] & np.uint8((1 << spare) - 1)).any():
        problems.append(f"{where}: field 'masks' (PackedMasks) sets bits beyond the image's {height} x {width} pixels")
        return None
    if n_bytes % 8 == 0 and array.flags.c_contiguous:
        return array.view(np.uint64)
    words = np.zeros((n, _words(height * width)), np.uint64)
    words.view(np.uint8)[:, :n_bytes] = array
    return words


def _ndim(value):
    """The number of dimensions of an array, tensor or nested list (-1 for anything else)."""
    ndim = getattr(value, "ndim", None)
    if isinstance(ndim, int):
        return ndim
    try:
        return np.ndim(value) if isinstance(value, (list, tuple)) else -1
    except (ValueError, TypeError):
        return -1


def _panoptic_masks(segment_map, segment_ids, n, height, width, where, problems):
    """Packed masks of the Panoptic form (see update_masks)."""
    before = len(problems)
    ids = _update_field(segment_ids, "masks (segment ids)", (n,), "iu", where, problems)
    size = (height, width)
    image = _update_field(segment_map, "masks (segment map)", size, "iu", where, problems)
    if len(problems) > before:
        return None
    if len(np.unique(ids)) < len(ids):
        problems.append(f"{where}: field 'masks' lists a segment id twice (its instances must not overlap)")
        return None
    bits = np.zeros((n, _words(image.size)), np.uint64)
    pack_segments(image[:, :, None], ids, bits.view(np.uint8))
    return bits


def update_panoptic(value, n_objects, height, width, where, problems):
    """PredPanoptic of update's ``panoptic`` (a PanopticSegmentation), its segments packed; None
    after a problem."""
    if not isinstance(value, PanopticSegmentation):
        problems.append(f"{where}: field 'panoptic' must be an sgeval.PanopticSegmentation(segment_map, segment_ids, "
                        f"categories)")
        return None
    before = len(problems)
    ids = _update_field(value.segment_ids, "panoptic.segment_ids", (None,), "iu", where, problems)
    n = 0 if ids is None else len(ids)
    categories = _update_field(value.categories, "panoptic.categories", (n,), "iu", where, problems)
    image = _update_field(value.segment_map, "panoptic.segment_map", (height, width), "iu", where, problems)
    if len(problems) > before:
        return None
    void = value.void_id_segment
    void = int(void) if isinstance(void, (int, np.integer)) and not isinstance(void, bool) else void
    problem = panoptic_problem(ids, categories, void, n_objects)
    if problem:
        problems.append(f"{where}: field 'panoptic': {problem}")
        return None
    bits = np.zeros((n + 1, _words(image.size)), np.uint64)
    found = pack_segments(image[:, :, None], ids, bits.view(np.uint8)[:n])
    if not found.all():
        problems.append(f"{where}: field 'panoptic': segment id {int(ids[found == 0][0])} has no pixel in the "
                        f"segment map")
        return None
    bits[n] = pack_masks(~np.isin(image, ids)[None])[0]
    return PredPanoptic(categories, ids, _void_index(ids, void), bits)


def _void_index(ids, void_id_segment):
    """The index of the segment void_id_segment names (panoptic_problem checked it is listed); -1: none."""
    return -1 if void_id_segment is None else int(np.flatnonzero(ids == void_id_segment)[0])


def panoptic_problem(ids, categories, void_id_segment, n_objects):
    """What is wrong with a panoptic segmentation's segment list, or None."""
    if len(ids) > MAX_INSTANCES:
        return f"{len(ids)} segments, more than the limit of {MAX_INSTANCES} per image"
    if len(np.unique(ids)) < len(ids):
        return "a segment id is listed twice"
    if len(categories) and (categories.min() < 0 or categories.max() >= n_objects):
        return f"a category is outside 0..{n_objects - 1}"
    if void_id_segment is not None and (type(void_id_segment) is not int or void_id_segment not in ids):
        return f"void_id_segment {void_id_segment!r} is not a listed segment id"
    return None


# ---------------------------------------------------------------------------------------------
# 4c. Prediction files, record by record (Evaluator.update_file's updates)
# ---------------------------------------------------------------------------------------------


class PredSource:
    """Where prediction files live: a .json file, a .zip (read in memory) or a directory."""

    def __init__(self, path):
        self.path, self._zip = str(path), None
        self.kind = "zip" if zipfile.is_zipfile(self.path) else "dir" if os.path.isdir(self.path) else "json"
        self.folder = self.path if self.kind == "dir" else os.path.dirname(self.path)  # of the files

    def read(self, name, limit=None):
        """The bytes of one file; ValueError when it holds more than limit bytes."""
        with self.open(name) as stream:
            data = stream.read(-1 if limit is None else limit + 1)
        if limit is not None and len(data) > limit:
            raise ValueError(f"the file holds more than {limit} bytes, more than its masks can need")
        return data

    def open(self, name):
        """A binary stream of one file."""
        if self.kind != "zip":
            path = os.path.join(self.folder, name)
            if os.path.exists(path) and not os.path.isfile(path):
                raise ValueError(f"'{name}' is not a regular file")
            return open(path, "rb")
        self._zip = self._zip or zipfile.ZipFile(self.path)
        return self._zip.open(name)

    def members(self):
        """Names of the zip members in order (duplicates included), or None for a directory or a
        .json file."""
        if self.kind == "zip":
            with zipfile.ZipFile(self.path) as archive:
                return archive.namelist()

    def member_set(self):
        """set(members()), read once (None for a directory or a .json file)."""
        if not hasattr(self, "_member_set"):
            members = self.members()
            self._member_set = None if members is None else set(members)
        return self._member_set

    def close(self):
        if self._zip is not None:
            self._zip.close()
            self._zip = None

    def __reduce__(self):  # to a pool worker: its own source, opened once per process
        return _worker_source, (self.path,)


_WORKER_SOURCES = {}


def _worker_source(path):
    return _WORKER_SOURCES.get(path) or _WORKER_SOURCES.setdefault(path, PredSource(path))


def unsafe_member(name):
    path = PurePosixPath(name.replace("\\", "/"))
    return path.is_absolute() or ".." in path.parts or ":" in name


def fast_json_decoder():
    """msgspec's JSON decoder when installed, else None. Where it decodes a text, it gives what the
    json module gives (integers of any size included); what it refuses (NaN, Infinity, lone
    surrogates, numbers beyond the float range) the json module decodes instead."""
    try:
        import msgspec
    except ImportError:
        return None
    return msgspec.json.Decoder().decode


class FileRecord(typing.NamedTuple):
    """An image record of a prediction file in the usual shape, as arrays (typed_record_decoder)."""

    id: int | str
    instances: tuple  # (categories (P,) int64, boxes (P, 4) float64, scores (P,) float64)
    lists: dict  # {name: (rows (N, 3) int64, scores (N,) float64 or None)}: triplets, ng_triplets when given
    seg_filename: str | None


@functools.lru_cache(maxsize=1)
def typed_record_decoder():
    """msgspec's decoder of an image record's text in the usual shape -> FileRecord, when msgspec
    is installed (else None): instances of category, bbox and score each; triplets, ng_triplets
    and their scores; seg_filename. It raises ValueError on any other shape (a field more or
    missing, a null, a boolean or a float for an integer) and on numbers the arrays do not hold
    (beyond int64 or the float range): that record is decoded by JSONStream and read by the
    checks of its JSON values, which word the problem."""
    try:
        import msgspec
    except ImportError:
        return None

    class Instance(msgspec.Struct, forbid_unknown_fields=True):
        category: int
        bbox: tuple[float, float, float, float]
        score: float

    class Record(msgspec.Struct, forbid_unknown_fields=True):
        id: int | str
        instances: list[Instance]
        triplets: list[tuple[int, int, int]]
        ng_triplets: list[tuple[int, int, int]] | None = None
        triplet_scores: list[float] | None = None
        ng_triplet_scores: list[float] | None = None
        seg_filename: str | None = None

    return functools.partial(_file_record, msgspec.json.Decoder(Record).decode)


def _file_record(decode, text):
    """FileRecord of a record's text by decode (typed_record_decoder's), else ValueError."""
    record = decode(text)
    if record.ng_triplets is None and record.ng_triplet_scores is not None:
        raise ValueError("ng_triplet_scores without ng_triplets")
    instances = record.instances
    try:
        categories = np.fromiter([item.category for item in instances], np.int64, len(instances))
        boxes = np.fromiter(itertools.chain.from_iterable([item.bbox for item in instances]), np.float64,
                            4 * len(instances)).reshape(-1, 4)
        scores = np.array([item.score for item in instances], np.float64)
        lists = {name: (_typed_rows(rows), None if row_scores is None else np.array(row_scores, np.float64))
                 for name, rows, row_scores in (("triplets", record.triplets, record.triplet_scores),
                                                ("ng_triplets", record.ng_triplets, record.ng_triplet_scores))
                 if rows is not None}
    except OverflowError:
        raise ValueError("an integer beyond int64") from None
    if not (np.isfinite(boxes).all() and np.isfinite(scores).all()
            and all(s is None or np.isfinite(s).all() for _, s in lists.values())):
        raise ValueError("a number beyond the float range")
    return FileRecord(record.id, (categories, boxes, scores), lists, record.seg_filename)


def _typed_rows(rows):
    """(N, 3) int64 of a list of 3-tuples of integers."""
    return np.fromiter(itertools.chain.from_iterable(rows), np.int64, 3 * len(rows)).reshape(-1, 3)


class RecordText(typing.NamedTuple):
    """An image record's text that msgspec found to be JSON (record_text_decoder), its id an
    integer or a string (prediction_records makes it the image id and sets the index)."""

    image_id: int | str
    text: str
    index: int | None = None


@functools.lru_cache(maxsize=1)
def record_text_decoder():
    """A decoder of an image record's text -> RecordText, when msgspec is installed (else None):
    msgspec checks that the text is JSON (what it refuses, the json module decodes as before)
    and reads its id; it raises ValueError where the id is not an integer or a string, and where
    the text has a run of digits longer than the json module decodes as an integer (then the
    json module words the error where it meets it)."""
    try:
        import msgspec
    except ImportError:
        return None

    class RecordId(msgspec.Struct):
        id: int | str

    decode, limit = msgspec.json.Decoder(RecordId).decode, getattr(sys, "get_int_max_str_digits", lambda: 0)()
    zeros, digits = "0" * (limit + 1), str.maketrans("123456789", "000000000")

    def record_text(text):
        record_id = decode(text).id
        if limit and zeros in text.translate(digits):
            raise ValueError("a run of more digits than the json module decodes as an integer")
        return RecordText(record_id, text)
    return record_text


def decoded_record(text):
    """The record of a RecordText's text as JSONStream gives it: a FileRecord, or its JSON values.
    (The decoders nest as deep as the recursion limit lets them: with the limit raised a little,
    they decode whatever record_text_decoder accepted a few frames less deep.)"""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(limit + 100)
    try:
        value = _first_decoding(text, (typed_record_decoder(), JSONStream.FAST))
        return json.loads(text) if value is None else value
    finally:
        sys.setrecursionlimit(limit)


def _first_decoding(text, decoders):
    """The value of text by the first of decoders (None entries skipped) that decodes it, else None."""
    for decode in decoders:
        try:
            if decode is not None:
                return decode(text)
        except (ValueError, RecursionError):  # msgspec.DecodeError and ValidationError are ValueErrors
            continue
    return None


class JSONStream:
    """Reads one JSON document from a binary stream value by value: the json module's decoder runs
    on a window of text, so memory holds one value and a chunk, not the document. An object (an
    image record, a psg.json entry) is first cut at the '}' that closes it (_quick_end) and
    decoded by FAST (msgspec) when it is installed; what FAST refuses (NaN, lone surrogates, text
    that is not JSON) the json module decodes from the window, so the values and the errors are
    the json module's."""

    CHUNK = 1 << 20
    MAX_VALUE = 1 << 26  # characters of one value (an image record, a psg.json entry)
    BLANK = re.compile(r"[ \t\n\r]*")
    FIRST_KEY = re.compile(r'\{[ \t\n\r]*("[A-Za-z_]{1,32}")[ \t\n\r]*:')
    MAX_MISSES = 8  # objects that end in the window without a quick cut (see _quick_end)
    STRING_REST = re.compile(r'[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)  # a string after its opening '"'
    FAST = fast_json_decoder()

    def __init__(self, stream):
        self.stream, self.text, self.pos, self.offset, self.eof, self.misses = stream, "", 0, 0, False, 0
        self.utf8, self.decoder = codecs.getincrementaldecoder("utf-8-sig")(), json.JSONDecoder()

    def _more(self):
        if len(self.text) - self.pos > self.MAX_VALUE:
            raise self._error(f"a value longer than the limit of {self.MAX_VALUE} characters starts")
        chunk = self.stream.read(max(self.CHUNK, len(self.text) - self.pos))  # doubles while a value goes on
        self.eof, self.offset = not chunk, self.offset + self.pos
        self.text, self.pos = self.text[self.pos:] + self.utf8.decode(chunk, final=self.eof), 0

    def _error(self, message, pos=None):
        return ValueError(f"{message} at character {self.offset + (self.pos if pos is None else pos)}")

    def peek(self):
        """The next non-blank character ('' at the end)."""
        while True:
            self.pos = self.BLANK.match(self.text, self.pos).end()
            if self.pos < len(self.text) or self.eof:
                return self.text[self.pos: self.pos + 1]
            self._more()

    def expect(self, characters, what):
        character = self.peek()
        if not character or character not in characters:
            raise self._error(f"expecting {what}")
        self.pos += 1
        return character

    def value(self, typed=None):
        """The next value; an object that ``typed`` (a decoder of its text) accepts is typed's value."""
        if self.peek() == "{" and self.FAST is not None:
            fast = self._fast_object(typed)
            if fast is not None:
                return fast
        while True:
            try:
                value, end = self.decoder.raw_decode(self.text, self.pos)
                if self.eof or end < len(self.text) and not (  # a number may go on in the next chunk
                        isinstance(value, (int, float)) and self.text[end] in "0123456789.eE+-"):
                    self.pos = end
                    return value
            except json.JSONDecodeError as error:
                if self.eof:
                    raise self._error(error.msg, error.pos) from None
            self._more()

    def _fast_object(self, typed):
        """The object at pos decoded by typed, else by FAST (None when neither decodes its cut)."""
        end = self._quick_end()
        value = None if end is None else _first_decoding(self.text[self.pos:end], (typed, self.FAST))
        if value is not None:
            self.pos = end
        return value

    def _quick_end(self):
        """The object's end: the cut before the next item of its list in the window that starts
        with the same first key and encloses as many '{' as '}' (only a cut that decodes is taken:
        braces in strings can mislead the count), else _object_end's. After MAX_MISSES objects that
        ended in the window without such a cut, the stream takes _object_end's only."""
        first = self.FIRST_KEY.match(self.text, self.pos) if self.misses < self.MAX_MISSES else None
        if first:
            pattern, window_end = _next_item_pattern(first.group(1)), len(self.text) - self.pos
            end = self._balanced_cut(pattern, first.end())
            if end is not None:
                return end
        end = self._object_end()
        if first and end is not None and end - self.pos <= window_end:
            self.misses += 1
        return end

    def _balanced_cut(self, pattern, start):
        """The first match of pattern after start where the text from pos to its '}' holds as many
        '{' as '}' (the end after that '}'), else None."""
        opened = closed = 0
        last = self.pos
        for match in pattern.finditer(self.text, start):
            cut = match.start() + 1
            opened, closed = opened + self.text.count("{", last, cut), closed + self.text.count("}", last, cut)
            if opened == closed:
                return cut
            last = cut
        return None

    def _object_end(self):
        """Where the object at pos ends, after the '}' that closes its first '{' (braces in strings
        do not count), reading more text while the window ends first; None at the end of the text
        or at the length limit (the json module then reads the value, or words the error). A cut
        that FAST decodes is the object's end: a JSON value ends at one place only."""
        depth, at = 0, self.pos
        while True:
            end, at, depth = self._scan(at, depth)
            if end is not None:
                return end
            if self.eof or len(self.text) - self.pos > self.MAX_VALUE:
                return None
            at -= self.pos
            self._more()
            at += self.pos

    def _scan(self, at, depth):
        """Count the window's braces outside strings from at, ``depth`` of them open: (the end after
        the '}' that closes the last open one, that end, 0), or (None, where the window runs out
        (at its end or at a string that goes on past it), the braces open there)."""
        text, n = self.text, len(self.text)

        def find(character, start):
            found = text.find(character, start)
            return n if found < 0 else found
        opening, closing, quote = find("{", at), find("}", at), find('"', at)
        while True:
            at = min(opening, closing, quote)
            if at == n:
                return None, at, depth
            if at == quote:
                string = self.STRING_REST.match(text, at + 1)
                if string is None:
                    return None, at, depth
                at = string.end()
                opening, closing, quote = (p if p >= at else find(c, at) for p, c in
                                           ((opening, "{"), (closing, "}"), (quote, '"')))
            elif at == opening:
                depth, opening = depth + 1, find("{", at + 1)
            elif depth == 1:
                return at + 1, at + 1, 0
            else:
                depth, closing = depth - 1, find("}", at + 1)

    def members(self, typed=None):
        """(key, value) of the top-level object in order; a list value is an iterator over its
        items, which must be consumed before the next key. typed: {key: a decoder of the text of
        that list's object items} (see value)."""
        self.expect("{", "'{'")
        if self.peek() == "}":
            self.pos += 1
            return
        while True:
            if self.peek() != '"':
                raise self._error("expecting a field name")
            key = self.value()
            self.expect(":", "':'")
            items = self.items((typed or {}).get(key)) if self.peek() == "[" else None
            yield key, self.value() if items is None else items
            collections.deque(items or (), maxlen=0)  # the rest of a list the caller did not read
            if self.expect(",}", "',' or '}'") == "}":
                break
        if self.peek():
            raise self._error("extra data after the JSON document")

    def items(self, typed=None):
        self.expect("[", "'['")
        if self.peek() == "]":
            self.pos += 1
            return
        while True:
            yield self.value(typed)
            if self.expect(",]", "',' or ']'") == "]":
                return


@functools.lru_cache(maxsize=64)
def _next_item_pattern(key):
    """A '}' followed by the start of a list's next object whose first key is key (JSON text)."""
    return re.compile(r"\}[ \t\n\r]*,[ \t\n\r]*\{[ \t\n\r]*" + re.escape(key) + r"[ \t\n\r]*:")


# What reading a file or a ZIP member (a JSON document, an .npz) can raise on bad bytes: zipfile
# raises RuntimeError (encrypted), NotImplementedError (compression), EOFError and zlib.error
# (corrupt data); the json module RecursionError (nesting too deep).
READ_ERRORS = (OSError, KeyError, ValueError, EOFError, RuntimeError, NotImplementedError, zlib.error,
               zipfile.BadZipFile)


def prediction_records(pred_path, n_objects, n_predicates, mode, problems, handoff=None):
    """Read a prediction: returns (PredSource, iterator of its valid PredImage records in file
    order). triplets.json is read incrementally, one image record in memory at a time; problems
    with records are appended to ``problems`` (the iterator goes on to find them all); an
    unreadable file or a wrong version raises SGEvalError. handoff: None, or a function of an
    image id; a record whose text msgspec finds to be JSON and whose id handoff accepts comes as
    a RecordText instead (its id checked, the rest not decoded: see _evaluate_record)."""
    if not os.path.exists(pred_path):
        raise SGEvalError([f"{pred_path}: no such file or directory"])
    if not os.path.isdir(pred_path):
        _regular_file(pred_path, "predictions")
    source = PredSource(pred_path)
    if str(pred_path).endswith(".zip") and source.kind != "zip":
        raise SGEvalError([f"{pred_path}: not a readable ZIP archive"])
    name = "triplets.json" if source.kind != "json" else os.path.basename(pred_path)
    try:
        members = source.members()
    except READ_ERRORS as error:
        raise SGEvalError([f"{pred_path}: not a readable ZIP archive: {type(error).__name__}: {error}"]) from None
    problems.extend(f"{pred_path}: ZIP member '{m}' has an absolute path or '..'"
                    for m in sorted(set(members or ())) if unsafe_member(m))
    problems.extend(f"{pred_path}: ZIP member '{m}' appears {n} times (which one is meant?)"
                    for m, n in sorted(collections.Counter(members or ()).items()) if n > 1)
    return source, _records(source, name, None if members is None else set(members), n_objects, n_predicates,
                            mode, problems, handoff)


def _records(source, name, members, n_objects, n_predicates, mode, problems, handoff=None):
    pred_path, version, seen_images, seen = source.path, None, False, set()
    decoder = record_text_decoder() if handoff else typed_record_decoder()
    try:
        with source.open(name) as stream:
            for key, value in JSONStream(stream).members(typed={"images": decoder}):
                if key == "version":
                    version = value
                    if type(version) is not int or version != 1:  # true is not 1
                        break
                elif key == "images" and not seen_images and isinstance(value, collections.abc.Iterator):
                    seen_images = True
                    for index, record in enumerate(value):
                        if isinstance(record, RecordText) and not handoff(str(record.image_id)):
                            record = decoded_record(record.text)
                        if isinstance(record, RecordText):
                            image_id = _new_id(record.image_id, index, pred_path, seen, problems)
                            pred = None if image_id is None else record._replace(image_id=image_id, index=index)
                        else:
                            pred = _record(record, index, pred_path, members, n_objects, n_predicates, mode, seen,
                                           problems)
                        if pred is not None:
                            yield pred
                elif key == "images":
                    raise SGEvalError([f"{pred_path}: field 'images' " + ("appears twice" if seen_images else
                                                                          "must be a list")])
    except SGEvalError:
        raise
    except READ_ERRORS as error:
        raise SGEvalError([f"{pred_path}: cannot read {name}: {type(error).__name__}: {error}"]) from None
    if type(version) is not int or version != 1:
        raise SGEvalError([f"{pred_path}: field 'version' is {version!r}; this reader knows version 1"])
    if not seen_images:
        raise SGEvalError([f"{pred_path}: field 'images' must be a list"])


def _record(record, index, pred_path, members, n_objects, n_predicates, mode, seen, problems):
    """One image record of a file (a FileRecord, or its JSON values when it has another shape):
    decoded to arrays, then checked_prediction (the check Evaluator.update's arrays pass) ->
    PredImage, or None after appending its problems."""
    typed = isinstance(record, FileRecord)
    image_id = _new_id(record.id if typed else record.get("id") if isinstance(record, dict) else None, index,
                       pred_path, seen, problems)
    if image_id is None:
        return None
    where, before = f"{pred_path}: image {image_id}", len(problems)
    parts = (record.instances, record.lists) if typed else _json_parts(record, where, mode, problems)
    if parts is None:
        return None
    (categories, boxes, scores), lists = parts
    pred = checked_prediction(image_id, where, Decoded(categories, None if mode == "mask" else boxes, scores, lists,
                                                       "bbox"), n_objects, n_predicates, mode, problems)
    if len(problems) > before:
        return None
    before = len(problems)
    seg_filename = record.seg_filename if typed else record.get("seg_filename")
    if mode == "mask" and len(categories):
        if not isinstance(seg_filename, str) or not seg_filename:
            problems.append(f"{where}: field 'seg_filename' is required in mask mode")
        elif unsafe_member(seg_filename):
            problems.append(f"{where}: seg_filename '{seg_filename}' has an absolute path or '..'")
        elif members is not None and seg_filename not in members:
            problems.append(f"{where}: seg_filename '{seg_filename}' is not in the ZIP")
    panoptic = None if typed else record_panoptic(record.get("panoptic"), where, members, n_objects, mode, problems)
    if pred is None or len(problems) > before:
        return None
    pred.seg_filename = seg_filename if isinstance(seg_filename, str) else None
    pred.panoptic = panoptic
    return pred


def _new_id(record_id, index, pred_path, seen, problems):
    """str of a record's id when it is an integer or a string not in seen (then added to it), else
    None after appending the problem."""
    if type(record_id) not in (int, str):
        problems.append(f"{pred_path}: images[{index}]: field 'id' must be an integer or string")
        return None
    image_id = str(record_id)
    if image_id in seen:
        problems.append(f"{pred_path}: image {image_id}: duplicate image id")
        return None
    seen.add(image_id)
    return image_id


def _json_parts(record, where, mode, problems):
    """((categories, boxes, scores), lists) of a record's JSON values (see _instances and
    _record_lists), or None after appending their problems."""
    instances = _instances(record, where, mode, problems)
    if "triplets" not in record:
        problems.append(f"{where}: missing field 'triplets' (an empty list is valid)")
        return None
    lists = _record_lists(record, where, problems)  # the lists that decode (every problem is reported)
    return None if instances is None else (instances, lists)


def _record_lists(record, where, problems):
    """{name: (rows (N, 3) int64, scores (N,) float64 or None)} of a record's triplets, its
    ng_triplets when given (``null``: not given), their scores and its row_lists: those that
    decode, the others' problems appended."""
    lists = {}
    for name, scores_name in ROW_FIELDS.items():
        if name == "ng_triplets" and record.get(name) is None:
            if record.get(scores_name) is not None:
                problems.append(f"{where}: field '{scores_name}' is given without '{name}'")
            continue
        lists[name] = _json_rows(record.get(name), record.get(scores_name), name, scores_name, where, problems)
    named = record.get("row_lists")
    if named is not None and (not isinstance(named, dict) or len(named) > MAX_ROW_LISTS):
        problems.append(f"{where}: field 'row_lists' must be an object of at most {MAX_ROW_LISTS} named lists")
        named = None
    for name, value in (named or {}).items():
        if not ROW_LIST_NAME.fullmatch(name) or name in ROW_FIELDS:
            problems.append(f"{where}: field 'row_lists': {name!r} is not a list name (1 to 64 letters, digits, "
                            f"'.', '_', '+', '-'; not triplets or ng_triplets)")
        elif not isinstance(value, dict) or not set(value) <= {"triplets", "scores"}:
            problems.append(f"{where}: field 'row_lists.{name}' must be an object with 'triplets' and optional "
                            f"'scores'")
        else:
            lists[name] = _json_rows(value.get("triplets"), value.get("scores"), f"row_lists.{name}.triplets",
                                     f"row_lists.{name}.scores", where, problems)
    return {name: (rows, scores) for name, (rows, scores) in lists.items() if rows is not None}


def _json_rows(rows, scores, field, scores_field, where, problems):
    """(rows (N, 3) int64, scores (N,) float64 or None) of a JSON list of rows and its scores
    (None: not given); rows None after a problem with them, scores None after one with them."""
    array = rows_array(rows, 3)
    if array is None:
        problems.append(f"{where}: field '{field}' must be a list of [3 integers] rows")
    score_array = None if scores is None else _float_array(scores) if isinstance(scores, list) else None
    if scores is not None and score_array is None:
        problems.append(f"{where}: field '{scores_field}' must be a list of finite numbers, one per row")
    return array, score_array


def _instances(record, where, mode, problems):
    """(categories (P,), boxes (P, 4) in box mode else None, scores (P,) or None unless every
    instance has one) from any of the three instance-list spellings, as JSON types; None after a
    problem. (checked_prediction checks their values.)"""
    if "instances" in record or "annotation" in record:
        items = record.get("instances", record.get("annotation"))
        if not isinstance(items, list) or not _types(items) <= {dict}:
            problems.append(f"{where}: field 'instances' must be a list of objects")
            return None
        categories, boxes, scores = ([item.get(key) for item in items] for key in ("category", "bbox", "score"))
    elif "categories" in record:
        categories, boxes, scores = record["categories"], record.get("bboxes"), record.get("scores")
        if not isinstance(categories, list):
            problems.append(f"{where}: field 'categories' must be a list")
            return None
        for field, values in (("bboxes", boxes), ("scores", scores)):
            if values is not None and (not isinstance(values, list) or len(values) != len(categories)):
                problems.append(f"{where}: field '{field}' must parallel 'categories'")
                return None
        boxes, scores = ([None] * len(categories) if values is None else values for values in (boxes, scores))
    else:
        problems.append(f"{where}: no instance list ('instances', 'annotation' or 'categories')")
        return None
    category_array = int_array(categories)
    if category_array is None:
        problems.append(f"{where}: field 'category' must be an integer for every instance")
        return None
    boxes_P4 = box_array(boxes)
    problem = _box_problem(boxes, mode) if boxes_P4 is None else None  # the checks one by one, to word it
    if problem:
        problems.append(f"{where}: {problem}")
        return None
    score_array = _float_array(scores)
    if score_array is None:
        bad = [i for i, v in enumerate(scores) if v is not None and _float_array([v]) is None]
        if bad:
            problems.append(f"{where}: instance {bad[0]}: field 'score' must be a finite number")
            return None
    return category_array, None if mode == "mask" else boxes_P4, score_array


def _box_problem(boxes, mode):
    """The first problem of the instances' boxes as JSON values (required in box mode, checked
    when given)."""
    for index, box in enumerate(boxes):
        if box is None and mode == "mask":
            continue
        if box is None:
            text = "field 'bbox' is required in box mode"
        elif not (isinstance(box, list) and len(box) == 4 and _types(box) <= {int, float}):
            text = "field 'bbox' must be [x1, y1, x2, y2]: four numbers"
        elif _float_array(box) is None:
            text = "field 'bbox' holds NaN, inf or a number beyond the float range"
        else:
            continue
        return f"instance {index}: {text}"
    return None


def read_predictions(pred_path, n_objects, n_predicates, mode):
    """Read a whole prediction; returns (PredSource, {image_id: PredImage}). (evaluate streams
    the records instead: see prediction_records.)"""
    problems = ProblemList()
    source, records = prediction_records(pred_path, n_objects, n_predicates, mode, problems)
    images = {pred.image_id: pred for pred in records}
    if problems:
        raise SGEvalError(problems)
    return source, images


# ---------------------------------------------------------------------------------------------
# 5. Masks: PNGs and TIFFs decoded by imagecodecs and tifffile, packed into bit rows
# ---------------------------------------------------------------------------------------------

# TIFF strips are inflated by zlib-ng, the fastest inflater of imagecodecs (bench/README.md), or
# by libdeflate where a build lacks it. TIFF compression codes 8 and 32946 are zlib streams.
_inflate = imagecodecs.zlibng_decode if imagecodecs.ZLIBNG.available else imagecodecs.deflate_decode

_BUFFERS = threading.local()


def _buffer(name, size, dtype):
    """A work array of ``size`` elements (contents undefined), reused by this thread from image to
    image: a fresh large array costs a page fault for every page it touches first. Valid until
    the next call with the same name."""
    array = getattr(_BUFFERS, name, None)
    if array is None or array.size < size or array.dtype != dtype:
        array = np.empty(size, dtype)
        setattr(_BUFFERS, name, array)
    return array[:size]


def _words(n_pixels):
    """Number of 64-bit words of a packed mask of n_pixels."""
    return (n_pixels + 63) // 64


def pack_masks(masks_PHW):
    """Boolean (P, H, W) masks -> packed (P, W) uint64 rows (the kernels' input)."""
    masks_PHW = np.asarray(masks_PHW, bool)
    packed = np.packbits(masks_PHW.reshape(len(masks_PHW), -1 if len(masks_PHW) else 0), axis=1)
    if packed.shape[1] % 8 == 0 and packed.flags.c_contiguous:  # whole words already (640 x 480 is): no copy
        return packed.view(np.uint64)
    words = np.zeros((len(packed), _words(8 * packed.shape[1])), np.uint64)
    words.view(np.uint8)[:, :packed.shape[1]] = packed
    return words


def _png_bytes(image):
    """The bytes of a GT image's panoptic PNG."""
    try:
        with open_regular(image.seg_path, f"image {image.image_id}'s panoptic PNG") as handle:
            return handle.read()
    except OSError as error:
        raise SGEvalError([f"{image.seg_path}: image {image.image_id}: cannot read panoptic PNG: {error}"]) from None


def load_gt_masks(image, data=None):
    """Packed masks (G, W) of the segments of one GT image, from its panoptic PNG (data: its bytes,
    when read already). The result is a buffer reused by the next call in this thread."""
    return _decoded_gt(image, data)[:len(image.segment_ids)]


def _decoded_gt(image, data=None):
    """load_gt_masks' rows and one more: the VOID pixels (id VOID_ID), (G + 1, W)."""
    where = f"{image.seg_path}: image {image.image_id}"
    data = _png_bytes(image) if data is None else data
    try:
        with Image.open(io.BytesIO(data)) as header:  # format, mode and size, before decoding
            kind, mode, size = header.format, header.mode, header.size
        if kind != "PNG" or mode not in ("RGB", "RGBA"):
            raise SGEvalError([f"{where}: panoptic PNG mode is {mode}, expected RGB" if kind == "PNG" else
                               f"{where}: the panoptic PNG is a {kind} image"])
        if size != (image.width, image.height):
            raise SGEvalError([f"{where}: panoptic PNG is {size[0]}x{size[1]}, field 'width'x'height' says "
                               f"{image.width}x{image.height}"])
        rgb = imagecodecs.png_decode(data)
    except SGEvalError:
        raise
    except (OSError, ValueError, imagecodecs.PngError, Image.DecompressionBombError) as error:
        raise SGEvalError([f"{where}: cannot read panoptic PNG: {error}"]) from None
    if rgb.dtype != np.uint8 or rgb.shape[:2] != (image.height, image.width) or rgb.ndim != 3:
        raise SGEvalError([f"{where}: panoptic PNG must be 8-bit RGB, not {rgb.dtype} {rgb.shape}"])
    n_words = _words(image.height * image.width)
    bits = _buffer("gt_bits", (len(image.segment_ids) + 1) * n_words, np.uint64).reshape(-1, n_words)
    bits[:] = 0
    found = pack_segments(rgb, np.r_[image.segment_ids, VOID_ID], bits.view(np.uint8))[:-1]  # VOID: the last row
    if not found.all():
        raise SGEvalError([f"{where}: field 'segments_info' lists segment id {', '.join(map(str, image.segment_ids[found == 0]))}"
                           f", which the panoptic PNG does not hold (an empty GT mask)"])
    return bits


def prepared_gt_masks(image, cache=None):
    """(packed masks (G, W), their mask_boxes (G, 5)) of a GT image: from the cache when it holds
    this image's entry and PNG, else decoded (load_gt_masks) and stored in it. Buffers reused by
    the next call in this thread."""
    bits, boxes = _prepared_gt(image, cache)
    return bits[:len(image.segment_ids)], boxes[:len(image.segment_ids)]


def _prepared_gt(image, cache=None):
    """prepared_gt_masks' arrays and one more row, the VOID pixels: (G + 1, W), (G + 1, 5)."""
    if cache is None:
        bits = _decoded_gt(image)
        return bits, mask_boxes(bits, image.width)
    data = _png_bytes(image)
    key = cache.key(image, data)
    found = cache.load(key, len(image.segment_ids) + 1, _words(image.height * image.width))
    if found is not None:
        return found
    bits = _decoded_gt(image, data)
    boxes = mask_boxes(bits, image.width)
    cache.store(key, bits, boxes)
    return bits, boxes


GT_CACHE_FORMAT = b"sgeval prepared GT 2"  # in every key: a new layout never reads an old entry (2: a VOID row)
GT_CACHE_KEY_FILE = "sgeval.key"  # in a GT cache folder: the secret its entries are signed with
GT_CACHE_DISK_MIB = 2048  # on disk, per folder, unless SGEVAL_GT_CACHE_MIB says otherwise
GT_CACHE_MEMORY_MIB = 256  # in an Evaluator's memory, unless SGEVAL_GT_MEMORY_MIB says otherwise


def gt_cache_bytes(name, default_mib):
    """A GT cache bound in bytes from environment variable name (MiB, default_mib when unset)."""
    return env_count(name, default_mib, high=1 << 30) << 20


class GTCache:
    """Prepared GT images: each image's packed segments (LZ4) and their mask_boxes, kept in memory
    (up to memory_bytes) and in a folder (up to disk_bytes; the oldest packs go first), keyed by
    the SHA-256 of GT_CACHE_FORMAT, the entry's id, size and segment ids, and the PNG's bytes. An
    entry is its signature (HMAC-SHA-256 of its key and the rest, with the folder's secret,
    GT_CACHE_KEY_FILE), then gt_cache_payload. The entries a process prepares are written together,
    a few hundred at most, as one pack file ``<name>.gtp`` (gt_pack_bytes; flush): a temporary file
    renamed, so readers never see half of one and concurrent runs each write their own. The secret
    is 32 random bytes in a file of the user that nobody else can read or write (made again when it
    is not): whoever cannot read it cannot make an entry that is used. One that does not check out
    (truncated, rewritten, another image's, another layout, in a special file) is ignored and
    written again. A performance feature only: the arrays are those load_gt_masks and mask_boxes
    give."""

    def __init__(self, folder=None, memory_bytes=0, disk_bytes=None):
        if disk_bytes is None:
            disk_bytes = gt_cache_bytes("SGEVAL_GT_CACHE_MIB", GT_CACHE_DISK_MIB)
        self.folder, self.memory_bytes, self.disk_bytes = folder, memory_bytes, disk_bytes
        self.memory, self.memory_used, self.disk_used, self.secret = {}, 0, None, None
        self.unscanned = 0  # bytes written since the folder's size was last summed (disk_used)
        self.index = None  # key -> (pack path, offset, length) of the folder's entries, read at the first load
        self.pending, self.lock = [], threading.Lock()  # [(key, payload)] stored, not yet written (flush)

    def __reduce__(self):  # to a worker process: the folder, not the memory
        return _worker_gt_cache, (self.folder, self.disk_bytes)

    @staticmethod
    def key(image, data):
        digest = hashlib.sha256(GT_CACHE_FORMAT)
        digest.update(json.dumps([image.image_id, image.height, image.width, image.segment_ids.tolist()]).encode())
        digest.update(data)
        return digest.hexdigest()

    def load(self, key, n_segments, n_words):
        """(bits, boxes) of an entry, or None."""
        entry = self.memory.get(key)
        if entry is None and self.folder is not None:
            entry = self._read(key, 48 + n_segments * n_words * 9 + n_segments * 40)  # > LZ4's worst case
        arrays = None if entry is None else _prepared_arrays(entry, n_segments, n_words)
        if arrays is not None and key not in self.memory:
            self._remember(key, entry)
        return arrays

    def store(self, key, bits, boxes):
        """Keep an image's arrays (in memory now; in the folder at the next flush, which comes by
        itself after GT_PACK_ENTRIES of them or GT_PACK_BYTES)."""
        payload = gt_cache_payload(bits, boxes)
        self._remember(key, bytes(32) + payload)  # in memory: made here, not signed
        if self.folder is not None:
            with self.lock:
                self.pending.append((key, payload))
                full = len(self.pending) >= GT_PACK_ENTRIES or sum(len(p) for _, p in self.pending) >= GT_PACK_BYTES
            if full:
                self.flush()

    def flush(self):
        """Write the entries stored since the last flush into the folder, as one pack file."""
        with self.lock:
            pending, self.pending = self.pending, []
        if pending and self.folder is not None:
            self._write(pending)

    def _remember(self, key, entry):
        if self.memory_used + len(entry) <= self.memory_bytes:
            self.memory[key] = entry
            self.memory_used += len(entry)

    def _signature(self, key, payload):
        """The HMAC of an entry's key and payload with the folder's secret (made when needed)."""
        if self.secret is None:
            path = os.path.join(self.folder, GT_CACHE_KEY_FILE)
            self.secret = _own_secret(path) or _make_secret(path)
        return hmac.new(self.secret, key.encode() + payload, hashlib.sha256).digest()

    def _read(self, key, limit):
        """An entry of the folder whose signature checks out, or None."""
        if self.index is None:
            self.index = gt_cache_index(self.folder)
        path, offset, length = self.index.get(key, (None, 0, 0))
        try:
            if path is None or length > limit:
                return None
            with open_regular(path, "a GT cache pack") as handle:
                handle.seek(offset)
                entry = handle.read(length)
            return entry if hmac.compare_digest(entry[:32], self._signature(key, entry[32:])) else None
        except (OSError, ValueError):  # SGEvalError: not a regular file
            return None

    def _write(self, pending):
        """Write entries as one pack (a temporary file of this process renamed), then keep the
        folder under disk_bytes: its size is summed again once this object has written a
        sixteenth of the bound since (other processes write too). A folder that cannot be written
        is not used again."""
        try:
            if self.disk_used is None or self.unscanned > self.disk_bytes // 16:
                os.makedirs(self.folder, exist_ok=True)
                self.disk_used, self.unscanned = self._folder_bytes(), 0
            data = gt_pack_bytes([(key, self._signature(key, payload) + payload) for key, payload in pending])
            descriptor, temporary = tempfile.mkstemp(suffix=".tmp", dir=self.folder)
            with open(descriptor, "wb") as handle:
                handle.write(data)
            path = temporary[:-len(".tmp")] + GT_PACK_SUFFIX
            os.replace(temporary, path)
            if self.index is not None:
                self.index.update(gt_pack_index(path))
            self.disk_used, self.unscanned = self.disk_used + len(data), self.unscanned + len(data)
            if self.disk_used > self.disk_bytes:
                self._evict()
        except (OSError, ValueError) as error:  # ValueError: a NUL in the folder's name
            log.warning("gt_cache %s: not used (%s)", self.folder, error)
            self.folder = None

    def _folder_bytes(self):
        return sum(e.stat().st_size for e in os.scandir(self.folder) if e.name.endswith(GT_CACHE_FILES))

    def _evict(self):
        """Remove the oldest packs until the folder holds at most 80 % of disk_bytes, and the
        temporary files of writers stopped an hour or more before the newest file."""
        files = sorted((e.stat().st_mtime, e.stat().st_size, e.path, e.name) for e in os.scandir(self.folder)
                       if e.name.endswith(GT_CACHE_FILES + (".tmp",)))
        self.disk_used = sum(size for _, size, _, name in files if not name.endswith(".tmp"))
        self.unscanned = 0
        for mtime, size, path, name in files:
            if name.endswith(".tmp") and mtime < files[-1][0] - 3600:
                os.remove(path)
            elif not name.endswith(".tmp") and self.disk_used > 0.8 * self.disk_bytes:
                os.remove(path)
                self.disk_used -= size


GT_PACK_SUFFIX = ".gtp"
GT_CACHE_FILES = (GT_PACK_SUFFIX, ".gt")  # what a GT cache folder holds and evicts (.gt: format 2's entries)
GT_PACK_MAGIC = b"sgevalGT"  # the last 8 bytes of a pack
GT_PACK_ENTRIES = 256  # at most, in one pack
GT_PACK_BYTES = 8 << 20  # payload bytes after which a GTCache writes its pack


def gt_pack_bytes(entries):
    """A pack file of [(key (hex), entry)]: the entries one after the other, then per entry its key
    (32 bytes), offset and length (8 bytes each, little endian), then their number (8 bytes) and
    GT_PACK_MAGIC."""
    offsets = np.cumsum([0] + [len(entry) for _, entry in entries])
    table = b"".join(bytes.fromhex(key) + int(offset).to_bytes(8, "little") + len(entry).to_bytes(8, "little")
                     for (key, entry), offset in zip(entries, offsets))
    return b"".join(entry for _, entry in entries) + table + len(entries).to_bytes(8, "little") + GT_PACK_MAGIC


def gt_cache_index(folder):
    """{key: (pack path, offset, length)} of the entries in a GT cache folder's packs (a key in
    several packs: the newest one's); empty when the folder cannot be read."""
    index = {}
    with contextlib.suppress(OSError, ValueError):  # ValueError: a NUL in the folder's name
        for _, path in sorted((e.stat().st_mtime_ns, e.path) for e in os.scandir(folder)
                              if e.name.endswith(GT_PACK_SUFFIX)):
            index.update(gt_pack_index(path))
    return index


def gt_pack_index(path):
    """{key: (path, offset, length)} of the entries of a pack file (of those within its data);
    empty when it is not a pack or cannot be read."""
    try:
        with open_regular(path, "a GT cache pack") as handle:
            size = os.fstat(handle.fileno()).st_size
            handle.seek(max(size - 16, 0))
            tail = handle.read(16)
            count = int.from_bytes(tail[:8], "little")
            if size < 16 or tail[8:] != GT_PACK_MAGIC or count * 48 > size - 16:
                return {}
            end = size - 16 - count * 48
            handle.seek(end)
            table = handle.read(count * 48)
    except (OSError, ValueError):  # SGEvalError: not a regular file
        return {}
    index = {}
    for row in range(count if len(table) == count * 48 else 0):
        key, offset, length = table[row * 48: row * 48 + 32], table[row * 48 + 32: row * 48 + 40], \
            table[row * 48 + 40: row * 48 + 48]
        offset, length = int.from_bytes(offset, "little"), int.from_bytes(length, "little")
        if offset + length <= end:
            index[key.hex()] = (path, offset, length)
    return index


_WORKER_GT_CACHES = {}


def _worker_gt_cache(folder, disk_bytes):
    """A worker process's GTCache of a folder: one per process, made when the first task names it."""
    return _WORKER_GT_CACHES.get((folder, disk_bytes)) or _WORKER_GT_CACHES.setdefault(
        (folder, disk_bytes), GTCache(folder, 0, disk_bytes))


def flush_worker_gt_caches():
    """Write what this process's GT caches hold for their folders (after a batch of images)."""
    for cache in _WORKER_GT_CACHES.values():
        cache.flush()


def _own_secret(path):
    """The 32 bytes of a GT cache's key file when it is a regular file of this user that nobody
    else can read or write, else None."""
    try:
        with open_regular(path, "the GT cache key") as handle:
            info, data = os.fstat(handle.fileno()), handle.read(33)
    except (OSError, ValueError):  # SGEvalError (not a regular file) is a ValueError
        return None
    mine = not hasattr(os, "getuid") or info.st_uid == os.getuid() and not info.st_mode & 0o077
    return data if mine and len(data) == 32 else None


def _make_secret(path):
    """A new key file of 32 random bytes at path (readable by this user only), unless another
    process made a valid one first; its bytes. OSError when none can be made."""
    with tempfile.NamedTemporaryFile(dir=os.path.dirname(path), suffix=".tmp", delete=False) as handle:
        handle.write(os.urandom(32))  # mode 0600
    try:
        os.link(handle.name, path)  # atomic, and never over a key another process has just made
    except FileExistsError:
        if _own_secret(path) is None:  # another user's, or readable by others: replaced
            os.replace(handle.name, path)
    except OSError:  # a file system without hard links
        os.replace(handle.name, path)
    finally:
        if os.path.exists(handle.name):
            os.remove(handle.name)
    secret = _own_secret(path)
    if secret is None:
        raise OSError(f"cannot make its key file {path}")
    return secret


def gt_cache_payload(bits_GW, boxes_G5):
    """A GTCache entry without its signature: the length of the LZ4 bits (8 bytes, little endian),
    the LZ4 bits, the boxes (int64)."""
    lz4 = imagecodecs.lz4_encode(np.ascontiguousarray(bits_GW))
    return len(lz4).to_bytes(8, "little") + lz4 + np.asarray(boxes_G5, "<i8").tobytes()


def _prepared_arrays(entry, n_segments, n_words):
    """(bits (G, W) uint64, boxes (G, 5) int64) of a GTCache entry (its signature checked or made
    in memory), or None when it does not have the layout."""
    try:
        if len(entry) < 40:
            return None
        length = int.from_bytes(entry[32:40], "little")
        if 40 + length + n_segments * 40 != len(entry):
            return None
        bits = _buffer("gt_bits", n_segments * n_words, np.uint64).reshape(-1, n_words)
        if len(imagecodecs.lz4_decode(entry[40:40 + length], out=bits.view(np.uint8).reshape(-1))) != bits.nbytes:
            return None
        return bits, np.frombuffer(entry[40 + length:], "<i8").reshape(n_segments, 5).astype(np.int64)
    except (ValueError, imagecodecs.Lz4Error):
        return None


def default_gt_cache():
    """The platform's user cache folder for prepared GT (SGEVAL_GT_CACHE overrides it)."""
    if os.environ.get("SGEVAL_GT_CACHE"):
        return os.environ["SGEVAL_GT_CACHE"]
    if sys.platform == "win32":
        root = os.environ.get("LOCALAPPDATA") or os.path.expanduser("~/AppData/Local")
        return os.path.join(root, "sgeval", "Cache", "gt")
    if sys.platform == "darwin":
        return os.path.expanduser("~/Library/Caches/sgeval/gt")
    return os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "sgeval", "gt")


def load_pred_masks(source, record, height, width, needed=None):
    """Packed masks (P, W) of one prediction, from its TIFF: one page (or one layer of a 3-D
    page) per instance, non-zero = inside. needed: optional (P,) bool; masks not needed may be
    left empty. The result is a buffer reused by the next call."""
    where, n_masks = f"{source.path}: image {record.image_id}: {record.seg_filename}", len(record.categories)
    try:
        data = source.read(record.seg_filename, n_masks * height * width * 2 + (1 << 20))  # 16-bit, raw
        with tifffile.TiffFile(io.BytesIO(data)) as tiff:
            bits = _strip_pages(tiff, data, height, width, n_masks, needed, where)
            if bits is None:
                bits = _tifffile_masks(tiff, height, width, n_masks, where)
    except SGEvalError:
        raise
    except Exception as error:  # zipfile, tifffile and the codecs raise many types on corrupt data
        raise SGEvalError([f"{where}: cannot read TIFF: {type(error).__name__}: {error}"]) from None
    _check_mask_count(len(bits), n_masks, where)
    return bits


def _strip_pages(tiff, data, height, width, n_masks, needed, where):
    """Packed masks of a TIFF whose pages hold 1- or 8-bit samples in strips, uncompressed or
    deflate (what writers of the format write): one mask per page, or per sample of a page whose
    samples are stored apart (planar); None for any other layout. tifffile reads page 0 whole and
    the other pages as frames (their strips, checked against page 0's width and number of strips).
    Each mask's strips are inflated straight into it (1-bit rows of whole bytes are the packed
    mask) or into pixels that are then packed."""
    first = tiff.pages.first
    bits_per_pixel, samples = first.bitspersample, first.samplesperpixel
    if not (bits_per_pixel in (1, 8) and (samples == 1 or first.planarconfig == 2) and first.imagedepth == 1
            and first.compression in (1, 8, 32946) and first.predictor == 1 and first.fillorder == 1
            and first.sampleformat == 1 and not first.is_tiled):
        return None
    _check_mask_size(first, height, width, where)
    row_bytes, strip_rows = (width * bits_per_pixel + 7) // 8, min(first.rowsperstrip, height)
    if strip_rows < 1:
        raise ValueError("RowsPerStrip is 0")
    tiff.pages.useframes = True
    tiff.pages.set_keyframe(0)
    pages, n_words, n_strips = list(tiff.pages), _words(height * width), (height + strip_rows - 1) // strip_rows
    _check_mask_count(len(pages) * samples, n_masks, where)
    bits = _buffer("pred_bits", len(pages) * samples * n_words, np.uint64).reshape(-1, n_words)
    rows, view = bits.view(np.uint8), memoryview(data)
    direct = bits_per_pixel == 1 and width % 8 == 0
    if direct and n_strips == 1 and first.compression != 1:
        return _one_strip_masks(view, pages, samples, rows, height * row_bytes, needed, bits)
    pixels = None if direct else _buffer("tiff_pixels", height * row_bytes, np.uint8)
    for index in range(len(bits)):
        page, sample = pages[index // samples], index % samples
        if needed is not None and index < len(needed) and not needed[index]:
            rows[index] = 0
            continue
        target = rows[index, :height * row_bytes] if direct else pixels
        strips = slice(sample * n_strips, (sample + 1) * n_strips)
        _read_strips(view, page.dataoffsets[strips], page.databytecounts[strips], first.compression,
                     strip_rows * row_bytes, target)
        if not direct:
            target = np.packbits(pixels if bits_per_pixel == 8 else np.unpackbits(  # 1-bit rows padded to bytes
                pixels.reshape(height, row_bytes), axis=1)[:, :width])  # packbits: any non-zero byte is 1
            rows[index, :len(target)] = target
        rows[index, len(target):] = 0
    return bits


def _one_strip_masks(view, pages, samples, rows, size, needed, bits):
    """_strip_pages' masks when each is one deflate strip of 1-bit rows of whole bytes (what
    write_predictions writes): every strip inflated straight into its mask's packed row."""
    rows[:, size:] = 0
    index = 0
    for page in pages:
        offsets, counts = page.dataoffsets, page.databytecounts
        if min(len(offsets), len(counts)) < samples:
            raise ValueError(f"a page has {min(len(offsets), len(counts))} strips for its {samples} masks")
        for offset, count in zip(offsets[:samples], counts[:samples]):
            if needed is not None and index < len(needed) and not needed[index]:
                rows[index] = 0
            elif offset + count > len(view):
                raise ValueError(f"a strip at byte {offset} runs past the end of the file")
            elif len(_inflate(view[offset:offset + count], out=rows[index, :size])) != size:
                raise ValueError(f"a strip inflates to fewer than its {size} bytes")
            index += 1
    return bits


def _read_strips(view, offsets, counts, compression, strip_size, pixels):
    """Decode a mask's strips (uncompressed or zlib streams in view at the given offsets) into
    pixels, its bytes: strip_size bytes each, the last strip the rest."""
    n_strips = (len(pixels) + strip_size - 1) // strip_size
    if min(len(offsets), len(counts)) < n_strips:
        raise ValueError(f"a mask has {min(len(offsets), len(counts))} strips; its rows need {n_strips}")
    for start, offset, count in zip(range(0, len(pixels), strip_size), offsets, counts):
        target, stream = pixels[start:start + strip_size], view[offset:offset + count]
        if len(stream) < count:
            raise ValueError(f"a strip at byte {offset} runs past the end of the file")
        if compression == 1:
            if count < len(target):
                raise ValueError(f"a strip holds {count} of its {len(target)} bytes")
            target[:] = np.frombuffer(stream, np.uint8, len(target))
        elif len(_inflate(stream, out=target)) != len(target):
            raise ValueError(f"a strip inflates to fewer than its {len(target)} bytes")


def _check_mask_size(page, height, width, where):
    if (page.imagelength, page.imagewidth) != (height, width):
        raise SGEvalError([f"{where}: mask size ({page.imagelength}, {page.imagewidth}) differs from the GT "
                           f"image size ({height}, {width})"])


def _check_mask_count(count, n_masks, where):
    if count != n_masks:
        raise SGEvalError([f"{where}: {count} masks for {n_masks} instances"])


def _check_segments(page, index, file_size):
    """A page's strips or tiles are all there: tifffile decodes a missing one as zeros (and only
    logs it)."""
    offsets, counts, needed = page.dataoffsets, page.databytecounts, math.prod(page.chunked)
    if not len(offsets) == len(counts) == needed or min(counts, default=0) < 1 \
            or max(map(sum, zip(offsets, counts))) > file_size:
        raise ValueError(f"page {index}: its {needed} strips or tiles are not all in the file (offsets "
                         f"{len(offsets)}, byte counts {len(counts)}, the smallest {min(counts, default=0)})")


# Pages sgeval decodes: unsigned or signed integer samples of 1, 8 or 16 bits, lossless compression
# (none, LZW, deflate, PackBits, LZMA, Zstandard), any layout tifffile reads.
MASK_BITS, MASK_COMPRESSIONS = (1, 8, 16), (1, 5, 8, 32946, 32773, 34925, 50000)


def _tifffile_masks(tiff, height, width, n_masks, where):
    """Packed masks (P, W) of any other TIFF layout, decoded by tifffile and packed page by page (a
    page of samples stored together is (H, W, S): its samples are masks too). Every page's type,
    size and number of masks is checked before any is decoded."""
    pages = list(tiff.pages)
    for index, page in enumerate(pages):
        _check_mask_size(page, height, width, where)
        _check_segments(page, index, tiff.filehandle.size)
        if page.bitspersample not in MASK_BITS or page.compression not in MASK_COMPRESSIONS \
                or page.sampleformat not in (1, 2):
            raise SGEvalError([f"{where}: a page of {page.bitspersample}-bit samples of format "
                               f"{getattr(page.sampleformat, 'name', page.sampleformat)}, compression "
                               f"{getattr(page.compression, 'name', page.compression)}: masks must be 1-, 8- or "
                               f"16-bit integers, losslessly compressed"])
    _check_mask_count(sum(math.prod(page.shape) // (height * width) for page in pages), n_masks, where)
    bits, done = np.empty((n_masks, _words(height * width)), np.uint64), 0
    for page in pages:
        array = page.asarray()
        layers = (np.moveaxis(array, -1, 0) if page.axes.endswith("S") else array).reshape(-1, height, width)
        bits[done: done + len(layers)] = pack_masks(layers != 0)
        done += len(layers)
    return bits


def encode_masks(masks_PHW):
    """(P, H, W) masks -> the bytes of a 1-bit deflate TIFF with one page whose samples, stored
    apart, are the masks (a reader parses one directory, not P); a single mask is a plain page."""
    masks, buffer = np.asarray(masks_PHW) != 0, io.BytesIO()
    options = {"planarconfig": "separate", "extrasamples": [0] * (len(masks) - 1)} if len(masks) > 1 else {}
    tifffile.imwrite(buffer, masks, photometric="minisblack",
                     compression=tifffile.COMPRESSION.ADOBE_DEFLATE, rowsperstrip=masks.shape[1], **options)
    return buffer.getvalue()


def encode_panoptic(segment_map):
    """An (H, W) map of segment ids (0 to 2^24 - 1) -> the bytes of an 8-bit RGB PNG, id = R + 256 G
    + 65536 B (COCO panoptic's encoding)."""
    ids = np.asarray(segment_map, np.int64)
    if ids.ndim != 2 or ids.size and (ids.min() < 0 or ids.max() > MAX_PNG_ID):
        raise ValueError(f"a panoptic segment map must be (H, W) ids from 0 to {MAX_PNG_ID}")
    rgb = np.stack([ids & 255, (ids >> 8) & 255, ids >> 16], axis=-1).astype(np.uint8)
    return imagecodecs.png_encode(rgb)


def _image_record(image, kind, put):
    """write_predictions: an image's record of triplets.json, its masks' TIFF and panoptic PNG put
    beside it."""
    record = {"id": image["id"], "instances": image["instances"],
              "triplets": np.asarray(image["triplets"], np.int64).reshape(-1, 3).tolist()}
    if image.get("ng_triplets") is not None:
        record["ng_triplets"] = np.asarray(image["ng_triplets"], np.int64).reshape(-1, 3).tolist()
    for field in ("triplet_scores", "ng_triplet_scores"):
        if image.get(field) is not None:
            record[field] = _finite_list(image[field], field, image["id"])
    if image.get("row_lists"):
        record["row_lists"] = _row_lists_record(image["row_lists"], image["id"])
    masks, tiff = image.get("masks"), image.get("tiff")
    if tiff is not None or masks is not None and len(masks):
        if kind == "json":
            raise ValueError("a .json prediction holds no masks; write a .zip or a directory")
        record["seg_filename"] = f"{image['id']}.tiff"
        put(record["seg_filename"], encode_masks(masks) if tiff is None else tiff)
    if image.get("panoptic") is not None:
        record["panoptic"] = _panoptic_record(image["panoptic"], image["id"], kind, put)
    return record


def _panoptic_record(panoptic, image_id, kind, put):
    """write_predictions: an image's field 'panoptic' from its ``panoptic`` ({"segments": [{id,
    category}], "void_id_segment": id or None, and "segment_map": an (H, W) map of ids, 0 for no
    segment, or "png": its bytes from encode_panoptic}), its PNG put beside the masks."""
    if kind == "json":
        raise ValueError("a .json prediction holds no panoptic PNG; write a .zip or a directory")
    record = {"file": f"{image_id}.panoptic.png",
              "segments": [{"id": int(item["id"]), "category": int(item["category"])} for item in panoptic["segments"]]}
    if panoptic.get("void_id_segment") is not None:
        record["void_id_segment"] = int(panoptic["void_id_segment"])
    png = panoptic.get("png")
    put(record["file"], encode_panoptic(panoptic["segment_map"]) if png is None else png)
    return record


def _finite_list(values, field, image_id):
    """A list of finite floats for write_predictions; ValueError naming the image otherwise."""
    array = np.asarray(values, np.float64).ravel()
    if not np.isfinite(array).all():
        raise ValueError(f"image {image_id}: field '{field}' holds NaN or inf")
    return array.tolist()


def _row_lists_record(row_lists, image_id):
    """write_predictions' row_lists: {name: {"triplets": rows, "scores": numbers or None}} as JSON
    lists (a name -> rows or (rows, scores) mapping is taken too, as by Evaluator.update)."""
    record = {}
    for name, value in row_lists.items():
        if isinstance(value, collections.abc.Mapping):
            value = value.get("triplets"), value.get("scores")
        rows, scores = value if isinstance(value, tuple) and len(value) == 2 else (value, None)
        record[str(name)] = {"triplets": np.asarray(rows, np.int64).reshape(-1, 3).tolist()}
        if scores is not None:
            record[str(name)]["scores"] = _finite_list(scores, f"row_lists.{name}.scores", image_id)
    return record


def write_predictions(path, images, extra_members=None, kind=None):
    """Write predictions in the sgeval/SGBench v1 format.

    ``path`` ending in ``.zip`` -> a ZIP of <id>.tiff and triplets.json; ``.json`` -> one JSON
    file (box mode, no masks); anything else -> a directory (``kind`` overrides the suffix).
    ``images``: iterable of dicts with ``id``, ``instances`` ([{category, bbox, score?}]),
    ``triplets``, optional ``ng_triplets``, ``triplet_scores`` and ``ng_triplet_scores`` (a number per
    row), ``row_lists`` ({name: {"triplets": rows, "scores": numbers}}), ``masks`` ((P, H, W) bool or
    uint8) or ``tiff`` (the masks already encoded by encode_masks), and ``panoptic``
    (_panoptic_record). Each image's masks are written as it comes (triplets.json last), so an
    iterator keeps one image in memory. ``extra_members``: {name: bytes} added beside
    triplets.json. Same input, same bytes.
    """
    path = str(path)
    kind = kind or ("zip" if path.endswith(".zip") else "json" if path.endswith(".json") else "dir")
    archive = zipfile.ZipFile(path, "w") if kind == "zip" else None
    if kind == "dir":
        os.makedirs(path, exist_ok=True)

    def put(name, data, compress=zipfile.ZIP_STORED):  # data: bytes or a binary file; TIFFs are compressed already
        data = io.BytesIO(data) if isinstance(data, bytes) else data
        size, _ = data.seek(0, os.SEEK_END), data.seek(0)
        if archive is None:
            with open(path if kind == "json" else Path(path, name), "wb") as target:
                shutil.copyfileobj(data, target)
            return
        info = zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0))
        info.compress_type, info.file_size = compress, size
        with archive.open(info, "w") as target:
            shutil.copyfileobj(data, target)

    try:
        with tempfile.TemporaryFile() as spool:  # triplets.json, record by record: memory holds one
            spool.write(b'{"version": 1, "images": [')
            for index, image in enumerate(images):
                spool.write((", " * bool(index) + json.dumps(_image_record(image, kind, put))).encode())
            spool.write(b"]}")
            for name, data in {"triplets.json": spool, **(extra_members or {} if kind != "json" else {})}.items():
                put(name, data, zipfile.ZIP_DEFLATED)
    finally:
        if archive is not None:
            archive.close()
    return path


# ---------------------------------------------------------------------------------------------
# 6. Kernels (numba): flat arrays in and out, -1 = unmatched / different category
# ---------------------------------------------------------------------------------------------
# (@_kernel: numba's njit, applied at the first call of any kernel; numba is imported then.)
# (Kernels fill np.empty arrays: numba takes longer to compile np.full and np.zeros.)


@_kernel
def popcount64(x):
    """Number of set bits of a uint64 (SWAR)."""
    x = x - ((x >> np.uint64(1)) & np.uint64(0x5555555555555555))
    x = (x & np.uint64(0x3333333333333333)) + ((x >> np.uint64(2)) & np.uint64(0x3333333333333333))
    x = (x + (x >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    return int((x * np.uint64(0x0101010101010101)) >> np.uint64(56))


@_kernel
def _set_bits(bits_B, start, stop):
    """Set bits [start, stop) (stop > start) of a packed byte row, np.packbits bit order."""
    first, last = start >> 3, (stop - 1) >> 3
    head = np.uint8(0xFF >> (start & 7))
    tail = np.uint8((0xFF << (7 - ((stop - 1) & 7))) & 0xFF)
    if first == last:
        bits_B[first] |= head & tail
    else:
        bits_B[first] |= head
        bits_B[first + 1: last] = 255
        bits_B[last] |= tail


@_kernel
def _pixel_id(image_HWC, y, x):
    """The segment id of a pixel: its first three channels as little-endian bytes (RGB(A): R +
    256 G + 65536 B, alpha ignored; one channel: its value)."""
    value = np.int64(0)
    for c in range(min(image_HWC.shape[2], 3)):
        value += np.int64(image_HWC[y, x, c]) << (8 * c)
    return value


@_kernel
def pack_segments(image_HWC, segment_ids_G, bits_GB):
    """Set the pixels of the segments of a panoptic image (8-bit RGB(A): id = R + 256 G + 65536
    B; or one channel of integer ids) in their rows of bits_GB (zeroed, np.packbits order), one
    run of equal pixels at a time. Returns the pixels found per segment (G,)."""
    height, width = image_HWC.shape[0], image_HWC.shape[1]
    found = np.empty(segment_ids_G.shape[0], np.int64)
    found[:] = 0
    for y in range(height):
        x = 0
        while x < width:
            start, pixel_id = x, _pixel_id(image_HWC, y, x)
            x += 1
            while x < width and _pixel_id(image_HWC, y, x) == pixel_id:
                x += 1
            for g in range(segment_ids_G.shape[0]):
                if segment_ids_G[g] == pixel_id:
                    _set_bits(bits_GB[g], y * width + start, y * width + x)
                    found[g] += x - start
                    break
    return found


_EMPTY_BOX = np.array([0, 1 << 62, -1, 1 << 62, -1], np.int64)  # the mask_boxes row of an empty mask


@_kernel
def mask_boxes(bits_NW, width):
    """(N, 5) int64 per packed mask of the given width: pixel count, then a bounding box y0, y1,
    x0, x1 (inclusive; the columns to whole bytes of 8 pixels; empty mask: y0 > y1). The boxes
    may be larger than the masks (never smaller); they only prune the IoU work."""
    boxes = np.empty((bits_NW.shape[0], 5), np.int64)  # every row is written below
    for n in range(bits_NW.shape[0]):
        area, y0, y1, x0, x1 = _EMPTY_BOX
        row, row_start = 0, 0  # the row of the current word's first non-zero byte and its first pixel
        for w in range(bits_NW.shape[1]):
            word = bits_NW[n, w]
            if word:
                area += popcount64(word)
                first, last = 0, 7  # the word's first and last non-zero byte (little-endian view)
                while not (word >> np.uint64(8 * first)) & np.uint64(255):
                    first += 1
                while not (word >> np.uint64(8 * last)) & np.uint64(255):
                    last -= 1
                start, stop = (w * 8 + first) * 8, (w * 8 + last) * 8 + 7
                while start >= row_start + width:
                    row, row_start = row + 1, row_start + width
                y0 = min(y0, row)
                if stop < row_start + width:
                    y1, x0, x1 = max(y1, row), min(x0, start - row_start), max(x1, stop - row_start)
                else:  # the bytes wrap around a row end
                    y1, x0, x1 = max(y1, stop // width), 0, width - 1
        boxes[n, 0], boxes[n, 1], boxes[n, 2], boxes[n, 3], boxes[n, 4] = area, y0, y1, x0, min(x1, width - 1)
    return boxes


@_kernel
def _intersection(a_W, b_W, box_a, box_b, width, threshold):
    """Pixels two packed masks share (counted over the words of the rows where their boxes
    overlap), or -1 when their IoU cannot reach threshold: the IoU is at most m / (a + b - m),
    where a, b are the areas and m the least of a, b and the area where the boxes overlap (the
    bound and the IoU are rounded alike)."""
    a, b = box_a[0], box_b[0]
    y0, y1 = max(box_a[1], box_b[1]), min(box_a[2], box_b[2])
    columns = min(box_a[4], box_b[4]) - max(box_a[3], box_b[3]) + 1
    most = min(a, b, max(y1 - y0 + 1, 0) * max(columns, 0))
    if a + b == 0 or most / (a + b - most) < threshold:
        return -1
    inter = 0
    if most > 0:  # else the boxes do not overlap (an empty mask's box is no box)
        for w in range((y0 * width) >> 6, min(((y1 + 1) * width + 63) >> 6, a_W.shape[0])):
            inter += popcount64(a_W[w] & b_W[w])  # one contiguous range: the compiler vectorises the loop
    return inter


@_kernel
def mask_iou(gt_bits_GW, gt_cat_G, gt_box_G5, pred_bits_PW, pred_cat_P, pred_box_P5, width, threshold):
    """IoU (P, G) of packed masks of the given width with their mask_boxes; -1.0 where
    categories differ, 0.0 for an empty union and for the pairs whose IoU cannot reach threshold
    (see _intersection): the matching only compares IoUs >= threshold."""
    iou = np.empty((pred_bits_PW.shape[0], gt_bits_GW.shape[0]))
    iou[:] = -1.0
    for p in range(pred_bits_PW.shape[0]):
        for g in range(gt_bits_GW.shape[0]):
            if pred_cat_P[p] == gt_cat_G[g]:
                inter = max(_intersection(gt_bits_GW[g], pred_bits_PW[p], gt_box_G5[g], pred_box_P5[p], width,
                                          threshold), 0)
                union = gt_box_G5[g, 0] + pred_box_P5[p, 0] - inter
                iou[p, g] = inter / union if union > 0 else 0.0
    return iou


@_kernel
def _twins(i, j, twins_PP, bits_PW, box_P5, width):
    """Whether masks i and j (packed, with their mask_boxes) have IoU >= MERGE_IOU, categories
    ignored, decided once: twins_PP holds 1 (yes), 0 (no) or -1 (not yet decided)."""
    if twins_PP[i, j] < 0:
        inter = _intersection(bits_PW[i], bits_PW[j], box_P5[i], box_P5[j], width, MERGE_IOU)
        twins_PP[i, j] = twins_PP[j, i] = inter >= 0 and inter / (box_P5[i, 0] + box_P5[j, 0] - inter) >= MERGE_IOU
    return twins_PP[i, j] == 1


@_kernel
def duplicate_instances(twins_PP, bits_PW, box_P5, width, categories_P):
    """The number of instances that are the twin (_twins) of an earlier instance of their
    category."""
    count = 0
    for j in range(categories_P.shape[0]):
        for i in range(j):
            if categories_P[i] == categories_P[j] and _twins(i, j, twins_PP, bits_PW, box_P5, width):
                count += 1
                break
    return count


@_kernel
def merge_walk(twins_PP, bits_PW, box_P5, width, order_P, claim_pixels, node_bits_NW):
    """SingleMPO merge walk in the given order. An instance not yet absorbed becomes a node unless
    (claim_pixels) all its pixels are claimed already (then it is dropped); it claims its pixels
    and absorbs every later instance that is its twin (twins_PP, see _twins). Returns node_of
    (P,) (-1 = dropped), the node's own instance (N,) and (claim_pixels) the pixels it claimed
    (N,). Those pixels are written to the first N rows of node_bits_NW when it has rows (shaped as
    bits_PW; contents ignored). box_P5: mask_boxes of the masks: only the words of their rows are
    visited."""
    n_pred, n_words, keep = twins_PP.shape[0], bits_PW.shape[1], node_bits_NW.shape[0] > 0
    node_of, source, area = np.empty(n_pred, np.int64), np.empty(n_pred, np.int64), np.empty(n_pred, np.int64)
    node_of[:] = -1
    source[:] = -1
    absorbed = np.empty(n_pred, np.bool_)
    absorbed[:] = 0
    claimed = np.empty(n_words, np.uint64)
    claimed[:] = 0
    n_nodes = 0
    for rank in range(n_pred):
        i = order_P[rank]
        if absorbed[i]:
            continue
        start, stop, free = 0, 0, 0  # the words of the mask's rows (an empty mask has none), its pixels claimed
        if claim_pixels:
            if box_P5[i, 0] > 0:
                start = (box_P5[i, 1] * width) >> 6
                stop = min(((box_P5[i, 2] + 1) * width + 63) >> 6, n_words)
            for w in range(start, stop):
                word = bits_PW[i, w] & ~claimed[w]
                claimed[w] |= bits_PW[i, w]
                free += popcount64(word)
                if keep:
                    node_bits_NW[n_nodes, w] = word
            if free == 0:
                continue
        if keep:  # the node's words outside its rows
            node_bits_NW[n_nodes, :start] = 0
            node_bits_NW[n_nodes, stop:] = 0
        node_of[i], source[n_nodes], area[n_nodes] = n_nodes, i, free
        for later in range(rank + 1, n_pred):
            j = order_P[later]
            if not absorbed[j] and _twins(i, j, twins_PP, bits_PW, box_P5, width):
                absorbed[j], node_of[j] = True, n_nodes
        n_nodes += 1
    return node_of, source[:n_nodes], area[:n_nodes]


@_kernel
def box_iou(gt_box_G4, gt_cat_G, pred_box_P4, pred_cat_P):
    """IoU (P, G) of xyxy boxes (continuous, no +1); -1.0 where categories differ."""
    iou = np.empty((pred_box_P4.shape[0], gt_box_G4.shape[0]))
    iou[:] = -1.0
    for p in range(pred_box_P4.shape[0]):
        a = pred_box_P4[p]
        area_a = (a[2] - a[0]) * (a[3] - a[1])
        for g in range(gt_box_G4.shape[0]):
            if pred_cat_P[p] != gt_cat_G[g]:
                continue
            b = gt_box_G4[g]
            area_b = (b[2] - b[0]) * (b[3] - b[1])
            inter = max(0.0, min(a[2], b[2]) - max(a[0], b[0])) * max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
            union = area_a + area_b - inter
            iou[p, g] = inter / union if union > 0 else 0.0
    return iou


@_kernel
def best_candidates(iou_PG, threshold):
    """Per prediction, the GT of highest IoU (first on ties) if IoU >= threshold, else -1."""
    candidate = np.empty(iou_PG.shape[0], np.int64)
    candidate[:] = -1
    for p in range(iou_PG.shape[0]):
        best, best_iou = -1, -1.0
        for g in range(iou_PG.shape[1]):
            if iou_PG[p, g] > best_iou:
                best, best_iou = g, iou_PG[p, g]
        if best >= 0 and best_iou >= threshold:
            candidate[p] = best
    return candidate


@_kernel
def match_unique(iou_PG, threshold):
    """Algorithm 2: pred -> GT (P,), each GT kept by its best candidate (earlier wins ties)."""
    candidate = best_candidates(iou_PG, threshold)
    holder = np.empty(iou_PG.shape[1], np.int64)
    holder[:] = -1
    for p in range(iou_PG.shape[0]):
        g = candidate[p]
        if g >= 0 and (holder[g] < 0 or iou_PG[p, g] > iou_PG[holder[g], g]):
            holder[g] = p
    pred_to_gt = np.empty(iou_PG.shape[0], np.int64)
    pred_to_gt[:] = -1
    for g in range(holder.shape[0]):
        if holder[g] >= 0:
            pred_to_gt[holder[g]] = g
    return pred_to_gt


@_kernel
def first_positions(sequence_keys_N, query_keys_Q):
    """For each query key, the first index of it in the sequence, or -1 (keys < 0 never match)."""
    first = np.empty(query_keys_Q.shape[0], np.int64)
    first[:] = -1
    left = query_keys_Q.shape[0]
    for i in range(sequence_keys_N.shape[0]):
        key = sequence_keys_N[i]
        if key < 0:
            continue
        for q in range(query_keys_Q.shape[0]):
            if first[q] < 0 and query_keys_Q[q] == key:
                first[q] = i
                left -= 1
        if left == 0:
            break
    return first



def legacy_box_iou(tool, gt_box_G4, gt_cat_G, pred_box_P4, pred_cat_P):
    """IoU (P, G) as a LegacyTool computes it: in tool.dtype throughout, tool.pixel added to widths and
    heights, inter / ((GT area + predicted area) - inter), the union at least tool.least_union;
    -1 where categories differ. OpenPSG: mmdet's bbox_overlaps (no +1, union >= 1e-6); sgb:
    boxlist_iou (+1; an empty union gives NaN, which never matches)."""
    gt, pred = np.asarray(gt_box_G4, tool.dtype)[:, None], np.asarray(pred_box_P4, tool.dtype)[None]
    pixel = tool.dtype(tool.pixel)
    area_gt = (gt[..., 2] - gt[..., 0] + pixel) * (gt[..., 3] - gt[..., 1] + pixel)
    area_pred = (pred[..., 2] - pred[..., 0] + pixel) * (pred[..., 3] - pred[..., 1] + pixel)
    wh = np.maximum(np.minimum(gt[..., 2:], pred[..., 2:]) - np.maximum(gt[..., :2], pred[..., :2]) + pixel,
                    tool.dtype(0))
    inter = wh[..., 0] * wh[..., 1]
    union = area_gt + area_pred - inter
    if tool.least_union is not None:
        union = np.maximum(union, tool.dtype(tool.least_union))
    with np.errstate(divide="ignore", invalid="ignore"):
        iou = inter / union
    return np.where(pred_cat_P[:, None] == gt_cat_G[None], iou.T, tool.dtype(-1))


@_kernel
def triplet_hits(rows_N3, ok_PG, relations_R3, limit, n_predicates):
    """OpenPSG's many-to-many matching of rows[:limit] (as written) with the GT triplets: a row
    hits a GT triplet when the predicates are equal and ok_PG holds for subject and object. Per
    GT triplet: the first row hitting it and the first row hitting its pair (any predicate), -1
    where none, and the number of other predicates on its pair before its hit."""
    n_gt = relations_R3.shape[0]
    first_hit, first_pair = np.full(n_gt, -1, np.int64), np.full(n_gt, -1, np.int64)
    before, seen = np.zeros(n_gt, np.int64), np.zeros((n_gt, n_predicates), np.bool_)
    left = n_gt
    for r in range(min(limit, rows_N3.shape[0])):
        s, o, p = rows_N3[r, 0], rows_N3[r, 1], rows_N3[r, 2]
        for i in range(n_gt):
            if first_hit[i] >= 0 or not (ok_PG[s, relations_R3[i, 0]] and ok_PG[o, relations_R3[i, 1]]):
                continue
            if first_pair[i] < 0:
                first_pair[i] = r
            if p == relations_R3[i, 2]:
                first_hit[i] = r
                left -= 1
            elif not seen[i, p]:
                seen[i, p] = True
                before[i] += 1
        if left == 0:
            break
    return first_hit, first_pair, before


# ---------------------------------------------------------------------------------------------
# 7. One image: its masks compared, matched and counted under every protocol of the run
# ---------------------------------------------------------------------------------------------


AUDIT_FIELDS = ("repeated_triplets", "repeated_pairs", "self_pairs", "duplicate_instances",
                "absorbed_instances", "dropped_instances", "duplicate_relations_after_merge")


def merge_order(pred):
    """SingleMPO walk order: by score (descending, stable) when every instance has one, else by
    first appearance in ng_triplets then triplets (subject before object), unreferenced last."""
    if pred.scores is not None:
        return np.argsort(-pred.scores, kind="stable")
    referenced = np.concatenate([pred.ng_triplets[:, :2].ravel(), pred.triplets[:, :2].ravel()])
    seen = referenced[_first_occurrences(referenced)]
    rest = np.setdiff1d(np.arange(len(pred.categories)), seen)
    return np.concatenate([seen, rest]).astype(np.int64)


def remap_to_nodes(triplets_N3, node_of_P):
    """Triplets over SingleMPO nodes: dropped ends and self-pairs removed."""
    subject, obj = node_of_P[triplets_N3[:, 0]], node_of_P[triplets_N3[:, 1]]
    keep = (subject >= 0) & (obj >= 0) & (subject != obj)
    return np.stack([subject, obj, triplets_N3[:, 2]], axis=1)[keep]


def _repeats(keys_N):
    """The number of entries equal to an earlier one (len(keys) - len(np.unique(keys)))."""
    ordered = np.sort(keys_N)
    return np.count_nonzero(ordered[1:] == ordered[:-1])


def audit_counts(pred, merge, width):
    """Protocol audit counts of one prediction (AUDIT_FIELDS order) from its Merge."""
    T, n_pred = pred.triplets, len(pred.categories)
    duplicates = duplicate_instances(merge.twins, merge.bits, merge.boxes, width, pred.categories)
    pairs = T[:, 0] * n_pred + T[:, 1]
    triplet_keys = pairs * (int(T[:, 2].max()) + 1 if len(T) else 1) + T[:, 2]
    merged_pairs = merge.triplets[:, 0] * n_pred + merge.triplets[:, 1]
    return [_repeats(triplet_keys), _repeats(pairs), np.count_nonzero(T[:, 0] == T[:, 1]),
            duplicates, np.count_nonzero(merge.node_of >= 0) - len(merge.source),
            np.count_nonzero(merge.node_of < 0), _repeats(merged_pairs)]


class Settings(typing.NamedTuple):
    """How every image of a run is evaluated."""

    mode: str  # "mask" or "box"
    protocols: tuple  # the headline protocol first
    iou_threshold: float
    k: tuple  # cut-off labels
    imr_k: tuple
    n_predicates: int
    audit: bool
    task: str = "sgdet"
    confusion_k: str | None = None  # the cut-off of the predicate confusion (None: not counted)
    subsets: tuple = ()  # the resolved Subsets, in config order
    measures: tuple = ()  # units counted beside the protocols (MEASURES: "pq")
    pq_merge: str | None = None  # panoptic quality: the MERGE_RULES name for overlapping masks
    n_objects: int = 0  # panoptic quality: the object categories (the first n_things are things)
    n_things: int = 0
    pq_rule: str | None = None  # panoptic quality: the PQ_RULES name (panopticapi, openpsg)


def run_units(settings):
    """The units a run counts, in record order: its protocols, then its measures."""
    return [PROTOCOLS[name] for name in settings.protocols] + [MEASURES[name] for name in settings.measures]


class ImageTask(typing.NamedTuple):
    """One image to evaluate (what a worker process receives)."""

    gt: GTImage
    pred: PredImage | None  # None: the image has no prediction record
    source: PredSource  # where the prediction's mask files are
    settings: Settings
    gt_cache: object = None  # GTCache of prepared GT images (mask mode), or None


class ImageResult(typing.NamedTuple):
    """What evaluate_image returns for one image."""

    counts: dict | None  # {protocol: image_counts()}; None after a problem
    audit: list | None  # AUDIT_FIELDS counts; None when the audit is off or after a problem
    problems: list  # one line per problem with the image's files
    check: list  # CHECK_FIELDS counts


class Masks(typing.NamedTuple):
    """The packed masks (W words each) of one image and the IoU of its predictions with its GT."""

    gt_bits: np.ndarray | None  # (G, W); None when no prediction needs them
    gt_boxes: np.ndarray | None  # (G, 5) mask_boxes
    pred_bits: np.ndarray  # (P, W)
    pred_boxes: np.ndarray  # (P, 5)
    iou: np.ndarray  # (P, G) mask_iou
    gt_void: tuple | None = None  # (the VOID pixels (1, W), their mask_boxes (1, 5)); None when not decoded


class Merge(typing.NamedTuple):
    """The SingleMPO merge of one prediction."""

    twins: np.ndarray  # (P, P) int8 of _twins (1, 0, or -1 for not yet decided)
    bits: np.ndarray  # (P, W) the masks the twins are decided on ((P, 0) in box mode)
    boxes: np.ndarray  # (P, 5) their mask_boxes
    node_of: np.ndarray  # (P,) node of each instance, -1 = dropped
    source: np.ndarray  # (N,) each node's own instance
    node_bits: np.ndarray  # (N, W) the pixels each node claimed; (0, W) unless SingleMPO needs them
    triplets: np.ndarray  # (T, 3) triplets remapped to nodes
    node_boxes: np.ndarray  # (N, 5) mask mode: the pixels each node claimed and its mask's box, which holds them


def compare_masks(gt, pred, source, needed, threshold, gt_cache=None):
    """Decode an image's masks and compare its predictions with its GT (mask_iou). needed: (P,)
    bool or None (all); the GT PNG is not read when no prediction is needed."""
    bits = pred.bits if pred.bits is not None else load_pred_masks(source, pred, gt.height, gt.width, needed)
    boxes = mask_boxes(bits, gt.width)
    if needed is not None and not needed.any():
        return Masks(None, None, bits, boxes, np.full((len(bits), len(gt.categories)), -1.0))
    all_bits, all_boxes = _prepared_gt(gt, gt_cache)
    G = len(gt.categories)
    gt_bits, gt_boxes = all_bits[:G], all_boxes[:G]
    return Masks(gt_bits, gt_boxes, bits, boxes,
                 mask_iou(gt_bits, gt.categories, gt_boxes, bits, pred.categories, boxes, gt.width, threshold),
                 (all_bits[G:], all_boxes[G:]))


def merge_prediction(pred, masks, width, keep_nodes):
    """The SingleMPO merge of a prediction: by mask IoU with pixel claiming, or (masks None, box
    mode) by box IoU without. keep_nodes: write the node masks (only SingleMPO matches them)."""
    if masks is None:
        no_category = np.zeros(len(pred.categories), np.int64)
        twins = (box_iou(pred.boxes, no_category, pred.boxes, no_category) >= MERGE_IOU).astype(np.int8)
        bits = np.zeros((len(twins), 0), np.uint64)
        boxes = mask_boxes(bits, width)
    else:
        bits, boxes, twins = masks.pred_bits, masks.pred_boxes, np.full((len(masks.pred_bits),) * 2, -1, np.int8)
    rows = len(bits) if keep_nodes else 0
    node_bits = _buffer("node_bits", rows * bits.shape[1], np.uint64).reshape(rows, bits.shape[1])
    node_of, source, area = merge_walk(twins, bits, boxes, width, merge_order(pred), masks is not None, node_bits)
    return Merge(twins, bits, boxes, node_of, source, node_bits[:len(source)], remap_to_nodes(pred.triplets, node_of),
                 _node_boxes(boxes, source, area))


def _node_boxes(boxes, source, area):
    """(N, 5) boxes of a merge walk's nodes: the box of each node's own mask, which holds the
    pixels the node claimed, with their count (merge_walk's area)."""
    node_boxes = boxes[source]
    node_boxes[:, 0] = area
    return node_boxes


CHECK_FIELDS = ("rows", "rows_on_gt_pairs", "rows_repeating_a_pair", "instance_count_differs", "boxes_differ",
                "labels_differ")  # per image, whatever the protocol: the task check and the list-shape warnings


def task_instances(gt, pred, task):
    """(the prediction the protocols match under the task, its CHECK_FIELDS counts as a dict, (T,)
    bool: the rows of triplets on the index pair of a GT relation). predcls: the GT's categories
    and boxes, scores 1 (when the prediction has as many instances as the GT; else it is evaluated
    as stored, and counted); sgcls and sgdet: as stored."""
    G, T = len(gt.categories), pred.triplets
    span = max(len(pred.categories), G, 1)
    pairs, gt_pairs = T[:, 0] * span + T[:, 1], gt.relations[:, 0] * span + gt.relations[:, 1]
    on_gt_pairs, same_count = np.isin(pairs, gt_pairs), len(pred.categories) == G
    check = dict.fromkeys(CHECK_FIELDS, 0)
    check.update(rows=len(T), rows_on_gt_pairs=np.count_nonzero(on_gt_pairs), rows_repeating_a_pair=_repeats(pairs),
                 instance_count_differs=int(task != "sgdet" and not same_count))
    if task == "sgdet" or not same_count:
        return pred, check, on_gt_pairs
    if pred.boxes is not None:
        check["boxes_differ"] = int((np.abs(pred.boxes - gt.boxes) > BOX_TOLERANCE).any())
    if task == "sgcls":
        return pred, check, on_gt_pairs
    check["labels_differ"] = int((pred.categories != gt.categories).any())
    return (dataclasses.replace(pred, categories=gt.categories, boxes=gt.boxes, scores=np.ones(G)), check,
            on_gt_pairs)


def gt_masks_as_predictions(gt, threshold, gt_cache=None):
    """predcls in mask mode: the GT's masks stand for the predicted ones."""
    all_bits, all_boxes = _prepared_gt(gt, gt_cache)
    G = len(gt.categories)
    bits, boxes = all_bits[:G], all_boxes[:G]
    return Masks(bits, boxes, bits, boxes, mask_iou(bits, gt.categories, boxes, bits, gt.categories, boxes, gt.width,
                                                    threshold), (all_bits[G:], all_boxes[G:]))


def evaluate_image(task):
    """One image under every protocol of the run -> ImageResult (a worker's unit of work): the
    task's instances (task_instances), their IoU with the GT's (image_iou), the SingleMPO merge
    when the audit or a protocol needs it, then each protocol's counts (Protocol.image_counts)."""
    gt, pred, settings = task.gt, task.pred, task.settings
    units = run_units(settings)
    if pred is None or not len(pred.categories) and pred.panoptic is None:  # no instances: no triplets (checked)
        return _empty_result(gt, settings, units)
    if not len(pred.categories) and pred.bits is None:  # a panoptic segmentation only: no instance masks to read
        pred = dataclasses.replace(pred, bits=np.zeros((0, _words(gt.height * gt.width)), np.uint64))
    task_pred, check, on_gt_pairs = task_instances(gt, pred, settings.task)
    as_gt = settings.task == "predcls" and not check["instance_count_differs"]
    check = list(check.values())
    needs_merge = any(unit.needs_merge for unit in units if isinstance(unit, Protocol))
    merging = settings.audit or needs_merge
    where = f"{task.source.path}: image {gt.image_id}" if task.source is not None else f"image {gt.image_id}"
    try:
        iou, masks = image_iou(task, task_pred, as_gt, merging or any(unit.needs_all_masks for unit in units))
        merge = merge_prediction(task_pred, masks, gt.width, needs_merge) if merging else None
        compared = Compared(gt, task_pred, pred, iou, masks, merge, on_gt_pairs if settings.task != "sgdet" else None,
                            settings, where, task.source)
        counts = {unit.name: unit.image_counts(compared) for unit in units}
    except SGEvalError as error:
        return ImageResult(None, None, error.problems, check)
    return ImageResult(counts, audit_counts(task_pred, merge, gt.width) if settings.audit else None, [], check)


def image_iou(task, pred, as_gt, all_masks):
    """(IoU (P, G) of pred's instances with the GT's, -1 where the categories differ; the Masks
    behind it in mask mode, else None). as_gt: predcls in mask mode, the GT's masks stand for the
    predicted ones; unless all_masks only the masks of the GT's categories are decoded."""
    gt, settings = task.gt, task.settings
    if settings.mode == "box":
        return box_iou(gt.boxes, gt.categories, pred.boxes, pred.categories), None
    if as_gt:
        masks = gt_masks_as_predictions(gt, settings.iou_threshold, task.gt_cache)
    else:
        needed = None if all_masks else np.isin(pred.categories, gt.categories)
        masks = compare_masks(gt, pred, task.source, needed, settings.iou_threshold, task.gt_cache)
    return masks.iou, masks


def _empty_result(gt, settings, units):
    """The ImageResult of an image without a prediction record, or whose record has no instances."""
    counts = {unit.name: unit.empty_counts(gt, settings) for unit in units}
    check = dict.fromkeys(CHECK_FIELDS, 0)
    check["instance_count_differs"] = int(settings.task != "sgdet" and len(gt.categories) > 0)
    return ImageResult(counts, [0] * len(AUDIT_FIELDS) if settings.audit else None, [], list(check.values()))


def protocol_problems(pred, image, settings, where):
    """The problem lines of a checked prediction of a GT image (None: a test image without
    relations) that a protocol or measure of the run cannot read."""
    return [problem for unit in run_units(settings) if (problem := unit.record_problem(pred, image, settings, where))]


# ---------------------------------------------------------------------------------------------
# 8. Count fields: every per-image count, declared once
# ---------------------------------------------------------------------------------------------


class CountField(typing.NamedTuple):
    """One per-image count of a protocol. ``dims`` is its shape in symbols (``dimensions``): K
    cut-offs, K+1 (and one more cut-off), IMR the imr_k cut-offs, S subsets, C predicates, an int a
    fixed size, n a length the record stores before the values (a ragged field). A field whose last
    axis is C is per-predicate: a record keeps it at the predicates of the image's GT only. ``key``,
    ``family`` and ``total``: the per_image file's name of the field, the metric family its hits are
    behind and the field that is their denominator. ``bounds``: a ragged field's upper bound per
    row (a function of Settings; None: any count)."""

    name: str
    dims: tuple
    meaning: str
    key: str | None = None
    family: str | None = None
    total: str | None = None
    bounds: typing.Callable | None = None
    limit: str | None = None  # the field whose counts bound it (a hit count at most what it counts)
    gt_only: bool = False  # the GT alone decides it (a state's record must hold the image's)

    @property
    def per_predicate(self):
        return self.dims[-1:] == ("C",)

    @property
    def ragged(self):
        return "n" in self.dims

    def shape(self, settings):
        sizes = dimensions(settings)
        return tuple(sizes.get(dim, dim) for dim in self.dims)


def dimensions(settings):
    """The sizes of the CountField symbols under a run's Settings."""
    K = len(settings.k)
    return {"K": K, "K+1": K + 1, "IMR": len(settings.imr_k), "S": len(settings.subsets), "C": settings.n_predicates}


RECALL_FIELDS = (  # every protocol counts these, in this order (a record's layout)
    CountField("gt_rel", ("C",), "GT relations (duplicates removed; sgb: every row of the file)", "gt_relations",
               gt_only=True),
    CountField("gc_hits", ("K", "C"), "GT relations the R@k selection finds", "R@", "R", "gt_rel", limit="gt_rel"),
    CountField("ng_hits", ("K", "C"), "GT relations the ngR@k selection finds", "ngR@", "ngR", "gt_rel",
               limit="gt_rel"),
    CountField("gt_pairs", (), "distinct GT subject-object pairs", "gt_pairs", gt_only=True),
    CountField("pair_hits", ("K",), "GT pairs a row of the R@k selection finds", "PR@", "PR", "gt_pairs",
               limit="gt_pairs"),
    CountField("inf_hits", ("C",), "GT relations with both instances matched", "R@inf", "Rinf", "gt_rel",
               limit="gt_rel"),
    CountField("gt_inst", (), "GT instances", "gt_instances", gt_only=True),
    CountField("inst_hits", (), "GT instances matched", "InstR", "InstR", "gt_inst", limit="gt_inst"),
    CountField("rank_sum", ("C",), "PRank: the ranks of the GT relations that appear, summed"),
    CountField("rank_n", ("C",), "PRank: the GT relations that appear", limit="gt_rel"),
    CountField("z_gt", (), "zero-shot GT relations", "gt_zeroshot", gt_only=True),
    CountField("z_gc_hits", ("K",), "zero-shot GT relations the R@k selection finds", "zR@", "zR", "z_gt",
               limit="z_gt"),
    CountField("z_ng_hits", ("K",), "zero-shot GT relations the ngR@k selection finds", "ngzR@", "ngzR", "z_gt",
               limit="z_gt"),
    CountField("imr_hits", ("IMR", "C"), "GT relations among the first k rows of their predicate", limit="gt_rel"),
    CountField("imr_short", ("IMR",), "1 when a predicate of the GT has fewer than k rows listed"),
    CountField("a_hits", ("K",), "A@k: GT relations the rows on GT pairs find (sgcls, predcls)", "A@", "A", "gt_rel"),
    CountField("subset_gt", ("S", "C"), "GT relations of each named subset", gt_only=True),
    CountField("subset_gc_hits", ("S", "K", "C"), "subset GT relations the R@k selection finds", limit="subset_gt"),
    CountField("subset_ng_hits", ("S", "K", "C"), "subset GT relations the ngR@k selection finds", limit="subset_gt"),
    CountField("confusion", (2, "n"), "predicate confusion: [cell, count] columns (confusion_cells)",
               bounds=lambda settings: (settings.n_predicates * (settings.n_predicates + 1), None)),
)


def field_shapes(fields, settings):
    """{name: shape} of the fixed-size fields among fields (the image axis excluded)."""
    return {field.name: field.shape(settings) for field in fields if not field.ragged}


# ---------------------------------------------------------------------------------------------
# 9. Protocols: one unit each, holding how it matches, what it counts and how it reports
# ---------------------------------------------------------------------------------------------


class Compared(typing.NamedTuple):
    """One image's GT and prediction compared: what every protocol's counts start from."""

    gt: GTImage
    pred: PredImage  # the instances the protocols match under the task (task_instances)
    stored: PredImage  # the record as stored
    iou: np.ndarray  # (P, G) IoU of pred's instances with the GT's, -1 where the categories differ
    masks: typing.Any  # mask mode: the Masks behind iou (None in box mode)
    merge: typing.Any  # the SingleMPO Merge, when the audit or a protocol needs it
    on_gt_pairs: np.ndarray | None  # sgcls / predcls: (T,) bool, the rows of triplets on a GT relation's pair
    settings: typing.Any
    where: str = ""  # the image (and its file) in problem lines
    source: typing.Any = None  # the PredSource of a file's record (its further files), else None


class Matching(typing.NamedTuple):
    """How one protocol relates an image's predictions to its GT."""

    pred_to_gt: np.ndarray | None  # (P,) or (N,) over SingleMPO nodes, -1 = unmatched; None for legacy
    node_of: np.ndarray | None  # singlempo: (P,) node of each instance, -1 = dropped
    ok: np.ndarray | None  # legacy: (P, G) bool, IoU >= threshold and same category


class Protocol:
    """A protocol: one unit holding everything that is its own (its matching, its count fields and
    their shapes, how its metrics come from them, its fixed rules, the row lists it reads, its
    table note). Shared code asks the unit (PROTOCOLS[name]) and never tests a name.

    This base holds the fair protocols' rules: a prediction (or node) maps to at most one GT
    instance; R@k walks ``triplets`` under the graph constraint, ngR@k the distinct rows of
    ``ng_triplets``; every count of RECALL_FIELDS; the config's aggregation rules."""

    name = ""
    summary = ""  # one line for --help and the docs
    compare = True  # one of the recall protocols --compare-protocols runs
    tool = None  # the LegacyTool whose numbers it reproduces
    fields = RECALL_FIELDS  # its count fields, in record order
    lists = {"gc": ("triplets",), "ng": ("ng_triplets",)}  # the row lists it reads: per role, the first given
    needs_merge = False  # it matches the SingleMPO merge's nodes
    needs_all_masks = False  # it reads every predicted mask (else only those of the GT's categories are decoded)
    graph_constraint = True  # R@k: the first row of each predicted pair (else of each distinct triplet)
    fixed_rules = None  # the aggregation rules its tool fixes, whatever the config says
    scalar_keys = ()  # its metrics without a cut-off (the table prints them in one line)
    table_families = ()  # its metric families beyond the shared ones, a row each in the table
    report_metrics = ("R", "mR")  # the default columns of sgeval report's main table under it (families or keys)
    gt_pairs_given = False  # its sgcls / predcls hand the model the GT's pairs (rows on them only are no misreading)

    def __repr__(self):
        return f"<protocol {self.name}>"

    def config_problems(self, config, source):
        """Problem lines when the config asks this protocol for something it cannot do."""
        return []

    def record_problem(self, pred, image, settings, where):
        """The problem line when a prediction of a GT image (None: a test image without relations)
        lacks what this protocol reads, else None."""
        return None

    def shapes(self, settings):
        return field_shapes(self.fields, settings)

    def rows(self, pred, role):
        """(rows (N, 3), scores (N,) or None) of the first list of the role the prediction gives."""
        return pred.row_list(self.lists[role])

    def match(self, compared):
        """The Matching of an image."""
        return Matching(match_unique(compared.iou, compared.settings.iou_threshold), None, None)

    def count(self, compared, matching, triplets, ng_triplets):
        """The count fields of the given rows under a Matching (image_counts)."""
        gt, settings = compared.gt, compared.settings
        return image_counts(gt.relations, gt.zeroshot, len(gt.categories), matching.pred_to_gt, triplets,
                            ng_triplets, settings.k, settings.imr_k, settings.n_predicates, self.graph_constraint,
                            settings.confusion_k, gt.subsets)

    def image_counts(self, compared):
        """Every count field of one image; with the task's instances (sgcls, predcls) A@k's hits:
        R@k's hits of the rows of triplets on GT pairs."""
        matching = self.match(compared)
        counts = self.count(compared, matching, self.rows(compared.pred, "gc")[0], self.rows(compared.pred, "ng")[0])
        if compared.on_gt_pairs is not None:
            restricted = self.count(compared, matching, self.rows(compared.pred, "gc")[0][compared.on_gt_pairs],
                                    NO_ROWS)
            counts["a_hits"] = restricted["gc_hits"].sum(axis=1)
        return counts

    def empty_counts(self, gt, settings):
        """The counts of an image without a prediction record (or without instances)."""
        return image_counts(gt.relations, gt.zeroshot, len(gt.categories), np.zeros(0, np.int64), NO_ROWS, NO_ROWS,
                            settings.k, settings.imr_k, settings.n_predicates, True, settings.confusion_k, gt.subsets)

    def rules(self, config_rules):
        """The aggregation rules its numbers follow (config_rules: the run's Rules)."""
        return dict(self.fixed_rules) if self.fixed_rules else \
            {"absent_predicates": config_rules.absent_predicates, "aggregation": config_rules.aggregation}

    def families(self, config_rules):
        """The metric families it reports of those the run's Rules ask for."""
        return [family for family in config_rules.metrics if family != "A" or config_rules.task != "sgdet"]

    def metrics(self, config_rules, store, training, groups, subsets, gt=None):
        """(metrics, per_predicate, rules) from its CountStore under the run's Rules: aggregate
        under its rules, the predicate groups' and the subsets' means (gt: the evaluated GroundTruth)."""
        rules, wanted, k = self.rules(config_rules), self.families(config_rules), config_rules.k
        metrics, per_predicate = aggregate(store, k, config_rules.imr_k, wanted, rules["absent_predicates"],
                                           rules["aggregation"], training.pairs, config_rules.wimr_tau)
        metrics.update(group_means(per_predicate, groups, k, rules["absent_predicates"]))
        subset_values, subset_per_predicate = subset_metrics(store, k, subsets, wanted, **rules)
        metrics.update(subset_values)
        per_predicate.update(subset_per_predicate)
        return metrics, per_predicate, rules

    def per_image_columns(self, store, config_rules, families):
        """per_image's columns {key: (I,) or (I, K) int64}: the hits behind each R-type metric of
        the families (CountField.family) and their denominators."""
        fields = {field.name: field for field in self.fields}
        columns = {}
        for field in self.fields:
            if field.family in families:
                for name, key in ((field.total, fields[field.total].key), (field.name, field.key)):
                    array = store[name]
                    columns[key] = array.sum(axis=-1) if fields[name].per_predicate else array
        columns.update(_subset_columns(store, config_rules.k, [spec.name for spec in config_rules.subsets], families))
        return columns

    def gt_counts(self, image, settings):
        """Its counts of an image without a prediction, with "n_rows": the GT rows it counts (what a
        state's record is checked against, count_problems)."""
        return {**self.empty_counts(image, settings), "n_rows": len(image.relations)}

    def count_problems(self, fields, columns, reference, settings, where):
        """The problems of its fields in a state's record (unpack_record's; reference: gt_counts):
        field_problems, then the rules of the recall fields (left_out: a legacy tool's image left
        out, its fields all zero)."""
        problems = field_problems(fields, columns, reference, self.fields, settings, where)
        if problems:
            return problems
        checks = (("a_hits", fields["gt_rel"].sum()), ("imr_short", 1), ("rank_sum", fields["rank_n"] * MAX_COUNT))
        problems = [f"{where} field '{name}' is out of range" for name, bound in checks if (fields[name] > bound).any()]
        cells, C = fields["confusion"], settings.n_predicates
        expected = reference["gt_rel"] if settings.confusion_k and fields["gt_rel"].any() else 0
        if (np.bincount(cells[0] // (C + 1), cells[1], C) != expected).any() or cells.size and (
                (cells[1] < 1).any() or len(np.unique(cells[0])) < cells.shape[1]):
            problems.append(f"{where} confusion cells do not add up to its GT's triplets")
        return problems

    def images_left_out(self, store):
        """The images its means leave out (a legacy tool's images without predicted relations)."""
        return int(np.count_nonzero(store["gt_rel"].sum(axis=1) == 0))

    def table_note(self, section, results):
        """A line under the table about its rules, or None."""
        return None

    def task_check_note(self, config_rules):
        """What it did with a prediction whose instances are not the GT's (sgcls, predcls), when
        that is not what task_check's meaning says, or None."""
        return None


class Unique(Protocol):
    name = "unique"
    summary = "each GT instance keeps its best same-category prediction (Algorithm 2); graph-constrained R@k"


class MultiMPO(Protocol):
    name = "multimpo"
    summary = "every prediction maps to its best GT instance; R@k over distinct triplets, no graph constraint"
    graph_constraint = False

    def match(self, compared):
        return Matching(best_candidates(compared.iou, compared.settings.iou_threshold), None, None)


class SingleMPO(Protocol):
    name = "singlempo"
    summary = "duplicate predictions merged into nodes (mask IoU >= 0.5, pixels claimed), then unique"
    needs_merge = needs_all_masks = True

    def match(self, compared):
        gt, masks, merge, settings = compared.gt, compared.masks, compared.merge, compared.settings
        node_iou = compared.iou[merge.source] if masks is None else mask_iou(
            masks.gt_bits, gt.categories, masks.gt_boxes, merge.node_bits, compared.pred.categories[merge.source],
            merge.node_boxes, gt.width, settings.iou_threshold)
        return Matching(match_unique(node_iou, settings.iou_threshold), merge.node_of, None)

    def count(self, compared, matching, triplets, ng_triplets):
        triplets, ng_triplets = (remap_to_nodes(rows, matching.node_of) for rows in (triplets, ng_triplets))
        return super().count(compared, matching, triplets, ng_triplets)


class LegacyProtocol(Protocol):
    """A legacy tool's rules: no instance mapping, the rows as written, a row hits every GT
    relation whose predicate it has and whose instances its ends meet (IoU and category; the tool's
    own box IoU in box mode); ngR@k from the first LEGACY_NG_LIST rows; an image without rows left
    out of every mean; absent predicates count 0, per-image means."""

    fixed_rules = {"absent_predicates": "zero", "aggregation": "per_image"}
    gt_rows_of_file = False  # count every relation row of the GT file, duplicates included

    def gt_rows(self, image):
        """The GT relation rows it counts: every row of the file, or the image's deduplicated ones."""
        return image.file_rows if self.gt_rows_of_file else slice(None)

    def match(self, compared):
        gt, pred, settings = compared.gt, compared.pred, compared.settings
        if settings.mode == "box":
            iou = legacy_box_iou(self.tool, gt.boxes, gt.categories, pred.boxes, pred.categories)
            return Matching(None, None, iou >= np.float32(settings.iou_threshold))
        return Matching(None, None, compared.iou >= settings.iou_threshold)

    def count(self, compared, matching, triplets, ng_triplets):
        gt, settings = compared.gt, compared.settings
        if not len(triplets):
            return self.left_out(settings)
        rows = self.gt_rows(gt)
        return legacy_counts(gt.relations[rows], gt.zeroshot[rows], matching.ok, triplets, ng_triplets, settings.k,
                             settings.imr_k, settings.n_predicates, settings.confusion_k,
                             None if gt.subsets is None else gt.subsets[rows])

    def gt_counts(self, image, settings):
        rows = self.gt_rows(image)
        relations = image.relations[rows]
        counts = image_counts(relations, image.zeroshot[rows], len(image.categories), np.zeros(0, np.int64), NO_ROWS,
                              NO_ROWS, settings.k, settings.imr_k, settings.n_predicates, True, settings.confusion_k,
                              None if image.subsets is None else image.subsets[rows])
        return {**counts, "n_rows": len(relations)}

    def count_problems(self, fields, columns, reference, settings, where):
        if not any(fields[field.name].any() for field in RECALL_FIELDS):  # an image it leaves out: all zero
            own = [field for field in self.fields if field not in RECALL_FIELDS]
            return field_problems(fields, columns, reference, own, settings, where)
        return super().count_problems(fields, columns, reference, settings, where)

    def left_out(self, settings):
        """The counts of an image left out of every mean (all zero, GT included)."""
        return {name: np.zeros(shape, np.int64) for name, shape in self.shapes(settings).items()}

    def empty_counts(self, gt, settings):
        return self.left_out(settings)

    def table_note(self, section, results):
        return (f"{self.name}: {self.tool.name}'s rules: absent predicates count 0, per-image means; "
                f"{section['images_left_out']} images without predicted relations left out of every mean")


class OpenPSG(LegacyProtocol):
    name = "openpsg"
    summary = "OpenPSG's evaluator: rows as written, many-to-many, its float32 box IoU"
    tool = LegacyTool("OpenPSG", 0, 1e-6)


class SGB(LegacyProtocol):
    """Scene-Graph-Benchmark's VG evaluation (its vg_eval.py and sgg_eval.py): openpsg's rules, its
    +1 box IoU, every relation row of the GT file. In predcls its evaluator puts the GT's boxes,
    labels and scores of 1 in place of the prediction's by index, whatever their number
    (vg_eval.py:263-266): a prediction with another number of instances is scored with shifted
    instances here too (the fair protocols score it as stored), and a row whose index the tool
    would fail on is an error."""

    name = "sgb"
    summary = "Scene-Graph-Benchmark's evaluator: as openpsg, +1 box IoU, every GT row of the file"
    tool = LegacyTool("Scene-Graph-Benchmark", 1, None)
    gt_rows_of_file = True

    @staticmethod
    def by_index(image, pred, settings):
        """Whether the tool puts the GT's instances in place of this prediction's by index, where
        task_instances keeps them as stored (predcls, another number of instances)."""
        return settings.task == "predcls" and image is not None and len(pred.categories) != len(image.categories)

    def record_problem(self, pred, image, settings, where):
        if not self.by_index(image, pred, settings):
            return None
        for name in ("triplets", "ng_triplets"):
            rows = getattr(pred, name)
            if len(rows) and rows[:, :2].max() >= len(image.categories):
                row = int(np.flatnonzero(rows[:, :2].max(axis=1) >= len(image.categories))[0])
                return (f"{where}: {name[:-1]} {row} {rows[row].tolist()}: the {self.name} protocol puts the GT's "
                        f"{len(image.categories)} instances in place of the prediction's {len(pred.categories)} by "
                        f"index in predcls, as {self.tool.name}'s evaluator does, and that evaluator fails on an "
                        f"instance beyond them")
        return None

    def image_counts(self, compared):
        gt, settings = compared.gt, compared.settings
        if self.by_index(gt, compared.stored, settings):  # the GT's instances, by index
            pred = dataclasses.replace(compared.stored, categories=gt.categories, boxes=gt.boxes,
                                       scores=np.ones(len(gt.categories)))
            iou = np.eye(len(gt.categories))  # mask mode: the GT's segments, which do not overlap, on themselves
            compared = compared._replace(pred=pred, iou=iou, masks=None)
        return super().image_counts(compared)

    def task_check_note(self, config_rules):
        if config_rules.task != "predcls":
            return None
        return (f"{self.name}: on these images the GT's instances were put in place of the prediction's by index, as "
                f"{self.tool.name}'s evaluator does: its number used shifted instances (the fair protocols score "
                f"these predictions as stored)")


OI_TOP = 100  # oi: PySGG's Open Images evaluation ranks the 100 best-scored rows (oi_evaluation.py:151, 211)
OI_MIN_SCORE = 1e-5  # ... and keeps those scoring above this (oi_evaluation.py:225)
OI_SCORE_K = "50"  # ... and its score_wtd weighs R@50 (oi_evaluation.py:366)
OI_SCALARS = ("mAP_rel", "wmAP_rel", "mAP_phr", "wmAP_phr", "score", "score_wtd")  # its metrics besides R@k
OI_FIELDS = (
    CountField("oi_gt", (), "every GT relation row of the file", "gt_relations", gt_only=True),
    CountField("oi_hits", ("K+1",), "GT rows the first k rows of the scored list hit (each cut-off, OI_SCORE_K)",
               "R@", limit="oi_gt"),
    CountField("oi_npos", ("C",), "GT rows per predicate (the APs' positives)", gt_only=True),
    CountField("oi_dets", (5, "n"), "per listed row: predicate, its score's float64 bits (high, low 32), the GT "
               "row + 1 its relationship AP and its phrase AP take (0: none)",
               bounds=lambda settings: (settings.n_predicates, 1 << 32, 1 << 32, None, None)),
)


class OpenImages(SGB):
    """PySGG's Open Images evaluation (``pysgg/data/datasets/evaluation/oi/``; every rule with file
    and line: tools/oi_check/README.md), box mode only: R@k of its scored list over every GT row,
    AP_rel / AP_phr per predicate, mAP, wmAP, score and score_wtd; and beside them the mR@k PySGG
    prints, of ``triplets`` under sgb's rules."""

    name = "oi"
    summary = "PySGG's Open Images evaluation: its scored list's R@k, AP_rel, AP_phr, score_wtd (box mode)"
    compare = False
    tool = LegacyTool("PySGG (Open Images)", 1, None)
    fields = RECALL_FIELDS + OI_FIELDS
    lists = {**Protocol.lists, "oi": ("oi", "ng_triplets")}  # its scored list: row_lists.oi, else ng_triplets
    scalar_keys = OI_SCALARS
    report_metrics = ("R@50", "mR@50", "wmAP_rel", "wmAP_phr", "score_wtd")  # what Open Images papers report

    def config_problems(self, config, source):
        if config.gt_seg:
            return [f"{source}: the oi protocol scores boxes (Open Images has no masks): leave out gt_seg to "
                    f"evaluate in box mode"]
        return []

    def record_problem(self, pred, image, settings, where):
        found = super().record_problem(pred, image, settings, where)
        if found:
            return found
        rows, scores = self.rows(pred, "oi")
        if len(rows) and scores is None:
            return (f"{where}: the oi protocol ranks the rows by their scores: field "
                    f"'{pred.scores_field(self.lists['oi'])}' is required (one number per row)")
        return None

    def image_counts(self, compared):
        counts = super().image_counts(compared)
        # PySGG scores its Open Images list with the stored boxes and labels, in every task
        counts.update(oi_counts(compared.gt, compared.stored, self.rows(compared.stored, "oi"), compared.settings))
        return counts

    def empty_counts(self, gt, settings):
        counts = self.left_out(settings)
        counts.update(oi_counts(gt, None, (NO_ROWS, np.zeros(0)), settings))
        return counts

    def families(self, config_rules):
        return ["mR"]  # its own R@k ranks another list: of the recall families only the mR PySGG prints

    def gt_counts(self, image, settings):
        counts = super().gt_counts(image, settings)
        counts.update(oi_counts(image, None, (NO_ROWS, np.zeros(0)), settings))
        return counts

    def count_problems(self, fields, columns, reference, settings, where):
        problems = super().count_problems(fields, columns, reference, settings, where)
        listed = fields["oi_dets"]
        if not problems and listed.size:  # its listed rows: at most OI_TOP, ranked by score, picks of GT rows
            scores = ((listed[1].astype(np.uint64) << np.uint64(32)) | listed[2].astype(np.uint64)).view(np.float64)
            if listed.shape[1] > OI_TOP or (listed[3:] > fields["oi_gt"]).any() or not np.isfinite(scores).all() \
                    or (scores <= OI_MIN_SCORE).any() or (np.diff(scores) > 0).any():
                problems.append(f"{where} listed rows are out of range or not ranked by score")
        return problems

    def metrics(self, config_rules, store, training, groups, subsets, gt=None):
        metrics, per_predicate, rules = super().metrics(config_rules, store, training, groups, subsets)
        oi_values, oi_per_predicate = oi_metrics(store, config_rules.k)
        return {**oi_values, **metrics}, {**oi_per_predicate, **per_predicate}, rules

    def per_image_columns(self, store, config_rules, families):
        return {"gt_relations": store["oi_gt"], "R@": store["oi_hits"][:, :-1]}

    def table_note(self, section, results):
        predicates = len(results["gt_relations_per_predicate"]) + len(results["absent_predicates"])
        return (f"{self.name}: {self.tool.name}'s rules: R@k pooled over every GT row, AP per predicate over all "
                f"images, mAP over all {predicates} predicates; mR as sgb ({section['images_left_out']} images "
                f"without triplets left out of it)")


def oi_list(rows_N3, scores_N):
    """PySGG's Open Images list of a prediction's scored rows (oi_evaluation.py:203-228): by score,
    descending (ties keep the written order), the first OI_TOP of them, and of those the rows
    scoring above OI_MIN_SCORE -> (rows (N, 3), scores (N,))."""
    if not len(rows_N3):
        return NO_ROWS, np.zeros(0)
    order = np.argsort(-scores_N, kind="stable")[:OI_TOP]
    order = order[scores_N[order] > OI_MIN_SCORE]
    return rows_N3[order], scores_N[order]


def _union_boxes(a_N4, b_N4):
    """The smallest box holding both boxes of each row (xyxy)."""
    return np.concatenate([np.minimum(a_N4[:, :2], b_N4[:, :2]), np.maximum(a_N4[:, 2:], b_N4[:, 2:])], axis=1)


def oi_candidates(gt, pred, iou_PG, relations_R3, rows_N3, threshold):
    """Per row of the OI list, the GT row (index into relations_R3) that PySGG's ap_eval would
    take for the relationship AP and for the phrase AP, -1 for none (ap_eval_rel.py:158-201):
    among the GT rows of the row's predicate, the overlap is 0 where the subject's or object's
    category differs, else the lesser of the subject and object box IoUs (iou_PG, whatever the
    categories; phrase: the IoU of the union boxes); the first GT row of the largest overlap, when
    that is above the threshold (float32). Whether it was taken by a better-scored row is decided
    over all images (oi_ap)."""
    s, o, p = rows_N3.T
    gs, go, gp = relations_R3.T
    same = p[:, None] == gp[None]
    valid = same & (pred.categories[s][:, None] == gt.categories[gs][None]) \
        & (pred.categories[o][:, None] == gt.categories[go][None])
    relationship = np.minimum(iou_PG[s][:, gs], iou_PG[o][:, go])
    phrase = legacy_box_iou(OpenImages.tool, _union_boxes(gt.boxes[gs], gt.boxes[go]), np.zeros(len(gs), np.int64),
                            _union_boxes(pred.boxes[s], pred.boxes[o]), np.zeros(len(s), np.int64))
    picks = []
    for overlap in (relationship, phrase):
        overlap = np.where(same, np.where(valid, overlap, np.float32(0)), np.float32(-1))
        best = overlap.argmax(axis=1) if overlap.shape[1] else np.zeros(len(overlap), np.int64)
        top = overlap[np.arange(len(overlap)), best] if overlap.shape[1] else np.zeros(len(overlap), np.float32)
        picks.append(np.where(same.any(axis=1) & (top > np.float32(threshold)), best, -1))
    return picks


def oi_counts(gt, pred, listed, settings):
    """The oi protocol's own counts of one image (PySGG's eval_rel_results, every GT row of the
    file counted, duplicates included): oi_gt the GT rows; oi_hits the GT rows hit by the first k
    rows of the OI list (oi_list of ``listed``, the prediction's scored rows; a row hits a GT row as
    in sgb: predicate, categories and both box
    IoUs >= threshold) for each cut-off and OI_SCORE_K; oi_npos the GT rows per predicate; oi_dets
    (5, N) per listed row: predicate, the score's float64 bits (high and low 32), the GT row
    oi_candidates gives + 1 for the relationship and for the phrase AP (0: none)."""
    relations = gt.relations[gt.file_rows]
    rows, scores = oi_list(*listed)
    first_hit, picks = np.full(len(relations), -1), [np.full(len(rows), -1)] * 2
    if len(rows):  # one box IoU for the recall's hits (same categories) and the APs' picks
        iou_PG = legacy_box_iou(OpenImages.tool, gt.boxes, np.zeros(len(gt.categories), np.int64), pred.boxes,
                                np.zeros(len(pred.categories), np.int64))
        ok = (iou_PG >= np.float32(settings.iou_threshold)) & (pred.categories[:, None] == gt.categories[None])
        first_hit = triplet_hits(rows, ok, relations, len(rows), settings.n_predicates)[0]
        picks = oi_candidates(gt, pred, iou_PG, relations, rows, settings.iou_threshold)
    ks = k_values(settings.k + (OI_SCORE_K,), len(relations))
    bits = scores.view(np.uint64)
    return {"oi_gt": len(relations),
            "oi_hits": [np.count_nonzero((first_hit >= 0) & (first_hit < k)) for k in ks],
            "oi_npos": np.bincount(relations[:, 2], minlength=settings.n_predicates),
            "oi_dets": np.stack([rows[:, 2], (bits >> np.uint64(32)).astype(np.int64),
                                 (bits & np.uint64(0xFFFFFFFF)).astype(np.int64), picks[0] + 1, picks[1] + 1])}


def oi_ap(image_D, pick_D, n_gt):
    """PySGG's average precision of one predicate (ap_eval_rel.py:144-211, get_ap 101-119): the
    listed rows of every image, ranked by score (the caller's order), are true positives when
    their pick (image, GT row; -1 none) was not taken by an earlier row; precision over recall
    with the VOC envelope and sentinels, summed where recall changes."""
    tp = np.zeros(len(pick_D))
    picked = np.flatnonzero(pick_D >= 0)
    first = np.unique(np.stack([image_D[picked], pick_D[picked]]), axis=1, return_index=True)[1] if len(picked) \
        else np.zeros(0, np.int64)
    tp[picked[first]] = 1.0
    fp, tp = np.cumsum(1.0 - tp), np.cumsum(tp)
    recall = tp / (float(n_gt) + 1e-12)
    precision = tp / np.maximum(tp + fp, np.finfo(np.float64).eps)
    recall, precision = np.concatenate(([0.0], recall, [1.0])), np.concatenate(([0.0], precision, [0.0]))
    precision = np.maximum.accumulate(precision[::-1])[::-1]
    changes = np.flatnonzero(recall[1:] != recall[:-1])
    return np.sum((recall[changes + 1] - recall[changes]) * precision[changes + 1])


def oi_metrics(store, k_labels):
    """The oi protocol's metrics (PySGG's eval_rel_results, oi_evaluation.py:146-392) from the
    stacked counts -> (metrics, per_predicate): R@k over all GT rows, imgR@k its per-image mean,
    AP_rel / AP_phr per predicate (oi_ap, rows ranked by np.argsort of the negated scores in image
    order as PySGG concatenates them), mAP over every predicate of the vocabulary, wmAP weighted by
    GT rows, score = 0.4 mAP_rel + 0.2 R@50 + 0.4 mAP_phr and score_wtd the same with the wmAPs."""
    gt_I, hits_IK = store["oi_gt"], store["oi_hits"].astype(np.float64)
    recall = hits_IK.sum(axis=0) / (float(gt_I.sum()) + 1e-12)
    out = {f"R@{label}": float(recall[i]) for i, label in enumerate(k_labels)}
    out.update({f"imgR@{label}": float(np.mean(hits_IK[:, i] / (gt_I + 1e-12))) for i, label in enumerate(k_labels)})
    listed = [rows if rows is not None else np.zeros((5, 0), np.int64) for rows in store.ragged("oi_dets")]
    image = np.repeat(np.arange(len(listed)), [rows.shape[1] for rows in listed])
    predicate, high, low, rel, phr = np.concatenate(listed, axis=1) if listed else np.zeros((5, 0), np.int64)
    scores = ((high.astype(np.uint64) << np.uint64(32)) | low.astype(np.uint64)).view(np.float64)
    n_gt = store["oi_npos"].sum(axis=0)
    all_gt, per_predicate = int(n_gt.sum()), {"AP_rel": np.zeros(len(n_gt)), "AP_phr": np.zeros(len(n_gt))}
    for c in range(len(n_gt)):
        rows = np.flatnonzero(predicate == c)
        rows = rows[np.argsort(-scores[rows])]
        per_predicate["AP_rel"][c] = oi_ap(image[rows], rel[rows] - 1, n_gt[c])
        per_predicate["AP_phr"][c] = oi_ap(image[rows], phr[rows] - 1, n_gt[c])
    for kind in ("rel", "phr"):
        total, weighted = 0.0, 0.0
        for c, ap in enumerate(per_predicate[f"AP_{kind}"]):
            weighted += ap * float(n_gt[c]) / float(all_gt) if all_gt else np.nan
            total += ap
        out[f"mAP_{kind}"], out[f"wmAP_{kind}"] = total / len(n_gt) if len(n_gt) else np.nan, weighted
    r50 = float(recall[-1])
    out["score"] = 0.4 * out["mAP_rel"] + 0.2 * r50 + 0.4 * out["mAP_phr"]
    out["score_wtd"] = 0.4 * out["wmAP_rel"] + 0.2 * r50 + 0.4 * out["wmAP_phr"]
    return {key: float(value) for key, value in out.items()}, per_predicate

AG_LISTS = (  # STTran's three constraints: the list, and the families of its R, TEMPURA's mR, DSG-DETR's mR, video R
    ("with", "R", "mR", "fmR", "vR"), ("semi", "semiR", "mSemiR", "fmSemiR", "vSemiR"),
    ("no", "ngR", "mNgR", "fmNgR", "vNgR"))
AG_FIELDS = (
    CountField("ag_gt", ("C",), "GT relation rows (every row of the file)", "gt_relations", gt_only=True),
    CountField("ag_hits", (3, "K", "C"), "GT rows the first k rows of each constraint's list hit (with, semi, no)",
               limit="ag_gt"),
)


class ActionGenome(LegacyProtocol):
    """STTran's Action Genome evaluation (lib/evaluation_recall.py; every rule with file and line:
    tools/ag_check/README.md), box mode: per frame, three ranked lists as STTran builds them for
    its three constraints (``row_lists`` with, semi and no: ``sgeval convert ag`` writes them), a row
    hits every GT row (each row of the file, repeats included) whose subject category, object
    category and predicate it has, with the +1-pixel box IoU (float64) >= iou_threshold for subject
    and object (many-to-many); the stored instances in every task; a frame without rows scores 0.
    R@k (semiR@k, ngR@k): the mean over frames of each frame's recall; mR@k (mSemiR, mNgR):
    TEMPURA's, per predicate the hits over all frames / (the GT rows + 1e-10), summed over every
    predicate and divided by their number; fmR@k (fmSemiR, fmNgR): DSG-DETR's, per predicate the
    mean over the frames holding it of their recall (0 without such frames), over every predicate;
    vR@k (vSemiR, vNgR): the mean over videos of their frames' mean recall."""

    name = "ag"
    summary = "STTran's Action Genome evaluation: with / semi / no constraint lists, +1 box IoU, frame means"
    compare = False
    tool = LegacyTool("STTran (Action Genome)", 1, None, np.float64)
    fields = AG_FIELDS
    lists = {"with": ("with", "triplets"), "semi": ("semi",), "no": ("no", "ng_triplets")}
    fixed_rules = {"absent_predicates": "zero", "aggregation": "per_image"}
    table_families = ("semiR", "mSemiR", "fmR", "fmSemiR", "fmNgR", "vR", "vSemiR", "vNgR")
    report_metrics = ("R", "semiR", "ngR", "mR")  # what Action Genome papers report: the three constraints' R@k, mR@k
    gt_pairs_given = True  # STTran's sgcls / predcls relate the person to each GT object of the frame

    def config_problems(self, config, source):
        if config.gt_seg:
            return [f"{source}: the ag protocol scores boxes (Action Genome has no masks): leave out gt_seg"]
        return []

    def record_problem(self, pred, image, settings, where):
        if len(pred.triplets) and "semi" not in pred.row_lists:
            return (f"{where}: the ag protocol reads STTran's three lists: field 'row_lists.semi' is required "
                    f"(sgeval convert ag writes row_lists with, semi and no)")
        return None

    def image_counts(self, compared):
        gt, pred, settings = compared.gt, compared.stored, compared.settings  # STTran scores the stored boxes
        relations = gt.relations[gt.file_rows]
        ks = k_values(settings.k, len(relations))
        iou = legacy_box_iou(self.tool, gt.boxes, gt.categories, pred.boxes, pred.categories)
        ok = iou >= settings.iou_threshold
        hits = np.zeros((len(AG_LISTS), len(ks), settings.n_predicates), np.int64)
        for index, (name, *_) in enumerate(AG_LISTS):
            rows = self.rows(pred, name)[0]
            first = triplet_hits(rows, ok, relations, min(max(ks), len(rows)), settings.n_predicates)[0]
            hits[index] = [np.bincount(relations[(first >= 0) & (first < k), 2], minlength=settings.n_predicates)
                           for k in ks]
        return {"ag_gt": np.bincount(relations[:, 2], minlength=settings.n_predicates), "ag_hits": hits}

    def empty_counts(self, gt, settings):
        relations = gt.relations[gt.file_rows]
        return {"ag_gt": np.bincount(relations[:, 2], minlength=settings.n_predicates),
                "ag_hits": np.zeros((len(AG_LISTS), len(settings.k), settings.n_predicates), np.int64)}

    def metrics(self, config_rules, store, training, groups, subsets, gt=None):
        gt_IC, hits_ILKC = store["ag_gt"], store["ag_hits"]
        gt_I = gt_IC.sum(axis=1)
        videos = [image.video or image.image_id for image in gt.images] if gt else list(range(len(gt_I)))
        video_of = np.unique(videos, return_inverse=True)[1].reshape(-1) if len(gt_I) else np.zeros(0, np.int64)
        metrics, per_predicate = {}, {}
        for index, (_, recall, tempura, frames, video) in enumerate(AG_LISTS):
            for ki, label in enumerate(config_rules.k):
                hits_IC = hits_ILKC[:, index, ki]
                frame_recall = hits_IC.sum(axis=1) / np.maximum(gt_I, 1)
                metrics[f"{recall}@{label}"] = float(frame_recall.mean()) if len(gt_I) else np.nan
                per_video = np.bincount(video_of, frame_recall) / np.maximum(np.bincount(video_of), 1)
                metrics[f"{video}@{label}"] = float(per_video.mean()) if len(gt_I) else np.nan
                pooled = [float(h) / (float(c) + 1e-10) for h, c in zip(hits_IC.sum(axis=0), gt_IC.sum(axis=0))]
                per_predicate[f"{tempura}@{label}"] = np.array(pooled)
                metrics[f"{tempura}@{label}"] = sum(pooled) / len(pooled)
                per_predicate[f"{frames}@{label}"] = means = _per_predicate(hits_IC, gt_IC, False)
                metrics[f"{frames}@{label}"] = float(np.nan_to_num(means).sum() / len(means))
        return metrics, per_predicate, self.rules(config_rules)

    def per_image_columns(self, store, config_rules, families):
        hits = store["ag_hits"].sum(axis=-1)
        return {"gt_relations": store["ag_gt"].sum(axis=-1), "R@": hits[:, 0], "semiR@": hits[:, 1],
                "ngR@": hits[:, 2]}

    def images_left_out(self, store):
        return 0

    def gt_counts(self, image, settings):
        return {**self.empty_counts(image, settings), "n_rows": len(image.file_rows)}

    def count_problems(self, fields, columns, reference, settings, where):
        return field_problems(fields, columns, reference, self.fields, settings, where)

    def table_note(self, section, results):
        return (f"{self.name}: {self.tool.name}'s rules: rows as ranked, +1 IoU, many-to-many; R / semiR / ngR: with / "
                f"semi / no constraint, frame means; mR: TEMPURA's (pooled), fmR: DSG-DETR's (frame means), over every "
                f"predicate; vR: video means")


PROTOCOLS = {unit.name: unit for unit in (Unique(), SingleMPO(), MultiMPO(), OpenPSG(), SGB(), OpenImages(),
                                          ActionGenome())}
RECALL_PROTOCOLS = tuple(name for name, unit in PROTOCOLS.items() if unit.compare)  # --compare-protocols
COUNT_FIELDS = {field.name: field for unit in PROTOCOLS.values() for field in unit.fields}  # every count field
PER_PREDICATE_FIELDS = frozenset(name for name, field in COUNT_FIELDS.items() if field.per_predicate)


# ---------------------------------------------------------------------------------------------
# 9b. Panoptic quality: a measure beside the protocols, and the merge rules it may need
# ---------------------------------------------------------------------------------------------


class MergeRule:
    """How a prediction's masks become a panoptic segmentation (segments that do not overlap)
    for panoptic quality: one unit each in MERGE_RULES (config ``pq_merge``)."""

    name = ""
    summary = ""

    def segments(self, pred, bits, boxes, width, where):
        """(segments (N, W), their mask_boxes (N, 5), categories (N,)) of a prediction's packed
        masks (P, W) and mask_boxes; SGEvalError when the rule cannot apply."""
        raise NotImplementedError


class NoMerge(MergeRule):
    name = "none"
    summary = "the masks are the segments; masks that overlap are an error"

    def segments(self, pred, bits, boxes, width, where):
        if masks_overlap(bits, boxes, width):
            raise SGEvalError([overlap_problem(where)])
        return bits, boxes, pred.categories


class ScoreOrder(MergeRule):
    name = "score-order"
    summary = ("fair-psgg's hilo merge: by score, descending (tied scores: the later mask first); a mask becomes a "
               "segment of the pixels no earlier segment claimed (none: dropped) and absorbs every later mask of "
               "mask IoU >= 0.5 with it, any category")

    def segments(self, pred, bits, boxes, width, where):
        if pred.scores is None:
            raise SGEvalError([f"{where}: pq_merge {self.name} walks the masks by score: field 'score' is required "
                               f"for every instance"])
        order = np.argsort(pred.scores, kind="stable")[::-1].astype(np.int64)  # ties: the later first
        return claimed_segments(pred, bits, boxes, width, order, np.full((len(bits), len(bits)), -1, np.int8))


class FirstWins(MergeRule):
    name = "first-wins"
    summary = "fair-psgg's psgtr merge (an argmax over the masks): each pixel to the first mask holding it"

    def segments(self, pred, bits, boxes, width, where):  # the merge walk in order, absorbing nothing
        return claimed_segments(pred, bits, boxes, width, np.arange(len(bits)), np.zeros((len(bits), len(bits)),
                                                                                          np.int8))


def claimed_segments(pred, bits, boxes, width, order, twins):
    """The segments of a merge walk (merge_walk in order, twins as it takes them): the pixels
    each node claimed, boxes (its mask's box, which holds them, with their exact pixel count) and
    the categories of the masks that made them."""
    node_bits = np.empty_like(bits)
    _, source, area = merge_walk(twins, bits, boxes, width, order, True, node_bits)
    return node_bits[:len(source)], _node_boxes(boxes, source, area), pred.categories[source]


MERGE_RULES = {rule.name: rule for rule in (NoMerge(), ScoreOrder(), FirstWins())}


def masks_overlap(bits_PW, boxes_P5, width):
    """Whether any two of the packed masks share a pixel."""
    union = np.bitwise_or.reduce(bits_PW, axis=0) if len(bits_PW) else np.zeros((0,), np.uint64)
    return len(bits_PW) > 1 and int(boxes_P5[:, 0].sum()) > int(mask_boxes(union[None], width)[0, 0])


def overlap_problem(where):
    others = ", ".join(name for name in MERGE_RULES if name != "none")
    return (f"{where}: the masks overlap; panoptic quality needs segments that do not: name a merge rule "
            f"(pq_merge: {others})")


@_kernel
def mask_intersections(gt_bits_GW, gt_cat_G, gt_box_G5, pred_bits_PW, pred_cat_P, pred_box_P5, width):
    """Pixels (P, G) each packed prediction shares with each GT mask of its category (a GT category
    below 0: of any category); -1 where the categories differ."""
    shared = np.empty((pred_bits_PW.shape[0], gt_bits_GW.shape[0]), np.int64)
    for p in range(pred_bits_PW.shape[0]):
        for g in range(gt_bits_GW.shape[0]):
            shared[p, g] = -1
            if gt_cat_G[g] < 0 or pred_cat_P[p] == gt_cat_G[g]:
                shared[p, g] = max(_intersection(gt_bits_GW[g], pred_bits_PW[p], gt_box_G5[g], pred_box_P5[p], width,
                                                 0.0), 0)
    return shared


PQ_FIELDS = (
    CountField("pq_tp", (3, "n"), "per matched pair (a true positive): its category, shared pixels, union pixels "
               "(the GT area of segments_info, VOID left out)",
               bounds=lambda settings: (settings.n_objects, None, None)),
    CountField("pq_miss", (3, "n"), "per category with false positives or negatives: the category, FP, FN",
               bounds=lambda settings: (settings.n_objects, None, None)),
    CountField("pq_source", (), "which segmentation was scored: 0 none (no prediction), 1 the instance masks "
               "(pq_merge), 2 the prediction's own panoptic segmentation (PQ_SOURCES)"),
)
PQ_KEYS = ("PQ", "SQ", "RQ", "PQ_th", "SQ_th", "RQ_th", "PQ_st", "SQ_st", "RQ_st")  # OpenPSG's names
PQ_SOURCES = ("none", "masks", "panoptic")  # the values of pq_source
PQ_RULES = {  # pq_rule: whose reading of a panoptic segmentation
    "panopticapi": "panopticapi's pq_compute: pixels of no segment are VOID",
    "openpsg": "OpenPSG's evaluate(metric=['PQ']) through mmdet 2.20.0: the pixels of no segment join the segment "
               "void_id_segment names (pan_results' id 0, which mmdet's _pan2json gives to VOID too)",
}


class PanopticQuality:
    """Panoptic quality (PQ = SQ x RQ) of the predicted masks, as panopticapi's pq_compute counts it
    (tools/pq_check/README.md has every rule with its file and line): a predicted segment and a GT
    segment of the same category match when their IoU is above 0.5, the union the GT's area of
    segments_info plus the segment's pixels less their shared pixels less the segment's VOID pixels
    (PNG id 0); crowd GT segments never match and count nowhere; a GT segment without a match is a
    false negative; an unmatched segment is a false positive unless more than half of it lies on
    VOID and the last crowd segment of its category. Per category PQ = sum IoU / (TP + FP / 2 + FN
    / 2), SQ = sum IoU / TP, RQ = TP / (TP + FP / 2 + FN / 2); the means (All, Things, Stuff) run
    over the categories with a TP, FP or FN. Mask mode only; masks that overlap need a MergeRule."""

    name = "pq"
    results_key = "panoptic_quality"  # its section of the results dict

    @staticmethod
    def enabled(rules):
        """Whether a run's Rules ask for it (config key ``pq``)."""
        return rules.pq is True
    fields = PQ_FIELDS
    needs_all_masks = True

    def shapes(self, settings):
        return field_shapes(self.fields, settings)

    def config_problems(self, config, source):
        if not config.gt_seg:
            return [f"{source}: pq needs masks (gt_seg): panoptic quality matches segments that do not overlap by "
                    f"pixels, with VOID and crowd pixels; boxes overlap and cover other segments' pixels"]
        return []

    def record_problem(self, pred, image, settings, where):
        """Masks given as arrays (Evaluator.update) that overlap without a merge rule (and without a
        panoptic segmentation of their own, which would be scored instead)."""
        if image is None or pred.bits is None or settings.pq_merge != "none" or len(pred.bits) < 2 \
                or pred.panoptic is not None:
            return None
        return overlap_problem(where) if masks_overlap(pred.bits, mask_boxes(pred.bits, image.width), image.width) \
            else None

    def image_counts(self, compared):
        gt, masks = compared.gt, compared.masks
        bits, boxes, categories, source = self.segments(compared)
        keep = boxes[:, 0] > 0  # a segment without pixels is no segment
        if not keep.all():  # (a merge rule's segments all have pixels: no copy of them)
            bits, boxes, categories = bits[keep], boxes[keep], categories[keep]
        counts = pq_counts(gt, masks.gt_bits, masks.gt_boxes, masks.gt_void, bits, boxes, categories, compared.where)
        return {**counts, "pq_source": np.int64(PQ_SOURCES.index(source))}

    @staticmethod
    def segments(compared):
        """(segments (N, W), their mask_boxes, categories (N,), the PQ_SOURCES name) that an image's
        panoptic quality scores: the prediction's own panoptic segmentation when it has one (under
        pq_rule openpsg, the pixels of no segment joined to its void_id_segment), else its instance
        masks made segments by the pq_merge rule."""
        gt, masks, settings, panoptic = compared.gt, compared.masks, compared.settings, compared.stored.panoptic
        if panoptic is None:
            return *MERGE_RULES[settings.pq_merge].segments(compared.pred, masks.pred_bits, masks.pred_boxes,
                                                            gt.width, compared.where), "masks"
        bits = panoptic.bits if panoptic.bits is not None else \
            load_pred_panoptic(compared.source, compared.stored, gt.height, gt.width)
        segments = bits[:-1]
        if settings.pq_rule == "openpsg" and panoptic.void_index >= 0:
            segments = segments.copy()
            segments[panoptic.void_index] |= bits[-1]
        return segments, mask_boxes(segments, gt.width), panoptic.categories, "panoptic"

    def empty_counts(self, gt, settings):
        missed = np.bincount(gt.categories[~gt.crowd], minlength=settings.n_objects) if len(gt.categories) else \
            np.zeros(settings.n_objects, np.int64)
        present = np.flatnonzero(missed)
        return {"pq_tp": np.zeros((3, 0), np.int64),
                "pq_miss": np.stack([present, np.zeros(len(present), np.int64), missed[present]]),
                "pq_source": np.int64(0)}

    def gt_counts(self, image, settings):
        return {**self.empty_counts(image, settings), "n_rows": 0}

    def count_problems(self, fields, columns, reference, settings, where):
        """A matched pair shares at most its union, which is positive; misses are counts."""
        tp, miss = fields["pq_tp"], fields["pq_miss"]
        if tp.size and ((tp[1] > tp[2]).any() or (tp[2] < 1).any() or (2 * tp[1] <= tp[2]).any()) \
                or miss.size and (miss[1:] > MAX_COUNT).any() or fields["pq_source"] >= len(PQ_SOURCES):
            return [f"{where} its matched pairs or misses cannot be a segmentation's"]
        return []

    def results(self, store, gt, config_rules):
        """The results' panoptic_quality section and its metrics (PQ_KEYS)."""
        return pq_results(store, gt, config_rules)

    def table_lines(self, section):
        if section["All"] is None:
            return ["panoptic quality: no segment in the GT or the predictions"]
        parts = [f"{name.lower()} " + " ".join(
            f"{key} {_fmt(section[name][key])}" for key in ("PQ", "SQ", "RQ")) if section[name] else f"{name}: -"
            for name in ("All", "Things", "Stuff")]
        return [f"panoptic quality ({section['rule']}; {section['source']}; merge {section['merge']}): "
                + " | ".join(parts) + f"   ({section['All']['n']} categories)"]


MEASURES = {unit.name: unit for unit in (PanopticQuality(),)}  # units counted beside the protocols (Settings)


def config_measures(rules):
    """The names of the measures a run's Rules ask for (each unit's ``enabled``), in registry order."""
    return tuple(name for name, unit in MEASURES.items() if unit.enabled(rules))


MEASURE_SETTINGS = ("measures", "pq_merge", "n_objects", "n_things", "pq_rule")  # the Settings fields they add
COUNT_FIELDS.update({field.name: field for unit in MEASURES.values() for field in unit.fields})


PANOPTIC_KEYS = ("file", "segments", "void_id_segment")  # a prediction record's field 'panoptic'
MAX_PNG_ID = (1 << 24) - 1  # the largest id of an 8-bit RGB PNG (R + 256 G + 65536 B)


def record_panoptic(value, where, members, n_objects, mode, problems):
    """PredPanoptic of a file record's field 'panoptic' (its PNG read later, load_pred_panoptic);
    None when the record has none, in box mode (which reads no masks, as it reads no seg_filename),
    or after appending a problem."""
    if value is None or mode != "mask":
        return None
    segments = value.get("segments") if isinstance(value, dict) else None
    if not isinstance(segments, list) or not set(value) <= set(PANOPTIC_KEYS) or not _types(segments) <= {dict}:
        problems.append(f"{where}: field 'panoptic' must be an object with 'file', 'segments' (a list of {{id, "
                        f"category}}) and optional 'void_id_segment'")
        return None
    name = value.get("file")
    if not isinstance(name, str) or not name or unsafe_member(name):
        problems.append(f"{where}: field 'panoptic.file' must name a PNG of the prediction (a relative path "
                        f"without '..')")
        return None
    if members is not None and name not in members:
        problems.append(f"{where}: field 'panoptic.file' '{name}' is not in the ZIP")
        return None
    if len(segments) > MAX_INSTANCES:
        problems.append(f"{where}: field 'panoptic.segments': more than the limit of {MAX_INSTANCES} per image")
        return None
    ids, categories = (int_array([item.get(key) for item in segments]) for key in ("id", "category"))
    if ids is None or categories is None or len(ids) and (ids.min() < 1 or ids.max() > MAX_PNG_ID):
        problems.append(f"{where}: field 'panoptic.segments': every segment needs an integer 'id' from 1 to "
                        f"{MAX_PNG_ID} (0 is no segment) and an integer 'category'")
        return None
    void = value.get("void_id_segment")
    problem = panoptic_problem(ids, categories, void, n_objects)
    if problem:
        problems.append(f"{where}: field 'panoptic': {problem}")
        return None
    return PredPanoptic(categories, ids, _void_index(ids, void), None, name)


def load_pred_panoptic(source, pred, height, width):
    """The packed segments of a file record's panoptic PNG (id = R + 256 G + 65536 B), then its
    pixels of id 0, which belong to no segment: (N + 1, W). Every pixel's id is 0 or listed, and
    every listed id has a pixel, as panopticapi requires."""
    panoptic = pred.panoptic
    where = f"{source.path}: image {pred.image_id}: panoptic PNG {panoptic.file} (field 'panoptic.file')"
    try:
        data = source.read(panoptic.file, 4 * height * width + (1 << 20))
        with Image.open(io.BytesIO(data)) as header:  # format, mode and size, before decoding
            kind, mode, size = header.format, header.mode, header.size
        if kind != "PNG" or mode not in ("RGB", "RGBA") or size != (width, height):
            raise SGEvalError([f"{where}: must be an 8-bit RGB PNG of the GT image's {width}x{height} pixels, not "
                               f"a {kind} {mode} image of {size[0]}x{size[1]}"])
        rgb = imagecodecs.png_decode(data)
    except SGEvalError:
        raise
    except Exception as error:  # noqa: BLE001 -- zipfile, Pillow and the codec raise many types on corrupt data
        raise SGEvalError([f"{where}: cannot read PNG: {type(error).__name__}: {error}"]) from None
    if rgb.dtype != np.uint8 or rgb.ndim != 3 or rgb.shape[:2] != (height, width):
        raise SGEvalError([f"{where}: must be an 8-bit RGB PNG, not {rgb.dtype} {rgb.shape}"])
    ids, n = panoptic.segment_ids, len(panoptic.segment_ids)
    bits = np.zeros((n + 1, _words(height * width)), np.uint64)
    found = pack_segments(rgb, np.r_[ids, VOID_ID], bits.view(np.uint8))
    if found[:n].all() and int(found.sum()) == height * width:
        return bits
    values = np.unique(rgb[..., :3].astype(np.int64) @ np.array([1, 256, 65536]))
    stray, absent = np.setdiff1d(values, np.r_[ids, VOID_ID]), ids[found[:n] == 0]
    parts = [f"the PNG holds id {int(stray[0])}, which field 'panoptic.segments' does not list"] if stray.size else []
    parts += [f"field 'panoptic.segments' lists id {int(absent[0])}, which the PNG does not hold"] \
        if absent.size else []
    raise SGEvalError([f"{where}: " + "; ".join(parts)])


def pq_counts(gt, gt_bits, gt_boxes, gt_void, bits, boxes, categories, where):
    """panopticapi's counts of one image (PanopticQuality): pq_tp (3, M) and pq_miss (3, K)."""
    if gt.areas is None:
        raise SGEvalError([f"{where}: field 'segments_info' lacks 'area' (panoptic quality takes the GT's areas "
                           f"from it, as panopticapi does)"])
    shared = mask_intersections(gt_bits, gt.categories, gt_boxes, bits, categories, boxes, gt.width)
    on_void = mask_intersections(gt_void[0], np.array([-1]), gt_void[1], bits, categories, boxes, gt.width)[:, 0]
    area = boxes[:, 0]
    union = area[:, None] + gt.areas[None] - shared - on_void[:, None]
    candidate = (shared > 0) & ~gt.crowd[None]
    if (union[candidate] <= 0).any():
        raise SGEvalError([f"{where}: field 'segments_info': a segment's 'area' is smaller than the pixels a "
                           f"prediction shares with it"])
    matched = candidate & (2 * shared > union)  # IoU > 0.5, in integers
    p, g = np.nonzero(matched)
    C = max(int(categories.max(initial=-1)), int(gt.categories.max(initial=-1))) + 1
    fn = np.bincount(gt.categories[~gt.crowd & ~matched.any(axis=0)], minlength=C)
    crowd_of = np.full(C, -1)
    for index in np.flatnonzero(gt.crowd):  # the last crowd segment of a category
        crowd_of[gt.categories[index]] = index
    unmatched = np.flatnonzero(~matched.any(axis=1))
    crowd = crowd_of[categories[unmatched]]
    ignored = on_void[unmatched] + np.where(crowd >= 0, shared[unmatched, np.maximum(crowd, 0)], 0)
    fp = np.bincount(categories[unmatched[2 * ignored <= area[unmatched]]], minlength=C)
    missed = np.flatnonzero(fp + fn)
    return {"pq_tp": np.stack([gt.categories[g], shared[p, g], union[p, g]]).astype(np.int64).reshape(3, -1),
            "pq_miss": np.stack([missed, fp[missed], fn[missed]]).astype(np.int64).reshape(3, -1)}


def pq_results(store, gt, config_rules):
    """(the panoptic_quality section, its metrics by OpenPSG's names) from the stacked pq fields,
    under the run's Rules."""
    C, empty = len(gt.object_classes), np.zeros((3, 0), np.int64)
    tp_rows = np.concatenate([rows for rows in store.ragged("pq_tp") if rows is not None] or [empty], axis=1)
    miss_rows = np.concatenate([rows for rows in store.ragged("pq_miss") if rows is not None] or [empty], axis=1)
    iou = np.bincount(tp_rows[0], tp_rows[1] / np.maximum(tp_rows[2], 1), minlength=C)
    tp = np.bincount(tp_rows[0], minlength=C)
    fp, fn = (np.bincount(miss_rows[0], miss_rows[row], minlength=C).astype(np.int64) for row in (1, 2))
    counted = tp + fp + fn > 0
    denominator = np.maximum(tp + 0.5 * fp + 0.5 * fn, 0.5)
    values = {"PQ": iou / denominator, "SQ": np.where(tp > 0, iou / np.maximum(tp, 1), 0.0), "RQ": tp / denominator}
    section = {"rule": config_rules.pq_rule, "merge": config_rules.pq_merge, **pq_sources(store)}
    for name, chosen in (("All", counted), ("Things", counted & (np.arange(C) < gt.n_things)),
                         ("Stuff", counted & (np.arange(C) >= gt.n_things))):
        n = int(np.count_nonzero(chosen))
        section[name] = {key: float(values[key][chosen].sum() / n) for key in ("PQ", "SQ", "RQ")} | {"n": n} \
            if n else None
    section["per_category"] = {gt.object_classes[c]: {**{key: float(values[key][c]) for key in ("PQ", "SQ", "RQ")},
                                                      "TP": int(tp[c]), "FP": int(fp[c]), "FN": int(fn[c])}
                               for c in np.flatnonzero(counted)}
    metrics = {f"{key}{suffix}": None if section[name] is None else section[name][key]
               for name, suffix in (("All", ""), ("Things", "_th"), ("Stuff", "_st")) for key in ("PQ", "SQ", "RQ")}
    return section, metrics


# ---------------------------------------------------------------------------------------------
# 10. Per-image counts: integer counts only
# ---------------------------------------------------------------------------------------------


def pq_sources(store):
    """The results' words on which segmentation panoptic quality scored: ``source`` (panoptic, masks,
    mixed, or none) and ``images_by_source`` (the evaluated images of each PQ_SOURCES value)."""
    counts = np.bincount(np.asarray(store["pq_source"], np.int64), minlength=len(PQ_SOURCES))
    by_source = dict(zip(PQ_SOURCES, map(int, counts)))
    used = [name for name in PQ_SOURCES[1:] if by_source[name]]
    return {"source": used[0] if len(used) == 1 else "mixed" if used else "none", "images_by_source": by_source}


@functools.lru_cache(maxsize=64)
def _parsed_k(labels):
    """parse_k of each label of a tuple."""
    return [parse_k(label) for label in labels]


def k_values(k_labels, n_relations):
    """Absolute k per label for an image with n_relations GT triplets (x-labels are relative)."""
    values = []
    for k, relative in _parsed_k(tuple(k_labels)):
        values.append(max(1, math.floor(min(k * n_relations + 0.5, 2 ** 62))) if relative else min(k, 2 ** 62))
    return values


def _distinct_rows(keys_N):
    """(the indices of the first occurrence of every key in sequence order, the position of each
    entry's key among those first occurrences)."""
    first_index, inverse = np.unique(keys_N, return_index=True, return_inverse=True)[1:]
    order = np.argsort(first_index, kind="stable")
    rank = np.empty(len(order), np.int64)
    rank[order] = np.arange(len(order))
    return first_index[order], rank[inverse.reshape(-1)]


def _first_occurrences(keys_N):
    """Indices of the first occurrence of every key, in sequence order."""
    if len(keys_N) == 0:
        return np.zeros(0, np.int64)
    return np.sort(np.unique(keys_N, return_index=True)[1])


def _first_rows(rows_N3, n_pred, n_predicates, by_triplet, limit):
    """The indices, in order, of the first limit rows whose subject-object pair (by_triplet: whose
    triplet) no earlier row has, read from the shortest prefix of the rows that holds them."""
    size = min(len(rows_N3), 2 * limit + 16)
    while True:
        keys = rows_N3[:size, 0] * n_pred + rows_N3[:size, 1]
        first = _first_occurrences(keys * n_predicates + rows_N3[:size, 2] if by_triplet else keys)
        if len(first) >= limit or size == len(rows_N3):
            return first[:limit]
        size = min(len(rows_N3), 4 * size)


def _mapped_keys(triplets_N3, pred_to_gt_P, n_gt, n_predicates):
    """GT pair and triplet keys of predicted triplets; -1 where an end is unmatched."""
    subject, obj = pred_to_gt_P[triplets_N3[:, 0]], pred_to_gt_P[triplets_N3[:, 1]]
    valid = (subject >= 0) & (obj >= 0)
    pairs = np.where(valid, subject * n_gt + obj, -1)
    return pairs, np.where(valid, pairs * n_predicates + triplets_N3[:, 2], -1)


def _occurrence_ranks(keys_N):
    """For each entry, the number of earlier entries with the same key."""
    order = np.argsort(keys_N, kind="stable")
    ordered = keys_N[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]]) if len(ordered) else order
    group_start = np.repeat(starts, np.diff(np.r_[starts, len(ordered)]))
    ranks = np.empty(len(keys_N), np.int64)
    ranks[order] = np.arange(len(ordered)) - group_start
    return ranks


def image_counts(relations_R3, zeroshot_R, n_gt, pred_to_gt_P, triplets_N3, ng_triplets_M3, k_labels,
                 imr_labels, n_predicates, graph_constraint=True, confusion_k=None, subsets_RS=None):
    """All per-image integer counts (the fields of count_shapes()) for one image and protocol, and
    (confusion_k given) its "confusion" cells.

    pred_to_gt_P maps the predicted instances (or SingleMPO nodes) that triplets index to GT
    instances (-1 = unmatched); zeroshot_R flags the zero-shot GT triplets; subsets_RS (R, S) the
    rows of each configured subset (None: no subsets).
    """
    C, n_pred = n_predicates, len(pred_to_gt_P)
    ks = k_values(k_labels, len(relations_R3))
    k_confusion = k_values([confusion_k], len(relations_R3))[0] if confusion_k else 0
    gt_pairs = relations_R3[:, 0] * n_gt + relations_R3[:, 1]
    gt_keys = gt_pairs * C + relations_R3[:, 2]

    selected = triplets_N3[_first_rows(triplets_N3, n_pred, C, not graph_constraint, max(*ks, k_confusion))]
    sel_pairs, sel_keys = _mapped_keys(selected, pred_to_gt_P, n_gt, C)
    first_gc, first_pair = first_positions(sel_keys, gt_keys), first_positions(sel_pairs, gt_pairs)

    all_pairs, all_keys = _mapped_keys(ng_triplets_M3, pred_to_gt_P, n_gt, C)
    ng_selected = _first_rows(ng_triplets_M3, n_pred, C, True, len(ng_triplets_M3))
    first_ng = first_positions(all_keys[ng_selected], gt_keys)

    matched = np.zeros(n_gt, bool)
    matched[pred_to_gt_P[pred_to_gt_P >= 0]] = True
    kept = np.flatnonzero(np.isin(all_pairs, gt_pairs))  # PRank ranks the triplets of GT pairs only
    kept = kept[_first_occurrences(all_keys[kept])]
    position = first_positions(all_keys[kept], gt_keys)
    prank = np.full(len(relations_R3), -1)
    prank[position >= 0] = _occurrence_ranks(all_pairs[kept])[position[position >= 0]]
    counts = _count_fields(relations_R3, zeroshot_R, ks, imr_labels, C, matched, first_gc, first_pair, first_ng, prank,
                           ng_triplets_M3[ng_selected, 2], subsets_RS=subsets_RS)
    if confusion_k:
        counts["confusion"] = confusion_cells(relations_R3, first_gc, first_pair, selected[:, 2], k_confusion, C)
    return counts


def legacy_counts(relations_R3, zeroshot_R, ok_PG, triplets_N3, ng_triplets_M3, k_labels, imr_labels, n_predicates,
                  confusion_k=None, subsets_RS=None):
    """image_counts under OpenPSG's and Scene-Graph-Benchmark's rules: the rows of triplets and
    ng_triplets as written, matched many-to-many (triplet_hits), ngR from the first LEGACY_NG_LIST
    entries of ng_triplets; ok_PG: (P, G) bool, IoU >= threshold, same category."""
    ks = k_values(k_labels, len(relations_R3))
    k_confusion = k_values([confusion_k], len(relations_R3))[0] if confusion_k else 0
    first_gc, first_pair, _ = triplet_hits(triplets_N3, ok_PG, relations_R3, max(*ks, k_confusion), n_predicates)
    first_ng, _, before = triplet_hits(ng_triplets_M3, ok_PG, relations_R3, len(ng_triplets_M3), n_predicates)
    counts = _count_fields(relations_R3, zeroshot_R, ks, imr_labels, n_predicates, ok_PG.any(axis=0), first_gc,
                           first_pair, first_ng, np.where(first_ng >= 0, before, -1), ng_triplets_M3[:, 2],
                           [min(k, LEGACY_NG_LIST) for k in ks], subsets_RS)
    if confusion_k:
        counts["confusion"] = confusion_cells(relations_R3, first_gc, first_pair, triplets_N3[:, 2], k_confusion,
                                              n_predicates)
    return counts


def confusion_cells(relations_R3, first_gc_R, first_pair_R, row_predicates_N, k, n_predicates):
    """One image's predicate confusion at cut-off k, as (2, U) int64 rows [cell, count]: cell =
    GT predicate * (n_predicates + 1) + column, column = the GT triplet's own predicate when one
    of the first k rows hits it, else the predicate of the first of them on its pair (first_pair_R,
    a row index), else n_predicates (no prediction for the pair)."""
    column = np.full(len(relations_R3), n_predicates, np.int64)
    on_pair = (first_pair_R >= 0) & (first_pair_R < k)
    column[on_pair] = row_predicates_N[first_pair_R[on_pair]]
    hit = (first_gc_R >= 0) & (first_gc_R < k)
    column[hit] = relations_R3[hit, 2]
    cells, counts = np.unique(relations_R3[:, 2] * (n_predicates + 1) + column, return_counts=True)
    return np.stack([cells, counts]).astype(np.int64)


def _count_fields(relations_R3, zeroshot_R, ks, imr_labels, C, matched_G, first_gc_R, first_pair_R, first_ng_R,
                  prank_R, ng_predicates_M, ng_ks=None, subsets_RS=None):
    """The count fields from where each GT triplet is found: first_gc_R / first_ng_R its position
    in the GC / NG selection, first_pair_R that of its pair in the GC selection (-1 = not found),
    prank_R its PRank rank (-1 = undefined); matched_G the GT instances matched; ng_predicates_M
    the predicates of the NG list IMR walks (its position within its predicate is IMR's rank);
    ng_ks: the cut-offs of the NG selection (default ks); subsets_RS: (R, S) bool, the rows of
    each configured subset (None: none)."""
    predicate, imr_ks = relations_R3[:, 2], np.array([int(k) for k in imr_labels], np.int64)
    gt_pairs = relations_R3[:, 0] * len(matched_G) + relations_R3[:, 1]
    first_pair = first_pair_R[np.unique(gt_pairs, return_index=True)[1]]
    rank_in_predicate = np.full(len(relations_R3), np.iinfo(np.int64).max)
    found = first_ng_R >= 0
    rank_in_predicate[found] = _occurrence_ranks(ng_predicates_M)[first_ng_R[found]]
    listed = np.bincount(ng_predicates_M, minlength=C)
    both_ends = matched_G[relations_R3[:, 0]] & matched_G[relations_R3[:, 1]]
    appears = prank_R >= 0
    cutoffs = np.array(ks, np.int64)[:, None]
    gc = (first_gc_R >= 0) & (first_gc_R < cutoffs)  # (K, R): the GT triplets each cut-off finds
    ng = (first_ng_R >= 0) & (first_ng_R < (cutoffs if ng_ks is None else np.array(ng_ks, np.int64)[:, None]))
    return {
        "gt_rel": np.bincount(predicate, minlength=C),
        "gc_hits": _found_per_predicate(predicate, gc, C),
        "ng_hits": _found_per_predicate(predicate, ng, C),
        "gt_pairs": len(first_pair),
        "pair_hits": np.count_nonzero((first_pair >= 0) & (first_pair < cutoffs), axis=1),
        "inf_hits": np.bincount(predicate[both_ends], minlength=C),
        "gt_inst": len(matched_G),
        "inst_hits": np.count_nonzero(matched_G),
        "rank_sum": np.bincount(predicate[appears], prank_R[appears], minlength=C).astype(np.int64),
        "rank_n": np.bincount(predicate[appears], minlength=C),
        "z_gt": np.count_nonzero(zeroshot_R),
        "z_gc_hits": np.count_nonzero(gc & zeroshot_R, axis=1),
        "z_ng_hits": np.count_nonzero(ng & zeroshot_R, axis=1),
        "imr_hits": _found_per_predicate(predicate, rank_in_predicate < imr_ks[:, None], C),
        "imr_short": (listed[predicate] < imr_ks[:, None]).any(axis=1).astype(np.int64),
        "a_hits": np.zeros(len(ks), np.int64),  # set by evaluate_image for sgcls / predcls
        **subset_fields(predicate, subsets_RS, gc, ng, C),
    }


def _found_per_predicate(predicate_R, found_LR, C):
    """(L, C): per row of found_LR (bool masks of the GT triplets), the triplets found per predicate."""
    keys = np.arange(len(found_LR))[:, None] * C + predicate_R
    return np.bincount(keys[found_LR], minlength=len(found_LR) * C).reshape(len(found_LR), C)


def subset_fields(predicate_R, subsets_RS, gc_masks, ng_masks, C):
    """The subset count fields of an image: subset_gt (S, C), its GT rows per subset and predicate,
    and subset_gc_hits / subset_ng_hits (S, K, C), those the R@k / ngR@k selections find (gc_masks,
    ng_masks: K (R,) bool masks of the rows found). subsets_RS: (R, S) bool, or None (S = 0)."""
    S, K = 0 if subsets_RS is None else subsets_RS.shape[1], len(gc_masks)
    if S == 0:
        return {"subset_gt": np.zeros((0, C), np.int64), "subset_gc_hits": np.zeros((0, K, C), np.int64),
                "subset_ng_hits": np.zeros((0, K, C), np.int64)}
    inside_SR = subsets_RS.T
    gt = np.bincount((np.arange(S)[:, None] * C + predicate_R)[inside_SR], minlength=S * C).reshape(S, C)
    found_LR = np.stack([*gc_masks, *ng_masks]).reshape(2 * K, len(predicate_R))  # L = 2K: GC, then NG
    keys_SLR = np.arange(S * 2 * K).reshape(S, 2 * K, 1) * C + predicate_R
    hits = np.bincount(keys_SLR[inside_SR[:, None, :] & found_LR], minlength=S * 2 * K * C).reshape(S, 2 * K, C)
    return {"subset_gt": gt, "subset_gc_hits": hits[:, :K], "subset_ng_hits": hits[:, K:]}


def count_shapes(n_k, n_imr, n_predicates, n_subsets=0, protocol=DEFAULT_PROTOCOL):
    """Shape of every fixed-size count field of a protocol (the image axis excluded)."""
    settings = Settings("box", (protocol,), 0.5, ("1",) * n_k, ("1",) * n_imr, n_predicates, False,
                        subsets=(None,) * n_subsets)
    return settings_shapes(settings, protocol)


def settings_shapes(settings, protocol=DEFAULT_PROTOCOL):
    """The shapes of a protocol's fixed-size count fields under a run's Settings."""
    return PROTOCOLS[protocol].shapes(settings)


# ---------------------------------------------------------------------------------------------
# 11. Aggregation: a pure function of the stacked counts
# ---------------------------------------------------------------------------------------------

class CountStore(collections.abc.Mapping):
    """The per-image counts of one protocol, read as {field: (I, ...) int64 array} by aggregate().
    ``images[i]`` is (columns, {field: array}) of image i as unpack_record gives them (None: all
    zero): an image's per-predicate counts are zero for the predicates absent from its GT, so only
    the columns of the others are kept (a few of some 50), and the arrays are made whole when read.
    shapes: the fixed-size fields' shapes; a ragged field is read per image (``ragged``)."""

    def __init__(self, n_images, shapes):
        self.shapes, self.images, self.cached = shapes, [None] * n_images, (None, None)

    def __getitem__(self, field):
        if self.cached[0] != field:
            array = np.zeros((len(self.images),) + self.shapes[field], np.int64)
            for slot, (columns, fields) in ((slot, image) for slot, image in enumerate(self.images) if image):
                if field in PER_PREDICATE_FIELDS:
                    array[slot][..., columns] = fields[field]
                else:
                    array[slot] = fields[field]
            self.cached = field, array
        return self.cached[1]

    def ragged(self, field):
        """A ragged field of every image: its (rows, n) array, None where an image has none."""
        return [image[1].get(field) if image else None for image in self.images]

    def __iter__(self):
        return iter(self.shapes)

    def __len__(self):
        return len(self.shapes)


def _r_type(hits_I, total_I, pooled):
    """Mean over images with total > 0 of hits / total, or (pooled) sum hits / sum total."""
    defined = total_I > 0
    if not defined.any():
        return np.nan
    if pooled:
        return hits_I[defined].sum() / total_I[defined].sum()
    return float((hits_I[defined] / total_I[defined]).mean())


def _per_predicate(hits_IC, total_IC, pooled):
    """Per predicate: mean over images with total > 0 of hits / total (pooled: sum / sum); NaN
    where no image has the predicate."""
    defined = total_IC > 0
    if pooled:
        total = total_IC.sum(axis=0)
        return np.where(total > 0, hits_IC.sum(axis=0) / np.maximum(total, 1), np.nan)
    n_images = defined.sum(axis=0)
    ratios = np.where(defined, hits_IC / np.maximum(total_IC, 1), 0.0).sum(axis=0)
    return np.where(n_images > 0, ratios / np.maximum(n_images, 1), np.nan)


def aggregate(counts, k_labels, imr_labels=(), metrics=METRIC_FAMILIES, absent_predicates="skip",
              aggregation="per_image", predicate_pairs=None, tau=0.5):
    """Metric values (float, NaN when undefined) and per-predicate arrays from stacked counts.

    counts: {field: array with a leading image axis I} (see count_shapes). predicate_pairs: (C,)
    training (subject, object) category pairs per predicate, the wIMR weights' n_p.
    Returns (metrics {key: float}, per_predicate {key: (C,) float array}).
    """
    pooled = aggregation == "pooled"
    gt_rel = counts["gt_rel"]
    present = (gt_rel > 0).any(axis=0)
    n_relations = gt_rel.sum(axis=1)
    out, per_predicate = {}, {}

    def m_type(key, hits_IC):
        per_predicate[key] = values = _per_predicate(hits_IC, gt_rel, pooled)
        if not present.any():
            out[key] = np.nan
        else:
            out[key] = values[present].sum() / (len(values) if absent_predicates == "zero" else present.sum())

    wanted = set(metrics) | ({"R", "mR"} if "F1" in metrics else set())
    for family, field in (("R", "gc_hits"), ("mR", "gc_hits"), ("ngR", "ng_hits"), ("mNgR", "ng_hits")):
        for index, label in enumerate(k_labels if family in wanted else ()):
            if family.startswith("m"):
                m_type(f"{family}@{label}", counts[field][:, index])
            else:
                out[f"{family}@{label}"] = _r_type(counts[field][:, index].sum(axis=1), n_relations, pooled)
    for label in k_labels if "F1" in metrics else ():  # harmonic mean of R@k and mR@k
        recall, mean_recall = out[f"R@{label}"], out[f"mR@{label}"]
        out[f"F1@{label}"] = 2 * recall * mean_recall / (recall + mean_recall) if recall + mean_recall > 0 else \
            recall + mean_recall  # 0, or NaN
    for family in {"R", "mR"} - set(metrics):  # computed for F1 only
        for label in k_labels if "F1" in metrics else ():
            out.pop(f"{family}@{label}")
            per_predicate.pop(f"{family}@{label}", None)
    for index, label in enumerate(k_labels if "A" in metrics else ()):  # Top@k accuracy, pooled (sgcls / predcls)
        out[f"A@{label}"] = _r_type(counts["a_hits"][:, index], n_relations, True)
    for index, label in enumerate(k_labels if "PR" in metrics else ()):
        out[f"PR@{label}"] = _r_type(counts["pair_hits"][:, index], counts["gt_pairs"], pooled)
    if "InstR" in metrics:
        out["InstR"] = _r_type(counts["inst_hits"], counts["gt_inst"], pooled)
    if "Rinf" in metrics:
        out["R@inf"] = _r_type(counts["inf_hits"].sum(axis=1), n_relations, pooled)
        m_type("mR@inf", counts["inf_hits"])
    if "PRank" in metrics:
        per_predicate["PRank"] = ranks = _per_predicate(counts["rank_sum"], counts["rank_n"], pooled)
        out["PRank"] = float(np.nanmean(ranks)) if not np.isnan(ranks).all() else np.nan
    for family, field in (("zR", "z_gc_hits"), ("ngzR", "z_ng_hits")):
        for index, label in enumerate(k_labels if family in metrics else ()):
            out[f"{family}@{label}"] = _r_type(counts[field][:, index], counts["z_gt"], pooled)
    for index, label in enumerate(imr_labels if {"IMR", "wIMR"} & set(metrics) else ()):
        m_type(f"IMR@{label}", counts["imr_hits"][:, index])
    _weighted_imr(out, per_predicate, imr_labels, metrics, present, predicate_pairs, tau)
    return {key: float(value) for key, value in out.items()}, per_predicate


def _weighted_imr(out, per_predicate, imr_labels, metrics, present, predicate_pairs, tau):
    """aggregate's wIMR@k: sum_p w_p IMR(p), w_p = n_p^tau over the predicates present (n_p:
    predicate_pairs); the IMR@k keys are dropped when only wIMR was asked for."""
    pairs = np.zeros(len(present)) if predicate_pairs is None else np.asarray(predicate_pairs, np.float64)
    weights = np.where(present, pairs ** tau, 0.0)
    for label in imr_labels if "wIMR" in metrics else ():
        imr = np.nan_to_num(per_predicate[f"IMR@{label}"])
        out[f"wIMR@{label}"] = float((weights / weights.sum() * imr).sum()) if weights.sum() > 0 else np.nan
    for label in imr_labels if "IMR" not in metrics and "wIMR" in metrics else ():  # wIMR only
        del out[f"IMR@{label}"], per_predicate[f"IMR@{label}"]


# ---------------------------------------------------------------------------------------------
# 12. Results: evaluate (the file path), the results dict, the table
# ---------------------------------------------------------------------------------------------


def evaluate(config, progress=None):
    """Evaluate a prediction file; returns the results dict: an Evaluator
    updated with the file's records (Evaluator.update_file), then computed.

    config: a Config (see load_config / make_config) or a mapping of its fields; ``pred`` names
    the file. progress: optional callable progress(images_done, images_total), called after each
    image. Raises SGEvalError listing every problem found in the input.
    """
    config = config if isinstance(config, Config) else make_config(dict(config), need_pred=True)
    if not config.pred:
        raise SGEvalError(["config: 'pred' is required (the prediction file to evaluate)"])
    for key in ("output", "per_image"):
        if getattr(config, key):
            write_output(getattr(config, key), None, key)  # fails now rather than after the evaluation
    evaluator = Evaluator(config)
    evaluator.update_file(config.pred, config.workers, progress)
    results, gt, counted = evaluator._compute("empty")
    if config.output:
        write_output(config.output, [json.dumps(results, indent=1) + "\n"])
        log.info("wrote %s", config.output)
    if config.per_image:
        write_output(config.per_image, per_image_lines(config.rules, gt, counted), "per_image")
        log.info("wrote %s", config.per_image)
    return results


def write_output(path, chunks, key="output"):
    """Write the text chunks to path (chunks None: check that it can be written, leaving no file)."""
    try:
        existed = os.path.exists(path)
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a" if chunks is None else "w", encoding="utf-8") as handle:
            handle.writelines(chunks or ())
        if chunks is None and not existed:
            os.remove(path)
    except (OSError, ValueError) as error:  # ValueError: a NUL in the path
        reason = getattr(error, "strerror", None) or error
        raise SGEvalError([f"{path}: cannot write the results ({key}): {reason}"]) from None


def per_image_lines(rules, gt, counted):
    """The per_image file of a run under its Rules: one JSON line per evaluated image (GT order) with its id, its GT
    relation count, whether it has a prediction record and, per protocol, the hits behind each
    recall the run reports (per k) and their denominators (0 where the protocol leaves the image
    out): Protocol.per_image_columns."""
    wanted = set(rules.metrics) - ({"A"} if rules.task == "sgdet" else set())
    families = wanted | ({"R"} if {"mR", "F1"} & wanted else set()) | ({"ngR"} if "mNgR" in wanted else set())
    columns = {protocol: PROTOCOLS[protocol].per_image_columns(store, rules, families)
               for protocol, store in counted.stores.items()}  # {protocol: {key: (I,) or (I, K) int64}}
    for slot, image in enumerate(gt.images):
        hits = {protocol: {} for protocol in counted.stores}
        for protocol, keys in columns.items():
            for key, values in keys.items():
                row = values[slot]
                hits[protocol].update({f"{key}{k}": int(n) for k, n in zip(rules.k, row)} if row.ndim else
                                      {key: int(row)})
        line = {"image_id": image.image_id, "gt_relations": len(image.relations),
                "predicted": bool(counted.predicted[slot]), "hits": hits}
        if rules.audit:
            line["audit"] = dict(zip(AUDIT_FIELDS, map(int, counted.audits[slot])))
        yield json.dumps(line) + "\n"


def _subset_columns(store, k_labels, names, families):
    """per_image columns {key: (I,) int64} of the subsets: gt_relations/<name> and the hits
    behind R@k/<name> (families R, or mR) and ngR@k/<name>."""
    if not names:
        return {}
    columns = {f"gt_relations/{name}": gt_I for name, gt_I in zip(names, store["subset_gt"].sum(axis=-1).T)}
    for family, field in (("R", "subset_gc_hits"), ("ngR", "subset_ng_hits")):
        hits_ISK = store[field].sum(axis=-1) if family in families else None
        columns.update({f"{family}@{k}/{name}": hits_ISK[:, s, index] for s, name in enumerate(names)
                        for index, k in enumerate(k_labels) if hits_ISK is not None})
    return columns


def mark_zeroshot(images, training_types, given=None):
    """Set each GTImage's zeroshot flags: a triplet's (subject category, object category,
    predicate) type is in ``given`` (when given), or else absent from the training types."""
    for image in images:
        types = zip(image.categories[image.relations[:, 0]].tolist(),
                    image.categories[image.relations[:, 1]].tolist(), image.relations[:, 2].tolist())
        image.zeroshot = np.array([t in given if given is not None else t not in training_types for t in types], bool)


class Subset(typing.NamedTuple):
    """A SubsetSpec resolved against the GT's vocabulary: what decides an image's subset counts
    (a part of Settings, and so of the state's fingerprint)."""

    name: str
    kind: str  # predicates | objects | triplets
    role: str | None  # objects: subject | object | both | either
    members: tuple  # predicate indices | object category indices | (subject cat, object cat, predicate) triples
    predicates: tuple  # mR@k/<name>'s predicates under absent_predicates zero: the members (predicates), the
    # triplets' predicates (triplets), every predicate (objects)


def resolve_subsets(specs, object_classes, predicate_classes, gt_path):
    """The Subsets of SubsetSpecs, their names looked up in the GT's vocabulary; a subset with names
    the GT lacks is one problem line naming them (a preset's: how many the GT lacks)."""
    vocabulary = {"object class": {name: i for i, name in enumerate(object_classes)},
                  "predicate": {name: i for i, name in enumerate(predicate_classes)}}
    problems, subsets = ProblemList(), []
    for spec in specs:
        kinds = {"predicates": ("predicate",), "objects": ("object class",),
                 "triplets": ("object class", "predicate", "object class")}[spec.kind]
        rows = spec.members if spec.kind == "triplets" else [(member,) for member in spec.members]
        unknown = list(dict.fromkeys(name for row in rows for name, kind in zip(row, kinds)
                                     if name not in vocabulary[kind]))
        if unknown:
            problems.append(_unknown_subset_names(spec, unknown, kinds, gt_path))
            continue
        index = [tuple(vocabulary[kind][name] for name, kind in zip(row, kinds)) for row in rows]
        members = tuple((s, o, p) for s, p, o in index) if spec.kind == "triplets" else tuple(i for i, in index)
        predicates = members if spec.kind == "predicates" else range(len(predicate_classes)) \
            if spec.kind == "objects" else {p for _, _, p in members}
        subsets.append(Subset(spec.name, spec.kind, spec.role, members, tuple(sorted(predicates))))
    if problems:
        raise SGEvalError(problems)
    return tuple(subsets)


def _unknown_subset_names(spec, unknown, kinds, gt_path):
    """The problem line of a subset whose names the GT lacks."""
    where, quoted = f"config: subset '{spec.name}'", ", ".join(f"'{name}'" for name in unknown)
    if spec.preset is not None:
        total = len(set(itertools.chain.from_iterable(spec.members)) if spec.kind == "triplets" else spec.members)
        return (f"{where}: the GT ({gt_path}) lacks {len(unknown)} of the {total} {kinds[0]} names of the preset "
                f"{spec.preset} ({quoted}): the preset is for VG150 GT with Scene-Graph-Benchmark's names, as "
                f"sgeval convert vg150 writes it")[:1000]
    return f"{where}: the GT ({gt_path}) has no {' or '.join(dict.fromkeys(kinds))} named {quoted}"


def subset_rows(categories_G, relations_R3, subsets):
    """(R, S) bool: whether each GT relation row [s, o, p] is in each Subset."""
    subject, obj, predicate = categories_G[relations_R3[:, 0]], categories_G[relations_R3[:, 1]], relations_R3[:, 2]
    inside = np.zeros((len(relations_R3), len(subsets)), bool)
    for column, subset in enumerate(subsets):
        if subset.kind == "predicates":
            inside[:, column] = np.isin(predicate, subset.members)
        elif subset.kind == "objects":
            ends = np.isin(subject, subset.members), np.isin(obj, subset.members)
            inside[:, column] = {"subject": ends[0], "object": ends[1], "both": ends[0] & ends[1],
                                 "either": ends[0] | ends[1]}[subset.role]
        else:
            types = set(subset.members)
            inside[:, column] = [t in types for t in zip(subject.tolist(), obj.tolist(), predicate.tolist())]
    return inside


def mark_subsets(images, subsets):
    """Set each GTImage's subsets rows (subset_rows)."""
    for image in images:
        image.subsets = subset_rows(image.categories, image.relations, subsets)


def evaluator_subsets(config, gt, groups=()):
    """The config's subsets resolved against gt (resolve_subsets), its images' subset rows marked.
    A subset may not share its name with a predicate group (mR@k/<name> names either)."""
    problems = [f"config: subset '{spec.name}': a predicate group has this name too (mR@k/{spec.name} would name "
                f"both)" for spec in config.subsets if spec.name in groups]
    if problems:
        raise SGEvalError(problems)
    subsets = resolve_subsets(config.subsets, gt.object_classes, gt.predicate_classes, config.gt)
    mark_subsets(gt.images, subsets)
    return subsets


class Counted(typing.NamedTuple):
    """The counts of every evaluated image (slot i = gt.images[i])."""

    stores: dict  # {protocol: CountStore}, the headline protocol first
    audits: np.ndarray  # (I, len(AUDIT_FIELDS)) int64
    checks: np.ndarray  # (I, len(CHECK_FIELDS)) int64
    predicted: np.ndarray  # (I,) bool: the image has a prediction record
    extra_predictions: int  # records of images that are not evaluated
    confusion: dict  # {protocol: (C, C + 1) int64}: GT predicate x predicted predicate (column C: none)
    measures: dict = {}  # {measure: CountStore} (Settings.measures)


def map_in_order(function, items, workers, batch=16, after_batch=None):
    """function (a module-level function) over items as they come; yields the results in item
    order. With workers > 1 a pool of processes (forked where the platform can) maps batches of
    items, at most two batches per worker ahead of the caller (bounded memory), and calls
    after_batch (a module-level function, or None) in the worker after each batch."""
    if workers <= 1:
        yield from map(function, items)
        return
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    with context.Pool(workers) as pool:
        pending, items = collections.deque(), iter(items)
        while True:
            chunk = list(itertools.islice(items, batch))
            if chunk:
                pending.append(pool.apply_async(_map_batch, (function, chunk, after_batch)))
            while pending and (not chunk or len(pending) > 2 * workers or pending[0].ready()):
                yield from pending.popleft().get()
            if not chunk:
                return


def _map_batch(function, items, after_batch=None):
    results = [function(item) for item in items]
    if after_batch is not None:
        after_batch()
    return results


def _evaluate_record(item):
    """(slot, ImageTask, RecordText or None, number of object categories) -> (slot,
    prediction_digest or None, the record's problems, the image's problems, pack_record or None):
    the unit of work of Evaluator.update_file. A RecordText is decoded and checked here as
    prediction_records checks a record (its id it checked), then for its protocol problems; it is
    evaluated when it has none."""
    slot, task, record, n_objects = item
    found = []
    if record is not None:
        settings, path = task.settings, task.source.path
        members = task.source.member_set() if settings.mode == "mask" else None
        try:
            value = decoded_record(record.text)
        except READ_ERRORS + (RecursionError,) as error:  # what msgspec accepted and the json module refuses
            return slot, None, [f"{path}: image {record.image_id}: cannot read its record in triplets.json: "
                                f"{type(error).__name__}: {error}"], [], None
        pred = _record(value, record.index, path, members, n_objects, settings.n_predicates, settings.mode, set(),
                       found)
        found += [] if pred is None else protocol_problems(pred, task.gt, settings, f"{path}: image {pred.image_id}")
        if found or pred is None:
            return slot, None, found, [], None
        task = task._replace(pred=pred)
    slot, digest, problems, values = _evaluate_slot((slot, task))
    return slot, digest, found, problems, values


def _evaluate_slot(item):
    """(slot, ImageTask) -> (slot, prediction_digest, problems, pack_record or None): the unit of
    work of Evaluator.update_file."""
    slot, task = item
    result = evaluate_image(task)
    values = None if result.problems else pack_record(result, task.gt, task.settings)
    return slot, prediction_digest(task.pred), result.problems, values


PREDICATE_GROUP_PRESETS = {
    # PySGG's default LONGTAIL_PART_DICT (pysgg/config/defaults.py), the split its evaluator reports;
    # tail: every other predicate. (PySGG's BGNN config and its stage-wise diagnostics use two other splits.)
    "pysgg-vg150": {"head": ("has", "of", "on", "wearing"),
                    "body": ("above", "behind", "holding", "in", "in front of", "near", "riding", "sitting on",
                             "standing on", "under", "wears", "with")},
}
FREQUENCY_SHARES = (0.5, 0.9)  # predicate_groups: frequency puts the head / body boundaries at these shares


def predicate_groups(spec, names, training_relations, source="config"):
    """{group name: (indices of its predicates)} for predicate_groups ``spec`` (None: {}):
    ``frequency``: predicates by training relation count (descending, ties by index); head = the
    shortest prefix holding FREQUENCY_SHARES[0] of the training relations, body = the predicates
    after it up to FREQUENCY_SHARES[1], tail = the rest. A preset (PREDICATE_GROUP_PRESETS) names
    head and body; tail is every other predicate. A JSON or YAML file maps group names to lists
    of predicate names; a predicate belongs to one group at most."""
    if spec is None:
        return {}
    index = {name: i for i, name in enumerate(names)}
    if spec == "frequency":
        counts = np.asarray(training_relations, np.int64)
        if counts.sum() == 0:
            raise SGEvalError([f"{source}: predicate_groups: frequency needs training relations (train_gt, or "
                               f"entries of gt outside test_image_ids)"])
        order = np.argsort(-counts, kind="stable")
        before = np.r_[0, np.cumsum(counts[order])[:-1]] / counts.sum()  # share held by the predicates before
        head, body = (int(np.count_nonzero(before < share)) for share in FREQUENCY_SHARES)
        return {"head": tuple(order[:head]), "body": tuple(order[head:body]), "tail": tuple(order[body:])}
    if spec in PREDICATE_GROUP_PRESETS:
        groups, where = dict(PREDICATE_GROUP_PRESETS[spec]), f"{source}: predicate_groups {spec}"
        groups["tail"] = [name for name in names if not any(name in group for group in groups.values())]
    else:
        where = f"{spec}: predicate_groups file"
        try:
            _regular_file(spec, "the predicate_groups file")
            groups = yaml.load(Path(spec).read_text(encoding="utf-8"), Loader=yaml.BaseLoader)  # 'on' stays a name
        except (OSError, ValueError, RecursionError, yaml.YAMLError) as error:
            raise SGEvalError([f"{where}: cannot read the file (or '{spec}' is not frequency or one of "
                               f"{', '.join(PREDICATE_GROUP_PRESETS)}): {' '.join(str(error).split())}"]) from None
        if not isinstance(groups, dict) or not all(isinstance(group, list) for group in groups.values()):
            raise SGEvalError([f"{where}: expected a mapping of group names to lists of predicate names"])
    problems = [f"{where}: '{name}' is not a predicate of the GT" for group in groups.values() for name in group
                if name not in index]
    seen = collections.Counter(name for group in groups.values() for name in group)
    problems += [f"{where}: '{name}' is in more than one group" for name, n in seen.items() if n > 1]
    if problems:
        raise SGEvalError(problems)
    return {str(group): tuple(index[name] for name in members) for group, members in groups.items()}


def group_means(per_predicate, groups, k_labels, absent_predicates):
    """mR@k of each predicate group: the mean of its predicates' values (absent predicates count 0
    with absent_predicates 'zero', else they are left out)."""
    out = {}
    for label in k_labels:
        values = per_predicate.get(f"mR@{label}")
        for group, members in groups.items() if values is not None else ():
            chosen = values[list(members)]
            present = chosen[~np.isnan(chosen)]
            size = len(chosen) if absent_predicates == "zero" else len(present)
            out[f"mR@{label}/{group}"] = float(present.sum() / size) if size else np.nan
    return out


def subset_metrics(counts, k_labels, subsets, metrics=METRIC_FAMILIES, absent_predicates="skip",
                   aggregation="per_image"):
    """R@k/<name>, ngR@k/<name> and mR@k/<name> of each Subset (the families among metrics) from
    stacked counts (the subset_* fields), and the per-predicate arrays (C,) behind mR@k/<name>.
    R-type: over the images with rows of the subset (as zR); mR: per predicate over the images
    with subset rows of it, then the mean over the predicates with subset rows (absent_predicates
    zero: over the subset's predicates, those without rows counting 0). NaN without subset rows."""
    out, per_predicate = {}, {}
    if not subsets:
        return out, per_predicate
    pooled, gt_ISC = aggregation == "pooled", counts["subset_gt"]
    found = {"R": counts["subset_gc_hits"], "ngR": counts["subset_ng_hits"]}  # (I, S, K, C) each, read once
    found["mR"] = found["R"]
    for s, subset in enumerate(subsets):
        present = (gt_ISC[:, s] > 0).any(axis=0)
        for family in [family for family in ("R", "ngR", "mR") if family in metrics]:
            for index, label in enumerate(k_labels):
                key, hits_IC = f"{family}@{label}/{subset.name}", found[family][:, s, index]
                if family != "mR":
                    out[key] = _r_type(hits_IC.sum(axis=1), gt_ISC[:, s].sum(axis=1), pooled)
                    continue
                per_predicate[key] = values = _per_predicate(hits_IC, gt_ISC[:, s], pooled)
                size = len(subset.predicates) if absent_predicates == "zero" else np.count_nonzero(present)
                out[key] = values[present].sum() / size if present.any() else np.nan
    return {key: float(value) for key, value in out.items()}, per_predicate


def subset_gt_counts(images, n_subsets, n_predicates):
    """((S, C) GT relations of each subset per predicate, (S,) images with a row of it) over images."""
    gt_SC, images_S = np.zeros((n_subsets, n_predicates), np.int64), np.zeros(n_subsets, np.int64)
    for image in images if n_subsets else ():
        inside_SR = image.subsets.T
        gt_SC += np.bincount((np.arange(n_subsets)[:, None] * n_predicates + image.relations[:, 2])[inside_SR],
                             minlength=n_subsets * n_predicates).reshape(n_subsets, n_predicates)
        images_S += inside_SR.any(axis=1)
    return gt_SC, images_S


def subset_config(spec):
    """A SubsetSpec as the results' config records it (make_config reads it back): a preset by name."""
    if spec.preset is not None:
        return {"name": spec.name, "preset": spec.preset}
    members = [list(member) if spec.kind == "triplets" else member for member in spec.members]
    return {"name": spec.name, "kind": spec.kind, "members": members, **({"role": spec.role} if spec.role else {})}


def subsets_report(specs, gt_SC, images_S, names):
    """The results' subsets section: per subset its kind, role, rule, members, preset (and the
    preset's source) and its GT relations (duplicates removed) in the evaluated images."""
    rules = {"predicates": "a GT relation whose predicate is in the set",
             "triplets": "a GT relation whose (subject class, predicate, object class) is one of the triplets"}
    return {spec.name: {
        "kind": spec.kind, "role": spec.role,
        "rule": rules.get(spec.kind) or f"a GT relation where {SUBSET_ROLES[spec.role]}",
        "members": [list(member) if spec.kind == "triplets" else member for member in spec.members],
        "preset": spec.preset, "source": SUBSET_SOURCES.get(spec.preset),
        "gt_relations": int(gt_SC[s].sum()), "gt_images": int(images_S[s]),
        "gt_relations_per_predicate": {names[c]: int(n) for c, n in enumerate(gt_SC[s]) if n},
    } for s, spec in enumerate(specs)}


def _none_if_nan(value):
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else value


def build_results(config, gt, counted, training, groups=None, scope=None, subsets=(), converted=None):
    """The results dict of a run's counts. scope: the Evaluator's ``scope`` and
    ``duplicate_updates`` (default: all images, none); subsets: the resolved config.subsets. Only the
    echo of the config reads more than its Rules."""
    groups, rules = groups or {}, config.rules
    names, headline = gt.predicate_classes, counted.stores[rules.protocol]
    gt_rel = np.bincount(np.concatenate([image.relations[:, 2] for image in gt.images] or [NO_ROWS[:, 2]]),
                         minlength=len(names))
    present = gt_rel > 0
    subset_gt, subset_images = subset_gt_counts(gt.images, len(subsets), len(names))
    shown = {f"mR@{label}/{subset.name}": np.flatnonzero(subset_gt[s]) for s, subset in enumerate(subsets)
             for label in rules.k}  # a subset's per-predicate values: the predicates of its rows
    by_protocol = {}
    for protocol, store in counted.stores.items():
        metrics, per_predicate, followed = PROTOCOLS[protocol].metrics(rules, store, training, groups, subsets, gt)
        by_protocol[protocol] = {
            "metrics": {key: _none_if_nan(value) for key, value in metrics.items()},
            "per_predicate": {key: {names[c]: _none_if_nan(float(values[c])) for c in shown.get(
                key, np.flatnonzero(present))} for key, values in per_predicate.items()},
            "rules": followed,
            "images_left_out": PROTOCOLS[protocol].images_left_out(store),
            "predicate_confusion": confusion_report(counted.confusion[protocol], names, rules.confusion_k)}
    short = headline["imr_short"].sum(axis=0) if "imr_short" in headline else np.zeros(len(rules.imr_k), np.int64)
    results = {
        "sgeval_version": __version__,
        "config": config_report(config),
        "images": {
            "evaluated": len(gt.images),
            "missing_predictions": int(np.count_nonzero(~counted.predicted)),
            "skipped_no_relations": gt.skipped_no_relations,
            "extra_predictions": counted.extra_predictions,
            **(scope or {"scope": "all", "duplicate_updates": 0}),
        },
        **by_protocol[rules.protocol],
        "gt_relations_per_predicate": {names[c]: int(n) for c, n in enumerate(gt_rel) if n},
        "training_relations_per_predicate": {names[c]: int(n) for c, n in enumerate(training.relations) if n},
        "absent_predicates": [names[c] for c in np.flatnonzero(~present)],
        "protocol_audit": _audit_report(counted.audits, gt.images) if rules.audit else None,
        "imr_short_images": {label: int(n) for label, n in zip(rules.imr_k, short)},
        "predicate_groups": {group: [names[c] for c in members] for group, members in groups.items()},
        "subsets": subsets_report(rules.subsets, subset_gt, subset_images, names),
        "task_check": _task_check(counted.checks, gt.images, [note for name in counted.stores if (
            note := PROTOCOLS[name].task_check_note(rules))]) if rules.task != "sgdet" else None,
        "warnings": [f"IMR@{label}: {n} of {len(gt.images)} images list fewer than {label} ng_triplets "
                     f"for a predicate of their GT; IMR@{label} may be underestimated"
                     for label, n in zip(rules.imr_k, short) if n and {"IMR", "wIMR"} & set(rules.metrics)]
        + _list_warnings(rules, counted.checks, by_protocol[rules.protocol]["metrics"], converted),
    }
    for name, store in counted.measures.items():  # panoptic quality: its section, its keys in the metrics
        section, metrics = MEASURES[name].results(store, gt, rules)
        results[MEASURES[name].results_key] = section
        results["metrics"] = {**results["metrics"], **{key: _none_if_nan(value) for key, value in metrics.items()}}
    if len(by_protocol) > 1:
        results["by_protocol"] = by_protocol
    return results


def config_report(config):
    """The results' echo of a config: every key, lists as lists."""
    return {**dataclasses.asdict(config), **{key: list(getattr(config, key)) for key in ("protocols", "k", "imr_k",
                                                                                          "metrics")},
            "subsets": [subset_config(spec) for spec in config.subsets]}


def confusion_report(matrix_CC1, names, k):
    """The predicate_confusion section of one protocol: for each GT predicate, how many of its
    triplets the first k rows hit ({predicate: n} on itself), pair with another predicate (the
    first row on the pair), or leave without a row on the pair (no_prediction)."""
    rows = np.flatnonzero(matrix_CC1.sum(axis=1))
    return {"k": k,
            "counts": {names[g]: {names[p]: int(matrix_CC1[g, p]) for p in np.flatnonzero(matrix_CC1[g, :-1])}
                       for g in rows if matrix_CC1[g, :-1].any()},
            "no_prediction": {names[g]: int(matrix_CC1[g, -1]) for g in rows if matrix_CC1[g, -1]}}


def _task_check(checks, images, notes=(), examples=5):
    """sgcls / predcls: the images whose prediction does not hold the GT's instances; notes: what
    protocols of the run did with a prediction of another instance count (Protocol.task_check_note),
    given where there is one."""
    report = {}
    for field, meaning in (("instance_count_differs", "instance count differs from the GT's"),
                           ("boxes_differ", f"a box differs from the GT's by more than {BOX_TOLERANCE:g} px"),
                           ("labels_differ", "a label differs from the GT's (predcls)")):
        flagged = np.flatnonzero(checks[:, CHECK_FIELDS.index(field)])
        report[field] = {"images": len(flagged), "meaning": meaning,
                         "examples": [images[i].image_id for i in flagged[:examples]]}
    if report["instance_count_differs"]["images"] and notes:
        report["instance_count_differs"]["protocols"] = list(notes)
    return report


def converted_task(pred_path):
    """The task a converter recorded in a prediction ZIP (its convert.json member), or None."""
    try:
        with zipfile.ZipFile(pred_path) as archive:
            if archive.getinfo("convert.json").file_size > 1 << 20:
                return None
            task = json.loads(archive.read("convert.json")).get("task")
    except (OSError, KeyError, ValueError, AttributeError, zipfile.BadZipFile, RecursionError):
        return None
    return task if task in TASKS else None


def _list_warnings(rules, checks, metrics, converted=None):
    """The two misreadings of the Scene-Graph-Benchmark metrics explainer, when the lists show them."""
    rows, on_gt, repeating = (checks[:, CHECK_FIELDS.index(field)].sum() for field in CHECK_FIELDS[:3])
    warnings = []
    if converted not in (None, rules.task):
        warnings.append(f"the predictions were converted as {converted} (their convert.json) but are evaluated "
                        f"as {rules.task} (task); set task: {converted}")
    if rules.task != "sgdet" and rows and on_gt == rows and not PROTOCOLS[rules.protocol].gt_pairs_given:
        same = [f"R@{a} = R@{b}" for a, b in zip(rules.k, rules.k[1:])
                if metrics.get(f"R@{a}") is not None and metrics.get(f"R@{a}") == metrics.get(f"R@{b}")]
        warnings.append(f"{rules.task}: every relation row pairs two instances related in the GT: the predictions "
                        f"look restricted to GT pairs{' (' + ', '.join(same) + ')' if same else ''}; recall from "
                        f"them is Top@K accuracy (A@K), not R@K")
    if rows and repeating * 3 > rows:
        warnings.append(f"{repeating} of {rows} rows of 'triplets' repeat a subject-object pair (several "
                        f"predicates per pair): unique / singlempo keep the first row of each pair (the graph "
                        f"constraint), openpsg / sgb count every row, so their R@K is partly a no-graph-constraint "
                        f"recall; if 'triplets' is a no-graph-constraint list, report these numbers as ngR@K, not R@K")
    return warnings


def _audit_report(audits, images):
    """Totals, per-image means and per-image rows of the audit counts."""
    audit_II = np.asarray(audits, np.int64).reshape(-1, len(AUDIT_FIELDS))
    means = audit_II.mean(axis=0) if len(audit_II) else np.zeros(len(AUDIT_FIELDS))
    return {**{field: int(total) for field, total in zip(AUDIT_FIELDS, audit_II.sum(axis=0))},
            "per_image_mean": {field: float(value) for field, value in zip(AUDIT_FIELDS, means)},
            "per_image": {image.image_id: dict(zip(AUDIT_FIELDS, map(int, row)))
                          for image, row in zip(images, audit_II)}}


def _fmt(value, key=""):
    if value is None:
        return "-"
    return f"{value:.2f}" if key == "PRank" else f"{100 * value:.1f}"


def _grid(row_labels, column_labels, cell, first_width=8, width=8):
    """Rows of cells under their column labels, right-aligned; a column as wide as its label needs."""
    widths = [max(width, len(str(label)) + 1) for label in column_labels]
    first_width = max(first_width, *(len(str(row)) + 1 for row in row_labels)) if row_labels else first_width
    lines = [" " * first_width + "".join(f"{label:>{w}}" for label, w in zip(column_labels, widths))]
    return lines + [f"{row:<{first_width}}" + "".join(f"{cell(row, column):>{w}}" for column, w in
                                                      zip(column_labels, widths)) for row in row_labels]


def format_table(results):
    """The terminal report: metrics in percent with one decimal (PRank as a mean rank)."""
    config, metrics = results["config"], results["metrics"]
    lines = [f"sgeval {results['sgeval_version']} | protocol {config['protocol']} | "
             f"{'mask' if config['gt_seg'] else 'box'} mode | {results['rules']['aggregation'].replace('_', '-')} "
             f"aggregation | images: "
             + ", ".join(f"{key.replace('_', ' ')} {value}" for key, value in results["images"].items()
                         if (key, value) not in (("scope", "all"), ("duplicate_updates", 0)))]
    own = tuple(family for unit in PROTOCOLS.values() for family in unit.table_families)
    for families, ks in ((("R", "imgR", "mR", "ngR", "mNgR", "F1", "PR", "zR", "ngzR", "A", *own), config["k"]),
                         (("IMR", "wIMR"), config["imr_k"])):
        rows = [family for family in families if f"{family}@{ks[0]}" in metrics]
        if rows:
            lines += _grid(rows, [f"@{k}" for k in ks], lambda f, k: _fmt(metrics[f"{f}{k}"]))
    groups = [group for group in results.get("predicate_groups") or {} if f"mR@{config['k'][0]}/{group}" in metrics]
    if groups:
        lines += _grid([f"mR {group}" for group in groups], [f"@{k}" for k in config["k"]],
                       lambda g, k: _fmt(metrics[f"mR{k}/{g[3:]}"]), max(8, *(len(g) + 5 for g in groups)))
    lines += _subset_lines(results)
    if f"A@{config['k'][0]}" in metrics:
        lines.append(f"A@k: Top@K accuracy ({config['task']}: the first k rows among those on GT pairs; not a recall)")
    scalars = dict.fromkeys(key for unit in PROTOCOLS.values() for key in unit.scalar_keys)
    extras = [f"{key} {_fmt(metrics[key], key)}" for key in ("InstR", "R@inf", "mR@inf", "PRank", *scalars)
              if key in metrics]
    if extras:
        lines.append("  ".join(extras) + "   (PRank: mean rank, lower is better)" * ("PRank" in metrics))
    for unit in MEASURES.values():
        lines += unit.table_lines(results[unit.results_key]) if results.get(unit.results_key) else []
    if "by_protocol" in results:
        by_protocol = results["by_protocol"]
        keys = [key for key in dict.fromkeys(key for section in by_protocol.values() for key in section["metrics"])
                if key.rpartition("/")[2] not in (results.get("subsets") or {})]
        lines += ["protocol comparison (same predictions, same GT):"] + _grid(
            keys, list(by_protocol), lambda key, name: _fmt(by_protocol[name]["metrics"].get(key), key), 10, 11)
    for name, section in results.get("by_protocol", {config["protocol"]: results}).items():
        note = PROTOCOLS[name].table_note(section, results)
        lines += [note] if note else []
    if config["per_predicate"] and results["per_predicate"]:
        per_predicate, counts = results["per_predicate"], results["gt_relations_per_predicate"]
        width = max(map(len, counts), default=8) + 2
        lines += ["per predicate:"] + _grid(
            list(counts), ["GT", *per_predicate],
            lambda name, key: str(counts[name]) if key == "GT" else _fmt(per_predicate[key][name], key),
            width, max(8, *(len(key) + 2 for key in per_predicate)))
    if results["absent_predicates"]:
        rule = "counted as 0" if results["rules"]["absent_predicates"] == "zero" else "not in m-type means"
        lines.append(f"absent predicates ({len(results['absent_predicates'])}, {rule}): "
                     + ", ".join(results["absent_predicates"]))
    if results["protocol_audit"] is not None:
        lines.append("protocol audit (per image): " + ", ".join(
            f"{field.replace('_', ' ')} {value:.2f}"
            for field, value in results["protocol_audit"]["per_image_mean"].items()))
    for field, found in (results.get("task_check") or {}).items():
        if found["images"]:
            lines.append(f"task check ({config['task']}): {found['images']} images: {found['meaning']} "
                         f"(e.g. image {', '.join(found['examples'])})")
            lines += [f"  {note}" for note in found.get("protocols", ())]
    lines += [f"warning: {text}" for text in results["warnings"]]
    return "\n".join(lines)


def _subset_lines(results):
    """format_table's section per subset: what it holds and its GT relations, then R / ngR / mR per
    cut-off (rows per protocol when several ran)."""
    config, lines = results["config"], []
    sections = results.get("by_protocol") or {config["protocol"]: results}
    for name, subset in (results.get("subsets") or {}).items():
        rows = {(family if len(sections) == 1 else f"{family} {protocol}"): (family, protocol)
                for family in ("R", "ngR", "mR") for protocol in sections
                if f"{family}@{config['k'][0]}/{name}" in sections[protocol]["metrics"]}
        if not rows:
            continue
        members = [" ".join(member) if subset["kind"] == "triplets" else member for member in subset["members"]]
        listed = subset["preset"] or (", ".join(members) if len(members) <= 6 else
                                      f"{', '.join(members[:5])}, ... {len(members)} {subset['kind']}")
        relations, images = subset["gt_relations"], subset["gt_images"]
        lines.append(f"subset {name} ({listed}): {subset['rule']}; {relations} GT relation{'s' * (relations != 1)} "
                     f"in {images} image{'s' * (images != 1)}")
        lines += _grid(list(rows), [f"@{k}" for k in config["k"]], lambda row, k: _fmt(
            sections[rows[row][1]]["metrics"][f"{rows[row][0]}{k}/{name}"]))
    return lines


# ---------------------------------------------------------------------------------------------
# 13. Command line
# ---------------------------------------------------------------------------------------------


@click.command(context_settings={"help_option_names": ["-h", "--help"]}, epilog=(
    "Other commands: 'sgeval convert FAMILY ...' turns a model's raw output into a prediction file "
    "('sgeval convert --help' lists the families); 'sgeval report RESULTS.json ...' writes paper tables; "
    "'sgeval serve --config FILE' runs the benchmark service."))
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="YAML config file.")
@click.option("--gt", help="OpenPSG psg.json.")
@click.option("--gt-seg", help="Panoptic PNG root (mask mode); omit for box mode.")
@click.option("--pred", help="Predictions: .json, .zip or directory.")
@click.option("--train-gt", help="Training annotations for zero-shot and wIMR (default: --gt's other images).")
@click.option("--zeroshot-triplets", help="JSON/CSV rows [subject cat, object cat, predicate]: the zero-shot set.")
@click.option("--protocol", type=click.Choice(tuple(PROTOCOLS)),
              help=f"The headline protocol (default {DEFAULT_PROTOCOL}).")
@click.option("--task", type=click.Choice(TASKS),
              help="sgdet (default); sgcls / predcls: the instances are the GT's (predcls: its labels too).")
@click.option("--protocols", help="More protocols to evaluate side by side, comma-separated.")
@click.option("--compare-protocols", is_flag=True,
              help=f"Evaluate the recall protocols side by side: {', '.join(RECALL_PROTOCOLS)} (and the headline "
                   f"protocol).")
@click.option("--k", help="Cut-offs, e.g. 20,50,100,x1,x10.")
@click.option("--imr-k", help="IMR / wIMR cut-offs, e.g. 10,20,50.")
@click.option("--metrics", help=f"Metric families, comma-separated: {','.join(METRIC_FAMILIES)}.")
@click.option("--iou-threshold", type=float, help="Minimum IoU for a match (default 0.5).")
@click.option("--wimr-tau", type=float, help="wIMR weight exponent tau (default 0.5).")
@click.option("--predicate-groups", help="mR per head / body / tail: frequency, pysgg-vg150 or a JSON/YAML file.")
@click.option("--subset", "subsets", multiple=True, metavar="NAME=KIND:NAMES|PRESET", help=(
    "A named subset of the GT relations, repeatable: NAME=predicates:on,above | NAME=objects-ROLE:man,woman (ROLE: "
    "subject, object, both, either) | NAME=triplets:man/riding/horse | a preset "
    f"({', '.join(SUBSET_PRESETS)}). Adds R@k/NAME, ngR@k/NAME and mR@k/NAME."))
@click.option("--absent-predicates", type=click.Choice(["skip", "zero"]), help="Absent predicates in m-type means.")
@click.option("--aggregation", type=click.Choice(["per_image", "pooled"]),
              help="Mean of per-image values or pooled counts.")
@click.option("--per-predicate/--no-per-predicate", default=None, help="Print the per-predicate table.")
@click.option("--audit/--no-audit", default=None,
              help="Protocol audit (default on; off skips masks of absent categories).")
@click.option("--workers", type=int, help="Worker processes (default 1).")
@click.option("--gt-cache", help="Folder of prepared GT images (default: the user cache folder, sgeval/gt).")
@click.option("--no-gt-cache", is_flag=True, help="Decode every GT PNG; keep nothing.")
@click.option("--output", help="Write the JSON results here.")
@click.option("--per-image", help="Write every image's hits here (JSON Lines).")
@click.option("--confusion-k", help="Cut-off of the predicate confusion counts (default 50).")
@click.option("--pq/--no-pq", default=None, help="Panoptic quality (PQ / SQ / RQ) of the predicted masks (mask mode).")
@click.option("--pq-merge", help="How overlapping masks become segments for PQ: none (default: overlap is an error), "
                                 "score-order, first-wins.")
@click.option("--pq-rule", help="Whose panoptic quality: panopticapi (default) or openpsg (OpenPSG's reading of "
                                "pan_results: VOID pixels join the segment of id 0).")
@click.option("--model", help="The model's name in reports (default: the results file's name).")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@click.option("--reference", "show_reference", is_flag=True,
              help="Print the reference (the Evaluator, the formats, the limits, every rule) and exit.")
def main(config_path, quiet, compare_protocols, no_gt_cache, show_reference, **options):
    """Evaluate scene graph predictions against OpenPSG ground truth."""
    if show_reference:
        click.echo(REFERENCE)
        return
    if no_gt_cache:
        options["gt_cache"] = False
    options["subsets"] = options["subsets"] or None  # no --subset: the config's subsets
    if compare_protocols and options["protocols"] is None:
        options["protocols"] = ",".join(RECALL_PROTOCOLS)  # beside the headline protocol
    results = run_cli(lambda progress: evaluate(load_config(config_path, need_pred=True, **options), progress),
                      "evaluating", quiet)
    click.echo(format_table(results))
    if results["config"]["output"]:
        click.echo(f"results written to {results['config']['output']}", err=True)


def run_cli(work, label, quiet=False):
    """Run work(progress) for a command line: a progress bar on stderr (none when quiet) that
    progress(done, total, status=None) advances by one, status shown beside it; on bad input one
    ``error:`` line per problem on stderr and exit code 1. Returns work's result."""
    bar = None

    def progress(done, total, status=None):
        nonlocal bar
        if bar is None:
            bar = click.progressbar(length=total, label=label, file=sys.stderr, item_show_func=lambda text: text)
        bar.update(1, status)

    try:
        return work(None if quiet else progress)
    except SGEvalError as error:
        failure = error
    finally:
        if bar is not None:
            bar.render_finish()
    for problem in failure.problems:
        click.echo(f"error: {problem}", err=True)
    sys.exit(1)


def cli():
    """The sgeval command: ``sgeval report ...`` runs sgeval_report.py, ``sgeval serve ...`` the package
    sgeval_serve and ``sgeval convert ...`` the package sgeval_convert (beside this file, or installed
    with it); anything else is an evaluation.

    Those modules import sgeval, and this imports them: a circle on purpose. sgeval.py stays one
    file that works alone (copied without them, these commands say what is missing), while one
    ``sgeval`` command reaches the tools installed beside it; they are imported here, by name, only
    when asked for, so ``import sgeval`` never loads them."""
    command = sys.argv[1] if sys.argv[1:2] in (["report"], ["serve"], ["convert"]) else None
    if command is None:
        return main()
    module = {"report": "sgeval_report", "serve": "sgeval_serve", "convert": "sgeval_convert"}[command]
    try:
        entry = importlib.import_module(module).main
    except ModuleNotFoundError as error:
        needs = f"{module} beside sgeval.py (pip install sgeval has it)" if error.name == module else f"{error.name} (pip install 'sgeval[{command}]')"
        click.echo(f"error: the {command} command needs {needs}", err=True)
        sys.exit(1)
    return entry(sys.argv[2:], prog_name=f"{Path(sys.argv[0]).name} {command}")



# ---------------------------------------------------------------------------------------------
# 14. Reference: printed by ``sgeval --reference``
# ---------------------------------------------------------------------------------------------

REFERENCE = """\
The Evaluator
-------------
``Evaluator(config)`` reads the GT, the training statistics and the zero-shot list once
(``evaluator.gt``: the GroundTruth, its ``images`` the evaluated GTImages in psg.json order).
``update(image_id, *, labels, triplets, masks=None, boxes=None, scores=None, ng_triplets=None,
triplet_scores=None, ng_triplet_scores=None, row_lists=None, panoptic=None)`` takes one image's
predictions as numpy arrays or torch tensors on any device (copied with
``.detach().cpu()``; torch is never imported): ``labels`` (P,) integer categories, 0-based, in
the GT's vocabulary; ``masks`` (P, H, W) bool or 0/1 integers at the GT image's size (mask mode;
float masks are refused, not thresholded), or ``Panoptic(segment_map, segment_ids)`` (also a
plain 2-tuple): an (H, W) integer map and the (P,) segment id of each instance, for instances
that do not overlap (an id absent from the map is an empty mask), or ``PackedMasks(bits)``: (P,
ceil(H W / 8)) uint8, packed as np.packbits packs each mask's pixels (packed on the model's device,
an eighth of the bytes cross to the host and update skips its packing); ``boxes`` (P, 4) xyxy in image
pixels (required in box mode, checked when given in mask mode); ``scores`` (P,) optional (the
SingleMPO merge order, as ``score`` in the file format); ``triplets`` (N, 3) ``[s, o, p]`` ranked
best first, never re-sorted; ``ng_triplets`` (M, 3), or None for "use triplets";
``triplet_scores`` (N,) and ``ng_triplet_scores`` (M,) numbers, optional (the ``oi`` protocol's
ranking); ``row_lists`` {name: rows, (rows, scores) or {"triplets": rows, "scores": scores}}: more
named lists, optional (the format's ``row_lists``); ``panoptic``
``PanopticSegmentation(segment_map, segment_ids, categories, void_id_segment=None)``, optional
(mask mode): the prediction's own panoptic segmentation, which panoptic quality scores instead of
the masks (an (H, W) integer map, the (N,) ids of its segments, each with a pixel, pixels of other
ids in no segment; their (N,) categories; void_id_segment: see pq_rule). ``update_file(path,
workers=None)`` updates it with every record of a prediction file, as ``evaluate`` does. In box
mode ``masks`` and ``panoptic`` are ignored, as ``seg_filename`` is.

* An update is checked before it touches the state, with the file reader's rules and messages
  (the image id and the field): the image is one of the GT's test images (an id that looks like
  an index into the evaluated images gets a hint), integer dtypes, one P for every field,
  categories and indices in range, finite boxes (box mode: x1 <= x2, y1 <= y2), masks of exactly
  the GT image's (H, W). A bad update raises SGEvalError and changes nothing.
* Image ids compare as ``str(id)``. A test image without relations is not evaluated; its updates
  count as ``extra_predictions``. The same image updated again with identical arrays counts once
  (``images.duplicate_updates``: DistributedSampler pads the last batch with repeats); with other
  arrays it is an error naming the image (a model whose output depends on the batch, as with
  padding to the batch's largest image, should skip the sampler's repeats: sgeval_convert/README.md).
  Results never depend on the order of updates or merges.
* ``update`` checks and packs the masks (1 bit a pixel) in the caller's thread and evaluates the
  image (and digests its arrays) in one of ``workers`` threads (the numba kernels release the
  GIL), so the evaluation runs beside the model; at most 2 x ``workers`` images wait (``update``
  blocks beyond), and every other method waits for them first (a problem found then, with the
  GT's panoptic PNG, is raised by the next call and the image is left out of the state). An
  Evaluator is used from one thread; it pickles and copies without its threads.
* ``compute(missing="empty")`` returns the results dict of ``evaluate``; GT images without an
  update are scored as predicting nothing and counted (``missing_predictions``), as a file
  without their records. ``missing="skip"`` evaluates the updated images only (a quick validation
  on part of the split; ``images.scope`` is ``updated``). compute leaves the state as it is.
* The state is, per updated image, a digest of its arrays, its update count and its counts
  (``pack_record``: integers in the smallest dtype, per-predicate counts at the predicates of its
  GT only), never the predictions. ``state_dict()`` is a picklable dict of integer numpy arrays;
  ``merge(other)`` (an Evaluator or a state_dict; commutative and associative) and
  ``load_state_dict(state)`` refuse a malformed state and one made under another fingerprint: the
  sgeval version, the SHA-256 of the gt, train_gt and zeroshot_triplets files (not the PNGs), the
  mode, task, protocols, k, imr_k, iou_threshold, predicate count, audit, confusion_k and the
  resolved subsets (what decides the counts; metrics, aggregation and groups only decide what
  compute reports).
  ``reset()`` forgets every update. ``sync()``: under torch.distributed (when the caller imported
  torch and initialised a process group), one ``all_gather_object`` of the state, then every rank
  merges all of them and holds the same state (``sync(all_gather_object=f, world_size=n)`` stands
  in for it).

Ground truth (OpenPSG ``psg.json``)
-----------------------------------
``data[i]`` holds ``image_id``, ``height``, ``width``, ``pan_seg_file_name``, ``segments_info``,
``annotations`` (xyxy boxes, same order as ``segments_info``) and ``relations`` ``[[s, o, p]]``.
Object vocabulary = ``thing_classes + stuff_classes``. Evaluated images: ids in ``test_image_ids``
with at least one relation; of the other entries (the training split) only ``segments_info``
category ids and ``relations`` are read. Mask mode when ``gt_seg`` (the panoptic PNG root) is given,
box mode otherwise. A panoptic PNG is 8-bit RGB(A); segment id = R + 256 G + 65536 B.
Visual Genome (VG150) and GQA-200 come in the same shape, box mode: ``sgeval convert``
(sgeval_convert, installed with sgeval) writes it from Scene-Graph-Benchmark's files.

Predictions (SGBench v1 format, read compatibly)
------------------------------------------------
A ``.json`` file, a ``.zip`` or a directory holding ``triplets.json``::

    {"version": 1, "images": [{
        "id": "107902",                     # GT image_id; int or string, compared as string
        "seg_filename": "107902.tiff",      # mask mode: TIFF beside triplets.json / in the zip
        "instances": [{"category": 3, "bbox": [x1, y1, x2, y2], "score": 0.93}, ...],
        "triplets":    [[s, o, p], ...],    # most confident first
        "triplet_scores": [0.93, ...],      # optional: one finite number per row of triplets
        "ng_triplets": [[s, o, p], ...],    # optional, most confident first (default: triplets)
        "ng_triplet_scores": [0.93, ...],   # optional: one per row of ng_triplets
        "row_lists": {"oi": {"triplets": [[s, o, p], ...], "scores": [0.93, ...]}},  # optional
        "panoptic": {"file": "107902.panoptic.png",           # optional, mask mode: for PQ
                     "segments": [{"id": 1, "category": 0}, ...], "void_id_segment": 1}}]}

The instance list may also be spelled ``annotation`` (SGBench 1.0 code) or as parallel
``categories`` + ``bboxes`` lists. ``bbox`` is required in box mode only; ``score`` is optional.
Row scores (``triplet_scores``, ``ng_triplet_scores``; ``null`` = not given) are read only by the
``oi`` protocol, which ranks by them and says so in one error line when they are missing; the
other protocols read the rows as written. Without ``ng_triplets`` the ng list is ``triplets``
with ``triplet_scores``; ``ng_triplet_scores`` without ``ng_triplets`` is an error.
``row_lists`` (optional) holds more named lists of rows, each with optional scores: at most
MAX_ROW_LISTS (16), a name of 1 to 64 letters, digits, '.', '_', '+' or '-' (not ``triplets`` or
``ng_triplets``), rows and scores checked as ``triplets`` and ``triplet_scores``. A protocol
declares the lists it reads (``Protocol.lists``: per role, the first list a record has): every
protocol reads ``triplets`` (R@k) and ``ng_triplets`` (ngR@k); ``oi`` its scored list from
``row_lists.oi``, else ``ng_triplets``. ``sgeval convert openimages`` writes PySGG's classic
no-graph-constraint list as ``ng_triplets`` and its Open Images list as ``row_lists.oi``.
TIFF: one page (or one layer of a 3-D page) per instance in instance order, non-zero = inside,
GT image size; pages of 1-, 8- or 16-bit integer samples, uncompressed or LZW, deflate, PackBits,
LZMA or Zstandard (not JPEG or other lossy codecs). An image with no instances needs no TIFF. ZIP members are
read in memory, never extracted. ``triplets.json`` (UTF-8) is read one record at a time, so
memory holds a few records and one image's masks. ``write_predictions`` writes the format: each
TIFF is one 1-bit deflate page whose samples, stored apart (planar), are the masks, so a reader
parses one directory per image instead of one per mask (SGBench 1.0 reads it too).
``panoptic`` (optional, read in mask mode only) is the prediction's own panoptic segmentation,
which panoptic quality scores instead of the instance masks (the protocols keep the masks): an
8-bit RGB(A) PNG at the GT image's size, id = R + 256 G + 65536 B, 0 for no segment; ``segments``
lists each id (1 to 2^24 - 1, distinct, at most MAX_INSTANCES) with its category; every non-zero
pixel id must be listed and every listed id must have a pixel (as panopticapi requires);
``void_id_segment`` (optional) names the segment that shared VOID's id in the model's own map
(``sgeval convert openpsg``: pan_results' value 0). ``write_predictions`` writes it from
``panoptic`` ({"segments", "void_id_segment", "segment_map" or "png"}; encode_panoptic).

Strict reading and limits
-------------------------
Every problem is one line naming file, image id and field; all of a pass are raised together as
one SGEvalError (the CLI prints ``error:`` lines and exits 1). JSON ``true``/``false`` are not
integers; a category, id or index is a JSON integer (not ``1.0``, not ``"1"``); a bbox is four
finite numbers (GT and predictions, both modes); ``triplets`` and ``relations`` are lists of
``[3 integers]`` rows (``[[]]`` and ``null`` are malformed; ``ng_triplets: null`` means not
given); ``version`` is the integer 1; a ZIP member name appears once; a GT image's segment ids are
distinct and each occurs in its PNG; every strip or tile of a mask TIFF is present; a file that
is read is a regular file (not a directory, device, FIFO or socket); a cut-off is ASCII digits,
or x and a decimal number without an exponent (``20``, ``x10``, ``x.5``), and its label is kept as
written (a later label of the same cut-off is left out). One pass keeps its first MAX_PROBLEMS
(1,000) problem lines and counts the rest in a last line. Limits: ``workers`` <=
MAX_WORKERS (64); a prediction record <= MAX_INSTANCES (10,000) instances; a GT image <=
MAX_IMAGE_PIXELS (2**26, environment variable ``SGEVAL_MAX_IMAGE_PIXELS``); one JSON value (a
record, an entry) <= 2**26 characters; a mask TIFF <= 2 bytes per pixel of its masks + 1 MiB and
as many masks as instances (checked before decoding); JSON and YAML nesting as deep as Python's
recursion limit; config values are scalars or flat lists (``subsets`` nests: it is walked up to
SUBSET_VALUES (100,000) items, so YAML aliases cannot expand it). Control characters in messages are
shown escaped; a message line is cut at 1,000 characters.

Rules (where the papers are ambiguous, these are the decisions)
---------------------------------------------------------------
* GT relations: exact duplicate rows removed, first occurrence kept; several predicates per pair
  are kept.
* IoU: masks |a & b| / |a | b|; boxes in continuous xyxy coordinates (no +1), 0 when the union is
  empty. Only same-category pairs are compared. A match needs IoU >= ``iou_threshold`` (0.5).
* ``unique`` protocol (Algorithm 2): each prediction's candidate is the same-category GT instance
  of highest IoU (first GT index on ties); each GT instance keeps its best candidate (highest IoU,
  earlier prediction on ties). ``multimpo``: every prediction maps to its candidate, and R@k /
  mR@k / PR@k take the first k distinct triplets of ``triplets`` (no graph constraint).
* ``singlempo``: merge, then ``unique`` on the merged nodes. Walk the instances by ``score``
  (descending, stable) when every instance has one, else by first appearance in ``ng_triplets``
  then ``triplets`` (subject before object; unreferenced instances last, by index). An instance
  not yet absorbed becomes a node with the pixels no earlier node claimed (dropped when there are
  none) and absorbs every later instance whose full mask has IoU >= 0.5 with its own (labels
  ignored). Nodes keep their instance's category. Triplets are remapped to nodes; triplets with a
  dropped end and self-pairs are removed. Box mode: box IoU, no claiming, nothing dropped.
* ``openpsg``: OpenPSG's ``sgdet`` evaluation (``openpsg/evaluation/sgg_metrics.py``) exactly, in
  mask mode (its ``pan_seg``) and box mode (its ``bbox``). No instance mapping: a row of a list
  hits a GT triplet (s, o, p) when its predicate is p and its subject and object each have the
  category of s and o and IoU >= ``iou_threshold`` with them (many-to-many: one row can hit
  several GT triplets, a GT instance can be hit by several predictions). R@k / mR@k: the first k
  rows of ``triplets`` as written, repeats and self-pairs taking their slots. ngR@k / mNgR@k: the
  first min(k, 100) rows of ``ng_triplets`` as written (OpenPSG's ranking is what the converters
  write; OpenPSG keeps 100 and computes them in box mode only). Box IoU as mmdet's ``bbox_overlaps``: float32, no +1,
  union at least 1e-6, compared with the threshold in float32. A record without triplets (and a
  missing record) is left out of every mean, GT included (``images_left_out``); absent predicates
  count 0 and means are per image, whatever ``absent_predicates`` and ``aggregation`` say. sgeval
  extensions (OpenPSG does not compute them; the rules above carried over): relative k; ngR and
  mNgR in mask mode; PR@k (a GT pair is hit by a row whose ends both match it); InstR and R@inf (a
  GT instance is matched when some prediction meets the IoU); PRank (the number of other
  predicates on rows of ``ng_triplets`` hitting the GT pair before the first row hitting the
  triplet); zR, ngzR; IMR / wIMR (the rows of ``ng_triplets`` with the predicate, as written).
* ``sgb``: Scene-Graph-Benchmark's VG evaluation (``maskrcnn_benchmark/data/datasets/evaluation/
  vg/sgg_eval.py``), SGDet. As ``openpsg``, except: box IoU as its ``boxlist_iou``, float32 with
  the +1 pixel convention (w = x2 - x1 + 1), inter / ((GT area + predicted area) - inter); every
  relation row of the GT file counts, duplicates included, in hits and denominators (the other
  protocols read G without duplicates; the reported GT counts are G's); zR / ngzR over the images
  with zero-shot rows. In mask mode (Scene-Graph-Benchmark has none) it is an sgeval extension
  with mask IoU.
* ``oi``: PySGG's Open Images evaluation (``pysgg/data/datasets/evaluation/oi/``; every rule
  with file and line: tools/oi_check/README.md), box mode only. Its list: the rows of
  ``row_lists.oi``, else of ``ng_triplets`` (without them ``triplets``), ranked by their scores, descending (ties keep the
  written order), the first 100, those scoring above 1e-5 (``sgeval convert openimages`` writes
  PySGG's own list: two predicates per pair). Every GT row of the file counts, duplicates
  included, in every evaluated image, with a record or without. R@k: the GT rows hit by the first
  k rows of the list (a hit as in ``sgb``: predicate, categories, both box IoUs >=
  ``iou_threshold``, float32, +1 pixel), summed over the images, over all GT rows (+ 1e-12);
  imgR@k: the per-image mean. AP per predicate, of relationships (AP_rel) and of phrases (AP_phr):
  the listed rows of the predicate in all images, in GT order, ranked by ``np.argsort`` of their
  negated scores (PySGG's tie order); a row takes, of the GT rows with its predicate, the one of
  largest overlap (first on ties; 0 where a category differs; relationships: the lesser of the
  subject and object IoUs, phrases: the IoU of the union boxes), and is a true positive when that
  overlap is above ``iou_threshold`` and no better-ranked row took it (else a false positive,
  even when another GT row would do); VOC AP: precision envelope, sentinels (0, 0) and (1, 0),
  summed where recall changes; recall over the predicate's GT rows + 1e-12. mAP_rel / mAP_phr:
  the mean over every predicate of the vocabulary (absent ones: AP 0); wmAP_rel / wmAP_phr:
  weighted by GT rows; ``score`` = 0.4 mAP_rel + 0.2 R@50 + 0.4 mAP_phr and ``score_wtd`` the
  same with the wmAPs (what PySGG returns and papers report). mR@k: the mean recall PySGG prints
  beside it, of ``triplets`` under ``sgb``'s rules (images without triplets left out of it). It
  needs row scores (one error line when a record has rows without them). It reads the stored
  instances in every task (PySGG's Open Images pass scores the predicted boxes also in PredCls). ``--compare-protocols``
  adds the five recall protocols (it runs on any prediction; oi only when named).
* ``ag``: STTran's Action Genome evaluation (``lib/evaluation_recall.py``; every rule with file and
  line: tools/ag_check/README.md), box mode, frames as images. Three lists per frame, as STTran's
  three constraints rank them and ``sgeval convert ag`` writes them: ``row_lists.with`` (else
  ``triplets``), ``row_lists.semi``, ``row_lists.no`` (else ``ng_triplets``), read as ranked. A row
  hits every GT row (each row of the file, repeats included) with its subject and object categories
  and predicate whose boxes have the +1-pixel IoU (float64, as STTran's bbox.pyx) >= iou_threshold
  with its subject's and object's; many-to-many; the stored instances in every task; a frame
  without a record or rows scores 0. R@k / semiR@k / ngR@k (with / semi / no constraint): the mean
  over frames of each frame's recall. mR@k / mSemiR@k / mNgR@k: TEMPURA's mean recall, per
  predicate the hits over all frames / (its GT rows + 1e-10), summed over every predicate of the
  vocabulary and divided by their number; fmR@k / fmSemiR@k / fmNgR@k: DSG-DETR's, per predicate
  the mean over the frames holding it of their recall (0 without such frames), over every
  predicate; vR@k / vSemiR@k / vNgR@k: the mean over videos (the GT entries' ``video``) of their
  frames' mean recall (an sgeval extension). The fair protocols read ``triplets`` (with) and
  ``ng_triplets`` (no) of the same file.
* Panoptic quality (``pq: true``, mask mode; a measure beside the protocols, results
  ``panoptic_quality`` and PQ, SQ, RQ, PQ_th, ..., PQ_st, ... in ``metrics``): panopticapi's
  pq_compute (every rule with file and line: tools/pq_check/README.md). The prediction's masks
  are its segments (``pq_merge: none``: masks that overlap are an error naming the image), or
  become segments by a merge rule: ``score-order`` (fair-psgg's hilo merge: by score, descending,
  tied scores the later mask first; a mask becomes a segment of the pixels no earlier segment
  claimed, dropped when none, and absorbs every later mask of mask IoU >= 0.5, any category) or
  ``first-wins`` (its psgtr merge: each pixel to the first mask holding it). A segment without
  pixels is none. GT: the listed segments, their ``iscrowd`` and ``area`` (segments_info's, as
  panopticapi reads it), VOID = the PNG's pixels of id 0 (a PNG id segments_info does not list is
  neither). A segment and a non-crowd GT segment of its category match when 2 x shared > union,
  union = segment pixels + GT area - shared - the segment's VOID pixels (IoU > 0.5); an unmatched
  GT segment (not crowd) is a false negative; an unmatched segment a false positive unless more
  than half of it lies on VOID and the last crowd segment of its category. Per category PQ = sum
  IoU / (TP + FP / 2 + FN / 2), SQ = sum IoU / TP (0 without TP), RQ = TP / (TP + FP / 2 + FN /
  2); All / Things (thing_classes) / Stuff: the means over the categories with a TP, FP or FN
  (None when there is none). OpenPSG prints the same numbers in percent. An image's record holds
  its matched pairs (category, shared, union), per category its FP and FN, and which segmentation
  was scored (``pq_source``): the counts add up. A prediction with its own panoptic segmentation
  (``panoptic``) is scored on it, whatever its masks and pq_merge; the results say which
  (``panoptic_quality.source``: panoptic, masks, mixed or none; ``images_by_source``).
  ``pq_rule`` (``--pq-rule``; results ``panoptic_quality.rule``): ``panopticapi`` (default), or
  ``openpsg``, OpenPSG's evaluate(metric=['PQ']) through mmdet 2.20.0, whose _pan2json gives VOID
  the id 0 that pan_results' segment of category 0, instance 0 also has
  (mmdet/datasets/coco_panoptic.py:341-360): the pixels of no segment join the segment that
  ``void_id_segment`` names. Nothing else differs (the same images, GT areas from segments_info,
  things from thing_classes); OpenPSG's numbers are these times 100.
* ``task`` (what the model was given): ``sgdet`` (nothing; the default), ``sgcls`` (the GT boxes)
  or ``predcls`` (the GT boxes and labels). In sgcls and predcls a prediction's instances are the
  GT's, in GT order: predcls matches with the GT's categories and boxes (in mask mode its masks)
  and scores 1 in place of the stored ones (as Scene-Graph-Benchmark's evaluator does), sgcls with
  the stored instances. Task check, reported per image (``task_check``): a prediction with another
  number of instances than the GT (evaluated as stored, also in predcls; except under ``sgb`` and
  ``oi``'s classic mR in predcls, where the GT's instances are put in place by index whatever their
  number, as Scene-Graph-Benchmark's and PySGG's evaluators do, a row on an instance beyond the
  GT's being an error, and task_check says so), a box more than
  BOX_TOLERANCE (1 px) away from its GT box in any coordinate (box mode), a label other than the
  GT's (predcls).
* A@k (Top@K accuracy, sgcls and predcls only; Scene-Graph-Benchmark's ``SGPairAccuracy``): the
  protocol's R@k of the rows of ``triplets`` whose (subject, object) index pair is the pair of a
  GT relation (the ranking restricted to GT pairs before the cut-off), pooled: hits summed over
  the evaluated images over their GT relations, whatever ``aggregation`` says. It is not a recall
  and is never shown as R@k.
* F1@k = 2 R@k mR@k / (R@k + mR@k) (0 when both are 0); not in the default families.
* ``predicate_groups``: mR@k per group (``mR@k/head``, ...), the mean of the group's per-predicate
  mR@k with the protocol's absent-predicate rule. ``frequency``: predicates by training relation
  count, head = the most frequent holding half of the training relations, body = the next ones up
  to 90%, tail = the rest; ``pysgg-vg150``: PySGG's split of VG150 (its LONGTAIL_PART_DICT: head
  has, of, on, wearing; body 12 predicates; tail the other 34); or a JSON/YAML file mapping group
  names to predicate names.
* Warnings for two misreadings: in sgcls / predcls, every row on a GT pair (predictions
  restricted to GT pairs: their "R@k" is A@k); and a ``triplets`` list in which more than a third
  of the rows repeat an earlier subject-object pair (one-stage models write such lists; so does
  a no-graph-constraint list given as the graph-constrained one, and openpsg and sgb read it as
  written).
* Graph-constrained selection GC_k (the other protocols): walk ``triplets``, drop a triplet whose
  predicted (s, o) pair occurred earlier, keep the first k. No-graph-constraint NG_k: walk
  ``ng_triplets``, drop exact repeats, keep the first k. Relative k ``x10``: k = max(1,
  floor(10 |G| + 0.5)). A selection is mapped through the matching; triplets with an unmatched
  end are dropped and the rest compared with G as a set of (s_gt, o_gt, p).
* PRank (Algorithm 6): walk ``ng_triplets``, map, drop unmatched, drop exact repeats of an earlier
  mapped triplet; a triplet's rank is the number of earlier kept triplets with the same mapped
  pair. Per image and predicate, the mean rank of the GT triplets that appear (a multiset mean);
  undefined when none appears.
* Zero-shot (zR@k, ngzR@k): GT triplets whose (subject category, object category, predicate)
  type never occurs in the training split (``train_gt``, default the non-test entries of ``gt``),
  or that are listed in ``zeroshot_triplets``; recall over them with the R@k / ngR@k selection
  (relative k still counts all of G). Images without zero-shot triplets are skipped.
* IMR@k: per image and predicate p of G, the first k triplets with predicate p in the NG order of
  ``ng_triplets`` (exact repeats dropped), matched, over |G^(p)|; aggregated like mR. When an image
  lists fewer than k such triplets for a predicate of its GT, a warning counts it. wIMR@k =
  sum_p w_p IMR(p), w_p = n_p^tau / sum_q n_q^tau over the predicates present, n_p = distinct
  (subject category, object category) pairs of predicate p in the training split.
* Aggregation ``per_image`` (default; SGBench, OpenPSG and the Scene-Graph-Benchmark code):
  R-type metrics (R, ngR, PR, InstR, R@inf, zR, ngzR) are means over evaluated images (zR: over
  images with zero-shot triplets). m-type metrics (mR, mNgR, mR@inf, IMR, PRank) are per predicate
  the mean over the images whose G holds it (PRank: where defined), then the mean over the
  predicates present in the evaluated GT (PRank: over predicates with a value). ``pooled``: sums
  of hits over sums of GT (per predicate for m-type). ``absent_predicates: zero`` counts absent
  predicates as 0 in mR, mNgR, mR@inf and IMR (the OpenPSG rule).
* Protocol audit, per image and in total: repeated triplets and repeated pairs of ``triplets``,
  self-pairs, duplicate instances (an earlier instance of the same category with IoU >= 0.5),
  instances absorbed and dropped by the SingleMPO merge, and relations that repeat a node pair
  after the merge (what SingleMPO's graph constraint removes). ``audit: false`` leaves it out, and
  then ``unique`` / ``multimpo`` skip decoding masks whose category is absent from the GT image.
* An evaluated image without a prediction record counts with zero hits (``openpsg``: left out);
  records for images that are not evaluated are ignored and counted as ``extra_predictions``.
* Predicate confusion at ``confusion_k`` (default 50; an absolute or relative cut-off), per
  protocol: the rows R@k selects (GC_k; multimpo: the first k distinct triplets; openpsg and sgb:
  the first k rows as written). A GT triplet (s, o, p) counts as (p, p) when a selected row on its
  pair (both ends matched to s and o under the protocol) has predicate p, else as (p, q) for the
  predicate q of the first selected row on its pair, else as no prediction. Summed over the
  images (images openpsg and sgb leave out add nothing; sgb counts every GT row of the file), so a
  row of the matrix adds up to the GT triplets of its predicate and its diagonal share is that
  predicate's pooled R@k.
* ``per_image``: a JSON Lines file, one line per evaluated image in GT order: ``image_id``,
  ``gt_relations``, ``predicted`` (a record exists), ``hits`` {protocol: the integer hits behind
  each R-type metric of the run per k (R@k, ngR@k, PR@k, zR@k, ngzR@k, A@k, InstR, R@inf, and of
  each subset R@k/<name>, ngR@k/<name>) and their denominators (``gt_relations``, ``gt_pairs``,
  ``gt_zeroshot``, ``gt_instances``, ``gt_relations/<name>``; 0 where the protocol leaves the image
  out); oi: the hits behind its R@k and the GT rows of the file} and ``audit`` (the audit counts,
  when on).

Named GT subsets (config ``subsets``, CLI ``--subset``)
-------------------------------------------------------
Recall over the GT relations a rule picks: zero-shot recall's idea for any named set of rows.
A subset is one of (class names as the GT writes them, exactly):

* ``predicates``: a relation whose predicate is in the set;
* ``objects`` with a ``role``: ``subject`` (the subject's class is in the set), ``object`` (the
  object's), ``both`` (the subject's and the object's) or ``either`` (at least one of them);
* ``triplets``: a relation whose (subject class, predicate, object class) is one of the listed
  ``[subject, predicate, object]`` name triples.

``subsets`` is a list, or a mapping of names to specs; ``--subset`` (repeatable) takes the list's
text form and replaces the config's subsets::

    subsets:
      - ovsgtr-novel-objects                      # a preset (below), named by itself
      - ovd=ovsgtr-novel-objects                  # a preset under another name
      - people=objects-either:man,woman,person    # NAME=KIND:NAMES; KIND: predicates, objects-<role>, triplets
      - rides=triplets:man/riding/horse,woman/riding/horse    # subject/predicate/object
      - {name: spatial, kind: predicates, members: [above, under, in front of]}
    subsets: {people: {kind: objects, role: both, members: [man, woman]}, near: "predicates:near,behind"}
    python sgeval.py --config c.yaml --subset people=objects-both:man,woman --subset ovsgtr-novel-predicates

A name is 1 to 64 letters, digits, '.', '_', '+' or '-' (from a letter or digit), given once, and
not a predicate group's; a name with a comma or a slash needs the mapping form. A bad spec is one
error line naming the subset; so is a subset whose names the GT lacks (naming them).

Metrics, for every protocol with its own selection, matching, rows and left-out images (openpsg
and sgb: rows as written, images without predicted relations left out; sgb: every GT row of the
file, duplicates included), in the families ``metrics`` asks for:

* ``R@k/<name>``, ``ngR@k/<name>``: zR@k / ngzR@k with the subset's rows in place of the zero-shot
  ones (k resolved with all of the image's G; images without rows of the subset are skipped).
* ``mR@k/<name>``: per predicate, over the images with subset rows of it (``pooled``: summed);
  then the mean over the predicates with subset rows, or with ``absent_predicates: zero`` (openpsg
  and sgb: always) over the subset's predicates (predicates: the members; triplets: theirs;
  objects: every predicate), those without rows counting 0. None without subset rows. Under
  ``oi`` only ``mR@k/<name>`` (its classic mR), as its own R@k ranks another list.

Results: the keys above in ``metrics`` and each ``by_protocol`` section; ``per_predicate`` has
``mR@k/<name>`` for the predicates of the subset's rows; ``subsets`` describes each: ``kind``,
``role``, ``rule`` (in words), ``members``, ``preset`` and its ``source``, ``gt_relations`` and
``gt_images`` (rows, duplicates removed, and images with rows among the evaluated ones) and
``gt_relations_per_predicate``; ``config.subsets`` records each as make_config reads it back (a
preset by its name). The table prints a section per subset (a row per family, and per protocol
when several ran); the protocol comparison leaves them out. In an Evaluator's state, an image's
record holds 1 + 2 len(k) more counts per subset, protocol and predicate of its GT.

Presets: the VG150 splits of OvSGTR (github.com/gpt4vision/OvSGTR at 91afa5b), for VG150 GT with
Scene-Graph-Benchmark's class names (as ``sgeval convert vg150`` writes it; on a GT without them
a preset is an error saying so):

* ``ovsgtr-novel-predicates`` (its OvR setting): the 15 novel predicates, datasets/vg.py:40
  ``VG150_NOVEL_PREDICATE``, the names at the 1-based indices its evaluator tests
  (datasets/sgg_metrics.py:298-299); rule (sgg_metrics.py:326-329): a row whose predicate is one.
* ``ovsgtr-novel-objects`` (its OvD setting): the 45 novel object classes, the keys of
  datasets/vg.py:31 ``VG150_NOVEL2BASE``, the names at the indices of sgg_metrics.py:269; rule
  (sgg_metrics.py:268-273): a row whose subject and object classes are BOTH novel (role ``both``;
  the line commented out at :271 tested the opposite, neither class novel).
* OvD+R (config/GroundingDINO_SwinT_OGC_ovdr.py:105-106 turn both on) has no rule of its own: the
  two evaluators run side by side, "Novel Object" and "Novel Relation" (datasets/sgg_eval.py:252-262,
  422-425, 447-453); list both presets.

Its novel recall (sgg_metrics.py:277-290) is Scene-Graph-Benchmark's zero-shot recall over those
rows: per image over the images with novel rows, the graph-constrained rows of its SGRecall,
images without predicted relations left out (sgg_eval.py:665). The ``sgb`` protocol's
``R@k/<preset>`` follows these rules; it is not checked against OvSGTR's code, and OvSGTR's GT
loader also merges same-class GT boxes with IoU > 0.9 and keeps at most 100 boxes an image
(datasets/vg.py:363-397), which sgeval's VG150 GT does not.

Prepared ground truth
---------------------
In mask mode each GT image's segments, packed, and their ``mask_boxes`` are kept (``GTCache``):
LZ4-compressed in a folder (``gt_cache``; default the user cache folder, ``default_gt_cache``;
pack files of up to GT_PACK_ENTRIES entries, one per batch of images a process prepared; bounded
by SGEVAL_GT_CACHE_MIB, the oldest packs go first) and, in an Evaluator, in memory
(SGEVAL_GT_MEMORY_MIB). An entry's key is the SHA-256 of the layout's version, the image's
``image_id``, size and segment ids and the PNG's bytes; its content carries its signature (HMAC
of key and content with the folder's ``sgeval.key``), so a truncated, tampered or foreign entry is
ignored and prepared again. ``gt_cache: false`` decodes every PNG.
The results are the same bits either way.

Glossary of dimensions: I images, G GT instances, P predicted instances, N merged nodes or any
masks, R relations (triplets), K cut-offs, C predicate classes, W 64-bit words of a packed mask.
A packed mask holds the H x W pixels row by row, eight to a byte, the first pixel in the highest
bit (``np.packbits`` order), zero padded to whole words.
"""

if __name__ == "__main__":
    cli()
