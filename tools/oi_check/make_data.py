"""Write synthetic Open Images-like data in PySGG's own file layouts, and raw PySGG predictions of the
three tasks, that exercise every rule of PySGG's Open Images evaluation.

    tools/oi_check/build/venv/bin/python -m tools.oi_check.make_data --seed S --out DIR [--images 30]
    (from the repository root)

DIR/categories_dict.json: {"obj": [57 names], "rel": [9 names]} as load_cate_info reads it (PySGG's
  Open Images v4 sizes: configs/e2e_relBGNN_oiv4.yaml has 58 object and 10 predicate classes with
  background; the predicate names are OI v4's, in an arbitrary order).
DIR/vrd-{train,val,test}-anno.json: [{"img_fn", "img_size": [w, h], "bbox": [[x1, y1, x2, y2], ...],
  "det_labels": [...], "rel": [[s, o, p], ...]}] with 0-based labels and predicates, as load_annotations
  reads them. The test list holds, besides the evaluated images, one image without relations and one
  without boxes (load_annotations leaves both out).
DIR/raw/<task>/<i>.npz: the prediction of evaluated test image i as PySGG's relation head leaves it
  (relation_head/inference.py:111-155; box_head.py:75-102 for the proposals): the BoxList at the
  network's input size (bbox float32 xyxy, size) with pred_labels (1-based: 0 is background),
  pred_scores (float32), rel_pair_idxs (all ordered pairs, [[0, 0]] for a single box, in triple-score
  order), pred_rel_scores (R, 10) float32 with the background in column 0, pred_rel_labels; predcls and
  sgcls also labels and attributes (the GT proposals' fields), sgcls predict_logits and boxes_per_cls.
DIR/summary.json: how many of each case of CASES the data hold (every one must be there).

What the data hold (the rules they decide are in the README): see CASES. Three things are checked
against PySGG's own run (oracle.run), image by image, and an image is redrawn until they hold:
- the OI list eval_rel_results builds (oi_evaluation.py:203-228; unstable np.argsort twice) equals
  oi_list(), the stable rule (ties by row, then the predicate's place in its row, then index);
- SGNoGraphConstraintRecall's list (sgg_eval.py:210, unstable) equals the stable ranking in its first
  100 entries;
- ap_eval's AP (ap_eval_rel.py:145, an unstable sort of all images' confidences of a predicate) equals
  that of the stable sort (images in dataset order, then list order).
So the data hold ties that matter, ordered by PySGG on this machine as the stable rule orders them.
"""

import argparse
import collections
import json
import sys
from pathlib import Path

import numpy as np
import torch

from tools.oi_check import oracle, pysgg_env
from tools.oracle_common import iou_plus_one_float64

N_CLASSES = 57
PREDICATES = ["at", "on", "holds", "plays", "interacts_with", "wears", "hits", "inside_of", "under"]
NUM_REL_CLASSES = len(PREDICATES) + 1  # cfg.MODEL.ROI_RELATION_HEAD.NUM_CLASSES
TASKS = ("sgdet", "sgcls", "predcls")
TOP, PRD_K = 100, 2  # oi_evaluation.py:151, 167
FLOOR = np.float32(1e-5)  # oi_evaluation.py:225 compares float32 scores with 0.00001: in float32 (NEP 50)
ABOVE_FLOOR = np.nextafter(FLOOR, np.float32(1))
BOUNDARY_SIZES = [(800, 600), (600, 800), (1000, 600), (600, 1000), (900, 600), (600, 600), (750, 600)]
TIE_VALUES = {2: np.float32(0.75), 3: np.float32(0.75), 12: np.float32(0.625), 13: np.float32(0.625)}
# predcls: confidences two images share (one hit, one miss; obj scores are 1)
MAX_ROUNDS = 60
CASES = (
    "GT test entries without relations (left out by load_annotations)",
    "GT test entries without boxes (left out by load_annotations)",
    "GT boxes outside the image (clip_to_image clips them)", "GT images with float coordinates",
    "GT images with exact duplicate relation rows", "GT pairs with several predicates",
    "GT same-class boxes with +1 IoU exactly 0.5", "GT same-class boxes overlapping (IoU > 0.5)",
    "GT predicates absent from the test split (in train)",
    *(f"{task}: {case}" for task in TASKS for case in (
        "images with zero prediction rows", "rows whose background score is their largest",
        "OI list: hits by a row's 2nd predicate only (prd_k=2)",
        "OI list: hits ranked beyond 100 (cut)", "OI list: hits scored exactly float32(1e-5) (filtered)",
        "OI list: hits scored one ulp above 1e-5 (kept)", "OI list: tied scores within the first 100",
        "OI list: rows whose 1st and 2nd predicate scores tie", "OI list: rows whose 2nd and 3rd predicate scores tie",
        "OI list: hits at IoU exactly 0.5 (recall >= hit, AP > miss)",
        "OI list: phrase hits that are no relation hits (union box)",
        "OI list: hits whose IoU rule depends on the GT clip",
        "classic NG list: tied scores within the first 100", "images redrawn for PySGG's sort order")),
    *(f"{task}: {case}" for task in ("sgdet", "sgcls") for case in (
        "OI list: entries tied in float32 whose float64 products differ",)),
    "sgdet: [[0, 0]] placeholder images", "sgdet: resized predictions",
    "sgdet: boundary detections IoU exactly 0.5 (float64 below)",
    "sgdet: boundary detections IoU one ulp below 0.5 (float64 at or above)",
    "sgdet: detections whose best GT is taken while another it overlaps > 0.5 is free",
    "sgdet: OI list hits whose IoU is 0.5 in float32, not in float64",
    "sgcls: wrong labels",
    "predcls: confidences tied across images, a hit and a miss (AP)",
)


