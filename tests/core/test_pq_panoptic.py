"""A prediction's own panoptic segmentation (``Evaluator.update(panoptic=...)``, a record's field
``panoptic``) scored by panoptic quality beside its instance masks, under ``pq_rule: panopticapi``
and ``pq_rule: openpsg``, against the tools' own numbers in tests/data/pq (tools/pq_check/README.md).

Each image gets OpenPSG's pan_results (pan/<id>.npy) as its panoptic segmentation and the
overlapping masks (masks/) as its instances, which no merge rule is named for: PQ must score the
segmentation, never the masks. Checked per category (TP, FP, FN exactly, PQ to 1e-9) and in the
means: panopticapi's numbers under the default rule; OpenPSG's under ``openpsg``, whose first
fixture image holds the id-0 / VOID collision (the means equal OpenPSG's returned percentages / 100).
"""

import json
import zipfile

import numpy as np
import pytest

from conftest import PQ_FIXTURES, ROOT, pq_config, pq_fixture, sgeval, unpacked
from test_pq import assert_pq, object_classes

DATA = ROOT / "tests" / "data" / "pq"
TOLERANCE = 1e-9
INSTANCE_OFFSET = 1000  # OpenPSG's pan_results: id = category + instance x INSTANCE_OFFSET


@pytest.fixture(scope="module", params=PQ_FIXTURES)
def case(request, tmp_path_factory):
    return pq_fixture(request.param, tmp_path_factory)




def images(folder):
    """(image id, pan_results, instance update arguments) of every evaluated image."""
    for image in sgeval.Evaluator(pq_config(folder)).gt.images:
        masks, scores, categories = (np.load(folder / "masks" / f"{image.image_id}.{name}.npy")
                                     for name in ("masks", "scores", "categories"))
        yield image.image_id, np.load(folder / "pan" / f"{image.image_id}.npy"), {
            "labels": categories.astype(np.int64), "triplets": np.zeros((0, 3), np.int64),
            "masks": masks.astype(bool), "scores": scores.astype(np.float64)}


def segmentation(pan, void):
    """PanopticSegmentation of pan_results: every value but VOID (category ``void``) a segment."""
    values = np.unique(pan)
    ids = values[values % INSTANCE_OFFSET != void]
    return sgeval.PanopticSegmentation(pan, ids, ids % INSTANCE_OFFSET, 0 if 0 in ids else None)


def assert_openpsg(results, numbers):
    """OpenPSG's PQStat and means (numbers.json keeps them as fractions), and its returned percentages."""
    assert_pq(results, numbers)
    for key in sgeval.PQ_KEYS:
        assert 100 * results["metrics"][key] == pytest.approx(numbers["returned"][key], abs=TOLERANCE, rel=0), key


@pytest.mark.parametrize("rule", ["panopticapi", "openpsg"])
def test_update_panoptic_scores_the_segmentation_under_each_rule(case, rule):
    folder, numbers = case
    evaluator = sgeval.Evaluator(pq_config(folder, rule))
    void = len(evaluator.gt.object_classes)
    for image_id, pan, arguments in images(folder):
        evaluator.update(image_id, **arguments, panoptic=segmentation(pan, void))
    results = evaluator.compute()
    section = results["panoptic_quality"]
    assert (section["rule"], section["source"], section["merge"]) == (rule, "panoptic", "none")
    assert section["images_by_source"] == {"none": 0, "masks": 0, "panoptic": len(evaluator.gt.images)}
    if rule == "openpsg":
        assert_openpsg(results, numbers["openpsg"])
    else:
        assert_pq(results, numbers["panopticapi"])


def file_record(image_id, pan, arguments, void):
    """A prediction file's record: the instances, and pan_results as the openpsg converter writes
    them (PNG ids value + 1, VOID pixels 0, void_id_segment 1 where value 0 is a segment)."""
    values = np.unique(pan)
    values = values[values % INSTANCE_OFFSET != void]
    segment_map = np.where(pan % INSTANCE_OFFSET == void, 0, pan + 1)
    return {"id": image_id, "triplets": [], "masks": arguments["masks"],
            "instances": [{"category": int(c), "score": float(s)} for c, s in zip(arguments["labels"],
                                                                              arguments["scores"])],
            "panoptic": {"segment_map": segment_map, "void_id_segment": 1 if 0 in values else None,
                         "segments": [{"id": int(v) + 1, "category": int(v) % INSTANCE_OFFSET} for v in values]}}


def test_a_files_panoptic_field_gives_the_tools_numbers(case, tmp_path):
    folder, numbers = case
    void = len(object_classes(folder / "psg.json"))
    pred = sgeval.write_predictions(tmp_path / "pred.zip", [file_record(*item, void) for item in images(folder)])
    for rule, tool in (("panopticapi", "panopticapi"), ("openpsg", "openpsg")):
        results = sgeval.evaluate(pq_config(folder, rule, pred=pred))
        assert results["panoptic_quality"]["source"] == "panoptic"
        if rule == "openpsg":
            assert_openpsg(results, numbers[tool])
        else:
            assert_pq(results, numbers[tool])


