"""Bad predictions (SPEC section 8): the container (.zip, directory, .json), triplets.json and its
records (ids, instances, triplets, boxes, scores, seg_filename). Every problem is one SGEvalError
line naming the prediction, the image and the field; each case breaks one thing in perfect_case
(conftest.py). The TIFFs themselves: test_errors_masks.py."""

import json
import re
import zipfile

import pytest
from conftest import (assert_cli_reports, edit_zip, matching, only, perfect_case, pred_record, problems_of,
                      rewrite_json, sgeval, zip_member)


# ------------------------------------------------------------------ container and triplets.json


@pytest.mark.parametrize("content", [b"{\"version\": 1, \"images\": [", b"", b"\x00\x01\x02"],
                         ids=["truncated", "empty", "binary"])
def test_pred_malformed_json_in_zip(tmp_path, content):
    values = perfect_case(tmp_path)
    edit_zip(values["pred"], {"triplets.json": content})
    only(problems_of(values), values["pred"], None, "triplets.json")


def test_pred_malformed_json_file(tmp_path):
    values = perfect_case(tmp_path, mode="box")
    open(values["pred"], "w").write("{\"version\": 1, \"images\": [}")
    only(problems_of(values), values["pred"], None, "JSON")


def test_pred_missing_path(tmp_path):
    values = perfect_case(tmp_path)
    missing = tmp_path / "no" / "pred.zip"
    only(problems_of({**values, "pred": str(missing)}), missing)


def test_pred_directory_without_triplets_json(tmp_path):
    values = perfect_case(tmp_path)
    (tmp_path / "empty_dir").mkdir()
    only(problems_of({**values, "pred": str(tmp_path / "empty_dir")}), tmp_path / "empty_dir", None,
         "triplets.json")


def test_pred_zip_without_triplets_json(tmp_path):
    values = perfect_case(tmp_path)
    edit_zip(values["pred"], {"triplets.json": None})
    only(problems_of(values), values["pred"], None, "triplets.json")


