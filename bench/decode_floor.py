"""The library floor of a mask-mode evaluation: what decoding the inputs costs with the libraries.

For every evaluated image (in ``test_image_ids`` with at least one relation), decode its GT
panoptic PNG fully with ``imagecodecs.png_decode`` and inflate every strip of every page of the
image's prediction TIFF, read in memory from the ZIP. The TIFF structure is read by tifffile
(``TiffFile`` with ``pages.useframes`` and the first page as keyframe, then each frame's
``dataoffsets`` / ``databytecounts``); every strip is inflated by one library call, by default
zlib-ng (``imagecodecs.zlibng_decode``), the fastest inflater at hand (``--compare-inflaters``
measures them; ``--codec`` picks another). Nothing else: no ``triplets.json``, no bits unpacked,
no masks compared. No byte of either format is parsed here.

    python -m bench.decode_floor --gt psg.json --gt-seg panoptic --pred sgbench.zip --workers 2
    python -m bench.decode_floor --gt psg.json --gt-seg panoptic --pred compact.zip --compare-inflaters

``--workers 1`` works in-process; W > 1 uses a Pool of W processes that each open the ZIP.
Prints one summary line (images, pages, strips, inflated bytes), or with ``--compare-inflaters``
one JSON line of milliseconds per image of every inflater on the first ``--images`` images.
"""

from __future__ import annotations

import argparse
import io
import json
import multiprocessing
import os
import sys
import time
import zipfile
import zlib

import imagecodecs
import tifffile

INFLATERS = {
    "zlibng": lambda stream, size: imagecodecs.zlibng_decode(stream, out=size),
    "libdeflate": lambda stream, size: imagecodecs.deflate_decode(stream, out=size),
    "zlib": lambda stream, size: zlib.decompress(stream, bufsize=size),
}
AVAILABLE = {"zlibng": imagecodecs.ZLIBNG.available, "libdeflate": imagecodecs.DEFLATE.available, "zlib": True}
DEFAULT_CODEC = next(codec for codec, available in AVAILABLE.items() if available)


def tiff_strips(data):
    """Yield (mask index, strip bytes, inflated size) for every strip of every mask of a TIFF
    whose pages share the first page's shape and compression, as read by tifffile: one mask per
    page, or per sample of pages whose samples are stored apart (planar, as sgeval writes)."""
    with tifffile.TiffFile(io.BytesIO(data)) as tiff:
        tiff.pages.useframes = True
        tiff.pages.set_keyframe(0)
        key = tiff.pages.keyframe
        if key.compression not in (tifffile.COMPRESSION.ADOBE_DEFLATE, tifffile.COMPRESSION.DEFLATE):
            raise ValueError(f"TIFF page compression {key.compression!r} is not deflate")
        planes = key.samplesperpixel if key.planarconfig == tifffile.PLANARCONFIG.SEPARATE else 1
        row_bytes = -(-key.imagewidth * key.bitspersample * (key.samplesperpixel // planes) // 8)
        rows_per_strip, length = key.rowsperstrip, key.imagelength
        strips_per_plane = -(-length // rows_per_strip)
        for page, frame in enumerate(tiff.pages):
            for index, (offset, size) in enumerate(zip(frame.dataoffsets, frame.databytecounts)):
                rows = min(rows_per_strip, length - index % strips_per_plane * rows_per_strip)
                yield page * planes + index // strips_per_plane, data[offset:offset + size], rows * row_bytes


_STATE = {}  # per process: the open ZIP and the inflater


def _setup(pred_path, codec):
    _STATE.update(zip=zipfile.ZipFile(pred_path), inflate=INFLATERS[codec])


def decode_image(job):
    """Decode one image: (masks, strips, inflated bytes)."""
    png_path, member = job
    with open(png_path, "rb") as handle:
        imagecodecs.png_decode(handle.read())
    inflate = _STATE["inflate"]
    masks = strips = inflated = 0
    for page, strip, size in tiff_strips(_STATE["zip"].read(member)):
        inflated += len(inflate(strip, size))
        masks, strips = page + 1, strips + 1
    return masks, strips, inflated


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


def run(gt_path, seg_root, pred_path, workers=1, codec=DEFAULT_CODEC):
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


def compare_inflaters(pred_path, n_images=100, repeats=3, codecs=("zlibng", "libdeflate")):
    """Milliseconds per image to inflate all strips of the first n_images TIFFs of a prediction
    ZIP (strips cut out beforehand), for each inflater: the best of `repeats` passes. Every
    inflater must give the same bytes."""
    with zipfile.ZipFile(pred_path) as archive:
        names = [name for name in archive.namelist() if name.endswith(".tiff")][:n_images]
        streams = [[(strip, size) for _, strip, size in tiff_strips(archive.read(name))] for name in names]
    timings, reference = {}, None
    for codec in [codec for codec in codecs if AVAILABLE[codec]] or ["zlib"]:
        inflate, best = INFLATERS[codec], float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            for image in streams:
                for strip, size in image:
                    inflate(strip, size)
            best = min(best, time.perf_counter() - start)
        check = [bytes(inflate(strip, size)) for strip, size in streams[0]] if streams else []
        if reference is not None and check != reference:
            raise AssertionError(f"{codec} inflates differently")
        reference = check
        timings[codec] = 1000 * best / max(1, len(streams))
    return {"images": len(streams), "ms_per_image": timings, "fastest": min(timings, key=timings.get)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gt", help="psg.json")
    parser.add_argument("--gt-seg", help="panoptic PNG root")
    parser.add_argument("--pred", required=True, help="prediction ZIP")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--codec", choices=list(INFLATERS), default=DEFAULT_CODEC,
                        help=f"the strip inflater (default {DEFAULT_CODEC})")
    parser.add_argument("--compare-inflaters", action="store_true",
                        help="time zlib-ng and libdeflate on the prediction's strips instead (JSON line)")
    parser.add_argument("--images", type=int, default=100, help="images for --compare-inflaters (default 100)")
    args = parser.parse_args()
    if args.compare_inflaters:
        print(json.dumps(compare_inflaters(args.pred, args.images)))
        return 0
    if not args.gt or not args.gt_seg:
        parser.error("--gt and --gt-seg are required")
    totals = run(args.gt, args.gt_seg, args.pred, args.workers, args.codec)
    print(f"library floor ({args.codec}, imagecodecs.png_decode, {args.workers} worker(s)): {totals['images']} images, "
          f"{totals['pages']} pages, {totals['strips']} strips, {totals['inflated_bytes'] / 2**20:.1f} MiB inflated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
