"""The GT converters ``sgeval_convert.vg150`` (Scene-Graph-Benchmark's VG150 h5 files) and
``sgeval_convert.gqa200`` (the GQA-200 json files): each loader rule on a hand case (box truncation,
float32 and clipping, corrupted ids, split selection with val, duplicate rows, GQA's skipped entry
5,580), hostile inputs (one line per problem, nothing written), and generated files
(``tools/make_vg_data.py``) converted, read back by ``sgeval.read_gt`` and evaluated."""

import json
import math
import sys

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import checked, only, sgeval

from sgeval_convert import gqa200, gtjson, vg150
from tools import make_vg_data as mk

# ---------------------------------------------------------------------------------------------
# VG150 helpers and hand images
# ---------------------------------------------------------------------------------------------

# W = H = 1024: the scale factor is 1, so the boxes are the truncated 1024-scale integers.
# [10, 20, 5, 4]: x1 = trunc(10 - 2.5) = 7 (the writer meant 8), x2 = 12; y1 = 18, y2 = 22.
# [2, 3, 5, 7]: x1 = trunc(-0.5) = 0, x2 = 5; y1 = trunc(-0.5) = 0, y2 = 7.
# [1020, 1000, 40, 60]: x 1000..1040 and y 970..1030, both clipped to 1023.
SQUARE = mk.vg_image(10, 1024, 1024, 2, [[10, 20, 5, 4], [2, 3, 5, 7], [1020, 1000, 40, 60]], [1, 150, 7],
                     [[0, 1, 1], [0, 1, 1], [2, 0, 50], [0, 1, 3]])
SQUARE_BOXES = [[7.0, 18.0, 12.0, 22.0], [0.0, 0.0, 5.0, 7.0], [1000.0, 970.0, 1023.0, 1023.0]]
# W = 500, H = 333: scale 500 / 1024. [100, 51, 31, 17]: x 84..115, y 42..59 (trunc(42.5) = 42).
WIDE = mk.vg_image(11, 500, 333, 2, [[100, 51, 31, 17], [300, 100, 10, 10]], [3, 4], [[1, 0, 2]])
WIDE_BOXES = [[84 * 500 / 1024, 42 * 500 / 1024, 115 * 500 / 1024, 59 * 500 / 1024],
              [295 * 500 / 1024, 95 * 500 / 1024, 305 * 500 / 1024, 105 * 500 / 1024]]
# W = 39999: x1 = 1023 scales to 39959.9384765625, which float32 rounds to 39959.9375; x2 = 1025
# scales beyond the image and is clipped to 39998; y 0..2 -> 0 and 78.123046875.
HUGE = mk.vg_image(12, 39999, 100, 2, [[1024, 1, 2, 2], [10, 1, 4, 2]], [5, 6], [[0, 1, 9]])
HUGE_FIRST_BOX = [39959.9375, 0.0, 39998.0, 78.123046875]


def plain(image_id, split, n_boxes=2, n_relations=1, width=None, height=None):
    """A VG image with n_boxes boxes and n_relations rows (0 -> none), distinct sizes per id."""
    boxes = [[100 + 10 * b, 100, 20, 20] for b in range(n_boxes)]
    relations = [[0, 1, 5]] * n_relations if n_boxes >= 2 else []
    return mk.vg_image(image_id, width or 100 + image_id, height or 200 + image_id, split, boxes,
                       [1 + b for b in range(n_boxes)], relations)


# h5 index: 0 train pool 1 | 1 test | 2 split 0 without relations | 3 split 2 without boxes |
# 4 split 1 (never used) | 5 train pool 2 | 6 split 2 without relations | 7 train pool 3
SPLIT_CASE = [plain(20, 0), plain(21, 2), plain(22, 0, n_relations=0), plain(23, 2, n_boxes=0),
              plain(24, 1), plain(25, 0), plain(26, 2, n_relations=0), plain(27, 0)]


def vg_files(tmp_path, images, arrays=None):
    return mk.write_vg(tmp_path / "vg", images, arrays=arrays)


