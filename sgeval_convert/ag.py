"""Action Genome (video scene graphs) as STTran's code builds and scores it: AG's annotation files to
sgeval's box-mode GT JSON (one image per frame), and the STTran-family model output per video to
sgeval predictions with STTran's three ranked lists.

    sgeval convert ag-gt --anno-dir AG/annotations --out ag_test.json                       # predcls
    sgeval convert ag-gt --anno-dir AG/annotations --objects object_bbox_and_relationship_filtersmall.pkl \\
        --out ag_test_filtersmall.json                                                      # sgcls, sgdet
    sgeval convert ag --gt ag_test.json --task predcls --attention logits preds.pt out.zip

Every rule below was read in yrcong/STTran at commit 6b559e13: ``ag.py`` is
``dataloader/action_genome.py``, ``eval.py`` ``lib/evaluation_recall.py``; TEMPURA
(sayaknag/unbiasedSGG 976babd4) and DSG-DETR (Shengyu-Feng/DSG-DETR 1d28dda0) build the test set
and the three lists with the same lines (tools/ag_check/README.md lists every rule and where the
three differ).

Ground truth (``convert_gt``)
-----------------------------
``annotations/`` holds ``object_classes.txt``, ``relationship_classes.txt``, ``person_bbox.pkl`` and
``object_bbox_and_relationship.pkl``; ``objects``: another object file in the latter's layout (the
small-box-filtered one STTran opens for sgcls and sgdet, ag.py:61-66).

* **Vocabulary** (ag.py:20-56): the two lists with the loader's renames by position (objects
  9, 11, 23, 24, 31 counting its ``__background__`` as 0; predicates 0, 1, 5, 7, 10, 11, 13, 15-20,
  25). Category = class index - 1 (``person`` is 0); predicate = index in the 26 relationship
  classes (attention 0-2, spatial 3-8, contacting 9-25, ag.py:54-56).
* **Frames and videos** (ag.py:86-147): the keys of ``person_bbox.pkl`` in file order; a frame
  belongs to the split its object list's *first* entry names (``metadata.set``), is kept when one
  of its objects is ``visible`` and when its person box has a row (``filter_nonperson_box_frame``);
  a video (the key before '/') is kept when more than 2 of its frames are left after that filter
  (videos of exactly 2 frames are dropped too). Videos in order of their first frame, frames in key
  order. ``image_id`` = the frame key (``VIDEO.mp4/FRAME.png``), ``video`` = the video,
  ``frame_index`` = the frame's place in its video (the predictions' ``im_idx``).
* **Boxes** (ag.py:127, 133): the person box (``bbox``, one xyxy row) as stored; an object's
  (x, y, w, h) as ``np.array([x, y, x + w, y + h])`` computes it (in the stored numbers' own type),
  written as float64.
* **Relations** (eval.py:44-53): per visible object m (the person is instance 0, objects 1, 2, ...
  in file order): [0, m, attention], then [m, 0, spatial] per spatial label, then [0, m, contacting]
  per contacting label, repeats kept. A test object must have exactly one attention label
  (STTran's evaluator indexes with it, eval.py:48).
* **Training entries**: the frames of the ``train`` split by the same rules (several attention labels
  allowed), outside ``test_image_ids`` (unless ``train=False``): training statistics only.

Predictions (``convert``, ``image_arrays``)
-------------------------------------------
One ``pred`` dict per kept test video, as the model returns it (object_detector.py and sttran.py
fields): ``boxes`` (N, 5) [frame index, x1, y1, x2, y2], ``labels`` / ``scores`` (predcls) or
``pred_labels`` / ``pred_scores`` (sgcls, sgdet) (N,) with 1-based labels, ``pair_idx`` (R, 2)
indices into boxes (subject = the person), ``im_idx`` (R,) the frame of each pair,
``attention_distribution`` (R, 3), ``spatial_distribution`` (R, 6), ``contacting_distribution``
(R, 17). The file: ``torch.save`` of ``{video: pred}`` or of a list of preds in the GT's video
order, or a plain pickle of ``{video: pred}`` holding numpy arrays. ``attention``: ``logits`` (STTran, DSG-DETR: the evaluator applies a
softmax, eval.py:34) or ``probabilities`` (TEMPURA, whose model applies it); no default.

Per frame f (the rows with im_idx == f, in row order; eval.py:63-97, 120-150, 203-211):

* ``instances``: the boxes whose frame index is f, in order: category = label - 1, bbox =
  ``boxes[:, 1:]``, score = the object score. Every pair must use boxes of its own frame.
* The relation rows: the frame's pairs three times (attention; spatial with subject and object
  swapped; contacting), each with a 26-wide row holding its distribution in its own columns and
  zeros elsewhere (softmax in float64, rounded to float32, for logits).
* ``with``: per relation row, argmax over the 26 columns (first on ties) and its score.
  ``semi``: per relation row, in order: if columns 0 + 1 > 0, the argmax; elif columns 3 + 4 > 0 or
  columns 9 + 10 > 0, every column with score > 0.9. ``no``: every (row, column) scored by
  (subject score x object score, in the scores' dtype) x column score, descending, the first 100.
  Each list is then ordered by subject score x object score x predicate score (float64),
  descending; ties keep list order (STTran's unstable numpy sorts leave tie order undefined).
* ``triplets`` / ``triplet_scores`` = the ``with`` list, ``ng_triplets`` / ``ng_triplet_scores`` =
  the ``no`` list, ``row_lists`` = {"with", "semi", "no"}: {"triplets": [[s, o, p]], "scores": [...]}
  with s, o indices into the frame's instances.

Every problem is one line naming the file, the video and frame, and the field.
"""

