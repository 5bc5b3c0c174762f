"""sgeval_convert/openimages.py: PySGG's Open Images annotations -> sgeval's GT JSON (convert_gt), and
its eval_results.pytorch -> sgeval predictions (convert, image_arrays). Small PySGG-layout files are
written here (annotations as json, eval_results by tools/torchsave.py with PySGG's BoxList class);
one hand case per rule, each chosen so that the nearest other rule gives another answer; hostile
inputs; the command lines; a round trip through sgeval."""

import json
import subprocess
import sys
import zipfile

import numpy as np
import pytest
import yaml
from click.testing import CliRunner
from conftest import ROOT, LiveTensor, assert_arrays_written, assert_same_results, checked, evaluate_updates, sgeval

from sgeval_convert import cli, common, gtjson, openimages
from sgeval_convert import recipe as convert_recipe
from tools import torchsave

OBJECTS, PREDICATES = ["person", "horse", "dog", "hat"], ["on", "has", "near"]
PYSGG_BOXLIST = "pysgg.structures.bounding_box.BoxList"
f32 = np.float32


def anno(img_fn, size, boxes, labels, rels):
    """One entry of a vrd-*-anno.json (the fields PySGG's load_annotations reads)."""
    return {"img_fn": img_fn, "img_size": size, "bbox": boxes, "det_labels": labels, "rel": rels}


# vrd-test-anno.json: two evaluated images around two that PySGG drops (no rel, no bbox)
TEST = [anno("a1", [32, 24], [[0, 0, 10, 10], [5, 5, 40, 15], [-3, 2, 3, 30]], [2, 0, 1],
             [[0, 1, 1], [2, 1, 0], [0, 1, 1]]),
        anno("no-rel", [8, 8], [[0, 0, 2, 2]], [0], []),
        anno("no-box", [8, 8], [], [], [[0, 0, 0]]),
        anno("b2", [16, 20], [[2, 2, 8, 8], [0.1, 0, 4, 4.5]], [0, 0], [[1, 0, 2]])]
# a1: x2 = 40 clamped to width - 1 = 31 (not 32), x1 = -3 to 0, y2 = 30 to height - 1 = 23 (not 24);
# b2: 0.1 as float32
EXPECTED_BOXES = {"a1": [[0, 0, 10, 10], [5, 5, 31, 15], [0, 2, 3, 23]],
                  "b2": [[2, 2, 8, 8], [float(f32(0.1)), 0, 4, 4.5]]}
TRAIN = [anno("t1", [10, 10], [[0, 0, 5, 5], [1, 1, 6, 6]], [1, 3], [[0, 1, 2], [1, 0, 2]]),
         anno("t-empty", [5, 5], [[0, 0, 1, 1]], [0], [])]
VAL = [anno("v1", [12, 14], [[0, 0, 4, 4], [2, 2, 6, 6]], [3, 2], [[1, 0, 1]])]


def write_annotations(folder, test=None, train=None, val=None, categories=None):
    """PySGG's annotations folder (paths_catalog.py's file names); returns it."""
    folder.mkdir(parents=True, exist_ok=True)
    categories = {"obj": OBJECTS, "rel": PREDICATES} if categories is None else categories
    for name, value in (("categories_dict.json", categories), ("vrd-test-anno.json", TEST if test is None else test),
                        ("vrd-train-anno.json", TRAIN if train is None else train),
                        ("vrd-val-anno.json", VAL if val is None else val)):
        (folder / name).write_text(value if isinstance(value, str) else json.dumps(value))
    return folder


@pytest.fixture
def gt(tmp_path):
    """The GT JSON of TEST (and TRAIN), as convert_gt writes it."""
    openimages.convert_gt(write_annotations(tmp_path / "anno"), tmp_path / "oi_test.json")
    return tmp_path / "oi_test.json"


def by_id(written):
    return {entry["image_id"]: entry for entry in written["data"]}


# ---------------------------------------------------------------------------------------------
# Ground truth
# ---------------------------------------------------------------------------------------------


