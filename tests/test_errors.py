"""Bad input (SPEC section 8): every problem is an SGEvalError line naming file, image and field.

Each case breaks one thing in a small valid dataset and checks the library error; a subset also
runs the CLI (exit code 1, one ``error:`` line per problem, no traceback).
"""

import io
import json
import re
import zipfile

import numpy as np
import pytest
import tifffile
from click.testing import CliRunner
from conftest import cells, gt_image, pred_image, sgeval, write_case, write_train_gt, write_zip
from PIL import Image
from test_formats import rewrite_json

# 2 x 8 images. Objects: 0 person, 1 horse, 2 dog, 3 grass, 4 sky. Predicates: 0..3.
A, B, C = cells(2, 8, (0, 0, 4)), cells(2, 8, (0, 4, 8)), cells(2, 8, (1, 0, 8))


def case(tmp_path, mode="mask"):
    """Three evaluated images, predicted perfectly: R@k = 1 until a test breaks something."""
    images = [gt_image("101", [A, B, C], [0, 0, 3], [[0, 2, 0], [1, 2, 1]]),
              gt_image("102", [A, C], [1, 4], [[0, 1, 2]]),
              gt_image("103", [A, C], [0, 3], [[0, 1, 3]])]
    preds = [pred_image("101", [A, B, C], [0, 0, 3], [[0, 2, 0], [1, 2, 1]]),
             pred_image("102", [A, C], [1, 4], [[0, 1, 2]]),
             pred_image("103", [A, C], [0, 3], [[0, 1, 3]])]
    return write_case(tmp_path, images, preds, mode=mode,
                      pred_name="pred.zip" if mode == "mask" else "pred.json")


# --------------------------------------------------------------------------------- helpers


def problems_of(values, **extra):
    """The problem lines of the SGEvalError that evaluate() raises (checks the error contract)."""
    with pytest.raises(sgeval.SGEvalError) as info:
        sgeval.evaluate(sgeval.make_config({**values, **extra}))
    return checked(info.value)


def checked(error):
    assert isinstance(error, ValueError)
    assert error.problems, "an SGEvalError without problems"
    for problem in error.problems:
        assert isinstance(problem, str) and problem.strip(), error.problems
        assert "\n" not in problem, f"a problem must be one line: {problem!r}"
    assert str(error) == "\n".join(error.problems)
    return error.problems


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


def edit_gt(values, edit):
    path = values["gt"]
    with open(path) as handle:
        data = json.load(handle)
    edit(data)
    with open(path, "w") as handle:
        json.dump(data, handle)


def entry(data, image_id):
    return next(e for e in data["data"] if e["image_id"] == image_id)


def record(data, image_id):
    return next(r for r in data["images"] if str(r["id"]) == image_id)


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


def tiff_bytes(masks):
    buffer = io.BytesIO()
    tifffile.imwrite(buffer, np.asarray(masks, bool), photometric="minisblack")
    return buffer.getvalue()


def zip_member(path, name):
    with zipfile.ZipFile(path) as archive:
        return archive.read(name)


def assert_cli_fails(args, problems):
    """The CLI exits 1 and prints exactly one `error: <problem>` line per library problem."""
    result = CliRunner().invoke(sgeval.main, [str(a) for a in args])
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit), f"uncaught {result.exception!r}"
    assert "Traceback" not in result.output
    assert result.stdout == ""
    assert result.stderr.splitlines() == [f"error: {p}" for p in problems]


def test_the_unbroken_case_is_valid(tmp_path):
    for mode in ("mask", "box"):
        result = sgeval.evaluate(sgeval.make_config(case(tmp_path / mode, mode)))
        assert result["metrics"]["R@20"] == 1.0 and result["images"]["evaluated"] == 3


# --------------------------------------------------------------------------------- ground truth


@pytest.mark.parametrize("content", [b"{\"data\": [", b"", b"\xff\xfe not utf8 {"],
                         ids=["truncated", "empty", "binary"])
def test_gt_malformed_json(tmp_path, content):
    values = case(tmp_path)
    open(values["gt"], "wb").write(content)
    only(problems_of(values), values["gt"], None, "JSON")


def test_gt_unreadable(tmp_path):
    values = case(tmp_path)
    missing = tmp_path / "nowhere" / "psg.json"
    only(problems_of({**values, "gt": str(missing)}), missing)


def test_gt_missing_top_level_field(tmp_path):
    values = case(tmp_path)
    edit_gt(values, lambda data: data.pop("predicate_classes"))
    only(problems_of(values), values["gt"], None, "predicate_classes")


@pytest.mark.parametrize("field, value", [
    ("thing_classes", 5), ("predicate_classes", None), ("test_image_ids", 7), ("data", {"101": {}}),
    ("data", 3),
])
def test_gt_top_level_field_of_wrong_type(tmp_path, field, value):
    values = case(tmp_path)
    edit_gt(values, lambda data: data.update({field: value}))
    problems = problems_of(values)
    assert matching(problems, values["gt"], None, field), problems
    assert all(str(values["gt"]) in p for p in problems), problems


def test_gt_not_an_object(tmp_path):
    values = case(tmp_path)
    open(values["gt"], "w").write("[1, 2]")
    problems = problems_of(values)
    assert all(str(values["gt"]) in p for p in problems)


@pytest.mark.parametrize("field", ["relations", "segments_info", "annotations", "height", "width"])
def test_gt_image_missing_field(tmp_path, field):
    values = case(tmp_path)
    edit_gt(values, lambda data: entry(data, "102").pop(field))
    only(problems_of(values), values["gt"], "102", field)


