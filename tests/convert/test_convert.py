"""Converters (sgeval_convert/): raw model outputs of every family, built here with stand-in classes under
the real module paths and pickled as the models' tools/test.py does (protocol 2, numpy-1 global
names), are converted, evaluated with sgeval and checked against metrics computed directly from
the raw arrays. Plus the restricted unpickler, streaming (results handed out and released one by one,
large arrays left in the file for the workers), worker counts, the npz and per-image pickle layouts,
degenerate results and `make eval`'s conversion step."""

import collections
import importlib
import io
import json
import os
import pickle
import subprocess
import sys
import time
import types
import zipfile

import numpy as np
import pytest
import yaml
from click.testing import CliRunner
from conftest import ROOT, LiveTensor, assert_arrays_written, assert_same_results, evaluate_updates, sgeval, synth

from sgeval_convert import cli, common, hilo, openpsg, pairnet, unpickler
from sgeval_convert import recipe as convert_recipe

N_THINGS, N_STUFF, N_PREDICATES = 80, 53, 56
HEIGHT, WIDTH = 24, 32
OPENPSG_RESULT = "openpsg.models.relation_heads.approaches.relation_util.Result"
PAIRNET_RESULT = "pairnet.models.relation_heads.approaches.relation_util.Result"


# ---------------------------------------------------------------------------------------------
# Stand-ins for the classes a real pickle refers to
# ---------------------------------------------------------------------------------------------


def register(monkeypatch, dotted, **attributes):
    """Put a module (and its parent packages) into sys.modules so pickle can name its objects."""
    parts = dotted.split(".")
    for depth in range(1, len(parts) + 1):
        name = ".".join(parts[:depth])
        if name not in sys.modules:
            monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    for key, value in attributes.items():
        value.__module__, value.__qualname__ = dotted, key
        setattr(sys.modules[dotted], key, value)


class StandIns:
    """Result classes under both real paths, and torch tensors pickled the way torch pickles them."""

    def __init__(self, monkeypatch):
        self.results = {}
        for path in (OPENPSG_RESULT, PAIRNET_RESULT):
            module, _, name = path.rpartition(".")
            cls = type(name, (), {"__init__": lambda self, **fields: self.__dict__.update(fields)})
            register(monkeypatch, module, **{name: cls})
            self.results[path] = cls

        def _rebuild_tensor_v2(*args):
            raise AssertionError("a converter must never call torch")

        def _load_from_bytes(data):
            raise AssertionError("a converter must never call torch")

        register(monkeypatch, "torch._utils", _rebuild_tensor_v2=_rebuild_tensor_v2)
        register(monkeypatch, "torch.storage", _load_from_bytes=_load_from_bytes)

        class Storage:
            def __reduce__(self):
                return _load_from_bytes, (b"PK\x03\x04 torch.save bytes of a storage",)

        class Tensor:
            def __init__(self, *shape):
                self.shape = shape

            def __reduce__(self):
                strides = tuple(int(np.prod(self.shape[i + 1:])) for i in range(len(self.shape)))
                return _rebuild_tensor_v2, (Storage(), 0, self.shape, strides, False, collections.OrderedDict())

        self.Tensor = Tensor

    def pickle(self, path, results, result_class=OPENPSG_RESULT, numpy1=True):
        """Pickle [Result(**fields)] with protocol 2; numpy1 spells the globals as numpy 1.x did."""
        cls = self.results[result_class]
        data = pickle.dumps([cls(**fields) for fields in results], protocol=2)
        assert b"c_codecs\nencode\n" in data and b"cnumpy._core.multiarray\n_reconstruct\n" in data
        if numpy1:
            data = data.replace(b"cnumpy._core.multiarray\n", b"cnumpy.core.multiarray\n")
        path.write_bytes(data)
        return path


@pytest.fixture
def standins(monkeypatch):
    return StandIns(monkeypatch)


def write_npz(directory, results):
    directory.mkdir()
    for index, fields in enumerate(results):
        np.savez(directory / f"{index}.npz", **{k: v for k, v in fields.items() if isinstance(v, np.ndarray)})
    return directory


# ---------------------------------------------------------------------------------------------
# A synthetic PSG-like GT with the PSG vocabulary sizes, and raw outputs derived from it
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gt_case(tmp_path_factory):
    """(psg.json, panoptic root, evaluated images as dicts with masks, categories and GT triplets)."""
    root = tmp_path_factory.mktemp("gt")
    dataset = synth.make_dataset(np.random.default_rng(7), 9, HEIGHT, WIDTH, N_THINGS, N_STUFF, N_PREDICATES,
                                 test_fraction=0.8, max_segments=6, max_relations=6)
    gt_path = synth.write_gt(dataset, root)
    by_id = {image["image_id"]: image for image in dataset["images"]}
    evaluated = [by_id[image.image_id] for image in sgeval.read_gt(str(gt_path)).images]
    assert len(evaluated) >= 5 and len(evaluated) < sum(im["split"] == "test" for im in dataset["images"])
    return str(gt_path), str(root / "panoptic"), evaluated


def rel_dists(rng, predicates, zero_background=False):
    """(R, C + 1) float32 rows whose argmax over columns 1: is predicates[r] (0-based)."""
    rows = rng.random((len(predicates), N_PREDICATES + 1)) * 0.5
    rows[np.arange(len(predicates)), np.asarray(predicates, int) + 1] += 1.0 + rng.random(len(predicates))
    rows /= rows.sum(axis=1, keepdims=True)
    if zero_background:
        rows[:, 0] = 0
    return rows.astype(np.float32)


def relation_rows(rng, gt, n_spurious):
    """[(s, o, p)] over GT segment indices: the GT relations (p wrong 30% of the time) and spurious pairs."""
    rows = [(s, o, p if rng.random() < 0.7 else int(rng.integers(N_PREDICATES))) for s, o, p in gt["relations"]]
    n = len(gt["categories"])
    for _ in range(n_spurious):
        s, o = (int(v) for v in rng.choice(n, 2, replace=False))
        rows.append((s, o, int(rng.integers(N_PREDICATES))))
    return rows


def boxes_with_scores(masks, scores):
    return np.column_stack([np.array([synth.tight_box(m) for m in masks]), scores]).astype(np.float32)


def two_stage_result(rng, gt, kind=None, tensor=None):
    """IMP/MOTIFS-like: every ordered pair of the GT segments, rows sorted by triplet score."""
    masks, labels = np.asarray(gt["masks"]), np.asarray(gt["categories"]) + 1
    if kind == "empty":  # nothing detected: the detector's lists, with torch tensors in them
        return dict(labels=[tensor(0)], bboxes=[tensor(0, 5)], masks=[np.zeros((0, HEIGHT, WIDTH), bool)],
                    refine_bboxes=None, rel_pair_idxes=None, rel_dists=None, img_shape=[(HEIGHT, WIDTH, 3)])
    if kind == "single":  # one segment: the [[0, 0]] self-pair placeholder
        masks, labels = masks[:1], labels[:1]
    scores = rng.uniform(0.3, 1.0, len(labels)).astype(np.float32)
    pairs = np.array([(s, o) for s in range(len(labels)) for o in range(len(labels)) if s != o] or [(0, 0)])
    truth = {(s, o): p for s, o, p in gt["relations"] if rng.random() < 0.7}
    dists = rel_dists(rng, [truth.get((s, o), int(rng.integers(N_PREDICATES))) for s, o in pairs.tolist()])
    triplet = dists[:, 1:].max(axis=1) * scores[pairs[:, 0]] * scores[pairs[:, 1]]
    order = np.argsort(-triplet, kind="stable")
    return dict(labels=labels, masks=masks, refine_bboxes=boxes_with_scores(masks, scores),
                rel_pair_idxes=pairs[order], rel_dists=dists[order], rel_labels=dists[order, 1:].argmax(axis=1) + 1,
                triplet_scores=triplet[order], refine_labels=labels, pan_results=np.zeros((HEIGHT, WIDTH), np.int32))


def panoptic_placeholder():
    """One-stage 'nothing found': one all-ones int64 mask, label 1, no pairs."""
    return dict(labels=np.array([1]), masks=np.ones((1, HEIGHT, WIDTH), np.int64),
                refine_bboxes=np.zeros((1, 5), np.float32), rel_pair_idxes=np.zeros((0, 2), np.int32),
                rel_dists=np.zeros((0, N_PREDICATES + 1), np.float32), rel_labels=np.zeros(0, np.int64))


def panoptic_result(rng, gt, kind=None, tensor=None):
    """PSGTR panoptic: the GT segments once each; rows with a self-pair, repeated pairs and a query
    repeated with identical rel_dists but another rel_label; boxes not aligned with labels."""
    if kind == "empty":
        return panoptic_placeholder()
    rows = relation_rows(rng, gt, 3) + [(0, 0, 1)]
    dists = rel_dists(rng, [p for _, _, p in rows])
    labels_r = dists[:, 1:].argmax(axis=1) + 1
    repeat = int(rng.integers(len(rows)))  # the same query, its second-best predicate
    rows.append(rows[repeat])
    dists = np.vstack([dists, dists[repeat]])
    labels_r = np.append(labels_r, np.argsort(dists[repeat, 1:])[-2] + 1)
    rows.append(rows[0])  # a repeated pair, fresh distribution
    dists = np.vstack([dists, rel_dists(rng, [3])])
    labels_r = np.append(labels_r, 4)
    order = np.argsort(-dists[np.arange(len(rows)), labels_r], kind="stable")
    pairs = np.array([(s, o) for s, o, _ in rows])[order]
    return dict(labels=np.asarray(gt["categories"]) + 1, masks=np.asarray(gt["masks"]),
                refine_bboxes=rng.random((2 * len(rows), 5)).astype(np.float32),  # per query: not aligned
                rel_pair_idxes=pairs.astype(np.int32), rel_dists=dists[order], rel_labels=labels_r[order],
                rels=np.column_stack([pairs, labels_r[order]]), pan_results=np.zeros((HEIGHT, WIDTH), np.int64))


