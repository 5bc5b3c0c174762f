"""sgeval -- exact, fast evaluation of (panoptic) scene graph generation.

One self-contained file: copy it into your repository and import it, or run it.

Quick start
-----------
    python sgeval.py --config configs/psg.yaml
    python sgeval.py --gt psg.json --gt-seg panoptic/ --pred pred.zip --k 20,50,100,x10

    import sgeval
    results = sgeval.evaluate(sgeval.load_config("configs/psg.yaml", workers=2))
    print(results["metrics"]["mR@50"])

Ground truth (OpenPSG ``psg.json``)
-----------------------------------
``data[i]`` holds ``image_id``, ``height``, ``width``, ``pan_seg_file_name``, ``segments_info``,
``annotations`` (xyxy boxes, same order as ``segments_info``) and ``relations`` ``[[s, o, p]]``.
Object vocabulary = ``thing_classes + stuff_classes``. Evaluated images: ids in ``test_image_ids``
with at least one relation. Mask mode when ``gt_seg`` (the panoptic PNG root) is given, box mode
otherwise. A panoptic PNG is read as RGB; segment id = R + 256 G + 65536 B.

Predictions (SGBench v1 format, read compatibly)
------------------------------------------------
A ``.json`` file, a ``.zip`` or a directory holding ``triplets.json``::

    {"version": 1, "images": [{
        "id": "107902",                     # GT image_id; int or string, compared as string
        "seg_filename": "107902.tiff",      # mask mode: TIFF beside triplets.json / in the zip
        "instances": [{"category": 3, "bbox": [x1, y1, x2, y2], "score": 0.93}, ...],
        "triplets":    [[s, o, p], ...],    # most confident first
        "ng_triplets": [[s, o, p], ...]}]}  # optional, most confident first (default: triplets)

The instance list may also be spelled ``annotation`` (SGBench 1.0 code) or as parallel
``categories`` + ``bboxes`` lists. ``bbox`` is required in box mode only; ``score`` is optional.
TIFF: one page (or one layer of a 3-D page) per instance in instance order, non-zero = inside,
uint8 or 1-bit pages, GT image size. An image with no instances needs no TIFF. ZIP members are
read in memory, never extracted. ``write_predictions`` writes the format (1-bit deflate TIFFs).
``triplets.json`` is read incrementally (UTF-8): each image is evaluated as soon as its record is
read, so memory holds a few records and one image's masks, not the whole prediction.

Rules (SPEC sections 4-6; where the papers are ambiguous, these are the decisions)
-----------------------------------------------------------------------------------
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
* Graph-constrained selection GC_k: walk ``triplets``, drop a triplet whose predicted (s, o) pair
  occurred earlier, keep the first k. No-graph-constraint NG_k: walk ``ng_triplets``, drop exact
  repeats, keep the first k. Relative k ``x10``: k = max(1, floor(10 |G| + 0.5)).
* A selection is mapped through the matching; triplets with an unmatched end are dropped and the
  rest compared with G as a set of (s_gt, o_gt, p).
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
* An evaluated image without a prediction record counts with zero hits; records for images that
  are not evaluated are ignored and counted as ``extra_predictions``.

Glossary of dimensions: I images, G GT instances, P predicted instances, R relations (triplets),
K cut-offs, C predicate classes, W 64-bit words of a packed mask.
"""

__version__ = "0.1.0"

import codecs
import collections
import collections.abc
import dataclasses
import io
import itertools
import json
import logging
import math
import multiprocessing
import os
import struct
import sys
import threading
import zipfile
import zlib
from pathlib import Path, PurePosixPath

import click
import imagecodecs
import numba
import numpy as np
import tifffile
import yaml
from PIL import Image

log = logging.getLogger("sgeval")

# Compiled kernels are cached beside this file; set SGEVAL_NO_JIT_CACHE=1 where that cannot work.
_JIT_CACHE = not os.environ.get("SGEVAL_NO_JIT_CACHE")

METRIC_FAMILIES = ("R", "mR", "ngR", "mNgR", "PR", "InstR", "Rinf", "PRank", "zR", "ngzR", "IMR", "wIMR")
PROTOCOLS = ("unique", "singlempo", "multimpo")
MERGE_IOU = 0.5  # SingleMPO: instances with IoU >= this are one node


class SGEvalError(ValueError):
    """Bad input. ``problems`` holds one line per problem (file, image id, field)."""

    def __init__(self, problems):
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


# ---------------------------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Config:
    """Everything one evaluation depends on. YAML keys and CLI options use these names."""

    gt: str = ""  # OpenPSG psg.json
    gt_seg: str | None = None  # panoptic PNG root; None = box mode
    pred: str = ""  # predictions: .json, .zip or directory
    train_gt: str | None = None  # training annotations (default: gt's non-test images)
    zeroshot_triplets: str | None = None  # JSON/CSV rows [subject cat, object cat, predicate]
    protocol: str = "unique"  # unique | singlempo | multimpo: the headline protocol
    protocols: tuple = ()  # more protocols evaluated side by side in the same run
    k: tuple = ("20", "50", "100", "x1", "x10")  # absolute or relative ("x10") cut-offs
    imr_k: tuple = ("10", "20", "50")  # cut-offs per predicate for IMR / wIMR
    metrics: tuple = METRIC_FAMILIES  # metric families to report
    iou_threshold: float = 0.5  # a match needs IoU >= this
    wimr_tau: float = 0.5  # wIMR weight softness (0 = IMR)
    absent_predicates: str = "skip"  # skip | zero: predicates absent from the GT in m-type means
    aggregation: str = "per_image"  # per_image | pooled
    per_predicate: bool = False  # print the per-predicate table
    audit: bool = True  # protocol audit (decodes every mask; off: unique / multimpo skip masks
    #                     whose category is absent from the image's GT)
    workers: int = 1  # processes decoding and matching images
    output: str | None = None  # JSON results file
    convert: dict | None = None  # raw model output to convert first (convert/ and `make eval`)


_CHOICES = {"protocol": PROTOCOLS, "absent_predicates": ("skip", "zero"),
            "aggregation": ("per_image", "pooled")}


def _parse_k(value):
    """'20' -> 20 (absolute), 'x10' -> 10.0 (relative); raises ValueError."""
    text = str(value).strip()
    if text.startswith("x"):
        factor = float(text[1:])
        if not (math.isfinite(factor) and factor > 0):
            raise ValueError(text)
        return factor
    number = int(text)
    if number < 1:
        raise ValueError(text)
    return number


def _as_list(value):
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _k_labels(key, value, relative, source, problems):
    labels = []
    for item in _as_list(value):
        try:
            k = _parse_k(item)
            if isinstance(k, float) and not relative:
                raise ValueError(item)
            labels.append(f"x{k:g}" if isinstance(k, float) else str(k))
        except ValueError:
            kind = "a positive integer" + (" or x<factor>" if relative else "")
            problems.append(f"{source}: {key} value '{item}' is not {kind}")
    if not _as_list(value):
        problems.append(f"{source}: '{key}' needs at least one value")
    return tuple(dict.fromkeys(labels))


def _number(key, value, low, high, source, problems, open_low=False):
    if isinstance(value, (int, float)) and not isinstance(value, bool) and (
            low < value if open_low else low <= value) and value <= high:
        return float(value)
    problems.append(f"{source}: {key} must be a number in {'(' if open_low else '['}{low:g}, {high:g}]")
    return 0.0


def make_config(values, source="config"):
    """Build a validated Config from a mapping; all problems are reported together."""
    fields = {f.name: f for f in dataclasses.fields(Config)}
    problems = [f"{source}: unknown key '{key}'; valid keys: {', '.join(fields)}"
                for key in values if key not in fields]
    if problems:
        raise SGEvalError(problems)
    merged = {**{n: f.default for n, f in fields.items()}, **values}
    problems += [f"{source}: '{key}' is required" for key in ("gt", "pred") if not merged[key]]
    lists = {key: tuple(str(v) for v in _as_list(merged[key])) for key in ("metrics", "protocols")}
    for key, allowed in (("metrics", METRIC_FAMILIES), ("protocols", PROTOCOLS)):
        problems += [f"{source}: unknown {key[:-1]} '{name}'; valid: {', '.join(allowed)}"
                     for name in lists[key] if name not in allowed]
    problems += [f"{source}: {key} '{merged[key]}' is not one of {', '.join(allowed)}"
                 for key, allowed in _CHOICES.items() if merged[key] not in allowed]
    workers = merged["workers"]
    if isinstance(workers, str) and workers.strip().isdigit():
        workers = int(workers)
    if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
        problems.append(f"{source}: workers must be a positive integer")
    problems += [f"{source}: {key} must be true or false" for key in ("per_predicate", "audit")
                 if not isinstance(merged[key], bool)]
    if merged["convert"] is not None and not isinstance(merged["convert"], dict):
        problems.append(f"{source}: convert must be a mapping (family, raw, ...) or empty")
    text_or_none = lambda v: None if v in (None, "") else str(v)  # noqa: E731
    config = dict(
        {key: text_or_none(merged[key]) for key in ("gt_seg", "train_gt", "zeroshot_triplets", "output")},
        gt=str(merged["gt"]), pred=str(merged["pred"]), protocol=merged["protocol"],
        protocols=tuple(dict.fromkeys(lists["protocols"])), metrics=tuple(dict.fromkeys(lists["metrics"])),
        k=_k_labels("k", merged["k"], True, source, problems),
        imr_k=_k_labels("imr_k", merged["imr_k"], False, source, problems),
        iou_threshold=_number("iou_threshold", merged["iou_threshold"], 0.0, 1.0, source, problems, open_low=True),
        wimr_tau=_number("wimr_tau", merged["wimr_tau"], 0.0, 1.0, source, problems),
        absent_predicates=merged["absent_predicates"], aggregation=merged["aggregation"],
        per_predicate=merged["per_predicate"], audit=merged["audit"], workers=workers, convert=merged["convert"])
    if problems:
        raise SGEvalError(problems)
    return Config(**config)


def load_config(path=None, **overrides):
    """Config from a YAML file (optional) with keyword overrides; None overrides are ignored."""
    values = {}
    if path is not None:
        try:
            values = yaml.safe_load(Path(path).read_text()) or {}
        except (OSError, yaml.YAMLError) as error:
            text = " ".join(str(error).split())
            raise SGEvalError([f"{path}: cannot read YAML config: {text}"]) from None
        if not isinstance(values, dict):
            raise SGEvalError([f"{path}: the config must be a mapping of keys to values"])
    values.update({key: value for key, value in overrides.items() if value is not None})
    return make_config(values, source=str(path) if path else "config")


# ---------------------------------------------------------------------------------------------
# Readers, validation and the writer
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass
class GTImage:
    """One evaluated GT image. relations: (R, 3) int64 [s, o, p], duplicates removed."""

    image_id: str
    height: int
    width: int
    seg_path: str | None  # panoptic PNG (mask mode)
    segment_ids: np.ndarray  # (G,) int64
    categories: np.ndarray  # (G,) int64
    boxes: np.ndarray  # (G, 4) float64
    relations: np.ndarray  # (R, 3) int64
    zeroshot: np.ndarray | None = None  # (R,) bool: triplet type unseen in training (set by evaluate)


@dataclasses.dataclass
class GroundTruth:
    object_classes: list
    predicate_classes: list
    images: list  # [GTImage] in psg.json order
    skipped_no_relations: int
    training: tuple  # training_statistics() of the data entries outside test_image_ids


@dataclasses.dataclass
class PredImage:
    """One prediction record. triplets / ng_triplets: (N, 3) int64 [s, o, p]."""

    image_id: str
    categories: np.ndarray  # (P,) int64
    boxes: np.ndarray | None  # (P, 4) float64
    scores: np.ndarray | None  # (P,) float64, None unless every instance has a score
    triplets: np.ndarray
    ng_triplets: np.ndarray
    seg_filename: str | None


def _int_rows(value, width, name, where, problems):
    """A JSON list of integer rows -> (N, width) int64, or None with a problem recorded."""
    if value is None:
        value = []
    try:
        array = np.asarray(value)
    except ValueError:
        problems.append(f"{where}: field '{name}' must be a list of [{width} integers] rows")
        return None
    if array.size == 0:
        return np.zeros((0, width), np.int64)
    if array.ndim != 2 or array.shape[1] != width or array.dtype.kind not in "iu":
        problems.append(f"{where}: field '{name}' must be a list of [{width} integers] rows")
        return None
    return array.astype(np.int64)


def _check_indices(rows, name, limits, labels, where, problems):
    """Report the first row of every column that falls outside [0, limit)."""
    if rows.size == 0 or (rows.min() >= 0 and (rows.max(axis=0) < limits).all()):
        return  # all in range (the usual case): one pass instead of one per column
    for column, (limit, label) in enumerate(zip(limits, labels)):
        bad = np.flatnonzero((rows[:, column] < 0) | (rows[:, column] >= limit))
        if bad.size:
            row = int(bad[0])
            more = f" (and {bad.size - 1} more)" if bad.size > 1 else ""
            problems.append(f"{where}: {name} {row} {rows[row].tolist()} is out of range: it refers to "
                            f"{label} {int(rows[row, column])}, but only {limit} {label}s exist{more}")


class _Entry(collections.namedtuple("_Entry", "image_id height width pan_seg_file_name segment_ids categories "
                                             "boxes relations")):
    """A well-formed psg.json data entry held as arrays (relations (R, 3) int64, duplicates kept);
    entries that are not well-formed stay dicts, and the readers below check them field by field."""


def _types(values):
    return set(map(type, values))


def _compact_entry(entry):
    """A psg.json data entry -> _Entry when every field the readers use has its exact JSON type
    (the conversions are those of the field-by-field checks), else the entry unchanged."""
    if type(entry) is not dict or "image_id" not in entry:
        return entry
    height, width, name = entry.get("height"), entry.get("width"), entry.get("pan_seg_file_name")
    segments, annotations, relations = entry.get("segments_info"), entry.get("annotations"), entry.get("relations")
    if not (type(height) is int and type(width) is int and height >= 1 and width >= 1
            and (name is None or type(name) is str) and _types([segments, annotations, relations]) == {list}
            and _types(segments) <= {dict} and _types(annotations) <= {dict} and _types(relations) <= {list}
            and set(map(len, relations)) <= {3} and _types(itertools.chain.from_iterable(relations)) <= {int}):
        return entry
    ids, categories = [s.get("id") for s in segments], [s.get("category_id") for s in segments]
    boxes = [a.get("bbox") for a in annotations]
    if not (_types(ids) <= {int} and _types(categories) <= {int} and _types(boxes) <= {list}
            and min(map(len, boxes), default=4) >= 4):
        return entry
    try:
        return _Entry(str(entry["image_id"]), height, width, name, np.array(ids, np.int64),
                      np.array(categories, np.int64), np.array([b[:4] for b in boxes], np.float64).reshape(-1, 4),
                      np.array(relations, np.int64).reshape(-1, 3))
    except (OverflowError, TypeError, ValueError):  # beyond int64, or a box value that is no number
        return entry


def _gt_entry(entry, where, problems):
    """The field-by-field checks of a test entry that is not an _Entry -> _Entry or None."""
    bad_fields = [f"field '{key}' must be a positive integer" for key in ("height", "width")
                  if not isinstance(entry.get(key), int) or isinstance(entry.get(key), bool) or entry[key] < 1]
    bad_fields += [f"field '{key}' must be a list" for key in ("segments_info", "annotations", "relations")
                   if not isinstance(entry.get(key), list)]
    if bad_fields:
        problems += [f"{where}: {text}" for text in bad_fields]
        return None
    relations = _int_rows(entry["relations"], 3, "relations", where, problems)
    if relations is None:
        return None
    segments, annotations = entry["segments_info"], entry["annotations"]
    try:
        segment_ids = np.array([int(s["id"]) for s in segments], np.int64)
        categories = np.array([int(s["category_id"]) for s in segments], np.int64)
        boxes = np.array([a["bbox"][:4] for a in annotations], np.float64).reshape(-1, 4)
    except (KeyError, TypeError, ValueError, IndexError, OverflowError) as error:
        problems.append(f"{where}: malformed segments_info/annotations: {error}")
        return None
    name = entry.get("pan_seg_file_name")
    return _Entry(str(entry["image_id"]), entry["height"], entry["width"], name, segment_ids, categories, boxes,
                  relations)


