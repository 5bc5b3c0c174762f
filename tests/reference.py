"""Plain-Python reference of the sgeval metrics: the oracle the fast evaluator is tested against.

Written for clarity, not speed: Python loops, sets and dicts; numpy only holds masks. It follows
SPEC.md sections 2-7 literally and never imports `sgeval`. Per-image ratios and all means are
exact `fractions.Fraction`s, converted to float once at the end, so every metric is the correctly
rounded value of its definition. IoU values are plain Python floats computed in the order the
SPEC fixes, because the matching compares them with `>=` / `>`.

Input (in memory, as written by tools/synth.py):

    dataset = {"thing_classes": [str], "stuff_classes": [str], "predicate_classes": [str],
               "images": [{"image_id": str, "height": int, "width": int,
                           "split": "test" | "train",
                           "categories": [int],         # per GT instance
                           "masks": bool (G, H, W),     # mask mode
                           "boxes": [[x1, y1, x2, y2]], # box mode
                           "relations": [[s, o, p]]}]}
    predictions = [{"id": str | int, "instances": [{"category", "bbox", "score"}],
                    "triplets": [[s, o, p]], "ng_triplets": [[s, o, p]] (optional),
                    "masks": bool (P, H, W) (mask mode)}]

Readings of the SPEC made here (the fast evaluator must agree):
- Evaluated images: split "test" with >= 1 relation after removing duplicate rows.
  `skipped_no_relations` counts test images with none. Prediction ids are compared as strings;
  `extra_predictions` counts prediction records whose id is not an evaluated image (train ids,
  unknown ids, test images without relations). An evaluated image without a prediction record is
  evaluated as if its record had no instances and no triplets (zero hits everywhere; PRank is
  undefined for it). Two prediction records with the same id are an error (ValueError).
- `ng_triplets` absent or None -> T_ng = T. A present but empty list is taken as given (empty).
- Relative k "x<f>": k = max(1, floor(f * |G| + 0.5)) in Python floats (round half up, not
  Python's round-half-even), |G| = deduplicated GT relations of the image. f may be non-integer.
- Matching `unique` (Algorithm 2 with >=): each predicted instance, in index order, takes as
  candidate the GT instance of its own category with the highest IoU (first GT index wins ties);
  if that IoU >= threshold, it becomes the GT instance's holder when the GT instance has none or
  its IoU is strictly higher than the holder's (earlier prediction wins ties). A displaced
  holder is not re-matched. Only holders are matched. A prediction whose category has no GT
  instance has no candidate. `multimpo`: every prediction whose candidate reaches the threshold
  maps to it.
- GC_k(T): walk T, skip a triplet whose (s, o) pair was already walked, keep the first k.
  NG_k(T_ng): walk T_ng, skip exact repeats, keep the first k. Under `multimpo` R@k, mR@k and
  PR@k use the first k distinct triplets of T (no graph constraint). Self-pairs (s == o) are
  neither removed nor special (they only hit a GT self-relation).
- Matched set of a selection: {(L[s], L[o], p)} over its triplets whose ends both map.
- InstR: distinct GT instances that some prediction maps to, over all GT instances.
- R@inf / mR@inf: GT triplets whose subject and object GT instances are both mapped to.
- PRank: walk all of T_ng, map through L, drop triplets with an unmatched end and exact repeats
  of an earlier mapped triplet; rank = number of earlier kept triplets with the same mapped pair.
  Per image and predicate p: mean rank over the triplets of G^(p) that appear; undefined if none.
- Aggregation: R-type metrics are means over evaluated images. m-type metrics: per predicate, the
  mean over evaluated images whose G holds it (PRank: over images where it is defined), then the
  mean over predicates present in the evaluated GT (PRank: over predicates with a value; None if
  none). absent_predicates="zero" divides mR / mNgR / mR@inf by the size of the whole predicate
  vocabulary instead (absent predicates count 0); PRank is unaffected. No evaluated images ->
  every metric is None.
"""

import math
from fractions import Fraction

import numpy as np

MODES = ("mask", "box")
PROTOCOLS = ("unique", "multimpo")
ABSENT_RULES = ("skip", "zero")
DEFAULT_KS = ("20", "50", "100", "x1", "x10")


