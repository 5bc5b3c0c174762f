"""Predicate confusion (results' predicate_confusion) and the per-image file (per_image), on
hand-computed cases. tests/core/test_reference.py and tests/core/test_tasks.py compare the confusion with
the plain-Python reference on random data."""

import json

import pytest
from conftest import BOTTOM, TOP_LEFT, TOP_RIGHT, confusion_cells, gt_image, pred_image, write_case

import sgeval

RIDING, ON, BESIDE, HOLDING = range(4)  # conftest.PREDICATES


def case(tmp_path, mode):
    """Image 1: person 0 rides and is on horse 1 (the row [0, 1, on] twice in the file), person 2
    is beside the horse and holds person 0. The prediction has the three GT instances and a copy
    of person 0 (instance 3); its rows: [0, 1, on], [3, 1, riding], [2, 1, holding].
    Image 2: person 0 beside horse 1; the prediction has the instances and no rows."""
    images = [gt_image(1, [TOP_LEFT, BOTTOM, TOP_RIGHT], [0, 1, 0],
                       [[0, 1, RIDING], [0, 1, ON], [0, 1, ON], [2, 1, BESIDE], [2, 0, HOLDING]]),
              gt_image(2, [TOP_LEFT, BOTTOM], [0, 1], [[0, 1, BESIDE]])]
    predictions = [pred_image(1, [TOP_LEFT, BOTTOM, TOP_RIGHT, TOP_LEFT], [0, 1, 0, 0],
                              [[0, 1, ON], [3, 1, RIDING], [2, 1, HOLDING]], scores=[0.9, 0.8, 0.7, 0.6]),
                   pred_image(2, [TOP_LEFT, BOTTOM], [0, 1], [])]
    return write_case(tmp_path, images, predictions, mode=mode)


# unique / singlempo: the copy (instance 3) is unmatched (singlempo: merged into instance 0, whose
# pair the graph constraint already took), so riding finds its pair with "on".
# multimpo / openpsg / sgb: the copy maps to person 0 too, so [3, 1, riding] hits riding.
# Image 2: "beside" has no row (openpsg and sgb leave the image out: it has no rows);
# sgb counts the repeated GT row of "on".
FIRST_ROW_ON = {("riding", "on"): 1, ("on", "on"): 1, ("beside", "holding"): 1, ("holding", None): 1,
                ("beside", None): 1}
EXPECTED = {
    "unique": FIRST_ROW_ON,
    "singlempo": FIRST_ROW_ON,
    "multimpo": {**FIRST_ROW_ON, ("riding", "riding"): 1, ("riding", "on"): 0},
    "openpsg": {("riding", "riding"): 1, ("on", "on"): 1, ("beside", "holding"): 1, ("holding", None): 1},
    "sgb": {("riding", "riding"): 1, ("on", "on"): 2, ("beside", "holding"): 1, ("holding", None): 1},
}


def evaluate(values, **extra):
    return sgeval.evaluate(sgeval.make_config({**values, "protocols": list(sgeval.RECALL_PROTOCOLS), **extra}))


@pytest.mark.parametrize("mode", ["mask", "box"])
def test_confusion_counts_the_first_row_on_each_gt_pair(tmp_path, mode):
    results = evaluate(case(tmp_path, mode), k=["1", "20"])
    for protocol, expected in EXPECTED.items():
        section = results["by_protocol"][protocol]["predicate_confusion"]
        assert section["k"] == "50"
        assert confusion_cells(section) == {cell: n for cell, n in expected.items() if n}, protocol
    assert results["predicate_confusion"] == results["by_protocol"]["unique"]["predicate_confusion"]


def test_confusion_k_cuts_the_rows(tmp_path):
    results = evaluate(case(tmp_path, "box"), confusion_k="1")
    only_first = {("riding", "on"): 1, ("on", "on"): 1, ("beside", None): 2, ("holding", None): 1}
    assert confusion_cells(results["by_protocol"]["unique"]["predicate_confusion"]) == only_first
    assert confusion_cells(results["by_protocol"]["sgb"]["predicate_confusion"]) == {
        ("riding", "on"): 1, ("on", "on"): 2, ("beside", None): 1, ("holding", None): 1}
    relative = evaluate(case(tmp_path, "box"), confusion_k="x0.4")  # image 1: 0.4 x 4 GT relations = 2 rows
    assert relative["predicate_confusion"]["k"] == "x0.4"
    assert confusion_cells(relative["predicate_confusion"]) == {
        ("riding", "on"): 1, ("on", "on"): 1, ("beside", None): 2, ("holding", None): 1}  # row 2 is the copy's


