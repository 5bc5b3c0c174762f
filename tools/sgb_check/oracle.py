"""Score raw predictions with Scene-Graph-Benchmark.pytorch's own VG relation evaluation (the reference
for sgeval's sgb protocol).

    tools/sgb_check/build/venv/bin/python -m tools.sgb_check.oracle --data DIR --task sgdet|sgcls|predcls \
        --out numbers.json [--quiet]

DIR is what make_data.py writes. The GT comes from SGB's own code: load_graphs(DIR/roidb.h5, 'test',
num_im=-1, num_val_im=5000, filter_empty_rels=True, filter_non_overlap=False), as paths_catalog.py
sets them for a relation test, and VGDataset.get_groundtruth(i, evaluation=True) / get_img_info(i) on a
VGDataset whose __init__ is not run (its attributes are set from load_graphs and DIR/image_data.json;
see sgb_env.STAND_INS). The predictions are DIR/raw/<task>/<i>.npz made into BoxLists.

run() is do_vg_evaluation (vg_eval.py:17-190) for iou_types ('relations',), line by line with SGB's
own pieces: each prediction resized to the image size (vg_eval.py:51), the GT from get_groundtruth,
the seven evaluators registered, evaluate_relation_of_one_image per image, calculate_mean_recall, and
the print strings. The numbers are those the print strings show (np.mean of the per-image lists; mR
as computed; A@k = mean(hit) / mean(count)), at full precision. The images recorded and SGB's
no-graph-constraint list (argsort_desc(...)[:100]) are captured on the way without changing anything.
"""

import argparse
import contextlib
import io
import json
import sys
import warnings
from pathlib import Path

import numpy as np
import torch

from tools.oracle_common import boxlists, without_repeats, write_json
from tools.sgb_check import sgb_env

KS = (20, 50, 100)
TASKS = ("sgdet", "sgcls", "predcls")
IOU_THRESHOLD = 0.5  # cfg.TEST.RELATION.IOU_THRESHOLD
NUM_REL_CATEGORY = 51  # cfg.MODEL.ROI_RELATION_HEAD.NUM_CLASSES
PREDICATE_NAMES = ["__background__"] + [f"predicate_{p}" for p in range(1, NUM_REL_CATEGORY)]
LOG = sys.stderr  # where SGB's print output and result string go (--quiet: nowhere)


def image_data(data):
    return json.loads(Path(data, "image_data.json").read_text())


def dataset(data, split="test", filter_empty_rels=True, dedup=False):
    """SGB's VGDataset over DIR/roidb.h5, __init__ replaced by what it would set (sgb_env.STAND_INS).
    dedup: the GT relation rows without exact repeats (a mutant's rule, not SGB's)."""
    vg = sgb_env.load().visual_genome
    ds = vg.VGDataset.__new__(vg.VGDataset)
    ds.split, ds.custom_eval, ds.flip_aug = split, False, False
    ds.filter_non_overlap = ds.filter_duplicate_rels = False  # both are train-only (visual_genome.py:48-49)
    ds.ind_to_predicates = PREDICATE_NAMES
    ds.split_mask, ds.gt_boxes, ds.gt_classes, ds.gt_attributes, ds.relationships = vg.load_graphs(
        str(Path(data, "roidb.h5")), split, -1, num_val_im=0 if split == "train" else 5000,
        filter_empty_rels=filter_empty_rels, filter_non_overlap=False)
    ds.img_info = [image_data(data)[i] for i in np.flatnonzero(ds.split_mask)]
    if dedup:
        ds.relationships = without_repeats(ds.relationships)
    return ds


def predictions(data, task, n):
    """DIR/raw/<task>/0.npz ... as the relation post-processor's BoxLists (network input size)."""
    return boxlists(sgb_env.load().BoxList, data, task, n)