from __future__ import annotations

import collections
import os
import sys
from pathlib import Path

import click
import numpy as np

import sgeval
from . import common, gtjson, torchfile, unpickler
from .common import ConvertError

FAMILY = "ag"
OBJECT_RENAMES = {8: "closet/cabinet", 10: "cup/glass/bottle", 22: "paper/notebook", 23: "phone/camera",
                  30: "sofa/couch"}  # ag.py:26-30, counted without __background__
PREDICATE_RENAMES = {0: "looking_at", 1: "not_looking_at", 5: "in_front_of", 7: "on_the_side_of", 10: "covered_by",
                     11: "drinking_from", 13: "have_it_on_the_back", 15: "leaning_on", 16: "lying_on",
                     17: "not_contacting", 18: "other_relationship", 19: "sitting_on", 20: "standing_on",
                     25: "writing_on"}  # ag.py:39-52
BLOCKS = {"attention": (0, 3), "spatial": (3, 9), "contacting": (9, 26)}  # ag.py:54-56
N_PREDICATES = 26
SEMI_THRESHOLD = 0.9  # STTran test.py:59
NO_TOP = 100  # eval.py:144
TASKS = ("predcls", "sgcls", "sgdet")
ATTENTION = ("logits", "probabilities")
TORCH_LEGACY_HEAD = b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19"  # pickled torchfile.MAGIC_NUMBER


# ---------------------------------------------------------------------------------------------
# Ground truth
# ---------------------------------------------------------------------------------------------


def read_classes(path, renames, least):
    """A class list file (one name a line, as the loader strips it), renamed by position."""
    try:
        with open(path, encoding="utf-8") as handle:
            lines = [line.rstrip("\n") for line in handle]
    except (OSError, UnicodeDecodeError) as error:
        raise ConvertError([f"{path}: cannot read: {error}"]) from None
    if len(lines) < least:
        raise ConvertError([f"{path}: {len(lines)} lines; the loader renames classes up to line {least}"])
    return [renames.get(index, name) for index, name in enumerate(lines)]


def read_vocabulary(anno_dir):
    objects = read_classes(Path(anno_dir, "object_classes.txt"), OBJECT_RENAMES, 31)
    predicates = read_classes(Path(anno_dir, "relationship_classes.txt"), PREDICATE_RENAMES, N_PREDICATES)
    if len(predicates) != N_PREDICATES:
        raise ConvertError([f"{anno_dir}/relationship_classes.txt: {len(predicates)} classes; STTran's evaluator "
                            f"splits 26 into attention 0-2, spatial 3-8 and contacting 9-25"])
    return objects, predicates


