"""``make bench``'s test-loop part: what ``sgeval.Evaluator.update`` costs per image beside a model,
and how large its state is.

    python -m bench.loop --data bench/data/overlap-200 [--runs 3] [--config-protocols psg,default]
                         [--model-images 100] [--memory-images 200] [--vg-images 2000]
    python -m bench.loop --data bench/data/overlap-200 --config-protocols psg --profile   # cProfile of update

For every run and config, as child processes of this one (``bench.run.measure``), in an order
that alternates from run to run:

* updates: ``python -m bench.loop --child updates``: an Evaluator of the config; for every image
  of the workload's ``compact.zip`` (file order), its masks are decoded to (P, H, W) bool arrays
  outside the timed region (``sgeval.prediction_records``, ``sgeval.load_pred_masks``,
  ``np.unpackbits``), then ``ev.update(image_id, labels=, triplets=, ng_triplets=, masks=,
  scores=)`` is timed until it returns (it checks and packs the masks, then hands the image to
  the Evaluator's thread) and until the image's evaluation there has ended too (``ev._drain()``,
  the wait every public method of the Evaluator starts with): the image's whole cost, nothing
  else running beside it. Then the state is measured (the pickle of ``state_dict()`` and the
  objects of ``ev.images`` / ``ev.extra``), ``compute()`` runs (its metrics must be the file
  path's), and a simulated model loop follows: for each of the first ``--model-images`` images a
  model step (``time.sleep``, standing for GPU inference that leaves the CPU idle) alone and a
  step followed by the update, in alternating order, timed from before the step to after it.
* file path: ``sgeval.py --pred compact.zip --workers 1`` with the same config (wall / evaluated
  images: start-up, reading the GT and computing the results included).
* library floor: ``python -m bench.decode_floor --pred compact.zip --workers 1`` (once per run).

The updates and the file path read the GT from one GT cache folder (``gt_cache``), new for the
invocation and prepared by an untimed run of the file path per config before the timed runs: the
GT is prepared, as for an Evaluator from its second validation epoch on. Target (issue 30): the
mean per image of update and its evaluation <= the file path's per image minus the floor's.

Once: ``tracemalloc`` around the updates of the first ``--memory-images`` images (run 1), and a
box-mode run of ``--vg-images`` images on a generated VG150-like GT (``--child vg``) whose state
per image is extrapolated to VG150's 26,446 test images. Results go to
``bench/results/loop-<n>.json`` (the overlap workload; other workloads
``loop-<workload>-<n>.json``). Only the standard library is imported here; the children import
numpy and sgeval (from the repository root, their working directory).
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench import run as bench_run

ROOT = bench_run.ROOT
SGEVAL = ROOT / "sgeval.py"
CONFIGS = {  # name -> (YAML file or None, label)
    "psg": (ROOT / "configs" / "psg.yaml", "configs/psg.yaml: singlempo + unique, multimpo, openpsg"),
    "default": (None, "default config: unique"),
}
MODEL_STEP_S = 0.1  # the simulated model's inference per image
LOSS_TARGET = 0.05  # a 100 ms/image model loses less than 5 % to in-loop evaluation
UPDATE_TARGET = 1.0  # issue 30: update's per-image cost <= the file path's minus the floor's, at W=1
STATE_TARGET_BYTES = 2048  # per evaluated image at PSG scale
VG_TEST_IMAGES, VG_TARGET_MIB = 26_446, 100.0
COMPARED = ("images", "metrics", "per_predicate", "by_protocol", "protocol_audit", "predicate_confusion")


# ----------------------------------------------------------------------------- children (import sgeval)


def load_config(name, data, **values):
    """The sgeval Config of a named config on a workload (one worker, no files written)."""
    import sgeval

    path, _ = CONFIGS[name]
    return sgeval.load_config(path, gt=str(data / "psg.json"), gt_seg=str(data / "panoptic"), workers=1,
                              output="", per_image="", **values)


def deep_size(value, seen=None):
    """Bytes of an object and of everything it holds (dicts, tuples, lists, bytes, numpy arrays
    with their data; a view counts its base), each object once."""
    import numpy as np

    seen = set() if seen is None else seen
    if id(value) in seen:
        return 0
    seen.add(id(value))
    size = sys.getsizeof(value)
    if isinstance(value, dict):
        size += sum(deep_size(key, seen) + deep_size(item, seen) for key, item in value.items())
    elif isinstance(value, (tuple, list)):
        size += sum(deep_size(item, seen) for item in value)
    elif isinstance(value, np.ndarray) and value.base is not None:
        size += deep_size(value.base, seen)
    return size


def state_size(evaluator, empty_pickle_bytes=0):
    """The state's size: its pickled state_dict and its objects in memory, in total and per
    evaluated (updated) image."""
    images = len(evaluator.images)
    pickled = len(pickle.dumps(evaluator.state_dict(), protocol=pickle.HIGHEST_PROTOCOL))
    memory = deep_size((evaluator.images, evaluator.extra))
    return {"images": images, "extra": len(evaluator.extra), "pickle_bytes": pickled,
            "pickle_bytes_empty": empty_pickle_bytes, "memory_bytes": memory,
            "pickle_per_image": (pickled - empty_pickle_bytes) / max(1, images),
            "memory_per_image": memory / max(1, images)}


def workload_images(data, config):
    """The Evaluator, its prediction records (PredSource, iterator) and every image's size."""
    import sgeval

    evaluator = sgeval.Evaluator(config)
    problems = []
    source, records = sgeval.prediction_records(str(data / "compact.zip"), len(evaluator.gt.object_classes),
                                                evaluator.settings.n_predicates, evaluator.settings.mode, problems)
    with open(data / "psg.json", "rb") as handle:
        sizes = {str(entry["image_id"]): (entry["height"], entry["width"]) for entry in json.load(handle)["data"]}
    return evaluator, source, records, sizes, problems


