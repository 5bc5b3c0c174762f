"""Shared test helpers (test modules import these, never each other): tiny datasets built on disk
(gt_image, pred_image, write_case, run_case), two small valid cases that tests break or vary
(format_case, perfect_case), editors of written files (rewrite_json, edit_gt, edit_zip, ...), TIFF
bytes, the error contract checks (problems_of, checked, matching, only, assert_cli_fails), and the
demo data made once per session (the demo_data fixture)."""

import io
import json
import os
import re
import tempfile
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest
import tifffile
from click.testing import CliRunner

import sgeval
from tools import make_demo, synth

ROOT = Path(__file__).resolve().parents[1]  # the repository root (configs/, sgeval.py, ...)
# Prepared GT goes to a folder of this run (its child processes inherit it), not the user's cache.
os.environ["SGEVAL_GT_CACHE"] = tempfile.mkdtemp(prefix="sgeval-gt-cache-")

THINGS = ["person", "horse", "dog"]
STUFF = ["grass", "sky"]
PREDICATES = ["riding", "on", "beside", "holding"]


def cells(height, width, *spans):
    """A bool (H, W) mask that is True on the given (row, col_start, col_stop) spans."""
    mask = np.zeros((height, width), bool)
    for row, start, stop in spans:
        mask[row, start:stop] = True
    return mask


def gt_image(image_id, masks, categories, relations, split="test"):
    masks = np.asarray(masks, bool).reshape(len(categories), *np.shape(masks)[-2:])
    return {"image_id": str(image_id), "height": masks.shape[1], "width": masks.shape[2],
            "split": split, "categories": list(categories), "masks": masks,
            "boxes": [synth.tight_box(m) for m in masks], "relations": [list(r) for r in relations]}


def pred_image(image_id, masks, categories, triplets, ng_triplets=None, boxes=None, scores=None):
    masks = None if masks is None else np.asarray(masks, bool).reshape(len(categories), *np.shape(masks)[-2:])
    if boxes is None:
        boxes = [synth.tight_box(m) for m in masks] if masks is not None else [[0, 0, 0, 0]] * len(categories)
    instances = [{"category": int(c), "bbox": [float(v) for v in b]} for c, b in zip(categories, boxes)]
    for instance, score in zip(instances, scores or []):
        instance["score"] = score
    record = {"id": str(image_id), "instances": instances, "triplets": [list(t) for t in triplets]}
    if ng_triplets is not None:
        record["ng_triplets"] = [list(t) for t in ng_triplets]
    if masks is not None:
        record["masks"] = masks
    return record


def write_case(tmp_path, images, predictions, mode="mask", pred_name="pred.zip",
               predicates=PREDICATES):
    """Write GT and predictions; return the config values that point at them."""
    dataset = {"thing_classes": THINGS, "stuff_classes": STUFF, "predicate_classes": list(predicates),
               "images": images}
    gt = synth.write_gt(dataset, tmp_path / "gt")
    if mode == "box":
        predictions = [{k: v for k, v in p.items() if k != "masks"} for p in predictions]
    pred = sgeval.write_predictions(tmp_path / pred_name, predictions)
    values = {"gt": str(gt), "pred": str(pred)}
    if mode == "mask":
        values["gt_seg"] = str(tmp_path / "gt" / "panoptic")
    return values


def run_case(tmp_path, images, predictions, mode="mask", **config):
    values = write_case(tmp_path, images, predictions, mode=mode)
    return sgeval.evaluate(sgeval.make_config({**values, **config}))


def write_train_gt(path, images):
    """A minimal annotation file for `train_gt`: images = [(categories, relations)], all training."""
    data = [{"image_id": f"t{index}", "segments_info": [{"id": j + 1, "category_id": c} for j, c in enumerate(cats)],
             "relations": [list(r) for r in relations]} for index, (cats, relations) in enumerate(images)]
    path.write_text(json.dumps({"data": data, "test_image_ids": []}))
    return path


def write_zip(path, members):
    """A ZIP holding members = {name: bytes}; returns its path as a string."""
    with zipfile.ZipFile(path, "w") as archive:
        for name, payload in members.items():
            archive.writestr(name, payload)
    return str(path)


def zip_member(path, name):
    with zipfile.ZipFile(path) as archive:
        return archive.read(name)


def edit_zip(path, members):
    """Replace (bytes) or delete (None) members of a zip: members = {name: bytes | None}."""
    with zipfile.ZipFile(path) as archive:
        content = {name: archive.read(name) for name in archive.namelist()}
    for name, payload in members.items():
        if payload is None:
            del content[name]
        else:
            content[name] = payload
    write_zip(path, content)