def complete_result(rng, gt, wrong_category=False, zero_background=False, n_rows=None):
    """Complete layout: T rows, masks of the T subjects then the T objects (copies of GT masks, one
    in a wrong category when asked), rows [[i, T + i]]."""
    rows = relation_rows(rng, gt, 4)
    if n_rows is not None:
        rows = [rows[i % len(rows)] for i in range(n_rows)]
    count = len(rows)
    masks = np.asarray(gt["masks"])[[s for s, _, _ in rows] + [o for _, o, _ in rows]]
    labels = np.asarray(gt["categories"])[[s for s, _, _ in rows] + [o for _, o, _ in rows]] + 1
    if wrong_category:
        labels[count] = labels[count] % (N_THINGS + N_STUFF) + 1
    dists = rel_dists(rng, [p for _, _, p in rows], zero_background)
    return masks, labels, dists, np.column_stack([np.arange(count), count + np.arange(count)])


def psgtr_complete_result(rng, gt, kind=None, tensor=None):
    masks, labels, dists, pairs = complete_result(rng, gt, wrong_category=True)
    scores = rng.uniform(0.3, 1.0, len(labels)).astype(np.float32)
    return dict(labels=labels, masks=masks, refine_bboxes=boxes_with_scores(masks, scores), rel_pair_idxes=pairs,
                rel_dists=dists, rel_labels=dists[:, 1:].argmax(axis=1) + 1)


def hilo_result(rng, gt, kind=None, tensor=None):
    """HiLo: the complete layout, rows sorted by rel_scores; box columns are normalised cxcywh."""
    if kind == "empty":
        return {**panoptic_placeholder(), "masks": np.full((1, HEIGHT, WIDTH), N_THINGS + N_STUFF, np.int64)}
    masks, labels, dists, pairs = complete_result(rng, gt, wrong_category=True)
    rel_scores = dists[:, 1:].max(axis=1)
    order = np.argsort(-rel_scores, kind="stable")
    count = len(order)
    masks = masks[np.r_[order, count + order]]
    labels = labels[np.r_[order, count + order]]
    scores = rng.uniform(0.3, 1.0, len(labels)).astype(np.float32)
    boxes = np.column_stack([rng.random((len(labels), 4)), scores]).astype(np.float32)
    return dict(labels=labels, masks=masks, refine_bboxes=boxes, rel_pair_idxes=pairs, rel_dists=dists[order],
                rel_labels=dists[order, 1:].argmax(axis=1) + 1, rel_scores=rel_scores[order])


def pairnet_result(rng, gt, kind=None, tensor=None):
    """Pair-Net: 100 rows, 200 masks (100 subjects, 100 objects; many identical), zero boxes,
    rel_dists column 0 = 0, rows [[i, 100 + i]]."""
    masks, labels, dists, pairs = complete_result(rng, gt, wrong_category=True, zero_background=True, n_rows=100)
    return dict(labels=labels, masks=masks, refine_bboxes=np.zeros((200, 5), np.float32), rel_pair_idxes=pairs,
                rel_dists=dists, rel_labels=dists[:, 1:].argmax(axis=1) + 1)


# ---------------------------------------------------------------------------------------------
# Metrics computed directly from the raw arrays (the documented rules, in plain Python)
# ---------------------------------------------------------------------------------------------


def expected_metrics(raws, evaluated, ks, graph_constraint, object_scores, predicate_source="rel_dists"):
    """R@k, ngR@k and InstR from the raw fields. Instance i maps to the GT segment with the same
    mask and category (GT masks never overlap, so that is the only IoU >= 0.5 candidate)."""
    totals = collections.defaultdict(float)
    for raw, gt in zip(raws, evaluated):
        truth = {tuple(r) for r in gt["relations"]}
        mapped, candidates = [], []
        pairs = raw.get("rel_pair_idxes")
        placeholder = raw.get("refine_bboxes") is None or (len(raw["labels"]) == 1 and not len(pairs))
        if not placeholder:
            for mask, label in zip(raw["masks"], raw["labels"]):
                same = [g for g, (m, c) in enumerate(zip(gt["masks"], gt["categories"]))
                        if c == label - 1 and np.array_equal(m, mask != 0)]
                mapped.append(same[0] if same else -1)
            dists = raw["rel_dists"]  # float32, like the object scores: products in float32 as OpenPSG
            scores = raw["refine_bboxes"][:, 4] if object_scores else None
            for row, (s, o) in enumerate(pairs.tolist()):
                predicate = int(raw["rel_labels"][row]) - 1 if predicate_source == "rel_labels" \
                    else int(np.argmax(dists[row, 1:]))
                candidates.append((row, s, o, predicate))
        matched = {g for g in mapped if g >= 0}
        totals["InstR"] += len(matched) / len(gt["categories"])
        selected, seen = [], set()
        for _, s, o, p in candidates:
            key = (s, o) if graph_constraint else (s, o, p)
            if key not in seen:
                seen.add(key)
                selected.append((s, o, p))
        ng = []
        for row, s, o, _ in candidates:
            for p in range(N_PREDICATES):
                score = dists[row, p + 1] if scores is None else (scores[s] * scores[o]) * dists[row, p + 1]
                ng.append((score, s, o, p))
        ng_order = [t[1:] for t in sorted(ng, key=lambda t: -t[0])]
        ng_unique = list(dict.fromkeys(ng_order))
        for k in ks:
            for name, chosen in (("R", selected[:k]), ("ngR", ng_unique[:k])):
                hits = {(mapped[s], mapped[o], p) for s, o, p in chosen if mapped[s] >= 0 and mapped[o] >= 0}
                totals[f"{name}@{k}"] += len(hits & truth) / len(truth)
    return {key: value / len(evaluated) for key, value in totals.items()}


def openpsg_expected(raws, evaluated, ks, object_scores):
    """R@k and ngR@k as OpenPSG's evaluator computes them from the raw fields (sgg_metrics.py):
    predicate = 1 + argmax of rel_dists[:, 1:], the first k rows as written; the NG list ranks
    every (row, predicate) by (subject score x object score) x probability in float32; a row hits
    every GT triplet whose predicate it has and whose subject and object masks it matches with
    IoU >= 0.5 and the same label; results without relation rows are left out of the mean."""
    totals, scored = collections.defaultdict(float), 0
    for raw, gt in zip(raws, evaluated):
        pairs = raw.get("rel_pair_idxes")
        if raw.get("refine_bboxes") is None or pairs is None or not len(pairs):
            continue
        scored += 1
        masks, labels = np.asarray(raw["masks"]) != 0, np.asarray(raw["labels"]) - 1

        def ok(i, g):
            inter = np.count_nonzero(masks[i] & gt["masks"][g])
            return labels[i] == gt["categories"][g] and inter / np.count_nonzero(masks[i] | gt["masks"][g]) >= 0.5

        dists = raw["rel_dists"]
        rows = [(s, o, int(np.argmax(dists[r, 1:]))) for r, (s, o) in enumerate(pairs.tolist())]
        scores = raw["refine_bboxes"][:, 4] if object_scores else None
        ranked = sorted(((dists[r, p + 1] if scores is None else (scores[s] * scores[o]) * dists[r, p + 1]), r, p)
                        for r, (s, o, _) in enumerate(rows) for p in range(N_PREDICATES))
        ranked.sort(key=lambda t: -t[0])
        ng = [(rows[r][0], rows[r][1], p) for _, r, p in ranked]
        truth = {tuple(t) for t in gt["relations"]}
        for k in ks:
            for name, chosen in (("R", rows[:k]), ("ngR", ng[:k])):
                hits = {t for t in truth if any(p == t[2] and ok(s, t[0]) and ok(o, t[1]) for s, o, p in chosen)}
                totals[f"{name}@{k}"] += len(hits) / len(truth)
    return {key: value / scored for key, value in totals.items()}


def convert_one(module, raw, options=common.Options()):
    """One raw result (dict or RawResult) through a family's per-image conversion."""
    result = raw if isinstance(raw, unpickler.RawResult) else unpickler.RawResult(raw)
    args = (result, types.SimpleNamespace(height=HEIGHT, width=WIDTH), "img", N_THINGS + N_STUFF, N_PREDICATES)
    if module is openpsg:
        return openpsg.convert_image(*args, options)
    return common.convert_image(*args, module.RULES, options)


def evaluate(gt_case, pred, protocol):
    gt_path, gt_seg, _ = gt_case
    return sgeval.evaluate(sgeval.make_config({"gt": gt_path, "gt_seg": gt_seg, "pred": str(pred),
                                               "protocol": protocol, "k": ["20", "50", "100"],
                                               "metrics": ["R", "ngR", "InstR"]}))


def run_module(module, *args):
    """``python -m <module> args`` from the repository root, as the documentation says to run it."""
    return run_command("-m", module, *args)


def run_command(*args, cwd=ROOT):
    """``python args`` in cwd (the repository root by default)."""
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=cwd, timeout=300)


def read_records(pred):
    with zipfile.ZipFile(pred) as archive:
        return {record["id"]: record for record in json.loads(archive.read("triplets.json"))["images"]}