def decoded(source, pred, sizes):
    """A record's masks as the (P, H, W) bool array a model hands to update (sgeval's reader,
    then np.unpackbits)."""
    import numpy as np

    import sgeval

    height, width = sizes[pred.image_id]
    if not len(pred.categories):
        return np.zeros((0, height, width), bool)
    bits = sgeval.load_pred_masks(source, pred, height, width)
    return np.unpackbits(bits.view(np.uint8), axis=1, count=height * width).reshape(len(bits), height,
                                                                                  width).view(bool)


def arguments(pred, masks):
    return {"labels": pred.categories, "triplets": pred.triplets, "ng_triplets": pred.ng_triplets, "masks": masks,
            "scores": pred.scores}


def _ms(values):
    values = list(values)
    return {"median": 1000 * statistics.median(values), "mean": 1000 * statistics.fmean(values),
            "max": 1000 * max(values), "total_s": sum(values)} if values else None


def time_updates(data, name, model_images=100, model_step_s=MODEL_STEP_S, memory_images=0, swap=False,
                 gt_cache=None):
    """The updates child (see the module docstring): per-image wall and CPU times of update, the
    state's size, compute()'s results, the simulated model loop; with memory_images, the traced
    memory growth of the state per image over the updates of that many images. gt_cache: the
    Evaluator's GT cache folder (None: the config's default)."""
    import gc
    import tracemalloc

    import sgeval

    config = load_config(name, data, **({"gt_cache": str(gt_cache)} if gt_cache else {}))
    start = time.perf_counter()
    evaluator, source, records, sizes, problems = workload_images(data, config)
    init_s = time.perf_counter() - start
    records = list(records)  # the records' arrays (not their masks): a few MiB
    if problems:
        raise sgeval.SGEvalError(problems)
    evaluated = [pred for pred in records if pred.image_id in evaluator.slot_of]
    first = evaluated[0]
    start = time.perf_counter()  # the first update loads (or compiles) the kernels
    evaluator.update(first.image_id, **arguments(first, decoded(source, first, sizes)))
    warm_up_s = time.perf_counter() - start
    evaluator.reset()
    empty_pickle = len(pickle.dumps(evaluator.state_dict(), protocol=pickle.HIGHEST_PROTOCOL))

    times, decode_s = {key: [] for key in ("update", "update_cpu", "evaluated", "evaluated_cpu")}, []
    for pred in records:
        start = time.perf_counter()
        masks = decoded(source, pred, sizes)
        decode_s.append(time.perf_counter() - start)
        wall, cpu = time.perf_counter(), time.process_time()
        evaluator.update(pred.image_id, **arguments(pred, masks))
        returned_wall, returned_cpu = time.perf_counter(), time.process_time()
        evaluator._drain()  # wait for the image's evaluation in the Evaluator's thread (every public method does)
        done_wall, done_cpu = time.perf_counter(), time.process_time()
        if pred.image_id in evaluator.slot_of:  # test images without relations are updated, not timed
            for key, value in (("update", returned_wall - wall), ("update_cpu", returned_cpu - cpu),
                               ("evaluated", done_wall - wall), ("evaluated_cpu", done_cpu - cpu)):
                times[key].append(value)
        del masks
    state = state_size(evaluator, empty_pickle)
    results = evaluator.compute()
    packed = time_packed_updates(evaluator, source, records, sizes)
    found = {"config": name, "images": len(times["update"]), "records": len(records), "evaluator_init_s": init_s,
             "warm_up_update_s": warm_up_s, **{f"{key}_ms": _ms(values) for key, values in times.items()},
             "decode_ms": _ms(decode_s), "state": state, **packed,
             "results": {key: results.get(key) for key in COMPARED}}

    evaluator.reset()
    plain, stepped, after_step = 0.0, 0.0, []
    for index, pred in enumerate(evaluated[:model_images]):
        masks = decoded(source, pred, sizes)
        for with_update in ((True, False) if (index % 2 == 0) != swap else (False, True)):
            start = time.perf_counter()
            time.sleep(model_step_s)
            if with_update:
                update = time.perf_counter()
                evaluator.update(pred.image_id, **arguments(pred, masks))
                after_step.append(time.perf_counter() - update)
                stepped += time.perf_counter() - start
            else:
                plain += time.perf_counter() - start
        del masks
    found["model"] = {"images": len(after_step), "step_s": model_step_s, "wall_without_s": plain,
                      "wall_with_s": stepped, "loss": stepped / plain - 1 if plain else None,
                      "update_ms": _ms(after_step)}

    if memory_images:
        evaluator.reset()
        todo, marks = evaluated[:memory_images], {}
        half = len(todo) // 2
        gc.collect()
        tracemalloc.start()
        marks[0] = tracemalloc.get_traced_memory()[0]
        try:
            for index, pred in enumerate(todo, 1):
                masks = decoded(source, pred, sizes)
                evaluator.update(pred.image_id, **arguments(pred, masks))
                del masks
                if index in (half, len(todo)):
                    evaluator._drain()  # no evaluation pending (it holds the image's packed masks)
                    gc.collect()
                    marks[index] = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
        found["traced"] = {"images": len(todo), "from_image": half, "bytes": marks[len(todo)] - marks[half],
                           "per_image": (marks[len(todo)] - marks[half]) / max(1, len(todo) - half)}
    source.close()
    return found