def rewrite_json(path, edit):
    """Apply edit(data) to triplets.json inside a zip, a directory or a .json file."""
    if str(path).endswith(".zip"):
        with zipfile.ZipFile(path) as archive:
            members = {name: archive.read(name) for name in archive.namelist()}
        data = json.loads(members["triplets.json"])
        edit(data)
        members["triplets.json"] = json.dumps(data).encode()
        write_zip(path, members)
    else:
        edit_json_file(path if str(path).endswith(".json") else f"{path}/triplets.json", edit)


def edit_json_file(path, edit):
    """Apply edit(data) to the JSON document of a file."""
    with open(path) as handle:
        data = json.load(handle)
    edit(data)
    with open(path, "w") as handle:
        json.dump(data, handle)


def edit_gt(values, edit):
    """Apply edit(data) to the psg.json of a case."""
    edit_json_file(values["gt"], edit)


def gt_entry(data, image_id):
    """The psg.json data entry of an image."""
    return next(e for e in data["data"] if e["image_id"] == image_id)


def pred_record(data, image_id):
    """The triplets.json record of an image."""
    return next(r for r in data["images"] if str(r["id"]) == image_id)


def tiff_bytes(masks, **options):
    """The bytes of tifffile.imwrite(masks, **options) (photometric minisblack unless given)."""
    buffer = io.BytesIO()
    with warnings.catch_warnings():  # tifffile warns that (3, H, W) becomes a planar RGB page
        warnings.simplefilter("ignore", DeprecationWarning)
        tifffile.imwrite(buffer, masks, **{"photometric": "minisblack", **options})
    return buffer.getvalue()


class BytesSource:
    """A prediction source (sgeval.PredSource's read and path) that hands out fixed bytes for any
    file name: load_pred_masks without a file on disk."""

    def __init__(self, data, path="pred.zip"):
        self.data, self.path = data, path

    def read(self, name, limit=None):
        if limit is not None and len(self.data) > limit:
            raise ValueError(f"the file holds more than {limit} bytes")
        return self.data


def pred_record_of(n_instances, seg_filename="m.tiff", image_id="1"):
    """A PredImage with n_instances instances of category 0 and a TIFF name (for load_pred_masks)."""
    return sgeval.PredImage(image_id, np.zeros(n_instances, np.int64), None, None, None, None, seg_filename)


# ----------------------------------------------------------------------------------------------
# Two small valid cases (2 x 8 images) that tests edit to break or vary one thing.

TOP_LEFT, TOP_RIGHT, BOTTOM = cells(2, 8, (0, 0, 4)), cells(2, 8, (0, 4, 8)), cells(2, 8, (1, 0, 8))


def format_case(tmp_path, mode="mask", n_instances=3):
    """Three images, imperfect predictions (ng_triplets, scores, a one-page TIFF): the prediction
    format tests (test_formats.py, test_stream.py) check that other spellings read the same."""
    images = [gt_image(1, [TOP_LEFT, TOP_RIGHT, BOTTOM], [0, 0, 1], [[0, 2, 0], [1, 2, 0], [1, 2, 1]]),
              gt_image(2, [TOP_LEFT, BOTTOM], [0, 1], [[0, 1, 2]]),
              gt_image(3, [TOP_LEFT, BOTTOM], [0, 1], [[0, 1, 2]])]
    masks = [TOP_LEFT, TOP_RIGHT, BOTTOM, cells(2, 8, (0, 4, 7))]
    preds = [pred_image(1, masks[:n_instances], [0, 0, 1, 0][:n_instances],
                        triplets=[[1, 2, 1], [0, 2, 0]], ng_triplets=[[1, 2, 1], [1, 2, 0], [0, 2, 0]]),
             pred_image(2, [TOP_LEFT, BOTTOM], [0, 1], triplets=[[0, 1, 2]], scores=[0.9, 0.8]),
             pred_image(3, [TOP_LEFT], [0], triplets=[[0, 0, 2]])]  # a one-page TIFF
    return write_case(tmp_path, images, preds, mode=mode)


def evaluate_values(values, **extra):
    """sgeval.evaluate of config values with k = 1, 20 (and any extra values)."""
    return sgeval.evaluate(sgeval.make_config({**values, "k": ["1", "20"], **extra}))


