"""Prediction format: spellings, containers, TIFF flavours and the writer."""

import io
import json
import shutil
import warnings
import zipfile

import numpy as np
import pytest
import tifffile
from conftest import cells, gt_image, pred_image, sgeval, write_case, write_zip

G0, G1, G2 = cells(2, 8, (0, 0, 4)), cells(2, 8, (0, 4, 8)), cells(2, 8, (1, 0, 8))


def case(tmp_path, mode="mask", n_instances=3):
    images = [gt_image(1, [G0, G1, G2], [0, 0, 1], [[0, 2, 0], [1, 2, 0], [1, 2, 1]]),
              gt_image(2, [G0, G2], [0, 1], [[0, 1, 2]]),
              gt_image(3, [G0, G2], [0, 1], [[0, 1, 2]])]
    preds = [pred_image(1, [G0, G1, G2, cells(2, 8, (0, 4, 7))][:n_instances], [0, 0, 1, 0][:n_instances],
                        triplets=[[1, 2, 1], [0, 2, 0]], ng_triplets=[[1, 2, 1], [1, 2, 0], [0, 2, 0]]),
             pred_image(2, [G0, G2], [0, 1], triplets=[[0, 1, 2]], scores=[0.9, 0.8]),
             pred_image(3, [G0], [0], triplets=[[0, 0, 2]])]  # a one-page TIFF
    return write_case(tmp_path, images, preds, mode=mode)


def evaluate(values, **extra):
    return sgeval.evaluate(sgeval.make_config({**values, "k": ["1", "20"], **extra}))


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
        target = path if str(path).endswith(".json") else f"{path}/triplets.json"
        with open(target) as handle:
            data = json.load(handle)
        edit(data)
        with open(target, "w") as handle:
            json.dump(data, handle)


def test_instance_list_spellings_read_identically(tmp_path):
    expected = evaluate(case(tmp_path))
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
        values = case(tmp_path / edit.__name__)
        rewrite_json(values["pred"], edit)
        assert evaluate(values)["metrics"] == expected["metrics"], edit.__name__


def test_zip_directory_and_json_containers_agree(tmp_path):
    values = case(tmp_path)
    directory = tmp_path / "pred_dir"
    with zipfile.ZipFile(values["pred"]) as archive:
        archive.extractall(directory)
    assert evaluate({**values, "pred": str(directory)})["metrics"] == evaluate(values)["metrics"]
    box_values = case(tmp_path / "box", mode="box")
    box = evaluate(box_values)
    assert str(box_values["pred"]).endswith(".json") is False  # written as a zip without masks
    json_path = tmp_path / "pred.json"
    with zipfile.ZipFile(box_values["pred"]) as archive:
        json_path.write_bytes(archive.read("triplets.json"))
    assert evaluate({**box_values, "pred": str(json_path)})["metrics"] == box["metrics"]


@pytest.mark.parametrize("n_instances", [3, 4])
def test_uint8_tiffs_as_sgbench_writes_them(tmp_path, n_instances):
    """uint8 pages (and, for 3 masks, tifffile's single 3-D page) give the same numbers."""
    values = case(tmp_path, n_instances=n_instances)
    expected = evaluate(values)["metrics"]
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
    assert evaluate(values)["metrics"] == expected


def test_writer_writes_one_bit_deflate_pages(tmp_path):
    values = case(tmp_path)
    with zipfile.ZipFile(values["pred"]) as archive:
        data = json.loads(archive.read("triplets.json"))
        assert data["version"] == 1 and data["images"][0]["seg_filename"] == "1.tiff"
        with tifffile.TiffFile(io.BytesIO(archive.read("1.tiff"))) as tiff:
            assert len(tiff.pages) == 3
            for page, mask in zip(tiff.pages, [G0, G1, G2]):
                assert page.bitspersample == 1 and page.compression == tifffile.COMPRESSION.ADOBE_DEFLATE
                np.testing.assert_array_equal(page.asarray(), mask)


def test_missing_ng_triplets_fall_back_to_triplets(tmp_path):
    values = case(tmp_path)
    rewrite_json(values["pred"], lambda data: [i.pop("ng_triplets", None) for i in data["images"]])
    m = evaluate(values)["metrics"]
    assert m["ngR@20"] == m["R@20"] and m["mNgR@20"] == m["mR@20"]


def test_integer_ids_are_compared_as_strings(tmp_path):
    values = case(tmp_path)
    expected = evaluate(values)
    rewrite_json(values["pred"], lambda data: [i.update(id=int(i["id"])) for i in data["images"]])
    assert evaluate(values)["metrics"] == expected["metrics"]


def test_directory_writer_round_trip(tmp_path):
    values = case(tmp_path)
    images = [pred_image(1, [G0, G1, G2], [0, 0, 1], [[1, 2, 1]])]
    directory = sgeval.write_predictions(tmp_path / "out_dir", images)
    assert sorted(p.name for p in (tmp_path / "out_dir").iterdir()) == ["1.tiff", "triplets.json"]
    shutil.rmtree(directory)
    with pytest.raises(ValueError, match="holds no masks"):
        sgeval.write_predictions(tmp_path / "x.json", images)
    assert values  # the GT written by case() is unaffected


def test_panoptic_png_rgb_rgba_and_truncated(tmp_path):
    from PIL import Image
    ids = np.array([[0, 7, 7, 70000], [300, 300, 0, 70000]])
    rgb = np.stack([ids & 255, (ids >> 8) & 255, ids >> 16], axis=-1).astype(np.uint8)
    segments = np.array([7, 300, 70000], np.int64)
    expected = sgeval.pack_masks(ids[None] == segments[:, None, None])
    for name, array in (("rgb.png", rgb), ("rgba.png", np.concatenate([rgb, np.full((2, 4, 1), 9, np.uint8)], -1))):
        Image.fromarray(array).save(tmp_path / name)
        image = sgeval.GTImage("1", 2, 4, str(tmp_path / name), segments, np.zeros(3, np.int64),
                               np.zeros((3, 4)), np.zeros((0, 3), np.int64))
        np.testing.assert_array_equal(sgeval.load_gt_masks(image), expected)
    data = (tmp_path / "rgb.png").read_bytes()
    (tmp_path / "cut.png").write_bytes(data[: len(data) // 2])
    image = sgeval.GTImage("1", 2, 4, str(tmp_path / "cut.png"), segments, np.zeros(3, np.int64),
                           np.zeros((3, 4)), np.zeros((0, 3), np.int64))
    with pytest.raises(sgeval.SGEvalError, match="cut.png: image 1: cannot read panoptic PNG"):
        sgeval.load_gt_masks(image)
