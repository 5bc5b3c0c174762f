"""Open Images (V6 and V4) as PySGG evaluates it: its annotations to sgeval's box-mode GT JSON, and
its ``eval_results.pytorch`` to sgeval predictions.

    sgeval convert openimages-gt --anno-dir DIR --out oiv6_test.json [--split test|val] [--no-train]
    sgeval convert openimages --gt oiv6_test.json [--task auto|predcls|sgcls|sgdet] eval_results.pytorch out.zip

(in a checkout also ``python -m convert.openimages gt --anno-dir ...`` and ``python -m
convert.openimages --gt ...``). Every rule below was read in SHTUPLUS/PySGG at commit a63942a0:
``oi.py`` is ``pysgg/data/datasets/open_image.py``, ``bbox.py`` ``pysgg/structures/bounding_box.py``,
``oi_init.py`` ``pysgg/data/datasets/evaluation/oi/__init__.py``, ``oi_eval.py``
``pysgg/data/datasets/evaluation/oi/oi_evaluation.py``, ``vg_eval.py`` and ``sgg_eval.py`` the
files of ``pysgg/data/datasets/evaluation/vg/``, ``misc.py`` ``pysgg/utils/miscellaneous.py``,
``catalog.py`` ``pysgg/config/paths_catalog.py``.

Ground truth (``convert_gt``)
-----------------------------
``DIR`` holds what PySGG's catalog names (catalog.py:120-130, the split taken from the dataset
name, catalog.py:176-190): ``categories_dict.json`` and ``vrd-{train,val,test}-anno.json``. PySGG's
BGNN configs test V6 on ``openimage_v6_test`` but V4 on ``openimage_v4_val``
(configs/e2e_relBGNN_oiv6.yaml:10, e2e_relBGNN_oiv4.yaml:10): convert V4 with ``--split val``.

* **Vocabulary** (oi.py:34-48, ``load_cate_info``): ``obj`` and ``rel`` of categories_dict.json, in
  order; PySGG puts ``__background__`` before them, so its label = index + 1. V6 has 601 object
  classes and 30 predicates (``NUM_CLASSES`` 602 and 31 in configs/e2e_relBGNN_oiv6.yaml:108, 218),
  V4 57 and 9 (e2e_relBGNN_oiv4.yaml:109, 217); other sizes are converted too, and ``info.dataset``
  says which it is.
* **Images** (oi.py:51-115, ``load_annotations``): the split file's list, in file order, all of it
  (``num_im`` -1). An entry whose ``rel`` or ``bbox`` is empty is dropped (oi.py:75-81:
  ``filter_empty_rels`` is on for every relation model, oi.py:170). The evaluated dataset index i
  is the i-th kept entry, which is ``truth.images[i]`` of the written GT. ``width``, ``height`` =
  ``img_size[0]``, ``img_size[1]`` (oi.py:103-107); ``image_id`` = ``img_fn``, ``file_name`` =
  ``img_fn + '.jpg'``.
* **Boxes** (oi.py:95, 367, 418-419; bbox.py:21, 237-247): ``bbox`` xyxy as stored, cast to float32
  (the BoxList), then ``clip_to_image(remove_empty=False)`` as evaluation calls it: x clamped in
  float32 to [0, width - 1], y to [0, height - 1] (TO_REMOVE = 1), no box removed. PySGG's
  ``np.array`` holds the numbers as int64 or float64 before the cast; they are read as float64
  here, which is the same for every integer below 2**53 (larger ones are clamped anyway). The
  float32 values are written exactly.
* **Labels** (oi.py:96, 100): category = ``det_labels`` as stored (PySGG adds 1 for its background).
* **Relations** (oi.py:98, 101, 373, 420): every ``rel`` row ``[subject, object, predicate]`` in file
  order, duplicates included (``relation_tuple`` of the test split is unfiltered; the random
  de-duplication of oi.py:374-383 is for training only, oi.py:151); predicate as stored (PySGG
  adds 1).
* **Training entries**: ``vrd-train-anno.json`` with the same filter and rules, written outside
  ``test_image_ids`` (unless ``--no-train``): sgeval reads their categories and relations for the
  zero-shot triplet types, IMR's n_p and the frequency groups. PySGG's training-time sampling
  (duplicate relations, resampling) is not applied.

Every entry is checked before anything is built from it: ``rel``, ``bbox`` lists (of at most
``gtjson.MAX_RELATIONS`` / ``MAX_BOXES`` rows), ``bbox`` rows of four finite numbers, ``det_labels``
one integer per box within the vocabulary, ``rel`` rows of three integers (box indices of the
entry, predicate within the vocabulary), ``img_size`` two positive integers (integral floats
accepted) of at most ``sgeval.max_image_pixels()`` pixels, ``img_fn`` a non-empty string. A problem is
one line naming the file, the entry index and img_fn, and the field; nothing is written then.

Predictions (``convert``, ``image_arrays``)
-------------------------------------------
``eval_results.pytorch`` is what ``oi_evaluation`` saves (oi_init.py:44, vg_eval.py:354-357):
``{'groundtruths': [BoxList], 'predictions': [BoxList]}``, one per evaluated image in dataset order,
the predictions already resized to the image (oi_init.py:35-40). It is read without torch
(torchfile.py; ``pysgg.structures.bounding_box.BoxList`` is one of the BoxList classes it reads),
aligned by position with the GT JSON's evaluated images and, where ``groundtruths`` is there,
checked against it, as for ``sgb`` (sgb.py). Per image:

* ``labels``, ``boxes``, ``scores``: ``pred_labels - 1`` (oi_init.py:98-99), ``bbox`` resized to
  the GT image size as ``BoxList.resize`` does it in float32 and converted to xyxy (oi_init.py:40,
  96; sgb.resize_boxes), ``pred_scores`` (oi_init.py:97).
* ``triplets``: the graph-constrained list PySGG's ``eval_classic_recall`` scores for R@K and
  mR@K (oi_eval.py:395-427 -> vg_eval.py:382-492 -> sgg_eval.py:147, 169-173): the
  ``rel_pair_idxs`` rows as stored, predicate = argmax of ``pred_rel_scores[:, 1:]`` (the first
  column on ties), self-pairs and repeats kept.
* ``ng_triplets``: the no-graph-constraint list of the classic ngR@K PySGG prints beside them
  (oi_eval.py:395-427 -> vg_eval.py -> sgg_eval.py's SGNoGraphConstraintRecall, the rules of
  Scene-Graph-Benchmark's: ``sgeval_convert.sgb`` writes the same list, ``common.rank_ng``): every
  (row, predicate) ranked by subject score x object score x predicate score (predcls: the
  predicate score alone), so the ``sgb`` protocol gives PySGG's classic ngR@K.
* ``row_lists.oi`` (``triplets`` and ``scores``): the Open Images list of ``eval_rel_results``
  (oi_eval.py:146-256, from ``adapt_results``, oi_init.py:88-144). Per relation row, the
  predicate scores ``pred_rel_scores[:, 1:]`` (background dropped, oi_eval.py:200) ordered by
  ``np.argsort(-scores, axis=1)`` with their values ``-np.sort(-scores, axis=1)``
  (oi_eval.py:203-204); the first ``PRD_K`` = 2 of them (oi_eval.py:167, 208) times
  subject score x object score (``pred_scores``, oi_eval.py:207), in the arrays' own dtype as numpy
  computes it (float32 for PySGG's outputs); all of these ranked by ``argsort_desc``
  (``np.argsort(-scores.ravel())``, misc.py:61-68) and cut to the first ``TOP_K`` = 100
  (oi_eval.py:211); then those with score > ``MIN_SCORE`` = 0.00001 kept, in that order
  (oi_eval.py:225). Row [subject, object, predicate] with predicate = the column index after
  dropping background; its score is written as the float32 value (``row_lists.oi.scores``, which
  sgeval's ``oi`` protocol ranks by, keeping the written order among equal scores). numpy's
  default argsort is not stable: where scores are exactly equal, the order is numpy's, as in
  PySGG with the same numpy. ``triplets`` get no scores.
* An image without relation rows (``rel_pair_idxs`` empty or None, ``pred_rel_scores`` then empty
  or None) gets its instances and no rows.
* ``--task`` as for ``sgb`` (``auto`` guesses from the first prediction's fields). It decides nothing
  here but what is recorded and counted: the Open Images list uses the stored ``pred_scores`` in
  every mode (oi_init.py:97), the graph-constrained list never uses object scores.
"""

