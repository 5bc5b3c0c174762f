"""sgeval's ``openpsg`` protocol against OpenPSG's own numbers, on two generated datasets.

tests/data/openpsg/one-stage-0.zip (PSGTR-like raw results: complete layout, repeated queries,
self-pairs, images with zero rows) and two-stage-0.zip (IMP-like: all ordered pairs, the [[0, 0]]
placeholder, results without detections) each hold a synthetic GT (psg.json, panoptic/), raw
OpenPSG results (raw/0.npz ...; raw_summary.json counts their special cases) and what OpenPSG's
sgdet evaluation, run unmodified at commit 34b2a89, gives for them: openpsg_pan_seg.json and
openpsg_bbox.json. They are written by ``make check-openpsg OPENPSG=<OpenPSG checkout>``
(tools/openpsg_check/make_fixtures.py; its README says what the data exercise).

Each raw/ is converted with ``sgeval convert openpsg`` and evaluated with sgeval's ``openpsg``
protocol in mask mode (gt_seg given: OpenPSG's pan_seg) and box mode (bbox). Checked: R@k and mR@k,
and in box mode ngR@k and mNgR@k (OpenPSG has no-graph-constraint recall in bbox mode only), equal to
1e-12; the images scored (evaluated - images_left_out) as many as OpenPSG recorded; and every image's
R@20/50/100 equal, read from sgeval's per-image file (per_image).
"""

import json
import subprocess
import sys

import numpy as np
import pytest
from conftest import ROOT, sgeval, unpacked

DATA = ROOT / "tests" / "data" / "openpsg"
KS = ("20", "50", "100")
MODES = {"mask": "pan_seg", "box": "bbox"}  # sgeval mode: OpenPSG's detection_method


@pytest.fixture(scope="module", params=["one-stage-0", "two-stage-0"])
def case(request, tmp_path_factory):
    """The fixture extracted, and raw/ converted to pred.zip by the converter's command line."""
    folder = unpacked(DATA / f"{request.param}.zip", tmp_path_factory)
    subprocess.run([sys.executable, "sgeval.py", "convert", "openpsg", "--quiet", "--gt", str(folder / "psg.json"),
                    str(folder / "raw"), str(folder / "pred.zip")], cwd=ROOT, check=True)
    return folder


def config(case, mode):
    return sgeval.make_config({"gt": str(case / "psg.json"), "pred": str(case / "pred.zip"),
                               "gt_seg": str(case / "panoptic") if mode == "mask" else None,
                               "protocol": "openpsg", "k": list(KS), "metrics": ["R", "mR", "ngR", "mNgR"],
                               "per_image": str(case / f"per_image_{mode}.jsonl")})


def per_image_recall(path):
    """{image id: [R@k for k in KS]} of the images the openpsg protocol scores, from a per_image file."""
    lines = [json.loads(line)["hits"]["openpsg"] | {"id": json.loads(line)["image_id"]}
             for line in path.read_text().splitlines()]
    return {hits["id"]: [hits[f"R@{k}"] / hits["gt_relations"] for k in KS] for hits in lines if hits["gt_relations"]}


@pytest.mark.parametrize("mode", list(MODES))
def test_sgeval_gives_openpsg_numbers(case, mode):
    openpsg = json.loads((case / f"openpsg_{MODES[mode]}.json").read_text())
    results = sgeval.evaluate(config(case, mode))
    families = ("R", "mR", "ngR", "mNgR") if mode == "box" else ("R", "mR")
    keys = [f"{family}@{k}" for family in families for k in KS]
    assert {key: results["metrics"][key] for key in keys} == pytest.approx({key: openpsg[key] for key in keys},
                                                                           abs=1e-12, rel=0)
    assert results["images"]["evaluated"] - results["images_left_out"] == openpsg["images_recorded"]
    recall = per_image_recall(case / f"per_image_{mode}.jsonl")
    assert list(recall) == list(openpsg["per_image_R"])
    assert np.array_equal(list(recall.values()), list(openpsg["per_image_R"].values()))
