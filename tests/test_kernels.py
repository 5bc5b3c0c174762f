"""numba kernels against their plain-Python versions (.py_func) and simple references."""

import io
import struct
import warnings

import imagecodecs
import numpy as np
import pytest
import tifffile

import sgeval


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
    fast = sgeval.mask_iou(*args)
    np.testing.assert_array_equal(fast, sgeval.mask_iou.py_func(*args))
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


@pytest.mark.parametrize("seed", range(4))
def test_pack_segments_matches_py_func_and_numpy(seed):
    rng = np.random.default_rng(seed)
    height, width = rng.integers(1, 30, size=2)
    ids = rng.choice([0, 7, 70000, 2**24 - 1, 300], size=(height, width))
    rgb = np.stack([ids & 255, (ids >> 8) & 255, ids >> 16], axis=-1).astype(np.uint8)
    segments = np.array([300, 7, 2**24 - 1, 12345], np.int64)  # 12345 has no pixels
    fast = sgeval.pack_segments(rgb, segments)
    np.testing.assert_array_equal(fast, sgeval.pack_segments.py_func(rgb, segments))
    expected = np.packbits((ids[None] == segments[:, None, None]).reshape(4, -1), axis=1)
    np.testing.assert_array_equal(fast, expected)


def tiff_bytes(masks, **options):
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        tifffile.imwrite(buffer, masks, **options)
    return buffer.getvalue()


@pytest.mark.parametrize("options, direct", [
    ({"photometric": "minisblack", "compression": "adobe_deflate"}, True),
    ({"photometric": "minisblack", "compression": "deflate", "rowsperstrip": 3}, True),
    ({"photometric": "minisblack"}, True),
    ({"photometric": "minisblack", "byteorder": ">", "compression": "adobe_deflate"}, True),
    ({"photometric": "minisblack", "byteorder": ">", "rowsperstrip": 3}, True),
    ({"photometric": "minisblack", "compression": "lzw"}, False),
    ({"photometric": "minisblack", "bigtiff": True}, False),
    ({"photometric": "minisblack", "tile": (16, 16)}, False),
])
@pytest.mark.parametrize("dtype", [bool, np.uint8])
@pytest.mark.parametrize("width", [24, 21])
def test_strip_reader_matches_tifffile(options, direct, dtype, width):
    """The direct strip reader and the tifffile fallback give the same packed masks."""
    rng = np.random.default_rng(width)
    masks = rng.random((5, 17, width)) < 0.3
    values = rng.integers(1, 256, masks.shape).astype(np.uint8)  # a uint8 pixel is inside when non-zero
    masks.ravel()[:3], values.ravel()[:3] = True, [128, 1, 16]  # single high, low and middle bits
    data = tiff_bytes(masks if dtype is bool else masks * values, **options)
    status, pages, strips, starts = sgeval.tiff_layout(np.frombuffer(data, np.uint8))
    assert status == (0 if direct else 1)
    if direct:  # the layout is what tifffile reads from the directories
        with tifffile.TiffFile(io.BytesIO(data)) as tiff:
            assert len(pages) == len(tiff.pages) == 5 and starts[-1] == len(strips)
            for page, expected, run in zip(pages, tiff.pages, np.split(strips, starts[1:-1])):
                assert page.tolist() == [width, 17, 1 if dtype is bool else 8, expected.compression,
                                         expected.rowsperstrip]
                assert run[:, 0].tolist() == list(expected.dataoffsets)
                assert run[:, 1].tolist() == list(expected.databytecounts)
    record = sgeval.PredImage("1", np.zeros(5, np.int64), None, None, None, None, "m.tiff")

    class Source:
        path = "pred.zip"

        def read(self, name):
            return data

    packed = sgeval.load_pred_masks(Source(), record, 17, width)
    np.testing.assert_array_equal(packed, sgeval.pack_masks(masks))
    needed = np.array([True, False, True, False, True])
    partial = sgeval.load_pred_masks(Source(), record, 17, width, needed)
    np.testing.assert_array_equal(partial[needed], packed[needed])
    assert not partial[~needed].any() or not direct  # skipped pages stay empty (strip reader only)
    out = np.full(packed.size + 3, np.iinfo(np.uint64).max, np.uint64)  # room for the masks, set bits
    in_out = sgeval.load_pred_masks(Source(), record, 17, width, needed, out)
    np.testing.assert_array_equal(in_out, partial)
    assert np.shares_memory(in_out, out) == direct  # the strip reader writes into out
    layers = sgeval._tifffile_layers(data, 17, width, "where")
    np.testing.assert_array_equal(layers, masks)


