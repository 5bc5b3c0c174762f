"""numba kernels against their plain-Python versions (.py_func) and simple references: mask_iou,
mask_boxes, popcount64, box_iou, the matchers, first_positions, pack_masks and the twins of the
merge, _twins (pack_segments, the PNG packer: test_masks.py; merge_walk: test_protocols.py)."""

import numpy as np
import pytest
from conftest import sgeval


def random_masks(rng, n, height, width, density):
    return rng.random((n, height, width)) < density


@pytest.mark.parametrize("seed", range(8))
def test_mask_iou_matches_py_func_and_pixel_count(seed):
    rng = np.random.default_rng(seed)
    height, width = rng.integers(1, 40), [1, 7, 21, 63, 64, 65, 130, 200][seed]  # word padding, row skips
    gt, pred = random_masks(rng, 6, height, width, 0.3), random_masks(rng, 9, height, width, 0.3)
    for masks in (gt[2:4], pred[4:7]):  # small objects: their boxes prune most pairs
        masks &= np.zeros((height, width), bool)
        for mask in masks:
            y, x = rng.integers(0, height), rng.integers(0, width)
            mask[y: y + rng.integers(1, 6), x: x + rng.integers(1, 30)] = True
    gt[0] = False  # an empty GT mask
    pred[0], pred[1] = gt[1], False
    gt_cat, pred_cat = rng.integers(0, 2, 6), rng.integers(0, 2, 9)
    pred_cat[0:2] = gt_cat[1]
    gt_bits, pred_bits = sgeval.pack_masks(gt), sgeval.pack_masks(pred)
    args = (gt_bits, gt_cat, sgeval.mask_boxes(gt_bits, width), pred_bits, pred_cat,
            sgeval.mask_boxes(pred_bits, width), width)
    fast = sgeval.mask_iou(*args, 0.0)  # threshold 0: every same-category pair is computed
    np.testing.assert_array_equal(fast, sgeval.mask_iou.py_func(*args, 0.0))
    pruned = sgeval.mask_iou(*args, 0.5)  # pairs that cannot reach 0.5 may hold 0.0: the matching
    np.testing.assert_array_equal(pruned >= 0.5, fast >= 0.5)  # only compares IoUs >= threshold
    np.testing.assert_array_equal(pruned[(fast >= 0.5) | (fast == -1)], fast[(fast >= 0.5) | (fast == -1)])
    assert ((pruned == fast) | (pruned == 0.0)).all()
    for p in range(9):
        for g in range(6):
            if pred_cat[p] != gt_cat[g]:
                assert fast[p, g] == -1.0
            else:
                union = int((pred[p] | gt[g]).sum())
                expected = int((pred[p] & gt[g]).sum()) / union if union else 0.0
                assert fast[p, g] == expected
    assert fast[0, 1] == 1.0 and fast[1, 1] == 0.0  # copy of gt 1; empty prediction


def test_popcount_and_boxes():
    words = np.array([[0, 1, 2**63, 2**64 - 1, 0x0F0F, 0], [0, 0, 0, 0, 0, 0]], np.uint64)
    boxes = sgeval.mask_boxes(words, 64)
    # bit 0 of a word is pixel 7 of its row (np.packbits order): byte-wide columns 0-7 ... 56-63
    assert boxes[0].tolist() == [0 + 1 + 1 + 64 + 8, 1, 4, 0, 63] and boxes[1, 0] == 0 and boxes[1, 1] > boxes[1, 2]
    assert sgeval.mask_boxes.py_func(words, 64).tolist() == boxes.tolist()
    rng = np.random.default_rng(1)
    for width in (1, 5, 8, 21, 64, 100):
        masks = random_masks(rng, 20, 9, width, 0.02)
        for mask, (area, y0, y1, x0, x1) in zip(masks, sgeval.mask_boxes(sgeval.pack_masks(masks), width)):
            ys, xs = np.nonzero(mask)
            assert area == len(ys)
            if len(ys):  # the box holds the mask: no pixel is ever pruned away
                assert y0 <= ys.min() and ys.max() <= y1 and x0 <= xs.min() and xs.max() <= x1 < width
                assert y0 == ys.min() and y1 == ys.max() or width % 8  # rows exact unless bytes wrap
    for value in (0, 1, 3, 2**40 + 7, 2**64 - 1):
        assert sgeval.popcount64(np.uint64(value)) == bin(value).count("1")
        with np.errstate(over="ignore"):  # numpy scalars warn where the kernel wraps silently
            assert sgeval.popcount64.py_func(np.uint64(value)) == bin(value).count("1")


