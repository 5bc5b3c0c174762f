"""The oi protocol (PySGG's Open Images evaluation) on hand-computed cases: each rule, with the
value the nearest other rule would give written beside the expected one.

Vocabulary: objects A, B, C; predicates p0..p3 (p1..p3 absent unless a case uses them), so mAP
divides by 4. Boxes use the +1 pixel convention: [0, 0, 9, 9] is 10 x 10 pixels.
"""

import json

import pytest
from conftest import sgeval

OBJECTS = ["A", "B", "C"]
PREDICATES = ["p0", "p1", "p2", "p3"]
S, O = [0, 0, 9, 9], [20, 0, 29, 9]  # a GT subject and object box


def write_oi_case(tmp_path, images, records):
    """images: [(boxes, categories, relations)], test images "0", "1", ...; records: {image index:
    (boxes, categories, ng rows, ng scores[, triplets])} -> config values (box mode)."""
    data = [{"image_id": str(i), "height": 100, "width": 100,
             "segments_info": [{"id": j + 1, "category_id": c} for j, c in enumerate(categories)],
             "annotations": [{"bbox": box} for box in boxes], "relations": relations}
            for i, (boxes, categories, relations) in enumerate(images)]
    gt = tmp_path / "gt.json"
    gt.write_text(json.dumps({"data": data, "thing_classes": OBJECTS, "stuff_classes": [],
                              "predicate_classes": PREDICATES, "test_image_ids": [str(i) for i in range(len(images))]}))
    predictions = []
    for index, (boxes, categories, rows, scores, *triplets) in records.items():
        predictions.append({"id": str(index), "instances": [{"category": c, "bbox": b} for c, b in zip(categories, boxes)],
                            "triplets": triplets[0] if triplets else rows, "ng_triplets": rows,
                            "ng_triplet_scores": scores})
    pred = sgeval.write_predictions(tmp_path / "pred.json", predictions)
    return {"gt": str(gt), "pred": str(pred), "protocol": "oi", "k": ["1", "50", "200"]}


def oi(tmp_path, images, records, **extra):
    results = sgeval.evaluate(sgeval.make_config({**write_oi_case(tmp_path, images, records), **extra}))
    return results["metrics"], results["per_predicate"]


def about(value):
    """PySGG divides by (count + 1e-12): values are 1e-12 off the fractions."""
    return pytest.approx(value, abs=1e-9)


ONE_RELATION = [([S, O], [0, 1], [[0, 1, 0]])]  # A p0 B


def test_recall_takes_iou_of_exactly_half_ap_needs_more(tmp_path):
    """The subject box [0, 0, 9, 4] has IoU 50 / 100 = 0.5 with [0, 0, 9, 9] (+1 pixel; without it
    36 / 81). R@k counts a hit at IoU >= 0.5 (oi_evaluation.py:498); the relationship AP needs
    more than 0.5 (ap_eval_rel.py:194): a false positive. The phrase's union boxes are equal."""
    metrics, per_predicate = oi(tmp_path, ONE_RELATION, {0: ([[0, 0, 9, 4], O], [0, 1], [[0, 1, 0]], [0.9])})
    assert metrics["R@1"] == about(1.0)  # > 0.5 or no +1: 0
    assert per_predicate["AP_rel"] == {"p0": about(0.0)}  # >= 0.5: 1
    assert per_predicate["AP_phr"] == {"p0": about(1.0)}  # the union boxes [0, 0, 29, 9] match
    assert metrics["mAP_rel"] == about(0.0) and metrics["mAP_phr"] == about(0.25)  # over all 4 predicates (present only: 1)
    assert metrics["wmAP_phr"] == about(1.0)  # weighted by GT rows: p0 holds them all
    assert metrics["score"] == about(0.4 * 0 + 0.2 * 1 + 0.4 * 0.25)
    assert metrics["score_wtd"] == about(0.4 * 0 + 0.2 * 1 + 0.4 * 1)


def test_a_row_whose_best_gt_is_taken_is_a_false_positive(tmp_path):
    """Two GT rows of p0: g0 exactly the rows' boxes, g1 a subject of IoU 0.9. The first row takes
    g0; the second's best overlap is g0 again, taken: a false positive, though g1 is above 0.5
    (ap_eval_rel.py:188-199). AP = 0.5 (taking the next GT instead would give 1). R@1 = 1: one row
    hits both GT rows (many-to-many)."""
    images = [([S, O, [0, 0, 9, 8]], [0, 1, 0], [[0, 1, 0], [2, 1, 0]])]
    metrics, per_predicate = oi(tmp_path, images, {0: ([S, O], [0, 1], [[0, 1, 0], [0, 1, 0]], [0.9, 0.8])})
    assert per_predicate["AP_rel"] == {"p0": about(0.5)}
    assert metrics["R@1"] == about(1.0)


