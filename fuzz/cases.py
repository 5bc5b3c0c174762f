"""Fuzz cases: a small valid workspace (GT, panoptic PNGs, a prediction ZIP, a config, a raw
converter pickle and npz) and, per reader, a hypothesis strategy that breaks one part of it.

A case is a plain dict (it is pickled to the worker and into the corpus):
    reader   which reader it aims at (READERS)
    files    {relative path: bytes} written over the base workspace
    argv     command-line arguments for the ``cli`` reader
    valid    True / False when the generator knows whether the input is valid, else None
"""

import collections
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
           "torchfile")

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
    return files


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


STRATEGIES = {"pred_json": pred_json, "zip": zip_structure, "tiff": tiff, "gt_json": gt_json, "png": png,
              "yaml": yaml_config, "cli": cli, "pickle": raw_pickle, "crafted_pickle": crafted_pickle, "npz": npz,
              "torchfile": torch_file}
