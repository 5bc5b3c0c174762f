"""The decode floor of a mask-mode evaluation: the least work any evaluator must do.

For every evaluated image (in ``test_image_ids`` with at least one relation), decode the GT
panoptic PNG with PIL into a numpy array, and decompress every strip of every page of the image's
prediction TIFF, read in memory from the ZIP. Nothing else: no ``triplets.json``, no unpacking of
bits, no masks compared. The TIFF structure is walked here (classic TIFF, either byte order) and
the strips are inflated with libdeflate (``imagecodecs.deflate_decode``), the fastest inflater at
hand; ``--codec zlib`` uses the standard library instead.

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


def inflate_libdeflate(strip, size):
    return imagecodecs.deflate_decode(strip, out=size)


def inflate_zlib(strip, size):
    return zlib.decompress(strip, bufsize=size)


_STATE = {}  # per process: the open ZIP and the inflater


def _setup(pred_path, codec):
    _STATE.update(zip=zipfile.ZipFile(pred_path), inflate=inflate_libdeflate if codec == "libdeflate" else inflate_zlib)


def decode_image(job):
    """Decode one image: (pages, strips, inflated bytes)."""
    png_path, member = job
    with Image.open(png_path) as png:
        np.asarray(png)
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


def run(gt_path, seg_root, pred_path, workers=1, codec="libdeflate"):
    """Decode everything; returns {images, pages, strips, inflated_bytes}."""
    todo = jobs(gt_path, seg_root, pred_path)
    if workers <= 1:
        _setup(pred_path, codec)
        try:
            results = list(map(decode_image, todo))
        finally:
            _STATE.pop("zip").close()
    else:
        context = multiprocessing.get_context("fork")
        with context.Pool(workers, initializer=_setup, initargs=(pred_path, codec)) as pool:
            results = list(pool.imap(decode_image, todo, chunksize=max(1, len(todo) // (workers * 16))))
    pages, strips, inflated = (sum(column) for column in zip(*results)) if results else (0, 0, 0)
    return {"images": len(results), "pages": pages, "strips": strips, "inflated_bytes": inflated}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gt", required=True, help="psg.json")
    parser.add_argument("--gt-seg", required=True, help="panoptic PNG root")
    parser.add_argument("--pred", required=True, help="prediction ZIP")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--codec", choices=["libdeflate", "zlib"], default="libdeflate" if imagecodecs else "zlib")
    args = parser.parse_args()
    totals = run(args.gt, args.gt_seg, args.pred, args.workers, args.codec)
    print(f"decode floor ({args.codec}, {args.workers} worker(s)): {totals['images']} images, "
          f"{totals['pages']} pages, {totals['strips']} strips, {totals['inflated_bytes'] / 2**20:.1f} MiB inflated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