# ---------------------------------------------------------------------------------------------
# IoU


def box_iou(a, b):
    """IoU of two xyxy boxes (continuous coordinates, no +1), in exactly the SPEC's order."""
    ax1, ay1, ax2, ay2 = (float(v) for v in a)
    bx1, by1, bx2, by2 = (float(v) for v in b)
    area_a = (ax2 - ax1) * (ay2 - ay1)
    area_b = (bx2 - bx1) * (by2 - by1)
    iw = max(0.0, min(ax2, bx2) - max(ax1, bx1))
    ih = max(0.0, min(ay2, by2) - max(ay1, by1))
    inter = iw * ih
    union = area_a + area_b - inter
    return inter / union if union > 0 else 0.0


def mask_iou(a, b):
    """IoU of two boolean masks of the same shape; 0.0 when both are empty."""
    inter = int((a & b).sum())
    union = int((a | b).sum())
    return inter / union if union > 0 else 0.0


# ---------------------------------------------------------------------------------------------
# Instance matching


def match_instances(pred_categories, gt_categories, iou, threshold=0.5, protocol="unique"):
    """Map predicted instance index -> GT instance index.

    `iou(m, g)` returns the IoU of prediction m and GT instance g; it is only asked for pairs of
    the same category.
    """
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}")

    # Each prediction's candidate: same category, highest IoU, first GT index on ties.
    candidate = {}  # pred index -> (gt index, iou)
    for m, pred_cat in enumerate(pred_categories):
        best_g = None
        best_iou = None
        for g, gt_cat in enumerate(gt_categories):
            if gt_cat != pred_cat:
                continue
            value = iou(m, g)
            if best_g is None or value > best_iou:
                best_g = g
                best_iou = value
        if best_g is not None and best_iou >= threshold:
            candidate[m] = (best_g, best_iou)

    if protocol == "multimpo":
        return {m: g for m, (g, _) in candidate.items()}

    # unique: each GT instance keeps one holder; a later prediction replaces it only with a
    # strictly higher IoU.
    holder = {}  # gt index -> (pred index, iou)
    for m in sorted(candidate):
        g, value = candidate[m]
        if g not in holder or value > holder[g][1]:
            holder[g] = (m, value)
    return {m: g for g, (m, _) in holder.items()}


# ---------------------------------------------------------------------------------------------
# Triplet selection


def resolve_k(k, n_gt_relations):
    """The number of triplets a cut-off spelling allows on an image with n GT relations."""
    k = str(k)
    if k.startswith("x"):
        factor = float(k[1:])
        return max(1, math.floor(factor * n_gt_relations + 0.5))
    if k.isdigit() and int(k) > 0:
        return int(k)
    raise ValueError(f"bad k value {k!r}: expected a positive integer or x<factor>")


def select_graph_constrained(triplets, k):
    """GC_k: the first k triplets whose (s, o) pair did not occur earlier in the walk."""
    seen_pairs = set()
    kept = []
    for s, o, p in triplets:
        if len(kept) == k:
            break
        if (s, o) in seen_pairs:
            continue
        seen_pairs.add((s, o))
        kept.append((s, o, p))
    return kept


def select_distinct(triplets, k):
    """NG_k: the first k triplets that are not exact repeats of an earlier one."""
    seen = set()
    kept = []
    for t in triplets:
        if len(kept) == k:
            break
        if t in seen:
            continue
        seen.add(t)
        kept.append(t)
    return kept


def apply_matching(selection, mapping):
    """Set of (gt subject, gt object, predicate) for selected triplets whose ends both map."""
    matched = set()
    for s, o, p in selection:
        if s in mapping and o in mapping:
            matched.add((mapping[s], mapping[o], p))
    return matched


def predicate_ranks(triplets_ng, mapping):
    """Algorithm 6 lookup: mapped triplet -> rank within its mapped (subject, object) pair."""
    rank_of = {}
    kept_per_pair = {}
    for s, o, p in triplets_ng:
        if s not in mapping or o not in mapping:
            continue
        mapped = (mapping[s], mapping[o], p)
        if mapped in rank_of:
            continue
        pair = (mapping[s], mapping[o])
        rank_of[mapped] = kept_per_pair.get(pair, 0)
        kept_per_pair[pair] = rank_of[mapped] + 1
    return rank_of


