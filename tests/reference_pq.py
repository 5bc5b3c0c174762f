"""Plain-Python reference of panoptic quality (PQ, SQ, RQ) as panopticapi and OpenPSG compute it, and of
the two mask merges of fair-psgg's scripts/convert_openpsg.py. It never imports `sgeval`; numpy only
holds the maps. tools/pq_check/README.md gives every rule below with the tools' file and line.

Per image, `image_stats` gives each category's [IoU sum, TP, FP, FN] (only categories with a count);
these add up over images (`add_stats`), and `pq_summary` turns the sum into per-category PQ/SQ/RQ and
the All / Things / Stuff means.

Segmentations are (H, W) integer id maps:
- GT: the panoptic PNG's ids (R + 256 G + 65536 B) and psg.json's segments_info as
  {id: {"category": int, "iscrowd": 0|1, "area": int}}; the area is the JSON's, never counted.
  Id 0 is VOID; an id of the PNG that segments_info does not list is neither VOID nor a segment.
- Prediction: an id map and {id: category}. A pixel whose id is 0 and not listed is unassigned.

Predictions in other forms become such a pair first:
- pan_results (OpenPSG's H x W maps, id = category + instance * INSTANCE_OFFSET, category
  `num_classes` = VOID): `openpsg_segments` (mmdet 2.20.0's _pan2json: VOID pixels get id 0, which
  joins them to a segment whose own id is 0, i.e. category 0 with instance 0) or
  `panoptic_segments` (VOID pixels unassigned, every other value its own segment);
- overlapping masks: `merge_score_order` (fair-psgg's hilo mode) or `merge_first_wins` (its psgtr
  mode), then `merged_segments`.
"""

from collections import Counter

import numpy as np

VOID = 0
INSTANCE_OFFSET = 1000  # mmdet's pan id = category + instance * INSTANCE_OFFSET
SCALES = {"panopticapi": 1.0, "openpsg": 100.0}  # OpenPSG reports PQ, SQ and RQ in percent


def pixel_pairs(gt_ids, pred_ids):
    """{(gt id, pred id): pixel count} over the image."""
    return Counter(zip(np.asarray(gt_ids).ravel().tolist(), np.asarray(pred_ids).ravel().tolist()))


def checked_pred_areas(pred_ids, pred_segments):
    """{pred id: pixel count}; every non-VOID id of the map must be listed and every listed id present."""
    areas = Counter(np.asarray(pred_ids).ravel().tolist())
    unlisted = sorted(i for i in areas if i not in pred_segments and i != VOID)
    absent = sorted(i for i in pred_segments if i not in areas)
    if unlisted or absent:
        raise ValueError(f"prediction ids in the map but not listed: {unlisted}; listed but not in the map: {absent}")
    return {i: areas[i] for i in pred_segments}


def image_stats(gt_ids, gt_segments, pred_ids, pred_segments):
    """{category: [iou_sum, tp, fp, fn]} of one image, as panopticapi's pq_compute_single_core counts."""
    pred_area = checked_pred_areas(pred_ids, pred_segments)
    pairs = pixel_pairs(gt_ids, pred_ids)
    stats = {}

    def stat(category):
        return stats.setdefault(category, [0.0, 0, 0, 0])

    gt_matched, pred_matched = set(), set()
    for (g, p), intersection in sorted(pairs.items()):
        if g not in gt_segments or p not in pred_segments:
            continue
        gt = gt_segments[g]
        if gt["iscrowd"] == 1 or gt["category"] != pred_segments[p]:
            continue
        union = pred_area[p] + gt["area"] - intersection - pairs.get((VOID, p), 0)
        iou = intersection / union
        if iou > 0.5:
            stat(gt["category"])[0] += iou
            stat(gt["category"])[1] += 1
            gt_matched.add(g)
            pred_matched.add(p)

    crowd_of_category = {}
    for g, gt in gt_segments.items():
        if g in gt_matched:
            continue
        if gt["iscrowd"] == 1:
            crowd_of_category[gt["category"]] = g  # the last crowd segment of a category wins
            continue
        stat(gt["category"])[3] += 1

    for p, category in pred_segments.items():
        if p in pred_matched:
            continue
        ignored = pairs.get((VOID, p), 0)
        if category in crowd_of_category:
            ignored += pairs.get((crowd_of_category[category], p), 0)
        if ignored / pred_area[p] > 0.5:
            continue
        stat(category)[2] += 1
    return stats


def add_stats(total, stats):
    """total += stats, per category (in place); returns total."""
    for category, (iou, tp, fp, fn) in stats.items():
        entry = total.setdefault(category, [0.0, 0, 0, 0])
        entry[0] += iou
        entry[1] += tp
        entry[2] += fp
        entry[3] += fn
    return total


