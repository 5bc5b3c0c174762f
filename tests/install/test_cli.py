"""The command line: YAML config, option overrides, --help, workers, the real entry point."""

import dataclasses
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import yaml
from click.testing import CliRunner
from conftest import ROOT, cells, gt_image, pred_image, sgeval, synth, write_case, write_train_gt

# Objects: 0 person, 3 grass. Predicates: 0 riding, 1 on, 2 beside, 3 holding (absent from the GT).
A, B, C = cells(2, 8, (0, 0, 4)), cells(2, 8, (0, 4, 8)), cells(2, 8, (1, 0, 8))
C_PART = cells(2, 8, (1, 0, 6))  # IoU 6/8 = 0.75 with C (masks and tight boxes alike)
SPEC_KEYS = {"sgeval_version", "config", "images", "metrics", "per_predicate", "protocol_audit"}


def case(tmp_path):
    """G = {(0,2,riding), (1,2,on), (0,1,beside)}. Predictions 0 and 1 both cover A.

    unique:   pred 0 -> A, pred 1 unmatched, pred 2 -> C, pred 3 -> B; T hits only (0,2,riding):
              R = 1/3, mR = (1 + 0 + 0) / 3 (absent 'holding' counted as 0: 1/4).
    multimpo: pred 1 -> A as well, so (1,3,beside) -> (0,1,beside) hits too: R = 2/3.
    iou_threshold 0.8: pred 2 (IoU 0.75) is unmatched: R = 0.
    """
    images = [gt_image("101", [A, B, C], [0, 0, 3], [[0, 2, 0], [1, 2, 1], [0, 1, 2]])]
    preds = [pred_image("101", [A, A, C_PART, B], [0, 0, 3, 0], [[0, 2, 0], [1, 3, 2]])]
    return write_case(tmp_path, images, preds)


def write_yaml(path, values):
    path.write_text(yaml.safe_dump(values))
    return path


def invoke(*args):
    result = CliRunner().invoke(sgeval.main, [str(a) for a in args])
    assert result.exit_code == 0, (result.output, result.exception)
    return result


def run_yaml(tmp_path, yaml_values, *args):
    """Run `--config <yaml>` plus args; returns (CliRunner result, the --output JSON)."""
    config = write_yaml(tmp_path / "config.yaml", yaml_values)
    result = invoke("--quiet", "--config", config, *args)
    output = args[args.index("--output") + 1] if "--output" in args else yaml_values["output"]
    with open(output) as handle:
        return result, json.load(handle)


def base_yaml(tmp_path, **changes):
    values = {**case(tmp_path), "protocol": "unique", "k": [20], "metrics": ["R", "mR"],
              "iou_threshold": 0.5, "absent_predicates": "skip", "workers": 1,
              "output": str(tmp_path / "yaml_out.json")}
    return {**values, **changes}


def table_row(stdout, name):
    rows = [line for line in stdout.splitlines() if line.startswith(f"{name} ")]
    assert len(rows) == 1, stdout
    return rows[0].split()[1:]


# --------------------------------------------------------------------------------- config file


def test_yaml_config_run_prints_the_table_and_writes_the_json(tmp_path):
    values = case(tmp_path)
    output = tmp_path / "out" / "results.json"
    config = write_yaml(tmp_path / "demo.yaml", {**values, "protocol": "unique", "k": [1, 20, "x1"],
                                                 "metrics": ["R", "mR", "PR", "InstR"], "workers": 1,
                                                 "output": str(output)})
    result = invoke("--config", config)
    assert "Traceback" not in result.output
    assert table_row(result.stdout, "R") == ["33.3", "33.3", "33.3"]  # percent, one decimal
    assert table_row(result.stdout, "mR") == ["33.3", "33.3", "33.3"]
    assert "evaluating" not in result.stdout  # progress goes to stderr
    assert str(output) in result.stderr
    results = json.loads(output.read_text())
    assert SPEC_KEYS <= results.keys()
    assert results["config"] == {
        "gt": values["gt"], "gt_seg": values["gt_seg"], "pred": values["pred"], "protocol": "unique",
        "k": ["1", "20", "x1"], "metrics": ["R", "mR", "PR", "InstR"], "iou_threshold": 0.5,
        "absent_predicates": "skip", "workers": 1, "output": str(output), "train_gt": None,
        "zeroshot_triplets": None, "protocols": [], "imr_k": ["10", "20", "50"], "wimr_tau": 0.5,
        "aggregation": "per_image", "per_predicate": False, "audit": True, "task": "sgdet",
        "predicate_groups": None, "confusion_k": "50", "per_image": None, "model": None, "gt_cache": None,
        "subsets": [], "pq": False, "pq_merge": "none", "pq_rule": "panopticapi"}
    assert results["metrics"]["R@20"] == pytest.approx(1 / 3, abs=1e-15)
    assert results["metrics"]["InstR"] == 1.0
    assert results["images"] == {"evaluated": 1, "missing_predictions": 0, "skipped_no_relations": 0,
                                 "extra_predictions": 0, "scope": "all", "duplicate_updates": 0}
    assert results["per_predicate"]["mR@20"] == {"riding": 1.0, "on": 0.0, "beside": 0.0}
    assert results["sgeval_version"] == sgeval.__version__