def test_the_rules_differ_only_where_a_segment_has_void_id(case):
    """Without void_id_segment, openpsg is panopticapi: the collision is the only difference."""
    folder, numbers = case
    evaluator = sgeval.Evaluator(pq_config(folder, "openpsg"))
    void = len(evaluator.gt.object_classes)
    for image_id, pan, arguments in images(folder):
        evaluator.update(image_id, **arguments, panoptic=segmentation(pan, void)._replace(void_id_segment=None))
    assert_pq(evaluator.compute(), numbers["panopticapi"])


@pytest.fixture(scope="module")
def first(tmp_path_factory):
    """pq-0's folder and its first image's file record (test_a_files_panoptic_field_gives_the_tools_numbers)."""
    folder = unpacked(DATA / "pq-0.zip", tmp_path_factory, "first")
    void = len(object_classes(folder / "psg.json"))
    return folder, file_record(*next(images(folder)), void)


def png_of(function):
    """A change of the record's PNG: function(segment map) -> the bytes written instead."""
    return "png", function


@pytest.mark.parametrize("change, problem", [
    (lambda panoptic: panoptic.pop("file"), "field 'panoptic.file' must name a PNG"),
    (lambda panoptic: panoptic.update(file="other.png"), "field 'panoptic.file' 'other.png' is not in the ZIP"),
    (lambda panoptic: panoptic.update(segments={}), "field 'panoptic' must be an object with 'file', 'segments'"),
    (lambda panoptic: panoptic["segments"][0].update(id=0), "every segment needs an integer 'id' from 1"),
    (lambda panoptic: panoptic["segments"][0].update(category=500), "field 'panoptic': a category is outside"),
    (lambda panoptic: panoptic["segments"].append(panoptic["segments"][0]), "a segment id is listed twice"),
    (lambda panoptic: panoptic.update(void_id_segment=999), "void_id_segment 999 is not a listed segment id"),
    (lambda panoptic: panoptic["segments"].append({"id": 4343, "category": 0}), "lists id 4343, which the PNG"),
    (png_of(lambda ids: sgeval.encode_panoptic(ids[:-1])), "must be an 8-bit RGB PNG of the GT image's"),
    (png_of(lambda ids: sgeval.encode_panoptic(np.where(ids == ids.max(), 4242, ids))), "the PNG holds id 4242"),
    (png_of(lambda ids: b"\x89PNG\r\n\x1a\n broken"), "cannot read PNG"),
])
def test_a_bad_panoptic_field_is_one_line_naming_file_image_and_field(first, tmp_path, change, problem):
    folder, record = first
    written = sgeval.write_predictions(tmp_path / "written.zip", [record])
    with zipfile.ZipFile(written) as source:
        members = {name: source.read(name) for name in source.namelist()}
    triplets = json.loads(members["triplets.json"])
    panoptic = triplets["images"][0]["panoptic"]
    if isinstance(change, tuple):
        members[panoptic["file"]] = change[1](record["panoptic"]["segment_map"])
    else:
        change(panoptic)
    members["triplets.json"] = json.dumps(triplets).encode()
    pred = str(tmp_path / "pred.zip")
    with zipfile.ZipFile(pred, "w") as target:
        for name, data in members.items():
            target.writestr(name, data)
    with pytest.raises(sgeval.SGEvalError) as info:
        sgeval.evaluate(pq_config(folder, pred=pred))
    assert len(info.value.problems) == 1 and problem in info.value.problems[0], info.value.problems
    assert info.value.problems[0].startswith(f"{pred}: image {record['id']}")


@pytest.mark.parametrize("change, problem", [
    (lambda segmentation: tuple(segmentation), "must be an sgeval.PanopticSegmentation"),
    (lambda segmentation: segmentation._replace(segment_map=segmentation.segment_map[:-1]),
     "field 'panoptic.segment_map' has shape"),
    (lambda segmentation: segmentation._replace(categories=segmentation.categories[:-1]),
     "field 'panoptic.categories' has shape"),
    (lambda segmentation: segmentation._replace(segment_ids=np.r_[segmentation.segment_ids, 4343],
                                                categories=np.r_[segmentation.categories, 0]),
     "segment id 4343 has no pixel in the segment map"),
    (lambda segmentation: segmentation._replace(void_id_segment=4343), "void_id_segment 4343 is not a listed"),
])
def test_a_bad_panoptic_argument_is_one_line_naming_image_and_field(first, change, problem):
    folder, _ = first
    evaluator = sgeval.Evaluator(pq_config(folder))
    image_id, pan, arguments = next(images(folder))
    with pytest.raises(sgeval.SGEvalError) as info:
        evaluator.update(image_id, **arguments,
                         panoptic=change(segmentation(pan, len(evaluator.gt.object_classes))))
    assert info.value.problems == [info.value.problems[0]] and problem in info.value.problems[0], info.value.problems
    assert info.value.problems[0].startswith(f"Evaluator.update: image {image_id}: field 'panoptic")


