"""Write a synthetic PSG GT and raw OpenPSG results that exercise every rule of OpenPSG's evaluation.

    tools/openpsg_check/build/venv/bin/python -m tools.openpsg_check.make_raw --seed S --out DIR
        [--kind one-stage|two-stage] [--images 60]   (from the repository root)

DIR/psg.json and DIR/panoptic/ (tools/synth.py of the sgeval repo: 80 things, 53 stuff, 56
predicates), DIR/raw/0.npz ... N-1.npz (one Result per evaluated GT image, in psg.json order; the
layouts of sgeval's tests/convert/test_convert.py, so sgeval's converters read them too) and
DIR/raw_summary.json (how many of each special case were written; every case of CASES must be
there, or it exits with an error). The files' bytes depend only on the arguments (fixed zip times).

one-stage (PSGTR, complete layout): T rows [[i, T + i]], 2T instances (subjects, then objects),
  refine_bboxes aligned with labels (float32 [x1, y1, x2, y2, score]), rows in the model's order
  (its top-k score); repeated queries (a second row with the same rel_dists, masks, boxes and labels
  at other instance indices, rel_labels its second-best predicate), self-pairs (subject and object
  both copies of one GT segment), images with zero rows.
two-stage (IMP): non-overlapping detected masks, all ordered pairs of them sorted by triplet score
  (triplet_scores written); one instance: the [[0, 0]] placeholder row; no detection: an npz
  without refine_bboxes and rel_pair_idxes (OpenPSG's Result has refine_bboxes None).
Both: masks that are shifted / eroded / halved copies of GT segments (IoU near or exactly 0.5);
  masks and boxes covering two same-category GT segments (IoU >= 0.5 with both; the GT gets a
  relation from each of them to the same object, so one prediction matches two GT triplets);
  non-integer float32 boxes whose IoU with a GT box is within 1e-7 of 0.5, most of them on the
  other side of 0.5 in mmdet's float32 bbox_overlaps than in exact arithmetic; GT with exact
  duplicate relations, images without relations and a train split. In box mode OpenPSG ranks the
  no-graph-constraint candidates with an unstable sort: an image is redrawn until no tie of
  different candidates straddles a cut (20, 50, 100), so those numbers are well defined.
"""

import argparse
import collections
import io
import json
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import torch

from tools import synth
from tools.openpsg_check import openpsg_env
from tools.oracle_common import write_zip

N_THINGS, N_STUFF, N_PREDICATES = 80, 53, 56
KS = (20, 50, 100)
bbox_overlaps = openpsg_env.load().bbox_overlaps  # mmdet 2.20's, as OpenPSG calls it
COUNT = collections.Counter()
_GT_CASES = ("GT train images", "GT test images without relations", "GT test images with exact duplicate relations",
             "GT same-category pairs with relations to one object: equal areas",
             *(f"GT same-category pairs with relations to one object: {overlap} boxes, a box with IoU >= 0.5 with both"
               for overlap in ("non-overlapping", "overlapping")),
             "boundary boxes, float32 and exact IoU on either side of 0.5",
             "half masks (IoU ceil or floor of half the area)",
             "instances covering two same-category GT segments")
CASES = {  # the COUNT keys that a data set of each kind must have (raw_summary.json)
    "one-stage": _GT_CASES + ("images with zero rows",) + tuple(f"kept in the top 100: {rows}" for rows in (
        "repeated queries (second row)", "rows decided by a boundary box (box mode)", "rows for a GT relation",
        "rows whose subject covers two GT subjects", "self-pair rows (one GT segment)", "spurious rows")),
    "two-stage": _GT_CASES + ("images without detections (refine_bboxes None)",
                              "single-instance images ([[0, 0]] placeholder row)"),
}


# ----------------------------------------------------------------------------- IoU as OpenPSG computes it

def iou32(a, b):
    return float(bbox_overlaps(torch.Tensor(np.asarray(a, np.float32)[None]),
                               torch.Tensor(np.asarray(b, np.float32)[None]))[0, 0])


def iou_exact(a, b):
    a, b = ([Fraction(float(v)) for v in np.asarray(box, np.float32)] for box in (a, b))
    w = max(min(a[2], b[2]) - max(a[0], b[0]), 0)
    h = max(min(a[3], b[3]) - max(a[1], b[1]), 0)
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - w * h
    return w * h / union


