"""The executable specification: hand-computed fixtures for every metric, protocol and edge case.

Each fixture states its data, then the numbers worked out by hand in comments; the tests assert
those numbers. Read it top to bottom to learn the rules (SPEC sections 2-7): selection (graph
constraint, distinct triplets, relative k), matching (ties, the inclusive threshold, categories),
the SingleMPO merge, aggregation (per image, pooled, absent predicates), zero-shot recall, IMR and
wIMR, the protocol audit, missing / extra / skipped images and bad input.

Every test that evaluates a fixture runs twice, through the `evaluate` fixture:

* "reference": tests/reference.py, the plain-Python oracle. It computes every ratio and mean as an
  exact Fraction and converts it to float once, so its metrics equal the expected fractions
  exactly (`==`).
* "sgeval": sgeval itself, on the same data written to disk (psg.json and panoptic PNGs by
  tools/synth.py, predictions by sgeval.write_predictions; `sgeval_evaluate` below). sgeval
  computes in floats (a mean of float ratios, a sum of float weights), which can differ from the
  correctly rounded fraction in the last bits; where `==` fails it must agree within 1e-12.

Tests of the reference's building blocks (box_iou, mask_iou, resolve_k, the selections, PRank's
ranks, match_instances, merge_order, singlempo_merge, remap_triplets) run on the reference only:
sgeval has no such functions with these signatures; its kernels have their own tests
(test_kernels.py, test_protocols.py) and every fixture below checks their combined effect.
More hand fixtures, for sgeval alone: test_metrics.py, test_protocols.py.
"""

import itertools
import json
from fractions import Fraction as F

import numpy as np
import pytest
from conftest import sgeval, synth

from reference import (
    AUDIT_FIELDS,
    DEFAULT_IMR_KS,
    DEFAULT_KS,
    box_iou,
    mask_iou,
    match_instances,
    merge_order,
    predicate_ranks,
    reference_evaluate,
    remap_triplets,
    resolve_k,
    select_distinct,
    select_graph_constrained,
    singlempo_merge,
)

# sgeval's float arithmetic vs the correctly rounded fractions. In these fixtures it is off by one
# unit in the last place at most: e.g. fixture D's R@20, (2/3 + 0 + 1) / 3 in floats, is
# 0.5555555555555555 where 5/9 rounds to 0.5555555555555556.
SGEVAL_TOLERANCE = 1e-12


def sgeval_evaluate(directory, dataset, predictions, mode="mask", ks=DEFAULT_KS, iou_threshold=0.5,
                    protocol="unique", absent_predicates="skip", imr_ks=DEFAULT_IMR_KS, tau=0.5,
                    aggregation="per_image", zeroshot=None):
    """reference_evaluate's signature and result (the keys the tests read), computed by sgeval: the
    dataset and predictions are written into directory, the options mapped onto a config."""
    images = [image if "masks" in image else  # box-mode fixtures have no masks: empty panoptic PNGs
              {**image, "masks": np.zeros((len(image["categories"]), image["height"], image["width"]), bool)}
              for image in dataset["images"]]
    gt = synth.write_gt({**dataset, "images": images}, directory / "gt")
    if mode == "box":
        records = [{key: value for key, value in record.items() if key != "masks"} for record in predictions]
        pred = sgeval.write_predictions(directory / "pred.json", records)
    else:
        pred = sgeval.write_predictions(directory / "pred.zip", predictions)
    values = {"gt": str(gt), "pred": str(pred), "k": list(ks), "imr_k": list(imr_ks), "wimr_tau": tau,
              "protocol": protocol, "absent_predicates": absent_predicates, "aggregation": aggregation,
              "iou_threshold": iou_threshold}
    if mode == "mask":
        values["gt_seg"] = str(directory / "gt" / "panoptic")
    if zeroshot is not None:
        path = directory / "zeroshot.json"
        path.write_text(json.dumps(sorted(list(map(int, t)) for t in zeroshot)))
        values["zeroshot_triplets"] = str(path)
    results = sgeval.evaluate(sgeval.make_config(values))
    return {"images": results["images"], "metrics": results["metrics"], "per_predicate": results["per_predicate"],
            "absent_predicates": results["absent_predicates"], "imr_short_images": results["imr_short_images"],
            "audit": {field: results["protocol_audit"][field] for field in AUDIT_FIELDS},
            "tolerance": SGEVAL_TOLERANCE}


@pytest.fixture(params=["reference", "sgeval"])
def evaluate(request, tmp_path):
    """evaluate(dataset, predictions, **options) -> result: the reference, or sgeval (see the module
    docstring). result["tolerance"] is how far its floats may be from the exact fractions."""
    if request.param == "reference":
        return lambda dataset, predictions, **options: {**reference_evaluate(dataset, predictions, **options),
                                                        "tolerance": 0.0}
    runs = itertools.count()  # a fresh directory for each evaluation of a test
    return lambda dataset, predictions, **options: sgeval_evaluate(tmp_path / f"run{next(runs)}", dataset,
                                                                   predictions, **options)


def grid_masks(picture, letters):
    """Stack of boolean masks, one per letter, read from an ASCII picture ('.' = nothing)."""
    rows = picture.split()
    return np.array([[[ch == letter for ch in row] for row in rows] for letter in letters], dtype=bool)


def assert_close(result, key, got, want):
    """got (float | None) equals want (Fraction | int | float | None): exactly, or within the
    result's tolerance (sgeval's floats)."""
    if want is None:
        assert got is None, f"{key}: {got} != None"
    else:
        assert got is not None and (got == float(want) or abs(got - float(want)) <= result["tolerance"]), \
            f"{key}: {got} != {want} ({float(want)})"


def assert_metrics(result, expected):
    """result["metrics"] holds the expected {key: Fraction | int | float | None} values."""
    for key, want in expected.items():
        assert_close(result, key, result["metrics"][key], want)


def assert_per_predicate(result, key, expected):
    """result["per_predicate"][key] is {predicate name: value} for exactly the expected names."""
    values = result["per_predicate"][key]
    assert list(values) == list(expected), (key, values)
    for name, want in expected.items():
        assert_close(result, f"{key} {name}", values[name], want)


# -------------------------------------------------------------------------------------------------
# Small building blocks of the reference (reference only: sgeval's kernels have other signatures;
# test_kernels.py checks them, and the fixtures below check their effect on both evaluators)


def test_box_iou():
    # [0,0,10,10] vs [5,5,15,15]: inter 5*5 = 25, union 100 + 100 - 25 = 175.
    assert box_iou([0, 0, 10, 10], [5, 5, 15, 15]) == 25 / 175
    # inter 10*6 = 60, union 100 + 60 - 60 = 100 (continuous coordinates, no +1).
    assert box_iou([0, 0, 10, 10], [0, 0, 10, 6]) == 0.6
    # touching edges and disjoint boxes share nothing.
    assert box_iou([0, 0, 10, 10], [10, 0, 20, 10]) == 0.0
    assert box_iou([0, 0, 10, 10], [20, 20, 30, 30]) == 0.0
    # two zero-area boxes: union 0 -> 0.0
    assert box_iou([3, 3, 3, 3], [3, 3, 3, 3]) == 0.0


def test_mask_iou():
    a, b, empty = grid_masks(
        """
        AAB.
        AAB.
        ....
        ....
        """,
        "ABZ",
    )
    # A = 4 pixels, A|B = 6 pixels, A&B = 0.
    assert mask_iou(a, b) == 0.0
    assert mask_iou(a, a | b) == 4 / 6
    assert mask_iou(empty, empty) == 0.0


def test_resolve_k():
    assert resolve_k("20", 3) == 20
    assert resolve_k("x1", 4) == 4
    assert resolve_k("x10", 3) == 30
    # 0.625 * 4 = 2.5 -> floor(3.0) = 3: half rounds up (Python's round(2.5) would give 2).
    assert resolve_k("x0.625", 4) == 3
    # 0.5 * 3 = 1.5 -> floor(2.0) = 2
    assert resolve_k("x0.5", 3) == 2
    # 0.1 * 4 = 0.4 -> floor(0.9) = 0 -> at least 1
    assert resolve_k("x0.1", 4) == 1
    for bad in ("0", "-5", "y3", "inf", "x"):
        with pytest.raises(ValueError):
            resolve_k(bad, 3)


def test_graph_constrained_vs_distinct_selection():
    T = [(0, 1, 2), (0, 1, 0), (0, 2, 1), (0, 1, 2), (1, 2, 0), (1, 2, 1)]
    # GC: (0,1,0) and the repeat (0,1,2) share pair (0,1); (1,2,1) shares pair (1,2).
    assert select_graph_constrained(T, 2) == [(0, 1, 2), (0, 2, 1)]
    assert select_graph_constrained(T, 100) == [(0, 1, 2), (0, 2, 1), (1, 2, 0)]
    # NG: only the exact repeat of (0,1,2) is skipped.
    assert select_distinct(T, 3) == [(0, 1, 2), (0, 1, 0), (0, 2, 1)]
    assert select_distinct(T, 100) == [(0, 1, 2), (0, 1, 0), (0, 2, 1), (1, 2, 0), (1, 2, 1)]


def test_predicate_ranks_drop_unmatched_and_repeats():
    # predictions 0 and 1 both map to GT 0 (many-to-one), prediction 2 to GT 1, 3 unmatched.
    mapping = {0: 0, 1: 0, 2: 1}
    T_ng = [(0, 2, 5), (3, 2, 1), (1, 2, 5), (1, 2, 7), (2, 0, 5)]
    # (0,2,5) -> (0,1,5) rank 0; (3,2,1) dropped (3 unmatched); (1,2,5) -> (0,1,5) exact repeat,
    # dropped; (1,2,7) -> (0,1,7) rank 1; (2,0,5) -> (1,0,5), a new pair, rank 0.
    assert predicate_ranks(T_ng, mapping) == {(0, 1, 5): 0, (0, 1, 7): 1, (1, 0, 5): 0}