def read_mapping(path):
    """A pickled dict (frame key -> value), read by the restricted unpickler (no code runs)."""
    if not os.path.isfile(path):
        raise ConvertError([f"{path}: no such file"])
    result = common.load_source(str(path), str(path))
    return result.fields


def person_box(entry, where):
    """The frame's person box (4,) float64, or None when it has no row (the frame is left out)."""
    box = entry.get("bbox") if isinstance(entry, dict) else None
    array = np.asarray(box) if isinstance(box, np.ndarray) else None
    if array is None or array.dtype.kind not in "iuf" or array.ndim != 2 or array.shape[1] != 4:
        raise ConvertError([f"{where}: field 'bbox' of person_bbox.pkl must be an (n, 4) numeric array"])
    if array.shape[0] == 0:
        return None
    if array.shape[0] > 1 or not np.isfinite(array).all():
        raise ConvertError([f"{where}: field 'bbox' of person_bbox.pkl must hold one finite box, not "
                            f"{array.shape[0]} (STTran's evaluator puts it in one row, evaluation_recall.py:43)"])
    return array[0].astype(np.float64)


def frame_size(entry, where):
    size = entry.get("bbox_size")
    if not (isinstance(size, (tuple, list)) and len(size) == 2 and all(gtjson.is_positive_int(v) for v in size)):
        raise ConvertError([f"{where}: field 'bbox_size' of person_bbox.pkl must be (width, height)"])
    return int(size[0]), int(size[1])


def frame_split(objects, where):
    """The split the frame's first object names (ag.py:89), and whether it has a visible object."""
    if not isinstance(objects, list) or not objects or not all(isinstance(o, dict) for o in objects):
        raise ConvertError([f"{where}: its object list must be a non-empty list of dicts (the loader reads the "
                            f"first one's metadata)"])
    metadata = objects[0].get("metadata")
    split = metadata.get("set") if isinstance(metadata, dict) else None
    if not isinstance(split, str):
        raise ConvertError([f"{where}: field 'metadata' of its first object must name its 'set'"])
    return split, any(bool(o.get("visible")) for o in objects)


def kept_frames(person, objects, split, object_path):
    """STTran's loader (ag.py:86-147): [(video, [frame keys])] of a split, and its counts."""
    videos, counts = {}, collections.Counter()
    for key in person:
        where = f"{object_path}: frame {key}"
        if not isinstance(key, str) or key.count("/") != 1:
            raise ConvertError([f"{where}: a frame key must be 'video/frame'"])
        if key not in objects:
            raise ConvertError([f"{where}: the frame of person_bbox.pkl has no entry here"])
        frame_split_name, has_visible = frame_split(objects[key], where)
        if frame_split_name == split and has_visible:
            videos.setdefault(key.split("/")[0], []).append(key)
    kept = []
    for video, keys in videos.items():
        with_person = [k for k in keys if person_box(person[k], f"frame {k}") is not None]
        counts["frames_without_person_box"] += len(keys) - len(with_person)
        if len(with_person) > 2:
            kept.append((video, with_person))
        else:
            counts[f"videos_of_{len(with_person)}_frames"] += 1
    return kept, counts


def object_box(obj, where):
    box = obj.get("bbox")
    if not (isinstance(box, (tuple, list, np.ndarray)) and len(box) == 4):
        raise ConvertError([f"{where}: field 'bbox' of a visible object must be (x, y, w, h)"])
    x, y, w, h = box
    if not all(isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool) for v in box):
        raise ConvertError([f"{where}: field 'bbox' must hold four numbers"])
    corners = np.array([x, y, x + w, y + h]).astype(np.float64)  # ag.py:133, in the numbers' own type
    if not np.isfinite(corners).all():
        raise ConvertError([f"{where}: field 'bbox' must be finite"])
    return corners


