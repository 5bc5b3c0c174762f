"""Panoptic inputs of the converters, against the tools' own numbers in tests/data/pq
(tools/pq_check/README.md says what the data exercise):

* ``sgeval convert openpsg`` carries each Result's pan_results as the record's panoptic
  segmentation, and ``openpsg.image_arrays`` as ``panoptic=``; PQ then equals panopticapi's numbers
  by default and OpenPSG's own under ``pq_rule: openpsg`` (the first image holds the id-0 / VOID
  collision), while the relation protocols keep the instance masks (here overlapping ones);
* ``sgeval convert coco-panoptic`` turns a COCO-panoptic PNG folder + segments_info into instances
  without relations; PQ equals panopticapi's numbers on them.
"""

import json
import pickle
import shutil

import numpy as np
import pytest

from conftest import PQ_FIXTURES, pq_config, pq_fixture, sgeval
from sgeval_convert import openpsg

TOLERANCE = 1e-9


@pytest.fixture(scope="module", params=PQ_FIXTURES)
def case(request, tmp_path_factory):
    return pq_fixture(request.param, tmp_path_factory)




def raw_results(folder, gt):
    """OpenPSG-like Results (as dicts) of the evaluated images: the overlapping masks as instances,
    no relations, and pan_results."""
    for image in gt.images:
        masks, categories = (np.load(folder / "masks" / f"{image.image_id}.{name}.npy")
                             for name in ("masks", "categories"))
        yield {"labels": categories.astype(np.int64) + 1, "masks": masks.astype(bool),
               "rel_pair_idxes": np.zeros((0, 2), np.int64), "rel_dists": np.zeros((0, 57), np.float32),
               "pan_results": np.load(folder / "pan" / f"{image.image_id}.npy").astype(np.int32)}


def pq_of(results):
    section = results["panoptic_quality"]
    return {name: section[name] for name in ("All", "Things", "Stuff")}, section["per_category"]


def assert_tool(results, numbers):
    """The means and their category counts, and the multiset of per-category TP / FP / FN."""
    summary = numbers["summary"]
    for name in ("All", "Things", "Stuff"):
        mine = results["panoptic_quality"][name]
        assert mine["n"] == summary[name]["n"]
        for key in ("PQ", "SQ", "RQ"):
            assert mine[key] == pytest.approx(summary[name][key.lower()], abs=TOLERANCE, rel=0), (name, key)
    tp_fp_fn = {int(c): values[1:] for c, values in numbers["stats"].items() if any(values[1:])}
    totals = [[v["TP"], v["FP"], v["FN"]] for v in results["panoptic_quality"]["per_category"].values()]
    assert sorted(totals) == sorted(tp_fp_fn.values())


def test_openpsg_pan_results_give_panopticapis_and_openpsgs_numbers(case, tmp_path):
    folder, numbers = case
    gt = sgeval.read_gt(str(folder / "psg.json"))
    raw = tmp_path / "results.pkl"
    raw.write_bytes(pickle.dumps(list(raw_results(folder, gt))))
    summary = openpsg.convert(str(raw), str(tmp_path / "pred.zip"), gt=str(folder / "psg.json"))
    assert summary["pan_results"] == len(gt.images)
    for rule, tool in (("panopticapi", "panopticapi"), ("openpsg", "openpsg")):
        from_file = sgeval.evaluate(pq_config(folder, rule, pred=str(tmp_path / "pred.zip")))
        assert from_file["panoptic_quality"]["source"] == "panoptic"
        assert_tool(from_file, numbers[tool])
        evaluator = sgeval.Evaluator(pq_config(folder, rule))
        n_objects, n_predicates = len(gt.object_classes), len(gt.predicate_classes)
        for result, image in zip(raw_results(folder, gt), gt.images):
            evaluator.update(image.image_id, **openpsg.image_arrays(result, image, n_objects, n_predicates))
        assert pq_of(evaluator.compute()) == pq_of(from_file)
    returned = numbers["openpsg"]["returned"]
    assert all(100 * from_file["metrics"][key] == pytest.approx(returned[key], abs=TOLERANCE, rel=0)
               for key in sgeval.PQ_KEYS)


def test_without_pan_results_pq_scores_the_masks_by_the_merge_rule(case, tmp_path):
    """--no-pan-results: the overlapping masks, merged first-wins, give fair-psgg's psgtr merge's numbers."""
    folder, numbers = case
    gt = sgeval.read_gt(str(folder / "psg.json"))
    raw = tmp_path / "results.pkl"
    raw.write_bytes(pickle.dumps(list(raw_results(folder, gt))))
    summary = openpsg.convert(str(raw), str(tmp_path / "pred.zip"), gt=str(folder / "psg.json"), pan_results=False)
    assert summary.get("pan_results", 0) == 0
    results = sgeval.evaluate(pq_config(folder, pred=str(tmp_path / "pred.zip"), pq_merge="first-wins"))
    assert results["panoptic_quality"]["source"] == "masks"
    assert_tool(results, numbers["merge_psgtr"])