# -------------------------------------------------------------------------------------------------
# Fixture A — one image, mask mode, perfect instances: GC vs NG, relative k, PR, PRank, absent
# predicates.
#
#   GT picture (4x4)     A = GT0 "person" (0), B = GT1 "dog" (1), C = GT2 "grass" (2, stuff)
#     AABB
#     AABB
#     CCCC
#     CCCC
#   predicates: 0 "looking at", 1 "on", 2 "beside", 3 "holding" (absent from the GT)
#   relations (0,1,0) (0,2,1) (1,2,1) (0,1,2) (0,1,0)   <- last row is an exact duplicate
#   G = {(0,1,0), (0,2,1), (1,2,1), (0,1,2)}, |G| = 4
#   G^(0) = {(0,1,0)}, G^(1) = {(0,2,1), (1,2,1)}, G^(2) = {(0,1,2)}; pairs(G) = {01, 02, 12}
#   prediction i has GT i's mask and category -> L = {0:0, 1:1, 2:2}; InstR = R@inf = 1
#   T = [(0,1,2), (0,1,0), (0,2,1), (1,2,0), (1,2,1)], no ng_triplets -> T_ng = T
#
#   k="2":  GC = (0,1,2) (0,2,1)            R 2/4, mR (0 + 1/2 + 1)/3 = 1/2, PR 2/3
#           NG = (0,1,2) (0,1,0)            ngR 2/4, mNgR (1 + 0 + 1)/3 = 2/3
#   k="3":  GC = (0,1,2) (0,2,1) (1,2,0)    R 2/4, mR 1/2, PR 3/3
#           NG = (0,1,2) (0,1,0) (0,2,1)    ngR 3/4, mNgR (1 + 1/2 + 1)/3 = 5/6
#   k="5":  GC = same 3 (only 3 pairs)      R 2/4, mR 1/2, PR 1
#           NG = all 5                      ngR 1, mNgR 1
#   k="x1" -> 4:   GC as k=3; NG = first 4 -> (1,2,0) misses: ngR 3/4, mNgR 5/6
#   k="x0.625" -> floor(2.5 + 0.5) = 3: as k=3
#   PRank ranks over T_ng: (0,1,2):0 (0,1,0):1 (0,2,1):0 (1,2,0):0 (1,2,1):1
#         per predicate: looking at 1, on (0+1)/2 = 1/2, beside 0 -> PRank 1/2
#   absent_predicates="zero": divide by 4 predicates: mR@2 = (3/2)/4 = 3/8, mNgR@2 = 2/4,
#         mR@inf = 3/4, mNgR@5 = 3/4; PRank unchanged.

PICTURE_A = """
    AABB
    AABB
    CCCC
    CCCC
"""


def fixture_a(**prediction_fields):
    masks = grid_masks(PICTURE_A, "ABC")
    dataset = {
        "thing_classes": ["person", "dog"],
        "stuff_classes": ["grass"],
        "predicate_classes": ["looking at", "on", "beside", "holding"],
        "images": [
            {
                "image_id": "a",
                "height": 4,
                "width": 4,
                "split": "test",
                "categories": [0, 1, 2],
                "masks": masks,
                "boxes": [[0, 0, 2, 2], [2, 0, 4, 2], [0, 2, 4, 4]],
                "relations": [[0, 1, 0], [0, 2, 1], [1, 2, 1], [0, 1, 2], [0, 1, 0]],
            }
        ],
    }
    prediction = {
        "id": "a",
        "instances": [
            {"category": 0, "bbox": [0, 0, 2, 2], "score": 0.9},
            {"category": 1, "bbox": [2, 0, 4, 2], "score": 0.8},
            {"category": 2, "bbox": [0, 2, 4, 4], "score": 0.7},
        ],
        "triplets": [[0, 1, 2], [0, 1, 0], [0, 2, 1], [1, 2, 0], [1, 2, 1]],
        "masks": masks.copy(),
    }
    prediction.update(prediction_fields)
    return dataset, [prediction]


KS_A = ("2", "3", "5", "x1", "x0.625")


@pytest.mark.parametrize("mode", ["mask", "box"])
def test_fixture_a_selection_relative_k_and_prank(mode, evaluate):
    dataset, predictions = fixture_a()
    result = evaluate(dataset, predictions, mode=mode, ks=KS_A)
    assert result["images"] == {
        "evaluated": 1,
        "missing_predictions": 0,
        "skipped_no_relations": 0,
        "extra_predictions": 0,
        "scope": "all",
        "duplicate_updates": 0,
    }
    assert_metrics(
        result,
        {
            "R@2": F(2, 4), "mR@2": F(1, 2), "PR@2": F(2, 3), "ngR@2": F(2, 4), "mNgR@2": F(2, 3),
            "R@3": F(2, 4), "mR@3": F(1, 2), "PR@3": 1, "ngR@3": F(3, 4), "mNgR@3": F(5, 6),
            "R@5": F(2, 4), "mR@5": F(1, 2), "PR@5": 1, "ngR@5": 1, "mNgR@5": 1,
            "R@x1": F(2, 4), "mR@x1": F(1, 2), "PR@x1": 1, "ngR@x1": F(3, 4), "mNgR@x1": F(5, 6),
            "R@x0.625": F(2, 4), "mR@x0.625": F(1, 2), "PR@x0.625": 1,
            "ngR@x0.625": F(3, 4), "mNgR@x0.625": F(5, 6),
            "InstR": 1, "R@inf": 1, "mR@inf": 1, "PRank": F(1, 2),
        },
    )
    assert result["absent_predicates"] == ["holding"]
    assert_per_predicate(result, "mR@2", {"looking at": 0.0, "on": 0.5, "beside": 1.0})
    assert_per_predicate(result, "mNgR@3", {"looking at": 1.0, "on": 0.5, "beside": 1.0})
    assert_per_predicate(result, "PRank", {"looking at": 1.0, "on": 0.5, "beside": 0.0})
    assert set(result["per_predicate"]) == (
        {f"mR@{k}" for k in KS_A} | {f"mNgR@{k}" for k in KS_A} | {"mR@inf", "PRank"}
        | {"IMR@10", "IMR@20", "IMR@50"}
    )
    # No train image: every GT type is zero-shot (Z = G, so zR = R) and every n_p = 0, so the
    # wIMR weights sum to 0 -> None. IMR: each predicate's own triplets of T_ng hit its GT
    # ((0,1,0); (0,2,1) (1,2,1); (0,1,2)) -> 1 at every k; every image is short of 10 per predicate.
    assert_metrics(
        result,
        {"zR@2": F(2, 4), "zR@5": F(2, 4), "ngzR@3": F(3, 4), "ngzR@5": 1,
         "IMR@10": 1, "IMR@50": 1, "wIMR@10": None},
    )
    assert result["imr_short_images"] == {"10": 1, "20": 1, "50": 1}


def test_fixture_a_absent_predicates_zero(evaluate):
    dataset, predictions = fixture_a()
    result = evaluate(dataset, predictions, ks=("2", "5"), absent_predicates="zero")
    assert_metrics(
        result,
        {
            "mR@2": F(3, 8), "mNgR@2": F(2, 4), "mR@5": F(3, 8), "mNgR@5": F(3, 4),
            "mR@inf": F(3, 4),
            # R-type metrics and PRank do not change
            "R@2": F(2, 4), "ngR@5": 1, "PRank": F(1, 2),
        },
    )
    # per_predicate still lists only the predicates present in the GT
    assert_per_predicate(result, "mR@2", {"looking at": 0.0, "on": 0.5, "beside": 1.0})
    assert result["absent_predicates"] == ["holding"]


def test_fixture_a_metric_keys_in_order(evaluate):
    dataset, predictions = fixture_a()
    result = evaluate(dataset, predictions, ks=("20", "x10"))
    metric_keys = [
        "R@20", "mR@20", "ngR@20", "mNgR@20", "PR@20",
        "R@x10", "mR@x10", "ngR@x10", "mNgR@x10", "PR@x10",
        "InstR", "R@inf", "mR@inf", "PRank",
        "zR@20", "zR@x10", "ngzR@20", "ngzR@x10",
        "IMR@10", "IMR@20", "IMR@50", "wIMR@10", "wIMR@20", "wIMR@50",
    ]
    per_predicate_keys = [
        "mR@20", "mNgR@20", "mR@x10", "mNgR@x10", "mR@inf", "PRank", "IMR@10", "IMR@20", "IMR@50",
    ]
    # Both evaluators report exactly these keys. The order is the reference's only: sgeval lists
    # them family by family (R@20 R@x10 mR@20 ...), the order of its results file.
    assert sorted(result["metrics"]) == sorted(metric_keys)
    assert sorted(result["per_predicate"]) == sorted(per_predicate_keys)
    if result["tolerance"] == 0.0:  # the reference
        assert list(result["metrics"]) == metric_keys
        assert list(result["per_predicate"]) == per_predicate_keys