def object_labels(obj, predicates, where, single_attention):
    """[(block, predicate)] of a visible object: attention, spatial, contacting labels in order."""
    labels = []
    for block, (low, high) in BLOCKS.items():
        names = obj.get(f"{block}_relationship")
        if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names):
            raise ConvertError([f"{where}: field '{block}_relationship' must be a list of names"])
        unknown = [n for n in names if n not in predicates[low:high]]
        if unknown:
            raise ConvertError([f"{where}: field '{block}_relationship' holds {unknown[0]!r}, not one of the "
                                f"{block} classes {predicates[low:high]}"])
        if block == "attention" and single_attention and len(names) != 1:
            raise ConvertError([f"{where}: field 'attention_relationship' holds {len(names)} labels; STTran's "
                                f"evaluator takes exactly one (evaluation_recall.py:48)"])
        labels += [(block, low + predicates[low:high].index(n)) for n in names]
    return labels


def frame_entry(key, frame_index, person_entry, frame_objects, vocabulary, where, evaluated):
    """One frame's GT entry (module docstring)."""
    objects, predicates = vocabulary
    boxes, categories, relations = [person_box(person_entry, where)], [0], []
    for obj in (o for o in frame_objects if o.get("visible")):
        m = len(boxes)
        name = obj.get("class")
        if name not in objects:
            raise ConvertError([f"{where}: field 'class' {name!r} is not an object class"])
        boxes.append(object_box(obj, where))
        categories.append(objects.index(name))
        for block, predicate in object_labels(obj, predicates, where, evaluated):
            relations.append([m, 0, predicate] if block == "spatial" else [0, m, predicate])
    width, height = frame_size(person_entry, where)
    return {"image_id": key, "video": key.split("/")[0], "frame_index": frame_index, "file_name": key,
            "width": width, "height": height,
            "segments_info": [{"id": i, "category_id": int(c)} for i, c in enumerate(categories)],
            "annotations": [{"bbox": box.tolist(), "category_id": int(c)} for box, c in zip(boxes, categories)],
            "relations": relations}


def convert_gt(anno_dir, out_json, objects_file=None, train=True):
    """Convert AG's annotations to the sgeval GT JSON ``out_json`` (module docstring).

    objects_file: the object file to use instead of anno_dir/object_bbox_and_relationship.pkl (the
    small-box-filtered one for sgcls and sgdet); train: also write the training split's frames.
    Returns a summary dict; raises ConvertError naming the file, frame and field, and then writes
    nothing."""
    objects, predicates = read_vocabulary(anno_dir)
    person_path = Path(anno_dir, "person_bbox.pkl")
    object_path = Path(objects_file) if objects_file is not None else Path(anno_dir,
                                                                           "object_bbox_and_relationship.pkl")
    person, frame_objects = read_mapping(person_path), read_mapping(object_path)
    splits = [("test", True)] + [("train", False)] * bool(train)
    problems, counts = gtjson.Problems(), {}
    kept = {}
    for split, _ in splits:
        kept[split], counts[split] = kept_frames(person, frame_objects, split, object_path)

    def entries():
        for split, evaluated in splits:
            for video, keys in kept[split]:
                for index, key in enumerate(keys):
                    yield frame_entry(key, index, person[key], frame_objects[key], (objects, predicates),
                                      f"{object_path}: frame {key}", evaluated), evaluated

    info = {"converter": "sgeval_convert.ag", "dataset": "Action Genome", "annotations": os.path.abspath(anno_dir),
            "objects": os.path.abspath(object_path), "training_images": bool(train),
            "videos": len(kept["test"]), "loader_counts": {s: dict(c) for s, c in counts.items()}}
    summary = gtjson.write_gt(out_json, objects, predicates, entries(), info, problems, str(object_path))
    return {**summary, "videos": len(kept["test"]), "loader_counts": info["loader_counts"]}


# ---------------------------------------------------------------------------------------------
# Predictions: one video
# ---------------------------------------------------------------------------------------------