from __future__ import annotations

import collections
import os
import sys
from pathlib import Path

import click
import numpy as np

import sgeval
from . import common, gtjson, sgb
from .common import ConvertError

FAMILY = "openimages"
SPLITS = ("test", "val")
CATEGORIES_FILE = "categories_dict.json"  # catalog.py:123, 129
ANNOTATION_FILE = "vrd-{split}-anno.json"  # catalog.py:122, 128 (the split filled in at catalog.py:188)
DATASETS = {(601, 30): "Open Images V6", (57, 9): "Open Images V4"}  # (objects, predicates) -> name
TASKS = sgb.TASKS
PRD_K = 2  # oi_eval.py:167: predicates kept per pair
TOP_K = 100  # oi_eval.py:151: entries kept from the ranking
MIN_SCORE = 0.00001  # oi_eval.py:225: kept when score > this


# ---------------------------------------------------------------------------------------------
# Ground truth
# ---------------------------------------------------------------------------------------------


def read_categories(path):
    """(object names, predicate names) of categories_dict.json (``obj``, ``rel``)."""
    info = gtjson.read_small_json(path, "categories file")
    if not isinstance(info, dict):
        raise ConvertError([f"{path}: the categories file must hold a JSON object with 'obj' and 'rel'"])
    problems, vocabularies = [], []
    for key in ("obj", "rel"):
        names = info.get(key)
        if not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names) \
                or len(set(names)) < len(names):
            problems.append(f"{path}: field '{key}' must list distinct non-empty names")
        vocabularies.append(names)
    if problems:
        raise ConvertError(problems)
    return tuple(vocabularies)


