"""The Open Images demo: generated files in PySGG's Open Images layouts taken through the whole
path an Open Images user takes, without the real data (`make demo-oi`, tests/convert/test_oi_demo.py).

    python -m tools.make_oi_demo --out demo/oi [--seed 0] [--images 80]    # from the repository root

1. ``raw/``: ``categories_dict.json`` and ``vrd-{train,val,test}-anno.json`` as PySGG reads them
   (V6's 30 predicate names, 24 object classes), with what PySGG's loader drops or clips (entries
   without relations or boxes, boxes past the image's edge, repeated relation rows), and the
   ``eval_results.pytorch`` of a simulated SGDet model (legacy torch.save of PySGG BoxLists,
   written by tools/torchsave.py).
2. ``oi_test.json`` (``sgeval convert openimages-gt``) and ``pred.zip`` (``sgeval convert
   openimages``), by their functions. configs/oiv6-demo.yaml evaluates them.

The simulated model: per GT box a detection jittered by up to 8 % of its size (some by far more),
its label the GT's (one in ten another), its score in [0.3, 1); some false detections; every
ordered pair of detections, predicate scores a softmax of noise with the GT predicates of a GT
pair raised, rows in descending order of subject x object x best predicate score, the first 400.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from sgeval_convert import openimages
from tools import torchsave

OIV6_PREDICATES = (
    "at", "holds", "wears", "surf", "hang", "drink", "holding_hands", "on", "ride", "dance", "skateboard", "catch",
    "highfive", "inside_of", "eat", "cut", "contain", "handshake", "kiss", "talk_on_phone", "interacts_with",
    "under", "hug", "throw", "hits", "snowboard", "kick", "ski", "plays", "read")
OBJECTS = tuple(f"object {i}" for i in range(24))
PYSGG_BOXLIST = "pysgg.structures.bounding_box.BoxList"


def random_entry(rng, index, n_predicates):
    """One vrd-*-anno.json entry: 3-10 boxes in a w x h image (some past its edge), 1-8 relations
    with a long-tailed predicate (some rows repeated, some pairs with two predicates)."""
    width, height = int(rng.integers(200, 800)), int(rng.integers(200, 800))
    n = int(rng.integers(3, 11))
    x1, y1 = rng.uniform(-20, width * 0.8, n), rng.uniform(-20, height * 0.8, n)
    boxes = np.stack([x1, y1, x1 + rng.uniform(10, width * 0.5, n), y1 + rng.uniform(10, height * 0.5, n)], 1)
    labels = np.minimum(rng.geometric(0.15, n) - 1, len(OBJECTS) - 1)
    pairs = [(s, o) for s in range(n) for o in range(n) if s != o]
    chosen = rng.choice(len(pairs), min(int(rng.integers(1, 9)), len(pairs)), replace=False)
    predicate = lambda: int(min(rng.geometric(0.2) - 1, n_predicates - 1))  # noqa: E731
    rels = [[*pairs[c], predicate()] for c in chosen]
    rels += [list(rels[0])] * int(rng.random() < 0.2)  # a repeated row, as in the real files
    rels += [[*rels[-1][:2], predicate()]] * int(rng.random() < 0.3)  # another predicate on a pair
    return {"img_fn": f"{index:06x}", "img_size": [width, height], "bbox": np.round(boxes, 1).tolist(),
            "det_labels": labels.tolist(), "rel": rels}


def write_raw(out, seed, n_images):
    """PySGG's annotations folder under out (and two entries its loader drops); returns it."""
    rng, folder = np.random.default_rng(seed), Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "categories_dict.json").write_text(json.dumps({"obj": list(OBJECTS), "rel": list(OIV6_PREDICATES)}))
    splits = {"test": n_images, "val": max(2, n_images // 8), "train": n_images * 4}
    for offset, (split, n) in enumerate(splits.items()):
        entries = [random_entry(rng, offset * 1_000_000 + i, len(OIV6_PREDICATES)) for i in range(n)]
        entries[1]["rel"] = []  # dropped by load_annotations: no relation
        entries[2]["bbox"], entries[2]["det_labels"] = [], []  # and no box
        (folder / f"vrd-{split}-anno.json").write_text(json.dumps(entries))
    return folder


def simulated_prediction(rng, entry, n_predicates):
    """An SGDet BoxList of a GT entry at the image size (after PySGG's resize back)."""
    boxes = np.array([a["bbox"] for a in entry["annotations"]], np.float64)
    labels = np.array([s["category_id"] for s in entry["segments_info"]], np.int64)
    size = np.maximum(boxes[:, 2:] - boxes[:, :2], 1)
    jitter = rng.uniform(-0.08, 0.08, boxes.shape) * np.tile(size, 2)
    jitter[rng.random(len(boxes)) < 0.15] *= 6  # some far off
    labels = np.where(rng.random(len(labels)) < 0.1, rng.integers(0, len(OBJECTS), len(labels)), labels)
    n_false = int(rng.integers(0, 4))
    corner = rng.uniform(0, 150, (n_false, 2))
    false = np.concatenate([corner, corner + rng.uniform(10, 100, (n_false, 2))], axis=1)
    moved = boxes + jitter
    moved = np.concatenate([np.minimum(moved[:, :2], moved[:, 2:]), np.maximum(moved[:, :2], moved[:, 2:])], axis=1)
    boxes = np.concatenate([moved, false])
    labels = np.concatenate([labels, rng.integers(0, len(OBJECTS), n_false)]) + 1  # PySGG's labels: 1-based
    scores = rng.uniform(0.3, 1.0, len(boxes)).astype(np.float32)
    n = len(boxes)
    pairs = np.array([(s, o) for s in range(n) for o in range(n) if s != o], np.int64)
    logits = rng.normal(0, 1, (len(pairs), n_predicates + 1))
    for s, o, p in entry["relations"]:
        logits[(pairs[:, 0] == s) & (pairs[:, 1] == o), p + 1] += rng.uniform(1, 5)
    rel_scores = (np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)).astype(np.float32)
    triple = scores[pairs[:, 0]] * scores[pairs[:, 1]] * rel_scores[:, 1:].max(axis=1)
    order = np.argsort(-triple, kind="stable")[:400]
    fields = {"pred_labels": labels, "pred_scores": scores, "rel_pair_idxs": pairs[order],
              "pred_rel_scores": rel_scores[order], "pred_rel_labels": rel_scores[order, 1:].argmax(axis=1) + 1}
    return torchsave.BoxList(boxes.astype(np.float32), (entry["width"], entry["height"]), extra_fields=fields,
                             cls=PYSGG_BOXLIST)


def groundtruth(entry):
    """The evaluation GT BoxList PySGG saves beside the predictions (1-based labels and predicates)."""
    relations = np.array(entry["relations"], np.int64).reshape(-1, 3) + [0, 0, 1]
    labels = np.array([s["category_id"] + 1 for s in entry["segments_info"]], np.int64)
    return torchsave.BoxList([a["bbox"] for a in entry["annotations"]], (entry["width"], entry["height"]),
                             extra_fields={"labels": labels, "relation_tuple": relations}, cls=PYSGG_BOXLIST)


def write_model_output(path, gt, seed):
    """eval_results.pytorch of the simulated model for the evaluated images of gt (in their order)."""
    rng, test_ids = np.random.default_rng(seed + 1), {str(i) for i in gt["test_image_ids"]}
    entries = [entry for entry in gt["data"] if str(entry["image_id"]) in test_ids]
    predictions = [simulated_prediction(rng, entry, len(gt["predicate_classes"])) for entry in entries]
    torchsave.save(path, {"groundtruths": [groundtruth(e) for e in entries], "predictions": predictions},
                   legacy=True)


def make_demo(out, seed=0, n_images=80):
    """Every file of the demo under out; returns {name: path}."""
    out = Path(out)
    paths = {"raw": write_raw(out / "raw", seed, n_images), "gt": out / "oi_test.json",
             "results": out / "raw" / "eval_results.pytorch", "pred": out / "pred.zip"}
    openimages.convert_gt(paths["raw"], paths["gt"])
    write_model_output(paths["results"], json.loads(paths["gt"].read_text()), seed)
    openimages.convert(paths["results"], paths["pred"], paths["gt"])
    return paths


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="demo/oi")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--images", type=int, default=80)
    args = parser.parse_args(argv)
    for name, path in make_demo(args.out, args.seed, args.images).items():
        print(f"{name}: {path}")


if __name__ == "__main__":
    main()
