"""Score raw predictions with PySGG's own Open Images evaluation (the reference for sgeval's oi protocol).

    tools/oi_check/build/venv/bin/python -m tools.oi_check.oracle --data DIR --task sgdet|sgcls|predcls \
        --out numbers.json [--results FOLDER] [--quiet]

DIR is what make_data.py writes. run() calls PySGG's oi_evaluation (evaluation/oi/__init__.py:10-85)
itself, unmodified, as its test loop does for an OIDataset with iou_types ('relations',): the
dataset is PySGG's OIDataset (its whole __init__: load_cate_info on categories_dict.json,
load_annotations on vrd-test-anno.json with filter_empty_rels=True), the predictions are the
BoxLists of DIR/raw/<task>/ at the network's input size. oi_evaluation resizes them to the image
size (oi/__init__.py:35-42), takes get_groundtruth(i, evaluation=True), writes eval_results.pytorch
with vg_eval.save_output into FOLDER (what make_fixtures.py stores), runs eval_classic_recall,
adapt_results and eval_rel_results, and returns w_final_score.

Nothing is changed to read the numbers: a profile hook (sys.setprofile) copies the locals of
eval_rel_results and eval_classic_recall when they return (recalls, recalls_per_img, topk_dets, the
mAPs and scores; rel_eval_result_dict), the per-image recall lists as eval_rel_results passes them
to np.mean (oi_evaluation.py:314, before it overwrites them with their means) and every ap_eval's
result (AP per predicate, rel then phr, oi_evaluation.py:331 and 349). The classic no-graph-
constraint lists are seen by wrapping sgg_eval.argsort_desc, which returns what it returned.

numbers() gives, at full precision: R@K and imgR@K (K = 1, 5, 10, 20, 50, 100; micro and per-image
recall of eval_rel_results), per_image_R, AP_rel and AP_phr per predicate, npos per predicate,
mAP_rel, wmAP_rel, mAP_phr, wmAP_phr, final_score, w_final_score (the one oi_evaluation returns);
classic_R@K, classic_ngR@K, classic_mR@K (K = 20, 50, 100: np.mean of the per-image lists and
SGMeanRecall's value, as the print strings show them), classic_mR_per_predicate, the images in the
classic lists and their per-image R.
"""

import argparse
import contextlib
import io
import logging
import random
import sys
import types
import warnings
from pathlib import Path

import numpy as np

from tools.oi_check import pysgg_env
from tools.oracle_common import boxlists, patched, without_repeats, write_json

KS = (1, 5, 10, 20, 50, 100)  # eval_rel_results' recalls (oi_evaluation.py:169-170)
CLASSIC_KS = (20, 50, 100)  # SGRecall & co.
TASKS = ("sgdet", "sgcls", "predcls")
LOG = sys.stderr  # where PySGG's prints, progress bars and logger go (--quiet: nowhere)
MEAN_LINE = 314  # oi_evaluation.py:314, recalls_per_img[k] = np.mean(recalls_per_img[k])


def dataset(data, split="test"):
    """PySGG's OIDataset over DIR/vrd-<split>-anno.json, built as DatasetCatalog.get('openimage_v4_<split>')
    and build_dataset build it (paths_catalog.py:176-195): split, img_dir, ann_file, cate_info_file,
    flip_aug False; the rest default (filter_duplicate_rels=True, which open_image.py:151 keeps for train
    only)."""
    ns = pysgg_env.load()
    with contextlib.redirect_stdout(LOG):  # load_annotations prints the number of images it leaves out
        return ns.open_image.OIDataset(split, img_dir=str(Path(data, "images")),
                                       ann_file=str(Path(data, f"vrd-{split}-anno.json")),
                                       cate_info_file=str(Path(data, "categories_dict.json")), flip_aug=False)


def predictions(data, task, n):
    """DIR/raw/<task>/0.npz ... as the relation head's BoxLists (network input size), fields in file order."""
    return boxlists(pysgg_env.load().BoxList, data, task, n)