def test_gt_option_overrides_yaml(tmp_path):
    values = base_yaml(tmp_path)
    _, results = run_yaml(tmp_path, {**values, "gt": str(tmp_path / "missing.json")}, "--gt", values["gt"])
    assert results["config"]["gt"] == values["gt"]


def test_pred_option_overrides_yaml(tmp_path):
    values = base_yaml(tmp_path)
    _, results = run_yaml(tmp_path, {**values, "pred": str(tmp_path / "missing.zip")}, "--pred", values["pred"])
    assert results["config"]["pred"] == values["pred"]


def test_gt_seg_option_switches_box_to_mask_mode(tmp_path):
    values = base_yaml(tmp_path)
    box_yaml = {key: value for key, value in values.items() if key != "gt_seg"}
    result, results = run_yaml(tmp_path, box_yaml)
    assert results["config"]["gt_seg"] is None and "box mode" in result.stdout
    result, results = run_yaml(tmp_path, box_yaml, "--gt-seg", values["gt_seg"])
    assert results["config"]["gt_seg"] == values["gt_seg"] and "mask mode" in result.stdout


def test_gt_seg_option_overrides_yaml_root(tmp_path):
    values = base_yaml(tmp_path)
    other = tmp_path / "other_panoptic"
    (tmp_path / "gt" / "panoptic").rename(other)
    _, results = run_yaml(tmp_path, values, "--gt-seg", other)  # the YAML root no longer exists
    assert results["config"]["gt_seg"] == str(other)
    assert results["metrics"]["R@20"] == pytest.approx(1 / 3, abs=1e-15)


def test_protocol_option_overrides_yaml(tmp_path):
    values = base_yaml(tmp_path)
    _, unique = run_yaml(tmp_path, values)
    result, multimpo = run_yaml(tmp_path, values, "--protocol", "multimpo")
    assert unique["metrics"]["R@20"] == pytest.approx(1 / 3, abs=1e-15)
    assert multimpo["metrics"]["R@20"] == pytest.approx(2 / 3, abs=1e-15)
    assert multimpo["config"]["protocol"] == "multimpo" and "protocol multimpo" in result.stdout
    assert table_row(result.stdout, "R") == ["66.7"]


def test_k_option_overrides_yaml(tmp_path):
    _, results = run_yaml(tmp_path, base_yaml(tmp_path), "--k", "1,x1")
    assert results["config"]["k"] == ["1", "x1"]
    assert set(results["metrics"]) == {"R@1", "R@x1", "mR@1", "mR@x1"}
    assert results["metrics"]["R@1"] == pytest.approx(1 / 3, abs=1e-15)


@pytest.mark.parametrize("option, keys", [("R", {"R@20"}), ("R,PR", {"R@20", "PR@20"}),
                                          ("InstR,Rinf", {"InstR", "R@inf", "mR@inf"})])
def test_metrics_option_overrides_yaml(tmp_path, option, keys):
    result, results = run_yaml(tmp_path, base_yaml(tmp_path), "--metrics", option)
    assert set(results["metrics"]) == keys
    assert results["config"]["metrics"] == option.split(",")
    if "mR@20" not in keys:
        assert not any(line.startswith("mR ") for line in result.stdout.splitlines())


def test_iou_threshold_option_overrides_yaml(tmp_path):
    _, results = run_yaml(tmp_path, base_yaml(tmp_path), "--iou-threshold", "0.8")
    assert results["config"]["iou_threshold"] == 0.8
    assert results["metrics"]["R@20"] == 0.0  # C_PART (IoU 0.75) no longer matches


