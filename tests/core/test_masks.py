"""Mask decoding by the libraries, against numpy and tifffile references: pack_segments (the PNG
packer, against numpy and its .py_func), panoptic PNGs (PIL reads the header, imagecodecs
decodes), prediction TIFFs (tifffile's layout with strips inflated by imagecodecs, or tifffile page
by page), `needed`, the reused buffers, and broken, truncated and corrupted files: the right masks
or one SGEvalError naming the file, never another exception."""

import io
import itertools
import struct
import warnings

import imagecodecs
import numpy as np
import pytest
import tifffile
from conftest import BytesSource, matching, pred_record_of, sgeval, tiff_bytes
from PIL import Image

# ---------------------------------------------------------------------------------------------
# pack_segments: segment ids (R + 256 G + 65536 B) -> packed rows


def id_image(ids, alpha=None):
    """The 8-bit RGB (or RGBA, with the given alpha) image of an (H, W) array of segment ids."""
    ids = np.asarray(ids, np.int64)
    channels = [ids & 255, (ids >> 8) & 255, ids >> 16]
    if alpha is not None:
        channels.append(np.broadcast_to(alpha, ids.shape))
    return np.ascontiguousarray(np.stack(channels, axis=-1).astype(np.uint8))


def numpy_segments(ids, segments):
    """The reference: pixel == segment id, packed."""
    return sgeval.pack_masks(np.asarray(ids)[None] == np.asarray(segments)[:, None, None])


