"""The Evaluator's state per image stays under 2 KiB with panoptic quality on, on a realistic PSG
image: 640 x 480 pixels, PSG's 133 categories and 56 predicates, 20 GT segments (one of them half
the image, so that the record needs 32-bit counts) with 12 relations, and 100 predicted masks (a
one-stage model's output, first-wins) of 60 categories, some of them near a GT segment, most of them
false positives, with 300 triplets. Measured: 576 bytes without PQ (16-bit counts), 1584 with it (its
union pixels make every count of the record 32-bit)."""

import numpy as np

from conftest import sgeval
from tools import synth

HEIGHT, WIDTH, N_THINGS, N_STUFF, N_PREDICATES = 480, 640, 80, 53, 56
BOUND = 2048  # bytes of state per image


def realistic_case(tmp_path):
    rng = np.random.default_rng(5)
    label = np.zeros((HEIGHT, WIDTH), np.int64)  # segment 0 the top half (its area needs 32-bit counts) ...
    for g in range(1, 20):  # ... and a 5 x 4 grid below it, 20 categories across things and stuff
        row, col = divmod(g - 1, 5)
        label[240 + row * 60:240 + (row + 1) * 60, col * 128:(col + 1) * 128] = g
    categories = [int(c) for c in rng.choice(N_THINGS + N_STUFF, 20, replace=False)]
    masks = np.stack([label == g for g in range(20)])
    relations = [[int(s), int(o), int(p)] for s, o, p in zip(rng.choice(20, 12), (rng.choice(19, 12) + 1) % 20,
                                                              rng.choice(N_PREDICATES, 12))]
    relations = [[s, (s + 1) % 20, p] if s == o else [s, o, p] for s, o, p in relations]
    image = {"image_id": "1", "height": HEIGHT, "width": WIDTH, "split": "test", "categories": categories,
             "masks": masks, "boxes": [synth.tight_box(m) for m in masks], "relations": relations}
    dataset = {"thing_classes": [f"thing{i}" for i in range(N_THINGS)],
               "stuff_classes": [f"stuff{i}" for i in range(N_STUFF)],
               "predicate_classes": [f"predicate{i}" for i in range(N_PREDICATES)], "images": [image]}
    gt = synth.write_gt(dataset, tmp_path)
    pred_masks = np.zeros((100, HEIGHT, WIDTH), bool)
    pred_categories = rng.choice(N_THINGS + N_STUFF, 60, replace=False)[rng.integers(0, 60, 100)]
    for p in range(100):
        y, x = rng.integers(0, HEIGHT - 100), rng.integers(0, WIDTH - 100)
        pred_masks[p, y:y + rng.integers(20, 140), x:x + rng.integers(20, 150)] = True
        if p < 20:  # near the GT segment p, with its category
            pred_masks[p], pred_categories[p] = np.roll(masks[p], 6 * p, axis=1), categories[p]
    triplets = np.column_stack([rng.integers(0, 100, (300, 2)), rng.integers(0, N_PREDICATES, 300)])
    return str(gt), str(tmp_path / "panoptic"), {"labels": pred_categories.astype(np.int64), "masks": pred_masks,
                                                 "triplets": triplets[triplets[:, 0] != triplets[:, 1]]}


def state_bytes(state):
    return sum(np.asarray(state[key]).nbytes for key in ("slots", "updates", "digests", "offsets", "values"))


def test_the_state_per_image_stays_under_2_kib_with_pq(tmp_path):
    gt, gt_seg, update = realistic_case(tmp_path)
    sizes = {}
    for pq in (False, True):
        evaluator = sgeval.Evaluator({"gt": gt, "gt_seg": gt_seg, "pq": pq, "pq_merge": "first-wins",
                                      "gt_cache": False})
        evaluator.update("1", **update)
        state = evaluator.state_dict()
        sizes[pq] = state_bytes(state)
        if pq:
            section = evaluator.compute()["panoptic_quality"]
            assert section["All"]["n"] >= 30 and sum(v["TP"] for v in section["per_category"].values()) >= 5
    assert sizes[True] < BOUND, sizes