# --- PySGG's own arithmetic -----------------------------------------------------------------------------


def f32_iou(a, b):
    """miscellaneous.bbox_overlaps: PySGG's IoU (+1, float32), (M, 4) x (N, 4) -> (M, N)."""
    return pysgg_env.load().misc.bbox_overlaps(np.asarray(a, np.float32).reshape(-1, 4),
                                               np.asarray(b, np.float32).reshape(-1, 4))


def input_size(width, height, min_size=600, max_size=1000):
    """Resize.get_size (transforms.py:35-55, MIN_SIZE_TEST 600, MAX_SIZE_TEST 1000) -> (width, height)."""
    size = min_size
    short, long = float(min(width, height)), float(max(width, height))
    if long / short * size > max_size:
        size = int(round(max_size * short / long))
    if (width <= height and width == size) or (height <= width and height == size):
        return width, height
    if width < height:
        return size, int(size * height / width)
    return int(size * width / height), size


def resized(boxes, size, new_size):
    """BoxList(boxes, size).resize(new_size).bbox: PySGG's own resize (float32)."""
    return pysgg_env.load().BoxList(torch.from_numpy(np.asarray(boxes, np.float32).reshape(-1, 4)), size,
                                    "xyxy").resize(new_size).bbox.numpy()


def clipped(boxes, width, height):
    """get_groundtruth's boxes: BoxList(float32).clip_to_image(remove_empty=False) (open_image.py:367, 419)."""
    box = pysgg_env.load().BoxList(torch.as_tensor(np.asarray(boxes, np.float64).reshape(-1, 4)), (width, height))
    return box.clip_to_image(remove_empty=False).bbox.numpy()


def oi_list(obj_scores, pairs, rel_scores):
    """eval_rel_results' list (oi_evaluation.py:200-228) with stable sorts -> (rows, predicates (0-based),
    scores float32, ks): per row its PRD_K best predicates (ties: the lower index first), score =
    (sbj * obj) * prd in float32, the first TOP by score (ties: row, then k), those > 1e-5."""
    prd = np.asarray(rel_scores, np.float32)[:, 1:]
    order = np.argsort(-prd, axis=1, kind="stable")
    best = np.take_along_axis(prd, order, axis=1)[:, :PRD_K]
    so = obj_scores[pairs[:, 0]] * obj_scores[pairs[:, 1]]
    spo = so[:, None] * best
    flat = np.argsort(-spo.ravel(), kind="stable")[:TOP]
    rows, ks = np.divmod(flat, PRD_K) if len(flat) else (flat, flat)
    scores = spo[rows, ks]
    keep = scores > 0.00001
    return rows[keep], order[rows, ks][keep], scores[keep], ks[keep]


def ng_ranking(obj_scores, pairs, rel_scores, task):
    """SGNoGraphConstraintRecall's list with a stable sort -> (rows, predicate columns 1..C): score =
    prod(obj) * p over all predicates (predcls: float64 object scores 1, vg_eval.py:428)."""
    obj = np.ones(len(obj_scores)) if task == "predcls" else obj_scores
    scores = obj[pairs].prod(1)[:, None] * rel_scores[:, 1:]
    flat = np.argsort(-scores.ravel(), kind="stable")[:TOP]
    rows, cols = np.unravel_index(flat, scores.shape)
    return rows, cols + 1, scores[rows, cols]


# --- ground truth ---------------------------------------------------------------------------------------


class Vocabulary:
    def __init__(self, rng):
        self.classes = np.sort(rng.choice(N_CLASSES, 10, replace=False))
        self.absent = np.sort(rng.choice(len(PREDICATES), 2, replace=False))  # in train only
        self.present = np.setdiff1d(np.arange(len(PREDICATES)), self.absent)


