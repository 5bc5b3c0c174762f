"""Tests of the synthetic data generator tools/synth.py and the demo generator tools/make_demo.py."""

import json
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tools import synth

N_THINGS, N_STUFF, N_PREDICATES = 4, 3, 5


def small_dataset(seed=0, n_images=12):
    return synth.make_dataset(np.random.default_rng(seed), n_images, 24, 32, N_THINGS, N_STUFF, N_PREDICATES)


@pytest.fixture(scope="module")
def dataset():
    return small_dataset()


def test_masks_are_non_overlapping_non_empty_and_boxes_tight(dataset):
    assert len(dataset["images"]) == 12
    for im in dataset["images"]:
        masks = im["masks"]
        n_segments = len(im["categories"])
        assert masks.dtype == bool and masks.shape == (n_segments, im["height"], im["width"])
        assert masks.sum(axis=0).max() <= 1
        assert masks.any(axis=(1, 2)).all()
        assert len(im["boxes"]) == n_segments
        for mask, box in zip(masks, im["boxes"]):
            ys, xs = np.nonzero(mask)
            assert box == [xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]
        assert all(0 <= c < N_THINGS + N_STUFF for c in im["categories"])
        for s, o, p in im["relations"]:
            assert s != o and 0 <= s < n_segments and 0 <= o < n_segments and 0 <= p < N_PREDICATES


def test_dataset_has_the_edge_cases_the_tests_rely_on():
    images = small_dataset(n_images=30)["images"]
    assert {im["split"] for im in images if not im["relations"]} == {"test", "train"}
    assert any(len(im["relations"]) > len({tuple(r) for r in im["relations"]}) for im in images)
    assert any(len(im["categories"]) > len(set(im["categories"])) for im in images)
    assert sum(im["split"] == "test" for im in images) == 21


def test_same_seed_gives_identical_data():
    a, b = small_dataset(3), small_dataset(3)
    for im_a, im_b in zip(a["images"], b["images"]):
        assert np.array_equal(im_a.pop("masks"), im_b.pop("masks"))
    assert a == b
    ds = small_dataset(3)
    p1 = synth.simulate_predictions(np.random.default_rng(7), ds)
    p2 = synth.simulate_predictions(np.random.default_rng(7), ds)
    assert [np.array_equal(x.pop("masks"), y.pop("masks")) for x, y in zip(p1, p2)] == [True] * len(p1)
    assert p1 == p2


def test_written_panoptic_pngs_decode_to_the_masks(dataset, tmp_path):
    psg_path = synth.write_gt(dataset, tmp_path)
    psg = json.loads(Path(psg_path).read_text())
    for im, entry in zip(dataset["images"], psg["data"]):
        png = Image.open(tmp_path / "panoptic" / entry["pan_seg_file_name"])
        rgb = np.asarray(png.convert("RGB")).astype(np.int64)
        ids = rgb[..., 0] + 256 * rgb[..., 1] + 65536 * rgb[..., 2]
        seg_ids = [s["id"] for s in entry["segments_info"]]
        assert len(set(seg_ids)) == len(seg_ids) and all(1 <= i < 2 ** 24 for i in seg_ids)
        decoded = np.stack([ids == i for i in seg_ids])
        assert np.array_equal(decoded, im["masks"])
        assert np.array_equal(ids == 0, ~im["masks"].any(axis=0))


def test_psg_json_fields_are_consistent(dataset, tmp_path):
    psg = json.loads(Path(synth.write_gt(dataset, tmp_path)).read_text())
    assert set(psg) == {"data", "thing_classes", "stuff_classes", "predicate_classes", "test_image_ids"}
    assert psg["test_image_ids"] == [im["image_id"] for im in dataset["images"] if im["split"] == "test"]
    assert all(isinstance(i, str) for i in psg["test_image_ids"])
    for im, entry in zip(dataset["images"], psg["data"]):
        assert entry["image_id"] == im["image_id"]
        assert (entry["height"], entry["width"]) == (im["height"], im["width"])
        assert len(entry["segments_info"]) == len(entry["annotations"]) == len(im["categories"])
        for seg, ann, category, mask, box in zip(entry["segments_info"], entry["annotations"],
                                                 im["categories"], im["masks"], im["boxes"]):
            assert seg["category_id"] == ann["category_id"] == category
            assert seg["isthing"] == int(category < N_THINGS) and seg["iscrowd"] == 0
            assert seg["area"] == mask.sum()
            assert ann["bbox"] == box and ann["bbox_mode"] == 0
        assert entry["relations"] == im["relations"]