@pytest.mark.parametrize("corrupt", ["garbage", "truncated", "empty"])
def test_pred_corrupt_zip(tmp_path, corrupt):
    """A .zip that is not a readable ZIP must be reported as such (not parsed as JSON)."""
    values = perfect_case(tmp_path)
    path = tmp_path / "pred.zip"
    data = path.read_bytes()
    path.write_bytes({"garbage": b"these bytes are not a zip archive", "truncated": data[: len(data) // 2],
                      "empty": b""}[corrupt])
    problem = only(problems_of(values), values["pred"])
    message = problem.replace(str(values["pred"]), "")
    assert re.search(r"\bzip\b", message, re.IGNORECASE), problem


def test_pred_zip_member_with_bad_crc(tmp_path):
    values = perfect_case(tmp_path)
    path = tmp_path / "pred.zip"
    with zipfile.ZipFile(path, "w") as archive:  # stored, so the payload sits verbatim in the file
        archive.writestr("triplets.json", b"{\"version\": 1, \"images\": []}")
    data = path.read_bytes()
    path.write_bytes(data.replace(b"\"images\": []", b"\"images\": {}"))
    only(problems_of(values), values["pred"], None, "triplets.json")


@pytest.mark.parametrize("member", ["../evil.tiff", "/abs/evil.tiff", "a/../../evil.tiff"])
def test_zip_member_with_dotdot_or_absolute_path(tmp_path, member):
    values = perfect_case(tmp_path)
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


@pytest.mark.parametrize("version", [2, "1", None, 0, True, 1.0], ids=["2", "string", "null", "0", "true", "1.0"])
def test_pred_wrong_version(tmp_path, version):
    values = perfect_case(tmp_path)
    rewrite_json(values["pred"], lambda data: data.update(version=version))
    only(problems_of(values), values["pred"], None, "version", repr(version))


def test_pred_missing_version(tmp_path):
    values = perfect_case(tmp_path)
    rewrite_json(values["pred"], lambda data: data.pop("version"))
    only(problems_of(values), values["pred"], None, "version")


@pytest.mark.parametrize("images", [None, {"101": {}}, "101"])
def test_pred_images_not_a_list(tmp_path, images):
    values = perfect_case(tmp_path)
    rewrite_json(values["pred"], lambda data: data.update(images=images))
    only(problems_of(values), values["pred"], None, "images")


# -------------------------------------------------------------------------------------- records


@pytest.mark.parametrize("copy_id", ["102", 102], ids=["same", "int-vs-string"])
def test_pred_duplicate_image_ids(tmp_path, copy_id):
    values = perfect_case(tmp_path)
    rewrite_json(values["pred"], lambda data: data["images"].append({**pred_record(data, "102"), "id": copy_id}))
    only(problems_of(values), values["pred"], "102", "duplicate")


def test_pred_unknown_image_ids_are_counted_not_fatal(tmp_path):
    values = perfect_case(tmp_path)
    rewrite_json(values["pred"], lambda data: data["images"].extend(
        [{**pred_record(data, "103"), "id": "999"}, {**pred_record(data, "102"), "id": 555}]))
    result = sgeval.evaluate(sgeval.make_config(values))
    assert result["images"]["extra_predictions"] == 2
    assert result["images"]["evaluated"] == 3 and result["metrics"]["R@20"] == 1.0


@pytest.mark.parametrize("bad_id", [None, True, 1.5, ["101"]], ids=["missing", "bool", "float", "list"])
def test_pred_bad_image_id(tmp_path, bad_id):
    values = perfect_case(tmp_path)

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
    values = perfect_case(tmp_path)

    def edit(data):
        image = pred_record(data, "101")
        image.setdefault("ng_triplets", list(image["triplets"]))
        image[field].append(triplet)

    rewrite_json(values["pred"], edit)
    only(problems_of(values), values["pred"], "101", *words)


def test_bad_triplet_is_reported_once_without_ng_triplets(tmp_path):
    """ng_triplets defaults to triplets; a bad row must not be reported again as an ng_triplet."""
    values = perfect_case(tmp_path)
    rewrite_json(values["pred"], lambda data: pred_record(data, "101")["triplets"].append([0, 7, 0]))
    assert "ng_triplets" not in pred_record(json.loads(zip_member(values["pred"], "triplets.json")), "101")
    only(problems_of(values), values["pred"], "101", "triplet", "7")


@pytest.mark.parametrize("category", [5, -1, 1000])
def test_pred_instance_category_out_of_vocabulary(tmp_path, category):
    values = perfect_case(tmp_path)
    rewrite_json(values["pred"], lambda data: pred_record(data, "102")["instances"][1].update(category=category))
    only(problems_of(values), values["pred"], "102", "category", str(category))


@pytest.mark.parametrize("category", [1.0, "1", None, True], ids=["float", "string", "null", "bool"])
def test_pred_instance_category_not_an_integer(tmp_path, category):
    values = perfect_case(tmp_path)
    rewrite_json(values["pred"], lambda data: pred_record(data, "102")["instances"][0].update(category=category))
    only(problems_of(values), values["pred"], "102", "category")


@pytest.mark.parametrize("instances", [{"0": {}}, [1, 2], "person"], ids=["dict", "numbers", "string"])
def test_pred_instances_not_a_list_of_objects(tmp_path, instances):
    values = perfect_case(tmp_path)
    rewrite_json(values["pred"], lambda data: pred_record(data, "102").update(instances=instances))
    only(problems_of(values), values["pred"], "102", "instances")


def test_pred_no_instance_list(tmp_path):
    values = perfect_case(tmp_path)
    rewrite_json(values["pred"], lambda data: pred_record(data, "102").pop("instances"))
    only(problems_of(values), values["pred"], "102", "instances")


@pytest.mark.parametrize("field", ["triplets", "ng_triplets"])
@pytest.mark.parametrize("rows", [
    [[0.0, 2.0, 0.0]], [[0, 2, 0.5]], [[0, 2], [1, 2, 1]], [[0, 2]], [[0, 1, 2, 3]], [["0", "2", "0"]],
    [[True, False, True]], [[[0, 2, 0]]], 5, "0 2 0", {"0": [0, 2, 0]}, [[0, 2, None]],
    [[0, True, 0]], [[]], [[], []],
], ids=["floats", "one-float", "ragged", "short", "long", "strings", "bools", "nested", "scalar", "string",
        "object", "null", "one-bool", "empty-row", "empty-rows"])
def test_pred_triplets_not_integer_rows(tmp_path, field, rows):
    values = perfect_case(tmp_path)
    rewrite_json(values["pred"], lambda data: pred_record(data, "101").update({field: rows}))
    only(problems_of(values), values["pred"], "101", field)


def test_pred_triplets_null(tmp_path):
    """triplets is required (an empty list is valid); ng_triplets null means not given."""
    values = perfect_case(tmp_path)
    rewrite_json(values["pred"], lambda data: pred_record(data, "101").update(triplets=None, ng_triplets=None))
    only(problems_of(values), values["pred"], "101", "triplets")


def test_pred_triplets_beyond_int64(tmp_path):
    values = perfect_case(tmp_path)
    rewrite_json(values["pred"], lambda data: pred_record(data, "101").update(triplets=[[0, 2**70, 0]]))
    only(problems_of(values), values["pred"], "101", "triplets")


# --------------------------------------------------------------------------------- seg_filename


def test_seg_filename_not_in_zip(tmp_path):
    values = perfect_case(tmp_path)
    rewrite_json(values["pred"], lambda data: pred_record(data, "103").update(seg_filename="nope.tiff"))
    only(problems_of(values), values["pred"], "103", "nope.tiff")


def test_seg_filename_member_deleted_from_zip(tmp_path):
    values = perfect_case(tmp_path)
    edit_zip(values["pred"], {"103.tiff": None})
    only(problems_of(values), values["pred"], "103", "103.tiff")


def test_seg_filename_missing_from_directory(tmp_path):
    values = perfect_case(tmp_path)
    directory = tmp_path / "pred_dir"
    with zipfile.ZipFile(values["pred"]) as archive:
        archive.extractall(directory)
    (directory / "103.tiff").unlink()
    only(problems_of({**values, "pred": str(directory)}), directory, "103", "103.tiff")


@pytest.mark.parametrize("value", [None, "", 7], ids=["missing", "empty", "number"])
def test_seg_filename_required_in_mask_mode(tmp_path, value):
    values = perfect_case(tmp_path)

    def edit(data):
        if value is None:
            pred_record(data, "102").pop("seg_filename")
        else:
            pred_record(data, "102")["seg_filename"] = value

    rewrite_json(values["pred"], edit)
    only(problems_of(values), values["pred"], "102", "seg_filename")


@pytest.mark.parametrize("container", ["zip", "dir"])
@pytest.mark.parametrize("name", ["../101.tiff", "/tmp/101.tiff", "sub/../../101.tiff", "..\\101.tiff",
                                  "C:/101.tiff"])
def test_seg_filename_with_dotdot_or_absolute_path(tmp_path, container, name):
    values = perfect_case(tmp_path)
    if container == "dir":
        directory = tmp_path / "pred_dir"
        with zipfile.ZipFile(values["pred"]) as archive:
            archive.extractall(directory)
        values = {**values, "pred": str(directory)}
    rewrite_json(values["pred"], lambda data: pred_record(data, "101").update(seg_filename=name))
    only(problems_of(values), values["pred"], "101", "seg_filename", name)


# ---------------------------------------------------------------------------------------- boxes


@pytest.mark.parametrize("mode", ["box", "mask"])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf"), 10**400], ids=["nan", "inf", "-inf", "huge"])
def test_nan_or_inf_bbox(tmp_path, mode, value):
    values = perfect_case(tmp_path, mode=mode)
    rewrite_json(values["pred"], lambda data: pred_record(data, "102")["instances"][1]["bbox"].__setitem__(1, value))
    problem = only(problems_of(values), values["pred"], "102", "bbox")
    assert "nan" in problem.lower() or "inf" in problem.lower()


def test_box_mode_without_any_bboxes(tmp_path):
    values = perfect_case(tmp_path, mode="box")
    rewrite_json(values["pred"], lambda data: [i.pop("bbox") for i in pred_record(data, "101")["instances"]])
    only(problems_of(values), values["pred"], "101", "bbox")


def test_box_mode_without_one_bbox(tmp_path):
    values = perfect_case(tmp_path, mode="box")
    rewrite_json(values["pred"], lambda data: pred_record(data, "101")["instances"][2].pop("bbox"))
    only(problems_of(values), values["pred"], "101", "bbox")


def test_box_mode_parallel_lists_without_bboxes(tmp_path):
    values = perfect_case(tmp_path, mode="box")

    def edit(data):
        image = pred_record(data, "103")
        image["categories"] = [i["category"] for i in image.pop("instances")]

    rewrite_json(values["pred"], edit)
    only(problems_of(values), values["pred"], "103", "bbox")


@pytest.mark.parametrize("bbox", [[0, 0, 1], [0, 0, 1, "2"], "0 0 1 1", None],
                         ids=["short", "string", "text", "null"])
def test_box_mode_malformed_bbox(tmp_path, bbox):
    values = perfect_case(tmp_path, mode="box")
    rewrite_json(values["pred"], lambda data: pred_record(data, "103")["instances"][0].update(bbox=bbox))
    only(problems_of(values), values["pred"], "103", "bbox")


@pytest.mark.parametrize("bbox, words", [([5, 0, 1, 1], ("x2 < x1",)), ([0, 2, 4, 1], ("y2 < y1",))])
def test_box_mode_inverted_bbox(tmp_path, bbox, words):
    values = perfect_case(tmp_path, mode="box")
    rewrite_json(values["pred"], lambda data: pred_record(data, "101")["instances"][0].update(bbox=bbox))
    only(problems_of(values), values["pred"], "101", "bbox", *words)


def test_bbox_is_optional_in_mask_mode(tmp_path):
    """The docstring: ``bbox`` is required in box mode only (here one instance lacks it)."""
    values = perfect_case(tmp_path)
    rewrite_json(values["pred"], lambda data: pred_record(data, "101")["instances"][1].pop("bbox"))
    assert sgeval.evaluate(sgeval.make_config(values))["metrics"]["R@20"] == 1.0


def test_inverted_bbox_is_fine_in_mask_mode(tmp_path):
    values = perfect_case(tmp_path)
    rewrite_json(values["pred"], lambda data: pred_record(data, "101")["instances"][0].update(bbox=[5, 0, 1, 1]))
    assert sgeval.evaluate(sgeval.make_config(values))["metrics"]["R@20"] == 1.0


# ------------------------------------------------------------------------------ instance scores


@pytest.mark.parametrize("score", [float("nan"), float("inf"), "0.9", True, [0.5], -10**400],
                         ids=["nan", "inf", "string", "bool", "list", "huge"])
@pytest.mark.parametrize("spelling", ["instances", "parallel"])
def test_pred_bad_score(tmp_path, score, spelling):
    values = perfect_case(tmp_path)

    def edit(data):
        pred = pred_record(data, "102")
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


# ---------------------------------------------------------------------------------- collect all


def test_all_problems_of_the_prediction_pass_are_collected(tmp_path):
    values = perfect_case(tmp_path)

    def edit(data):
        pred_record(data, "101")["triplets"].append([0, 12, 0])
        pred_record(data, "102")["triplets"].append([0, 1, 9])
        pred_record(data, "103")["instances"][0]["category"] = 40
        pred_record(data, "103")["triplets"] = [[0, 1.5, 0]]
        data["images"].append({**pred_record(data, "102")})  # a duplicate id

    rewrite_json(values["pred"], edit)
    problems = problems_of(values)
    assert len(problems) == 5, problems
    pred = values["pred"]
    assert matching(problems, pred, "101", "triplet", "instance", "12")
    assert matching(problems, pred, "102", "triplet", "predicate", "9")
    assert matching(problems, pred, "103", "category", "40")
    assert matching(problems, pred, "103", "triplets")
    assert matching(problems, pred, "102", "duplicate")


# -------------------------------------------------------------------------------------- the CLI
# The CLI: each builder breaks a case and returns (YAML config path or None, option values,
# problem count); the library and the CLI report the same problems (assert_cli_reports).


def corrupt_zip(tmp_path):
    values = perfect_case(tmp_path)
    (tmp_path / "pred.zip").write_bytes(b"not a zip")
    return None, values, 1


def several_prediction_problems(tmp_path):
    values = perfect_case(tmp_path)

    def edit(data):
        pred_record(data, "101")["triplets"].append([0, 12, 0])
        pred_record(data, "102")["instances"][0]["category"] = -3
        pred_record(data, "103")["seg_filename"] = "../103.tiff"

    rewrite_json(values["pred"], edit)
    return None, values, 3


def nan_score(tmp_path):
    values = perfect_case(tmp_path)
    rewrite_json(values["pred"], lambda data: pred_record(data, "101")["instances"][0].update(score=float("nan")))
    return None, values, 1


@pytest.mark.parametrize("build", [corrupt_zip, several_prediction_problems, nan_score],
                         ids=lambda build: build.__name__)
def test_cli_reports_one_error_line_per_problem(tmp_path, build):
    assert_cli_reports(tmp_path, build)


# -------------------------------------------------------------------------- hostile containers


def zip_with_deflated_triplets(values, mangle):
    """Rewrite pred.zip with triplets.json deflated, its compressed bytes passed through mangle."""
    path = values["pred"]
    with zipfile.ZipFile(path) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data, compress_type=zipfile.ZIP_DEFLATED if name == "triplets.json" else
                             zipfile.ZIP_STORED)
    raw = bytearray(open(path, "rb").read())
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo("triplets.json")
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    mangle(raw, start, info)
    open(path, "wb").write(bytes(raw))


