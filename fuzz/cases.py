"""Fuzz cases: a small valid workspace (GT, panoptic PNGs, a prediction ZIP, a config, a raw
converter pickle and npz) and, per reader, a hypothesis strategy that breaks one part of it.

A case is a plain dict (it is pickled to the worker and into the corpus):
    reader   which reader it aims at (READERS)
    files    {relative path: bytes} written over the base workspace
    argv     command-line arguments for the ``cli`` reader
    valid    True / False when the generator knows whether the input is valid, else None
The Evaluator's readers (``update``, ``state``) add what they call it with: mode (mask / box),
prior (updates, or the name of a valid state, applied first), image_id and arguments
(Evaluator.update's), state (given to load_state_dict and to merge), impossible (how one record
of the state is made impossible). The command readers (fuzz/commands.py) add: ``special``
command, target (the file made special) and kind; ``env`` env (variable -> value) and command;
``report`` report_argv (sgeval report's).
"""

import collections
import copy
import functools
import importlib
import io
import json
import pickle
import string
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import yaml
from hypothesis import strategies as st

import sgeval
from tools import synth, torchsave

READERS = ("pred_json", "zip", "tiff", "gt_json", "png", "yaml", "cli", "pickle", "crafted_pickle", "npz",
           "torchfile", "update", "state", "special", "env", "report")

HEIGHT, WIDTH = 12, 16
THINGS, STUFF, PREDICATES = ["person", "dog", "horse"], ["grass", "sky"], ["on", "near", "riding"]
EVALUATED = ("101", "102", "103")  # the test images of base_workspace, each with a prediction


def _blocks(*boxes):
    masks = np.zeros((len(boxes), HEIGHT, WIDTH), bool)
    for mask, (y0, y1, x0, x1) in zip(masks, boxes):
        mask[y0:y1, x0:x1] = True
    return masks


# per evaluated image: its instances' blocks (y0, y1, x0, x1), categories and relations
LAYOUTS = [([(0, 6, 0, 8), (0, 6, 8, 16), (6, 12, 0, 16)], [0, 1, 3], [[0, 2, 0], [1, 2, 0], [0, 1, 1]]),
           ([(0, 12, 0, 5), (0, 12, 5, 16)], [2, 4], [[0, 1, 2]]),
           ([(2, 9, 3, 12), (0, 2, 0, 16)], [0, 4], [[0, 1, 1]])]


def base_workspace():
    """{relative path: bytes} of a valid mask-mode case: 3 evaluated images, 1 training image."""
    images = [{"image_id": image_id, "height": HEIGHT, "width": WIDTH, "split": "test", "categories": cats,
               "masks": masks, "boxes": [synth.tight_box(m) for m in masks], "relations": rels}
              for image_id, (boxes, cats, rels) in zip(EVALUATED, LAYOUTS) for masks in [_blocks(*boxes)]]
    images.append({**images[0], "image_id": "900", "split": "train"})
    files = {}
    with tempfile.TemporaryDirectory() as folder:
        synth.write_gt({"thing_classes": THINGS, "stuff_classes": STUFF, "predicate_classes": PREDICATES,
                        "images": images}, Path(folder) / "gt")
        for path in Path(folder, "gt").rglob("*"):
            if path.is_file():
                files[str(path.relative_to(folder))] = path.read_bytes()
        predictions = [{"id": image["image_id"], "masks": image["masks"],
                        "instances": [{"category": c, "bbox": [float(v) for v in b], "score": 0.9 - 0.1 * k}
                                      for k, (c, b) in enumerate(zip(image["categories"], image["boxes"]))],
                        "triplets": image["relations"] + [[1, 0, 2]], "ng_triplets": image["relations"]}
                       for image in images[:3]]
        files["pred.zip"] = Path(sgeval.write_predictions(Path(folder) / "pred.zip", predictions)).read_bytes()
    files["config.yaml"] = yaml.safe_dump({"gt": "gt/psg.json", "gt_seg": "gt/panoptic", "pred": "pred.zip",
                                           "k": [1, 20, "x1"], "workers": 1,
                                           "protocols": ["singlempo", "multimpo", "openpsg", "sgb"]}).encode()
    raw = [{"labels": np.array(image["categories"]) + 1, "masks": image["masks"],
            "rel_pair_idxes": np.array(image["relations"])[:, :2],
            "rel_dists": np.eye(len(PREDICATES) + 1, dtype=np.float32)[np.array(image["relations"])[:, 2] + 1],
            "refine_bboxes": np.array([b + [0.9] for b in image["boxes"]], np.float32)} for image in images[:3]]
    files["raw.pkl"] = pickle.dumps(raw, protocol=2)
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **raw[0])
    files["raw.npz"] = buffer.getvalue()
    files.update(_torch_files(raw))
    files["results.json"] = _results(files)
    return files


def _results(files):
    """The bytes of the results file (sgeval report's input) of the base workspace's evaluation."""
    with tempfile.TemporaryDirectory() as folder:
        for name, data in files.items():
            Path(folder, name).parent.mkdir(parents=True, exist_ok=True)
            Path(folder, name).write_bytes(data)
        config = sgeval.load_config(Path(folder, "config.yaml"), gt_cache=False, model="base", confusion_k="20",
                                    gt=str(Path(folder, "gt/psg.json")), gt_seg=str(Path(folder, "gt/panoptic")),
                                    pred=str(Path(folder, "pred.zip")))
        return json.dumps(sgeval.evaluate(config)).encode()


