"""Hand-computed fixtures on sgeval: the SingleMPO merge (merge_walk and its twins, then
whole runs), the three protocols, zero-shot, IMR / wIMR, pooled aggregation and the protocol
audit."""

import numpy as np
import pytest
from conftest import cells, gt_image, pred_image, run_case, sgeval

RIDING, ON, BESIDE = 0, 1, 2
PERSON, HORSE, DOG = 0, 1, 2

# 2 rows x 8 columns.  GT: g0 person = row 0 cols 0-3, g1 horse = row 0 cols 4-7, g2 dog = row 1.
G0, G1, G2 = cells(2, 8, (0, 0, 4)), cells(2, 8, (0, 4, 8)), cells(2, 8, (1, 0, 8))
GT = gt_image(1, [G0, G1, G2], [PERSON, HORSE, DOG], [[0, 1, RIDING], [0, 2, BESIDE], [1, 2, BESIDE]])
MASKS = [
    G0,                                # p0 person, exact g0
    cells(2, 8, (0, 0, 3)),            # p1 person, IoU 3/4 with p0
    G1,                                # p2 horse, exact g1
    cells(2, 8, (1, 0, 8), (0, 0, 4)), # p3 dog: row 1 + g0's pixels; IoU 8/12 with g2, 4/12 with p0
    cells(2, 8, (0, 1, 4)),            # p4 person, IoU 3/4 with p0, 2/4 with p1
    cells(2, 8, (0, 0, 1)),            # p5 person, one pixel inside p0 and p1
    G1,                                # p6 labelled dog on the horse's pixels
]
CATEGORIES = [PERSON, PERSON, HORSE, DOG, PERSON, PERSON, DOG]
SCORES = [0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.65]
# t0 (p1 riding p2), t1 (p6 beside p3), t2 (p0 riding p1), t3 (p0 beside p3)
TRIPLETS = [[1, 2, RIDING], [6, 3, BESIDE], [0, 1, RIDING], [0, 3, BESIDE]]


def garbage(shape):
    """A node buffer for merge_walk full of set bits: its contents must not matter."""
    return np.full(shape, np.iinfo(np.uint64).max, np.uint64)


def undecided(n):
    """A twins matrix with no pair decided yet (see sgeval._twins)."""
    return np.full((n, n), -1, np.int8)


def merge(scores):
    pred = sgeval.PredImage("1", np.array(CATEGORIES), None, None if scores is None else np.array(scores),
                            np.array(TRIPLETS), np.array(TRIPLETS), None)
    bits = sgeval.pack_masks(np.array(MASKS))
    boxes = sgeval.mask_boxes(bits, 8)
    order = sgeval.merge_order(pred)
    node_bits = garbage(bits.shape)
    node_of, source, _ = sgeval.merge_walk(undecided(len(bits)), bits, boxes, 8, order, True, node_bits)
    node_masks = np.unpackbits(node_bits[:len(source)].view(np.uint8), axis=1)[:, :16].reshape(-1, 2, 8)
    return order.tolist(), node_of.tolist(), source.tolist(), node_masks.astype(bool)


def test_merge_by_score_claims_pixels_absorbs_ignoring_labels_and_drops_empty():
    order, node_of, source, node_masks = merge(SCORES)
    assert order == [0, 1, 2, 6, 3, 4, 5]  # score order: 0.9 0.8 0.7 0.65 0.6 0.5 0.4
    # p0 -> node 0, absorbs p1 (3/4) and p4 (3/4); p2 -> node 1, absorbs p6 (IoU 1, dog vs horse);
    # p3 -> node 2 with only its unclaimed pixels (row 1); p5's one pixel is claimed: dropped.
    assert node_of == [0, 0, 1, 2, 0, -1, 1]
    assert source == [0, 2, 3]
    np.testing.assert_array_equal(node_masks, [G0, G1, G2])


def test_merge_without_scores_uses_first_appearance():
    order, node_of, source, node_masks = merge(None)
    # ng_triplets = triplets: p1 p2 | p6 p3 | p0 (p1) | (p0 p3); unreferenced p4, p5 last.
    assert order == [1, 2, 6, 3, 0, 4, 5]
    # p1 -> node 0 (cols 0-2), absorbs p0 (3/4) and p4 (2/4 = 0.5); p3 keeps row 1 + pixel (0, 3).
    assert node_of == [0, 0, 1, 2, 0, -1, 1]
    assert source == [1, 2, 3]
    np.testing.assert_array_equal(node_masks, [cells(2, 8, (0, 0, 3)), G1, cells(2, 8, (1, 0, 8), (0, 3, 4))])