def central_header(raw, name):
    """Offset of the central directory header of a member."""
    return next(at for at in range(len(raw)) if raw[at: at + 4] == b"PK\x01\x02"
                and raw[at + 46: at + 46 + len(name)] == name.encode())


@pytest.mark.parametrize("damage", ["corrupt deflate", "encrypted", "deflate64", "unknown method"])
def test_unreadable_triplets_json_member(tmp_path, damage):
    """A triplets.json member zipfile cannot decompress: one problem, never a traceback."""
    values = perfect_case(tmp_path)

    def mangle(raw, start, info):
        if damage == "corrupt deflate":
            raw[start: start + 8] = b"\xff" * 8
        elif damage == "encrypted":  # the general purpose flag's bit 0, in both headers
            raw[info.header_offset + 6] |= 1
            raw[central_header(raw, "triplets.json") + 8] |= 1
        else:  # the compression method, in both headers
            method = (9 if damage == "deflate64" else 77).to_bytes(2, "little")
            raw[info.header_offset + 8: info.header_offset + 10] = method
            at = central_header(raw, "triplets.json")
            raw[at + 10: at + 12] = method

    zip_with_deflated_triplets(values, mangle)
    only(problems_of(values), values["pred"], None, "triplets.json")


def test_duplicate_zip_member_names(tmp_path):
    """Two members of one name: which one is meant is unknown, so it is a problem."""
    values = perfect_case(tmp_path)
    with pytest.warns(UserWarning), zipfile.ZipFile(values["pred"], "a") as archive:
        archive.writestr("101.tiff", b"another copy")
    only(problems_of(values), values["pred"], None, "101.tiff", "2 times")


