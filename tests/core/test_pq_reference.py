"""Hand fixtures of every PQ rule of tests/reference_pq.py (panopticapi's, OpenPSG's and fair-psgg's merges).

Each fixture is small enough to count by hand, and each is built so that the nearest other rule
gives a different number; the comment or a second assertion says which number that rule would give.
Maps are written as strings, one character a pixel: "." is id 0 (VOID / unassigned), a letter or
digit another id.
"""

import numpy as np
import pytest

import reference_pq as ref

PERSON, DOG, GRASS = 0, 1, 2
ISTHING = {PERSON: True, DOG: True, GRASS: False}


def id_map(*rows):
    return np.array([[0 if c == "." else ord(c) for c in row] for row in rows], np.int64)


def gt(*segments):
    """{id: segment} from (character, category, iscrowd, area)."""
    return {ord(c): {"category": category, "iscrowd": crowd, "area": area} for c, category, crowd, area in segments}


def pred(*segments):
    return {ord(c): category for c, category in segments}


def stats(gt_rows, gt_segments, pred_rows, pred_segments):
    return ref.image_stats(id_map(*gt_rows), gt_segments, id_map(*pred_rows), pred_segments)


def test_iou_exactly_one_half_is_not_a_match():
    # IoU 4 / 8 = 0.5: an FN and an FP (a >= 0.5 rule would count a TP with IoU 0.5)
    assert stats(["aaaa", "aaaa"], gt(("a", PERSON, 0, 8)), ["pppp", "...."], pred(("p", PERSON))) == \
        {PERSON: [0.0, 0, 1, 1]}
    # IoU 5 / 8 > 0.5: a TP
    assert stats(["aaaa", "aaaa"], gt(("a", PERSON, 0, 8)), ["pppp", "p..."], pred(("p", PERSON))) == \
        {PERSON: [5 / 8, 1, 0, 0]}


def test_union_leaves_out_the_predictions_void_pixels():
    # pred: 6 px on the GT person, 4 on VOID. union = 10 + 8 - 6 - 4 = 8, IoU 6 / 8 (without taking VOID
    # out: 6 / 12 = 0.5, no match)
    assert stats(["aaaa....", "aaaa...."], gt(("a", PERSON, 0, 8)), ["ppp.pppp", "ppp....."], pred(("p", PERSON))) \
        == {PERSON: [0.75, 1, 0, 0]}


def test_the_union_takes_the_gt_area_from_segments_info():
    # 8 px in the PNG, area 10 in the JSON: IoU 8 / 10 (8 / 8 from the pixels)
    assert stats(["aaaa", "aaaa"], gt(("a", PERSON, 0, 10)), ["pppp", "pppp"], pred(("p", PERSON))) == \
        {PERSON: [0.8, 1, 0, 0]}


def test_an_unmatched_prediction_more_than_half_on_void_is_ignored():
    gt_rows, segments = ["gggg....", "gggg...."], gt(("g", GRASS, 0, 8))
    # 4 of 6 px on VOID: ignored; the grass is an FN
    assert stats(gt_rows, segments, ["...ppppp", "...p...."], pred(("p", DOG))) == {GRASS: [0.0, 0, 0, 1]}
    # exactly half (3 of 6) on VOID: an FP (a >= 0.5 rule would ignore it)
    assert stats(gt_rows, segments, ["..pppp..", "...pp..."], pred(("p", DOG))) == \
        {GRASS: [0.0, 0, 0, 1], DOG: [0.0, 0, 1, 0]}


def test_only_id_zero_is_void():
    # the PNG's id "x" is not in segments_info: neither a segment nor VOID. The dog has 2 px on it and
    # 2 on VOID: 2 / 4 is not above one half, an FP (were "x" VOID: 4 / 4, ignored)
    assert stats(["aaxx..", "aaxx.."], gt(("a", PERSON, 0, 4)), ["aa.pp.", "aa.pp."], pred(("a", PERSON), ("p", DOG))) \
        == {PERSON: [1.0, 1, 0, 0], DOG: [0.0, 0, 1, 0]}


def test_a_category_mismatch_is_an_fn_and_an_fp():
    assert stats(["aaaa"], gt(("a", PERSON, 0, 4)), ["pppp"], pred(("p", DOG))) == \
        {PERSON: [0.0, 0, 0, 1], DOG: [0.0, 0, 1, 0]}