def gt_image(rng, vocabulary, large=False, boundary=False, predicates=None, count=None):
    """One annotation entry (PySGG's vrd-*-anno.json fields) and its bookkeeping."""
    count = collections.Counter() if count is None else count
    predicates = vocabulary.present if predicates is None else predicates
    if boundary:
        width, height = BOUNDARY_SIZES[rng.integers(len(BOUNDARY_SIZES))]
    else:
        while True:
            width, height = (int(v) for v in rng.integers(320, 1025, 2))
            if input_size(width, height) != (width, height):
                break
    boxes, labels = [], []
    for _ in range(int(rng.integers(8, 10)) if large else int(rng.integers(2, 7))):
        w = 3 * int(rng.integers(8, max(9, width // 7)))  # +1-convention width a multiple of 3: IoU 0.5 at w / 3
        h = int(rng.integers(24, max(25, height // 2)))
        x, y = int(rng.integers(0, width - w)), int(rng.integers(0, height - h))
        boxes.append([x, y, x + w - 1, y + h - 1])
        labels.append(int(rng.choice(vocabulary.classes)))
    twins = []  # (original, twin, exact)
    for t in range(int(rng.integers(1, 3)) if large else int(rng.integers(0, 3))):
        k = int(rng.integers(len(boxes)))
        x1, y1, x2, y2 = boxes[k]
        w = x2 - x1 + 1
        exact = (t > 0 or not large) and rng.random() < 0.5 and x2 + w // 3 <= width - 1
        shift = w // 3 if exact else max(1, int(round(w * rng.uniform(0.06, 0.14))))
        if x2 + shift > width - 1:
            continue
        boxes.append([x1 + shift, y1, x2 + shift, y2])
        labels.append(labels[k])
        twins.append((k, len(boxes) - 1, exact))
    n = len(boxes)
    relations = []
    for _ in range(int(rng.integers(6, 12)) if large else int(rng.integers(1, 6))):
        s, o = (int(v) for v in rng.choice(n, 2, replace=False))
        relations.append([s, o, int(rng.choice(predicates))])
    for original, twin, _ in twins:  # a twin often relates where its original does
        for s, o, p in list(relations):
            if s == original and o != twin and rng.random() < 0.8:
                relations.append([twin, o, p])
    if rng.random() < 0.5:  # a related box that extends beyond the image, at times by more than it shows (clipped)
        k = int(rng.choice([s for s, _, _ in relations]))
        x1, y1, x2, y2 = boxes[k]
        side, far = int(rng.integers(3)), rng.random() < 0.6
        if side == 0:
            boxes[k][2] = width - 1 + int((width - x1) * rng.uniform(1.2, 2.0) if far else rng.integers(1, 40))
        elif side == 1:
            boxes[k][3] = height - 1 + int((height - y1) * rng.uniform(1.2, 2.0) if far else rng.integers(1, 40))
        else:
            boxes[k][0] = -int((x2 + 1) * rng.uniform(1.2, 2.0) if far else rng.integers(1, 20))
    if rng.random() < 0.3:
        relations.append(list(relations[rng.integers(len(relations))]))
    if rng.random() < 0.4:
        s, o, p = relations[rng.integers(len(relations))]
        relations.append([s, o, int(rng.choice([q for q in predicates if q != p]))])
    if rng.random() < 0.25:  # float coordinates (load_annotations reads what the JSON holds)
        boxes = [[v + float(rng.choice([0.0, 0.5, 0.25])) for v in box] for box in boxes]
        count["GT images with float coordinates"] += 1
    entry = {"img_fn": f"{int(rng.integers(1 << 62)):016x}", "img_size": [width, height], "bbox": boxes,
             "det_labels": labels, "rel": relations}
    gt = dict(width=width, height=height, labels=np.array(labels), relations=np.array(relations).reshape(-1, 3),
              raw_boxes=np.array(boxes, np.float64), boxes=clipped(boxes, width, height), twins=twins)
    count["GT boxes outside the image (clip_to_image clips them)"] += int(
        np.count_nonzero((gt["boxes"] != gt["raw_boxes"].astype(np.float32)).any(axis=1)))
    for original, twin, _ in twins:
        iou = f32_iou(gt["boxes"][original], gt["boxes"][twin])[0, 0]
        if iou == 0.5:
            count["GT same-class boxes with +1 IoU exactly 0.5"] += 1
        elif iou > 0.5:
            count["GT same-class boxes overlapping (IoU > 0.5)"] += 1
    rows = [tuple(r) for r in relations]
    if len(set(rows)) < len(rows):
        count["GT images with exact duplicate relation rows"] += 1
    pairs = collections.defaultdict(set)
    for s, o, p in rows:
        pairs[s, o].add(p)
    count["GT pairs with several predicates"] += sum(len(v) > 1 for v in pairs.values())
    return entry, gt


# --- predictions ----------------------------------------------------------------------------------------


def boundary_detection(rng, gt_box, kind):
    """A float32 box shifted right from gt_box whose float32 +1 IoU with it is exactly 0.5 where float64
    gives < 0.5, or one ulp below 0.5 where float64 gives >= 0.5 (kind: the case's name) -> box or None."""
    w = gt_box[2] - gt_box[0] + 1
    base = (gt_box + np.array([w / 3, 0, w / 3, 0])).astype(np.float32)
    steps = np.arange(-12, 13)
    x1 = base[0] + steps * np.spacing(base[0])
    x2 = base[2] + steps * np.spacing(base[2])
    boxes = np.array([[a, base[1], b, base[3]] for a in x1 for b in x2], np.float32)
    f32, f64 = f32_iou(gt_box, boxes)[0], iou_plus_one_float64(gt_box, boxes)[0]
    below = np.nextafter(np.float32(0.5), np.float32(0))
    cases = [(boxes[(f32 == 0.5) & (f64 < 0.5)], "IoU exactly 0.5 (float64 below)"),
             (boxes[(f32 == below) & (f64 >= 0.5)], "IoU one ulp below 0.5 (float64 at or above)")]
    found = dict((case, found) for found, case in cases)[kind]
    return found[rng.integers(len(found))] if len(found) else None


def factor_for(so, target):
    """A float32 v with float32(so * v) == target exactly, or None."""
    v0 = np.float32(np.float64(target) / np.float64(so))
    for step in range(0, 8):
        for v in (v0 + np.float32(step) * np.spacing(v0), v0 - np.float32(step) * np.spacing(v0)):
            v = np.float32(v)
            if v > 0 and np.float32(so * v) == target:
                return v
    return None


def set_row(rng, scores, row, first, value, second=None, second_value=None):
    """scores[row]: predicate `first` (0-based) scores value and is the best, `second` (optional)
    second_value; every other predicate lower than both, each by its own random factor (no new ties)."""
    prd = scores[row, 1:]
    cap = np.float32(value if second is None else min(value, second_value))
    others = [q for q in range(len(PREDICATES)) if q not in (first, second)]
    prd[others] = np.minimum(prd[others], cap * rng.uniform(0.2, 0.95, len(others)).astype(np.float32))
    prd[first] = value
    if second is not None:
        prd[second] = second_value


def prediction(rng, vocabulary, gt, task, zero_rows=False, tie_row=None):
    """The raw prediction of one image for one task (module docstring) -> (dict of arrays, Counter).
    tie_row: (predicate, hit) for predcls' cross-image confidence tie."""
    count = collections.Counter()
    width, height = gt["width"], gt["height"]
    size = input_size(width, height)
    boundary = size == (width, height)
    gt_boxes, gt_labels = gt["boxes"], gt["labels"]
    n_gt = len(gt_boxes)
    force = {}  # (a, b) -> (predicate, value): rows set so
    if task == "sgdet":
        det, source, det_labels = [], [], []
        for g in range(n_gt):
            for _ in range(int(rng.choice([0, 1, 1, 1, 2]))):
                w, h = gt_boxes[g, 2] - gt_boxes[g, 0] + 1, gt_boxes[g, 3] - gt_boxes[g, 1] + 1
                det.append(gt_boxes[g] + rng.normal(0, rng.choice([0.03, 0.1]), 4) * [w, h, w, h])
                source.append(g)
                det_labels.append(gt_labels[g] if rng.random() < 0.85 else int(rng.choice(vocabulary.classes)))
        for _ in range(int(rng.integers(0, 3))):  # spurious
            x, y = rng.uniform(0, width * 0.7), rng.uniform(0, height * 0.7)
            det.append([x, y, x + rng.uniform(5, width * 0.3), y + rng.uniform(5, height * 0.3)])
            source.append(-1)
            det_labels.append(int(rng.choice(vocabulary.classes)))
        if rng.random() < 0.08 or not det:  # a single detection: the [[0, 0]] placeholder row
            det, source, det_labels = det[:1] or [gt_boxes[0]], source[:1] or [0], det_labels[:1] or [gt_labels[0]]
        det = np.clip(np.array(det, np.float64), 0, [width - 1, height - 1] * 2)
        det[:, 2:] = np.maximum(det[:, 2:], det[:, :2])
        det = det.astype(np.float32)
        visited = []  # detection indices of the case below, kept as they are
        for original, twin, exact in gt["twins"]:
            # a box with an overlapping same-class twin that relates where it does: two detections of it, the
            # second overlapping the twin > 0.5 but its original more (ap_eval's argmax takes the original: FP)
            twin_rows = {tuple(r) for r in gt["relations"]}
            rels = [(o, p) for s, o, p in gt["relations"] if s == original and (twin, o, p) in twin_rows]
            if exact or not rels or len(det) < 2:
                continue
            o, p = rels[0]
            shift = (gt_boxes[twin, 0] - gt_boxes[original, 0]) / 3
            d1, d2 = gt_boxes[original].copy(), gt_boxes[original] + np.float32([shift, 0, shift, 0])
            ious = f32_iou(d2, gt_boxes[[original, twin]])[0]
            if not ious[0] > ious[1] > 0.5:
                continue
            start = len(det)
            det = np.concatenate([det, [d1, d2, gt_boxes[o]]]).astype(np.float32)
            source += [original, original, o]
            det_labels += [gt_labels[original], gt_labels[original], gt_labels[o]]
            force[start, start + 2] = (p, np.float32(0.9))
            force[start + 1, start + 2] = (p, np.float32(0.8))
            visited = [start, start + 1, start + 2]
            count["sgdet: detections whose best GT is taken while another it overlaps > 0.5 is free"] += 1
            break
        if boundary:  # exact boxes (the prediction is at the image size): the IoU boundary
            kinds = ["integer", "IoU exactly 0.5 (float64 below)", "IoU one ulp below 0.5 (float64 at or above)"]
            for i in rng.permutation(len(det))[:5]:
                g = source[i]
                if g < 0 or i in visited:
                    continue
                box, kind = gt_boxes[g], kinds[rng.integers(3)]
                w = box[2] - box[0] + 1
                if kind == "integer" and w % 3 == 0 and box[2] + w / 3 <= width - 1:
                    det[i] = box + np.float32([w / 3, 0, w / 3, 0])  # integer boxes: IoU exactly 0.5
                elif kind != "integer":
                    for kind in (kind, *(k for k in kinds[1:] if k != kind)):  # the other float case if none
                        if (found := boundary_detection(rng, box, kind)) is not None:
                            det[i] = found
                            count[f"sgdet: boundary detections {kind}"] += 1
                            break
                    else:
                        continue
                else:
                    continue
                det_labels[i] = gt_labels[g]
                # its row with the best detection of a GT object it relates to, the GT predicate first
                for s_, o, p in gt["relations"]:
                    candidates = [j for j in range(len(det)) if source[j] == o and j != i and j not in visited]
                    if s_ == g and candidates:
                        j = max(candidates, key=lambda j: f32_iou(det[j], gt_boxes[o])[0, 0])
                        if f32_iou(det[j], gt_boxes[o])[0, 0] >= 0.5:
                            det_labels[j] = gt_labels[o]
                            force[i, j] = (p, np.float32(rng.uniform(0.6, 0.9)))
                            break
            input_boxes = det
        else:
            input_boxes = resized(det, (width, height), size)
            count["sgdet: resized predictions"] += 1
        source = np.array(source)
        pred_labels = np.array(det_labels, np.int64) + 1
        obj_scores = rng.uniform(0.05, 1, len(det)).astype(np.float32)
        if len(det) > 2 and rng.random() < 0.3:
            obj_scores[1] = obj_scores[0]
        obj_scores[visited] = np.float32([0.95, 0.9, 0.9])[:len(visited)]  # the first detection ranks first
    else:
        input_boxes = gt_boxes if boundary else resized(gt_boxes, (width, height), size)
        source = np.arange(n_gt)
        pred_labels = gt_labels.astype(np.int64) + 1
        if task == "sgcls":
            wrong = rng.random(n_gt) < 0.2
            pred_labels[wrong] = rng.choice(vocabulary.classes, int(wrong.sum())) + 1
            count["sgcls: wrong labels"] += int(np.count_nonzero(pred_labels != gt_labels + 1))
            obj_scores = rng.uniform(0.05, 1, n_gt).astype(np.float32)
        else:
            obj_scores = np.ones(n_gt, np.float32)  # softmax of the one-hot GT logits
    n = len(input_boxes)
    if n == 1:
        pairs = np.zeros((1, 2), np.int64)
        count["sgdet: [[0, 0]] placeholder images"] += 1
    else:
        pairs = np.array([(a, b) for a in range(n) for b in range(n) if a != b], np.int64)  # sampling.py:36-40
    if zero_rows:
        pairs = np.zeros((0, 2), np.int64)
        count[f"{task}: images with zero prediction rows"] += 1
    scores = rel_scores(rng, pairs, source, gt, vocabulary)
    for (a, b), (p, value) in force.items():
        rows = np.flatnonzero((pairs[:, 0] == a) & (pairs[:, 1] == b))
        if len(rows):
            set_row(rng, scores, rows[0], p, value)
    eval_boxes = input_boxes if boundary else resized(input_boxes, size, (width, height))
    good = {i for i in range(n) if source[i] >= 0 and pred_labels[i] - 1 == gt_labels[source[i]] and
            f32_iou(eval_boxes[i], gt_boxes[source[i]])[0, 0] >= 0.5}  # boxes that can hit their GT
    special_rows(rng, scores, pairs, source, gt, obj_scores, task, count, force, tie_row, good)
    triple = scores[:, 1:].max(axis=1) * obj_scores[pairs[:, 0]] * obj_scores[pairs[:, 1]] if len(pairs) else \
        scores[:, 0]
    order = np.argsort(-triple, kind="stable")  # the post-processor's order (inference.py:139-148)
    pairs, scores = pairs[order], scores[order]
    out = {"bbox": np.asarray(input_boxes, np.float32).reshape(-1, 4), "size": np.array(size)}
    if task != "sgdet":  # the GT proposals' fields (box_head.py:77)
        out["labels"] = gt_labels.astype(np.int64) + 1
        out["attributes"] = np.zeros((n, 10))  # float64, as open_image.py:370 makes them
    if task == "sgcls":  # box_head.py:20-37
        logits = np.round(rng.normal(0, 1, (n, N_CLASSES + 1)) * 8) / 8
        logits[np.arange(n), pred_labels] += 4
        out["predict_logits"] = logits.astype(np.float32)
        out["boxes_per_cls"] = np.repeat(out["bbox"][:, None, :], N_CLASSES + 1, axis=1)
    out.update(pred_labels=pred_labels, pred_scores=obj_scores, rel_pair_idxs=pairs, pred_rel_scores=scores,
               pred_rel_labels=(1 + scores[:, 1:].argmax(axis=1)) if len(scores) else np.zeros(0, np.int64))
    return out, count


def rel_scores(rng, pairs, source, gt, vocabulary):
    """float32 (R, 10) softmax scores, background in column 0. A row whose ends come from a GT pair often
    puts one of its predicates first or second."""
    by_pair = collections.defaultdict(list)
    for s, o, p in gt["relations"]:
        by_pair[s, o].append(p)
    logits = rng.normal(0, 1, (len(pairs), NUM_REL_CLASSES))
    logits[:, 1 + vocabulary.present] += 0.5
    logits[:, 0] += np.where(rng.random(len(pairs)) < 0.3, 4.0, 1.0)
    for r, (a, b) in enumerate(pairs):
        options = by_pair.get((source[a], source[b]))
        if not options or rng.random() > 0.8:
            continue
        p = int(rng.choice(options))
        if rng.random() < 0.65:
            logits[r, 1 + p] += rng.uniform(3, 7)
        else:  # second: another predicate first
            q = int(rng.choice([q for q in range(len(PREDICATES)) if q not in options]))
            logits[r, 1 + q] += 7
            logits[r, 1 + p] = logits[r, 1:].max() - rng.uniform(0.2, 1.0)
    scores = np.exp(logits - logits.max(axis=1, keepdims=True))
    return (scores / scores.sum(axis=1, keepdims=True)).astype(np.float32)


def special_rows(rng, scores, pairs, source, gt, obj_scores, task, count, force, tie_row, good):
    """Ties, scores at 1e-5, hits beyond the cut: rows of GT pairs set so (see CASES)."""
    if not len(pairs):
        return
    gt_rows = collections.defaultdict(list)
    for s, o, p in gt["relations"]:
        gt_rows[s, o].append(p)
    free = [r for r, (a, b) in enumerate(pairs) if (a, b) not in force and a != b]
    hit_rows = [r for r in free if (source[pairs[r, 0]], source[pairs[r, 1]]) in gt_rows]
    rng.shuffle(hit_rows)
    hit_rows.sort(key=lambda r: pairs[r, 0] in good and pairs[r, 1] in good)  # take() pops the good ones first
    so = obj_scores[pairs[:, 0]] * obj_scores[pairs[:, 1]]
    used = set()

    others = [r for r in free if r not in hit_rows]
    rng.shuffle(others)

    def take(hit=True):
        """(row, predicate): a row of a GT pair and one of its GT predicates, or with hit=False, when
        none is left, any other row and its best predicate."""
        while hit_rows:
            r = hit_rows.pop()
            if r not in used:
                used.add(r)
                return r, gt_rows[source[pairs[r, 0]], source[pairs[r, 1]]][0]
        while not hit and others:
            r = others.pop()
            if r not in used:
                used.add(r)
                return r, int(scores[r, 1:].argmax())
        return None

    if tie_row is not None:  # predcls: a confidence another image's row shares (AP ties across images)
        p, hit, value = tie_row
        rows = [r for r in free if r not in used and ((p in gt_rows.get((source[pairs[r, 0]], source[pairs[r, 1]]), []))
                                                      == hit)]
        if rows:
            used.add(rows[0])
            set_row(rng, scores, rows[0], p, value)
        return  # no other ties here: this image is redrawn until PySGG's sort of all images keeps the tie stable
    for target in (FLOOR, ABOVE_FLOOR):  # a hit scored exactly at / just above the filter
        if rng.random() < 0.6 and (found := take()):
            r, p = found
            v = factor_for(so[r], target)
            if v is not None:
                scores[r, 0] = np.float32(1) - v
                set_row(rng, scores, r, p, v)
    if len(pairs) * PRD_K > TOP + 6 and (found := take()):  # a hit that ranks beyond the first 100
        r, p = found
        set_row(rng, scores, r, p, np.float32(3e-4))
    for _ in range(1):  # a pair and its reverse with the same best score (float32 products commute)
        if rng.random() < 0.6 and (found := take()):
            r, p = found
            twin = np.flatnonzero((pairs[:, 0] == pairs[r, 1]) & (pairs[:, 1] == pairs[r, 0]))
            if len(twin) and int(twin[0]) not in used:
                used.add(int(twin[0]))
                v = np.float32(rng.uniform(0.3, 0.7))
                set_row(rng, scores, r, p, v)
                set_row(rng, scores, int(twin[0]), p, v)
    if rng.random() < 0.4 and (found := take(hit=False)):  # 1st and 2nd predicate tie
        r, p = found
        q = int(rng.choice([q for q in range(len(PREDICATES)) if q != p]))
        v = np.float32(rng.uniform(0.2, 0.45))
        set_row(rng, scores, r, p, v, q, v)
    if rng.random() < 0.4 and (found := take(hit=False)):  # 2nd and 3rd predicate tie
        r, p = found
        q, t = (int(v) for v in rng.choice([q for q in range(len(PREDICATES)) if q != p], 2, replace=False))
        v = np.float32(rng.uniform(0.1, 0.2))
        set_row(rng, scores, r, p, np.float32(0.5), q, v)
        scores[r, 1 + t] = v
    if task != "predcls" and rng.random() < 0.7:  # a tie in float32 that float64 products would not make
        first, second = take(hit=False), take(hit=False)
        if first and second:
            (r1, p1), (r2, p2) = first, second
            v1 = np.float32(rng.uniform(0.3, 0.6))
            v2 = factor_for(so[r2], np.float32(so[r1] * v1))
            if v2 is not None and v2 < 1 and np.float64(so[r1]) * v1 != np.float64(so[r2]) * v2:
                set_row(rng, scores, r1, p1, v1)
                set_row(rng, scores, r2, p2, v2)


# --- counting what the final data hold ------------------------------------------------------------------


def list_counts(gt, pred, task, count):
    """Cases of the OI list and the classic NG list of one final prediction (CASES)."""
    width, height = gt["width"], gt["height"]
    size = tuple(int(v) for v in pred["size"])
    boxes = pred["bbox"] if size == (width, height) else resized(pred["bbox"], size, (width, height))
    pairs, scores, obj = pred["rel_pair_idxs"], pred["pred_rel_scores"], pred["pred_scores"]
    labels = pred["pred_labels"] - 1
    if not len(pairs):
        return
    prd = scores[:, 1:]
    count[f"{task}: rows whose background score is their largest"] += int(np.count_nonzero(scores[:, 0] > prd.max(1)))
    ordered = -np.sort(-prd, axis=1)
    count[f"{task}: OI list: rows whose 1st and 2nd predicate scores tie"] += int(
        np.count_nonzero(ordered[:, 0] == ordered[:, 1]))
    count[f"{task}: OI list: rows whose 2nd and 3rd predicate scores tie"] += int(
        np.count_nonzero((ordered[:, 1] == ordered[:, 2]) & (ordered[:, 0] != ordered[:, 1])))
    g_boxes, rel, g_labels = gt["boxes"], gt["relations"], gt["labels"]
    ious = {"f32": f32_iou(boxes, g_boxes), "f64": iou_plus_one_float64(boxes, g_boxes),
            "raw": f32_iou(boxes, gt["raw_boxes"].astype(np.float32))}

    def best_iou(rows, predicates, kind="f32"):
        """per entry: the largest min(IoU subject, IoU object) over the GT rows it matches by labels and
        predicate (-1: none)."""
        iou, out = ious[kind], np.full(len(rows), -1.0)
        for j, (r, p) in enumerate(zip(rows, predicates)):
            a, b = pairs[r]
            for s, o, q in rel:
                if q == p and labels[a] == g_labels[s] and labels[b] == g_labels[o]:
                    out[j] = max(out[j], min(iou[a, s], iou[b, o]))
        return out

    rows, predicates, oi_scores, ks = oi_list(obj, pairs, scores)
    best = best_iou(rows, predicates)
    hit = best >= 0.5
    count[f"{task}: OI list: hits by a row's 2nd predicate only (prd_k=2)"] += int(np.count_nonzero(
        hit & (ks == 1) & ~np.isin(rows, rows[(ks == 0) & hit])))
    count[f"{task}: OI list: hits at IoU exactly 0.5 (recall >= hit, AP > miss)"] += int(np.count_nonzero(best == 0.5))
    count[f"{task}: OI list: tied scores within the first 100"] += int(
        np.count_nonzero(oi_scores[1:] == oi_scores[:-1]))
    if task == "sgdet":
        count["sgdet: OI list hits whose IoU is 0.5 in float32, not in float64"] += int(
            np.count_nonzero((best == 0.5) & (best_iou(rows, predicates, "f64") < 0.5)))
    count[f"{task}: OI list: hits whose IoU rule depends on the GT clip"] += int(
        np.count_nonzero(hit != (best_iou(rows, predicates, "raw") >= 0.5)))
    phrase = 0
    for j, (r, p) in enumerate(zip(rows, predicates)):
        a, b = pairs[r]
        union = np.concatenate([np.minimum(boxes[a, :2], boxes[b, :2]), np.maximum(boxes[a, 2:], boxes[b, 2:])])
        for s, o, q in rel:
            if q == p and labels[a] == g_labels[s] and labels[b] == g_labels[o] and best[j] <= 0.5:
                g_union = np.concatenate([np.minimum(g_boxes[s, :2], g_boxes[o, :2]),
                                          np.maximum(g_boxes[s, 2:], g_boxes[o, 2:])])
                if f32_iou(union, g_union)[0, 0] > 0.5:
                    phrase += 1
                    break
    count[f"{task}: OI list: phrase hits that are no relation hits (union box)"] += phrase
    if task != "predcls":
        f64_scores = (obj[pairs[rows, 0]].astype(np.float64) * obj[pairs[rows, 1]]) * prd[rows, predicates]
        ties = np.flatnonzero(oi_scores[1:] == oi_scores[:-1])
        count[f"{task}: OI list: entries tied in float32 whose float64 products differ"] += int(
            np.count_nonzero(f64_scores[ties] != f64_scores[ties + 1]))
    # every (row, k) entry before the cut and the filter
    order = np.argsort(-prd, axis=1, kind="stable")[:, :PRD_K]
    spo = (obj[pairs[:, 0]] * obj[pairs[:, 1]])[:, None] * np.take_along_axis(prd, order, axis=1)
    flat = np.argsort(-spo.ravel(), kind="stable")
    all_rows, all_ks = np.divmod(flat, PRD_K)
    all_hit = best_iou(all_rows, order[all_rows, all_ks]) >= 0.5
    all_scores, rank = spo[all_rows, all_ks], np.arange(len(flat))
    count[f"{task}: OI list: hits ranked beyond 100 (cut)"] += int(np.count_nonzero(
        all_hit & (rank >= TOP) & (all_scores > 0.00001)))
    count[f"{task}: OI list: hits scored exactly float32(1e-5) (filtered)"] += int(np.count_nonzero(
        all_hit & (all_scores == FLOOR) & (rank < TOP)))
    count[f"{task}: OI list: hits scored one ulp above 1e-5 (kept)"] += int(np.count_nonzero(
        all_hit & (all_scores == ABOVE_FLOOR) & (rank < TOP)))
    _, _, ng_scores = ng_ranking(obj, pairs, scores, task)
    count[f"{task}: classic NG list: tied scores within the first 100"] += int(np.count_nonzero(
        ng_scores[1:] == ng_scores[:-1]))


# --- agreement with PySGG's own sorts -------------------------------------------------------------------


def disagreements(data, task):
    """Positions (dataset order) of the images where PySGG's run differs from the stable rules (module
    docstring): its OI list, its classic NG list, or, for a predicate whose AP changes under the stable
    sort, its order of tied confidences."""
    result = oracle.run(data, task)
    capture, bad = result.capture, set()
    for i, (dets, pred) in enumerate(zip(capture.rel["topk_dets"], result.predictions)):
        obj, pairs = pred.get_field("pred_scores").numpy(), pred.get_field("rel_pair_idxs").numpy()
        labels, boxes = pred.get_field("pred_labels").numpy() - 1, pred.bbox.numpy()
        rows, predicates, scores, _ = oi_list(obj, pairs, pred.get_field("pred_rel_scores").numpy())
        expected = [boxes[pairs[rows, 0]], boxes[pairs[rows, 1]], labels[pairs[rows, 0]], predicates,
                    labels[pairs[rows, 1]], scores]
        actual = [dets[key] for key in ("det_boxes_s_top", "det_boxes_o_top", "det_labels_s_top", "det_labels_p_top",
                                        "det_labels_o_top", "det_scores_top")]
        if not all(np.array_equal(np.asarray(e), np.asarray(a)) for e, a in zip(expected, actual)):
            bad.add(i)
    with_rows = [i for i, p in enumerate(result.predictions) if len(p.get_field("rel_pair_idxs"))]
    for i, (scores, order) in zip(with_rows, capture.ng_lists):
        stable = oracle.stable_argsort_desc(scores)[:TOP]
        pairs = result.predictions[i].get_field("rel_pair_idxs").numpy()
        if not (np.array_equal(pairs[order[:, 0]], pairs[stable[:, 0]]) and np.array_equal(order[:, 1], stable[:, 1])):
            bad.add(i)
    if bad:  # redraw those first: their lists change the APs too
        return bad
    with oracle.stable_sorts():
        stable_run = oracle.run(data, task)
    for (_, ap, loc), (_, stable_ap, _) in zip(capture.ap_calls, stable_run.capture.ap_calls):
        if ap == stable_ap:
            continue
        confidence, sorted_ind, images = loc["confidence"], loc["sorted_ind"], loc["image_ids"]  # images: sorted
        values, counts = np.unique(confidence, return_counts=True)
        found = set()
        for value in values[counts > 1]:
            members = np.flatnonzero(confidence == value)  # the stable order
            positions = np.flatnonzero(np.isin(sorted_ind, members))
            if not np.array_equal(sorted_ind[positions], members):
                found.update(int(images[j]) for j in positions)
        if not found:
            sys.exit(f"{data} ({task}): an AP changes under the stable sort, but no tie is ordered otherwise")
        bad |= found
    return bad


# --- the whole data set ---------------------------------------------------------------------------------


def generate(seed, n_images, out):
    """Write DIR (module docstring); returns the summary counts."""
    out = Path(out)
    rng = np.random.default_rng(seed)
    vocabulary = Vocabulary(rng)
    total = collections.Counter()
    test, gts = [], []
    for i in range(n_images):
        roles = dict(large=i % 7 == 3, boundary=i % 5 in (1, 3) or i % 9 == 0)
        entry, gt = gt_image(np.random.default_rng([seed, i]), vocabulary, count=total, **roles)
        test.append(entry)
        gts.append(gt)
    entries = list(test)
    filler_rng = np.random.default_rng([seed, 10_000])
    no_rel, _ = gt_image(filler_rng, vocabulary)
    no_rel["rel"] = []
    no_box = {"img_fn": f"{int(filler_rng.integers(1 << 62)):016x}", "img_size": [640, 480], "bbox": [],
              "det_labels": [], "rel": []}
    entries.insert(7, no_rel)
    entries.insert(18, no_box)
    total["GT test entries without relations (left out by load_annotations)"] += 1
    total["GT test entries without boxes (left out by load_annotations)"] += 1
    train_rng = np.random.default_rng([seed, 20_000])
    train = [gt_image(train_rng, vocabulary, predicates=np.arange(len(PREDICATES)))[0] for _ in range(12)]
    val = [gt_image(train_rng, vocabulary)[0] for _ in range(3)]
    train_predicates = {p for e in train for _, _, p in e["rel"]}
    test_predicates = {p for e in test for _, _, p in e["rel"]}
    total["GT predicates absent from the test split (in train)"] += len(train_predicates - test_predicates)
    (out / "categories_dict.json").write_text(json.dumps(
        {"obj": [f"object_{c:02d}" for c in range(N_CLASSES)], "rel": PREDICATES}) + "\n")
    for split, items in (("train", train), ("val", val), ("test", entries)):
        (out / f"vrd-{split}-anno.json").write_text(json.dumps(items) + "\n")

    tie_rows = {}  # predcls: image -> (predicate, hit, value); the predicate is one of the hit image's GT
    for hit_image, miss_image in ((2, 3), (13, 12)):
        p = int(gts[hit_image]["relations"][0, 2])
        tie_rows[hit_image] = (p, True, TIE_VALUES[hit_image])
        tie_rows[miss_image] = (p, False, TIE_VALUES[miss_image])
    for t, task in enumerate(TASKS):
        folder = out / "raw" / task
        folder.mkdir(parents=True, exist_ok=True)
        zero_rows = 4 + 6 * t
        attempts, counts = [0] * n_images, [None] * n_images

        def write(i):
            pred, counts[i] = prediction(np.random.default_rng([seed, i, t, attempts[i]]), vocabulary, gts[i], task,
                                         zero_rows=i == zero_rows,
                                         tie_row=tie_rows.get(i) if task == "predcls" else None)
            np.savez(folder / f"{i}.npz", **pred)
            return pred

        preds = [write(i) for i in range(n_images)]
        for _ in range(MAX_ROUNDS):
            bad = disagreements(out, task)
            if not bad:
                break
            for i in sorted(bad):
                attempts[i] += 1
                total[f"{task}: images redrawn for PySGG's sort order"] += 1
                preds[i] = write(i)
        else:
            sys.exit(f"{out} ({task}): PySGG's sorts still order ties differently after {MAX_ROUNDS} rounds")
        for i in range(n_images):
            total.update(counts[i])
            list_counts(gts[i], preds[i], task, total)
        if task == "predcls":
            total["predcls: confidences tied across images, a hit and a miss (AP)"] += tied_across(gts, preds, tie_rows)
    summary = dict(sorted(total.items()))
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    missing = [case for case in CASES if not summary.get(case)]
    if missing:
        sys.exit(f"{out}: the data miss cases: {missing} (try another seed or more images)")
    return summary


def tied_across(gts, preds, tie_rows):
    """Pairs of images of tie_rows whose TIE_VALUE rows are in their OI lists, one a hit, one not."""
    found = 0
    for first, second in ((2, 3), (12, 13)):
        in_list = []
        for i in (first, second):
            pred = preds[i]
            rows, predicates, scores, _ = oi_list(pred["pred_scores"], pred["rel_pair_idxs"], pred["pred_rel_scores"])
            in_list.append(bool(np.any((scores == tie_rows[i][2]) & (predicates == tie_rows[i][0]))))
        found += all(in_list)
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--images", type=int, default=30)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    oracle.quiet()
    print(json.dumps(generate(args.seed, args.images, args.out), indent=1))


if __name__ == "__main__":
    main()