def test_triplets_json_nested_too_deeply(tmp_path):
    values = perfect_case(tmp_path)
    edit_zip(values["pred"], {"triplets.json": b'{"version": 1, "images": [' + b"[" * 100_000 + b"]" * 100_000
                              + b"]}"})
    only(problems_of(values), values["pred"], None, "triplets.json", "RecursionError")


def test_triplets_json_blanks_and_the_value_limit(tmp_path, monkeypatch):
    """8 MiB of blanks between two records read as nothing; a record longer than MAX_VALUE
    characters (here 1 MiB) is one problem naming the limit."""
    values = perfect_case(tmp_path)
    data = json.loads(zip_member(values["pred"], "triplets.json"))
    records = [json.dumps(record).encode() for record in data["images"]]
    text = b'{"version": 1, "images": [' + records[0] + b"," + b" " * (8 << 20) + b",".join(records[1:]) + b"]}"
    edit_zip(values["pred"], {"triplets.json": text})
    assert sgeval.evaluate(sgeval.make_config(values))["metrics"]["R@20"] == 1.0
    monkeypatch.setattr(sgeval.JSONStream, "MAX_VALUE", 1 << 20)
    huge = b'{"version": 1, "images": [[' + b" " * (3 << 20) + b"]]}"
    edit_zip(values["pred"], {"triplets.json": huge})
    only(problems_of(values), values["pred"], None, "triplets.json", "limit")