def time_packed_updates(evaluator, source, records, sizes):
    """update's CPU time in the caller's thread (time.thread_time) and wall time until it returns,
    per evaluated image, the masks given as sgeval.PackedMasks (what a model packs on its device);
    each image's evaluation is waited for after the timer."""
    import sgeval

    evaluator.reset()
    cpu, wall = [], []
    for pred in records:
        if pred.image_id not in evaluator.slot_of or not len(pred.categories):
            continue
        height, width = sizes[pred.image_id]
        bits = sgeval.load_pred_masks(source, pred, height, width).view("uint8")[:, :(height * width + 7) // 8]
        arguments = {"labels": pred.categories, "triplets": pred.triplets, "ng_triplets": pred.ng_triplets,
                     "masks": sgeval.PackedMasks(bits.copy()), "scores": pred.scores}
        start_wall, start_cpu = time.perf_counter(), time.thread_time()
        evaluator.update(pred.image_id, **arguments)
        cpu.append(time.thread_time() - start_cpu)
        wall.append(time.perf_counter() - start_wall)
        evaluator._drain()
    evaluator.reset()
    return {"packed_update_cpu_ms": _ms(cpu), "packed_update_ms": _ms(wall)}


PROFILED_STAGES = (  # sgeval functions update calls, in call order
    "update_prediction", "pack_masks", "prediction_digest", "evaluate_image", "task_instances", "compare_masks",
    "load_gt_masks", "mask_boxes", "mask_iou", "merge_prediction", "image_counts", "legacy_counts",
    "audit_counts", "pack_record")


def profile_updates(data, name, top=15, out=sys.stdout):
    """Where update's time goes, every record of the workload, the masks decoded outside: first
    the CPU time of PROFILED_STAGES (each wrapped in a process_time timer, a few calls per image),
    then a cProfile (CPU time) of the updates alone: the top functions by own and cumulative time."""
    import collections
    import cProfile
    import pstats

    import sgeval

    evaluator, source, records, sizes, problems = workload_images(data, load_config(name, data))
    records = list(records)
    evaluated = [pred for pred in records if pred.image_id in evaluator.slot_of]
    evaluator.update(evaluated[0].image_id, **arguments(evaluated[0], decoded(source, evaluated[0], sizes)))
    spent, originals = collections.Counter(), {stage: getattr(sgeval, stage) for stage in PROFILED_STAGES}

    def timed(stage, function):
        def call(*args, **kwargs):
            start = time.process_time()
            try:
                return function(*args, **kwargs)
            finally:
                spent[stage] += time.process_time() - start
        return call

    for stage, function in originals.items():
        setattr(sgeval, stage, timed(stage, function))
    try:
        evaluator.reset()
        for pred in evaluated:
            masks = decoded(source, pred, sizes)
            start = time.process_time()
            evaluator.update(pred.image_id, **arguments(pred, masks))
            spent["update"] += time.process_time() - start
            del masks
    finally:
        for stage, function in originals.items():
            setattr(sgeval, stage, function)
    print(f"CPU ms per update ({name} config, {len(evaluated)} evaluated images); a stage's time includes the "
          "stages it calls (update_prediction: pack_masks; evaluate_image: the stages after it; compare_masks: "
          "load_gt_masks, two of the mask_boxes and one of the mask_iou calls):", file=out)
    for stage in ("update", *PROFILED_STAGES):
        print(f"  {stage:<20}{1000 * spent[stage] / len(evaluated):8.2f}", file=out)

    evaluator.reset()
    profiler = cProfile.Profile(time.process_time)
    for pred in records:
        masks = decoded(source, pred, sizes)
        profiler.enable()
        evaluator.update(pred.image_id, **arguments(pred, masks))
        profiler.disable()
        del masks
    source.close()
    stats = pstats.Stats(profiler, stream=out)
    print(f"\ncProfile of {len(records)} updates ({name} config), CPU seconds:", file=out)
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)


# VG150 (Scene-Graph-Benchmark's split) as convert.vg150 writes it: 150 object classes, 50
# predicates; per image about 11 objects and 5.7 relation rows (the test split's 297,922 objects
# and 153,509 relations over 27,032 images, before empty images are dropped).
VG_OBJECTS, VG_BOXES_EXTRA, VG_RELATIONS_MEAN = 150, 9.0, 5.7