def vg_convert(tmp_path, images, split="test", train=True, num_val=vg150.NUM_VAL_IMAGES, arrays=None, files=None):
    """Convert; returns (the written JSON, summary)."""
    paths = files or vg_files(tmp_path, images, arrays)
    out = tmp_path / "gt.json"
    summary = vg150.convert(paths["h5"], paths["dicts"], paths["image_data"], out, split, train, num_val)
    return json.loads(out.read_text()), summary


def vg_problems(tmp_path, images, arrays=None, files=None, **options):
    """The problems of a failing conversion (nothing may be written)."""
    paths = files or vg_files(tmp_path, images, arrays)
    out = tmp_path / "gt.json"
    with pytest.raises(sgeval.SGEvalError) as info:
        vg150.convert(paths["h5"], paths["dicts"], paths["image_data"], out, **options)
    assert not out.exists() and not (tmp_path / "gt.json.partial").exists()
    return checked(info.value), paths


def by_id(gt):
    return {str(entry["image_id"]): entry for entry in gt["data"]}


def boxes_of(entry):
    return [a["bbox"] for a in entry["annotations"]]


# ---------------------------------------------------------------------------------------------
# VG150 rules
# ---------------------------------------------------------------------------------------------


def test_vg_boxes_truncate_odd_sizes_and_clip(tmp_path):
    gt, _ = vg_convert(tmp_path, [SQUARE, WIDE, HUGE])
    entries = by_id(gt)
    assert boxes_of(entries["10"]) == SQUARE_BOXES
    assert boxes_of(entries["11"]) == WIDE_BOXES
    assert boxes_of(entries["12"])[0] == HUGE_FIRST_BOX
    assert entries["12"]["annotations"][0]["bbox"][0] != 1023 / 1024 * 39999  # the float32 value, not float64


def test_vg_boxes_match_a_plain_reimplementation_on_generated_files(tmp_path):
    """Every generated box (odd sizes, x = 0, beyond the image) against integer arithmetic."""
    images = mk.random_vg_images(np.random.default_rng(3), 60)
    gt, _ = vg_convert(tmp_path, images, num_val=5)
    entries, checked_boxes = by_id(gt), 0
    for image in images:
        entry = entries.get(str(image["image_id"]))
        if entry is None:
            continue
        width, height, scale = image["width"], image["height"], max(image["width"], image["height"])
        for (cx, cy, w, h), written in zip(image["boxes"], boxes_of(entry)):
            x1, y1 = math.trunc(cx - w / 2), math.trunc(cy - h / 2)
            corners = [x1, y1, x1 + w, y1 + h]
            limits = [width - 1, height - 1] * 2
            expected = [min(max(float(np.float32(v / 1024 * scale)), 0.0), limit) for v, limit in zip(corners, limits)]
            assert written == expected, (image["image_id"], cx, cy, w, h)
            checked_boxes += 1
    assert checked_boxes > 50


def test_vg_block_reads_and_image_by_image_reads_agree(tmp_path, monkeypatch):
    """Images are read BLOCK_IMAGES at a time, or one by one when a block spans too many rows."""
    images = mk.random_vg_images(np.random.default_rng(5), 40)
    paths = vg_files(tmp_path, images)
    expected, _ = vg_convert(tmp_path, images, num_val=5, files=paths)
    for block_images, max_rows in ((3, vg150.MAX_BLOCK_ROWS), (8, 10), (1, 1)):
        monkeypatch.setattr(vg150, "BLOCK_IMAGES", block_images)
        monkeypatch.setattr(vg150, "MAX_BLOCK_ROWS", max_rows)
        assert vg_convert(tmp_path, images, num_val=5, files=paths)[0] == expected


def test_vg_vocabulary_categories_predicates_and_duplicate_rows(tmp_path):
    gt, summary = vg_convert(tmp_path, [SQUARE])
    assert gt["thing_classes"] == mk.names("object", 150) and gt["stuff_classes"] == []
    assert gt["predicate_classes"] == mk.names("predicate", 50)
    entry = gt["data"][0]
    assert [s["category_id"] for s in entry["segments_info"]] == [0, 149, 6]
    assert entry["relations"] == [[0, 1, 0], [0, 1, 0], [2, 0, 49], [0, 1, 2]]  # every row, in h5 order
    assert summary["duplicate_relation_rows"] == 1
    assert (entry["width"], entry["height"], entry["file_name"]) == (1024, 1024, "10.jpg")