@pytest.mark.parametrize("width", [9, 64, 130])
def test_merge_kernel_matches_py_func_and_an_unpruned_walk(width):
    rng = np.random.default_rng(width)
    masks = rng.random((14, 7, width)) < 0.4
    masks[5] = masks[2]  # an exact duplicate
    masks[6] = False  # an empty mask
    for k in (7, 8, 9, 10):  # small objects in a few rows: the walk visits only those rows' words
        masks[k] = False
        y, x = rng.integers(0, 6), rng.integers(0, width - 3)
        masks[k, y: y + 2, x: x + 3] = True
    masks[11] = masks[7] | masks[8]
    bits = sgeval.pack_masks(masks)
    boxes = sgeval.mask_boxes(bits, width)
    full = boxes.copy()
    full[:, 1:] = [0, 6, 0, width - 1]  # boxes as large as the image: nothing pruned
    for order in (np.arange(14), rng.permutation(14)):
        for claim in (True, False):
            node_bits = garbage(bits.shape)
            node_of, source, _ = sgeval.merge_walk(undecided(14), bits, boxes, width, order, claim, node_bits)
            nodes = node_bits[:len(source)]
            for kernel, walk_boxes, buffer in ((sgeval.merge_walk.py_func, boxes, np.zeros_like(bits)),
                                               (sgeval.merge_walk, full, garbage(bits.shape))):
                other_node_of, other_source, _ = kernel(undecided(14), bits, walk_boxes, width, order, claim, buffer)
                np.testing.assert_array_equal(other_node_of, node_of)
                np.testing.assert_array_equal(other_source, source)
                np.testing.assert_array_equal(buffer[:len(source)], nodes)
            assert node_of[6] == (-1 if claim else node_of[6])  # the empty mask is dropped
            assert nodes.any() == claim  # node masks: the claimed pixels, none without claiming
            if claim:  # the nodes' pixels: each instance's pixels no earlier node claimed
                claimed = np.zeros_like(masks[0])
                for n, i in enumerate(source):
                    own = sgeval.pack_masks((masks[i] & ~claimed)[None])[0]
                    np.testing.assert_array_equal(nodes[n], own)
                    claimed |= masks[i]
            unkept = np.zeros((0, bits.shape[1]), np.uint64)  # node masks not kept
            unkept_node_of, unkept_source, _ = sgeval.merge_walk(undecided(14), bits, boxes, width, order, claim,
                                                                 unkept)
            np.testing.assert_array_equal(unkept_node_of, node_of)
            np.testing.assert_array_equal(unkept_source, source)


def protocol_case(tmp_path, scores=SCORES, **config):
    preds = [pred_image(1, MASKS, CATEGORIES, TRIPLETS, scores=scores)]
    return run_case(tmp_path, [GT], preds, k=["1", "2", "3"], metrics=["R", "InstR"],
                    protocols=["unique", "singlempo", "multimpo"], **config)


def test_three_protocols_give_three_recalls(tmp_path):
    by_protocol = protocol_case(tmp_path)["by_protocol"]
    R = {name: [v["metrics"][f"R@{k}"] for k in "123"] for name, v in by_protocol.items()}
    # unique: p1, p6 unmatched (g0 held by p0; dog label on a horse) -> t0, t1, t2 miss; t3 hits.
    assert R["unique"] == [0.0, 0.0, 0.0]
    # multimpo: p1 -> g0: t0 = (g0, g1, riding) hits; t1 misses; t2 = (g0, g0) misses.
    assert R["multimpo"] == [1 / 3, 1 / 3, 1 / 3]
    # singlempo: t0 -> (n0, n1, riding), t1 -> (n1, n2, beside), t2 is a self-pair (removed),
    # t3 -> (n0, n2, beside): all three GT triplets within k = 3.
    assert R["singlempo"] == [1 / 3, 2 / 3, 1.0]
    assert all(v["metrics"]["InstR"] == 1.0 for v in by_protocol.values())


