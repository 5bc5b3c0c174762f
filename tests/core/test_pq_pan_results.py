"""The recipe of docs/panoptic-quality.md for OpenPSG's pan_results (sgeval does not read them itself):
each value of the map but VOID is a segment, given to Evaluator.update as sgeval.Panoptic(pan, ids) with
labels ids % 1000. On the generated data of tests/data/pq that gives panopticapi's numbers for the same
segmentation; OpenPSG's differ there, because its first image holds the id-0 / VOID collision."""

import json
import zipfile

import numpy as np
import pytest

from conftest import ROOT, sgeval

DATA = ROOT / "tests" / "data" / "pq"
INSTANCE_OFFSET = 1000  # a pan_results value is category + instance * INSTANCE_OFFSET


@pytest.fixture(scope="module", params=["pq-0", "pq-1"])
def case(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp(request.param)
    with zipfile.ZipFile(DATA / f"{request.param}.zip") as archive:
        archive.extractall(folder)
    return folder, json.loads((folder / "numbers.json").read_text())


def pan_results_pq(folder):
    psg = json.loads((folder / "psg.json").read_text())
    void = len(psg["thing_classes"]) + len(psg["stuff_classes"])
    evaluator = sgeval.Evaluator({"gt": str(folder / "psg.json"), "gt_seg": str(folder / "panoptic"), "pq": True,
                                  "gt_cache": False, "k": "20"})
    for image in evaluator.gt.images:
        pan = np.load(folder / "pan" / f"{image.image_id}.npy")
        values = np.unique(pan)
        ids = values[values % INSTANCE_OFFSET != void]
        evaluator.update(image.image_id, labels=ids % INSTANCE_OFFSET, triplets=np.zeros((0, 3), np.int64),
                         masks=sgeval.Panoptic(pan, ids))
    return evaluator.compute()


def test_pan_results_through_the_panoptic_form_give_panopticapis_numbers(case):
    folder, numbers = case
    results = pan_results_pq(folder)
    for name, suffix in (("All", ""), ("Things", "_th"), ("Stuff", "_st")):
        theirs = numbers["panopticapi"]["summary"][name]
        assert results["panoptic_quality"][name]["n"] == theirs["n"]
        for key in ("PQ", "SQ", "RQ"):
            assert results["metrics"][key + suffix] == pytest.approx(theirs[key.lower()], abs=1e-9, rel=0)
    openpsg = numbers["openpsg"]["returned"]
    assert any(abs(100 * results["metrics"][key] - openpsg[key]) > 1e-6 for key in sgeval.PQ_KEYS)
