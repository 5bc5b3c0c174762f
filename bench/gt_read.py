"""What reading a prepared GT image costs, against decoding it (issue 30, item 1).

    python -m bench.gt_read --data bench/data/blob-2177 --gt-cache DIR [--passes 3]

For every evaluated image of a workload (``sgeval.read_gt``'s order), in this process, the time of
``sgeval.prepared_gt_masks(image, cache)`` with ``cache`` a ``GTCache`` of the folder DIR and no
memory, so every call reads the folder: read the PNG's bytes, key them, read the image's entry,
check its signature and inflate its LZ4 (the prepared path); and of ``prepared_gt_masks(image)``
without a cache: decode the PNG, pack the segments, ``mask_boxes`` (the path of a run without
prepared GT). A first pass of each, untimed, loads the kernels, prepares the images the folder
lacks and brings the files into the page cache; then ``--passes`` timed passes, the two paths
alternating image by image. Prints one JSON line: per path the median and mean milliseconds per
image over all timed calls, the images and their mean number of segments.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path


def time_reads(data, gt_cache, passes=3):
    import sgeval

    gt = sgeval.read_gt(str(data / "psg.json"), str(data / "panoptic"))
    cache = sgeval.GTCache(str(gt_cache), 0)
    for image in gt.images:
        sgeval.prepared_gt_masks(image, cache)
        sgeval.prepared_gt_masks(image)
    cache.flush()  # the images the folder lacked, into it
    times = {"prepared": [], "decoded": []}
    for _ in range(passes):
        for image in gt.images:
            for path in ("prepared", "decoded"):
                start = time.perf_counter()
                sgeval.prepared_gt_masks(image, cache if path == "prepared" else None)
                times[path].append(time.perf_counter() - start)
    return {"images": len(gt.images), "passes": passes,
            "segments_mean": statistics.fmean(len(image.segment_ids) for image in gt.images),
            **{path: {"median_ms": 1000 * statistics.median(values), "mean_ms": 1000 * statistics.fmean(values)}
               for path, values in times.items()}}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="a workload of bench/make_workload.py")
    parser.add_argument("--gt-cache", type=Path, required=True, help="the folder of the prepared GT")
    parser.add_argument("--passes", type=int, default=3, help="timed passes over the images (default 3)")
    args = parser.parse_args(argv)
    print(json.dumps(time_reads(args.data, args.gt_cache, max(1, args.passes))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
