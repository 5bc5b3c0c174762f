"""Convert the GQA-200 files of the Scene-Graph-Benchmark family to sgeval's box-mode GT JSON.

    sgeval convert gqa200 --info GQA_200_ID_Info.json --train GQA_200_Train.json \\
        --test GQA_200_Test.json --out gqa200_test.json [--split test|val] [--no-train]

GQA-200 comes from SHA-GCL (dongxingning/SHA-GCL-for-SGG), whose loader later copies reuse. The
rules below were checked in its code at commit 0aefad67: ``gqa.py`` is
``maskrcnn_benchmark/data/datasets/gqa.py``, ``bbox.py`` is
``maskrcnn_benchmark/structures/bounding_box.py`` (the same BoxList as Scene-Graph-Benchmark's).

* **Vocabulary** (gqa.py:246-250): ``ind_to_classes`` and ``ind_to_predicates`` are used as they
  are, so index 0 is background (``__background__``; 201 and 101 names). sgeval's vocabularies
  are the rest: 200 ``thing_classes``, 100 ``predicate_classes``, ``stuff_classes`` empty;
  category = class - 1, predicate = p - 1.
* **Entries** (gqa.py:283-298): the Train and Test files each hold the parallel lists
  ``filenames_all``, ``img_info_all`` (``width``, ``height``: the sizes used), ``gt_boxes_all``
  (xyxy in image pixels), ``gt_classes_all`` (1-based) and ``relationships_all`` ([s, o, p],
  0-based box indices, 1-based predicate). SGB zips them (a shorter list would silently cut the
  others); here their lengths must agree. ``image_id`` = the file name's stem; ``file_name`` =
  the name as written.
* **Selection** (gqa.py:297-319): test and val read the Test file with a 1-based counter over its
  entries and **skip entry 5,580** (``if items == 5580: continue``, before the emptiness test);
  then an entry is kept iff it has at least one relation and one box. val = the first 5,000 kept
  test entries (val is part of test). The training split is the Train file with the same
  emptiness test and nothing skipped (gqa.py:60-65; ``num_val_im`` and the overlap filter are not
  used by this loader). The ``--split`` entries are ``test_image_ids``; the train entries are
  written too unless ``--no-train`` (sgeval's training statistics: zero-shot types, IMR's n_p).
* **Boxes** (gqa.py:118-126, 154-157; bbox.py:21, 237-247): the json numbers cast to float32
  (``BoxList``; no scale, no cx/cy conversion), then clamped in float32 to [0, W - 1] x
  [0, H - 1] by ``clip_to_image(remove_empty=False)``, as evaluation does; nothing is removed.
* **Relations** (gqa.py:131-141, 156): every row as written, duplicates included
  (``filter_duplicate_rels`` is for training only; ``relation_tuple`` is the rows as loaded).

Not followed: jkli1998/DRM's copy of the loader also drops ten file names from the test split
(285743, 61530, 285761, 150344, 286093, 286065, 61564, 498098, 285665, 150417 ``.jpg``); its test
set is therefore 10 images smaller (drop them from ``test_image_ids`` to match it).

The files are streamed (sgeval's incremental JSON reader, one pass per list), so memory holds one
entry. Every problem is one line naming the file, the entry (1-based, as SGB counts) with its file
name, and the field.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import typing
from pathlib import PurePosixPath

import click
import numpy as np

import sgeval
from . import gtjson
from .common import ConvertError

log = logging.getLogger("sgeval.convert")

SKIP_ENTRY = 5580  # gqa.py:303: the test file's 5,580th entry (1-based) is never used for val or test
NUM_VAL_IMAGES = 5000  # gqa.py:314-319
SPLITS = ("test", "val")
LISTS = ("filenames_all", "img_info_all", "gt_boxes_all", "gt_classes_all", "relationships_all")
BACKGROUND = "__background__"
_END = object()  # a parallel list that has ended


class Entry(typing.NamedTuple):
    """One entry of the parallel lists; ``number`` counts from 1 as SGB's ``items``."""

    number: int
    filename: object
    info: object
    boxes: object
    classes: object
    relations: object