def packed_segments(kernel, rgb, segments):
    """pack_segments (or its .py_func) into zeroed rows, as load_gt_masks calls it."""
    height, width = rgb.shape[:2]
    bits = np.zeros((len(segments), -(-height * width // 64)), np.uint64)
    kernel(rgb, np.asarray(segments, np.int64), bits.view(np.uint8))
    return bits


def assert_pack_segments(ids, segments, alpha=None):
    expected = numpy_segments(ids, segments)
    rgb = id_image(ids, alpha)
    for kernel in (sgeval.pack_segments, sgeval.pack_segments.py_func):
        np.testing.assert_array_equal(packed_segments(kernel, rgb, segments), expected)


IDS = [0, 7, 300, 70000, 2**24 - 1]  # void, one byte, two bytes, three bytes, the largest id
SEGMENTS = [300, 7, 2**24 - 1, 12345, 70000, 0]  # 12345 has no pixels; 0 (void) as a segment id too


@pytest.mark.parametrize("channels", [3, 4])
@pytest.mark.parametrize("seed", range(6))
def test_pack_segments_matches_numpy_and_py_func(seed, channels):
    """Random id images: runs of random lengths (the block skipping) and single pixels; RGBA with
    alpha 255 (as panoptic PNGs have it) or random."""
    rng = np.random.default_rng(seed)
    height, width = int(rng.integers(1, 12)), [1, 5, 15, 16, 17, 33, 64, 100][rng.integers(0, 8)]
    runs = rng.choice(IDS, height * width)
    lengths = rng.integers(1, 40, height * width)
    ids = np.repeat(runs, lengths)[: height * width].reshape(height, width)
    ids.flat[rng.integers(0, ids.size, ids.size // 10 + 1)] = rng.choice(IDS)  # scattered pixels
    alpha = None if channels == 3 else 255 if seed % 2 else rng.integers(0, 256, (height, width))
    assert_pack_segments(ids, SEGMENTS, alpha)


@pytest.mark.parametrize("alpha_kind", ["RGB", "RGBA, alpha 255", "RGBA, random alpha"])
def test_pack_segments_block_skipping_edges(alpha_kind):
    """Runs of exactly 15, 16, 17 and 32 pixels (the kernel compares 16 pixels at a time with their
    left neighbours) at every third start column, widths below 16, one-pixel runs, one pixel that
    differs inside a long run (in the red, the green or only the blue byte)."""
    a = 70000  # (R, G, B) = (0x70, 0x11, 0x01)
    b, c = a + 65536, a + 256  # the same but for the blue byte; the same but for the green byte
    rows = []
    width = 40
    for length in (1, 2, 15, 16, 17, 31, 32, 33):
        for start in range(0, width - length + 1, 3):
            row = np.full(width, a)
            row[start: start + length] = b
            rows.append(row)
    for at in (0, 1, 14, 15, 16, 17, 31, 32, 39):  # one different pixel in an otherwise uniform row
        for other in (b, c, 7):
            row = np.full(width, a)
            row[at] = other
            rows.append(row)
    rows.append(np.arange(width) % 2 * 7)  # one-pixel runs: 0 7 0 7 ...
    rows.append(np.arange(width) % 3)
    ids = np.array(rows)
    alpha = {"RGB": None, "RGBA, alpha 255": 255,  # random alpha: blocks never repeat, pixel by pixel
             "RGBA, random alpha": np.random.default_rng(0).integers(0, 256, ids.shape)}[alpha_kind]
    assert_pack_segments(ids, [a, b, c, 7, 0, 1, 2], alpha)
    for narrow in (1, 2, 7, 15):  # narrower than a block: the per-pixel walk only
        assert_pack_segments(ids[:, :narrow], [a, b, c, 7, 0], alpha if np.ndim(alpha) == 0 else alpha[:, :narrow])


def test_pack_segments_ignores_alpha_inside_a_run():
    """A run of one RGB value whose alpha changes is still one segment (alpha is not part of the id),
    whether the change falls inside a 16-pixel block or on its edge."""
    for change in (1, 8, 15, 16, 17, 20, 32):
        ids = np.full((2, 48), 300)
        alpha = np.full((2, 48), 255)
        alpha[:, change:] = 0
        alpha[1, change + 1:] = 17  # and once more a pixel later in row 1
        assert_pack_segments(ids, [300, 7], alpha)


# ---------------------------------------------------------------------------------------------
# Panoptic PNGs (load_gt_masks)


def gt_record(path, height, width, segments, image_id="42"):
    """A GTImage whose panoptic PNG is path (the masks' reader reads nothing else)."""
    return sgeval.GTImage(image_id, height, width, str(path), np.asarray(segments, np.int64),
                          np.zeros(len(segments), np.int64), np.zeros((len(segments), 4)), np.zeros((0, 3), np.int64),
                          np.zeros(0, np.int64))


def random_ids(rng, height, width):
    """Rectangles of random ids on void, ids 0 and 2**24 - 1 included."""
    ids = np.zeros((height, width), np.int64)
    for value in rng.choice([7, 300, 70000, 2**24 - 1, 5, 6], 8):
        y, x = rng.integers(0, height), rng.integers(0, width)
        ids[y: y + rng.integers(1, height + 1), x: x + rng.integers(1, width + 1)] = value
    return ids


def pil_png(array, **options):
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format="PNG", **options)
    return buffer.getvalue()


PNG_WRITERS = {
    **{f"pil-level{level}": (lambda a, level=level: pil_png(a, compress_level=level)) for level in (0, 1, 6, 9)},
    "pil-optimize": lambda a: pil_png(a, optimize=True),
    **{f"imagecodecs-level{level}": (lambda a, level=level: imagecodecs.png_encode(a, level=level))
       for level in (0, 1, 6, 9)},
    **{f"imagecodecs-{f.name.lower()}": (lambda a, f=f: imagecodecs.png_encode(a, filter=f))  # every row filter
       for f in (imagecodecs.PNG.FILTER.SUB, imagecodecs.PNG.FILTER.UP, imagecodecs.PNG.FILTER.AVG,
                 imagecodecs.PNG.FILTER.PAETH, imagecodecs.PNG.FILTER.ALL)},
}


@pytest.mark.parametrize("channels", [3, 4])
@pytest.mark.parametrize("writer", list(PNG_WRITERS))
def test_gt_png_masks_equal_numpy(tmp_path, writer, channels):
    rng = np.random.default_rng(len(writer) * channels)
    for height, width in ((1, 1), (3, 200), (37, 29)):
        ids = random_ids(rng, height, width)
        rgb = id_image(ids, rng.integers(0, 256, (height, width)) if channels == 4 else None)
        path = tmp_path / f"{height}x{width}.png"
        path.write_bytes(PNG_WRITERS[writer](rgb))
        segments = [s for s in [7, 2**24 - 1, 300, 70000, 5, 6] if (ids == s).any()]
        masks = sgeval.load_gt_masks(gt_record(path, height, width, segments))
        assert masks.dtype == np.uint64 and masks.shape == (len(segments), -(-height * width // 64))
        np.testing.assert_array_equal(masks, numpy_segments(ids, segments))
        with pytest.raises(sgeval.SGEvalError, match="segment id 12345, which the panoptic PNG does not hold"):
            sgeval.load_gt_masks(gt_record(path, height, width, segments + [12345]))  # no pixels: an error


def gt_png_bytes(kind, rgb):
    """A PNG (or not) that load_gt_masks must reject, for an image whose GT size is rgb's."""
    height, width = rgb.shape[:2]
    if kind == "16-bit RGB":
        return imagecodecs.png_encode(rgb.astype(np.uint16) * 257)
    if kind == "16-bit RGBA":
        return imagecodecs.png_encode(np.dstack([rgb, rgb[..., :1]]).astype(np.uint16) * 257)
    if kind == "16-bit gray":
        return imagecodecs.png_encode(rgb[..., 0].astype(np.uint16) * 257)
    if kind in ("P", "L", "LA", "1", "I;16"):  # PIL's modes: palette, grayscale (+ alpha), 1-bit, 16-bit gray
        buffer = io.BytesIO()
        Image.fromarray(rgb).convert(kind).save(buffer, format="PNG")
        return buffer.getvalue()
    if kind in ("JPEG", "BMP", "TIFF", "GIF"):
        buffer = io.BytesIO()
        Image.fromarray(rgb).save(buffer, format=kind)
        return buffer.getvalue()
    if kind == "taller":
        return pil_png(np.concatenate([rgb, rgb[:1]]))
    if kind == "narrower":
        return pil_png(np.ascontiguousarray(rgb[:, :-1]))
    if kind == "transposed":
        return pil_png(np.ascontiguousarray(rgb.transpose(1, 0, 2)))
    if kind == "empty":
        return b""
    if kind == "garbage":
        return b"this is no PNG at all"
    if kind == "PNG signature only":
        return pil_png(rgb)[:8]
    if kind == "no IDAT":
        data = pil_png(rgb)
        start = data.index(b"IDAT") - 4
        (length,) = struct.unpack(">I", data[start: start + 4])
        return data[:start] + data[start + 12 + length:]
    if kind == "bad IDAT checksum":
        data = bytearray(pil_png(rgb))
        end = data.index(b"IEND") - 4
        data[end - 1] ^= 0xFF  # the last byte of the IDAT chunk's CRC
        return bytes(data)
    raise ValueError(kind)


BAD_PNGS = ["16-bit RGB", "16-bit RGBA", "16-bit gray", "P", "L", "LA", "1", "I;16", "JPEG", "BMP", "TIFF", "GIF",
            "taller", "narrower", "transposed", "empty", "garbage", "PNG signature only", "no IDAT",
            "bad IDAT checksum"]


@pytest.mark.parametrize("kind", BAD_PNGS)
def test_bad_gt_png_is_one_problem_naming_the_png_and_the_image(tmp_path, kind):
    """16-bit, palette, grayscale, other formats named .png, a size other than psg.json's, broken
    files: one SGEvalError naming the PNG and the image (never another exception)."""
    ids = random_ids(np.random.default_rng(3), 6, 10)
    path = tmp_path / "seg.png"
    path.write_bytes(gt_png_bytes(kind, id_image(ids)))
    with pytest.raises(sgeval.SGEvalError) as info:
        sgeval.load_gt_masks(gt_record(path, 6, 10, [7, 300]))
    assert len(info.value.problems) == 1 and matching(info.value.problems, path, "42"), info.value.problems
    if kind in ("taller", "narrower", "transposed"):
        assert "10x6" in info.value.problems[0]  # psg.json's width x height


def corrupted(data, rng, n_flips):
    raw = bytearray(data)
    for at in rng.integers(0, len(raw), n_flips):
        raw[at] = rng.integers(0, 256)
    return bytes(raw)


def assert_masks_or_one_problem(read, expected, path):
    """read() gives the expected masks, or raises one SGEvalError naming path; returns which."""
    try:
        masks = read()
    except sgeval.SGEvalError as error:
        assert len(error.problems) == 1 and str(path) in error.problems[0], error.problems
        return "problem"
    np.testing.assert_array_equal(masks, expected)
    return "masks"


@pytest.mark.parametrize("writer", ["pil-level6", "imagecodecs-level1"])
def test_truncated_and_corrupted_gt_pngs(tmp_path, writer):
    """Every truncation and random byte flips: the right masks (a cut IEND, a flip in a CRC libpng
    only warns about, ...) or one SGEvalError naming the PNG. The chunk CRCs and the zlib checksum
    catch every flip that would change the pixels."""
    rng = np.random.default_rng(5)
    ids = random_ids(rng, 9, 13)
    segments = [s for s in [7, 300, 70000, 2**24 - 1] if (ids == s).any()]
    data = PNG_WRITERS[writer](id_image(ids))
    expected = numpy_segments(ids, segments)
    path = tmp_path / "seg.png"
    image = gt_record(path, 9, 13, segments)

    def read(raw):
        path.write_bytes(raw)
        return assert_masks_or_one_problem(lambda: sgeval.load_gt_masks(image), expected, path)

    iend = data.rindex(b"IEND") - 4
    outcomes = [read(data[:n]) for n in range(len(data))]
    assert set(outcomes[:iend]) == {"problem"}  # cut before IEND: the image data is incomplete
    outcomes += [read(corrupted(data, rng, int(rng.integers(1, 4)))) for _ in range(300)]
    assert outcomes.count("problem") > 250 and "masks" in outcomes


def test_gt_buffer_holds_only_the_current_image(tmp_path):
    """load_gt_masks reuses one buffer: a large image covered by many segments, then a smaller one,
    then one whose segments hold a pixel each, each equal to its own reference."""
    stripes = np.broadcast_to(1 + np.arange(50) // 6 % 9, (40, 50))  # segments 1..9 on every pixel
    sparse = np.zeros((8, 8), np.int64)
    sparse[0, 0], sparse[7, 7] = 7, 300
    random = random_ids(np.random.default_rng(1), 5, 9)
    images = [(stripes, list(range(1, 10))), (random, [s for s in [300, 7, 70000] if (random == s).any()]),
              (sparse, [7, 300])]
    for index, (ids, segments) in enumerate(images):
        path = tmp_path / f"{index}.png"
        path.write_bytes(pil_png(id_image(ids)))
        masks = sgeval.load_gt_masks(gt_record(path, *ids.shape, segments))
        np.testing.assert_array_equal(masks, numpy_segments(ids, segments))


# ---------------------------------------------------------------------------------------------
# Prediction TIFFs (load_pred_masks)

STRIP_COMPRESSIONS = (None, "adobe_deflate", "deflate")  # what the strip reader reads itself


def layout_id(options):
    return "-".join(f"{key}={value}" for key, value in options.items()) or "default"


WRITER_OPTIONS = [
    {key: value for key, value in (("compression", compression), ("rowsperstrip", rows), ("byteorder", order),
                                   ("bigtiff", big)) if value is not None}
    for compression, rows, order, big in itertools.product(
        (None, "adobe_deflate", "deflate", "lzw"), (1, 3, None), (None, ">"), (None, True))]


def on_strip_path(options):
    """Whether the strip reader decodes this layout (else tifffile does, page by page)."""
    return options.get("compression") in STRIP_COMPRESSIONS and "tile" not in options \
        and "planarconfig" not in options


def tifffile_reference(data, height, width):
    """pack_masks(tifffile.imread(...) != 0), pages (or the layers of a 3-D page) in order."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        array = tifffile.imread(io.BytesIO(data))
    return sgeval.pack_masks(np.asarray(array != 0).reshape(-1, height, width))


def random_mask_values(rng, n, height, width, dtype):
    """(masks, the array to write): bool masks, or uint8 with any non-zero value inside."""
    masks = rng.random((n, height, width)) < 0.3
    masks[0] = True  # a full mask, and a mask with single pixels at the corners
    masks[-1] = False
    masks[-1, 0, 0] = masks[-1, -1, -1] = masks[-1, 0, -1] = True
    if dtype == "bool":
        return masks, masks
    values = rng.integers(1, 256, masks.shape).astype(np.uint8)
    values.ravel()[:4] = [128, 1, 16, 255]  # single high, low and middle bits
    return masks, masks * values


def load(data, n_masks, height, width, needed=None):
    """load_pred_masks of TIFF bytes (a copy: the result is a reused buffer)."""
    return sgeval.load_pred_masks(BytesSource(data), pred_record_of(n_masks), height, width, needed).copy()


@pytest.mark.parametrize("width", [21, 24])
@pytest.mark.parametrize("dtype", ["bool", "uint8"])
@pytest.mark.parametrize("options", WRITER_OPTIONS, ids=layout_id)
def test_pred_tiff_masks_equal_tifffile(options, dtype, width):
    """tifffile.imwrite of bool (1-bit) and uint8 masks with every compression, strip height, byte
    order and BigTIFF; widths 21 (rows not whole bytes) and 24: the masks tifffile reads. `needed`
    never changes the needed masks; the strip reader leaves the others empty."""
    rng = np.random.default_rng(width)
    masks, values = random_mask_values(rng, 5, 17, width, dtype)
    data = tiff_bytes(values, **options)
    expected = sgeval.pack_masks(masks)
    np.testing.assert_array_equal(tifffile_reference(data, 17, width), expected)
    np.testing.assert_array_equal(load(data, 5, 17, width), expected)
    needed = np.array([True, False, True, False, False])
    partial = load(data, 5, 17, width, needed)
    np.testing.assert_array_equal(partial[needed], expected[needed])
    if on_strip_path(options):
        assert not partial[~needed].any()
    else:
        np.testing.assert_array_equal(partial, expected)  # tifffile decodes every page
    with tifffile.TiffFile(io.BytesIO(data)) as tiff:  # the general reader reads any layout
        np.testing.assert_array_equal(sgeval._tifffile_masks(tiff, 17, width, 5, "where"), sgeval.pack_masks(masks))


OTHER_LAYOUTS = {  # name: (options, dtypes): layouts only tifffile decodes
    "tiles 16x16": ({"tile": (16, 16)}, ("bool", "uint8")),
    "deflate tiles 32x48": ({"tile": (32, 48), "compression": "deflate"}, ("bool", "uint8")),
    "3-D page, planar": ({"planarconfig": "separate"}, ("bool", "uint8")),
    "3-D page, planar, deflate": ({"planarconfig": "separate", "compression": "adobe_deflate"}, ("bool", "uint8")),
    "3-D page, contig (H, W, P)": ({"planarconfig": "contig"}, ("bool", "uint8")),
}


@pytest.mark.parametrize("n_masks", [2, 5])
@pytest.mark.parametrize("layout", list(OTHER_LAYOUTS))
def test_other_tiff_layouts_equal_tifffile(layout, n_masks):
    """Tiles, and all masks in one page as a 3-D array (planar (P, H, W); contiguous, written as
    (H, W, P)): the masks tifffile reads, in order."""
    options, dtypes = OTHER_LAYOUTS[layout]
    rng = np.random.default_rng(n_masks)
    height, width = 20, 21
    for dtype in dtypes:
        masks, values = random_mask_values(rng, n_masks, height, width, dtype)
        contig = options.get("planarconfig") == "contig"
        data = tiff_bytes(np.ascontiguousarray(np.moveaxis(values, 0, -1)) if contig else values, **options)
        reference = tifffile_reference(data, height, width) if not contig else sgeval.pack_masks(
            np.moveaxis(tifffile.imread(io.BytesIO(data)).reshape(height, width, -1), -1, 0) != 0)
        np.testing.assert_array_equal(load(data, n_masks, height, width), reference)
        unneeded = load(data, n_masks, height, width, np.zeros(n_masks, bool))  # left empty on the strip path
        assert all(not row.any() or (row == expected).all() for row, expected in zip(unneeded, reference))
        if not (contig and dtype == "bool" and n_masks > 1):
            # tifffile writes a 1-bit contiguous page of several samples that it does not read back as
            # written (its bits are packed per sample plane); sgeval follows tifffile's reading
            np.testing.assert_array_equal(reference, sgeval.pack_masks(masks))


@pytest.mark.parametrize("height", [6, 10])
def test_contig_3d_page_with_as_many_masks_as_columns(height):
    """A page of samples stored together is (H, W, P) by its axes, even when P equals W."""
    rng = np.random.default_rng(height)
    masks = rng.random((6, height, 6)) < 0.4  # P == W == 6
    data = tiff_bytes(np.ascontiguousarray(np.moveaxis(masks, 0, -1)).astype(np.uint8), planarconfig="contig")
    np.testing.assert_array_equal(load(data, 6, height, 6), sgeval.pack_masks(masks))


def test_the_reused_buffers_never_leak():
    """load_pred_masks reuses its buffers from file to file: many full masks, then fewer, emptier,
    narrower and shorter ones, 1-bit and 8-bit, pages not needed: each result is its own file's."""
    rng = np.random.default_rng(2)
    full = [np.ones((12, 30, 64), bool), np.ones((12, 30, 61), np.uint8) * 255]
    files = [(full[0], {"compression": "adobe_deflate"}, None),
             (rng.random((3, 30, 64)) < 0.1, {}, None),  # 1-bit, whole bytes: straight into the masks
             (full[1], {"compression": "deflate", "rowsperstrip": 4}, None),
             (np.zeros((2, 30, 61), np.uint8), {"compression": "deflate"}, None),  # 8-bit, empty
             (full[0], {"rowsperstrip": 7}, None),
             (rng.random((5, 9, 21)) < 0.5, {"compression": "adobe_deflate"}, None),  # 1-bit, rows padded
             (full[1], {}, np.zeros(12, bool)),  # nothing needed: all empty
             (full[0][:4, :20, :40], {"byteorder": ">"}, np.array([False, True, False, True])),
             (np.zeros((1, 3, 5), bool), {}, None)]
    kept = []
    for masks, options, needed in files:
        n, height, width = masks.shape
        result = sgeval.load_pred_masks(BytesSource(tiff_bytes(masks, **options)), pred_record_of(n), height,
                                        width, needed)
        expected = sgeval.pack_masks(masks != 0)
        if needed is not None:
            expected[~needed] = 0
        np.testing.assert_array_equal(result, expected)
        kept.append(result)
    assert np.shares_memory(kept[0], kept[1])  # one buffer: copy a result to keep it past the next call


# ---------------------------------------------------------------------------------------------
# Broken and corrupted TIFFs: the right masks or one SGEvalError naming the file

CORRUPTED_LAYOUTS = {  # strip layouts (the strip reader checks every offset and count it uses)
    "1-bit adobe_deflate": ("bool", {"compression": "adobe_deflate"}),
    "8-bit deflate, 2 rows a strip": ("uint8", {"compression": "deflate", "rowsperstrip": 2}),
    "1-bit raw, big-endian, 2 rows a strip": ("bool", {"byteorder": ">", "rowsperstrip": 2}),
    "8-bit raw, BigTIFF": ("uint8", {"bigtiff": True}),
}


def corrupt_case(layout):
    dtype, options = CORRUPTED_LAYOUTS[layout]
    masks, values = random_mask_values(np.random.default_rng(7), 4, 9, 16, dtype)
    return tiff_bytes(values, **options), sgeval.pack_masks(masks)


def read_tiff(raw, n_masks, height, width):
    """load_pred_masks of raw bytes: the masks (a copy), or the one problem, naming the file."""
    try:
        return load(raw, n_masks, height, width)
    except sgeval.SGEvalError as error:
        problems = error.problems
        assert len(problems) == 1 and "pred.zip: image 1: m.tiff" in problems[0], problems
        return problems[0]


@pytest.mark.parametrize("layout", list(CORRUPTED_LAYOUTS))
def test_truncated_tiffs(layout):
    """Every truncation: the right masks (only bytes nothing points to were cut) or one problem."""
    data, expected = corrupt_case(layout)
    with tifffile.TiffFile(io.BytesIO(data)) as tiff:
        last_data = max(offset + count for page in tiff.pages
                        for offset, count in zip(page.dataoffsets, page.databytecounts))
    for n in range(len(data)):
        result = read_tiff(data[:n], 4, 9, 16)
        if isinstance(result, str):
            continue
        assert n >= last_data, n  # a strip was cut: never masks
        np.testing.assert_array_equal(result, expected)


def file_regions(data):
    """Byte positions of a TIFF's header, of its IFDs (entries and out-of-line tag values) and of
    its strips."""
    header, ifds, strips = set(range(8)), set(), set()
    with tifffile.TiffFile(io.BytesIO(data)) as tiff:
        sizes = tiff.tiff
        if tiff.is_bigtiff:
            header = set(range(16))
        for page in tiff.pages:
            tags = list(page.tags.values())
            ifd_size = sizes.tagnosize + sizes.tagsize * len(tags) + sizes.offsetsize  # count, entries, next
            ifds.update(range(page.offset, page.offset + ifd_size))
            for tag in tags:
                ifds.update(range(tag.valueoffset, tag.valueoffset + tag.valuebytecount))
            for offset, count in zip(page.dataoffsets, page.databytecounts):
                strips.update(range(offset, offset + count))
    return sorted(header), sorted(ifds - header), sorted(strips - ifds - header)


@pytest.mark.parametrize("layout", list(CORRUPTED_LAYOUTS))
def test_byte_flips_in_header_ifds_and_data(layout):
    """Single bytes of the header and the IFDs set to other values: one problem, or masks (a flipped
    tag may still describe a readable file, e.g. another PhotometricInterpretation); flips in deflate
    strips: the right masks or one problem (the zlib checksum); flips in raw strips: the pixels of
    the flipped bytes change and nothing else (what tifffile reads)."""
    data, expected = corrupt_case(layout)
    header, ifds, strips = file_regions(data)
    assert header and ifds and strips
    rng = np.random.default_rng(11)
    outcomes = []
    for at in header + list(rng.choice(ifds, min(len(ifds), 120), replace=False)):
        for value in (data[at] ^ 0x01, data[at] ^ 0x80, 0xFF, 0x00):
            raw = bytearray(data)
            raw[at] = value
            result = read_tiff(bytes(raw), 4, 9, 16)
            if not isinstance(result, str):
                assert result.shape == expected.shape and result.dtype == np.uint64
            outcomes.append(isinstance(result, str))
    assert any(outcomes) and not all(outcomes)
    deflate = "deflate" in layout
    for trial in range(150):
        raw = bytearray(data)
        for at in rng.choice(strips, int(rng.integers(1, 4))):
            raw[at] = rng.integers(0, 256)
        result = read_tiff(bytes(raw), 4, 9, 16)
        if deflate:
            if not isinstance(result, str):
                np.testing.assert_array_equal(result, expected)
        else:
            assert not isinstance(result, str)
            np.testing.assert_array_equal(result, tifffile_reference(bytes(raw), 9, 16))


def patched(data, page, tag_name, values):
    """TIFF bytes with the values of one tag of one page replaced (same count and type)."""
    with tifffile.TiffFile(io.BytesIO(data)) as tiff:
        tag = tiff.pages[page].tags[tag_name]
        order, code, offset = tiff.byteorder, tifffile.TIFF.DATA_FORMATS[tag.dtype][-1], tag.valueoffset
    raw = bytearray(data)
    struct.pack_into(f"{order}{len(values)}{code}", raw, offset, *values)
    return bytes(raw)


@pytest.mark.parametrize("layout", list(CORRUPTED_LAYOUTS))
def test_broken_strip_tags(layout):
    """A strip offset past the end (of the first or the last page), a strip longer than the file, too
    few strips for the rows: one problem each, saying so."""
    data, _ = corrupt_case(layout)
    with tifffile.TiffFile(io.BytesIO(data)) as tiff:
        first = tiff.pages[0]
        offsets, counts, rows = list(first.dataoffsets), list(first.databytecounts), first.rowsperstrip
        last_page_offsets = list(tiff.pages[-1].dataoffsets)
    broken = {
        "offset past the end": (patched(data, 0, "StripOffsets", [len(data) + 100] + offsets[1:]), "past the end"),
        "last page's offset past the end": (patched(data, 3, "StripOffsets", last_page_offsets[:-1] + [len(data)]),
                                            "past the end"),
        "strip longer than the file": (patched(data, 0, "StripByteCounts", [len(data)] + counts[1:]),
                                       "past the end"),
    }
    if rows < 9:
        broken["too few strips"] = (patched(data, 0, "RowsPerStrip", [rows - 1]), "its rows need 9")
    for name, (raw, words) in broken.items():
        assert words in read_tiff(raw, 4, 9, 16), name


@pytest.mark.parametrize("compression", [None, "adobe_deflate"])
@pytest.mark.parametrize("offset", [2**64 - 1, 2**63, 2**63 - 1])
def test_bigtiff_strip_offsets_beyond_int64_are_a_problem(compression, offset):
    """LONG8 strip offsets near or past the int64 range (once a read far out of bounds): one problem."""
    data = tiff_bytes(np.ones((2, 9, 16), np.uint8), compression=compression, bigtiff=True)
    with tifffile.TiffFile(io.BytesIO(data)) as tiff:
        offsets = list(tiff.pages[0].dataoffsets)
    assert "past the end" in read_tiff(patched(data, 0, "StripOffsets", [offset] + offsets[1:]), 2, 9, 16)


@pytest.mark.parametrize("dtype", ["bool", "uint8"])
def test_strips_that_inflate_to_other_sizes(dtype):
    """Deflate strips holding fewer rows than RowsPerStrip says (patched 2 -> 3), or more than the
    rows left (ImageLength patched 10 -> 9): one problem each."""
    masks, values = random_mask_values(np.random.default_rng(9), 1, 10, 16, dtype)
    data = tiff_bytes(values, compression="adobe_deflate", rowsperstrip=2)
    assert "inflates to fewer" in read_tiff(patched(data, 0, "RowsPerStrip", [3]), 1, 10, 16)
    assert "m.tiff" in read_tiff(patched(data, 0, "ImageLength", [9]), 1, 9, 16)
    np.testing.assert_array_equal(read_tiff(data, 1, 10, 16), sgeval.pack_masks(masks))  # unpatched: fine


def test_truncated_strip_tags_of_an_lzw_file_are_a_problem():
    """tifffile decodes a page whose strip tags it cannot read as zeros (it only logs an error):
    every page's strips are checked to be there before any is decoded."""
    masks = np.random.default_rng(1).random((4, 9, 16)) < 0.4
    data = tiff_bytes(masks, compression="lzw", rowsperstrip=2)
    with tifffile.TiffFile(io.BytesIO(data)) as tiff:
        cut = tiff.pages[3].tags["StripByteCounts"].valueoffset + 2  # inside the last page's byte counts
    assert isinstance(read_tiff(data[:cut], 4, 9, 16), str)


@pytest.mark.parametrize("options", [{"compression": "lzw", "rowsperstrip": 2}, {"tile": (16, 16)},
                                     {"compression": "zstd", "rowsperstrip": 4}], ids=["lzw", "tiles", "zstd"])
def test_missing_strips_of_pages_tifffile_decodes_are_a_problem(options):
    """Layouts tifffile decodes: a segment of no bytes, one past the end of the file or longer than
    it would be decoded as zeros; one problem each, naming the page."""
    values = (np.random.default_rng(3).random((3, 32, 16)) < 0.5).astype(np.uint8)
    data = tiff_bytes(values, **options)
    with tifffile.TiffFile(io.BytesIO(data)) as tiff:
        tags = ("TileOffsets", "TileByteCounts") if tiff.pages[0].is_tiled else ("StripOffsets", "StripByteCounts")
        offsets, counts = list(tiff.pages[2].dataoffsets), list(tiff.pages[2].databytecounts)
    np.testing.assert_array_equal(read_tiff(data, 3, 32, 16), sgeval.pack_masks(values))  # unpatched: fine
    for tag, values in ((tags[1], [0] + counts[1:]), (tags[0], offsets[:-1] + [len(data)]),
                        (tags[1], counts[:-1] + [len(data)])):
        assert "page 2: its" in read_tiff(patched(data, 2, tag, values), 3, 32, 16), (tag, values)


@pytest.mark.parametrize("options", [{"compression": "lzw"}, {"compression": "lzw", "tile": (16, 16)}],
                         ids=["strips", "tiles"])
def test_a_page_of_the_wrong_size_is_not_decoded(monkeypatch, options):
    """The size of a page is compared with the GT image's before tifffile decodes it (a small tiled
    page claiming 20000 x 20000 once allocated that first)."""
    data = tiff_bytes(np.ones((2, 16, 16), np.uint8), **options)
    data = patched(patched(data, 1, "ImageLength", [20000]), 1, "ImageWidth", [20000])
    decoded = []
    real = tifffile.TiffPage.asarray

    def spy(page, *args, **kwargs):
        decoded.append(page.shape)
        return real(page, *args, **kwargs)

    monkeypatch.setattr(tifffile.TiffPage, "asarray", spy)
    assert "size" in read_tiff(data, 2, 16, 16)
    assert (20000, 20000) not in decoded


@pytest.mark.parametrize("dtype", ["bool", "uint8"])
@pytest.mark.parametrize("width", [21, 24, 70])
def test_fallback_inflater_gives_the_same_masks(monkeypatch, dtype, width):
    """zlib-ng inflates the strips when imagecodecs has it; libdeflate (the fallback) gives the
    same masks."""
    rng = np.random.default_rng(width)
    masks, values = random_mask_values(rng, 3, 30, width, dtype)
    results = []
    for inflate in (sgeval._inflate, imagecodecs.deflate_decode):
        monkeypatch.setattr(sgeval, "_inflate", inflate)
        for options in ({"compression": "adobe_deflate"}, {"compression": "deflate", "rowsperstrip": 7},
                        {"compression": "deflate", "rowsperstrip": 1}):
            results.append(load(tiff_bytes(values, **options), 3, 30, width))
    for result in results:
        np.testing.assert_array_equal(result, sgeval.pack_masks(masks))
