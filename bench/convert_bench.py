"""`make bench-convert`: converting a Pair-Net-like results pickle larger than this machine's memory.

    python -m bench.convert_bench                    # 1 GB and 30 GB pickles, --workers 1 and 2
    python -m bench.convert_bench --gb 2 --workers 2 # any size / worker counts
    python -m bench.convert_bench --gb 0.2 --keep    # keep the generated data in bench/data/convert-*/

Each pickle is generated once into bench/data/convert-<gb>gb/ (results.pkl and a psg.json of its
images) and reused while its stamp.json matches. It holds one Pair-Net-like Result per image, as
Pair-Net's tools/test.py pickles them (protocol 2, the Result class under Pair-Net's module path):
200 boolean masks of 640 x 480 (100 subjects, then 100 objects, many identical), labels,
rel_pair_idxes [[i, 100 + i]], rel_dists with a zero column 0, zero refine_bboxes: about 61 MB per
image. It is written image by image (the pickler's memo is cleared between images), never held
in memory. Then `python -m sgeval_convert.pairnet` converts it once per worker count; reported: wall time,
pickle MB/s, the disk's own read speed (`dd` of the pickle, in the same run), peak RSS of the
largest process and of the process tree, and whether the outputs are identical. Results go to
bench/results/convert.json. Run from the repository root.
"""

import argparse
import copyreg
import hashlib
import json
import math
import os
import pickle
import subprocess
import sys
import time
import types
from pathlib import Path

import numpy as np

from bench.run import ROOT, machine, measure

HEIGHT, WIDTH, PAIRS = 480, 640, 100
PAIRNET_MODULE = "pairnet.models.relation_heads.approaches.relation_util"
N_THINGS, N_STUFF, N_PREDICATES = 80, 53, 56
GENERATOR_VERSION = 1


def image_bytes(height=HEIGHT, width=WIDTH, pairs=PAIRS):
    """About how many bytes one image's result takes in the pickle (its masks)."""
    return 2 * pairs * height * width


def result_class():
    """A stand-in for Pair-Net's Result under its real module path, so pickle names it as Pair-Net does.
    An instance made by lazy_result() makes its fields only when the pickler reaches it."""
    if PAIRNET_MODULE not in sys.modules:
        for depth in range(1, PAIRNET_MODULE.count(".") + 2):
            name = ".".join(PAIRNET_MODULE.split(".")[:depth])
            sys.modules.setdefault(name, types.ModuleType(name))
        sys.modules[PAIRNET_MODULE].Result = type("Result", (), {"__module__": PAIRNET_MODULE,
                                                                 "__reduce_ex__": _reduce_lazily})
    return sys.modules[PAIRNET_MODULE].Result


def _reduce_lazily(result, protocol):
    """As pickle saves any object (NEWOBJ, then its state), the state made now; the pickler's memo is
    cleared first, so nothing of the previous image stays alive."""
    result.pickler.clear_memo()
    return copyreg.__newobj__, (type(result),), fields(result.index, *result.shape)


def lazy_result(pickler, index, shape):
    result = result_class().__new__(result_class())
    result.pickler, result.index, result.shape = pickler, index, shape
    return result


