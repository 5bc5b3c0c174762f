"""sgeval's ``ag`` protocol against STTran's, TEMPURA's and DSG-DETR's own Action Genome numbers
(tests/data/ag, written by ``make check-ag``; tools/ag_check/README.md lists every rule), on the
files ``sgeval convert ag-gt`` / ``sgeval convert ag`` make of them, in predcls, sgcls and sgdet.

Checked to 1e-9: R@10/20/50/100 with (R), semi (semiR) and no constraint (ngR) and every frame's
recall (per_image's hits over its GT rows), for each tool's input; TEMPURA's mean recall (mR,
mSemiR, mNgR: pooled over the frames) and DSG-DETR's (fmR, fmSemiR, fmNgR: frame means); the fair
protocols run beside it on the same file; an Evaluator fed with ``sgeval_convert.ag.image_arrays``
gives the file's numbers bit for bit."""

import json
import zipfile

import pytest

from conftest import sgeval
from tests.oracles.test_ag_oracle import FIXTURES, TOOL_INPUT, converted, fixture_dir

TASKS = ("predcls", "sgcls", "sgdet")
FAMILIES = {"with": ("R", "mR", "fmR"), "semi": ("semiR", "mSemiR", "fmSemiR"), "no": ("ngR", "mNgR", "fmNgR")}
PER_IMAGE = {"with": "R@", "semi": "semiR@", "no": "ngR@"}
KS = ("10", "20", "50", "100")
TOLERANCE = 1e-9


@pytest.fixture(scope="module", params=FIXTURES, ids=lambda p: p.stem)
def folder(request, tmp_path_factory):
    return fixture_dir.__wrapped__(request, tmp_path_factory)


@pytest.mark.parametrize("task", TASKS)
def test_the_ag_protocol_gives_the_tools_numbers(folder, task, tmp_path):
    oracle = json.loads((folder / f"oracle_{task}.json").read_text())
    for tool in TOOL_INPUT:
        gt, pred = converted(folder, task, tool)
        per_image = tmp_path / f"{tool}.jsonl"
        results = sgeval.evaluate({"gt": str(gt), "pred": str(pred), "protocol": "ag", "protocols": ["unique"],
                                   "k": list(KS), "task": task, "per_image": str(per_image)})
        lines = [json.loads(line) for line in per_image.read_text().splitlines()]
        assert [line["image_id"] for line in lines] == oracle["frames"]
        metrics = results["metrics"]
        for constraint, (recall, tempura, frames) in FAMILIES.items():
            expected = oracle[tool][constraint]
            for k in KS:
                where = f"{tool} {task} {constraint} @{k}"
                assert metrics[f"{recall}@{k}"] == pytest.approx(expected["R"][k], abs=TOLERANCE), where
                got = [line["hits"]["ag"][f"{PER_IMAGE[constraint]}{k}"] / line["hits"]["ag"]["gt_relations"]
                       for line in lines]
                assert got == pytest.approx(expected["per_frame"][k], abs=TOLERANCE), where
                rule = {"tempura": tempura, "dsgdetr": frames}.get(tool)
                if rule:
                    assert metrics[f"{rule}@{k}"] == pytest.approx(expected["mR"][k], abs=TOLERANCE), where
        assert "R@10" in results["by_protocol"]["unique"]["metrics"]
        # STTran's sgcls / predcls hand the model the GT's pairs: no "restricted to GT pairs" warning
        assert not [line for line in results["warnings"] if "restricted to GT pairs" in line]


def test_an_evaluator_fed_with_image_arrays_gives_the_file_numbers(folder):
    gt, pred = converted(folder, "sgdet", "sttran")
    config = {"gt": str(gt), "protocol": "ag", "protocols": ["unique", "sgb"], "k": list(KS), "task": "sgdet"}
    expected = sgeval.evaluate({**config, "pred": str(pred)})
    evaluator = sgeval.Evaluator(config)
    source, records = sgeval.read_predictions(str(pred), len(evaluator.gt.object_classes),
                                              len(evaluator.gt.predicate_classes), "box")
    source.close()
    for image_id, record in records.items():
        evaluator.update(image_id, labels=record.categories, boxes=record.boxes, scores=record.scores,
                         triplets=record.triplets, ng_triplets=record.ng_triplets,
                         triplet_scores=record.triplet_scores, ng_triplet_scores=record.ng_triplet_scores,
                         row_lists=record.row_lists)
    assert json.dumps(evaluator.compute()["by_protocol"]) == json.dumps(expected["by_protocol"])


def test_a_record_without_the_semi_list_is_one_error_line(folder, tmp_path):
    gt, pred = converted(folder, "sgdet", "sttran")
    with zipfile.ZipFile(pred) as archive:
        data = json.loads(archive.read("triplets.json"))
    record = next(r for r in data["images"] if r["triplets"])
    del record["row_lists"]["semi"]
    (tmp_path / "p.json").write_text(json.dumps(data))
    with pytest.raises(sgeval.SGEvalError) as info:
        sgeval.evaluate({"gt": str(gt), "pred": str(tmp_path / "p.json"), "protocol": "ag", "k": list(KS)})
    assert info.value.problems == [f"{tmp_path / 'p.json'}: image {record['id']}: the ag protocol reads STTran's three "
                                   f"lists: field 'row_lists.semi' is required (sgeval convert ag writes row_lists "
                                   f"with, semi and no)"]
