"""Hand-computed fixtures for the ``sgb`` protocol (Scene-Graph-Benchmark's VG evaluator,
maskrcnn_benchmark/data/datasets/evaluation/vg/sgg_eval.py): the rules in which it differs from
``openpsg`` and from the fair protocols. Each expected value is worked out in the docstring."""

import numpy as np
import pytest
from conftest import cells, gt_image, pred_image, run_case

PERSON, GRASS = 0, 3  # conftest's vocabulary: person horse dog | grass sky
RIDING, ON, BESIDE = 0, 1, 2
OTHERS = ("unique", "singlempo", "multimpo", "openpsg")

A, C = cells(2, 8, (0, 0, 4)), cells(2, 8, (1, 0, 8))


def by_protocol(tmp_path, images, predictions, mode="box", **config):
    results = run_case(tmp_path, images, predictions, mode=mode, protocol="sgb", protocols=list(OTHERS), **config)
    return {name: section["metrics"] for name, section in results["by_protocol"].items()}, results


def boxed(image, boxes):
    image["boxes"] = boxes
    return image


def test_box_iou_has_the_plus_one_pixel_convention(tmp_path):
    """GT person [0,0,2,2], predicted [1,0,3,2]. With +1: intersection 2 x 3 = 6, areas 9 and 9,
    IoU 6 / 12 = 0.5: a match (sgb R = 1). Without: 2 / (4 + 4 - 2) = 1/3 (the others: R = 0)."""
    gt = boxed(gt_image(1, [A, C], [PERSON, GRASS], [[0, 1, ON]]), [[0.0, 0.0, 2.0, 2.0], [10.0, 0.0, 12.0, 2.0]])
    preds = [pred_image(1, None, [PERSON, GRASS], [[0, 1, ON]], boxes=[[1, 0, 3, 2], [10, 0, 12, 2]])]
    metrics, _ = by_protocol(tmp_path, [gt], preds, k=["20"])
    assert metrics["sgb"]["R@20"] == 1.0 and [metrics[p]["R@20"] for p in OTHERS] == [0.0] * 4


@pytest.mark.parametrize("mode", ["mask", "box"])
def test_duplicate_gt_rows_count_in_hits_and_denominators(tmp_path, mode):
    """The file's relations: (A,C,on) twice and (A,C,beside); the prediction has (A,C,on) only.
    sgb: both copies hit, R = 2/3; mR = (on 2/2 + beside 0/1 + 0 + 0) / 4 = 1/4. The others read
    G without the duplicate: R = 1/2 (openpsg's mR = (1 + 0) / 4 as well)."""
    images = [gt_image(1, [A, C], [PERSON, GRASS], [[0, 1, ON], [0, 1, ON], [0, 1, BESIDE]])]
    preds = [pred_image(1, [A, C], [PERSON, GRASS], [[0, 1, ON]])]
    metrics, results = by_protocol(tmp_path, images, preds, mode=mode, k=["20"])
    assert metrics["sgb"]["R@20"] == pytest.approx(2 / 3, abs=1e-15) and metrics["sgb"]["mR@20"] == 0.25
    assert [metrics[p]["R@20"] for p in OTHERS] == [0.5] * 4
    assert results["gt_relations_per_predicate"] == {"on": 1, "beside": 1}  # the GT as the other protocols read it


def test_no_graph_constraint_recall_reads_the_first_100_entries(tmp_path):
    """Persons 1..34 are copies of person 0 (= A). ng_triplets: 100 entries (person i, grass, p)
    with p riding, beside or holding (no hit), then the hit (0, grass, on) at position 100. sgb
    and openpsg score the first 100 entries of their ranking: ngR@200 = 0. unique (persons 1..34
    unmatched), multimpo (all map to A, none with 'on') and singlempo (one node, four distinct
    entries) reach the hit: 1."""
    persons = [A] * 35
    ng = [[i, 35, p] for i in range(1, 35) for p in (RIDING, BESIDE, 3)][:100] + [[0, 35, ON]]
    images = [gt_image(1, [A, C], [PERSON, GRASS], [[0, 1, ON]])]
    preds = [pred_image(1, persons + [C], [PERSON] * 35 + [GRASS], [[0, 35, ON]], ng_triplets=ng)]
    metrics, _ = by_protocol(tmp_path, images, preds, k=["200"])
    assert metrics["sgb"]["ngR@200"] == metrics["openpsg"]["ngR@200"] == 0.0
    assert metrics["unique"]["ngR@200"] == metrics["multimpo"]["ngR@200"] == metrics["singlempo"]["ngR@200"] == 1.0


