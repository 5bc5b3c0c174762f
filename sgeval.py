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
* Graph-constrained selection GC_k: walk ``triplets``, drop a triplet whose predicted (s, o) pair
  occurred earlier, keep the first k. No-graph-constraint NG_k: walk ``ng_triplets``, drop exact
  repeats, keep the first k. Relative k ``x10``: k = max(1, floor(10 |G| + 0.5)).
* A selection is mapped through the matching; triplets with an unmatched end are dropped and the
  rest compared with G as a set of (s_gt, o_gt, p).
* PRank (Algorithm 6): walk ``ng_triplets``, map, drop unmatched, drop exact repeats of an earlier
  mapped triplet; a triplet's rank is the number of earlier kept triplets with the same mapped
  pair. Per image and predicate, the mean rank of the GT triplets that appear (a multiset mean);
  undefined when none appears.
* Aggregation: R-type metrics (R, ngR, PR, InstR, R@inf) are means over evaluated images. m-type
  metrics (mR, mNgR, mR@inf, PRank) are per predicate the mean over the images whose G holds it
  (PRank: where defined), then the mean over the predicates present in the evaluated GT (PRank:
  over predicates with a value). ``absent_predicates: zero`` counts absent predicates as 0 in mR,
  mNgR and mR@inf (the OpenPSG rule).
* An evaluated image without a prediction record counts with zero hits; records for images that
  are not evaluated are ignored and counted as ``extra_predictions``.

