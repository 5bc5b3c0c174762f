"""Panoptic quality by the tools' own code, unmodified, on make_data's files (the reference for sgeval's PQ).

    tools/pq_check/build/venv/bin/python -m tools.pq_check.oracle --data DIR --out numbers.json [--quiet]

- panopticapi: pq_compute(gt_json, pred_json) on DIR/coco/ (COCO-panoptic PNG + segments_info). Its GT
  json is psg.json's evaluated images (test ids with >= 1 relation, psg.json order) as COCO-panoptic
  annotations (file_name = pan_seg_file_name; segments_info id, category_id, iscrowd, area as
  written) and the categories thing_classes + stuff_classes, ids 0.., isthing 1 / 0.
- openpsg: OpenPSG's PanopticSceneGraphDataset(split='test') evaluate(metric=['PQ']) on DIR/pan/ as
  Result(pan_results=...), through mmdet 2.20.0's CocoPanopticDataset (_pan2json, evaluate_pan_json).
- merge_hilo / merge_psgtr: fair-psgg's convert(anno, results, mode) on DIR/masks/ (Results with labels =
  category + 1, masks, refine_bboxes [0, 0, 0, 0, score], one relation row at the top-scored mask);
  each output's node map becomes a PNG (id = node + 1, -1 -> 0) with segments_info (category =
  box_label[node]) for panopticapi's pq_compute. The node maps go to DIR/merged_<mode>/<id>.npy.

Every tool's PQStat (per category IoU sum, TP, FP, FN) is captured on the way, and each image's
statistics come from the tool's own pq_compute_single_core run on that image alone.
"""

import argparse
import contextlib
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image

from tools.pq_check import make_data, pq_env

MODES = ("hilo", "psgtr")


def evaluated(psg):
    test_ids = set(psg["test_image_ids"])
    return [d for d in psg["data"] if d["image_id"] in test_ids and d["relations"]]


def categories_of(psg):
    names = psg["thing_classes"] + psg["stuff_classes"]
    return [{"id": i, "name": name, "isthing": int(i < len(psg["thing_classes"]))} for i, name in enumerate(names)]


def panopticapi_gt(psg):
    annotations = [{"image_id": d["image_id"], "file_name": d["pan_seg_file_name"],
                    "segments_info": [{key: s[key] for key in ("id", "category_id", "iscrowd", "area")}
                                      for s in d["segments_info"]]} for d in evaluated(psg)]
    return {"annotations": annotations, "categories": categories_of(psg)}


def stat_table(pq_stat):
    """{category: [iou, tp, fp, fn]} of a PQStat, categories with a count only."""
    table = {}
    for category, stat in sorted(pq_stat.pq_per_cat.items()):
        if stat.tp or stat.fp or stat.fn or stat.iou:
            table[str(category)] = [float(stat.iou), int(stat.tp), int(stat.fp), int(stat.fn)]
    return table


def summary(results):
    """pq_compute's or evaluate_pan_json's {All, Things, Stuff, per_class / classwise} as plain JSON values."""
    per_class = results.get("per_class", results.get("classwise"))
    out = {name: {key: float(value) if key != "n" else int(value) for key, value in results[name].items()}
           for name in ("All", "Things", "Stuff")}
    out["per_class"] = {str(c): {key: float(v) for key, v in values.items()} for c, values in per_class.items()}
    return out


@contextlib.contextmanager
def captured(module, name, on_call):
    """module.name replaced by a wrapper that calls on_call(original, *args) and returns its result."""
    original = getattr(module, name)
    setattr(module, name, lambda *args, **kwargs: on_call(original, *args, **kwargs))
    try:
        yield
    finally:
        setattr(module, name, original)


def per_image_stats(single_core, pairs, *args):
    """{image id: stats} from the tool's pq_compute_single_core on each image alone."""
    return {str(gt["image_id"]): stat_table(single_core(0, [(gt, pred)], *args)) for gt, pred in pairs}


def run_panopticapi(ns, psg, gt_folder, pred_json, pred_folder):
    record = {}

    def multi_core(original, pairs, gt_dir, pred_dir, categories):
        record["per_image"] = per_image_stats(ns.evaluation.pq_compute_single_core, pairs, gt_dir, pred_dir,
                                              categories)
        record["pq_stat"] = original(pairs, gt_dir, pred_dir, categories)
        return record["pq_stat"]

    with tempfile.TemporaryDirectory() as tmp:
        gt_json = Path(tmp, "gt.json")
        gt_json.write_text(json.dumps(panopticapi_gt(psg)))
        with captured(ns.evaluation, "pq_compute_multi_core", multi_core):
            results = ns.evaluation.pq_compute(str(gt_json), str(pred_json), gt_folder=str(gt_folder),
                                               pred_folder=str(pred_folder))
    return {"summary": summary(results), "stats": stat_table(record["pq_stat"]), "per_image": record["per_image"]}


