"""Shared helpers: build tiny datasets on disk and evaluate them."""

import json
import zipfile
from pathlib import Path

import numpy as np

import sgeval
from tools import synth

ROOT = Path(__file__).resolve().parents[1]  # the repository root (configs/, sgeval.py, ...)

THINGS = ["person", "horse", "dog"]
STUFF = ["grass", "sky"]
PREDICATES = ["riding", "on", "beside", "holding"]


def cells(height, width, *spans):
    """A bool (H, W) mask that is True on the given (row, col_start, col_stop) spans."""
    mask = np.zeros((height, width), bool)
    for row, start, stop in spans:
        mask[row, start:stop] = True
    return mask


def gt_image(image_id, masks, categories, relations, split="test"):
    masks = np.asarray(masks, bool).reshape(len(categories), *np.shape(masks)[-2:])
    return {"image_id": str(image_id), "height": masks.shape[1], "width": masks.shape[2],
            "split": split, "categories": list(categories), "masks": masks,
            "boxes": [synth.tight_box(m) for m in masks], "relations": [list(r) for r in relations]}


def pred_image(image_id, masks, categories, triplets, ng_triplets=None, boxes=None, scores=None):
    masks = None if masks is None else np.asarray(masks, bool).reshape(len(categories), *np.shape(masks)[-2:])
    if boxes is None:
        boxes = [synth.tight_box(m) for m in masks] if masks is not None else [[0, 0, 0, 0]] * len(categories)
    instances = [{"category": int(c), "bbox": [float(v) for v in b]} for c, b in zip(categories, boxes)]
    for instance, score in zip(instances, scores or []):
        instance["score"] = score
    record = {"id": str(image_id), "instances": instances, "triplets": [list(t) for t in triplets]}
    if ng_triplets is not None:
        record["ng_triplets"] = [list(t) for t in ng_triplets]
    if masks is not None:
        record["masks"] = masks
    return record


def write_case(tmp_path, images, predictions, mode="mask", pred_name="pred.zip",
               predicates=PREDICATES):
    """Write GT and predictions; return the config values that point at them."""
    dataset = {"thing_classes": THINGS, "stuff_classes": STUFF, "predicate_classes": list(predicates),
               "images": images}
    gt = synth.write_gt(dataset, tmp_path / "gt")
    if mode == "box":
        predictions = [{k: v for k, v in p.items() if k != "masks"} for p in predictions]
    pred = sgeval.write_predictions(tmp_path / pred_name, predictions)
    values = {"gt": str(gt), "pred": str(pred)}
    if mode == "mask":
        values["gt_seg"] = str(tmp_path / "gt" / "panoptic")
    return values


def run_case(tmp_path, images, predictions, mode="mask", **config):
    values = write_case(tmp_path, images, predictions, mode=mode)
    return sgeval.evaluate(sgeval.make_config({**values, **config}))


def write_train_gt(path, images):
    """A minimal annotation file for `train_gt`: images = [(categories, relations)], all training."""
    data = [{"image_id": f"t{index}", "segments_info": [{"id": j + 1, "category_id": c} for j, c in enumerate(cats)],
             "relations": [list(r) for r in relations]} for index, (cats, relations) in enumerate(images)]
    path.write_text(json.dumps({"data": data, "test_image_ids": []}))
    return path


def write_zip(path, members):
    """A ZIP holding members = {name: bytes}; returns its path as a string."""
    with zipfile.ZipFile(path, "w") as archive:
        for name, payload in members.items():
            archive.writestr(name, payload)
    return str(path)
