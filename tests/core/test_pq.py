"""sgeval's panoptic quality (``pq: true``) against panopticapi's and fair-psgg's own numbers on the
generated datasets of tests/data/pq (``make check-pq`` wrote them by running those tools' code
unmodified; tools/pq_check/README.md lists every rule and what the data exercise), through the
Evaluator's argument forms and a prediction file.

Checked, per category: TP, FP and FN exactly, PQ / SQ / RQ to 1e-9; the All / Things / Stuff
means and their category counts to 1e-9:
* panopticapi on the COCO-panoptic PNGs + segments_info (segments that do not overlap), given as
  ``Panoptic(segment map, ids)`` and as (P, H, W) masks;
* the overlapping masks with their scores under ``pq_merge: score-order`` (fair-psgg's hilo merge)
  and ``first-wins`` (its psgtr merge), as arrays and as a prediction file;
* OpenPSG's pan_results given as ``Panoptic(pan, ids)`` with VOID left out (the recipe of
  docs/panoptic-quality.md): panopticapi's numbers.
"""

import json

import numpy as np
import pytest
from PIL import Image

from conftest import PQ_FIXTURES, pq_fixture, sgeval

TOLERANCE = 1e-9


@pytest.fixture(scope="module", params=PQ_FIXTURES)
def case(request, tmp_path_factory):
    return pq_fixture(request.param, tmp_path_factory)


def png_ids(path):
    rgb = np.asarray(Image.open(path).convert("RGB"), dtype=np.int64)
    return rgb[..., 0] + 256 * rgb[..., 1] + 65536 * rgb[..., 2]


def evaluator(folder, merge="none", gt_cache=False):
    return sgeval.Evaluator({"gt": str(folder / "psg.json"), "gt_seg": str(folder / "panoptic"), "pq": True,
                             "pq_merge": merge, "gt_cache": gt_cache, "k": "20"})


def coco_updates(folder):
    """(image id, update arguments) of the COCO-panoptic predictions, in the Panoptic form."""
    annotations = json.loads((folder / "coco" / "panoptic.json").read_text())["annotations"]
    for annotation in annotations:
        ids = np.array([s["id"] for s in annotation["segments_info"]], np.int64)
        labels = np.array([s["category_id"] for s in annotation["segments_info"]], np.int64)
        segment_map = png_ids(folder / "coco" / "panoptic" / annotation["file_name"])
        yield annotation["image_id"], {"labels": labels, "triplets": np.zeros((0, 3), np.int64),
                                       "masks": sgeval.Panoptic(segment_map, ids)}


def mask_updates(folder, image_ids):
    """(image id, update arguments) of the overlapping masks with their scores."""
    for image_id in image_ids:
        masks, scores, categories = (np.load(folder / "masks" / f"{image_id}.{name}.npy")
                                     for name in ("masks", "scores", "categories"))
        yield image_id, {"labels": categories.astype(np.int64), "triplets": np.zeros((0, 3), np.int64),
                         "masks": masks.astype(bool), "scores": scores.astype(np.float64)}


def assert_pq(results, numbers):
    """results' panoptic_quality against a tool's numbers (summary and per-category stats)."""
    section, names = results["panoptic_quality"], results["config"]
    summary = numbers["summary"]
    for name in ("All", "Things", "Stuff"):
        assert section[name]["n"] == summary[name]["n"], name
        assert {key: section[name][key] for key in ("PQ", "SQ", "RQ")} == pytest.approx(
            {key.upper(): value for key, value in summary[name].items() if key != "n"}, abs=TOLERANCE, rel=0), name
    objects = object_classes(names["gt"])
    stats = {objects[int(category)]: values for category, values in numbers["stats"].items() if any(values[1:])}
    assert sorted(section["per_category"]) == sorted(stats)
    for name, (iou, tp, fp, fn) in stats.items():
        mine = section["per_category"][name]
        assert [mine["TP"], mine["FP"], mine["FN"]] == [tp, fp, fn], name
        assert mine["PQ"] == pytest.approx(iou / (tp + fp / 2 + fn / 2), abs=TOLERANCE, rel=0), name
    assert results["metrics"]["PQ"] == section["All"]["PQ"] and results["metrics"]["PQ_th"] == section["Things"]["PQ"]


def object_classes(gt_path):
    data = json.loads(open(gt_path).read())
    return data["thing_classes"] + data["stuff_classes"]


def feed(evaluator, updates):
    for image_id, arguments in updates:
        evaluator.update(image_id, **arguments)
    return evaluator


