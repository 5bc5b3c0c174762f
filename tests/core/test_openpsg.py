"""Hand-computed fixtures for the ``openpsg`` protocol: one per rule in which OpenPSG's evaluator
(openpsg/evaluation/sgg_eval.py, sgg_metrics.py) differs from the other protocols. Each expected
value is worked out in the test's docstring, and each differs from what unique, singlempo and
multimpo give on the same input."""

import numpy as np
import pytest
from conftest import cells, gt_image, pred_image, run_case

PERSON, GRASS = 0, 3  # conftest's vocabulary: person horse dog | grass sky
ON, BESIDE = 1, 2  # predicates: riding on beside holding
FAIR = ("unique", "singlempo", "multimpo")

# 2 x 8 images: A and B are the two halves of row 0 (persons), C is row 1 (grass).
A, B, C = cells(2, 8, (0, 0, 4)), cells(2, 8, (0, 4, 8)), cells(2, 8, (1, 0, 8))


def by_protocol(tmp_path, images, predictions, mode="mask", **config):
    results = run_case(tmp_path, images, predictions, mode=mode, protocol="openpsg", protocols=list(FAIR), **config)
    return {name: section["metrics"] for name, section in results["by_protocol"].items()}, results


def test_selection_is_the_first_k_rows_as_written_repeats_included(tmp_path):
    """G = {(A, C, on), (A, C, beside), (B, C, on)}; rows: (A,C,on) twice, (A,C,beside), (B,C,on).
    openpsg @2: the two copies of (A,C,on): 1/3. unique and singlempo (one per pair): (A,C,on) and
    (B,C,on): 2/3. multimpo (first distinct triplets): (A,C,on), (A,C,beside): 2/3."""
    images = [gt_image(1, [A, B, C], [PERSON, PERSON, GRASS], [[0, 2, ON], [0, 2, BESIDE], [1, 2, ON]])]
    rows = [[0, 2, ON], [0, 2, ON], [0, 2, BESIDE], [1, 2, ON]]
    preds = [pred_image(1, [A, B, C], [PERSON, PERSON, GRASS], rows)]
    metrics, _ = by_protocol(tmp_path, images, preds, k=["2", "4"])
    assert metrics["openpsg"]["R@2"] == pytest.approx(1 / 3, abs=1e-15)
    assert [metrics[p]["R@2"] for p in FAIR] == pytest.approx([2 / 3] * 3, abs=1e-15)
    assert metrics["openpsg"]["R@4"] == 1.0


def test_one_row_hits_every_gt_triplet_it_matches_mask_tie(tmp_path):
    """G = {(A, C, on), (B, C, on)}; one predicted person covers row 0: IoU 4/8 = 0.5 with A and
    with B. OpenPSG matches each GT triplet on its own, so the one row (p, c, on) hits both: R = 1.
    The other protocols map the prediction to one GT instance (A, the first on ties): R = 1/2."""
    images = [gt_image(1, [A, B, C], [PERSON, PERSON, GRASS], [[0, 2, ON], [1, 2, ON]])]
    preds = [pred_image(1, [A | B, C], [PERSON, GRASS], [[0, 1, ON]])]
    metrics, _ = by_protocol(tmp_path, images, preds, k=["20"])
    assert metrics["openpsg"]["R@20"] == 1.0 and metrics["openpsg"]["InstR"] == 1.0
    assert [metrics[p]["R@20"] for p in FAIR] == [0.5] * 3


def test_one_row_hits_every_gt_triplet_it_matches_overlapping_boxes(tmp_path):
    """Box mode. GT persons g0 = [0,0,10,10], g1 = [0,0,10,12] (they overlap), grass g2; G = {(g0,
    g2, on), (g1, g2, on)}. The predicted person [0,0,10,11] has IoU 100/110 with g0 and 110/120
    with g1: openpsg hits both (R = 1); the others map it to g1 only (R = 1/2)."""
    gt = gt_image(1, [A, B, C], [PERSON, PERSON, GRASS], [[0, 2, ON], [1, 2, ON]])
    gt["boxes"] = [[0.0, 0.0, 10.0, 10.0], [0.0, 0.0, 10.0, 12.0], [20.0, 0.0, 30.0, 10.0]]
    preds = [pred_image(1, None, [PERSON, GRASS], [[0, 1, ON]], boxes=[[0, 0, 10, 11], [20, 0, 30, 10]])]
    metrics, _ = by_protocol(tmp_path, [gt], preds, mode="box", k=["20"])
    assert metrics["openpsg"]["R@20"] == 1.0
    assert [metrics[p]["R@20"] for p in FAIR] == [0.5] * 3


def test_results_without_relation_rows_are_left_out_of_every_mean(tmp_path):
    """Image 1 is predicted perfectly (G = {(A, C, on)}); image 2 (G = {(A, C, beside)}) has
    instances but no relation rows; image 3 (G = {(A, C, beside)}) has no record. OpenPSG scores
    image 1 only: R = 1, and 'beside' has no image: mR = (1 + 0 + 0 + 0) / 4 = 1/4. The others
    count images 2 and 3 with zero hits: R = 1/3, mR = (1 + 0) / 2 (absent predicates skipped)."""
    images = [gt_image(i, [A, C], [PERSON, GRASS], [[0, 1, ON if i == 1 else BESIDE]]) for i in (1, 2, 3)]
    preds = [pred_image(1, [A, C], [PERSON, GRASS], [[0, 1, ON]]), pred_image(2, [A, C], [PERSON, GRASS], [])]
    metrics, results = by_protocol(tmp_path, images, preds, k=["20"])
    assert metrics["openpsg"]["R@20"] == 1.0 and metrics["openpsg"]["mR@20"] == 0.25
    assert [metrics[p]["R@20"] for p in FAIR] == pytest.approx([1 / 3] * 3, abs=1e-15)
    assert [metrics[p]["mR@20"] for p in FAIR] == [0.5] * 3
    assert results["images_left_out"] == 2 and results["by_protocol"]["unique"]["images_left_out"] == 0
    assert results["images"]["evaluated"] == 3 and results["gt_relations_per_predicate"] == {"on": 1, "beside": 2}
    assert results["per_predicate"]["mR@20"] == {"on": 1.0, "beside": None}  # no scored image holds it