def annotation_files(anno_dir, split, train):
    """{role: path} of the files PySGG reads from DIR; ConvertError for a missing one."""
    anno_dir = Path(anno_dir)
    files = {"categories": anno_dir / CATEGORIES_FILE, split: anno_dir / ANNOTATION_FILE.format(split=split)}
    if train:
        files["train"] = anno_dir / ANNOTATION_FILE.format(split="train")
    missing = [f"{path}: no such file (PySGG's {role} file{'; --no-train converts without it' * (role == 'train')})"
               for role, path in files.items() if not path.is_file()]
    if missing:
        raise ConvertError(missing)
    return files


def _image_size(value):
    """(width, height) from img_size: two positive integers up to 2**40 (integral floats accepted),
    else None."""
    if not (isinstance(value, list) and len(value) == 2 and all(
            type(v) in (int, float) and 1 <= v <= 2 ** 40 and v == int(v) for v in value)):  # NaN, inf, 10**400: no
        return None
    return int(value[0]), int(value[1])


def kept_entries(path, problems, skipped):
    """(index, entry) of the annotation file's entries PySGG keeps (oi.py:75-92): non-empty ``rel``
    and ``bbox``; skipped[path] counts the others."""
    for index, entry in enumerate(gtjson.stream_list(path)):
        if not isinstance(entry, dict):
            problems.add(f"{path}: entry {index}: must be an object (rel, bbox, det_labels, img_size, img_fn)")
            continue
        not_lists = [field for field in ("rel", "bbox") if not isinstance(entry.get(field), list)]
        if not_lists:
            problems.add(f"{_where(path, index, entry)}: field '{not_lists[0]}' must be a list")
        elif entry["rel"] and entry["bbox"]:
            yield index, entry
        else:
            skipped[str(path)] += 1


def _where(path, index, entry):
    name = entry.get("img_fn")
    return f"{path}: entry {index}" + (f" (img_fn {name!r:.200})" if isinstance(name, str) else "")


