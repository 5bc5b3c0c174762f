"""Write a synthetic VG150-like dataset and raw Scene-Graph-Benchmark predictions of the three tasks
that exercise every rule of SGB's relation evaluation.

    tools/sgb_check/build/venv/bin/python -m tools.sgb_check.make_data --seed S --out DIR [--images 40]
    (from the repository root)

DIR/roidb.h5: SGB's VG-SGG h5 layout (split, labels, attributes, boxes_1024 as int32 [cx, cy, w, h],
  img_to_first/last_box/rel, relationships, predicates; 1-based classes and predicates), read by SGB's
  own load_graphs. Besides the test images: one train image and one test image without relations
  (load_graphs leaves both out; sgeval reads the first as training and skips the second).
DIR/image_data.json: [{image_id, width, height}] per h5 image (VG's image_data.json fields).
DIR/zeroshot_triplet.pytorch: the zero-shot set as vg_eval.py:26 loads it, a LongTensor of 1-based
  [subject class, object class, predicate] rows.
DIR/raw/<task>/<i>.npz: the prediction of test image i as SGB's relation post-processor leaves it
  (the BoxList at the network's input size: bbox float32 xyxy, size; pred_labels, pred_scores,
  rel_pair_idxs, pred_rel_scores (R, 51), pred_rel_labels; labels in predcls and sgcls), for the
  tasks sgdet, sgcls and predcls.
DIR/summary.json: how many of each case of CASES were written (every one must be there).

What the data hold (the rules they decide are in the README):
- GT: exact duplicate relation rows and several predicates per pair; same-class GT boxes that overlap,
  some with float32 +1-convention IoU exactly 0.5 (predcls and sgcls match through them);
  zero-shot triplets in some images and none in others; 12 of the 50 predicates (the rest are absent).
- sgdet: detections jittered from the GT (sometimes another class) plus spurious ones, all ordered
  pairs; boundary images (prediction size = image size, so the resize is exact) where a detection has
  IoU exactly 0.5 or one ulp off it with its GT box, most on the other side of 0.5 in float64.
- sgcls / predcls: the GT boxes sent to the input size and back by BoxList.resize (close, not equal);
  sgcls labels sometimes wrong; predcls object scores 1.
- All: self-pair rows (sgdet: the [[0, 0]] placeholder of a single detection), repeated pairs, an
  image with zero rows, rows in the post-processor's order (triple score, stable), ties between rows
  (a pair and its reverse with the same best score) and between predicates of a row (argmax: the first).
  SGB's no-graph-constraint list comes from an unstable np.argsort: an image is redrawn until that
  order equals the stable one in its first 100 entries (ng_ranking), so sgeval's stable ranking is
  SGB's.
"""

import argparse
import collections
import json
import sys
from pathlib import Path

import h5py
import numpy as np
import torch

from tools.oracle_common import iou_plus_one_float64
from tools.sgb_check import sgb_env

N_CLASSES, N_PREDICATES = 150, 50  # VG150; SGB's lists add __background__ at index 0
NUM_REL_CATEGORY = N_PREDICATES + 1  # cfg.MODEL.ROI_RELATION_HEAD.NUM_CLASSES
TASKS = ("sgdet", "sgcls", "predcls")
NG_LIST = 100  # argsort_desc(...)[:100], sgg_eval.py:123
NG_WRITTEN = 150  # entries of the stable NG ranking written for sgeval (it must cut them to 100 itself)
COUNT = collections.Counter()
CASES = (
    "GT train images (left out by load_graphs)", "GT test images without relations (left out by load_graphs)",
    "GT images with exact duplicate relation rows", "GT pairs with several predicates",
    "GT same-class boxes with IoU exactly 0.5", "GT same-class overlapping boxes", "GT images with zero-shot rows", "GT images without zero-shot rows",
    *(f"{task}: {case}" for task in TASKS for case in (
        "images with zero rows", "self-pair rows", "repeated pairs", "rows with tied predicates (argmax)",
        "rows tied with another row", "NG ties within the first 100", "images redrawn for the NG order")),
    "sgdet: [[0, 0]] placeholder images", "sgdet: boundary detections IoU exactly 0.5 (float64 below)",
    "sgdet: boundary detections IoU one ulp below 0.5 (float64 at or above)", "sgdet: resized predictions",
    "sgcls: wrong labels",
    *(f"{task}: an input box dropped (one box fewer than the GT)" for task in ("sgcls", "predcls")),
)