@pytest.mark.parametrize("field, value", [("height", "tall"), ("width", None), ("height", [2])])
def test_gt_image_malformed_size_field(tmp_path, field, value):
    values = case(tmp_path)
    edit_gt(values, lambda data: entry(data, "102").update({field: value}))
    only(problems_of(values), values["gt"], "102", field)


@pytest.mark.parametrize("relation, words", [
    ([0, 5, 0], ("relation", "segment", "5")),
    ([-1, 2, 0], ("relation", "segment", "-1")),
    ([0, 2, 4], ("relation", "predicate", "4")),
    ([0, 2, -2], ("relation", "predicate", "-2")),
])
def test_gt_relation_index_out_of_range(tmp_path, relation, words):
    values = case(tmp_path)
    edit_gt(values, lambda data: entry(data, "101")["relations"].append(relation))
    only(problems_of(values), values["gt"], "101", *words)


@pytest.mark.parametrize("relations", [[[0, 1.5, 0]], [[0, 1]], [[0, 1, 0], [1, 0]], "0 1 0"],
                         ids=["float", "short", "ragged", "string"])
def test_gt_relations_not_integer_rows(tmp_path, relations):
    values = case(tmp_path)
    edit_gt(values, lambda data: entry(data, "102").update(relations=relations))
    only(problems_of(values), values["gt"], "102", "relations")


@pytest.mark.parametrize("category", [5, -1])
def test_gt_category_out_of_vocabulary(tmp_path, category):
    values = case(tmp_path)
    edit_gt(values, lambda data: entry(data, "103")["segments_info"][1].update(category_id=category))
    only(problems_of(values), values["gt"], "103", "category", str(category))


def test_gt_duplicate_image_id(tmp_path):
    values = case(tmp_path)
    edit_gt(values, lambda data: data["data"].append(dict(entry(data, "102"))))
    only(problems_of(values), values["gt"], "102", "duplicate")


def test_gt_annotations_and_segments_differ_in_length(tmp_path):
    values = case(tmp_path)
    edit_gt(values, lambda data: entry(data, "101")["annotations"].pop())
    only(problems_of(values), values["gt"], "101", "annotations", "segments_info")


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_gt_nan_or_inf_box_in_box_mode(tmp_path, value):
    values = case(tmp_path, mode="box")
    edit_gt(values, lambda data: entry(data, "102")["annotations"][0]["bbox"].__setitem__(2, value))
    only(problems_of(values), values["gt"], "102", "bbox")


def test_gt_several_problems_are_collected(tmp_path):
    values = case(tmp_path)

    def edit(data):
        entry(data, "101")["relations"].append([0, 9, 0])
        entry(data, "102")["segments_info"][0]["category_id"] = 77
        entry(data, "103").pop("relations")

    edit_gt(values, edit)
    problems = problems_of(values)
    assert len(problems) == 3, problems
    assert matching(problems, values["gt"], "101", "9")
    assert matching(problems, values["gt"], "102", "category", "77")
    assert matching(problems, values["gt"], "103", "relations")


# --------------------------------------------------------------------------------- panoptic PNGs


def png_path(values, image_id):
    return f"{values['gt_seg']}/{image_id}.png"


def test_gt_png_missing(tmp_path):
    values = case(tmp_path)
    (tmp_path / "gt" / "panoptic" / "102.png").unlink()
    only(problems_of(values), png_path(values, "102"), "102")