def test_absent_predicates_option_overrides_yaml(tmp_path):
    values = base_yaml(tmp_path)
    _, skip = run_yaml(tmp_path, values)
    _, zero = run_yaml(tmp_path, values, "--absent-predicates", "zero")
    assert skip["metrics"]["mR@20"] == pytest.approx(1 / 3, abs=1e-15)
    assert zero["metrics"]["mR@20"] == pytest.approx(1 / 4, abs=1e-15)  # 'holding' counted as 0
    assert zero["config"]["absent_predicates"] == "zero"


def test_workers_option_overrides_yaml(tmp_path):
    values = base_yaml(tmp_path)
    _, one = run_yaml(tmp_path, values)
    _, two = run_yaml(tmp_path, values, "--workers", "2")
    assert (one["config"]["workers"], two["config"]["workers"]) == (1, 2)
    assert two["metrics"] == one["metrics"]


def test_output_option_overrides_yaml(tmp_path):
    values = base_yaml(tmp_path)
    other = tmp_path / "elsewhere" / "results.json"
    result, results = run_yaml(tmp_path, values, "--output", other)
    assert results["config"]["output"] == str(other)
    assert not os.path.exists(values["output"])
    assert str(other) in result.stderr


def test_options_without_a_config_file(tmp_path):
    values = case(tmp_path)
    result = invoke("--quiet", "--gt", values["gt"], "--pred", values["pred"], "--gt-seg", values["gt_seg"],
                    "--k", "20")
    assert table_row(result.stdout, "R") == ["33.3"]


# --------------------------------------------------------------------------------- newer keys
# Objects 0 person, 1 horse, 2 dog; predicates 0 riding, 1 on (2 beside, 3 holding absent).
STRIP = [cells(1, 8, (0, 0, 2)), cells(1, 8, (0, 2, 4)), cells(1, 8, (0, 4, 6))]


def two_image_case(tmp_path):
    """Image 1: G = {(0,1,riding)}, T = [(0,1,riding)]: 1/1.  Image 2: G = {(0,1,riding),
    (0,2,riding), (1,2,on)}, T = [(0,2,riding)]: 1/3.  Training image 3: (person, horse, riding),
    (dog, horse, riding), (horse, dog, on).

    R@20: per image (1 + 1/3) / 2 = 2/3, pooled 2/4.  mR@20: riding (1 + 1/2) / 2, on 0 -> 3/8;
    pooled riding 2/3, on 0 -> 1/3.
    Zero-shot (training of the GT file): only (person, dog, riding) of image 2, found: zR@20 = 1.
    IMR@1 (NG = T): as mR, 3/8; image 2 lists no 'on' triplet (short for every k), image 1 one
    'riding' triplet (short for k >= 2).  wIMR (n_riding = 2, n_on = 1): tau 0.5 -> 3/4 * w_riding
    = 3/4 * sqrt2 / (1 + sqrt2); tau 0 -> 3/8, IMR.
    """
    images = [gt_image("1", STRIP, [0, 1, 2], [[0, 1, 0]]),
              gt_image("2", STRIP, [0, 1, 2], [[0, 1, 0], [0, 2, 0], [1, 2, 1]]),
              gt_image("3", STRIP, [0, 1, 2], [[0, 1, 0], [2, 1, 0], [1, 2, 1]], split="train")]
    preds = [pred_image("1", STRIP, [0, 1, 2], [[0, 1, 0]]), pred_image("2", STRIP, [0, 1, 2], [[0, 2, 0]])]
    return write_case(tmp_path, images, preds)


def two_image_yaml(tmp_path, **changes):
    values = {**two_image_case(tmp_path), "k": [20], "imr_k": [1], "metrics": ["R", "mR", "zR", "IMR", "wIMR"],
              "output": str(tmp_path / "yaml_out.json")}
    return {**values, **changes}


WIMR_HALF = 0.75 * 2**0.5 / (1 + 2**0.5)  # wIMR@1 of two_image_case with tau 0.5