def _array(pred, name, shape, where, kinds="iuf"):
    value = common.as_numpy(pred.get(name)) if isinstance(pred, dict) else None
    if isinstance(value, unpickler.Lazy):
        value = torchfile.read_lazy(value, where)
    if value is None:
        raise ConvertError([f"{where}: missing field '{name}'"])
    if isinstance(value, unpickler.TorchObject):
        raise ConvertError([f"{where}: field '{name}' is a torch tensor in a plain pickle, which cannot be read "
                            f"without torch; save the predictions with torch.save"])
    array = np.asarray(value) if isinstance(value, np.ndarray) else None
    if array is None or array.dtype.kind not in kinds or not common.has_shape(array, shape):
        raise ConvertError([f"{where}: field '{name}' must be a numeric array of shape "
                            f"{common.shape_text(shape)}"])
    if array.dtype.kind == "f" and not np.isfinite(array).all():
        raise ConvertError([f"{where}: field '{name}' holds NaN or inf"])
    return array


def _frame_numbers(values, n_frames, name, where):
    """Integral frame indices in [0, n_frames) as int64; ConvertError naming the first bad one."""
    bad = np.flatnonzero((values != np.floor(values)) | (values < 0) | (values >= n_frames))
    if len(bad):
        raise ConvertError([f"{where}: field '{name}' row {bad[0]} is {values[bad[0]].item()!r}, not a frame index of "
                            f"this video's {n_frames} frames"])
    return values.astype(np.int64)


def video_fields(pred, n_frames, n_objects, task, where):
    """The checked arrays of one video's pred dict."""
    label_name, score_name = ("labels", "scores") if task == "predcls" else ("pred_labels", "pred_scores")
    boxes = _array(pred, "boxes", (None, 5), where)
    n = len(boxes)
    fields = {"boxes": boxes, "labels": _array(pred, label_name, (n,), where, "iu"),
              "scores": _array(pred, score_name, (n,), where, "f"),
              "pairs": _array(pred, "pair_idx", (None, 2), where, "iu")}
    r = len(fields["pairs"])
    fields["im_idx"] = _frame_numbers(_array(pred, "im_idx", (r,), where), n_frames, "im_idx", where)
    for block, (low, high) in BLOCKS.items():
        fields[block] = _array(pred, f"{block}_distribution", (r, high - low), where, "f")
    fields["box_frames"] = _frame_numbers(boxes[:, 0], n_frames, "boxes", where)
    labels = fields["labels"]
    bad = np.flatnonzero((labels < 1) | (labels > n_objects))
    if len(bad):
        raise ConvertError([f"{where}: field '{label_name}' row {bad[0]} is {labels[bad[0]]}, not a label from 1 "
                            f"to {n_objects}"])
    bad = np.flatnonzero((fields["pairs"] < 0).any(1) | (fields["pairs"] >= n).any(1))
    if len(bad):
        raise ConvertError([f"{where}: field 'pair_idx' row {bad[0]} points outside the {n} boxes"])
    return fields


def attention_probabilities(values, attention):
    """The attention rows as the evaluator ranks them: a softmax of logits (float64, rounded to float32)."""
    if attention == "probabilities":
        return values
    shifted = values.astype(np.float64) - values.max(1, keepdims=True)
    exp = np.exp(shifted)
    return (exp / exp.sum(1, keepdims=True)).astype(np.float32)


def relation_rows(fields, rows, attention):
    """(pairs (3n, 2) box indices, scores (3n, 26) float64) of a frame's pair rows (eval.py:63-76)."""
    pairs = fields["pairs"][rows]
    scores = np.zeros((3 * len(rows), N_PREDICATES))
    for part, (block, (low, high)) in enumerate(BLOCKS.items()):
        values = fields[block][rows]
        if block == "attention":
            values = attention_probabilities(values, attention)
        scores[part * len(rows):(part + 1) * len(rows), low:high] = values
    return np.concatenate([pairs, pairs[:, ::-1], pairs]), scores


def semi_rows(scores):
    """(row, predicate) of the semi constraint (eval.py:120-137), in order."""
    picked = []
    for i, row in enumerate(scores):
        if row[0] + row[1] > 0:
            picked.append((i, int(row.argmax())))
        elif row[3] + row[4] > 0 or row[9] + row[10] > 0:
            picked += [(i, int(k)) for k in np.flatnonzero(row > SEMI_THRESHOLD)]
    return np.array(picked, np.int64).reshape(-1, 2)