@pytest.mark.parametrize("corrupt", ["garbage", "truncated"])
def test_gt_png_corrupt(tmp_path, corrupt):
    values = case(tmp_path)
    path = tmp_path / "gt" / "panoptic" / "102.png"
    data = path.read_bytes()
    path.write_bytes(b"this is no PNG" if corrupt == "garbage" else data[: len(data) // 2])
    only(problems_of(values), png_path(values, "102"), "102", "PNG")


@pytest.mark.parametrize("shape", [(3, 8), (2, 7)])
def test_gt_png_size_differs_from_height_width(tmp_path, shape):
    values = case(tmp_path)
    Image.fromarray(np.zeros(shape + (3,), np.uint8)).save(tmp_path / "gt" / "panoptic" / "103.png")
    problem = only(problems_of(values), png_path(values, "103"), "103", "height", "width")
    assert f"{shape[1]}x{shape[0]}" in problem


def test_gt_png_not_rgb_names_the_file_once(tmp_path):
    values = case(tmp_path)
    Image.fromarray(np.zeros((2, 8), np.uint8)).save(tmp_path / "gt" / "panoptic" / "101.png")
    problem = only(problems_of(values), png_path(values, "101"), "101", "RGB")
    assert problem.count(png_path(values, "101")) == 1, problem


def test_gt_png_missing_is_reported_even_without_a_prediction(tmp_path):
    """Mask mode needs every evaluated image's PNG; a broken GT must not pass silently."""
    values = case(tmp_path)
    rewrite_json(values["pred"], lambda data: data["images"].pop(1))  # no prediction for 102
    (tmp_path / "gt" / "panoptic" / "102.png").unlink()
    only(problems_of(values), png_path(values, "102"), "102")


# --------------------------------------------------------------------------------- prediction file


@pytest.mark.parametrize("content", [b"{\"version\": 1, \"images\": [", b"", b"\x00\x01\x02"],
                         ids=["truncated", "empty", "binary"])
def test_pred_malformed_json_in_zip(tmp_path, content):
    values = case(tmp_path)
    edit_zip(values["pred"], {"triplets.json": content})
    only(problems_of(values), values["pred"], None, "triplets.json")


def test_pred_malformed_json_file(tmp_path):
    values = case(tmp_path, mode="box")
    open(values["pred"], "w").write("{\"version\": 1, \"images\": [}")
    only(problems_of(values), values["pred"], None, "JSON")


def test_pred_missing_path(tmp_path):
    values = case(tmp_path)
    missing = tmp_path / "no" / "pred.zip"
    only(problems_of({**values, "pred": str(missing)}), missing)


def test_pred_directory_without_triplets_json(tmp_path):
    values = case(tmp_path)
    (tmp_path / "empty_dir").mkdir()
    only(problems_of({**values, "pred": str(tmp_path / "empty_dir")}), tmp_path / "empty_dir", None,
         "triplets.json")


def test_pred_zip_without_triplets_json(tmp_path):
    values = case(tmp_path)
    edit_zip(values["pred"], {"triplets.json": None})
    only(problems_of(values), values["pred"], None, "triplets.json")


@pytest.mark.parametrize("corrupt", ["garbage", "truncated", "empty"])
def test_pred_corrupt_zip(tmp_path, corrupt):
    """A .zip that is not a readable ZIP must be reported as such (not parsed as JSON)."""
    values = case(tmp_path)
    path = tmp_path / "pred.zip"
    data = path.read_bytes()
    path.write_bytes({"garbage": b"these bytes are not a zip archive", "truncated": data[: len(data) // 2],
                      "empty": b""}[corrupt])
    problem = only(problems_of(values), values["pred"])
    message = problem.replace(str(values["pred"]), "")
    assert re.search(r"\bzip\b", message, re.IGNORECASE), problem


def test_pred_zip_member_with_bad_crc(tmp_path):
    values = case(tmp_path)
    path = tmp_path / "pred.zip"
    with zipfile.ZipFile(path, "w") as archive:  # stored, so the payload sits verbatim in the file
        archive.writestr("triplets.json", b"{\"version\": 1, \"images\": []}")
    data = path.read_bytes()
    path.write_bytes(data.replace(b"\"images\": []", b"\"images\": {}"))
    only(problems_of(values), values["pred"], None, "triplets.json")


@pytest.mark.parametrize("version", [2, "1", None, 0], ids=["2", "string", "null", "0"])
def test_pred_wrong_version(tmp_path, version):
    values = case(tmp_path)
    rewrite_json(values["pred"], lambda data: data.update(version=version))
    only(problems_of(values), values["pred"], None, "version", repr(version))


def test_pred_missing_version(tmp_path):
    values = case(tmp_path)
    rewrite_json(values["pred"], lambda data: data.pop("version"))
    only(problems_of(values), values["pred"], None, "version")


@pytest.mark.parametrize("images", [None, {"101": {}}, "101"])
def test_pred_images_not_a_list(tmp_path, images):
    values = case(tmp_path)
    rewrite_json(values["pred"], lambda data: data.update(images=images))
    only(problems_of(values), values["pred"], None, "images")


@pytest.mark.parametrize("copy_id", ["102", 102], ids=["same", "int-vs-string"])
def test_pred_duplicate_image_ids(tmp_path, copy_id):
    values = case(tmp_path)
    rewrite_json(values["pred"], lambda data: data["images"].append({**record(data, "102"), "id": copy_id}))
    only(problems_of(values), values["pred"], "102", "duplicate")


def test_pred_unknown_image_ids_are_counted_not_fatal(tmp_path):
    values = case(tmp_path)
    rewrite_json(values["pred"], lambda data: data["images"].extend(
        [{**record(data, "103"), "id": "999"}, {**record(data, "102"), "id": 555}]))
    result = sgeval.evaluate(sgeval.make_config(values))
    assert result["images"]["extra_predictions"] == 2
    assert result["images"]["evaluated"] == 3 and result["metrics"]["R@20"] == 1.0


@pytest.mark.parametrize("bad_id", [None, True, 1.5, ["101"]], ids=["missing", "bool", "float", "list"])
def test_pred_bad_image_id(tmp_path, bad_id):
    values = case(tmp_path)

    def edit(data):
        if bad_id is None:
            data["images"][2].pop("id")
        else:
            data["images"][2]["id"] = bad_id

    rewrite_json(values["pred"], edit)
    only(problems_of(values), values["pred"], None, "images[2]", "id")


@pytest.mark.parametrize("field, triplet, words", [
    ("triplets", [0, 7, 0], ("triplet", "instance", "7", "3")),
    ("triplets", [3, 0, 0], ("triplet", "instance", "3")),
    ("triplets", [-1, 2, 0], ("triplet", "instance", "-1")),
    ("triplets", [0, -3, 0], ("triplet", "instance", "-3")),
    ("triplets", [0, 2, 4], ("triplet", "predicate", "4")),
    ("triplets", [0, 2, -1], ("triplet", "predicate", "-1")),
    ("ng_triplets", [0, 9, 0], ("ng_triplet", "instance", "9")),
    ("ng_triplets", [0, 2, 99], ("ng_triplet", "predicate", "99")),
])
def test_pred_triplet_index_out_of_range(tmp_path, field, triplet, words):
    values = case(tmp_path)

    def edit(data):
        image = record(data, "101")
        image.setdefault("ng_triplets", list(image["triplets"]))
        image[field].append(triplet)

    rewrite_json(values["pred"], edit)
    only(problems_of(values), values["pred"], "101", *words)


def test_bad_triplet_is_reported_once_without_ng_triplets(tmp_path):
    """ng_triplets defaults to triplets; a bad row must not be reported again as an ng_triplet."""
    values = case(tmp_path)
    rewrite_json(values["pred"], lambda data: record(data, "101")["triplets"].append([0, 7, 0]))
    assert "ng_triplets" not in record(json.loads(zip_member(values["pred"], "triplets.json")), "101")
    only(problems_of(values), values["pred"], "101", "triplet", "7")


@pytest.mark.parametrize("category", [5, -1, 1000])
def test_pred_instance_category_out_of_vocabulary(tmp_path, category):
    values = case(tmp_path)
    rewrite_json(values["pred"], lambda data: record(data, "102")["instances"][1].update(category=category))
    only(problems_of(values), values["pred"], "102", "category", str(category))


@pytest.mark.parametrize("category", [1.0, "1", None, True], ids=["float", "string", "null", "bool"])
def test_pred_instance_category_not_an_integer(tmp_path, category):
    values = case(tmp_path)
    rewrite_json(values["pred"], lambda data: record(data, "102")["instances"][0].update(category=category))
    only(problems_of(values), values["pred"], "102", "category")


@pytest.mark.parametrize("instances", [{"0": {}}, [1, 2], "person"], ids=["dict", "numbers", "string"])
def test_pred_instances_not_a_list_of_objects(tmp_path, instances):
    values = case(tmp_path)
    rewrite_json(values["pred"], lambda data: record(data, "102").update(instances=instances))
    only(problems_of(values), values["pred"], "102", "instances")


def test_pred_no_instance_list(tmp_path):
    values = case(tmp_path)
    rewrite_json(values["pred"], lambda data: record(data, "102").pop("instances"))
    only(problems_of(values), values["pred"], "102", "instances")


@pytest.mark.parametrize("field", ["triplets", "ng_triplets"])
@pytest.mark.parametrize("rows", [
    [[0.0, 2.0, 0.0]], [[0, 2, 0.5]], [[0, 2], [1, 2, 1]], [[0, 2]], [[0, 1, 2, 3]], [["0", "2", "0"]],
    [[True, False, True]], [[[0, 2, 0]]], 5, "0 2 0", {"0": [0, 2, 0]}, [[0, 2, None]],
], ids=["floats", "one-float", "ragged", "short", "long", "strings", "bools", "nested", "scalar", "string",
        "object", "null"])
def test_pred_triplets_not_integer_rows(tmp_path, field, rows):
    values = case(tmp_path)
    rewrite_json(values["pred"], lambda data: record(data, "101").update({field: rows}))
    only(problems_of(values), values["pred"], "101", field)


def test_pred_triplets_beyond_int64(tmp_path):
    values = case(tmp_path)
    rewrite_json(values["pred"], lambda data: record(data, "101").update(triplets=[[0, 2**70, 0]]))
    only(problems_of(values), values["pred"], "101", "triplets")


# --------------------------------------------------------------------------------- TIFF masks


@pytest.mark.parametrize("shape", [(3, 2, 9), (3, 3, 8), (3, 1, 8)])
def test_mask_size_differs_from_gt_image(tmp_path, shape):
    values = case(tmp_path)
    edit_zip(values["pred"], {"101.tiff": tiff_bytes(np.ones(shape, bool))})
    only(problems_of(values), values["pred"], "101", "101.tiff", "size")


@pytest.mark.parametrize("n_masks", [2, 4, 1])
def test_mask_count_differs_from_instance_count(tmp_path, n_masks):
    values = case(tmp_path)
    edit_zip(values["pred"], {"101.tiff": tiff_bytes(np.stack([A, B, C, A])[:n_masks])})
    problem = only(problems_of(values), values["pred"], "101", "101.tiff", "instances")
    assert re.search(rf"\b{n_masks}\b", problem) and re.search(r"\b3\b", problem), problem


@pytest.mark.parametrize("corrupt", ["garbage", "truncated", "header-only", "empty"])
def test_corrupt_tiff(tmp_path, corrupt):
    values = case(tmp_path)
    data = zip_member(values["pred"], "102.tiff")
    payload = {"garbage": b"these bytes are not a TIFF", "truncated": data[: len(data) // 2],
               "header-only": data[:8], "empty": b""}[corrupt]
    edit_zip(values["pred"], {"102.tiff": payload})
    only(problems_of(values), values["pred"], "102", "102.tiff", "TIFF")


def test_seg_filename_not_in_zip(tmp_path):
    values = case(tmp_path)
    rewrite_json(values["pred"], lambda data: record(data, "103").update(seg_filename="nope.tiff"))
    only(problems_of(values), values["pred"], "103", "nope.tiff")


def test_seg_filename_member_deleted_from_zip(tmp_path):
    values = case(tmp_path)
    edit_zip(values["pred"], {"103.tiff": None})
    only(problems_of(values), values["pred"], "103", "103.tiff")


def test_seg_filename_missing_from_directory(tmp_path):
    values = case(tmp_path)
    directory = tmp_path / "pred_dir"
    with zipfile.ZipFile(values["pred"]) as archive:
        archive.extractall(directory)
    (directory / "103.tiff").unlink()
    only(problems_of({**values, "pred": str(directory)}), directory, "103", "103.tiff")


@pytest.mark.parametrize("value", [None, "", 7], ids=["missing", "empty", "number"])
def test_seg_filename_required_in_mask_mode(tmp_path, value):
    values = case(tmp_path)

    def edit(data):
        if value is None:
            record(data, "102").pop("seg_filename")
        else:
            record(data, "102")["seg_filename"] = value

    rewrite_json(values["pred"], edit)
    only(problems_of(values), values["pred"], "102", "seg_filename")


@pytest.mark.parametrize("container", ["zip", "dir"])
@pytest.mark.parametrize("name", ["../101.tiff", "/tmp/101.tiff", "sub/../../101.tiff", "..\\101.tiff",
                                  "C:/101.tiff"])
def test_seg_filename_with_dotdot_or_absolute_path(tmp_path, container, name):
    values = case(tmp_path)
    if container == "dir":
        directory = tmp_path / "pred_dir"
        with zipfile.ZipFile(values["pred"]) as archive:
            archive.extractall(directory)
        values = {**values, "pred": str(directory)}
    rewrite_json(values["pred"], lambda data: record(data, "101").update(seg_filename=name))
    only(problems_of(values), values["pred"], "101", "seg_filename", name)


@pytest.mark.parametrize("member", ["../evil.tiff", "/abs/evil.tiff", "a/../../evil.tiff"])
def test_zip_member_with_dotdot_or_absolute_path(tmp_path, member):
    values = case(tmp_path)
    path = values["pred"]
    with zipfile.ZipFile(path) as archive:
        content = {name: archive.read(name) for name in archive.namelist()}
    with zipfile.ZipFile(path, "w") as archive:
        for name, payload in content.items():
            archive.writestr(name, payload)
        archive.writestr(zipfile.ZipInfo(member), content["101.tiff"])
    with zipfile.ZipFile(path) as archive:
        assert member in archive.namelist()  # zipfile kept the unsafe name
    problem = only(problems_of(values), path, None, member)
    assert "absolute" in problem or ".." in problem


# --------------------------------------------------------------------------------- boxes


@pytest.mark.parametrize("mode", ["box", "mask"])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")], ids=["nan", "inf", "-inf"])
def test_nan_or_inf_bbox(tmp_path, mode, value):
    values = case(tmp_path, mode=mode)
    rewrite_json(values["pred"], lambda data: record(data, "102")["instances"][1]["bbox"].__setitem__(1, value))
    problem = only(problems_of(values), values["pred"], "102", "bbox")
    assert "nan" in problem.lower() or "inf" in problem.lower()


def test_box_mode_without_any_bboxes(tmp_path):
    values = case(tmp_path, mode="box")
    rewrite_json(values["pred"], lambda data: [i.pop("bbox") for i in record(data, "101")["instances"]])
    only(problems_of(values), values["pred"], "101", "bbox")


def test_box_mode_without_one_bbox(tmp_path):
    values = case(tmp_path, mode="box")
    rewrite_json(values["pred"], lambda data: record(data, "101")["instances"][2].pop("bbox"))
    only(problems_of(values), values["pred"], "101", "bbox")


def test_box_mode_parallel_lists_without_bboxes(tmp_path):
    values = case(tmp_path, mode="box")

    def edit(data):
        image = record(data, "103")
        image["categories"] = [i["category"] for i in image.pop("instances")]

    rewrite_json(values["pred"], edit)
    only(problems_of(values), values["pred"], "103", "bbox")


@pytest.mark.parametrize("bbox", [[0, 0, 1], [0, 0, 1, "2"], "0 0 1 1", None],
                         ids=["short", "string", "text", "null"])
def test_box_mode_malformed_bbox(tmp_path, bbox):
    values = case(tmp_path, mode="box")
    rewrite_json(values["pred"], lambda data: record(data, "103")["instances"][0].update(bbox=bbox))
    only(problems_of(values), values["pred"], "103", "bbox")


@pytest.mark.parametrize("bbox, words", [([5, 0, 1, 1], ("x2 < x1",)), ([0, 2, 4, 1], ("y2 < y1",))])
def test_box_mode_inverted_bbox(tmp_path, bbox, words):
    values = case(tmp_path, mode="box")
    rewrite_json(values["pred"], lambda data: record(data, "101")["instances"][0].update(bbox=bbox))
    only(problems_of(values), values["pred"], "101", "bbox", *words)


def test_bbox_is_optional_in_mask_mode(tmp_path):
    """The docstring: ``bbox`` is required in box mode only (here one instance lacks it)."""
    values = case(tmp_path)
    rewrite_json(values["pred"], lambda data: record(data, "101")["instances"][1].pop("bbox"))
    assert sgeval.evaluate(sgeval.make_config(values))["metrics"]["R@20"] == 1.0


def test_inverted_bbox_is_fine_in_mask_mode(tmp_path):
    values = case(tmp_path)
    rewrite_json(values["pred"], lambda data: record(data, "101")["instances"][0].update(bbox=[5, 0, 1, 1]))
    assert sgeval.evaluate(sgeval.make_config(values))["metrics"]["R@20"] == 1.0


# --------------------------------------------------------------------------------- collect all


def test_all_problems_of_the_prediction_pass_are_collected(tmp_path):
    values = case(tmp_path)

    def edit(data):
        record(data, "101")["triplets"].append([0, 12, 0])
        record(data, "102")["triplets"].append([0, 1, 9])
        record(data, "103")["instances"][0]["category"] = 40
        record(data, "103")["triplets"] = [[0, 1.5, 0]]
        data["images"].append({**record(data, "102")})  # a duplicate id

    rewrite_json(values["pred"], edit)
    problems = problems_of(values)
    assert len(problems) == 5, problems
    pred = values["pred"]
    assert matching(problems, pred, "101", "triplet", "instance", "12")
    assert matching(problems, pred, "102", "triplet", "predicate", "9")
    assert matching(problems, pred, "103", "category", "40")
    assert matching(problems, pred, "103", "triplets")
    assert matching(problems, pred, "102", "duplicate")


@pytest.mark.parametrize("workers", [1, 2])
def test_all_problems_of_the_mask_pass_are_collected(tmp_path, workers):
    values = case(tmp_path)
    edit_zip(values["pred"], {"101.tiff": b"corrupt", "102.tiff": tiff_bytes(np.stack([A]))})
    Image.fromarray(np.zeros((5, 8, 3), np.uint8)).save(tmp_path / "gt" / "panoptic" / "103.png")
    problems = problems_of(values, workers=workers)
    assert len(problems) == 3, problems
    assert matching(problems, values["pred"], "101", "101.tiff", "TIFF")
    assert matching(problems, values["pred"], "102", "102.tiff", "instances")
    assert matching(problems, png_path(values, "103"), "103", "height")


# --------------------------------------------------------------------------------- configuration


def config_problems(values):
    with pytest.raises(sgeval.SGEvalError) as info:
        sgeval.make_config(values)
    return checked(info.value)


def test_config_unknown_key_lists_the_valid_keys(tmp_path):
    values = case(tmp_path)
    problem = only(config_problems({**values, "kk": [20]}), "config", None, "kk")
    for field in sgeval.dataclasses.fields(sgeval.Config):
        assert field.name in problem


@pytest.mark.parametrize("k", [["0"], ["-5"], ["abc"], ["x0"], ["x-1"], ["xnan"], ["xinf"], ["20.5"], ["x"],
                               [True]])
def test_config_bad_k(tmp_path, k):
    values = case(tmp_path)
    only(config_problems({**values, "k": ["20", *k]}), "config", None, "k", str(k[0]))


@pytest.mark.parametrize("k", [[], "", " , "])
def test_config_empty_k(tmp_path, k):
    only(config_problems({**case(tmp_path), "k": k}), "config", None, "k")


@pytest.mark.parametrize("protocol", ["bogus", "", None, "UNIQUE"])
def test_config_bad_protocol(tmp_path, protocol):
    problem = only(config_problems({**case(tmp_path), "protocol": protocol}), "config", None, "protocol")
    assert "unique" in problem and "multimpo" in problem


@pytest.mark.parametrize("workers", [0, -1, "two", None, 1.5, True])
def test_config_bad_workers(tmp_path, workers):
    only(config_problems({**case(tmp_path), "workers": workers}), "config", None, "workers")


@pytest.mark.parametrize("threshold", [0, 1.5, "half", None, float("nan")])
def test_config_bad_iou_threshold(tmp_path, threshold):
    only(config_problems({**case(tmp_path), "iou_threshold": threshold}), "config", None, "iou_threshold")


def test_config_bad_absent_predicates(tmp_path):
    only(config_problems({**case(tmp_path), "absent_predicates": "drop"}), "config", None, "absent_predicates")


@pytest.mark.parametrize("metrics", [["R", "Foo"], "R,mr"])
def test_config_unknown_metric_family(tmp_path, metrics):
    problem = only(config_problems({**case(tmp_path), "metrics": metrics}), "config", None, "metric")
    assert "Foo" in problem or "mr" in problem
    assert all(family in problem for family in sgeval.METRIC_FAMILIES)


def test_config_missing_gt_and_pred():
    problems = config_problems({})
    assert len(problems) == 2, problems
    assert matching(problems, "config", None, "'gt'") and matching(problems, "config", None, "'pred'")


def test_config_problems_are_collected(tmp_path):
    problems = config_problems({"k": ["20", "0"], "protocol": "x", "workers": 0, "metrics": ["Q"]})
    assert len(problems) == 6, problems  # gt, pred, k, metrics, protocol, workers


@pytest.mark.parametrize("aggregation", ["mean", "", None, "POOLED", ["pooled"]])
def test_config_bad_aggregation(tmp_path, aggregation):
    problem = only(config_problems({**case(tmp_path), "aggregation": aggregation}), "config", None, "aggregation")
    assert "per_image" in problem and "pooled" in problem


@pytest.mark.parametrize("protocols, bad", [(["unique", "bogus"], "bogus"), ("singlempo,bogus", "bogus"),
                                            (["MultiMPO"], "MultiMPO"), ("unique, single", "single")])
def test_config_unknown_protocol_in_protocols(tmp_path, protocols, bad):
    problem = only(config_problems({**case(tmp_path), "protocols": protocols}), "config", None, "protocol",
                   f"'{bad}'")
    assert all(name in problem for name in sgeval.PROTOCOLS)


@pytest.mark.parametrize("imr_k", [["x1"], ["0"], ["-2"], ["1.5"], ["ten"], [True], "x10"])
def test_config_bad_imr_k(tmp_path, imr_k):
    bad = imr_k if isinstance(imr_k, str) else str(imr_k[0])
    values = {**case(tmp_path), "imr_k": ["10", *imr_k] if isinstance(imr_k, list) else imr_k}
    only(config_problems(values), "config", None, "imr_k", f"'{bad}'", "positive integer")


@pytest.mark.parametrize("imr_k", [[], "", " , "])
def test_config_empty_imr_k(tmp_path, imr_k):
    only(config_problems({**case(tmp_path), "imr_k": imr_k}), "config", None, "imr_k")


@pytest.mark.parametrize("tau", [-0.1, 1.5, "half", "0.5", None, True, float("nan"), float("inf")])
def test_config_bad_wimr_tau(tmp_path, tau):
    problem = only(config_problems({**case(tmp_path), "wimr_tau": tau}), "config", None, "wimr_tau")
    assert re.search(r"\[0(\.0)?, 1(\.0)?\]", problem), problem  # the closed range [0, 1]


def test_config_wimr_tau_bounds_are_valid(tmp_path):
    for tau in (0, 1, 0.0, 1.0):
        assert sgeval.make_config({**case(tmp_path), "wimr_tau": tau}).wimr_tau == tau


def test_config_iou_threshold_message_states_the_range(tmp_path):
    problem = only(config_problems({**case(tmp_path), "iou_threshold": 0}), "config", None, "iou_threshold")
    assert "(0, 1]" in problem, problem  # not an internal bound such as "[1e-09, 1.0]"


@pytest.mark.parametrize("value", ["yes", "true", 1, 0, None])
def test_config_per_predicate_not_a_boolean(tmp_path, value):
    only(config_problems({**case(tmp_path), "per_predicate": value}), "config", None, "per_predicate", "true")


def test_config_newer_key_problems_are_collected(tmp_path):
    problems = config_problems({**case(tmp_path), "aggregation": "mean", "protocols": ["bogus"], "imr_k": "x1",
                                "wimr_tau": 2, "per_predicate": "yes"})
    assert len(problems) == 5, problems
    for key in ("aggregation", "protocol", "imr_k", "wimr_tau", "per_predicate"):
        assert matching(problems, "config", None, key), key


def write_yaml(tmp_path, text, name="config.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize("text", ["k: [1, 2\nprotocol: unique\n", "gt: a\n  pred: b\n bad: [", "\tgt: x\n"],
                         ids=["unclosed", "indentation", "tab"])
def test_config_malformed_yaml(tmp_path, text):
    path = write_yaml(tmp_path, text)
    with pytest.raises(sgeval.SGEvalError) as info:
        sgeval.load_config(path)
    only(checked(info.value), path, None, "YAML")


def test_config_unreadable_yaml(tmp_path):
    path = tmp_path / "missing.yaml"
    with pytest.raises(sgeval.SGEvalError) as info:
        sgeval.load_config(path)
    only(checked(info.value), path)


@pytest.mark.parametrize("text", ["- gt: a\n- pred: b\n", "just a string\n", "42\n"])
def test_config_yaml_not_a_mapping(tmp_path, text):
    path = write_yaml(tmp_path, text)
    with pytest.raises(sgeval.SGEvalError) as info:
        sgeval.load_config(path)
    only(checked(info.value), path, None, "mapping")


def test_config_unknown_yaml_key_names_the_file(tmp_path):
    values = case(tmp_path)
    path = write_yaml(tmp_path, f"gt: {values['gt']}\npred: {values['pred']}\niou: 0.5\n")
    with pytest.raises(sgeval.SGEvalError) as info:
        sgeval.load_config(path)
    problem = only(checked(info.value), path, None, "'iou'")
    assert "iou_threshold" in problem


# --------------------------------------------------------------------------------- zero-shot list


def zeroshot_problems(tmp_path, name, content):
    """Problems of an evaluation whose zero-shot file `name` holds content (str or bytes)."""
    values = case(tmp_path)
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
        result = sgeval.evaluate(sgeval.make_config({**case(tmp_path / path.stem), "zeroshot_triplets": str(path),
                                                     "metrics": ["zR"], "k": ["20"]}))
        assert result["metrics"]["zR@20"] == 1.0


def test_zeroshot_file_missing(tmp_path):
    path = tmp_path / "missing.csv"
    only(problems_of(case(tmp_path), zeroshot_triplets=str(path)), path, None, "zero-shot")


def test_zeroshot_path_is_a_directory(tmp_path):
    (tmp_path / "zs").mkdir()
    only(problems_of(case(tmp_path), zeroshot_triplets=str(tmp_path / "zs")), tmp_path / "zs", None, "zero-shot")


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


# --------------------------------------------------------------------------------- training split


def train_problems(tmp_path, data):
    """Problems of an evaluation whose train_gt holds data (JSON-encoded unless str)."""
    path = tmp_path / "train.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path, problems_of(case(tmp_path), train_gt=str(path))


def test_train_gt_valid_file_is_accepted(tmp_path):
    path = write_train_gt(tmp_path / "train.json", [([0, 3], [[0, 1, 0]])])  # (person, grass, riding)
    result = sgeval.evaluate(sgeval.make_config({**case(tmp_path), "train_gt": str(path), "metrics": ["zR"],
                                                 "k": ["20"]}))
    assert result["metrics"]["zR@20"] == 1.0  # image 101 keeps (0,2,riding) out of its zero-shot set
    assert result["images"]["evaluated"] == 3


def test_train_gt_missing(tmp_path):
    path = tmp_path / "missing.json"
    only(problems_of(case(tmp_path), train_gt=str(path)), path, None, "training")


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
    problem = only(problems_of(case(tmp_path), train_gt=str(path)), path, "t1", "relation", "out of range")
    assert str(relation) in problem


@pytest.mark.parametrize("relation", [[0, 1, 0.5], [0, 1]], ids=["float", "short"])
def test_train_gt_relation_not_three_integers(tmp_path, relation):
    path = write_train_gt(tmp_path / "train.json", [([0, 3], [relation])])
    only(problems_of(case(tmp_path), train_gt=str(path)), path, "t0", "relation")


def test_train_gt_category_outside_the_vocabulary(tmp_path):
    path = write_train_gt(tmp_path / "train.json", [([0, 5], [[0, 1, 0]])])
    only(problems_of(case(tmp_path), train_gt=str(path)), path, "t0", "category")


def test_train_gt_problems_of_several_images_are_collected(tmp_path):
    path = write_train_gt(tmp_path / "train.json", [([0, 3], [[0, 7, 0]]), ([0, 3], [[0, 1, 0]]), ([9], [])])
    problems = checked(pytest.raises(sgeval.SGEvalError, sgeval.evaluate,
                                     sgeval.make_config({**case(tmp_path), "train_gt": str(path)})).value)
    assert len(problems) == 2 and matching(problems, path, "t0") and matching(problems, path, "t2"), problems


# --------------------------------------------------------------------------------- instance scores


@pytest.mark.parametrize("score", [float("nan"), float("inf"), "0.9", True, [0.5]],
                         ids=["nan", "inf", "string", "bool", "list"])
@pytest.mark.parametrize("spelling", ["instances", "parallel"])
def test_pred_bad_score(tmp_path, score, spelling):
    values = case(tmp_path)

    def edit(data):
        pred = record(data, "102")
        scores = [0.9, score]
        if spelling == "instances":
            for instance, value in zip(pred["instances"], scores):
                instance["score"] = value
        else:
            instances = pred.pop("instances")
            pred.update(categories=[i["category"] for i in instances], bboxes=[i["bbox"] for i in instances],
                        scores=scores)

    rewrite_json(values["pred"], edit)
    only(problems_of(values, protocol="singlempo"), values["pred"], "102", "instance 1", "score")


# --------------------------------------------------------------------------------- the CLI
# Each builder breaks a case and returns (YAML config path or None, option values, problem count).


def broken_gt_json(tmp_path):
    values = case(tmp_path)
    open(values["gt"], "w").write("{\"data\": ")
    return None, values, 1


def gt_relation_out_of_range(tmp_path):
    values = case(tmp_path)
    edit_gt(values, lambda data: entry(data, "101")["relations"].append([0, 5, 0]))
    return None, values, 1


def corrupt_tiff(tmp_path):
    values = case(tmp_path)
    edit_zip(values["pred"], {"102.tiff": b"not a tiff"})
    return None, values, 1


def corrupt_zip(tmp_path):
    values = case(tmp_path)
    (tmp_path / "pred.zip").write_bytes(b"not a zip")
    return None, values, 1


def several_prediction_problems(tmp_path):
    values = case(tmp_path)

    def edit(data):
        record(data, "101")["triplets"].append([0, 12, 0])
        record(data, "102")["instances"][0]["category"] = -3
        record(data, "103")["seg_filename"] = "../103.tiff"

    rewrite_json(values["pred"], edit)
    return None, values, 3


def several_mask_problems(tmp_path):
    values = case(tmp_path)
    edit_zip(values["pred"], {"101.tiff": b"corrupt", "103.tiff": tiff_bytes(np.ones((3, 2, 8), bool))})
    return None, {**values, "workers": "2"}, 2


def bad_options(tmp_path):
    return None, {**case(tmp_path), "k": "20,0,xq", "metrics": "R,Nope", "workers": "0"}, 4


def unknown_yaml_key(tmp_path):
    values = case(tmp_path)
    return write_yaml(tmp_path, f"gt: {values['gt']}\npred: {values['pred']}\nprotocl: unique\n"), {}, 1


def malformed_yaml(tmp_path):
    return write_yaml(tmp_path, "k: [1, 2\nprotocol: unique\n"), {}, 1


def missing_yaml(tmp_path):
    return tmp_path / "missing.yaml", {}, 1


def no_gt_no_pred(tmp_path):
    return None, {}, 2


def bad_newer_options(tmp_path):
    return None, {**case(tmp_path), "imr_k": "x1,0", "wimr_tau": "1.5", "protocols": "unique,bogus"}, 4


def bad_newer_yaml_keys(tmp_path):
    values = case(tmp_path)
    text = (f"gt: {values['gt']}\npred: {values['pred']}\naggregation: mean\nper_predicate: \"yes\"\n"
            "wimr_tau: half\nprotocols: [unique, singlempo, bogus]\n")
    return write_yaml(tmp_path, text), {}, 4


def zeroshot_two_columns(tmp_path):
    (tmp_path / "zs.csv").write_text("0,3,0\n0,3\n")
    return None, {**case(tmp_path), "zeroshot_triplets": str(tmp_path / "zs.csv")}, 1


def zeroshot_malformed_json(tmp_path):
    (tmp_path / "zs.json").write_text("[[0, 3, 0]")
    return None, {**case(tmp_path), "zeroshot_triplets": str(tmp_path / "zs.json")}, 1


def train_gt_missing(tmp_path):
    return None, {**case(tmp_path), "train_gt": str(tmp_path / "missing.json")}, 1


def train_gt_relation_out_of_range(tmp_path):
    path = write_train_gt(tmp_path / "train.json", [([0, 3], [[0, 2, 0]])])
    return None, {**case(tmp_path), "train_gt": str(path)}, 1


def nan_score(tmp_path):
    values = case(tmp_path)
    rewrite_json(values["pred"], lambda data: record(data, "101")["instances"][0].update(score=float("nan")))
    return None, values, 1


@pytest.mark.parametrize("build", [broken_gt_json, gt_relation_out_of_range, corrupt_tiff, corrupt_zip,
                                   several_prediction_problems, several_mask_problems, bad_options,
                                   unknown_yaml_key, malformed_yaml, missing_yaml, no_gt_no_pred,
                                   bad_newer_options, bad_newer_yaml_keys, zeroshot_two_columns,
                                   zeroshot_malformed_json, train_gt_missing, train_gt_relation_out_of_range,
                                   nan_score],
                         ids=lambda build: build.__name__)
def test_cli_reports_one_error_line_per_problem(tmp_path, build):
    config_path, options, n_problems = build(tmp_path)
    with pytest.raises(sgeval.SGEvalError) as info:
        sgeval.evaluate(sgeval.load_config(config_path, **options))
    problems = checked(info.value)
    assert len(problems) == n_problems, problems
    args = ["--quiet"] + (["--config", config_path] if config_path else [])
    for key, value in options.items():
        args += [f"--{key.replace('_', '-')}", value]
    assert_cli_fails(args, problems)


@pytest.mark.parametrize("option, value", [("--aggregation", "mean"), ("--wimr-tau", "half"),
                                           ("--protocol", "bogus"), ("--iou-threshold", "x")])
def test_cli_option_of_the_wrong_type_is_a_usage_error(tmp_path, option, value):
    """click checks typed options before sgeval sees them: a usage error, no traceback."""
    values = case(tmp_path)
    result = CliRunner().invoke(sgeval.main, ["--quiet", "--gt", values["gt"], "--pred", values["pred"], option, value])
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit), result.output
    assert "Traceback" not in result.output and result.stdout == ""
    assert option in result.stderr and value in result.stderr