def test_self_iou_matches_mask_iou_and_py_func():
    rng = np.random.default_rng(5)
    masks = rng.random((9, 7, 13)) < 0.3
    masks[3] = False
    masks[4] = masks[1]
    bits, zeros = sgeval.pack_masks(masks), np.zeros(9, np.int64)
    boxes = sgeval.mask_boxes(bits, 13)
    fast = sgeval.self_iou(bits, boxes, 13, 0.0)
    np.testing.assert_array_equal(fast, sgeval.mask_iou(bits, zeros, boxes, bits, zeros, boxes, 13))
    np.testing.assert_array_equal(fast, sgeval.self_iou.py_func(bits, boxes, 13, 0.0))
    assert fast[1, 4] == 1.0 and fast[3, 3] == 0.0


@pytest.mark.parametrize("seed", range(4))
def test_self_iou_skips_only_pairs_below_the_threshold(seed):
    """With a threshold, pairs whose areas and box overlap rule out IoU >= threshold are skipped
    (0.0); every other entry is the exact IoU, so IoU >= threshold is decided exactly, ties
    included."""
    rng = np.random.default_rng(seed)
    masks = np.zeros((30, 8, 16), bool)
    for mask in masks:
        y, x = rng.integers(0, 6), rng.integers(0, 12)
        mask[y: y + rng.integers(1, 4), x: x + rng.integers(1, 5)] = True
    masks[1], masks[2] = masks[0], False  # a duplicate and an empty mask
    masks[3:5] = False
    masks[3, :, :8], masks[4, :, :4] = True, True  # 4 inside 3 with half its area: IoU exactly 0.5
    masks[5:9] = False  # boxes (whole rows: a word spans 4 rows) overlapping by 32 and 16 pixels
    masks[5, :3], masks[6, 1:4], masks[7, :6, :6], masks[8, 5:, :12] = True, True, True, True
    bits = sgeval.pack_masks(masks)
    boxes = sgeval.mask_boxes(bits, 16)
    exact, pruned = sgeval.self_iou(bits, boxes, 16, 0.0), sgeval.self_iou(bits, boxes, 16, 0.5)
    np.testing.assert_array_equal(pruned >= 0.5, exact >= 0.5)
    np.testing.assert_array_equal(pruned[pruned > 0], exact[pruned > 0])
    np.testing.assert_array_equal(pruned, sgeval.self_iou.py_func(bits, boxes, 16, 0.5))
    assert pruned[3, 4] == 0.5 and (pruned == 0).sum() > (exact == 0).sum()  # a tie kept, pairs skipped
    assert pruned[5, 6] == exact[5, 6] == 0.5  # IoU 32 / 64 at the box bound 32 / (48 + 48 - 32): kept
    assert exact[7, 8] == 6 / 66 and pruned[7, 8] == 0.0  # equal areas, the boxes overlap by 16 < 36


def tiff_status(data):
    return sgeval.tiff_layout(np.frombuffer(data, np.uint8))[0]