def test_a_self_pair_is_a_relation_row_the_image_is_scored(tmp_path):
    """Image 2's only row is a self-pair (the two-stage placeholder [[0, 0]]): OpenPSG scores the
    image with zero hits, it is not left out: R = (1 + 0) / 2."""
    images = [gt_image(i, [A, C], [PERSON, GRASS], [[0, 1, ON]]) for i in (1, 2)]
    preds = [pred_image(1, [A, C], [PERSON, GRASS], [[0, 1, ON]]), pred_image(2, [A], [PERSON], [[0, 0, ON]])]
    metrics, results = by_protocol(tmp_path, images, preds, k=["20"])
    assert metrics["openpsg"]["R@20"] == 0.5 and results["images_left_out"] == 0


def test_absent_predicates_count_zero_whatever_the_config_says(tmp_path):
    """A perfect prediction; G holds only 'on' of the four predicates. openpsg: mR = 1/4 even with
    absent_predicates: skip and aggregation: pooled, which the other protocols follow (mR = 1)."""
    images = [gt_image(1, [A, C], [PERSON, GRASS], [[0, 1, ON]])]
    preds = [pred_image(1, [A, C], [PERSON, GRASS], [[0, 1, ON]])]
    metrics, results = by_protocol(tmp_path, images, preds, k=["20"], absent_predicates="skip",
                                   aggregation="pooled")
    assert metrics["openpsg"]["mR@20"] == 0.25 and [metrics[p]["mR@20"] for p in FAIR] == [1.0] * 3
    assert results["rules"] == {"absent_predicates": "zero", "aggregation": "per_image"}
    assert results["by_protocol"]["unique"]["rules"] == {"absent_predicates": "skip", "aggregation": "pooled"}


def test_no_graph_constraint_list_is_read_as_written_repeats_included(tmp_path):
    """Box mode. G = {(A, C, on), (A, C, beside)}; ng_triplets (A,C,on), (A,C,on), (A,C,beside)
    (the ranking OpenPSG builds from two rows on the same pair). openpsg ngR@2 = 1/2 (the repeat
    takes the second slot); the others drop the repeat: 2/2."""
    images = [gt_image(1, [A, C], [PERSON, GRASS], [[0, 1, ON], [0, 1, BESIDE]])]
    ng = [[0, 1, ON], [0, 1, ON], [0, 1, BESIDE]]
    preds = [pred_image(1, [A, C], [PERSON, GRASS], [[0, 1, ON]], ng_triplets=ng)]
    metrics, _ = by_protocol(tmp_path, images, preds, mode="box", k=["2"])
    assert metrics["openpsg"]["ngR@2"] == 0.5 and [metrics[p]["ngR@2"] for p in FAIR] == [1.0] * 3


def test_box_iou_is_float32_as_in_mmdet(tmp_path):
    """Box mode. GT person [0,0,1,1], predicted person [0,0,1,2.000000001]: IoU 1 / 2.000000001 is
    below 0.5 in float64 (the other protocols: no match, R = 0) but 2.000000001 is 2.0 in float32,
    so mmdet's IoU is exactly 0.5 and OpenPSG matches (R = 1)."""
    gt = gt_image(1, [A, C], [PERSON, GRASS], [[0, 1, ON]])
    gt["boxes"] = [[0.0, 0.0, 1.0, 1.0], [3.0, 0.0, 4.0, 1.0]]
    preds = [pred_image(1, None, [PERSON, GRASS], [[0, 1, ON]], boxes=[[0, 0, 1, 2.000000001], [3, 0, 4, 1]])]
    metrics, _ = by_protocol(tmp_path, [gt], preds, mode="box", k=["20"])
    assert metrics["openpsg"]["R@20"] == 1.0 and [metrics[p]["R@20"] for p in FAIR] == [0.0] * 3


def test_mmdet_box_iou_kernel_against_float32_arithmetic():
    """legacy_box_iou for OpenPSG = mmdet's float32 formula, element by element, on random float boxes."""
    import sgeval
    from reference import mmdet_box_iou as reference_iou

    rng = np.random.default_rng(0)
    gt = np.sort(rng.uniform(0, 20, (7, 4)).reshape(7, 2, 2), axis=1).transpose(0, 2, 1).reshape(7, 4)
    gt = gt[:, [0, 2, 1, 3]]
    pred = np.vstack([gt + rng.normal(0, 1e-6, gt.shape), rng.uniform(0, 20, (5, 4))])
    cats_gt, cats_pred = np.zeros(7, np.int64), np.r_[np.zeros(11, np.int64), 1]
    iou = sgeval.legacy_box_iou(sgeval.PROTOCOLS["openpsg"].tool, gt, cats_gt, pred, cats_pred)
    assert iou.dtype == np.float32 and iou.shape == (12, 7) and (iou[11] == -1).all()
    assert all(iou[p, g] == reference_iou(gt[g], pred[p]) for p in range(11) for g in range(7))