def run(ds, preds, task, zeroshot_file):
    """do_vg_evaluation for iou_types ('relations',) -> (result_dict, result_str, recorded image
    positions, SGB's NG lists by image position, the resized predictions)."""
    ns = sgb_env.load()
    sgg_eval, vg_eval = ns.sgg_eval, ns.vg_eval
    zeroshot_triplet = torch.load(zeroshot_file, map_location=torch.device("cpu")).long().numpy()  # vg_eval.py:26
    mode = task  # vg_eval.py:32-38: USE_GT_BOX and USE_GT_OBJECT_LABEL -> predcls, USE_GT_BOX -> sgcls

    groundtruths = []  # vg_eval.py:45-54
    for image_id, prediction in enumerate(preds):
        img_info = ds.get_img_info(image_id)
        preds[image_id] = prediction.resize((img_info["width"], img_info["height"]))
        groundtruths.append(ds.get_groundtruth(image_id, evaluation=True))

    result_dict, evaluator = {}, {}  # vg_eval.py:115-150
    for key, make in (("eval_recall", sgg_eval.SGRecall), ("eval_nog_recall", sgg_eval.SGNoGraphConstraintRecall),
                      ("eval_zeroshot_recall", sgg_eval.SGZeroShotRecall),
                      ("eval_ng_zeroshot_recall", sgg_eval.SGNGZeroShotRecall),
                      ("eval_pair_accuracy", sgg_eval.SGPairAccuracy)):
        evaluator[key] = make(result_dict)
        evaluator[key].register_container(mode)
    for key, make in (("eval_mean_recall", sgg_eval.SGMeanRecall), ("eval_ng_mean_recall", sgg_eval.SGNGMeanRecall)):
        evaluator[key] = make(result_dict, NUM_REL_CATEGORY, ds.ind_to_predicates, print_detail=True)
        evaluator[key].register_container(mode)
    global_container = {"zeroshot_triplet": zeroshot_triplet, "result_dict": result_dict, "mode": mode,
                        "multiple_preds": False, "num_rel_category": NUM_REL_CATEGORY, "iou_thres": IOU_THRESHOLD,
                        "attribute_on": False, "num_attributes": 201}  # vg_eval.py:152-160

    recorded, ng_lists, argsort_desc = [], {}, sgg_eval.argsort_desc

    def observed_argsort_desc(scores):  # sgg_eval.py:123 calls it once per image, for the NG list
        order = argsort_desc(scores)
        ng_lists[position] = order[:100]
        return order

    sgg_eval.argsort_desc = observed_argsort_desc
    try:
        with contextlib.redirect_stdout(LOG):  # evaluate_relation_of_one_image may print (sgcls counts)
            for position, (groundtruth, prediction) in enumerate(zip(groundtruths, preds)):  # vg_eval.py:164-165
                before = len(result_dict[mode + "_recall"][20])
                vg_eval.evaluate_relation_of_one_image(groundtruth, prediction, global_container, evaluator)
                if len(result_dict[mode + "_recall"][20]) > before:
                    recorded.append(position)
            evaluator["eval_mean_recall"].calculate_mean_recall(mode)  # vg_eval.py:168-169
            evaluator["eval_ng_mean_recall"].calculate_mean_recall(mode)
            result_str = "".join(evaluator[key].generate_print_string(mode) for key in (
                "eval_recall", "eval_nog_recall", "eval_zeroshot_recall", "eval_ng_zeroshot_recall",
                "eval_mean_recall", "eval_ng_mean_recall") + (("eval_pair_accuracy",) if mode != "sgdet" else ()))
    finally:
        sgg_eval.argsort_desc = argsort_desc
    return result_dict, result_str, recorded, ng_lists, preds


def numbers(result_dict, mode, recorded, image_ids):
    """What the print strings show, unrounded; the images recorded; per-image R."""
    mean = lambda key, k: float(np.mean(result_dict[f"{mode}_{key}"][k]))  # noqa: E731
    out = {}
    for family, key in (("R", "recall"), ("ngR", "recall_nogc"), ("zR", "zeroshot_recall"),
                        ("ngzR", "ng_zeroshot_recall")):
        out.update({f"{family}@{k}": mean(key, k) for k in KS})
    out.update({f"mR@{k}": float(result_dict[f"{mode}_mean_recall"][k]) for k in KS})
    out.update({f"mNgR@{k}": float(result_dict[f"{mode}_ng_mean_recall"][k]) for k in KS})
    if mode != "sgdet":  # SGPairAccuracy.generate_print_string, printed when USE_GT_BOX
        out.update({f"A@{k}": mean("accuracy_hit", k) / mean("accuracy_count", k) for k in KS})
    out["images_recorded"] = len(result_dict[f"{mode}_recall"][20])
    out["images_zeroshot"] = len(result_dict[f"{mode}_zeroshot_recall"][20])
    out["mR@100_per_predicate"] = [float(v) for v in result_dict[f"{mode}_mean_recall_list"][100]]
    out["per_image_R"] = {str(image_ids[p]): [result_dict[f"{mode}_recall"][k][i] for k in KS]
                          for i, p in enumerate(recorded)}
    return out


def score(data, task, dedup=False):
    """(SGB's numbers, the resized predictions, SGB's NG lists by image position) for DIR and task."""
    ds = dataset(data, dedup=dedup)
    preds = predictions(data, task, len(ds.img_info))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # np.mean([]) of an empty zR list
        result_dict, result_str, recorded, ng_lists, preds = run(ds, preds, task, Path(data, "zeroshot_triplet.pytorch"))
    print(result_str, file=LOG)
    return numbers(result_dict, task, recorded, [info["image_id"] for info in ds.img_info]), preds, ng_lists


def quiet():
    global LOG
    LOG = io.StringIO()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="a folder written by make_data.py")
    parser.add_argument("--task", required=True, choices=TASKS)
    parser.add_argument("--out", required=True, help="JSON file to write")
    parser.add_argument("--quiet", action="store_true", help="do not print SGB's result string (stderr)")
    args = parser.parse_args()
    if args.quiet:
        quiet()
    out, _, _ = score(args.data, args.task)
    write_json(args.out, out)
    print(f"{args.out}: " + ", ".join(f"{key} {value:.4f}" for key, value in out.items()
                                      if "@" in key and not key.endswith("per_predicate")) +
          f"; {out['images_recorded']} images recorded, {out['images_zeroshot']} with zero-shot rows")


if __name__ == "__main__":
    main()