def _torch_files(raw):
    """eval_results.pytorch-like torch.save files of the raw results (zip and legacy format): a
    BoxList per image, one storage viewed by several tensors."""
    shared = torchsave.Storage(np.arange(12, dtype=np.float32))
    predictions = [torchsave.BoxList(result["refine_bboxes"][:, :4], (WIDTH, HEIGHT), extra_fields={
        "pred_labels": result["labels"].astype(np.int64), "pred_scores": result["refine_bboxes"][:, 4],
        "rel_pair_idxs": result["rel_pair_idxes"].astype(np.int64), "pred_rel_scores": result["rel_dists"],
        "predict_logits": torchsave.View(shared, index, (2, 3), (3, 1))}) for index, result in enumerate(raw)]
    files = {}
    with tempfile.TemporaryDirectory() as folder:
        for name, legacy in (("raw.pytorch", False), ("raw_legacy.pytorch", True)):
            path = torchsave.save(Path(folder) / name, {"predictions": predictions}, legacy=legacy)
            files[name] = path.read_bytes()
    return files


# ------------------------------------------------------------------------------ hostile values

_TEXT = st.text(alphabet=string.printable + "\x00\x1b\u2028é", max_size=12)
_ODD = st.sampled_from([10 ** 400, -(10 ** 400), 2 ** 63, 2 ** 64, "\u00b2", "\u0663", "1_0", "x1_0", "9" * 5000,
                        "x1e400", " 7 "])  # beyond int64 or float; digits int() reads and a cut-off must not
_SCALARS = (st.none() | st.booleans() | st.integers(-2, 8) | st.integers(-2 ** 70, 2 ** 70)
            | st.floats(allow_nan=True, allow_infinity=True) | _TEXT | _ODD)
JSON_VALUES = st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(_TEXT, inner, max_size=3), max_leaves=8)


def _set_path(document, path, value):
    """document with the value at path (a list of keys / indices) replaced, or deleted (value is
    DELETE); a path that does not exist leaves the document as it is."""
    target = document
    for key in path[:-1]:
        try:
            target = target[key]
        except (KeyError, IndexError, TypeError):
            return
    try:
        if value is DELETE:
            del target[path[-1]]
        else:
            target[path[-1]] = value
    except (KeyError, IndexError, TypeError):
        pass


DELETE = object()


def _paths(draw, document, depth=6):
    """A random path into a JSON document (keys of objects, indices of lists)."""
    path, node = [], document
    for _ in range(draw(st.integers(1, depth))):
        if isinstance(node, dict) and node:
            key = draw(st.sampled_from(sorted(node)))
        elif isinstance(node, list) and node:
            key = draw(st.integers(0, len(node) - 1))
        else:
            break
        path.append(key)
        node = node[key]
    return path


def _json_edit(draw, text):
    document = json.loads(text)
    for _ in range(draw(st.integers(1, 3))):
        path = _paths(draw, document)
        if path:
            _set_path(document, path, draw(st.just(DELETE) | JSON_VALUES))
    return json.dumps(document).encode()


def _bytes_edit(draw, data, regions=None):
    """data with 1-8 bytes set (in regions when given: a list of (start, stop)), or cut, or
    extended."""
    data = bytearray(data)
    kind = draw(st.sampled_from(["set", "set", "set", "cut", "extend"]))
    if kind == "cut":
        return bytes(data[:draw(st.integers(0, len(data)))])
    if kind == "extend":
        return bytes(data + draw(st.binary(min_size=1, max_size=64)))
    for _ in range(draw(st.integers(1, 8))):
        start, stop = draw(st.sampled_from(regions)) if regions else (0, len(data))
        at = draw(st.integers(start, max(start, min(stop, len(data)) - 1)))
        if at < len(data):
            data[at] = draw(st.integers(0, 255) | st.sampled_from([0, 1, 0x7F, 0x80, 0xFF]))
    return bytes(data)


def _zip_members(data):
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def _zip_of(members):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, payload in members.items():
            archive.writestr(zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0)), payload,
                             zipfile.ZIP_DEFLATED if name.endswith(".json") else zipfile.ZIP_STORED)
    return buffer.getvalue()


def _header_regions(data):
    """Byte ranges worth mutating in a ZIP: its local headers, central directory and end record."""
    regions, at = [], data.find(b"PK\x03\x04")
    while at >= 0:
        regions.append((at, at + 80))
        at = data.find(b"PK\x03\x04", at + 4)
    central = data.find(b"PK\x01\x02")
    return regions + [(central, len(data))] if central >= 0 else regions


# ------------------------------------------------------------------------------- per reader

@st.composite
def pred_json(draw, base):
    members = _zip_members(base["pred.zip"])
    members["triplets.json"] = _json_edit(draw, members["triplets.json"])
    return {"files": {"pred.zip": _zip_of(members)}}


@st.composite
def zip_structure(draw, base):
    return {"files": {"pred.zip": _bytes_edit(draw, base["pred.zip"], _header_regions(base["pred.zip"]))}}


@st.composite
def tiff(draw, base):
    members = _zip_members(base["pred.zip"])
    name = draw(st.sampled_from(sorted(n for n in members if n.endswith(".tiff"))))
    header = [(0, 16)] + [(len(members[name]) - 200, len(members[name]))]  # the IFD is written last
    members[name] = _bytes_edit(draw, members[name], draw(st.sampled_from([header, None])))
    return {"files": {"pred.zip": _zip_of(members)}, "member": name}


@st.composite
def gt_json(draw, base):
    return {"files": {"gt/psg.json": _json_edit(draw, base["gt/psg.json"])}}


@st.composite
def png(draw, base):
    name = draw(st.sampled_from(sorted(n for n in base if n.endswith(".png"))))
    return {"files": {name: _bytes_edit(draw, base[name])}, "member": name}