FAMILIES = {  # family: (builder, converter, kwargs, result class, protocol, graph constraint, scores)
    "two-stage": (two_stage_result, openpsg.convert, {}, OPENPSG_RESULT, "unique", True, True),
    "psgtr-panoptic": (panoptic_result, openpsg.convert, {}, OPENPSG_RESULT, "unique", True, False),
    "psgtr-complete": (psgtr_complete_result, openpsg.convert, {}, OPENPSG_RESULT, "multimpo", False, True),
    "hilo": (hilo_result, hilo.convert, {}, OPENPSG_RESULT, "multimpo", False, True),
    "pairnet": (pairnet_result, pairnet.convert, {}, PAIRNET_RESULT, "multimpo", False, False),
}
SPECIAL = {0: "empty", 1: "single"}  # the first evaluated image is empty, the second has one segment


@pytest.mark.parametrize("family", list(FAMILIES))
def test_family_converts_and_evaluates_like_its_raw_rows(tmp_path, standins, gt_case, family):
    build, convert, kwargs, result_class, protocol, graph_constraint, scores = FAMILIES[family]
    rng = np.random.default_rng(len(family))
    evaluated = gt_case[2]
    raws = [build(rng, gt, SPECIAL.get(index), standins.Tensor) for index, gt in enumerate(evaluated)]
    raw = standins.pickle(tmp_path / "results.pkl", raws, result_class)
    assert b"cnumpy.core.multiarray\n_reconstruct\n" in raw.read_bytes() and b"numpy._core" not in raw.read_bytes()
    summary = convert(str(raw), str(tmp_path / "pred.zip"), gt=gt_case[0], **kwargs)
    assert summary["images"] == len(evaluated)
    results = evaluate(gt_case, tmp_path / "pred.zip", protocol)
    assert results["images"]["evaluated"] == len(evaluated) and results["images"]["missing_predictions"] == 0
    expected = expected_metrics(raws, evaluated, (20, 50, 100), graph_constraint, scores)
    assert {key: results["metrics"][key] for key in expected} == pytest.approx(expected, abs=1e-12)
    legacy = evaluate(gt_case, tmp_path / "pred.zip", "openpsg")
    expected_legacy = openpsg_expected(raws, evaluated, (20, 50, 100), scores)
    assert {key: legacy["metrics"][key] for key in expected_legacy} == pytest.approx(expected_legacy, abs=1e-12)
    assert legacy["images_left_out"] == sum(1 for raw in raws if raw.get("rel_pair_idxes") is None
                                            or not len(raw["rel_pair_idxes"]))
    assert 0 < expected["R@20"] < 1 and expected["ngR@100"] > 0
    records = read_records(tmp_path / "pred.zip")
    first, second = (records[gt["image_id"]] for gt in evaluated[:2])
    if family in ("two-stage", "psgtr-panoptic", "hilo"):  # the degenerate first image: an empty record
        assert first["instances"] == [] and first["triplets"] == [] and "seg_filename" not in first
    if family == "two-stage":  # one segment: kept with its [[0, 0]] row, which OpenPSG counts as a relation row
        assert len(second["instances"]) == 1 and [t[:2] for t in second["triplets"]] == [[0, 0]]
        assert summary["self_pairs"] == 1 and len(second["ng_triplets"]) == N_PREDICATES
        assert summary["layout:two-stage"] == len(evaluated)
    if family == "psgtr-panoptic":
        assert summary["layout:panoptic"] == len(evaluated)
        assert all(len(r["triplets"]) == len(raw_["rel_pair_idxes"]) for r, raw_ in zip(records.values(), raws))
    if family == "psgtr-complete":
        assert summary["layout:complete"] == len(evaluated)
    has_scores = all("score" in i for r in records.values() for i in r["instances"])
    assert has_scores == scores


@pytest.mark.parametrize("family", ["two-stage", "psgtr-panoptic"])
def test_what_the_converters_keep_for_openpsg_leaves_the_fair_protocols_unchanged(tmp_path, standins, gt_case,
                                                                                   family):
    """Self-pair rows and repeats in ng_triplets are written for openpsg; without them (what the
    converters wrote before) every fair protocol gives the same metrics."""
    build, convert, kwargs, result_class, *_ = FAMILIES[family]
    rng = np.random.default_rng(len(family))
    raws = [build(rng, gt, SPECIAL.get(index), standins.Tensor) for index, gt in enumerate(gt_case[2])]
    convert(str(standins.pickle(tmp_path / "r.pkl", raws, result_class)), str(tmp_path / "kept.zip"), gt=gt_case[0])
    with zipfile.ZipFile(tmp_path / "kept.zip") as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    data = json.loads(members["triplets.json"])
    removed = 0
    for record in data["images"]:
        if family == "two-stage":
            record["triplets"] = [t for t in record["triplets"] if t[0] != t[1]]
        ng = [t for t in record["ng_triplets"] if family != "two-stage" or t[0] != t[1]]
        removed += len(record["ng_triplets"]) - len(ng)
        record["ng_triplets"] = [list(t) for t in dict.fromkeys(map(tuple, ng))]
        removed += len(ng) - len(record["ng_triplets"])
    assert removed > 0  # two-stage: the [[0, 0]] row's entries; panoptic: repeats of a repeated pair
    members["triplets.json"] = json.dumps(data).encode()
    with zipfile.ZipFile(tmp_path / "stripped.zip", "w") as archive:
        for name, payload in members.items():
            archive.writestr(name, payload)
    fair = ["unique", "singlempo", "multimpo"]
    gt_path, gt_seg, _ = gt_case
    kept, stripped = (sgeval.evaluate(sgeval.make_config({"gt": gt_path, "gt_seg": gt_seg, "pred": str(tmp_path / name),
                                                          "protocols": fair, "imr_k": ["1", "10"]}))
                      for name in ("kept.zip", "stripped.zip"))
    for protocol in fair:
        assert kept["by_protocol"][protocol]["metrics"] == stripped["by_protocol"][protocol]["metrics"], protocol


def test_instances_boxes_and_scores_follow_each_family_rule(tmp_path, standins, gt_case):
    rng = np.random.default_rng(3)
    gt = gt_case[2][2]
    cases = {  # family result -> where its boxes come from
        "two-stage": (two_stage_result(rng, gt), openpsg, "raw"),
        "complete": (psgtr_complete_result(rng, gt), openpsg, "raw"),
        "panoptic": (panoptic_result(rng, gt), openpsg, "masks"),  # boxes not aligned with labels
        "hilo": (hilo_result(rng, gt), hilo, "masks"),  # boxes not image-space xyxy
        "pairnet": (pairnet_result(rng, gt), pairnet, "masks"),  # boxes all zero
    }
    for name, (raw, module, boxes) in cases.items():
        record, out_masks, _ = convert_one(module, raw)
        expected = [[float(v) for v in b[:4]] for b in raw["refine_bboxes"]] if boxes == "raw" else \
            [[float(v) for v in synth.tight_box(m)] for m in raw["masks"]]
        assert [i["bbox"] for i in record["instances"]] == expected, name
        assert [i["category"] for i in record["instances"]] == (raw["labels"] - 1).tolist()
        assert out_masks.dtype == bool and out_masks.shape == raw["masks"].shape


# ---------------------------------------------------------------------------------------------
# A test loop: each family's image_arrays, the same rows as the file converter writes
# ---------------------------------------------------------------------------------------------

MODULES = {"two-stage": openpsg, "psgtr-panoptic": openpsg, "psgtr-complete": openpsg, "hilo": hilo,
           "pairnet": pairnet}


def live_result(standins, result_class, fields):
    """The Result a model hands its test loop: the fields as attributes, arrays as torch tensors
    (the pickled tensor stand-ins as tensors of their shape)."""
    def live(value):
        if isinstance(value, list):
            return [live(item) for item in value]
        if isinstance(value, standins.Tensor):
            return LiveTensor(np.zeros(value.shape, np.float32))
        return LiveTensor(value) if isinstance(value, np.ndarray) else value
    return standins.results[result_class](**{key: live(value) for key, value in fields.items()})


def live_updates(standins, gt_case, family):
    """(the raw results, [(image id, image_arrays of the live Result)]) of a family's fixture."""
    build, _, _, result_class, *_ = FAMILIES[family]
    rng = np.random.default_rng(len(family))
    raws = [build(rng, gt, SPECIAL.get(index), standins.Tensor) for index, gt in enumerate(gt_case[2])]
    truth = sgeval.read_gt(gt_case[0])
    sizes = len(truth.object_classes), len(truth.predicate_classes)
    updates = [(image.image_id, MODULES[family].image_arrays(live_result(standins, result_class, raw), image, *sizes))
               for raw, image in zip(raws, truth.images)]
    return raws, updates


@pytest.mark.parametrize("family", list(FAMILIES))
def test_image_arrays_are_the_rows_the_file_converter_writes(tmp_path, standins, gt_case, family):
    _, convert, kwargs, result_class, *_ = FAMILIES[family]
    raws, updates = live_updates(standins, gt_case, family)
    convert(str(standins.pickle(tmp_path / "r.pkl", raws, result_class)), str(tmp_path / "pred.zip"), gt=gt_case[0],
            **kwargs)
    truth = sgeval.read_gt(gt_case[0])
    source, written = sgeval.read_predictions(str(tmp_path / "pred.zip"), len(truth.object_classes),
                                              len(truth.predicate_classes), "box")
    try:
        for (image_id, arrays), image in zip(updates, truth.images):
            assert set(arrays) == {"labels", "triplets", "ng_triplets", "masks", "boxes", "scores"} | (
                {"panoptic"} if MODULES[family] is openpsg else set())  # openpsg: pan_results (test_convert_pq.py)
            assert_arrays_written(arrays, written[image_id], source, image)
    finally:
        source.close()
    from_dict = MODULES[family].image_arrays(raws[2], truth.images[2], len(truth.object_classes),
                                             len(truth.predicate_classes))  # the fields as a dict of numpy arrays
    live = updates[2][1]
    assert all(np.array_equal(from_dict[key], live[key]) if live[key] is not None else from_dict[key] is None
               for key in live if key != "panoptic")
    assert all(np.array_equal(mine, theirs) for mine, theirs in zip(from_dict.get("panoptic") or (),
                                                                    live.get("panoptic") or ()))
    empty = [image_id for image_id, arrays in updates if not len(arrays["labels"])]
    assert empty == ([truth.images[0].image_id] if family in ("two-stage", "psgtr-panoptic", "hilo") else [])


