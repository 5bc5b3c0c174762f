"""Deterministic synthetic PSG-like data for the sgeval demo and test suite.

Everything is drawn from the numpy ``Generator`` passed in, so a fixed seed gives identical data.

In-memory **dataset** (``make_dataset``)::

    {"thing_classes": [str], "stuff_classes": [str], "predicate_classes": [str],
     "images": [{"image_id": str, "height": int, "width": int, "split": "test" | "train",
                 "categories": [int],        # per GT segment, index into thing_classes + stuff_classes
                 "masks": bool (G, H, W),     # non-overlapping, every segment >= 1 pixel, some void
                 "boxes": [[x1, y1, x2, y2]], # tight box (xmin, ymin, xmax + 1, ymax + 1), floats
                 "relations": [[s, o, p]]}]}  # may be empty; duplicate rows allowed; s != o

**Prediction image** (``simulate_predictions``; the input of ``sgeval.write_predictions``)::

    {"id": str, "instances": [{"category": int, "bbox": [x1, y1, x2, y2], "score": float}],
     "triplets": [[s, o, p]], "ng_triplets": [[s, o, p]],   # ng_triplets sometimes omitted
     "masks": bool (P, H, W)}                               # omitted in box mode

``write_gt`` stores a dataset as an OpenPSG-style ``psg.json`` plus panoptic RGB PNGs.
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import numpy as np
from PIL import Image

# ----------------------------------------------------------------------------- geometry


def tight_box(mask):
    """Tight box of a bool (H, W) mask as floats (xmin, ymin, xmax + 1, ymax + 1); zeros if empty."""
    rows = np.flatnonzero(mask.any(axis=1))
    cols = np.flatnonzero(mask.any(axis=0))
    if rows.size == 0:
        return [0.0, 0.0, 0.0, 0.0]
    return [float(cols[0]), float(rows[0]), float(cols[-1] + 1), float(rows[-1] + 1)]


def mask_iou(a, b):
    union = np.count_nonzero(a | b)
    return np.count_nonzero(a & b) / union if union else 0.0


def box_iou(a, b):
    inter_w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    inter_h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = inter_w * inter_h
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def shifted(mask, dy, dx):
    """Shift a (H, W) mask by (dy, dx) pixels, filling with False (no wrap-around)."""
    height, width = mask.shape
    out = np.zeros_like(mask)
    out[max(dy, 0):height + min(dy, 0), max(dx, 0):width + min(dx, 0)] = \
        mask[max(-dy, 0):height + min(-dy, 0), max(-dx, 0):width + min(-dx, 0)]
    return out


def dilated(mask):
    return mask | shifted(mask, 1, 0) | shifted(mask, -1, 0) | shifted(mask, 0, 1) | shifted(mask, 0, -1)


def eroded(mask):
    return mask & shifted(mask, 1, 0) & shifted(mask, -1, 0) & shifted(mask, 0, 1) & shifted(mask, 0, -1)


def random_shape(rng, height, width, min_frac, max_frac, ellipse_ok=True):
    """A random filled rectangle or ellipse as a bool (H, W) mask (never empty)."""
    h = int(rng.integers(max(1, int(height * min_frac)), max(2, int(height * max_frac)) + 1))
    w = int(rng.integers(max(1, int(width * min_frac)), max(2, int(width * max_frac)) + 1))
    h, w = min(h, height), min(w, width)
    y0, x0 = int(rng.integers(0, height - h + 1)), int(rng.integers(0, width - w + 1))
    shape = np.zeros((height, width), bool)
    if ellipse_ok and rng.random() < 0.5:
        yy, xx = np.ogrid[:h, :w]
        inside = ((yy + 0.5 - h / 2) / (h / 2)) ** 2 + ((xx + 0.5 - w / 2) / (w / 2)) ** 2 <= 1
        shape[y0:y0 + h, x0:x0 + w] = inside
    else:
        shape[y0:y0 + h, x0:x0 + w] = True
    return shape


# ----------------------------------------------------------------------------- ground truth


def _make_segments(rng, height, width, n_things, n_stuff, max_segments, p_twins, thing_p=None):
    """Paint stuff regions, then things, then maybe two same-category twin rectangles of equal area
    side by side, over a label map (later paint wins). Returns (categories, masks (G, H, W))."""
    while True:
        label = np.full((height, width), -1, np.int32)
        categories = []
        n_segments = int(rng.integers(2, max(2, max_segments) + 1))
        n_stuff_segments = int(rng.integers(0, 3)) if n_stuff else 0  # large regions under things
        thing_pool = rng.choice(n_things, size=min(3, n_things), replace=False, p=thing_p)  # forces collisions
        for i in range(n_segments):
            if i < n_stuff_segments:
                category = n_things + int(rng.integers(n_stuff))
                shape = random_shape(rng, height, width, 0.4, 0.9, ellipse_ok=False)
            else:
                category = int(rng.choice(thing_pool))
                shape = random_shape(rng, height, width, 0.1, 0.4)
            label[shape] = len(categories)
            categories.append(category)
        if rng.random() < p_twins and width >= 4 and height >= 2:
            h = int(rng.integers(2, max(3, height // 4)))
            w = int(rng.integers(2, max(3, width // 8)))
            y0, x0 = int(rng.integers(0, height - h + 1)), int(rng.integers(0, width - 2 * w + 1))
            category = int(rng.choice(thing_pool))
            for j in range(2):
                label[y0:y0 + h, x0 + j * w:x0 + (j + 1) * w] = len(categories)
                categories.append(category)
        kept = [g for g in range(len(categories)) if np.any(label == g)]  # drop painted-over segments
        if len(kept) >= 2:
            return [categories[g] for g in kept], np.stack([label == g for g in kept])


def _make_relations(rng, n_segments, predicate_p, max_relations):
    """Random [s, o, p] rows with s != o; some exact duplicates and several predicates per pair."""
    n_predicates = len(predicate_p)
    relations = []
    for _ in range(int(rng.integers(1, max(1, max_relations) + 1))):
        r = rng.random()
        if relations and r < 0.15:
            relations.append(list(relations[int(rng.integers(len(relations)))]))
        elif relations and r < 0.35:
            s, o, _ = relations[int(rng.integers(len(relations)))]
            relations.append([s, o, int(rng.choice(n_predicates, p=predicate_p))])
        else:
            s, o = (int(v) for v in rng.choice(n_segments, size=2, replace=False))
            relations.append([s, o, int(rng.choice(n_predicates, p=predicate_p))])
    return relations


def make_dataset(rng, n_images, height, width, n_things, n_stuff, n_predicates, test_fraction=0.7,
                 max_segments=8, max_relations=10, class_names=None, predicate_weights=None,
                 p_no_relations=0.1, p_twins=0.3, thing_weights=None):
    """Build an in-memory dataset (format in the module docstring).

    class_names: None (generic names) or (thing_names, stuff_names, predicate_names).
    predicate_weights: None (uniform) or n_predicates non-negative weights; zero weight = never used.
    thing_weights: None (uniform) or n_things weights for drawing an image's thing categories.
    Image ids are "1000", "1001", ...; round(test_fraction * n_images) images are "test" (at least
    one of each split when n_images >= 2). Some images have no relations; when a split has >= 2
    images, at least one of them has none. With probability p_twins an image gets two same-category
    rectangles of equal area side by side (a prediction covering both ties at IoU 0.5), on top of
    its 2..max_segments painted segments (segments painted over entirely are dropped).
    """
    if class_names is None:
        class_names = ([f"thing{i}" for i in range(n_things)], [f"stuff{i}" for i in range(n_stuff)],
                       [f"pred{i}" for i in range(n_predicates)])
    things, stuff, predicates = (list(names) for names in class_names)
    if (len(things), len(stuff), len(predicates)) != (n_things, n_stuff, n_predicates):
        raise ValueError("class_names lengths differ from n_things, n_stuff, n_predicates")
    weights = np.ones(n_predicates) if predicate_weights is None else np.asarray(predicate_weights, float)
    predicate_p = weights / weights.sum()

    n_test = int(round(test_fraction * n_images))
    if n_images >= 2 and 0 < test_fraction < 1:
        n_test = min(max(n_test, 1), n_images - 1)
    is_test = np.zeros(n_images, bool)
    is_test[rng.permutation(n_images)[:n_test]] = True
    no_relations = rng.random(n_images) < p_no_relations
    for split in (is_test, ~is_test):
        members = np.flatnonzero(split)
        if members.size >= 2 and not no_relations[members].any():
            no_relations[members[int(rng.integers(members.size))]] = True

    images = []
    for i in range(n_images):
        thing_p = None if thing_weights is None else np.asarray(thing_weights, float) / np.sum(thing_weights)
        categories, masks = _make_segments(rng, height, width, n_things, n_stuff, max_segments, p_twins, thing_p)
        relations = [] if no_relations[i] else _make_relations(rng, len(categories), predicate_p, max_relations)
        images.append({"image_id": str(1000 + i), "height": height, "width": width,
                       "split": "test" if is_test[i] else "train", "categories": categories,
                       "masks": masks, "boxes": [tight_box(m) for m in masks], "relations": relations})
    return {"thing_classes": things, "stuff_classes": stuff, "predicate_classes": predicates,
            "images": images}


def segment_ids(image_id, n_segments):
    """Distinct panoptic segment ids in [1, 2**24 - 1], fixed per image id (seeded by its CRC32)."""
    rng = np.random.default_rng(zlib.crc32(str(image_id).encode()))
    return [int(v) + 1 for v in rng.choice(2 ** 24 - 1, size=n_segments, replace=False)]


def write_gt(dataset, root):
    """Write root/psg.json and root/panoptic/<image_id>.png (RGB, id = R + 256 G + 65536 B, 0 = void).

    Returns the path of psg.json. Segment ids come from ``segment_ids``.
    """
    root = Path(root)
    (root / "panoptic").mkdir(parents=True, exist_ok=True)
    n_things = len(dataset["thing_classes"])
    data = []
    for im in dataset["images"]:
        ids = segment_ids(im["image_id"], len(im["categories"]))
        id_map = np.zeros((im["height"], im["width"]), np.uint32)
        for seg_id, mask in zip(ids, im["masks"]):
            id_map[mask] = seg_id
        rgb = np.stack([id_map & 255, (id_map >> 8) & 255, id_map >> 16], axis=-1).astype(np.uint8)
        png_name = f"{im['image_id']}.png"
        Image.fromarray(rgb).save(root / "panoptic" / png_name)
        data.append({
            "image_id": im["image_id"], "height": im["height"], "width": im["width"],
            "file_name": f"{im['image_id']}.jpg", "pan_seg_file_name": png_name,
            "segments_info": [{"id": seg_id, "category_id": int(c), "iscrowd": 0,
                               "isthing": int(c < n_things), "area": int(np.count_nonzero(m))}
                              for seg_id, c, m in zip(ids, im["categories"], im["masks"])],
            "annotations": [{"bbox": list(box), "bbox_mode": 0, "category_id": int(c)}
                            for box, c in zip(im["boxes"], im["categories"])],
            "relations": [[int(v) for v in rel] for rel in im["relations"]],
        })
    psg = {"data": data, "thing_classes": dataset["thing_classes"],
           "stuff_classes": dataset["stuff_classes"], "predicate_classes": dataset["predicate_classes"],
           "test_image_ids": [im["image_id"] for im in dataset["images"] if im["split"] == "test"]}
    path = root / "psg.json"
    path.write_text(json.dumps(psg))
    return path


# ----------------------------------------------------------------------------- predictions


def _pick(rng, n, p, exclude=()):
    """Random subset of range(n) with rate p; at least one (outside exclude) when p > 0 and n >= 3."""
    chosen = {i for i in range(n) if rng.random() < p and i not in exclude}
    free = [i for i in range(n) if i not in exclude]
    if p > 0 and n >= 3 and not chosen and free:
        chosen.add(free[int(rng.integers(len(free)))])
    return chosen


def _mask_variants(rng, mask):
    """(noisy copy, near duplicate of that copy or None) for a GT mask."""
    noisy = shifted(mask, int(rng.integers(-1, 2)), int(rng.integers(-1, 2)))
    r = rng.random()
    noisy = eroded(noisy) if r < 0.2 else dilated(noisy) if r < 0.4 else noisy
    if not noisy.any():
        noisy = mask.copy()
    for near in (shifted(noisy, 0, 1), shifted(noisy, 1, 0), dilated(noisy)):
        if near.any() and not np.array_equal(near, noisy) and mask_iou(near, noisy) >= 0.5:
            return noisy, near
    return noisy, None


def _box_variants(rng, box, height, width):
    """(noisy copy, near duplicate) for a GT box; coordinates are multiples of 0.5."""
    x1, y1, x2, y2 = (float(v) + float(rng.integers(-2, 3)) / 2 for v in box)
    x1, x2 = sorted((min(max(x1, 0.0), width), min(max(x2, 0.0), width)))
    y1, y2 = sorted((min(max(y1, 0.0), height), min(max(y2, 0.0), height)))
    noisy = [x1, y1, max(x2, x1 + 0.5), max(y2, y1 + 0.5)]
    near = [noisy[0] + 0.5, noisy[1], noisy[2] + 0.5, noisy[3]]
    return noisy, (near if box_iou(noisy, near) >= 0.5 else None)


def _random_box(rng, height, width):
    x1, x2 = sorted(float(v) / 2 for v in rng.choice(2 * width + 1, size=2, replace=False))
    y1, y2 = sorted(float(v) / 2 for v in rng.choice(2 * height + 1, size=2, replace=False))
    return [x1, y1, x2, y2]


def _simulate_instances(rng, im, n_classes, with_masks):
    """Predicted instances for one GT image: list of (mask or box, category, score, source GT or -1)."""
    height, width, categories = im["height"], im["width"], im["categories"]
    instances = []
    for g, category in enumerate(categories):
        if rng.random() < 0.12:
            continue  # missed object
        if with_masks:
            noisy, near = _mask_variants(rng, im["masks"][g])
        else:
            noisy, near = _box_variants(rng, im["boxes"][g], height, width)
        score = round(float(rng.uniform(0.3, 1.0)), 3)
        instances.append((noisy, category, score, g))
        if rng.random() < 0.2:  # exact duplicate, same or lower score
            instances.append((noisy, category, score if rng.random() < 0.5 else round(score * 0.9, 3), g))
        if near is not None and rng.random() < 0.25:  # near duplicate of the same object
            instances.append((near, category, round(score * 0.8, 3), g))
        if n_classes > 1 and rng.random() < 0.1:  # copy with a wrong category
            wrong = (category + 1 + int(rng.integers(n_classes - 1))) % n_classes
            instances.append((noisy, wrong, round(score * 0.7, 3), g))
    # Two same-category GT segments of equal area: a prediction covering both has the same IoU with
    # each (0.5 for masks, which never overlap), so matching must break the tie.
    for g1 in range(len(categories)):
        for g2 in range(g1 + 1, len(categories)):
            if categories[g1] != categories[g2] or rng.random() < 0.3:
                continue
            if with_masks:
                a1, a2 = (np.count_nonzero(im["masks"][g]) for g in (g1, g2))
                if a1 == a2:
                    union = im["masks"][g1] | im["masks"][g2]
                    instances.append((union, categories[g1], round(float(rng.uniform(0.3, 1.0)), 3), g1))
            else:
                b1, b2 = im["boxes"][g1], im["boxes"][g2]
                enclosing = [min(b1[0], b2[0]), min(b1[1], b2[1]), max(b1[2], b2[2]), max(b1[3], b2[3])]
                iou1, iou2 = box_iou(b1, enclosing), box_iou(b2, enclosing)
                if iou1 == iou2 and iou1 >= 0.5:
                    instances.append((enclosing, categories[g1], round(float(rng.uniform(0.3, 1.0)), 3), g1))
    for _ in range(int(rng.integers(0, 3))):  # false positives
        shape = (random_shape(rng, height, width, 0.05, 0.3) if with_masks
                 else _random_box(rng, height, width))
        instances.append((shape, int(rng.integers(n_classes)), round(float(rng.uniform(0.05, 0.6)), 3), -1))
    order = rng.permutation(len(instances))
    return [instances[i] for i in order]


def _simulate_triplets(rng, relations, sources, n_predicates, n_spurious=None, confusions=None):
    """(T, T_ng) for instances whose GT sources are given: true and spurious pairs, several
    predicates per pair, repeated pairs and triplets, occasional self-pairs. n_spurious: about
    how many spurious triplets to rank among the true ones (default: up to min(2 P, 20)).
    confusions: {predicate: the predicate a wrong guess takes} (default: a random predicate)."""
    n = len(sources)
    copies = {}
    for i, g in enumerate(sources):
        copies.setdefault(g, []).append(i)
    scored = []  # (confidence, s, o, p)
    for s_gt, o_gt, p in relations:
        if s_gt in copies and o_gt in copies and rng.random() < 0.8:
            s, o = int(rng.choice(copies[s_gt])), int(rng.choice(copies[o_gt]))
            predicate = p if rng.random() < 0.7 else int(rng.integers(n_predicates))
            if confusions and predicate != p and p in confusions and rng.random() < 0.8:
                predicate = confusions[p]
            scored.append((float(rng.uniform(0.4 if n_spurious is None else 0.3, 1.0)), s, o, predicate))
    low, high = (0, min(2 * n, 20)) if n_spurious is None else (n_spurious // 2, n_spurious)
    top = 0.8 if n_spurious is None else 0.75  # many spurious triplets, interleaved with the true ones
    for _ in range(int(rng.integers(low, high + 1)) if n else 0):
        s, o = int(rng.integers(n)), int(rng.integers(n))
        if n_spurious is not None and s == o:  # self-pairs only from the rare case below
            o = (s + 1) % n
        scored.append((float(rng.uniform(0.0, top)), s, o, int(rng.integers(n_predicates))))
    if n and rng.random() < 0.2:
        s = int(rng.integers(n))
        scored.append((float(rng.uniform(0.0, 0.8)), s, s, int(rng.integers(n_predicates))))
    for conf, s, o, p in list(scored):
        if rng.random() < 0.3:  # another predicate for the same pair
            scored.append((conf * 0.9, s, o, int(rng.integers(n_predicates))))
        if rng.random() < 0.1:  # exact repeat
            scored.append((conf * 0.95, s, o, p))
    scored.sort(key=lambda t: -t[0])
    triplets = [[s, o, p] for _, s, o, p in scored]
    ng_scored = [(conf + float(rng.normal(0, 0.1)), s, o, p) for conf, s, o, p in scored]
    for conf, s, o, _ in list(ng_scored):
        for _ in range(int(rng.integers(0, 3))):
            ng_scored.append((conf - float(rng.uniform(0, 0.5)), s, o, int(rng.integers(n_predicates))))
    ng_scored.sort(key=lambda t: -t[0])
    return triplets, [[s, o, p] for _, s, o, p in ng_scored]


def _predict_image(rng, im, image_id, n_classes, n_predicates, with_masks, kind, p_no_ng, n_spurious,
                   confusions=None):
    """One prediction image dict; kind is "normal", "no_instances" or "no_triplets"."""
    instances = [] if kind == "no_instances" else _simulate_instances(rng, im, n_classes, with_masks)
    if kind == "normal":
        triplets, ng_triplets = _simulate_triplets(rng, im["relations"], [t[3] for t in instances],
                                                   n_predicates, n_spurious, confusions)
    else:
        triplets, ng_triplets = [], []
    out = {"id": image_id,
           "instances": [{"category": int(c),
                          "bbox": tight_box(shape) if with_masks else [float(v) for v in shape],
                          "score": float(score)} for shape, c, score, _ in instances],
           "triplets": triplets}
    if rng.random() >= p_no_ng:
        out["ng_triplets"] = ng_triplets
    if with_masks:
        out["masks"] = (np.stack([t[0] for t in instances]) if instances
                        else np.zeros((0, im["height"], im["width"]), bool))
    return out


def simulate_predictions(rng, dataset, only_test=True, p_missing=0.05, p_empty=0.05, with_masks=True,
                         n_extra=2, p_no_ng=0.2, n_spurious=None, confusions=None):
    """Simulate a one-stage model's output as a list of prediction image dicts (module docstring).

    Covers the test images (all images if not only_test) in dataset order, except:
    - missing: each image with rate p_missing is left out (at least one when p_missing > 0 and
      there are >= 3 images);
    - empty: each remaining image with rate p_empty (same "at least one" rule) has either no
      instances (and no triplets) or instances but no triplets, chosen at random;
    - extra: n_extra predictions for ids outside the covered images are inserted at random
      positions: the first from a train-split image when only_test and one exists, the rest for
      ids absent from the dataset ("1000000", "1000001", ...; shaped like the first image).
    ng_triplets is omitted with rate p_no_ng; n_spurious and confusions are passed to the triplet
    simulation. Box mode (with_masks=False): no "masks" key,
    box coordinates are multiples of 0.5.
    """
    n_classes = len(dataset["thing_classes"]) + len(dataset["stuff_classes"])
    n_predicates = len(dataset["predicate_classes"])
    covered = [im for im in dataset["images"] if not only_test or im["split"] == "test"]
    missing = _pick(rng, len(covered), p_missing)
    empty = _pick(rng, len(covered), p_empty, exclude=missing)
    out = []
    for i, im in enumerate(covered):
        if i in missing:
            continue
        kind = "normal" if i not in empty else ("no_instances" if rng.random() < 0.5 else "no_triplets")
        out.append(_predict_image(rng, im, im["image_id"], n_classes, n_predicates, with_masks, kind, p_no_ng,
                                  n_spurious, confusions))
    others = [im for im in dataset["images"] if only_test and im["split"] != "test"]
    for j in range(n_extra):
        if j == 0 and others:
            source = others[int(rng.integers(len(others)))]
            image_id = source["image_id"]
        else:
            source, image_id = dataset["images"][0], str(1_000_000 + j)
        extra = _predict_image(rng, source, image_id, n_classes, n_predicates, with_masks, "normal", p_no_ng,
                               n_spurious, confusions)
        out.insert(int(rng.integers(len(out) + 1)), extra)
    return out