def boundary_box(rng, g):
    """A non-integer float32 box whose exact IoU with box g is within 1e-7 of 0.5, preferably one
    that mmdet's float32 IoU puts on the other side of 0.5."""
    g, half, near = np.asarray(g, np.float64), Fraction(1, 2), Fraction(1, 10 ** 7)
    best = None
    for _ in range(400):
        x1, y1, y2 = (float(np.float32(v + rng.uniform(-0.5, 0.5))) for v in (g[0], g[1], g[3]))
        inter = (g[2] - max(x1, g[0])) * (min(y2, g[3]) - max(y1, g[1]))
        x2 = x1 + (3 * inter - (g[2] - g[0]) * (g[3] - g[1])) / (y2 - y1)  # IoU 0.5 on the branch x2 >= g[2]
        if inter <= 0 or x2 < g[2] + 0.1:
            continue
        up = down = np.float32(x2)
        for _ in range(12):  # the float32 values of x2 around the solution
            for x2 in (up, down):
                box = np.array([x1, y1, x2, y2], np.float32)
                exact = iou_exact(box, g)
                if abs(exact - half) > near:
                    continue
                if (iou32(box, g) >= 0.5) != (exact >= half):
                    COUNT["boundary boxes, float32 and exact IoU on either side of 0.5"] += 1
                    return box
                best = box
            up, down = np.nextafter(up, np.float32(np.inf)), np.nextafter(down, np.float32(-np.inf))
    if best is None:
        raise RuntimeError(f"no box with IoU within 1e-7 of 0.5 found for {g}")
    COUNT["boundary boxes, IoU within 1e-7 of 0.5, float32 on the same side"] += 1
    return best


def double_box(b1, b2):
    """A box with float32 IoU >= 0.5 with both b1 and b2, else None."""
    b1, b2 = np.asarray(b1, np.float32), np.asarray(b2, np.float32)
    enclosing = np.r_[np.minimum(b1[:2], b2[:2]), np.maximum(b1[2:], b2[2:])]
    for box in (enclosing, (b1 + b2) / 2, np.r_[np.maximum(b1[:2], b2[:2]), np.minimum(b1[2:], b2[2:])]):
        if box[2] > box[0] and box[3] > box[1] and min(iou32(box, b1), iou32(box, b2)) >= 0.5:
            return box.astype(np.float32)
    return None


# ----------------------------------------------------------------------------- ground truth

def same_category_pairs(im):
    cats = im["categories"]
    return [(a, b) for a in range(len(cats)) for b in range(a + 1, len(cats)) if cats[a] == cats[b]]


def make_gt(rng, n_images, height, width):
    """synth's dataset; where two same-category segments have equal areas or a box matching both,
    a relation from each of them to one other segment with one predicate is added."""
    dataset = synth.make_dataset(rng, n_images, height, width, N_THINGS, N_STUFF, N_PREDICATES, test_fraction=0.8,
                                 max_segments=8, max_relations=10, p_twins=0.5)
    for im in dataset["images"]:
        im["doubles"] = {}
        for a, b in same_category_pairs(im):
            box = double_box(im["boxes"][a], im["boxes"][b])
            twins = np.count_nonzero(im["masks"][a]) == np.count_nonzero(im["masks"][b])
            others = [g for g in range(len(im["categories"])) if g not in (a, b)]
            if (box is not None or twins) and others and im["relations"]:
                o, p = int(rng.choice(others)), int(rng.integers(N_PREDICATES))
                im["relations"] += [[a, o, p], [b, o, p]]
                im["doubles"][a, b] = box, o, p
                if im["split"] == "test":
                    overlap = "overlapping" if iou32(im["boxes"][a], im["boxes"][b]) > 0 else "non-overlapping"
                    COUNT["GT same-category pairs with relations to one object: equal areas"] += int(twins)
                    COUNT[f"GT same-category pairs with relations to one object: {overlap} boxes, a box with "
                          f"IoU >= 0.5 with both"] += int(box is not None)
        count_gt_image(im)
    return dataset


