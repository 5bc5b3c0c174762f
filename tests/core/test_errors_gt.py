"""Bad ground truth (SPEC section 8): psg.json, the panoptic PNGs, the training annotations
(train_gt) and the zero-shot list. Every problem is one SGEvalError line naming the file, the image
and the field; each case breaks one thing in perfect_case (conftest.py)."""

import json

import numpy as np
import pytest
from conftest import (assert_cli_reports, checked, edit_gt, gt_entry, matching, only, perfect_case, png_path,
                      problems_of, rewrite_json, sgeval, write_train_gt)
from PIL import Image

def test_the_unbroken_case_is_valid(tmp_path):
    for mode in ("mask", "box"):
        result = sgeval.evaluate(sgeval.make_config(perfect_case(tmp_path / mode, mode)))
        assert result["metrics"]["R@20"] == 1.0 and result["images"]["evaluated"] == 3


# ------------------------------------------------------------------------------------- psg.json


@pytest.mark.parametrize("content", [b"{\"data\": [", b"", b"\xff\xfe not utf8 {"],
                         ids=["truncated", "empty", "binary"])
def test_gt_malformed_json(tmp_path, content):
    values = perfect_case(tmp_path)
    open(values["gt"], "wb").write(content)
    only(problems_of(values), values["gt"], None, "JSON")


def test_gt_unreadable(tmp_path):
    values = perfect_case(tmp_path)
    missing = tmp_path / "nowhere" / "psg.json"
    only(problems_of({**values, "gt": str(missing)}), missing)


def test_gt_missing_top_level_field(tmp_path):
    values = perfect_case(tmp_path)
    edit_gt(values, lambda data: data.pop("predicate_classes"))
    only(problems_of(values), values["gt"], None, "predicate_classes")


@pytest.mark.parametrize("field, value", [
    ("thing_classes", 5), ("predicate_classes", None), ("test_image_ids", 7), ("data", {"101": {}}),
    ("data", 3),
])
def test_gt_top_level_field_of_wrong_type(tmp_path, field, value):
    values = perfect_case(tmp_path)
    edit_gt(values, lambda data: data.update({field: value}))
    problems = problems_of(values)
    assert matching(problems, values["gt"], None, field), problems
    assert all(str(values["gt"]) in p for p in problems), problems


def test_gt_not_an_object(tmp_path):
    values = perfect_case(tmp_path)
    open(values["gt"], "w").write("[1, 2]")
    problems = problems_of(values)
    assert all(str(values["gt"]) in p for p in problems)


@pytest.mark.parametrize("field", ["relations", "segments_info", "annotations", "height", "width"])
def test_gt_image_missing_field(tmp_path, field):
    values = perfect_case(tmp_path)
    edit_gt(values, lambda data: gt_entry(data, "102").pop(field))
    only(problems_of(values), values["gt"], "102", field)


@pytest.mark.parametrize("field, value", [("height", "tall"), ("width", None), ("height", [2])])
def test_gt_image_malformed_size_field(tmp_path, field, value):
    values = perfect_case(tmp_path)
    edit_gt(values, lambda data: gt_entry(data, "102").update({field: value}))
    only(problems_of(values), values["gt"], "102", field)


@pytest.mark.parametrize("relation, words", [
    ([0, 5, 0], ("relation", "segment", "5")),
    ([-1, 2, 0], ("relation", "segment", "-1")),
    ([0, 2, 4], ("relation", "predicate", "4")),
    ([0, 2, -2], ("relation", "predicate", "-2")),
])
def test_gt_relation_index_out_of_range(tmp_path, relation, words):
    values = perfect_case(tmp_path)
    edit_gt(values, lambda data: gt_entry(data, "101")["relations"].append(relation))
    only(problems_of(values), values["gt"], "101", *words)


@pytest.mark.parametrize("relations", [[[0, 1.5, 0]], [[0, 1]], [[0, 1, 0], [1, 0]], "0 1 0"],
                         ids=["float", "short", "ragged", "string"])
def test_gt_relations_not_integer_rows(tmp_path, relations):
    values = perfect_case(tmp_path)
    edit_gt(values, lambda data: gt_entry(data, "102").update(relations=relations))
    only(problems_of(values), values["gt"], "102", "relations")


