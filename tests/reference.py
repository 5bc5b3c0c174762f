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
- Per image, every metric is kept as integer counts (hits, denominator); aggregation="per_image"
  averages the ratios (the rules above), aggregation="pooled" divides summed hits by summed
  denominators instead (R-type: over images; m-type: per predicate, then the usual mean over
  predicates; PRank: summed ranks over summed ranked triplets per predicate).
- `singlempo`: merge (SPEC section 5), then `unique` matching between the merged nodes and GT.
  Order: score descending (stable) when every instance has a non-None "score"; otherwise first
  appearance of s, then o, walking T_ng and then T; unreferenced instances last in index order.
  Walk the order: an absorbed instance is skipped; an instance whose pixels are all claimed
  already is dropped; any other becomes a node (category = its own, mask = its unclaimed pixels),
  claims its pixels and absorbs every later unabsorbed instance with IoU >= 0.5 on the full
  original masks (categories ignored). Box mode: box IoU, no claiming, nothing dropped, node box =
  the instance's box. The merge threshold is always 0.5. T and T_ng are remapped to nodes;
  triplets with a dropped end and node self-pairs are removed; selection then runs as usual (GC).
- Zero-shot: training types = (cat[s], cat[o], p) of all relations of split "train" images.
  Z* = the GT types of evaluated images not among them, or exactly the `zeroshot` set when given.
  Z = GT triplets of the image with type in Z*. zR@k / ngzR@k use the selections of R@k / ngR@k
  (k resolved with |G|). Images with empty Z are left out; None when no image has Z.
- Named subsets (`subsets`): a GT triplet (s, o, p) is in a subset by its rule (subset_rule) on
  (cat[s], cat[o], p). R@k/<name>, ngR@k/<name>: as zR@k / ngzR@k with the subset's triplets in
  place of Z (legacy protocols: every GT row of such a triplet, as zR). mR@k/<name>: per predicate
  over the kept images with subset triplets of it, then the mean over the predicates with a value
  ("zero": the sum over the subset's predicates: the members, the triplets' predicates, or all
  for an objects subset); None when no kept image has a subset triplet.
- IMR@k (absolute k only): per predicate p of G, the NG-deduplicated T_ng (after the singlempo
  remap) filtered to predicate p, first k, matched; hits over |G^(p)|. Aggregated like mR
  (absent_predicates applies). imr_short_images[k]: evaluated images (missing ones included)
  where some predicate of G has fewer than k such triplets.
- wIMR@k: n_p = distinct (cat[s], cat[o]) pairs of predicate p in the train relations;
  pw_p = float(n_p) ** tau over predicates p with an IMR value (ascending index); w_p = pw_p / sum;
  wIMR = sum(w_p * float(IMR(p))); None when the sum is 0 or no predicate has a value. Not
  affected by absent_predicates. tau must be finite and >= 0.
- Audit (totals over evaluated images; a missing record adds 0; the same for every protocol):
  repeated_triplets / repeated_pairs / self_pairs of T; duplicate_instances (an earlier instance
  in index order with the same category and IoU >= 0.5, full masks or boxes);
  absorbed_instances / dropped_instances of the singlempo merge; duplicate_relations_after_merge
  (triplets of T that, remapped and not removed, repeat the node pair of an earlier kept one).
- Predicate confusion at cut-off confusion_k (k resolved as for R@k): the rows R@k selects (GC_k;
  multimpo: NG_k of T; openpsg / sgb: the first k rows as written). A GT triplet (s, o, p) counts
  (p, p) when a selected row on its pair (both ends mapped to s and o; legacy: ok with s and o)
  has predicate p, else (p, q) for the predicate q of the first selected row on its pair, else
  (p, None). Summed over the evaluated images; images a legacy protocol leaves out add nothing.