def read_vocabulary(path):
    """(object names, predicate names, the dropped index-0 names)."""
    info = gtjson.read_small_json(path, "GQA info file")
    if not isinstance(info, dict):
        raise ConvertError([f"{path}: the GQA info file must hold a JSON object"])
    problems, vocabularies = [], []
    for key in ("ind_to_classes", "ind_to_predicates"):
        names = info.get(key)
        if not isinstance(names, list) or len(names) < 2 or not all(isinstance(n, str) for n in names) \
                or len(set(names)) < len(names):
            problems.append(f"{path}: field '{key}' must list distinct names, background first")
            continue
        if names[0] != BACKGROUND:
            log.warning("%s: %s starts with %r, not %r; index 0 is dropped as background all the same",
                        path, key, names[0], BACKGROUND)
        vocabularies.append(names)
    if problems:
        raise ConvertError(problems)
    (objects, predicates) = vocabularies
    return objects[1:], predicates[1:], [objects[0], predicates[0]]


def read_entries(path, problems):
    """The entries of a Train or Test file, streamed: one reader per parallel list."""
    lists = [gtjson.stream_list(path, key) for key in LISTS]
    for number, values in enumerate(itertools.zip_longest(*lists, fillvalue=_END), 1):
        ended = [key for key, value in zip(LISTS, values) if value is _END]
        if ended:
            longer = [key for key in LISTS if key not in ended]
            problems.add(f"{path}: {' and '.join(ended)} hold(s) {number - 1} entries, {' and '.join(longer)} "
                         f"more; the lists are parallel and must have the same length")
            return
        yield Entry(number, *values)


def _size(value):
    """len() of a list, else None."""
    return len(value) if isinstance(value, list) else None


def select(entries, split, where, problems, skip_entry=SKIP_ENTRY, num_val=NUM_VAL_IMAGES):
    """The entries SGB's GQA loader keeps for `split` (test, val or train): skip entry number
    skip_entry (test and val), keep those with a relation and a box, val stops at num_val."""
    kept = 0
    for entry in entries:
        if split in SPLITS and entry.number == skip_entry:
            continue
        n_boxes, n_relations = _size(entry.boxes), _size(entry.relations)
        if n_boxes is None or n_relations is None:
            field = "gt_boxes_all" if n_boxes is None else "relationships_all"
            problems.add(f"{where}: entry {entry.number} ({entry.filename!r}): field '{field}' must be a list")
            continue
        if n_boxes > 0 and n_relations > 0:
            yield entry
            kept += 1
            if split == "val" and kept == num_val:
                return


def _image_size(info):
    """(width, height) as positive integers (integral floats accepted), else None."""
    if not isinstance(info, dict):
        return None
    size = [info.get("width"), info.get("height")]
    if not all(type(v) in (int, float) and math.isfinite(v) and v >= 1 and v == int(v) for v in size):
        return None
    return int(size[0]), int(size[1])