def test_fixture_a_empty_ng_triplets_is_taken_as_given(evaluate):
    # A present but empty ng_triplets list is used as is: NG metrics and PRank see no triplet,
    # while R@k still reads `triplets`.
    dataset, predictions = fixture_a(ng_triplets=[])
    result = evaluate(dataset, predictions, ks=("5",))
    assert_metrics(
        result,
        {"R@5": F(2, 4), "ngR@5": 0, "mNgR@5": 0, "PRank": None, "InstR": 1},
    )
    assert_per_predicate(result, "PRank", {"looking at": None, "on": None, "beside": None})


def test_triplet_out_of_range_is_an_error(evaluate):
    dataset, predictions = fixture_a(triplets=[[0, 3, 1]])
    with pytest.raises(ValueError, match="instance 3"):
        evaluate(dataset, predictions, ks=("5",))


# -------------------------------------------------------------------------------------------------
# Fixture B — mask mode, tied IoU.
#
#   GT picture          A = GT0 "person", B = GT1 "person", D = GT2 "dog"
#     A.B.
#     A.B.
#     ....
#     DDDD
#   predictions (picture of each below):
#     P0 person = A|B      IoU(GT0) = 2/4 = 0.5, IoU(GT1) = 0.5 -> tie, first GT wins: GT0;
#                          0.5 >= 0.5 passes the threshold
#     P1 person = B        IoU(GT1) = 1 -> GT1
#     P2 dog    = D        IoU(GT2) = 1 -> GT2
#     P3 dog    = D        IoU(GT2) = 1, equal to P2's -> earlier prediction keeps GT2 (unique)
#     P4 dog    = A        the only dog GT is GT2, IoU 0 -> unmatched (category restricts)
#   unique   L = {0:0, 1:1, 2:2}          multimpo L = {0:0, 1:1, 2:2, 3:2}
#   predicates: 0 "on", 1 "near"; relations (0,2,0) (1,2,1); G = {(0,2,0), (1,2,1)}
#   T = [(0,2,0), (1,3,1), (4,2,0)]  (pairs all distinct, so GC = all)
#   unique:   (0,2,0) hit; (1,3,1) P3 unmatched; (4,2,0) P4 unmatched -> R@20 1/2, InstR 3/3
#   multimpo: (1,3,1) -> (1,2,1) hit too -> R@20 1, InstR 3/3
#   threshold 0.51: P0 unmatched -> unique L = {1:1, 2:2}, R@20 0, InstR 2/3
#   (had the last GT won the tie, P0 would take GT1 and lose it to P1: R@20 0, InstR 2/3 at 0.5)

PICTURE_B = """
    A.B.
    A.B.
    ....
    DDDD
"""


def fixture_b():
    gt_masks = grid_masks(PICTURE_B, "ABD")
    pred_masks = np.array(
        [gt_masks[0] | gt_masks[1], gt_masks[1], gt_masks[2], gt_masks[2], gt_masks[0]], dtype=bool
    )
    dataset = {
        "thing_classes": ["person", "dog"],
        "stuff_classes": [],
        "predicate_classes": ["on", "near"],
        "images": [
            {
                "image_id": "b",
                "height": 4,
                "width": 4,
                "split": "test",
                "categories": [0, 0, 1],
                "masks": gt_masks,
                "boxes": [[0, 0, 1, 2], [2, 0, 3, 2], [0, 3, 4, 4]],
                "relations": [[0, 2, 0], [1, 2, 1]],
            }
        ],
    }
    prediction = {
        "id": "b",
        "instances": [{"category": c, "bbox": [0, 0, 1, 1], "score": 0.5} for c in (0, 0, 1, 1, 1)],
        "triplets": [[0, 2, 0], [1, 3, 1], [4, 2, 0]],
        "masks": pred_masks,
    }
    return dataset, [prediction]


def test_fixture_b_matching_maps():
    # Reference only: the reference's match_instances; sgeval's matchers: test_kernels.py.
    dataset, (prediction,) = fixture_b()
    gt_masks = dataset["images"][0]["masks"]
    pred_masks = prediction["masks"]

    def iou(m, g):
        return mask_iou(pred_masks[m], gt_masks[g])

    pred_cats = [inst["category"] for inst in prediction["instances"]]
    gt_cats = dataset["images"][0]["categories"]
    assert match_instances(pred_cats, gt_cats, iou, 0.5, "unique") == {0: 0, 1: 1, 2: 2}
    assert match_instances(pred_cats, gt_cats, iou, 0.5, "multimpo") == {0: 0, 1: 1, 2: 2, 3: 2}
    assert match_instances(pred_cats, gt_cats, iou, 0.51, "unique") == {1: 1, 2: 2}


def test_fixture_b_tied_iou_unique(evaluate):
    dataset, predictions = fixture_b()
    result = evaluate(dataset, predictions, ks=("20",))
    assert_metrics(result, {"R@20": F(1, 2), "InstR": 1, "R@inf": 1, "PRank": 0})
    # PRank: only (0,2,0) -> (0,2,0) is ranked (rank 0); "near" has no ranked GT triplet.
    assert_per_predicate(result, "PRank", {"on": 0.0, "near": None})


def test_fixture_b_tied_iou_multimpo(evaluate):
    dataset, predictions = fixture_b()
    result = evaluate(dataset, predictions, ks=("20",), protocol="multimpo")
    assert_metrics(result, {"R@20": 1, "mR@20": 1, "ngR@20": 1, "InstR": 1})


def test_fixture_b_threshold_is_inclusive(evaluate):
    dataset, predictions = fixture_b()
    result = evaluate(dataset, predictions, ks=("20",), iou_threshold=0.51)
    assert_metrics(result, {"R@20": 0, "InstR": F(2, 3), "R@inf": F(1, 2)})


# -------------------------------------------------------------------------------------------------
# Fixture C — box mode, one GT instance claimed by two predictions; unique vs multimpo.
#
#   GT0 "person" [0,0,10,10], GT1 "dog" [20,0,30,10]
#   predicates: 0 "near", 1 "looking at"; relations (0,1,0) (0,1,1); pairs(G) = {(0,1)}
#   P0 person [0,0,10,6]  IoU(GT0) = 60/100 = 0.6
#   P1 person [0,0,10,8]  IoU(GT0) = 80/100 = 0.8 -> strictly better, takes GT0 from P0
#   P2 dog    [20,0,30,10] IoU(GT1) = 1
#   P3 person [0,0,10,4]  IoU(GT0) = 0.4 < 0.5 -> never matched
#   P4 dog    [20,0,30,5] IoU(GT1) = 0.5 -> candidate, but 0.5 is not > 1 (P2 keeps GT1)
#   unique L = {1:0, 2:1};  multimpo L = {0:0, 1:0, 2:1, 4:1}
#   T = [(1,2,1), (1,2,0), (0,2,1), (3,2,0), (0,2,0)]  (no ng_triplets: T_ng = T)
#
#   unique, GC_20 = (1,2,1) (0,2,1) (3,2,0): only (1,2,1) -> (0,1,1) maps
#       R@20 1/2, mR@20 (0 + 1)/2 = 1/2, PR@20 1
#     GC_1 = (1,2,1)                   R@1 1/2, mR@1 1/2, PR@1 1
#     NG_20 = all: (0,1,1) (0,1,0)     ngR@20 1, mNgR@20 1;  NG_1 = (1,2,1): ngR@1 1/2
#     PRank: (1,2,1)->(0,1,1) rank 0, (1,2,0)->(0,1,0) rank 1, the rest have an unmatched end
#       near 1, looking at 0 -> 1/2
#   multimpo, no graph constraint: first 20 distinct of T = all 5:
#       (0,1,1) (0,1,0) (0,1,1) - (0,1,0) -> R@20 1, mR@20 1, PR@20 1
#     (GC_20 would have kept (1,2,1) (0,2,1) (3,2,0) -> only (0,1,1): R 1/2)
#     first 1 = (1,2,1) -> R@1 1/2, mR@1 1/2, PR@1 1
#     PRank: (1,2,1)->(0,1,1) r0, (1,2,0)->(0,1,0) r1, (0,2,1)->(0,1,1) repeat dropped,
#       (3,2,0) unmatched, (0,2,0)->(0,1,0) repeat dropped -> near 1, looking at 0 -> 1/2
#       (without the repeat rule the repeats would re-rank (0,1,1) as 2 and (0,1,0) as 3)


def fixture_c():
    dataset = {
        "thing_classes": ["person", "dog"],
        "stuff_classes": [],
        "predicate_classes": ["near", "looking at"],
        "images": [
            {
                "image_id": "c",
                "height": 40,
                "width": 40,
                "split": "test",
                "categories": [0, 1],
                "boxes": [[0, 0, 10, 10], [20, 0, 30, 10]],
                "relations": [[0, 1, 0], [0, 1, 1]],
            }
        ],
    }
    boxes = [(0, [0, 0, 10, 6]), (0, [0, 0, 10, 8]), (1, [20, 0, 30, 10]), (0, [0, 0, 10, 4]),
             (1, [20, 0, 30, 5])]
    prediction = {
        "id": "c",
        "instances": [{"category": c, "bbox": b, "score": 0.5} for c, b in boxes],
        "triplets": [[1, 2, 1], [1, 2, 0], [0, 2, 1], [3, 2, 0], [0, 2, 0]],
    }
    return dataset, [prediction]


def test_fixture_c_claimed_twice_unique(evaluate):
    dataset, predictions = fixture_c()
    result = evaluate(dataset, predictions, mode="box", ks=("1", "20"))
    assert_metrics(
        result,
        {
            "R@1": F(1, 2), "mR@1": F(1, 2), "PR@1": 1, "ngR@1": F(1, 2), "mNgR@1": F(1, 2),
            "R@20": F(1, 2), "mR@20": F(1, 2), "PR@20": 1, "ngR@20": 1, "mNgR@20": 1,
            "InstR": 1, "R@inf": 1, "mR@inf": 1, "PRank": F(1, 2),
        },
    )
    assert_per_predicate(result, "mR@20", {"near": 0.0, "looking at": 1.0})
    assert_per_predicate(result, "PRank", {"near": 1.0, "looking at": 0.0})


