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
from conftest import ROOT, cells, gt_image, pred_image, sgeval, synth, write_case

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
        "aggregation": "per_image", "per_predicate": False, "convert": None}
    assert results["metrics"]["R@20"] == pytest.approx(1 / 3, abs=1e-15)
    assert results["metrics"]["InstR"] == 1.0
    assert results["images"] == {"evaluated": 1, "missing_predictions": 0, "skipped_no_relations": 0,
                                 "extra_predictions": 0}
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
        "convert": None}
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


def test_import_and_help_compile_no_numba_kernel():
    code = (
        "import numba, sgeval\n"
        "from click.testing import CliRunner\n"
        "result = CliRunner().invoke(sgeval.main, ['--help'])\n"
        "assert result.exit_code == 0, result.output\n"
        "kernels = [v for v in vars(sgeval).values() if isinstance(v, numba.core.dispatcher.Dispatcher)]\n"
        "print(len(kernels), sum(len(k.signatures) for k in kernels), len(sgeval.mask_iou.signatures))\n"
    )
    env = {**os.environ, "SGEVAL_NO_JIT_CACHE": "1"}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    n_kernels, n_signatures, n_mask_iou = map(int, done.stdout.split())
    assert n_kernels >= 5 and n_signatures == 0 and n_mask_iou == 0


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