def fields(index, height=HEIGHT, width=WIDTH, pairs=PAIRS):
    """The raw fields of image `index` (deterministic)."""
    rng = np.random.default_rng(index)
    masks = np.zeros((2 * pairs, height, width), bool)
    for mask in masks[:pairs]:
        y0, x0 = rng.integers(0, height - 8), rng.integers(0, width - 8)
        mask[y0:y0 + rng.integers(8, height // 2), x0:x0 + rng.integers(8, width // 2)] = True
    distinct = masks[rng.integers(0, pairs, pairs // 4)]  # objects: a few distinct masks, repeated
    masks[pairs:] = distinct[rng.integers(0, len(distinct), pairs)]
    dists = rng.random((pairs, N_PREDICATES + 1)).astype(np.float32)
    dists[:, 0] = 0
    return {"labels": rng.integers(1, N_THINGS + N_STUFF + 1, 2 * pairs), "masks": masks,
            "rel_pair_idxes": np.column_stack([np.arange(pairs), pairs + np.arange(pairs)]),
            "rel_dists": dists / dists.sum(axis=1, keepdims=True),
            "refine_bboxes": np.zeros((2 * pairs, 5), np.float32)}


def write_pickle(path, n_images, height=HEIGHT, width=WIDTH, pairs=PAIRS):
    """A protocol-2 pickle of a list of n_images Results, streamed to path."""
    with open(path, "wb") as handle:
        pickler = pickle.Pickler(handle, protocol=2)
        pickler.dump([lazy_result(pickler, index, (height, width, pairs)) for index in range(n_images)])


def write_gt(path, n_images, height=HEIGHT, width=WIDTH):
    """A psg.json whose n_images test images (each with one relation) the results belong to."""
    data = [{"image_id": str(index), "height": height, "width": width, "pan_seg_file_name": f"{index}.png",
             "segments_info": [{"id": 1, "category_id": 0}, {"id": 2, "category_id": 1}],
             "annotations": [{"bbox": [0, 0, 10, 10]}, {"bbox": [5, 5, 20, 20]}], "relations": [[0, 1, 0]]}
            for index in range(n_images)]
    psg = {"thing_classes": [f"thing{i}" for i in range(N_THINGS)],
           "stuff_classes": [f"stuff{i}" for i in range(N_STUFF)],
           "predicate_classes": [f"predicate{i}" for i in range(N_PREDICATES)], "data": data,
           "test_image_ids": [str(index) for index in range(n_images)]}
    Path(path).write_text(json.dumps(psg))


def prepare(gigabytes, folder=None, height=HEIGHT, width=WIDTH, pairs=PAIRS):
    """bench/data/convert-<gb>gb/ with results.pkl and psg.json (generated unless up to date)."""
    n_images = max(1, math.ceil(gigabytes * 1e9 / image_bytes(height, width, pairs)))
    folder = Path(folder or ROOT / "bench" / "data" / f"convert-{gigabytes:g}gb")
    stamp = {"version": GENERATOR_VERSION, "images": n_images, "shape": [height, width, pairs]}
    if (folder / "stamp.json").exists() and json.loads((folder / "stamp.json").read_text()) == stamp:
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    start = time.time()
    write_gt(folder / "psg.json", n_images, height, width)
    write_pickle(folder / "results.pkl", n_images, height, width, pairs)
    (folder / "stamp.json").write_text(json.dumps(stamp))
    size = (folder / "results.pkl").stat().st_size
    print(f"generated {folder}/results.pkl: {n_images} images, {size / 1e9:.2f} GB in {time.time() - start:.0f} s",
          flush=True)
    return folder


def disk_read_mb_s(path):
    """The disk's read speed on this file (dd to /dev/null; the page cache holds part of it at most)."""
    start = time.perf_counter()
    subprocess.run(["dd", f"if={path}", "of=/dev/null", "bs=16M"], check=True, capture_output=True)
    return Path(path).stat().st_size / (time.perf_counter() - start) / 1e6


def sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 24):
            digest.update(chunk)
    return digest.hexdigest()


def run(folder, workers):
    """Convert folder/results.pkl once with the given number of workers: the measurement."""
    pickle_path, out = folder / "results.pkl", folder / f"out-{workers}.zip"
    command = [sys.executable, "-m", "sgeval_convert.pairnet", "--gt", folder / "psg.json", pickle_path, out,
               "--workers", str(workers), "--quiet"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    dd = disk_read_mb_s(pickle_path)
    sample = measure(command, env)
    if sample["returncode"] != 0:
        raise SystemExit(f"conversion failed: {sample['stderr'][-2000:]}")
    size = pickle_path.stat().st_size
    return {"workers": workers, "pickle_gb": size / 1e9, "wall_s": sample["wall_s"], "cpu_s": sample["cpu_s"],
            "mb_s": size / sample["wall_s"] / 1e6, "dd_mb_s": dd, "max_rss_mib": sample["max_rss_mib"],
            "main_rss_mib": sample["main_rss_mib"], "tree_pss_mib": sample["tree_pss_mib"],
            "output_mb": out.stat().st_size / 1e6, "output_sha256": sha256(out)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gb", default="1,30", help="pickle sizes in GB, comma-separated (default 1,30)")
    parser.add_argument("--workers", default="1,2", help="worker counts, comma-separated (default 1,2)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the generated pickles (default: delete each after its runs)")
    parser.add_argument("--shape", default=f"{HEIGHT},{WIDTH},{PAIRS}",
                        help="height,width,pairs (tests use small ones)")
    parser.add_argument("--data", help="folder for the generated data (default bench/data/convert-<gb>gb)")
    args = parser.parse_args(argv)
    height, width, pairs = map(int, args.shape.split(","))
    report = {"machine": machine(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "runs": []}
    print(f"{'pickle GB':>9} {'W':>2} {'wall s':>7} {'MB/s':>6} {'dd MB/s':>8} {'maxRSS MiB':>10} "
          f"{'main MiB':>8} {'tree PSS':>8}  output sha256", flush=True)
    for gigabytes in map(float, args.gb.split(",")):
        folder = prepare(gigabytes, args.data, height, width, pairs)
        rows = [run(folder, int(workers)) for workers in args.workers.split(",")]
        for row in rows:
            print(f"{row['pickle_gb']:9.2f} {row['workers']:2d} {row['wall_s']:7.1f} {row['mb_s']:6.0f} "
                  f"{row['dd_mb_s']:8.0f} {row['max_rss_mib']:10.0f} {row['main_rss_mib']:8.0f} "
                  f"{row['tree_pss_mib']:8.0f}  {row['output_sha256'][:16]}", flush=True)
        same = len({row["output_sha256"] for row in rows}) == 1
        print(f"outputs identical for every worker count: {same}", flush=True)
        report["runs"] += [{**row, "identical": same} for row in rows]
        if not args.keep:
            for name in ("results.pkl", "stamp.json", *(f"out-{row['workers']}.zip" for row in rows)):
                (folder / name).unlink(missing_ok=True)
    results = ROOT / "bench" / "results" / "convert.json"
    results.parent.mkdir(parents=True, exist_ok=True)
    results.write_text(json.dumps(report, indent=1) + "\n")
    return 0 if all(run["identical"] for run in report["runs"]) else 1


if __name__ == "__main__":
    sys.exit(main())