def test_fixture_c_claimed_twice_multimpo(evaluate):
    dataset, predictions = fixture_c()
    result = evaluate(dataset, predictions, mode="box", ks=("1", "20"), protocol="multimpo")
    assert_metrics(
        result,
        {
            "R@1": F(1, 2), "mR@1": F(1, 2), "PR@1": 1, "ngR@1": F(1, 2),
            "R@20": 1, "mR@20": 1, "PR@20": 1, "ngR@20": 1, "mNgR@20": 1,
            "InstR": 1, "R@inf": 1, "PRank": F(1, 2),
        },
    )
    assert_per_predicate(result, "PRank", {"near": 1.0, "looking at": 0.0})


# -------------------------------------------------------------------------------------------------
# Fixture D — box mode, several images: aggregation, missing / extra / skipped images, int ids,
# ng_triplets, per-image means (not pooled), absent predicates.
#
#   objects: person 0, dog 1, grass 2; predicates: 0 "on", 1 "has", 2 "near", 3 "under" (absent)
#   image "101" test: GT0 person, GT1 dog, GT2 grass; relations (0,2,0) (1,2,0) (0,1,2)
#   image "7"   test: GT0 person, GT1 dog; relations (0,1,1) (0,1,1) (1,0,0) -> G {(0,1,1),(1,0,0)}
#                     NO prediction record -> counts with zeros everywhere, PRank undefined
#   image "8"   test: GT0 person, GT1 grass; relations (0,1,0)
#   image "55"  test: no relations -> skipped_no_relations
#   image "9"   train -> never evaluated
#   predictions: id 101 (an int), "8", and "55", "9", "zzz" (extra: 3); "7" missing (1)
#   every prediction's instances equal the GT boxes and categories: L is the identity
#
#   101: T = (0,2,0) (0,1,1) (1,2,0);  T_ng = (0,1,0) (0,1,2) (0,2,0) (0,2,0) (1,2,1) (1,2,0)
#     k=20 and x1 (k=3): GC = T -> hits (0,2,0) (1,2,0): R 2/3, on 2/2, near 0/1, PR 3/3
#     NG_20 = T_ng without the repeat -> hits all 3: ngR 1, on 1, near 1
#     NG_x1 = (0,1,0) (0,1,2) (0,2,0) -> ngR 2/3, on 1/2, near 1
#     InstR 1, R@inf 1; PRank ranks (0,1,0):0 (0,1,2):1 (0,2,0):0 (1,2,1):0 (1,2,0):1
#       -> on (0+1)/2 = 1/2, near 1
#   7: everything 0 (on 0, has 0); no PRank
#   8: T = (0,1,0) -> R, PR, ngR, InstR, R@inf all 1, on 1; PRank on 0
#
#   R@20 = R@x1 = (2/3 + 0 + 1)/3 = 5/9        PR@20 = PR@x1 = (1 + 0 + 1)/3 = 2/3
#   ngR@20 = (1 + 0 + 1)/3 = 2/3               ngR@x1 = (2/3 + 0 + 1)/3 = 5/9
#   InstR = R@inf = (1 + 0 + 1)/3 = 2/3
#   mR@20 = mR@x1: on (1+0+1)/3 = 2/3 (pooled would be 3/4), has 0, near 0 -> (2/3)/3 = 2/9
#   mNgR@20: on 2/3, has 0, near 1 -> 5/9;  mNgR@x1: on (1/2+0+1)/3 = 1/2, has 0, near 1 -> 1/2
#   mR@inf: on 2/3, has 0, near 1 -> 5/9
#   PRank: on (1/2 + 0)/2 = 1/4 (pooled would be 1/3), has None, near 1 -> 5/8
#   absent_predicates="zero" (divide by 4): mR@20 1/6, mNgR@20 5/12, mNgR@x1 3/8, mR@inf 5/12


def fixture_d():
    person, dog, grass = [0, 0, 10, 10], [20, 0, 30, 10], [0, 20, 30, 30]

    def image(image_id, split, categories, boxes, relations):
        return {"image_id": image_id, "height": 30, "width": 30, "split": split,
                "categories": categories, "boxes": boxes, "relations": relations}

    def prediction(pred_id, categories, boxes, triplets, **extra):
        record = {"id": pred_id,
                  "instances": [{"category": c, "bbox": b, "score": 0.9} for c, b in zip(categories, boxes)],
                  "triplets": triplets}
        record.update(extra)
        return record

    dataset = {
        "thing_classes": ["person", "dog"],
        "stuff_classes": ["grass"],
        "predicate_classes": ["on", "has", "near", "under"],
        "images": [
            image("101", "test", [0, 1, 2], [person, dog, grass], [[0, 2, 0], [1, 2, 0], [0, 1, 2]]),
            image("7", "test", [0, 1], [person, dog], [[0, 1, 1], [0, 1, 1], [1, 0, 0]]),
            image("8", "test", [0, 2], [person, grass], [[0, 1, 0]]),
            image("55", "test", [0], [person], []),
            image("9", "train", [0, 1], [person, dog], [[0, 1, 0]]),
        ],
    }
    predictions = [
        prediction(
            101, [0, 1, 2], [person, dog, grass], [[0, 2, 0], [0, 1, 1], [1, 2, 0]],
            ng_triplets=[[0, 1, 0], [0, 1, 2], [0, 2, 0], [0, 2, 0], [1, 2, 1], [1, 2, 0]],
        ),
        prediction("8", [0, 2], [person, grass], [[0, 1, 0]]),
        prediction("55", [0], [person], [[0, 0, 0]]),
        prediction("9", [0, 1], [person, dog], [[0, 1, 0]]),
        prediction("zzz", [], [], []),
    ]
    return dataset, predictions


def test_fixture_d_aggregation(evaluate):
    dataset, predictions = fixture_d()
    result = evaluate(dataset, predictions, mode="box", ks=("20", "x1"))
    assert result["images"] == {
        "evaluated": 3,
        "missing_predictions": 1,
        "skipped_no_relations": 1,
        "extra_predictions": 3,
        "scope": "all",
        "duplicate_updates": 0,
    }
    assert_metrics(
        result,
        {
            "R@20": F(5, 9), "R@x1": F(5, 9), "PR@20": F(2, 3), "PR@x1": F(2, 3),
            "ngR@20": F(2, 3), "ngR@x1": F(5, 9), "InstR": F(2, 3), "R@inf": F(2, 3),
            "mR@20": F(2, 9), "mR@x1": F(2, 9), "mNgR@20": F(5, 9), "mNgR@x1": F(1, 2),
            "mR@inf": F(5, 9), "PRank": F(5, 8),
        },
    )
    assert result["absent_predicates"] == ["under"]
    assert_per_predicate(result, "mR@20", {"on": float(F(2, 3)), "has": 0.0, "near": 0.0})
    assert_per_predicate(result, "mNgR@x1", {"on": 0.5, "has": 0.0, "near": 1.0})
    assert_per_predicate(result, "PRank", {"on": 0.25, "has": None, "near": 1.0})


def test_fixture_d_absent_predicates_zero(evaluate):
    dataset, predictions = fixture_d()
    result = evaluate(dataset, predictions, mode="box", ks=("20", "x1"), absent_predicates="zero")
    assert_metrics(
        result,
        {
            "mR@20": F(1, 6), "mR@x1": F(1, 6), "mNgR@20": F(5, 12), "mNgR@x1": F(3, 8),
            "mR@inf": F(5, 12), "PRank": F(5, 8), "R@20": F(5, 9),
        },
    )


def test_no_evaluated_images_gives_none_everywhere(evaluate):
    # Only a train image and a test image without relations: both predictions are extra.
    dataset, predictions = fixture_d()
    dataset["images"] = [im for im in dataset["images"] if im["image_id"] in ("55", "9")]
    for rule in ("skip", "zero"):
        result = evaluate(dataset, predictions, mode="box", ks=("20",), absent_predicates=rule)
        assert result["images"] == {
            "evaluated": 0,
            "missing_predictions": 0,
            "skipped_no_relations": 1,
            "extra_predictions": 5,
            "scope": "all",
            "duplicate_updates": 0,
        }
        assert set(result["metrics"]) == {
            "R@20", "mR@20", "ngR@20", "mNgR@20", "PR@20", "InstR", "R@inf", "mR@inf", "PRank",
            "zR@20", "ngzR@20", "IMR@10", "IMR@20", "IMR@50", "wIMR@10", "wIMR@20", "wIMR@50",
        }
        assert all(value is None for value in result["metrics"].values())
        assert all(values == {} for values in result["per_predicate"].values())
        assert result["absent_predicates"] == ["on", "has", "near", "under"]
        assert result["imr_short_images"] == {"10": 0, "20": 0, "50": 0}
        # the extra records (one has a self-pair) are not audited
        assert set(result["audit"].values()) == {0}


def test_duplicate_prediction_ids_are_an_error(evaluate):
    dataset, predictions = fixture_d()
    predictions.append(dict(predictions[1], id=8))  # "8" and 8 are the same id
    with pytest.raises(ValueError, match="id 8 occurs twice|image 8: duplicate"):  # reference | sgeval
        evaluate(dataset, predictions, mode="box", ks=("20",))