@pytest.mark.parametrize("family", list(FAMILIES))
def test_an_evaluator_updated_in_a_test_loop_gives_the_converted_file_s_results(tmp_path, standins, gt_case, family):
    _, convert, kwargs, result_class, protocol, *_ = FAMILIES[family]
    raws, updates = live_updates(standins, gt_case, family)
    convert(str(standins.pickle(tmp_path / "r.pkl", raws, result_class)), str(tmp_path / "pred.zip"), gt=gt_case[0],
            **kwargs)
    config = {"gt": gt_case[0], "gt_seg": gt_case[1], "protocol": protocol,
              "protocols": ["unique", "singlempo", "multimpo", "openpsg"], "k": ["20", "50", "x1"]}
    from_file = sgeval.evaluate(sgeval.make_config({**config, "pred": str(tmp_path / "pred.zip")}))
    assert_same_results(evaluate_updates(config, updates), from_file)


def test_image_arrays_problems_name_the_image_and_field(standins, gt_case):
    truth = sgeval.read_gt(gt_case[0])
    image, sizes = truth.images[2], (len(truth.object_classes), len(truth.predicate_classes))
    raw = psgtr_complete_result(np.random.default_rng(1), gt_case[2][2])
    small = {**raw, "masks": LiveTensor(raw["masks"][:, :-1])}
    with pytest.raises(common.ConvertError, match=f"^image {image.image_id}: field 'masks' has shape"):
        openpsg.image_arrays(small, image, *sizes)
    with pytest.raises(common.ConvertError, match="layout 'x' is not one of"):
        openpsg.image_arrays(raw, image, *sizes, layout="x")
    with pytest.raises(common.ConvertError, match="predicate_source 'x' is not one of"):
        hilo.image_arrays(raw, image, *sizes, predicate_source="x")
    with pytest.raises(common.ConvertError, match="a result must be a Result .* not list"):
        pairnet.image_arrays([raw], image, *sizes)


# ---------------------------------------------------------------------------------------------
# Rules: predicate source, ng_triplets, writer
# ---------------------------------------------------------------------------------------------


def test_predicate_source_rel_labels_separates_a_repeated_query(tmp_path, standins, gt_case):
    rng = np.random.default_rng(11)
    raw = panoptic_result(rng, gt_case[2][2])
    legacy, _, notes = convert_one(openpsg, raw)
    labelled, _, _ = convert_one(openpsg, raw, common.Options(predicate_source="rel_labels"))
    assert [t[2] for t in labelled["triplets"]] == (raw["rel_labels"] - 1).tolist()
    assert np.array_equal(legacy["triplets"][:, 2], raw["rel_dists"][:, 1:].argmax(axis=1))
    legacy_rows = [tuple(t) for t in legacy["triplets"].tolist()]
    assert len(set(legacy_rows)) < len(legacy_rows)  # the repeated query gives the same triplet twice ...
    assert notes["rel_labels_differ"] == 1  # ... while rel_labels names its second-best predicate
    zero_based = raw["rel_labels"] - raw["rel_labels"].min()  # holds a 0: not what the models write
    bad = unpickler.RawResult({**raw, "rel_labels": zero_based})
    with pytest.raises(common.ConvertError, match="1-based like the columns of rel_dists"):
        convert_one(openpsg, bad, common.Options(predicate_source="rel_labels"))


def test_ng_triplets_rank_like_openpsg_and_keep_the_top_of_every_predicate():
    rng = np.random.default_rng(5)
    pairs = rng.integers(0, 8, size=(30, 2))
    pairs[3] = pairs[2]  # a repeated pair: its (s, o, p) come twice, each where it ranks
    probabilities = rng.random((30, N_PREDICATES)).astype(np.float32)
    object_scores = rng.random(8).astype(np.float32)
    got = [tuple(t) for t in common.rank_ng(pairs, probabilities, object_scores, ng_top=100,
                                             ng_per_predicate=5).tolist()]
    # OpenPSG's score, float32: (subject score x object score) x probability
    candidates = sorted((((object_scores[pairs[r, 0]] * object_scores[pairs[r, 1]]) * probabilities[r, p]), r, p)
                        for r in range(30) for p in range(N_PREDICATES))
    candidates.sort(key=lambda t: -t[0])  # stable: row, then predicate on ties
    ranked = [(int(pairs[r, 0]), int(pairs[r, 1]), p) for _, r, p in candidates]
    unique = list(dict.fromkeys(ranked))
    prefix_end = ranked.index(unique[100])  # the 101st distinct triplet
    per_predicate = collections.Counter(t[2] for t in unique[:100])
    tail = []
    for triplet in unique[100:]:
        if per_predicate[triplet[2]] < 5:
            tail.append(triplet)
        per_predicate[triplet[2]] += 1
    assert got == ranked[:prefix_end] + tail
    assert len(got) > len(set(got[:prefix_end])) == 100  # repeats kept in the prefix
    assert list(dict.fromkeys(got)) == unique[:100] + tail  # what distinct-triplet protocols read


def ng_reference(pairs, probabilities, object_scores, ng_top, ng_per_predicate):
    """rank_ng's docstring in plain Python: every (row, predicate) by score descending, ties in row
    then predicate order; every entry up to the first ng_top distinct triplets, then the first
    occurrence of each predicate's first ng_per_predicate distinct triplets."""
    entries = []
    for r in range(len(pairs)):
        for p in range(probabilities.shape[1]):
            score = probabilities[r, p] if object_scores is None else \
                (object_scores[pairs[r, 0]] * object_scores[pairs[r, 1]]) * probabilities[r, p]
            entries.append((-float(score), r, p, (int(pairs[r, 0]), int(pairs[r, 1]), p)))
    ranked = [entry[3] for entry in sorted(entries)]
    seen, per_predicate, kept = set(), collections.Counter(), []
    for triplet in ranked:
        new = triplet not in seen
        seen.add(triplet)
        if len(seen) <= ng_top:
            kept.append(triplet)
        elif new and per_predicate[triplet[2]] < ng_per_predicate:
            kept.append(triplet)
        per_predicate[triplet[2]] += new
    return kept