@st.composite
def yaml_config(draw, base):
    values = yaml.safe_load(base["config.yaml"])
    kind = draw(st.sampled_from(["value", "value", "key", "bytes"]))
    if kind == "bytes":
        return {"files": {"config.yaml": _bytes_edit(draw, base["config.yaml"])}}
    key = draw(st.sampled_from(sorted(sgeval.Config.__dataclass_fields__))) if kind == "value" else draw(_TEXT)
    values[key] = draw(JSON_VALUES)
    return {"files": {"config.yaml": yaml.safe_dump(values, allow_unicode=True).encode()}}


_OPTIONS = ["--k", "--imr-k", "--metrics", "--protocol", "--protocols", "--iou-threshold", "--wimr-tau",
            "--absent-predicates", "--aggregation", "--workers", "--output", "--train-gt", "--zeroshot-triplets"]


@st.composite
def cli(draw, base):
    argv = ["--gt", "gt/psg.json", "--gt-seg", "gt/panoptic", "--pred", "pred.zip", "--quiet"]
    for _ in range(draw(st.integers(1, 3))):
        argv += [draw(st.sampled_from(_OPTIONS)), draw(_TEXT | st.integers(-2 ** 70, 2 ** 70).map(str) | _ODD.map(str))]
    return {"files": {}, "argv": argv}


@st.composite
def raw_pickle(draw, base):
    return {"files": {"raw.pkl": _bytes_edit(draw, base["raw.pkl"])}}


class _Reduce:
    """Pickles as call(*args) and, when state is not None, a BUILD of state."""

    def __init__(self, call, args, state):
        self.call, self.args, self.state = call, args, state

    def __reduce__(self):
        return (self.call, self.args) if self.state is None else (self.call, self.args, self.state)


def _numpy_core(name):
    """numpy._core.<name> (numpy 2), else numpy.core.<name>."""
    try:
        return importlib.import_module(f"numpy._core.{name}")
    except ImportError:
        return importlib.import_module(f"numpy.core.{name}")


def _allowed_callables():
    """The callables the restricted unpickler allows."""
    multiarray, numeric = _numpy_core("multiarray"), _numpy_core("numeric")
    return [np.dtype, np.ndarray, multiarray._reconstruct, multiarray.scalar, numeric._frombuffer, bytes,
            bytearray, set, frozenset, complex, collections.OrderedDict]


_PICKLE_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-2 ** 64, 2 ** 64) | st.binary(max_size=24) | _TEXT
    | st.sampled_from(["f8", "<f4", "V8", "O", "b1", "u1", "S3", "i8", "c16", "M8[s]", "|u1", ">i2"])
    | st.sampled_from([np.dtype("f4"), np.dtype([("a", "f4")]), np.dtype(("f4", (2,))), np.dtype("O")]),
    lambda inner: st.tuples(inner, inner) | st.tuples(inner, inner, inner) | st.lists(inner, max_size=5)
    | st.builds(tuple, st.lists(inner, max_size=9)), max_leaves=12)


@st.composite
def crafted_pickle(draw, base):
    """A pickle of results whose fields are calls of the allowed globals with hostile arguments and
    states (what once crashed numpy or allocated gigabytes)."""
    multiarray = _numpy_core("multiarray")
    dtypes = st.sampled_from(["f8", "V8", "O", "b1", "u1", "S3", "i8", "c16", "M8[s]", "U2"])
    dtype_states = st.tuples(st.integers(-1, 4), st.sampled_from("<>|=x"), st.none() | _PICKLE_VALUES,
                             st.none() | st.tuples(_TEXT) | _PICKLE_VALUES, st.none() | _PICKLE_VALUES,
                             st.integers(-2, 2 ** 40), st.integers(-2, 64), st.integers(-1, 2 ** 31))
    calls = (st.builds(_Reduce, st.sampled_from(_allowed_callables()),
                       st.builds(tuple, st.lists(_PICKLE_VALUES, max_size=5)), st.none() | _PICKLE_VALUES)
             | st.builds(_Reduce, st.just(np.dtype), st.tuples(dtypes, st.booleans(), st.booleans()), dtype_states)
             | st.builds(_Reduce, st.just(multiarray.scalar), st.tuples(_PICKLE_VALUES, st.binary(max_size=40)),
                         st.none()))
    fields = draw(st.dictionaries(st.sampled_from(["labels", "masks", "rel_dists", "get", "fields"]),
                                  calls | _PICKLE_VALUES, min_size=1, max_size=3))
    try:
        data = pickle.dumps([fields], protocol=draw(st.sampled_from([2, 4, 5])))
    except Exception:  # noqa: BLE001 -- some drawn objects cannot be pickled: the plain base case then
        data = base["raw.pkl"]
    return {"files": {"raw.pkl": data}}


@st.composite
def torch_file(draw, base):
    """A torch.save file broken in its object pickle (re-zipped, CRCs valid) or anywhere (the legacy
    format, or the zip's bytes); fuzz/worker.py reads it as the sgb converter does."""
    kind = draw(st.sampled_from(["pickle", "legacy", "zip_bytes"]))
    if kind == "legacy":
        return {"files": {"raw.pytorch": _bytes_edit(draw, base["raw_legacy.pytorch"])}}
    if kind == "zip_bytes":
        return {"files": {"raw.pytorch": _bytes_edit(draw, base["raw.pytorch"], _header_regions(base["raw.pytorch"]))}}
    members = _zip_members(base["raw.pytorch"])
    name = next(name for name in members if name.endswith("/data.pkl"))
    members[name] = _bytes_edit(draw, members[name])
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        for member, payload in members.items():
            archive.writestr(member, payload)
    return {"files": {"raw.pytorch": buffer.getvalue()}}


