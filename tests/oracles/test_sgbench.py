"""sgeval's ``multimpo`` protocol against the SGBench 1.0 package on random datasets.

sgbench==1.0.0 is a test-only dependency (installed by ``make setup`` with --no-deps; sgeval.py
never imports it). Where the two tools define a metric the same way, R@k, mR@k and InstR must
agree to 1e-12; where SGBench 1.0 deviates (README, "How sgeval's numbers differ from SGBench 1.0
and OpenPSG"), the difference itself is asserted:

* an evaluated image without a prediction record is ignored by SGBench's mR@k (NaN, then
  ``nanmean``), while sgeval counts it with zero hits;
* a predicate absent from the evaluated GT makes SGBench's mR@k NaN, while sgeval leaves it out.

SGBench 1.0 reads what ``sgeval.write_predictions`` writes, except that it wants the instance
list under ``annotation`` and cannot read a record without instances (mask mode needs a TIFF for
every record; box mode fails on an empty box array), so the files are adapted for it below.
"""

import json
import math
import zipfile
from pathlib import Path

import numpy as np
import pytest
from conftest import sgeval, synth
from sgbench.file import evaluate as sgbench_evaluate

KS = ("20", "50", "100")  # the cut-offs SGBench 1.0 reports
SEEDS = range(4)
TOL = 1e-12


@pytest.fixture(params=["mask", "box"])
def mode(request):
    return request.param


def make_case(seed, mode, predicate_weights=None, p_empty=0.0):
    """A random dataset and a simulated prediction for every test image (none missing); with
    p_empty, some records have no triplets or no instances (the latter get a stray instance)."""
    rng = np.random.default_rng(seed)
    height, width = int(rng.integers(12, 33)), int(rng.integers(12, 33))
    dataset = synth.make_dataset(rng, 25, height, width, 3, 2, 5, predicate_weights=predicate_weights)
    predictions = synth.simulate_predictions(rng, dataset, with_masks=mode == "mask", p_missing=0,
                                             p_empty=p_empty, n_spurious=60)
    for record in predictions:
        if not record["instances"]:  # SGBench cannot read such a record: give it one stray instance
            record.update(instances=[{"category": 0, "bbox": [0.0, 0.0, 1.0, 1.0], "score": 0.1}],
                          triplets=[], ng_triplets=[])
            if mode == "mask":
                record["masks"] = np.zeros((1, height, width), bool)
                record["masks"][0, 0, 0] = True
    return dataset, predictions


def sgbench_spelling(pred_path, out_path):
    """Copy a prediction written by sgeval, renaming ``instances`` to ``annotation``."""

    def respell(payload):
        data = json.loads(payload)
        for record in data["images"]:
            record["annotation"] = record.pop("instances")
        return json.dumps(data)

    if str(pred_path).endswith(".json"):
        Path(out_path).write_text(respell(Path(pred_path).read_text()))
        return str(out_path)
    with zipfile.ZipFile(pred_path) as source, zipfile.ZipFile(out_path, "w") as target:
        for name in source.namelist():
            payload = source.read(name)
            target.writestr(name, respell(payload) if name == "triplets.json" else payload)
    return str(out_path)


def write_case(tmp_path, dataset, predictions, mode):
    """Write GT and predictions; returns (sgeval config values, SGBench prediction path)."""
    gt = synth.write_gt(dataset, tmp_path / "gt")
    pred = sgeval.write_predictions(tmp_path / ("pred.zip" if mode == "mask" else "pred.json"),
                                    predictions)
    values = {"gt": str(gt), "pred": str(pred), "k": list(KS)}
    if mode == "mask":
        values["gt_seg"] = str(tmp_path / "gt" / "panoptic")
    sgbench_pred = sgbench_spelling(pred, tmp_path / ("sgbench.zip" if mode == "mask" else "sgbench.json"))
    return values, sgbench_pred


def run_sgeval(values, **config):
    return sgeval.evaluate(sgeval.make_config({**values, "protocol": "multimpo", **config}))


def run_sgbench(values, sgbench_pred):
    out = sgbench_evaluate(values["gt"], sgbench_pred, gt_seg_dir=values.get("gt_seg"), workers=0)
    return {key: float(value) for key, value in out.items()}


def close(a, b):
    return a is not None and b is not None and math.isclose(a, b, rel_tol=0, abs_tol=TOL)


def assert_r_and_instr_agree(ours, theirs, where):
    for key in [f"R@{k}" for k in KS] + ["InstR"]:
        assert close(ours["metrics"][key], theirs[key]), (where, key, ours["metrics"][key], theirs[key])


def evaluated_images(dataset):
    return [im for im in dataset["images"] if im["split"] == "test" and im["relations"]]


