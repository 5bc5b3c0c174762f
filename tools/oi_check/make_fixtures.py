"""Regenerate sgeval's Open Images fixtures, tests/data/oi/oi-<seed>.zip, with PySGG's own numbers.

    tools/oi_check/build/venv/bin/python -m tools.oi_check.make_fixtures [--out DIR]
    (from the repository root; default --out: tests/data/oi)

For each fixture, make_data.generate writes the data (build/data/<name>/; every case of
make_data.CASES present, PySGG's sorts checked), oracle.run scores sgdet, sgcls and predcls with
PySGG's oi_evaluation, which writes eval_results.pytorch, and each altered copy of PySGG's evaluation
in MUTANTS must change some number (the data decide those rules), while the stable sorts must change
none. The zip holds PySGG's raw inputs and what it gave:

  categories_dict.json, vrd-train-anno.json, vrd-val-anno.json, vrd-test-anno.json
                        the data in PySGG's layouts (make_data.py)
  eval_results_<task>.pytorch
                        what oi_evaluation saved (vg_eval.save_output): torch.save of
                        {'groundtruths': [BoxList], 'predictions': [BoxList]}, the predictions resized
                        to the image size, as PySGG's test writes it into its output folder
  pysgg_<task>.json     PySGG's numbers (oracle.numbers)
  gt.json               sgeval's box-mode GT (sgeval.py docstring "Ground truth") of PySGG's own
                        get_groundtruth(i, evaluation=True): the test entries in file order (the two
                        that load_annotations leaves out included, without relations), float32 boxes
                        clipped as clip_to_image clips them, relation_tuple rows in order (repeats
                        kept), 0-based classes and predicates; then the train entries as their JSON has
                        them (clipped). For the classic numbers through sgeval's sgb protocol.
  summary.json          make_data's case counts and, per mutant, how many numbers it changes

The bytes depend only on the contents (sorted names, fixed times; torch.save's own zip is
deterministic for the same objects).
"""

import contextlib
import json
import shutil
import sys
from pathlib import Path

import numpy as np

from tools.oi_check import make_data, oracle, pysgg_env
from tools.oracle_common import (fixtures_main, iou_plus_one_float64, iou_without_plus_one, patched, write_json,
                                 write_zip)

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = {"oi-0": (0, 30), "oi-1": (1, 30)}  # name: seed, evaluated test images


def flat(numbers):
    """{key: number} of every number of oracle.numbers (nested dicts as 'key/name'), per_image lists kept out."""
    out = {}
    for key, value in numbers.items():
        if isinstance(value, dict) and not key.endswith("per_image_R"):
            for name, inner in value.items():
                if isinstance(inner, dict):
                    out.update({f"{key}/{name}/{n}": v for n, v in inner.items()})
                else:
                    out[f"{key}/{name}"] = inner
        elif not isinstance(value, dict):
            out[key] = value
    return out


def nudged_overlaps(direction):
    """bbox_overlaps with an IoU of exactly 0.5 moved one ulp down (a strict >= test) or up (a lax > test)."""
    def overlaps(boxes1, boxes2):
        iou = pysgg_env.load().misc.bbox_overlaps(boxes1, boxes2)
        return np.where(iou == 0.5, np.nextafter(iou, np.float32(direction)), iou)

    return overlaps


@contextlib.contextmanager
def several(*contexts):
    with contextlib.ExitStack() as stack:
        for context in contexts:
            stack.enter_context(context)
        yield


def source_mutant(owner, module, function, replacements, tag):
    """owner.function replaced by function of a copy of module with replacements (oracle.mutated)."""
    return lambda ns: patched(getattr(ns, owner), function,
                                     getattr(oracle.mutated(getattr(ns, module), replacements, tag), function))


def rel_results_mutant(replacements, tag):
    return source_mutant("oi", "oi_evaluation", "eval_rel_results", replacements, tag)