# ---------------------------------------------------------------------------------------------
# Per image


def gt_relation_set(image):
    """G: the image's GT relations with exact duplicate rows removed."""
    return {(int(s), int(o), int(p)) for s, o, p in image["relations"]}


def _as_triplets(rows, n_instances, image_id, field):
    triplets = []
    for i, row in enumerate(rows):
        s, o, p = (int(v) for v in row)
        for index in (s, o):
            if not 0 <= index < n_instances:
                raise ValueError(
                    f"image {image_id}: {field} {i} refers to instance {index}, "
                    f"but only {n_instances} instances exist"
                )
        triplets.append((s, o, p))
    return triplets


def _fraction_by_predicate(gt, found):
    """{p: |G^(p) ∩ found| / |G^(p)|} for every predicate p in G."""
    total = {}
    hits = {}
    for t in gt:
        p = t[2]
        total[p] = total.get(p, 0) + 1
        hits[p] = hits.get(p, 0) + (1 if t in found else 0)
    return {p: Fraction(hits[p], total[p]) for p in total}


def evaluate_image(image, prediction, mode, ks, iou_threshold, protocol):
    """Per-image values as Fractions; `prediction` None means the image has no record."""
    gt = gt_relation_set(image)
    gt_categories = [int(c) for c in image["categories"]]
    image_id = image["image_id"]

    if prediction is None:
        prediction = {"instances": [], "triplets": []}
    instances = prediction["instances"]
    pred_categories = [int(inst["category"]) for inst in instances]
    n_pred = len(instances)

    if mode == "mask":
        gt_masks = np.asarray(image["masks"], dtype=bool)
        pred_masks = np.asarray(prediction["masks"], dtype=bool) if n_pred else None
        if n_pred and pred_masks.shape[0] != n_pred:
            raise ValueError(f"image {image_id}: {pred_masks.shape[0]} masks for {n_pred} instances")

        def iou(m, g):
            return mask_iou(pred_masks[m], gt_masks[g])

    else:
        gt_boxes = image["boxes"]

        def iou(m, g):
            return box_iou(instances[m]["bbox"], gt_boxes[g])

    mapping = match_instances(pred_categories, gt_categories, iou, iou_threshold, protocol)

    triplets = _as_triplets(prediction.get("triplets", []), n_pred, image_id, "triplet")
    ng_rows = prediction.get("ng_triplets")
    triplets_ng = triplets if ng_rows is None else _as_triplets(ng_rows, n_pred, image_id, "ng_triplet")

    gt_pairs = {(s, o) for s, o, _ in gt}
    record = {"predicates": {p for _, _, p in gt}, "R": {}, "mR": {}, "PR": {}, "ngR": {}, "mNgR": {}}
    for k in ks:
        k_count = resolve_k(k, len(gt))
        if protocol == "multimpo":
            selection = select_distinct(triplets, k_count)
        else:
            selection = select_graph_constrained(triplets, k_count)
        matched = apply_matching(selection, mapping)
        record["R"][k] = Fraction(len(gt & matched), len(gt))
        record["mR"][k] = _fraction_by_predicate(gt, matched)
        matched_pairs = {(s, o) for s, o, _ in matched}
        record["PR"][k] = Fraction(len(gt_pairs & matched_pairs), len(gt_pairs))

        matched_ng = apply_matching(select_distinct(triplets_ng, k_count), mapping)
        record["ngR"][k] = Fraction(len(gt & matched_ng), len(gt))
        record["mNgR"][k] = _fraction_by_predicate(gt, matched_ng)

    matched_gt_instances = set(mapping.values())
    record["InstR"] = Fraction(len(matched_gt_instances), len(gt_categories))
    reachable = {t for t in gt if t[0] in matched_gt_instances and t[1] in matched_gt_instances}
    record["R@inf"] = Fraction(len(reachable), len(gt))
    record["mR@inf"] = _fraction_by_predicate(gt, reachable)

    rank_of = predicate_ranks(triplets_ng, mapping)
    ranks_by_predicate = {}
    for t in gt:
        if t in rank_of:
            ranks_by_predicate.setdefault(t[2], []).append(rank_of[t])
    record["PRank"] = {p: Fraction(sum(r), len(r)) for p, r in ranks_by_predicate.items()}
    return record