def ng_ranking(obj_scores, pairs, rel_scores, task, stable=True):
    """The (row, predicate column of rel_scores[:, 1:]) entries of the no-graph-constraint list,
    best first: score (obj_s * obj_o) * p in SGB's dtypes (predcls: float64 object scores 1), sorted
    descending, ties by row then predicate (stable) or by SGB's own argsort_desc (stable=False)."""
    obj = np.ones(len(obj_scores)) if task == "predcls" else obj_scores
    scores = (obj[pairs[:, 0]] * obj[pairs[:, 1]])[:, None] * rel_scores[:, 1:]
    if not stable:
        return sgb_env.load().misc.argsort_desc(scores)
    return np.column_stack(np.unravel_index(np.argsort(-scores.ravel(), kind="stable"), scores.shape))


def input_size(width, height, min_size=600, max_size=1000):
    """The network's input size for SGB's test transform (MIN_SIZE_TEST 600, MAX_SIZE_TEST 1000)."""
    short, long = min(width, height), max(width, height)
    size = min_size if long / short * min_size <= max_size else round(max_size * short / long)
    return (size, int(size * height / width)) if width < height else (int(size * width / height), size)


def scaled(boxes, size, new_size):
    """BoxList(boxes, size).resize(new_size).bbox: SGB's own resize (float32)."""
    return sgb_env.load().BoxList(torch.from_numpy(boxes), size, "xyxy").resize(new_size).bbox.numpy()


def f32_iou(a, b):
    return sgb_env.load().misc.bbox_overlaps(a.reshape(-1, 4), b.reshape(-1, 4))


BELOW, ABOVE = np.nextafter(np.float32(0.5), np.float32(0)), np.nextafter(np.float32(0.5), np.float32(1))


def gt_xyxy(int_cxcywh, scale):
    """load_graphs' conversion (int32 truncation) then get_groundtruth's scaling, float32."""
    b = np.array(int_cxcywh, np.int32).reshape(-1, 4)
    b[:, :2] = b[:, :2] - b[:, 2:] / 2
    b[:, 2:] = b[:, :2] + b[:, 2:]
    return (b / 1024 * scale).astype(np.float32)


