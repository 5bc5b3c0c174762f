"""inflate_runs / inflate_pages: 8-bit deflate masks decoded as runs straight into packed bits,
against zlib + np.packbits (the plain path), on hand-made, random and corrupted streams."""

import io
import json
import os
import shutil
import subprocess
import sys
import zipfile
import zlib

import imagecodecs
import numpy as np
import pytest
import tifffile
from conftest import ROOT, sgeval, synth, write_zip


def run_arrays(capacity=1 << 12):
    return np.zeros(capacity, np.int64), np.zeros(capacity, np.uint8)


def work_array():
    """The work array with the fixed codes built (inflate_pages builds them on every call)."""
    work = np.zeros(sgeval._Z_WORK_SIZE, np.int64)
    tiff = tifffile_bytes(np.zeros((1, 1, 1), np.uint8))
    status, pages, strips, starts = sgeval.tiff_layout(np.frombuffer(tiff, np.uint8))
    sgeval.inflate_pages(np.frombuffer(tiff, np.uint8), pages, strips, starts, np.zeros(1, bool),
                         np.zeros((1, 8), np.uint8), np.zeros((1, 5), np.int64), *run_arrays(), work,
                         np.zeros((1, 8), np.int64))
    return work


def tifffile_bytes(masks, **options):
    buffer = io.BytesIO()
    tifffile.imwrite(buffer, masks, photometric="minisblack", compression="adobe_deflate", **options)
    return buffer.getvalue()


EMPTY_BOX = [0, 1 << 62, -1, 1 << 62, -1]  # mask_boxes of an empty mask


def exact_boxes(masks_PHW):
    """mask_boxes rows with exact columns: pixel count, y0, y1, x0, x1."""
    boxes = []
    for mask in masks_PHW:
        ys, xs = np.nonzero(mask)
        boxes.append([len(ys), ys.min(), ys.max(), xs.min(), xs.max()] if len(ys) else EMPTY_BOX)
    return np.array(boxes, np.int64).reshape(-1, 5)


