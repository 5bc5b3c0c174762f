"""The Action Genome path end to end on generated files (tools/make_ag_demo.py): AG's annotations ->
sgeval_convert.ag.convert_gt (the filtered object file, training frames kept), the simulated
model's {video: pred} torch file -> sgeval_convert.ag.convert -> sgeval with configs/ag-demo.yaml;
STTran's numbers (with / semi / no constraint, TEMPURA's and DSG-DETR's mean recalls) against
tests/reference_ag.py, the fair protocols (zR, IMR included) against tests/reference.py; the ag
recipe, sgeval report's columns of an ag headline, a per-video test loop, and the demo table of
docs/action-genome.md."""

import csv
import io
import json

import pytest
from click.testing import CliRunner
from conftest import ROOT, sgeval

import sgeval_report
from tests import reference_ag
from tests.reference import reference_evaluate
from tests.core.test_reference import assert_close
from tests.convert.test_vg_demo import reference_inputs
from sgeval_convert import ag
from sgeval_convert import recipe as convert_recipe
from tools import make_ag_demo

FAMILIES = {"with": ("R", "mR", "fmR"), "semi": ("semiR", "mSemiR", "fmSemiR"), "no": ("ngR", "mNgR", "fmNgR")}


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """The demo's files (12 test videos, 3 of them dropped for their length), configs/ag-demo.yaml
    pointed at them, and its results."""
    paths = make_ag_demo.make_demo(tmp_path_factory.mktemp("ag"), seed=6, n_videos=12)
    files = {key: str(paths[key]) for key in ("gt", "pred")}
    config = sgeval.load_config(ROOT / "configs" / "ag-demo.yaml", **files)
    results = sgeval.evaluate(config)
    return paths, config, results


def test_the_ag_demo_runs_every_step(demo):
    paths, config, results = demo
    loader = json.loads(paths["gt"].read_text())["info"]["loader_counts"]["test"]
    assert loader == {"frames_without_person_box": 5, "videos_of_2_frames": 3}  # STTran's rules at work
    assert results["config"]["protocol"] == "ag" and results["images"]["missing_predictions"] == 0
    assert results["images"]["evaluated"] > 30
    assert set(results["by_protocol"]) == {"ag", "unique", "singlempo", "multimpo"}
    metrics = results["metrics"]
    assert 0 < metrics["R@10"] <= metrics["R@100"] < metrics["ngR@100"] < 1
    assert all(0 < metrics[f"{family}@20"] < 1 for families in FAMILIES.values() for family in families)
    assert 0 < metrics["vR@20"] < 1
    unique = results["by_protocol"]["unique"]["metrics"]
    assert 0 <= unique["zR@20"] <= 1 and 0 < unique["IMR@10"] < 1 and 0 < unique["wIMR@10"] < 1


def test_the_ag_demo_numbers_equal_sttrans_reference(demo):
    paths, config, results = demo
    slow, frames = reference_ag.evaluate(paths["gt"], paths["pred"])
    assert results["images"]["evaluated"] == len(frames)
    metrics = results["by_protocol"]["ag"]["metrics"]
    for constraint, (recall, tempura, frame_mean) in FAMILIES.items():
        for k in reference_ag.KS:
            expected = slow[constraint]
            assert metrics[f"{recall}@{k}"] == pytest.approx(expected["R"][k], abs=1e-12), (constraint, k)
            assert metrics[f"{tempura}@{k}"] == pytest.approx(expected["mR_tempura"][k], abs=1e-12), (constraint, k)
            assert metrics[f"{frame_mean}@{k}"] == pytest.approx(expected["mR_dsgdetr"][k], abs=1e-12), (constraint, k)


def test_the_ag_demo_fair_protocols_equal_the_reference(demo):
    paths, config, results = demo
    dataset, predictions, _ = reference_inputs(paths, zeroshot=False)
    for protocol in config.protocols:
        slow = reference_evaluate(dataset, predictions, mode="box", ks=config.k, protocol=protocol,
                                  absent_predicates=config.absent_predicates, imr_ks=config.imr_k, task=config.task)
        fast = results["by_protocol"][protocol]["metrics"]
        assert_close(fast, {key: value for key, value in slow["metrics"].items() if key in fast}, protocol)