def boundary_twin(rng, box, scale, limit):
    """An int [cx, cy, w, h] box of the same height as `box` (int [cx, cy, w, h]), shifted right,
    whose float32 +1 IoU with it is exactly 0.5, or None. Only a long side of 1024 (GT coordinates
    are integers) gives exact halves: at other scales the IoU of such boxes stays far (> 1e-4) from
    0.5 in these sizes."""
    x, w = box[0] - box[2] // 2, box[2]
    candidates = [[x + d + ww // 2, box[1], ww, box[3]] for d in range(1, w) for ww in range(max(2, w - 6), w + 7)
                  if x + d + ww < limit]
    if not candidates:
        return None
    found = np.flatnonzero(f32_iou(gt_xyxy(box, scale), gt_xyxy(candidates, scale))[0] == 0.5)
    return candidates[found[rng.integers(len(found))]] if len(found) else None


def boundary_detection(rng, gt_box):
    """A float32 box, shifted right from gt_box, whose float32 +1 IoU with it is exactly 0.5 (where
    float64 gives < 0.5) or one ulp below 0.5 (where float64 gives >= 0.5); (box, case) or None."""
    w = gt_box[2] - gt_box[0] + 1
    base = gt_box + np.array([w / 3, 0, w / 3, 0], np.float32)
    steps = np.arange(-12, 13)
    x1 = base[0] + steps * np.spacing(base[0])
    x2 = base[2] + steps * np.spacing(base[2])
    boxes = np.array([[a, base[1], b, base[3]] for a in x1 for b in x2], np.float32)
    f32, f64 = f32_iou(gt_box, boxes)[0], iou_plus_one_float64(gt_box, boxes)[0]
    cases = [(boxes[(f32 == 0.5) & (f64 < 0.5)], "IoU exactly 0.5 (float64 below)"),
             (boxes[(f32 == BELOW) & (f64 >= 0.5)], "IoU one ulp below 0.5 (float64 at or above)")]
    cases = [(found, case) for found, case in cases if len(found)]
    if not cases:
        return None
    found, case = cases[rng.integers(len(cases))]
    return found[rng.integers(len(found))], case


class Vocabulary:
    def __init__(self, rng):
        self.classes = np.sort(rng.choice(np.arange(1, N_CLASSES + 1), 8, replace=False))
        self.predicates = np.sort(rng.choice(np.arange(1, N_PREDICATES + 1), 12, replace=False))
        types = np.array([(s, o, p) for s in self.classes for o in self.classes for p in self.predicates])
        chosen = types[rng.random(len(types)) < 0.15]
        others = np.column_stack([rng.integers(1, N_CLASSES + 1, (40, 2)), rng.integers(1, N_PREDICATES + 1, 40)])
        self.zeroshot = np.unique(np.concatenate([chosen, others]), axis=0)  # sorted, as SGB's file


def gt_image(rng, vocabulary, empty=False):
    """(width, height, int [cx, cy, w, h] boxes, 1-based labels, relations [s, o, p]) of one image."""
    width, height = (int(v) for v in rng.integers(240, 1024, 2))
    if rng.random() < 0.35:  # a long side of 1024: integer GT coordinates, where IoUs of exactly 0.5 exist
        width, height = (1024, height) if width >= height else (width, 1024)
    scale = max(width, height)
    limits = (int(1024 * width / scale) - 2, int(1024 * height / scale) - 2)
    boxes, labels = [], []
    large = rng.random() < 0.15  # more GT pairs than 20 rows: A@20 < A@50
    for _ in range(rng.integers(10, 15) if large else rng.integers(2, 8)):
        w, h = (int(rng.integers(12, max(13, lim // 2))) for lim in limits)
        x, y = int(rng.integers(0, limits[0] - w)), int(rng.integers(0, limits[1] - h))
        boxes.append([x + w // 2, y + h // 2, w, h])
        labels.append(int(rng.choice(vocabulary.classes)))
    for _ in range(rng.integers(0, 3)):  # same-class twins: at the IoU boundary, or overlapping
        k = int(rng.integers(len(boxes)))
        twin = boundary_twin(rng, boxes[k], scale, limits[0]) if scale == 1024 else None
        if twin is None:
            twin = [min(max(v + int(rng.integers(-3, 4)), 6), lim) for v, lim in zip(boxes[k], limits * 2)]
        boxes.append(twin)
        labels.append(labels[k])
        COUNT["GT same-class boxes with IoU exactly 0.5" if scale == 1024 and twin is not None and
              f32_iou(gt_xyxy(boxes[k], scale), gt_xyxy(twin, scale))[0, 0] == 0.5
              else "GT same-class overlapping boxes"] += 1
    n = len(boxes)
    relations = []
    if not empty:
        for _ in range(rng.integers(22, 32) if large else rng.integers(1, 9)):
            s, o = rng.choice(n, 2, replace=False)
            relations.append([int(s), int(o), int(rng.choice(vocabulary.predicates))])
        if n > 4:  # a twin relates where its original does
            s = n - 1
            relations.append([s, int((s + 1) % (n - 1)), int(rng.choice(vocabulary.predicates))])
        if rng.random() < 0.3:
            relations.append(list(relations[rng.integers(len(relations))]))
            COUNT["GT images with exact duplicate relation rows"] += 1
        if rng.random() < 0.4:
            s, o, _ = relations[rng.integers(len(relations))]
            relations.append([s, o, int(rng.choice(vocabulary.predicates))])
            COUNT["GT pairs with several predicates"] += 1
    return width, height, boxes, labels, relations


def rel_scores_for(rng, vocabulary, pairs, source, gt_relations, task):
    """float32 (R, 51) softmax scores; a row whose ends come from a GT pair often favours one of its
    predicates. Ties: some rows repeat another row's best score in a second predicate."""
    logits = rng.normal(0, 1, (len(pairs), NUM_REL_CATEGORY))
    logits[:, vocabulary.predicates] += 1.5
    logits[:, 0] += 1.0
    by_pair = collections.defaultdict(list)
    for s, o, p in gt_relations:
        by_pair[s, o].append(p)
    for r, (a, b) in enumerate(pairs):
        options = by_pair.get((source[a], source[b]))
        if options and rng.random() < 0.75:
            logits[r, rng.choice(options)] += rng.uniform(2, 6)
    scores = np.exp(logits - logits.max(axis=1, keepdims=True))
    scores = (scores / scores.sum(axis=1, keepdims=True)).astype(np.float32)
    for r in np.flatnonzero(rng.random(len(pairs)) < 0.05)[:2]:
        best = 1 + int(scores[r, 1:].argmax())
        other = int(rng.choice([p for p in vocabulary.predicates if p != best]))
        scores[r, other] = scores[r, best]
        COUNT[f"{task}: rows with tied predicates (argmax)"] += 1
    return scores


def prediction(rng, vocabulary, gt, task, zero_rows=False, dropped=None):
    """The raw prediction of one image for one task (see the module docstring) -> dict of arrays.
    dropped (sgcls, predcls): a GT box the model's input lacked (as a loader drops a box that is
    empty after clipping), so the prediction has one box fewer and its indices shift past it."""
    width, height, boxes, labels, relations = gt["width"], gt["height"], gt["boxes"], gt["labels"], gt["relations"]
    size = input_size(width, height)
    n_gt = len(boxes)
    if task == "sgdet":
        source, det, det_labels = [], [], []
        for g in range(n_gt):
            for _ in range(rng.choice([0, 1, 1, 1, 2])):
                w, h = boxes[g][2] - boxes[g][0] + 1, boxes[g][3] - boxes[g][1] + 1
                jitter = rng.normal(0, rng.choice([0.03, 0.12]), 4) * [w, h, w, h]
                det.append(boxes[g] + jitter)
                source.append(g)
                det_labels.append(labels[g] if rng.random() < 0.85 else int(rng.choice(vocabulary.classes)))
        for _ in range(rng.integers(0, 3)):  # spurious
            x, y = rng.uniform(0, width * 0.7), rng.uniform(0, height * 0.7)
            det.append([x, y, x + rng.uniform(5, width * 0.3), y + rng.uniform(5, height * 0.3)])
            source.append(-1)
            det_labels.append(int(rng.choice(vocabulary.classes)))
        if rng.random() < 0.08 or not det:  # a single detection: the [[0, 0]] placeholder row
            det, source, det_labels = det[:1] or [boxes[0]], source[:1] or [0], det_labels[:1] or [labels[0]]
        det = np.clip(np.array(det, np.float64), 0, [width - 1, height - 1] * 2).astype(np.float32)
        det[:, 2:] = np.maximum(det[:, 2:], det[:, :2])
        boundary = rng.random() < 0.5
        if boundary:  # exact boxes: no resize (the prediction is at the image size already)
            for i in rng.permutation(len(det))[:3]:
                if source[i] >= 0:
                    found = boundary_detection(rng, boxes[source[i]])
                    if found:
                        det[i] = found[0]
                        det_labels[i] = labels[source[i]]
                        COUNT[f"sgdet: boundary detections {found[1]}"] += 1
            size = (width, height)
        else:
            det = scaled(det, (width, height), size)
            COUNT["sgdet: resized predictions"] += 1
        obj_scores = rng.uniform(0.05, 1, len(det)).astype(np.float32)
        if len(det) > 2 and rng.random() < 0.3:
            obj_scores[1] = obj_scores[0]
        source, pred_labels = np.array(source), np.array(det_labels, np.int64)
    else:
        source = np.array([g for g in range(n_gt) if g != dropped])
        if dropped is not None:
            COUNT[f"{task}: an input box dropped (one box fewer than the GT)"] += 1
        det = scaled(np.asarray(boxes)[source], (width, height), size)
        pred_labels = np.array(labels, np.int64)[source]
        n_gt = len(source)
        if task == "sgcls":
            wrong = rng.random(n_gt) < 0.2
            pred_labels[wrong] = rng.choice(vocabulary.classes, wrong.sum())
            COUNT["sgcls: wrong labels"] += int(wrong.sum())
            obj_scores = rng.uniform(0.05, 1, n_gt).astype(np.float32)
        else:
            obj_scores = np.ones(n_gt, np.float32)
    n = len(det)
    if n == 1:
        pairs = np.zeros((1, 2), np.int64)
        COUNT["sgdet: [[0, 0]] placeholder images"] += 1
    else:
        pairs = np.array([(a, b) for a in range(n) for b in range(n) if a != b], np.int64)
        if rng.random() < 0.4:
            pairs = np.concatenate([pairs, [[a, a] for a in rng.choice(n, 2)]])
            COUNT[f"{task}: self-pair rows"] += 2
        if rng.random() < 0.4:
            pairs = np.concatenate([pairs, pairs[rng.choice(len(pairs), 2)]])
            COUNT[f"{task}: repeated pairs"] += 2
    if zero_rows:
        pairs = np.zeros((0, 2), np.int64)
        COUNT[f"{task}: images with zero rows"] += 1
    rel = rel_scores_for(rng, vocabulary, pairs, source, relations, task)
    index = {tuple(p): r for r, p in enumerate(pairs.tolist())}
    for r in np.flatnonzero(rng.random(len(pairs)) < 0.1)[:2]:  # the reverse pair, same best score: ties
        twin = index.get((pairs[r, 1], pairs[r, 0]))
        if twin is not None and twin != r:
            best = 1 + int(rel[r, 1:].argmax())
            rel[twin, best] = rel[r, best]
            COUNT[f"{task}: rows tied with another row"] += 1
    triple = rel[:, 1:].max(axis=1) * obj_scores[pairs[:, 0]] * obj_scores[pairs[:, 1]] if len(pairs) else rel[:, 0]
    order = np.argsort(-triple, kind="stable")  # the post-processor's order (rel_inference.py:99-114)
    pairs, rel = pairs[order], rel[order]
    out = {"bbox": np.asarray(det, np.float32).reshape(-1, 4), "size": np.array(size), "pred_labels": pred_labels,
           "pred_scores": obj_scores, "rel_pair_idxs": pairs, "pred_rel_scores": rel,
           "pred_rel_labels": 1 + rel[:, 1:].argmax(axis=1) if len(rel) else np.zeros(0, np.int64)}
    if task != "sgdet":
        out["labels"] = np.array(labels, np.int64)[source]
    return out


def ng_ties_agree(pred, task):
    """SGB's unstable NG order equals the stable one in its first NG_LIST entries; counts ties there."""
    args = pred["pred_scores"], pred["rel_pair_idxs"], pred["pred_rel_scores"], task
    stable, sgb = ng_ranking(*args)[:NG_LIST], ng_ranking(*args, stable=False)[:NG_LIST]
    obj = np.ones(len(args[0])) if task == "predcls" else args[0]
    scores = (obj[args[1][:, 0]] * obj[args[1][:, 1]])[:, None] * args[2][:, 1:]
    values = scores[tuple(stable.T)]
    if np.array_equal(stable, sgb):
        COUNT[f"{task}: NG ties within the first 100"] += int(np.count_nonzero(values[1:] == values[:-1]))
        return True
    return False


def generate(seed, n_images, out):
    """Write DIR (see the module docstring); returns the summary counts."""
    COUNT.clear()
    out = Path(out)
    rng = np.random.default_rng(seed)
    vocabulary = Vocabulary(rng)
    images, split = [], []
    for i in range(n_images + 2):  # the last two: a train image and a test image without relations
        image_rng = np.random.default_rng([seed, i])
        width, height, boxes, labels, relations = gt_image(image_rng, vocabulary, empty=i == n_images + 1)
        images.append({"width": width, "height": height, "int_boxes": boxes, "labels": labels,
                       "relations": relations, "boxes": gt_xyxy(boxes, max(width, height))})
        split.append(0 if i == n_images else 2)
    COUNT["GT train images (left out by load_graphs)"] += 1
    COUNT["GT test images without relations (left out by load_graphs)"] += 1
    for gt in images[:n_images]:
        zeroshot = {tuple(t) for t in vocabulary.zeroshot.tolist()}
        any_zs = any((gt["labels"][s], gt["labels"][o], p) in zeroshot for s, o, p in gt["relations"])
        COUNT["GT images with zero-shot rows" if any_zs else "GT images without zero-shot rows"] += 1
    write_roidb(out / "roidb.h5", images, split)
    (out / "image_data.json").write_text(json.dumps(
        [{"image_id": 1000 + i, "width": g["width"], "height": g["height"]} for i, g in enumerate(images)]) + "\n")
    torch.save(torch.from_numpy(vocabulary.zeroshot).long(), out / "zeroshot_triplet.pytorch")
    for t, task in enumerate(TASKS):
        folder = out / "raw" / task
        folder.mkdir(parents=True, exist_ok=True)
        zero_rows = {3 + 5 * t}
        for i, gt in enumerate(images[:n_images]):
            # clip as get_groundtruth does (the GT boxes the model gets in predcls and sgcls)
            gt = dict(gt, boxes=np.minimum(gt["boxes"], [gt["width"] - 1, gt["height"] - 1] * 2).astype(np.float32))
            for attempt in range(100):
                before = COUNT.copy()
                dropped = 1 if i == 2 and task != "sgdet" and len(gt["boxes"]) > 2 else None
                pred = prediction(np.random.default_rng([seed, i, t, attempt]), vocabulary, gt, task, i in zero_rows,
                                  dropped)
                if ng_ties_agree(pred, task):
                    break
                COUNT.clear()
                COUNT.update(before)
                COUNT[f"{task}: images redrawn for the NG order"] += 1
            else:
                sys.exit(f"image {i} ({task}): no draw without a tie that SGB's argsort orders differently")
            np.savez(folder / f"{i}.npz", **pred)
    summary = dict(sorted(COUNT.items()))
    missing = [case for case in CASES if not summary.get(case)]
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    if missing:
        sys.exit(f"{out}: the data miss cases: {missing} (try another seed or more images)")
    return summary


def write_roidb(path, images, split):
    """SGB's VG-SGG.h5 layout for the images (global box and relation indices, -1 where none)."""
    boxes = np.concatenate([g["int_boxes"] for g in images]).astype(np.int32)
    labels = np.concatenate([g["labels"] for g in images]).astype(np.int64)[:, None]
    first_box, first_rel, rels, predicates, start, rel_start = [], [], [], [], 0, 0
    for g in images:
        first_box.append(start)
        first_rel.append(rel_start if g["relations"] else -1)
        for s, o, p in g["relations"]:
            rels.append([start + s, start + o])
            predicates.append([p])
        start, rel_start = start + len(g["labels"]), rel_start + len(g["relations"])
    first_box, first_rel = np.array(first_box, np.int32), np.array(first_rel, np.int32)
    n_boxes, n_rels = np.array([len(g["labels"]) for g in images]), np.array([len(g["relations"]) for g in images])
    with h5py.File(path, "w") as h5:
        h5["split"] = np.array(split, np.int32)
        h5["labels"] = labels
        h5["attributes"] = np.zeros((len(labels), 10), np.int64)
        h5["boxes_1024"] = boxes
        h5["img_to_first_box"], h5["img_to_last_box"] = first_box, (first_box + n_boxes - 1).astype(np.int32)
        h5["img_to_first_rel"] = first_rel
        h5["img_to_last_rel"] = np.where(first_rel >= 0, first_rel + n_rels - 1, -1).astype(np.int32)
        h5["relationships"] = np.array(rels, np.int32).reshape(-1, 2)
        h5["predicates"] = np.array(predicates, np.int64).reshape(-1, 1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--images", type=int, default=40)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    print(json.dumps(generate(args.seed, args.images, args.out), indent=1))


if __name__ == "__main__":
    main()