def _entry_id(entry):
    """The image id of a data entry as a string; None without one."""
    if isinstance(entry, _Entry):
        return entry.image_id
    return str(entry["image_id"]) if isinstance(entry, dict) and "image_id" in entry else None


def read_gt(gt_path, seg_root=None):
    """Read psg.json; every structural problem is collected into one SGEvalError. The file is
    read entry by entry (see _load_annotations), so memory holds arrays, not the parsed JSON."""
    data = _load_annotations(gt_path, ("data", "thing_classes", "stuff_classes", "predicate_classes",
                                       "test_image_ids"))
    objects = list(data["thing_classes"]) + list(data["stuff_classes"])
    predicates = list(data["predicate_classes"])
    test_ids = {str(i) for i in data["test_image_ids"]}
    problems, images, skipped, seen, listed, train = [], [], 0, set(), set(), []
    for index, entry in enumerate(data["data"]):
        image_id = _entry_id(entry)
        if image_id is None:
            problems.append(f"{gt_path}: data[{index}]: missing field 'image_id'")
            continue
        where = f"{gt_path}: image {image_id}"
        listed.add(image_id)
        if image_id not in test_ids:
            train.append(entry)
            continue
        if image_id in seen:
            problems.append(f"{where}: duplicate image_id")
            continue
        seen.add(image_id)
        entry = entry if isinstance(entry, _Entry) else _gt_entry(entry, where, problems)
        if entry is None:
            continue
        relations, categories, boxes = entry.relations, entry.categories, entry.boxes
        if len(relations) == 0:
            skipped += 1
            continue
        if len(boxes) != len(categories):
            problems.append(f"{where}: annotations has {len(boxes)} entries, segments_info {len(categories)}")
            continue
        if seg_root is None and not np.isfinite(boxes).all():
            problems.append(f"{where}: annotations bbox holds NaN or inf")
        _check_indices(categories[:, None], "segment", [len(objects)], ["category"], where, problems)
        _check_indices(relations, "relation", [len(categories)] * 2 + [len(predicates)],
                       ["segment", "segment", "predicate"], where, problems)
        # duplicate relations dropped (keys in range unless a problem was just reported)
        first = _first_occurrences((relations[:, 0] * len(categories) + relations[:, 1]) * len(predicates)
                                   + relations[:, 2])
        seg_path = None
        if seg_root is not None:
            if not isinstance(entry.pan_seg_file_name, str):
                problems.append(f"{where}: missing field 'pan_seg_file_name' (needed in mask mode)")
                continue
            seg_path = os.path.join(seg_root, entry.pan_seg_file_name)
            if not os.path.isfile(seg_path):
                problems.append(f"{seg_path}: image {image_id}: panoptic PNG not found "
                                f"(field 'pan_seg_file_name' under {seg_root})")
        images.append(GTImage(image_id, entry.height, entry.width, seg_path, entry.segment_ids, categories, boxes,
                              relations[first]))
    problems += [f"{gt_path}: test_image_ids lists image {image_id}, which has no entry in 'data'"
                 for image_id in sorted(test_ids - listed)]
    training = training_statistics(train, len(objects), len(predicates), gt_path, problems)
    if problems:
        raise SGEvalError(problems)
    return GroundTruth(objects, predicates, images, skipped, training)


def _load_annotations(path, keys, what="JSON"):
    """A psg.json-like file whose given top-level fields are lists. The file is decoded one
    value at a time and every 'data' entry is compacted as soon as it is read (_compact_entry):
    the parsed JSON of a large psg.json would take about 17 KB per entry."""
    try:
        with open(path, "rb") as handle:
            stream = _JSONStream(handle)
            if stream.peek() != "{":  # not an object: the checks below word it
                handle.seek(0)
                data = json.load(handle)
            else:
                data = {}
                for key, value in stream.members():
                    if isinstance(value, collections.abc.Iterator):
                        value = [_compact_entry(item) for item in value] if key == "data" else list(value)
                    data[key] = value
    except (OSError, ValueError) as error:
        raise SGEvalError([f"{path}: cannot read {what}: {error}"]) from None
    missing = [key for key in keys if not isinstance(data, dict) or key not in data]
    if missing:
        raise SGEvalError([f"{path}: missing top-level field '{key}'" for key in missing])
    not_lists = [key for key in keys if not isinstance(data[key], list)]
    if not_lists:
        raise SGEvalError([f"{path}: top-level field '{key}' must be a list" for key in not_lists])
    return data


def training_statistics(entries, n_objects, n_predicates, path, problems):
    """Training split statistics: (set of (subject cat, object cat, predicate) triplet types,
    (C,) number of distinct (subject cat, object cat) pairs per predicate). entries: dicts or
    _Entry."""
    types = set()
    for index, entry in enumerate(entries):
        if isinstance(entry, _Entry):
            where, categories, relations = f"{path}: image {entry.image_id}", entry.categories, entry.relations
        elif not isinstance(entry, dict):
            problems.append(f"{path}: field 'data' must hold objects; data[{index}] is not one")
            continue
        else:
            where = f"{path}: image {entry.get('image_id', f'#{index}')}"
            segments = entry.get("segments_info")
            categories = [s.get("category_id") for s in segments if isinstance(s, dict)] \
                if isinstance(segments, list) else None
            if categories is None or len(categories) != len(segments) or not all(
                    isinstance(c, int) and not isinstance(c, bool) for c in categories):
                problems.append(f"{where}: field 'segments_info' must list objects with an integer 'category_id'")
                continue
            if not all(-1 << 63 <= c < 1 << 63 for c in categories):  # beyond int64
                bad = next(c for c in categories if not -1 << 63 <= c < 1 << 63)
                problems.append(f"{where}: segment category {bad} is out of range: only {n_objects} categories exist")
                continue
            relations = _int_rows(entry.get("relations"), 3, "relations", where, problems)
            if relations is None:
                continue
            categories = np.array(categories, np.int64)
        before = len(problems)
        _check_indices(categories[:, None], "segment", [n_objects], ["category"], where, problems)
        _check_indices(relations, "relation", [len(categories)] * 2 + [n_predicates],
                       ["segment", "segment", "predicate"], where, problems)
        rows = relations
        if len(problems) > before:  # the statistics go on with the rows in range (the run fails anyway)
            if len(categories) and (categories.min() < 0 or categories.max() >= n_objects):
                continue
            rows = relations[(relations >= 0).all(axis=1) & (relations[:, :2] < len(categories)).all(axis=1)
                             & (relations[:, 2] < n_predicates)]
        types.update(zip(categories[rows[:, 0]].tolist(), categories[rows[:, 1]].tolist(), rows[:, 2].tolist()))
    pairs = np.zeros(n_predicates, np.int64)
    for p, count in collections.Counter(p for _, _, p in types).items():
        pairs[p] = count
    return types, pairs


def read_training(path, n_objects, n_predicates):
    """training_statistics() of another annotation file (its entries outside its test_image_ids)."""
    data = _load_annotations(path, ("data",), "training annotations (JSON)")
    test_ids = {str(i) for i in data.get("test_image_ids") or []}
    entries = [e for e in data["data"] if not isinstance(e, (dict, _Entry)) or str(_entry_id(e)) not in test_ids]
    problems = []
    training = training_statistics(entries, n_objects, n_predicates, path, problems)
    if problems:
        raise SGEvalError(problems)
    return training


def read_zeroshot(path, n_objects, n_predicates):
    """Zero-shot triplet types from JSON ([[s_cat, o_cat, p], ...]) or CSV (3 integer columns,
    an optional header line)."""
    try:
        text = Path(path).read_text()
        if str(path).endswith(".json"):
            rows = [(f"row {i}", row) for i, row in enumerate(json.loads(text) or [None])]
        else:
            rows = [(f"line {i}", line.replace(";", ",").split(","))
                    for i, line in enumerate(text.splitlines(), 1) if line.strip()]
            if rows and not rows[0][1][0].strip().lstrip("-").isdigit():
                rows = rows[1:]  # a header line
    except (OSError, ValueError, TypeError) as error:
        raise SGEvalError([f"{path}: cannot read zero-shot triplets: {error}"]) from None
    problems, types = [], set()
    for where, row in rows:
        if isinstance(row, list) and row and isinstance(row[0], str):  # CSV cells
            row = [int(v) if v.strip().lstrip("-").isdigit() else v for v in (v.strip() for v in row)]
        if not (isinstance(row, list) and len(row) == 3
                and all(isinstance(v, int) and not isinstance(v, bool) for v in row)):
            problems.append(f"{path}: {where}: expected [subject category, object category, predicate] "
                            f"integers, got {row!r}")
            continue
        if not (0 <= row[0] < n_objects and 0 <= row[1] < n_objects and 0 <= row[2] < n_predicates):
            problems.append(f"{path}: {where}: {row} is outside the vocabulary")
        types.add(tuple(row))
    if not rows:
        problems.append(f"{path}: no zero-shot triplets found")
    if problems:
        raise SGEvalError(problems)
    return types


class PredSource:
    """Where prediction files live: a .json file, a .zip (read in memory) or a directory."""

    def __init__(self, path):
        self.path = str(path)
        self.kind = "zip" if zipfile.is_zipfile(self.path) else "dir" if os.path.isdir(self.path) else "json"
        self.folder = self.path if self.kind == "dir" else os.path.dirname(self.path)  # of the files
        self._zip = None

    def read(self, name):
        with self.open(name) as stream:
            return stream.read()

    def open(self, name):
        """A binary stream of one file."""
        if self.kind == "zip":
            if self._zip is None:
                self._zip = zipfile.ZipFile(self.path)
            return self._zip.open(name)
        return open(os.path.join(self.folder, name), "rb")

    def members(self):
        """Names available to read (zip members / files under the directory), or None."""
        if self.kind == "zip":
            with zipfile.ZipFile(self.path) as archive:
                return set(archive.namelist())
        return None

    def close(self):
        if self._zip is not None:
            self._zip.close()
            self._zip = None

    def __reduce__(self):  # to a pool worker: its own source, opened once per process
        return _worker_source, (self.path,)


_WORKER_SOURCES = {}


def _worker_source(path):
    if path not in _WORKER_SOURCES:
        _WORKER_SOURCES[path] = PredSource(path)
    return _WORKER_SOURCES[path]


def _unsafe_member(name):
    path = PurePosixPath(name.replace("\\", "/"))
    return path.is_absolute() or ".." in path.parts or ":" in name


def _instances(record, where, mode, n_objects, problems):
    """Categories (P,), boxes (P, 4) or None and scores (P,) or None (unless every instance has
    one) from any of the three instance-list spellings; (None, None, None) after a problem."""
    if "instances" in record or "annotation" in record:
        items = record.get("instances", record.get("annotation"))
        if not isinstance(items, list) or not _types(items) <= {dict}:
            problems.append(f"{where}: field 'instances' must be a list of objects")
            return None, None, None
        categories = [i.get("category") for i in items]
        boxes, scores = [i.get("bbox") for i in items], [i.get("score") for i in items]
    elif "categories" in record:
        categories, boxes = record["categories"], record.get("bboxes")
        if not isinstance(categories, list):
            problems.append(f"{where}: field 'categories' must be a list")
            return None, None, None
        if boxes is not None and (not isinstance(boxes, list) or len(boxes) != len(categories)):
            problems.append(f"{where}: field 'bboxes' must parallel 'categories'")
            return None, None, None
        boxes = boxes if boxes is not None else [None] * len(categories)
        scores = record.get("scores")
        if scores is not None and (not isinstance(scores, list) or len(scores) != len(categories)):
            problems.append(f"{where}: field 'scores' must parallel 'categories'")
            return None, None, None
        scores = scores if scores is not None else [None] * len(categories)
    else:
        problems.append(f"{where}: no instance list ('instances', 'annotation' or 'categories')")
        return None, None, None
    if not _types(categories) <= {int}:  # JSON integers (not bool)
        problems.append(f"{where}: field 'category' must be an integer for every instance")
        return None, None, None
    category_array = np.array(categories, np.int64)
    _check_indices(category_array[:, None], "instance", [n_objects], ["category"], where, problems)
    box_array = _box_array(boxes)
    if box_array is not None and np.isfinite(box_array).all() and (mode == "mask" or not (
            (box_array[:, 2] < box_array[:, 0]) | (box_array[:, 3] < box_array[:, 1])).any()):
        boxes = ()  # all valid: the per-box checks below (which word the problems) are not needed
    for index, box in enumerate(boxes):  # bbox: required in box mode, checked when given
        if box is None and mode == "mask":
            continue
        if box is None:
            problems.append(f"{where}: instance {index}: field 'bbox' is required in box mode")
        elif not (isinstance(box, list) and len(box) >= 4
                  and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in box[:4])):
            problems.append(f"{where}: instance {index}: field 'bbox' must be [x1, y1, x2, y2] numbers")
        elif not all(math.isfinite(v) for v in box[:4]):
            problems.append(f"{where}: instance {index}: field 'bbox' holds NaN or inf")
        elif mode == "box" and (box[2] < box[0] or box[3] < box[1]):
            problems.append(f"{where}: instance {index}: field 'bbox' has x2 < x1 or y2 < y1")
        else:
            continue
        return None, None, None
    bad = [] if set(map(type, scores)) <= {int, float} and np.isfinite(np.array(scores, float)).all() else [
        i for i, v in enumerate(scores) if v is not None and not (
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v))]
    if bad:
        problems.append(f"{where}: instance {bad[0]}: field 'score' must be a finite number")
        return None, None, None
    score_array = None if None in scores else np.array(scores, np.float64)
    return category_array, None if mode == "mask" else box_array, score_array


def _box_array(boxes):
    """(P, 4) float64 when every box is a list of at least four JSON numbers, else None."""
    if not _types(boxes) <= {list} or min(map(len, boxes), default=4) < 4:
        return None
    values = list(itertools.chain.from_iterable(box[:4] for box in boxes))
    return np.array(values, np.float64).reshape(-1, 4) if set(map(type, values)) <= {int, float} else None


@numba.njit(cache=_JIT_CACHE)
def int_rows(text_N, pos, width):
    """A JSON list of integer rows of the given width (``[[0, 1, 5], [2, 3, 7]]``) parsed from
    ASCII text (uint8) at pos (a '['): (values, number of values, position after the list); the
    rows are values[:number].reshape(-1, width). The position is -1 when the list holds anything
    else (a row of another length, a fraction or exponent, a leading zero, more than 18 digits,
    not JSON) and -2 when the text ends first: the caller's JSON decoder then reads it."""
    n, values, count = text_N.shape[0], np.empty(1024, np.int64), 0

    def blank(i):  # the position of the next character that is not a blank (n at the end)
        while i < n and (text_N[i] == 32 or text_N[i] == 9 or text_N[i] == 10 or text_N[i] == 13):
            i += 1
        return i

    i = blank(pos + 1)
    if i < n and text_N[i] == 93:  # ']': the list is empty
        return values, 0, i + 1
    while True:  # at a row's '['
        if i >= n:
            return values, 0, -2
        if text_N[i] != 91:
            return values, 0, -1
        i += 1
        for column in range(width):
            i = blank(i)
            sign, start = 1, i
            if i < n and text_N[i] == 45:  # '-'
                sign, i, start = -1, i + 1, i + 1
            value = 0
            while i < n and 48 <= text_N[i] <= 57 and i - start < 19:
                value, i = value * 10 + (np.int64(text_N[i]) - 48), i + 1
            digits = i - start
            if i >= n:
                return values, 0, -2
            if digits == 0 or digits > 18 or digits > 1 and text_N[start] == 48 or text_N[i] == 46 \
                    or text_N[i] == 69 or text_N[i] == 101:  # none, too long, leading zero, '.', 'E', 'e'
                return values, 0, -1
            if count == values.shape[0]:
                grown = np.empty(2 * count, np.int64)
                grown[:count] = values
                values = grown
            values[count], count = sign * value, count + 1
            i = blank(i)
            if i >= n:
                return values, 0, -2
            if text_N[i] != (44 if column < width - 1 else 93):  # ',' between values, ']' after the last
                return values, 0, -1
            i += 1
        i = blank(i)
        if i >= n:
            return values, 0, -2
        if text_N[i] == 93:  # ']' ends the list
            return values, count, i + 1
        if text_N[i] != 44:  # ',' between rows
            return values, 0, -1
        i = blank(i + 1)


