"""Write a small PSG-layout GT and panoptic predictions in every form the PQ oracles read.

    tools/pq_check/build/venv/bin/python -m tools.pq_check.make_data --seed S --images N --out DIR

DIR/psg.json, DIR/panoptic/<id>.png   the GT: 7 thing and 5 stuff classes, segments_info with iscrowd,
                                      isthing and area, relations; train images and a test image
                                      without relations (neither is scored)
DIR/pan/<id>.npy                      pan_results as OpenPSG's Results carry them: int64 (H, W),
                                      value = category + instance * 1000, category 12 (= the number of
                                      classes) VOID; instances numbered from 0 as PSGTR does
DIR/coco/panoptic.json, coco/panoptic/<id>.png
                                      the same segmentations as COCO-panoptic PNG + segments_info:
                                      VOID pixels id 0, every other value a random 24-bit id
DIR/masks/<id>.{masks,scores,categories}.npy
                                      overlapping masks (bool (N, H, W)), scores (float64) and
                                      categories (int64, 0-based) for the merge rules
DIR/data_summary.json                 how many of each deliberate case were written (every CASES key
                                      must be there, or it exits with an error)

Images are 20 x 24. Classes 6 (toaster) and 11 (ceiling) never occur, so the means must leave them
out. Each GT segment is predicted copied, halved (IoU exactly 0.5 when its area is even), cut to
60 %, grown by a pixel, relabelled, split, or dropped; spurious segments land on VOID,
on crowd regions and on other segments. The first image holds every hand-made case (below), so
every fixture has them whatever the seed. Tied scores are written only where numpy's argsort()[::-1]
(fair-psgg's order) equals the stable order reversed; an image is redrawn otherwise.
"""

import argparse
import collections
import json
import sys
from pathlib import Path

import numpy as np
from PIL import Image

THINGS = ["person", "horse", "dog", "car", "cup", "kite", "toaster"]  # toaster and ceiling never occur: no mean
STUFF = ["grass", "sky", "wall", "floor", "ceiling"]                   # may count them
USED_THINGS, USED_STUFF = len(THINGS) - 1, len(STUFF) - 1
PERSON, HORSE, DOG, CAR, CUP, KITE = range(6)
GRASS, SKY = len(THINGS), len(THINGS) + 1
PREDICATES = ["on", "beside", "holding"]
NUM_CLASSES = len(THINGS) + len(STUFF)  # also pan_results' VOID category
HEIGHT, WIDTH = 20, 24
OFFSET = 1000
COUNT = collections.Counter()
CASES = ("GT crowd segments", "GT ids not in segments_info", "GT JSON area differing from the PNG",
         "GT train images", "GT test images without relations", "predictions halved (IoU exactly 0.5)",
         "predictions relabelled", "predictions grown over VOID", "spurious on VOID", "spurious on crowd",
         "pan_results id 0 with VOID pixels", "pan_results VOID pixels", "masks with tied scores", "tied masks whose order decides the pixels",
         "masks absorbed at IoU exactly 0.5", "masks covered by higher-scored masks")


def rect(mask, top, left, height, width):
    mask[max(top, 0):max(top + height, 0), max(left, 0):max(left + width, 0)] = True
    return mask


def blank():
    return np.zeros((HEIGHT, WIDTH), bool)


def random_rect(rng, min_size=2, max_size=9):
    h, w = rng.integers(min_size, max_size, 2)
    return rect(blank(), int(rng.integers(0, HEIGHT - h + 1)), int(rng.integers(0, WIDTH - w + 1)), int(h), int(w))


def gt_image(rng):
    """[(mask, category, iscrowd)] painted in order (later over earlier) and an unlisted-id mask or None."""
    layers = []
    top = 0
    for category in rng.choice(USED_STUFF, int(rng.integers(1, 4)), replace=False):
        height = int(rng.integers(3, 8))
        layers.append((rect(blank(), top, 0, height, WIDTH - int(rng.integers(0, 6))), len(THINGS) + int(category), 0))
        top += height + int(rng.integers(0, 3))  # gaps stay VOID
    for _ in range(int(rng.integers(1, 5))):
        layers.append((random_rect(rng), int(rng.integers(USED_THINGS)), int(rng.random() < 0.2)))
    unlisted = random_rect(rng, 2, 4) if rng.random() < 0.2 else None
    return layers, unlisted