def test_multimpo_agrees_with_sgbench(tmp_path, mode):
    mr_compared, unique_differs, k_matters = 0, 0, 0
    for seed in SEEDS:
        where = f"{mode} seed {seed}"
        dataset, predictions = make_case(seed, mode, p_empty=0.1 if seed % 2 else 0.0)
        values, sgbench_pred = write_case(tmp_path / str(seed), dataset, predictions, mode)
        ours, theirs = run_sgeval(values), run_sgbench(values, sgbench_pred)
        assert ours["images"]["missing_predictions"] == 0, where
        assert ours["protocol_audit"]["repeated_triplets"] > 0, where  # exact dedup is exercised
        assert_r_and_instr_agree(ours, theirs, where)
        for k in KS:
            key = f"mR@{k}"
            if ours["absent_predicates"]:  # SGBench's documented NaN (see the test below)
                assert math.isnan(theirs[key]), (where, key)
            else:
                assert close(ours["metrics"][key], theirs[key]), (where, key, ours["metrics"][key], theirs[key])
        mr_compared += not ours["absent_predicates"]
        k_matters += ours["metrics"]["R@20"] < ours["metrics"]["R@100"]
        unique = sgeval.evaluate(sgeval.make_config(values))["metrics"]  # default protocol
        unique_differs += any(not close(unique[f"R@{k}"], ours["metrics"][f"R@{k}"]) for k in KS)
        if seed == SEEDS[0]:  # sgeval reads the SGBench spelling ('annotation') the same way
            assert run_sgeval({**values, "pred": sgbench_pred})["metrics"] == ours["metrics"], where
    assert mr_compared >= 1, "no seed had every predicate in the evaluated GT; mR@k never compared"
    assert unique_differs >= 1, "duplicate predictions never changed R@k between unique and multimpo"
    assert k_matters >= 1, "R@20 == R@100 on every seed; the cut-offs were never exercised"


def test_missing_image_is_ignored_by_sgbench_mr(tmp_path, mode):
    dataset, predictions = make_case(7, mode)
    evaluated = evaluated_images(dataset)

    def predicates(im):
        return {p for _, _, p in im["relations"]}

    # Leave out an image whose predicates all occur in other evaluated images, so SGBench's mR
    # stays finite (a predicate held only by the missing image would make it NaN as well).
    dropped = next(im["image_id"] for im in evaluated
                   if predicates(im) <= set().union(*(predicates(o) for o in evaluated if o is not im)))
    predictions = [p for p in predictions if p["id"] != dropped]
    values, sgbench_pred = write_case(tmp_path, dataset, predictions, mode)
    ours, theirs = run_sgeval(values), run_sgbench(values, sgbench_pred)
    assert ours["images"]["missing_predictions"] == 1 and not ours["absent_predicates"]

    # R@k and InstR: both count the missing image with zero hits.
    assert_r_and_instr_agree(ours, theirs, mode)

    # mR@k: SGBench's value is sgeval's value on the GT without that image ...
    psg = json.loads(Path(values["gt"]).read_text())
    psg["test_image_ids"].remove(dropped)
    without = Path(values["gt"]).with_name("psg_without_dropped.json")
    without.write_text(json.dumps(psg))
    ours_without = run_sgeval({**values, "gt": str(without)})
    assert ours_without["images"]["missing_predictions"] == 0
    for k in KS:
        key = f"mR@{k}"
        assert close(theirs[key], ours_without["metrics"][key]), (key, theirs[key], ours_without["metrics"][key])
        # ... and not sgeval's, which counts the image with zero hits for its predicates.
        assert ours["metrics"][key] < theirs[key] - 1e-6, (key, ours["metrics"][key], theirs[key])


@pytest.mark.filterwarnings("ignore:Mean of empty slice:RuntimeWarning")  # SGBench's NaN mR
def test_absent_predicate_makes_sgbench_mr_nan(tmp_path, mode):
    dataset, predictions = make_case(3, mode, predicate_weights=[1, 1, 1, 1, 0])  # pred4 never in GT
    values, sgbench_pred = write_case(tmp_path, dataset, predictions, mode)
    ours, theirs = run_sgeval(values), run_sgbench(values, sgbench_pred)
    assert ours["absent_predicates"] == ["pred4"] and ours["images"]["missing_predictions"] == 0
    assert any(p == 4 for record in predictions for _, _, p in record["triplets"])  # predicted anyway
    assert_r_and_instr_agree(ours, theirs, mode)
    skip = run_sgeval(values, absent_predicates="skip")["metrics"]
    zero = run_sgeval(values, absent_predicates="zero")["metrics"]
    for k in KS:
        key = f"mR@{k}"
        assert math.isnan(theirs[key]), (key, theirs[key])
        assert ours["metrics"][key] is not None and 0 < ours["metrics"][key] < 1, key
        assert ours["metrics"][key] == skip[key]  # the default leaves the absent predicate out
        assert close(zero[key], skip[key] * 4 / 5), key  # OpenPSG rule: the absent predicate counts 0
