"""Regenerate sgeval's Scene-Graph-Benchmark fixtures, tests/data/sgb/sgb-<seed>.zip, with SGB's own numbers.

    tools/sgb_check/build/venv/bin/python -m tools.sgb_check.make_fixtures [--out DIR]
    (from the repository root; default --out: tests/data/sgb)

For each fixture, make_data.generate writes the raw data (build/data/<name>/; every case of
make_data.CASES present), oracle.score gives SGB's numbers for sgdet, sgcls and predcls, and each
altered SGB evaluation of MUTANTS must change some of them (the data decide those rules). The zip
holds what sgeval reads and what SGB gave:

  gt.json              box-mode GT (sgeval.py docstring "Ground truth") of SGB's get_groundtruth
                       (float32 boxes, relation_tuple rows in order, duplicates kept; 0-based
                       classes and predicates), the test images without relations and the train
                       image included (load_graphs leaves them out; sgeval skips or trains on them)
  zeroshot.json        the zero-shot set, 0-based [subject class, object class, predicate] rows
  pred_<task>.json     the predictions SGB scored (after its resize), sgeval.write_predictions:
                       instances (pred_labels - 1, bbox, pred_scores), triplets = rel_pair_idxs
                       with argmax(pred_rel_scores[:, 1:]) (the first on ties), ng_triplets = the
                       first 150 entries of the stable NG ranking (make_data.ng_ranking), whose first
                       100 are checked equal to the list SGB built
  sgb_<task>.json      SGB's numbers (oracle.numbers, per-predicate list dropped)
  summary.json         make_data's case counts

The bytes depend only on the contents (sorted names, fixed times).
"""

import contextlib
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import torch

import sgeval
from tools.oracle_common import (fixtures_main, iou_plus_one_float64, iou_without_plus_one, patched, write_json,
                                 write_zip)
from tools.sgb_check import make_data, oracle, sgb_env

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = {"sgb-0": (0, 40), "sgb-1": (1, 40)}  # name: seed, test images
FAMILIES = ("R", "ngR", "zR", "ngzR", "mR", "mNgR", "A")
KEYS = [f"{f}@{k}" for f in FAMILIES for k in oracle.KS] + ["images_recorded", "images_zeroshot", "per_image_R"]


def strict_overlaps(boxes1, boxes2):
    iou = sgb_env.load().misc.bbox_overlaps(boxes1, boxes2)
    return np.where(iou == oracle.IOU_THRESHOLD, np.nextafter(iou, np.float32(0)), iou)


MUTANTS = {  # name: (context manager factory, dedup GT rows)
    "IoU without the +1 pixel": (lambda ns: patched(ns.misc, "boxlist_iou", iou_without_plus_one), False),
    "IoU in float64": (lambda ns: patched(ns.sgg_eval, "bbox_overlaps", iou_plus_one_float64), False),
    "IoU of exactly 0.5 is a miss": (lambda ns: patched(ns.sgg_eval, "bbox_overlaps", strict_overlaps), False),
    "GT duplicate rows removed": (lambda ns: contextlib.nullcontext(), True),
}


def gt_json(data):
    """sgeval's box-mode GT of every image SGB's dataset code gives (test without the relation
    filter, then train)."""
    entries, test_ids = [], []
    for split, ds in (("test", oracle.dataset(data, filter_empty_rels=False)), ("train", oracle.dataset(data, "train"))):
        for i, info in enumerate(ds.img_info):
            target = ds.get_groundtruth(i, evaluation=True)
            labels, boxes = target.get_field("labels").numpy(), target.bbox.numpy()
            entries.append({"image_id": info["image_id"], "height": info["height"], "width": info["width"],
                            "segments_info": [{"id": j + 1, "category_id": int(c) - 1} for j, c in enumerate(labels)],
                            "annotations": [{"bbox": [float(v) for v in box]} for box in boxes],
                            "relations": [[int(s), int(o), int(p) - 1]
                                          for s, o, p in target.get_field("relation_tuple").tolist()]})
            test_ids += [info["image_id"]] if split == "test" else []
    return {"thing_classes": [f"object_{c}" for c in range(1, make_data.N_CLASSES + 1)], "stuff_classes": [],
            "predicate_classes": oracle.PREDICATE_NAMES[1:], "test_image_ids": test_ids, "data": entries}


