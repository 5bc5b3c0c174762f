"""Prediction format: instance-list spellings, containers (zip, directory, .json), uint8 TIFFs as
SGBench writes them, and the writer (write_predictions)."""

import io
import json
import shutil
import warnings
import zipfile

import numpy as np
import pytest
import tifffile
from conftest import (BOTTOM, TOP_LEFT, TOP_RIGHT, evaluate_values, format_case, pred_image, rewrite_json, sgeval,
                      write_zip)

G0, G1, G2 = TOP_LEFT, TOP_RIGHT, BOTTOM


def test_instance_list_spellings_read_identically(tmp_path):
    expected = evaluate_values(format_case(tmp_path))
    assert expected["metrics"]["R@20"] > 0

    def annotation(data):  # the SGBench 1.0 code's spelling
        for image in data["images"]:
            image["annotation"] = image.pop("instances")

    def parallel_lists(data):  # the SGBench README's spelling
        for image in data["images"]:
            instances = image.pop("instances")
            image["categories"] = [i["category"] for i in instances]
            image["bboxes"] = [i["bbox"] for i in instances]

    for edit in (annotation, parallel_lists):
        values = format_case(tmp_path / edit.__name__)
        rewrite_json(values["pred"], edit)
        assert evaluate_values(values)["metrics"] == expected["metrics"], edit.__name__


def test_zip_directory_and_json_containers_agree(tmp_path):
    values = format_case(tmp_path)
    directory = tmp_path / "pred_dir"
    with zipfile.ZipFile(values["pred"]) as archive:
        archive.extractall(directory)
    assert evaluate_values({**values, "pred": str(directory)})["metrics"] == evaluate_values(values)["metrics"]
    box_values = format_case(tmp_path / "box", mode="box")
    box = evaluate_values(box_values)
    assert str(box_values["pred"]).endswith(".json") is False  # written as a zip without masks
    json_path = tmp_path / "pred.json"
    with zipfile.ZipFile(box_values["pred"]) as archive:
        json_path.write_bytes(archive.read("triplets.json"))
    assert evaluate_values({**box_values, "pred": str(json_path)})["metrics"] == box["metrics"]


@pytest.mark.parametrize("n_instances", [3, 4])
def test_uint8_tiffs_as_sgbench_writes_them(tmp_path, n_instances):
    """uint8 pages (and, for 3 masks, tifffile's single 3-D page) give the same numbers."""
    values = format_case(tmp_path, n_instances=n_instances)
    expected = evaluate_values(values)["metrics"]
    with zipfile.ZipFile(values["pred"]) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    for name in [n for n in members if n.endswith(".tiff")]:
        masks = tifffile.imread(io.BytesIO(members[name])).reshape(-1, 2, 8)
        buffer = io.BytesIO()
        with warnings.catch_warnings():  # tifffile warns that (3, H, W) becomes a planar RGB page
            warnings.simplefilter("ignore", DeprecationWarning)
            tifffile.imwrite(buffer, masks.astype(np.uint8) * 255, compression="deflate")
        members[name] = buffer.getvalue()
    write_zip(values["pred"], members)
    assert evaluate_values(values)["metrics"] == expected


def test_writer_writes_one_1bit_deflate_page_with_a_sample_per_mask(tmp_path):
    """Several masks: one page whose samples, stored apart (planar), are the masks, one strip each;
    one mask: a plain page. tifffile (and so SGBench 1.0) reads both as (P, H, W)."""
    values = format_case(tmp_path)
    with zipfile.ZipFile(values["pred"]) as archive:
        data = json.loads(archive.read("triplets.json"))
        assert data["version"] == 1 and data["images"][0]["seg_filename"] == "1.tiff"
        for name, masks in (("1.tiff", [G0, G1, G2]), ("3.tiff", [G0])):
            with tifffile.TiffFile(io.BytesIO(archive.read(name))) as tiff:
                page = tiff.pages.first
                assert len(tiff.pages) == 1 and page.samplesperpixel == len(masks)
                assert page.bitspersample == 1 and page.compression == tifffile.COMPRESSION.ADOBE_DEFLATE
                assert len(page.dataoffsets) == len(masks)  # a strip per mask
                assert len(masks) == 1 or page.planarconfig == tifffile.PLANARCONFIG.SEPARATE
                np.testing.assert_array_equal(tiff.asarray(), masks)


def test_missing_ng_triplets_fall_back_to_triplets(tmp_path):
    values = format_case(tmp_path)
    rewrite_json(values["pred"], lambda data: [i.pop("ng_triplets", None) for i in data["images"]])
    m = evaluate_values(values)["metrics"]
    assert m["ngR@20"] == m["R@20"] and m["mNgR@20"] == m["mR@20"]


def test_integer_ids_are_compared_as_strings(tmp_path):
    values = format_case(tmp_path)
    expected = evaluate_values(values)
    rewrite_json(values["pred"], lambda data: [i.update(id=int(i["id"])) for i in data["images"]])
    assert evaluate_values(values)["metrics"] == expected["metrics"]


def test_directory_writer_round_trip(tmp_path):
    values = format_case(tmp_path)
    images = [pred_image(1, [G0, G1, G2], [0, 0, 1], [[1, 2, 1]])]
    directory = sgeval.write_predictions(tmp_path / "out_dir", images)
    assert sorted(p.name for p in (tmp_path / "out_dir").iterdir()) == ["1.tiff", "triplets.json"]
    shutil.rmtree(directory)
    with pytest.raises(ValueError, match="holds no masks"):
        sgeval.write_predictions(tmp_path / "x.json", images)
    assert values  # the GT written by format_case() is unaffected


def test_row_scores_round_trip_and_do_not_move_the_recall_protocols(tmp_path):
    """write_predictions writes triplet_scores / ng_triplet_scores as given (float64 exactly);
    the reader gives them back (without ng_triplets the ng list's scores are the triplets'); the
    recall protocols read the rows as written, scores or not."""
    values = format_case(tmp_path, mode="box")
    plain = sgeval.evaluate(sgeval.make_config(values))
    scores = {}

    def add_scores(data):
        for record in data["images"]:
            for field, rows in (("triplet_scores", "triplets"), ("ng_triplet_scores", "ng_triplets")):
                if record.get(rows) is not None:
                    record[field] = [0.1 + 1 / 3 * i for i in range(len(record[rows]))]
            scores[str(record["id"])] = record["triplet_scores"], record.get("ng_triplet_scores")

    rewrite_json(values["pred"], add_scores)
    _, records = sgeval.read_predictions(values["pred"], 5, 4, "box")
    for image_id, pred in records.items():
        mine, ng = scores[image_id]
        assert pred.triplet_scores.tolist() == mine
        assert pred.ng_triplet_scores.tolist() == (mine if ng is None else ng)
    out = sgeval.write_predictions(tmp_path / "again.json", [
        {"id": p.image_id, "instances": [{"category": int(c), "bbox": b.tolist()} for c, b in zip(p.categories, p.boxes)],
         "triplets": p.triplets, "triplet_scores": p.triplet_scores} for p in records.values()])
    _, again = sgeval.read_predictions(out, 5, 4, "box")
    assert all(again[i].triplet_scores.tolist() == scores[i][0] for i in scores)
    assert sgeval.evaluate(sgeval.make_config(values))["metrics"] == plain["metrics"]
    with pytest.raises(ValueError, match="image x: field 'triplet_scores' holds NaN or inf"):
        sgeval.write_predictions(tmp_path / "bad.json", [{"id": "x", "instances": [], "triplets": [],
                                                          "triplet_scores": [float("nan")]}])