@st.composite
def npz(draw, base):
    return {"files": {"raw.npz": _bytes_edit(draw, base["raw.npz"])}}


# ----------------------------------------------------------------------------- the Evaluator

EXTRA = "104"  # a test image without relations in the Evaluator readers' GT: its updates are extra predictions
MODES = ("mask", "box")


def evaluator_files(base):
    """{relative path: bytes} of the Evaluator readers' GT: the base GT with EXTRA (a copy of the last
    evaluated image without relations) in its test split, and the base panoptic PNGs."""
    document = json.loads(base["gt/psg.json"])
    entry = next(entry for entry in document["data"] if str(entry["image_id"]) == EVALUATED[-1])
    document["data"].append({**entry, "image_id": EXTRA, "relations": []})
    document["test_image_ids"].append(EXTRA)
    return {**{name: data for name, data in base.items() if name.startswith("gt/panoptic/")},
            "gt/psg.json": json.dumps(document).encode()}


def make_evaluator(base, mode, root=""):
    """An Evaluator of the base config (no pred) in mask or box mode, on evaluator_files written
    under root (a relative root: the Evaluator reads its PNGs under the current folder)."""
    config = yaml.safe_load(base["config.yaml"])
    del config["pred"]
    config.update(gt=str(Path(root, "gt/psg.json")), gt_seg=str(Path(root, "gt/panoptic")) if mode == "mask" else None)
    return sgeval.Evaluator(config)


def base_update(image_id):
    """Evaluator.update's keyword arguments predicting an image's base instances, numpy arrays (the
    base prediction's; EXTRA predicts the instances of the last evaluated image)."""
    blocks, categories, relations = LAYOUTS[EVALUATED.index(image_id) if image_id in EVALUATED else -1]
    masks = _blocks(*blocks)
    return {"labels": np.array(categories), "masks": masks,
            "boxes": np.array([synth.tight_box(mask) for mask in masks], np.float64),
            "scores": 0.9 - 0.1 * np.arange(len(categories)), "triplets": np.array(relations + [[1, 0, 2]]),
            "ng_triplets": np.array(relations)}


def evaluator_states(base):
    """{name: a valid state_dict}: mask mode ``empty``, ``one`` (102 updated), ``full`` (every
    evaluated image, 102 three times, EXTRA, 2 other records) and box mode ``box`` (as full)."""
    return copy.deepcopy(_states(tuple(sorted(evaluator_files(base).items())), base["config.yaml"]))


@functools.lru_cache(maxsize=1)
def _states(files, config):
    states = {}
    with tempfile.TemporaryDirectory() as folder:
        for name, data in files:
            Path(folder, name).parent.mkdir(parents=True, exist_ok=True)
            Path(folder, name).write_bytes(data)
        for mode in MODES:
            evaluator = make_evaluator({"config.yaml": config}, mode, folder)
            if mode == "mask":
                states["empty"] = evaluator.state_dict()
                evaluator.update("102", **base_update("102"))
                states["one"] = evaluator.state_dict()
            for image_id in (*EVALUATED, "102", EXTRA):
                evaluator.update(image_id, **base_update(image_id))
            states["full" if mode == "mask" else "box"] = {**evaluator.state_dict(), "other_records": 2}
    return states


class Tensor:
    """Stands in for a torch tensor: Evaluator.update calls detach().cpu().numpy(), which gives the
    array, or raises error when one is given; ndim is the array's (as a tensor has one)."""

    def __init__(self, array, error=None):
        self.array, self.error = array, error

    @property
    def ndim(self):
        return self.array.ndim

    def detach(self):
        return self

    def cpu(self):
        return self

    def numpy(self):
        if self.error is not None:
            raise self.error
        return self.array


class Tiled(Tensor):
    """A tensor of `length` rows repeating the array's (made in the worker: a large P without
    pickling megabytes)."""

    def __init__(self, array, length):
        super().__init__(array)
        self.length = length

    def numpy(self):
        return np.resize(self.array, (self.length, *self.array.shape[1:]))


class Big:
    """A state_dict value made in the worker (fuzz/worker.py expands it): np.full(shape, fill, dtype)."""

    def __init__(self, shape, dtype, fill):
        self.shape, self.dtype, self.fill = shape, dtype, fill

    def array(self):
        return np.full(self.shape, self.fill, self.dtype)


_DTYPES = st.sampled_from(["float64", "float32", "float16", "bool", "object", "complex128", "U4", "S4", "uint64",
                           "int8", "uint8", "int16", "int32", "uint32", "int64", "M8[s]", "V8"])
_NUMBERS = st.integers(-3, 8) | st.sampled_from([2 ** 31, 2 ** 63 - 1, -2 ** 63, 2 ** 63, 2 ** 64 - 1, 0.5, -0.0, 1e300,
                                                 float("nan"), float("inf"), -float("inf")])
_ERRORS = st.sampled_from([RuntimeError("CUDA error: device-side assert triggered"),
                           TypeError("Got unsupported ScalarType BFloat16"), ValueError("bad tensor"),
                           NotImplementedError("sparse"), AttributeError("'NoneType' object has no attribute 'numpy'"),
                           KeyError("numpy"), IndexError("index 0 is out of bounds"), OverflowError("too large")])
_JUNK = (JSON_VALUES | st.binary(max_size=8) | st.just({"a": np.zeros(2)}) | st.just([[0, 1, 2], [0, 1]])
         | st.just([np.zeros(3), [1, 2]]) | st.just(np.array([{"a": 1}, None], dtype=object)) | st.just(Ellipsis)
         | st.just(1j) | st.just(np.float64("nan")) | st.builds(object))