def prediction_records(preds, image_ids, task, sgb_ng_lists):
    """sgeval's records of SGB's resized predictions; the stable NG ranking must start with SGB's list."""
    for position, (pred, image_id) in enumerate(zip(preds, image_ids)):
        pairs, rel, scores, labels = (pred.get_field(name).numpy() for name in
                                      ("rel_pair_idxs", "pred_rel_scores", "pred_scores", "pred_labels"))
        ranking = make_data.ng_ranking(scores, pairs, rel, task)
        if position in sgb_ng_lists and not np.array_equal(ranking[:make_data.NG_LIST], sgb_ng_lists[position]):
            sys.exit(f"image {image_id} ({task}): SGB's no-graph-constraint list differs from the stable ranking")
        ranking = ranking[:make_data.NG_WRITTEN]
        yield {"id": str(image_id),
               "instances": [{"category": int(c) - 1, "bbox": [float(v) for v in box], "score": float(s)}
                             for c, box, s in zip(labels, pred.bbox.numpy(), scores)],
               "triplets": np.column_stack([pairs, rel[:, 1:].argmax(axis=1)]) if len(rel) else np.zeros((0, 3)),
               "ng_triplets": np.column_stack([pairs[ranking[:, 0]], ranking[:, 1]])}


def trimmed(numbers):
    return {key: numbers[key] for key in KEYS if key in numbers}


def check_mutants(data, sgb):
    """Every mutant changes some number of some task; returns {mutant: [changes]}."""
    ns, report = sgb_env.load(), {}
    for name, (context, dedup) in MUTANTS.items():
        changes = []
        for task in oracle.TASKS:
            with context(ns):
                mutant = oracle.score(data, task, dedup=dedup)[0]
            changes += [f"{task} {key} {sgb[task][key]:.4f} -> {mutant[key]:.4f}" for key in KEYS
                        if "@" in key and key in mutant and mutant[key] != sgb[task][key]]
        if not changes:
            sys.exit(f"{data}: the mutant '{name}' does not change SGB's numbers")
        report[name] = changes
        by_task = ", ".join(f"{task} {sum(c.startswith(task + ' ') for c in changes)}" for task in oracle.TASKS)
        print(f"{data.name}: {name}: {len(changes)} numbers change ({by_task}), e.g. "
              + "; ".join(changes[::max(1, len(changes) // 3)][:3]))
    return report


def write_fixture(name, seed, images, out):
    data = Path(__file__).resolve().parent / "build" / "data" / name
    shutil.rmtree(data, ignore_errors=True)
    data.mkdir(parents=True)
    make_data.generate(seed, images, data)
    files = {"gt.json": json.dumps(gt_json(data), indent=0).encode(),
             "zeroshot.json": json.dumps((torch.load(data / "zeroshot_triplet.pytorch").numpy() - 1).tolist()).encode(),
             "summary.json": (data / "summary.json").read_bytes()}
    sgb = {}
    for task in oracle.TASKS:
        sgb[task], preds, ng_lists = oracle.score(data, task)
        ids = [info["image_id"] for info in oracle.dataset(data).img_info]
        sgeval.write_predictions(data / f"pred_{task}.json", prediction_records(preds, ids, task, ng_lists))
        files[f"pred_{task}.json"] = (data / f"pred_{task}.json").read_bytes()
        write_json(data / f"sgb_{task}.json", trimmed(sgb[task]))
        files[f"sgb_{task}.json"] = (data / f"sgb_{task}.json").read_bytes()
    check_mutants(data, sgb)
    for member, content in files.items():
        (data / member).write_bytes(content)
    write_zip(out / f"{name}.zip", files)
    print(f"{out / name}.zip: {len(files)} files, {(out / f'{name}.zip').stat().st_size} bytes")


def main():
    oracle.quiet()
    fixtures_main(__doc__.split("\n\n")[0], ROOT / "tests" / "data" / "sgb", FIXTURES, write_fixture)


if __name__ == "__main__":
    main()