def hand_gt():
    """The first image: every hand-made case in one place."""
    layers = [(rect(blank(), 0, 0, 6, 24), SKY, 0),
              (rect(blank(), 14, 0, 6, 20), GRASS, 0),   # rows 6-13 and the corner stay VOID
              (rect(blank(), 7, 1, 4, 4), PERSON, 0),    # 16 px: its prediction halved (IoU 0.5)
              (rect(blank(), 7, 7, 4, 4), PERSON, 1),    # crowd
              (rect(blank(), 7, 12, 2, 4), PERSON, 1),   # a second crowd person (the last one counts)
              (rect(blank(), 15, 2, 3, 4), HORSE, 0),    # predicted as a dog
              (rect(blank(), 15, 8, 3, 4), DOG, 0)]      # JSON area off by 2
    return layers, rect(blank(), 10, 20, 2, 2)


def paint(layers, unlisted, rng, area_offsets=None):
    """(id map, segments_info, annotations): random distinct nonzero ids, segments without pixels left out."""
    ids = np.zeros((HEIGHT, WIDTH), np.int64)
    values = rng.choice(np.arange(1, 1 << 24), len(layers) + 1, replace=False)
    for (mask, _, _), value in zip(layers, values):
        ids[mask] = value
    if unlisted is not None:
        ids[unlisted] = values[-1]
        COUNT["GT ids not in segments_info"] += 1
    segments, annotations = [], []
    for index, ((_, category, crowd), value) in enumerate(zip(layers, values)):
        area = int((ids == value).sum())
        if area == 0:
            continue
        rows, cols = np.nonzero(ids == value)
        offset = (area_offsets or {}).get(index, 0)
        COUNT["GT JSON area differing from the PNG"] += offset != 0
        COUNT["GT crowd segments"] += crowd
        segments.append({"id": int(value), "category_id": category, "iscrowd": crowd,
                         "isthing": int(category < len(THINGS)), "area": area + offset})
        annotations.append({"bbox": [int(cols.min()), int(rows.min()), int(cols.max()) + 1, int(rows.max()) + 1],
                            "bbox_mode": 0, "category_id": category})
    return ids, segments, annotations