def test_the_demo_s_raw_output_converts_by_a_recipe(demo, tmp_path):
    paths = demo[0]
    config = tmp_path / "ag.yaml"
    config.write_text(f"gt: {paths['gt']}\npred: {tmp_path / 'ag.zip'}\nprotocol: ag\ntask: sgdet\n")
    (tmp_path / "convert").mkdir()
    (tmp_path / "convert" / "ag.yaml").write_text(f"family: ag\nraw: {paths['raw']}\ntask: sgdet\n")
    with pytest.raises(convert_recipe.common.ConvertError, match="'attention' is required for family ag"):
        convert_recipe.prepare(config)
    (tmp_path / "convert" / "ag.yaml").write_text(f"family: ag\nraw: {paths['raw']}\ntask: sgdet\nattention: logits\n")
    message, summary = convert_recipe.prepare(config, workers=2)
    assert message.startswith("converting") and summary["task:sgdet"] == summary["images"]
    assert (tmp_path / "ag.zip").read_bytes() == paths["pred"].read_bytes()
    assert "is up to date" in convert_recipe.prepare(config)[0]


def test_sgeval_report_prints_the_three_constraints_of_an_ag_headline(demo, tmp_path):
    results = demo[2]
    path = tmp_path / "sttran.json"
    path.write_text(json.dumps(results))
    text = CliRunner().invoke(sgeval_report.main, [str(path), "--format", "csv", "--tables", "main"],
                              catch_exceptions=False).output
    header, row = list(csv.reader(io.StringIO(text)))[1:3]  # after its 'table,main' line
    families = ("R", "semiR", "ngR", "mR")
    assert header == ["Model"] + [f"{family}@{k}" for family in families for k in ("10", "20", "50", "100")]
    assert [float(value) for value in row[1:]] == pytest.approx(
        [100 * results["metrics"][key] for key in header[1:]])
    fair = CliRunner().invoke(sgeval_report.main, [str(path), "--tables", "main", "--protocol", "unique"],
                              catch_exceptions=False).output
    assert "| R@10 |" in fair and "semiR" not in fair  # another protocol: the usual R, mR


def test_a_test_loop_per_video_gives_the_converted_file_s_numbers(demo):
    """docs/evaluator.md's recipe for STTran's test.py: per video image_arrays, then update per frame."""
    paths, config, results = demo
    evaluator = sgeval.Evaluator(config)
    frames_of = {}
    for image in evaluator.gt.images:  # the video's frames in order: the video part of image_id
        frames_of.setdefault(image.image_id.split("/")[0], []).append(image)
    preds = ag.load_predictions(paths["raw"])
    for video, images in frames_of.items():
        arrays = ag.image_arrays(preds[video], images, len(evaluator.gt.object_classes), task="sgdet",
                                 attention="logits")
        for image, frame in zip(images, arrays):
            evaluator.update(image.image_id, **frame)
    assert json.dumps(evaluator.compute()["by_protocol"]) == json.dumps(results["by_protocol"])


GUIDE_ROWS = {  # docs/action-genome.md's demo table: row label -> the keys of its cells
    "R@10 / 20 / 50 (with constraint)": ("R@10", "R@20", "R@50"),
    "semiR@10 / 20 / 50": ("semiR@10", "semiR@20", "semiR@50"),
    "ngR@10 / 20 / 50 (no constraint)": ("ngR@10", "ngR@20", "ngR@50"),
    "mR@20 / 50 (`ag`: TEMPURA's)": ("mR@20", "mR@50"), "fmR@20 / 50 (DSG-DETR's)": ("fmR@20", "fmR@50"),
    "mNgR@50": ("mNgR@50",), "vR@20 / 50 (video means)": ("vR@20", "vR@50"),
    "zR@50 / ngzR@50": ("zR@50", "ngzR@50"), "IMR@10 / wIMR@10": ("IMR@10", "wIMR@10")}


def test_the_guide_s_demo_table_is_make_demo_ag_s(tmp_path):
    paths = make_ag_demo.make_demo(tmp_path)  # make demo-ag's defaults
    config = sgeval.load_config(ROOT / "configs" / "ag-demo.yaml", gt=str(paths["gt"]), pred=str(paths["pred"]))
    by_protocol = sgeval.evaluate(config)["by_protocol"]
    table = "| demo-ag" + (ROOT / "docs" / "action-genome.md").read_text().split("| demo-ag", 1)[1].split("\n\n")[0]
    header, _, *lines = [line.strip("|").split("|") for line in table.splitlines()]
    protocols = [cell.strip(" `").split("`")[0] for cell in header[1:]]  # `ag` (STTran) -> ag
    assert protocols == ["ag", "unique", "singlempo", "multimpo"]
    rows = {cells[0].strip(): [cell.strip() for cell in cells[1:]] for cells in lines}
    assert set(rows) == set(GUIDE_ROWS)
    for label, keys in GUIDE_ROWS.items():
        for protocol, cell in zip(protocols, rows[label]):
            expected = [by_protocol[protocol]["metrics"].get(key) for key in keys]
            shown = " / ".join(f"{100 * value:.1f}" for value in expected) if None not in expected else ""
            assert cell == shown, (label, protocol)
