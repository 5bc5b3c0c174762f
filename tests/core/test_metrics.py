"""Hand-computed fixtures on sgeval (run_case): every metric, each number worked out in the comments
(the spec run on both sgeval and the reference: test_spec.py)."""

import pytest
from conftest import cells, gt_image, pred_image, run_case

# Predicates: 0 riding, 1 on, 2 beside, 3 holding.  Categories: 0 person, 1 horse, 2 dog.
H, W = 1, 8
PERSON_A, HORSE, PERSON_B = cells(H, W, (0, 0, 2)), cells(H, W, (0, 2, 4)), cells(H, W, (0, 4, 6))


def basic_case(tmp_path, **config):
    # G = {(0,1,riding), (0,1,on), (2,1,beside)}: |G| = 3, GT pairs {(0,1), (2,1)}.
    images = [gt_image(1, [PERSON_A, HORSE, PERSON_B], [0, 1, 0], [[0, 1, 0], [0, 1, 1], [2, 1, 2]])]
    # Perfect instances.  T: on, riding (same pair: dropped by the graph constraint), beside,
    # a wrong pair.  GC order: (0,1,on) (2,1,beside) (1,0,beside).
    preds = [pred_image(1, [PERSON_A, HORSE, PERSON_B], [0, 1, 0],
                        triplets=[[0, 1, 1], [0, 1, 0], [2, 1, 2], [1, 0, 2]],
                        ng_triplets=[[0, 1, 1], [0, 1, 0], [2, 1, 2]])]
    return run_case(tmp_path, images, preds, k=["1", "2", "20", "x1"], **config)


def test_recall_graph_constraint_vs_no_graph_constraint(tmp_path):
    m = basic_case(tmp_path)["metrics"]
    assert (m["R@1"], m["R@2"], m["R@20"]) == (1 / 3, 2 / 3, 2 / 3)  # riding never selected
    assert (m["ngR@1"], m["ngR@2"], m["ngR@20"]) == (1 / 3, 2 / 3, 1.0)
    assert m["R@x1"] == 2 / 3 and m["ngR@x1"] == 1.0  # x1: k = |G| = 3


def test_mean_recall_and_per_predicate(tmp_path):
    result = basic_case(tmp_path)
    m = result["metrics"]
    # mR@20: riding 0/1, on 1/1, beside 1/1 -> 2/3 over the 3 present predicates.
    assert m["mR@20"] == pytest.approx(2 / 3, abs=1e-15)
    assert result["per_predicate"]["mR@20"] == {"riding": 0.0, "on": 1.0, "beside": 1.0}
    assert m["mR@1"] == pytest.approx(1 / 3, abs=1e-15)  # only on
    assert m["mNgR@20"] == 1.0 and m["mNgR@2"] == pytest.approx(2 / 3, abs=1e-15)
    assert result["absent_predicates"] == ["holding"]


def test_absent_predicates_zero_counts_them(tmp_path):
    m = basic_case(tmp_path, absent_predicates="zero")["metrics"]
    assert m["mR@20"] == pytest.approx(2 / 4, abs=1e-15)  # (0 + 1 + 1 + 0) / 4
    assert m["mNgR@20"] == pytest.approx(3 / 4, abs=1e-15)


def test_pair_recall_instance_recall_inf_and_prank(tmp_path):
    result = basic_case(tmp_path)
    m = result["metrics"]
    assert (m["PR@1"], m["PR@2"]) == (1 / 2, 1.0)  # GT pairs (0,1), (2,1)
    assert m["InstR"] == 1.0 and m["R@inf"] == 1.0 and m["mR@inf"] == 1.0
    # ng order: (0,1,on) rank 0, (0,1,riding) rank 1, (2,1,beside) rank 0.
    assert result["per_predicate"]["PRank"] == {"riding": 1.0, "on": 0.0, "beside": 0.0}
    assert m["PRank"] == pytest.approx(1 / 3, abs=1e-15)
    audit = result["protocol_audit"]
    assert (audit["repeated_pairs"], audit["repeated_triplets"], audit["self_pairs"]) == (1, 0, 0)


# Matching: 2 rows of 8.  GT g0 = person row 0 cols 0-3, g1 = person row 0 cols 4-7, g2 = horse row 1.
G0, G1, G2 = cells(2, 8, (0, 0, 4)), cells(2, 8, (0, 4, 8)), cells(2, 8, (1, 0, 8))