def count_gt_image(im):
    if im["split"] != "test":
        COUNT["GT train images"] += 1
    elif not im["relations"]:
        COUNT["GT test images without relations"] += 1
    elif len({tuple(r) for r in im["relations"]}) < len(im["relations"]):
        COUNT["GT test images with exact duplicate relations"] += 1


# ----------------------------------------------------------------------------- predicted instances

def noisy_mask(rng, mask):
    out = synth.shifted(mask, int(rng.integers(-1, 2)), int(rng.integers(-1, 2)))
    r = rng.random()
    out = synth.eroded(out) if r < 0.15 else synth.dilated(out) if r < 0.3 else out
    return out if out.any() else mask.copy()


def half_mask(rng, mask):
    """The first ceil or floor of half the pixels (raster order): IoU exactly 0.5 or just above/below."""
    keep = np.flatnonzero(mask.ravel())
    n = (len(keep) + int(rng.integers(2))) // 2 or 1
    out = np.zeros(mask.size, bool)
    out[keep[:n]] = True
    COUNT["half masks (IoU ceil or floor of half the area)"] += 1
    return out.reshape(mask.shape)


def jittered_box(rng, mask):
    box = np.asarray(synth.tight_box(mask), np.float64) + rng.uniform(-0.3, 0.3, 4)
    return np.float32(box)


def instance(rng, im, g, style="noisy"):
    """(mask, box, category, score) predicted for GT segment g."""
    mask = im["masks"][g]
    box = np.asarray(im["boxes"][g], np.float32)
    if style == "noisy":
        mask = noisy_mask(rng, mask) if rng.random() < 0.85 else half_mask(rng, mask)
        box = jittered_box(rng, mask)
    elif style == "boundary":
        box = boundary_box(rng, box)
    return mask, box, im["categories"][g], np.float32(rng.uniform(0.3, 1.0))


def double_instance(rng, im, a, b):
    """Covers GT segments a and b (same category): the union mask, a box matching both if any."""
    mask = im["masks"][a] | im["masks"][b]
    box = im["doubles"][a, b][0]
    COUNT["instances covering two same-category GT segments"] += 1
    return mask, (jittered_box(rng, mask) if box is None else box), im["categories"][a], np.float32(0.9)


def junk_instance(rng, im):
    h, w = im["masks"][0].shape
    mask = synth.random_shape(rng, h, w, 0.05, 0.3)
    return mask, jittered_box(rng, mask), int(rng.integers(N_THINGS + N_STUFF)), np.float32(rng.uniform(0.05, 0.6))


def rel_dist(rng, predicate, boost):
    row = rng.random(N_PREDICATES + 1) * 0.5
    row[predicate + 1] += boost
    return (row / row.sum()).astype(np.float32)


# ----------------------------------------------------------------------------- raw results

