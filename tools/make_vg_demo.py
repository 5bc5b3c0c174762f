"""The Visual Genome demo: generated files in Scene-Graph-Benchmark's layouts taken through the
whole path a VG150 user takes, without the real data (`make demo-vg`, tests/convert/test_vg_demo.py).

    python -m tools.make_vg_demo --out demo/vg [--seed 0] [--images 120]    # from the repository root

1. ``raw/``: VG-SGG-with-attri.h5, VG-SGG-dicts-with-attri.json and image_data.json
   (tools/make_vg_data.py) with VG150's predicate names, so that the PySGG head / body / tail
   preset applies; a zero-shot list as Scene-Graph-Benchmark ships it (legacy torch.save, int64
   (N, 3), 1-based) and an ``eval_results.pytorch`` of a simulated PredCls model (legacy
   torch.save of BoxLists, both written by tools/torchsave.py).
2. ``vg150_test.json`` (``sgeval convert vg150``), ``zeroshot.json`` (``sgeval convert
   zeroshot``) and ``pred.zip`` (``sgeval convert sgb --task predcls``), by their functions.
configs/vg150-demo.yaml evaluates them.

The simulated model: every ordered pair of GT boxes, predicate scores a softmax of noise with the
GT predicate of a GT pair raised, rows in descending order of the best predicate score (object
scores are 1 in PredCls), boxes and labels the GT's after a resize to 600 px and back in float32.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from sgeval_convert import sgb, vg150, zeroshot
from tools import make_vg_data, torchsave

VG150_PREDICATES = (
    "above", "across", "against", "along", "and", "at", "attached to", "behind", "belonging to", "between",
    "carrying", "covered in", "covering", "eating", "flying in", "for", "from", "growing on", "hanging from", "has",
    "holding", "in", "in front of", "laying on", "looking at", "lying on", "made of", "mounted on", "near", "of", "on",
    "on back of", "over", "painted on", "parked on", "part of", "playing", "riding", "says", "sitting on",
    "standing on", "to", "under", "using", "walking in", "walking on", "watching", "wearing", "wears", "with")


def write_raw(out, seed, n_images):
    """The generated VG150 files under out; returns make_vg_data.write_vg's paths."""
    images = make_vg_data.random_vg_images(np.random.default_rng(seed), n_images)
    return make_vg_data.write_vg(out, images, predicates=list(VG150_PREDICATES))


def resized_round_trip(boxes, width, height, short_side=600):
    """The GT boxes after a test-time resize and back, in float32, as a PredCls model saves them."""
    scale = np.float32(short_side / min(width, height))
    return ((np.asarray(boxes, np.float32) * scale) * np.float32(1 / scale)).astype(np.float32)


def simulated_prediction(rng, entry, n_predicates):
    """A PredCls BoxList of a GT entry: all ordered pairs, sorted by their best predicate score."""
    boxes = [a["bbox"] for a in entry["annotations"]]
    labels = np.array([s["category_id"] + 1 for s in entry["segments_info"]], np.int64)
    n = len(boxes)
    pairs = np.array([(s, o) for s in range(n) for o in range(n) if s != o] or [(0, 0)], np.int64)
    logits = rng.normal(0, 1, (len(pairs), n_predicates + 1))
    for s, o, p in entry["relations"]:
        logits[(pairs[:, 0] == s) & (pairs[:, 1] == o), p + 1] += rng.uniform(0.5, 4)
    scores = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    order = np.argsort(-scores[:, 1:].max(axis=1), kind="stable")
    scores = scores[order].astype(np.float32)
    fields = {"pred_labels": labels, "pred_scores": np.ones(n, np.float32), "rel_pair_idxs": pairs[order],
              "pred_rel_scores": scores, "pred_rel_labels": scores[:, 1:].argmax(axis=1) + 1, "labels": labels}
    size = (entry["width"], entry["height"])
    return torchsave.BoxList(resized_round_trip(boxes, *size), size, extra_fields=fields)


def groundtruth(entry):
    """The evaluation GT BoxList Scene-Graph-Benchmark saves beside the predictions."""
    relations = np.array(entry["relations"], np.int64).reshape(-1, 3) + [0, 0, 1]
    labels = np.array([s["category_id"] + 1 for s in entry["segments_info"]], np.int64)
    return torchsave.BoxList([a["bbox"] for a in entry["annotations"]], (entry["width"], entry["height"]),
                             extra_fields={"labels": labels, "relation_tuple": relations})


def evaluated_entries(gt):
    test_ids = {str(i) for i in gt["test_image_ids"]}
    return [e for e in gt["data"] if str(e["image_id"]) in test_ids and e["relations"]]


def write_model_output(path, gt, seed):
    """eval_results.pytorch of the simulated PredCls model for the evaluated images of gt."""
    rng, entries = np.random.default_rng(seed), evaluated_entries(gt)
    predictions = [simulated_prediction(rng, entry, len(gt["predicate_classes"])) for entry in entries]
    torchsave.save(path, {"groundtruths": [groundtruth(e) for e in entries], "predictions": predictions},
                   legacy=True)


def write_zeroshot(path, gt):
    """A Scene-Graph-Benchmark zero-shot file: the test triplet types absent from the training entries."""
    test_ids = {str(i) for i in gt["test_image_ids"]}

    def types(entries):
        return {(e["segments_info"][s]["category_id"] + 1, e["segments_info"][o]["category_id"] + 1, p + 1)
                for e in entries for s, o, p in e["relations"]}

    unseen = types(evaluated_entries(gt)) - types(e for e in gt["data"] if str(e["image_id"]) not in test_ids)
    torchsave.save(path, np.array(sorted(unseen), np.int64).reshape(-1, 3), legacy=True)


def make_demo(out, seed=0, n_images=120):
    """Every file of the demo under out; returns {name: path}."""
    out = Path(out)
    raw = write_raw(out / "raw", seed, n_images)
    paths = {"gt": out / "vg150_test.json", "results": out / "raw" / "eval_results.pytorch",
             "zeroshot_raw": out / "raw" / "zeroshot_triplet.pytorch", "zeroshot": out / "zeroshot.json",
             "pred": out / "pred.zip"}
    vg150.convert(raw["h5"], raw["dicts"], raw["image_data"], paths["gt"], num_val=5)
    gt = json.loads(paths["gt"].read_text())
    write_model_output(paths["results"], gt, seed)
    write_zeroshot(paths["zeroshot_raw"], gt)
    zeroshot.convert(paths["zeroshot_raw"], paths["zeroshot"], gt=paths["gt"])
    sgb.convert(paths["results"], paths["pred"], paths["gt"], task="predcls")
    return paths


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="demo/vg")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--images", type=int, default=120)
    args = parser.parse_args(argv)
    for name, path in make_demo(args.out, args.seed, args.images).items():
        print(f"{name}: {path}")


if __name__ == "__main__":
    main()