class Capture:
    """While active: copies of what PySGG computes, read from its frames (sys.setprofile) and from
    sgg_eval.argsort_desc; nothing PySGG computes is changed."""

    def __init__(self, ns):
        self.ns = ns
        self.rel = None  # eval_rel_results' locals at return
        self.classic = None  # eval_classic_recall's locals at return
        self.per_image = {}  # k -> the per-image recall list of eval_rel_results
        self.ap_calls = []  # (rel_or_phr, ap, locals) per ap_eval call
        self.ng_lists = []  # the classic no-graph-constraint lists, (scores, order[:100]) per image

    def hook(self, frame, event, arg):
        name = frame.f_code.co_name
        if event == "return" and name == "eval_rel_results":
            self.rel = dict(frame.f_locals, returned=arg)
        elif event == "return" and name == "eval_classic_recall":
            self.classic = dict(frame.f_locals)
        elif event == "return" and name == "ap_eval":
            self.ap_calls.append((bool(frame.f_locals["rel_or_phr"]), float(arg[2]), dict(frame.f_locals)))
        elif event == "call" and name == "mean":
            caller = frame.f_back
            if caller is not None and caller.f_code.co_name == "eval_rel_results" and caller.f_lineno == MEAN_LINE:
                self.per_image[caller.f_locals["k"]] = [float(v) for v in frame.f_locals["a"]]

    def __enter__(self):
        sgg_eval = self.ns.sgg_eval
        self.argsort_desc = argsort_desc = sgg_eval.argsort_desc

        def observed(scores):  # sgg_eval.py:210, once per image with prediction rows
            order = argsort_desc(scores)
            self.ng_lists.append((scores.copy(), order[:100].copy()))
            return order

        sgg_eval.argsort_desc = observed
        sys.setprofile(self.hook)
        return self

    def __exit__(self, *exc):
        sys.setprofile(None)
        self.ns.sgg_eval.argsort_desc = self.argsort_desc


def run(data, task, folder=None, dedup=False):
    """oi_evaluation on DIR for task -> types.SimpleNamespace(dataset, predictions (resized by
    oi_evaluation), returned (its return value), capture). folder: where save_output writes
    eval_results.pytorch (and visual_info.json, evaluation_res.txt); None writes nothing.
    dedup: GT relation rows without exact repeats (a mutant's rule, not PySGG's)."""
    ns = pysgg_env.load()
    pysgg_env.set_task(task)
    ds = dataset(data)
    if dedup:
        ds.relationships = without_repeats(ds.relationships)
    preds = predictions(data, task, len(ds))
    if folder is not None:
        Path(folder).mkdir(parents=True, exist_ok=True)
    logger = logging.getLogger("oi_check.pysgg")
    logger.propagate = False
    logger.handlers = [logging.StreamHandler(LOG)]
    logger.setLevel(logging.INFO)
    random.seed(0)  # get_groundtruth draws which of two rows of one pair fills the 'relation' matrix (unused here)
    with warnings.catch_warnings(), contextlib.redirect_stdout(LOG), contextlib.redirect_stderr(LOG), \
            Capture(ns) as capture:
        warnings.simplefilter("ignore")  # sklearn's roc_curve on one class, in SGStagewiseRecall
        returned = ns.oi.oi_evaluation(ns.cfg, ds, preds, None if folder is None else str(folder), logger,
                                       iou_types=("relations",))
    return types.SimpleNamespace(dataset=ds, predictions=preds, returned=returned, capture=capture, task=task)