# -------------------------------------------------------------------------------------------------
# Fixture E — SingleMPO merge, mask mode, a 1x10 image (one row of pixels, so IoU = column counts).
#
#   columns          0123456789  score
#   I0 person        ..XXXXXX..  0.7
#   I1 tree          ........XX  0.6
#   I2 person        XXXX......  0.9
#   I3 grass         ...XX.....  0.6
#   I4 dog           ..XXXX....  0.4
#   I5 person        XXX.......  0.8
#   GT0 person       XXXX......
#   GT1 person       ......XX..
#   GT2 tree         ........XX
#   predicates: 0 "beside", 1 "near"; relations (0,1,0) (1,2,1); G = {(0,1,0), (1,2,1)}
#   T = [(5,2,1), (2,0,0), (4,1,1), (3,1,0), (0,1,1)], no ng_triplets
#
#   Order by score: I2 .9, I5 .8, I0 .7, I1 .6, I3 .6 (tie: index order), I4 .4 -> [2,5,0,1,3,4]
#   Walk (claimed starts empty):
#     I2: node 0 (person), mask cols 0-3, claimed {0..3}; absorbs later I5 (3/4 >= .5);
#         not I0 (2/8), I1 (0), I3 (1/5), I4 ({2,3}/{0..5} = 2/6)
#     I5: absorbed -> skip
#     I0: unclaimed = cols 4-7 (4 of its 6 pixels) -> node 1 (person), mask cols 4-7;
#         claimed {0..7}; absorbs I4 (dog!) with full masks 4/6 (its shrunk mask would give
#         {4,5}/{2..7} = 2/6); not I1 (0), I3 ({3,4}/{2..7} = 2/6)
#     I1: node 2 (tree), cols 8-9
#     I3: cols 3-4 all claimed -> dropped (IoU only 1/5 and 2/6 with the nodes: never absorbed)
#     I4: absorbed -> skip
#   node_of {2:0, 5:0, 0:1, 4:1, 1:2}; absorbed {5, 4}; dropped {3}
#   Matching the nodes: node 0 -> GT0 (IoU 1); node 1 (cols 4-7) -> GT1 {6,7}/{4..7} = 2/4 = .5
#     (the full I0 mask would give 2/6 < .5); node 2 -> GT2 (1)   -> L = {0:0, 1:1, 2:2}
#   Remapped T: (5,2,1) -> (0,0,1) self-pair, removed; (2,0,0) -> (0,1,0); (4,1,1) -> (1,2,1);
#     (3,1,0) touches dropped I3, removed; (0,1,1) -> (1,2,1)
#     node T = [(0,1,0), (1,2,1), (1,2,1)]
#   singlempo: GC_1 = (0,1,0): R@1 1/2; GC_20 = (0,1,0) (1,2,1): R@20 1, PR@20 1; NG_20: ngR 1;
#     InstR 3/3, R@inf 1; PRank: (0,1,0) r0, (1,2,1) r0 (the repeat dropped) -> 0
#     IMR: beside [(0,1,0)], near [(1,2,1)] (dedup) -> IMR@1 = IMR@2 = 1; short at k=2 only
#   unique on the raw instances: I0 (cols 2-7) has GT0 2/8, GT1 2/6 -> no candidate; I2 -> GT0 (1);
#     I5 -> GT0 (3/4) loses to I2; I1 -> GT2; dogs and grass have no GT -> L = {2:0, 1:2}
#     every triplet of T has I0, I3, I4 or I5 -> R@20 0, ngR@20 0, IMR 0; InstR 2/3, R@inf 0
#   Audit (any protocol): no repeated triplet / pair, no self-pair; duplicate instances: I5
#     (person, earlier person I2 with IoU 3/4) -> 1; I2 vs I0 2/8 no; absorbed 2, dropped 1;
#     remapped kept pairs (0,1) (1,2) (1,2) -> 1 duplicate relation after the merge
#
#   Without scores (I3's score None): first appearance in T: 5, 2, 0, 4, 1, 3 -> walk:
#     I5: node 0 (person) cols 0-2, claims {0,1,2}; absorbs I2 (3/4)
#     I0: node 1 (person) cols 3-7 (5 px), claims {0..7}; absorbs I4 (4/6); not I3 (2/6)
#     I1: node 2 (tree); I3: dropped
#     L: node 0 -> GT0 (3/4); node 1 vs GT1 {6,7}/{3..7} = 2/5 < .5 -> unmatched; node 2 -> GT2
#     node T = [(0,1,0), (1,2,1), (1,2,1)] again, but node 1 is unmatched -> R@20 0, InstR 2/3
#   Without scores but ng_triplets = [(2,0,0)]: T_ng is walked first: 2, 0, then T: 5, 4, 1, 3
#     -> the same nodes as by score -> R@20 1, InstR 1

ROWS_E = {
    "I0": "..XXXXXX..",
    "I1": "........XX",
    "I2": "XXXX......",
    "I3": "...XX.....",
    "I4": "..XXXX....",
    "I5": "XXX.......",
    "GT0": "XXXX......",
    "GT1": "......XX..",
    "GT2": "........XX",
}


def row_masks(*names):
    """Stack of (1, 10) boolean masks from ROWS_E."""
    return np.array([[[ch == "X" for ch in ROWS_E[name]]] for name in names], dtype=bool)


def fixture_e(scores=(0.7, 0.6, 0.9, 0.6, 0.4, 0.8), **prediction_fields):
    person, tree, grass, dog = 0, 1, 2, 3
    dataset = {
        "thing_classes": ["person", "tree", "grass", "dog"],
        "stuff_classes": [],
        "predicate_classes": ["beside", "near"],
        "images": [
            {
                "image_id": "e",
                "height": 1,
                "width": 10,
                "split": "test",
                "categories": [person, person, tree],
                "masks": row_masks("GT0", "GT1", "GT2"),
                "boxes": [[0, 0, 4, 1], [6, 0, 8, 1], [8, 0, 10, 1]],
                "relations": [[0, 1, 0], [1, 2, 1]],
            }
        ],
    }
    categories = [person, tree, person, grass, dog, person]
    prediction = {
        "id": "e",
        "instances": [
            {"category": c, "bbox": [0, 0, 1, 1], "score": score} for c, score in zip(categories, scores)
        ],
        "triplets": [[5, 2, 1], [2, 0, 0], [4, 1, 1], [3, 1, 0], [0, 1, 1]],
        "masks": row_masks("I0", "I1", "I2", "I3", "I4", "I5"),
    }
    prediction.update(prediction_fields)
    return dataset, [prediction]


def test_merge_order_by_score_and_by_first_appearance():
    # Reference only: the reference's merge_order; sgeval's: test_protocols.py.
    dataset, (prediction,) = fixture_e()
    instances = prediction["instances"]
    T = [tuple(t) for t in prediction["triplets"]]
    # scores .7 .6 .9 .6 .4 .8: ties (I1, I3) keep index order
    assert merge_order(instances, T, T) == [2, 5, 0, 1, 3, 4]
    # one score missing (None or no key) -> first appearance: s then o, T_ng then T
    instances = [dict(inst) for inst in instances]
    instances[3]["score"] = None
    assert merge_order(instances, T, T) == [5, 2, 0, 4, 1, 3]
    del instances[3]["score"]
    assert merge_order(instances, [(2, 0, 0)], T) == [2, 0, 5, 4, 1, 3]
    # T_ng (3,4) first, then T (4,1); I0, I2, I5 never referenced -> last, in index order
    assert merge_order(instances, [(3, 4, 0)], [(4, 1, 1)]) == [3, 4, 1, 0, 2, 5]
    assert merge_order([], [], []) == []


def test_singlempo_merge_claims_pixels_absorbs_across_labels_and_drops():
    # Reference only: the reference's singlempo_merge; sgeval's merge_walk: test_protocols.py.
    masks = row_masks("I0", "I1", "I2", "I3", "I4", "I5")
    node_of, creators, node_masks, absorbed, dropped = singlempo_merge([2, 5, 0, 1, 3, 4], "mask", masks)
    assert creators == [2, 0, 1]
    assert node_of == {2: 0, 5: 0, 0: 1, 4: 1, 1: 2}
    assert absorbed == {5, 4} and dropped == {3}
    assert np.array_equal(np.array(node_masks)[:, 0], [
        [ch == "X" for ch in "XXXX......"],
        [ch == "X" for ch in "....XXXX.."],  # I0 shrank from cols 2-7 to its unclaimed 4-7
        [ch == "X" for ch in "........XX"],
    ])
    # first-appearance order: I5 leads, I0's node keeps cols 3-7
    node_of, creators, node_masks, absorbed, dropped = singlempo_merge([5, 2, 0, 4, 1, 3], "mask", masks)
    assert creators == [5, 0, 1]
    assert node_of == {5: 0, 2: 0, 0: 1, 4: 1, 1: 2}
    assert absorbed == {2, 4} and dropped == {3}
    assert np.array_equal(node_masks[1][0], [ch == "X" for ch in "...XXXXX.."])


def test_singlempo_merge_box_mode_never_drops():
    # Reference only: the reference's singlempo_merge.
    # A [0,0,10,10]; B [0,0,10,4] inside A: IoU(A,B) = 40/100 = .4; C [0,0,10,8]: IoU(A,C) = .8,
    # IoU(B,C) = 40/80 = .5.  Order A, B, C: A absorbs C (.8), not B (.4); B is a node although
    # all of it lies inside A (mask mode would drop it).  Order B, A, C: B absorbs C (.5, >=);
    # A (.4) stays -> node 1.
    boxes = [[0, 0, 10, 10], [0, 0, 10, 4], [0, 0, 10, 8]]
    assert singlempo_merge([0, 1, 2], "box", boxes=boxes) == ({0: 0, 2: 0, 1: 1}, [0, 1], [], {2}, set())
    assert singlempo_merge([1, 0, 2], "box", boxes=boxes) == ({1: 0, 2: 0, 0: 1}, [1, 0], [], {2}, set())


