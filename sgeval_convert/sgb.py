"""Convert Scene-Graph-Benchmark / PySGG ``eval_results.pytorch`` to sgeval predictions (box mode).

    sgeval convert sgb --gt vg150.json [--task auto|predcls|sgcls|sgdet] eval_results.pytorch out.zip

``eval_results.pytorch`` is what Scene-Graph-Benchmark's ``vg_eval.save_output`` writes (PySGG
and SHA-GCL write the same): ``torch.save({'groundtruths': [BoxList], 'predictions': [BoxList]})``,
one BoxList per evaluated image, in dataset order. It is read without torch (torchfile.py,
either torch.save format), lazily: each image's tensors are read from the file by the process that
converts it, so a file of any size converts with memory for a few images.

Alignment: ``predictions[i]`` is the i-th evaluated image of the GT JSON (the ``data`` entries in
``test_image_ids`` with at least one relation, in file order; as for every family). Different
counts are an error. When ``groundtruths`` is there, each image is checked against the GT JSON:
``labels - 1`` are its categories, ``relation_tuple`` rows ``(s, o, p)`` with ``p - 1`` are its
relation rows in file order (repeats included), and its boxes are within 1 pixel of the JSON's;
a mismatch names the image and the field (a misaligned file, or another GT).

Fields read (N boxes, R relation rows, C predicates; 1-based classes as the model wrote them):

    bbox             (N, 4)      float32; mode 'xyxy' or 'xywh'; size (width, height)
    pred_labels      (N,)        object classes, category = label - 1
    pred_scores      (N,)        object scores
    rel_pair_idxs    (R, 2)      subject, object: indices into the boxes
    pred_rel_scores  (R, C + 1)  predicate scores, column 0 = background

* Instances: the boxes as stored, float32 xyxy. Scene-Graph-Benchmark saves them already resized to
  the image size; where ``size`` differs from the GT's (width, height) they are resized as its
  ``BoxList.resize`` does (float32: the box times float32(width / w) and float32(height / h), mode
  kept), and an 'xywh' box becomes xyxy as ``BoxList.convert`` does (x2 = x1 + max(w - 1, 0),
  TO_REMOVE = 1). Category = ``pred_labels - 1``, score = ``pred_scores``.
* ``triplets``: the ``rel_pair_idxs`` rows in stored order (the model's triple-score order),
  predicate = argmax of ``pred_rel_scores[:, 1:]`` (first column on ties), as the evaluator
  recomputes it: Scene-Graph-Benchmark's evaluator ignores ``pred_rel_labels`` (the summary counts
  the rows where they differ). Self-pair placeholder rows (``[[0, 0]]`` when no pair exists) and
  repeated rows are kept as written.
* ``ng_triplets``: every (row, predicate) ranked as its no-graph-constraint recall ranks them:
  object-score product x predicate score in float32 (sgcls, sgdet), the predicate score alone in
  predcls (where the evaluator's object scores are float64 ones: the same order). Descending; where
  scores are exactly equal the evaluator's unstable argsort has no defined order, and here ties
  keep row order, then predicate order. Kept as ``common.rank_ng`` keeps them (``--ng-top``,
  ``--ng-per-predicate``).
* ``--task``: predcls, sgcls or sgdet; ``auto`` guesses from the first prediction's fields
  (``labels`` without ``predict_logits``: predcls; ``predict_logits``: sgcls; no ``labels``:
  sgdet), says so in the summary and counts images whose fields suggest another task. The task is
  recorded in the output's convert.json (``task``; ``options.task`` is what was asked). In predcls
  and sgcls a prediction with another number of boxes than the GT image is counted in the summary.
* Ignored: ``relation`` (the GT's training matrix), ``pred_rel_labels`` (compared only),
  ``labels``, ``predict_logits``, ``attributes`` and every other field.

SHA-GCL's VG outputs number the predicates in its own order: convert them against a GT JSON in
that order, or map them first.
"""

from __future__ import annotations

import collections

import click
import numpy as np

from . import common, torchfile, unpickler

FAMILY = "sgb"
TASKS = ("auto", "predcls", "sgcls", "sgdet")
BOX_TOLERANCE = 1.0  # pixels: groundtruths boxes against the GT JSON's


