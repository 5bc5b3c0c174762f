"""The plain-Python PQ reference (tests/reference_pq.py) against the tools' own numbers, on two generated datasets.

tests/data/pq/pq-0.zip and pq-1.zip each hold a PSG-layout GT (psg.json, panoptic/), one segmentation
per evaluated image in two forms (pan/<id>.npy: OpenPSG's pan_results; coco/: COCO-panoptic PNG +
segments_info), overlapping masks with scores (masks/), and what the tools' code, run unmodified, gives
for them (numbers.json; fair-psgg's merged node maps in merged_<mode>/). They are written by
``make check-pq`` (tools/pq_check/; its README says what the data exercise and lists every rule).

Checked to 1e-9 (counts exactly): every image's per-category IoU sum, TP, FP and FN; their sums; the
per-category PQ / SQ / RQ and the All / Things / Stuff means with their category counts, for
panopticapi (coco/ and, as the same segmentation, pan/ with VOID pixels unassigned), OpenPSG
(pan/, in percent) and panopticapi on fair-psgg's two merges, whose node maps must be equal too.
"""

import json

import numpy as np
import pytest
from PIL import Image

import reference_pq as ref
from conftest import PQ_FIXTURES, pq_fixture

TOLERANCE = 1e-9


@pytest.fixture(scope="module", params=PQ_FIXTURES)
def case(request, tmp_path_factory):
    folder, numbers = pq_fixture(request.param, tmp_path_factory)
    return folder, json.loads((folder / "psg.json").read_text()), numbers


def png_ids(path):
    rgb = np.asarray(Image.open(path).convert("RGB"), dtype=np.int64)
    return rgb[..., 0] + 256 * rgb[..., 1] + 65536 * rgb[..., 2]


def evaluated(psg):
    test_ids = set(psg["test_image_ids"])
    return [d for d in psg["data"] if d["image_id"] in test_ids and d["relations"]]


def isthing(psg):
    n_things = len(psg["thing_classes"])
    return {c: c < n_things for c in range(n_things + len(psg["stuff_classes"]))}


def gt_of(folder, entry):
    segments = {s["id"]: {"category": s["category_id"], "iscrowd": s["iscrowd"], "area": s["area"]}
                for s in entry["segments_info"]}
    return png_ids(folder / "panoptic" / entry["pan_seg_file_name"]), segments


def assert_stats(ours, theirs, where):
    assert sorted(ours) == sorted(int(c) for c in theirs), where
    for category, (iou, tp, fp, fn) in theirs.items():
        mine = ours[int(category)]
        assert mine[1:] == [tp, fp, fn], f"{where}: category {category}"
        assert mine[0] == pytest.approx(iou, abs=TOLERANCE), f"{where}: category {category}"


def assert_summary(ours, theirs, scale=1.0):
    for name in ("All", "Things", "Stuff"):
        assert ours[name]["n"] == theirs[name]["n"], name
        for key in ("pq", "sq", "rq"):
            assert ours[name][key] / scale == pytest.approx(theirs[name][key], abs=TOLERANCE), (name, key)
    assert sorted(ours["per_class"]) == sorted(int(c) for c in theirs["per_class"])
    for category, values in theirs["per_class"].items():
        for key, value in values.items():
            assert ours["per_class"][int(category)][key] == pytest.approx(value, abs=TOLERANCE), (category, key)


def scored(case, segmentation):
    """{image id: stats} and their sum, with segmentation(image id) -> (pred ids, pred segments)."""
    folder, psg, _ = case
    per_image, total = {}, {}
    for entry in evaluated(psg):
        stats = ref.image_stats(*gt_of(folder, entry), *segmentation(entry["image_id"]))
        per_image[entry["image_id"]] = stats
        ref.add_stats(total, stats)
    return per_image, total


def check(case, numbers, per_image, total, scale=1.0):
    assert sorted(per_image) == sorted(numbers["per_image"])
    for image_id, stats in numbers["per_image"].items():
        assert_stats(per_image[image_id], stats, f"image {image_id}")
    assert_stats(total, numbers["stats"], "sum")
    summary = ref.pq_summary(total, isthing(case[1]), scale)
    assert_summary(summary, numbers["summary"], scale)
    return summary


def coco_segmentation(folder):
    predictions = {a["image_id"]: a for a in json.loads((folder / "coco" / "panoptic.json").read_text())["annotations"]}

    def segmentation(image_id):
        annotation = predictions[image_id]
        return (png_ids(folder / "coco" / "panoptic" / annotation["file_name"]),
                {s["id"]: s["category_id"] for s in annotation["segments_info"]})
    return segmentation


def test_panopticapi_on_png_and_segments_info(case):
    folder, _, numbers = case
    check(case, numbers["panopticapi"], *scored(case, coco_segmentation(folder)))


def test_panopticapi_rule_on_pan_results(case):
    """pan/ is the same segmentation as coco/; with VOID pixels unassigned it gives panopticapi's numbers."""
    folder, psg, numbers = case
    n_classes = len(psg["thing_classes"]) + len(psg["stuff_classes"])
    check(case, numbers["panopticapi"],
          *scored(case, lambda image_id: ref.panoptic_segments(np.load(folder / "pan" / f"{image_id}.npy"), n_classes)))


def test_openpsg_on_pan_results(case):
    folder, psg, numbers = case
    n_classes = len(psg["thing_classes"]) + len(psg["stuff_classes"])
    openpsg = numbers["openpsg"]
    assert openpsg["scored_images"] == sorted(e["image_id"] for e in evaluated(psg))
    summary = check(case, openpsg,
                    *scored(case, lambda image_id: ref.openpsg_segments(np.load(folder / "pan" / f"{image_id}.npy"),
                                                                         n_classes)), scale=100.0)
    for suffix, name in (("", "All"), ("_th", "Things"), ("_st", "Stuff")):
        for key in ("pq", "sq", "rq"):
            assert summary[name][key] == pytest.approx(openpsg["returned"][key.upper() + suffix], abs=TOLERANCE)


def merged(folder, image_id, mode):
    masks, scores, categories = (np.load(folder / "masks" / f"{image_id}.{name}.npy")
                                 for name in ("masks", "scores", "categories"))
    if mode == "hilo":
        return ref.merge_score_order(masks, scores, ties="later-first"), categories
    return ref.merge_first_wins(masks), categories


@pytest.mark.parametrize("mode", ["hilo", "psgtr"])
def test_merges_equal_fair_psgg_and_score_as_panopticapi(case, mode):
    folder, psg, numbers = case
    labels = numbers[f"merge_{mode}"]["labels"]
    for entry in evaluated(psg):
        (node_map, kept), categories = merged(folder, entry["image_id"], mode)
        np.testing.assert_array_equal(node_map, np.load(folder / f"merged_{mode}" / f"{entry['image_id']}.npy"))
        assert [int(categories[i]) for i in kept] == labels[entry["image_id"]]

    def segmentation(image_id):
        (node_map, kept), categories = merged(folder, image_id, mode)
        return ref.merged_segments(node_map, kept, categories)
    check(case, numbers[f"merge_{mode}"], *scored(case, segmentation))