@pytest.mark.parametrize("form", ["panoptic", "masks"])
def test_panopticapi_on_segments_that_do_not_overlap(case, form):
    folder, numbers = case
    updates = list(coco_updates(folder))
    if form == "masks":  # the same segments as (P, H, W) bool masks
        updates = [(image_id, {**arguments, "masks": arguments["masks"].segment_map[None]
                               == arguments["masks"].segment_ids[:, None, None]}) for image_id, arguments in updates]
    assert_pq(feed(evaluator(folder), updates).compute(), numbers["panopticapi"])


@pytest.mark.parametrize("merge, tool", [("score-order", "merge_hilo"), ("first-wins", "merge_psgtr")])
def test_merge_rules_equal_fair_psggs_merges_scored_by_panopticapi(case, merge, tool):
    folder, numbers = case
    ev = evaluator(folder, merge)
    results = feed(ev, mask_updates(folder, [image.image_id for image in ev.gt.images])).compute()
    assert results["panoptic_quality"]["merge"] == merge
    assert_pq(results, numbers[tool])


def test_a_prediction_file_gives_the_arrays_numbers(case, tmp_path):
    """The overlapping masks written as a prediction ZIP (TIFF pages) and evaluated from the file,
    with the GT cache cold and warm: the Evaluator's numbers, bit for bit."""
    folder, numbers = case
    ev = evaluator(folder, "score-order")
    image_ids = [image.image_id for image in ev.gt.images]
    expected = feed(ev, mask_updates(folder, image_ids)).compute()["panoptic_quality"]
    records = [{"id": image_id, "instances": [{"category": int(c), "score": float(s)}
                                              for c, s in zip(arguments["labels"], arguments["scores"])],
                "triplets": [], "masks": arguments["masks"]} for image_id, arguments in mask_updates(folder, image_ids)]
    pred = sgeval.write_predictions(tmp_path / "pred.zip", records)
    for _ in range(2):
        results = sgeval.evaluate({"gt": str(folder / "psg.json"), "gt_seg": str(folder / "panoptic"), "pred": pred,
                                   "pq": True, "pq_merge": "score-order", "gt_cache": str(tmp_path / "cache"),
                                   "k": "20"})
        assert results["panoptic_quality"] == expected


def test_overlapping_masks_without_a_merge_rule_are_one_error_line(case, tmp_path):
    folder, _ = case
    ev = evaluator(folder)
    image_id, arguments = next(mask_updates(folder, [image.image_id for image in ev.gt.images]))
    with pytest.raises(sgeval.SGEvalError) as info:
        ev.update(image_id, **arguments)
    assert info.value.problems == [f"Evaluator.update: image {image_id}: the masks overlap; panoptic quality needs "
                                   f"segments that do not: name a merge rule (pq_merge: score-order, first-wins)"]
    arguments.pop("scores")
    with pytest.raises(sgeval.SGEvalError, match="pq_merge score-order walks the masks by score: field 'score'"):
        feed(evaluator(folder, "score-order"), [(image_id, arguments)]).compute()


def test_pq_needs_masks_and_a_known_merge_rule(tmp_path):
    with pytest.raises(sgeval.SGEvalError) as info:
        sgeval.make_config({"gt": "g.json", "pq": True, "pq_merge": "argmax"})
    assert any("pq_merge 'argmax' is not one of none, score-order, first-wins" in p for p in info.value.problems)
    assert any("pq needs masks (gt_seg)" in p for p in info.value.problems)
    with pytest.raises(sgeval.SGEvalError, match="pq_merge .* is not one of"):  # a YAML list, not a name
        sgeval.make_config({"gt": "g.json", "gt_seg": "p", "pq": True, "pq_merge": ["score-order"]})


def test_pan_results_through_the_panoptic_form_give_panopticapis_numbers(case):
    """docs/panoptic-quality.md's recipe for OpenPSG's pan_results, which sgeval does not read itself: each
    value but VOID (category len(classes)) is a segment, Panoptic(pan, ids) with labels ids % 1000. That
    is panopticapi's reading of the same segmentation; OpenPSG's numbers differ here, because the first
    image holds the id-0 / VOID collision."""
    folder, numbers = case
    void = len(object_classes(folder / "psg.json"))
    ev = evaluator(folder)
    for image in ev.gt.images:
        pan = np.load(folder / "pan" / f"{image.image_id}.npy")
        ids = np.unique(pan)[np.unique(pan) % 1000 != void]
        ev.update(image.image_id, labels=ids % 1000, triplets=np.zeros((0, 3), np.int64),
                  masks=sgeval.Panoptic(pan, ids))
    results = ev.compute()
    assert_pq(results, numbers["panopticapi"])
    returned = numbers["openpsg"]["returned"]
    assert any(abs(100 * results["metrics"][key] - returned[key]) > 1e-6 for key in sgeval.PQ_KEYS)