def _with_value(draw, array):
    """The array with one item set to a hostile number (its dtype widened to hold it)."""
    array = np.asarray(array)
    if array.size == 0 or array.dtype.kind not in "biuf":
        return array
    value = draw(_NUMBERS)
    if isinstance(value, float) or array.dtype.kind == "f":
        array = array.astype(np.float64)
    elif value >= 2 ** 63 or array.dtype.kind == "u" and value >= 0:
        array = array.astype(np.uint64)
    else:
        array = array.astype(np.int64)
    array.flat[draw(st.integers(0, array.size - 1))] = value
    return array


def _reshaped(draw, array):
    """The array with a row or column more or fewer, flattened, one axis more, transposed, a
    scalar, or empty."""
    array = np.asarray(array)
    kind = draw(st.sampled_from(["row+", "row-", "column+", "column-", "flat", "axis", "transpose", "scalar",
                                 "empty", "empty_other"]))
    if kind in ("row+", "row-") and array.ndim and len(array):
        return np.concatenate([array, array[:1]]) if kind == "row+" else array[:-1]
    if kind in ("column+", "column-") and array.ndim > 1 and array.shape[-1]:
        return np.concatenate([array, array[..., :1]], axis=-1) if kind == "column+" else array[..., :-1]
    if kind == "scalar" and array.size:
        return draw(st.sampled_from([array.flat[0], array.ravel().tolist()[0], array.reshape(-1)[:1].reshape(())]))
    if kind == "transpose" and array.ndim > 1:
        return np.swapaxes(array, -1, -2)
    if kind == "empty":
        return array.reshape(-1)[:0]
    if kind == "empty_other":
        return np.zeros(draw(st.lists(st.integers(0, 3), max_size=3)) + [0], array.dtype)
    return array.reshape(-1) if kind == "flat" else array[None]


def _form(draw, array):
    """The array as a caller may hold it: numpy (another dtype of the same values), nested lists,
    a tuple, a tensor."""
    form = draw(st.sampled_from(["numpy", "numpy", "dtype", "list", "tuple", "tensor"]))
    if not isinstance(array, np.ndarray):
        return array
    if form == "dtype" and array.dtype.kind in "biuf":
        dtype = draw(st.sampled_from(["int8", "uint8", "int16", "int32", "uint32", "uint64"]
                                     if array.dtype.kind in "biu" else ["float32", "float16"]))
        return array.astype(dtype) if np.array_equal(array.astype(dtype), array) else array
    if form in ("list", "tuple"):
        return array.tolist() if form == "list" else tuple(array.tolist())
    return Tensor(array) if form == "tensor" else array


def _panoptic(draw, masks):
    """masks (P, H, W) that do not overlap as a segment map and ids, in one of the Panoptic forms;
    sometimes broken (a repeated id, a map of another size, a float or 3-D map, 2-D or huge ids)."""
    ids = np.array(draw(st.lists(st.integers(-2 ** 63, 2 ** 63 - 1) | st.integers(0, 300), min_size=len(masks),
                                 max_size=len(masks), unique=True)), np.int64)
    background = next(value for value in (0, 1, 2 ** 40, -7, 12345) if value not in ids[:len(masks)].tolist())
    segment_map = np.full(masks.shape[1:], background, np.int64)
    for mask, segment_id in zip(masks, ids):
        segment_map[mask] = segment_id
    if draw(st.booleans()) and len(ids) and segment_map.min() >= 0:
        segment_map = segment_map.astype(np.uint64)
    change = draw(st.sampled_from(["none", "none", "none", "repeat", "size", "float", "map3d", "ids2d", "absent",
                                   "huge", "value", "ids_value"]))
    if change == "repeat" and len(ids) > 1:
        ids[-1] = ids[0]
    elif change == "size":
        segment_map = _reshaped(draw, segment_map)
    elif change == "float":
        segment_map = segment_map.astype(np.float64)
    elif change == "map3d":
        segment_map = segment_map[None]
    elif change == "ids2d":
        ids = ids[:, None]
    elif change == "absent" and len(ids):
        ids[-1] = background + 1 if background + 1 not in ids.tolist() else background - 1
    elif change == "huge" and len(ids):
        segment_map, ids = segment_map.astype(np.uint64), ids.astype(np.uint64)
        segment_map[segment_map == ids[0]] = ids[0] = 2 ** 63 + 5
    elif change == "value":
        segment_map = _with_value(draw, segment_map)
    elif change == "ids_value":
        ids = _with_value(draw, ids)
    form = draw(st.sampled_from(["Panoptic", "tuple", "list", "lists", "tuple_lists", "tensors"]))
    if form == "lists":
        return sgeval.Panoptic(segment_map.tolist(), ids.tolist())
    if form == "tuple_lists":
        return segment_map.tolist(), ids.tolist()
    if form == "tensors":
        return Tensor(segment_map), Tensor(ids)
    return sgeval.Panoptic(segment_map, ids) if form == "Panoptic" else (segment_map, ids) if form == "tuple" \
        else [segment_map, ids]


_ARGUMENTS = ("labels", "masks", "boxes", "scores", "triplets", "ng_triplets")
_IMAGE_IDS = st.sampled_from([*EVALUATED, EXTRA, 101, np.int64(102), "900", "105", 0, 1, 2, 3, "0", "2", -1, "101 ",
                              " 101", "101.0", 101.0, True, None, b"101", "\u0661", "\u00b2", "\u0663", "1\n01",
                              "10\x001", "\u2028"]) | _TEXT | st.integers(-2 ** 70, 2 ** 70)


