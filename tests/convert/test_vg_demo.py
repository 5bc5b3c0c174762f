"""The Visual Genome path end to end on generated files (tools/make_vg_demo.py): SGB's h5 and json
-> sgeval_convert.vg150, zero-shot torch file -> sgeval_convert.zeroshot, eval_results.pytorch ->
sgeval_convert.sgb -> sgeval with configs/vg150-demo.yaml; the numbers against the plain-Python
reference."""

import json
import zipfile

import pytest
from conftest import ROOT, sgeval

from tests.reference import reference_evaluate
from tests.core.test_reference import assert_close
from tools import make_vg_demo


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    paths = make_vg_demo.make_demo(tmp_path_factory.mktemp("vg"), seed=3, n_images=60)
    config = sgeval.load_config(ROOT / "configs" / "vg150-demo.yaml", gt=str(paths["gt"]), pred=str(paths["pred"]),
                                zeroshot_triplets=str(paths["zeroshot"]))
    return paths, config, sgeval.evaluate(config)


def reference_inputs(paths, zeroshot=True):
    """The converted GT and predictions in the reference's in-memory form (and the zero-shot list)."""
    gt = json.loads(paths["gt"].read_text())
    test_ids = {str(i) for i in gt["test_image_ids"]}
    images = [{"image_id": str(e["image_id"]), "height": e["height"], "width": e["width"],
               "split": "test" if str(e["image_id"]) in test_ids else "train",
               "categories": [s["category_id"] for s in e["segments_info"]],
               "boxes": [a["bbox"] for a in e["annotations"]], "relations": e["relations"]} for e in gt["data"]]
    dataset = {"thing_classes": gt["thing_classes"], "stuff_classes": gt["stuff_classes"],
               "predicate_classes": gt["predicate_classes"], "images": images}
    with zipfile.ZipFile(paths["pred"]) as archive:
        predictions = json.loads(archive.read("triplets.json"))["images"]
    zeroshot = [tuple(row) for row in json.loads(paths["zeroshot"].read_text())] if zeroshot else None
    return dataset, predictions, zeroshot


def test_the_vg_demo_runs_every_step(demo):
    paths, config, results = demo
    assert results["images"]["evaluated"] > 10 and results["images"]["missing_predictions"] == 0
    assert results["config"]["task"] == "predcls" and results["task_check"]["boxes_differ"]["images"] == 0
    assert all(check["images"] == 0 for check in results["task_check"].values())
    assert 0 < results["metrics"]["R@20"] < 1 and 0 < results["metrics"]["A@20"] < 1
    assert set(results["predicate_groups"]) == {"head", "body", "tail"}
    assert not any("converted as" in warning for warning in results["warnings"])


def test_the_vg_demo_numbers_equal_the_reference(demo):
    paths, config, results = demo
    dataset, predictions, zeroshot = reference_inputs(paths)
    names = dataset["predicate_classes"]
    groups = {group: [names.index(name) for name in members] for group, members in results["predicate_groups"].items()}
    for protocol in (config.protocol, *config.protocols):
        slow = reference_evaluate(dataset, predictions, mode="box", ks=config.k, protocol=protocol, task=config.task,
                                  absent_predicates=config.absent_predicates, imr_ks=config.imr_k, zeroshot=zeroshot,
                                  groups=groups, f1=True)
        fast = results["by_protocol"][protocol]["metrics"]
        assert_close(fast, {key: value for key, value in slow["metrics"].items() if key in fast}, protocol)
        assert set(fast) <= set(slow["metrics"]), protocol