def test_remap_triplets_removes_dropped_ends_and_self_pairs():
    # Reference only: the reference's remap_triplets.
    node_of = {2: 0, 5: 0, 0: 1, 4: 1, 1: 2}
    T = [(5, 2, 1), (2, 0, 0), (4, 1, 1), (3, 1, 0), (0, 1, 1)]
    assert remap_triplets(T, node_of) == [(0, 1, 0), (1, 2, 1), (1, 2, 1)]


AUDIT_E = {
    "repeated_triplets": 0, "repeated_pairs": 0, "self_pairs": 0, "duplicate_instances": 1,
    "absorbed_instances": 2, "dropped_instances": 1, "duplicate_relations_after_merge": 1,
}


def test_fixture_e_singlempo_by_score(evaluate):
    dataset, predictions = fixture_e()
    result = evaluate(dataset, predictions, ks=("1", "20"), imr_ks=("1", "2"), protocol="singlempo")
    assert_metrics(
        result,
        {
            "R@1": F(1, 2), "mR@1": F(1, 2), "R@20": 1, "mR@20": 1, "PR@20": 1, "ngR@20": 1,
            "InstR": 1, "R@inf": 1, "PRank": 0, "IMR@1": 1, "IMR@2": 1,
        },
    )
    assert_per_predicate(result, "mR@1", {"beside": 1.0, "near": 0.0})
    assert result["imr_short_images"] == {"1": 0, "2": 1}
    assert result["audit"] == AUDIT_E


def test_fixture_e_unique_and_multimpo_see_the_raw_instances(evaluate):
    dataset, predictions = fixture_e()
    for protocol in ("unique", "multimpo"):
        result = evaluate(dataset, predictions, ks=("1", "20"), imr_ks=("1", "2"),
                                    protocol=protocol)
        assert_metrics(
            result,
            {"R@20": 0, "ngR@20": 0, "InstR": F(2, 3), "R@inf": 0, "IMR@1": 0, "IMR@2": 0},
        )
        assert result["audit"] == AUDIT_E  # the audit does not depend on the protocol


def test_fixture_e_singlempo_by_first_appearance(evaluate):
    dataset, predictions = fixture_e(scores=(0.7, 0.6, 0.9, None, 0.4, 0.8))
    result = evaluate(dataset, predictions, ks=("20",), protocol="singlempo")
    assert_metrics(result, {"R@20": 0, "ngR@20": 0, "InstR": F(2, 3)})
    assert result["audit"] == AUDIT_E

    # ng_triplets are walked before triplets: (2,0,0) puts I2 and I0 first -> nodes as by score
    dataset, predictions = fixture_e(scores=(0.7, 0.6, 0.9, None, 0.4, 0.8), ng_triplets=[[2, 0, 0]])
    result = evaluate(dataset, predictions, ks=("20",), protocol="singlempo")
    assert_metrics(result, {"R@20": 1, "InstR": 1, "ngR@20": F(1, 2)})


def test_singlempo_merge_threshold_ignores_iou_threshold(evaluate):
    # iou_threshold 0.6 only changes the node -> GT matching: node 1 reaches GT1 with .5 only,
    # so it is unmatched: L = {0:0, 2:2}; the merge (threshold .5) is unchanged: I4 (4/6) and
    # I5 (3/4) are still absorbed -> R@20 0 ((0,1,0) and (1,2,1) both need GT1), InstR 2/3.
    dataset, predictions = fixture_e()
    result = evaluate(dataset, predictions, ks=("20",), protocol="singlempo", iou_threshold=0.6)
    assert_metrics(result, {"R@20": 0, "InstR": F(2, 3)})
    assert result["audit"]["absorbed_instances"] == 2


# -------------------------------------------------------------------------------------------------
# Fixture F — box mode: unique, singlempo and multimpo give three different R@k.
#
#   GT0 person [0,0,10,10], GT1 horse [20,0,30,10]
#   predicates: 0 "riding", 1 "near", 2 "under"; G = {(0,1,0), (0,1,1), (1,0,2)}; pairs {01, 10}
#   P0 person [0,0,10,10] .9 (IoU GT0 1); P1 person [0,0,10,8] .8 (IoU GT0 .8, IoU P0 .8);
#   P2 horse [20,0,30,10] .7 (IoU GT1 1)
#   T = [(1,2,0), (0,2,1), (2,1,2)] (three distinct pairs), no ng_triplets
#
#   unique:    L = {0:0, 2:1} (P1's .8 is not > P0's 1)
#              GC_1 = (1,2,0) miss -> R@1 0; GC_20 = all, only (0,2,1) -> (0,1,1): R@20 1/3
#              PR@20 1/2, ngR@20 1/3
#   singlempo: order P0, P1, P2; P0 absorbs P1 (.8); P2 is node 1 -> L = {0:0, 1:1}
#              node T = (0,1,0) (0,1,1) (1,0,2); GC drops (0,1,1) (same pair as (0,1,0))
#              R@1 1/3, R@20 2/3, PR@20 1, ngR@20 1
#   multimpo:  L = {0:0, 1:0, 2:1}; first k distinct of T, no graph constraint
#              R@1 1/3 ((1,2,0) -> (0,1,0)), R@20 1, PR@20 1, ngR@20 1
#   InstR 1 for all three.
#   Audit: duplicate instances 1 (P1, person, IoU .8 with P0); absorbed 1, dropped 0;
#     remapped pairs (0,1) (0,1) (1,0) -> 1 duplicate relation after the merge


def fixture_f():
    dataset = {
        "thing_classes": ["person", "horse"],
        "stuff_classes": [],
        "predicate_classes": ["riding", "near", "under"],
        "images": [
            {
                "image_id": "f",
                "height": 10,
                "width": 30,
                "split": "test",
                "categories": [0, 1],
                "boxes": [[0, 0, 10, 10], [20, 0, 30, 10]],
                "relations": [[0, 1, 0], [0, 1, 1], [1, 0, 2]],
            }
        ],
    }
    instances = [(0, [0, 0, 10, 10], 0.9), (0, [0, 0, 10, 8], 0.8), (1, [20, 0, 30, 10], 0.7)]
    prediction = {
        "id": "f",
        "instances": [{"category": c, "bbox": b, "score": s} for c, b, s in instances],
        "triplets": [[1, 2, 0], [0, 2, 1], [2, 1, 2]],
    }
    return dataset, [prediction]


@pytest.mark.parametrize(
    "protocol, expected",
    [
        ("unique", {"R@1": 0, "R@20": F(1, 3), "PR@20": F(1, 2), "ngR@20": F(1, 3), "InstR": 1}),
        ("singlempo", {"R@1": F(1, 3), "R@20": F(2, 3), "PR@20": 1, "ngR@20": 1, "InstR": 1}),
        ("multimpo", {"R@1": F(1, 3), "R@20": 1, "PR@20": 1, "ngR@20": 1, "InstR": 1}),
    ],
)
def test_fixture_f_three_protocols(protocol, expected, evaluate):
    dataset, predictions = fixture_f()
    result = evaluate(dataset, predictions, mode="box", ks=("1", "20"), protocol=protocol)
    assert_metrics(result, expected)
    assert result["audit"] == {
        "repeated_triplets": 0, "repeated_pairs": 0, "self_pairs": 0, "duplicate_instances": 1,
        "absorbed_instances": 1, "dropped_instances": 0, "duplicate_relations_after_merge": 1,
    }