def _break(draw, arguments, name):
    """Break (or vary) one argument of an update in place."""
    value = arguments[name]
    kind = draw(st.sampled_from(["value", "value", "shape", "dtype", "junk", "none", "raises", "form", "special"]))
    if kind == "none":
        arguments[name] = None
    elif kind == "junk":
        arguments[name] = draw(_JUNK)
    elif kind == "raises":
        arguments[name] = Tensor(value if isinstance(value, np.ndarray) else np.zeros(0), draw(_ERRORS))
    elif not isinstance(value, np.ndarray):  # already broken or None: leave it
        return
    elif kind == "value":
        arguments[name] = _with_value(draw, value)
    elif kind == "shape":
        arguments[name] = _reshaped(draw, value)
    elif kind == "dtype":
        arguments[name] = value.astype(draw(_DTYPES))
    elif kind == "form":
        arguments[name] = _form(draw, value)
    elif name == "masks":  # the Panoptic form (perhaps broken), or a list of (H, W) masks
        panoptic = value.dtype == bool and value.ndim == 3 and draw(st.booleans())
        arguments[name] = _panoptic(draw, value) if panoptic else list(value)
    elif name == "boxes" and len(value):  # x2 < x1 or y2 < y1
        row, column = draw(st.integers(0, len(value) - 1)), draw(st.sampled_from([0, 1]))
        value = value.copy()
        value[row, [column, column + 2]] = value[row, [column + 2, column]]
        arguments[name] = value
    elif name in ("labels", "masks", "boxes", "scores"):  # one instance more or fewer in one field
        arguments[name] = value[:-1] if draw(st.booleans()) else np.concatenate([value, value[:1]])


@st.composite
def update(draw, base):
    """An Evaluator.update of a base image's valid prediction with one to three arguments broken
    (or none: the arguments in other valid forms), perhaps after a valid update of the same or
    another image, in mask or box mode."""
    image_id = draw(st.sampled_from([*EVALUATED, EXTRA]))
    arguments = base_update(image_id)
    prior = draw(st.sampled_from([[], [], [image_id], [draw(st.sampled_from([*EVALUATED, EXTRA]))]]))
    size = draw(st.integers(0, 19))
    if size == 0:  # a large P: at the limit, beyond it, or in some fields only
        length = draw(st.sampled_from([sgeval.MAX_INSTANCES, sgeval.MAX_INSTANCES + 1, 5 * sgeval.MAX_INSTANCES]))
        for name in draw(st.sampled_from([_ARGUMENTS[:4], ("labels",), ("labels", "masks")])):
            arguments[name] = Tiled(arguments[name], length)
    elif size == 1:  # no instances, in every field but perhaps the masks
        arguments = {name: value[:0] for name, value in arguments.items()}
        arguments["masks"] = draw(st.sampled_from([arguments["masks"], None, base_update(EVALUATED[0])["masks"]]))
    elif size < 5:  # the Panoptic form (perhaps broken)
        arguments["masks"] = _panoptic(draw, arguments["masks"])
    for name in ("labels", "masks", "triplets"):
        if draw(st.integers(0, 3)) == 0:
            arguments[name] = _form(draw, arguments[name])
    for _ in range(draw(st.sampled_from([0, 1, 1, 1, 1, 2, 2, 3]))):
        target = draw(st.sampled_from([*_ARGUMENTS, "image_id"]))
        if target == "image_id":
            image_id = draw(_IMAGE_IDS)
            continue
        try:
            _break(draw, arguments, target)
        except Exception:  # noqa: BLE001 -- numpy refused a break on what an earlier one made: as it was
            pass
    for name in ("ng_triplets", "boxes", "scores"):
        if draw(st.integers(0, 5)) == 0:
            arguments.pop(name)  # not given
    return {"files": {}, "mode": draw(st.sampled_from(MODES)), "image_id": image_id, "arguments": arguments,
            "prior": [(prior_id, base_update(prior_id)) for prior_id in prior]}


_STATE_KEYS = ("sgeval_state", "fingerprint", "slots", "updates", "digests", "offsets", "values", "extra_ids",
               "extra_updates", "extra_digests", "other_records")


def _records(state):
    offsets = np.asarray(state["offsets"]).tolist()
    return [state["values"][start:stop] for start, stop in zip(offsets, offsets[1:])]