def numbers(result):
    """What eval_rel_results and eval_classic_recall computed, unrounded (the module docstring)."""
    ds, capture, mode = result.dataset, result.capture, result.task
    names = ds.ind_to_predicates[1:]
    image_ids = [Path(info["img_fn"]).stem for info in ds.img_info]
    rel = capture.rel
    res_dict = rel["returned"][1]
    out = {f"R@{k}": float(rel["recalls"][k]) for k in KS}
    out.update({f"imgR@{k}": float(rel["recalls_per_img"][k]) for k in KS})
    for key in ("mAP_rel", "wmAP_rel", "mAP_phr", "wmAP_phr", "final_score", "w_final_score"):
        out[key] = float(res_dict[key])
    out["returned"] = float(result.returned[0])  # oi_evaluation's return value: w_final_score
    aps = capture.ap_calls
    if len(aps) != 2 * len(names) or [r for r, _, _ in aps] != [True] * len(names) + [False] * len(names):
        raise RuntimeError("ap_eval was not called once per predicate for rel, then for phr")
    out["AP_rel"] = {name: ap for name, (_, ap, _) in zip(names, aps[:len(names)])}
    out["AP_phr"] = {name: ap for name, (_, ap, _) in zip(names, aps[len(names):])}
    out["npos"] = {name: int(n) for name, n in zip(names, rel["npos"])}
    out["images_evaluated"] = len(ds)
    out["per_image_R"] = {image: [capture.per_image[k][i] for k in KS] for i, image in enumerate(image_ids)}

    classic = capture.classic["rel_eval_result_dict"]
    for family, key in (("R", "recall"), ("ngR", "recall_nogc")):
        out.update({f"classic_{family}@{k}": float(np.mean(classic[f"{mode}_{key}"][k])) for k in CLASSIC_KS})
    out.update({f"classic_mR@{k}": float(classic[f"{mode}_mean_recall"][k]) for k in CLASSIC_KS})
    out["classic_mR_per_predicate"] = {str(k): dict(zip(names, map(float, classic[f"{mode}_mean_recall_list"][k])))
                                       for k in CLASSIC_KS}
    recorded = [i for i, p in enumerate(result.predictions) if len(p.get_field("rel_pair_idxs"))]  # vg_eval.py:461
    if len(recorded) != len(classic[f"{mode}_recall"][20]):
        raise RuntimeError("the classic lists do not hold the images with prediction rows")
    out["classic_images_recorded"] = len(recorded)
    out["classic_per_image_R"] = {image_ids[p]: [classic[f"{mode}_recall"][k][i] for k in CLASSIC_KS]
                                  for i, p in enumerate(recorded)}
    return out


# --- altered copies of PySGG's functions, for the checks of make_data.py and make_fixtures.py -----------


def mutated(module, replacements, tag):
    """A copy of PySGG's module with each (old, new) text replaced (old must occur exactly once), executed
    in the module's package (its relative imports resolve to the real modules)."""
    path = Path(module.__file__)
    source = path.read_text()
    for old, new in replacements:
        if source.count(old) != 1:
            raise RuntimeError(f"{path.name}: {old!r} occurs {source.count(old)} times, not once")
        source = source.replace(old, new)
    copy = types.ModuleType(f"{module.__package__}._oi_check_{tag}")
    copy.__file__, copy.__package__ = str(path), module.__package__
    exec(compile(source, f"{path} ({tag})", "exec"), copy.__dict__)  # noqa: S102 - PySGG's own source, altered
    return copy


def stable_argsort_desc(scores):
    """miscellaneous.argsort_desc with a stable sort: ties by flat index (row, then column)."""
    return np.column_stack(np.unravel_index(np.argsort(-scores.ravel(), kind="stable"), scores.shape))


@contextlib.contextmanager
def stable_sorts():
    """PySGG's evaluation with every unstable np.argsort made stable (ties: dataset order of the images,
    then the order within an image's list, then predicate index): oi_evaluation.py:203 and 211,
    ap_eval_rel.py:145, sgg_eval.py:210."""
    ns = pysgg_env.load()
    oi_eval = mutated(ns.oi_evaluation, [("np.argsort(-det_scores_prd, axis=1)",
                                          "np.argsort(-det_scores_prd, axis=1, kind='stable')")], "stable")
    ap_eval = mutated(ns.ap_eval_rel, [("np.argsort(-confidence)", "np.argsort(-confidence, kind='stable')")], "stable")
    oi_eval.ap_eval, oi_eval.argsort_desc = ap_eval.ap_eval, stable_argsort_desc
    with patched(ns.oi, "eval_rel_results", oi_eval.eval_rel_results), \
            patched(ns.sgg_eval, "argsort_desc", stable_argsort_desc):
        yield


def quiet():
    global LOG
    LOG = io.StringIO()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="a folder written by make_data.py")
    parser.add_argument("--task", required=True, choices=TASKS)
    parser.add_argument("--out", required=True, help="JSON file to write")
    parser.add_argument("--results", help="folder for PySGG's eval_results.pytorch (default: none written)")
    parser.add_argument("--quiet", action="store_true", help="do not show PySGG's output (stderr)")
    args = parser.parse_args()
    if args.quiet:
        quiet()
    out = numbers(run(args.data, args.task, args.results))
    write_json(args.out, out)
    print(f"{args.out}: " + ", ".join(f"{key} {out[key]:.4f}" for key in
                                      ("R@50", "R@100", "mAP_rel", "wmAP_rel", "mAP_phr", "wmAP_phr",
                                       "final_score", "w_final_score", "classic_R@50", "classic_mR@50")))


if __name__ == "__main__":
    main()