# -------------------------------------------------------------------------------------------------
# Fixture G — box mode, train split: zero-shot recall, IMR and wIMR.
#
#   objects: person 0, dog 1, grass 2; predicates: 0 "on", 1 "near", 2 "under"
#   train "t1": person, grass, grass; (0,1,on) (0,2,on) -> type (person, grass, on) twice
#   train "t2": dog, grass, person; (0,1,on) -> (dog, grass, on); (2,0,near) -> (person, dog, near);
#               (1,0,under) -> (grass, dog, under)
#   train "t3": dog; no relations (still train)
#   train types {(0,2,0), (1,2,0), (0,1,1), (2,1,2)}
#   n_on = |{(person, grass), (dog, grass)}| = 2 (t1's pair counts once); n_near = 1; n_under = 1
#
#   test "z1": person, dog, grass; G = (0,2,0) seen, (1,2,0) seen, (1,0,1) = (dog, person, near)
#              unseen, (0,1,0) = (person, dog, on) unseen  -> |G| 4, Z = {(1,0,1), (0,1,0)}
#   test "z2": person, grass; G = (0,1,0) = (person, grass, on) seen -> Z empty (skipped)
#   test "z3": dog, person; G = (0,1,1) = (dog, person, near) unseen -> Z = {(0,1,1)}
#   test "z4": grass, dog; G = (0,1,1) = (grass, dog, near) unseen -> Z = {(0,1,1)}; NO prediction
#   Z* = {(1,0,1), (0,1,0), (2,1,1)}; "under" is absent from the evaluated GT
#   predictions: instances = GT boxes and categories (L = identity)
#     z1: T = [(0,2,0), (1,0,1), (0,1,0), (1,2,0)], T_ng = [(0,1,1), (0,1,0), (0,1,1), (1,0,1)]
#     z2: T = [(0,1,0)];  z3: T = [(0,1,1)]
#
#   zR, ks "1" and "x0.5" (z1: round(0.5 * |G| = 2) = 2; z3: 1):
#     z1: GC_1 = (0,2,0) -> 0/2; GC_2 = (0,2,0) (1,0,1) -> 1/2
#         NG_1 = (0,1,1) (not in G) -> 0/2; NG_2 = (0,1,1) (0,1,0) -> 1/2
#         (k from |Z| = 2 would give x0.5 -> 1 and zR 0)
#     z3: 1/1 everywhere;  z4: 0/1 everywhere
#     per image: zR@1 = (0 + 1 + 0)/3 = 1/3, zR@x0.5 = (1/2 + 1 + 0)/3 = 1/2, ngzR the same
#     pooled:    zR@1 = (0 + 1 + 0)/(2 + 1 + 1) = 1/4, zR@x0.5 = (1 + 1 + 0)/4 = 1/2
#   zeroshot given = {(person, grass, on)}: z1 Z = {(0,2,0)}, z2 Z = {(0,1,0)}, z3 and z4 none
#     z1: GC_1 = GC_2 hit (0,2,0) -> 1; NG_1, NG_2 never hold (0,2,0) -> 0;  z2: 1, 1
#     zR@1 = zR@x0.5 = 1, ngzR@1 = ngzR@x0.5 = (0 + 1)/2 = 1/2
#
#   IMR, imr_ks "1" and "2" (NG-deduplicated T_ng per predicate):
#     z1: T_ng dedup = (0,1,1) (0,1,0) (1,0,1); on: [(0,1,0)] -> 1/3 at k 1 and 2 (short at 2);
#         near: [(0,1,1), (1,0,1)] -> k=1: 0/1, k=2: 1/1
#     z2: on [(0,1,0)] -> 1/1 (short at 2);  z3: near [(0,1,1)] -> 1/1 (short at 2)
#     z4: no record -> near 0/1 (short at 1 and 2)
#     per image: on (1/3 + 1)/2 = 2/3 (both k); near k=1 (0 + 1 + 0)/3 = 1/3, k=2 (1 + 1 + 0)/3 = 2/3
#       IMR@1 = (2/3 + 1/3)/2 = 1/2, IMR@2 = (2/3 + 2/3)/2 = 2/3
#       absent_predicates="zero" (3 predicates): IMR@1 = 1/3, IMR@2 = 4/9 (wIMR unchanged)
#     pooled: on (1 + 1)/(3 + 1) = 1/2 (both k); near k=1 1/3, k=2 2/3
#       IMR@1 = (1/2 + 1/3)/2 = 5/12, IMR@2 = (1/2 + 2/3)/2 = 7/12
#     short images: k=1 {z4} -> 1; k=2 {z1, z2, z3, z4} -> 4
#   wIMR (predicates with an IMR value: on, near; "under" has n = 1 but no value -> left out):
#     tau = .5: w_on = sqrt 2 / (sqrt 2 + 1) = .5858, w_near = 1 / (sqrt 2 + 1) = .4142
#       wIMR@1 = .5858 * 2/3 + .4142 * 1/3 = (2 sqrt 2 + 1) / (3 (sqrt 2 + 1)) = .52860
#       wIMR@2 = 2/3 (both values 2/3)
#     tau = 1: w = 2/3, 1/3 -> wIMR@1 = 4/9 + 1/9 = 5/9
#     tau = 0: w = 1/2, 1/2 -> wIMR = IMR: 1/2 and 2/3
#     without train images every n_p = 0: tau .5 -> None; tau 0 -> 0.0 ** 0.0 = 1 -> IMR


def fixture_g():
    person, dog, grass = 0, 1, 2
    boxes = {person: [0, 0, 10, 10], dog: [20, 0, 30, 10], grass: [0, 20, 30, 30]}

    def image(image_id, split, categories, relations):
        return {"image_id": image_id, "height": 30, "width": 30, "split": split,
                "categories": categories, "boxes": [boxes[c] for c in categories],
                "relations": relations}

    def prediction(pred_id, categories, triplets, **extra):
        record = {"id": pred_id,
                  "instances": [{"category": c, "bbox": boxes[c], "score": 0.9} for c in categories],
                  "triplets": triplets}
        record.update(extra)
        return record

    dataset = {
        "thing_classes": ["person", "dog"],
        "stuff_classes": ["grass"],
        "predicate_classes": ["on", "near", "under"],
        "images": [
            image("t1", "train", [person, grass, grass], [[0, 1, 0], [0, 2, 0]]),
            image("t2", "train", [dog, grass, person], [[0, 1, 0], [2, 0, 1], [1, 0, 2]]),
            image("t3", "train", [dog], []),
            image("z1", "test", [person, dog, grass], [[0, 2, 0], [1, 2, 0], [1, 0, 1], [0, 1, 0]]),
            image("z2", "test", [person, grass], [[0, 1, 0]]),
            image("z3", "test", [dog, person], [[0, 1, 1]]),
            image("z4", "test", [grass, dog], [[0, 1, 1]]),
        ],
    }
    predictions = [
        prediction("z1", [person, dog, grass], [[0, 2, 0], [1, 0, 1], [0, 1, 0], [1, 2, 0]],
                   ng_triplets=[[0, 1, 1], [0, 1, 0], [0, 1, 1], [1, 0, 1]]),
        prediction("z2", [person, grass], [[0, 1, 0]]),
        prediction("z3", [dog, person], [[0, 1, 1]]),
    ]
    return dataset, predictions


def weighted_sum(weights_and_values, tau):
    """wIMR's float formula: sum of (n ** tau / total) * value in the given (ascending) order."""
    powers = [float(n) ** tau for n, _ in weights_and_values]
    total = sum(powers)
    return sum((power / total) * float(value) for power, (_, value) in zip(powers, weights_and_values))


def test_fixture_g_zero_shot_from_train_split(evaluate):
    dataset, predictions = fixture_g()
    for aggregation, expected in [
        ("per_image", {"zR@1": F(1, 3), "zR@x0.5": F(1, 2), "ngzR@1": F(1, 3), "ngzR@x0.5": F(1, 2)}),
        ("pooled", {"zR@1": F(1, 4), "zR@x0.5": F(1, 2), "ngzR@1": F(1, 4), "ngzR@x0.5": F(1, 2)}),
    ]:
        result = evaluate(dataset, predictions, mode="box", ks=("1", "x0.5"),
                                    aggregation=aggregation)
        assert result["images"]["evaluated"] == 4 and result["images"]["missing_predictions"] == 1
        assert_metrics(result, expected)


def test_fixture_g_zero_shot_given_set(evaluate):
    dataset, predictions = fixture_g()
    result = evaluate(dataset, predictions, mode="box", ks=("1", "x0.5"), zeroshot={(0, 2, 0)})
    assert_metrics(result, {"zR@1": 1, "zR@x0.5": 1, "ngzR@1": F(1, 2), "ngzR@x0.5": F(1, 2)})
    # a set that no GT triplet has: no image has Z -> None (the other metrics are untouched)
    result = evaluate(dataset, predictions, mode="box", ks=("1",), zeroshot={(2, 2, 2)})
    assert_metrics(result, {"zR@1": None, "ngzR@1": None})
    assert result["metrics"]["R@1"] is not None


def test_fixture_g_zero_shot_empty_set():
    # Reference only: an empty zero-shot set gives no image a Z -> None. sgeval rejects an empty
    # zero-shot list as bad input instead (test_errors_gt.py, test_zeroshot_file_without_any_triplet).
    dataset, predictions = fixture_g()
    result = reference_evaluate(dataset, predictions, mode="box", ks=("1",), zeroshot=set())
    assert_metrics({**result, "tolerance": 0.0}, {"zR@1": None, "ngzR@1": None})
    assert result["metrics"]["R@1"] is not None


def test_fixture_g_imr_and_wimr(evaluate):
    dataset, predictions = fixture_g()
    result = evaluate(dataset, predictions, mode="box", ks=("1",), imr_ks=("1", "2"))
    assert_metrics(result, {"IMR@1": F(1, 2), "IMR@2": F(2, 3)})
    assert_per_predicate(result, "IMR@1", {"on": float(F(2, 3)), "near": float(F(1, 3))})
    assert_per_predicate(result, "IMR@2", {"on": float(F(2, 3)), "near": float(F(2, 3))})
    assert result["imr_short_images"] == {"1": 1, "2": 4}
    # n_on = 2, n_near = 1
    assert_metrics(result, {"wIMR@1": weighted_sum([(2, F(2, 3)), (1, F(1, 3))], 0.5)})
    assert result["metrics"]["wIMR@1"] == pytest.approx((2 * 2 ** 0.5 + 1) / (3 * (2 ** 0.5 + 1)), abs=1e-15)
    assert result["metrics"]["wIMR@1"] == pytest.approx(0.52860, abs=1e-5)
    assert result["metrics"]["wIMR@2"] == pytest.approx(2 / 3, abs=1e-15)

    result = evaluate(dataset, predictions, mode="box", ks=("1",), imr_ks=("1",), tau=1)
    assert_metrics(result, {"wIMR@1": weighted_sum([(2, F(2, 3)), (1, F(1, 3))], 1.0)})
    assert result["metrics"]["wIMR@1"] == pytest.approx(5 / 9, abs=1e-15)

    # tau = 0: equal weights, wIMR = IMR (these values are exact in floats)
    result = evaluate(dataset, predictions, mode="box", ks=("1",), imr_ks=("1", "2"), tau=0)
    assert_metrics(result, {"wIMR@1": 0.5, "IMR@1": 0.5})
    assert_metrics(result, {"wIMR@2": float(F(2, 3)), "IMR@2": float(F(2, 3))})