def test_image_id_with_control_characters_cannot_forge_lines(tmp_path):
    values = perfect_case(tmp_path)
    rewrite_json(values["pred"], lambda data: data["images"].append({**pred_record(data, "101"),
                                                                     "id": "101\nerror: forged\x1b[2J"}))
    rewrite_json(values["pred"], lambda data: data["images"].append({**pred_record(data, "101"),
                                                                     "id": "101\nerror: forged\x1b[2J"}))
    problem = only(problems_of(values), values["pred"], None, "duplicate")
    assert "\\n" in problem and "\x1b" not in problem


def test_zip_whose_central_directory_needs_an_unknown_version(tmp_path):
    """zipfile raises NotImplementedError for it (found by the fuzz campaign): one problem."""
    values = perfect_case(tmp_path)
    raw = bytearray(open(values["pred"], "rb").read())
    at = raw.index(b"PK\x01\x02")
    raw[at + 6: at + 8] = (1000).to_bytes(2, "little")  # version needed to extract: 100.0
    open(values["pred"], "wb").write(bytes(raw))
    only(problems_of(values), values["pred"], None, "ZIP", "version")


def test_more_instances_than_the_limit(tmp_path):
    """Masks, IoUs and the merge's twin table grow with the instances of an image: a record with
    more than MAX_INSTANCES is one problem, checked before any mask is read."""
    values = perfect_case(tmp_path)
    many = [{"category": 0}] * (sgeval.MAX_INSTANCES + 1)
    rewrite_json(values["pred"], lambda data: pred_record(data, "101").update(instances=many, triplets=[]))
    only(problems_of(values), values["pred"], "101", str(sgeval.MAX_INSTANCES))