def run_openpsg(ns, data):
    dataset = ns.psg.PanopticSceneGraphDataset(ann_file=str(data / "psg.json"), pipeline=[],
                                               img_prefix=str(data / "panoptic"), seg_prefix=str(data / "panoptic"),
                                               split="test", all_bboxes=True, test_mode=True)
    results = [ns.Result(pan_results=np.load(data / "pan" / f"{d['image_id']}.npy")) for d in dataset.data]
    record = {}

    def multi_core(original, pairs, gt_dir, pred_dir, categories, file_client=None):
        record["per_image"] = per_image_stats(ns.panoptic_evaluation.pq_compute_single_core, pairs, gt_dir,
                                              pred_dir, categories, file_client)
        record["pq_stat"] = original(pairs, gt_dir, pred_dir, categories, file_client)
        return record["pq_stat"]

    def parse(original, pq_results):
        record["pq_results"] = pq_results
        return original(pq_results)

    with captured(ns.coco_panoptic, "pq_compute_multi_core", multi_core), \
            captured(ns.coco_panoptic, "parse_pq_results", parse):
        returned = dataset.evaluate(results, metric=["PQ"])
    return {"returned": {key: float(value) for key, value in returned.items()},
            "summary": summary(record["pq_results"]), "stats": stat_table(record["pq_stat"]),
            "per_image": record["per_image"], "scored_images": sorted(record["per_image"])}


def fair_psgg_results(ns, data, psg):
    results = []
    for d in evaluated(psg):
        masks, scores, categories = (np.load(data / "masks" / f"{d['image_id']}.{name}.npy")
                                     for name in ("masks", "scores", "categories"))
        top = int(np.argsort(scores)[::-1][0])
        rel_dists = np.full((1, len(psg["predicate_classes"]) + 1), 0.5)
        results.append(ns.Result(labels=categories + 1, masks=masks,
                                 refine_bboxes=np.column_stack([np.zeros((len(scores), 4)), scores]),
                                 rel_pair_idxes=np.array([[top, top]]), rel_dists=rel_dists))
    return results


def run_merge(ns, data, psg, mode):
    """fair-psgg's convert in `mode`, then panopticapi on its node maps."""
    outputs = ns.fair_psgg.convert(psg, fair_psgg_results(ns, data, psg), mode)
    maps, labels, annotations = {}, {}, []
    with tempfile.TemporaryDirectory() as tmp:
        for output in outputs:
            image_id, node_map = output["img_id"], np.asarray(output["mask"])
            maps[image_id], labels[image_id] = node_map, [int(c) for c in output["box_label"]]
            present = sorted(set(node_map.ravel().tolist()) - {-1})
            make_data.write_png(Path(tmp, "pred", f"{image_id}.png"), node_map + 1)
            annotations.append({"image_id": image_id, "file_name": f"{image_id}.png",
                                "segments_info": [{"id": n + 1, "category_id": labels[image_id][n]} for n in present]})
        Path(tmp, "pred.json").write_text(json.dumps({"annotations": annotations}))
        numbers = run_panopticapi(ns, psg, data / "panoptic", Path(tmp, "pred.json"), Path(tmp, "pred"))
    (data / f"merged_{mode}").mkdir(exist_ok=True)
    for image_id, node_map in maps.items():
        np.save(data / f"merged_{mode}" / f"{image_id}.npy", node_map)
    return {**numbers, "labels": labels}


def score(data):
    data = Path(data)
    ns = pq_env.load()
    psg = json.loads((data / "psg.json").read_text())
    out = {"panopticapi": run_panopticapi(ns, psg, data / "panoptic", data / "coco" / "panoptic.json",
                                          data / "coco" / "panoptic"),
           "openpsg": run_openpsg(ns, data)}
    for mode in MODES:
        out[f"merge_{mode}"] = run_merge(ns, data, psg, mode)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="a make_data folder")
    parser.add_argument("--out", required=True, help="JSON file to write")
    parser.add_argument("--quiet", action="store_true", help="the tools' own output to /dev/null")
    args = parser.parse_args()
    sink = open(os.devnull, "w") if args.quiet else sys.stderr
    pq_env.LOG = sink
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        out = score(args.data)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    for name in out:
        print(f"{name}: " + ", ".join(f"{part} PQ {out[name]['summary'][part]['pq']:.6f}"
                                     for part in ("All", "Things", "Stuff")))


if __name__ == "__main__":
    main()