def test_gt_keeps_pysgg_s_images_boxes_labels_and_rows(tmp_path, gt):
    written = json.loads(gt.read_text())
    assert written["thing_classes"] == OBJECTS and written["predicate_classes"] == PREDICATES
    assert written["stuff_classes"] == [] and written["test_image_ids"] == ["a1", "b2"]
    entries = by_id(written)
    assert list(entries) == ["a1", "b2", "t1"]  # the dropped entries (empty rel, empty bbox) are not there
    a1 = entries["a1"]
    assert (a1["width"], a1["height"], a1["file_name"]) == (32, 24, "a1.jpg")  # img_size is [width, height]
    assert [a["bbox"] for a in a1["annotations"]] == EXPECTED_BOXES["a1"]
    assert [a["bbox"] for a in entries["b2"]["annotations"]] == EXPECTED_BOXES["b2"]
    assert entries["b2"]["annotations"][1]["bbox"][0] != 0.1  # the float32 value, not the json's
    assert [s["category_id"] for s in a1["segments_info"]] == [2, 0, 1]  # det_labels as stored (0-based)
    assert a1["relations"] == [[0, 1, 1], [2, 1, 0], [0, 1, 1]]  # every row, the repeat too, in file order
    assert entries["t1"]["relations"] == [[0, 1, 2], [1, 0, 2]]
    truth = sgeval.read_gt(str(gt))
    assert [image.image_id for image in truth.images] == ["a1", "b2"]  # dataset index i = truth.images[i]
    assert truth.images[0].file_rows.tolist() == [0, 1, 0]


def test_gt_summary_counts_the_dropped_entries_and_names_the_dataset(tmp_path):
    summary = openimages.convert_gt(write_annotations(tmp_path / "anno"), tmp_path / "gt.json")
    assert (summary["evaluated"], summary["training"], summary["duplicate_relation_rows"]) == (2, 1, 1)
    assert summary["skipped_empty"] == {str(tmp_path / "anno" / "vrd-test-anno.json"): 2,
                                        str(tmp_path / "anno" / "vrd-train-anno.json"): 1}
    assert summary["dataset"] is None
    assert "entries dropped for an empty rel or bbox, as PySGG drops them: vrd-test-anno.json 2, " \
           "vrd-train-anno.json 1" in openimages.describe_gt(summary)


@pytest.mark.parametrize("sizes,name", [((601, 30), "Open Images V6"), ((57, 9), "Open Images V4"), ((4, 3), None)])
def test_gt_vocabulary_sizes_name_v6_and_v4(tmp_path, sizes, name):
    categories = {"obj": [f"o{i}" for i in range(sizes[0])], "rel": [f"r{i}" for i in range(sizes[1])]}
    summary = openimages.convert_gt(write_annotations(tmp_path / "anno", categories=categories), tmp_path / "gt.json")
    written = json.loads((tmp_path / "gt.json").read_text())
    assert summary["dataset"] == written["info"]["dataset"] == name
    assert written["thing_classes"] == categories["obj"] and written["predicate_classes"] == categories["rel"]


def test_gt_val_split_and_no_train(tmp_path):
    folder = write_annotations(tmp_path / "anno")
    openimages.convert_gt(folder, tmp_path / "val.json", split="val")
    written = json.loads((tmp_path / "val.json").read_text())
    assert written["test_image_ids"] == ["v1"] and list(by_id(written)) == ["v1", "t1"]
    assert (by_id(written)["v1"]["width"], by_id(written)["v1"]["height"]) == (12, 14)
    (folder / "vrd-train-anno.json").unlink()  # --no-train needs no training file
    openimages.convert_gt(folder, tmp_path / "alone.json", train=False)
    written = json.loads((tmp_path / "alone.json").read_text())
    assert list(by_id(written)) == ["a1", "b2"] and written["info"]["training_images"] is False
    with pytest.raises(common.ConvertError, match="vrd-train-anno.json: no such file"):
        openimages.convert_gt(folder, tmp_path / "x.json")
    with pytest.raises(common.ConvertError, match="split 'train' is not one of test, val"):
        openimages.convert_gt(folder, tmp_path / "x.json", split="train")


def test_gt_boxes_are_pysgg_s_float32_clip():
    """clip_to_image (bounding_box.py:237-247) in float32: [0, W - 1] x [0, H - 1], nothing removed;
    an inverted box stays inverted (remove_empty=False)."""
    boxes = np.array([[-1.5, -0.25, 1e9, 23.9], [31.7, 30, 30, 2], [16777217, 1, 2, 3]]).astype(np.float32)
    clipped = gtjson.clip_to_image(boxes, 32, 24)
    assert clipped.dtype == np.float32
    assert clipped.tolist() == [[0, 0, 31, 23], [31, 23, 30, 2], [31, 1, 2, 3]]


# hostile annotation files: (edit of the test entries, words of the one problem line)
def _set(index, **fields):
    def edit(entries):
        entries[index] = {**entries[index], **fields}
    return edit


def _drop(index, field):
    def edit(entries):
        del entries[index][field]
    return edit