def test_vg_test_split_selection_and_corrupted_ids(tmp_path):
    """Test = split 2 with a box and a relation; train = split 0 after the first num_val. Each
    image keeps its own size although the corrupted entries sit among them in image_data.json."""
    gt, summary = vg_convert(tmp_path, SPLIT_CASE, num_val=2)
    assert gt["test_image_ids"] == [21]
    assert [e["image_id"] for e in gt["data"]] == [21, 27]
    assert all((e["width"], e["height"]) == (100 + e["image_id"], 200 + e["image_id"]) for e in gt["data"])
    assert gt["info"]["corrupted_image_ids_dropped"] == list(mk.CORRUPTED_IMAGE_IDS)
    assert (summary["evaluated"], summary["training"]) == (1, 1)


def test_vg_val_split_is_the_first_split_zero_images(tmp_path):
    gt, _ = vg_convert(tmp_path, SPLIT_CASE, split="val", num_val=2)
    assert gt["test_image_ids"] == [20, 25]
    assert [e["image_id"] for e in gt["data"]] == [20, 25, 27]
    gt, _ = vg_convert(tmp_path, SPLIT_CASE, split="val", train=False, num_val=2)
    assert [e["image_id"] for e in gt["data"]] == [20, 25]


def test_vg_selection_at_the_real_val_size():
    flags = np.array([0] * 5003 + [2, 1, 2])
    first_box = np.arange(len(flags))
    first_rel = first_box.copy()
    first_rel[3] = -1  # not usable: val takes one more image
    evaluated, training = vg150.select_images(flags, first_box, first_rel, "val")
    assert len(evaluated) == 5000 and evaluated[-1] == 5000 and 3 not in evaluated
    assert training.tolist() == [5001, 5002]
    evaluated, _ = vg150.select_images(flags, first_box, first_rel, "test")
    assert evaluated.tolist() == [5003, 5005]


def test_vg_no_train_writes_only_the_evaluated_images(tmp_path):
    gt, _ = vg_convert(tmp_path, SPLIT_CASE, train=False, num_val=2)
    assert [e["image_id"] for e in gt["data"]] == [21]


# ---------------------------------------------------------------------------------------------
# VG150 hostile inputs
# ---------------------------------------------------------------------------------------------

BASE = [plain(30, 0), SQUARE, plain(31, 2)]  # h5 indices 0, 1, 2


def arrays_with(**changes):
    """The BASE h5 datasets with some of them changed by functions array -> array."""
    arrays = mk.vg_arrays(BASE)
    return {name: change(arrays[name].copy()) for name, change in changes.items()}


def put(index, value):
    def change(array):
        array[index] = value
        return array
    return change


@pytest.mark.parametrize("arrays, image, words", [
    ({"relationships": None}, None, ["missing dataset 'relationships'"]),
    (arrays_with(boxes_1024=lambda a: a.astype(np.float32)), None, ["'boxes_1024'", "float32"]),
    (arrays_with(boxes_1024=lambda a: a[:, :3]), None, ["'boxes_1024'", "shape"]),
    (arrays_with(labels=lambda a: a[:-1]), None, ["'labels'", "rows"]),
    (arrays_with(split=lambda a: a.reshape(-1, 1)), None, ["'split'", "shape"]),
    (arrays_with(labels=put((2, 0), 0)), 1, ["image_id 10", "'labels'", "1..150"]),
    (arrays_with(predicates=put((3, 0), 51)), 1, ["image_id 10", "'predicates'", "1..50"]),
    (arrays_with(relationships=put((1, 0), 0)), 1, ["'relationships", "-2"]),  # box 0 is image 0's
    (arrays_with(img_to_last_box=put(1, 99)), 1, ["'img_to_last_box'", "range"]),
    (arrays_with(img_to_last_rel=put(1, 0)), 1, ["'img_to_first_rel'", "'img_to_last_rel'"]),
    (arrays_with(boxes_1024=put((3, 2), 0)), 1, ["'boxes_1024'", "w, h > 0"]),
])
def test_vg_bad_h5(tmp_path, arrays, image, words):
    problems, paths = vg_problems(tmp_path, BASE, arrays)
    only(problems, paths["h5"], image, *words)