def test_crowd_is_never_matched_nor_missed_and_hides_its_own_category_only():
    gt_rows, segments = ["cccc", "cccc"], gt(("c", PERSON, 1, 8))
    # a person on the crowd: no TP (a crowd taken as a GT segment would give IoU 1), no FN, no FP
    assert stats(gt_rows, segments, ["pppp", "pppp"], pred(("p", PERSON))) == {}
    # a dog on the person crowd: an FP
    assert stats(gt_rows, segments, ["pppp", "pppp"], pred(("p", DOG))) == {DOG: [0.0, 0, 1, 0]}


def test_only_the_last_crowd_segment_of_a_category_hides_predictions():
    gt_rows, segments = ["ccdd", "ccdd"], gt(("c", PERSON, 1, 4), ("d", PERSON, 1, 4))
    assert stats(gt_rows, segments, ["pp..", "pp.."], pred(("p", PERSON))) == {PERSON: [0.0, 0, 1, 0]}  # on "c"
    assert stats(gt_rows, segments, ["..pp", "..pp"], pred(("p", PERSON))) == {}  # on "d", the last one


def test_crowd_and_void_pixels_add_up_for_the_ignore_test():
    # 2 px on VOID + 2 on the person crowd, 1 on grass: 4 / 5 hidden, ignored (VOID alone: 2 / 5, an FP)
    assert stats(["..ccg"], gt(("c", PERSON, 1, 2), ("g", GRASS, 0, 1)), ["ppppp"], pred(("p", PERSON))) == \
        {GRASS: [0.0, 0, 0, 1]}


def test_prediction_ids_must_match_its_segments():
    with pytest.raises(ValueError, match="not listed"):
        stats(["aa"], gt(("a", PERSON, 0, 2)), ["pq"], pred(("p", PERSON)))
    with pytest.raises(ValueError, match="not in the map"):
        stats(["aa"], gt(("a", PERSON, 0, 2)), ["pp"], pred(("p", PERSON), ("q", DOG)))


def test_statistics_add_up_over_images():
    first = stats(["aaaa"], gt(("a", PERSON, 0, 4)), ["ppp."], pred(("p", PERSON)))
    second = stats(["aagg"], gt(("a", PERSON, 0, 2), ("g", GRASS, 0, 2)), ["pp.."], pred(("p", PERSON)))
    assert ref.add_stats(ref.add_stats({}, first), second) == {PERSON: [0.75 + 1.0, 2, 0, 0], GRASS: [0.0, 0, 0, 1]}


def test_means_run_over_categories_with_a_count_split_by_isthing():
    total = {PERSON: [1.0, 1, 0, 0], DOG: [0.0, 0, 1, 1]}  # GRASS has no count: left out of every mean
    summary = ref.pq_summary(total, ISTHING)
    # the mean of per-category values: (1 + 0) / 2 (pooled: 1 / (2 + 0.5 + 0.5) = 1/3); SQ of the dog is 0
    assert summary["All"] == {"pq": 0.5, "sq": 0.5, "rq": 0.5, "n": 2}
    assert summary["Things"] == {"pq": 0.5, "sq": 0.5, "rq": 0.5, "n": 2}
    assert summary["Stuff"] is None  # no stuff category with a count: both tools divide by zero
    assert summary["per_class"][GRASS] == {"pq": 0.0, "sq": 0.0, "rq": 0.0}
    # with the grass missed once, it enters All and Stuff: All PQ (1 + 0 + 0) / 3
    summary = ref.pq_summary({**total, GRASS: [0.0, 0, 0, 1]}, ISTHING)
    assert summary["All"]["n"] == 3 and summary["All"]["pq"] == pytest.approx(1 / 3)
    assert summary["Stuff"] == {"pq": 0.0, "sq": 0.0, "rq": 0.0, "n": 1}


def test_pq_sq_rq_of_one_category():
    # 2 TP (IoU 0.75 + 0.55), 1 FP, 3 FN: PQ 1.3 / 4, SQ 1.3 / 2, RQ 2 / 4
    per_class = ref.pq_summary({DOG: [1.3, 2, 1, 3]}, ISTHING)["per_class"][DOG]
    assert per_class == pytest.approx({"pq": 1.3 / 4, "sq": 0.65, "rq": 0.5})


def test_openpsg_reports_the_means_in_percent_and_per_category_values_as_fractions():
    summary = ref.pq_summary({PERSON: [0.8, 1, 0, 0]}, {PERSON: True}, scale=ref.SCALES["openpsg"])
    assert summary["All"]["pq"] == pytest.approx(80.0) and summary["per_class"][PERSON]["pq"] == 0.8


