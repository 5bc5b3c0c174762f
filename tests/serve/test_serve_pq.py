"""A benchmark that shows panoptic quality: its settings (pq turned on, mask mode needed), its
columns (the PQ keys once, beside the protocols), and a board ranked by PQ whose numbers are
sgeval's own."""

import time

import pytest
from starlette.testclient import TestClient

from conftest import sgeval
from sgeval_serve import boards, jobs
from sgeval_serve.app import create_app
from sgeval_serve.settings import load_settings
from tools import make_demo

SERVICE_YAML = """
title: PQ benchmarks
state_dir: {state}
workers: 1
job_timeout: 120
benchmarks:
  psg-pq:
    gt: {gt}
    gt_seg: {seg}
    protocols: [singlempo, unique]
    metrics: [mR@50, PQ, SQ, RQ, PQ_th, R@50]
    order_by: PQ
    evaluation: {{pq_merge: score-order}}
"""


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    out = tmp_path_factory.mktemp("serve-pq")
    gt, pred = make_demo.make_demo(out / "data")
    return {"gt": gt, "seg": out / "data" / "panoptic", "A": pred, "B": pred.parent / "pred-b.zip", "dir": out}


def settings_of(folder, text):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "serve.yaml").write_text(text)
    return load_settings(folder / "serve.yaml")


def test_pq_keys_are_columns_once_and_turn_pq_on(demo, tmp_path):
    benchmark = settings_of(tmp_path, SERVICE_YAML.format(state=tmp_path / "state", gt=demo["gt"],
                                                          seg=demo["seg"])).benchmarks["psg-pq"]
    assert benchmark.protocol_metrics == ("mR@50", "R@50")
    assert benchmark.pq_metrics == ("PQ", "SQ", "RQ", "PQ_th")
    assert benchmark.evaluation == {"pq_merge": "score-order", "metrics": ["R", "mR"], "pq": True}
    config = benchmark.sgeval_config(demo["A"])
    assert config.pq is True and config.pq_merge == "score-order"
    assert [column["key"] for column in boards.columns(benchmark)] == [
        "singlempo:mR@50", "singlempo:R@50", "unique:mR@50", "unique:R@50",
        "panoptic_quality:PQ", "panoptic_quality:SQ", "panoptic_quality:RQ", "panoptic_quality:PQ_th"]
    assert boards.default_sort(benchmark) == "panoptic_quality:PQ"
    results = sgeval.evaluate(config)
    summary = jobs.summary(results, benchmark)
    assert summary["metrics"]["panoptic_quality"] == {key: results["metrics"][key] for key in benchmark.pq_metrics}
    assert summary["metrics"]["unique"] == {key: results["by_protocol"]["unique"]["metrics"][key]
                                            for key in ("mR@50", "R@50")}


@pytest.mark.parametrize("benchmark_yaml, problem", [
    ("gt: x.json\n    metrics: [R@50, PQ]\n", "the metrics show panoptic quality (PQ), which needs 'gt_seg' (mask "
     "mode): it matches segments by their pixels, and boxes have no such segments"),
    ("gt: x.json\n    gt_seg: seg\n    metrics: [R@50, PQ_st]\n    evaluation: {pq: false}\n",
     "the metrics show panoptic quality (PQ_st), so evaluation key 'pq' cannot be False"),
    ("gt: x.json\n    gt_seg: seg\n    metrics: [PQ, SQ]\n",
     "'metrics' must name a metric of the protocols too (R@50, mR@50, ...), not only panoptic quality"),
])
def test_pq_settings_that_cannot_work_are_named(tmp_path, benchmark_yaml, problem):
    with pytest.raises(sgeval.SGEvalError) as error:
        settings_of(tmp_path, f"benchmarks:\n  b:\n    {benchmark_yaml}")
    assert error.value.problems == [f"{tmp_path / 'serve.yaml'}: benchmarks.b: {problem}"]


def wait(client, submission_id, headers, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        data = client.get(f"/api/submissions/{submission_id}", headers=headers).json()
        if data["entry"]["status"] in ("done", "failed"):
            return data
        time.sleep(0.2)
    raise AssertionError(f"submission {submission_id} did not finish")


def test_a_board_ranks_by_pq(demo, tmp_path):
    settings = settings_of(tmp_path, SERVICE_YAML.format(state=tmp_path / "state", gt=demo["gt"], seg=demo["seg"]))
    app = create_app(settings)
    with TestClient(app) as client:
        headers = {"Authorization": f"Bearer {app.state.store.add_user('ann')}"}
        expected = {}
        for name in ("A", "B"):
            with open(demo[name], "rb") as file:
                response = client.post("/api/b/psg-pq/submissions", headers=headers, data={"method": f"Model {name}"},
                                       files={"file": (demo[name].name, file)})
            assert response.status_code == 201, response.text
            data = wait(client, response.json()["id"], headers)
            assert data["entry"]["status"] == "done", data["entry"]["reason"]
            client.post(f"/api/submissions/{data['entry']['id']}/publish", headers=headers)
            direct = sgeval.evaluate(settings.benchmarks["psg-pq"].sgeval_config(demo[name]))
            expected[f"Model {name}"] = {key: direct["metrics"][key] for key in ("PQ", "SQ", "RQ", "PQ_th")}
            assert data["entry"]["metrics"]["panoptic_quality"] == expected[f"Model {name}"]
        board = client.get("/api/b/psg-pq").json()
        assert board["sort"] == "panoptic_quality:PQ" and board["order"] == "desc"
        by_pq = sorted(expected, key=lambda method: -expected[method]["PQ"])
        assert [entry["method"] for entry in board["entries"]] == by_pq
        board = client.get("/api/b/psg-pq?sort=panoptic_quality:SQ&order=asc").json()
        assert [entry["method"] for entry in board["entries"]] == sorted(expected, key=lambda m: expected[m]["SQ"])
        page = client.get("/b/psg-pq").text
        assert "panoptic quality</th>" in page and f"{100 * expected[by_pq[0]]['PQ']:.2f}" in page
        first = board["entries"][0]
        entry_page = client.get(f"/submissions/{first['id']}", headers=headers).text
        assert 'id="panoptic-quality"' in entry_page and f"{100 * expected[first['method']]['SQ']:.2f}" in entry_page
