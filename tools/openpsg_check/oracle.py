"""Score predictions with OpenPSG's own sgdet evaluation (the reference for sgeval's openpsg protocol).

    tools/openpsg_check/build/venv/bin/python -m tools.openpsg_check.oracle --gt psg.json --gt-seg PANOPTIC_ROOT --method pan_seg|bbox \
        (--raw DIR | --pred PRED.zip) --out numbers.json [--quiet]

The GT is built by OpenPSG's PanopticSceneGraphDataset itself (psg.py: __init__, get_ann_info and
evaluate, as the test configs set it up: split='test', all_bboxes=True), and the metrics come from
its evaluate(metric='sgdet', iou_thrs=0.5, detection_method=METHOD), i.e. sgg_evaluation.

--raw DIR: 0.npz ... N-1.npz, one OpenPSG Result per evaluated GT image in psg.json order; every key
  is passed to Result(...) as it is (masks, refine_bboxes, labels, rel_pair_idxes, rel_dists, ...).
  An npz without 'refine_bboxes' is a Result whose refine_bboxes is None (OpenPSG skips it).
--pred ZIP: an sgeval prediction read by sgeval's own reader (this repository's), as Results: labels =
  category + 1, refine_bboxes = [bbox, score] (score 1.0 when absent; bbox zeros in pan_seg mode,
  where OpenPSG never reads it), masks from the TIFF, rel_pair_idxes = triplets[:, :2], rel_dists =
  one-hot at predicate + 1 (so OpenPSG's argmax gives the written predicate). An image without a
  record is a Result whose refine_bboxes is None. ng_triplets are not used: OpenPSG has no such field.
"""

import argparse
import contextlib
import os
import sys
import warnings
from pathlib import Path

import numpy as np

import sgeval
from tools.openpsg_check import openpsg_env
from tools.oracle_common import write_json

ROOT = Path(__file__).resolve().parents[2]  # the sgeval repository
KS = (20, 50, 100)


def gt_dataset(ns, gt, gt_seg):
    return ns.psg.PanopticSceneGraphDataset(ann_file=gt, pipeline=[], img_prefix=gt_seg, seg_prefix=gt_seg,
                                            split="test", all_bboxes=True, test_mode=True)


def raw_results(ns, directory, n):
    names = sorted(p.name for p in Path(directory).glob("*.npz"))
    if names != sorted(f"{i}.npz" for i in range(n)):
        sys.exit(f"{directory}: expected 0.npz ... {n - 1}.npz, one per evaluated GT image ({n}); found {len(names)}")
    for i in range(n):
        with np.load(Path(directory, f"{i}.npz"), allow_pickle=False) as npz:
            yield ns.Result(**{key: npz[key] for key in npz.files})


def pred_results(ns, pred, gt, gt_seg, dataset, method):
    truth = sgeval.read_gt(gt, gt_seg if method == "pan_seg" else None)
    problems = []
    source, records = sgeval.prediction_records(pred, len(truth.object_classes), len(truth.predicate_classes),
                                                "mask" if method == "pan_seg" else "box", problems)
    records = {record.image_id: record for record in records}
    if problems:
        sys.exit("\n".join(problems))
    n_columns = len(truth.predicate_classes) + 1
    for d in dataset.data:
        record, height, width = records.get(str(d["image_id"])), d["height"], d["width"]
        if record is None:
            yield ns.Result(refine_bboxes=None)
            continue
        n = len(record.categories)
        masks = np.zeros((n, height, width), bool)
        if n and record.seg_filename:
            bits = sgeval.load_pred_masks(source, record, height, width)
            masks = np.unpackbits(bits.view(np.uint8), axis=1, count=height * width).reshape(n, height, width) != 0
        boxes = record.boxes if record.boxes is not None else np.zeros((n, 4))
        scores = record.scores if record.scores is not None else np.ones(n)
        rel_dists = np.zeros((len(record.triplets), n_columns), np.float32)
        rel_dists[np.arange(len(record.triplets)), record.triplets[:, 2] + 1] = 1.0
        yield ns.Result(labels=record.categories + 1, refine_bboxes=np.column_stack([boxes, scores]), masks=masks,
                        rel_pair_idxes=record.triplets[:, :2], rel_dists=rel_dists)