def convert_entry(index, entry, n_objects, n_predicates, path, problems):
    """A kept annotation entry -> the sgeval GT entry (module docstring), or None after reporting
    its problems."""
    where = _where(path, index, entry)
    boxes_list, rels_list = entry["bbox"], entry["rel"]
    too_many = [f"{where}: field '{field}' holds {len(rows)} rows, more than the limit of {limit} per image"
                for field, rows, limit in (("bbox", boxes_list, gtjson.MAX_BOXES),
                                           ("rel", rels_list, gtjson.MAX_RELATIONS)) if len(rows) > limit]
    for line in too_many:  # before any array is built
        problems.add(line)
    if too_many:
        return None
    name, size, labels = entry.get("img_fn"), _image_size(entry.get("img_size")), entry.get("det_labels")
    boxes, relations = sgeval.box_array(boxes_list), sgeval.rows_array(rels_list, 3)
    labels = sgeval.int_array(labels) if isinstance(labels, list) else None
    checks = [(name if isinstance(name, str) and name else None, "img_fn", "a non-empty string (the image file's stem)"),
              (size, "img_size", "[width, height], two positive integers (at most 2**40)"),
              (boxes, "bbox", "a list of [x1, y1, x2, y2] rows of four finite numbers"),
              (labels, "det_labels", "a list of integers (0-based object classes)"),
              (relations, "rel", "a list of [subject, object, predicate] rows of integers")]
    bad = [f"{where}: field '{field}' must be {what}" for value, field, what in checks if value is None]
    if not bad and len(labels) != len(boxes):
        bad.append(f"{where}: field 'det_labels' holds {len(labels)} labels for the {len(boxes)} boxes of 'bbox'")
    if not bad and size[0] * size[1] > sgeval.max_image_pixels():
        bad.append(f"{where}: field 'img_size' {list(size)} exceeds the limit of {sgeval.max_image_pixels()} pixels "
                   f"(environment variable SGEVAL_MAX_IMAGE_PIXELS raises it)")
    if not bad:
        bad += filter(None, [
            gtjson.out_of_range(labels, 0, n_objects - 1, "det_labels", where),
            gtjson.out_of_range(relations[:, :2], 0, len(boxes) - 1, "rel (box indices)", where),
            gtjson.out_of_range(relations[:, 2:], 0, n_predicates - 1, "rel (predicates)", where)])
    for line in bad:
        problems.add(line)
    if bad:
        return None
    width, height = size
    clipped = gtjson.clip_to_image(boxes.astype(np.float32), width, height)
    return gtjson.gt_entry(name, f"{name}.jpg", width, height, labels, clipped, relations)


def convert_gt(anno_dir, out_json, split="test", train=True):
    """Convert PySGG's Open Images annotations in ``anno_dir`` to the sgeval GT JSON ``out_json``
    (module docstring).

    split: test | val (the evaluated images, listed in test_image_ids); train: also write the
    training entries of vrd-train-anno.json (training statistics). Returns a summary dict (with
    ``skipped_empty``: the entries dropped for an empty rel or bbox, per file); raises ConvertError
    and then writes nothing."""
    if split not in SPLITS:
        raise ConvertError([f"split '{split}' is not one of {', '.join(SPLITS)}"])
    files = annotation_files(anno_dir, split, train)
    objects, predicates = read_categories(files["categories"])
    problems, skipped = gtjson.Problems(), collections.Counter()

    def entries():
        for role, evaluated in ((split, True), ("train", False)):
            if role not in files:
                continue
            for index, entry in kept_entries(files[role], problems, skipped):
                converted = convert_entry(index, entry, len(objects), len(predicates), files[role], problems)
                if converted is not None:
                    yield converted, evaluated

    info = {"converter": "sgeval_convert.openimages", "dataset": DATASETS.get((len(objects), len(predicates))),
            "split": split, **{role: os.path.abspath(path) for role, path in files.items()},
            "training_images": bool(train)}
    sources = " and ".join(str(files[role]) for role in (split, "train") if role in files)
    summary = gtjson.write_gt(out_json, objects, predicates, entries(), info, problems, sources)
    return {**summary, "dataset": info["dataset"], "skipped_empty": dict(skipped)}


# ---------------------------------------------------------------------------------------------
# Predictions: one image
# ---------------------------------------------------------------------------------------------


