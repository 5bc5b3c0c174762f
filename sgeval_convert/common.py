"""Shared machinery of the converters: the raw-output readers, the per-image conversion rules, and
the conversion loop that streams images into ``sgeval.write_predictions``.

Raw outputs
-----------
OpenPSG-derived code (``tools/test.py --out results.pkl``) pickles a list with one ``Result`` per
evaluated test image, aligned by position with the ``psg.json`` ``data`` entries whose ``image_id``
is in ``test_image_ids`` and that have at least one relation (2,177 on PSG). No image ids are
stored, so the two counts must agree. A raw output may instead be a directory of ``0.npz ...
N-1.npz`` or ``0.pkl ... N-1.pkl`` (one result per file, the same field names).

Fields used (N instances, R relation rows, C predicates, H x W the GT image size)::

    labels          (N,)        1-based object classes (category = label - 1)
    masks           (N, H, W)   bool or integers (non-zero = inside), original image size
    refine_bboxes   (N, 5)      xyxy + object score, where the family has them aligned with labels
    rel_pair_idxes  (R, 2)      subject, object: indices into labels
    rel_dists       (R, C + 1)  predicate probabilities, column 0 = no relation
    rel_labels      (R,)        1-based predicates, like the columns of rel_dists

Pickles are read by the restricted unpickler (unpickler.py: only data, never code; streamed, one
result at a time, large data left in the file until a worker reads it); ``iter_pickle`` and
``load_pickle`` turn what it refuses into ``ConvertError`` lines. An .npz array's size is read from
its header and checked (``MAX_NPZ_BYTES``) before it is loaded. ``convert_all`` converts and
encodes images in ``workers`` processes, in order.

Per-image rules (``result_arrays``; each family picks the ``Rules``, see README.md)
-------------------------------------------------------------------------------------------
One image's conversion gives the keyword arguments of ``sgeval.Evaluator.update`` (``labels``,
``triplets``, ``ng_triplets``, ``masks``, ``boxes``, ``scores``: ``update_arrays``). Each family's
public ``image_arrays`` returns them for a result handed over in a test loop (torch tensors
allowed); the file converter writes the record ``as_record`` derives from the same arrays.

* ``triplets``: every relation row once, in the model's row order, repeated rows and self-pairs
  included (each protocol's selection decides what to skip); predicate = argmax of
  ``rel_dists[:, 1:]`` (OpenPSG's rule, first column on ties) or ``rel_labels - 1``.
* ``ng_triplets``: every (row, predicate) ranked as OpenPSG ranks them for no-graph-constraint
  recall: by (subject score x object score) x probability in the arrays' own dtype, or by the
  probability alone without object scores; descending, ties in row then predicate order. Repeats
  of an (s, o, p) from rows that share a pair stay where they rank (protocols that want distinct
  triplets drop them when they read the list). Kept: everything up to the ``ng_top``-th distinct
  triplet, and beyond it the first occurrence of the first ``ng_per_predicate`` distinct triplets
  of every predicate (defaults 1000 and 50: enough for ngR@100 and IMR@50).
* ``instances``: category = label - 1; bbox = ``refine_bboxes[:, :4]`` when the rules allow it and
  the rows are aligned with labels, finite, ordered (x1 <= x2, y1 <= y2) and not all zero, else the
  tight box of the mask (x_min, y_min, x_max + 1, y_max + 1; zeros for an empty mask); score =
  ``refine_bboxes[:, 4]`` when the rules allow it, aligned and not all zero, else no score.
* Empty results (no instances, or the one-stage placeholder: a single all-ones mask with label 1
  and no pairs) become records with no instances and no triplets: the image counts with zero hits
  (``openpsg``, as OpenPSG, leaves it out).

Masks are written by ``sgeval.write_predictions`` (1-bit deflate TIFF pages), image by image;
the output is validated with sgeval's own reader (every TIFF's page count and size) before it
replaces the target file.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import logging
import math
import multiprocessing
import os
import time
from pathlib import Path

import click
import numpy as np

import sgeval

from .unpickler import (RESULT_CLASSES, NotAList, RawResult, Refused, RestrictedUnpickler, TorchObject,
                        TorchTensor, materialize, real_arrays)

log = logging.getLogger("sgeval.convert")

PREDICATE_SOURCES = ("rel_dists", "rel_labels")
NG_TOP, NG_PER_PREDICATE = 1000, 50
PROVENANCE = "convert.json"  # ZIP member recording what was converted (read by `python -m convert`)


class ConvertError(sgeval.SGEvalError):
    """Bad raw output or options; ``problems`` holds one line per problem (file, result, field)."""


def open_regular(path, what):
    """sgeval.open_regular (a FIFO, a device or a directory is refused without blocking), its
    refusal a ConvertError; OSError when the file cannot be opened."""
    try:
        return sgeval.open_regular(path, what)
    except sgeval.SGEvalError as error:
        raise ConvertError(error.problems) from None


# ---------------------------------------------------------------------------------------------
# Pickles, through the restricted unpickler (unpickler.py)
# ---------------------------------------------------------------------------------------------


def iter_pickle(path, position=None, lazy=False):
    """The results in a pickle of a list, one RawResult at a time (see RestrictedUnpickler.items);
    ConvertError for refused globals or unreadable data, naming the result reached. position: an
    optional one-element list that receives the bytes passed after each result. lazy: large arrays
    stay in the file (unpickler.materialize reads them, in another process if wanted)."""
    reached = 0
    try:
        with open_regular(path, "the pickle") as handle:
            for item in RestrictedUnpickler(handle, str(path) if lazy else None).items():
                if position is not None:
                    position[0] = handle.tell()
                yield _as_result(item, path, reached)
                reached += 1
    except Refused as refused:
        raise ConvertError([_refusal(f"{path}: result {reached}", refused)]) from None
    except NotAList as not_list:
        raise ConvertError([f"{path}: the pickle holds a {not_list}; expected a list with one Result per "
                            f"evaluated image"]) from None
    except OSError as error:
        raise ConvertError([f"{path}: cannot read: {error}"]) from None
    except ConvertError:
        raise
    except Exception as error:  # corrupt or truncated pickles raise many exception types
        raise ConvertError([f"{path}: cannot read the pickle at result {reached} (counting from 0; the ones "
                            f"before it were read): {type(error).__name__}: {error}"]) from None


def _refusal(where, refused):
    return (f"{where}: refusing to load the pickle: it refers to {refused}, which is neither numpy data, a "
            f"Result ({', '.join(RESULT_CLASSES)}) nor a torch tensor; only data, never code, is read from a pickle")


def _as_result(item, path, index):
    if isinstance(item, dict) and all(isinstance(key, str) for key in item):
        item = RawResult(item)
    if not isinstance(item, RawResult):
        raise ConvertError([f"{path}: result {index} is a {type(item).__name__}, not a Result"])
    return item


def load_pickle(path):
    """The list of RawResult in a pickle, all at once (iter_pickle streams them)."""
    return list(iter_pickle(path))


# ---------------------------------------------------------------------------------------------
# Raw readers: one zero-argument loader per image
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass
class RawInput:
    """A raw output being read: ``sources`` yields one source per image, a RawResult whose large
    arrays may still be in the pickle file, or the path of a per-image file (load_source makes
    either a RawResult, in a worker process if wanted); ``count`` is the number of images when known
    before reading (None for a pickle); ``bytes_read()`` how much has been passed so far."""

    count: int | None
    sources: object
    bytes_read: object


def open_raw(path):
    """A pickle of a list of results, or a directory of 0.npz ... N-1.npz or 0.pkl ... N-1.pkl (one
    result each) -> RawInput. A pickle is streamed: an unreadable part ends the pass (ConvertError
    from the iteration); a bad per-image file is one problem of that image (from load_source)."""
    if os.path.isdir(path):
        return _open_dir(path)
    if not os.path.exists(path):
        raise ConvertError([f"{path}: no such file or directory"])
    position = [0]
    return RawInput(None, iter_pickle(path, position, lazy=True), lambda: position[0])


def load_source(source, where):
    """A RawInput source -> its RawResult, every array read; ConvertError naming the file (where:
    the image's file and result index)."""
    if isinstance(source, RawResult):
        try:
            return materialize(source)
        except (OSError, ValueError, Refused) as error:
            raise ConvertError([f"{where}: cannot read its data from the pickle: {error}"]) from None
    return load_npz(source) if source.endswith(".npz") else _load_one_pickle(source)


def _open_dir(path):
    names = {entry.name for entry in os.scandir(path) if entry.name.endswith((".npz", ".pkl"))}
    suffix = ".npz" if any(name.endswith(".npz") for name in names) else ".pkl"
    expected = {f"{index}{suffix}" for index in range(len(names))}
    if names != expected:
        stray = sorted(names - expected)
        missing = sorted(expected - names, key=lambda name: int(name[:-4]))
        raise ConvertError([f"{path}: expected 0{suffix} ... {len(names) - 1}{suffix} (one per image, all .npz or "
                            f"all .pkl); missing {', '.join(missing[:5])}{' ...' * (len(missing) > 5)}; "
                            f"unexpected {', '.join(stray[:5])}{' ...' * (len(stray) > 5)}"])
    files = [os.path.join(path, f"{index}{suffix}") for index in range(len(names))]
    done = [0]

    def sources():
        for file in files:
            done[0] += os.path.getsize(file)
            yield file

    return RawInput(len(files), sources(), lambda: done[0])


def _load_one_pickle(file):
    """The one result of a per-image pickle (a Result, or a list holding one)."""
    try:
        handle = open_regular(file, "the pickle")
    except OSError as error:
        raise ConvertError([f"{file}: cannot read the pickle: {error}"]) from None
    try:
        with handle:
            item = real_arrays(RestrictedUnpickler(handle).load())
    except Refused as refused:
        raise ConvertError([_refusal(file, refused)]) from None
    except Exception as error:  # noqa: BLE001 -- corrupt or truncated pickles raise many exception types
        raise ConvertError([f"{file}: cannot read the pickle: {type(error).__name__}: {error}"]) from None
    if isinstance(item, list) and len(item) == 1:
        item = item[0]
    return _as_result(item, file, 0)


MAX_NPZ_BYTES = 1 << 32  # the arrays of one .npz, as their headers declare them


def load_npz(file):
    try:
        with open_regular(file, "the npz file") as handle, np.load(handle, allow_pickle=False) as archive:
            _check_npz_sizes(archive.zip, file)
            return RawResult({key: archive[key] for key in archive.files})
    except ConvertError:
        raise
    except sgeval.READ_ERRORS as error:
        raise ConvertError([f"{file}: cannot read the npz file: {type(error).__name__}: {error}"]) from None


def _check_npz_sizes(archive, file):
    """Every array's size from its .npy header, against its member's size and MAX_NPZ_BYTES, before
    numpy allocates it."""
    total = 0
    for info in archive.infolist():
        with archive.open(info) as member:
            version = np.lib.format.read_magic(member)
            shape, _, dtype = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                               else np.lib.format.read_array_header_2_0)(member)
        size = math.prod(shape) * dtype.itemsize
        total += size
        if size > info.file_size or total > MAX_NPZ_BYTES:
            raise ConvertError([f"{file}: member {info.filename} declares {size} bytes of array data"
                                + (f" in a {info.file_size}-byte member" if size > info.file_size else
                                   f"; the arrays of one .npz may hold {MAX_NPZ_BYTES} (MAX_NPZ_BYTES)")])


