"""The panoptic PNG fast path (png_segments) against imagecodecs.png_decode + pack_segments: every
row filter, RGB and RGBA, PNGs from real encoders, and broken files."""

import io
import struct
import zlib

import imagecodecs
import numpy as np
import pytest
from PIL import Image, ImageDraw

import sgeval


def reference(data, segment_ids):
    rgb = np.ascontiguousarray(imagecodecs.png_decode(data)[..., :3])
    return sgeval.pack_segments(rgb, np.asarray(segment_ids, np.int64))


# --- a tiny test-only encoder that applies a chosen filter per row ---------------------------

def _chunk(kind, payload):
    return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", zlib.crc32(kind + payload))


def encode_png(img_HWC, filters, raw_hook=None):
    """8-bit RGB/RGBA PNG of img with filters[y % len(filters)] on row y (spec forward filters)."""
    height, width, channels = img_HWC.shape
    rows = img_HWC.reshape(height, width * channels).astype(np.int64)
    out = []
    for y in range(height):
        x = rows[y]
        b = rows[y - 1] if y else np.zeros_like(x)
        a = np.concatenate([np.zeros(channels, np.int64), x[:-channels]])
        c = np.concatenate([np.zeros(channels, np.int64), b[:-channels]])
        kind = filters[y % len(filters)]
        if kind == 0:
            pred = 0
        elif kind == 1:
            pred = a
        elif kind == 2:
            pred = b
        elif kind == 3:
            pred = (a + b) // 2
        else:
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            pred = np.where((pa <= pb) & (pa <= pc), a, np.where(pb <= pc, b, c))
        out.append(bytes([kind]) + ((x - pred) % 256).astype(np.uint8).tobytes())
    raw = b"".join(out)
    if raw_hook is not None:
        raw = raw_hook(raw)
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 6 if channels == 4 else 2, 0, 0, 0)
    idat = zlib.compress(raw, 6)
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", idat[: len(idat) // 2])
            + _chunk(b"IDAT", idat[len(idat) // 2:]) + _chunk(b"IEND", b""))


def random_image(rng, height, width, channels, n_ids=None):
    """Random bytes, random rectangles of a few ids (n_ids < 0), or random runs of five pixels of
    n_ids ids; random alpha."""
    if n_ids is None:
        return rng.integers(0, 256, (height, width, channels), dtype=np.uint8)
    if n_ids < 0:
        img = np.zeros((height, width, channels), np.uint8)
        for _ in range(-n_ids):
            y0, x0 = rng.integers(0, height), rng.integers(0, width)
            y1, x1 = y0 + rng.integers(1, height + 1), x0 + rng.integers(1, width + 1)
            img[y0:y1, x0:x1] = rng.integers(0, 256, channels)
        return img
    palette = rng.integers(0, 256, (n_ids, channels), dtype=np.uint8)
    labels = np.repeat(rng.integers(0, n_ids, height * width // 5 + 1), 5)[: height * width]
    img = palette[labels].reshape(height, width, channels)
    if channels == 4:
        img[..., 3] = rng.integers(0, 256, (height, width))
    return img


def ids_of(img, rng):
    rgb = img[..., :3].astype(np.int64)
    ids = np.unique(rgb[..., 0] + 256 * rgb[..., 1] + 65536 * rgb[..., 2])
    absent = 1 << 24  # never a pixel id
    chosen = rng.permutation(ids)[: max(1, len(ids) // 2)] if len(ids) > 40 else rng.permutation(ids)
    return np.concatenate([chosen, [absent], chosen[:1]]).astype(np.int64)  # with a duplicate


# --- (a) panoptic PNGs from real encoders --------------------------------------------------------

def panoptic_image(seed, height=48, width=70):
    """A panoptic id image of rectangles and ellipses over stuff (ids as in PSG: R + 256 G + 65536 B)
    and its segment ids."""
    rng = np.random.default_rng(seed)
    canvas = Image.new("RGB", (width, height), (0, 0, 0))
    draw = ImageDraw.Draw(canvas)
    ids = [int(i) for i in rng.choice(2**24 - 1, 8, replace=False) + 1]
    for k, segment in enumerate(ids):
        colour = (segment & 255, (segment >> 8) & 255, segment >> 16)
        x0, y0 = int(rng.integers(0, width - 4)), int(rng.integers(0, height - 4))
        box = [x0, y0, x0 + int(rng.integers(3, width)), y0 + int(rng.integers(3, height))]
        (draw.rectangle if k % 2 else draw.ellipse)(box, fill=colour)
    return np.asarray(canvas), np.array(ids, np.int64)


def encoded(img, encoder):
    if encoder == "pil":
        buffer = io.BytesIO()
        Image.fromarray(img).save(buffer, format="PNG")
        return buffer.getvalue()
    return imagecodecs.png_encode(img, level=int(encoder[-1]))


@pytest.mark.parametrize("encoder", ["pil", "libpng1", "libpng9"])
def test_pngs_of_real_encoders(encoder):
    for seed in range(12):
        img, ids = panoptic_image(seed)
        data = encoded(img if seed % 3 else np.dstack([img, np.full(img.shape[:2], 255, np.uint8)]), encoder)
        ids = np.append(ids, 123456789)  # an id without pixels
        want = reference(data, ids)
        got = sgeval.png_segments(data, ids)
        assert got is not None and got.dtype == np.uint8 and got.shape == want.shape
        assert np.array_equal(got, want), seed
        assert sgeval.png_segments(data, ids, shape=img.shape[:2]) is not None
        assert sgeval.png_segments(data, ids, shape=(img.shape[0] + 1, img.shape[1])) is None


def test_real_pngs_every_filter():
    """Real panoptic content re-encoded with each filter: exercises the Paeth blocks that keep the
    Up result and the ones that are redone byte by byte."""
    for seed in range(4):
        img, ids = panoptic_image(seed, 40, 150)
        ids = np.append(ids, -1)
        for filters in ([0], [1], [3], [4], [4, 2, 1, 4, 0, 3]):
            data = encode_png(img, filters)
            assert np.array_equal(sgeval.png_segments(data, ids), reference(data, ids)), (seed, filters)
        rgba = np.concatenate([img, np.full(img.shape[:2] + (1,), 200, np.uint8)], axis=2)
        data = encode_png(rgba, [4, 1])
        assert np.array_equal(sgeval.png_segments(data, ids), reference(data, ids)), seed


# --- (b) synthetic images covering every filter ------------------------------------------------

FILTER_SETS = [[0], [1], [2], [3], [4], [0, 1, 2, 3, 4], [4, 3, 2, 1, 0], [2, 4, 3, 1]]


@pytest.mark.parametrize("channels", [3, 4])
@pytest.mark.parametrize("height,width", [(1, 1), (1, 7), (5, 1), (2, 2), (3, 3), (7, 7), (6, 13), (17, 31),
                                          (33, 64), (40, 97)])
def test_synthetic(channels, height, width):
    rng = np.random.default_rng(height * 1000 + width * 10 + channels)
    for filters in FILTER_SETS:
        for n_ids in (None, 1, 3, -4):
            img = random_image(rng, height, width, channels, n_ids)
            data = encode_png(img, filters)
            assert np.array_equal(imagecodecs.png_decode(data), img)  # the encoder itself is right
            ids = ids_of(img, rng)
            want = reference(data, ids)
            got = sgeval.png_segments(data, ids)
            assert np.array_equal(got, want), (filters, n_ids)
    assert sgeval.png_segments(data, np.zeros(0, np.int64)).shape == (0, (height * width + 7) // 8)


@pytest.mark.filterwarnings("ignore:overflow encountered")  # uint8 wrap-around is intended
def test_py_func_matches():
    rng = np.random.default_rng(7)
    for channels in (3, 4):
        for n_ids in (None, 2):
            img = random_image(rng, 9, 11, channels, n_ids)
            height, width, _, idat = sgeval._png_layout(encode_png(img, [0, 1, 2, 3, 4]))
            raw = zlib.decompress(idat)
            raw = np.frombuffer(raw, np.uint8)
            ids = ids_of(img, rng)
            packed, bad = sgeval.unfilter_segments(raw, height, width, channels, ids)
            packed_py, bad_py = sgeval.unfilter_segments.py_func(raw, height, width, channels, ids)
            assert bad == bad_py == -1 and np.array_equal(packed, packed_py)
            assert np.array_equal(packed, reference(encode_png(img, [0]), ids))


def test_unsupported_layouts_return_none():
    img = np.zeros((4, 4), np.uint8)
    for mode_img in (img, np.zeros((4, 4, 2), np.uint8)):  # grey, grey + alpha
        assert sgeval.png_segments(imagecodecs.png_encode(mode_img), [0]) is None
    assert sgeval.png_segments(imagecodecs.png_encode(np.zeros((4, 4, 3), np.uint16)), [0]) is None
    data = bytearray(encode_png(np.zeros((4, 4, 3), np.uint8), [0]))
    data[28] = 1  # interlaced (CRC now wrong too)
    assert sgeval.png_segments(bytes(data), [0]) is None
    assert sgeval.png_segments(b"GIF89a" + bytes(100), [0]) is None


# --- (c) broken data ---------------------------------------------------------------------------

def _none_or_value_error(data, ids=(0,)):
    try:
        return sgeval.png_segments(data, np.asarray(ids, np.int64))
    except ValueError as error:
        assert str(error)
        return "ValueError"


def test_bad_filter_byte():
    img = random_image(np.random.default_rng(1), 6, 5, 3)
    for bad_row, value in ((0, 5), (3, 255), (5, 9)):
        def hook(raw, bad_row=bad_row, value=value):
            raw = bytearray(raw)
            raw[bad_row * (1 + 5 * 3)] = value
            return bytes(raw)
        with pytest.raises(ValueError, match=f"row {bad_row} has invalid filter type {value}"):
            sgeval.png_segments(encode_png(img, [2], raw_hook=hook), [0])


def test_truncated_and_garbage():
    rng = np.random.default_rng(3)
    small = encode_png(random_image(rng, 9, 7, 4, 3), [0, 1, 2, 3, 4])
    real = encoded(panoptic_image(0)[0], "pil")
    for data in (small, real):
        outcomes = {}
        for cut in list(range(len(data))) if data is small else list(range(0, len(data), 7)):
            result = _none_or_value_error(data[:cut])
            outcomes[cut] = result if isinstance(result, str) or result is None else "packed"
        # only a cut at the very end (missing IEND, image data complete) may still decode
        assert all(v in (None, "ValueError") for cut, v in outcomes.items() if cut < len(data) - 12)
        assert "ValueError" in outcomes.values()
    # short image data inside a well-formed stream
    img = random_image(rng, 4, 4, 3)
    short = encode_png(img, [0], raw_hook=lambda raw: raw[:-3])
    with pytest.raises(ValueError, match="expected"):
        sgeval.png_segments(short, [0])
    # random garbage after a valid signature, random byte flips, absurd header sizes
    for trial in range(300):
        tail = rng.integers(0, 256, int(rng.integers(0, 200)), dtype=np.uint8).tobytes()
        garbage = b"\x89PNG\r\n\x1a\n" + tail
        _none_or_value_error(garbage)
        flipped = bytearray(small)
        for _ in range(int(rng.integers(1, 4))):
            flipped[int(rng.integers(8, len(flipped)))] = int(rng.integers(0, 256))
        _none_or_value_error(bytes(flipped))
    huge = bytearray(small)
    huge[16:24] = struct.pack(">II", 1 << 30, 1 << 30)
    huge[29:33] = struct.pack(">I", zlib.crc32(bytes(huge[12:29])))
    assert _none_or_value_error(bytes(huge)) is None


def test_stream_oddities_follow_the_fallback():
    """Oddities libpng tolerates or reports itself go to the fallback (None) or decode the same."""
    rng = np.random.default_rng(5)
    img = random_image(rng, 8, 9, 3, 3)
    ids = ids_of(img, rng)
    # more image data than the header needs: libpng decodes it (with a warning)
    extra = encode_png(img, [1], raw_hook=lambda raw: raw + bytes(50))
    assert sgeval.png_segments(extra, ids) is None
    # no IEND: libpng decodes it, so do we
    data = encode_png(img, [4])
    assert np.array_equal(sgeval.png_segments(data[:-12], ids), reference(data[:-12], ids))
    # an IDAT CRC error: libpng reports it
    broken = bytearray(data)
    broken[50] ^= 1
    assert sgeval.png_segments(bytes(broken), ids) is None
    with pytest.raises(RuntimeError):
        imagecodecs.png_decode(bytes(broken))


@pytest.mark.parametrize("period", [2, 3, 64, 65])
@pytest.mark.parametrize("channels", [3, 4])
def test_periodic_rows(period, channels):
    """Rows that repeat with a period other than one pixel: a block equal to itself shifted by one
    pixel is the only one that may be skipped as a run."""
    rng = np.random.default_rng(period)
    palette = rng.integers(0, 256, (period, channels), dtype=np.uint8)
    img = np.ascontiguousarray(np.broadcast_to(palette[np.arange(150) % period], (5, 150, channels)))
    for filters in ([0], [4], [1, 2]):
        data = encode_png(img, filters)
        ids = ids_of(img, rng)
        assert np.array_equal(sgeval.png_segments(data, ids), reference(data, ids)), filters