def _state_special(draw, state, key, states):
    """A break aimed at one key's meaning (offsets out of order, slots repeated, digests of the
    wrong length, extra ids not test images, ...), or a valid change (records reordered, values
    in a wider dtype, more updates)."""
    n = len(state["slots"])
    if key == "offsets" and n:
        offsets = state["offsets"].copy()
        at = draw(st.integers(0, n))
        offsets[at] = draw(st.sampled_from([-1, 0, offsets[-1] + 1, offsets[max(at - 1, 0)], offsets[min(at + 1, n)],
                                            2 ** 62]))
        state["offsets"] = offsets
    elif key == "slots" and n:
        slots = state["slots"].copy()
        slots[draw(st.integers(0, n - 1))] = draw(st.sampled_from([*slots.tolist(), 3, -1, 2 ** 40, len(EVALUATED)]))
        state["slots"] = slots
    elif key == "updates" and n:
        updates = state["updates"].astype(np.uint64 if draw(st.booleans()) else np.int64)
        values = [0, 1, 2, 2 ** 40, 2 ** 40 + 1, 2 ** 62, 2 ** 63 - 1] if updates.dtype == np.int64 \
            else [2 ** 63, 2 ** 64 - 1, 3]
        updates[draw(st.integers(0, n - 1))] = draw(st.sampled_from(values))
        state["updates"] = updates
    elif key == "digests":
        rows = draw(st.sampled_from([15, 17, 0, 16]))
        state["digests"] = np.resize(state["digests"], (n, rows)).astype(draw(st.sampled_from(["uint8", "int64"])))
    elif key == "values":  # records reordered (valid), or one record's values cut, extended or widened
        records = _records(state)
        order = draw(st.permutations(range(n)))
        how = draw(st.sampled_from(["reorder", "cut", "extend", "widen", "negative"]))
        if how != "reorder" and n:
            at = draw(st.integers(0, n - 1))
            record = records[at].astype(np.int64)
            records[at] = record[:-1] if how == "cut" else np.concatenate([record, [0, 1]]) if how == "extend" \
                else -record if how == "negative" else record
        for name in ("slots", "updates", "digests"):
            state[name] = state[name][list(order)]
        records = [records[i] for i in order]
        state["offsets"] = np.cumsum([0] + [len(r) for r in records], dtype=np.int64)
        state["values"] = np.concatenate(records).astype(draw(st.sampled_from(["uint8", "uint16", "int64", "uint64",
                                                                              "int8"]))) if n else state["values"]
    elif key in ("extra_ids", "extra_updates", "extra_digests"):
        extra_id = draw(st.sampled_from([EXTRA, int(EXTRA), np.str_(EXTRA), *EVALUATED, "900", "105", None, 104.0]))
        count = draw(st.sampled_from([1, 2, 0, -1, 1.5, "1", True, 2 ** 70, np.int64(3)]))
        digest = draw(st.sampled_from([[7] * 16, [7] * 15, [7] * 17, [-1] * 16, [256] * 16, "x" * 16, b"x" * 16]))
        state["extra_ids"] = list(state["extra_ids"]) + [extra_id]
        state["extra_updates"] = list(state["extra_updates"]) + [count]
        state["extra_digests"] = list(map(list, state["extra_digests"])) + [digest]
        if draw(st.booleans()):  # the lists disagree
            state[key] = state[key][:-1] if draw(st.booleans()) else state[key] + state[key][-1:]
    elif key == "other_records":
        state[key] = draw(st.sampled_from([0, 5, -1, 1.5, True, np.int64(2), 2 ** 70, "3", None, [1]]))
    elif key == "fingerprint":
        fingerprint = state[key]
        state[key] = draw(st.sampled_from([fingerprint[:-1] + ("0" if fingerprint[-1] != "0" else "1"),
                                           fingerprint.upper(),
                                           fingerprint.encode(), np.array(list(fingerprint)), None, "",
                                           states["box"]["fingerprint"], np.str_(fingerprint)]))
    elif key == "sgeval_state":
        state[key] = draw(st.sampled_from([2, 0, "1", True, 1.0, np.int64(1), np.array([1, 1]), None, [1]]))