def vg_like_gt(path, n_images, n_train=5000, seed=0):
    """Write a box-mode GT in the layout convert.vg150 writes: n_images test images with
    relations (2 + Poisson(9) boxes; a geometric number of relation rows, mean 5.7, at most 60;
    long-tailed categories and predicates) and n_train training entries."""
    import numpy as np

    from tools.make_vg_demo import VG150_PREDICATES

    rng = np.random.default_rng(seed)
    object_weights = 1 / np.arange(1, VG_OBJECTS + 1) ** 0.9
    predicate_weights = 1 / np.arange(1, len(VG150_PREDICATES) + 1) ** 1.6
    entries = []
    for index in range(n_images + n_train):
        width, height = (int(v) for v in rng.integers(300, 1025, 2))
        n_boxes = 2 + int(rng.poisson(VG_BOXES_EXTRA))
        x1, y1 = rng.uniform(0, width - 20, n_boxes), rng.uniform(0, height - 20, n_boxes)
        x2, y2 = x1 + rng.uniform(10, width - x1), y1 + rng.uniform(10, height - y1)
        categories = rng.choice(VG_OBJECTS, n_boxes, p=object_weights / object_weights.sum())
        n_relations = min(int(rng.geometric(1 / VG_RELATIONS_MEAN)), 60)
        subjects = rng.integers(0, n_boxes, n_relations)
        objects = (subjects + rng.integers(1, n_boxes, n_relations)) % n_boxes
        predicates = rng.choice(len(VG150_PREDICATES), n_relations, p=predicate_weights / predicate_weights.sum())
        entries.append({"image_id": index + 1, "height": height, "width": width,
                        "segments_info": [{"id": i + 1, "category_id": int(c)} for i, c in enumerate(categories)],
                        "annotations": [{"bbox": [round(float(v), 1) for v in box]} for box in zip(x1, y1, x2, y2)],
                        "relations": [[int(s), int(o), int(p)] for s, o, p in zip(subjects, objects, predicates)]})
    gt = {"data": entries, "thing_classes": [f"object{c:03d}" for c in range(1, VG_OBJECTS + 1)],
          "stuff_classes": [], "predicate_classes": list(VG150_PREDICATES),
          "test_image_ids": list(range(1, n_images + 1))}
    Path(path).write_text(json.dumps(gt))


def vg_prediction(rng, image, n_instances, n_rows, n_predicates):
    """A detector-like box prediction for a GT image: the GT boxes jittered (80 % with the right
    label) then random boxes, n_instances in all; rows over ordered pairs with random predicates,
    the GT relations' pairs among the first rows; ng_triplets the same rows re-ranked."""
    import numpy as np

    G = len(image.categories)
    keep = min(G, n_instances)
    boxes = np.empty((n_instances, 4))
    boxes[:keep] = image.boxes[:keep] + rng.normal(0, 3, (keep, 4))
    boxes[keep:, :2] = rng.uniform(0, [image.width - 20, image.height - 20], (n_instances - keep, 2))
    boxes[keep:, 2:] = boxes[keep:, :2] + rng.uniform(5, 200, (n_instances - keep, 2))
    boxes[:, 2:] = np.maximum(boxes[:, 2:], boxes[:, :2])
    labels = rng.integers(0, VG_OBJECTS, n_instances)
    labels[:keep] = np.where(rng.random(keep) < 0.8, image.categories[:keep], labels[:keep])
    subjects, objects = np.divmod(np.arange(n_instances * n_instances), n_instances)
    pairs = np.column_stack([subjects, objects])[subjects != objects]
    pairs = pairs[rng.permutation(len(pairs))[:n_rows]]
    rows = np.column_stack([pairs, rng.integers(0, n_predicates, len(pairs))])
    known = image.relations[(image.relations[:, 0] < n_instances) & (image.relations[:, 1] < n_instances)]
    known = known[:len(rows)]
    rows[rng.integers(0, max(1, min(len(rows), 50)), len(known))] = known
    return {"labels": labels, "boxes": boxes, "scores": rng.random(n_instances), "triplets": rows,
            "ng_triplets": rows[rng.permutation(len(rows))]}


VG_PREDICTIONS = {"20 boxes, 100 rows": (20, 100), "80 boxes, 6,320 rows": (80, 6320)}


def vg_state(n_images, seed=0, predictions=VG_PREDICTIONS, n_train=5000):
    """The vg child: a generated VG150-like GT, configs/vg150.yaml's protocols (sgb + unique,
    singlempo), task sgdet, box mode; per prediction shape, updates of every test image and the
    state's size, extrapolated to VG150's 26,446 test images. Also the memory the Evaluator holds
    for the GT (tracemalloc around its construction)."""
    import gc
    import tracemalloc

    import numpy as np

    import sgeval

    found = {"images": n_images, "train_images": n_train, "vg_test_images": VG_TEST_IMAGES, "predictions": {}}
    with tempfile.TemporaryDirectory(prefix="sgeval-loop-vg-") as scratch:  # the state's fingerprint reads the GT
        gt_path = Path(scratch) / "vg150_test.json"
        vg_like_gt(gt_path, n_images, n_train, seed)
        config = sgeval.load_config(ROOT / "configs" / "vg150.yaml", gt=str(gt_path), zeroshot_triplets="",
                                    workers=1, output="", per_image="")
        gc.collect()
        tracemalloc.start()
        evaluator = sgeval.Evaluator(config)
        gc.collect()
        found["gt_traced_bytes"] = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        images = evaluator.gt.images
        found["gt_per_image"] = {
            "objects": statistics.fmean(len(i.categories) for i in images),
            "relations": statistics.fmean(len(i.relations) for i in images),
            "distinct_predicates": statistics.fmean(len(np.unique(i.relations[:, 2])) for i in images)}
        empty = len(pickle.dumps(evaluator.state_dict(), protocol=pickle.HIGHEST_PROTOCOL))
        for label, (n_instances, n_rows) in predictions.items():
            evaluator.reset()
            rng, walls = np.random.default_rng(seed + 1), []
            for image in images:
                arrays = vg_prediction(rng, image, n_instances, n_rows, len(evaluator.gt.predicate_classes))
                start = time.perf_counter()
                evaluator.update(image.image_id, **arrays)
                walls.append(time.perf_counter() - start)
            state = state_size(evaluator, empty)
            state["update_ms"] = _ms(walls[1:])  # the first loads the kernels
            state["pickle_vg_mib"] = (empty + state["pickle_per_image"] * VG_TEST_IMAGES) / 2**20
            state["memory_vg_mib"] = state["memory_per_image"] * VG_TEST_IMAGES / 2**20
            found["predictions"][label] = state
    return found