def ranked(pairs, predicates, predicate_scores, object_scores):
    """A list ordered as evaluate_recall orders it (eval.py:203-211): by subject x object x predicate
    score in float64, descending, ties in list order; (triplets with box indices, scores)."""
    products = (object_scores[pairs[:, 0]].astype(np.float64) * object_scores[pairs[:, 1]]) * predicate_scores
    order = np.argsort(-products, kind="stable")
    return np.column_stack([pairs[order], predicates[order]]), products[order]


def frame_lists(fields, rows, attention):
    """{"with", "semi", "no"}: (triplets (k, 3) with box indices, scores) of one frame."""
    pairs, scores = relation_rows(fields, rows, attention)
    object_scores = fields["scores"]
    lists = {"with": ranked(pairs, scores.argmax(1), scores.max(1), object_scores)}
    semi = semi_rows(scores)
    lists["semi"] = ranked(pairs[semi[:, 0]], semi[:, 1], scores[semi[:, 0], semi[:, 1]], object_scores)
    overall = object_scores[pairs].prod(1)[:, None] * scores  # eval.py:142-143, the pair product in its dtype
    top = np.argsort(-overall.ravel(), kind="stable")[:NO_TOP]
    row, column = np.divmod(top, N_PREDICATES)
    lists["no"] = ranked(pairs[row], column, scores[row, column], object_scores)
    return lists


def video_arrays(pred, images, n_objects, task, attention, where):
    """One video's pred -> per frame (image) the update arrays and row lists (module docstring)."""
    fields = video_fields(pred, len(images), n_objects, task, where)
    out = []
    for f, image in enumerate(images):
        at = f"{where}, frame {f} ({image.image_id})"
        boxes = np.flatnonzero(fields["box_frames"] == f)
        local = np.full(len(fields["boxes"]), -1, np.int64)
        local[boxes] = np.arange(len(boxes))
        rows = np.flatnonzero(fields["im_idx"] == f)
        outside = np.flatnonzero((local[fields["pairs"][rows]] < 0).any(1))
        if len(outside):
            raise ConvertError([f"{at}: field 'pair_idx' row {rows[outside[0]]} uses a box of another frame"])
        lists = {name: (np.column_stack([local[t[:, :2]], t[:, 2]]).reshape(-1, 3), s)
                 for name, (t, s) in frame_lists(fields, rows, attention).items()}
        out.append({"labels": fields["labels"][boxes] - 1, "boxes": fields["boxes"][boxes, 1:].astype(np.float64),
                    "scores": fields["scores"][boxes].astype(np.float64),
                    "triplets": lists["with"][0], "triplet_scores": lists["with"][1],
                    "ng_triplets": lists["no"][0], "ng_triplet_scores": lists["no"][1],
                    "row_lists": {name: {"triplets": t.tolist(), "scores": s.tolist()}
                                  for name, (t, s) in lists.items()}})
    return out


def _check_choices(task, attention):
    problems = [f"task '{task}' is not one of {', '.join(TASKS)}"] * (task not in TASKS)
    problems += [f"attention '{attention}' is not one of {', '.join(ATTENTION)} (say which the model outputs: "
                 f"STTran and DSG-DETR logits, TEMPURA probabilities)"] * (attention not in ATTENTION)
    if problems:
        raise ConvertError(problems)


def image_arrays(pred, images, n_objects, *, task, attention):
    """One video's STTran-family ``pred`` dict (torch tensors on any device, or numpy arrays) ->
    for each of its frames, in order, the keyword arguments of ``sgeval.Evaluator.update`` (labels,
    boxes, scores, triplets, ng_triplets, triplet_scores, ng_triplet_scores) plus ``row_lists``
    (the with / semi / no lists of STTran's evaluator, module docstring).

    images: the video's sgeval.GTImage list, in order (its frames, as the GT JSON lists them);
    n_objects: ``len(gt.object_classes)``; task: predcls | sgcls | sgdet (which label and score fields
    are read); attention: logits | probabilities (what attention_distribution holds). Raises
    ConvertError (an sgeval.SGEvalError) naming the video, frame and field."""
    _check_choices(task, attention)
    video = images[0].image_id.split("/")[0] if images else "(no frames)"
    return video_arrays(dict(pred), list(images), n_objects, task, attention, f"video {video}")