@pytest.mark.parametrize("seed", range(5))
def test_box_iou_matches_py_func(seed):
    rng = np.random.default_rng(seed)
    corner = rng.integers(0, 20, size=(14, 2)) / 2
    boxes = np.concatenate([corner, corner + rng.integers(0, 12, size=(14, 2)) / 2], axis=1)
    cats = rng.integers(0, 2, 14)
    fast = sgeval.box_iou(boxes[:5], cats[:5], boxes[5:], cats[5:])
    np.testing.assert_array_equal(fast, sgeval.box_iou.py_func(boxes[:5], cats[:5], boxes[5:], cats[5:]))
    assert ((fast == -1.0) == (cats[5:, None] != cats[None, :5])).all()


def test_box_iou_hand_values():
    gt = np.array([[0.0, 0, 2, 2]])
    pred = np.array([[1.0, 0, 3, 2], [0, 0, 4, 2], [5, 5, 6, 6], [0, 0, 0, 0]])
    iou = sgeval.box_iou(gt, np.zeros(1, np.int64), pred, np.zeros(4, np.int64))
    assert iou[:, 0].tolist() == [2 / 6, 0.5, 0.0, 0.0]


@pytest.mark.parametrize("seed", range(20))
def test_matching_kernels_match_py_func_and_definition(seed):
    rng = np.random.default_rng(seed)
    # IoUs on a coarse grid so ties are common; -1 marks a different category.
    iou = rng.integers(-1, 5, size=(rng.integers(0, 8), rng.integers(1, 6))) / 4
    iou[iou < 0] = -1.0
    for kernel in (sgeval.match_unique, sgeval.best_candidates):
        np.testing.assert_array_equal(kernel(iou, 0.5), kernel.py_func(iou, 0.5))
    candidate = sgeval.best_candidates(iou, 0.5)
    unique = sgeval.match_unique(iou, 0.5)
    for p in range(iou.shape[0]):
        same_category = [g for g in range(iou.shape[1]) if iou[p, g] >= 0]
        best = max(same_category, key=lambda g: (iou[p, g], -g)) if same_category else -1
        assert candidate[p] == (best if best >= 0 and iou[p, best] >= 0.5 else -1)
    for g in range(iou.shape[1]):
        claimants = [p for p in range(iou.shape[0]) if candidate[p] == g]
        holder = max(claimants, key=lambda p: (iou[p, g], -p)) if claimants else None
        assert [p for p in range(iou.shape[0]) if unique[p] == g] == ([holder] if claimants else [])


@pytest.mark.parametrize("seed", range(10))
def test_first_positions(seed):
    rng = np.random.default_rng(seed)
    sequence = rng.integers(-1, 8, size=rng.integers(0, 30))
    queries = rng.permutation(10)[: rng.integers(0, 10)]
    fast = sgeval.first_positions(sequence, queries)
    np.testing.assert_array_equal(fast, sgeval.first_positions.py_func(sequence, queries))
    expected = [list(sequence).index(q) if q in sequence else -1 for q in queries]
    assert fast.tolist() == expected


def test_pack_round_trip():
    rng = np.random.default_rng(0)
    masks = rng.random((3, 7, 11)) < 0.5
    packed = sgeval.pack_masks(masks)
    assert packed.dtype == np.uint64 and packed.shape == (3, 2)
    unpacked = np.unpackbits(packed.view(np.uint8), axis=1)[:, : 7 * 11].reshape(3, 7, 11)
    np.testing.assert_array_equal(unpacked.astype(bool), masks)


