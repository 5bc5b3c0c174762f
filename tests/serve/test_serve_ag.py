"""An Action Genome board on the service: the ag protocol's own keys (semiR@k, fmR@k, vR@k, ...)
are accepted as leaderboard metrics when ag is among the benchmark's protocols, the evaluation
asks sgeval only for the shared families, and an evaluation of the AG demo fills the board's
columns (ag's keys under ag, '-' under the fair protocols) and sorts by them."""

import pytest
from conftest import ROOT, sgeval

from sgeval_serve import boards, jobs
from sgeval_serve.settings import load_settings
from tools import make_ag_demo

BOARD = """benchmarks:
  ag-demo:
    gt: {gt}
    task: sgdet
    protocols: {protocols}
    metrics: [R@20, semiR@20, ngR@20, mR@50, fmR@50, vR@20]
    order_by: semiR@20
    evaluation: {{k: [10, 20, 50, 100]}}
"""


def board(tmp_path, gt="gt.json", protocols="[ag, unique]"):
    path = tmp_path / "serve.yaml"
    path.write_text(BOARD.format(gt=gt, protocols=protocols))
    return path


def test_an_ag_board_accepts_the_ag_protocols_own_keys(tmp_path):
    benchmark = load_settings(board(tmp_path)).benchmarks["ag-demo"]
    assert benchmark.headline == "ag" and benchmark.order_by == "semiR@20"
    assert benchmark.evaluation["metrics"] == ["R", "mR", "ngR"]  # semiR, fmR, vR come with the protocol


def test_the_ag_keys_without_the_ag_protocol_are_refused(tmp_path):
    path = board(tmp_path, protocols="[unique, singlempo]")
    with pytest.raises(sgeval.SGEvalError) as error:
        load_settings(path)
    where = f"{path}: benchmarks.ag-demo"
    assert error.value.problems == [f"{where}: metric '{key}' is a key of the ag protocol; add it to 'protocols'"
                                    for key in ("semiR@20", "fmR@50", "vR@20")]


def test_the_example_board_config_is_an_ag_board():
    benchmark = load_settings(ROOT / "configs" / "serve" / "ag-demo.yaml").benchmarks["ag-sgdet-demo"]
    assert benchmark.headline == "ag" and "semiR@20" in benchmark.metrics


def test_an_evaluation_of_the_ag_demo_fills_and_sorts_the_board(tmp_path):
    paths = make_ag_demo.make_demo(tmp_path / "demo", seed=2, n_videos=6)
    benchmark = load_settings(board(tmp_path, gt=paths["gt"])).benchmarks["ag-demo"]
    results = sgeval.evaluate(benchmark.sgeval_config(paths["pred"]))
    shown = jobs.summary(results, benchmark)["metrics"]
    assert shown["ag"] == {key: results["by_protocol"]["ag"]["metrics"][key] for key in benchmark.metrics}
    assert all(value is not None for value in shown["ag"].values())
    assert shown["unique"]["R@20"] is not None and shown["unique"]["semiR@20"] is None
    entries = [{"metrics": shown, "id": 1, "created": 1}, {"metrics": {"ag": {"semiR@20": 2.0}}, "id": 2, "created": 2}]
    ordered, sort, order = boards.sort_entries(entries, benchmark)
    assert sort == "ag:semiR@20" and order == "desc" and [entry["id"] for entry in ordered] == [2, 1]