def _relation_rows(prediction, n_boxes, n_predicates, where):
    """(pairs (R, 2) int64, pred_rel_scores (R, C + 1) as stored) of a prediction; R = 0 when
    rel_pair_idxs is None or empty (pred_rel_scores may then be None or empty too)."""
    label = "prediction"
    if prediction.extra_field("rel_pair_idxs") is None:
        if "rel_pair_idxs" not in (prediction.get("extra_fields") or {}):
            raise ConvertError([f"{where}: prediction has no field 'rel_pair_idxs'"])
        return np.zeros((0, 2), np.int64), None
    pairs = sgb.field_array(prediction, "rel_pair_idxs", where, label, "biu")
    if pairs.size == 0:
        scores = common.as_numpy(prediction.extra_field("pred_rel_scores"))
        if scores is not None and np.asarray(scores).size:
            raise ConvertError([f"{where}: prediction field 'pred_rel_scores' holds scores, but 'rel_pair_idxs' "
                                f"no rows"])
        return np.zeros((0, 2), np.int64), None
    pairs = sgb.shaped_field(pairs, (None, 2), "rel_pair_idxs", where, label).astype(np.int64)
    common.out_of_range(pairs, 0, n_boxes - 1, f"{label}.rel_pair_idxs", where, f"only {n_boxes} boxes exist")
    rel_scores = sgb.finite_field(prediction, "pred_rel_scores", (len(pairs), n_predicates + 1), where, label)
    return pairs, rel_scores


def oi_ranking(pairs, rel_scores, object_scores):
    """PySGG's Open Images list of one image (module docstring; oi_eval.py:200-228): (rows (M, 3)
    int64 [subject, object, predicate], their scores (M,) in the computation's dtype)."""
    if len(pairs) == 0:
        return np.zeros((0, 3), np.int64), np.zeros(0, np.float32)
    predicate_scores = rel_scores[:, 1:]  # oi_eval.py:200
    labels = np.argsort(-predicate_scores, axis=1)  # oi_eval.py:203
    ranked = -np.sort(-predicate_scores, axis=1)  # oi_eval.py:204
    pair_scores = object_scores[pairs[:, 0]] * object_scores[pairs[:, 1]]  # oi_eval.py:207
    scores = pair_scores[:, None] * ranked[:, :PRD_K]  # oi_eval.py:208
    rows, columns = np.unravel_index(np.argsort(-scores.ravel()), scores.shape)  # misc.py:68
    rows, columns = rows[:TOP_K], columns[:TOP_K]  # oi_eval.py:211
    top = scores[rows, columns]  # oi_eval.py:216
    keep = np.where(top > MIN_SCORE)[0]  # oi_eval.py:225
    rows, columns = rows[keep], columns[keep]
    triplets = np.column_stack([pairs[rows], labels[rows, columns]]).astype(np.int64)  # oi_eval.py:219-222
    return triplets, top[keep]


def prediction_arrays(prediction, groundtruth, image, where, n_objects, n_predicates, task):
    """One image's prediction BoxList (and the file's groundtruth BoxList, or None) ->
    (common.update_arrays, (the Open Images list (M, 3), its scores (M,) as computed), notes)."""
    if groundtruth is not None:
        sgb.check_groundtruth(groundtruth, image, where, n_objects, n_predicates)
    label = "prediction"
    boxes, resized = sgb.boxes_in_gt_size(prediction, image, where, label)
    count = len(boxes)
    labels = sgb.integer_field(prediction, "pred_labels", (count,), 1, n_objects, where, label,
                           f"pred_labels are 1-based object classes 1..{n_objects}")
    scores = sgb.finite_field(prediction, "pred_scores", (count,), where, label)
    pairs, rel_scores = _relation_rows(prediction, count, n_predicates, where)
    predicates = rel_scores[:, 1:].argmax(axis=1) if len(pairs) else np.zeros(0, np.int64)  # sgg_eval.py:147
    oi_rows, oi_scores = oi_ranking(pairs, rel_scores, scores)
    ng_triplets = common.rank_ng(pairs, rel_scores[:, 1:], None if task == "predcls" else scores, common.NG_TOP,
                                 common.NG_PER_PREDICATE) if len(pairs) else np.zeros((0, 3), np.int64)
    arrays = common.update_arrays(labels - 1, np.column_stack([pairs, predicates]), ng_triplets, None, boxes, scores)
    notes = collections.Counter({"images": 1, f"task:{task}": 1, "instances": count, "triplets": len(pairs),
                                 "ng_triplets": len(ng_triplets), "oi_rows": len(oi_rows), "raw_boxes": 1,
                                 "resized": int(resized),
                                 "object_scores": 1, "no_relation_rows": int(not len(pairs)),
                                 "below_min_score": min(len(pairs) * min(PRD_K, n_predicates), TOP_K)
                                 - len(oi_rows),
                                 "self_pairs": int(np.count_nonzero(pairs[:, 0] == pairs[:, 1])),
                                 "task_fields_differ": int(sgb.guess_task(prediction) != task),
                                 "box_count_differs": int(task != "sgdet" and count != len(image.categories))})
    notes.update(sgb.rel_labels_notes(prediction, predicates))
    return arrays, (oi_rows, oi_scores), notes


