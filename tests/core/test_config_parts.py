"""A Config is three parts: its Inputs (the files), its Rules (what decides the numbers) and its
RunOptions (how the run goes, where the results go). The YAML keys are their fields, each in one
part; a run's options never change a number or the state's fingerprint; the evaluation core reads
the Rules."""

import dataclasses
import json
import re

import pytest
from conftest import ROOT, sgeval

PARTS = (sgeval.Inputs, sgeval.Rules, sgeval.RunOptions)
# The YAML keys and CLI options (the split into parts changed none of them).
KEYS = {"gt", "gt_seg", "pred", "train_gt", "zeroshot_triplets", "protocol", "protocols", "task", "k", "imr_k",
        "metrics", "iou_threshold", "wimr_tau", "predicate_groups", "absent_predicates", "aggregation",
        "per_predicate", "confusion_k", "audit", "workers", "gt_cache", "output", "per_image", "model", "subsets",
        "pq", "pq_merge", "pq_rule"}


def names(part):
    return [field.name for field in dataclasses.fields(part)]


def test_every_key_is_in_one_part_and_the_keys_are_as_before():
    in_parts = [name for part in PARTS for name in names(part)]
    assert sorted(in_parts) == sorted(set(in_parts)) == sorted(KEYS) == sorted(names(sgeval.Config))


def test_the_parts_of_a_config_carry_its_values(demo_data):
    config = sgeval.make_config({"gt": str(demo_data / "psg.json"), "pred": "p.zip", "k": [5, "x2"], "workers": 2,
                                 "output": "out.json", "pq": True, "gt_seg": str(demo_data / "panoptic")})
    assert config.rules == sgeval.Rules(**{name: getattr(config, name) for name in names(sgeval.Rules)})
    assert config.rules.k == ("5", "x2") and config.rules.pq is True
    assert config.options == sgeval.RunOptions(workers=2, output="out.json")
    assert config.inputs.pred == "p.zip" and config.inputs.mode == config.mode == "mask"
    assert sgeval.Config(gt="g").mode == "box"


def box_config(demo_data, **options):
    return sgeval.make_config({"gt": str(demo_data / "psg.json"), "pred": str(demo_data / "pred.zip"),
                               "protocols": list(sgeval.RECALL_PROTOCOLS), **options})


def test_run_options_change_no_number_and_no_fingerprint(demo_data, tmp_path):
    """Box mode on the demo (quick): the default run against one with every run option changed."""
    plain = box_config(demo_data)
    optioned = box_config(demo_data, workers=2, gt_cache=False, output=str(tmp_path / "r.json"),
                          per_image=str(tmp_path / "i.jsonl"), per_predicate=True, model="Model A")
    assert {name for name in names(sgeval.RunOptions) if getattr(plain, name) == getattr(optioned, name)} == set()
    assert plain.inputs == optioned.inputs and plain.rules == optioned.rules
    results = [json.loads(json.dumps(sgeval.evaluate(config))) for config in (plain, optioned)]
    for result in results:
        for name in names(sgeval.RunOptions):
            del result["config"][name]
    assert results[0] == results[1]
    assert sgeval.Evaluator(plain).fingerprint() == sgeval.Evaluator(optioned).fingerprint()


@pytest.mark.parametrize("name", ["k", "iou_threshold", "task", "protocols", "audit", "confusion_k"])
def test_the_rules_that_decide_the_counts_decide_the_fingerprint(demo_data, name):
    changed = {"k": ["20"], "iou_threshold": 0.75, "task": "sgcls", "protocols": ["openpsg"], "audit": False,
               "confusion_k": "20"}
    plain, other = box_config(demo_data), box_config(demo_data, **{name: changed[name]})
    assert sgeval.Evaluator(plain).fingerprint() != sgeval.Evaluator(other).fingerprint()


def test_the_core_reads_rules_not_options():
    """The functions that aggregate (build_results, per_image_lines, settings_of, _list_warnings)
    read only Rules fields of the config: an option or an input there would decide a number."""
    source = (ROOT / "sgeval.py").read_text()
    for start in ("def build_results(", "def per_image_lines(", "def settings_of(", "def _list_warnings("):
        body = source[source.index(start):source.index("\n\n\n", source.index(start))]
        read = set(re.findall(r"\b(?:config|rules)\.(\w+)", body)) - {"rules"}
        assert read and read <= set(names(sgeval.Rules)), (start, read - set(names(sgeval.Rules)))