Glossary of dimensions: I images, G GT instances, P predicted instances, R relations (triplets),
K cut-offs, C predicate classes, W 64-bit words of a packed mask.
"""

__version__ = "0.1.0"

import dataclasses
import io
import json
import logging
import math
import multiprocessing
import os
import sys
import zipfile
from pathlib import Path, PurePosixPath

import click
import numba
import numpy as np
import tifffile
import yaml
from PIL import Image

log = logging.getLogger("sgeval")

# Compiled kernels are cached beside this file; set SGEVAL_NO_JIT_CACHE=1 where that cannot work.
_JIT_CACHE = not os.environ.get("SGEVAL_NO_JIT_CACHE")

METRIC_FAMILIES = ("R", "mR", "ngR", "mNgR", "PR", "InstR", "Rinf", "PRank")
PROTOCOLS = ("unique", "multimpo")


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
    protocol: str = "unique"  # unique | multimpo
    k: tuple = ("20", "50", "100", "x1", "x10")  # absolute or relative ("x10") cut-offs
    metrics: tuple = METRIC_FAMILIES  # metric families to report
    iou_threshold: float = 0.5  # a match needs IoU >= this
    absent_predicates: str = "skip"  # skip | zero: predicates absent from the GT in m-type means
    workers: int = 1  # processes decoding and matching images
    output: str | None = None  # JSON results file


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


def make_config(values, source="config"):
    """Build a validated Config from a mapping; all problems are reported together."""
    fields = {f.name: f for f in dataclasses.fields(Config)}
    problems = [
        f"{source}: unknown key '{key}'; valid keys: {', '.join(fields)}"
        for key in values
        if key not in fields
    ]
    if problems:
        raise SGEvalError(problems)
    merged = {**{n: f.default for n, f in fields.items()}, **values}
    for key in ("gt", "pred"):
        if not merged[key]:
            problems.append(f"{source}: '{key}' is required")
    k_labels = []
    for item in _as_list(merged["k"]):
        try:
            k = _parse_k(item)
            k_labels.append(f"x{k:g}" if isinstance(k, float) else str(k))
        except ValueError:
            problems.append(f"{source}: k value '{item}' is neither a positive integer nor x<factor>")
    if not _as_list(merged["k"]):
        problems.append(f"{source}: 'k' needs at least one value")
    metric_names = [str(m) for m in _as_list(merged["metrics"])]
    for name in metric_names:
        if name not in METRIC_FAMILIES:
            problems.append(f"{source}: unknown metric family '{name}'; valid: {', '.join(METRIC_FAMILIES)}")
    if merged["protocol"] not in PROTOCOLS:
        problems.append(f"{source}: protocol '{merged['protocol']}' is not one of {', '.join(PROTOCOLS)}")
    if merged["absent_predicates"] not in ("skip", "zero"):
        problems.append(f"{source}: absent_predicates must be 'skip' or 'zero'")
    try:
        threshold = float(merged["iou_threshold"])
        if not 0 < threshold <= 1:
            raise ValueError
    except (TypeError, ValueError):
        problems.append(f"{source}: iou_threshold must be a number in (0, 1]")
        threshold = 0.5
    workers = merged["workers"]
    if isinstance(workers, str) and workers.strip().isdigit():
        workers = int(workers)
    if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
        problems.append(f"{source}: workers must be a positive integer")
    if problems:
        raise SGEvalError(problems)
    text_or_none = lambda v: None if v in (None, "") else str(v)  # noqa: E731
    return Config(
        gt=str(merged["gt"]), gt_seg=text_or_none(merged["gt_seg"]), pred=str(merged["pred"]),
        protocol=merged["protocol"], k=tuple(dict.fromkeys(k_labels)),
        metrics=tuple(dict.fromkeys(metric_names)), iou_threshold=threshold,
        absent_predicates=merged["absent_predicates"], workers=workers,
        output=text_or_none(merged["output"]),
    )


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


@dataclasses.dataclass
class GroundTruth:
    object_classes: list
    predicate_classes: list
    images: list  # [GTImage] in psg.json order
    skipped_no_relations: int


@dataclasses.dataclass
class PredImage:
    """One prediction record. triplets / ng_triplets: (N, 3) int64 [s, o, p]."""

    image_id: str
    categories: np.ndarray  # (P,) int64
    boxes: np.ndarray | None  # (P, 4) float64
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
    for column, (limit, label) in enumerate(zip(limits, labels)):
        bad = np.flatnonzero((rows[:, column] < 0) | (rows[:, column] >= limit))
        if bad.size:
            row = int(bad[0])
            more = f" (and {bad.size - 1} more)" if bad.size > 1 else ""
            problems.append(
                f"{where}: {name} {row} refers to {label} {int(rows[row, column])}, "
                f"but only {limit} exist{more}"
            )


def read_gt(gt_path, seg_root=None):
    """Read psg.json; every structural problem is collected into one SGEvalError."""
    try:
        with open(gt_path, "rb") as handle:
            data = json.load(handle)
    except (OSError, ValueError) as error:
        raise SGEvalError([f"{gt_path}: cannot read JSON: {error}"]) from None
    keys = ("data", "thing_classes", "stuff_classes", "predicate_classes", "test_image_ids")
    missing = [key for key in keys if not isinstance(data, dict) or key not in data]
    if missing:
        raise SGEvalError([f"{gt_path}: missing top-level field '{key}'" for key in missing])
    not_lists = [key for key in keys if not isinstance(data[key], list)]
    if not_lists:
        raise SGEvalError([f"{gt_path}: top-level field '{key}' must be a list" for key in not_lists])
    objects = list(data["thing_classes"]) + list(data["stuff_classes"])
    predicates = list(data["predicate_classes"])
    test_ids = {str(i) for i in data["test_image_ids"]}
    problems, images, skipped, seen, listed = [], [], 0, set(), set()
    for index, entry in enumerate(data["data"]):
        if not isinstance(entry, dict) or "image_id" not in entry:
            problems.append(f"{gt_path}: data[{index}]: missing field 'image_id'")
            continue
        image_id = str(entry["image_id"])
        where = f"{gt_path}: image {image_id}"
        listed.add(image_id)
        if image_id not in test_ids:
            continue
        if image_id in seen:
            problems.append(f"{where}: duplicate image_id")
            continue
        seen.add(image_id)
        bad_fields = [f"field '{key}' must be a positive integer" for key in ("height", "width")
                      if not isinstance(entry.get(key), int) or isinstance(entry.get(key), bool)
                      or entry[key] < 1]
        bad_fields += [f"field '{key}' must be a list" for key in ("segments_info", "annotations", "relations")
                       if not isinstance(entry.get(key), list)]
        if bad_fields:
            problems += [f"{where}: {text}" for text in bad_fields]
            continue
        segments, annotations = entry["segments_info"], entry["annotations"]
        height, width, relations_raw = entry["height"], entry["width"], entry["relations"]
        relations = _int_rows(relations_raw, 3, "relations", where, problems)
        if relations is None:
            continue
        if len(relations) == 0:
            skipped += 1
            continue
        try:
            segment_ids = np.array([int(s["id"]) for s in segments], np.int64)
            categories = np.array([int(s["category_id"]) for s in segments], np.int64)
            boxes = np.array([a["bbox"][:4] for a in annotations], np.float64).reshape(-1, 4)
        except (KeyError, TypeError, ValueError, IndexError) as error:
            problems.append(f"{where}: malformed segments_info/annotations: {error}")
            continue
        if len(boxes) != len(segments):
            problems.append(f"{where}: annotations has {len(boxes)} entries, segments_info {len(segments)}")
            continue
        if seg_root is None and not np.isfinite(boxes).all():
            problems.append(f"{where}: annotations bbox holds NaN or inf")
        _check_indices(categories[:, None], "segment", [len(objects)], ["category"], where, problems)
        _check_indices(relations, "relation", [len(segments)] * 2 + [len(predicates)],
                       ["segment", "segment", "predicate"], where, problems)
        _, first = np.unique(relations, axis=0, return_index=True)
        seg_path = None
        if seg_root is not None:
            if not isinstance(entry.get("pan_seg_file_name"), str):
                problems.append(f"{where}: missing field 'pan_seg_file_name' (needed in mask mode)")
                continue
            seg_path = os.path.join(seg_root, entry["pan_seg_file_name"])
            if not os.path.isfile(seg_path):
                problems.append(f"{seg_path}: image {image_id}: panoptic PNG not found "
                                f"(field 'pan_seg_file_name' under {seg_root})")
        images.append(GTImage(image_id, height, width, seg_path, segment_ids, categories, boxes,
                              relations[np.sort(first)]))
    problems += [f"{gt_path}: test_image_ids lists image {image_id}, which has no entry in 'data'"
                 for image_id in sorted(test_ids - listed)]
    if problems:
        raise SGEvalError(problems)
    return GroundTruth(objects, predicates, images, skipped)


class PredSource:
    """Where prediction files live: a .json file, a .zip (read in memory) or a directory."""

    def __init__(self, path):
        self.path = str(path)
        self.kind = "zip" if zipfile.is_zipfile(self.path) else "dir" if os.path.isdir(self.path) else "json"
        self._zip = None

    def read(self, name):
        if self.kind == "zip":
            if self._zip is None:
                self._zip = zipfile.ZipFile(self.path)
            return self._zip.read(name)
        base = self.path if self.kind == "dir" else os.path.dirname(self.path)
        with open(os.path.join(base, name), "rb") as handle:
            return handle.read()

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

    def __getstate__(self):  # an open ZipFile does not cross process boundaries
        return {**self.__dict__, "_zip": None}


def _unsafe_member(name):
    path = PurePosixPath(name.replace("\\", "/"))
    return path.is_absolute() or ".." in path.parts or ":" in name


def _instances(record, where, mode, n_objects, problems):
    """Categories (P,) and boxes (P, 4) from any of the three instance-list spellings."""
    if "instances" in record or "annotation" in record:
        items = record.get("instances", record.get("annotation"))
        if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
            problems.append(f"{where}: field 'instances' must be a list of objects")
            return None, None
        categories = [i.get("category") for i in items]
        boxes = [i.get("bbox") for i in items]
    elif "categories" in record:
        categories, boxes = record["categories"], record.get("bboxes")
        if boxes is not None and (not isinstance(boxes, list) or len(boxes) != len(categories)):
            problems.append(f"{where}: field 'bboxes' must parallel 'categories'")
            return None, None
        boxes = boxes if boxes is not None else [None] * len(categories)
    else:
        problems.append(f"{where}: no instance list ('instances', 'annotation' or 'categories')")
        return None, None
    if not all(isinstance(c, int) and not isinstance(c, bool) for c in categories):
        problems.append(f"{where}: field 'category' must be an integer for every instance")
        return None, None
    category_array = np.array(categories, np.int64)
    _check_indices(category_array[:, None], "instance", [n_objects], ["category"], where, problems)
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
        return None, None
    if mode == "mask":
        return category_array, None
    return category_array, np.array([box[:4] for box in boxes], np.float64).reshape(-1, 4)


def read_predictions(pred_path, n_objects, n_predicates, mode):
    """Read triplets.json of a prediction; returns (PredSource, {image_id: PredImage})."""
    if not os.path.exists(pred_path):
        raise SGEvalError([f"{pred_path}: no such file or directory"])
    source = PredSource(pred_path)
    if str(pred_path).endswith(".zip") and source.kind != "zip":
        raise SGEvalError([f"{pred_path}: not a readable ZIP archive"])
    name = "triplets.json" if source.kind != "json" else os.path.basename(pred_path)
    try:
        raw = source.read(name)
        data = json.loads(raw)
    except (OSError, KeyError, ValueError, zipfile.BadZipFile) as error:
        raise SGEvalError([f"{pred_path}: cannot read {name}: {error}"]) from None
    if not isinstance(data, dict) or data.get("version") != 1:
        version = data.get("version") if isinstance(data, dict) else None
        raise SGEvalError([f"{pred_path}: field 'version' is {version!r}; this reader knows version 1"])
    if not isinstance(data.get("images"), list):
        raise SGEvalError([f"{pred_path}: field 'images' must be a list"])
    members = source.members()
    problems = [f"{pred_path}: ZIP member '{m}' has an absolute path or '..'"
                for m in sorted(members or ()) if _unsafe_member(m)]
    images = {}
    for index, record in enumerate(data["images"]):
        if not isinstance(record, dict) or not isinstance(record.get("id"), (int, str)) \
                or isinstance(record.get("id"), bool):
            problems.append(f"{pred_path}: images[{index}]: field 'id' must be an integer or string")
            continue
        image_id = str(record["id"])
        where = f"{pred_path}: image {image_id}"
        if image_id in images:
            problems.append(f"{where}: duplicate image id")
            continue
        categories, boxes = _instances(record, where, mode, n_objects, problems)
        if "triplets" not in record:
            problems.append(f"{where}: missing field 'triplets' (an empty list is valid)")
            continue
        triplets = _int_rows(record["triplets"], 3, "triplets", where, problems)
        ng_triplets = triplets
        if record.get("ng_triplets") is not None:
            ng_triplets = _int_rows(record["ng_triplets"], 3, "ng_triplets", where, problems)
        if categories is None or triplets is None or ng_triplets is None:
            continue
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
        images[image_id] = PredImage(image_id, categories, boxes, triplets, ng_triplets,
                                     seg_filename if isinstance(seg_filename, str) else None)
    if problems:
        raise SGEvalError(problems)
    return source, images


def _pack(masks_PHW):
    """Boolean (P, H, W) masks -> bit-packed (P, W) uint64 rows, zero padded."""
    count = len(masks_PHW)
    bits = np.packbits(masks_PHW.reshape(count, -1), axis=1)
    padded = np.zeros((count, -(-bits.shape[1] // 8) * 8), np.uint8)
    padded[:, : bits.shape[1]] = bits
    return padded.view(np.uint64)


def load_gt_masks(image):
    """Bit-packed (G, W) masks of one GT image from its panoptic PNG."""
    where = f"{image.seg_path}: image {image.image_id}"
    try:
        with Image.open(image.seg_path) as png:
            mode = png.mode
            rgb = np.asarray(png.convert("RGB")).astype(np.int64)
    except (OSError, ValueError) as error:
        raise SGEvalError([f"{where}: cannot read panoptic PNG: {error}"]) from None
    if mode not in ("RGB", "RGBA"):
        raise SGEvalError([f"{where}: panoptic PNG mode is {mode}, expected RGB"])
    if rgb.shape[:2] != (image.height, image.width):
        raise SGEvalError([f"{where}: panoptic PNG is {rgb.shape[1]}x{rgb.shape[0]}, "
                           f"field 'width'x'height' says {image.width}x{image.height}"])
    ids = rgb[..., 0] + 256 * rgb[..., 1] + 65536 * rgb[..., 2]
    return _pack(ids[None] == image.segment_ids[:, None, None])


def load_pred_masks(source, record, height, width):
    """Bit-packed (P, W) masks of one prediction from its TIFF (pages or 3-D page layers)."""
    where = f"{source.path}: image {record.image_id}: {record.seg_filename}"
    layers = []
    try:
        with tifffile.TiffFile(io.BytesIO(source.read(record.seg_filename))) as tiff:
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
    except SGEvalError:
        raise
    except Exception as error:  # tifffile and the codecs raise many types on corrupt data
        raise SGEvalError([f"{where}: cannot read TIFF: {type(error).__name__}: {error}"]) from None
    if len(layers) != len(record.categories):
        raise SGEvalError([f"{where}: {len(layers)} masks for {len(record.categories)} instances"])
    return _pack(np.stack(layers))


def write_predictions(path, images):
    """Write predictions in the sgeval/SGBench v1 format.

    ``path`` ending in ``.zip`` -> a ZIP of triplets.json and <id>.tiff; ``.json`` -> one JSON
    file (box mode, no masks); anything else -> a directory. ``images``: iterable of dicts with
    ``id``, ``instances`` ([{category, bbox, score?}]), ``triplets``, optional ``ng_triplets`` and
    optional ``masks`` ((P, H, W) bool or uint8; written as 1-bit deflate TIFF pages).
    """
    path = str(path)
    kind = "zip" if path.endswith(".zip") else "json" if path.endswith(".json") else "dir"
    records, files = [], []
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
            buffer = io.BytesIO()
            tifffile.imwrite(buffer, np.asarray(masks) != 0, photometric="minisblack",
                             compression=tifffile.COMPRESSION.ADOBE_DEFLATE)
            files.append((record["seg_filename"], buffer.getvalue()))
        records.append(record)
    payload = json.dumps({"version": 1, "images": records}).encode()
    if kind == "json":
        Path(path).write_bytes(payload)
    elif kind == "zip":
        with zipfile.ZipFile(path, "w") as archive:  # fixed dates: same input, same bytes
            archive.writestr(zipfile.ZipInfo("triplets.json", (1980, 1, 1, 0, 0, 0)), payload,
                             compress_type=zipfile.ZIP_DEFLATED)
            for name, data in files:  # TIFF pages are compressed already
                archive.writestr(zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0)), data)
    else:
        os.makedirs(path, exist_ok=True)
        Path(path, "triplets.json").write_bytes(payload)
        for name, data in files:
            Path(path, name).write_bytes(data)
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
def mask_areas(bits_NW):
    """Pixel count (N,) of bit-packed masks."""
    areas = np.zeros(bits_NW.shape[0], np.int64)
    for n in range(bits_NW.shape[0]):
        for w in range(bits_NW.shape[1]):
            areas[n] += popcount64(bits_NW[n, w])
    return areas


@numba.njit(cache=_JIT_CACHE)
def mask_iou(gt_bits_GW, gt_cat_G, pred_bits_PW, pred_cat_P):
    """IoU (P, G) of bit-packed masks; -1.0 where categories differ, 0.0 for an empty union."""
    gt_area, pred_area = mask_areas(gt_bits_GW), mask_areas(pred_bits_PW)
    iou = np.full((pred_bits_PW.shape[0], gt_bits_GW.shape[0]), -1.0)
    for p in range(pred_bits_PW.shape[0]):
        for g in range(gt_bits_GW.shape[0]):
            if pred_cat_P[p] != gt_cat_G[g]:
                continue
            inter = 0
            for w in range(gt_bits_GW.shape[1]):
                inter += popcount64(gt_bits_GW[g, w] & pred_bits_PW[p, w])
            union = gt_area[g] + pred_area[p] - inter
            iou[p, g] = inter / union if union > 0 else 0.0
    return iou


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


def _pair_ranks(pair_keys_N):
    """For each entry, the number of earlier entries with the same key."""
    order = np.argsort(pair_keys_N, kind="stable")
    ordered = pair_keys_N[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]]) if len(ordered) else order
    group_start = np.repeat(starts, np.diff(np.r_[starts, len(ordered)]))
    ranks = np.empty(len(pair_keys_N), np.int64)
    ranks[order] = np.arange(len(ordered)) - group_start
    return ranks


def image_counts(relations_R3, n_gt, pred_to_gt_P, triplets_N3, ng_triplets_M3, k_labels,
                 n_predicates, protocol):
    """All per-image integer counts (see COUNT_FIELDS) for one image."""
    C, n_pred = n_predicates, len(pred_to_gt_P)
    ks = k_values(k_labels, len(relations_R3))
    gt_pairs = relations_R3[:, 0] * n_gt + relations_R3[:, 1]
    gt_keys = gt_pairs * C + relations_R3[:, 2]
    predicate = relations_R3[:, 2]
    unique_gt_pairs = np.unique(gt_pairs)

    pred_pairs = triplets_N3[:, 0] * n_pred + triplets_N3[:, 1]
    pred_keys = pred_pairs * C + triplets_N3[:, 2]
    graph = pred_keys if protocol == "multimpo" else pred_pairs  # multimpo: no graph constraint
    selected = triplets_N3[_first_occurrences(graph)]
    sel_pairs, sel_keys = _mapped_keys(selected, pred_to_gt_P, n_gt, C)
    first_hit = first_positions(sel_keys, gt_keys)
    first_pair = first_positions(sel_pairs, unique_gt_pairs)

    ng_keys = (ng_triplets_M3[:, 0] * n_pred + ng_triplets_M3[:, 1]) * C + ng_triplets_M3[:, 2]
    ng_selected = ng_triplets_M3[_first_occurrences(ng_keys)]
    first_ng = first_positions(_mapped_keys(ng_selected, pred_to_gt_P, n_gt, C)[1], gt_keys)

    def hits_KC(first):
        return np.stack([np.bincount(predicate[(first >= 0) & (first < k)], minlength=C) for k in ks])

    matched = np.zeros(n_gt, bool)
    matched[pred_to_gt_P[pred_to_gt_P >= 0]] = True
    both_ends = matched[relations_R3[:, 0]] & matched[relations_R3[:, 1]]

    all_pairs, all_keys = _mapped_keys(ng_triplets_M3, pred_to_gt_P, n_gt, C)
    kept = np.flatnonzero(all_keys >= 0)
    kept = kept[_first_occurrences(all_keys[kept])]
    ranks = _pair_ranks(all_pairs[kept])
    position = first_positions(all_keys[kept], gt_keys)
    appears = position >= 0
    return {
        "gt_rel": np.bincount(predicate, minlength=C),
        "gc_hits": hits_KC(first_hit),
        "ng_hits": hits_KC(first_ng),
        "gt_pairs": np.int64(len(unique_gt_pairs)),
        "pair_hits": np.array([np.count_nonzero((first_pair >= 0) & (first_pair < k)) for k in ks]),
        "inf_hits": np.bincount(predicate[both_ends], minlength=C),
        "gt_inst": np.int64(n_gt),
        "inst_hits": np.int64(matched.sum()),
        "rank_sum": np.bincount(predicate[appears], ranks[position[appears]], minlength=C).astype(np.int64),
        "rank_n": np.bincount(predicate[appears], minlength=C),
        "audit": np.array([len(triplets_N3) - len(np.unique(pred_keys)),
                           len(triplets_N3) - len(np.unique(pred_pairs)),
                           np.count_nonzero(triplets_N3[:, 0] == triplets_N3[:, 1])]),
    }


AUDIT_FIELDS = ("repeated_triplets", "repeated_pairs", "self_pairs")
_NO_TRIPLETS = np.zeros((0, 3), np.int64)


def _evaluate_image(task):
    """Worker: (GTImage, PredImage | None, PredSource | None, static) -> (counts, problems)."""
    gt, pred, source, (mode, protocol, threshold, k_labels, n_predicates) = task
    pred_to_gt, triplets, ng_triplets = np.zeros(0, np.int64), _NO_TRIPLETS, _NO_TRIPLETS
    if pred is not None:
        triplets, ng_triplets = pred.triplets, pred.ng_triplets
        pred_to_gt = np.full(len(pred.categories), -1, np.int64)
        if len(pred.categories):
            try:
                if mode == "mask":
                    iou = mask_iou(load_gt_masks(gt), gt.categories,
                                   load_pred_masks(source, pred, gt.height, gt.width), pred.categories)
                else:
                    iou = box_iou(gt.boxes, gt.categories, pred.boxes, pred.categories)
            except SGEvalError as error:
                return None, error.problems
            pred_to_gt = MATCHERS[protocol](iou, threshold)
    counts = image_counts(gt.relations, len(gt.categories), pred_to_gt, triplets, ng_triplets,
                          k_labels, n_predicates, protocol)
    return counts, []


# ---------------------------------------------------------------------------------------------
# Aggregation: a pure function of the stacked counts
# ---------------------------------------------------------------------------------------------


def _mean_per_predicate(values_IC, defined_IC):
    """Per predicate, the mean over images where defined; NaN where never defined."""
    n_images = defined_IC.sum(axis=0)
    total = np.where(defined_IC, values_IC, 0.0).sum(axis=0)
    return np.where(n_images > 0, total / np.maximum(n_images, 1), np.nan)


def _ratio(hits, total):
    return hits / np.maximum(total, 1)


def aggregate(counts, k_labels, metrics=METRIC_FAMILIES, absent_predicates="skip"):
    """Metric values (float, NaN when undefined) and per-predicate arrays from stacked counts.

    counts: {field: array with a leading image axis I}, as image_counts returns per image.
    Returns (metrics {key: float}, per_predicate {key: (C,) float array}).
    """
    gt_rel = counts["gt_rel"]  # (I, C)
    present = gt_rel > 0
    present_any = present.any(axis=0)

    def m_type(hits_IC):
        per_predicate = _mean_per_predicate(_ratio(hits_IC, gt_rel), present)
        values = per_predicate[present_any]
        if not values.size:
            return np.nan, per_predicate
        if absent_predicates == "zero":
            return values.sum() / len(per_predicate), per_predicate
        return values.mean(), per_predicate

    def mean(values_I):
        return float(values_I.mean()) if values_I.size else np.nan

    out, per_predicate = {}, {}
    n_relations = gt_rel.sum(axis=1)
    for family, field in (("R", "gc_hits"), ("mR", "gc_hits"), ("ngR", "ng_hits"), ("mNgR", "ng_hits")):
        if family in metrics:
            for index, label in enumerate(k_labels):
                hits = counts[field][:, index, :]
                key = f"{family}@{label}"
                if family.startswith("m"):
                    out[key], per_predicate[key] = m_type(hits)
                else:
                    out[key] = mean(_ratio(hits.sum(axis=1), n_relations))
    if "PR" in metrics:
        for index, label in enumerate(k_labels):
            out[f"PR@{label}"] = mean(_ratio(counts["pair_hits"][:, index], counts["gt_pairs"]))
    if "InstR" in metrics:
        out["InstR"] = mean(_ratio(counts["inst_hits"], counts["gt_inst"]))
    if "Rinf" in metrics:
        out["R@inf"] = mean(_ratio(counts["inf_hits"].sum(axis=1), n_relations))
        out["mR@inf"], per_predicate["mR@inf"] = m_type(counts["inf_hits"])
    if "PRank" in metrics:
        rank_n = counts["rank_n"]
        per_predicate["PRank"] = _mean_per_predicate(_ratio(counts["rank_sum"], rank_n), rank_n > 0)
        defined = per_predicate["PRank"][~np.isnan(per_predicate["PRank"])]
        out["PRank"] = float(defined.mean()) if defined.size else np.nan
    return {key: float(value) for key, value in out.items()}, per_predicate


def stack_counts(per_image, n_k, n_predicates):
    """Stack per-image count dicts into arrays with a leading image axis (I may be 0)."""
    shapes = {"gt_rel": (n_predicates,), "gc_hits": (n_k, n_predicates), "ng_hits": (n_k, n_predicates),
              "gt_pairs": (), "pair_hits": (n_k,), "inf_hits": (n_predicates,), "gt_inst": (),
              "inst_hits": (), "rank_sum": (n_predicates,), "rank_n": (n_predicates,),
              "audit": (len(AUDIT_FIELDS),)}
    return {field: np.array([c[field] for c in per_image], np.int64).reshape((len(per_image),) + shape)
            for field, shape in shapes.items()}


# ---------------------------------------------------------------------------------------------
# Evaluation driver and report
# ---------------------------------------------------------------------------------------------


def _run(tasks, workers, progress):
    """Evaluate tasks in order (deterministic for any worker count)."""
    if workers <= 1 or len(tasks) < 2:
        results = map(_evaluate_image, tasks)
        for done, result in enumerate(results, 1):
            if progress:
                progress(done, len(tasks))
            yield result
        return
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    with context.Pool(workers) as pool:
        chunks = max(1, len(tasks) // (workers * 16))
        for done, result in enumerate(pool.imap(_evaluate_image, tasks, chunksize=chunks), 1):
            if progress:
                progress(done, len(tasks))
            yield result


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
    mode = "mask" if config.gt_seg else "box"
    gt = read_gt(config.gt, config.gt_seg)
    n_predicates = len(gt.predicate_classes)
    source, predictions = read_predictions(config.pred, len(gt.object_classes), n_predicates, mode)
    static = (mode, config.protocol, config.iou_threshold, config.k, n_predicates)
    tasks = [(image, predictions.get(image.image_id), source, static) for image in gt.images]
    evaluated_ids = {image.image_id for image in gt.images}
    per_image, problems = [], []
    try:
        for counts, image_problems in _run(tasks, config.workers, progress):
            problems.extend(image_problems)
            if counts is not None:
                per_image.append(counts)
    finally:
        source.close()
    if problems:
        raise SGEvalError(problems)
    counts = stack_counts(per_image, len(config.k), n_predicates)
    metrics, per_predicate = aggregate(counts, config.k, config.metrics, config.absent_predicates)
    present = counts["gt_rel"].sum(axis=0) > 0
    names = gt.predicate_classes
    n_images = max(len(per_image), 1)
    audit_totals = counts["audit"].sum(axis=0)
    results = {
        "sgeval_version": __version__,
        "config": dataclasses.asdict(config),
        "images": {
            "evaluated": len(gt.images),
            "missing_predictions": sum(task[1] is None for task in tasks),
            "skipped_no_relations": gt.skipped_no_relations,
            "extra_predictions": len(set(predictions) - evaluated_ids),
        },
        "metrics": {key: _none_if_nan(value) for key, value in metrics.items()},
        "per_predicate": {
            key: {names[c]: _none_if_nan(float(values[c])) for c in np.flatnonzero(present)}
            for key, values in per_predicate.items()
        },
        "absent_predicates": [names[c] for c in np.flatnonzero(~present)],
        "protocol_audit": {
            **{field: int(total) for field, total in zip(AUDIT_FIELDS, audit_totals)},
            "per_image_mean": {field: float(total) / n_images for field, total in zip(AUDIT_FIELDS, audit_totals)},
        },
    }
    results["config"]["k"] = list(config.k)
    results["config"]["metrics"] = list(config.metrics)
    if config.output:
        Path(config.output).parent.mkdir(parents=True, exist_ok=True)
        Path(config.output).write_text(json.dumps(results, indent=1) + "\n")
        log.info("wrote %s", config.output)
    return results


def format_table(results):
    """The terminal report: metrics in percent with one decimal (PRank as a mean rank)."""
    config, metrics = results["config"], results["metrics"]
    fmt = lambda v, scale=100.0: "-" if v is None else f"{scale * v:.{1 if scale == 100 else 2}f}"  # noqa: E731
    ks = config["k"]
    lines = [f"sgeval {results['sgeval_version']} | protocol {config['protocol']} | "
             f"{'mask' if config['gt_seg'] else 'box'} mode | images: "
             + ", ".join(f"{key.replace('_', ' ')} {value}" for key, value in results["images"].items())]
    rows = [family for family in ("R", "mR", "ngR", "mNgR", "PR") if f"{family}@{ks[0]}" in metrics]
    if rows:
        lines.append(f"{'':<6}" + "".join(f"{'@' + k:>8}" for k in ks))
        lines += [f"{family:<6}" + "".join(f"{fmt(metrics[f'{family}@{k}']):>8}" for k in ks)
                  for family in rows]
    extras = [(key, fmt(metrics[key], 1.0 if key == "PRank" else 100.0))
              for key in ("InstR", "R@inf", "mR@inf", "PRank") if key in metrics]
    if extras:
        lines.append("  ".join(f"{key} {value}" for key, value in extras) + "   (PRank: mean rank, lower is better)"
                     * ("PRank" in metrics))
    if results["absent_predicates"]:
        rule = "counted as 0" if config["absent_predicates"] == "zero" else "not in m-type means"
        lines.append(f"absent predicates ({len(results['absent_predicates'])}, {rule}): "
                     + ", ".join(results["absent_predicates"]))
    audit = results["protocol_audit"]
    lines.append("protocol audit (per image): " + ", ".join(
        f"{field.replace('_', ' ')} {audit['per_image_mean'][field]:.2f}" for field in AUDIT_FIELDS))
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="YAML config file.")
@click.option("--gt", help="OpenPSG psg.json.")
@click.option("--gt-seg", help="Panoptic PNG root (mask mode); omit for box mode.")
@click.option("--pred", help="Predictions: .json, .zip or directory.")
@click.option("--protocol", type=click.Choice(PROTOCOLS), help="Instance matching protocol.")
@click.option("--k", help="Cut-offs, e.g. 20,50,100,x1,x10.")
@click.option("--metrics", help=f"Metric families, comma-separated: {','.join(METRIC_FAMILIES)}.")
@click.option("--iou-threshold", type=float, help="Minimum IoU for a match (default 0.5).")
@click.option("--absent-predicates", type=click.Choice(["skip", "zero"]), help="Absent predicates in m-type means.")
@click.option("--workers", type=int, help="Worker processes (default 1).")
@click.option("--output", help="Write the JSON results here.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
def main(config_path, quiet, **options):
    """Evaluate scene graph predictions against OpenPSG ground truth."""
    bar = None

    def progress(done, total):
        nonlocal bar
        if bar is None:
            bar = click.progressbar(length=total, label="evaluating", file=sys.stderr)
        bar.update(1)

    try:
        config = load_config(config_path, **options)
        results = evaluate(config, progress=None if quiet else progress)
    except SGEvalError as error:
        failure = error
    else:
        failure = None
    if bar is not None:
        bar.render_finish()
    if failure is not None:
        for problem in failure.problems:
            click.echo(f"error: {problem}", err=True)
        sys.exit(1)
    click.echo(format_table(results))
    if config.output:
        click.echo(f"results written to {config.output}", err=True)


if __name__ == "__main__":
    main()