def test_rows_are_ranked_by_score_ties_in_written_order(tmp_path):
    """The hitting row is written second with the higher score: R@1 = 1 (as written: 0). A tie
    keeps the written order: the miss written first stays first, R@1 = 0."""
    miss = [[0, 0, 3, 3], [50, 50, 60, 60]]
    boxes, categories = [*miss, S, O], [0, 1, 0, 1]
    rows = [[0, 1, 0], [2, 3, 0]]
    metrics, _ = oi(tmp_path, ONE_RELATION, {0: (boxes, categories, rows, [0.3, 0.9])})
    assert metrics["R@1"] == about(1.0)
    metrics, _ = oi(tmp_path, ONE_RELATION, {0: (boxes, categories, rows, [0.5, 0.5])})
    assert metrics["R@1"] == about(0.0) and metrics["R@50"] == about(1.0)


def test_the_first_100_rows_scoring_above_1e_5(tmp_path):
    """Rows scoring 1e-5 are dropped (> 1e-5, oi_evaluation.py:225), and only the 100 best rows
    count (argsort_desc(...)[:100], oi_evaluation.py:211): a hit 101st, behind 100 misses of the
    same score, is not in R@200 (without the cut: 1)."""
    metrics, per_predicate = oi(tmp_path, ONE_RELATION, {0: ([S, O], [0, 1], [[0, 1, 0]], [1e-5])})
    assert metrics["R@1"] == about(0.0) and per_predicate["AP_rel"] == {"p0": about(0.0)}  # >= 1e-5: 1
    boxes, categories = [[0, 0, 3, 3], [50, 50, 60, 60], S, O], [0, 1, 0, 1]
    rows = [[0, 1, 0]] * 100 + [[2, 3, 0]]
    metrics, _ = oi(tmp_path, ONE_RELATION, {0: (boxes, categories, rows, [0.5] * 101)})
    assert metrics["R@200"] == about(0.0)


def test_duplicate_gt_rows_count_each(tmp_path):
    """A GT row written twice is two GT rows (relation_tuple keeps them on the test split): one row
    hits both (R@1 = 1) but takes one of them for the AP: 1 of 2, AP = 0.5 (deduplicated: 1)."""
    images = [([S, O], [0, 1], [[0, 1, 0], [0, 1, 0]])]
    metrics, per_predicate = oi(tmp_path, images, {0: ([S, O], [0, 1], [[0, 1, 0]], [0.9])})
    assert metrics["R@1"] == about(1.0) and per_predicate["AP_rel"] == {"p0": about(0.5)}


def test_categories_must_match_for_the_ap(tmp_path):
    """The overlap of a GT row whose subject category differs is 0 (ap_eval_rel.py:173, 187): the
    row with the exact boxes but subject C is a false positive, and hits nothing."""
    metrics, per_predicate = oi(tmp_path, ONE_RELATION, {0: ([S, O], [2, 1], [[0, 1, 0]], [0.9])})
    assert metrics["R@1"] == about(0.0) and per_predicate["AP_rel"] == {"p0": about(0.0)}


def test_ap_is_the_voc_envelope_without_a_tail(tmp_path):
    """Hit, miss, miss, hit over 3 GT rows: recall 1/3, 1/3, 1/3, 2/3, precision 1, 1/2, 1/3, 1/2;
    AP = 1/3 * 1 + 1/3 * 1/2 = 0.5 (the recall sentinel 1 comes with precision 0: crediting the
    last precision to it would give 2/3)."""
    gt_boxes = [S, O, [40, 0, 49, 9], [60, 0, 69, 9], [0, 40, 9, 49], [20, 40, 29, 49]]
    images = [(gt_boxes, [0, 1, 0, 1, 0, 1], [[0, 1, 0], [2, 3, 0], [4, 5, 0]])]
    far = [[80, 80, 85, 85], [90, 90, 95, 95]]
    boxes = [S, O, *far, [40, 0, 49, 9], [60, 0, 69, 9]]
    rows, scores = [[0, 1, 0], [2, 3, 0], [2, 3, 0], [4, 5, 0]], [0.9, 0.8, 0.7, 0.6]
    _, per_predicate = oi(tmp_path, images, {0: (boxes, [0, 1, 0, 1, 0, 1], rows, scores)})
    assert per_predicate["AP_rel"]["p0"] == about(0.5)


def test_an_image_without_a_record_counts_its_gt(tmp_path):
    """PySGG scores every test image: one without predictions adds its GT rows to R@k's
    denominator (sgb's rule would leave it out: 1.0) and to the AP's positives."""
    metrics, per_predicate = oi(tmp_path, ONE_RELATION * 2, {0: ([S, O], [0, 1], [[0, 1, 0]], [0.9])})
    assert metrics["R@1"] == about(0.5) and metrics["imgR@1"] == about(0.5)
    assert per_predicate["AP_rel"] == {"p0": about(0.5)}


def test_oi_ranks_the_ng_list_and_mr_reads_the_triplets(tmp_path):
    """The OI list is ng_triplets with their scores; mR@k (PySGG's classic, graph-constrained)
    reads triplets: here triplets miss and ng_triplets hit."""
    boxes, categories = [S, O, [60, 60, 70, 70]], [0, 1, 0]
    metrics, _ = oi(tmp_path, ONE_RELATION, {0: (boxes, categories, [[0, 1, 0]], [0.9], [[2, 1, 0]])})
    assert metrics["R@1"] == about(1.0) and metrics["mR@1"] == about(0.0)