def test_headline_protocol_and_audit(tmp_path):
    result = protocol_case(tmp_path, protocol="singlempo")
    assert result["metrics"] == result["by_protocol"]["singlempo"]["metrics"]
    assert list(result["by_protocol"]) == ["singlempo", "unique", "multimpo"]
    audit = result["protocol_audit"]
    # duplicates: p1 and p4 (person, IoU 3/4 with p0); p5 (IoU <= 1/3) and p6 (dog vs dog p3: 0) not.
    assert {key: audit[key] for key in sgeval.AUDIT_FIELDS} == {
        "repeated_triplets": 0, "repeated_pairs": 0, "self_pairs": 0, "duplicate_instances": 2,
        "absorbed_instances": 3, "dropped_instances": 1, "duplicate_relations_after_merge": 0}
    assert audit["per_image"] == {"1": {key: audit[key] for key in sgeval.AUDIT_FIELDS}}


def test_box_mode_singlempo_merges_without_claiming(tmp_path):
    # Boxes: p0 [0,0,4,2], p1 [0,0,3,2] (IoU 6/8): p1 joins p0's node; p2 horse [4,0,8,2].
    images = [gt_image(1, [cells(2, 8, (0, 0, 4), (1, 0, 4)), cells(2, 8, (0, 4, 8), (1, 4, 8))],
                       [PERSON, HORSE], [[0, 1, RIDING]])]
    preds = [pred_image(1, None, [PERSON, PERSON, HORSE], [[1, 2, RIDING], [0, 2, ON]],
                        boxes=[[0, 0, 4, 2], [0, 0, 3, 2], [4, 0, 8, 2]], scores=[0.9, 0.8, 0.7])]
    result = run_case(tmp_path, images, preds, mode="box", k=["1"], metrics=["R"],
                      protocols=["unique", "singlempo"])
    assert result["by_protocol"]["unique"]["metrics"]["R@1"] == 0.0  # p1 loses g0 to p0
    assert result["by_protocol"]["singlempo"]["metrics"]["R@1"] == 1.0
    assert result["protocol_audit"]["absorbed_instances"] == 1


def test_zero_shot_from_training_split_and_from_a_file(tmp_path):
    people = [cells(1, 8, (0, 0, 2)), cells(1, 8, (0, 2, 4)), cells(1, 8, (0, 4, 6))]
    images = [gt_image(1, people, [PERSON, HORSE, DOG], [[0, 1, RIDING], [0, 2, BESIDE], [1, 2, BESIDE]]),
              gt_image(2, people, [PERSON, HORSE, DOG], [[0, 1, RIDING]], split="train")]
    # Training has (person, horse, riding): Z = {(0,2,beside), (1,2,beside)}.  T finds (0,1,riding)
    # first, then (0,2,beside): zR@1 = 0/2, zR@2 = 1/2 while R@2 = 2/3.
    preds = [pred_image(1, people, [PERSON, HORSE, DOG], [[0, 1, RIDING], [0, 2, BESIDE]])]
    result = run_case(tmp_path, images, preds, k=["1", "2"], metrics=["R", "zR", "ngzR"])
    m = result["metrics"]
    assert (m["zR@1"], m["zR@2"], m["ngzR@2"], m["R@2"]) == (0.0, 0.5, 0.5, 2 / 3)
    listed = tmp_path / "zs.csv"
    listed.write_text("subject,object,predicate\n0,1,0\n")  # only (person, horse, riding) is zero-shot
    m = run_case(tmp_path / "b", images, preds, k=["1", "2"], metrics=["zR"],
                 zeroshot_triplets=str(listed))["metrics"]
    assert (m["zR@1"], m["zR@2"]) == (1.0, 1.0)
    nothing = tmp_path / "zs.json"
    nothing.write_text("[[2, 2, 3]]")
    m = run_case(tmp_path / "c", images, preds, k=["1"], metrics=["zR"], zeroshot_triplets=str(nothing))["metrics"]
    assert m["zR@1"] is None  # no image holds a zero-shot triplet