def comparison(stdout):
    """The protocol comparison grid: (column names, {metric key: cells})."""
    lines = stdout.splitlines()
    start = lines.index("protocol comparison (same predictions, same GT):")
    rows = {}
    for line in lines[start + 2:]:
        if not line.startswith(("R@", "mR@", "ngR@", "mNgR@", "PR@", "InstR", "zR@", "IMR@", "wIMR@")):
            break
        rows[line.split()[0]] = line.split()[1:]
    return lines[start + 1].split(), rows


def test_two_image_case_defaults(tmp_path):
    result, results = run_yaml(tmp_path, two_image_yaml(tmp_path))
    m = results["metrics"]
    assert (m["R@20"], m["mR@20"], m["zR@20"], m["IMR@1"]) == (pytest.approx(2 / 3, abs=1e-15), 0.375, 1.0, 0.375)
    assert m["wIMR@1"] == pytest.approx(WIMR_HALF, abs=1e-15)
    assert "by_protocol" not in results and "protocol comparison" not in result.stdout
    assert "per predicate:" not in result.stdout
    assert results["gt_relations_per_predicate"] == {"riding": 3, "on": 1}


def test_train_gt_option_overrides_yaml(tmp_path):
    values = two_image_yaml(tmp_path, train_gt=str(tmp_path / "missing.json"))
    other = write_train_gt(tmp_path / "other.json", [([0, 2], [[0, 1, 0]])])  # only (person, dog, riding)
    result, results = run_yaml(tmp_path, values, "--train-gt", other)
    assert results["config"]["train_gt"] == str(other)
    m = results["metrics"]
    # Zero-shot now: image 1 {(0,1,riding)} found; image 2 {(0,1,riding), (1,2,on)} missed.
    assert m["zR@20"] == 0.5 and table_row(result.stdout, "zR") == ["50.0"]
    assert m["wIMR@1"] == 0.75  # n_on = 0 in this training file: riding's IMR alone
    assert m["R@20"] == pytest.approx(2 / 3, abs=1e-15)  # only the training statistics changed


def test_zeroshot_triplets_option_overrides_yaml(tmp_path):
    values = two_image_yaml(tmp_path, zeroshot_triplets=str(tmp_path / "missing.csv"))
    listed = tmp_path / "zs.csv"
    listed.write_text("subject,object,predicate\n1,2,1\n")  # (horse, dog, on): image 2 only, missed
    result, results = run_yaml(tmp_path, values, "--zeroshot-triplets", listed)
    assert results["config"]["zeroshot_triplets"] == str(listed)
    assert results["metrics"]["zR@20"] == 0.0 and table_row(result.stdout, "zR") == ["0.0"]
    assert results["metrics"]["wIMR@1"] == pytest.approx(WIMR_HALF, abs=1e-15)  # weights still from training


def test_protocols_option_overrides_yaml_and_adds_a_protocol(tmp_path):
    values = base_yaml(tmp_path, protocols=["singlempo"])
    result, results = run_yaml(tmp_path, values, "--protocols", "multimpo")
    assert results["config"]["protocols"] == ["multimpo"]
    assert list(results["by_protocol"]) == ["unique", "multimpo"]
    assert results["metrics"] == results["by_protocol"]["unique"]["metrics"]  # the headline protocol
    assert results["by_protocol"]["multimpo"]["metrics"]["R@20"] == pytest.approx(2 / 3, abs=1e-15)
    columns, rows = comparison(result.stdout)
    assert columns == ["unique", "multimpo"] and rows["R@20"] == ["33.3", "66.7"]
    assert table_row(result.stdout, "R") == ["33.3"]  # the main table stays the headline protocol


def test_protocols_equal_to_the_headline_protocol_add_nothing(tmp_path):
    result, results = run_yaml(tmp_path, base_yaml(tmp_path), "--protocols", "unique")
    assert "by_protocol" not in results and "protocol comparison" not in result.stdout