def ap_mutant(replacements, tag):
    return source_mutant("oi_evaluation", "ap_eval_rel", "ap_eval", replacements, tag)


MUTANTS = {  # name: (context manager factory of pysgg_env.load(), dedup GT rows, must change a number)
    "IoU without the +1 pixel": (lambda ns: patched(ns.misc, "boxlist_iou", iou_without_plus_one), False, True),
    "IoU in float64": (lambda ns: several(*(patched(m, "bbox_overlaps", iou_plus_one_float64) for m in (
        ns.oi_evaluation, ns.ap_eval_rel, ns.sgg_eval))), False, True),
    "recall: an IoU of exactly 0.5 is a miss (>)": (
        lambda ns: patched(ns.oi_evaluation, "bbox_overlaps", nudged_overlaps(0)), False, True),
    "AP: an IoU of exactly 0.5 is a hit (>=)": (
        lambda ns: patched(ns.ap_eval_rel, "bbox_overlaps", nudged_overlaps(1)), False, True),
    "prd_k = 1 (the best predicate of a pair only)": (
        rel_results_mutant([("openimages\n    prd_k = 2", "openimages\n    prd_k = 1")], "prd_k"), False, True),
    "no score filter": (rel_results_mutant([("det_scores_top > 0.00001", "det_scores_top > -1.0")], "nofilter"),
                        False, True),
    "score filter >= 1e-5": (rel_results_mutant([("det_scores_top > 0.00001", "det_scores_top >= 0.00001")], "ge"),
                             False, True),
    "top 1000 instead of 100": (rel_results_mutant([("topk = 100", "topk = 1000")], "top1000"), False, True),
    "AP: a detection takes its best unvisited GT": (
        ap_mutant([("overlaps *= valid_mask", "overlaps *= valid_mask & ~np.asarray(visited, bool)")], "unvisited"),
        False, True),
    "AP: tied confidences in reverse order": (
        ap_mutant([("np.argsort(-confidence)", "np.lexsort((-np.arange(len(confidence)), -confidence))")], "reverse"),
        False, True),
    "AP without the precision envelope": (
        source_mutant("ap_eval_rel", "ap_eval_rel", "get_ap", [(
            "mpre[i - 1] = np.maximum(mpre[i - 1], mpre[i])", "mpre[i - 1] = mpre[i - 1]")], "envelope"), False, True),
    "mAP over the predicates of the test GT only": (rel_results_mutant([
        ("rel_mAP /= len(rel_prd_cats)", "rel_mAP /= sum(n > 0 for n in npos)"),
        ("phr_mAP /= len(rel_prd_cats)", "phr_mAP /= sum(n > 0 for n in npos)")], "present"), False, True),
    "GT duplicate rows removed": (lambda ns: contextlib.nullcontext(), True, True),
    "GT boxes not clipped": (lambda ns: patched(ns.BoxList, "clip_to_image",
                                                       lambda self, remove_empty=True: self), False, True),
    "scores in float64 (sbj * obj * prd)": (rel_results_mutant([(
        "det_scores_so = det_scores_sbj * det_scores_obj",
        "det_scores_so = det_scores_sbj.astype(np.float64) * det_scores_obj")], "f64scores"), False, False),
    "stable sorts everywhere (must change nothing)": (lambda ns: oracle.stable_sorts(), False, False),
}