def imr_case(tmp_path, **config):
    people = [cells(1, 8, (0, 0, 2)), cells(1, 8, (0, 2, 4)), cells(1, 8, (0, 4, 6))]
    images = [gt_image(1, people, [PERSON, HORSE, DOG], [[0, 1, RIDING], [0, 1, ON]]),
              gt_image(2, people, [PERSON, HORSE, DOG], [[0, 1, RIDING], [0, 2, RIDING], [0, 1, ON]],
                       split="train")]
    # NG order: (1,0,riding) wrong pair, (0,1,riding), (0,1,on).
    preds = [pred_image(1, people, [PERSON, HORSE, DOG], [[0, 1, ON]],
                        ng_triplets=[[1, 0, RIDING], [0, 1, RIDING], [0, 1, ON]])]
    return run_case(tmp_path, images, preds, **{"k": ["1"], "imr_k": ["1", "2"],
                                                 "metrics": ["mNgR", "IMR", "wIMR"], **config})


def test_imr_ranks_each_predicate_independently(tmp_path):
    result = imr_case(tmp_path)
    m = result["metrics"]
    # IMR@1: riding's first riding triplet is the wrong pair (0); on's first on triplet hits (1).
    assert m["IMR@1"] == 0.5 and result["per_predicate"]["IMR@1"] == {"riding": 0.0, "on": 1.0}
    assert m["IMR@2"] == 1.0 and m["mNgR@1"] == 0.0
    # n_riding = 2 training pairs (person-horse, person-dog), n_on = 1 (person-horse), tau = 0.5:
    # wIMR@1 = (sqrt(1) * 1 + sqrt(2) * 0) / (sqrt(1) + sqrt(2)).
    assert m["wIMR@1"] == pytest.approx(1 / (1 + 2**0.5), abs=1e-15)
    assert m["wIMR@2"] == pytest.approx(1.0, abs=1e-15)
    # riding has 2 ng triplets, on 1: fewer than 2 -> image 1 is short for IMR@2 only.
    assert result["imr_short_images"] == {"1": 0, "2": 1}
    assert len(result["warnings"]) == 1 and "IMR@2" in result["warnings"][0]


def test_wimr_tau_zero_is_imr(tmp_path):
    m = imr_case(tmp_path, wimr_tau=0.0)["metrics"]
    assert m["wIMR@1"] == m["IMR@1"] == 0.5


def test_pooled_versus_per_image(tmp_path):
    people = [cells(1, 8, (0, 0, 2)), cells(1, 8, (0, 2, 4)), cells(1, 8, (0, 4, 6))]
    images = [gt_image(1, people, [PERSON, HORSE, DOG], [[0, 1, RIDING]]),
              gt_image(2, people, [PERSON, HORSE, DOG], [[0, 1, RIDING], [0, 2, RIDING], [1, 2, RIDING]])]
    preds = [pred_image(1, people, [PERSON, HORSE, DOG], [[0, 1, RIDING]]),
             pred_image(2, people, [PERSON, HORSE, DOG], [[2, 1, RIDING]])]
    per_image = run_case(tmp_path / "a", images, preds, k=["5"], metrics=["R", "mR", "InstR"])["metrics"]
    pooled = run_case(tmp_path / "b", images, preds, k=["5"], metrics=["R", "mR", "InstR"],
                      aggregation="pooled")["metrics"]
    assert (per_image["R@5"], per_image["mR@5"]) == (0.5, 0.5)  # (1/1 + 0/3) / 2
    assert (pooled["R@5"], pooled["mR@5"]) == (0.25, 0.25)  # 1 / 4
    assert per_image["InstR"] == pooled["InstR"] == 1.0


def test_compare_protocols_table(tmp_path):
    result = protocol_case(tmp_path)
    lines = sgeval.format_table(result).splitlines()
    start = lines.index("protocol comparison (same predictions, same GT):")
    assert lines[start + 1].split() == ["unique", "singlempo", "multimpo"]
    row = next(line for line in lines[start:] if line.startswith("R@2 "))
    assert row.split()[1:] == ["0.0", "66.7", "33.3"]


def test_metric_families_select_keys(tmp_path):
    only_wimr = imr_case(tmp_path / "a", metrics=["wIMR"])
    assert list(only_wimr["metrics"]) == ["wIMR@1", "wIMR@2"] and only_wimr["per_predicate"] == {}
    only_imr = imr_case(tmp_path / "b", metrics=["IMR"])
    assert list(only_imr["metrics"]) == ["IMR@1", "IMR@2"] and list(only_imr["per_predicate"]) == ["IMR@1", "IMR@2"]