# ---------------------------------------------------------------------------------------------
# The file
# ---------------------------------------------------------------------------------------------


def _boxlists(value, key, path):
    """value[key] as a list of BoxList, else ConvertError."""
    items = value.get(key)
    if not isinstance(items, list) or not all(isinstance(item, unpickler.BoxList) for item in items):
        kinds = sorted({type(item).__name__ for item in items}) if isinstance(items, list) else [type(items).__name__]
        raise common.ConvertError([f"{path}: '{key}' must be a list of BoxList (Scene-Graph-Benchmark's "
                                   f"eval_results.pytorch), not {', '.join(kinds) or 'empty'}"])
    return items


def open_results(path):
    """eval_results.pytorch -> (RawInput of one RawResult {prediction, groundtruth} per image, the
    predictions). Tensors stay in the file (LazyTensor) until an image is converted."""
    value = torchfile.load(path, lazy=True)
    if not isinstance(value, dict) or "predictions" not in value:
        found = f"a dict with keys {sorted(map(str, value))}" if isinstance(value, dict) else f"a {type(value).__name__}"
        raise common.ConvertError([f"{path}: holds {found}; expected {{'groundtruths': [BoxList], 'predictions': "
                                   f"[BoxList]}} (Scene-Graph-Benchmark's eval_results.pytorch)"])
    predictions = _boxlists(value, "predictions", path)
    groundtruths = _boxlists(value, "groundtruths", path) if value.get("groundtruths") is not None else None
    if groundtruths is not None and len(groundtruths) != len(predictions):
        raise common.ConvertError([f"{path}: holds {len(predictions)} predictions but {len(groundtruths)} "
                                   f"groundtruths; they are two lists over the same images"])
    done = [0]

    def sources():
        for index, prediction in enumerate(predictions):
            groundtruth = None if groundtruths is None else groundtruths[index]
            done[0] += _lazy_bytes(prediction) + (0 if groundtruth is None else _lazy_bytes(groundtruth))
            yield unpickler.RawResult(prediction=prediction, groundtruth=groundtruth)

    return common.RawInput(len(predictions), sources(), lambda: done[0]), predictions


def _lazy_bytes(boxlist):
    """Bytes of the tensors of a BoxList still in the file (for the progress bar)."""
    extra = boxlist.get("extra_fields")
    values = [boxlist.get("bbox"), *(extra.values() if isinstance(extra, dict) else ())]
    return sum(value.span for value in values if isinstance(value, torchfile.LazyTensor))


def guess_task(prediction):
    """'predcls', 'sgcls' or 'sgdet' from a prediction BoxList's field names (module docstring)."""
    extra = prediction.get("extra_fields")
    names = set(extra) if isinstance(extra, dict) else set()
    if "labels" not in names:
        return "sgdet"
    return "sgcls" if "predict_logits" in names else "predcls"


# ---------------------------------------------------------------------------------------------
# One image
# ---------------------------------------------------------------------------------------------


def as_boxlist(value, where, label):
    """A BoxList as the converter reads it: unpickler.BoxList as it is; a BoxList object of
    Scene-Graph-Benchmark or PySGG (``bbox``, ``size``, ``mode`` and ``extra_fields`` as
    attributes, tensors on any device) as an unpickler.BoxList of its attributes."""
    if isinstance(value, unpickler.BoxList):
        return value
    fields = getattr(value, "__dict__", None)
    if not isinstance(fields, dict) or "bbox" not in fields:
        raise common.ConvertError([f"{where}: {label} is a {type(value).__name__}, not a BoxList"])
    return unpickler.BoxList(fields)


def field_array(boxlist, name, where, label, kinds="biuf"):
    """A BoxList field (``bbox`` or an extra field) as a numpy array of one of the kinds (a torch
    tensor is read with common.as_numpy)."""
    value = common.as_numpy(boxlist.get("bbox") if name == "bbox" else boxlist.extra_field(name))
    if value is None:
        raise common.ConvertError([f"{where}: {label} has no field '{name}'"])
    if not isinstance(value, np.ndarray) or value.dtype.kind not in kinds:
        kind = value.dtype if isinstance(value, np.ndarray) else type(value).__name__
        raise common.ConvertError([f"{where}: {label} field '{name}' must be a numeric tensor, not {kind}"])
    return value


