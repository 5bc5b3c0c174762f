"""The Action Genome converters and the plain-Python reference of STTran's evaluation
(tests/reference_ag.py), against the numbers of STTran's, TEMPURA's and DSG-DETR's own evaluation
code on generated AG data.

tests/data/ag/ag-<seed>.zip each hold the data in AG's layout (annotations/, the small-box-filtered
object file), the model outputs per video (pred_<task>_logits.pt for STTran and DSG-DETR, whose
evaluator applies the softmax; pred_<task>_probs.pt for TEMPURA) and what each tool's code, run
unmodified at its pinned commit, gives (oracle_<task>.json). They are written by
``make check-ag STTRAN=... TEMPURA=... DSGDETR=...`` (tools/ag_check/; its README lists every rule).

Checked, to 1e-9, in predcls, sgcls and sgdet: the evaluated frames; R@10/20/50/100 with, semi and
no constraint and the recall of every frame, for each tool; TEMPURA's and DSG-DETR's mR@K; after
``sgeval convert ag-gt`` (predcls: the annotations' object file; sgcls, sgdet: the filtered one) and
``sgeval convert ag`` (--attention logits for STTran's and DSG-DETR's input, probabilities for
TEMPURA's).
"""

import json
import zipfile
from pathlib import Path

import pytest

from sgeval_convert import ag
from tests import reference_ag

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = sorted((ROOT / "tests" / "data" / "ag").glob("ag-*.zip"))
TASKS = ("predcls", "sgcls", "sgdet")
TOOL_INPUT = {"sttran": ("logits", "logits"), "tempura": ("probs", "probabilities"),
              "dsgdetr": ("logits", "logits")}
TOLERANCE = 1e-9


@pytest.fixture(scope="module", params=FIXTURES, ids=lambda p: p.stem)
def fixture_dir(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp(request.param.stem)
    with zipfile.ZipFile(request.param) as archive:
        archive.extractall(folder)
    ag.convert_gt(folder / "annotations", folder / "gt_predcls.json")
    ag.convert_gt(folder / "annotations", folder / "gt_filtered.json",
                  objects_file=folder / "dataloader" / "object_bbox_and_relationship_filtersmall.pkl")
    return folder


def scored(folder, task, tool):
    kind, attention = TOOL_INPUT[tool]
    gt = folder / ("gt_predcls.json" if task == "predcls" else "gt_filtered.json")
    out = folder / f"{task}_{kind}.zip"
    if not out.exists():
        ag.convert(folder / f"pred_{task}_{kind}.pt", out, gt, task=task, attention=attention)
    return reference_ag.evaluate(gt, out)


def test_fixtures_exist():
    assert len(FIXTURES) >= 2


@pytest.mark.parametrize("task", TASKS)
def test_ag_numbers(fixture_dir, task):
    oracle = json.loads((fixture_dir / f"oracle_{task}.json").read_text())
    for tool in ("sttran", "tempura", "dsgdetr"):
        numbers, frames = scored(fixture_dir, task, tool)
        assert frames == oracle["frames"]
        for constraint in reference_ag.LISTS:
            expected, got = oracle[tool][constraint], numbers[constraint]
            for k in reference_ag.KS:
                where = f"{tool} {task} {constraint} R@{k}"
                assert got["R"][k] == pytest.approx(expected["R"][str(k)], abs=TOLERANCE), where
                assert [float(v) for v in got["per_frame"][k]] == pytest.approx(expected["per_frame"][str(k)],
                                                                                abs=TOLERANCE), where
                rule = {"tempura": "mR_tempura", "dsgdetr": "mR_dsgdetr"}.get(tool)
                if rule:
                    assert got[rule][k] == pytest.approx(expected["mR"][str(k)], abs=TOLERANCE), f"{where} mR"


def test_the_lists_decide(fixture_dir):
    """The three lists give different numbers on the fixtures, and the two mean-recall rules differ."""
    numbers, _ = scored(fixture_dir, "sgdet", "sttran")
    assert len({numbers[name]["R"][20] for name in reference_ag.LISTS}) == 3
    assert numbers["with"]["mR_tempura"][20] != pytest.approx(numbers["with"]["mR_dsgdetr"][20], abs=1e-6)
