"""The Open Images path end to end on generated files (tools/make_oi_demo.py): PySGG's annotations
-> sgeval_convert.openimages.convert_gt, its eval_results.pytorch -> sgeval_convert.openimages.convert
-> sgeval with configs/oiv6-demo.yaml (oi beside sgb and the fair protocols); every protocol's
numbers against the plain-Python reference."""

import pytest
from conftest import ROOT, sgeval

from tests.reference import reference_evaluate, reference_oi
from tests.core.test_reference import assert_close
from tests.convert.test_vg_demo import reference_inputs
from tools import make_oi_demo


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    paths = make_oi_demo.make_demo(tmp_path_factory.mktemp("oi"), seed=5, n_images=50)
    config = sgeval.load_config(ROOT / "configs" / "oiv6-demo.yaml", gt=str(paths["gt"]), pred=str(paths["pred"]))
    return paths, config, sgeval.evaluate(config)


def test_the_oi_demo_runs_every_step(demo):
    paths, config, results = demo
    assert results["config"]["protocol"] == "oi" and results["images"]["evaluated"] == 48  # 2 dropped as PySGG does
    metrics = results["metrics"]
    assert 0 < metrics["R@20"] < metrics["R@50"] < 1 and 0 < metrics["mR@50"] < 1
    assert 0 < metrics["wmAP_rel"] < metrics["wmAP_phr"] < 1 and 0 < metrics["score_wtd"] < 1
    assert set(results["by_protocol"]) == {"oi", "sgb", "unique", "singlempo", "multimpo"}
    assert results["by_protocol"]["oi"]["metrics"]["mR@50"] == results["by_protocol"]["sgb"]["metrics"]["mR@50"]


def test_the_oi_demo_numbers_equal_the_reference(demo):
    paths, config, results = demo
    dataset, predictions, _ = reference_inputs(paths, zeroshot=False)
    slow = reference_oi(dataset, predictions, config.k)
    oi = results["by_protocol"]["oi"]
    assert_close({key: oi["metrics"][key] for key in slow["metrics"]}, slow["metrics"], "oi")
    for key, values in slow["per_predicate"].items():
        assert_close(oi["per_predicate"][key], values, f"oi {key}")
    for protocol in config.protocols:
        slow = reference_evaluate(dataset, predictions, mode="box", ks=config.k, protocol=protocol,
                                  absent_predicates=config.absent_predicates, imr_ks=config.imr_k)
        fast = results["by_protocol"][protocol]["metrics"]
        assert_close(fast, {key: value for key, value in slow["metrics"].items() if key in fast}, protocol)