def shaped_field(array, shape, name, where, label):
    if not common.has_shape(array, shape):
        raise common.ConvertError([f"{where}: {label} field '{name}' has shape {array.shape}; "
                                   f"expected {common.shape_text(shape)}"])
    return array


def integer_field(boxlist, name, shape, low, high, where, label, meaning):
    array = shaped_field(field_array(boxlist, name, where, label, "biu"), shape, name, where, label).astype(np.int64)
    common.out_of_range(array, low, high, f"{label}.{name}", where, meaning)
    return array


def finite_field(boxlist, name, shape, where, label):
    array = shaped_field(field_array(boxlist, name, where, label, "f"), shape, name, where, label)
    if not np.isfinite(array).all():
        raise common.ConvertError([f"{where}: {label} field '{name}' holds NaN or inf"])
    return array


def _size(boxlist, where, label):
    size = boxlist.get("size")
    if not (isinstance(size, (tuple, list)) and len(size) == 2
            and all(isinstance(n, (int, float)) and not isinstance(n, bool) and n > 0 for n in size)):
        raise common.ConvertError([f"{where}: {label} size {size!r:.60} is not (width, height)"])
    return size


def _split_xyxy(box, mode):
    """BoxList._split_into_xyxy in float32: the columns x1, y1, x2, y2."""
    if mode == "xyxy":
        return box[:, 0], box[:, 1], box[:, 2], box[:, 3]
    one, zero = np.float32(1), np.float32(0)
    return (box[:, 0], box[:, 1], box[:, 0] + np.maximum(box[:, 2] - one, zero),
            box[:, 1] + np.maximum(box[:, 3] - one, zero))


def resize_boxes(box, mode, size, width, height):
    """Boxes (N, 4) float32 of a BoxList of ``size`` (w, h) in ``mode``, as BoxList.resize((width,
    height)).convert('xyxy') gives them (float32 throughout)."""
    box = box.astype(np.float32)
    if tuple(size) != (width, height):
        ratios = (float(width) / float(size[0]), float(height) / float(size[1]))
        if ratios[0] == ratios[1]:
            box = box * np.float32(ratios[0])
        else:
            x1, y1, x2, y2 = _split_xyxy(box, mode)
            box = np.column_stack([x1 * np.float32(ratios[0]), y1 * np.float32(ratios[1]),
                                   x2 * np.float32(ratios[0]), y2 * np.float32(ratios[1])])
            if mode == "xywh":  # BoxList.resize converts back to the original mode
                one = np.float32(1)
                box = np.column_stack([box[:, 0], box[:, 1], box[:, 2] - box[:, 0] + one, box[:, 3] - box[:, 1] + one])
    return np.column_stack(_split_xyxy(box, mode)).astype(np.float32)


def boxes_in_gt_size(boxlist, image, where, label):
    """A BoxList's boxes in the GT image's size, float32 xyxy; (boxes, whether they were resized)."""
    mode = boxlist.get("mode")
    if mode not in ("xyxy", "xywh"):
        raise common.ConvertError([f"{where}: {label} mode {mode!r:.40} is not 'xyxy' or 'xywh'"])
    box = finite_field(boxlist, "bbox", (None, 4), where, label)
    size = _size(boxlist, where, label)
    return resize_boxes(box, mode, size, image.width, image.height), tuple(size) != (image.width, image.height)