HOSTILE_ENTRIES = [
    (_set(0, bbox=[[0, 0, 10, 10], [5, 5, 40], [-3, 2, 3, 30]]), "entry 0 (img_fn 'a1'): field 'bbox' must be"),
    (_set(0, bbox=[[0, 0, 10, float("nan")], [5, 5, 40, 15], [-3, 2, 3, 30]]), "entry 0 (img_fn 'a1'): field 'bbox'"),
    (_set(0, bbox=[[0, 0, 10, True], [5, 5, 40, 15], [-3, 2, 3, 30]]), "entry 0 (img_fn 'a1'): field 'bbox'"),
    (_set(0, det_labels=[2, 0]), "entry 0 (img_fn 'a1'): field 'det_labels' holds 2 labels for the 3 boxes"),
    (_set(0, det_labels=[2, 0, 4]), "entry 0 (img_fn 'a1'): field 'det_labels' row 2 holds 4, outside 0..3"),
    (_set(0, det_labels=[2, 0, 1.0]), "entry 0 (img_fn 'a1'): field 'det_labels' must be a list of integers"),
    (_set(3, rel=[[1, 2, 2]]), "entry 3 (img_fn 'b2'): field 'rel (box indices)' row 0 holds [1, 2], outside 0..1"),
    (_set(3, rel=[[1, 0, 3]]), "entry 3 (img_fn 'b2'): field 'rel (predicates)' row 0 holds [3], outside 0..2"),
    (_set(3, rel=[[1, 0]]), "entry 3 (img_fn 'b2'): field 'rel' must be a list of [subject, object, predicate]"),
    (_set(3, rel={"0": 1}), "entry 3 (img_fn 'b2'): field 'rel' must be a list"),
    (_set(3, img_size=[16]), "entry 3 (img_fn 'b2'): field 'img_size' must be [width, height]"),
    (_set(3, img_size=[16, 0]), "entry 3 (img_fn 'b2'): field 'img_size' must be [width, height]"),
    (_set(3, img_size=[1 << 14, 1 << 13]), "entry 3 (img_fn 'b2'): field 'img_size' [16384, 8192] exceeds the limit"),
    (_drop(3, "img_fn"), "entry 3: field 'img_fn' must be a non-empty string"),
    (_drop(0, "det_labels"), "entry 0 (img_fn 'a1'): field 'det_labels' must be a list of integers"),
    (_drop(0, "bbox"), "entry 0 (img_fn 'a1'): field 'bbox' must be a list"),
    (lambda entries: entries.insert(1, ["a", "b"]), "entry 1: must be an object"),
]


@pytest.mark.parametrize("edit,words", HOSTILE_ENTRIES, ids=range(len(HOSTILE_ENTRIES)))
def test_hostile_annotations_name_file_entry_and_field(tmp_path, edit, words):
    entries = json.loads(json.dumps(TEST))
    edit(entries)
    folder = write_annotations(tmp_path / "anno", test=json.dumps(entries, allow_nan=True))
    with pytest.raises(sgeval.SGEvalError) as info:
        openimages.convert_gt(folder, tmp_path / "gt.json")
    (problem,) = checked(info.value)
    assert problem.startswith(f"{folder / 'vrd-test-anno.json'}: ") and words in problem, problem
    assert not (tmp_path / "gt.json").exists() and not (tmp_path / "gt.json.partial").exists()


def test_hostile_annotation_sizes_are_refused_before_arrays_are_built(tmp_path, monkeypatch):
    monkeypatch.setattr(gtjson, "MAX_BOXES", 2)
    monkeypatch.setattr(gtjson, "MAX_RELATIONS", 2)
    folder = write_annotations(tmp_path / "anno")
    with pytest.raises(sgeval.SGEvalError) as info:
        openimages.convert_gt(folder, tmp_path / "gt.json")
    assert checked(info.value) == [
        f"{folder / 'vrd-test-anno.json'}: entry 0 (img_fn 'a1'): field 'bbox' holds 3 rows, more than the limit of "
        f"2 per image",
        f"{folder / 'vrd-test-anno.json'}: entry 0 (img_fn 'a1'): field 'rel' holds 3 rows, more than the limit of 2 "
        f"per image"]


@pytest.mark.parametrize("files,words", [
    ({"vrd-test-anno.json": '{"a": 1}'}, "vrd-test-anno.json: the file must hold a JSON list"),
    ({"vrd-test-anno.json": '[{"rel": [], "bbox": []},'}, "vrd-test-anno.json: cannot read JSON"),
    ({"categories_dict.json": '{"obj": ["a", "a"], "rel": ["r"]}'}, "field 'obj' must list distinct non-empty names"),
    ({"categories_dict.json": '["a"]'}, "categories_dict.json: the categories file must hold a JSON object"),
    ({"categories_dict.json": '{"obj": ["a"]'}, "categories_dict.json: cannot read the categories file"),
])
def test_hostile_files(tmp_path, files, words):
    folder = write_annotations(tmp_path / "anno")
    for name, text in files.items():
        (folder / name).write_text(text)
    with pytest.raises(sgeval.SGEvalError) as info:
        openimages.convert_gt(folder, tmp_path / "gt.json")
    assert any(words in problem for problem in checked(info.value)), info.value.problems
    assert not (tmp_path / "gt.json").exists()