def image_arrays(prediction, image, n_objects, n_predicates, *, task="auto", groundtruth=None):
    """One PySGG Open Images prediction BoxList -> the keyword arguments of
    ``sgeval.Evaluator.update`` for its image: the arrays ``convert`` writes for it (the same rules,
    the same code; box mode).

    prediction: the BoxList the model returns for the image (tensors on any device; its boxes are
    resized to the GT image as oi_evaluation resizes them), or an unpickler.BoxList; image: the
    sgeval.GTImage it belongs to; n_objects, n_predicates: ``len(gt.object_classes)``,
    ``len(gt.predicate_classes)``; task: predcls | sgcls | sgdet or auto (recorded only: the
    lists are the same in every mode); groundtruth: optionally the evaluator's GT BoxList,
    checked against the image.

    Returns {"labels": (P,) int64, "triplets": (N, 3) int64 (the graph-constrained list),
    "ng_triplets": (M, 3) int64 (the classic no-graph-constraint list), "masks": None, "boxes": (P,
    4) float64, "scores": (P,) float64, "row_lists": {"oi": {"triplets": (L, 3) int64 (the Open
    Images list), "scores": (L,) float64 (the float32 values)}}}. Raises common.ConvertError naming
    the image and the field.
    """
    if task not in TASKS:
        raise ConvertError([f"task '{task}' is not one of {', '.join(TASKS)}"])
    where = common.image_where(image)
    prediction = sgb.as_boxlist(prediction, where, "prediction")
    groundtruth = None if groundtruth is None else sgb.as_boxlist(groundtruth, where, "groundtruth")
    chosen = sgb.guess_task(prediction) if task == "auto" else task
    arrays, (oi_rows, oi_scores), _ = prediction_arrays(prediction, groundtruth, image, where, n_objects,
                                                        n_predicates, chosen)
    return {**arrays, "row_lists": {"oi": {"triplets": oi_rows, "scores": np.asarray(oi_scores, np.float64)}}}


def convert_image(result, image, where, n_objects, n_predicates, options, task):
    """One image's {prediction, groundtruth} -> (record with its row_lists.oi, None, notes)."""
    arrays, (oi_rows, oi_scores), notes = prediction_arrays(result.get("prediction"), result.get("groundtruth"),
                                                            image, where, n_objects, n_predicates, task)
    record, masks, notes = common.as_record(arrays, notes)
    record["row_lists"] = {"oi": {"triplets": oi_rows, "scores": [float(score) for score in oi_scores]}}
    return record, masks, notes


# ---------------------------------------------------------------------------------------------
# Predictions: the file
# ---------------------------------------------------------------------------------------------


def convert(raw, out, gt, task="auto", progress=None, workers=1):
    """Convert PySGG's Open Images eval_results.pytorch to the prediction ZIP ``out`` (box mode).

    gt: the GT JSON convert_gt wrote for the split the file was evaluated on (its evaluated
    images, in order, are the predictions' images); task: auto | predcls | sgcls | sgdet (recorded
    in convert.json; module docstring); progress, workers: as for every family. Returns a summary
    dict; raises common.ConvertError listing every problem, and then writes nothing."""
    if task not in TASKS:
        raise ConvertError([f"task '{task}' is not one of {', '.join(TASKS)}"])
    raw_input, predictions = sgb.open_results(raw)
    chosen = task if task != "auto" else sgb.guess_task(predictions[0]) if predictions else "sgdet"

    def image_fn(result, image, where, n_objects, n_predicates, options):
        return convert_image(result, image, where, n_objects, n_predicates, options, chosen)

    summary = common.convert_all(raw, out, gt, image_fn, FAMILY, common.Options(), progress, workers=workers,
                                 raw_input=raw_input, mode="box", provenance={
                                     "options": {"task": task}, "task": chosen,
                                     "ng_triplets": "PySGG's classic no-graph-constraint list (as sgb's)",
                                     "row_lists.oi": f"PySGG's Open Images list: top {PRD_K} predicates per pair, "
                                                     f"first {TOP_K}, score > {MIN_SCORE}"})
    return {**summary, "guessed": int(task == "auto")}