def test_vg_not_an_h5_file(tmp_path):
    paths = vg_files(tmp_path, BASE)
    paths["h5"].write_bytes(b"not hdf5")
    problems, _ = vg_problems(tmp_path, BASE, files=paths)
    only(problems, paths["h5"], None, "cannot read HDF5")


def test_vg_without_h5py_says_what_to_install(tmp_path, monkeypatch):
    paths = vg_files(tmp_path, BASE)
    monkeypatch.setitem(sys.modules, "h5py", None)  # import h5py: ModuleNotFoundError
    problems, _ = vg_problems(tmp_path, BASE, files=paths)
    only(problems, paths["h5"], None, "needs h5py", "pip install 'sgeval[vg150]'")


def rewrite(path, change):
    content = json.loads(path.read_text())
    path.write_text(json.dumps(change(content)))


def without_entry(image_id):
    return lambda entries: [e for e in entries if e["image_id"] != image_id]


def with_field(image_id, key, value):
    def change(entries):
        for entry in entries:
            if entry["image_id"] == image_id:
                entry[key] = value
        return entries
    return change


@pytest.mark.parametrize("change, image, words", [
    (without_entry(30), None, ["2 entries", "holds 3 images"]),
    (lambda entries: entries + [dict(entries[0], image_id=99)], None, ["4 entries", "holds 3 images"]),
    (with_field(30, "image_id", 1592), None, ["(5 found)", "2 entries"]),  # dropped by id, wherever it is
    (with_field(10, "width", "wide"), 1, ["image_id 10", "'width'"]),
    (with_field(31, "image_id", "31"), None, ["entry", "'image_id' must be an integer"]),
    (lambda entries: {"images": entries}, None, ["must hold a JSON list"]),
])
def test_vg_bad_image_data(tmp_path, change, image, words):
    paths = vg_files(tmp_path, BASE)
    rewrite(paths["image_data"], change)
    problems, _ = vg_problems(tmp_path, BASE, files=paths)
    only(problems, paths["image_data"], image, *words)
    assert "ConvertError" not in problems[0]


def test_vg_oversized_dicts_file(tmp_path, monkeypatch):
    monkeypatch.setattr(gtjson, "MAX_SMALL_JSON", 100)
    problems, paths = vg_problems(tmp_path, BASE)
    assert problems == [f"{paths['dicts']}: cannot read the VG dicts file: {paths['dicts'].stat().st_size} bytes, "
                        f"more than the 100 it may have"]


def test_vg_bad_image_data_json(tmp_path):
    paths = vg_files(tmp_path, BASE)
    paths["image_data"].write_text('[{"image_id": 1, "width": 3,')
    problems, _ = vg_problems(tmp_path, BASE, files=paths)
    only(problems, paths["image_data"], None, "cannot read JSON")


def test_vg_repeated_image_id(tmp_path):
    images = [plain(40, 2), plain(41, 2)]
    paths = vg_files(tmp_path, images)
    rewrite(paths["image_data"], with_field(41, "image_id", 40))
    problems, _ = vg_problems(tmp_path, images, files=paths)
    only(problems, paths["h5"], None, "image_id 40 occurs twice")


@pytest.mark.parametrize("change, words", [
    (lambda d: {k: v for k, v in d.items() if k != "label_to_idx"}, ["missing field 'label_to_idx'"]),
    (lambda d: {**d, "predicate_to_idx": {**d["predicate_to_idx"], "predicate001": 0}},
     ["'predicate_to_idx'", "indices 1 to 50"]),
    (lambda d: {**d, "idx_to_label": {**d["idx_to_label"], "1": "other"}}, ["'idx_to_label'", "inverse"]),
    (lambda d: [d], ["must hold a JSON object"]),
])
def test_vg_bad_dicts(tmp_path, change, words):
    paths = vg_files(tmp_path, BASE)
    rewrite(paths["dicts"], change)
    problems, _ = vg_problems(tmp_path, BASE, files=paths)
    only(problems, paths["dicts"], None, *words)