def test_the_table_shows_the_oi_metrics(tmp_path):
    values = write_oi_case(tmp_path, ONE_RELATION, {0: ([[0, 0, 9, 4], O], [0, 1], [[0, 1, 0]], [0.9])})
    table = sgeval.format_table(sgeval.evaluate(sgeval.make_config(values)))
    assert "mAP_rel 0.0  wmAP_rel 0.0  mAP_phr 25.0  wmAP_phr 100.0  score 30.0  score_wtd 60.0" in table
    assert "oi: PySGG (Open Images)'s rules" in table


def test_scores_are_required_and_box_mode(tmp_path):
    values = write_oi_case(tmp_path, ONE_RELATION, {0: ([S, O], [0, 1], [[0, 1, 0]], [0.9])})
    data = json.loads(open(values["pred"]).read())
    del data["images"][0]["ng_triplet_scores"]
    open(values["pred"], "w").write(json.dumps(data))
    with pytest.raises(sgeval.SGEvalError, match="image 0: the oi protocol ranks the rows by their scores: "
                                                 "field 'ng_triplet_scores' is required"):
        sgeval.evaluate(sgeval.make_config(values))
    with pytest.raises(sgeval.SGEvalError, match="the oi protocol scores boxes"):
        sgeval.make_config({**values, "gt_seg": str(tmp_path)})
    evaluator = sgeval.Evaluator({"gt": values["gt"], "protocol": "oi"})
    with pytest.raises(sgeval.SGEvalError, match="field 'triplet_scores' is required"):
        evaluator.update("0", labels=[0, 1], boxes=[S, O], triplets=[[0, 1, 0]])


def test_the_evaluator_gives_the_file_numbers(tmp_path):
    images = [([S, O, [0, 0, 9, 8]], [0, 1, 0], [[0, 1, 0], [2, 1, 0]]), *ONE_RELATION]
    records = {0: ([S, O], [0, 1], [[0, 1, 0], [0, 1, 0]], [0.9, 0.8]),
               1: ([[0, 0, 9, 4], O], [0, 1], [[0, 1, 0]], [0.95])}
    values = write_oi_case(tmp_path, images, records)
    from_file = sgeval.evaluate(sgeval.make_config(values))
    evaluators = [sgeval.Evaluator({"gt": values["gt"], "protocol": "oi", "k": values["k"]}) for _ in records]
    for evaluator, (index, (boxes, categories, rows, scores)) in zip(evaluators, records.items()):
        evaluator.update(str(index), labels=categories, boxes=boxes, triplets=rows, ng_triplets=rows,
                         ng_triplet_scores=scores)
    evaluators[1].merge(evaluators[0])
    assert evaluators[1].compute()["metrics"] == from_file["metrics"]


def test_per_image_lines_hold_the_oi_hits(tmp_path):
    values = write_oi_case(tmp_path, ONE_RELATION * 2, {0: ([S, O], [0, 1], [[0, 1, 0]], [0.9])})
    sgeval.evaluate(sgeval.make_config({**values, "per_image": str(tmp_path / "lines.jsonl")}))
    lines = [json.loads(line) for line in open(tmp_path / "lines.jsonl")]
    assert [line["hits"]["oi"] for line in lines] == [{"gt_relations": 1, "R@1": 1, "R@50": 1, "R@200": 1},
                                                      {"gt_relations": 1, "R@1": 0, "R@50": 0, "R@200": 0}]


def test_a_benchmark_of_the_service_may_rank_by_score_wtd():
    from sgeval_serve import settings

    assert [settings.metric_family(key) for key in ("score_wtd", "wmAP_phr", "imgR@50", "R@50", "mR@100")] == \
        ["oi", "oi", "oi", "R", "mR"]
    problems = []
    extra = settings._evaluation({}, ["score_wtd", "R@50"], ("oi", "sgb"), "here", problems)
    assert problems == [] and extra["metrics"] == ["R"]  # oi's own keys come with the protocol
    settings._metrics({"metrics": ["score_wtd", "Q@5"]}, ("oi", "sgb"), "here", problems)
    assert problems == ["here: metric 'Q@5' is not a result key of sgeval (R@50, mR@100, PRank, ...)"]


def test_predcls_scores_the_stored_boxes(tmp_path):
    """In PredCls the recall protocols put the GT's instances in place of the prediction's; PySGG's
    Open Images pass reads the stored (resized) boxes (adapt_results, oi/__init__.py:96-111): a
    stored subject box off the GT's misses under oi (with the GT's boxes it would hit)."""
    values = write_oi_case(tmp_path, ONE_RELATION, {0: ([[50, 50, 59, 59], O], [0, 1], [[0, 1, 0]], [0.9])})
    results = sgeval.evaluate(sgeval.make_config({**values, "task": "predcls", "protocols": ["sgb"]}))
    assert results["metrics"]["R@1"] == 0.0 and results["by_protocol"]["sgb"]["metrics"]["R@1"] == 1.0