def test_pq_rule_is_a_named_choice_of_config_and_command_line(first, tmp_path):
    folder, record = first
    with pytest.raises(sgeval.SGEvalError) as info:
        sgeval.make_config({"gt": "g.json", "gt_seg": "p", "pq": True, "pq_rule": "mmdet"})
    assert info.value.problems == ["config: pq_rule 'mmdet' is not one of panopticapi, openpsg"]
    pred = sgeval.write_predictions(tmp_path / "pred.zip", [record])
    from click.testing import CliRunner
    ran = CliRunner().invoke(sgeval.main, ["--gt", str(folder / "psg.json"), "--gt-seg", str(folder / "panoptic"),
                                           "--pred", pred, "--pq", "--pq-rule", "openpsg", "--no-gt-cache", "--quiet",
                                           "--k", "20"])
    assert ran.exit_code == 0, ran.output
    assert "panoptic quality (openpsg; panoptic; merge none)" in ran.stdout


def test_images_scored_on_their_segmentation_or_their_masks_add_up_and_say_so(first):
    """A run where half the images give only a panoptic segmentation (no instances) and the others
    only masks (first-wins): source 'mixed', and its counts are the two halves' counts added."""
    folder, _ = first
    items = list(images(folder))
    half = len(items) // 2
    runs = {name: sgeval.Evaluator(pq_config(folder, pq_merge="first-wins")) for name in ("mixed", "panoptic", "masks")}
    void = len(runs["mixed"].gt.object_classes)
    for index, (image_id, pan, arguments) in enumerate(items):
        if index < half:
            update = {"labels": [], "triplets": np.zeros((0, 3), np.int64), "panoptic": segmentation(pan, void)}
        else:
            update = arguments
        for name in ("mixed", "panoptic" if index < half else "masks"):
            runs[name].update(image_id, **update)
    mixed = runs["mixed"].compute()["panoptic_quality"]
    assert mixed["source"] == "mixed" and mixed["images_by_source"] == {"none": 0, "panoptic": half,
                                                                        "masks": len(items) - half}
    parts = [runs[name].compute(missing="skip")["panoptic_quality"]["per_category"] for name in ("panoptic", "masks")]
    for name, values in mixed["per_category"].items():
        assert [values[key] for key in ("TP", "FP", "FN")] == [
            sum(part.get(name, {}).get(key, 0) for part in parts) for key in ("TP", "FP", "FN")], name
    assert sgeval.Evaluator(pq_config(folder)).compute()["panoptic_quality"]["source"] == "none"


def test_hand_fixture_of_the_id_0_void_collision(tmp_path):
    """3 x 4 pixels: GT person on row 0, VOID row 1, GT dog row 2 (a relation between them).
    pan_results: person instance 0 (value 0) on row 0's first two pixels, VOID (value 5: the GT has
    5 classes) on the rest of rows 0 and 1, dog instance 1 (1002) on row 2.

    panopticapi: the person segment has 2 pixels, shares 2 with the GT person (area 4), none on
    VOID: union 4, IoU 0.5, not a match (it needs more): person TP 0, FP 1, FN 1, PQ 0; dog IoU 1.
    PQ = (0 + 1) / 2. OpenPSG: the 6 VOID pixels join value 0, 8 pixels, sharing 4 with the person
    and 4 with VOID: union 8 + 4 - 4 - 4 = 4, IoU 1, a match; PQ = (1 + 1) / 2."""
    from conftest import gt_image, write_case
    person, dog = np.zeros((3, 4), bool), np.zeros((3, 4), bool)
    person[0], dog[2] = True, True
    pan = np.full((3, 4), 5)
    pan[0, :2], pan[2] = 0, 1002
    record = {"id": "1", "instances": [], "triplets": [],
              "panoptic": {"segments": [{"id": 1, "category": 0}, {"id": 1003, "category": 2}], "void_id_segment": 1,
                           "segment_map": np.where(pan == 5, 0, pan + 1)}}
    values = write_case(tmp_path, [gt_image(1, [person, dog], [0, 2], [[0, 1, 2]])], [record])
    expected = {"panopticapi": (0.5, {"person": [0, 1, 1], "dog": [1, 0, 0]}),
                "openpsg": (1.0, {"person": [1, 0, 0], "dog": [1, 0, 0]})}
    for rule, (pq, counts) in expected.items():
        base = {**values, "pq": True, "pq_rule": rule, "gt_cache": False}
        evaluator = sgeval.Evaluator({key: value for key, value in base.items() if key != "pred"})
        evaluator.update("1", labels=[], triplets=np.zeros((0, 3), np.int64),
                         panoptic=sgeval.PanopticSegmentation(pan, [0, 1002], [0, 2], void_id_segment=0))
        for results in (sgeval.evaluate(base), evaluator.compute()):
            section = results["panoptic_quality"]
            assert results["metrics"]["PQ"] == pq and section["All"]["n"] == 2, rule
            assert {name: [v["TP"], v["FP"], v["FN"]] for name, v in section["per_category"].items()} == counts