def test_images_without_relation_rows_are_left_out_and_absent_predicates_count_zero(tmp_path):
    """Image 1 predicted perfectly, image 2 without rows: sgb scores image 1 only (R = 1) and
    divides mR by the 4 predicates (1/4), whatever absent_predicates says."""
    images = [gt_image(i, [A, C], [PERSON, GRASS], [[0, 1, ON]]) for i in (1, 2)]
    preds = [pred_image(1, [A, C], [PERSON, GRASS], [[0, 1, ON]]), pred_image(2, [A, C], [PERSON, GRASS], [])]
    metrics, results = by_protocol(tmp_path, images, preds, mode="mask", k=["20"], absent_predicates="skip")
    assert metrics["sgb"]["R@20"] == 1.0 and metrics["sgb"]["mR@20"] == 0.25 and results["images_left_out"] == 1
    assert metrics["unique"]["R@20"] == 0.5 and metrics["unique"]["mR@20"] == 0.5


def test_sgb_box_iou_against_float32_arithmetic():
    """legacy_box_iou for sgb = the float32 formula with +1, element by element, on random float boxes."""
    import sgeval
    from reference import sgb_box_iou as reference_iou

    rng = np.random.default_rng(1)
    gt = rng.uniform(0, 20, (7, 4))
    gt[:, 2:] = gt[:, :2] + rng.uniform(0, 10, (7, 2))
    pred = np.vstack([gt + rng.normal(0, 1e-5, gt.shape), rng.uniform(0, 20, (5, 4))])
    iou = sgeval.legacy_box_iou(sgeval.PROTOCOLS["sgb"].tool, gt, np.zeros(7, np.int64), pred,
                                np.r_[np.zeros(11, np.int64), 1])
    assert iou.dtype == np.float32 and (iou[11] == -1).all()
    assert all(np.array_equal(iou[p, g], reference_iou(gt[g], pred[p]), equal_nan=True)
               for p in range(11) for g in range(7))


HORSE = 1
H = cells(2, 8, (0, 5, 7))


@pytest.mark.parametrize("mode", ["mask", "box"])
def test_predcls_puts_the_gt_instances_in_place_by_index(tmp_path, mode):
    """GT: person A, horse H, grass C; (A, H, riding), (A, C, on). The predcls prediction lost the
    horse (as a model's input drops a box that is empty after clipping): instances A, C and the
    row (0, 1, on). The fair protocols score it as stored: its instance 1 is C, the row hits
    (A, C, on): R@20 = 1/2. Scene-Graph-Benchmark's evaluator puts the GT's boxes and labels in
    place by index whatever their number: instance 1 is H, and (A, H, on) hits nothing: R@20 = 0
    (0.5 before the rule). The task check says so."""
    images = [gt_image(1, [A, H, C], [PERSON, HORSE, GRASS], [[0, 1, RIDING], [0, 2, ON]])]
    preds = [pred_image(1, [A, C], [PERSON, GRASS], [[0, 1, ON]])]
    metrics, results = by_protocol(tmp_path, images, preds, mode=mode, k=["20"], task="predcls")
    assert metrics["sgb"]["R@20"] == 0.0 and [metrics[p]["R@20"] for p in OTHERS] == [0.5] * 4
    differs = results["task_check"]["instance_count_differs"]
    assert differs["images"] == 1 and len(differs["protocols"]) == 1 and "by index" in differs["protocols"][0]
    # sgcls scores the stored instances under every protocol, sgb included
    metrics, results = by_protocol(tmp_path / "sgcls", images, preds, mode=mode, k=["20"], task="sgcls")
    assert metrics["sgb"]["R@20"] == 0.5 and "protocols" not in results["task_check"]["instance_count_differs"]


def test_predcls_rows_beyond_the_gt_instances_are_an_error_under_sgb(tmp_path):
    """A predcls prediction with more instances than the GT: a row on instance 3 of a 3-instance GT
    is an index Scene-Graph-Benchmark's evaluator fails on (its GT arrays have 3 rows): one error
    line naming the image and the row under sgb; the fair protocols score it as stored (unique: A
    keeps instance 0, so the row on instance 3, its duplicate, misses: R@20 = 1/2)."""
    import sgeval

    images = [gt_image(1, [A, H, C], [PERSON, HORSE, GRASS], [[0, 1, RIDING], [0, 2, ON]])]
    preds = [pred_image(1, [A, H, C, A], [PERSON, HORSE, GRASS, PERSON], [[0, 2, ON], [3, 1, RIDING]])]
    with pytest.raises(sgeval.SGEvalError) as info:
        run_case(tmp_path, images, preds, mode="box", protocol="sgb", k=["20"], task="predcls")
    assert len(info.value.problems) == 1
    assert "image 1: triplet 1 [3, 1, 0]: the sgb protocol puts the GT's 3 instances in place of the " \
           "prediction's 4 by index in predcls" in info.value.problems[0]
    results = run_case(tmp_path / "fair", images, preds, mode="box", protocol="unique", k=["20"], task="predcls")
    assert results["metrics"]["R@20"] == 0.5
