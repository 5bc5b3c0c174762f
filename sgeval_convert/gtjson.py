"""Shared machinery of the ground-truth converters (``vg150``, ``gqa200``): they
turn a dataset's annotation files into sgeval's box-mode GT JSON (the psg.json layout, without
masks), image by image.

Output
------
One JSON object, written entry by entry (memory holds one image)::

    {"info": {...what was converted...}, "thing_classes": [...], "stuff_classes": [],
     "predicate_classes": [...],
     "data": [{"image_id": ..., "file_name": ..., "width": W, "height": H,
               "segments_info": [{"id": i, "category_id": c}, ...],
               "annotations": [{"bbox": [x1, y1, x2, y2], "category_id": c}, ...],
               "relations": [[s, o, p], ...]}, ...],
     "test_image_ids": [...]}

Categories and predicates are 0-based; a segment's ``id`` is its index, which ``relations`` use.
Boxes are the float32 values the source code computes, written as the float64 numbers equal to
them, so reading them back and casting to float32 gives the same bits. Relation rows are kept as
the files hold them, duplicates included (the ``sgb`` protocol counts every row).
``test_image_ids`` lists the evaluated split; the other entries are the training split, which sgeval
reads only for training statistics (zero-shot triplet types, IMR's n_p).

The file is built as ``<out>.partial``, read back with ``sgeval.read_gt`` (which must find every
evaluated image) and only then renamed to ``<out>``. Every problem of the input names the file,
the image and the field; at most ``MAX_PROBLEMS`` are listed, with a count of the rest, and then
nothing is written.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np

import sgeval
from .common import ConvertError, open_regular

MAX_PROBLEMS = 100  # problems listed; the rest are counted
MAX_SMALL_JSON = 1 << 26  # bytes of a vocabulary file read whole (the real ones are well under 1 MiB)
MAX_BOXES = 10_000  # boxes of one image (VG150 and GQA-200 images hold far fewer)
MAX_RELATIONS = 1_000_000  # relation rows of one image


class Problems:
    """The problems of a conversion: listed up to MAX_PROBLEMS, counted beyond."""

    def __init__(self):
        self.lines, self.more = [], 0

    def add(self, line):
        if len(self.lines) < MAX_PROBLEMS:
            self.lines.append(line)
        else:
            self.more += 1

    def __bool__(self):
        return bool(self.lines)

    def __len__(self):
        return len(self.lines) + self.more

    def error(self):
        more = [f"... and {self.more} more problems"] if self.more else []
        return ConvertError(self.lines + more)

    def raise_if_any(self):
        if self:
            raise self.error()


def read_small_json(path, what):
    """A small JSON file (a vocabulary) read whole, after checking its size."""
    try:
        data = sgeval.read_regular(path, f"the {what}", MAX_SMALL_JSON)
    except sgeval.SGEvalError as error:
        raise ConvertError(error.problems) from None
    try:
        return json.loads(data.decode("utf-8-sig"))
    except (ValueError, RecursionError) as error:
        raise ConvertError([f"{path}: cannot read the {what}: {type(error).__name__}: {error}"]) from None


def stream_list(path, key=None):
    """The items of a JSON file's top-level list (key None) or of the list under a top-level key,
    decoded one at a time by sgeval's incremental reader (memory holds one item). A missing key, a
    value that is not a list or malformed JSON raises ConvertError when the reading gets there."""
    try:
        with open_regular(path, "the JSON file") as handle:
            stream = sgeval.JSONStream(handle)
            if key is None:
                if stream.peek() != "[":
                    raise ConvertError([f"{path}: the file must hold a JSON list"])
                yield from stream.items()
                return
            if stream.peek() != "{":
                raise ConvertError([f"{path}: the file must hold a JSON object"])
            for name, value in stream.members():
                if name == key:
                    if value is None or not hasattr(value, "__next__"):
                        raise ConvertError([f"{path}: top-level field '{key}' must be a list"])
                    yield from value
                    return
            raise ConvertError([f"{path}: missing top-level field '{key}'"])
    except ConvertError:
        raise
    except (OSError, ValueError, RecursionError) as error:
        raise ConvertError([f"{path}: cannot read JSON: {type(error).__name__}: {error}"]) from None


def is_int(value):
    """A JSON integer (not a boolean)."""
    return type(value) is int


def is_positive_int(value):
    return type(value) is int and value >= 1


def out_of_range(values, low, high, field, where, first_row=None):
    """The problem line for the first row of `values` ((N,) or (N, k)) holding a value outside
    [low, high], or None. first_row: where the rows start in their dataset (then both numbers
    are given)."""
    if not values.size or (values.min() >= low and values.max() <= high):
        return None
    bad = np.flatnonzero(((values < low) | (values > high)).reshape(len(values), -1).any(axis=1))
    row = int(bad[0])
    at = f"row {row}" if first_row is None else f"row {first_row + row} (the image's row {row})"
    more = f" (and {bad.size - 1} more rows)" if bad.size > 1 else ""
    return f"{where}: field '{field}' {at} holds {values[row].tolist()}, outside {low}..{high}{more}"


def clip_to_image(boxes, width, height):
    """float32 (N, 4) xyxy boxes clamped in place as maskrcnn_benchmark's BoxList.clip_to_image
    does (x to [0, width - 1], y to [0, height - 1], in float32); returns them."""
    np.clip(boxes[:, 0::2], 0, width - 1, out=boxes[:, 0::2])
    np.clip(boxes[:, 1::2], 0, height - 1, out=boxes[:, 1::2])
    return boxes


def gt_entry(image_id, file_name, width, height, categories, boxes, relations):
    """One sgeval GT entry. categories (N,) 0-based; boxes (N, 4) float32 xyxy; relations (R, 3)
    [subject index, object index, 0-based predicate]."""
    return {
        "image_id": image_id, "file_name": file_name, "width": int(width), "height": int(height),
        "segments_info": [{"id": index, "category_id": int(c)} for index, c in enumerate(categories)],
        "annotations": [{"bbox": [float(v) for v in box], "category_id": int(c)}
                        for box, c in zip(np.asarray(boxes, np.float32), categories)],
        "relations": np.asarray(relations, np.int64).reshape(-1, 3).tolist(),
    }


def duplicate_rows(relations):
    """How many rows of a list of relation rows repeat an earlier one."""
    return len(relations) - len(set(map(tuple, relations)))


def write_gt(out, objects, predicates, entries, info, problems, source, progress=None, total=None):
    """Write the GT JSON ``out`` from ``entries``, an iterable of (entry, evaluated) that may add to
    ``problems`` while it runs (``source``: the input file named when an image_id repeats);
    validate it with sgeval.read_gt, then rename it into place.
    Returns a summary dict; raises ConvertError (and writes nothing) when there is any problem."""
    start, out = time.time(), Path(out)
    partial = out.with_name(out.name + ".partial")
    counts = {"evaluated": 0, "training": 0, "boxes": 0, "relations": 0, "duplicate_relation_rows": 0}
    test_ids, seen = [], set()
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        with open(partial, "w", encoding="utf-8") as handle:
            head = {"info": info, "thing_classes": list(objects), "stuff_classes": [],
                    "predicate_classes": list(predicates)}
            handle.write(json.dumps(head)[:-1] + ', "data": [')
            for done, (entry, evaluated) in enumerate(entries, 1):
                key = str(entry["image_id"])
                if key in seen:
                    problems.add(f"{source}: image_id {key} occurs twice among the converted images")
                seen.add(key)
                if evaluated:
                    test_ids.append(entry["image_id"])
                _count(counts, entry, evaluated)
                if not problems:
                    handle.write(("\n" if done == 1 else ",\n") + json.dumps(entry, separators=(",", ":")))
                if progress is not None:
                    progress(done, total)
            handle.write('\n], "test_image_ids": ' + json.dumps(test_ids) + "}\n")
        problems.raise_if_any()
        _validate(partial, len(test_ids))
        os.replace(partial, out)
    except BaseException:
        if partial.exists():
            partial.unlink()
        raise
    return {**counts, "out": str(out), "seconds": round(time.time() - start, 2)}


def _count(counts, entry, evaluated):
    counts["evaluated" if evaluated else "training"] += 1
    counts["boxes"] += len(entry["annotations"])
    counts["relations"] += len(entry["relations"])
    counts["duplicate_relation_rows"] += duplicate_rows(entry["relations"])


def _validate(path, n_evaluated):
    """The written file must read back with sgeval.read_gt, every evaluated image included."""
    try:
        truth = sgeval.read_gt(path)
    except sgeval.SGEvalError as error:
        raise ConvertError([f"the written GT does not read back: {line}" for line in error.problems]) from None
    if len(truth.images) != n_evaluated:
        raise ConvertError([f"{path}: sgeval reads {len(truth.images)} evaluated images back, {n_evaluated} were "
                            f"written"])


def describe(summary):
    """One line for the terminal about a conversion summary."""
    return (f"wrote {summary['out']}: {summary['evaluated']} evaluated images, {summary['training']} training "
            f"images, {summary['boxes']} boxes, {summary['relations']} relation rows "
            f"({summary['duplicate_relation_rows']} repeat an earlier row of their image, kept) "
            f"in {summary['seconds']:.1f} s")