def brute_twins(masks, threshold):
    """IoU >= threshold of every pair of bool masks, by pixel counts (0 for an empty union)."""
    flat = masks.reshape(len(masks), -1)
    inter = (flat[:, None] & flat[None]).sum(axis=2)
    union = (flat[:, None] | flat[None]).sum(axis=2)
    twins = np.where(union > 0, inter / np.maximum(union, 1), 0.0) >= threshold
    np.fill_diagonal(twins, False)
    return twins


def assert_twins(masks):
    """The twins (IoU >= 0.5) of every pair, decided one pair at a time as the merge and the audit
    decide them; checked against brute force, symmetric, and equal in the plain-Python kernel."""
    width, n = masks.shape[2], len(masks)
    bits = sgeval.pack_masks(masks)
    boxes = sgeval.mask_boxes(bits, width)
    results = []
    for twin in (sgeval._twins, sgeval._twins.py_func):
        memo = np.full((n, n), -1, np.int8)
        results.append(np.array([[i != j and twin(i, j, memo, bits, boxes, width) for j in range(n)]
                                 for i in range(n)]))
        np.testing.assert_array_equal(memo, memo.T)  # each pair decided once, for both orders
        assert (memo[~np.eye(n, dtype=bool)] >= 0).all()
    np.testing.assert_array_equal(results[0], results[1])
    np.testing.assert_array_equal(results[0], brute_twins(masks, sgeval.MERGE_IOU))
    return results[0]


@pytest.mark.parametrize("seed", range(6))
def test_twins_match_brute_force_iou(seed):
    """Random masks, dense and small, with copies, near copies and empty ones, at several widths
    (word padding, rows sharing a word) and thresholds."""
    rng = np.random.default_rng(seed)
    height, width = int(rng.integers(1, 12)), [1, 7, 16, 21, 64, 100][seed]
    masks = rng.random((16, height, width)) < rng.uniform(0.05, 0.6)
    for mask in masks[8:12]:  # small objects: boxes prune most of their pairs
        mask[:] = False
        y, x = rng.integers(0, height), rng.integers(0, width)
        mask[y: y + rng.integers(1, 4), x: x + rng.integers(1, 6)] = True
    masks[12] = masks[3]  # a copy
    masks[13] = masks[3]
    masks[13].flat[rng.integers(0, masks[13].size)] ^= True  # a near copy
    masks[14:] = False  # two empty masks: never twins, not even of each other
    twins = assert_twins(masks)
    assert not twins[14:].any() and twins[3, 12]


def test_twins_ties_and_the_box_bound():
    """IoU exactly 0.5 is a twin (>=), just below it is not; pairs whose areas and box overlap
    allow 0.5 exactly are compared, not pruned."""
    masks = np.zeros((11, 8, 16), bool)
    masks[0, :, :8], masks[1, :, :4] = True, True  # 1 inside 0 with half its area: IoU 32/64 = 0.5
    # 2 and 3: 48 pixels each (whole rows: a word spans 4 rows), boxes overlapping in 32 pixels; IoU
    # 32/64 = 0.5 equals the bound 32 / (48 + 48 - 32)
    masks[2, :3], masks[3, 1:4] = True, True
    masks[4, :6, :6], masks[5, 5:, :12] = True, True  # equal areas 36, boxes overlapping in 6 < 36
    masks[6, 0, 0], masks[7, 0, :2] = True, True  # one pixel inside two: IoU 1/2
    masks[8, 7, 15] = True  # the last pixel, alone
    masks[9, :, :8], masks[10, :, :4] = True, True
    masks[10, 0, 3] = False  # 31 pixels inside 64: IoU 31/64, just below 0.5
    twins = assert_twins(masks)
    assert twins[0, 1] and twins[2, 3] and twins[6, 7]
    assert not twins[4, 5] and not twins[8].any() and not twins[9, 10]