def _state_break(draw, given, states):
    """The state (a dict) with one key dropped, replaced by junk or a huge array, in another dtype or
    shape, one value changed, a break aimed at its meaning (_state_special); or no dict at all."""
    key = draw(st.sampled_from(_STATE_KEYS) | _TEXT)
    kind = draw(st.sampled_from(["special", "special", "special", "drop", "junk", "dtype", "shape", "value", "whole",
                                 "huge"]))
    value = given.get(key)
    if kind == "drop":
        given.pop(key, None)
    elif kind == "junk":
        given[key] = draw(_JUNK)
    elif kind == "dtype" and isinstance(value, np.ndarray):
        given[key] = value.astype(draw(_DTYPES))
    elif kind == "shape" and isinstance(value, np.ndarray):
        given[key] = _reshaped(draw, value)
    elif kind == "value" and isinstance(value, np.ndarray):
        given[key] = _with_value(draw, value)
    elif kind == "huge":  # within the worker's address space
        size = draw(st.sampled_from([10 ** 6, 10 ** 7]))
        given[key] = Big((size,) if key != "digests" else (size // 16, 16), draw(st.sampled_from(["uint8", "int64"])),
                         draw(st.sampled_from([0, 1, 255])))
    elif kind == "whole":  # not a dict, a dict subclass, a state inside a dict
        how = draw(st.sampled_from(["items", "ordered", "userdict", "nested", "junk"]))
        return list(given.items()) if how == "items" else collections.OrderedDict(given) if how == "ordered" \
            else collections.UserDict(given) if how == "userdict" else {"state_dict": given} if how == "nested" \
            else draw(_JUNK)
    else:
        _state_special(draw, given, key, states)
    return given


IMPOSSIBLE_LIMITS = {"gc_hits": "gt_rel", "ng_hits": "gt_rel", "inf_hits": "gt_rel", "rank_n": "gt_rel",
                     "imr_hits": "gt_rel", "pair_hits": "gt_pairs", "inst_hits": "gt_inst", "z_gc_hits": "z_gt",
                     "z_ng_hits": "z_gt"}  # a hit count and the GT count it cannot exceed (module docstring)


@st.composite
def impossible_record(draw):
    """How fuzz/worker.py makes one record of a valid state impossible, its layout kept: a hit
    count beyond its GT count, hits that decrease as k grows, a GT count that is not the image's,
    an absurd rank sum."""
    how = draw(st.sampled_from(["beyond", "decrease", "gt", "huge"]))
    field = draw(st.sampled_from(sorted(IMPOSSIBLE_LIMITS) if how == "beyond" else ["gc_hits", "ng_hits", "pair_hits"]
                                 if how == "decrease" else ["gt_rel", "gt_pairs", "gt_inst"] if how == "gt"
                                 else ["rank_sum"]))
    return {"how": how, "field": field, "record": draw(st.integers(0, 10)), "protocol": draw(st.integers(0, 5)),
            "position": draw(st.integers(0, 50)), "by": draw(st.sampled_from([1, 2, 1000, 2 ** 40]))}


@st.composite
def state(draw, base):
    """A valid state_dict broken in one to three ways (or none), or one of its records made
    impossible (impossible_record), for load_state_dict and merge of an Evaluator that holds
    nothing or a valid state, in mask or box mode."""
    states = evaluator_states(base)
    given = states[draw(st.sampled_from(["full", "full", "one", "empty", "box"]))]
    if draw(st.integers(0, 3)) == 0:
        mode = "box" if given is states["box"] else "mask"
        return {"files": {}, "mode": mode, "prior": draw(st.sampled_from([None, "box" if mode == "box" else "one"])),
                "state": given, "impossible": draw(impossible_record())}
    for _ in range(draw(st.sampled_from([0, 1, 1, 1, 2, 2, 3]))):
        if not isinstance(given, dict):
            break
        try:
            given = _state_break(draw, given, states)
        except Exception:  # noqa: BLE001 -- numpy refused a break on what an earlier one made: as it was
            pass
    mode = draw(st.sampled_from(["mask", "mask", "box"]))
    prior = draw(st.sampled_from([None, "one", "full"] if mode == "mask" else [None, "box"]))
    return {"files": {}, "mode": mode, "prior": prior, "state": given}


# ------------------------------------------------------------------ special files, env, report

SPECIAL_KINDS = ("fifo", "dev_zero", "dev_null", "directory", "socket")
SPECIAL_TARGETS = {  # command -> the files it reads that a case makes special (fuzz/worker.py runs it)
    "evaluate": ("config.yaml", "gt/psg.json", "pred.zip", "gt/panoptic/png", "zeroshot.json", "groups.yaml",
                 "train.json", "cache/entry", "cache/sgeval.key"),
    "report": ("results.json", "labels.yaml"),
    "convert": ("raw.pkl", "raw.npz", "raw.pytorch", "vocabulary.json", "gt/psg.json", "recipe.yaml", "raw.h5"),
}


@st.composite
def special(draw, base):
    """One file a command reads made a FIFO, a device, a directory or a socket."""
    command = draw(st.sampled_from(sorted(SPECIAL_TARGETS)))
    return {"files": {}, "command": command, "target": draw(st.sampled_from(SPECIAL_TARGETS[command])),
            "kind": draw(st.sampled_from(SPECIAL_KINDS))}


ENV_NAMES = ("SGEVAL_MAX_IMAGE_PIXELS", "SGEVAL_GT_CACHE_MIB", "SGEVAL_GT_MEMORY_MIB")
_ENV_VALUES = (st.sampled_from(["", " ", "0", "1", "64", "256", " 2048 ", "-1", "-0", "+3", "1e30", "1.5", "0x10", "lots",
                                "1_0", "\u0663", "\u00b2", "9" * 30, str(2 ** 30), str(2 ** 30 + 1), str(2 ** 40),
                                str(2 ** 40 + 1), "2 3", "\t7\n"])
               | st.integers(-2 ** 70, 2 ** 70).map(str)
               | st.text(alphabet="0123456789 -+.e_x\u0663\t", max_size=24))


@st.composite
def env(draw, base):
    """One to three of sgeval's environment variables set to hostile or valid values, for an
    evaluation, a report or the Open Images converter."""
    names = draw(st.lists(st.sampled_from(ENV_NAMES), min_size=1, max_size=3, unique=True))
    return {"files": {}, "env": {name: draw(_ENV_VALUES) for name in names},
            "command": draw(st.sampled_from(["evaluate", "evaluate", "report", "openimages"]))}


_MARKDOWN = st.sampled_from(["[click](javascript:alert(1))", "![x](http://example.com/p.png)", "<script>x</script>",
                             "a|b", "line\nbreak", "cr\rx", "\u2028", "**b**", "`c`", "~~s~~", "$x$", "&lt;",
                             "# h", "\\|", "<ins>", "x\x00y", "\x1b[31m"])


@st.composite
def report(draw, base):
    """The base results file with one to three values replaced (hostile numbers, names that
    Markdown or HTML would interpret, junk), read by sgeval report in one of its formats."""
    document = json.loads(base["results.json"])
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["name", "number", "json"]))
        section = draw(st.sampled_from(["metrics", "gt_relations_per_predicate"]))
        if not isinstance(document, dict):  # an earlier edit replaced the whole document
            break
        if kind == "name" and isinstance(document.get("config"), dict):
            document["config"]["model"] = draw(_MARKDOWN | _TEXT | st.builds(lambda a, b: a + b, _MARKDOWN, _TEXT))
        elif kind == "number" and isinstance(document.get(section), dict) and document[section]:
            key = draw(st.sampled_from(sorted(document[section])))
            document[section][key] = draw(st.sampled_from([10 ** 400, -(10 ** 400), 1e308, -1e308, 2 ** 53, 2 ** 53 + 1,
                                                           -1, 0.5, 1e-300, 5]))
        elif kind == "json":
            path = _paths(draw, document)
            if path:
                _set_path(document, path, draw(st.just(DELETE) | JSON_VALUES))
    argv = ["results.json", "--format", draw(st.sampled_from(["markdown", "latex", "csv"])), "--tables",
            draw(st.sampled_from(["main", "all"]))]
    return {"files": {"results.json": json.dumps(document).encode()}, "report_argv": argv}


STRATEGIES = {"pred_json": pred_json, "zip": zip_structure, "tiff": tiff, "gt_json": gt_json, "png": png,
              "yaml": yaml_config, "cli": cli, "pickle": raw_pickle, "crafted_pickle": crafted_pickle, "npz": npz,
              "torchfile": torch_file, "update": update, "state": state, "special": special, "env": env,
              "report": report}