def test_confusion_diagonal_is_the_pooled_recall(tmp_path):
    results = evaluate(case(tmp_path, "mask"), k=["50"], aggregation="pooled")
    confusion = results["predicate_confusion"]
    for name, recall in results["per_predicate"]["mR@50"].items():
        row = confusion["counts"].get(name, {})
        total = sum(row.values()) + confusion["no_prediction"].get(name, 0)
        assert total == results["gt_relations_per_predicate"][name]
        assert row.get(name, 0) / total == recall


@pytest.mark.parametrize("value, problem", [
    ("0", "confusion_k value '0' is not a positive integer or x<factor>"),
    ("20,50", "confusion_k takes one cut-off, not 2"),
    ([], "'confusion_k' needs at least one value"),
])
def test_a_bad_confusion_k_is_an_error(tmp_path, value, problem):
    with pytest.raises(sgeval.SGEvalError) as error:
        sgeval.make_config({"gt": "g.json", "pred": "p.json", "confusion_k": value})
    assert error.value.problems == [f"config: {problem}"]


def read_lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_per_image_lines_hold_the_hits_behind_each_recall(tmp_path):
    values = case(tmp_path, "box")
    path = tmp_path / "out" / "images.jsonl"
    evaluate(values, k=["1", "20"], metrics=["R", "PR", "InstR"], per_image=str(path))
    first, second = read_lines(path)
    assert (first["image_id"], first["gt_relations"], first["predicted"]) == ("1", 4, True)
    assert first["hits"]["unique"] == {"gt_relations": 4, "R@1": 1, "R@20": 1, "gt_pairs": 3, "PR@1": 1, "PR@20": 2,
                                       "gt_instances": 3, "InstR": 3}
    assert first["hits"]["openpsg"]["R@20"] == 2 and first["hits"]["multimpo"]["R@20"] == 2
    assert (first["hits"]["sgb"]["gt_relations"], first["hits"]["sgb"]["R@20"]) == (5, 3)  # every row of the file
    assert first["audit"]["duplicate_instances"] == 1
    assert second["hits"]["unique"]["gt_relations"] == 1 and second["hits"]["unique"]["R@20"] == 0
    assert second["hits"]["openpsg"] == {"gt_relations": 0, "R@1": 0, "R@20": 0, "gt_pairs": 0, "PR@1": 0,
                                         "PR@20": 0, "gt_instances": 0, "InstR": 0}  # left out: no rows


def test_per_image_lines_follow_the_metrics_and_add_up_to_the_results(tmp_path):
    values = case(tmp_path, "mask")
    path = tmp_path / "images.jsonl"
    results = evaluate(values, metrics=["mR", "ngR", "zR", "ngzR", "Rinf"], aggregation="pooled", audit=False,
                       per_image=str(path))
    lines = read_lines(path)
    assert [line["image_id"] for line in lines] == ["1", "2"] and "audit" not in lines[0]
    assert set(lines[0]["hits"]["unique"]) == {"gt_relations", "gt_zeroshot", "R@inf"} | {  # R: behind mR
        f"{family}@{k}" for family in ("R", "ngR", "zR", "ngzR") for k in sgeval.Config.k}
    for protocol, section in results["by_protocol"].items():
        hits = [line["hits"][protocol] for line in lines if line["hits"][protocol]["gt_relations"]]
        recall = [h["ngR@x1"] / h["gt_relations"] for h in hits]  # openpsg, sgb: per-image means
        pooled = sum(h["ngR@x1"] for h in hits) / sum(h["gt_relations"] for h in hits)
        expected = sum(recall) / len(recall) if sgeval.PROTOCOLS[protocol].tool else pooled
        assert section["metrics"]["ngR@x1"] == pytest.approx(expected, rel=1e-15), protocol


def test_per_image_file_is_the_same_for_any_number_of_workers(tmp_path):
    values = case(tmp_path, "mask")
    texts = []
    for workers in (1, 2):
        path = tmp_path / f"images-{workers}.jsonl"
        results = evaluate(values, workers=workers, per_image=str(path))
        texts.append((path.read_bytes(), json.dumps(results["by_protocol"], sort_keys=True)))
    assert texts[0] == texts[1]


def test_an_unwritable_per_image_path_fails_before_evaluating(tmp_path):
    values = case(tmp_path, "box")
    (tmp_path / "file").write_text("")
    with pytest.raises(sgeval.SGEvalError) as error:
        evaluate(values, per_image=str(tmp_path / "file" / "images.jsonl"))
    assert error.value.problems[0].startswith(f"{tmp_path / 'file' / 'images.jsonl'}: cannot write the results "
                                              f"(per_image):")