def check_prediction(pred, im, n_classes, with_masks):
    n = len(pred["instances"])
    for inst in pred["instances"]:
        assert 0 <= inst["category"] < n_classes and isinstance(inst["score"], float)
    for key in ("triplets", "ng_triplets"):
        for s, o, p in pred.get(key, []):
            assert 0 <= s < n and 0 <= o < n and 0 <= p < N_PREDICATES
    if with_masks:
        assert pred["masks"].dtype == bool and pred["masks"].shape == (n, im["height"], im["width"])
        assert [inst["bbox"] for inst in pred["instances"]] == [synth.tight_box(m) for m in pred["masks"]]
    else:
        assert "masks" not in pred
        for inst in pred["instances"]:
            x1, y1, x2, y2 = inst["bbox"]
            assert all(2 * v == int(2 * v) for v in inst["bbox"]) and x1 < x2 and y1 < y2


@pytest.mark.parametrize("with_masks", [True, False])
def test_predictions_are_valid_and_cover_the_edge_cases(with_masks):
    ds = small_dataset(1, n_images=30)
    preds = synth.simulate_predictions(np.random.default_rng(2), ds, with_masks=with_masks)
    by_id = {im["image_id"]: im for im in ds["images"]}
    test_ids = {i for i, im in by_id.items() if im["split"] == "test"}
    pred_ids = [p["id"] for p in preds]
    assert len(pred_ids) == len(set(pred_ids))
    assert test_ids - set(pred_ids)  # some test image has no prediction
    extra = set(pred_ids) - test_ids
    assert len(extra) == 2 and any(i in by_id for i in extra) and any(i not in by_id for i in extra)
    assert any(not p["triplets"] for p in preds)
    assert any("ng_triplets" not in p for p in preds)
    all_triplets = [t for p in preds for t in p["triplets"]]
    assert any(s == o for s, o, _ in all_triplets)
    assert any(len(p["triplets"]) > len({tuple(t) for t in p["triplets"]}) for p in preds)
    assert any(len(p.get("ng_triplets", [])) > len(p["triplets"]) for p in preds)
    for pred in preds:
        check_prediction(pred, by_id.get(pred["id"], ds["images"][0]), N_THINGS + N_STUFF, with_masks)


def test_mask_predictions_hold_duplicates_and_tied_ious():
    ds = small_dataset(1, n_images=30)
    preds = synth.simulate_predictions(np.random.default_rng(2), ds)
    by_id = {im["image_id"]: im for im in ds["images"]}
    exact = near = tied = 0
    for pred in preds:
        im = by_id.get(pred["id"], ds["images"][0])  # unknown extra ids copy image 0
        cats = [inst["category"] for inst in pred["instances"]]
        for i in range(len(cats)):
            for j in range(i + 1, len(cats)):
                if cats[i] == cats[j]:
                    iou = synth.mask_iou(pred["masks"][i], pred["masks"][j])
                    exact += iou == 1.0
                    near += 0.5 <= iou < 1.0
            ious = [synth.mask_iou(pred["masks"][i], m) for c, m in zip(im["categories"], im["masks"])
                    if c == cats[i]]
            tied += sum(v == max(ious) for v in ious) >= 2 and max(ious) >= 0.5
    assert exact and near and tied


@pytest.mark.parametrize("with_masks", [True, False])
def test_empty_predictions(with_masks):
    ds = small_dataset(1, n_images=30)
    preds = synth.simulate_predictions(np.random.default_rng(2), ds, p_empty=1.0, n_extra=0,
                                       with_masks=with_masks)
    assert all(not p["triplets"] and not p.get("ng_triplets") for p in preds)
    no_instances = [p for p in preds if not p["instances"]]
    assert no_instances and len(no_instances) < len(preds)
    for pred in no_instances:
        if with_masks:
            assert pred["masks"].shape == (0, 24, 32) and pred["masks"].dtype == bool
        else:
            assert "masks" not in pred


def test_make_demo_is_byte_identical(tmp_path, monkeypatch):
    from tools import make_demo

    make_demo.make_demo(tmp_path / "a", seed=0)
    real_time = time.time
    monkeypatch.setattr(time, "time", lambda: real_time() + 3600)  # second run "an hour later"
    make_demo.make_demo(tmp_path / "b", seed=0)
    files_a = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*") if p.is_file())
    files_b = sorted(p.relative_to(tmp_path / "b") for p in (tmp_path / "b").rglob("*") if p.is_file())
    assert files_a == files_b and Path("pred.zip") in files_a and Path("psg.json") in files_a
    for name in files_a:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