"""

import math
from collections import Counter
from fractions import Fraction

import numpy as np

MODES = ("mask", "box")
PROTOCOLS = ("unique", "singlempo", "multimpo", "openpsg", "sgb")  # and oi: reference_oi (its own metrics)
LEGACY = ("openpsg", "sgb")  # rows as written, many-to-many, OpenPSG's / Scene-Graph-Benchmark's aggregation
MATCHINGS = ("unique", "multimpo")  # singlempo merges first, then matches with "unique"
ABSENT_RULES = ("skip", "zero")
AGGREGATIONS = ("per_image", "pooled")
DEFAULT_KS = ("20", "50", "100", "x1", "x10")
DEFAULT_IMR_KS = ("10", "20", "50")
MERGE_IOU = 0.5  # singlempo merge threshold, independent of iou_threshold
DUPLICATE_IOU = 0.5  # audit: duplicate instances
AUDIT_FIELDS = (
    "repeated_triplets",
    "repeated_pairs",
    "self_pairs",
    "duplicate_instances",
    "absorbed_instances",
    "dropped_instances",
    "duplicate_relations_after_merge",
)


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


def mmdet_box_iou(gt_box, pred_box):
    """OpenPSG's box IoU (mmdet's bbox_overlaps): every value and operation in float32, no +1,
    union at least float32(1e-6), (GT area + predicted area) - overlap."""
    f = np.float32
    gx1, gy1, gx2, gy2 = (f(v) for v in gt_box)
    px1, py1, px2, py2 = (f(v) for v in pred_box)
    area_gt = (gx2 - gx1) * (gy2 - gy1)
    area_pred = (px2 - px1) * (py2 - py1)
    overlap = max(min(gx2, px2) - max(gx1, px1), f(0)) * max(min(gy2, py2) - max(gy1, py1), f(0))
    return overlap / max(area_gt + area_pred - overlap, f(1e-6))


def sgb_box_iou(gt_box, pred_box):
    """Scene-Graph-Benchmark's box IoU (boxlist_iou): every value and operation in float32, the +1
    pixel convention, inter / ((GT area + predicted area) - inter)."""
    f, one = np.float32, np.float32(1)
    gx1, gy1, gx2, gy2 = (f(v) for v in gt_box)
    px1, py1, px2, py2 = (f(v) for v in pred_box)
    area_gt = (gx2 - gx1 + one) * (gy2 - gy1 + one)
    area_pred = (px2 - px1 + one) * (py2 - py1 + one)
    inter = max(min(gx2, px2) - max(gx1, px1) + one, f(0)) * max(min(gy2, py2) - max(gy1, py1) + one, f(0))
    with np.errstate(divide="ignore", invalid="ignore"):
        return inter / (area_gt + area_pred - inter)


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
    if protocol not in MATCHINGS:
        raise ValueError(f"unknown matching {protocol!r}: expected one of {MATCHINGS}")

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
# SingleMPO merge


def merge_order(instances, triplets_ng, triplets):
    """The order in which the singlempo merge walks the instances.

    By score, highest first (ties keep index order), when every instance has a score; otherwise
    by first appearance (subject, then object) walking T_ng and then T, never-referenced
    instances last in index order.
    """
    n = len(instances)
    if all(inst.get("score") is not None for inst in instances):
        return sorted(range(n), key=lambda i: -float(instances[i]["score"]))  # sorted() is stable
    order = []
    seen = set()
    for s, o, _ in list(triplets_ng) + list(triplets):
        for i in (s, o):
            if i not in seen:
                seen.add(i)
                order.append(i)
    order += [i for i in range(n) if i not in seen]
    return order


def singlempo_merge(order, mode, masks=None, boxes=None):
    """Walk `order` and merge duplicate instances into nodes.

    Returns (node_of, creators, node_masks, absorbed, dropped):
      node_of     {instance: node} for kept and absorbed instances (dropped ones are absent)
      creators    [instance that created node n] -> node n's category and (box mode) box
      node_masks  [node n's claimed pixels] in mask mode, [] in box mode
      absorbed    set of instances absorbed into an earlier node
      dropped     set of instances whose pixels were all claimed already (mask mode only)
    Absorption compares FULL original masks / boxes and ignores categories.
    """
    node_of = {}
    creators = []
    node_masks = []
    absorbed = set()
    dropped = set()
    claimed = None
    for position, i in enumerate(order):
        if i in absorbed:
            continue
        if mode == "mask":
            if claimed is None:
                claimed = np.zeros_like(masks[i], dtype=bool)
            unclaimed = masks[i] & ~claimed
            if not unclaimed.any():
                dropped.add(i)
                continue
            node_masks.append(unclaimed)
            claimed = claimed | masks[i]
        node = len(creators)
        creators.append(i)
        node_of[i] = node
        for j in order[position + 1:]:
            if j in absorbed:
                continue
            if mode == "mask":
                value = mask_iou(masks[i], masks[j])
            else:
                value = box_iou(boxes[i], boxes[j])
            if value >= MERGE_IOU:
                absorbed.add(j)
                node_of[j] = node
    return node_of, creators, node_masks, absorbed, dropped


def remap_triplets(triplets, node_of):
    """Triplets in node indices; those with a dropped end or a node self-pair are removed."""
    remapped = []
    for s, o, p in triplets:
        if s not in node_of or o not in node_of:
            continue
        if node_of[s] == node_of[o]:
            continue
        remapped.append((node_of[s], node_of[o], p))
    return remapped


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


def _counts_by_predicate(gt, found):
    """{p: (|G^(p) ∩ found|, |G^(p)|)} for every predicate p in G."""
    total = {}
    hits = {}
    for t in gt:
        p = t[2]
        total[p] = total.get(p, 0) + 1
        hits[p] = hits.get(p, 0) + (1 if t in found else 0)
    return {p: (hits[p], total[p]) for p in total}


def audit_prediction(triplets, categories, pred_iou, node_of):
    """Audit counts of one prediction record.

    `triplets` is T in instance indices, `pred_iou(i, j)` the IoU of two predicted instances
    (full masks or boxes), `node_of` the singlempo merge's {instance: node}. The merge's
    absorbed / dropped counts are added by the caller.
    """
    repeated_triplets = 0
    repeated_pairs = 0
    self_pairs = 0
    seen_triplets = set()
    seen_pairs = set()
    for s, o, p in triplets:
        if (s, o, p) in seen_triplets:
            repeated_triplets += 1
        if (s, o) in seen_pairs:
            repeated_pairs += 1
        if s == o:
            self_pairs += 1
        seen_triplets.add((s, o, p))
        seen_pairs.add((s, o))

    duplicate_instances = 0
    for j in range(len(categories)):
        for i in range(j):
            if categories[i] == categories[j] and pred_iou(i, j) >= DUPLICATE_IOU:
                duplicate_instances += 1
                break

    duplicate_relations = 0
    seen_node_pairs = set()
    for s, o, _ in remap_triplets(triplets, node_of):
        if (s, o) in seen_node_pairs:
            duplicate_relations += 1
        seen_node_pairs.add((s, o))

    return {
        "repeated_triplets": repeated_triplets,
        "repeated_pairs": repeated_pairs,
        "self_pairs": self_pairs,
        "duplicate_instances": duplicate_instances,
        "duplicate_relations_after_merge": duplicate_relations,
    }


def as_task(image, prediction, mode, task, protocol=None):
    """The prediction under the task: in predcls, with as many instances as the GT, the GT's
    categories, boxes and masks with score 1; otherwise as given. Under sgb in predcls, the GT's
    instances whatever their number (Scene-Graph-Benchmark's vg_eval.py replaces the prediction's
    boxes, labels and scores by the GT's, and its rows index them)."""
    instances = prediction["instances"]
    same = len(instances) == len(image["categories"])
    if task != "predcls" or not same and not (protocol == "sgb" and instances):
        return prediction
    given = {**prediction, "instances": [{"category": int(c), "bbox": list(map(float, b)), "score": 1.0}
                                         for c, b in zip(image["categories"], image["boxes"])]}
    if mode == "mask":
        given["masks"] = np.asarray(image["masks"], dtype=bool)
    return given


def evaluate_image(image, prediction, mode, ks, iou_threshold, protocol, imr_ks=(),
                   zeroshot_types=frozenset(), task="sgdet", confusion_k="50", subset_rules=None):
    """Per-image counts; `prediction` None means the image has no record. `subset_rules`: {subset
    name: rule(subject category, object category, predicate) -> bool}.

    Every value is a pair (hits, denominator) or a {predicate: (hits, denominator)} dict, so the
    caller can average ratios (per image) or pool counts. PRank pairs are (rank sum, ranked
    triplets) and only listed for predicates with a ranked triplet.
    """
    gt = gt_relation_set(image)
    gt_categories = [int(c) for c in image["categories"]]
    image_id = image["image_id"]

    if prediction is None:
        prediction = {"instances": [], "triplets": []}
    prediction = as_task(image, prediction, mode, task, protocol)
    instances = prediction["instances"]
    pred_categories = [int(inst["category"]) for inst in instances]
    n_pred = len(instances)

    if mode == "mask":
        gt_masks = np.asarray(image["masks"], dtype=bool)
        pred_masks = np.asarray(prediction["masks"], dtype=bool) if n_pred else None
        pred_boxes = None
        if n_pred and pred_masks.shape[0] != n_pred:
            raise ValueError(f"image {image_id}: {pred_masks.shape[0]} masks for {n_pred} instances")

        def pred_iou(i, j):
            return mask_iou(pred_masks[i], pred_masks[j])

    else:
        gt_boxes = image["boxes"]
        pred_masks = None
        pred_boxes = [inst["bbox"] for inst in instances]

        def pred_iou(i, j):
            return box_iou(pred_boxes[i], pred_boxes[j])

    triplets = _as_triplets(prediction.get("triplets", []), n_pred, image_id, "triplet")
    ng_rows = prediction.get("ng_triplets")
    triplets_ng = triplets if ng_rows is None else _as_triplets(ng_rows, n_pred, image_id, "ng_triplet")
    # A@k (sgcls, predcls): R@k of the rows whose (s, o) index pair is the pair of a GT relation
    on_gt_pairs = [t for t in triplets if (t[0], t[1]) in {(s, o) for s, o, _ in gt}] if task != "sgdet" else None

    # The singlempo merge runs for every protocol: the audit reports it.
    order = merge_order(instances, triplets_ng, triplets)
    node_of, creators, node_masks, absorbed, dropped = singlempo_merge(order, mode, pred_masks, pred_boxes)
    audit = audit_prediction(triplets, pred_categories, pred_iou, node_of)
    audit["absorbed_instances"] = len(absorbed)
    audit["dropped_instances"] = len(dropped)

    gt_pairs = {(s, o) for s, o, _ in gt}
    zero_shot = {t for t in gt if (gt_categories[t[0]], gt_categories[t[1]], t[2]) in zeroshot_types}
    in_subset = {name: {t for t in gt if rule(gt_categories[t[0]], gt_categories[t[1]], t[2])}
                 for name, rule in (subset_rules or {}).items()}
    record = {"predicates": {p for _, _, p in gt}, "audit": audit, "left_out": False,
              "subsets": {name: {"R": {}, "ngR": {}, "mR": {}} for name in in_subset}}
    for family in ("R", "mR", "PR", "ngR", "mNgR", "zR", "ngzR", "IMR", "imr_short", "A"):
        record[family] = {}

    if protocol in LEGACY:
        threshold = np.float32(iou_threshold) if mode == "box" else iou_threshold

        def ok(m, g):
            if pred_categories[m] != gt_categories[g]:
                return False
            if mode == "mask":
                return mask_iou(pred_masks[m], gt_masks[g]) >= threshold
            box_iou_of = mmdet_box_iou if protocol == "openpsg" else sgb_box_iou
            return box_iou_of(gt_boxes[g], pred_boxes[m]) >= threshold

        # OpenPSG removes duplicate GT rows (as G does); Scene-Graph-Benchmark counts every row of the file
        gt_rows = sorted(gt) if protocol == "openpsg" else [tuple(int(v) for v in r) for r in image["relations"]]
        record = legacy_record(record, gt_rows, triplets, triplets_ng, ok, len(gt_categories), n_pred, ks, imr_ks,
                               zero_shot, in_subset)
        rows = triplets[:resolve_k(confusion_k, len(gt_rows))]
        record["confusion"] = Counter() if record["left_out"] else Counter(
            confusion_column(t, rows, lambda row, t=t: ok(row[0], t[0]) and ok(row[1], t[1])) for t in gt_rows)
        for k in ks if on_gt_pairs is not None and not record["left_out"] else ():
            rows = on_gt_pairs[:resolve_k(k, len(gt_rows))]
            record["A"][k] = (len(legacy_hits(rows, gt_rows, ok)), len(gt_rows))
        return record
    if protocol == "singlempo":
        # The matched units are the nodes: their claimed pixels (or creator's box) and category.
        node_categories = [pred_categories[i] for i in creators]
        if mode == "mask":

            def node_iou(m, g):
                return mask_iou(node_masks[m], gt_masks[g])

        else:

            def node_iou(m, g):
                return box_iou(pred_boxes[creators[m]], gt_boxes[g])

        mapping = match_instances(node_categories, gt_categories, node_iou, iou_threshold, "unique")
        triplets = remap_triplets(triplets, node_of)
        triplets_ng = remap_triplets(triplets_ng, node_of)
        on_gt_pairs = None if on_gt_pairs is None else remap_triplets(on_gt_pairs, node_of)
    else:
        if mode == "mask":

            def instance_iou(m, g):
                return mask_iou(pred_masks[m], gt_masks[g])

        else:

            def instance_iou(m, g):
                return box_iou(pred_boxes[m], gt_boxes[g])

        mapping = match_instances(pred_categories, gt_categories, instance_iou, iou_threshold, protocol)

    select = select_distinct if protocol == "multimpo" else select_graph_constrained
    rows = select(triplets, resolve_k(confusion_k, len(gt)))
    record["confusion"] = Counter(confusion_column(t, rows, lambda row, t=t: (mapping.get(row[0]), mapping.get(
        row[1])) == t[:2]) for t in sorted(gt))
    for k in ks:
        k_count = resolve_k(k, len(gt))
        if protocol == "multimpo":
            selection = select_distinct(triplets, k_count)
        else:
            selection = select_graph_constrained(triplets, k_count)
        matched = apply_matching(selection, mapping)
        record["R"][k] = (len(gt & matched), len(gt))
        record["mR"][k] = _counts_by_predicate(gt, matched)
        if on_gt_pairs is not None:
            chosen = select_distinct(on_gt_pairs, k_count) if protocol == "multimpo" else \
                select_graph_constrained(on_gt_pairs, k_count)
            record["A"][k] = (len(gt & apply_matching(chosen, mapping)), len(gt))
        matched_pairs = {(s, o) for s, o, _ in matched}
        record["PR"][k] = (len(gt_pairs & matched_pairs), len(gt_pairs))
        record["zR"][k] = (len(zero_shot & matched), len(zero_shot))

        matched_ng = apply_matching(select_distinct(triplets_ng, k_count), mapping)
        record["ngR"][k] = (len(gt & matched_ng), len(gt))
        record["mNgR"][k] = _counts_by_predicate(gt, matched_ng)
        record["ngzR"][k] = (len(zero_shot & matched_ng), len(zero_shot))
        for name, members in in_subset.items():  # a subset: recall over its GT triplets only
            record["subsets"][name]["R"][k] = (len(members & matched), len(members))
            record["subsets"][name]["ngR"][k] = (len(members & matched_ng), len(members))
            record["subsets"][name]["mR"][k] = _counts_by_predicate(members, matched)

    matched_gt_instances = set(mapping.values())
    record["InstR"] = (len(matched_gt_instances), len(gt_categories))
    reachable = {t for t in gt if t[0] in matched_gt_instances and t[1] in matched_gt_instances}
    record["R@inf"] = (len(reachable), len(gt))
    record["mR@inf"] = _counts_by_predicate(gt, reachable)

    rank_of = predicate_ranks(triplets_ng, mapping)
    ranks_by_predicate = {}
    for t in gt:
        if t in rank_of:
            ranks_by_predicate.setdefault(t[2], []).append(rank_of[t])
    record["PRank"] = {p: (sum(r), len(r)) for p, r in ranks_by_predicate.items()}

    # IMR: each predicate of G ranks only its own triplets of the NG-deduplicated T_ng.
    distinct_ng = select_distinct(triplets_ng, len(triplets_ng))
    for k in imr_ks:
        k_count = int(k)
        counts = {}
        short = False
        for p in sorted(record["predicates"]):
            with_p = [t for t in distinct_ng if t[2] == p]
            if len(with_p) < k_count:
                short = True
            matched_p = apply_matching(with_p[:k_count], mapping)
            gt_p = {t for t in gt if t[2] == p}
            counts[p] = (len(gt_p & matched_p), len(gt_p))
        record["IMR"][k] = counts
        record["imr_short"][k] = short
    return record


def confusion_column(t, rows, on_pair):
    """Predicate confusion of GT triplet t = (s, o, p) among `rows`: (p, p) when a row on its pair
    has predicate p, else (p, the predicate of the first row on its pair), else (p, None)."""
    on = [row for row in rows if on_pair(row)]
    if any(row[2] == t[2] for row in on):
        return t[2], t[2]
    return t[2], on[0][2] if on else None


def legacy_hits(rows, gt_rows, ok):
    """Indices of the GT rows (s, o, p) some row of `rows` hits: predicate p, ok(row subject, s)
    and ok(row object, o)."""
    return {i for i, (s, o, p) in enumerate(gt_rows) if any(row[2] == p and ok(row[0], s) and ok(row[1], o)
                                                             for row in rows)}


def legacy_record(record, gt_rows, triplets, triplets_ng, ok, n_gt_instances, n_pred, ks, imr_ks, zero_shot,
                  in_subset=None):
    """Fill `record` under OpenPSG's (openpsg) or Scene-Graph-Benchmark's (sgb) rules: rows as
    written (no graph constraint, repeats and self-pairs kept), and a row hits a GT row (s, o, p)
    when its predicate is p and ok(row subject, s) and ok(row object, o) both hold
    (many-to-many). `gt_rows`: the GT triplets counted, one per row (sgb keeps duplicate rows);
    `ok(m, g)`: same category and IoU >= threshold; `zero_shot`: the zero-shot GT triplets;
    `in_subset`: {subset name: its GT triplets} (every row of such a triplet counts). ngR and
    its kin see the first 100 entries of T_ng at most. Left out (no counts at all) when the record
    has no relation rows."""
    record["left_out"] = not triplets
    if record["left_out"]:
        return record
    every = range(len(gt_rows))

    def hits_pair(row, pair):
        return ok(row[0], pair[0]) and ok(row[1], pair[1])

    def hits(rows):
        return legacy_hits(rows, gt_rows, ok)

    def by_predicate(found, among=every):
        counts = {}
        for i in among:
            hit, total = counts.get(gt_rows[i][2], (0, 0))
            counts[gt_rows[i][2]] = (hit + (i in found), total + 1)
        return counts

    zero_shot_rows = {i for i in every if gt_rows[i] in zero_shot}
    gt_pairs = {(s, o) for s, o, _ in gt_rows}
    for k in ks:
        k_count = resolve_k(k, len(gt_rows))
        found, found_ng = hits(triplets[:k_count]), hits(triplets_ng[:min(k_count, 100)])
        record["R"][k] = (len(found), len(gt_rows))
        record["mR"][k] = by_predicate(found)
        record["PR"][k] = (sum(1 for pair in gt_pairs if any(hits_pair(row, pair) for row in triplets[:k_count])),
                           len(gt_pairs))
        record["zR"][k] = (len(zero_shot_rows & found), len(zero_shot_rows))
        record["ngR"][k] = (len(found_ng), len(gt_rows))
        record["mNgR"][k] = by_predicate(found_ng)
        record["ngzR"][k] = (len(zero_shot_rows & found_ng), len(zero_shot_rows))
        for name, members in (in_subset or {}).items():
            rows = {i for i in every if gt_rows[i] in members}
            record["subsets"][name]["R"][k] = (len(rows & found), len(rows))
            record["subsets"][name]["ngR"][k] = (len(rows & found_ng), len(rows))
            record["subsets"][name]["mR"][k] = by_predicate(found, sorted(rows))
    matched = {g for g in range(n_gt_instances) if any(ok(m, g) for m in range(n_pred))}
    record["InstR"] = (len(matched), n_gt_instances)
    reachable = {i for i in every if gt_rows[i][0] in matched and gt_rows[i][1] in matched}
    record["R@inf"] = (len(reachable), len(gt_rows))
    record["mR@inf"] = by_predicate(reachable)
    ranks_by_predicate = {}
    for t in gt_rows:  # PRank: other predicates on the GT pair before the first row that hits t
        first = next((i for i, row in enumerate(triplets_ng) if row[2] == t[2] and hits_pair(row, t)), None)
        if first is not None:
            rank = len({row[2] for row in triplets_ng[:first] if hits_pair(row, t)})
            ranks_by_predicate.setdefault(t[2], []).append(rank)
    record["PRank"] = {p: (sum(r), len(r)) for p, r in ranks_by_predicate.items()}
    for k in imr_ks:
        counts, short = {}, False
        for p in sorted(record["predicates"]):
            with_p = [row for row in triplets_ng if row[2] == p]
            short = short or len(with_p) < int(k)
            counts.update(by_predicate(hits(with_p[:int(k)]), [i for i in every if gt_rows[i][2] == p]))
        record["IMR"][k] = counts
        record["imr_short"][k] = short
    return record


# ---------------------------------------------------------------------------------------------
# Whole dataset


def subset_rule(spec, dataset):
    """(rule(subject category, object category, predicate) -> bool, the subset's predicates) of a
    subset spec: predicates: the row's predicate is a member (its predicates: the members);
    objects: the subject's (role subject), the object's (object), both (both) or at least one
    (either) category is a member (its predicates: all); triplets: (subject, predicate, object) is
    a member (its predicates: those of the members)."""
    objects = list(dataset["thing_classes"]) + list(dataset["stuff_classes"])
    predicates = list(dataset["predicate_classes"])
    if spec["kind"] == "predicates":
        chosen = {predicates.index(name) for name in spec["members"]}
        return (lambda s, o, p: p in chosen), sorted(chosen)
    if spec["kind"] == "objects":
        chosen, role = {objects.index(name) for name in spec["members"]}, spec["role"]

        def rule(s, o, p):
            return {"subject": s in chosen, "object": o in chosen, "both": s in chosen and o in chosen,
                    "either": s in chosen or o in chosen}[role]

        return rule, list(range(len(predicates)))
    types = {(objects.index(s), objects.index(o), predicates.index(p)) for s, p, o in spec["members"]}
    return (lambda s, o, p: (s, o, p) in types), sorted({p for _, _, p in types})


def subset_metrics(name, rule, domain, evaluated, records, ks, aggregation, absent_predicates, metrics, per_pred):
    """Add R@k/<name> and ngR@k/<name> (over the kept records with subset triplets), mR@k/<name>
    (per predicate over the kept records with subset triplets of it; then the mean over the
    predicates with a value, or with absent_predicates "zero" the sum over len(domain); None when
    no predicate has a value) and its per-predicate values (the predicates of the subset's GT
    triplets in the evaluated images; None where only left-out records hold them)."""
    shown = sorted({p for image in evaluated for s, o, p in gt_relation_set(image)
                    if rule(int(image["categories"][s]), int(image["categories"][o]), p)})
    for family in ("R", "ngR"):
        for k in ks:
            pairs = [r["subsets"][name][family][k] for r in records if r["subsets"][name][family][k][1] > 0]
            metrics[f"{family}@{k}/{name}"] = _ratio(pairs, aggregation)
    for k in ks:
        values = {p: _ratio((r["subsets"][name]["mR"][k][p] for r in records if p in r["subsets"][name]["mR"][k]),
                            aggregation) for p in shown}
        per_pred[f"mR@{k}/{name}"] = values
        valued = [v for v in values.values() if v is not None]
        metrics[f"mR@{k}/{name}"] = None if not valued else sum(valued, Fraction(0)) / len(domain) \
            if absent_predicates == "zero" else _mean(valued)


def _mean(values):
    values = list(values)
    return sum(values, Fraction(0)) / len(values) if values else None


def _ratio(pairs, aggregation):
    """Aggregate (hits, denominator) pairs: the mean of the ratios ("per_image") or summed hits
    over summed denominators ("pooled"); None when there is no pair."""
    pairs = list(pairs)
    if not pairs:
        return None
    if aggregation == "pooled":
        return Fraction(sum(h for h, _ in pairs), sum(d for _, d in pairs))
    return _mean(Fraction(h, d) for h, d in pairs)


def _to_float(value):
    return None if value is None else float(value)


def training_statistics(dataset):
    """(train triplet types {(cat s, cat o, p)}, {p: set of (cat s, cat o)}) over split "train"."""
    types = set()
    pairs_of_predicate = {}
    for image in dataset["images"]:
        if image["split"] != "train":
            continue
        categories = [int(c) for c in image["categories"]]
        for s, o, p in image["relations"]:
            cat_s, cat_o, p = categories[int(s)], categories[int(o)], int(p)
            types.add((cat_s, cat_o, p))
            pairs_of_predicate.setdefault(p, set()).add((cat_s, cat_o))
    return types, pairs_of_predicate


def reference_evaluate(
    dataset,
    predictions,
    mode="mask",
    ks=DEFAULT_KS,
    iou_threshold=0.5,
    protocol="unique",
    absent_predicates="skip",
    imr_ks=DEFAULT_IMR_KS,
    tau=0.5,
    aggregation="per_image",
    zeroshot=None,
    task="sgdet",
    groups=None,
    f1=False,
    confusion_k="50",
    subsets=None,
):
    """Evaluate `predictions` against `dataset`; see the module docstring for every rule.

    `zeroshot`: None derives the zero-shot triplet types from the train split; otherwise an
    iterable of (subject category, object category, predicate) taken as the zero-shot types.
    `task`: sgdet, sgcls or predcls (predcls: the GT's instances stand for a prediction with as
    many instances; sgcls and predcls add A@k). `groups`: {group name: [predicates]}, adding
    mR@k/<group>: the mean of the group's per-predicate mR@k (absent predicates as the rule says).
    `f1`: add F1@k = 2 R mR / (R + mR), 0 when both are 0. `subsets`: {name: {"kind": "predicates"
    | "objects" | "triplets", "members": [names] (triplets: [subject, predicate, object] names),
    "role": "subject" | "object" | "both" | "either" (objects)}}, adding R@k/<name>, ngR@k/<name>
    and mR@k/<name> (see subset_rule and subset_metrics).
    """
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}")
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}")
    if absent_predicates not in ABSENT_RULES:
        raise ValueError(f"unknown absent_predicates rule {absent_predicates!r}")
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"unknown aggregation {aggregation!r}")
    ks = [str(k) for k in ks]
    for k in ks:
        resolve_k(k, 1)  # reject bad spellings even when nothing is evaluated
    imr_ks = [str(k) for k in imr_ks]
    for k in imr_ks:
        if not (k.isdigit() and int(k) > 0):
            raise ValueError(f"bad IMR k value {k!r}: expected a positive integer")
    tau = float(tau)
    if not (math.isfinite(tau) and tau >= 0):
        raise ValueError(f"bad tau {tau!r}: expected a finite number >= 0")
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

    train_types, train_pairs_of_predicate = training_statistics(dataset)
    if zeroshot is None:
        zeroshot_types = set()
        for image in evaluated:
            categories = [int(c) for c in image["categories"]]
            for s, o, p in gt_relation_set(image):
                if (categories[s], categories[o], p) not in train_types:
                    zeroshot_types.add((categories[s], categories[o], p))
    else:
        zeroshot_types = {tuple(int(v) for v in t) for t in zeroshot}

    subset_rules = {name: subset_rule(spec, dataset) for name, spec in (subsets or {}).items()}
    rules = {name: rule for name, (rule, _) in subset_rules.items()}
    all_records = [
        evaluate_image(image, by_id.get(str(image["image_id"])), mode, ks, iou_threshold, protocol,
                       imr_ks, zeroshot_types, task, confusion_k, rules)
        for image in evaluated
    ]
    records = [record for record in all_records if not record["left_out"]]  # openpsg and sgb leave some out
    if protocol in LEGACY:  # the tool's aggregation, whatever was asked
        absent_predicates, aggregation = "zero", "per_image"

    present = set()
    for record in all_records:
        present |= record["predicates"]
    present_order = [p for p in range(len(predicate_names)) if p in present]
    absent_names = [name for p, name in enumerate(predicate_names) if p not in present]

    def r_type(values_of):
        """R-type: over images whose denominator is > 0 (only zR / ngzR ever skip one)."""
        return _ratio((values_of(r) for r in records if values_of(r)[1] > 0), aggregation)

    def per_predicate(values_of):
        """{p: aggregate of values_of(record)[p] over records holding p} for present p."""
        return {
            p: _ratio((values_of(r)[p] for r in records if p in values_of(r)), aggregation)
            for p in present_order
        }

    def mean_over_predicates(by_predicate, zero_fill):
        if not records:
            return None
        values = [v for v in by_predicate.values() if v is not None]
        if zero_fill and absent_predicates == "zero":
            return sum(values, Fraction(0)) / len(predicate_names)
        return _mean(values)

    def weighted_over_predicates(by_predicate):
        """wIMR: sum of w_p * IMR(p), w_p = n_p ** tau / sum of n_q ** tau, all in floats."""
        valued = [p for p in present_order if by_predicate.get(p) is not None]
        powers = [float(len(train_pairs_of_predicate.get(p, ()))) ** tau for p in valued]
        total = sum(powers)
        if not valued or total == 0:
            return None
        return sum((power / total) * float(by_predicate[p]) for power, p in zip(powers, valued))

    metrics = {}
    per_pred = {}
    for k in ks:
        metrics[f"R@{k}"] = r_type(lambda r, k=k: r["R"][k])
        per_pred[f"mR@{k}"] = per_predicate(lambda r, k=k: r["mR"][k])
        metrics[f"mR@{k}"] = mean_over_predicates(per_pred[f"mR@{k}"], True)
        metrics[f"ngR@{k}"] = r_type(lambda r, k=k: r["ngR"][k])
        per_pred[f"mNgR@{k}"] = per_predicate(lambda r, k=k: r["mNgR"][k])
        metrics[f"mNgR@{k}"] = mean_over_predicates(per_pred[f"mNgR@{k}"], True)
        metrics[f"PR@{k}"] = r_type(lambda r, k=k: r["PR"][k])
    for k in ks if f1 else ():
        recall, mean_recall = metrics[f"R@{k}"], metrics[f"mR@{k}"]
        metrics[f"F1@{k}"] = None if recall is None or mean_recall is None else \
            2 * recall * mean_recall / (recall + mean_recall) if recall + mean_recall else Fraction(0)
    for k in ks if task != "sgdet" else ():  # pooled, whatever the aggregation
        pairs = [r["A"][k] for r in records if r["A"][k][1] > 0]
        metrics[f"A@{k}"] = Fraction(sum(h for h, _ in pairs), sum(d for _, d in pairs)) if pairs else None
    for name, members in (groups or {}).items():
        for k in ks:
            values = [per_pred[f"mR@{k}"][p] for p in members if per_pred[f"mR@{k}"].get(p) is not None]
            size = len(members) if absent_predicates == "zero" else len(values)
            metrics[f"mR@{k}/{name}"] = sum(values, Fraction(0)) / size if size else None
    metrics["InstR"] = r_type(lambda r: r["InstR"])
    metrics["R@inf"] = r_type(lambda r: r["R@inf"])
    per_pred["mR@inf"] = per_predicate(lambda r: r["mR@inf"])
    metrics["mR@inf"] = mean_over_predicates(per_pred["mR@inf"], True)
    per_pred["PRank"] = per_predicate(lambda r: r["PRank"])
    metrics["PRank"] = mean_over_predicates(per_pred["PRank"], False)
    for k in ks:
        metrics[f"zR@{k}"] = r_type(lambda r, k=k: r["zR"][k])
    for k in ks:
        metrics[f"ngzR@{k}"] = r_type(lambda r, k=k: r["ngzR"][k])
    for k in imr_ks:
        per_pred[f"IMR@{k}"] = per_predicate(lambda r, k=k: r["IMR"][k])
        metrics[f"IMR@{k}"] = mean_over_predicates(per_pred[f"IMR@{k}"], True)
    for k in imr_ks:
        metrics[f"wIMR@{k}"] = weighted_over_predicates(per_pred[f"IMR@{k}"])
    for name, (rule, domain) in subset_rules.items():
        subset_metrics(name, rule, domain, evaluated, records, ks, aggregation, absent_predicates, metrics, per_pred)

    return {
        "images": {
            "evaluated": len(evaluated),
            "missing_predictions": missing,
            "skipped_no_relations": skipped_no_relations,
            "extra_predictions": extra,
            "scope": "all",
            "duplicate_updates": 0,
        },
        "metrics": {key: _to_float(value) for key, value in metrics.items()},
        "per_predicate": {
            key: {predicate_names[p]: _to_float(v) for p, v in values.items()}
            for key, values in per_pred.items()
        },
        "absent_predicates": absent_names,
        "imr_short_images": {k: sum(1 for r in records if r["imr_short"][k]) for k in imr_ks},
        "audit": {field: sum(r["audit"][field] for r in all_records) for field in AUDIT_FIELDS},
        "images_left_out": len(all_records) - len(records),
        "confusion": {(predicate_names[g], None if p is None else predicate_names[p]): n for (g, p), n in
                      sum((r["confusion"] for r in all_records), Counter()).items()},
    }


