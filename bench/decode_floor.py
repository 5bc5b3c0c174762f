"""The decode floor of a mask-mode evaluation: the least work any evaluator must do.

For every evaluated image (in ``test_image_ids`` with at least one relation), decompress the GT
panoptic PNG's image data and every strip of every page of the image's prediction TIFF, read in
memory from the ZIP. Nothing else: no ``triplets.json``, no PNG row filters undone, no unpacking
of bits, no masks compared. The PNG chunks and the TIFF structure are walked here (classic TIFF,
either byte order); every zlib stream is inflated with zlib-ng (``imagecodecs.zlibng_decode``),
the fastest inflater at hand (``--codec libdeflate`` or ``zlib`` for the others). ``--png pil``
decodes the PNGs fully with PIL instead (what the floor used before zlib-ng was found).

    python bench/decode_floor.py --gt psg.json --gt-seg panoptic --pred sgbench.zip --workers 2

``--workers 1`` works in-process; W > 1 uses a Pool of W processes that each open the ZIP.
Prints one summary line (images, pages, strips, inflated bytes).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import struct
import sys
import zipfile
import zlib

import numpy as np
from PIL import Image

try:
    import imagecodecs
except ImportError:  # pragma: no cover - imagecodecs is a runtime dependency of sgeval
    imagecodecs = None

TAGS = {256: "width", 257: "length", 258: "bits", 259: "compression", 273: "offsets", 277: "samples",
        278: "rows_per_strip", 279: "byte_counts"}
TYPE_SIZES = {1: ("B", 1), 3: ("H", 2), 4: ("I", 4), 16: ("Q", 8)}  # BYTE, SHORT, LONG, LONG8
DEFLATE = (8, 32946)  # ADOBE_DEFLATE, DEFLATE


def tiff_strips(data):
    """Yield (page index, strip bytes, inflated size) for every strip of every page of a classic TIFF."""
    order = {b"II": "<", b"MM": ">"}.get(data[:2])
    if order is None or struct.unpack(order + "H", data[2:4])[0] != 42:
        raise ValueError("not a classic TIFF (BigTIFF is not walked here)")
    (ifd,) = struct.unpack(order + "I", data[4:8])
    page = 0
    while ifd:
        (count,) = struct.unpack(order + "H", data[ifd:ifd + 2])
        tags = {}
        for entry in range(ifd + 2, ifd + 2 + 12 * count, 12):
            tag, kind, n = struct.unpack(order + "HHI", data[entry:entry + 8])
            if tag not in TAGS or kind not in TYPE_SIZES:
                continue
            code, size = TYPE_SIZES[kind]
            where = entry + 8 if n * size <= 4 else struct.unpack(order + "I", data[entry + 8:entry + 12])[0]
            tags[TAGS[tag]] = struct.unpack(f"{order}{n}{code}", data[where:where + n * size])
        if tags.get("compression", (1,))[0] not in DEFLATE:
            raise ValueError(f"TIFF page compression {tags.get('compression')} is not deflate")
        width, length = tags["width"][0], tags["length"][0]
        row_bytes = -(-width * tags.get("bits", (1,))[0] * tags.get("samples", (1,))[0] // 8)
        rows_per_strip = tags.get("rows_per_strip", (length,))[0]
        for index, (offset, size) in enumerate(zip(tags["offsets"], tags["byte_counts"])):
            rows = min(rows_per_strip, length - index * rows_per_strip)
            yield page, data[offset:offset + size], rows * row_bytes
        (ifd,) = struct.unpack(order + "I", data[ifd + 2 + 12 * count:ifd + 6 + 12 * count])
        page += 1


INFLATERS = {
    "zlibng": lambda stream, size: imagecodecs.zlibng_decode(stream, out=size),
    "libdeflate": lambda stream, size: imagecodecs.deflate_decode(stream, out=size),
    "zlib": lambda stream, size: zlib.decompress(stream, bufsize=size),
}


def png_stream(data):
    """(zlib stream, inflated size) of an 8-bit RGB/RGBA PNG: its IDAT chunks joined."""
    width, height, depth, colour = struct.unpack(">IIBB", data[16:26])
    if depth != 8 or colour not in (2, 6):
        raise ValueError(f"PNG bit depth {depth}, colour type {colour}: not 8-bit RGB(A)")
    chunks, pos = [], 8
    while pos + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        if kind == b"IDAT":
            chunks.append(data[pos + 8:pos + 8 + length])
        pos += 12 + length
    return b"".join(chunks), height * (1 + width * (4 if colour == 6 else 3))


_STATE = {}  # per process: the open ZIP, the inflater and the PNG mode


def _setup(pred_path, codec, png_mode):
    _STATE.update(zip=zipfile.ZipFile(pred_path), inflate=INFLATERS[codec], png=png_mode)


def decode_image(job):
    """Decode one image: (pages, strips, inflated bytes)."""
    png_path, member = job
    if _STATE["png"] == "pil":
        with Image.open(png_path) as png:
            np.asarray(png)
    else:
        with open(png_path, "rb") as handle:
            _STATE["inflate"](*png_stream(handle.read()))
    pages = strips = inflated = 0
    for page, strip, size in tiff_strips(_STATE["zip"].read(member)):
        inflated += len(_STATE["inflate"](strip, size))
        pages, strips = page + 1, strips + 1
    return pages, strips, inflated


def jobs(gt_path, seg_root, pred_path):
    """(PNG path, ZIP member) of every evaluated image that has a TIFF in the prediction."""
    with open(gt_path, "rb") as handle:
        psg = json.load(handle)
    test_ids = set(map(str, psg["test_image_ids"]))
    with zipfile.ZipFile(pred_path) as archive:
        members = {name[:-len(".tiff")]: name for name in archive.namelist() if name.endswith(".tiff")}
    return [(os.path.join(seg_root, entry["pan_seg_file_name"]), members[str(entry["image_id"])])
            for entry in psg["data"]
            if str(entry["image_id"]) in test_ids and entry["relations"] and str(entry["image_id"]) in members]


def run(gt_path, seg_root, pred_path, workers=1, codec="zlibng", png_mode="inflate"):
    """Decode everything; returns {images, pages, strips, inflated_bytes}."""
    todo = jobs(gt_path, seg_root, pred_path)
    if workers <= 1:
        _setup(pred_path, codec, png_mode)
        try:
            results = list(map(decode_image, todo))
        finally:
            _STATE.pop("zip").close()
    else:
        context = multiprocessing.get_context("fork")
        with context.Pool(workers, initializer=_setup, initargs=(pred_path, codec, png_mode)) as pool:
            results = list(pool.imap(decode_image, todo, chunksize=max(1, len(todo) // (workers * 16))))
    pages, strips, inflated = (sum(column) for column in zip(*results)) if results else (0, 0, 0)
    return {"images": len(results), "pages": pages, "strips": strips, "inflated_bytes": inflated}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gt", required=True, help="psg.json")
    parser.add_argument("--gt-seg", required=True, help="panoptic PNG root")
    parser.add_argument("--pred", required=True, help="prediction ZIP")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--codec", choices=list(INFLATERS),
                        default="zlibng" if imagecodecs and imagecodecs.ZLIBNG.available else "zlib")
    parser.add_argument("--png", choices=["inflate", "pil"], default="inflate",
                        help="inflate the PNG image data only (default) or decode it fully with PIL")
    args = parser.parse_args()
    totals = run(args.gt, args.gt_seg, args.pred, args.workers, args.codec, args.png)
    print(f"decode floor ({args.codec}, PNG {args.png}, {args.workers} worker(s)): {totals['images']} images, "
          f"{totals['pages']} pages, {totals['strips']} strips, {totals['inflated_bytes'] / 2**20:.1f} MiB inflated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