def test_compare_protocols_flag_evaluates_all_five(tmp_path):
    values = base_yaml(tmp_path, protocols=["multimpo"])
    result, results = run_yaml(tmp_path, values, "--compare-protocols")
    assert results["config"]["protocols"] == list(sgeval.RECALL_PROTOCOLS)
    assert list(results["by_protocol"]) == ["unique", "singlempo", "multimpo", "openpsg", "sgb"]
    columns, rows = comparison(result.stdout)
    assert columns == ["unique", "singlempo", "multimpo", "openpsg", "sgb"]
    # singlempo (no scores, order of appearance): pred 1 joins pred 0's node, so (1,3,beside)
    # becomes (A, B, beside) and hits, as under multimpo, openpsg and sgb (pred 1 covers A too).
    assert rows["R@20"] == ["33.3", "66.7", "66.7", "66.7", "66.7"] and set(rows) == {"R@20", "mR@20"}
    assert [results["by_protocol"][p]["metrics"]["R@20"] for p in sgeval.RECALL_PROTOCOLS] == \
        pytest.approx([1 / 3, 2 / 3, 2 / 3, 2 / 3, 2 / 3], abs=1e-15)
    # openpsg and sgb bring their tools' rule for the absent 'holding' (0 of 4), the others skip it
    assert rows["mR@20"] == ["33.3", "66.7", "66.7", "50.0", "50.0"]
    assert results["by_protocol"]["openpsg"]["rules"] == {"absent_predicates": "zero", "aggregation": "per_image"}
    assert "openpsg: OpenPSG's rules: absent predicates count 0, per-image means; 0 images" in result.stdout


def test_compare_protocols_with_another_headline_protocol(tmp_path):
    result, results = run_yaml(tmp_path, base_yaml(tmp_path), "--compare-protocols", "--protocol", "multimpo")
    assert list(results["by_protocol"]) == ["multimpo", "unique", "singlempo", "openpsg", "sgb"]
    assert comparison(result.stdout)[0] == ["multimpo", "unique", "singlempo", "openpsg", "sgb"]
    assert table_row(result.stdout, "R") == ["66.7"]


def test_imr_k_option_overrides_yaml(tmp_path):
    result, results = run_yaml(tmp_path, two_image_yaml(tmp_path), "--imr-k", "1,2")
    assert results["config"]["imr_k"] == ["1", "2"]
    assert [key for key in results["metrics"] if "IMR" in key] == ["IMR@1", "IMR@2", "wIMR@1", "wIMR@2"]
    assert results["imr_short_images"] == {"1": 1, "2": 2}
    assert table_row(result.stdout, "IMR") == ["37.5", "37.5"]
    header = result.stdout.splitlines()[result.stdout.splitlines().index(
        next(line for line in result.stdout.splitlines() if line.startswith("IMR "))) - 1]
    assert header.split() == ["@1", "@2"]


def test_wimr_tau_option_overrides_yaml(tmp_path):
    values = two_image_yaml(tmp_path, wimr_tau=0.5)
    _, half = run_yaml(tmp_path, values)
    result, zero = run_yaml(tmp_path, values, "--wimr-tau", "0")
    assert half["metrics"]["wIMR@1"] == pytest.approx(WIMR_HALF, abs=1e-15) != half["metrics"]["IMR@1"]
    assert zero["config"]["wimr_tau"] == 0.0
    assert zero["metrics"]["wIMR@1"] == pytest.approx(zero["metrics"]["IMR@1"], abs=1e-15)
    assert table_row(result.stdout, "wIMR") == table_row(result.stdout, "IMR") == ["37.5"]


def test_aggregation_option_overrides_yaml(tmp_path):
    values = two_image_yaml(tmp_path, aggregation="per_image")
    _, per_image = run_yaml(tmp_path, values)
    result, pooled = run_yaml(tmp_path, values, "--aggregation", "pooled")
    assert per_image["metrics"]["R@20"] == pytest.approx(2 / 3, abs=1e-15)
    assert pooled["metrics"]["R@20"] == 0.5
    assert (per_image["metrics"]["mR@20"], pooled["metrics"]["mR@20"]) == (0.375, pytest.approx(1 / 3, abs=1e-15))
    assert pooled["config"]["aggregation"] == "pooled" and "pooled aggregation" in result.stdout
    assert table_row(result.stdout, "R") == ["50.0"] and table_row(result.stdout, "mR") == ["33.3"]


def per_predicate_table(stdout):
    lines = stdout.splitlines()
    start = lines.index("per predicate:")
    return lines[start + 1].split(), {line.split()[0]: line.split()[1:] for line in lines[start + 2:start + 4]}


def test_per_predicate_option_prints_the_table(tmp_path):
    result, results = run_yaml(tmp_path, two_image_yaml(tmp_path, per_predicate=False), "--per-predicate")
    assert results["config"]["per_predicate"] is True
    header, rows = per_predicate_table(result.stdout)
    assert header == ["GT", "mR@20", "IMR@1"]
    assert rows == {"riding": ["3", "75.0", "75.0"], "on": ["1", "0.0", "0.0"]}  # GT triplet counts
    assert "absent predicates (2, not in m-type means): beside, holding" in result.stdout