def predicted_layers(rng, gt_ids, segments):
    """[(mask, category)] of the predicted segmentation, painted in order."""
    layers = []
    for segment in segments:
        mask, category = gt_ids == segment["id"], segment["category_id"]
        action = rng.choice(["copy", "half", "cut", "grow", "relabel", "split", "drop"])
        if action == "half" or action == "cut":
            keep = np.flatnonzero(mask.ravel())[:int(mask.sum() * (0.5 if action == "half" else 0.6))]
            mask = blank().ravel()
            mask[keep] = True
            mask = mask.reshape(HEIGHT, WIDTH)
            COUNT["predictions halved (IoU exactly 0.5)"] += action == "half" and int(segment["area"]) % 2 == 0
        elif action == "grow":
            grown = mask.copy()
            grown[1:] |= mask[:-1]
            grown[:-1] |= mask[1:]
            grown[:, 1:] |= mask[:, :-1]
            COUNT["predictions grown over VOID"] += bool((grown & (gt_ids == 0)).any())
            mask = grown
        elif action == "relabel":
            category = int((category + 1 + rng.integers(NUM_CLASSES - 1)) % NUM_CLASSES)
            category = category if category not in (USED_THINGS, NUM_CLASSES - 1) else 0
            COUNT["predictions relabelled"] += 1
        elif action == "split":
            left = mask.copy()
            left[:, WIDTH // 2:] = False
            layers.append((left, category))
            mask = mask & ~left
        elif action == "drop":
            continue
        layers.append((mask, category))
    for _ in range(int(rng.integers(0, 3))):
        layers.append((random_rect(rng, 2, 6), int(rng.integers(USED_THINGS))))
    return layers


def pan_results(rng, layers, gt_ids, crowd):
    """OpenPSG's map: instance numbers from 0 in painting order, unpainted pixels VOID (category NUM_CLASSES)."""
    pan = np.full((HEIGHT, WIDTH), NUM_CLASSES + OFFSET * int(rng.integers(0, 3)), np.int64)
    for instance, (mask, category) in enumerate(layers):
        pan[mask] = category + instance * OFFSET
        COUNT["spurious on VOID"] += bool(mask.any() and (mask & (gt_ids == 0)).sum() * 2 > mask.sum())
        COUNT["spurious on crowd"] += bool((mask & crowd).any())
    void = pan % OFFSET == NUM_CLASSES
    COUNT["pan_results VOID pixels"] += bool(void.any())
    COUNT["pan_results id 0 with VOID pixels"] += bool(void.any() and (pan == 0).any())
    return pan


def coco_form(rng, pan):
    """(PNG id map, segments_info) of pan_results: VOID pixels 0, each other value a random 24-bit id."""
    values = [int(v) for v in np.unique(pan) if v % OFFSET != NUM_CLASSES]
    new_ids = rng.choice(np.arange(1, 1 << 24), len(values), replace=False)
    ids = np.zeros(pan.shape, np.int64)
    info = []
    for value, new_id in zip(values, new_ids):
        ids[pan == value] = new_id
        info.append({"id": int(new_id), "category_id": value % OFFSET})
    return ids, info


def overlapping_masks(rng, gt_ids, segments):
    """(masks (N, H, W), scores, categories): near-copies of GT segments, duplicates absorbed at IoU >= 0.5
    (one at exactly 0.5, of another category), masks under higher-scored ones, and random rectangles."""
    masks, scores, categories = [], [], []
    levels = [0.3, 0.5, 0.7, 0.9]  # few score values: ties
    for segment in segments:
        mask = gt_ids == segment["id"]
        score = float(rng.choice(levels))
        masks.append(mask), scores.append(score), categories.append(segment["category_id"])
        if rng.random() < 0.4 and mask.sum() % 2 == 0:  # its half: IoU exactly 0.5, lower score, other category
            half = blank().ravel()
            half[np.flatnonzero(mask.ravel())[:int(mask.sum()) // 2]] = True
            masks.append(half.reshape(HEIGHT, WIDTH)), scores.append(score - 0.1)
            categories.append(int((segment["category_id"] + 1) % USED_THINGS))
            COUNT["masks absorbed at IoU exactly 0.5"] += 1
    for _ in range(int(rng.integers(1, 4))):
        masks.append(random_rect(rng, 2, 7)), scores.append(float(rng.choice(levels)))
        categories.append(int(rng.integers(USED_THINGS)))
    return np.array(masks), np.array(scores), np.array(categories, np.int64)


def with_tied_pair(masks, scores, categories):
    """Two more masks with the top score, overlapping with IoU 4/44 (no absorption): the one walked
    first claims the overlap, so the tie order decides the segmentation."""
    pair = [rect(blank(), 12, 2, 4, 6), rect(blank(), 14, 6, 4, 6)]
    COUNT["tied masks whose order decides the pixels"] += 1
    return (np.concatenate([masks, np.array(pair)]), np.concatenate([scores, [0.95, 0.95]]),
            np.concatenate([categories, [CAR, CUP]]))


def ties_are_stable(scores):
    """fair-psgg walks argsort()[::-1]; keep an image only where that equals the stable sort reversed."""
    return bool((np.argsort(scores)[::-1] == np.argsort(scores, kind="stable")[::-1]).all())


def count_mask_cases(masks, scores):
    COUNT["masks with tied scores"] += len(scores) - len(set(scores.tolist()))
    order = np.argsort(scores, kind="stable")[::-1]
    for position, i in enumerate(order):
        higher = np.zeros(masks[0].shape, bool)
        for j in order[:position]:
            higher |= masks[j]
        COUNT["masks covered by higher-scored masks"] += bool(masks[i].any() and not (masks[i] & ~higher).any())


def write_png(path, ids):
    rgb = np.stack([ids % 256, ids // 256 % 256, ids // 65536], axis=-1).astype(np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(rgb, "RGB").save(path, format="PNG")


def image_entry(image_id, segments, annotations, relations):
    return {"image_id": image_id, "file_name": f"{image_id}.jpg", "pan_seg_file_name": f"{image_id}.png",
            "height": HEIGHT, "width": WIDTH, "segments_info": segments, "annotations": annotations,
            "relations": relations}


def relations_of(rng, n_segments):
    return [[int(rng.integers(n_segments)), int(rng.integers(n_segments)), int(rng.integers(len(PREDICATES)))]
            for _ in range(int(rng.integers(1, 4)))]


def write_predictions(rng, out, image_id, gt_ids, segments, hand):
    crowd = np.isin(gt_ids, [s["id"] for s in segments if s["iscrowd"]])
    counted = COUNT.copy()
    for _ in range(100):
        COUNT.clear()
        COUNT.update(counted)  # only the kept draw counts
        if hand:
            layers = hand_layers(gt_ids, segments)
        else:
            layers = predicted_layers(rng, gt_ids, segments)
        masks, scores, categories = overlapping_masks(rng, gt_ids, segments)
        if hand:
            masks, scores, categories = with_tied_pair(masks, scores, categories)
        if ties_are_stable(scores):
            break
    else:
        sys.exit(f"image {image_id}: no draw without an unstable tie")
    pan = pan_results(rng, layers, gt_ids, crowd)
    np.save(out / "pan" / f"{image_id}.npy", pan)
    ids, info = coco_form(rng, pan)
    write_png(out / "coco" / "panoptic" / f"{image_id}.png", ids)
    count_mask_cases(masks, scores)
    for name, array in (("masks", masks), ("scores", scores), ("categories", categories)):
        np.save(out / "masks" / f"{image_id}.{name}.npy", array)  # .npy: the same arrays, the same bytes
    return {"image_id": image_id, "file_name": f"{image_id}.png", "segments_info": info}


def hand_layers(gt_ids, segments):
    """The first image's prediction: a person (id 0 in pan_results: category 0, instance 0) covering half
    of the GT person and VOID pixels over the other half (OpenPSG joins them to it: IoU 16/28 instead
    of 8/16), grass and sky copied, the horse as a dog, a person on the first crowd person (an FP: only
    the category's last crowd segment is ignored), a dog mostly on VOID (ignored), the dog copied (its
    JSON area is 2 more than its pixels), a kite half on VOID, half on the GT's unlisted id (an FP: only
    id 0 is VOID)."""
    by_category = {s["category_id"]: gt_ids == s["id"] for s in segments if not s["iscrowd"]}
    person = by_category[PERSON].copy()
    person[:, 3:] = False
    return [(person, PERSON), (by_category[GRASS], GRASS), (by_category[SKY], SKY), (by_category[HORSE], DOG),
            (rect(blank(), 7, 7, 3, 4), PERSON), (rect(blank(), 6, 14, 5, 4), DOG), (by_category[DOG], DOG),
            (rect(blank(), 9, 20, 4, 2), KITE)]


def generate(seed, n_images, out):
    COUNT.clear()
    rng = np.random.default_rng(seed)
    out = Path(out)
    for folder in ("panoptic", "pan", "coco/panoptic", "masks"):
        (out / folder).mkdir(parents=True, exist_ok=True)
    data, test_ids, predictions = [], [], []
    for index in range(n_images):
        image_id = str(1000 + index)
        hand = index == 0
        layers, unlisted = hand_gt() if hand else gt_image(rng)
        gt_ids, segments, annotations = paint(layers, unlisted, rng, {6: 2} if hand else None)
        write_png(out / "panoptic" / f"{image_id}.png", gt_ids)
        split = "train" if index % 7 == 6 else "test"
        no_relations = index == 5
        data.append(image_entry(image_id, segments, annotations, [] if no_relations else relations_of(rng, len(segments))))
        COUNT["GT train images"] += split == "train"
        COUNT["GT test images without relations"] += split == "test" and no_relations
        if split == "test":
            test_ids.append(image_id)
        if split == "test" and not no_relations:
            predictions.append(write_predictions(rng, out, image_id, gt_ids, segments, hand))
    gt = {"thing_classes": THINGS, "stuff_classes": STUFF, "predicate_classes": PREDICATES,
          "test_image_ids": test_ids, "data": data}
    (out / "psg.json").write_text(json.dumps(gt, indent=1))
    (out / "coco" / "panoptic.json").write_text(json.dumps({"annotations": predictions}, indent=1))
    missing = [case for case in CASES if not COUNT[case]]
    (out / "data_summary.json").write_text(json.dumps({case: COUNT[case] for case in CASES}, indent=1))
    if missing:
        sys.exit(f"{out}: seed {seed} has no {missing}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--images", type=int, default=16)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    generate(args.seed, args.images, args.out)


if __name__ == "__main__":
    main()