def test_ng_triplets_equal_the_plain_ranking_with_ties_and_repeated_pairs():
    """rank_ng sorts only the entries that can be kept; on random cases with many tied scores,
    repeated pairs, zero scores, ng_top and ng_per_predicate from 0 up (and beyond the entries) it
    keeps what ranking every entry keeps."""
    rng = np.random.default_rng(11)
    for case in range(400):
        n_rows, n_predicates, n_boxes = int(rng.integers(0, 40)), int(rng.integers(1, 7)), int(rng.integers(1, 9))
        pairs = rng.integers(0, n_boxes, (n_rows, 2))
        if n_rows > 3 and case % 2:
            pairs[rng.integers(0, n_rows, n_rows // 2)] = pairs[0]  # many repeats of one pair
        levels = int(rng.integers(1, 5))
        probabilities = (rng.integers(0, levels + 1, (n_rows, n_predicates)) / levels if case % 3 else
                         rng.random((n_rows, n_predicates))).astype(np.float32)
        object_scores = None if case % 4 == 0 else (rng.integers(0, 3, n_boxes) / 2).astype(np.float32)
        ng_top, ng_per_predicate = int(rng.integers(0, 25)), int(rng.integers(0, 6))
        got = common.rank_ng(pairs, probabilities, object_scores, ng_top, ng_per_predicate)
        assert got.dtype == np.int64 and got.shape[1:] == (3,)
        assert [tuple(t) for t in got.tolist()] == ng_reference(pairs, probabilities, object_scores, ng_top,
                                                                ng_per_predicate), case


def test_written_members_are_those_of_sgeval_write_predictions(tmp_path, standins, gt_case):
    rng = np.random.default_rng(2)
    raws = [pairnet_result(rng, gt) for gt in gt_case[2]]
    pairnet.convert(str(standins.pickle(tmp_path / "r.pkl", raws, PAIRNET_RESULT)), str(tmp_path / "c.zip"),
                    gt=gt_case[0])
    with zipfile.ZipFile(tmp_path / "c.zip") as archive:
        ours = {name: archive.read(name) for name in archive.namelist()}
    records = json.loads(ours["triplets.json"])["images"]
    images = []
    for record, raw in zip(records, raws):
        images.append({**record, "masks": raw["masks"]})
    sgeval.write_predictions(tmp_path / "w.zip", images)
    with zipfile.ZipFile(tmp_path / "w.zip") as archive:
        theirs = {name: archive.read(name) for name in archive.namelist()}
    provenance = json.loads(ours.pop(common.PROVENANCE))
    assert provenance["family"] == "pairnet" and provenance["options"]["ng_top"] == 1000
    assert ours == theirs
    with zipfile.ZipFile(tmp_path / "c.zip") as archive:
        assert {info.date_time for info in archive.infolist()} == {(1980, 1, 1, 0, 0, 0)}


# ---------------------------------------------------------------------------------------------
# The restricted unpickler
# ---------------------------------------------------------------------------------------------


def test_both_numpy_spellings_and_torch_tensors_load_as_data(tmp_path, standins):
    fields = dict(labels=np.array([3, 1]), masks=np.ones((2, 2, 3), bool), score=np.float32(0.5),
                  empty=standins.Tensor(0, 5), full=standins.Tensor(2, 2), raw=b"", text="x")
    for numpy1 in (True, False):
        path = standins.pickle(tmp_path / f"r{numpy1}.pkl", [fields], numpy1=numpy1)
        assert (b"numpy.core.multiarray" in path.read_bytes()) == numpy1
        (result,) = common.load_pickle(path)
        assert isinstance(result, unpickler.RawResult)
        assert np.array_equal(result.labels, [3, 1]) and result.masks.dtype == bool and result.score == 0.5
        assert result.empty.shape == (0, 5) and isinstance(result.full, unpickler.TorchTensor)
        assert result.full.shape == (2, 2) and result.raw == b"" and result.text == "x"
        with pytest.raises(common.ConvertError, match="field 'full' is a torch tensor of shape"):
            common.field(result, "full", "where")


class Evil:
    def __init__(self, call, *args):
        self.call, self.args = call, args

    def __reduce__(self):
        return self.call, self.args


@pytest.mark.parametrize("payload, named", [  # protocol 2 uses Python 2 names: __builtin__, commands
    (lambda marker: Evil(os.system, f"touch {marker}"), f"'{os.system.__module__}.system'"),
    (lambda marker: Evil(eval, f"open({str(marker)!r}, 'w')"), "'__builtin__.eval'"),
    (lambda marker: Evil(exec, f"open({str(marker)!r}, 'w')"), "'__builtin__.exec'"),
    (lambda marker: Evil(subprocess.Popen, ["touch", str(marker)]), "'commands.Popen'"),
])
def test_a_pickle_that_would_run_code_is_refused(tmp_path, payload, named):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pkl"
    path.write_bytes(pickle.dumps([payload(marker)], protocol=2))
    with pytest.raises(common.ConvertError) as error:
        common.load_pickle(path)
    assert named in str(error.value) and "refusing to load" in str(error.value) and str(path) in str(error.value)
    assert not marker.exists()


def test_other_refusals_persistent_ids_codecs_and_unknown_classes(tmp_path):
    class Saver(pickle.Pickler):
        def persistent_id(self, obj):
            return "storage0" if isinstance(obj, bytes) and obj == b"data" else None

    buffer = io.BytesIO()
    Saver(buffer, protocol=2).dump([b"data"])
    (tmp_path / "p.pkl").write_bytes(buffer.getvalue())
    with pytest.raises(common.ConvertError, match="persistent id"):
        common.load_pickle(tmp_path / "p.pkl")
    (tmp_path / "c.pkl").write_bytes(b"\x80\x02c_codecs\nencode\nX\x03\x00\x00\x00abcX\x05\x00\x00\x00rot13\x86R.")
    with pytest.raises(common.ConvertError, match="rot13"):
        common.load_pickle(tmp_path / "c.pkl")
    (tmp_path / "m.pkl").write_bytes(b"\x80\x02cmmdet.core\nBitmapMasks\n)\x81.")
    with pytest.raises(common.ConvertError, match="'mmdet.core.BitmapMasks'"):
        common.load_pickle(tmp_path / "m.pkl")
    (tmp_path / "t.pkl").write_bytes(b"\x80\x02ctorch\nload\nX\x04\x00\x00\x00x.pt\x85R.")  # inert, never called
    with pytest.raises(common.ConvertError, match="holds a TorchObject"):
        common.load_pickle(tmp_path / "t.pkl")
    (tmp_path / "x.pkl").write_bytes(b"\x80\x02]q\x00(}q\x01X\x09\x00\x00\x00lab")  # truncated in result 0
    with pytest.raises(common.ConvertError, match="cannot read the pickle at result 0"):
        common.load_pickle(tmp_path / "x.pkl")


class WithState:
    """Pickles as call(*args) followed by a BUILD of state: a crafted object for the unpickler."""

    def __init__(self, call, args, state):
        self.call, self.args, self.state = call, args, state

    def __reduce__(self):
        return self.call, self.args, self.state


CRAFTED_NUMPY = {  # each once crashed numpy or allocated gigabytes through the allowed globals
    "dtype state with sub-array fields": WithState(np.dtype, ("f8", False, True),
                                                   (3, "<", (np.dtype("f4"), (2,)), None, None, 8, 1, 0)),
    "void dtype": WithState(np.dtype, ("V8", False, True), (3, "|", None, None, None, 8, 1, 0)),
    "scalar of a sub-array dtype": Evil(np.ndarray.__reduce__(np.zeros(1))[0], np.ndarray, (0,), b"b"),
    "ndarray called with a shape": Evil(np.ndarray, (10**10,), np.uint8),
    "bytearray(n)": Evil(bytearray, 3 * 10**9),
    "bytes(n)": Evil(bytes, 3 * 10**9),
    "array state larger than its data": WithState(np.ndarray.__reduce__(np.zeros(1))[0], (np.ndarray, (0,), b"b"),
                                                  (1, (10**9,), np.dtype("f8"), False, b"12345678")),
    "array of objects": np.array([1, "x"], object),
    # fields numpy's reconstructors reject, or read as another type: refused as well (campaign finds)
    "array state of another version": WithState(np.ndarray.__reduce__(np.zeros(1))[0], (np.ndarray, (0,), b"b"),
                                                (255, (1,), np.dtype("f8"), False, b"12345678")),
    "dtype flags of an object dtype": WithState(np.dtype, ("u1", False, True), (3, "|", None, None, None, -1, -1, 155)),
    "array typecode other than numpy's": WithState(np.ndarray.__reduce__(np.zeros(1))[0], (np.ndarray, (0,), b"k"),
                                                   (1, (1,), np.dtype("f8"), False, b"12345678")),
    "structured dtype inside a set": {(False, np.dtype([("a", "f4")]))},
    "a state given to bytes": WithState(bytes, (b"",), b""),  # pickle's Python unpickler ignored it, C refuses it
}


@pytest.mark.parametrize("name", list(CRAFTED_NUMPY))
def test_crafted_numpy_data_is_refused_before_numpy_sees_it(tmp_path, name):
    """Run in a child process: a crash there fails the test instead of killing the run."""
    path = tmp_path / "crafted.pkl"
    path.write_bytes(pickle.dumps([{"labels": CRAFTED_NUMPY[name]}], protocol=2))
    code = ("import resource, sys; from sgeval_convert import common; "
            "resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30)); "
            f"common.load_pickle({str(path)!r})")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "ConvertError" in done.stderr and "refusing to load" in done.stderr, \
        (done.returncode, done.stderr[-800:])


def test_plain_numpy_data_still_loads(tmp_path):
    values = [np.arange(6, dtype=">i4").reshape(2, 3), np.asfortranarray(np.ones((2, 3), bool)), np.float32(2.5),
              np.zeros((0, 4)), np.uint8(7),
              np.random.default_rng(0).random((300, 300)) < 0.5,  # over 64 KiB, ASCII bytes: read without decoding
              np.random.default_rng(1).integers(0, 256, (300, 300), np.uint8)]  # over 64 KiB, not ASCII
    path = tmp_path / "plain.pkl"
    for protocol in (2, 4, 5):
        path.write_bytes(pickle.dumps([{"values": values}], protocol=protocol))
        loaded = common.load_pickle(path)[0].get("values")
        for got, want in zip(loaded, values):
            assert np.array_equal(got, want) and got.dtype == want.dtype


def test_a_field_named_like_a_method_does_not_shadow_it(tmp_path):
    path = tmp_path / "r.pkl"
    path.write_bytes(pickle.dumps([{"get": np.zeros(1), "fields": 3, "labels": np.array([1])}], protocol=2))
    (result,) = common.load_pickle(path)
    assert result.get("labels").tolist() == [1] and result.get("get").tolist() == [0.0] and result.get("fields") == 3


def test_npz_whose_headers_declare_more_than_they_hold_or_may(tmp_path, monkeypatch):
    """A .npy header claiming 10**9 doubles in a few bytes, and (with the limit lowered) a
    compressed array inflating past MAX_NPZ_BYTES: one problem each, before numpy allocates."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f8", "fortran_order": False, "shape": (10**9,)})
    with zipfile.ZipFile(tmp_path / "lying.npz", "w") as archive:
        archive.writestr("masks.npy", b"\x93NUMPY\x01\x00" + header.getvalue()[8:] + b"\0" * 16)
    with pytest.raises(common.ConvertError, match="declares 8000000000 bytes"):
        common.load_npz(tmp_path / "lying.npz")
    np.savez_compressed(tmp_path / "bomb.npz", masks=np.zeros(1 << 20, np.uint8))
    monkeypatch.setattr(common, "MAX_NPZ_BYTES", 1000)
    with pytest.raises(common.ConvertError, match="MAX_NPZ_BYTES"):
        common.load_npz(tmp_path / "bomb.npz")


# ---------------------------------------------------------------------------------------------
# Bad raw outputs, the npz layout, the command line and `make eval`'s conversion step
# ---------------------------------------------------------------------------------------------


def test_count_mismatch_and_bad_fields_fail_loudly_and_write_nothing(tmp_path, standins, gt_case):
    rng = np.random.default_rng(4)
    raws = [psgtr_complete_result(rng, gt) for gt in gt_case[2]]
    out = tmp_path / "out.zip"
    short = standins.pickle(tmp_path / "short.pkl", raws[:-1])
    with pytest.raises(common.ConvertError, match=rf"holds {len(raws) - 1} results, but .* has {len(raws)} evaluated"):
        openpsg.convert(str(short), str(out), gt=gt_case[0])
    raws[1] = {**raws[1], "masks": raws[1]["masks"][:, :-1]}
    raws[2] = {**raws[2], "labels": raws[2]["labels"] * 0}
    raws[3] = {**raws[3], "rel_dists": raws[3]["rel_dists"][:, 1:]}
    bad = standins.pickle(tmp_path / "bad.pkl", raws)
    with pytest.raises(common.ConvertError) as error:
        openpsg.convert(str(bad), str(out), gt=gt_case[0])
    ids = [gt["image_id"] for gt in gt_case[2]]
    assert error.value.problems == [
        f"{bad}: result 1 (image {ids[1]}): field 'masks' has shape {raws[1]['masks'].shape}; expected "
        f"({len(raws[1]['labels'])}, {HEIGHT}, {WIDTH}) (one mask per label, GT image size)",
        f"{bad}: result 2 (image {ids[2]}): field 'labels' holds 0 at position 0 (and "
        f"{len(raws[2]['labels']) - 1} more); labels are 1-based object classes 1..{N_THINGS + N_STUFF}",
        f"{bad}: result 3 (image {ids[3]}): field 'rel_dists' has shape {raws[3]['rel_dists'].shape}; expected "
        f"({len(raws[3]['rel_dists'])}, {N_PREDICATES + 1}) (one row per pair; column 0 = no relation, then the "
        f"{N_PREDICATES} predicates)"]
    assert list(tmp_path.glob("out.zip*")) == []
    with pytest.raises(common.ConvertError, match="must be a .zip"):
        openpsg.convert(str(short), str(tmp_path / "out.json"), gt=gt_case[0])


def test_npz_directory_streams_and_equals_the_pickle(tmp_path, standins, gt_case):
    rng = np.random.default_rng(9)
    raws = [pairnet_result(rng, gt) for gt in gt_case[2]]
    pairnet.convert(str(standins.pickle(tmp_path / "r.pkl", raws, PAIRNET_RESULT)), str(tmp_path / "p.zip"),
                    gt=gt_case[0])
    directory = write_npz(tmp_path / "npz", raws)
    pairnet.convert(str(directory), str(tmp_path / "n.zip"), gt=gt_case[0])
    assert read_records(tmp_path / "p.zip") == read_records(tmp_path / "n.zip")
    (directory / "2.npz").rename(directory / "x2.npz")
    with pytest.raises(common.ConvertError, match=r"expected 0.npz \.\.\. .*missing 2.npz.*unexpected x2.npz"):
        pairnet.convert(str(directory), str(tmp_path / "n.zip"), gt=gt_case[0])
    (directory / "x2.npz").rename(directory / "2.npz")
    (directory / "3.npz").write_bytes(b"not an npz")
    with pytest.raises(common.ConvertError) as error:
        pairnet.convert(str(directory), str(tmp_path / "n.zip"), gt=gt_case[0])
    assert error.value.problems[0].startswith(f"{directory / '3.npz'}: cannot read the npz file")


def test_npz_without_optional_fields_is_not_mistaken_for_an_empty_two_stage_result(tmp_path, gt_case):
    rng = np.random.default_rng(12)
    raws = [{k: v for k, v in panoptic_result(rng, gt).items() if k != "refine_bboxes"} for gt in gt_case[2]]
    summary = openpsg.convert(str(write_npz(tmp_path / "npz", raws)), str(tmp_path / "o.zip"), gt=gt_case[0])
    assert summary["layout:panoptic"] == len(raws) and summary.get("empty", 0) == 0


def test_validation_checks_every_tiff_against_its_instances(tmp_path, gt_case):
    truth = sgeval.read_gt(gt_case[0])
    instances = [{"category": 0, "bbox": [0.0, 0.0, 1.0, 1.0]}] * 2
    path = sgeval.write_predictions(tmp_path / "v.zip", [
        {"id": image.image_id, "instances": instances, "triplets": [[0, 1, 0]],
         "masks": np.ones((1 if image is truth.images[0] else 2, image.height, image.width), bool)}
        for image in truth.images])
    with pytest.raises(common.ConvertError) as error:
        common.validate(path, truth)
    first = truth.images[0].image_id
    assert error.value.problems == [f"{path}: image {first}: {first}.tiff: 1 masks for 2 instances"]


def test_layout_can_be_forced_and_is_checked(tmp_path, standins, gt_case):
    rng = np.random.default_rng(6)
    raws = [panoptic_result(rng, gt) for gt in gt_case[2]]
    path = standins.pickle(tmp_path / "r.pkl", raws)
    with pytest.raises(common.ConvertError, match="--layout complete, but the result does not have 2T"):
        openpsg.convert(str(path), str(tmp_path / "o.zip"), gt=gt_case[0], layout="complete")
    summary = openpsg.convert(str(path), str(tmp_path / "o.zip"), gt=gt_case[0], layout="panoptic",
                              predicate_source="rel_labels", ng_top=10, ng_per_predicate=0)
    assert summary["layout:panoptic"] == len(raws)
    assert all(len({tuple(t) for t in r["ng_triplets"]}) <= 10 for r in read_records(tmp_path / "o.zip").values())


def test_cli_converts_and_reports_bad_input(tmp_path, standins, gt_case):
    rng = np.random.default_rng(8)
    raw = standins.pickle(tmp_path / "r.pkl", [hilo_result(rng, gt) for gt in gt_case[2]])
    run = lambda *args: run_module("convert.hilo", *args)  # noqa: E731
    done = run("--gt", gt_case[0], "--quiet", str(raw), str(tmp_path / "out.zip"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"wrote {tmp_path / 'out.zip'}: {len(gt_case[2])} images (0 empty)")
    (tmp_path / "evil.pkl").write_bytes(pickle.dumps([Evil(os.system, "true")], protocol=2))
    failed = run("--gt", gt_case[0], str(tmp_path / "evil.pkl"), str(tmp_path / "out2.zip"))
    assert failed.returncode == 1 and failed.stderr.startswith("error: ") and "refusing to load" in failed.stderr
    assert not (tmp_path / "out2.zip").exists()


CONVERTERS = ("openpsg", "hilo", "pairnet", "sgb", "openimages", "ag", "coco-panoptic", "vg150", "gqa200",
              "openimages-gt", "ag-gt", "zeroshot")
CONVERTER_MODULES = sorted({cli.module_of(family)[0] for family in CONVERTERS})  # openimages-gt: openimages.gt_main


def test_sgeval_convert_lists_every_family_and_runs_it(tmp_path, standins, gt_case):
    assert cli.FAMILIES == CONVERTERS
    listing = CliRunner().invoke(cli.main, ["--help"], prog_name="sgeval convert")
    assert listing.exit_code == 0, listing.output
    families = listing.output.split("\nFamilies")[1].splitlines()[1:]
    assert [line.split()[0] for line in families] == list(CONVERTERS)  # one line each, with its summary
    assert all(len(line.split()) > 1 and not line.endswith("...") for line in families)
    for family in CONVERTERS:  # each family's own options, under its name
        shown = CliRunner().invoke(cli.main, [family, "--help"], prog_name="sgeval convert")
        assert shown.exit_code == 0 and shown.output.startswith(f"Usage: sgeval convert {family} [OPTIONS]")
        module, command = cli.module_of(family)
        assert shown.output == CliRunner().invoke(getattr(importlib.import_module(f"sgeval_convert.{module}"), command),
                                                  ["--help"], prog_name=f"sgeval convert {family}").output
    for args, words in [(["bogus"], "no family 'bogus'; the families are openpsg, hilo,"),
                        (["--quiet", "hilo"], "--quiet cannot go with a family"), (["--quiet"], "name a family, or")]:
        refused = CliRunner().invoke(cli.main, args)
        assert refused.exit_code == 2 and f"Error: {words}" in refused.output, refused.output
    # the sgeval command dispatches to it
    raw = standins.pickle(tmp_path / "r.pkl", [hilo_result(np.random.default_rng(8), gt) for gt in gt_case[2]])
    done = run_command("sgeval.py", "convert", "hilo", "--gt", gt_case[0], "--quiet", str(raw), str(tmp_path / "o.zip"))
    assert done.returncode == 0 and done.stdout.startswith(f"wrote {tmp_path / 'o.zip'}: "), done.stderr
    assert run_module("sgeval_convert", "hilo", "--gt", gt_case[0], "--quiet", str(raw), str(tmp_path / "m.zip")
                      ).returncode == 0
    assert (tmp_path / "m.zip").read_bytes() == (tmp_path / "o.zip").read_bytes()


def test_convert_folder_only_runs_the_package(tmp_path):
    """convert/<family>.py runs sgeval_convert.<family> (python -m convert.<family> in a checkout, or
    the file where sgeval_convert is importable), says in one line how to run it where it is not,
    and is never a second copy of the converter's module; python -m convert runs sgeval convert."""
    entry = (ROOT / "convert" / "hilo.py").read_text()
    for family in CONVERTER_MODULES:  # the same file, with its own name
        assert (ROOT / "convert" / f"{family}.py").read_text() == entry.replace("hilo", family)
        with pytest.raises(ImportError, match=f"^convert.{family} only runs the converter; import "
                                              f"sgeval_convert.{family} instead$"):
            importlib.import_module(f"convert.{family}")
    usage = "Usage: python -m sgeval_convert.hilo [OPTIONS] RAW OUT"
    assert run_module("convert.hilo", "--help").stdout.startswith(usage)
    assert run_module("convert", "--help").stdout.startswith("Usage: python -m sgeval_convert [OPTIONS] FAMILY")
    script = str(ROOT / "convert" / "hilo.py")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # as where sgeval is installed
    ran = subprocess.run([sys.executable, script, "--help"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert ran.returncode == 0 and ran.stdout.startswith(usage), ran.stderr
    env.pop("PYTHONPATH")  # -S: no site-packages, so no installed sgeval_convert either
    alone = subprocess.run([sys.executable, "-S", script, "--help"], cwd=tmp_path, env=env, capture_output=True,
                           text=True)
    assert (alone.returncode, alone.stdout) == (1, "")
    assert alone.stderr == ("error: sgeval_convert is not importable here: run `python -m convert.hilo ...` from the "
                            "repository root, or install sgeval and run `sgeval convert hilo ...`\n")


def test_make_eval_conversion_step_converts_only_when_needed(tmp_path, standins, gt_case):
    rng = np.random.default_rng(10)
    raw = standins.pickle(tmp_path / "hilo.pkl", [hilo_result(rng, gt) for gt in gt_case[2]])
    config = tmp_path / "hilo.yaml"  # a plain sgeval config
    config.write_text(f"gt: {gt_case[0]}\ngt_seg: {gt_case[1]}\npred: {tmp_path / 'hilo.zip'}\n")
    recipe = tmp_path / "convert" / "hilo.yaml"  # found by default: <config's folder>/convert/<config's stem>.yaml
    assert "nothing to convert (no conversion recipe" in convert_recipe.prepare(str(config))[0]
    recipe.parent.mkdir()
    recipe.write_text(f"family: hilo\nraw: {raw}\n")
    message, summary = convert_recipe.prepare(str(config), workers=2)
    assert "does not exist" in message and summary["images"] == len(gt_case[2])
    assert convert_recipe.prepare(str(config))[1] is None  # up to date (the worker count is not an option)
    os.utime(raw, (time.time() + 5, time.time() + 5))
    assert "is older than" in convert_recipe.prepare(str(config))[0]
    other = tmp_path / "other.pkl"
    other.write_bytes(raw.read_bytes())
    os.utime(other, (time.time() - 100, time.time() - 100))
    assert "another raw" in convert_recipe.prepare(str(config), raw=str(other))[0]
    recipe.write_text(recipe.read_text() + "predicate_source: rel_labels\n")
    assert "another options" in convert_recipe.prepare(str(config), raw=str(other))[0]
    recipe.write_text(recipe.read_text().replace("predicate_source", "predicate_sauce"))
    with pytest.raises(common.ConvertError, match=f"^{recipe}: unknown key 'predicate_sauce'; valid keys: family, "
                                                  f"raw, predicate_source, ng_top, ng_per_predicate$"):
        convert_recipe.prepare(str(config))
    assert "nothing to convert" in convert_recipe.prepare(str(ROOT / "configs" / "demo.yaml"))[0]
    results = sgeval.evaluate(sgeval.load_config(str(config)))
    assert results["images"]["evaluated"] == len(gt_case[2])


def test_conversion_recipe_can_be_named_and_is_checked(tmp_path, standins, gt_case):
    rng = np.random.default_rng(13)
    raw = standins.pickle(tmp_path / "pairnet.pkl", [pairnet_result(rng, gt) for gt in gt_case[2]], PAIRNET_RESULT)
    config = tmp_path / "model.yaml"
    config.write_text(f"gt: {gt_case[0]}\npred: {tmp_path / 'model.zip'}\n")
    named = tmp_path / "recipes" / "pairnet-top10.yaml"
    named.parent.mkdir()
    named.write_text(f"# a recipe\nfamily: pairnet\nraw: {raw}\nng_top: 10\n")
    assert "nothing to convert" in convert_recipe.prepare(str(config))[0]  # no convert/model.yaml
    message, summary = convert_recipe.prepare(str(config), recipe=str(named), pred=str(tmp_path / "top10.zip"))
    assert message.startswith(f"converting {raw} -> {tmp_path / 'top10.zip'}") and summary["images"] == len(gt_case[2])
    with zipfile.ZipFile(tmp_path / "top10.zip") as archive:
        provenance = json.loads(archive.read(common.PROVENANCE))
    assert provenance["family"] == "pairnet" and provenance["options"]["ng_top"] == 10
    found = convert_recipe.plan(str(config), recipe=str(named))
    assert (found.family, found.raw, found.gt, found.options["ng_top"]) == ("pairnet", str(raw), gt_case[0], 10)

    def problem(recipe_text=None, config_text=None, **overrides):
        if recipe_text is not None:
            named.write_text(recipe_text)
        if config_text is not None:
            config.write_text(config_text)
        with pytest.raises(sgeval.SGEvalError) as error:
            convert_recipe.prepare(str(config), recipe=str(named), **overrides)
        return error.value.problems

    assert problem("family: hola\nraw: x.pkl\n") == [
        f"{named}: 'family' must be one of openpsg, hilo, pairnet, sgb, openimages, ag, not 'hola'"]
    assert problem("raw: x.pkl\n") == [f"{named}: 'family' must be one of openpsg, hilo, pairnet, sgb, openimages, ag, not None"]
    assert problem("family: openpsg\n") == [f"{named}: 'raw' (the model's raw output) is required"]
    assert problem("family: openpsg\nraw: x.pkl\nlayuot: auto\nng: 5\n") == [
        f"{named}: unknown key '{key}'; valid keys: family, raw, layout, predicate_source, ng_top, ng_per_predicate, "
        f"pan_results" for key in ("layuot", "ng")]
    assert problem("[family, raw]\n") == [f"{named}: the conversion recipe must be a mapping of keys to values"]
    assert problem("family: [\n")[0].startswith(f"{named}: cannot read the conversion recipe: ")
    named.write_text(f"family: pairnet\nraw: {tmp_path / 'gone.pkl'}\n")
    assert problem() == [f"{tmp_path / 'gone.pkl'}: the raw output named by {named} does not exist"]
    assert problem(raw=str(tmp_path / "gone2.pkl")) == [
        f"{tmp_path / 'gone2.pkl'}: the raw output named by --raw does not exist"]
    with pytest.raises(common.ConvertError, match="cannot read the conversion recipe"):  # a named recipe must exist
        convert_recipe.prepare(str(config), recipe=str(tmp_path / "missing.yaml"))
    # a config still holding a 'convert' mapping is told where that went (sgeval rejects the key)
    assert problem(config_text=config.read_text() + f"convert: {{family: pairnet, raw: {raw}}}\n") == [
        f"{config}: 'convert' is not an sgeval config key; move its mapping (family, raw, options) into the "
        f"conversion recipe {named}"]
    with pytest.raises(common.ConvertError, match=f"into the conversion recipe {tmp_path / 'convert' / 'model.yaml'}$"):
        convert_recipe.prepare(str(config))


@pytest.mark.parametrize("config", sorted((ROOT / "configs").glob("*.yaml")), ids=lambda p: p.name)
def test_repository_configs_are_sgeval_configs_with_valid_recipes(config):
    assert "convert" not in yaml.safe_load(config.read_text())
    recipe = ROOT / "configs" / "convert" / config.name
    found = convert_recipe.plan(str(config))
    if not recipe.exists():
        assert config.stem in ("demo", "psg", "vg150", "gqa200", "vg150-demo", "oiv6", "oiv6-demo",
                               "ag-demo") and found is None
        return
    values = yaml.safe_load(recipe.read_text())
    assert set(values) - {"task", "attention"} == {"family", "raw"} and (found.family, found.raw) == (values["family"], values["raw"])
    assert found.recipe == str(recipe) and found.pred == sgeval.load_config(config).pred
    assert found.pred == f"results/{config.stem}.zip" and found.raw.startswith(f"results/{config.stem}")


def test_every_recipe_belongs_to_a_config():
    recipes = sorted(path.stem for path in (ROOT / "configs" / "convert").glob("*.yaml"))
    assert recipes == ["ag-predcls", "ag-sgcls", "ag-sgdet", "gpsnet", "hilo", "imp", "motifs", "oiv6-bgnn-predcls",
                       "pairnet", "psgformer", "psgtr", "vctree", "vg150-motifs-predcls"]
    assert all((ROOT / "configs" / f"{name}.yaml").exists() for name in recipes)


@pytest.mark.parametrize("command", [("sgeval.py", "convert"), ("-m", "convert")])
def test_the_conversion_step_converts_once(tmp_path, standins, gt_case, command):
    """What `make eval` runs (sgeval.py convert --config), and in a checkout python -m convert --config."""
    rng = np.random.default_rng(14)
    raw = standins.pickle(tmp_path / "hilo.pkl", [hilo_result(rng, gt) for gt in gt_case[2]])
    config = tmp_path / "hilo.yaml"
    config.write_text(f"gt: {gt_case[0]}\npred: {tmp_path / 'hilo.zip'}\n")
    (tmp_path / "convert").mkdir()
    (tmp_path / "convert" / "hilo.yaml").write_text(f"family: hilo\nraw: {raw}\n")
    first = run_command(*command, "--config", str(config), "--quiet")
    assert first.returncode == 0, first.stderr
    assert first.stderr.startswith(f"converting {raw} -> {tmp_path / 'hilo.zip'} ({tmp_path / 'hilo.zip'} does not "
                                   f"exist)\nwrote {tmp_path / 'hilo.zip'}: {len(gt_case[2])} images")
    second = run_command(*command, "--config", str(config), "--quiet")
    assert (second.returncode, second.stderr) == (0, f"{tmp_path / 'hilo.zip'} is up to date (converted from {raw})\n")


# ---------------------------------------------------------------------------------------------
# Streaming: a pickle of any size in bounded memory, worker processes, per-image pickles
# ---------------------------------------------------------------------------------------------


def pickle_with_protocol(standins, path, raws, protocol):
    cls = standins.results[PAIRNET_RESULT]
    path.write_bytes(pickle.dumps([cls(**fields) for fields in raws], protocol=protocol))
    return str(path)


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_results_stream_one_at_a_time_and_are_released(tmp_path, standins, gt_case, protocol):
    """Each result is handed out when it is complete, and once the caller drops it nothing (the
    unpickler's memo, its stack) keeps its arrays alive; shared objects (dtypes, field names) still
    resolve in later results."""
    import weakref
    rng = np.random.default_rng(21)
    raws = [pairnet_result(rng, gt) for gt in gt_case[2]]
    path = pickle_with_protocol(standins, tmp_path / "r.pkl", raws, protocol)
    alive = []
    for index, result in enumerate(common.iter_pickle(path)):
        assert all(np.array_equal(result.get(k), v) for k, v in raws[index].items())
        assert not any(ref() is not None for ref in alive), f"result {index - 1} is still referenced"
        alive = [weakref.ref(result.get("masks"))]
        del result
    assert index == len(raws) - 1


@pytest.mark.parametrize("lazy_bytes", [unpickler.LAZY_BYTES, 64], ids=["default", "every array lazy"])
def test_the_converted_output_is_the_same_for_every_input_kind_and_worker_count(tmp_path, standins, gt_case,
                                                                                monkeypatch, lazy_bytes):
    """A pickle (protocols 2, 4 and 5; masks of 0/1 and of 0/255, whose protocol-2 strings are not
    ASCII), a directory of per-image pickles and one of npz files, with 1 or 2 workers, arrays read
    by the main process or left in the file for the workers: the same ZIP (byte for byte for one
    input; the same members for all)."""
    monkeypatch.setattr(unpickler, "LAZY_BYTES", lazy_bytes)
    rng = np.random.default_rng(22)
    raws = [pairnet_result(rng, gt) for gt in gt_case[2]]
    raws_255 = [{**raw, "masks": raw["masks"].astype(np.uint8) * 255} for raw in raws]
    inputs = {"protocol 2": standins.pickle(tmp_path / "r2.pkl", raws, PAIRNET_RESULT),
              "protocol 2, 255": standins.pickle(tmp_path / "r255.pkl", raws_255, PAIRNET_RESULT),
              "protocol 4": pickle_with_protocol(standins, tmp_path / "r4.pkl", raws, 4),
              "protocol 5": pickle_with_protocol(standins, tmp_path / "r5.pkl", raws, 5),
              "npz": write_npz(tmp_path / "npz", raws)}
    (tmp_path / "pkl").mkdir()
    for index, fields in enumerate(raws):  # one Result per file, and one one-element list
        item = standins.results[PAIRNET_RESULT](**fields)
        (tmp_path / "pkl" / f"{index}.pkl").write_bytes(pickle.dumps(item if index % 2 else [item], protocol=2))
    inputs["per-image pickles"] = tmp_path / "pkl"
    outputs = {}
    for name, raw in inputs.items():
        for workers in (1, 2):
            out = tmp_path / f"{name.replace(' ', '_')}-{workers}.zip"
            pairnet.convert(str(raw), str(out), gt=gt_case[0], workers=workers)
            outputs[name, workers] = out.read_bytes()
    assert all(outputs[name, 1] == outputs[name, 2] for name in inputs)  # the whole file, convert.json included

    def members(data):  # convert.json names the raw input
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            return {name: archive.read(name) for name in archive.namelist() if name != common.PROVENANCE}
    first = members(outputs["protocol 2", 1])
    assert all(members(outputs[name, 1]) == first for name in inputs)


@pytest.mark.parametrize("lazy_bytes", [unpickler.LAZY_BYTES, 64], ids=["default", "every array lazy"])
@pytest.mark.parametrize("cut", [0.3, 0.7, 0.999])
def test_a_truncated_pickle_names_the_result_reached_and_leaves_no_output(tmp_path, standins, gt_case, cut,
                                                                          monkeypatch, lazy_bytes):
    monkeypatch.setattr(unpickler, "LAZY_BYTES", lazy_bytes)
    rng = np.random.default_rng(23)
    raws = [pairnet_result(rng, gt) for gt in gt_case[2]]
    data = standins.pickle(tmp_path / "r.pkl", raws, PAIRNET_RESULT).read_bytes()
    (tmp_path / "cut.pkl").write_bytes(data[:int(len(data) * cut)])
    read = len(list(itertools_takewhile_ok(common.iter_pickle(tmp_path / "cut.pkl"))))
    for workers in (1, 2):
        with pytest.raises(common.ConvertError) as error:
            pairnet.convert(str(tmp_path / "cut.pkl"), str(tmp_path / "out.zip"), gt=gt_case[0], workers=workers)
        assert f"cannot read the pickle at result {read} (counting from 0" in error.value.problems[0], error.value
        assert not list(tmp_path.glob("out.zip*"))


def itertools_takewhile_ok(results):
    """The results an iterator yields before it raises."""
    try:
        yield from results
    except common.ConvertError:
        return


@pytest.mark.parametrize("change", ["one more", "one fewer"])
def test_a_pickle_with_another_number_of_results_is_refused(tmp_path, standins, gt_case, change):
    rng = np.random.default_rng(24)
    raws = [pairnet_result(rng, gt) for gt in gt_case[2]]
    raws = raws + [{k: np.copy(v) for k, v in raws[0].items()}] if change == "one more" else raws[:-1]
    path = standins.pickle(tmp_path / "r.pkl", raws, PAIRNET_RESULT)
    with pytest.raises(common.ConvertError) as error:
        pairnet.convert(str(path), str(tmp_path / "out.zip"), gt=gt_case[0])
    words = "holds more than" if change == "one more" else f"holds {len(raws)} results"
    assert any(words in problem for problem in error.value.problems), error.value.problems
    assert not list(tmp_path.glob("out.zip*"))


def test_progress_reports_images_and_megabytes_per_second(tmp_path, standins, gt_case):
    rng = np.random.default_rng(25)
    raws = [pairnet_result(rng, gt) for gt in gt_case[2]]
    path = standins.pickle(tmp_path / "r.pkl", raws, PAIRNET_RESULT)
    calls = []
    pairnet.convert(str(path), str(tmp_path / "out.zip"), gt=gt_case[0], progress=lambda *args: calls.append(args))
    assert [call[:2] for call in calls] == [(n, len(raws)) for n in range(1, len(raws) + 1)]
    assert all(call[2].endswith("MB/s") and "images/s" in call[2] for call in calls)
    result = subprocess.run([sys.executable, "-m", "sgeval_convert.pairnet", "--gt", gt_case[0], str(path),
                             str(tmp_path / "cli.zip"), "--workers", "2"], capture_output=True, text=True, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode != 0 or (tmp_path / "cli.zip").read_bytes() == (tmp_path / "out.zip").read_bytes()


def test_results_may_share_tiny_constants_but_not_data(tmp_path, standins, gt_case):
    """A later result may refer back to an earlier one's empty array (a shared constant); one that
    refers back to released data is one clear problem."""
    rng = np.random.default_rng(26)
    raws = [pairnet_result(rng, gt) for gt in gt_case[2]]
    empty = np.zeros((0, 5), np.float32)
    path = standins.pickle(tmp_path / "r.pkl", [{**raw, "refine_bboxes": empty} for raw in raws], PAIRNET_RESULT)
    assert all(r.get("refine_bboxes") is not None for r in common.iter_pickle(path))
    shared = np.ones(2000)
    path = standins.pickle(tmp_path / "s.pkl", [{**raw, "extra": shared} for raw in raws], PAIRNET_RESULT)
    with pytest.raises(common.ConvertError, match="result 1 .*refers back to data .* of an earlier one"):
        list(common.iter_pickle(path))


def test_an_ordered_dict_with_attributes_still_loads(tmp_path):
    """torch's OrderedDicts carry attributes (a BUILD state); the only other object that may take one."""
    ordered = collections.OrderedDict(a=np.arange(3))
    ordered._metadata = {"version": 1}
    (tmp_path / "o.pkl").write_bytes(pickle.dumps([{"labels": ordered}], protocol=2))
    assert np.array_equal(common.load_pickle(tmp_path / "o.pkl")[0].get("labels")["a"], np.arange(3))


def test_releasing_results_looks_at_each_memo_entry_once(tmp_path, standins, monkeypatch):
    """After each result the unpickler looks only at the memo entries set since the last one (it
    once scanned the whole memo every time: quadratic in the number of results)."""
    looked = []
    real = unpickler._large
    monkeypatch.setattr(unpickler, "_large", lambda value: looked.append(1) or real(value))
    cls = standins.results[OPENPSG_RESULT]
    for n in (100, 400):
        path = tmp_path / f"{n}.pkl"
        path.write_bytes(pickle.dumps([cls(labels=np.arange(3) + i, rel_dists=np.ones((2, 3))) for i in range(n)],
                                      protocol=2))
        looked.clear()
        assert sum(1 for _ in common.iter_pickle(path)) == n
        if n == 100:
            per_result = len(looked) / n
    assert len(looked) / 400 <= 1.1 * per_result