class _JSONStream:
    """Incremental reader of one JSON document from a binary stream: values are decoded one at a
    time with the C decoder, so memory holds one value and a chunk of text, not the document.
    In objects that are items of a top-level list, the values of the ``rows`` keys are read by
    int_rows when they are lists of integer rows of that width ({key: width}): int64 arrays."""

    CHUNK = 1 << 20

    def __init__(self, stream, rows=None):
        self.stream, self.text, self.pos, self.offset, self.eof = stream, "", 0, 0, False
        self.utf8 = codecs.getincrementaldecoder("utf-8-sig")()
        self.decoder, self.rows, self.ascii = json.JSONDecoder(), rows or {}, None

    def _more(self):
        chunk = self.stream.read(self.CHUNK)
        self.eof = not chunk
        self.offset += self.pos
        self.text, self.pos = self.text[self.pos:] + self.utf8.decode(chunk, final=self.eof), 0
        self.ascii = None

    def _error(self, message, pos=None):
        pos = self.pos if pos is None else pos
        return ValueError(f"{message} at character {self.offset + pos}")

    def peek(self):
        """The next non-blank character ('' at the end)."""
        while True:
            while self.pos < len(self.text) and self.text[self.pos] in " \t\n\r":
                self.pos += 1
            if self.pos < len(self.text) or self.eof:
                return self.text[self.pos: self.pos + 1]
            self._more()

    def expect(self, characters, what):
        character = self.peek()
        if not character or character not in characters:
            raise self._error(f"expecting {what}")
        self.pos += 1
        return character

    def value(self):
        self.peek()
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

    def members(self):
        """(key, value) of the top-level object in order; the value of a key whose next character
        is '[' is an iterator over the list's items, which must be consumed before the next key."""
        self.expect("{", "'{'")
        if self.peek() == "}":
            self.pos += 1
            return
        while True:
            if self.peek() != '"':
                raise self._error("expecting a field name")
            key = self.value()
            self.expect(":", "':'")
            items = self._items() if self.peek() == "[" else None
            yield key, self.value() if items is None else items
            collections.deque(items or (), maxlen=0)  # the rest of a list the caller did not read
            if self.expect(",}", "',' or '}'") == "}":
                break
        if self.peek():
            raise self._error("extra data after the JSON document")

    def _items(self):
        self.expect("[", "'['")
        if self.peek() == "]":
            self.pos += 1
            return
        while True:
            yield self._object() if self.rows and self.peek() == "{" else self.value()
            if self.expect(",]", "',' or ']'") == "]":
                return

    def _object(self):
        """An object, its ``rows`` keys' lists of integer rows read as arrays."""
        self.expect("{", "'{'")
        result = {}
        if self.peek() == "}":
            self.pos += 1
            return result
        while True:
            if self.peek() != '"':
                raise self._error("expecting a field name")
            key = self.value()
            self.expect(":", "':'")
            result[key] = self._int_rows(self.rows[key]) if key in self.rows else self.value()
            if self.expect(",}", "',' or '}'") == "}":
                return result

    def _int_rows(self, width):
        while self.peek() == "[" and self.text.isascii():
            if self.ascii is None:
                self.ascii = np.frombuffer(self.text.encode("ascii"), np.uint8)
            values, count, end = int_rows(self.ascii, self.pos, width)
            if end >= 0:
                self.pos = end
                return values[:count].reshape(-1, width)
            if end == -1 or self.eof:
                break
            self._more()  # the list goes on in the next chunk
        return self.value()


def prediction_records(pred_path, n_objects, n_predicates, mode, problems):
    """Read a prediction: returns (PredSource, iterator of its valid PredImage records in file
    order). triplets.json is read incrementally, one image record in memory at a time; problems
    with records are appended to ``problems`` (the iterator goes on to find them all); an
    unreadable file or a wrong version raises SGEvalError."""
    if not os.path.exists(pred_path):
        raise SGEvalError([f"{pred_path}: no such file or directory"])
    source = PredSource(pred_path)
    if str(pred_path).endswith(".zip") and source.kind != "zip":
        raise SGEvalError([f"{pred_path}: not a readable ZIP archive"])
    name = "triplets.json" if source.kind != "json" else os.path.basename(pred_path)
    try:
        members = source.members()
    except (OSError, zipfile.BadZipFile) as error:
        raise SGEvalError([f"{pred_path}: not a readable ZIP archive: {error}"]) from None
    problems.extend(f"{pred_path}: ZIP member '{m}' has an absolute path or '..'"
                    for m in sorted(members or ()) if _unsafe_member(m))
    return source, _records(source, name, members, n_objects, n_predicates, mode, problems)


def _records(source, name, members, n_objects, n_predicates, mode, problems):
    pred_path, version, seen_images, seen = source.path, None, False, set()
    try:
        with source.open(name) as stream:
            for key, value in _JSONStream(stream, {"triplets": 3, "ng_triplets": 3}).members():
                if key == "version":
                    version = value
                    if version != 1:
                        break
                elif key == "images" and not seen_images and isinstance(value, collections.abc.Iterator):
                    seen_images = True
                    for index, record in enumerate(value):
                        pred = _record(record, index, pred_path, members, n_objects, n_predicates, mode, seen,
                                       problems)
                        if pred is not None:
                            yield pred
                elif key == "images":
                    raise SGEvalError([f"{pred_path}: field 'images' must be a list" if not seen_images
                                       else f"{pred_path}: field 'images' appears twice"])
    except SGEvalError:
        raise
    except (OSError, KeyError, ValueError, zipfile.BadZipFile) as error:
        raise SGEvalError([f"{pred_path}: cannot read {name}: {error}"]) from None
    if version != 1:
        raise SGEvalError([f"{pred_path}: field 'version' is {version!r}; this reader knows version 1"])
    if not seen_images:
        raise SGEvalError([f"{pred_path}: field 'images' must be a list"])


def _record(record, index, pred_path, members, n_objects, n_predicates, mode, seen, problems):
    """One image record checked -> PredImage, or None after appending its problems."""
    if not isinstance(record, dict) or not isinstance(record.get("id"), (int, str)) \
            or isinstance(record.get("id"), bool):
        problems.append(f"{pred_path}: images[{index}]: field 'id' must be an integer or string")
        return None
    image_id = str(record["id"])
    where = f"{pred_path}: image {image_id}"
    if image_id in seen:
        problems.append(f"{where}: duplicate image id")
        return None
    seen.add(image_id)
    categories, boxes, scores = _instances(record, where, mode, n_objects, problems)
    if "triplets" not in record:
        problems.append(f"{where}: missing field 'triplets' (an empty list is valid)")
        return None
    triplets = _int_rows(record["triplets"], 3, "triplets", where, problems)
    ng_triplets = triplets
    if record.get("ng_triplets") is not None:
        ng_triplets = _int_rows(record["ng_triplets"], 3, "ng_triplets", where, problems)
    if categories is None or triplets is None or ng_triplets is None:
        return None
    before = len(problems)
    checks = [("triplet", triplets)] + [("ng_triplet", ng_triplets)] * (ng_triplets is not triplets)
    for field, rows in checks:
        _check_indices(rows, field, [len(categories)] * 2 + [n_predicates],
                       ["instance", "instance", "predicate"], where, problems)
    seg_filename = record.get("seg_filename")
    if mode == "mask" and len(categories):
        if not isinstance(seg_filename, str) or not seg_filename:
            problems.append(f"{where}: field 'seg_filename' is required in mask mode")
        elif _unsafe_member(seg_filename):
            problems.append(f"{where}: seg_filename '{seg_filename}' has an absolute path or '..'")
        elif members is not None and seg_filename not in members:
            problems.append(f"{where}: seg_filename '{seg_filename}' is not in the ZIP")
    if len(problems) > before:
        return None
    return PredImage(image_id, categories, boxes, scores, triplets, ng_triplets,
                     seg_filename if isinstance(seg_filename, str) else None)


def read_predictions(pred_path, n_objects, n_predicates, mode):
    """Read a whole prediction; returns (PredSource, {image_id: PredImage}). (evaluate streams
    the records instead: see prediction_records.)"""
    problems = []
    source, records = prediction_records(pred_path, n_objects, n_predicates, mode, problems)
    images = {pred.image_id: pred for pred in records}
    if problems:
        raise SGEvalError(problems)
    return source, images


_BUFFERS = threading.local()


def _buffer(name, size, dtype=np.uint8, new=np.empty):
    """A work array of ``size`` elements (contents undefined), reused by this thread from image to
    image. Large per-image arrays allocated afresh come from new pages of the OS (glibc maps
    blocks above its threshold) and each first touch of a page faults: 1,800 faults per image of
    100 masks, a third of the run time. The array is valid until the next call with that name.
    new: how a new array is made (np.zeros where the contents must start zero)."""
    array = getattr(_BUFFERS, name, None)
    if array is None or array.size < size or array.dtype != dtype:
        array = new(size, dtype)
        setattr(_BUFFERS, name, array)
    return array[:size]


def pack_masks(masks_PHW):
    """Boolean (P, H, W) masks -> bit-packed (P, W) uint64 rows, zero padded (the kernels' input)."""
    masks_PHW = np.asarray(masks_PHW, bool)
    return _pad_words(np.packbits(masks_PHW.reshape(len(masks_PHW), -1 if len(masks_PHW) else 0), axis=1))