def matching_case(tmp_path, protocol, k=("1", "2", "3", "4")):
    images = [gt_image(1, [G0, G1, G2], [0, 0, 1], [[0, 2, 0], [1, 2, 0], [1, 2, 1]])]
    preds = [pred_image(1, [
        cells(2, 8, (0, 0, 8)),  # p0: g0 | g1, IoU exactly 0.5 with both -> candidate g0 (first GT)
        G1,                      # p1: IoU 1 with g1
        cells(2, 8, (0, 4, 7)),  # p2: IoU 3/4 with g1
        G1,                      # p3: IoU 1 with g1, tied with p1 -> p1 (earlier) keeps g1
        G2,                      # p4: horse
    ], [0, 0, 0, 0, 1], triplets=[[2, 4, 0], [0, 4, 0], [3, 4, 1], [1, 4, 1]])]
    return run_case(tmp_path, images, preds, k=list(k), protocol=protocol, metrics=["R", "InstR", "Rinf"])


def test_unique_matching_ties_threshold_and_claimed_gt(tmp_path):
    # unique: p0->g0 (IoU 0.5 >= threshold), p1->g1, p2 and p3 unmatched, p4->g2.
    # GC: (p2,p4) unmatched, (p0,p4,riding)=(0,2,0) hit, (p3,p4) unmatched, (p1,p4,on)=(1,2,1) hit.
    m = matching_case(tmp_path, "unique")["metrics"]
    assert [m[f"R@{k}"] for k in "1234"] == [0.0, 1 / 3, 1 / 3, 2 / 3]
    assert m["InstR"] == 1.0 and m["R@inf"] == 1.0


def test_multimpo_maps_every_prediction_to_its_candidate(tmp_path):
    # multimpo: p1, p2, p3 all -> g1; (p2,p4,riding)=(1,2,0), (0,2,0), (p3,p4,on)=(1,2,1).
    m = matching_case(tmp_path, "multimpo")["metrics"]
    assert [m[f"R@{k}"] for k in "1234"] == [1 / 3, 2 / 3, 1.0, 1.0]


def test_threshold_is_inclusive_and_categories_gate(tmp_path):
    images = [gt_image(1, [G0, G2], [0, 1], [[0, 1, 0]])]
    preds = [pred_image(1, [cells(2, 8, (0, 0, 8)), G2], [0, 1], [[0, 1, 0]])]  # IoU 4/8 = 0.5
    assert run_case(tmp_path / "a", images, preds, k=["20"])["metrics"]["R@20"] == 1.0
    assert run_case(tmp_path / "b", images, preds, k=["20"], iou_threshold=0.51)["metrics"]["R@20"] == 0.0
    wrong_category = [pred_image(1, [G0, G2], [2, 1], [[0, 1, 0]])]  # perfect mask, dog label
    m = run_case(tmp_path / "c", images, wrong_category, k=["20"])["metrics"]
    assert m["R@20"] == 0.0 and m["InstR"] == 0.5 and m["R@inf"] == 0.0


def test_missing_empty_extra_and_skipped_images(tmp_path):
    perfect_masks, rels = [PERSON_A, HORSE], [[0, 1, 0]]
    images = [gt_image(1, perfect_masks, [0, 1], rels),          # perfect prediction: R = 1
              gt_image(2, perfect_masks, [0, 1], rels),          # missing from the predictions
              gt_image(3, perfect_masks, [0, 1], []),            # no relations: skipped
              gt_image(4, perfect_masks, [0, 1], rels + [[1, 0, 1]]),  # empty prediction: R = 0
              gt_image(5, perfect_masks, [0, 1], rels, split="train")]
    preds = [pred_image(1, perfect_masks, [0, 1], [[0, 1, 0]]),
             pred_image(4, [], [], []),
             pred_image(5, perfect_masks, [0, 1], [[0, 1, 0]]),  # train image: extra
             pred_image(3, perfect_masks, [0, 1], []),            # not evaluated: extra
             pred_image(99, perfect_masks, [0, 1], [])]           # unknown: extra
    result = run_case(tmp_path, images, preds, k=["20"])
    assert result["images"] == {"evaluated": 3, "missing_predictions": 1,
                                "skipped_no_relations": 1, "extra_predictions": 3,
                                "scope": "all", "duplicate_updates": 0}
    m = result["metrics"]
    assert m["R@20"] == pytest.approx(1 / 3, abs=1e-15)
    # riding in images 1, 2, 4: (1 + 0 + 0) / 3; on only in image 4: 0 -> mR = (1/3 + 0) / 2.
    assert m["mR@20"] == pytest.approx(1 / 6, abs=1e-15)
    assert m["InstR"] == pytest.approx(1 / 3, abs=1e-15)
    assert m["PRank"] == 0.0 and result["per_predicate"]["PRank"] == {"riding": 0.0, "on": None}