# ----------------------------------------------------------------------------- the orchestrating process


def child_command(kind, data, name=None, **options):
    command = [sys.executable, "-m", "bench.loop", "--child", kind, "--data", data]
    command += ["--config-protocols", name] if name else []
    for key, value in options.items():
        flag = f"--{key.replace('_', '-')}"
        command += ([flag] if value else []) if isinstance(value, bool) else [flag, value]
    return command


def file_command(data, name, output, pred=None, gt_cache=None):
    """sgeval.py with one worker and the config (as the updates child builds it) on compact.zip
    (or pred), with the GT cache folder gt_cache (None: the default one)."""
    path, _ = CONFIGS[name]
    return [sys.executable, SGEVAL, *(["--config", path] if path else []), "--gt", data / "psg.json",
            "--gt-seg", data / "panoptic", "--pred", pred or data / "compact.zip", "--workers", 1, "--quiet",
            *(["--gt-cache", gt_cache] if gt_cache else []), "--output", output]


def floor_command(data, codec=None, pred=None):
    return [sys.executable, "-m", "bench.decode_floor", "--gt", data / "psg.json", "--gt-seg", data / "panoptic",
            "--pred", pred or data / "compact.zip", "--workers", 1, *(["--codec", codec] if codec else [])]


def write_empty_prediction(path):
    """A prediction without records: the file path and the floor on it cost what they cost
    whatever the number of images (start-up, reading the GT; the file path also evaluates every
    image as predicting nothing and computes the results)."""
    import zipfile

    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("triplets.json", json.dumps({"version": 1, "images": []}))
    return path


def run_order(run, names):
    """One run's steps: per config its updates and its file path (then the file path on the empty
    prediction), the pair swapped every other run; the floor (then on the empty prediction) after
    the first config."""
    steps = []
    for name in names:
        pair = [("updates", name), ("file", name)]
        steps += (pair if run % 2 else pair[::-1]) + [("file-empty", name)]
    steps[3:3] = [("floor", None), ("floor-empty", None)]
    return steps


def _failed(sample):
    return f"exit {sample['returncode']}: {sample['stderr'].strip()[-1500:]}"


def measure_all(data, names, runs, model_images, memory_images, env, codec, gt_cache=None):
    """Every run's samples: {(kind, name): [measure() dicts, the updates ones with the child's JSON]}.
    gt_cache: the folder of the prepared GT, for the updates and the file path."""
    samples = {}
    with tempfile.TemporaryDirectory(prefix="sgeval-loop-") as scratch:
        output, empty = Path(scratch) / "results.json", write_empty_prediction(Path(scratch) / "empty.zip")
        for run in range(1, runs + 1):
            for kind, name in run_order(run, names):
                if kind == "updates":
                    command = child_command("updates", data, name, model_images=model_images,
                                            memory_images=memory_images if run == 1 else 0, swap=run % 2 == 0,
                                            **({"gt_cache": gt_cache} if gt_cache else {}))
                elif kind.startswith("file"):
                    command = file_command(data, name, output, empty if kind == "file-empty" else None, gt_cache)
                else:
                    command = floor_command(data, codec, empty if kind == "floor-empty" else None)
                sample = bench_run.measure(command, env)
                if sample["returncode"] != 0:
                    raise SystemExit(f"bench.loop: {kind} {name or ''} failed, {_failed(sample)}")
                if kind == "updates":
                    sample["child"] = json.loads(sample["stdout"])
                elif kind == "file" and run == 1:
                    sample["results"] = {key: json.loads(output.read_text()).get(key) for key in COMPARED}
                sample.pop("stdout")
                sample.pop("stderr")
                samples.setdefault((kind, name), []).append(sample)
                shown = f"update median {sample['child']['update_ms']['median']:.2f} ms" if kind == "updates" else \
                    f"{sample['wall_s']:.2f} s"
                print(f"loop run {run}/{runs}  {kind:<11} {name or '':<8} {shown}", file=sys.stderr)
    return samples


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _busy_elsewhere(samples):
    """Median over the runs of the CPUs the rest of the machine kept busy while a child ran."""
    return _median(s["other_cpu_s"] / s["wall_s"] for s in samples)


CLOCKS = {"wall": ("wall_s", "evaluated_ms"), "cpu": ("cpu_s", "evaluated_cpu_ms")}  # command key, child key