# ---------------------------------------------------------------------------------------------
# Predictions: the file
# ---------------------------------------------------------------------------------------------


def load_predictions(raw):
    """The raw file's {video: pred} or [pred]: torch.save (zip or legacy; tensors read lazily), or a
    pickle of numpy arrays holding {video: pred}."""
    try:
        with open(raw, "rb") as handle:
            head = handle.read(len(TORCH_LEGACY_HEAD))
    except OSError as error:
        raise ConvertError([f"{raw}: cannot read: {error}"]) from None
    if head.startswith(b"PK\x03\x04") or head == TORCH_LEGACY_HEAD:
        return torchfile.load(raw, lazy=True)
    if str(raw).endswith(".npz"):
        raise ConvertError([f"{raw}: an .npz holds no per-video dicts; save {{video: pred}} with torch.save"])
    try:
        return common.load_source(str(raw), str(raw)).fields
    except ConvertError as error:
        if any("is a list, not a Result" in line for line in error.problems):
            raise ConvertError([f"{raw}: a pickle of a list; a plain pickle must hold {{video: pred}} (a list of "
                                f"preds in the GT's video order is read from torch.save files)"]) from None
        raise


def videos_of(truth):
    """[(video, [GTImage])] of the GT's evaluated frames, in order (image_id 'video/frame')."""
    videos = {}
    for image in truth.images:
        videos.setdefault(image.image_id.split("/")[0], []).append(image)
    return list(videos.items())


def matched_predictions(preds, videos, raw):
    """[(video, images, pred)] pairing the GT's videos with the file's preds (by name, or by position)."""
    if isinstance(preds, list):
        if len(preds) != len(videos):
            raise ConvertError([f"{raw}: holds {len(preds)} videos' preds, the GT has {len(videos)} videos"])
        return [(video, images, pred) for (video, images), pred in zip(videos, preds)]
    if not isinstance(preds, dict):
        raise ConvertError([f"{raw}: must hold {{video: pred}} or a list of preds, not {type(preds).__name__}"])
    if "pair_idx" in preds and not any(video in preds for video, _ in videos):
        raise ConvertError([f"{raw}: holds one pred dict; expected {{video: pred}} for the GT's {len(videos)} videos"])
    missing = [video for video, _ in videos if video not in preds]
    extra = sorted(str(v) for v in set(preds) - {video for video, _ in videos})
    if missing or extra:
        raise ConvertError([f"{raw}: video {video}: missing from the predictions (it is a kept test video of the GT)"
                            for video in missing[:10]] + [f"{raw}: video {video}: not a kept test video of the GT"
                                                          for video in extra[:10]])
    return [(video, images, preds[video]) for video, images in videos]


def convert(raw, out, gt, task=None, attention=None, progress=None):
    """Convert an STTran-family prediction file to the prediction ZIP ``out`` (box mode; module
    docstring). gt: the GT JSON convert_gt wrote for the task's object file; task: predcls | sgcls |
    sgdet; attention: logits | probabilities (no default; recorded in convert.json). Returns a
    summary dict; raises ConvertError naming the video, frame and field, and then writes nothing."""
    _check_choices(task, attention)
    truth = sgeval.read_gt(gt)
    videos = matched_predictions(load_predictions(raw), videos_of(truth), raw)

    def sources():
        for video, images, pred in videos:
            for arrays in video_arrays(pred if isinstance(pred, dict) else {}, images, len(truth.object_classes),
                                       task, attention, f"{raw}: video {video}"):
                yield unpickler.RawResult({**arrays, "task": task})

    raw_input = common.RawInput(len(truth.images), sources(), lambda: 0)
    provenance = {"options": {"task": task, "attention": attention}, "task": task, "attention": attention,
                  "row_lists": "with, semi (threshold 0.9), no (top 100): STTran's evaluator's three lists"}
    return common.convert_all(raw, out, gt, frame_record, FAMILY, common.Options(), progress, raw_input=raw_input,
                              mode="box", provenance=provenance)