def test_m_type_aggregates_per_predicate_over_images(tmp_path):
    # Image 1: riding x2 (one hit), on x1 (hit).  Image 2: riding x1 (hit), beside x1 (miss).
    people = [PERSON_A, HORSE, PERSON_B]
    images = [gt_image(1, people, [0, 1, 0], [[0, 1, 0], [2, 1, 0], [0, 2, 1]]),
              gt_image(2, people, [0, 1, 0], [[0, 1, 0], [2, 1, 2]])]
    preds = [pred_image(1, people, [0, 1, 0], [[0, 1, 0], [0, 2, 1]]),
             pred_image(2, people, [0, 1, 0], [[0, 1, 0], [2, 1, 0]])]
    m = run_case(tmp_path, images, preds, k=["20"])["metrics"]
    assert m["R@20"] == pytest.approx((2 / 3 + 1 / 2) / 2, abs=1e-15)
    # riding: (1/2 + 1/1) / 2 = 3/4; on: 1; beside: 0 -> (3/4 + 1 + 0) / 3.
    assert m["mR@20"] == pytest.approx((3 / 4 + 1 + 0) / 3, abs=1e-15)
    # pairs: image 1 finds (0,1), (0,2) of 3 pairs; image 2 finds (0,1), (2,1) of 2.
    assert m["PR@20"] == pytest.approx((2 / 3 + 2 / 2) / 2, abs=1e-15)


@pytest.mark.parametrize("factor, n_relations, expected", [
    ("x1", 3, 3), ("x10", 1, 10), ("x0.5", 1, 1), ("x0.5", 3, 2), ("x1.5", 3, 5), ("x0.01", 2, 1)])
def test_relative_k(factor, n_relations, expected):
    import sgeval
    assert sgeval.k_values([factor, "20"], n_relations) == [expected, 20]


def test_relative_k_on_a_tiny_image(tmp_path):
    # |G| = 1; T holds a miss then the hit: x1 -> k = 1 misses, x2 -> k = 2 finds it.
    images = [gt_image(1, [PERSON_A, HORSE], [0, 1], [[0, 1, 0]])]
    preds = [pred_image(1, [PERSON_A, HORSE], [0, 1], [[1, 0, 0], [0, 1, 0]])]
    m = run_case(tmp_path, images, preds, k=["x1", "x2"], metrics=["R"])["metrics"]
    assert m == {"R@x1": 0.0, "R@x2": 1.0}


def test_duplicate_gt_relations_and_repeated_predictions(tmp_path):
    # GT lists (0,1,riding) twice: |G| = 1.  T repeats a triplet and holds a self-pair.
    images = [gt_image(1, [PERSON_A, HORSE], [0, 1], [[0, 1, 0], [0, 1, 0]])]
    preds = [pred_image(1, [PERSON_A, HORSE], [0, 1], [[0, 0, 1], [0, 0, 1], [0, 1, 0]])]
    result = run_case(tmp_path, images, preds, k=["1", "2"])
    assert result["metrics"]["R@1"] == 0.0 and result["metrics"]["R@2"] == 1.0
    assert result["metrics"]["ngR@2"] == 1.0  # the repeat is skipped, not counted
    audit = result["protocol_audit"]
    assert (audit["repeated_triplets"], audit["repeated_pairs"], audit["self_pairs"]) == (1, 1, 2)


def test_box_mode(tmp_path):
    # Boxes: GT person [0,0,2,2], horse [4,0,6,2].  Pred person [1,0,3,2]: IoU 2/6 -> no match;
    # pred person [0,0,4,2]: IoU 4/8 = 0.5 -> match.
    images = [gt_image(1, [cells(2, 8, (0, 0, 2), (1, 0, 2)), cells(2, 8, (0, 4, 6), (1, 4, 6))],
                       [0, 1], [[0, 1, 0]])]
    far = [pred_image(1, None, [0, 1], [[0, 1, 0]], boxes=[[1, 0, 3, 2], [4, 0, 6, 2]])]
    near = [pred_image(1, None, [0, 1], [[0, 1, 0]], boxes=[[0, 0, 4, 2], [4, 0, 6, 2]])]
    m_far = run_case(tmp_path / "a", images, far, mode="box", k=["20"])["metrics"]
    m_near = run_case(tmp_path / "b", images, near, mode="box", k=["20"])["metrics"]
    assert (m_far["R@20"], m_far["InstR"]) == (0.0, 0.5)
    assert (m_near["R@20"], m_near["InstR"]) == (1.0, 1.0)


def test_no_evaluated_images_gives_none(tmp_path):
    images = [gt_image(1, [PERSON_A, HORSE], [0, 1], [])]
    result = run_case(tmp_path, images, [], k=["20"])
    assert result["images"]["evaluated"] == 0
    assert set(result["metrics"].values()) == {None}