def _pad_words(packed_PB):
    """Packed bytes (P, B) -> (P, W) uint64, zero padded to whole words."""
    if packed_PB.shape[1] % 8 == 0 and packed_PB.flags.c_contiguous:
        return packed_PB.view(np.uint64)
    padded = np.zeros((len(packed_PB), -(-packed_PB.shape[1] // 8) * 8), np.uint8)
    padded[:, : packed_PB.shape[1]] = packed_PB
    return padded.view(np.uint64)


# Panoptic PNGs, fast path for 8-bit RGB(A): parse the chunks, inflate the zlib stream into a
# buffer of the known size, then undo the row filters and pack the segment masks in one pass.
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

# zlib streams (PNG IDAT, deflate TIFF strips) are inflated by zlib-ng, 3-20x faster here than
# imagecodecs' zlib and libdeflate builds; libdeflate is the fallback where zlib-ng is missing.
if imagecodecs.ZLIBNG.available:
    _inflate, _InflateError = imagecodecs.zlibng_decode, imagecodecs.ZlibngError
else:  # an imagecodecs build without zlib-ng
    _inflate, _InflateError = imagecodecs.deflate_decode, imagecodecs.DeflateError


def _png_layout(data):
    """(height, width, channels, idat_bytes) of an 8-bit RGB/RGBA non-interlaced PNG, else None.
    Raises ValueError for a PNG whose chunks run past the end of the data."""
    if data[:8] != _PNG_SIGNATURE or len(data) < 33 or data[12:16] != b"IHDR" or data[8:12] != b"\0\0\0\x0d":
        return None
    width, height, depth, colour, compression, filtering, interlace = struct.unpack_from(">IIBBBBB", data, 16)
    if (depth, colour, compression, filtering, interlace) not in ((8, 2, 0, 0, 0), (8, 6, 0, 0, 0)):
        return None
    if width == 0 or height == 0 or zlib.crc32(data[12:29]) != struct.unpack_from(">I", data, 29)[0]:
        return None  # invalid header: the fallback decoder reports it
    pos, idat = 33, []
    while pos < len(data):  # a file that ends cleanly after its IDAT chunks, without IEND, is accepted
        if pos + 12 > len(data):
            raise ValueError(f"truncated PNG: chunk header at byte {pos} runs past the end of the file")
        length, kind = struct.unpack_from(">I4s", data, pos)
        end = pos + 12 + length
        if end > len(data):
            raise ValueError(f"truncated PNG: {kind.decode('latin-1')!r} chunk at byte {pos} "
                             f"needs {length} bytes, the file has {len(data) - pos - 12}")
        if kind == b"IDAT":
            if zlib.crc32(data[pos + 4: end - 4]) != struct.unpack_from(">I", data, end - 4)[0]:
                return None  # CRC error: let the fallback decoder report it
            idat.append(data[pos + 8: end - 4])
        elif kind == b"IEND":
            break
        pos = end
    if not idat:
        raise ValueError("truncated PNG: no IDAT chunk")
    return height, width, 4 if colour == 6 else 3, b"".join(idat)


def _png_rows(idat, height, width, channels):
    """The filtered rows (flat uint8, height * (1 + width * channels)) of a PNG's zlib stream, or
    None when the stream is corrupt, truncated or too long (the fallback decoder decides those)."""
    size = height * (1 + width * channels)
    if size > 1100 * len(idat) + 1024:  # beyond deflate's 1032:1 limit: never allocate for a bogus header
        return None
    try:
        raw = _inflate(idat, out=_buffer("png_rows", size))
    except _InflateError:
        return None
    if len(raw) != size:
        raise ValueError(f"PNG image data is {len(raw)} bytes, expected {size} for {width}x{height}")
    return raw


@numba.njit(cache=_JIT_CACHE)
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


@numba.njit(cache=_JIT_CACHE)
def _png_predict(kind, a, b, c):
    """PNG filter predictor (1 Sub, 3 Average, 4 Paeth) of a byte from its left (a), upper (b) and
    upper left (c) neighbours."""
    if kind == 1:
        return a
    if kind == 3:
        return (a + b) >> 1
    if b == c:  # Paeth with pa = 0: the left neighbour (the common case in flat areas)
        return a
    pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
    if pa <= pb and pa <= pc:
        return a
    return b if pb <= pc else c


@numba.njit(cache=_JIT_CACHE)
def _equal64(x, y):
    """Whether the first 64 bytes of x and y are equal (a fixed length that the compiler
    vectorises; the row buffers are padded by 64 bytes)."""
    diff = np.uint8(0)
    for i in range(64):
        diff = np.uint8(diff | (x[i] ^ y[i]))
    return diff == 0


@numba.njit(cache=_JIT_CACHE)
def _png_unfilter_serial(kind, src, prev, row, start, stop, channels):
    """Undo a Sub, Average or Paeth filter on bytes [start, stop) of a row, left to right. The loop
    runs over views from 0, which numba compiles without negative index checks."""
    zero = np.int64(0)  # not the constant 0: _png_predict would be compiled for it
    for i in range(start, min(stop, channels)):  # no left neighbour: a = c = 0
        row[i] = src[i] + _png_predict(kind, zero, np.int64(prev[i]), zero)
    start = max(start, channels)
    left, up_left = row[start - channels: stop - channels], prev[start - channels: stop - channels]
    here, up, src = row[start:stop], prev[start:stop], src[start:stop]
    for i in range(stop - start):
        here[i] = src[i] + _png_predict(kind, np.int64(left[i]), np.int64(up[i]), np.int64(up_left[i]))


@numba.njit(cache=_JIT_CACHE)
def _png_unfilter_row(kind, src, prev, row, channels):
    """Undo the filter of one PNG row (src -> row, prev = the unfiltered row above); False for an
    invalid filter type."""
    n = src.shape[0]
    if kind == 0:
        for i in range(n):
            row[i] = src[i]
    elif kind == 2 or kind == 4:
        for i in range(n):
            row[i] = src[i] + prev[i]
        if kind == 4:
            # Paeth predicts the upper byte b wherever the left byte a equals the upper left c, so
            # the Up result stands for a 64-byte block whose bytes one pixel to the left equal the
            # row above (the usual case: areas that go on from the row above); redo the others.
            for start in range(channels, n, 64):
                if not _equal64(row[start - channels:], prev[start - channels:]):
                    _png_unfilter_serial(kind, src, prev, row, start, min(start + 64, n), channels)
    elif kind == 1 or kind == 3:
        _png_unfilter_serial(kind, src, prev, row, np.int64(0), n, channels)
    else:
        return False
    return True


@numba.njit(cache=_JIT_CACHE)
def unfilter_segments(raw, height, width, channels, segment_ids_G):
    """Packed bytes (G, B) of the panoptic segments of filtered PNG rows (flat uint8, each row a
    filter byte + width * channels bytes; id = R + 256 G + 65536 B), the same as pack_segments on
    the decoded image, and the first row with an invalid filter type (-1 if none)."""
    stride, block = width * channels, 64 // channels  # a row is scanned in blocks of <= 64 bytes
    packed = np.zeros((segment_ids_G.shape[0], (height * width + 7) // 8), np.uint8)
    prev = np.zeros(stride + 64, np.uint8)  # the row above the first row is zero
    row = np.zeros(stride + 64, np.uint8)
    last_id, last_segment, run_start = -1, -1, np.int64(0)  # current run of equal ids starts at pixel run_start
    for y in range(height):
        at = y * (stride + 1)
        if not _png_unfilter_row(raw[at], raw[at + 1: at + 1 + stride], prev, row, channels):
            return packed, y
        for x0 in range(0, width, block):
            if x0 > 0 and _equal64(row[(x0 - 1) * channels:], row[x0 * channels:]):
                continue  # the block repeats pixel x0 - 1 (a 64-byte compare): the run goes on
            for x in range(x0, min(x0 + block, width)):
                k = x * channels
                pixel_id = np.int64(row[k]) + 256 * np.int64(row[k + 1]) + 65536 * np.int64(row[k + 2])
                if pixel_id != last_id:  # a run ends: fill its bits, look the new id up
                    index = y * width + x
                    if last_segment >= 0:
                        _set_bits(packed[last_segment], run_start, index)
                    last_id, last_segment, run_start = pixel_id, -1, index
                    for g in range(segment_ids_G.shape[0]):
                        if segment_ids_G[g] == pixel_id:
                            last_segment = g
                            break
        prev, row = row, prev
    if last_segment >= 0:
        _set_bits(packed[last_segment], run_start, height * width)
    return packed, -1


def png_segments(data, segment_ids, shape=None):
    """Packed bytes (G, B) of the segments of a panoptic PNG, as pack_segments on the decoded image,
    or None when the PNG is not 8-bit RGB/RGBA non-interlaced, is not (height, width) = shape (if
    given), or needs the fallback decoder's word. Raises ValueError for a truncated PNG or a bad
    row filter."""
    layout = _png_layout(data)
    if layout is None or (shape is not None and tuple(shape) != layout[:2]):
        return None
    height, width, channels, idat = layout
    raw = _png_rows(idat, height, width, channels)
    if raw is None:
        return None
    packed, bad_row = unfilter_segments(raw, height, width, channels, np.ascontiguousarray(segment_ids, np.int64))
    if bad_row >= 0:
        raise ValueError(f"PNG row {bad_row} has invalid filter type {raw[bad_row * (1 + width * channels)]}")
    return packed


def load_gt_masks(image):
    """Bit-packed (G, W) masks of one GT image from its panoptic PNG."""
    where = f"{image.seg_path}: image {image.image_id}"
    try:
        with open(image.seg_path, "rb") as handle:
            data = handle.read()
        packed = png_segments(data, image.segment_ids, (image.height, image.width))
        if packed is not None:
            return _pad_words(packed)
        if data[:8] == _PNG_SIGNATURE and data[24:26] in (b"\x08\x02", b"\x08\x06"):
            mode, rgb = "RGB", imagecodecs.png_decode(data)[..., :3]  # 8-bit RGB(A): the fast decoder
        else:
            with Image.open(io.BytesIO(data)) as png:
                mode = png.mode
                rgb = np.asarray(png if mode == "RGB" else png.convert("RGB"))
    except (OSError, ValueError, imagecodecs.PngError) as error:
        raise SGEvalError([f"{where}: cannot read panoptic PNG: {error}"]) from None
    if mode not in ("RGB", "RGBA"):
        raise SGEvalError([f"{where}: panoptic PNG mode is {mode}, expected RGB"])
    if rgb.shape[:2] != (image.height, image.width):
        raise SGEvalError([f"{where}: panoptic PNG is {rgb.shape[1]}x{rgb.shape[0]}, "
                           f"field 'width'x'height' says {image.width}x{image.height}"])
    return _pad_words(pack_segments(np.ascontiguousarray(rgb), image.segment_ids))


# Baseline TIFF tags the direct strip reader reads (column k of tiff_layout's per-tag arrays).
_TIFF_TAGS = np.array([256, 257, 258, 259, 266, 273, 277, 278, 279, 317, 322, 339], np.int64)
(_WIDTH, _HEIGHT, _BITS, _COMPRESSION, _FILL_ORDER, _OFFSETS, _SAMPLES, _ROWS_PER_STRIP, _BYTE_COUNTS,
 _PREDICTOR, _TILES, _SAMPLE_FORMAT) = range(12)
_TIFF_ONES = np.array([_SAMPLES, _FILL_ORDER, _PREDICTOR, _SAMPLE_FORMAT])  # tags that must be absent or 1


@numba.njit(cache=_JIT_CACHE)
def _uint(buf, at, size, big):
    """Unsigned integer of ``size`` bytes at buf[at] in the file's byte order (bounds checked by
    the caller)."""
    value = np.int64(0)
    for i in range(size):
        value = (value << 8) | np.int64(buf[at + i if big else at + size - 1 - i])
    return value


@numba.njit(cache=_JIT_CACHE)
def tiff_layout(buf):
    """Strip layout of a classic TIFF (the whole file as (N,) uint8) for the direct strip reader.

    Returns (status, pages_P5, strips_S2, starts_P1). status 0: page rows (width, height, bits,
    compression, rows_per_strip); strip rows (offset, byte_count); page p's strips are
    strips[starts[p]:starts[p + 1]]. status 1: not a classic TIFF, or a page that is not 1 sample
    of 1 or 8 bits, uncompressed or deflate, without predictor, in strips (tifffile reads it).
    status 2: corrupt or truncated. Every index is checked before it is read."""
    n, two, four = buf.shape[0], np.int64(2), np.int64(4)  # run-time sizes: _uint is compiled once
    none5, none2, none1 = np.zeros((0, 5), np.int64), np.zeros((0, 2), np.int64), np.zeros(1, np.int64)
    if n < 2 or buf[0] != buf[1] or (buf[0] != 73 and buf[0] != 77):  # "II" or "MM"
        return 1, none5, none2, none1
    big = buf[0] == 77
    if n < 8:
        return 2, none5, none2, none1
    if _uint(buf, two, two, big) != 42:  # BigTIFF (43) or not a TIFF
        return 1, none5, none2, none1
    # per page: the five page values, then where the strip offsets (position, value size, count)
    # and byte counts (position, value size) are
    table = np.zeros((16, 10), np.int64)
    count_k, first_k = np.zeros(12, np.int64), np.zeros(12, np.int64)  # per tag: value count, first value
    pos_k, size_k = np.zeros(12, np.int64), np.zeros(12, np.int64)  # per tag: value position, value size
    n_pages, bad = 0, False  # bad: a page with missing or inconsistent tags
    ifd = _uint(buf, four, four, big)
    while ifd:
        if ifd + 2 > n:
            return 2, none5, none2, none1
        count_k[:] = -1
        end = ifd + 2 + 12 * _uint(buf, ifd, two, big)
        for entry in range(ifd + 2, end, 12):
            if entry + 12 > n:
                return 2, none5, none2, none1
            tag, k = _uint(buf, entry, two, big), 0
            while k < 12 and _TIFF_TAGS[k] != tag:
                k += 1
            if k == 12:
                continue  # a tag the reader ignores
            kind = _uint(buf, entry + 2, two, big)
            size = 1 if kind == 1 else 2 if kind == 3 else 4 if kind == 4 else 8 if kind == 16 else 0
            if size == 0:
                return 1, none5, none2, none1
            count = _uint(buf, entry + 4, four, big)
            pos = entry + 8 if count * size <= 4 else _uint(buf, entry + 8, four, big)
            if pos + count * size > n:
                return 2, none5, none2, none1
            count_k[k], pos_k[k], size_k[k] = count, pos, size
            first_k[k] = _uint(buf, pos, size, big) if count else -1
        if count_k[_TILES] >= 0:
            return 1, none5, none2, none1
        for k in _TIFF_ONES:
            if count_k[k] >= 0 and (count_k[k] != 1 or first_k[k] != 1):
                return 1, none5, none2, none1
        if count_k[_BITS] == 0 or count_k[_COMPRESSION] == 0:
            return 2, none5, none2, none1
        bits = first_k[_BITS] if count_k[_BITS] > 0 else 1
        compression = first_k[_COMPRESSION] if count_k[_COMPRESSION] > 0 else 1
        if ((bits != 1 and bits != 8) or (compression != 1 and compression != 8 and compression != 32946)
                or count_k[_OFFSETS] < 0):
            return 1, none5, none2, none1
        if 18 * (n_pages + 1) > n:  # more pages than directories fit in the file: a cycle
            return 2, none5, none2, none1
        height = first_k[_HEIGHT]
        rows = first_k[_ROWS_PER_STRIP] if count_k[_ROWS_PER_STRIP] >= 0 else height
        bad |= (count_k[_WIDTH] < 1 or count_k[_HEIGHT] < 1 or count_k[_ROWS_PER_STRIP] == 0 or rows < 1
                or count_k[_BYTE_COUNTS] != count_k[_OFFSETS])
        if n_pages == table.shape[0]:
            grown = np.zeros((2 * n_pages, 10), np.int64)
            for p in range(n_pages):  # a loop: array assignment would compile numba's shape-error text
                for c in range(10):
                    grown[p, c] = table[p, c]
            table = grown
        table[n_pages, 0], table[n_pages, 1], table[n_pages, 2], table[n_pages, 3] = first_k[_WIDTH], height, bits, compression
        table[n_pages, 4], table[n_pages, 5], table[n_pages, 6] = rows, pos_k[_OFFSETS], size_k[_OFFSETS]
        table[n_pages, 7], table[n_pages, 8], table[n_pages, 9] = count_k[_OFFSETS], pos_k[_BYTE_COUNTS], size_k[_BYTE_COUNTS]
        n_pages += 1
        if end + 4 > n:
            return 2, none5, none2, none1
        ifd = _uint(buf, end, four, big)
    if bad:  # reported only now: a later page that tifffile must read takes precedence
        return 2, none5, none2, none1
    starts = np.zeros(n_pages + 1, np.int64)
    for p in range(n_pages):
        starts[p + 1] = starts[p] + table[p, 7]
    if starts[n_pages] > n:  # more strips than offsets fit in the file
        return 2, none5, none2, none1
    strips = np.zeros((starts[n_pages], 2), np.int64)
    for p in range(n_pages):
        for i in range(table[p, 7]):
            offset = _uint(buf, table[p, 5] + i * table[p, 6], table[p, 6], big)
            count = _uint(buf, table[p, 8] + i * table[p, 9], table[p, 9], big)
            if offset < 0 or count < 0 or offset + count > n:
                return 2, none5, none2, none1
            strips[starts[p] + i, 0], strips[starts[p] + i, 1] = offset, count
    return 0, table[:n_pages, :5].copy(), strips, starts


# Deflate (RFC 1951) tables: length and distance bases and extra bits, code length code order.
_LENGTH_BASE = np.array([3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115,
                         131, 163, 195, 227, 258], np.int64)
_LENGTH_EXTRA = np.array([0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0],
                         np.int64)
_DIST_BASE = np.array([1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513, 769, 1025, 1537,
                       2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577], np.int64)
_DIST_EXTRA = np.array([0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12,
                        13, 13], np.int64)
_CODE_ORDER = np.array([16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15], np.int64)
# inflate_runs' int64 work array, by offset: the code length code's 19 lengths, a scratch row of
# 16, the code lengths of a dynamic block (320), then five codes (literal/length and distance of
# the block, the same fixed, the code length code), each _Z_CODE long: the number of codes of
# each length (16), the symbols in code order (288), a lookup table (1 << _Z_TABLE_BITS). The
# kernels pass offsets to their helpers as np.int64 values: a constant argument compiles the
# helper once more, for that constant.
_Z_TABLE_BITS = 9  # lookup tables: the next 9 bits -> symbol << 4 | code length (0: look further)
_Z_CODE = 16 + 288 + (1 << _Z_TABLE_BITS)
_Z_LENS, _Z_OFFS, _Z_WORK = 0, 32, 48
_Z_LIT, _Z_DIST, _Z_FLIT, _Z_FDIST, _Z_CLEN = (368 + k * _Z_CODE for k in range(5))
_Z_WORK_SIZE = 368 + 5 * _Z_CODE


@numba.njit(cache=_JIT_CACHE)
def _huffman(work, lens_at, n, code_at):
    """Canonical Huffman code of the n code lengths at work[lens_at:], stored at work[code_at:]
    (see _Z_CODE). Returns 1 for a complete code, 0 for an incomplete one, -1 for an
    over-subscribed one."""
    count_at, symbol_at, table_at = code_at, code_at + 16, code_at + 16 + 288
    for length in range(16):
        work[count_at + length] = 0
    for s in range(n):
        work[count_at + work[lens_at + s]] += 1
    left = 1
    for length in range(1, 16):
        left = 2 * left - work[count_at + length]
        if left < 0:
            return -1
    work[_Z_OFFS + 1] = 0
    for length in range(1, 15):
        work[_Z_OFFS + length + 1] = work[_Z_OFFS + length] + work[count_at + length]
    for s in range(n):
        length = work[lens_at + s]
        if length:
            work[symbol_at + work[_Z_OFFS + length]] = s
            work[_Z_OFFS + length] += 1
    # the lookup table: every code of up to _Z_TABLE_BITS bits, bit-reversed (the stream's order);
    # entries that no such code fills (longer codes or none) are 0
    filled = 0
    for length in range(1, _Z_TABLE_BITS + 1):
        filled += work[count_at + length] << (_Z_TABLE_BITS - length)
    for k in range(1 << _Z_TABLE_BITS if filled < 1 << _Z_TABLE_BITS else 0):
        work[table_at + k] = 0
    code = index = 0
    for length in range(1, _Z_TABLE_BITS + 1):
        for i in range(work[count_at + length]):
            reverse = 0
            for b in range(length):
                reverse |= ((code >> b) & 1) << (length - 1 - b)
            entry, at = work[symbol_at + index] << 4 | length, table_at + reverse
            for high in range(0, 1 << _Z_TABLE_BITS, 1 << length):
                work[at + high] = entry
            code += 1
            index += 1
        code <<= 1
    return 1 if left == 0 else 0


@numba.njit(cache=_JIT_CACHE)
def inflate_runs(buf, pos, end, size, out, base, run_start, run_value, work, box, width):
    """Decode the zlib stream buf[pos:end] of ``size`` bytes of an 8-bit mask as runs of equal
    bytes, setting bit base + i of out (zeroed by the caller; most significant bit first, as
    np.packbits) for each non-zero byte i. A mask is long runs, most of them zero, and a deflate
    match copies from a run: the decoder follows the runs (a few per row) where a plain inflate
    writes every byte and packing reads it again, and takes a repeated match code (a zero run is
    hundreds of copies of 258 bytes) in one step. box: (5,) int64, the mask_boxes row of the mask
    (width pixels wide) so far, to which the non-zero runs are added.

    Returns the number of runs (at least 1) when the stream is a complete, valid zlib stream of
    exactly ``size`` bytes (header, Huffman codes, distances and Adler-32 checked) and fits the
    run list (run_start, run_value); 0 for anything else, including valid streams this decoder
    declines (stored blocks, incomplete Huffman codes, a window beyond 32 KiB, trailing bytes):
    the caller then inflates the stream the usual way, which also reports what is wrong with it."""
    if end - pos < 6:
        return 0
    cmf, flg = np.int64(buf[pos]), np.int64(buf[pos + 1])
    if cmf & 15 != 8 or cmf >> 4 > 7 or (cmf * 256 + flg) % 31 or flg & 32:
        return 0
    pos += 2
    # The helpers are closures over the arrays: numba counts a reference to an array passed as an
    # argument (atomically) on every call of an inlined helper, which took a third of the time.

    def fill(pos, bitbuf, bitcnt):
        """Refill the bit buffer to at least 49 bits; past the end of the stream with zero bytes
        (pos then runs past end, which the decoder checks before it trusts what it read)."""
        while bitcnt <= 48:
            bitbuf |= (np.int64(buf[pos]) if pos < end else 0) << bitcnt
            pos += 1
            bitcnt += 8
        return pos, bitbuf, bitcnt

    def decode(bitbuf, code_at):
        """One symbol of the canonical Huffman code at work[code_at:] from the bit buffer (at
        least 15 bits): by the lookup table, else bit by bit. Returns (symbol or -1, code length)."""
        entry = work[code_at + 16 + 288 + (bitbuf & ((1 << _Z_TABLE_BITS) - 1))]
        if entry:
            return entry >> 4, entry & 15
        count_at, symbol_at = code_at, code_at + 16
        code = first = index = 0
        for length in range(1, 16):
            code |= (bitbuf >> (length - 1)) & 1
            count = work[count_at + length]
            if code - count < first:
                return work[symbol_at + index + code - first], length
            index += count
            first = (first + count) << 1
            code <<= 1
        return -1, 0

    def emit(value, length, at, n_runs):
        """Append ``length`` bytes of ``value`` at output position ``at`` to the run list; when the
        value is not zero, set their bits in out and add them to box. Returns the new run count, -1
        when the run list is full."""
        if n_runs == 0 or run_value[n_runs - 1] != value:
            if n_runs == run_start.shape[0]:
                return -1
            run_start[n_runs], run_value[n_runs] = at, value
            n_runs += 1
        i, stop = base + at, base + at + length
        if value:
            first_row, last_row = i // width, (stop - 1) // width
            box[0] += length
            box[1], box[2] = min(box[1], first_row), max(box[2], last_row)
            if first_row == last_row:
                box[3], box[4] = min(box[3], i - first_row * width), max(box[4], stop - 1 - first_row * width)
            else:  # the run wraps around a row end: every column
                box[3], box[4] = 0, width - 1
            _set_bits(out, i, stop)
        return n_runs

    def block_codes(pos, bitbuf, bitcnt):
        """The Huffman codes of a dynamic block, read after its 3 header bits: the literal/length
        and distance codes, stored at _Z_LIT and _Z_DIST. Returns (False for an invalid or
        incomplete code, pos, bitbuf, bitcnt)."""
        lens, lengths, clen = np.int64(_Z_LENS), np.int64(_Z_WORK), np.int64(_Z_CLEN)  # see _Z_CODE
        pos, bitbuf, bitcnt = fill(pos, bitbuf, bitcnt)
        n_lit, n_dist, n_code = (bitbuf & 31) + 257, ((bitbuf >> 5) & 31) + 1, ((bitbuf >> 10) & 15) + 4
        bitbuf, bitcnt = bitbuf >> 14, bitcnt - 14
        if n_lit > 286 or n_dist > 30:
            return False, pos, bitbuf, bitcnt
        for k in range(19):
            work[_Z_LENS + k] = 0
        for k in range(n_code):
            pos, bitbuf, bitcnt = fill(pos, bitbuf, bitcnt)
            work[_Z_LENS + _CODE_ORDER[k]] = bitbuf & 7
            bitbuf, bitcnt = bitbuf >> 3, bitcnt - 3
        if _huffman(work, lens, np.int64(19), clen) != 1:
            return False, pos, bitbuf, bitcnt
        k = 0
        while k < n_lit + n_dist:  # the code lengths, coded by the code length code
            pos, bitbuf, bitcnt = fill(pos, bitbuf, bitcnt)
            symbol, used = decode(bitbuf, clen)
            if symbol < 0 or (symbol == 16 and k == 0):
                return False, pos, bitbuf, bitcnt
            bitbuf, bitcnt = bitbuf >> used, bitcnt - used
            repeat, value = 1, symbol  # 16: 3-6 times the previous length; 17, 18: 3-10, 11-138 zeros
            if symbol >= 16:
                bits = 2 if symbol == 16 else 3 if symbol == 17 else 7
                repeat = (bitbuf & ((1 << bits) - 1)) + (11 if symbol == 18 else 3)
                bitbuf, bitcnt = bitbuf >> bits, bitcnt - bits
                value = work[_Z_WORK + k - 1] if symbol == 16 else 0
            if k + repeat > n_lit + n_dist:
                return False, pos, bitbuf, bitcnt
            for r in range(repeat):
                work[_Z_WORK + k + r] = value
            k += repeat
        ok = (work[_Z_WORK + 256] != 0  # an end-of-block code
              and _huffman(work, lengths, n_lit, np.int64(_Z_LIT)) == 1
              and _huffman(work, lengths + n_lit, n_dist, np.int64(_Z_DIST)) == 1)
        return ok, pos, bitbuf, bitcnt

    # the offsets of the codes in work, as run-time values (see _Z_CODE)
    block_lit, block_dist, fixed_lit, fixed_dist = np.int64(_Z_LIT), np.int64(_Z_DIST), np.int64(_Z_FLIT), np.int64(_Z_FDIST)
    bitbuf = bitcnt = np.int64(0)
    at = n_runs = cursor = 0
    adler_a, adler_b = 1, 0
    last = 0
    while not last:
        pos, bitbuf, bitcnt = fill(pos, bitbuf, bitcnt)
        if pos - (bitcnt >> 3) > end:  # read past the stream's end
            return 0
        last, kind = bitbuf & 1, (bitbuf >> 1) & 3
        bitbuf, bitcnt = bitbuf >> 3, bitcnt - 3
        if kind == 0:  # a stored block (incompressible data, level 0): left to zlib-ng
            return 0
        if kind == 1:
            lit, dist = fixed_lit, fixed_dist
        elif kind == 2:
            lit, dist = block_lit, block_dist
            ok, pos, bitbuf, bitcnt = block_codes(pos, bitbuf, bitcnt)
            if not ok:
                return 0
        else:
            return 0
        while True:
            if bitcnt < 48:
                pos, bitbuf, bitcnt = fill(pos, bitbuf, bitcnt)
                if pos > end + 64:  # far past the end: the checks below would fail anyway
                    return 0
            start_bits, start_count = bitbuf, bitcnt
            symbol, used = decode(bitbuf, lit)
            if symbol < 0:
                return 0
            bitbuf, bitcnt = bitbuf >> used, bitcnt - used
            if symbol < 256:
                if at >= size:
                    return 0
                n_runs = emit(symbol, 1, at, n_runs)
                if n_runs < 0:
                    return 0
                adler_a = (adler_a + symbol) % 65521
                adler_b = (adler_b + adler_a) % 65521
                at += 1
                continue
            if symbol == 256:
                break
            symbol -= 257
            if symbol >= 29:
                return 0
            extra = _LENGTH_EXTRA[symbol]  # at most 5 + 15 + 13 bits follow: the buffer holds them
            length = _LENGTH_BASE[symbol] + (bitbuf & ((1 << extra) - 1))
            bitbuf, bitcnt = bitbuf >> extra, bitcnt - extra
            symbol, used = decode(bitbuf, dist)
            if symbol < 0 or symbol >= 30:
                return 0
            bitbuf, bitcnt = bitbuf >> used, bitcnt - used
            extra = _DIST_EXTRA[symbol]
            distance = _DIST_BASE[symbol] + (bitbuf & ((1 << extra) - 1))
            bitbuf, bitcnt = bitbuf >> extra, bitcnt - extra
            if distance > at or distance > 32768 or at + length > size:
                return 0
            # the same code (length, distance and their extra bits) repeated k times is one match
            # of k lengths at that distance: a run of 100 kB is some 400 such matches, a
            # rectangle's rows some 400 matches of the row above
            used = start_count - bitcnt
            code, mask = start_bits & ((1 << used) - 1), (1 << used) - 1
            total = length
            if bitcnt < 48:
                pos, bitbuf, bitcnt = fill(pos, bitbuf, bitcnt)
            many = 48 // used if bitbuf & mask == code else 0  # repeats compared at once (none: no repeat)
            codes, many_mask = code, mask
            for r in range(1, many):
                codes, many_mask = codes | code << (r * used), many_mask | mask << (r * used)
            while many:
                if bitcnt < 48:
                    pos, bitbuf, bitcnt = fill(pos, bitbuf, bitcnt)
                if bitbuf & many_mask == codes and at + total + many * length <= size:
                    bitbuf, bitcnt = bitbuf >> (many * used), bitcnt - many * used
                    total += many * length
                elif bitbuf & mask == code and at + total + length <= size:
                    bitbuf, bitcnt = bitbuf >> used, bitcnt - used
                    total += length
                else:
                    break
            length, source = total, at - distance
            if source >= run_start[n_runs - 1]:  # within the last run: the run grows by length
                value = run_value[n_runs - 1]
                n_runs = emit(value, length, at, n_runs)
                adler_b = (adler_b + length % 65521 * adler_a + value * ((length * (length + 1) >> 1) % 65521)) % 65521
                adler_a = (adler_a + value * length) % 65521
                at += length
                continue
            # the run holding the source: the last one starting at or before it, looked for
            # from the previous match's (copies mostly move forward through the rows above)
            if run_start[cursor] > source:
                lo, hi = 0, cursor - 1
                while lo < hi:
                    mid = (lo + hi + 1) >> 1
                    if run_start[mid] <= source:
                        lo = mid
                    else:
                        hi = mid - 1
                cursor = lo
            while run_start[cursor + 1] <= source:  # stops before the last run (source is not in it)
                cursor += 1
            j = cursor
            while length > 0:
                # the source's run ends at the next run's start; the last run grows with the copy
                piece = length if j == n_runs - 1 else min(length, run_start[j + 1] - source)
                value = run_value[j]
                n_runs = emit(value, piece, at, n_runs)
                if n_runs < 0:
                    return 0
                adler_b = (adler_b + piece % 65521 * adler_a + value * ((piece * (piece + 1) >> 1) % 65521)) % 65521
                adler_a = (adler_a + value * piece) % 65521
                at += piece
                source += piece
                length -= piece
                j += 1
            cursor = min(j - 1, n_runs - 1)
    pos -= bitcnt >> 3  # the Adler-32 trailer starts at the next byte boundary
    if at != size or pos + 4 != end:
        return 0
    check = (np.int64(buf[pos]) << 24) | (np.int64(buf[pos + 1]) << 16) | (np.int64(buf[pos + 2]) << 8) | np.int64(buf[pos + 3])
    return n_runs if check == (adler_b << 16 | adler_a) else 0


_EMPTY_BOX = np.array([0, 1 << 62, -1, 1 << 62, -1], np.int64)  # the mask_boxes row of an empty mask


@numba.njit(cache=_JIT_CACHE)
def inflate_pages(buf, pages_P5, strips_S2, starts_P1, use_P, layers_PB, boxes_P5, run_start, run_value, work, zeros):
    """Decode deflate TIFF pages (tiff_layout's tables of the file buf) straight into packed
    masks, layers_PB (a row of bytes per page, zeroed here), by inflate_runs, and their boxes_P5
    (as mask_boxes, but the columns exact). Returns (P,) bool: True for the pages done here. The
    others are left zero, with the boxes of empty masks, for the caller: pages not in use_P,
    pages not 8-bit deflate, too few strips, and streams inflate_runs declines. (1-bit pages are
    inflated by zlib-ng straight into their rows: faster, as they are 8 times smaller.)

    zeros: (K, 1 + 1 + B) int64, kept from call to call (zero at first): the last K streams of
    at most B bytes that inflate_runs found to be all zero bytes, as (stream length, data size,
    bytes...). A strip whose bytes and size equal one of them is all zero without decoding (the
    same stream always inflates to the same data): an empty strip of a mask is the same few
    hundred bytes throughout a file."""
    for k in range(318):  # the fixed codes: literal/length 8, 9, 7, 8 bits; distance 5 bits
        work[_Z_WORK + k] = 8 if k < 144 else 9 if k < 256 else 7 if k < 280 else 8 if k < 288 else 5
    lengths, n_lit = np.int64(_Z_WORK), np.int64(288)
    _huffman(work, lengths, n_lit, np.int64(_Z_FLIT))
    _huffman(work, lengths + n_lit, n_lit - 258, np.int64(_Z_FDIST))
    done = np.zeros(pages_P5.shape[0], np.bool_)
    for p in range(pages_P5.shape[0]):
        for i in range(layers_PB.shape[1]):
            layers_PB[p, i] = 0
        boxes_P5[p] = _EMPTY_BOX
        width, height, bits, compression, rows_per_strip = pages_P5[p]
        if not use_P[p] or compression == 1 or bits != 8:
            continue
        size, step = width * height, rows_per_strip * width
        n_strips = (size + step - 1) // step
        if n_strips > starts_P1[p + 1] - starts_P1[p]:
            continue
        done[p] = True
        for s in range(n_strips):
            offset, count = strips_S2[starts_P1[p] + s]
            strip_size = min(step, size - s * step)
            known = False
            for k in range(zeros.shape[0]):
                if zeros[k, 0] == count and zeros[k, 1] == strip_size:
                    known = True
                    for i in range(count):
                        if zeros[k, 2 + i] != buf[offset + i]:
                            known = False
                            break
                    if known:
                        break
            if known:
                continue
            n_runs = inflate_runs(buf, offset, offset + count, strip_size, layers_PB[p], s * step, run_start,
                                  run_value, work, boxes_P5[p], width)
            if n_runs == 0:
                done[p] = False
                for i in range(layers_PB.shape[1]):
                    layers_PB[p, i] = 0
                boxes_P5[p] = _EMPTY_BOX
                break
            if n_runs == 1 and run_value[0] == 0 and count <= zeros.shape[1] - 2:  # remember it, oldest out
                for k in range(zeros.shape[0] - 1, 0, -1):
                    for i in range(2 + zeros[k - 1, 0]):
                        zeros[k, i] = zeros[k - 1, i]
                zeros[0, 0], zeros[0, 1] = count, strip_size
                for i in range(count):
                    zeros[0, 2 + i] = buf[offset + i]
    return done


def _inflate_pages(buf, pages_P5, strips_S2, starts_P1, use_P, layers_PB, boxes_P5):
    """inflate_pages with this process's buffers."""
    return inflate_pages(buf, pages_P5, strips_S2, starts_P1, use_P, layers_PB, boxes_P5,
                         _buffer("runs_start", 1 << 16, np.int64), _buffer("runs_value", 1 << 16),
                         _buffer("inflate_work", _Z_WORK_SIZE, np.int64),
                         _buffer("zero_streams", 4 * 1026, np.int64, np.zeros).reshape(4, 1026))


# The run decoder takes some 7 s to compile. When the JIT cache does not hold it and the
# prediction's masks are 8-bit (_has_8bit_masks), evaluate() compiles it in a child process while
# it reads the GT and compiles the other kernels as they are first used; until the child is done,
# load_pred_masks inflates 8-bit pages with zlib-ng (the same masks). A pool of workers starts once
# the child is done, so the workers find it compiled. 1-bit masks never need the decoder.
_WARM_UP = None  # (the child process compiling the decoder, the pid of its parent)


def _jit_cached(kernel):
    """Whether the JIT cache holds a compiled version of the kernel for the current source (read
    as numba reads it); True when that cannot be known (no cache, or numba's internals changed)."""
    try:
        return not _JIT_CACHE or bool(kernel._cache._cache_file._load_index())
    except Exception:  # noqa: BLE001 numba internals; without them the kernel compiles when first used
        return True


def _warm_decoder():
    """Compile the run decoder (into the JIT cache) by decoding a small 8-bit deflate page through
    the call load_pred_masks makes."""
    data = zlib.compress(bytes(64))
    _inflate_pages(np.frombuffer(data, np.uint8), np.array([[8, 8, 8, 8, 8]], np.int64),
                   np.array([[0, len(data)]], np.int64), np.array([0, 1], np.int64), np.ones(1, bool),
                   np.zeros((1, 1), np.uint64).view(np.uint8), np.empty((1, 5), np.int64))


def _has_8bit_masks(pred_path):
    """Whether the first TIFF (by name) of a prediction holds 8-bit pages: a guess at whether the run
    decoder will be used. False when there is no TIFF or it cannot be read (the evaluation reports why)."""
    source = PredSource(pred_path)
    try:
        names = source.members() if source.kind == "zip" else os.listdir(source.folder or ".")
        tiffs = sorted(name for name in names if name.lower().endswith((".tif", ".tiff")))
        if not tiffs:
            return False
        with tifffile.TiffFile(io.BytesIO(source.read(tiffs[0]))) as tiff:
            return tiff.pages[0].bitspersample == 8
    except Exception:  # noqa: BLE001 only a guess: reading the prediction reports what is wrong with it
        return False
    finally:
        source.close()


def _start_warm_up(pred_path):
    global _WARM_UP
    if _WARM_UP is None and not _jit_cached(inflate_pages) and _has_8bit_masks(pred_path):
        methods = multiprocessing.get_all_start_methods()
        process = multiprocessing.get_context("fork" if "fork" in methods else "spawn").Process(
            target=_warm_decoder, name="sgeval-jit-warm-up")
        process.start()
        _WARM_UP = process, os.getpid()


def _decoder_ready():
    """False while the decoder's warm-up that this process started is still running."""
    if _WARM_UP is not None and _WARM_UP[1] == os.getpid() and _WARM_UP[0].is_alive():
        return False
    _await_warm_up()
    return True


def _await_warm_up():
    """Wait for the decoder's warm-up (if this process started one that is still running)."""
    global _WARM_UP
    if _WARM_UP is not None and _WARM_UP[1] == os.getpid():
        _WARM_UP[0].join()
        _WARM_UP = None


def _read_strips(data, page, strips, out, scratch):
    """Inflate one page's strips (zlib-ng, into buffers of the known size) and write its mask
    as packed bits into ``out`` (all of it: the bytes after the mask are zeroed). 1-bit rows of
    whole bytes are the packed mask already: they are inflated straight into ``out``; other pages
    go through ``scratch``."""
    width, height, bits, compression, rows_per_strip = page
    row = -(-width // 8) if bits == 1 else width
    size, step = row * height, rows_per_strip * row
    pixels = out[:size] if bits == 1 and width % 8 == 0 else scratch[:size]
    if -(-size // step) > len(strips):
        raise ValueError(f"{len(strips)} strips cannot hold {height} rows")
    for start, (offset, count) in zip(range(0, size, step), strips):
        target = pixels[start:start + step]
        if compression == 1 and count < len(target):
            raise ValueError(f"a strip holds {count} of its {len(target)} bytes")
        if compression == 1:
            target[:] = np.frombuffer(data, np.uint8, len(target), offset)
        elif len(_inflate(memoryview(data)[offset:offset + count], out=target)) != len(target):
            raise ValueError(f"a strip inflates to fewer than its {len(target)} bytes")
    if bits == 1 and width % 8:
        packed = np.packbits(np.unpackbits(pixels.reshape(height, row), axis=1)[:, :width])
    elif bits == 8:
        packed = np.packbits(pixels)  # packs every non-zero byte as 1
    else:
        out[size:] = 0
        return
    out[: len(packed)] = packed
    out[len(packed):] = 0


def load_pred_masks(source, record, height, width, needed=None, out=None, boxes=False):
    """Bit-packed (P, W) masks of one prediction from its TIFF (pages or 3-D page layers).
    needed: optional (P,) bool; pages not needed are left empty when the strip reader is used.
    out: optional flat uint64 array; when it has room for the masks, they are written there.
    boxes: return (masks, their mask_boxes), the boxes of decoded uint8 pages from the decoder."""
    where = f"{source.path}: image {record.image_id}: {record.seg_filename}"
    try:
        data = source.read(record.seg_filename)
        status, pages, strips, starts = tiff_layout(np.frombuffer(data, np.uint8))
        if status == 2:
            raise ValueError("corrupt or truncated TIFF directory")
        if status == 0:
            wrong = np.flatnonzero((pages[:, 1] != height) | (pages[:, 0] != width))
            if len(wrong):
                raise SGEvalError([f"{where}: mask size ({pages[wrong[0], 1]}, {pages[wrong[0], 0]}) "
                                   f"differs from the GT image size ({height}, {width})"])
            shape = (len(pages), -(-height * width // 64))
            if out is not None and out.size >= shape[0] * shape[1]:
                words = out[: shape[0] * shape[1]].reshape(shape)
            else:
                words = np.empty(shape, np.uint64)
            layers = words.view(np.uint8)  # every page written below
            use = np.ones(len(pages), bool)
            if needed is not None:
                use[:len(needed)] = needed[:len(pages)]
            box = np.empty((len(pages), 5), np.int64)
            if (pages[:, 2] == 8).any() and _decoder_ready():
                done = _inflate_pages(np.frombuffer(data, np.uint8), pages, strips, starts, use, layers, box)
            else:  # 1-bit pages only, or the decoder still compiling: all go the zlib-ng way
                layers[~use], done = 0, np.zeros(len(pages), bool)
            if not done[use].all():  # the other pages the usual way (which reports what is wrong)
                scratch, strips, starts = _buffer("tiff_pixels", height * width), strips.tolist(), starts.tolist()
                for index in np.flatnonzero(use & ~done).tolist():
                    _read_strips(data, pages[index].tolist(), strips[starts[index]:starts[index + 1]], layers[index],
                                 scratch)
            if boxes and not done.any():
                box = mask_boxes(words, width)
            elif boxes and not done.all():
                box[~done] = mask_boxes(words[~done], width)
        else:
            words = pack_masks(_tifffile_layers(data, height, width, where))
            box = mask_boxes(words, width) if boxes else None
    except SGEvalError:
        raise
    except Exception as error:  # zipfile, tifffile and the codecs raise many types on corrupt data
        raise SGEvalError([f"{where}: cannot read TIFF: {type(error).__name__}: {error}"]) from None
    if len(words) != len(record.categories):
        raise SGEvalError([f"{where}: {len(words)} masks for {len(record.categories)} instances"])
    return (words, box) if boxes else words


def _tifffile_layers(data, height, width, where):
    """(P, H, W) bool masks through tifffile, for TIFFs the strip reader does not handle."""
    layers = []
    with tifffile.TiffFile(io.BytesIO(data)) as tiff:
        for page in tiff.pages:
            array = page.asarray()
            if array.ndim == 2:
                array = array[None]
            elif array.ndim == 3 and array.shape[:2] == (height, width) and array.shape[2] != width:
                array = np.moveaxis(array, -1, 0)
            if array.ndim != 3 or array.shape[1:] != (height, width):
                raise SGEvalError([f"{where}: mask size {array.shape[-2:]} differs from the GT "
                                   f"image size ({height}, {width})"])
            layers.extend(array != 0)
    return np.array(layers, bool).reshape(-1, height, width)


def encode_masks(masks_PHW):
    """(P, H, W) masks -> the bytes of a 1-bit deflate TIFF with one page per mask."""
    buffer = io.BytesIO()
    tifffile.imwrite(buffer, np.asarray(masks_PHW) != 0, photometric="minisblack",
                     compression=tifffile.COMPRESSION.ADOBE_DEFLATE)
    return buffer.getvalue()


def write_predictions(path, images, extra_members=None, kind=None):
    """Write predictions in the sgeval/SGBench v1 format.

    ``path`` ending in ``.zip`` -> a ZIP of <id>.tiff and triplets.json; ``.json`` -> one JSON
    file (box mode, no masks); anything else -> a directory (``kind`` overrides the suffix).
    ``images``: iterable of dicts with ``id``, ``instances`` ([{category, bbox, score?}]),
    ``triplets``, optional ``ng_triplets`` and optional ``masks`` ((P, H, W) bool or uint8). Each
    image's masks are written as it comes (triplets.json last), so an iterator keeps one image in
    memory. ``extra_members``: {name: bytes} added beside triplets.json. Same input, same bytes.
    """
    path = str(path)
    kind = kind or ("zip" if path.endswith(".zip") else "json" if path.endswith(".json") else "dir")
    archive = zipfile.ZipFile(path, "w") if kind == "zip" else None
    if kind == "dir":
        os.makedirs(path, exist_ok=True)

    def put(name, data, compress=zipfile.ZIP_STORED):  # TIFF pages are compressed already
        if archive is not None:
            archive.writestr(zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0)), data, compress_type=compress)
        else:
            Path(path, name).write_bytes(data)

    try:
        records = []
        for image in images:
            record = {"id": image["id"], "instances": image["instances"],
                      "triplets": np.asarray(image["triplets"], np.int64).reshape(-1, 3).tolist()}
            if image.get("ng_triplets") is not None:
                record["ng_triplets"] = np.asarray(image["ng_triplets"], np.int64).reshape(-1, 3).tolist()
            masks = image.get("masks")
            if masks is not None and len(masks):
                if kind == "json":
                    raise ValueError("a .json prediction holds no masks; write a .zip or a directory")
                record["seg_filename"] = f"{image['id']}.tiff"
                put(record["seg_filename"], encode_masks(masks))
            records.append(record)
        payload = json.dumps({"version": 1, "images": records}).encode()
        if kind == "json":
            Path(path).write_bytes(payload)
        else:
            for name, data in {"triplets.json": payload, **(extra_members or {})}.items():
                put(name, data, zipfile.ZIP_DEFLATED)
    finally:
        if archive is not None:
            archive.close()
    return path


# ---------------------------------------------------------------------------------------------
# numba kernels: flat arrays in and out, -1 = unmatched / different category
# ---------------------------------------------------------------------------------------------


@numba.njit(cache=_JIT_CACHE)
def popcount64(x):
    """Number of set bits of a uint64 (SWAR)."""
    x = x - ((x >> np.uint64(1)) & np.uint64(0x5555555555555555))
    x = (x & np.uint64(0x3333333333333333)) + ((x >> np.uint64(2)) & np.uint64(0x3333333333333333))
    x = (x + (x >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    return int((x * np.uint64(0x0101010101010101)) >> np.uint64(56))


@numba.njit(cache=_JIT_CACHE)
def pack_segments(rgb_HW3, segment_ids_G):
    """Packed bytes (G, B) of the panoptic segments of an RGB id image (id = R + 256 G + 65536 B),
    bit order as np.packbits over the flattened mask."""
    height, width = rgb_HW3.shape[0], rgb_HW3.shape[1]
    packed = np.zeros((segment_ids_G.shape[0], (height * width + 7) // 8), np.uint8)
    last_id, last_segment = -1, -1
    for y in range(height):
        for x in range(width):
            pixel_id = np.int64(rgb_HW3[y, x, 0]) + 256 * np.int64(rgb_HW3[y, x, 1]) + 65536 * np.int64(rgb_HW3[y, x, 2])
            if pixel_id != last_id:
                last_id, last_segment = pixel_id, -1
                for g in range(segment_ids_G.shape[0]):
                    if segment_ids_G[g] == pixel_id:
                        last_segment = g
                        break
            if last_segment >= 0:
                index = y * width + x
                packed[last_segment, index >> 3] |= np.uint8(128 >> (index & 7))
    return packed


@numba.njit(cache=_JIT_CACHE)
def mask_boxes(bits_NW, width):
    """(N, 5) int64 per packed mask of the given width: pixel count, then a bounding box y0, y1,
    x0, x1 (inclusive; the columns to whole bytes of 8 pixels; empty mask: y0 > y1). The boxes
    may be larger than the masks (never smaller); they only prune the IoU work."""
    boxes = np.zeros((bits_NW.shape[0], 5), np.int64)
    for n in range(bits_NW.shape[0]):
        area, y0, y1, x0, x1 = _EMPTY_BOX
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
                row, stop_row = start // width, stop // width
                y0, y1 = min(y0, row), max(y1, stop_row)
                if row == stop_row:
                    x0, x1 = min(x0, start - row * width), max(x1, stop - row * width)
                else:  # the bytes wrap around a row end
                    x0, x1 = 0, width - 1
        boxes[n, 0], boxes[n, 1], boxes[n, 2], boxes[n, 3], boxes[n, 4] = area, y0, y1, x0, min(x1, width - 1)
    return boxes


@numba.njit(cache=_JIT_CACHE)
def mask_iou(gt_bits_GW, gt_cat_G, gt_box_G5, pred_bits_PW, pred_cat_P, pred_box_P5, width):
    """IoU (P, G) of bit-packed masks of the given width with their mask_boxes; -1.0 where
    categories differ, 0.0 for an empty union. Only words inside both boxes are visited."""
    iou = np.full((pred_bits_PW.shape[0], gt_bits_GW.shape[0]), -1.0)
    for p in range(pred_bits_PW.shape[0]):
        for g in range(gt_bits_GW.shape[0]):
            if pred_cat_P[p] == gt_cat_G[g]:
                iou[p, g] = _iou(gt_bits_GW[g], pred_bits_PW[p], gt_box_G5[g], pred_box_P5[p], width)
    return iou


@numba.njit(cache=_JIT_CACHE)
def _iou(a_W, b_W, box_a, box_b, width):
    """IoU of two packed masks: the intersection is counted over the words of the boxes' overlap,
    row by row when rows of that overlap cannot share a word, else over its whole row span."""
    y0, y1 = max(box_a[1], box_b[1]), min(box_a[2], box_b[2])
    x0, x1 = max(box_a[3], box_b[3]), min(box_a[4], box_b[4])
    inter, n_words = 0, a_W.shape[0]
    if y0 <= y1 and x0 <= x1:
        if width - (x1 - x0) >= 64:
            for y in range(y0, y1 + 1):
                for w in range((y * width + x0) >> 6, min(((y * width + x1) >> 6) + 1, n_words)):
                    inter += popcount64(a_W[w] & b_W[w])
        else:
            for w in range((y0 * width) >> 6, min(((y1 * width + width - 1) >> 6) + 1, n_words)):
                inter += popcount64(a_W[w] & b_W[w])
    union = box_a[0] + box_b[0] - inter
    return inter / union if union > 0 else 0.0


@numba.njit(cache=_JIT_CACHE)
def self_iou(bits_PW, box_P5, width, threshold):
    """Symmetric IoU (P, P) of every pair of packed masks of the given width (with their
    mask_boxes), categories ignored (1.0 on the diagonal unless the mask is empty), for the pairs
    whose IoU can reach ``threshold``; the others hold 0.0. A pair cannot when m / (a + b - m)
    is below it, where a, b are the areas and m the least of a, b and the area where the boxes
    overlap: the intersection is at most m, so IoU <= m / (a + b - m) (and, both rounded, fl(IoU)
    <= fl(m / (a + b - m))): such pairs are never counted. With threshold 0, every IoU is computed."""
    iou = np.zeros((bits_PW.shape[0], bits_PW.shape[0]))
    for i in range(bits_PW.shape[0]):
        for j in range(i + 1):
            a, b = box_P5[i, 0], box_P5[j, 0]
            rows = min(box_P5[i, 2], box_P5[j, 2]) - max(box_P5[i, 1], box_P5[j, 1]) + 1
            columns = min(box_P5[i, 4], box_P5[j, 4]) - max(box_P5[i, 3], box_P5[j, 3]) + 1
            most = min(a, b, max(rows, 0) * max(columns, 0))
            if a + b > 0 and most / (a + b - most) >= threshold:
                iou[i, j] = iou[j, i] = _iou(bits_PW[i], bits_PW[j], box_P5[i], box_P5[j], width)
    return iou


@numba.njit(cache=_JIT_CACHE)
def merge_instances(iou_PP, bits_PW, box_P5, width, order_P, threshold, claim_pixels, node_bits_PW):
    """SingleMPO merge walk in the given order. An instance not yet absorbed becomes a node unless
    (claim_pixels) all its pixels are claimed already (then it is dropped); it claims its pixels
    and absorbs every later instance with IoU >= threshold. Returns node_of (P,) (-1 = dropped),
    the node's own instance (N,), and the node masks (N, W) = the pixels each node claimed, in
    the first N rows of node_bits_PW (an array of the shape of bits_PW; its contents are ignored),
    or, when node_bits_PW has no rows, not kept (node_bits_PW is returned as it is).
    box_P5: mask_boxes of the masks (of the given width): only their rows' words are visited."""
    n_pred = iou_PP.shape[0]
    node_of, source = np.full(n_pred, -1, np.int64), np.full(n_pred, -1, np.int64)
    absorbed = np.zeros(n_pred, np.bool_)
    claimed = np.zeros(bits_PW.shape[1], np.uint64)
    node_bits, keep = node_bits_PW, node_bits_PW.shape[0] > 0
    n_nodes = 0
    for rank in range(n_pred):
        i = order_P[rank]
        if absorbed[i]:
            continue
        start, stop = 0, 0  # the words written below; the rest of the node's row is zeroed
        if claim_pixels:
            free = 0
            if box_P5[i, 0] > 0:  # the words of the mask's rows (an empty mask has none)
                start = (box_P5[i, 1] * width) >> 6
                stop = min(((box_P5[i, 2] + 1) * width + 63) >> 6, bits_PW.shape[1])
            for w in range(start, stop):
                word = bits_PW[i, w] & ~claimed[w]
                claimed[w] |= bits_PW[i, w]
                free += popcount64(word)
                if keep:
                    node_bits[n_nodes, w] = word
            if free == 0:
                continue
        for w in range(start if keep else 0):
            node_bits[n_nodes, w] = 0
        for w in range(stop, bits_PW.shape[1] if keep else 0):
            node_bits[n_nodes, w] = 0
        node_of[i], source[n_nodes] = n_nodes, i
        for later in range(rank + 1, n_pred):
            j = order_P[later]
            if not absorbed[j] and iou_PP[i, j] >= threshold:
                absorbed[j], node_of[j] = True, n_nodes
        n_nodes += 1
    return node_of, source[:n_nodes], node_bits[:n_nodes] if keep else node_bits


@numba.njit(cache=_JIT_CACHE)
def box_iou(gt_box_G4, gt_cat_G, pred_box_P4, pred_cat_P):
    """IoU (P, G) of xyxy boxes (continuous, no +1); -1.0 where categories differ."""
    iou = np.full((pred_box_P4.shape[0], gt_box_G4.shape[0]), -1.0)
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


@numba.njit(cache=_JIT_CACHE)
def best_candidates(iou_PG, threshold):
    """Per prediction, the GT of highest IoU (first on ties) if IoU >= threshold, else -1."""
    candidate = np.full(iou_PG.shape[0], -1, np.int64)
    for p in range(iou_PG.shape[0]):
        best, best_iou = -1, -1.0
        for g in range(iou_PG.shape[1]):
            if iou_PG[p, g] > best_iou:
                best, best_iou = g, iou_PG[p, g]
        if best >= 0 and best_iou >= threshold:
            candidate[p] = best
    return candidate


@numba.njit(cache=_JIT_CACHE)
def match_unique(iou_PG, threshold):
    """Algorithm 2: pred -> GT (P,), each GT kept by its best candidate (earlier wins ties)."""
    candidate = best_candidates(iou_PG, threshold)
    holder = np.full(iou_PG.shape[1], -1, np.int64)
    for p in range(iou_PG.shape[0]):
        g = candidate[p]
        if g >= 0 and (holder[g] < 0 or iou_PG[p, g] > iou_PG[holder[g], g]):
            holder[g] = p
    pred_to_gt = np.full(iou_PG.shape[0], -1, np.int64)
    for g in range(holder.shape[0]):
        if holder[g] >= 0:
            pred_to_gt[holder[g]] = g
    return pred_to_gt


@numba.njit(cache=_JIT_CACHE)
def first_positions(sequence_keys_N, query_keys_Q):
    """For each query key, the first index of it in the sequence, or -1 (keys < 0 never match)."""
    first = np.full(query_keys_Q.shape[0], -1, np.int64)
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


MATCHERS = {"unique": match_unique, "multimpo": best_candidates}


# ---------------------------------------------------------------------------------------------
# Per-image statistics: integer counts only
# ---------------------------------------------------------------------------------------------


def k_values(k_labels, n_relations):
    """Absolute k per label for an image with n_relations GT triplets (x-labels are relative)."""
    values = []
    for label in k_labels:
        k = _parse_k(label)
        values.append(max(1, math.floor(k * n_relations + 0.5)) if isinstance(k, float) else k)
    return values


def _first_occurrences(keys_N):
    """Indices of the first occurrence of every key, in sequence order."""
    if len(keys_N) == 0:
        return np.zeros(0, np.int64)
    return np.sort(np.unique(keys_N, return_index=True)[1])


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
                 imr_labels, n_predicates, graph_constraint=True):
    """All per-image integer counts (the fields of count_shapes()) for one image and protocol.

    pred_to_gt_P maps the predicted instances (or SingleMPO nodes) that triplets index to GT
    instances (-1 = unmatched); zeroshot_R flags the zero-shot GT triplets.
    """
    C, n_pred = n_predicates, len(pred_to_gt_P)
    ks, imr_ks = k_values(k_labels, len(relations_R3)), [int(k) for k in imr_labels]
    gt_pairs = relations_R3[:, 0] * n_gt + relations_R3[:, 1]
    gt_keys = gt_pairs * C + relations_R3[:, 2]
    predicate = relations_R3[:, 2]
    unique_gt_pairs = np.unique(gt_pairs)

    pred_pairs = triplets_N3[:, 0] * n_pred + triplets_N3[:, 1]
    pred_keys = pred_pairs * C + triplets_N3[:, 2]
    selected = triplets_N3[_first_occurrences(pred_pairs if graph_constraint else pred_keys)]
    sel_pairs, sel_keys = _mapped_keys(selected, pred_to_gt_P, n_gt, C)
    first_hit = first_positions(sel_keys, gt_keys)
    first_pair = first_positions(sel_pairs, unique_gt_pairs)

    ng_keys = (ng_triplets_M3[:, 0] * n_pred + ng_triplets_M3[:, 1]) * C + ng_triplets_M3[:, 2]
    ng_selected = ng_triplets_M3[_first_occurrences(ng_keys)]
    first_ng = first_positions(_mapped_keys(ng_selected, pred_to_gt_P, n_gt, C)[1], gt_keys)
    # IMR: a GT triplet found in NG order is within "the first k of its predicate" by this rank.
    rank_in_predicate = np.full(len(relations_R3), np.iinfo(np.int64).max)
    found = first_ng >= 0
    rank_in_predicate[found] = _occurrence_ranks(ng_selected[:, 2])[first_ng[found]]
    listed = np.bincount(ng_selected[:, 2], minlength=C)

    def hit_masks(first, cutoffs):
        return [(first >= 0) & (first < k) for k in cutoffs]

    matched = np.zeros(n_gt, bool)
    matched[pred_to_gt_P[pred_to_gt_P >= 0]] = True
    both_ends = matched[relations_R3[:, 0]] & matched[relations_R3[:, 1]]

    all_pairs, all_keys = _mapped_keys(ng_triplets_M3, pred_to_gt_P, n_gt, C)
    kept = np.flatnonzero(all_keys >= 0)
    kept = kept[_first_occurrences(all_keys[kept])]
    ranks = _occurrence_ranks(all_pairs[kept])
    position = first_positions(all_keys[kept], gt_keys)
    appears = position >= 0
    gc, ng = hit_masks(first_hit, ks), hit_masks(first_ng, ks)
    per_predicate = lambda masks: np.stack([np.bincount(predicate[m], minlength=C) for m in masks])  # noqa: E731
    return {
        "gt_rel": np.bincount(predicate, minlength=C),
        "gc_hits": per_predicate(gc),
        "ng_hits": per_predicate(ng),
        "gt_pairs": len(unique_gt_pairs),
        "pair_hits": [np.count_nonzero((first_pair >= 0) & (first_pair < k)) for k in ks],
        "inf_hits": np.bincount(predicate[both_ends], minlength=C),
        "gt_inst": n_gt,
        "inst_hits": np.count_nonzero(matched),
        "rank_sum": np.bincount(predicate[appears], ranks[position[appears]], minlength=C).astype(np.int64),
        "rank_n": np.bincount(predicate[appears], minlength=C),
        "z_gt": np.count_nonzero(zeroshot_R),
        "z_gc_hits": [np.count_nonzero(m & zeroshot_R) for m in gc],
        "z_ng_hits": [np.count_nonzero(m & zeroshot_R) for m in ng],
        "imr_hits": per_predicate([rank_in_predicate < k for k in imr_ks]),
        "imr_short": [int((listed[predicate] < k).any()) for k in imr_ks],
    }


def count_shapes(n_k, n_imr, n_predicates):
    """Shape of every per-image count field (the image axis excluded)."""
    C = n_predicates
    return {"gt_rel": (C,), "gc_hits": (n_k, C), "ng_hits": (n_k, C), "gt_pairs": (), "pair_hits": (n_k,),
            "inf_hits": (C,), "gt_inst": (), "inst_hits": (), "rank_sum": (C,), "rank_n": (C,),
            "z_gt": (), "z_gc_hits": (n_k,), "z_ng_hits": (n_k,), "imr_hits": (n_imr, C),
            "imr_short": (n_imr,)}


PER_PREDICATE_FIELDS = ("gt_rel", "gc_hits", "ng_hits", "inf_hits", "rank_sum", "rank_n", "imr_hits")


class ImageCounts(collections.abc.Mapping):
    """The per-image counts of one protocol: {field: (I, ...) int64 array} as aggregate() reads
    them. Fields with a predicate axis (PER_PREDICATE_FIELDS) are kept per image for the columns
    where that image has a non-zero count only (the predicates of its GT, a few of ~50), and made
    whole one field at a time when read: memory grows by about 1 KB per image, not 8."""

    def __init__(self, n_images, shapes):
        self.shapes = shapes
        self.whole = {field: np.zeros((n_images,) + shape, np.int64) for field, shape in shapes.items()
                      if field not in PER_PREDICATE_FIELDS}
        self.columns, self.values, self.cached = [None] * n_images, [None] * n_images, (None, None)

    def put(self, slot, counts):
        for field, array in self.whole.items():
            array[slot] = counts[field]
        rows = [np.asarray(counts[field], np.int64).reshape(-1, self.shapes[field][-1]) for field in PER_PREDICATE_FIELDS]
        columns = np.flatnonzero(np.vstack(rows).any(axis=0))
        self.columns[slot], self.values[slot] = columns, np.concatenate([r[:, columns].ravel() for r in rows])
        self.cached = (None, None)

    def __getitem__(self, field):
        if field in self.whole:
            return self.whole[field]
        if self.cached[0] == field:
            return self.cached[1]
        array = np.zeros((len(self.columns),) + self.shapes[field], np.int64)
        index = PER_PREDICATE_FIELDS.index(field)
        heights = [int(np.prod(self.shapes[f][:-1])) for f in PER_PREDICATE_FIELDS]
        for slot, (columns, values) in enumerate(zip(self.columns, self.values)):
            if columns is not None and len(columns):
                start = sum(heights[:index]) * len(columns)
                array[slot].reshape(heights[index], -1)[:, columns] = \
                    values[start: start + heights[index] * len(columns)].reshape(heights[index], -1)
        self.cached = (field, array)
        return array

    def __iter__(self):
        return iter(self.shapes)

    def __len__(self):
        return len(self.shapes)


AUDIT_FIELDS = ("repeated_triplets", "repeated_pairs", "self_pairs", "duplicate_instances",
                "absorbed_instances", "dropped_instances", "duplicate_relations_after_merge")
_NO_TRIPLETS = np.zeros((0, 3), np.int64)


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


def _audit(pred, iou_PP, node_of, n_nodes, merged_triplets):
    """Protocol audit counts of one prediction (AUDIT_FIELDS order)."""
    T, n_pred = pred.triplets, len(pred.categories)
    same_category = pred.categories[:, None] == pred.categories[None, :]
    earlier_twin = np.tril((iou_PP >= MERGE_IOU) & same_category, k=-1).any(axis=1)
    pairs = T[:, 0] * n_pred + T[:, 1]
    triplet_keys = pairs * (int(T[:, 2].max()) + 1 if len(T) else 1) + T[:, 2]
    merged_pairs = merged_triplets[:, 0] * n_pred + merged_triplets[:, 1]
    return [_repeats(triplet_keys), _repeats(pairs), np.count_nonzero(T[:, 0] == T[:, 1]),
            np.count_nonzero(earlier_twin), np.count_nonzero(node_of >= 0) - n_nodes,
            np.count_nonzero(node_of < 0), _repeats(merged_pairs)]


def _repeats(keys_N):
    """The number of entries equal to an earlier one (len(keys) - len(np.unique(keys)))."""
    ordered = np.sort(keys_N)
    return np.count_nonzero(ordered[1:] == ordered[:-1])


def _evaluate_image(task):
    """Worker: one image under every protocol -> ({protocol: counts}, audit or None, problems)."""
    gt, pred, source, (mode, protocols, threshold, k_labels, imr_labels, n_predicates, audit) = task
    count = lambda mapping, T, T_ng, graph: image_counts(  # noqa: E731
        gt.relations, gt.zeroshot, len(gt.categories), mapping, T, T_ng, k_labels, imr_labels,
        n_predicates, graph)
    no_audit = [0] * len(AUDIT_FIELDS) if audit else None
    if pred is None or not len(pred.categories):  # no instances: no triplets either (validated)
        none = np.zeros(0, np.int64)
        return {p: count(none, _NO_TRIPLETS, _NO_TRIPLETS, True) for p in protocols}, no_audit, []
    merge = audit or "singlempo" in protocols  # needs every mask; else only GT categories matter
    needed = None if merge else np.isin(pred.categories, gt.categories)
    try:
        if mode == "box":
            iou = box_iou(gt.boxes, gt.categories, pred.boxes, pred.categories)
        else:
            bits, boxes = load_pred_masks(source, pred, gt.height, gt.width, needed, _buffer(
                "pred_bits", len(pred.categories) * -(-gt.height * gt.width // 64), np.uint64), boxes=True)
            iou = np.full((len(pred.categories), len(gt.categories)), -1.0)
            if needed is None or needed.any():  # else no prediction has a GT category
                gt_bits = load_gt_masks(gt)
                gt_boxes = mask_boxes(gt_bits, gt.width)
                iou = mask_iou(gt_bits, gt.categories, gt_boxes, bits, pred.categories, boxes, gt.width)
    except SGEvalError as error:
        return None, None, error.problems
    counts = {protocol: count(MATCHERS[protocol](iou, threshold), pred.triplets, pred.ng_triplets,
                              protocol != "multimpo") for protocol in protocols if protocol != "singlempo"}
    if not merge:
        return counts, no_audit, []
    if mode == "mask":
        iou_pp = self_iou(bits, boxes, gt.width, MERGE_IOU)  # only IoU >= MERGE_IOU is used
    else:
        no_category = np.zeros(len(pred.categories), np.int64)
        iou_pp, bits = box_iou(pred.boxes, no_category, pred.boxes, no_category), np.zeros((len(iou), 0), np.uint64)
        boxes = mask_boxes(bits, gt.width)
    node_rows = len(bits) if "singlempo" in protocols else 0  # node masks: only SingleMPO matches them
    node_of, source_of_node, node_bits = merge_instances(iou_pp, bits, boxes, gt.width, merge_order(pred), MERGE_IOU,
                                                         mode == "mask", _buffer("node_bits", bits.size, np.uint64)
                                                         [:node_rows * bits.shape[1]].reshape(node_rows, bits.shape[1]))
    merged_T = remap_to_nodes(pred.triplets, node_of)
    if "singlempo" in protocols:
        node_categories = pred.categories[source_of_node]
        node_iou = (mask_iou(gt_bits, gt.categories, gt_boxes, node_bits, node_categories,
                             mask_boxes(node_bits, gt.width), gt.width) if mode == "mask" else iou[source_of_node])
        counts["singlempo"] = count(match_unique(node_iou, threshold), merged_T,
                                    remap_to_nodes(pred.ng_triplets, node_of), True)
    counts = {protocol: counts[protocol] for protocol in protocols}  # in the configured order
    return counts, _audit(pred, iou_pp, node_of, len(source_of_node), merged_T) if audit else None, []


# ---------------------------------------------------------------------------------------------
# Aggregation: a pure function of the stacked counts
# ---------------------------------------------------------------------------------------------


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

    for family, field in (("R", "gc_hits"), ("mR", "gc_hits"), ("ngR", "ng_hits"), ("mNgR", "ng_hits")):
        for index, label in enumerate(k_labels if family in metrics else ()):
            if family.startswith("m"):
                m_type(f"{family}@{label}", counts[field][:, index])
            else:
                out[f"{family}@{label}"] = _r_type(counts[field][:, index].sum(axis=1), n_relations, pooled)
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
    pairs = np.zeros(gt_rel.shape[1]) if predicate_pairs is None else np.asarray(predicate_pairs, np.float64)
    weights = np.where(present, pairs ** tau, 0.0)
    for label in imr_labels if "wIMR" in metrics else ():
        imr = np.nan_to_num(per_predicate[f"IMR@{label}"])
        out[f"wIMR@{label}"] = float((weights / weights.sum() * imr).sum()) if weights.sum() > 0 else np.nan
    for label in imr_labels if "IMR" not in metrics and "wIMR" in metrics else ():  # wIMR only
        del out[f"IMR@{label}"], per_predicate[f"IMR@{label}"]
    return {key: float(value) for key, value in out.items()}, per_predicate


# ---------------------------------------------------------------------------------------------
# Evaluation driver and report
# ---------------------------------------------------------------------------------------------


def _run(tasks, workers, batch=16):
    """Evaluate (slot, task) pairs as they come; yields (slot, result) in task order. With
    workers > 1 a pool evaluates batches of tasks, at most 2 batches per worker ahead of the
    caller (bounded memory). Batches of 16 rather than 4: the pool's threads that send tasks and
    receive results share the GIL with the caller reading predictions, and each hand-over can
    keep the workers waiting (2,177 images, W=2: some 0.3 s less)."""
    if workers <= 1:
        for slot, task in tasks:
            yield slot, _evaluate_image(task)
        return
    _await_warm_up()  # the workers then find the decoder compiled
    popcount64(np.uint64(0))  # numba's compiler set up before the workers fork: they inherit it (some 0.2 s each)
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    with context.Pool(workers) as pool:
        pending, tasks = collections.deque(), iter(tasks)
        while True:
            chunk = list(itertools.islice(tasks, batch))
            if chunk:
                slots, chunk = zip(*chunk)
                pending.append((slots, pool.apply_async(_evaluate_images, (chunk,))))
            while pending and (not chunk or len(pending) > 2 * workers or pending[0][1].ready()):
                slots, results = pending.popleft()
                yield from zip(slots, results.get())
            if not chunk:
                return


def _evaluate_images(tasks):
    return [_evaluate_image(task) for task in tasks]


def _none_if_nan(value):
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else value


def evaluate(config, progress=None):
    """Evaluate a prediction; returns the results dict (SPEC section 7).

    config: a Config (see load_config / make_config) or a mapping of its fields.
    progress: optional callable progress(images_done, images_total), called after each image.
    Raises SGEvalError listing every problem found in the input.
    """
    if not isinstance(config, Config):
        config = make_config(dict(config))
    if config.gt_seg:  # mask mode: the run decoder may be needed (see _WARM_UP)
        _start_warm_up(config.pred)
    try:
        return _evaluate(config, progress)
    finally:
        _await_warm_up()


def _evaluate(config, progress):
    mode = "mask" if config.gt_seg else "box"
    protocols = tuple(dict.fromkeys((config.protocol, *config.protocols)))
    gt = read_gt(config.gt, config.gt_seg)
    names, n_objects = gt.predicate_classes, len(gt.object_classes)
    training = read_training(config.train_gt, n_objects, len(names)) if config.train_gt else gt.training
    given = read_zeroshot(config.zeroshot_triplets, n_objects, len(names)) if config.zeroshot_triplets else None
    for image in gt.images:
        types = zip(image.categories[image.relations[:, 0]].tolist(),
                    image.categories[image.relations[:, 1]].tolist(), image.relations[:, 2].tolist())
        image.zeroshot = np.array([t in given if given is not None else t not in training[0] for t in types])
    problems = []
    source, records = prediction_records(config.pred, n_objects, len(names), mode, problems)
    static = (mode, protocols, config.iou_threshold, config.k, config.imr_k, len(names), config.audit)
    slot_of = {image.image_id: slot for slot, image in enumerate(gt.images)}
    predicted, n_extra = np.zeros(len(gt.images), bool), 0

    def tasks():  # images in prediction-file order as they are read, then those without one
        nonlocal n_extra
        for pred in records:
            slot = slot_of.get(pred.image_id)
            n_extra += slot is None
            if slot is not None and not problems:  # after a problem: only check the rest
                predicted[slot] = True
                yield slot, (gt.images[slot], pred, source, static)
        for slot in np.flatnonzero(~predicted) if not problems else ():
            yield slot, (gt.images[slot], None, source, static)

    shapes = count_shapes(len(config.k), len(config.imr_k), len(names))  # counts of image i at [i]
    stacked = {p: ImageCounts(len(gt.images), shapes) for p in protocols}
    audits, image_problems = np.zeros((len(gt.images), len(AUDIT_FIELDS)), np.int64), {}
    try:
        for done, (slot, (counts, audit, found)) in enumerate(_run(tasks(), config.workers), 1):
            if found:
                image_problems[slot] = found
            for protocol in protocols if counts is not None else ():
                stacked[protocol].put(slot, counts[protocol])
            audits[slot] = audit if audit is not None else 0
            if progress:
                progress(done, len(gt.images))
    finally:
        source.close()
    problems += [problem for slot in sorted(image_problems) for problem in image_problems[slot]]
    if problems:
        raise SGEvalError(problems)
    present = stacked[config.protocol]["gt_rel"].sum(axis=0) > 0
    by_protocol = {}
    for protocol in protocols:
        metrics, per_predicate = aggregate(stacked[protocol], config.k, config.imr_k, config.metrics,
                                           config.absent_predicates, config.aggregation, training[1],
                                           config.wimr_tau)
        by_protocol[protocol] = {
            "metrics": {key: _none_if_nan(value) for key, value in metrics.items()},
            "per_predicate": {key: {names[c]: _none_if_nan(float(values[c])) for c in np.flatnonzero(present)}
                              for key, values in per_predicate.items()}}
    short = stacked[config.protocol]["imr_short"].sum(axis=0)
    results = {
        "sgeval_version": __version__,
        "config": {**dataclasses.asdict(config), **{key: list(getattr(config, key)) for key in
                                                     ("protocols", "k", "imr_k", "metrics")}},
        "images": {
            "evaluated": len(gt.images),
            "missing_predictions": int(np.count_nonzero(~predicted)),
            "skipped_no_relations": gt.skipped_no_relations,
            "extra_predictions": n_extra,
        },
        **by_protocol[config.protocol],
        "gt_relations_per_predicate": {names[c]: int(n) for c, n in
                                       enumerate(stacked[config.protocol]["gt_rel"].sum(axis=0)) if n},
        "absent_predicates": [names[c] for c in np.flatnonzero(~present)],
        "protocol_audit": _audit_report(audits, gt.images) if config.audit else None,
        "imr_short_images": {label: int(n) for label, n in zip(config.imr_k, short)},
        "warnings": [f"IMR@{label}: {n} of {len(gt.images)} images list fewer than {label} ng_triplets "
                     f"for a predicate of their GT; IMR@{label} may be underestimated"
                     for label, n in zip(config.imr_k, short) if n and {"IMR", "wIMR"} & set(config.metrics)],
    }
    if len(protocols) > 1:
        results["by_protocol"] = by_protocol
    if config.output:
        Path(config.output).parent.mkdir(parents=True, exist_ok=True)
        Path(config.output).write_text(json.dumps(results, indent=1) + "\n")
        log.info("wrote %s", config.output)
    return results


def _audit_report(audits, images):
    """Totals, per-image means and per-image rows of the audit counts."""
    audit_II = np.asarray(audits, np.int64).reshape(-1, len(AUDIT_FIELDS))
    means = audit_II.mean(axis=0) if len(audit_II) else np.zeros(len(AUDIT_FIELDS))
    return {**{field: int(total) for field, total in zip(AUDIT_FIELDS, audit_II.sum(axis=0))},
            "per_image_mean": {field: float(value) for field, value in zip(AUDIT_FIELDS, means)},
            "per_image": {image.image_id: dict(zip(AUDIT_FIELDS, map(int, row))) for image, row in zip(images, audit_II)}}


def _fmt(value, key=""):
    if value is None:
        return "-"
    return f"{value:.2f}" if key == "PRank" else f"{100 * value:.1f}"


def _grid(row_labels, column_labels, cell, first_width=8, width=8):
    lines = [" " * first_width + "".join(f"{label:>{width}}" for label in column_labels)]
    return lines + [f"{row:<{first_width}}" + "".join(f"{cell(row, column):>{width}}" for column in column_labels)
                    for row in row_labels]


def format_table(results):
    """The terminal report: metrics in percent with one decimal (PRank as a mean rank)."""
    config, metrics = results["config"], results["metrics"]
    lines = [f"sgeval {results['sgeval_version']} | protocol {config['protocol']} | "
             f"{'mask' if config['gt_seg'] else 'box'} mode | {config['aggregation'].replace('_', '-')} "
             f"aggregation | images: "
             + ", ".join(f"{key.replace('_', ' ')} {value}" for key, value in results["images"].items())]
    for families, ks in ((("R", "mR", "ngR", "mNgR", "PR", "zR", "ngzR"), config["k"]),
                         (("IMR", "wIMR"), config["imr_k"])):
        rows = [family for family in families if f"{family}@{ks[0]}" in metrics]
        if rows:
            lines += _grid(rows, [f"@{k}" for k in ks], lambda f, k: _fmt(metrics[f"{f}{k}"]))
    extras = [f"{key} {_fmt(metrics[key], key)}" for key in ("InstR", "R@inf", "mR@inf", "PRank") if key in metrics]
    if extras:
        lines.append("  ".join(extras) + "   (PRank: mean rank, lower is better)" * ("PRank" in metrics))
    if "by_protocol" in results:
        by_protocol = results["by_protocol"]
        lines += ["protocol comparison (same predictions, same GT):"] + _grid(
            list(metrics), list(by_protocol), lambda key, name: _fmt(by_protocol[name]["metrics"][key], key), 10, 11)
    if config["per_predicate"] and results["per_predicate"]:
        per_predicate, counts = results["per_predicate"], results["gt_relations_per_predicate"]
        width = max(map(len, counts), default=8) + 2
        lines += ["per predicate:"] + _grid(
            list(counts), ["GT", *per_predicate],
            lambda name, key: str(counts[name]) if key == "GT" else _fmt(per_predicate[key][name], key),
            width, max(8, *(len(key) + 2 for key in per_predicate)))
    if results["absent_predicates"]:
        rule = "counted as 0" if config["absent_predicates"] == "zero" else "not in m-type means"
        lines.append(f"absent predicates ({len(results['absent_predicates'])}, {rule}): "
                     + ", ".join(results["absent_predicates"]))
    if results["protocol_audit"] is not None:
        lines.append("protocol audit (per image): " + ", ".join(
            f"{field.replace('_', ' ')} {value:.2f}" for field, value in results["protocol_audit"]["per_image_mean"].items()))
    lines += [f"warning: {text}" for text in results["warnings"]]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="YAML config file.")
@click.option("--gt", help="OpenPSG psg.json.")
@click.option("--gt-seg", help="Panoptic PNG root (mask mode); omit for box mode.")
@click.option("--pred", help="Predictions: .json, .zip or directory.")
@click.option("--train-gt", help="Training annotations for zero-shot and wIMR (default: --gt's other images).")
@click.option("--zeroshot-triplets", help="JSON/CSV rows [subject cat, object cat, predicate]: the zero-shot set.")
@click.option("--protocol", type=click.Choice(PROTOCOLS), help="Instance matching protocol (default unique).")
@click.option("--protocols", help="More protocols to evaluate side by side, comma-separated.")
@click.option("--compare-protocols", is_flag=True, help="Evaluate unique, singlempo and multimpo side by side.")
@click.option("--k", help="Cut-offs, e.g. 20,50,100,x1,x10.")
@click.option("--imr-k", help="IMR / wIMR cut-offs, e.g. 10,20,50.")
@click.option("--metrics", help=f"Metric families, comma-separated: {','.join(METRIC_FAMILIES)}.")
@click.option("--iou-threshold", type=float, help="Minimum IoU for a match (default 0.5).")
@click.option("--wimr-tau", type=float, help="wIMR weight exponent tau (default 0.5).")
@click.option("--absent-predicates", type=click.Choice(["skip", "zero"]), help="Absent predicates in m-type means.")
@click.option("--aggregation", type=click.Choice(["per_image", "pooled"]), help="Mean of per-image values or pooled counts.")
@click.option("--per-predicate/--no-per-predicate", default=None, help="Print the per-predicate table.")
@click.option("--audit/--no-audit", default=None, help="Protocol audit (default on; off skips masks of absent categories).")
@click.option("--workers", type=int, help="Worker processes (default 1).")
@click.option("--output", help="Write the JSON results here.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
def main(config_path, quiet, compare_protocols, **options):
    """Evaluate scene graph predictions against OpenPSG ground truth."""
    if compare_protocols and options["protocols"] is None:
        options["protocols"] = ",".join(PROTOCOLS)
    results = run_cli(lambda progress: evaluate(load_config(config_path, **options), progress), "evaluating", quiet)
    click.echo(format_table(results))
    if results["config"]["output"]:
        click.echo(f"results written to {results['config']['output']}", err=True)


def run_cli(work, label, quiet=False):
    """Run work(progress) for a command line: a progress bar on stderr (none when quiet); on bad
    input one ``error:`` line per problem on stderr and exit code 1. Returns work's result."""
    bar = None

    def progress(done, total):
        nonlocal bar
        if bar is None:
            bar = click.progressbar(length=total, label=label, file=sys.stderr)
        bar.update(1)

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


if __name__ == "__main__":
    main()