def test_per_predicate_yaml_key_and_no_per_predicate_override(tmp_path):
    values = two_image_yaml(tmp_path, per_predicate=True)
    result, _ = run_yaml(tmp_path, values)
    assert "per predicate:" in result.stdout
    result, results = run_yaml(tmp_path, values, "--no-per-predicate")
    assert results["config"]["per_predicate"] is False and "per predicate:" not in result.stdout
    assert "riding" not in result.stdout


def test_short_imr_lists_warn_on_stdout(tmp_path):
    result, results = run_yaml(tmp_path, two_image_yaml(tmp_path), "--imr-k", "1,2")
    warnings = [line for line in result.stdout.splitlines() if line.startswith("warning: ")]
    assert warnings == [f"warning: {text}" for text in results["warnings"]]
    assert len(warnings) == 2
    assert "IMR@1: 1 of 2 images" in warnings[0] and "IMR@2: 2 of 2 images" in warnings[1]
    assert "warning" not in result.stderr
    result, results = run_yaml(tmp_path, two_image_yaml(tmp_path), "--metrics", "R")
    assert results["warnings"] == [] and "warning" not in result.stdout  # no IMR, no warning


def test_help_lists_the_newer_options():
    result = invoke("--help")
    for option in ("--train-gt", "--zeroshot-triplets", "--protocols", "--compare-protocols", "--imr-k",
                   "--wimr-tau", "--aggregation", "--per-predicate", "--no-per-predicate"):
        assert option in result.output, option


# --------------------------------------------------------------------------------- load_config


def test_load_config_maps_yaml_keys_onto_the_frozen_dataclass(tmp_path):
    path = write_yaml(tmp_path / "c.yaml", {"gt": "g.json", "gt_seg": "pan", "pred": "p.zip",
                                            "protocol": "multimpo", "k": [20, "x10"], "metrics": ["R", "PRank"],
                                            "iou_threshold": 0.6, "absent_predicates": "zero", "workers": 3,
                                            "output": "out.json"})
    config = sgeval.load_config(path)
    assert isinstance(config, sgeval.Config)
    assert dataclasses.asdict(config) == {
        "gt": "g.json", "gt_seg": "pan", "pred": "p.zip", "protocol": "multimpo", "k": ("20", "x10"),
        "metrics": ("R", "PRank"), "iou_threshold": 0.6, "absent_predicates": "zero", "workers": 3,
        "output": "out.json", "train_gt": None, "zeroshot_triplets": None, "protocols": (),
        "imr_k": ("10", "20", "50"), "wimr_tau": 0.5, "aggregation": "per_image", "per_predicate": False,
        "audit": True, "task": "sgdet", "predicate_groups": None, "confusion_k": "50", "per_image": None,
        "model": None, "gt_cache": None, "subsets": (), "pq": False, "pq_merge": "none", "pq_rule": "panopticapi"}
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.workers = 1
    assert sgeval.load_config(path, protocol=None, k=None, gt_seg=None, workers=None) == config
    changed = sgeval.load_config(path, protocol="unique", k="1,x1", workers=2, gt="other.json")
    assert (changed.protocol, changed.k, changed.workers, changed.gt) == ("unique", ("1", "x1"), 2, "other.json")
    assert changed.pred == "p.zip"


def test_load_config_defaults_without_a_file():
    config = sgeval.load_config(gt="g.json", pred="p.json", output=None)
    defaults = sgeval.Config()
    assert (config.gt, config.pred, config.gt_seg, config.output) == ("g.json", "p.json", None, None)
    assert (config.protocol, config.k, config.metrics, config.workers) == \
        (defaults.protocol, defaults.k, defaults.metrics, defaults.workers)


def test_empty_yaml_file_is_an_empty_config(tmp_path):
    path = tmp_path / "empty.yaml"
    path.write_text("# nothing\n")
    assert sgeval.load_config(path, gt="g.json", pred="p.json") == sgeval.load_config(gt="g.json", pred="p.json")