def check_groundtruth(groundtruth, image, where, n_objects, n_predicates):
    """The file's GT BoxList against the GT JSON's image (module docstring), else ConvertError."""
    label, gt_rows = "groundtruth", image.relations[image.file_rows]
    hint = "the GT JSON's; the file was evaluated against another GT, or its images are in another order"
    labels = integer_field(groundtruth, "labels", (None,), 1, n_objects, where, label, "labels are 1-based classes")
    if len(labels) != len(image.categories) or not np.array_equal(labels - 1, image.categories):
        raise common.ConvertError([f"{where}: groundtruth field 'labels' - 1 ({_short(labels - 1)}) differs from "
                                   f"{hint} ({_short(image.categories)})"])
    tuples = field_array(groundtruth, "relation_tuple", where, label, "biu")
    rows = shaped_field(tuples, (None, 3), "relation_tuple", where, label).astype(np.int64) - np.array([0, 0, 1])
    if rows.shape != gt_rows.shape or not np.array_equal(rows, gt_rows):
        raise common.ConvertError([f"{where}: groundtruth field 'relation_tuple' (predicate - 1: {_short(rows)}) "
                                   f"differs from {hint} relation rows ({_short(gt_rows)})"])
    boxes, _ = boxes_in_gt_size(groundtruth, image, where, label)
    far = np.abs(boxes.astype(np.float64) - image.boxes).max(initial=0)
    if far > BOX_TOLERANCE:
        raise common.ConvertError([f"{where}: groundtruth field 'bbox' is {far:.3g} pixels from {hint} boxes "
                                   f"(at most {BOX_TOLERANCE} allowed)"])


def _short(array):
    text = np.array2string(np.asarray(array), threshold=12, separator=",").replace("\n", "")
    return " ".join(text.split())


def prediction_arrays(prediction, groundtruth, image, where, n_objects, n_predicates, options, task):
    """One image's prediction BoxList (and the file's groundtruth BoxList, or None) ->
    (common.update_arrays, notes); see the module docstring."""
    if groundtruth is not None:
        check_groundtruth(groundtruth, image, where, n_objects, n_predicates)
    label = "prediction"
    boxes, resized = boxes_in_gt_size(prediction, image, where, label)
    count = len(boxes)
    labels = integer_field(prediction, "pred_labels", (count,), 1, n_objects, where, label,
                       f"pred_labels are 1-based object classes 1..{n_objects}")
    scores = finite_field(prediction, "pred_scores", (count,), where, label)
    pairs = integer_field(prediction, "rel_pair_idxs", (None, 2), 0, count - 1, where, label,
                      f"only {count} boxes exist")
    rel_scores = finite_field(prediction, "pred_rel_scores", (len(pairs), n_predicates + 1), where, label)
    probabilities = rel_scores[:, 1:]
    predicates = probabilities.argmax(axis=1) if len(pairs) else np.zeros(0, np.int64)
    ng_triplets = common.rank_ng(pairs, probabilities, None if task == "predcls" else scores, options.ng_top,
                                 options.ng_per_predicate)
    arrays = common.update_arrays(labels - 1, np.column_stack([pairs, predicates]), ng_triplets, None, boxes, scores)
    notes = collections.Counter({"images": 1, f"task:{task}": 1, "instances": count, "triplets": len(pairs),
                                 "ng_triplets": len(ng_triplets), "raw_boxes": 1, "resized": int(resized),
                                 "object_scores": int(task != "predcls"),
                                 "self_pairs": int(np.count_nonzero(pairs[:, 0] == pairs[:, 1])),
                                 "task_fields_differ": int(guess_task(prediction) != task),
                                 "box_count_differs": int(task != "sgdet" and count != len(image.categories))})
    notes.update(rel_labels_notes(prediction, predicates))
    return arrays, notes


def convert_image(result, image, where, n_objects, n_predicates, options, task):
    """One image's {prediction, groundtruth} -> (record, None, notes): prediction_arrays as the file
    converter writes them."""
    return common.as_record(*prediction_arrays(result.get("prediction"), result.get("groundtruth"), image, where,
                                               n_objects, n_predicates, options, task))