def test_tiff_layout_statuses_of_odd_files():
    data = tiff_bytes(np.ones((3, 4, 8), bool), photometric="minisblack")
    assert [tiff_status(raw) for raw in (b"", b"I", b"PK\x03\x04", b"II+\x00" + bytes(12))] == [1, 1, 1, 1]
    assert [tiff_status(raw) for raw in (b"II", b"MM\x00*", data[:7], data[:40])] == [2, 2, 2, 2]
    ifd = struct.unpack_from("<I", data, 4)[0]
    end = ifd + 2 + 12 * struct.unpack_from("<H", data, ifd)[0]
    cycle = bytearray(data)
    cycle[end:end + 4] = struct.pack("<I", ifd)  # page 0 -> page 0 -> ...
    assert tiff_status(bytes(cycle)) == 2
    for raw in (b"MM\x00*", data, bytes(cycle), data[:40]):
        fast, slow = sgeval.tiff_layout(np.frombuffer(raw, np.uint8)), sgeval.tiff_layout.py_func(np.frombuffer(raw, np.uint8))
        assert fast[0] == slow[0] and all(np.array_equal(a, b) for a, b in zip(fast[1:], slow[1:]))


@pytest.mark.parametrize("options", [{"compression": "adobe_deflate"}, {"byteorder": ">", "rowsperstrip": 2}])
@pytest.mark.parametrize("dtype", [bool, np.uint8])
def test_corrupt_tiffs_give_an_error_or_masks_never_a_crash(options, dtype):
    """Truncated and corrupted files: the strip reader checks every index it reads, so the
    result is the masks or an SGEvalError naming the file (the kernel does no bounds checks)."""
    rng = np.random.default_rng(7)
    masks = rng.random((4, 9, 16)) < 0.4
    data = tiff_bytes(masks.astype(dtype), photometric="minisblack", **options)
    record = sgeval.PredImage("1", np.zeros(4, np.int64), None, None, None, None, "m.tiff")
    statuses = set()
    for trial in range(400):
        raw = bytearray(data[: rng.integers(0, len(data))] if trial % 2 else data)
        for at in rng.integers(0, min(len(raw), 300) or 1, rng.integers(1, 4)) if raw and trial % 4 < 2 else ():
            raw[at] = rng.integers(0, 256)
        statuses.add(tiff_status(bytes(raw)))

        class Source:
            path = "pred.zip"

            def read(self, name):
                return bytes(raw)

        try:
            packed = sgeval.load_pred_masks(Source(), record, 9, 16)
        except sgeval.SGEvalError as error:
            assert "m.tiff" in error.problems[0] and len(error.problems) == 1
        else:
            assert packed.shape == (4, 3) and packed.dtype == np.uint64
    assert statuses == {0, 1, 2}


@pytest.mark.parametrize("dtype", [bool, np.uint8])
def test_strips_and_pngs_read_the_same_with_the_fallback_inflater(monkeypatch, dtype):
    """zlib-ng inflates when imagecodecs has it; libdeflate (the fallback) gives the same masks."""
    rng = np.random.default_rng(11)
    masks = rng.random((3, 30, 70)) < 0.2
    data = tiff_bytes(masks.astype(dtype), photometric="minisblack", compression="adobe_deflate",
                      rowsperstrip=7)
    record = sgeval.PredImage("1", np.zeros(3, np.int64), None, None, None, None, "m.tiff")

    class Source:
        path = "pred.zip"

        def read(self, name):
            return data

    ids = rng.integers(0, 3, (30, 70))
    png = imagecodecs.png_encode(np.dstack([ids, ids, ids]).astype(np.uint8))
    results = []
    for inflate in (sgeval._inflate, imagecodecs.deflate_decode):
        monkeypatch.setattr(sgeval, "_inflate", inflate)
        results.append((sgeval.load_pred_masks(Source(), record, 30, 70),
                        sgeval.png_segments(png, np.array([0, 65793, 131586]), (30, 70))))
    np.testing.assert_array_equal(results[0][0], sgeval.pack_masks(masks))
    np.testing.assert_array_equal(results[1][0], results[0][0])
    expected = np.packbits((ids[None] == np.arange(3)[:, None, None]).reshape(3, -1), axis=1)
    np.testing.assert_array_equal(results[0][1], expected)
    np.testing.assert_array_equal(results[1][1], expected)
