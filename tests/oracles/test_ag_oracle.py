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

And the fixtures decide the rules: the nearest other rule (IoU without the +1 pixel, IoU > 0.5,
repeated GT rows counted once, the semi list replaced by the with list, one mean-recall rule read
as the other; in the converter: spatial rows not reversed, no softmax of logits, attention rows
thresholded in semi, ranking by the predicate score alone) gives another number than the tools.
"""

import json
from pathlib import Path

import numpy as np
import pytest

from conftest import unpacked
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
    folder = unpacked(request.param, tmp_path_factory)
    ag.convert_gt(folder / "annotations", folder / "gt_predcls.json")
    ag.convert_gt(folder / "annotations", folder / "gt_filtered.json",
                  objects_file=folder / "dataloader" / "object_bbox_and_relationship_filtersmall.pkl")
    return folder


def converted(folder, task, tool):
    """(GT JSON, prediction ZIP) of a fixture's task as the tool's input converts (made once)."""
    kind, attention = TOOL_INPUT[tool]
    gt = folder / ("gt_predcls.json" if task == "predcls" else "gt_filtered.json")
    out = folder / f"{task}_{kind}.zip"
    if not out.exists():
        ag.convert(folder / f"pred_{task}_{kind}.pt", out, gt, task=task, attention=attention)
    return gt, out


def scored(folder, task, tool):
    return reference_ag.evaluate(*converted(folder, task, tool))


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


def differs(numbers, oracle, tool, rule=None):
    """Whether some R@K or mR@K (by rule, default the tool's) of the reference differs from the tool's
    at more than 1e-9."""
    rule = rule or {"tempura": "mR_tempura", "dsgdetr": "mR_dsgdetr"}.get(tool)
    for constraint in ("with", "semi", "no"):
        for k in reference_ag.KS:
            pairs = [(numbers[constraint]["R"][k], oracle[tool][constraint]["R"][str(k)])]
            if rule:
                pairs.append((numbers[constraint][rule][k], oracle[tool][constraint]["mR"][str(k)]))
            if any(abs(a - b) > TOLERANCE for a, b in pairs):
                return True
    return False


def iou_without_plus_one(a, b):
    iw, ih = min(a[2], b[2]) - max(a[0], b[0]), min(a[3], b[3]) - max(a[1], b[1])
    if iw <= 0 or ih <= 0:
        return 0.0
    return iw * ih / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - iw * ih)


REFERENCE_MUTANTS = {  # name: (task, tool, patch(monkeypatch), mean-recall rule read)
    "IoU without the +1 pixel": ("sgdet", "sttran", lambda mp: mp.setattr(reference_ag, "iou_plus_one",
                                                                          iou_without_plus_one), None),
    "IoU > 0.5 (an IoU of exactly 0.5 misses)": ("sgdet", "sttran", lambda mp: mp.setattr(
        reference_ag, "iou_plus_one", lambda a, b, f=reference_ag.iou_plus_one: f(a, b) - 1e-12 * (f(a, b) == 0.5)),
        None),
    "repeated GT rows counted once": ("predcls", "sttran", lambda mp: mp.setattr(
        reference_ag, "read_gt", lambda path, f=reference_ag.read_gt: (
            [(i, c, b, list(dict.fromkeys(r))) for i, c, b, r in f(path)[0]], f(path)[1])), None),
    "semi read as the with list": ("predcls", "sttran", lambda mp: mp.setattr(
        reference_ag, "LISTS", ("with", "with", "no")), None),
    "TEMPURA's mR by the per-frame rule": ("sgcls", "tempura", lambda mp: None, "mR_dsgdetr"),
    "DSG-DETR's mR by the pooled rule": ("sgdet", "dsgdetr", lambda mp: None, "mR_tempura"),
}


@pytest.mark.parametrize("name", list(REFERENCE_MUTANTS))
def test_the_fixtures_decide_each_rule(fixture_dir, monkeypatch, name):
    """The nearest other rule gives another number on the fixtures than the tools' code."""
    task, tool, patch, rule = REFERENCE_MUTANTS[name]
    oracle = json.loads((fixture_dir / f"oracle_{task}.json").read_text())
    scored(fixture_dir, task, tool)  # converted before the patch
    patch(monkeypatch)
    numbers, _ = scored(fixture_dir, task, tool)
    if reference_ag.LISTS == ("with", "with", "no"):
        numbers = {"with": numbers["with"], "semi": numbers["with"], "no": numbers["no"]}
    assert differs(numbers, oracle, tool, rule), name


def semi_by_threshold_only(scores):
    """The semi rule with the attention rows thresholded at 0.9 too (no argmax)."""
    return np.argwhere(scores > ag.SEMI_THRESHOLD)


CONVERTER_MUTANTS = {  # name: (task, tool, attribute of sgeval_convert.ag, replacement)
    "spatial rows not reversed": ("predcls", "sttran", "relation_rows", lambda fields, rows, attention, f=ag.relation_rows: (
        np.concatenate([fields["pairs"][rows]] * 3), f(fields, rows, attention)[1])),
    "no softmax of the attention logits": ("sgdet", "sttran", "attention_probabilities",
                                           lambda values, attention: values),
    "semi: attention rows thresholded too": ("predcls", "sttran", "semi_rows", semi_by_threshold_only),
    "ranked by the predicate score alone": ("sgcls", "sttran", "ranked", lambda pairs, predicates, scores, objects,
                                            f=ag.ranked: f(pairs, predicates, scores, np.ones_like(objects))),
}


@pytest.mark.parametrize("name", list(CONVERTER_MUTANTS))
def test_the_fixtures_decide_each_list_rule(fixture_dir, monkeypatch, name, tmp_path):
    task, tool, attribute, replacement = CONVERTER_MUTANTS[name]
    monkeypatch.setattr(ag, attribute, replacement)
    kind, attention = TOOL_INPUT[tool]
    gt = fixture_dir / ("gt_predcls.json" if task == "predcls" else "gt_filtered.json")
    ag.convert(fixture_dir / f"pred_{task}_{kind}.pt", tmp_path / "mutant.zip", gt, task=task, attention=attention)
    numbers, _ = reference_ag.evaluate(gt, tmp_path / "mutant.zip")
    assert differs(numbers, json.loads((fixture_dir / f"oracle_{task}.json").read_text()), tool), name
