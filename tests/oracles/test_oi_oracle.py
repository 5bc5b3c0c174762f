"""sgeval on PySGG's Open Images evaluation, against PySGG's own numbers on generated OI-like data.

tests/data/oi/oi-<seed>.zip each hold PySGG's raw inputs (categories_dict.json,
vrd-{train,val,test}-anno.json, and eval_results_<task>.pytorch as PySGG's test writes it), what
PySGG's oi_evaluation, run unmodified at commit a63942a, gives for them (pysgg_<task>.json), and
gt.json, sgeval's box-mode GT of PySGG's own get_groundtruth. They are written by
``make check-oi PYSGG=<checkout>`` (tools/oi_check/make_fixtures.py; its README lists every rule of
PySGG's evaluation and what the data exercise).

Checked, to 1e-9, for sgdet, sgcls and predcls:
* the Open Images numbers (protocol "oi"): R@1..100 and the per-image recall of
  eval_rel_results, AP_rel and AP_phr per predicate, mAP_rel, wmAP_rel, mAP_phr, wmAP_phr, score
  (final_score) and score_wtd (w_final_score, the one oi_evaluation returns), and the classic mR@K
  PySGG prints beside them (absent_predicates "zero": PySGG divides mAP and mR by every predicate of
  categories_dict.json), after sgeval_convert.openimages' convert_gt and convert.
* the classic R@K, ngR@K and mR@K PySGG prints on OI, through sgeval's sgb protocol on the same
  eval_results.pytorch (sgeval_convert.sgb): PySGG's vg/sgg_eval.py and vg_eval.py compute them by the
  same rules as Scene-Graph-Benchmark's (tools/oi_check/README.md, "Classic recall").

The names sgeval gives the numbers are in the tables below, and nowhere else.
"""

import json

import numpy as np
import pytest
from conftest import ROOT, sgeval, unpacked

DATA = ROOT / "tests" / "data" / "oi"
TASKS = ("sgdet", "sgcls", "predcls")
OI_KS = (1, 5, 10, 20, 50, 100)
CLASSIC_KS = (20, 50, 100)
TOLERANCE = 1e-9

# sgeval's results["metrics"] key under protocol "oi": the key of PySGG's number in pysgg_<task>.json
OI_METRICS = {
    **{f"R@{k}": f"R@{k}" for k in OI_KS},  # eval_rel_results' recalls: matched GT rows / all GT rows
    "imgR@50": "imgR@50", "imgR@100": "imgR@100",  # its recalls_per_img: the mean of per-image recalls
    "mAP_rel": "mAP_rel", "wmAP_rel": "wmAP_rel", "mAP_phr": "mAP_phr", "wmAP_phr": "wmAP_phr",
    "score": "final_score",  # 0.4 mAP_rel + 0.2 R@50 + 0.4 mAP_phr
    "score_wtd": "w_final_score",  # 0.4 wmAP_rel + 0.2 R@50 + 0.4 wmAP_phr: what oi_evaluation returns
    **{f"mR@{k}": f"classic_mR@{k}" for k in CLASSIC_KS},  # eval_classic_recall's SGMeanRecall
}
# sgeval's results["per_predicate"] family under protocol "oi": PySGG's per-predicate dict (by name)
OI_PER_PREDICATE = {"AP_rel": "AP_rel", "AP_phr": "AP_phr"}
# sgeval's results["metrics"] key under protocol "sgb": PySGG's classic number (eval_classic_recall)
SGB_METRICS = {f"{family}@{k}": f"classic_{family}@{k}" for family in ("R", "ngR", "mR") for k in CLASSIC_KS}
FIXTURE_FILES = ("categories_dict.json", "vrd-train-anno.json", "vrd-val-anno.json", "vrd-test-anno.json", "gt.json",
                 "summary.json", *(f"eval_results_{task}.pytorch" for task in TASKS),
                 *(f"pysgg_{task}.json" for task in TASKS))


@pytest.fixture(scope="module", params=sorted(path.stem for path in DATA.glob("*.zip")))
def case(request, tmp_path_factory):
    return unpacked(DATA / f"{request.param}.zip", tmp_path_factory)


def pysgg_numbers(case, task):
    return json.loads((case / f"pysgg_{task}.json").read_text())


def openimages():
    """sgeval_convert.openimages (imported here: the classic checks need only sgeval_convert.sgb)."""
    from sgeval_convert import openimages as module

    return module


@pytest.fixture(scope="module")
def oi_gt(case):
    """sgeval_convert.openimages.convert_gt's box-mode GT of the fixture's annotation files."""
    out = case / "gt_oi.json"
    if not out.exists():
        openimages().convert_gt(case, out, split="test")
    return out


