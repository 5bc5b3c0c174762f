"""sgeval against the plain-Python reference (tests/reference.py) on random datasets."""

import math

import numpy as np
import pytest
from conftest import sgeval, synth
from reference import reference_evaluate

KS = ("1", "5", "20", "x0.5", "x1", "x3")


def random_case(tmp_path, seed, with_masks):
    rng = np.random.default_rng(seed)
    dataset = synth.make_dataset(rng, n_images=30, height=int(rng.integers(8, 30)),
                                 width=int(rng.integers(8, 30)), n_things=3, n_stuff=2, n_predicates=5)
    predictions = synth.simulate_predictions(rng, dataset, with_masks=with_masks, p_missing=0.1,
                                             p_empty=0.1)
    gt = synth.write_gt(dataset, tmp_path / "gt")
    pred = sgeval.write_predictions(tmp_path / ("pred.zip" if with_masks else "pred.json"), predictions)
    values = {"gt": str(gt), "pred": str(pred), "k": list(KS),
              "metrics": ["R", "mR", "ngR", "mNgR", "PR", "InstR", "Rinf", "PRank"]}
    if with_masks:
        values["gt_seg"] = str(tmp_path / "gt" / "panoptic")
    return dataset, predictions, values


def assert_close(fast, slow, where):
    assert fast.keys() == slow.keys(), where
    for key, value in slow.items():
        if value is None:
            assert fast[key] is None, (where, key)
        else:
            assert fast[key] is not None and math.isclose(fast[key], value, rel_tol=0, abs_tol=1e-12), \
                (where, key, fast[key], value)


@pytest.mark.parametrize("with_masks", [True, False], ids=["mask", "box"])
@pytest.mark.parametrize("seed", range(6))
def test_matches_reference(tmp_path, seed, with_masks):
    dataset, predictions, values = random_case(tmp_path, seed, with_masks)
    mode = "mask" if with_masks else "box"
    for protocol in ("unique", "multimpo"):
        for absent in ("skip", "zero"):
            where = f"seed {seed} {mode} {protocol} absent={absent}"
            config = sgeval.make_config({**values, "protocol": protocol, "absent_predicates": absent})
            fast = sgeval.evaluate(config)
            slow = reference_evaluate(dataset, predictions, mode=mode, ks=KS, protocol=protocol,
                                      absent_predicates=absent)
            assert fast["images"] == slow["images"], where
            assert fast["absent_predicates"] == slow["absent_predicates"], where
            assert_close(fast["metrics"], slow["metrics"], where)
            assert fast["per_predicate"].keys() == slow["per_predicate"].keys(), where
            for key in slow["per_predicate"]:
                assert_close(fast["per_predicate"][key], slow["per_predicate"][key], f"{where} {key}")


def test_random_cases_are_not_trivial(tmp_path):
    """The random data must exercise what the comparison is meant to catch."""
    dataset, predictions, values = random_case(tmp_path, 0, True)
    unique = sgeval.evaluate(sgeval.make_config(values))
    multi = sgeval.evaluate(sgeval.make_config({**values, "protocol": "multimpo"}))
    m = unique["metrics"]
    assert 0 < m["R@20"] < m["ngR@20"] < 1 and 0 < m["InstR"] < 1 and m["PRank"] > 0
    assert m["R@1"] < m["R@20"] and multi["metrics"]["R@20"] != m["R@20"]
    images = unique["images"]
    assert images["missing_predictions"] > 0 and images["extra_predictions"] > 0
    assert images["skipped_no_relations"] > 0
    audit = unique["protocol_audit"]
    assert audit["repeated_pairs"] > 0 and audit["repeated_triplets"] > 0 and audit["self_pairs"] > 0