@pytest.mark.parametrize("category", [5, -1])
def test_gt_category_out_of_vocabulary(tmp_path, category):
    values = perfect_case(tmp_path)
    edit_gt(values, lambda data: gt_entry(data, "103")["segments_info"][1].update(category_id=category))
    only(problems_of(values), values["gt"], "103", "category", str(category))


def test_gt_duplicate_image_id(tmp_path):
    values = perfect_case(tmp_path)
    edit_gt(values, lambda data: data["data"].append(dict(gt_entry(data, "102"))))
    only(problems_of(values), values["gt"], "102", "duplicate")


def test_gt_annotations_and_segments_differ_in_length(tmp_path):
    values = perfect_case(tmp_path)
    edit_gt(values, lambda data: gt_entry(data, "101")["annotations"].pop())
    only(problems_of(values), values["gt"], "101", "annotations", "segments_info")


@pytest.mark.parametrize("mode", ["box", "mask"])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), 10**400], ids=["nan", "inf", "10**400"])
def test_gt_nan_or_inf_box(tmp_path, value, mode):
    """A GT bbox is four finite numbers in both modes (an integer beyond the float range once
    raised OverflowError)."""
    values = perfect_case(tmp_path, mode=mode)
    edit_gt(values, lambda data: gt_entry(data, "102")["annotations"][0]["bbox"].__setitem__(2, value))
    only(problems_of(values), values["gt"], "102", "bbox")


def test_gt_several_problems_are_collected(tmp_path):
    values = perfect_case(tmp_path)

    def edit(data):
        gt_entry(data, "101")["relations"].append([0, 9, 0])
        gt_entry(data, "102")["segments_info"][0]["category_id"] = 77
        gt_entry(data, "103").pop("relations")

    edit_gt(values, edit)
    problems = problems_of(values)
    assert len(problems) == 3, problems
    assert matching(problems, values["gt"], "101", "9")
    assert matching(problems, values["gt"], "102", "category", "77")
    assert matching(problems, values["gt"], "103", "relations")


# -------------------------------------------------------------------------------- panoptic PNGs


def test_gt_png_missing(tmp_path):
    values = perfect_case(tmp_path)
    (tmp_path / "gt" / "panoptic" / "102.png").unlink()
    only(problems_of(values), png_path(values, "102"), "102")