def convert_entry(entry, n_objects, n_predicates, where, problems):
    """A kept entry -> the sgeval GT entry, or None after reporting its problems."""
    where = f"{where}: entry {entry.number} ({entry.filename!r})"
    too_many = [f"{where}: field '{field}' holds {count} rows, more than the limit of {limit} per image"
                for field, count, limit in (("gt_boxes_all", len(entry.boxes), gtjson.MAX_BOXES),
                                            ("relationships_all", len(entry.relations), gtjson.MAX_RELATIONS))
                if count > limit]
    if too_many:  # before any array is built
        for line in too_many:
            problems.add(line)
        return None
    stem = PurePosixPath(entry.filename).stem if isinstance(entry.filename, str) else None
    size, boxes = _image_size(entry.info), sgeval.box_array(entry.boxes)  # the GT reader's own checks
    classes = sgeval.int_array(entry.classes) if isinstance(entry.classes, list) else None
    relations = sgeval.rows_array(entry.relations, 3)
    checks = [(stem or None, "filenames_all", "a file name"),
              (size, "img_info_all", "an object with a positive integer width and height"),
              (boxes, "gt_boxes_all", "a list of [x1, y1, x2, y2] finite numbers"),
              (classes, "gt_classes_all", "a list of integers"),
              (relations, "relationships_all", "a list of [subject, object, predicate] integers")]
    bad = [f"{where}: field '{field}' must be {what}" for value, field, what in checks if value is None]
    if not bad and len(classes) != len(boxes):
        bad.append(f"{where}: gt_classes_all has {len(classes)} values, gt_boxes_all {len(boxes)} boxes")
    if not bad:
        bad += filter(None, [
            gtjson.out_of_range(classes, 1, n_objects, "gt_classes_all", where),
            gtjson.out_of_range(relations[:, :2], 0, len(boxes) - 1, "relationships_all (box indices)", where),
            gtjson.out_of_range(relations[:, 2:], 1, n_predicates, "relationships_all (predicates)", where)])
    for line in bad:
        problems.add(line)
    if bad:
        return None
    width, height = size
    clipped = gtjson.clip_to_image(boxes.astype(np.float32), width, height)
    relations[:, 2] -= 1
    return gtjson.gt_entry(stem, entry.filename, width, height, classes - 1, clipped, relations)


def convert(info, train, test, out, split="test", write_train=True, skip_entry=SKIP_ENTRY,
            num_val=NUM_VAL_IMAGES):
    """Convert the GQA-200 files to the sgeval GT JSON ``out`` (module docstring).

    split: test | val (the evaluated entries, listed in test_image_ids); write_train: also write
    the Train file's entries (training statistics); skip_entry, num_val: the loader's constants
    (the tests use small values). Returns a summary dict; raises ConvertError and then writes
    nothing."""
    if split not in SPLITS:
        raise ConvertError([f"split '{split}' is not one of {', '.join(SPLITS)}"])
    objects, predicates, dropped = read_vocabulary(info)
    problems = gtjson.Problems()

    def entries():
        sources = [(test, split, True)] + ([(train, "train", False)] if write_train else [])
        for path, part, evaluated in sources:
            for entry in select(read_entries(path, problems), part, path, problems, skip_entry, num_val):
                converted = convert_entry(entry, len(objects), len(predicates), path, problems)
                if converted is not None:
                    yield converted, evaluated

    provenance = {"converter": "sgeval_convert.gqa200", "split": split, "info": os.path.abspath(info),
                  "train": os.path.abspath(train), "test": os.path.abspath(test), "training_images": bool(write_train),
                  "skipped_test_entry": skip_entry, "background_dropped": dropped}
    return gtjson.write_gt(out, objects, predicates, entries(), provenance, problems, f"{test} and {train}")


@click.command(short_help="GQA-200 GT JSON from its json files",
               context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--info", required=True, type=click.Path(exists=True, dir_okay=False),
              help="GQA_200_ID_Info.json (ind_to_classes, ind_to_predicates).")
@click.option("--train", required=True, type=click.Path(exists=True, dir_okay=False), help="GQA_200_Train.json.")
@click.option("--test", required=True, type=click.Path(exists=True, dir_okay=False), help="GQA_200_Test.json.")
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="The sgeval GT JSON to write.")
@click.option("--split", type=click.Choice(SPLITS), default="test", show_default=True,
              help="The evaluated entries: the test split, or val (its first 5,000 entries).")
@click.option("--no-train", is_flag=True, help="Leave out the training entries (no training statistics then).")
def main(info, train, test, out, split, no_train):
    """Convert the GQA-200 files to sgeval's box-mode GT JSON."""
    summary = sgeval.run_cli(lambda progress: convert(info, train, test, out, split, not no_train), "converting",
                             quiet=True)
    click.echo(gtjson.describe(summary))


if __name__ == "__main__":
    main()