def perfect_case(tmp_path, mode="mask"):
    """Three evaluated images 101-103, predicted perfectly (R@k = 1) until a test breaks something:
    the bad-input tests (test_errors_*.py). Objects: 0 person, 1 horse, 2 dog, 3 grass, 4 sky;
    predicates 0..3. Mask mode writes pred.zip (101.tiff ...), box mode pred.json."""
    a, b, c = TOP_LEFT, TOP_RIGHT, BOTTOM
    images = [gt_image("101", [a, b, c], [0, 0, 3], [[0, 2, 0], [1, 2, 1]]),
              gt_image("102", [a, c], [1, 4], [[0, 1, 2]]),
              gt_image("103", [a, c], [0, 3], [[0, 1, 3]])]
    preds = [pred_image("101", [a, b, c], [0, 0, 3], [[0, 2, 0], [1, 2, 1]]),
             pred_image("102", [a, c], [1, 4], [[0, 1, 2]]),
             pred_image("103", [a, c], [0, 3], [[0, 1, 3]])]
    return write_case(tmp_path, images, preds, mode=mode,
                      pred_name="pred.zip" if mode == "mask" else "pred.json")


def png_path(values, image_id):
    """The panoptic PNG of an image of perfect_case, as problems name it."""
    return f"{values['gt_seg']}/{image_id}.png"


def write_yaml(tmp_path, text, name="config.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


# ----------------------------------------------------------------------------------------------
# The error contract (SPEC section 8): one SGEvalError, one line per problem naming file, image
# and field; the CLI prints each as an `error:` line and exits 1.


def checked(error):
    """The problems of an SGEvalError, after checking its contract."""
    assert isinstance(error, ValueError)
    assert error.problems, "an SGEvalError without problems"
    for problem in error.problems:
        assert isinstance(problem, str) and problem.strip(), error.problems
        assert "\n" not in problem, f"a problem must be one line: {problem!r}"
    assert str(error) == "\n".join(error.problems)
    return error.problems


def problems_of(values, **extra):
    """The problem lines of the SGEvalError that evaluate() raises (checks the error contract)."""
    with pytest.raises(sgeval.SGEvalError) as info:
        sgeval.evaluate(sgeval.make_config({**values, **extra}))
    return checked(info.value)


def config_problems(values):
    """The problem lines of the SGEvalError that make_config() raises."""
    with pytest.raises(sgeval.SGEvalError) as info:
        sgeval.make_config(values)
    return checked(info.value)


def matching(problems, path, image=None, *words):
    """Problems naming path, `image <id>` (when given) and every word (case-insensitive)."""
    return [p for p in problems
            if str(path) in p
            and (image is None or re.search(rf"\bimage {re.escape(str(image))}(?![\w.])", p))
            and all(word.lower() in p.lower() for word in words)]


def only(problems, path, image=None, *words):
    """Exactly one problem, and it names path, image and words."""
    assert len(problems) == 1, problems
    assert matching(problems, path, image, *words), (problems, path, image, words)
    return problems[0]


def assert_cli_fails(args, problems):
    """The CLI exits 1 and prints exactly one `error: <problem>` line per library problem."""
    result = CliRunner().invoke(sgeval.main, [str(a) for a in args])
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit), f"uncaught {result.exception!r}"
    assert "Traceback" not in result.output
    assert result.stdout == ""
    assert result.stderr.splitlines() == [f"error: {p}" for p in problems]


def assert_cli_reports(tmp_path, build):
    """build(tmp_path) breaks a case and returns (YAML config path or None, option values, number
    of problems): the library raises that many problems, and the CLI given the same config and
    options prints exactly those, one `error:` line each."""
    config_path, options, n_problems = build(tmp_path)
    with pytest.raises(sgeval.SGEvalError) as info:
        sgeval.evaluate(sgeval.load_config(config_path, need_pred=True, **options))
    problems = checked(info.value)
    assert len(problems) == n_problems, problems
    args = ["--quiet"] + (["--config", config_path] if config_path else [])
    for key, value in options.items():
        args += [f"--{key.replace('_', '-')}", value]
    assert_cli_fails(args, problems)


def confusion_cells(section):
    """A predicate_confusion section as {(GT predicate, predicted predicate or None): count}."""
    cells = {(gt, predicted): n for gt, row in section["counts"].items() for predicted, n in row.items()}
    return {**cells, **{(gt, None): n for gt, n in section["no_prediction"].items()}}


@pytest.fixture(scope="session")
def demo_data(tmp_path_factory):
    """The folder of the demo data as `python -m tools.make_demo --out DIR` writes it, made once per
    session: psg.json, panoptic/, pred.zip ("Model A") and pred-b.zip ("Model B")."""
    out = tmp_path_factory.mktemp("demo-data")
    make_demo.make_demo(out)
    return out


# ---------------------------------------------------------------------------------------------
# A model's test loop: the converters' image_arrays fed to sgeval.Evaluator
# ---------------------------------------------------------------------------------------------