# ---------------------------------------------------------------------------------------------
# Per-image conversion
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Rules:
    """What a family's raw arrays mean (see the module docstring and README.md)."""

    raw_boxes: bool = True  # refine_bboxes[:, :4] are xyxy boxes of the instances (when aligned)
    object_scores: bool = True  # refine_bboxes[:, 4] are object scores (when aligned, not all zero)
    empty_placeholder: bool = True  # one all-ones mask, label 1, no pairs = an empty result


@dataclasses.dataclass(frozen=True)
class Options:
    """The user's choices, shared by every family."""

    predicate_source: str = "rel_dists"  # rel_dists: argmax of rel_dists[:, 1:]; rel_labels: rel_labels - 1
    ng_top: int = NG_TOP  # ng_triplets kept overall ...
    ng_per_predicate: int = NG_PER_PREDICATE  # ... and per predicate

    def check(self):
        problems = []
        if self.predicate_source not in PREDICATE_SOURCES:
            problems.append(f"predicate_source '{self.predicate_source}' is not one of {', '.join(PREDICATE_SOURCES)}")
        for name in ("ng_top", "ng_per_predicate"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                problems.append(f"{name} must be a non-negative integer, not {value!r}")
        if problems:
            raise ConvertError(problems)
        return self


def update_arrays(labels, triplets, ng_triplets, masks=None, boxes=None, scores=None):
    """The keyword arguments of ``sgeval.Evaluator.update`` for one image, in fixed dtypes:
    labels (P,) int64, 0-based categories; triplets (N, 3) and ng_triplets (M, 3) int64 [s, o, p],
    best first; masks (P, H, W) bool or None; boxes (P, 4) float64 xyxy or None; scores (P,)
    float64 or None."""
    return {"labels": np.asarray(labels, np.int64).reshape(-1),
            "triplets": np.asarray(triplets, np.int64).reshape(-1, 3),
            "ng_triplets": np.asarray(ng_triplets, np.int64).reshape(-1, 3),
            "masks": None if masks is None else np.asarray(masks, bool),
            "boxes": None if boxes is None else np.asarray(boxes, np.float64).reshape(-1, 4),
            "scores": None if scores is None else np.asarray(scores, np.float64).reshape(-1)}


def as_record(arrays, notes):
    """(record, masks, notes) for the file converter from one image's update_arrays: the record
    holds ``instances`` (category, bbox when boxes are given, score when scores are), ``triplets``
    and ``ng_triplets``; masks are arrays["masks"]."""
    boxes, scores = arrays["boxes"], arrays["scores"]
    instances = [{"category": int(category)} for category in arrays["labels"]]
    for instance, box in zip(instances, [] if boxes is None else boxes):
        instance["bbox"] = [float(v) for v in box]
    for instance, score in zip(instances, [] if scores is None else scores):
        instance["score"] = float(score)
    record = {"instances": instances, "triplets": arrays["triplets"], "ng_triplets": arrays["ng_triplets"]}
    return record, arrays["masks"], notes


def empty_arrays(image):
    """(update_arrays, notes) of a mask family's image without predictions: no instances, no
    triplets, masks (0, H, W) (zero hits; openpsg leaves it out)."""
    arrays = update_arrays(np.zeros(0), np.zeros((0, 3)), np.zeros((0, 3)),
                           np.zeros((0, image.height, image.width), bool), np.zeros((0, 4)))
    return arrays, collections.Counter(images=1, empty=1)


def as_result(result):
    """A raw result as the converters read it: a RawResult as it is; a dict, or an object keeping
    its fields as attributes (an OpenPSG ``Result``: its ``__dict__`` is what pickle saves), as a
    RawResult of those fields."""
    if isinstance(result, RawResult):
        return result
    fields = result if isinstance(result, dict) else getattr(result, "__dict__", None)
    if not isinstance(fields, dict):
        raise ConvertError([f"a result must be a Result (an object with attributes) or a dict, not "
                            f"{type(result).__name__}"])
    return RawResult(fields)


def is_tensor(value):
    """Whether value is a torch tensor (it has ``detach``), told without importing torch."""
    return callable(getattr(value, "detach", None))


def as_numpy(value):
    """A torch tensor on any device as a numpy array (``detach().cpu().numpy()``); anything else
    unchanged."""
    return value.detach().cpu().numpy() if is_tensor(value) else value


def image_where(image):
    """How problems name an image converted outside a file (in a test loop)."""
    return f"image {image.image_id}"


def field(result, name, where, required=True):
    """A field as a numeric numpy array, or None when absent and not required. A one-element list
    around an array (two-stage results) is unwrapped; torch tensors are read with as_numpy; empty
    torch tensors of a pickle are empty arrays."""
    value = result.get(name)
    if isinstance(value, (list, tuple)) and len(value) == 1 and (
            isinstance(value[0], (np.ndarray, TorchObject)) or is_tensor(value[0])):
        value = value[0]
    value = as_numpy(value)
    if value is None:
        if required:
            raise ConvertError([f"{where}: missing field '{name}'"])
        return None
    if isinstance(value, TorchTensor):
        raise ConvertError([f"{where}: field '{name}' is a torch tensor of shape {value.shape} with data, "
                            f"which cannot be read without torch; save it as a numpy array"])
    if isinstance(value, TorchObject):
        raise ConvertError([f"{where}: field '{name}' is a torch object; save it as a numpy array"])
    try:
        array = np.asarray(value)
    except (TypeError, ValueError):
        array = np.asarray([], object)
    if array.dtype.kind not in "biuf":
        raise ConvertError([f"{where}: field '{name}' must be a numeric array, not {type(value).__name__}"])
    return array


def has_shape(array, shape):
    """True when the array has the axes of ``shape`` (a tuple of lengths, None = any length)."""
    return array.ndim == len(shape) and all(n is None or n == m for n, m in zip(shape, array.shape))


def shape_text(shape):
    """``shape`` as messages show it: (n, 4) for (None, 4)."""
    return "(" + ", ".join("n" if n is None else str(n) for n in shape) + ")"


def _integers(array, name, shape, where):
    """Check an integer-valued array of the given shape (None = any length) and return it as int64."""
    if not has_shape(array, shape) or (array.dtype.kind == "f" and not np.array_equal(array, np.round(array))):
        raise ConvertError([f"{where}: field '{name}' has shape {array.shape}, dtype {array.dtype}; "
                            f"expected integers of shape {shape_text(shape)}"])
    return array.astype(np.int64)


def out_of_range(values, low, high, name, where, meaning):
    bad = np.flatnonzero((values < low) | (values > high))
    if bad.size:
        raise ConvertError([f"{where}: field '{name}' holds {int(values.flat[bad[0]])} at position "
                            f"{int(bad[0])}{f' (and {bad.size - 1} more)' * (bad.size > 1)}; {meaning}"])


def is_complete_layout(pairs_R2, n_instances):
    """True for the one-stage 'complete' layout: 2R instances, rows [[i, R + i]]."""
    count = len(pairs_R2)
    return count > 0 and n_instances == 2 * count and np.array_equal(
        pairs_R2, np.column_stack([np.arange(count), count + np.arange(count)]))


def mask_boxes(masks_NHW):
    """Tight xyxy boxes (N, 4) float64 of (N, H, W) masks: (x_min, y_min, x_max + 1, y_max + 1),
    zeros for an empty mask."""
    height, width = masks_NHW.shape[1:]
    rows, cols = masks_NHW.any(axis=2), masks_NHW.any(axis=1)
    boxes = np.stack([cols.argmax(axis=1), rows.argmax(axis=1),
                      width - cols[:, ::-1].argmax(axis=1), height - rows[:, ::-1].argmax(axis=1)], axis=1)
    boxes[~rows.any(axis=1)] = 0
    return boxes.astype(np.float64)


def rank_ng(pairs_R2, probabilities_RC, object_scores_P, ng_top, ng_per_predicate):
    """ng_triplets (M, 3) [s, o, p]: every (row, predicate) ranked as OpenPSG's no-graph-constraint
    recall ranks them: by (subject score x object score) x probability, computed in the arrays'
    own dtype (float32 for real models), or by the probability alone when object_scores_P is None;
    descending and stable (row, then predicate order). Kept: every entry, repeats of an (s, o, p)
    included, up to the first ng_top distinct triplets, and beyond them the first occurrence of the
    first ng_per_predicate distinct triplets of every predicate.

    Only the entries that can be kept are sorted: those at or above the score of the (k)-th best
    entry overall and of every predicate's column, k growing until those entries hold enough
    distinct triplets (repeated pairs make more entries necessary)."""
    scores = probabilities_RC if object_scores_P is None else \
        object_scores_P[pairs_R2].prod(axis=1)[:, None] * probabilities_RC
    overall, per_column = ng_top + 1, ng_per_predicate
    while True:
        kept = _rank_ng_prefix(pairs_R2, scores, overall, per_column, ng_top, ng_per_predicate)
        if kept[0] is not None:
            return kept[0]
        overall, per_column = overall * kept[1], per_column * kept[2]


def _kth_best(values, k):
    """The k-th largest of values (N,), or of every column of values (N, C): -inf where there are
    fewer than k (everything is needed), +inf for k = 0 (nothing is)."""
    if k <= 0 or k > len(values):
        return np.full(values.shape[1:], np.inf if k <= 0 else -np.inf)
    return -np.partition(-values, k - 1, axis=0)[k - 1]


def _rank_ng_prefix(pairs_R2, scores, overall, per_column, ng_top, ng_per_predicate):
    """rank_ng from the entries scoring at least the overall-th best score or their column's
    per_column-th best, sorted as all entries would be: (triplets, 1, 1), or (None, grow overall,
    grow per_column) when those complete prefixes hold too few distinct triplets."""
    n_predicates = scores.shape[1]
    floor_all, floor_column = _kth_best(scores.ravel(), overall), _kth_best(scores, per_column)
    index = np.flatnonzero((scores >= floor_all) | (scores >= floor_column[None, :]))
    flat = scores.ravel()[index]
    order = index[np.argsort(-flat, kind="stable")]  # the global order of these entries (ties: index order)
    rows, predicates = np.divmod(order, n_predicates)
    triplets = np.column_stack([pairs_R2[rows, 0], pairs_R2[rows, 1], predicates]).astype(np.int64)
    span = int(pairs_R2.max(initial=0)) + 1
    keys = (triplets[:, 0] * span + triplets[:, 1]) * n_predicates + triplets[:, 2]
    first = np.zeros(len(keys), bool)
    first[np.unique(keys, return_index=True)[1]] = True
    ordered = scores.ravel()[order]
    complete = int(np.count_nonzero(ordered >= floor_all))  # a prefix: the order is descending
    new = np.cumsum(first[:complete])
    grow_all = 1 if np.isneginf(floor_all) or (complete and new[-1] > ng_top) else 4
    rank_in_predicate = np.full(len(keys), ng_per_predicate)
    grow_column = 1
    for predicate in np.unique(predicates):
        members = np.flatnonzero(first & (predicates == predicate))
        rank_in_predicate[members] = np.arange(len(members))
        in_column = np.count_nonzero(first & (predicates == predicate) & (ordered >= floor_column[predicate]))
        if in_column < ng_per_predicate and not np.isneginf(floor_column[predicate]):
            grow_column = 4
    if grow_all > 1 or grow_column > 1:
        return None, grow_all, grow_column
    keep = np.zeros(len(keys), bool)
    keep[:complete] = new <= ng_top
    keep |= rank_in_predicate < ng_per_predicate
    return triplets[keep], 1, 1


def _raw_boxes(refine_bboxes, n_instances):
    """refine_bboxes[:, :4] as float64 when aligned, finite, ordered and not all zero, else None."""
    if refine_bboxes is None or refine_bboxes.ndim != 2 or refine_bboxes.shape[0] != n_instances \
            or refine_bboxes.shape[1] < 4:
        return None
    boxes = refine_bboxes[:, :4].astype(np.float64)
    ordered = (boxes[:, 2] >= boxes[:, 0]) & (boxes[:, 3] >= boxes[:, 1])
    return boxes if np.isfinite(boxes).all() and ordered.all() and boxes.any() else None


def _object_scores(refine_bboxes, n_instances, where):
    """refine_bboxes[:, 4] (as stored) when aligned and not all zero, else None."""
    if refine_bboxes is None or refine_bboxes.ndim != 2 or refine_bboxes.shape != (n_instances, 5):
        return None
    scores = refine_bboxes[:, 4]
    if not np.isfinite(scores).all():
        raise ConvertError([f"{where}: field 'refine_bboxes' holds a NaN or inf object score (column 4)"])
    return scores if scores.any() else None


def result_arrays(result, image, where, n_objects, n_predicates, rules, options):
    """One raw result (a RawResult) of a mask family -> (update_arrays, notes Counter). ``image``
    is the sgeval.GTImage the result belongs to; ``where`` names it in problems."""
    labels = _integers(field(result, "labels", where), "labels", (None,), where)
    if len(labels) == 0:
        return empty_arrays(image)
    out_of_range(labels, 1, n_objects, "labels", where, f"labels are 1-based object classes 1..{n_objects}")
    masks = field(result, "masks", where)
    if masks.shape != (len(labels), image.height, image.width):
        raise ConvertError([f"{where}: field 'masks' has shape {masks.shape}; expected "
                            f"({len(labels)}, {image.height}, {image.width}) (one mask per label, GT image size)"])
    masks = masks != 0 if masks.dtype != np.bool_ else masks
    pairs = field(result, "rel_pair_idxes", where, required=False)
    pairs = np.zeros((0, 2), np.int64) if pairs is None or pairs.size == 0 else \
        _integers(pairs, "rel_pair_idxes", (None, 2), where)
    if rules.empty_placeholder and len(labels) == 1 and len(pairs) == 0 and labels[0] == 1 and masks.all():
        return empty_arrays(image)
    out_of_range(pairs, 0, len(labels) - 1, "rel_pair_idxes", where, f"only {len(labels)} instances exist")
    notes = collections.Counter(images=1)
    predicates, probabilities = _relation_rows(result, len(pairs), n_predicates, where, options, notes)
    notes["self_pairs"] += int(np.count_nonzero(pairs[:, 0] == pairs[:, 1]))
    refine_bboxes = field(result, "refine_bboxes", where, required=False)
    raw_boxes = _raw_boxes(refine_bboxes, len(labels)) if rules.raw_boxes else None
    boxes = mask_boxes(masks) if raw_boxes is None else raw_boxes
    scores = _object_scores(refine_bboxes, len(labels), where) if rules.object_scores else None
    ng_triplets = rank_ng(pairs, probabilities, scores, options.ng_top, options.ng_per_predicate)
    arrays = update_arrays(labels - 1, np.column_stack([pairs, predicates]), ng_triplets, masks, boxes, scores)
    notes.update(instances=len(labels), triplets=len(pairs), ng_triplets=len(ng_triplets),
                 object_scores=int(scores is not None), raw_boxes=int(raw_boxes is not None))
    return arrays, notes


def convert_image(result, image, where, n_objects, n_predicates, rules, options):
    """One raw result -> (record {instances, triplets, ng_triplets}, masks (N, H, W) bool or None,
    notes Counter): result_arrays as the file converter writes them (as_record)."""
    return as_record(*result_arrays(result, image, where, n_objects, n_predicates, rules, options))


def _relation_rows(result, n_rows, n_predicates, where, options, notes):
    """Predicates (R,) 0-based and probabilities (R, C) (rel_dists[:, 1:] as stored) of the relation rows."""
    if n_rows == 0:
        return np.zeros(0, np.int64), np.zeros((0, n_predicates), np.float32)
    dists = field(result, "rel_dists", where)
    if dists.shape != (n_rows, n_predicates + 1):
        raise ConvertError([f"{where}: field 'rel_dists' has shape {dists.shape}; expected ({n_rows}, "
                            f"{n_predicates + 1}) (one row per pair; column 0 = no relation, then the "
                            f"{n_predicates} predicates)"])
    probabilities = dists[:, 1:]
    if not np.isfinite(probabilities).all():
        raise ConvertError([f"{where}: field 'rel_dists' holds NaN or inf"])
    argmax = probabilities.argmax(axis=1)
    use_labels = options.predicate_source == "rel_labels"
    labels = field(result, "rel_labels", where, required=use_labels)
    if labels is not None and (use_labels or labels.size == n_rows):  # unused rel_labels are only compared
        labels = _integers(labels.reshape(-1), "rel_labels", (n_rows,), where)
        if use_labels:
            out_of_range(labels, 1, n_predicates, "rel_labels", where,
                          f"rel_labels are 1-based like the columns of rel_dists (1..{n_predicates})")
        notes["rel_rows"] += n_rows
        notes["rel_labels_differ"] += int(np.count_nonzero(labels - 1 != argmax))
    return (labels - 1 if use_labels else argmax), probabilities


# ---------------------------------------------------------------------------------------------
# Writing and validation
# ---------------------------------------------------------------------------------------------


def validate(path, gt, mode="mask"):
    """Read a written prediction back with sgeval's reader, record by record: every evaluated image
    has a record, and (mask mode) its TIFF has one page per instance at the GT image size, and its
    panoptic PNG, when it has one, the ids its segment list names."""
    problems, images = [], {image.image_id: image for image in gt.images}
    source, records = sgeval.prediction_records(path, len(gt.object_classes), len(gt.predicate_classes), mode,
                                                problems)
    try:
        for record in records:
            image = images.pop(record.image_id, None)
            if image is not None and mode == "mask":
                try:
                    if len(record.categories):
                        sgeval.load_pred_masks(source, record, image.height, image.width)
                    if record.panoptic is not None:  # (openpsg: pan_results)
                        sgeval.load_pred_panoptic(source, record, image.height, image.width)
                except sgeval.SGEvalError as error:
                    problems.extend(error.problems)
    finally:
        source.close()
    problems += [f"{path}: image {image_id}: no record was written" for image_id in images]
    if problems:
        raise ConvertError(problems)


def convert_all(raw, out, gt, image_fn, family, options, progress=None, settings=None, workers=1,
                raw_input=None, mode="mask", provenance=None):
    """Convert a raw output (a pickle, or a directory of per-image npz or pickle files) into the
    prediction ZIP ``out``, streaming: memory holds a few images' results whatever the raw size.

    image_fn(result, image, where, n_objects, n_predicates, options) -> (record, masks, notes).
    workers: processes that convert images and encode their masks (the output is the same for any
    number). raw_input: the RawInput of another reader (default open_raw(raw)); mode: "mask", or
    "box" for records without masks (validated in box mode); provenance: entries that replace or
    add to those recorded in convert.json. Every problem of the pass is collected; on any problem
    nothing is written (a partial output is removed). Returns a summary (the summed notes, plus the
    output path and the seconds taken)."""
    start = time.time()
    options.check()
    if not str(out).endswith(".zip"):
        raise ConvertError([f"{out}: the converted output must be a .zip (it holds the masks)"])
    if type(workers) is not int or not 1 <= workers <= sgeval.MAX_WORKERS:
        raise ConvertError([f"workers must be an integer from 1 to {sgeval.MAX_WORKERS}"])
    truth = sgeval.read_gt(gt)
    raw_input = open_raw(raw) if raw_input is None else raw_input
    if raw_input.count is not None and raw_input.count != len(truth.images):
        raise ConvertError([_count_problem(raw, gt, truth, raw_input.count)])
    provenance = {"family": family, "raw": os.path.abspath(raw), "gt": os.path.abspath(gt),
                  "options": {**dataclasses.asdict(options), **(settings or {})},
                  "sgeval_version": sgeval.__version__, **(provenance or {})}
    problems, summary = [], collections.Counter()
    global _WORK
    _WORK = image_fn, len(truth.object_classes), len(truth.predicate_classes), options

    def tasks():  # (source, image, where) per image
        count = 0
        try:
            for count, source in enumerate(raw_input.sources, 1):
                if count > len(truth.images):
                    problems.append(f"{raw}: holds more than {len(truth.images)} results, the number of evaluated "
                                    f"images of {gt}")
                    return
                image = truth.images[count - 1]
                yield source, image, f"{raw}: result {count - 1} (image {image.image_id})"
        except ConvertError as error:  # the pickle itself is unreadable from here on
            problems.extend(error.problems)
            return
        if count < len(truth.images):
            problems.append(_count_problem(raw, gt, truth, count))

    def records():  # in image order; after a problem, keep checking but stop writing
        forked = "fork" in multiprocessing.get_all_start_methods()  # workers must inherit _WORK
        images = sgeval.map_in_order(_convert_one, tasks(), workers if forked else 1, batch=1)
        for done, (record, notes) in enumerate(images, 1):
            if record is None:
                problems.extend(notes)
            else:
                summary.update(notes)
                if not problems:
                    yield record
            if progress is not None:
                seconds = max(time.time() - start, 1e-9)
                progress(done, len(truth.images), f"{done / seconds:.1f} images/s, "
                                                  f"{raw_input.bytes_read() / seconds / 1e6:.0f} MB/s")

    partial = f"{out}.partial"
    Path(partial).parent.mkdir(parents=True, exist_ok=True)
    try:
        sgeval.write_predictions(partial, records(), kind="zip",
                                 extra_members={PROVENANCE: (json.dumps(provenance, indent=1) + "\n").encode()})
        if problems:
            raise ConvertError(problems)
        validate(partial, truth, mode)
        os.replace(partial, out)
    except BaseException:
        if os.path.exists(partial):
            os.remove(partial)
        raise
    log.info("converted %s -> %s", raw, out)
    return {**summary, "out": str(out), "seconds": round(time.time() - start, 2)}


def _count_problem(raw, gt, truth, count):
    return (f"{raw}: holds {count} results, but {gt} has {len(truth.images)} evaluated images (test_image_ids "
            f"with at least one relation; {truth.skipped_no_relations} without relations are not evaluated); "
            f"results carry no image ids and are matched by position, so the counts must agree")


_WORK = None  # (image_fn, n_objects, n_predicates, options) of the conversion: forked workers inherit it


def _convert_one(task):
    """(source, image, where) -> (record with the TIFF of its masks, notes), or (None, problems):
    one image's work (reading its arrays, converting, encoding its masks), in a worker process or
    in the main one."""
    image_fn, n_objects, n_predicates, options = _WORK
    source, image, where = task
    try:
        record, masks, notes = image_fn(load_source(source, where), image, where, n_objects, n_predicates, options)
    except ConvertError as error:
        return None, error.problems
    tiff = sgeval.encode_masks(masks) if masks is not None and len(masks) else None
    return {**record, "id": image.image_id, "tiff": tiff}, notes


CONVERT_DOC = """Convert a {name} raw output (a pickle, or a directory of per-image npz or pickle
    files) to the prediction ZIP ``out``.

    gt: psg.json (its evaluated images, in order, are what the results are aligned with);
    predicate_source: rel_dists (argmax of rel_dists[:, 1:], legacy) | rel_labels; ng_top,
    ng_per_predicate: ng_triplets kept overall and per predicate; progress: optional callable
    progress(done, total, status) (status: images/s and MB/s read); workers: processes converting
    and encoding images (the same output for any number). Returns a summary dict; raises
    ConvertError (an sgeval.SGEvalError) listing every problem, and then writes nothing.
    """


IMAGE_ARRAYS_DOC = """One {name} result -> the keyword arguments of ``sgeval.Evaluator.update`` for its
    image: the arrays the file converter writes for it (the same rules, the same code).

    result: a ``Result`` as the model returns it (fields as attributes, numpy arrays or torch
    tensors on any device), a dict of those fields, or a RawResult; image: the sgeval.GTImage it
    belongs to (masks must have its size); n_objects, n_predicates: the GT's vocabulary sizes,
    ``len(gt.object_classes)`` and ``len(gt.predicate_classes)``; predicate_source, ng_top,
    ng_per_predicate: as for ``convert``.{options}

    Returns {{"labels": (P,) int64 0-based categories, "triplets": (N, 3) int64, "ng_triplets":
    (M, 3) int64, "masks": (P, H, W) bool, "boxes": (P, 4) float64 xyxy, "scores": (P,) float64,
    or None where the family has no object scores}}; an empty result has P = N = M = 0. Raises
    ConvertError (an sgeval.SGEvalError) naming the image and the field.
    """


def family_image_arrays(name, rules):
    """``image_arrays(result, image, n_objects, n_predicates, ...)`` for a family whose results all
    follow one set of Rules (IMAGE_ARRAYS_DOC)."""

    def image_arrays(result, image, n_objects, n_predicates, *, predicate_source="rel_dists", ng_top=NG_TOP,
                     ng_per_predicate=NG_PER_PREDICATE):
        options = Options(predicate_source, ng_top, ng_per_predicate).check()
        arrays, _ = result_arrays(as_result(result), image, image_where(image), n_objects, n_predicates, rules,
                                  options)
        return arrays

    image_arrays.__doc__ = IMAGE_ARRAYS_DOC.format(name=name, options="")
    return image_arrays


def family_converter(family, name, rules):
    """``convert(raw, out, gt, ...)`` for a family whose results all follow one set of Rules."""

    def convert_family_image(result, image, where, n_objects, n_predicates, options):
        return convert_image(result, image, where, n_objects, n_predicates, rules, options)

    def convert(raw, out, gt, predicate_source="rel_dists", ng_top=NG_TOP, ng_per_predicate=NG_PER_PREDICATE,
                progress=None, workers=1):
        options = Options(predicate_source, ng_top, ng_per_predicate)
        return convert_all(raw, out, gt, convert_family_image, family, options, progress, workers=workers)

    convert.__doc__ = CONVERT_DOC.format(name=name)
    return convert


def describe(summary):
    """One paragraph for the terminal about a conversion summary."""
    layouts = ", ".join(f"{key[7:]} {value}" for key, value in sorted(summary.items()) if key.startswith("layout:"))
    lines = [f"wrote {summary['out']}: {summary.get('images', 0)} images ({summary.get('empty', 0)} empty), "
             f"{summary.get('instances', 0)} instances, {summary.get('triplets', 0)} triplets, "
             f"{summary.get('ng_triplets', 0)} ng_triplets in {summary['seconds']:.1f} s"]
    if layouts:
        lines.append(f"layouts: {layouts}")
    tasks = ", ".join(f"{key[5:]} {value}" for key, value in sorted(summary.items()) if key.startswith("task:"))
    if not tasks:  # the mask families
        lines.append(f"object scores used for {summary.get('object_scores', 0)} images, raw boxes for "
                     f"{summary.get('raw_boxes', 0)} (mask boxes otherwise)")
    if tasks:
        lines.append(f"task: {tasks} images{' (guessed from the fields: --task auto)' * bool(summary.get('guessed'))}")
    if summary.get("task_fields_differ"):
        lines.append(f"images whose fields suggest another task: {summary['task_fields_differ']}")
    if summary.get("box_count_differs"):
        lines.append(f"images whose prediction has another number of boxes than the GT: {summary['box_count_differs']}")
    if summary.get("resized"):
        lines.append(f"images whose boxes were resized to the GT image size: {summary['resized']}")
    if summary.get("pan_results"):
        lines.append(f"panoptic segmentations (pan_results) carried for panoptic quality: {summary['pan_results']}")
    if summary.get("self_pairs"):
        lines.append(f"self-pair rows (kept as written): {summary['self_pairs']}")
    if summary.get("pred_rel_rows"):
        lines.append(f"pred_rel_labels differ from argmax(pred_rel_scores[:, 1:]) + 1 on "
                     f"{summary.get('pred_rel_labels_differ', 0)} of {summary['pred_rel_rows']} relation rows "
                     f"(ignored, as Scene-Graph-Benchmark's evaluator ignores them)")
    if summary.get("rel_rows"):
        lines.append(f"rel_labels differ from argmax(rel_dists) + 1 on {summary.get('rel_labels_differ', 0)} "
                     f"of {summary['rel_rows']} relation rows")
    return "\n".join(lines)


def make_cli(convert, doc, short_help, extra_options=(), predicate_source=True, gt_help="OpenPSG psg.json"):
    """A click command ``<script> --gt psg.json RAW OUT [options]`` that runs ``convert``; short_help:
    its line in ``sgeval convert --help``; predicate_source: whether it has --predicate-source."""

    def main(raw, out, gt, quiet, **options):
        summary = sgeval.run_cli(lambda progress: convert(raw, out, gt=gt, progress=progress, **options),
                                 "converting", quiet)
        click.echo(describe(summary))

    main.__doc__ = doc
    decorators = [
        click.argument("raw", type=click.Path(exists=True)),
        click.argument("out", type=click.Path(dir_okay=False)),
        click.option("--gt", required=True, type=click.Path(exists=True, dir_okay=False),
                     help=f"{gt_help}: gives the evaluated images, in the order of the results."),
        *[click.option("--predicate-source", type=click.Choice(PREDICATE_SOURCES), default="rel_dists",
                       show_default=True, help="triplets: argmax of rel_dists[:, 1:] (legacy) or rel_labels - 1.")
          ] * predicate_source,
        click.option("--ng-top", type=click.IntRange(0), default=NG_TOP, show_default=True,
                     help="ng_triplets kept overall (highest scores first)."),
        click.option("--ng-per-predicate", type=click.IntRange(0), default=NG_PER_PREDICATE, show_default=True,
                     help="ng_triplets kept for every predicate as well (for IMR@k)."),
        *extra_options,
        click.option("--workers", type=click.IntRange(1, sgeval.MAX_WORKERS), default=1, show_default=True,
                     help="Processes converting images and encoding their masks (same output for any number)."),
        click.option("--quiet", is_flag=True, help="No progress bar."),
    ]
    for decorator in reversed(decorators):
        main = decorator(main)
    return click.command(short_help=short_help, context_settings={"help_option_names": ["-h", "--help"]})(main)