@pytest.mark.parametrize("path", sorted((ROOT / "configs").glob("*.yaml")), ids=lambda p: p.name)
def test_repository_configs_load_with_every_key_valid(path):
    keys = yaml.safe_load(path.read_text()).keys()
    assert set(keys) <= {field.name for field in dataclasses.fields(sgeval.Config)}
    config = sgeval.load_config(path)
    assert config.gt and config.pred


def test_demo_config_is_among_them():
    config = sgeval.load_config(ROOT / "configs" / "demo.yaml")
    assert config.gt_seg is not None and config.k == ("20", "50", "100", "x1", "x10")


# --------------------------------------------------------------------------------- --help, import


def test_help_lists_the_options():
    for flag in ("--help", "-h"):
        result = invoke(flag)
        for option in ("--config", "--gt", "--gt-seg", "--pred", "--protocol", "--k", "--metrics",
                       "--iou-threshold", "--absent-predicates", "--workers", "--output", "--quiet"):
            assert option in result.output, option


def test_import_and_help_import_no_numba_and_compile_no_kernel():
    """Importing sgeval and its --help neither import numba nor compile a kernel; the first call of
    a kernel makes every kernel a numba dispatcher, and compiles only what runs."""
    code = (
        "import sys, numpy as np, sgeval\n"
        "from click.testing import CliRunner\n"
        "result = CliRunner().invoke(sgeval.main, ['--help'])\n"
        "assert result.exit_code == 0, result.output\n"
        "before = 'numba' in sys.modules, len(sgeval._KERNELS), type(sgeval.mask_iou).__name__\n"
        "sgeval.popcount64(np.uint64(6))\n"
        "import numba\n"
        "kernels = [v for v in vars(sgeval).values() if isinstance(v, numba.core.dispatcher.Dispatcher)]\n"
        "print(*before, len(kernels), len(sgeval.popcount64.signatures), len(sgeval.mask_iou.signatures))\n"
    )
    env = {**os.environ, "SGEVAL_NO_JIT_CACHE": "1"}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    imported, n_marked, kind, n_kernels, n_popcount, n_mask_iou = done.stdout.split()
    assert (imported, kind) == ("False", "_Kernel") and int(n_marked) >= 10
    assert int(n_kernels) == int(n_marked) and (n_popcount, n_mask_iou) == ("1", "0")


# --------------------------------------------------------------------------------- workers, entry point


def random_case(tmp_path, seed=7):
    rng = np.random.default_rng(seed)
    dataset = synth.make_dataset(rng, n_images=20, height=12, width=16, n_things=3, n_stuff=2, n_predicates=5)
    predictions = synth.simulate_predictions(rng, dataset, with_masks=True, p_missing=0.1, p_empty=0.1)
    gt = synth.write_gt(dataset, tmp_path / "gt")
    pred = sgeval.write_predictions(tmp_path / "pred.zip", predictions)
    return {"gt": str(gt), "gt_seg": str(tmp_path / "gt" / "panoptic"), "pred": str(pred)}


def test_two_workers_are_bit_identical_to_one(tmp_path):
    values = random_case(tmp_path)
    args = ["--quiet", "--gt", values["gt"], "--gt-seg", values["gt_seg"], "--pred", values["pred"],
            "--k", "1,5,20,x1,x3"]
    runs = {}
    for workers in (1, 2):
        output = tmp_path / f"w{workers}.json"
        invoke(*args, "--workers", workers, "--output", output)
        runs[workers] = json.loads(output.read_text())
    one, two = runs[1], runs[2]
    assert one["images"]["evaluated"] >= 8  # enough images for the pool to split the work
    assert any(value not in (None, 0.0) for value in one["metrics"].values())
    assert two["metrics"] == one["metrics"]
    assert two["per_predicate"] == one["per_predicate"]
    assert two["images"] == one["images"] and two["protocol_audit"] == one["protocol_audit"]
    assert (one["config"]["workers"], two["config"]["workers"]) == (1, 2)


def test_python_sgeval_py_entry_point(tmp_path):
    values = case(tmp_path)
    output = tmp_path / "results.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "sgeval.py"), "--quiet", "--gt", values["gt"], "--gt-seg", values["gt_seg"],
         "--pred", values["pred"], "--k", "20", "--output", str(output)],
        cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert table_row(done.stdout, "R") == ["33.3"]
    assert SPEC_KEYS <= json.loads(output.read_text()).keys()
    assert re.search(r"results written to .*results\.json", done.stderr)