# ---------------------------------------------------------------------------------------------
# The oi protocol: PySGG's Open Images evaluation (oi_evaluation.py eval_rel_results, ap_eval_rel.py)

OI_TOP = 100
OI_MIN_SCORE = 1e-5


def oi_list(prediction):
    """PySGG's OI list: the rows of the named list row_lists.oi (else ng_triplets, else triplets) by
    score descending, ties in written order, the first 100, those scoring above 1e-5 ->
    [(s, o, p, score)]."""
    if prediction is None or not prediction.get("instances"):
        return []
    if (prediction.get("row_lists") or {}).get("oi") is not None:
        rows, scores = prediction["row_lists"]["oi"]["triplets"], prediction["row_lists"]["oi"]["scores"]
    elif prediction.get("ng_triplets") is not None:
        rows, scores = prediction["ng_triplets"], prediction["ng_triplet_scores"]
    else:
        rows, scores = prediction["triplets"], prediction.get("triplet_scores")
    ranked = sorted(range(len(rows)), key=lambda i: -float(scores[i]))[:OI_TOP]
    return [(*rows[i], float(scores[i])) for i in ranked if float(scores[i]) > OI_MIN_SCORE]


def _oi_instances(image, prediction, task):
    """(categories, boxes) the rows index: the prediction's as stored, in every task (PySGG's
    adapt_results reads the predicted boxes and labels, also in PredCls)."""
    instances = prediction["instances"]
    return [i["category"] for i in instances], [i["bbox"] for i in instances]