def describe(summary):
    """The terminal lines of a prediction conversion: common.describe and the Open Images counts."""
    lines = [common.describe(summary)]
    if summary.get("no_relation_rows"):
        lines.append(f"images without relation rows (instances only): {summary['no_relation_rows']}")
    lines.append(f"row_lists.oi: PySGG's Open Images list ({summary.get('oi_rows', 0)} rows; "
                 f"{summary.get('below_min_score', 0)} entries of the first {TOP_K} had a score <= {MIN_SCORE} and "
                 f"are left out, as PySGG leaves them out); ng_triplets: its classic no-graph-constraint list")
    return "\n".join(lines)


def describe_gt(summary):
    skipped = ", ".join(f"{Path(path).name} {count}" for path, count in summary["skipped_empty"].items()) or "none"
    return (f"{gtjson.describe(summary)}\n{summary['dataset'] or 'not Open Images V6 or V4 by its vocabulary sizes'}"
            f"; entries dropped for an empty rel or bbox, as PySGG drops them: {skipped}")


# ---------------------------------------------------------------------------------------------
# Command lines
# ---------------------------------------------------------------------------------------------


@click.command(short_help="PySGG Open Images (eval_results.pytorch)",
               context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("raw", type=click.Path(exists=True, dir_okay=False))
@click.argument("out", type=click.Path(dir_okay=False))
@click.option("--gt", required=True, type=click.Path(exists=True, dir_okay=False),
              help="The GT JSON of `sgeval convert openimages-gt` for the split the file was evaluated on.")
@click.option("--task", type=click.Choice(TASKS), default="auto", show_default=True,
              help="PySGG's mode (recorded); auto guesses it from the fields.")
@click.option("--workers", type=click.IntRange(1, sgeval.MAX_WORKERS), default=1, show_default=True,
              help="Processes converting images (same output for any number).")
@click.option("--quiet", is_flag=True, help="No progress bar.")
def main(raw, out, gt, task, workers, quiet):
    """Convert PySGG's Open Images eval_results.pytorch to sgeval predictions (box mode): triplets =
    the graph-constrained list of its R@K / mR@K, ng_triplets = the no-graph-constraint list of its
    classic ngR@K, row_lists.oi = its scored Open Images list (top 2 predicates per pair, first 100,
    score > 1e-5).

    `python -m sgeval_convert.openimages gt ...` (or `sgeval convert openimages-gt`) converts the
    annotations."""
    summary = sgeval.run_cli(lambda progress: convert(raw, out, gt, task, progress, workers), "converting", quiet)
    click.echo(describe(summary))


@click.command(short_help="Open Images V6 / V4 GT JSON from PySGG's annotation files",
               context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--anno-dir", required=True, type=click.Path(exists=True, file_okay=False),
              help="PySGG's annotations folder: categories_dict.json and vrd-{train,val,test}-anno.json.")
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="The sgeval GT JSON to write.")
@click.option("--split", type=click.Choice(SPLITS), default="test", show_default=True,
              help="The evaluated images: vrd-test-anno.json or vrd-val-anno.json.")
@click.option("--no-train", is_flag=True, help="Leave out the training entries (no training statistics then).")
def gt_main(anno_dir, out, split, no_train):
    """Convert PySGG's Open Images annotations (V6 or V4) to sgeval's box-mode GT JSON."""
    summary = sgeval.run_cli(lambda progress: convert_gt(anno_dir, out, split, not no_train), "converting",
                             quiet=True)
    click.echo(describe_gt(summary))


if __name__ == "__main__":
    if sys.argv[1:2] == ["gt"]:
        gt_main(sys.argv[2:], prog_name="python -m sgeval_convert.openimages gt")
    else:
        main()