def test_fixture_g_imr_absent_zero_and_pooled(evaluate):
    dataset, predictions = fixture_g()
    result = evaluate(dataset, predictions, mode="box", ks=("1",), imr_ks=("1", "2"),
                                absent_predicates="zero")
    assert_metrics(result, {"IMR@1": F(1, 3), "IMR@2": F(4, 9)})
    # wIMR ignores absent_predicates
    assert_metrics(result, {"wIMR@1": weighted_sum([(2, F(2, 3)), (1, F(1, 3))], 0.5)})

    result = evaluate(dataset, predictions, mode="box", ks=("1",), imr_ks=("1", "2"),
                                aggregation="pooled")
    assert_metrics(result, {"IMR@1": F(5, 12), "IMR@2": F(7, 12)})
    assert_per_predicate(result, "IMR@1", {"on": 0.5, "near": float(F(1, 3))})
    assert_metrics(result, {"wIMR@1": weighted_sum([(2, F(1, 2)), (1, F(1, 3))], 0.5)})
    assert_metrics(result, {"wIMR@2": weighted_sum([(2, F(1, 2)), (1, F(2, 3))], 0.5)})
    assert result["imr_short_images"] == {"1": 1, "2": 4}  # not affected by the aggregation


def test_fixture_g_wimr_without_training_relations(evaluate):
    dataset, predictions = fixture_g()
    dataset["images"] = [im for im in dataset["images"] if im["split"] == "test"]
    result = evaluate(dataset, predictions, mode="box", ks=("1",), imr_ks=("1",))
    assert result["metrics"]["wIMR@1"] is None
    result = evaluate(dataset, predictions, mode="box", ks=("1",), imr_ks=("1",), tau=0.0)
    assert_metrics(result, {"wIMR@1": 0.5, "IMR@1": 0.5})
    # without train images every GT type is zero-shot: Z = G, so zR = R
    assert result["metrics"]["zR@1"] == result["metrics"]["R@1"]


def test_bad_imr_k_tau_and_aggregation(evaluate):
    dataset, predictions = fixture_g()
    for kwargs in ({"imr_ks": ("x1",)}, {"imr_ks": ("0",)}, {"tau": -0.5}, {"tau": float("nan")},
                   {"aggregation": "mean"}, {"protocol": "nms"}):
        with pytest.raises(ValueError):  # sgeval: an SGEvalError, a ValueError
            evaluate(dataset, predictions, mode="box", ks=("1",), **kwargs)


# -------------------------------------------------------------------------------------------------
# Pooled vs per-image aggregation on fixture D (numbers from the fixture D comment).
#
#   |G|: 101 3, 7 2, 8 1 (total 6); GT instances 3, 2, 2 (7); pairs(G) 3, 2, 1 (6)
#   R@20 = R@x1: hits 2 + 0 + 1 = 3 -> 3/6 = 1/2 (per image 5/9)
#   PR@20: (3 + 0 + 1)/6 = 2/3;  ngR@20: (3 + 0 + 1)/6 = 2/3;  ngR@x1: (2 + 0 + 1)/6 = 1/2
#   InstR: (3 + 0 + 2)/7 = 5/7 (per image 2/3);  R@inf: (3 + 0 + 1)/6 = 2/3
#   mR@20: on (2 + 0 + 1)/(2 + 1 + 1) = 3/4, has 0/1, near 0/1 -> (3/4)/3 = 1/4 (per image 2/9)
#   mNgR@20: on 3/4, has 0, near 1/1 -> 7/12;  mNgR@x1: on (1 + 0 + 1)/4 = 1/2, has 0, near 1 -> 1/2
#   mR@inf: on 3/4, has 0, near 1 -> 7/12
#   PRank: on: 101 ranks 0 + 1, 8 rank 0 -> 1/3 (per image 1/4); near 1/1; has none -> 2/3
#   absent_predicates="zero": mR@20 = (3/4)/4 = 3/16, mNgR@20 = (7/4)/4 = 7/16


def test_fixture_d_pooled(evaluate):
    dataset, predictions = fixture_d()
    result = evaluate(dataset, predictions, mode="box", ks=("20", "x1"), aggregation="pooled")
    assert_metrics(
        result,
        {
            "R@20": F(1, 2), "R@x1": F(1, 2), "PR@20": F(2, 3), "ngR@20": F(2, 3), "ngR@x1": F(1, 2),
            "InstR": F(5, 7), "R@inf": F(2, 3), "mR@20": F(1, 4), "mR@x1": F(1, 4),
            "mNgR@20": F(7, 12), "mNgR@x1": F(1, 2), "mR@inf": F(7, 12), "PRank": F(2, 3),
        },
    )
    assert_per_predicate(result, "mR@20", {"on": 0.75, "has": 0.0, "near": 0.0})
    assert_per_predicate(result, "PRank", {"on": float(F(1, 3)), "has": None, "near": 1.0})

    result = evaluate(dataset, predictions, mode="box", ks=("20",), aggregation="pooled",
                                absent_predicates="zero")
    assert_metrics(result, {"mR@20": F(3, 16), "mNgR@20": F(7, 16), "PRank": F(2, 3)})


# -------------------------------------------------------------------------------------------------
# Audit — box mode, totals over evaluated images with a record.
#
#   "u1": GT person [0,0,10,10], horse [20,0,30,10]; relation (0,1,0)
#     I0 person [0,0,10,10] .9; I1 person [0,0,10,8] .8 (IoU I0 .8); I2 dog [0,0,10,9] .7
#     (IoU I0 .9, I1 80/90); I3 horse [20,0,30,10] .6
#     T = [(0,3,0), (0,3,0), (1,3,1), (2,2,0), (0,1,2), (3,0,1), (2,3,0)]
#     repeated triplets: the 2nd (0,3,0) -> 1;  repeated pairs: the 2nd (0,3) -> 1;  self: (2,2,0) -> 1
#     duplicate instances: I1 (person after person I0, .8) -> 1; I2 is a dog (no earlier dog)
#     merge: I0 absorbs I1 (.8) and I2 (.9, labels ignored); I3 node 1 -> absorbed 2, dropped 0
#     remapped: (0,1) (0,1)d (0,1)d [self] [self] (1,0) (0,1)d -> 3 duplicate relations
#   "u2": GT dog [0,0,10,10], person [20,0,30,10]; relation (0,1,0)
#     I0 dog [0,0,10,10] .5; I1 dog, same box, .5 (tie: index order); T = [(0,1,0), (1,0,0)]
#     duplicate instances 1; I0 absorbs I1 (IoU 1) -> absorbed 1; both triplets become self-pairs
#     -> removed, 0 duplicate relations; no repeats, no self-pairs in T
#   "u3": evaluated, no record -> 0;  "extra": not evaluated (self-pairs ignored)
#   totals: repeated_triplets 1, repeated_pairs 1, self_pairs 1, duplicate_instances 2,
#     absorbed 3, dropped 0, duplicate_relations_after_merge 3 — for every protocol


def fixture_audit():
    def image(image_id, categories, boxes):
        return {"image_id": image_id, "height": 10, "width": 30, "split": "test",
                "categories": categories, "boxes": boxes, "relations": [[0, 1, 0]]}

    person, dog, horse = 0, 1, 2
    dataset = {
        "thing_classes": ["person", "dog", "horse"],
        "stuff_classes": [],
        "predicate_classes": ["near", "on", "has"],
        "images": [
            image("u1", [person, horse], [[0, 0, 10, 10], [20, 0, 30, 10]]),
            image("u2", [dog, person], [[0, 0, 10, 10], [20, 0, 30, 10]]),
            image("u3", [person, horse], [[0, 0, 10, 10], [20, 0, 30, 10]]),
        ],
    }

    def instances(*rows):
        return [{"category": c, "bbox": b, "score": s} for c, b, s in rows]

    predictions = [
        {"id": "u1",
         "instances": instances((person, [0, 0, 10, 10], 0.9), (person, [0, 0, 10, 8], 0.8),
                                (dog, [0, 0, 10, 9], 0.7), (horse, [20, 0, 30, 10], 0.6)),
         "triplets": [[0, 3, 0], [0, 3, 0], [1, 3, 1], [2, 2, 0], [0, 1, 2], [3, 0, 1], [2, 3, 0]]},
        {"id": "u2",
         "instances": instances((dog, [0, 0, 10, 10], 0.5), (dog, [0, 0, 10, 10], 0.5)),
         "triplets": [[0, 1, 0], [1, 0, 0]]},
        {"id": "extra",
         "instances": instances((dog, [0, 0, 10, 10], 0.5), (dog, [0, 0, 10, 10], 0.5)),
         "triplets": [[0, 0, 0], [0, 0, 0]]},
    ]
    return dataset, predictions


@pytest.mark.parametrize("protocol", ["unique", "singlempo", "multimpo"])
def test_audit_counts(protocol, evaluate):
    dataset, predictions = fixture_audit()
    result = evaluate(dataset, predictions, mode="box", ks=("20",), protocol=protocol)
    assert result["images"]["missing_predictions"] == 1 and result["images"]["extra_predictions"] == 1
    assert result["audit"] == {
        "repeated_triplets": 1, "repeated_pairs": 1, "self_pairs": 1, "duplicate_instances": 2,
        "absorbed_instances": 3, "dropped_instances": 0, "duplicate_relations_after_merge": 3,
    }
