"""Hand-computed fixtures for the plain-Python reference (tests/reference.py).

Each fixture states its data, then the numbers worked out by hand in comments. Expected values
are exact fractions: the reference converts exact fractions to float once, so the comparison is
`==`, not approximate. These fixtures are small enough to double as a readable spec.
"""

from fractions import Fraction as F

import numpy as np
import pytest

from reference import (
    box_iou,
    mask_iou,
    match_instances,
    predicate_ranks,
    reference_evaluate,
    resolve_k,
    select_distinct,
    select_graph_constrained,
)


def grid_masks(picture, letters):
    """Stack of boolean masks, one per letter, read from an ASCII picture ('.' = nothing)."""
    rows = picture.split()
    return np.array([[[ch == letter for ch in row] for row in rows] for letter in letters], dtype=bool)


def assert_values(actual, expected):
    """Compare a {key: float | None} dict to {key: Fraction | int | None} exactly."""
    for key, want in expected.items():
        got = actual[key]
        if want is None:
            assert got is None, f"{key}: {got} != None"
        else:
            assert got == float(want), f"{key}: {got} != {want} ({float(want)})"


# -------------------------------------------------------------------------------------------------
# Small building blocks


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
def test_fixture_a_selection_relative_k_and_prank(mode):
    dataset, predictions = fixture_a()
    result = reference_evaluate(dataset, predictions, mode=mode, ks=KS_A)
    assert result["images"] == {
        "evaluated": 1,
        "missing_predictions": 0,
        "skipped_no_relations": 0,
        "extra_predictions": 0,
    }
    assert_values(
        result["metrics"],
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
    assert result["per_predicate"]["mR@2"] == {"looking at": 0.0, "on": 0.5, "beside": 1.0}
    assert result["per_predicate"]["mNgR@3"] == {"looking at": 1.0, "on": 0.5, "beside": 1.0}
    assert result["per_predicate"]["PRank"] == {"looking at": 1.0, "on": 0.5, "beside": 0.0}
    assert set(result["per_predicate"]) == (
        {f"mR@{k}" for k in KS_A} | {f"mNgR@{k}" for k in KS_A} | {"mR@inf", "PRank"}
    )


def test_fixture_a_absent_predicates_zero():
    dataset, predictions = fixture_a()
    result = reference_evaluate(dataset, predictions, ks=("2", "5"), absent_predicates="zero")
    assert_values(
        result["metrics"],
        {
            "mR@2": F(3, 8), "mNgR@2": F(2, 4), "mR@5": F(3, 8), "mNgR@5": F(3, 4),
            "mR@inf": F(3, 4),
            # R-type metrics and PRank do not change
            "R@2": F(2, 4), "ngR@5": 1, "PRank": F(1, 2),
        },
    )
    # per_predicate still lists only the predicates present in the GT
    assert result["per_predicate"]["mR@2"] == {"looking at": 0.0, "on": 0.5, "beside": 1.0}
    assert result["absent_predicates"] == ["holding"]


def test_fixture_a_metric_keys_in_order():
    dataset, predictions = fixture_a()
    result = reference_evaluate(dataset, predictions, ks=("20", "x10"))
    assert list(result["metrics"]) == [
        "R@20", "mR@20", "ngR@20", "mNgR@20", "PR@20",
        "R@x10", "mR@x10", "ngR@x10", "mNgR@x10", "PR@x10",
        "InstR", "R@inf", "mR@inf", "PRank",
    ]


def test_fixture_a_empty_ng_triplets_is_taken_as_given():
    # A present but empty ng_triplets list is used as is: NG metrics and PRank see no triplet,
    # while R@k still reads `triplets`.
    dataset, predictions = fixture_a(ng_triplets=[])
    result = reference_evaluate(dataset, predictions, ks=("5",))
    assert_values(
        result["metrics"],
        {"R@5": F(2, 4), "ngR@5": 0, "mNgR@5": 0, "PRank": None, "InstR": 1},
    )
    assert result["per_predicate"]["PRank"] == {"looking at": None, "on": None, "beside": None}


def test_triplet_out_of_range_is_an_error():
    dataset, predictions = fixture_a(triplets=[[0, 3, 1]])
    with pytest.raises(ValueError, match="instance 3"):
        reference_evaluate(dataset, predictions, ks=("5",))


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


def test_fixture_b_tied_iou_unique():
    dataset, predictions = fixture_b()
    result = reference_evaluate(dataset, predictions, ks=("20",))
    assert_values(result["metrics"], {"R@20": F(1, 2), "InstR": 1, "R@inf": 1, "PRank": 0})
    # PRank: only (0,2,0) -> (0,2,0) is ranked (rank 0); "near" has no ranked GT triplet.
    assert result["per_predicate"]["PRank"] == {"on": 0.0, "near": None}


def test_fixture_b_tied_iou_multimpo():
    dataset, predictions = fixture_b()
    result = reference_evaluate(dataset, predictions, ks=("20",), protocol="multimpo")
    assert_values(result["metrics"], {"R@20": 1, "mR@20": 1, "ngR@20": 1, "InstR": 1})


def test_fixture_b_threshold_is_inclusive():
    dataset, predictions = fixture_b()
    result = reference_evaluate(dataset, predictions, ks=("20",), iou_threshold=0.51)
    assert_values(result["metrics"], {"R@20": 0, "InstR": F(2, 3), "R@inf": F(1, 2)})


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


def test_fixture_c_claimed_twice_unique():
    dataset, predictions = fixture_c()
    result = reference_evaluate(dataset, predictions, mode="box", ks=("1", "20"))
    assert_values(
        result["metrics"],
        {
            "R@1": F(1, 2), "mR@1": F(1, 2), "PR@1": 1, "ngR@1": F(1, 2), "mNgR@1": F(1, 2),
            "R@20": F(1, 2), "mR@20": F(1, 2), "PR@20": 1, "ngR@20": 1, "mNgR@20": 1,
            "InstR": 1, "R@inf": 1, "mR@inf": 1, "PRank": F(1, 2),
        },
    )
    assert result["per_predicate"]["mR@20"] == {"near": 0.0, "looking at": 1.0}
    assert result["per_predicate"]["PRank"] == {"near": 1.0, "looking at": 0.0}


def test_fixture_c_claimed_twice_multimpo():
    dataset, predictions = fixture_c()
    result = reference_evaluate(dataset, predictions, mode="box", ks=("1", "20"), protocol="multimpo")
    assert_values(
        result["metrics"],
        {
            "R@1": F(1, 2), "mR@1": F(1, 2), "PR@1": 1, "ngR@1": F(1, 2),
            "R@20": 1, "mR@20": 1, "PR@20": 1, "ngR@20": 1, "mNgR@20": 1,
            "InstR": 1, "R@inf": 1, "PRank": F(1, 2),
        },
    )
    assert result["per_predicate"]["PRank"] == {"near": 1.0, "looking at": 0.0}


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


def test_fixture_d_aggregation():
    dataset, predictions = fixture_d()
    result = reference_evaluate(dataset, predictions, mode="box", ks=("20", "x1"))
    assert result["images"] == {
        "evaluated": 3,
        "missing_predictions": 1,
        "skipped_no_relations": 1,
        "extra_predictions": 3,
    }
    assert_values(
        result["metrics"],
        {
            "R@20": F(5, 9), "R@x1": F(5, 9), "PR@20": F(2, 3), "PR@x1": F(2, 3),
            "ngR@20": F(2, 3), "ngR@x1": F(5, 9), "InstR": F(2, 3), "R@inf": F(2, 3),
            "mR@20": F(2, 9), "mR@x1": F(2, 9), "mNgR@20": F(5, 9), "mNgR@x1": F(1, 2),
            "mR@inf": F(5, 9), "PRank": F(5, 8),
        },
    )
    assert result["absent_predicates"] == ["under"]
    assert result["per_predicate"]["mR@20"] == {"on": float(F(2, 3)), "has": 0.0, "near": 0.0}
    assert result["per_predicate"]["mNgR@x1"] == {"on": 0.5, "has": 0.0, "near": 1.0}
    assert result["per_predicate"]["PRank"] == {"on": 0.25, "has": None, "near": 1.0}


def test_fixture_d_absent_predicates_zero():
    dataset, predictions = fixture_d()
    result = reference_evaluate(dataset, predictions, mode="box", ks=("20", "x1"), absent_predicates="zero")
    assert_values(
        result["metrics"],
        {
            "mR@20": F(1, 6), "mR@x1": F(1, 6), "mNgR@20": F(5, 12), "mNgR@x1": F(3, 8),
            "mR@inf": F(5, 12), "PRank": F(5, 8), "R@20": F(5, 9),
        },
    )


def test_no_evaluated_images_gives_none_everywhere():
    # Only a train image and a test image without relations: both predictions are extra.
    dataset, predictions = fixture_d()
    dataset["images"] = [im for im in dataset["images"] if im["image_id"] in ("55", "9")]
    for rule in ("skip", "zero"):
        result = reference_evaluate(dataset, predictions, mode="box", ks=("20",), absent_predicates=rule)
        assert result["images"] == {
            "evaluated": 0,
            "missing_predictions": 0,
            "skipped_no_relations": 1,
            "extra_predictions": 5,
        }
        assert set(result["metrics"]) == {
            "R@20", "mR@20", "ngR@20", "mNgR@20", "PR@20", "InstR", "R@inf", "mR@inf", "PRank"
        }
        assert all(value is None for value in result["metrics"].values())
        assert all(values == {} for values in result["per_predicate"].values())
        assert result["absent_predicates"] == ["on", "has", "near", "under"]


def test_duplicate_prediction_ids_are_an_error():
    dataset, predictions = fixture_d()
    predictions.append(dict(predictions[1], id=8))  # "8" and 8 are the same id
    with pytest.raises(ValueError, match="8"):
        reference_evaluate(dataset, predictions, mode="box", ks=("20",))