def test_an_image_in_both_splits_is_an_error(tmp_path):
    folder = write_annotations(tmp_path / "anno", train=[anno("a1", [10, 10], [[0, 0, 1, 1]], [0], [[0, 0, 0]])])
    with pytest.raises(sgeval.SGEvalError, match="image_id a1 occurs twice among the converted images"):
        openimages.convert_gt(folder, tmp_path / "gt.json")


# ---------------------------------------------------------------------------------------------
# Predictions: PySGG's eval_results.pytorch
# ---------------------------------------------------------------------------------------------


def boxlist(boxes, size, extra, mode="xyxy"):
    return torchsave.BoxList(np.asarray(boxes, f32).reshape(-1, 4), size, mode, extra, cls=PYSGG_BOXLIST)


def groundtruths():
    """What get_groundtruth(evaluation=True) gives for TEST's evaluated images (labels and
    predicates 1-based, boxes clipped)."""
    return [boxlist(EXPECTED_BOXES[entry["img_fn"]], entry["img_size"], {
        "labels": np.array(entry["det_labels"]) + 1, "relation_tuple": np.array(entry["rel"]) + [0, 0, 1],
        "attributes": np.zeros((len(entry["det_labels"]), 10))}) for entry in (TEST[0], TEST[3])]


# image a1's relation rows: the background column first (dropped), then on, has, near
A1_PAIRS = [[0, 1], [2, 1], [1, 0], [0, 0]]
A1_REL_SCORES = [[0.0, 0.5, 0.3, 0.2],  # top 2: on 0.5, has 0.3 (near 0.2 would be third)
                 [0.0, 0.15, 0.8, 0.05],  # x 0.5 (object scores 0.5 and 1): has 0.4, on 0.075
                 [0.9, 0.06, 0.03, 0.01],  # background highest (dropped): on 0.06, has 0.03
                 [0.0, 0.35, 0.35, 0.3]]  # a tie: argmax takes the first (on); object scores 1 x 1
A1_OBJECT_SCORES = [1.0, 1.0, 0.5]


def predictions(size_a1=(32, 24), boxes_a1=None):
    return [boxlist(EXPECTED_BOXES["a1"] if boxes_a1 is None else boxes_a1, size_a1, {
                "pred_labels": np.array([3, 1, 2]), "pred_scores": f32(A1_OBJECT_SCORES),
                "rel_pair_idxs": np.array(A1_PAIRS), "pred_rel_scores": f32(A1_REL_SCORES),
                "pred_rel_labels": np.array([1, 2, 1, 1]), "labels": np.array([3, 1, 2]),
                "predict_logits": np.zeros((3, 5), f32)}),
            boxlist([[2, 2, 8, 8], [0, 0, 4, 4.5]], (16, 20), {
                "pred_labels": np.array([1, 1]), "pred_scores": f32([0.7, 0.9]), "rel_pair_idxs": np.array([[1, 0]]),
                "pred_rel_scores": f32([[0.1, 0.2, 0.3, 0.4]]), "labels": np.array([1, 1]),
                "predict_logits": np.zeros((2, 5), f32)})]


def write_results(path, preds=None, gts="default", legacy=False):
    value = {"predictions": predictions() if preds is None else preds}
    if gts is not None:
        value["groundtruths"] = groundtruths() if gts == "default" else gts
    return torchsave.save(path, value, legacy=legacy)


def written_records(out):
    """{image id: record} of a converted ZIP's triplets.json, as written (scores included)."""
    with zipfile.ZipFile(out) as archive:
        return {record["id"]: record for record in json.loads(archive.read("triplets.json"))["images"]}


def expected_a1_ng():
    """The Open Images list of image a1 computed by hand: (s * o) * p in float32, top 2 per row."""
    s = f32(A1_OBJECT_SCORES)
    entries = [((0, 1, 0), s[0] * s[1] * f32(0.5)), ((0, 1, 1), s[0] * s[1] * f32(0.3)),
               ((2, 1, 1), s[2] * s[1] * f32(0.8)), ((2, 1, 0), s[2] * s[1] * f32(0.15)),
               ((1, 0, 0), s[1] * s[0] * f32(0.06)), ((1, 0, 1), s[1] * s[0] * f32(0.03)),
               ((0, 0, 0), s[0] * s[0] * f32(0.35)), ((0, 0, 1), s[0] * s[0] * f32(0.35))]
    return entries