def test_fixtures_hold_pysggs_inputs_and_numbers(case):
    names = sorted(path.name for path in case.iterdir())
    assert set(FIXTURE_FILES) <= set(names)
    summary = json.loads((case / "summary.json").read_text())
    assert all(summary["cases"].values()) and summary["mutants"]["stable sorts everywhere (must change nothing)"][
        "numbers changed"] == 0
    for task in TASKS:
        numbers = pysgg_numbers(case, task)
        assert numbers["returned"] == numbers["w_final_score"]  # oi/__init__.py:85
        assert numbers["final_score"] == pytest.approx(
            0.4 * numbers["mAP_rel"] + 0.2 * numbers["R@50"] + 0.4 * numbers["mAP_phr"], abs=1e-15)
        assert numbers["mAP_rel"] == pytest.approx(np.mean(list(numbers["AP_rel"].values())), abs=1e-15)
        total = sum(numbers["npos"].values())
        assert numbers["wmAP_phr"] == pytest.approx(
            sum(ap * numbers["npos"][name] / total for name, ap in numbers["AP_phr"].items()), abs=1e-15)


@pytest.mark.parametrize("task", TASKS)
def test_classic_recall_through_the_sgb_protocol(case, task, tmp_path):
    """PySGG's classic R@K, ngR@K and mR@K on OI are Scene-Graph-Benchmark's: sgeval's sgb protocol on the
    same eval_results.pytorch (converted by sgeval_convert.sgb against gt.json) gives them."""
    from sgeval_convert import sgb

    pred = tmp_path / f"pred_{task}.zip"
    sgb.convert(case / f"eval_results_{task}.pytorch", pred, case / "gt.json", task=task)
    results = sgeval.evaluate(sgeval.load_config(gt=str(case / "gt.json"), pred=str(pred), protocol="sgb",
                                                 k=",".join(map(str, CLASSIC_KS)), absent_predicates="zero", task=task))
    pysgg = pysgg_numbers(case, task)
    assert {key: results["metrics"][key] for key in SGB_METRICS} == pytest.approx(
        {key: pysgg[name] for key, name in SGB_METRICS.items()}, abs=TOLERANCE, rel=0)
    assert results["images"]["evaluated"] - results["images_left_out"] == pysgg["classic_images_recorded"]


@pytest.mark.parametrize("task", TASKS)
def test_sgeval_gives_pysggs_open_images_numbers(case, oi_gt, task, tmp_path):
    """One converted file (sgeval_convert.openimages) carries both of PySGG's lists: under oi its Open
    Images numbers (row_lists.oi), and beside them under sgb the classic R@K, ngR@K and mR@K PySGG
    prints (triplets, ng_triplets)."""
    module = openimages()
    pred = tmp_path / f"pred_{task}.zip"
    module.convert(case / f"eval_results_{task}.pytorch", pred, oi_gt, task=task)
    results = sgeval.evaluate(sgeval.load_config(gt=str(oi_gt), pred=str(pred), protocol="oi", protocols="sgb",
                                                 k=",".join(map(str, OI_KS)), absent_predicates="zero", task=task))
    pysgg = pysgg_numbers(case, task)
    assert {key: results["metrics"][key] for key in OI_METRICS} == pytest.approx(
        {key: pysgg[name] for key, name in OI_METRICS.items()}, abs=TOLERANCE, rel=0)
    classic = results["by_protocol"]["sgb"]["metrics"]
    assert {key: classic[key] for key in SGB_METRICS} == pytest.approx(
        {key: pysgg[name] for key, name in SGB_METRICS.items()}, abs=TOLERANCE, rel=0)
    for family, name in OI_PER_PREDICATE.items():  # sgeval lists the predicates of the GT; PySGG's others are 0
        shown = results["per_predicate"][family]
        assert shown == pytest.approx({key: pysgg[name][key] for key in shown}, abs=TOLERANCE, rel=0), family
        assert set(shown) == set(results["gt_relations_per_predicate"])
        assert all(value == 0 for key, value in pysgg[name].items() if key not in shown), family


def test_convert_gt_gives_pysggs_ground_truth(case, oi_gt):
    """The evaluated test images of convert_gt's GT are those of PySGG's get_groundtruth (gt.json):
    boxes clipped as clip_to_image clips them, categories, relation rows in order with repeats."""
    expected = json.loads((case / "gt.json").read_text())
    converted = json.loads(oi_gt.read_text())
    by_id = {str(entry["image_id"]): entry for entry in converted["data"]}
    evaluated = [entry for entry in expected["data"]
                 if entry["image_id"] in set(expected["test_image_ids"]) and entry["relations"]]
    assert [str(i) for i in converted["test_image_ids"] if by_id[str(i)]["relations"]] == \
        [entry["image_id"] for entry in evaluated]
    for entry in evaluated:
        got = by_id[entry["image_id"]]
        assert (got["width"], got["height"]) == (entry["width"], entry["height"])
        assert [s["category_id"] for s in got["segments_info"]] == [s["category_id"] for s in entry["segments_info"]]
        assert np.array_equal(np.float32([a["bbox"] for a in got["annotations"]]),
                              np.float32([a["bbox"] for a in entry["annotations"]]))
        assert got["relations"] == entry["relations"]