def frame_record(result, image, where, n_objects, n_predicates, options):
    """A frame's arrays (video_arrays) -> (record, None, notes) for common.convert_all."""
    arrays = result.fields
    record, _, notes = common.as_record(common.update_arrays(arrays["labels"], arrays["triplets"],
                                                             arrays["ng_triplets"], boxes=arrays["boxes"],
                                                             scores=arrays["scores"]), collections.Counter())
    record.update(triplet_scores=arrays["triplet_scores"].tolist(),
                  ng_triplet_scores=arrays["ng_triplet_scores"].tolist(), row_lists=arrays["row_lists"])
    notes.update({f"task:{arrays['task']}": 1}, images=1, instances=len(arrays["labels"]), triplets=len(arrays["triplets"]),
                 ng_triplets=len(arrays["ng_triplets"]), empty=int(len(arrays["triplets"]) == 0))
    return record, None, notes


# ---------------------------------------------------------------------------------------------
# Command lines
# ---------------------------------------------------------------------------------------------


def describe(summary):
    return (common.describe(summary) + "\nrow_lists: with, semi, no (STTran's three lists); frames without pairs: "
            f"{summary.get('empty', 0)} (they count zero hits, as in STTran)")


@click.command(short_help="STTran, TEMPURA, DSG-DETR on Action Genome",
               context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("raw", type=click.Path(exists=True, dir_okay=False))
@click.argument("out", type=click.Path(dir_okay=False))
@click.option("--gt", required=True, type=click.Path(exists=True, dir_okay=False),
              help="The GT JSON of `sgeval convert ag-gt` for the task (sgcls and sgdet: --objects filtersmall).")
@click.option("--task", required=True, type=click.Choice(TASKS), help="Which label and score fields are read.")
@click.option("--attention", required=True, type=click.Choice(ATTENTION),
              help="What attention_distribution holds: logits (STTran, DSG-DETR) or probabilities (TEMPURA).")
@click.option("--quiet", is_flag=True, help="No progress bar.")
def main(raw, out, gt, task, attention, quiet):
    """Convert STTran-family Action Genome predictions ({video: pred} saved with torch.save) to sgeval
    predictions (box mode): triplets = STTran's with-constraint list, ng_triplets its no-constraint
    list (top 100), row_lists its with / semi / no lists."""
    summary = sgeval.run_cli(lambda progress: convert(raw, out, gt, task, attention, progress), "converting", quiet)
    click.echo(describe(summary))


@click.command(short_help="Action Genome GT JSON from AG's annotations",
               context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--anno-dir", required=True, type=click.Path(exists=True, file_okay=False),
              help="AG's annotations folder: object_classes.txt, relationship_classes.txt, person_bbox.pkl, "
                   "object_bbox_and_relationship.pkl.")
@click.option("--objects", type=click.Path(exists=True, dir_okay=False),
              help="Another object file (sgcls, sgdet: object_bbox_and_relationship_filtersmall.pkl).")
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="The sgeval GT JSON to write.")
@click.option("--no-train", is_flag=True, help="Leave out the training frames (no training statistics then).")
def gt_main(anno_dir, objects, out, no_train):
    """Convert Action Genome's annotations to sgeval's box-mode GT JSON, frames kept as STTran's loader
    keeps them."""
    summary = sgeval.run_cli(lambda progress: convert_gt(anno_dir, out, objects, not no_train), "converting",
                             quiet=True)
    click.echo(f"{gtjson.describe(summary)}\n{summary['videos']} test videos; the loader's counts: "
               f"{summary['loader_counts']}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["gt"]:
        gt_main(sys.argv[2:], prog_name="python -m sgeval_convert.ag gt")
    else:
        main()