def summarise(samples, names, n_images):
    """Medians over the runs; the ratios and targets. Per clock (wall, CPU), the per-image cost of
    a command is its median time / images, and its marginal cost (median time - median time on the
    empty prediction) / images; update's is its mean over the images (median over the runs)."""
    def per_image(kind, name, key, marginal=False):
        time_s = _median(s[key] for s in samples[(kind, name)])
        if marginal:
            time_s -= _median(s[key] for s in samples[(kind + "-empty", name)])
        return 1000 * time_s / n_images

    floor = {"busy_elsewhere_cpus": _busy_elsewhere(samples[("floor", None)]),
             "wall_s": [s["wall_s"] for s in samples[("floor", None)]],
             "empty_wall_s": [s["wall_s"] for s in samples[("floor-empty", None)]]}
    for clock, (key, _) in CLOCKS.items():
        floor[clock] = {"ms_per_image": per_image("floor", None, key),
                        "marginal_ms_per_image": per_image("floor", None, key, True)}
    found = {"floor": floor, "configs": {}}
    for name in names:
        children = [s["child"] for s in samples[("updates", name)]]
        files = samples[("file", name)]
        update = {stat: _median(c["update_ms"][stat] for c in children) for stat in ("median", "mean", "max")}
        update_cpu = {stat: _median(c["update_cpu_ms"][stat] for c in children) for stat in ("median", "mean")}
        clocks = {}
        for clock, (key, child_key) in CLOCKS.items():
            update_ms = _median(c[child_key]["mean"] for c in children)
            row = {"update_ms_mean": _median(c[child_key.replace("evaluated", "update")]["mean"] for c in children),
                   "evaluated_ms_median": _median(c[child_key]["median"] for c in children),
                   "evaluated_ms_mean": update_ms}
            for tail, marginal in (("", False), ("_marginal", True)):
                beyond = per_image("file", name, key, marginal) - floor[clock]["marginal_ms_per_image" if marginal
                                                                               else "ms_per_image"]
                row.update({f"file{tail}_ms_per_image": per_image("file", name, key, marginal),
                            f"file_minus_floor{tail}_ms": beyond,
                            f"update_over_file_minus_floor{tail}": update_ms / beyond if beyond > 0 else None})
            clocks[clock] = row
        model = {"wall_without_s": _median(c["model"]["wall_without_s"] for c in children),
                 "wall_with_s": _median(c["model"]["wall_with_s"] for c in children),
                 "loss": _median(c["model"]["loss"] for c in children),
                 "update_ms_median": _median(c["model"]["update_ms"]["median"] for c in children
                                             if c["model"]["update_ms"]),
                 "images": children[0]["model"]["images"], "step_s": children[0]["model"]["step_s"]}
        first = children[0]
        found["configs"][name] = {
            "label": CONFIGS[name][1], "images": first["images"], "update_ms": update, "update_cpu_ms": update_cpu,
            "update_ms_per_run": [c["update_ms"] for c in children], **clocks,
            "decode_ms_mean": _median(c["decode_ms"]["mean"] for c in children),
            "evaluator_init_s": _median(c["evaluator_init_s"] for c in children),
            "warm_up_update_s": [c["warm_up_update_s"] for c in children],
            "updates_busy_elsewhere_cpus": _busy_elsewhere(samples[("updates", name)]),
            "updates_child_max_rss_mib": max(s["max_rss_mib"] for s in samples[("updates", name)]),
            "file_wall_s": [s["wall_s"] for s in files],
            "file_empty_wall_s": [s["wall_s"] for s in samples[("file-empty", name)]],
            "file_busy_elsewhere_cpus": _busy_elsewhere(files),
            "loss_100ms": update["mean"] / (1000 * MODEL_STEP_S),
            "loss_100ms_cpu": update_cpu["mean"] / (1000 * MODEL_STEP_S),
            "model": model, "state": first["state"], "traced": first.get("traced"),
            "packed_update_cpu_ms": _median(c["packed_update_cpu_ms"]["median"] for c in children),
            "packed_update_ms": _median(c["packed_update_ms"]["median"] for c in children),
            "same_results_as_file": first["results"] == files[0]["results"],
        }
    return found


def _verdict(ok):
    return "ok" if ok else "MISSED"


def _value(value):
    return "n/a" if value is None else f"{value:.2f}"