def _union(a, b):
    return [min(a[0], b[0]), min(a[1], b[1]), max(a[2], b[2]), max(a[3], b[3])]


def _oi_pick(row, categories, boxes, image, phrase, threshold):
    """ap_eval's choice for one listed row: the GT row (index) of largest overlap among those of
    the row's predicate (0 where a category differs), if above the threshold; else None."""
    s, o, p, _ = row
    best, best_overlap = None, None
    for g, (gs, go, gp) in enumerate(image["relations"]):
        if gp != p:
            continue
        if categories[s] != image["categories"][gs] or categories[o] != image["categories"][go]:
            overlap = np.float32(0)
        elif phrase:
            overlap = sgb_box_iou(_union(image["boxes"][gs], image["boxes"][go]), _union(boxes[s], boxes[o]))
        else:
            overlap = min(sgb_box_iou(image["boxes"][gs], boxes[s]), sgb_box_iou(image["boxes"][go], boxes[o]))
        if best_overlap is None or overlap > best_overlap:
            best, best_overlap = g, overlap
    return best if best_overlap is not None and best_overlap > np.float32(threshold) else None


def _voc_ap(recall, precision):
    """get_ap: sentinels, the precision envelope from the right, sum over recall changes."""
    mrec, mpre = [0.0] + recall + [1.0], [0.0] + precision + [0.0]
    for i in range(len(mpre) - 1, 0, -1):
        mpre[i - 1] = max(mpre[i - 1], mpre[i])
    changes = [i for i in range(len(mrec) - 1) if mrec[i + 1] != mrec[i]]
    return float(np.sum(np.array([(mrec[i + 1] - mrec[i]) * mpre[i + 1] for i in changes])))