# ---------------------------------------------------------------------------------------------
# Whole dataset


def _mean(values):
    values = list(values)
    return sum(values, Fraction(0)) / len(values) if values else None


def _to_float(value):
    return None if value is None else float(value)


def reference_evaluate(
    dataset,
    predictions,
    mode="mask",
    ks=DEFAULT_KS,
    iou_threshold=0.5,
    protocol="unique",
    absent_predicates="skip",
):
    """Evaluate `predictions` against `dataset`; see the module docstring for every rule."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}")
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}")
    if absent_predicates not in ABSENT_RULES:
        raise ValueError(f"unknown absent_predicates rule {absent_predicates!r}")
    ks = [str(k) for k in ks]
    for k in ks:
        resolve_k(k, 1)  # reject bad spellings even when nothing is evaluated
    predicate_names = list(dataset["predicate_classes"])

    evaluated = []
    skipped_no_relations = 0
    for image in dataset["images"]:
        if image["split"] != "test":
            continue
        if gt_relation_set(image):
            evaluated.append(image)
        else:
            skipped_no_relations += 1

    by_id = {}
    for record in predictions:
        key = str(record["id"])
        if key in by_id:
            raise ValueError(f"prediction id {key} occurs twice")
        by_id[key] = record
    evaluated_ids = {str(image["image_id"]) for image in evaluated}
    if len(evaluated_ids) != len(evaluated):
        raise ValueError("two evaluated GT images share an image_id")
    extra = sum(1 for key in by_id if key not in evaluated_ids)
    missing = sum(1 for key in evaluated_ids if key not in by_id)

    records = [
        evaluate_image(image, by_id.get(str(image["image_id"])), mode, ks, iou_threshold, protocol)
        for image in evaluated
    ]

    present = set()
    for record in records:
        present |= record["predicates"]
    present_order = [p for p in range(len(predicate_names)) if p in present]
    absent_names = [name for p, name in enumerate(predicate_names) if p not in present]

    def per_predicate(values_of):
        """{p: mean over images of values_of(record).get(p)} for present p (None if no value)."""
        return {
            p: _mean(values_of(r)[p] for r in records if p in values_of(r)) for p in present_order
        }

    def mean_over_predicates(by_predicate, zero_fill):
        if not records:
            return None
        values = [v for v in by_predicate.values() if v is not None]
        if zero_fill and absent_predicates == "zero":
            return sum(values, Fraction(0)) / len(predicate_names)
        return _mean(values)

    metrics = {}
    per_pred = {}
    for k in ks:
        metrics[f"R@{k}"] = _mean(r["R"][k] for r in records)
        per_pred[f"mR@{k}"] = per_predicate(lambda r, k=k: r["mR"][k])
        metrics[f"mR@{k}"] = mean_over_predicates(per_pred[f"mR@{k}"], True)
        metrics[f"ngR@{k}"] = _mean(r["ngR"][k] for r in records)
        per_pred[f"mNgR@{k}"] = per_predicate(lambda r, k=k: r["mNgR"][k])
        metrics[f"mNgR@{k}"] = mean_over_predicates(per_pred[f"mNgR@{k}"], True)
        metrics[f"PR@{k}"] = _mean(r["PR"][k] for r in records)
    metrics["InstR"] = _mean(r["InstR"] for r in records)
    metrics["R@inf"] = _mean(r["R@inf"] for r in records)
    per_pred["mR@inf"] = per_predicate(lambda r: r["mR@inf"])
    metrics["mR@inf"] = mean_over_predicates(per_pred["mR@inf"], True)
    per_pred["PRank"] = per_predicate(lambda r: r["PRank"])
    metrics["PRank"] = mean_over_predicates(per_pred["PRank"], False)

    return {
        "images": {
            "evaluated": len(evaluated),
            "missing_predictions": missing,
            "skipped_no_relations": skipped_no_relations,
            "extra_predictions": extra,
        },
        "metrics": {key: _to_float(value) for key, value in metrics.items()},
        "per_predicate": {
            key: {predicate_names[p]: _to_float(v) for p, v in values.items()}
            for key, values in per_pred.items()
        },
        "absent_predicates": absent_names,
    }