def report(results):
    m, w = results["machine"], results["workload"]
    params, n = w["params"], w["params"]["n_images"]
    runs = results["runs"]
    lines = [
        f"== in the test loop: workload {w['dir']} ({n} evaluated images, {params['width']}x{params['height']}, "
        f"{params['n_masks']} masks and ~{params['n_triplets']} triplets per image); medians of {runs} runs",
        f"machine: {m['cpu_model']}, nproc {m['nproc']}, {m['memory_gib']} GiB, Python {m['python']}; {m['date']}; "
        f"load average {results['load_average'][0]:.2f} at start, {results['load_average'][1]:.2f} at end; "
        f"sgeval.py {results['source']['sgeval_sha256']} (HEAD {results['source']['git_head']}"
        + (", modified" if results["source"]["sgeval_modified"] else "") + ")"
        + (f"; GT prepared ({results['gt_cache_entries']} entries in the updates' and the file path's GT cache folder)"
           if "gt_cache_entries" in results else ""),
        "",
        f"{'ms per evaluated image':<28}{'update':>8}{'update':>8}{'+ eval':>8}{'+ eval':>8}{'file':>8}{'floor':>8}"
        f"{'file -':>8}{'+ eval /':>10}",
        f"{'':<28}{'median':>8}{'mean':>8}{'median':>8}{'mean':>8}{'path':>8}{'':>8}{'floor':>8}{'(f - fl)':>10}",
    ]
    floor = results["floor"]
    for name, c in results["configs"].items():
        for clock, tail in (("wall", ""), ("wall", "_marginal"), ("cpu", ""), ("cpu", "_marginal")):
            row, ratio = c[clock], c[clock]["update_over_file_minus_floor" + tail]
            median = c["update_ms" if clock == "wall" else "update_cpu_ms"]["median"]
            head = f"{name if clock == 'wall' and not tail else '':<10}{clock + (', marginal' if tail else ''):<18}"
            head += (f"{median:8.2f}{row['update_ms_mean']:8.2f}{row['evaluated_ms_median']:8.2f}"
                     f"{row['evaluated_ms_mean']:8.2f}" if not tail else f"{'':<32}")
            lines.append(head + f"{row['file' + tail + '_ms_per_image']:8.2f}"
                         f"{floor[clock]['marginal_ms_per_image' if tail else 'ms_per_image']:8.2f}"
                         f"{row['file_minus_floor' + tail + '_ms']:8.2f}"
                         + (f"{ratio:10.2f}" if ratio is not None else f"{'n/a':>10}"))
    lines += [
        "  " + "; ".join(f"{name}: {c['label']}" for name, c in results["configs"].items()),
        "  update: ev.update until it returns, masks given as (P, H, W) bool arrays (median and mean over the "
        "images); + eval: until the image's evaluation in the Evaluator's thread has ended too (the image's whole "
        "cost); file path: sgeval.py --workers 1 on compact.zip, time / images; floor: bench.decode_floor W=1; "
        "marginal: (time - time on a prediction without records) / images, i.e. without start-up, reading the GT "
        "and computing the results; the ratio uses the + eval mean; cpu: user + system time (all threads)",
        "  CPUs kept busy by other work meanwhile (median; 0 on an idle machine): " + "; ".join(
            f"{name}: updates {c['updates_busy_elsewhere_cpus']:.2f}, file path {c['file_busy_elsewhere_cpus']:.2f}"
            for name, c in results["configs"].items()) + f"; floor {floor['busy_elsewhere_cpus']:.2f}",
    ]
    lines.append("")
    for name, c in results["configs"].items():
        for clock in ("wall", "cpu"):
            ratio = c[clock]["update_over_file_minus_floor"]
            lines.append(f"{name}: update + evaluation mean / (file path - floor), {clock}: {_value(ratio)} (marginal "
                         f"{_value(c[clock]['update_over_file_minus_floor_marginal'])}; target <= {UPDATE_TARGET:g})  "
                         f"{_verdict(ratio is not None and ratio <= UPDATE_TARGET)}")
    for name, c in results["configs"].items():
        model = c["model"]
        lines.append(f"{name}: loss for a {1000 * MODEL_STEP_S:.0f} ms/image model (mean update / "
                     f"{1000 * MODEL_STEP_S:.0f} ms) {100 * c['loss_100ms']:.1f} % (target < {100 * LOSS_TARGET:g} %)  "
                     f"{_verdict(c['loss_100ms'] < LOSS_TARGET)}; with the CPU mean {100 * c['loss_100ms_cpu']:.1f} %")
        lines.append(f"{name}: interleaved with a {1000 * model['step_s']:.0f} ms model step (time.sleep), "
                     f"{model['images']} images: {model['wall_without_s']:.2f} s without updates, "
                     f"{model['wall_with_s']:.2f} s with: +{100 * model['loss']:.1f} % (target < "
                     f"{100 * LOSS_TARGET:g} %)  {_verdict(model['loss'] < LOSS_TARGET)}; update after a step: "
                     f"median {model['update_ms_median']:.2f} ms")
    for name, c in results["configs"].items():
        cpu = c.get("packed_update_cpu_ms")
        if cpu is not None:
            lines.append(f"{name}: update in the caller's thread, masks as PackedMasks: median CPU {cpu:.2f} ms, "
                         f"wall {c['packed_update_ms']:.2f} ms (target <= {bench_run.PACKED_UPDATE_TARGET_MS:g} ms)  "
                         f"{_verdict(cpu <= bench_run.PACKED_UPDATE_TARGET_MS)}")
    lines.append("")
    for name, c in results["configs"].items():
        s, traced = c["state"], c["traced"]
        worst = max(s["pickle_per_image"], s["memory_per_image"], traced["per_image"] if traced else 0)
        lines.append(f"{name}: state per evaluated image: pickle of state_dict {s['pickle_per_image']:.0f} B "
                     f"({s['pickle_bytes']:,} B for {s['images']} images + {s['extra']} without relations), "
                     f"in memory {s['memory_per_image']:.0f} B"
                     + (f", tracemalloc growth {traced['per_image']:.0f} B (images {traced['from_image'] + 1}-"
                        f"{traced['images']})" if traced else "")
                     + f" (target <= {STATE_TARGET_BYTES} B)  {_verdict(worst <= STATE_TARGET_BYTES)}")
    vg = results.get("vg")
    if vg:
        g = vg["gt_per_image"]
        lines.append(f"VG150-like box mode ({vg['images']:,} images, {g['objects']:.1f} objects, {g['relations']:.1f} "
                     f"relations, {g['distinct_predicates']:.1f} distinct predicates per image; configs/vg150.yaml: "
                     f"sgb + unique, singlempo, k 20,50,100):")
        for label, s in vg["predictions"].items():
            worst = max(s["pickle_vg_mib"], s["memory_vg_mib"])
            lines.append(f"  predictions of {label}: pickle {s['pickle_per_image']:.0f} B/image, in memory "
                         f"{s['memory_per_image']:.0f} B/image -> at {VG_TEST_IMAGES:,} images "
                         f"{s['pickle_vg_mib']:.1f} / {s['memory_vg_mib']:.1f} MiB (target <= {VG_TARGET_MIB:g} MiB)  "
                         f"{_verdict(worst <= VG_TARGET_MIB)}; update median {s['update_ms']['median']:.2f} ms")
        lines.append(f"  (not the state: the Evaluator's GT and training statistics of {vg['images']:,} test and "
                     f"{vg['train_images']:,} training entries, tracemalloc of its construction: "
                     f"{vg['gt_traced_bytes'] / 2**20:.1f} MiB)")
    same = {name: c["same_results_as_file"] for name, c in results["configs"].items()}
    lines.append("")
    lines.append("update results identical to the file path's: "
                 + ", ".join(f"{name} {'yes' if ok else 'NO'}" for name, ok in same.items()))
    return "\n".join(lines)