@pytest.mark.parametrize("legacy", [False, True], ids=["zip", "legacy"])
def test_predictions_convert_to_both_lists(tmp_path, gt, legacy):
    summary = openimages.convert(write_results(tmp_path / "eval_results.pytorch", legacy=legacy), tmp_path / "out.zip",
                                 str(gt))
    assert summary["images"] == 2 and summary["task:sgcls"] == 2 and summary["guessed"] == 1
    a1 = written_records(tmp_path / "out.zip")["a1"]
    assert [i["category"] for i in a1["instances"]] == [2, 0, 1]  # pred_labels - 1
    assert [i["score"] for i in a1["instances"]] == [1.0, 1.0, 0.5]
    assert [i["bbox"] for i in a1["instances"]] == EXPECTED_BOXES["a1"]
    # graph-constrained: the rows as stored, argmax of columns 1.. (the background column is never
    # taken; the tie on row 3 goes to the first, on)
    assert a1["triplets"] == [[0, 1, 0], [2, 1, 1], [1, 0, 0], [0, 0, 0]]
    # the Open Images list (row_lists.oi): top 2 predicates per row, ranked by score; row 3's 0.35 and 0.35
    # tie: both kept
    oi = a1["row_lists"]["oi"]
    ng = oi["triplets"]
    assert ng[:2] == [[0, 1, 0], [2, 1, 1]] and sorted(map(tuple, ng[2:4])) == [(0, 0, 0), (0, 0, 1)]
    assert ng[4:] == [[0, 1, 1], [2, 1, 0], [1, 0, 0], [1, 0, 1]]
    assert [0, 1, 2] not in ng  # near, third for row 0 (0.2 > 0.075): top 2, not top 3
    assert [2, 1, 0] in ng  # on, second for row 1: top 2, not top 1
    scores = dict((tuple(row), value) for row, value in expected_a1_ng())
    assert oi["scores"] == [float(scores[tuple(row)]) for row in ng]
    assert oi["scores"] == sorted(oi["scores"], reverse=True)
    # the classic no-graph-constraint list (ng_triplets, what the sgb protocol's ngR@K reads): every predicate of
    # every row by subject x object x predicate score (sgcls), descending, ties in row then predicate order
    # (0.35 / 0.35 on row 3; 0.3 on row 0 before 0.3 on row 3), the background column never
    assert a1["ng_triplets"] == [[0, 1, 0], [2, 1, 1], [0, 0, 0], [0, 0, 1], [0, 1, 1], [0, 0, 2], [0, 1, 2],
                                 [2, 1, 0], [1, 0, 0], [1, 0, 1], [2, 1, 2], [1, 0, 2]]
    assert "ng_triplet_scores" not in a1 and "triplet_scores" not in a1
    b2 = written_records(tmp_path / "out.zip")["b2"]
    assert b2["triplets"] == [[1, 0, 2]] and b2["row_lists"]["oi"]["triplets"] == [[1, 0, 2], [1, 0, 1]]
    # float32: (0.9 x 0.7) x 0.4, not the float64 product of the same numbers
    product32 = (f32(0.9) * f32(0.7)) * f32(0.4)
    assert b2["row_lists"]["oi"]["scores"][0] == float(product32) != \
        float(f32(0.9)) * float(f32(0.7)) * float(f32(0.4))
    assert "row_lists.oi: PySGG's Open Images list (" in openimages.describe(summary)


def ranking(rel_scores, object_scores, pairs=None):
    rel_scores = np.asarray(rel_scores, f32)
    pairs = np.array(pairs if pairs is not None else [[0, 1]] * len(rel_scores), np.int64)
    return openimages.oi_ranking(pairs, rel_scores, np.asarray(object_scores, f32))


def test_ranking_keeps_scores_above_1e_5_strictly():
    """score > 0.00001 (oi_evaluation.py:225): a score equal to float32(1e-5) is left out (>= would
    keep it), the next float32 up is kept."""
    threshold = f32(1e-5)
    above = np.nextafter(threshold, f32(1))
    rows, scores = ranking([[0, 0.5, threshold, 0], [0, 0.5, above, 0]], [1, 1], [[0, 1], [1, 0]])
    assert rows.tolist() == [[0, 1, 0], [1, 0, 0], [1, 0, 1]] and scores[-1] == above


def test_ranking_scores_are_float32_products():
    """(0.035 x 0.145) x p in float32 is float32(1e-5): left out; in float64 the same numbers give
    1.0000000055e-05 > 1e-5, which a float64 ranking would keep."""
    p = f32(0.001970443408936262)
    s, o = f32(0.035), f32(0.145)
    assert (s * o) * p == f32(1e-5) and float(s) * float(o) * float(p) > 1e-5
    rows, scores = ranking([[0, 0.5, p, 0]], [s, o])
    assert rows.tolist() == [[0, 1, 0]] and scores.dtype == np.float32