def pq_summary(stats, isthing, scale=1.0):
    """{"per_class": {category: {pq, sq, rq}}, "All" / "Things" / "Stuff": {pq, sq, rq, n}}.

    isthing: {category id: bool} for every category of the dataset (the means run over these). A
    category enters a mean when its TP + FP + FN > 0; a mean over no category is None (both tools
    divide by zero there). scale multiplies the means only (OpenPSG returns them in percent; its
    per-category values stay fractions)."""
    per_class, means = {}, {}
    for name, wanted in (("All", None), ("Things", True), ("Stuff", False)):
        totals, n = [0.0, 0.0, 0.0], 0
        for category, thing in isthing.items():
            if wanted is not None and thing != wanted:
                continue
            iou, tp, fp, fn = stats.get(category, (0.0, 0, 0, 0))
            if tp + fp + fn == 0:
                per_class[category] = {"pq": 0.0, "sq": 0.0, "rq": 0.0}
                continue
            n += 1
            values = {"pq": iou / (tp + 0.5 * fp + 0.5 * fn), "sq": iou / tp if tp else 0.0,
                      "rq": tp / (tp + 0.5 * fp + 0.5 * fn)}
            per_class[category] = values
            totals = [total + values[key] for total, key in zip(totals, ("pq", "sq", "rq"))]
        means[name] = ({"pq": totals[0] / n * scale, "sq": totals[1] / n * scale, "rq": totals[2] / n * scale, "n": n}
                       if n else None)
    return {"per_class": per_class, **means}


def openpsg_segments(pan, num_classes):
    """(id map, {id: category}) as mmdet 2.20.0's _pan2json writes OpenPSG's pan_results: every value v
    whose category v % INSTANCE_OFFSET is not num_classes is a segment with id v; pixels of category
    num_classes (VOID) get id 0."""
    pan = np.asarray(pan, dtype=np.int64)
    segments = {}
    for value in sorted(set(pan.ravel().tolist())):
        category = value % INSTANCE_OFFSET
        if category == num_classes:
            continue
        if category > num_classes:
            raise ValueError(f"pan_results value {value}: category {category} is outside 0..{num_classes}")
        segments[value] = category
    ids = np.where(pan % INSTANCE_OFFSET == num_classes, VOID, pan)
    return ids, segments


def panoptic_segments(pan, num_classes):
    """(id map, {id: category}) of pan_results with VOID pixels unassigned: every other value is its own
    segment (ids 1, 2, ... in value order, so that none is 0)."""
    pan = np.asarray(pan, dtype=np.int64)
    ids = np.zeros(pan.shape, np.int64)
    segments = {}
    for value in sorted(set(pan.ravel().tolist())):
        category = value % INSTANCE_OFFSET
        if category == num_classes:
            continue
        if category > num_classes:
            raise ValueError(f"pan_results value {value}: category {category} is outside 0..{num_classes}")
        segments[len(segments) + 1] = category
        ids[pan == value] = len(segments)
    return ids, segments


def mask_iou(a, b):
    """fair-psgg's calculate_iou: intersection / union of two bool masks, 0 when both are empty."""
    intersection = int(np.logical_and(a, b).sum())
    union = int(np.logical_or(a, b).sum())
    return 0 if union == 0 else intersection / union


def score_order(scores, ties):
    """Indices by descending score; tied scores: "later-first" (the higher index first: a stable ascending
    sort reversed, as fair-psgg's argsort()[::-1] gives whenever numpy sorts ties stably) or
    "earlier-first"."""
    if ties == "later-first":
        return sorted(range(len(scores)), key=lambda i: (scores[i], i), reverse=True)
    if ties == "earlier-first":
        return sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    raise ValueError(f"ties: {ties!r}")


def merge_score_order(masks, scores, threshold=0.5, ties="later-first"):
    """fair-psgg's mask_merge (hilo mode) as far as the segmentation goes: -> (node map, kept).

    Walk the masks by descending score; a mask already absorbed is skipped; a mask with no pixel left
    unclaimed is dropped; otherwise it becomes node len(kept), claims its unclaimed pixels, and absorbs
    every later, not yet absorbed mask whose IoU with it (full masks, any categories) is >= threshold.
    An absorbed mask contributes no pixel. node map: (H, W) node index, -1 where no node claimed the
    pixel; kept: the original index of each node."""
    masks = [np.asarray(m, bool) for m in masks]
    order = score_order([float(s) for s in scores], ties)
    node_map = np.full(masks[0].shape, -1, np.int64)
    kept, absorbed = [], set()
    for position, i in enumerate(order):
        if i in absorbed:
            continue
        claimed = (node_map == -1) & masks[i]
        if not claimed.any():
            continue
        node_map[claimed] = len(kept)
        kept.append(i)
        for k in order[position + 1:]:
            if k not in absorbed and mask_iou(masks[i], masks[k]) >= threshold:
                absorbed.add(k)
    return node_map, kept


def merge_first_wins(masks):
    """fair-psgg's psgtr mode: each pixel to the first mask holding it (argmax over the masks), -1 when
    none does. -> (node map, kept) with kept = every mask index (a mask may end with no pixel)."""
    masks = [np.asarray(m, bool) for m in masks]
    node_map = np.full(masks[0].shape, -1, np.int64)
    for i in reversed(range(len(masks))):
        node_map[masks[i]] = i
    return node_map, list(range(len(masks)))


def merged_segments(node_map, kept, categories):
    """(id map, {id: category}) of a merge: node n is id n + 1, with the category of mask kept[n];
    nodes without pixels are no segment; unclaimed pixels are unassigned (0)."""
    node_map = np.asarray(node_map)
    present = sorted(set(node_map.ravel().tolist()) - {-1})
    return node_map + 1, {n + 1: int(categories[kept[n]]) for n in present}