def check_mutants(data, pysgg):
    """Every mutant that must change a number changes one, the stable sorts none -> {mutant: summary}."""
    ns, report = pysgg_env.load(), {}
    for name, (context, dedup, must_change) in MUTANTS.items():
        changes = []
        for task in oracle.TASKS:
            with context(ns):
                mutant = flat(oracle.numbers(oracle.run(data, task, dedup=dedup)))
            real = flat(pysgg[task])
            changes += [f"{task} {key} {real[key]:.4f} -> {mutant[key]:.4f}" for key in real
                        if mutant[key] != real[key]]
        if must_change and not changes:
            sys.exit(f"{data}: the mutant '{name}' does not change PySGG's numbers")
        if name.startswith("stable sorts") and changes:
            sys.exit(f"{data}: PySGG's numbers change under stable sorts: {changes[:3]}")
        by_task = {task: sum(c.startswith(task + " ") for c in changes) for task in oracle.TASKS}
        report[name] = {"numbers changed": len(changes), **by_task, "e.g.": changes[::max(1, len(changes) // 3)][:3]}
        print(f"{data.name}: {name}: {len(changes)} numbers change ({by_task}); e.g. "
              + "; ".join(report[name]["e.g."]))
    return report


def gt_json(data):
    """sgeval's box-mode GT of what PySGG's OIDataset gives (module docstring)."""
    ds = oracle.dataset(data)
    evaluated = {Path(info["img_fn"]).stem: i for i, info in enumerate(ds.img_info)}
    names = json.loads(Path(data, "categories_dict.json").read_text())
    entries, test_ids = [], []
    for split in ("test", "train"):
        for anno in json.loads(Path(data, f"vrd-{split}-anno.json").read_text()):
            width, height = anno["img_size"]
            if split == "test" and anno["img_fn"] in evaluated:
                target = ds.get_groundtruth(evaluated[anno["img_fn"]], evaluation=True)
                boxes, labels = target.bbox.numpy(), target.get_field("labels").numpy() - 1
                relations = [[int(s), int(o), int(p) - 1] for s, o, p in target.get_field("relation_tuple").tolist()]
            else:
                boxes = make_data.clipped(anno["bbox"], width, height) if anno["bbox"] else np.zeros((0, 4))
                labels, relations = anno["det_labels"], anno["rel"]
            entries.append({"image_id": anno["img_fn"], "height": height, "width": width,
                            "segments_info": [{"id": j + 1, "category_id": int(c)} for j, c in enumerate(labels)],
                            "annotations": [{"bbox": [float(v) for v in box]} for box in boxes],
                            "relations": [[int(v) for v in r] for r in relations]})
            test_ids += [anno["img_fn"]] if split == "test" else []
    return {"thing_classes": names["obj"], "stuff_classes": [], "predicate_classes": names["rel"],
            "test_image_ids": test_ids, "data": entries}


def write_fixture(name, seed, images, out):
    data = Path(__file__).resolve().parent / "build" / "data" / name
    shutil.rmtree(data, ignore_errors=True)
    data.mkdir(parents=True)
    summary = make_data.generate(seed, images, data)
    files = {member: (data / member).read_bytes() for member in (
        "categories_dict.json", "vrd-train-anno.json", "vrd-val-anno.json", "vrd-test-anno.json")}
    files["gt.json"] = json.dumps(gt_json(data), indent=0).encode()
    pysgg = {}
    for task in oracle.TASKS:
        results = data / "results" / task
        shutil.rmtree(results, ignore_errors=True)
        pysgg[task] = oracle.numbers(oracle.run(data, task, results))
        files[f"eval_results_{task}.pytorch"] = (results / "eval_results.pytorch").read_bytes()
        write_json(data / f"pysgg_{task}.json", pysgg[task])
        files[f"pysgg_{task}.json"] = (data / f"pysgg_{task}.json").read_bytes()
    mutants = check_mutants(data, pysgg)
    files["summary.json"] = (json.dumps({"cases": summary, "mutants": mutants}, indent=1) + "\n").encode()
    for member, content in files.items():
        (data / member).write_bytes(content)
    write_zip(out / f"{name}.zip", files)
    print(f"{out / name}.zip: {len(files)} files, {(out / f'{name}.zip').stat().st_size} bytes")


def main():
    oracle.quiet()
    fixtures_main(__doc__.split("\n\n")[0], ROOT / "tests" / "data" / "oi", FIXTURES, write_fixture)


if __name__ == "__main__":
    main()
