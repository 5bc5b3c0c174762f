"""A plain-Python reference of STTran's Action Genome evaluation (lib/evaluation_recall.py of
yrcong/STTran 6b559e13; TEMPURA's and DSG-DETR's mean recalls), on sgeval-format files: the GT
JSON of ``sgeval convert ag-gt`` and the predictions of ``sgeval convert ag`` (their ``row_lists``).
It never imports sgeval; it is what sgeval's Action Genome protocol is checked against.

Per evaluated frame (GT ``test_image_ids``, every one counted; a frame without a record or with an
empty list has no hits) and per list L in with / semi / no (the record's ``row_lists[L]``, in rank
order) and K in 10, 20, 50, 100:

  hits(frame, L, K) = the GT relation rows (file rows, repeats each counted) that some of the first K
                      rows of L matches: same subject category, object category and predicate, and
                      +1 IoU >= 0.5 for the subject boxes and for the object boxes (many-to-many:
                      a row may match several GT rows, a GT row many rows)
  R@K  (with / semi / no)   the mean over frames of hits / GT rows (STTran's np.mean of per-frame recalls)
  mR@K TEMPURA              sum over the 26 predicates of (hits of p over all frames) / (GT rows of p over
                            all frames + 1e-10), divided by 26 (a predicate without GT rows adds 0)
  mR@K DSG-DETR             sum over the 26 predicates of the mean, over the frames holding GT rows of p,
                            of that frame's hits of p / its GT rows of p (0 without such frames), over 26

Ratios are exact fractions; the IoU is computed in float64 in the order of STTran's bbox.pyx (the
boundary cases of the data are exact in float64); the 1e-10 of TEMPURA is applied in float64.
"""

import json
import zipfile
from fractions import Fraction

KS = (10, 20, 50, 100)
LISTS = ("with", "semi", "no")
N_PREDICATES = 26


def iou_plus_one(a, b):
    """+1-pixel IoU of two xyxy boxes, as bbox.pyx's bbox_overlaps_c (boxes = a, query_boxes = b)."""
    box_area = (b[2] - b[0] + 1) * (b[3] - b[1] + 1)
    iw = min(a[2], b[2]) - max(a[0], b[0]) + 1
    if iw <= 0:
        return 0.0
    ih = min(a[3], b[3]) - max(a[1], b[1]) + 1
    if ih <= 0:
        return 0.0
    ua = float((a[2] - a[0] + 1) * (a[3] - a[1] + 1) + box_area - iw * ih)
    return iw * ih / ua


def read_gt(path):
    """(frames [(image_id, categories, boxes, relations)] of test_image_ids in file order, predicate count)."""
    with open(path, encoding="utf-8") as handle:
        data = json.load(handle)
    test_ids = [str(i) for i in data["test_image_ids"]]
    entries = {str(e["image_id"]): e for e in data["data"]}
    frames = []
    for image_id in test_ids:
        entry = entries[image_id]
        categories = [s["category_id"] for s in entry["segments_info"]]
        boxes = [a["bbox"] for a in entry["annotations"]]
        frames.append((image_id, categories, boxes, [tuple(r) for r in entry["relations"]]))
    return frames, len(data["predicate_classes"])


def read_predictions(path):
    """{image id: record} of a prediction zip's triplets.json (or a .json file)."""
    if str(path).endswith(".zip"):
        with zipfile.ZipFile(path) as archive:
            data = json.loads(archive.read("triplets.json"))
    else:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    return {str(record["id"]): record for record in data["images"]}


def frame_hits(gt_frame, record, list_name, k):
    """The set of GT row indices the first k rows of the record's list match."""
    _, categories, boxes, relations = gt_frame
    if record is None:
        return set()
    rows = record["row_lists"][list_name]["triplets"][:k]
    instances = record["instances"]
    hits = set()
    for g, (gs, go, gp) in enumerate(relations):
        for s, o, p in rows:
            if (p == gp and instances[s]["category"] == categories[gs] and instances[o]["category"] == categories[go]
                    and iou_plus_one(boxes[gs], instances[s]["bbox"]) >= 0.5
                    and iou_plus_one(boxes[go], instances[o]["bbox"]) >= 0.5):
                hits.add(g)
                break
    return hits


def evaluate(gt_path, pred_path):
    """{list: {"R": {K: float}, "per_frame": {K: [Fraction]}, "mR_tempura": {K: float},
    "mR_dsgdetr": {K: float}}} and the evaluated frame ids in order."""
    frames, n_predicates = read_gt(gt_path)
    assert n_predicates == N_PREDICATES
    records = read_predictions(pred_path)
    out = {}
    for name in LISTS:
        entry = {"R": {}, "per_frame": {}, "mR_tempura": {}, "mR_dsgdetr": {}}
        for k in KS:
            per_frame, pooled_hits, pooled_counts = [], [0] * N_PREDICATES, [0] * N_PREDICATES
            frame_means = [[] for _ in range(N_PREDICATES)]
            for frame in frames:
                relations = frame[3]
                hits = frame_hits(frame, records.get(frame[0]), name, k)
                per_frame.append(Fraction(len(hits), len(relations)))
                counts, hit_counts = [0] * N_PREDICATES, [0] * N_PREDICATES
                for g, (_, _, p) in enumerate(relations):
                    counts[p] += 1
                    hit_counts[p] += g in hits
                for p in range(N_PREDICATES):
                    pooled_counts[p] += counts[p]
                    pooled_hits[p] += hit_counts[p]
                    if counts[p]:
                        frame_means[p].append(Fraction(hit_counts[p], counts[p]))
            entry["per_frame"][k] = per_frame
            entry["R"][k] = float(sum(per_frame) / len(per_frame))
            entry["mR_tempura"][k] = sum(h / (c + 1e-10) for h, c in zip(pooled_hits, pooled_counts)) / N_PREDICATES
            entry["mR_dsgdetr"][k] = float(sum((sum(v) / len(v) if v else Fraction(0)) for v in frame_means)
                                           / N_PREDICATES)
        out[name] = entry
    return out, [frame[0] for frame in frames]