def reference_oi(dataset, predictions, ks=("20", "50", "100"), iou_threshold=0.5, task="sgdet"):
    """The oi protocol's own metrics (R@k, imgR@k, AP_rel / AP_phr per predicate, mAP, wmAP, score,
    score_wtd): every GT row of the evaluated images counts, duplicates included; rows ranked by
    np.argsort of the negated scores over all images, in image order (PySGG's rule for ties)."""
    names = dataset["predicate_classes"]
    by_id = {str(r["id"]): r for r in predictions}
    evaluated = [im for im in dataset["images"] if im["split"] == "test" and gt_relation_set(im)]
    hits = {k: 0 for k in [*ks, "50"]}
    per_image, n_gt, dets = {k: [] for k in ks}, 0, []
    npos = Counter(p for im in evaluated for _, _, p in im["relations"])
    for index, image in enumerate(evaluated):
        prediction = by_id.get(str(image["image_id"]))
        rows = oi_list(prediction)
        categories, boxes = _oi_instances(image, prediction, task) if rows else ([], [])
        n_rows, found = len(image["relations"]), []  # per row: the GT rows it hits (labels, both IoUs)
        for s, o, p, _ in rows:
            found.append({g for g, (gs, go, gp) in enumerate(image["relations"])
                          if gp == p and categories[s] == image["categories"][gs]
                          and categories[o] == image["categories"][go]
                          and sgb_box_iou(image["boxes"][gs], boxes[s]) >= np.float32(iou_threshold)
                          and sgb_box_iou(image["boxes"][go], boxes[o]) >= np.float32(iou_threshold)})
        for k in hits:
            matched = set().union(*found[:resolve_k(k, n_rows)])
            hits[k] += len(matched)
            if k in per_image:
                per_image[k].append(float(len(matched)) / float(n_rows + 1e-12))
        n_gt += n_rows
        dets += [(index, row, _oi_pick(row, categories, boxes, image, False, iou_threshold),
                  _oi_pick(row, categories, boxes, image, True, iou_threshold)) for row in rows]
    metrics = {f"R@{k}": float(hits[k]) / (float(n_gt) + 1e-12) for k in ks}
    metrics.update({f"imgR@{k}": float(np.mean(per_image[k])) for k in ks})
    all_npos = sum(npos.values())
    per_predicate = {"AP_rel": {}, "AP_phr": {}}
    for kind, column in (("rel", 2), ("phr", 3)):
        total, weighted = 0.0, 0.0
        for p, name in enumerate(names):
            mine = [d for d in dets if d[1][2] == p]
            order = np.argsort(-np.array([d[1][3] for d in mine], np.float64))
            visited, tp, fp = set(), [], []
            for i in order:
                pick = mine[i][column]
                hit = pick is not None and (mine[i][0], pick) not in visited
                visited |= {(mine[i][0], pick)} if hit else set()
                tp.append(float(hit) + (tp[-1] if tp else 0.0))
                fp.append(float(not hit) + (fp[-1] if fp else 0.0))
            recall = [t / (float(npos[p]) + 1e-12) for t in tp]
            precision = [t / max(t + f, np.finfo(np.float64).eps) for t, f in zip(tp, fp)]
            ap = _voc_ap(recall, precision)
            if npos[p]:
                per_predicate[f"AP_{kind}"][name] = ap
            weighted += ap * float(npos[p]) / float(all_npos)
            total += ap
        metrics[f"mAP_{kind}"], metrics[f"wmAP_{kind}"] = total / len(names), weighted
    r50 = float(hits["50"]) / (float(n_gt) + 1e-12)
    metrics["score"] = 0.4 * metrics["mAP_rel"] + 0.2 * r50 + 0.4 * metrics["mAP_phr"]
    metrics["score_wtd"] = 0.4 * metrics["wmAP_rel"] + 0.2 * r50 + 0.4 * metrics["wmAP_phr"]
    return {"metrics": metrics, "per_predicate": per_predicate}