def one_stage(rng, im):
    if rng.random() < 0.1:
        COUNT["images with zero rows"] += 1
        h, w = im["masks"][0].shape
        return dict(masks=np.zeros((0, h, w), bool), labels=np.zeros(0, np.int64),
                    refine_bboxes=np.zeros((0, 5), np.float32), rel_pair_idxes=np.zeros((0, 2), np.int64),
                    rel_dists=np.zeros((0, N_PREDICATES + 1), np.float32), rel_labels=np.zeros(0, np.int64))
    n = len(im["categories"])
    rows, done = [], set()  # rows: (subject instance, object instance, rel_dists row)
    for (a, b), (_, o, p) in im["doubles"].items():
        if rng.random() < 0.8:  # one row for the GT relations (a, o, p) and (b, o, p)
            rows.append((double_instance(rng, im, a, b), instance(rng, im, o, "exact"), rel_dist(rng, p, 2.0),
                         "rows whose subject covers two GT subjects"))
            done |= {(a, o, p), (b, o, p)}
    for s, o, p in im["relations"]:
        r = rng.random()
        if (s, o, p) in done:
            continue
        if r < 0.15:  # decided by a box IoU within 1e-7 of 0.5 (box mode); exact masks
            rows.append((instance(rng, im, s, "boundary"), instance(rng, im, o, "exact"), rel_dist(rng, p, 2.0),
                         "rows decided by a boundary box (box mode)"))
        elif r < 0.6:
            predicate = p if rng.random() < 0.75 else int(rng.integers(N_PREDICATES))
            rows.append((instance(rng, im, s), instance(rng, im, o), rel_dist(rng, predicate, rng.uniform(0.3, 2)),
                         "rows for a GT relation"))
    for _ in range(int(rng.integers(10, 90))):
        s, o = (instance(rng, im, int(g)) if rng.random() < 0.7 else junk_instance(rng, im)
                for g in rng.integers(n, size=2))
        rows.append((s, o, rel_dist(rng, int(rng.integers(N_PREDICATES)), rng.uniform(0.2, 1.5)), "spurious rows"))
    for _ in range(int(rng.integers(0, 3))):
        g = int(rng.integers(n))
        rows.append((instance(rng, im, g), instance(rng, im, g), rel_dist(rng, int(rng.integers(N_PREDICATES)), 1.0),
                     "self-pair rows (one GT segment)"))
    # the model's order: top-k over (query, predicate) scores; a query picked twice gives a second
    # row with the same rel_dists, instances and boxes, ranked by its second-best predicate
    ranked = [(float(d[1:].max()), int(d[1:].argmax()) + 1, row) for row in rows for d in [row[2]]]
    for row in rows:
        if rng.random() < 0.12:
            second = int(np.argsort(row[2][1:])[-2]) + 1
            ranked.append((float(row[2][second]), second, row + ("repeated queries (second row)",)))
    ranked.sort(key=lambda t: -t[0])
    ranked = ranked[:100]
    COUNT.update(f"kept in the top 100: {row[-1]}" for _, _, row in ranked)
    t = len(ranked)
    instances = [row[0] for _, _, row in ranked] + [row[1] for _, _, row in ranked]
    return dict(masks=np.stack([i[0] for i in instances]), labels=np.array([i[2] + 1 for i in instances], np.int64),
                refine_bboxes=np.array([list(i[1]) + [i[3]] for i in instances], np.float32),
                rel_pair_idxes=np.column_stack([np.arange(t), t + np.arange(t)]).astype(np.int64),
                rel_dists=np.stack([row[2] for _, _, row in ranked]),
                rel_labels=np.array([label for _, label, _ in ranked], np.int64))


def two_stage(rng, im):
    h, w = im["masks"][0].shape
    if rng.random() < 0.08:
        COUNT["images without detections (refine_bboxes None)"] += 1
        return dict(masks=np.zeros((0, h, w), bool), labels=np.zeros(0, np.int64))
    n = len(im["categories"])
    found = [g for g in range(n) if rng.random() < 0.85] or [0]
    if rng.random() < 0.08:
        found = found[:1]
    candidates = []  # (instance, GT source, keep its box); painted in order onto one label map, later wins
    for a, b in im["doubles"]:
        if a in found and b in found and rng.random() < 0.5:
            candidates.append((double_instance(rng, im, a, b), a, True))
            found = [g for g in found if g not in (a, b)]
    for g in found:
        style = "boundary" if rng.random() < 0.1 else "noisy"
        candidates.append((instance(rng, im, g, style), g, style == "boundary"))
    if len(found) > 1:
        candidates += [(junk_instance(rng, im), -1, False) for _ in range(int(rng.integers(0, 3)))]
    label_map = np.full((h, w), -1)
    for i, ((mask, _, _, _), _, _) in enumerate(candidates):
        label_map[mask] = i
    kept = [i for i in range(len(candidates)) if (label_map == i).any()]
    masks = np.stack([label_map == i for i in kept])
    inst, source, keep_box = ([candidates[i][j] for i in kept] for j in range(3))
    # boxes: the painted masks' (jittered), except the boundary and double boxes made for GT boxes
    boxes = np.array([box if keep else jittered_box(rng, m)
                      for (_, box, _, _), keep, m in zip(inst, keep_box, masks)], np.float32)
    scores = np.array([i[3] for i in inst], np.float32)
    labels = np.array([i[2] + 1 for i in inst], np.int64)
    truth = collections.defaultdict(list)
    for s, o, p in im["relations"]:
        truth[s, o].append(p)
    pairs = [(s, o) for s in range(len(kept)) for o in range(len(kept)) if s != o] or [(0, 0)]
    if pairs == [(0, 0)]:
        COUNT["single-instance images ([[0, 0]] placeholder row)"] += 1
    dists = []
    for s, o in pairs:
        true = truth.get((source[s], source[o]))
        dists.append(rel_dist(rng, int(rng.choice(true)), rng.uniform(0.3, 2)) if true and rng.random() < 0.75
                     else rel_dist(rng, int(rng.integers(N_PREDICATES)), rng.uniform(0, 1.5)))
    pairs, dists = np.array(pairs, np.int64), np.stack(dists)
    triplet = dists[:, 1:].max(axis=1) * scores[pairs[:, 0]] * scores[pairs[:, 1]]
    order = np.argsort(-triplet, kind="stable")
    return dict(masks=masks, labels=labels, refine_labels=labels, refine_bboxes=np.column_stack([boxes, scores]),
                rel_pair_idxes=pairs[order], rel_dists=dists[order], rel_labels=dists[order, 1:].argmax(axis=1) + 1,
                triplet_scores=triplet[order])