def run(ns, dataset, results, method):
    """OpenPSG's evaluate, with its result dicts and the images it recorded captured on the way."""
    captured, recorded = {}, []
    sgg_eval = ns.sgg_eval
    recall_class, one_image = sgg_eval.SGRecall, sgg_eval.evaluate_relation_of_one_image

    class SGRecall(recall_class):  # the three evaluators share SGRecall's two dicts
        def __init__(self, result_dict, nogc_result_dict, *args, **kwargs):
            captured.update(result_dict=result_dict, nogc_result_dict=nogc_result_dict, several=0)
            super().__init__(result_dict, nogc_result_dict, *args, **kwargs)

        def calculate_recall(self, global_container, local_container, mode):
            local_container = super().calculate_recall(global_container, local_container, mode)
            captured["several"] += sum(len(hits) > 1 for hits in local_container["pred_to_gt"])
            return local_container

    image_ids = {}

    def evaluate_relation_of_one_image(groundtruth, prediction, global_container, evaluator):
        if not image_ids:  # evaluate() has built dataset.test_gt_results, one per dataset.data entry
            image_ids.update((id(gt), str(d["image_id"])) for gt, d in zip(dataset.test_gt_results, dataset.data))
        before = len(global_container["result_dict"]["sgdet_recall"][20])
        one_image(groundtruth, prediction, global_container, evaluator)
        if len(global_container["result_dict"]["sgdet_recall"][20]) > before:
            recorded.append(image_ids[id(groundtruth)])

    sgg_eval.SGRecall, sgg_eval.evaluate_relation_of_one_image = SGRecall, evaluate_relation_of_one_image
    try:
        with contextlib.redirect_stdout(openpsg_env.LOG):  # psg.py prints progress to stdout
            formatted = dataset.evaluate(results, metric="sgdet", iou_thrs=0.5, detection_method=method)
    finally:
        sgg_eval.SGRecall, sgg_eval.evaluate_relation_of_one_image = recall_class, one_image
    return formatted, captured, recorded


def numbers(formatted, captured, recorded, method):
    result_dict, nogc_result_dict = captured["result_dict"], captured["nogc_result_dict"]
    recall = result_dict["sgdet_recall"]
    out = {f"R@{k}": float(formatted[f"sgdet_recall_R_{k}"]) for k in KS}
    out.update({f"mR@{k}": float(formatted[f"sgdet_mean_recall_mR_{k}"]) for k in KS})
    if method == "bbox":  # nogc_thres_num is [num_predicates - 1]: one key
        (ngc,) = nogc_result_dict["sgdet_recall"]
        out.update({f"ngR@{k}": float(np.mean(nogc_result_dict["sgdet_recall"][ngc][k])) for k in KS})
        out.update({f"mNgR@{k}": float(nogc_result_dict["sgdet_mean_recall"][ngc][k]) for k in KS})
    out["images_recorded"] = len(recall[20])
    out["rows_matching_several_gt"] = captured["several"]  # graph constraint: len(pred_to_gt[i]) > 1
    out["mR@100_per_predicate"] = [float(v) for v in result_dict["sgdet_mean_recall_list"][100]]
    out["per_image_R"] = {image_id: [recall[k][i] for k in KS] for i, image_id in enumerate(recorded)}
    return out


def score(gt, gt_seg, method, raw=None, pred=None):
    """OpenPSG's numbers (numbers()) for raw results (--raw) or an sgeval prediction (--pred)."""
    ns = openpsg_env.load()
    dataset = gt_dataset(ns, str(gt), str(gt_seg))  # psg.py joins strings
    if raw:
        results = list(raw_results(ns, raw, len(dataset)))
    else:
        results = list(pred_results(ns, pred, gt, gt_seg, dataset, method))
    out = numbers(*run(ns, dataset, results, method), method)
    return {"method": method, "gt": str(gt), "source": str(raw or pred), "gt_images": len(dataset), **out}


def quiet():
    """Silence OpenPSG's log and numpy's warnings on its means of empty lists (nogc, pan_seg)."""
    openpsg_env.LOG = open(os.devnull, "w")
    warnings.simplefilter("ignore", RuntimeWarning)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gt", required=True, help="psg.json")
    parser.add_argument("--gt-seg", required=True, help="folder of the panoptic PNGs (pan_seg_file_name)")
    parser.add_argument("--method", required=True, choices=("pan_seg", "bbox"))
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--raw", help="folder of 0.npz ... N-1.npz")
    source.add_argument("--pred", help="sgeval prediction (.zip, folder or .json)")
    parser.add_argument("--out", required=True, help="JSON file to write")
    parser.add_argument("--quiet", action="store_true", help="do not print OpenPSG's log (stderr)")
    args = parser.parse_args()

    if args.quiet:
        quiet()
    out = score(args.gt, args.gt_seg, args.method, args.raw, args.pred)
    write_json(args.out, out)
    print(f"{args.out}: " + ", ".join(f"{key} {out[key]:.4f}" for key in out
                                      if "@" in key and not key.endswith("per_predicate")) +
          f"; {out['images_recorded']} of {out['gt_images']} images recorded")


if __name__ == "__main__":
    main()