def decode(stream, size, base=0, capacity=1 << 12, work=None, box=None):
    """(run count or 0, packed bits of size bits from bit base, the run arrays); box: the mask
    box of the data as pixels base.. of one row, updated."""
    out = np.zeros(-(-(base + size) // 8) + 2, np.uint8)
    run_start, run_value = run_arrays(capacity)
    buf = np.frombuffer(stream, np.uint8)
    box = np.array(EMPTY_BOX, np.int64) if box is None else box
    n_runs = sgeval.inflate_runs(buf, 0, len(buf), size, out, base, run_start, run_value,
                                 work_array() if work is None else work, box, base + size)
    return n_runs, out, (run_start, run_value)


def expected_bits(raw, base=0):
    values = np.concatenate([np.zeros(base, np.uint8), np.frombuffer(raw, np.uint8)])
    return np.packbits(values != 0)


def test_hand_made_runs():
    """0 0 5 5 5 0 0 0 0 7: runs (0, 2), (5, 3), (0, 4), (7, 1); bits 0011 1000 01."""
    raw = bytes([0, 0, 5, 5, 5, 0, 0, 0, 0, 7])
    n_runs, out, (run_start, run_value) = decode(zlib.compress(raw, 9), 10)
    assert n_runs == 4
    assert run_start[:4].tolist() == [0, 2, 5, 9] and run_value[:4].tolist() == [0, 5, 0, 7]
    assert out.tolist() == [0b00111000, 0b01000000, 0, 0]
    n_runs, out, _ = decode(zlib.compress(raw, 9), 10, base=3)  # bits from bit 3 on
    assert out.tolist() == [0b00000111, 0b00001000, 0, 0]
    assert decode(zlib.compress(raw, 0), 10)[0] == 0  # a stored block: left to zlib-ng


def test_hand_made_fixed_code_block():
    """Fixed codes: literal 0, then a match (length 9, distance 1): ten zero bytes, one run."""
    # bits (least significant first): BFINAL 1, BTYPE 01, literal 0 = 00110000 (8 bits, MSB first),
    # length 9 = symbol 263 = 0000111 (7 bits), distance 1 = symbol 0 = 00000, end 0000000
    bits = "1" + "10" + "00110000" + "0000111" + "00000" + "0000000"
    stream = bytes(sum(int(bit) << j for j, bit in enumerate(bits[i:i + 8])) for i in range(0, len(bits), 8))
    raw = bytes(10)
    assert zlib.decompressobj(-15).decompress(stream) == raw  # the hand-made block is right
    full = bytes([0x78, 0x01]) + stream + zlib.adler32(raw).to_bytes(4, "big")
    n_runs, out, (run_start, run_value) = decode(full, 10)
    assert (n_runs, run_start[0], run_value[0]) == (1, 0, 0) and not out.any()
    assert decode(full, 11)[0] == decode(full, 9)[0] == 0  # not exactly the stated size: declined


def random_mask_bytes(rng, kind, height, width):
    if kind == 0:  # a box of one value
        image = np.zeros((height, width), np.uint8)
        y, x = rng.integers(0, height), rng.integers(0, width)
        image[y: y + rng.integers(1, 40), x: x + rng.integers(1, 40)] = rng.integers(1, 256)
    elif kind == 1:
        image = rng.integers(0, 3, (height, width)).astype(np.uint8)
    elif kind == 2:
        image = (rng.random((height, width)) < 0.05).astype(np.uint8) * 255
    else:
        image = rng.integers(0, 256, (height, width)).astype(np.uint8)
    return image.tobytes()


@pytest.mark.parametrize("seed", range(4))
def test_random_streams_decode_as_zlib_and_packbits(seed):
    """Every level, strategy and window size of zlib, several kinds of content, bits from any
    base: accepted unless stored, and the runs and bits are those of zlib.decompress."""
    rng = np.random.default_rng(seed)
    work = work_array()
    for trial in range(300):
        raw = random_mask_bytes(rng, trial % 4, *rng.integers(1, 60, 2))
        level = int(rng.integers(0, 10))
        compressor = zlib.compressobj(level, zlib.DEFLATED, int(rng.integers(9, 16)), 9, int(rng.integers(0, 5)))
        stream = compressor.compress(raw) + compressor.flush()
        base = int(rng.integers(0, 20))
        n_runs, out, (run_start, run_value) = decode(stream, len(raw), base, 1 << 14, work)
        if not n_runs:  # only stored blocks are declined: level 0, or random bytes zlib stores
            assert trial % 4 == 3 or level == 0
            continue
        values = np.frombuffer(raw, np.uint8)
        assert n_runs == np.count_nonzero(np.diff(values.astype(int))) + 1
        np.testing.assert_array_equal(run_start[:n_runs], np.flatnonzero(np.diff(values.astype(int), prepend=-1)))
        np.testing.assert_array_equal(run_value[:n_runs], values[run_start[:n_runs]])
        expected = expected_bits(raw, base)
        np.testing.assert_array_equal(out[:len(expected)], expected)
        assert not out[len(expected):].any()
        box = np.array(EMPTY_BOX, np.int64)
        decode(stream, len(raw), base, 1 << 14, work, box)
        np.testing.assert_array_equal(box, exact_boxes(np.r_[np.zeros(base, np.uint8), values][None, None])[0])


def test_corrupted_streams_are_declined_or_decoded_as_zlib_ng_does():
    """Flipped, replaced, dropped and inserted bytes, sizes one off: whatever inflate_runs
    accepts, zlib-ng and zlib decode to exactly the stated size and the same bits (it may decline
    more than they do, never less)."""
    rng = np.random.default_rng(1)
    work = work_array()
    accepted = declined = 0
    for trial in range(4000):
        raw = bytearray(random_mask_bytes(rng, 0, *rng.integers(1, 40, 2)))
        if trial % 3 == 0:
            raw[rng.integers(0, len(raw))] ^= 1
        compressor = zlib.compressobj(int(rng.integers(0, 10)), zlib.DEFLATED, 15, 9, int(rng.integers(0, 5)))
        stream = bytearray(compressor.compress(bytes(raw)) + compressor.flush())
        for _ in range(rng.integers(1, 4) if trial % 4 else 0):  # a quarter left intact
            at, change = int(rng.integers(0, len(stream))), rng.integers(0, 4)
            if change == 0:
                stream[at] ^= 1 << int(rng.integers(0, 8))
            elif change == 1:
                stream[at] = int(rng.integers(0, 256))
            elif change == 2:
                del stream[at]
            else:
                stream.insert(at, int(rng.integers(0, 256)))
        size = len(raw) + int(rng.choice([0, 0, 0, -1, 1]))
        if size < 1:
            continue
        n_runs, out, _ = decode(bytes(stream), size, work=work)
        if not n_runs:
            declined += 1
            continue
        accepted += 1
        plain = imagecodecs.zlibng_decode(bytes(stream), out=size)
        assert len(plain) == size == len(zlib.decompress(bytes(stream)))
        np.testing.assert_array_equal(out[:-(-size // 8)], expected_bits(plain))
    assert accepted > 500 and declined > 2000  # both outcomes exercised


def test_declined_streams():
    """Valid zlib data that is not exactly one stream of the stated size, or a wrong checksum,
    or more runs than the run list holds: 0, and the caller inflates it the usual way."""
    raw = bytes(100) + bytes([9]) * 50 + bytes(100)
    stream = zlib.compress(raw, 6)
    assert decode(stream, len(raw))[0] == 3
    assert decode(stream, len(raw) - 1)[0] == 0
    assert decode(stream, len(raw) + 1)[0] == 0
    assert decode(stream + b"\x00", len(raw))[0] == 0  # trailing byte
    assert decode(stream[:-1], len(raw))[0] == 0  # truncated checksum
    wrong_check = stream[:-1] + bytes([stream[-1] ^ 1])
    assert decode(wrong_check, len(raw))[0] == 0
    assert decode(b"\x78\x02" + stream[2:], len(raw))[0] == 0  # header check bits wrong
    assert decode(b"\x78\x01" + stream[2:], len(raw))[0] == 3  # (a valid header for the same data)
    alternating = bytes([0, 1]) * 20
    assert decode(zlib.compress(alternating), 40, capacity=40)[0] == 40
    assert decode(zlib.compress(alternating), 40, capacity=39)[0] == 0  # run list full


def load(data, n_pages, height, width, boxes=False, needed=None, out=None):
    record = sgeval.PredImage("1", np.zeros(n_pages, np.int64), None, None, None, None, "m.tiff")

    class Source:
        path = "pred.zip"

        def read(self, name):
            return data

    return sgeval.load_pred_masks(Source(), record, height, width, boxes=boxes, needed=needed, out=out)


@pytest.mark.parametrize("bits, width", [(1, 40), (1, 37), (8, 37)])
@pytest.mark.parametrize("decoder", [True, False])
def test_a_reused_buffer_holds_only_the_masks(monkeypatch, bits, width, decoder):
    """Masks written into a reused buffer full of stale bits: every page is written in full (its
    tail bits after the mask too) and pages not needed are empty, with or without the decoder."""
    rng = np.random.default_rng(bits * width + decoder)
    masks = rng.random((4, 9, width)) < 0.3
    data = tifffile_bytes(masks if bits == 1 else masks.astype(np.uint8) * 255)
    if not decoder:
        monkeypatch.setattr(sgeval, "_decoder_ready", lambda: False)
    needed = np.array([True, False, True, True])
    out = np.full(4 * -(-9 * width // 64), np.uint64(2**64 - 1))
    words, boxes = load(data, 4, 9, width, boxes=True, needed=needed, out=out)
    expected = sgeval.pack_masks(masks & needed[:, None, None])
    np.testing.assert_array_equal(words, expected)
    exact = exact_boxes(masks[needed])  # the boxes may be larger, never smaller
    assert (boxes[needed, 0] == exact[:, 0]).all() and (boxes[needed, 1::2] <= exact[:, 1::2]).all()
    assert (boxes[needed, 2::2] >= exact[:, 2::2]).all()
    assert (boxes[~needed, 0] == 0).all() and (boxes[~needed, 1] > boxes[~needed, 2]).all()


def layout_and_buffers(data, n_pages, words):
    status, pages, strips, starts = sgeval.tiff_layout(np.frombuffer(data, np.uint8))
    assert status == 0
    return pages, strips, starts, np.ones(n_pages, bool), np.full((n_pages, words * 8), 255, np.uint8)


def test_inflate_pages_remembers_all_zero_strips():
    """Strips whose stream is one already seen to inflate to zeros (same bytes, same size) are
    zero without decoding; other pages are decoded; rows start zeroed whatever they held."""
    rng = np.random.default_rng(3)
    masks = np.zeros((6, 40, 24), np.uint8)
    masks[1, 2:5, 3:9] = 200
    masks[4, 30:38, 1:20] = 1
    masks[5] = rng.random((40, 24)) < 0.3
    masks[2, :20] = 7  # two strips of one non-zero run: the same stream, not remembered as zero
    data = tifffile_bytes(masks, rowsperstrip=10)  # 4 strips per page, most of them empty
    pages, strips, starts, use, layers = layout_and_buffers(data, 6, 15)
    zeros = np.zeros((2, 2 + 64), np.int64)
    boxes = np.zeros((6, 5), np.int64)
    done = sgeval.inflate_pages(np.frombuffer(data, np.uint8), pages, strips, starts, use, layers, boxes,
                                *run_arrays(), work_array(), zeros)
    assert done.all()
    np.testing.assert_array_equal(layers.view(np.uint64), sgeval.pack_masks(masks))
    np.testing.assert_array_equal(boxes, exact_boxes(masks))
    assert zeros[0, 1] == 240 and 0 < zeros[0, 0] <= 64  # an empty strip of 10 rows is remembered
    first = zeros[0, 2:2 + zeros[0, 0]].astype(np.uint8).tobytes()
    assert zlib.decompress(first) == bytes(240)
    # a stream remembered for another size is not taken for this one: page 3 stated 25 pixels
    # wide has strips of 250 bytes, which its streams of 240 zero bytes do not fill
    wider = pages.copy()
    wider[3, 0] = 25
    done = sgeval.inflate_pages(np.frombuffer(data, np.uint8), wider, strips, starts, use, layers, boxes,
                                *run_arrays(), work_array(), zeros)
    assert done.tolist() == [True, True, True, False, True, True]
    # a remembered stream whose bytes differ is no match either: masks read the same after the
    # memory is filled with an edited copy
    zeros[:] = 0
    zeros[0, 0], zeros[0, 1] = len(first), 240
    zeros[0, 2:2 + len(first)] = np.frombuffer(first, np.uint8)
    zeros[0, 2 + len(first) // 2] ^= 1
    sgeval.inflate_pages(np.frombuffer(data, np.uint8), pages, strips, starts, use, layers, boxes, *run_arrays(),
                         work_array(), zeros)
    np.testing.assert_array_equal(layers.view(np.uint64), sgeval.pack_masks(masks))
    np.testing.assert_array_equal(boxes, exact_boxes(masks))


def test_pages_declined_by_inflate_runs_are_read_the_usual_way():
    """A page with more runs than the run list holds, a page whose strip is corrupt, pages not
    in use: left zero and not done; load_pred_masks reads them (or reports them) as before."""
    rng = np.random.default_rng(4)
    masks = (rng.random((3, 30, 40)) < 0.5).astype(np.uint8)
    masks[0] = 0
    data = tifffile_bytes(masks)
    pages, strips, starts, use, layers = layout_and_buffers(data, 3, 19)
    use[2] = False
    boxes = np.ones((3, 5), np.int64)
    done = sgeval.inflate_pages(np.frombuffer(data, np.uint8), pages, strips, starts, use, layers, boxes,
                                *run_arrays(100), work_array(), np.zeros((1, 10), np.int64))
    assert done.tolist() == [True, False, False] and not layers.any()  # page 1: 600 runs
    assert (boxes == EMPTY_BOX).all()  # not done: the boxes of empty masks
    np.testing.assert_array_equal(load(data, 3, 30, 40), sgeval.pack_masks(masks))
    words, boxes = load(data, 3, 30, 40, boxes=True)  # page 1's box from mask_boxes, the others' exact
    np.testing.assert_array_equal(boxes[[0, 2]], exact_boxes(masks)[[0, 2]])
    np.testing.assert_array_equal(boxes[1], sgeval.mask_boxes(words[1:2], 40)[0])
    corrupt = bytearray(data)
    offset, count = strips[starts[1]]
    corrupt[offset + count - 1] ^= 1  # page 1's checksum
    with pytest.raises(sgeval.SGEvalError, match="m.tiff: cannot read TIFF"):
        load(bytes(corrupt), 3, 30, 40)


# --------------------------------------------------------------------------------- the decoder's warm-up


class WarmUpChild:
    """Stands in for the warm-up process: alive until told otherwise, joined when asked."""

    def __init__(self):
        self.alive, self.joined = True, False

    def is_alive(self):
        return self.alive

    def join(self):
        self.joined = True


def test_pages_go_the_zlib_ng_way_while_the_decoder_compiles(monkeypatch):
    """While this process's warm-up child compiles the decoder, 8-bit pages are inflated by
    zlib-ng (the same masks, mask_boxes boxes); once the child has exited, it is joined and the
    decoder takes over. A child started by another process (a pool worker's parent) is not waited for."""
    rng = np.random.default_rng(8)
    masks = (rng.random((3, 30, 40)) < 0.2).astype(np.uint8) * 255
    data = tifffile_bytes(masks)
    calls, decoder = [], sgeval._inflate_pages
    monkeypatch.setattr(sgeval, "_inflate_pages", lambda *args: calls.append(1) or decoder(*args))
    child = WarmUpChild()
    monkeypatch.setattr(sgeval, "_WARM_UP", (child, os.getpid()))
    words, boxes = load(data, 3, 30, 40, boxes=True)
    assert not calls and not child.joined
    np.testing.assert_array_equal(words, sgeval.pack_masks(masks))
    np.testing.assert_array_equal(boxes, sgeval.mask_boxes(words, 40))
    child.alive = False
    words, boxes = load(data, 3, 30, 40, boxes=True)
    assert calls == [1] and child.joined and sgeval._WARM_UP is None
    np.testing.assert_array_equal(words, sgeval.pack_masks(masks))
    np.testing.assert_array_equal(boxes, exact_boxes(masks))
    other = WarmUpChild()
    monkeypatch.setattr(sgeval, "_WARM_UP", (other, os.getpid() + 1))
    load(data, 3, 30, 40)
    assert calls == [1, 1] and not other.joined


def eight_bit_copy(zip_in, zip_out):
    """The prediction ZIP with its 1-bit mask pages written as 8-bit pages (SGBench's layout)."""
    with zipfile.ZipFile(zip_in) as source, zipfile.ZipFile(zip_out, "w") as copy:
        for name in source.namelist():
            data = source.read(name)
            if name.endswith(".tiff"):
                pages = tifffile.TiffFile(io.BytesIO(data)).pages
                data = tifffile_bytes(np.stack([page.asarray() for page in pages]).astype(np.uint8))
            copy.writestr(name, data)
    return str(zip_out)


WARM_UP_RUN = """
import json, sys, sgeval
started, start = [], sgeval._start_warm_up
def spy(*args):
    start(*args)
    started.append(sgeval._WARM_UP is not None)
sgeval._start_warm_up = spy
results = sgeval.evaluate(json.loads(sys.argv[1]))
print(json.dumps({"started": started, "cached": sgeval._jit_cached(sgeval.inflate_pages),
                  "signatures": len(sgeval.inflate_pages._cache._cache_file._load_index()),
                  "metrics": results["metrics"]}))
"""


def test_a_first_run_compiles_the_decoder_in_a_child(tmp_path):
    """With an empty JIT cache (a copy of sgeval.py in an empty directory) evaluate() starts the
    warm-up child; the decoder is then cached under one signature, the one load_pred_masks uses
    (a second would mean the child compiled another), and the results are those of a warm run.
    With the cache filled, no child is started."""
    rng = np.random.default_rng(9)
    dataset = synth.make_dataset(rng, n_images=6, height=12, width=16, n_things=3, n_stuff=2, n_predicates=5)
    predictions = synth.simulate_predictions(rng, dataset, with_masks=True)
    config = {"gt": str(synth.write_gt(dataset, tmp_path / "gt")), "gt_seg": str(tmp_path / "gt" / "panoptic"),
              "pred": eight_bit_copy(sgeval.write_predictions(tmp_path / "pred.zip", predictions), tmp_path / "8.zip")}
    copy = tmp_path / "copy"
    copy.mkdir()
    shutil.copy(ROOT / "sgeval.py", copy)
    env = {key: value for key, value in os.environ.items() if key != "SGEVAL_NO_JIT_CACHE"}
    runs = []
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", WARM_UP_RUN, json.dumps(config)], cwd=copy, env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        runs.append(json.loads(done.stdout.splitlines()[-1]))
    assert [run["started"] for run in runs] == [[True], [False]]
    assert all(run["cached"] and run["signatures"] == 1 for run in runs)
    expected = sgeval.evaluate(config)["metrics"]
    assert runs[0]["metrics"] == runs[1]["metrics"] == expected
    assert any(value not in (None, 0.0) for value in expected.values())


def test_has_8bit_masks_looks_at_the_first_tiff_by_name(tmp_path):
    """The warm-up is started for 8-bit masks only; the guess reads the first TIFF by name of a
    ZIP, a directory or the directory of a triplets.json, and is False when it cannot be read."""
    masks = np.zeros((2, 6, 8), np.uint8)
    masks[:, 1:3, 2:5] = 1
    eight, one = tifffile_bytes(masks * 255), tifffile_bytes(masks.astype(bool))
    assert tifffile.TiffFile(io.BytesIO(one)).pages[0].bitspersample == 1
    cases = {"8.zip": {"triplets.json": b"{}", "b.tiff": eight}, "1.zip": {"a.tiff": one, "b.tiff": one},
             "mixed.zip": {"b.tiff": eight, "a.tiff": one}, "mixed8.zip": {"a.TIF": eight, "b.tiff": one},
             "corrupt.zip": {"a.tiff": eight[:20]}, "none.zip": {"triplets.json": b"{}"}}
    found = {name: sgeval._has_8bit_masks(write_zip(tmp_path / name, members)) for name, members in cases.items()}
    assert found == {"8.zip": True, "1.zip": False, "mixed.zip": False, "mixed8.zip": True, "corrupt.zip": False,
                     "none.zip": False}
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "triplets.json").write_bytes(b"{}")
    assert not sgeval._has_8bit_masks(folder)
    (folder / "1.tif").write_bytes(eight)
    assert sgeval._has_8bit_masks(folder) and sgeval._has_8bit_masks(folder / "triplets.json")
    (folder / "0.tiff").write_bytes(one)
    assert not sgeval._has_8bit_masks(folder) and not sgeval._has_8bit_masks(folder / "triplets.json")
    assert not sgeval._has_8bit_masks(tmp_path / "missing.zip")


def test_no_warm_up_for_1bit_masks(tmp_path, monkeypatch):
    """With the decoder not cached, 1-bit masks (which never use it) start no warm-up child."""
    masks = np.ones((1, 4, 8), bool)
    monkeypatch.setattr(sgeval, "_jit_cached", lambda kernel: False)
    monkeypatch.setattr(sgeval, "_WARM_UP", None)
    sgeval._start_warm_up(write_zip(tmp_path / "1.zip", {"0.tiff": tifffile_bytes(masks)}))
    assert sgeval._WARM_UP is None


def test_jit_cached_reads_the_cache_of_the_current_source(tmp_path):
    """False for a kernel never compiled from this source, True once it is (numba's index)."""
    shutil.copy(ROOT / "sgeval.py", tmp_path)
    code = ("import numpy as np, sgeval\n"
            "before = sgeval._jit_cached(sgeval.popcount64)\n"
            "sgeval.popcount64(np.uint64(5))\n"
            "print(before, sgeval._jit_cached(sgeval.popcount64))\n")
    env = {key: value for key, value in os.environ.items() if key != "SGEVAL_NO_JIT_CACHE"}
    outputs = [subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=120).stdout.split() for _ in range(2)]
    assert outputs == [["False", "True"], ["True", "True"]]
