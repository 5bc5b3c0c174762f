"""sgeval's ``sgb`` protocol against Scene-Graph-Benchmark.pytorch's own numbers, on generated VG-like data.

tests/data/sgb/sgb-<seed>.zip each hold a box-mode GT (gt.json: what SGB's load_graphs and
get_groundtruth give, duplicate relation rows kept), a zero-shot set (zeroshot.json, 0-based), the
predictions SGB scored in each task (pred_<task>.json, after its resize; ng_triplets = SGB's
no-graph-constraint ranking, stable) and what SGB's VG relation evaluation, run unmodified at commit
6f75881, gives for them (sgb_<task>.json). They are written by ``make check-sgb SGB=<checkout>``
(tools/sgb_check/make_fixtures.py; its README says what the data exercise).

Checked, to 1e-12: R, ngR, zR, ngzR, mR and mNgR at 20, 50 and 100, and the number of images SGB
recorded (evaluated - images_left_out), in sgdet, sgcls and predcls (``task``), and A@k in sgcls and
predcls (SGB reports it for those two only).
"""

import json

import pytest
from conftest import ROOT, sgeval, unpacked

DATA = ROOT / "tests" / "data" / "sgb"
KS = ("20", "50", "100")
FAMILIES = ("R", "ngR", "zR", "ngzR", "mR", "mNgR")


@pytest.fixture(scope="module", params=sorted(path.stem for path in DATA.glob("*.zip")))
def case(request, tmp_path_factory):
    return unpacked(DATA / f"{request.param}.zip", tmp_path_factory)


def evaluate(case, task):
    options = {"gt": str(case / "gt.json"), "pred": str(case / f"pred_{task}.json"), "protocol": "sgb",
               "zeroshot_triplets": str(case / "zeroshot.json"), "k": ",".join(KS), "absent_predicates": "zero",
               "task": task}
    return sgeval.evaluate(sgeval.load_config(**options))


def sgb_numbers(case, task):
    return json.loads((case / f"sgb_{task}.json").read_text())


@pytest.mark.parametrize("task", ["sgdet", "sgcls", "predcls"])
def test_sgeval_gives_sgb_numbers(case, task):
    sgb, results = sgb_numbers(case, task), evaluate(case, task)
    keys = [f"{family}@{k}" for family in FAMILIES for k in KS]
    assert {key: results["metrics"][key] for key in keys} == pytest.approx({key: sgb[key] for key in keys},
                                                                           abs=1e-12, rel=0)
    assert results["images"]["evaluated"] - results["images_left_out"] == sgb["images_recorded"]


@pytest.mark.parametrize("task", ["sgcls", "predcls"])
def test_pair_accuracy(case, task):
    sgb, results = sgb_numbers(case, task), evaluate(case, task)
    keys = [f"A@{k}" for k in KS]
    assert {key: results["metrics"][key] for key in keys} == pytest.approx({key: sgb[key] for key in keys},
                                                                           abs=1e-12, rel=0)