@pytest.mark.parametrize("corrupt", ["garbage", "truncated"])
def test_gt_png_corrupt(tmp_path, corrupt):
    values = perfect_case(tmp_path)
    path = tmp_path / "gt" / "panoptic" / "102.png"
    data = path.read_bytes()
    path.write_bytes(b"this is no PNG" if corrupt == "garbage" else data[: len(data) // 2])
    only(problems_of(values), png_path(values, "102"), "102", "PNG")


@pytest.mark.parametrize("shape", [(3, 8), (2, 7)])
def test_gt_png_size_differs_from_height_width(tmp_path, shape):
    values = perfect_case(tmp_path)
    Image.fromarray(np.zeros(shape + (3,), np.uint8)).save(tmp_path / "gt" / "panoptic" / "103.png")
    problem = only(problems_of(values), png_path(values, "103"), "103", "height", "width")
    assert f"{shape[1]}x{shape[0]}" in problem


def test_gt_png_not_rgb_names_the_file_once(tmp_path):
    values = perfect_case(tmp_path)
    Image.fromarray(np.zeros((2, 8), np.uint8)).save(tmp_path / "gt" / "panoptic" / "101.png")
    problem = only(problems_of(values), png_path(values, "101"), "101", "RGB")
    assert problem.count(png_path(values, "101")) == 1, problem


def test_gt_png_missing_is_reported_even_without_a_prediction(tmp_path):
    """Mask mode needs every evaluated image's PNG; a broken GT must not pass silently."""
    values = perfect_case(tmp_path)
    rewrite_json(values["pred"], lambda data: data["images"].pop(1))  # no prediction for 102
    (tmp_path / "gt" / "panoptic" / "102.png").unlink()
    only(problems_of(values), png_path(values, "102"), "102")


# ------------------------------------------------------------------------------- zero-shot list


def zeroshot_problems(tmp_path, name, content):
    """Problems of an evaluation whose zero-shot file `name` holds content (str or bytes)."""
    values = perfect_case(tmp_path)
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path, problems_of(values, zeroshot_triplets=str(path))


def test_zeroshot_valid_files_are_accepted(tmp_path):
    for name, content in (("a.csv", "subject,object,predicate\n0,3,0\n1,4,2\n"), ("b.csv", "0;3;0\n"),
                          ("c.json", "[[0, 3, 0], [1, 4, 2]]")):
        path = tmp_path / name
        path.write_text(content)
        values = perfect_case(tmp_path / path.stem)
        result = sgeval.evaluate(sgeval.make_config({**values, "zeroshot_triplets": str(path), "metrics": ["zR"],
                                                     "k": ["20"]}))
        assert result["metrics"]["zR@20"] == 1.0


def test_zeroshot_file_missing(tmp_path):
    path = tmp_path / "missing.csv"
    only(problems_of(perfect_case(tmp_path), zeroshot_triplets=str(path)), path, None, "zero-shot")


def test_zeroshot_path_is_a_directory(tmp_path):
    (tmp_path / "zs").mkdir()
    problems = problems_of(perfect_case(tmp_path), zeroshot_triplets=str(tmp_path / "zs"))
    only(problems, tmp_path / "zs", None, "zero-shot")


@pytest.mark.parametrize("content", ["[[0, 3, 0]", "", b"\xff\xfe[[0, 3, 0]]"], ids=["truncated", "empty", "binary"])
def test_zeroshot_malformed_json(tmp_path, content):
    path, problems = zeroshot_problems(tmp_path, "zs.json", content)
    only(problems, path, None, "zero-shot")


@pytest.mark.parametrize("content, row", [
    ("0,3,0\n0,3\n", 1), ("0,3,0,1\n", 0), ("0,3,0\n0\n", 1), ("0,3,0\n0,3,0,2\n", 1)],
    ids=["2-columns", "4-columns", "1-column", "4-columns-later"])
def test_zeroshot_csv_row_with_wrong_column_count(tmp_path, content, row):
    path, problems = zeroshot_problems(tmp_path, "zs.csv", content)
    only(problems, path, None, f"line {row + 1}")  # CSV problems name the file's line


def test_zeroshot_csv_bad_row_after_a_header_is_findable(tmp_path):
    path, problems = zeroshot_problems(tmp_path, "zs.csv", "subject,object,predicate\n0,3,0\n0,3\n")
    problem = only(problems, path)
    assert "line 3" in problem or "row 1" in problem, problem  # the file's third line, second data row


@pytest.mark.parametrize("name, content, row", [
    ("zs.csv", "0,3,0\n0,5,0\n", 1), ("zs.csv", "4,3,4\n", 0), ("zs.csv", "-1,3,0\n", 0),
    ("zs.json", "[[0, 3, 0], [0, 3, 9]]", 1)], ids=["object", "predicate", "negative", "json"])
def test_zeroshot_row_outside_the_vocabulary(tmp_path, name, content, row):
    path, problems = zeroshot_problems(tmp_path, name, content)
    only(problems, path, None, f"line {row + 1}" if name.endswith(".csv") else f"row {row}", "vocabulary")


@pytest.mark.parametrize("name, content", [
    ("zs.csv", "0,3,0\n0,3.5,0\n"), ("zs.csv", "0,3,0\n0,grass,0\n"), ("zs.json", "[[0, 3, 0], [0, 3, 0.5]]"),
    ("zs.json", "[[0, 3, 0], [0, 3, true]]"), ("zs.json", "[[0, 3, 0], [0, 3]]"), ("zs.json", "[[0, 3, 0], null]"),
    ("zs.json", "[[0, 3, 0], \"030\"]")],
    ids=["csv-float", "csv-name", "json-float", "json-bool", "json-short", "json-null", "json-string"])
def test_zeroshot_non_integer_row(tmp_path, name, content):
    path, problems = zeroshot_problems(tmp_path, name, content)
    only(problems, path, None, "line 2" if name.endswith(".csv") else "row 1")


@pytest.mark.parametrize("content", ["{\"triplets\": [[0, 3, 0]]}", "7"], ids=["object", "number"])
def test_zeroshot_json_not_a_list_of_rows(tmp_path, content):
    path, problems = zeroshot_problems(tmp_path, "zs.json", content)
    only(problems, path)


@pytest.mark.parametrize("name, content", [("zs.csv", ""), ("zs.csv", "subject,object,predicate\n"),
                                           ("zs.json", "[]"), ("zs.txt", "[[0, 3, 0]]")],
                         ids=["empty", "header-only", "empty-list", "json-in-txt"])
def test_zeroshot_file_without_any_triplet(tmp_path, name, content):
    """A zero-shot list that yields no triplet leaves zR undefined everywhere: say so, do not guess."""
    path, problems = zeroshot_problems(tmp_path, name, content)
    only(problems, path)


# -------------------------------------------------------------- training annotations (train_gt)


def train_problems(tmp_path, data):
    """Problems of an evaluation whose train_gt holds data (JSON-encoded unless str)."""
    path = tmp_path / "train.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path, problems_of(perfect_case(tmp_path), train_gt=str(path))


def test_train_gt_valid_file_is_accepted(tmp_path):
    path = write_train_gt(tmp_path / "train.json", [([0, 3], [[0, 1, 0]])])  # (person, grass, riding)
    result = sgeval.evaluate(sgeval.make_config({**perfect_case(tmp_path), "train_gt": str(path), "metrics": ["zR"],
                                                 "k": ["20"]}))
    assert result["metrics"]["zR@20"] == 1.0  # image 101 keeps (0,2,riding) out of its zero-shot set
    assert result["images"]["evaluated"] == 3


def test_train_gt_missing(tmp_path):
    path = tmp_path / "missing.json"
    only(problems_of(perfect_case(tmp_path), train_gt=str(path)), path, None, "training")


@pytest.mark.parametrize("content", ["{\"data\": [", "", "\x00\x01"], ids=["truncated", "empty", "binary"])
def test_train_gt_malformed_json(tmp_path, content):
    path, problems = train_problems(tmp_path, content)
    only(problems, path, None, "training")


@pytest.mark.parametrize("data", [{"test_image_ids": []}, [], {"data": "t0"}, {"data": ["t0"]}],
                         ids=["no-data", "list", "data-string", "data-of-strings"])
def test_train_gt_without_a_data_list(tmp_path, data):
    path, problems = train_problems(tmp_path, data)
    only(problems, path, None, "field", "'data'")  # as for the GT file: names the field, no Python internals


@pytest.mark.parametrize("relation", [[0, 2, 0], [2, 0, 0], [0, 1, 4], [0, -1, 0]],
                         ids=["object", "subject", "predicate", "negative"])
def test_train_gt_relation_out_of_range(tmp_path, relation):
    path = write_train_gt(tmp_path / "train.json", [([0, 3], [[0, 1, 0]]), ([0, 3], [[0, 1, 1], relation])])
    problem = only(problems_of(perfect_case(tmp_path), train_gt=str(path)), path, "t1", "relation", "out of range")
    assert str(relation) in problem


@pytest.mark.parametrize("relation", [[0, 1, 0.5], [0, 1]], ids=["float", "short"])
def test_train_gt_relation_not_three_integers(tmp_path, relation):
    path = write_train_gt(tmp_path / "train.json", [([0, 3], [relation])])
    only(problems_of(perfect_case(tmp_path), train_gt=str(path)), path, "t0", "relation")


def test_train_gt_category_outside_the_vocabulary(tmp_path):
    path = write_train_gt(tmp_path / "train.json", [([0, 5], [[0, 1, 0]])])
    only(problems_of(perfect_case(tmp_path), train_gt=str(path)), path, "t0", "category")


def test_train_gt_problems_of_several_images_are_collected(tmp_path):
    path = write_train_gt(tmp_path / "train.json", [([0, 3], [[0, 7, 0]]), ([0, 3], [[0, 1, 0]]), ([9], [])])
    problems = checked(pytest.raises(sgeval.SGEvalError, sgeval.evaluate,
                                     sgeval.make_config({**perfect_case(tmp_path), "train_gt": str(path)})).value)
    assert len(problems) == 2 and matching(problems, path, "t0") and matching(problems, path, "t2"), problems


# -------------------------------------------------------------------------------------- the CLI
# The CLI: each builder breaks a case and returns (YAML config path or None, option values,
# problem count); the library and the CLI report the same problems (assert_cli_reports).


def broken_gt_json(tmp_path):
    values = perfect_case(tmp_path)
    open(values["gt"], "w").write("{\"data\": ")
    return None, values, 1


def gt_relation_out_of_range(tmp_path):
    values = perfect_case(tmp_path)
    edit_gt(values, lambda data: gt_entry(data, "101")["relations"].append([0, 5, 0]))
    return None, values, 1


def zeroshot_two_columns(tmp_path):
    (tmp_path / "zs.csv").write_text("0,3,0\n0,3\n")
    return None, {**perfect_case(tmp_path), "zeroshot_triplets": str(tmp_path / "zs.csv")}, 1


def zeroshot_malformed_json(tmp_path):
    (tmp_path / "zs.json").write_text("[[0, 3, 0]")
    return None, {**perfect_case(tmp_path), "zeroshot_triplets": str(tmp_path / "zs.json")}, 1


def train_gt_missing(tmp_path):
    return None, {**perfect_case(tmp_path), "train_gt": str(tmp_path / "missing.json")}, 1


def train_gt_relation_out_of_range(tmp_path):
    path = write_train_gt(tmp_path / "train.json", [([0, 3], [[0, 2, 0]])])
    return None, {**perfect_case(tmp_path), "train_gt": str(path)}, 1


@pytest.mark.parametrize("build", [broken_gt_json, gt_relation_out_of_range, zeroshot_two_columns,
                                  zeroshot_malformed_json, train_gt_missing, train_gt_relation_out_of_range],
                         ids=lambda build: build.__name__)
def test_cli_reports_one_error_line_per_problem(tmp_path, build):
    assert_cli_reports(tmp_path, build)


# ----------------------------------------------------------------------------------- hostile GT


def test_gt_json_nested_too_deeply(tmp_path):
    values = perfect_case(tmp_path)
    open(values["gt"], "w").write('{"data": ' + "[" * 100_000 + "]" * 100_000 + "}")
    only(problems_of(values), values["gt"], None, "RecursionError")


def test_gt_image_larger_than_the_pixel_limit(tmp_path):
    """A GT image whose height x width exceeds MAX_IMAGE_PIXELS is refused before anything is
    allocated for it."""
    values = perfect_case(tmp_path)
    edit_gt(values, lambda data: gt_entry(data, "101").update(height=10**6, width=10**6))
    only(problems_of(values), values["gt"], "101", "height x width", "SGEVAL_MAX_IMAGE_PIXELS")


def test_gt_segment_without_pixels_in_its_png(tmp_path):
    """A segment id of segments_info that never occurs in the PNG would be an empty GT mask that
    lowers every metric: an error."""
    values = perfect_case(tmp_path)
    edit_gt(values, lambda data: gt_entry(data, "101")["segments_info"][0].update(id=123456))
    only(problems_of(values), png_path(values, "101"), "101", "segment id 123456", "segments_info")


def test_gt_segment_id_listed_twice(tmp_path):
    values = perfect_case(tmp_path)
    edit_gt(values, lambda data: gt_entry(data, "101")["segments_info"][1].update(
        id=gt_entry(data, "101")["segments_info"][0]["id"]))
    problems = problems_of(values)
    assert matching(problems, values["gt"], "101", "segment id twice"), problems


@pytest.mark.parametrize("field, names", [("predicate_classes", [["a"], "b", "c", "d"]),
                                          ("predicate_classes", ["a", "a", "c", "d"]),
                                          ("stuff_classes", ["person", "sky"]), ("thing_classes", [1, 2, 3])])
def test_gt_class_names_are_distinct_strings(tmp_path, field, names):
    """Class names key the per-predicate results: a list would fail late, a repeat would merge two
    classes' values."""
    values = perfect_case(tmp_path)
    edit_gt(values, lambda data: data.update({field: names}))
    only(problems_of(values), values["gt"], None, "names must be distinct strings")