def test_ranking_keeps_the_first_100():
    """60 rows x 2 predicates = 120 entries, distinct scores: the first 100 by score, then the cut."""
    rng = np.random.default_rng(3)
    probabilities = rng.permutation(np.arange(1, 181)).reshape(60, 3) / 200
    rel_scores = np.column_stack([np.zeros(60), probabilities]).astype(f32)
    pairs = np.column_stack([np.arange(60), (np.arange(60) + 1) % 60])
    rows, scores = ranking(rel_scores, np.ones(60), pairs)
    ordered = -np.sort(-rel_scores[:, 1:], axis=1)[:, :2]
    assert len(rows) == 100 and scores.tolist() == sorted(ordered.ravel().tolist(), reverse=True)[:100]
    cut = sorted(ordered.ravel().tolist(), reverse=True)[100]
    assert cut not in scores.tolist()


def test_ranking_of_ties_is_numpy_s_default_argsort():
    """Exactly equal scores: the order numpy's default (unstable) argsort gives, as in PySGG."""
    rng = np.random.default_rng(4)
    rel_scores = np.column_stack([np.zeros(40), rng.integers(1, 4, (40, 3)) / 4]).astype(f32)
    pairs = np.column_stack([np.arange(40), np.arange(40)[::-1]])
    rows, _ = ranking(rel_scores, np.ones(40), pairs)
    labels = np.argsort(-rel_scores[:, 1:], axis=1)
    spo = -np.sort(-rel_scores[:, 1:], axis=1)[:, :2]
    order = np.argsort(-spo.ravel())[:100]
    expected = np.column_stack([pairs[order // 2], labels[order // 2, order % 2]])
    assert rows.tolist() == expected.tolist()


def test_boxes_are_resized_as_oi_evaluation_resizes_them(tmp_path, gt):
    preds = predictions(size_a1=(64, 48), boxes_a1=[[0, 0, 20, 20], [10, 10, 62, 30], [0, 4, 6, 46]])
    summary = openimages.convert(write_results(tmp_path / "r.pytorch", preds, gts=None), tmp_path / "out.zip", str(gt))
    assert written_records(tmp_path / "out.zip")["a1"]["instances"][1]["bbox"] == [5, 5, 31, 15]
    assert summary["resized"] == 1


@pytest.mark.parametrize("pairs,rel_scores", [(np.zeros((0, 2), np.int64), np.zeros((0, 4), f32)),
                                              (np.zeros(0, np.int64), None), (None, None)])
def test_an_image_without_relation_rows_keeps_its_instances(tmp_path, gt, pairs, rel_scores):
    preds = predictions()
    preds[1].state["extra_fields"].update(rel_pair_idxs=pairs, pred_rel_scores=rel_scores)
    summary = openimages.convert(write_results(tmp_path / "r.pytorch", preds), tmp_path / "out.zip", str(gt))
    b2 = written_records(tmp_path / "out.zip")["b2"]
    assert len(b2["instances"]) == 2 and b2["triplets"] == b2["ng_triplets"] == b2["row_lists"]["oi"]["triplets"] \
        == b2["row_lists"]["oi"]["scores"] == []
    assert summary["no_relation_rows"] == 1
    assert "images without relation rows (instances only): 1" in openimages.describe(summary)


@pytest.mark.parametrize("field,value,words", [
    ("rel_pair_idxs", np.array([[0, 3]]), "image a1\\): field 'prediction.rel_pair_idxs' holds 3 .* only 3 boxes"),
    ("pred_labels", np.array([0, 1, 2]), "image a1\\): field 'prediction.pred_labels' holds 0 .* 1-based"),
    ("pred_rel_scores", np.zeros((4, 3), f32), "image a1\\): prediction field 'pred_rel_scores' has shape \\(4, 3\\)"),
    ("pred_rel_scores", f32([[np.nan, 0, 0, 0]] * 4), "image a1\\): prediction field 'pred_rel_scores' holds NaN"),
    ("pred_scores", None, "image a1\\): prediction has no field 'pred_scores'"),
    ("rel_pair_idxs", "missing", "image a1\\): prediction has no field 'rel_pair_idxs'"),
    ("pred_rel_scores", "missing", "image a1\\): prediction has no field 'pred_rel_scores'"),
    ("os", torchsave.Global("os.system"), "refusing to load it: it holds 'os.system'"),
])
def test_bad_predictions_name_the_file_image_and_field(tmp_path, gt, field, value, words):
    preds = predictions()
    extra = preds[0].state["extra_fields"]
    if isinstance(value, str) or value is None:
        del extra[field]
    else:
        extra[field] = value
    with pytest.raises(sgeval.SGEvalError) as info:
        openimages.convert(write_results(tmp_path / "r.pytorch", preds), tmp_path / "out.zip", str(gt))
    (problem,) = checked(info.value)
    assert problem.startswith(str(tmp_path / "r.pytorch")) and __import__("re").search(words, problem), problem
    assert not (tmp_path / "out.zip").exists() and not (tmp_path / "out.zip.partial").exists()


def test_scores_without_rows_and_another_gt_are_errors(tmp_path, gt):
    preds = predictions()
    preds[1].state["extra_fields"].update(rel_pair_idxs=np.zeros((0, 2), np.int64))
    with pytest.raises(sgeval.SGEvalError, match="image b2\\): prediction field 'pred_rel_scores' holds scores, but"):
        openimages.convert(write_results(tmp_path / "r.pytorch", preds), tmp_path / "out.zip", str(gt))
    gts = groundtruths()
    gts[0].state["extra_fields"]["relation_tuple"] = np.array([[0, 1, 2], [2, 1, 1]])  # a repeated row dropped
    with pytest.raises(sgeval.SGEvalError, match="image a1\\): groundtruth field 'relation_tuple'"):
        openimages.convert(write_results(tmp_path / "r.pytorch", gts=gts), tmp_path / "out.zip", str(gt))


def test_two_workers_write_the_same_bytes(tmp_path, gt):
    raw = write_results(tmp_path / "r.pytorch")
    openimages.convert(raw, tmp_path / "one.zip", str(gt))
    openimages.convert(raw, tmp_path / "two.zip", str(gt), workers=2)
    assert (tmp_path / "one.zip").read_bytes() == (tmp_path / "two.zip").read_bytes()


def test_task_is_guessed_recorded_and_changes_only_the_classic_ng_list(tmp_path, gt):
    """The task changes no row of triplets or of the Open Images list; the classic ng list ranks
    by the predicate score alone in predcls (as sgb's converter and PySGG's classic recall)."""
    raw = write_results(tmp_path / "r.pytorch")
    openimages.convert(raw, tmp_path / "auto.zip", str(gt))
    summary = openimages.convert(raw, tmp_path / "predcls.zip", str(gt), task="predcls")
    with zipfile.ZipFile(tmp_path / "predcls.zip") as archive:
        provenance = json.loads(archive.read(common.PROVENANCE))
    assert provenance["task"] == "predcls" and provenance["options"] == {"task": "predcls"}
    assert provenance["family"] == "openimages" and summary["task_fields_differ"] == 2
    auto, predcls = written_records(tmp_path / "auto.zip"), written_records(tmp_path / "predcls.zip")
    assert [{**record, "ng_triplets": None} for record in auto.values()] == \
        [{**record, "ng_triplets": None} for record in predcls.values()]
    assert auto["a1"]["ng_triplets"][:2] == [[0, 1, 0], [2, 1, 1]]  # sgcls: 1 x 1 x 0.5 before 0.5 x 1 x 0.8
    assert predcls["a1"]["ng_triplets"][:2] == [[2, 1, 1], [0, 1, 0]]  # predcls: 0.8 before 0.5


# ---------------------------------------------------------------------------------------------
# A test loop (image_arrays), the command lines, a recipe, the round trip
# ---------------------------------------------------------------------------------------------


class LiveBoxList:
    """The BoxList PySGG's model returns: attributes, tensors as fields."""

    def __init__(self, written):
        state = written.state
        self.bbox, self.size, self.mode = LiveTensor(state["bbox"]), state["size"], state["mode"]
        self.extra_fields = {name: LiveTensor(value) for name, value in state["extra_fields"].items()}
        self.triplet_extra_fields = []


def live_updates(gt, preds):
    truth = sgeval.read_gt(str(gt))
    sizes = len(truth.object_classes), len(truth.predicate_classes)
    return [(image.image_id, openimages.image_arrays(LiveBoxList(pred), image, *sizes))
            for pred, image in zip(preds, truth.images)]


def test_image_arrays_are_what_the_file_converter_writes(tmp_path, gt):
    preds = predictions(size_a1=(64, 48), boxes_a1=[[0, 0, 20, 20], [10, 10, 62, 30], [0, 4, 6, 46]])
    openimages.convert(write_results(tmp_path / "r.pytorch", preds), tmp_path / "out.zip", str(gt))
    truth = sgeval.read_gt(str(gt))
    source, read = sgeval.read_predictions(str(tmp_path / "out.zip"), len(OBJECTS), len(PREDICATES), "box")
    records = written_records(tmp_path / "out.zip")
    for (image_id, arrays), image in zip(live_updates(gt, preds), truth.images):
        oi = arrays.pop("row_lists")["oi"]
        assert set(arrays) == {"labels", "triplets", "ng_triplets", "masks", "boxes", "scores"}
        assert_arrays_written(arrays, read[image_id], source, image)
        assert oi["scores"].dtype == np.float64 and oi["scores"].tolist() == records[image_id]["row_lists"]["oi"]["scores"]
        rows, scores = read[image_id].row_lists["oi"]
        assert np.array_equal(scores, oi["scores"]) and np.array_equal(rows, oi["triplets"])
        assert read[image_id].triplet_scores is None and read[image_id].ng_triplet_scores is None
    source.close()
    with pytest.raises(common.ConvertError, match="^image a1: prediction is a list, not a BoxList"):
        openimages.image_arrays([], truth.images[0], len(OBJECTS), len(PREDICATES))


@pytest.mark.parametrize("task", ["predcls", "sgcls", "sgdet"])
def test_round_trip_gt_predictions_and_an_evaluator(tmp_path, gt, task):
    """GT converted, predictions converted, evaluated by sgeval: the file and an Evaluator updated by
    image_arrays give the same results. Graph-constrained (sgb): a1's rows miss its GT (has / on
    swapped), b2's row hits. The Open Images list (oi): a1's GT rows are hit by its 5th and 6th
    rows (the 5th hits the repeated GT row twice), b2's by its first."""
    openimages.convert(write_results(tmp_path / "r.pytorch"), tmp_path / "out.zip", str(gt), task=task)
    config = {"gt": str(gt), "task": task, "protocol": "sgb", "protocols": ["unique", "singlempo", "oi"],
              "k": ["1", "4", "5", "6", "20"], "absent_predicates": "zero"}
    from_file = sgeval.evaluate(sgeval.make_config({**config, "pred": str(tmp_path / "out.zip")}))
    assert_same_results(evaluate_updates(config, live_updates(gt, predictions())), from_file)
    assert from_file["metrics"]["R@20"] == 0.5 and from_file["images"]["evaluated"] == 2
    recall = from_file["by_protocol"]["oi"]["metrics"]
    assert [recall[f"R@{k}"] for k in (1, 4, 5, 6)] == pytest.approx([0.25, 0.25, 0.75, 1], abs=1e-9)


def test_cli_gt_and_predictions(tmp_path):
    folder = write_annotations(tmp_path / "anno")
    run = CliRunner().invoke(cli.main, ["openimages-gt", "--anno-dir", str(folder), "--out", str(tmp_path / "gt.json")],
                             prog_name="sgeval convert")
    assert run.exit_code == 0, run.output
    assert run.output.startswith(f"wrote {tmp_path / 'gt.json'}: 2 evaluated images, 1 training images")
    raw = write_results(tmp_path / "eval_results.pytorch")
    run = CliRunner().invoke(cli.main, ["openimages", "--gt", str(tmp_path / "gt.json"), "--quiet", str(raw),
                                        str(tmp_path / "out.zip")], prog_name="sgeval convert")
    assert run.exit_code == 0, run.output
    assert "task: sgcls 2 images (guessed" in run.output and "PySGG's Open Images list" in run.output
    shown = CliRunner().invoke(cli.main, ["openimages-gt", "--help"], prog_name="sgeval convert")
    assert shown.output.startswith("Usage: sgeval convert openimages-gt [OPTIONS]") and "--anno-dir" in shown.output
    # python -m convert.openimages gt ... (the checkout's entry point) is the same GT command
    done = subprocess.run([sys.executable, "-m", "convert.openimages", "gt", "--anno-dir", str(folder), "--out",
                           str(tmp_path / "gt2.json")], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "gt2.json").read_bytes() == (tmp_path / "gt.json").read_bytes()
    failed = CliRunner().invoke(cli.main, ["openimages-gt", "--anno-dir", str(tmp_path), "--out",
                                           str(tmp_path / "x.json")])
    assert failed.exit_code == 1 and "categories_dict.json: no such file" in failed.output


def test_recipe(tmp_path, gt):
    raw = write_results(tmp_path / "eval_results.pytorch")
    (tmp_path / "oi.yaml").write_text(yaml.safe_dump({"gt": str(gt), "pred": str(tmp_path / "oi.zip"),
                                                      "protocol": "sgb"}))
    (tmp_path / "convert").mkdir()
    (tmp_path / "convert" / "oi.yaml").write_text(yaml.safe_dump({"family": "openimages", "raw": str(raw),
                                                                  "task": "predcls"}))
    message, summary = convert_recipe.prepare(tmp_path / "oi.yaml")
    assert message.startswith("converting") and summary["task:predcls"] == 2
    assert "is up to date" in convert_recipe.prepare(tmp_path / "oi.yaml")[0]
    (tmp_path / "convert" / "oi.yaml").write_text(yaml.safe_dump({"family": "openimages", "raw": str(raw),
                                                                  "ng_top": 5}))
    with pytest.raises(common.ConvertError, match="unknown key 'ng_top'; valid keys: family, raw, task"):
        convert_recipe.prepare(tmp_path / "oi.yaml")