def cut_ties(raw):
    """True when, in box mode, a tie between different no-graph-constraint candidates straddles a
    cut: OpenPSG orders them with np.argsort (unstable), so the recall there is not defined."""
    pairs = raw.get("rel_pair_idxes")
    if raw.get("refine_bboxes") is None or len(pairs) == 0:
        return False
    obj = raw["refine_bboxes"][:, -1]
    scores = (obj[pairs].prod(1)[:, None] * raw["rel_dists"][:, 1:]).ravel()  # float32, as OpenPSG
    order = np.argsort(-scores, kind="stable")
    boxes, labels = raw["refine_bboxes"][:, :4], raw["labels"]

    def key(flat):
        row, predicate = divmod(int(flat), N_PREDICATES)
        s, o = pairs[row]
        return labels[s], labels[o], predicate, boxes[s].tobytes(), boxes[o].tobytes()

    for k in KS:
        if k < len(scores) and scores[order[k - 1]] == scores[order[k]]:
            tied = np.flatnonzero(scores == scores[order[k]])
            if len({key(i) for i in tied}) > 1:
                return True
    return False


# ----------------------------------------------------------------------------- files


def write_npz(path, arrays):
    """np.savez_compressed, without the current time that numpy writes into the zip."""
    members = {}
    for key, array in arrays.items():
        buffer = io.BytesIO()
        np.lib.format.write_array(buffer, np.asanyarray(array), allow_pickle=False)
        members[f"{key}.npy"] = buffer.getvalue()
    write_zip(path, members)


def generate(seed, kind, out, images=60, height=48, width=64):
    """Write the data set (module docstring) to out; returns the counts of raw_summary.json."""
    COUNT.clear()
    rng = np.random.default_rng([seed, int(kind == "two-stage")])
    out = Path(out)
    dataset = make_gt(rng, images, height, width)
    synth.write_gt(dataset, out)
    evaluated = [im for im in dataset["images"] if im["split"] == "test" and im["relations"]]
    (out / "raw").mkdir(exist_ok=True)
    for i, im in enumerate(evaluated):
        while True:
            saved = COUNT.copy()
            raw = (one_stage if kind == "one-stage" else two_stage)(rng, im)
            if not cut_ties(raw):
                break
            COUNT.clear()
            COUNT.update(saved)  # the counts of the redrawn image only
            COUNT["images redrawn for a tie at a no-graph-constraint cut"] += 1
        write_npz(out / "raw" / f"{i}.npz", raw)
    COUNT["evaluated images"] = len(evaluated)
    counts = dict(sorted(COUNT.items()))
    (out / "raw_summary.json").write_text(json.dumps(counts, indent=1) + "\n")
    missing = [case for case in CASES[kind] if not counts.get(case)]
    if missing:
        sys.exit(f"{out}: {images} images of seed {seed} miss these cases: {'; '.join(missing)}")
    return counts


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--kind", choices=tuple(CASES), default="one-stage")
    parser.add_argument("--images", type=int, default=60)
    parser.add_argument("--height", type=int, default=48)
    parser.add_argument("--width", type=int, default=64)
    args = parser.parse_args()
    counts = generate(args.seed, args.kind, args.out, args.images, args.height, args.width)
    print(f"{args.out}: " + "; ".join(f"{k}: {v}" for k, v in counts.items()))


if __name__ == "__main__":
    main()