def test_openpsg_joins_void_pixels_to_a_segment_whose_id_is_zero():
    # pan_results with 3 classes: category 3 is VOID. Value 0 is the person with instance 0.
    pan = np.array([[0, 0, 3, 3, 1001]])
    ids, segments = ref.openpsg_segments(pan, 3)
    assert segments == {0: PERSON, 1001: DOG}
    np.testing.assert_array_equal(ids, [[0, 0, 0, 0, 1001]])  # VOID pixels become id 0: the person's
    gt_ids = np.array([[1, 1, 1, 1, 2]])
    truth = {1: {"category": PERSON, "iscrowd": 0, "area": 4}, 2: {"category": DOG, "iscrowd": 0, "area": 1}}
    assert ref.image_stats(gt_ids, truth, ids, segments) == {PERSON: [1.0, 1, 0, 0], DOG: [1.0, 1, 0, 0]}
    # the panopticapi rule keeps VOID pixels unassigned: person IoU 2 / 4, no match
    ids, segments = ref.panoptic_segments(pan, 3)
    assert segments == {1: PERSON, 2: DOG}
    assert ref.image_stats(gt_ids, truth, ids, segments) == {PERSON: [0.0, 0, 1, 1], DOG: [1.0, 1, 0, 0]}


def test_pan_results_categories_beyond_void_are_errors():
    with pytest.raises(ValueError, match="category 4"):
        ref.openpsg_segments(np.array([[4]]), 3)
    with pytest.raises(ValueError, match="category 4"):
        ref.panoptic_segments(np.array([[1004]]), 3)


def masks(*maps):
    return [np.array([[c == "#" for c in row] for row in rows]) for rows in maps]


def test_score_order_ties_decide_which_mask_claims_the_overlap():
    a, b = masks(["###.."], ["..###"])  # IoU 1 / 5: no absorption
    node_map, kept = ref.merge_score_order([a, b], [0.5, 0.5], ties="later-first")
    assert kept == [1, 0]
    np.testing.assert_array_equal(node_map, [[1, 1, 0, 0, 0]])  # b (walked first) claims the shared pixel
    node_map, kept = ref.merge_score_order([a, b], [0.5, 0.5], ties="earlier-first")
    assert kept == [0, 1]
    np.testing.assert_array_equal(node_map, [[0, 0, 0, 1, 1]])
    assert ref.score_order([0.2, 0.9, 0.2, 0.9], "later-first") == [3, 1, 2, 0]
    assert ref.score_order([0.2, 0.9, 0.2, 0.9], "earlier-first") == [1, 3, 0, 2]


def test_score_order_absorbs_at_iou_one_half_and_the_absorbed_give_no_pixels():
    # categories play no part in the merge: a mask absorbs whatever category the other has
    high, half = masks(["###."], [".###"])  # IoU 2 / 4: absorbed; its last pixel stays unclaimed
    node_map, kept = ref.merge_score_order([high, half], [0.9, 0.5])
    assert kept == [0]  # a > 0.5 rule: kept [0, 1], map [0, 0, 0, 1]
    np.testing.assert_array_equal(node_map, [[0, 0, 0, -1]])  # joining the absorber: [0, 0, 0, 0]


def test_score_order_drops_a_covered_mask_which_then_absorbs_nothing():
    big, inside, twin = masks(["######.."], [".##....."], [".##...#."])
    # inside: IoU 2 / 6 with big, no pixel left: dropped. twin: IoU 2 / 7 with big, 2 / 3 with the dropped
    # inside (were dropped masks to absorb, twin would vanish): a node with its one unclaimed pixel
    node_map, kept = ref.merge_score_order([big, inside, twin], [0.9, 0.5, 0.4])
    assert kept == [0, 2]
    np.testing.assert_array_equal(node_map, [[0, 0, 0, 0, 0, 0, 1, -1]])


def test_first_wins_gives_each_pixel_to_the_first_mask_holding_it():
    a, b, c = masks(["##.."], [".##."], ["..#."])
    node_map, kept = ref.merge_first_wins([a, b, c])
    np.testing.assert_array_equal(node_map, [[0, 0, 1, -1]])  # c has no pixel left: no segment
    ids, segments = ref.merged_segments(node_map, kept, [PERSON, DOG, GRASS])
    np.testing.assert_array_equal(ids, [[1, 1, 2, 0]])
    assert segments == {1: PERSON, 2: DOG}
    # score order would give b (0.9) the shared pixel
    node_map, _ = ref.merge_score_order([a, b, c], [0.1, 0.9, 0.5])
    np.testing.assert_array_equal(node_map, [[1, 0, 0, -1]])


def test_mask_iou_of_two_empty_masks_is_zero():
    empty = np.zeros((1, 3), bool)
    assert ref.mask_iou(empty, empty) == 0