def results_path(data, n_images):
    workload = json.loads((data / "stamp.json").read_text())["params"].get("workload", "default")
    return bench_run.loop_results_path(workload, n_images)


def fastest_codec(data, env):
    import subprocess

    done = subprocess.run([sys.executable, "-m", "bench.decode_floor", "--pred", data / "compact.zip",
                           "--compare-inflaters"], capture_output=True, text=True, env=env, cwd=ROOT, check=True)
    return json.loads(done.stdout)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="a workload of bench/make_workload.py")
    parser.add_argument("--runs", type=int, default=3, help="timed runs (medians; default 3)")
    parser.add_argument("--config-protocols", default="psg,default",
                        help=f"configs, comma-separated: {', '.join(CONFIGS)} (default both)")
    parser.add_argument("--model-images", type=int, default=100,
                        help="images of the simulated model loop (two 100 ms steps each; default 100)")
    parser.add_argument("--memory-images", type=int, default=200,
                        help="images of the tracemalloc pass in run 1 (default 200; 0: none)")
    parser.add_argument("--vg-images", type=int, default=2000, help="images of the VG150-like box run (0: none)")
    parser.add_argument("--profile", action="store_true",
                        help="only profile the updates of the first config in this process (cProfile, CPU time)")
    parser.add_argument("--child", choices=["updates", "vg"], help=argparse.SUPPRESS)
    parser.add_argument("--swap", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--gt-cache", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    data = Path(os.path.abspath(args.data))  # a symlinked workload keeps its name
    names = [name.strip() for name in args.config_protocols.split(",") if name.strip()]
    unknown = [name for name in names if name not in CONFIGS]
    if unknown or not names:
        parser.error(f"--config-protocols: unknown {', '.join(unknown) or 'none given'}; valid: {', '.join(CONFIGS)}")
    if args.child == "updates":
        print(json.dumps(time_updates(data, names[0], args.model_images, MODEL_STEP_S, args.memory_images, args.swap,
                                      args.gt_cache or None)))
        return 0
    if args.child == "vg":
        print(json.dumps(vg_state(args.vg_images)))
        return 0
    if args.profile:
        profile_updates(data, names[0])
        return 0

    stamp = json.loads((data / "stamp.json").read_text())
    n_images = stamp["params"]["n_images"]
    env = {key: value for key, value in os.environ.items() if key not in ("SGEVAL_NO_JIT_CACHE", "SGEVAL_GT_CACHE")}
    results = {"machine": bench_run.machine(), "source": bench_run.source_state(), "runs": max(1, args.runs),
               "workload": {**stamp, "dir": os.path.relpath(data, ROOT)}}
    load_start = os.getloadavg()[0]
    bench_run.warm_page_cache(data)
    results["inflaters"] = fastest_codec(data, env)
    with tempfile.TemporaryDirectory(prefix="sgeval-loop-gt-") as gt_cache:
        with tempfile.TemporaryDirectory(prefix="sgeval-loop-") as scratch:  # untimed: fill the JIT cache, prepare
            for name in names:                                                 # the GT
                bench_run.measure(file_command(data, name, Path(scratch) / "warm.json", gt_cache=gt_cache), env)
        results["gt_cache_entries"] = bench_run.gt_entries(gt_cache)
        samples = measure_all(data, names, results["runs"], args.model_images, args.memory_images, env,
                              results["inflaters"]["fastest"], gt_cache)
    results.update(summarise(samples, names, n_images))
    if args.vg_images:
        sample = bench_run.measure(child_command("vg", data, vg_images=args.vg_images), env)
        if sample["returncode"] != 0:
            raise SystemExit(f"bench.loop: the VG150-like run failed, {_failed(sample)}")
        results["vg"] = json.loads(sample["stdout"])
    results["load_average"] = [load_start, os.getloadavg()[0]]
    results["source_at_end"] = bench_run.source_state()
    text = report(results)
    results["report"] = text
    out = results_path(data, n_images)
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=1) + "\n")
    print(text)
    print(f"\nresults written to {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