def image_arrays(prediction, image, n_objects, n_predicates, *, task="auto", groundtruth=None, ng_top=common.NG_TOP,
                 ng_per_predicate=common.NG_PER_PREDICATE):
    """One Scene-Graph-Benchmark / PySGG prediction BoxList -> the keyword arguments of
    ``sgeval.Evaluator.update`` for its image: the arrays ``convert`` writes for it (the same rules,
    the same code; box mode).

    prediction: the BoxList the model returns for the image (tensors on any device; its ``size``
    may be the model's input size: boxes are resized to the GT image as the evaluator resizes
    them), or an unpickler.BoxList; image: the sgeval.GTImage it belongs to; n_objects, n_predicates:
    the GT's vocabulary sizes, ``len(gt.object_classes)`` and ``len(gt.predicate_classes)``; task:
    predcls | sgcls | sgdet (the ng_triplets ranking leaves out object scores in predcls), or auto
    to guess from this prediction's fields (``convert`` guesses once, from the first prediction);
    groundtruth: optional BoxList of the evaluator's GT (``labels``, ``relation_tuple``), checked
    against the image; ng_top, ng_per_predicate: as for ``convert``.

    Returns {"labels": (P,) int64 0-based categories, "triplets": (N, 3) int64, "ng_triplets":
    (M, 3) int64, "masks": None, "boxes": (P, 4) float64 xyxy, "scores": (P,) float64}. Raises
    common.ConvertError (an sgeval.SGEvalError) naming the image and the field.
    """
    if task not in TASKS:
        raise common.ConvertError([f"task '{task}' is not one of {', '.join(TASKS)}"])
    options = common.Options(ng_top=ng_top, ng_per_predicate=ng_per_predicate).check()
    where = common.image_where(image)
    prediction = as_boxlist(prediction, where, "prediction")
    groundtruth = None if groundtruth is None else as_boxlist(groundtruth, where, "groundtruth")
    chosen = guess_task(prediction) if task == "auto" else task
    arrays, _ = prediction_arrays(prediction, groundtruth, image, where, n_objects, n_predicates, options, chosen)
    return arrays


def rel_labels_notes(prediction, predicates):
    """How often pred_rel_labels (ignored, as the evaluator ignores it) differ from argmax + 1."""
    labels = common.as_numpy(prediction.extra_field("pred_rel_labels"))
    if not isinstance(labels, np.ndarray) or labels.shape != predicates.shape or labels.dtype.kind not in "iu":
        return {}
    return {"pred_rel_rows": len(labels), "pred_rel_labels_differ": int(np.count_nonzero(labels != predicates + 1))}


# ---------------------------------------------------------------------------------------------
# The conversion
# ---------------------------------------------------------------------------------------------


def convert(raw, out, gt, task="auto", ng_top=common.NG_TOP, ng_per_predicate=common.NG_PER_PREDICATE,
            progress=None, workers=1):
    """Convert an eval_results.pytorch to the prediction ZIP ``out`` (box mode: no masks).

    gt: the box-mode GT JSON the file was evaluated against (its evaluated images, in order, are
    the predictions' images); task: auto | predcls | sgcls | sgdet (module docstring); ng_top,
    ng_per_predicate: ng_triplets kept overall and per predicate; progress, workers: as for every
    family. Returns a summary dict; raises common.ConvertError listing every problem, and then
    writes nothing."""
    if task not in TASKS:
        raise common.ConvertError([f"task '{task}' is not one of {', '.join(TASKS)}"])
    options = common.Options(ng_top=ng_top, ng_per_predicate=ng_per_predicate).check()
    raw_input, predictions = open_results(raw)
    chosen = task if task != "auto" else guess_task(predictions[0]) if predictions else "sgdet"

    def image_fn(result, image, where, n_objects, n_predicates, options):
        return convert_image(result, image, where, n_objects, n_predicates, options, chosen)

    summary = common.convert_all(raw, out, gt, image_fn, FAMILY, options, progress, workers=workers,
                                 raw_input=raw_input, mode="box", provenance={
                                     "options": {"task": task, "ng_top": ng_top, "ng_per_predicate": ng_per_predicate},
                                     "task": chosen})
    return {**summary, "guessed": int(task == "auto")}


main = common.make_cli(convert, __doc__.split("\n\n")[0], "Scene-Graph-Benchmark, PySGG (eval_results.pytorch)",
                       predicate_source=False,
                       gt_help="Box-mode GT JSON (psg.json shape; the VG150 converter's output)", extra_options=[
                           click.option("--task", type=click.Choice(TASKS), default="auto", show_default=True,
                                        help="Scene-Graph-Benchmark's mode; auto guesses it from the fields.")])

if __name__ == "__main__":
    main()
