"""docs/panoptic-quality.md's table of the demo's PQ under each merge rule holds what sgeval computes
(rounded as shown), and the demo's masks need a merge rule."""

import re

import pytest

from conftest import ROOT, sgeval

DOC = ROOT / "docs" / "panoptic-quality.md"
MODELS = {"Model A": "pred.zip", "Model B": "pred-b.zip"}


def doc_rows():
    """{(model, rule): [cells after the rule]} of the table between the pq-merge-table markers."""
    text = DOC.read_text()
    table = text.split("<!-- pq-merge-table -->", 1)[1].split("<!-- /pq-merge-table -->", 1)[0]
    rows = [[cell.strip().strip("`") for cell in line.strip().strip("|").split("|")]
            for line in table.strip().splitlines()[2:]]
    return {(row[0], row[1]): row[2:] for row in rows}


def shown(results):
    quality, metrics = results["panoptic_quality"], results["metrics"]
    values = [metrics[key] for key in ("PQ", "SQ", "RQ", "PQ_th", "PQ_st")]
    return [f"{100 * value:.1f}" for value in values] + [str(quality["All"]["n"])] + \
        [f"{100 * metrics[key]:.1f}" for key in ("R@inf", "mR@inf")]


def test_the_merge_rule_table_holds_the_demos_numbers(demo_data, tmp_path):
    rows = doc_rows()
    assert sorted(rows) == sorted((model, rule) for model in MODELS for rule in ("score-order", "first-wins"))
    for (model, rule), cells in rows.items():
        config = sgeval.load_config(ROOT / "configs" / "demo.yaml", gt=str(demo_data / "psg.json"),
                                    gt_seg=str(demo_data / "panoptic"), pred=str(demo_data / MODELS[model]),
                                    pq_merge=rule, output=str(tmp_path / "results.json"), metrics=["R", "Rinf"])
        results = sgeval.evaluate(config)
        assert results["panoptic_quality"]["merge"] == rule
        assert cells == shown(results), (model, rule)


def test_the_demos_masks_overlap(demo_data, tmp_path):
    config = sgeval.load_config(ROOT / "configs" / "demo.yaml", gt=str(demo_data / "psg.json"),
                                gt_seg=str(demo_data / "panoptic"), pred=str(demo_data / "pred.zip"), pq_merge="none",
                                output=str(tmp_path / "results.json"))
    with pytest.raises(sgeval.SGEvalError) as error:
        sgeval.evaluate(config)
    assert error.value.problems and all(re.search(r"image \S+: the masks overlap", line)
                                        for line in error.value.problems if "more problems" not in line)