class LiveTensor:
    """What the converters use of a torch tensor in a test loop: detach().cpu().numpy()."""

    def __init__(self, array):
        self.array = np.asarray(array)

    def detach(self):
        return self

    def cpu(self):
        return self

    def numpy(self):
        return self.array


def assert_arrays_written(arrays, pred, source, image):
    """One image's image_arrays equal what the file converter wrote for it: pred is its PredImage
    read in box mode (boxes kept), source the PredSource its masks are read from."""
    assert arrays["labels"].dtype == arrays["triplets"].dtype == arrays["ng_triplets"].dtype == np.int64
    assert np.array_equal(arrays["labels"], pred.categories)
    assert np.array_equal(arrays["triplets"], pred.triplets) and np.array_equal(arrays["ng_triplets"], pred.ng_triplets)
    assert arrays["boxes"].dtype == np.float64 and np.array_equal(arrays["boxes"], pred.boxes.reshape(-1, 4))
    if arrays["scores"] is None or not len(arrays["labels"]):
        assert pred.scores is None or not len(pred.scores)
    else:
        assert arrays["scores"].dtype == np.float64 and np.array_equal(arrays["scores"], pred.scores)
    if arrays["masks"] is None:
        assert pred.seg_filename is None
    elif len(arrays["labels"]):
        assert arrays["masks"].dtype == bool and arrays["masks"].shape == (len(pred.categories), image.height,
                                                                            image.width)
        written = sgeval.load_pred_masks(source, pred, image.height, image.width)
        assert np.array_equal(sgeval.pack_masks(arrays["masks"]), written)
    else:
        assert arrays["masks"].shape == (0, image.height, image.width) and pred.seg_filename is None


def evaluate_updates(config, updates):
    """sgeval.Evaluator(config) updated with updates = [(image_id, image_arrays)], then computed."""
    evaluator = sgeval.Evaluator(config)
    for image_id, arrays in updates:
        evaluator.update(image_id, **arrays)
    return evaluator.compute()


def assert_same_results(live, from_file):
    """An Evaluator's results and sgeval.evaluate's of the converted file: equal, but for the
    config's pred and the Evaluator's count of duplicate updates."""
    assert {key: value for key, value in live["config"].items() if key != "pred"} == \
        {key: value for key, value in from_file["config"].items() if key != "pred"}
    assert {key: live["images"][key] for key in from_file["images"]} == from_file["images"]
    rest = set(from_file) - {"config", "images"}
    assert set(live) - {"config", "images"} == rest
    assert {key: live[key] for key in rest} == {key: from_file[key] for key in rest}


def cache_entry(folder, key):
    """The bytes of a GT cache entry (from the newest pack of folder that holds key)."""
    path, offset, length = sgeval.gt_cache_index(str(folder))[key]
    with open(path, "rb") as handle:
        handle.seek(offset)
        return handle.read(length)


def rewrite_cache_entry(folder, key, entry):
    """Rewrite the pack of folder that holds key with entry (any bytes) in its place."""
    path = sgeval.gt_cache_index(str(folder))[key][0]
    index = sgeval.gt_pack_index(path)
    data = open(path, "rb").read()
    entries = [(k, entry if k == key else data[offset:offset + length]) for k, (_, offset, length) in index.items()]
    with open(path, "wb") as handle:
        handle.write(sgeval.gt_pack_bytes(entries))


# ---------------------------------------------------------------------------------------------
# Panoptic quality: the oracle fixtures of tools/pq_check (tests/data/pq/*.zip)
# ---------------------------------------------------------------------------------------------

PQ_FIXTURES = ("pq-0", "pq-1")


def unpacked(path, tmp_path_factory, name=None):
    """A new folder (named name, default the file's stem) holding the ZIP at path unpacked: an
    oracle's fixture of tests/data."""
    folder = tmp_path_factory.mktemp(name or Path(path).stem)
    with zipfile.ZipFile(path) as archive:
        archive.extractall(folder)
    return folder


def pq_fixture(name, tmp_path_factory):
    """(folder, numbers): the PQ fixture name unpacked into a new folder, and its tools' numbers."""
    folder = unpacked(ROOT / "tests" / "data" / "pq" / f"{name}.zip", tmp_path_factory)
    return folder, json.loads((folder / "numbers.json").read_text())


def pq_config(folder, rule="panopticapi", **more):
    """An evaluation of a PQ fixture's GT with panoptic quality under rule (no GT cache, k 20)."""
    return {"gt": str(folder / "psg.json"), "gt_seg": str(folder / "panoptic"), "pq": True, "pq_rule": rule,
            "gt_cache": False, "k": "20", **more}