def test_vg_problems_are_listed_together_and_capped(tmp_path, monkeypatch):
    monkeypatch.setattr(gtjson, "MAX_PROBLEMS", 2)
    images = [plain(50 + i, 2) for i in range(4)]
    problems, paths = vg_problems(tmp_path, images, arrays={"labels": np.zeros((8, 1), np.int64)})
    assert len(problems) == 3 and problems[-1] == "... and 2 more problems"
    assert all(str(paths["h5"]) in p and "'labels'" in p for p in problems[:2])


def test_vg_oversized_image_range_is_refused_before_reading(tmp_path, monkeypatch):
    monkeypatch.setattr(gtjson, "MAX_BOXES", 2)
    problems, paths = vg_problems(tmp_path, BASE)
    only(problems, paths["h5"], 1, "3 box rows exceed the limit of 2")


def test_vg_cli(tmp_path):
    paths = vg_files(tmp_path, BASE)
    out = tmp_path / "cli.json"
    args = ["--h5", paths["h5"], "--dicts", paths["dicts"], "--image-data", paths["image_data"], "--out", out,
            "--num-val", "1", "--quiet"]
    result = CliRunner().invoke(vg150.main, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    assert "2 evaluated images, 0 training images" in result.output and out.exists()
    paths["dicts"].write_text("{}")
    result = CliRunner().invoke(vg150.main, [str(a) for a in args])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output and result.output.count("error: ") == 2


# ---------------------------------------------------------------------------------------------
# GQA-200
# ---------------------------------------------------------------------------------------------


def gqa(name, boxes=([0, 0, 10, 10], [5, 5, 20, 20]), relations=([0, 1, 1],), width=640, height=480, classes=None):
    return mk.gqa_image(f"{name}.jpg", width, height, boxes, classes or [1 + i for i in range(len(boxes))], relations)


def gqa_convert(tmp_path, train, test, **options):
    paths = mk.write_gqa(tmp_path / "gqa", train, test)
    out = tmp_path / "gqa.json"
    summary = gqa200.convert(paths["info"], paths["train"], paths["test"], out, **options)
    return json.loads(out.read_text()), summary


def gqa_problems(tmp_path, train, test, paths=None, **options):
    paths = paths or mk.write_gqa(tmp_path / "gqa", train, test)
    out = tmp_path / "gqa.json"
    with pytest.raises(sgeval.SGEvalError) as info:
        gqa200.convert(paths["info"], paths["train"], paths["test"], out, **options)
    assert not out.exists() and not (tmp_path / "gqa.json.partial").exists()
    return checked(info.value), paths


# Test file: 1 kept | 2 kept | 3 skipped (skip_entry=3) | 4 no relations | 5 no boxes | 6 kept | 7 kept
SKIP_CASE = [gqa("t1"), gqa("t2"), gqa("t3"), gqa("t4", relations=()), gqa("t5", boxes=(), relations=()),
             gqa("t6"), gqa("t7")]


def test_gqa_test_split_skips_the_entry_and_the_empty_ones(tmp_path):
    gt, summary = gqa_convert(tmp_path, [gqa("r1"), gqa("r2"), gqa("r3")], SKIP_CASE, skip_entry=3)
    assert gt["test_image_ids"] == ["t1", "t2", "t6", "t7"]
    assert [e["image_id"] for e in gt["data"]] == ["t1", "t2", "t6", "t7", "r1", "r2", "r3"]  # no skip in train
    assert gt["info"]["skipped_test_entry"] == 3 and (summary["evaluated"], summary["training"]) == (4, 3)


def test_gqa_val_is_the_first_kept_test_entries(tmp_path):
    gt, _ = gqa_convert(tmp_path, [gqa("r1")], SKIP_CASE, split="val", skip_entry=3, num_val=3)
    assert gt["test_image_ids"] == ["t1", "t2", "t6"]
    gt, _ = gqa_convert(tmp_path, [gqa("r1")], SKIP_CASE, split="val", write_train=False, skip_entry=3, num_val=3)
    assert [e["image_id"] for e in gt["data"]] == ["t1", "t2", "t6"]


def test_gqa_selection_at_the_real_skip_and_val_values():
    """The 5,580th entry (1-based) is skipped in test and val, not in train; val takes 5,000."""
    entries = [gqa200.Entry(number, f"{number}.jpg", None, [[0, 0, 1, 1]], [1], [[0, 0, 1]])
               for number in range(1, 5586)]
    kept = [e.number for e in gqa200.select(entries, "test", "f", gtjson.Problems())]
    assert len(kept) == 5584 and 5580 not in kept and 5579 in kept and 5581 in kept
    assert len(list(gqa200.select(entries, "train", "f", gtjson.Problems()))) == 5585
    val = [e.number for e in gqa200.select(entries, "val", "f", gtjson.Problems())]
    assert val == list(range(1, 5001))


def test_gqa_vocabulary_boxes_and_duplicate_rows(tmp_path):
    """Boxes: float32 of the json numbers, clipped to [0, W - 1] x [0, H - 1]."""
    entry = gqa("b1", boxes=([10.3, -5, 700.7, 50], [0, 0, 639, 479]), relations=([1, 0, 100], [1, 0, 100], [0, 1, 1]),
                classes=[200, 1])
    gt, summary = gqa_convert(tmp_path, [], [entry])
    assert gt["thing_classes"] == mk.names("thing", 200) and gt["predicate_classes"] == mk.names("relation", 100)
    assert gt["info"]["background_dropped"] == ["__background__", "__background__"]
    written = gt["data"][0]
    assert boxes_of(written) == [[10.300000190734863, 0.0, 639.0, 50.0], [0.0, 0.0, 639.0, 479.0]]
    assert [s["category_id"] for s in written["segments_info"]] == [199, 0]
    assert written["relations"] == [[1, 0, 99], [1, 0, 99], [0, 1, 0]]
    assert (written["file_name"], summary["duplicate_relation_rows"]) == ("b1.jpg", 1)


def change_list(path, key, change):
    rewrite(path, lambda content: {**content, key: change(content[key])})


def set_at(index, value):
    def change(values):
        values[index] = value
        return values
    return change


GQA_BASE = [gqa("g1"), gqa("g2")]


@pytest.mark.parametrize("key, change, image, words", [
    ("gt_classes_all", lambda v: v[:1], None, ["gt_classes_all hold(s) 1 entries", "filenames_all"]),
    ("gt_boxes_all", set_at(1, [[0, 0, 10], [5, 5, 20, 20]]), "entry 2", ["'gt_boxes_all'"]),
    ("gt_classes_all", set_at(0, [1, 201]), "entry 1", ["'gt_classes_all'", "1..200"]),
    ("gt_classes_all", set_at(0, [1]), "entry 1", ["gt_classes_all has 1 values, gt_boxes_all 2"]),
    ("relationships_all", set_at(1, [[0, 2, 1]]), "entry 2", ["(box indices)", "row 0 holds [0, 2]"]),
    ("relationships_all", set_at(1, [[0, 1, 0]]), "entry 2", ["(predicates)", "holds [0]"]),
    ("relationships_all", set_at(1, None), "entry 2", ["'relationships_all' must be a list"]),
    ("img_info_all", set_at(0, {"width": 0, "height": 10}), "entry 1", ["'img_info_all'"]),
    ("filenames_all", set_at(0, 7), "entry 1", ["'filenames_all'"]),
])
def test_gqa_bad_test_file(tmp_path, key, change, image, words):
    paths = mk.write_gqa(tmp_path / "gqa", [], GQA_BASE)
    change_list(paths["test"], key, change)
    problems, _ = gqa_problems(tmp_path, None, None, paths)
    only(problems, paths["test"], None, *([image] if image else []), *words)


def test_gqa_bad_files(tmp_path):
    paths = mk.write_gqa(tmp_path / "gqa", GQA_BASE, GQA_BASE)
    rewrite(paths["train"], lambda content: {k: v for k, v in content.items() if k != "img_info_all"})
    problems, _ = gqa_problems(tmp_path, None, None, paths)
    only(problems, paths["train"], None, "missing top-level field 'img_info_all'")
    paths["train"].write_text("[1, 2]")
    only(gqa_problems(tmp_path, None, None, paths)[0], paths["train"], None, "must hold a JSON object")
    rewrite(paths["info"], lambda info: {**info, "ind_to_predicates": ["__background__"]})
    only(gqa_problems(tmp_path, None, None, paths)[0], paths["info"], None, "'ind_to_predicates'")


def test_gqa_oversized_entry_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(gtjson, "MAX_RELATIONS", 2)
    problems, paths = gqa_problems(tmp_path, [], [gqa("many", relations=([0, 1, 1],) * 3)])
    only(problems, paths["test"], None, "entry 1", "'relationships_all' holds 3 rows", "limit of 2")


def test_gqa_image_in_both_files_is_refused(tmp_path):
    problems, paths = gqa_problems(tmp_path, [gqa("same")], [gqa("same")])
    only(problems, paths["test"], None, "image_id same occurs twice")


# ---------------------------------------------------------------------------------------------
# Generated files: read back by sgeval and evaluated
# ---------------------------------------------------------------------------------------------


def perfect_predictions(gt_path):
    """A prediction per evaluated image: the GT boxes and categories, every distinct GT triplet."""
    truth = sgeval.read_gt(gt_path)
    for image in truth.images:
        instances = [{"category": int(c), "bbox": [float(v) for v in box], "score": 1.0}
                     for c, box in zip(image.categories, image.boxes)]
        yield {"id": image.image_id, "instances": instances, "triplets": image.relations.tolist()}


@pytest.mark.parametrize("kind", ["vg", "gqa"])
def test_generated_files_convert_read_back_and_evaluate(tmp_path, kind):
    out = tmp_path / f"{kind}.json"
    if kind == "vg":
        paths = mk.make_vg(tmp_path / "data", seed=1)
        summary = vg150.convert(paths["h5"], paths["dicts"], paths["image_data"], out, num_val=5)
    else:
        paths = mk.make_gqa(tmp_path / "data", seed=1)
        summary = gqa200.convert(paths["info"], paths["train"], paths["test"], out)
    truth = sgeval.read_gt(out)
    assert len(truth.images) == summary["evaluated"] > 5 and summary["training"] > 5
    assert summary["duplicate_relation_rows"] > 0
    assert sum(len(image.file_rows) for image in truth.images) < summary["relations"]  # training rows too
    pred = tmp_path / "pred.json"
    sgeval.write_predictions(pred, perfect_predictions(out))
    results = sgeval.evaluate(sgeval.load_config(gt=str(out), pred=str(pred), protocol="sgb"))
    assert results["metrics"]["R@20"] == 1.0 and results["metrics"]["ngR@20"] == 1.0


def test_generator_is_seeded_and_fast(tmp_path):
    import time

    start = time.time()
    first = {**mk.make_vg(tmp_path / "a", seed=4), **mk.make_gqa(tmp_path / "a", seed=4)}
    assert time.time() - start < 1.0
    second = {**mk.make_vg(tmp_path / "b", seed=4), **mk.make_gqa(tmp_path / "b", seed=4)}
    for key in first:
        if key != "h5":
            assert first[key].read_bytes() == second[key].read_bytes()
    import h5py

    with h5py.File(first["h5"]) as a, h5py.File(second["h5"]) as b:
        assert set(a) == set(b) == {"split", "boxes_1024", "boxes_512", "labels", "attributes", "img_to_first_box",
                                    "img_to_last_box", "img_to_first_rel", "img_to_last_rel", "relationships",
                                    "predicates"}
        for name in a:
            assert a[name].dtype == b[name].dtype and np.array_equal(a[name][:], b[name][:])
        assert a["labels"].shape[1] == 1 and a["attributes"].shape[1] == 10 and a["boxes_1024"].dtype == np.int32
        assert (a["img_to_first_rel"][:] == -1).any() and (a["img_to_first_box"][:] == -1).any()