# ------------------------------------------------------------------ row scores (triplet_scores, ng_triplet_scores)


@pytest.mark.parametrize("edit, words", [
    ({"triplet_scores": [0.5, 0.4, 0.3]}, ("triplet_scores", "3 scores for 2 rows")),
    ({"triplet_scores": [0.5, "0.4"]}, ("triplet_scores", "finite numbers")),
    ({"triplet_scores": [0.5, True]}, ("triplet_scores", "finite numbers")),
    ({"triplet_scores": 0.5}, ("triplet_scores", "finite numbers")),
    ({"triplet_scores": [0.5, 1e400]}, ("triplet_scores", "finite numbers")),
    ({"ng_triplet_scores": [0.5, 0.4]}, ("ng_triplet_scores", "without 'ng_triplets'")),
    ({"ng_triplets": [[0, 2, 0]], "ng_triplet_scores": []}, ("ng_triplet_scores", "0 scores for 1 rows")),
], ids=["long", "string", "bool", "scalar", "overflow", "no-ng-rows", "short-ng"])
def test_bad_row_scores(tmp_path, edit, words):
    values = perfect_case(tmp_path, mode="box")
    rewrite_json(values["pred"], lambda data: pred_record(data, "101").update(edit))
    only(problems_of(values), values["pred"], "101", *words)


def test_row_scores_null_means_not_given(tmp_path):
    values = perfect_case(tmp_path, mode="box")
    rewrite_json(values["pred"], lambda data: pred_record(data, "101").update(triplet_scores=None,
                                                                            ng_triplet_scores=None))
    assert sgeval.evaluate(sgeval.make_config(values))["metrics"]["R@20"] == 1.0