@pytest.mark.parametrize("bad, problem", [
    (lambda pan: pan[:-1], "field 'pan_results' has shape"),
    (lambda pan: np.where(pan == pan.max(), 1000 * 3 + 200, pan), "field 'pan_results (category)' holds 200"),
    (lambda pan: pan - 5, "field 'pan_results' holds -"),
    (lambda pan: pan.astype(np.float64) + 0.5, "expected integers of shape"),
])
def test_bad_pan_results_are_one_line_naming_image_and_field(case, bad, problem):
    folder, _ = case
    gt = sgeval.read_gt(str(folder / "psg.json"))
    result = next(raw_results(folder, gt))
    result["pan_results"] = bad(result["pan_results"])
    with pytest.raises(sgeval.SGEvalError) as info:
        openpsg.image_arrays(result, gt.images[0], len(gt.object_classes), len(gt.predicate_classes))
    assert len(info.value.problems) == 1 and problem in info.value.problems[0]
    assert f"image {gt.images[0].image_id}" in info.value.problems[0]


def coco_predictions(folder, tmp_path, names=False):
    """The fixture's COCO-panoptic prediction; names: its category ids shifted (index + 1), with a
    categories list that names them, as a segmentation model's own vocabulary would."""
    predictions = json.loads((folder / "coco" / "panoptic.json").read_text())
    if names:
        psg = json.loads((folder / "psg.json").read_text())
        classes = psg["thing_classes"] + psg["stuff_classes"]
        predictions["categories"] = [{"id": index + 1, "name": name} for index, name in enumerate(classes)][::-1]
        for annotation in predictions["annotations"]:
            for segment in annotation["segments_info"]:
                segment["category_id"] += 1
    path = tmp_path / "panoptic.json"
    path.write_text(json.dumps(predictions))
    return path


@pytest.mark.parametrize("categories", ["index", "name"])
def test_coco_panoptic_segments_give_panopticapis_numbers(case, tmp_path, categories):
    from sgeval_convert import coco_panoptic
    folder, numbers = case
    raw = coco_predictions(folder, tmp_path, names=categories == "name")
    summary = coco_panoptic.convert(str(raw), str(tmp_path / "pred.zip"), str(folder / "psg.json"),
                                    png_dir=str(folder / "coco" / "panoptic"), categories=categories)
    assert summary.get("triplets", 0) == 0 and summary["images"] == len(sgeval.read_gt(str(folder / "psg.json")).images)
    results = sgeval.evaluate(pq_config(folder, pred=str(tmp_path / "pred.zip"), metrics=["R", "Rinf"]))
    assert results["panoptic_quality"]["source"] == "masks" and results["metrics"]["R@20"] == 0
    assert_tool(results, numbers["panopticapi"])


def break_first(key, value):
    def change(predictions, folder):
        predictions["annotations"][0]["segments_info"][0][key] = value
    return change


@pytest.mark.parametrize("change, problem", [
    (break_first("category_id", 999), "field 'segments_info': category_id 999 has no class of the GT"),
    (break_first("id", 0), "each 'id' must be a distinct integer from 1 to 16777215"),
    (lambda predictions, folder: [segment.update(score=float("nan")) for segment in
                                  predictions["annotations"][0]["segments_info"]], "a 'score' is not a finite number"),
    (lambda predictions, folder: predictions["annotations"][0]["segments_info"].append({"id": 77, "category_id": 0}),
     "segments_info id 77 has no pixel"),
    (lambda predictions, folder: predictions["annotations"][0]["segments_info"].pop(), "is not in its segments_info"),
    (lambda predictions, folder: predictions["annotations"].pop(0), "no annotation (every evaluated image needs one)"),
    (lambda predictions, folder: predictions["annotations"][0].update(file_name="../psg.json"), "field 'file_name'"),
    (lambda predictions, folder: (folder / "coco" / "panoptic" / predictions["annotations"][0]["file_name"])
     .write_bytes(b"\x89PNG not really"), "cannot read PNG"),
])
def test_bad_coco_panoptic_input_is_one_line_naming_file_image_and_field(case, tmp_path, change, problem):
    from sgeval_convert import coco_panoptic
    folder, _ = case
    work = tmp_path / "work"
    work.mkdir()
    (work / "coco").mkdir()
    import shutil
    shutil.copytree(folder / "coco" / "panoptic", work / "coco" / "panoptic")
    predictions = json.loads((folder / "coco" / "panoptic.json").read_text())
    change(predictions, work)
    raw = work / "panoptic.json"
    raw.write_text(json.dumps(predictions))
    with pytest.raises(sgeval.SGEvalError) as info:
        coco_panoptic.convert(str(raw), str(tmp_path / "out.zip"), str(folder / "psg.json"),
                              png_dir=str(work / "coco" / "panoptic"), categories="index")
    assert len(info.value.problems) == 1 and problem in info.value.problems[0], info.value.problems
    assert "image " in info.value.problems[0] and not (tmp_path / "out.zip").exists()
